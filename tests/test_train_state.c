/* optim/train_state.h: a whole training state in one call. A run stopped,
 * saved, freed, loaded into fresh objects and continued ends with the
 * same bits as the run done straight; 64-bit values round-trip exactly;
 * every mismatch is refused in one line and changes nothing. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgrad.h"
#include "testutil.h"

enum { STEPS = 12, STOP = 5, B = 8, IN = 4, HID = 16, C = 3 };

/* A file in the test's working directory, removed by the test. */
static const char *tmp_path(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "train_state_%d_%s.safetensors", (int)getpid(), name);
    return buf;
}

/* Everything a training run holds. */
typedef struct {
    cg_module *root;
    cg_linear *fc1, *fc2;
    cg_norm *ln;
    cg_optim *opt;
    cg_rng drop, data; /* dropout masks; the data generator */
    cg_mt19937 noise;  /* PyTorch's generator: label noise */
    int64_t step;
    uint64_t seed;
    double best;
    char tag[32];
} run;

/* A run built from seed: everything differs from one seed to another, so
 * that a load must overwrite all of it. */
static void build(run *r, uint64_t seed, bool adam)
{
    memset(r, 0, sizeof *r);
    cg_rng init = cg_rng_new(seed);
    r->root = cg_module_new("Net");
    r->fc1 = cg_linear_new(IN, HID, true, &init);
    r->ln = cg_layernorm_new(HID);
    r->fc2 = cg_linear_new(HID, C, true, &init);
    ck_assert(cg_module_add_child(r->root, "fc1", r->fc1));
    ck_assert(cg_module_add_child(r->root, "ln", r->ln));
    ck_assert(cg_module_add_child(r->root, "fc2", r->fc2));
    r->opt = adam ? cg_adam_from_module(r->root, 1e-2) : cg_adamw_from_module(r->root, 1e-2);
    ck_assert_ptr_nonnull(r->opt);
    r->seed = UINT64_MAX - seed; /* near 2^64: above 2^53, a double would lose it */
    r->drop = cg_rng_new(r->seed);
    r->data = cg_rng_new(r->seed - 1);
    cg_mt19937_seed(&r->noise, seed);
    r->best = INFINITY;
    snprintf(r->tag, sizeof r->tag, "run-%llu", (unsigned long long)seed);
}

static void run_free(run *r)
{
    cg_optim_free(r->opt);
    cg_module_free(r->root);
}

/* One step: a batch from the data generator, labels with noise from the
 * PyTorch generator (5 normals: its cached second value matters), dropout
 * from its generator, AdamW at a warmup + cosine rate. */
static void step(run *r)
{
    cg_scope *sc = cg_scope_begin();
    cg_tensor *x = cg_randn(&r->data, CG_SHAPE(B, IN));
    cg_tensor *noise = cg_empty(CG_SHAPE(5));
    ck_assert(cg_normal_torch_(noise, &r->noise, 0.0f, 0.5f));
    cg_tensor *y = cg_empty_dtype(CG_I64, CG_SHAPE(B));
    for (int i = 0; i < B; i++) {
        float v = cg_data(x)[i * IN] + cg_data(noise)[i % 5];
        cg_data_i64(y)[i] = v > 0.5f ? 2 : v > -0.5f ? 1 : 0;
    }
    cg_tensor *h = cg_gelu(cg_norm_forward(r->ln, cg_linear_forward(r->fc1, x)));
    h = cg_dropout(h, 0.2f, &r->drop, true);
    cg_tensor *loss =
        cg_cross_entropy(cg_linear_forward(r->fc2, h), y, -100, 0.0f, CG_REDUCTION_MEAN);
    ck_assert_ptr_nonnull(loss);
    double l = cg_item(loss);
    cg_optim_set_lr(r->opt, cg_lr_warmup_cosine(r->step, STEPS, 3, 1e-2, 1e-3));
    ck_assert(cg_train_step(r->opt, loss));
    r->best = fmin(r->best, l);
    r->step++;
    cg_scope_end(sc);
}

/* The one place that names what the run saves (for save and load). The
 * refusal tests register "step" as a double (step_f) or "tag" in another
 * buffer (tag, cap) when these are not NULL. */
