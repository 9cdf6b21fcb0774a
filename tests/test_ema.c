/* The exponential moving average of a model's weights (optim/ema.h):
 * torch.lerp's two branches element by element, the swap and what the
 * model's readers see after it, the checkpoint state and its refusals,
 * the frozen parameters left out, thread counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "optim/ema.h"
#include "optim/optim.h"
#include "tests/testutil.h"

typedef struct {
    cg_module *root;
    cg_linear *a, *b;
} net;

static net net_new(int seed)
{
    cg_rng r = cg_rng_new((uint64_t)seed);
    net n = {cg_module_new("Net"), NULL, NULL};
    n.a = cg_module_add_child(n.root, "a", cg_linear_new(4, 8, true, &r));
    n.b = cg_module_add_child(n.root, "b", cg_linear_new(8, 3, false, &r));
    return n;
}

/* One SGD step on sum(b(relu(a(x))))^2 for a batch drawn from r. */
static void train_step(net *n, cg_optim *o, cg_rng *r)
{
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = cg_randn(r, CG_SHAPE(5, 4));
    cg_tensor *y = cg_linear_forward(n->b, cg_relu(cg_linear_forward(n->a, x)));
    cg_tensor *loss = cg_mean(cg_mul(y, y), 0, NULL, false);
    ck_assert_msg(cg_train_step(o, loss), "%s", cg_last_error());
    cg_scope_end(sc);
}

/* The expected averages, computed here as torch.lerp does in float32. */
static void lerp_ref(float *avg, const float *p, int64_t n, double decay)
{
    const float w = (float)(1.0 - decay);
    for (int64_t i = 0; i < n; i++) {
        volatile float d = p[i] - avg[i]; /* no contraction */
        avg[i] = w < 0.5f ? avg[i] + w * d : p[i] - d * (1.0f - w);
    }
}

/* Both of torch.lerp's branches (decay 0.9: weight 0.1; decay 0.3:
 * weight 0.7), bit for bit over 6 steps with the decay changed between
 * them (a warm-up); the start is a copy; decay 1 keeps it, 0 follows. */
START_TEST(test_ema_updates)
{
    const double decays[] = {0.9, 0.3, 0.999, 0.5, 1.0, 0.0};
    net n = net_new(1);
    cg_optim *o = cg_sgd_from_module(n.root, 0.1);
    cg_ema *e = cg_ema_new(n.root, decays[0]);
    ck_assert_msg(e, "%s", cg_last_error());
    ck_assert_int_eq(cg_ema_count(e), 3); /* a.weight, a.bias, b.weight */
    ck_assert_str_eq(cg_ema_name(e, 0), "a.weight");
    float want[3][32], *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = cg_data(cg_optim_param_tensor(o, i));
        memcpy(want[i], p[i], (size_t)cg_numel(cg_ema_average(e, i)) * sizeof(float));
    }
    cg_rng r = cg_rng_new(3);
    for (int s = 0; s < 6; s++) {
        train_step(&n, o, &r);
        ck_assert(cg_ema_set_decay(e, decays[s]));
        ck_assert(cg_ema_update(e));
        for (int i = 0; i < 3; i++) {
            int64_t k = cg_numel(cg_ema_average(e, i));
            lerp_ref(want[i], p[i], k, decays[s]);
            ck_assert_msg(memcmp(want[i], cg_data(cg_ema_average(e, i)), (size_t)k * 4) == 0,
                          "step %d, parameter %d", s, i);
            if (decays[s] == 0.0)
                ck_assert(memcmp(p[i], cg_data(cg_ema_average(e, i)), (size_t)k * 4) == 0);
        }
    }
    ck_assert_int_eq(cg_ema_updates(e), 6);
    CG_ASSERT_FAILS(cg_ema_set_decay(e, 1.5), "[0, 1]");
    CG_ASSERT_FAILS(cg_ema_set_decay(e, NAN), "[0, 1]");
    ck_assert(cg_ema_decay(e) == 0.0);
    ck_assert_ptr_null(cg_ema_average(e, 3));
    cg_ema_free(e);
    cg_optim_free(o);
    cg_module_free(n.root);
}
END_TEST

/* After a swap the model computes with the average (its packed weights
 * dropped) and the EMA's tensor holds the trained weights (its readers
 * told), an update is refused, and the second swap gives back the trained
 * weights bit for bit. */
