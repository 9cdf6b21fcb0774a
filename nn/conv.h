/* cgrad nn: convolution modules, torch.nn.Conv1d, torch.nn.Conv2d and
 * torch.nn.Conv3d (padding_mode zeros, reflect, replicate or circular:
 * cfg's padding_mode), torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d
 * and torch.nn.ConvTranspose3d (zeros only, as PyTorch's).
 *
 * Parameters under PyTorch's names and shapes, so a PyTorch state dict
 * loads as it is (cg_module_load_file): weight [out, in / groups, K],
 * [out, in / groups, KH, KW] or [out, in / groups, KD, KH, KW], bias
 * [out] (when bias). Initialised as
 * PyTorch's reset_parameters: weight kaiming_uniform_(a = sqrt(5)), i.e.
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups times the
 * kernel's taps, then the bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (also
 * what cg_module_reset_parameters draws for them). The forward is one
 * graph node, autograd's cg_conv1d / cg_conv2d / cg_conv3d.
 *
 * A transposed one's weight is [in, out / groups, K], [in, out / groups,
 * KH, KW] or [in, out / groups, KD, KH, KW] and its fan_in out / groups times the taps (PyTorch's
 * reset_parameters reads the weight's dim 1); its forward is autograd's
 * cg_conv_transpose1d / cg_conv_transpose2d / cg_conv_transpose3d.
 *
 * Free with cg_module_free(CG_MODULE(m)). */
#ifndef CG_NN_CONV_H
#define CG_NN_CONV_H

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    cg_module base; /* type "Conv1d", "Conv2d" or "Conv3d" (or ConvTranspose's) */
    int nd;         /* spatial dims: 1, 2 or 3 */
    int64_t in_channels, out_channels;
    int64_t kernel_size[3]; /* nd 1: kernel_size[0] (the others 1); nd 2: 0 and 1 */
    cg_conv_cfg cfg;        /* stride, padding (or 'same'/'valid'), dilation, groups */
    cg_tensor *weight;
    cg_tensor *bias; /* NULL without bias */
    bool transposed; /* ConvTranspose1d / ConvTranspose2d / ConvTranspose3d */
} cg_conv;

/* nn.Conv1d(in, out, kernel, stride, padding, dilation, groups, bias):
 * cfg NULL for stride 1, padding 0, dilation 1, groups 1 (core/ops.h's
 * cg_conv_cfg, entry 0 read). Channels and kernel positive, groups
 * dividing both channel counts, and cfg's numbers valid, else NULL + one
 * line. rng NULL: a generator seeded 0. */
cg_conv *cg_conv1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                       const cg_conv_cfg *cfg, bool bias, cg_rng *rng);
/* nn.Conv2d(in, out, (kh, kw), ...): as above, cfg's entries per dim. */
cg_conv *cg_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_h,
                       int64_t kernel_w, const cg_conv_cfg *cfg, bool bias, cg_rng *rng);
/* nn.Conv3d(in, out, (kd, kh, kw), ...): as above, cfg's entries per dim
 * (depth, height, width). */
cg_conv *cg_conv3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_d,
                       int64_t kernel_h, int64_t kernel_w, const cg_conv_cfg *cfg, bool bias,
                       cg_rng *rng);
/* nn.ConvTranspose1d(in, out, kernel, stride, padding, output_padding,
 * groups, bias, dilation): cfg as cg_conv_transpose_cfg_check accepts it
 * (padding numbers, output_padding < stride or < dilation), else as
 * cg_conv1d_new. The forward's output_size argument:
 * cg_conv_transpose_forward. */
cg_conv *cg_conv_transpose1d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                                 const cg_conv_cfg *cfg, bool bias, cg_rng *rng);
/* nn.ConvTranspose2d(in, out, (kh, kw), ...): as above, per dim. */
cg_conv *cg_conv_transpose2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_h,
                                 int64_t kernel_w, const cg_conv_cfg *cfg, bool bias, cg_rng *rng);
/* nn.ConvTranspose3d(in, out, (kd, kh, kw), ...): as above, per dim. */
cg_conv *cg_conv_transpose3d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_d,
                                 int64_t kernel_h, int64_t kernel_w, const cg_conv_cfg *cfg,
                                 bool bias, cg_rng *rng);
/* x [N, in, L] or [in, L] (Conv1d), [N, in, H, W] or [in, H, W] (Conv2d),
 * [N, in, D, H, W] or [in, D, H, W] (Conv3d) -> [N, out, ...]; a wrong rank or channel count, or a kernel larger than
 * the padded input: NULL + one line. Runs the module's forward hooks. */
cg_tensor *cg_conv_forward(cg_conv *m, cg_tensor *x);
/* A transposed module's forward(x, output_size): output_size n_size
 * numbers (nd, or x's dims, the last nd read), each within the sizes the
 * module's stride allows (core/ops.h cg_conv_transpose_output_padding
 * sets the output padding from them; the module's own output_padding is
 * not used, as PyTorch's); else, or for a module that is not transposed,
 * NULL + one line. Runs the module's forward hooks. */
cg_tensor *cg_conv_transpose_forward(cg_conv *m, cg_tensor *x, int n_size,
                                     const int64_t *output_size);

#ifdef __cplusplus
}
#endif
#endif
