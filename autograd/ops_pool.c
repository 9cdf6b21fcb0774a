/* cgrad autograd: pooling and batch normalisation, one node each
 * (core/pool.c, interp.c, batchnorm.c compute): F.max_pool1d/2d/3d (with
 * their indices), avg_pool1d/2d/3d, adaptive_avg_pool1d/2d/3d,
 * adaptive_max_pool1d/2d/3d, max_unpool1d/2d/3d, F.interpolate, F.batch_norm, F.group_norm and
 * F.instance_norm; and F.local_response_norm, composed of graph ops as
 * PyTorch composes it. Forward and backward side by side, as in ops.c. */
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

/* ------------------------------------------------------ max pools */
/* p.i[0]: the spatial dims; saved[0]: the indices */
static bool max_pool_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = cg_k_max_pool_backward(g, n->saved[0], n->inputs[0], (int)n->p.i[0]);
    return gin[0] != NULL;
}

/* values of a max pool (kernel's result out, its indices idx) recorded */
static cg_tensor *max_recorded(cg_tensor *x, cg_tensor *out, cg_tensor *idx, cg_op op, int nd,
                               cg_tensor **indices)
{
    cg_node *n;
    out = cg_recorded(out, op, 1, &x, max_pool_bw, &n);
    if (n) {
        n->p.i[0] = nd;
        if (cg_node_save(n, idx) < 0) {
            cg_release(out);
            out = NULL;
        }
    }
    if (out && indices)
        *indices = idx;
    else
        cg_release(idx);
    return out;
}

static const cg_op MAX_OPS[3] = {CG_OP_MAX_POOL1D, CG_OP_MAX_POOL2D, CG_OP_MAX_POOL3D};
static const cg_op AMAX_OPS[3] = {CG_OP_ADAPTIVE_MAX_POOL1D, CG_OP_ADAPTIVE_MAX_POOL2D,
                                  CG_OP_ADAPTIVE_MAX_POOL3D};

static cg_tensor *max_pool(cg_tensor *x, int nd, cg_pool o, cg_tensor **indices)
{
    cg_tensor *idx = NULL, *out = cg_k_max_pool(x, nd, &o, &idx);
    if (indices)
        *indices = NULL;
    return max_recorded(x, out, idx, MAX_OPS[nd - 1], nd, indices);
}
cg_tensor *cg_max_pool1d(cg_tensor *x, cg_pool o) { return max_pool(x, 1, o, NULL); }
cg_tensor *cg_max_pool2d(cg_tensor *x, cg_pool o) { return max_pool(x, 2, o, NULL); }
cg_tensor *cg_max_pool3d(cg_tensor *x, cg_pool o) { return max_pool(x, 3, o, NULL); }
cg_tensor *cg_max_pool1d_with_indices(cg_tensor *x, cg_pool o, cg_tensor **indices)
{
    return max_pool(x, 1, o, indices);
}
cg_tensor *cg_max_pool2d_with_indices(cg_tensor *x, cg_pool o, cg_tensor **indices)
{
    return max_pool(x, 2, o, indices);
}
cg_tensor *cg_max_pool3d_with_indices(cg_tensor *x, cg_pool o, cg_tensor **indices)
{
    return max_pool(x, 3, o, indices);
}

/* size: the nd output sizes */
static cg_tensor *adaptive_max(cg_tensor *x, int nd, const int64_t *size, cg_tensor **indices)
{
    cg_tensor *idx = NULL, *out = cg_k_adaptive_pool(x, nd, true, size, &idx);
    if (indices)
        *indices = NULL;
    return max_recorded(x, out, idx, AMAX_OPS[nd - 1], nd, indices);
}
cg_tensor *cg_adaptive_max_pool1d(cg_tensor *x, int64_t out_size, cg_tensor **indices)
{
    return adaptive_max(x, 1, (int64_t[]){out_size}, indices);
}
cg_tensor *cg_adaptive_max_pool2d(cg_tensor *x, int64_t oh, int64_t ow, cg_tensor **indices)
{
    return adaptive_max(x, 2, (int64_t[]){oh, ow}, indices);
}
cg_tensor *cg_adaptive_max_pool3d(cg_tensor *x, int64_t od, int64_t oh, int64_t ow,
                                  cg_tensor **indices)
{
    return adaptive_max(x, 3, (int64_t[]){od, oh, ow}, indices);
}

