/* cgrad core: torch.linalg's decompositions through LAPACK (declared in
 * core/ops.h, "linear algebra"): QR (dgeqrf, dorgqr), the symmetric
 * eigendecomposition (dsyevd) and the SVD (dgesdd), and their backwards,
 * PyTorch 1.13's formulas (linalg_qr_backward, linalg_eig_backward with
 * is_hermitian, svd_backward) in double.
 *
 * Ops of several outputs return them packed in one 1-d float32 tensor,
 * block after block (each block the batch's matrices, row-major): QR [Q |
 * R], eigh [L | V], svd [U | S | Vh]; autograd's ops view the blocks. An
 * output that was not used has a gradient of zeros there, which the
 * backwards take as PyTorch's undefined gradient (eigh's shortcut when gV
 * is 0, svd's when gU and gVh are). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/linalg_impl.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the work LAPACK's query gives (lwork -1), at least 1 */
static int64_t query(double w) { return w > 1.0 ? (int64_t)w + 1 : 1; }

/* a packed block of g (1-d): r x c row-major from flat index at, rows r0
 * .. r0 + r - 1 and columns c0 .. c0 + c - 1 of a block rows x cols */
static void get_block(const cg_tensor *g, int64_t at, int64_t cols, int64_t r, int64_t c,
                      double *dst)
{
    const int64_t st = g->strides[0];
    cg_la_get(g, g->offset + at * st, r, c, cols * st, st, dst, r > 0 ? r : 1, false);
}

/* whether the triangle uplo of (or, tri false, all of) column-major a
 * (r x c) holds a NaN (nan) or an infinity (inf) */
static void scan(const double *a, int64_t r, int64_t c, int tri, bool *nan, bool *inf)
{
    *nan = *inf = false;
    for (int64_t j = 0; j < c; j++)
        for (int64_t i = tri < 0 ? j : 0; i < (tri > 0 ? j + 1 : r); i++) {
            *nan = *nan || isnan(a[i + j * r]);
            *inf = *inf || isinf(a[i + j * r]);
        }
}

/* identity r x c (column-major, leading dim ld) */
static void ident(double *x, int64_t r, int64_t c, int64_t ld)
{
    for (int64_t j = 0; j < c; j++)
        for (int64_t i = 0; i < r; i++)
            x[i + j * ld] = i == j;
}

/* ---------------------------------------------------------------- QR */
typedef struct {
    const cg_tensor *A, *g;
    int nb;
    int64_t batch, m, n, k, kq, kr, lwork; /* Q m x kq, R kr x n */
    cg_qr_mode mode;
    double *q, *r; /* kept: Q m x k, R k x n */
    float *out;
} qr_ctx;

static int qr_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const qr_ctx *c = p;
    const int64_t m = c->m, n = c->n, k = c->k, kq = c->kq, kr = c->kr, ld = max64(m, 1);
    double *a = work, *tau = a + ld * max64(n, m), *w = tau + k + 1, *x = w + c->lwork;
    CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, K = (CG_LA_INT)k, KQ = (CG_LA_INT)kq,
              LD = (CG_LA_INT)ld, LW = (CG_LA_INT)c->lwork, info = 0;
    const int nd = c->A->ndim;
    cg_la_get(c->A, cg_la_boff(c->A, c->nb, b), m, n, c->A->strides[nd - 2], c->A->strides[nd - 1],
              a, ld, false);
    if (k > 0)
        dgeqrf_(&M, &N, a, &LD, tau, w, &LW, &info);
    for (int64_t j = 0; j < n; j++) /* R: a's upper triangle, kr x n */
        for (int64_t i = 0; i < kr; i++)
            x[i + j * kr] = i <= j ? a[i + j * ld] : 0.0;
    float *outq = c->out, *outr = c->out + (c->mode == CG_QR_R ? 0 : c->batch * m * kq);
    cg_la_put(outr + b * kr * n, x, kr, n, kr, false);
    if (c->r) /* R's first k rows */
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < k; i++)
                c->r[b * k * n + i + j * k] = x[i + j * kr];
    if (c->mode == CG_QR_R)
        return info;
    if (m > 0 && kq > 0 && !info)
        dorgqr_(&M, &KQ, &K, a, &LD, tau, w, &LW, &info);
    cg_la_put(outq + b * m * kq, a, m, kq, ld, false);
    if (c->q)
        for (int64_t j = 0; j < k; j++)
            memcpy(c->q + b * m * k + j * m, a + j * ld, sizeof(double) * (size_t)m);
    return info;
}

