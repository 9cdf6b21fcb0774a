/* Cross-entropy over [N, C] logits with PyTorch semantics (ignore_index,
 * label_smoothing, reduction).
 *
 * Per kept row r with target y, lse = log sum_j exp(x_j):
 *   loss_r = (1-ls) * (lse - x_y) + ls * (lse - mean_j x_j)
 * (the smoothing term is ls * mean over all C classes of -log p_j). The mean
 * is sum_r loss_r / K over the K kept rows (K = 0 gives 0/0 = NaN), the sum
 * sum_r loss_r; none keeps each row's loss (0 at an ignored row).
 * Rows are computed in parallel, then summed in row order (deterministic).
 *
 * The precision policy (the calling thread's, core/gemm.h): in fp32 a row
 * takes two exponentials an element in double lanes (row_lse, row_grad),
 * bits pinned since issue 37; under bf16 autocast it is computed as
 * PyTorch's autocast computes it, in float lanes with one exponential an
 * element (ce_row_autocast). One row loop serves both (cg_ce_row). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/loss_rows.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"
#include "core/vmath.h"

/* Check the targets (int64 [N], each in [0, C) or ignore_index) of logits
 * [N, C] (shape: their shape for messages); count kept rows. *held gets a
 * contiguous reference to the targets (release it) whose data the kernel
 * reads. */
bool cg_ce_targets(const char *op, int64_t N, int64_t C, const char *shape,
                   const cg_tensor *target_t, int64_t ignore_index, int64_t *kept, cg_tensor **held)
{
    char b2[96];
    *held = NULL;
    if (!cg_check_dtype(op, "targets", target_t, CG_I64))
        return false;
    if (target_t->ndim != 1 || target_t->shape[0] != N) {
        cg_set_error("%s: argument 'targets' has shape %s, expected [N] = [%lld] for logits of "
                     "shape %s (one target per row)",
                     op, cg_shape_str(target_t, b2, sizeof b2), (long long)N, shape);
        return false;
    }
    cg_tensor *tc = cg_k_contiguous(target_t);
    if (!tc)
        return false;
    const int64_t *targets = cg_data_i64(tc);
    int64_t k = 0;
    for (int64_t r = 0; r < N; r++) {
        int64_t t = targets[r];
        if (t == ignore_index)
            continue;
        if (t < 0 || t >= C) {
            cg_set_error("%s: target %lld at row %lld is out of range [0, %lld) "
                         "(logits shape %s, ignore_index %lld)",
                         op, (long long)t, (long long)r, (long long)C, shape,
                         (long long)ignore_index);
            cg_release(tc);
            return false;
        }
        k++;
    }
    *kept = k;
    *held = tc;
    return true;
}

bool cg_ce_ls_check(const char *op, float ls)
{
    if (!(ls >= 0.0f && ls <= 1.0f)) {
        cg_set_error("%s: label_smoothing must be in [0, 1] (got %g)", op, (double)ls);
        return false;
    }
    return true;
}

bool cg_ce_reduction(const char *op, cg_reduction r)
{
    if ((unsigned)r <= CG_REDUCTION_NONE)
        return true;
    cg_set_error("%s: reduction %d is not one of CG_REDUCTION_MEAN, _SUM, _NONE%s", op, (int)r,
                 r == CG_REDUCTION_BATCHMEAN ? " (batchmean is kl_div's)" : "");
    return false;
}

/* The class weights of C classes: NULL (none), or float32 [C]; *held a
 * contiguous reference (release it) or NULL. */
static bool class_weight(const char *op, const cg_tensor *weight, int64_t C, cg_tensor **held)
{
    *held = NULL;
    if (!weight)
        return true;
    if (!cg_check_f32(op, "weight", weight))
        return false;
    if (weight->ndim != 1 || weight->shape[0] != C) {
        char b[96];
        cg_set_error("%s: argument 'weight' has shape %s, expected [C] = [%lld], one a class", op,
                     cg_shape_str(weight, b, sizeof b), (long long)C);
        return false;
    }
    *held = cg_k_contiguous(weight);
    return *held != NULL;
}

/* The mean's divisor: the kept rows' count, or with class weights w the
 * sum of their targets' weights (PyTorch's total_weight), in row order. */
