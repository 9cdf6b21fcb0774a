/* The ops a PyTorch user writing a model reaches for beyond the
 * transformer's (autograd/ops.h): min and argmin, maximum and minimum,
 * logsumexp, leaky_relu, elu and softplus with their parameters, pad,
 * flip, roll and repeat, the losses l1, smooth_l1, huber and kl_div,
 * normalize and cosine_similarity.
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
/* the same in dtype dt */
static cg_tensor *mat_as(const float *v, cg_dtype dt)
{
    cg_tensor *f = mat(v), *t = cg_k_to(f, dt);
    cg_release(f);
    return t;
}

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
    cg_tensor *b = cg_requires_grad(mat_as(NULL, CG_BF16), true);
    cg_tensor *bv = cg_min(b, 1, false, &ids);
    ck_assert_msg(bv && bv->dtype == CG_BF16, "%s", cg_last_error());
    expect_i64(ids, (int64_t[]){1, 2, 3}, 3, "min of bf16");
    cg_tensor *s = cg_sum_all(bv);
    ck_assert(s && cg_backward(s, NULL, false));
    ck_assert_int_eq(cg_grad(b)->dtype, CG_BF16);
    cg_release_all(4, b, bv, ids, s);
    /* refusals, one line each */
    cg_tensor *xi = mat_as(NULL, CG_I64), *e = cg_zeros(CG_SHAPE(2, 0)), *x2 = mat(NULL);
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
    cg_tensor *ab = mat_as(NULL, CG_BF16), *z = cg_zeros(CG_SHAPE(1));
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
    cg_tensor *e0 = cg_zeros(CG_SHAPE(0, 2));
    holds(cg_logsumexp(e0, 1, (int[]){0}, false), (const float[]){-inf, -inf}, 0, "empty");
    cg_tensor *z = cg_requires_grad(cg_scalar(2.5f), true),
              *zl = cg_logsumexp(z, 1, (int[]){0}, false);
    ck_assert(zl && zl->ndim == 0 && cg_item(zl) == 2.5f);
    ck_assert(cg_backward(zl, NULL, false) && cg_item(cg_grad(z)) == 1.0f);
    cg_release_all(3, e0, z, zl);
    /* bfloat16: computed in float32, rounded once to bfloat16 (PyTorch
     * 1.13 rounds its steps too: 2.3438 where the nearest is 2.3281) */
    cg_tensor *b = cg_requires_grad(mat_as(NULL, CG_BF16), true);
    cg_tensor *bl = cg_logsumexp(b, 1, (int[]){1}, false), *blf = cg_k_to(bl, CG_F32);
    ck_assert_int_eq(bl->dtype, CG_BF16);
    CG_ASSERT_TENSOR(blf, ((float[]){2.328125f, 2.046875f, 3.109375f}), 0, 0);
    cg_tensor *bs = cg_sum_all(bl);
    ck_assert(cg_backward(bs, NULL, false) && cg_grad(b)->dtype == CG_BF16);
    cg_release_all(4, b, bl, blf, bs);
    /* refusals */
    cg_tensor *xi = mat_as(NULL, CG_I64), *x2 = mat(NULL);
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
    cg_tensor *b = cg_requires_grad(mat_as(NULL, CG_BF16), true);
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
    cg_tensor *xi = mat_as(NULL, CG_I64), *xb = cg_k_to(xi, CG_BOOL);
    CG_ASSERT_REFUSED(cg_leaky_relu(xi, 0.1f) == NULL,
                      "leaky_relu: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_elu(xb, 1.0f) == NULL, "elu: argument 1 is bool, expected a float tensor");
    CG_ASSERT_REFUSED(cg_softplus(NULL, 1, 20) == NULL, "softplus: input is NULL");
    cg_release_all(2, xi, xb);
}
END_TEST

/* ------------------------------------------ pad, flip, roll, repeat */
/* sum(y * w) backwarded, w = 0, 1, 2, ... in y's shape: x's gradient */
static float *grad_weighted(cg_tensor *y, cg_tensor *x)
{
    cg_tensor *w = cg_arange_dtype(CG_F32, 0, (double)cg_numel(y), 1);
    cg_tensor *wr = cg_k_reshape(w, y->ndim, y->shape), *p = cg_mul(y, wr);
    float *g = grad_of(p, x);
    cg_release_all(3, w, wr, p);
    return g;
}

/* PyTorch's values and gradients; other dtypes (a copy of any); size 0
 * and 0-d; refusals in one line */
