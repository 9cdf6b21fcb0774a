/* Tensors: creation (empty, full, zeros, arange, from data, clones), strided
 * copies and fills, the counter-based RNG and random tensors. The storage and
 * lifecycle are tensor.c. */
#include "core/tensor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/shares.h"
#include "core/tensor_impl.h"

/* -------------------------------------------------- strided iteration */
/* The storage offset of innermost row `row` of t (rows in row-major order
 * of the outer dims). Rows are independent, so callers may parallelise. */
static int64_t outer_offset(const cg_tensor *t, int64_t row)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 2; d >= 0; d--) {
        int64_t i = row % t->shape[d];
        row /= t->shape[d];
        off += i * t->strides[d];
    }
    return off;
}

#define PAR_THRESHOLD 32768

/* A strided conversion row by row: row r of dst (or of the contiguous out)
 * from row r of src (or from the one element e, at stride 0) */
typedef struct {
    const cg_tensor *dst, *src;
    void *out;
    const void *e;
    cg_dtype dd, sd; /* the dtypes of dst (or out) and src (or e) */
    int64_t ds, ss, inner;
} conv_rows;

static void convert_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const conv_rows *c = ctx;
    const size_t z = cg_dtype_size(c->dd);
    for (int64_t r = r0; r < r1; r++) {
        void *d = c->dst ? cg_elem_ptr(c->dst, outer_offset(c->dst, r))
                         : (char *)c->out + (size_t)(r * c->inner) * z;
        const void *s = c->src ? cg_elem_ptr(c->src, outer_offset(c->src, r)) : c->e;
        cg_convert_run(c->dd, d, c->ds, c->sd, s, c->ss, c->inner);
    }
}

/* convert_rows on every row, in parallel when n elements are many */
static void convert_all_rows(const conv_rows *c, int64_t n)
{
    cg_shares_run(n / c->inner, cg_shares_rows(c->inner), cg_shares_team(n > PAR_THRESHOLD),
                  convert_rows, c);
}

/* Copy t's elements in row-major order into contiguous out of dtype dt,
 * converting. */
static void copy_out(const cg_tensor *t, cg_dtype dt, void *out)
{
    int64_t n = cg_numel(t);
    if (n == 0)
        return;
    if (cg_is_contiguous(t)) {
        cg_convert_run(dt, out, 1, t->dtype, cg_elem_ptr(t, t->offset), 1, n);
        return;
    }
    int64_t inner = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t is = t->ndim ? t->strides[t->ndim - 1] : 0;
    convert_all_rows(
        &(conv_rows){
            .src = t, .out = out, .dd = dt, .sd = t->dtype, .ds = 1, .ss = is, .inner = inner},
        n);
}

bool cg_copy_to(const cg_tensor *t, float *out)
{
    if (!t || !out) {
        if (!t)
            return cg_error_null_input("cg_copy_to");
        cg_set_error("copy_to: NULL destination");
        return false;
    }
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_copy_to"))
        return false;
    copy_out(t, CG_F32, out);
    return true;
}

bool cg_copy_to_array(const cg_tensor *t, void *out)
{
    if (!t || !out) {
        if (!t)
            return cg_error_null_input("cg_copy_to_array");
        cg_set_error("copy_to_array: NULL destination");
        return false;
    }
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_copy_to_array"))
        return false;
    copy_out(t, t->dtype, out);
    return true;
}

/* The bytes [*lo, *hi) of t's storage that its elements (numel > 0) span. */
static void byte_span(const cg_tensor *t, int64_t *lo, int64_t *hi)
{
    int64_t a = t->offset, b = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        int64_t reach = t->strides[i] * (t->shape[i] - 1);
        if (reach < 0)
            a += reach;
        else
            b += reach;
    }
    int64_t z = (int64_t)cg_dtype_size(t->dtype);
    *lo = a * z;
    *hi = (b + 1) * z;
}

/* Whether src, broadcast to dst's shape, reads each element of dst's
 * storage at the position dst writes it (x += x, any layout). */
static bool same_elements(const cg_tensor *dst, const cg_tensor *src)
{
    if (dst->offset != src->offset || dst->dtype != src->dtype || src->ndim > dst->ndim)
        return false;
    int lead = dst->ndim - src->ndim;
    for (int i = 0; i < dst->ndim; i++) {
        int j = i - lead;
        int64_t s = (j < 0 || src->shape[j] == 1) ? 0 : src->strides[j];
        if (dst->shape[i] > 1 && s != dst->strides[i])
            return false;
    }
    return true;
}

