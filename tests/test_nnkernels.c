/* Suite "nnkernels": softmax / log_softmax, cross-entropy, layer norm,
 * RMS norm and dropout kernels (core/softmax.c, core/loss.c, core/norm.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/vmath.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------- helpers */
static double *to_double(const float *v, int64_t n)
{
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        d[i] = v[i];
    return d;
}

static void split3(const cg_tensor *t, int dim, int64_t *outer, int64_t *D, int64_t *inner)
{
    int d = dim < 0 ? dim + t->ndim : dim;
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < d; i++)
        *outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++)
        *inner *= t->shape[i];
    *D = t->shape[d];
}

/* Reference softmax / log-softmax in double over [outer, D, inner]. */
static void ref_softmax(const double *x, double *y, int64_t outer, int64_t D, int64_t inner,
                        bool logsm)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            const double *xr = x + o * D * inner + c;
            double *yr = y + o * D * inner + c;
            double mx = -INFINITY, s = 0;
            for (int64_t j = 0; j < D; j++)
                mx = fmax(mx, xr[j * inner]);
            for (int64_t j = 0; j < D; j++)
                s += exp(xr[j * inner] - mx);
            for (int64_t j = 0; j < D; j++)
                yr[j * inner] = logsm ? xr[j * inner] - mx - log(s) : exp(xr[j * inner] - mx) / s;
        }
}

static void assert_close_d(const cg_tensor *t, const double *expect, double atol, double rtol)
{
    int64_t n = cg_numel(t);
    float *e = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        e[i] = (float)expect[i];
    CG_ASSERT_TENSOR(t, e, atol, rtol);
    free(e);
}

/* A 3-D [2,3,4]-shaped non-contiguous view: a permuted [4,2,3] tensor. */
static cg_tensor *noncontig3(cg_rng *r, float scale)
{
    cg_tensor *base = cg_randn(r, CG_SHAPE(4, 2, 3));
    for (int i = 0; i < 24; i++)
        cg_data(base)[i] *= scale;
    cg_tensor *v = cg_view_permute(base, (const int[]){1, 2, 0});
    cg_release(base);
    ck_assert(!cg_is_contiguous(v));
    return v;
}

static bool bit_equal(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || !cg_same_shape(a, b))
        return false;
    float *x = cg_test_values(a), *y = cg_test_values(b);
    bool eq = memcmp(x, y, (size_t)cg_numel(a) * sizeof(float)) == 0;
    free(x);
    free(y);
    return eq;
}

/* --------------------------------------------------------- softmax */
START_TEST(test_softmax_dims)
{
    cg_rng r = cg_rng_new(1);
    cg_tensor *x = noncontig3(&r, 3.0f);
    float *xv = cg_test_values(x);
    double *xd = to_double(xv, 24), y[24];
    int dims[] = {0, 1, 2, -1, -3};
    for (int k = 0; k < 5; k++) {
        for (int logsm = 0; logsm < 2; logsm++) {
            int64_t o, D, in;
            split3(x, dims[k], &o, &D, &in);
            ref_softmax(xd, y, o, D, in, logsm);
            cg_tensor *out = logsm ? cg_k_log_softmax(x, dims[k]) : cg_k_softmax(x, dims[k]);
            ck_assert_ptr_nonnull(out);
            ck_assert(cg_is_contiguous(out) && cg_same_shape(out, x));
            assert_close_d(out, y, 1e-6, 1e-5);
            cg_release(out);
        }
    }
    free(xv);
    free(xd);
    cg_release(x);
}
END_TEST

START_TEST(test_softmax_layouts)
{
    /* transposed, step-2 strided and broadcast (stride 0) inputs */
    cg_rng r = cg_rng_new(2);
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(5, 7), kind);
        float *xv = cg_test_values(x);
        double *xd = to_double(xv, 35), y[35];
        for (int dim = 0; dim < 2; dim++) {
            int64_t o, D, in;
            split3(x, dim, &o, &D, &in);
            ref_softmax(xd, y, o, D, in, false);
            cg_tensor *out = cg_k_softmax(x, dim);
            assert_close_d(out, y, 1e-6, 1e-5);
            cg_release(out);
        }
        free(xv);
        free(xd);
        cg_release(x);
    }
}
END_TEST

START_TEST(test_softmax_extreme)
{
    const float NI = -INFINITY;
    float v[] = {1e4f,  1e4f - 1.0f,  -1e4f, 0.0f,  /* large scale */
                 -1e4f, -1e4f + 2.0f, -1e4f, -1e4f, /* large negative */
                 1.0f,  NI,           2.0f,  NI,    /* -inf mask */
                 NI,    NI,           NI,    NI};   /* all masked */
    cg_tensor *x = cg_from_data(CG_SHAPE(4, 4), v);
    double xd[16], y[16];
    for (int i = 0; i < 16; i++)
        xd[i] = v[i];
    for (int logsm = 0; logsm < 2; logsm++) {
        ref_softmax(xd, y, 4, 4, 1, logsm);
        cg_tensor *out = logsm ? cg_k_log_softmax(x, -1) : cg_k_softmax(x, -1);
        float *o = cg_test_values(out);
        for (int i = 0; i < 12; i++) {
            if (isinf(y[i]))
                ck_assert(isinf(o[i]) && o[i] < 0);
            else
                ck_assert_msg(fabs(o[i] - y[i]) <= 1e-6 + 1e-5 * fabs(y[i]), "i %d: %g vs %g", i,
                              o[i], y[i]);
        }
        for (int i = 12; i < 16; i++)
            ck_assert_msg(isnan(o[i]), "all -inf row must give NaN (got %g)", o[i]);
        free(o);
        cg_release(out);
    }
    /* Along dim 0 of the transposed view: same rows as columns. */
    cg_tensor *xt = cg_view_transpose(x, 0, 1);
    cg_tensor *a = cg_k_softmax(xt, 0), *b = cg_k_softmax(x, 1);
    cg_tensor *at = cg_view_transpose(a, 0, 1);
    ck_assert(bit_equal(at, b));
    cg_release_all(5, x, xt, a, b, at);

    /* A NaN in a row makes the row NaN; a +inf makes it NaN (PyTorch). */
    cg_tensor *z = cg_from_data(CG_SHAPE(2, 2), (float[]){NAN, 1.0f, INFINITY, 1.0f});
    cg_tensor *s = cg_k_softmax(z, 1);
    float *sv = cg_test_values(s);
    for (int i = 0; i < 4; i++)
        ck_assert(isnan(sv[i]));
    free(sv);
    cg_release_all(2, z, s);
}
END_TEST

START_TEST(test_softmax_backward)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = noncontig3(&r, 2.0f);
    cg_tensor *g = noncontig3(&r, 1.0f);
    float *xv = cg_test_values(x), *gv = cg_test_values(g);
    double *xd = to_double(xv, 24), *gd = to_double(gv, 24);
    int dims[] = {0, 1, -1};
    for (int k = 0; k < 3; k++) {
        for (int logsm = 0; logsm < 2; logsm++) {
            int64_t o, D, in;
            split3(x, dims[k], &o, &D, &in);
            cg_tensor *y = logsm ? cg_k_log_softmax(x, dims[k]) : cg_k_softmax(x, dims[k]);
            /* non-contiguous y too: a transposed copy viewed back */
            cg_tensor *yt = cg_view_transpose(y, 0, 2);
            cg_tensor *yc = cg_k_clone(yt);
            cg_tensor *yv = cg_view_transpose(yc, 0, 2);
            cg_tensor *dx = logsm ? cg_k_log_softmax_backward(yv, g, dims[k])
                                  : cg_k_softmax_backward(yv, g, dims[k]);
            ck_assert_ptr_nonnull(dx);
            /* finite differences of L = sum(g * f(x)) with the double reference */
            double fd[24], yp[24], ym[24], xs[24];
            memcpy(xs, xd, sizeof xs);
            for (int i = 0; i < 24; i++) {
                double h = 1e-6;
                xs[i] = xd[i] + h;
                ref_softmax(xs, yp, o, D, in, logsm);
                xs[i] = xd[i] - h;
                ref_softmax(xs, ym, o, D, in, logsm);
                xs[i] = xd[i];
                double lp = 0, lm = 0;
                for (int j = 0; j < 24; j++) {
                    lp += gd[j] * yp[j];
                    lm += gd[j] * ym[j];
                }
                fd[i] = (lp - lm) / (2 * h);
            }
            assert_close_d(dx, fd, 1e-5, 1e-4);
            cg_release_all(5, y, yt, yc, yv, dx);
        }
    }
    free(xv);
    free(gv);
    free(xd);
    free(gd);
    cg_release_all(2, x, g);
}
END_TEST

START_TEST(test_softmax_backward_masked)
{
    /* -inf logits: softmax 0 there, gradient 0; log_softmax -inf, grad = g */
    float v[] = {1.0f, -INFINITY, 0.5f};
    cg_tensor *x = cg_from_data(CG_SHAPE(1, 3), v);
    cg_tensor *g = cg_from_data(CG_SHAPE(1, 3), (float[]){0.3f, 0.7f, -0.2f});
    cg_tensor *y = cg_k_softmax(x, 1), *ly = cg_k_log_softmax(x, 1);
    cg_tensor *dx = cg_k_softmax_backward(y, g, 1), *ldx = cg_k_log_softmax_backward(ly, g, 1);
    float *d = cg_test_values(dx), *ld = cg_test_values(ldx);
    ck_assert(d[1] == 0.0f && isfinite(d[0]) && isfinite(d[2]));
    ck_assert_float_eq_tol(ld[1], 0.7f, 1e-7f);
    double p0 = 1.0 / (1.0 + exp(-0.5)), p2 = 1 - p0, s = 0.3 + 0.7 - 0.2;
    ck_assert_float_eq_tol(ld[0], 0.3 - p0 * s, 1e-6);
    ck_assert_float_eq_tol(ld[2], -0.2 - p2 * s, 1e-6);
    double sgy = 0.3 * p0 - 0.2 * p2;
    ck_assert_float_eq_tol(d[0], p0 * (0.3 - sgy), 1e-6);
    ck_assert_float_eq_tol(d[2], p2 * (-0.2 - sgy), 1e-6);
    free(d);
    free(ld);
    cg_release_all(6, x, g, y, ly, dx, ldx);
}
END_TEST

START_TEST(test_softmax_scalar_and_empty)
{
    cg_tensor *s = cg_scalar(3.0f);
    cg_tensor *y = cg_k_softmax(s, 0), *ly = cg_k_log_softmax(s, -1);
    ck_assert_float_eq(cg_item(y), 1.0f);
    ck_assert_float_eq(cg_item(ly), 0.0f);
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 3));
    cg_tensor *ye = cg_k_softmax(e, 1);
    ck_assert_ptr_nonnull(ye);
    ck_assert_int_eq(cg_numel(ye), 0);
    cg_release_all(5, s, y, ly, e, ye);
}
END_TEST

/* Softmax along a dim with more than one block of columns after it (the
 * block kernel's inner > 64: blocks of 64, 64 and 22 columns, and 750):
 * every column, forward and backward, against double (the threads test's
 * [64, 300, 5] compares thread counts only, and every reference case had
 * inner <= 35). Then [3, 2, 128]: inner 128 and 256, whole blocks only,
 * with more than one outer index (a count of blocks a line rounded up
 * wrongly left the later lines unwritten). */
START_TEST(test_softmax_wide_inner)
{
    cg_rng r = cg_rng_new(6);
    for (int shape = 0; shape < 2; shape++) {
        const int64_t A = 3, B = shape ? 2 : 5, C = shape ? 128 : 150, N = A * B * C;
        cg_tensor *x = cg_randn(&r, CG_SHAPE(A, B, C));
        cg_tensor *g = cg_randn(&r, CG_SHAPE(A, B, C));
        double *xd = to_double(cg_data(x), N), *gd = to_double(cg_data(g), N);
        double *y = malloc((size_t)N * sizeof *y), *dx = malloc((size_t)N * sizeof *dx);
        for (int dim = 0; dim < 2; dim++) {
            int64_t o, D, in;
            split3(x, dim, &o, &D, &in);
            ck_assert_int_gt(in, 64);
            for (int logsm = 0; logsm < 2; logsm++) {
                ref_softmax(xd, y, o, D, in, logsm);
                /* softmax: dx = y (g - sum g y); log_softmax: dx = g - exp(y) sum g */
                for (int64_t a = 0; a < o; a++)
                    for (int64_t c = 0; c < in; c++) {
                        const int64_t base = a * D * in + c;
                        double s = 0;
                        for (int64_t j = 0; j < D; j++)
                            s += logsm ? gd[base + j * in] : gd[base + j * in] * y[base + j * in];
                        for (int64_t j = 0; j < D; j++) {
                            const int64_t i = base + j * in;
                            dx[i] = logsm ? gd[i] - exp(y[i]) * s : y[i] * (gd[i] - s);
                        }
                    }
                cg_tensor *out = logsm ? cg_k_log_softmax(x, dim) : cg_k_softmax(x, dim);
                cg_tensor *d = logsm ? cg_k_log_softmax_backward(out, g, dim)
                                     : cg_k_softmax_backward(out, g, dim);
                ck_assert(out && d);
                assert_close_d(out, y, 1e-6, 1e-5);
                assert_close_d(d, dx, 1e-6, 1e-5);
                cg_release_all(2, out, d);
            }
        }
        free(xd);
        free(gd);
        free(y);
        free(dx);
        cg_release_all(2, x, g);
    }
}
END_TEST

