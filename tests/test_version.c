/* Version counters: a tensor a backward reads, written in place between the
 * forward and the backward, makes the backward refuse (one line naming the
 * op and the tensor) and leaves every gradient as it was; a tensor the
 * backward does not read may change freely. One test per kind of in-place
 * write. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/init.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/optim.h"
#include "tests/testutil.h"

#define N 6

static cg_tensor *leaf(float base, bool grad)
{
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = base + (float)i;
    cg_tensor *t = cg_from_data(CG_SHAPE(2, 3), v);
    ck_assert_ptr_nonnull(t);
    cg_requires_grad(t, grad);
    return t;
}

/* loss = sum(w * x), both saved by mul (x needs no grad: mul reads x for w's
 * gradient). */
static cg_tensor *mul_loss(cg_tensor *w, cg_tensor *x)
{
    cg_tensor *m = cg_mul(w, x);
    cg_tensor *l = cg_sum_all(m);
    cg_release(m);
    ck_assert_ptr_nonnull(l);
    return l;
}

/* backward(loss) must refuse with a message holding each needle, and leave
 * w's gradient as it was (NULL here). */
static void assert_refused(cg_tensor *loss, cg_tensor *w, const char *needle)
{
    cg_clear_error();
    ck_assert(!cg_backward(loss, NULL, false));
    const char *msg = cg_last_error();
    ck_assert_msg(strstr(msg, "modified in place") && strstr(msg, needle), "unexpected message: %s",
                  msg);
    ck_assert_ptr_null(strchr(msg, '\n'));
    ck_assert_ptr_null(w->grad);
}

/* The finding of issue 22: sum(w * x), cg_fill_(x, 100), backward gave
 * w.grad = 100 instead of x. */
START_TEST(test_fill_refused)
{
    cg_tensor *w = leaf(1, true), *x = leaf(2, false);
    cg_tensor *loss = mul_loss(w, x);
    ck_assert(cg_fill_(x, 100.0f));
    assert_refused(loss, w, "input 1 of 'mul' (a leaf [2, 3])");
    ck_assert_str_eq(cg_last_error(), "backward: input 1 of 'mul' (a leaf [2, 3]) was modified "
                                      "in place after it was saved (version 1, saved at 0)");
    cg_release_all(3, loss, w, x);
}
END_TEST

/* A refused in-place call writes nothing and leaves the version as it
 * was: index_add_ with a source of the wrong shape bumped it before its
 * shape check, so a backward that had saved dst was refused after it. */
START_TEST(test_refused_write_keeps_version)
{
    cg_tensor *w = leaf(1, true), *x = leaf(2, false);
    cg_tensor *loss = mul_loss(w, x);
    cg_tensor *idx = cg_from_i64(CG_SHAPE(1), (int64_t[]){0}), *bad = cg_ones(CG_SHAPE(1, 4));
    uint64_t v = cg_version(x);
    ck_assert(!cg_k_index_add_(x, 0, idx, bad));
    ck_assert(strstr(cg_last_error(), "source must have") != NULL);
    ck_assert_uint_eq(cg_version(x), v);
    ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
    cg_release_all(5, loss, w, x, idx, bad);
}
END_TEST

/* A refusal changes no gradient: a gradient accumulated before stays. */
START_TEST(test_grads_untouched)
{
    cg_tensor *w = leaf(1, true), *x = leaf(2, true);
    cg_tensor *loss = mul_loss(w, x);
    ck_assert(cg_backward(loss, NULL, false));
    cg_release(loss);
    float gw[N], gx[N], gw2[N], gx2[N];
    cg_copy_to(w->grad, gw);
    cg_copy_to(x->grad, gx);
    /* a longer graph: the changed tensor is read by the last node computed */
    cg_tensor *m = cg_mul(w, x);
    cg_tensor *e = cg_exp(m);
    cg_tensor *s = cg_add(e, m);
    loss = cg_sum_all(s);
    cg_release_all(3, m, e, s);
    ck_assert(cg_k_muls_(w, 2.0f));
    cg_clear_error();
    ck_assert(!cg_backward(loss, NULL, false));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "input 0 of 'mul'"));
    cg_copy_to(w->grad, gw2);
    cg_copy_to(x->grad, gx2);
    ck_assert(memcmp(gw, gw2, sizeof gw) == 0 && memcmp(gx, gx2, sizeof gx) == 0);
    cg_release_all(3, loss, w, x);
}
END_TEST

