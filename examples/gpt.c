/* gpt: a GPT-2-style model from nn pieces (learned positions, pre-LayerNorm
 * blocks, causal attention, GELU MLP, tied head), trained with AdamW,
 * warmup + cosine, clipping and gradient accumulation on a small text, then
 * sampled (top-k, with a KV cache), saved and reloaded. gpt.py is the same
 * program in PyTorch. Every step runs inside a scope (cg_scope_begin), so
 * the forward code chains ops without releasing what it makes. */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

enum { B = 8, T = 32, D = 64, H = 4, L = 2, STEPS = 150, ACCUM = 2, WARMUP = 15 };

/* The layers' modules in arrays, one slot a block, as llm.c keeps GPT-2's
 * parameters; each block is a container "blocks.i", so the parameters are
 * named as in PyTorch (blocks.0.ln1.weight, ...). */
typedef struct {
    cg_module base;
    cg_embed *tok, *pos;
    cg_norm *ln1[L], *ln2[L], *ln_f;
    cg_mha *attn[L];
    cg_ff *mlp[L];
} gpt;

static gpt *gpt_new(int64_t V, cg_rng *r)
{
    gpt *m = (gpt *)cg_module_alloc(sizeof *m, "GPT", NULL);
    m->tok = cg_module_add_child(&m->base, "tok", cg_embed_new(V, D, r));
    m->pos = cg_module_add_child(&m->base, "pos", cg_embed_new(T, D, r));
    cg_module *blocks = cg_module_add_child(&m->base, "blocks", cg_module_new("ModuleList"));
    for (int i = 0; i < L; i++) {
        cg_module *b = cg_module_append(blocks, cg_module_new("Block")); /* named "0", "1", ... */
        m->ln1[i] = cg_module_add_child(b, "ln1", cg_layernorm_new(D));
        m->attn[i] = cg_module_add_child(b, "attn", cg_mha_new(D, H, r));
        m->ln2[i] = cg_module_add_child(b, "ln2", cg_layernorm_new(D));
        m->mlp[i] = cg_module_add_child(b, "mlp", cg_ff_new(D, 4 * D, CG_ACT_GELU, r));
    }
    m->ln_f = cg_module_add_child(&m->base, "ln_f", cg_layernorm_new(D));
    return m;
}

/* ids [b, t] -> logits [b, t, V]. Training: no cache. Decoding: the new
 * tokens only, at the positions after those the cache holds. */
static cg_tensor *gpt_forward(gpt *m, cg_tensor *ids, cg_kv_cache *c)
{
    cg_tensor *x = cg_add(cg_embed_forward(m->tok, ids),
                          cg_narrow(m->pos->weight, 0, cg_kv_cache_len(c), ids->shape[1]));
    for (int i = 0; i < L; i++) { /* pre-LayerNorm block i, causal */
        cg_tensor *h = cg_norm_forward(m->ln1[i], x);
        x = cg_add(x, cg_mha_self(m->attn[i], h, true, cg_kv_cache_layer(c, i)));
        x = cg_add(x, cg_ff_forward(m->mlp[i], cg_norm_forward(m->ln2[i], x)));
    }
    return cg_linear_fn(cg_norm_forward(m->ln_f, x), m->tok->weight, NULL); /* tied head */
}

int main(void)
{
    const char *text = "the quick brown fox jumps over the lazy dog. "; /* 40 times over */
    int64_t len = strlen(text), n = 40 * len, ids[2048], V = 0;
    char chars[128] = "";
    for (int c = 1; c < 128; c++) /* the sorted set of characters */
        if (strchr(text, c))
            chars[V++] = (char)c;
    for (int64_t i = 0; i < n; i++)
        ids[i] = strchr(chars, text[i % len]) - chars;
    cg_tensor *data = cg_from_i64(1, &n, ids), *x, *y;
    cg_rng rng = cg_rng_new(1);
    gpt *m = gpt_new(V, &rng);
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 3e-3);
    float loss = 0;
    for (int step = 0; step < STEPS && opt; step++) {
        cg_optim_set_lr(opt, cg_lr_warmup_cosine(step, STEPS, WARMUP, 3e-3, 3e-4));
        cg_scope *s = cg_scope_begin();
        for (int a = 0; a < ACCUM && cg_random_batch(data, B, T, &rng, &x, &y); a++) {
            cg_tensor *l = cg_cross_entropy(gpt_forward(m, x, NULL), y, -100, 0, CG_REDUCTION_MEAN);
            if (!cg_backward(cg_muls(l, 1.0f / ACCUM), NULL, false))
                return fprintf(stderr, "error: %s\n", cg_last_error()), 1;
            loss = cg_item(l);
        }
        cg_optim_clip_grad_norm(opt, 1.0);
        cg_optim_step(opt);
        cg_optim_zero_grad(opt);
        cg_scope_end(s);
    }
    printf("loss %.3f\n", loss);

    cg_no_grad_begin(); /* (no dropout here: train and eval mode are the same) */
    cg_scope *s = cg_scope_begin();
    cg_kv_cache *cache = cg_kv_cache_new(0);
    cg_sample_config sc = {.temperature = 0.8, .top_k = 10, .top_p = 1};
    cg_tensor *idx = cg_from_i64(CG_SHAPE(1, 1), (int64_t[]){strchr(chars, 't') - chars});
    while (idx->shape[1] < T) { /* one new token a step, the cache holds the rest */
        cg_tensor *last = cg_narrow(idx, 1, idx->shape[1] - 1, 1);
        idx = cg_concat(
            (cg_tensor *[]){idx, cg_sample_rows(gpt_forward(m, last, cache), &sc, &rng)}, 2, 1);
    }
    printf("sample: ");
    for (int i = 0; i < T; i++)
        putchar(chars[cg_data_i64(idx)[i]]);
    cg_module_save(CG_MODULE(m), "gpt.safetensors", 0, NULL);
    gpt *again = gpt_new(V, &rng);
    bool ok = cg_module_load_file(CG_MODULE(again), "gpt.safetensors");
    cg_tensor *a = gpt_forward(m, idx, NULL), *b = gpt_forward(again, idx, NULL);
    ok = ok && !memcmp(cg_data(a), cg_data(b), sizeof(float) * (size_t)cg_numel(a));
    printf("\nreloaded logits identical: %s\n", ok ? "True" : "False");
    cg_scope_end(s);
    cg_no_grad_end();
    cg_kv_cache_free(cache);
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(again));
    cg_release(data);
    return ok && loss < 1.0f ? 0 : 1;
}
