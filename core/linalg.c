/* cgrad core: torch.linalg's LU and Cholesky ops through LAPACK (declared
 * in core/ops.h, "linear algebra"): solve, inv, det, slogdet, cholesky and
 * their backwards, and the backwards' dispatch (cg_k_linalg_backward).
 *
 * Each matrix is read into a column-major double array, factorised by
 * LAPACK in double (dgetrf, dpotrf), and its results rounded once to
 * float32. The backwards compute in double from the factors the forward
 * kept (cg_la) and round once. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/linalg_impl.h"

/* the identity (n x n, leading dim n) times s */
static void eye(double *x, int64_t n, double s)
{
    memset(x, 0, sizeof(double) * (size_t)(n * n));
    for (int64_t i = 0; i < n; i++)
        x[i + i * n] = s;
}

/* the sign of the permutation of dgetrf's pivots */
static double piv_sign(const CG_LA_INT *piv, int64_t n)
{
    double s = 1.0;
    for (int64_t i = 0; i < n; i++)
        if (piv[i] != i + 1)
            s = -s;
    return s;
}

/* ------------------------------------------------------------ solve */
typedef struct {
    const cg_tensor *A, *B, *g;
    int nb;
    int64_t n, k;
    double *lu, *x;
    CG_LA_INT *piv;
    float *out, *out2; /* the backward's gradients of B and A */
} solve_ctx;

/* matrix b of t's last two dims (r x c) into column-major dst */
static void get_batch(const cg_tensor *t, int nb, int64_t b, int64_t r, int64_t c, double *dst,
                      bool trans)
{
    const int nd = t->ndim;
    cg_la_get(t, cg_la_boff(t, nb, b), r, c, t->strides[nd - 2], t->strides[nd - 1], dst,
              trans ? c : r, trans);
}

static int solve_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)work, (void)iwork;
    const solve_ctx *c = p;
    const int64_t n = c->n, k = c->k;
    double *lu = c->lu + b * n * n, *x = c->x + b * n * k;
    CG_LA_INT *piv = c->piv + b * n, N = (CG_LA_INT)n, K = (CG_LA_INT)k, info = 0;
    get_batch(c->A, c->nb, b, n, n, lu, false);
    get_batch(c->B, c->nb, b, n, k, x, false);
    if (n == 0)
        return 0;
    dgetrf_(&N, &N, lu, &N, piv, &info);
    if (info == 0 && k > 0)
        dgetrs_("N", &N, &K, lu, &N, piv, x, &N, &info, 1);
    cg_la_put(c->out + b * n * k, x, n, k, n, false);
    return info;
}

cg_tensor *cg_k_linalg_solve(const cg_tensor *A, const cg_tensor *B, cg_la **keep)
{
    const char *op = "linalg.solve";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, true) || !cg_k_linalg_check(op, "B", B, false))
        return NULL;
    const int nb = A->ndim - 2;
    if (B->ndim != A->ndim || memcmp(A->shape, B->shape, sizeof(int64_t) * (size_t)nb) ||
        B->shape[nb] != A->shape[nb]) {
        char s1[96], s2[96];
        cg_set_error("%s: expected A [*, n, n] and B [*, n, k] of one batch, got %s and %s", op,
                     cg_shape_str(A, s1, sizeof s1), cg_shape_str(B, s2, sizeof s2));
        return NULL;
    }
    const int64_t n = A->shape[nb], k = B->shape[nb + 1], batch = cg_numel_shape(nb, A->shape);
    cg_la *la = cg_la_new(CG_LA_SOLVE, A, nb);
    cg_tensor *out = la ? cg_empty(B->ndim, B->shape) : NULL;
    solve_ctx c = {A, B, NULL, nb, n, k, NULL, NULL, NULL, NULL, NULL};
    c.lu = out ? cg_la_alloc(batch * n * n) : NULL;
    c.x = c.lu ? cg_la_alloc(batch * n * k) : NULL;
    c.piv = c.x ? malloc(sizeof(CG_LA_INT) * (size_t)(batch * n + 1)) : NULL;
    int64_t bad = -1;
    int info = 0;
    bool ok = c.piv != NULL;
    if (c.x && !c.piv)
        cg_set_error("%s: out of memory", op);
    if (ok) {
        c.out = cg_data(out);
        ok = cg_la_batch(op, batch, (double)n * n * (n + k), 0, 0, solve_item, &c, &bad, &info);
    }
    if (ok && bad >= 0) {
        char pre[48];
        cg_set_error("%s: %sThe solver failed because the input matrix is singular.", op,
                     cg_la_batch_prefix(nb, bad, pre, sizeof pre));
        ok = false;
    }
    if (ok && keep) {
        la->n = n, la->k = k;
        la->f[0] = c.lu, la->f[1] = c.x, la->piv = c.piv;
        *keep = la;
        return out;
    }
    free(c.lu), free(c.x), free(c.piv);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* gB = A^-T gX; gA = -gB X^T */