/* One in-place write per test below, each between the forward and the
 * backward of sum(w * x), on x (which mul saved for w's gradient). */
typedef bool (*write_fn)(cg_tensor *x);

static void check_write(write_fn wr)
{
    cg_tensor *w = leaf(1, true), *x = leaf(2, false);
    cg_tensor *loss = mul_loss(w, x);
    uint64_t v0 = cg_version(x);
    ck_assert(wr(x));
    ck_assert_uint_gt(cg_version(x), v0);
    assert_refused(loss, w, "input 1 of 'mul'");
    cg_release_all(3, loss, w, x);
}

static bool w_copy(cg_tensor *x)
{
    cg_tensor *s = cg_full(CG_SHAPE(2, 3), 7.0f);
    bool ok = cg_copy_(x, s);
    cg_release(s);
    return ok;
}
static bool w_set(cg_tensor *x)
{
    cg_set(x, (int64_t[]){1, 2}, 5.0f);
    return true;
}
static bool w_uniform(cg_tensor *x)
{
    cg_rng r = cg_rng_new(1);
    return cg_uniform_(x, &r, 0, 1);
}
static bool w_normal(cg_tensor *x)
{
    cg_rng r = cg_rng_new(1);
    return cg_normal_(x, &r, 0, 1);
}
static bool w_normal_torch(cg_tensor *x)
{
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    return cg_normal_torch_(x, &g, 0, 1);
}
static bool w_add_(cg_tensor *x)
{
    cg_tensor *o = cg_ones(CG_SHAPE(3));
    bool ok = cg_k_add_(x, o);
    cg_release(o);
    return ok;
}
static bool w_muls_(cg_tensor *x) { return cg_k_muls_(x, 3.0f); }
static bool w_relu_(cg_tensor *x)
{
    cg_fill_(x, -1.0f); /* a version bump of its own; relu_ adds one more */
    return cg_k_relu_(x);
}
static bool w_index_add_(cg_tensor *x)
{
    cg_tensor *s = cg_ones(CG_SHAPE(1, 3));
    bool ok = cg_k_index_add_(x, 0, cg_test_ids(1, (int64_t[]){1}), s);
    cg_release(s);
    return ok;
}
static bool w_scatter_add_(cg_tensor *x)
{
    cg_tensor *s = cg_ones(CG_SHAPE(2, 1));
    bool ok = cg_k_scatter_add_(x, 1, cg_test_ids_nd(CG_SHAPE(2, 1), (int64_t[]){0, 2}), s);
    cg_release(s);
    return ok;
}
static bool w_matmul_into(cg_tensor *x)
{
    cg_tensor *a = cg_ones(CG_SHAPE(2, 4)), *b = cg_ones(CG_SHAPE(4, 3));
    bool ok = cg_k_matmul_into(x, a, b, 1.0f, 0.0f);
    cg_release_all(2, a, b);
    return ok;
}
static bool w_init(cg_tensor *x)
{
    cg_rng r = cg_rng_new(3);
    return cg_init_zeros_(x) && cg_init_xavier_uniform_(x, &r, 1.0f);
}
static bool w_raw(cg_tensor *x)
{
    cg_data(x)[0] = 42.0f; /* through the raw pointer, then said */
    cg_tensor_modified(x);
    return true;
}
/* Through another view of x's storage (a slice), not x itself. */
static bool w_view(cg_tensor *x)
{
    cg_tensor *row = cg_view_select(x, 0, 1);
    bool ok = row && cg_fill_(row, 0.0f);
    cg_release(row);
    return ok;
}
/* A safetensors load into the tensor. */
static bool w_st_load(cg_tensor *x)
{
    cg_st_writer *wr = cg_st_writer_new();
    cg_tensor *s = cg_full(CG_SHAPE(2, 3), 9.0f);
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_version_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    bool ok = cg_st_add_f32(wr, "x", s) && cg_st_writer_save(wr, path);
    cg_st_file *f = ok ? cg_st_open(path) : NULL;
    ok = f && cg_st_load_into(f, "x", x);
    cg_st_close(f);
    cg_st_writer_free(wr);
    cg_release(s);
    remove(path);
    return ok;
}

