/* Check suite "sched": torch.optim.lr_scheduler's schedules as
 * optim/schedule.h's kinds (exponential, multistep, polynomial,
 * cosine_restarts, onecycle, linear_lr, constant_lr) and ReduceLROnPlateau
 * (optim/plateau.h), against the rates get_last_lr() gives after each
 * scheduler.step() of PyTorch 1.13 (tests/fixtures/make_sched_expected.py):
 * the same bits where the kind computes PyTorch's own arithmetic, within
 * 1e-12 relative where it is the closed form of PyTorch's chained factors
 * (polynomial, linear_lr); their refusals; the plateau's state saved and
 * loaded through a training state. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/testutil.h"

#include "tests/fixtures/sched_expected.h"

/* A fixture's schedule of kind (its p[] in the constructor's order) */
static cg_schedule make_kind(cg_schedule_kind kind, const double *p, const int64_t *ms, int n_ms)
{
    switch (kind) {
    case CG_SCHED_EXPONENTIAL: return cg_schedule_exponential(p[0], p[1]);
    case CG_SCHED_STEP: return cg_schedule_step((int64_t)p[0], p[1], p[2]);
    case CG_SCHED_MULTISTEP: return cg_schedule_multistep(ms, n_ms, p[0], p[1]);
    case CG_SCHED_POLYNOMIAL: return cg_schedule_polynomial((int64_t)p[0], p[1], p[2]);
    case CG_SCHED_COSINE_RESTARTS:
        return cg_schedule_cosine_restarts((int64_t)p[0], (int64_t)p[1], p[2], p[3]);
    case CG_SCHED_ONECYCLE:
        return cg_schedule_onecycle((int64_t)p[1], p[0], p[2],
                                    p[3] != 0 ? CG_ANNEAL_LINEAR : CG_ANNEAL_COS, p[4], p[5],
                                    p[6] != 0);
    case CG_SCHED_LINEAR_LR: return cg_schedule_linear_lr(p[0], p[1], (int64_t)p[2], p[3]);
    case CG_SCHED_CONSTANT_LR: return cg_schedule_constant_lr(p[0], (int64_t)p[1], p[2]);
    default: ck_abort_msg("kind %d", (int)kind);
    }
    return cg_schedule_constant(0);
}

static cg_schedule make(const sched_case *c) { return make_kind(c->kind, c->p, c->ms, c->n_ms); }

/* Every case's rates, step by step: the bits of PyTorch's, or (closed
 * forms) within 1e-12 relative; past a step PyTorch raised at, a refusal. */
START_TEST(torch_schedules)
{
    int cases[CG_SCHED_CONSTANT_LR + 1] = {0};
    double worst = 0;
    for (size_t i = 0; i < sizeof SCHED_CASES / sizeof SCHED_CASES[0]; i++) {
        const sched_case *c = &SCHED_CASES[i];
        cg_schedule s = make(c);
        bool closed = c->kind == CG_SCHED_POLYNOMIAL || c->kind == CG_SCHED_LINEAR_LR;
        for (int t = 0; t < c->n; t++) {
            cg_clear_error();
            double a = cg_schedule_lr(&s, t), e = c->lr[t];
            ck_assert_msg(!cg_has_error(), "case %zu step %d: %s", i, t, cg_last_error());
            double d = fabs(a - e) / (e != 0 ? fabs(e) : 1.0);
            ck_assert_msg(closed ? d <= 1e-12 : a == e, "case %zu (%s) step %d: %.17g vs %.17g", i,
                          cg_schedule_name(c->kind), t, a, e);
            worst = d > worst ? d : worst;
        }
        if (c->raises) {
            cg_clear_error();
            ck_assert_msg(isnan(cg_schedule_lr(&s, c->n)), "case %zu step %d", i, c->n);
            ck_assert_msg(strstr(cg_last_error(), "lr_onecycle: "), "%s", cg_last_error());
        }
        cases[c->kind]++;
    }
    for (int k = CG_SCHED_EXPONENTIAL; k <= CG_SCHED_CONSTANT_LR; k++)
        ck_assert_msg(cases[k] >= 4, "%s: %d cases", cg_schedule_name(k), cases[k]);
    ck_assert_msg(worst < 1e-12, "worst %g", worst);
    fprintf(stderr, "torch_schedules: worst relative difference %.3g (closed forms)\n", worst);
}
END_TEST

/* The standalone functions are the kinds' rates. And a few hand-worked
 * values: OneCycleLR's peak at pct_start, its three phases' floor. */
