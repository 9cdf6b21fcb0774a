/* Extending cgrad as a user does, with the installed headers only ("cgrad.h",
 * no testutil.h: scripts/test_install.sh builds this suite out of tree with
 * pkg-config alone): a differentiable op of one's own with its backward, a
 * module with a parameter and buffers, an optimizer and a learning-rate
 * schedule of one's own (docs/api.md, "Your own differentiable op", "Your
 * own optimizer and schedule"; docs/own_module.md). Each is checked against
 * gradcheck, save and load, eval and no-grad, bf16, gradient accumulation
 * and clipping, two threads, and the misuses a user makes, each refused in
 * one line that names the op. Meson runs it in the checked mode too. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp under -std=c11 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgrad.h"

#define OK_OR_FAIL(expr) ck_assert_msg((expr), "%s: %s", #expr, cg_last_error())

/* ------------------------------------------------------------ the op */
/* gate(x, g) = x * sigmoid(g), g [D] broadcast over x [..., D]. The backward
 * reads x (for g's gradient) and the sigmoid it saved. */
static int g_misuse; /* 0: the right backward; else one of the mistakes below */

static bool gate_backward(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_tensor *x = n->inputs[0], *s = n->saved[0];
    bool ok = true;
    if (cg_node_needs_grad(n, 0))
        ok = (gin[0] = cg_k_mul(g, s)) != NULL;
    if (ok && cg_node_needs_grad(n, 1)) { /* g * x * s * (1 - s), reduced by the engine */
        cg_tensor *ns = cg_k_muls(s, -1.0f), *om = cg_k_adds(ns, 1.0f), *ds = cg_k_mul(s, om);
        cg_tensor *gx = cg_k_mul(g, x);
        ok = (gin[1] = cg_k_mul(gx, ds)) != NULL;
        cg_release_all(4, ns, om, ds, gx);
    }
    if (!ok || !g_misuse)
        return ok;
    cg_release(gin[0]); /* the mistakes, in x's gradient */
    gin[0] = NULL;
    switch (g_misuse) {
    case 1: /* a gradient of another shape */ gin[0] = cg_zeros(CG_SHAPE(7)); break;
    case 2: /* an int64 gradient (an argmax by mistake) */
        gin[0] = cg_zeros_dtype(CG_I64, x->ndim, x->shape);
        break;
    case 3: /* a bool gradient */ gin[0] = cg_zeros_dtype(CG_BOOL, x->ndim, x->shape); break;
    case 4: /* failing without a message */ return false;
    default: /* 5: forgetting to set gin[0] */ break;
    }
    return true;
}

static cg_tensor *gate(cg_tensor *x, cg_tensor *gt)
{
    if (!x || !gt)
        return NULL;
    cg_tensor *s = cg_k_sigmoid(gt);
    cg_tensor *out = s ? cg_k_mul(x, s) : NULL;
    cg_tensor *in[2] = {x, gt};
    cg_node *node = NULL;
    cg_record_status st =
        out ? cg_record_op(out, "gate", 2, in, gate_backward, &node) : CG_RECORD_FAILED;
    if (st == CG_RECORD_OK && cg_node_save(node, s) < 0)
        st = CG_RECORD_FAILED;
    cg_release(s);
    if (st == CG_RECORD_FAILED) {
        cg_release(out);
        return NULL;
    }
    return out;
}

static cg_tensor *gate_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return gate(in[0], in[1]);
}

START_TEST(test_op_gradcheck)
{
    cg_rng rng = cg_rng_new(1);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 5, 4)), true);
    cg_tensor *gt = cg_requires_grad(cg_randn(&rng, CG_SHAPE(4)), true);
    cg_gradcheck_report rep;
    cg_tensor *in[2] = {x, gt};
    ck_assert_msg(cg_gradcheck(gate_fn, NULL, 2, in, NULL, &rep), "%s", rep.message);
    /* a transposed view as x, and x a constant (only g's gradient) */
    cg_tensor *xt = cg_transpose(x, 0, 1), *xtd = cg_detach(xt);
    cg_tensor *in2[2] = {xtd, gt};
    ck_assert_msg(cg_gradcheck(gate_fn, NULL, 2, in2, NULL, &rep), "%s", rep.message);
    /* the op inside a graph of the library's ops: linear -> gate -> sum */
    cg_linear *fc = cg_linear_new(4, 4, true, &rng);
    cg_tensor *h = cg_linear_forward(fc, x), *y = gate(h, gt), *l = cg_sum_all(y);
    OK_OR_FAIL(l && cg_backward(l, NULL, false));
    ck_assert(cg_grad(fc->weight) && cg_grad(gt) && cg_grad(x));
    cg_release_all(7, x, gt, xt, xtd, h, y, l);
    cg_module_free(CG_MODULE(fc));
}
END_TEST

