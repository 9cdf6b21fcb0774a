/* The ops a PyTorch user writing a model reaches for beyond the
 * transformer's (autograd/ops.h): min and argmin, maximum and minimum,
 * logsumexp, leaky_relu, elu and softplus with their parameters.
 * Forward values from
 * PyTorch 1.13 (computed once with /usr/bin/python3, float32, and stored
 * here), edge cases, refusals in one line, bfloat16 inputs, and the same
 * bits at 1 and 2 threads. Their gradchecks are tests/test_grad_ops.c's
 * (its table op_checks); tests/interop/check_ops.c compares every one with
 * PyTorch on random cases (the test torch_ops). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

/* A [3, 4] input: A (below) or values of one's own */
static const float A[12] = {0.5f,  -1.25f, 2.0f, 0.0f,  -0.75f, 1.5f,
                            -2.5f, 1.0f,   3.0f, -0.5f, 0.25f,  -1.0f};
static cg_tensor *mat(const float *v) { return cg_from_data(CG_SHAPE(3, 4), v ? v : A); }

/* t (released) holds want within tol (relative and absolute) */
static void holds(cg_tensor *t, const float *want, double tol, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    CG_ASSERT_TENSOR(t, want, tol, tol);
    cg_release(t);
}

static void expect_i64(const cg_tensor *t, const int64_t *want, int64_t n, const char *what)
{
    ck_assert_msg(t && t->dtype == CG_I64 && cg_numel(t) == n, "%s: %s", what, cg_last_error());
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(cg_data_i64((cg_tensor *)t)[i] == want[i],
                      "%s: index %lld is %lld, want %lld", what, (long long)i,
                      (long long)cg_data_i64((cg_tensor *)t)[i], (long long)want[i]);
}

/* The gradient of sum(f(x) * w) with respect to x, w fixed, as floats. */
static float *grad_of(cg_tensor *y, cg_tensor *x)
{
    cg_tensor *s = cg_sum_all(y);
    ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
    cg_release(s);
    cg_tensor *g = cg_k_to(cg_grad(x), CG_F32);
    float *v = cg_test_values(g);
    cg_release(g);
    return v;
}

/* ------------------------------------------------------------ min */
/* torch.min(x, dim) and torch.argmin: values and indices, the gradient to
 * the first minimum of a tie (as cg_max's to the first maximum), NaN the
 * minimum, bfloat16 values in their dtype, and refusals. */
