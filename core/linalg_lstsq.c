/* cgrad core: torch.linalg.pinv (through the SVD, dgesdd) and
 * torch.linalg.lstsq (dgelsy, PyTorch's CPU default driver), and their
 * backwards: PyTorch 1.13's pinv_backward, and linalg_lstsq_backward,
 * which is pinv's (declared in core/ops.h, "linear algebra"). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/linalg_impl.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t query(double w) { return w > 1.0 ? (int64_t)w + 1 : 1; }

/* gesdd's workspace for an m x n matrix (jobz 'S') */
static int64_t svd_lwork(int64_t m, int64_t n)
{
    double w = 0.0, d = 0.0;
    CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, LD = (CG_LA_INT)max64(m, 1),
              LV = (CG_LA_INT)max64(min64(m, n), 1), LW = -1, info = 0, iw = 0;
    if (m > 0 && n > 0)
        dgesdd_("S", &M, &N, &d, &LD, &d, &d, &LD, &d, &LV, &w, &LW, &iw, &info, 1);
    return query(w);
}

/* pinv_ws(m, n, lwork) doubles: what pinv_of needs */
static int64_t pinv_ws(int64_t m, int64_t n, int64_t lwork)
{
    const int64_t k = min64(m, n);
    return max64(m, 1) * n + k + 1 + max64(m, 1) * k + max64(k, 1) * n + lwork;
}

/* P = pinv(a) (n x m) of the column-major m x n a (destroyed): V
 * diag(1 / s) U^T over the singular values s > max(atol, rtol s_max), as
 * PyTorch's linalg_pinv. 0, LAPACK's info, or -1000 for a NaN in a (an
 * infinity gives a P of NaN). */
static int pinv_of(int64_t m, int64_t n, double *a, double atol, double rtol, double *p,
                   double *work, int64_t lwork, CG_LA_INT *iwork)
{
    const int64_t k = min64(m, n), ld = max64(m, 1);
    double *s = work, *u = s + k + 1, *vt = u + ld * k, *w = vt + max64(k, 1) * n;
    bool nan = false, inf = false;
    for (int64_t i = 0; i < m * n; i++)
        nan = nan || isnan(a[i]), inf = inf || isinf(a[i]);
    if (nan)
        return -1000;
    CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, LD = (CG_LA_INT)ld, LV = (CG_LA_INT)max64(k, 1),
              LW = (CG_LA_INT)lwork, info = 0;
    if (k > 0 && !inf)
        dgesdd_("S", &M, &N, a, &LD, s, u, &LD, vt, &LV, w, &LW, iwork, &info, 1);
    if (info)
        return info;
    const double tol = k > 0 ? fmax(atol, rtol * s[0]) : 0.0;
    for (int64_t j = 0; j < k; j++) {
        const double r = inf ? NAN : s[j] > tol ? 1.0 / s[j] : 0.0;
        for (int64_t i = 0; i < m; i++)
            u[i + j * ld] = inf ? NAN : u[i + j * ld] * r;
    }
    cg_la_gemm(true, true, n, m, k, 1.0, vt, max64(k, 1), u, ld, 0.0, p, max64(n, 1));
    return 0;
}

typedef struct {
    const cg_tensor *A, *B, *g;
    int nb;
    int64_t batch, m, n, k, lwork;
    double atol, rtol;
    double *a, *b, *p; /* kept: A (m x n), B (m x k, lstsq), pinv(A) (n x m, pinv) */
    float *out, *out2;
} ls_ctx;

static void get_mat(const cg_tensor *t, int nb, int64_t b, int64_t r, int64_t c, double *dst)
{
    const int nd = t->ndim;
    cg_la_get(t, cg_la_boff(t, nb, b), r, c, t->strides[nd - 2], t->strides[nd - 1], dst,
              max64(r, 1), false);
}