START_TEST(standalone_and_landmarks)
{
    const int64_t ms[3] = {2, 2, 5};
    for (int64_t t = 0; t < 12; t++) {
        cg_schedule s = cg_schedule_multistep(ms, 3, 0.5, 1.0);
        ck_assert(cg_schedule_lr(&s, t) == cg_lr_multistep(t, ms, 3, 0.5, 1.0));
        s = cg_schedule_exponential(0.9, 0.1);
        ck_assert(cg_schedule_lr(&s, t) == cg_lr_exponential(t, 0.9, 0.1));
        ck_assert(cg_lr_exponential(t, 0.9, 0.1) == cg_lr_step_decay(t, 1, 0.9, 0.1));
    }
    ck_assert(cg_lr_multistep(1, ms, 3, 0.5, 1.0) == 1.0);
    ck_assert(cg_lr_multistep(2, ms, 3, 0.5, 1.0) == 0.25); /* twice at 2 */
    ck_assert(cg_lr_multistep(9, ms, 3, 0.5, 1.0) == 0.125);
    /* 100 steps, pct_start 0.3: the peak at step 29, 0.1 / 25 at step 0 */
    ck_assert(cg_lr_onecycle(29, 100, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false) == 0.1);
    ck_assert(fabs(cg_lr_onecycle(0, 100, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false) - 0.004) <
              1e-16);
    ck_assert(fabs(cg_lr_onecycle(99, 100, 0.1, 0.3, CG_ANNEAL_LINEAR, 25, 1e4, false) - 4e-7) <
              1e-16);
    ck_assert(cg_lr_cosine_restarts(10, 10, 1, 0.1, 0.0) == 0.1); /* a restart */
    ck_assert(cg_lr_cosine_restarts(15, 5, 2, 0.1, 0.0) == 0.1);  /* 5 + 10 */
    /* cycles 1, 2, 4, ..., 2^62 end at 2^63 - 2: the last step of int64
     * starts one of 2^63 steps (past int64: not overflowed) */
    ck_assert(cg_lr_cosine_restarts(INT64_MAX - 1, 1, 2, 1.0, 0.0) == 0.0);
    ck_assert(cg_lr_cosine_restarts(INT64_MAX, 1, 2, 1.0, 0.0) == 1.0);
    ck_assert(cg_lr_cosine_restarts(INT64_MAX, 3, 5, 1.0, 0.0) < 1.0);
    ck_assert(cg_lr_polynomial(1000, 30, 2.0, 0.1) == 0.0);
    ck_assert(cg_lr_linear_lr(1000, 0.5, 0.25, 30, 1.0) == 0.25);
    ck_assert(cg_lr_constant_lr(4, 0.5, 5, 0.3) == 0.15);
}
END_TEST

/* Names: each kind's, parsed back; an unknown one listed with them all. */
START_TEST(names)
{
    const char *want[] = {"exponential", "multistep", "polynomial", "cosine_restarts",
                          "onecycle",    "linear_lr", "constant_lr"};
    for (int k = CG_SCHED_EXPONENTIAL; k <= CG_SCHED_CONSTANT_LR; k++) {
        ck_assert_str_eq(cg_schedule_name(k), want[k - CG_SCHED_EXPONENTIAL]);
        cg_schedule_kind got = CG_SCHED_CONSTANT;
        ck_assert(cg_schedule_parse(want[k - CG_SCHED_EXPONENTIAL], &got) && (int)got == k);
    }
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_SEQUENTIAL), "sequential");
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_CHAINED), "chained");
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_CHAINED + 1), "?");
    cg_schedule_kind got;
    ck_assert(!cg_schedule_parse("OneCycleLR", &got));
    ck_assert_msg(strstr(cg_last_error(), "linear_lr, constant_lr, sequential, chained)"), "%s",
                  cg_last_error());
}
END_TEST

/* A schedule refused at step with a message holding msg */
typedef struct {
    cg_schedule s;
    int64_t step;
    const char *msg;
} bad_sched;

static void refused(const bad_sched *bad, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cg_clear_error();
        ck_assert_msg(isnan(cg_schedule_lr(&bad[i].s, bad[i].step)), "case %zu", i);
        ck_assert_msg(cg_has_error() && strstr(cg_last_error(), bad[i].msg), "case %zu: '%s'", i,
                      cg_has_error() ? cg_last_error() : "");
    }
}