static double kept_total(const cg_tensor *w, const int64_t *t, int64_t N, int64_t ignore_index,
                         int64_t kept)
{
    if (!w)
        return (double)kept;
    double s = 0.0;
    for (int64_t r = 0; r < N; r++)
        if (t[r] != ignore_index)
            s += (double)cg_data(w)[t[r]];
    return s;
}

/* Check the logits shape, the reduction, the targets (ce_targets) and the
 * class weights (class_weight: *wc, NULL without them). */
static bool ce_check(const char *op, const cg_tensor *logits, const cg_tensor *target_t,
                     const cg_tensor *weight, int64_t ignore_index, float ls, cg_reduction r,
                     int64_t *kept, cg_tensor **held, cg_tensor **wc)
{
    char b[96];
    *held = *wc = NULL;
    if (!cg_ce_reduction(op, r) || !cg_f32_args(op, 1, &logits))
        return false;
    if (!cg_check_dtype(op, "targets", target_t, CG_I64))
        return false;
    if (logits->ndim != 2) {
        cg_set_error("%s: logits must be 2-D [N, C] (shape %s)", op,
                     cg_shape_str(logits, b, sizeof b));
        return false;
    }
    if (!cg_ce_ls_check(op, ls) || !class_weight(op, weight, logits->shape[1], wc))
        return false;
    if (cg_ce_targets(op, logits->shape[0], logits->shape[1], cg_shape_str(logits, b, sizeof b),
                      target_t, ignore_index, kept, held))
        return true;
    cg_release(*wc);
    *wc = NULL;
    return false;
}

/* The rows of a class loss of class weights wc (NULL: none) over N rows
 * of targets t: cg_ce_rows_for's with the mean over the kept weights. */
static cg_ce_rows ce_rows_weighted(int64_t N, int64_t C, const int64_t *t, const cg_tensor *wc,
                                   int64_t ignore_index, int64_t kept, float ls, float g, bool mean)
{
    cg_ce_rows c = cg_ce_rows_for(C, ignore_index, kept, ls, g, mean);
    if (!wc)
        return c;
    c.weight = cg_data(wc);
    for (int64_t j = 0; j < C; j++)
        c.wsum += (double)c.weight[j];
    if (kept > 0 && mean)
        c.scale = (double)g / kept_total(wc, t, N, ignore_index, kept);
    return c;
}

/* ---------------------------------------------------------- row kernels */
/* One contiguous row of C logits. Vectorised for AVX-512, AVX2 or SSE2
 * (EW_CLONES, chosen at load time) with the same IEEE operations in every
 * clone and in 8 lanes of a fixed order, so the bits depend on neither the
 * CPU nor the thread count. exp is ew_expf (core/vmath.h, ~1.5 ulp), never
 * libm's scalar expf. */

/* The exponentials of x - sub in 16 lanes: ew_expf16, or its faster twin
 * where the caller has checked that every x - sub is in its range (normal:
 * the same bits). */
static inline __attribute__((always_inline)) v16f exp16_less(v16f x, float sub, bool normal)
{
    return normal ? ew_expf16_normal(x - sub) : ew_expf16(x - sub);
}

/* The loop of row_lse from its maximum mx: the sum of exp(x_j - mx) into
 * *s, of x_j into *sx (when sx is not NULL); normal as exp16_less. */
static inline __attribute__((always_inline)) void lse_sums(const float *x, int64_t C, float mx,
                                                           bool normal, double *s, double *sx)
{
    v8d acc = {0}, xs = {0}, lo, hi;
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        widen16(exp16_less(v, mx, normal), &lo, &hi);
        acc += lo;
        acc += hi;
        if (sx) {
            widen16(v, &lo, &hi);
            xs += lo;
            xs += hi;
        }
    }
    double a[8], b[8];
    for (int l = 0; l < 8; l++) {
        a[l] = acc[l];
        b[l] = xs[l];
    }
    for (int64_t j0 = j; j < C; j++) {
        a[(j - j0) % 8] += (double)ew_expf(x[j] - mx);
        b[(j - j0) % 8] += (double)x[j];
    }
    *s = lanes8_total(a);
    if (sx)
        *sx = lanes8_total(b);
}

