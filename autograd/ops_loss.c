/* The pointwise losses of torch.nn.functional: l1_loss, smooth_l1_loss,
 * huber_loss, mse_loss, binary_cross_entropy_with_logits, kl_div and
 * binary_cross_entropy, each
 * a node of its pointwise
 * loss (core/ops.h cg_k_loss: PyTorch's expressions, forward and
 * backward) and its reduction's (cg_mean_all, cg_sum_all; batchmean a sum
 * divided by the batch); and F.normalize and F.cosine_similarity, an op
 * each. Forward and backward side by side, as in ops.c. */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

/* The pointwise losses as ops: p.i[1] the kind, p.f[0] beta or delta */
static const struct {
    cg_op op;
    const char *name;
} LOSS_OPS[] = {
    [CG_K_LOSS_L1] = {CG_OP_L1_LOSS, "l1_loss"},
    [CG_K_LOSS_SMOOTH_L1] = {CG_OP_SMOOTH_L1_LOSS, "smooth_l1_loss"},
    [CG_K_LOSS_HUBER] = {CG_OP_HUBER_LOSS, "huber_loss"},
    [CG_K_LOSS_MSE] = {CG_OP_MSE_LOSS, "mse_loss"},
    [CG_K_LOSS_BCE_LOGITS] = {CG_OP_BCE_WITH_LOGITS, "binary_cross_entropy_with_logits"},
    [CG_K_LOSS_KL_DIV] = {CG_OP_KL_DIV, "kl_div"},
    [CG_K_LOSS_KL_DIV_LOG] = {CG_OP_KL_DIV, "kl_div"},
    [CG_K_LOSS_BCE] = {CG_OP_BINARY_CROSS_ENTROPY, "binary_cross_entropy"},
};

static bool loss_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_k_loss_kind kind = (cg_k_loss_kind)n->p.i[1];
    for (int i = 0; i < 2; i++)
        if (cg_node_needs_grad(n, i) &&
            !(gin[i] = cg_k_loss_backward(kind, n->inputs[0], n->inputs[1], g, n->p.f[0], i)))
            return false;
    return true;
}

/* The mean, the sum, the losses themselves, or their sum over the size of
 * dim 0 (summed with its dims kept, so that the division by a float32 0-d
 * keeps l's dtype, as PyTorch's division by a number does) */
cg_tensor *cg_loss_reduce(cg_tensor *l, cg_reduction r)
{
    if (r == CG_REDUCTION_MEAN)
        return cg_mean_all(l);
    if (r == CG_REDUCTION_SUM || (r == CG_REDUCTION_BATCHMEAN && l->ndim == 0))
        return cg_sum_all(l);
    if (r == CG_REDUCTION_NONE)
        return cg_retain(l);
    cg_tensor *s = cg_sum(l, 0, NULL, true), *b = cg_scalar((float)l->shape[0]);
    cg_tensor *q = s && b ? cg_div(s, b) : NULL, *out = q ? cg_reshape(q, 0, NULL) : NULL;
    cg_release_all(3, s, b, q);
    return out;
}

bool cg_loss_reduction_ok(const char *op, cg_reduction r, bool batchmean)
{
    if ((unsigned)r > CG_REDUCTION_BATCHMEAN || (r == CG_REDUCTION_BATCHMEAN && !batchmean)) {
        cg_set_error("%s: reduction %d is not one of CG_REDUCTION_MEAN, _SUM, _NONE%s", op, (int)r,
                     batchmean ? ", _BATCHMEAN" : " (batchmean is kl_div's)");
        return false;
    }
    return true;
}

/* r is one of the loss's reductions (batchmean: kl_div's only) */
static bool reduction_ok(cg_k_loss_kind kind, cg_reduction r)
{
    const bool kl = kind == CG_K_LOSS_KL_DIV || kind == CG_K_LOSS_KL_DIV_LOG;
    return cg_loss_reduction_ok(LOSS_OPS[kind].name, r, kl);
}

