/* cgrad core: reductions (declared in core/ops.h, "reductions").
 *
 * Summation order (sum, mean, var, sum_all, sum_to_shape): every output
 * element is the sum of its inputs taken in row-major order of the reduced
 * dims, cut into fixed blocks of RED_BLOCK (4096) elements; each block is
 * summed sequentially in double, and the block sums are added in order, in
 * double; the result is rounded to float once. The order depends only on
 * the shape and the reduced dims, never on the strides or the thread count:
 * a sum over a transposed view is bit-identical to the sum over its
 * contiguous copy, and 1 and N threads agree bit for bit.
 *
 * Two loop shapes compute that same order:
 *  - "rows": per output element, walk the reduced elements (used when the
 *    reduced dims are the innermost in memory);
 *  - "columns": per run of up to RED_CHUNK outputs along the innermost kept
 *    dim, walk the reduced elements and add a vector of inputs to a vector
 *    of double accumulators (used when a kept dim is innermost in memory,
 *    e.g. summing [N, D] over dim 0); this loop vectorises.
 * The parallel work items are (output group, block) pairs; each writes its
 * own partial sums, which are then added in block order.
 *
 * Variance is two-pass: the mean as above, then the sum of squared
 * deviations in the same order, divided by max(0, N - correction) (std:
 * its square root, in double). Empty
 * reductions give sum 0, and mean/var NaN (0/0) as PyTorch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/iter.h"
#include "core/ops.h"
#include "core/reduce_impl.h"
#include "core/vmath.h"
#include "core/upcast.h"

#define RED_BLOCK 4096
#define RED_CHUNK 256
#define RED_PAR 32768

/* A reduction plan: kept dims (output order) and reduced dims (summation
 * order), size-1 dims dropped, contiguous neighbours merged; each list has
 * at least one dim (a [1] with stride 0 when empty). */
typedef struct plan {
    const float *base;
    int nk, nr;
    int64_t kshape[CG_MAX_DIMS], kstride[CG_MAX_DIMS];
    int64_t rshape[CG_MAX_DIMS], rstride[CG_MAX_DIMS];
    int64_t nout, nred;
    bool columns;
} plan;

static int coalesce(int n, int64_t *shape, int64_t *stride)
{
    if (n == 0) {
        shape[0] = 1;
        stride[0] = 0;
        return 1;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && stride[m - 1] == stride[i] * shape[i]) {
            shape[m - 1] *= shape[i];
            stride[m - 1] = stride[i];
        } else {
            shape[m] = shape[i];
            stride[m] = stride[i];
            m++;
        }
    }
    return m;
}

static void make_plan(plan *pl, const cg_tensor *a, const bool *mask)
{
    pl->base = cg_data(a);
    pl->nk = pl->nr = 0;
    pl->nout = pl->nred = 1;
    bool empty = false;
    for (int i = 0; i < a->ndim; i++) {
        if (mask[i])
            pl->nred *= a->shape[i];
        else
            pl->nout *= a->shape[i];
        if (a->shape[i] == 0)
            empty = true;
        if (a->shape[i] == 1)
            continue;
        if (mask[i]) {
            pl->rshape[pl->nr] = a->shape[i];
            pl->rstride[pl->nr++] = a->strides[i];
        } else {
            pl->kshape[pl->nk] = a->shape[i];
            pl->kstride[pl->nk++] = a->strides[i];
        }
    }
    pl->nk = coalesce(pl->nk, pl->kshape, pl->kstride);
    pl->nr = coalesce(pl->nr, pl->rshape, pl->rstride);
    int64_t ks = llabs(pl->kstride[pl->nk - 1]), rs = llabs(pl->rstride[pl->nr - 1]);
    pl->columns =
        !empty && pl->kshape[pl->nk - 1] > 1 && ks != 0 && pl->rshape[pl->nr - 1] > 1 && ks < rs;
}

/* Offset of output element o (row-major over the kept dims). */
static int64_t kept_offset(const plan *pl, int64_t o)
{
    int64_t off = 0;
    for (int d = pl->nk - 1; d >= 0; d--) {
        off += (o % pl->kshape[d]) * pl->kstride[d];
        o /= pl->kshape[d];
    }
    return off;
}

