/* Pooling and batch normalisation (autograd/ops.h cg_max_pool1d/2d/3d ...,
 * cg_max_unpool1d/2d/3d, cg_batch_norm; nn/batchnorm.h): gradchecks of
 * every op over its options on contiguous, transposed and strided inputs;
 * max pooling's ties and NaN; the 3d pools and the unpools against a
 * float64 reference written here; batch_norm's running statistics against
 * numbers computed here in double; BatchNorm1d/2d's buffers, momentum None
 * and train/eval; the same bits at 1 and 2 threads; bfloat16; refusals in
 * one line. PyTorch's
 * values and gradients: tests/interop/pool.py + check_pool.c (torch_pool). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/batchnorm.h"
#include "tests/testutil.h"

typedef enum { MAX, AVG, AMAX, AAVG } kind_t;
typedef struct {
    const char *name;
    kind_t kind;
    int nd;
    cg_pool o;
    int64_t out[3]; /* adaptive: the nd output sizes */
} pcase;

static cg_tensor *pool_of(const pcase *c, cg_tensor *x)
{
    const int64_t *o = c->out;
    switch (c->kind) {
    case MAX:
        return c->nd == 1   ? cg_max_pool1d(x, c->o)
               : c->nd == 2 ? cg_max_pool2d(x, c->o)
                            : cg_max_pool3d(x, c->o);
    case AVG:
        return c->nd == 1   ? cg_avg_pool1d(x, c->o)
               : c->nd == 2 ? cg_avg_pool2d(x, c->o)
                            : cg_avg_pool3d(x, c->o);
    case AMAX:
        return c->nd == 1   ? cg_adaptive_max_pool1d(x, o[0], NULL)
               : c->nd == 2 ? cg_adaptive_max_pool2d(x, o[0], o[1], NULL)
                            : cg_adaptive_max_pool3d(x, o[0], o[1], o[2], NULL);
    default:
        return c->nd == 1   ? cg_adaptive_avg_pool1d(x, o[0])
               : c->nd == 2 ? cg_adaptive_avg_pool2d(x, o[0], o[1])
                            : cg_adaptive_avg_pool3d(x, o[0], o[1], o[2]);
    }
}

static cg_tensor *pool_fn(void *ctx, cg_tensor *const *in) { return pool_of(ctx, in[0]); }

#define P(...) ((cg_pool){__VA_ARGS__})
static const pcase CASES[] = {
    {"max1d k3", MAX, 1, P(.kernel_size = {3}), {0}},
    {"max1d k3 s2 p1 d2 ceil",
     MAX,
     1,
     P(.kernel_size = {3}, .stride = {2}, .padding = {1}, .dilation = {2}, .ceil_mode = true),
     {0}},
    {"max2d k2", MAX, 2, P(.kernel_size = {2, 2}), {0}},
    {"max2d k3x2 s2x1 p1 ceil",
     MAX,
     2,
     P(.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .ceil_mode = true),
     {0}},
    {"max2d k2 d2", MAX, 2, P(.kernel_size = {2, 2}, .dilation = {2, 1}, .stride = {1, 1}), {0}},
    {"avg1d k3 s2 p1", AVG, 1, P(.kernel_size = {3}, .stride = {2}, .padding = {1}), {0}},
    {"avg1d k2 ceil excl",
     AVG,
     1,
     P(.kernel_size = {2}, .ceil_mode = true, .exclude_pad = true, .padding = {1}),
     {0}},
    {"avg2d k3 s2 p1 ceil",
     AVG,
     2,
     P(.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true),
     {0}},
    {"avg2d k3x2 p1 excl",
     AVG,
     2,
     P(.kernel_size = {3, 2}, .padding = {1, 1}, .exclude_pad = true, .stride = {1, 2}),
     {0}},
    {"avg2d k2 divisor 3", AVG, 2, P(.kernel_size = {2, 2}, .divisor_override = 3), {0}},
    {"adaptive max1d 4", AMAX, 1, P(.ceil_mode = false), {4}},
    {"adaptive max2d 3x2", AMAX, 2, P(.ceil_mode = false), {3, 2}},
    {"adaptive avg1d 3", AAVG, 1, P(.ceil_mode = false), {3}},
    {"adaptive avg2d 4x3", AAVG, 2, P(.ceil_mode = false), {4, 3}},
    {"max3d k2", MAX, 3, P(.kernel_size = {2, 2, 2}), {0}},
    {"max3d k3x2x2 s2x1x2 p1x1x0 d1x2x1 ceil",
     MAX,
     3,
     P(.kernel_size = {3, 2, 2}, .stride = {2, 1, 2}, .padding = {1, 1, 0}, .dilation = {1, 2, 1},
       .ceil_mode = true),
     {0}},
    {"avg3d k3 s2 p1 ceil",
     AVG,
     3,
     P(.kernel_size = {3, 3, 3}, .stride = {2, 2, 2}, .padding = {1, 1, 1}, .ceil_mode = true),
     {0}},
    {"avg3d k2x3x2 p1 excl s1x2x1",
     AVG,
     3,
     P(.kernel_size = {2, 3, 2}, .padding = {1, 1, 1}, .exclude_pad = true, .stride = {1, 2, 1}),
     {0}},
    {"avg3d k2 divisor 5", AVG, 3, P(.kernel_size = {2, 2, 2}, .divisor_override = 5), {0}},
    {"adaptive max3d 2x3x4", AMAX, 3, P(.ceil_mode = false), {2, 3, 4}},
    {"adaptive avg3d 2x4x3", AAVG, 3, P(.ceil_mode = false), {2, 4, 3}},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

/* x's elements (any layout) made a shuffle of -2, -2 + 0.05, ...: a max
 * pool's gradient has no kink within the gradcheck's steps */
static void distinct_(cg_tensor *x, cg_rng *r)
{
    const int64_t n = cg_numel(x);
    cg_tensor *v = cg_empty(x->ndim, x->shape);
    for (int64_t i = 0; i < n; i++)
        cg_data(v)[i] = -2.0f + 0.05f * (float)i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        const int64_t j = (int64_t)cg_rng_below(r, (uint64_t)(i + 1));
        const float t = cg_data(v)[i];
        cg_data(v)[i] = cg_data(v)[j];
        cg_data(v)[j] = t;
    }
    ck_assert(cg_k_copy_(x, v));
    cg_release(v);
}

