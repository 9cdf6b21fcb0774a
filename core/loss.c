/* Cross-entropy over [N, C] logits with PyTorch semantics (reduction mean,
 * ignore_index, label_smoothing).
 *
 * Per kept row r with target y, lse = log sum_j exp(x_j):
 *   loss_r = (1-ls) * (lse - x_y) + ls * (lse - mean_j x_j)
 * (the smoothing term is ls * mean over all C classes of -log p_j). The loss
 * is sum_r loss_r / K over the K kept rows; K = 0 gives 0/0 = NaN.
 * Rows are computed in parallel, then summed in row order (deterministic).
 *
 * The precision policy (the calling thread's, core/gemm.h): in fp32 a row
 * takes two exponentials an element in double lanes (row_lse, row_grad),
 * bits pinned since issue 37; under bf16 autocast it is computed as
 * PyTorch's autocast computes it, in float lanes with one exponential an
 * element (ce_row_autocast). One row loop serves both (ce_row). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/ops.h"
#include "core/upcast.h"
#include "core/vmath.h"

#define PAR_THRESHOLD 32768

/* Check the targets (int64 [N], each in [0, C) or ignore_index) of logits
 * [N, C] (shape: their shape for messages); count kept rows. *held gets a
 * contiguous reference to the targets (release it) whose data the kernel
 * reads. */
