/* The decoder-only character LM (models.py CharLM). */
#include "models/charlm/charlm.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/util/config_json.h"

/* ---------------------------------------------------------------- config */
cg_charlm_config cg_charlm_config_default(void)
{
    return (cg_charlm_config){.vocab = 65,
                              .d = 128,
                              .H = 4,
                              .layers = 4,
                              .d_ff = 512,
                              .max_len = 256,
                              .norm = CG_NORM_LAYERNORM,
                              .act = CG_ACT_GELU,
                              .norm_first = true,
                              .dropout = 0.0f};
}

bool cg_charlm_config_check(const cg_charlm_config *c)
{
    if (!c) {
        cg_set_error("charlm config: NULL");
        return false;
    }
    struct {
        const char *name;
        int64_t v, min;
    } pos[] = {{"vocab", c->vocab, 1},   {"d", c->d, 1},       {"H", c->H, 1},
               {"layers", c->layers, 0}, {"d_ff", c->d_ff, 1}, {"max_len", c->max_len, 1}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < pos[i].min) {
            cg_set_error("charlm config: %s must be >= %lld (got %lld)", pos[i].name,
                         (long long)pos[i].min, (long long)pos[i].v);
            return false;
        }
    if (c->layers > 1000000) {
        cg_set_error("charlm config: layers=%lld is too large", (long long)c->layers);
        return false;
    }
    if (c->d % c->H) {
        cg_set_error("charlm config: d=%lld is not divisible by H=%lld", (long long)c->d,
                     (long long)c->H);
        return false;
    }
    if (c->norm != CG_NORM_LAYERNORM && c->norm != CG_NORM_RMSNORM) {
        cg_set_error("charlm config: unknown norm %d (expected layernorm or rmsnorm)",
                     (int)c->norm);
        return false;
    }
    if (c->act != CG_ACT_RELU && c->act != CG_ACT_GELU) {
        cg_set_error("charlm config: unknown act %d (expected relu or gelu)", (int)c->act);
        return false;
    }
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) {
        cg_set_error("charlm config: dropout must be in [0, 1) (got %g)", (double)c->dropout);
        return false;
    }
    return true;
}

static const char CONFIG[] = "charlm config";

/* The config's JSON fields, in the order they are written. */
static const cg_config_field FIELDS[] = {
    {"vocab", CG_CF_I64, offsetof(cg_charlm_config, vocab), NULL},
    {"d", CG_CF_I64, offsetof(cg_charlm_config, d), NULL},
    {"H", CG_CF_I64, offsetof(cg_charlm_config, H), NULL},
    {"layers", CG_CF_I64, offsetof(cg_charlm_config, layers), NULL},
    {"d_ff", CG_CF_I64, offsetof(cg_charlm_config, d_ff), NULL},
    {"max_len", CG_CF_I64, offsetof(cg_charlm_config, max_len), NULL},
    {"norm", CG_CF_NORM, offsetof(cg_charlm_config, norm), NULL},
    {"act", CG_CF_ACT, offsetof(cg_charlm_config, act), NULL},
    {"norm_first", CG_CF_BOOL, offsetof(cg_charlm_config, norm_first), NULL},
    {"dropout", CG_CF_F32, offsetof(cg_charlm_config, dropout), NULL},
    CG_CONFIG_ZOO_FACTS(cg_charlm_config),
};
enum { N_FIELDS = (int)(sizeof FIELDS / sizeof FIELDS[0]) };

bool cg_charlm_config_from_json(const char *json, cg_charlm_config *out)
{
    if (!out) {
        cg_set_error("charlm config: NULL argument");
        return false;
    }
    cg_charlm_config c = cg_charlm_config_default();
    if (!cg_config_read(json, CONFIG, FIELDS, N_FIELDS, &c) || !cg_charlm_config_check(&c))
        return false;
    *out = c;
    return true;
}

bool cg_charlm_config_same_arch(const char *json_a, const char *json_b)
{
    cg_charlm_config a, b;
    return cg_charlm_config_from_json(json_a, &a) && cg_charlm_config_from_json(json_b, &b) &&
           cg_config_same_arch(FIELDS, N_FIELDS, &a, &b);
}