static int solve_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const solve_ctx *c = p;
    const int64_t n = c->n, k = c->k;
    const double *lu = c->lu + b * n * n, *x = c->x + b * n * k;
    const CG_LA_INT *piv = c->piv + b * n;
    CG_LA_INT N = (CG_LA_INT)n, K = (CG_LA_INT)k, info = 0;
    double *gb = work, *ga = work + n * k;
    get_batch(c->g, c->nb, b, n, k, gb, false);
    if (n > 0 && k > 0)
        dgetrs_("T", &N, &K, lu, &N, piv, gb, &N, &info, 1);
    if (c->out)
        cg_la_put(c->out + b * n * k, gb, n, k, n, false);
    if (c->out2) {
        cg_la_gemm(false, true, n, n, k, -1.0, gb, n, x, n, 0.0, ga, n);
        cg_la_put(c->out2 + b * n * n, ga, n, n, n, false);
    }
    return info;
}

static bool solve_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA, cg_tensor **gB)
{
    const int64_t n = la->n, k = la->k;
    int64_t sa[CG_MAX_DIMS], sb[CG_MAX_DIMS];
    memcpy(sa, la->bshape, sizeof(int64_t) * (size_t)la->nb);
    memcpy(sb, la->bshape, sizeof(int64_t) * (size_t)la->nb);
    sa[la->nb] = sa[la->nb + 1] = n;
    sb[la->nb] = n, sb[la->nb + 1] = k;
    cg_tensor *ta = gA ? cg_empty(la->nb + 2, sa) : NULL,
              *tb = gB ? cg_empty(la->nb + 2, sb) : NULL;
    if ((gA && !ta) || (gB && !tb)) {
        cg_release_all(2, ta, tb);
        return false;
    }
    solve_ctx c = {NULL,
                   NULL,
                   g,
                   la->nb,
                   n,
                   k,
                   la->f[0],
                   la->f[1],
                   la->piv,
                   tb ? cg_data(tb) : NULL,
                   ta ? cg_data(ta) : NULL};
    int64_t bad;
    int info;
    if (!cg_la_batch("linalg.solve backward", la->batch, (double)n * n * (n + k), n * k + n * n, 0,
                     solve_bw_item, &c, &bad, &info)) {
        cg_release_all(2, ta, tb);
        return false;
    }
    if (gA)
        *gA = ta;
    if (gB)
        *gB = tb;
    return true;
}

/* -------------------------------------------------------------- inv */
typedef struct {
    const cg_tensor *A, *g;
    int nb;
    int64_t n;
    double *keep; /* A^-1 for the backward, or NULL */
    float *out;
} inv_ctx;

