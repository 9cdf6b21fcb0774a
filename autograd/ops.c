/* Differentiable elementwise ops, matmul and views (the reductions:
 * ops_reduce.c): each op's forward and backward side by side. Backward rules return gradients in
 * the output's (broadcast) shape; the engine reduces them to each input's
 * shape. */
#include "autograd/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "autograd/ops_impl.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

cg_tensor *cg_op_finish(cg_tensor *out, cg_op op, int nin, cg_tensor *const *in, cg_backward_fn bw,
                        cg_node **node)
{
    if (node)
        *node = NULL;
    if (out && !cg_dtype_is_float(out->dtype))
        return out; /* int64 or bool: no gradient, whatever the inputs */
    cg_node *n = cg_record(out, op, nin, in, bw);
    if (node)
        *node = n;
    if (out && cg_record_failed(n, nin, in)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_op_finish1(cg_tensor *out, cg_op op, cg_tensor *a, cg_backward_fn bw, cg_node **node)
{
    return cg_op_finish(out, op, 1, &a, bw, node);
}

static cg_tensor *finish2(cg_tensor *out, cg_op op, cg_tensor *a, cg_tensor *b, cg_backward_fn bw,
                          cg_node **node)
{
    cg_tensor *in[2] = {a, b};
    return cg_op_finish(out, op, 2, in, bw, node);
}

bool cg_op_save_output(cg_node *n, cg_tensor *out)
{
    if (!n)
        return true;
    cg_tensor *al = cg_alias(out);
    bool ok = al && cg_node_save(n, al) >= 0;
    cg_release(al);
    return ok;
}

/* ------------------------------------------------------------ binary */
static bool add_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0))
        gin[0] = cg_retain((cg_tensor *)g);
    if (NEEDS(1))
        gin[1] = cg_retain((cg_tensor *)g);
    return true;
}
cg_tensor *cg_add(cg_tensor *a, cg_tensor *b)
{
    return finish2(cg_k_add(a, b), CG_OP_ADD, a, b, add_bw, NULL);
}

static bool sub_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0))
        gin[0] = cg_retain((cg_tensor *)g);
    if (NEEDS(1) && !(gin[1] = cg_k_neg(g)))
        return false;
    return true;
}
cg_tensor *cg_sub(cg_tensor *a, cg_tensor *b)
{
    return finish2(cg_k_sub(a, b), CG_OP_SUB, a, b, sub_bw, NULL);
}

static bool mul_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0) && !(gin[0] = cg_k_mul(g, IN(1))))
        return false;
    if (NEEDS(1) && !(gin[1] = cg_k_mul(g, IN(0))))
        return false;
    return true;
}
cg_tensor *cg_mul(cg_tensor *a, cg_tensor *b)
{
    return finish2(cg_k_mul(a, b), CG_OP_MUL, a, b, mul_bw, NULL);
}

static bool div_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(g/b) * (a/b) */
    cg_tensor *gb = cg_k_div(g, IN(1));
    if (!gb)
        return false;
    if (NEEDS(1)) {
        cg_tensor *q = cg_k_div(IN(0), IN(1));
        cg_tensor *t = cg_k_mul(gb, q);
        cg_release(q);
        gin[1] = cg_k_neg(t);
        cg_release(t);
        if (!gin[1]) {
            cg_release(gb);
            return false;
        }
    }
    if (NEEDS(0))
        gin[0] = gb;
    else
        cg_release(gb);
    return true;
}
cg_tensor *cg_div(cg_tensor *a, cg_tensor *b)
{
    return finish2(cg_k_div(a, b), CG_OP_DIV, a, b, div_bw, NULL);
}

static bool adds_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    gin[0] = cg_retain((cg_tensor *)g);
    return true;
}
cg_tensor *cg_adds(cg_tensor *a, float s)
{
    return cg_op_finish1(cg_k_adds(a, s), CG_OP_ADDS, a, adds_bw, NULL);
}

static bool muls_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_muls(g, n->p.f[0])) != NULL;
}
cg_tensor *cg_muls(cg_tensor *a, float s)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_k_muls(a, s), CG_OP_MULS, a, muls_bw, &n);
    if (n)
        n->p.f[0] = s;
    return out;
}

/* ------------------------------------------------------------- unary */
static bool neg_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    return (gin[0] = cg_k_neg(g)) != NULL;
}
cg_tensor *cg_neg(cg_tensor *a) { return cg_op_finish1(cg_k_neg(a), CG_OP_NEG, a, neg_bw, NULL); }