cg_tensor *cg_k_linalg_qr(const cg_tensor *A, cg_qr_mode mode, cg_la **keep)
{
    const char *op = "linalg.qr";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, false))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t m = A->shape[nb], n = A->shape[nb + 1], k = min64(m, n);
    qr_ctx c = {A,    NULL, nb,  cg_numel_shape(nb, A->shape), m, n, k, 0, 0, 1, mode,
                NULL, NULL, NULL};
    c.kq = mode == CG_QR_COMPLETE ? m : mode == CG_QR_R ? 0 : k;
    c.kr = mode == CG_QR_COMPLETE ? m : k;
    { /* the workspace LAPACK asks for */
        CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, K = (CG_LA_INT)k, KQ = (CG_LA_INT)c.kq,
                  LD = (CG_LA_INT)max64(m, 1), LW = -1, info = 0;
        double w = 0.0, d = 0.0;
        if (k > 0)
            dgeqrf_(&M, &N, &d, &LD, &d, &w, &LW, &info);
        c.lwork = query(w);
        w = 0.0;
        if (m > 0 && c.kq > 0)
            dorgqr_(&M, &KQ, &K, &d, &LD, &d, &w, &LW, &info);
        c.lwork = max64(c.lwork, query(w));
    }
    const bool grad = keep && (mode == CG_QR_REDUCED || (mode == CG_QR_COMPLETE && m <= n));
    cg_la *la = cg_la_new(CG_LA_QR, A, nb);
    cg_tensor *out = la ? cg_empty(CG_SHAPE(c.batch * (m * c.kq + c.kr * n))) : NULL;
    bool ok = out != NULL;
    if (ok && grad)
        ok = (c.q = cg_la_alloc(c.batch * m * k)) && (c.r = cg_la_alloc(c.batch * k * n));
    c.out = out ? cg_data(out) : NULL;
    const int64_t ws = max64(m, 1) * max64(n, m) + k + 1 + c.lwork + c.kr * n;
    int64_t bad;
    int info;
    ok = ok && cg_la_batch(op, c.batch, 4.0 * m * n * k, ws, 0, qr_item, &c, &bad, &info);
    if (ok && keep) {
        la->m = m, la->n = n, la->k = k;
        la->flags = mode;
        la->f[0] = c.q, la->f[1] = c.r;
        if (mode == CG_QR_R)
            la->nograd = "linalg.qr: The derivative of linalg.qr depends on Q, which is not "
                         "computed when mode='r'. Please use linalg.qr(A, mode='reduced') if you "
                         "are going to differentiate through linalg.qr.";
        else if (!grad)
            la->nograd = "linalg.qr: The QR decomposition is not differentiable when "
                         "mode='complete' and nrows > ncols.";
        *keep = la;
        return out;
    }
    free(c.q), free(c.r);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* linalg_qr_backward: M = gR R^T - Q^T gQ; m >= n: gA = (Q syminvadj(triu
 * M) + gQ) R^-T; m < n: gA = [Q tril(M^T - M) R1^-T, 0] + Q gR */
static int qr_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const qr_ctx *c = p;
    const int64_t m = c->m, n = c->n, k = c->k;
    const double *q = c->q + b * m * k, *r = c->r + b * k * n;
    double *gq = work, *gr = gq + m * k, *mm = gr + k * n, *s = mm + k * k, *ga = s + k * k;
    const int64_t qbase = 0, rbase = c->batch * m * c->kq;
    get_block(c->g, qbase + b * m * c->kq, c->kq, m, k, gq);
    get_block(c->g, rbase + b * c->kr * n, n, k, n, gr);
    cg_la_gemm(false, true, k, k, n, 1.0, gr, k, r, k, 0.0, mm, k);
    cg_la_gemm(true, false, k, k, m, -1.0, q, m, gq, m, 1.0, mm, k);
    if (m >= n) {
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < k; i++)
                s[i + j * k] = i <= j ? mm[i + j * k] : mm[j + i * k];
        memcpy(ga, gq, sizeof(double) * (size_t)(m * n));
        cg_la_gemm(false, false, m, n, n, 1.0, q, m, s, k, 1.0, ga, m);
        cg_la_trsm(false, true, true, m, n, r, k, ga, m);
    } else {
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < k; i++)
                s[i + j * k] = i > j ? mm[j + i * k] - mm[i + j * k] : 0.0;
        memset(ga, 0, sizeof(double) * (size_t)(m * n));
        cg_la_gemm(false, false, m, m, m, 1.0, q, m, s, k, 0.0, ga, m);
        cg_la_trsm(false, true, true, m, m, r, k, ga, m);
        cg_la_gemm(false, false, m, n, m, 1.0, q, m, gr, k, 1.0, ga, m);
    }
    cg_la_put(c->out + b * m * n, ga, m, n, m, false);
    return 0;
}

