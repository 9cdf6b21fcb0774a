/* check_ops's cases of sorting, products and scans (make_op_cases.py
 * gen_scan): the op of a case by name, run on its input x. */
#include <string.h>

#include "tests/interop/check_ops.h"

bool cg_check_scan_op(const char *op, cg_tensor *x, const cJSON *a, cg_tensor **out, int *nout)
{
    int64_t d64[CG_MAX_DIMS];
    int dims[CG_MAX_DIMS], nd = alist(a, "dims", d64, CG_MAX_DIMS);
    for (int i = 0; i < nd && i < CG_MAX_DIMS; i++)
        dims[i] = (int)d64[i];
    const int dim = ai(a, "dim"), corr = ai(a, "corr");
    const bool keep = ai(a, "keep");
    *nout = 1;
    if (!strcmp(op, "sort") || !strcmp(op, "cummax") || !strcmp(op, "cummin") ||
        !strcmp(op, "var_mean") || !strcmp(op, "std_mean")) {
        *nout = 2;
        if (op[0] == 's' && op[1] == 'o')
            out[0] = cg_sort(x, dim, ai(a, "desc"), ai(a, "stable"), &out[1]);
        else if (!strcmp(op, "cummax"))
            out[0] = cg_cummax(x, dim, &out[1]);
        else if (!strcmp(op, "cummin"))
            out[0] = cg_cummin(x, dim, &out[1]);
        else if (!strcmp(op, "var_mean"))
            out[0] = cg_var_mean(x, nd, dims, corr, keep, &out[1]);
        else
            out[0] = cg_std_mean(x, nd, dims, corr, keep, &out[1]);
    } else if (!strcmp(op, "argsort"))
        out[0] = cg_argsort(x, dim, ai(a, "desc"), ai(a, "stable"));
    else if (!strcmp(op, "prod"))
        out[0] = cg_prod(x, dim, keep);
    else if (!strcmp(op, "prod_all"))
        out[0] = cg_prod_all(x);
    else if (!strcmp(op, "cumprod"))
        out[0] = cg_cumprod(x, dim);
    else if (!strcmp(op, "logcumsumexp"))
        out[0] = cg_logcumsumexp(x, dim);
    else if (!strcmp(op, "std"))
        out[0] = cg_std(x, nd, dims, corr, keep);
    else if (!strcmp(op, "one_hot"))
        out[0] = cg_one_hot(x, ai64(a, "k"));
    else
        return false;
    return true;
}