/* ------------------------------------------------------ max unpool */
/* p.i[0]: the spatial dims; saved[0]: the indices */
static bool max_unpool_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = cg_k_max_unpool_backward(g, n->saved[0], n->inputs[0], (int)n->p.i[0]);
    return gin[0] != NULL;
}

static cg_tensor *max_unpool(cg_tensor *x, cg_tensor *indices, int nd, cg_pool o,
                             const int64_t *output_size)
{
    static const cg_op ops[3] = {CG_OP_MAX_UNPOOL1D, CG_OP_MAX_UNPOOL2D, CG_OP_MAX_UNPOOL3D};
    cg_node *n;
    cg_tensor *out = cg_recorded(cg_k_max_unpool(x, indices, nd, &o, output_size), ops[nd - 1], 1,
                                 &x, max_unpool_bw, &n);
    if (n) {
        n->p.i[0] = nd;
        if (cg_node_save(n, indices) < 0) {
            cg_release(out);
            out = NULL;
        }
    }
    return out;
}
cg_tensor *cg_max_unpool1d(cg_tensor *x, cg_tensor *indices, cg_pool o, const int64_t *output_size)
{
    return max_unpool(x, indices, 1, o, output_size);
}
cg_tensor *cg_max_unpool2d(cg_tensor *x, cg_tensor *indices, cg_pool o, const int64_t *output_size)
{
    return max_unpool(x, indices, 2, o, output_size);
}
cg_tensor *cg_max_unpool3d(cg_tensor *x, cg_tensor *indices, cg_pool o, const int64_t *output_size)
{
    return max_unpool(x, indices, 3, o, output_size);
}

/* ------------------------------------------------------ average pools */
/* p.i[0]: the spatial dims; ctx: the options (a cg_pool), NULL when adaptive */
static bool avg_pool_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int nd = (int)n->p.i[0];
    gin[0] = n->ctx ? cg_k_avg_pool_backward(g, n->inputs[0], nd, n->ctx)
                    : cg_k_adaptive_avg_pool_backward(g, n->inputs[0], nd);
    return gin[0] != NULL;
}

/* out recorded over x by bw, p.i[0] = nd and a copy of the options o
 * (size bytes; NULL: none) in ctx */
static cg_tensor *opts_recorded(cg_tensor *x, cg_tensor *out, cg_op op, cg_backward_fn bw, int nd,
                                const void *o, size_t size)
{
    cg_node *n;
    out = cg_recorded(out, op, 1, &x, bw, &n);
    if (n) {
        n->p.i[0] = nd;
        if (o && !(n->ctx = malloc(size))) {
            cg_set_error("%s: out of memory", cg_op_name(op));
            cg_release(out);
            return NULL;
        }
        if (o) {
            memcpy(n->ctx, o, size);
            n->ctx_free = free;
        }
    }
    return out;
}

static cg_tensor *avg_recorded(cg_tensor *x, cg_tensor *out, cg_op op, int nd, const cg_pool *o)
{
    return opts_recorded(x, out, op, avg_pool_bw, nd, o, sizeof *o);
}