START_TEST(test_ema_swap)
{
    net n = net_new(2), twin = net_new(2);
    cg_optim *o = cg_adamw_from_module(n.root, 0.01);
    cg_ema *e = cg_ema_new(n.root, 0.8);
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 4));
    cg_no_grad_begin();
    cg_tensor *y0 = cg_linear_forward(n.a, x); /* packs a's weight, kept */
    cg_no_grad_end();
    for (int s = 0; s < 3; s++) {
        train_step(&n, o, &r);
        ck_assert(cg_ema_update(e));
    }
    cg_tensor *trained = cg_k_clone(n.a->weight);
    /* the EMA's own tensor, handed out by cg_ema_average, gets the trained
     * weights: its readers see the write (a graph that saved it refuses
     * its backward) */
    cg_tensor *mine = (cg_tensor *)cg_ema_average(e, 0), *xg = cg_randn(&r, CG_SHAPE(5, 4));
    cg_tensor *yg = cg_linear_fn(cg_requires_grad(xg, true), mine, NULL), *lg = cg_sum_all(yg);
    uint64_t v_mine = cg_version(mine);
    ck_assert(cg_ema_swap(e) && cg_ema_swapped(e));
    ck_assert(cg_version(mine) > v_mine);
    ck_assert(memcmp(cg_data(mine), cg_data(trained), 32 * sizeof(float)) == 0);
    CG_ASSERT_FAILS(cg_backward(lg, NULL, false) ? yg : NULL, "modified");
    CG_ASSERT_FAILS(cg_ema_update(e), "swap back");
    ck_assert_ptr_eq(cg_ema_average(e, 0), n.a->weight); /* the average is there now */
    ck_assert(memcmp(cg_data(n.a->weight), cg_data(trained), 32 * sizeof(float)) != 0);
    ck_assert(cg_k_copy_(twin.a->weight, n.a->weight) && cg_k_copy_(twin.a->bias, n.a->bias));
    cg_tensor_modified(twin.a->weight);
    cg_no_grad_begin();
    cg_tensor *y = cg_linear_forward(n.a, x), *yt = cg_linear_forward(twin.a, x);
    cg_no_grad_end();
    ck_assert(memcmp(cg_data(y), cg_data(yt), 5 * 8 * sizeof(float)) == 0);
    ck_assert(memcmp(cg_data(y), cg_data(y0), 5 * 8 * sizeof(float)) != 0);
    ck_assert(cg_ema_swap(e) && !cg_ema_swapped(e));
    ck_assert(memcmp(cg_data(n.a->weight), cg_data(trained), 32 * sizeof(float)) == 0);
    cg_release_all(8, x, y0, y, yt, trained, xg, yg, lg);
    cg_ema_free(e);
    cg_optim_free(o);
    cg_module_free(n.root);
    cg_module_free(twin.root);
}
END_TEST

/* Frozen parameters are left out; no trainable one or a bad decay is
 * refused. */
START_TEST(test_ema_params)
{
    net n = net_new(3);
    cg_module_requires_grad(CG_MODULE(n.a), false);
    cg_ema *e = cg_ema_new(n.root, 0.9);
    ck_assert_int_eq(cg_ema_count(e), 1);
    ck_assert_str_eq(cg_ema_name(e, 0), "b.weight");
    cg_ema_free(e);
    cg_module_requires_grad(CG_MODULE(n.b), false);
    CG_ASSERT_FAILS(cg_ema_new(n.root, 0.9), "no trainable parameter");
    cg_module_requires_grad(n.root, true);
    CG_ASSERT_FAILS(cg_ema_new(n.root, -0.1), "[0, 1]");
    CG_ASSERT_FAILS(cg_ema_new(NULL, 0.9), "ema_new");
    cg_module_free(n.root);
}
END_TEST

/* Save and load: a fresh average over the same model reads back the
 * averages, decay and count bit for bit (its readers told); a missing,
 * extra, misshapen, integer or non-finite entry, a bad decay or count, or
 * a load while swapped is refused with the average unchanged; another
 * tensor whose name begins with the prefix's letters is no stray. */
static void save_ema(const cg_ema *e, const char *path)
{
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_ema_save(e, w, NULL));
    ck_assert_msg(cg_st_writer_save(w, path), "%s", cg_last_error());
    cg_st_writer_free(w);
}

