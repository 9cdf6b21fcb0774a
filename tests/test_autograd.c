/* The autograd engine: accumulation, graph shapes, grad mode, freeing,
 * memory, errors. Op-by-op gradients are in test_grad_ops.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

static cg_tensor *leaf(int ndim, const int64_t *shape, const float *v)
{
    cg_tensor *t = cg_from_data(ndim, shape, v);
    ck_assert_ptr_nonnull(t);
    cg_requires_grad(t, true);
    return t;
}

START_TEST(test_simple_chain)
{
    /* y = sum((a * b) + a), dy/da = b + 1, dy/db = a */
    cg_tensor *a = leaf(CG_SHAPE(3), (float[]){1, 2, 3});
    cg_tensor *b = leaf(CG_SHAPE(3), (float[]){4, 5, 6});
    cg_tensor *m = cg_mul(a, b);
    cg_tensor *s = cg_add(m, a);
    cg_tensor *y = cg_sum_all(s);
    ck_assert_float_eq_tol(cg_item(y), 4 + 10 + 18 + 6, 1e-6);
    ck_assert(cg_backward(y, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){5, 6, 7}), 1e-6, 0);
    CG_ASSERT_TENSOR(cg_grad(b), ((float[]){1, 2, 3}), 1e-6, 0);
    cg_release_all(5, a, b, m, s, y);
}
END_TEST

START_TEST(test_same_tensor_both_inputs)
{
    /* y = sum(a * a): dy/da = 2a */
    cg_tensor *a = leaf(CG_SHAPE(2, 2), (float[]){1, -2, 3, 0.5f});
    cg_tensor *m = cg_mul(a, a);
    cg_tensor *y = cg_sum_all(m);
    ck_assert(cg_backward(y, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){2, -4, 6, 1}), 1e-6, 0);
    cg_release_all(3, a, m, y);
}
END_TEST

START_TEST(test_diamond)
{
    /* b = exp(a); c = b * 2; d = b * b; y = sum(c + d): dy/da = (2 + 2b) * b */
    float av[] = {0.1f, -0.3f, 0.7f};
    cg_tensor *a = leaf(CG_SHAPE(3), av);
    cg_tensor *b = cg_exp(a);
    cg_tensor *c = cg_muls(b, 2.0f);
    cg_tensor *d = cg_mul(b, b);
    cg_tensor *e = cg_add(c, d);
    cg_tensor *y = cg_sum_all(e);
    ck_assert(cg_backward(y, NULL, false));
    float expect[3];
    for (int i = 0; i < 3; i++) {
        double bb = exp(av[i]);
        expect[i] = (float)((2 + 2 * bb) * bb);
    }
    CG_ASSERT_TENSOR(cg_grad(a), expect, 1e-5, 1e-5);
    cg_release_all(6, a, b, c, d, e, y);
}
END_TEST

START_TEST(test_accumulates_across_backward_calls)
{
    cg_tensor *a = leaf(CG_SHAPE(2), (float[]){1, 2});
    for (int k = 0; k < 3; k++) {
        cg_tensor *m = cg_muls(a, 3.0f);
        cg_tensor *y = cg_sum_all(m);
        ck_assert(cg_backward(y, NULL, false));
        cg_release_all(2, m, y);
    }
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){9, 9}), 1e-6, 0);
    cg_zero_grad(a);
    ck_assert_ptr_null(cg_grad(a));
    cg_release(a);
}
END_TEST

/* A leaf used twice in one backward gets its two contributions added to
 * its .grad one at a time; PyTorch sums them and adds the sum once
 * (docs/autograd.md, "A leaf used more than once"). From an empty .grad
 * the bits are the same (g1 + g2 either way: every step that zeroes its
 * gradients first); onto an existing .grad they may round differently:
 * 1 + 2^-24 + 2^-24 is 1 here, 1 + 2^-23 in PyTorch 1.13. This pins the
 * documented order: change the docs with it. */
START_TEST(test_leaf_used_twice_adds_per_use)
{
    const float e = 0x1p-24f;
    cg_tensor *a = leaf(CG_SHAPE(1), (float[]){1.0f});
    for (int k = 0; k < 2; k++) { /* k = 1: onto a .grad of 1 */
        cg_tensor *p = cg_muls(a, e), *q = cg_muls(a, e);
        cg_tensor *s = cg_add(p, q), *y = cg_sum_all(s);
        if (k == 1) {
            cg_zero_grad(a);
            cg_tensor *one = cg_sum_all(a);
            ck_assert(cg_backward(one, NULL, false));
            cg_release(one);
        }
        ck_assert(cg_backward(y, NULL, false));
        ck_assert_float_eq(cg_data(a->grad)[0], k == 0 ? 0x1p-23f : 1.0f);
        cg_release_all(4, p, q, s, y);
    }
    cg_release(a);
}
END_TEST

START_TEST(test_broadcast_reduces_to_input_shape)
{
    /* a [2,3] + b [3] and * c [2,1]: gradients reduce to each shape */
    cg_rng r = cg_rng_new(3);
    cg_tensor *a = cg_randn(&r, CG_SHAPE(2, 3));
    cg_tensor *b = cg_randn(&r, CG_SHAPE(3));
    cg_tensor *c = cg_randn(&r, CG_SHAPE(2, 1));
    cg_requires_grad(a, true);
    cg_requires_grad(b, true);
    cg_requires_grad(c, true);
    cg_tensor *s = cg_add(a, b);
    cg_tensor *p = cg_mul(s, c);
    cg_tensor *y = cg_sum_all(p);
    ck_assert(cg_backward(y, NULL, false));
    ck_assert_int_eq(cg_grad(b)->ndim, 1);
    ck_assert_int_eq(cg_grad(b)->shape[0], 3);
    ck_assert_int_eq(cg_grad(c)->shape[0], 2);
    ck_assert_int_eq(cg_grad(c)->shape[1], 1);
    float cv[2], sv[6];
    cg_copy_to(c, cv);
    cg_copy_to(s, sv);
    float gb[3], gc[2];
    for (int j = 0; j < 3; j++)
        gb[j] = cv[0] + cv[1];
    for (int i = 0; i < 2; i++)
        gc[i] = sv[3 * i] + sv[3 * i + 1] + sv[3 * i + 2];
    CG_ASSERT_TENSOR(cg_grad(b), gb, 1e-5, 1e-5);
    CG_ASSERT_TENSOR(cg_grad(c), gc, 1e-5, 1e-5);
    cg_release_all(6, a, b, c, s, p, y);
}
END_TEST

START_TEST(test_deep_chain_no_stack_overflow)
{
    /* 100,000 ops in a chain: backward and freeing must be iterative */
    cg_tensor *a = leaf(CG_SHAPE(1), (float[]){1.0f});
    cg_tensor *x = cg_retain(a);
    for (int i = 0; i < 100000; i++) {
        cg_tensor *nx = cg_adds(x, 1e-5f);
        cg_release(x);
        x = nx;
    }
    ck_assert_int_eq(cg_graph_size(x), 100000);
    cg_tensor *y = cg_sum_all(x);
    ck_assert(cg_backward(y, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){1.0f}), 1e-6, 0);
    cg_release_all(3, x, y, a);

    /* and dropping an un-backwarded deep graph frees it iteratively too */
    cg_tensor *b = leaf(CG_SHAPE(1), (float[]){1.0f});
    x = cg_retain(b);
    for (int i = 0; i < 100000; i++) {
        cg_tensor *nx = cg_muls(x, 1.0f);
        cg_release(x);
        x = nx;
    }
    cg_release(x);
    cg_release(b);
}
END_TEST

