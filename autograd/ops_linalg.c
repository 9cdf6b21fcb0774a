/* torch.linalg (autograd/ops.h, "linear algebra"): each op one node over
 * core's LAPACK kernels (core/linalg*.c), which compute in double and keep
 * their factors in double on the node (its ctx, a cg_la) for the backward:
 * PyTorch 1.13's formulas, in double, from core (cg_k_linalg_backward).
 * The backward reads none of the inputs, so an input may change in place
 * after the forward. The ops of several outputs make one packed 1-d node
 * whose blocks the outputs view (contiguous each); an output left unused
 * sends zeros, which the backward takes as PyTorch's undefined gradient.
 * matrix_norm is made of the graph's ops (vector_norm, svdvals, amax's
 * gradient shared among ties), as PyTorch's. An op given NULL returns
 * NULL and keeps the first message. */
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))

static bool la_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return cg_k_linalg_backward(n->ctx, g, NEEDS(0) ? &gin[0] : NULL,
                                n->n_inputs > 1 && NEEDS(1) ? &gin[1] : NULL);
}

/* whether a node over in will be recorded: grad mode on, an input
 * requiring grad (then the kernel keeps its factors) */
static bool recording(int nin, cg_tensor *const *in)
{
    for (int i = 0; cg_grad_enabled() && i < nin; i++)
        if (in[i] && in[i]->requires_grad)
            return true;
    return false;
}

/* out recorded as op over in, la on its node (freed when none is) */
static cg_tensor *la_record(cg_tensor *out, cg_op op, int nin, cg_tensor *const *in, cg_la *la)
{
    cg_node *n;
    out = cg_recorded(out, op, nin, in, la_bw, &n);
    if (n) {
        n->ctx = la;
        n->ctx_free = cg_la_free;
    } else
        cg_la_free(la);
    return out;
}

/* one input, one output: kernel(A) recorded as op */
#define LA_UNARY(op, A, call)                            \
    do {                                                 \
        cg_la *la_ = NULL;                               \
        cg_la **keep = recording(1, &(A)) ? &la_ : NULL; \
        cg_tensor *out_ = (call); /* sets la_ */         \
        return la_record(out_, op, 1, &(A), la_);        \
    } while (0)

/* the block of numel(shape) elements of the packed 1-d p from at, seen
 * as shape (a contiguous view) */
static cg_tensor *unpack(cg_tensor *p, int64_t at, int nd, const int64_t *shape)
{
    cg_tensor *s = p ? cg_narrow(p, 0, at, cg_numel_shape(nd, shape)) : NULL;
    cg_tensor *v = s ? cg_reshape(s, nd, shape) : NULL;
    cg_release(s);
    return v;
}

/* A's batch dims (ndim - 2) then r, c into shape; the batch's size */
static int64_t mat_shape(const cg_tensor *A, int64_t r, int64_t c, int64_t *shape)
{
    const int nb = A->ndim - 2;
    memcpy(shape, A->shape, sizeof(int64_t) * (size_t)nb);
    shape[nb] = r, shape[nb + 1] = c;
    return cg_numel_shape(nb, A->shape);
}

/* x expanded to nd dims: the batch (nb of them), then x's last two */
static cg_tensor *to_batch(cg_tensor *x, int nb, const int64_t *batch)
{
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
    shape[nb] = x->shape[x->ndim - 2], shape[nb + 1] = x->shape[x->ndim - 1];
    if (x->ndim == nb + 2 && !memcmp(x->shape, shape, sizeof(int64_t) * (size_t)(nb + 2)))
        return cg_retain(x);
    return cg_expand(x, nb + 2, shape);
}

/* A [*, n, n] or [*, m, n] and B [*, rows, k] (or a vector, as PyTorch's
 * linalg_solve_is_vector_rhs: B 1-d, or B's shape A's without its last
 * dim) broadcast over their batch dims into *a, *b ([*, .., k]); *vec
 * whether B was a vector. False + error. */