/* ------------------------------------------------------ eigh, svd */
typedef struct {
    const cg_tensor *A, *g;
    int nb;
    bool upper, vectors, full;
    int64_t batch, m, n, k, ku, kv, lwork, liwork;
    double *l, *u, *vt; /* kept: eigh L (n), V (n x n); svd S, U m x k, Vt k x n */
    float *out;
} dec_ctx;

static int eigh_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const dec_ctx *c = p;
    const int64_t n = c->n;
    double *a = work, *w = a + n * n, *lw = w + n;
    const int nd = c->A->ndim;
    cg_la_get(c->A, cg_la_boff(c->A, c->nb, b), n, n, c->A->strides[nd - 2], c->A->strides[nd - 1],
              a, n > 0 ? n : 1, false);
    bool nan, inf;
    scan(a, n, n, c->upper ? 1 : -1, &nan, &inf);
    const bool vec = c->vectors || c->l;
    CG_LA_INT N = (CG_LA_INT)n, LD = (CG_LA_INT)(n > 0 ? n : 1), LW = (CG_LA_INT)c->lwork,
              LI = (CG_LA_INT)c->liwork, info = 0;
    if (n > 0 && !nan && !inf)
        dsyevd_(vec ? "V" : "N", c->upper ? "U" : "L", &N, a, &LD, w, lw, &LW, iwork, &LI, &info, 1,
                1);
    if (info)
        return info;
    if (nan || inf) /* LAPACK may not converge on them: NaN, as PyTorch gives */
        for (int64_t i = 0; i < n * n + n; i++)
            a[i] = NAN;
    float *ol = c->out + b * n, *ov = c->out + c->batch * n + b * n * n;
    for (int64_t i = 0; i < n; i++)
        ol[i] = (float)w[i];
    if (c->vectors)
        cg_la_put(ov, a, n, n, n, false);
    if (c->l) {
        memcpy(c->l + b * n, w, sizeof(double) * (size_t)n);
        memcpy(c->u + b * n * n, a, sizeof(double) * (size_t)(n * n));
    }
    return 0;
}

cg_tensor *cg_k_linalg_eigh(const cg_tensor *A, bool upper, bool vectors, cg_la **keep)
{
    const char *op = vectors ? "linalg.eigh" : "linalg.eigvalsh";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, true))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t n = A->shape[nb], batch = cg_numel_shape(nb, A->shape);
    dec_ctx c = {A, NULL, nb, upper, vectors, false, batch, n,    n,
                 n, n,    n,  1,     1,       NULL,  NULL,  NULL, NULL};
    if (n > 0) {
        CG_LA_INT N = (CG_LA_INT)n, LW = -1, LI = -1, info = 0, iw = 0;
        double w = 0.0, d = 0.0;
        dsyevd_(vectors || keep ? "V" : "N", "L", &N, &d, &N, &d, &w, &LW, &iw, &LI, &info, 1, 1);
        c.lwork = query(w), c.liwork = iw > 1 ? iw : 1;
    }
    cg_la *la = cg_la_new(vectors ? CG_LA_EIGH : CG_LA_EIGVALSH, A, nb);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, A->shape, sizeof(int64_t) * (size_t)(nb + 1));
    cg_tensor *out = !la       ? NULL
                     : vectors ? cg_empty(CG_SHAPE(batch * (n + n * n)))
                               : cg_empty(nb + 1, shape);
    bool ok =
        out && (!keep || ((c.l = cg_la_alloc(batch * n)) && (c.u = cg_la_alloc(batch * n * n))));
    c.out = out ? cg_data(out) : NULL;
    int64_t bad;
    int info;
    ok = ok && cg_la_batch(op, batch, 9.0 * n * n * n, n * n + n + c.lwork, c.liwork, eigh_item, &c,
                           &bad, &info);
    if (ok && bad >= 0) {
        char pre[48];
        cg_set_error("%s: %sThe algorithm failed to converge because the input matrix is "
                     "ill-conditioned or has too many repeated eigenvalues (error code: %d).",
                     op, cg_la_batch_prefix(nb, bad, pre, sizeof pre), info);
        ok = false;
    }
    if (ok && keep) {
        la->m = la->n = la->k = n;
        la->f[0] = c.l, la->f[1] = c.u;
        *keep = la;
        return out;
    }
    free(c.l), free(c.u);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* linalg_eig_backward (is_hermitian): gA = V (diag(gL) + skew(V^T gV) / E)
 * V^T, E_ij = L_j - L_i; V diag(gL) V^T when gV is 0 (unused) or for
 * eigvalsh */
