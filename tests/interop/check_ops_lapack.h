/* check_ops.c's torch.linalg ops (check_ops_lapack.c) */
#ifndef CHECK_OPS_LAPACK_H
#define CHECK_OPS_LAPACK_H
#include <cjson/cJSON.h>

#include "cgrad.h"

/* Whether op is one of torch.linalg's cases; then its outputs into out
 * (their count into *nout), or out[0] NULL with the error when cgrad
 * refused */
bool check_ops_lapack(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out,
                      int *nout);
#endif