const cg_tensor *cg_k_unaliased(const cg_tensor *dst, const cg_tensor *src, bool elementwise,
                                cg_tensor **copy)
{
    *copy = NULL;
    if (!src->storage || src->storage != dst->storage || cg_numel(src) == 0 || cg_numel(dst) == 0 ||
        (elementwise && same_elements(dst, src)))
        return src;
    int64_t dlo, dhi, slo, shi;
    byte_span(dst, &dlo, &dhi);
    byte_span(src, &slo, &shi);
    if (shi <= dlo || dhi <= slo)
        return src;
    *copy = cg_k_clone(src);
    return *copy;
}

bool cg_check_writable(const char *op, const cg_tensor *dst)
{
    if (!dst)
        return cg_error_null_input(op);
    if (cg_numel(dst) == 0) /* no elements, none shared: [5, 0, 5]'s strides are [0, 5, 1] */
        return true;
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] > 1 && dst->strides[i] == 0) {
            char b[96];
            cg_set_error("%s: destination of shape %s is a broadcast view (stride-0 dim %d): "
                         "several elements share one memory location",
                         op, cg_shape_str(dst, b, sizeof b), i);
            return false;
        }
    }
    return true;
}

bool cg_check_no_history(const char *op, const cg_tensor *t)
{
    if (!t || !t->node)
        return true;
    char b[96];
    cg_set_error("%s: the tensor %s is the output of an op (it has a graph node), and an in-place "
                 "write is not recorded: its gradient would still flow through the op as if the "
                 "values had not changed; write into cg_detach(t), or compute a new tensor",
                 op, cg_shape_str(t, b, sizeof b));
    return false;
}

static void copy_into(cg_tensor *dst, const cg_tensor *src);

bool cg_k_copy_(cg_tensor *dst, const cg_tensor *src)
{
    if (!dst || !src)
        return cg_error_null_input("cg_copy_");
    if (cg_debug_enabled() &&
        (!cg_lifetime_use_ok(dst, "copy_") || !cg_lifetime_use_ok(src, "copy_")))
        return false;
    if (!cg_check_writable("copy_", dst))
        return false;
    if (!cg_same_shape(dst, src)) {
        char b1[96], b2[96];
        cg_set_error("copy_: destination shape %s differs from source shape %s",
                     cg_shape_str(dst, b1, sizeof b1), cg_shape_str(src, b2, sizeof b2));
        return false;
    }
    cg_tensor *copy;
    src = cg_k_unaliased(dst, src, true, &copy);
    if (!src)
        return false;
    copy_into(dst, src);
    cg_tensor_modified(dst); /* once written: see cg_tensor_modified */
    cg_release(copy);
    return true;
}

/* cg_k_copy_ once checked, src not overlapping dst but element for element */
static void copy_into(cg_tensor *dst, const cg_tensor *src)
{
    int64_t n = cg_numel(dst);
    if (n == 0)
        return;
    if (cg_is_contiguous(dst)) {
        copy_out(src, dst->dtype, cg_elem_ptr(dst, dst->offset));
        return;
    }
    int64_t inner = dst->ndim ? dst->shape[dst->ndim - 1] : 1;
    int64_t ds = dst->ndim ? dst->strides[dst->ndim - 1] : 0;
    int64_t ss = src->ndim ? src->strides[src->ndim - 1] : 0;
    convert_all_rows(&(conv_rows){.dst = dst,
                                  .src = src,
                                  .dd = dst->dtype,
                                  .sd = src->dtype,
                                  .ds = ds,
                                  .ss = ss,
                                  .inner = inner},
                     n);
}

/* t's rows set to v (float32) */
typedef struct {
    const cg_tensor *t;
    float v;
    int64_t is, inner;
} fill_job;

static void fill_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const fill_job *f = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *p = (float *)f->t->storage->data + outer_offset(f->t, r);
        for (int64_t j = 0; j < f->inner; j++)
            p[j * f->is] = f->v;
    }
}

static void fill_into(cg_tensor *t, float v);