/* Gradchecks of every case, batched and unbatched, on three layouts */
START_TEST(test_pool_gradcheck)
{
    cg_rng r = cg_rng_new(3);
    for (int i = 0; i < NCASES; i++) {
        const pcase *c = &CASES[i];
        for (int batched = 0; batched < 2; batched++)
            for (int layout = 0; layout < 3; layout++) {
                int64_t shape[5] = {2, 2, 3, 7, 6};
                const int nd = c->nd + 1 + batched;
                int64_t *s = shape + 5 - nd;
                if (c->nd == 1)
                    s[nd - 1] = 9;
                cg_tensor *x = cg_test_randn_layout(&r, nd, s, layout);
                if (c->kind == MAX || c->kind == AMAX)
                    distinct_(x, &r);
                cg_requires_grad(x, true);
                cg_gradcheck_report rep;
                /* a 3d max's 504 spread inputs (RMS ~12): the projections'
                 * steps kept within the inputs' spacing of 0.05 */
                cg_gradcheck_opts go = cg_gradcheck_defaults();
                if (c->nd == 3 && (c->kind == MAX || c->kind == AMAX))
                    go.proj_eps = 1e-3;
                const bool ok = cg_gradcheck(pool_fn, (void *)c, 1, &x, &go, &rep);
                ck_assert_msg(ok, "%s batched %d layout %d: %s", c->name, batched, layout,
                              rep.message);
                cg_test_check_unread(pool_fn, (void *)c, 1, &x, c->name); /* the reads masks */
                cg_release(x);
            }
    }
}
END_TEST

/* Values on a small example, worked by hand (PyTorch gives the same) */
START_TEST(test_pool_values)
{
    const float v[8] = {1, 3, 2, 5, 4, 0, 7, 6};
    cg_tensor *x = cg_from_data(CG_SHAPE(1, 8), v), *idx = NULL;
    cg_tensor *y = cg_max_pool1d_with_indices(
        x, P(.kernel_size = {3}, .stride = {2}, .padding = {1}, .ceil_mode = true), &idx);
    /* windows [-1,1], [1,3], [3,5], [5,7], and ceil's [7,9] (starts at 7 < 8) */
    ck_assert_msg(y && cg_numel(y) == 5, "%s", cg_last_error());
    CG_ASSERT_TENSOR(y, ((float[]){3, 5, 5, 7, 6}), 0, 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(cg_data_i64(idx)[i], ((int64_t[]){1, 3, 3, 6, 7})[i]);
    cg_release_all(2, y, idx);
    y = cg_avg_pool1d(x, P(.kernel_size = {3}, .stride = {2}, .padding = {1}));
    CG_ASSERT_TENSOR(y, ((float[]){4 / 3.0f, 10 / 3.0f, 9 / 3.0f, 13 / 3.0f}), 1e-6, 1e-6);
    cg_release(y);
    y = cg_avg_pool1d(x, P(.kernel_size = {3}, .stride = {2}, .padding = {1}, .exclude_pad = true));
    CG_ASSERT_TENSOR(y, ((float[]){2, 10 / 3.0f, 3, 13 / 3.0f}), 1e-6, 1e-6);
    cg_release(y);
    y = cg_adaptive_avg_pool1d(x, 3); /* windows [0,3) [2,6) [5,8) */
    CG_ASSERT_TENSOR(y, ((float[]){2, 11 / 4.0f, 13 / 3.0f}), 1e-6, 1e-6);
    cg_release(y);
    y = cg_adaptive_max_pool1d(x, 3, &idx);
    CG_ASSERT_TENSOR(y, ((float[]){3, 5, 7}), 0, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(cg_data_i64(idx)[i], ((int64_t[]){1, 3, 6})[i]);
    cg_release_all(3, y, idx, x);
}
END_TEST

/* Ties: the gradient to the first maximum; NaN: it wins (the last NaN) */
START_TEST(test_pool_ties_nan)
{
    const float v[6] = {2, 2, 1, NAN, 0, NAN};
    cg_tensor *x = cg_requires_grad(cg_from_data(CG_SHAPE(1, 6), v), true), *idx = NULL;
    cg_tensor *y = cg_max_pool1d_with_indices(x, P(.kernel_size = {2}), &idx);
    ck_assert(y && cg_data(y)[0] == 2 && isnan(cg_data(y)[1]) && isnan(cg_data(y)[2]));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(cg_data_i64(idx)[i], ((int64_t[]){0, 3, 5})[i]);
    cg_tensor *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(x), ((float[]){1, 0, 0, 1, 0, 1}), 0, 0);
    cg_release_all(3, s, y, idx);
    /* overlapping windows: one input gathers every window's gradient */
    cg_zero_grad(x);
    y = cg_max_pool1d(x, P(.kernel_size = {3}, .stride = {1}));
    s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(x), ((float[]){1, 0, 0, 2, 0, 1}), 0, 0);
    cg_release_all(3, s, y, x);
}
END_TEST

/* bfloat16: the values rounded once (max exact), the gradient bfloat16 */
START_TEST(test_pool_bf16)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *xf = cg_randn(&r, CG_SHAPE(2, 3, 8, 8)), *xb = cg_k_to(xf, CG_BF16);
    cg_tensor *xf1 = cg_randn(&r, CG_SHAPE(2, 3, 9)), *xb1 = cg_k_to(xf1, CG_BF16);
    for (int i = 0; i < NCASES; i++) {
        cg_tensor *in = CASES[i].nd == 1 ? xb1 : xb, *xr = cg_k_to(in, CG_F32);
        cg_tensor *yb = pool_of(&CASES[i], in), *yf = pool_of(&CASES[i], xr);
        cg_test_assert_bf16_rounded(yb, yf, CASES[i].name); /* the float32 result rounded once */
        cg_release_all(3, yb, yf, xr);
    }
    cg_release_all(2, xf1, xb1);
    cg_requires_grad(xb, true);
    cg_tensor *y = cg_avg_pool2d(xb, P(.kernel_size = {2, 2})), *s = cg_sum_all(y);
    ck_assert(s && cg_backward(s, NULL, false));
    ck_assert(cg_grad(xb)->dtype == CG_BF16);
    cg_tensor *g = cg_k_to(cg_grad(xb), CG_F32);
    for (int64_t i = 0; i < cg_numel(g); i++)
        ck_assert(cg_data(g)[i] == 0.25f);
    cg_release_all(5, g, s, y, xf, xb);
}
END_TEST