/* Bad arguments: NAN and one line naming them. */
START_TEST(refusals)
{
    const int64_t ms[17] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    const int64_t down[3] = {3, 5, 4}, neg[2] = {-1, 4};
    const bad_sched bad[] = {
        {cg_schedule_exponential(0.0, 1.0), 3, "lr_exponential: need step >= 0 and a finite gamma"},
        {cg_schedule_exponential(INFINITY, 1.0), 3, "lr_exponential: need step >= 0"},
        {cg_schedule_exponential(0.9, 1.0), -1, "lr_exponential: need step >= 0"},
        {cg_schedule_multistep(ms, 0, 0.1, 1.0), 3,
         "lr_multistep: need 1 to 16 milestones (got 0)"},
        {cg_schedule_multistep(ms, 17, 0.1, 1.0), 3, "lr_multistep: need 1 to 16 milestones"},
        {cg_schedule_multistep(NULL, 2, 0.1, 1.0), 3, "lr_multistep: need 1 to 16 milestones"},
        {cg_schedule_multistep(down, 3, 0.1, 1.0), 3, "increasing order (milestone 2 is 4)"},
        {cg_schedule_multistep(neg, 2, 0.1, 1.0), 3, "increasing order (milestone 0 is -1)"},
        {cg_schedule_multistep(ms, 3, -0.1, 1.0), 3, "lr_multistep: need step >= 0 and a finite"},
        {cg_schedule_polynomial(0, 1.0, 1.0), 3,
         "lr_polynomial: need step >= 0 and total_iters >= 1"},
        {cg_schedule_polynomial(5, -1.0, 1.0), 3, "lr_polynomial: need a finite power >= 0"},
        {cg_schedule_polynomial(5, NAN, 1.0), 3, "lr_polynomial: need a finite power >= 0"},
        {cg_schedule_cosine_restarts(0, 1, 1.0, 0.0), 3,
         "lr_cosine_restarts: need step >= 0 and T_0 >= 1"},
        {cg_schedule_cosine_restarts(5, 0, 1.0, 0.0), 3, "lr_cosine_restarts: need T_mult >= 1"},
        {cg_schedule_onecycle(0, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false), 0,
         "lr_onecycle: need total_steps >= 1"},
        {cg_schedule_onecycle(10, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false), 11,
         "a step in [0, total_steps] (got 10 and 11)"},
        {cg_schedule_onecycle(10, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false), -1,
         "lr_onecycle: need total_steps >= 1"},
        {cg_schedule_onecycle(10, 0.1, 1.5, CG_ANNEAL_COS, 25, 1e4, false), 1,
         "need pct_start in [0, 1]"},
        {cg_schedule_onecycle(10, 0.1, -0.1, CG_ANNEAL_COS, 25, 1e4, false), 1,
         "need pct_start in [0, 1]"},
        {cg_schedule_onecycle(10, 0.1, 0.3, (cg_anneal)2, 25, 1e4, false), 1,
         "anneal cos or linear (got 0.3 and 2)"},
        {cg_schedule_onecycle(10, 0.1, 0.3, CG_ANNEAL_COS, 0, 1e4, false), 1,
         "need finite div_factor and final_div_factor > 0"},
        {cg_schedule_onecycle(10, 0.1, 0.3, CG_ANNEAL_COS, 25, INFINITY, false), 1,
         "need finite div_factor"},
        {cg_schedule_onecycle(10, 0.1, 0.1, CG_ANNEAL_COS, 25, 1e4, false), 0,
         "step 0 is in a phase of length 0"},
        {cg_schedule_linear_lr(0.0, 1.0, 5, 1.0), 1, "lr_linear_lr: need start_factor in (0, 1]"},
        {cg_schedule_linear_lr(0.5, 1.5, 5, 1.0), 1,
         "lr_linear_lr: need start_factor in (0, 1] and end_factor in [0, 1]"},
        {cg_schedule_linear_lr(0.5, 1.0, 0, 1.0), 1,
         "lr_linear_lr: need step >= 0 and total_iters >= 1"},
        {cg_schedule_constant_lr(0.0, 5, 1.0), 1, "lr_constant_lr: need factor in (0, 1]"},
        {cg_schedule_constant_lr(1.5, 5, 1.0), 1, "lr_constant_lr: need factor in (0, 1]"},
        {cg_schedule_constant_lr(0.5, 0, 1.0), 1,
         "lr_constant_lr: need step >= 0 and total_iters >= 1"},
    };
    refused(bad, sizeof bad / sizeof bad[0]);
}
END_TEST

/* SequentialLR (its bits) and ChainedScheduler (the closed form of its
 * products: within 1e-12 relative) against PyTorch's rates, step by step. */
START_TEST(torch_composites)
{
    int kinds[2] = {0, 0};
    double worst = 0;
    for (size_t i = 0; i < sizeof COMPOSITE_CASES / sizeof COMPOSITE_CASES[0]; i++) {
        const composite_case *c = &COMPOSITE_CASES[i];
        cg_schedule kids[3];
        for (int k = 0; k < c->n_children; k++)
            kids[k] = make_kind(c->c[k].kind, c->c[k].p, c->c[k].ms, c->c[k].n_ms);
        /* chained: the base is each child's rate (its last p of those kinds) */
        cg_schedule s = c->chained ? cg_schedule_chained(kids, c->n_children, kids[0].lr)
                                   : cg_schedule_sequential(kids, c->n_children, c->ms);
        for (int t = 0; t <= SCHED_NSTEPS; t++) {
            cg_clear_error();
            double a = cg_schedule_lr(&s, t), e = c->lr[t];
            ck_assert_msg(!cg_has_error(), "case %zu step %d: %s", i, t, cg_last_error());
            double d = fabs(a - e) / (e != 0 ? fabs(e) : 1.0);
            bool closed = c->chained || c->c[0].kind == CG_SCHED_LINEAR_LR ||
                          c->c[c->n_children - 1].kind == CG_SCHED_LINEAR_LR ||
                          c->c[c->n_children - 1].kind == CG_SCHED_POLYNOMIAL;
            ck_assert_msg(closed ? d <= 1e-12 : a == e, "case %zu (%s) step %d: %.17g vs %.17g", i,
                          cg_schedule_name(s.kind), t, a, e);
            worst = d > worst ? d : worst;
        }
        kinds[c->chained]++;
    }
    ck_assert_msg(kinds[0] >= 5 && kinds[1] >= 4, "%d sequential, %d chained", kinds[0], kinds[1]);
    fprintf(stderr, "torch_composites: worst relative difference %.3g\n", worst);
}
END_TEST

/* A sequential of exact children gives their bits at and after each
 * milestone (the child restarts at its step 0). */
