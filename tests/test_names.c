/* Names keep PyTorch's meaning: cg_clone, cg_contiguous and
 * cg_reshape_copy pass gradients (whatever the memory layout), and the
 * exact GELU (cg_gelu_erf) matches torch.nn.functional.gelu. Forward values
 * from PyTorch 1.13 (float32, computed once with /usr/bin/python3). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

static const float X[12] = {-2.0f, -0.5f, 0.0f, 0.25f,  1.0f, 3.0f,
                            -1.5f, 0.75f, 0.5f, -0.25f, 2.0f, -3.0f};

/* x [3, 4] requiring grad, contiguous or (kind 1) a transposed view. */
static cg_tensor *xin(int kind)
{
    cg_tensor *x;
    if (kind == 0) {
        x = cg_from_data(CG_SHAPE(3, 4), X);
    } else {
        cg_tensor *b = cg_from_data(CG_SHAPE(4, 3), X);
        x = cg_view_transpose(b, 0, 1);
        cg_release(b);
    }
    cg_requires_grad(x, true);
    return x;
}

/* d/dx sum(f(x) * w) must be w (f = clone, contiguous, reshape_copy) for x
 * contiguous and not: the gradient never depends on memory layout. */
static cg_tensor *f_clone(cg_tensor *x) { return cg_clone(x); }
static cg_tensor *f_contig(cg_tensor *x) { return cg_contiguous(x); }
static cg_tensor *f_to_contig(cg_tensor *x) { return cg_to_contiguous(x); }
static cg_tensor *f_reshape_copy(cg_tensor *x)
{
    cg_tensor *r = cg_reshape_copy(x, CG_SHAPE(12));
    cg_tensor *back = cg_reshape_copy(r, CG_SHAPE(3, 4));
    cg_release(r);
    return back;
}

static void check_identity(cg_tensor *(*f)(cg_tensor *), const char *what)
{
    float wv[12];
    for (int i = 0; i < 12; i++)
        wv[i] = (float)(i + 1);
    for (int kind = 0; kind < 2; kind++) {
        cg_tensor *x = xin(kind);
        cg_tensor *w = cg_from_data(CG_SHAPE(3, 4), wv);
        cg_tensor *y = f(x);
        ck_assert_msg(y != NULL, "%s: %s", what, cg_last_error());
        ck_assert_msg(y->requires_grad, "%s (layout %d) dropped the gradient", what, kind);
        float xv[12];
        cg_copy_to(x, xv);
        CG_ASSERT_TENSOR(y, xv, 0, 0);
        cg_tensor *m = cg_mul(y, w);
        cg_tensor *l = cg_sum_all(m);
        ck_assert(cg_backward(l, NULL, false));
        ck_assert_msg(x->grad != NULL, "%s (layout %d): no gradient reached x", what, kind);
        CG_ASSERT_TENSOR(x->grad, wv, 0, 0);
        cg_release_all(5, x, w, y, m, l);
    }
}

START_TEST(test_clone_passes_gradient) { check_identity(f_clone, "clone"); }
END_TEST
START_TEST(test_contiguous_passes_gradient)
{
    check_identity(f_contig, "contiguous");
    check_identity(f_to_contig, "to_contiguous");
}
END_TEST
START_TEST(test_reshape_copy_passes_gradient) { check_identity(f_reshape_copy, "reshape_copy"); }
END_TEST

/* clone gives fresh storage: writing the clone leaves x (and x's version)
 * alone; under no-grad it records nothing. */
START_TEST(test_clone_is_a_copy)
{
    cg_tensor *x = xin(0);
    cg_tensor *c = cg_clone(x);
    ck_assert_ptr_ne(c->storage, x->storage);
    ck_assert(cg_is_contiguous(c));
    cg_no_grad_begin();
    cg_tensor *d = cg_clone(x);
    cg_no_grad_end();
    ck_assert(!d->requires_grad && d->node == NULL);
    ck_assert(cg_fill_(d, 0.0f));
    ck_assert_uint_eq(cg_version(x), 0);
    ck_assert_float_eq(cg_data(x)[0], -2.0f);
    cg_release_all(3, x, c, d);
}
END_TEST

static cg_tensor *gc_fn(void *ctx, cg_tensor *const *in)
{
    int which = *(int *)ctx;
    cg_tensor *y = which == 0   ? cg_clone(in[0])
                   : which == 1 ? cg_contiguous(in[0])
                   : which == 2 ? cg_reshape_copy(in[0], CG_SHAPE(2, 6))
                                : cg_gelu_erf(in[0]);
    /* a nonlinear function of the result, so the check sees every element */
    cg_tensor *t = cg_tanh(y);
    cg_release(y);
    return t;
}

