/* Pooling and batch normalisation (autograd/ops.h cg_max_pool1d/2d ...,
 * cg_batch_norm; nn/batchnorm.h): gradchecks of every op over its options
 * on contiguous, transposed and strided inputs; max pooling's ties and
 * NaN; batch_norm's running statistics against numbers computed here in
 * double; BatchNorm1d/2d's buffers, momentum None and train/eval; the same
 * bits at 1 and 2 threads; bfloat16; refusals in one line. PyTorch's
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
    int64_t oh, ow; /* adaptive */
} pcase;

static cg_tensor *pool_of(const pcase *c, cg_tensor *x)
{
    switch (c->kind) {
    case MAX: return c->nd == 1 ? cg_max_pool1d(x, c->o) : cg_max_pool2d(x, c->o);
    case AVG: return c->nd == 1 ? cg_avg_pool1d(x, c->o) : cg_avg_pool2d(x, c->o);
    case AMAX:
        return c->nd == 1 ? cg_adaptive_max_pool1d(x, c->oh, NULL)
                          : cg_adaptive_max_pool2d(x, c->oh, c->ow, NULL);
    default:
        return c->nd == 1 ? cg_adaptive_avg_pool1d(x, c->oh)
                          : cg_adaptive_avg_pool2d(x, c->oh, c->ow);
    }
}

static cg_tensor *pool_fn(void *ctx, cg_tensor *const *in) { return pool_of(ctx, in[0]); }

#define P(...) ((cg_pool){__VA_ARGS__})
static const pcase CASES[] = {
    {"max1d k3", MAX, 1, P(.kernel_size = {3}), 0, 0},
    {"max1d k3 s2 p1 d2 ceil", MAX, 1,
     P(.kernel_size = {3}, .stride = {2}, .padding = {1}, .dilation = {2}, .ceil_mode = true), 0,
     0},
    {"max2d k2", MAX, 2, P(.kernel_size = {2, 2}), 0, 0},
    {"max2d k3x2 s2x1 p1 ceil", MAX, 2,
     P(.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .ceil_mode = true), 0, 0},
    {"max2d k2 d2", MAX, 2, P(.kernel_size = {2, 2}, .dilation = {2, 1}, .stride = {1, 1}), 0, 0},
    {"avg1d k3 s2 p1", AVG, 1, P(.kernel_size = {3}, .stride = {2}, .padding = {1}), 0, 0},
    {"avg1d k2 ceil excl", AVG, 1,
     P(.kernel_size = {2}, .ceil_mode = true, .exclude_pad = true, .padding = {1}), 0, 0},
    {"avg2d k3 s2 p1 ceil", AVG, 2,
     P(.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true), 0, 0},
    {"avg2d k3x2 p1 excl", AVG, 2,
     P(.kernel_size = {3, 2}, .padding = {1, 1}, .exclude_pad = true, .stride = {1, 2}), 0, 0},
    {"avg2d k2 divisor 3", AVG, 2, P(.kernel_size = {2, 2}, .divisor_override = 3), 0, 0},
    {"adaptive max1d 4", AMAX, 1, P(.ceil_mode = false), 4, 0},
    {"adaptive max2d 3x2", AMAX, 2, P(.ceil_mode = false), 3, 2},
    {"adaptive avg1d 3", AAVG, 1, P(.ceil_mode = false), 3, 0},
    {"adaptive avg2d 4x3", AAVG, 2, P(.ceil_mode = false), 4, 3},
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
                int64_t shape[4] = {2, 3, 7, 6};
                const int nd = c->nd + 1 + batched;
                int64_t *s = shape + 4 - nd;
                if (c->nd == 1)
                    s[nd - 1] = 9;
                cg_tensor *x = cg_test_randn_layout(&r, nd, s, layout);
                if (c->kind == MAX || c->kind == AMAX)
                    distinct_(x, &r);
                cg_requires_grad(x, true);
                cg_gradcheck_report rep;
                const bool ok = cg_gradcheck(pool_fn, (void *)c, 1, &x, NULL, &rep);
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
    cg_tensor *t[NCASES + 1];
    for (int i = 0; i < NCASES; i++)
        t[i] = pool_of(&CASES[i], x);
    cg_tensor *rm = cg_zeros(CG_SHAPE(64)), *rv = cg_ones(CG_SHAPE(64));
    t[NCASES] = cg_batch_norm(x, rm, rv, w, NULL, true, 0.1f, 1e-5f);
    cg_release_all(2, rm, rv);
    return cg_test_weighted_squares(NCASES + 1, t);
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