static cg_train_state *state_ex(run *r, double *step_f, char *tag, size_t cap)
{
    cg_train_state *s = cg_train_state_new();
    ck_assert(cg_train_state_add_module(s, "model", r->root));
    ck_assert(cg_train_state_add_optim(s, "opt", r->opt));
    ck_assert(cg_train_state_add_rng(s, "drop", &r->drop));
    ck_assert(cg_train_state_add_rng(s, "data", &r->data));
    ck_assert(cg_train_state_add_mt19937(s, "noise", &r->noise));
    ck_assert(step_f ? cg_train_state_add_f64(s, "step", step_f)
                     : cg_train_state_add_i64(s, "step", &r->step));
    ck_assert(cg_train_state_add_u64(s, "seed", &r->seed));
    ck_assert(cg_train_state_add_f64(s, "best", &r->best));
    ck_assert(tag ? cg_train_state_add_str(s, "tag", tag, cap)
                  : cg_train_state_add_str(s, "tag", r->tag, sizeof r->tag));
    return s;
}

static cg_train_state *state_of(run *r) { return state_ex(r, NULL, NULL, 0); }

static void assert_same_params(cg_module *a, cg_module *b)
{
    cg_param_list la = {0}, lb = {0};
    ck_assert(cg_module_params(a, &la) && cg_module_params(b, &lb));
    ck_assert_int_eq(la.n, lb.n);
    for (int i = 0; i < la.n; i++) {
        ck_assert_str_eq(la.items[i].name, lb.items[i].name);
        ck_assert_int_eq(cg_numel(la.items[i].tensor), cg_numel(lb.items[i].tensor));
        ck_assert_msg(!memcmp(cg_data(la.items[i].tensor), cg_data(lb.items[i].tensor),
                              (size_t)cg_numel(la.items[i].tensor) * sizeof(float)),
                      "parameter %s differs", la.items[i].name);
    }
    cg_param_list_free(&la);
    cg_param_list_free(&lb);
}

START_TEST(test_resume_is_bit_identical)
{
    run straight;
    build(&straight, 1, false);
    for (int i = 0; i < STEPS; i++)
        step(&straight);

    run first;
    build(&first, 1, false);
    for (int i = 0; i < STOP; i++)
        step(&first);
    cg_train_state *s = state_of(&first);
    ck_assert_msg(cg_train_state_save(s, tmp_path("resume")), "%s", cg_last_error());
    cg_train_state_free(s);
    run_free(&first);

    run resumed;
    build(&resumed, 7, false); /* other weights, generators and values */
    s = state_of(&resumed);
    ck_assert_msg(cg_train_state_load(s, tmp_path("resume")), "%s", cg_last_error());
    cg_train_state_free(s);
    ck_assert_int_eq(resumed.step, STOP);
    ck_assert_str_eq(resumed.tag, "run-1");
    ck_assert(resumed.seed == UINT64_MAX - 1);
    ck_assert_int_eq(cg_optim_steps(resumed.opt), STOP);
    /* the rate of the last step before the save, not the one resumed was
     * built with (load_state_dict restores param_groups' lr) */
    ck_assert(cg_optim_lr(resumed.opt) == cg_lr_warmup_cosine(STOP - 1, STEPS, 3, 1e-2, 1e-3));
    ck_assert(cg_optim_lr(resumed.opt) != 1e-2);
    while (resumed.step < STEPS)
        step(&resumed);

    assert_same_params(resumed.root, straight.root);
    ck_assert(resumed.best == straight.best);
    ck_assert(resumed.drop.counter == straight.drop.counter);
    ck_assert(resumed.data.counter == straight.data.counter);
    ck_assert(!memcmp(&resumed.noise, &straight.noise, sizeof resumed.noise));
    ck_assert(cg_optim_lr(resumed.opt) == cg_optim_lr(straight.opt));
    for (int i = 0; i < cg_optim_count(straight.opt); i++) {
        const cg_tensor *a = cg_optim_state(resumed.opt, i, "exp_avg_sq");
        const cg_tensor *b = cg_optim_state(straight.opt, i, "exp_avg_sq");
        ck_assert(!memcmp(cg_data((cg_tensor *)a), cg_data((cg_tensor *)b),
                          (size_t)cg_numel(a) * sizeof(float)));
    }
    run_free(&resumed);
    run_free(&straight);
    unlink(tmp_path("resume"));
}
END_TEST