static bool two_args(const char *op, cg_tensor *A, cg_tensor *B, bool square, cg_tensor **a,
                     cg_tensor **b, bool *vec)
{
    *a = *b = NULL;
    if (!A || !B)
        return cg_error_null_input(op);
    if (!cg_k_linalg_check(op, "A", A, square))
        return false;
    if (B->dtype != A->dtype) {
        cg_set_error("%s: Expected A and B to have the same dtype, but found A of type %s and B "
                     "of type %s instead",
                     op, cg_dtype_name(A->dtype), cg_dtype_name(B->dtype));
        return false;
    }
    if (B->ndim < 1) {
        cg_set_error("%s: The input tensor B must have at least 1 dimensions.", op);
        return false;
    }
    *vec = B->ndim == 1 || (B->ndim == A->ndim - 1 &&
                            !memcmp(B->shape, A->shape, sizeof(int64_t) * (size_t)B->ndim));
    cg_tensor *b2 = *vec ? cg_unsqueeze(B, -1) : cg_retain(B);
    if (!b2)
        return false;
    const int64_t m = A->shape[A->ndim - 2], n = A->shape[A->ndim - 1];
    if (b2->ndim < 2 || b2->shape[b2->ndim - 2] != m) {
        if (square)
            cg_set_error("%s: Incompatible shapes of A and B for the equation AX = B (%lldx%lld "
                         "and %lldx%lld)",
                         op, (long long)m, (long long)n,
                         (long long)b2->shape[b2->ndim > 1 ? b2->ndim - 2 : 0],
                         (long long)b2->shape[b2->ndim - 1]);
        else
            cg_set_error("%s: input.size(-2) should match other.size(-%d)", op, *vec ? 1 : 2);
        cg_release(b2);
        return false;
    }
    int64_t batch[CG_MAX_DIMS];
    const int nb = cg_broadcast_shapes(op, A->ndim - 2, A->shape, b2->ndim - 2, b2->shape, batch);
    if (nb >= 0 && nb + 2 > CG_MAX_DIMS)
        cg_set_error("%s: more than %d dims", op, CG_MAX_DIMS);
    if (nb >= 0 && nb + 2 <= CG_MAX_DIMS) {
        *a = to_batch(A, nb, batch);
        *b = *a ? to_batch(b2, nb, batch) : NULL;
    }
    cg_release(b2);
    if (*a && *b)
        return true;
    cg_release_all(2, *a, *b);
    *a = *b = NULL;
    return false;
}

/* the solution of a two-argument op ([*, n, k]), squeezed back to a
 * vector when B was one */
static cg_tensor *solution(cg_tensor *x, bool vec)
{
    if (!x || !vec)
        return x;
    cg_tensor *s = cg_squeeze(x, -1);
    cg_release(x);
    return s;
}

cg_tensor *cg_linalg_solve(cg_tensor *A, cg_tensor *B)
{
    cg_tensor *a, *b;
    bool vec;
    if (!two_args("linalg.solve", A, B, true, &a, &b, &vec))
        return NULL;
    cg_tensor *in[2] = {a, b};
    cg_la *la = NULL;
    cg_tensor *x = cg_k_linalg_solve(a, b, recording(2, in) ? &la : NULL);
    x = la_record(x, CG_OP_LINALG_SOLVE, 2, in, la);
    cg_release_all(2, a, b);
    return solution(x, vec);
}

cg_tensor *cg_linalg_lstsq(cg_tensor *A, cg_tensor *B, double rcond)
{
    cg_tensor *a, *b;
    bool vec;
    if (!two_args("linalg.lstsq", A, B, false, &a, &b, &vec))
        return NULL;
    cg_tensor *in[2] = {a, b};
    cg_la *la = NULL;
    cg_tensor *x = cg_k_linalg_lstsq(a, b, rcond, recording(2, in) ? &la : NULL);
    x = la_record(x, CG_OP_LINALG_LSTSQ, 2, in, la);
    cg_release_all(2, a, b);
    return solution(x, vec);
}

cg_tensor *cg_linalg_inv(cg_tensor *A) { LA_UNARY(CG_OP_LINALG_INV, A, cg_k_linalg_inv(A, keep)); }

cg_tensor *cg_linalg_det(cg_tensor *A) { LA_UNARY(CG_OP_LINALG_DET, A, cg_k_linalg_det(A, keep)); }

cg_tensor *cg_linalg_cholesky(cg_tensor *A, bool upper)
{
    LA_UNARY(CG_OP_LINALG_CHOLESKY, A, cg_k_linalg_cholesky(A, upper, keep));
}

cg_tensor *cg_linalg_pinv(cg_tensor *A, double atol, double rtol)
{
    LA_UNARY(CG_OP_LINALG_PINV, A, cg_k_linalg_pinv(A, atol, rtol, keep));
}