START_TEST(test_rearrange)
{
    cg_tensor *x = cg_requires_grad(mat(NULL), true);
    cg_tensor *p = cg_pad(x, 4, (int64_t[]){1, 1, -1, 0}, CG_PAD_CONSTANT, 9.0f);
    ck_assert_msg(p && p->ndim == 2 && p->shape[0] == 2 && p->shape[1] == 6, "%s", cg_last_error());
    CG_ASSERT_TENSOR(p, ((float[]){9, -0.75f, 1.5f, -2.5f, 1, 9, 9, 3, -0.5f, 0.25f, -1, 9}), 0, 0);
    float *g = grad_weighted(p, x);
    CG_ASSERT_CLOSE(g, ((float[]){0, 0, 0, 0, 1, 2, 3, 4, 7, 8, 9, 10}), 12, 0, 0);
    free(g);
    cg_release(p);
    holds(cg_flip(x, 2, (int[]){0, 1}),
          (const float[]){-1, 0.25f, -0.5f, 3, 1, -2.5f, 1.5f, -0.75f, 0, 2, -1.25f, 0.5f}, 0,
          "flip");
    holds(cg_roll(x, 2, (int64_t[]){1, -1}, (int[]){0, 1}),
          (const float[]){-0.5f, 0.25f, -1, 3, -1.25f, 2, 0, 0.5f, 1.5f, -2.5f, 1, -0.75f}, 0,
          "roll");
    holds(cg_roll(x, 1, (int64_t[]){5}, NULL),
          (const float[]){1, 3, -0.5f, 0.25f, -1, 0.5f, -1.25f, 2, 0, -0.75f, 1.5f, -2.5f}, 0,
          "roll flattened");
    cg_tensor *r = cg_repeat(x, 3, (int64_t[]){2, 1, 2});
    ck_assert_msg(r && r->ndim == 3 && r->shape[0] == 2 && r->shape[2] == 8, "%s", cg_last_error());
    cg_tensor *r1 = cg_view_select(r, 0, 1);
    CG_ASSERT_TENSOR(
        r1, ((float[]){0.5f, -1.25f, 2, 0, 0.5f,  -1.25f, 2,  0, -0.75f, 1.5f,  -2.5f, 1, -0.75f,
                       1.5f, -2.5f,  1, 3, -0.5f, 0.25f,  -1, 3, -0.5f,  0.25f, -1}),
        0, 0);
    cg_release(x);
    x = cg_requires_grad(mat(NULL), true);
    cg_release_all(2, r, r1);
    r = cg_repeat(x, 3, (int64_t[]){2, 1, 2});
    g = grad_weighted(r, x);
    CG_ASSERT_CLOSE(g, ((float[]){56, 60, 64, 68, 88, 92, 96, 100, 120, 124, 128, 132}), 12, 0, 0);
    free(g);
    cg_release_all(2, x, r);
    /* any dtype: an int64 pad truncates its value (PyTorch's -2), bool
     * flips, rolls and repeats, bf16 keeps its dtype and its gradient's */
    cg_tensor *i = cg_from_i64(CG_SHAPE(2, 3), (int64_t[]){0, 1, 2, 3, 4, 5});
    cg_tensor *ip = cg_pad(i, 2, (int64_t[]){1, 0}, CG_PAD_CONSTANT, -2.9f);
    ck_assert_msg(ip && ip->dtype == CG_I64, "%s", cg_last_error());
    expect_i64(ip, (int64_t[]){-2, 0, 1, 2, -2, 3, 4, 5}, 8, "pad int64");
    cg_tensor *bo = cg_k_to(i, CG_BOOL), *bf = cg_flip(bo, 1, (int[]){-1});
    cg_tensor *br = cg_roll(bf, 1, (int64_t[]){1}, (int[]){0}),
              *bp = cg_repeat(br, 2, (int64_t[]){1, 2});
    ck_assert_msg(bp && bp->dtype == CG_BOOL && bp->shape[1] == 6, "%s", cg_last_error());
    const bool *bv = cg_data_bool(bp);
    ck_assert(bv[0] && bv[2] && bv[5] && bv[6] && !bv[8] && !bv[11]); /* [[1,1,1],[1,1,0]] twice */
    cg_tensor *h = cg_requires_grad(mat_as(NULL, CG_BF16), true);
    cg_tensor *hf = cg_flip(h, 1, (int[]){0}), *hr = cg_repeat(hf, 2, (int64_t[]){2, 1});
    cg_tensor *hs = cg_sum_all(hr);
    ck_assert_msg(hs && hr->dtype == CG_BF16 && cg_backward(hs, NULL, false), "%s",
                  cg_last_error());
    ck_assert(cg_grad(h)->dtype == CG_BF16 && cg_get(cg_grad(h), (int64_t[]){1, 2}) == 2.0f);
    cg_release_all(10, i, ip, bo, bf, br, bp, h, hf, hr, hs);
    /* size 0 and 0-d: a [0, 3] pads to [2, 5]; a 0-d flips, rolls
     * flattened, and repeats into [2, 2]; repeat 0 times: [0, ...], its
     * gradient zeros */
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 3)),
              *ep = cg_pad(e, 4, (int64_t[]){1, 1, 1, 1}, CG_PAD_CONSTANT, 1.0f);
    ck_assert(ep && ep->shape[0] == 2 && ep->shape[1] == 5 && cg_data(ep)[0] == 1.0f);
    cg_tensor *s = cg_requires_grad(cg_scalar(3.0f), true);
    cg_tensor *sf = cg_flip(s, 1, (int[]){0}), *sr = cg_roll(s, 1, (int64_t[]){4}, NULL);
    cg_tensor *sp = cg_repeat(s, 2, (int64_t[]){2, 2}), *z = cg_repeat(s, 1, (int64_t[]){0});
    ck_assert_msg(sf && sr && sp && z, "%s", cg_last_error());
    ck_assert(sf->ndim == 0 && cg_item(sf) == 3.0f && cg_item(sr) == 3.0f && sp->shape[1] == 2);
    ck_assert(z->ndim == 1 && z->shape[0] == 0);
    cg_tensor *zs = cg_sum_all(z), *ss = cg_sum_all(sp), *t = cg_add(zs, ss);
    ck_assert(cg_backward(t, NULL, false) && cg_item(cg_grad(s)) == 4.0f);
    cg_release_all(10, e, ep, s, sf, sr, sp, z, zs, ss, t);
    /* refusals */
    cg_tensor *a = mat(NULL);
    CG_ASSERT_REFUSED(cg_pad(a, 3, (int64_t[]){1, 1, 1}, CG_PAD_CONSTANT, 0) == NULL,
                      "pad: 3 padding sizes, expected pairs (left, right), the last dim's first");
    CG_ASSERT_REFUSED(cg_pad(a, 6, (int64_t[]){1, 1, 1, 1, 1, 1}, CG_PAD_CONSTANT, 0) == NULL,
                      "pad: 3 pairs of padding for a tensor of 2 dims (shape [3, 4])");
    CG_ASSERT_REFUSED(cg_pad(a, 2, (int64_t[]){-5, 2}, CG_PAD_CONSTANT, 0) == NULL,
                      "pad: dim 1 of size 4 cropped by (-5, 2), more than it holds");
    CG_ASSERT_REFUSED(cg_pad(a, 2, (int64_t[]){-3, -2}, CG_PAD_CONSTANT, 0) == NULL,
                      "more than it holds");
    CG_ASSERT_REFUSED(cg_flip(a, 2, (int[]){0, -2}) == NULL,
                      "flip: dim -2 appears more than once in the dims list (shape [3, 4])");
    CG_ASSERT_REFUSED(
        cg_flip(a, 1, (int[]){2}) == NULL,
        "flip: dim 2 out of range for a tensor of shape [3, 4] (expected in [-2, 1])");
    CG_ASSERT_REFUSED(cg_roll(a, 2, (int64_t[]){1, 2}, NULL) == NULL,
                      "roll: 2 shifts, expected one a dim of dims, or one (the tensor flattened)");
    CG_ASSERT_REFUSED(cg_roll(a, 1, (int64_t[]){1}, (int[]){-3}) == NULL,
                      "roll: dim -3 out of range for a tensor with 2 dims");
    CG_ASSERT_REFUSED(cg_repeat(a, 1, (int64_t[]){2}) == NULL,
                      "repeat: 1 sizes for a tensor of shape [3, 4], expected 2 to 8");
    CG_ASSERT_REFUSED(cg_repeat(a, 2, (int64_t[]){2, -1}) == NULL,
                      "repeat: size -1 at 1 is negative");
    CG_ASSERT_REFUSED(cg_flip(NULL, 0, NULL) == NULL, "cg_k_flip: input is NULL");
    cg_release(a);
}
END_TEST

