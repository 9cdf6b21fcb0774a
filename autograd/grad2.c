/* Gradients of gradients: each op's backward written with differentiable
 * ops, which a walk with create_graph runs instead of the op's own (raw
 * kernels: engine.c). Three kinds, the first two here with the table at
 * the end, the third in grad2_remake.c:
 *   - a formula of graph ops (add, matmul, softmax, the views, ...);
 *   - an op linear piece by piece (relu, clamp, dropout, maximum, ...):
 *     g times its derivative there, a constant (the op's own backward of
 *     ones), which every later derivative leaves as it is;
 *   - a recomputation (linear, the norms, cross-entropy, attention, var,
 *     the smooth activations): the op's function made again from
 *     differentiable ops over stand-ins of its inputs, and its gradient
 *     taken by a walk with create_graph through that alone. Each is a
 *     few lines of the op's forward, and its gradients of every order are
 *     those of the ops it is made of.
 * The gradients are computed in float32 from what the forward kept, as
 * the first-order backwards: an op whose node kept only bf16 copies of its
 * inputs (bf16 precision) is refused in one line. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph_impl.h"
#include "autograd/ops.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

/* ----------------------------------------------------------- helpers */
/* The op's own output, as a tensor of the graph again: the alias its node
 * saved in slot, with the node as its maker (held), so that what is
 * computed from it is differentiated through the op once more. */
static cg_tensor *output_of(cg_node *n, int slot)
{
    cg_tensor *h = n->saved[slot] ? cg_view_alias(n->saved[slot]) : NULL;
    if (!h)
        return NULL;
    cg_node_hold(n);
    h->node = n;
    h->requires_grad = true;
    return h;
}

/* g, of the reduced shape, seen with the reduced dims kept and expanded
 * to in's shape (the dims in p.i[2..], p.i[0] of them; 0: all) */
static cg_tensor *expand_back(cg_node *n, const cg_tensor *g, const cg_tensor *in)
{
    const int nd = (int)n->p.i[0];
    int64_t kshape[CG_MAX_DIMS];
    for (int i = 0; i < in->ndim; i++)
        kshape[i] = nd ? in->shape[i] : 1;
    for (int i = 0; i < nd; i++) {
        int d = cg_norm_dim("backward", (int)n->p.i[2 + i], in->ndim ? in->ndim : 1);
        if (d < 0)
            return NULL;
        if (in->ndim)
            kshape[d] = 1;
    }
    cg_tensor *k = cg_reshape((cg_tensor *)g, in->ndim, kshape);
    cg_tensor *e = k ? cg_expand(k, in->ndim, in->shape) : NULL;
    cg_release(k);
    return e;
}

/* g * d for a gradient of the output's shape: out-of-place, recorded */
static bool times(cg_tensor **gin, const cg_tensor *g, cg_tensor *d)
{
    *gin = d ? cg_mul((cg_tensor *)g, d) : NULL;
    cg_release(d);
    return *gin != NULL;
}

