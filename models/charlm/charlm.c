/* The decoder-only character LM (models.py CharLM): its config (a field
 * table, models/util/config_json.h), the model and its evaluation. */
#include "models/charlm/charlm.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "models/train/model_common.h"
#include "models/util/config_json.h"

/* ---------------------------------------------------------------- config */
static const cg_charlm_config DEFAULTS = {.vocab = 65,
                                          .d = 128,
                                          .H = 4,
                                          .layers = 4,
                                          .d_ff = 512,
                                          .max_len = 256,
                                          .norm = CG_NORM_LAYERNORM,
                                          .act = CG_ACT_GELU,
                                          .norm_first = true,
                                          .bias = true,
                                          .dropout = 0.0f,
                                          .pos_enc = CG_POS_SINUSOIDAL,
                                          .rope_theta = 10000};

/* The config's JSON fields and their rules, in the order they are written. */
static const cg_config_field FIELDS[] = {
    CG_CF_INT(cg_charlm_config, vocab, 1, CG_CF_NO_MAX),
    CG_CONFIG_ZOO_WIDTH(cg_charlm_config),
    CG_CF_INT(cg_charlm_config, layers, 0, 1000000),
    CG_CONFIG_ZOO_BLOCK(cg_charlm_config),
    {"loss_chunk", CG_CF_I64, offsetof(cg_charlm_config, loss_chunk), NULL, -1, CG_CF_NO_MAX,
     " (-1: chunks on the head product's k blocks, 0: no chunks)", NULL},
    CG_CONFIG_ZOO_FACTS(cg_charlm_config, "sinusoidal|rope|learned"),
};
static const cg_config_model CONFIG = {"charlm", FIELDS, (int)(sizeof FIELDS / sizeof FIELDS[0]),
                                       sizeof(cg_charlm_config), &DEFAULTS};

cg_charlm_config cg_charlm_config_default(void) { return DEFAULTS; }

bool cg_charlm_config_check(const cg_charlm_config *c) { return cg_config_check(&CONFIG, c); }

bool cg_charlm_config_from_json(const char *json, cg_charlm_config *out)
{
    return cg_config_parse(&CONFIG, json, out);
}

bool cg_charlm_config_same_arch(const char *json_a, const char *json_b)
{
    return cg_config_same_arch_json(&CONFIG, json_a, json_b);
}

char *cg_charlm_config_to_json(const cg_charlm_config *c) { return cg_config_to_json(&CONFIG, c); }

/* ----------------------------------------------------------------- model */
static void charlm_destroy(cg_module *base)
{
    cg_charlm *m = (cg_charlm *)base;
    free(m->block);
    cg_release_held(m->pe);
}

/* init false: the drawn weights left at zero (cg_init_skip), for a
 * checkpoint to fill. The layers are built without draws either way:
 * init_params_torch draws every weight they would have drawn. */
static cg_charlm *model_new(const cg_charlm_config *cfg, uint64_t seed, bool init)
{
    if (!cg_charlm_config_check(cfg))
        return NULL;
    cg_charlm *m = (cg_charlm *)cg_module_alloc(sizeof *m, "CharLM", charlm_destroy);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    m->dropout_rng = cg_model_dropout_rng(seed);
    cg_tf_config tf = CG_MODEL_TF_CONFIG(cfg, &m->dropout_rng);
    cg_module *base = CG_MODULE(m);
    bool ok = (m->block = calloc((size_t)cfg->layers + 1, sizeof *m->block)) != NULL;
    if (!ok)
        cg_set_error("charlm: out of memory");
    ok = ok &&
         (cfg->pos_enc != CG_POS_SINUSOIDAL || /* rotary: none; learned: pos_emb's */
          (m->pe = cg_hold(cg_sinusoidal_pe(cfg->max_len, cfg->d))) != NULL); /* beyond scopes */
    ok = ok && (m->tok_emb = cg_module_add_child(base, "tok_emb",
                                                 cg_embed_new(cfg->vocab, cfg->d, cg_init_skip())));
    ok = ok && (cfg->pos_enc != CG_POS_LEARNED || /* nanoGPT's wpe, after its wte */
                (m->pos_emb = cg_module_add_child(
                     base, "pos_emb", cg_embed_new(cfg->max_len, cfg->d, cg_init_skip()))) != NULL);
    ok = ok && (m->blocks = cg_module_add_child(base, "blocks", cg_module_new("ModuleList")));
    for (int64_t i = 0; ok && i < cfg->layers; i++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)i);
        ok = (m->block[i] = cg_module_add_child(m->blocks, name,
                                                cg_lm_block_new(&tf, cg_init_skip()))) != NULL;
    }
    if (ok && cfg->norm_first)
        ok = (m->ln_f = cg_module_add_child(base, "ln_f",
                                            cg_model_norm(cfg->norm, cfg->d, cfg->bias))) != NULL;
    /* models.py init_params over the finished tree: one rule for every
     * parameter. */
    ok = ok && (!init || cg_module_init_params_torch(base, seed, CG_INIT_STD));
    if (!ok) {
        cg_module_free(base);
        return NULL;
    }
    return m;
}

