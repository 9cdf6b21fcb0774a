/* Greedy decoding and beam search for Seq2Seq (see beam.h). */
#include "models/seq2seq/beam.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/ops.h"
#include "nn/sample.h"

/* Keep rows[0..n) of the cache's batch (the library takes them as a tensor). */
static bool reorder(cg_kv_cache *c, const int64_t *rows, int64_t n)
{
    cg_tensor *r = cg_from_i64(1, &n, rows);
    bool ok = r && cg_kv_cache_reorder(c, r);
    cg_release(r);
    return ok;
}

/* A decoded PAD is a masked key from then on (the reference's decode masks
 * tgt_in == PAD, as cg_seq2seq_decode does); a cached key cannot be masked,
 * so once one of the n tokens at toks[0], toks[stride], ... is PAD the
 * cache is dropped and decoding recomputes every prefix. True if it was. */
static bool drop_cache_at_pad(cg_kv_cache **c, const int64_t *toks, int64_t n, int64_t stride)
{
    for (int64_t i = 0; *c && i < n; i++)
        if (toks[i * stride] == CG_PAD) {
            cg_kv_cache_free(*c);
            *c = NULL;
            return true;
        }
    return false;
}

/* Logits of the last position of every row: a contiguous [B,T,V] tensor
 * (new reference) from which row b's last step is at b*T*V + (T-1)*V. */
static cg_tensor *decode_logits(cg_seq2seq *m, const int64_t *ys, int64_t B, int64_t T,
                                const cg_seq2seq_memory *mem)
{
    cg_tensor *l = cg_seq2seq_decode(m, ys, B, T, mem);
    if (!l)
        return NULL;
    cg_tensor *c = cg_contiguous(l);
    cg_release(l);
    return c;
}

/* A source's length as the encoder reads it (fairseq's src_len): its ids
 * other than PAD, its EOS included. */
static int64_t source_len(const int64_t *src, int64_t S)
{
    int64_t n = 0;
    for (int64_t i = 0; i < S; i++)
        n += src[i] != CG_PAD;
    return n;
}

/* Whether lim blocks any token (min_len or no_repeat_ngram_size). */
static bool blocks(const cg_decode_limits *lim)
{
    return lim && (lim->min_len > 0 || lim->no_repeat_ngram_size > 0);
}

/* The steps of a source src[0..S) under lim (NULL: max_steps). */
static int64_t source_steps(const cg_seq2seq *m, const int64_t *src, int64_t S, int64_t max_steps,
                            const cg_decode_limits *lim)
{
    if (!lim)
        return max_steps;
    int64_t n = cg_decode_max_len(lim, source_len(src, S), m->cfg.max_len);
    return n < max_steps ? n : max_steps;
}

/* Greedy decoding's working state. Row b's tokens so far (BOS first) are
 * ys[b*W ..], all of length T; alive[0..n_alive) are the rows still
 * decoding, keep[k] the place of alive[k] in the previous step's batch;
 * tmp is the decoder's input; row b decodes at most cap[b] tokens. out
 * and lens are the caller's results. */
typedef struct {
    int64_t W, max_steps, n_alive, T;
    int64_t *ys, *tmp, *alive, *keep, *cap;
    int64_t *out, *lens;
    const cg_decode_limits *lim;
    const cg_sample_config *scfg; /* NULL: the argmax; else a draw from row b's rngs[b] */
    cg_rng *rngs;
    cg_kv_cache *cache;           /* NULL: every prefix is recomputed */
    cg_seq2seq_memory mem, sel;   /* the sources' memory; sel: the alive rows' */
    const cg_seq2seq_memory *cur; /* the memory the alive rows decode against */
} greedy_state;

