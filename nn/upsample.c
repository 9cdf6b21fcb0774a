/* cgrad nn: nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d
 * (nn/upsample.h). */
#include "autograd/ops.h"
#include "nn/upsample.h"

static cg_tensor *upsample_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    /* the input's rank and sizes are checked once, by core */
    return cg_interpolate(in[0], ((cg_upsample *)m)->opts);
}

/* An Upsample of o named type */
static cg_upsample *upsample_new(const cg_interp *o, const char *type)
{
    if (!cg_k_interp_options_ok(o, type))
        return NULL;
    cg_upsample *u = (cg_upsample *)cg_module_alloc(sizeof *u, type, NULL);
    if (!u)
        return NULL;
    u->base.forward = upsample_impl;
    u->opts = *o;
    return u;
}

cg_upsample *cg_upsample_new(const cg_interp *o) { return upsample_new(o, "Upsample"); }

/* The options of a 2d constructor: size or scale_factor (two each) */
static cg_interp two_d(cg_interp_mode mode, const int64_t *size, const double *scale_factor)
{
    cg_interp o = {.mode = mode, .align_corners = mode == CG_INTERP_BILINEAR};
    for (int i = 0; i < 2; i++) {
        o.size[i] = size ? size[i] : 0;
        o.scale_factor[i] = scale_factor ? scale_factor[i] : 0.0;
    }
    return o;
}

cg_upsample *cg_upsampling_nearest2d_new(const int64_t *size, const double *scale_factor)
{
    const cg_interp o = two_d(CG_INTERP_NEAREST, size, scale_factor);
    return upsample_new(&o, "UpsamplingNearest2d");
}

cg_upsample *cg_upsampling_bilinear2d_new(const int64_t *size, const double *scale_factor)
{
    const cg_interp o = two_d(CG_INTERP_BILINEAR, size, scale_factor);
    return upsample_new(&o, "UpsamplingBilinear2d");
}

cg_tensor *cg_upsample_forward(cg_upsample *u, cg_tensor *x)
{
    if (!u || !x) {
        cg_error_null_input("cg_upsample_forward");
        return NULL;
    }
    return cg_module_call(&u->base, upsample_impl, 1, &x, NULL);
}
