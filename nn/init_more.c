/* The rest of torch.nn.init (PyTorch 1.13's nn/init.py): calculate_gain,
 * the fans, constant_, eye_, dirac_, kaiming_normal_ and kaiming_uniform_
 * with mode and nonlinearity, trunc_normal_, sparse_, and the _torch forms
 * on PyTorch's generator (nn/init.h). Bounds and standard deviations are
 * computed in double as init.py's Python computes them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/random.h"
#include "nn/init.h"

double cg_init_calculate_gain(const char *nonlinearity, double param)
{
    static const char *const linear[] = {"linear",           "conv1d",           "conv2d",
                                         "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                         "conv_transpose3d", "sigmoid"};
    if (!nonlinearity) {
        cg_set_error("calculate_gain: nonlinearity is NULL");
        return -1;
    }
    for (size_t i = 0; i < sizeof linear / sizeof *linear; i++)
        if (!strcmp(nonlinearity, linear[i]))
            return 1;
    if (!strcmp(nonlinearity, "tanh"))
        return 5.0 / 3;
    if (!strcmp(nonlinearity, "relu"))
        return sqrt(2.0);
    if (!strcmp(nonlinearity, "selu"))
        return 3.0 / 4; /* PyTorch's empirical value (its pull request 50664) */
    if (strcmp(nonlinearity, "leaky_relu")) {
        cg_set_error("calculate_gain: Unsupported nonlinearity %s", nonlinearity);
        return -1;
    }
    const double slope = isnan(param) ? 0.01 : param; /* param=None: 0.01 */
    if (!isfinite(slope)) {
        cg_set_error("calculate_gain: negative_slope %g not a valid number", param);
        return -1;
    }
    return sqrt(2.0 / (1 + pow(slope, 2)));
}

bool cg_init_calculate_fans(const cg_tensor *t, int64_t *fan_in, int64_t *fan_out)
{
    if (!t)
        return cg_error_null_input("cg_init_calculate_fans");
    if (t->ndim < 2) {
        cg_set_error("calculate_fans: Fan in and fan out can not be computed for tensor with "
                     "fewer than 2 dimensions (got %d)",
                     t->ndim);
        return false;
    }
    int64_t field = 1; /* the receptive field: the product of shape[2:] */
    for (int d = 2; d < t->ndim; d++)
        field *= t->shape[d];
    if (fan_in)
        *fan_in = t->shape[1] * field;
    if (fan_out)
        *fan_out = t->shape[0] * field;
    return true;
}

bool cg_init_constant_(cg_tensor *t, float val) { return t && cg_fill_(t, val); }

bool cg_init_eye_(cg_tensor *t)
{
    if (!t)
        return cg_error_null_input("cg_init_eye_");
    if (t->ndim != 2) {
        cg_set_error("init eye_: Only tensors with 2 dimensions are supported (got %d)", t->ndim);
        return false;
    }
    if (!cg_fill_(t, 0.0f))
        return false;
    for (int64_t i = 0; i < t->shape[0] && i < t->shape[1]; i++)
        if (!cg_set(t, (const int64_t[]){i, i}, 1.0f))
            return false;
    return true;
}

bool cg_init_dirac_(cg_tensor *t, int groups)
{
    if (!t)
        return cg_error_null_input("cg_init_dirac_");
    if (t->ndim < 3 || t->ndim > 5) {
        cg_set_error("init dirac_: Only tensors with 3, 4, or 5 dimensions are supported (got %d)",
                     t->ndim);
        return false;
    }
    if (groups < 1 || t->shape[0] % groups) {
        cg_set_error("init dirac_: dim 0 must be divisible by groups (%lld by %d)",
                     (long long)t->shape[0], groups);
        return false;
    }
    if (!cg_fill_(t, 0.0f))
        return false;
    const int64_t per_group = t->shape[0] / groups;
    const int64_t n = per_group < t->shape[1] ? per_group : t->shape[1];
    int64_t idx[5];
    for (int d = 2; d < t->ndim; d++) /* the centre of the kernel */
        idx[d] = t->shape[d] / 2;
    for (int g = 0; g < groups; g++)
        for (int64_t c = 0; c < n; c++) {
            idx[0] = g * per_group + c;
            idx[1] = c;
            if (!cg_set(t, idx, 1.0f))
                return false;
        }
    return true;
}