static bool greedy_alloc(greedy_state *g, cg_seq2seq *m, int64_t B, int64_t max_steps, int64_t *out,
                         int64_t *lens, bool use_cache)
{
    const unsigned long serial = cg_error_serial();
    const int64_t W = max_steps + 1;
    *g = (greedy_state){
        .W = W, .max_steps = max_steps, .n_alive = B, .T = 1, .out = out, .lens = lens};
    g->cur = &g->mem;
    g->ys = malloc((size_t)(B * W) * sizeof *g->ys);
    g->tmp = malloc((size_t)(B * W) * sizeof *g->tmp);
    g->alive = malloc((size_t)B * sizeof *g->alive);
    g->keep = malloc((size_t)B * sizeof *g->keep);
    g->cap = malloc((size_t)B * sizeof *g->cap);
    g->cache = use_cache ? cg_seq2seq_kv_cache_new(m) : NULL;
    if (!g->ys || !g->tmp || !g->alive || !g->keep || !g->cap || (use_cache && !g->cache)) {
        if (cg_error_serial() == serial)
            cg_set_error("greedy decode: out of memory");
        return false;
    }
    return true;
}

static void greedy_free(greedy_state *g)
{
    cg_seq2seq_memory_free(&g->mem);
    cg_seq2seq_memory_free(&g->sel);
    free(g->ys);
    free(g->tmp);
    free(g->alive);
    free(g->keep);
    free(g->cap);
    cg_kv_cache_free(g->cache);
}

/* The logits [B,T,V] of the last position only, [B,1,V] (a view), or all
 * of them when not last (a new reference either way) */
static cg_tensor *last_position(cg_tensor *logits, bool last)
{
    const int64_t T = logits->shape[1];
    return last && T > 1 ? cg_narrow(logits, 1, T - 1, 1) : cg_retain(logits);
}

/* The next-token logits of every alive row (a new reference), checked
 * usable and passed through the limits' blocks. */
static cg_tensor *greedy_logits(greedy_state *g, cg_seq2seq *m, int64_t step)
{
    const int64_t V = m->cfg.vocab, W = g->W, T = g->T;
    /* with the cache: each row's last token at position T-1; without:
     * the whole prefix */
    const int64_t Tl = g->cache ? 1 : T;
    for (int64_t k = 0; k < g->n_alive; k++)
        memcpy(g->tmp + k * Tl, g->ys + g->alive[k] * W + T - Tl, (size_t)Tl * sizeof *g->tmp);
    cg_tensor *l = g->cache ? cg_seq2seq_decode_step(m, g->tmp, g->n_alive, g->cur, g->cache)
                            : decode_logits(m, g->tmp, g->n_alive, T, g->cur);
    if (!l)
        return NULL;
    float *d = cg_data(l);
    char what[48];
    snprintf(what, sizeof what, "greedy decode: step %lld", (long long)step);
    for (int64_t k = 0; k < g->n_alive; k++)
        if (!cg_logits_usable(d + (k * Tl + Tl - 1) * V, V, what)) {
            cg_release(l);
            return NULL;
        }
    bool wrote = false; /* the argmax then skips what the limits block */
    for (int64_t k = 0; blocks(g->lim) && k < g->n_alive; k++)
        wrote |= cg_decode_block(g->lim, g->ys + g->alive[k] * W + 1, T - 1, CG_EOS,
                                 d + (k * Tl + Tl - 1) * V, V);
    if (wrote)
        cg_tensor_modified(l);
    return l;
}

/* One id per alive row of logits [n_alive,1,V], row k drawn from its
 * sentence's generator (rngs[alive[k]]): a new int64 [n_alive,1]. PAD is
 * never drawn (fairseq-generate's lprobs[:, pad] = -inf): it would print
 * as nothing, count as a token for the limits and mask its key after; nor
 * are BOS and UNK, which print as nothing too (the text would then score
 * otherwise than its draw) and have probability only from label smoothing
 * (BOS is never a target; UNK is not one in a char vocabulary, built from
 * the training pairs, nor in BPE's, with byte fallback); temperature 0
 * (cg_sample's argmax) stays greedy decoding's token. */
