/* cgrad core: pointwise ops of several operands and their gradients'
 * pieces (declared in core/ops.h, "more pointwise ops"): nan_to_num,
 * fmod, remainder, the rounded divisions of their gradients, lerp, clamp
 * with tensor bounds, cross, and one step of diff.
 *
 * The operands broadcast (NumPy rules) and promote as torch.result_type
 * (core/typed_impl.h): each is read as a dense copy in the op's compute
 * dtype (float32 for floats, int64 for integers and bool), the result
 * computed as PyTorch 1.13's CPU kernel computes each element (its
 * expressions, float32 arithmetic) and rounded once to its dtype. Chunks
 * of elements over threads: the same bits for any thread count. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/typed_impl.h"

#define PW_PAR 65536
#define PW_GRAIN 16384

enum {
    K_NAN_TO_NUM,
    K_NAN_TO_NUM_BW,
    K_FMOD,
    K_REMAINDER,
    K_DIV_TRUNC,
    K_DIV_FLOOR,
    K_LERP,
    K_CLAMP,
    K_CLAMP_BW,
};

typedef struct {
    int k;
    const float *a, *b, *c, *d; /* floats: up to four operands of the result's shape */
    const int64_t *ia, *ib, *ic;
    float *o;
    int64_t *io;
    float p[3];  /* nan_to_num's replacements; lerp's scalar weight */
    int which;   /* clamp backward: 0 x, 1 min, 2 max */
    bool lo, hi; /* clamp: the bounds given */
} pw_job;

/* PyTorch's div_floor_floating: Python's floor division, a NaN or inf
 * where b is 0 (IEEE a / b) */
static float div_floor(float a, float b)
{
    if (b == 0)
        return a / b;
    const float mod = fmodf(a, b);
    float div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0))
        div -= 1.0f;
    if (div == 0)
        return copysignf(0.0f, a / b);
    float fl = floorf(div);
    if (div - fl > 0.5f)
        fl += 1.0f;
    return fl;
}

/* ATen's std::max / std::min: a tie keeps a; a NaN a passes */
static float max_keep(float a, float b) { return a < b ? b : a; }
static float min_keep(float a, float b) { return b < a ? b : a; }

static float clamp_f(const pw_job *j, int64_t i)
{
    const float x = j->a[i];
    if (j->lo && j->hi) {
        const float lo = j->b[i], hi = j->c[i];
        if (lo != lo || hi != hi)
            return NAN;
        return min_keep(max_keep(x, lo), hi);
    }
    const float v = j->lo ? j->b[i] : j->c[i]; /* maximum / minimum: NaN from either */
    if (x != x || v != v)
        return x != x ? x : v;
    return j->lo ? max_keep(x, v) : min_keep(x, v);
}

/* PyTorch's clamp_backward (x) and clamp_backward_min_max (min, max) */
static bool clamp_passes(const pw_job *j, int64_t i)
{
    const float x = j->a[i], lo = j->lo ? j->b[i] : 0, hi = j->hi ? j->c[i] : 0;
    if (j->which == 0)
        return (!j->lo || x >= lo) && (!j->hi || x <= hi);
    if (j->which == 1)
        return x < lo && (!j->hi || lo < hi);
    return x > hi || (j->lo && hi < lo);
}

static float elem_f(const pw_job *j, int64_t i)
{
    const float a = j->a[i];
    float b, m;
    switch (j->k) {
    case K_NAN_TO_NUM:
        return a != a ? j->p[0] : (a == INFINITY ? j->p[1] : (a == -INFINITY ? j->p[2] : a));
    case K_NAN_TO_NUM_BW: /* g times isfinite(x): g * 0 where not finite, as PyTorch */
        return isfinite(a) ? j->b[i] : j->b[i] * 0.0f;
    case K_FMOD: return fmodf(a, j->b[i]);
    case K_REMAINDER:
        b = j->b[i];
        m = fmodf(a, b);
        return m != 0 && (b < 0) != (m < 0) ? m + b : m;
    case K_DIV_TRUNC: return truncf(a / j->b[i]);
    case K_DIV_FLOOR: return div_floor(a, j->b[i]);
    case K_LERP: { /* ATen's lerp: the weight's small side from the start */
        const float e = j->b[i], w = j->c ? j->c[i] : j->p[0];
        return fabsf(w) < 0.5f ? a + w * (e - a) : e - (e - a) * (1.0f - w);
    }
    case K_CLAMP: return clamp_f(j, i);
    default: return clamp_passes(j, i) ? j->d[i] : 0.0f;
    }
}

