/* cgrad core, INTERNAL: a reduction's dims (core/reduce.c), shared with
 * the reductions that live elsewhere (logsumexp, core/softmax.c) and
 * flip's dims (core/rearrange.c), and the ops along one dim. Not
 * installed. */
#ifndef CG_CORE_REDUCE_IMPL_H
#define CG_CORE_REDUCE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

/* mask[i] = dim i of a is reduced, from ndims dims (negative count from
 * the end; ndims 0: all of them; a 0-d tensor takes dim 0 or -1); false +
 * error naming op on a dim out of range or given twice. */
bool cg_reduce_dims(const char *op, const cg_tensor *a, int ndims, const int *dims, bool *mask);
/* The result's shape into shape (the reduced dims dropped, or 1 with
 * keepdim); returns its ndim. */
int cg_reduce_shape(const cg_tensor *a, const bool *mask, bool keepdim, int64_t *shape);
/* a seen as contiguous [outer, n, inner] around *dim (normalised in
 * place; a 0-d a is [1, 1, 1] at dim 0 or -1): the ops along one dim
 * (core/dim_ops.c, core/scan.c); false + error naming op on a bad dim. */
bool cg_around_dim(const char *op, const cg_tensor *a, int *dim, int64_t *outer, int64_t *n,
                   int64_t *inner);

#endif
