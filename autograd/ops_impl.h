/* cgrad autograd, INTERNAL: what the op files share. Not installed. */
#ifndef CG_AUTOGRAD_OPS_IMPL_H
#define CG_AUTOGRAD_OPS_IMPL_H

#include "autograd/autograd.h"

/* A norm recorded in bf16 precision keeps x-hat in bf16 (ops_nn.c), from
 * which its output's bf16 copy is made again, the same bits: the products
 * that read that copy (ops_layers.c) then need not keep it between the
 * forward and the backward.
 *
 * cg_norm_remakes_bf16: whether x is the output of such a norm as the
 * norm wrote it (not written since), its node not yet run.
 * cg_norm_out_bf16: the copy of n's output, made at the first call and
 * kept on n until n's own backward has run (its users' backwards run
 * before it); NULL + error when it cannot be made. */
bool cg_norm_remakes_bf16(const cg_tensor *x);
const cg_tensor *cg_norm_out_bf16(cg_node *n);

#endif
