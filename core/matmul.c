/* cgrad core: matrix products (PyTorch matmul semantics) on strided views.
 *
 * Every matrix goes to BLIS (core/gemm.c) with its own row and column
 * strides, so transposed, permuted and sliced views are read in place with
 * no copy (general strides included: BLIS packs them at about the cost of a
 * copy). Only a matrix BLIS cannot address (a zero stride from expand, or
 * rows that overlap) is made contiguous first.
 *
 * Batches: a product whose right operand is the same matrix for every batch
 * and whose left operand and output stack their rows evenly (the usual
 * [B, T, d] @ [d, e]) is one gemm of (B*T) rows. Otherwise each output
 * matrix is one gemm call: many small matrices are spread over OpenMP
 * threads (single-threaded gemm each), large ones go one after another with
 * a threaded gemm. No gemm splits its k loop by the thread count (core/gemm.c),
 * so every output element is reduced in the same order whichever way is
 * taken: results are identical for any thread count. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/ops.h"
#include "core/upcast.h"
#include "core/tensor.h"

/* Below this many flops per output matrix, batches are spread over threads
 * even when the batch count does not divide evenly. */
#define SMALL_GEMM_FLOPS (2.0 * 128 * 128 * 128)
/* Below this total (all batches), a batched product stays on one thread. */
#define PARALLEL_MIN_FLOPS (2.0 * 64 * 64 * 64)

/* One matrix operand: base pointer, strides over the output's batch dims
 * (0 where broadcast), and the row/column strides of each matrix. */
typedef struct {
    const float *p;
    int64_t bs[CG_MAX_DIMS];
    int64_t rs, cs;
} operand;

/* -------------------------------------------------------- stride rules */

/* True if an input matrix must be made contiguous before the gemm: BLIS
 * rejects zero strides (broadcast rows/columns) and overlapping ones.
 * General strides (neither stride 1) are passed as they are: measured with
 * skx against copy + gemm, they were within 10% either way (n = 64..1024,
 * 1 and 2 threads), and they need no extra memory. */
static bool needs_copy(int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    if (rows == 0 || cols == 0)
        return false;
    cg_gemm_normalise_strides(rows, cols, &rs, &cs);
    return !cg_gemm_strides_ok(rows, cols, rs, cs);
}

/* Collapse (batch dims..., rows) of an operand into one row dim if their
 * strides allow it: size-1 dims are ignored, every other dim's stride must
 * be the next inner dim's stride times its size. *stride gets the stride of
 * the merged rows. Fails on zero strides (broadcast rows). */
static bool collapse_rows(int nbd, const int64_t *bshape, const int64_t *bs, int64_t m, int64_t rs,
                          int64_t *stride)
{
    bool any = false;
    int64_t expect = 0;
    *stride = 1;
    for (int i = nbd; i >= 0; i--) {
        int64_t size = i == nbd ? m : bshape[i];
        int64_t st = i == nbd ? rs : bs[i];
        if (size == 1)
            continue;
        if (st == 0)
            return false;
        if (!any) {
            *stride = st;
            any = true;
        } else if (st != expect) {
            return false;
        }
        expect = st * size;
    }
    return true;
}

/* ------------------------------------------------------------ driver */

/* C[b] = alpha A[b] @ B[b] + beta C[b] for every index b of the batch shape
 * (nbd dims); cbs are C's batch strides. */