START_TEST(sequential_landmarks)
{
    const cg_schedule kids[3] = {cg_schedule_constant_lr(0.5, 100, 0.2),
                                 cg_schedule_exponential(0.5, 0.2), cg_schedule_step(2, 0.1, 0.3)};
    const int64_t ms[2] = {3, 7};
    cg_schedule s = cg_schedule_sequential(kids, 3, ms);
    const double want[10] = {0.1, 0.1, 0.1, 0.2, 0.1, 0.05, 0.025, 0.3, 0.3, 0.3 * 0.1};
    for (int t = 0; t < 10; t++)
        ck_assert_msg(cg_schedule_lr(&s, t) == want[t], "step %d: %.17g", t, cg_schedule_lr(&s, t));
    const cg_schedule one[1] = {cg_schedule_exponential(0.5, 0.2)};
    s = cg_schedule_sequential(one, 1, NULL);
    ck_assert(cg_schedule_lr(&s, 2) == 0.05);
    /* chained: the factors multiply (children's own lr unread) */
    const cg_schedule ch[2] = {cg_schedule_constant_lr(0.5, 2, 123.0),
                               cg_schedule_multistep(ms, 2, 0.5, 77.0)};
    s = cg_schedule_chained(ch, 2, 0.4);
    const double want_c[9] = {0.2, 0.2, 0.4, 0.2, 0.2, 0.2, 0.2, 0.1, 0.1};
    for (int t = 0; t < 9; t++)
        ck_assert_msg(cg_schedule_lr(&s, t) == want_c[t], "chained step %d: %.17g", t,
                      cg_schedule_lr(&s, t));
}
END_TEST

START_TEST(composite_refusals)
{
    const cg_schedule two[2] = {cg_schedule_exponential(0.9, 0.1), cg_schedule_step(3, 0.5, 0.1)};
    cg_schedule many[18];
    for (int i = 0; i < 18; i++)
        many[i] = cg_schedule_exponential(0.9, 0.1);
    const int64_t ms[17] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    const int64_t zero[1] = {0}, same[2] = {4, 4};
    cg_schedule inner = cg_schedule_sequential(two, 2, ms);
    cg_schedule chain = cg_schedule_chained(two, 2, 0.1);
    const cg_schedule nested[2] = {two[0], inner}, nested_c[2] = {two[0], chain};
    const cg_schedule moving[2] = {
        two[0], cg_schedule_cycle_momentum(
                    cg_schedule_onecycle(10, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false), 0.85, 0.95)};
    const cg_schedule setters[2] = {two[0], cg_schedule_cosine_restarts(5, 1, 0.1, 0.0)};
    const cg_schedule bad_kid[2] = {two[0], cg_schedule_exponential(-1.0, 0.1)};
    const bad_sched bad[] = {
        {cg_schedule_sequential(NULL, 2, ms), 1,
         "lr_sequential: need 1 to 17 children (got 2, NULL)"},
        {cg_schedule_sequential(two, 0, ms), 1, "lr_sequential: need 1 to 17 children (got 0)"},
        {cg_schedule_sequential(many, 18, ms), 1, "lr_sequential: need 1 to 17 children (got 18)"},
        {cg_schedule_sequential(two, 2, NULL), 1, "need 1 milestones for 2 children (got NULL)"},
        {cg_schedule_sequential(two, 2, zero), 1,
         "milestones >= 1 in strictly increasing order "
         "(milestone 0 is 0)"},
        {cg_schedule_sequential(many, 3, same), 1, "(milestone 1 is 4)"},
        {cg_schedule_sequential(nested, 2, ms), 1, "lr_sequential: child 1 is sequential"},
        {cg_schedule_sequential(nested_c, 2, ms), 1, "lr_sequential: child 1 is chained"},
        {cg_schedule_sequential(moving, 2, ms), 1, "lr_sequential: child 1 moves the momentum"},
        {cg_schedule_sequential(two, 2, ms), -1, "lr_sequential: need step >= 0 (got -1)"},
        {cg_schedule_sequential(bad_kid, 2, ms), 4, "lr_exponential: need step >= 0 and a finite"},
        {cg_schedule_chained(NULL, 1, 0.1), 1, "lr_chained: need 1 to 17 children (got 1, NULL)"},
        {cg_schedule_chained(two, 0, 0.1), 1, "lr_chained: need 1 to 17 children (got 0)"},
        {cg_schedule_chained(many, 18, 0.1), 1, "lr_chained: need 1 to 17 children (got 18)"},
        {cg_schedule_chained(setters, 2, 0.1), 1,
         "lr_chained: child 1 (cosine_restarts) sets the rate instead of scaling it"},
        {cg_schedule_chained(nested, 2, 0.1), 1, "lr_chained: child 1 (sequential) sets the rate"},
        {cg_schedule_chained(moving, 2, 0.1), 1, "lr_chained: child 1 moves the momentum"},
        {cg_schedule_chained(bad_kid, 2, 0.1), 1, "lr_exponential: need step >= 0 and a finite"},
    };
    refused(bad, sizeof bad / sizeof bad[0]);
}
END_TEST

/* An optimizer of type t over one small parameter (momentum: SGD's and
 * RMSprop's). */
static cg_optim *one_param_optim(cg_optim_type t, double momentum)
{
    cg_optim_config c = t == CG_OPTIM_SGD ? cg_sgd_config(0.01, momentum, false)
                        : t == CG_OPTIM_RMSPROP
                            ? cg_rmsprop_config(0.01, 0.99, 1e-8, momentum, false)
                        : t == CG_OPTIM_ADAGRAD ? cg_adagrad_default(0.01)
                                                : cg_adam_default(0.01);
    c.type = t;
    cg_tensor *w = cg_zeros(CG_SHAPE(3));
    cg_optim_param p = {"w", w, 0.0};
    cg_optim *o = cg_optim_new(&c, 1, &p);
    ck_assert_msg(o, "%s", cg_last_error());
    cg_release(w);
    return o;
}

/* OneCycleLR's cycle_momentum: the rate and the momentum (SGD's, RMSprop's)
 * or beta1 (Adam's, AdamW's) cg_schedule_apply sets, PyTorch's bits at
 * every step; past the last step refused, the optimizer unchanged. */