static int inv_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const inv_ctx *c = p;
    const int64_t n = c->n;
    double *lu = work, *x = c->keep ? c->keep + b * n * n : work + n * n;
    CG_LA_INT N = (CG_LA_INT)n, info = 0;
    get_batch(c->A, c->nb, b, n, n, lu, false);
    if (n == 0)
        return 0;
    dgetrf_(&N, &N, lu, &N, iwork, &info);
    if (info)
        return info;
    eye(x, n, 1.0);
    dgetrs_("N", &N, &N, lu, &N, iwork, x, &N, &info, 1);
    cg_la_put(c->out + b * n * n, x, n, n, n, false);
    return info;
}

cg_tensor *cg_k_linalg_inv(const cg_tensor *A, cg_la **keep)
{
    const char *op = "linalg.inv";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, true))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t n = A->shape[nb], batch = cg_numel_shape(nb, A->shape);
    cg_la *la = cg_la_new(CG_LA_INV, A, nb);
    cg_tensor *out = la ? cg_empty(A->ndim, A->shape) : NULL;
    inv_ctx c = {A, NULL, nb, n, NULL, out ? cg_data(out) : NULL};
    bool ok = out && (!keep || (c.keep = cg_la_alloc(batch * n * n)));
    int64_t bad = -1;
    int info = 0;
    ok = ok && cg_la_batch(op, batch, 2.0 * n * n * n, 2 * n * n, n, inv_item, &c, &bad, &info);
    if (ok && bad >= 0) {
        char pre[48];
        cg_set_error("%s: %sThe diagonal element %d is zero, the inversion could not be "
                     "completed because the input matrix is singular.",
                     op, cg_la_batch_prefix(nb, bad, pre, sizeof pre), info);
        ok = false;
    }
    if (ok && keep) {
        la->n = n;
        la->f[0] = c.keep;
        *keep = la;
        return out;
    }
    free(c.keep);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* gA = -A^-T g A^-T */
static int inv_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const inv_ctx *c = p;
    const int64_t n = c->n;
    const double *ai = c->keep + b * n * n;
    double *g = work, *t = work + n * n;
    get_batch(c->g, c->nb, b, n, n, g, false);
    cg_la_gemm(false, true, n, n, n, 1.0, g, n, ai, n, 0.0, t, n);
    cg_la_gemm(true, false, n, n, n, -1.0, ai, n, t, n, 0.0, g, n);
    cg_la_put(c->out + b * n * n, g, n, n, n, false);
    return 0;
}

/* --------------------------------------------------- det and slogdet */
typedef struct {
    const cg_tensor *A, *g;
    int nb;
    int64_t n, batch;
    double *a, *lu, *det; /* kept: A (det), LU (slogdet); det */
    CG_LA_INT *piv;
    float *out;
    int64_t adj_work;
} det_ctx;

/* A's LU into lu (pivots piv): det, or its sign and log|det| */
static void lu_det(const det_ctx *c, int64_t b, double *lu, CG_LA_INT *piv, double *sign,
                   double *logabs, double *det)
{
    const int64_t n = c->n;
    CG_LA_INT N = (CG_LA_INT)n, info = 0;
    get_batch(c->A, c->nb, b, n, n, lu, false);
    if (n > 0)
        dgetrf_(&N, &N, lu, &N, piv, &info); /* info > 0: singular, det 0 */
    double s = piv_sign(piv, n), l = 0.0, d = s;
    for (int64_t i = 0; i < n; i++) {
        const double u = lu[i + i * n];
        d *= u;
        s *= u > 0 ? 1.0 : u < 0 ? -1.0 : 0.0; /* 0 for NaN too, as PyTorch's sign */
        l += log(fabs(u));
    }
    *sign = s, *logabs = l, *det = d;
}

static int det_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const det_ctx *c = p;
    const int64_t n = c->n;
    double s, l, d;
    lu_det(c, b, work, iwork, &s, &l, &d);
    if (c->a) {
        get_batch(c->A, c->nb, b, n, n, c->a + b * n * n, false);
        c->det[b] = d;
    }
    c->out[b] = (float)d;
    return 0;
}

