/* cgrad nn: parameter initialisation.
 *
 * Each function fills an existing tensor (any strides) in place, outside
 * the graph, drawing from rng (which advances). False + error on bad
 * arguments; NULL tensor gives false. */
#ifndef CG_NN_INIT_H
#define CG_NN_INIT_H

#include "nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

bool cg_init_zeros_(cg_tensor *t);
bool cg_init_ones_(cg_tensor *t);
/* N(mean, std) */
bool cg_init_normal_(cg_tensor *t, cg_rng *rng, float mean, float std);
/* U[lo, hi) */
bool cg_init_uniform_(cg_tensor *t, cg_rng *rng, float lo, float hi);
/* Xavier/Glorot uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)),
 * with fan_in = shape[1] * r and fan_out = shape[0] * r, r the product of
 * shape[2:] (PyTorch's convention; a Linear weight [out, in] has fan_in =
 * in). Needs ndim >= 2. */
bool cg_init_xavier_uniform_(cg_tensor *t, cg_rng *rng, float gain);
/* Xavier normal: N(0, gain * sqrt(2 / (fan_in + fan_out))). */
bool cg_init_xavier_normal_(cg_tensor *t, cg_rng *rng, float gain);

/* models.py init_params semantics over a module tree, visited depth first
 * in registration order: every Linear and Embedding weight ~ N(0, std);
 * every LayerNorm/RMSNorm weight = 1; every parameter named "bias" = 0.
 * Other parameters are left as they are. */
bool cg_module_init_params(cg_module *m, cg_rng *rng, float std);
/* The same with PyTorch's generator and normal_ (core/tensor.h
 * cg_mt19937): the weights a PyTorch script gets from torch.manual_seed(seed),
 * then building a model of the same structure (whose nn.Linear and
 * nn.Embedding constructors draw their default initialisation first) and
 * running models.py init_params on it. This is the
 * zoo models' initialisation, so a --seed means what it means to the
 * reference scripts. Parameters must be contiguous. */
bool cg_module_init_params_torch(cg_module *m, uint64_t seed, float std);

#ifdef __cplusplus
}
#endif
#endif