/* Each mistake of a backward is refused in one line naming the op, and the
 * gradients stay as they were. */
START_TEST(test_op_backward_mistakes)
{
    static const char *const want[] = {
        NULL,
        "backward of gate: gradient 0 has shape [7], which does not reduce to the input shape "
        "[3, 4]",
        "backward of gate: gradient 0 is int64; a gradient must be a float tensor",
        "backward of gate: gradient 0 is bool; a gradient must be a float tensor",
        "backward of gate failed without recording a reason",
        "backward of gate gave no gradient for input 0, which needs one",
    };
    cg_rng rng = cg_rng_new(2);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, 4)), true);
    cg_tensor *gt = cg_requires_grad(cg_randn(&rng, CG_SHAPE(4)), true);
    for (int mode = 1; mode <= 5; mode++) {
        cg_clear_error();
        cg_tensor *y = gate(x, gt), *l = cg_sum_all(y);
        g_misuse = mode;
        bool ok = cg_backward(l, NULL, false);
        g_misuse = 0;
        ck_assert_msg(!ok, "mistake %d was accepted", mode);
        ck_assert_msg(strstr(cg_last_error(), want[mode]) != NULL, "mistake %d: got '%s'", mode,
                      cg_last_error());
        ck_assert_msg(!strchr(cg_last_error(), '\n'), "more than one line: %s", cg_last_error());
        ck_assert_msg(!cg_grad(x) && !cg_grad(gt), "mistake %d left a gradient", mode);
        cg_release_all(2, y, l);
    }
    /* recording mistakes: on an input, twice, without a backward or a name */
    cg_tensor *in[2] = {x, gt};
    cg_node *node;
    ck_assert_int_eq(cg_record_op(x, "gate", 2, in, gate_backward, &node), CG_RECORD_FAILED);
    ck_assert_str_eq(cg_last_error(), "gate: the output is also input 0; an op records on a "
                                      "tensor it has just made (in-place ops cannot be recorded)");
    cg_tensor *y = gate(x, gt);
    ck_assert_int_eq(cg_record_op(y, "gate", 2, in, gate_backward, &node), CG_RECORD_FAILED);
    ck_assert(strstr(cg_last_error(), "already has a graph node (made by gate)"));
    cg_tensor *z = cg_k_clone(x);
    ck_assert_int_eq(cg_record_op(z, "gate", 2, in, NULL, &node), CG_RECORD_FAILED);
    ck_assert_str_eq(cg_last_error(), "gate: recording needs a backward function");
    ck_assert_int_eq(cg_record_op(z, "", 2, in, gate_backward, &node), CG_RECORD_FAILED);
    ck_assert(strstr(cg_last_error(), "needs a name"));
    /* nothing to record: grad mode off, or no input needs a gradient */
    cg_no_grad_begin();
    ck_assert_int_eq(cg_record_op(z, "gate", 2, in, gate_backward, &node), CG_RECORD_NONE);
    cg_no_grad_end();
    ck_assert(node == NULL && z->node == NULL && !z->requires_grad);
    cg_release_all(4, x, gt, y, z);
}
END_TEST

/* A bfloat16 x gets a bfloat16 gradient (the engine rounds the backward's
 * float32 one), and under bf16 autocast the op composes with a Linear. */
START_TEST(test_op_bf16)
{
    cg_rng rng = cg_rng_new(3);
    cg_tensor *x32 = cg_randn(&rng, CG_SHAPE(3, 4));
    cg_tensor *x = cg_requires_grad(cg_to(x32, CG_BF16), true);
    cg_tensor *gt = cg_requires_grad(cg_randn(&rng, CG_SHAPE(4)), true);
    cg_tensor *y = gate(x, gt), *l = cg_sum_all(y);
    OK_OR_FAIL(l && cg_backward(l, NULL, false));
    ck_assert(cg_grad(x)->dtype == CG_BF16 && cg_grad(gt)->dtype == CG_F32);
    cg_release_all(5, x32, x, gt, y, l);
}
END_TEST

