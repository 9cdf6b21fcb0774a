/* cgrad core: what the linear algebra kernels share (core/linalg_impl.h;
 * core/linalg.c, core/linalg_decomp.c, core/linalg_lstsq.c,
 * core/linalg_norm.c): the factors kept for a backward, reading matrices
 * into column-major doubles and rounding results back, a batch's loop over
 * its matrices, the argument checks, and the products and triangular
 * solves of the backwards (our loops, not BLAS: core/lapack.h says why). */
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lapack.h"
#include "core/linalg_impl.h"
#include "core/shares.h"

/* a batch worth threads: the flops of its matrices together */
#define LA_PAR_FLOPS 32768.0

cg_la *cg_la_new(cg_la_kind kind, const cg_tensor *t, int nb)
{
    cg_la *la = calloc(1, sizeof *la);
    if (!la) {
        cg_set_error("linalg: out of memory keeping the factors for the backward");
        return NULL;
    }
    la->kind = kind;
    la->nb = nb;
    memcpy(la->bshape, t->shape, sizeof(int64_t) * (size_t)nb);
    la->batch = cg_numel_shape(nb, t->shape);
    return la;
}

void cg_la_free(void *p)
{
    cg_la *la = p;
    if (!la)
        return;
    for (int i = 0; i < 4; i++)
        free(la->f[i]);
    free(la->piv);
    free(la->d);
    free(la);
}

double *cg_la_alloc(int64_t n)
{
    double *p = n >= 0 && (uint64_t)n < SIZE_MAX / sizeof(double) / 2
                    ? malloc(sizeof(double) * (size_t)(n > 0 ? n : 1))
                    : NULL;
    if (!p)
        cg_set_error("linalg: out of memory (%lld doubles)", (long long)n);
    return p;
}

int64_t cg_la_boff(const cg_tensor *t, int nb, int64_t b)
{
    int64_t off = t->offset;
    for (int d = nb - 1; d >= 0; d--) {
        const int64_t s = t->shape[d];
        off += (b % s) * t->strides[d];
        b /= s;
    }
    return off;
}

void cg_la_get(const cg_tensor *t, int64_t off, int64_t r, int64_t c, int64_t rs, int64_t cs,
               double *dst, int64_t ld, bool trans)
{
    const int64_t si = trans ? ld : 1, sj = trans ? 1 : ld;
    if (t->dtype == CG_F32) {
        const float *p = (const float *)t->storage->data + off;
        for (int64_t j = 0; j < c; j++)
            for (int64_t i = 0; i < r; i++)
                dst[i * si + j * sj] = p[i * rs + j * cs];
        return;
    }
    const char *p = t->storage->data;
    const size_t es = cg_dtype_size(t->dtype);
    for (int64_t j = 0; j < c; j++)
        for (int64_t i = 0; i < r; i++)
            dst[i * si + j * sj] = cg_elem_get(t->dtype, p + (size_t)(off + i * rs + j * cs) * es);
}

void cg_la_put(float *dst, const double *src, int64_t r, int64_t c, int64_t ld, bool trans)
{
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) {
            const float v = (float)src[i + j * ld];
            if (trans)
                dst[j * r + i] = v;
            else
                dst[i * c + j] = v;
        }
}

bool cg_la_all_zero(const double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0.0)
            return false;
    return true;
}

typedef struct {
    cg_la_item_fn item;
    void *ctx;
    double *work;
    CG_LA_INT *iwork;
    int64_t wsize, iwsize;
    int *info;
} la_run;

static void la_chunk(int64_t b0, int64_t b1, int thread, const void *ctx)
{
    const la_run *r = ctx;
    for (int64_t b = b0; b < b1; b++)
        r->info[b] = r->item(r->ctx, b, r->work + thread * r->wsize, r->iwork + thread * r->iwsize);
}

bool cg_la_batch(const char *op, int64_t batch, double flops, int64_t wsize, int64_t iwsize,
                 cg_la_item_fn item, void *ctx, int64_t *bad, int *info)
{
    *bad = -1;
    *info = 0;
    if (batch <= 0)
        return true;
    if (!cg_lapack(op))
        return false;
    int nt = cg_shares_team(batch > 1 && flops * (double)batch > LA_PAR_FLOPS);
    if (nt > batch)
        nt = (int)batch;
    la_run r = {item, ctx, NULL, NULL, wsize, iwsize, NULL};
    r.work = malloc(sizeof(double) * (size_t)(nt * wsize + 1));
    r.iwork = malloc(sizeof(CG_LA_INT) * (size_t)(nt * iwsize + 1));
    r.info = malloc(sizeof(int) * (size_t)batch);
    if (!r.work || !r.iwork || !r.info) {
        free(r.work), free(r.iwork), free(r.info);
        cg_set_error("%s: out of memory (LAPACK's workspace)", op);
        return false;
    }
    /* one thread per matrix: a LAPACK that threads itself (OpenBLAS)
     * takes OpenMP's count outside a parallel region, one inside */
    const int outer = omp_get_max_threads();
    const bool one = nt <= 1 && !omp_in_parallel() && outer > 1;
    if (one)
        omp_set_num_threads(1);
    cg_shares_run(batch, 1, nt, la_chunk, &r);
    if (one)
        omp_set_num_threads(outer);
    for (int64_t b = 0; b < batch; b++)
        if (r.info[b]) {
            *bad = b;
            *info = r.info[b];
            break;
        }
    free(r.work), free(r.iwork), free(r.info);
    return true;
}