START_TEST(test_no_grad_and_detach)
{
    cg_tensor *a = leaf(CG_SHAPE(2), (float[]){1, 2});
    cg_no_grad_begin();
    ck_assert(!cg_grad_enabled());
    cg_tensor *m = cg_muls(a, 2.0f);
    cg_no_grad_end();
    ck_assert(cg_grad_enabled());
    ck_assert(!m->requires_grad);
    ck_assert_ptr_null(m->node);
    cg_tensor *y = cg_sum_all(m);
    ck_assert(!cg_backward(y, NULL, false));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "does not require grad"));

    /* detach stops the gradient through one branch: y = sum(a*2 + detach(a*3)) */
    cg_tensor *p = cg_muls(a, 2.0f);
    cg_tensor *q = cg_muls(a, 3.0f);
    cg_tensor *qd = cg_detach(q);
    ck_assert(!qd->requires_grad);
    cg_tensor *s = cg_add(p, qd);
    cg_tensor *z = cg_sum_all(s);
    ck_assert(cg_backward(z, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){2, 2}), 1e-6, 0);
    CG_ASSERT_TENSOR(qd, ((float[]){3, 6}), 1e-6, 0);

    /* nested no-grad scopes */
    cg_no_grad_begin();
    cg_no_grad_begin();
    cg_no_grad_end();
    ck_assert(!cg_grad_enabled());
    cg_no_grad_end();
    ck_assert(cg_grad_enabled());
    cg_release_all(8, a, m, y, p, q, qd, s, z);
}
END_TEST

START_TEST(test_graph_freed_after_backward)
{
    cg_tensor *a = leaf(CG_SHAPE(2), (float[]){1, 2});
    cg_tensor *m = cg_mul(a, a);
    cg_tensor *y = cg_sum_all(m);
    ck_assert_int_eq(cg_graph_size(y), 2);
    ck_assert(cg_backward(y, NULL, false));
    ck_assert_int_eq(cg_graph_size(y), 0);
    /* a second backward through a freed graph is a clear error */
    ck_assert(!cg_backward(y, NULL, false));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "already freed"));
    cg_release_all(2, m, y);

    /* retain_graph keeps it: two backwards accumulate */
    m = cg_mul(a, a);
    y = cg_sum_all(m);
    cg_zero_grad(a);
    ck_assert(cg_backward(y, NULL, true));
    ck_assert(cg_backward(y, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){4, 8}), 1e-6, 0);
    cg_release_all(3, a, m, y);
}
END_TEST

/* Two losses share a = f(w); a backward through the first without
 * retain_graph frees a's node. A backward through the second reaches that
 * freed node: it is refused in one line before any gradient is written
 * (PyTorch: "Trying to backward through the graph a second time"), never
 * a success that leaves loss 2's part out of w's gradient (the audit's
 * reproducers: a = w * w, which keeps w for its backward, and a = w + 1,
 * which keeps nothing). kind 0: w * w; 1: w + 1; 2: w * w read by the
 * second loss's log (its node kept a itself, which once collected a .grad
 * as if it were a leaf). */
static cg_tensor *shared_part(cg_tensor *w, int kind)
{
    return kind == 1 ? cg_adds(w, 1.0f) : cg_mul(w, w);
}

static cg_tensor *second_head(cg_tensor *a, int kind) { return kind == 2 ? cg_log(a) : cg_exp(a); }

START_TEST(test_backward_through_freed_part)
{
    for (int kind = 0; kind < 3; kind++) {
        cg_tensor *w = leaf(CG_SHAPE(3), (float[]){0.5f, -1.0f, 1.5f});
        cg_tensor *v = leaf(CG_SHAPE(3), (float[]){1, 2, 3}); /* reached first by loss 2 */
        cg_tensor *a = shared_part(w, kind);
        cg_tensor *l1 = cg_sum_all(a);
        cg_tensor *e = second_head(a, kind);
        cg_tensor *ev = cg_mul(e, v);
        cg_tensor *l2 = cg_sum_all(ev);
        ck_assert(cg_backward(l1, NULL, false));
        float *g1 = cg_test_values(cg_grad(w));
        int64_t size = cg_graph_size(l2);
        CG_ASSERT_REFUSED(!cg_backward(l2, NULL, false), "already freed by an earlier backward");
        ck_assert_msg(strstr(cg_last_error(), kind == 1 ? "'adds'" : "'mul'") &&
                          strstr(cg_last_error(), "retain_graph"),
                      "%s", cg_last_error());
        /* nothing written: w's gradient is loss 1's bit for bit, v (whose
         * node runs before the freed part is reached) and a have none */
        float *g2 = cg_test_values(cg_grad(w));
        ck_assert(memcmp(g1, g2, sizeof(float[3])) == 0);
        ck_assert_ptr_null(cg_grad(v));
        ck_assert_ptr_null(cg_grad(a));
        ck_assert_int_eq(cg_graph_size(l2), size); /* loss 2's graph left as it was */
        free(g1);
        free(g2);
        /* with retain_graph on the first backward, both add up */
        cg_release_all(5, a, l1, e, ev, l2);
        cg_zero_grad(w);
        a = shared_part(w, kind);
        l1 = cg_sum_all(a);
        e = second_head(a, kind);
        ev = cg_mul(e, v);
        l2 = cg_sum_all(ev);
        ck_assert(cg_backward(l1, NULL, true));
        ck_assert_msg(cg_backward(l2, NULL, false), "%s", cg_last_error());
        float wv[3], want[3];
        cg_copy_to(w, wv);
        for (int i = 0; i < 3; i++) {
            double x = wv[i], vi = i + 1;
            want[i] = (float)(kind == 0   ? 2 * x + vi * 2 * x * exp(x * x)
                              : kind == 1 ? 1 + vi * exp(x + 1)
                                          : 2 * x + vi * 2 / x);
        }
        CG_ASSERT_TENSOR(cg_grad(w), want, 1e-5, 1e-5);
        cg_release_all(7, w, v, a, l1, e, ev, l2);
    }
}
END_TEST

START_TEST(test_backward_errors)
{
    cg_tensor *a = leaf(CG_SHAPE(2), (float[]){1, 2});
    cg_tensor *m = cg_muls(a, 2.0f);
    /* non-scalar root without a gradient */
    ck_assert(!cg_backward(m, NULL, true));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "one element"));
    /* explicit gradient of the wrong shape */
    cg_tensor *g = cg_ones(CG_SHAPE(3));
    ck_assert(!cg_backward(m, g, true));
    ck_assert_ptr_nonnull(strstr(
        cg_last_error(), "backward: gradient shape [3] differs from the tensor's shape [2]"));
    /* one that the ops' backwards would take (it sums to [2]): refused all the same */
    cg_tensor *g12 = cg_ones(CG_SHAPE(1, 2));
    ck_assert(!cg_backward(m, g12, true));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "gradient shape [1, 2] differs"));
    ck_assert_ptr_null(cg_grad(a));
    cg_release(g12);
    /* explicit gradient of the right shape */
    cg_tensor *g2 = cg_from_data(CG_SHAPE(2), (float[]){1, 10});
    ck_assert(cg_backward(m, g2, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){2, 20}), 1e-6, 0);
    /* requires_grad on a non-leaf is refused */
    cg_tensor *m2 = cg_muls(a, 2.0f);
    ck_assert_ptr_null(cg_requires_grad(m2, false));
    /* NULL propagates without a crash */
    ck_assert_ptr_null(cg_add(NULL, a));
    ck_assert(!cg_backward(NULL, NULL, false));
    cg_release_all(5, a, m, g, g2, m2);
}
END_TEST