/* ---------------------------------------------------------- the module */
/* GatedCenter: h = fc(x); in training, running_mean (a float buffer) moves
 * to h's batch mean and num_batches (an int64 buffer) counts; the output is
 * gate(h - running_mean, gate), gate a parameter of its own. */
typedef struct {
    cg_module base;
    cg_linear *fc;
    cg_tensor *gate;                       /* parameter */
    cg_tensor *running_mean, *num_batches; /* buffers */
} gated_center;

static gated_center *gated_center_new(int64_t d, cg_rng *rng)
{
    gated_center *m = (gated_center *)cg_module_alloc(sizeof *m, "GatedCenter", NULL);
    if (!m)
        return NULL;
    m->fc = cg_module_add_child(&m->base, "fc", cg_linear_new(d, d, true, rng));
    cg_tensor *g = cg_full(CG_SHAPE(d), 0.5f), *mean = cg_zeros(CG_SHAPE(d));
    cg_tensor *n = cg_zeros_dtype(CG_I64, CG_SHAPE(1));
    cg_module_add_param_at(&m->base, "gate", g, &m->gate);
    m->running_mean = cg_module_add_buffer(&m->base, "running_mean", mean, true);
    m->num_batches = cg_module_add_buffer(&m->base, "num_batches", n, true);
    cg_release_all(3, g, mean, n);
    if (!m->fc || !m->gate || !m->running_mean || !m->num_batches) {
        cg_module_free(CG_MODULE(m));
        return NULL;
    }
    return m;
}

static cg_tensor *gated_center_impl(cg_module *mod, cg_tensor *const *in, void *args)
{
    (void)args;
    gated_center *m = (gated_center *)mod;
    cg_tensor *h = cg_linear_forward(m->fc, in[0]);
    if (h && mod->training) { /* the buffers move under no-grad, as PyTorch's BatchNorm's */
        cg_no_grad_begin();
        int dim0 = 0;
        cg_tensor *bm = cg_k_mean(h, 1, &dim0, false), *a = cg_k_muls(m->running_mean, 0.9f);
        cg_tensor *b = bm ? cg_k_muls(bm, 0.1f) : NULL, *next = a && b ? cg_k_add(a, b) : NULL;
        bool ok = next && cg_copy_(m->running_mean, next);
        if (ok) {
            cg_data_i64(m->num_batches)[0]++;
            cg_tensor_modified(m->num_batches);
        }
        cg_release_all(4, bm, a, b, next);
        cg_no_grad_end();
        if (!ok) {
            cg_release(h);
            return NULL;
        }
    }
    cg_tensor *c = cg_sub(h, m->running_mean), *y = gate(c, m->gate);
    cg_release_all(2, h, c);
    return y;
}

static cg_tensor *gated_center_forward(gated_center *m, cg_tensor *x)
{
    return m && x ? cg_module_call(&m->base, gated_center_impl, 1, &x, NULL) : NULL;
}

static cg_tensor *module_fn(void *ctx, cg_tensor *const *in)
{
    return gated_center_forward(ctx, in[0]);
}