/* ------------------------------------------------------------ kaiming */
/* The standard deviation of kaiming_* (gain / sqrt(fan)) into *std, or
 * false + error; *empty: t has a zero size (PyTorch's no-op, before
 * any other check) */
static bool kaiming_std(const char *op, const cg_tensor *t, double a, const char *mode,
                        const char *nonlinearity, double *std, bool *empty)
{
    *empty = cg_numel(t) == 0;
    if (*empty)
        return true;
    if (isnan(a)) {
        cg_set_error("%s: a (the negative slope) is NaN", op);
        return false;
    }
    mode = mode ? mode : "fan_in";
    const bool in = !strcasecmp(mode, "fan_in"); /* init.py lowers the mode */
    if (!in && strcasecmp(mode, "fan_out")) {
        cg_set_error("%s: Mode %s not supported, please use one of ['fan_in', 'fan_out']", op,
                     mode);
        return false;
    }
    int64_t fi, fo;
    if (!cg_init_calculate_fans(t, &fi, &fo))
        return false;
    const double gain = cg_init_calculate_gain(nonlinearity ? nonlinearity : "leaky_relu", a);
    if (gain < 0)
        return false;
    *std = gain / sqrt((double)(in ? fi : fo));
    return true;
}

static bool need_gen(const char *op, const void *t, const void *gen)
{
    if (!t)
        return cg_error_null_input(op);
    if (!gen)
        cg_set_error("%s: rng is NULL", op);
    return gen != NULL;
}

bool cg_init_kaiming_normal_(cg_tensor *t, cg_rng *rng, double a, const char *mode,
                             const char *nonlinearity)
{
    const char *op = "init kaiming_normal";
    double std;
    bool empty;
    if (!need_gen(op, t, rng) || !kaiming_std(op, t, a, mode, nonlinearity, &std, &empty))
        return false;
    return empty || rng == cg_init_skip() || cg_normal_(t, rng, 0.0f, (float)std);
}

bool cg_init_kaiming_uniform_ex_(cg_tensor *t, cg_rng *rng, double a, const char *mode,
                                 const char *nonlinearity)
{
    const char *op = "init kaiming_uniform";
    double std;
    bool empty;
    if (!need_gen(op, t, rng) || !kaiming_std(op, t, a, mode, nonlinearity, &std, &empty))
        return false;
    const float bound = (float)(sqrt(3.0) * std);
    return empty || rng == cg_init_skip() || cg_uniform_(t, rng, -bound, bound);
}

bool cg_init_kaiming_normal_torch_(cg_tensor *t, cg_mt19937 *g, double a, const char *mode,
                                   const char *nonlinearity)
{
    const char *op = "init kaiming_normal (PyTorch generator)";
    double std;
    bool empty;
    if (!need_gen(op, t, g) || !kaiming_std(op, t, a, mode, nonlinearity, &std, &empty))
        return false;
    return empty || cg_normal_torch_(t, g, 0.0f, (float)std);
}

bool cg_init_kaiming_uniform_torch_(cg_tensor *t, cg_mt19937 *g, double a, const char *mode,
                                    const char *nonlinearity)
{
    const char *op = "init kaiming_uniform (PyTorch generator)";
    double std;
    bool empty;
    if (!need_gen(op, t, g) || !kaiming_std(op, t, a, mode, nonlinearity, &std, &empty))
        return false;
    const float bound = (float)(sqrt(3.0) * std);
    return empty || cg_uniform_torch_(t, g, -bound, bound);
}

/* ------------------------------------------------------------- xavier */
static bool xavier_std(const char *op, const cg_tensor *t, double gain, double *std)
{
    int64_t fi, fo;
    if (!cg_init_calculate_fans(t, &fi, &fo))
        return false;
    if (!(gain >= 0) || !isfinite(gain) || fi + fo == 0) {
        cg_set_error("%s: need a finite gain >= 0 and fan_in + fan_out > 0 (got %g, %lld)", op,
                     gain, (long long)(fi + fo));
        return false;
    }
    *std = gain * sqrt(2.0 / (double)(fi + fo));
    return true;
}