START_TEST(test_ema_save_load)
{
    net n = net_new(4);
    cg_optim *o = cg_sgd_from_module(n.root, 0.1);
    cg_ema *e = cg_ema_new(n.root, 0.7), *f = cg_ema_new(n.root, 0.2);
    cg_rng r = cg_rng_new(5);
    for (int s = 0; s < 3; s++) {
        train_step(&n, o, &r);
        ck_assert(cg_ema_update(e));
    }
    char dir[PATH_MAX], path[PATH_MAX + 32];
    cg_test_mkdtemp(dir, sizeof dir, "ema");
    snprintf(path, sizeof path, "%s/ok.safetensors", dir);
    save_ema(e, path);
    cg_st_file *sf = cg_st_open(path);
    uint64_t v_f = cg_version(cg_ema_average(f, 0));
    ck_assert(cg_ema_load(f, sf, NULL));
    cg_st_close(sf);
    ck_assert(cg_ema_decay(f) == 0.7 && cg_ema_updates(f) == 3);
    ck_assert(cg_version(cg_ema_average(f, 0)) > v_f); /* the load announced */
    for (int i = 0; i < 3; i++)
        ck_assert(memcmp(cg_data(cg_ema_average(e, i)), cg_data(cg_ema_average(f, i)),
                         (size_t)cg_numel(cg_ema_average(e, i)) * 4) == 0);
    cg_ema *g = cg_ema_new(n.root, 0.5);
    float before = ((const float *)cg_data(cg_ema_average(g, 0)))[0];
    const char *extra[] = {"ema.c.weight", "ema.a.weight", "ema.a.weight", "ema.a.weight",
                           "ema.a.weight"};
    const char *named[] = {"'ema.c.weight' averages no parameter", "holds nan", "is [4, 8]",
                           "'ema.a.weight' holds inf at element 0",
                           "'ema.a.weight' is I64, not a float tensor"};
    /* a stray tensor; a.weight with NaNs, of another shape, with an
     * infinity at its first element only, of integers */
    for (int k = 0; k < 5; k++) {
        cg_st_writer *w = cg_st_writer_new();
        for (int i = 0; i < 3; i++) {
            char key[64];
            snprintf(key, sizeof key, "ema.%s", cg_ema_name(e, i));
            if (k > 0 && i == 0)
                continue;
            ck_assert(cg_st_add(w, key, cg_ema_average(e, i)));
        }
        cg_tensor *t = k == 2   ? cg_full(CG_SHAPE(4, 8), 1.0f)
                       : k == 3 ? cg_k_clone(cg_ema_average(e, 0))
                       : k == 4 ? cg_zeros_dtype(CG_I64, CG_SHAPE(8, 4))
                                : cg_full(CG_SHAPE(8, 4), NAN);
        if (k == 3)
            cg_data(t)[0] = INFINITY;
        ck_assert(cg_st_add(w, extra[k], t) && cg_st_set_metadata(w, "ema.decay", "0.7") &&
                  cg_st_set_metadata(w, "ema.updates", "3"));
        cg_release(t);
        ck_assert(cg_st_writer_save(w, path));
        cg_st_writer_free(w);
        sf = cg_st_open(path);
        CG_ASSERT_FAILS(cg_ema_load(g, sf, NULL), named[k]);
        cg_st_close(sf);
    }
    const char *meta[][3] = {{"ema.decay", "1.5", "outside [0, 1]"},
                             {"ema.updates", "2.5", "not a whole number"},
                             {"ema.updates", "-1", "not a whole number"},
                             {"ema.updates", "9007199254740994", "not a whole number"}};
    for (int k = 0; k < 4; k++) { /* the last: 2^53 + 2, past the exact counts */
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(cg_ema_save(e, w, NULL) && cg_st_set_metadata(w, meta[k][0], meta[k][1]));
        ck_assert(cg_st_writer_save(w, path));
        cg_st_writer_free(w);
        sf = cg_st_open(path);
        CG_ASSERT_FAILS(cg_ema_load(g, sf, NULL), meta[k][2]);
        cg_st_close(sf);
    }
    /* a model tensor whose name starts with the prefix's letters but not
     * "ema." (a module named ema_head) is not a stray average */
    cg_st_writer *wh = cg_st_writer_new();
    ck_assert(cg_ema_save(e, wh, NULL) && cg_st_add(wh, "ema_head.weight", cg_ema_average(e, 0)));
    ck_assert(cg_st_writer_save(wh, path));
    cg_st_writer_free(wh);
    sf = cg_st_open(path);
    ck_assert_msg(cg_ema_load(f, sf, NULL), "%s", cg_last_error());
    cg_st_close(sf);
    sf = cg_st_open(path); /* another prefix: nothing there */
    CG_ASSERT_FAILS(cg_ema_load(g, sf, "avg"), "avg.decay");
    ck_assert(cg_ema_swap(g));
    CG_ASSERT_FAILS(cg_ema_load(g, sf, NULL), "swap back first");
    ck_assert(cg_ema_swap(g));
    cg_st_close(sf);
    ck_assert(((const float *)cg_data(cg_ema_average(g, 0)))[0] == before);
    ck_assert(cg_ema_decay(g) == 0.5 && cg_ema_updates(g) == 0);
    cg_ema_free(e);
    cg_ema_free(f);
    cg_ema_free(g);
    cg_optim_free(o);
    cg_module_free(n.root);
}
END_TEST

