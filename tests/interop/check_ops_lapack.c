/* check_ops' torch.linalg cases (make_linalg_cases.py, the torch_linalg
 * test): the case's op run on its inputs, as check_ops.c's run_op does for
 * the others. eigh's eigenvectors and svd's singular vectors are compared
 * as |V|, |U| and |Vh| over the first k columns and rows: their signs are
 * LAPACK's choice, in PyTorch and here. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/check_ops_lapack.h"

static double num(const cJSON *a, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k);
    if (cJSON_IsString(v)) /* "inf", "-inf" */
        return strtod(v->valuestring, NULL);
    return cJSON_IsNumber(v) ? v->valuedouble : cJSON_IsTrue(v) ? 1.0 : 0.0;
}

static const char *str(const cJSON *a, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int ints(const cJSON *a, const char *k, int *d)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, k), *e;
    int n = 0;
    cJSON_ArrayForEach(e, v) if (n < CG_MAX_DIMS) d[n++] = (int)e->valuedouble;
    return n;
}

/* |t| (t released) */
static cg_tensor *absr(cg_tensor *t)
{
    cg_tensor *a = t ? cg_abs(t) : NULL;
    cg_release(t);
    return a;
}

/* |t| over dim's first k entries (t released) */
static cg_tensor *abs_first(cg_tensor *t, int dim, int64_t k)
{
    cg_tensor *n = t ? cg_narrow(t, dim, 0, k) : NULL;
    cg_release(t);
    return absr(n);
}

bool check_ops_lapack(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out,
                      int *nout)
{
    (void)n;
    int dims[CG_MAX_DIMS];
    *nout = 1;
    if (!strcmp(op, "la_solve"))
        out[0] = cg_linalg_solve(x[0], x[1]);
    else if (!strcmp(op, "la_inv"))
        out[0] = cg_linalg_inv(x[0]);
    else if (!strcmp(op, "la_det"))
        out[0] = cg_linalg_det(x[0]);
    else if (!strcmp(op, "la_slogdet")) {
        *nout = 2;
        out[0] = cg_linalg_slogdet(x[0], &out[1]);
    } else if (!strcmp(op, "la_cholesky"))
        out[0] = cg_linalg_cholesky(x[0], num(a, "upper") != 0);
    else if (!strcmp(op, "la_qr")) {
        *nout = 2;
        out[0] = cg_linalg_qr(x[0], str(a, "mode"), &out[1]);
    } else if (!strcmp(op, "la_eigh")) {
        *nout = 2;
        cg_tensor *v = NULL;
        out[0] = cg_linalg_eigh(x[0], str(a, "uplo"), &v);
        out[1] = absr(v);
    } else if (!strcmp(op, "la_eigvalsh"))
        out[0] = cg_linalg_eigvalsh(x[0], str(a, "uplo"));
    else if (!strcmp(op, "la_svd")) {
        *nout = 3;
        cg_tensor *vh = NULL;
        out[0] = cg_linalg_svd(x[0], num(a, "full") != 0, &out[1], &vh);
        const int64_t k = out[1] ? out[1]->shape[out[1]->ndim - 1] : 0;
        out[0] = abs_first(out[0], -1, k);
        out[2] = abs_first(vh, -2, k);
    } else if (!strcmp(op, "la_svdvals"))
        out[0] = cg_linalg_svdvals(x[0]);
    else if (!strcmp(op, "la_pinv"))
        out[0] = cg_linalg_pinv(x[0], num(a, "atol"), num(a, "rtol"));
    else if (!strcmp(op, "la_lstsq"))
        out[0] = cg_linalg_lstsq(x[0], x[1], num(a, "rcond"));
    else if (!strcmp(op, "la_vector_norm")) {
        const int nd = ints(a, "dims", dims);
        out[0] = cg_linalg_vector_norm(x[0], num(a, "ord"), nd, dims, num(a, "keep") != 0);
    } else if (!strcmp(op, "la_matrix_norm")) {
        ints(a, "dims", dims);
        out[0] = cg_linalg_matrix_norm(x[0], str(a, "ord"), dims, num(a, "keep") != 0);
    } else
        return false;
    for (int k = 0; k < *nout; k++)
        if (!out[k]) { /* refused: no output at all */
            for (int j = 0; j < *nout; j++) {
                cg_release(out[j]);
                out[j] = NULL;
            }
            break;
        }
    return true;
}
