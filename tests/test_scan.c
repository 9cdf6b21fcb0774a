/* Sorting, products and scans (autograd/ops_scan.c, core/scan.c): sort,
 * argsort, prod, prod_all, cumprod, logcumsumexp, cummax, cummin, std,
 * var_mean, std_mean, one_hot. Values worked out by hand (ties, NaN,
 * zeros, infinities, empty dims, transposed inputs), gradients at zeros
 * against the product of the others, gradchecks of the picking ops and
 * of the products with zeros, bf16 against float64, refusals by message,
 * and 1 and 2 threads giving the same bits. PyTorch's answers on random
 * cases: tests/interop (make_op_cases.py gen_scan). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

/* t's values are want's (NaN where NaN); t released */
static void expect(cg_tensor *t, const float *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    float *v = cg_test_values(t);
    for (int64_t i = 0; i < cg_numel(t); i++) {
        const bool same = isnan(want[i]) ? isnan(v[i]) : v[i] == want[i];
        ck_assert_msg(same, "%s: element %lld is %.9g, expected %.9g", what, (long long)i,
                      (double)v[i], (double)want[i]);
    }
    free(v);
    cg_release(t);
}

static void expect_ids(const cg_tensor *t, const int64_t *want, const char *what)
{
    ck_assert_msg(t && t->dtype == CG_I64, "%s: %s", what, t ? "not int64" : cg_last_error());
    cg_tensor *c = cg_k_contiguous(t);
    for (int64_t i = 0; i < cg_numel(c); i++)
        ck_assert_msg(cg_data_i64(c)[i] == want[i], "%s: index %lld is %lld, expected %lld", what,
                      (long long)i, (long long)cg_data_i64(c)[i], (long long)want[i]);
    cg_release(c);
}

/* x's gradient of sum(y * w) */
static float *grad_of(cg_tensor *x, cg_tensor *y, const float *w)
{
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    cg_tensor *wt = cg_from_data(y->ndim, y->shape, w), *p = cg_mul(y, wt), *l = cg_sum_all(p);
    cg_zero_grad(x);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    float *g = cg_test_values(x->grad);
    cg_release_all(4, wt, p, l, y);
    return g;
}

static void expect_grad(float *g, const float *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(
            isnan(want[i]) ? isnan(g[i]) : fabsf(g[i] - want[i]) <= 1e-6f * (1 + fabsf(want[i])),
            "%s: gradient %d is %.9g, expected %.9g", what, i, (double)g[i], (double)want[i]);
    free(g);
}

/* ---------------------------------------------------------------- sort */
START_TEST(test_sort_order)
{
    const float nan = NAN, inf = INFINITY;
    cg_tensor *x = cg_from_data(CG_SHAPE(7), (const float[]){3, nan, 1, 3, -inf, 0, nan});
    cg_tensor *ids = NULL;
    expect(cg_sort(x, 0, false, true, &ids), (const float[]){-inf, 0, 1, 3, 3, nan, nan}, "asc");
    expect_ids(ids, (const int64_t[]){4, 5, 2, 0, 3, 1, 6}, "asc ids (stable: 0 before 3)");
    cg_release(ids);
    expect(cg_sort(x, -1, true, false, &ids), (const float[]){nan, nan, 3, 3, 1, 0, -inf}, "desc");
    expect_ids(ids, (const int64_t[]){1, 6, 0, 3, 2, 5, 4}, "desc ids (NaN first, ties in order)");
    cg_release(ids);
    cg_tensor *a = cg_argsort(x, 0, true, true);
    expect_ids(a, (const int64_t[]){1, 6, 0, 3, 2, 5, 4}, "argsort");
    cg_release(a);
    /* along dim 0 of a transposed view: [[2, 1], [0, 5], [-1, 1]] */
    cg_tensor *b = cg_from_data(CG_SHAPE(2, 3), (const float[]){2, 0, -1, 1, 5, 1});
    cg_tensor *t = cg_transpose(b, 0, 1);
    expect(cg_sort(t, 0, false, true, &ids), (const float[]){-1, 1, 0, 1, 2, 5}, "dim 0 of .T");
    expect_ids(ids, (const int64_t[]){2, 0, 1, 2, 0, 1}, "dim 0 of .T ids");
    cg_release(ids);
    /* 0-d: itself, index 0; an empty dim: empty */
    cg_tensor *s = cg_test_scalar(4.0f), *e = cg_zeros(CG_SHAPE(3, 0));
    cg_tensor *v = cg_sort(s, 0, false, true, &ids);
    ck_assert(v && v->ndim == 0 && ids->ndim == 0 && cg_data_i64(ids)[0] == 0);
    cg_release_all(2, v, ids);
    v = cg_sort(e, 1, true, true, &ids);
    ck_assert(v && cg_numel(v) == 0 && ids && ids->shape[0] == 3 && ids->shape[1] == 0);
    cg_release_all(6, v, ids, x, b, t, e);
}
END_TEST

