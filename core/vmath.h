/* cgrad core (internal): branch-free scalar helpers that vectorise, shared
 * by the kernels (elementwise, attention, loss). Not installed. */
#ifndef CG_VMATH_H
#define CG_VMATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Branch-free helpers. A conditional expression on floats followed by more
 * arithmetic stops GCC from vectorising a loop under the default
 * -ftrapping-math; selecting with bit masks does not. M(c) is 0 or ~0. */
#define M(c) (-(int32_t)(c))

/* The segment kernels below are compiled for AVX-512, AVX2 and the SSE2
 * baseline, chosen at load time by the CPU (target_clones, an ifunc: GCC,
 * and clang from 14). The arithmetic is the same IEEE float operations in
 * every clone (meson.build passes -ffp-contract=off), so results do not
 * depend on the CPU. Not under ThreadSanitizer: an ifunc resolver runs
 * before TSan's runtime is set up, and TSan's instrumentation of it
 * crashes the program at load. GCC names TSan with a macro, clang with
 * __has_feature (tested in its own #if: GCC before 14 has no
 * __has_feature). */
#if defined(__SANITIZE_THREAD__)
#define CG_VMATH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CG_VMATH_TSAN 1
#endif
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(CG_NO_CLONES) && \
    !defined(CG_VMATH_TSAN)
#if __has_attribute(target_clones)
#define CG_HAVE_CLONES 1
#endif
#endif
/* A clone's own body must not pass or return a v16f: clang compiles the
 * avx2 and default clones without AVX-512 and refuses such a call there,
 * inlined or not ("changes the ABI"). Calls made inside an always_inline
 * helper are accepted, so a clone that works on v16f keeps its body in one
 * (EW_BODY) and is a wrapper around it; GCC emits the same code either
 * way. And a clone is static: other files call a plain function that
 * calls it (clang 14 names the clones' entry "f.ifunc", so a call from
 * another file that declares f plainly does not link, and one whose
 * declaration has the attribute calls the resolver, not f). Nor does a
 * clone have a separate declaration before its definition: through a
 * forward-declared clone's address, clang 14 calls the resolver too. */
#define EW_BODY static inline __attribute__((always_inline))
#ifdef CG_HAVE_CLONES
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
/* n bf16 elements (their 16-bit patterns) widened to floats: exact */
static inline __attribute__((always_inline)) void bf16_widen(int64_t n, const uint16_t *h, float *f)
{
    for (int64_t i = 0; i < n; i++)
        f[i] = i2f((int32_t)((uint32_t)h[i] << 16));
}

/* The heart of ew_expf for xc (clamped, no NaN) of type T, float or v16f:
 * t = 1.5 * 2^23 + round(xc / ln2), whose low mantissa bits hold k, and
 * p = e^r for r = xc - k ln2 (Cody-Waite: the high part of ln2 times k is
 * exact, then the low part), a degree-7 polynomial (Cephes' expf
 * coefficients). One text for the scalar and the 16-lane exp, so that their
 * bits agree. */
/* The constants, also of the fused multiply-add form (bf16's softmax,
 * core/attention_rows.c) */