/* The largest logit last along the dim, far above the others: a maximum
 * that left out the last element made exp overflow there (softmax NaN,
 * log_softmax -inf), in the row kernel (dim last) and in the block kernel
 * (a dim with elements after it) alike. The block kernel's maximum over
 * all but the last element survived every suite (round twenty-three). */
START_TEST(test_softmax_max_last)
{
    enum { D = 3, IN = 2, N = D * IN };
    const float v[N] = {0.0f, 1.0f, -1.0f, 2.0f, 100.0f, 200.0f};
    double xd[N], y[N];
    for (int i = 0; i < N; i++)
        xd[i] = v[i];
    cg_tensor *x = cg_from_data(CG_SHAPE(D, IN), v); /* dim 0: the block kernel */
    cg_tensor *xv = cg_view_transpose(x, 0, 1), *xt = cg_k_contiguous(xv); /* [IN, D] */
    ck_assert_ptr_nonnull(xt);
    for (int logsm = 0; logsm < 2; logsm++) {
        ref_softmax(xd, y, 1, D, IN, logsm);
        cg_tensor *out = logsm ? cg_k_log_softmax(x, 0) : cg_k_softmax(x, 0);
        assert_close_d(out, y, 1e-6, 1e-5);
        /* the same values along the last dim: the row kernel */
        cg_tensor *out_t = logsm ? cg_k_log_softmax(xt, 1) : cg_k_softmax(xt, 1);
        cg_tensor *back = cg_view_transpose(out_t, 0, 1);
        assert_close_d(back, y, 1e-6, 1e-5);
        cg_release_all(3, out, out_t, back);
    }
    cg_release_all(3, x, xv, xt);
}
END_TEST

START_TEST(test_softmax_threads)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(64, 300, 5));
    cg_tensor *g = cg_randn(&r, CG_SHAPE(64, 300, 5));
    int dims[] = {0, 1, 2};
    for (int k = 0; k < 3; k++) {
        cg_tensor *out[2][3];
        for (int t = 0; t < 2; t++) {
            cg_set_num_threads(t + 1);
            out[t][0] = cg_k_softmax(x, dims[k]);
            out[t][1] = cg_k_log_softmax(x, dims[k]);
            out[t][2] = cg_k_softmax_backward(out[t][0], g, dims[k]);
        }
        cg_set_num_threads(0);
        for (int j = 0; j < 3; j++) {
            ck_assert(bit_equal(out[0][j], out[1][j]));
            cg_release_all(2, out[0][j], out[1][j]);
        }
    }
    cg_release_all(2, x, g);
}
END_TEST

/* Rows of a beam search's length (the 16-lane exponentials and a tail of
 * 5): the same bits as the columns of the transposed view (the block
 * kernel), within float rounding of the double reference, and masked
 * (-inf) entries, a NaN and +inf handled as in short rows. */
START_TEST(test_softmax_long_rows)
{
    cg_rng r = cg_rng_new(5);
    const int64_t R = 3, D = 4005;
    cg_tensor *x = cg_randn(&r, CG_SHAPE(R, D));
    float *xv = cg_data(x);
    for (int64_t i = 0; i < R * D; i++)
        xv[i] *= 6.0f;
    for (int64_t j = 0; j < D; j += 7)
        xv[D + j] = -INFINITY; /* row 1: every 7th logit masked */
    double *xd = to_double(xv, R * D), *y = malloc((size_t)(R * D) * sizeof *y);
    cg_tensor *xt = cg_view_transpose(x, 0, 1); /* [D, R]: softmax over dim 0 */
    for (int logsm = 0; logsm < 2; logsm++) {
        ref_softmax(xd, y, R, D, 1, logsm);
        cg_tensor *rows = logsm ? cg_k_log_softmax(x, 1) : cg_k_softmax(x, 1);
        cg_tensor *cols = logsm ? cg_k_log_softmax(xt, 0) : cg_k_softmax(xt, 0);
        cg_tensor *colst = cg_view_transpose(cols, 0, 1);
        ck_assert(bit_equal(rows, colst));
        const float *o = cg_data(rows);
        for (int64_t i = 0; i < R * D; i++) {
            if (isinf(y[i]))
                ck_assert(isinf(o[i]) && o[i] < 0);
            else
                ck_assert_msg(fabs(o[i] - y[i]) <= 1e-7 + 2e-6 * fabs(y[i]),
                              "logsm %d, element %lld: %.9g vs %.9g", logsm, (long long)i, o[i],
                              y[i]);
        }
        cg_release_all(3, rows, cols, colst);
    }
    /* a NaN (and, in another row, +inf) past the 16-lane part makes its row NaN */
    xv[D - 2] = NAN;
    xv[2 * D + 20] = INFINITY;
    cg_tensor *s = cg_k_log_softmax(x, 1);
    const float *sv = cg_data(s);
    for (int64_t j = 0; j < D; j++)
        ck_assert(isnan(sv[j]) && isnan(sv[2 * D + j]));
    for (int64_t j = 0; j < D; j++) /* row 1: -inf where masked, finite elsewhere */
        ck_assert(j % 7 == 0 ? isinf(sv[D + j]) && sv[D + j] < 0 : isfinite(sv[D + j]));
    free(xd);
    free(y);
    cg_release_all(3, x, xt, s);
}
END_TEST

START_TEST(test_softmax_errors)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3));
    cg_tensor *g = cg_zeros(CG_SHAPE(3, 2));
    CG_ASSERT_FAILS(cg_k_softmax(x, 2), "dim 2");
    CG_ASSERT_FAILS(cg_k_log_softmax(x, -3), "softmax");
    CG_ASSERT_FAILS(cg_k_softmax_backward(x, g, 1), "[2, 3]");
    CG_ASSERT_FAILS(cg_k_log_softmax_backward(x, g, 1), "[3, 2]");
    /* NULL input: NULL without a new message */
    cg_set_error("earlier");
    ck_assert_ptr_null(cg_k_softmax(NULL, 0));
    ck_assert_str_eq(cg_last_error(), "earlier");
    ck_assert_ptr_null(cg_k_softmax_backward(NULL, g, 0));
    ck_assert_str_eq(cg_last_error(), "earlier");
    cg_clear_error();
    /* with no earlier error a NULL input is named (the backwards said nothing) */
    CG_ASSERT_FAILS(cg_k_softmax_backward(NULL, g, 0), "softmax_backward: input is NULL");
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_softmax_backward(x, NULL, 0), "softmax_backward: input is NULL");
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_log_softmax_backward(NULL, g, 0), "log_softmax_backward: input is NULL");
    cg_clear_error();
    cg_release_all(2, x, g);
}
END_TEST

/* ---------------------------------------------------- cross-entropy */
/* Each test runs in both of the loss's precision policies (core/loss.c):
 * _i = 0 fp32 (double lanes, pinned bits), 1 bf16 autocast (float lanes,
 * one exponential an element); the same bounds hold for both. */
static void ce_policy(int i) { cg_set_matmul_precision(i ? CG_PRECISION_BF16 : CG_PRECISION_FP32); }
static void ce_fp32(void) { ce_policy(0); }

/* Logits and expected values computed once with PyTorch 1.13
 * (F.cross_entropy, float64), see the report of this suite. */
static cg_tensor *ce_logits(void)
{
    float v[20];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            v[i * 4 + j] = (float)(((i * 7 + j * 3) % 11 - 5) * 0.37);
    v[3 * 4 + 1] = 12.0f;
    return cg_from_data(CG_SHAPE(5, 4), v);
}

static void ce_case(const int64_t *t, int64_t ii, float ls, double loss, const float *grad)
{
    cg_tensor *x = ce_logits();
    /* also through a non-contiguous view of the same values */
    cg_tensor *tr = cg_view_transpose(x, 0, 1);
    cg_tensor *trc = cg_k_clone(tr);
    cg_tensor *xv = cg_view_transpose(trc, 0, 1); /* [5,4], strides (1,5) */
    ck_assert(!cg_is_contiguous(xv));
    for (int k = 0; k < 2; k++) {
        const cg_tensor *in = k ? xv : x;
        cg_tensor *lse = NULL;
        cg_tensor *l =
            cg_k_cross_entropy(in, cg_test_ids(5, t), ii, ls, CG_REDUCTION_MEAN, &lse, NULL);
        ck_assert_ptr_nonnull(l);
        ck_assert_int_eq(l->ndim, 0);
        ck_assert_ptr_nonnull(lse);
        ck_assert_int_eq(cg_numel(lse), 5);
        float got = cg_item(l);
        if (isnan(loss))
            ck_assert_msg(isnan(got), "expected NaN, got %g", got);
        else
            ck_assert_msg(fabs(got - loss) <= 1e-6 * fabs(loss) + 1e-6, "loss %.9g vs %.9g", got,
                          loss);
        cg_tensor *dx = cg_k_cross_entropy_backward(in, cg_test_ids(5, t), ii, ls,
                                                    CG_REDUCTION_MEAN, lse, cg_test_scalar(1.0f));
        CG_ASSERT_TENSOR(dx, grad, 1e-6, 1e-5);
        cg_tensor *dx2 = cg_k_cross_entropy_backward(in, cg_test_ids(5, t), ii, ls,
                                                     CG_REDUCTION_MEAN, NULL, cg_test_scalar(2.0f));
        float g2[20];
        for (int i = 0; i < 20; i++)
            g2[i] = 2 * grad[i];
        CG_ASSERT_TENSOR(dx2, g2, 2e-6, 1e-5);
        cg_release_all(4, l, lse, dx, dx2);
    }
    cg_release_all(4, x, tr, trc, xv);
}

START_TEST(test_ce_plain)
{
    ce_policy(_i);
    const int64_t t[] = {0, 3, -100, 1, 2};
    const float g[] = {-0.243929096f,
                       0.0184212974f,
                       0.0558968185f,
                       0.16961098f,
                       0.0535479882f,
                       0.162483788f,
                       0.00841973393f,
                       -0.22445151f,
                       0,
                       0,
                       0,
                       0,
                       9.76839657e-06f,
                       -1.59649895e-05f,
                       1.535955e-06f,
                       4.66063794e-06f,
                       0.0535479882f,
                       0.162483788f,
                       -0.241580266f,
                       0.0255484903f};
    ce_case(t, -100, 0.0f, 2.3474456739159555, g);
}
END_TEST

START_TEST(test_ce_label_smoothing)
{
    ce_policy(_i);
    const int64_t t[] = {0, 3, -100, 1, 2};
    const float g[] = {-0.225179096f,
                       0.0121712974f,
                       0.0496468185f,
                       0.16336098f,
                       0.0472979882f,
                       0.156233788f,
                       0.00216973393f,
                       -0.20570151f,
                       0,
                       0,
                       0,
                       0,
                       -0.0062402316f,
                       0.018734035f,
                       -0.00624846405f,
                       -0.00624533936f,
                       0.0472979882f,
                       0.156233788f,
                       -0.222830266f,
                       0.0192984903f};
    ce_case(t, -100, 0.1f, 2.4660706739159552, g);
}
END_TEST

START_TEST(test_ce_pad_ignore)
{
    ce_policy(_i);
    /* ignore_index 0 (a pad id inside [0, C)): rows with target 0 ignored */
    const int64_t t[] = {0, 3, 0, 1, 2};
    const float g[] = {0,
                       0,
                       0,
                       0,
                       0.0630639843f,
                       0.208311717f,
                       0.00289297857f,
                       -0.27426868f,
                       0,
                       0,
                       0,
                       0,
                       -0.0083203088f,
                       0.0249787133f,
                       -0.00833128539f,
                       -0.00832711915f,
                       0.0630639843f,
                       0.208311717f,
                       -0.297107021f,
                       0.0257313204f};
    ce_case(t, 0, 0.1f, 2.1042764140522916, g);
}
END_TEST

START_TEST(test_ce_all_ignored)
{
    ce_policy(_i);
    const int64_t t[] = {-100, -100, -100, -100, -100};
    const float g[20] = {0};
    ce_case(t, -100, 0.1f, NAN, g);
    ce_case(t, -100, 0.0f, NAN, g);
}
END_TEST

/* nll_loss reads logp through its strides (a transposed and a step-2
 * view here): a mutant that took the column stride as 1 was caught by
 * PyTorch's cases only (round twenty-three). Against double. */