/* The gradient of the values goes back to where each came from; bf16
 * values come back bf16, in the order of their float32 values */
START_TEST(test_sort_gradient)
{
    cg_tensor *x =
        cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), (const float[]){5, -1, 2, 0, 7, 7}), true);
    cg_tensor *ids;
    cg_tensor *y = cg_sort(x, 1, false, true, &ids); /* [[-1, 2, 5], [0, 7, 7]] */
    cg_release(ids);
    expect_grad(grad_of(x, y, (const float[]){1, 2, 3, 4, 5, 6}), (const float[]){3, 1, 2, 4, 5, 6},
                6, "sort");
    y = cg_cummax(x, 1, NULL); /* [[5, 5, 5], [0, 7, 7 (the later)]] */
    expect_grad(grad_of(x, y, (const float[]){1, 2, 3, 4, 5, 6}), (const float[]){6, 0, 0, 4, 5, 6},
                6, "cummax");
    cg_tensor *xb = cg_k_to(x, CG_BF16);
    cg_tensor *vb = cg_sort(xb, 1, true, true, &ids);
    ck_assert(vb && vb->dtype == CG_BF16);
    expect(vb, (const float[]){5, 2, -1, 7, 7, 0}, "bf16 desc");
    expect_ids(ids, (const int64_t[]){0, 2, 1, 1, 2, 0}, "bf16 desc ids");
    cg_release_all(3, x, xb, ids);
}
END_TEST

/* ------------------------------------------------------------- cummax */
START_TEST(test_cummax_cummin)
{
    const float nan = NAN;
    cg_tensor *x = cg_from_data(CG_SHAPE(7), (const float[]){1, 3, 3, 2, nan, 5, nan});
    cg_tensor *ids;
    expect(cg_cummax(x, 0, &ids), (const float[]){1, 3, 3, 3, nan, nan, nan}, "cummax");
    expect_ids(ids, (const int64_t[]){0, 1, 2, 2, 4, 4, 6}, "cummax ids (ties: the later)");
    cg_release(ids);
    expect(cg_cummin(x, -1, &ids), (const float[]){1, 1, 1, 1, nan, nan, nan}, "cummin");
    expect_ids(ids, (const int64_t[]){0, 0, 0, 0, 4, 4, 6}, "cummin ids");
    cg_release(ids);
    cg_tensor *b = cg_from_data(CG_SHAPE(3, 2), (const float[]){2, 0, 1, 0, 1, -1});
    expect(cg_cummin(b, 0, &ids), (const float[]){2, 0, 1, 0, 1, -1}, "cummin dim 0");
    expect_ids(ids, (const int64_t[]){0, 0, 1, 1, 2, 2}, "cummin dim 0 ids (ties: the later)");
    cg_release_all(3, ids, x, b);
}
END_TEST

/* ------------------------------------------------------------ products */
/* PyTorch's gradient at zeros: one zero in a line, the others' product
 * there and 0 elsewhere; two, 0 everywhere */