/* log sum_j exp(x_j) (max subtracted, double lanes: element j in lane
 * j % 8); *sx: sum_j x_j when sx is not NULL (label smoothing); *mn: the
 * row's minimum, -INFINITY when it has a NaN (row_grad's range check). The
 * exponentials run 16 at a time (ew_expf16), each half added to the lanes
 * in element order: the bits of one element at a time. */
EW_CLONES static double row_lse(const float *x, int64_t C, double *sx, float *mn)
{
    bool bad;
    float mx = max16_min(x, C, mn, &bad);
    if (bad)
        *mn = -INFINITY;
    double s;
    if (*mn - mx >= EW_EXP_NORMAL_MIN) /* false for infinities too */
        lse_sums(x, C, mx, true, &s, sx);
    else
        lse_sums(x, C, mx, false, &s, sx);
    return (double)mx + log(s);
}

/* The loop of row_grad; normal as exp16_less. */
static inline __attribute__((always_inline)) void grad_lanes(const float *x, int64_t C, float lse,
                                                             double scale, double smooth,
                                                             bool normal, float *d)
{
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        v8d lo, hi;
        memcpy(&v, x + j, sizeof v);
        widen16(exp16_less(v, lse, normal), &lo, &hi);
        /* each half stored by itself: an array of the two went through
         * the stack, and its 64-byte reload stalled on the two stores */
        v8f o0 = __builtin_convertvector(scale * (lo - smooth), v8f),
            o1 = __builtin_convertvector(scale * (hi - smooth), v8f);
        memcpy(d + j, &o0, sizeof o0);
        memcpy(d + j + 8, &o1, sizeof o1);
    }
    for (; j < C; j++)
        d[j] = (float)(scale * ((double)ew_expf(x[j] - lse) - smooth));
}

/* The gradient of one kept row: scale * (softmax(x) - ls/C - (1-ls) at t),
 * in double as the scalar code was (gradient accumulation over
 * micro-batches then matches the whole batch to float32's rounding). mn:
 * the row's minimum as row_lse gives it, or -INFINITY when not known. */
EW_CLONES static void row_grad(const float *x, int64_t C, float lse, float mn, int64_t t,
                               double scale, double smooth, double hit, float *d)
{
    float xt = x[t]; /* d may be x itself (the fused kernel's rows) */
    /* x - lse <= 0: lse >= the row's maximum (its sum has exp(0) = 1) */
    if (mn - lse >= EW_EXP_NORMAL_MIN)
        grad_lanes(x, C, lse, scale, smooth, true, d);
    else
        grad_lanes(x, C, lse, scale, smooth, false, d);
    d[t] = (float)(scale * ((double)ew_expf(xt - lse) - smooth - hit));
}

/* ---------------------------------------------- bf16 autocast's rows */
/* Under bf16 autocast the loss computes as PyTorch's autocast does (its
 * float log-softmax): float lanes, and one exponential an element. Element
 * j goes to lane j % 16 of 16 float sums, added pairwise at the end (a
 * fixed order: the same bits for any thread count and every clone). */

/* The sum of 16 float lanes, pairwise in a fixed order. */
static inline float lanes16_total(const float *a)
{
    float s[8];
    for (int l = 0; l < 8; l++)
        s[l] = a[l] + a[l + 8];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* sum_j exp(x_j - mx) over a row of C logits, mx = max_j x_j (into *max),
 * each exponential also written to e[j] when e is not NULL (e may be x:
 * x[j] is read first); *sx: sum_j x_j. */
/* The loop of row_exp_sum from the maximum mx; normal as exp16_less. */
static inline __attribute__((always_inline)) float exp_sum16(const float *x, int64_t C, float *e,
                                                             float mx, bool normal, float *sx)
{
    v16f acc = {0}, xs = {0};
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        v16f ev = exp16_less(v, mx, normal);
        if (e)
            memcpy(e + j, &ev, sizeof ev);
        acc += ev;
        xs += v;
    }
    float a[16], b[16];
    memcpy(a, &acc, sizeof a);
    memcpy(b, &xs, sizeof b);
    for (int64_t j0 = j; j < C; j++) {
        float xj = x[j], ej = ew_expf(xj - mx);
        if (e)
            e[j] = ej;
        a[j - j0] += ej;
        b[j - j0] += xj;
    }
    *sx = lanes16_total(b);
    return lanes16_total(a);
}