bool cg_init_xavier_uniform_torch_(cg_tensor *t, cg_mt19937 *g, double gain)
{
    const char *op = "init xavier_uniform (PyTorch generator)";
    double std;
    if (!need_gen(op, t, g) || !xavier_std(op, t, gain, &std))
        return false;
    const float a = (float)(sqrt(3.0) * std);
    return cg_uniform_torch_(t, g, -a, a);
}

bool cg_init_xavier_normal_torch_(cg_tensor *t, cg_mt19937 *g, double gain)
{
    const char *op = "init xavier_normal (PyTorch generator)";
    double std;
    return need_gen(op, t, g) && xavier_std(op, t, gain, &std) &&
           cg_normal_torch_(t, g, 0.0f, (float)std);
}

/* ------------------------------------------------------- trunc_normal */
/* PyTorch's erfinv of a float (calc_erfinv, aten's Math.h: a rational
 * first guess, then two Newton steps), its polynomials with the fused
 * multiply-adds its x86-64 build compiles them to: equal to torch.erfinv
 * on 320,001 of 320,001 floats of [-1, 1] (unfused, 15% differ in the
 * last bit). */
static float erfinv_f(float y)
{
    static const float a[4] = {0.886226899f, -1.645349621f, 0.914624893f, -0.140543331f};
    static const float b[4] = {-2.118377725f, 1.442710462f, -0.329097515f, 0.012229801f};
    static const float c[4] = {-1.970840454f, -1.624906493f, 3.429567803f, 1.641345311f};
    static const float d[2] = {3.543889200f, 1.637067800f};
    const float ya = fabsf(y);
    if (!(ya <= 1.0f))
        return NAN;
    if (ya == 1.0f)
        return copysignf(INFINITY, y);
    float x;
    if (ya <= 0.7f) { /* the central range */
        const float z = y * y;
        const float num = fmaf(fmaf(fmaf(a[3], z, a[2]), z, a[1]), z, a[0]);
        const float den = fmaf(fmaf(fmaf(fmaf(b[3], z, b[2]), z, b[1]), z, b[0]), z, 1.0f);
        x = y * num / den;
    } else { /* the tails */
        const float z = sqrtf(-logf((1.0f - ya) / 2.0f));
        const float num = fmaf(fmaf(fmaf(c[3], z, c[2]), z, c[1]), z, c[0]);
        const float den = fmaf(fmaf(d[1], z, d[0]), z, 1.0f);
        x = copysignf(num, y) / den;
    }
    const float two_over_root_pi = 2.0f / (float)sqrt(3.14159265358979323846);
    for (int step = 0; step < 2; step++)
        x = x - (erff(x) - y) / (two_over_root_pi * expf(-x * x));
    return x;
}

/* The bounds of the uniform draw, 2 cdf((a - mean) / std) - 1 and the
 * same of b (norm_cdf in double, as init.py), or false + error */
static bool trunc_bounds(const char *op, double mean, double std, double a, double b, float *lo,
                         float *hi)
{
    if (!(std > 0) || !isfinite(std) || !isfinite(mean) || !(a <= b)) {
        cg_set_error("%s: need a finite mean, a finite std > 0 and a <= b (got mean %g, std %g, "
                     "a %g, b %g)",
                     op, mean, std, a, b);
        return false;
    }
    const double l = (1. + erf((a - mean) / std / sqrt(2.))) / 2.;
    const double u = (1. + erf((b - mean) / std / sqrt(2.))) / 2.;
    *lo = (float)(2 * l - 1);
    *hi = (float)(2 * u - 1);
    return true;
}

/* The uniforms of x (contiguous float32) made truncated normals in place:
 * init.py's erfinv_, mul_(std sqrt 2), add_(mean), clamp_(a, b), each in
 * float */