static int pinv_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const ls_ctx *c = p;
    const int64_t m = c->m, n = c->n;
    double *a = work, *pi = a + m * n, *w = pi + n * m;
    get_mat(c->A, c->nb, b, m, n, a);
    if (c->a)
        memcpy(c->a + b * m * n, a, sizeof(double) * (size_t)(m * n));
    const int info = pinv_of(m, n, a, c->atol, c->rtol, pi, w, c->lwork, iwork);
    if (info)
        return info;
    cg_la_put(c->out + b * n * m, pi, n, m, max64(n, 1), false);
    if (c->p)
        memcpy(c->p + b * n * m, pi, sizeof(double) * (size_t)(n * m));
    return 0;
}

static bool svd_refusal(const char *op, int nb, int64_t bad, int info)
{
    char pre[48];
    cg_la_batch_prefix(nb, bad, pre, sizeof pre);
    if (info == -1000)
        cg_set_error("%s: %sThe algorithm failed to converge because the input matrix contained "
                     "non-finite values.",
                     op, pre);
    else
        cg_set_error("%s: %sThe algorithm failed to converge (LAPACK's error code: %d).", op, pre,
                     info);
    return false;
}

cg_tensor *cg_k_linalg_pinv(const cg_tensor *A, double atol, double rtol, cg_la **keep)
{
    const char *op = "linalg.pinv";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, false))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t m = A->shape[nb], n = A->shape[nb + 1];
    /* PyTorch's defaults: both unset, rtol = eps max(m, n); only atol > 0 set, rtol = 0 */
    const bool has_atol = atol >= 0.0, has_rtol = rtol >= 0.0;
    if (!has_rtol)
        rtol = has_atol && atol > 0.0 ? 0.0 : FLT_EPSILON * (double)max64(m, n);
    if (!has_atol)
        atol = 0.0;
    ls_ctx c = {A,
                NULL,
                NULL,
                nb,
                cg_numel_shape(nb, A->shape),
                m,
                n,
                0,
                svd_lwork(m, n),
                atol,
                rtol,
                NULL,
                NULL,
                NULL,
                NULL,
                NULL};
    cg_la *la = cg_la_new(CG_LA_PINV, A, nb);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, A->shape, sizeof(int64_t) * (size_t)nb);
    shape[nb] = n, shape[nb + 1] = m;
    cg_tensor *out = la ? cg_empty(nb + 2, shape) : NULL;
    bool ok =
        out &&
        (!keep || ((c.a = cg_la_alloc(c.batch * m * n)) && (c.p = cg_la_alloc(c.batch * n * m))));
    c.out = out ? cg_data(out) : NULL;
    int64_t bad;
    int info;
    ok = ok &&
         cg_la_batch(op, c.batch, 12.0 * m * n * min64(m, n), 2 * m * n + pinv_ws(m, n, c.lwork),
                     8 * min64(m, n) + 1, pinv_item, &c, &bad, &info);
    if (ok && bad >= 0)
        ok = svd_refusal(op, nb, bad, info);
    if (ok && keep) {
        la->m = m, la->n = n;
        la->f[0] = c.a, la->f[2] = c.p;
        *keep = la;
        return out;
    }
    free(c.a), free(c.p);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ----------------------------------------------------------- lstsq */
