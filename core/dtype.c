/* Dtypes: names, sizes, promotion and element conversions. */
#include "core/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    bool is_float;
    int rank; /* promotion order within a category (wider is higher) */
} dtype_table[] = {
    [CG_F32] = {"float32", 4, true, 3}, [CG_BF16] = {"bfloat16", 2, true, 1},
    [CG_F16] = {"float16", 2, true, 1}, [CG_I64] = {"int64", 8, false, 2},
    [CG_I32] = {"int32", 4, false, 1},  [CG_BOOL] = {"bool", 1, false, 0},
};
_Static_assert(sizeof dtype_table / sizeof dtype_table[0] == CG_NDTYPES,
               "every cg_dtype needs a row of dtype_table");

static bool valid(cg_dtype dt) { return (unsigned)dt < CG_NDTYPES; }

const char *cg_dtype_name(cg_dtype dt) { return valid(dt) ? dtype_table[dt].name : "?"; }
size_t cg_dtype_size(cg_dtype dt) { return valid(dt) ? dtype_table[dt].size : 0; }
bool cg_dtype_is_float(cg_dtype dt) { return valid(dt) && dtype_table[dt].is_float; }

cg_dtype cg_promote_types(cg_dtype a, cg_dtype b)
{
    if (a == b)
        return a;
    bool fa = cg_dtype_is_float(a), fb = cg_dtype_is_float(b);
    if (fa != fb)
        return fa ? a : b; /* a float wins over integers and bool */
    if (fa)                /* two different floats: float32 unless one is float32 already */
        return CG_F32;
    return dtype_table[a].rank >= dtype_table[b].rank ? a : b;
}

/* ----------------------------------------------------- one element */
/* PyTorch's rounding (c10::BFloat16): nearest even, NaN made quiet. Unlike
 * the GEMM's packing (core/gemm_bf16.c), subnormals are kept, as
 * PyTorch's conversion keeps them. */
uint16_t cg_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cg_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t cg_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x0200u | ((a >> 13) & 0x3ffu) : 0));
    if (a >= 0x477ff000u) /* rounds to 65520 or more: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        float f;
        memcpy(&f, &a, sizeof f);
        /* units of 2^-24, rounded to nearest even by the FPU */
        return (uint16_t)(sign | (uint16_t)lrintf(f * 0x1p24f));
    }
    uint32_t m = a + 0xc8000000u; /* rebias the exponent: 127 -> 15 */
    m += 0x0fffu + ((m >> 13) & 1u);
    return (uint16_t)(sign | (m >> 13));
}

float cg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float x;
    if (e == 0) {
        x = (float)m * 0x1p-24f;
        return sign ? -x : x;
    }
    uint32_t u = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Float to integer as PyTorch on x86 (cvttsd2si): truncation, and the
 * type's minimum for NaN and values out of range. Never undefined. */
static int64_t f_to_i64(double v)
{
    return (isnan(v) || v >= 0x1p63 || v < -0x1p63) ? INT64_MIN : (int64_t)v;
}
static int32_t f_to_i32(double v)
{
    return (isnan(v) || v >= 0x1p31 || v < -0x1p31) ? INT32_MIN : (int32_t)v;
}

double cg_elem_get(cg_dtype dt, const void *p)
{
    switch (dt) {
    case CG_F32: return *(const float *)p;
    case CG_BF16: return cg_bf16_to_f32(*(const uint16_t *)p);
    case CG_F16: return cg_f16_to_f32(*(const uint16_t *)p);
    case CG_I64: return (double)(float)*(const int64_t *)p; /* as torch: through float */
    case CG_I32: return (double)(float)*(const int32_t *)p;
    case CG_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return NAN;
    }
}

int64_t cg_elem_get_i64(cg_dtype dt, const void *p)
{
    switch (dt) {
    case CG_I64: return *(const int64_t *)p;
    case CG_I32: return *(const int32_t *)p;
    case CG_BOOL: return *(const uint8_t *)p != 0;
    default: return f_to_i64(cg_elem_get(dt, p));
    }
}