/* A parameter large enough for both threads: the same bits at 1 and 2. */
START_TEST(test_ema_threads)
{
    float *got[2];
    for (int t = 0; t < 2; t++) {
        cg_set_num_threads(t + 1);
        cg_module *m = cg_module_new("Big");
        cg_rng r = cg_rng_new(6);
        cg_tensor *w = cg_randn(&r, CG_SHAPE(300, 700));
        ck_assert(cg_module_add_param(m, "w", w));
        cg_ema *e = cg_ema_new(m, 0.37);
        for (int s = 0; s < 3; s++) {
            cg_tensor *step = cg_randn(&r, CG_SHAPE(300, 700));
            ck_assert(cg_k_copy_(w, step));
            cg_tensor_modified(w);
            cg_release(step);
            ck_assert(cg_ema_update(e));
        }
        got[t] = cg_test_values(cg_ema_average(e, 0));
        cg_release(w);
        cg_ema_free(e);
        cg_module_free(m);
    }
    cg_set_num_threads(2);
    ck_assert(memcmp(got[0], got[1], 300 * 700 * sizeof(float)) == 0);
    free(got[0]);
    free(got[1]);
}
END_TEST

/* A review's findings: an update and a swap announce the averages' writes
 * (a backward that saved an average is refused after, a product reads the
 * new values); a save while swapped is refused (the trained weights would
 * be in no file); a swap back over a parameter written while swapped (an
 * optimizer step) is refused; the decay and the count read back exactly
 * (0.30000000000000004 came back 0.3). */
START_TEST(test_ema_review)
{
    net n = net_new(7);
    cg_optim *o = cg_adamw_from_module(n.root, 0.01);
    cg_ema *e = cg_ema_new(n.root, 0.1 + 0.2), *f = cg_ema_new(n.root, 0.5);
    cg_rng r = cg_rng_new(8);
    const cg_tensor *avg = cg_ema_average(e, 0);
    uint64_t v0 = cg_version(avg);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 4));
    cg_tensor *y = cg_linear_fn(cg_requires_grad(x, true), (cg_tensor *)avg, NULL);
    train_step(&n, o, &r);
    ck_assert(cg_ema_update(e) && cg_version(avg) > v0);
    cg_tensor *loss = cg_sum_all(y);
    CG_ASSERT_FAILS(cg_backward(loss, NULL, false) ? y : NULL, "modified");
    ck_assert(cg_ema_swap(e));
    cg_st_writer *w = cg_st_writer_new();
    CG_ASSERT_FAILS(cg_ema_save(e, w, NULL) ? w : NULL, "swap back first");
    train_step(&n, o, &r); /* a step while swapped */
    CG_ASSERT_FAILS(cg_ema_swap(e) ? e : NULL, "'a.weight' was written");
    ck_assert(cg_ema_swapped(e));
    cg_ema_free(e);
    e = cg_ema_new(n.root, 0.1 + 0.2);
    ck_assert(cg_ema_update(e) && cg_ema_save(e, w, NULL));
    char dir[PATH_MAX], path[PATH_MAX + 32];
    cg_test_mkdtemp(dir, sizeof dir, "emarev");
    snprintf(path, sizeof path, "%s/d.safetensors", dir);
    ck_assert(cg_st_writer_save(w, path));
    cg_st_file *sf = cg_st_open(path);
    ck_assert_msg(cg_ema_load(f, sf, NULL), "%s", cg_last_error());
    ck_assert(cg_ema_decay(f) == 0.1 + 0.2 && cg_ema_updates(f) == 1);
    cg_st_close(sf);
    cg_st_writer_free(w);
    cg_release_all(3, x, y, loss);
    cg_ema_free(e);
    cg_ema_free(f);
    cg_optim_free(o);
    cg_module_free(n.root);
}
END_TEST

/* ---------------------------------------------- sharded (ZeRO-1) averages */
/* Two ranks in one process: nets n[0] and n[1] hold the same parameters;
 * rank k's optimizer and average own the runs own[k] of a.weight (32),
 * a.bias (8) and b.weight (24; rank 0 none of it). whole() is ZeRO's
 * all-gather: a rank's net takes the other rank's runs from `from`, a net
 * holding what that rank holds (the whole average swapped in, or the
 * trained weights). */
static const cg_optim_range own0[3] = {{0, 16}, {0, 4}, {0, 0}};
static const cg_optim_range own1[3] = {{16, 32}, {4, 8}, {0, 24}};

typedef struct {
    net *mine;
    const net *from;
    const cg_optim_range *theirs;
    int calls;
} shard_ctx;

static cg_tensor *param_of(const net *n, int i)
{
    return i == 0 ? n->a->weight : i == 1 ? n->a->bias : n->b->weight;
}

static bool all_gather(void *ctx)
{
    shard_ctx *c = ctx;
    c->calls++;
    for (int i = 0; i < 3; i++) {
        const cg_optim_range *r = &c->theirs[i];
        memcpy(cg_data(param_of(c->mine, i)) + r->lo, cg_data(param_of(c->from, i)) + r->lo,
               (size_t)(r->hi - r->lo) * 4);
        cg_tensor_modified(param_of(c->mine, i));
    }
    return true;
}

