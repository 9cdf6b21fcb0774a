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

#ifdef __cplusplus
}
#endif
#endif