START_TEST(test_copy) { check_write(w_copy); }
END_TEST
START_TEST(test_set) { check_write(w_set); }
END_TEST
START_TEST(test_uniform) { check_write(w_uniform); }
END_TEST
START_TEST(test_normal) { check_write(w_normal); }
END_TEST
START_TEST(test_normal_torch) { check_write(w_normal_torch); }
END_TEST
START_TEST(test_add_) { check_write(w_add_); }
END_TEST
START_TEST(test_muls_) { check_write(w_muls_); }
END_TEST
START_TEST(test_relu_) { check_write(w_relu_); }
END_TEST
START_TEST(test_index_add_) { check_write(w_index_add_); }
END_TEST
START_TEST(test_scatter_add_) { check_write(w_scatter_add_); }
END_TEST
START_TEST(test_matmul_into) { check_write(w_matmul_into); }
END_TEST
START_TEST(test_init) { check_write(w_init); }
END_TEST
START_TEST(test_raw_pointer) { check_write(w_raw); }
END_TEST
START_TEST(test_other_view) { check_write(w_view); }
END_TEST
START_TEST(test_st_load) { check_write(w_st_load); }
END_TEST

/* A saved tensor used through a view: x is sliced (a view sharing x's
 * storage), the slice is what mul saves, and x itself is written. */
START_TEST(test_view_of_saved)
{
    cg_tensor *w = cg_ones(CG_SHAPE(3));
    cg_requires_grad(w, true);
    cg_tensor *x = leaf(2, false);
    cg_tensor *row = cg_select(x, 0, 0);
    cg_tensor *loss = mul_loss(w, row);
    ck_assert(cg_fill_(x, 1.0f));
    assert_refused(loss, w, "input 1 of 'mul' (a leaf [3])");
    cg_release_all(4, loss, row, w, x);
}
END_TEST

/* An op's saved output, written in place: exp keeps y = exp(x). */
START_TEST(test_saved_output)
{
    cg_tensor *x = leaf(0, true);
    cg_tensor *y = cg_exp(x);
    cg_tensor *loss = cg_sum_all(y);
    ck_assert(cg_k_muls_(y, 2.0f));
    assert_refused(loss, x, "saved tensor 0 of 'exp' ([2, 3])");
    cg_release_all(3, loss, y, x);
}
END_TEST

/* An intermediate result (not a leaf) read by a later op. */
START_TEST(test_intermediate)
{
    cg_tensor *x = leaf(0, true);
    cg_tensor *h = cg_adds(x, 1.0f);
    cg_tensor *y = cg_log(h);
    cg_tensor *loss = cg_sum_all(y);
    cg_tensor *d = cg_detach(h); /* h itself has history: refused (test_write_with_history) */
    ck_assert(cg_fill_(d, 3.0f));
    assert_refused(loss, x, "input 0 of 'log' (the output of 'adds' [2, 3])");
    cg_release_all(5, loss, y, h, x, d);
}
END_TEST

/* A tensor with history (an op's output, or a view of one made by an op)
 * written in place: nothing records the write, so an op recorded after it
 * read the new values while the gradient still went through the old
 * history: h = 2x; fill_(h, 1); sum(h * w) gave x the gradient 2w, where
 * PyTorch (which records the write) gives 0. Every in-place function
 * refuses such a tensor; the values are written through cg_detach(h). */