static int slogdet_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const det_ctx *c = p;
    const int64_t n = c->n;
    double s, l, d;
    lu_det(c, b, c->lu ? c->lu + b * n * n : work, c->piv ? c->piv + b * n : iwork, &s, &l, &d);
    c->out[b] = (float)s;
    c->out[c->batch + b] = (float)l;
    return 0;
}

static cg_tensor *det_forward(const cg_tensor *A, bool log_form, cg_la **keep)
{
    const char *op = log_form ? "linalg.slogdet" : "linalg.det";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, true))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t n = A->shape[nb], batch = cg_numel_shape(nb, A->shape), nn = batch * n * n;
    cg_la *la = cg_la_new(log_form ? CG_LA_SLOGDET : CG_LA_DET, A, nb);
    cg_tensor *out = !la ? NULL : log_form ? cg_empty(CG_SHAPE(2 * batch)) : cg_empty(nb, A->shape);
    det_ctx c = {A, NULL, nb, n, batch, NULL, NULL, NULL, NULL, out ? cg_data(out) : NULL, 0};
    bool ok = out != NULL;
    if (ok && keep && !log_form)
        ok = (c.a = cg_la_alloc(nn)) && (c.det = cg_la_alloc(batch));
    if (ok && keep && log_form) {
        ok = (c.lu = cg_la_alloc(nn)) != NULL;
        if (ok && !(c.piv = malloc(sizeof(CG_LA_INT) * (size_t)(batch * n + 1)))) {
            cg_set_error("%s: out of memory", op);
            ok = false;
        }
    }
    int64_t bad;
    int info;
    ok = ok && cg_la_batch(op, batch, (double)n * n * n, n * n, n,
                           log_form ? slogdet_item : det_item, &c, &bad, &info);
    if (ok && keep) {
        la->n = n;
        la->f[0] = log_form ? c.lu : c.a;
        la->d = c.det, la->piv = c.piv;
        *keep = la;
        return out;
    }
    free(c.a), free(c.lu), free(c.det), free(c.piv);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_k_linalg_det(const cg_tensor *A, cg_la **keep) { return det_forward(A, false, keep); }
cg_tensor *cg_k_linalg_slogdet(const cg_tensor *A, cg_la **keep)
{
    return det_forward(A, true, keep);
}

/* element b of a gradient of nb batch dims, or of a packed 1-d one at
 * flat index b */
static double g_at(const cg_tensor *g, int nb, int64_t b, bool flat)
{
    const int64_t off = flat ? g->offset + b * g->strides[0] : cg_la_boff(g, nb, b);
    double v;
    cg_la_get(g, off, 1, 1, 0, 0, &v, 1, false);
    return v;
}

/* det: g det A^-T, or g adj(A)^T through the SVD where |det| < 100 eps
 * (float32's), as PyTorch's linalg_det_backward: exact at a singular A */
static int det_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const det_ctx *c = p;
    const int64_t n = c->n;
    const double gb = g_at(c->g, c->nb, b, false), det = c->det[b];
    double *ga = work, *a = work + n * n;
    int info = 0;
    if (gb == 0.0 || n == 0)
        memset(ga, 0, sizeof(double) * (size_t)(n * n));
    else if (fabs(det) >= 100.0 * FLT_EPSILON) {
        CG_LA_INT N = (CG_LA_INT)n;
        memcpy(a, c->a + b * n * n, sizeof(double) * (size_t)(n * n));
        dgetrf_(&N, &N, a, &N, iwork, &info);
        eye(ga, n, gb * det);
        if (!info)
            dgetrs_("T", &N, &N, a, &N, iwork, ga, &N, &info, 1);
    } else {
        memcpy(a, c->a + b * n * n, sizeof(double) * (size_t)(n * n));
        info = cg_la_adjugate_t(n, a, gb, ga, work + 2 * n * n, iwork);
    }
    cg_la_put(c->out + b * n * n, ga, n, n, n, false);
    return info;
}

