/* cgrad core (internal): branch-free scalar helpers that vectorise, shared
 * by the kernels (elementwise, attention, loss). Not installed. */
#ifndef CG_VMATH_H
#define CG_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Branch-free helpers. A conditional expression on floats followed by more
 * arithmetic stops GCC from vectorising a loop under the default
 * -ftrapping-math; selecting with bit masks does not. M(c) is 0 or ~0. */
#define M(c) (-(int32_t)(c))

/* The segment kernels below are compiled for AVX-512, AVX2 and the SSE2
 * baseline, chosen at load time by the CPU (GCC's target_clones, an ifunc).
 * The arithmetic is the same IEEE float operations in every clone (no FMA
 * contraction under -std=c11), so results do not depend on the CPU. Not
 * under ThreadSanitizer: an ifunc resolver runs before TSan's runtime is
 * set up, and TSan's instrumentation of it crashes the program at load. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(CG_NO_CLONES) && \
    !defined(__SANITIZE_THREAD__)
#define EW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EW_CLONES
#endif
static inline int32_t f2i(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}
static inline float i2f(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
/* m ? a : b for m in {0, ~0}; both sides are evaluated */
static inline float bsel(int32_t m, float a, float b) { return i2f((m & f2i(a)) | (~m & f2i(b))); }

/* The heart of ew_expf for xc (clamped, no NaN) of type T, float or v16f:
 * t = 1.5 * 2^23 + round(xc / ln2), whose low mantissa bits hold k, and
 * p = e^r for r = xc - k ln2 (Cody-Waite: the high part of ln2 times k is
 * exact, then the low part), a degree-7 polynomial (Cephes' expf
 * coefficients). One text for the scalar and the 16-lane exp, so that their
 * bits agree. */
#define EW_EXP_POLY(T, xc, t, p)                   \
    T t = (xc)*1.44269504088896341f + 12582912.0f; \
    T p;                                           \
    {                                              \
        T kf_ = t - 12582912.0f;                   \
        T r_ = (xc)-kf_ * 0.693359375f;            \
        r_ = r_ - kf_ * -2.12194440e-4f;           \
        p = (T){0} + 1.9875691500e-4f;             \
        p = p * r_ + 1.3981999507e-3f;             \
        p = p * r_ + 8.3334519073e-3f;             \
        p = p * r_ + 4.1665795894e-2f;             \
        p = p * r_ + 1.6666665459e-1f;             \
        p = p * r_ + 5.0000001201e-1f;             \
        p = p * (r_ * r_) + r_ + 1.0f;             \
    }

/* exp(x) for float, written so that loops over it vectorise (no libm call,
 * no branches): Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, a
 * degree-7 polynomial for e^r (Cephes' expf coefficients), and 2^k applied
 * as two exact power-of-two factors so that subnormal results are rounded
 * once. Max error about 1.5 ulp (tested against double exp); overflow gives
 * +inf, -inf gives 0, NaN stays NaN. */
static inline float ew_expf(float x)
{
    float xc = bsel(M(x < -104.0f), -104.0f, x); /* exp underflows to 0 below */
    xc = bsel(M(xc > 89.0f), 89.0f, xc);         /* and overflows to inf above */
    xc = bsel(M(xc != xc), 0.0f, xc);            /* NaN: patched at the end */
    EW_EXP_POLY(float, xc, t, p);
    int32_t k = f2i(t) - 0x4B400000; /* in [-150, 129] */
    int32_t k1 = k / 2, k2 = k - k1; /* each a normal exponent */
    float res = p * i2f((k1 + 127) * (1 << 23)) * i2f((k2 + 127) * (1 << 23));
    return bsel(M(x != x), x, res);
}

#pragma GCC diagnostic ignored "-Wpsabi"
/* 16 floats (GCC/clang vector extension): one AVX-512 register, two AVX2
 * or four SSE ones, as the clone compiles it. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* ew_expf on 16 lanes: the same IEEE operations in the same order in each
 * lane, so every lane's bits equal ew_expf's. GCC keeps a loop of scalar
 * ew_expf at the clone's preferred width (8 lanes for AVX-512); this runs
 * whole AVX-512 registers. */
static inline __attribute__((always_inline)) v16f ew_expf16(v16f x)
{
    const v16f lo = (v16f){0} - 104.0f, hi = (v16f){0} + 89.0f;
    v16i m = x < lo;
    v16f xc = (v16f)((m & (v16i)lo) | (~m & (v16i)x));
    m = xc > hi;
    xc = (v16f)((m & (v16i)hi) | (~m & (v16i)xc));
    v16i nan = x != x;
    xc = (v16f)(~nan & (v16i)xc); /* NaN: 0 here, patched at the end */
    EW_EXP_POLY(v16f, xc, t, p);
    v16i k = (v16i)t - 0x4B400000;
    v16i k1 = k / 2, k2 = k - k1;
    v16f res = p * (v16f)((k1 + 127) << 23) * (v16f)((k2 + 127) << 23);
    return (v16f)((nan & (v16i)x) | (~nan & (v16i)res));
}

/* The maximum of x[0, n) (a NaN never wins: it reaches results through the
 * sums), taken in 16 lanes; a maximum does not depend on its order. */
static inline __attribute__((always_inline)) float max16(const float *x, int64_t n)
{
    v16f lanes = (v16f){0} - INFINITY;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        v16i gt = v > lanes;
        lanes = (v16f)((gt & (v16i)v) | (~gt & (v16i)lanes));
    }
    float mx = -INFINITY;
    for (int l = 0; l < 16; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* Sum of 8 lane accumulators, pairwise in a fixed order. Kernels keep long
 * sums in 8 interleaved double lanes (element j in lane j % 8): a fixed
 * order, so the same bits for any thread count, with short dependency
 * chains that vectorise. */
/* Eight doubles and eight floats as GCC vectors, for kernels that keep
 * double sums in 8 lanes: each clone lowers them to its own registers, and
 * every lane does the scalar code's operations in its order (the same bits:
 * no FMA contraction under -std=c11). They never cross a call (always
 * inlined), so GCC's note that the non-AVX-512 clones pass them differently,
 * reported at a file's end, does not apply. */
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

/* 8 floats from p, widened to double */
static inline __attribute__((always_inline)) v8d ld8(const float *p)
{
    v8f f;
    memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, v8d);
}

static inline double lanes8_total(const double *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* sum of a[j] (b == NULL) or of a[j] b[j] (in double, exact) over [0, n)
 * in 8 double lanes, element j in lane j % 8, lanes added as lanes8_total:
 * the scalar loop's operations in its order, so the same bits. */
static inline __attribute__((always_inline)) double sum_lanes(const float *a, const float *b,
                                                              int64_t n)
{
    v8d acc = {0};
    int64_t j = 0, kl = n / 8 * 8;
    for (; j < kl; j += 8)
        acc += b ? ld8(a + j) * ld8(b + j) : ld8(a + j);
    double lanes[8];
    for (int l = 0; l < 8; l++)
        lanes[l] = acc[l];
    for (; j < n; j++)
        lanes[j - kl] += b ? (double)a[j] * b[j] : (double)a[j];
    return lanes8_total(lanes);
}

#endif