/* Cursor over the reduced dims. */
typedef struct rcur {
    int64_t idx[CG_MAX_DIMS];
    int64_t off;
} rcur;

static void rcur_seek(const plan *pl, rcur *c, int64_t r)
{
    c->off = 0;
    for (int d = pl->nr - 1; d >= 0; d--) {
        c->idx[d] = r % pl->rshape[d];
        r /= pl->rshape[d];
        c->off += c->idx[d] * pl->rstride[d];
    }
}

/* Advance by n along the innermost reduced dim (n <= what is left of it). */
static inline void rcur_advance(const plan *pl, rcur *c, int64_t n)
{
    int last = pl->nr - 1;
    c->idx[last] += n;
    c->off += n * pl->rstride[last];
    for (int d = last; d > 0 && c->idx[d] == pl->rshape[d]; d--) {
        c->idx[d] = 0;
        c->idx[d - 1]++;
        c->off += pl->rstride[d - 1] - pl->rshape[d] * pl->rstride[d];
    }
}

/* Sequential double sum of f(x) over reduced elements [r0, r1) starting at
 * p; f(x) = x, or (x - mean)^2 when sq. */
static double walk_rows(const plan *pl, const float *p, int64_t r0, int64_t r1, bool sq,
                        double mean)
{
    rcur c;
    rcur_seek(pl, &c, r0);
    int last = pl->nr - 1;
    int64_t L = pl->rshape[last], st = pl->rstride[last];
    double s = 0.0;
    for (int64_t r = r0; r < r1;) {
        int64_t n = L - c.idx[last];
        if (n > r1 - r)
            n = r1 - r;
        const float *q = p + c.off;
        if (sq) {
            for (int64_t i = 0; i < n; i++) {
                double d = (double)q[i * st] - mean;
                s += d * d;
            }
        } else if (st == 1) {
            for (int64_t i = 0; i < n; i++)
                s += (double)q[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                s += (double)q[i * st];
        }
        r += n;
        rcur_advance(pl, &c, n);
    }
    return s;
}

/* acc[j] = sum over reduced elements [r0, r1) of f(p[j*ks + r]), j < m. */
static void walk_columns(const plan *pl, const float *p, int64_t ks, int64_t m, int64_t r0,
                         int64_t r1, const double *mean, double *acc)
{
    for (int64_t j = 0; j < m; j++)
        acc[j] = 0.0;
    rcur c;
    rcur_seek(pl, &c, r0);
    for (int64_t r = r0; r < r1; r++) {
        const float *q = p + c.off;
        if (mean) {
            for (int64_t j = 0; j < m; j++) {
                double d = (double)q[j * ks] - mean[j];
                acc[j] += d * d;
            }
        } else if (ks == 1) {
            for (int64_t j = 0; j < m; j++)
                acc[j] += (double)q[j];
        } else {
            for (int64_t j = 0; j < m; j++)
                acc[j] += (double)q[j * ks];
        }
        rcur_advance(pl, &c, 1);
    }
}

/* What plan_sum's items read and write: item t * nb + b sums block b of
 * the reduced elements for task t (an output, or a run of up to RED_CHUNK
 * outputs along the kept dim L of stride ks, nch runs to a line) */
typedef struct {
    const plan *pl;
    const double *mean; /* NULL: plain sums */
    double *out, *part; /* part: nb partial sums an output, or NULL (nb 1) */
    int64_t nb, nch, L, ks;
} sum_job;

static void sum_items(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const sum_job *j = ctx;
    const plan *pl = j->pl;
    const int64_t nb = j->nb, nred = pl->nred;
    for (int64_t item = i0; item < i1; item++) {
        int64_t t = item / nb, b = item % nb;
        int64_t r0 = b * RED_BLOCK, r1 = r0 + RED_BLOCK < nred ? r0 + RED_BLOCK : nred;
        if (!pl->columns) {
            double s = walk_rows(pl, pl->base + kept_offset(pl, t), r0, r1, j->mean != NULL,
                                 j->mean ? j->mean[t] : 0.0);
            if (j->part)
                j->part[t * nb + b] = s;
            else
                j->out[t] = s;
        } else {
            int64_t outer = t / j->nch, j0 = (t % j->nch) * RED_CHUNK;
            int64_t m = j->L - j0 < RED_CHUNK ? j->L - j0 : RED_CHUNK;
            int64_t o0 = outer * j->L + j0;
            double acc[RED_CHUNK];
            walk_columns(pl, pl->base + kept_offset(pl, o0), j->ks, m, r0, r1,
                         j->mean ? j->mean + o0 : NULL, acc);
            for (int64_t k = 0; k < m; k++) {
                if (j->part)
                    j->part[(o0 + k) * nb + b] = acc[k];
                else
                    j->out[o0 + k] = acc[k];
            }
        }
    }
}

/* out[o] = the sum of its nb partial sums, in block order */
static void sum_partials(int64_t o0, int64_t o1, int thread, const void *ctx)
{
    const sum_job *j = ctx;
    for (int64_t o = o0; o < o1; o++) {
        double s = 0.0;
        for (int64_t b = 0; b < j->nb; b++)
            s += j->part[o * j->nb + b];
        j->out[o] = s;
    }
}

/* out[o] (nout doubles) = blocked sum of f over each output's reduced
 * elements; mean (nout doubles) selects squared deviations. */
static bool plan_sum(const plan *pl, const double *mean, double *out)
{
    int64_t nout = pl->nout, nred = pl->nred;
    if (nout == 0)
        return true;
    int64_t nb = (nred + RED_BLOCK - 1) / RED_BLOCK;
    if (nb == 0) {
        for (int64_t o = 0; o < nout; o++)
            out[o] = 0.0;
        return true;
    }
    double *part = NULL;
    if (nb > 1) {
        part = malloc((size_t)nout * (size_t)nb * sizeof(double));
        if (!part) {
            cg_set_error("reduce: out of memory for %lld partial sums", (long long)(nout * nb));
            return false;
        }
    }
    int64_t L = pl->kshape[pl->nk - 1], ks = pl->kstride[pl->nk - 1];
    int64_t nch = (L + RED_CHUNK - 1) / RED_CHUNK;
    int64_t ntasks = pl->columns ? (nout / L) * nch : nout;
    int64_t nitems = ntasks * nb;
    /* an item's work: a block of reduced elements for each of its outputs */
    int64_t work = nred < RED_BLOCK ? nred : RED_BLOCK;
    if (pl->columns)
        work *= L < RED_CHUNK ? L : RED_CHUNK;
    const sum_job job = {pl, mean, out, part, nb, nch, L, ks};
    cg_shares_run(nitems, cg_shares_rows(work), cg_shares_team(nout * nred > RED_PAR), sum_items,
                  &job);
    if (part) {
        cg_shares_run(nout, cg_shares_rows(nb), cg_shares_team(nout * nb > RED_PAR), sum_partials,
                      &job);
        free(part);
    }
    return true;
}

/* ------------------------------------------------------- dims parsing */
/* mask[i] = dim i is reduced. A 0-d tensor accepts dim 0 / -1 (as PyTorch). */
bool cg_reduce_dims(const char *op, const cg_tensor *a, int ndims, const int *dims, bool *mask)
{
    int nd = a->ndim, lim = nd ? nd : 1;
    bool seen[CG_MAX_DIMS] = {0};
    if (ndims < 0 || (ndims > 0 && !dims)) {
        cg_set_error("%s: bad dims list (ndims %d%s)", op, ndims, dims ? "" : ", dims NULL");
        return false;
    }
    for (int i = 0; i < nd; i++)
        mask[i] = ndims == 0;
    for (int i = 0; i < ndims; i++) {
        int d = dims[i] < 0 ? dims[i] + lim : dims[i];
        if (d < 0 || d >= lim) {
            char b[96];
            cg_set_error("%s: dim %d out of range for a tensor of shape %s (expected in [%d, %d])",
                         op, dims[i], cg_shape_str(a, b, sizeof b), -lim, lim - 1);
            return false;
        }
        if (seen[d]) {
            char b[96];
            cg_set_error("%s: dim %d appears more than once in the dims list (shape %s)", op,
                         dims[i], cg_shape_str(a, b, sizeof b));
            return false;
        }
        seen[d] = true;
        if (nd)
            mask[d] = true;
    }
    return true;
}

int cg_reduce_shape(const cg_tensor *a, const bool *mask, bool keepdim, int64_t *shape)
{
    int n = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (!mask[i])
            shape[n++] = a->shape[i];
        else if (keepdim)
            shape[n++] = 1;
    }
    return n;
}