/* integers (int64, wrapping as the dtype's arithmetic; checked for zero
 * divisors before) */
static int64_t elem_i(const pw_job *j, int64_t i)
{
    const int64_t a = j->ia[i];
    int64_t b, r;
    switch (j->k) {
    case K_FMOD:
    case K_REMAINDER:
        b = j->ib[i];
        r = b == -1 ? 0 : a % b; /* INT64_MIN % -1 is 0 (C leaves it undefined) */
        return j->k == K_REMAINDER && r != 0 && (r < 0) != (b < 0) ? r + b : r;
    default: { /* clamp */
        int64_t v = a;
        if (j->lo && v < j->ib[i])
            v = j->ib[i];
        if (j->hi && j->ic[i] < v)
            v = j->ic[i];
        return v;
    }
    }
}

static void pw_chunk(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const pw_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        if (j->o)
            j->o[i] = elem_f(j, i);
        else
            j->io[i] = elem_i(j, i);
    }
}

/* Up to four operands (NULL where absent) broadcast and converted to rt's
 * compute dtype, job j run over them into a result of dtype out_dt (its
 * values rounded once); NULL + error. */
static cg_tensor *run_pw(const char *op, pw_job *j, cg_dtype rt, cg_dtype out_dt, int n,
                         const cg_tensor *const *in)
{
    int64_t shape[CG_MAX_DIMS];
    const cg_tensor *given[4] = {NULL, NULL, NULL, NULL};
    int m = 0;
    for (int k = 0; k < n; k++)
        if (in[k])
            given[m++] = in[k];
    const int nd = cg_broadcast_n(op, m, given, shape);
    if (nd < 0)
        return NULL;
    const bool fl = cg_dtype_is_float(rt);
    cg_tensor *d[4] = {NULL, NULL, NULL, NULL}, *w = NULL, *out = NULL;
    bool ok = true;
    for (int k = 0; k < n && ok; k++)
        ok = !in[k] || (d[k] = cg_dense_common(in[k], rt, nd, shape)) != NULL;
    if (ok)
        w = cg_empty_dtype(fl ? CG_F32 : CG_I64, nd, shape);
    if (w) {
        if (fl) {
            const float **fp[4] = {&j->a, &j->b, &j->c, &j->d};
            for (int k = 0; k < n; k++)
                *fp[k] = d[k] ? cg_data(d[k]) : NULL;
            j->o = cg_data(w);
        } else {
            const int64_t **ip[3] = {&j->ia, &j->ib, &j->ic};
            for (int k = 0; k < n && k < 3; k++)
                *ip[k] = d[k] ? cg_data_i64(d[k]) : NULL;
            j->io = cg_data_i64(w);
        }
        const int64_t numel = cg_numel(w);
        cg_shares_run(numel, PW_GRAIN, cg_shares_team(numel > PW_PAR), pw_chunk, j);
        out = cg_k_to(w, out_dt);
    }
    cg_release_all(5, d[0], d[1], d[2], d[3], w);
    return out;
}

/* ------------------------------------------------------- nan_to_num */
/* v in the float dtype dt (beyond its range: inf, as PyTorch converts) */
static float in_dtype(cg_dtype dt, double v)
{
    const float f = (float)v;
    if (dt == CG_BF16)
        return cg_bf16_to_f32(cg_f32_to_bf16(f));
    return dt == CG_F16 ? cg_f16_to_f32(cg_f32_to_f16(f)) : f;
}

