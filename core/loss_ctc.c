/* F.ctc_loss's kernels (core/ops.h cg_k_ctc_loss, cg_k_ctc_loss_backward):
 * the alpha recursion of Graves et al. (2006) in log space forward, the
 * beta recursion and the gradient with respect to the log-probabilities
 * backward, as PyTorch 1.13's ctc_loss_cpu and ctc_loss_backward_cpu
 * compute them in float32 (each log-sum-exp written in their order, with
 * libm's expf and logf, so the bits are theirs), an input length of 0
 * giving the loss 0 (empty target) or inf as later PyTorch (1.13 reads
 * memory it never wrote). A thread takes whole samples: each writes only
 * its own alpha, beta, loss and gradient entries, so the bits do not
 * depend on the team. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/loss_rows.h"
#include "core/ops.h"
#include "core/shares.h"

/* A call runs its samples on one thread below this many alpha entries. */
#define CTC_PAR_THRESHOLD 16384

/* The checked arguments: log_probs [T, N, C] (unbatched: N 1), the
 * lengths, and each sample's targets at tg + off[b], stride ts */
typedef struct {
    int64_t T, N, C, W; /* W: 2 * the longest target + 1 */
    int64_t blank, ts;
    bool batched;
    const float *lp; /* contiguous [T, N, C] */
    const int64_t *il, *tl, *tg;
    int64_t *off;
    float *alpha; /* [N, T, W] */
    float *beta;  /* backward: [N, T, W] */
    float *nll;   /* [N] */
    const float *g;
    float *grad; /* backward: [T, N, C] */
    bool zero_inf;
} ctc_job;

/* The extended target's symbol s: blank at even s, label s / 2 at odd */
static inline int64_t ctc_sym(const ctc_job *j, int64_t b, int64_t s)
{
    return s % 2 == 0 ? j->blank : j->tg[j->off[b] + j->ts * (s / 2)];
}

static inline float ctc_lp(const ctc_job *j, int64_t t, int64_t b, int64_t c)
{
    return j->lp[(t * j->N + b) * j->C + c];
}

/* log(e^a + e^b + e^c) + lp, the larger first taken out (0 when all are
 * -inf), as PyTorch writes it */
static inline float lse3(float a, float b, float c, float lp)
{
    float m = a > b ? a : b;
    m = c > m ? c : m;
    if (m == -INFINITY)
        m = 0.0f;
    return logf(expf(a - m) + expf(b - m) + expf(c - m)) + m + lp;
}

/* ------------------------------------------------------------- checks */
/* lengths: int64 [N] ("[1]" or 0-d unbatched), each in [0, hi] (hi < 0:
 * no upper bound); hi_what names the bound */
static bool ctc_lengths(const char *op, const char *arg, const cg_tensor *len, const ctc_job *j,
                        int64_t hi, const char *hi_what, const int64_t **data, cg_tensor **held)
{
    char b[96];
    if (!cg_check_dtype(op, arg, len, CG_I64))
        return false;
    if (j->batched ? len->ndim != 1 || len->shape[0] != j->N
                   : cg_numel(len) != 1 || len->ndim > 1) {
        cg_set_error("%s: %s of shape %s, expected %s", op, arg, cg_shape_str(len, b, sizeof b),
                     j->batched ? "[N], one a sample" : "0-d or [1] (unbatched log_probs)");
        return false;
    }
    *held = cg_k_contiguous(len);
    if (!*held)
        return false;
    *data = cg_data_i64(*held);
    for (int64_t i = 0; i < j->N; i++)
        if ((*data)[i] < 0 || (hi >= 0 && (*data)[i] > hi)) {
            cg_set_error("%s: %s[%lld] is %lld, expected 0 to %lld (%s)", op, arg, (long long)i,
                         (long long)(*data)[i], (long long)(hi >= 0 ? hi : INT64_MAX), hi_what);
            return false;
        }
    return true;
}

/* The targets: int64, padded [N, S] (S at least each target length) or
 * concatenated 1-d (sum of the target lengths); each sample's labels in
 * [0, C), not the blank; j->off, j->ts, j->tg set */