START_TEST(test_prod_zeros)
{
    cg_tensor *x = cg_requires_grad(
        cg_from_data(CG_SHAPE(3, 3), (const float[]){2, 3, 4, 2, 0, 3, 0, 5, 0}), true);
    expect(cg_prod(x, 1, false), (const float[]){24, 0, 0}, "prod");
    expect_grad(grad_of(x, cg_prod(x, 1, false), (const float[]){1, 2, 3}),
                (const float[]){12, 8, 6, 0, 12, 0, 0, 0, 0}, 9, "prod gradient");
    cg_tensor *k = cg_prod(x, 0, true);
    ck_assert(k && k->ndim == 2 && k->shape[0] == 1 && k->shape[1] == 3);
    expect(k, (const float[]){0, 0, 0}, "prod dim 0 keepdim");
    expect_grad(grad_of(x, cg_prod(x, 0, true), (const float[]){1, 1, 1}),
                (const float[]){0, 0, 0, 0, 15, 0, 4, 0, 12}, 9, "prod dim 0 gradient");
    cg_tensor *r = cg_slice(x, 0, 0, 1, 1); /* [2, 3, 4] */
    expect_grad(grad_of(x, cg_prod_all(r), (const float[]){1}),
                (const float[]){12, 8, 6, 0, 0, 0, 0, 0, 0}, 9, "prod_all");
    /* integers and bool: int64, as PyTorch; an empty dim's product is 1 */
    cg_tensor *xi = cg_test_ids_nd(CG_SHAPE(2, 2), (const int64_t[]){2, -3, 4, 5});
    cg_tensor *pi = cg_prod(xi, 1, false), *ai = cg_prod_all(xi);
    expect_ids(pi, (const int64_t[]){-6, 20}, "int64 prod");
    expect_ids(ai, (const int64_t[]){-120}, "int64 prod_all");
    cg_tensor *bb = cg_k_to(xi, CG_BOOL), *pb = cg_prod(bb, 0, false);
    expect_ids(pb, (const int64_t[]){1, 1}, "bool prod");
    cg_tensor *e = cg_zeros(CG_SHAPE(2, 0));
    expect(cg_prod(e, 1, false), (const float[]){1, 1}, "empty prod");
    cg_release_all(7, x, r, pi, ai, bb, pb, e);
}
END_TEST

/* cumprod's gradient with zeros: dx_k = sum_{j >= k} g_j prod_{i <= j,
 * i != k} x_i; its values in double, as PyTorch's */
START_TEST(test_cumprod_zeros)
{
    cg_tensor *x =
        cg_requires_grad(cg_from_data(CG_SHAPE(5), (const float[]){2, 0, 3, 0, 5}), true);
    expect(cg_cumprod(x, 0), (const float[]){2, 0, 0, 0, 0}, "cumprod");
    expect_grad(grad_of(x, cg_cumprod(x, 0), (const float[]){1, 1, 1, 1, 1}),
                (const float[]){1, 8, 0, 0, 0}, 5, "two zeros");
    cg_tensor *y = cg_requires_grad(cg_from_data(CG_SHAPE(4), (const float[]){2, 3, 0, 4}), true);
    /* k=0: 1 + 3; k=1: 2; k=2: 6 + 6*4; k=3: 0 */
    expect_grad(grad_of(y, cg_cumprod(y, 0), (const float[]){1, 1, 1, 1}),
                (const float[]){4, 2, 30, 0}, 4, "one zero");
    cg_tensor *z = cg_requires_grad(cg_from_data(CG_SHAPE(3), (const float[]){2, 3, 4}), true);
    expect_grad(grad_of(z, cg_cumprod(z, 0), (const float[]){1, 2, 3}),
                (const float[]){1 + 6 + 36, 4 + 24, 18}, 3, "no zero");
    /* in double, rounded once: (1 + 2^-12)^3 is 1 + 3 2^-12 + 2^-22 so,
     * 1 + 3 2^-12 + 2^-23 in float32 steps */
    const float u = 1.0f + 0x1p-12f;
    const volatile float u2 = u * u;
    ck_assert(u2 * u != (float)((double)u * u * u)); /* the steps do differ */
    cg_tensor *d = cg_from_data(CG_SHAPE(3), (const float[]){u, u, u});
    expect(cg_cumprod(d, 0), (const float[]){u, (float)((double)u * u), (float)((double)u * u * u)},
           "double");
    cg_tensor *xi = cg_test_ids(3, (const int64_t[]){3, -2, 4});
    cg_tensor *ci = cg_cumprod(xi, 0);
    expect_ids(ci, (const int64_t[]){3, -6, -24}, "int64 cumprod");
    cg_release_all(5, x, y, z, d, ci);
}
END_TEST

