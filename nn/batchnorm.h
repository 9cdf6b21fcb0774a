/* cgrad nn: batch, instance and group normalisation modules, PyTorch's
 * nn.BatchNorm1d/2d, nn.InstanceNorm1d/2d and nn.GroupNorm (nn/batchnorm.c,
 * over autograd's cg_batch_norm, cg_instance_norm and cg_group_norm).
 *
 * Parameters weight (ones) and bias (zeros) when affine; persistent
 * buffers running_mean (zeros), running_var (ones) and num_batches_tracked
 * (int64, 0-d) when track_running_stats: the names of PyTorch's
 * state_dict, so a file saves and loads by name. In train mode (the
 * module's training flag, cg_module_train) the batch statistics normalise
 * and the running ones move (momentum, or with cumulative_average the
 * mean of every batch so far: PyTorch's momentum=None, 1 /
 * num_batches_tracked); in eval mode the running statistics normalise
 * (without them, the batch's, as PyTorch's). */
#ifndef CG_NN_BATCHNORM_H
#define CG_NN_BATCHNORM_H

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    cg_module base;
    int64_t num_features;
    int spatial; /* 1: BatchNorm1d ([N, C] or [N, C, L]); 2: BatchNorm2d ([N, C, H, W]) */
    float eps, momentum;
    bool cumulative_average, affine, track_running_stats;
    cg_tensor *weight, *bias;                                    /* parameters, or NULL */
    cg_tensor *running_mean, *running_var, *num_batches_tracked; /* buffers, or NULL */
} cg_batchnorm;

/* PyTorch's arguments: eps, momentum, momentum=None (cumulative_average),
 * affine, track_running_stats. */
typedef struct {
    float eps, momentum;
    bool cumulative_average, affine, track_running_stats;
} cg_batchnorm_opts;
/* PyTorch's defaults: eps 1e-5, momentum 0.1, affine, track_running_stats. */
cg_batchnorm_opts cg_batchnorm_opts_default(void);

/* opts NULL: the defaults. num_features > 0, eps >= 0, momentum finite. */
cg_batchnorm *cg_batchnorm1d_new(int64_t num_features, const cg_batchnorm_opts *opts);
cg_batchnorm *cg_batchnorm2d_new(int64_t num_features, const cg_batchnorm_opts *opts);
/* x [N, C] or [N, C, L] (1d), [N, C, H, W] (2d), C = num_features; a new
 * tensor of x's shape. Refused in one line: another rank or channel
 * count, a single value per channel in train mode. */
cg_tensor *cg_batchnorm_forward(cg_batchnorm *bn, cg_tensor *x);

/* nn.InstanceNorm1d / nn.InstanceNorm2d(num_features, eps, momentum,
 * affine, track_running_stats): a cg_batchnorm of type InstanceNorm1d/2d,
 * the same parameters and buffers (num_batches_tracked is registered and
 * stays 0, as PyTorch's). Each (sample, channel) normalised by its own
 * statistics in train mode or without running statistics (which then
 * move as F.instance_norm moves them), by the running ones in eval mode.
 * momentum None (cumulative_average) is refused. */
typedef cg_batchnorm cg_instancenorm;
/* PyTorch's defaults: eps 1e-5, momentum 0.1, affine and
 * track_running_stats false. */
cg_batchnorm_opts cg_instancenorm_opts_default(void);
cg_instancenorm *cg_instancenorm1d_new(int64_t num_features, const cg_batchnorm_opts *opts);
cg_instancenorm *cg_instancenorm2d_new(int64_t num_features, const cg_batchnorm_opts *opts);
/* x [N, C, L] or [C, L] (1d), [N, C, H, W] or [C, H, W] (2d). */
cg_tensor *cg_instancenorm_forward(cg_instancenorm *in, cg_tensor *x);

/* nn.GroupNorm(num_groups, num_channels, eps, affine): parameters weight
 * (ones) and bias (zeros) [num_channels] when affine. */
typedef struct {
    cg_module base;
    int64_t num_groups, num_channels;
    float eps;
    bool affine;
    cg_tensor *weight, *bias; /* parameters, or NULL */
} cg_groupnorm;
/* num_groups > 0 dividing num_channels, eps >= 0 (PyTorch's default
 * 1e-5, affine true). */
cg_groupnorm *cg_groupnorm_new(int64_t num_groups, int64_t num_channels, float eps, bool affine);
/* x [N, C, ...] (C = num_channels when affine); x's shape. */
cg_tensor *cg_groupnorm_forward(cg_groupnorm *gn, cg_tensor *x);

#ifdef __cplusplus
}
#endif
#endif