static bool ctc_targets(const char *op, const cg_tensor *tgt, ctc_job *j, cg_tensor **held)
{
    char b[96];
    if (!cg_check_dtype(op, "targets", tgt, CG_I64))
        return false;
    const bool padded = tgt->ndim == 2;
    if (tgt->ndim != 1 && !(padded && tgt->shape[0] == j->N)) {
        cg_set_error("%s: targets of shape %s, expected [N, S] = [%lld, S] (padded) or 1-d "
                     "(concatenated)",
                     op, cg_shape_str(tgt, b, sizeof b), (long long)j->N);
        return false;
    }
    int64_t pos = 0, longest = 0;
    for (int64_t i = 0; i < j->N; i++) {
        const int64_t n = j->tl[i];
        if (padded && n > tgt->shape[1]) {
            cg_set_error("%s: target_lengths[%lld] is %lld, longer than the padded targets' %lld",
                         op, (long long)i, (long long)n, (long long)tgt->shape[1]);
            return false;
        }
        j->off[i] = padded ? i * tgt->shape[1] : pos;
        pos += n;
        longest = n > longest ? n : longest;
    }
    if (!padded && tgt->shape[0] != pos) {
        cg_set_error("%s: concatenated targets of shape %s, expected [%lld] (the target lengths' "
                     "sum)",
                     op, cg_shape_str(tgt, b, sizeof b), (long long)pos);
        return false;
    }
    *held = cg_k_contiguous(tgt);
    if (!*held)
        return false;
    j->tg = cg_data_i64(*held);
    j->ts = 1;
    j->W = 2 * longest + 1;
    for (int64_t i = 0; i < j->N; i++)
        for (int64_t k = 0; k < j->tl[i]; k++) {
            const int64_t c = j->tg[j->off[i] + k];
            if (c < 0 || c >= j->C || c == j->blank) {
                cg_set_error(
                    "%s: target %lld of sample %lld is %lld, expected a label in [0, %lld) "
                    "other than the blank %lld",
                    op, (long long)k, (long long)i, (long long)c, (long long)j->C,
                    (long long)j->blank);
                return false;
            }
        }
    return true;
}

/* Every argument checked into j, the references it reads in held[4]
 * (log_probs, targets, the two lengths); false + error (held released) */
static bool ctc_check(const char *op, const cg_tensor *lp, const cg_tensor *tgt,
                      const cg_tensor *il, const cg_tensor *tl, int64_t blank, ctc_job *j,
                      cg_tensor **held)
{
    char b[96];
    memset(j, 0, sizeof *j);
    for (int k = 0; k < 4; k++)
        held[k] = NULL;
    if (!lp || !tgt || !il || !tl)
        return cg_error_null_input(op);
    if (lp->dtype != CG_F32) {
        cg_set_error("%s: log_probs is %s, expected float32 (PyTorch 1.13's CPU ctc_loss takes "
                     "float32 and float64 only; cgrad has no float64)",
                     op, cg_dtype_name(lp->dtype));
        return false;
    }
    if (lp->ndim != 2 && lp->ndim != 3) {
        cg_set_error("%s: log_probs of shape %s, expected [T, N, C] or [T, C] (unbatched)", op,
                     cg_shape_str(lp, b, sizeof b));
        return false;
    }
    j->batched = lp->ndim == 3;
    j->T = lp->shape[0];
    j->N = j->batched ? lp->shape[1] : 1;
    j->C = lp->shape[lp->ndim - 1];
    j->blank = blank;
    if (blank < 0 || blank >= j->C) {
        cg_set_error("%s: blank is %lld, expected a class in [0, %lld) (log_probs' last dim)", op,
                     (long long)blank, (long long)j->C);
        return false;
    }
    j->off = malloc((size_t)(j->N > 0 ? j->N : 1) * sizeof *j->off);
    bool ok = j->off != NULL;
    if (!ok)
        cg_set_error("%s: out of memory", op);
    ok = ok &&
         ctc_lengths(op, "input_lengths", il, j, j->T, "log_probs' dim 0, T", &j->il, &held[2]);
    ok = ok && ctc_lengths(op, "target_lengths", tl, j, -1, "", &j->tl, &held[3]);
    ok = ok && ctc_targets(op, tgt, j, &held[1]);
    ok = ok && (held[0] = cg_k_contiguous(lp)) != NULL;
    if (ok) {
        j->lp = cg_data(held[0]);
        return true;
    }
    free(j->off);
    j->off = NULL;
    cg_release_all(4, held[0], held[1], held[2], held[3]);
    return false;
}