/* --------------------------------------------------------- logcumsumexp */
START_TEST(test_logcumsumexp_inf)
{
    const float inf = INFINITY;
    cg_tensor *x =
        cg_requires_grad(cg_from_data(CG_SHAPE(4), (const float[]){-inf, -inf, 0, logf(3)}), true);
    expect(cg_logcumsumexp(x, 0), (const float[]){-inf, -inf, 0, (float)log(4.0)}, "-inf run");
    /* the -inf run's gradient is 0 (PyTorch: NaN); then g_j exp(x_k - y_j) */
    expect_grad(grad_of(x, cg_logcumsumexp(x, 0), (const float[]){1, 1, 1, 1}),
                (const float[]){0, 0, 1.25f, 0.75f}, 4, "-inf run gradient");
    cg_tensor *p = cg_from_data(CG_SHAPE(3), (const float[]){1, inf, 2});
    expect(cg_logcumsumexp(p, 0), (const float[]){1, inf, inf}, "+inf");
    /* against float64 on a long row, and bf16 within its rounding */
    cg_rng r = cg_rng_new(3);
    cg_tensor *w = cg_randn(&r, CG_SHAPE(2, 300)), *y = cg_logcumsumexp(w, 1);
    cg_tensor *wb = cg_k_to(w, CG_BF16), *yb = cg_logcumsumexp(wb, 1);
    float *wv = cg_test_values(w), *yv = cg_test_values(y), *ybv = cg_test_values(yb);
    float *wbv = cg_test_values(wb);
    for (int row = 0; row < 2; row++) {
        double s = 0, sb = 0;
        for (int i = 0; i < 300; i++) {
            s += exp((double)wv[row * 300 + i]);
            sb += exp((double)wbv[row * 300 + i]);
            ck_assert(fabs(yv[row * 300 + i] - log(s)) <= 1e-6 * (1 + fabs(log(s))));
            ck_assert(fabs(ybv[row * 300 + i] - log(sb)) <= 0x1p-8 * fabs(log(sb)) + 1e-6);
        }
    }
    free(wv), free(yv), free(ybv), free(wbv);
    cg_release_all(6, x, p, w, y, wb, yb);
}
END_TEST

/* ------------------------------------------------------------ std */
START_TEST(test_std_and_means)
{
    cg_tensor *x = cg_requires_grad(
        cg_from_data(CG_SHAPE(2, 4), (const float[]){1, 2, 3, 4, 1.5f, 1.5f, 1.5f, 1.5f}), true);
    const int d1[] = {1};
    expect(cg_std(x, 1, d1, 1, false), (const float[]){(float)sqrt(5.0 / 3), 0}, "std");
    /* d std / dx = (x - mean) / ((N - c) std); a row of std 0: 0 (PyTorch's), not NaN */
    const double sd = sqrt(5.0 / 3);
    expect_grad(grad_of(x, cg_std(x, 1, d1, 1, false), (const float[]){1, 1}),
                (const float[]){(float)(-1.5 / (3 * sd)), (float)(-0.5 / (3 * sd)),
                                (float)(0.5 / (3 * sd)), (float)(1.5 / (3 * sd)), 0, 0, 0, 0},
                8, "std gradient");
    cg_tensor *m = NULL, *v = cg_var_mean(x, 1, d1, 0, true, &m);
    ck_assert(v && m && v->ndim == 2 && m->shape[1] == 1);
    expect(v, (const float[]){1.25f, 0}, "var_mean's var");
    expect(m, (const float[]){2.5f, 1.5f}, "var_mean's mean");
    v = cg_std_mean(x, 0, NULL, 0, false, &m);
    ck_assert(v && m && v->ndim == 0);
    cg_release_all(3, v, m, x);
}
END_TEST

