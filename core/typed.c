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

bool cg_check_ids(const char *op, const char *arg, const cg_tensor *t)
{
    if (t && t->dtype == CG_I32)
        return cg_check_dtype(op, arg, t, CG_I32); /* (the debug mode's lifetime check) */
    if (t && t->dtype != CG_I64) {
        cg_set_error("%s: argument '%s' is %s, expected int64 or int32", op, arg,
                     cg_dtype_name(t->dtype));
        return false;
    }
    return cg_check_dtype(op, arg, t, CG_I64);
}

cg_tensor *cg_k_ids_i64(const char *op, const char *arg, const cg_tensor *t)
{
    if (!cg_check_ids(op, arg, t))
        return NULL;
    return t->dtype == CG_I64 ? cg_k_contiguous(t) : cg_k_to(t, CG_I64);
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

int64_t cg_k_first_overflow(const cg_tensor *t, cg_dtype dt, double *value)
{
    if (!t)
        return cg_error_null_input("cg_k_first_overflow"), -2;
    if (!cg_dtype_is_float(t->dtype) || !cg_dtype_is_float(dt)) {
        cg_set_error("first_overflow: %s to %s is not a float conversion", cg_dtype_name(t->dtype),
                     cg_dtype_name(dt));
        return -2;
    }
    if (dt == t->dtype || dt == CG_F32)
        return -1; /* float16 and bfloat16 fit float32 (bfloat16 does not fit float16) */
    cg_tensor *src = cg_k_to(t, CG_F32), *c = cg_k_to(t, dt);
    cg_tensor *back = src && c ? cg_k_to(c, CG_F32) : NULL;
    int64_t bad = back ? -1 : -2, n = cg_numel(t); /* -2: one of the three failed */
    for (int64_t e = 0; back && bad == -1 && e < n; e++)
        if (isfinite(cg_data(src)[e]) && !isfinite(cg_data(back)[e]))
            bad = e;
    if (bad >= 0 && value)
        *value = cg_data(src)[bad];
    cg_release_all(3, src, c, back);
    return bad;
}

cg_tensor *cg_from_array(cg_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    cg_tensor *t = cg_empty_dtype(dt, ndim, shape);
    if (!t)
        return NULL;
    size_t n = (size_t)cg_numel(t);
    if (!data && n > 0) { /* no elements need no data */
        cg_set_error("from_array: NULL data for %zu elements", n);
        cg_release(t);
        return NULL;
    }
    if (n > 0)
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
    /* the count is checked in double before it is cast: a double past
     * int64's range has no defined cast (1e30 came out negative); a tensor
     * holds fewer than 2^62 elements (check_shape). NaN cannot reach here,
     * but is refused as well. An end on the other side of start than step
     * goes gives an empty tensor. */
    double count = ceil((stop - start) / step);
    if (!(count < 0x1p62)) {
        cg_set_error("arange: invalid size, possible overflow: [%g, %g) in steps of %g is %g "
                     "elements, more than a tensor holds (2^62)",
                     start, stop, step, count);
        return NULL;
    }
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

/* float32's arange is arange_dtype's: the same values, start + i * step in
 * double rounded once. */
cg_tensor *cg_arange(double start, double stop, double step)
{
    return cg_arange_dtype(CG_F32, start, stop, step);
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
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_print"))
        return false;
    fputs("tensor(", f);
    print_dim(f, t, 0, t->offset, cg_numel(t) > PRINT_MAX_ELEMS);
    if (t->dtype != CG_F32)
        fprintf(f, ", dtype=torch.%s", cg_dtype_name(t->dtype));
    fputs(")\n", f);
    return true;
}

bool cg_print(const cg_tensor *t) { return cg_fprint(stdout, t); }

/* ------------------------------------------- any dtype, elementwise */
#define WALK_MAX 4

/* Calls fn(ctx, p) for each element of the broadcast shape (nd, shape) in
 * row-major order, p[k] pointing at operand k's element. Operands must
 * broadcast to shape. Sequential: these kernels serve masks and ids. */
static void walk(int nd, const int64_t *shape, int nops, const cg_tensor *const *ops,
                 void (*fn)(void *ctx, char *const *p), void *ctx)
{
    int64_t n = cg_numel_shape(nd, shape);
    int64_t st[WALK_MAX][CG_MAX_DIMS], idx[CG_MAX_DIMS] = {0};
    char *p[WALK_MAX];
    for (int k = 0; k < nops; k++) {
        int64_t z = (int64_t)cg_dtype_size(ops[k]->dtype);
        p[k] = (char *)ops[k]->storage->data + ops[k]->offset * z;
        for (int i = 0; i < nd; i++) {
            int j = i - (nd - ops[k]->ndim);
            st[k][i] = (j < 0 || ops[k]->shape[j] == 1) ? 0 : ops[k]->strides[j] * z;
        }
    }
    for (int64_t e = 0; e < n; e++) {
        fn(ctx, p);
        for (int d = nd - 1; d >= 0; d--) { /* next index, carrying */
            for (int k = 0; k < nops; k++)
                p[k] += st[k][d];
            if (++idx[d] < shape[d])
                break;
            for (int k = 0; k < nops; k++)
                p[k] -= st[k][d] * shape[d];
            idx[d] = 0;
        }
    }
}

/* Broadcast n operands and make the result of dtype dt (NULL + error). */
static cg_tensor *broadcast_out(const char *op, int n, const cg_tensor *const *in, cg_dtype dt,
                                int *nd, int64_t *shape)
{
    for (int k = 0; k < n; k++) {
        if (!in[k]) {
            cg_error_null_input(op);
            return NULL;
        }
    }
    int m = in[0]->ndim;
    memcpy(shape, in[0]->shape, sizeof(int64_t) * (size_t)m);
    for (int k = 1; k < n; k++) {
        int64_t out[CG_MAX_DIMS];
        m = cg_broadcast_shapes(op, m, shape, in[k]->ndim, in[k]->shape, out);
        if (m < 0)
            return NULL;
        memcpy(shape, out, sizeof(int64_t) * (size_t)m);
    }
    *nd = m;
    return cg_empty_dtype(dt, m, shape);
}

static bool truth(cg_dtype dt, const char *p) { return cg_elem_get(dt, p) != 0.0; }

typedef struct {
    cg_dtype dt[WALK_MAX];
    size_t z;
    int op;                             /* compare / logical: a cmp_op */
    bool ints;                          /* compare as int64, not double */
    _Alignas(8) unsigned char value[8]; /* masked_fill: the value in the result's dtype */
} walk_ctx;

static void where_elem(void *ctx, char *const *p)
{
    walk_ctx *c = ctx; /* p: out, cond, a, b (a and b already of out's dtype) */
    memcpy(p[0], truth(c->dt[1], p[1]) ? p[2] : p[3], c->z);
}

/* A value of dtype dt as a tensor of dtype want (a new reference). */
static cg_tensor *as_dtype(const cg_tensor *t, cg_dtype want)
{
    return t->dtype == want ? cg_view_alias(t) : cg_k_to(t, want);
}

cg_tensor *cg_typed_where(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b)
{
    cg_dtype dt = cg_promote_types(a->dtype, b->dtype);
    int nd;
    int64_t shape[CG_MAX_DIMS];
    cg_tensor *out = broadcast_out("where", 3, (const cg_tensor *[]){cond, a, b}, dt, &nd, shape);
    cg_tensor *ca = out ? as_dtype(a, dt) : NULL, *cb = ca ? as_dtype(b, dt) : NULL;
    if (!cb) {
        cg_release_all(2, out, ca);
        return NULL;
    }
    walk_ctx c = {.dt = {dt, cond->dtype}, .z = cg_dtype_size(dt)};
    walk(nd, shape, 4, (const cg_tensor *[]){out, cond, ca, cb}, where_elem, &c);
    cg_release_all(2, ca, cb);
    return out;
}

static void fill_elem(void *ctx, char *const *p)
{
    walk_ctx *c = ctx; /* p: out, a, mask */
    memcpy(p[0], truth(c->dt[2], p[2]) ? (const char *)c->value : p[1], c->z);
}

cg_tensor *cg_typed_masked_fill(const cg_tensor *a, const cg_tensor *mask, float value)
{
    cg_tensor *out = cg_empty_like(a);
    if (!out)
        return NULL;
    walk_ctx c = {.dt = {a->dtype, a->dtype, mask->dtype}, .z = cg_dtype_size(a->dtype)};
    cg_convert_run(a->dtype, c.value, 1, CG_F32, &value, 1, 1);
    walk(a->ndim, a->shape, 3, (const cg_tensor *[]){out, a, mask}, fill_elem, &c);
    return out;
}

/* ------------------------------------------ comparisons and logic */
enum cmp_op { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, LOG_AND, LOG_OR, LOG_NOT };

static bool compare_d(int op, double x, double y)
{
    switch (op) {
    case CMP_EQ: return x == y;
    case CMP_NE: return x != y; /* NaN != NaN, as torch.ne */
    case CMP_LT: return x < y;
    case CMP_LE: return x <= y;
    case CMP_GT: return x > y;
    default: return x >= y;
    }
}

static bool compare_i(int op, int64_t x, int64_t y)
{
    switch (op) {
    case CMP_EQ: return x == y;
    case CMP_NE: return x != y;
    case CMP_LT: return x < y;
    case CMP_LE: return x <= y;
    case CMP_GT: return x > y;
    default: return x >= y;
    }
}

static void compare_elem(void *ctx, char *const *p)
{
    walk_ctx *c = ctx; /* p: out, a, b */
    bool r;
    if (c->op == LOG_NOT)
        r = !truth(c->dt[1], p[1]);
    else if (c->op == LOG_AND)
        r = truth(c->dt[1], p[1]) && truth(c->dt[2], p[2]);
    else if (c->op == LOG_OR)
        r = truth(c->dt[1], p[1]) || truth(c->dt[2], p[2]);
    else if (c->ints)
        r = compare_i(c->op, cg_elem_get_i64(c->dt[1], p[1]), cg_elem_get_i64(c->dt[2], p[2]));
    else /* floats exactly: bf16/f16/f32 are exact in double; int64 through float, as torch */
        r = compare_d(c->op, cg_elem_get(c->dt[1], p[1]), cg_elem_get(c->dt[2], p[2]));
    *(uint8_t *)p[0] = r;
}

static const char *const cmp_name[] = {"eq", "ne",          "lt",         "le",         "gt",
                                       "ge", "logical_and", "logical_or", "logical_not"};

static cg_tensor *compare(int op, const cg_tensor *a, const cg_tensor *b)
{
    int nin = op == LOG_NOT ? 1 : 2, nd;
    int64_t shape[CG_MAX_DIMS];
    const cg_tensor *in[2] = {a, b};
    cg_tensor *out = broadcast_out(cmp_name[op], nin, in, CG_BOOL, &nd, shape);
    if (!out)
        return NULL;
    walk_ctx c = {.dt = {CG_BOOL, a->dtype, b ? b->dtype : CG_BOOL}, .op = op};
    c.ints = !cg_dtype_is_float(a->dtype) && (!b || !cg_dtype_is_float(b->dtype));
    walk(nd, shape, nin + 1, (const cg_tensor *[]){out, a, b}, compare_elem, &c);
    return out;
}

/* The number v as a 0-d tensor that compares with a as torch compares a
 * tensor with a Python number: int64 when v is an integer and a is not
 * float, else float32 (torch converts the number to float32 too). */
static cg_tensor *compare_scalar(int op, const cg_tensor *a, double v)
{
    if (!a) {
        cg_error_null_input(cmp_name[op]);
        return NULL;
    }
    cg_tensor *s;
    if (!cg_dtype_is_float(a->dtype) && v == floor(v) && fabs(v) < 0x1p62) {
        s = cg_scalar_i64((int64_t)v);
    } else {
        s = cg_scalar((float)v);
    }
    if (!s)
        return NULL;
    cg_tensor *out = compare(op, a, s);
    cg_release(s);
    return out;
}

cg_tensor *cg_eq(const cg_tensor *a, const cg_tensor *b) { return compare(CMP_EQ, a, b); }
cg_tensor *cg_ne(const cg_tensor *a, const cg_tensor *b) { return compare(CMP_NE, a, b); }
cg_tensor *cg_lt(const cg_tensor *a, const cg_tensor *b) { return compare(CMP_LT, a, b); }
cg_tensor *cg_le(const cg_tensor *a, const cg_tensor *b) { return compare(CMP_LE, a, b); }
cg_tensor *cg_gt(const cg_tensor *a, const cg_tensor *b) { return compare(CMP_GT, a, b); }
cg_tensor *cg_ge(const cg_tensor *a, const cg_tensor *b) { return compare(CMP_GE, a, b); }
cg_tensor *cg_eq_scalar(const cg_tensor *a, double v) { return compare_scalar(CMP_EQ, a, v); }
cg_tensor *cg_ne_scalar(const cg_tensor *a, double v) { return compare_scalar(CMP_NE, a, v); }
cg_tensor *cg_lt_scalar(const cg_tensor *a, double v) { return compare_scalar(CMP_LT, a, v); }
cg_tensor *cg_le_scalar(const cg_tensor *a, double v) { return compare_scalar(CMP_LE, a, v); }
cg_tensor *cg_gt_scalar(const cg_tensor *a, double v) { return compare_scalar(CMP_GT, a, v); }
cg_tensor *cg_ge_scalar(const cg_tensor *a, double v) { return compare_scalar(CMP_GE, a, v); }
cg_tensor *cg_logical_and(const cg_tensor *a, const cg_tensor *b) { return compare(LOG_AND, a, b); }
cg_tensor *cg_logical_or(const cg_tensor *a, const cg_tensor *b) { return compare(LOG_OR, a, b); }
cg_tensor *cg_logical_not(const cg_tensor *a) { return compare(LOG_NOT, a, NULL); }

cg_tensor *cg_nonzero(const cg_tensor *a)
{
    if (!a) {
        cg_error_null_input("nonzero");
        return NULL;
    }
    cg_tensor *t = compare_scalar(CMP_NE, a, 0); /* bool, contiguous, a's shape */
    const bool *p = t ? cg_data_bool(t) : NULL;
    int64_t n = t ? cg_numel(t) : 0, count = 0;
    for (int64_t i = 0; i < n; i++)
        count += p[i];
    cg_tensor *out = t ? cg_empty_dtype(CG_I64, 2, (int64_t[]){count, a->ndim}) : NULL;
    int64_t *o = out ? cg_data_i64(out) : NULL;
    for (int64_t i = 0; o && i < n; i++) {
        if (!p[i])
            continue;
        for (int64_t k = a->ndim - 1, rem = i; k >= 0; k--) { /* row-major coordinates */
            o[k] = rem % a->shape[k];
            rem /= a->shape[k];
        }
        o += a->ndim;
    }
    cg_release(t);
    return out;
}