START_TEST(test_module_gradcheck_and_registry)
{
    cg_rng rng = cg_rng_new(4);
    gated_center *m = gated_center_new(4, &rng);
    ck_assert_ptr_nonnull(m);
    cg_module_train(CG_MODULE(m), false); /* a gradcheck needs the same function each call */
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, 4)), true);
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(module_fn, m, 1, &x, NULL, &rep), "%s", rep.message);
    /* its parameters, as the optimizers see them, and its state dict */
    cg_param_list sd = {0};
    OK_OR_FAIL(cg_module_state_dict(CG_MODULE(m), &sd));
    const char *names[] = {"gate", "running_mean", "num_batches", "fc.weight", "fc.bias"};
    ck_assert_int_eq(sd.n, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(sd.items[i].name, names[i]);
    cg_param_list_free(&sd);
    ck_assert_int_eq(cg_module_num_param_tensors(CG_MODULE(m)), 3);
    cg_release(x);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* Train mode moves the buffers; eval mode and no-grad do not, and no-grad
 * records no graph through the user's op. */
START_TEST(test_module_eval_and_no_grad)
{
    cg_rng rng = cg_rng_new(5);
    gated_center *m = gated_center_new(4, &rng);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 4));
    cg_tensor *y = gated_center_forward(m, x);
    OK_OR_FAIL(y && y->requires_grad);
    ck_assert_int_eq(cg_data_i64(m->num_batches)[0], 1);
    cg_tensor *mean1 = cg_k_clone(m->running_mean);
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *y2 = gated_center_forward(m, x);
    cg_no_grad_end();
    OK_OR_FAIL(y2 != NULL);
    ck_assert(!y2->requires_grad && y2->node == NULL);
    ck_assert_int_eq(cg_data_i64(m->num_batches)[0], 1);
    ck_assert(!memcmp(cg_data(mean1), cg_data(m->running_mean), 4 * sizeof(float)));
    cg_release_all(4, x, y, mean1, y2);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* A scratch directory in $TMPDIR (else /tmp), made before the tests (so
 * that forked children share it) and removed with what it holds when they
 * end, passed or failed: never the working directory. */
static char g_scratch[4096];

static const char *tmp_path(const char *name)
{
    static char buf[4096 + 300];
    snprintf(buf, sizeof buf, "%s/extend_%s.safetensors", g_scratch, name);
    return buf;
}

static void scratch_make(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_scratch, sizeof g_scratch, "%s/cg_test_extend.XXXXXX",
             base && base[0] == '/' ? base : "/tmp");
    if (!mkdtemp(g_scratch)) {
        perror(g_scratch);
        exit(1);
    }
}

static void scratch_remove(void)
{
    DIR *d = opendir(g_scratch);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[4096 + 300];
        snprintf(p, sizeof p, "%s/%s", g_scratch, e->d_name);
        if (e->d_name[0] != '.')
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(g_scratch);
}

/* Save and load carry the parameter and both buffers in their dtypes: the
 * reloaded module's eval output is the same bits. */
START_TEST(test_module_save_load)
{
    cg_rng rng = cg_rng_new(6);
    gated_center *m = gated_center_new(4, &rng);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(5, 4)), *target = cg_randn(&rng, CG_SHAPE(5, 4));
    cg_optim *opt = cg_adam_from_module(CG_MODULE(m), 1e-2);
    for (int step = 0; step < 5; step++) {
        cg_scope *s = cg_scope_begin();
        OK_OR_FAIL(
            cg_train_step(opt, cg_mse_loss(gated_center_forward(m, x), target, CG_REDUCTION_MEAN)));
        cg_scope_end(s);
    }
    const char *path = tmp_path("module");
    OK_OR_FAIL(cg_module_save(CG_MODULE(m), path, 0, NULL));
    cg_rng other = cg_rng_new(99);
    gated_center *again = gated_center_new(4, &other);
    OK_OR_FAIL(cg_module_load_file(CG_MODULE(again), path));
    ck_assert_int_eq(cg_data_i64(again->num_batches)[0], 5);
    ck_assert(!memcmp(cg_data(again->running_mean), cg_data(m->running_mean), 4 * sizeof(float)));
    ck_assert(!memcmp(cg_data(again->gate), cg_data(m->gate), 4 * sizeof(float)));
    cg_module_train(CG_MODULE(m), false);
    cg_module_train(CG_MODULE(again), false);
    cg_scope *s = cg_scope_begin();
    cg_tensor *a = gated_center_forward(m, x), *b = gated_center_forward(again, x);
    OK_OR_FAIL(a && b);
    ck_assert(!memcmp(cg_data(a), cg_data(b), sizeof(float) * (size_t)cg_numel(a)));
    cg_scope_end(s);
    unlink(path);
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(again));
    cg_release_all(2, x, target);
}
END_TEST

/* ------------------------------------------------ optimizer and schedule */
/* SGD with momentum written by hand (torch.optim.SGD's formulas): the
 * parameters from cg_module_params, their gradients from cg_grad, the
 * update written through cg_data and announced with cg_tensor_modified. Its
 * state is a module of buffers, so that cg_module_save / cg_train_state
 * save it beside the model. */