static bool run_batched(const char *op, int nbd, const int64_t *bshape, int64_t m, int64_t n,
                        int64_t k, float alpha, const operand *A, const operand *B, float beta,
                        float *c, const int64_t *cbs, int64_t rsc, int64_t csc)
{
    int64_t nbatch = cg_numel_shape(nbd, bshape);
    if (nbatch == 0 || m == 0 || n == 0)
        return true;
    /* the calling thread's precision, for the products run by the worker
     * threads below too (core/gemm.h) */
    const cg_gemm_path path = cg_precision_path(cg_get_matmul_precision());

    /* One tall gemm when B is shared by all batches and A, C stack rows. */
    bool b_shared = true;
    for (int i = 0; i < nbd; i++)
        if (bshape[i] != 1 && B->bs[i] != 0)
            b_shared = false;
    int64_t rsa_f, rsc_f;
    if (b_shared && collapse_rows(nbd, bshape, A->bs, m, A->rs, &rsa_f) &&
        collapse_rows(nbd, bshape, cbs, m, rsc, &rsc_f)) {
        if (!cg_sgemm_path(path, 0, nbatch * m, n, k, alpha, A->p, rsa_f, A->cs, B->p, B->rs, B->cs,
                           beta, c, rsc_f, csc)) {
            cg_prefix_error("%s: ", op); /* gemm's message */
            return false;
        }
        return true;
    }

    /* Element offsets of each batch's matrices. */
    int64_t *off = malloc((size_t)nbatch * 3 * sizeof(int64_t));
    if (!off) {
        cg_set_error("%s: out of memory", op);
        return false;
    }
    int64_t idx[CG_MAX_DIMS] = {0};
    int64_t oa = 0, ob = 0, oc = 0;
    for (int64_t t = 0; t < nbatch; t++) {
        off[3 * t] = oa;
        off[3 * t + 1] = ob;
        off[3 * t + 2] = oc;
        for (int d = nbd - 1; d >= 0; d--) {
            if (++idx[d] < bshape[d]) {
                oa += A->bs[d];
                ob += B->bs[d];
                oc += cbs[d];
                break;
            }
            oa -= A->bs[d] * (bshape[d] - 1);
            ob -= B->bs[d] * (bshape[d] - 1);
            oc -= cbs[d] * (bshape[d] - 1);
            idx[d] = 0;
        }
    }

    int nt = cg_get_num_threads();
    double flops = 2.0 * (double)m * (double)n * (double)k;
    /* Spread batches over threads only when the whole product is worth a
     * parallel region (waking a thread costs ~10 us, far more on a loaded
     * machine); tiny batched products run on the calling thread. */
    bool spread = nt > 1 && !omp_in_parallel() && nbatch >= nt &&
                  flops * (double)nbatch >= PARALLEL_MIN_FLOPS &&
                  (flops <= SMALL_GEMM_FLOPS || nbatch % nt == 0 || nbatch >= 4 * nt);
    bool ok = true;
    if (spread) {
#pragma omp parallel for num_threads(nt) schedule(static) reduction(&& : ok)
        for (int64_t t = 0; t < nbatch; t++)
            ok = cg_sgemm_path(path, 1, m, n, k, alpha, A->p + off[3 * t], A->rs, A->cs,
                               B->p + off[3 * t + 1], B->rs, B->cs, beta, c + off[3 * t + 2], rsc,
                               csc) &&
                 ok;
    } else {
        for (int64_t t = 0; t < nbatch && ok; t++)
            ok = cg_sgemm_path(path, 0, m, n, k, alpha, A->p + off[3 * t], A->rs, A->cs,
                               B->p + off[3 * t + 1], B->rs, B->cs, beta, c + off[3 * t + 2], rsc,
                               csc);
    }
    free(off);
    if (!ok) /* gemm's message (a worker thread's: set again here) */
        cg_set_error("%s: gemm: out of memory for a batch's %lld x %lld x %lld product", op,
                     (long long)m, (long long)n, (long long)k);
    return ok;
}

/* Fill an operand from a tensor of ndim >= 2 whose batch dims align to the
 * right of an nbd-dim batch shape (size-1 dims broadcast with stride 0). */
static void make_operand(operand *o, const cg_tensor *t, int nbd, const int64_t *bshape)
{
    int tb = t->ndim - 2;
    o->p = cg_data(t);
    for (int i = 0; i < nbd; i++) {
        int j = i - (nbd - tb);
        o->bs[i] = (j < 0 || (t->shape[j] == 1 && bshape[i] != 1)) ? 0 : t->strides[j];
    }
    o->rs = t->strides[t->ndim - 2];
    o->cs = t->strides[t->ndim - 1];
}

/* If BLIS cannot address t's matrices (last two dims; needs_copy), *copy
 * gets a contiguous copy to read instead (else NULL). False if the copy
 * failed. */