START_TEST(test_nll_strided)
{
    cg_rng r = cg_rng_new(23);
    enum { N = 5, C = 7 };
    const int64_t t[N] = {6, -100, 0, 3, 5};
    cg_tensor *base = cg_randn(&r, CG_SHAPE(C, 2 * N));
    cg_tensor *tr = cg_view_transpose(base, 0, 1);    /* [2N, C], strides [1, 2N] */
    cg_tensor *v = cg_view_slice(tr, 0, 0, 2 * N, 2); /* [N, C], strides [2, 2N] */
    cg_tensor *views[2] = {cg_view_slice(tr, 0, 0, N, 1), v};
    for (int k = 0; k < 2; k++) {
        ck_assert(!cg_is_contiguous(views[k]));
        float *lv = cg_test_values(views[k]);
        double s = 0;
        int kept = 0;
        for (int i = 0; i < N; i++)
            if (t[i] != -100) {
                s -= lv[i * C + t[i]];
                kept++;
            }
        cg_tensor *l = cg_k_nll_loss(views[k], cg_test_ids(N, t), -100, CG_REDUCTION_MEAN);
        ck_assert_ptr_nonnull(l);
        ck_assert_msg(fabs(cg_item(l) - s / kept) <= 1e-6 * fabs(s / kept) + 1e-7,
                      "view %d: nll %.9g vs %.9g", k, (double)cg_item(l), s / kept);
        free(lv);
        cg_release(l);
    }
    cg_release_all(4, base, tr, v, views[0]);
}
END_TEST

START_TEST(test_ce_extreme)
{
    ce_policy(_i);
    /* PyTorch: loss 2502.50341796875, grad [0.5, 0, -0.5, 0.4966536, -0.4966536, 0] */
    cg_tensor *x =
        cg_from_data(CG_SHAPE(2, 3), (float[]){1e4f, -1e4f, 0.5e4f, 3.0f, -2.0f, -INFINITY});
    const int64_t t[] = {2, 1};
    cg_tensor *lse = NULL;
    cg_tensor *l =
        cg_k_cross_entropy(x, cg_test_ids(2, t), -100, 0.0f, CG_REDUCTION_MEAN, &lse, NULL);
    ck_assert_float_eq_tol(cg_item(l), 2502.50341796875f, 1e-3f);
    cg_tensor *dx = cg_k_cross_entropy_backward(x, cg_test_ids(2, t), -100, 0.0f, CG_REDUCTION_MEAN,
                                                lse, cg_test_scalar(1.0f));
    CG_ASSERT_TENSOR(
        dx, ((const float[]){0.5f, 0.0f, -0.5f, 0.49665358662605286f, -0.49665358662605286f, 0.0f}),
        1e-6, 1e-5);
    cg_release_all(3, x, lse, l);
    cg_release(dx);
}
END_TEST

START_TEST(test_ce_vs_double)
{
    ce_policy(_i);
    /* random logits with smoothing and ignored rows: loss and gradient
     * within float32's bounds of a double reference, for a few classes
     * and for the translator's 4,000 (whole 16-lane blocks and a tail) */
    const int64_t shapes[][2] = {{37, 11}, {23, 4000}, {9, 4003}};
    cg_rng r = cg_rng_new(5);
    for (size_t s = 0; s < 3; s++) {
        const int64_t N = shapes[s][0], C = shapes[s][1];
        cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(N, C), 1);
        float *xv = cg_test_values(x);
        int64_t *t = malloc((size_t)N * sizeof *t);
        double *grad = malloc((size_t)(N * C) * sizeof *grad);
        for (int64_t i = 0; i < N; i++)
            t[i] = i % 5 == 0 ? -1 : (int64_t)cg_rng_below(&r, (uint64_t)C);
        double ls = 0.25, tot = 0;
        int kept = 0;
        for (int64_t i = 0; i < N; i++)
            kept += t[i] != -1;
        for (int64_t i = 0; i < N; i++) {
            const float *xr = xv + i * C;
            double mx = -INFINITY, sm = 0, sx = 0;
            for (int64_t j = 0; j < C; j++)
                mx = fmax(mx, xr[j]);
            for (int64_t j = 0; j < C; j++) {
                sm += exp(xr[j] - mx);
                sx += xr[j];
            }
            double lse = mx + log(sm);
            for (int64_t j = 0; j < C; j++)
                grad[i * C + j] = 0;
            if (t[i] == -1)
                continue;
            tot += (1 - ls) * (lse - xr[t[i]]) + ls * (lse - sx / C);
            for (int64_t j = 0; j < C; j++)
                grad[i * C + j] = (exp(xr[j] - lse) - ls / C - (j == t[i] ? 1 - ls : 0)) / kept;
        }
        cg_tensor *l =
            cg_k_cross_entropy(x, cg_test_ids(N, t), -1, (float)ls, CG_REDUCTION_MEAN, NULL, NULL);
        ck_assert_float_eq_tol(cg_item(l), tot / kept, 1e-5);
        cg_tensor *dx = cg_k_cross_entropy_backward(x, cg_test_ids(N, t), -1, (float)ls,
                                                    CG_REDUCTION_MEAN, NULL, cg_test_scalar(1.0f));
        assert_close_d(dx, grad, 1e-9, 1e-5);
        free(xv);
        free(t);
        free(grad);
        cg_release_all(3, x, l, dx);
    }
}
END_TEST

START_TEST(test_ce_threads)
{
    ce_policy(_i);
    cg_rng r = cg_rng_new(6);
    const int64_t N = 3000, C = 50;
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3000, 50));
    int64_t *t = malloc((size_t)N * sizeof(int64_t));
    for (int64_t i = 0; i < N; i++)
        t[i] = i % 7 == 0 ? -100 : (int64_t)cg_rng_below(&r, (uint64_t)C);
    cg_tensor *l[2], *dx[2];
    for (int k = 0; k < 2; k++) {
        cg_set_num_threads(k + 1);
        l[k] = cg_k_cross_entropy(x, cg_test_ids(N, t), -100, 0.1f, CG_REDUCTION_MEAN, NULL, NULL);
        dx[k] = cg_k_cross_entropy_backward(x, cg_test_ids(N, t), -100, 0.1f, CG_REDUCTION_MEAN,
                                            NULL, cg_test_scalar(1.0f));
    }
    cg_set_num_threads(0);
    ck_assert(bit_equal(l[0], l[1]));
    ck_assert(bit_equal(dx[0], dx[1]));
    free(t);
    cg_release_all(5, x, l[0], l[1], dx[0], dx[1]);
}
END_TEST

/* Rows whose spread is at the edge of the fast exponential's range (86
 * below the row's maximum, core/vmath.h ew_expf16_normal), far beyond it,
 * with -inf or a NaN: the fp32 forward's gradient (which knows the row's
 * minimum) has the backward's bits (which takes the general path), and a
 * NaN still reaches the loss and the row's gradient. */
START_TEST(test_ce_exp_range)
{
    ce_policy(_i);
    const float spread[] = {85.9f, 85.99999f, 86.0f, 86.00001f, 86.1f, 150.0f, INFINITY, NAN};
    const int64_t N = 8, C = 37;
    float v[8 * 37];
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < C; j++)
            v[r * C + j] = 3.0f - (float)((j * 7) % C) / (float)(C - 1) * 2.0f;
    for (int64_t r = 0; r < N; r++) /* one element at the spread's end, in a tail or a block */
        v[r * C + (r % 2 ? 35 : 4)] = isnan(spread[r]) ? NAN : 3.0f - spread[r];
    cg_tensor *x = cg_from_data(CG_SHAPE(8, 37), v);
    int64_t t[8];
    for (int64_t r = 0; r < N; r++)
        t[r] = r % C;
    for (int th = 1; th <= 2; th++) {
        cg_set_num_threads(th);
        cg_tensor *lse = NULL, *g = NULL;
        cg_tensor *l =
            cg_k_cross_entropy(x, cg_test_ids(N, t), -100, 0.1f, CG_REDUCTION_MEAN, &lse, &g);
        cg_tensor *dx = cg_k_cross_entropy_backward(x, cg_test_ids(N, t), -100, 0.1f,
                                                    CG_REDUCTION_MEAN, lse, cg_test_scalar(1.0f));
        ck_assert(bit_equal(g, dx));
        ck_assert(isnan(cg_item(l)));
        for (int64_t r = 0; r < N; r++) {
            bool row_nan = false;
            for (int64_t j = 0; j < C; j++)
                row_nan |= isnan(cg_data(g)[r * C + j]);
            ck_assert_msg(row_nan == (r == 7), "row %lld: NaN in its gradient %d", (long long)r,
                          row_nan);
        }
        cg_release_all(4, l, lse, g, dx);
    }
    cg_set_num_threads(0);
    cg_release(x);
}
END_TEST

/* The forward's gradient for g = 1 (computed while each row is in cache)
 * has the backward's bits: whole 16-lane blocks and tails, ignored rows,
 * label smoothing, no row kept, 1 and 2 threads. */
START_TEST(test_ce_grad_in_forward)
{
    ce_policy(_i);
    cg_rng r = cg_rng_new(8);
    const int64_t shapes[][2] = {{40, 4000}, {700, 53}, {3, 16}, {5, 7}};
    const float lss[] = {0.0f, 0.1f};
    for (size_t s = 0; s < 4; s++) {
        int64_t N = shapes[s][0], C = shapes[s][1];
        cg_tensor *x = cg_randn(&r, CG_SHAPE(N, C));
        int64_t *t = malloc((size_t)N * sizeof(int64_t));
        for (int all_ignored = 0; all_ignored < 2; all_ignored++) {
            for (int64_t i = 0; i < N; i++)
                t[i] = all_ignored || i % 5 == 2 ? -100 : (int64_t)cg_rng_below(&r, (uint64_t)C);
            for (int k = 0; k < 2; k++) {
                for (int th = 1; th <= 2; th++) {
                    cg_set_num_threads(th);
                    cg_tensor *lse = NULL, *g = NULL;
                    cg_tensor *l = cg_k_cross_entropy(x, cg_test_ids(N, t), -100, lss[k],
                                                      CG_REDUCTION_MEAN, &lse, &g);
                    cg_tensor *dx =
                        cg_k_cross_entropy_backward(x, cg_test_ids(N, t), -100, lss[k],
                                                    CG_REDUCTION_MEAN, lse, cg_test_scalar(1.0f));
                    ck_assert_ptr_nonnull(l);
                    ck_assert_ptr_nonnull(g);
                    ck_assert_msg(bit_equal(g, dx), "shape [%lld, %lld] ls %g ignored %d",
                                  (long long)N, (long long)C, (double)lss[k], all_ignored);
                    cg_release_all(4, l, lse, g, dx);
                }
            }
        }
        cg_set_num_threads(0);
        free(t);
        cg_release(x);
    }
}
END_TEST

/* GPT-2's head at a batch past 2^31 logits: 42,731 rows (42 windows of
 * 1,024 and a bit) by 50,257 ids, the fused head in the zoo's chunks of 256
 * rows and the plain cross-entropy over the whole [N, V], against double
 * sums. Rows repeat 7 patterns of h, so the reference needs 7 rows of
 * logits; targets differ per row. The last row's logits start past element
 * 2^31: an index kept in 32 bits would read another row. 8.6 GB of logits
 * for the plain one: run only with CG_BIG_TESTS=1 (docs/robustness.md,
 * round seventeen). */