typedef struct {
    cg_param_list params;
    cg_module *state; /* one buffer per parameter: its momentum */
    double lr, momentum;
    int64_t steps;
} my_sgd;

static bool my_sgd_init(my_sgd *o, const cg_module *m, double lr, double momentum)
{
    *o = (my_sgd){.lr = lr, .momentum = momentum};
    o->state = cg_module_new("MySGDState");
    if (!o->state || !cg_module_params(m, &o->params))
        return false;
    for (int i = 0; i < o->params.n; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i); /* no dots in a buffer's name */
        cg_tensor *t = o->params.items[i].tensor, *z = cg_zeros_dtype(t->dtype, t->ndim, t->shape);
        bool ok = z && cg_module_add_buffer(o->state, name, z, true);
        cg_release(z);
        if (!ok)
            return false;
    }
    return true;
}

static void my_sgd_free(my_sgd *o)
{
    cg_param_list_free(&o->params);
    cg_module_free(o->state);
}

static bool my_sgd_step(my_sgd *o)
{
    cg_param_list bufs = {0};
    if (!cg_module_buffers(o->state, &bufs))
        return false;
    for (int i = 0; i < o->params.n; i++) {
        cg_tensor *p = o->params.items[i].tensor, *buf = bufs.items[i].tensor;
        const cg_tensor *g = cg_grad(p);
        if (!g)
            continue; /* no gradient: left as it is, as PyTorch does */
        float *pd = cg_data(p), *bd = cg_data(buf);
        const float *gd = cg_data(g);
        for (int64_t j = 0; j < cg_numel(p); j++) {
            bd[j] = o->steps == 0 ? gd[j] : (float)o->momentum * bd[j] + gd[j];
            pd[j] += (float)-o->lr * bd[j];
        }
        cg_tensor_modified(p); /* a backward that saved p now refuses to run */
        cg_tensor_modified(buf);
    }
    o->steps++;
    cg_param_list_free(&bufs);
    return true;
}

/* A schedule of one's own: a function of the step (inverse square root
 * after a linear warmup, fairseq's inverse_sqrt). */
static double my_lr(int64_t step, int64_t warmup, double peak)
{
    return step < warmup ? peak * (double)(step + 1) / (double)warmup
                         : peak * sqrt((double)warmup / (double)(step + 1));
}

/* One step of the user's run: forward, backward (two micro-batches of half
 * the loss: gradient accumulation), clipping, the user's step. */
static bool train_step(gated_center *m, my_sgd *o, cg_tensor *x, cg_tensor *t, int64_t step)
{
    o->lr = my_lr(step, 3, 0.05);
    bool ok = true;
    for (int half = 0; ok && half < 2; half++) {
        cg_scope *s = cg_scope_begin();
        cg_tensor *xs = cg_narrow(x, 0, 3 * half, 3), *ts = cg_narrow(t, 0, 3 * half, 3);
        cg_tensor *l =
            cg_muls(cg_mse_loss(gated_center_forward(m, xs), ts, CG_REDUCTION_MEAN), 0.5f);
        ok = l && cg_backward(l, NULL, false);
        cg_scope_end(s);
    }
    cg_tensor *ps[8];
    for (int i = 0; i < o->params.n && i < 8; i++)
        ps[i] = o->params.items[i].tensor;
    ok = ok && cg_clip_grad_norm(o->params.n, ps, 0.5) >= 0 && my_sgd_step(o);
    cg_module_zero_grad(CG_MODULE(m));
    return ok;
}

/* The user's optimizer trains the module; stopped, saved (model,
 * optimizer state, step) with cg_train_state, loaded into fresh objects
 * and continued, it ends with the bits of the run done straight. */
