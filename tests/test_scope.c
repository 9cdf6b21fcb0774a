/* Scopes (core/tensor.h cg_scope_begin): tensors made inside die at the
 * scope's end unless kept; explicit refcounting keeps working inside; a
 * training step written without releases keeps the live-tensor count flat
 * over 10,000 steps. Every check counts live tensors (cg_live_tensors). */
#include <math.h>
#include <stdlib.h>

#include "autograd/gradcheck.h"
#include "core/lifetime.h"
#include "nn/nn.h"
#include "models/charlm/charlm.h"
#include "optim/optim.h"
#include "tests/testutil.h"

START_TEST(test_scope_frees_what_it_made)
{
    int64_t live0 = cg_live_tensors();
    cg_tensor *outside = cg_ones(CG_SHAPE(3));
    cg_scope *s = cg_scope_begin();
    ck_assert_ptr_nonnull(s);
    cg_tensor *a = cg_muls(outside, 2.0f);
    cg_tensor *b = cg_add(a, outside);
    cg_tensor *v = cg_transpose(cg_reshape(b, CG_SHAPE(1, 3)), 0, 1); /* views too */
    cg_tensor *c = cg_to_contiguous(outside); /* a new reference to an outside tensor */
    cg_tensor *r = cg_retain(a);              /* retained inside: given back too */
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_eq(r, a);
    ck_assert_int_ge(cg_live_tensors(), live0 + 4);
    cg_tensor *d = cg_mul(a, a);
    cg_release(d); /* an explicit release inside a scope is fine */
    cg_scope_end(s);
    ck_assert_int_eq(cg_live_tensors(), live0 + 1); /* only `outside` */
    ck_assert_int_eq(outside->refcount, 1);         /* c's reference was given back */
    (void)c;
    cg_release(outside);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* A function with its own scope that returns a kept result with its graph. */
static cg_tensor *tanh_sq(cg_tensor *x)
{
    cg_scope *s = cg_scope_begin();
    cg_tensor *t = cg_tanh(x);
    cg_tensor *y = cg_sum(cg_mul(t, t), 0, NULL, false);
    cg_keep(y);
    cg_scope_end(s);
    return y;
}

START_TEST(test_scope_keep_and_nesting)
{
    int64_t live0 = cg_live_tensors();
    cg_tensor *x = cg_requires_grad(cg_from_data(CG_SHAPE(3), (float[]){0.1f, -0.5f, 0.7f}), true);
    /* kept out of the outermost scope: the caller owns it */
    cg_scope *s = cg_scope_begin();
    cg_tensor *y = tanh_sq(x); /* kept into s */
    cg_tensor *z = cg_keep(cg_muls(y, 3.0f));
    cg_scope_end(s);
    ck_assert_int_eq(cg_graph_size(z), 4); /* muls <- sum <- mul <- tanh: the graph survived */
    ck_assert(cg_backward(z, NULL, false));
    const float xs[3] = {0.1f, -0.5f, 0.7f};
    for (int i = 0; i < 3; i++) { /* d/dx 3*tanh^2 = 6 tanh (1 - tanh^2) */
        double t = tanh(xs[i]);
        ck_assert_float_eq_tol(cg_data(x->grad)[i], 6 * t * (1 - t * t), 1e-5);
    }
    cg_release(z);
    cg_zero_grad(x);
    ck_assert_int_eq(cg_live_tensors(), live0 + 1);

    /* ending an outer scope ends an inner one left open */
    cg_scope *outer = cg_scope_begin();
    cg_tensor *a = cg_muls(x, 2.0f);
    cg_scope_begin();
    cg_tensor *b = cg_muls(a, 2.0f);
    ck_assert_ptr_nonnull(b);
    cg_scope_end(outer);
    ck_assert_int_eq(cg_live_tensors(), live0 + 1);
    /* a scope that is not open: an error, nothing freed */
    cg_clear_error();
    cg_scope_end(outer == NULL ? NULL : (cg_scope *)&live0);
    ck_assert(cg_has_error());
    cg_release(x);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* The documented pattern (issue 33): a function with its own scope returns
 * a kept result whose graph holds a tensor of the caller's scope. */
static cg_tensor *relu2x(cg_tensor *x)
{
    cg_scope *s = cg_scope_begin();
    cg_tensor *y = cg_keep(cg_relu(cg_muls(x, 2.0f)));
    cg_scope_end(s);
    return y;
}

/* Two levels: relu2x inside another function's scope. */
static cg_tensor *relu2x_sq(cg_tensor *x)
{
    cg_scope *s = cg_scope_begin();
    cg_tensor *y = relu2x(x);
    cg_tensor *z = cg_keep(cg_mul(y, y));
    cg_scope_end(s);
    return z;
}

static const float g_xs[3] = {0.5f, -1.0f, 1.5f};

/* x's gradient must be want[i] * 1 for each i. */
static void check_grad(cg_tensor *x, const float *want)
{
    ck_assert_ptr_nonnull(cg_grad(x));
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq_tol(cg_data(cg_grad(x))[i], want[i], 1e-6);
}

/* Every shape of nesting, with graphs that cross scopes; run under ASan
 * (meson test -C build-asan test_scope): each case frees exactly once. */
/* cg_scope_end_id: ends a scope by its number while it is open, and
 * nothing once an outer scope has ended it, even when a new scope took its
 * address. */
START_TEST(test_scope_end_by_id)
{
    cg_scope *outer = cg_scope_begin(), *inner = cg_scope_begin();
    uint64_t id = cg_scope_id(inner);
    ck_assert(id != 0 && id != cg_scope_id(outer) && cg_scope_id(NULL) == 0);
    cg_scope_end(outer); /* ends inner too; the next two may take their addresses */
    cg_scope *again = cg_scope_begin(), *again2 = cg_scope_begin();
    cg_tensor *t = cg_ones(1, (int64_t[]){3});
    cg_clear_error();
    ck_assert(!cg_scope_end_id(id) && !cg_has_error());
    ck_assert(cg_data(t)[2] == 1.0f); /* the new scopes are untouched */
    ck_assert(cg_scope_end_id(cg_scope_id(again2)));
    ck_assert(!cg_scope_end_id(0));
    cg_scope_end(again);
}
END_TEST

START_TEST(test_scope_nested_graphs)
{
    int64_t live0 = cg_live_tensors();
    const float d1[3] = {2, 0, 2}, d2[3] = {4, 0, 12}; /* d relu(2x), d relu(2x)^2 */
    /* 1. an outer leaf used in an inner op; the kept result used in an outer
     * op; backward after the inner scope ended, inside the outer one */
    cg_scope *outer = cg_scope_begin();
    cg_tensor *x = cg_requires_grad(cg_from_data(CG_SHAPE(3), g_xs), true);
    cg_tensor *y = relu2x(x);
    cg_tensor *loss = cg_sum(cg_muls(y, 1.0f), 0, NULL, false);
    ck_assert(cg_backward(loss, NULL, false));
    check_grad(x, d1);
    cg_scope_end(outer); /* freed x twice before */
    ck_assert_int_eq(cg_live_tensors(), live0);

    /* 2. the same, backward after the outer scope too (the loss kept) */
    outer = cg_scope_begin();
    x = cg_keep(cg_requires_grad(cg_from_data(CG_SHAPE(3), g_xs), true));
    loss = cg_keep(cg_sum(relu2x(x), 0, NULL, false));
    cg_scope_end(outer);
    ck_assert(cg_backward(loss, NULL, false));
    check_grad(x, d1);
    cg_release_all(2, loss, x);
    ck_assert_int_eq(cg_live_tensors(), live0);

    /* 3. double nesting, the leaf made outside every scope */
    x = cg_requires_grad(cg_from_data(CG_SHAPE(3), g_xs), true);
    outer = cg_scope_begin();
    loss = cg_sum(relu2x_sq(x), 0, NULL, false);
    ck_assert(cg_backward(loss, NULL, false));
    check_grad(x, d2);
    cg_scope_end(outer);
    ck_assert_int_eq(x->refcount, 1);
    cg_zero_grad(x);
    /* ... and with no outer scope: the caller owns the result */
    loss = relu2x_sq(x);
    ck_assert_int_eq(cg_graph_size(loss), 3);
    cg_release(loss);
    ck_assert_int_eq(x->refcount, 1);

    /* 4. keep of a tensor made in an outer scope, and of an outside one:
     * each a new reference (cg_retain) kept out of the inner scope */
    outer = cg_scope_begin();
    cg_tensor *a = cg_muls(x, 3.0f);
    cg_scope *inner = cg_scope_begin();
    cg_tensor *ka = cg_keep(cg_retain(a));
    cg_tensor *kx = cg_keep(cg_contiguous(x)); /* x itself, retained */
    cg_scope_end(inner);
    ck_assert_ptr_eq(ka, a);
    ck_assert_ptr_eq(kx, x);
    ck_assert_int_eq(x->refcount, 3); /* mine, a's node, the outer scope's */
    cg_scope_end(outer);
    ck_assert_int_eq(x->refcount, 1);

    /* 5. releases inside: of a retained outside tensor, of an inner
     * intermediate a kept graph still uses, of the outer tensor's retain */
    outer = cg_scope_begin();
    a = cg_muls(x, 3.0f);
    inner = cg_scope_begin();
    cg_release(cg_retain(x));
    cg_release(cg_retain(a));
    cg_tensor *m = cg_muls(a, 2.0f);
    y = cg_keep(cg_relu(m));
    cg_release(m);
    cg_scope_end(inner);
    loss = cg_sum(y, 0, NULL, false);
    ck_assert(cg_backward(loss, NULL, false));
    const float d5[3] = {6, 0, 6};
    check_grad(x, d5);
    cg_scope_end(outer);
    ck_assert_int_eq(x->refcount, 1);
    cg_release(x);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* A module whose forward opens its own scope, applied twice in a step to
 * a parameter of another module (a graph through two scopes and a
 * container): parameters survive, the step leaves nothing. */
/* A container in a scope holding a new reference to an older tensor (a
 * cache, cg_hold(cg_retain(x))): the scope gives none of it back, so x
 * outlives its owner's reference. */
START_TEST(test_scope_hold_of_outer_tensor)
{
    int64_t live0 = cg_live_tensors();
    cg_tensor *x = cg_ones(CG_SHAPE(3));
    cg_scope *s = cg_scope_begin();
    cg_tensor *held = cg_hold(cg_retain(x));
    cg_scope_end(s);
    ck_assert_int_eq(x->refcount, 2);
    ck_assert_int_eq(x->held, 1);
    cg_release(x); /* the owner's: the container's keeps it */
    ck_assert_int_eq(cg_live_tensors(), live0 + 1);
    cg_release_held(held);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

START_TEST(test_scope_nested_module_forward)
{
    int64_t live0 = cg_live_tensors();
    cg_rng rng = cg_rng_new(5);
    cg_linear *lin = cg_linear_new(3, 3, true, &rng);
    for (int step = 0; step < 3; step++) {
        cg_scope *s = cg_scope_begin();
        cg_tensor *h = relu2x(cg_linear_forward(lin, lin->weight));
        cg_tensor *loss = cg_sum(relu2x_sq(h), 0, NULL, false);
        ck_assert(cg_backward(loss, NULL, false));
        ck_assert_ptr_nonnull(cg_grad(lin->weight));
        cg_scope_end(s);
    }
    ck_assert_int_eq(lin->weight->refcount, 1);
    cg_module_free(CG_MODULE(lin));
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* Models and optimizers built inside a scope outlive it (their tensors are
 * held), and the gradients a backward leaves on parameters too. */
START_TEST(test_scope_containers_survive)
{
    int64_t live0 = cg_live_tensors();
    cg_rng rng = cg_rng_new(2);
    cg_scope *s = cg_scope_begin();
    cg_linear *lin = cg_linear_new(4, 3, true, &rng);
    cg_param_list pl = {0};
    ck_assert(cg_module_params(CG_MODULE(lin), &pl));
    cg_optim_param op[2] = {{pl.items[0].name, pl.items[0].tensor, 0.0},
                            {pl.items[1].name, pl.items[1].tensor, 0.0}};
    cg_optim_config cfg = cg_adam_config(1e-2, 0.9, 0.999, 1e-8);
    cg_optim *opt = cg_optim_new(&cfg, 2, op);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(5, 4));
    cg_tensor *loss = cg_mean(cg_linear_forward(lin, x), 0, NULL, false);
    ck_assert(cg_backward(loss, NULL, false));
    ck_assert(cg_optim_step(opt));
    cg_scope_end(s);
    ck_assert_ptr_nonnull(lin->weight->grad); /* still there */
    ck_assert_int_eq(cg_numel(cg_optim_state(opt, 0, "exp_avg")), 12);
    s = cg_scope_begin(); /* a second step works on the survivors */
    ck_assert(cg_optim_step(opt));
    cg_scope_end(s);
    cg_optim_free(opt);
    cg_param_list_free(&pl);
    cg_module_free(CG_MODULE(lin));
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* A training step with no release anywhere, 10,000 times: the number of
 * live tensors after every step equals the number before the loop. */
START_TEST(test_scope_training_flat)
{
    cg_rng rng = cg_rng_new(7);
    enum { N = 32, STEPS = 10000 };
    float xy[2 * N];
    int64_t label[N];
    for (int i = 0; i < N; i++) {
        xy[2 * i] = cg_rng_normal(&rng);
        xy[2 * i + 1] = cg_rng_normal(&rng);
        label[i] = xy[2 * i] * xy[2 * i + 1] > 0; /* XOR of the signs */
    }
    cg_module *root = cg_module_new("MLP");
    cg_linear *fc1 = cg_module_add_child(root, "fc1", cg_linear_new(2, 16, true, &rng));
    cg_norm *ln = cg_module_add_child(root, "ln", cg_layernorm_new(16));
    cg_linear *fc2 = cg_module_add_child(root, "fc2", cg_linear_new(16, 2, true, &rng));
    cg_param_list pl = {0};
    ck_assert(cg_module_params(root, &pl));
    cg_optim_param *op = calloc((size_t)pl.n, sizeof *op);
    for (int i = 0; i < pl.n; i++)
        op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.0};
    cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.999, 1e-8);
    cg_optim *opt = cg_optim_new(&cfg, pl.n, op);
    cg_tensor *x = cg_from_data(CG_SHAPE(N, 2), xy);

    int64_t live_before = cg_live_tensors(), live_step10 = -1;
    float first = NAN, last = NAN;
    for (int step = 0; step < STEPS; step++) {
        cg_scope *s = cg_scope_begin();
        cg_tensor *h = cg_gelu(cg_norm_forward(ln, cg_linear_forward(fc1, x)));
        cg_tensor *loss =
            cg_cross_entropy(cg_linear_forward(fc2, h), cg_from_i64(1, &(int64_t){N}, label), -100,
                             0.0f, CG_REDUCTION_MEAN);
        ck_assert_msg(loss && cg_backward(loss, NULL, false) && cg_optim_step(opt), "step %d: %s",
                      step, cg_last_error());
        cg_optim_zero_grad(opt);
        if (step == 0)
            first = cg_item(loss);
        last = cg_item(loss);
        cg_scope_end(s);
        if (step == 9)
            live_step10 = cg_live_tensors();
        if (cg_live_tensors() != live_before)
            ck_abort_msg("step %d: %lld live tensors, %lld before the loop", step,
                         (long long)cg_live_tensors(), (long long)live_before);
    }
    ck_assert_int_eq(live_step10, live_before);
    ck_assert_msg(last < 0.5f * first, "loss %g -> %g: did not train", first, last);
    cg_release(x);
    cg_optim_free(opt);
    free(op);
    cg_param_list_free(&pl);
    cg_module_free(root);
    (void)fc2;
}
END_TEST

/* The zoo's character LM, built inside a scope and trained with one scope
 * per step: what the model stores (its position table) survives, and the
 * step leaves nothing behind. */
START_TEST(test_scope_zoo_model)
{
    int64_t live0 = cg_live_tensors();
    cg_charlm_config cfg = cg_charlm_config_default();
    cfg.vocab = 11, cfg.d = 16, cfg.H = 2, cfg.layers = 2, cfg.d_ff = 32, cfg.max_len = 8;
    cg_scope *s = cg_scope_begin();
    cg_charlm *m = cg_charlm_new(&cfg, 3);
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 1e-2);
    cg_scope_end(s);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(opt);
    int64_t ids[2 * 8], tg[2 * 8];
    for (int i = 0; i < 16; i++)
        ids[i] = i % 11, tg[i] = (i + 1) % 11;
    int64_t live_before = cg_live_tensors();
    float first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        s = cg_scope_begin();
        cg_tensor *loss = cg_charlm_loss(m, cg_charlm_forward(m, ids, 2, 8), tg);
        ck_assert_msg(loss && cg_backward(loss, NULL, false) && cg_optim_step(opt), "%s",
                      cg_last_error());
        cg_optim_zero_grad(opt);
        last = cg_item(loss);
        first = step ? first : last;
        cg_scope_end(s);
        ck_assert_int_eq(cg_live_tensors(), live_before);
    }
    ck_assert_msg(last < first, "loss %g -> %g", first, last);
    cg_optim_free(opt);
    cg_charlm_free(m);
    ck_assert_int_eq(cg_live_tensors(), live0);
}
END_TEST

/* The checked mode keeps every freed header (the list grows past its
 * first 1024): 1500 released tensors, 1500 more kept. */
START_TEST(test_checked_keeps_every_header)
{
    if (!cg_debug_enabled())
        return;
    const int64_t kept0 = cg_lifetime_quarantined();
    for (int i = 0; i < 1500; i++)
        cg_release(cg_zeros(CG_SHAPE(1)));
    ck_assert_int_eq(cg_lifetime_quarantined() - kept0, 1500);
}
END_TEST

static Suite *scope_suite(void)
{
    Suite *s = suite_create("scope");
    TCase *tc = tcase_create("scope");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_scope_frees_what_it_made);
    tcase_add_test(tc, test_scope_end_by_id);
    tcase_add_test(tc, test_scope_keep_and_nesting);
    tcase_add_test(tc, test_scope_nested_graphs);
    tcase_add_test(tc, test_scope_nested_module_forward);
    tcase_add_test(tc, test_scope_hold_of_outer_tensor);
    tcase_add_test(tc, test_scope_containers_survive);
    tcase_add_test(tc, test_scope_training_flat);
    tcase_add_test(tc, test_scope_zoo_model);
    tcase_add_test(tc, test_checked_keeps_every_header);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {scope_suite()};
    return cg_test_run(s, 1);
}