START_TEST(test_pool_refusals)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3, 5)), *x4 = cg_zeros(CG_SHAPE(1, 2, 3, 5, 5));
    cg_tensor *xi = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 3, 5));
    CG_ASSERT_REFUSED(!cg_max_pool1d(x, P(.kernel_size = {4}, .padding = {3})),
                      "max_pool1d: padding 3 should be at most half of kernel_size 4");
    CG_ASSERT_REFUSED(!cg_max_pool1d(x, P(.kernel_size = {0})), "max_pool1d: kernel_size 0");
    CG_ASSERT_REFUSED(!cg_avg_pool1d(x, P(.kernel_size = {2}, .stride = {-1})),
                      "avg_pool1d: kernel_size 2, stride -1");
    CG_ASSERT_REFUSED(!cg_max_pool1d(x, P(.kernel_size = {6})), "output size 0");
    CG_ASSERT_REFUSED(!cg_max_pool2d(x4, P(.kernel_size = {2, 2})),
                      "max_pool2d: input [1, 2, 3, 5, 5] has 5 dims, expected 3 (unbatched)");
    CG_ASSERT_REFUSED(!cg_avg_pool2d(x4, P(.kernel_size = {2, 2})), "has 5 dims");
    CG_ASSERT_REFUSED(!cg_adaptive_avg_pool1d(x, 0), "adaptive_avg_pool1d: output_size 0");
    CG_ASSERT_REFUSED(!cg_adaptive_max_pool2d(x, 1, 0, NULL), "adaptive_max_pool2d: output_size 0");
    CG_ASSERT_REFUSED(!cg_max_pool1d(xi, P(.kernel_size = {2})), "max_pool1d: argument 1 is int64");
    CG_ASSERT_REFUSED(!cg_avg_pool1d(x, P(.kernel_size = {2}, .divisor_override = 2)),
                      "avg_pool1d: divisor_override");
    CG_ASSERT_REFUSED(!cg_max_pool1d(NULL, P(.kernel_size = {2})), "");
    cg_release_all(3, x, x4, xi);
}
END_TEST

/* ------------------------------------------ 3d pools: float64 reference */
/* sum(y * r) */
static cg_tensor *dot_(cg_tensor *y, cg_tensor *r)
{
    cg_tensor *p = cg_mul(y, r), *l = cg_sum_all(p);
    cg_release(p);
    return l;
}

/* PyTorch's pooling_output_shape along spatial dim i of c, input size in */
static int64_t ref_out(const pcase *c, int i, int64_t in)
{
    if (c->kind == AMAX || c->kind == AAVG)
        return c->out[i];
    const int64_t k = c->o.kernel_size[i], s = c->o.stride[i] ? c->o.stride[i] : k;
    const int64_t p = c->o.padding[i], d = c->o.dilation[i] ? c->o.dilation[i] : 1;
    const int64_t num = in + 2 * p - d * (k - 1) - 1 + (c->o.ceil_mode ? s - 1 : 0);
    int64_t o = num / s + 1; /* num >= 0 in every case here */
    if (c->o.ceil_mode && (o - 1) * s >= in + p)
        o--;
    return o;
}

/* The positions of output o's window along dim i (PyTorch's CPU loops):
 * pos[0..return), *count the average's divisor along it */
static int ref_window(const pcase *c, int i, int64_t in, int64_t out, int64_t o, int64_t *pos,
                      int64_t *count)
{
    int n = 0;
    if (c->kind == AMAX || c->kind == AAVG) {
        const int64_t lo = (int64_t)floor((double)(o * in) / (double)out);
        const int64_t hi = (int64_t)ceil((double)((o + 1) * in) / (double)out);
        for (int64_t t = lo; t < hi; t++)
            pos[n++] = t;
        *count = n;
        return n;
    }
    const int64_t k = c->o.kernel_size[i], s = c->o.stride[i] ? c->o.stride[i] : k;
    const int64_t p = c->o.padding[i], d = c->o.dilation[i] ? c->o.dilation[i] : 1;
    const int64_t start = o * s - p;
    if (c->kind == AVG) {
        const int64_t end = start + k < in + p ? start + k : in + p;
        for (int64_t t = start; t < end; t++)
            if (t >= 0 && t < in)
                pos[n++] = t;
        *count = c->o.exclude_pad ? n : end - start;
        return n;
    }
    for (int64_t j = 0; j < k; j++)
        if (start + j * d >= 0 && start + j * d < in)
            pos[n++] = start + j * d;
    *count = n;
    return n;
}

/* c (3d) on x [.., D, H, W] against float64: the values, max's indices
 * (exactly) and the gradient of sum(y * r) */