/* Values at the edges of their types come back with the same bits. */
START_TEST(test_values_round_trip_exactly)
{
    int64_t i64[3] = {INT64_MIN, INT64_MAX, -1};
    uint64_t u64[3] = {UINT64_MAX, (1ULL << 53) + 1, UINT64_MAX - 58};
    double f64[8] = {-0.0, 4.9406564584124654e-324, DBL_MAX, INFINITY, -INFINITY, NAN, 0.1, 1e-310};
    cg_rng r = {.seed = UINT64_MAX - 1, .counter = (1ULL << 63) + 5};
    cg_mt19937 g;
    cg_mt19937_seed(&g, 12345);
    cg_tensor *t = cg_empty(CG_SHAPE(3)); /* odd: a normal stays cached */
    ck_assert(cg_normal_torch_(t, &g, 0.0f, 1.0f));
    cg_release(t);
    ck_assert(g.has_next_normal);
    char str[16] = "Grüße\tx";

    cg_train_state *s = cg_train_state_new();
    char name[8];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "i%d", i);
        ck_assert(cg_train_state_add_i64(s, name, &i64[i]));
        snprintf(name, sizeof name, "u%d", i);
        ck_assert(cg_train_state_add_u64(s, name, &u64[i]));
    }
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "f%d", i);
        ck_assert(cg_train_state_add_f64(s, name, &f64[i]));
    }
    ck_assert(cg_train_state_add_rng(s, "r", &r));
    ck_assert(cg_train_state_add_mt19937(s, "g", &g));
    cg_mt19937 fresh; /* seeded, nothing drawn yet: its index is 624 */
    cg_mt19937_seed(&fresh, 777);
    cg_mt19937 fresh_copy = fresh;
    ck_assert(cg_train_state_add_mt19937(s, "fresh", &fresh));
    ck_assert(cg_train_state_add_str(s, "s", str, sizeof str));
    ck_assert_msg(cg_train_state_save(s, tmp_path("values")), "%s", cg_last_error());

    int64_t i64b[3] = {0};
    uint64_t u64b[3] = {0};
    double f64b[8] = {0};
    double f64a[8];
    memcpy(f64a, f64, sizeof f64);
    cg_mt19937 ga = g;
    uint32_t draw = cg_mt19937_next(&ga); /* the stream continues from here */
    const double cached = g.next_normal;  /* the normal the next draw returns, all 53 bits */
    memset(&g, 0, sizeof g);
    memset(&fresh, 0, sizeof fresh);
    r = cg_rng_new(0);
    memset(str, 'y', sizeof str - 1); /* the loaded string brings its own NUL */
    str[sizeof str - 1] = '\0';
    memcpy(i64, i64b, sizeof i64);
    memcpy(u64, u64b, sizeof u64);
    memcpy(f64, f64b, sizeof f64);
    ck_assert_msg(cg_train_state_load(s, tmp_path("values")), "%s", cg_last_error());
    cg_train_state_free(s);

    ck_assert(i64[0] == INT64_MIN && i64[1] == INT64_MAX && i64[2] == -1);
    ck_assert(u64[0] == UINT64_MAX && u64[1] == (1ULL << 53) + 1 && u64[2] == UINT64_MAX - 58);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(isnan(f64a[i]) ? isnan(f64[i]) : !memcmp(&f64[i], &f64a[i], sizeof(double)),
                      "double %d: %a != %a", i, f64[i], f64a[i]);
    ck_assert(r.seed == UINT64_MAX - 1 && r.counter == (1ULL << 63) + 5);
    ck_assert(g.has_next_normal);
    ck_assert_msg(!memcmp(&g.next_normal, &cached, sizeof cached), "next normal %a != %a",
                  g.next_normal, cached);
    ck_assert_uint_eq(cg_mt19937_next(&g), draw);
    ck_assert(!memcmp(fresh.state, fresh_copy.state, sizeof fresh.state));
    ck_assert_int_eq(fresh.index, 624);
    ck_assert(!fresh.has_next_normal);
    ck_assert_uint_eq(cg_mt19937_next(&fresh), cg_mt19937_next(&fresh_copy));
    ck_assert_str_eq(str, "Grüße\tx");
    unlink(tmp_path("values"));
}
END_TEST