static void trunc_finish(cg_tensor *x, double mean, double std, double a, double b)
{
    float *v = cg_data(x);
    const float s = (float)(std * sqrt(2.)), m = (float)mean, fa = (float)a, fb = (float)b;
    for (int64_t i = 0, n = cg_numel(x); i < n; i++) {
        const float y = erfinv_f(v[i]) * s + m;
        v[i] = isnan(y) ? y : fminf(fmaxf(y, fa), fb);
    }
    cg_tensor_modified(x);
}

bool cg_init_trunc_normal_(cg_tensor *t, cg_rng *rng, double mean, double std, double a, double b)
{
    const char *op = "init trunc_normal";
    float lo, hi;
    if (!need_gen(op, t, rng) || !trunc_bounds(op, mean, std, a, b, &lo, &hi) ||
        !cg_check_f32(op, "t", t) || !cg_check_no_history(op, t))
        return false;
    if (rng == cg_init_skip())
        return true;
    cg_tensor *x = cg_empty(t->ndim, t->shape);
    bool ok = x && cg_uniform_(x, rng, lo, hi);
    if (ok) {
        trunc_finish(x, mean, std, a, b);
        ok = cg_k_copy_(t, x);
    }
    cg_release(x);
    return ok;
}

bool cg_init_trunc_normal_torch_(cg_tensor *t, cg_mt19937 *g, double mean, double std, double a,
                                 double b)
{
    const char *op = "init trunc_normal (PyTorch generator)";
    float lo, hi;
    if (!need_gen(op, t, g) || !trunc_bounds(op, mean, std, a, b, &lo, &hi) ||
        !cg_uniform_torch_(t, g, lo, hi))
        return false;
    trunc_finish(t, mean, std, a, b);
    return true;
}

/* ------------------------------------------------------------- sparse */
/* The rows zeroed in each column, ceil(sparsity rows), or -1 + error */
static int64_t sparse_zeros(const char *op, const cg_tensor *t, double sparsity, double std)
{
    if (t->ndim != 2) {
        cg_set_error("%s: Only tensors with 2 dimensions are supported (got %d)", op, t->ndim);
        return -1;
    }
    if (!(sparsity >= 0 && sparsity <= 1) || !(std >= 0) || !isfinite(std)) {
        cg_set_error("%s: need sparsity in [0, 1] and a finite std >= 0 (got %g, %g)", op, sparsity,
                     std);
        return -1;
    }
    return (int64_t)ceil(sparsity * (double)t->shape[0]);
}

/* Rows perm[0, k) of column col of t to 0 */
static bool zero_rows(cg_tensor *t, int64_t col, const int64_t *perm, int64_t k)
{
    for (int64_t i = 0; i < k; i++)
        if (!cg_set(t, (const int64_t[]){perm[i], col}, 0.0f))
            return false;
    return true;
}

bool cg_init_sparse_(cg_tensor *t, cg_rng *rng, double sparsity, double std)
{
    const char *op = "init sparse";
    int64_t k;
    if (!need_gen(op, t, rng) || (k = sparse_zeros(op, t, sparsity, std)) < 0)
        return false;
    if (rng == cg_init_skip())
        return cg_check_f32(op, "t", t);
    if (!cg_normal_(t, rng, 0.0f, (float)std))
        return false;
    for (int64_t col = 0; col < t->shape[1]; col++) { /* a permutation of the rows each */
        int64_t *perm = cg_randperm(rng, t->shape[0]);
        const bool ok = perm && zero_rows(t, col, perm, k);
        free(perm);
        if (!ok)
            return false;
    }
    return true;
}

bool cg_init_sparse_torch_(cg_tensor *t, cg_mt19937 *g, double sparsity, double std)
{
    const char *op = "init sparse (PyTorch generator)";
    int64_t k;
    if (!need_gen(op, t, g) || (k = sparse_zeros(op, t, sparsity, std)) < 0 ||
        !cg_normal_torch_(t, g, 0.0f, (float)std))
        return false;
    for (int64_t col = 0; col < t->shape[1]; col++) {
        cg_tensor *perm = cg_randperm_torch(g, t->shape[0]);
        const bool ok = perm && zero_rows(t, col, cg_data_i64(perm), k);
        cg_release(perm);
        if (!ok)
            return false;
    }
    return true;
}
