/* cgrad core: masks and the questions asked of elements (declared in
 * core/ops.h, "masks, selection and predicates"): masked_select,
 * masked_scatter and its source's gradient; isnan, isinf, isfinite,
 * isposinf, isneginf; isclose, allclose, equal; count_nonzero, any, all.
 *
 * Every dtype; the operands are read as dense copies of the broadcast
 * shape (core/typed_impl.h), one sequential pass each: these serve masks,
 * ids and tests of values, as core/typed.c's comparisons do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/reduce_impl.h"
#include "core/typed_impl.h"

static bool bool_mask(const char *op, const cg_tensor *mask)
{
    if (mask->dtype == CG_BOOL)
        return true;
    cg_set_error("%s: the mask is %s, expected bool (cg_to(mask, CG_BOOL): true where not zero)",
                 op, cg_dtype_name(mask->dtype));
    return false;
}

/* a and mask broadcast together as dense copies (a in its dtype) into *x
 * and *m, the shape into nd, shape; false + error */
static bool dense_pair(const char *op, const cg_tensor *a, const cg_tensor *mask, cg_tensor **x,
                       cg_tensor **m, int *nd, int64_t *shape)
{
    *x = *m = NULL;
    if (!bool_mask(op, mask))
        return false;
    *nd = cg_broadcast_n(op, 2, (const cg_tensor *[]){a, mask}, shape);
    if (*nd < 0)
        return false;
    *m = cg_dense_as(mask, CG_BOOL, *nd, shape);
    *x = *m ? cg_dense_as(a, a->dtype, *nd, shape) : NULL;
    if (*x)
        return true;
    cg_release(*m);
    *m = NULL;
    return false;
}

static int64_t count_true(const cg_tensor *m)
{
    const bool *p = cg_data_bool(m);
    int64_t c = 0;
    for (int64_t i = 0; i < cg_numel(m); i++)
        c += p[i];
    return c;
}

cg_tensor *cg_k_masked_select(const cg_tensor *a, const cg_tensor *mask)
{
    if (!a || !mask) {
        cg_error_null_input("masked_select");
        return NULL;
    }
    int nd;
    int64_t shape[CG_MAX_DIMS];
    cg_tensor *x, *m;
    if (!dense_pair("masked_select", a, mask, &x, &m, &nd, shape))
        return NULL;
    int64_t count = count_true(m);
    cg_tensor *out = cg_empty_dtype(a->dtype, 1, &count);
    if (out) {
        const size_t z = cg_dtype_size(a->dtype);
        const char *src = cg_data_ptr(x);
        char *dst = cg_data_ptr(out);
        const bool *p = cg_data_bool(m);
        for (int64_t i = 0, k = 0; i < cg_numel(m); i++)
            if (p[i])
                memcpy(dst + (size_t)k++ * z, src + (size_t)i * z, z);
    }
    cg_release_all(2, x, m);
    return out;
}

cg_tensor *cg_k_masked_scatter(const cg_tensor *a, const cg_tensor *mask, const cg_tensor *source)
{
    if (!a || !mask || !source) {
        cg_error_null_input("masked_scatter");
        return NULL;
    }
    if (source->dtype != a->dtype) {
        cg_set_error("masked_scatter: the source is %s, expected the input's dtype %s (as "
                     "PyTorch; cg_to it)",
                     cg_dtype_name(source->dtype), cg_dtype_name(a->dtype));
        return NULL;
    }
    int nd;
    int64_t shape[CG_MAX_DIMS];
    cg_tensor *out, *m;
    if (!dense_pair("masked_scatter", a, mask, &out, &m, &nd, shape))
        return NULL;
    const int64_t count = count_true(m);
    cg_tensor *s = NULL;
    if (count > cg_numel(source))
        cg_set_error("masked_scatter: the source has %lld elements, fewer than the mask's %lld "
                     "true ones",
                     (long long)cg_numel(source), (long long)count);
    else
        s = cg_k_contiguous(source);
    if (!s) {
        cg_release_all(2, out, m);
        return NULL;
    }
    if (out->storage == a->storage) { /* a contiguous a of the broadcast shape: copy it */
        cg_tensor *c = cg_k_clone(out);
        cg_release(out);
        out = c;
    }
    if (out) {
        const size_t z = cg_dtype_size(a->dtype);
        const char *src = cg_data_ptr(s);
        char *dst = cg_data_ptr(out);
        const bool *p = cg_data_bool(m);
        for (int64_t i = 0, k = 0; i < cg_numel(m); i++)
            if (p[i])
                memcpy(dst + (size_t)i * z, src + (size_t)k++ * z, z);
    }
    cg_release_all(2, s, m);
    return out;
}