START_TEST(test_leaf_grads_are_private)
{
    /* y = sum(a + b): both leaves get the same upstream tensor; each .grad
     * must own its storage, since optimizers update grads in place. */
    cg_tensor *a = leaf(CG_SHAPE(3), (float[]){1, 2, 3});
    cg_tensor *b = leaf(CG_SHAPE(3), (float[]){4, 5, 6});
    cg_tensor *c = cg_from_data(CG_SHAPE(3), (float[]){1, 1, 1});
    cg_tensor *s = cg_add(a, b);
    cg_tensor *p = cg_mul(s, c); /* the add receives a fresh contiguous gradient */
    cg_tensor *y = cg_sum_all(p);
    ck_assert(cg_backward(y, NULL, false));
    ck_assert_ptr_ne(cg_grad(a), cg_grad(b));
    ck_assert_ptr_ne(cg_grad(a)->storage, cg_grad(b)->storage);
    ck_assert(cg_k_muls_(a->grad, 0.5f));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){0.5f, 0.5f, 0.5f}), 0, 0);
    CG_ASSERT_TENSOR(cg_grad(b), ((float[]){1, 1, 1}), 0, 0);
    cg_release_all(5, c, s, p, y, b);
    /* concat's backward gives each input a contiguous slice (a view) of
     * one gradient: a's .grad is a copy of its slice, not a view that
     * holds the whole [3 + 1000] gradient's storage (and shares it) */
    cg_zero_grad(a);
    cg_tensor *o = cg_requires_grad(cg_ones(CG_SHAPE(1000)), true), *big = cg_muls(o, 1.0f);
    cg_tensor *cat = cg_concat((cg_tensor *[]){a, big}, 2, 0);
    cg_tensor *w = cg_ones(CG_SHAPE(1003));
    cg_tensor *q = cg_mul(cat, w); /* concat receives a fresh contiguous gradient */
    y = cg_sum_all(q);
    ck_assert(cg_backward(y, NULL, false));
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){1, 1, 1}), 0, 0);
    ck_assert_int_eq(cg_grad(a)->storage->refcount, 1);
    ck_assert_uint_lt(cg_grad(a)->storage->nbytes, 1000 * sizeof(float));
    cg_release_all(7, a, o, big, cat, w, q, y);
}
END_TEST

/* A reference to a .grad kept by its user (PyTorch: g = p.grad) keeps its
 * values: the next backward adds out of place (AccumulateGrad adds in
 * place only when nothing else holds the gradient), and the leaf's .grad
 * is the sum. */
START_TEST(test_held_grad_keeps_its_values)
{
    cg_tensor *a = leaf(CG_SHAPE(2), (float[]){1, 2});
    cg_tensor *held = NULL;
    for (int k = 0; k < 2; k++) {
        cg_tensor *m = cg_muls(a, 3.0f), *y = cg_sum_all(m);
        ck_assert(cg_backward(y, NULL, false));
        cg_release_all(2, m, y);
        if (k == 0)
            held = cg_retain((cg_tensor *)cg_grad(a));
    }
    CG_ASSERT_TENSOR(held, ((float[]){3, 3}), 0, 0);
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){6, 6}), 0, 0);
    ck_assert_ptr_ne(held, cg_grad(a));
    cg_release_all(2, held, a);
}
END_TEST

START_TEST(test_op_names_complete)
{
    for (int op = 0; op < CG_OP_COUNT; op++) {
        ck_assert_ptr_nonnull(cg_op_name((cg_op)op));
        ck_assert_str_ne(cg_op_name((cg_op)op), "?");
    }
    ck_assert_str_eq(cg_op_name(CG_OP_MATMUL), "matmul");
}
END_TEST

/* A small MLP step: memory must not grow over many forward+backward passes. */
static long mlp_loop(int iters, cg_tensor *w1, cg_tensor *w2, cg_tensor *x)
{
    for (int i = 0; i < iters; i++) {
        cg_tensor *h = cg_matmul(x, w1);
        cg_tensor *r = cg_gelu(h);
        cg_tensor *o = cg_matmul(r, w2);
        cg_tensor *lsm = cg_log_softmax(o, -1);
        cg_tensor *y = cg_mean_all(lsm);
        ck_assert(cg_backward(y, NULL, false));
        cg_release_all(5, h, r, o, lsm, y);
        cg_zero_grad(w1);
        cg_zero_grad(w2);
    }
    return cg_test_rss_kb();
}

START_TEST(test_memory_flat)
{
    cg_rng r = cg_rng_new(5);
    cg_tensor *w1 = cg_randn(&r, CG_SHAPE(32, 64));
    cg_tensor *w2 = cg_randn(&r, CG_SHAPE(64, 16));
    cg_tensor *x = cg_randn(&r, CG_SHAPE(8, 32));
    cg_requires_grad(w1, true);
    cg_requires_grad(w2, true);
    long r1 = mlp_loop(100, w1, w2, x);
    long r2 = mlp_loop(10000, w1, w2, x);
#if defined(__SANITIZE_ADDRESS__)
    /* ASan's quarantine holds freed memory, so RSS says nothing here;
     * LeakSanitizer checks this build for leaks instead. */
    (void)r1;
    (void)r2;
#else
    /* allow allocator noise, but not growth per iteration */
    ck_assert_msg(r2 - r1 < 2048, "RSS grew from %ld kB to %ld kB over 10,000 steps", r1, r2);
#endif
    cg_release_all(3, w1, w2, x);
}
END_TEST

/* gradcheck itself: it must catch a wrong backward. */
static bool wrong_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    gin[0] = cg_k_muls(g, 3.0f); /* the true derivative of 2x is 2 */
    return true;
}
static cg_tensor *wrong_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    cg_tensor *out = cg_k_muls(in[0], 2.0f);
    cg_record(out, CG_OP_CUSTOM, 1, in, wrong_bw);
    return out;
}
static cg_tensor *tanh_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_tanh(in[0]);
}

START_TEST(test_gradcheck_detects_errors)
{
    cg_rng r = cg_rng_new(9);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 4));
    cg_requires_grad(x, true);
    cg_gradcheck_report rep;
    ck_assert(!cg_gradcheck(wrong_fn, NULL, 1, &x, NULL, &rep));
    ck_assert(!rep.ok);
    ck_assert_ptr_nonnull(strstr(rep.message, "FAILED"));
    ck_assert_double_eq_tol(rep.analytic / rep.numeric, 1.5, 1e-2);
    ck_assert(cg_gradcheck(tanh_fn, NULL, 1, &x, NULL, &rep));
    ck_assert_int_eq(rep.checked, 12);
    ck_assert_ptr_null(cg_grad(x)); /* gradcheck leaves .grad as it was */
    cg_release(x);
}
END_TEST