cg_tensor *cg_linalg_eigvalsh(cg_tensor *A, const char *UPLO)
{
    const bool up = UPLO && (*UPLO == 'U' || *UPLO == 'u');
    if (UPLO && (strlen(UPLO) != 1 || !strchr("LUlu", *UPLO))) {
        cg_set_error("linalg.eigvalsh: Expected UPLO argument to be 'L' or 'U', but got %s", UPLO);
        return NULL;
    }
    LA_UNARY(CG_OP_LINALG_EIGVALSH, A, cg_k_linalg_eigh(A, up, false, keep));
}

cg_tensor *cg_linalg_svdvals(cg_tensor *A)
{
    LA_UNARY(CG_OP_LINALG_SVDVALS, A, cg_k_linalg_svd(A, false, false, keep));
}

cg_tensor *cg_linalg_slogdet(cg_tensor *A, cg_tensor **logabsdet)
{
    if (logabsdet)
        *logabsdet = NULL;
    cg_la *la = NULL;
    cg_tensor *p = A ? cg_k_linalg_slogdet(A, recording(1, &A) ? &la : NULL) : NULL;
    if (!A)
        cg_error_null_input("linalg.slogdet");
    p = la_record(p, CG_OP_LINALG_SLOGDET, 1, &A, la);
    if (!p)
        return NULL;
    const int nb = A->ndim - 2;
    const int64_t batch = cg_numel_shape(nb, A->shape);
    cg_tensor *sign = unpack(p, 0, nb, A->shape);
    cg_tensor *la_ = sign && logabsdet ? unpack(p, batch, nb, A->shape) : NULL;
    cg_release(p);
    if (!sign || (logabsdet && !la_)) {
        cg_release_all(2, sign, la_);
        return NULL;
    }
    if (logabsdet)
        *logabsdet = la_;
    return sign;
}

cg_tensor *cg_linalg_qr(cg_tensor *A, const char *mode, cg_tensor **R)
{
    if (R)
        *R = NULL;
    cg_qr_mode md = CG_QR_REDUCED;
    if (mode && !strcmp(mode, "complete"))
        md = CG_QR_COMPLETE;
    else if (mode && !strcmp(mode, "r"))
        md = CG_QR_R;
    else if (mode && strcmp(mode, "reduced")) {
        cg_set_error("linalg.qr: qr received unrecognized mode '%s' but expected one of 'reduced' "
                     "(default), 'r', or 'complete'",
                     mode);
        return NULL;
    }
    cg_la *la = NULL;
    cg_tensor *p = A ? cg_k_linalg_qr(A, md, recording(1, &A) ? &la : NULL) : NULL;
    if (!A)
        cg_error_null_input("linalg.qr");
    p = la_record(p, CG_OP_LINALG_QR, 1, &A, la);
    if (!p)
        return NULL;
    const int64_t m = A->shape[A->ndim - 2], n = A->shape[A->ndim - 1], k = m < n ? m : n;
    const int64_t kq = md == CG_QR_COMPLETE ? m : md == CG_QR_R ? 0 : k;
    const int64_t kr = md == CG_QR_COMPLETE ? m : k;
    int64_t sq[CG_MAX_DIMS], sr[CG_MAX_DIMS];
    const int64_t batch = mat_shape(A, m, kq, sq);
    mat_shape(A, kr, n, sr);
    cg_tensor *q = md == CG_QR_R ? cg_empty(CG_SHAPE(0)) : unpack(p, 0, A->ndim, sq);
    cg_tensor *r = q && R ? unpack(p, batch * m * kq, A->ndim, sr) : NULL;
    cg_release(p);
    if (!q || (R && !r)) {
        cg_release_all(2, q, r);
        return NULL;
    }
    if (R)
        *R = r;
    return q;
}

cg_tensor *cg_linalg_eigh(cg_tensor *A, const char *UPLO, cg_tensor **eigenvectors)
{
    if (eigenvectors)
        *eigenvectors = NULL;
    if (UPLO && (strlen(UPLO) != 1 || !strchr("LUlu", *UPLO))) {
        cg_set_error("linalg.eigh: Expected UPLO argument to be 'L' or 'U', but got %s", UPLO);
        return NULL;
    }
    const bool up = UPLO && (*UPLO == 'U' || *UPLO == 'u');
    cg_la *la = NULL;
    cg_tensor *p = A ? cg_k_linalg_eigh(A, up, true, recording(1, &A) ? &la : NULL) : NULL;
    if (!A)
        cg_error_null_input("linalg.eigh");
    p = la_record(p, CG_OP_LINALG_EIGH, 1, &A, la);
    if (!p)
        return NULL;
    const int64_t n = A->shape[A->ndim - 1];
    int64_t sv[CG_MAX_DIMS];
    const int64_t batch = mat_shape(A, n, n, sv);
    cg_tensor *l = unpack(p, 0, A->ndim - 1, sv);
    cg_tensor *v = l && eigenvectors ? unpack(p, batch * n, A->ndim, sv) : NULL;
    cg_release(p);
    if (!l || (eigenvectors && !v)) {
        cg_release_all(2, l, v);
        return NULL;
    }
    if (eigenvectors)
        *eigenvectors = v;
    return l;
}

