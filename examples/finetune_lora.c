/* finetune_lora: pretrain a small character LM on one text and save it;
 * attach LoRA adapters (rank 4, alpha 8) to the MLP's Linears, fine-tune
 * them alone on another text, save only the adapters (PEFT's names and
 * config); rebuild the base, load the adapters and check the logits.
 * finetune_lora.py is the same in PyTorch (with a LoRA of its own). */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

enum { B = 8, T = 32, D = 64, H = 4, STEPS = 100 };
static char chars[64];
static int64_t V;

typedef struct {
    cg_module base;
    cg_embed *tok, *pos;
    cg_lm_block *block;
    cg_norm *ln_f;
} lm;

static lm *lm_new(cg_rng *r)
{
    cg_tf_config cfg = {.d = D,
                        .H = H,
                        .d_ff = 4 * D,
                        .norm = CG_NORM_LAYERNORM,
                        .act = CG_ACT_GELU,
                        .norm_first = true};
    lm *m = (lm *)cg_module_alloc(sizeof *m, "LM", NULL);
    m->tok = cg_module_add_child(&m->base, "tok", cg_embed_new(V, D, r));
    m->pos = cg_module_add_child(&m->base, "pos", cg_embed_new(T, D, r));
    m->block = cg_module_add_child(&m->base, "block",
                                   cg_lm_block_new(&cfg, r)); /* ln1, attn, ln2, ff.fc1, ff.fc2 */
    m->ln_f = cg_module_add_child(&m->base, "ln_f", cg_layernorm_new(D));
    return m;
}

static cg_tensor *lm_forward(lm *m, cg_tensor *ids) /* ids [b, T], inside a scope */
{
    cg_tensor *x = cg_add(cg_embed_forward(m->tok, ids), m->pos->weight); /* positions 0..T-1 */
    x = cg_lm_block_forward(m->block, x, &(cg_attn_mask){.causal = true});
    return cg_linear_fn(cg_norm_forward(m->ln_f, x), m->tok->weight, NULL);
}

static cg_tensor *encode(const char *text, int ndim, const int64_t *shape) /* ids of the chars */
{
    int64_t ids[2048], n = cg_numel_shape(ndim, shape);
    for (int64_t i = 0; i < n; i++)
        ids[i] = strchr(chars, text[i]) - chars;
    return cg_from_i64(ndim, shape, ids);
}

static float train(lm *m, const char *text, cg_optim *opt, cg_rng *rng)
{
    cg_tensor *data = encode(text, CG_SHAPE((int64_t)strlen(text))), *x, *y;
    float loss = 0;
    for (int step = 0; step < STEPS; step++) {
        cg_scope *s = cg_scope_begin();
        cg_random_batch(data, B, T, rng, &x, &y);
        cg_tensor *l = cg_cross_entropy(lm_forward(m, x), y, -100, 0, CG_REDUCTION_MEAN);
        loss = cg_item(l);
        cg_train_step(opt, l);
        cg_scope_end(s);
    }
    cg_release(data);
    cg_optim_free(opt);
    return loss;
}

int main(void)
{
    char base_text[2048] = "", new_text[2048] = "";
    for (int i = 0; i < 40; i++) {
        strcat(base_text, "the quick brown fox jumps over the lazy dog. ");
        strcat(new_text, "a lazy cat naps by the warm fire. ");
    }
    for (int c = 1; c < 128; c++) /* the sorted set of both texts' characters */
        if (strchr(base_text, c) || strchr(new_text, c))
            chars[V++] = (char)c;
    cg_rng rng = cg_rng_new(1);
    lm *m = lm_new(&rng);
    printf("base: loss %.3f\n", train(m, base_text, cg_adam_from_module(CG_MODULE(m), 3e-3), &rng));
    cg_module_save(CG_MODULE(m), "base.safetensors", 0, NULL);
    const char *targets[] = {"fc1", "fc2"};
    cg_lora_config lora = {.r = 4, .alpha = 8, .n_targets = 2, .targets = targets};
    cg_lora_attach_all(CG_MODULE(m), &lora, &rng);            /* freezes the rest */
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 3e-3); /* the adapters only */
    int64_t trainable = 0;
    for (int i = 0; i < cg_optim_count(opt); i++)
        trainable += cg_numel(cg_optim_param_tensor(opt, i));
    printf("LoRA: %lld trainable parameters\n", (long long)trainable);
    printf("fine-tuned: loss %.3f\n", train(m, new_text, opt, &rng));
    bool ok = cg_lora_save(CG_MODULE(m), "adapter.safetensors");

    lm *again = lm_new(&rng);
    ok = ok && cg_module_load_file(CG_MODULE(again), "base.safetensors") &&
         cg_lora_load(CG_MODULE(again), "adapter.safetensors");
    cg_module_train(CG_MODULE(m), false);
    cg_module_train(CG_MODULE(again), false);
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    cg_tensor *ids = encode(new_text, CG_SHAPE(1, T)), *a = lm_forward(m, ids),
              *b = lm_forward(again, ids);
    ok = ok && !memcmp(cg_data(a), cg_data(b), sizeof(float) * (size_t)cg_numel(a));
    cg_scope_end(s);
    cg_no_grad_end();
    printf("base + adapters reloaded, logits identical: %s\n", ok ? "True" : "False");
    if (!ok)
        fprintf(stderr, "error: %s\n", cg_last_error());
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(again));
    return ok ? 0 : 1;
}