START_TEST(test_ce_past_2_31)
{
    if (!getenv("CG_BIG_TESTS") || strcmp(getenv("CG_BIG_TESTS"), "1")) {
        printf("test_ce_past_2_31: skipped (CG_BIG_TESTS=1 runs it: 9 GB)\n");
        return;
    }
    enum { D = 4, P = 7 };
    const int64_t N = 42731, V = 50257;
    ck_assert(N * V > ((int64_t)1 << 31) && (N - 1) * V > ((int64_t)1 << 31) - V);
    cg_rng rng = cg_rng_new(17);
    cg_tensor *base = cg_randn(&rng, CG_SHAPE(P, D)), *w = cg_randn(&rng, CG_SHAPE(V, D));
    cg_tensor *h = cg_empty(CG_SHAPE(N, D)), *t = cg_empty_dtype(CG_I64, CG_SHAPE(N));
    const float *bp = cg_data(base), *wp = cg_data(w);
    int64_t *tp = cg_data_i64(t);
    for (int64_t r = 0; r < N; r++) {
        memcpy(cg_data(h) + r * D, bp + (r % P) * D, D * sizeof(float));
        tp[r] = (r * 7919) % V;
    }
    /* the reference: each pattern's log-sum-exp in double */
    double lse[P], want = 0;
    for (int k = 0; k < P; k++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; j++) {
            double z = 0;
            for (int q = 0; q < D; q++)
                z += (double)bp[k * D + q] * wp[j * D + q];
            mx = z > mx ? z : mx;
        }
        for (int64_t j = 0; j < V; j++) {
            double z = 0;
            for (int q = 0; q < D; q++)
                z += (double)bp[k * D + q] * wp[j * D + q];
            s += exp(z - mx);
        }
        lse[k] = mx + log(s);
    }
    for (int64_t r = 0; r < N; r++) {
        double z = 0;
        for (int q = 0; q < D; q++)
            z += (double)bp[(r % P) * D + q] * wp[tp[r] * D + q];
        want += lse[r % P] - z;
    }
    want /= (double)N;
    cg_tensor *dh = NULL;
    cg_tensor *fused = cg_k_linear_cross_entropy(h, w, NULL, t, -100, 0.0f, CG_REDUCTION_MEAN, 256,
                                                 1.0f, NULL, &dh, NULL, NULL);
    ck_assert_msg(fused && dh, "%s", cg_last_error());
    ck_assert_msg(fabs(cg_item(fused) - want) < 1e-5 * fabs(want), "fused %.9g, want %.9g",
                  cg_item(fused), want);
    /* the last row's gradient: (softmax(z) w - w[t]) / N */
    const int64_t r = N - 1;
    double g[D] = {0};
    for (int64_t j = 0; j < V; j++) {
        double z = 0;
        for (int q = 0; q < D; q++)
            z += (double)bp[(r % P) * D + q] * wp[j * D + q];
        for (int q = 0; q < D; q++)
            g[q] += exp(z - lse[r % P]) * wp[j * D + q];
    }
    for (int q = 0; q < D; q++) {
        const double e = (g[q] - wp[tp[r] * D + q]) / (double)N;
        ck_assert_msg(fabs(cg_data(dh)[r * D + q] - e) < 1e-4 * fabs(e) + 1e-12,
                      "dh[%lld][%d] %.9g, want %.9g", (long long)r, q, cg_data(dh)[r * D + q], e);
    }
    /* the plain cross-entropy over all 2^31+ logits, whole and in passes */
    cg_tensor *logits = cg_empty(CG_SHAPE(N, V));
    ck_assert_msg(logits, "%s", cg_last_error());
    float *lp = cg_data(logits);
    for (int64_t i = 0; i < P; i++)
        for (int64_t j = 0; j < V; j++) {
            float z = 0;
            for (int q = 0; q < D; q++)
                z += bp[i * D + q] * wp[j * D + q];
            lp[i * V + j] = z;
        }
    for (int64_t i = P; i < N; i++)
        memcpy(lp + i * V, lp + (i % P) * V, (size_t)V * sizeof(float));
    cg_tensor *plain = cg_k_cross_entropy(logits, t, -100, 0.0f, CG_REDUCTION_MEAN, NULL, NULL);
    ck_assert_msg(plain, "%s", cg_last_error());
    ck_assert_msg(fabs(cg_item(plain) - want) < 1e-5 * fabs(want), "plain %.9g, want %.9g",
                  cg_item(plain), want);
    double total = 0;
    int64_t kept = 0;
    ck_assert(cg_k_cross_entropy_sum(logits, t, -100, 0.0f, &total, &kept));
    ck_assert_int_eq(kept, N);
    ck_assert_float_eq((float)(total / (double)kept), cg_item(plain));
    cg_release_all(8, base, w, h, t, fused, dh, logits, plain);
}
END_TEST

/* cg_k_cross_entropy_sum adds to its total and count (eval's passes over
 * batches): two calls give twice one call's, the rows ignored left out. */
START_TEST(test_ce_sum_accumulates)
{
    cg_tensor *x = cg_from_data(CG_SHAPE(3, 4), (float[]){1, 2, 3, 4, 0, -1, 2, 0.5f, 3, 3, 0, 1});
    cg_tensor *t = cg_test_ids(3, (const int64_t[]){2, -100, 0});
    double total = 0.0;
    int64_t kept = 0;
    ck_assert(cg_k_cross_entropy_sum(x, t, -100, 0.1f, &total, &kept));
    ck_assert_int_eq(kept, 2);
    const double one = total;
    ck_assert(cg_k_cross_entropy_sum(x, t, -100, 0.1f, &total, &kept));
    ck_assert_int_eq(kept, 4);
    ck_assert(total == 2.0 * one);
    cg_tensor *l = cg_k_cross_entropy(x, t, -100, 0.1f, CG_REDUCTION_MEAN, NULL, NULL);
    ck_assert_float_eq(cg_item(l), (float)(one / 2.0));
    cg_release_all(2, x, l);
}
END_TEST

/* A NaN logit whose payload has its low bits set (0x7fc00001), in rows
 * whose other logits are near each other: the log-sum-exp and the loss
 * NaN, the NaN in the 16-lane part of the row and in its tail. The range
 * check keeps a row with a NaN from the fast exponential, whose 2^k added
 * to the bits of such a NaN makes a number. */
START_TEST(test_ce_nan_payload)
{
    enum { C = 20 };
    float v[2 * C];
    for (int i = 0; i < 2 * C; i++)
        v[i] = 0.1f * (float)(i % 7);
    const uint32_t u = 0x7fc00001u;
    float q;
    memcpy(&q, &u, sizeof q);
    v[3] = q;
    v[C + 18] = q;
    cg_tensor *x = cg_from_data(CG_SHAPE(2, C), v), *lse = NULL;
    cg_tensor *l = cg_k_cross_entropy(x, cg_test_ids(2, (const int64_t[]){0, 1}), -100, 0.0f,
                                      CG_REDUCTION_MEAN, &lse, NULL);
    ck_assert_msg(l && lse, "%s", cg_last_error());
    ck_assert_msg(isnan(cg_data(lse)[0]) && isnan(cg_data(lse)[1]), "lse %g %g", cg_data(lse)[0],
                  cg_data(lse)[1]);
    ck_assert(isnan(cg_item(l)));
    cg_release_all(3, x, l, lse);
}
END_TEST

/* Under bf16 autocast a row's log-sum-exp is mx + log s with s the float
 * sum of exp(x_j - mx), element j in lane j % 16 of 16 float sums, the
 * lanes added pairwise (core/loss.c): its bits, for rows of 21 (16 lanes
 * and a tail of 5) and 40. */
START_TEST(test_ce_autocast_lanes)
{
    cg_rng rng = cg_rng_new(91);
    const int64_t cs[] = {21, 40};
    cg_set_matmul_precision(CG_PRECISION_BF16);
    for (int k = 0; k < 2; k++) {
        const int64_t N = 32, C = cs[k];
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, C)), *lse = NULL;
        int64_t t[32];
        for (int64_t r = 0; r < N; r++)
            t[r] = (r * 5) % C;
        cg_tensor *l =
            cg_k_cross_entropy(x, cg_test_ids(N, t), -100, 0.0f, CG_REDUCTION_MEAN, &lse, NULL);
        ck_assert_msg(l && lse, "%s", cg_last_error());
        for (int64_t r = 0; r < N; r++) {
            const float *xr = cg_data(x) + r * C;
            float mx = -INFINITY, a[16] = {0}, p[8];
            for (int64_t j = 0; j < C; j++)
                mx = xr[j] > mx ? xr[j] : mx;
            for (int64_t j = 0; j < C; j++)
                a[j % 16] += ew_expf(xr[j] - mx);
            for (int q = 0; q < 8; q++)
                p[q] = a[q] + a[q + 8];
            const float sum = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            const float want = (float)((double)mx + log((double)sum));
            ck_assert_msg(cg_data(lse)[r] == want, "C %lld row %lld: lse %.9g, want %.9g",
                          (long long)C, (long long)r, cg_data(lse)[r], want);
        }
        cg_release_all(3, x, l, lse);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
}
END_TEST

START_TEST(test_ce_errors)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(3, 4));
    cg_tensor *lse = (cg_tensor *)1; /* must be reset to NULL on failure */
    CG_ASSERT_FAILS(cg_k_cross_entropy(x, cg_test_ids(3, (const int64_t[]){0, 7, 1}), -100, 0.0f,
                                       CG_REDUCTION_MEAN, &lse, NULL),
                    "target 7 at row 1");
    ck_assert_ptr_null(lse);
    CG_ASSERT_FAILS(cg_k_cross_entropy(x, cg_test_ids(3, (const int64_t[]){0, 1, -5}), -100, 0.0f,
                                       CG_REDUCTION_MEAN, NULL, NULL),
                    "row 2");
    CG_ASSERT_FAILS(cg_k_cross_entropy(x, cg_test_ids(3, (const int64_t[]){0, 1, 4}), -100, 0.0f,
                                       CG_REDUCTION_MEAN, NULL, NULL),
                    "target 4");
    CG_ASSERT_FAILS(cg_k_cross_entropy_backward(x, cg_test_ids(3, (const int64_t[]){0, 9, 1}), -100,
                                                0.0f, CG_REDUCTION_MEAN, NULL,
                                                cg_test_scalar(1.0f)),
                    "target 9");
    CG_ASSERT_FAILS(cg_k_cross_entropy(x, cg_test_ids(3, (const int64_t[]){0, 1, 2}), -100, 1.5f,
                                       CG_REDUCTION_MEAN, NULL, NULL),
                    "label_smoothing");
    /* NaN is not in [0, 1] */
    CG_ASSERT_FAILS(cg_k_cross_entropy(x, cg_test_ids(3, (const int64_t[]){0, 1, 2}), -100, NAN,
                                       CG_REDUCTION_MEAN, NULL, NULL),
                    "cross_entropy: label_smoothing must be in [0, 1] (got nan)");
    /* [N, 1] targets are not [N] */
    CG_ASSERT_FAILS(cg_k_cross_entropy(x,
                                       cg_test_ids_nd(CG_SHAPE(3, 1), (const int64_t[]){0, 1, 2}),
                                       -100, 0.0f, CG_REDUCTION_MEAN, NULL, NULL),
                    "argument 'targets' has shape [3, 1], expected [N] = [3]");
    cg_tensor *x3 = cg_zeros(CG_SHAPE(2, 3, 4));
    CG_ASSERT_FAILS(cg_k_cross_entropy(x3, cg_test_ids(2, (const int64_t[]){0, 1}), -100, 0.0f,
                                       CG_REDUCTION_MEAN, NULL, NULL),
                    "[2, 3, 4]");
    /* the count must match the rows: one short or one long is an error */
    CG_ASSERT_FAILS(cg_k_cross_entropy(x, cg_test_ids(2, (const int64_t[]){0, 1}), -100, 0.0f,
                                       CG_REDUCTION_MEAN, NULL, NULL),
                    "argument 'targets' has shape [2], expected [N] = [3]");
    CG_ASSERT_FAILS(cg_k_cross_entropy_backward(x, cg_test_ids(4, (const int64_t[]){0, 1, 2, 3}),
                                                -100, 0.0f, CG_REDUCTION_MEAN, NULL,
                                                cg_test_scalar(1.0f)),
                    "argument 'targets' has shape [4], expected [N] = [3]");
    /* the backward's lse: one a row */
    cg_tensor *lse2 = cg_zeros(CG_SHAPE(2));
    CG_ASSERT_FAILS(cg_k_cross_entropy_backward(x, cg_test_ids(3, (const int64_t[]){0, 1, 2}), -100,
                                                0.0f, CG_REDUCTION_MEAN, lse2,
                                                cg_test_scalar(1.0f)),
                    "cross_entropy_backward: lse must have N elements (shapes [3, 4] and [2])");
    cg_release(lse2);
    cg_release_all(2, x, x3);
}
END_TEST

/* --------------------------------------------------------- layer norm */
/* Reference layer / RMS norm over the last dim of [rows, D] in double. */
static void ref_norm(const double *x, const double *w, const double *b, double eps, int64_t rows,
                     int64_t D, bool rms, double *y, double *mean, double *rstd)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double m = 0, v = 0;
        if (!rms) {
            for (int64_t j = 0; j < D; j++)
                m += xr[j];
            m /= D;
        }
        for (int64_t j = 0; j < D; j++)
            v += (xr[j] - m) * (xr[j] - m);
        v /= D;
        double rs = 1 / sqrt(v + eps);
        if (mean)
            mean[r] = m;
        if (rstd)
            rstd[r] = rs;
        for (int64_t j = 0; j < D; j++)
            y[r * D + j] = (xr[j] - m) * rs * (w ? w[j] : 1) + (b ? b[j] : 0);
    }
}

/* Forward and backward of layer norm (rms = false) or RMS norm vs the double
 * reference, its finite differences and the analytic dw/db. */