static bool readable(const cg_tensor *t, cg_tensor **copy)
{
    int nd = t->ndim;
    *copy = NULL;
    if (!needs_copy(t->shape[nd - 2], t->shape[nd - 1], t->strides[nd - 2], t->strides[nd - 1]))
        return true;
    *copy = cg_k_contiguous(t);
    return *copy != NULL;
}

/* A 1-D tensor as a 2-D view: [1, k] (row) or [k, 1] (column). */
static cg_tensor as_matrix(const cg_tensor *t, bool row)
{
    cg_tensor v = *t;
    v.ndim = 2;
    if (row) {
        v.shape[0] = 1;
        v.strides[0] = t->shape[0] * t->strides[0];
        v.shape[1] = t->shape[0];
        v.strides[1] = t->strides[0];
    } else {
        v.shape[0] = t->shape[0];
        v.strides[0] = t->strides[0];
        v.shape[1] = 1;
        v.strides[1] = 1;
    }
    return v;
}

/* ------------------------------------------------------------ public */

static cg_tensor *matmul_f32(const cg_tensor *a, const cg_tensor *b)
{
    char sa[256], sb[256];
    if (a->ndim == 0 || b->ndim == 0) {
        cg_set_error("matmul: both arguments need at least 1 dimension (shapes %s and %s)",
                     cg_shape_str(a, sa, sizeof sa), cg_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    int64_t ka = a->shape[a->ndim - 1];
    int64_t kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (ka != kb) {
        cg_set_error("matmul: inner dimensions differ, %lld vs %lld (shapes %s and %s)",
                     (long long)ka, (long long)kb, cg_shape_str(a, sa, sizeof sa),
                     cg_shape_str(b, sb, sizeof sb));
        return NULL;
    }

    /* 1-D operands become [1, k] / [k, 1] matrices (plain struct views that
     * share a's and b's storage; never released). */
    cg_tensor a2 = a->ndim == 1 ? as_matrix(a, true) : *a;
    cg_tensor b2 = b->ndim == 1 ? as_matrix(b, false) : *b;

    /* Broadcast the batch dims. */
    int na = a2.ndim - 2, nb = b2.ndim - 2;
    int nbd = na > nb ? na : nb;
    int64_t bshape[CG_MAX_DIMS];
    for (int i = 0; i < nbd; i++) {
        int ia = i - (nbd - na), ib = i - (nbd - nb);
        int64_t da = ia >= 0 ? a2.shape[ia] : 1;
        int64_t db = ib >= 0 ? b2.shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            cg_set_error("matmul: batch dimensions cannot be broadcast, %lld vs %lld "
                         "(shapes %s and %s)",
                         (long long)da, (long long)db, cg_shape_str(a, sa, sizeof sa),
                         cg_shape_str(b, sb, sizeof sb));
            return NULL;
        }
        bshape[i] = da == 1 ? db : da;
    }
    int64_t m = a2.shape[a2.ndim - 2], k = ka, n = b2.shape[b2.ndim - 1];

    /* Output: batch + [m] (unless a was 1-D) + [n] (unless b was 1-D). */
    int64_t oshape[CG_MAX_DIMS];
    int ond = 0;
    for (int i = 0; i < nbd; i++)
        oshape[ond++] = bshape[i];
    if (a->ndim != 1)
        oshape[ond++] = m;
    if (b->ndim != 1)
        oshape[ond++] = n;
    cg_tensor *out = cg_empty(ond, oshape);
    if (!out)
        return NULL;

    cg_tensor *ca, *cb = NULL;
    if (!readable(&a2, &ca) || !readable(&b2, &cb)) {
        cg_release_all(3, ca, cb, out);
        return NULL;
    }
    operand A, B;
    make_operand(&A, ca ? ca : &a2, nbd, bshape);
    make_operand(&B, cb ? cb : &b2, nbd, bshape);
    /* C is contiguous [batch..., m, n]. */
    int64_t cbs[CG_MAX_DIMS];
    int64_t st = m * n;
    for (int i = nbd - 1; i >= 0; i--) {
        cbs[i] = st;
        st *= bshape[i];
    }
    bool ok =
        run_batched("matmul", nbd, bshape, m, n, k, 1.0f, &A, &B, 0.0f, cg_data(out), cbs, n, 1);
    cg_release_all(2, ca, cb);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_k_matmul(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b)
        return NULL; /* the cause was recorded where the NULL came from */
    CG_UPCAST2("matmul", a, b, matmul_f32(a, b));
}

bool cg_k_matmul_into(cg_tensor *c, const cg_tensor *a, const cg_tensor *b, float alpha, float beta)
{
    if (!c || !a || !b)
        return false; /* the cause was recorded where the NULL came from */
    if (!cg_check_f32("matmul_into", "c", c) || !cg_check_f32("matmul_into", "a", a) ||
        !cg_check_f32("matmul_into", "b", b))
        return false;
    char sa[256], sb[256], sc[256];
#define SHAPES3 \
    cg_shape_str(c, sc, sizeof sc), cg_shape_str(a, sa, sizeof sa), cg_shape_str(b, sb, sizeof sb)
    if (a->ndim < 2 || b->ndim < 2 || c->ndim < 2) {
        cg_set_error("matmul_into: operands need at least 2 dimensions (out %s, a %s, b %s)",
                     SHAPES3);
        return false;
    }
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t n = b->shape[b->ndim - 1];
    if (b->shape[b->ndim - 2] != k || c->shape[c->ndim - 2] != m || c->shape[c->ndim - 1] != n) {
        cg_set_error("matmul_into: matrix shapes do not match (out %s, a %s, b %s)", SHAPES3);
        return false;
    }
    int nbd = c->ndim - 2;
    if (a->ndim - 2 > nbd || b->ndim - 2 > nbd) {
        cg_set_error("matmul_into: batch dimensions do not broadcast to the output's "
                     "(out %s, a %s, b %s)",
                     SHAPES3);
        return false;
    }
    for (int i = 0; i < nbd; i++) {
        int ia = i - (nbd - (a->ndim - 2)), ib = i - (nbd - (b->ndim - 2));
        int64_t d = c->shape[i];
        if ((ia >= 0 && a->shape[ia] != d && a->shape[ia] != 1) ||
            (ib >= 0 && b->shape[ib] != d && b->shape[ib] != 1)) {
            cg_set_error("matmul_into: batch dimensions do not broadcast to the output's "
                         "(out %s, a %s, b %s)",
                         SHAPES3);
            return false;
        }
        if (d > 1 && c->strides[i] == 0) {
            cg_set_error("matmul_into: output has a broadcast (stride 0) batch dimension "
                         "(out %s)",
                         cg_shape_str(c, sc, sizeof sc));
            return false;
        }
    }
    int64_t rsc = c->strides[c->ndim - 2], csc = c->strides[c->ndim - 1];
    if (m > 0 && n > 0) {
        int64_t r = rsc, s = csc;
        cg_gemm_normalise_strides(m, n, &r, &s);
        if (!cg_gemm_strides_ok(m, n, r, s)) {
            cg_set_error("matmul_into: output matrices overlap themselves (out %s, strides "
                         "%lld, %lld)",
                         cg_shape_str(c, sc, sizeof sc), (long long)rsc, (long long)csc);
            return false;
        }
    }
#undef SHAPES3

    /* an operand that shares c's bytes is read as it was before the call
     * (the products write c block by block while they still read it) */
    cg_tensor *ua = NULL, *ub = NULL, *ca = NULL, *cb = NULL;
    if (!(a = cg_k_unaliased(c, a, false, &ua)) || !(b = cg_k_unaliased(c, b, false, &ub)) ||
        !readable(a, &ca) || !readable(b, &cb)) {
        cg_release_all(4, ua, ub, ca, cb);
        return false;
    }
    operand A, B;
    make_operand(&A, ca ? ca : a, nbd, c->shape);
    make_operand(&B, cb ? cb : b, nbd, c->shape);
    bool ok = run_batched("matmul_into", nbd, c->shape, m, n, k, alpha, &A, &B, beta, cg_data(c),
                          c->strides, rsc, csc);
    cg_tensor_modified(c); /* once written (or partly): a version bump, derived forms dropped */
    cg_release_all(4, ua, ub, ca, cb);
    return ok;
}