static int eigh_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const dec_ctx *c = p;
    const int64_t n = c->n;
    const double *l = c->l + b * n, *v = c->u + b * n * n;
    double *gl = work, *gv = gl + n, *x = gv + n * n, *t = x + n * n;
    if (c->vectors) {
        get_block(c->g, b * n, n, 1, n, gl);
        get_block(c->g, c->batch * n + b * n * n, n, n, n, gv);
    } else {
        const int nd = c->g->ndim;
        cg_la_get(c->g, cg_la_boff(c->g, c->nb, b), 1, n, 0, c->g->strides[nd - 1], gl, 1, false);
    }
    if (!c->vectors || cg_la_all_zero(gv, n * n)) {
        memset(x, 0, sizeof(double) * (size_t)(n * n));
        for (int64_t i = 0; i < n; i++)
            x[i + i * n] = gl[i];
    } else {
        cg_la_gemm(true, false, n, n, n, 1.0, v, n, gv, n, 0.0, t, n);
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < n; i++)
                x[i + j * n] = i == j ? gl[i] : 0.5 * (t[i + j * n] - t[j + i * n]) / (l[j] - l[i]);
    }
    cg_la_gemm(false, false, n, n, n, 1.0, v, n, x, n, 0.0, t, n);
    cg_la_gemm(false, true, n, n, n, 1.0, t, n, v, n, 0.0, x, n);
    cg_la_put(c->out + b * n * n, x, n, n, n, false);
    return 0;
}

static int svd_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    const dec_ctx *c = p;
    const int64_t m = c->m, n = c->n, k = c->k, ku = c->ku, kv = c->kv, ld = max64(m, 1);
    double *a = work, *s = a + ld * n, *u = s + k + 1, *vt = u + ld * ku,
           *w = vt + max64(kv, 1) * n;
    const int nd = c->A->ndim;
    cg_la_get(c->A, cg_la_boff(c->A, c->nb, b), m, n, c->A->strides[nd - 2], c->A->strides[nd - 1],
              a, ld, false);
    bool nan, inf;
    scan(a, m, n, 0, &nan, &inf);
    if (nan)
        return -1000; /* refused, as PyTorch (LAPACK 3.10's dgesdd: info -4) */
    const bool vec = c->vectors || c->u;
    CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, LD = (CG_LA_INT)ld, LU = (CG_LA_INT)ld,
              LV = (CG_LA_INT)max64(kv, 1), LW = (CG_LA_INT)c->lwork, info = 0;
    ident(u, m, ku, ld); /* an empty matrix's vectors: the identity, as PyTorch's */
    ident(vt, kv, n, max64(kv, 1));
    if (k > 0 && !inf)
        dgesdd_(!vec      ? "N"
                : c->full ? "A"
                          : "S",
                &M, &N, a, &LD, s, u, &LU, vt, &LV, w, &LW, iwork, &info, 1);
    if (info)
        return info;
    if (inf) /* LAPACK's results are NaN: all of them, as PyTorch's */
        for (int64_t i = 0; i < k + 1 + ld * ku + max64(kv, 1) * n; i++)
            s[i] = NAN;
    const int64_t ob = c->vectors ? c->batch * m * ku : 0;
    float *os = c->out + ob + b * k;
    for (int64_t i = 0; i < k; i++)
        os[i] = (float)s[i];
    if (c->vectors) {
        cg_la_put(c->out + b * m * ku, u, m, ku, ld, false);
        cg_la_put(c->out + ob + c->batch * k + b * kv * n, vt, kv, n, max64(kv, 1), false);
    }
    if (c->u) { /* U's first k columns, Vt's first k rows */
        for (int64_t j = 0; j < k; j++)
            memcpy(c->u + b * m * k + j * m, u + j * ld, sizeof(double) * (size_t)m);
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < k; i++)
                c->vt[b * k * n + i + j * k] = vt[i + j * max64(kv, 1)];
        memcpy(c->l + b * k, s, sizeof(double) * (size_t)k);
    }
    return 0;
}