static void norm_case(bool rms, bool with_w, bool with_b, int layout)
{
    cg_rng r = cg_rng_new(10 + (uint64_t)layout);
    const int64_t R = 6, D = 5; /* x: [2, 3, 5] */
    cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(2, 3, 5), layout);
    cg_tensor *g = cg_test_randn_layout(&r, CG_SHAPE(2, 3, 5), 1);
    cg_tensor *w = with_w ? cg_test_randn_layout(&r, CG_SHAPE(5), 2) : NULL; /* strided */
    cg_tensor *b = with_b ? cg_randn(&r, CG_SHAPE(5)) : NULL;
    float *xv = cg_test_values(x), *gv = cg_test_values(g);
    float *wv = w ? cg_test_values(w) : NULL, *bv = b ? cg_test_values(b) : NULL;
    double *xd = to_double(xv, R * D), *gd = to_double(gv, R * D);
    double *wd = w ? to_double(wv, D) : NULL, *bd = b ? to_double(bv, D) : NULL;
    double y[30], mean[6], rstd[6], eps = 1e-5;
    ref_norm(xd, wd, bd, eps, R, D, rms, y, mean, rstd);

    cg_tensor *mt = NULL, *rt = NULL, *out;
    if (rms)
        out = cg_k_rms_norm(x, w, (float)eps, &rt);
    else
        out = cg_k_layer_norm(x, w, b, (float)eps, &mt, &rt);
    ck_assert_ptr_nonnull(out);
    ck_assert(cg_same_shape(out, x));
    assert_close_d(out, y, 1e-5, 1e-5);
    assert_close_d(rt, rstd, 0, 1e-5);
    if (!rms)
        assert_close_d(mt, mean, 1e-6, 1e-5);

    cg_tensor *dx = NULL, *dw = NULL, *db = NULL;
    bool ok = rms ? cg_k_rms_norm_backward(x, w, rt, g, NULL, &dx, &dw)
                  : cg_k_layer_norm_backward(x, w, mt, rt, g, NULL, &dx, &dw, &db);
    ck_assert_msg(ok, "%s", cg_last_error());
    /* dx: finite differences of L = sum(g * y) in double */
    double fd[30], xs[30], yp[30], ym[30];
    memcpy(xs, xd, sizeof xs);
    for (int i = 0; i < R * D; i++) {
        double h = 1e-6, lp = 0, lm = 0;
        xs[i] = xd[i] + h;
        ref_norm(xs, wd, bd, eps, R, D, rms, yp, NULL, NULL);
        xs[i] = xd[i] - h;
        ref_norm(xs, wd, bd, eps, R, D, rms, ym, NULL, NULL);
        xs[i] = xd[i];
        for (int j = 0; j < R * D; j++) {
            lp += gd[j] * yp[j];
            lm += gd[j] * ym[j];
        }
        fd[i] = (lp - lm) / (2 * h);
    }
    assert_close_d(dx, fd, 1e-4, 1e-4);
    /* dw = sum g * xhat, db = sum g */
    double edw[5] = {0}, edb[5] = {0};
    for (int i = 0; i < R; i++)
        for (int j = 0; j < D; j++) {
            edw[j] += gd[i * D + j] * (xd[i * D + j] - mean[i]) * rstd[i];
            edb[j] += gd[i * D + j];
        }
    assert_close_d(dw, edw, 1e-5, 1e-5);
    if (rms)
        ck_assert_ptr_null(db);
    else
        assert_close_d(db, edb, 1e-5, 1e-5);

    /* only dx, and only dw */
    cg_tensor *dx2 = NULL, *dw2 = NULL;
    ok = rms ? cg_k_rms_norm_backward(x, w, rt, g, NULL, &dx2, NULL)
             : cg_k_layer_norm_backward(x, w, mt, rt, g, NULL, &dx2, NULL, NULL);
    ck_assert(ok && bit_equal(dx, dx2));
    ok = rms ? cg_k_rms_norm_backward(x, w, rt, g, NULL, NULL, &dw2)
             : cg_k_layer_norm_backward(x, w, mt, rt, g, NULL, NULL, &dw2, NULL);
    ck_assert(ok && bit_equal(dw, dw2));

    free(xv);
    free(gv);
    free(wv);
    free(bv);
    free(xd);
    free(gd);
    free(wd);
    free(bd);
    cg_release_all(12, x, g, w, b, out, mt, rt, dx, dw, db, dx2, dw2);
}

START_TEST(test_layer_norm)
{
    for (int layout = 0; layout < 3; layout++) {
        norm_case(false, true, true, layout);
        norm_case(false, false, false, layout);
        norm_case(false, true, false, layout);
        norm_case(false, false, true, layout); /* a bias and no weight: its own loop */
    }
}
END_TEST

START_TEST(test_rms_norm)
{
    for (int layout = 0; layout < 3; layout++) {
        norm_case(true, true, false, layout);
        norm_case(true, false, false, layout);
    }
}
END_TEST

START_TEST(test_layer_norm_large_offset)
{
    /* rows with a large common offset: the two-pass variance stays exact */
    float v[8] = {1e4f + 1, 1e4f + 2, 1e4f + 3, 1e4f + 4, -3, -3, -3, -3};
    cg_tensor *x = cg_from_data(CG_SHAPE(2, 4), v);
    cg_tensor *y = cg_k_layer_norm(x, NULL, NULL, 1e-5f, NULL, NULL);
    double s = 1 / sqrt(1.25 + 1e-5);
    CG_ASSERT_TENSOR(y, ((const float[]){-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s, 0, 0, 0, 0}), 1e-5,
                     1e-5);
    cg_release_all(2, x, y);
}
END_TEST

START_TEST(test_norm_threads)
{
    cg_rng r = cg_rng_new(7);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(999, 64));
    cg_tensor *g = cg_randn(&r, CG_SHAPE(999, 64));
    cg_tensor *w = cg_randn(&r, CG_SHAPE(64)), *b = cg_randn(&r, CG_SHAPE(64));
    cg_tensor *res[2][8];
    for (int k = 0; k < 2; k++) {
        cg_set_num_threads(k + 1);
        cg_tensor **o = res[k];
        o[0] = cg_k_layer_norm(x, w, b, 1e-5f, &o[1], &o[2]);
        ck_assert(cg_k_layer_norm_backward(x, w, o[1], o[2], g, NULL, &o[3], &o[4], &o[5]));
        o[6] = cg_k_rms_norm(x, w, 1e-5f, &o[7]);
    }
    cg_set_num_threads(0);
    for (int j = 0; j < 8; j++) {
        ck_assert_msg(bit_equal(res[0][j], res[1][j]), "output %d differs", j);
        cg_release_all(2, res[0][j], res[1][j]);
    }
    cg_tensor *dx[2], *dw[2];
    cg_tensor *rs = NULL;
    cg_tensor *y = cg_k_rms_norm(x, w, 1e-5f, &rs);
    for (int k = 0; k < 2; k++) {
        cg_set_num_threads(k + 1);
        ck_assert(cg_k_rms_norm_backward(x, w, rs, g, NULL, &dx[k], &dw[k]));
    }
    cg_set_num_threads(0);
    ck_assert(bit_equal(dx[0], dx[1]) && bit_equal(dw[0], dw[1]));
    cg_release_all(10, x, g, w, b, rs, y, dx[0], dx[1], dw[0], dw[1]);
}
END_TEST

/* norm(x + y) fused against cg_k_add then the norm: every output of the
 * forward and the backward bit for bit, for row counts around the backward's
 * 64-row chunks, widths off the 8 lanes and the 32-column blocks, strided
 * inputs and 1 and 2 threads (the 2-thread shapes are above the parallel
 * threshold). */
START_TEST(test_add_norm_fused)
{
    cg_rng r = cg_rng_new(17);
    const int64_t shapes[][2] = {{1, 5}, {3, 7}, {64, 40}, {131, 33}, {520, 64}, {131, 260}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int layout = 0; layout < 3; layout++)
            for (int nt = 1; nt <= 2; nt++) {
                cg_set_num_threads(nt);
                const int64_t R = shapes[k][0], D = shapes[k][1];
                cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(R, D), layout);
                cg_tensor *y = cg_test_randn_layout(&r, CG_SHAPE(R, D), (layout + 1) % 3);
                cg_tensor *g = cg_randn(&r, CG_SHAPE(R, D));
                cg_tensor *w = cg_randn(&r, CG_SHAPE(D)), *b = cg_randn(&r, CG_SHAPE(D));
                cg_tensor *s = cg_k_add(x, y);
                for (int rms = 0; rms < 2; rms++) {
                    cg_tensor *o[2][6] = {{0}}; /* y, mean, rstd, dx, dw, db */
                    if (rms) {
                        o[0][0] = cg_k_rms_norm(s, w, 1e-5f, &o[0][2]);
                        ck_assert(
                            cg_k_rms_norm_backward(s, w, o[0][2], g, NULL, &o[0][3], &o[0][4]));
                        o[1][0] = cg_k_add_rms_norm(x, y, w, 1e-5f, &o[1][2], &o[1][5]);
                        ck_assert(bit_equal(s, o[1][5]));
                        ck_assert(cg_k_rms_norm_backward(o[1][5], w, o[1][2], g, NULL, &o[1][3],
                                                         &o[1][4]));
                        cg_release(o[1][5]);
                        o[1][5] = NULL;
                    } else {
                        o[0][0] = cg_k_layer_norm(s, w, b, 1e-5f, &o[0][1], &o[0][2]);
                        ck_assert(cg_k_layer_norm_backward(s, w, o[0][1], o[0][2], g, NULL,
                                                           &o[0][3], &o[0][4], &o[0][5]));
                        cg_tensor *sum = NULL;
                        o[1][0] = cg_k_add_layer_norm(x, y, w, b, 1e-5f, &o[1][1], &o[1][2], &sum);
                        ck_assert(bit_equal(s, sum));
                        ck_assert(cg_k_layer_norm_backward(sum, w, o[1][1], o[1][2], g, NULL,
                                                           &o[1][3], &o[1][4], &o[1][5]));
                        cg_release(sum);
                    }
                    for (int j = 0; j < 6; j++) {
                        if (rms && (j == 1 || j == 5))
                            continue;
                        ck_assert_msg(bit_equal(o[0][j], o[1][j]),
                                      "%s [%lld, %lld] layout %d, %d threads: output %d differs",
                                      rms ? "rms" : "layer", (long long)R, (long long)D, layout, nt,
                                      j);
                    }
                    for (int j = 0; j < 6; j++)
                        cg_release_all(2, o[0][j], o[1][j]);
                }
                /* without the sum asked for: the same output, nothing stored */
                cg_tensor *m = NULL, *rs = NULL, *m2 = NULL, *rs2 = NULL, *sum = NULL;
                cg_tensor *out = cg_k_add_layer_norm(x, y, w, b, 1e-5f, &m, &rs, NULL);
                cg_tensor *out2 = cg_k_add_layer_norm(x, y, w, b, 1e-5f, &m2, &rs2, &sum);
                ck_assert(bit_equal(out, out2) && bit_equal(m, m2) && bit_equal(rs, rs2));
                cg_release_all(13, x, y, g, w, b, s, m, rs, out, m2, rs2, out2, sum);
            }
    cg_set_num_threads(0);
    /* shapes must match (no broadcasting), gradients too */
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3)), *y = cg_zeros(CG_SHAPE(1, 3));
    cg_tensor *sum = NULL;
    CG_ASSERT_FAILS(cg_k_add_layer_norm(x, y, NULL, NULL, 1e-5f, NULL, NULL, &sum), "same shape");
    ck_assert_ptr_null(sum);
    CG_ASSERT_FAILS(cg_k_add_rms_norm(x, y, NULL, 1e-5f, NULL, NULL), "add_rms_norm");
    cg_release_all(2, x, y);
}
END_TEST

/* cg_k_rms_norm_backward given an acc it refuses: no outputs set */
typedef struct {
    cg_tensor *x, *g, *rstd;
} norm_acc_call;
static bool norm_acc_refused(void *ctx, cg_tensor *acc, bool want_dx)
{
    const norm_acc_call *c = ctx;
    cg_tensor *dx = NULL, *dw = NULL;
    const bool ok =
        cg_k_rms_norm_backward(c->x, NULL, c->rstd, c->g, acc, want_dx ? &dx : NULL, &dw);
    ck_assert(!dx && !dw);
    return ok;
}

/* dx added into a gradient the input already has (acc, autograd's
 * cg_node_grad_acc): acc + dx rounded once, the bits of cg_k_add_ on the
 * dx made apart, for both norms, from float x and from bf16 x-hat, for
 * widths off the 8 lanes, an odd last row and shapes above the parallel
 * threshold, on 1 and 2 threads; dw and db as without acc, *dx acc itself,
 * acc's version bumped (cg_tensor_modified). A wrong acc is refused,
 * named, and left as it was. */