/* ------------------------------------------------ user-defined ops */
static bool silent_fail_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n, (void)g, (void)gin;
    return false; /* fails without a message */
}
static bool no_grad_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n, (void)g, (void)gin;
    return true; /* "succeeds" without a gradient */
}
static bool wrong_shape_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n, (void)g;
    gin[0] = cg_zeros(CG_SHAPE(7));
    return true;
}
static bool small_shape_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n, (void)g;
    gin[0] = cg_zeros(CG_SHAPE(1, 3)); /* broadcasts to [2, 3], but does not sum to it */
    return true;
}
static cg_tensor *user_op(cg_tensor *x, const char *name, cg_backward_fn bw, cg_record_status *st)
{
    cg_tensor *out = cg_k_muls(x, 2.0f);
    cg_node *n = NULL;
    *st = cg_record_op(out, name, 1, &x, bw, &n);
    ck_assert((*st == CG_RECORD_OK) == (n != NULL));
    return out;
}

/* A user op y = 2 x that keeps a 1 MiB tensor of its own, and whose
 * backward notes the library's live bytes when it runs. */
enum { KEEP_FLOATS = 1 << 18, KEEP_OPS = 8 };
static size_t g_live_at[KEEP_OPS];
static int g_bw_runs;
static bool keeper_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    ck_assert_ptr_nonnull(n->saved[0]); /* its own state is there while it runs */
    g_live_at[g_bw_runs++] = cg_alloc_get_stats().live_bytes;
    gin[0] = cg_k_muls(g, 2.0f);
    return gin[0] != NULL;
}
static cg_tensor *keeper(cg_tensor *x)
{
    cg_tensor *out = cg_k_muls(x, 2.0f), *big = cg_zeros(CG_SHAPE(KEEP_FLOATS));
    cg_node *n = NULL;
    ck_assert_int_eq(cg_record_op(out, "keeper", 1, &x, keeper_bw, &n), CG_RECORD_OK);
    ck_assert_int_eq(cg_node_save(n, big), 0);
    cg_release(big);
    return out;
}
/* What a node kept goes as soon as its backward has run (as in PyTorch),
 * not when the whole walk ends: going down a chain of ops that each keep
 * 1 MiB, every backward finds 1 MiB less alive than the one before it
 * (intermediate outputs released by the caller, as a model's forward
 * does). With retain_graph, all of it stays. */
START_TEST(test_saved_freed_during_backward)
{
    const size_t mib = KEEP_FLOATS * sizeof(float);
    for (int retain = 0; retain < 2; retain++) {
        cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(4)), true);
        cg_tensor *h = cg_retain(x);
        for (int i = 0; i < KEEP_OPS; i++) {
            cg_tensor *nh = keeper(h);
            cg_release(h);
            h = nh;
        }
        cg_tensor *l = cg_sum_all(h);
        cg_release(h);
        g_bw_runs = 0;
        ck_assert(cg_backward(l, NULL, retain));
        ck_assert_int_eq(g_bw_runs, KEEP_OPS);
        for (int i = 1; i < KEEP_OPS; i++) {
            if (retain) /* the same tensors are alive (gradients come and go) */
                ck_assert_uint_lt(g_live_at[i] > g_live_at[0] ? g_live_at[i] - g_live_at[0]
                                                              : g_live_at[0] - g_live_at[i],
                                  mib / 2);
            else /* one saved MiB less at each op down the chain */
                ck_assert_uint_le(g_live_at[i] + mib, g_live_at[i - 1]);
        }
        CG_ASSERT_TENSOR(cg_grad(x), ((float[]){256, 256, 256, 256}), 0, 0);
        cg_release_all(2, l, x);
    }
}
END_TEST

START_TEST(test_user_op_errors)
{
    cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(2, 3)), true);
    cg_tensor *c = cg_ones(CG_SHAPE(2, 3)); /* needs no grad */
    cg_record_status st;
    /* nothing to record is not a failure */
    cg_tensor *y = user_op(c, "twice", no_grad_bw, &st);
    ck_assert_int_eq(st, CG_RECORD_NONE);
    ck_assert_ptr_null(y->node);
    cg_release(y);
    cg_no_grad_begin();
    y = user_op(x, "twice", no_grad_bw, &st);
    cg_no_grad_end();
    ck_assert_int_eq(st, CG_RECORD_NONE);
    cg_release(y);
    /* recording twice on one output: a clear error naming both ops */
    y = user_op(x, "twice", no_grad_bw, &st);
    ck_assert_int_eq(st, CG_RECORD_OK);
    ck_assert_str_eq(cg_node_name(y->node), "twice");
    cg_node *n2;
    ck_assert_int_eq(cg_record_op(y, "again", 1, &x, no_grad_bw, &n2), CG_RECORD_FAILED);
    ck_assert_ptr_null(n2);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "again: the output tensor already has a graph "
                                                  "node (made by twice)"));
    /* output = input, and a leaf parameter as output */
    ck_assert_int_eq(cg_record_op(x, "inplace", 1, &x, no_grad_bw, NULL), CG_RECORD_FAILED);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "inplace: the output is also input 0"));
    cg_tensor *p = cg_requires_grad(cg_zeros(CG_SHAPE(2, 3)), true);
    ck_assert_int_eq(cg_record_op(p, "onto_param", 1, &x, no_grad_bw, NULL), CG_RECORD_FAILED);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "leaf that requires grad"));
    ck_assert_int_eq(cg_record_op(y, "", 1, &x, no_grad_bw, NULL), CG_RECORD_FAILED);
    /* a NULL backward or a negative count: one line saying which, no bogus
     * limit (a user-defined op takes any number of inputs) */
    cg_tensor *o = cg_ones(CG_SHAPE(2, 3));
    ck_assert_int_eq(cg_record_op(o, "nobw", 1, &x, NULL, NULL), CG_RECORD_FAILED);
    ck_assert_str_eq(cg_last_error(), "nobw: recording needs a backward function");
    ck_assert_int_eq(cg_record_op(o, "negn", -1, &x, no_grad_bw, NULL), CG_RECORD_FAILED);
    ck_assert_str_eq(cg_last_error(), "negn: recording needs n_inputs >= 0 (got -1)");
    ck_assert_int_eq(cg_record_op(o, "noins", 2, NULL, no_grad_bw, NULL), CG_RECORD_FAILED);
    ck_assert_str_eq(cg_last_error(), "noins: recording needs the 2 inputs (got NULL)");
    ck_assert_ptr_null(o->node);
    cg_release(o);
    /* a backward that gives no gradient for an input needing one */
    cg_tensor *l = cg_sum(y, 0, NULL, false);
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_ptr_nonnull(
        strstr(cg_last_error(), "backward of twice gave no gradient for input 0"));
    cg_release_all(2, l, y);
    /* a backward failing silently, with an old unrelated error in the slot */
    y = user_op(x, "silent", silent_fail_bw, &st);
    l = cg_sum(y, 0, NULL, false);
    cg_set_error("an old, unrelated error");
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_str_eq(cg_last_error(), "backward of silent failed without recording a reason");
    cg_release_all(2, l, y);
    /* a failed backward frees the graph as a finished one does, the part
     * below the failure (never reached) too: h keeps no node, x no gradient */
    cg_tensor *h = cg_muls(x, 3.0f);
    y = user_op(h, "silent", silent_fail_bw, &st);
    l = cg_sum(y, 0, NULL, false);
    ck_assert_int_eq(cg_graph_size(h), 1);
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_int_eq(cg_graph_size(h), 0);
    ck_assert_int_eq(cg_graph_size(l), 0);
    ck_assert_ptr_null(cg_grad(x));
    cg_release_all(3, l, y, h);
    /* a gradient of the wrong shape names the op */
    y = user_op(x, "badshape", wrong_shape_bw, &st);
    l = cg_sum(y, 0, NULL, false);
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_ptr_nonnull(
        strstr(cg_last_error(), "backward of badshape: gradient 0 has shape [7]"));
    cg_release_all(2, l, y);
    /* [1, 3] for an input [2, 3]: the two broadcast together, but the gradient
     * is no broadcast of the input's shape (summing it to [2, 3] is no sum) */
    y = user_op(x, "smallshape", small_shape_bw, &st);
    l = cg_sum(y, 0, NULL, false);
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "backward of smallshape: gradient 0 has shape "
                                                  "[1, 3], which does not reduce to the input "
                                                  "shape [2, 3]"));
    ck_assert_ptr_null(cg_grad(x));
    cg_release_all(2, l, y);
    /* and the name in cg_requires_grad's message */
    y = user_op(x, "named", no_grad_bw, &st);
    CG_ASSERT_FAILS(cg_requires_grad(y, false), "produced by named");
    cg_release_all(4, y, x, c, p);
}
END_TEST