enum { K_SUM, K_MEAN, K_VAR, K_STD };

/* Fill out (contiguous, nout floats in kept row-major order). */
static bool reduce_into(const cg_tensor *a, const bool *mask, int kind, int correction, float *out)
{
    plan pl;
    make_plan(&pl, a, mask);
    if (pl.nout == 0)
        return true;
    double *acc = malloc((size_t)pl.nout * sizeof(double) * (kind >= K_VAR ? 2 : 1));
    if (!acc) {
        cg_set_error("reduce: out of memory");
        return false;
    }
    bool ok = plan_sum(&pl, NULL, acc);
    double n = (double)pl.nred;
    if (ok && kind >= K_VAR) {
        double *sq = acc + pl.nout;
        for (int64_t o = 0; o < pl.nout; o++)
            acc[o] /= n;
        ok = plan_sum(&pl, acc, sq);
        double den = n - (double)correction > 0 ? n - (double)correction : 0.0;
        for (int64_t o = 0; ok && o < pl.nout; o++)
            out[o] = (float)(kind == K_STD ? sqrt(sq[o] / den) : sq[o] / den);
    } else if (ok) {
        for (int64_t o = 0; o < pl.nout; o++)
            out[o] = (float)(kind == K_MEAN ? acc[o] / n : acc[o]);
    }
    free(acc);
    return ok;
}