START_TEST(test_norm_backward_into)
{
    cg_rng r = cg_rng_new(29);
    const int64_t shapes[][2] = {{3, 7}, {65, 40}, {131, 33}, {521, 64}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int v = 0; v < 8; v++) {
            const int64_t R = shapes[k][0], D = shapes[k][1];
            const bool rms = v & 1, hat = v & 2;
            cg_set_num_threads(v & 4 ? 2 : 1);
            cg_tensor *x = cg_randn(&r, CG_SHAPE(R, D)), *g = cg_randn(&r, CG_SHAPE(R, D));
            cg_tensor *w = cg_randn(&r, CG_SHAPE(D)), *b = rms ? NULL : cg_randn(&r, CG_SHAPE(D));
            cg_tensor *acc0 = cg_randn(&r, CG_SHAPE(R, D));
            cg_tensor *mean = NULL, *rstd = NULL, *xhat = NULL;
            cg_tensor *y = cg_k_norm(rms, x, NULL, w, b, 1e-5f, false, hat || rms ? NULL : &mean,
                                     &rstd, NULL, hat ? &xhat : NULL);
            ck_assert_ptr_nonnull(y);
            cg_tensor *want[3] = {0}, *got[3] = {0}, *acc = cg_k_clone(acc0);
            const uint64_t v0 = cg_version(acc);
            for (int into = 0; into < 2; into++) {
                cg_tensor **o = into ? got : want, *a = into ? acc : NULL;
                ck_assert(
                    hat   ? cg_k_norm_backward_xhat(rms, xhat, w, rstd, g, a, &o[0], &o[1],
                                                  rms ? NULL : &o[2])
                      : rms ? cg_k_rms_norm_backward(x, w, rstd, g, a, &o[0], &o[1])
                          : cg_k_layer_norm_backward(x, w, mean, rstd, g, a, &o[0], &o[1], &o[2]));
            }
            cg_tensor *sum = cg_k_clone(acc0);
            ck_assert(cg_k_add_(sum, want[0]));
            ck_assert_ptr_eq(got[0], acc);
            ck_assert_msg(cg_version(acc) > v0, "acc written in place, its version not bumped");
            ck_assert_msg(bit_equal(acc, sum) && bit_equal(got[1], want[1]) &&
                              (rms || bit_equal(got[2], want[2])),
                          "%s norm from %s, [%lld, %lld], %d threads", rms ? "rms" : "layer",
                          hat ? "x-hat" : "x", (long long)R, (long long)D, v & 4 ? 2 : 1);
            cg_release_all(6, want[0], want[1], want[2], got[0], got[1], got[2]);
            cg_release_all(10, x, g, w, b, acc0, mean, rstd, xhat, y, sum);
            cg_release(acc);
        }
    cg_set_num_threads(0);
    /* refused: another dtype, another shape, a view, or no dx asked for */
    norm_acc_call c = {cg_randn(&r, CG_SHAPE(6, 4)), cg_randn(&r, CG_SHAPE(6, 4)), NULL};
    cg_tensor *y = cg_k_rms_norm(c.x, NULL, 1e-5f, &c.rstd);
    cg_test_acc_refused(6, 4, "rms_norm_backward", norm_acc_refused, &c);
    cg_release_all(4, c.x, c.g, c.rstd, y);
}
END_TEST

START_TEST(test_norm_errors)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3));
    cg_tensor *w4 = cg_ones(CG_SHAPE(4)), *w2d = cg_ones(CG_SHAPE(1, 3));
    cg_tensor *s = cg_scalar(1.0f);
    CG_ASSERT_FAILS(cg_k_layer_norm(x, w4, NULL, 1e-5f, NULL, NULL), "[4]");
    CG_ASSERT_FAILS(cg_k_layer_norm(x, NULL, w2d, 1e-5f, NULL, NULL), "bias");
    CG_ASSERT_FAILS(cg_k_rms_norm(x, w4, 1e-5f, NULL), "rms_norm");
    CG_ASSERT_FAILS(cg_k_layer_norm(s, NULL, NULL, 1e-5f, NULL, NULL), "layer_norm");
    cg_tensor *mean = NULL, *rstd = NULL;
    cg_tensor *y = cg_k_layer_norm(x, NULL, NULL, 1e-5f, &mean, &rstd);
    cg_tensor *g = cg_zeros(CG_SHAPE(3, 2)), *dx = NULL;
    ck_assert(!cg_k_layer_norm_backward(x, NULL, mean, rstd, g, NULL, &dx, NULL, NULL));
    ck_assert_ptr_null(dx);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[3, 2]"));
    ck_assert(!cg_k_rms_norm_backward(x, NULL, x, x, NULL, &dx, NULL)); /* rstd of 6 elements */
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "rms_norm_backward"));
    cg_release_all(9, x, w4, w2d, s, mean, rstd, y, g, dx);
}
END_TEST

/* ------------------------------------------------------------ dropout */
START_TEST(test_dropout_identity)
{
    cg_rng r = cg_rng_new(8);
    cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(4, 6), 1);
    float *xv = cg_test_values(x);
    cg_rng d = cg_rng_new(1);
    cg_tensor *mask = NULL;
    cg_tensor *y = cg_k_dropout(x, 0.0f, &d, &mask);
    CG_ASSERT_TENSOR(y, xv, 0, 0);
    ck_assert_int_eq(mask->dtype, CG_BOOL);
    for (int i = 0; i < 24; i++)
        ck_assert(cg_data_bool(mask)[i]);
    ck_assert_uint_eq(d.counter, 24);
    free(xv);
    cg_release_all(3, x, y, mask);
}
END_TEST

START_TEST(test_dropout_stats)
{
    const int64_t n = 200000;
    cg_tensor *x = cg_ones(CG_SHAPE(400, 500));
    cg_rng d = cg_rng_new(42);
    cg_tensor *mask = NULL;
    cg_tensor *y = cg_k_dropout(x, 0.3f, &d, &mask);
    float *yv = cg_test_values(y), *mv = cg_test_values(mask);
    int64_t kept = 0;
    float scale = (float)(1.0 / 0.7);
    for (int64_t i = 0; i < n; i++) {
        ck_assert(mv[i] == 0.0f || mv[i] == 1.0f);
        ck_assert(yv[i] == mv[i] * scale);
        kept += mv[i] != 0.0f;
    }
    double frac = (double)kept / (double)n;
    ck_assert_msg(fabs(frac - 0.7) < 0.01, "kept fraction %g", frac);
    ck_assert_uint_eq(d.counter, (uint64_t)n);
    free(yv);
    free(mv);
    cg_release_all(3, x, y, mask);
}
END_TEST

/* The kernel's inline draws (core/rng.h) are cg_rng_uniform's: element i
 * is kept iff the (counter + i)-th uniform draw >= p, and y = x * scale, for
 * several seeds, a counter far along, block edges (4096) in between and
 * a last block whose length is not a multiple of the kernel's vectors.
 * The scale is 1 / (1 - p) in double, rounded once: for p = 0.15 that is
 * 0x1.2d2d2ep+0, one ulp above float arithmetic's 1.0f / (1.0f - p). */
START_TEST(test_dropout_draws)
{
    const uint64_t seeds[3] = {0, 7, 0xfedcba9876543210ULL};
    const uint64_t counters[3] = {0, 12345, (1ULL << 40) - 3};
    const float ps[3] = {0.1f, 0.7f, 0.15f};
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(9003));
    float *xv = cg_test_values(x);
    for (int a = 0; a < 3; a++)
        for (int c = 0; c < 3; c++)
            for (int k = 0; k < 3; k++) {
                cg_rng d = {.seed = seeds[a], .counter = counters[c]}, ref = d;
                cg_tensor *mask = NULL;
                cg_tensor *y = cg_k_dropout(x, ps[k], &d, &mask);
                float *yv = cg_test_values(y), *mv = cg_test_values(mask);
                float scale = (float)(1.0 / (1.0 - (double)ps[k]));
                for (int64_t i = 0; i < 9003; i++) {
                    float s = cg_rng_uniform(&ref) >= ps[k] ? scale : 0.0f;
                    ck_assert_msg(mv[i] == (s != 0.0f) && yv[i] == xv[i] * s,
                                  "seed %d counter %d p %g: element %lld", a, c, (double)ps[k],
                                  (long long)i);
                }
                ck_assert_uint_eq(d.counter, ref.counter);
                free(yv);
                free(mv);
                cg_release_all(2, y, mask);
            }
    free(xv);
    cg_release(x);
}
END_TEST

/* An element is kept iff its draw u >= p (inverted dropout's keep with
 * probability 1 - p): a draw exactly p is kept, in the kernel's vectors
 * and in its scalar tail, with its mask 1. Draw 6,589,685 of seed 2 is
 * exactly 0.5 (a multiple of 2^-24, as every draw is). */
START_TEST(test_dropout_draw_equal_to_p)
{
    const uint64_t at = 6589685;
    cg_rng probe = {.seed = 2, .counter = at};
    ck_assert(cg_rng_uniform(&probe) == 0.5f);
    cg_tensor *x = cg_full(CG_SHAPE(11), 3.0f);
    for (int64_t lane = 3; lane <= 9; lane += 6) { /* lane 3 of the first 8; 9 of the tail */
        cg_rng d = {.seed = 2, .counter = at - (uint64_t)lane};
        cg_tensor *mask = NULL, *y = cg_k_dropout(x, 0.5f, &d, &mask);
        ck_assert_msg(cg_data(y)[lane] == 6.0f, "element %lld: %g", (long long)lane,
                      (double)cg_data(y)[lane]);
        ck_assert(cg_data_bool(mask)[lane]);
        cg_release_all(2, y, mask);
    }
    cg_release(x);
}
END_TEST

START_TEST(test_dropout_determinism)
{
    cg_rng r = cg_rng_new(9);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(300, 301)); /* above the parallel threshold */
    cg_tensor *y[3], *m[3];
    for (int k = 0; k < 3; k++) {
        cg_set_num_threads(k == 0 ? 1 : 2);
        cg_rng d = cg_rng_new(123);
        y[k] = cg_k_dropout(x, 0.5f, &d, &m[k]);
    }
    cg_set_num_threads(0);
    ck_assert(bit_equal(y[0], y[1]) && bit_equal(y[1], y[2]));
    ck_assert(bit_equal(m[0], m[1]));
    /* the counter advances: a second draw from the same rng differs */
    cg_rng d = cg_rng_new(123);
    cg_tensor *a = cg_k_dropout(x, 0.5f, &d, NULL);
    cg_tensor *b = cg_k_dropout(x, 0.5f, &d, NULL);
    ck_assert(bit_equal(a, y[0]));
    ck_assert(!bit_equal(a, b));
    /* a non-contiguous input gives the mask in row-major order of its shape */
    cg_tensor *xt = cg_view_transpose(x, 0, 1), *xtc = cg_k_clone(xt);
    cg_rng d1 = cg_rng_new(5), d2 = cg_rng_new(5);
    cg_tensor *p = cg_k_dropout(xt, 0.2f, &d1, NULL), *q = cg_k_dropout(xtc, 0.2f, &d2, NULL);
    ck_assert(bit_equal(p, q));
    cg_release_all(11, x, y[0], y[1], y[2], m[0], m[1], m[2], a, b, xt, xtc);
    cg_release_all(2, p, q);
}
END_TEST

/* The backward from the bool mask: the bits of g times the float mask
 * (scale where kept, 0 where dropped: a NaN or infinite g gives NaN
 * there), for a strided g over several blocks, p = 0 and p = 1; a mask of
 * another dtype or shape, or p outside [0, 1], refused. */
START_TEST(test_dropout_backward)
{
    cg_rng r = cg_rng_new(10);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(90, 100));
    cg_tensor *g0 = cg_randn(&r, CG_SHAPE(100, 90)), *g = cg_view_transpose(g0, 0, 1);
    cg_data(g0)[3] = NAN;
    cg_data(g0)[4] = INFINITY;
    cg_data(g0)[5] = -INFINITY;
    const float ps[3] = {0.3f, 0.0f, 1.0f};
    for (int k = 0; k < 3; k++) {
        cg_rng d = cg_rng_new(77);
        cg_tensor *m = NULL, *y = cg_k_dropout(x, ps[k], &d, &m);
        const float scale = ps[k] < 1.0f ? (float)(1.0 / (1.0 - (double)ps[k])) : 0.0f;
        cg_tensor *f = cg_k_to(m, CG_F32), *fm = cg_k_muls(f, scale);
        cg_tensor *got = cg_k_dropout_backward(m, g, ps[k]), *want = cg_k_mul(g, fm);
        ck_assert(bit_equal(got, want));
        cg_release_all(6, m, y, f, fm, got, want);
    }
    cg_tensor *fl = cg_ones(CG_SHAPE(90, 100)), *o2 = cg_ones(CG_SHAPE(90, 99));
    cg_tensor *m2 = cg_k_relu_mask(o2);
    CG_ASSERT_FAILS(cg_k_dropout_backward(fl, g, 0.5f), "bool mask");
    CG_ASSERT_FAILS(cg_k_dropout_backward(m2, g, 0.5f), "bool mask");
    cg_tensor *m3 = cg_k_relu_mask(x);
    CG_ASSERT_FAILS(cg_k_dropout_backward(m3, g, 1.5f), "p in [0, 1]");
    /* p = 1's factor is 0, as PyTorch's native_dropout_backward's, not
     * 1 / 0: a mask with kept elements (not one dropout gives at p = 1)
     * passes no gradient, not infinities */
    cg_tensor *g1 = cg_ones(CG_SHAPE(90, 100)), *z = cg_k_dropout_backward(m3, g1, 1.0f);
    ck_assert_ptr_nonnull(z);
    for (int64_t i = 0; i < 9000; i++)
        ck_assert_msg(cg_data(z)[i] == 0.0f, "element %lld: %g", (long long)i,
                      (double)cg_data(z)[i]);
    cg_release_all(2, g1, z);
    CG_ASSERT_FAILS(cg_k_dropout_backward(NULL, g, 0.5f), "dropout_backward");
    cg_release_all(7, x, g0, g, fl, o2, m2, m3);
}
END_TEST