cg_tensor *cg_k_linalg_svd(const cg_tensor *A, bool full_matrices, bool vectors, cg_la **keep)
{
    const char *op = "linalg.svd";
    if (keep)
        *keep = NULL;
    if (!cg_k_linalg_check(op, "A", A, false))
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t m = A->shape[nb], n = A->shape[nb + 1], k = min64(m, n);
    const bool full = vectors && full_matrices;
    dec_ctx c = {A,    NULL, nb,   false,        vectors,      full, cg_numel_shape(nb, A->shape),
                 m,    n,    k,    full ? m : k, full ? n : k, 1,    1,
                 NULL, NULL, NULL, NULL};
    if (k > 0) {
        CG_LA_INT M = (CG_LA_INT)m, N = (CG_LA_INT)n, LD = (CG_LA_INT)m, LV = (CG_LA_INT)c.kv,
                  LW = -1, info = 0, iw = 0;
        double w = 0.0, d = 0.0;
        dgesdd_(!(vectors || keep) ? "N"
                : full             ? "A"
                                   : "S",
                &M, &N, &d, &LD, &d, &d, &LD, &d, &LV, &w, &LW, &iw, &info, 1);
        c.lwork = query(w);
    }
    cg_la *la = cg_la_new(vectors ? CG_LA_SVD : CG_LA_SVDVALS, A, nb);
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, A->shape, sizeof(int64_t) * (size_t)nb);
    shape[nb] = k;
    cg_tensor *out = !la       ? NULL
                     : vectors ? cg_empty(CG_SHAPE(c.batch * (m * c.ku + k + c.kv * n)))
                               : cg_empty(nb + 1, shape);
    bool ok = out && (!keep ||
                      ((c.u = cg_la_alloc(c.batch * m * k)) &&
                       (c.vt = cg_la_alloc(c.batch * k * n)) && (c.l = cg_la_alloc(c.batch * k))));
    c.out = out ? cg_data(out) : NULL;
    const int64_t ld = max64(m, 1);
    const int64_t ws = ld * n + k + 1 + ld * c.ku + max64(c.kv, 1) * n + c.lwork;
    int64_t bad;
    int info;
    ok = ok && cg_la_batch(op, c.batch, 12.0 * m * n * k, ws, 8 * k + 1, svd_item, &c, &bad, &info);
    if (ok && bad >= 0) {
        char pre[48];
        cg_la_batch_prefix(nb, bad, pre, sizeof pre);
        if (info == -1000)
            cg_set_error("%s: %sThe algorithm failed to converge because the input matrix "
                         "contained non-finite values.",
                         op, pre);
        else
            cg_set_error("%s: %sThe algorithm failed to converge because the input matrix is "
                         "ill-conditioned or has too many repeated singular values (error code: "
                         "%d).",
                         op, pre, info);
        ok = false;
    }
    if (ok && keep) {
        la->m = m, la->n = n, la->k = k;
        la->flags = full ? CG_LA_FULL : 0;
        la->f[0] = c.u, la->f[1] = c.vt, la->f[2] = c.l;
        *keep = la;
        return out;
    }
    free(c.u), free(c.vt), free(c.l);
    cg_la_free(la);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* svd_backward: gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS)]
 * V^T, E_ij = S_j^2 - S_i^2, with (I - U U^T) gU S^-1 V^T added when m >
 * n, U S^-1 gVh (I - V V^T) when m < n; U diag(gS) V^T when gU and gVh
 * are 0 (unused) or for svdvals */