/* slogdet: g_logabsdet A^-T (the sign's gradient is 0: a real sign is
 * locally constant); a singular A gives inf and NaN, as PyTorch's */
static int slogdet_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const det_ctx *c = p;
    const int64_t n = c->n;
    const double gl = g_at(c->g, 0, c->batch + b, true);
    CG_LA_INT N = (CG_LA_INT)n, info = 0;
    eye(work, n, gl);
    if (gl != 0.0 && n > 0)
        dgetrs_("T", &N, &N, c->lu + b * n * n, &N, c->piv + b * n, work, &N, &info, 1);
    cg_la_put(c->out + b * n * n, work, n, n, n, false);
    return info;
}

/* --------------------------------------------------------- cholesky */
typedef struct {
    const cg_tensor *A, *g;
    int nb;
    int64_t n;
    bool upper;
    double *keep; /* L (lower) for the backward */
    float *out;
} chol_ctx;

static int chol_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const chol_ctx *c = p;
    const int64_t n = c->n;
    double *l = work;
    CG_LA_INT N = (CG_LA_INT)n, info = 0;
    get_batch(c->A, c->nb, b, n, n, l, false);
    bool nan = false; /* in the triangle read: L's triangle all NaN */
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = c->upper ? 0 : j; i < (c->upper ? j + 1 : n); i++)
            nan = nan || isnan(l[i + j * n]);
    if (!nan && n > 0)
        dpotrf_(c->upper ? "U" : "L", &N, l, &N, &info, 1);
    if (info)
        return info;
    for (int64_t j = 0; j < n; j++) /* the other triangle 0; the factor as L */
        for (int64_t i = 0; i < n; i++) {
            const bool keep = c->upper ? i <= j : i >= j;
            l[i + j * n] = !keep ? 0.0 : nan ? NAN : l[i + j * n];
        }
    cg_la_put(c->out + b * n * n, l, n, n, n, false);
    if (c->keep) /* U^T when upper */
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < n; i++)
                c->keep[b * n * n + i + j * n] = c->upper ? l[j + i * n] : l[i + j * n];
    return 0;
}

cg_tensor *cg_k_linalg_cholesky(const cg_tensor *A, bool upper, cg_la **keep)
{
    const char *op = "linalg.cholesky";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, true))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t n = A->shape[nb], batch = cg_numel_shape(nb, A->shape);
    cg_la *la = cg_la_new(CG_LA_CHOLESKY, A, nb);
    cg_tensor *out = la ? cg_empty(A->ndim, A->shape) : NULL;
    chol_ctx c = {A, NULL, nb, n, upper, NULL, out ? cg_data(out) : NULL};
    bool ok = out && (!keep || (c.keep = cg_la_alloc(batch * n * n)));
    int64_t bad = -1;
    int info = 0;
    ok = ok && cg_la_batch(op, batch, (double)n * n * n / 3, n * n, 0, chol_item, &c, &bad, &info);
    if (ok && bad >= 0) {
        char pre[48];
        cg_set_error("%s: %sThe factorization could not be completed because the input is not "
                     "positive-definite (the leading minor of order %d is not positive-definite).",
                     op, cg_la_batch_prefix(nb, bad, pre, sizeof pre), info);
        ok = false;
    }
    if (ok && keep) {
        la->n = n;
        la->flags = upper ? CG_LA_UPPER : 0;
        la->f[0] = c.keep;
        *keep = la;
        return out;
    }
    free(c.keep);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* PyTorch's cholesky_backward: gA = L^-T Phi(L^T gL) L^-1, Phi the lower
 * triangle of its argument made symmetric, halved (upper: L = U^T, gL =
 * gU^T) */