static int lstsq_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const ls_ctx *c = p;
    const int64_t m = c->m, n = c->n, k = c->k, ldb = max64(max64(m, n), 1);
    double *a = work, *x = a + max64(m, 1) * n, *w = x + ldb * k;
    get_mat(c->A, c->nb, b, m, n, a);
    memset(x, 0, sizeof(double) * (size_t)(ldb * k));
    const int nd = c->B->ndim;
    cg_la_get(c->B, cg_la_boff(c->B, c->nb, b), m, k, c->B->strides[nd - 2], c->B->strides[nd - 1],
              x, ldb, false);
    if (c->a) {
        memcpy(c->a + b * m * n, a, sizeof(double) * (size_t)(m * n));
        for (int64_t j = 0; j < k; j++)
            memcpy(c->b + b * m * k + j * m, x + j * ldb, sizeof(double) * (size_t)m);
    }
    bool nan = false;
    for (int64_t i = 0; i < m * n; i++)
        nan = nan || isnan(a[i]);
    CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, K = (CG_LA_INT)k, LD = (CG_LA_INT)max64(m, 1),
              LB = (CG_LA_INT)ldb, LW = (CG_LA_INT)c->lwork, rank = 0, info = 0;
    for (int64_t j = 0; j < n; j++)
        iwork[j] = 0;
    if (nan) /* no factorisation of NaN: the solution NaN */
        for (int64_t i = 0; i < ldb * k; i++)
            x[i] = NAN;
    else if (m > 0 && n > 0 && k > 0)
        dgelsy_(&M, &N, &K, a, &LD, x, &LB, iwork, &c->rtol, &rank, w, &LW, &info);
    else /* an empty A: the minimum-norm solution 0 */
        memset(x, 0, sizeof(double) * (size_t)(ldb * k));
    cg_la_put(c->out + b * n * k, x, n, k, ldb, false);
    return info;
}

cg_tensor *cg_k_linalg_lstsq(const cg_tensor *A, const cg_tensor *B, double rcond, cg_la **keep)
{
    const char *op = "linalg.lstsq";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, false) || !cg_k_linalg_check(op, "B", B, false))
        return NULL;
    const int nb = A->ndim - 2;
    if (B->ndim != A->ndim || memcmp(A->shape, B->shape, sizeof(int64_t) * (size_t)nb) ||
        B->shape[nb] != A->shape[nb]) {
        char s1[96], s2[96];
        cg_set_error("%s: expected A [*, m, n] and B [*, m, k] of one batch, got %s and %s", op,
                     cg_shape_str(A, s1, sizeof s1), cg_shape_str(B, s2, sizeof s2));
        return NULL;
    }
    const int64_t m = A->shape[nb], n = A->shape[nb + 1], k = B->shape[nb + 1];
    if (!(rcond >= 0.0)) /* PyTorch's default: eps of float32 times max(m, n) */
        rcond = FLT_EPSILON * (double)max64(m, n);
    ls_ctx c = {A,    B,    NULL, nb,  cg_numel_shape(nb, A->shape), m, n, k, 1, 0.0, rcond, NULL,
                NULL, NULL, NULL, NULL};
    const int64_t ldb = max64(max64(m, n), 1);
    if (m > 0 && n > 0 && k > 0) {
        CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, K = (CG_LA_INT)k, LD = (CG_LA_INT)m,
                  LB = (CG_LA_INT)ldb, LW = -1, rank = 0, info = 0, jp = 0;
        double w = 0.0, d = 0.0;
        dgelsy_(&M, &N, &K, &d, &LD, &d, &LB, &jp, &rcond, &rank, &w, &LW, &info);
        c.lwork = query(w);
    }
    cg_la *la = cg_la_new(CG_LA_LSTSQ, A, nb);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, A->shape, sizeof(int64_t) * (size_t)nb);
    shape[nb] = n, shape[nb + 1] = k;
    cg_tensor *out = la ? cg_empty(nb + 2, shape) : NULL;
    bool ok =
        out &&
        (!keep || ((c.a = cg_la_alloc(c.batch * m * n)) && (c.b = cg_la_alloc(c.batch * m * k))));
    c.out = out ? cg_data(out) : NULL;
    int64_t bad;
    int info;
    ok = ok && cg_la_batch(op, c.batch, 4.0 * m * n * (n + k), max64(m, 1) * n + ldb * k + c.lwork,
                           n + 1, lstsq_item, &c, &bad, &info);
    if (ok && bad >= 0) {
        cg_set_error("%s: LAPACK's dgelsy failed (error code: %d)", op, info);
        ok = false;
    }
    if (ok && keep) {
        la->m = m, la->n = n, la->k = k;
        la->f[0] = c.a, la->f[1] = c.b;
        *keep = la;
        return out;
    }
    free(c.a), free(c.b);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ------------------------------------------------------- backwards */