START_TEST(torch_cycle_momentum)
{
    int types = 0;
    for (size_t i = 0; i < sizeof MOMENTUM_CASES / sizeof MOMENTUM_CASES[0]; i++) {
        const momentum_case *c = &MOMENTUM_CASES[i];
        const double *p = c->p;
        cg_schedule s = cg_schedule_cycle_momentum(
            cg_schedule_onecycle((int64_t)p[1], p[0], p[2],
                                 p[3] != 0 ? CG_ANNEAL_LINEAR : CG_ANNEAL_COS, p[4], p[5],
                                 p[6] != 0),
            c->base_m, c->max_m);
        ck_assert(cg_schedule_moves_momentum(&s));
        cg_optim *o = one_param_optim(c->opt, c->momentum);
        bool adams = c->opt == CG_OPTIM_ADAM || c->opt == CG_OPTIM_ADAMW;
        for (int t = 0; t < c->n; t++) {
            ck_assert_msg(cg_schedule_apply(&s, t, o), "case %zu step %d: %s", i, t,
                          cg_last_error());
            cg_optim_config got = cg_optim_get_config(o);
            double m = adams ? got.beta1 : got.momentum;
            ck_assert_msg(got.lr == c->lr[t] && m == c->mom[t],
                          "case %zu step %d: lr %.17g vs %.17g, momentum %.17g vs %.17g", i, t,
                          got.lr, c->lr[t], m, c->mom[t]);
            ck_assert(cg_schedule_momentum(&s, t) == c->mom[t]);
        }
        ck_assert(!cg_schedule_apply(&s, c->n + 1, o));
        ck_assert_msg(strstr(cg_last_error(), "lr_onecycle: need total_steps >= 1"), "%s",
                      cg_last_error());
        cg_optim_config got = cg_optim_get_config(o);
        ck_assert(got.lr == c->lr[c->n - 1] &&
                  (adams ? got.beta1 : got.momentum) == c->mom[c->n - 1]);
        types |= 1 << c->opt;
        cg_optim_free(o);
    }
    ck_assert_int_eq(types, (1 << CG_OPTIM_SGD) | (1 << CG_OPTIM_ADAM) | (1 << CG_OPTIM_ADAMW) |
                                (1 << CG_OPTIM_RMSPROP));
}
END_TEST

/* The momentum set is the one the step uses and the one saved: a step at
 * momentum m after a set is the step of an optimizer built with m. */
START_TEST(set_momentum_is_used)
{
    for (int t = 0; t < 2; t++) {
        cg_optim_type ty = t ? CG_OPTIM_ADAM : CG_OPTIM_SGD;
        cg_optim *a = one_param_optim(ty, 0.9), *b = one_param_optim(ty, 0.9);
        ck_assert(cg_optim_set_momentum(a, 0.5));
        cg_optim_config cb = cg_optim_get_config(b);
        *(t ? &cb.beta1 : &cb.momentum) = 0.5;
        cg_optim_free(b);
        cg_tensor *w = cg_zeros(CG_SHAPE(3));
        cg_optim_param p = {"w", w, 0.0};
        b = cg_optim_new(&cb, 1, &p);
        cg_release(w);
        for (int k = 0; k < 3; k++) {
            cg_tensor *pa = cg_optim_param_tensor(a, 0), *pb = cg_optim_param_tensor(b, 0);
            const float g[3] = {0.5f, -1.0f, 2.0f + (float)k};
            cg_release(pa->grad);
            cg_release(pb->grad);
            pa->grad = cg_from_data(CG_SHAPE(3), g);
            pb->grad = cg_from_data(CG_SHAPE(3), g);
            ck_assert(cg_optim_step(a) && cg_optim_step(b));
            ck_assert(!memcmp(cg_data(pa), cg_data(pb), 3 * sizeof(float)));
        }
        cg_optim_free(a);
        cg_optim_free(b);
    }
}
END_TEST

