/* Greedy decoding and beam search for Seq2Seq (see beam.h). */
#include "models/seq2seq/beam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

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

bool cg_greedy_decode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                      int64_t max_steps, int64_t *out, int64_t *lens, bool use_cache)
{
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
    const int64_t V = m->cfg.vocab;
    bool ok = false;
    cg_no_grad_begin();
    cg_seq2seq_memory mem = {0}, sel = {0};
    int64_t W = max_steps + 1;
    int64_t *ys = malloc((size_t)(B * W) * sizeof *ys);
    int64_t *tmp = malloc((size_t)(B * W) * sizeof *tmp);
    int64_t *alive = malloc((size_t)B * sizeof *alive);
    int64_t *keep = malloc((size_t)B * sizeof *keep);
    cg_kv_cache *cache = use_cache ? cg_seq2seq_kv_cache_new(m) : NULL;
    if (!ys || !tmp || !alive || !keep || (use_cache && !cache)) {
        if (!cg_has_error())
            cg_set_error("greedy decode: out of memory");
        goto out;
    }
    if (!cg_seq2seq_encode(m, src, B, S, &mem))
        goto out;
    int64_t n_alive = B;
    for (int64_t b = 0; b < B; b++) {
        ys[b * W] = CG_BOS;
        lens[b] = max_steps;
        alive[b] = b;
    }
    for (int64_t i = 0; i < B * max_steps; i++)
        out[i] = CG_PAD;
    /* Rows are independent (padding is masked), so a finished row is simply
     * dropped from the batch: its remaining outputs are PAD, as in the
     * reference, without being computed. */
    const cg_seq2seq_memory *cur = &mem;
    int64_t T = 1;
    for (int64_t step = 0; step < max_steps && n_alive > 0; step++) {
        /* with the cache: each row's last token at position T-1; without:
         * the whole prefix */
        const int64_t Tl = cache ? 1 : T;
        for (int64_t k = 0; k < n_alive; k++)
            memcpy(tmp + k * Tl, ys + alive[k] * W + T - Tl, (size_t)Tl * sizeof *tmp);
        cg_tensor *l = cache ? cg_seq2seq_decode_step(m, tmp, n_alive, cur, cache)
                             : decode_logits(m, tmp, n_alive, T, cur);
        if (!l)
            goto out;
        const float *d = cg_data(l);
        int64_t kept = 0;
        for (int64_t k = 0; k < n_alive; k++) {
            int64_t b = alive[k];
            const float *row = d + (k * Tl + Tl - 1) * V;
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (row[v] > row[best])
                    best = v;
            ys[b * W + T] = best;
            out[b * max_steps + step] = best;
            if (best == CG_EOS) {
                lens[b] = step;
            } else {
                keep[kept] = k;
                alive[kept++] = b;
            }
        }
        cg_release(l);
        T++;
        if (kept != n_alive && kept > 0 && cache) {
            if (!cg_kv_cache_reorder(cache, keep, kept))
                goto out;
        } else if (kept != n_alive && kept > 0) {
            cg_seq2seq_memory_free(&sel);
            if (!cg_seq2seq_memory_select(&mem, alive, kept, &sel))
                goto out;
            cur = &sel;
        }
        n_alive = kept;
    }
    ok = true;
out:
    cg_seq2seq_memory_free(&mem);
    cg_seq2seq_memory_free(&sel);
    free(ys);
    free(tmp);
    free(alive);
    free(keep);
    cg_kv_cache_free(cache);
    cg_no_grad_end();
    return ok;
}

double cg_length_penalty(int64_t len, double alpha)
{
    return pow((5.0 + (double)len) / 6.0, alpha);
}

/* log_softmax of one row of V logits, in double */
static void log_softmax_row(const float *x, int64_t V, double *out)
{
    double mx = x[0];
    for (int64_t v = 1; v < V; v++)
        if (x[v] > mx)
            mx = x[v];
    double s = 0;
    for (int64_t v = 0; v < V; v++)
        s += exp((double)x[v] - mx);
    double ls = log(s);
    for (int64_t v = 0; v < V; v++)
        out[v] = (double)x[v] - mx - ls;
}