static cg_tensor *draw_rows(greedy_state *g, const cg_tensor *last)
{
    const int64_t V = last->shape[2];
    float *buf = malloc((size_t)(g->n_alive * V) * sizeof *buf);
    cg_tensor *ids = cg_empty_dtype(CG_I64, 2, (const int64_t[]){g->n_alive, 1});
    bool ok = buf && ids && cg_copy_to(last, buf); /* any float dtype, any strides */
    if (!buf)
        cg_set_error("sample decode: out of memory");
    const bool draws = (float)g->scfg->temperature >= FLT_MIN; /* not cg_sample's argmax */
    for (int64_t k = 0; ok && k < g->n_alive; k++) {
        if (draws)
            buf[k * V + CG_PAD] = buf[k * V + CG_BOS] = buf[k * V + CG_UNK] = -INFINITY;
        ok = (cg_data_i64(ids)[k] = cg_sample(buf + k * V, V, g->scfg, &g->rngs[g->alive[k]])) >= 0;
    }
    free(buf);
    if (!ok) {
        cg_release(ids);
        return NULL;
    }
    return ids;
}

/* One step: every alive row's argmax token appended (and written to out);
 * a row that produced EOS or reached its cap gets its length and leaves
 * the batch, and the cache or the memory copies follow the rows that
 * stay. */
static bool greedy_step(greedy_state *g, cg_seq2seq *m, int64_t step)
{
    const int64_t W = g->W, T = g->T;
    cg_tensor *l = greedy_logits(g, m, step);
    if (!l)
        return false;
    /* each row's next token: its last position's argmax (the first on a
     * tie), or a draw from its own generator */
    cg_tensor *last = last_position(l, true);
    cg_tensor *am = last ? (g->scfg ? draw_rows(g, last) : cg_argmax(last, -1, false)) : NULL;
    cg_release_all(2, last, l);
    if (!am)
        return false;
    const int64_t *next = cg_data_i64(am);
    int64_t kept = 0;
    for (int64_t k = 0; k < g->n_alive; k++) {
        int64_t b = g->alive[k];
        int64_t best = next[k];
        g->ys[b * W + T] = best;
        g->out[b * g->max_steps + step] = best;
        if (best == CG_EOS) {
            g->lens[b] = step;
        } else if (step + 1 < g->cap[b]) {
            g->keep[kept] = k;
            g->alive[kept++] = b;
        }
    }
    bool dropped = drop_cache_at_pad(&g->cache, next, g->n_alive, 1);
    cg_release(am);
    g->T++;
    if (step + 1 == g->max_steps) /* the last step: no batch follows */
        kept = 0;
    if (kept != g->n_alive && kept > 0 && g->cache) {
        if (!reorder(g->cache, g->keep, kept))
            return false;
    } else if ((kept != g->n_alive || dropped) && kept > 0) {
        cg_seq2seq_memory_free(&g->sel);
        if (!cg_seq2seq_memory_select(&g->mem, g->alive, kept, &g->sel))
            return false;
        g->cur = &g->sel;
    }
    g->n_alive = kept;
    return true;
}

/* Every row starts from BOS with its cap (lim's, at most max_steps) as its
 * length; rows of cap 0 never decode (the memory then follows the others). */
static bool greedy_start(greedy_state *g, const cg_seq2seq *m, const int64_t *src, int64_t B,
                         int64_t S)
{
    g->n_alive = 0;
    for (int64_t b = 0; b < B; b++) {
        g->ys[b * g->W] = CG_BOS;
        g->cap[b] = source_steps(m, src + b * S, S, g->max_steps, g->lim);
        g->lens[b] = g->cap[b];
        if (g->cap[b] > 0)
            g->alive[g->n_alive++] = b;
    }
    for (int64_t i = 0; i < B * g->max_steps; i++)
        g->out[i] = CG_PAD;
    if (g->n_alive == B || g->n_alive == 0)
        return true;
    g->cur = &g->sel;
    return cg_seq2seq_memory_select(&g->mem, g->alive, g->n_alive, &g->sel);
}

bool cg_greedy_decode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S, int64_t max_steps,
                      int64_t *out, int64_t *lens, bool use_cache)
{
    return cg_greedy_decode_ex(m, src, B, S, max_steps, NULL, out, lens, use_cache);
}

