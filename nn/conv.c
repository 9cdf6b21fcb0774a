/* nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d
 * and nn.ConvTranspose3d (nn/conv.h) on autograd's cg_conv1d / cg_conv2d /
 * cg_conv3d and cg_conv_transpose1d / cg_conv_transpose2d /
 * cg_conv_transpose3d. */
#include <math.h>
#include <stdio.h>

#include "autograd/ops.h"
#include "nn/conv.h"
#include "nn/init.h"

static cg_tensor *conv_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_conv *c = (cg_conv *)m;
    const cg_conv_cfg *cfg = args ? args : &c->cfg; /* args: forward(x, output_size)'s */
    /* the input's rank, channels and length are checked once, by core */
    static cg_tensor *(*const fns[2][3])(cg_tensor *, cg_tensor *, cg_tensor *,
                                         const cg_conv_cfg *) = {
        {cg_conv1d, cg_conv2d, cg_conv3d},
        {cg_conv_transpose1d, cg_conv_transpose2d, cg_conv_transpose3d}};
    return fns[c->transposed][c->nd - 1](in[0], c->weight, c->bias, c->transposed ? cfg : &c->cfg);
}

cg_tensor *cg_conv_forward(cg_conv *m, cg_tensor *x)
{
    if (!m || !x) {
        cg_error_null_input("cg_conv_forward");
        return NULL;
    }
    return cg_module_call(&m->base, conv_impl, 1, &x, NULL);
}

cg_tensor *cg_conv_transpose_forward(cg_conv *m, cg_tensor *x, int n_size,
                                     const int64_t *output_size)
{
    if (!m || !x) {
        cg_error_null_input("cg_conv_transpose_forward");
        return NULL;
    }
    if (!m->transposed) {
        cg_set_error("cg_conv_transpose_forward: the module is a %s, not a transposed "
                     "convolution (output_size is ConvTranspose's)",
                     m->base.type);
        return NULL;
    }
    cg_conv_cfg c = m->cfg;
    if (!cg_conv_transpose_output_padding(m->nd, x, m->weight, n_size, output_size, &c))
        return NULL;
    return cg_module_call(&m->base, conv_impl, 1, &x, &c);
}

/* a parameter of shape registered as name into *field, NULL + error */
static cg_tensor *param(cg_module *m, const char *name, cg_tensor **field, int ndim,
                        const int64_t *shape)
{
    cg_tensor *t = cg_zeros(ndim, shape);
    cg_tensor *r = cg_module_add_param_at(m, name, t, field);
    cg_release(t);
    return r;
}

static bool check_sizes(const char *type, int nd, bool transposed, int64_t in, int64_t out,
                        const int64_t *k, const cg_conv_cfg *cfg)
{
    if (in < 1 || out < 1 || k[0] < 1 || k[1] < 1 || k[2] < 1) {
        char ks[72]; /* "3", "3x5", "2x3x5" */
        int at = 0;
        for (int i = 0; i < nd; i++)
            at +=
                snprintf(ks + at, sizeof ks - (size_t)at, "%s%lld", i ? "x" : "", (long long)k[i]);
        cg_set_error("%s: channels and kernel size must be positive (in %lld, out %lld, kernel "
                     "%s)",
                     type, (long long)in, (long long)out, ks);
        return false;
    }
    if (!(transposed ? cg_conv_transpose_cfg_check : cg_conv_cfg_check)(type, nd, cfg))
        return false;
    if (in % cfg->groups || out % cfg->groups) {
        cg_set_error("%s: in_channels %lld and out_channels %lld must be divisible by groups %lld",
                     type, (long long)in, (long long)out, (long long)cfg->groups);
        return false;
    }
    return true;
}

/* a transposed one's weight is [in, out / groups, ...] and its fan_in
 * out / groups times the taps, as PyTorch's (its reset_parameters reads
 * the weight's dim 1) */
static cg_conv *conv_new(int nd, bool transposed, int64_t in, int64_t out, const int64_t *k,
                         const cg_conv_cfg *cfg, bool bias, cg_rng *rng)
{
    static const char *types[2][3] = {{"Conv1d", "Conv2d", "Conv3d"},
                                      {"ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"}};
    const char *type = types[transposed][nd - 1];
    const cg_conv_cfg c = cfg ? *cfg : CG_CONV_DEFAULT;
    if (!check_sizes(type, nd, transposed, in, out, k, &c))
        return NULL;
    cg_conv *m = (cg_conv *)cg_module_alloc(sizeof *m, type, NULL);
    if (!m)
        return NULL;
    *m = (cg_conv){m->base, nd, in, out, {k[0], k[1], k[2]}, c, NULL, NULL, transposed};
    cg_rng local = cg_rng_new(0); /* rng NULL: seeded 0 */
    rng = rng ? rng : &local;
    const int64_t shape[5] = {transposed ? in : out, (transposed ? out : in) / c.groups, k[0], k[1],
                              k[2]};
    const double fan_in =
        (double)shape[1] * (double)m->kernel_size[0] * m->kernel_size[1] * m->kernel_size[2];
    const int64_t bshape[1] = {out};
    bool ok = param(&m->base, "weight", &m->weight, nd + 2, shape) &&
              cg_init_kaiming_uniform_(m->weight, rng, sqrt(5.0));
    if (ok && bias) {
        const float bound = (float)(1.0 / sqrt(fan_in));
        ok = param(&m->base, "bias", &m->bias, 1, bshape) &&
             cg_init_uniform_(m->bias, rng, -bound, bound);
    }
    if (!ok) {
        cg_module_free(&m->base);
        return NULL;
    }
    m->base.forward = conv_impl;
    return m;
}

cg_conv *cg_conv1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                       const cg_conv_cfg *cfg, bool bias, cg_rng *rng)
{
    const int64_t k[3] = {kernel_size, 1, 1};
    return conv_new(1, false, in_channels, out_channels, k, cfg, bias, rng);
}

cg_conv *cg_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_h,
                       int64_t kernel_w, const cg_conv_cfg *cfg, bool bias, cg_rng *rng)
{
    const int64_t k[3] = {kernel_h, kernel_w, 1};
    return conv_new(2, false, in_channels, out_channels, k, cfg, bias, rng);
}

cg_conv *cg_conv3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_d,
                       int64_t kernel_h, int64_t kernel_w, const cg_conv_cfg *cfg, bool bias,
                       cg_rng *rng)
{
    const int64_t k[3] = {kernel_d, kernel_h, kernel_w};
    return conv_new(3, false, in_channels, out_channels, k, cfg, bias, rng);
}

cg_conv *cg_conv_transpose1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                                 const cg_conv_cfg *cfg, bool bias, cg_rng *rng)
{
    const int64_t k[3] = {kernel_size, 1, 1};
    return conv_new(1, true, in_channels, out_channels, k, cfg, bias, rng);
}

cg_conv *cg_conv_transpose2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_h,
                                 int64_t kernel_w, const cg_conv_cfg *cfg, bool bias, cg_rng *rng)
{
    const int64_t k[3] = {kernel_h, kernel_w, 1};
    return conv_new(2, true, in_channels, out_channels, k, cfg, bias, rng);
}

cg_conv *cg_conv_transpose3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_d,
                                 int64_t kernel_h, int64_t kernel_w, const cg_conv_cfg *cfg,
                                 bool bias, cg_rng *rng)
{
    const int64_t k[3] = {kernel_d, kernel_h, kernel_w};
    return conv_new(3, true, in_channels, out_channels, k, cfg, bias, rng);
}