START_TEST(test_write_with_history)
{
    cg_tensor *x = leaf(0, true), *w = leaf(1, true), *ones = leaf(1, false);
    cg_tensor *h = cg_muls(x, 2.0f), *v = cg_slice(h, 1, 0, 2, 1);
    cg_rng r = cg_rng_new(1);
    cg_mt19937 mt;
    cg_mt19937_seed(&mt, 1);
    uint64_t v0 = cg_version(h);
    CG_ASSERT_REFUSED(!cg_copy_(h, ones), "copy_: the tensor [2, 3] is the output of an op");
    CG_ASSERT_REFUSED(!cg_fill_(v, 1.0f), "fill_: the tensor [2, 2] is the output of an op");
    CG_ASSERT_REFUSED(!cg_set(h, (int64_t[]){0, 0}, 1.0f), "cg_set: the tensor");
    CG_ASSERT_REFUSED(!cg_uniform_(h, &r, 0.0f, 1.0f), "uniform_: the tensor");
    CG_ASSERT_REFUSED(!cg_normal_(v, &r, 0.0f, 1.0f), "normal_: the tensor");
    CG_ASSERT_REFUSED(!cg_normal_torch_(h, &mt, 0.0f, 1.0f), "normal_ (PyTorch generator)");
    CG_ASSERT_REFUSED(!cg_uniform_torch_(h, &mt, 0.0f, 1.0f), "uniform_ (PyTorch generator)");
    ck_assert_uint_eq(cg_version(h), v0); /* nothing written */
    /* the gradient is PyTorch's for what was computed: d sum(h w)/dx = 2w */
    cg_tensor *y = cg_mul(h, w), *loss = cg_sum_all(y);
    ck_assert(cg_backward(loss, NULL, false));
    ck_assert_float_eq(cg_data(x->grad)[0], 2.0f);
    /* through a detached alias: written, as under PyTorch's no_grad */
    cg_tensor *d = cg_detach(h);
    ck_assert_msg(cg_fill_(d, 1.0f), "%s", cg_last_error());
    ck_assert_float_eq(cg_data(h)[0], 1.0f);
    cg_release_all(8, x, w, ones, h, v, y, loss, d);
}
END_TEST

/* Optimizer steps between forward and backward: w is read by mul (x needs
 * grad too, so mul reads w for x's gradient). */
static void check_optim(cg_optim_config cfg, double wd, bool clip)
{
    cg_tensor *w = leaf(1, true), *x = leaf(2, true);
    cg_optim *o = cg_optim_new(&cfg, 1, (cg_optim_param[]){{"w", w, wd}});
    ck_assert_ptr_nonnull(o);
    cg_tensor *loss = mul_loss(w, x);
    ck_assert(cg_backward(loss, NULL, false));
    cg_release(loss);
    loss = mul_loss(w, x);
    float before[N];
    cg_copy_to(w->grad, before);
    if (clip) {
        /* clipping writes the gradients in place: a forward that read one */
        cg_tensor *g = cg_detach(w->grad);
        cg_tensor *l2 = mul_loss(x, g);
        ck_assert(cg_optim_clip_grad_norm(o, 1e-3) > 0);
        cg_clear_error();
        ck_assert(!cg_backward(l2, NULL, false));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "input 1 of 'mul'"));
        cg_release_all(2, l2, g);
    } else {
        ck_assert(cg_optim_step(o));
        cg_clear_error();
        ck_assert(!cg_backward(loss, NULL, false));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "input 0 of 'mul' (a leaf [2, 3])"));
        float after[N];
        cg_copy_to(w->grad, after);
        ck_assert(memcmp(before, after, sizeof before) == 0);
    }
    cg_release_all(3, loss, w, x);
    cg_optim_free(o);
}
START_TEST(test_sgd) { check_optim(cg_sgd_config(0.1, 0.9, false), 0.0, false); }
END_TEST
START_TEST(test_adam) { check_optim(cg_adam_default(0.1), 0.0, false); }
END_TEST
START_TEST(test_adamw) { check_optim(cg_adamw_default(0.1), 0.01, false); }
END_TEST
START_TEST(test_clip) { check_optim(cg_sgd_default(0.1), 0.0, true); }
END_TEST

/* A module load (parameters written from a file) between forward and
 * backward. */
START_TEST(test_module_load)
{
    cg_module *m = cg_module_new("m");
    cg_tensor *w = cg_module_add_param(m, "w", leaf(1, true));
    cg_release(w); /* the module holds it */
    cg_tensor *x = leaf(2, true);
    cg_tensor *loss = mul_loss(w, x);
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_version_m_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert(cg_module_save(m, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    ck_assert(cg_module_load(m, f, NULL));
    cg_st_close(f);
    remove(path);
    cg_clear_error();
    ck_assert(!cg_backward(loss, NULL, false));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "input 0 of 'mul'"));
    ck_assert_ptr_null(w->grad);
    cg_release_all(2, loss, x);
    cg_module_free(m);
}
END_TEST

/* What the backward does not read may change: y = x + 1 (PyTorch does not
 * complain either), and w in sum(w * x) when x needs no gradient (w's
 * gradient is x). */