/* ------------------------------------------------ formulas of graph ops */
static bool add_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    for (int i = 0; i < n->n_inputs; i++)
        if (NEEDS(i))
            gin[i] = cg_retain((cg_tensor *)g);
    return true;
}
static bool sub_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0))
        gin[0] = cg_retain((cg_tensor *)g);
    return !NEEDS(1) || (gin[1] = cg_neg((cg_tensor *)g)) != NULL;
}
static bool mul_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0) && !(gin[0] = cg_mul((cg_tensor *)g, IN(1))))
        return false;
    return !NEEDS(1) || (gin[1] = cg_mul((cg_tensor *)g, IN(0))) != NULL;
}
static bool div_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *gb = cg_div((cg_tensor *)g, IN(1));
    if (!gb)
        return false;
    if (NEEDS(1)) { /* -(g / b) (a / b) */
        cg_tensor *q = cg_div(IN(0), IN(1)), *t = q ? cg_mul(gb, q) : NULL;
        gin[1] = t ? cg_neg(t) : NULL;
        cg_release_all(2, q, t);
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
static bool muls_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_muls((cg_tensor *)g, n->p.f[0])) != NULL;
}
static bool neg_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    return (gin[0] = cg_neg((cg_tensor *)g)) != NULL;
}
static bool exp_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return times(&gin[0], g, output_of(n, 0));
}
static bool log_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_div((cg_tensor *)g, IN(0))) != NULL;
}
static bool sqrt_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *y = output_of(n, 0), *q = y ? cg_div((cg_tensor *)g, y) : NULL;
    gin[0] = q ? cg_muls(q, 0.5f) : NULL;
    cg_release_all(2, y, q);
    return gin[0] != NULL;
}
static bool rsqrt_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *y = output_of(n, 0), *y3 = y ? cg_pow(y, 3.0f) : NULL;
    cg_tensor *d = y3 ? cg_muls(y3, -0.5f) : NULL;
    cg_release_all(2, y, y3);
    return times(&gin[0], g, d);
}
static bool pow_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const float p = n->p.f[0];
    if (p == 0.0f)
        return (gin[0] = cg_zeros_like(g)) != NULL;
    cg_tensor *d = cg_pow(IN(0), p - 1.0f), *dp = d ? cg_muls(d, p) : NULL;
    cg_release(d);
    return times(&gin[0], g, dp);
}
static bool tanh_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *y = output_of(n, 0), *y2 = y ? cg_mul(y, y) : NULL;
    cg_tensor *m = y2 ? cg_neg(y2) : NULL, *d = m ? cg_adds(m, 1.0f) : NULL;
    cg_release_all(3, y, y2, m);
    return times(&gin[0], g, d);
}
static bool sigmoid_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *y = output_of(n, 0), *m = y ? cg_neg(y) : NULL;
    cg_tensor *om = m ? cg_adds(m, 1.0f) : NULL, *d = om ? cg_mul(y, om) : NULL;
    cg_release_all(3, y, m, om);
    return times(&gin[0], g, d);
}
static bool sin_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return times(&gin[0], g, cg_cos(IN(0)));
}
static bool cos_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *s = cg_sin(IN(0)), *d = s ? cg_neg(s) : NULL;
    cg_release(s);
    return times(&gin[0], g, d);
}
static bool erf_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* 2 / sqrt(pi) exp(-x^2) */
    cg_tensor *x2 = cg_mul(IN(0), IN(0)), *m = x2 ? cg_muls(x2, -1.0f) : NULL;
    cg_tensor *e = m ? cg_exp(m) : NULL, *d = e ? cg_muls(e, 1.1283791670955126f) : NULL;
    cg_release_all(3, x2, m, e);
    return times(&gin[0], g, d);
}
static bool softmax_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* y (g - sum(g y)) along the dim */
    const int dim = (int)n->p.i[0];
    cg_tensor *y = output_of(n, 0), *gy = y ? cg_mul((cg_tensor *)g, y) : NULL;
    cg_tensor *s = gy ? cg_sum(gy, 1, &dim, true) : NULL;
    cg_tensor *d = s ? cg_sub((cg_tensor *)g, s) : NULL;
    gin[0] = d ? cg_mul(y, d) : NULL;
    cg_release_all(4, y, gy, s, d);
    return gin[0] != NULL;
}
static bool log_softmax_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g - exp(y) sum(g) along the dim */
    const int dim = (int)n->p.i[0];
    cg_tensor *y = output_of(n, 0), *p = y ? cg_exp(y) : NULL;
    cg_tensor *s = p ? cg_sum((cg_tensor *)g, 1, &dim, true) : NULL;
    cg_tensor *ps = s ? cg_mul(p, s) : NULL;
    gin[0] = ps ? cg_sub((cg_tensor *)g, ps) : NULL;
    cg_release_all(4, y, p, s, ps);
    return gin[0] != NULL;
}
static bool sum_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = expand_back(n, g, IN(0))) != NULL;
}
static bool mean_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *e = expand_back(n, g, IN(0));
    const double count = (double)cg_numel(IN(0)) / (double)(cg_numel(g) ? cg_numel(g) : 1);
    gin[0] = e ? cg_muls(e, (float)(1.0 / count)) : NULL;
    cg_release(e);
    return gin[0] != NULL;
}
static bool logsumexp_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g exp(x - lse), both seen with the reduced dims kept */
    cg_tensor *l = output_of(n, 0), *le = l ? expand_back(n, l, IN(0)) : NULL;
    cg_tensor *ge = le ? expand_back(n, g, IN(0)) : NULL;
    cg_tensor *s = ge ? cg_sub(IN(0), le) : NULL, *e = s ? cg_exp(s) : NULL;
    gin[0] = e ? cg_mul(ge, e) : NULL;
    cg_release_all(5, l, le, ge, s, e);
    return gin[0] != NULL;
}
static bool matmul_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0)) {
        cg_tensor *bt = cg_transpose(IN(1), -1, -2);
        gin[0] = bt ? cg_matmul((cg_tensor *)g, bt) : NULL;
        cg_release(bt);
        if (!gin[0])
            return false;
    }
    if (NEEDS(1)) {
        cg_tensor *at = cg_transpose(IN(0), -1, -2);
        gin[1] = at ? cg_matmul(at, (cg_tensor *)g) : NULL;
        cg_release(at);
        if (!gin[1])
            return false;
    }
    return true;
}
static bool permute_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    int inv[CG_MAX_DIMS];
    for (int i = 0; i < IN(0)->ndim; i++)
        inv[n->p.i[i]] = i;
    return (gin[0] = cg_permute((cg_tensor *)g, inv)) != NULL;
}
static bool reshape_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_reshape((cg_tensor *)g, IN(0)->ndim, IN(0)->shape)) != NULL;
}
static bool identity_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    gin[0] = cg_retain((cg_tensor *)g); /* the engine sums broadcast dims, converts dtypes */
    return true;
}