/* -------------------------------------------------------------- one_hot */
START_TEST(test_one_hot)
{
    cg_tensor *ids = cg_test_ids_nd(CG_SHAPE(2, 2), (const int64_t[]){0, 2, 1, 0});
    cg_tensor *o = cg_one_hot(ids, 4);
    ck_assert(o && o->ndim == 3 && o->shape[2] == 4);
    expect_ids(o, (const int64_t[]){1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0}, "one_hot");
    cg_release(o);
    o = cg_one_hot(ids, -1); /* max + 1 = 3 */
    ck_assert(o && o->shape[2] == 3);
    expect_ids(o, (const int64_t[]){1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0}, "one_hot inferred");
    cg_release(o);
    cg_tensor *bad = cg_test_ids(3, (const int64_t[]){0, -1, 2});
    CG_ASSERT_REFUSED_LINE(cg_one_hot(bad, 3), "one_hot: ids must be non-negative");
    CG_ASSERT_REFUSED_LINE(cg_one_hot(ids, 2), "one_hot: an id is not below num_classes");
    CG_ASSERT_REFUSED_LINE(cg_one_hot(ids, -2), "one_hot: num_classes must be -1");
    cg_tensor *none = cg_test_ids(0, NULL), *f = cg_k_to(ids, CG_F32);
    CG_ASSERT_REFUSED_LINE(cg_one_hot(none, -1), "one_hot: cannot infer num_classes");
    CG_ASSERT_REFUSED_LINE(cg_one_hot(f, 3), "one_hot: ids are float32, expected int64");
    o = cg_one_hot(none, 3);
    ck_assert(o && o->shape[0] == 0 && o->shape[1] == 3);
    cg_release_all(2, o, f);
}
END_TEST

/* --------------------------------------------------------- refusals */
START_TEST(test_scan_refusals)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3)), *xi = cg_k_to(x, CG_I64), *xb = cg_k_to(x, CG_BOOL);
    cg_tensor *ids = NULL;
    CG_ASSERT_REFUSED_LINE(cg_sort(x, 2, false, true, &ids), "sort: dim 2 out of range");
    ck_assert(ids == NULL);
    CG_ASSERT_REFUSED_LINE(cg_argsort(x, -3, false, true), "sort: dim -3 out of range");
    /* (integer and bool sorts and cummax: test_select.c, since 2026-12-08) */
    CG_ASSERT_REFUSED_LINE(cg_cummin(x, 5, NULL), "cummin: dim 5 out of range");
    CG_ASSERT_REFUSED_LINE(cg_prod(x, 2, false), "prod: dim 2 out of range");
    CG_ASSERT_REFUSED_LINE(cg_cumprod(xi, -3), "cumprod: dim -3 out of range");
    CG_ASSERT_REFUSED_LINE(cg_logcumsumexp(xi, 0), "logcumsumexp: argument 1 is int64");
    CG_ASSERT_REFUSED_LINE(cg_logcumsumexp(x, 2), "logcumsumexp: dim 2 out of range");
    CG_ASSERT_REFUSED_LINE(cg_std(xb, 0, NULL, 1, false), "std: argument 1 is bool");
    CG_ASSERT_REFUSED_LINE(cg_std(x, 1, (const int[]){4}, 1, false), "std: dim 4 out of range");
    CG_ASSERT_REFUSED_LINE(cg_std(x, 0, NULL, -1, false), "std: correction must be >= 0");
    CG_ASSERT_REFUSED_LINE(cg_sort(NULL, 0, false, true, NULL), "cg_k_sort_indices");
    CG_ASSERT_REFUSED_LINE(cg_prod_all(NULL), "cg_prod_all");
    cg_release_all(3, x, xi, xb);
}
END_TEST

