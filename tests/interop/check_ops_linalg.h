/* check_ops.c's second table of ops (check_ops_linalg.c) */
#ifndef CHECK_OPS_LINALG_H
#define CHECK_OPS_LINALG_H
#include <cjson/cJSON.h>

#include "cgrad.h"

/* The op of the einsum family or a distance into *out; false when op is
 * none of them or cgrad refused (then the error is set) */
bool check_ops_linalg(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out);
#endif