bool cg_fill_(cg_tensor *t, float v)
{
    if (!t)
        return cg_error_null_input("cg_fill_");
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "fill_"))
        return false;
    if (!cg_check_no_history("fill_", t))
        return false;
    fill_into(t, v);
    cg_tensor_modified(t); /* once written: see cg_tensor_modified */
    return true;
}

static void fill_into(cg_tensor *t, float v)
{
    int64_t n = cg_numel(t);
    if (n == 0)
        return;
    int64_t inner = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t is = t->ndim ? t->strides[t->ndim - 1] : 0;
    if (t->dtype != CG_F32) { /* one converted element, copied (stride 0) */
        char e[8];
        cg_convert_run(t->dtype, e, 1, CG_F32, &v, 1, 1);
        convert_all_rows(
            &(conv_rows){
                .dst = t, .e = e, .dd = t->dtype, .sd = t->dtype, .ds = is, .inner = inner},
            n);
        return;
    }
    fill_job job = {t, v, is, inner};
    cg_shares_run(n / inner, cg_shares_rows(inner), cg_shares_team(n > PAR_THRESHOLD), fill_rows,
                  &job);
}

/* ------------------------------------------------------------- creation */
bool cg_shape_check(const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > CG_MAX_DIMS) {
        cg_set_error("%s: ndim %d out of range [0, %d]", op, ndim, CG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        cg_set_error("%s: NULL shape", op);
        return false;
    }
    /* the sizes but 0 multiplied, so that no order of them (a permute of a
     * size-0 tensor) overflows on its way to the count */
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        char b[96];
        if (shape[i] < 0) {
            cg_set_error("%s: negative size in shape %s", op,
                         cg_shape_str_n(ndim, shape, b, sizeof b));
            return false;
        }
        if (shape[i] && n > CG_MAX_NUMEL / shape[i]) {
            cg_set_error("%s: shape %s has too many elements (the most is 2^61 - 1)", op,
                         cg_shape_str_n(ndim, shape, b, sizeof b));
            return false;
        }
        n *= shape[i] ? shape[i] : 1;
    }
    return true;
}

void cg_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

/* A contiguous tensor of dt, its bytes all zero when zeroed (every dtype's
 * zero is all-zero bits). */