EW_CLONES static float row_exp_sum(const float *x, int64_t C, float *e, float *max, float *sx)
{
    bool bad;
    float mn, mx = *max = max16_min(x, C, &mn, &bad); /* vector code in the clone */
    if (!bad && mn - mx >= EW_EXP_NORMAL_MIN)
        return exp_sum16(x, C, e, mx, true, sx);
    return exp_sum16(x, C, e, mx, false, sx);
}

/* d[j] = d[j] * a - c over a row of C, then d[t] -= hit: the exponentials
 * row_exp_sum wrote, turned into the gradient in place. */
EW_CLONES static void row_scale(float *d, int64_t C, float a, float c, int64_t t, float hit)
{
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        memcpy(&v, d + j, sizeof v);
        v = v * a - c;
        memcpy(d + j, &v, sizeof v);
    }
    for (; j < C; j++)
        d[j] = d[j] * a - c;
    d[t] -= hit;
}

/* ------------------------------------------------------------ one row */

cg_ce_rows cg_ce_rows_for(int64_t C, int64_t ignore_index, int64_t kept, float ls, float g,
                          bool mean)
{
    return (cg_ce_rows){.C = C,
                        .ignore_index = ignore_index,
                        .kept = kept,
                        .ls = ls,
                        .scale = kept <= 0 ? 0.0
                                 : mean    ? (double)g / (double)kept
                                           : (double)g,
                        .autocast = cg_get_matmul_precision() == CG_PRECISION_BF16};
}

/* A kept row's loss from its lse l (double), x_t and sum_j x_j. */
static double ce_loss_of(const cg_ce_rows *c, double l, float xt, double sx)
{
    double v = (1.0 - c->ls) * (l - (double)xt);
    if (c->ls != 0.0)
        v += c->ls * (l - sx / (double)c->C);
    return v;
}

/* bf16 autocast's row: e_j = exp(x_j - max) once, written into dr while
 * summed, then scaled there to scale * (e_j / s - ls/C), less scale (1-ls)
 * at t. */
static double ce_row_autocast(const cg_ce_rows *c, const float *xr, int64_t t, float *lse,
                              float *dr)
{
    int64_t C = c->C;
    bool ignored = t == c->ignore_index, grad = dr && !ignored;
    float xt = ignored ? 0.0f : xr[t]; /* dr may be xr */
    float mx, sx, s = row_exp_sum(xr, C, grad ? dr : NULL, &mx, &sx);
    double l = (double)mx + log((double)s);
    if (lse)
        *lse = (float)l;
    if (dr && !grad)
        memset(dr, 0, (size_t)C * sizeof *dr);
    if (grad)
        row_scale(dr, C, (float)(c->scale / (double)s), (float)(c->scale * c->ls / (double)C), t,
                  (float)(c->scale * (1.0 - c->ls)));
    return ignored ? 0.0 : ce_loss_of(c, l, xt, sx);
}

/* A kept row's gradient in fp32 (row_grad) from its lse rounded to float
 * (NULL: computed again) and its minimum mn (-INFINITY: not known). */
static void ce_row_grad(const cg_ce_rows *c, const float *xr, int64_t t, const float *lse, float mn,
                        float *dr)
{
    float l = lse ? *lse : (float)row_lse(xr, c->C, NULL, &mn);
    row_grad(xr, c->C, l, mn, t, c->scale, c->ls / (double)c->C, 1.0 - c->ls, dr);
}

/* A kept row of the class weights w (c->weight, PyTorch's formula with
 * label smoothing): (1-ls) w_t (lse - x_t) + ls/C sum_j w_j (lse - x_j),
 * from its lse l in double (lse_in: the forward's rounded to float, else
 * computed here, rounded into *lse when not NULL); dr (when not NULL, may
 * be xr) its gradient, scale [(1-ls) w_t (e_j - [j = t]) + ls/C (W e_j -
 * w_j)] with e_j = exp(x_j - lse) and W = sum_j w_j. Double lanes in
 * element order, one precision in both policies. */