/* ------------------------------------------------------------ losses */
static const float B[12] = {0.25f, -1.25f, 1, 2, 0.5f, 1.5f, -3, 0.75f, 2.25f, 0.5f, -0.25f, -1.5f};

/* loss(A, B) at every reduction and the input's gradient under mean,
 * against PyTorch's (A and B tie at two places: l1's gradient 0 there) */
static void check_loss(int which, const float *none, float mean, float sum, const float *gx)
{
    for (int r = 0; r < 3; r++) {
        cg_tensor *x = cg_requires_grad(mat(NULL), true), *y = mat(B);
        cg_tensor *l = which == 0   ? cg_l1_loss(x, y, (cg_reduction)r)
                       : which == 1 ? cg_smooth_l1_loss(x, y, (cg_reduction)r, 0.8f)
                                    : cg_huber_loss(x, y, (cg_reduction)r, 0.6f);
        ck_assert_msg(l, "%s", cg_last_error());
        if (r == CG_REDUCTION_NONE)
            CG_ASSERT_TENSOR(l, none, 1e-7, 1e-6);
        else
            ck_assert_float_eq_tol(cg_item(l), r == CG_REDUCTION_SUM ? sum : mean, 1e-6);
        if (r == CG_REDUCTION_MEAN) {
            float *g = grad_of(l, x);
            CG_ASSERT_CLOSE(g, gx, 12, 1e-8, 1e-6);
            free(g);
        }
        cg_release_all(3, x, y, l);
    }
}

/* l1_loss, smooth_l1_loss and huber_loss; kl_div (a target 0 somewhere:
 * its point 0, its gradient NaN there, as PyTorch's), log_target,
 * batchmean; bfloat16; empty inputs; refusals */
/* F.pad's other modes: PyTorch's values and gradient (1.13), a crop
 * among the sizes; any dtype (bf16 keeps its dtype and its gradient's);
 * what each mode refuses, in one line; the backward's own checks */