START_TEST(momentum_refusals)
{
    cg_schedule oc = cg_schedule_onecycle(10, 0.1, 0.3, CG_ANNEAL_COS, 25, 1e4, false);
    cg_schedule s = cg_schedule_cycle_momentum(oc, 0.85, 0.95);
    struct {
        cg_optim_type t;
        double momentum;
        const char *msg;
    } opts[] = {
        {CG_OPTIM_ADAGRAD, 0, "optim set_momentum: adagrad has no momentum"},
        {CG_OPTIM_SGD, 0, "optim set_momentum: this sgd was built without momentum"},
        {CG_OPTIM_RMSPROP, 0, "optim set_momentum: this rmsprop was built without momentum"},
    };
    for (int i = 0; i < 3; i++) {
        cg_optim *o = one_param_optim(opts[i].t, opts[i].momentum);
        ck_assert(!cg_schedule_apply(&s, 3, o));
        ck_assert_msg(strstr(cg_last_error(), opts[i].msg), "%s", cg_last_error());
        ck_assert(cg_optim_lr(o) == 0.01); /* the rate set first, then put back */
        cg_optim_free(o);
    }
    cg_optim *o = one_param_optim(CG_OPTIM_ADAM, 0);
    cg_schedule not_oc = cg_schedule_cycle_momentum(cg_schedule_exponential(0.9, 0.1), 0.85, 0.95);
    ck_assert(!cg_schedule_apply(&not_oc, 3, o));
    ck_assert_str_eq(cg_last_error(), "schedule_momentum: a exponential schedule cannot move the "
                                      "momentum (OneCycleLR's cycle_momentum: a onecycle "
                                      "schedule's)");
    ck_assert(isnan(cg_schedule_momentum(&oc, 2)));
    ck_assert_msg(strstr(cg_last_error(), "a onecycle schedule moves no momentum"), "%s",
                  cg_last_error());
    cg_schedule nan_m = cg_schedule_cycle_momentum(oc, NAN, 0.95);
    ck_assert(!cg_schedule_apply(&nan_m, 3, o));
    ck_assert_msg(strstr(cg_last_error(), "need finite base_momentum and max_momentum >= 0 (got "
                                          "nan and 0.95)"),
                  "%s", cg_last_error());
    cg_schedule big = cg_schedule_cycle_momentum(oc, 0.85, 1.0); /* beta1 1 at step 0 */
    ck_assert(!cg_schedule_apply(&big, 0, o));
    ck_assert_msg(strstr(cg_last_error(), "optim set_momentum: adam beta1 1 must be in [0, 1) "
                                          "(kept 0.9)"),
                  "%s", cg_last_error());
    ck_assert(cg_optim_lr(o) == 0.01 && cg_optim_get_config(o).beta1 == 0.9);
    ck_assert(!cg_schedule_apply(NULL, 0, o) && !cg_schedule_apply(&s, 0, NULL));
    cg_schedule nan_lr = cg_schedule_constant(NAN);
    ck_assert(!cg_schedule_apply(&nan_lr, 0, o));
    ck_assert_str_eq(cg_last_error(), "schedule_apply: the constant schedule's rate at step 0 is "
                                      "NaN");
    cg_optim_free(o);
    o = one_param_optim(CG_OPTIM_SGD, 0.9);
    ck_assert(!cg_optim_set_momentum(o, 0.0) && !cg_optim_set_momentum(o, INFINITY));
    ck_assert_msg(strstr(cg_last_error(), "optim set_momentum: sgd momentum inf must be finite "
                                          "and > 0 (kept 0.9)"),
                  "%s", cg_last_error());
    ck_assert(!cg_optim_set_momentum(NULL, 0.5));
    cg_optim_free(o);
    /* the same on a configuration: the same refusals, beta1 or momentum set */
    cg_optim_config c = cg_adagrad_default(0.01);
    ck_assert(!cg_optim_config_set_momentum(&c, 0.9));
    ck_assert_msg(strstr(cg_last_error(), opts[0].msg), "%s", cg_last_error());
    c = cg_sgd_config(0.01, 0, false);
    ck_assert(!cg_optim_config_set_momentum(&c, 0.9));
    ck_assert_msg(strstr(cg_last_error(), opts[1].msg), "%s", cg_last_error());
    c = cg_sgd_config(0.01, 0.5, false);
    ck_assert(cg_optim_config_set_momentum(&c, 0.9) && c.momentum == 0.9);
    c = cg_adam_config(0.01, 0.9, 0.999, 1e-8);
    ck_assert(cg_optim_config_set_momentum(&c, 0.85) && c.beta1 == 0.85 && c.momentum == 0);
    ck_assert(!cg_optim_config_set_momentum(&c, 1.0) && c.beta1 == 0.85);
    c.type = (cg_optim_type)99;
    ck_assert(!cg_optim_config_set_momentum(&c, 0.9));
    ck_assert_str_eq(cg_last_error(), "optim set_momentum: unknown optimizer type 99");
    ck_assert(!cg_optim_config_set_momentum(NULL, 0.9));
}
END_TEST

static cg_plateau *plateau_of(int ci);

/* cg_plateau_step_optim: the optimizer's rate is PyTorch's group lr after
 * every step. */
START_TEST(plateau_sets_the_optimizer)
{
    for (int ci = 0; ci < (int)(sizeof PLATEAU_CASES / sizeof PLATEAU_CASES[0]); ci++) {
        const plateau_case *c = &PLATEAU_CASES[ci];
        cg_plateau *p = plateau_of(ci);
        cg_optim *o = one_param_optim(CG_OPTIM_SGD, 0);
        ck_assert(cg_optim_set_lr(o, c->p[8]));
        for (int t = 0; t < SCHED_NSTEPS; t++) {
            ck_assert(
                cg_plateau_step_optim(p, c->p[0] != 0 ? -SCHED_METRICS[t] : SCHED_METRICS[t], o));
            ck_assert_msg(cg_optim_lr(o) == c->lr[t], "case %d step %d: %.17g vs %.17g", ci, t,
                          cg_optim_lr(o), c->lr[t]);
        }
        cg_plateau_free(p);
        cg_optim_free(o);
    }
    cg_plateau *p = plateau_of(0);
    ck_assert(!cg_plateau_step_optim(p, 1.0, NULL));
    ck_assert(!cg_plateau_step_optim(NULL, 1.0, NULL));
    cg_optim *o = one_param_optim(CG_OPTIM_SGD, 0);
    ck_assert(!cg_plateau_step_optim(NULL, 1.0, o));
    ck_assert_msg(strstr(cg_last_error(), "plateau_step: need a plateau"), "%s", cg_last_error());
    ck_assert(cg_plateau_get_state(p).last_epoch == 0 && cg_optim_lr(o) == 0.01);
    cg_plateau_free(p);
    cg_optim_free(o);
}
END_TEST