static void ref_check(const pcase *c, cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(r, ndim, shape, 0), true), *idx = NULL;
    const bool is_max = c->kind == MAX || c->kind == AMAX;
    const int64_t D = shape[ndim - 3], H = shape[ndim - 2], W = shape[ndim - 1];
    const int64_t OD = ref_out(c, 0, D), OH = ref_out(c, 1, H), OW = ref_out(c, 2, W);
    const int64_t P = cg_numel(x) / (D * H * W), per = OD * OH * OW;
    cg_tensor *y = c->kind == MAX    ? cg_max_pool3d_with_indices(x, c->o, &idx)
                   : c->kind == AMAX ? cg_adaptive_max_pool3d(x, OD, OH, OW, &idx)
                                     : pool_of(c, x);
    ck_assert_msg(y && cg_numel(y) == P * per, "%s: %s", c->name, cg_last_error());
    ck_assert(y->shape[ndim - 3] == OD && y->shape[ndim - 2] == OH && y->shape[ndim - 1] == OW);
    cg_tensor *rt = cg_randn(r, y->ndim, y->shape), *l = dot_(y, rt);
    ck_assert(cg_backward(l, NULL, false));
    double *xv = cg_test_doubles(x), *rv = cg_test_doubles(rt), *yv = cg_test_doubles(y);
    double *gv = cg_test_doubles(cg_grad(x)), *want_g = calloc((size_t)cg_numel(x), sizeof(double));
    int64_t pd[16], ph[16], pw[16], cd, ch, cw;
    for (int64_t p = 0; p < P; p++)
        for (int64_t od = 0; od < OD; od++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int nd_ = ref_window(c, 0, D, OD, od, pd, &cd);
                    const int nh = ref_window(c, 1, H, OH, oh, ph, &ch);
                    const int nw = ref_window(c, 2, W, OW, ow, pw, &cw);
                    const int64_t o = p * per + (od * OH + oh) * OW + ow;
                    double acc = is_max ? -INFINITY : 0.0;
                    int64_t best = -1;
                    for (int a = 0; a < nd_; a++)
                        for (int b = 0; b < nh; b++)
                            for (int e = 0; e < nw; e++) {
                                const int64_t at = (pd[a] * H + ph[b]) * W + pw[e];
                                const double v = xv[p * D * H * W + at];
                                if (!is_max)
                                    acc += v;
                                else if (v > acc || best < 0) {
                                    acc = v;
                                    best = at;
                                }
                            }
                    const double div = c->o.divisor_override && c->kind == AVG
                                           ? (double)c->o.divisor_override
                                           : (double)(cd * ch * cw);
                    if (is_max) {
                        ck_assert_msg(yv[o] == acc && cg_data_i64(idx)[o] == best,
                                      "%s: output %lld: %g at %lld, expected %g at %lld", c->name,
                                      (long long)o, yv[o], (long long)cg_data_i64(idx)[o], acc,
                                      (long long)best);
                        want_g[p * D * H * W + best] += rv[o];
                        continue;
                    }
                    ck_assert_msg(fabs(yv[o] - acc / div) <= 1e-6 * (1 + fabs(acc / div)),
                                  "%s: output %lld: %.9g, expected %.9g", c->name, (long long)o,
                                  yv[o], acc / div);
                    for (int a = 0; a < nd_; a++)
                        for (int b = 0; b < nh; b++)
                            for (int e = 0; e < nw; e++)
                                want_g[p * D * H * W + (pd[a] * H + ph[b]) * W + pw[e]] +=
                                    rv[o] / div;
                }
    for (int64_t i = 0; i < cg_numel(x); i++)
        ck_assert_msg(fabs(gv[i] - want_g[i]) <= 1e-5 * (1 + fabs(want_g[i])),
                      "%s: gradient %lld: %.9g, expected %.9g", c->name, (long long)i, gv[i],
                      want_g[i]);
    free(xv), free(rv), free(yv), free(gv), free(want_g);
    cg_release_all(5, x, idx, y, rt, l);
}

/* Cases the gradcheck does not have: dilation on every dim, ceil_mode with
 * count_include_pad=False, divisor_override with padding and ceil_mode */
static const pcase REF_EXTRA[] = {
    {"max3d k3 s1 p1 d2",
     MAX,
     3,
     P(.kernel_size = {3, 3, 2}, .stride = {1, 1, 1}, .padding = {1, 1, 1}, .dilation = {2, 2, 2}),
     {0}},
    {"max3d k2x3x1 s3x1x2 ceil",
     MAX,
     3,
     P(.kernel_size = {2, 3, 1}, .stride = {3, 1, 2}, .ceil_mode = true),
     {0}},
    {"avg3d k3x2x3 s2x1x2 p1x0x1 ceil excl",
     AVG,
     3,
     P(.kernel_size = {3, 2, 3}, .stride = {2, 1, 2}, .padding = {1, 0, 1}, .ceil_mode = true,
       .exclude_pad = true),
     {0}},
    {"avg3d k2x2x3 s2 p1 ceil divisor 7",
     AVG,
     3,
     P(.kernel_size = {2, 2, 3}, .stride = {2, 2, 2}, .padding = {1, 1, 1}, .ceil_mode = true,
       .divisor_override = 7),
     {0}},
    {"adaptive max3d 5x1x2 (windows overlap)", AMAX, 3, P(.ceil_mode = false), {5, 1, 2}},
    {"adaptive avg3d 3x5x1", AAVG, 3, P(.ceil_mode = false), {3, 5, 1}},
};

START_TEST(test_pool3d_reference)
{
    cg_rng r = cg_rng_new(11);
    const int64_t shapes[3][5] = {{2, 3, 5, 6, 7}, {3, 4, 6, 5, 0}, {1, 2, 7, 4, 9}};
    const int ndims[3] = {5, 4, 5}; /* batched, unbatched, non-cubic */
    int n = 0;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < NCASES; i++)
            if (CASES[i].nd == 3)
                ref_check(&CASES[i], &r, ndims[s], shapes[s]), n++;
        for (int i = 0; i < (int)(sizeof REF_EXTRA / sizeof REF_EXTRA[0]); i++)
            ref_check(&REF_EXTRA[i], &r, ndims[s], shapes[s]), n++;
    }
    ck_assert_int_eq(n, 39);
}
END_TEST

/* ---------------------------------------------------------- max unpool */
typedef struct {
    int nd;
    cg_pool o;
    const int64_t *size; /* output_size or NULL */
    cg_tensor *idx;
} ucase;

static cg_tensor *unpool_of(const ucase *u, cg_tensor *x)
{
    return u->nd == 1   ? cg_max_unpool1d(x, u->idx, u->o, u->size)
           : u->nd == 2 ? cg_max_unpool2d(x, u->idx, u->o, u->size)
                        : cg_max_unpool3d(x, u->idx, u->o, u->size);
}

static cg_tensor *unpool_fn(void *ctx, cg_tensor *const *in) { return unpool_of(ctx, in[0]); }

/* The unpool cases: a max pool of options o over [2, 3, spatial] gives
 * the indices, size the output_size (NULL: the default) */
static const struct {
    int nd;
    cg_pool o;
    int64_t in[3], size[3];
    bool sized;
} UNPOOLS[] = {
    {1, P(.kernel_size = {2}), {6}, {0}, false},
    {1, P(.kernel_size = {3}, .stride = {2}, .padding = {1}), {10}, {10}, true}, /* default 9 */
    {2, P(.kernel_size = {2, 2}), {6, 4}, {0}, false},
    {2, P(.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 0}), {7, 7}, {7, 7}, true},
    {3, P(.kernel_size = {2, 2, 2}), {6, 4, 2}, {0}, false},
    {3,
     P(.kernel_size = {3, 2, 2}, .stride = {2, 2, 1}, .padding = {1, 0, 1}),
     {6, 7, 6},
     {6, 7, 6},
     true}, /* default 5, 6, 6 */
    {3, P(.kernel_size = {2, 3, 2}, .stride = {1, 1, 1}), {4, 5, 3}, {0}, false}, /* repeats */
};
#define NUNPOOLS (int)(sizeof UNPOOLS / sizeof UNPOOLS[0])