static cg_tensor *new_dense(cg_dtype dt, int ndim, const int64_t *shape, bool zeroed)
{
    if ((unsigned)dt >= CG_NDTYPES) {
        cg_set_error("empty: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (!cg_shape_check("empty", ndim, shape))
        return NULL;
    int64_t strides[CG_MAX_DIMS];
    cg_contiguous_strides(ndim, shape, strides);
    cg_storage *s = cg_storage_new(cg_numel_shape(ndim, shape), dt, zeroed);
    if (!s)
        return NULL;
    cg_tensor *t = cg_tensor_header(s, dt, 0, ndim, shape, strides);
    cg_storage_release(s);
    return t;
}

cg_tensor *cg_empty_dtype(cg_dtype dt, int ndim, const int64_t *shape)
{
    return new_dense(dt, ndim, shape, false);
}

cg_tensor *cg_empty(int ndim, const int64_t *shape) { return cg_empty_dtype(CG_F32, ndim, shape); }

cg_tensor *cg_full_dtype(cg_dtype dt, int ndim, const int64_t *shape, double value)
{
    if (dt == CG_F32)
        return cg_full(ndim, shape, (float)value);
    if (value == 0.0 && !signbit(value))
        return new_dense(dt, ndim, shape, true);
    cg_tensor *t = cg_empty_dtype(dt, ndim, shape);
    if (!t)
        return NULL;
    char e[8];
    cg_elem_set(dt, e, value);
    cg_convert_run(dt, t->storage->data, 1, dt, e, 0, cg_numel(t));
    return t;
}

cg_tensor *cg_zeros_dtype(cg_dtype dt, int ndim, const int64_t *shape)
{
    return cg_full_dtype(dt, ndim, shape, 0.0);
}

cg_tensor *cg_full(int ndim, const int64_t *shape, float value)
{
    if (value == 0.0f && !signbit(value))
        return new_dense(CG_F32, ndim, shape, true);
    cg_tensor *t = cg_empty(ndim, shape);
    if (!t)
        return NULL;
    float *p = cg_data(t);
    for (int64_t i = 0, n = cg_numel(t); i < n; i++)
        p[i] = value;
    return t;
}

cg_tensor *cg_zeros(int ndim, const int64_t *shape) { return cg_full(ndim, shape, 0.0f); }
cg_tensor *cg_ones(int ndim, const int64_t *shape) { return cg_full(ndim, shape, 1.0f); }
cg_tensor *cg_scalar(float value) { return cg_full(0, NULL, value); }

cg_tensor *cg_from_data(int ndim, const int64_t *shape, const float *data)
{
    if (!data) {
        cg_set_error("from_data: NULL data");
        return NULL;
    }
    cg_tensor *t = cg_empty(ndim, shape);
    if (t)
        memcpy(cg_data(t), data, (size_t)cg_numel(t) * sizeof(float));
    return t;
}

cg_tensor *cg_empty_like(const cg_tensor *t)
{
    return t ? cg_empty_dtype(t->dtype, t->ndim, t->shape)
             : (cg_error_null_input("cg_empty_like"), NULL);
}
cg_tensor *cg_empty_dense_like(const cg_tensor *t, cg_dtype dt)
{
    if (!t)
        return cg_error_null_input("cg_empty_dense_like"), NULL;
    if (!cg_is_dense(t) || cg_is_contiguous(t))
        return cg_empty_dtype(dt, t->ndim, t->shape);
    if ((unsigned)dt >= CG_NDTYPES) {
        cg_set_error("empty_dense_like: unknown dtype %d", (int)dt);
        return NULL;
    }
    cg_storage *s = cg_storage_new(cg_numel(t), dt, false);
    if (!s)
        return NULL;
    cg_tensor *y = cg_tensor_header(s, dt, 0, t->ndim, t->shape, t->strides);
    cg_storage_release(s);
    return y;
}
cg_tensor *cg_zeros_like(const cg_tensor *t)
{
    return t ? cg_zeros_dtype(t->dtype, t->ndim, t->shape)
             : (cg_error_null_input("cg_zeros_like"), NULL);
}

cg_tensor *cg_k_clone(const cg_tensor *t)
{
    if (!t) {
        cg_error_null_input("cg_clone");
        return NULL;
    }
    cg_tensor *c = cg_empty_like(t);
    if (c)
        copy_out(t, t->dtype, c->storage->data);
    return c;
}

cg_tensor *cg_k_contiguous(const cg_tensor *t)
{
    if (!t) {
        cg_error_null_input("cg_k_contiguous");
        return NULL;
    }
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "contiguous"))
        return NULL;
    if (cg_is_contiguous(t)) {
        /* a fresh header over the same storage: callers own a new reference
         * without autograd fields */
        return cg_tensor_header(t->storage, t->dtype, t->offset, t->ndim, t->shape, t->strides);
    }
    return cg_k_clone(t);
}

/* ----------------------------------------------------------------- RNG */
/* The generator's arithmetic is core/rng.h's (kernels draw with it too). */
static inline uint64_t rng_bits(uint64_t seed, uint64_t i)
{
    return cg_rng_draw(cg_rng_key(seed), i);
}

static inline float bits_to_unit(uint64_t b) { return cg_rng_draw_unit(b); }

static inline double bits_to_unit_d(uint64_t b) { return (double)(b >> 11) * 0x1.0p-53; }

