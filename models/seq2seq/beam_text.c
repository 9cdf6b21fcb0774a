/* Sentences of text through the decoders (beam.h's second half: sources
 * encoded, translations decoded to text under the decoding limits), apart
 * from the decoders themselves in beam.c. */
#include "models/seq2seq/beam.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/util/files.h"

/* Set "WHAT: <the error recorded>" ("unknown error" when none is). */
void cg_seq2seq_prefix_error(const char *what)
{
    if (!*cg_last_error())
        cg_set_error("unknown error");
    cg_prefix_error("%s: ", what);
}

void cg_sources_free(cg_sources *s)
{
    for (int64_t i = 0; s->ids && i < s->n; i++)
        free(s->ids[i]);
    free(s->ids);
    free(s->len);
    memset(s, 0, sizeof *s);
}

bool cg_sources_encode(const cg_tokenizer *tok, const char *const *texts, int64_t n,
                       int64_t max_len, cg_sources *out)
{
    out->n = 0;
    out->ids = calloc((size_t)(n ? n : 1), sizeof *out->ids);
    out->len = calloc((size_t)(n ? n : 1), sizeof *out->len);
    if (!out->ids || !out->len) {
        cg_sources_free(out);
        cg_set_error("out of memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t k;
        int64_t *ids = cg_tokenizer_encode(tok, texts[i], &k, NULL);
        char what[48];
        snprintf(what, sizeof what, "sentence %lld", (long long)i + 1);
        if (!ids)
            cg_seq2seq_prefix_error(what);
        else if (k + 1 > max_len)
            cg_set_error("sentence %lld has %lld tokens; the model takes at most %lld",
                         (long long)i + 1, (long long)k, (long long)max_len - 1);
        if (!ids || k + 1 > max_len) {
            free(ids);
            cg_sources_free(out);
            return false;
        }
        out->ids[i] = ids;
        out->len[i] = k;
        out->n++;
    }
    return true;
}

void cg_strings_free(char **s, int64_t n)
{
    if (!s)
        return;
    for (int64_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* out[i] = the text of ids[0..L) (echoed); false + error. */
static bool put_text(const cg_tokenizer *tok, const int64_t *ids, int64_t L, char **out, FILE *echo)
{
    if (!(*out = cg_tokenizer_decode(tok, ids, L)))
        return false;
    if (!echo)
        return true;
    errno = 0; /* checked at once: a reader gone stops the translation here */
    fprintf(echo, "%s\n", *out);
    return cg_output_flush(echo);
}

uint64_t cg_sample_seed(uint64_t seed, int64_t i, int j)
{
    return seed + (uint64_t)i * 0x9E3779B97F4A7C15ULL + (uint64_t)j * 0xD1B54A32D192ED03ULL;
}

cg_decode_limits cg_translate_limits_default(void)
{
    return (cg_decode_limits){.max_len_a = CG_MAX_LEN_A, .max_len_b = CG_MAX_LEN_B};
}

/* Greedy decoding of sources c0..c0+B at once into out[c0..), each as
 * long as lim lets it be (the chunk's steps: the longest cap). */
static bool greedy_chunk(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int64_t c0,
                         int64_t B, bool use_cache, const cg_decode_limits *lim,
                         const cg_sample_config *cfg, uint64_t seed, char **out, FILE *echo)
{
    int64_t S = 0, steps = 0;
    for (int64_t i = 0; i < B; i++) {
        const int64_t n = src->len[c0 + i] + 1, cap = cg_decode_max_len(lim, n, m->cfg.max_len);
        S = n > S ? n : S;
        steps = cap > steps ? cap : steps;
    }
    int64_t *ids = calloc((size_t)(B * S), sizeof *ids);
    int64_t *res = malloc((size_t)(B * (steps ? steps : 1)) * sizeof *res);
    int64_t *lens = calloc((size_t)B, sizeof *lens);
    /* sampling: sentence i draws from its own generator, seeded by seed and i */
    cg_rng *rngs = cfg ? malloc((size_t)B * sizeof *rngs) : NULL;
    bool ok = ids && res && lens && (!cfg || rngs);
    for (int64_t i = 0; ok && cfg && i < B; i++)
        rngs[i] = cg_rng_new(cg_sample_seed(seed, c0 + i, 0));
    if (!ok)
        cg_set_error("out of memory");
    for (int64_t i = 0; ok && i < B; i++) {
        memcpy(ids + i * S, src->ids[c0 + i], (size_t)src->len[c0 + i] * sizeof *ids);
        ids[i * S + src->len[c0 + i]] = CG_EOS;
    }
    /* (its errors name it, or the encoder or decoder); every cap 0: nothing
     * to decode, the translations are empty */
    ok = ok && (steps == 0 ||
                cg_sample_decode(m, ids, B, S, steps, lim, cfg, rngs, res, lens, use_cache));
    for (int64_t i = 0; ok && i < B; i++)
        ok = put_text(tok, res + i * steps, lens[i], &out[c0 + i], echo);
    free(ids);
    free(res);
    free(lens);
    free(rngs);
    return ok;
}

/* The nbest best hypotheses of source i (h[0..*n)), each as long as lim
 * lets it be. */
static bool beam_source(cg_seq2seq *m, const cg_sources *src, int64_t i, int beam, double alpha,
                        bool use_cache, const cg_decode_limits *lim, int nbest, cg_hypothesis *h,
                        int *n)
{
    int64_t S = src->len[i] + 1;
    int64_t *ids = malloc((size_t)S * sizeof *ids);
    if (!ids) {
        cg_set_error("out of memory");
        return false;
    }
    memcpy(ids, src->ids[i], (size_t)src->len[i] * sizeof *ids);
    ids[S - 1] = CG_EOS;
    /* the search takes lim's cap (0 included) below this */
    int64_t steps = cg_decode_max_len(lim, S, m->cfg.max_len);
    /* (its errors name it, or the encoder or decoder) */
    bool ok = cg_beam_search_nbest(m, ids, S, beam, alpha, steps > 0 ? steps : 1, lim, use_cache,
                                   nbest, h, n);
    free(ids);
    return ok;
}

/* Beam search of source i into out[i]. */
static bool beam_one(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int64_t i,
                     int beam, double alpha, bool use_cache, const cg_decode_limits *lim,
                     char **out, FILE *echo)
{
    cg_hypothesis h;
    int n = 0;
    bool ok = beam_source(m, src, i, beam, alpha, use_cache, lim, 1, &h, &n) &&
              put_text(tok, h.ids, h.len, &out[i], echo);
    cg_hypotheses_free(&h, n);
    return ok;
}

/* *d: lim, or the default when it is NULL, checked (false + error). */
static bool translate_limits(const cg_decode_limits *lim, cg_decode_limits *d)
{
    *d = lim ? *lim : cg_translate_limits_default();
    if (cg_decode_limits_check(d))
        return true;
    cg_prefix_error("translate: ");
    return false;
}

bool cg_translate_nbest(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int64_t i,
                        int beam, double alpha, bool use_cache, const cg_decode_limits *lim,
                        int nbest, char **texts, double *scores, int *n)
{
    cg_decode_limits d;
    if (!m || !tok || !src || i < 0 || i >= src->n || !texts || !scores || !n || nbest < 1) {
        cg_set_error("translate nbest: bad arguments");
        return false;
    }
    if (!translate_limits(lim, &d))
        return false;
    cg_hypothesis *h = calloc((size_t)nbest, sizeof *h);
    if (!h) {
        cg_set_error("out of memory");
        return false;
    }
    bool was_training = m->base.training; /* decoded in eval mode, then restored */
    cg_module_train(CG_MODULE(m), false);
    int got = 0, k = 0;
    bool ok = beam_source(m, src, i, beam, alpha, use_cache, &d, nbest, h, &got);
    cg_module_train(CG_MODULE(m), was_training);
    for (; ok && k < got; k++) {
        scores[k] = h[k].score;
        ok = put_text(tok, h[k].ids, h[k].len, &texts[k], NULL);
    }
    cg_hypotheses_free(h, got);
    free(h);
    if (!ok)
        for (int j = 0; j < k; j++)
            free(texts[j]);
    *n = ok ? got : 0;
    return ok;
}

char **cg_translate_all(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int beam,
                        double alpha, bool use_cache, const cg_decode_limits *lim, FILE *echo)
{
    return cg_translate_all_until(m, tok, src, beam, alpha, use_cache, lim, echo, NULL);
}

/* stop given and true: "interrupted" */
static bool stopped(bool (*stop)(void))
{
    if (!stop || !stop())
        return false;
    cg_set_error("interrupted");
    return true;
}

/* cg_translate_all_until's work, sampling with cfg (and seed) when given */
static char **translate_all(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int beam,
                            double alpha, bool use_cache, const cg_decode_limits *lim,
                            const cg_sample_config *cfg, uint64_t seed, FILE *echo,
                            bool (*stop)(void))
{
    cg_decode_limits d;
    if (!translate_limits(lim, &d))
        return NULL;
    char **out = calloc((size_t)(src->n ? src->n : 1), sizeof *out);
    if (!out) {
        cg_set_error("out of memory");
        return NULL;
    }
    bool was_training = m->base.training; /* decoded in eval mode, then restored */
    cg_module_train(CG_MODULE(m), false);
    bool ok = true;
    if (beam <= 1) {
        const int64_t chunk = 50;
        for (int64_t c0 = 0; ok && c0 < src->n; c0 += chunk) {
            const int64_t B = src->n - c0 < chunk ? src->n - c0 : chunk;
            ok = !stopped(stop) &&
                 greedy_chunk(m, tok, src, c0, B, use_cache, &d, cfg, seed, out, echo);
        }
    } else {
        for (int64_t i = 0; ok && i < src->n; i++)
            ok = !stopped(stop) && beam_one(m, tok, src, i, beam, alpha, use_cache, &d, out, echo);
    }
    cg_module_train(CG_MODULE(m), was_training);
    if (!ok) {
        cg_strings_free(out, src->n);
        return NULL;
    }
    return out;
}

char **cg_translate_all_until(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src,
                              int beam, double alpha, bool use_cache, const cg_decode_limits *lim,
                              FILE *echo, bool (*stop)(void))
{
    return translate_all(m, tok, src, beam, alpha, use_cache, lim, NULL, 0, echo, stop);
}

char **cg_translate_sample(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src,
                           const cg_sample_config *cfg, uint64_t seed, bool use_cache,
                           const cg_decode_limits *lim, FILE *echo)
{
    if (!cfg) {
        cg_set_error("translate sample: cfg is NULL");
        return NULL;
    }
    return translate_all(m, tok, src, 1, 0.0, use_cache, lim, cfg, seed, echo, NULL);
}

/* A draw's place in cg_translate_sample_nbest's ranking */
typedef struct {
    double score;
    int j;
} draw_rank;

/* best score first; a tie: the earlier draw first */
static int by_score(const void *a, const void *b)
{
    const draw_rank *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->j - y->j;
}

/* Decode `draws` rows of source i (ids: draws rows of S, filled here) with
 * generators of sentence i, and rank them into r by their scores. */
static bool draw_rows(cg_seq2seq *m, const cg_sources *src, int64_t i, const cg_sample_config *cfg,
                      uint64_t seed, int draws, double alpha, bool use_cache,
                      const cg_decode_limits *lim, int64_t steps, int64_t *ids, int64_t *res,
                      int64_t *lens, cg_rng *rngs, draw_rank *r)
{
    const int64_t S = src->len[i] + 1;
    for (int j = 0; j < draws; j++) {
        memcpy(ids + j * S, src->ids[i], (size_t)src->len[i] * sizeof *ids);
        ids[j * S + S - 1] = CG_EOS;
        rngs[j] = cg_rng_new(cg_sample_seed(seed, i, j));
        lens[j] = 0;
    }
    bool ok = steps == 0 ||
              cg_sample_decode(m, ids, draws, S, steps, lim, cfg, rngs, res, lens, use_cache);
    for (int j = 0; ok && j < draws; j++) {
        /* a draw that stopped at its cap has no EOS to score */
        r[j] = (draw_rank){cg_seq2seq_score(m, ids + j * S, S, res + j * (steps ? steps : 1),
                                            lens[j], lens[j] < steps, alpha),
                           j};
        ok = !isnan(r[j].score);
    }
    if (ok)
        qsort(r, (size_t)draws, sizeof *r, by_score);
    return ok;
}

bool cg_translate_sample_nbest(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src,
                               int64_t i, const cg_sample_config *cfg, uint64_t seed, int draws,
                               double alpha, bool use_cache, const cg_decode_limits *lim, int nbest,
                               char **texts, double *scores, int *n)
{
    cg_decode_limits d;
    if (!m || !tok || !src || !cfg || i < 0 || i >= src->n || !texts || !scores || !n ||
        draws < 1 || nbest < 1 || nbest > draws) {
        cg_set_error("translate sample nbest: bad arguments");
        return false;
    }
    if (!translate_limits(lim, &d))
        return false;
    const int64_t S = src->len[i] + 1, steps = cg_decode_max_len(&d, S, m->cfg.max_len);
    int64_t *ids = malloc((size_t)(draws * S) * sizeof *ids);
    int64_t *res = malloc((size_t)(draws * (steps ? steps : 1)) * sizeof *res);
    int64_t *lens = malloc((size_t)draws * sizeof *lens);
    cg_rng *rngs = malloc((size_t)draws * sizeof *rngs);
    draw_rank *r = malloc((size_t)draws * sizeof *r);
    bool ok = ids && res && lens && rngs && r;
    if (!ok)
        cg_set_error("out of memory");
    bool was_training = m->base.training; /* decoded in eval mode, then restored */
    cg_module_train(CG_MODULE(m), false);
    ok = ok && draw_rows(m, src, i, cfg, seed, draws, alpha, use_cache, &d, steps, ids, res, lens,
                         rngs, r);
    cg_module_train(CG_MODULE(m), was_training);
    int k = 0;
    for (; ok && k < nbest; k++) {
        const int j = r[k].j;
        scores[k] = r[k].score;
        ok = put_text(tok, res + j * (steps ? steps : 1), lens[j], &texts[k], NULL);
    }
    for (int j = 0; !ok && j < k; j++)
        free(texts[j]);
    *n = ok ? nbest : 0;
    free(ids);
    free(res);
    free(lens);
    free(rngs);
    free(r);
    return ok;
}
