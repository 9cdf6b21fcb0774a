/* Differentiable reductions (sum, mean, var, std, logsumexp, max, min):
 * each op's forward and backward side by side. Split from ops.c, whose
 * recording helpers they share (ops_impl.h). */
#include "autograd/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "autograd/ops_impl.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

/* -------------------------------------------------------- reductions */
/* Which dims of an ndim tensor are reduced (all if ndims == 0; a 0-d
 * tensor's dim 0 or -1, as the kernels take it, is none). */
static bool reduced_dims(const char *op, int ndim, int ndims, const int *dims, bool *red)
{
    for (int i = 0; i < ndim; i++)
        red[i] = ndims == 0;
    for (int i = 0; i < ndims; i++) {
        int d = cg_norm_dim(op, dims[i], ndim ? ndim : 1);
        if (d < 0)
            return false;
        if (ndim)
            red[d] = true;
    }
    return true;
}

/* g (reduced shape) viewed with the reduced dims kept as 1, expanded to the
 * input's shape: the backward of a sum. */
static cg_tensor *expand_reduced(const cg_tensor *g, const cg_tensor *in, const cg_node *n)
{
    int ndims = (int)n->p.i[0];
    bool red[CG_MAX_DIMS];
    int dims[CG_MAX_DIMS];
    for (int i = 0; i < ndims; i++)
        dims[i] = (int)n->p.i[2 + i];
    if (!reduced_dims("sum backward", in->ndim, ndims, dims, red))
        return NULL;
    int64_t kshape[CG_MAX_DIMS];
    for (int i = 0; i < in->ndim; i++)
        kshape[i] = red[i] ? 1 : in->shape[i];
    cg_tensor *gk = cg_view_reshape(g, in->ndim, kshape);
    if (!gk) { /* g may be non-contiguous: reshape by copy */
        cg_clear_error();
        gk = cg_k_reshape(g, in->ndim, kshape);
    }
    cg_tensor *e = cg_view_expand(gk, in->ndim, in->shape);
    cg_release(gk);
    return e;
}

static void store_dims(cg_node *n, int ndims, const int *dims)
{
    n->p.i[0] = ndims;
    for (int i = 0; i < ndims && i < CG_MAX_DIMS; i++)
        n->p.i[2 + i] = dims[i];
}

static bool sum_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = expand_reduced(g, IN(0), n)) != NULL;
}
cg_tensor *cg_sum(cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_k_sum(a, ndims, dims, keepdim), CG_OP_SUM, a, sum_bw, &n);
    if (n)
        store_dims(n, ndims, dims);
    return out;
}

static bool mean_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *e = expand_reduced(g, IN(0), n);
    if (!e)
        return false;
    double count = (double)cg_numel(IN(0)) / (double)(cg_numel(g) ? cg_numel(g) : 1);
    gin[0] = cg_k_muls(e, (float)(1.0 / count));
    cg_release(e);
    return gin[0] != NULL;
}
cg_tensor *cg_mean(cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_k_mean(a, ndims, dims, keepdim), CG_OP_MEAN, a, mean_bw, &n);
    if (n)
        store_dims(n, ndims, dims);
    return out;
}

static bool var_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* d var / dx = 2 (x - mean) / (N - correction) */
    int ndims = (int)n->p.i[0];
    int dims[CG_MAX_DIMS];
    for (int i = 0; i < ndims; i++)
        dims[i] = (int)n->p.i[2 + i];
    cg_tensor *mean = cg_k_mean(IN(0), ndims, dims, true);
    cg_tensor *xc = cg_k_sub(IN(0), mean);
    cg_tensor *e = expand_reduced(g, IN(0), n);
    double count = (double)cg_numel(IN(0)) / (double)(cg_numel(g) ? cg_numel(g) : 1);
    cg_tensor *t = cg_k_mul(xc, e);
    gin[0] = cg_k_muls(t, (float)(2.0 / (count - (double)n->p.i[1])));
    cg_release_all(4, mean, xc, e, t);
    return gin[0] != NULL;
}
cg_tensor *cg_var(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim)
{
    cg_node *n;
    cg_tensor *out =
        cg_op_finish1(cg_k_var(a, ndims, dims, correction, keepdim), CG_OP_VAR, a, var_bw, &n);
    if (n) {
        store_dims(n, ndims, dims);
        n->p.i[1] = correction;
    }
    return out;
}

