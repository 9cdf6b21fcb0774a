/* cgrad nn: modules without parameters over [N, C, ...] inputs, for
 * cg_sequential as PyTorch's nn.Sequential takes them: pools
 * (nn.MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d,
 * AdaptiveAvgPool1d/2d/3d, MaxUnpool1d/2d/3d), padding (nn.ConstantPad1d/2d/3d, ZeroPad2d,
 * ReflectionPad1d/2d/3d, ReplicationPad1d/2d/3d, CircularPad1d/2d/3d),
 * nn.Flatten, nn.Unfold, nn.Fold, nn.PixelShuffle, nn.PixelUnshuffle,
 * nn.ChannelShuffle and nn.LocalResponseNorm. Each holds its options and runs one functional op
 * (autograd/ops.h: cg_max_pool2d, cg_pad, cg_flatten, ...), which checks
 * them against the input; its forward hooks run (cg_module_forward).
 *
 * Each returns a new module (free with cg_module_free, or give it to a
 * container), or NULL + one line for an nd or mode out of range. */
#ifndef CG_NN_SPATIAL_H
#define CG_NN_SPATIAL_H

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nn.MaxPool1d (nd 1) / MaxPool2d (nd 2) / MaxPool3d (nd 3) with
 * core/ops.h's cg_pool options (stride 0: the kernel's, as PyTorch's
 * stride=None), and nn.AvgPool1d / 2d / 3d (o.exclude_pad:
 * count_include_pad=False). */
cg_module *cg_maxpool_new(int nd, cg_pool o);
cg_module *cg_avgpool_new(int nd, cg_pool o);
/* PyTorch's MaxPool{1,2,3}d(..., return_indices=True): on, the module
 * returns its indices too (int64, the output's shape, the flat index of
 * each maximum within its plane: what cg_maxunpool_forward takes), so it
 * runs through cg_maxpool_forward(m, x, &indices) (hooks included; the
 * indices a new reference, NULL on failure), and cg_module_forward
 * refuses it, as PyTorch's tuple is no tensor for the next module; off
 * (the default), cg_maxpool_forward takes indices NULL. false + error for
 * a module that is not a MaxPool. */
bool cg_maxpool_set_return_indices(cg_module *m, bool on);
cg_tensor *cg_maxpool_forward(cg_module *m, cg_tensor *x, cg_tensor **indices);
/* nn.AdaptiveMaxPool1d(oh) / 2d((oh, ow)), nn.AdaptiveAvgPool1d /
 * 2d (max false); nd 1 reads oh alone (nd 1 or 2). And
 * nn.AdaptiveMaxPool3d((od, oh, ow)) / AdaptiveAvgPool3d. */
cg_module *cg_adaptive_pool_new(int nd, bool max, int64_t oh, int64_t ow);
cg_module *cg_adaptive_pool3d_new(bool max, int64_t od, int64_t oh, int64_t ow);
/* nn.MaxUnpool1d / 2d / 3d (nd 1 to 3) with o's kernel_size, stride (0:
 * the kernel's) and padding (cg_max_unpool1d's rules). It takes two
 * inputs, so it has no one-tensor forward: run it with
 * cg_maxunpool_forward(m, x, indices, output_size) (output_size: nd sizes
 * or NULL, as PyTorch's module(x, indices, output_size)), hooks included;
 * another module is refused. */
cg_module *cg_maxunpool_new(int nd, cg_pool o);
cg_tensor *cg_maxunpool_forward(cg_module *m, cg_tensor *x, cg_tensor *indices,
                                const int64_t *output_size);
/* Padding of the last nd = n_pad / 2 dims (1 to 3) by the n_pad sizes of
 * pad (pairs, the last dim's first, as F.pad's), mode as cg_pad's (value
 * read by CG_PAD_CONSTANT only): nn.ConstantPad{nd}d(pad, value)
 * (ZeroPad2d for nd 2 and value 0), nn.ReflectionPad{nd}d,
 * ReplicationPad{nd}d, CircularPad{nd}d. */
cg_module *cg_padding_new(int n_pad, const int64_t *pad, cg_pad_mode mode, float value);
/* nn.Flatten(start_dim, end_dim): PyTorch's defaults are 1 and -1. */
cg_module *cg_flatten_new(int start_dim, int end_dim);
/* nn.Unfold(kernel_size, dilation, padding, stride) (cg_unfold) and
 * nn.Fold(output_size (oh, ow), ...) (cg_fold), cfg core/ops.h's
 * cg_fold_cfg (NULL: refused); the options are checked against the input
 * by the op. */
cg_module *cg_unfold_new(const cg_fold_cfg *cfg);
cg_module *cg_fold_new(int64_t oh, int64_t ow, const cg_fold_cfg *cfg);
/* nn.PixelShuffle(upscale_factor) (cg_pixel_shuffle) and
 * nn.PixelUnshuffle(downscale_factor) (cg_pixel_unshuffle); the factor is
 * checked against the input by the op (below 1 refused there, as
 * PyTorch's). */
cg_module *cg_pixel_shuffle_new(int64_t upscale_factor);
cg_module *cg_pixel_unshuffle_new(int64_t downscale_factor);
/* nn.ChannelShuffle(groups) (cg_channel_shuffle) and
 * nn.LocalResponseNorm(size, alpha, beta, k) (cg_local_response_norm;
 * PyTorch's defaults 1e-4, 0.75, 1.0); the op checks the options against
 * the input. */
cg_module *cg_channel_shuffle_new(int64_t groups);
cg_module *cg_local_response_norm_new(int64_t size, float alpha, float beta, float k);

#ifdef __cplusplus
}
#endif
#endif
