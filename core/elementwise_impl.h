/* cgrad core, INTERNAL: the scalar helpers of the elementwise ops'
 * expressions (core/ops.h CG_UNARY_OPS; sigmoid, the GELUs, ReLU, clamp),
 * shared by their segment kernels (core/elementwise.c) and a linear
 * layer's fused activation (core/activation.c), so that both give the
 * same bits. Not installed. */
#ifndef CG_CORE_ELEMENTWISE_IMPL_H
#define CG_CORE_ELEMENTWISE_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/vmath.h"

/* The scalar helpers of the segment kernels are always inlined: a call
 * left in a loop (GCC stops inlining once the file has grown by its limit)
 * would keep the loop from vectorising. */
#define EW_INLINE static inline __attribute__((always_inline))

/* sigma = 1/(1+exp(-z)) and 1 - sigma, both without cancellation and
 * without overflow: only exp(-|z|) is ever taken; by ew_expf_normal when
 * normal (the caller knows |z| <= -EW_EXP_NORMAL_MIN and no NaN: the same
 * bits). */
EW_INLINE void ew_sigmoid2_of(float z, float *sig, float *one_minus, bool normal)
{
    float e = normal ? ew_expf_normal(-fabsf(z)) : ew_expf(-fabsf(z));
    float s = 1.0f / (1.0f + e);
    int32_t pos = M(z >= 0.0f);
    *sig = bsel(pos, s, e * s);
    *one_minus = bsel(pos, e * s, s);
}

EW_INLINE void ew_sigmoid2(float z, float *sig, float *one_minus)
{
    ew_sigmoid2_of(z, sig, one_minus, false);
}

EW_INLINE float f_sigmoid(float x)
{
    float s, m;
    ew_sigmoid2(x, &s, &m);
    return s;
}

/* GELU, tanh form (core/vmath.h's EW_GELU_Z: x sigmoid(2u)); ew_gelu16
 * is its 16-lane twin. */
EW_INLINE float f_gelu_of(float x, bool normal)
{
    float s, m;
    ew_sigmoid2_of(EW_GELU_Z(x), &s, &m, normal);
    return x * s;
}
EW_INLINE float f_gelu(float x) { return f_gelu_of(x, false); }

/* d/dx of the above: s + 2 x s (1-s) K (1 + 3 C x^2) with s = sigmoid(2u)
 * (the same as 0.5 (1+t) + 0.5 x (1-t^2) K (1 + 3 C x^2), t = tanh u). */
EW_INLINE float f_gelu_grad_of(float x, bool normal)
{
    float x2 = x * x;
    float s, m;
    ew_sigmoid2_of(EW_GELU_GRAD_Z(x, x2), &s, &m, normal);
    float q = s * m;
    /* for large |x|, q is exactly 0 and x^2 may overflow: 0 * inf would give
     * NaN where the true term is 0 */
    float right = EW_GELU_GRAD_RIGHT(x, x2, q);
    return s + bsel(M(q == 0.0f), 0.0f, right);
}
EW_INLINE float f_gelu_grad(float x) { return f_gelu_grad_of(x, false); }

/* Whether x[0, n) all have |x| <= EW_GELU_NORMAL_MAX (no NaN): then
 * f_gelu_of and f_gelu_grad_of may take ew_expf_normal (the same bits,
 * fewer operations) */
EW_INLINE bool gelu_normal_run(const float *x, int64_t n)
{
    int32_t out = 0;
    for (int64_t i = 0; i < n; i++)
        out |= M(!(fabsf(x[i]) <= EW_GELU_NORMAL_MAX));
    return out == 0;
}

/* The tanh-form GELU of n contiguous elements (out may be x: each element
 * is read before its write), or with g (not NULL) g times its derivative,
 * in blocks of 256, each by the fast exp when it allows (the same bits).
 * cg_k_gelu's and cg_k_gelu_backward's contiguous segments and the linear
 * layers' fused activation (cg_k_act_run, cg_k_act_grad_run) run here. */
EW_INLINE void gelu_run(int64_t n, const float *x, const float *g, float *out)
{
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t b = n - i0 < 256 ? n - i0 : 256;
        const float *xb = x + i0;
        float *ob = out + i0;
        const bool normal = gelu_normal_run(xb, b);
        if (g) { /* as below */
            int64_t i = 0;
            for (; i + 16 <= b; i += 16) {
                v16f v, gv;
                memcpy(&v, xb + i, sizeof v);
                memcpy(&gv, g + i0 + i, sizeof gv);
                v = gv * ew_gelu_grad16(v, normal);
                memcpy(ob + i, &v, sizeof v);
            }
            for (; i < b; i++)
                ob[i] = g[i0 + i] * f_gelu_grad_of(xb[i], normal);
        } else {
            /* 16 lanes at a time (GCC keeps the scalar loop's exp at 8) */
            int64_t i = 0;
            for (; i + 16 <= b; i += 16) {
                v16f v;
                memcpy(&v, xb + i, sizeof v);
                v = ew_gelu16(v, normal);
                memcpy(ob + i, &v, sizeof v);
            }
            for (; i < b; i++)
                ob[i] = f_gelu_of(xb[i], normal);
        }
    }
}

/* GELU, exact (erf) form, PyTorch's default (approximate='none'):
 * x Phi(x) = x * 0.5 * (1 + erf(x / sqrt 2)), evaluated as
 * x * 0.5 * erfc(-x / sqrt 2), which does not cancel for negative x (where
 * 1 + erf loses every digit; PyTorch's own kernel has ~1e-6 absolute error
 * there). The derivative is Phi(x) + x phi(x), phi(x) = exp(-x^2/2)/sqrt(2 pi). */
EW_INLINE float f_gelu_erf(float x) { return x * 0.5f * erfcf(-x * 0.70710678118654752f); }
EW_INLINE float f_gelu_erf_grad(float x)
{
    float cdf = 0.5f * erfcf(-x * 0.70710678118654752f);
    float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

/* F.mish's gradient, PyTorch's expression: with s = sigmoid(x) and t =
 * tanh(softplus(x)), t + x s (1 - t^2) */
EW_INLINE float f_mish_grad(float x)
{
    float s = 1.0f / (1.0f + expf(-x));
    float t = tanhf(log1pf(expf(x)));
    return t + x * s * (1.0f - t * t);
}

/* F.softsign's gradient for the upstream g as PyTorch's autograd makes it
 * from x / b, b = 1 + |x|: g / b from the numerator, -g (x / b) / b sgn(x)
 * through b */
EW_INLINE float f_softsign_grad(float x, float g)
{
    float b = 1.0f + fabsf(x);
    float sgn = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    return g / b + (-g * (x / b) / b) * sgn;
}

/* F.logsigmoid's gradient, PyTorch's expression: with z = e^-|x|,
 * 1 - z / (1 + z) for x < 0, z / (1 + z) otherwise (NaN included) */
EW_INLINE float f_logsigmoid_grad(float x)
{
    float z = expf(-fabsf(x));
    float q = z / (1.0f + z);
    return x < 0.0f ? 1.0f - q : q;
}

EW_INLINE float f_relu(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

EW_INLINE float f_clamp(float x, float lo, float hi)
{
    /* min(max(x, lo), hi): NaN propagates; lo > hi gives hi (as PyTorch) */
    float v = x < lo ? lo : x;
    return v > hi ? hi : v;
}

#endif