START_TEST(test_gradchecks)
{
    const char *names[] = {"clone", "contiguous", "reshape_copy", "gelu_erf"};
    for (int which = 0; which < 4; which++) {
        for (int kind = 0; kind < 2; kind++) {
            cg_tensor *x = xin(kind);
            cg_gradcheck_report rep;
            bool ok = cg_gradcheck(gc_fn, &which, 1, &x, NULL, &rep);
            ck_assert_msg(ok, "%s (layout %d): %s", names[which], kind, rep.message);
            cg_test_check_unread(gc_fn, &which, 1, &x, names[which]);
            cg_release(x);
        }
    }
}
END_TEST

START_TEST(test_gelu_erf_vs_torch)
{
    cg_tensor *x = cg_from_data(CG_SHAPE(3, 4), X);
    cg_tensor *y = cg_gelu_erf(x);
    const float want[12] = {-0.0455000997f, -0.154268786f, 0.0f,         0.149676561f,
                            0.841344714f,   2.99595022f,   -0.10021086f, 0.580029547f,
                            0.345731199f,   -0.100323431f, 1.95449996f,  -0.00404986739f};
    /* PyTorch's CPU kernel computes 1 + erf, which cancels for negative
     * x (absolute error up to ~2e-7 here); against the formula in double
     * we are within 1e-6 relative everywhere, the tail included */
    CG_ASSERT_TENSOR(y, want, 1e-6, 1e-5);
    float exact[12];
    for (int i = 0; i < 12; i++)
        exact[i] = (float)(0.5 * X[i] * erfc(-X[i] / sqrt(2.0)));
    CG_ASSERT_TENSOR(y, exact, 1e-30, 1e-6);
    cg_tensor *x2 = cg_from_data(CG_SHAPE(6), (const float[]){-6, -4.5f, -1e-3f, 1e-3f, 6, 10});
    cg_tensor *y2 = cg_gelu_erf(x2);
    CG_ASSERT_TENSOR(
        y2, ((const float[]){0, -1.52885914e-05f, -0.000499601127f, 0.000500398921f, 6, 10}), 1e-7,
        1e-5);
    float exact2[6];
    cg_copy_to(x2, exact2);
    for (int i = 0; i < 6; i++)
        exact2[i] = (float)(0.5 * exact2[i] * erfc(-exact2[i] / sqrt(2.0)));
    CG_ASSERT_TENSOR(y2, exact2, 1e-30, 4e-6); /* erfcf: a few ulp in the far tail */
    /* torch's gradient of sum(gelu(x)) at these points */
    cg_tensor *x3 = cg_from_data(
        CG_SHAPE(10), (const float[]){-6, -3, -1.5f, -0.5f, -1e-3f, 0, 0.25f, 1, 2, 4.5f});
    cg_requires_grad(x3, true);
    cg_tensor *y3 = cg_gelu_erf(x3), *l = cg_sum_all(y3);
    ck_assert(cg_backward(l, NULL, false));
    CG_ASSERT_TENSOR(
        x3->grad,
        ((const float[]){-2.98023224e-08f, -0.0119456053f, -0.127469152f, 0.13250491f, 0.499202192f,
                         0.5f, 0.695373297f, 1.08331537f, 1.0852319f, 1.00006855f}),
        1e-7, 1e-5);
    /* the tanh form stays as it was (the zoo's bits): it differs from erf */
    cg_tensor *yt = cg_gelu(x);
    ck_assert(fabsf(cg_data(yt)[0] - want[0]) > 1e-5f);
    cg_release_all(8, x, y, x2, y2, x3, y3, l, yt);
}
END_TEST

/* No error message is ever empty: an op given a NULL input records
 * "<op>: input is NULL" when nothing else is recorded, and keeps the root
 * cause when something is. */
