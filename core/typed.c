/* Tensors of any dtype: conversion (cg_k_to), tensors from C arrays,
 * arange, and printing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor.h"

cg_dtype cg_dtype_of(const cg_tensor *t) { return t ? t->dtype : CG_F32; }

/* Byte address of element `off` (in elements) of t's storage. */
static const char *elem_ptr(const cg_tensor *t, int64_t off)
{
    return (const char *)t->storage->data + off * (int64_t)cg_dtype_size(t->dtype);
}

cg_tensor *cg_k_to(const cg_tensor *t, cg_dtype dt)
{
    if (!t) {
        cg_error_null_input("cg_to");
        return NULL;
    }
    if (cg_dtype_size(dt) == 0) {
        cg_set_error("to: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (t->dtype == dt)
        return cg_view_alias(t);
    cg_tensor *out = cg_empty_dtype(dt, t->ndim, t->shape);
    if (out && !cg_k_copy_(out, t)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_from_array(cg_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    if (!data) {
        cg_set_error("from_array: NULL data");
        return NULL;
    }
    cg_tensor *t = cg_empty_dtype(dt, ndim, shape);
    if (!t)
        return NULL;
    size_t n = (size_t)cg_numel(t);
    memcpy(t->storage->data, data, n * cg_dtype_size(dt));
    if (dt == CG_BOOL) { /* one representation of true */
        uint8_t *b = t->storage->data;
        for (size_t i = 0; i < n; i++)
            b[i] = b[i] != 0;
    }
    return t;
}

cg_tensor *cg_from_i64(int ndim, const int64_t *shape, const int64_t *data)
{
    return cg_from_array(CG_I64, ndim, shape, data);
}
cg_tensor *cg_from_i32(int ndim, const int64_t *shape, const int32_t *data)
{
    return cg_from_array(CG_I32, ndim, shape, data);
}
cg_tensor *cg_from_bool(int ndim, const int64_t *shape, const bool *data)
{
    return cg_from_array(CG_BOOL, ndim, shape, data);
}

cg_tensor *cg_scalar_i64(int64_t value)
{
    cg_tensor *t = cg_empty_dtype(CG_I64, 0, NULL);
    if (t)
        *(int64_t *)t->storage->data = value;
    return t;
}

cg_tensor *cg_arange_dtype(cg_dtype dt, double start, double stop, double step)
{
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        cg_set_error("arange: need finite start/stop and a non-zero step (got %g, %g, %g)", start,
                     stop, step);
        return NULL;
    }
    if (!cg_dtype_is_float(dt) && (fabs(start) > 0x1p62 || fabs(stop) > 0x1p62)) {
        cg_set_error("arange: start and stop must be within +-2^62 for %s", cg_dtype_name(dt));
        return NULL;
    }
    double count = ceil((stop - start) / step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    cg_tensor *t = cg_empty_dtype(dt, 1, &n);
    if (!t)
        return NULL;
    char *p = t->storage->data;
    size_t z = cg_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        double x = start + (double)i * step;
        if (cg_dtype_is_float(dt)) {
            cg_elem_set(dt, p + (size_t)i * z, x);
        } else { /* exact integers: no detour through float */
            int64_t v = (int64_t)x;
            cg_convert_run(dt, p + (size_t)i * z, 1, CG_I64, &v, 1, 1);
        }
    }
    return t;
}

/* ------------------------------------------------------------ printing */
#define PRINT_EDGE 3         /* elements shown at each end of a summarised dim */
#define PRINT_MAX_ELEMS 1000 /* PyTorch's threshold for summarising */

static void print_elem(FILE *f, const cg_tensor *t, int64_t off)
{
    const char *p = elem_ptr(t, off);
    if (!cg_dtype_is_float(t->dtype)) {
        if (t->dtype == CG_BOOL)
            fputs(*(const uint8_t *)p ? "True" : "False", f);
        else
            fprintf(f, "%lld", (long long)cg_elem_get_i64(t->dtype, p));
        return;
    }
    double v = cg_elem_get(t->dtype, p);
    if (isnan(v))
        fputs("nan", f);
    else if (isinf(v))
        fputs(v > 0 ? "inf" : "-inf", f);
    else
        fprintf(f, "%.4f", v);
}

static void print_dim(FILE *f, const cg_tensor *t, int d, int64_t off, bool summarise)
{
    if (d == t->ndim) {
        print_elem(f, t, off);
        return;
    }
    fputc('[', f);
    int64_t n = t->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (summarise && n > 2 * PRINT_EDGE && i == PRINT_EDGE) {
            fputs("...", f);
            i = n - PRINT_EDGE - 1;
        } else {
            print_dim(f, t, d + 1, off + i * t->strides[d], summarise);
        }
        if (i + 1 == n)
            break;
        fputc(',', f);
        if (d + 1 == t->ndim) {
            fputc(' ', f);
            continue;
        }
        for (int k = 0; k < t->ndim - d - 1; k++)
            fputc('\n', f);
        for (int k = 0; k <= d + 7; k++) /* under the '[' of this dim's first row */
            fputc(' ', f);
    }
    fputc(']', f);
}

bool cg_fprint(FILE *f, const cg_tensor *t)
{
    if (!t || !f)
        return cg_error_null_input("cg_print");
    fputs("tensor(", f);
    print_dim(f, t, 0, t->offset, cg_numel(t) > PRINT_MAX_ELEMS);
    if (t->dtype != CG_F32)
        fprintf(f, ", dtype=torch.%s", cg_dtype_name(t->dtype));
    fputs(")\n", f);
    return true;
}

bool cg_print(const cg_tensor *t) { return cg_fprint(stdout, t); }