/* ------------------------------------------------------------ forward */
static void ctc_alpha_chunk(int64_t b0, int64_t b1, int thread, const void *ctx)
{
    (void)thread;
    const ctc_job *j = ctx;
    const int64_t W = j->W;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t il = j->il[b], tl = j->tl[b], S = 2 * tl + 1;
        float *la = j->alpha + b * j->T * W;
        if (il == 0) { /* later PyTorch's: no input, only the empty target */
            j->nll[b] = tl == 0 ? 0.0f : INFINITY;
            continue;
        }
        for (int64_t s = 0; s < W; s++)
            la[s] = -INFINITY;
        la[0] = ctc_lp(j, 0, b, j->blank);
        if (tl > 0)
            la[1] = ctc_lp(j, 0, b, ctc_sym(j, b, 1));
        for (int64_t t = 1; t < il; t++) {
            const float *prev = la + (t - 1) * W;
            float *cur = la + t * W;
            for (int64_t s = 0; s < S; s++) {
                const int64_t c = ctc_sym(j, b, s);
                const float a2 = s > 0 ? prev[s - 1] : -INFINITY;
                const float a3 = s > 1 && ctc_sym(j, b, s - 2) != c ? prev[s - 2] : -INFINITY;
                cur[s] = lse3(prev[s], a2, a3, ctc_lp(j, t, b, c));
            }
        }
        const float *last = la + (il - 1) * W;
        if (tl == 0) {
            j->nll[b] = -last[0];
        } else {
            const float l1 = last[2 * tl], l2 = last[2 * tl - 1];
            float m = l1 > l2 ? l1 : l2;
            m = m == -INFINITY ? 0.0f : m;
            j->nll[b] = -(logf(expf(l1 - m) + expf(l2 - m)) + m);
        }
    }
}

static int ctc_team(const ctc_job *j)
{
    return cg_shares_team(j->N * j->T * j->W > CTC_PAR_THRESHOLD);
}

cg_tensor *cg_k_ctc_loss(const cg_tensor *log_probs, const cg_tensor *targets,
                         const cg_tensor *input_lengths, const cg_tensor *target_lengths,
                         int64_t blank, cg_tensor **log_alpha)
{
    const char *op = "ctc_loss";
    ctc_job j;
    cg_tensor *held[4];
    if (log_alpha)
        *log_alpha = NULL;
    if (!ctc_check(op, log_probs, targets, input_lengths, target_lengths, blank, &j, held))
        return NULL;
    cg_tensor *la = cg_empty(CG_SHAPE(j.N, j.T, j.W));
    cg_tensor *out = la ? (j.batched ? cg_empty(CG_SHAPE(j.N)) : cg_empty(0, NULL)) : NULL;
    if (out) {
        j.alpha = cg_data(la);
        j.nll = cg_data(out);
        cg_shares_run(j.N, 1, ctc_team(&j), ctc_alpha_chunk, &j);
    }
    if (out && log_alpha)
        *log_alpha = cg_retain(la);
    free(j.off);
    cg_release_all(5, held[0], held[1], held[2], held[3], la);
    return out;
}

/* ----------------------------------------------------------- backward */
/* Sample b's beta and its gradient rows: PyTorch's log-space collection
 * of alpha beta per label, then (e^lp - e^(collected + nll - lp)) g */