START_TEST(test_min)
{
    cg_tensor *x = cg_requires_grad(mat(NULL), true), *ids = NULL;
    cg_tensor *v = cg_min(x, 1, false, &ids);
    ck_assert_msg(v && ids, "%s", cg_last_error());
    CG_ASSERT_TENSOR(v, ((float[]){-1.25f, -2.5f, -1}), 0, 0);
    expect_i64(ids, (int64_t[]){1, 2, 3}, 3, "min indices");
    cg_release(ids);
    holds(cg_min(x, -2, true, NULL), (const float[]){-0.75f, -1.25f, -2.5f, -1}, 0, "min dim 0");
    cg_tensor *am = cg_argmin(x, 0, true);
    ck_assert_int_eq(am->ndim, 2);
    expect_i64(am, (int64_t[]){1, 0, 1, 2}, 4, "argmin dim 0");
    float *g = grad_of(v, x);
    CG_ASSERT_CLOSE(g, ((float[]){0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}), 12, 0, 0);
    free(g);
    cg_release_all(3, x, v, am);
    /* ties: the first minimum gets the gradient; NaN is the minimum */
    cg_tensor *t =
        cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), (float[]){2, 1, 1, 4, NAN, -9}), true);
    cg_tensor *tv = cg_min(t, 1, false, &ids);
    ck_assert(tv && cg_data(tv)[0] == 1 && isnan(cg_data(tv)[1]));
    expect_i64(ids, (int64_t[]){1, 1}, 2, "min ties and NaN");
    g = grad_of(tv, t);
    CG_ASSERT_CLOSE(g, ((float[]){0, 1, 0, 0, 1, 0}), 6, 0, 0);
    free(g);
    cg_release_all(3, t, tv, ids);
    /* bfloat16: values in bfloat16, the gradient bfloat16, at the same
     * places as float32's (A is exact in bfloat16) */
    cg_tensor *b = cg_requires_grad(cg_k_to(mat(NULL), CG_BF16), true);
    cg_tensor *bv = cg_min(b, 1, false, &ids);
    ck_assert_msg(bv && bv->dtype == CG_BF16, "%s", cg_last_error());
    expect_i64(ids, (int64_t[]){1, 2, 3}, 3, "min of bf16");
    cg_tensor *s = cg_sum_all(bv);
    ck_assert(s && cg_backward(s, NULL, false));
    ck_assert_int_eq(cg_grad(b)->dtype, CG_BF16);
    cg_release_all(4, b, bv, ids, s);
    /* refusals, one line each */
    cg_tensor *xi = cg_k_to(mat(NULL), CG_I64), *e = cg_zeros(CG_SHAPE(2, 0)), *x2 = mat(NULL);
    CG_ASSERT_REFUSED(cg_min(xi, 0, false, NULL) == NULL,
                      "min: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_argmin(xi, 0, false) == NULL,
                      "argmin: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_min(x2, 2, false, NULL) == NULL,
                      "min: dim 2 out of range for a tensor of shape [3, 4] (expected in [-2, 1])");
    CG_ASSERT_REFUSED(cg_min(e, 1, false, NULL) == NULL,
                      "min: cannot take the min over dim 1 of size 0 (shape [2, 0])");
    CG_ASSERT_REFUSED(cg_min(NULL, 0, false, NULL) == NULL, "cg_k_min: input is NULL");
    cg_release_all(3, xi, e, x2);
}
END_TEST

/* --------------------------------------------------- maximum, minimum */
/* torch.maximum and torch.minimum of A and a broadcast row with ties:
 * PyTorch's values and gradients (half to each operand at a tie, all of
 * it to both where one is NaN), x against itself, bfloat16, refusals. */