START_TEST(test_own_optimizer_and_schedule)
{
    ck_assert_double_eq_tol(my_lr(0, 3, 0.05), 0.05 / 3, 1e-15);
    ck_assert_double_eq_tol(my_lr(11, 3, 0.05), 0.05 * 0.5, 1e-15);
    cg_rng rng = cg_rng_new(7);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 4)), *t = cg_randn(&rng, CG_SHAPE(6, 4));
    cg_rng r8 = cg_rng_new(8);
    gated_center *straight = gated_center_new(4, &r8);
    my_sgd o;
    OK_OR_FAIL(my_sgd_init(&o, CG_MODULE(straight), 0, 0.9));
    ck_assert_int_eq(o.params.n, 3);
    float first = 0, last = 0;
    for (int64_t step = 0; step < 12; step++) {
        if (step == 0 || step == 11) { /* in eval mode: the buffers stay */
            cg_module_train(CG_MODULE(straight), false);
            cg_scope *s = cg_scope_begin();
            float l = cg_item(cg_mse_loss(gated_center_forward(straight, x), t, CG_REDUCTION_MEAN));
            *(step ? &last : &first) = l;
            cg_scope_end(s);
            cg_module_train(CG_MODULE(straight), true);
        }
        OK_OR_FAIL(train_step(straight, &o, x, t, step));
    }
    ck_assert_msg(last < first, "the loss went from %g to %g", first, last);

    /* the same run stopped at step 5 and resumed from a file */
    const char *path = tmp_path("state");
    int64_t step = 0;
    for (int part = 0; part < 2; part++) {
        cg_rng r = cg_rng_new(part ? 1234 : 8);
        gated_center *m = gated_center_new(4, &r);
        my_sgd p;
        OK_OR_FAIL(my_sgd_init(&p, CG_MODULE(m), 0, 0.9));
        cg_train_state *st = cg_train_state_new();
        OK_OR_FAIL(cg_train_state_add_module(st, "model", CG_MODULE(m)) &&
                   cg_train_state_add_module(st, "optim", p.state) &&
                   cg_train_state_add_i64(st, "step", &step));
        if (part == 1)
            OK_OR_FAIL(cg_train_state_load(st, path));
        p.steps = step;
        for (int64_t end = part ? 12 : 5; step < end; step++)
            OK_OR_FAIL(train_step(m, &p, x, t, step));
        if (part == 0)
            OK_OR_FAIL(cg_train_state_save(st, path));
        else
            for (int i = 0; i < o.params.n; i++) {
                const cg_tensor *a = o.params.items[i].tensor, *b = p.params.items[i].tensor;
                ck_assert_msg(!memcmp(cg_data(a), cg_data(b), sizeof(float) * (size_t)cg_numel(a)),
                              "%s differs after the resume", o.params.items[i].name);
            }
        cg_train_state_free(st);
        my_sgd_free(&p);
        cg_module_free(CG_MODULE(m));
    }
    unlink(path);
    /* the library's optimizer takes the same schedule */
    cg_optim *opt = cg_sgd_from_module(CG_MODULE(straight), 0.1);
    cg_optim_set_lr(opt, my_lr(4, 3, 0.05));
    ck_assert_double_eq(cg_optim_lr(opt), my_lr(4, 3, 0.05));
    cg_optim_free(opt);
    my_sgd_free(&o);
    cg_module_free(CG_MODULE(straight));
    cg_release_all(2, x, t);
}
END_TEST

/* A step between a forward and its backward moves the parameter's version
 * (cg_tensor_modified): the backward that read it refuses, naming the op. */
START_TEST(test_own_optimizer_step_before_backward)
{
    cg_rng rng = cg_rng_new(9);
    gated_center *m = gated_center_new(4, &rng);
    my_sgd o;
    OK_OR_FAIL(my_sgd_init(&o, CG_MODULE(m), 0.1, 0));
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(2, 4));
    cg_tensor *y = gated_center_forward(m, x), *l = cg_sum_all(y);
    OK_OR_FAIL(cg_backward(l, NULL, true));
    OK_OR_FAIL(my_sgd_step(&o));
    ck_assert(!cg_backward(l, NULL, false));
    ck_assert_msg(strstr(cg_last_error(), "was modified in place after it was saved"), "%s",
                  cg_last_error());
    cg_release_all(3, x, y, l);
    my_sgd_free(&o);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* ------------------------------------------- bf16, threads, accumulation */
/* Under bf16 autocast the module's gradients are those of fp32 to bf16's
 * precision. */