/* A user's backward that computes a gradient for every input, also one
 * that needs none (a constant, or a tensor set to require grad only after
 * the op was recorded, as PyTorch's graph is fixed when recorded): the
 * engine drops it, and that input gets no .grad. */
static bool both_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    gin[0] = cg_k_muls(g, 1.0f);
    gin[1] = cg_k_muls(g, 1.0f);
    return gin[0] && gin[1];
}
START_TEST(test_user_op_extra_gradient_dropped)
{
    cg_tensor *x = cg_requires_grad(cg_ones(CG_SHAPE(2, 3)), true);
    cg_tensor *c = cg_ones(CG_SHAPE(2, 3));
    for (int late = 0; late < 2; late++) {
        cg_tensor *out = cg_k_add(x, c);
        ck_assert_int_eq(cg_record_op(out, "plus", 2, (cg_tensor *[]){x, c}, both_bw, NULL),
                         CG_RECORD_OK);
        if (late)
            ck_assert_ptr_nonnull(cg_requires_grad(c, true));
        cg_tensor *l = cg_sum_all(out);
        ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
        CG_ASSERT_TENSOR(cg_grad(x), ((float[]){1, 1, 1, 1, 1, 1}), 0, 0);
        ck_assert_ptr_null(cg_grad(c));
        cg_zero_grad(x);
        cg_release_all(2, out, l);
    }
    cg_release_all(2, x, c);
}
END_TEST

/* ------------------------------------------------ what a node keeps */
/* Issue 32: a node keeps no storage of an input its backward does not
 * read (unless a leaf that needs a gradient). y, big and z below are read
 * by no backward (add, sum): each dies when its owner releases it though
 * the graph lives, and the gradients are those of the graph that kept
 * them, bit for bit. */
START_TEST(test_unread_inputs_let_go)
{
    enum { N = 1 << 18 }; /* 1 MiB of floats: from the allocator's mappings, counted */
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(N)), *w = cg_randn(&r, CG_SHAPE(N));
    cg_requires_grad(x, true);
    cg_requires_grad(w, true);
    float *gx[2], *gw[2];
    for (int let_go = 0; let_go < 2; let_go++) {
        cg_tensor *y = cg_mul(x, w);       /* reads x and w (leaves: kept anyway) */
        cg_tensor *big = cg_muls(x, 3.0f); /* reads no input */
        cg_tensor *z = cg_add(y, big);     /* reads neither */
        cg_tensor *loss = cg_sum_all(z);   /* nor z */
        ck_assert_int_eq(y->refcount, 1);  /* no node holds them ... */
        ck_assert_int_eq(big->refcount, 1);
        ck_assert_int_eq(z->refcount, 1);
        ck_assert_int_eq(x->refcount, 3); /* ... but the leaves: mul's and muls's nodes */
        ck_assert_int_eq(w->refcount, 2);
        ck_assert_int_eq(cg_graph_size(loss), 4);
        size_t live = cg_alloc_get_stats().live_bytes;
        if (let_go) {
            cg_release_all(3, y, big, z);
            y = big = z = NULL;
            size_t after = cg_alloc_get_stats().live_bytes;
            ck_assert_msg(live == 0 || live - after >= 3 * (size_t)N * sizeof(float),
                          "releasing three [%d] intermediates freed %zu bytes", N, live - after);
        }
        ck_assert(cg_backward(loss, NULL, false));
        gx[let_go] = cg_test_values(cg_grad(x));
        gw[let_go] = cg_test_values(cg_grad(w));
        cg_zero_grad(x);
        cg_zero_grad(w);
        cg_release_all(4, y, big, z, loss);
    }
    ck_assert(memcmp(gx[0], gx[1], N * sizeof(float)) == 0);
    ck_assert(memcmp(gw[0], gw[1], N * sizeof(float)) == 0);
    float *xv = cg_test_values(x), *wv = cg_test_values(w);
    for (int i = 0; i < N; i++) /* d/dx = w + 3, d/dw = x */
        ck_assert(gx[1][i] == wv[i] + 3.0f && gw[1][i] == xv[i]);
    for (int i = 0; i < 2; i++) {
        free(gx[i]);
        free(gw[i]);
    }
    free(xv);
    free(wv);
    cg_release_all(2, x, w);
}
END_TEST

/* The gradient of a let-go input still reaches the node that made it:
 * through a view and a broadcast add whose inputs all died before the
 * backward, with a constant (no grad) that the add let go too, twice
 * through a retained graph. */