bool cg_greedy_decode_ex(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S, int64_t max_steps,
                         const cg_decode_limits *lim, int64_t *out, int64_t *lens, bool use_cache)
{
    return cg_sample_decode(m, src, B, S, max_steps, lim, NULL, NULL, out, lens, use_cache);
}

bool cg_sample_decode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S, int64_t max_steps,
                      const cg_decode_limits *lim, const cg_sample_config *cfg, cg_rng *rngs,
                      int64_t *out, int64_t *lens, bool use_cache)
{
    if (cfg && !rngs) {
        cg_set_error("sample decode: no generators");
        return false;
    }
    if (!m || !src || !out || !lens || B < 1 || max_steps < 1) {
        cg_set_error("greedy decode: bad arguments (B=%lld, max_steps=%lld)", (long long)B,
                     (long long)max_steps);
        return false;
    }
    if (max_steps > m->cfg.max_len) {
        cg_set_error("greedy decode: %lld steps need %lld positions, the model has max_len %lld",
                     (long long)max_steps, (long long)max_steps, (long long)m->cfg.max_len);
        return false;
    }
    if (!cg_decode_limits_check(lim)) {
        cg_prefix_error("greedy decode: ");
        return false;
    }
    bool ok = false;
    cg_no_grad_begin();
    greedy_state g;
    if (!greedy_alloc(&g, m, B, max_steps, out, lens, use_cache))
        goto out;
    g.lim = lim;
    g.scfg = cfg;
    g.rngs = rngs;
    if (!cg_seq2seq_encode(m, src, B, S, &g.mem) || !greedy_start(&g, m, src, B, S))
        goto out;
    /* Rows are independent (padding is masked), so a finished row is simply
     * dropped from the batch: its remaining outputs are PAD, as in the
     * reference, without being computed. */
    for (int64_t step = 0; step < max_steps && g.n_alive > 0; step++)
        if (!greedy_step(&g, m, step))
            goto out;
    ok = true;
out:
    greedy_free(&g);
    cg_no_grad_end();
    return ok;
}

double cg_length_penalty(int64_t len, double alpha)
{
    return pow((5.0 + (double)len) / 6.0, alpha);
}

/* The log-probabilities of logits [B,T,V] (or of their last position
 * only, [B,1,V], when last): the library's log_softmax over all the live
 * rows in one op (which takes both threads only for large tensors) */
static cg_tensor *log_probs(cg_tensor *logits, bool last)
{
    cg_tensor *x = last_position(logits, last);
    cg_tensor *lp = x ? cg_log_softmax(x, -1) : NULL;
    cg_release(x);
    return lp;
}

