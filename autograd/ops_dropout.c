/* The dropouts with a noise tensor (autograd/ops.h): channel-wise
 * (dropout1d, 2d, 3d, feature_dropout), alpha and feature alpha dropout,
 * one node each over core's cg_k_noise_dropout, whose noise the node
 * keeps: the gradient is g times it (PyTorch's, through its
 * input * noise). */
#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

/* saved[0]: the noise, broadcast against g */
static bool noise_dropout_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_mul(g, n->saved[0])) != NULL;
}

/* The dropout op of x with a noise over x's first `lead` dims; x has lo
 * to hi dims (hi CG_MAX_DIMS: any from lo up) */
static cg_tensor *noise_dropout(cg_op op, const char *name, cg_tensor *x, float p, cg_rng *rng,
                                bool training, int lo, int hi, int lead)
{
    if (!x)
        return cg_error_null_input(name), NULL;
    if (!(p >= 0.0f && p <= 1.0f)) {
        cg_set_error("%s: dropout probability has to be between 0 and 1, but got %g", name,
                     (double)p);
        return NULL;
    }
    if (x->ndim < lo || x->ndim > hi) {
        if (hi == CG_MAX_DIMS)
            cg_set_error("%s: Feature dropout requires at least %d dimensions in the input (got "
                         "%d)",
                         name, lo, x->ndim);
        else
            cg_set_error("%s: Expected %dD or %dD input, but received a %dD input", name, lo, hi,
                         x->ndim);
        return NULL;
    }
    if (!training || p == 0.0f || cg_numel(x) == 0)
        return cg_retain(x);
    if (!rng) {
        cg_set_error("%s: NULL generator", name);
        return NULL;
    }
    cg_tensor *noise = NULL;
    cg_node *n;
    cg_tensor *out =
        cg_recorded(cg_k_noise_dropout(x, p, rng, lead, op != CG_OP_FEATURE_DROPOUT, &noise), op, 1,
                    &x, noise_dropout_bw, &n);
    if (n && cg_node_save(n, noise) < 0) {
        cg_release(out);
        out = NULL;
    }
    cg_release(noise);
    return out;
}

cg_tensor *cg_dropout1d(cg_tensor *x, float p, cg_rng *rng, bool training)
{
    return noise_dropout(CG_OP_FEATURE_DROPOUT, "dropout1d", x, p, rng, training, 2, 3,
                         x && x->ndim == 3 ? 2 : 1);
}

cg_tensor *cg_dropout2d(cg_tensor *x, float p, cg_rng *rng, bool training)
{
    return noise_dropout(CG_OP_FEATURE_DROPOUT, "dropout2d", x, p, rng, training, 3, 4, 2);
}

cg_tensor *cg_dropout3d(cg_tensor *x, float p, cg_rng *rng, bool training)
{
    return noise_dropout(CG_OP_FEATURE_DROPOUT, "dropout3d", x, p, rng, training, 4, 5,
                         x && x->ndim == 5 ? 2 : 1);
}

cg_tensor *cg_feature_dropout(cg_tensor *x, float p, cg_rng *rng, bool training)
{
    return noise_dropout(CG_OP_FEATURE_DROPOUT, "feature_dropout", x, p, rng, training, 2,
                         CG_MAX_DIMS, 2);
}

cg_tensor *cg_alpha_dropout(cg_tensor *x, float p, cg_rng *rng, bool training)
{
    return noise_dropout(CG_OP_ALPHA_DROPOUT, "alpha_dropout", x, p, rng, training, 0, CG_MAX_DIMS,
                         x ? x->ndim : 0);
}

cg_tensor *cg_feature_alpha_dropout(cg_tensor *x, float p, cg_rng *rng, bool training)
{
    return noise_dropout(CG_OP_FEATURE_ALPHA_DROPOUT, "feature_alpha_dropout", x, p, rng, training,
                         2, CG_MAX_DIMS, 2);
}