/* g added into zeros of in's shape at index along dim: index_add's (a
 * 1-d index) or scatter_add's (an index of g's shape) */
static cg_tensor *placed(const cg_tensor *in, int dim, const cg_tensor *index, const cg_tensor *g,
                         bool scatter)
{
    cg_tensor *z = cg_zeros_dtype(g->dtype, in->ndim, in->shape);
    cg_tensor *r = !z        ? NULL
                   : scatter ? cg_scatter_add(z, dim, index, (cg_tensor *)g)
                             : cg_index_add(z, dim, index, (cg_tensor *)g);
    cg_release(z);
    return r;
}
/* slice and select: g placed at the viewed indices (a 1-d int64 index) */
static bool slice_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int dim = (int)n->p.i[0];
    const bool sel = n->p.i[4] != 0;
    const int64_t len = sel ? 1 : g->shape[dim], step = sel ? 1 : n->p.i[3];
    cg_tensor *idx = cg_empty_dtype(CG_I64, 1, &len);
    if (!idx)
        return false;
    int64_t *d = cg_data_i64(idx);
    for (int64_t k = 0; k < len; k++)
        d[k] = n->p.i[1] + k * step;
    cg_tensor *gk = sel ? cg_unsqueeze((cg_tensor *)g, dim) : cg_retain((cg_tensor *)g);
    gin[0] = gk ? placed(IN(0), dim, idx, gk, false) : NULL;
    cg_release_all(2, idx, gk);
    return gin[0] != NULL;
}
static bool concat_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int dim = (int)n->p.i[0];
    const bool stack = n->op == CG_OP_STACK;
    int64_t start = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        const int64_t len = stack ? 1 : IN(i)->shape[dim];
        if (NEEDS(i) && !(gin[i] = stack ? cg_select((cg_tensor *)g, dim, start)
                                         : cg_slice((cg_tensor *)g, dim, start, start + len, 1)))
            return false;
        start += len;
    }
    return true;
}
static bool index_select_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = placed(IN(0), (int)n->p.i[0], n->saved[0], g, false)) != NULL;
}
static bool gather_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = placed(IN(0), (int)n->p.i[0], n->saved[0], g, true)) != NULL;
}
static bool index_add_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0))
        gin[0] = cg_retain((cg_tensor *)g);
    if (!NEEDS(1))
        return true;
    const int dim = (int)n->p.i[0];
    gin[1] = n->op == CG_OP_INDEX_ADD ? cg_index_select((cg_tensor *)g, dim, n->saved[0])
                                      : cg_gather((cg_tensor *)g, dim, n->saved[0]);
    return gin[1] != NULL;
}
static bool extreme_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_tensor *idx = n->saved[0];
    if (IN(0)->ndim == 0)
        return (gin[0] = cg_retain((cg_tensor *)g)) != NULL;
    cg_tensor *gk = cg_reshape((cg_tensor *)g, idx->ndim, idx->shape);
    gin[0] = gk ? placed(IN(0), (int)n->p.i[0], idx, gk, true) : NULL;
    cg_release(gk);
    return gin[0] != NULL;
}
static bool where_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *zero = cg_scalar(0.0f);
    bool ok = zero != NULL;
    if (ok && NEEDS(1))
        ok = (gin[1] = cg_where(IN(0), (cg_tensor *)g, zero)) != NULL;
    if (ok && NEEDS(2))
        ok = (gin[2] = cg_where(IN(0), zero, (cg_tensor *)g)) != NULL;
    cg_release(zero);
    return ok;
}
static bool masked_fill_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_masked_fill((cg_tensor *)g, IN(1), 0.0f)) != NULL;
}
static bool triangle_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = n->op == CG_OP_TRIU ? cg_triu((cg_tensor *)g, n->p.i[0])
                                 : cg_tril((cg_tensor *)g, n->p.i[0]);
    return gin[0] != NULL;
}
static bool cumsum_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* the sums from the end: flipped, summed, flipped back */
    const int dim = (int)n->p.i[0];
    if (g->ndim == 0)
        return (gin[0] = cg_retain((cg_tensor *)g)) != NULL;
    cg_tensor *f = cg_flip((cg_tensor *)g, 1, &dim), *c = f ? cg_cumsum(f, dim) : NULL;
    gin[0] = c ? cg_flip(c, 1, &dim) : NULL;
    cg_release_all(2, f, c);
    return gin[0] != NULL;
}
static bool flip_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    int dims[CG_MAX_DIMS];
    for (int i = 0; i < n->p.i[0]; i++)
        dims[i] = (int)n->p.i[1 + i];
    return (gin[0] = cg_flip((cg_tensor *)g, (int)n->p.i[0], dims)) != NULL;
}