START_TEST(test_dropout_errors)
{
    cg_tensor *x = cg_ones(CG_SHAPE(3));
    cg_rng d = cg_rng_new(1);
    CG_ASSERT_FAILS(cg_k_dropout(x, 1.5f, &d, NULL), "p must be");
    CG_ASSERT_FAILS(cg_k_dropout(x, -0.1f, &d, NULL), "dropout");
    CG_ASSERT_FAILS(cg_k_dropout(x, NAN, &d, NULL), "dropout");
    CG_ASSERT_FAILS(cg_k_dropout(x, 0.5f, NULL, NULL), "rng");
    ck_assert_uint_eq(d.counter, 0);
    /* a refused call sets the mask it was given to NULL (a caller's
     * cleanup releases it), whatever it held before */
    cg_tensor *mask = x;
    CG_ASSERT_FAILS(cg_k_dropout(x, 2.0f, &d, &mask), "p must be");
    ck_assert_ptr_null(mask);
    mask = x;
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_dropout(NULL, 0.5f, &d, &mask), "cg_k_dropout: input is NULL");
    ck_assert_ptr_null(mask);
    /* p = 1 drops everything, as PyTorch */
    cg_tensor *y = cg_k_dropout(x, 1.0f, &d, NULL);
    CG_ASSERT_TENSOR(y, ((const float[]){0, 0, 0}), 0, 0);
    cg_release_all(2, x, y);
}
END_TEST

/* -------------------------------------------------------- attention */
/* The tiled attention kernel against attention in double precision, on
 * sizes that cross its tiles (64 query rows, 512 keys): several key blocks
 * with causal and padding masks, cross-attention with many keys, a tail
 * tile, one block with recomputed weights (257..512 keys) and kept weights
 * (up to 256); forward, weights and all three gradients (and the
 * log-sum-exps where saved). Then the same results bit for bit on 1 and 2
 * threads. */
typedef struct {
    int64_t B, H, Tq, Tk, dh;
    bool causal, pad;
} attn_case;

static uint8_t *attn_pad(const attn_case *c)
{
    if (!c->pad)
        return NULL;
    uint8_t *p = calloc((size_t)(c->B * c->Tk), 1);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t j = 0; j < c->Tk; j++) /* scattered pads, a padded tail, never key 0 */
            p[b * c->Tk + j] = j > 0 && (j % 13 == 5 || j >= c->Tk - 3 * (b + 1));
    return p;
}

static void attn_run(const attn_case *c, cg_tensor *const *in, const uint8_t *pad,
                     cg_tensor **res /* out, lse, w, dq, dk, dv */)
{
    cg_tensor *kp = pad ? cg_test_mask(CG_SHAPE(c->B, c->Tk), pad) : NULL;
    res[0] = cg_k_attention(in[0], in[1], in[2], c->causal, kp, &res[1], &res[2]);
    ck_assert_ptr_nonnull(res[0]);
    ck_assert(cg_k_attention_backward(in[0], in[1], in[2], res[0], res[1], in[3], c->causal, kp,
                                      &res[3], &res[4], &res[5]));
    /* with the weights saved, or recomputed within one key block (up to
     * 512 keys), the output is not read: NULL gives the same bits; over
     * several key blocks it is refused */
    cg_tensor *d[3] = {NULL, NULL, NULL};
    const bool unread = !cg_k_attention_needs_out(in[1], res[1]);
    ck_assert(unread == (res[1]->ndim == 4 || c->Tk <= 512));
    ck_assert(cg_k_attention_backward(in[0], in[1], in[2], NULL, res[1], in[3], c->causal, kp,
                                      &d[0], &d[1], &d[2]) == unread);
    for (int i = 0; unread && i < 3; i++) {
        float *a = cg_test_values(d[i]), *e = cg_test_values(res[3 + i]);
        ck_assert(memcmp(a, e, (size_t)cg_numel(d[i]) * sizeof(float)) == 0);
        free(a);
        free(e);
    }
    cg_release_all(3, d[0], d[1], d[2]);
}

START_TEST(test_attention_tiled_vs_double)
{
    const attn_case cases[] = {
        {1, 2, 600, 600, 8, true, true},   /* two key blocks, causal, a tail tile */
        {2, 1, 70, 1100, 4, false, true},  /* cross: three key blocks */
        {1, 1, 1, 1, 4, true, false},      /* T = 1 */
        {2, 2, 100, 100, 16, true, false}, /* one block, a tail tile */
        {1, 1, 530, 520, 4, true, false},  /* causal with Tq > Tk */
        {1, 1, 40, 530, 4, true, true},    /* causal with Tk > Tq: keys no query sees */
        {2, 1, 300, 300, 8, true, true},   /* one block, recomputed weights */
        {1, 2, 7, 300, 8, false, true},    /* cross, one block, recomputed weights */
        {1, 1, 65, 256, 8, false, true},   /* the last length with kept weights */
        {1, 1, 129, 257, 8, true, true},   /* the first with recomputed ones */
        {1, 1, 65, 513, 8, false, true},   /* a second key block of one key, padded */
        /* 16 (batch, head) pairs, not causal, kept weights: query tiles of
         * 256 rows (cg_attn_tile_rows), here 256 + 1; head dims past a
         * vector (17) and odd (7) */
        {2, 8, 257, 100, 7, false, true},
        {1, 16, 300, 256, 17, false, false},
        {2, 8, 1, 17, 31, false, true},  /* one query, 16 pairs */
        {1, 1, 65, 65, 65, true, false}, /* a head dim past 64 */
    };
    cg_rng r = cg_rng_new(31);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const attn_case *c = &cases[ci];
        const int64_t B = c->B, H = c->H, Tq = c->Tq, Tk = c->Tk, dh = c->dh;
        cg_tensor *in[4] = {
            cg_randn(&r, CG_SHAPE(B, H, Tq, dh)), cg_randn(&r, CG_SHAPE(B, H, Tk, dh)),
            cg_randn(&r, CG_SHAPE(B, H, Tk, dh)), cg_randn(&r, CG_SHAPE(B, H, Tq, dh))};
        uint8_t *pad = attn_pad(c);
        cg_tensor *res[6];
        attn_run(c, in, pad, res);
        float *q = cg_test_values(in[0]), *k = cg_test_values(in[1]), *v = cg_test_values(in[2]);
        float *g = cg_test_values(in[3]);
        float *o = cg_test_values(res[0]), *lse = cg_test_values(res[1]);
        float *w = cg_test_values(res[2]), *dq = cg_test_values(res[3]);
        float *dk = cg_test_values(res[4]), *dv = cg_test_values(res[5]);
        double *P = malloc((size_t)Tk * sizeof(double)), *dP = malloc((size_t)Tk * sizeof(double));
        double *rdk = calloc((size_t)(Tk * dh), sizeof(double));
        double *rdv = calloc((size_t)(Tk * dh), sizeof(double));
        const double sc = sqrt((double)dh);
        double worst = 0.0;
        for (int64_t bh = 0; bh < B * H; bh++) {
            const int64_t b = bh / H;
            const float *qb = q + bh * Tq * dh, *kb = k + bh * Tk * dh, *vb = v + bh * Tk * dh;
            const float *gb = g + bh * Tq * dh;
            memset(rdk, 0, (size_t)(Tk * dh) * sizeof(double));
            memset(rdv, 0, (size_t)(Tk * dh) * sizeof(double));
            for (int64_t i = 0; i < Tq; i++) {
                double mx = -INFINITY, sum = 0.0, dot = 0.0;
                for (int64_t j = 0; j < Tk; j++) {
                    bool masked = (c->causal && j > i) || (pad && pad[b * Tk + j]);
                    double s = 0.0;
                    for (int64_t e = 0; e < dh; e++)
                        s += (double)qb[i * dh + e] * kb[j * dh + e];
                    P[j] = masked ? -INFINITY : s / sc;
                    mx = P[j] > mx ? P[j] : mx;
                }
                for (int64_t j = 0; j < Tk; j++)
                    sum += (P[j] = exp(P[j] - mx));
                const int64_t row = bh * Tq + i;
                if (Tk > 256) /* saved: the log-sum-exps (hi, lo), else the weights */
                    worst = fmax(worst, fabs((double)lse[bh * 2 * Tq + i] +
                                             lse[bh * 2 * Tq + Tq + i] - (mx + log(sum))));
                for (int64_t j = 0; j < Tk; j++) {
                    P[j] /= sum;
                    worst = fmax(worst, fabs(w[row * Tk + j] - P[j]));
                    dP[j] = 0.0;
                    for (int64_t e = 0; e < dh; e++)
                        dP[j] += (double)gb[i * dh + e] * vb[j * dh + e];
                    dot += P[j] * dP[j];
                }
                for (int64_t e = 0; e < dh; e++) {
                    double oe = 0.0, dqe = 0.0;
                    for (int64_t j = 0; j < Tk; j++) {
                        double ds = P[j] * (dP[j] - dot) / sc;
                        oe += P[j] * vb[j * dh + e];
                        dqe += ds * kb[j * dh + e];
                        rdk[j * dh + e] += ds * qb[i * dh + e];
                        rdv[j * dh + e] += P[j] * gb[i * dh + e];
                    }
                    worst = fmax(worst, fabs(o[row * dh + e] - oe));
                    worst = fmax(worst, fabs(dq[row * dh + e] - dqe));
                }
            }
            for (int64_t j = 0; j < Tk * dh; j++) {
                worst = fmax(worst, fabs(dk[bh * Tk * dh + j] - rdk[j]));
                worst = fmax(worst, fabs(dv[bh * Tk * dh + j] - rdv[j]));
            }
        }
        if (!(worst < 1e-5)) /* also fails on NaN */
            ck_abort_msg("attention case %zu: worst difference from double %g", ci, worst);

        /* 1 and 2 threads: the same bits */
        cg_tensor *res1[6];
        cg_set_num_threads(1);
        attn_run(c, in, pad, res1);
        cg_set_num_threads(2);
        cg_tensor *res2[6];
        attn_run(c, in, pad, res2);
        cg_set_num_threads(0);
        for (int j = 0; j < 6; j++) {
            ck_assert_msg(bit_equal(res1[j], res2[j]) && bit_equal(res1[j], res[j]),
                          "attention case %zu: result %d differs between thread counts", ci, j);
            cg_release_all(3, res[j], res1[j], res2[j]);
        }
        free(q), free(k), free(v), free(g), free(o), free(lse), free(w), free(dq), free(dk);
        free(dv), free(P), free(dP), free(rdk), free(rdv), free(pad);
        cg_release_all(4, in[0], in[1], in[2], in[3]);
    }
}
END_TEST

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The kept weights of the fused attention are the softmax of the scaled
 * scores bit for bit as the scalar code defines it: ew_expf of s / scale
 * minus the row's maximum, masked keys 0, the sum in 8 double lanes
 * (sum_lanes), each weight times the sum's reciprocal. Integer q and k
 * make every score exact on any product path. Rows within
 * EW_EXP_NORMAL_MIN of their maximum take the exponential's faster kernel,
 * rows spread wider (q scaled up) the general one; with key padding,
 * causal masks, rows of under and over 16 keys and a fully masked row
 * (NaN, as PyTorch). */
START_TEST(test_attention_weights_bits)
{
    const int64_t B = 2, H = 2, dh = 16;
    const int64_t Ts[] = {13, 40};
    cg_rng r = cg_rng_new(37);
    for (int ti = 0; ti < 2; ti++)
        for (int causal = 0; causal < 2; causal++) {
            const int64_t T = Ts[ti];
            cg_tensor *q = cg_empty(CG_SHAPE(B, H, T, dh)), *k = cg_empty(CG_SHAPE(B, H, T, dh));
            cg_tensor *v = cg_randn(&r, CG_SHAPE(B, H, T, dh));
            float *qp = cg_data(q), *kp = cg_data(k);
            for (int64_t i = 0; i < cg_numel(q); i++) {
                const int64_t row = i / dh;
                qp[i] = (float)((int64_t)(cg_rng_uniform(&r) * 7.0f) - 3) * (row % 3 ? 1 : 8);
                kp[i] = (float)((int64_t)(cg_rng_uniform(&r) * 7.0f) - 3);
            }
            uint8_t *pad = calloc((size_t)(B * T), 1);
            for (int64_t j = 0; j < T; j++) /* batch 1: keys 2, 7, ... padded; batch 0 none */
                pad[T + j] = j % 5 == 2 || (causal && j == 0);
            cg_tensor *kpad = cg_test_mask(CG_SHAPE(B, T), pad);
            cg_tensor *saved = NULL, *w = NULL;
            cg_tensor *o = cg_k_attention(q, k, v, causal, kpad, &saved, &w);
            ck_assert_ptr_nonnull(o);
            const float *wp = cg_data(w);
            const float scale = 4.0f; /* sqrt(dh) */
            int normal_rows = 0, wide_rows = 0;
            for (int64_t bh = 0; bh < B * H; bh++)
                for (int64_t i = 0; i < T; i++) {
                    const int64_t b = bh / H, ke = causal ? i + 1 : T;
                    float x[64], e[64], mx = -INFINITY, mn = INFINITY;
                    for (int64_t j = 0; j < ke; j++) {
                        float sc = 0.0f;
                        for (int64_t c = 0; c < dh; c++)
                            sc += qp[(bh * T + i) * dh + c] * kp[(bh * T + j) * dh + c];
                        x[j] = pad[b * T + j] ? -INFINITY : sc / scale;
                        mx = x[j] > mx ? x[j] : mx;
                        mn = pad[b * T + j] || x[j] > mn ? mn : x[j];
                    }
                    if (mx != -INFINITY && mn - mx >= EW_EXP_NORMAL_MIN)
                        normal_rows++;
                    else if (mx != -INFINITY)
                        wide_rows++;
                    for (int64_t j = 0; j < ke; j++)
                        e[j] = ew_expf(x[j] - mx);
                    const double inv = 1.0 / sum_lanes(e, NULL, ke);
                    for (int64_t j = 0; j < T; j++) {
                        const float want = j < ke ? (float)(e[j] * inv) : 0.0f;
                        const float got = wp[(bh * T + i) * T + j];
                        if (!(isnan(want) && isnan(got)))
                            ck_assert_msg(bits_of(got) == bits_of(want),
                                          "T %lld causal %d (%lld,%lld) key %lld: %a, want %a",
                                          (long long)T, causal, (long long)bh, (long long)i,
                                          (long long)j, (double)got, (double)want);
                    }
                }
            ck_assert(normal_rows > 0 && wide_rows > 0);
            free(pad);
            cg_release_all(6, q, k, v, saved, w, o); /* kpad: the harness holds it */
        }
}
END_TEST