void cg_elem_set(cg_dtype dt, void *p, double v)
{
    switch (dt) {
    case CG_F32: *(float *)p = (float)v; break;
    case CG_BF16: *(uint16_t *)p = cg_f32_to_bf16((float)v); break;
    case CG_F16: *(uint16_t *)p = cg_f32_to_f16((float)v); break;
    case CG_I64: *(int64_t *)p = f_to_i64(v); break;
    case CG_I32: *(int32_t *)p = f_to_i32(v); break;
    case CG_BOOL: *(uint8_t *)p = v != 0.0; break; /* NaN != 0: true */
    default: break;
    }
}

/* An integer into an integer or bool (no detour through double: int64 ids
 * stay exact); int64 to int32 wraps as a C cast of the bits does, as
 * torch's .int() does. */
static void set_from_int(cg_dtype dt, void *p, int64_t v)
{
    switch (dt) {
    case CG_I64: *(int64_t *)p = v; break;
    case CG_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
    case CG_BOOL: *(uint8_t *)p = v != 0; break;
    default: cg_elem_set(dt, p, (double)(float)v); break;
    }
}

/* A strided copy of one element type: a row of an expanded tensor (ss 0:
 * torch's expand, a sum's gradient) by doubling memcpys of its first
 * element, the rest a plain loop over the element's type (a memcpy call an
 * element made a bfloat16 or int64 copy of a transposed view cost four
 * times float32's instructions; a float32 fill of a row took 7 an
 * element). */
#define COPY_STRIDED_(T)                           \
    do {                                           \
        T *dt_ = (T *)(void *)d;                   \
        const T *st_ = (const T *)(const void *)s; \
        for (int64_t i = 0; i < n; i++)            \
            dt_[i * ds] = st_[i * ss];             \
    } while (0)
static void copy_strided(cg_dtype dt, char *d, int64_t ds, const char *s, int64_t ss, int64_t n)
{
    if (ss == 0 && ds == 1 && n > 0) {
        const size_t z = cg_dtype_size(dt);
        memcpy(d, s, z);
        for (int64_t k = 1; k < n; k *= 2)
            memcpy(d + (size_t)k * z, d, (size_t)(n - k < k ? n - k : k) * z);
        return;
    }
    switch (dt) { /* each element through its own type */
    case CG_F32: COPY_STRIDED_(float); break;
    case CG_BF16:
    case CG_F16: COPY_STRIDED_(uint16_t); break;
    case CG_I64: COPY_STRIDED_(int64_t); break;
    case CG_I32: COPY_STRIDED_(int32_t); break;
    case CG_BOOL: COPY_STRIDED_(uint8_t); break;
    default: {
        const int64_t z = (int64_t)cg_dtype_size(dt);
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * ds * z, s + i * ss * z, (size_t)z);
    }
    }
}
#undef COPY_STRIDED_

void cg_convert_run(cg_dtype dd, void *dst, int64_t ds, cg_dtype sd, const void *src, int64_t ss,
                    int64_t n)
{
    size_t dz = cg_dtype_size(dd), sz = cg_dtype_size(sd);
    char *d = dst;
    const char *s = src;
    if (dd == sd) {
        if (ds == 1 && ss == 1)
            memcpy(d, s, (size_t)n * dz);
        else
            copy_strided(dd, d, ds, s, ss, n);
        return;
    }
    if (dd == CG_BF16 && sd == CG_F32) {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i * ds] = cg_f32_to_bf16(((const float *)src)[i * ss]);
        return;
    }
    if (dd == CG_F32 && sd == CG_BF16) {
        for (int64_t i = 0; i < n; i++)
            ((float *)dst)[i * ds] = cg_bf16_to_f32(((const uint16_t *)src)[i * ss]);
        return;
    }
    bool int_src = !cg_dtype_is_float(sd);
    for (int64_t i = 0; i < n; i++) {
        const void *sp = s + i * ss * (int64_t)sz;
        void *dp = d + i * ds * (int64_t)dz;
        if (int_src)
            set_from_int(dd, dp, cg_elem_get_i64(sd, sp));
        else
            cg_elem_set(dd, dp, cg_elem_get(sd, sp));
    }
}
