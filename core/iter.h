/* cgrad core, INTERNAL: strided broadcast iteration for kernel files.
 *
 * Not a public header: only the .c files of core/ include it. It walks several operands
 * of one (broadcast) shape together, in row-major order of that shape, one
 * "segment" (a run along the innermost dim) at a time:
 *
 *     int64_t shape[CG_MAX_DIMS];
 *     int nd = cg_iter_broadcast("add", 2, (const cg_tensor *[]){a, b}, shape);
 *     cg_tensor *out = cg_empty(nd, shape);
 *     cg_iter it;
 *     cg_iter_init(&it, nd, shape, 3, (const cg_tensor *[]){out, a, b});
 *     cg_iter_run(&it, my_segment_fn, ctx);   // OpenMP above a threshold
 *
 * cg_iter_init aligns each operand's strides to the iteration shape (0 where
 * an operand is broadcast: a missing leading dim or a size-1 dim), drops
 * size-1 dims, and merges adjacent dims that are contiguous for every
 * operand, so all-contiguous operands of one shape become one long segment
 * (the fast path) and a transposed operand keeps short strided rows.
 *
 * A segment function gets ptrs[k] (operand k's first element of the run),
 * strides[k] (operand k's stride along the run; 0 = broadcast) and the run
 * length n. cg_iter_run splits the flat index range into fixed chunks of
 * CG_ITER_CHUNK elements, so each output element is written by exactly one
 * thread and results do not depend on the thread count.
 *
 * For hand-written loops: cg_iter_seek + cg_iter_next walk any sub-range
 * [begin, end) of the flat index. */
#ifndef CG_ITER_H
#define CG_ITER_H

#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/shares.h"
#include "core/tensor.h"

#define CG_ITER_MAX_OPS 4
/* Element count above which kernels run in parallel (OpenMP). */
#define CG_ITER_PAR_THRESHOLD 32768
/* Work unit of cg_iter_run (elements of the flat index). */
#define CG_ITER_CHUNK 16384

typedef struct cg_iter {
    int nops; /* operands */
    int ndim; /* >= 1 after cg_iter_init (a scalar iterates as [1]) */
    int64_t numel;
    int64_t shape[CG_MAX_DIMS];
    int64_t strides[CG_ITER_MAX_OPS][CG_MAX_DIMS];
    float *data[CG_ITER_MAX_OPS]; /* element 0 of each operand */
} cg_iter;

typedef struct cg_iter_pos {
    int64_t idx[CG_MAX_DIMS];
    int64_t off[CG_ITER_MAX_OPS];
    int64_t pos, end;
} cg_iter_pos;

typedef void (*cg_iter_seg_fn)(float *const *ptrs, const int64_t *strides, int64_t n, void *ctx);

/* Broadcast the shapes of n tensors (NumPy rules) into out (CG_MAX_DIMS
 * entries). Returns the result ndim, or -1 with an error naming op and every
 * shape, e.g. "add: shapes [3] and [4] cannot be broadcast together". */
static inline int cg_iter_broadcast(const char *op, int n, const cg_tensor *const *ts, int64_t *out)
{
    int nd = 0;
    for (int k = 0; k < n; k++)
        if (ts[k]->ndim > nd)
            nd = ts[k]->ndim;
    for (int i = 0; i < nd; i++) {
        int64_t s = 1;
        bool bad = false;
        for (int k = 0; k < n; k++) {
            int j = i - (nd - ts[k]->ndim);
            int64_t d = j >= 0 ? ts[k]->shape[j] : 1;
            if (d == 1)
                continue;
            if (s != 1 && s != d)
                bad = true;
            s = d;
        }
        if (bad) {
            char msg[512];
            size_t used = (size_t)snprintf(msg, sizeof msg, "%s: shapes ", op);
            for (int k = 0; k < n && used < sizeof msg; k++) {
                char b[96];
                used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s",
                                         k == 0 ? "" : (k == n - 1 ? " and " : ", "),
                                         cg_shape_str(ts[k], b, sizeof b));
            }
            cg_set_error("%s cannot be broadcast together (at dim %d of the result)", msg, i);
            return -1;
        }
        out[i] = s;
    }
    return nd;
}

/* Set up iteration over `shape` for nops operands (each must broadcast to
 * shape; check with cg_iter_broadcast first). */