/* Weights recomputed from the log-sum-exps (257 to 512 keys in fp32: one
 * key block) where the scores are large: lse = m + log(sum), rounded to
 * float, is off by up to half an ulp of |lse| (5e-4 at 1e4), so exp(s -
 * lse) sums to 1 + 5e-4, not 1. The backward took D = <P, dP> from those
 * weights, so each row's dS = P (dP - D) summed to -5e-4 D instead of 0
 * (a shift of all of a row's scores changes nothing), and dq and dk came
 * out with errors of 0.17 and 0.31 of their size (PyTorch: 1e-3) at 257
 * keys with q of 1e4 times randn, against 4e-3 at 256 keys (kept weights)
 * and 1e-3 at 513 (several key blocks). Integer q and k with a common
 * offset of the keys (scores near 1e4, exact on any path; the offset
 * changes no weight): the weights asked for sum to 1, the sum of dk over
 * the keys is 0 and the sum of dv over the keys is the sum of dO over the
 * queries (the weights of a row sum to 1), each to float rounding. Over
 * several key blocks (513 and 1,100 keys) the weights cannot be divided by
 * their sum block by block: there the log-sum-exp is kept as two floats
 * (cg_attn_row_lse), which took the sum of dv - dO at 513 keys from 9e-3
 * (the rounded lse alone) to 7e-6. */
START_TEST(test_attention_recomputed_large_scores)
{
    const int64_t B = 1, H = 2, dh = 16, Ts[5] = {257, 300, 512, 513, 1100};
    cg_rng r = cg_rng_new(43);
    for (int ti = 0; ti < 5; ti++) {
        const int64_t T = Ts[ti];
        cg_tensor *q = cg_empty(CG_SHAPE(B, H, T, dh)), *k = cg_empty(CG_SHAPE(B, H, T, dh));
        cg_tensor *v = cg_randn(&r, CG_SHAPE(B, H, T, dh)),
                  *g = cg_randn(&r, CG_SHAPE(B, H, T, dh));
        float *qp = cg_data(q), *kp = cg_data(k);
        for (int64_t i = 0; i < cg_numel(q); i++) {
            qp[i] = (float)(1 + (int64_t)(cg_rng_uniform(&r) * 3.0f)); /* 1..3 */
            kp[i] = (float)(1000 + (int64_t)(cg_rng_uniform(&r) * 5.0f) - 2);
        }
        cg_tensor *saved = NULL, *w = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
        cg_tensor *o = cg_k_attention(q, k, v, false, NULL, &saved, &w);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(saved->ndim, 3); /* recomputed */
        ck_assert(cg_k_attention_backward(q, k, v, o, saved, g, false, NULL, &dq, &dk, &dv));
        const float *wp = cg_data(w), *gp = cg_data(g);
        float *dkv = cg_test_values(dk), *dvv = cg_test_values(dv);
        double wsum = 0.0, ksum = 0.0, kbig = 0.0, vsum = 0.0;
        for (int64_t row = 0; row < B * H * T; row++) {
            double s = 0.0;
            for (int64_t j = 0; j < T; j++)
                s += wp[row * T + j];
            wsum = fmax(wsum, fabs(s - 1.0));
        }
        for (int64_t bh = 0; bh < B * H; bh++)
            for (int64_t e = 0; e < dh; e++) {
                double sk = 0.0, sv = 0.0;
                for (int64_t j = 0; j < T; j++) {
                    sk += dkv[(bh * T + j) * dh + e];
                    sv += dvv[(bh * T + j) * dh + e] - gp[(bh * T + j) * dh + e];
                    kbig = fmax(kbig, fabs(dkv[(bh * T + j) * dh + e]));
                }
                ksum = fmax(ksum, fabs(sk));
                vsum = fmax(vsum, fabs(sv));
            }
        ck_assert_msg(wsum < 1e-5 && ksum < 1e-4 * kbig && vsum < 1e-3,
                      "T %lld: rows of weights sum to 1 +- %g; sum of dk over keys %g (|dk| %g); "
                      "sum of dv - dO %g",
                      (long long)T, wsum, ksum, kbig, vsum);
        free(dkv), free(dvv);
        cg_release_all(10, q, k, v, g, saved, w, o, dq, dk, dv);
    }
}
END_TEST

/* The backward refuses saved state of another shape with one line that
 * says what it expected: the log-sum-exps of [B,H,Tq] (their shape before
 * they became two floats a row) or a non-contiguous view of them, and
 * weights beyond the keys that keep them, named with the shapes it takes
 * (it said "saved state [1, 2, 300] do not match q/k", q [1, 2, 300, 8]);
 * a gradient of another shape is named as such. */
START_TEST(test_attention_saved_shape_refused)
{
    cg_rng r = cg_rng_new(44);
    cg_tensor *q = cg_randn(&r, CG_SHAPE(1, 2, 300, 8)), *g = cg_randn(&r, CG_SHAPE(1, 2, 300, 8));
    cg_tensor *saved = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    cg_tensor *o = cg_k_attention(q, q, q, false, NULL, &saved, NULL);
    ck_assert(o && saved && saved->ndim == 3);
    cg_tensor *twice = cg_k_concat((cg_tensor *[]){saved, saved}, 2, 2);
    cg_tensor *bad[3] = {cg_view_narrow(saved, 2, 0, 300), cg_view_slice(twice, 2, 0, 1200, 2),
                         cg_zeros(CG_SHAPE(1, 2, 300, 300))};
    const char *want[3] = {"[1, 2, 600]", "contiguous", "up to 256 keys; k has 300"};
    for (int i = 0; i < 3; i++) {
        ck_assert(!cg_k_attention_backward(q, q, q, o, bad[i], g, false, NULL, &dq, &dk, &dv));
        ck_assert_msg(strstr(cg_last_error(), "attention backward: saved state") &&
                          strstr(cg_last_error(), want[i]),
                      "%d: '%s'", i, cg_last_error());
        cg_release(bad[i]);
    }
    cg_tensor *g2 = cg_randn(&r, CG_SHAPE(1, 2, 300, 4));
    ck_assert(!cg_k_attention_backward(q, q, q, o, saved, g2, false, NULL, &dq, &dk, &dv));
    ck_assert_msg(strstr(cg_last_error(), "gradient [1, 2, 300, 4]") &&
                      strstr(cg_last_error(), "q's shape [1, 2, 300, 8]"),
                  "'%s'", cg_last_error());
    ck_assert(cg_k_attention_backward(q, q, q, o, saved, g, false, NULL, &dq, &dk, &dv));
    cg_release_all(9, q, g, g2, o, saved, twice, dq, dk, dv);
}
END_TEST

/* Attention over no keys (k and v [B,H,0,dh]): each query's output is the
 * empty weighted sum, zeros, as PyTorch's softmax(q k^T) v gives and as
 * cg_scaled_dot_product_attention's masked path gives; dq is zero too. A
 * query whose keys are all masked is NaN (test_attention_weights_bits):
 * it has keys, none of which it may see. */
START_TEST(test_attention_no_keys)
{
    cg_rng r = cg_rng_new(41);
    for (int bf = 0; bf < 2; bf++)
        for (int causal = 0; causal < 2; causal++) {
            cg_precision prev = cg_autocast_begin(bf ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
            cg_tensor *q = cg_randn(&r, CG_SHAPE(2, 2, 3, 4));
            cg_tensor *k = cg_empty(CG_SHAPE(2, 2, 0, 4)), *v = cg_empty(CG_SHAPE(2, 2, 0, 4));
            cg_tensor *kpad = cg_test_mask(CG_SHAPE(2, 0), NULL);
            cg_tensor *saved = NULL, *w = NULL;
            cg_tensor *o = cg_k_attention(q, k, v, causal, kpad, &saved, &w);
            ck_assert_ptr_nonnull(o);
            ck_assert_int_eq(cg_numel(o), 2 * 2 * 3 * 4);
            ck_assert_int_eq(cg_numel(w), 0);
            float *ov = cg_test_values(o);
            for (int64_t i = 0; i < cg_numel(o); i++)
                ck_assert_msg(ov[i] == 0.0f, "bf16 %d causal %d: output %lld is %g, want 0", bf,
                              causal, (long long)i, (double)ov[i]);
            free(ov);
            cg_tensor *g = cg_ones(CG_SHAPE(2, 2, 3, 4)), *dq = NULL, *dk = NULL, *dv = NULL;
            ck_assert(cg_k_attention_backward(q, k, v, o, saved, g, causal, kpad, &dq, &dk, &dv));
            float *dqv = cg_test_values(dq);
            for (int64_t i = 0; i < cg_numel(dq); i++)
                ck_assert(dqv[i] == 0.0f);
            ck_assert_int_eq(cg_numel(dk) + cg_numel(dv), 0);
            free(dqv);
            cg_release_all(10, q, k, v, saved, w, o, g, dq, dk, dv);
            cg_autocast_begin(prev);
        }
}
END_TEST

static Suite *nnkernels_suite(void)
{
    Suite *s = suite_create("nnkernels");
    TCase *tc = tcase_create("softmax");
    tcase_add_test(tc, test_softmax_dims);
    tcase_add_test(tc, test_softmax_layouts);
    tcase_add_test(tc, test_softmax_extreme);
    tcase_add_test(tc, test_softmax_backward);
    tcase_add_test(tc, test_softmax_backward_masked);
    tcase_add_test(tc, test_softmax_scalar_and_empty);
    tcase_add_test(tc, test_softmax_wide_inner);
    tcase_add_test(tc, test_softmax_max_last);
    tcase_add_test(tc, test_softmax_threads);
    tcase_add_test(tc, test_softmax_long_rows);
    tcase_add_test(tc, test_softmax_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("cross_entropy");
    tcase_add_checked_fixture(tc, NULL, ce_fp32);
    tcase_add_loop_test(tc, test_ce_plain, 0, 2);
    tcase_add_loop_test(tc, test_ce_label_smoothing, 0, 2);
    tcase_add_loop_test(tc, test_ce_pad_ignore, 0, 2);
    tcase_add_loop_test(tc, test_ce_all_ignored, 0, 2);
    tcase_add_test(tc, test_nll_strided);
    tcase_add_loop_test(tc, test_ce_extreme, 0, 2);
    tcase_add_loop_test(tc, test_ce_vs_double, 0, 2);
    tcase_add_loop_test(tc, test_ce_threads, 0, 2);
    tcase_add_loop_test(tc, test_ce_grad_in_forward, 0, 2);
    tcase_add_loop_test(tc, test_ce_exp_range, 0, 2);
    tcase_add_test(tc, test_ce_sum_accumulates);
    tcase_add_test(tc, test_ce_nan_payload);
    tcase_add_test(tc, test_ce_autocast_lanes);
    tcase_add_test(tc, test_ce_errors);
    tcase_add_test(tc, test_ce_past_2_31);
    suite_add_tcase(s, tc);
    tc = tcase_create("norm");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_layer_norm);
    tcase_add_test(tc, test_rms_norm);
    tcase_add_test(tc, test_layer_norm_large_offset);
    tcase_add_test(tc, test_norm_threads);
    tcase_add_test(tc, test_norm_errors);
    tcase_add_test(tc, test_add_norm_fused);
    tcase_add_test(tc, test_norm_backward_into);
    suite_add_tcase(s, tc);
    tc = tcase_create("dropout");
    tcase_add_test(tc, test_dropout_identity);
    tcase_add_test(tc, test_dropout_stats);
    tcase_add_test(tc, test_dropout_draws);
    tcase_add_test(tc, test_dropout_draw_equal_to_p);
    tcase_add_test(tc, test_dropout_determinism);
    tcase_add_test(tc, test_dropout_backward);
    tcase_add_test(tc, test_dropout_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("attention");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_attention_tiled_vs_double);
    tcase_add_test(tc, test_attention_weights_bits);
    tcase_add_test(tc, test_attention_no_keys);
    tcase_add_test(tc, test_attention_recomputed_large_scores);
    tcase_add_test(tc, test_attention_saved_shape_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = nnkernels_suite();
    return cg_test_run(&s, 1);
}
