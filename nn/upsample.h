/* cgrad nn: PyTorch's nn.Upsample and its thin constructors
 * nn.UpsamplingNearest2d and nn.UpsamplingBilinear2d (nn/upsample.c,
 * over autograd's cg_interpolate). No parameters, no buffers: the
 * options are core/ops.h's cg_interp (mode, size or scale_factor,
 * align_corners, recompute_scale_factor), checked once when the module
 * is made; the input's rank and sizes when it runs. */
#ifndef CG_NN_UPSAMPLE_H
#define CG_NN_UPSAMPLE_H

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    cg_module base;
    cg_interp opts;
} cg_upsample;

/* nn.Upsample(size, scale_factor, mode, align_corners,
 * recompute_scale_factor): o's checks those of cg_interpolate that need
 * no input (refused in one line). */
cg_upsample *cg_upsample_new(const cg_interp *o);
/* nn.UpsamplingNearest2d(size, scale_factor): mode nearest;
 * nn.UpsamplingBilinear2d: mode bilinear, align_corners true. size (two
 * sizes) or scale_factor (two scales), the other NULL. */
cg_upsample *cg_upsampling_nearest2d_new(const int64_t *size, const double *scale_factor);
cg_upsample *cg_upsampling_bilinear2d_new(const int64_t *size, const double *scale_factor);
/* cg_interpolate(x, the module's options): a new tensor. */
cg_tensor *cg_upsample_forward(cg_upsample *u, cg_tensor *x);

#ifdef __cplusplus
}
#endif
#endif