START_TEST(test_module_bf16_autocast)
{
    cg_rng rng = cg_rng_new(10);
    gated_center *m = gated_center_new(16, &rng);
    cg_module_train(CG_MODULE(m), false);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(8, 16));
    float *gw[2] = {0};
    for (int prec = 0; prec < 2; prec++) {
        cg_precision prev = cg_autocast_begin(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_scope *s = cg_scope_begin();
        OK_OR_FAIL(cg_backward(cg_sum_all(gated_center_forward(m, x)), NULL, false));
        cg_scope_end(s);
        cg_autocast_end(prev);
        gw[prec] = malloc(16 * 16 * sizeof(float));
        memcpy(gw[prec], cg_data(cg_grad(m->fc->weight)), 16 * 16 * sizeof(float));
        cg_module_zero_grad(CG_MODULE(m));
    }
    double num = 0, den = 0;
    for (int i = 0; i < 256; i++) {
        num += (gw[1][i] - gw[0][i]) * (double)(gw[1][i] - gw[0][i]);
        den += gw[0][i] * (double)gw[0][i];
    }
    ck_assert_msg(sqrt(num / den) < 2e-2, "bf16 against fp32: relative error %g", sqrt(num / den));
    free(gw[0]);
    free(gw[1]);
    cg_release(x);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* The user's step announces its writes (cg_tensor_modified): a bf16
 * no-grad forward after it reads the new weights, not the packed bf16 copy
 * of the old ones that bf16 products keep with a weight. */
START_TEST(test_own_optimizer_then_bf16_eval)
{
    cg_rng rng = cg_rng_new(14);
    gated_center *m = gated_center_new(16, &rng);
    cg_module_train(CG_MODULE(m), false);
    my_sgd o;
    OK_OR_FAIL(my_sgd_init(&o, CG_MODULE(m), 0.5, 0));
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(4, 16));
    cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
    cg_scope *s = cg_scope_begin();
    cg_no_grad_begin();
    cg_tensor *before = gated_center_forward(m, x); /* packs fc.weight in bf16 */
    cg_no_grad_end();
    OK_OR_FAIL(cg_backward(cg_sum_all(gated_center_forward(m, x)), NULL, false));
    OK_OR_FAIL(my_sgd_step(&o));
    cg_no_grad_begin();
    cg_tensor *after = gated_center_forward(m, x);
    cg_no_grad_end();
    const char *path = tmp_path("bf16");
    OK_OR_FAIL(cg_module_save(CG_MODULE(m), path, 0, NULL));
    cg_rng other = cg_rng_new(15);
    gated_center *fresh = gated_center_new(16, &other);
    OK_OR_FAIL(cg_module_load_file(CG_MODULE(fresh), path));
    cg_module_train(CG_MODULE(fresh), false);
    cg_no_grad_begin();
    cg_tensor *want = gated_center_forward(fresh, x);
    cg_no_grad_end();
    cg_autocast_end(prev); /* before any assertion: the later tests run in fp32 */
    OK_OR_FAIL(before && after && want);
    size_t bytes = sizeof(float) * (size_t)cg_numel(want);
    ck_assert(memcmp(cg_data(before), cg_data(after), bytes) != 0);
    ck_assert_msg(!memcmp(cg_data(want), cg_data(after), bytes), "a stale bf16 weight was read");
    cg_scope_end(s);
    unlink(path);
    my_sgd_free(&o);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(fresh));
    cg_release(x);
}
END_TEST

typedef struct {
    gated_center *m;
    cg_tensor *x;
    bool ok;
    char err[256];
} worker;

static void *work(void *p)
{
    worker *w = p;
    cg_scope *s = cg_scope_begin();
    w->ok = cg_backward(cg_sum_all(gated_center_forward(w->m, w->x)), NULL, false);
    snprintf(w->err, sizeof w->err, "%s", w->ok ? "" : cg_last_error());
    cg_scope_end(s);
    return NULL;
}

/* Two threads run forward and backward through one module (eval mode: the
 * buffers stay), the gradients adding into the shared leaves: the same
 * bits as the two backwards one after the other (two additions commute). */