static inline void cg_iter_init(cg_iter *it, int ndim, const int64_t *shape, int nops,
                                const cg_tensor *const *ops)
{
    it->nops = nops;
    it->numel = cg_numel_shape(ndim, shape);
    int64_t sh[CG_MAX_DIMS], st[CG_ITER_MAX_OPS][CG_MAX_DIMS];
    for (int k = 0; k < nops; k++)
        it->data[k] = cg_data(ops[k]);
    /* aligned strides, size-1 dims dropped */
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        sh[n] = shape[i];
        for (int k = 0; k < nops; k++) {
            int j = i - (ndim - ops[k]->ndim);
            st[k][n] = (j < 0 || ops[k]->shape[j] == 1) ? 0 : ops[k]->strides[j];
        }
        n++;
    }
    /* merge dim d into d+1 (from the inside out) when every operand is
     * contiguous across the pair */
    int m = 0; /* dims kept so far, built innermost first in reverse */
    int64_t rsh[CG_MAX_DIMS], rst[CG_ITER_MAX_OPS][CG_MAX_DIMS];
    for (int d = n - 1; d >= 0; d--) {
        bool merge = m > 0;
        for (int k = 0; k < nops && merge; k++)
            if (st[k][d] != rst[k][m - 1] * rsh[m - 1])
                merge = false;
        if (merge) {
            rsh[m - 1] *= sh[d];
        } else {
            rsh[m] = sh[d];
            for (int k = 0; k < nops; k++)
                rst[k][m] = st[k][d];
            m++;
        }
    }
    if (m == 0) {
        rsh[0] = 1;
        for (int k = 0; k < nops; k++)
            rst[k][0] = 0;
        m = 1;
    }
    it->ndim = m;
    for (int i = 0; i < m; i++) {
        it->shape[i] = rsh[m - 1 - i];
        for (int k = 0; k < nops; k++)
            it->strides[k][i] = rst[k][m - 1 - i];
    }
    if (it->numel == 0) {
        it->ndim = 1;
        it->shape[0] = 0;
    }
}

/* Position p at flat index begin, to stop at end. */
static inline void cg_iter_seek(const cg_iter *it, cg_iter_pos *p, int64_t begin, int64_t end)
{
    p->pos = begin;
    p->end = end;
    for (int k = 0; k < it->nops; k++)
        p->off[k] = 0;
    int64_t rem = begin;
    for (int d = it->ndim - 1; d >= 0; d--) {
        int64_t i = it->shape[d] ? rem % it->shape[d] : 0;
        rem = it->shape[d] ? rem / it->shape[d] : 0;
        p->idx[d] = i;
        for (int k = 0; k < it->nops; k++)
            p->off[k] += i * it->strides[k][d];
    }
}

/* The next segment: fills ptrs (nops entries) and returns its length, or 0
 * when the range is done. Advances p. */
static inline int64_t cg_iter_next(const cg_iter *it, cg_iter_pos *p, float **ptrs)
{
    if (p->pos >= p->end)
        return 0;
    int last = it->ndim - 1;
    int64_t n = it->shape[last] - p->idx[last];
    if (n > p->end - p->pos)
        n = p->end - p->pos;
    for (int k = 0; k < it->nops; k++)
        ptrs[k] = it->data[k] + p->off[k];
    p->pos += n;
    p->idx[last] += n;
    for (int k = 0; k < it->nops; k++)
        p->off[k] += n * it->strides[k][last];
    /* carry */
    for (int d = last; d > 0 && p->idx[d] == it->shape[d]; d--) {
        p->idx[d] = 0;
        p->idx[d - 1]++;
        for (int k = 0; k < it->nops; k++)
            p->off[k] += it->strides[k][d - 1] - it->shape[d] * it->strides[k][d];
    }
    return n;
}

/* Stride of operand k along the innermost (segment) dim. */
static inline int64_t cg_iter_inner_stride(const cg_iter *it, int k)
{
    return it->strides[k][it->ndim - 1];
}

/* What cg_iter_run's chunks need */
typedef struct {
    const cg_iter *it;
    const int64_t *st; /* the inner strides */
    cg_iter_seg_fn fn;
    void *ctx;
} cg_iter_job;

/* fn on the segments of the flat index range [b, e) */
static inline void cg_iter_chunk(int64_t b, int64_t e, int thread, const void *job)
{
    const cg_iter_job *j = job;
    cg_iter_pos p;
    float *ptrs[CG_ITER_MAX_OPS];
    cg_iter_seek(j->it, &p, b, e);
    int64_t n;
    while ((n = cg_iter_next(j->it, &p, ptrs)) > 0)
        j->fn(ptrs, j->st, n, j->ctx);
}

/* Call fn on every segment, in parallel over fixed chunks when large. */
static inline void cg_iter_run(const cg_iter *it, cg_iter_seg_fn fn, void *ctx)
{
    int64_t st[CG_ITER_MAX_OPS];
    for (int k = 0; k < it->nops; k++)
        st[k] = cg_iter_inner_stride(it, k);
    cg_iter_job job = {it, st, fn, ctx};
    cg_shares_run(it->numel, CG_ITER_CHUNK, cg_shares_team(it->numel > CG_ITER_PAR_THRESHOLD),
                  cg_iter_chunk, &job);
}

#endif