cg_tensor *cg_k_nan_to_num(const cg_tensor *a, double nan, const double *posinf,
                           const double *neginf)
{
    if (!a) {
        cg_error_null_input("nan_to_num");
        return NULL;
    }
    if (!cg_dtype_is_float(a->dtype)) /* integers and bool: a copy, as PyTorch */
        return cg_k_clone(a);
    const cg_dtype dt = a->dtype;
    const double big = dt == CG_F16 ? 65504.0 : dt == CG_BF16 ? 0x1.fep127 : (double)FLT_MAX;
    pw_job j = {.k = K_NAN_TO_NUM};
    j.p[0] = in_dtype(dt, nan);
    j.p[1] = in_dtype(dt, posinf ? *posinf : big);
    j.p[2] = in_dtype(dt, neginf ? *neginf : -big);
    return run_pw("nan_to_num", &j, dt, dt, 1, &a);
}

cg_tensor *cg_k_nan_to_num_backward(const cg_tensor *x, const cg_tensor *g)
{
    if (!x || !g) {
        cg_error_null_input("nan_to_num backward");
        return NULL;
    }
    pw_job j = {.k = K_NAN_TO_NUM_BW};
    return run_pw("nan_to_num backward", &j, CG_F32, g->dtype, 2, (const cg_tensor *[]){x, g});
}

/* ---------------------------------------------- fmod, remainder */
/* the integer divisors (int64, dense) all nonzero, else false + error */
static bool no_zero_divisor(const char *op, const cg_tensor *a, const cg_tensor *b)
{
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_broadcast_n(op, 2, (const cg_tensor *[]){a, b}, shape);
    if (nd < 0)
        return false;
    cg_tensor *d = cg_dense_as(b, CG_I64, b->ndim, b->shape);
    bool ok = d != NULL;
    for (int64_t i = 0; ok && i < cg_numel(d) && cg_numel_shape(nd, shape) > 0; i++)
        ok = cg_data_i64(d)[i] != 0;
    if (d && !ok)
        cg_set_error("%s: integer division by zero (PyTorch's ZeroDivisionError)", op);
    cg_release(d);
    return ok;
}

static cg_tensor *mod_op(const char *op, int k, const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b) {
        cg_error_null_input(op);
        return NULL;
    }
    const cg_dtype rt = cg_result_type(2, (const cg_tensor *[]){a, b});
    if (rt == CG_BOOL) {
        cg_set_error("%s: bool operands are not supported (as PyTorch)", op);
        return NULL;
    }
    if (!cg_dtype_is_float(rt) && !no_zero_divisor(op, a, b))
        return NULL;
    pw_job j = {.k = k};
    return run_pw(op, &j, rt, rt, 2, (const cg_tensor *[]){a, b});
}

cg_tensor *cg_k_fmod(const cg_tensor *a, const cg_tensor *b)
{
    return mod_op("fmod", K_FMOD, a, b);
}

cg_tensor *cg_k_remainder(const cg_tensor *a, const cg_tensor *b)
{
    return mod_op("remainder", K_REMAINDER, a, b);
}

cg_tensor *cg_k_div_rounded(const cg_tensor *a, const cg_tensor *b, bool floor)
{
    if (!a || !b) {
        cg_error_null_input("div_rounded");
        return NULL;
    }
    const cg_dtype rt = cg_result_type(2, (const cg_tensor *[]){a, b});
    if (!cg_dtype_is_float(rt)) {
        cg_set_error("div_rounded: %s operands, expected floats", cg_dtype_name(rt));
        return NULL;
    }
    pw_job j = {.k = floor ? K_DIV_FLOOR : K_DIV_TRUNC};
    return run_pw("div_rounded", &j, rt, rt, 2, (const cg_tensor *[]){a, b});
}