/* Standard normal from the draw i (uses one 64-bit draw: two 32-bit halves). */
static inline float normal_from(uint64_t seed, uint64_t i)
{
    uint64_t b = rng_bits(seed, i);
    double u1 = ((double)(b >> 32) + 1.0) * 0x1.0p-32; /* (0, 1] */
    double u2 = (double)(b & 0xffffffffu) * 0x1.0p-32; /* [0, 1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

cg_rng cg_rng_new(uint64_t seed) { return (cg_rng){.seed = seed, .counter = 0}; }

/* A NULL generator: false + "<fn>: NULL generator" (the draws then return
 * their neutral value: NaN, 0). */
static bool rng_ok(const cg_rng *r, const char *fn)
{
    if (r)
        return true;
    cg_set_error("%s: NULL generator", fn);
    return false;
}

uint64_t cg_rng_take(cg_rng *r, uint64_t n)
{
    if (!rng_ok(r, "cg_rng_take"))
        return 0;
    return __atomic_fetch_add(&r->counter, n, __ATOMIC_RELAXED);
}

float cg_rng_uniform(cg_rng *r)
{
    return rng_ok(r, "cg_rng_uniform") ? bits_to_unit(rng_bits(r->seed, cg_rng_take(r, 1))) : NAN;
}

double cg_rng_uniform_double(cg_rng *r)
{
    return rng_ok(r, "cg_rng_uniform_double") ? bits_to_unit_d(rng_bits(r->seed, cg_rng_take(r, 1)))
                                              : NAN;
}

float cg_rng_normal(cg_rng *r)
{
    return rng_ok(r, "cg_rng_normal") ? normal_from(r->seed, cg_rng_take(r, 1)) : NAN;
}

uint64_t cg_rng_below(cg_rng *r, uint64_t n)
{
    if (!rng_ok(r, "cg_rng_below"))
        return 0;
    if (n == 0) { /* no value to draw: a caller's bug, named, not a silent 0 */
        cg_set_error("rng_below: n must be > 0 (the range [0, 0) is empty)");
        return 0;
    }
    /* rejection sampling: unbiased */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t b = rng_bits(r->seed, cg_rng_take(r, 1));
        if (b < limit)
            return b % n;
    }
}

int64_t *cg_randperm(cg_rng *r, int64_t n)
{
    if (!r || n < 0) {
        cg_set_error("randperm: %s", r ? "n must be >= 0" : "NULL generator");
        return NULL;
    }
    if (n > CG_MAX_NUMEL) { /* their bytes would wrap in size_t */
        cg_set_error("randperm: %lld ids are too many (the most is 2^61 - 1)", (long long)n);
        return NULL;
    }
    int64_t *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) {
        cg_set_error("randperm: out of memory for %lld ids", (long long)n);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)cg_rng_below(r, (uint64_t)(i + 1));
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

/* Fill with f(seed, base + row-major index): thread-count independent. */
#define RNG_FILL(t, r, expr)                                                                       \
    do {                                                                                           \
        int64_t n_ = cg_numel(t);                                                                  \
        int64_t inner_ = (t)->ndim ? (t)->shape[(t)->ndim - 1] : 1;                                \
        int64_t is_ = (t)->ndim ? (t)->strides[(t)->ndim - 1] : 0;                                 \
        int64_t rows_ = inner_ ? n_ / inner_ : 0;                                                  \
        uint64_t seed_ = (r)->seed, base_ = cg_rng_take((r), (uint64_t)n_);                        \
        _Pragma("omp parallel for schedule(static) if (n_ > PAR_THRESHOLD)") for (int64_t row = 0; \
                                                                                  row < rows_;     \
                                                                                  row++)           \
        {                                                                                          \
            float *p_ = (float *)(t)->storage->data + outer_offset((t), row);                      \
            for (int64_t j = 0; j < inner_; j++) {                                                 \
                uint64_t i_ = base_ + (uint64_t)(row * inner_ + j);                                \
                p_[j * is_] = (expr);                                                              \
            }                                                                                      \
        }                                                                                          \
        cg_tensor_modified(t); /* once written: see cg_tensor_modified */                          \
    } while (0)

bool cg_uniform_(cg_tensor *t, cg_rng *r, float lo, float hi)
{
    if (!t || !r)
        return cg_error_null_input("cg_uniform_");
    if (!cg_check_f32("uniform_", "t", t) || !cg_check_no_history("uniform_", t))
        return false;
    RNG_FILL(t, r, lo + (hi - lo) * bits_to_unit(rng_bits(seed_, i_)));
    return true;
}

bool cg_normal_(cg_tensor *t, cg_rng *r, float mean, float std)
{
    if (!t || !r)
        return cg_error_null_input("cg_normal_");
    if (!cg_check_f32("normal_", "t", t) || !cg_check_no_history("normal_", t))
        return false;
    RNG_FILL(t, r, mean + std * normal_from(seed_, i_));
    return true;
}

cg_tensor *cg_rand(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_empty(ndim, shape);
    if (t && !cg_uniform_(t, r, 0.0f, 1.0f)) {
        cg_release(t);
        return NULL;
    }
    return t;
}

cg_tensor *cg_randn(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_empty(ndim, shape);
    if (t && !cg_normal_(t, r, 0.0f, 1.0f)) {
        cg_release(t);
        return NULL;
    }
    return t;
}