START_TEST(test_module_two_threads)
{
    cg_rng rng = cg_rng_new(11);
    gated_center *m = gated_center_new(8, &rng);
    cg_module_train(CG_MODULE(m), false);
    cg_tensor *xs[2] = {cg_randn(&rng, CG_SHAPE(5, 8)), cg_randn(&rng, CG_SHAPE(5, 8))};
    worker w[2] = {{m, xs[0], false, ""}, {m, xs[1], false, ""}};
    work(&w[0]);
    work(&w[1]);
    ck_assert(w[0].ok && w[1].ok);
    float serial[8];
    memcpy(serial, cg_data(cg_grad(m->gate)), sizeof serial);
    cg_module_zero_grad(CG_MODULE(m));
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(w[0].ok && w[1].ok, "%s%s", w[0].err, w[1].err);
    ck_assert(!memcmp(serial, cg_data(cg_grad(m->gate)), sizeof serial));
    cg_release_all(2, xs[0], xs[1]);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* Wrong arity where a user meets it: more inputs than a module call takes,
 * a gradcheck with no input. */
START_TEST(test_arity_mistakes)
{
    cg_rng rng = cg_rng_new(12);
    gated_center *m = gated_center_new(4, &rng);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 4)), true);
    cg_tensor *in[CG_MAX_FORWARD_INPUTS + 1];
    for (int i = 0; i <= CG_MAX_FORWARD_INPUTS; i++)
        in[i] = x;
    cg_clear_error();
    ck_assert_ptr_null(
        cg_module_call(&m->base, gated_center_impl, CG_MAX_FORWARD_INPUTS + 1, in, NULL));
    ck_assert_msg(strstr(cg_last_error(), "GatedCenter") != NULL, "%s", cg_last_error());
    cg_gradcheck_report rep;
    ck_assert(!cg_gradcheck(gate_fn, NULL, 0, in, NULL, &rep));
    ck_assert_msg(cg_has_error() && strlen(cg_last_error()) > 0, "no message");
    cg_release(x);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* In a Sequential: refused in one line naming base.forward until the
 * module sets it, then the same bits as the calls one after the other. */
START_TEST(test_module_in_sequential)
{
    cg_rng rng = cg_rng_new(13);
    gated_center *m = gated_center_new(4, &rng);
    cg_module_train(CG_MODULE(m), false);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(3, 4));
    ck_assert_ptr_null(cg_module_forward(CG_MODULE(m), x));
    ck_assert_msg(strstr(cg_last_error(), "GatedCenter: no one-tensor forward") &&
                      strstr(cg_last_error(), "base.forward"),
                  "%s", cg_last_error());
    m->base.forward = gated_center_impl;
    cg_linear *fc = cg_linear_new(4, 4, true, &rng);
    cg_module *seq = cg_sequential(2, fc, m);
    OK_OR_FAIL(seq != NULL);
    cg_scope *s = cg_scope_begin();
    cg_tensor *a = cg_module_forward(seq, x);
    cg_tensor *b = gated_center_forward(m, cg_linear_forward(fc, x));
    OK_OR_FAIL(a && b);
    ck_assert(!memcmp(cg_data(a), cg_data(b), sizeof(float) * (size_t)cg_numel(a)));
    cg_scope_end(s);
    cg_module_free(seq);
    cg_release(x);
}
END_TEST

static Suite *extend_suite(void)
{
    Suite *s = suite_create("extend");
    TCase *tc = tcase_create("extend");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_op_gradcheck);
    tcase_add_test(tc, test_op_backward_mistakes);
    tcase_add_test(tc, test_op_bf16);
    tcase_add_test(tc, test_module_gradcheck_and_registry);
    tcase_add_test(tc, test_module_eval_and_no_grad);
    tcase_add_test(tc, test_module_save_load);
    tcase_add_test(tc, test_own_optimizer_and_schedule);
    tcase_add_test(tc, test_own_optimizer_step_before_backward);
    tcase_add_test(tc, test_module_bf16_autocast);
    tcase_add_test(tc, test_own_optimizer_then_bf16_eval);
    tcase_add_test(tc, test_module_two_threads);
    tcase_add_test(tc, test_arity_mistakes);
    tcase_add_test(tc, test_module_in_sequential);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(extend_suite());
    scratch_make();
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    scratch_remove();
    if (cg_debug_reports() > 0) { /* CG_DEBUG=1: no lifetime mistake in the user's code */
        fprintf(stderr, "the checked mode reported %lu lifetime mistake(s)\n", cg_debug_reports());
        return 1;
    }
    return failed == 0 ? 0 : 1;
}