static cg_tensor *loss(cg_k_loss_kind kind, cg_tensor *x, cg_tensor *y, cg_reduction r, float p)
{
    const char *op = LOSS_OPS[kind].name;
    if (!x || !y) {
        cg_error_null_input(op);
        return NULL;
    }
    if (!reduction_ok(kind, r))
        return NULL;
    if (!cg_same_shape(x, y)) {
        char a[96], b[96];
        cg_set_error("%s: input %s and target %s differ in shape", op, cg_shape_str(x, a, sizeof a),
                     cg_shape_str(y, b, sizeof b));
        return NULL;
    }
    cg_tensor *in[2] = {x, y};
    cg_node *n;
    cg_tensor *l = cg_recorded(cg_k_loss(kind, x, y, p), LOSS_OPS[kind].op, 2, in, loss_bw, &n);
    if (!l)
        return NULL;
    if (n) {
        n->p.i[1] = kind;
        n->p.f[0] = p;
    }
    cg_tensor *out = cg_loss_reduce(l, r);
    cg_release(l);
    return out;
}

cg_tensor *cg_l1_loss(cg_tensor *x, cg_tensor *y, cg_reduction r)
{
    return loss(CG_K_LOSS_L1, x, y, r, 0.0f);
}

cg_tensor *cg_smooth_l1_loss(cg_tensor *x, cg_tensor *y, cg_reduction r, float beta)
{
    if (!(beta >= 0.0f)) { /* NaN too */
        cg_set_error("smooth_l1_loss: beta is %g, expected >= 0 (as PyTorch)", (double)beta);
        return NULL;
    }
    return loss(CG_K_LOSS_SMOOTH_L1, x, y, r, beta);
}

cg_tensor *cg_huber_loss(cg_tensor *x, cg_tensor *y, cg_reduction r, float delta)
{
    if (!(delta > 0.0f)) {
        cg_set_error("huber_loss: delta is %g, expected > 0 (as PyTorch)", (double)delta);
        return NULL;
    }
    return loss(CG_K_LOSS_HUBER, x, y, r, delta);
}

cg_tensor *cg_mse_loss(cg_tensor *x, cg_tensor *y, cg_reduction r)
{
    return loss(CG_K_LOSS_MSE, x, y, r, 0.0f);
}

cg_tensor *cg_binary_cross_entropy_with_logits(cg_tensor *x, cg_tensor *y, cg_reduction r)
{
    return cg_binary_cross_entropy_with_logits_ex(x, y, NULL, NULL, r);
}

bool cg_loss_weight_arg(const char *op, const char *arg, const cg_tensor *w, const cg_tensor *x)
{
    if (!w)
        return true;
    if (!cg_dtype_is_float(w->dtype)) {
        cg_set_error("%s: argument '%s' has dtype %s, expected a float dtype", op, arg,
                     cg_dtype_name(w->dtype));
        return false;
    }
    int64_t out[CG_MAX_DIMS];
    int nd = cg_broadcast_shapes(op, x->ndim, x->shape, w->ndim, w->shape, out);
    if (nd < 0 || nd != x->ndim || memcmp(out, x->shape, (size_t)nd * sizeof *out) != 0) {
        char a[96], b[96];
        cg_set_error("%s: argument '%s' of shape %s does not broadcast to the input's %s", op, arg,
                     cg_shape_str(w, a, sizeof a), cg_shape_str(x, b, sizeof b));
        return false;
    }
    return true;
}

/* l times weight (NULL: l; detached), in dtype dt (as PyTorch's in-place
 * products keep x's), reduced by r */
static cg_tensor *weighted_reduce(cg_tensor *l, cg_dtype dt, const cg_tensor *weight,
                                  cg_reduction r)
{
    cg_tensor *wd = weight ? cg_detach(weight) : NULL;
    cg_tensor *lw = weight ? (wd ? cg_mul(l, wd) : NULL) : cg_retain(l);
    cg_tensor *lx = lw && lw->dtype != dt ? cg_to(lw, dt) : cg_retain(lw);
    cg_tensor *out = lx ? cg_loss_reduce(lx, r) : NULL;
    cg_release_all(3, wd, lw, lx);
    return out;
}

/* l + (p - 1) y softplus(-x): the pos_weight term (p detached), as
 * PyTorch's (1 + (p-1) y) (log(1 + e^-|x|) + max(-x, 0)) + (1 - y) x */
static cg_tensor *pos_weighted(cg_tensor *l, cg_tensor *x, cg_tensor *y, const cg_tensor *p)
{
    cg_tensor *pd = cg_detach(p), *p1 = pd ? cg_adds(pd, -1.0f) : NULL;
    cg_tensor *nx = p1 ? cg_neg(x) : NULL, *sp = nx ? cg_softplus(nx, 1.0f, 20.0f) : NULL;
    cg_tensor *py = sp ? cg_mul(p1, y) : NULL, *t = py ? cg_mul(py, sp) : NULL;
    cg_tensor *out = t ? cg_add(l, t) : NULL;
    cg_release_all(6, pd, p1, nx, sp, py, t);
    return out;
}