/* A state saved by a host program under a locale with a decimal comma
 * (setlocale(LC_ALL, "") in Germany) held "0,10000000000000001", which a
 * load under the "C" locale refused: doubles are written with a point. */
START_TEST(test_values_any_locale)
{
    if (!cg_test_comma_locale())
        return;
    double f64[3] = {0.1, -2.5e-7, 1e300}, saved[3];
    memcpy(saved, f64, sizeof f64);
    cg_train_state *s = cg_train_state_new();
    char name[8];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "f%d", i);
        ck_assert(cg_train_state_add_f64(s, name, &f64[i]));
    }
    ck_assert_msg(cg_train_state_save(s, tmp_path("locale")), "%s", cg_last_error());
    for (int pass = 0; pass < 2; pass++) { /* loaded under the comma locale, then under "C" */
        if (pass == 1)
            cg_test_c_locale();
        memset(f64, 0, sizeof f64);
        ck_assert_msg(cg_train_state_load(s, tmp_path("locale")), "%s", cg_last_error());
        ck_assert(!memcmp(f64, saved, sizeof f64));
    }
    cg_train_state_free(s);
    unlink(tmp_path("locale"));
}
END_TEST

/* A refusal: false, one line containing needle. */
#define REFUSED(call, needle)                                                            \
    do {                                                                                 \
        CG_ASSERT_REFUSED(!(call), needle);                                              \
        ck_assert_msg(!strchr(cg_last_error(), '\n'), "two lines: %s", cg_last_error()); \
    } while (0)

START_TEST(test_add_refusals)
{
    cg_train_state *s = cg_train_state_new();
    int64_t v = 0;
    char buf[4];
    REFUSED(cg_train_state_add_i64(NULL, "a", &v), "state is NULL");
    REFUSED(cg_train_state_add_i64(s, "a", NULL), "object is NULL");
    REFUSED(cg_train_state_add_i64(s, NULL, &v), "name is NULL");
    REFUSED(cg_train_state_add_i64(s, "", &v), "bad item name");
    REFUSED(cg_train_state_add_i64(s, "a.b", &v), "without '.'");
    REFUSED(cg_train_state_add_i64(s, "\xff", &v), "bad item name");
    REFUSED(cg_train_state_add_str(s, "b", buf, 0), "size is 0");
    char name[202]; /* at most 200 bytes: 201 refused */
    memset(name, 'n', 201);
    name[201] = '\0';
    REFUSED(cg_train_state_add_i64(s, name, &v), "at most 200 bytes");
    name[200] = '\0';
    ck_assert(cg_train_state_add_i64(s, name, &v));
    ck_assert(cg_train_state_add_i64(s, "a", &v));
    REFUSED(cg_train_state_add_f64(s, "a", (double *)buf), "already has an item 'a'");
    REFUSED(cg_train_state_save(NULL, "x"), "input is NULL");
    REFUSED(cg_train_state_load(s, NULL), "input is NULL");
    memcpy(buf, "abcd", 4); /* no NUL within the buffer */
    ck_assert(cg_train_state_add_str(s, "s", buf, sizeof buf));
    REFUSED(cg_train_state_save(s, tmp_path("never")), "not NUL-terminated");
    ck_assert(access(tmp_path("never"), F_OK) != 0);
    cg_train_state_free(s);
}
END_TEST

/* Every mismatch between the file and the state is refused before
 * anything changes. */