/* Unary ops whose derivative is a function of the saved output y. */
static bool exp_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_mul(g, n->saved[0])) != NULL; /* y */
}
static cg_tensor *unary_saving_output(cg_tensor *out, cg_op op, cg_tensor *a, cg_backward_fn bw)
{
    cg_node *n;
    out = cg_op_finish1(out, op, a, bw, &n);
    if (out && !cg_op_save_output(n, out)) {
        cg_release(out);
        return NULL;
    }
    return out;
}
cg_tensor *cg_exp(cg_tensor *a) { return unary_saving_output(cg_k_exp(a), CG_OP_EXP, a, exp_bw); }

static bool log_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_div(g, IN(0))) != NULL;
}
cg_tensor *cg_log(cg_tensor *a) { return cg_op_finish1(cg_k_log(a), CG_OP_LOG, a, log_bw, NULL); }

static bool sqrt_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *t = cg_k_div(g, n->saved[0]); /* g / y * 0.5 */
    gin[0] = cg_k_muls(t, 0.5f);
    cg_release(t);
    return gin[0] != NULL;
}
cg_tensor *cg_sqrt(cg_tensor *a)
{
    return unary_saving_output(cg_k_sqrt(a), CG_OP_SQRT, a, sqrt_bw);
}

static bool rsqrt_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* y = x^-1/2, dy/dx = -0.5 y^3 */
    cg_tensor *y3 = cg_k_pow(n->saved[0], 3.0f);
    cg_tensor *t = cg_k_mul(g, y3);
    gin[0] = cg_k_muls(t, -0.5f);
    cg_release_all(2, y3, t);
    return gin[0] != NULL;
}
cg_tensor *cg_rsqrt(cg_tensor *a)
{
    return unary_saving_output(cg_k_rsqrt(a), CG_OP_RSQRT, a, rsqrt_bw);
}

static bool pow_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    float p = n->p.f[0];
    if (p == 0.0f) /* x^0 is constant: 0, not 0 * x^-1 (NaN at 0), as PyTorch */
        return (gin[0] = cg_zeros_like(g)) != NULL;
    cg_tensor *d = cg_k_pow(IN(0), p - 1.0f);
    cg_tensor *t = cg_k_mul(g, d);
    gin[0] = cg_k_muls(t, p);
    cg_release_all(2, d, t);
    return gin[0] != NULL;
}
cg_tensor *cg_pow(cg_tensor *a, float p)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_k_pow(a, p), CG_OP_POW, a, pow_bw, &n);
    if (n)
        n->p.f[0] = p;
    return out;
}

static bool tanh_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g * (1 - y^2) */
    cg_tensor *y2 = cg_k_mul(n->saved[0], n->saved[0]);
    cg_tensor *d = cg_k_axpby(y2, -1.0f, y2, 0.0f);
    cg_tensor *d1 = cg_k_adds(d, 1.0f);
    gin[0] = cg_k_mul(g, d1);
    cg_release_all(3, y2, d, d1);
    return gin[0] != NULL;
}
cg_tensor *cg_tanh(cg_tensor *a)
{
    return unary_saving_output(cg_k_tanh(a), CG_OP_TANH, a, tanh_bw);
}

static bool sigmoid_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g * y * (1 - y) */
    const cg_tensor *y = n->saved[0];
    cg_tensor *omy = cg_k_axpby(y, -1.0f, y, 0.0f);
    cg_tensor *omy1 = cg_k_adds(omy, 1.0f);
    cg_tensor *d = cg_k_mul(y, omy1);
    gin[0] = cg_k_mul(g, d);
    cg_release_all(3, omy, omy1, d);
    return gin[0] != NULL;
}
cg_tensor *cg_sigmoid(cg_tensor *a)
{
    return unary_saving_output(cg_k_sigmoid(a), CG_OP_SIGMOID, a, sigmoid_bw);
}

static bool clamp_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_clamp_backward(IN(0), g, n->p.f[0], n->p.f[1])) != NULL;
}
cg_tensor *cg_clamp(cg_tensor *a, float lo, float hi)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_k_clamp(a, lo, hi), CG_OP_CLAMP, a, clamp_bw, &n);
    if (n) {
        n->p.f[0] = lo;
        n->p.f[1] = hi;
    }
    return out;
}