/* The indices of the k largest of x[0, n) in descending order, the lower
 * index first among equals (k <= n), in one pass: a value enters the sorted
 * list only when it beats the last kept one, after every kept one it does
 * not exceed. While the list is not full every value enters (so that rows
 * of NaN give the first k indices). Returns k. */
static int top_k(const double *x, int64_t n, int k, int64_t *idx)
{
    int m = 0;
    for (int64_t v = 0; v < n; v++) {
        if (m == k && !(x[v] > x[idx[k - 1]]))
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && x[v] > x[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
    return m;
}

typedef struct {
    int64_t parent; /* index into the live list */
    int64_t tok;
    double score;
    int64_t order;  /* generation order, for a stable sort */
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

typedef struct {
    int64_t *ids; /* without BOS/EOS */
    int64_t len;
    double score;
    bool finished; /* ended with EOS */
} hyp;

bool cg_beam_search(cg_seq2seq *m, const int64_t *src, int64_t S, int beam, double alpha,
                    int64_t max_steps, int64_t **out, int64_t *len, double *score,
                    bool *finished, bool use_cache)
{
    if (!m || !src || !out || !len || beam < 1 || max_steps < 1 || S < 1) {
        cg_set_error("beam search: bad arguments (beam=%d, max_steps=%lld)", beam,
                     (long long)max_steps);
        return false;
    }
    if (max_steps > m->cfg.max_len) {
        cg_set_error("beam search: %lld steps need %lld positions, the model has max_len %lld",
                     (long long)max_steps, (long long)max_steps + 1, (long long)m->cfg.max_len);
        return false;
    }
    *out = NULL;
    const int64_t V = m->cfg.vocab, W = max_steps + 1;
    const int K = beam < V ? beam : (int)V;
    bool ok = false;
    cg_no_grad_begin();
    cg_seq2seq_memory mem = {0}, sel = {0};
    /* live hypotheses: rows of W ids starting with BOS, all of length T */
    int64_t *live = malloc((size_t)(beam * W) * sizeof *live);
    int64_t *next = malloc((size_t)(beam * W) * sizeof *next);
    double *lscore = malloc((size_t)beam * sizeof *lscore);
    double *nscore = malloc((size_t)beam * sizeof *nscore);
    double *lp = malloc((size_t)V * sizeof *lp);
    cand *cands = malloc((size_t)beam * (size_t)K * sizeof *cands);
    int64_t *rows = calloc((size_t)beam, sizeof *rows);
    int64_t *flat = malloc((size_t)(beam * W) * sizeof *flat);
    hyp *done = calloc((size_t)(beam + 1) * (size_t)(max_steps + 1), sizeof *done);
    int64_t *parents = malloc((size_t)beam * sizeof *parents);
    int64_t *top = malloc((size_t)K * sizeof *top);
    cg_kv_cache *cache = use_cache ? cg_seq2seq_kv_cache_new(m) : NULL;
    int64_t n_done = 0, n_live = 1, T = 1;
    if (!live || !next || !lscore || !nscore || !lp || !cands || !rows || !flat || !done ||
        !parents || !top || (use_cache && !cache)) {
        if (!cg_has_error())
            cg_set_error("beam search: out of memory");
        goto out;
    }
    if (!cg_seq2seq_encode(m, src, 1, S, &mem))
        goto out;
    live[0] = CG_BOS;
    lscore[0] = 0.0;
    for (int64_t step = 0; step < max_steps; step++) {
        /* the live hypotheses are one batch: with the cache, their last
         * tokens (the cache rows follow the hypotheses); without, their
         * whole prefixes against copies of the memory */
        const int64_t Tl = cache ? 1 : T;
        if (!cache && n_live != sel.B) {
            cg_seq2seq_memory_free(&sel);
            if (!cg_seq2seq_memory_select(&mem, rows, n_live, &sel))
                goto out;
        }
        for (int64_t h = 0; h < n_live; h++)
            memcpy(flat + h * Tl, live + h * W + T - Tl, (size_t)Tl * sizeof *flat);
        cg_tensor *l = cache ? cg_seq2seq_decode_step(m, flat, n_live, &mem, cache)
                             : decode_logits(m, flat, n_live, T, &sel);
        if (!l)
            goto out;
        const float *d = cg_data(l);
        int64_t nc = 0;
        for (int64_t h = 0; h < n_live; h++) {
            log_softmax_row(d + (h * Tl + Tl - 1) * V, V, lp);
            const int nt = top_k(lp, V, K, top);
            for (int k = 0; k < nt; k++) {
                cands[nc] = (cand){h, top[k], lscore[h] + lp[top[k]], nc};
                nc++;
            }
        }
        cg_release(l);
        qsort(cands, (size_t)nc, sizeof *cands, cand_cmp);
        int64_t nl = 0;
        for (int64_t c = 0; c < nc; c++) {
            const int64_t *ph = live + cands[c].parent * W;
            if (cands[c].tok == CG_EOS) {
                hyp *hp = &done[n_done++];
                hp->len = T - 1;
                hp->finished = true;
                hp->ids = malloc((size_t)(T > 1 ? T - 1 : 1) * sizeof(int64_t));
                if (!hp->ids) {
                    cg_set_error("beam search: out of memory");
                    goto out;
                }
                memcpy(hp->ids, ph + 1, (size_t)(T - 1) * sizeof(int64_t));
                hp->score = cands[c].score / cg_length_penalty(T, alpha);
            } else {
                memcpy(next + nl * W, ph, (size_t)T * sizeof(int64_t));
                next[nl * W + T] = cands[c].tok;
                nscore[nl] = cands[c].score;
                parents[nl] = cands[c].parent;
                nl++;
            }
            if (nl == beam)
                break;
        }
        int64_t *t = live;
        live = next;
        next = t;
        double *ts = lscore;
        lscore = nscore;
        nscore = ts;
        n_live = nl;
        T++;
        if (n_done >= beam || n_live == 0)
            break;
        if (cache && !cg_kv_cache_reorder(cache, parents, n_live))
            goto out;
    }
    for (int64_t h = 0; h < n_live; h++) {
        hyp *hp = &done[n_done++];
        hp->len = T - 1;
        hp->ids = malloc((size_t)(T > 1 ? T - 1 : 1) * sizeof(int64_t));
        if (!hp->ids) {
            cg_set_error("beam search: out of memory");
            goto out;
        }
        memcpy(hp->ids, live + h * W + 1, (size_t)(T - 1) * sizeof(int64_t));
        hp->score = lscore[h] / cg_length_penalty(T - 1, alpha);
    }
    if (n_done == 0) {
        cg_set_error("beam search: no hypothesis");
        goto out;
    }
    int64_t best = 0;
    for (int64_t i = 1; i < n_done; i++)
        if (done[i].score > done[best].score)
            best = i;
    *out = done[best].ids;
    done[best].ids = NULL;
    *len = done[best].len;
    if (score)
        *score = done[best].score;
    if (finished)
        *finished = done[best].finished;
    ok = true;
out:
    if (done)
        for (int64_t i = 0; i < n_done; i++)
            free(done[i].ids);
    free(done);
    cg_seq2seq_memory_free(&mem);
    cg_seq2seq_memory_free(&sel);
    free(live);
    free(next);
    free(lscore);
    free(nscore);
    free(lp);
    free(cands);
    free(rows);
    free(flat);
    free(parents);
    free(top);
    cg_kv_cache_free(cache);
    cg_no_grad_end();
    return ok;
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
    double *lp = malloc((size_t)V * sizeof *lp);
    cg_tensor *l = NULL;
    if (!tin || !tout || !lp) {
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
    l = cg_contiguous(raw);
    cg_release(raw);
    if (!l)
        goto out;
    double sum = 0;
    for (int64_t t = 0; t < T; t++) {
        log_softmax_row(cg_data(l) + t * V, V, lp);
        sum += lp[tout[t]];
    }
    result = sum / cg_length_penalty(T, alpha);
out:
    cg_release(l);
    free(tin);
    free(tout);
    free(lp);
    cg_no_grad_end();
    return result;
}