/* PyTorch's pinv_backward: the gradient of pinv at the m x n a, p =
 * pinv(a) (n x m), from the n x m gradient g; into ga (m x n). work: 4
 * max(m, n)^2 doubles. */
static void pinv_bw(int64_t m, int64_t n, const double *a, const double *p, const double *g,
                    double *ga, double *work)
{
    const int64_t big = max64(max64(m, n), 1), lm = max64(m, 1), ln = max64(n, 1);
    double *k = work, *t = k + big * big, *r = t + big * big, *q = r + big * big;
    for (int64_t j = 0; j < n; j++) /* r = g^T (m x n) */
        for (int64_t i = 0; i < m; i++)
            r[i + j * lm] = g[j + i * ln];
    if (m <= n) {
        cg_la_gemm(true, false, m, m, n, 1.0, g, ln, p, ln, 0.0, k, lm);  /* K = g^T p */
        cg_la_gemm(false, true, m, n, m, 1.0, k, lm, p, ln, 0.0, t, lm);  /* K p^T */
        cg_la_gemm(true, true, m, n, m, -1.0, k, lm, p, ln, 0.0, ga, lm); /* -(p K)^T */
        for (int64_t i = 0; i < m * n; i++)
            ga[i] += t[i];
        cg_la_gemm(false, false, m, m, n, 1.0, a, lm, p, ln, 0.0, q, lm);   /* a p */
        cg_la_gemm(false, false, m, n, m, -1.0, q, lm, t, lm, 1.0, ga, lm); /* - a p K p^T */
        cg_la_gemm(false, false, m, n, m, -1.0, k, lm, a, lm, 1.0, r, lm);  /* g^T - K a */
        cg_la_gemm(true, false, m, m, n, 1.0, p, ln, p, ln, 0.0, q, lm);    /* p^T p */
        cg_la_gemm(false, false, m, n, m, 1.0, q, lm, r, lm, 1.0, ga, lm);
    } else {
        cg_la_gemm(false, true, n, n, m, 1.0, p, ln, g, ln, 0.0, k, ln);   /* K = p g^T */
        cg_la_gemm(true, false, m, n, n, 1.0, p, ln, k, ln, 0.0, t, lm);   /* p^T K */
        cg_la_gemm(true, true, m, n, n, -1.0, p, ln, k, ln, 0.0, ga, lm);  /* -(K p)^T */
        cg_la_gemm(false, false, m, n, n, -1.0, a, lm, k, ln, 1.0, r, lm); /* g^T - a K */
        cg_la_gemm(false, false, m, m, n, 1.0, r, lm, p, ln, 0.0, q, lm);  /* (..) p */
        cg_la_gemm(false, true, m, n, m, 1.0, q, lm, p, ln, 1.0, ga, lm);  /* (..) p p^T */
        for (int64_t i = 0; i < m * n; i++)
            ga[i] += t[i];
        cg_la_gemm(false, false, m, m, n, 1.0, t, lm, p, ln, 0.0, q, lm);   /* p^T K p */
        cg_la_gemm(false, false, m, n, m, -1.0, q, lm, a, lm, 1.0, ga, lm); /* - .. a */
    }
}

static int pinv_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const ls_ctx *c = p;
    const int64_t m = c->m, n = c->n;
    double *g = work, *ga = g + n * m, *w = ga + m * n;
    const int nd = c->g->ndim;
    cg_la_get(c->g, cg_la_boff(c->g, c->nb, b), n, m, c->g->strides[nd - 2], c->g->strides[nd - 1],
              g, max64(n, 1), false);
    pinv_bw(m, n, c->a + b * m * n, c->p + b * n * m, g, ga, w);
    cg_la_put(c->out + b * m * n, ga, m, n, max64(m, 1), false);
    return 0;
}

