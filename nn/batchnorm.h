/* cgrad nn: batch normalisation modules, PyTorch's nn.BatchNorm1d and
 * nn.BatchNorm2d (nn/batchnorm.c, over autograd's cg_batch_norm).
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

#ifdef __cplusplus
}
#endif
#endif
