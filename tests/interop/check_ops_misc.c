/* check_ops's cases of masks, searching, counting, uniques, the pointwise
 * ops of several operands, predicates, diff, trapezoid and grids
 * (make_op_cases.py gen_misc): the op of a case by name, run on its inputs
 * x[0, n). */
#include <string.h>

#include "tests/interop/check_ops.h"

/* a number argument, or NULL for JSON's null (into *v) */
static const double *opt_num(const cJSON *a, const char *k, double *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(a, k);
    if (!j || cJSON_IsNull(j))
        return NULL;
    *v = ad(a, k);
    return v;
}

static const char *opt_str(const cJSON *a, const char *k)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(a, k);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* a bool answer as a 0-d bool tensor (NULL when refused) */
static cg_tensor *answer(bool ok, bool v) { return ok ? cg_from_bool(0, NULL, &v) : NULL; }

static bool predicate_op(const char *op, cg_tensor **x, const cJSON *a, cg_tensor **out)
{
    static const struct {
        const char *name;
        cg_tensor *(*fn)(const cg_tensor *);
    } t[] = {{"isnan", cg_isnan},
             {"isinf", cg_isinf},
             {"isfinite", cg_isfinite},
             {"isposinf", cg_isposinf},
             {"isneginf", cg_isneginf}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(op, t[i].name))
            return (*out = t[i].fn(x[0])), true;
    int64_t d64[CG_MAX_DIMS];
    int dims[CG_MAX_DIMS], nd = alist(a, "dims", d64, CG_MAX_DIMS);
    for (int i = 0; i < nd && i < CG_MAX_DIMS; i++)
        dims[i] = (int)d64[i];
    bool r = false, ok;
    if (!strcmp(op, "isclose"))
        *out = cg_isclose(x[0], x[1], ad(a, "rtol"), ad(a, "atol"), ai(a, "nan"));
    else if (!strcmp(op, "allclose")) {
        ok = cg_allclose(x[0], x[1], ad(a, "rtol"), ad(a, "atol"), ai(a, "nan"), &r);
        *out = answer(ok, r);
    } else if (!strcmp(op, "equal")) {
        ok = cg_equal(x[0], x[1], &r);
        *out = answer(ok, r);
    } else if (!strcmp(op, "count_nonzero"))
        *out = cg_count_nonzero(x[0], nd, dims);
    else if (!strcmp(op, "any"))
        *out = cg_any(x[0], nd, dims, ai(a, "keep"));
    else if (!strcmp(op, "all"))
        *out = cg_all(x[0], nd, dims, ai(a, "keep"));
    else
        return false;
    return true;
}

/* the ops with several outputs */
static bool multi_op(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out,
                     int *nout)
{
    const int dim = ai(a, "dim");
    if (!strcmp(op, "unique") || !strcmp(op, "unique_dim")) {
        *nout = 3;
        out[0] = op[6] ? cg_unique_dim(x[0], dim, true, &out[1], &out[2])
                       : cg_unique(x[0], true, &out[1], &out[2]);
    } else if (!strcmp(op, "unique_consecutive") || !strcmp(op, "unique_consecutive_dim")) {
        *nout = 3;
        out[0] = op[18] ? cg_unique_consecutive_dim(x[0], dim, &out[1], &out[2])
                        : cg_unique_consecutive(x[0], &out[1], &out[2]);
    } else if (!strcmp(op, "meshgrid")) {
        *nout = n;
        if (!cg_meshgrid(x, n, ai(a, "xy") ? CG_MESHGRID_XY : CG_MESHGRID_IJ, out))
            out[0] = NULL;
    } else
        return false;
    return true;
}

bool cg_check_misc_op(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out,
                      int *nout)
{
    *nout = 1;
    if (multi_op(op, x, n, a, out, nout) || predicate_op(op, x, a, out))
        return true;
    const int dim = ai(a, "dim");
    double p, q;
    const double *pp = opt_num(a, "posinf", &p), *pq = opt_num(a, "neginf", &q);
    if (!strcmp(op, "masked_select"))
        *out = cg_masked_select(x[0], x[1]);
    else if (!strcmp(op, "masked_scatter"))
        *out = cg_masked_scatter(x[0], x[1], x[2]);
    else if (!strcmp(op, "searchsorted")) {
        cg_search_opts o = {.right = ai(a, "right"),
                            .side = opt_str(a, "side"),
                            .sorter = n > 2 ? x[2] : NULL,
                            .out_int32 = ai(a, "int32")};
        *out = cg_searchsorted(x[0], x[1], &o);
    } else if (!strcmp(op, "bucketize"))
        *out = cg_bucketize(x[0], x[1], ai(a, "int32"), ai(a, "right"));
    else if (!strcmp(op, "bincount"))
        *out = cg_bincount(x[0], ai(a, "w") ? x[1] : NULL, ai64(a, "min"));
    else if (!strcmp(op, "histc"))
        *out = cg_histc(x[0], ai64(a, "bins"), ad(a, "min"), ad(a, "max"));
    else if (!strcmp(op, "nan_to_num"))
        *out = cg_nan_to_num(x[0], ad(a, "nan"), pp, pq);
    else if (!strcmp(op, "fmod"))
        *out = cg_fmod(x[0], x[1]);
    else if (!strcmp(op, "remainder"))
        *out = cg_remainder(x[0], x[1]);
    else if (!strcmp(op, "fmod_scalar"))
        *out = cg_fmod_scalar(x[0], ad(a, "s"));
    else if (!strcmp(op, "remainder_scalar"))
        *out = cg_remainder_scalar(x[0], ad(a, "s"));
    else if (!strcmp(op, "lerp"))
        *out = cg_lerp(x[0], x[1], x[2]);
    else if (!strcmp(op, "lerp_scalar"))
        *out = cg_lerp_scalar(x[0], x[1], (float)ad(a, "w"));
    else if (!strcmp(op, "clamp_tensor")) {
        const int lo = ai(a, "lo"), hi = ai(a, "hi");
        *out = cg_clamp_tensor(x[0], lo ? x[1] : NULL, hi ? x[1 + lo] : NULL);
    } else if (!strcmp(op, "cross"))
        *out = cg_cross(x[0], x[1], dim);
    else if (!strcmp(op, "diff")) {
        const int pre = ai(a, "pre");
        *out =
            cg_diff(x[0], ai64(a, "n"), dim, pre ? x[1] : NULL, ai(a, "app") ? x[1 + pre] : NULL);
    } else if (!strcmp(op, "trapezoid"))
        *out = cg_trapezoid(x[0], ad(a, "dx"), dim);
    else if (!strcmp(op, "trapezoid_x"))
        *out = cg_trapezoid_x(x[0], x[1], dim);
    else if (!strcmp(op, "cartesian_prod"))
        *out = cg_cartesian_prod(x, n);
    else if (!strcmp(op, "rot90"))
        *out = cg_rot90(x[0], ai64(a, "k"), ai(a, "d0"), ai(a, "d1"));
    else if (!strcmp(op, "msort"))
        *out = cg_msort(x[0]);
    else
        return false;
    return true;
}