char *cg_charlm_config_to_json(const cg_charlm_config *c)
{
    if (!cg_charlm_config_check(c))
        return NULL;
    return cg_config_write("charlm", FIELDS, N_FIELDS, c);
}

/* ----------------------------------------------------------------- model */
static void charlm_destroy(cg_module *base)
{
    cg_charlm *m = (cg_charlm *)base;
    free(m->block);
    cg_release_held(m->pe);
}

cg_charlm *cg_charlm_new(const cg_charlm_config *cfg, uint64_t seed)
{
    if (!cg_charlm_config_check(cfg))
        return NULL;
    cg_charlm *m = (cg_charlm *)cg_module_alloc(sizeof *m, "CharLM", charlm_destroy);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    m->dropout_rng = cg_rng_new(seed ^ 0x9e3779b97f4a7c15ULL);
    cg_rng init = cg_rng_new(seed);
    cg_tf_config tf = {.d = cfg->d,
                       .H = cfg->H,
                       .d_ff = cfg->d_ff,
                       .norm = cfg->norm,
                       .act = cfg->act,
                       .norm_first = cfg->norm_first,
                       .dropout = cfg->dropout,
                       .dropout_rng = &m->dropout_rng};
    cg_module *base = CG_MODULE(m);
    bool ok = (m->block = calloc((size_t)cfg->layers + 1, sizeof *m->block)) != NULL;
    if (!ok)
        cg_set_error("charlm: out of memory");
    ok =
        ok && (m->pe = cg_hold(cg_sinusoidal_pe(cfg->max_len, cfg->d))) != NULL; /* beyond scopes */
    ok = ok && (m->tok_emb =
                    cg_module_add_child(base, "tok_emb", cg_embed_new(cfg->vocab, cfg->d, &init)));
    ok = ok && (m->blocks = cg_module_add_child(base, "blocks", cg_module_new("ModuleList")));
    for (int64_t i = 0; ok && i < cfg->layers; i++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)i);
        ok = (m->block[i] = cg_module_add_child(m->blocks, name, cg_lm_block_new(&tf, &init))) !=
             NULL;
    }
    if (ok && cfg->norm_first)
        ok = (m->ln_f = cg_module_add_child(base, "ln_f", cg_norm_new(cfg->norm, cfg->d))) != NULL;
    /* models.py init_params over the finished tree (one rule for every
     * parameter, whatever the layer constructors drew). */
    ok = ok && cg_module_init_params_torch(base, seed, CG_INIT_STD);
    if (!ok) {
        cg_module_free(base);
        return NULL;
    }
    return m;
}

void cg_charlm_free(cg_charlm *m) { cg_module_free(CG_MODULE(m)); }

void cg_charlm_set_recompute(cg_charlm *m, bool on)
{
    for (int i = 0; m && i < m->cfg.layers; i++)
        m->block[i]->recompute = on;
}

cg_tensor *cg_charlm_forward(cg_charlm *m, const int64_t *ids, int64_t B, int64_t T)
{
    if (!m || !ids) {
        cg_set_error("charlm forward: NULL %s", m ? "ids" : "model");
        return NULL;
    }
    const cg_charlm_config *c = &m->cfg;
    if (B < 1 || T < 1) {
        cg_set_error("charlm forward: batch %lld x %lld must be at least 1 x 1", (long long)B,
                     (long long)T);
        return NULL;
    }
    if (T > c->max_len) {
        cg_set_error("charlm forward: sequence length %lld exceeds max_len %lld", (long long)T,
                     (long long)c->max_len);
        return NULL;
    }
    for (int64_t i = 0; i < B * T; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab) {
            cg_set_error("charlm forward: token id %lld at [%lld, %lld] is outside the "
                         "vocabulary [0, %lld)",
                         (long long)ids[i], (long long)(i / T), (long long)(i % T),
                         (long long)c->vocab);
            return NULL;
        }
    cg_scope *sc = cg_scope_begin(); /* the intermediates die at its end */
    if (!sc)
        return NULL;
    /* embedding * sqrt(d) + pe[:T], dropout */
    cg_tensor *e = cg_embed_forward(m->tok_emb, cg_from_i64(CG_SHAPE(B, T), ids));
    cg_tensor *x = cg_add(cg_muls(e, (float)sqrt((double)c->d)), cg_view_narrow(m->pe, 0, 0, T));
    cg_tensor *h = cg_dropout(x, c->dropout, &m->dropout_rng, m->base.training);
    cg_attn_mask mask = {.causal = true};
    for (int64_t i = 0; i < c->layers && h; i++)
        h = cg_lm_block_forward(m->block[i], h, &mask);
    if (m->ln_f && h)
        h = cg_norm_forward(m->ln_f, h);
    /* tied head: [B*T, d] @ tok_emb.weight^T [d, V] */
    cg_tensor *l2 = cg_matmul(cg_reshape(h, 2, (const int64_t[]){B * T, c->d}),
                              cg_transpose(m->tok_emb->weight, 0, 1));
    cg_tensor *logits = cg_keep(cg_reshape(l2, 3, (const int64_t[]){B, T, c->vocab}));
    cg_scope_end(sc);
    return logits;
}