/* case k's indices: of its max pool of x0 [N 2, C 3, in] (unbatched: no N) */
static cg_tensor *unpool_indices(int k, cg_rng *r, bool batched)
{
    const int nd = UNPOOLS[k].nd;
    int64_t shape[5];
    int n = 0;
    if (batched)
        shape[n++] = 2;
    shape[n++] = 3;
    for (int i = 0; i < nd; i++)
        shape[n++] = UNPOOLS[k].in[i];
    cg_tensor *x0 = cg_randn(r, n, shape), *idx = NULL;
    cg_tensor *y = nd == 1   ? cg_max_pool1d_with_indices(x0, UNPOOLS[k].o, &idx)
                   : nd == 2 ? cg_max_pool2d_with_indices(x0, UNPOOLS[k].o, &idx)
                             : cg_max_pool3d_with_indices(x0, UNPOOLS[k].o, &idx);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_release_all(2, x0, y);
    return idx;
}

/* u's indices made distinct within each plane (a repeated index's
 * overwritten input has no derivative, though PyTorch's gradient reads
 * g there too): a random pick from the output plane */
static void distinct_indices_(const ucase *u, cg_rng *r)
{
    cg_tensor *z = cg_zeros(u->idx->ndim, u->idx->shape), *y = unpool_of(u, z);
    ck_assert_msg(y, "%s", cg_last_error());
    int64_t out = 1, in = 1;
    for (int i = 0; i < u->nd; i++) {
        out *= y->shape[y->ndim - u->nd + i];
        in *= u->idx->shape[u->idx->ndim - u->nd + i];
    }
    int64_t *pick = malloc((size_t)out * sizeof *pick);
    for (int64_t p = 0; p < cg_numel(u->idx) / in; p++) {
        for (int64_t i = 0; i < out; i++)
            pick[i] = i;
        for (int64_t i = 0; i < in; i++) { /* a partial Fisher-Yates */
            const int64_t j = i + (int64_t)cg_rng_below(r, (uint64_t)(out - i));
            const int64_t t = pick[i];
            pick[i] = pick[j];
            pick[j] = t;
            cg_data_i64(u->idx)[p * in + i] = pick[i];
        }
    }
    free(pick);
    cg_release_all(2, z, y);
}

/* Gradchecks of each unpool, batched and unbatched, on three layouts
 * (indices without repeats) */
START_TEST(test_max_unpool_gradcheck)
{
    cg_rng r = cg_rng_new(12);
    for (int k = 0; k < NUNPOOLS; k++)
        for (int batched = 0; batched < 2; batched++) {
            cg_tensor *idx = unpool_indices(k, &r, batched);
            ucase u = {UNPOOLS[k].nd, UNPOOLS[k].o, UNPOOLS[k].sized ? UNPOOLS[k].size : NULL, idx};
            distinct_indices_(&u, &r);
            for (int layout = 0; layout < 3; layout++) {
                cg_tensor *x =
                    cg_requires_grad(cg_test_randn_layout(&r, idx->ndim, idx->shape, layout), true);
                cg_gradcheck_report rep;
                ck_assert_msg(cg_gradcheck(unpool_fn, &u, 1, &x, NULL, &rep),
                              "unpool %d batched %d layout %d: %s", k, batched, layout,
                              rep.message);
                cg_test_check_unread(unpool_fn, &u, 1, &x, "max_unpool");
                cg_release(x);
            }
            cg_release(idx);
        }
}
END_TEST

/* Each unpool against float64: zeros with x at its indices (the last of
 * a repeated index), the gradient g read at each index */
START_TEST(test_max_unpool_reference)
{
    cg_rng r = cg_rng_new(13);
    for (int k = 0; k < NUNPOOLS; k++)
        for (int batched = 0; batched < 2; batched++) {
            const int nd = UNPOOLS[k].nd;
            cg_tensor *idx = unpool_indices(k, &r, batched);
            cg_tensor *x = cg_requires_grad(cg_randn(&r, idx->ndim, idx->shape), true);
            ucase u = {nd, UNPOOLS[k].o, UNPOOLS[k].sized ? UNPOOLS[k].size : NULL, idx};
            cg_tensor *y = unpool_of(&u, x);
            ck_assert_msg(y, "%s", cg_last_error());
            int64_t out = 1;
            for (int i = 0; i < nd; i++) {
                const cg_pool *o = &UNPOOLS[k].o;
                const int64_t s = o->stride[i] ? o->stride[i] : o->kernel_size[i];
                const int64_t want = UNPOOLS[k].sized ? UNPOOLS[k].size[i]
                                                      : (idx->shape[idx->ndim - nd + i] - 1) * s -
                                                            2 * o->padding[i] + o->kernel_size[i];
                ck_assert_int_eq(y->shape[y->ndim - nd + i], want);
                out *= want;
            }
            cg_tensor *rt = cg_randn(&r, y->ndim, y->shape), *l = dot_(y, rt);
            ck_assert(cg_backward(l, NULL, false));
            double *xv = cg_test_doubles(x), *yv = cg_test_doubles(y), *rv = cg_test_doubles(rt);
            double *gv = cg_test_doubles(cg_grad(x));
            double *want = calloc((size_t)cg_numel(y), sizeof *want);
            const int64_t in = cg_numel(x) / (cg_numel(y) / out);
            for (int64_t i = 0; i < cg_numel(x); i++) {
                const int64_t at = i / in * out + cg_data_i64(idx)[i];
                want[at] = xv[i];
                ck_assert_msg(gv[i] == rv[at], "unpool %d: gradient %lld", k, (long long)i);
            }
            for (int64_t i = 0; i < cg_numel(y); i++)
                ck_assert_msg(yv[i] == want[i], "unpool %d batched %d: output %lld %g, expected %g",
                              k, batched, (long long)i, yv[i], want[i]);
            free(xv), free(yv), free(rv), free(gv), free(want);
            cg_release_all(5, idx, x, y, rt, l);
        }
}
END_TEST

/* The unpool's sizes and refusals: PyTorch's output_size rule and index
 * check, the options it has not, a module of it */