static cg_tensor *reduce_f32(const char *op, const cg_tensor *a, int ndims, const int *dims,
                             bool keepdim, int kind, int correction)
{
    if (!a) {
        cg_error_null_input(op);
        return NULL;
    }
    bool mask[CG_MAX_DIMS];
    if (!cg_reduce_dims(op, a, ndims, dims, mask))
        return NULL;
    int64_t shape[CG_MAX_DIMS] = {0};
    int nd = cg_reduce_shape(a, mask, keepdim, shape);
    cg_tensor *out = cg_empty(nd, shape);
    if (!out)
        return NULL;
    if (!reduce_into(a, mask, kind, correction, cg_data(out))) {
        cg_release(out);
        return NULL;
    }
    return out;
}

static cg_tensor *reduce_op(const char *op, const cg_tensor *a, int ndims, const int *dims,
                            bool keepdim, int kind, int correction)
{
    CG_UPCAST1(op, a, reduce_f32(op, a, ndims, dims, keepdim, kind, correction));
}

cg_tensor *cg_k_sum(const cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    return reduce_op("sum", a, ndims, dims, keepdim, K_SUM, 0);
}

cg_tensor *cg_k_mean(const cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    return reduce_op("mean", a, ndims, dims, keepdim, K_MEAN, 0);
}

cg_tensor *cg_k_var(const cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim)
{
    if (a && correction < 0) {
        cg_set_error("var: correction must be >= 0 (got %d)", correction);
        return NULL;
    }
    return reduce_op("var", a, ndims, dims, keepdim, K_VAR, correction);
}

cg_tensor *cg_k_std(const cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim)
{
    if (a && correction < 0) {
        cg_set_error("std: correction must be >= 0 (got %d)", correction);
        return NULL;
    }
    return reduce_op("std", a, ndims, dims, keepdim, K_STD, correction);
}

cg_tensor *cg_k_sum_all(const cg_tensor *a)
{
    return reduce_op("sum_all", a, 0, NULL, false, K_SUM, 0);
}

