/* check_ops' einsum family and distances (make_op_cases.py gen_einsum,
 * gen_distances): the case's op run on its inputs, as check_ops.c's
 * run_op does for the others. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/check_ops_linalg.h"

static double num(const cJSON *a, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k);
    if (cJSON_IsString(v)) /* "inf" */
        return strtod(v->valuestring, NULL);
    return cJSON_IsNumber(v) ? v->valuedouble : cJSON_IsTrue(v) ? 1.0 : 0.0;
}

/* a list of ints into d (at most CG_MAX_DIMS), its length */
static int ints(const cJSON *a, const char *k, int *d)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k), *e;
    int n = 0;
    cJSON_ArrayForEach(e, v) if (n < CG_MAX_DIMS) d[n++] = (int)e->valuedouble;
    return n;
}

bool check_ops_linalg(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out)
{
    const float p = (float)num(a, "p");
    if (!strcmp(op, "einsum")) {
        const cJSON *eq = cJSON_GetObjectItemCaseSensitive(a, "eq");
        *out = cg_einsum(cJSON_IsString(eq) ? eq->valuestring : NULL, n, x);
    } else if (!strcmp(op, "diagonal"))
        *out = cg_diagonal(x[0], (int64_t)num(a, "offset"), (int)num(a, "d1"), (int)num(a, "d2"));
    else if (!strcmp(op, "trace"))
        *out = cg_trace(x[0]);
    else if (!strcmp(op, "diag"))
        *out = cg_diag(x[0], (int64_t)num(a, "offset"));
    else if (!strcmp(op, "outer"))
        *out = cg_outer(x[0], x[1]);
    else if (!strcmp(op, "kron"))
        *out = cg_kron(x[0], x[1]);
    else if (!strcmp(op, "tensordot")) {
        int da[CG_MAX_DIMS], db[CG_MAX_DIMS];
        const int na = ints(a, "da", da), nb = ints(a, "db", db);
        *out = na || nb ? cg_tensordot(x[0], x[1], na, da, db)
                        : cg_tensordot(x[0], x[1], (int)num(a, "n"), NULL, NULL);
    } else if (!strcmp(op, "cdist"))
        *out = cg_cdist(x[0], x[1], p);
    else if (!strcmp(op, "pdist"))
        *out = cg_pdist(x[0], p);
    else if (!strcmp(op, "pairwise_distance"))
        *out = cg_pairwise_distance(x[0], x[1], p, (float)num(a, "eps"), num(a, "keep") != 0);
    else if (!strcmp(op, "bilinear"))
        *out = cg_bilinear(x[0], x[1], x[2], num(a, "b") != 0 ? x[3] : NULL);
    else
        return false;
    return *out != NULL;
}