static bool unfold_fold_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int64_t *q = n->p.i;
    const cg_fold_cfg c = {{q[0], q[1]}, {q[2], q[3]}, {q[4], q[5]}, {q[6], q[7]}};
    const cg_tensor *x = IN(0);
    gin[0] = n->op == CG_OP_UNFOLD
                 ? cg_fold((cg_tensor *)g, x->shape[x->ndim - 2], x->shape[x->ndim - 1], &c)
                 : cg_unfold((cg_tensor *)g, &c);
    return gin[0] != NULL;
}
/* The max pools (ops_pool.c: p.i[0] the spatial dims, saved[0] the
 * indices, flat within each plane): g scattered to where each came from */
static bool max_pool_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_tensor *x = IN(0), *idx = n->saved[0];
    const int nd = (int)n->p.i[0], lead = x->ndim - nd;
    int64_t xs[CG_MAX_DIMS], is[CG_MAX_DIMS];
    for (int i = 0; i < lead; i++)
        xs[i] = is[i] = x->shape[i];
    xs[lead] = cg_numel_shape(nd, x->shape + lead);
    is[lead] = cg_numel_shape(nd, idx->shape + lead);
    cg_tensor *i2 = cg_k_reshape(idx, lead + 1, is), *g2 = cg_reshape((cg_tensor *)g, lead + 1, is);
    cg_tensor *z = cg_zeros_dtype(g->dtype, lead + 1, xs);
    cg_tensor *r = i2 && g2 && z ? cg_scatter_add(z, lead, i2, g2) : NULL;
    gin[0] = r ? cg_reshape(r, x->ndim, x->shape) : NULL;
    cg_release_all(4, i2, g2, z, r);
    return gin[0] != NULL;
}

