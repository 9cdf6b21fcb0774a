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

/* A fixture case's schedule (its p[] in the constructor's order) */
static cg_schedule make(const sched_case *c)
{
    const double *p = c->p;
    switch (c->kind) {
    case CG_SCHED_EXPONENTIAL: return cg_schedule_exponential(p[0], p[1]);
    case CG_SCHED_MULTISTEP: return cg_schedule_multistep(c->ms, c->n_ms, p[0], p[1]);
    case CG_SCHED_POLYNOMIAL: return cg_schedule_polynomial((int64_t)p[0], p[1], p[2]);
    case CG_SCHED_COSINE_RESTARTS:
        return cg_schedule_cosine_restarts((int64_t)p[0], (int64_t)p[1], p[2], p[3]);
    case CG_SCHED_ONECYCLE:
        return cg_schedule_onecycle((int64_t)p[1], p[0], p[2],
                                    p[3] != 0 ? CG_ANNEAL_LINEAR : CG_ANNEAL_COS, p[4], p[5],
                                    p[6] != 0);
    case CG_SCHED_LINEAR_LR: return cg_schedule_linear_lr(p[0], p[1], (int64_t)p[2], p[3]);
    case CG_SCHED_CONSTANT_LR: return cg_schedule_constant_lr(p[0], (int64_t)p[1], p[2]);
    default: ck_abort_msg("kind %d", (int)c->kind);
    }
    return cg_schedule_constant(0);
}

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
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_CONSTANT_LR + 1), "?");
    cg_schedule_kind got;
    ck_assert(!cg_schedule_parse("OneCycleLR", &got));
    ck_assert_msg(strstr(cg_last_error(), "onecycle, linear_lr, constant_lr)"), "%s",
                  cg_last_error());
}
END_TEST

/* Bad arguments: NAN and one line naming them. */
START_TEST(refusals)
{
    const int64_t ms[17] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    const int64_t down[3] = {3, 5, 4}, neg[2] = {-1, 4};
    struct {
        cg_schedule s;
        int64_t step;
        const char *msg;
    } bad[] = {
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
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cg_clear_error();
        ck_assert_msg(isnan(cg_schedule_lr(&bad[i].s, bad[i].step)), "case %zu", i);
        ck_assert_msg(cg_has_error() && strstr(cg_last_error(), bad[i].msg), "case %zu: '%s'", i,
                      cg_has_error() ? cg_last_error() : "");
    }
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
    suite_add_tcase(s, tc);
    tc = tcase_create("plateau");
    tcase_add_test(tc, plateau_torch);
    tcase_add_test(tc, plateau_state_saved);
    tcase_add_test(tc, plateau_at_the_bar);
    tcase_add_test(tc, plateau_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = sched_suite();
    return cg_test_run(&s, 1);
}