/* ------------------------------------------------------- gradchecks */
enum { GC_SORT, GC_SORT_DESC, GC_CUMMAX, GC_CUMMIN, GC_PROD, GC_CUMPROD, GC_PROD_ALL };
static cg_tensor *gc_fn(void *ctx, cg_tensor *const *in)
{
    switch (*(const int *)ctx) {
    case GC_SORT: return cg_sort(in[0], 1, false, true, NULL);
    case GC_SORT_DESC: return cg_sort(in[0], -1, true, false, NULL);
    case GC_CUMMAX: return cg_cummax(in[0], 1, NULL);
    case GC_CUMMIN: return cg_cummin(in[0], 0, NULL);
    case GC_PROD: return cg_prod(in[0], 1, false);
    case GC_CUMPROD: return cg_cumprod(in[0], 1);
    default: return cg_prod_all(in[0]);
    }
}

/* The picking ops on distinct values 0.1 apart (no ties: kinks), and the
 * products on lines holding one or two zeros, contiguous and transposed */
START_TEST(test_scan_gradchecks)
{
    cg_rng r = cg_rng_new(9);
    for (int c = GC_SORT; c <= GC_PROD_ALL; c++)
        for (int layout = 0; layout < 2; layout++) {
            cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(3, 5), layout);
            float *p = (float *)x->storage->data;
            for (int i = 0; i < 15; i++)
                p[i] = c <= GC_CUMMIN ? 0.1f * (float)((i * 7) % 15) - 0.7f
                       : (i == 2 || i == 6 || i == 9 || (c == GC_PROD_ALL && i > 13)) ? 0.0f
                                                                                      : p[i];
            cg_requires_grad(x, true);
            cg_gradcheck_opts o = cg_gradcheck_defaults();
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(gc_fn, &c, 1, &x, &o, &rep), "case %d layout %d: %s", c,
                          layout, rep.message);
            ck_assert(rep.checked > 0);
            cg_release(x);
        }
}
END_TEST

/* ----------------------------------------------------------- threads */
static void run_at(int nt, float *got[2])
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(11);
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(96, 700), 1), true);
    cg_tensor *s = cg_muls(x, 0.01f), *ids = NULL;
    cg_tensor *y[5] = {cg_sort(x, 1, true, true, &ids), cg_cumprod(s, 1), cg_logcumsumexp(x, 0),
                       cg_prod(s, 0, false), cg_cummax(x, 1, NULL)};
    cg_tensor *sum = cg_test_weighted_squares(5, y);
    cg_test_backward_values(sum, 1, &x, got);
    cg_release_all(4, x, s, ids, sum);
}

START_TEST(test_threads_identical)
{
    cg_test_same_bits_1_2_threads(run_at, 2, (const int64_t[]){1, 96 * 700});
}
END_TEST

static Suite *scan_suite(void)
{
    Suite *s = suite_create("scan");
    TCase *tc = tcase_create("scan");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_sort_order);
    tcase_add_test(tc, test_sort_gradient);
    tcase_add_test(tc, test_cummax_cummin);
    tcase_add_test(tc, test_prod_zeros);
    tcase_add_test(tc, test_cumprod_zeros);
    tcase_add_test(tc, test_logcumsumexp_inf);
    tcase_add_test(tc, test_std_and_means);
    tcase_add_test(tc, test_one_hot);
    tcase_add_test(tc, test_scan_refusals);
    tcase_add_test(tc, test_scan_gradchecks);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {scan_suite()};
    return cg_test_run(s, 1);
}
