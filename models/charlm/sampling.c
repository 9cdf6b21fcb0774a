/* cgrad zoo: cached incremental decoding and sampling (see sampling.h). */
#include "models/charlm/sampling.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/train/model_common.h"
#include "models/util/files.h"

cg_kv_cache *cg_charlm_kv_cache_new(const cg_charlm *m)
{
    if (!m) {
        cg_set_error("kv cache: NULL model");
        return NULL;
    }
    return cg_kv_cache_new((int)m->cfg.layers);
}

cg_tensor *cg_charlm_forward_cached(cg_charlm *m, cg_kv_cache *c, const int64_t *ids, int64_t B,
                                    int64_t n)
{
    if (!m || !c || !ids) {
        cg_set_error("charlm cached forward: NULL argument");
        return NULL;
    }
    const cg_charlm_config *cfg = &m->cfg;
    if (c->n_layers != cfg->layers) {
        cg_set_error("charlm cached forward: the cache was made for another model");
        return NULL;
    }
    const int64_t pos = cg_kv_cache_len(c); /* the first new position */
    if (B < 1 || n < 1 || pos + n > cfg->max_len) {
        cg_set_error("charlm cached forward: %lld new positions after %lld do not fit max_len %lld "
                     "(or B=%lld < 1)",
                     (long long)n, (long long)pos, (long long)cfg->max_len, (long long)B);
        return NULL;
    }
    for (int64_t i = 0; i < B * n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->vocab) {
            cg_set_error("charlm cached forward: token id %lld is outside the vocabulary [0, %lld)",
                         (long long)ids[i], (long long)cfg->vocab);
            return NULL;
        }
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *idt = cg_from_i64(CG_SHAPE(B, n), ids);
    cg_tensor *e = cg_embed_forward(m->tok_emb, idt);
    cg_release(idt);
    const float scale = cg_model_emb_scale(cfg->emb_scale, cfg->d);
    cg_tensor *es = scale == 1.0f ? cg_retain(e) : cg_muls(e, scale);
    cg_release(e);
    cg_tensor *table = cg_charlm_positions(m); /* rope: none */
    cg_tensor *pe = table ? cg_view_narrow(table, 0, pos, n) : NULL;
    cg_tensor *x = pe ? cg_add(es, pe) : cg_retain(es);
    cg_release_all(2, es, pe);
    cg_tensor *h = x ? cg_lm_blocks_forward_cached(m->block, (int)cfg->layers, x, c) : NULL;
    cg_release(x);
    if (m->ln_f && h) {
        cg_tensor *nh = cg_norm_forward(m->ln_f, h);
        cg_release(h);
        h = nh;
    }
    cg_tensor *h2 = cg_reshape(h, 2, (const int64_t[]){B * n, cfg->d});
    cg_release(h);
    /* the tied head as a linear map: in bf16 its packed weight is kept */
    cg_tensor *l2 = cg_linear_fn(h2, m->tok_emb->weight, NULL);
    cg_release(h2);
    cg_tensor *logits = cg_reshape(l2, 3, (const int64_t[]){B, n, cfg->vocab});
    cg_release(l2);
    cg_no_grad_end();
    return logits;
}

/* Logits of the last position of a full forward over ids[0..n). */
static bool last_logits_full(cg_charlm *m, const int64_t *ids, int64_t n, float *out)
{
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *l = cg_charlm_forward(m, ids, 1, n);
    cg_tensor *last = l ? cg_view_select(l, 1, n - 1) : NULL;
    bool ok = last && cg_copy_to(last, out);
    cg_release_all(2, l, last);
    cg_no_grad_end();
    return ok;
}

static bool last_logits_cached(cg_charlm *m, cg_kv_cache *c, const int64_t *ids, int64_t n,
                               float *out)
{
    cg_tensor *l = cg_charlm_forward_cached(m, c, ids, 1, n);
    cg_tensor *last = l ? cg_view_select(l, 1, n - 1) : NULL;
    bool ok = last && cg_copy_to(last, out);
    cg_release_all(2, l, last);
    return ok;
}