START_TEST(test_pad_modes)
{
    cg_tensor *x = cg_arange_dtype(CG_F32, 0, 5, 1), *r = cg_k_reshape(x, CG_SHAPE(1, 5));
    const struct {
        cg_pad_mode mode;
        int64_t l, r;
        int n;
        float want[10];
    } c[] = {
        {CG_PAD_REFLECT, -1, 2, 6, {1, 2, 3, 4, 3, 2}},
        {CG_PAD_REFLECT, 4, 0, 9, {4, 3, 2, 1, 0, 1, 2, 3, 4}},
        {CG_PAD_REFLECT, -5, 1, 1, {3}},
        {CG_PAD_REFLECT, 2, -4, 3, {2, 1, 0}},
        {CG_PAD_REPLICATE, -1, 2, 6, {1, 2, 3, 4, 4, 4}},
        {CG_PAD_REPLICATE, 6, -4, 7, {0, 0, 0, 0, 0, 0, 0}},
        {CG_PAD_CIRCULAR, 2, -1, 6, {2, 3, 0, 1, 2, 3}},
        {CG_PAD_CIRCULAR, -1, 4, 8, {1, 2, 3, 4, 1, 2, 3, 4}},
        {CG_PAD_CIRCULAR, 5, 0, 10, {0, 1, 2, 3, 4, 0, 1, 2, 3, 4}},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        cg_tensor *p = cg_pad(r, 2, (int64_t[]){c[i].l, c[i].r}, c[i].mode, 0.0f);
        ck_assert_msg(p && p->shape[1] == c[i].n, "case %zu: %s", i, cg_last_error());
        CG_ASSERT_TENSOR(p, c[i].want, 0, 0);
        cg_release(p);
    }
    /* reflect (4, 3) of x with the upstream gradient 0, 1, ..., 11 */
    cg_tensor *xg = cg_requires_grad(cg_k_clone(r), true);
    cg_tensor *p = cg_pad(xg, 2, (int64_t[]){4, 3}, CG_PAD_REFLECT, 0.0f);
    float *g = grad_weighted(p, xg);
    CG_ASSERT_CLOSE(g, ((float[]){4, 19, 18, 17, 8}), 5, 0, 0);
    free(g);
    cg_release_all(2, p, xg);
    /* two dims: [1, 3, 5] reflect (1, 1, 1, 1), PyTorch's first row; the
     * corner of replicate (2, 0, 2, 0) reads element 0 five times over */
    cg_tensor *m = cg_arange_dtype(CG_F32, 0, 15, 1), *m3 = cg_k_reshape(m, CG_SHAPE(1, 3, 5));
    cg_tensor *mr = cg_pad(m3, 4, (int64_t[]){1, 1, 1, 1}, CG_PAD_REFLECT, 0.0f);
    ck_assert_msg(mr && mr->shape[1] == 5 && mr->shape[2] == 7, "%s", cg_last_error());
    ck_assert(!memcmp(cg_data(mr), ((float[]){6, 5, 6, 7, 8, 9, 8}), 7 * sizeof(float)));
    cg_tensor *mg = cg_requires_grad(cg_k_clone(m3), true);
    cg_tensor *pr = cg_pad(mg, 4, (int64_t[]){2, 0, 2, 0}, CG_PAD_REPLICATE, 0.0f);
    cg_tensor *ps = cg_sum_all(pr);
    ck_assert_msg(ps && cg_backward(ps, NULL, false), "%s", cg_last_error());
    ck_assert(cg_data(cg_grad(mg))[0] == 9.0f && cg_data(cg_grad(mg))[1] == 3.0f &&
              cg_data(cg_grad(mg))[5] == 3.0f && cg_data(cg_grad(mg))[6] == 1.0f);
    cg_release_all(6, m, m3, mr, mg, pr, ps);
    /* any dtype: int64 and bool copied; bfloat16 keeps its dtype and its
     * gradient's (reflect (1, 1): the second element read twice) */
    cg_tensor *i = cg_k_to(r, CG_I64), *ip = cg_pad(i, 2, (int64_t[]){0, 2}, CG_PAD_CIRCULAR, 0);
    expect_i64(ip, (int64_t[]){0, 1, 2, 3, 4, 0, 1}, 7, "circular int64");
    cg_tensor *h = cg_requires_grad(cg_k_to(r, CG_BF16), true);
    cg_tensor *hp = cg_pad(h, 2, (int64_t[]){1, 1}, CG_PAD_REFLECT, 0.0f), *hs = cg_sum_all(hp);
    ck_assert_msg(hs && hp->dtype == CG_BF16 && cg_backward(hs, NULL, false), "%s",
                  cg_last_error());
    ck_assert(cg_grad(h)->dtype == CG_BF16 && cg_get(cg_grad(h), (int64_t[]){0, 1}) == 2.0f &&
              cg_get(cg_grad(h), (int64_t[]){0, 2}) == 1.0f);
    cg_release_all(5, i, ip, h, hp, hs);
    /* refusals */
    CG_ASSERT_REFUSED(cg_pad(r, 2, (int64_t[]){1, 1}, CG_PAD_REFLECT, 1.0f) == NULL,
                      "pad: mode reflect takes no value (got 1): only constant pads with one");
    CG_ASSERT_REFUSED(cg_pad(r, 2, (int64_t[]){1, 1}, (cg_pad_mode)7, 0.0f) == NULL,
                      "pad: mode 7, expected constant, reflect, replicate or circular (0 to 3)");
    CG_ASSERT_REFUSED(cg_pad(r, 2, (int64_t[]){5, 0}, CG_PAD_REFLECT, 0.0f) == NULL,
                      "pad: dim 1 of size 5 padded by (5, 0), more than reflect takes (each "
                      "size less than the dim's) (shape [1, 5])");
    CG_ASSERT_REFUSED(cg_pad(r, 2, (int64_t[]){-3, 3}, CG_PAD_CIRCULAR, 0.0f) == NULL,
                      "pad: dim 1 of size 5 padded by (-3, 3), more than circular takes (it "
                      "wraps around once: each size at most the kept length) (shape [1, 5])");
    CG_ASSERT_REFUSED(cg_pad(r, 2, (int64_t[]){-3, -3}, CG_PAD_REPLICATE, 0.0f) == NULL,
                      "pad: dim 1 of size 5 cropped by (-3, -3), more than it holds");
    cg_tensor *e = cg_zeros(CG_SHAPE(2, 0));
    CG_ASSERT_REFUSED(cg_pad(e, 2, (int64_t[]){0, 1}, CG_PAD_REPLICATE, 0.0f) == NULL,
                      "pad: dim 1 of size 0 padded by (0, 1), but replicate has no edge to "
                      "repeat in an empty dim (shape [2, 0])");
    cg_tensor *ez = cg_pad(e, 2, (int64_t[]){0, 0}, CG_PAD_REFLECT, 0.0f); /* nothing to pad */
    ck_assert_msg(ez && ez->shape[1] == 0, "%s", cg_last_error());
    cg_tensor *g7 = cg_zeros(CG_SHAPE(1, 7)), *gi = cg_k_to(g7, CG_I64);
    CG_ASSERT_REFUSED(cg_k_pad_backward(g7, CG_SHAPE(1, 5), 2, (int64_t[]){1, 2}, CG_PAD_REFLECT) ==
                          NULL,
                      "pad backward: gradient of shape [1, 7], expected the padded shape [1, 8]");
    CG_ASSERT_REFUSED(cg_k_pad_backward(gi, CG_SHAPE(1, 5), 2, (int64_t[]){1, 1}, CG_PAD_REFLECT) ==
                          NULL,
                      "pad backward: gradient of dtype int64, expected float32 or bfloat16");
    cg_release_all(6, x, r, e, ez, g7, gi);
}
END_TEST