START_TEST(test_load_refusals)
{
    run r;
    build(&r, 1, false);
    step(&r);
    cg_train_state *s = state_of(&r);
    const char *path = tmp_path("refuse");
    ck_assert(cg_train_state_save(s, path));
    cg_train_state_free(s);

    run o; /* what each refused load must leave as it is */
    build(&o, 3, false);
    float w0 = cg_data(o.fc1->weight)[0];
    int64_t extra = 0;

    s = state_of(&o); /* an item the file lacks */
    ck_assert(cg_train_state_add_i64(s, "epoch", &extra));
    REFUSED(cg_train_state_load(s, path), "item 'epoch' (i64) is missing from the file");
    cg_train_state_free(s);

    s = cg_train_state_new(); /* an item the state lacks */
    ck_assert(cg_train_state_add_module(s, "model", o.root));
    REFUSED(cg_train_state_load(s, path), "holds item 'opt', which the state does not have");
    cg_train_state_free(s);

    double step_f = 0; /* another kind */
    s = state_ex(&o, &step_f, NULL, 0);
    REFUSED(cg_train_state_load(s, path), "item 'step' (f64) is i64 in the file");
    cg_train_state_free(s);

    char small[4] = ""; /* a string that does not fit */
    s = state_ex(&o, NULL, small, sizeof small);
    REFUSED(cg_train_state_load(s, path), "the buffer holds 4");
    cg_train_state_free(s);
    char five[5] = ""; /* "run-1" fills it without its NUL */
    s = state_ex(&o, NULL, five, sizeof five);
    REFUSED(cg_train_state_load(s, path), "the string has 5 bytes, the buffer holds 5");
    cg_train_state_free(s);
    ck_assert_str_eq(five, "");

    run adam; /* another optimizer kind */
    build(&adam, 3, true);
    s = state_of(&adam);
    REFUSED(cg_train_state_load(s, path), "holds adamw state, the optimizer is adam");
    cg_train_state_free(s);
    run_free(&adam);

    ck_assert_int_eq(o.step, 0);
    ck_assert(o.seed == UINT64_MAX - 3);
    ck_assert_str_eq(o.tag, "run-3");
    ck_assert(cg_data(o.fc1->weight)[0] == w0);
    ck_assert_int_eq(cg_optim_steps(o.opt), 0);
    run_free(&o);
    run_free(&r);
    unlink(path);
}
END_TEST

/* A state saved by an optimizer of config sc (one step on a Linear) loaded
 * into one of config oc: refused with msg (NULL: loaded), and a refused
 * load changes nothing. The loaded optimizer's config, or oc's. */
static cg_optim_config load_other(const cg_optim_config *sc, const cg_optim_config *oc,
                                  const char *msg)
{
    cg_rng g = cg_rng_new(2);
    cg_linear *l = cg_linear_new(3, 2, true, &g);
    cg_optim *saved = cg_optim_from_module(sc, &l->base, 0.0, CG_DECAY_ALL);
    cg_optim *other = cg_optim_from_module(oc, &l->base, 0.0, CG_DECAY_ALL);
    ck_assert_msg(saved && other, "%s", cg_last_error());
    cg_scope *scope = cg_scope_begin();
    cg_tensor *loss = cg_sum_all(cg_linear_forward(l, cg_randn(&g, CG_SHAPE(4, 3))));
    ck_assert(cg_train_step(saved, loss));
    cg_scope_end(scope);
    cg_train_state *s = cg_train_state_new();
    ck_assert(cg_train_state_add_optim(s, "opt", saved));
    ck_assert(cg_train_state_save(s, tmp_path("other")));
    cg_train_state_free(s);
    s = cg_train_state_new();
    ck_assert(cg_train_state_add_optim(s, "opt", other));
    if (msg) {
        REFUSED(cg_train_state_load(s, tmp_path("other")), msg);
        ck_assert_int_eq(cg_optim_steps(other), 0);
        cg_optim_config now = cg_optim_get_config(other);
        ck_assert(now.type == oc->type && now.lr == oc->lr && now.momentum == oc->momentum &&
                  now.centered == oc->centered && now.amsgrad == oc->amsgrad);
    } else {
        ck_assert_msg(cg_train_state_load(s, tmp_path("other")), "%s", cg_last_error());
        ck_assert_int_eq(cg_optim_steps(other), 1);
    }
    cg_optim_config got = cg_optim_get_config(other);
    cg_train_state_free(s);
    cg_optim_free(saved);
    cg_optim_free(other);
    cg_module_free(&l->base);
    unlink(tmp_path("other"));
    return got;
}