cg_tensor *cg_charlm_loss(cg_charlm *m, cg_tensor *logits, const int64_t *targets)
{
    if (!m || !logits || !targets) {
        if (!m || !targets)
            cg_set_error("charlm loss: NULL %s", m ? "targets" : "model");
        return NULL;
    }
    if (logits->ndim < 2 || logits->shape[logits->ndim - 1] != m->cfg.vocab) {
        char s[96];
        cg_set_error("charlm loss: logits %s must end in the vocabulary size %lld",
                     cg_shape_str(logits, s, sizeof s), (long long)m->cfg.vocab);
        return NULL;
    }
    /* the zoo's batches are [B, T, V] logits over [B, T] targets */
    cg_tensor *t = cg_from_i64(logits->ndim - 1, logits->shape, targets);
    cg_tensor *loss = t ? cg_cross_entropy(logits, t, -100, 0.0f) : NULL;
    cg_release(t);
    return loss;
}

/* ------------------------------------------------------------ evaluation */
/* The mean loss of B windows x -> y of T. */
static bool windows_loss(cg_charlm *m, const int64_t *x, const int64_t *y, int64_t B, int64_t T,
                         double *out)
{
    cg_tensor *logits = cg_charlm_forward(m, x, B, T);
    cg_tensor *loss = cg_charlm_loss(m, logits, y);
    cg_release(logits);
    if (loss)
        *out = cg_item(loss);
    cg_release(loss);
    return loss != NULL;
}

bool cg_charlm_sampled_loss(cg_charlm *m, cg_split_view s, int64_t B, int64_t T, int n_batches,
                            uint64_t seed, double *out)
{
    int64_t *x = malloc((size_t)(B * T) * sizeof *x), *y = malloc((size_t)(B * T) * sizeof *y);
    bool ok = x && y;
    if (!ok)
        cg_set_error("out of memory");
    bool was_training = m->base.training;
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_rng gen = cg_rng_new(seed);
    double total = 0;
    for (int i = 0; ok && i < n_batches; i++) {
        double v;
        ok = cg_get_batch(s, B, T, &gen, x, y) && windows_loss(m, x, y, B, T, &v);
        total += ok ? v : 0;
    }
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), was_training);
    free(x);
    free(y);
    *out = total / n_batches;
    return ok;
}

bool cg_charlm_full_loss(cg_charlm *m, cg_split_view s, int64_t T, double *out, int64_t *nwin)
{
    const int64_t chunk = 64;
    int64_t n = (s.n - 1) / T;
    if (n < 1) {
        cg_set_error("the validation split (%lld characters) is shorter than one window of %lld+1",
                     (long long)s.n, (long long)T);
        return false;
    }
    int64_t *x = malloc((size_t)(chunk * T) * sizeof *x);
    int64_t *y = malloc((size_t)(chunk * T) * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        cg_set_error("out of memory");
        return false;
    }
    bool was_training = m->base.training;
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    double total = 0;
    bool ok = true;
    for (int64_t st = 0; ok && st < n; st += chunk) {
        int64_t b = n - st < chunk ? n - st : chunk;
        for (int64_t i = 0; i < b; i++)
            cg_split_window(s, (st + i) * T, T, x + i * T, y + i * T);
        double v;
        ok = windows_loss(m, x, y, b, T, &v);
        total += ok ? v * (double)b : 0;
    }
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), was_training);
    free(x);
    free(y);
    *out = total / (double)n;
    *nwin = n;
    return ok;
}