void cg_charlm_gpt2_init(cg_charlm *m)
{
    const float s = (float)(1.0 / sqrt(2.0 * (double)m->cfg.layers));
    for (int64_t i = 0; i < m->cfg.layers; i++) {
        cg_tensor *w[2] = {m->block[i]->attn->o_proj->weight, m->block[i]->ff->fc2->weight};
        for (int k = 0; k < 2; k++) { /* parameters: contiguous float32 */
            float *d = cg_data(w[k]);
            for (int64_t j = 0; j < cg_numel(w[k]); j++)
                d[j] *= s;
            cg_tensor_modified(w[k]);
        }
    }
}

cg_tensor *cg_charlm_positions(const cg_charlm *m)
{
    return m->pe ? m->pe : m->pos_emb ? m->pos_emb->weight : NULL;
}

cg_charlm *cg_charlm_new(const cg_charlm_config *cfg, uint64_t seed)
{
    return model_new(cfg, seed, true);
}

cg_charlm *cg_charlm_new_skip_init(const cg_charlm_config *cfg, uint64_t seed)
{
    return model_new(cfg, seed, false);
}

void cg_charlm_free(cg_charlm *m) { cg_module_free(CG_MODULE(m)); }

void cg_charlm_set_recompute(cg_charlm *m, bool on)
{
    for (int i = 0; m && i < m->cfg.layers; i++)
        m->block[i]->recompute = on;
}

/* The final hidden states as [B*T, d] (a new reference, outside the
 * caller's scope), or NULL + error. */
static cg_tensor *charlm_hidden(cg_charlm *m, const int64_t *ids, int64_t B, int64_t T)
{
    if (!m || !ids) {
        cg_set_error("charlm forward: NULL %s", m ? "ids" : "model");
        return NULL;
    }
    const cg_charlm_config *c = &m->cfg;
    if (!cg_model_check_ids("charlm", "forward", "sequence", ids, B, T, c->max_len, c->vocab))
        return NULL;
    cg_scope *sc = cg_scope_begin(); /* the intermediates die at its end */
    if (!sc)
        return NULL;
    /* embedding * sqrt(d) + pe[:T], dropout (cg_model_embed_scaled) */
    cg_tensor *e = cg_embed_forward(m->tok_emb, cg_from_i64(CG_SHAPE(B, T), ids));
    cg_tensor *h = cg_model_embed_scaled(e, cg_charlm_positions(m), 0, T,
                                         cg_model_emb_scale(c->emb_scale, c->d), c->dropout,
                                         &m->dropout_rng, m->base.training);
    cg_attn_mask mask = {.causal = true};
    /* each layer's input is released once the layer has run: without a
     * graph (evaluation) only one layer's tensors are alive at a time; with
     * one, the graph keeps what backward needs */
    for (int64_t i = 0; i < c->layers && h; i++) {
        cg_tensor *next = cg_lm_block_forward(m->block[i], h, &mask);
        cg_release(h);
        h = next;
    }
    if (m->ln_f && h) {
        cg_tensor *next = cg_norm_forward(m->ln_f, h);
        cg_release(h);
        h = next;
    }
    cg_tensor *h2 = cg_keep(cg_reshape(h, 2, (const int64_t[]){B * T, c->d}));
    cg_scope_end(sc);
    return h2;
}

cg_tensor *cg_charlm_forward(cg_charlm *m, const int64_t *ids, int64_t B, int64_t T)
{
    cg_tensor *h2 = charlm_hidden(m, ids, B, T);
    cg_scope *sc = h2 ? cg_scope_begin() : NULL;
    if (!sc) {
        cg_release(h2);
        return NULL;
    }
    /* tied head: [B*T, d] @ tok_emb.weight^T [d, V] */
    cg_tensor *l2 = cg_matmul(h2, cg_transpose(m->tok_emb->weight, 0, 1));
    cg_tensor *logits = cg_keep(cg_reshape(l2, 3, (const int64_t[]){B, T, m->cfg.vocab}));
    cg_scope_end(sc);
    cg_release(h2);
    return logits;
}