static cg_optim *shard_optim(const net *n, const cg_optim_range *own)
{
    cg_optim_config cfg = cg_sgd_default(0.1);
    cg_optim_param ps[3] = {
        {"a.weight", n->a->weight, 0}, {"a.bias", n->a->bias, 0}, {"b.weight", n->b->weight, 0}};
    cg_optim *o = cg_optim_new_sharded(&cfg, 3, ps, own);
    ck_assert_msg(o, "%s", cg_last_error());
    return o;
}

/* Step s's parameters, the same in every net. */
static void set_params(const net *n, int s)
{
    for (int i = 0; i < 3; i++) {
        cg_tensor *p = param_of(n, i);
        for (int64_t k = 0; k < cg_numel(p); k++)
            cg_data(p)[k] = sinf(0.7f * (float)s + 0.3f * (float)k + (float)i);
        cg_tensor_modified(p);
    }
}

/* Each rank's runs hold exactly what a whole average holds at every
 * update (both of torch.lerp's branches); gathered, the whole average;
 * swapped and made whole, both nets hold it, and the trained weights
 * again after the swap back. */
START_TEST(test_ema_sharded)
{
    net n[2] = {net_new(6), net_new(6)}, ref = net_new(6);
    shard_ctx ctx[2] = {{&n[0], &ref, own1, 0}, {&n[1], &ref, own0, 0}};
    cg_optim *o[2] = {shard_optim(&n[0], own0), shard_optim(&n[1], own1)};
    cg_ema *e[2], *whole = cg_ema_new(ref.root, 0.8);
    for (int k = 0; k < 2; k++) {
        e[k] = cg_ema_new_sharded(n[k].root, 0.8, o[k], all_gather, &ctx[k]);
        ck_assert_msg(e[k] && cg_ema_is_sharded(e[k]), "%s", cg_last_error());
    }
    ck_assert(!cg_ema_is_sharded(whole));
    ck_assert(cg_ema_bytes(e[0]) == 20 * 4 && cg_ema_bytes(e[1]) == 44 * 4 &&
              cg_ema_bytes(whole) == 64 * 4);
    for (int s = 1; s <= 4; s++) {
        if (s == 3) /* the other branch */
            for (int k = 0; k < 2; k++)
                ck_assert(cg_ema_set_decay(e[k], 0.3) && cg_ema_set_decay(whole, 0.3));
        for (int k = 0; k < 2; k++)
            set_params(&n[k], s);
        set_params(&ref, s);
        ck_assert(cg_ema_update(e[0]) && cg_ema_update(e[1]) && cg_ema_update(whole));
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) {
            const cg_optim_range *r = k ? &own1[i] : &own0[i];
            int64_t lo, hi;
            ck_assert(cg_ema_shard_range(e[k], i, &lo, &hi) && lo == r->lo && hi == r->hi);
            ck_assert(cg_numel(cg_ema_average(e[k], i)) == hi - lo);
            ck_assert(memcmp(cg_data(cg_ema_average(e[k], i)),
                             cg_data(cg_ema_average(whole, i)) + lo, (size_t)(hi - lo) * 4) == 0);
        }
    /* gathered into a whole average (rank 0's at a save) */
    cg_ema *g = cg_ema_new(ref.root, 0.1);
    ck_assert(cg_ema_copy(g, e[0]) && cg_ema_copy(g, e[1]));
    ck_assert(cg_ema_decay(g) == 0.3 && cg_ema_updates(g) == 4);
    for (int i = 0; i < 3; i++)
        ck_assert(memcmp(cg_data(cg_ema_average(g, i)), cg_data(cg_ema_average(whole, i)),
                         (size_t)cg_numel(cg_ema_average(g, i)) * 4) == 0);
    /* rank 0's runs alone into a whole average (a copy of ref's weights):
     * those runs change, nothing past them */
    cg_ema *part = cg_ema_new(ref.root, 0.1);
    ck_assert(cg_ema_copy(part, e[0]));
    for (int i = 0; i < 3; i++) {
        const float *got = cg_data(cg_ema_average(part, i)),
                    *run = cg_data(cg_ema_average(e[0], i));
        for (int64_t k = 0; k < cg_numel(param_of(&ref, i)); k++) {
            bool in = k >= own0[i].lo && k < own0[i].hi;
            float want = in ? run[k - own0[i].lo] : cg_data(param_of(&ref, i))[k];
            ck_assert_msg(got[k] == want, "parameter %d, element %lld", i, (long long)k);
        }
    }
    cg_ema_free(part);
    /* swapped: both nets hold the whole average (as ref does, swapped
     * too); back: the trained weights, and no write seen in between */
    ck_assert(cg_ema_swap(whole) && cg_ema_swap(e[0]) && cg_ema_swap(e[1]));
    ck_assert(ctx[0].calls == 1 && ctx[1].calls == 1);
    CG_ASSERT_FAILS(cg_ema_state(e[0], 0), "swap back first");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) {
            ck_assert_ptr_eq(cg_ema_average(e[k], i), param_of(&n[k], i));
            ck_assert(memcmp(cg_data(param_of(&n[k], i)), cg_data(param_of(&ref, i)),
                             (size_t)cg_numel(param_of(&n[k], i)) * 4) == 0);
        }
    ck_assert(cg_ema_swap(whole));
    ck_assert_msg(cg_ema_swap(e[0]) && cg_ema_swap(e[1]), "%s", cg_last_error());
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++)
            ck_assert(memcmp(cg_data(param_of(&n[k], i)), cg_data(param_of(&ref, i)),
                             (size_t)cg_numel(param_of(&ref, i)) * 4) == 0);
    cg_ema_free(g);
    cg_ema_free(whole);
    for (int k = 0; k < 2; k++) {
        cg_ema_free(e[k]);
        cg_optim_free(o[k]);
        cg_module_free(n[k].root);
    }
    cg_module_free(ref.root);
}
END_TEST