/* Every logit -inf (the n-gram rule blocked them all)? */
static bool all_blocked(const float *logits, int64_t V)
{
    for (int64_t v = 0; v < V; v++)
        if (logits[v] != -INFINITY)
            return false;
    return true;
}

int64_t *cg_charlm_generate(cg_charlm *m, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                            const cg_sample_opts *o, cg_rng *rng, bool use_cache,
                            cg_token_fn on_token, void *ctx)
{
    return cg_charlm_generate_ex(m, prompt, n_prompt, n_new, o, NULL, rng, use_cache, on_token,
                                 ctx);
}

int64_t *cg_charlm_generate_ex(cg_charlm *m, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                               const cg_sample_opts *o, const cg_logit_rules *rules, cg_rng *rng,
                               bool use_cache, cg_token_fn on_token, void *ctx)
{
    if (!m || !prompt || n_prompt < 1 || n_new < 0 || !o || !rng) {
        cg_set_error("generate: needs a model, a prompt of at least one token and n_new >= 0");
        return NULL;
    }
    if (!cg_logit_rules_check(rules)) {
        cg_prefix_error("generate: ");
        return NULL;
    }
    if (n_new > (int64_t)(SIZE_MAX / sizeof(int64_t) / 2) - n_prompt) { /* no overflow below */
        cg_set_error("generate: n_new %lld is too large (the ids would not fit in memory)",
                     (long long)n_new);
        return NULL;
    }
    const unsigned long serial = cg_error_serial();
    int64_t V = m->cfg.vocab, L = m->cfg.max_len, total = n_prompt + n_new;
    bool was_training = m->base.training; /* the forwards switch to eval mode: restored */
    int64_t *ids = malloc((size_t)total * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    cg_kv_cache *c = use_cache ? cg_charlm_kv_cache_new(m) : NULL;
    if (!ids || !logits || (use_cache && !c)) {
        if (cg_error_serial() == serial)
            cg_set_error("generate: out of memory");
        goto fail;
    }
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    int64_t len = n_prompt;
    for (int64_t s = 0; s < n_new; s++) {
        int64_t w = len < L ? len : L; /* window: the last w tokens */
        bool ok;
        if (!use_cache) {
            ok = last_logits_full(m, ids + len - w, w, logits);
        } else if (s > 0 && cg_kv_cache_len(c) == w - 1) {
            ok = last_logits_cached(m, c, ids + len - 1, 1, logits);
        } else { /* first step, or the window slid: (re)fill the cache */
            cg_kv_cache_reset(c);
            ok = last_logits_cached(m, c, ids + len - w, w, logits);
        }
        if (!ok)
            goto fail;
        /* the prompt's ids too, as HF's */
        if (cg_logit_rules_apply(rules, ids, len, logits, V) && all_blocked(logits, V)) {
            cg_set_error("generate: no_repeat_ngram_size %lld leaves no token to draw after %lld",
                         (long long)rules->no_repeat_ngram_size, (long long)len);
            goto fail;
        }
        int64_t id = cg_sample(logits, V, o, rng);
        if (id < 0 || (on_token && !on_token(ctx, id)))
            goto fail;
        ids[len++] = id;
    }
    cg_module_train(CG_MODULE(m), was_training);
    free(logits);
    cg_kv_cache_free(c);
    return ids;
fail:
    cg_module_train(CG_MODULE(m), was_training);
    free(ids);
    free(logits);
    cg_kv_cache_free(c);
    return NULL;
}

int cg_sample_cli_opts(cg_sample_opts *o, uint64_t *seed, cg_cli_opt *opts)
{
    *o = (cg_sample_opts){.temperature = 1.0, .top_k = 0, .top_p = 1.0};
    *seed = 1;
    opts[0] = (cg_cli_opt){"--temperature", CG_CLI_F64, &o->temperature, 0, 1e6, NULL, 0};
    opts[1] = (cg_cli_opt){"--top-k", CG_CLI_I64, &o->top_k, 0, 1 << 30, NULL, 0};
    opts[2] = (cg_cli_opt){"--top-p", CG_CLI_F64, &o->top_p, 1e-9, 1, NULL, 0};
    opts[3] = (cg_cli_opt){"--seed", CG_CLI_U64, seed, 0, 0, NULL, 0};
    return 4;
}

/* The printer of cg_charlm_generate_text. */
typedef struct {
    const cg_tokenizer *tok;
    FILE *out;
    int64_t *ids, n, cap; /* the ids since the anchor */
    size_t printed;       /* bytes of their text written */
} printer;

/* Write the new text of p's ids (all of it when flush; else holding back a
 * U+FFFD ending); re-anchor at the last id once nothing is held back. */
static bool printer_write(printer *p, bool flush)
{
    char *t = cg_tokenizer_decode(p->tok, p->ids, p->n);
    if (!t)
        return false;
    size_t len = strlen(t), end = len;
    while (!flush && p->tok->kind == CG_TOK_BPE && end >= 3 &&
           memcmp(t + end - 3, "\xEF\xBF\xBD", 3) == 0)
        end -= 3;
    errno = 0;
    if (end > p->printed) /* checked at once: a reader gone stops the sample here */
        fwrite(t + p->printed, 1, end - p->printed, p->out);
    bool ok = end <= p->printed || cg_output_flush(p->out);
    free(t);
    if (!ok)
        return false;
    if (end > p->printed)
        p->printed = end;
    if (end == len && p->n > 32) { /* keep the work per id bounded */
        p->ids[0] = p->ids[p->n - 1];
        p->n = 1;
        char *l = cg_tokenizer_decode(p->tok, p->ids, 1);
        if (!l)
            return false;
        p->printed = strlen(l);
        free(l);
    }
    return true;
}

/* A cg_token_fn: one more id. */
static bool print_token(void *ctx, int64_t id)
{
    printer *p = ctx;
    if (p->n == p->cap) {
        int64_t *ni = realloc(p->ids, (size_t)(p->cap * 2) * sizeof *ni);
        if (!ni) {
            cg_set_error("out of memory");
            return false;
        }
        p->ids = ni;
        p->cap *= 2;
    }
    p->ids[p->n++] = id;
    return printer_write(p, false);
}

int64_t *cg_charlm_generate_text(cg_charlm *m, const cg_tokenizer *tok, const int64_t *prompt,
                                 int64_t n_prompt, int64_t n_new, const cg_sample_opts *o,
                                 const cg_logit_rules *rules, cg_rng *rng, bool use_cache,
                                 FILE *out)
{
    if (!tok)
        return NULL;
    if (!m || !prompt || n_prompt < 1) /* as cg_charlm_generate refuses it */
        return cg_charlm_generate_ex(m, prompt, n_prompt, n_new, o, rules, rng, use_cache, NULL,
                                     NULL);
    printer p = {.tok = tok, .out = out, .cap = 64};
    p.ids = malloc((size_t)p.cap * sizeof *p.ids);
    char *l = p.ids ? cg_tokenizer_decode(tok, prompt + n_prompt - 1, 1) : NULL;
    if (!p.ids)
        cg_set_error("out of memory");
    int64_t *ids = NULL;
    if (l) {
        p.ids[p.n++] = prompt[n_prompt - 1]; /* its text counts as written */
        p.printed = strlen(l);
        ids = cg_charlm_generate_ex(m, prompt, n_prompt, n_new, o, rules, rng, use_cache,
                                    print_token, &p);
        if (ids && !printer_write(&p, true)) {
            free(ids);
            ids = NULL;
        }
    }
    free(l);
    free(p.ids);
    return ids;
}