static bool where_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* inputs: cond, a, b */
    cg_tensor *zero = cg_scalar(0.0f);
    if (!zero)
        return false;
    if (NEEDS(1) && !(gin[1] = cg_k_where(IN(0), g, zero))) {
        cg_release(zero);
        return false;
    }
    if (NEEDS(2) && !(gin[2] = cg_k_where(IN(0), zero, g))) {
        cg_release(zero);
        return false;
    }
    cg_release(zero);
    return true;
}
cg_tensor *cg_where(cg_tensor *cond, cg_tensor *a, cg_tensor *b)
{
    cg_tensor *out = cg_k_where(cond, a, b);
    cg_tensor *in[3] = {cond, a, b};
    if (out && cond && cond->requires_grad) {
        /* no gradient flows to cond: record with a detached cond */
        cg_tensor *c = cg_detach(cond);
        in[0] = c;
        out = cg_op_finish(out, CG_OP_WHERE, 3, in, where_bw, NULL);
        cg_release(c);
        return out;
    }
    return cg_op_finish(out, CG_OP_WHERE, 3, in, where_bw, NULL);
}

static bool masked_fill_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_masked_fill(g, IN(1), 0.0f)) != NULL;
}
cg_tensor *cg_masked_fill(cg_tensor *a, cg_tensor *mask, float value)
{
    cg_tensor *out = cg_k_masked_fill(a, mask, value);
    if (!out)
        return NULL;
    cg_tensor *m = mask->requires_grad ? cg_detach(mask) : cg_retain(mask);
    out = finish2(out, CG_OP_MASKED_FILL, a, m, masked_fill_bw, NULL);
    cg_release(m);
    return out;
}