/* A sharded average is saved whole only (gathered first); each rank loads
 * its runs of a whole file and checks them; the refusals. */
START_TEST(test_ema_sharded_files)
{
    net n = net_new(7), other = {cg_module_new("Other"), NULL, NULL};
    cg_rng r = cg_rng_new(1);
    other.a = cg_module_add_child(other.root, "a", cg_linear_new(4, 8, true, &r));
    cg_optim *o = shard_optim(&n, own1), *sub = cg_sgd_from_module(other.root, 0.1);
    shard_ctx ctx = {&n, &n, own0, 0};
    cg_ema *e = cg_ema_new_sharded(n.root, 0.5, o, all_gather, &ctx);
    cg_ema *whole = cg_ema_new(n.root, 0.9);
    set_params(&n, 3);
    ck_assert(cg_ema_update(whole) && cg_ema_update(whole));
    cg_st_writer *w = cg_st_writer_new();
    CG_ASSERT_FAILS(cg_ema_save(e, w, NULL), "ema_save: a sharded average");
    cg_st_writer_free(w);
    char dir[PATH_MAX], path[PATH_MAX + 32];
    cg_test_mkdtemp(dir, sizeof dir, "ema_shard");
    snprintf(path, sizeof path, "%s/whole.safetensors", dir);
    save_ema(whole, path);
    cg_st_file *sf = cg_st_open(path);
    ck_assert_msg(cg_ema_load(e, sf, NULL), "%s", cg_last_error());
    cg_st_close(sf);
    ck_assert(cg_ema_decay(e) == 0.9 && cg_ema_updates(e) == 2);
    for (int i = 0; i < 3; i++)
        ck_assert(memcmp(cg_data(cg_ema_average(e, i)),
                         cg_data(cg_ema_average(whole, i)) + own1[i].lo,
                         (size_t)(own1[i].hi - own1[i].lo) * 4) == 0);
    /* a NaN in its run, at element 20 of a.weight: named by its index */
    cg_tensor *bad = cg_k_clone(cg_ema_average(whole, 0));
    cg_data(bad)[20] = NAN;
    w = cg_st_writer_new();
    ck_assert(cg_st_add(w, "ema.a.weight", bad) &&
              cg_st_add(w, "ema.a.bias", cg_ema_average(whole, 1)) &&
              cg_st_add(w, "ema.b.weight", cg_ema_average(whole, 2)) &&
              cg_st_set_metadata(w, "ema.decay", "0.9") &&
              cg_st_set_metadata(w, "ema.updates", "2") && cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_release(bad);
    sf = cg_st_open(path);
    CG_ASSERT_FAILS(cg_ema_load(e, sf, NULL), "'ema.a.weight' holds nan at element 20");
    cg_st_close(sf);
    /* construction and copies refused */
    CG_ASSERT_FAILS(cg_ema_new_sharded(n.root, 0.5, NULL, all_gather, NULL), "optimizer is NULL");
    CG_ASSERT_FAILS(cg_ema_new_sharded(n.root, 0.5, o, NULL, NULL), "needs whole()");
    CG_ASSERT_FAILS(cg_ema_new_sharded(n.root, 0.5, sub, all_gather, NULL),
                    "parameter 'a.weight' is not one the optimizer steps");
    cg_ema *one = cg_ema_new_sharded(other.root, 0.5, sub, NULL, NULL); /* whole: no whole() */
    ck_assert_msg(one && !cg_ema_is_sharded(one), "%s", cg_last_error());
    CG_ASSERT_FAILS(cg_ema_copy(whole, one) ? (void *)1 : NULL,
                    "an average of 2 parameters into one of 3");
    ck_assert(cg_ema_swap(whole));
    CG_ASSERT_FAILS(cg_ema_copy(whole, e) ? (void *)1 : NULL,
                    "the parameters of dst hold the average");
    ck_assert(cg_ema_swap(whole));
    cg_ema_free(one);
    cg_ema_free(e);
    cg_ema_free(whole);
    cg_optim_free(o);
    cg_optim_free(sub);
    cg_module_free(n.root);
    cg_module_free(other.root);
}
END_TEST

/* ZeRO's gather at a save, in one process: buffer k of parameter i whole
 * from both shards' runs (the zoo's is an MPI_Gatherv, dist/dist.h). */
typedef struct {
    const cg_optim *o[2];
    const cg_ema *e[2];
    int calls;
} two_shards;

static bool gather_two(void *ctx, int i, int k, float *dst)
{
    static const char *const what[4] = {NULL, "exp_avg", "exp_avg_sq", "momentum_buffer"};
    two_shards *t = ctx;
    t->calls++;
    for (int s = 0; s < 2; s++) {
        int64_t lo, hi;
        bool ok = k ? cg_optim_shard_range(t->o[s], i, &lo, &hi)
                    : cg_ema_shard_range(t->e[s], i, &lo, &hi);
        cg_tensor *b = k ? cg_optim_state(t->o[s], i, what[k]) : cg_ema_state(t->e[s], i);
        ck_assert(ok && b && cg_numel(b) == hi - lo);
        memcpy(dst + lo, cg_data(b), (size_t)(hi - lo) * 4);
    }
    return true;
}

/* Sharded AdamW state and average saved through a gather: the bytes of the
 * whole ones saved as they are, one gather a tensor; without a gather,
 * refused. */
START_TEST(test_ema_sharded_saved_gathered)
{
    net n[2] = {net_new(6), net_new(6)};
    shard_ctx ctx[2] = {{&n[0], &n[1], own1, 0}, {&n[1], &n[0], own0, 0}};
    cg_optim_config cfg = cg_adamw_default(0.01);
    cg_optim *o[2], *whole_o;
    cg_ema *e[2];
    for (int k = 0; k < 2; k++) {
        cg_optim_param ps[3] = {{"a.weight", n[k].a->weight, 0.1},
                                {"a.bias", n[k].a->bias, 0},
                                {"b.weight", n[k].b->weight, 0.1}};
        o[k] = cg_optim_new_sharded(&cfg, 3, ps, k ? own1 : own0);
        e[k] = cg_ema_new_sharded(n[k].root, 0.8, o[k], all_gather, &ctx[k]);
        ck_assert_msg(o[k] && e[k], "%s", cg_last_error());
        if (k == 0)
            whole_o = cg_optim_new(&cfg, 3, ps);
    }
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < 2; k++) {
            cg_rng r = cg_rng_new(40 + (uint64_t)s); /* the same batch on both */
            train_step(&n[k], o[k], &r);
        }
        ck_assert(all_gather(&ctx[0]) && all_gather(&ctx[1]));
        ck_assert(cg_ema_update(e[0]) && cg_ema_update(e[1]));
    }
    cg_ema *whole_e = cg_ema_new(n[0].root, 0.1);
    ck_assert(cg_optim_copy_state(whole_o, o[0]) && cg_optim_copy_state(whole_o, o[1]) &&
              cg_ema_copy(whole_e, e[0]) && cg_ema_copy(whole_e, e[1]));
    char dir[PATH_MAX], pw[PATH_MAX + 32], pg[PATH_MAX + 32];
    cg_test_mkdtemp(dir, sizeof dir, "ema_gathered");
    snprintf(pw, sizeof pw, "%s/whole.safetensors", dir);
    snprintf(pg, sizeof pg, "%s/gathered.safetensors", dir);
    cg_st_writer *w = cg_st_writer_new_deferred();
    ck_assert(cg_optim_save(whole_o, w, "optim") && cg_ema_save(whole_e, w, "ema") &&
              cg_st_writer_save(w, pw));
    cg_st_writer_free(w);
    two_shards t = {{o[0], o[1]}, {e[0], e[1]}, 0};
    const cg_shard_gather g = {gather_two, &t};
    w = cg_st_writer_new_deferred();
    CG_ASSERT_FAILS(cg_optim_save(o[0], w, "optim") ? (void *)1 : NULL, "save through a gather");
    CG_ASSERT_FAILS(cg_ema_save(e[1], w, "ema") ? (void *)1 : NULL, "save through a gather");
    ck_assert(t.calls == 0);
    ck_assert_msg(cg_optim_save_gathered(o[1], w, "optim", &g) &&
                      cg_ema_save_gathered(e[0], w, "ema", &g) && cg_st_writer_save(w, pg),
                  "%s", cg_last_error());
    cg_st_writer_free(w);
    ck_assert_int_eq(t.calls, 3 * 2 + 3);
    cg_test_assert_same_file(pw, pg);
    cg_test_rm_tree(dir);
    cg_ema_free(whole_e);
    cg_optim_free(whole_o);
    for (int k = 0; k < 2; k++) {
        cg_ema_free(e[k]);
        cg_optim_free(o[k]);
        cg_module_free(n[k].root);
    }
}
END_TEST