/* --------------------------------------------------------------- lerp */
cg_tensor *cg_k_lerp(const cg_tensor *start, const cg_tensor *end, const cg_tensor *weight, float w)
{
    if (!start || !end) {
        cg_error_null_input("lerp");
        return NULL;
    }
    const cg_dtype dt = start->dtype;
    const char *bad = end->dtype != dt ? "end" : weight && weight->dtype != dt ? "weight" : NULL;
    if (bad) {
        cg_set_error("lerp: expected dtype %s for `%s` but got dtype %s (as PyTorch: one dtype)",
                     cg_dtype_name(dt), bad, cg_dtype_name((bad[0] == 'e' ? end : weight)->dtype));
        return NULL;
    }
    if (!cg_dtype_is_float(dt)) {
        cg_set_error("lerp: %s tensors, expected a float dtype (as PyTorch)", cg_dtype_name(dt));
        return NULL;
    }
    pw_job j = {.k = K_LERP};
    j.p[0] = w;
    return run_pw("lerp", &j, dt, dt, 3, (const cg_tensor *[]){start, end, weight});
}

/* -------------------------------------------------------------- clamp */
static bool clamp_args(const char *op, const cg_tensor *x, const cg_tensor *lo, const cg_tensor *hi,
                       cg_dtype *rt)
{
    if (!x) {
        cg_error_null_input(op);
        return false;
    }
    if (!lo && !hi) {
        cg_set_error("%s: at least one of min and max must be given (not NULL)", op);
        return false;
    }
    *rt = cg_result_type(3, (const cg_tensor *[]){x, lo, hi});
    if (*rt == CG_BOOL) {
        cg_set_error("%s: bool tensors are not supported (as PyTorch)", op);
        return false;
    }
    return true;
}

cg_tensor *cg_k_clamp_tensor(const cg_tensor *x, const cg_tensor *lo, const cg_tensor *hi)
{
    cg_dtype rt;
    if (!clamp_args("clamp", x, lo, hi, &rt))
        return NULL;
    pw_job j = {.k = K_CLAMP, .lo = lo != NULL, .hi = hi != NULL};
    return run_pw("clamp", &j, rt, rt, 3, (const cg_tensor *[]){x, lo, hi});
}

cg_tensor *cg_k_clamp_tensor_backward(const cg_tensor *x, const cg_tensor *lo, const cg_tensor *hi,
                                      const cg_tensor *g, int which)
{
    cg_dtype rt;
    if (!clamp_args("clamp backward", x, lo, hi, &rt))
        return NULL;
    if (!g || !cg_dtype_is_float(rt) || which < 0 || which > 2 || (which == 1 && !lo) ||
        (which == 2 && !hi)) {
        cg_set_error("clamp backward: no gradient %d of a %s clamp", which, cg_dtype_name(rt));
        return NULL;
    }
    /* compared in the result's dtype, as PyTorch's comparisons promote */
    pw_job j = {.k = K_CLAMP_BW, .lo = lo != NULL, .hi = hi != NULL, .which = which};
    return run_pw("clamp backward", &j, rt, g->dtype, 4, (const cg_tensor *[]){x, lo, hi, g});
}

/* -------------------------------------------------------------- cross */
/* the three components of line (stride s) of x and y into o */
static void cross_f(const float *x, const float *y, float *o, int64_t s)
{
    o[0] = x[s] * y[2 * s] - x[2 * s] * y[s];
    o[s] = x[2 * s] * y[0] - x[0] * y[2 * s];
    o[2 * s] = x[0] * y[s] - x[s] * y[0];
}

static void cross_i(const int64_t *x, const int64_t *y, int64_t *o, int64_t s)
{
    const uint64_t *u = (const uint64_t *)x, *v = (const uint64_t *)y; /* wrapping */
    o[0] = (int64_t)(u[s] * v[2 * s] - u[2 * s] * v[s]);
    o[s] = (int64_t)(u[2 * s] * v[0] - u[0] * v[2 * s]);
    o[2 * s] = (int64_t)(u[0] * v[s] - u[s] * v[0]);
}