START_TEST(test_max_unpool_refusals)
{
    cg_tensor *x = cg_ones(CG_SHAPE(1, 2, 2, 2, 2)),
              *idx = cg_zeros_dtype(CG_I64, x->ndim, x->shape);
    const cg_pool k2 = P(.kernel_size = {2, 2, 2});
    cg_tensor *y = cg_max_unpool3d(x, idx, k2, (int64_t[]){5, 4, 3});
    ck_assert_msg(y && y->shape[2] == 5 && y->shape[3] == 4 && y->shape[4] == 3, "%s",
                  cg_last_error());
    cg_release(y);
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx, k2, (int64_t[]){6, 4, 4}),
                           "max_unpool3d: output_size 6 along spatial dim 0, expected between 2 "
                           "and 6 (exclusive)");
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx, k2, (int64_t[]){4, 4, 2}),
                           "output_size 2 along spatial dim 2");
    cg_data_i64(idx)[3] = 64;
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx, k2, NULL),
                           "max_unpool3d: found an invalid max index 64 (the output planes are "
                           "4x4x4)");
    cg_data_i64(idx)[3] = -1;
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx, k2, NULL), "invalid max index -1");
    cg_data_i64(idx)[3] = 0;
    cg_tensor *idx32 = cg_zeros_dtype(CG_I32, x->ndim, x->shape),
              *idx_s = cg_zeros_dtype(CG_I64, CG_SHAPE(1, 2, 2, 2));
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx32, k2, NULL),
                           "max_unpool3d: indices [1, 2, 2, 2, 2] (int32), expected int64 of the "
                           "input's shape [1, 2, 2, 2, 2]");
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx_s, k2, NULL), "expected int64 of the input's");
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, NULL, k2, NULL), "max_unpool3d");
    CG_ASSERT_REFUSED_LINE(cg_max_unpool2d(x, idx, P(.kernel_size = {2, 2}), NULL),
                           "max_unpool2d: input [1, 2, 2, 2, 2] has 5 dims, expected 3 "
                           "(unbatched) or 4");
    CG_ASSERT_REFUSED_LINE(
        cg_max_unpool3d(x, idx, P(.kernel_size = {2, 2, 2}, .ceil_mode = true), NULL),
        "max_unpool3d: ceil_mode, exclude_pad and divisor_override are not");
    CG_ASSERT_REFUSED_LINE(cg_max_unpool3d(x, idx, P(.kernel_size = {2, 0, 2}), NULL),
                           "max_unpool3d: kernel_size 0, stride 0");
    CG_ASSERT_REFUSED_LINE(
        cg_max_unpool3d(x, idx, P(.kernel_size = {2, 2, 2}, .dilation = {1, 2, 1}), NULL),
        "dilation 2: expected");
    cg_tensor *x1 = cg_zeros(CG_SHAPE(2, 1)), *i1 = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 1));
    CG_ASSERT_REFUSED_LINE(cg_max_unpool1d(x1, i1, P(.kernel_size = {1}, .padding = {1}), NULL),
                           "max_unpool1d: input [2, 1] gives output size -1 along spatial dim 0");
    /* the 3d pools' own refusals */
    cg_tensor *x3 = cg_zeros(CG_SHAPE(2, 3, 5));
    CG_ASSERT_REFUSED_LINE(cg_max_pool3d(x3, k2),
                           "max_pool3d: input [2, 3, 5] has 3 dims, expected 4 (unbatched) or 5");
    CG_ASSERT_REFUSED_LINE(cg_avg_pool3d(x, P(.kernel_size = {2, 2, 2}, .padding = {0, 0, 2})),
                           "avg_pool3d: padding 2 should be at most half of kernel_size 2");
    CG_ASSERT_REFUSED_LINE(cg_max_pool3d(x, P(.kernel_size = {3, 3, 3})),
                           "max_pool3d: input [1, 2, 2, 2, 2] is too small: output size 0 along "
                           "spatial dim 0");
    CG_ASSERT_REFUSED_LINE(cg_avg_pool3d(x, P(.kernel_size = {2, 2, 2}, .dilation = {1, 1, 2})),
                           "dilation 0 or 1");
    CG_ASSERT_REFUSED_LINE(cg_avg_pool3d(x, P(.kernel_size = {2, 2, 2}, .divisor_override = -1)),
                           "avg_pool3d: divisor_override is -1");
    CG_ASSERT_REFUSED_LINE(cg_adaptive_avg_pool3d(x, 2, 0, 2),
                           "adaptive_avg_pool3d: output_size 0");
    CG_ASSERT_REFUSED_LINE(cg_adaptive_max_pool3d(x3, 1, 1, 1, NULL),
                           "adaptive_max_pool3d: input [2, 3, 5] has 3 dims");
    CG_ASSERT_REFUSED_LINE(cg_max_pool3d(idx, k2), "max_pool3d: argument 1 is int64");
    cg_release_all(7, x, idx, idx32, idx_s, x3, x1, i1);
}
END_TEST

/* bfloat16 into the unpool, as into the pools: the values of the float32
 * run rounded once (exact here), the gradient bfloat16 (g read at each
 * index, the float32 run's rounded) */
START_TEST(test_max_unpool_bf16)
{
    cg_rng r = cg_rng_new(14);
    cg_tensor *idx = unpool_indices(5, &r, true);
    cg_tensor *xf = cg_randn(&r, idx->ndim, idx->shape), *xb = cg_k_to(xf, CG_BF16);
    cg_tensor *xr = cg_k_to(xb, CG_F32);
    cg_requires_grad(xb, true);
    cg_requires_grad(xr, true);
    ucase u = {3, UNPOOLS[5].o, UNPOOLS[5].size, idx};
    cg_tensor *yb = unpool_of(&u, xb), *yf = unpool_of(&u, xr);
    ck_assert_msg(yb && yb->dtype == CG_BF16, "%s", cg_last_error());
    cg_test_assert_bf16_rounded(yb, yf, "max_unpool3d");
    cg_tensor *rt = cg_randn(&r, yf->ndim, yf->shape);
    cg_tensor *lb = dot_(yb, rt), *lf = dot_(yf, rt);
    ck_assert(cg_backward(lb, NULL, false) && cg_backward(lf, NULL, false));
    ck_assert(cg_grad(xb)->dtype == CG_BF16);
    cg_test_assert_bf16_rounded(cg_grad(xb), cg_grad(xr), "max_unpool3d gradient");
    cg_release_all(9, idx, xf, xb, xr, yb, yf, rt, lb, lf);
}
END_TEST