START_TEST(test_maximum_minimum)
{
    static const float want[2][3][12] = {
        {{1, -1.25f, 2, 0, 1, 1.5f, 0, 1, 3, -0.5f, 0.25f, 0},
         {0, 0.5f, 1, 0.5f, 0, 1, 0, 1, 1, 1, 1, 0},
         {2, 0.5f, 1, 1.5f}},
        {{0.5f, -1.25f, 0, 0, -0.75f, -1.25f, -2.5f, 0, 1, -1.25f, 0, -1},
         {1, 0.5f, 0, 0.5f, 1, 0, 1, 0, 0, 0, 0, 1},
         {1, 2.5f, 2, 1.5f}},
    };
    for (int mn = 0; mn < 2; mn++) {
        cg_tensor *a = cg_requires_grad(mat(NULL), true);
        cg_tensor *b =
            cg_requires_grad(cg_from_data(CG_SHAPE(4), (float[]){1, -1.25f, 0, 0}), true);
        cg_tensor *m = mn ? cg_minimum(a, b) : cg_maximum(a, b), *s = cg_sum_all(m);
        ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
        CG_ASSERT_TENSOR(m, want[mn][0], 0, 0);
        CG_ASSERT_TENSOR(cg_grad(a), want[mn][1], 0, 0);
        CG_ASSERT_TENSOR(cg_grad(b), want[mn][2], 0, 0);
        cg_release_all(4, a, b, m, s);
        /* x against itself: a tie everywhere, x's gradient g (two halves) */
        cg_tensor *x = cg_requires_grad(mat(NULL), true);
        cg_tensor *xx = mn ? cg_minimum(x, x) : cg_maximum(x, x);
        float *g = grad_of(xx, x);
        CG_ASSERT_TENSOR(xx, A, 0, 0);
        CG_ASSERT_CLOSE(g, ((float[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), 12, 0, 0);
        free(g);
        cg_release_all(2, x, xx);
        /* NaN on either side: NaN, and both operands get the gradient */
        cg_tensor *p = cg_requires_grad(cg_from_data(CG_SHAPE(2), (float[]){NAN, 1}), true);
        cg_tensor *q = cg_requires_grad(cg_from_data(CG_SHAPE(2), (float[]){0, NAN}), true);
        cg_tensor *pq = mn ? cg_minimum(p, q) : cg_maximum(p, q), *ps = cg_sum_all(pq);
        ck_assert(isnan(cg_data(pq)[0]) && isnan(cg_data(pq)[1]));
        ck_assert(cg_backward(ps, NULL, false));
        CG_ASSERT_TENSOR(cg_grad(p), ((float[]){1, 1}), 0, 0);
        CG_ASSERT_TENSOR(cg_grad(q), ((float[]){1, 1}), 0, 0);
        cg_release_all(4, p, q, pq, ps);
    }
    /* bfloat16 with bfloat16: bfloat16, A's values exact; with float32:
     * float32 (promoted) */
    cg_tensor *ab = cg_k_to(mat(NULL), CG_BF16), *z = cg_zeros(CG_SHAPE(1));
    cg_tensor *zb = cg_k_to(z, CG_BF16);
    cg_tensor *m1 = cg_maximum(ab, zb), *m2 = cg_minimum(ab, z);
    ck_assert_msg(m1 && m2, "%s", cg_last_error());
    ck_assert_int_eq(m1->dtype, CG_BF16);
    ck_assert_int_eq(m2->dtype, CG_F32);
    cg_tensor *m1f = cg_k_to(m1, CG_F32);
    CG_ASSERT_TENSOR(m1f, ((float[]){0.5f, 0, 2, 0, 0, 1.5f, 0, 1, 3, 0, 0.25f, 0}), 0, 0);
    /* refusals */
    cg_tensor *ai = cg_k_to(ab, CG_I64), *c = cg_zeros(CG_SHAPE(5));
    CG_ASSERT_REFUSED(cg_maximum(ai, z) == NULL,
                      "maximum: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_minimum(z, ai) == NULL,
                      "minimum: argument 2 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_maximum(ab, c) == NULL, "maximum: ");
    ck_assert_msg(strstr(cg_last_error(), "[3, 4]") && strstr(cg_last_error(), "[5]"), "%s",
                  cg_last_error());
    CG_ASSERT_REFUSED(cg_minimum(NULL, c) == NULL, "minimum: input is NULL");
    cg_release_all(9, ab, z, zb, m1, m2, m1f, ai, c, NULL);
}
END_TEST

/* --------------------------------------------------------- logsumexp */
/* torch.logsumexp: PyTorch's values and gradient, several dims, keepdim,
 * 0-d, rows of -inf (-inf, gradient 0 where PyTorch's is NaN), +inf and
 * NaN, an empty reduction, bfloat16, refusals. */
START_TEST(test_logsumexp)
{
    cg_tensor *x = cg_requires_grad(mat(NULL), true);
    cg_tensor *y = cg_logsumexp(x, 1, (int[]){1}, false);
    ck_assert_msg(y && y->ndim == 1, "%s", cg_last_error());
    CG_ASSERT_TENSOR(y, ((float[]){2.33449864f, 2.04826331f, 3.10655665f}), 1e-6, 1e-6);
    cg_tensor *u = cg_from_data(CG_SHAPE(3), (float[]){1, 2, -1});
    ck_assert(cg_backward(y, u, false));
    CG_ASSERT_TENSOR(cg_grad(x),
                     ((float[]){0.159693539f, 0.0277505778f, 0.715696812f, 0.0968590304f,
                                0.121831521f, 1.15590537f, 0.0211711396f, 0.701092005f,
                                -0.898924112f, -0.0271451566f, -0.0574662983f, -0.0164643656f}),
                     1e-6, 1e-6);
    holds(cg_logsumexp(x, 2, (int[]){0, 1}, false), (const float[]){3.69939089f}, 1e-6, "all");
    holds(cg_logsumexp(x, 0, NULL, false), (const float[]){3.69939089f}, 1e-6, "ndims 0");
    cg_tensor *k = cg_logsumexp(x, 1, (int[]){-2}, true);
    ck_assert(k && k->ndim == 2 && k->shape[0] == 1 && k->shape[1] == 4);
    holds(k, (const float[]){3.10039067f, 1.68170738f, 2.16964388f, 1.40760589f}, 1e-6, "keep");
    cg_release_all(3, x, y, u);
    /* rows of -inf, with +inf, with NaN; the gradient 0 on the -inf row */
    const float inf = INFINITY;
    cg_tensor *s =
        cg_requires_grad(cg_from_data(CG_SHAPE(4, 3), (float[]){-inf, -inf, -inf, 1, inf, -inf, 1,
                                                                NAN, 2, 0, -inf, 0}),
                         true);
    cg_tensor *ls = cg_logsumexp(s, 1, (int[]){-1}, false);
    ck_assert_msg(ls, "%s", cg_last_error());
    const float *lv = cg_data(ls);
    ck_assert(lv[0] == -inf && lv[1] == inf && isnan(lv[2]));
    ck_assert_float_eq_tol(lv[3], logf(2.0f), 1e-7);
    float *g = grad_of(ls, s);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(g[i] == 0.0f, "the -inf row's gradient %d: %g", i, g[i]);
    ck_assert(isnan(g[4]) && g[3] == 0 && g[5] == 0); /* exp(inf - inf), as PyTorch */
    ck_assert(g[9] == 0.5f && g[10] == 0 && g[11] == 0.5f);
    free(g);
    cg_release_all(2, s, ls);
    /* an empty reduction is -inf; a 0-d tensor is itself (gradient 1) */
    holds(cg_logsumexp(cg_zeros(CG_SHAPE(0, 2)), 1, (int[]){0}, false), (const float[]){-inf, -inf},
          0, "empty");
    cg_tensor *z = cg_requires_grad(cg_scalar(2.5f), true),
              *zl = cg_logsumexp(z, 1, (int[]){0}, false);
    ck_assert(zl && zl->ndim == 0 && cg_item(zl) == 2.5f);
    ck_assert(cg_backward(zl, NULL, false) && cg_item(cg_grad(z)) == 1.0f);
    cg_release_all(2, z, zl);
    /* bfloat16: computed in float32, rounded once to bfloat16 (PyTorch
     * 1.13 rounds its steps too: 2.3438 where the nearest is 2.3281) */
    cg_tensor *b = cg_requires_grad(cg_k_to(mat(NULL), CG_BF16), true);
    cg_tensor *bl = cg_logsumexp(b, 1, (int[]){1}, false), *blf = cg_k_to(bl, CG_F32);
    ck_assert_int_eq(bl->dtype, CG_BF16);
    CG_ASSERT_TENSOR(blf, ((float[]){2.328125f, 2.046875f, 3.109375f}), 0, 0);
    cg_tensor *bs = cg_sum_all(bl);
    ck_assert(cg_backward(bs, NULL, false) && cg_grad(b)->dtype == CG_BF16);
    cg_release_all(4, b, bl, blf, bs);
    /* refusals */
    cg_tensor *xi = cg_k_to(mat(NULL), CG_I64), *x2 = mat(NULL);
    CG_ASSERT_REFUSED(cg_logsumexp(xi, 1, (int[]){0}, false) == NULL,
                      "logsumexp: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_logsumexp(x2, 1, (int[]){-3}, false) == NULL,
                      "logsumexp: dim -3 out of range for a tensor of shape [3, 4]");
    CG_ASSERT_REFUSED(cg_logsumexp(x2, 2, (int[]){1, -1}, false) == NULL,
                      "logsumexp: dim -1 appears more than once");
    CG_ASSERT_REFUSED(cg_logsumexp(NULL, 0, NULL, false) == NULL, "cg_k_logsumexp: input is NULL");
    cg_release_all(2, xi, x2);
}
END_TEST

/* -------------------------------------- leaky_relu, elu, softplus */
/* PyTorch's values at their parameters, softplus's gradient, the gradient
 * at the kink 0 through the graph, bfloat16 (elu's float32 result rounded
 * once), the node keeping its parameters, refusals. The kernels against
 * references in double: test_elementwise.c, test_unary_param_rows. */
START_TEST(test_unary_params)
{
    cg_tensor *x = cg_requires_grad(mat(NULL), true);
    holds(cg_leaky_relu(x, 0.2f),
          (const float[]){0.5f, -0.25f, 2, 0, -0.15f, 1.5f, -0.5f, 1, 3, -0.1f, 0.25f, -0.2f}, 0,
          "leaky_relu");
    holds(cg_elu(x, 0.5f),
          (const float[]){0.5f, -0.3567476f, 2, 0, -0.26381671f, 1.5f, -0.45895749f, 1, 3,
                          -0.19673467f, 0.25f, -0.31606027f},
          1e-6, "elu");
    cg_tensor *sp = cg_softplus(x, 2, 3);
    CG_ASSERT_TENSOR(
        sp,
        ((float[]){0.65663081f, 0.039444868f, 2, 0.34657359f, 0.10070664f, 1.5242937f,
                   0.0033576742f, 1.063464f, 3, 0.15663084f, 0.48703849f, 0.063464001f}),
        1e-6, 1e-6);
    float *g = grad_of(sp, x);
    CG_ASSERT_CLOSE(
        g,
        ((float[]){0.7310586f, 0.075858176f, 1, 0.5f, 0.18242551f, 0.95257413f, 0.006692851f,
                   0.88079709f, 1, 0.26894143f, 0.62245935f, 0.11920292f}),
        12, 1e-6, 1e-6);
    free(g);
    cg_release_all(2, x, sp);
    /* at 0: leaky_relu's gradient is the slope, elu's alpha (PyTorch's) */
    for (int k = 0; k < 2; k++) {
        cg_tensor *z = cg_requires_grad(cg_zeros(CG_SHAPE(2)), true);
        cg_tensor *y = k ? cg_elu(z, 0.5f) : cg_leaky_relu(z, 0.2f);
        float *gz = grad_of(y, z);
        ck_assert_msg(gz[0] == (k ? 0.5f : 0.2f) && gz[1] == gz[0], "%s at 0: %g",
                      k ? "elu" : "leaky_relu", gz[0]);
        free(gz);
        cg_release_all(2, z, y);
    }
    /* bfloat16 in, bfloat16 out (PyTorch's elu of A in bfloat16), and a
     * bfloat16 gradient */
    cg_tensor *b = cg_requires_grad(cg_k_to(mat(NULL), CG_BF16), true);
    cg_tensor *be = cg_elu(b, 0.5f), *bef = cg_k_to(be, CG_F32);
    ck_assert_int_eq(be->dtype, CG_BF16);
    CG_ASSERT_TENSOR(bef,
                     ((float[]){0.5f, -0.357421875f, 2, 0, -0.263671875f, 1.5f, -0.458984375f, 1, 3,
                                -0.1962890625f, 0.25f, -0.31640625f}),
                     0, 0);
    cg_tensor *bs = cg_sum_all(be);
    ck_assert(cg_backward(bs, NULL, false) && cg_grad(b)->dtype == CG_BF16);
    cg_release_all(4, b, be, bef, bs);
    /* refusals */
    cg_tensor *xi = cg_k_to(mat(NULL), CG_I64), *xb = cg_k_to(xi, CG_BOOL);
    CG_ASSERT_REFUSED(cg_leaky_relu(xi, 0.1f) == NULL,
                      "leaky_relu: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_elu(xb, 1.0f) == NULL, "elu: argument 1 is bool, expected a float tensor");
    CG_ASSERT_REFUSED(cg_softplus(NULL, 1, 20) == NULL, "softplus: input is NULL");
    cg_release_all(2, xi, xb);
}
END_TEST

static Suite *more_suite(void)
{
    Suite *s = suite_create("ops_more");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_min);
    tcase_add_test(tc, test_maximum_minimum);
    tcase_add_test(tc, test_logsumexp);
    tcase_add_test(tc, test_unary_params);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {more_suite()};
    return cg_test_run(s, 1);
}
