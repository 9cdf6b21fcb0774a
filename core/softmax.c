/* Softmax and log-softmax along any dim, with their backward kernels, and
 * logsumexp over any dims (its backward is elementwise: core/elementwise.c).
 *
 * The input is made contiguous and seen as [outer, D, inner] with D the size
 * of the softmax dim. Work is split into tasks of (one outer index, a block
 * of up to BLOCK inner columns); each task reduces over D for its columns in
 * a fixed order, so results do not depend on the thread count. For the last
 * dim (inner == 1) a task is one contiguous row.
 *
 * Numerics: the row maximum is subtracted before exp; the exponentials are
 * ew_expf's (core/vmath.h: about 1.5 ulp, the same bits on every CPU and in
 * its 16-lane form); sums are accumulated in double. A row of all -inf
 * gives NaN (as PyTorch): -inf - -inf is NaN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/reduce_impl.h"
#include "core/shares.h"
#include "core/upcast.h"
#include "core/vmath.h"

#define PAR_THRESHOLD 32768
#define BLOCK 64

/* ----------------------------------------------------------- layout */
typedef struct {
    int64_t outer, D, inner;
} lines_t;

/* Resolve dim (a 0-d tensor accepts dim 0 or -1 and has D = 1). */
static bool split_dims(const char *op, const cg_tensor *a, int dim, lines_t *l)
{
    if (a->ndim == 0) {
        if (dim != 0 && dim != -1) {
            cg_set_error("%s: dim %d out of range for a tensor with 0 dims", op, dim);
            return false;
        }
        *l = (lines_t){1, 1, 1};
        return true;
    }
    int d = cg_norm_dim(op, dim, a->ndim);
    if (d < 0)
        return false;
    l->outer = 1;
    l->inner = 1;
    for (int i = 0; i < d; i++)
        l->outer *= a->shape[i];
    for (int i = d + 1; i < a->ndim; i++)
        l->inner *= a->shape[i];
    l->D = a->shape[d];
    return true;
}

/* ------------------------------------------------------ block kernels */
/* Each kernel handles w columns (w <= BLOCK) at stride 1 of a [D, inner]
 * slab starting at the given pointers; the backward one is also called
 * with inner == w == 1 for contiguous rows (the compiler specialises the
 * inlined copy). The forward's contiguous rows go to softmax_row. */

static inline void softmax_block(const float *x, float *y, int64_t D, int64_t inner, int64_t w,
                                 bool logsm)
{
    float mx[BLOCK];
    double sum[BLOCK];
    for (int64_t c = 0; c < w; c++) {
        mx[c] = -INFINITY;
        sum[c] = 0.0;
    }
    for (int64_t j = 0; j < D; j++) {
        const float *xr = x + j * inner;
        for (int64_t c = 0; c < w; c++)
            mx[c] = xr[c] > mx[c] ? xr[c] : mx[c];
    }
    /* A NaN skipped by the max still makes its column NaN through the sum. */
    for (int64_t j = 0; j < D; j++) {
        const float *xr = x + j * inner;
        float *yr = y + j * inner;
        for (int64_t c = 0; c < w; c++) {
            float e = ew_expf(xr[c] - mx[c]);
            sum[c] += e;
            if (!logsm)
                yr[c] = e;
        }
    }
    if (logsm) {
        double ls[BLOCK];
        for (int64_t c = 0; c < w; c++)
            ls[c] = log(sum[c]);
        for (int64_t j = 0; j < D; j++) {
            const float *xr = x + j * inner;
            float *yr = y + j * inner;
            for (int64_t c = 0; c < w; c++)
                yr[c] = (float)((double)(xr[c] - mx[c]) - ls[c]);
        }
    } else {
        double inv[BLOCK];
        for (int64_t c = 0; c < w; c++)
            inv[c] = 1.0 / sum[c];
        for (int64_t j = 0; j < D; j++) {
            float *yr = y + j * inner;
            for (int64_t c = 0; c < w; c++)
                yr[c] = (float)((double)yr[c] * inv[c]);
        }
    }
}

/* The forward of one contiguous row (inner == 1): softmax_block's
 * operations in its order (so a row's bits are the same along any dim),
 * with the exponentials 16 at a time (ew_expf16's lanes are ew_expf's
 * bits). A beam search's rows of 4,000 logits spent most of their time in
 * libm's expf, one call an element. */