static cg_tensor *sum_to_shape_f32(const cg_tensor *a, int ndim, const int64_t *shape)
{
    if (!a) {
        cg_error_null_input("cg_k_sum_to_shape");
        return NULL;
    }
    char b1[96], b2[96];
    if (ndim < 0 || ndim > a->ndim || (ndim > 0 && !shape)) {
        cg_set_error("sum_to_shape: cannot sum shape %s to a shape with %d dims",
                     cg_shape_str(a, b1, sizeof b1), ndim);
        return NULL;
    }
    int lead = a->ndim - ndim;
    bool mask[CG_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) {
        if (i < lead) {
            mask[i] = true;
            continue;
        }
        int64_t want = shape[i - lead], have = a->shape[i];
        if (want != have && want != 1) {
            cg_set_error("sum_to_shape: shape %s does not broadcast to %s (dim %d: %lld vs %lld)",
                         cg_shape_str_n(ndim, shape, b1, sizeof b1), cg_shape_str(a, b2, sizeof b2),
                         i - lead, (long long)want, (long long)have);
            return NULL;
        }
        mask[i] = want == 1 && have != 1;
    }
    cg_tensor *out = cg_empty(ndim, shape);
    if (!out)
        return NULL;
    /* the kept dims of a, in order, are exactly the target's non-1 dims */
    if (!reduce_into(a, mask, K_SUM, 0, cg_data(out))) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_k_sum_to_shape(const cg_tensor *a, int ndim, const int64_t *shape)
{
    CG_UPCAST1("sum_to_shape", a, sum_to_shape_f32(a, ndim, shape));
}

/* ------------------------------------------------------------ max, min */
/* v beats best: larger (smaller for the min), or the first NaN (NaN is the
 * maximum and the minimum, as PyTorch; ties keep the first index). */
static inline bool extreme_better(float v, float best, bool smallest)
{
    return (smallest ? v < best : v > best) || (v != v && best == best);
}

/* The extreme_better extreme of a contiguous row x[0, n) (n >= 1), its
 * index in *at: the largest (smallest) value and whether there is a NaN,
 * 16 lanes at a time, then the first NaN, or else the first element equal
 * to the extreme (-0 and 0 are equal, as extreme_better has them). The
 * scalar loop's compare and select chain took 6% of the translator's
 * greedy evaluation. */
EW_BODY float row_extreme_at_body(const float *x, int64_t n, bool smallest, int64_t *at)
{
    const float far = smallest ? INFINITY : -INFINITY;
    v16f hi = (v16f){0} + far;
    v16i nan = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        hi = smallest ? min16_lanes(hi, v) : max16_lanes(hi, v);
        nan |= v != v;
    }
    float mx = far;
    bool any_nan = false;
    for (int l = 0; l < 16; l++) {
        mx = (smallest ? hi[l] < mx : hi[l] > mx) ? hi[l] : mx;
        any_nan |= nan[l] != 0;
    }
    for (; j < n; j++) {
        mx = (smallest ? x[j] < mx : x[j] > mx) ? x[j] : mx;
        any_nan |= x[j] != x[j];
    }
    int64_t i = 0;
    if (any_nan)
        while (x[i] == x[i])
            i++;
    else
        while (x[i] != mx)
            i++;
    *at = i;
    return x[i];
}
EW_CLONES static float row_extreme_at(const float *x, int64_t n, bool smallest, int64_t *at)
{
    /* EW_BODY: core/vmath.h; each direction compiled apart */
    return smallest ? row_extreme_at_body(x, n, true, at) : row_extreme_at_body(x, n, false, at);
}

/* What extreme_f32's tasks read and write: task t is an output, or a run
 * of up to RED_CHUNK outputs along the kept dim L of stride ks (nch a
 * line), each the max (min when smallest) over R elements of stride rs */
typedef struct {
    const plan *pl;
    int64_t R, rs, L, ks, nch;
    bool smallest;
    float *vals;
    int64_t *idx; /* NULL: not wanted */
} max_job;

