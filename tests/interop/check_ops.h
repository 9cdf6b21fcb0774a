/* What check_ops.c and its op files share: the case's arguments (a JSON
 * object) read as numbers and lists, and the op files' entry points. */
#ifndef CG_CHECK_OPS_H
#define CG_CHECK_OPS_H

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "cgrad.h"

/* ------------------------------------------------------------ arguments */
static inline int ai(const cJSON *a, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : cJSON_IsTrue(v) ? 1 : 0;
}

static inline double ad(const cJSON *a, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k);
    if (cJSON_IsString(v)) /* "Infinity", "-Infinity", "NaN" */
        return strtod(v->valuestring, NULL);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static inline int64_t ai64(const cJSON *a, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* An int list argument into out; returns its length. */
static inline int alist(const cJSON *a, const char *k, int64_t *out, int max)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k), *e;
    int n = 0;
    cJSON_ArrayForEach(e, v)
    {
        if (n < max)
            out[n] = (int64_t)e->valuedouble;
        n++;
    }
    return n;
}

/* sort, argsort, prod, cumprod, logcumsumexp, cummax, cummin, std,
 * var_mean, std_mean, one_hot (check_ops_scan.c): true when op is one of
 * them (its outputs in out, their count in *nout; out[0] NULL + error
 * when cgrad refuses), false otherwise. */
bool cg_check_scan_op(const char *op, cg_tensor *x, const cJSON *a, cg_tensor **out, int *nout);
/* masks, searching, counting, uniques, the pointwise ops of several
 * operands, predicates, diff, trapezoid, grids (check_ops_misc.c): as
 * cg_check_scan_op, on the inputs x[0, n). */
bool cg_check_misc_op(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out,
                      int *nout);

#endif