static double ce_row_weighted(const cg_ce_rows *c, const float *xr, int64_t t, const float *lse_in,
                              float *lse, float *dr)
{
    const int64_t C = c->C;
    const float *w = c->weight;
    float mn;
    double l = lse_in ? (double)*lse_in : row_lse(xr, C, NULL, &mn);
    float lf = (float)l;
    if (lse)
        *lse = lf;
    double wt = (double)w[t], v = (1.0 - c->ls) * wt * (l - (double)xr[t]);
    if (c->ls != 0.0) {
        double sw = 0.0;
        for (int64_t j = 0; j < C; j++)
            sw += (double)w[j] * (l - (double)xr[j]);
        v += c->ls / (double)C * sw;
    }
    if (dr) { /* after the loss: dr may be xr */
        double hit = (1.0 - c->ls) * wt, sm = c->ls / (double)C;
        for (int64_t j = 0; j < C; j++) {
            double e = (double)ew_expf(xr[j] - lf);
            dr[j] = (float)(c->scale * (hit * (e - (double)(j == t)) + sm * (c->wsum * e - w[j])));
        }
    }
    return v;
}

/* Row xr's gradient for the upstream gradient g of c->scale into dr (may
 * be xr), zero when ignored, from its lse rounded to float (lse NULL:
 * computed again). bf16 autocast reads no lse: it computes the row again
 * as its forward did (the forward's bits for g = 1). */
static void ce_row_backward(const cg_ce_rows *c, const float *xr, int64_t t, const float *lse,
                            float *dr)
{
    int64_t C = c->C;
    if (t == c->ignore_index)
        memset(dr, 0, (size_t)C * sizeof *dr);
    else if (c->weight)
        ce_row_weighted(c, xr, t, lse, NULL, dr);
    else if (c->autocast)
        ce_row_autocast(c, xr, t, NULL, dr);
    else
        ce_row_grad(c, xr, t, lse, -INFINITY, dr);
}

/* Row xr's loss (0 when ignored); *lse (when not NULL) its log-sum-exp
 * rounded to float; dr (when not NULL) its gradient, ce_row_backward's
 * (the same bits, as the forward computes it for g = 1). An ignored row
 * whose lse is not asked for costs nothing. */
double cg_ce_row(const cg_ce_rows *c, const float *xr, int64_t t, float *lse, float *dr)
{
    bool ignored = t == c->ignore_index;
    if (ignored && !lse) {
        if (dr)
            memset(dr, 0, (size_t)c->C * sizeof *dr);
        return 0.0;
    }
    if (c->weight && !ignored)
        return ce_row_weighted(c, xr, t, NULL, lse, dr);
    if (c->autocast)
        return ce_row_autocast(c, xr, t, lse, dr);
    float mn;
    double sx = 0.0, l = row_lse(xr, c->C, &sx, &mn);
    float lf = (float)l, xt = ignored ? 0.0f : xr[t]; /* read before dr (may be xr) */
    if (lse)
        *lse = lf;
    if (dr && ignored)
        memset(dr, 0, (size_t)c->C * sizeof *dr);
    else if (dr)
        ce_row_grad(c, xr, t, &lf, mn, dr);
    return ignored ? 0.0 : ce_loss_of(c, l, xt, sx);
}

/* Rows of a cross-entropy: cg_ce_rows_run's, or (loss NULL) the
 * backward's (g_rows: reduction none's upstream gradient, a row's scale;
 * NULL: c's) */
typedef struct {
    const cg_ce_rows *c;
    const float *x, *lse_in, *g_rows;
    const int64_t *t;
    float *lse, *dx;
    double *loss;
} ce_job;

static void ce_rows_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const ce_job *j = ctx;
    const int64_t C = j->c->C;
    cg_ce_rows row = *j->c;
    for (int64_t r = r0; r < r1; r++) {
        if (j->g_rows) /* the backward's scale of row r (ce_backward_chunk's) */
            row.scale = j->g_rows[r];
        j->loss[r] = cg_ce_row(&row, j->x + r * C, j->t[r], j->lse ? j->lse + r : NULL,
                               j->dx ? j->dx + r * C : NULL);
    }
}

void cg_ce_rows_run(const cg_ce_rows *c, int64_t N, const float *x, const int64_t *t,
                    const float *g_rows, float *lse, float *dx, double *loss)
{
    const ce_job j = {.c = c, .x = x, .g_rows = g_rows, .t = t, .lse = lse, .dx = dx, .loss = loss};
    cg_shares_run(N, cg_shares_rows(c->C), cg_shares_team(N * c->C > CG_CE_PAR_THRESHOLD),
                  ce_rows_chunk, &j);
}