/* ------------------------------------------------------- batch norm */
typedef struct {
    bool training;
    cg_tensor *rm, *rv;
} bn_ctx;

static cg_tensor *bn_fn(void *ctx, cg_tensor *const *in)
{
    const bn_ctx *c = ctx;
    return cg_batch_norm(in[0], c->rm, c->rv, in[1], in[2], c->training, 0.1f, 1e-5f);
}

START_TEST(test_batch_norm_gradcheck)
{
    cg_rng r = cg_rng_new(6);
    const int64_t shapes[3][4] = {{4, 3, 0, 0}, {3, 4, 5, 0}, {2, 3, 4, 3}};
    const int nds[3] = {2, 3, 4};
    for (int s = 0; s < 3; s++)
        for (int mode = 0; mode < 4; mode++) { /* training, affine */
            const int64_t C = shapes[s][1];
            cg_tensor *rm = cg_randn(&r, CG_SHAPE(C)), *rv = cg_rand(&r, CG_SHAPE(C));
            bn_ctx c = {mode & 1, (mode & 1) ? NULL : rm, (mode & 1) ? NULL : rv};
            cg_tensor *in[3] = {
                cg_requires_grad(cg_test_randn_layout(&r, nds[s], shapes[s], s == 2 ? 1 : 2), true),
                (mode & 2) ? cg_requires_grad(cg_randn(&r, CG_SHAPE(C)), true) : NULL,
                (mode & 2) ? cg_requires_grad(cg_randn(&r, CG_SHAPE(C)), true) : NULL};
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(bn_fn, &c, 3, in, NULL, &rep), "shape %d mode %d: %s", s,
                          mode, rep.message);
            cg_test_check_unread(bn_fn, &c, 3, in, "batch_norm"); /* BATCH_NORM's reads mask */
            cg_release_all(5, in[0], in[1], in[2], rm, rv);
        }
}
END_TEST

/* Training: the output and the running statistics against double */
START_TEST(test_batch_norm_running)
{
    cg_rng r = cg_rng_new(8);
    enum { N = 3, C = 2, L = 5 };
    cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(N, C, L), 1);
    cg_tensor *w = cg_randn(&r, CG_SHAPE(C)), *b = cg_randn(&r, CG_SHAPE(C));
    cg_tensor *rm = cg_randn(&r, CG_SHAPE(C)), *rv = cg_rand(&r, CG_SHAPE(C));
    float *xv = cg_test_values(x), rm0[C], rv0[C];
    memcpy(rm0, cg_data(rm), sizeof rm0);
    memcpy(rv0, cg_data(rv), sizeof rv0);
    const uint64_t v0 = cg_version(rm);
    cg_tensor *y = cg_batch_norm(x, rm, rv, w, b, true, 0.3f, 1e-3f);
    ck_assert_msg(y, "%s", cg_last_error());
    ck_assert(cg_version(rm) > v0);
    float want[N * C * L];
    for (int c = 0; c < C; c++) {
        double s = 0, q = 0;
        for (int n = 0; n < N; n++)
            for (int l = 0; l < L; l++)
                s += xv[(n * C + c) * L + l];
        const double mean = s / (N * L);
        for (int n = 0; n < N; n++)
            for (int l = 0; l < L; l++)
                q += pow(xv[(n * C + c) * L + l] - mean, 2);
        const double var = q / (N * L), uvar = q / (N * L - 1);
        ck_assert_double_eq_tol(cg_data(rm)[c], 0.7 * rm0[c] + 0.3 * mean, 1e-6);
        ck_assert_double_eq_tol(cg_data(rv)[c], 0.7 * rv0[c] + 0.3 * uvar, 1e-6);
        for (int n = 0; n < N; n++)
            for (int l = 0; l < L; l++) {
                const int i = (n * C + c) * L + l;
                want[i] =
                    (float)((xv[i] - mean) / sqrt(var + 1e-3) * cg_data(w)[c] + cg_data(b)[c]);
            }
    }
    CG_ASSERT_TENSOR(y, want, 1e-5, 1e-5);
    cg_release(y);
    /* eval: the running statistics normalise, and stay */
    float rm1[C];
    memcpy(rm1, cg_data(rm), sizeof rm1);
    y = cg_batch_norm(x, rm, rv, NULL, NULL, false, 0.3f, 1e-3f);
    for (int i = 0; i < N * C * L; i++) {
        const int c = (i / L) % C;
        want[i] = (float)((xv[i] - rm1[c]) / sqrt((double)cg_data(rv)[c] + 1e-3));
    }
    CG_ASSERT_TENSOR(y, want, 1e-5, 1e-5);
    ck_assert(!memcmp(rm1, cg_data(rm), sizeof rm1));
    free(xv);
    cg_release_all(6, y, x, w, b, rm, rv);
}
END_TEST

START_TEST(test_batch_norm_refusals)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(1, 3)), *x2 = cg_zeros(CG_SHAPE(4, 3)),
              *w = cg_ones(CG_SHAPE(2));
    cg_tensor *xb = cg_zeros_dtype(CG_BOOL, CG_SHAPE(4, 3)), *x1 = cg_zeros(CG_SHAPE(4));
    CG_ASSERT_REFUSED(!cg_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1f, 1e-5f),
                      "batch_norm: expected more than 1 value per channel when training, got "
                      "input size [1, 3]");
    CG_ASSERT_REFUSED(!cg_batch_norm(x2, NULL, NULL, w, NULL, true, 0.1f, 1e-5f),
                      "batch_norm: argument 'weight' has shape [2], expected [C] = [3]");
    CG_ASSERT_REFUSED(!cg_batch_norm(x2, NULL, NULL, NULL, NULL, false, 0.1f, 1e-5f),
                      "batch_norm: eval (training false) needs running_mean");
    CG_ASSERT_REFUSED(!cg_batch_norm(xb, NULL, NULL, NULL, NULL, true, 0.1f, 1e-5f),
                      "batch_norm: argument 'input' is bool, expected a float tensor");
    CG_ASSERT_REFUSED(!cg_batch_norm(x1, NULL, NULL, NULL, NULL, true, 0.1f, 1e-5f),
                      "expected [N, C, ...]");
    cg_batchnorm *bn = cg_batchnorm2d_new(3, NULL);
    CG_ASSERT_REFUSED(!cg_batchnorm_forward(bn, x2),
                      "BatchNorm2d: input [4, 3], expected [N, C, H, W]");
    cg_batchnorm *b1 = cg_batchnorm1d_new(2, NULL);
    CG_ASSERT_REFUSED(!cg_batchnorm_forward(b1, x2), "C = num_features = 2");
    CG_ASSERT_REFUSED(!cg_batchnorm1d_new(0, NULL), "BatchNorm1d: num_features 0");
    cg_module_free(CG_MODULE(bn));
    cg_module_free(CG_MODULE(b1));
    cg_release_all(5, x, x2, w, xb, x1);
}
END_TEST