bool cg_k_linalg_check(const char *op, const char *arg, const cg_tensor *t, bool square)
{
    if (!t)
        return cg_error_null_input(op);
    if (!cg_dtype_is_float(t->dtype)) {
        cg_set_error("%s: Expected a floating point tensor as input. Got %s", op,
                     cg_dtype_name(t->dtype));
        return false;
    }
    if (t->dtype != CG_F32) {
        cg_set_error("%s: %s is %s; PyTorch 1.13's CPU linear algebra has no %s (convert to "
                     "float32)",
                     op, arg, cg_dtype_name(t->dtype), cg_dtype_name(t->dtype));
        return false;
    }
    if (t->ndim < 2) {
        cg_set_error("%s: The input tensor %s must have at least 2 dimensions.", op, arg);
        return false;
    }
    const int64_t m = t->shape[t->ndim - 2], n = t->shape[t->ndim - 1];
    if (square && m != n) {
        cg_set_error("%s: %s must be batches of square matrices, but they are %lld by %lld "
                     "matrices",
                     op, arg, (long long)m, (long long)n);
        return false;
    }
    if (n > INT_MAX || m > INT_MAX / (n > 0 ? n : 1)) {
        cg_set_error("%s: %s's %lld x %lld matrices are beyond LAPACK's 32-bit indices", op, arg,
                     (long long)m, (long long)n);
        return false;
    }
    return true;
}

const char *cg_la_batch_prefix(int nb, int64_t b, char *buf, size_t n)
{
    if (nb > 0)
        snprintf(buf, n, "(Batch element %lld): ", (long long)b);
    else if (n)
        buf[0] = 0;
    return buf;
}

/* ------------------------------------------- products and triangles */
void cg_la_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    for (int64_t j = 0; j < n; j++) {
        double *cj = c + j * ldc;
        for (int64_t i = 0; i < m; i++)
            cj[i] = beta == 0.0 ? 0.0 : beta * cj[i];
        for (int64_t p = 0; p < k; p++) {
            const double bpj = alpha * (tb ? b[j + p * ldb] : b[p + j * ldb]);
            if (!ta) { /* column p of A, contiguous */
                const double *ap = a + p * lda;
                for (int64_t i = 0; i < m; i++)
                    cj[i] += ap[i] * bpj;
            } else {
                for (int64_t i = 0; i < m; i++)
                    cj[i] += a[p + i * lda] * bpj;
            }
        }
    }
}

/* op(A) x = x in place, A n x n triangular, x of stride inc */
static void tri_vec(int64_t n, const double *a, int64_t lda, bool upper, bool trans, double *x,
                    int64_t inc)
{
    /* op(A) is upper when A is upper and not transposed, or lower and transposed */
    const bool up = upper != trans;
#define OPA(i, j) (trans ? a[(j) + (i)*lda] : a[(i) + (j)*lda])
    if (up)
        for (int64_t i = n - 1; i >= 0; i--) {
            double s = x[i * inc];
            for (int64_t j = i + 1; j < n; j++)
                s -= OPA(i, j) * x[j * inc];
            x[i * inc] = s / OPA(i, i);
        }
    else
        for (int64_t i = 0; i < n; i++) {
            double s = x[i * inc];
            for (int64_t j = 0; j < i; j++)
                s -= OPA(i, j) * x[j * inc];
            x[i * inc] = s / OPA(i, i);
        }
#undef OPA
}

void cg_la_trsm(bool left, bool upper, bool trans, int64_t m, int64_t n, const double *a,
                int64_t lda, double *b, int64_t ldb)
{
    if (left) /* op(A) X = B, A m x m: each column */
        for (int64_t j = 0; j < n; j++)
            tri_vec(m, a, lda, upper, trans, b + j * ldb, 1);
    else /* X op(A) = B, A n x n: op(A)^T x = b for each row */
        for (int64_t i = 0; i < m; i++)
            tri_vec(n, a, lda, upper, !trans, b + i, ldb);
}