static int chol_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const chol_ctx *c = p;
    const int64_t n = c->n;
    const double *l = c->keep + b * n * n;
    double *gl = work, *s = work + n * n;
    get_batch(c->g, c->nb, b, n, n, gl, c->upper);
    cg_la_gemm(true, false, n, n, n, 1.0, l, n, gl, n, 0.0, s, n);
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i <= j; i++) { /* (i, j) upper from (j, i) lower */
            const double v = 0.5 * s[j + i * n];
            s[j + i * n] = v;
            s[i + j * n] = v;
        }
    cg_la_trsm(true, false, true, n, n, l, n, s, n);
    cg_la_trsm(false, false, false, n, n, l, n, s, n);
    cg_la_put(c->out + b * n * n, s, n, n, n, false);
    return 0;
}

/* ---------------------------------------------------------- backward */
/* the gradient of the input (batch + [m, n]), float32 */
static cg_tensor *grad_like(const cg_la *la, int64_t m, int64_t n)
{
    int64_t s[CG_MAX_DIMS];
    memcpy(s, la->bshape, sizeof(int64_t) * (size_t)la->nb);
    s[la->nb] = m, s[la->nb + 1] = n;
    return cg_empty(la->nb + 2, s);
}

static bool one_input(const cg_la *la, const cg_tensor *g, cg_tensor **gA)
{
    const int64_t n = la->n, nn = n * n;
    cg_tensor *t = grad_like(la, n, n);
    if (!t)
        return false;
    cg_la_item_fn fn = NULL;
    void *ctx = NULL;
    int64_t ws = 2 * nn, iws = n;
    inv_ctx ic = {NULL, g, la->nb, n, la->f[0], cg_data(t)};
    det_ctx dc = {NULL, g, la->nb, n, la->batch, la->f[0], la->f[0], la->d, la->piv, cg_data(t), 0};
    chol_ctx cc = {NULL, g, la->nb, n, la->flags & CG_LA_UPPER, la->f[0], cg_data(t)};
    switch (la->kind) {
    case CG_LA_INV: fn = inv_bw_item, ctx = &ic; break;
    case CG_LA_DET:
        fn = det_bw_item, ctx = &dc;
        ws = 2 * nn + cg_la_adj_work(n), iws = 9 * n + 1;
        break;
    case CG_LA_SLOGDET: fn = slogdet_bw_item, ctx = &dc; break;
    default: fn = chol_bw_item, ctx = &cc; break;
    }
    int64_t bad;
    int info;
    if (ws < 0 ||
        !cg_la_batch("linalg backward", la->batch, 4.0 * n * nn, ws, iws, fn, ctx, &bad, &info)) {
        cg_release(t);
        return false;
    }
    if (bad >= 0 && la->kind == CG_LA_DET) {
        cg_set_error("linalg.det backward: the SVD of matrix %lld did not converge (error code: "
                     "%d)",
                     (long long)bad, info);
        cg_release(t);
        return false;
    }
    *gA = t;
    return true;
}

bool cg_k_linalg_backward(const cg_la *la, const cg_tensor *g, cg_tensor **g0, cg_tensor **g1)
{
    if (!la || !g)
        return cg_error_null_input("linalg backward");
    if (la->nograd) {
        cg_set_error("%s", la->nograd);
        return false;
    }
    if (!g0 && !g1)
        return true;
    switch (la->kind) {
    case CG_LA_SOLVE: return solve_backward(la, g, g0, g1);
    case CG_LA_INV:
    case CG_LA_DET:
    case CG_LA_SLOGDET:
    case CG_LA_CHOLESKY: return !g0 || one_input(la, g, g0);
    case CG_LA_QR: return !g0 || cg_la_qr_backward(la, g, g0);
    case CG_LA_EIGH:
    case CG_LA_EIGVALSH: return !g0 || cg_la_eigh_backward(la, g, g0);
    case CG_LA_SVD:
    case CG_LA_SVDVALS: return !g0 || cg_la_svd_backward(la, g, g0);
    case CG_LA_PINV:
    case CG_LA_LSTSQ: return cg_la_pinv_backward(la, g, g0, g1);
    }
    cg_set_error("linalg backward: unknown kind %d", (int)la->kind);
    return false;
}