/* ------------------------------------------------------------ matmul */
static bool matmul_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* C = A @ B: dA = g @ B^T, dB = A^T @ g (batch dims reduced by the engine) */
    if (NEEDS(0)) {
        cg_tensor *bt = cg_view_transpose(IN(1), -1, -2);
        gin[0] = cg_k_matmul(g, bt);
        cg_release(bt);
        if (!gin[0])
            return false;
    }
    if (NEEDS(1)) {
        cg_tensor *at = cg_view_transpose(IN(0), -1, -2);
        gin[1] = cg_k_matmul(at, g);
        cg_release(at);
        if (!gin[1])
            return false;
    }
    return true;
}
cg_tensor *cg_matmul(cg_tensor *a, cg_tensor *b)
{
    if (!a || !b) {
        cg_error_null_input("cg_matmul");
        return NULL;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        cg_set_error("matmul: both arguments need at least 1 dim (got %d and %d dims)", a->ndim,
                     b->ndim);
        return NULL;
    }
    /* checked here, on the shapes given: the views below would be named */
    const int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (ka != kb) {
        char sa[256], sb[256];
        cg_set_error("matmul: inner dimensions differ, %lld vs %lld (shapes %s and %s)",
                     (long long)ka, (long long)kb, cg_shape_str(a, sa, sizeof sa),
                     cg_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    /* 1-D operands become matrices through differentiable views, so the
     * backward rule only ever sees ndim >= 2. */
    if (a->ndim == 1 || b->ndim == 1) {
        cg_tensor *a2 = a->ndim == 1 ? cg_unsqueeze(a, 0) : cg_retain(a);
        cg_tensor *b2 = b->ndim == 1 ? cg_unsqueeze(b, 1) : cg_retain(b);
        cg_tensor *c = cg_matmul(a2, b2);
        cg_tensor *r = c;
        if (c && b->ndim == 1) {
            r = cg_squeeze(c, -1);
            cg_release(c);
            c = r;
        }
        if (c && a->ndim == 1) {
            r = cg_squeeze(c, b->ndim == 1 ? -1 : -2);
            cg_release(c);
        }
        cg_release_all(2, a2, b2);
        return r;
    }
    /* [..., n, k] @ [k, m] with a's leading dims mergeable into rows (e.g. a
     * Linear layer on [B,T,in]): one [N,k] @ [k,m] product through views, so
     * the backward forms dB = A^T g as one matrix product instead of a batch
     * of them summed afterwards. */
    if (a->ndim > 2 && b->ndim == 2) {
        bool fold = true;
        for (int i = 0; i < a->ndim - 2; i++)
            if (a->shape[i] != 1 && a->strides[i] != a->strides[i + 1] * a->shape[i + 1])
                fold = false;
        int64_t N = cg_numel_shape(a->ndim - 1, a->shape);
        if (fold && N > 0) {
            int64_t shp[CG_MAX_DIMS];
            memcpy(shp, a->shape, sizeof(int64_t) * (size_t)a->ndim);
            cg_tensor *a2 = cg_view(a, 2, (const int64_t[]){N, a->shape[a->ndim - 1]});
            cg_tensor *c2 = cg_matmul(a2, b);
            shp[a->ndim - 1] = b->shape[1];
            cg_tensor *c = c2 ? cg_view(c2, a->ndim, shp) : NULL;
            cg_release_all(2, a2, c2);
            return c;
        }
    }
    return finish2(cg_k_matmul(a, b), CG_OP_MATMUL, a, b, matmul_bw, NULL);
}

/* ------------------------------------------------------------- views */
static bool permute_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    int inv[CG_MAX_DIMS];
    for (int i = 0; i < IN(0)->ndim; i++)
        inv[n->p.i[i]] = i;
    return (gin[0] = cg_view_permute(g, inv)) != NULL;
}
cg_tensor *cg_permute(cg_tensor *a, const int *perm)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_view_permute(a, perm), CG_OP_PERMUTE, a, permute_bw, &n);
    if (n)
        for (int i = 0; i < a->ndim; i++)
            n->p.i[i] = perm[i] < 0 ? perm[i] + a->ndim : perm[i];
    return out;
}
cg_tensor *cg_transpose(cg_tensor *a, int d0, int d1)
{
    if (!a) {
        cg_error_null_input("cg_transpose");
        return NULL;
    }
    int x = cg_norm_dim("transpose", d0, a->ndim), y = cg_norm_dim("transpose", d1, a->ndim);
    if (x < 0 || y < 0)
        return NULL;
    int perm[CG_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        perm[i] = i;
    perm[x] = y;
    perm[y] = x;
    return cg_permute(a, perm);
}

/* Slicing, selecting and diagonals: the gradient is zero except in the
 * viewed part. p.i: [0] dim, [1] start, [2] stop, [3] step, [4] 1 for
 * select; a diagonal's [1] offset, [2] dim1, [3] dim2.
 * When the input already has a gradient that may take a sum in place
 * (cg_node_grad_acc), g is added into its viewed part alone: a sequence
 * sliced one time step at a time (an RNN's x[:, t]) then costs each
 * slice's size in backward, not the whole input's (a zero tensor of the
 * input's shape, and the engine's add of all of it, for every slice: T^2
 * for T steps). The values are the engine's sums, acc + 0 = acc outside
 * the view (but for a -0 there, which stays -0 instead of becoming +0). */
static bool slice_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *acc = cg_node_grad_acc(n, 0);
    cg_tensor *z = acc ? cg_retain(acc) : cg_zeros_like(IN(0));
    if (!z)
        return false;
    int dim = (int)n->p.i[0];
    cg_tensor *v = n->op == CG_OP_DIAGONAL
                       ? cg_view_diagonal(z, n->p.i[1], (int)n->p.i[2], (int)n->p.i[3])
                   : n->p.i[4] ? cg_view_select(z, dim, n->p.i[1])
                               : cg_view_slice(z, dim, n->p.i[1], n->p.i[2], n->p.i[3]);
    bool ok = v && (acc ? cg_k_add_(v, g) : cg_k_copy_(v, g));
    cg_release(v);
    if (!ok) {
        cg_release(z);
        return false;
    }
    gin[0] = z;
    return true;
}
cg_tensor *cg_slice(cg_tensor *a, int dim, int64_t start, int64_t stop, int64_t step)
{
    cg_tensor *out = cg_view_slice(a, dim, start, stop, step);
    if (!out)
        return NULL;
    cg_node *n;
    if (!(out = cg_op_finish1(out, CG_OP_SLICE, a, slice_bw, &n)))
        return NULL;
    if (n) {
        /* the resolved range, as the view resolved it */
        int d = cg_norm_dim("slice", dim, a->ndim);
        int64_t s0 = start < 0 ? start + a->shape[d] : start;
        s0 = s0 < 0 ? 0 : s0 > a->shape[d] ? a->shape[d] : s0;
        n->p.i[0] = d;
        n->p.i[1] = s0;
        /* past the last element taken (s0 + shape * step may overflow) */
        n->p.i[2] = out->shape[d] ? s0 + (out->shape[d] - 1) * step + 1 : s0;
        n->p.i[3] = step;
        n->p.i[4] = 0;
    }
    return out;
}
cg_tensor *cg_narrow(cg_tensor *a, int dim, int64_t start, int64_t len)
{
    if (!a) {
        cg_error_null_input("cg_narrow");
        return NULL;
    }
    int d = cg_norm_dim("narrow", dim, a->ndim);
    if (d < 0)
        return NULL;
    if (start < 0)
        start += a->shape[d];
    if (start < 0 || start > a->shape[d] || len < 0 || len > a->shape[d] - start) {
        char b[96]; /* start + len may overflow: named as a sum */
        cg_set_error("narrow: range [%lld, %lld + %lld) out of bounds for dim %d of shape %s",
                     (long long)start, (long long)start, (long long)len, dim,
                     cg_shape_str(a, b, sizeof b));
        return NULL;
    }
    return cg_slice(a, d, start, start + len, 1);
}
cg_tensor *cg_select(cg_tensor *a, int dim, int64_t index)
{
    cg_tensor *out = cg_view_select(a, dim, index);
    if (!out)
        return NULL;
    cg_node *n;
    if (!(out = cg_op_finish1(out, CG_OP_SELECT, a, slice_bw, &n)))
        return NULL;
    if (n) {
        int d = cg_norm_dim("select", dim, a->ndim);
        n->p.i[0] = d;
        n->p.i[1] = index < 0 ? index + a->shape[d] : index;
        n->p.i[4] = 1;
    }
    return out;
}