cg_tensor *cg_k_cross(const cg_tensor *a, const cg_tensor *b, int dim)
{
    if (!a || !b) {
        cg_error_null_input("linalg.cross");
        return NULL;
    }
    char b1[96], b2[96];
    if (a->dtype != b->dtype || a->dtype == CG_BOOL) {
        cg_set_error("linalg.cross: the inputs are %s and %s, expected one dtype, not bool (as "
                     "PyTorch)",
                     cg_dtype_name(a->dtype), cg_dtype_name(b->dtype));
        return NULL;
    }
    if (a->ndim != b->ndim) {
        cg_set_error("linalg.cross: inputs must have the same number of dimensions (got %s and "
                     "%s)",
                     cg_shape_str(a, b1, sizeof b1), cg_shape_str(b, b2, sizeof b2));
        return NULL;
    }
    const int d = cg_norm_dim("linalg.cross", dim, a->ndim);
    if (d < 0)
        return NULL;
    if (a->shape[d] != 3 || b->shape[d] != 3) {
        cg_set_error("linalg.cross: inputs dimension %d must have length 3. Got %lld and %lld", d,
                     (long long)a->shape[d], (long long)b->shape[d]);
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_broadcast_n("linalg.cross", 2, (const cg_tensor *[]){a, b}, shape);
    if (nd < 0)
        return NULL;
    const bool fl = cg_dtype_is_float(a->dtype);
    const cg_dtype ct = fl ? CG_F32 : CG_I64;
    cg_tensor *x = cg_dense_as(a, ct, nd, shape), *y = x ? cg_dense_as(b, ct, nd, shape) : NULL;
    cg_tensor *w = y ? cg_empty_dtype(ct, nd, shape) : NULL, *out = NULL;
    if (w) {
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < nd; i++)
            *(i < d ? &outer : &inner) *= i == d ? 1 : shape[i];
        for (int64_t p = 0; p < outer; p++)
            for (int64_t q = 0; q < inner; q++) {
                const int64_t at = p * 3 * inner + q;
                if (fl)
                    cross_f(cg_data(x) + at, cg_data(y) + at, cg_data(w) + at, inner);
                else
                    cross_i(cg_data_i64(x) + at, cg_data_i64(y) + at, cg_data_i64(w) + at, inner);
            }
        out = cg_k_to(w, a->dtype);
    }
    cg_release_all(3, x, y, w);
    return out;
}

/* --------------------------------------------------------------- diff */
cg_tensor *cg_k_diff(const cg_tensor *a, int dim)
{
    if (!a) {
        cg_error_null_input("diff");
        return NULL;
    }
    if (a->ndim == 0) {
        cg_set_error("diff: expects input to be at least one-dimensional");
        return NULL;
    }
    const int d = cg_norm_dim("diff", dim, a->ndim);
    if (d < 0)
        return NULL;
    const cg_dtype ct = cg_dtype_is_float(a->dtype) ? CG_F32 : CG_I64;
    int64_t shape[CG_MAX_DIMS], outer = 1, inner = 1, n = a->shape[d];
    memcpy(shape, a->shape, sizeof shape);
    shape[d] = n ? n - 1 : 0;
    for (int i = 0; i < a->ndim; i++)
        *(i < d ? &outer : &inner) *= i == d ? 1 : a->shape[i];
    cg_tensor *x = cg_dense_as(a, ct, a->ndim, a->shape);
    cg_tensor *w = x ? cg_empty_dtype(ct, a->ndim, shape) : NULL, *out = NULL;
    if (w) {
        for (int64_t p = 0; p < outer; p++)
            for (int64_t i = 0; i + 1 < n; i++)
                for (int64_t q = 0; q < inner; q++) {
                    const int64_t s = (p * n + i) * inner + q, o = (p * (n - 1) + i) * inner + q;
                    if (ct == CG_F32)
                        cg_data(w)[o] = cg_data(x)[s + inner] - cg_data(x)[s];
                    else if (a->dtype == CG_BOOL) /* logical_xor, as PyTorch's bool diff */
                        cg_data_i64(w)[o] = cg_data_i64(x)[s + inner] != cg_data_i64(x)[s];
                    else
                        cg_data_i64(w)[o] = (int64_t)((uint64_t)cg_data_i64(x)[s + inner] -
                                                      (uint64_t)cg_data_i64(x)[s]);
                }
        out = cg_k_to(w, a->dtype);
    }
    cg_release_all(2, x, w);
    return out;
}