cg_tensor *cg_avg_pool1d(cg_tensor *x, cg_pool o)
{
    return avg_recorded(x, cg_k_avg_pool(x, 1, &o), CG_OP_AVG_POOL1D, 1, &o);
}
cg_tensor *cg_avg_pool2d(cg_tensor *x, cg_pool o)
{
    return avg_recorded(x, cg_k_avg_pool(x, 2, &o), CG_OP_AVG_POOL2D, 2, &o);
}
cg_tensor *cg_avg_pool3d(cg_tensor *x, cg_pool o)
{
    return avg_recorded(x, cg_k_avg_pool(x, 3, &o), CG_OP_AVG_POOL3D, 3, &o);
}
/* size: the nd output sizes */
static cg_tensor *adaptive_avg(cg_tensor *x, int nd, const int64_t *size)
{
    static const cg_op ops[3] = {CG_OP_ADAPTIVE_AVG_POOL1D, CG_OP_ADAPTIVE_AVG_POOL2D,
                                 CG_OP_ADAPTIVE_AVG_POOL3D};
    return avg_recorded(x, cg_k_adaptive_pool(x, nd, false, size, NULL), ops[nd - 1], nd, NULL);
}
cg_tensor *cg_adaptive_avg_pool1d(cg_tensor *x, int64_t out_size)
{
    return adaptive_avg(x, 1, (int64_t[]){out_size});
}
cg_tensor *cg_adaptive_avg_pool2d(cg_tensor *x, int64_t oh, int64_t ow)
{
    return adaptive_avg(x, 2, (int64_t[]){oh, ow});
}
cg_tensor *cg_adaptive_avg_pool3d(cg_tensor *x, int64_t od, int64_t oh, int64_t ow)
{
    return adaptive_avg(x, 3, (int64_t[]){od, oh, ow});
}

/* ------------------------------------------------------ interpolation */
/* ctx: the options (a cg_interp) */
static bool interp_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = cg_k_interpolate_backward(g, n->inputs[0], n->ctx);
    return gin[0] != NULL;
}

cg_tensor *cg_interpolate(cg_tensor *x, cg_interp o)
{
    return opts_recorded(x, cg_k_interpolate(x, &o), CG_OP_INTERPOLATE, interp_bw, 0, &o, sizeof o);
}

/* ------------------------------------------------------ norms */
/* Batch, group and instance norm: inputs x, weight?, bias? (p.i[0]: has
 * weight, p.i[1]: has bias, p.i[2]: training, num_groups or
 * use_input_stats); saved[0] mean, saved[1] invstd */
static bool norm_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const bool has_w = n->p.i[0], has_b = n->p.i[1];
    const int iw = has_w ? 1 : -1, ib = has_b ? 1 + has_w : -1;
    cg_tensor *dw = NULL, *db = NULL;
    const bool need_w = iw > 0 && cg_node_needs_grad(n, iw);
    const bool need_b = ib > 0 && cg_node_needs_grad(n, ib);
    const cg_tensor *x = n->inputs[0], *w = has_w ? n->inputs[1] : NULL;
    cg_tensor **dx = cg_node_needs_grad(n, 0) ? &gin[0] : NULL;
    cg_tensor **pdw = need_w ? &dw : NULL, **pdb = need_b ? &db : NULL;
    const cg_tensor *m = n->saved[0], *is = n->saved[1];
    bool ok;
    if (n->op == CG_OP_GROUP_NORM)
        ok = cg_k_group_norm_backward(x, g, w, m, is, n->p.i[2], dx, pdw, pdb);
    else if (n->op == CG_OP_INSTANCE_NORM)
        ok = cg_k_instance_norm_backward(x, g, w, m, is, n->p.i[2], dx, pdw, pdb);
    else
        ok = cg_k_batch_norm_backward(x, g, w, m, is, n->p.i[2], dx, pdw, pdb);
    if (!ok)
        return false;
    if (need_w)
        gin[iw] = dw;
    if (need_b)
        gin[ib] = db;
    return true;
}

/* a norm's output (the kernel's, its statistics mean and invstd released
 * here) recorded over x, weight?, bias? with p.i[2] = arg */
static cg_tensor *norm_recorded(cg_tensor *out, cg_op op, cg_tensor *x, cg_tensor *weight,
                                cg_tensor *bias, int64_t arg, cg_tensor *mean, cg_tensor *invstd)
{
    cg_tensor *in[3] = {x, NULL, NULL};
    int nin = 1;
    if (weight)
        in[nin++] = weight;
    if (bias)
        in[nin++] = bias;
    cg_node *n;
    out = cg_recorded(out, op, nin, in, norm_bw, &n);
    if (n) {
        n->p.i[0] = weight != NULL;
        n->p.i[1] = bias != NULL;
        n->p.i[2] = arg;
        if (bias && !weight) /* the backward reads x and the weight */
            cg_node_set_reads(n, 1, false);
        if (cg_node_save(n, mean) < 0 || cg_node_save(n, invstd) < 0) {
            cg_release(out);
            out = NULL;
        }
    }
    cg_release_all(2, mean, invstd);
    return out;
}