static void ce_backward_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const ce_job *j = ctx;
    const int64_t C = j->c->C;
    cg_ce_rows row = *j->c;
    for (int64_t r = r0; r < r1; r++) {
        if (j->g_rows)
            row.scale = j->g_rows[r];
        ce_row_backward(&row, j->x + r * C, j->t[r], j->lse_in ? j->lse_in + r : NULL,
                        j->dx + r * C);
    }
}

cg_tensor *cg_ce_reduced_rows(const double *row, int64_t N, double kept, cg_reduction r)
{
    cg_tensor *out = r == CG_REDUCTION_NONE ? cg_empty(1, &N) : cg_empty(0, NULL);
    if (!out)
        return NULL;
    float *o = cg_data(out);
    if (r == CG_REDUCTION_NONE) {
        for (int64_t i = 0; i < N; i++)
            o[i] = (float)row[i];
        return out;
    }
    double total = 0.0;
    for (int64_t i = 0; i < N; i++)
        total += row[i];
    o[0] = (float)(r == CG_REDUCTION_MEAN ? total / kept : total); /* 0/0 = NaN */
    return out;
}

bool cg_ce_upstream_grad(const char *op, const cg_tensor *g, cg_reduction r, int64_t N,
                         cg_tensor **held)
{
    *held = NULL;
    if (!g) {
        cg_error_null_input(op);
        return false;
    }
    if (!cg_check_f32(op, "g", g))
        return false;
    const bool rows = r == CG_REDUCTION_NONE;
    if (rows ? g->ndim != 1 || g->shape[0] != N : g->ndim != 0) {
        char b[96];
        cg_set_error("%s: the upstream gradient has shape %s, expected %s", op,
                     cg_shape_str(g, b, sizeof b), rows ? "[N], one a row" : "a scalar");
        return false;
    }
    *held = cg_k_contiguous(g);
    return *held != NULL;
}

cg_tensor *cg_k_cross_entropy(const cg_tensor *logits, const cg_tensor *target_t,
                              int64_t ignore_index, float label_smoothing, cg_reduction r,
                              cg_tensor **lse, cg_tensor **grad)
{
    return cg_k_cross_entropy_weighted(logits, target_t, NULL, ignore_index, label_smoothing, r,
                                       lse, grad);
}

