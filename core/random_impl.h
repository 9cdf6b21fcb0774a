/* cgrad core, INTERNAL: what core/random.c (cgrad's generator) and
 * core/random_torch.c (PyTorch's) share: the checks of their arguments,
 * which both make in the same words, and Poisson's two methods, which
 * both run on their own uniforms. Not installed; include it after
 * core/random.h. */
#ifndef CG_CORE_RANDOM_IMPL_H
#define CG_CORE_RANDOM_IMPL_H

#include <math.h>
#include <stdint.h>

#include "core/upcast.h"

/* x (a float dtype, any strides) as contiguous float32 values: a new
 * reference, NULL + error (op named) otherwise. */
static inline cg_tensor *cg_rand_floats(const char *op, const cg_tensor *x)
{
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("%s: the input is %s, expected a float dtype", op, cg_dtype_name(x->dtype));
        return NULL;
    }
    return cg_upcast_dense(x, false);
}

/* Every one of n probabilities in [0, 1] (NaN refused), or false + error. */
static inline bool cg_rand_probs_ok(const char *op, const float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(p[i] >= 0.0f && p[i] <= 1.0f)) {
            cg_set_error("%s: p must be in [0, 1], element %lld is %g", op, (long long)i,
                         (double)p[i]);
            return false;
        }
    return true;
}

static inline bool cg_rand_p_ok(const char *op, double p)
{
    if (!(p >= 0.0 && p <= 1.0))
        cg_set_error("%s: p must be in [0, 1], got %g", op, p);
    return p >= 0.0 && p <= 1.0;
}

/* [low, high) of randint: low < high, or false + PyTorch's words. */
static inline bool cg_rand_range_ok(const char *op, int64_t low, int64_t high)
{
    if (low >= high)
        cg_set_error("%s: random_ expects 'from' to be less than 'to', but got from=%lld >= "
                     "to=%lld",
                     op, (long long)low, (long long)high);
    return low < high;
}

/* randint_like's dtypes and whether [low, high) fits dt; false + error. */
bool cg_rand_like_range_ok(const char *op, cg_dtype dt, int64_t low, int64_t high);

/* normal's std: every element >= 0 (NaN refused); false + error. */
static inline bool cg_rand_std_ok(const char *op, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(s[i] >= 0.0f)) {
            cg_set_error("%s: normal expects all elements of std >= 0.0 (element %lld is %g)", op,
                         (long long)i, (double)s[i]);
            return false;
        }
    return true;
}

/* Poisson rates: >= 0 and finite; false + error. */
static inline bool cg_rand_rates_ok(const char *op, const float *r, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(r[i] >= 0.0f) || isinf(r[i])) {
            cg_set_error("%s: invalid Poisson rate %g at element %lld, expected a finite rate "
                         ">= 0",
                         op, (double)r[i], (long long)i);
            return false;
        }
    return true;
}

/* multinomial's checks (core/random.h) of probs (float32 contiguous
 * values p, shape [rows, n]); false + error. */
bool cg_rand_multinomial_ok(const char *op, const cg_tensor *probs, const float *p,
                            int64_t num_samples, bool replacement);
/* The checks of probs' shape and num_samples alone (before its values). */
bool cg_rand_multinomial_shape_ok(const char *op, const cg_tensor *probs, int64_t num_samples,
                                  bool replacement, int64_t *rows, int64_t *n);

/* normal's arguments: mean and std float32 of broadcastable shapes,
 * every std >= 0; the result's shape into shape, its ndim returned (-1 +
 * error). And its end: z * std + mean (z released), PyTorch's mul_ then
 * add_. */
int cg_rand_normal_args(const char *op, const cg_tensor *mean, const cg_tensor *std,
                        int64_t *shape);
cg_tensor *cg_rand_normal_finish(cg_tensor *z, const cg_tensor *mean, const cg_tensor *std);

/* A source of 53-bit uniforms in [0, 1) for cg_rand_poisson */
typedef double (*cg_rand_unit_fn)(void *src);

/* One Poisson(lam) count, lam >= 0 finite, from uniforms of src: PyTorch's
 * sample_poisson (aten Distributions.cpp) method by method, its double
 * arithmetic in its order (the twin's bits depend on it). */
static inline int64_t cg_rand_poisson(double lam, cg_rand_unit_fn unit, void *src)
{
    if (lam == 0)
        return 0;
    if (lam < 10) { /* multiply uniforms until the product reaches exp(-lam) */
        const double floor_ = exp(-lam);
        double prod = 1.0;
        for (int64_t count = 0;; count++) {
            prod *= unit(src);
            if (!(prod > floor_))
                return count;
        }
    }
    /* PTRS (Hoermann 1993): a transformed uniform, accepted at once in the
     * box where the hat lies under the density, else by the exact test */
    const double root = sqrt(lam), loglam = log(lam);
    const double b = 0.931 + 2.53 * root, a = -0.059 + 0.02483 * b;
    const double inv_alpha = 1.1239 + 1.1328 / (b - 3.4), v_r = 0.9277 - 3.6224 / (b - 2);
    for (;;) {
        const double u = unit(src) - 0.5, v = unit(src);
        const double us = 0.5 - fabs(u);
        const int64_t k = (int64_t)floor((2 * a / us + b) * u + lam + 0.43);
        if (us >= 0.07 && v <= v_r)
            return k;
        if (k < 0 || (us < 0.013 && v > us))
            continue;
        int sign;
        const double lhs = log(v) + log(inv_alpha) - log(a / (us * us) + b);
        if (lhs <= -lam + k * loglam - lgamma_r((double)k + 1, &sign))
            return k;
    }
}

#endif