EW_BODY void softmax_row_body(const float *x, float *y, int64_t D, bool logsm)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < D; j++)
        mx = x[j] > mx ? x[j] : mx;
    int64_t j = 0;
    for (; j + 16 <= D; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        const v16f e = ew_expf16(v - mx);
        memcpy(y + j, &e, sizeof e);
    }
    for (; j < D; j++)
        y[j] = ew_expf(x[j] - mx);
    double sum = 0.0;
    for (j = 0; j < D; j++)
        sum += y[j];
    if (logsm) {
        const double ls = log(sum);
        for (j = 0; j < D; j++)
            y[j] = (float)((double)(x[j] - mx) - ls);
    } else {
        const double inv = 1.0 / sum;
        for (j = 0; j < D; j++)
            y[j] = (float)((double)y[j] * inv);
    }
}
EW_CLONES static void softmax_row(const float *x, float *y, int64_t D, bool logsm)
{
    softmax_row_body(x, y, D, logsm); /* EW_BODY: core/vmath.h */
}

/* softmax: dx = y * (g - sum(g*y)); log_softmax: dx = g - exp(y) * sum(g). */
static inline void softmax_bwd_block(const float *y, const float *g, float *dx, int64_t D,
                                     int64_t inner, int64_t w, bool logsm)
{
    double s[BLOCK];
    for (int64_t c = 0; c < w; c++)
        s[c] = 0.0;
    for (int64_t j = 0; j < D; j++) {
        const float *yr = y + j * inner, *gr = g + j * inner;
        for (int64_t c = 0; c < w; c++)
            s[c] += logsm ? (double)gr[c] : (double)gr[c] * (double)yr[c];
    }
    for (int64_t j = 0; j < D; j++) {
        const float *yr = y + j * inner, *gr = g + j * inner;
        float *dr = dx + j * inner;
        for (int64_t c = 0; c < w; c++) {
            if (logsm)
                dr[c] = (float)((double)gr[c] - (double)ew_expf(yr[c]) * s[c]);
            else
                dr[c] = (float)((double)yr[c] * ((double)gr[c] - s[c]));
        }
    }
}

/* -------------------------------------------------------- drivers */
/* A task: a row (inner == 1) or a block of up to BLOCK columns of one
 * outer index. The forward reads x and writes out; the backward reads x
 * (the output y) and g and writes out (dx). */
typedef struct {
    lines_t l;
    bool logsm;
    const float *x, *g;
    float *out;
} sm_job;

/* The task's first element and its columns */
static int64_t task_at(const lines_t *l, int64_t t, int64_t *w)
{
    const int64_t nblk = (l->inner + BLOCK - 1) / BLOCK, o = t / nblk, c0 = (t % nblk) * BLOCK;
    *w = l->inner - c0 < BLOCK ? l->inner - c0 : BLOCK;
    return o * l->D * l->inner + c0;
}

static void softmax_tasks(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    const sm_job *j = ctx;
    const int64_t D = j->l.D;
    for (int64_t t = t0; t < t1; t++) {
        if (j->l.inner == 1) {
            softmax_row(j->x + t * D, j->out + t * D, D, j->logsm);
        } else {
            int64_t w, base = task_at(&j->l, t, &w);
            softmax_block(j->x + base, j->out + base, D, j->l.inner, w, j->logsm);
        }
    }
}

static void softmax_bwd_tasks(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    const sm_job *j = ctx;
    const int64_t D = j->l.D;
    for (int64_t t = t0; t < t1; t++) {
        if (j->l.inner == 1) {
            softmax_bwd_block(j->x + t * D, j->g + t * D, j->out + t * D, D, 1, 1, j->logsm);
        } else {
            int64_t w, base = task_at(&j->l, t, &w);
            softmax_bwd_block(j->x + base, j->g + base, j->out + base, D, j->l.inner, w, j->logsm);
        }
    }
}

/* The tasks of n elements, in parallel when many */
static void run_tasks(const sm_job *j, int64_t n, cg_chunk_fn fn)
{
    const lines_t *l = &j->l;
    const int64_t w = l->inner < BLOCK ? l->inner : BLOCK;
    cg_shares_run(l->outer * ((l->inner + BLOCK - 1) / BLOCK), cg_shares_rows(l->D * w),
                  cg_shares_team(n > PAR_THRESHOLD), fn, j);
}

static cg_tensor *softmax_impl(const char *op, const cg_tensor *a, int dim, bool logsm)
{
    if (!a) {
        cg_error_null_input(op);
        return NULL;
    }
    lines_t l;
    if (!split_dims(op, a, dim, &l))
        return NULL;
    cg_tensor *x = cg_k_contiguous(a);
    cg_tensor *y = x ? cg_empty(a->ndim, a->shape) : NULL;
    if (!y) {
        cg_release(x);
        return NULL;
    }
    int64_t n = cg_numel(a);
    if (n > 0) {
        const sm_job job = {l, logsm, cg_data(x), NULL, cg_data(y)};
        run_tasks(&job, n, softmax_tasks);
    }
    cg_release(x);
    return y;
}