static void ctc_grad_sample(const ctc_job *j, int64_t b)
{
    const int64_t W = j->W, C = j->C, il = j->il[b], tl = j->tl[b];
    const float *la = j->alpha + b * j->T * W;
    float *lb = j->beta + b * j->T * W;
    const float nll = j->nll[b];
#define GRAD(t, c) j->grad[((t)*j->N + b) * C + (c)]
    for (int64_t t = 0; t < j->T; t++)
        for (int64_t c = 0; c < C; c++)
            GRAD(t, c) = t < il ? -INFINITY : 0.0f;
    if (il == 0 || (j->zero_inf && nll == INFINITY)) {
        for (int64_t t = 0; t < il; t++)
            for (int64_t c = 0; c < C; c++)
                GRAD(t, c) = 0.0f;
        return;
    }
    float *end = lb + (il - 1) * W;
    const float *aend = la + (il - 1) * W;
    for (int64_t s = 0; s < W; s++)
        end[s] = -INFINITY;
    end[2 * tl] = ctc_lp(j, il - 1, b, j->blank);
    GRAD(il - 1, j->blank) = aend[2 * tl] + end[2 * tl];
    if (tl > 0) {
        const int64_t c = ctc_sym(j, b, 2 * tl - 1);
        end[2 * tl - 1] = ctc_lp(j, il - 1, b, c);
        GRAD(il - 1, c) = aend[2 * tl - 1] + end[2 * tl - 1];
    }
    for (int64_t t = il - 2; t >= 0; t--) {
        const float *next = lb + (t + 1) * W;
        float *cur = lb + t * W;
        for (int64_t s = 2 * tl; s >= 0; s--) {
            const int64_t c = ctc_sym(j, b, s);
            const float b2 = s < 2 * tl ? next[s + 1] : -INFINITY;
            const float b3 = s < 2 * tl - 1 && ctc_sym(j, b, s + 2) != c ? next[s + 2] : -INFINITY;
            cur[s] = lse3(next[s], b2, b3, ctc_lp(j, t, b, c));
            const float ab = la[t * W + s] + cur[s];
            float *acc = &GRAD(t, c);
            if (*acc == -INFINITY) {
                *acc = ab;
            } else {
                const float m = *acc > ab ? *acc : ab;
                *acc = logf(expf(*acc - m) + expf(ab - m)) + m;
            }
        }
    }
    const float gr = j->g[b];
    for (int64_t t = 0; t < il; t++)
        for (int64_t c = 0; c < C; c++) {
            const float lp = ctc_lp(j, t, b, c);
            GRAD(t, c) = (expf(lp) - expf(GRAD(t, c) + nll - lp)) * gr;
        }
#undef GRAD
}

static void ctc_beta_chunk(int64_t b0, int64_t b1, int thread, const void *ctx)
{
    (void)thread;
    for (int64_t b = b0; b < b1; b++)
        ctc_grad_sample(ctx, b);
}

cg_tensor *cg_k_ctc_loss_backward(const cg_tensor *g, const cg_tensor *log_probs,
                                  const cg_tensor *targets, const cg_tensor *input_lengths,
                                  const cg_tensor *target_lengths, int64_t blank,
                                  const cg_tensor *nll, const cg_tensor *log_alpha,
                                  bool zero_infinity)
{
    const char *op = "ctc_loss_backward";
    ctc_job j;
    cg_tensor *held[4], *gc = NULL, *nc = NULL, *ac = NULL, *out = NULL;
    if (!ctc_check(op, log_probs, targets, input_lengths, target_lengths, blank, &j, held))
        return NULL;
    char b[96], c[96];
    float *beta = NULL;
    if (!nll || !log_alpha)
        cg_error_null_input(op);
    else if (!cg_check_f32(op, "nll", nll) || !cg_check_f32(op, "log_alpha", log_alpha))
        ;
    else if (cg_numel(nll) != j.N || log_alpha->ndim != 3 || log_alpha->shape[0] != j.N ||
             log_alpha->shape[1] != j.T || log_alpha->shape[2] != j.W)
        cg_set_error("%s: nll %s or log_alpha %s is not cg_k_ctc_loss's for these arguments", op,
                     cg_shape_str(nll, b, sizeof b), cg_shape_str(log_alpha, c, sizeof c));
    else if (cg_ce_upstream_grad(op, g, j.batched ? CG_REDUCTION_NONE : CG_REDUCTION_SUM, j.N,
                                 &gc) &&
             (nc = cg_k_contiguous(nll)) && (ac = cg_k_contiguous(log_alpha)) &&
             (out = cg_empty(log_probs->ndim, log_probs->shape))) {
        beta = malloc((size_t)(j.N * j.T * j.W > 0 ? j.N * j.T * j.W : 1) * sizeof *beta);
        if (beta) {
            j.alpha = cg_data(ac);
            j.beta = beta;
            j.nll = cg_data(nc);
            j.g = cg_data(gc);
            j.grad = cg_data(out);
            j.zero_inf = zero_infinity;
            cg_shares_run(j.N, 1, ctc_team(&j), ctc_beta_chunk, &j);
        } else {
            cg_set_error("%s: out of memory", op);
            cg_release(out);
            out = NULL;
        }
    }
    free(beta);
    free(j.off);
    cg_release_all(7, held[0], held[1], held[2], held[3], gc, nc, ac);
    return out;
}