START_TEST(test_unread_routes_gradients)
{
    cg_tensor *x = leaf(CG_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    cg_tensor *c = cg_ones(CG_SHAPE(2));
    cg_tensor *h = cg_mul(x, x);                  /* reads x */
    cg_tensor *v = cg_reshape(h, CG_SHAPE(3, 2)); /* does not read h */
    cg_tensor *s = cg_add(v, c);                  /* reads neither v nor c */
    cg_tensor *loss = cg_sum_all(s);
    ck_assert_int_eq(c->refcount, 1);
    ck_assert_int_eq(h->refcount, 1);
    ck_assert_int_eq(h->storage->refcount, 2); /* h's and its view v's */
    cg_release_all(4, c, h, v, s);
    ck_assert_int_eq(cg_graph_size(loss), 4); /* mul, reshape, add, sum */
    for (int k = 1; k <= 2; k++) {
        ck_assert(cg_backward(loss, NULL, k == 1));
        float want[6];
        for (int i = 0; i < 6; i++)
            want[i] = (float)k * 2.0f * (float)(i + 1);
        CG_ASSERT_TENSOR(cg_grad(x), want, 0, 0);
    }
    ck_assert_int_eq(cg_graph_size(loss), 0);
    cg_release_all(2, loss, x);
}
END_TEST

/* A user-defined op that says an input is unread lets it go: its shape
 * stays for the engine's checks and messages, and reading it back on is
 * refused. And cg_to's node (whose backward reads nothing) lets a float32
 * activation go once it is in bfloat16. */
static bool wrong_shape_unread_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)g;
    ck_assert_ptr_null(n->inputs[0]->storage);
    ck_assert_int_eq(n->inputs[0]->ndim, 2);
    gin[0] = cg_zeros(CG_SHAPE(4));
    return gin[0] != NULL;
}
START_TEST(test_unread_user_op_and_to)
{
    cg_tensor *x = leaf(CG_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    cg_tensor *h = cg_muls(x, 2.0f);
    cg_tensor *y = cg_k_muls(h, 2.0f);
    cg_node *n;
    ck_assert_int_eq(cg_record_op(y, "shapeonly", 1, &h, wrong_shape_unread_bw, &n), CG_RECORD_OK);
    ck_assert_int_eq(h->refcount, 2); /* a user-defined op reads its inputs ... */
    cg_node_set_reads(n, 0, false);   /* ... until it says otherwise */
    ck_assert_int_eq(h->refcount, 1);
    cg_clear_error();
    cg_node_set_reads(n, 0, true);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "shapeonly: input 0 cannot be read"));
    cg_release(h);
    cg_tensor *l = cg_sum_all(y);
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "backward of shapeonly: gradient 0 has shape "
                                                  "[4], which does not reduce to the input "
                                                  "shape [2, 3]"));
    cg_release_all(2, l, y);

    h = cg_muls(x, 2.0f);
    cg_tensor *b = cg_to(h, CG_BF16);
    ck_assert_int_eq(h->refcount, 1);
    cg_release(h);
    l = cg_sum_all(b);
    cg_zero_grad(x);
    ck_assert(cg_backward(l, NULL, false));
    ck_assert(cg_grad(x)->dtype == CG_F32);
    CG_ASSERT_TENSOR(cg_grad(x), ((float[]){2, 2, 2, 2, 2, 2}), 0, 0);
    cg_release_all(3, l, b, x);
}
END_TEST

/* ------------------------------------ adding into an input's gradient */
/* A user op y = 2 (x0 + ... ) whose backward adds into the gradient an
 * input already has when the engine offers it (cg_node_grad_acc), counting
 * the offers. */
static int g_offers;
static bool doubler_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    for (int i = 0; i < n->n_inputs; i++) {
        if (!cg_node_needs_grad(n, i))
            continue;
        cg_tensor *acc = cg_node_grad_acc(n, i), *d = cg_k_muls(g, 2.0f);
        if (!acc) {
            gin[i] = d;
            continue;
        }
        g_offers++;
        const bool ok = cg_k_add_(acc, d);
        cg_release(d);
        gin[i] = cg_retain(acc);
        if (!ok)
            return false;
    }
    return true;
}
static cg_tensor *doubler(int n, cg_tensor **x)
{
    cg_tensor *out = cg_k_muls(n == 1 ? x[0] : cg_k_add(x[0], x[1]), 2.0f); /* in a scope */
    cg_node *node = NULL;
    ck_assert_int_eq(cg_record_op(out, "doubler", n, x, doubler_bw, &node), CG_RECORD_OK);
    ck_assert_ptr_null(cg_node_grad_acc(node, 0)); /* only while its backward runs */
    return out;
}
static void quiet_hook(void *ctx, cg_node *n, cg_tensor **gin) { (void)ctx, (void)n, (void)gin; }

/* The gradient an input already has is offered to the second of its users
 * (here q = h * doubler(h): mul runs first), a leaf's .grad too, and the
 * sums have the bits of the engine's own (the run with a backward hook,
 * which turns the offers off). Not offered: for x op x, under a hook. A linear
 * layer's dx goes the same way (core/linear_backward.c), with the same bits in fp32
 * and bf16 precision. */
START_TEST(test_grad_added_in_place)
{
    cg_rng rng = cg_rng_new(5);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(5, 7)), true);
    for (int c = 0; c < 3; c++) { /* h = exp(x); leaf h = x; doubler(h, h) */
        cg_tensor *got = NULL;
        for (int hooked = 0; hooked < 2; hooked++) {
            cg_scope *sc = cg_scope_begin();
            cg_set_backward_hook(hooked ? quiet_hook : NULL, NULL);
            g_offers = 0;
            cg_zero_grad(x);
            cg_tensor *h = c == 1 ? x : cg_exp(x);
            cg_tensor *p = doubler(c == 2 ? 2 : 1, (cg_tensor *[]){h, h});
            ck_assert(cg_backward(cg_sum_all(cg_mul(h, p)), NULL, false));
            cg_set_backward_hook(NULL, NULL);
            ck_assert_int_eq(g_offers, c < 2 && !hooked ? 1 : 0);
            if (!hooked) {
                got = cg_keep(cg_k_clone(cg_grad(x)));
            } else {
                float *a = cg_test_values(got), *b = cg_test_values(cg_grad(x));
                ck_assert_msg(!memcmp(a, b, 35 * sizeof(float)), "case %d: %a %a", c, (double)a[0],
                              (double)b[0]);
                free(a);
                free(b);
            }
            cg_scope_end(sc);
        }
        cg_release(got);
    }
    /* two linear layers on h: the second's dx added into the first's */
    cg_tensor *w1 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(9, 7)), true);
    cg_tensor *w2 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(6, 7)), true);
    cg_tensor *xb = cg_requires_grad(cg_randn(&rng, CG_SHAPE(80, 7)), true);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        float *ref[3] = {0};
        for (int hooked = 0; hooked < 2; hooked++) {
            cg_scope *sc = cg_scope_begin();
            cg_set_backward_hook(hooked ? quiet_hook : NULL, NULL);
            cg_tensor *leaves[3] = {xb, w1, w2};
            for (int i = 0; i < 3; i++)
                cg_zero_grad(leaves[i]);
            cg_tensor *h = cg_exp(xb), *a = cg_affine(h, w1, NULL), *b = cg_affine(h, w2, NULL);
            ck_assert(cg_backward(cg_add(cg_sum_all(cg_mul(a, a)), cg_sum_all(b)), NULL, false));
            cg_set_backward_hook(NULL, NULL);
            for (int i = 0; i < 3; i++) {
                float *v = cg_test_values(cg_grad(leaves[i]));
                if (!hooked) {
                    ref[i] = v;
                    continue;
                }
                ck_assert_msg(!memcmp(v, ref[i], (size_t)cg_numel(leaves[i]) * sizeof(float)),
                              "precision %s, gradient of leaf %d", bf16 ? "bf16" : "fp32", i);
                free(v);
                free(ref[i]);
            }
            cg_scope_end(sc);
        }
    }
    /* a norm beside a linear layer on h (each order), and a pre-norm
     * residual h + norm(h) W^T: the norm's dx added into h's gradient */
    cg_tensor *wn = cg_requires_grad(cg_randn(&rng, CG_SHAPE(7)), true);
    cg_tensor *bn = cg_requires_grad(cg_randn(&rng, CG_SHAPE(7)), true);
    cg_tensor *w3 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(7, 7)), true);
    for (int v = 0; v < 12; v++) {
        const bool rms = v & 1, bf16 = v & 2;
        const int form = v >> 2;
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *leaves[5] = {xb, w1, w3, wn, bn};
        float *ref[5] = {0};
        for (int hooked = 0; hooked < 2; hooked++) {
            cg_scope *sc = cg_scope_begin();
            cg_set_backward_hook(hooked ? quiet_hook : NULL, NULL);
            for (int i = 0; i < 5; i++)
                cg_zero_grad(leaves[i]);
            cg_tensor *h = cg_exp(xb), *loss;
            if (form == 2) {
                cg_tensor *nh = rms ? cg_rms_norm(h, wn, 1e-5f) : cg_layer_norm(h, wn, bn, 1e-5f);
                cg_tensor *r = cg_add(h, cg_affine(nh, w3, NULL));
                loss = cg_sum_all(cg_mul(r, r));
            } else {
                cg_tensor *a = form ? cg_affine(h, w1, NULL) : NULL;
                cg_tensor *nh = rms ? cg_rms_norm(h, wn, 1e-5f) : cg_layer_norm(h, wn, bn, 1e-5f);
                if (!a)
                    a = cg_affine(h, w1, NULL);
                loss = cg_add(cg_sum_all(cg_mul(nh, nh)), cg_sum_all(a));
            }
            ck_assert(cg_backward(loss, NULL, false));
            cg_set_backward_hook(NULL, NULL);
            for (int i = 0; i < 5; i++) {
                if (!cg_grad(leaves[i]))
                    continue;
                float *got = cg_test_values(cg_grad(leaves[i]));
                if (!hooked) {
                    ref[i] = got;
                    continue;
                }
                ck_assert_msg(!memcmp(got, ref[i], (size_t)cg_numel(leaves[i]) * sizeof(float)),
                              "%s norm, form %d, precision %s, gradient of leaf %d",
                              rms ? "rms" : "layer", form, bf16 ? "bf16" : "fp32", i);
                free(got);
                free(ref[i]);
            }
            cg_scope_end(sc);
        }
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release_all(7, x, w1, w2, xb, wn, bn, w3);
}
END_TEST