static cg_tensor *softmax_bwd_impl(const char *op, const cg_tensor *y, const cg_tensor *g, int dim,
                                   bool logsm)
{
    if (!y || !g) {
        cg_error_null_input(op);
        return NULL;
    }
    if (!cg_same_shape(y, g)) {
        char b1[96], b2[96];
        cg_set_error("%s: output and gradient shapes differ (shapes %s and %s)", op,
                     cg_shape_str(y, b1, sizeof b1), cg_shape_str(g, b2, sizeof b2));
        return NULL;
    }
    lines_t l;
    if (!split_dims(op, y, dim, &l))
        return NULL;
    cg_tensor *yc = cg_k_contiguous(y), *gc = cg_k_contiguous(g);
    cg_tensor *dx = (yc && gc) ? cg_empty(y->ndim, y->shape) : NULL;
    if (!dx) {
        cg_release_all(2, yc, gc);
        return NULL;
    }
    int64_t n = cg_numel(y);
    if (n > 0) {
        const sm_job job = {l, logsm, cg_data(yc), cg_data(gc), cg_data(dx)};
        run_tasks(&job, n, softmax_bwd_tasks);
    }
    cg_release_all(2, yc, gc);
    return dx;
}

cg_tensor *cg_k_softmax(const cg_tensor *a, int dim)
{
    CG_UPCAST1("softmax", a, softmax_impl("softmax", a, dim, false));
}

cg_tensor *cg_k_log_softmax(const cg_tensor *a, int dim)
{
    CG_UPCAST1("log_softmax", a, softmax_impl("log_softmax", a, dim, true));
}

cg_tensor *cg_k_softmax_backward(const cg_tensor *y, const cg_tensor *g, int dim)
{
    CG_UPCAST2("softmax_backward", y, g, softmax_bwd_impl("softmax_backward", y, g, dim, false));
}

cg_tensor *cg_k_log_softmax_backward(const cg_tensor *y, const cg_tensor *g, int dim)
{
    CG_UPCAST2("log_softmax_backward", y, g,
               softmax_bwd_impl("log_softmax_backward", y, g, dim, true));
}

/* ---------------------------------------------------------- logsumexp */
/* log(sum(exp(x))) of a contiguous row x[0, D), shifted by its maximum as
 * PyTorch shifts it (by 0 when the maximum is infinite: a row of -inf gives
 * -inf, one holding +inf gives +inf; a NaN gives NaN through the sum; D = 0
 * gives -inf). softmax_row's exponentials (ew_expf16's lanes, ew_expf's
 * bits) summed in double in index order. */
EW_BODY float lse_row_body(const float *x, int64_t D)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < D; j++)
        mx = x[j] > mx ? x[j] : mx;
    const float sh = isinf(mx) ? 0.0f : mx;
    double sum = 0.0;
    int64_t j = 0;
    for (; j + 16 <= D; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        const v16f e = ew_expf16(v - sh);
        for (int l = 0; l < 16; l++)
            sum += e[l];
    }
    for (; j < D; j++)
        sum += ew_expf(x[j] - sh);
    return (float)(log(sum) + (double)sh);
}
/* Rows [r0, r1) of x [rows, D] into out (EW_BODY: core/vmath.h) */
typedef struct {
    const float *x;
    int64_t D;
    float *out;
} lse_job;
EW_CLONES static void lse_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const lse_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        j->out[r] = lse_row_body(j->x + r * j->D, j->D);
}

/* The reduced dims moved last (a view), then one contiguous row an output:
 * a copy unless they are last already. */
static cg_tensor *logsumexp_f32(const cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    if (!a) {
        cg_error_null_input("cg_k_logsumexp");
        return NULL;
    }
    bool mask[CG_MAX_DIMS];
    if (!cg_reduce_dims("logsumexp", a, ndims, dims, mask))
        return NULL;
    int perm[CG_MAX_DIMS], k = 0;
    int64_t D = 1;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < a->ndim; i++)
            if (mask[i] == (pass == 1)) {
                perm[k++] = i;
                D *= pass ? a->shape[i] : 1;
            }
    int64_t shape[CG_MAX_DIMS] = {0};
    const int nd = cg_reduce_shape(a, mask, keepdim, shape);
    cg_tensor *p = cg_view_permute(a, perm), *x = p ? cg_k_contiguous(p) : NULL;
    cg_tensor *out = x ? cg_empty(nd, shape) : NULL;
    if (out) {
        const int64_t rows = cg_numel(out);
        const lse_job job = {cg_data(x), D, cg_data(out)};
        cg_shares_run(rows, cg_shares_rows(D), cg_shares_team(rows * D > PAR_THRESHOLD), lse_rows,
                      &job);
    }
    cg_release_all(2, p, x);
    return out;
}

cg_tensor *cg_k_logsumexp(const cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    CG_UPCAST1("logsumexp", a, logsumexp_f32(a, ndims, dims, keepdim));
}