/* std: var's backward of g / (2 std), 0 where std is 0 (PyTorch's) */
static bool std_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *q = cg_k_div(g, n->saved[0]), *h = q ? cg_k_muls(q, 0.5f) : NULL;
    cg_tensor *z = h ? cg_eq_scalar(n->saved[0], 0.0) : NULL;
    cg_tensor *gv = z ? cg_k_masked_fill(h, z, 0.0f) : NULL;
    const bool ok = gv && var_bw(n, gv, gin);
    cg_release_all(4, q, h, z, gv);
    return ok;
}
cg_tensor *cg_std(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim)
{
    cg_node *n;
    cg_tensor *out =
        cg_op_finish1(cg_k_std(a, ndims, dims, correction, keepdim), CG_OP_STD, a, std_bw, &n);
    if (n) {
        store_dims(n, ndims, dims);
        n->p.i[1] = correction;
    }
    if (out && !cg_op_save_output(n, out)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

static bool logsumexp_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g exp(x - lse), g and the saved lse seen with the reduced dims kept */
    cg_tensor *ge = expand_reduced(g, IN(0), n), *le = expand_reduced(n->saved[0], IN(0), n);
    gin[0] = ge && le ? cg_k_logsumexp_backward(IN(0), ge, le) : NULL;
    cg_release_all(2, ge, le);
    return gin[0] != NULL;
}
cg_tensor *cg_logsumexp(cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish1(cg_k_logsumexp(a, ndims, dims, keepdim), CG_OP_LOGSUMEXP, a,
                                   logsumexp_bw, &n);
    if (n)
        store_dims(n, ndims, dims);
    if (out && !cg_op_save_output(n, out)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* max and min: the gradient goes to the element each picked */
static bool extreme_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* saved[0]: the indices (int64) with the reduced dim kept */
    const cg_tensor *idx = n->saved[0];
    if (IN(0)->ndim == 0) /* the max of a scalar is the scalar */
        return (gin[0] = cg_retain((cg_tensor *)g)) != NULL;
    cg_tensor *gk = cg_k_reshape(g, idx->ndim, idx->shape);
    gin[0] = gk ? cg_pick_grad(IN(0), (int)n->p.i[0], idx, gk, true) : NULL;
    cg_release(gk);
    return gin[0] != NULL;
}
static cg_tensor *extreme(cg_tensor *a, int dim, bool keepdim, bool smallest, cg_tensor **indices)
{
    cg_tensor *idx = NULL;
    cg_tensor *out = smallest ? cg_k_min(a, dim, keepdim, &idx) : cg_k_max(a, dim, keepdim, &idx);
    if (!out)
        return NULL;
    cg_node *n;
    if (!(out = cg_op_finish1(out, smallest ? CG_OP_MIN : CG_OP_MAX, a, extreme_bw, &n))) {
        cg_release(idx);
        return NULL;
    }
    if (n) {
        int d = cg_norm_dim(smallest ? "min" : "max", dim, a->ndim);
        n->p.i[0] = d;
        cg_tensor *ik = idx;
        if (!keepdim)
            ik = cg_view_unsqueeze(idx, d);
        else
            cg_retain(ik);
        if (!ik || cg_node_save(n, ik) < 0) {
            cg_release_all(3, ik, idx, out);
            return NULL;
        }
        cg_release(ik);
    }
    if (indices)
        *indices = idx;
    else
        cg_release(idx);
    return out;
}
cg_tensor *cg_max(cg_tensor *a, int dim, bool keepdim, cg_tensor **indices)
{
    return extreme(a, dim, keepdim, false, indices);
}
cg_tensor *cg_min(cg_tensor *a, int dim, bool keepdim, cg_tensor **indices)
{
    return extreme(a, dim, keepdim, true, indices);
}

cg_tensor *cg_sum_all(cg_tensor *a) { return cg_sum(a, 0, NULL, false); }
cg_tensor *cg_mean_all(cg_tensor *a) { return cg_mean(a, 0, NULL, false); }