#define NULL_CASE(expr) CG_ASSERT_REFUSED((expr) == NULL, "NULL")
START_TEST(test_null_input_message)
{
    cg_tensor *x = cg_ones(CG_SHAPE(2, 3)), *n = NULL;
    NULL_CASE(cg_add(x, n));
    NULL_CASE(cg_mul(n, x));
    NULL_CASE(cg_exp(n));
    NULL_CASE(cg_relu(n));
    NULL_CASE(cg_gelu_erf(n));
    NULL_CASE(cg_sum_all(n));
    NULL_CASE(cg_mean_all(n));
    NULL_CASE(cg_matmul(x, n));
    NULL_CASE(cg_transpose(n, 0, 1));
    NULL_CASE(cg_reshape(n, CG_SHAPE(6)));
    NULL_CASE(cg_softmax(n, -1));
    NULL_CASE(cg_layer_norm(n, NULL, NULL, 1e-5f));
    NULL_CASE(
        cg_cross_entropy(n, cg_test_ids(2, (const int64_t[]){0, 1}), -100, 0, CG_REDUCTION_MEAN));
    NULL_CASE(cg_clone(n));
    NULL_CASE(cg_contiguous(n));
    NULL_CASE(cg_k_clone(n));
    NULL_CASE(cg_affine(n, x, NULL));
    NULL_CASE(cg_concat((cg_tensor *[]){x, n}, 2, 0));
    NULL_CASE(cg_stack((cg_tensor *[]){x, n}, 2, 0));
    NULL_CASE(cg_k_stack((cg_tensor *[]){x, n}, 2, 0));
    cg_clear_error();
    ck_assert(!cg_backward(n, NULL, false));
    ck_assert_str_eq(cg_last_error(), "cg_backward: input is NULL");
    cg_clear_error();
    ck_assert(!cg_fill_(n, 1.0f));
    ck_assert_str_eq(cg_last_error(), "cg_fill_: input is NULL");
    /* the root cause of a chain stays */
    cg_clear_error();
    cg_tensor *five = cg_ones(CG_SHAPE(5));
    cg_tensor *bad = cg_add(x, five);
    cg_release(five);
    ck_assert_ptr_null(bad);
    char first[256];
    snprintf(first, sizeof first, "%s", cg_last_error());
    ck_assert_ptr_null(cg_exp(bad));
    ck_assert_str_eq(cg_last_error(), first);
    /* so does a NULL ids, targets or mask argument (ids that could not be
     * made, out of memory, were reported as "argument 'ids' is NULL") */
    cg_tensor *mask = cg_test_mask(CG_SHAPE(2, 3), NULL);
    ck_assert_ptr_null(cg_embedding(x, bad));
    ck_assert_str_eq(cg_last_error(), first);
    ck_assert_ptr_null(cg_cross_entropy(x, bad, -100, 0, CG_REDUCTION_MEAN));
    ck_assert_str_eq(cg_last_error(), first);
    ck_assert_ptr_null(cg_index_select(x, 0, bad));
    ck_assert_str_eq(cg_last_error(), first);
    ck_assert_ptr_null(cg_masked_fill(x, bad, 0.0f));
    ck_assert_str_eq(cg_last_error(), first);
    ck_assert_ptr_null(cg_where(bad, x, x));
    ck_assert_str_eq(cg_last_error(), first);
    ck_assert_ptr_null(cg_where(mask, bad, x));
    ck_assert_str_eq(cg_last_error(), first);
    /* cg_item(NULL) says so and returns NaN */
    cg_clear_error();
    ck_assert(isnan(cg_item(n)));
    ck_assert_str_eq(cg_last_error(), "cg_item: input is NULL");
    cg_clear_error();
    cg_release(x);
}
END_TEST

/* What a new user's probe of 142 mistakes found crashing or silent
 * (issue 22): each is refused with a message that says what is wrong. */