cg_tensor *cg_batch_norm(cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                         cg_tensor *weight, cg_tensor *bias, bool training, float momentum,
                         float eps)
{
    cg_tensor *mean = NULL, *invstd = NULL;
    cg_tensor *out = cg_k_batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
                                     eps, &mean, &invstd);
    return norm_recorded(out, CG_OP_BATCH_NORM, x, weight, bias, training, mean, invstd);
}

cg_tensor *cg_group_norm(cg_tensor *x, int64_t num_groups, cg_tensor *weight, cg_tensor *bias,
                         float eps)
{
    cg_tensor *mean = NULL, *invstd = NULL;
    cg_tensor *out = cg_k_group_norm(x, num_groups, weight, bias, eps, &mean, &invstd);
    return norm_recorded(out, CG_OP_GROUP_NORM, x, weight, bias, num_groups, mean, invstd);
}

cg_tensor *cg_instance_norm(cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                            cg_tensor *weight, cg_tensor *bias, bool use_input_stats,
                            float momentum, float eps)
{
    cg_tensor *mean = NULL, *invstd = NULL;
    cg_tensor *out = cg_k_instance_norm(x, running_mean, running_var, weight, bias, use_input_stats,
                                        momentum, eps, &mean, &invstd);
    return norm_recorded(out, CG_OP_INSTANCE_NORM, x, weight, bias, use_input_stats, mean, invstd);
}

/* ------------------------------------------------ local response norm */
/* PyTorch's composition (torch/nn/functional.py): x^2 averaged over a
 * window of `size` channels (zero-padded, size / 2 before, (size - 1) / 2
 * after) by avg_pool2d or avg_pool3d, then x / (k + alpha avg)^beta */
cg_tensor *cg_local_response_norm(cg_tensor *x, int64_t size, float alpha, float beta, float k)
{
    if (!x)
        return cg_error_null_input("local_response_norm"), NULL;
    if (x->ndim < 3 || size < 1) {
        char s[96];
        cg_set_error("local_response_norm: %s (got %s, size %lld)",
                     size < 1 ? "size must be positive"
                              : "the input must have 3 or more dims [N, C, *]",
                     cg_shape_str(x, s, sizeof s), (long long)size);
        return NULL;
    }
    if (cg_numel(x) == 0)
        return cg_retain(x);
    const int64_t N = x->shape[0], C = x->shape[1], before = size / 2, after = (size - 1) / 2;
    cg_pool o = {.kernel_size = {size, 1, 1}, .stride = {1, 1, 1}};
    cg_tensor *sq = cg_mul(x, x), *v, *p = NULL, *a = NULL;
    if (x->ndim == 3) {
        v = sq ? cg_unsqueeze(sq, 1) : NULL; /* [N, 1, C, L] */
        p = v ? cg_pad(v, 4, (int64_t[]){0, 0, before, after}, CG_PAD_CONSTANT, 0) : NULL;
        a = p ? cg_avg_pool2d(p, o) : NULL;
    } else {
        v = sq ? cg_reshape(sq, 5, (int64_t[]){N, 1, C, x->shape[2], -1}) : NULL;
        p = v ? cg_pad(v, 6, (int64_t[]){0, 0, 0, 0, before, after}, CG_PAD_CONSTANT, 0) : NULL;
        a = p ? cg_avg_pool3d(p, o) : NULL;
    }
    cg_tensor *d = a ? cg_reshape(a, x->ndim, x->shape) : NULL; /* the squeeze(1) and view */
    cg_tensor *s = d ? cg_muls(d, alpha) : NULL, *t = s ? cg_adds(s, k) : NULL;
    cg_tensor *w = t ? cg_pow(t, beta) : NULL, *y = w ? cg_div(x, w) : NULL;
    cg_release_all(8, sq, v, p, a, d, s, t, w);
    return y;
}