/* A file's average straight into the parameters: what new + load + swap
 * leave (and what the model computes with: its packed weights dropped),
 * the update count; a refusal (a NaN in the last average) changes
 * no parameter. */
START_TEST(test_ema_load_params)
{
    net n = net_new(8), twin = net_new(8);
    cg_ema *e = cg_ema_new(n.root, 0.6);
    set_params(&n, 2);
    ck_assert(cg_ema_update(e) && cg_ema_update(e) && cg_ema_update(e));
    char dir[PATH_MAX], path[PATH_MAX + 32];
    cg_test_mkdtemp(dir, sizeof dir, "ema_params");
    snprintf(path, sizeof path, "%s/avg.safetensors", dir);
    save_ema(e, path);
    cg_st_file *sf = cg_st_open(path);
    int64_t updates = -1;
    cg_rng r = cg_rng_new(9);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 4));
    cg_no_grad_begin();
    cg_tensor *y0 = cg_linear_forward(twin.a, x); /* packs twin's a.weight, kept */
    cg_no_grad_end();
    ck_assert_msg(cg_ema_load_params(twin.root, sf, NULL, &updates), "%s", cg_last_error());
    cg_st_close(sf);
    ck_assert(updates == 3);
    ck_assert(cg_ema_swap(e)); /* n now holds the average */
    for (int i = 0; i < 3; i++)
        ck_assert(memcmp(cg_data(param_of(&twin, i)), cg_data(param_of(&n, i)),
                         (size_t)cg_numel(param_of(&n, i)) * 4) == 0);
    /* the parameters' readers were told: twin computes with the average */
    cg_no_grad_begin();
    cg_tensor *y = cg_linear_forward(twin.a, x), *yn = cg_linear_forward(n.a, x);
    cg_no_grad_end();
    ck_assert(memcmp(cg_data(y), cg_data(yn), 5 * 8 * sizeof(float)) == 0);
    ck_assert(memcmp(cg_data(y), cg_data(y0), 5 * 8 * sizeof(float)) != 0);
    cg_release_all(4, x, y0, y, yn);
    ck_assert(cg_ema_swap(e));
    cg_st_writer *w = cg_st_writer_new();
    cg_tensor *bad = cg_k_clone(cg_ema_average(e, 2));
    cg_data(bad)[23] = NAN;
    ck_assert(cg_st_add(w, "ema.a.weight", cg_ema_average(e, 0)) &&
              cg_st_add(w, "ema.a.bias", cg_ema_average(e, 1)) &&
              cg_st_add(w, "ema.b.weight", bad) && cg_st_set_metadata(w, "ema.decay", "0.6") &&
              cg_st_set_metadata(w, "ema.updates", "3") && cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_release(bad);
    net fresh = net_new(9);
    cg_tensor *before = cg_k_clone(fresh.a->weight);
    sf = cg_st_open(path);
    CG_ASSERT_FAILS(cg_ema_load_params(fresh.root, sf, NULL, NULL) ? (void *)1 : NULL,
                    "'ema.b.weight' holds nan at element 23");
    cg_st_close(sf);
    ck_assert(memcmp(cg_data(fresh.a->weight), cg_data(before), 32 * 4) == 0);
    cg_release(before);
    cg_ema_free(e);
    cg_module_free(n.root);
    cg_module_free(twin.root);
    cg_module_free(fresh.root);
}
END_TEST

static Suite *ema_suite(void)
{
    Suite *s = suite_create("ema");
    TCase *tc = tcase_create("ema");
    tcase_add_test(tc, test_ema_updates);
    tcase_add_test(tc, test_ema_swap);
    tcase_add_test(tc, test_ema_params);
    tcase_add_test(tc, test_ema_save_load);
    tcase_add_test(tc, test_ema_threads);
    tcase_add_test(tc, test_ema_review);
    tcase_add_test(tc, test_ema_sharded);
    tcase_add_test(tc, test_ema_sharded_files);
    tcase_add_test(tc, test_ema_sharded_saved_gathered);
    tcase_add_test(tc, test_ema_load_params);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {ema_suite()};
    return cg_test_run(s, 1);
}