cg_tensor *cg_charlm_forward_loss(cg_charlm *m, const int64_t *ids, int64_t B, int64_t T,
                                  const int64_t *targets, float ls, float grad_scale)
{
    if (!targets) {
        cg_set_error("charlm loss: NULL targets");
        return NULL;
    }
    bool fused = m && m->cfg.loss_chunk != 0;
    cg_tensor *x = fused ? charlm_hidden(m, ids, B, T) : cg_charlm_forward(m, ids, B, T);
    cg_tensor *t =
        x ? cg_from_i64(fused ? 1 : 2, (const int64_t[]){fused ? B * T : B, T}, targets) : NULL;
    cg_tensor *loss =
        !t      ? NULL
        : fused ? cg_linear_cross_entropy(x, m->tok_emb->weight, NULL, t, -100, ls,
                                          CG_REDUCTION_MEAN, m->cfg.loss_chunk, grad_scale)
                : cg_cross_entropy(x, t, -100, ls, CG_REDUCTION_MEAN);
    cg_release_all(2, x, t);
    return loss;
}

cg_tensor *cg_charlm_loss(cg_charlm *m, cg_tensor *logits, const int64_t *targets)
{
    return cg_model_logits_loss("charlm", m != NULL, m ? m->cfg.vocab : 0, logits, targets, -100,
                                0.0f);
}

/* ------------------------------------------------------------ evaluation */
/* Tokens per forward pass of the full loss: the base preset's training
 * batch (16 x 256). One pass over its 64 windows of 1024 kept every layer's
 * activations for all of them at once and set the program's peak memory,
 * far above the training step's (issue 35). */
#define FULL_LOSS_TOKENS 4096

/* Windows per forward pass of an evaluation's loss: FULL_LOSS_TOKENS
 * tokens, at least one window. */
static int64_t pass_windows(int64_t T)
{
    return FULL_LOSS_TOKENS / T > 1 ? FULL_LOSS_TOKENS / T : 1;
}

/* The mean loss of B windows x -> y of T, forwarded `per` windows at a
 * time, each pass's logits summed into the loss (core/ops.h
 * cg_k_cross_entropy_sum) and let go: one pass's [per T, V] logits alive at
 * a time, never the B windows' (copied together they were 13 GB at GPT-2's
 * vocabulary, T 1,024 and 64 windows). A row's logits do not depend on the
 * other rows of its pass (a window attends to itself only, the norms are
 * per row, and a product of more than 4 rows sums each element over k in
 * one fixed order: core/gemm.c), and the rows' losses are summed in order,
 * so the loss is the same bits as one pass's cg_charlm_loss. */
static bool windows_sum(cg_charlm *m, const int64_t *x, const int64_t *y, int64_t B, int64_t T,
                        int64_t per, double *total, int64_t *kept)
{
    bool ok = true;
    for (int64_t b0 = 0; ok && b0 < B; b0 += per) {
        /* the rest at once when it would leave a pass of 4 rows or fewer */
        const int64_t n = B - b0 - per < (4 + T) / T ? B - b0 : per;
        cg_tensor *logits = cg_charlm_forward(m, x + b0 * T, n, T);
        cg_tensor *rows =
            logits ? cg_reshape(logits, 2, (const int64_t[]){n * T, m->cfg.vocab}) : NULL;
        cg_tensor *t = rows ? cg_from_i64(1, (const int64_t[]){n * T}, y + b0 * T) : NULL;
        ok = t && cg_k_cross_entropy_sum(rows, t, -100, 0.0f, total, kept);
        cg_release_all(3, logits, rows, t);
    }
    return ok;
}

static bool windows_loss(cg_charlm *m, const int64_t *x, const int64_t *y, int64_t B, int64_t T,
                         int64_t per, double *out)
{
    double total = 0;
    int64_t kept = 0;
    bool ok = windows_sum(m, x, y, B, T, per, &total, &kept);
    if (ok)
        *out = (float)(total / (double)kept); /* as cg_cross_entropy rounds its mean */
    return ok;
}

/* An evaluation's window buffers (rows x T ids, inputs and targets) and
 * the model put in eval mode without gradients; eval_end restores the mode
 * and frees them. False + error when the buffers cannot be had (eval_end
 * is still called). */
