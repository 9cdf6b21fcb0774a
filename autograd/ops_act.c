/* torch.nn's activations with a weight or with draws, and the pixel
 * shuffles: F.prelu, F.rrelu, F.pixel_shuffle, F.pixel_unshuffle,
 * F.channel_shuffle. Forward
 * and backward side by side, as in ops.c; the shuffles are views and one
 * copy (cg_reshape), whose gradients are theirs. */
#include <stdint.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define IN(i) (n->inputs[(i)])
#define NEEDS(i) cg_node_needs_grad(n, (i))

/* ------------------------------------------------------------- prelu */
static bool prelu_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return cg_k_prelu_backward(IN(0), IN(1), g, NEEDS(0) ? &gin[0] : NULL,
                               NEEDS(1) ? &gin[1] : NULL);
}
cg_tensor *cg_prelu(cg_tensor *x, cg_tensor *weight)
{
    cg_node *n;
    cg_tensor *in[2] = {x, weight};
    return cg_recorded(cg_k_prelu(x, weight), CG_OP_PRELU, 2, in, prelu_bw, &n);
}

/* ------------------------------------------------------------- rrelu */
/* training: g noise (saved[0]); evaluation: leaky_relu's backward at x,
 * the slope in p.f[0] */
static bool rrelu_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = n->saved[0] ? cg_k_mul(g, n->saved[0]) : cg_k_leaky_relu_backward(IN(0), g, n->p.f[0]);
    return gin[0] != NULL;
}
cg_tensor *cg_rrelu(cg_tensor *x, float lower, float upper, bool training, cg_rng *rng)
{
    if (training && !rng) {
        cg_error_null_arg("rrelu", "rng");
        return NULL;
    }
    cg_tensor *noise, *out = cg_k_rrelu(x, lower, upper, training ? rng : NULL, &noise);
    cg_node *n;
    out = cg_recorded(out, CG_OP_RRELU, 1, &x, rrelu_bw, &n);
    if (n) {
        n->p.f[0] = cg_k_rrelu_slope(lower, upper);
        if (noise) {
            if (cg_node_save(n, noise) < 0) {
                cg_release_all(2, out, noise);
                return NULL;
            }
            cg_node_set_reads(n, 0, false);
        }
    }
    cg_release(noise);
    return out;
}

/* --------------------------------------------------- pixel shuffles */
/* x's dims before the last 3 as one, then C, H, W, into d[4]: false +
 * one line for fewer than 3 dims or a factor below 1 */
static bool shuffle_args(const char *op, const char *what, const cg_tensor *x, int64_t r,
                         int64_t d[4])
{
    if (!x)
        return cg_error_null_input(op), false;
    if (x->ndim < 3) {
        char s[96];
        cg_set_error("%s: the input must have at least 3 dims [*, C, H, W] (got %s)", op,
                     cg_shape_str(x, s, sizeof s));
        return false;
    }
    if (r < 1) {
        cg_set_error("%s: %s must be positive (got %lld)", op, what, (long long)r);
        return false;
    }
    d[0] = 1;
    for (int k = 0; k < x->ndim - 3; k++)
        d[0] *= x->shape[k];
    for (int k = 1; k < 4; k++)
        d[k] = x->shape[x->ndim - 4 + k];
    return true;
}

/* x viewed as `from` (6 dims), permuted by perm, reshaped to x's leading
 * dims followed by the last three of `to` */
static cg_tensor *shuffled(cg_tensor *x, const int64_t *from, const int *perm, const int64_t *to)
{
    int64_t shape[CG_MAX_DIMS];
    const int lead = x->ndim - 3;
    for (int d = 0; d < lead; d++)
        shape[d] = x->shape[d];
    for (int d = 0; d < 3; d++)
        shape[lead + d] = to[d];
    cg_tensor *v = cg_reshape(x, 6, from);
    cg_tensor *p = v ? cg_permute(v, perm) : NULL;
    cg_tensor *y = p ? cg_reshape(p, x->ndim, shape) : NULL;
    cg_release_all(2, v, p);
    return y;
}

cg_tensor *cg_pixel_shuffle(cg_tensor *x, int64_t upscale_factor)
{
    const int64_t r = upscale_factor;
    int64_t d[4]; /* b, c, h, w */
    if (!shuffle_args("pixel_shuffle", "upscale_factor", x, r, d))
        return NULL;
    if (r > 3037000499LL || d[1] % (r * r)) { /* r * r past int64: not a divisor of c */
        cg_set_error("pixel_shuffle: the channels (dim -3) of %lld are not divisible by "
                     "upscale_factor^2 (%lld^2)",
                     (long long)d[1], (long long)r);
        return NULL;
    }
    const int64_t oc = d[1] / (r * r);
    const int perm[6] = {0, 1, 4, 2, 5, 3};
    return shuffled(x, (const int64_t[]){d[0], oc, r, r, d[2], d[3]}, perm,
                    (const int64_t[]){oc, d[2] * r, d[3] * r});
}

cg_tensor *cg_pixel_unshuffle(cg_tensor *x, int64_t downscale_factor)
{
    const int64_t r = downscale_factor;
    int64_t d[4];
    if (!shuffle_args("pixel_unshuffle", "downscale_factor", x, r, d))
        return NULL;
    for (int k = 2; k < 4; k++)
        if (d[k] % r) {
            cg_set_error("pixel_unshuffle: the %s (dim %d) of %lld is not divisible by "
                         "downscale_factor %lld",
                         k == 3 ? "width" : "height", k - 4, (long long)d[k], (long long)r);
            return NULL;
        }
    if (r > 3037000499LL || d[1] > INT64_MAX / (r * r)) {
        cg_set_error("pixel_unshuffle: %lld channels times downscale_factor^2 (%lld^2) "
                     "overflow",
                     (long long)d[1], (long long)r);
        return NULL;
    }
    const int perm[6] = {0, 1, 3, 5, 2, 4};
    return shuffled(x, (const int64_t[]){d[0], d[1], d[2] / r, r, d[3] / r, r}, perm,
                    (const int64_t[]){d[1] * r * r, d[2] / r, d[3] / r});
}

/* ---------------------------------------------------- channel shuffle */
cg_tensor *cg_channel_shuffle(cg_tensor *x, int64_t groups)
{
    if (!x)
        return cg_error_null_input("channel_shuffle"), NULL;
    char s[96];
    if (x->ndim < 3 || x->ndim >= CG_MAX_DIMS) {
        cg_set_error("channel_shuffle: the input must have 3 to %d dims [N, C, *] (got %s)",
                     CG_MAX_DIMS - 1, cg_shape_str(x, s, sizeof s));
        return NULL;
    }
    if (groups < 1 || x->shape[1] % groups) {
        cg_set_error(groups < 1 ? "channel_shuffle: groups must be positive (got %lld, %lld "
                                  "channels)"
                                : "channel_shuffle: groups %lld does not divide the %lld "
                                  "channels (dim 1)",
                     (long long)groups, (long long)x->shape[1]);
        return NULL;
    }
    int64_t split[CG_MAX_DIMS] = {x->shape[0], groups, x->shape[1] / groups};
    for (int d = 2; d < x->ndim; d++)
        split[d + 1] = x->shape[d];
    cg_tensor *v = cg_reshape(x, x->ndim + 1, split);
    cg_tensor *t = v ? cg_transpose(v, 1, 2) : NULL;
    cg_tensor *y = t ? cg_reshape(t, x->ndim, x->shape) : NULL;
    cg_release_all(2, v, t);
    return y;
}