/* ReduceLROnPlateau's rate and state after every step, exactly. */
static void plateau_check(int ci, cg_plateau *p, int from, double *lr)
{
    const plateau_case *c = &PLATEAU_CASES[ci];
    for (int t = from; t < SCHED_NSTEPS; t++) {
        double m = c->p[0] != 0 ? -SCHED_METRICS[t] : SCHED_METRICS[t];
        *lr = cg_plateau_step(p, m, *lr);
        cg_plateau_state s = cg_plateau_get_state(p);
        ck_assert_msg(*lr == c->lr[t] && s.best == c->best[t] && s.num_bad_epochs == c->bad[t] &&
                          s.cooldown_counter == c->cool[t] && s.last_epoch == t + 1,
                      "case %d step %d: lr %.17g vs %.17g, best %.17g vs %.17g, bad %lld vs "
                      "%lld, cooldown %lld vs %lld",
                      ci, t, *lr, c->lr[t], s.best, c->best[t], (long long)s.num_bad_epochs,
                      (long long)c->bad[t], (long long)s.cooldown_counter, (long long)c->cool[t]);
    }
}

static cg_plateau *plateau_of(int ci)
{
    const double *p = PLATEAU_CASES[ci].p;
    cg_plateau *pl =
        cg_plateau_new(p[0] != 0 ? CG_PLATEAU_MAX : CG_PLATEAU_MIN, p[1], (int64_t)p[2], p[3],
                       p[4] != 0 ? CG_PLATEAU_ABS : CG_PLATEAU_REL, (int64_t)p[5], p[6], p[7]);
    ck_assert_msg(pl, "%s", cg_last_error());
    return pl;
}

START_TEST(plateau_torch)
{
    int reduced = 0;
    for (int ci = 0; ci < (int)(sizeof PLATEAU_CASES / sizeof PLATEAU_CASES[0]); ci++) {
        cg_plateau *p = plateau_of(ci);
        double lr = PLATEAU_CASES[ci].p[8];
        plateau_check(ci, p, 0, &lr);
        reduced += lr < PLATEAU_CASES[ci].p[8];
        cg_plateau_free(p);
    }
    ck_assert_int_ge(reduced, 4); /* the fixture's cases do cut the rate */
}
END_TEST

/* Stopped at step 23, its state saved in a training state's items, loaded
 * into a new plateau: the rest of the steps as the run straight through. */
START_TEST(plateau_state_saved)
{
    char dir[1024], path[1100];
    cg_test_mkdtemp(dir, sizeof dir, "cg_sched_test_");
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    for (int ci = 0; ci < 2; ci++) {
        cg_plateau *p = plateau_of(ci);
        double lr = PLATEAU_CASES[ci].p[8];
        const plateau_case *c = &PLATEAU_CASES[ci];
        for (int t = 0; t < 23; t++)
            lr = cg_plateau_step(p, c->p[0] != 0 ? -SCHED_METRICS[t] : SCHED_METRICS[t], lr);
        cg_plateau_state st = cg_plateau_get_state(p);
        cg_train_state *ts = cg_train_state_new();
        ck_assert(cg_train_state_add_f64(ts, "plateau_best", &st.best) &&
                  cg_train_state_add_i64(ts, "plateau_bad", &st.num_bad_epochs) &&
                  cg_train_state_add_i64(ts, "plateau_cooldown", &st.cooldown_counter) &&
                  cg_train_state_add_i64(ts, "plateau_epoch", &st.last_epoch) &&
                  cg_train_state_add_f64(ts, "lr", &lr));
        ck_assert_msg(cg_train_state_save(ts, path), "%s", cg_last_error());
        cg_plateau_free(p);
        st = (cg_plateau_state){0};
        lr = 0;
        ck_assert_msg(cg_train_state_load(ts, path), "%s", cg_last_error());
        p = plateau_of(ci);
        ck_assert(cg_plateau_set_state(p, &st));
        plateau_check(ci, p, 23, &lr);
        cg_train_state_free(ts);
        cg_plateau_free(p);
    }
    cg_test_rm_tree(dir);
}
END_TEST

/* A metric exactly at the bar is not better (PyTorch 1.13, each mode:
 * best stays 1, one bad step). */
START_TEST(plateau_at_the_bar)
{
    const struct {
        cg_plateau_mode mode;
        cg_plateau_threshold_mode tm;
        double threshold, metric;
    } c[] = {
        {CG_PLATEAU_MIN, CG_PLATEAU_REL, 0.0, 1.0},   {CG_PLATEAU_MIN, CG_PLATEAU_ABS, 0.0, 1.0},
        {CG_PLATEAU_MAX, CG_PLATEAU_REL, 0.0, 1.0},   {CG_PLATEAU_MAX, CG_PLATEAU_ABS, 0.0, 1.0},
        {CG_PLATEAU_MIN, CG_PLATEAU_REL, 0.1, 0.9},   {CG_PLATEAU_MAX, CG_PLATEAU_REL, 0.1, 1.1},
        {CG_PLATEAU_MIN, CG_PLATEAU_ABS, 0.25, 0.75}, {CG_PLATEAU_MAX, CG_PLATEAU_ABS, 0.25, 1.25}};
    for (int i = 0; i < 8; i++) {
        cg_plateau *p = cg_plateau_new(c[i].mode, 0.1, 5, c[i].threshold, c[i].tm, 0, 0, 1e-8);
        ck_assert(cg_plateau_step(p, 1.0, 0.1) == 0.1 &&
                  cg_plateau_step(p, c[i].metric, 0.1) == 0.1);
        cg_plateau_state st = cg_plateau_get_state(p);
        ck_assert_msg(st.best == 1.0 && st.num_bad_epochs == 1, "case %d: best %g, bad %lld", i,
                      st.best, (long long)st.num_bad_epochs);
        cg_plateau_free(p);
    }
}
END_TEST