cg_tensor *cg_linalg_svd(cg_tensor *A, bool full_matrices, cg_tensor **S, cg_tensor **Vh)
{
    if (S)
        *S = NULL;
    if (Vh)
        *Vh = NULL;
    cg_la *la = NULL;
    cg_tensor *p =
        A ? cg_k_linalg_svd(A, full_matrices, true, recording(1, &A) ? &la : NULL) : NULL;
    if (!A)
        cg_error_null_input("linalg.svd");
    p = la_record(p, CG_OP_LINALG_SVD, 1, &A, la);
    if (!p)
        return NULL;
    const int64_t m = A->shape[A->ndim - 2], n = A->shape[A->ndim - 1], k = m < n ? m : n;
    const int64_t ku = full_matrices ? m : k, kv = full_matrices ? n : k;
    int64_t su[CG_MAX_DIMS], ss[CG_MAX_DIMS], sv[CG_MAX_DIMS];
    const int64_t batch = mat_shape(A, m, ku, su);
    mat_shape(A, k, k, ss);
    mat_shape(A, kv, n, sv);
    cg_tensor *u = unpack(p, 0, A->ndim, su);
    cg_tensor *s = u && S ? unpack(p, batch * m * ku, A->ndim - 1, ss) : NULL;
    cg_tensor *vh = u && Vh ? unpack(p, batch * (m * ku + k), A->ndim, sv) : NULL;
    cg_release(p);
    if (!u || (S && !s) || (Vh && !vh)) {
        cg_release_all(3, u, s, vh);
        return NULL;
    }
    if (S)
        *S = s;
    if (Vh)
        *Vh = vh;
    return u;
}

/* --------------------------------------------------------------- norms */
/* p.i: [0] ord's bits, [1] the reduced dims' mask, [2] keepdim, [3] all dims */
static bool vnorm_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    double ord;
    memcpy(&ord, &n->p.i[0], sizeof ord);
    int dims[CG_MAX_DIMS], nd = 0;
    for (int d = 0; !n->p.i[3] && d < n->inputs[0]->ndim; d++)
        if (n->p.i[1] >> d & 1)
            dims[nd++] = d;
    gin[0] = cg_k_linalg_vector_norm_backward(n->inputs[0], g, ord, nd, dims, n->p.i[2] != 0);
    return gin[0] != NULL;
}

cg_tensor *cg_linalg_vector_norm(cg_tensor *x, double ord, int ndims, const int *dims, bool keepdim)
{
    cg_node *n;
    cg_tensor *out = x ? cg_k_linalg_vector_norm(x, ord, ndims, dims, keepdim) : NULL;
    if (!x)
        cg_error_null_input("linalg.vector_norm");
    out = cg_recorded(out, CG_OP_LINALG_VECTOR_NORM, 1, &x, vnorm_bw, &n);
    if (n) {
        int64_t mask = 0;
        for (int i = 0; i < ndims && x->ndim > 0; i++)
            mask |= (int64_t)1 << (dims[i] < 0 ? dims[i] + x->ndim : dims[i]);
        memcpy(&n->p.i[0], &ord, sizeof ord);
        n->p.i[1] = mask;
        n->p.i[2] = keepdim;
        n->p.i[3] = ndims == 0 || x->ndim == 0;
    }
    return out;
}

/* amax (amin) of x over dim with PyTorch's gradient: g shared among the
 * ties. m + sum((x - m) [x == m]) / count, m the maximum outside the graph:
 * the value is m exactly; the gradient [x == m] / count. */