/* SGD keeps a momentum buffer only with momentum: a state saved with
 * momentum does not load into an SGD without it (nor the other way round),
 * and nothing changes. */
START_TEST(test_load_refuses_other_momentum)
{
    const cg_optim_config with = cg_sgd_config(0.1, 0.9, false), without = cg_sgd_default(0.1);
    load_other(&with, &without, "SGD saved with momentum 0.9, the optimizer has 0");
    load_other(&without, &with, "SGD saved with momentum 0, the optimizer has 0.9");
}
END_TEST

/* The other settings that keep a buffer (RMSprop's momentum and centered,
 * Adam's and AdamW's amsgrad) are refused by message, both ways; the ones
 * that keep none (SGD's dampening and nesterov, RMSprop's alpha, Adagrad's
 * lr_decay) load, the file's values taken as load_state_dict takes them. */
START_TEST(test_load_refuses_other_buffers)
{
    cg_optim_config rms = cg_rmsprop_default(0.1), rms_m = rms, rms_c = rms;
    rms_m.momentum = 0.5;
    rms_c.centered = true;
    cg_optim_config adam = cg_adam_default(0.1), adam_a = adam, adamw = cg_adamw_default(0.1),
                    adamw_a = adamw;
    adam_a.amsgrad = adamw_a.amsgrad = true;
    const struct {
        const cg_optim_config *a, *b;
        const char *ab, *ba;
    } c[] = {
        {&rms_m, &rms,
         "RMSprop saved with momentum 0.5, the optimizer has 0 (build it with the "
         "momentum of the run)",
         "RMSprop saved with momentum 0, the optimizer has 0.5"},
        {&rms_c, &rms, "RMSprop saved with centered true, the optimizer has false",
         "RMSprop saved with centered false, the optimizer has true"},
        {&adam_a, &adam, "Adam saved with amsgrad true, the optimizer has false",
         "Adam saved with amsgrad false, the optimizer has true"},
        {&adamw_a, &adamw, "AdamW saved with amsgrad true, the optimizer has false",
         "AdamW saved with amsgrad false, the optimizer has true (build it with the amsgrad"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        load_other(c[i].a, c[i].b, c[i].ab);
        load_other(c[i].b, c[i].a, c[i].ba);
    }
    cg_optim_config sgd = cg_sgd_config(0.1, 0.9, false), sgd_d = sgd, sgd_n = sgd;
    sgd_d.dampening = 0.25;
    sgd_n.nesterov = true;
    ck_assert(load_other(&sgd_d, &sgd, NULL).dampening == 0.25);
    ck_assert(load_other(&sgd, &sgd_d, NULL).dampening == 0.0);
    ck_assert(load_other(&sgd_n, &sgd, NULL).nesterov);
    cg_optim_config rms_a = rms;
    rms_a.alpha = 0.9;
    ck_assert(load_other(&rms_a, &rms, NULL).alpha == 0.9);
    cg_optim_config ada = cg_adagrad_default(0.1), ada_d = ada;
    ada_d.lr_decay = 0.01;
    ck_assert(load_other(&ada_d, &ada, NULL).lr_decay == 0.01);
}
END_TEST

/* Two modules: the second has other shapes, so the first, loaded already,
 * is put back. */
START_TEST(test_load_is_all_or_nothing)
{
    cg_rng g = cg_rng_new(1);
    cg_linear *a = cg_linear_new(3, 4, true, &g), *b = cg_linear_new(4, 2, true, &g);
    int64_t n = 42;
    cg_train_state *s = cg_train_state_new();
    ck_assert(cg_train_state_add_module(s, "a", &a->base));
    ck_assert(cg_train_state_add_module(s, "b", &b->base));
    ck_assert(cg_train_state_add_i64(s, "n", &n));
    const char *path = tmp_path("two");
    ck_assert(cg_train_state_save(s, path));
    cg_train_state_free(s);

    cg_linear *a2 = cg_linear_new(3, 4, true, &g), *b2 = cg_linear_new(4, 5, true, &g);
    float a0 = cg_data(a2->weight)[0];
    int64_t n2 = 7;
    s = cg_train_state_new();
    ck_assert(cg_train_state_add_module(s, "a", &a2->base));
    ck_assert(cg_train_state_add_module(s, "b", &b2->base));
    ck_assert(cg_train_state_add_i64(s, "n", &n2));
    REFUSED(cg_train_state_load(s, path), "'b.weight' has shape [2, 4] in the file");
    ck_assert(cg_data(a2->weight)[0] == a0);
    ck_assert(cg_data(a2->weight)[0] != cg_data(a->weight)[0]);
    ck_assert_int_eq(n2, 7);
    cg_train_state_free(s);
    cg_module_free(&a->base);
    cg_module_free(&b->base);
    cg_module_free(&a2->base);
    cg_module_free(&b2->base);
    unlink(path);
}
END_TEST

/* Files that are not training states, or damaged ones. */
START_TEST(test_bad_files)
{
    int64_t v = 1;
    cg_train_state *s = cg_train_state_new();
    ck_assert(cg_train_state_add_i64(s, "v", &v));
    REFUSED(cg_train_state_load(s, tmp_path("absent")), "absent");

    cg_rng g = cg_rng_new(1);
    cg_linear *l = cg_linear_new(2, 2, true, &g);
    ck_assert(cg_module_save(&l->base, tmp_path("module"), 0, NULL));
    REFUSED(cg_train_state_load(s, tmp_path("module")), "not a training state");
    cg_module_free(&l->base);

    struct {
        const char *manifest, *needle;
        bool tensor;
    } cases[] = {
        {"{\"format\":2,\"items\":{}}", "not a format 1 training state", false},
        {"{\"format\":1,\"items\":{\"v\":{\"kind\":\"i64\",\"value\":\"12x\"}}}", "not an integer",
         false},
        {"{\"format\":1,\"items\":{\"v\":{\"kind\":\"i64\",\"value\":7}}}", "not a string", false},
        {"{\"format\":1,\"items\":{\"v\":{\"kind\":\"i64\",\"value\":\"99999999999999999999\"}}}",
         "out of range", false},
        {"{\"format\":1,\"items\":{\"v\":{\"kind\":\"i64\",\"value\":\"3\"}}}", "tensor 'junk.x'",
         true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(cg_st_set_metadata(w, "train_state", cases[i].manifest));
        cg_tensor *t = cg_zeros(CG_SHAPE(2));
        ck_assert(!cases[i].tensor || cg_st_add(w, "junk.x", t));
        cg_release(t);
        ck_assert(cg_st_writer_save(w, tmp_path("bad")));
        cg_st_writer_free(w);
        REFUSED(cg_train_state_load(s, tmp_path("bad")), cases[i].needle);
        ck_assert_int_eq(v, 1);
    }
    cg_train_state_free(s);
    unlink(tmp_path("module"));
    unlink(tmp_path("bad"));
}
END_TEST

/* A file holding the manifest and, when tensor is not NULL, a tensor of that
 * name. */
static void write_state(const char *path, const char *manifest, const char *tensor)
{
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_st_set_metadata(w, "train_state", manifest));
    cg_tensor *t = cg_zeros(CG_SHAPE(2));
    ck_assert(!tensor || cg_st_add(w, tensor, t));
    cg_release(t);
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
}

/* An mt19937 item "g" of the manifest: word 0 given, the others 0. */
static void mt_manifest(char *buf, size_t cap, const char *word0, const char *has)
{
    int n = snprintf(buf, cap,
                     "{\"format\":1,\"items\":{\"g\":{\"kind\":\"mt19937\",\"index\":624,"
                     "\"has_next_normal\":%s,\"next_normal\":\"0\",\"state\":[%s",
                     has, word0);
    for (int j = 1; j < 624; j++)
        n += snprintf(buf + n, cap - (size_t)n, ",0");
    snprintf(buf + n, cap - (size_t)n, "]}}}");
}

/* Each value's edges: a tensor belongs to a module or optimizer item whose
 * whole name is its prefix (not to a scalar item, nor to an item whose name
 * merely begins with the prefix); a double is all number and in range; an
 * mt19937 word is a whole number up to 2^32 - 1, has_next_normal a bool. */
START_TEST(test_bad_items)
{
    const char *path = tmp_path("items");
    int64_t v = 1;
    cg_train_state *s = cg_train_state_new();
    ck_assert(cg_train_state_add_i64(s, "v", &v));
    write_state(path, "{\"format\":1,\"items\":{\"v\":{\"kind\":\"i64\",\"value\":\"3\"}}}", "v.x");
    REFUSED(cg_train_state_load(s, path), "tensor 'v.x' belongs to no module or optimizer item");
    ck_assert_int_eq(v, 1);
    cg_train_state_free(s);

    cg_rng g = cg_rng_new(1);
    cg_linear *l = cg_linear_new(2, 2, true, &g);
    s = cg_train_state_new();
    ck_assert(cg_train_state_add_module(s, "model", &l->base));
    write_state(path, "{\"format\":1,\"items\":{\"model\":{\"kind\":\"module\"}}}", "mo.x");
    REFUSED(cg_train_state_load(s, path), "tensor 'mo.x' belongs to no module or optimizer item");
    cg_train_state_free(s);
    cg_module_free(&l->base);

    double f = 2.0;
    s = cg_train_state_new();
    ck_assert(cg_train_state_add_f64(s, "f", &f));
    const char *bad_f64[] = {"1.5x", "1e999", "-1e999"};
    char m[8192];
    for (int i = 0; i < 3; i++) {
        snprintf(m, sizeof m,
                 "{\"format\":1,\"items\":{\"f\":{\"kind\":\"f64\",\"value\":\"%s\"}}}",
                 bad_f64[i]);
        write_state(path, m, NULL);
        REFUSED(cg_train_state_load(s, path), "is not a number");
        ck_assert(f == 2.0);
    }
    cg_train_state_free(s);

    cg_mt19937 mt;
    cg_mt19937_seed(&mt, 5);
    s = cg_train_state_new();
    ck_assert(cg_train_state_add_mt19937(s, "g", &mt));
    const char *bad_mt[][2] = {
        {"1.5", "false"}, {"4294967296", "false"}, {"-1", "false"}, {"7", "1"}, {"7", "\"true\""}};
    for (int i = 0; i < 5; i++) {
        mt_manifest(m, sizeof m, bad_mt[i][0], bad_mt[i][1]);
        write_state(path, m, NULL);
        REFUSED(cg_train_state_load(s, path), "not a generator state");
        ck_assert_int_eq(mt.index, 624);
        ck_assert_uint_ne(mt.state[0], 7);
    }
    mt_manifest(m, sizeof m, "4294967295", "true"); /* the largest word */
    write_state(path, m, NULL);
    ck_assert_msg(cg_train_state_load(s, path), "%s", cg_last_error());
    ck_assert_uint_eq(mt.state[0], 4294967295u);
    ck_assert_uint_eq(mt.state[1], 0);
    ck_assert(mt.has_next_normal);
    cg_train_state_free(s);
    unlink(path);
}
END_TEST

static Suite *train_state_suite(void)
{
    Suite *s = suite_create("train_state");
    TCase *tc = tcase_create("train_state");
    tcase_add_test(tc, test_resume_is_bit_identical);
    tcase_add_test(tc, test_values_round_trip_exactly);
    tcase_add_test(tc, test_values_any_locale);
    tcase_add_test(tc, test_add_refusals);
    tcase_add_test(tc, test_load_refusals);
    tcase_add_test(tc, test_load_is_all_or_nothing);
    tcase_add_test(tc, test_load_refuses_other_momentum);
    tcase_add_test(tc, test_load_refuses_other_buffers);
    tcase_add_test(tc, test_bad_files);
    tcase_add_test(tc, test_bad_items);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {train_state_suite()};
    return cg_test_run(s, 1);
}