/* The modules: names, num_batches_tracked, momentum None, eval */
START_TEST(test_batchnorm_module)
{
    cg_rng r = cg_rng_new(9);
    cg_batchnorm_opts o = cg_batchnorm_opts_default();
    o.cumulative_average = true;
    cg_batchnorm *bn = cg_batchnorm2d_new(3, &o);
    ck_assert(bn);
    const char *names[] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    cg_param_list sd = {0};
    ck_assert(cg_module_state_dict(CG_MODULE(bn), &sd));
    ck_assert_int_eq(sd.n, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(sd.items[i].name, names[i]);
    cg_param_list_free(&sd);
    double mean_sum[3] = {0};
    for (int step = 0; step < 3; step++) {
        cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 2, 2)), *y = cg_batchnorm_forward(bn, x);
        ck_assert_msg(y, "%s", cg_last_error());
        for (int c = 0; c < 3; c++) {
            double s = 0;
            for (int k = 0; k < 8; k++)
                s += cg_data(x)[(k / 4 * 3 + c) * 4 + k % 4];
            mean_sum[c] += s / 8;
        }
        cg_release_all(2, x, y);
    }
    ck_assert_int_eq(cg_data_i64(bn->num_batches_tracked)[0], 3);
    for (int c = 0; c < 3; c++) /* momentum None: the mean of the batches' means */
        ck_assert_double_eq_tol(cg_data(bn->running_mean)[c], mean_sum[c] / 3, 1e-6);
    cg_module_train(CG_MODULE(bn), false);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(1, 3, 1, 1)), *y = cg_batchnorm_forward(bn, x);
    ck_assert_msg(y, "%s", cg_last_error()); /* one value: fine in eval */
    ck_assert_int_eq(cg_data_i64(bn->num_batches_tracked)[0], 3);
    for (int c = 0; c < 3; c++)
        ck_assert_double_eq_tol(cg_data(y)[c],
                                (cg_data(x)[c] - cg_data(bn->running_mean)[c]) /
                                    sqrt(cg_data(bn->running_var)[c] + 1e-5),
                                1e-5);
    cg_release_all(2, x, y);
    cg_module_free(CG_MODULE(bn));
    /* without running statistics: the batch's in eval too, no buffers */
    o = cg_batchnorm_opts_default();
    o.track_running_stats = false;
    o.affine = false;
    bn = cg_batchnorm1d_new(2, &o);
    ck_assert(bn && CG_MODULE(bn)->n_params == 0 && !bn->running_mean);
    cg_module_train(CG_MODULE(bn), false);
    x = cg_randn(&r, CG_SHAPE(4, 2));
    y = cg_batchnorm_forward(bn, x);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_release_all(2, x, y);
    cg_module_free(CG_MODULE(bn));
}
END_TEST

/* ----------------------------------------------------------- threads */
static cg_tensor *every_op(cg_tensor *x, cg_tensor *w)
{
    /* the 3d pools over [N 8, C 64, D 10, H 4, W 36]: 512 planes, many
     * chunks for the second thread */
    cg_tensor *t[NCASES + 2], *idx = NULL, *x5 = cg_reshape(x, CG_SHAPE(8, 64, 10, 4, 36));
    for (int i = 0; i < NCASES; i++)
        t[i] = pool_of(&CASES[i], CASES[i].nd == 3 ? x5 : x);
    cg_tensor *rm = cg_zeros(CG_SHAPE(64)), *rv = cg_ones(CG_SHAPE(64));
    t[NCASES] = cg_batch_norm(x, rm, rv, w, NULL, true, 0.1f, 1e-5f);
    /* a 3d max pool undone (overlapping windows: repeated indices) */
    const cg_pool o = P(.kernel_size = {3, 2, 3}, .stride = {2, 2, 1});
    cg_tensor *m = cg_max_pool3d_with_indices(x5, o, &idx);
    t[NCASES + 1] = cg_max_unpool3d(m, idx, o, (int64_t[]){10, 4, 36});
    cg_release_all(5, rm, rv, m, idx, x5);
    return cg_test_weighted_squares(NCASES + 2, t);
}

/* every_op at nt threads: the loss, x's and w's gradients (malloc'd) */
static void run_at(int nt, float *got[3])
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(5);
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(8, 64, 40, 36), 1), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, CG_SHAPE(64)), true);
    cg_tensor *l = every_op(x, w);
    cg_test_backward_values(l, 2, (cg_tensor *[]){x, w}, got);
    cg_release_all(3, x, w, l);
}

START_TEST(test_threads_identical)
{
    const int64_t n[3] = {1, 8 * 64 * 40 * 36, 64};
    cg_test_same_bits_1_2_threads(run_at, 3, n);
}
END_TEST

static Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_pool_gradcheck);
    tcase_add_test(tc, test_pool_values);
    tcase_add_test(tc, test_pool_ties_nan);
    tcase_add_test(tc, test_pool_bf16);
    tcase_add_test(tc, test_pool_refusals);
    tcase_add_test(tc, test_pool3d_reference);
    tcase_add_test(tc, test_max_unpool_gradcheck);
    tcase_add_test(tc, test_max_unpool_reference);
    tcase_add_test(tc, test_max_unpool_refusals);
    tcase_add_test(tc, test_max_unpool_bf16);
    tcase_add_test(tc, test_batch_norm_gradcheck);
    tcase_add_test(tc, test_batch_norm_running);
    tcase_add_test(tc, test_batch_norm_refusals);
    tcase_add_test(tc, test_batchnorm_module);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {pool_suite()};
    return cg_test_run(s, 1);
}