START_TEST(test_losses)
{
    /* PyTorch's: the losses, their mean and sum, the input's gradient */
    static const struct {
        float none[12], mean, sum, gx[12];
    } want[3] = {
        {{0.25f, 0, 1, 2, 1.25f, 0, 0.5f, 0.25f, 0.75f, 1, 0.5f, 0.5f},
         0.666666687f,
         8,
         {1 / 12.f, 0, 1 / 12.f, -1 / 12.f, -1 / 12.f, 0, 1 / 12.f, 1 / 12.f, 1 / 12.f, -1 / 12.f,
          1 / 12.f, 1 / 12.f}},
        {{0.0390625f, 0, 0.600000024f, 1.60000002f, 0.850000024f, 0, 0.15625f, 0.0390625f,
          0.3515625f, 0.600000024f, 0.15625f, 0.15625f},
         0.379036456f,
         4.5484376f,
         {0.0260416679f, 0, 0.0833333358f, -0.0833333358f, -0.0833333358f, 0, 0.0520833358f,
          0.0260416679f, 0.078125f, -0.0833333358f, 0.0520833358f, 0.0520833358f}},
        {{0.03125f, 0, 0.420000017f, 1.0200001f, 0.569999993f, 0, 0.125f, 0.03125f, 0.270000011f,
          0.420000017f, 0.125f, 0.125f},
         0.261458337f,
         3.13750005f,
         {0.020833334f, 0, 0.0500000007f, -0.0500000007f, -0.0500000007f, 0, 0.0416666679f,
          0.020833334f, 0.0500000007f, -0.0500000007f, 0.0416666679f, 0.0416666679f}},
    };
    for (int k = 0; k < 3; k++)
        check_loss(k, want[k].none, want[k].mean, want[k].sum, want[k].gx);
    /* kl_div: log_softmax(A, 1) against softmax(B, 1) with [0, 1] = 0 */
    static const float lp[12] = {-1.83449864f,  -3.58449864f,  -0.334498644f, -2.33449864f,
                                 -2.79826331f,  -0.548263371f, -4.54826355f,  -1.04826331f,
                                 -0.106556647f, -3.60655665f,  -2.85655665f,  -4.10655642f};
    static const float t[12] = {0.109953746f,   0,
                                0.232772097f,   0.63274014f,
                                0.198708221f,   0.54014492f,
                                0.00600046804f, 0.255146384f,
                                0.781630576f,   0.135827035f,
                                0.0641601458f,  0.0183821898f};
    cg_tensor *x = cg_requires_grad(mat(lp), true), *y = cg_requires_grad(mat(t), true);
    holds(cg_kl_div(x, y, CG_REDUCTION_NONE, false),
          (const float[]){-0.0410343856f, 0, -0.26144886f, 1.18752873f, 0.234941751f,
                          -0.0365431905f, -0.00340619124f, -0.0810483992f, -0.109284781f,
                          0.218706459f, 0.00706939399f, 0.00202541798f},
          1e-6, "kl_div none");
    holds(cg_kl_div(x, y, CG_REDUCTION_MEAN, false), (const float[]){0.0931254998f}, 1e-6, "mean");
    holds(cg_kl_div(x, y, CG_REDUCTION_SUM, false), (const float[]){1.11750603f}, 1e-6, "sum");
    cg_tensor *kb = cg_kl_div(x, y, CG_REDUCTION_BATCHMEAN, false);
    ck_assert_msg(kb && kb->ndim == 0, "%s", cg_last_error());
    ck_assert_float_eq_tol(cg_item(kb), 0.372501999f, 1e-6);
    ck_assert(cg_backward(kb, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(x),
                     ((float[]){-0.03665125f, 0, -0.077590704f, -0.21091339f, -0.0662360787f,
                                -0.180048317f, -0.00200015609f, -0.0850487947f, -0.260543525f,
                                -0.0452756807f, -0.0213867165f, -0.0061273966f}),
                     1e-7, 1e-6);
    ck_assert(isnan(cg_get(cg_grad(y), (int64_t[]){0, 1}))); /* 0/0 at t = 0, as PyTorch */
    ck_assert_float_eq_tol(cg_get(cg_grad(y), (int64_t[]){1, 0}), 0.727448523f, 1e-6);
    cg_tensor *lb = mat(B), *lt = cg_log_softmax(lb, 1);
    holds(cg_kl_div(x, lt, CG_REDUCTION_BATCHMEAN, true), (const float[]){0.371494442f}, 1e-6,
          "kl_div log_target");
    cg_release_all(5, x, y, kb, lb, lt);
    /* bfloat16: the pointwise losses rounded, reduced in float32, rounded
     * (PyTorch's l1 0.668); batchmean keeps the dtype */
    cg_tensor *xb = mat_as(NULL, CG_BF16), *yb = mat_as(B, CG_BF16);
    cg_tensor *l1 = cg_l1_loss(xb, yb, CG_REDUCTION_MEAN);
    cg_tensor *kl = cg_kl_div(xb, yb, CG_REDUCTION_BATCHMEAN, true);
    ck_assert_msg(l1 && kl && l1->dtype == CG_BF16 && kl->dtype == CG_BF16, "%s", cg_last_error());
    ck_assert_float_eq(cg_item(l1), 0.66796875f);
    cg_release_all(4, xb, yb, l1, kl);
    /* empty: the mean NaN, the sum 0, as PyTorch */
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 3)), *em = cg_huber_loss(e, e, CG_REDUCTION_MEAN, 1);
    cg_tensor *es = cg_l1_loss(e, e, CG_REDUCTION_SUM),
              *eb = cg_kl_div(e, e, CG_REDUCTION_BATCHMEAN, 0);
    ck_assert(em && isnan(cg_item(em)) && es && cg_item(es) == 0 && eb && isnan(cg_item(eb)));
    cg_release_all(4, e, em, es, eb);
    /* refusals */
    cg_tensor *a = mat(NULL), *row = cg_zeros(CG_SHAPE(4)), *ai = cg_k_to(a, CG_I64);
    CG_ASSERT_REFUSED(cg_l1_loss(a, row, CG_REDUCTION_MEAN) == NULL,
                      "l1_loss: input [3, 4] and target [4] differ in shape");
    CG_ASSERT_REFUSED(cg_l1_loss(a, a, CG_REDUCTION_BATCHMEAN) == NULL,
                      "l1_loss: reduction 3 is not one of CG_REDUCTION_MEAN, _SUM, _NONE "
                      "(batchmean is kl_div's)");
    CG_ASSERT_REFUSED(cg_kl_div(a, a, (cg_reduction)7, false) == NULL,
                      "kl_div: reduction 7 is not one of");
    CG_ASSERT_REFUSED(cg_smooth_l1_loss(a, a, CG_REDUCTION_MEAN, -1) == NULL,
                      "smooth_l1_loss: beta is -1, expected >= 0");
    CG_ASSERT_REFUSED(cg_huber_loss(a, a, CG_REDUCTION_MEAN, 0) == NULL,
                      "huber_loss: delta is 0, expected > 0");
    CG_ASSERT_REFUSED(cg_kl_div(a, ai, CG_REDUCTION_SUM, false) == NULL,
                      "kl_div: argument 2 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_huber_loss(NULL, a, CG_REDUCTION_SUM, 1) == NULL,
                      "huber_loss: input is NULL");
    cg_release_all(3, a, row, ai);
}
END_TEST