typedef struct {
    int64_t *x, *y;
    bool was_training;
} eval_pass;

static bool eval_begin(cg_charlm *m, int64_t rows, int64_t T, eval_pass *e)
{
    e->x = malloc((size_t)(rows * T) * sizeof *e->x);
    e->y = malloc((size_t)(rows * T) * sizeof *e->y);
    e->was_training = m->base.training;
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    if (!e->x || !e->y) {
        cg_set_error("out of memory");
        return false;
    }
    return true;
}

static void eval_end(cg_charlm *m, eval_pass *e)
{
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), e->was_training);
    free(e->x);
    free(e->y);
}

bool cg_charlm_sampled_loss(cg_charlm *m, cg_split_view s, int64_t B, int64_t T, int n_batches,
                            uint64_t seed, bool (*stop)(void), double *out)
{
    eval_pass e;
    bool ok = eval_begin(m, B, T, &e);
    cg_rng gen = cg_rng_new(seed);
    double total = 0;
    for (int i = 0; ok && i < n_batches; i++) {
        double v;
        if (stop && stop()) {
            cg_set_error("interrupted");
            ok = false;
            break;
        }
        ok = cg_get_batch(s, B, T, &gen, e.x, e.y) &&
             windows_loss(m, e.x, e.y, B, T, pass_windows(T), &v);
        total += ok ? v : 0;
    }
    eval_end(m, &e);
    *out = total / n_batches;
    return ok;
}

bool cg_charlm_full_loss(cg_charlm *m, cg_split_view s, int64_t T, double *out, int64_t *nwin)
{
    const int64_t chunk = 64; /* windows per loss, as the reference's */
    /* windows per forward pass; a chunk is split only when T > 4096 / 64,
     * so every pass has more than 4 rows */
    const int64_t per = pass_windows(T);
    int64_t n = (s.n - 1) / T;
    if (n < 1) {
        cg_set_error("the validation split (%lld characters) is shorter than one window of %lld+1",
                     (long long)s.n, (long long)T);
        return false;
    }
    eval_pass e;
    bool ok = eval_begin(m, chunk, T, &e);
    double total = 0;
    for (int64_t st = 0; ok && st < n; st += chunk) {
        int64_t b = n - st < chunk ? n - st : chunk;
        for (int64_t i = 0; i < b; i++)
            cg_split_window(s, (st + i) * T, T, e.x + i * T, e.y + i * T);
        double v;
        ok = windows_loss(m, e.x, e.y, b, T, per, &v);
        total += ok ? v * (double)b : 0;
    }
    eval_end(m, &e);
    *out = total / (double)n;
    *nwin = n;
    return ok;
}

bool cg_charlm_strided_loss(cg_charlm *m, cg_split_view s, int64_t T, int64_t stride, double *out,
                            int64_t *nwin, int64_t *scored)
{
    if (stride < 1 || stride > T) {
        cg_set_error("stride %lld is out of range [1, %lld] (the model's context)",
                     (long long)stride, (long long)T);
        return false;
    }
    if (s.n - 1 < T) { /* before the full loss's, which says "validation split" */
        cg_set_error("the split (%lld tokens) is shorter than one window of %lld+1", (long long)s.n,
                     (long long)T);
        return false;
    }
    if (stride == T) { /* the full loss's windows and bits */
        bool ok = cg_charlm_full_loss(m, s, T, out, nwin);
        *scored = ok ? *nwin * T : 0;
        return ok;
    }
    const int64_t n = (s.n - 1 - T) / stride + 1, chunk = 64, per = pass_windows(T);
    eval_pass e;
    bool ok = eval_begin(m, chunk, T, &e);
    double total = 0;
    int64_t kept = 0;
    for (int64_t st = 0; ok && st < n; st += chunk) {
        int64_t b = n - st < chunk ? n - st : chunk;
        for (int64_t i = 0; i < b; i++) {
            cg_split_window(s, (st + i) * stride, T, e.x + i * T, e.y + i * T);
            for (int64_t t = 0; st + i > 0 && t < T - stride; t++)
                e.y[i * T + t] = -100; /* scored by an earlier window */
        }
        ok = windows_sum(m, e.x, e.y, b, T, per, &total, &kept);
    }
    eval_end(m, &e);
    if (ok) {
        *out = total / (double)kept;
        *nwin = n;
        *scored = kept;
    }
    return ok;
}