#define EW_EXP_LOG2E 1.44269504088896341f
#define EW_EXP_SHIFT 12582912.0f /* 1.5 * 2^23 */
#define EW_EXP_LN2_HI 0.693359375f
#define EW_EXP_LN2_LO (-2.12194440e-4f)
#define EW_EXP_P0 1.9875691500e-4f
#define EW_EXP_P1 1.3981999507e-3f
#define EW_EXP_P2 8.3334519073e-3f
#define EW_EXP_P3 4.1665795894e-2f
#define EW_EXP_P4 1.6666665459e-1f
#define EW_EXP_P5 5.0000001201e-1f
#define EW_EXP_POLY(T, xc, t, p)            \
    T t = (xc)*EW_EXP_LOG2E + EW_EXP_SHIFT; \
    T p;                                    \
    {                                       \
        T kf_ = t - EW_EXP_SHIFT;           \
        T r_ = (xc)-kf_ * EW_EXP_LN2_HI;    \
        r_ = r_ - kf_ * EW_EXP_LN2_LO;      \
        p = (T){0} + EW_EXP_P0;             \
        p = p * r_ + EW_EXP_P1;             \
        p = p * r_ + EW_EXP_P2;             \
        p = p * r_ + EW_EXP_P3;             \
        p = p * r_ + EW_EXP_P4;             \
        p = p * r_ + EW_EXP_P5;             \
        p = p * (r_ * r_) + r_ + 1.0f;      \
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

/* tanh(x) for float, written so that loops over it vectorise (no libm
 * call, no branches), after Cephes' tanhf: below |x| = 0.625 the odd
 * polynomial x + x z P(z), z = x^2; from there 1 - 2 / (exp(2|x|) + 1)
 * with x's sign (ew_expf: 2|x| past 89 gives inf, so 1). Both sides are
 * computed and one kept. Within 1.32 ulp of tanh on every third float of
 * (0, 12) (glibc's tanhf: 2.18), about 15 times glibc's speed in a loop
 * (Zen 5); tests/test_elementwise.c holds it to 2 ulp. -0 stays -0, NaN
 * stays NaN. */
static inline float ew_tanhf(float x)
{
    const float ax = i2f(f2i(x) & 0x7fffffff), z = ax * ax; /* tanh(|x|), then x's sign */
    float p = -5.70498872745e-3f * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    p = p * z * ax + ax;
    const float big = 1.0f - 2.0f / (ew_expf(ax + ax) + 1.0f);
    return i2f(f2i(bsel(M(ax < 0.625f), p, big)) | (f2i(x) & INT32_MIN));
}

#pragma GCC diagnostic ignored "-Wpsabi"
/* 16 floats (GCC/clang vector extension): one AVX-512 register, two AVX2
 * or four SSE ones, as the clone compiles it. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));

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

/* The first n (< 16) floats of x in 16 lanes, the others fill; and back:
 * a row's last partial block through the 16-lane kernels (each lane's bits
 * are the scalar code's), not element by element. */
static inline __attribute__((always_inline)) v16f load_part16(const float *x, int64_t n, float fill)
{
    float b[16];
    for (int l = 0; l < 16; l++)
        b[l] = l < n ? x[l] : fill;
    v16f v;
    memcpy(&v, b, sizeof v);
    return v;
}
static inline __attribute__((always_inline)) void store_part16(float *x, int64_t n, v16f v)
{
    float b[16];
    memcpy(b, &v, sizeof b);
    for (int64_t l = 0; l < n; l++)
        x[l] = b[l];
}

/* ew_expf16 for lanes all in [EW_EXP_NORMAL_MIN, 0] (no NaN): the same
 * bits without the clamps and NaN patch, and with 2^k added to p's exponent
 * field. That is exact, as ew_expf16's two power-of-two factors are, because
 * every result is normal here (p in [0.70, 1.42], k in [-124, 0]). The
 * caller checks the range once for a row (max16_min). */
#define EW_EXP_NORMAL_MIN (-86.0f)
/* Its text, for a function compiled for another target (clang refuses a
 * call that passes v16f across targets): res = ew_expf16_normal(x). 2^k
 * is added in unsigned lanes: a lane outside the range (a masked key's
 * -inf, which the caller zeroes) wraps instead of overflowing; the others'
 * bits are the same. */
#define EW_EXPF16_NORMAL(x, res)                \
    do {                                        \
        EW_EXP_POLY(v16f, x, t_, p_);           \
        const v16u k_ = (v16u)t_ - 0x4B400000u; \
        (res) = (v16f)((v16u)p_ + (k_ << 23));  \
    } while (0)
static inline __attribute__((always_inline)) v16f ew_expf16_normal(v16f x)
{
    v16f res;
    EW_EXPF16_NORMAL(x, res);
    return res;
}

/* ew_expf for x in [EW_EXP_NORMAL_MIN, 0] (no NaN): the same bits, as
 * ew_expf16_normal's lanes. */
static inline float ew_expf_normal(float x)
{
    EW_EXP_POLY(float, x, t, p);
    int32_t k = f2i(t) - 0x4B400000;
    return i2f(f2i(p) + k * (1 << 23));
}

/* GELU, tanh form: x sigmoid(z) with z = 2u, u = K (x + C x^3), K = sqrt(2/pi)
 * (0.5 x (1 + tanh u) = x sigmoid(2u) exactly; the sigmoid form does not
 * cancel for negative x). One text for z of a float and of a v16f. */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f
#define EW_GELU_Z(x) (2.0f * (GELU_K * ((x) + GELU_C * ((x) * (x) * (x)))))
/* |x| <= 8 (no NaN) puts |z| under 2 K (8 + 512 C) < 50: in ew_expf_normal's range */
#define EW_GELU_NORMAL_MAX 8.0f

/* Whether every lane of x has |x| <= EW_GELU_NORMAL_MAX (no NaN) */
static inline __attribute__((always_inline)) bool ew_gelu16_normal(v16f x)
{
    const v16f ax = (v16f)((v16u)x & 0x7fffffffu);
    const v16i out = ~(ax <= (v16f){0} + EW_GELU_NORMAL_MAX);
    v16i any = out;
    int32_t o[16];
    memcpy(o, &any, sizeof o);
    int32_t r = 0;
    for (int l = 0; l < 16; l++)
        r |= o[l];
    return r == 0;
}

/* sigmoid(z) and 1 - sigmoid(z) of 16 lanes from e = exp(-|z|) (core/elementwise_impl.h's ew_sigmoid2_of) */
static inline __attribute__((always_inline)) void ew_sigmoid2_16(v16f z, bool normal, v16f *sig,
                                                                 v16f *one_minus)
{
    const v16f nz = (v16f)((v16u)z | 0x80000000u); /* -|z| */
    const v16f e = normal ? ew_expf16_normal(nz) : ew_expf16(nz);
    const v16f one = (v16f){0} + 1.0f;
    const v16f s = one / (one + e), es = e * s;
    const v16i pos = z >= (v16f){0};
    *sig = (v16f)((pos & (v16i)s) | (~pos & (v16i)es));
    *one_minus = (v16f)((pos & (v16i)es) | (~pos & (v16i)s));
}

/* The tanh-form GELU of 16 lanes, each lane's bits those of
 * core/elementwise_impl.h's scalar f_gelu_of (the same IEEE operations in the
 * same order): sigmoid(z) from e = exp(-|z|) as 1 / (1 + e), or e / (1 + e)
 * for z < 0. normal (ew_gelu16_normal): the exp without its clamps, the
 * same bits. The linear layers' fused activation (cg_k_act_run) and the
 * bf16 kernels' write-out (core/gemm_bf16.c) run here. */
static inline __attribute__((always_inline)) v16f ew_gelu16(v16f x, bool normal)
{
    v16f s, m;
    ew_sigmoid2_16(EW_GELU_Z(x), normal, &s, &m);
    return x * s;
}

/* The derivative of the tanh-form GELU, s + 2 x s (1 - s) K (1 + 3 C x^2)
 * with s = sigmoid(2u), the right term 0 where s (1 - s) is (there x^2
 * may overflow: 0 * inf would be NaN). One text for a float and a v16f:
 * core/elementwise_impl.h's f_gelu_grad_of and ew_gelu_grad16 below. */
#define EW_GELU_GRAD_Z(x, x2) (2.0f * (GELU_K * ((x) + GELU_C * (x2) * (x))))
#define EW_GELU_GRAD_RIGHT(x, x2, q) (2.0f * (x) * (q)*GELU_K * (1.0f + 3.0f * GELU_C * (x2)))

/* f_gelu_grad_of of 16 lanes, each lane's bits the scalar's */
static inline __attribute__((always_inline)) v16f ew_gelu_grad16(v16f x, bool normal)
{
    const v16f x2 = x * x;
    v16f s, m;
    ew_sigmoid2_16(EW_GELU_GRAD_Z(x, x2), normal, &s, &m);
    const v16f q = s * m, right = EW_GELU_GRAD_RIGHT(x, x2, q);
    const v16i zero = q == (v16f){0};
    return s + (v16f)(~zero & (v16i)right);
}

/* The lane-wise maximum of a and b, a kept unless b > a (a NaN in b never
 * wins). */
static inline __attribute__((always_inline)) v16f max16_lanes(v16f a, v16f b)
{
    v16i gt = b > a;
    return (v16f)((gt & (v16i)b) | (~gt & (v16i)a));
}

/* The maximum of x[0, n) (a NaN never wins: it reaches results through the
 * sums), taken in 16 lanes; a maximum does not depend on its order. Four
 * sets of lanes over blocks of 64, so that the compare-and-select chain is
 * not the loop's latency. */
static inline __attribute__((always_inline)) float max16(const float *x, int64_t n)
{
    v16f lanes = (v16f){0} - INFINITY, l1 = lanes, l2 = lanes, l3 = lanes;
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        v16f v[4];
        memcpy(v, x + j, sizeof v);
        lanes = max16_lanes(lanes, v[0]);
        l1 = max16_lanes(l1, v[1]);
        l2 = max16_lanes(l2, v[2]);
        l3 = max16_lanes(l3, v[3]);
    }
    lanes = max16_lanes(max16_lanes(lanes, l1), max16_lanes(l2, l3));
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        lanes = max16_lanes(lanes, v);
    }
    float mx = -INFINITY;
    for (int l = 0; l < 16; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* The lane-wise minimum of a and b, a kept unless b < a. */
static inline __attribute__((always_inline)) v16f min16_lanes(v16f a, v16f b)
{
    v16i lt = b < a;
    return (v16f)((lt & (v16i)b) | (~lt & (v16i)a));
}

/* max16(x, n), with the minimum into *mn (a NaN never wins either) and
 * whether an element is a NaN or infinite into *bad (x - x is NaN there,
 * 0 elsewhere): whether x - max is in the range of ew_expf16_normal
 * everywhere. */
static inline __attribute__((always_inline)) float max16_min(const float *x, int64_t n, float *mn,
                                                             bool *bad)
{
    v16f hi0 = (v16f){0} - INFINITY, hi1 = hi0, lo0 = (v16f){0} + INFINITY, lo1 = lo0;
    v16f z0 = {0}, z1 = {0};
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        v16f a, b;
        memcpy(&a, x + j, sizeof a);
        memcpy(&b, x + j + 16, sizeof b);
        hi0 = max16_lanes(hi0, a);
        hi1 = max16_lanes(hi1, b);
        lo0 = min16_lanes(lo0, a);
        lo1 = min16_lanes(lo1, b);
        z0 += a - a;
        z1 += b - b;
    }
    hi0 = max16_lanes(hi0, hi1);
    lo0 = min16_lanes(lo0, lo1);
    z0 += z1;
    for (; j + 16 <= n; j += 16) {
        v16f v;
        memcpy(&v, x + j, sizeof v);
        hi0 = max16_lanes(hi0, v);
        lo0 = min16_lanes(lo0, v);
        z0 += v - v;
    }
    float mx = -INFINITY, mi = INFINITY, z = 0.0f;
    for (int l = 0; l < 16; l++) {
        mx = hi0[l] > mx ? hi0[l] : mx;
        mi = lo0[l] < mi ? lo0[l] : mi;
        z += z0[l];
    }
    for (; j < n; j++) {
        mx = x[j] > mx ? x[j] : mx;
        mi = x[j] < mi ? x[j] : mi;
        z += x[j] - x[j];
    }
    *mn = mi;
    *bad = z != 0.0f;
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

/* 16 doubles: two AVX-512 registers. */
typedef double v16d __attribute__((vector_size(128)));

/* 8 floats widened to double. GCC 12 lowers __builtin_convertvector from
 * 8 floats to 8 doubles as two 4-lane conversions, extracts and an insert,
 * even for AVX-512; from 16 floats to 16 doubles it emits one vcvtps2pd a
 * register. So f goes in the low half of 16 lanes (the high half left
 * undefined, never read) and the low 8 doubles are kept: the same values,
 * one instruction in the AVX-512 clone. */
static inline __attribute__((always_inline)) v8d widen8(v8f f)
{
    v16f t = __builtin_shufflevector(f, f, 0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    v16d w = __builtin_convertvector(t, v16d);
    v8d lo;
    memcpy(&lo, &w, sizeof lo);
    return lo;
}

/* 8 floats from p, widened to double */
static inline __attribute__((always_inline)) v8d ld8(const float *p)
{
    v8f f;
    memcpy(&f, p, sizeof f);
    return widen8(f);
}

/* The two halves of 16 lanes, widened to double (16 at once: one
 * vcvtps2pd a half in the AVX-512 clone, see widen8). */
static inline __attribute__((always_inline)) void widen16(v16f v, v8d *lo, v8d *hi)
{
    v16d w = __builtin_convertvector(v, v16d);
    memcpy(lo, &w, sizeof *lo);
    memcpy(hi, (const char *)&w + sizeof *lo, sizeof *hi);
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