START_TEST(test_unread_may_change)
{
    cg_tensor *x = leaf(0, true);
    cg_tensor *y = cg_adds(x, 1.0f);
    cg_tensor *loss = cg_sum_all(y);
    ck_assert(cg_fill_(x, 100.0f));
    ck_assert(cg_backward(loss, NULL, false));
    float ones[N] = {1, 1, 1, 1, 1, 1};
    CG_ASSERT_TENSOR(x->grad, ones, 0, 0);
    cg_release_all(2, loss, y);

    cg_tensor *w = leaf(1, true), *d = leaf(2, false);
    cg_tensor *l2 = mul_loss(w, d);
    ck_assert(cg_k_muls_(w, 5.0f)); /* an optimizer-like step on w */
    ck_assert(cg_backward(l2, NULL, false));
    float dv[N] = {2, 3, 4, 5, 6, 7};
    CG_ASSERT_TENSOR(w->grad, dv, 0, 0);
    /* views and shape-only readers: sum, reshape, slice, add, sub */
    cg_tensor *v = cg_reshape(w, 1, (int64_t[]){N});
    cg_tensor *s = cg_slice(v, 0, 1, 4, 1);
    cg_tensor *t = cg_sub(s, s);
    cg_tensor *l3 = cg_sum_all(t);
    ck_assert(cg_fill_(w, 0.0f));
    ck_assert(cg_backward(l3, NULL, false));
    cg_release_all(8, l2, w, d, v, s, t, l3, x);
}
END_TEST

/* Editing after the backward is what training does: no complaint. */
START_TEST(test_after_backward)
{
    cg_tensor *w = leaf(1, true), *x = leaf(2, false);
    cg_tensor *loss = mul_loss(w, x);
    ck_assert(cg_backward(loss, NULL, true));
    ck_assert(cg_fill_(x, 1.0f));
    cg_release(loss);
    loss = mul_loss(w, x); /* a new forward records the new version */
    ck_assert(cg_backward(loss, NULL, false));
    cg_release_all(3, loss, w, x);
}
END_TEST

/* User-defined ops: every input is checked unless the op says otherwise. */
static bool twice_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    (void)n;
    return (gin[0] = cg_k_muls(g, 2.0f)) != NULL;
}
static cg_tensor *twice(cg_tensor *a, bool say_unread)
{
    cg_tensor *out = cg_k_muls(a, 2.0f);
    cg_node *n;
    ck_assert_int_eq(cg_record_op(out, "twice", 1, &a, twice_bw, &n), CG_RECORD_OK);
    if (say_unread)
        cg_node_set_reads(n, 0, false);
    return out;
}
START_TEST(test_custom_op)
{
    for (int say = 0; say < 2; say++) {
        cg_tensor *x = leaf(0, true);
        cg_tensor *y = twice(x, say);
        cg_tensor *loss = cg_sum_all(y);
        ck_assert(cg_fill_(x, 3.0f));
        if (!say) {
            assert_refused(loss, x, "input 0 of 'twice'");
        } else {
            ck_assert(cg_backward(loss, NULL, false));
            ck_assert_float_eq(cg_data(x->grad)[0], 2.0f);
        }
        cg_release_all(3, loss, y, x);
    }
}
END_TEST

static Suite *version_suite(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_fill_refused);
    tcase_add_test(tc, test_refused_write_keeps_version);
    tcase_add_test(tc, test_grads_untouched);
    tcase_add_test(tc, test_copy);
    tcase_add_test(tc, test_set);
    tcase_add_test(tc, test_uniform);
    tcase_add_test(tc, test_normal);
    tcase_add_test(tc, test_normal_torch);
    tcase_add_test(tc, test_add_);
    tcase_add_test(tc, test_muls_);
    tcase_add_test(tc, test_relu_);
    tcase_add_test(tc, test_index_add_);
    tcase_add_test(tc, test_scatter_add_);
    tcase_add_test(tc, test_matmul_into);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_raw_pointer);
    tcase_add_test(tc, test_other_view);
    tcase_add_test(tc, test_st_load);
    tcase_add_test(tc, test_view_of_saved);
    tcase_add_test(tc, test_saved_output);
    tcase_add_test(tc, test_intermediate);
    tcase_add_test(tc, test_write_with_history);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_clip);
    tcase_add_test(tc, test_module_load);
    tcase_add_test(tc, test_unread_may_change);
    tcase_add_test(tc, test_after_backward);
    tcase_add_test(tc, test_custom_op);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = version_suite();
    return cg_test_run(&s, 1);
}