typedef struct {
    int64_t parent; /* index into the live list */
    int64_t tok;
    double score;
    int64_t order; /* generation order, for a stable sort */
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

typedef cg_hypothesis hyp;

/* Beam search's working state. The live hypotheses are rows of W ids
 * starting with BOS, all of length T, with their summed log-probabilities;
 * next and nscore receive the following generation. */
typedef struct {
    int64_t V, W, beam;
    int K;                          /* tokens expanded per hypothesis */
    int64_t *live, *next, *parents; /* parents[i]: the live row next row i came from */
    double *lscore, *nscore;
    cand *cands;
    int64_t *rows, *flat; /* rows: zeros (memory copies); flat: the decoder's input */
    hyp *done;            /* finished hypotheses (and, at the end, the live ones) */
    int64_t n_done, n_live, T;
    cg_kv_cache *cache;         /* NULL: every prefix is recomputed */
    cg_seq2seq_memory mem, sel; /* the source's memory; sel: n_live copies of it */
    const cg_decode_limits *lim;
} beam_state;

static bool beam_alloc(beam_state *b, cg_seq2seq *m, int beam, int64_t max_steps, bool use_cache)
{
    const unsigned long serial = cg_error_serial();
    const int64_t V = m->cfg.vocab, W = max_steps + 1;
    const int K = beam < V ? beam : (int)V;
    *b = (beam_state){.V = V, .W = W, .beam = beam, .K = K, .n_live = 1, .T = 1};
    b->live = malloc((size_t)(beam * W) * sizeof *b->live);
    b->next = malloc((size_t)(beam * W) * sizeof *b->next);
    b->lscore = malloc((size_t)beam * sizeof *b->lscore);
    b->nscore = malloc((size_t)beam * sizeof *b->nscore);
    b->cands = malloc((size_t)beam * (size_t)K * sizeof *b->cands);
    b->rows = calloc((size_t)beam, sizeof *b->rows);
    b->flat = malloc((size_t)(beam * W) * sizeof *b->flat);
    b->done = calloc(((size_t)beam + 1) * (size_t)(max_steps + 1), sizeof *b->done);
    b->parents = malloc((size_t)beam * sizeof *b->parents);
    b->cache = use_cache ? cg_seq2seq_kv_cache_new(m) : NULL;
    if (!b->live || !b->next || !b->lscore || !b->nscore || !b->cands || !b->rows || !b->flat ||
        !b->done || !b->parents || (use_cache && !b->cache)) {
        if (cg_error_serial() == serial)
            cg_set_error("beam search: out of memory");
        return false;
    }
    return true;
}

static void beam_free(beam_state *b)
{
    if (b->done)
        for (int64_t i = 0; i < b->n_done; i++)
            free(b->done[i].ids);
    free(b->done);
    cg_seq2seq_memory_free(&b->mem);
    cg_seq2seq_memory_free(&b->sel);
    free(b->live);
    free(b->next);
    free(b->lscore);
    free(b->nscore);
    free(b->cands);
    free(b->rows);
    free(b->flat);
    free(b->parents);
    cg_kv_cache_free(b->cache);
}

/* ids[0..len) joins the finished list with score. */
static bool beam_finish(beam_state *b, const int64_t *ids, int64_t len, double score, bool finished)
{
    hyp *hp = &b->done[b->n_done];
    hp->order = b->n_done++;
    hp->len = len;
    hp->finished = finished;
    hp->ids = malloc((size_t)(len > 0 ? len : 1) * sizeof(int64_t));
    if (!hp->ids) {
        cg_set_error("beam search: out of memory");
        return false;
    }
    memcpy(hp->ids, ids, (size_t)len * sizeof(int64_t));
    hp->score = score;
    return true;
}

/* The candidates of this step: the top K tokens of every live hypothesis,
 * scored by their summed log-probability. The live hypotheses are one
 * batch: with the cache, their last tokens (the cache rows follow the
 * hypotheses); without, their whole prefixes against copies of the memory.
 * Returns the number of candidates, or -1 + error. */
static int64_t beam_expand(beam_state *b, cg_seq2seq *m)
{
    const int64_t W = b->W, T = b->T, V = b->V, Tl = b->cache ? 1 : T;
    if (!b->cache && b->n_live != b->sel.B) {
        cg_seq2seq_memory_free(&b->sel);
        if (!cg_seq2seq_memory_select(&b->mem, b->rows, b->n_live, &b->sel))
            return -1;
    }
    for (int64_t h = 0; h < b->n_live; h++)
        memcpy(b->flat + h * Tl, b->live + h * W + T - Tl, (size_t)Tl * sizeof *b->flat);
    cg_tensor *l = b->cache ? cg_seq2seq_decode_step(m, b->flat, b->n_live, &b->mem, b->cache)
                            : decode_logits(m, b->flat, b->n_live, T, &b->sel);
    if (!l)
        return -1;
    const float *d = cg_data(l);
    int64_t nc = 0;
    char what[48];
    snprintf(what, sizeof what, "beam search: step %lld", (long long)(T - 1));
    for (int64_t h = 0; h < b->n_live; h++)
        if (!cg_logits_usable(d + (h * Tl + Tl - 1) * V, V, what)) {
            cg_release(l);
            return -1;
        }
    cg_tensor *lp = log_probs(l, true);
    cg_release(l);
    if (!lp)
        return -1;
    /* the limits' blocks (-inf), then each row's K most likely tokens, the
     * lower id first among equals; a blocked one is no candidate */
    const bool blocking = blocks(b->lim);
    bool wrote = false;
    for (int64_t h = 0; blocking && h < b->n_live; h++)
        wrote |=
            cg_decode_block(b->lim, b->live + h * W + 1, T - 1, CG_EOS, cg_data(lp) + h * V, V);
    if (wrote)
        cg_tensor_modified(lp);
    cg_tensor *top = cg_k_topk_indices(lp, b->K, -1, true);
    for (int64_t h = 0; top && h < b->n_live; h++) {
        const float *row = cg_data(lp) + h * V;
        const int64_t *t = cg_data_i64(top) + h * b->K;
        for (int k = 0; k < b->K; k++) {
            if (blocking && row[t[k]] == -INFINITY)
                continue;
            b->cands[nc] = (cand){h, t[k], b->lscore[h] + row[t[k]], nc};
            nc++;
        }
    }
    cg_release_all(2, lp, top);
    return top ? nc : -1;
}

/* The best candidates in order until `beam` of them continue: one ending in
 * EOS is finished, the others form the next generation, which becomes the
 * live one (one token longer). */
static bool beam_select(beam_state *b, int64_t nc, double alpha)
{
    const int64_t W = b->W, T = b->T;
    qsort(b->cands, (size_t)nc, sizeof *b->cands, cand_cmp);
    int64_t nl = 0;
    for (int64_t c = 0; c < nc; c++) {
        const cand *cd = &b->cands[c];
        const int64_t *ph = b->live + cd->parent * W;
        if (cd->tok == CG_EOS) {
            if (!beam_finish(b, ph + 1, T - 1, cd->score / cg_length_penalty(T, alpha), true))
                return false;
        } else {
            memcpy(b->next + nl * W, ph, (size_t)T * sizeof(int64_t));
            b->next[nl * W + T] = cd->tok;
            b->nscore[nl] = cd->score;
            b->parents[nl] = cd->parent;
            nl++;
        }
        if (nl == b->beam)
            break;
    }
    int64_t *t = b->live;
    b->live = b->next;
    b->next = t;
    double *ts = b->lscore;
    b->lscore = b->nscore;
    b->nscore = ts;
    b->n_live = nl;
    b->T++;
    return true;
}

/* Best first; among equal scores the one that finished first. */
static int hyp_cmp(const void *a, const void *b)
{
    const hyp *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

void cg_hypotheses_free(cg_hypothesis *h, int n)
{
    for (int i = 0; h && i < n; i++) {
        free(h[i].ids);
        h[i].ids = NULL;
    }
}

bool cg_beam_search_nbest(cg_seq2seq *m, const int64_t *src, int64_t S, int beam, double alpha,
                          int64_t max_steps, const cg_decode_limits *lim, bool use_cache, int nbest,
                          cg_hypothesis *out, int *n_out)
{
    if (!m || !src || !out || !n_out || beam < 1 || max_steps < 1 || S < 1 || nbest < 1 ||
        nbest > beam) {
        cg_set_error("beam search: bad arguments (beam=%d, max_steps=%lld, nbest=%d)", beam,
                     (long long)max_steps, nbest);
        return false;
    }
    if (!isfinite(alpha)) {
        cg_set_error("beam search: the length penalty's alpha is %g, must be finite", alpha);
        return false;
    }
    if (max_steps > m->cfg.max_len) {
        cg_set_error("beam search: %lld steps need %lld positions, the model has max_len %lld",
                     (long long)max_steps, (long long)max_steps, (long long)m->cfg.max_len);
        return false;
    }
    if (!cg_decode_limits_check(lim)) {
        cg_prefix_error("beam search: ");
        return false;
    }
    *n_out = 0;
    bool ok = false;
    cg_no_grad_begin();
    beam_state b;
    const int64_t steps = source_steps(m, src, S, max_steps, lim);
    if (!beam_alloc(&b, m, beam, max_steps, use_cache) || !cg_seq2seq_encode(m, src, 1, S, &b.mem))
        goto out;
    b.lim = lim;
    b.live[0] = CG_BOS;
    b.lscore[0] = 0.0;
    for (int64_t step = 0; step < steps; step++) {
        int64_t nc = beam_expand(&b, m);
        if (nc < 0 || !beam_select(&b, nc, alpha))
            goto out;
        if (b.n_done >= beam || b.n_live == 0)
            break;
        /* whether it dropped the cache is b.cache itself: beam_expand, without
         * one, selects the memory's rows and decodes every prefix */
        (void)drop_cache_at_pad(&b.cache, b.live + b.T - 1, b.n_live, b.W);
        if (b.cache && !reorder(b.cache, b.parents, b.n_live))
            goto out;
    }
    /* the live ones join, scored without EOS */
    for (int64_t h = 0; h < b.n_live; h++)
        if (!beam_finish(&b, b.live + h * b.W + 1, b.T - 1,
                         b.lscore[h] / cg_length_penalty(b.T - 1, alpha), false))
            goto out;
    if (b.n_done == 0) {
        cg_set_error("beam search: no hypothesis");
        goto out;
    }
    qsort(b.done, (size_t)b.n_done, sizeof *b.done, hyp_cmp);
    *n_out = b.n_done < nbest ? (int)b.n_done : nbest;
    for (int i = 0; i < *n_out; i++) {
        out[i] = b.done[i];
        b.done[i].ids = NULL;
    }
    ok = true;
out:
    beam_free(&b);
    cg_no_grad_end();
    return ok;
}

bool cg_beam_search(cg_seq2seq *m, const int64_t *src, int64_t S, int beam, double alpha,
                    int64_t max_steps, int64_t **out, int64_t *len, double *score, bool *finished,
                    bool use_cache)
{
    cg_hypothesis h;
    int n = 0;
    if (!out || !len) {
        cg_set_error("beam search: bad arguments (NULL output)");
        return false;
    }
    *out = NULL;
    if (!cg_beam_search_nbest(m, src, S, beam, alpha, max_steps, NULL, use_cache, 1, &h, &n))
        return false;
    *out = h.ids;
    *len = h.len;
    if (score)
        *score = h.score;
    if (finished)
        *finished = h.finished;
    return true;
}

double cg_seq2seq_score(cg_seq2seq *m, const int64_t *src, int64_t S, const int64_t *hyp_ids,
                        int64_t n, bool with_eos, double alpha)
{
    if (!m || !src || (n > 0 && !hyp_ids) || n < 0) {
        cg_set_error("seq2seq score: bad arguments");
        return NAN;
    }
    int64_t T = n + (with_eos ? 1 : 0);
    if (T < 1)
        return 0.0;
    if (T > m->cfg.max_len) {
        cg_set_error("seq2seq score: hypothesis of %lld tokens is longer than max_len %lld",
                     (long long)T, (long long)m->cfg.max_len);
        return NAN;
    }
    const int64_t V = m->cfg.vocab;
    double result = NAN;
    cg_no_grad_begin();
    int64_t *tin = malloc((size_t)T * sizeof *tin), *tout = malloc((size_t)T * sizeof *tout);
    cg_tensor *l = NULL;
    if (!tin || !tout) {
        cg_set_error("seq2seq score: out of memory");
        goto out;
    }
    tin[0] = CG_BOS;
    for (int64_t i = 0; i < n; i++) {
        if (i + 1 < T)
            tin[i + 1] = hyp_ids[i];
        tout[i] = hyp_ids[i];
    }
    if (with_eos)
        tout[n] = CG_EOS;
    cg_tensor *raw = cg_seq2seq_forward(m, src, 1, S, tin, T);
    if (!raw)
        goto out;
    l = log_probs(raw, false);
    cg_release(raw);
    if (!l)
        goto out;
    double sum = 0;
    for (int64_t t = 0; t < T; t++)
        sum += cg_data(l)[t * V + tout[t]];
    result = sum / cg_length_penalty(T, alpha);
out:
    cg_release(l);
    free(tin);
    free(tout);
    cg_no_grad_end();
    return result;
}