/* The leaves' gradients bit for bit as the engine's own additions make
 * them (the hooked run), for every backward of n (no zero_grad between:
 * from the second on every leaf has a .grad to hand over). */
typedef cg_tensor *(*loss_fn)(cg_tensor **leaves, int variant);
static void check_leaf_handover(loss_fn f, cg_tensor **leaves, int nl, int variant, int backwards,
                                int offers_expected)
{
    float *ref[4] = {0};
    ck_assert_int_le(nl, 4);
    for (int hooked = 0; hooked < 2; hooked++) {
        for (int i = 0; i < nl; i++)
            cg_zero_grad(leaves[i]);
        g_offers = 0;
        for (int b = 0; b < backwards; b++) {
            cg_scope *sc = cg_scope_begin();
            cg_set_backward_hook(hooked ? quiet_hook : NULL, NULL);
            ck_assert_msg(cg_backward(f(leaves, variant), NULL, false), "%s", cg_last_error());
            cg_set_backward_hook(NULL, NULL);
            cg_scope_end(sc);
        }
        if (offers_expected >= 0)
            ck_assert_int_eq(g_offers, hooked ? 0 : offers_expected);
        for (int i = 0; i < nl; i++) {
            float *got = cg_test_values(cg_grad(leaves[i]));
            if (!hooked) {
                ref[i] = got;
                continue;
            }
            ck_assert_msg(!memcmp(got, ref[i], (size_t)cg_numel(leaves[i]) * sizeof(float)),
                          "variant %d, %d backwards: gradient of leaf %d", variant, backwards, i);
            free(got);
            free(ref[i]);
        }
    }
}

/* A tied table: logits = exp(table[ids]) table^T, the product's dW first,
 * then index_select's rows added into it (ids repeat, in a [2, 9] batch);
 * variants 2 and 3: columns picked along dim 1 beside table * table, in
 * either order. */
static cg_tensor *tied_loss(cg_tensor **l, int variant)
{
    static const int64_t ids[18] = {3, 1, 3, 0, 7, 3, 1, 1, 5, 3, 0, 2, 7, 7, 1, 3, 3, 4};
    if (variant >= 2) {
        cg_tensor *c = cg_exp(cg_index_select(l[0], 1, cg_from_i64(CG_SHAPE(18), ids)));
        cg_tensor *a = cg_sum_all(cg_mul(c, c)), *b = cg_sum_all(cg_mul(l[0], l[0]));
        return variant == 2 ? cg_add(a, b) : cg_add(b, a);
    }
    cg_tensor *e = cg_embedding(l[0], cg_from_i64(CG_SHAPE(2, 9), ids));
    cg_tensor *y = cg_affine(cg_exp(e), l[0], NULL);
    return variant ? cg_sum_all(cg_mul(y, y)) : cg_sum_all(y);
}
/* A leaf x under both a product and an elementwise op: whichever runs
 * second adds into x's .grad (variant: which comes first). */
static cg_tensor *leaf_x_loss(cg_tensor **l, int variant)
{
    cg_tensor *a = cg_sum_all(cg_affine(l[0], l[1], NULL)), *b = cg_sum_all(cg_mul(l[0], l[0]));
    return variant ? cg_add(a, b) : cg_add(b, a);
}
/* A layer norm without a bias (an optional input left out, NULL in the
 * node) over h, which has a gradient already when the norm's backward
 * runs (variant: the other order), over a leaf x (variant 2). */
static cg_tensor *no_bias_loss(cg_tensor **l, int variant)
{
    cg_tensor *h = variant == 2 ? l[0] : cg_exp(l[0]);
    cg_tensor *a = cg_sum_all(cg_mul(h, h)), *b = cg_sum_all(cg_layer_norm(h, l[1], NULL, 1e-5f));
    return variant == 1 ? cg_add(b, a) : cg_add(a, b);
}
/* doubler(x1, x2): with both .grads there, only x1's is offered (one leaf
 * a backward, so a thread holding one lock never waits for another). */
static cg_tensor *two_leaves_loss(cg_tensor **l, int variant)
{
    (void)variant;
    return cg_sum_all(doubler(2, l));
}

/* A leaf's .grad is handed to the backward that adds into it, as an op's
 * gradient is (the threads that share it: test_threads). */
START_TEST(test_leaf_grad_added_in_place)
{
    cg_rng rng = cg_rng_new(8);
    cg_tensor *table = cg_requires_grad(cg_randn(&rng, CG_SHAPE(8, 70)), true);
    for (int p = 0; p < 2; p++) {
        cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        for (int v = 0; v < 4; v++)
            for (int b = 1; b <= 3; b++)
                check_leaf_handover(tied_loss, &table, 1, v, b, -1);
    }
    cg_tensor *xw[2] = {cg_requires_grad(cg_randn(&rng, CG_SHAPE(40, 7)), true),
                        cg_requires_grad(cg_randn(&rng, CG_SHAPE(5, 7)), true)};
    for (int p = 0; p < 2; p++) {
        cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        for (int v = 0; v < 2; v++)
            for (int b = 1; b <= 2; b++)
                check_leaf_handover(leaf_x_loss, xw, 2, v, b, -1);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_tensor *xn[2] = {cg_requires_grad(cg_randn(&rng, CG_SHAPE(6, 5)), true),
                        cg_requires_grad(cg_randn(&rng, CG_SHAPE(5)), true)};
    for (int v = 0; v < 3; v++)
        check_leaf_handover(no_bias_loss, xn, 2, v, 2, -1);
    cg_tensor *x12[2] = {cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, 4)), true),
                         cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, 4)), true)};
    check_leaf_handover(two_leaves_loss, x12, 2, 0, 1, 0);
    check_leaf_handover(two_leaves_loss, x12, 2, 0, 3, 2);
    cg_release_all(7, table, xw[0], xw[1], xn[0], xn[1], x12[0], x12[1]);
}
END_TEST