START_TEST(plateau_refusals)
{
    struct {
        cg_plateau_mode mode;
        double factor;
        int64_t patience;
        double threshold;
        cg_plateau_threshold_mode tm;
        int64_t cooldown;
        double min_lr, eps;
        const char *msg;
    } bad[] = {
        {2, 0.1, 10, 1e-4, CG_PLATEAU_REL, 0, 0, 1e-8, "need mode min or max and threshold_mode"},
        {CG_PLATEAU_MIN, 0.1, 10, 1e-4, 5, 0, 0, 1e-8, "threshold_mode rel or abs (got 0 and 5)"},
        {CG_PLATEAU_MIN, 1.0, 10, 1e-4, CG_PLATEAU_REL, 0, 0, 1e-8, "need factor in [0, 1)"},
        {CG_PLATEAU_MIN, -0.1, 10, 1e-4, CG_PLATEAU_REL, 0, 0, 1e-8, "need factor in [0, 1)"},
        {CG_PLATEAU_MIN, NAN, 10, 1e-4, CG_PLATEAU_REL, 0, 0, 1e-8, "need factor in [0, 1)"},
        {CG_PLATEAU_MIN, 0.1, -1, 1e-4, CG_PLATEAU_REL, 0, 0, 1e-8, "patience >= 0 and cooldown"},
        {CG_PLATEAU_MIN, 0.1, 1, 1e-4, CG_PLATEAU_REL, -2, 0, 1e-8, "(got 0.1, 1 and -2)"},
        {CG_PLATEAU_MIN, 0.1, 1, -1e-4, CG_PLATEAU_REL, 0, 0, 1e-8,
         "need finite threshold, min_lr"},
        {CG_PLATEAU_MIN, 0.1, 1, INFINITY, CG_PLATEAU_REL, 0, 0, 1e-8, "need finite threshold"},
        {CG_PLATEAU_MIN, 0.1, 1, 1e-4, CG_PLATEAU_REL, 0, -1, 1e-8, "need finite threshold"},
        {CG_PLATEAU_MIN, 0.1, 1, 1e-4, CG_PLATEAU_REL, 0, 0, NAN, "(got 0.0001, 0 and nan)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cg_clear_error();
        ck_assert_msg(!cg_plateau_new(bad[i].mode, bad[i].factor, bad[i].patience, bad[i].threshold,
                                      bad[i].tm, bad[i].cooldown, bad[i].min_lr, bad[i].eps),
                      "case %zu", i);
        ck_assert_msg(strstr(cg_last_error(), bad[i].msg), "case %zu: '%s'", i, cg_last_error());
    }
    cg_plateau *p = plateau_of(0);
    ck_assert(isnan(cg_plateau_step(p, 1.0, -1.0)));
    ck_assert_msg(strstr(cg_last_error(), "plateau_step: need a plateau and a finite lr >= 0 "
                                          "(got one and -1)"),
                  "%s", cg_last_error());
    ck_assert(isnan(cg_plateau_step(p, 1.0, INFINITY)) && isnan(cg_plateau_step(NULL, 1.0, 0.1)));
    ck_assert_msg(strstr(cg_last_error(), "(got NULL and 0.1)"), "%s", cg_last_error());
    cg_plateau_state st = cg_plateau_get_state(p);
    ck_assert(st.last_epoch == 0 && st.best == INFINITY); /* the refused steps changed nothing */
    cg_plateau_state bads[3] = {{NAN, 0, 0, 0}, {1.0, -1, 0, 0}, {1.0, 0, 0, -3}};
    for (int i = 0; i < 3; i++) {
        ck_assert(!cg_plateau_set_state(p, &bads[i]));
        ck_assert_msg(strstr(cg_last_error(), "plateau_set_state: need a best that is not NaN"),
                      "%s", cg_last_error());
    }
    ck_assert(!cg_plateau_set_state(p, NULL) && !cg_plateau_set_state(NULL, &st));
    ck_assert_str_eq(cg_last_error(), "plateau_set_state: plateau is NULL");
    st = cg_plateau_get_state(p);
    ck_assert(st.last_epoch == 0 && st.best == INFINITY);
    cg_plateau_get_state(NULL);
    ck_assert_str_eq(cg_last_error(), "plateau_get_state: plateau is NULL");
    cg_plateau_free(p);
    cg_plateau_free(NULL);
}
END_TEST

static Suite *sched_suite(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("schedules");
    tcase_add_test(tc, torch_schedules);
    tcase_add_test(tc, standalone_and_landmarks);
    tcase_add_test(tc, names);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, torch_composites);
    tcase_add_test(tc, sequential_landmarks);
    tcase_add_test(tc, composite_refusals);
    tcase_add_test(tc, torch_cycle_momentum);
    tcase_add_test(tc, set_momentum_is_used);
    tcase_add_test(tc, momentum_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("plateau");
    tcase_add_test(tc, plateau_torch);
    tcase_add_test(tc, plateau_state_saved);
    tcase_add_test(tc, plateau_at_the_bar);
    tcase_add_test(tc, plateau_refusals);
    tcase_add_test(tc, plateau_sets_the_optimizer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = sched_suite();
    return cg_test_run(&s, 1);
}