static bool ce_targets(const char *op, int64_t N, int64_t C, const char *shape,
                       const cg_tensor *target_t, int64_t ignore_index, int64_t *kept,
                       cg_tensor **held)
{
    char b2[96];
    *held = NULL;
    if (!target_t) {
        cg_set_error("%s: argument 'targets' is NULL", op);
        return false;
    }
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

static bool ls_check(const char *op, float ls)
{
    if (!(ls >= 0.0f && ls <= 1.0f)) {
        cg_set_error("%s: label_smoothing must be in [0, 1] (got %g)", op, (double)ls);
        return false;
    }
    return true;
}

/* Check the logits shape and the targets (ce_targets). */
static bool ce_check(const char *op, const cg_tensor *logits, const cg_tensor *target_t,
                     int64_t ignore_index, float ls, int64_t *kept, cg_tensor **held)
{
    char b[96];
    *held = NULL;
    if (!cg_f32_args(op, 1, &logits))
        return false;
    if (!target_t) {
        cg_set_error("%s: argument 'targets' is NULL", op);
        return false;
    }
    if (!cg_check_dtype(op, "targets", target_t, CG_I64))
        return false;
    if (logits->ndim != 2) {
        cg_set_error("%s: logits must be 2-D [N, C] (shape %s)", op,
                     cg_shape_str(logits, b, sizeof b));
        return false;
    }
    if (!ls_check(op, ls))
        return false;
    return ce_targets(op, logits->shape[0], logits->shape[1], cg_shape_str(logits, b, sizeof b),
                      target_t, ignore_index, kept, held);
}

/* ---------------------------------------------------------- row kernels */
/* One contiguous row of C logits. Vectorised for AVX-512, AVX2 or SSE2
 * (EW_CLONES, chosen at load time) with the same IEEE operations in every
 * clone and in 8 lanes of a fixed order, so the bits depend on neither the
 * CPU nor the thread count. exp is ew_expf (core/vmath.h, ~1.5 ulp), never
 * libm's scalar expf. */

/* The two halves of 16 lanes, widened to double. */
static inline __attribute__((always_inline)) void halves(v16f v, v8d *lo, v8d *hi)
{
    v8f h[2];
    memcpy(h, &v, sizeof h);
    *lo = __builtin_convertvector(h[0], v8d);
    *hi = __builtin_convertvector(h[1], v8d);
}

/* log sum_j exp(x_j) (max subtracted, double lanes: element j in lane
 * j % 8); *sx: sum_j x_j when sx is not NULL (label smoothing). The
 * exponentials run 16 at a time (ew_expf16), each half added to the lanes
 * in element order: the bits of one element at a time. */
EW_CLONES static double row_lse(const float *x, int64_t C, double *sx)
{
    float mx = max16(x, C);
    v8d acc = {0}, xs = {0}, lo, hi;
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        halves(ew_expf16(v - mx), &lo, &hi);
        acc += lo;
        acc += hi;
        if (sx) {
            halves(v, &lo, &hi);
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
    if (sx)
        *sx = lanes8_total(b);
    return (double)mx + log(lanes8_total(a));
}

/* The gradient of one kept row: scale * (softmax(x) - ls/C - (1-ls) at t),
 * in double as the scalar code was (gradient accumulation over
 * micro-batches then matches the whole batch to float32's rounding). */
EW_CLONES static void row_grad(const float *x, int64_t C, float lse, int64_t t, double scale,
                               double smooth, double hit, float *d)
{
    float xt = x[t]; /* d may be x itself (the fused kernel's rows) */
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        v8d lo, hi;
        memcpy(&v, x + j, sizeof v);
        halves(ew_expf16(v - lse), &lo, &hi);
        v8f o[2] = {__builtin_convertvector(scale * (lo - smooth), v8f),
                    __builtin_convertvector(scale * (hi - smooth), v8f)};
        memcpy(d + j, o, sizeof o);
    }
    for (; j < C; j++)
        d[j] = (float)(scale * ((double)ew_expf(x[j] - lse) - smooth));
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
EW_CLONES static float row_exp_sum(const float *x, int64_t C, float *e, float *max, float *sx)
{
    float mx = *max = max16(x, C); /* in the clone: max16 is vector code there */
    v16f acc = {0}, xs = {0};
    int64_t j = 0;
    for (; j + 16 <= C; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        v16f ev = ew_expf16(v - mx);
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
/* What the rows of one call share. autocast: the thread's matrix precision
 * is bf16 (core/gemm.h), and the rows take bf16 autocast's kernel above;
 * in fp32 they take the double-lane kernel (its bits are pinned). */
typedef struct {
    int64_t C, ignore_index, kept;
    double ls, scale; /* scale: g / kept, 0 when no row is kept */
    bool autocast;
} ce_rows;

static ce_rows ce_rows_for(int64_t C, int64_t ignore_index, int64_t kept, float ls, float g)
{
    return (ce_rows){.C = C,
                     .ignore_index = ignore_index,
                     .kept = kept,
                     .ls = ls,
                     .scale = kept > 0 ? (double)g / (double)kept : 0.0,
                     .autocast = cg_get_matmul_precision() == CG_PRECISION_BF16};
}

/* A kept row's loss from its lse l (double), x_t and sum_j x_j. */
static double ce_loss_of(const ce_rows *c, double l, float xt, double sx)
{
    double v = (1.0 - c->ls) * (l - (double)xt);
    if (c->ls != 0.0)
        v += c->ls * (l - sx / (double)c->C);
    return v;
}

/* bf16 autocast's row: e_j = exp(x_j - max) once, written into dr while
 * summed, then scaled there to scale * (e_j / s - ls/C), less scale (1-ls)
 * at t. */
static double ce_row_autocast(const ce_rows *c, const float *xr, int64_t t, float *lse, float *dr)
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

/* Row xr's gradient for the upstream gradient g of c->scale into dr (may
 * be xr), zero when ignored, from its lse rounded to float (lse NULL:
 * computed again). bf16 autocast reads no lse: it computes the row again
 * as its forward did (the forward's bits for g = 1). */
static void ce_row_backward(const ce_rows *c, const float *xr, int64_t t, const float *lse,
                            float *dr)
{
    int64_t C = c->C;
    if (t == c->ignore_index)
        memset(dr, 0, (size_t)C * sizeof *dr);
    else if (c->autocast)
        ce_row_autocast(c, xr, t, NULL, dr);
    else
        row_grad(xr, C, lse ? *lse : (float)row_lse(xr, C, NULL), t, c->scale, c->ls / (double)C,
                 1.0 - c->ls, dr);
}

/* Row xr's loss (0 when ignored); *lse (when not NULL) its log-sum-exp
 * rounded to float; dr (when not NULL) its gradient, ce_row_backward's
 * (the same bits, as the forward computes it for g = 1). An ignored row
 * whose lse is not asked for costs nothing. */
static double ce_row(const ce_rows *c, const float *xr, int64_t t, float *lse, float *dr)
{
    bool ignored = t == c->ignore_index;
    if (ignored && !lse) {
        if (dr)
            memset(dr, 0, (size_t)c->C * sizeof *dr);
        return 0.0;
    }
    if (c->autocast)
        return ce_row_autocast(c, xr, t, lse, dr);
    double sx = 0.0, l = row_lse(xr, c->C, &sx);
    float lf = (float)l, xt = ignored ? 0.0f : xr[t]; /* read before dr (may be xr) */
    if (lse)
        *lse = lf;
    if (dr)
        ce_row_backward(c, xr, t, &lf, dr);
    return ignored ? 0.0 : ce_loss_of(c, l, xt, sx);
}

cg_tensor *cg_k_cross_entropy(const cg_tensor *logits, const cg_tensor *target_t,
                              int64_t ignore_index, float label_smoothing, cg_tensor **lse,
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
    cg_tensor *tc;
    if (!ce_check("cross_entropy", logits, target_t, ignore_index, label_smoothing, &kept, &tc))
        return NULL;
    const int64_t *targets = cg_data_i64(tc);
    int64_t N = logits->shape[0], C = logits->shape[1];
    cg_tensor *x = cg_k_contiguous(logits);
    cg_tensor *lt = x ? cg_empty(1, &N) : NULL;
    cg_tensor *dx = lt && grad ? cg_empty(2, logits->shape) : NULL;
    double *row = lt && (dx || !grad) ? malloc((size_t)(N > 0 ? N : 1) * sizeof(double)) : NULL;
    cg_tensor *out = row ? cg_empty(0, NULL) : NULL;
    if (!out) {
        if (lt && (dx || !grad) && !row)
            cg_set_error("cross_entropy: out of memory");
        free(row);
        cg_release_all(4, x, lt, dx, tc);
        return NULL;
    }
    const float *xp = cg_data(x);
    float *lp = cg_data(lt);
    float *dp = dx ? cg_data(dx) : NULL;
    ce_rows c = ce_rows_for(C, ignore_index, kept, label_smoothing, 1.0f);
    /* the gradient while the row is in cache: the backward's for g = 1 */
#pragma omp parallel for schedule(static) if (N * C > PAR_THRESHOLD)
    for (int64_t r = 0; r < N; r++)
        row[r] = ce_row(&c, xp + r * C, targets[r], &lp[r], dp ? dp + r * C : NULL);
    double total = 0.0;
    for (int64_t r = 0; r < N; r++)
        total += row[r];
    cg_data(out)[0] = (float)(total / (double)kept); /* 0/0 = NaN, as PyTorch */
    free(row);
    cg_release_all(2, x, tc);
    if (lse)
        *lse = lt;
    else
        cg_release(lt);
    if (grad)
        *grad = dx;
    return out;
}

cg_tensor *cg_k_cross_entropy_backward(const cg_tensor *logits, const cg_tensor *target_t,
                                       int64_t ignore_index, float label_smoothing,
                                       const cg_tensor *lse, float g)
{
    if (!logits) {
        cg_error_null_input("cg_k_cross_entropy_backward");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc;
    if (!ce_check("cross_entropy_backward", logits, target_t, ignore_index, label_smoothing, &kept,
                  &tc))
        return NULL;
    const int64_t *targets = cg_data_i64(tc);
    int64_t N = logits->shape[0], C = logits->shape[1];
    if (lse && cg_numel(lse) != N) {
        char b1[96], b2[96];
        cg_set_error("cross_entropy_backward: lse must have N elements (shapes %s and %s)",
                     cg_shape_str(logits, b1, sizeof b1), cg_shape_str(lse, b2, sizeof b2));
        cg_release(tc);
        return NULL;
    }
    cg_tensor *x = cg_k_contiguous(logits);
    cg_tensor *lc = (x && lse) ? cg_k_contiguous(lse) : NULL;
    cg_tensor *dx = (x && (lc || !lse)) ? cg_empty(2, logits->shape) : NULL;
    if (!dx) {
        cg_release_all(3, x, lc, tc);
        return NULL;
    }
    const float *xp = cg_data(x);
    const float *lp = lc ? cg_data(lc) : NULL;
    float *dp = cg_data(dx);
    /* With no kept row PyTorch's gradient is zero (ignored rows get none). */
    ce_rows c = ce_rows_for(C, ignore_index, kept, label_smoothing, g);
#pragma omp parallel for schedule(static) if (N * C > PAR_THRESHOLD)
    for (int64_t r = 0; r < N; r++)
        ce_row_backward(&c, xp + r * C, targets[r], lp ? lp + r : NULL, dp + r * C);
    cg_release_all(3, x, lc, tc);
    return dx;
}

/* ------------------------------------- fused linear + cross-entropy */
/* Liger-Kernel's fused linear cross-entropy, our own for the CPU: the rows
 * of h go through in chunks; each chunk's logits [rows, V] = h W^T + b are
 * made, turned into their gradient in place (the rows of
 * cg_k_cross_entropy), and used at once for dh = dL W, dW += dL^T h and
 * db += column sums of dL. The products go through cg_sgemm, so they
 * follow the matrix precision (bf16 rounds their operands, the logits'
 * gradient included).
 *
 * CG_LCE_EXACT: the chunks are the k blocks of dW's product over the N rows
 * (cg_gemm_k_block), so dW, summed block by block with beta 1, has the bits
 * of the unfused head's one product dW = dL^T h; every row of the logits
 * and of dh is one kernel sum over d or V whatever the rows around it. In
 * bf16, whose products read W's packed copies (the weight cache), a
 * block's logits, loss rows and dh go LCE_ROWS rows at a time, so that
 * those rows are still in L2 when read again; in fp32 each product packs
 * W anew, so a block goes whole (rows of 64 made the default step 2-8%
 * slower in CPU time on the Intel Xeon, 384 rows as fast as the unfused
 * head). No run of rows is short enough for the dot products of skinny
 * products (core/gemm.h CG_GEMM_SKINNY) unless all N are. */
#define LCE_ROWS 64

typedef struct {
    const float *h, *w, *b; /* h [N, d], w [V, d], b [V] or NULL; contiguous */
    int64_t N, d, V;
    const int64_t *targets;
    ce_rows rows;   /* V classes; scale g / kept */
    bool exact;     /* chunks on the k blocks (CG_LCE_EXACT on a path with them) */
    float *dh, *dw; /* NULL where not wanted */
    double *db;     /* the bias's gradient in double (NULL: not wanted) */
    float *spare;   /* exact: [CG_GEMM_SKINNY + 1, V] */
    /* bf16: W and W^T rounded and packed once (the weight cache, as linear
     * layers read them: the bits of cg_sgemm in bf16), else NULL */
    const cg_bf16_matrix *pw, *pwt;
    bool failed; /* a product ran out of memory */
} lce_args;

/* The logits of rows [r0, r0 + m) into L (m rows of V). Exact and with
 * more rows in h than a skinny product has: a product of at least
 * CG_GEMM_SKINNY + 1 rows, the rows before r0 (or after) made in the spare
 * rows and dropped. */
static void lce_logits(lce_args *a, int64_t r0, int64_t m, float *L)
{
    int64_t V = a->V, d = a->d, s = r0, n = m;
    float *out = L;
    if (a->exact && m <= CG_GEMM_SKINNY && a->N > CG_GEMM_SKINNY) {
        n = CG_GEMM_SKINNY + 1;
        s = r0 + m - n > 0 ? r0 + m - n : 0;
        out = a->spare;
    }
    const float *hc = a->h + s * d;
    if (a->pw)
        a->failed |= !cg_bf16_matrix_mul(a->pw, CG_GEMM_AUTO, 0, n, hc, d, 1, a->b, 1, out, V, 1);
    else if (a->b)
        cg_sgemm_bias(n, V, d, hc, d, 1, a->w, 1, d, a->b, 1, out, V, 1);
    else
        cg_sgemm(n, V, d, 1.0f, hc, d, 1, a->w, 1, d, 0.0f, out, V, 1);
    if (out != L)
        memcpy(L, out + (r0 - s) * V, sizeof(float) * (size_t)(m * V));
}

/* Rows [r0, r0 + m): their logits into L, their losses into row[], their
 * gradient in place of the logits (when any gradient is wanted) and dh's
 * rows. */
static void lce_rows(lce_args *a, int64_t r0, int64_t m, float *L, double *row)
{
    int64_t V = a->V, d = a->d;
    lce_logits(a, r0, m, L);
    bool grads = a->dh || a->dw || a->db;
#pragma omp parallel for schedule(static) if (m * V > PAR_THRESHOLD)
    for (int64_t r = 0; r < m; r++)
        row[r0 + r] =
            ce_row(&a->rows, L + r * V, a->targets[r0 + r], NULL, grads ? L + r * V : NULL);
    if (a->dh && a->pwt)
        a->failed |=
            !cg_bf16_matrix_mul(a->pwt, CG_GEMM_AUTO, 0, m, L, V, 1, NULL, 0, a->dh + r0 * d, d, 1);
    else if (a->dh)
        cg_sgemm(m, d, V, 1.0f, L, V, 1, a->w, d, 1, 0.0f, a->dh + r0 * d, d, 1);
}

/* One chunk of rows [r0, r0 + m): rows as above, then their products into
 * dw and db (dw written with beta 0 when first, else added to). */
static void lce_chunk(lce_args *a, int64_t r0, int64_t m, float *L, double *row, bool first)
{
    int64_t V = a->V, d = a->d, step = a->exact && a->pw ? LCE_ROWS : m;
    for (int64_t i = 0, n; i < m; i += n) {
        n = m - i <= step + CG_GEMM_SKINNY ? m - i : step; /* no short run last */
        lce_rows(a, r0 + i, n, L + i * V, row);
    }
    if (a->dw)
        cg_sgemm(V, d, m, 1.0f, L, 1, V, a->h + r0 * d, d, 1, first ? 0.0f : 1.0f, a->dw, d, 1);
    if (a->db) {
        double *db = a->db;
#pragma omp parallel for schedule(static) if (m * V > PAR_THRESHOLD)
        for (int64_t j = 0; j < V; j++) {
            double s = db[j];
            for (int64_t r = 0; r < m; r++) /* row order: any thread count */
                s += (double)L[r * V + j];
            db[j] = s;
        }
    }
}

/* The size of the chunk at row r0 of N. */
static int64_t lce_chunk_at(int64_t chunk, bool exact, int64_t N, int64_t r0)
{
    if (chunk != CG_LCE_EXACT)
        return N - r0 < chunk ? N - r0 : chunk;
    return exact ? cg_gemm_k_block(CG_GEMM_AUTO, N, r0) : N - r0;
}

/* h, w, b: the shapes of a linear layer's input, weight and bias. */
static bool lce_check(const cg_tensor *h, const cg_tensor *w, const cg_tensor *b, int64_t chunk)
{
    char b1[96], b2[96], b3[96];
    const cg_tensor *in[3] = {h, w, b};
    if (!cg_f32_args("linear_cross_entropy", b ? 3 : 2, in))
        return false;
    if (h->ndim != 2 || w->ndim != 2 || h->shape[1] != w->shape[1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        cg_set_error("linear_cross_entropy: need h [N, d], weight [V, d] and bias [V] (shapes "
                     "%s, %s, %s)",
                     cg_shape_str(h, b1, sizeof b1), cg_shape_str(w, b2, sizeof b2),
                     b ? cg_shape_str(b, b3, sizeof b3) : "none");
        return false;
    }
    if (chunk < 1 && chunk != CG_LCE_EXACT) {
        cg_set_error("linear_cross_entropy: chunk must be 1 or more rows, or %d for the "
                     "product's k blocks (got %lld)",
                     CG_LCE_EXACT, (long long)chunk);
        return false;
    }
    return true;
}

static atomic_uint_fast64_t g_lce_runs; /* cg_k_linear_cross_entropy_runs */

uint64_t cg_k_linear_cross_entropy_runs(void) { return atomic_load(&g_lce_runs); }

/* All chunks of a->N rows through L; the mean loss into *out. */
static void lce_run(lce_args *a, int64_t chunk, float *L, double *row, float *out)
{
    atomic_fetch_add(&g_lce_runs, 1);
    for (int64_t r0 = 0, m; r0 < a->N; r0 += m) {
        m = lce_chunk_at(chunk, a->exact, a->N, r0);
        lce_chunk(a, r0, m, L, row, r0 == 0);
    }
    double total = 0.0;
    for (int64_t r = 0; r < a->N; r++)
        total += row[r];
    *out = (float)(total / (double)a->rows.kept); /* 0/0 = NaN, as PyTorch */
}

cg_tensor *cg_k_linear_cross_entropy(const cg_tensor *h, const cg_tensor *w, const cg_tensor *b,
                                     const cg_tensor *target_t, int64_t ignore_index,
                                     float label_smoothing, int64_t chunk, float g, cg_tensor **dh,
                                     cg_tensor **dw, cg_tensor **db)
{
    cg_tensor **outs[3] = {dh, dw, db};
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = NULL;
    if (!h || !w) {
        cg_error_null_input("cg_k_linear_cross_entropy");
        return NULL;
    }
    if (!lce_check(h, w, b, chunk))
        return NULL;
    int64_t N = h->shape[0], d = h->shape[1], V = w->shape[0], kept;
    char shape[96]; /* the targets are checked as for logits [N, V] */
    cg_shape_str_n(2, (int64_t[]){N, V}, shape, sizeof shape);
    cg_tensor *tc = NULL;
    if (!ls_check("linear_cross_entropy", label_smoothing) ||
        !ce_targets("linear_cross_entropy", N, V, shape, target_t, ignore_index, &kept, &tc))
        return NULL;
    bool exact = chunk == CG_LCE_EXACT && N > 0 && cg_gemm_k_block(CG_GEMM_AUTO, N, 0) > 0;
    int64_t m = 1; /* the largest chunk */
    for (int64_t r0 = 0, c; r0 < N; r0 += c) {
        c = lce_chunk_at(chunk, exact, N, r0);
        m = c > m ? c : m;
    }
    cg_tensor *hc = cg_k_contiguous(h), *wc = cg_k_contiguous(w),
              *bc = b ? cg_k_contiguous(b) : NULL;
    cg_tensor *L = cg_empty(2, (int64_t[]){m + (exact ? CG_GEMM_SKINNY + 1 : 0), V});
    /* every row of dh and dW is written by a product with beta 0 (the
     * first chunk's, for dW) unless there are no rows */
    cg_tensor *(*make)(int, const int64_t *) = N > 0 && d > 0 ? cg_empty : cg_zeros;
    cg_tensor *g3[3] = {dh ? make(2, h->shape) : NULL, dw ? make(2, w->shape) : NULL,
                        db ? cg_empty(1, &V) : NULL};
    double *row = malloc((size_t)(N > 0 ? N : 1) * sizeof(double));
    double *dbs = db ? calloc((size_t)(V > 0 ? V : 1), sizeof(double)) : NULL;
    cg_tensor *out = cg_empty(0, NULL);
    /* bf16: W's packed copies (W^T only for dh), from the weight cache */
    bool bf16 = cg_get_matmul_precision() == CG_PRECISION_BF16 && N > 0 && d > 0 && V > 0;
    cg_bf16_weight *pw = bf16 && wc ? cg_bf16_weight_get(wc, false) : NULL;
    cg_bf16_weight *pwt = bf16 && wc && dh ? cg_bf16_weight_get(wc, true) : NULL;
    bool ok = hc && wc && (bc || !b) && L && row && (dbs || !db) && out && (pw || !bf16) &&
              (pwt || !bf16 || !dh);
    for (int i = 0; i < 3; i++)
        ok = ok && (g3[i] || !outs[i]);
    if (ok) {
        lce_args a = {.h = cg_data(hc),
                      .w = cg_data(wc),
                      .b = bc ? cg_data(bc) : NULL,
                      .N = N,
                      .d = d,
                      .V = V,
                      .targets = cg_data_i64(tc),
                      .rows = ce_rows_for(V, ignore_index, kept, label_smoothing, g),
                      .exact = exact,
                      .dh = g3[0] ? cg_data(g3[0]) : NULL,
                      .dw = g3[1] ? cg_data(g3[1]) : NULL,
                      .db = dbs,
                      .spare = cg_data(L) + m * V,
                      .pw = pw ? cg_bf16_weight_matrix(pw) : NULL,
                      .pwt = pwt ? cg_bf16_weight_matrix(pwt) : NULL};
        lce_run(&a, chunk, cg_data(L), row, cg_data(out));
        ok = !a.failed;
        for (int64_t j = 0; dbs && j < V; j++) /* cg_k_linear_backward's rounding */
            cg_data(g3[2])[j] = (float)dbs[j];
    } else if (!row || (db && !dbs)) {
        cg_set_error("linear_cross_entropy: out of memory");
    }
    free(row);
    free(dbs);
    cg_bf16_weight_release(pw);
    cg_bf16_weight_release(pwt);
    cg_release_all(5, hc, wc, bc, L, tc);
    for (int i = 0; i < 3; i++) {
        if (ok && outs[i])
            *outs[i] = g3[i];
        else
            cg_release(g3[i]);
    }
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ------------------------------------------------------------- nll loss */
cg_tensor *cg_k_nll_loss(const cg_tensor *logp, const cg_tensor *target_t, int64_t ignore_index)
{
    if (!logp) {
        cg_error_null_input("cg_k_nll_loss");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc;
    if (!ce_check("nll_loss", logp, target_t, ignore_index, 0.0f, &kept, &tc))
        return NULL;
    const int64_t *targets = cg_data_i64(tc);
    int64_t N = logp->shape[0];
    cg_tensor *out = cg_empty(0, NULL);
    if (!out) {
        cg_release(tc);
        return NULL;
    }
    const float *p = cg_data(logp); /* targets were checked: read them directly */
    double s = 0.0;
    for (int64_t r = 0; r < N; r++)
        if (targets[r] != ignore_index)
            s -= p[r * logp->strides[0] + targets[r] * logp->strides[1]];
    cg_data(out)[0] = (float)(s / (double)kept); /* 0/0 = NaN, as PyTorch */
    cg_release(tc);
    return out;
}

cg_tensor *cg_k_nll_loss_backward(const cg_tensor *logp, const cg_tensor *target_t,
                                  int64_t ignore_index, float g)
{
    if (!logp) {
        cg_error_null_input("cg_k_nll_loss_backward");
        return NULL;
    }
    int64_t kept;
    cg_tensor *tc;
    if (!ce_check("nll_loss_backward", logp, target_t, ignore_index, 0.0f, &kept, &tc))
        return NULL;
    const int64_t *targets = cg_data_i64(tc);
    cg_tensor *d = cg_zeros(2, logp->shape);
    if (d && kept > 0) {
        int64_t N = logp->shape[0], C = logp->shape[1];
        float v = (float)(-(double)g / (double)kept);
        for (int64_t r = 0; r < N; r++)
            if (targets[r] != ignore_index)
                cg_data(d)[r * C + targets[r]] = v;
    }
    cg_release(tc);
    return d;
}

/* ------------------------------------------- binary cross-entropy, logits */
cg_tensor *cg_k_bce_with_logits(const cg_tensor *x, const cg_tensor *y)
{
    if (!x || !y) {
        cg_error_null_input("cg_k_bce_with_logits");
        return NULL;
    }
    if (!cg_same_shape(x, y)) {
        char a[96], b[96];
        cg_set_error("binary_cross_entropy_with_logits: logits %s and targets %s differ in shape",
                     cg_shape_str(x, a, sizeof a), cg_shape_str(y, b, sizeof b));
        return NULL;
    }
    cg_tensor *xc = cg_k_contiguous(x), *yc = cg_k_contiguous(y);
    cg_tensor *out = xc && yc ? cg_empty(0, NULL) : NULL;
    if (out) {
        const float *xp = cg_data(xc), *yp = cg_data(yc);
        int64_t n = cg_numel(xc);
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double v = xp[i];
            s += (v > 0 ? v : 0.0) - v * yp[i] + log1p(exp(-fabs(v)));
        }
        cg_data(out)[0] = (float)(s / (double)n); /* n = 0: NaN, as PyTorch */
    }
    cg_release_all(2, xc, yc);
    return out;
}