cg_tensor *cg_k_cross_entropy_weighted(const cg_tensor *logits, const cg_tensor *target_t,
                                       const cg_tensor *weight, int64_t ignore_index,
                                       float label_smoothing, cg_reduction r, cg_tensor **lse,
                                       cg_tensor **grad)
{
    if (lse)
        *lse = NULL;
    if (grad)
        *grad = NULL;
    if (!logits) {
        cg_error_null_input("cg_k_cross_entropy");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc, *wc;
    if (!ce_check("cross_entropy", logits, target_t, weight, ignore_index, label_smoothing, r,
                  &kept, &tc, &wc))
        return NULL;
    if (grad && r == CG_REDUCTION_NONE) {
        cg_set_error("cross_entropy: the forward's gradient is for a scalar loss (reduction "
                     "none: none)");
        cg_release_all(2, tc, wc);
        return NULL;
    }
    const int64_t *targets = cg_data_i64(tc);
    int64_t N = logits->shape[0], C = logits->shape[1];
    cg_tensor *x = cg_k_contiguous(logits);
    cg_tensor *lt = x ? cg_empty(1, &N) : NULL;
    cg_tensor *dx = lt && grad ? cg_empty(2, logits->shape) : NULL;
    double *row = lt && (dx || !grad) ? malloc((size_t)(N > 0 ? N : 1) * sizeof(double)) : NULL;
    if (!row) {
        if (lt && (dx || !grad))
            cg_set_error("cross_entropy: out of memory");
        cg_release_all(5, x, lt, dx, tc, wc);
        return NULL;
    }
    const float *xp = cg_data(x);
    float *lp = cg_data(lt);
    float *dp = dx ? cg_data(dx) : NULL;
    cg_ce_rows c = ce_rows_weighted(N, C, targets, wc, ignore_index, kept, label_smoothing, 1.0f,
                                    r == CG_REDUCTION_MEAN);
    /* the gradient while the row is in cache: the backward's for g = 1 */
    cg_ce_rows_run(&c, N, xp, targets, NULL, lp, dp, row);
    cg_tensor *out = cg_ce_reduced_rows(row, N, kept_total(wc, targets, N, ignore_index, kept), r);
    free(row);
    cg_release_all(3, x, tc, wc);
    if (!out) {
        cg_release_all(2, lt, dx);
        return NULL;
    }
    if (lse)
        *lse = lt;
    else
        cg_release(lt);
    if (grad)
        *grad = dx;
    return out;
}

bool cg_k_cross_entropy_sum(const cg_tensor *logits, const cg_tensor *target_t,
                            int64_t ignore_index, float label_smoothing, double *total,
                            int64_t *kept)
{
    if (!logits || !total || !kept) {
        cg_set_error("cg_k_cross_entropy_sum: NULL %s", !logits ? "logits" : "output");
        return false;
    }
    int64_t k;
    cg_tensor *tc, *wc;
    if (!ce_check("cross_entropy", logits, target_t, NULL, ignore_index, label_smoothing,
                  CG_REDUCTION_SUM, &k, &tc, &wc))
        return false;
    int64_t N = logits->shape[0], C = logits->shape[1];
    cg_tensor *x = cg_k_contiguous(logits);
    double *row = x ? malloc((size_t)(N > 0 ? N : 1) * sizeof(double)) : NULL;
    if (!row) {
        if (x)
            cg_set_error("cross_entropy: out of memory");
        cg_release_all(2, x, tc);
        return false;
    }
    cg_ce_rows c = cg_ce_rows_for(C, ignore_index, k, label_smoothing, 1.0f, false);
    cg_ce_rows_run(&c, N, cg_data(x), cg_data_i64(tc), NULL, NULL, NULL, row);
    for (int64_t r = 0; r < N; r++) /* in order: the bits of one call's sum */
        *total += row[r];
    *kept += k;
    free(row);
    cg_release_all(2, x, tc);
    return true;
}

cg_tensor *cg_k_cross_entropy_backward(const cg_tensor *logits, const cg_tensor *target_t,
                                       int64_t ignore_index, float label_smoothing, cg_reduction r,
                                       const cg_tensor *lse, const cg_tensor *g)
{
    return cg_k_cross_entropy_backward_weighted(logits, target_t, NULL, ignore_index,
                                                label_smoothing, r, lse, g);
}

cg_tensor *cg_k_cross_entropy_backward_weighted(const cg_tensor *logits, const cg_tensor *target_t,
                                                const cg_tensor *weight, int64_t ignore_index,
                                                float label_smoothing, cg_reduction r,
                                                const cg_tensor *lse, const cg_tensor *g)
{
    if (!logits) {
        cg_error_null_input("cg_k_cross_entropy_backward");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc, *wc;
    if (!ce_check("cross_entropy_backward", logits, target_t, weight, ignore_index, label_smoothing,
                  r, &kept, &tc, &wc))
        return NULL;
    const int64_t *targets = cg_data_i64(tc);
    int64_t N = logits->shape[0], C = logits->shape[1];
    cg_tensor *gc;
    if (!cg_ce_upstream_grad("cross_entropy_backward", g, r, N, &gc) ||
        (lse && !cg_check_f32("cross_entropy_backward", "lse", lse))) {
        cg_release_all(3, gc, tc, wc);
        return NULL;
    }
    if (lse && cg_numel(lse) != N) {
        char b1[96], b2[96];
        cg_set_error("cross_entropy_backward: lse must have N elements (shapes %s and %s)",
                     cg_shape_str(logits, b1, sizeof b1), cg_shape_str(lse, b2, sizeof b2));
        cg_release_all(3, gc, tc, wc);
        return NULL;
    }
    cg_tensor *x = cg_k_contiguous(logits);
    cg_tensor *lc = (x && lse) ? cg_k_contiguous(lse) : NULL;
    cg_tensor *dx = (x && (lc || !lse)) ? cg_empty(2, logits->shape) : NULL;
    if (!dx) {
        cg_release_all(5, x, lc, gc, tc, wc);
        return NULL;
    }
    const float *xp = cg_data(x);
    const float *lp = lc ? cg_data(lc) : NULL;
    float *dp = cg_data(dx);
    const bool rows = r == CG_REDUCTION_NONE;
    /* With no kept row PyTorch's gradient is zero (ignored rows get none). */
    cg_ce_rows c = ce_rows_weighted(N, C, targets, wc, ignore_index, kept, label_smoothing,
                                    rows ? 1.0f : cg_data(gc)[0], r == CG_REDUCTION_MEAN);
    const ce_job j = {.c = &c,
                      .x = xp,
                      .lse_in = lp,
                      .g_rows = rows ? cg_data(gc) : NULL,
                      .t = targets,
                      .dx = dp};
    cg_shares_run(N, cg_shares_rows(C), cg_shares_team(N * C > CG_CE_PAR_THRESHOLD),
                  ce_backward_chunk, &j);
    cg_release_all(5, x, lc, gc, tc, wc);
    return dx;
}

/* ------------------------------------------------------------- nll loss */
cg_tensor *cg_k_nll_loss(const cg_tensor *logp, const cg_tensor *target_t, int64_t ignore_index,
                         cg_reduction r)
{
    return cg_k_nll_loss_weighted(logp, target_t, NULL, ignore_index, r);
}

/* Target row i's weight: weight[t] or 1 */
static double row_weight(const cg_tensor *wc, int64_t t)
{
    return wc ? (double)cg_data(wc)[t] : 1.0;
}

cg_tensor *cg_k_nll_loss_weighted(const cg_tensor *logp, const cg_tensor *target_t,
                                  const cg_tensor *weight, int64_t ignore_index, cg_reduction r)
{
    if (!logp) {
        cg_error_null_input("cg_k_nll_loss");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc, *wc;
    if (!ce_check("nll_loss", logp, target_t, weight, ignore_index, 0.0f, r, &kept, &tc, &wc))
        return NULL;
    const int64_t *targets = cg_data_i64(tc);
    int64_t N = logp->shape[0];
    double *row = malloc((size_t)(N > 0 ? N : 1) * sizeof(double));
    if (!row) {
        cg_set_error("nll_loss: out of memory");
        cg_release_all(2, tc, wc);
        return NULL;
    }
    const float *p = cg_data(logp); /* targets were checked: read them directly */
    for (int64_t i = 0; i < N; i++)
        row[i] = targets[i] == ignore_index
                     ? 0.0
                     : -row_weight(wc, targets[i]) *
                           (double)p[i * logp->strides[0] + targets[i] * logp->strides[1]];
    cg_tensor *out = cg_ce_reduced_rows(row, N, kept_total(wc, targets, N, ignore_index, kept), r);
    free(row);
    cg_release_all(2, tc, wc);
    return out;
}

cg_tensor *cg_k_nll_loss_backward(const cg_tensor *logp, const cg_tensor *target_t,
                                  int64_t ignore_index, cg_reduction r, const cg_tensor *g)
{
    return cg_k_nll_loss_backward_weighted(logp, target_t, NULL, ignore_index, r, g);
}

cg_tensor *cg_k_nll_loss_backward_weighted(const cg_tensor *logp, const cg_tensor *target_t,
                                           const cg_tensor *weight, int64_t ignore_index,
                                           cg_reduction r, const cg_tensor *g)
{
    if (!logp) {
        cg_error_null_input("cg_k_nll_loss_backward");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc, *wc, *gc = NULL;
    if (!ce_check("nll_loss_backward", logp, target_t, weight, ignore_index, 0.0f, r, &kept, &tc,
                  &wc))
        return NULL;
    int64_t N = logp->shape[0], C = logp->shape[1];
    cg_tensor *d =
        cg_ce_upstream_grad("nll_loss_backward", g, r, N, &gc) ? cg_zeros(2, logp->shape) : NULL;
    if (d && kept > 0) {
        const int64_t *targets = cg_data_i64(tc);
        const float *gp = cg_data(gc);
        const bool rows = r == CG_REDUCTION_NONE;
        double s = r == CG_REDUCTION_MEAN
                       ? (double)gp[0] / kept_total(wc, targets, N, ignore_index, kept)
                       : (double)gp[0];
        for (int64_t i = 0; i < N; i++) /* times 1 without weights: the same bits */
            if (targets[i] != ignore_index)
                cg_data(d)[i * C + targets[i]] =
                    (float)(-(rows ? (double)gp[i] : s) * row_weight(wc, targets[i]));
    }
    cg_release_all(3, gc, tc, wc);
    return d;
}
