/* cgrad core: PyTorch's F.unfold and F.fold (declared in core/ops.h),
 * the convolution's im2col and col2im (core/conv.c's row copies and
 * plane sums, conv_impl.h) as ops of their own: a convolution of groups 1
 * whose cols are the result (unfold) or the input (fold). Each is the
 * other's adjoint, so its backward. The copies and the sums in a fixed
 * order give the same bits for any thread count. */
#include <stdio.h>
#include <string.h>

#include "core/conv_impl.h"
#include "core/upcast.h"

typedef cg_conv_geom geom;

/* the numbers of cfg valid (as the convolution's, and a positive
 * kernel); false + error naming op */
static bool check_cfg(const char *op, const cg_fold_cfg *c)
{
    if (!c)
        return cg_error_null_arg(op, "cfg");
    cg_conv_cfg z = CG_CONV_DEFAULT;
    for (int i = 0; i < 2; i++) {
        z.stride[i] = c->stride[i], z.padding[i] = c->padding[i], z.dilation[i] = c->dilation[i];
        if (c->kernel_size[i] < 1) {
            cg_set_error("%s: kernel_size must be positive (got %lld in spatial dim %d)", op,
                         (long long)c->kernel_size[i], i);
            return false;
        }
    }
    return cg_conv_cfg_common(op, 2, &z);
}

/* x a float32 or bfloat16 tensor of nd or nd + 1 dims, none empty but
 * the batch; false + error naming op */
static bool check_input(const char *op, const cg_tensor *x, int nd)
{
    char s[96];
    if (x->dtype != CG_F32 && x->dtype != CG_BF16) {
        cg_set_error("%s: input is %s, expected float32 or bfloat16", op, cg_dtype_name(x->dtype));
        return false;
    }
    bool empty = false;
    for (int i = x->ndim == nd + 1; i < x->ndim; i++)
        empty |= x->shape[i] == 0;
    if ((x->ndim != nd && x->ndim != nd + 1) || empty) {
        cg_set_error("%s: input %s, expected %d dims (unbatched) or %d (batched), none empty "
                     "but the batch",
                     op, cg_shape_str(x, s, sizeof s), nd, nd + 1);
        return false;
    }
    return true;
}

/* the geometry of the convolution (groups 1) whose input is [N, C, H, W]
 * and whose cols are [N, C KH KW, OH OW]: the sliding blocks per dim
 * (possibly below 1) in OH, OW */
static geom blocks(const char *op, bool batched, int64_t N, int64_t C, int64_t H, int64_t W,
                   const cg_fold_cfg *c)
{
    geom g = {.op = op, .batched = batched, .N = N, .C = C, .G = 1, .Cg = C, .H = H, .W = W};
    g.D = g.OD = g.KD = g.sd = g.dd = 1; /* depth 1 */
    g.KH = c->kernel_size[0], g.KW = c->kernel_size[1];
    g.sh = c->stride[0], g.sw = c->stride[1], g.dh = c->dilation[0], g.dw = c->dilation[1];
    g.ph = c->padding[0], g.pw = c->padding[1];
    g.OH = (H + 2 * g.ph - g.dh * (g.KH - 1) - 1) / g.sh + 1;
    g.OW = (W + 2 * g.pw - g.dw * (g.KW - 1) - 1) / g.sw + 1;
    g.P = g.OH * g.OW, g.Kp = g.KH * g.KW, g.CK = g.O = g.Og = C * g.Kp;
    return g;
}

/* "kernel_size (2, 3), dilation (1, 1), padding (0, 0), stride (1, 1)" */
static const char *cfg_str(const cg_fold_cfg *c, char *buf, size_t n)
{
    snprintf(buf, n,
             "kernel_size (%lld, %lld), dilation (%lld, %lld), padding (%lld, %lld), "
             "stride (%lld, %lld)",
             (long long)c->kernel_size[0], (long long)c->kernel_size[1], (long long)c->dilation[0],
             (long long)c->dilation[1], (long long)c->padding[0], (long long)c->padding[1],
             (long long)c->stride[0], (long long)c->stride[1]);
    return buf;
}

cg_tensor *cg_k_unfold(const cg_tensor *x, const cg_fold_cfg *cfg)
{
    if (!x)
        return cg_error_null_input("cg_k_unfold"), NULL;
    if (!check_cfg("unfold", cfg) || !check_input("unfold", x, 3))
        return NULL;
    const int s0 = x->ndim == 4; /* x's channel dim */
    const geom g = blocks("unfold", s0, s0 ? x->shape[0] : 1, x->shape[s0], x->shape[s0 + 1],
                          x->shape[s0 + 2], cfg);
    if (g.OH < 1 || g.OW < 1) {
        char s[192];
        cg_set_error("unfold: input spatial size (%lld, %lld) with %s gives (%lld, %lld) sliding "
                     "blocks, each must be at least one",
                     (long long)g.H, (long long)g.W, cfg_str(cfg, s, sizeof s), (long long)g.OH,
                     (long long)g.OW);
        return NULL;
    }
    const int64_t shape[3] = {g.N, g.CK, g.P};
    cg_tensor *out = cg_empty(2 + s0, shape + !s0);
    if (!out || g.N == 0)
        return out;
    int64_t xs[5];
    cg_tensor *xf = cg_conv_x_f32(x, &g, xs);
    if (!xf) {
        cg_release(out);
        return NULL;
    }
    cg_conv_im2col(&g, cg_data(xf), xs, cg_data(out));
    cg_release(xf);
    return out;
}

cg_tensor *cg_k_fold(const cg_tensor *x, int64_t oh, int64_t ow, const cg_fold_cfg *cfg)
{
    if (!x)
        return cg_error_null_input("cg_k_fold"), NULL;
    if (!check_cfg("fold", cfg) || !check_input("fold", x, 2))
        return NULL;
    char s1[96], s2[192];
    if (oh < 1 || ow < 1) {
        cg_set_error("fold: output_size must be positive (got (%lld, %lld))", (long long)oh,
                     (long long)ow);
        return NULL;
    }
    const int s0 = x->ndim == 3; /* x's channel dim */
    const int64_t taps = cfg->kernel_size[0] * cfg->kernel_size[1], L = x->shape[s0 + 1];
    if (x->shape[s0] % taps) {
        cg_set_error("fold: input %s's dim %d (%lld) is not divisible by the kernel's taps %lld "
                     "* %lld",
                     cg_shape_str(x, s1, sizeof s1), s0, (long long)x->shape[s0],
                     (long long)cfg->kernel_size[0], (long long)cfg->kernel_size[1]);
        return NULL;
    }
    const geom g = blocks("fold", s0, s0 ? x->shape[0] : 1, x->shape[s0] / taps, oh, ow, cfg);
    if (g.OH < 1 || g.OW < 1 || g.P != L) {
        cg_set_error("fold: output_size (%lld, %lld) with %s gives %lld * %lld sliding blocks, "
                     "but input %s has %lld (its dim %d)",
                     (long long)oh, (long long)ow, cfg_str(cfg, s2, sizeof s2), (long long)g.OH,
                     (long long)g.OW, cg_shape_str(x, s1, sizeof s1), (long long)L, s0 + 1);
        return NULL;
    }
    const int64_t shape[4] = {g.N, g.C, oh, ow};
    cg_tensor *out = cg_empty(3 + s0, shape + !s0);
    if (!out || g.N == 0)
        return out;
    cg_tensor *xc = cg_upcast_dense(x, false);
    if (!xc) {
        cg_release(out);
        return NULL;
    }
    cg_conv_col2im(&g, cg_data(xc), cg_data(out));
    cg_release(xc);
    return out;
}