cg_tensor *cg_k_masked_scatter_source_backward(const cg_tensor *g, const cg_tensor *mask, int ndim,
                                               const int64_t *shape)
{
    cg_tensor *sel = cg_k_masked_select(g, mask);
    if (!sel)
        return NULL;
    cg_tensor *out = cg_zeros_dtype(sel->dtype, ndim, shape);
    if (out && cg_numel(sel) > cg_numel(out)) {
        cg_set_error("masked_scatter backward: %lld selected gradients for a source of %lld "
                     "elements",
                     (long long)cg_numel(sel), (long long)cg_numel(out));
        cg_release(out);
        out = NULL;
    }
    if (out)
        memcpy(cg_data_ptr(out), cg_data_ptr(sel),
               (size_t)cg_numel(sel) * cg_dtype_size(sel->dtype));
    cg_release(sel);
    return out;
}

/* ---------------------------------------------------------- predicates */
enum { P_NAN, P_INF, P_FINITE, P_POSINF, P_NEGINF };

static cg_tensor *predicate(const char *op, const cg_tensor *a, int kind)
{
    if (!a) {
        cg_error_null_input(op);
        return NULL;
    }
    cg_tensor *out = cg_empty_dtype(CG_BOOL, a->ndim, a->shape);
    if (!out)
        return NULL;
    bool *o = cg_data_bool(out);
    const int64_t n = cg_numel(a);
    if (!cg_dtype_is_float(a->dtype)) { /* integers and bool: finite, never NaN or inf */
        memset(o, kind == P_FINITE, (size_t)n);
        return out;
    }
    cg_tensor *x = cg_dense_as(a, CG_F32, a->ndim, a->shape);
    if (!x) {
        cg_release(out);
        return NULL;
    }
    const float *v = cg_data(x);
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case P_NAN: o[i] = isnan(v[i]); break;
        case P_INF: o[i] = isinf(v[i]); break;
        case P_FINITE: o[i] = isfinite(v[i]); break;
        case P_POSINF: o[i] = v[i] == INFINITY; break;
        default: o[i] = v[i] == -INFINITY; break;
        }
    }
    cg_release(x);
    return out;
}

cg_tensor *cg_isnan(const cg_tensor *a) { return predicate("isnan", a, P_NAN); }
cg_tensor *cg_isinf(const cg_tensor *a) { return predicate("isinf", a, P_INF); }
cg_tensor *cg_isfinite(const cg_tensor *a) { return predicate("isfinite", a, P_FINITE); }
cg_tensor *cg_isposinf(const cg_tensor *a) { return predicate("isposinf", a, P_POSINF); }
cg_tensor *cg_isneginf(const cg_tensor *a) { return predicate("isneginf", a, P_NEGINF); }

/* --------------------------------------------------------- isclose */
/* v rounded to the float dtype dt, as each of PyTorch's ops in dt rounds */
static float in_dtype(cg_dtype dt, float v)
{
    if (dt == CG_BF16)
        return cg_bf16_to_f32(cg_f32_to_bf16(v));
    if (dt == CG_F16)
        return cg_f16_to_f32(cg_f32_to_f16(v));
    return v;
}

typedef struct {
    cg_dtype dt;
    float rtol, atol; /* in the dtype the error is computed in */
    bool equal_nan, tolerant;
} close_args;

/* PyTorch 1.13's isclose, one op at a time in its dtypes: a == b, or both
 * NaN (equal_nan), or |a - b| finite and <= atol + |rtol b| */
static bool close_f(const close_args *c, float a, float b)
{
    if (a == b || (c->equal_nan && isnan(a) && isnan(b)))
        return true;
    if (!c->tolerant)
        return false;
    const cg_dtype dt = c->dt;
    const float allowed = in_dtype(dt, c->atol + fabsf(in_dtype(dt, c->rtol * b)));
    const float actual = fabsf(in_dtype(dt, a - b));
    return isfinite(actual) && actual <= allowed;
}

/* integers and bool: the bound and the difference in float32 (PyTorch
 * converts them to its default float dtype) */
static bool close_i(const close_args *c, int64_t a, int64_t b)
{
    if (a == b)
        return true;
    if (!c->tolerant)
        return false;
    const float allowed = c->atol + fabsf(c->rtol * (float)b);
    const float actual = fabsf((float)a - (float)b);
    return isfinite(actual) && actual <= allowed;
}