/* -------------------------------------- normalize, cosine_similarity */
/* PyTorch's values and gradients: p 2 and 1, p inf splitting the gradient
 * between tied maxima, a zero row (g / eps), cosine along either dim and
 * broadcast, 0-d, bfloat16, refusals */
START_TEST(test_normalize_cosine)
{
    cg_tensor *x = cg_requires_grad(mat(NULL), true), *u = mat(B);
    cg_tensor *y = cg_normalize(x, 2.0f, 1, 1e-12f);
    ck_assert_msg(y, "%s", cg_last_error());
    CG_ASSERT_TENSOR(y,
                     ((float[]){0.207390338f, -0.518475831f, 0.829561353f, 0, -0.236433119f,
                                0.472866237f, -0.788110375f, 0.315244168f, 0.934198678f,
                                -0.15569979f, 0.0778498948f, -0.311399579f}),
                     1e-7, 1e-6);
    ck_assert(cg_backward(y, u, false));
    CG_ASSERT_TENSOR(cg_grad(x),
                     ((float[]){-0.0278750509f, -0.18955031f, -0.111500204f, 0.829561353f,
                                0.395523727f, -0.00293704867f, -0.152727008f, -0.0807690918f,
                                -0.0184007883f, 0.275541425f, -0.137770712f, -0.227416053f}),
                     1e-7, 1e-6);
    holds(cg_normalize(x, 1.0f, 0, 1e-12f),
          (const float[]){0.117647059f, -0.384615391f, 0.421052635f, 0, -0.176470593f, 0.461538464f,
                          -0.526315808f, 0.5f, 0.70588237f, -0.15384616f, 0.0526315793f, -0.5f},
          1e-6, "normalize p 1");
    cg_release_all(2, x, y);
    /* p inf: 2 and -2 tie for the largest |x|, the gradient through the
     * norm split between them; a zero row: g / eps (1e12) */
    cg_tensor *t =
        cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), (float[]){2, -2, 1, 0, 0, 0}), true);
    cg_tensor *ti = cg_normalize(t, INFINITY, 1, 1e-12f);
    cg_tensor *tg = cg_from_data(CG_SHAPE(2, 3), (float[]){1, 2, 3, 1, -1, 2});
    ck_assert_msg(ti && cg_backward(ti, tg, false), "%s", cg_last_error());
    CG_ASSERT_TENSOR(ti, ((float[]){1, -1, 0.5f, 0, 0, 0}), 0, 0);
    CG_ASSERT_TENSOR(cg_grad(t), ((float[]){0.375f, 1.125f, 1.5f, 1e12f, -1e12f, 2e12f}), 0, 1e-6);
    cg_release_all(3, t, ti, tg);
    /* cosine_similarity along dim 1 and dim 0, and against a row */
    cg_tensor *a = cg_requires_grad(mat(NULL), true), *b = cg_requires_grad(mat(B), true);
    cg_tensor *c = cg_cosine_similarity(a, b, 1, 1e-8f);
    ck_assert_msg(c && c->ndim == 1, "%s", cg_last_error());
    CG_ASSERT_TENSOR(c, ((float[]){0.594234109f, 0.919016778f, 0.895121098f}), 1e-7, 1e-6);
    cg_tensor *cg = cg_from_data(CG_SHAPE(3), (float[]){1, -2, 0.5f});
    ck_assert(cg_backward(c, cg, false));
    CG_ASSERT_TENSOR(cg_grad(a),
                     ((float[]){-0.0108298548f, -0.0736429989f, -0.043319419f, 0.32229647f,
                                -0.227763385f, 0.0016913116f, 0.0879482329f, 0.0465110838f,
                                -0.00333185494f, 0.0498926975f, -0.0249463487f, -0.0411785729f}),
                     1e-7, 1e-5);
    CG_ASSERT_TENSOR(cg_grad(b),
                     ((float[]){0.0581501871f, -0.0893156528f, 0.232600749f, -0.179391429f,
                                0.212338567f, -0.0437374711f, -0.00329214334f, -0.0672522783f,
                                0.0370896906f, -0.0575410314f, 0.0287705157f, 0.0316591226f}),
                     1e-7, 1e-5);
    holds(cg_cosine_similarity(a, b, 0, 1e-8f),
          (const float[]){0.895023167f, 0.876923084f, 0.926450074f, 0.609556913f}, 1e-6, "dim 0");
    cg_tensor *b0 = cg_view_select(b, 0, 0);
    holds(cg_cosine_similarity(a, b0, -1, 1e-8f),
          (const float[]){0.594234109f, -0.313846946f, -0.0453687161f}, 1e-6, "broadcast");
    cg_release_all(5, a, b, c, cg, b0);
    /* 0-d: normalize gives 1, cosine_similarity 1 */
    cg_tensor *s3 = cg_scalar(3.0f), *s2 = cg_scalar(-2.0f);
    holds(cg_normalize(s3, 2.0f, 0, 1e-12f), (const float[]){1}, 0, "0-d");
    holds(cg_cosine_similarity(s3, s2, -1, 1e-8f), (const float[]){-1}, 0, "0-d cosine");
    /* bfloat16: computed in float32 and rounded once, the nearest to the
     * exact values (PyTorch 1.13 rounds its steps: 0.5977, 0.9180, 0.8906) */
    cg_tensor *ab = mat_as(NULL, CG_BF16), *bb = mat_as(B, CG_BF16);
    cg_tensor *cb = cg_cosine_similarity(ab, bb, 1, 1e-8f), *cbf = cg_k_to(cb, CG_F32);
    ck_assert_msg(cb && cb->dtype == CG_BF16, "%s", cg_last_error());
    CG_ASSERT_TENSOR(cbf, ((float[]){0.59375f, 0.91796875f, 0.89453125f}), 0, 0);
    cg_release_all(4, ab, bb, cb, cbf);
    /* refusals */
    cg_tensor *m = mat(NULL), *r5 = cg_zeros(CG_SHAPE(5)), *mi = cg_k_to(m, CG_I64);
    CG_ASSERT_REFUSED(cg_normalize(m, 0.0f, 1, 1e-12f) == NULL,
                      "normalize: p is 0 and eps 1e-12, expected p > 0");
    CG_ASSERT_REFUSED(cg_normalize(m, 2.0f, 1, -1.0f) == NULL, "normalize: p is 2 and eps -1");
    CG_ASSERT_REFUSED(cg_normalize(m, 2.0f, 2, 1e-12f) == NULL,
                      "normalize: dim 2 out of range for a tensor with 2 dims");
    CG_ASSERT_REFUSED(cg_normalize(mi, 2.0f, 1, 1e-12f) == NULL,
                      "normalize: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_cosine_similarity(m, r5, 1, 1e-8f) == NULL, "cosine_similarity: ");
    ck_assert_msg(strstr(cg_last_error(), "[3, 4]") && strstr(cg_last_error(), "[5]"), "%s",
                  cg_last_error());
    CG_ASSERT_REFUSED(cg_cosine_similarity(m, m, -3, 1e-8f) == NULL,
                      "cosine_similarity: dim -3 out of range for a tensor with 2 dims");
    CG_ASSERT_REFUSED(cg_cosine_similarity(m, m, 1, -1.0f) == NULL,
                      "cosine_similarity: eps is -1, expected >= 0");
    CG_ASSERT_REFUSED(cg_cosine_similarity(m, mi, 1, 1e-8f) == NULL,
                      "cosine_similarity: argument 2 is int64, expected a float tensor");
    cg_release_all(6, u, s3, s2, m, r5, mi);
}
END_TEST