static void max_tasks(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    const max_job *mj = ctx;
    const plan *pl = mj->pl;
    const int64_t R = mj->R, rs = mj->rs, ks = mj->ks, L = mj->L, nch = mj->nch;
    const bool sm = mj->smallest;
    float *ov = mj->vals;
    int64_t *oi = mj->idx;
    for (int64_t t = t0; t < t1; t++) {
        if (!pl->columns) {
            const float *p = pl->base + kept_offset(pl, t);
            float best = p[0];
            int64_t bi = 0;
            if (rs == 1)
                best = row_extreme_at(p, R, sm, &bi);
            for (int64_t r = 1; rs != 1 && r < R; r++) {
                float v = p[r * rs];
                if (extreme_better(v, best, sm)) {
                    best = v;
                    bi = r;
                }
            }
            ov[t] = best;
            if (oi)
                oi[t] = bi;
        } else {
            int64_t outer = t / nch, j0 = (t % nch) * RED_CHUNK;
            int64_t m = L - j0 < RED_CHUNK ? L - j0 : RED_CHUNK;
            int64_t o0 = outer * L + j0;
            const float *p = pl->base + kept_offset(pl, o0);
            float best[RED_CHUNK];
            int64_t bi[RED_CHUNK];
            for (int64_t j = 0; j < m; j++) {
                best[j] = p[j * ks];
                bi[j] = 0;
            }
            for (int64_t r = 1; r < R; r++) {
                const float *q = p + r * rs;
                for (int64_t j = 0; j < m; j++) {
                    float v = q[j * ks];
                    if (extreme_better(v, best[j], sm)) {
                        best[j] = v;
                        bi[j] = r;
                    }
                }
            }
            for (int64_t j = 0; j < m; j++) {
                ov[o0 + j] = best[j];
                if (oi)
                    oi[o0 + j] = bi[j];
            }
        }
    }
}

/* max or min (op "max", "min") and argmax or argmin (op "argmax",
 * "argmin", for the messages) of a float32 a */
static cg_tensor *extreme_f32(const char *op, const cg_tensor *a, int dim, bool keepdim,
                              bool smallest, cg_tensor **indices)
{
    if (indices)
        *indices = NULL;
    bool mask[CG_MAX_DIMS];
    if (!cg_reduce_dims(op, a, 1, &dim, mask))
        return NULL;
    int d = a->ndim ? (dim < 0 ? dim + a->ndim : dim) : 0;
    int64_t size = a->ndim ? a->shape[d] : 1;
    if (size == 0) {
        char b[96];
        cg_set_error("%s: cannot take the %s over dim %d of size 0 (shape %s)", op, op, dim,
                     cg_shape_str(a, b, sizeof b));
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS] = {0};
    int nd = cg_reduce_shape(a, mask, keepdim, shape);
    cg_tensor *vals = cg_empty(nd, shape);
    cg_tensor *idx = indices ? cg_empty_dtype(CG_I64, nd, shape) : NULL;
    if (!vals || (indices && !idx)) {
        cg_release_all(2, vals, idx);
        return NULL;
    }
    plan pl;
    make_plan(&pl, a, mask);
    float *ov = cg_data(vals);
    int64_t *oi = idx ? cg_data_i64(idx) : NULL;
    /* one reduced dim at most after dropping size 1 */
    int64_t R = pl.rshape[0], rs = pl.rstride[0];
    int64_t L = pl.kshape[pl.nk - 1], ks = pl.kstride[pl.nk - 1];
    int64_t nch = (L + RED_CHUNK - 1) / RED_CHUNK;
    int64_t ntasks = pl.columns ? (pl.nout / L) * nch : pl.nout;
    const max_job job = {&pl, R, rs, L, ks, nch, smallest, ov, oi};
    const int64_t work = pl.columns ? R * (L < RED_CHUNK ? L : RED_CHUNK) : R;
    cg_shares_run(ntasks, cg_shares_rows(work), cg_shares_team(pl.nout * R > RED_PAR), max_tasks,
                  &job);
    if (indices)
        *indices = idx;
    return vals;
}

static cg_tensor *extreme_op(const char *op, const char *fn, const cg_tensor *a, int dim,
                             bool keepdim, bool smallest, cg_tensor **indices)
{
    if (indices)
        *indices = NULL;
    if (!a) {
        cg_error_null_input(fn);
        return NULL;
    }
    CG_UPCAST1(op, a, extreme_f32(op, a, dim, keepdim, smallest, indices));
}

