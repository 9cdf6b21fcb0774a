/* cgrad dist, INTERNAL: the argument checks of dist.h's calls, made in
 * dist.c for both backends (dist_mpi.c and dist_reducer.c with MPI,
 * dist_single.c without), so that a call one build refuses the other
 * refuses too, with the same message. Not installed. */
#ifndef CG_DIST_DIST_ARGS_H
#define CG_DIST_DIST_ARGS_H

#include <stdbool.h>

#include "core/tensor.h"

/* n tensors ts (n >= 0, ts not NULL when n > 0), none NULL, each
 * contiguous when contiguous; else false and "dist: OP: bad NOUN list" or
 * "dist: OP: NOUN i is NULL" (or "is not contiguous"). */
bool cg_dist_tensors_ok(const char *op, const char *noun, int n, cg_tensor *const *ts,
                        bool contiguous);
/* A rank's weight in an average: finite and >= 0; else false + error. */
bool cg_dist_weight_ok(const char *op, double weight);
/* A reducer's parameters (as cg_dist_tensors_ok's) and bucket size (in
 * (0, 1024] MB, CG_DIST_BUCKET_MB's range); else false + error. */
bool cg_dist_reducer_args_ok(int n, cg_tensor *const *params, double bucket_mb);

#endif