static cg_tensor *returns_null(void *ctx, cg_tensor *const *in)
{
    (void)ctx, (void)in;
    return NULL; /* fails without recording anything */
}
START_TEST(test_new_user_refusals)
{
    cg_clear_error();
    cg_tensor *a = cg_ones(CG_SHAPE(6)), *o[2] = {NULL, NULL};
    /* split with no sizes or no output array: crashed */
    CG_ASSERT_REFUSED(!cg_split(a, 0, 2, (const int64_t[]){3, 3}, NULL), "NULL");
    CG_ASSERT_REFUSED(!cg_split(a, 0, 2, NULL, o), "NULL");
    /* the graph's split is checked as core's is (cg_k_split_dim): it took
     * n = 0 and said less */
    CG_ASSERT_REFUSED(!cg_split(a, 0, 0, (const int64_t[]){6}, o), "n >= 1");
    CG_ASSERT_REFUSED(!cg_split(a, 0, 2, (const int64_t[]){7, -1}, o), "size 1 is negative");
    CG_ASSERT_REFUSED(!cg_split(a, 0, 2, (const int64_t[]){3, 2}, o), "sum to 5 but dim 0");
    CG_ASSERT_REFUSED(!cg_split(a, 1, 2, (const int64_t[]){3, 3}, o), "dim");
    cg_tensor *s0 = cg_scalar(1.0f);
    CG_ASSERT_REFUSED(!cg_split(s0, 0, 1, (const int64_t[]){1}, o), "zero-dimensional");
    cg_release(s0);
    /* cg_get / cg_set out of range: read and wrote outside the tensor */
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3));
    CG_ASSERT_REFUSED(isnan(cg_get(x, (const int64_t[]){5, 7})), "out of range");
    CG_ASSERT_REFUSED(isnan(cg_get(x, (const int64_t[]){0, -4})), "out of range");
    CG_ASSERT_REFUSED(!cg_set(x, (const int64_t[]){2, 0}, 42.0f), "out of range");
    ck_assert(cg_set(x, (const int64_t[]){-1, -1}, 7.0f)); /* PyTorch's x[-1, -1] */
    ck_assert_float_eq(cg_get(x, (const int64_t[]){1, 2}), 7.0f);
    ck_assert_float_eq(cg_data(x)[5], 7.0f);
    /* copy_ into an expanded view: several elements are one location */
    cg_tensor *row = cg_zeros(CG_SHAPE(1, 3)), *e = cg_expand(row, CG_SHAPE(4, 3));
    cg_tensor *src = cg_ones(CG_SHAPE(4, 3));
    CG_ASSERT_REFUSED(!cg_copy_(e, src), "stride-0");
    /* gradcheck of no function: jumped to address 0; of one that fails
     * silently: the report ended in "failed: " */
    cg_tensor *w = cg_requires_grad(cg_ones(CG_SHAPE(2)), true);
    cg_gradcheck_report rep;
    CG_ASSERT_REFUSED(!cg_gradcheck(NULL, NULL, 1, &w, NULL, &rep), "NULL");
    cg_gradcheck_opts zero_eps = cg_gradcheck_defaults();
    zero_eps.eps = 0; /* blamed the gradient ("numeric -nan") */
    CG_ASSERT_REFUSED(!cg_gradcheck(returns_null, NULL, 1, &w, &zero_eps, &rep), "eps must be");
    float buf[2];
    CG_ASSERT_REFUSED(!cg_copy_to(NULL, buf), "NULL");
    ck_assert(!cg_gradcheck(returns_null, NULL, 1, &w, NULL, &rep));
    ck_assert_msg(strstr(rep.message, "returned NULL and recorded no error"), "%s", rep.message);
    cg_clear_error();
    /* NULL arrays get words that say so */
    CG_ASSERT_REFUSED(!cg_concat(NULL, 2, 0), "NULL");
    CG_ASSERT_REFUSED(!cg_stack(NULL, 2, 0), "NULL");
    /* said "concat: tensor 1 does not match tensor 0 outside dim 0 (shapes
     * [1, 2, 3] and [1, 3, 2])": another op, and shapes the user never made */
    cg_tensor *xt = cg_transpose(x, 0, 1);
    CG_ASSERT_REFUSED(!cg_stack((cg_tensor *[]){x, xt}, 2, 0),
                      "stack: all tensors must have the same shape; tensor 1 differs (shapes "
                      "[2, 3] and [3, 2])");
    CG_ASSERT_REFUSED(!cg_stack((cg_tensor *[]){x, x}, 2, 3), "stack: dim 3");
    cg_release(xt);
    CG_ASSERT_REFUSED(!cg_cross_entropy(x, NULL, -100, 0, CG_REDUCTION_MEAN), "'targets' is NULL");
    CG_ASSERT_REFUSED(!cg_embedding(x, NULL), "'ids' is NULL");
    /* said "for a tensor with 3 dims" of a 2-D tensor */
    CG_ASSERT_REFUSED(!cg_unsqueeze(x, 3), "range [-3, 2] for a tensor with 2 dims");
    cg_tensor *u = cg_unsqueeze(x, -3); /* [1, 2, 3], as torch.unsqueeze(x, -3) */
    ck_assert(u && u->ndim == 3 && u->shape[0] == 1);
    cg_release(u);
    cg_release_all(6, a, x, row, e, src, w);
}
END_TEST

static Suite *names_suite(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_clone_passes_gradient);
    tcase_add_test(tc, test_contiguous_passes_gradient);
    tcase_add_test(tc, test_reshape_copy_passes_gradient);
    tcase_add_test(tc, test_clone_is_a_copy);
    tcase_add_test(tc, test_gradchecks);
    tcase_add_test(tc, test_gelu_erf_vs_torch);
    tcase_add_test(tc, test_null_input_message);
    tcase_add_test(tc, test_new_user_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = names_suite();
    return cg_test_run(&s, 1);
}