cg_tensor *cg_k_max(const cg_tensor *a, int dim, bool keepdim, cg_tensor **indices)
{
    return extreme_op("max", "cg_k_max", a, dim, keepdim, false, indices);
}

cg_tensor *cg_k_min(const cg_tensor *a, int dim, bool keepdim, cg_tensor **indices)
{
    return extreme_op("min", "cg_k_min", a, dim, keepdim, true, indices);
}

/* The indices alone (argmax, argmin): the values made and dropped */
static cg_tensor *arg_extreme(const char *op, const char *fn, const cg_tensor *a, int dim,
                              bool keepdim, bool smallest)
{
    cg_tensor *idx = NULL;
    cg_tensor *vals = extreme_op(op, fn, a, dim, keepdim, smallest, &idx);
    if (!vals)
        return NULL;
    cg_release(vals);
    return idx;
}

cg_tensor *cg_k_argmax(const cg_tensor *a, int dim, bool keepdim)
{
    return arg_extreme("argmax", "cg_k_argmax", a, dim, keepdim, false);
}

cg_tensor *cg_k_argmin(const cg_tensor *a, int dim, bool keepdim)
{
    return arg_extreme("argmin", "cg_k_argmin", a, dim, keepdim, true);
}

/* The max of each block of RED_BLOCK elements in row-major order */
typedef struct {
    const cg_iter *it;
    int64_t st; /* the inner stride */
    float *bm;  /* a block's max (NaN if it holds one) */
} max_all_job;

static void block_max(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const max_all_job *j = ctx;
    cg_iter_pos pos;
    float *ptr[1];
    int64_t len;
    cg_iter_seek(j->it, &pos, i0, i1);
    float best = -INFINITY;
    bool nan = false;
    while ((len = cg_iter_next(j->it, &pos, ptr)) > 0) {
        const float *q = ptr[0];
        for (int64_t i = 0; i < len; i++) {
            float v = q[i * j->st];
            best = v > best ? v : best;
            nan |= v != v;
        }
    }
    j->bm[i0 / RED_BLOCK] = nan ? NAN : best;
}

/* Max over every element; NaN if any element is NaN. Blocks of RED_BLOCK
 * in row-major order, block maxima combined in order. */
static cg_tensor *max_all_f32(const cg_tensor *a)
{
    if (!a) {
        cg_error_null_input("cg_k_max_all");
        return NULL;
    }
    int64_t n = cg_numel(a);
    if (n == 0) {
        char b[96];
        cg_set_error("max_all: cannot take the max of an empty tensor (shape %s)",
                     cg_shape_str(a, b, sizeof b));
        return NULL;
    }
    cg_iter it;
    cg_iter_init(&it, a->ndim, a->shape, 1, (const cg_tensor *[]){a});
    int64_t nb = (n + RED_BLOCK - 1) / RED_BLOCK;
    float *bm = malloc((size_t)nb * sizeof(float));
    if (!bm) {
        cg_set_error("max_all: out of memory");
        return NULL;
    }
    const max_all_job job = {&it, cg_iter_inner_stride(&it, 0), bm};
    cg_shares_run(n, RED_BLOCK, cg_shares_team(n > RED_PAR), block_max, &job);
    float best = bm[0];
    for (int64_t b = 1; b < nb; b++)
        if (extreme_better(bm[b], best, false))
            best = bm[b];
    free(bm);
    return cg_scalar(best);
}

cg_tensor *cg_k_max_all(const cg_tensor *a) { CG_UPCAST1("max_all", a, max_all_f32(a)); }

bool cg_around_dim(const char *op, const cg_tensor *a, int *dim, int64_t *outer, int64_t *n,
                   int64_t *inner)
{
    int d = cg_norm_dim(op, *dim, a->ndim > 0 ? a->ndim : 1);
    if (d < 0)
        return false;
    *dim = d;
    *outer = 1;
    *inner = 1;
    *n = a->ndim ? a->shape[d] : 1;
    for (int i = 0; i < d; i++)
        *outer *= a->shape[i];
    for (int i = d + 1; i < a->ndim; i++)
        *inner *= a->shape[i];
    return true;
}