cg_tensor *cg_diagonal(cg_tensor *a, int64_t offset, int dim1, int dim2)
{
    cg_node *n;
    cg_tensor *out =
        cg_op_finish1(cg_view_diagonal(a, offset, dim1, dim2), CG_OP_DIAGONAL, a, slice_bw, &n);
    if (n) {
        n->p.i[1] = offset;
        n->p.i[2] = dim1;
        n->p.i[3] = dim2;
    }
    return out;
}

static bool reshape_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_reshape(g, IN(0)->ndim, IN(0)->shape)) != NULL;
}
cg_tensor *cg_squeeze(cg_tensor *a, int dim)
{
    return cg_op_finish1(cg_view_squeeze(a, dim), CG_OP_RESHAPE, a, reshape_bw, NULL);
}
cg_tensor *cg_unsqueeze(cg_tensor *a, int dim)
{
    return cg_op_finish1(cg_view_unsqueeze(a, dim), CG_OP_RESHAPE, a, reshape_bw, NULL);
}
cg_tensor *cg_reshape(cg_tensor *a, int ndim, const int64_t *shape)
{
    return cg_op_finish1(cg_k_reshape(a, ndim, shape), CG_OP_RESHAPE, a, reshape_bw, NULL);
}
cg_tensor *cg_view(cg_tensor *a, int ndim, const int64_t *shape)
{
    return cg_op_finish1(cg_view_reshape(a, ndim, shape), CG_OP_RESHAPE, a, reshape_bw, NULL);
}
static bool identity_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    gin[0] = cg_retain((cg_tensor *)g); /* the engine sums broadcast dims away */
    return true;
}
cg_tensor *cg_expand(cg_tensor *a, int ndim, const int64_t *shape)
{
    return cg_op_finish1(cg_view_expand(a, ndim, shape), CG_OP_EXPAND, a, identity_bw, NULL);
}
cg_tensor *cg_contiguous(const cg_tensor *a)
{
    if (!a) {
        cg_error_null_input("cg_contiguous");
        return NULL;
    }
    if (cg_is_contiguous(a))
        return cg_retain((cg_tensor *)a); /* a itself: its own node carries the gradient */
    return cg_op_finish1(cg_k_clone(a), CG_OP_CONTIGUOUS, (cg_tensor *)a, identity_bw, NULL);
}
cg_tensor *cg_to_contiguous(cg_tensor *a) { return cg_contiguous(a); }

cg_tensor *cg_to(const cg_tensor *a, cg_dtype dt)
{
    if (a && a->dtype == dt)
        return cg_retain((cg_tensor *)a); /* a itself, as PyTorch's .to */
    return cg_op_finish1(cg_k_to(a, dt), CG_OP_TO, (cg_tensor *)a, identity_bw, NULL);
}

cg_tensor *cg_clone(const cg_tensor *a)
{
    return cg_op_finish1(cg_k_clone(a), CG_OP_CLONE, (cg_tensor *)a, identity_bw, NULL);
}

cg_tensor *cg_reshape_copy(const cg_tensor *a, int ndim, const int64_t *shape)
{
    return cg_reshape((cg_tensor *)a, ndim, shape);
}
