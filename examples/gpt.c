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

typedef struct {
    cg_module base;
    cg_norm *ln1, *ln2;
    cg_mha *attn;
    cg_ff *mlp;
} block;
typedef struct {
    cg_module base;
    cg_embed *tok, *pos;
    block *h[L];
    cg_norm *ln_f;
} gpt;

static block *block_new(cg_rng *r)
{
    block *b = (block *)cg_module_alloc(sizeof *b, "Block", NULL);
    b->ln1 = cg_module_add_child(&b->base, "ln1", cg_layernorm_new(D));
    b->attn = cg_module_add_child(&b->base, "attn", cg_mha_new(D, H, r));
    b->ln2 = cg_module_add_child(&b->base, "ln2", cg_layernorm_new(D));
    b->mlp = cg_module_add_child(&b->base, "mlp", cg_ff_new(D, 4 * D, CG_ACT_GELU, r));
    return b;
}

/* kv: this block's cache when decoding, NULL when training. */
static cg_tensor *block_forward(block *b, cg_tensor *x, cg_mha_kv *kv)
{
    x = cg_add(x, cg_mha_self(b->attn, cg_norm_forward(b->ln1, x), true, kv));
    return cg_add(x, cg_ff_forward(b->mlp, cg_norm_forward(b->ln2, x)));
}

static gpt *gpt_new(int64_t V, cg_rng *r)
{
    gpt *m = (gpt *)cg_module_alloc(sizeof *m, "GPT", NULL);
    m->tok = cg_module_add_child(&m->base, "tok", cg_embed_new(V, D, r));
    m->pos = cg_module_add_child(&m->base, "pos", cg_embed_new(T, D, r));
    cg_module *blocks = cg_module_add_child(&m->base, "blocks", cg_module_new("ModuleList"));
    for (int i = 0; i < L; i++)
        m->h[i] = cg_module_append(blocks, block_new(r)); /* named "0", "1", ... */
    m->ln_f = cg_module_add_child(&m->base, "ln_f", cg_layernorm_new(D));
    return m;
}

/* ids [b, t] at positions cache->len.. (0 without a cache) -> logits [b, t, V]. */
static cg_tensor *gpt_forward(gpt *m, const int64_t *ids, int64_t b, int64_t t, cg_kv_cache *c)
{
    cg_tensor *x = cg_add(cg_embed_forward(m->tok, ids, CG_SHAPE(b, t)),
                          cg_narrow(m->pos->weight, 0, c ? c->len : 0, t));
    for (int i = 0; i < L; i++)
        x = block_forward(m->h[i], x, cg_kv_cache_layer(c, i));
    if (c)
        c->len += t;
    return cg_linear_fn(cg_norm_forward(m->ln_f, x), m->tok->weight, NULL); /* tied head */
}

int main(void)
{
    char text[2048] = "", chars[64] = "";
    for (int i = 0; i < 40; i++)
        strcat(text, "the quick brown fox jumps over the lazy dog. ");
    int64_t n = (int64_t)strlen(text), data[2048], V = 0, x[B * T], y[B * T], ids[T];
    for (int c = 0; c < 128; c++) /* the sorted set of characters */
        if (strchr(text, c) && c)
            chars[V++] = (char)c;
    for (int64_t i = 0; i < n; i++)
        data[i] = strchr(chars, text[i]) - chars;
    cg_rng rng = cg_rng_new(1);
    gpt *m = gpt_new(V, &rng);
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 3e-3);
    float loss = 0;
    for (int step = 0; step < STEPS && opt; step++) {
        cg_optim_set_lr(opt, cg_lr_warmup_cosine(step, STEPS, WARMUP, 3e-3, 3e-4));
        cg_scope *s = cg_scope_begin();
        for (int a = 0; a < ACCUM; a++) {
            cg_random_batch(data, n, B, T, &rng, x, y);
            cg_tensor *l = cg_cross_entropy(gpt_forward(m, x, B, T, NULL), y, B * T, -100, 0);
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
    ids[0] = strchr(chars, 't') - chars;
    for (int i = 1; i < T; i++) /* one new token a step, the cache holds the rest */
        cg_sample_rows(gpt_forward(m, ids + i - 1, 1, 1, cache), &sc, &rng, ids + i);
    printf("sample: ");
    for (int i = 0; i < T; i++)
        putchar(chars[ids[i]]);
    cg_module_save(CG_MODULE(m), "gpt.safetensors", 0, NULL);
    gpt *again = gpt_new(V, &rng);
    bool ok = cg_module_load_file(CG_MODULE(again), "gpt.safetensors");
    cg_tensor *a = gpt_forward(m, ids, 1, T, NULL), *b = gpt_forward(again, ids, 1, T, NULL);
    ok = ok && !memcmp(cg_data(a), cg_data(b), sizeof(float) * (size_t)cg_numel(a));
    printf("\nreloaded logits identical: %s\n", ok ? "True" : "False");
    cg_scope_end(s);
    cg_no_grad_end();
    cg_kv_cache_free(cache);
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(again));
    return ok && loss < 1.0f ? 0 : 1;
}