static cg_tensor *amax_split(cg_tensor *x, int dim, bool keepdim, bool min)
{
    cg_no_grad_begin();
    cg_tensor *m = x ? (min ? cg_min(x, dim, true, NULL) : cg_max(x, dim, true, NULL)) : NULL;
    cg_no_grad_end();
    cg_tensor *mask = m ? cg_eq(x, m) : NULL, *mf = mask ? cg_to(mask, x->dtype) : NULL;
    cg_tensor *cnt = mf ? cg_sum(mf, 1, &dim, true) : NULL, *d = cnt ? cg_sub(x, m) : NULL;
    cg_tensor *dm = d ? cg_mul(d, mf) : NULL, *s = dm ? cg_sum(dm, 1, &dim, true) : NULL;
    cg_tensor *q = s ? cg_div(s, cnt) : NULL, *r = q ? cg_add(q, m) : NULL;
    cg_tensor *out = !r ? NULL : keepdim ? cg_retain(r) : cg_squeeze(r, dim);
    cg_release_all(9, m, mask, mf, cnt, d, dm, s, q, r);
    return out;
}

/* ord's spelling: PyTorch's strings and numbers */
static bool matrix_ord(const char *ord, double *o)
{
    static const struct {
        const char *s;
        double v;
    } t[] = {{"fro", 0.5}, {"nuc", -0.5}, {"1", 1},          {"-1", -1},
             {"2", 2},     {"-2", -2},    {"inf", INFINITY}, {"-inf", -INFINITY}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(ord ? ord : "fro", t[i].s))
            return *o = t[i].v, true;
    cg_set_error("linalg.matrix_norm: Order %s not supported.", ord);
    return false;
}

cg_tensor *cg_linalg_matrix_norm(cg_tensor *A, const char *ord, const int *dim, bool keepdim)
{
    const char *op = "linalg.matrix_norm";
    double o;
    if (!A)
        return cg_error_null_input(op), NULL;
    if (!matrix_ord(ord, &o))
        return NULL;
    if (!cg_dtype_is_float(A->dtype)) {
        cg_set_error("%s: Expected a floating point tensor as input. Got %s", op,
                     cg_dtype_name(A->dtype));
        return NULL;
    }
    if (A->ndim < 2) {
        cg_set_error("%s: The input tensor A must have at least 2 dimensions.", op);
        return NULL;
    }
    int d[2] = {dim ? dim[0] : -2, dim ? dim[1] : -1};
    for (int i = 0; i < 2; i++) {
        if (d[i] < -A->ndim || d[i] >= A->ndim) {
            cg_set_error("%s: dim %d is out of range for %d dims", op, d[i], A->ndim);
            return NULL;
        }
        d[i] = d[i] < 0 ? d[i] + A->ndim : d[i];
    }
    if (d[0] == d[1]) {
        cg_set_error("%s: dims must be different. Got (%d, %d)", op, dim ? dim[0] : -2,
                     dim ? dim[1] : -1);
        return NULL;
    }
    if (o == 0.5) /* fro */
        return cg_linalg_vector_norm(A, 2.0, 2, d, keepdim);
    if (fabs(o) == 1.0 || isinf(o)) { /* inf: the 1 norm of the transpose */
        if (isinf(o))
            d[0] ^= d[1], d[1] ^= d[0], d[0] ^= d[1];
        cg_tensor *s = cg_linalg_vector_norm(A, 1.0, 1, d, keepdim);
        cg_tensor *r =
            s ? amax_split(s, !keepdim && d[0] < d[1] ? d[1] - 1 : d[1], keepdim, o < 0) : NULL;
        cg_release(s);
        return r;
    }
    /* nuc, 2, -2: the singular values of the two dims moved last */
    int perm[CG_MAX_DIMS], k = 0;
    for (int i = 0; i < A->ndim; i++)
        if (i != d[0] && i != d[1])
            perm[k++] = i;
    perm[k++] = d[0], perm[k] = d[1];
    cg_tensor *p = cg_permute(A, perm), *sv = p ? cg_linalg_svdvals(p) : NULL;
    int last = -1;
    cg_tensor *r = !sv         ? NULL
                   : o == -0.5 ? cg_sum(sv, 1, &last, false)
                               : amax_split(sv, -1, false, o < 0);
    cg_release_all(2, p, sv);
    for (int i = 0; keepdim && r && i < 2; i++) {
        cg_tensor *u =
            cg_unsqueeze(r, i ? (d[0] > d[1] ? d[0] : d[1]) : (d[0] < d[1] ? d[0] : d[1]));
        cg_release(r);
        r = u;
    }
    return r;
}