/* A bfloat16 x under a linear layer and another user: the gradient it has
 * when the layer's backward runs (a leaf's from the backward before, an
 * op's from the other user) is bfloat16, and the linear kernels add dx
 * into float32 only: not handed over (the backward failed, "dx is added
 * into a contiguous float32 tensor"), the engine adds, in either order,
 * plain, with an activation, through a dropout. */
static cg_tensor *bf16_linear_loss(cg_tensor **l, int variant)
{
    cg_rng rng = cg_rng_new(5);
    cg_tensor *x = variant & 1 ? cg_exp(l[0]) : l[0];
    cg_tensor *y = variant < 2   ? cg_affine(x, l[1], NULL)
                   : variant < 4 ? cg_affine_relu(x, l[1], NULL)
                                 : cg_affine_residual(x, l[1], NULL, NULL, 0.25f, &rng, true);
    cg_tensor *a = cg_sum_all(cg_to(cg_mul(x, x), CG_F32)), *b = cg_sum_all(cg_to(y, CG_F32));
    return variant & 1 ? cg_add(b, a) : cg_add(a, b);
}

START_TEST(test_bf16_linear_input_grad)
{
    cg_rng rng = cg_rng_new(12);
    cg_tensor *f = cg_randn(&rng, CG_SHAPE(6, 9));
    cg_tensor *l[2] = {cg_requires_grad(cg_k_to(f, CG_BF16), true),
                       cg_requires_grad(cg_randn(&rng, CG_SHAPE(5, 9)), true)};
    for (int p = 0; p < 2; p++) {
        cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        for (int v = 0; v < 6; v++)
            check_leaf_handover(bf16_linear_loss, l, 2, v, 2, -1);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release_all(3, f, l[0], l[1]);
}
END_TEST

/* requires_grad changed on an input after an op recorded it: the op's
 * gradient goes where it would have gone at recording, as in PyTorch
 * (w.grad stays None both ways). A constant w made to require grad after
 * y = a * w crashed the backward: mul's backward computed w's gradient
 * from a, which the node had let go (it needed a only for w's gradient). */
START_TEST(test_requires_grad_after_use)
{
    const float v[3] = {0.5f, -1.25f, 2.0f};
    for (int late_on = 0; late_on < 2; late_on++) {
        cg_tensor *p = leaf(1, (int64_t[]){3}, v);
        cg_tensor *w = cg_from_data(1, (int64_t[]){3}, v);
        cg_requires_grad(w, !late_on);
        cg_tensor *a = cg_muls(p, 2.0f), *y = cg_mul(a, w), *l = cg_sum_all(y);
        cg_release(a);
        cg_requires_grad(w, late_on);
        ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
        ck_assert_ptr_null(cg_grad(w));
        for (int i = 0; i < 3; i++)
            ck_assert_float_eq(cg_data(p->grad)[i], 2.0f * v[i]);
        cg_release_all(4, p, w, y, l);
    }
}
END_TEST

/* An embedding from a strided table (a transposed leaf, as a table tied
 * to an output layer's [D, V] weight is): the rows and the gradient have
 * the bits of the contiguous table's, with 1 and 2 threads (core's
 * index_select copies the few picked rows from views of them instead of
 * the whole table first). */
START_TEST(test_embedding_strided_table)
{
    cg_rng rng = cg_rng_new(41);
    const int64_t ids[8] = {4999, 3, 17, 3, 2500, 0, 17, 1};
    for (int threads = 1; threads <= 2; threads++) {
        cg_set_num_threads(threads);
        cg_scope *sc = cg_scope_begin(); /* everything below dies at its end */
        cg_tensor *wt = cg_requires_grad(cg_randn(&rng, CG_SHAPE(64, 5000)), true);
        cg_tensor *w = cg_requires_grad(cg_k_contiguous(cg_view_transpose(wt, 0, 1)), true);
        cg_tensor *up = cg_randn(&rng, CG_SHAPE(2, 4, 64));
        cg_tensor *e[2];
        for (int k = 0; k < 2; k++) {
            cg_tensor *table = k ? cg_transpose(wt, 0, 1) : w; /* [5000, 64] */
            e[k] = cg_embedding(table, cg_from_i64(CG_SHAPE(2, 4), ids));
            ck_assert_msg(e[k] && cg_backward(e[k], up, false), "%s", cg_last_error());
        }
        ck_assert(memcmp(cg_data(e[0]), cg_data(e[1]), 2 * 4 * 64 * sizeof(float)) == 0);
        cg_tensor *gt = cg_k_contiguous(cg_view_transpose((cg_tensor *)cg_grad(wt), 0, 1));
        ck_assert(memcmp(cg_data(gt), cg_data(cg_grad(w)), 5000 * 64 * sizeof(float)) == 0);
        cg_scope_end(sc);
    }
}
END_TEST

static Suite *autograd_suite(void)
{
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_simple_chain);
    tcase_add_test(tc, test_same_tensor_both_inputs);
    tcase_add_test(tc, test_diamond);
    tcase_add_test(tc, test_accumulates_across_backward_calls);
    tcase_add_test(tc, test_leaf_used_twice_adds_per_use);
    tcase_add_test(tc, test_broadcast_reduces_to_input_shape);
    tcase_add_test(tc, test_deep_chain_no_stack_overflow);
    tcase_add_test(tc, test_no_grad_and_detach);
    tcase_add_test(tc, test_graph_freed_after_backward);
    tcase_add_test(tc, test_backward_through_freed_part);
    tcase_add_test(tc, test_saved_freed_during_backward);
    tcase_add_test(tc, test_backward_errors);
    tcase_add_test(tc, test_leaf_grads_are_private);
    tcase_add_test(tc, test_held_grad_keeps_its_values);
    tcase_add_test(tc, test_op_names_complete);
    tcase_add_test(tc, test_memory_flat);
    tcase_add_test(tc, test_gradcheck_detects_errors);
    tcase_add_test(tc, test_user_op_errors);
    tcase_add_test(tc, test_user_op_extra_gradient_dropped);
    tcase_add_test(tc, test_unread_inputs_let_go);
    tcase_add_test(tc, test_unread_routes_gradients);
    tcase_add_test(tc, test_unread_user_op_and_to);
    tcase_add_test(tc, test_grad_added_in_place);
    tcase_add_test(tc, test_leaf_grad_added_in_place);
    tcase_add_test(tc, test_bf16_linear_input_grad);
    tcase_add_test(tc, test_requires_grad_after_use);
    tcase_add_test(tc, test_embedding_strided_table);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {autograd_suite()};
    return cg_test_run(s, 1);
}