cg_tensor *cg_isclose(const cg_tensor *a, const cg_tensor *b, double rtol, double atol,
                      bool equal_nan)
{
    if (!a || !b) {
        cg_error_null_input("isclose");
        return NULL;
    }
    const char *why = NULL;
    if (a->dtype != b->dtype)
        why = "the dtypes differ (PyTorch: one did not match the other)";
    else if (!(rtol >= 0))
        why = "rtol must be greater than or equal to zero";
    else if (!(atol >= 0))
        why = "atol must be greater than or equal to zero";
    const bool tolerant = rtol != 0 || atol != 0;
    if (why) {
        cg_set_error("isclose: %s (%s and %s, rtol %g, atol %g)", why, cg_dtype_name(a->dtype),
                     cg_dtype_name(b->dtype), rtol, atol);
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_broadcast_n("isclose", 2, (const cg_tensor *[]){a, b}, shape);
    if (nd < 0)
        return NULL;
    const bool fl = cg_dtype_is_float(a->dtype);
    const cg_dtype ct = cg_compute_dtype(a->dtype);
    cg_tensor *x = cg_dense_as(a, ct, nd, shape), *y = x ? cg_dense_as(b, ct, nd, shape) : NULL;
    cg_tensor *out = y ? cg_empty_dtype(CG_BOOL, nd, shape) : NULL;
    if (out) {
        close_args c = {a->dtype, (float)rtol, (float)atol, equal_nan && fl, tolerant};
        if (fl) { /* the scalars in a's dtype, as PyTorch's ops take them */
            c.rtol = in_dtype(a->dtype, c.rtol);
            c.atol = in_dtype(a->dtype, c.atol);
        }
        bool *o = cg_data_bool(out);
        for (int64_t i = 0; i < cg_numel(out); i++)
            o[i] = fl ? close_f(&c, cg_data(x)[i], cg_data(y)[i])
                      : close_i(&c, cg_data_i64(x)[i], cg_data_i64(y)[i]);
    }
    cg_release_all(2, x, y);
    return out;
}

/* every element of a bool tensor true */
static bool all_true(const cg_tensor *t)
{
    const bool *p = cg_data_bool(t);
    for (int64_t i = 0; i < cg_numel(t); i++)
        if (!p[i])
            return false;
    return true;
}

bool cg_allclose(const cg_tensor *a, const cg_tensor *b, double rtol, double atol, bool equal_nan,
                 bool *result)
{
    if (!result)
        return cg_error_null_arg("allclose", "result");
    cg_tensor *c = cg_isclose(a, b, rtol, atol, equal_nan);
    if (!c) {
        cg_prefix_error("allclose: ");
        return false;
    }
    *result = all_true(c);
    cg_release(c);
    return true;
}

bool cg_equal(const cg_tensor *a, const cg_tensor *b, bool *result)
{
    if (!result)
        return cg_error_null_arg("equal", "result");
    if (!a || !b)
        return cg_error_null_input("equal");
    if (a->ndim != b->ndim || !cg_same_shape(a, b)) {
        *result = false;
        return true;
    }
    cg_tensor *c = cg_eq(a, b); /* as numbers, any dtypes: NaN is unequal */
    if (!c)
        return false;
    *result = all_true(c);
    cg_release(c);
    return true;
}

/* ------------------------------------------ count_nonzero, any, all */
enum { R_COUNT, R_ANY, R_ALL };

/* How many of each output's elements are nonzero (NaN and true count),
 * into cnt (the output's elements, row-major); a walk over a in
 * row-major order with each element's output offset carried along */
static void count_into(const cg_tensor *a, const bool *nz, const bool *mask, int64_t *cnt)
{
    const int nd = a->ndim;
    int64_t ost[CG_MAX_DIMS], idx[CG_MAX_DIMS] = {0}, s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ost[d] = mask[d] ? 0 : s;
        if (!mask[d])
            s *= a->shape[d];
    }
    int64_t o = 0;
    for (int64_t i = 0; i < cg_numel(a); i++) {
        cnt[o] += nz[i];
        for (int d = nd - 1; d >= 0; d--) {
            o += ost[d];
            if (++idx[d] < a->shape[d])
                break;
            o -= ost[d] * a->shape[d];
            idx[d] = 0;
        }
    }
}

static cg_tensor *count_reduce(const char *op, const cg_tensor *a, int ndims, const int *dims,
                               bool keepdim, int kind)
{
    if (!a) {
        cg_error_null_input(op);
        return NULL;
    }
    bool mask[CG_MAX_DIMS];
    if (!cg_reduce_dims(op, a, ndims, dims, mask))
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_reduce_shape(a, mask, keepdim, shape);
    const int64_t nout = cg_numel_shape(nd, shape), n = cg_numel(a);
    cg_tensor *nz = cg_ne_scalar(a, 0.0); /* contiguous, a's shape */
    cg_tensor *out = nz ? cg_empty_dtype(kind == R_COUNT ? CG_I64 : CG_BOOL, nd, shape) : NULL;
    int64_t *cnt = out ? calloc((size_t)(nout ? nout : 1), sizeof *cnt) : NULL;
    if (out && !cnt) {
        cg_set_error("%s: out of memory", op);
        cg_release(out);
        out = NULL;
    }
    if (cnt) {
        count_into(a, cg_data_bool(nz), mask, cnt);
        const int64_t red = nout ? n / nout : 0; /* elements behind each output */
        for (int64_t o = 0; o < nout; o++) {
            if (kind == R_COUNT)
                cg_data_i64(out)[o] = cnt[o];
            else
                cg_data_bool(out)[o] = kind == R_ANY ? cnt[o] > 0 : cnt[o] == red;
        }
    }
    free(cnt);
    cg_release(nz);
    return out;
}

cg_tensor *cg_count_nonzero(const cg_tensor *a, int ndims, const int *dims)
{
    return count_reduce("count_nonzero", a, ndims, dims, false, R_COUNT);
}

cg_tensor *cg_any(const cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    return count_reduce("any", a, ndims, dims, keepdim, R_ANY);
}

cg_tensor *cg_all(const cg_tensor *a, int ndims, const int *dims, bool keepdim)
{
    return count_reduce("all", a, ndims, dims, keepdim, R_ALL);
}