/* -------------------------------------------- ops linear in x */
/* An op linear in its input, y = L x with L fixed by its options (the
 * average pools, interpolation, padding in any mode, repeat): its
 * backward is L^T g, a kernel. For create_graph that is recorded as an op
 * of its own, adjoint(g), whose backward is L gg: the op applied again,
 * recorded, whose backward is the adjoint again, so that every order
 * closes. The adjoint's node keeps what applying the op again takes (the
 * op's node may be freed before the adjoint's backward runs: it is no
 * input of it). */
typedef struct {
    cg_op op;
    int64_t p0, p1; /* the op's p.i[0] and p.i[1] */
    int out_ndim, in_ndim;
    int64_t out_shape[CG_MAX_DIMS], in_shape[CG_MAX_DIMS];
    bool has_opts;
    union {
        cg_pool pool;
        cg_interp interp;
        int64_t pads[2 * CG_MAX_DIMS];
    } o;
} again_ctx;

static cg_tensor *again(const again_ctx *c, cg_tensor *x)
{
    const int64_t *s = c->out_shape + c->out_ndim - c->p0;
    int64_t sizes[CG_MAX_DIMS];
    switch (c->op) {
    case CG_OP_AVG_POOL1D: return cg_avg_pool1d(x, c->o.pool);
    case CG_OP_AVG_POOL2D: return cg_avg_pool2d(x, c->o.pool);
    case CG_OP_AVG_POOL3D: return cg_avg_pool3d(x, c->o.pool);
    case CG_OP_ADAPTIVE_AVG_POOL1D: return cg_adaptive_avg_pool1d(x, s[0]);
    case CG_OP_ADAPTIVE_AVG_POOL2D: return cg_adaptive_avg_pool2d(x, s[0], s[1]);
    case CG_OP_ADAPTIVE_AVG_POOL3D: return cg_adaptive_avg_pool3d(x, s[0], s[1], s[2]);
    case CG_OP_INTERPOLATE: return cg_interpolate(x, c->o.interp);
    case CG_OP_PAD: /* L alone: a constant pad's value is no part of it */
        return cg_pad(x, (int)c->p0, c->o.pads, (cg_pad_mode)c->p1, 0.0f);
    default: /* repeat: the copies of each dim, from the shapes */
        for (int i = 0, lead = c->out_ndim - c->in_ndim; i < c->out_ndim; i++) {
            const int64_t in = i < lead ? 1 : c->in_shape[i - lead];
            sizes[i] = in ? c->out_shape[i] / in : 1;
        }
        return cg_repeat(x, c->out_ndim, sizes);
    }
}
static bool adjoint_bw(cg_node *a, const cg_tensor *gg, cg_tensor **gin)
{
    return (gin[0] = again(a->ctx, (cg_tensor *)gg)) != NULL;
}
/* What applying n's op again takes, in a new again_ctx (NULL: out of
 * memory, said) */
