/* cgrad core, INTERNAL: what the linear algebra kernels share
 * (core/linalg.c, core/linalg_decomp.c; declared in core/ops.h, "linear
 * algebra"). Not installed.
 *
 * Matrices are read from float32 tensors of any strides into column-major
 * double arrays (LAPACK's layout), factorised there, and the results
 * rounded once to float32. A batch is a loop over its matrices, each one
 * task with its own LAPACK workspace: the bits do not depend on the
 * thread count. */
#ifndef CG_CORE_LINALG_IMPL_H
#define CG_CORE_LINALG_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/lapack.h"
#include "core/ops.h"

typedef enum {
    CG_LA_SOLVE,
    CG_LA_INV,
    CG_LA_DET,
    CG_LA_SLOGDET,
    CG_LA_CHOLESKY,
    CG_LA_QR,
    CG_LA_EIGH,
    CG_LA_EIGVALSH,
    CG_LA_SVD,
    CG_LA_SVDVALS,
    CG_LA_PINV,
    CG_LA_LSTSQ,
} cg_la_kind;

/* What a forward keeps for its backward: its factors in double, batch
 * blocks of each, column-major. */
struct cg_la {
    cg_la_kind kind;
    int flags;          /* CG_LA_UPPER, CG_LA_FULL, CG_LA_NOGRAD (+ its message) */
    const char *nograd; /* the backward's refusal (QR's modes), or NULL */
    int nb;             /* batch dims, bshape */
    int64_t bshape[CG_MAX_DIMS];
    int64_t batch, m, n, k; /* the matrices' dims (solve, lstsq: k right-hand sides) */
    double *f[4];           /* the factors (owned), by kind */
    CG_LA_INT *piv;         /* LU pivots, batch * n (owned) */
    double *d;              /* a number per matrix (owned): det */
};
#define CG_LA_UPPER 1
#define CG_LA_FULL 2

/* A new cg_la of kind for the batch of matrices whose dims are t's first
 * nb (NULL + error when out of memory). */
cg_la *cg_la_new(cg_la_kind kind, const cg_tensor *t, int nb);

/* The storage offset of matrix b of t, whose first nb dims are the batch. */
int64_t cg_la_boff(const cg_tensor *t, int nb, int64_t b);
/* r x c elements of t from storage offset off, element (i, j) at off + i rs
 * + j cs (any float dtype), into the column-major dst of leading dim ld;
 * transposed (dst (j, i)) when trans. */
void cg_la_get(const cg_tensor *t, int64_t off, int64_t r, int64_t c, int64_t rs, int64_t cs,
               double *dst, int64_t ld, bool trans);
/* The column-major r x c src (leading dim ld) rounded into the row-major
 * float32 dst (transposed: dst is c x r, dst[j][i] = src(i, j)). */
void cg_la_put(float *dst, const double *src, int64_t r, int64_t c, int64_t ld, bool trans);

/* One matrix of a batch: LAPACK's info (0: done), work and iwork this
 * thread's workspace. */
typedef int (*cg_la_item_fn)(void *ctx, int64_t b, double *work, CG_LA_INT *iwork);
/* item for b = 0 .. batch - 1 (flops: the work of one, to choose the
 * threads), each thread with wsize doubles and iwsize ints of workspace.
 * The first matrix whose info is not 0 into *bad (-1: none) and its info
 * into *info. False + error when the workspace cannot be had. LAPACK runs
 * single-threaded for each matrix (an OpenBLAS build follows OpenMP's
 * thread count outside a parallel region: that count is 1 meanwhile). */
bool cg_la_batch(const char *op, int64_t batch, double flops, int64_t wsize, int64_t iwsize,
                 cg_la_item_fn item, void *ctx, int64_t *bad, int *info);

/* "(Batch element b): " when the input is batched (nb > 0), else "" */
const char *cg_la_batch_prefix(int nb, int64_t b, char *buf, size_t n);

/* malloc'd arrays of n doubles (n 0: a valid pointer); NULL + error */
double *cg_la_alloc(int64_t n);

/* C = alpha op(A) op(B) + beta C, column-major (dgemm's meaning, our
 * loops: one order of sums, one thread) */
void cg_la_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
/* B = op(A)^-1 B (left) or B op(A)^-1, A n x n triangular (dtrsm's
 * meaning, our loops; a zero on A's diagonal gives inf and NaN) */
void cg_la_trsm(bool left, bool upper, bool trans, int64_t m, int64_t n, const double *a,
                int64_t lda, double *b, int64_t ldb);
/* Whether the n doubles are all 0 (an output whose gradient is all 0 was
 * not used: the backward takes it as PyTorch's undefined gradient). */
bool cg_la_all_zero(const double *x, int64_t n);

/* the backwards of core/linalg_decomp.c */
bool cg_la_qr_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA);
bool cg_la_eigh_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA);
bool cg_la_svd_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA);
bool cg_la_pinv_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA, cg_tensor **gB);
/* the adjugate's transpose of the n x n column-major a (destroyed) times
 * alpha, into out: U diag(prod_{j != i} s_j) V^T det(U) det(V) alpha from
 * a's SVD, exact for a singular a (PyTorch's linalg_det_backward for
 * singular inputs). work: cg_la_adj_work(n) doubles, iwork 8 n ints.
 * LAPACK's info. */
int cg_la_adjugate_t(int64_t n, double *a, double alpha, double *out, double *work,
                     CG_LA_INT *iwork);
int64_t cg_la_adj_work(int64_t n);

#endif