static int svd_bw_item(void *p, int64_t b, double *work, CG_LA_INT *iwork)
{
    (void)iwork;
    const dec_ctx *c = p;
    const int64_t m = c->m, n = c->n, k = c->k, big = max64(m, n);
    const double *u = c->u + b * m * k, *vt = c->vt + b * k * n, *s = c->l + b * k;
    double *gu = work, *gs = gu + m * k, *gv = gs + k, *x = gv + k * n, *y = x + k * k;
    double *t1 = y + k * k, *t2 = t1 + big * big, *ga = t2 + big * big;
    bool hu = false, hv = false;
    if (c->vectors) {
        const int64_t ob = c->batch * m * c->ku;
        get_block(c->g, b * m * c->ku, c->ku, m, k, gu);
        get_block(c->g, ob + b * k, k, 1, k, gs);
        get_block(c->g, ob + c->batch * k + b * c->kv * n, n, k, n, gv);
        hu = !cg_la_all_zero(gu, m * k), hv = !cg_la_all_zero(gv, k * n);
    } else {
        const int nd = c->g->ndim;
        cg_la_get(c->g, cg_la_boff(c->g, c->nb, b), 1, k, 0, c->g->strides[nd - 1], gs, 1, false);
    }
    memset(x, 0, sizeof(double) * (size_t)(k * k));
    if (hu) /* y = U^T gU */
        cg_la_gemm(true, false, k, k, m, 1.0, u, m, gu, m, 0.0, y, k);
    if (hv) /* t1 = Vt gVt^T */
        cg_la_gemm(false, true, k, k, n, 1.0, vt, k, gv, k, 0.0, t1, k);
    for (int64_t j = 0; j < k && (hu || hv); j++)
        for (int64_t i = 0; i < k; i++) {
            const double e = i == j ? 1.0 : s[j] * s[j] - s[i] * s[i];
            const double su = hu ? y[i + j * k] - y[j + i * k] : 0.0;
            const double sv = hv ? t1[i + j * k] - t1[j + i * k] : 0.0;
            x[i + j * k] = hu && hv ? (su * s[j] + s[i] * sv) / e
                           : hu     ? su / e * s[j]
                                    : s[i] * (sv / e);
        }
    for (int64_t i = 0; i < k; i++)
        x[i + i * k] += gs[i];
    if (m > n && hu) {
        /* t1 = U x (m x k); gU S^-1 - U (U^T gU S^-1) added; times Vt */
        cg_la_gemm(false, false, m, k, k, 1.0, u, m, x, k, 0.0, t1, m);
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < m; i++)
                gu[i + j * m] /= s[j];
        cg_la_gemm(true, false, k, k, m, 1.0, u, m, gu, m, 0.0, y, k);
        for (int64_t i = 0; i < m * k; i++)
            t1[i] += gu[i];
        cg_la_gemm(false, false, m, k, k, -1.0, u, m, y, k, 1.0, t1, m);
        cg_la_gemm(false, false, m, n, k, 1.0, t1, m, vt, k, 0.0, ga, m);
    } else if (m < n && hv) {
        /* t1 = x Vt (k x n); S^-1 gVt - (S^-1 gVt Vt^T) Vt added; U times it */
        cg_la_gemm(false, false, k, n, k, 1.0, x, k, vt, k, 0.0, t1, k);
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < k; i++)
                gv[i + j * k] /= s[i];
        cg_la_gemm(false, true, k, k, n, 1.0, gv, k, vt, k, 0.0, y, k);
        for (int64_t i = 0; i < k * n; i++)
            t1[i] += gv[i];
        cg_la_gemm(false, false, k, n, k, -1.0, y, k, vt, k, 1.0, t1, k);
        cg_la_gemm(false, false, m, n, k, 1.0, u, m, t1, k, 0.0, ga, m);
    } else {
        cg_la_gemm(false, false, m, k, k, 1.0, u, m, x, k, 0.0, t2, m);
        cg_la_gemm(false, false, m, n, k, 1.0, t2, m, vt, k, 0.0, ga, m);
    }
    cg_la_put(c->out + b * m * n, ga, m, n, max64(m, 1), false);
    return 0;
}

/* ----------------------------------------------------- the backwards */
static cg_tensor *grad_of(const cg_la *la)
{
    int64_t s[CG_MAX_DIMS];
    memcpy(s, la->bshape, sizeof(int64_t) * (size_t)la->nb);
    s[la->nb] = la->m, s[la->nb + 1] = la->n;
    return cg_empty(la->nb + 2, s);
}

static bool run_bw(const char *op, const cg_la *la, cg_tensor *t, int64_t ws, cg_la_item_fn fn,
                   void *ctx, cg_tensor **gA)
{
    int64_t bad;
    int info;
    if (!cg_la_batch(op, la->batch, 8.0 * la->m * la->n * la->k, ws, 0, fn, ctx, &bad, &info)) {
        cg_release(t);
        return false;
    }
    *gA = t;
    return true;
}