static again_ctx *again_of(const cg_node *n)
{
    again_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return cg_set_error("%s: out of memory", cg_node_name(n)), NULL;
    c->op = n->op;
    c->p0 = n->p.i[0];
    c->p1 = n->p.i[1];
    c->out_ndim = n->out_ndim;
    memcpy(c->out_shape, n->out_shape, sizeof c->out_shape);
    c->in_ndim = n->inputs[0]->ndim;
    memcpy(c->in_shape, n->inputs[0]->shape, sizeof(int64_t) * (size_t)c->in_ndim);
    if (n->op == CG_OP_PAD)
        memcpy(c->o.pads, n->ctx, sizeof(int64_t) * (size_t)n->p.i[0]);
    else if (n->op == CG_OP_INTERPOLATE)
        c->o.interp = *(const cg_interp *)n->ctx;
    else if (n->ctx && n->op != CG_OP_REPEAT)
        c->o.pool = *(const cg_pool *)n->ctx;
    return c;
}
static bool linear_op_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *d[1] = {NULL};
    cg_no_grad_begin();
    bool ok = n->backward(n, g, d);
    cg_no_grad_end();
    cg_tensor *gt = (cg_tensor *)g;
    cg_node *a = ok ? cg_record(d[0], CG_OP_ADJOINT, 1, &gt, adjoint_bw) : NULL;
    if (ok && cg_record_failed(a, 1, &gt))
        ok = false;
    if (ok && a) {
        a->bw_composes = true; /* its backward records the op again */
        a->ctx = again_of(n);
        a->ctx_free = free;
        ok = a->ctx != NULL;
    }
    if (!ok) {
        cg_release(d[0]);
        return false;
    }
    gin[0] = d[0];
    return true;
}
static bool roll_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int count = (int)n->p.i[0];
    const int64_t *l = n->ctx; /* the shifts negated (ops_misc.c) */
    const int *dims = n->p.i[1] ? (const int *)(l + count) : NULL;
    return (gin[0] = cg_roll((cg_tensor *)g, count, l, dims)) != NULL;
}

static bool masked_select_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g put back where the mask is true, in zeros of the broadcast shape */
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_broadcast_shapes("masked_select backward", IN(0)->ndim, IN(0)->shape,
                                       IN(1)->ndim, IN(1)->shape, shape);
    cg_tensor *z = nd >= 0 ? cg_zeros_dtype(g->dtype, nd, shape) : NULL;
    gin[0] = z ? cg_masked_scatter(z, IN(1), (cg_tensor *)g) : NULL;
    cg_release(z);
    return gin[0] != NULL;
}

/* ----------------------------------------- linear piece by piece */
/* g times the op's derivative where it is: its own backward of ones (a
 * constant: the second derivative is 0 wherever the first exists) */
static bool piecewise_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *ones = cg_full_dtype(g->dtype, g->ndim, g->shape, 1.0);
    cg_tensor *d[8] = {0};
    if (!ones || n->n_inputs > 8) {
        cg_release(ones);
        return false;
    }
    cg_no_grad_begin();
    bool ok = n->backward(n, ones, d);
    cg_no_grad_end();
    cg_release(ones);
    for (int i = 0; i < n->n_inputs; i++) {
        if (ok && NEEDS(i) && d[i]) {
            cg_tensor *di = d[i];
            d[i] = NULL;
            ok = times(&gin[i], g, di);
        }
        cg_release(d[i]);
    }
    return ok;
}