/* lstsq: P = pinv(A) (PyTorch's default tolerance); gB = P^T gX, gA =
 * pinv_backward(gX B^T) */
static int lstsq_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const ls_ctx *c = p;
    const int64_t m = c->m, n = c->n, k = c->k;
    double *gx = work, *pi = gx + n * k, *a = pi + n * m, *gg = a + m * n;
    double *ga = gg + max64(n * m, m * k), *w = ga + m * n;
    const int nd = c->g->ndim;
    cg_la_get(c->g, cg_la_boff(c->g, c->nb, b), n, k, c->g->strides[nd - 2], c->g->strides[nd - 1],
              gx, max64(n, 1), false);
    memcpy(a, c->a + b * m * n, sizeof(double) * (size_t)(m * n));
    const int info =
        pinv_of(m, n, a, 0.0, FLT_EPSILON * (double)max64(m, n), pi, w, c->lwork, iwork);
    if (info)
        return info;
    if (c->out2) { /* gB (m x k) */
        cg_la_gemm(true, false, m, k, n, 1.0, pi, max64(n, 1), gx, max64(n, 1), 0.0, gg,
                   max64(m, 1));
        cg_la_put(c->out2 + b * m * k, gg, m, k, max64(m, 1), false);
    }
    if (c->out) {
        cg_la_gemm(false, true, n, m, k, 1.0, gx, max64(n, 1), c->b + b * m * k, max64(m, 1), 0.0,
                   gg, max64(n, 1));
        pinv_bw(m, n, c->a + b * m * n, pi, gg, ga, w);
        cg_la_put(c->out + b * m * n, ga, m, n, max64(m, 1), false);
    }
    return 0;
}

bool cg_la_pinv_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA, cg_tensor **gB)
{
    const int64_t m = la->m, n = la->n, k = la->k, big = max64(max64(m, n), 1);
    int64_t sa[CG_MAX_DIMS], sb[CG_MAX_DIMS];
    memcpy(sa, la->bshape, sizeof(int64_t) * (size_t)la->nb);
    memcpy(sb, la->bshape, sizeof(int64_t) * (size_t)la->nb);
    sa[la->nb] = m, sa[la->nb + 1] = n;
    sb[la->nb] = m, sb[la->nb + 1] = k;
    const bool lstsq = la->kind == CG_LA_LSTSQ;
    cg_tensor *ta = gA ? cg_empty(la->nb + 2, sa) : NULL;
    cg_tensor *tb = gB && lstsq ? cg_empty(la->nb + 2, sb) : NULL;
    if ((gA && !ta) || (gB && lstsq && !tb)) {
        cg_release_all(2, ta, tb);
        return false;
    }
    ls_ctx c = {NULL,
                NULL,
                g,
                la->nb,
                la->batch,
                m,
                n,
                k,
                svd_lwork(m, n),
                0.0,
                0.0,
                la->f[0],
                la->f[1],
                la->f[2],
                ta ? cg_data(ta) : NULL,
                tb ? cg_data(tb) : NULL};
    const int64_t ws =
        n * k + 3 * n * m + max64(n * m, m * k) + max64(4 * big * big, pinv_ws(m, n, c.lwork));
    int64_t bad;
    int info;
    if (!cg_la_batch(lstsq ? "linalg.lstsq backward" : "linalg.pinv backward", la->batch,
                     16.0 * big * big * big, ws, 8 * big + 1, lstsq ? lstsq_bw_item : pinv_bw_item,
                     &c, &bad, &info)) {
        cg_release_all(2, ta, tb);
        return false;
    }
    if (bad >= 0) {
        cg_release_all(2, ta, tb);
        return svd_refusal("linalg.lstsq backward", la->nb, bad, info);
    }
    if (gA)
        *gA = ta;
    if (gB)
        *gB = tb;
    return true;
}