/* ----------------------------------------------------------- threads */
/* Every op of this file on tensors large enough to split among threads
 * ([300, 257], transposed), forward and gradient: the same bits at 1 and
 * 2 threads. */
static cg_tensor *every_op(cg_tensor *x, cg_tensor *y)
{
    cg_tensor *t[21] = {
        cg_min(x, 0, false, NULL),
        cg_maximum(x, y),
        cg_minimum(y, x),
        cg_logsumexp(x, 1, (int[]){1}, true),
        cg_leaky_relu(x, 0.1f),
        cg_elu(y, 0.7f),
        cg_softplus(x, 2.0f, 3.0f),
        cg_pad(x, 4, (int64_t[]){3, -2, 1, 5}, CG_PAD_CONSTANT, 0.5f),
        cg_flip(y, 2, (int[]){0, 1}),
        cg_roll(x, 2, (int64_t[]){7, -100}, (int[]){0, 1}),
        cg_repeat(y, 3, (int64_t[]){2, 1, 3}),
        cg_logsumexp(y, 0, NULL, false),
        cg_l1_loss(x, y, CG_REDUCTION_MEAN),
        cg_smooth_l1_loss(y, x, CG_REDUCTION_SUM, 0.5f),
        cg_huber_loss(x, y, CG_REDUCTION_NONE, 1.5f),
        cg_kl_div(x, y, CG_REDUCTION_BATCHMEAN, true),
        cg_normalize(x, 3.0f, 0, 1e-12f),
        cg_cosine_similarity(x, y, 1, 1e-8f),
        cg_pad(x, 4, (int64_t[]){250, -3, 299, 1}, CG_PAD_REFLECT, 0.0f),
        cg_pad(y, 4, (int64_t[]){9, 300, -1, 200}, CG_PAD_REPLICATE, 0.0f),
        cg_pad(x, 4, (int64_t[]){-7, 250, 200, 100}, CG_PAD_CIRCULAR, 0.0f),
    };
    cg_tensor *sum = NULL;
    for (int i = 0; i < 21; i++) { /* sum(t_i * (i + 1)) */
        cg_tensor *w = cg_muls(t[i], (float)(i + 1)), *s = cg_sum_all(w);
        cg_tensor *acc = sum ? cg_add(sum, s) : cg_retain(s);
        cg_release_all(4, w, s, sum, t[i]);
        sum = acc;
    }
    return sum;
}

START_TEST(test_threads_identical)
{
    float *got[2][3];
    for (int nt = 1; nt <= 2; nt++) {
        cg_set_num_threads(nt);
        cg_rng r = cg_rng_new(5);
        cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(300, 257), 1), true);
        cg_tensor *y = cg_requires_grad(cg_randn(&r, CG_SHAPE(300, 257)), true);
        cg_tensor *l = every_op(x, y);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        got[nt - 1][0] = cg_test_values(l);
        got[nt - 1][1] = cg_test_values(cg_grad(x));
        got[nt - 1][2] = cg_test_values(cg_grad(y));
        cg_release_all(3, x, y, l);
    }
    cg_set_num_threads(0);
    const int64_t n[3] = {1, 300 * 257, 300 * 257};
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(!memcmp(got[0][k], got[1][k], (size_t)n[k] * sizeof(float)),
                      "result %d differs between 1 and 2 threads", k);
        free(got[0][k]);
        free(got[1][k]);
    }
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
    tcase_add_test(tc, test_rearrange);
    tcase_add_test(tc, test_pad_modes);
    tcase_add_test(tc, test_losses);
    tcase_add_test(tc, test_normalize_cosine);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {more_suite()};
    return cg_test_run(s, 1);
}