/* ------------------------------------------------------------ table */
static const cg_backward_fn graph_bw[CG_OP_COUNT] = {
    [CG_OP_ADD] = add_g,
    [CG_OP_SUB] = sub_g,
    [CG_OP_MUL] = mul_g,
    [CG_OP_DIV] = div_g,
    [CG_OP_ADDS] = identity_g,
    [CG_OP_MULS] = muls_g,
    [CG_OP_NEG] = neg_g,
    [CG_OP_EXP] = exp_g,
    [CG_OP_LOG] = log_g,
    [CG_OP_SQRT] = sqrt_g,
    [CG_OP_RSQRT] = rsqrt_g,
    [CG_OP_POW] = pow_g,
    [CG_OP_TANH] = tanh_g,
    [CG_OP_SIGMOID] = sigmoid_g,
    [CG_OP_SIN] = sin_g,
    [CG_OP_COS] = cos_g,
    [CG_OP_ERF] = erf_g,
    [CG_OP_RELU] = piecewise_g,
    [CG_OP_ABS] = piecewise_g,
    [CG_OP_HARDSIGMOID] = piecewise_g,
    [CG_OP_RELU6] = piecewise_g,
    [CG_OP_LEAKY_RELU] = piecewise_g,
    [CG_OP_HARDTANH] = piecewise_g,
    [CG_OP_SOFTSHRINK] = piecewise_g,
    [CG_OP_HARDSHRINK] = piecewise_g,
    [CG_OP_THRESHOLD] = piecewise_g,
    [CG_OP_CLAMP] = piecewise_g,
    [CG_OP_MAXIMUM] = piecewise_g,
    [CG_OP_MINIMUM] = piecewise_g,
    [CG_OP_DROPOUT] = piecewise_g,
    [CG_OP_FEATURE_DROPOUT] = piecewise_g,
    [CG_OP_ALPHA_DROPOUT] = piecewise_g,
    [CG_OP_FEATURE_ALPHA_DROPOUT] = piecewise_g,
    [CG_OP_NAN_TO_NUM] = piecewise_g,
    [CG_OP_CLAMP_TENSOR] = piecewise_g,
    [CG_OP_FMOD] = piecewise_g,
    [CG_OP_REMAINDER] = piecewise_g,
    [CG_OP_MASKED_SELECT] = masked_select_g,
    [CG_OP_L1_LOSS] = piecewise_g,
    [CG_OP_WHERE] = where_g,
    [CG_OP_MASKED_FILL] = masked_fill_g,
    [CG_OP_SUM] = sum_g,
    [CG_OP_MEAN] = mean_g,
    [CG_OP_LOGSUMEXP] = logsumexp_g,
    [CG_OP_MAX] = extreme_g,
    [CG_OP_MIN] = extreme_g,
    [CG_OP_MATMUL] = matmul_g,
    [CG_OP_PERMUTE] = permute_g,
    [CG_OP_SLICE] = slice_g,
    [CG_OP_SELECT] = slice_g,
    [CG_OP_EXPAND] = identity_g,
    [CG_OP_RESHAPE] = reshape_g,
    [CG_OP_CONTIGUOUS] = identity_g,
    [CG_OP_CLONE] = identity_g,
    [CG_OP_TO] = identity_g,
    [CG_OP_SOFTMAX] = softmax_g,
    [CG_OP_LOG_SOFTMAX] = log_softmax_g,
    [CG_OP_CONCAT] = concat_g,
    [CG_OP_STACK] = concat_g,
    [CG_OP_INDEX_SELECT] = index_select_g,
    [CG_OP_GATHER] = gather_g,
    [CG_OP_INDEX_ADD] = index_add_g,
    [CG_OP_SCATTER_ADD] = index_add_g,
    [CG_OP_TRIL] = triangle_g,
    [CG_OP_TRIU] = triangle_g,
    [CG_OP_CUMSUM] = cumsum_g,
    [CG_OP_FLIP] = flip_g,
    [CG_OP_PAD] = linear_op_g,
    [CG_OP_AVG_POOL1D] = linear_op_g,
    [CG_OP_AVG_POOL2D] = linear_op_g,
    [CG_OP_AVG_POOL3D] = linear_op_g,
    [CG_OP_ADAPTIVE_AVG_POOL1D] = linear_op_g,
    [CG_OP_ADAPTIVE_AVG_POOL2D] = linear_op_g,
    [CG_OP_ADAPTIVE_AVG_POOL3D] = linear_op_g,
    [CG_OP_INTERPOLATE] = linear_op_g,
    [CG_OP_REPEAT] = linear_op_g,
    [CG_OP_ROLL] = roll_g,
    [CG_OP_UNFOLD] = unfold_fold_g,
    [CG_OP_FOLD] = unfold_fold_g,
    [CG_OP_MAX_POOL1D] = max_pool_g,
    [CG_OP_MAX_POOL2D] = max_pool_g,
    [CG_OP_MAX_POOL3D] = max_pool_g,
    [CG_OP_ADAPTIVE_MAX_POOL1D] = max_pool_g,
    [CG_OP_ADAPTIVE_MAX_POOL2D] = max_pool_g,
    [CG_OP_ADAPTIVE_MAX_POOL3D] = max_pool_g,
};

const char *cg_graph_backward_why_not(const cg_node *n) { return cg_remade_why_not(n); }

cg_backward_fn cg_graph_backward_of(cg_op op)
{
    if ((unsigned)op >= CG_OP_COUNT)
        return NULL;
    return graph_bw[op] ? graph_bw[op] : cg_remade_backward_of(op);
}