bool cg_la_qr_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA)
{
    const int64_t m = la->m, n = la->n, k = la->k;
    cg_tensor *t = grad_of(la);
    if (!t)
        return false;
    qr_ctx c = {NULL,     g,        la->nb,    la->batch, m, n, k, 0, 0, 0, (cg_qr_mode)la->flags,
                la->f[0], la->f[1], cg_data(t)};
    c.kq = c.mode == CG_QR_COMPLETE ? m : k;
    c.kr = c.mode == CG_QR_COMPLETE ? m : k;
    return run_bw("linalg.qr backward", la, t, m * k + k * n + 2 * k * k + m * n, qr_bw_item, &c,
                  gA);
}

bool cg_la_eigh_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA)
{
    const int64_t n = la->n;
    cg_tensor *t = grad_of(la);
    if (!t)
        return false;
    dec_ctx c = {NULL,     g,         la->nb,    false, la->kind == CG_LA_EIGH,
                 false,    la->batch, n,         n,     n,
                 n,        n,         0,         0,     la->f[0],
                 la->f[1], NULL,      cg_data(t)};
    return run_bw("linalg.eigh backward", la, t, n + 3 * n * n, eigh_bw_item, &c, gA);
}

bool cg_la_svd_backward(const cg_la *la, const cg_tensor *g, cg_tensor **gA)
{
    const int64_t m = la->m, n = la->n, k = la->k, big = max64(m, n);
    const bool full = la->flags & CG_LA_FULL;
    cg_tensor *t = grad_of(la);
    if (!t)
        return false;
    dec_ctx c = {NULL,     g,        la->nb,   false,        la->kind == CG_LA_SVD, full, la->batch,
                 m,        n,        k,        full ? m : k, full ? n : k,          0,    0,
                 la->f[2], la->f[0], la->f[1], cg_data(t)};
    const int64_t ws = m * k + k + k * n + 2 * k * k + 2 * big * big + m * n;
    return run_bw("linalg.svd backward", la, t, ws, svd_bw_item, &c, gA);
}

/* ------------------------------------------------------ the adjugate */
int64_t cg_la_adj_work(int64_t n)
{
    double w = 0.0, d = 0.0;
    CG_LA_INT N = (CG_LA_INT)n, LW = -1, info = 0, iw = 0;
    if (n > 0)
        dgesdd_("A", &N, &N, &d, &N, &d, &d, &N, &d, &N, &w, &LW, &iw, &info, 1);
    return 3 * n * n + n + query(w);
}

/* the sign of the determinant of the orthogonal n x n q (destroyed) */
static double orth_sign(int64_t n, double *q, CG_LA_INT *piv)
{
    CG_LA_INT N = (CG_LA_INT)n, info = 0;
    dgetrf_(&N, &N, q, &N, piv, &info);
    double s = 1.0;
    for (int64_t i = 0; i < n; i++)
        s *= (piv[i] != i + 1 ? -1.0 : 1.0) * (q[i + i * n] < 0 ? -1.0 : 1.0);
    return s;
}

int cg_la_adjugate_t(int64_t n, double *a, double alpha, double *out, double *work,
                     CG_LA_INT *iwork)
{
    double *u = work, *vt = u + n * n, *s = vt + n * n, *q = s + n, *w = q + n * n;
    CG_LA_INT N = (CG_LA_INT)n, LW = (CG_LA_INT)(cg_la_adj_work(n) - 3 * n * n - n), info = 0;
    dgesdd_("A", &N, &N, a, &N, s, u, &N, vt, &N, w, &LW, iwork, &info, 1);
    if (info)
        return info;
    memcpy(q, u, sizeof(double) * (size_t)(n * n));
    double sg = orth_sign(n, q, iwork + 8 * n);
    memcpy(q, vt, sizeof(double) * (size_t)(n * n));
    sg *= orth_sign(n, q, iwork + 8 * n);
    /* d_i = prod_{j != i} s_j: products before and after i */
    for (int64_t i = 0; i < n; i++) {
        double d = alpha * sg;
        for (int64_t j = 0; j < n; j++)
            d *= j == i ? 1.0 : s[j];
        for (int64_t r = 0; r < n; r++)
            u[r + i * n] *= d;
    }
    cg_la_gemm(false, false, n, n, n, 1.0, u, n, vt, n, 0.0, out, n);
    return 0;
}