cg_tensor *cg_binary_cross_entropy_with_logits_ex(cg_tensor *x, cg_tensor *y,
                                                  const cg_tensor *weight,
                                                  const cg_tensor *pos_weight, cg_reduction r)
{
    const char *op = "binary_cross_entropy_with_logits";
    if (!weight && !pos_weight)
        return loss(CG_K_LOSS_BCE_LOGITS, x, y, r, 0.0f);
    if (!reduction_ok(CG_K_LOSS_BCE_LOGITS, r) ||
        (x && y &&
         (!cg_loss_weight_arg(op, "weight", weight, x) ||
          !cg_loss_weight_arg(op, "pos_weight", pos_weight, x))))
        return NULL;
    cg_tensor *l = loss(CG_K_LOSS_BCE_LOGITS, x, y, CG_REDUCTION_NONE, 0.0f);
    cg_tensor *lp = l && pos_weight ? pos_weighted(l, x, y, pos_weight) : cg_retain(l);
    cg_tensor *out = lp ? weighted_reduce(lp, l->dtype, weight, r) : NULL;
    cg_release_all(2, l, lp);
    return out;
}

cg_tensor *cg_binary_cross_entropy(cg_tensor *p, cg_tensor *y, const cg_tensor *weight,
                                   cg_reduction r)
{
    const char *op = "binary_cross_entropy";
    if (!p || !y || !reduction_ok(CG_K_LOSS_BCE, r) || !cg_same_shape(p, y))
        return loss(CG_K_LOSS_BCE, p, y, r, 0.0f); /* NULL and its message */
    if (!cg_loss_weight_arg(op, "weight", weight, p) ||
        !cg_k_values_within(op, p, 0.0, 1.0, false,
                            "all elements of input should be between 0 and 1 (as PyTorch)"))
        return NULL;
    cg_tensor *l = loss(CG_K_LOSS_BCE, p, y, CG_REDUCTION_NONE, 0.0f);
    cg_tensor *out = l ? weighted_reduce(l, l->dtype, weight, r) : NULL;
    cg_release(l);
    return out;
}

cg_tensor *cg_kl_div(cg_tensor *input, cg_tensor *target, cg_reduction r, bool log_target)
{
    return loss(log_target ? CG_K_LOSS_KL_DIV_LOG : CG_K_LOSS_KL_DIV, input, target, r, 0.0f);
}

/* ------------------------------------------- normalize, cosine_similarity */
static bool normalize_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = cg_k_normalize_backward(n->inputs[0], g, n->p.f[0], (int)n->p.i[1], n->p.f[1]);
    return gin[0] != NULL;
}
cg_tensor *cg_normalize(cg_tensor *a, float p, int dim, float eps)
{
    cg_node *n;
    cg_tensor *out =
        cg_recorded(cg_k_normalize(a, p, dim, eps), CG_OP_NORMALIZE, 1, &a, normalize_bw, &n);
    if (n) { /* f[0], f[1] share i[0]'s bytes */
        n->p.f[0] = p;
        n->p.f[1] = eps;
        n->p.i[1] = dim;
    }
    return out;
}

static bool cosine_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *d[2];
    if (!cg_k_cosine_similarity_backward(n->inputs[0], n->inputs[1], g, (int)n->p.i[1], n->p.f[0],
                                         &d[0], &d[1]))
        return false;
    for (int i = 0; i < 2; i++) {
        if (cg_node_needs_grad(n, i))
            gin[i] = d[i];
        else
            cg_release(d[i]);
    }
    return true;
}
cg_tensor *cg_cosine_similarity(cg_tensor *x1, cg_tensor *x2, int dim, float eps)
{
    cg_node *n;
    cg_tensor *in[2] = {x1, x2};
    cg_tensor *out = cg_recorded(cg_k_cosine_similarity(x1, x2, dim, eps), CG_OP_COSINE_SIMILARITY,
                                 2, in, cosine_bw, &n);
    if (n) {
        n->p.f[0] = eps;
        n->p.i[1] = dim;
    }
    return out;
}
