/* Check suite "optim_lr": learning rates. optim/schedule.h's schedules
 * against the reference trainers' formulas, and per-parameter scales of
 * the rate (param groups' lr, cg_optim_set_lr_scale) and the rule that
 * keeps a rate a float, against PyTorch (the rig: tests/optim_rig.h). */

#include "tests/optim_rig.h"

/* ------------------------------------------------------ schedules */

START_TEST(schedule_cosine)
{
    size_t n = sizeof OPT_COS_STEPS / sizeof OPT_COS_STEPS[0];
    cg_schedule s = cg_schedule_cosine(2000, 100, 1e-3, 1e-4);
    for (size_t i = 0; i < n; i++) {
        int64_t t = OPT_COS_STEPS[i];
        double a = cg_lr_warmup_cosine(t, 2000, 100, 1e-3, 1e-4);
        ck_assert_msg(fabs(a - OPT_COS_LR[i]) <= 1e-12 * OPT_COS_LR[i], "step %lld: %.17g vs %.17g",
                      (long long)t, a, OPT_COS_LR[i]);
        ck_assert(cg_schedule_lr(&s, t) == a);
        double b = cg_lr_warmup_cosine(t, 50, 10, 3e-4, 0.0);
        ck_assert_msg(fabs(b - OPT_COS_LR_W10[i]) <= 1e-12 * 3e-4, "step %lld: %.17g vs %.17g",
                      (long long)t, b, OPT_COS_LR_W10[i]);
    }
    /* The recipe's landmarks: 1e-5 at step 0, the peak at the end of warmup,
     * lo from the last step on. */
    ck_assert(fabs(cg_lr_warmup_cosine(0, 2000, 100, 1e-3, 1e-4) - 1e-5) < 1e-18);
    ck_assert(fabs(cg_lr_warmup_cosine(99, 2000, 100, 1e-3, 1e-4) - 1e-3) < 1e-18);
    ck_assert(fabs(cg_lr_warmup_cosine(100, 2000, 100, 1e-3, 1e-4) - 1e-3) < 1e-18);
    ck_assert(fabs(cg_lr_warmup_cosine(2000, 2000, 100, 1e-3, 1e-4) - 1e-4) < 1e-18);
}
END_TEST

/* Hugging Face's get_linear_schedule_with_warmup (0 at step 0, the peak at
 * warmup, 0 at steps) and StepLR (x gamma every step_size steps), the rates
 * PyTorch's schedulers give as a loop steps them; lo > 0 ends there. */
START_TEST(schedule_linear_and_step)
{
    cg_schedule lin = cg_schedule_linear(2000, 100, 1e-3, 0.0);
    for (size_t i = 0; i < sizeof OPT_LIN_STEPS / sizeof OPT_LIN_STEPS[0]; i++) {
        int64_t t = OPT_LIN_STEPS[i];
        double a = cg_lr_warmup_linear(t, 2000, 100, 1e-3, 0.0);
        ck_assert_msg(a == OPT_LIN_LR[i], "linear, step %lld: %.17g vs %.17g", (long long)t, a,
                      OPT_LIN_LR[i]);
        ck_assert(cg_schedule_lr(&lin, t) == a);
    }
    cg_schedule st = cg_schedule_step(30, 0.1, 0.1);
    for (size_t i = 0; i < sizeof OPT_STEP_STEPS / sizeof OPT_STEP_STEPS[0]; i++) {
        int64_t t = OPT_STEP_STEPS[i];
        double a = cg_lr_step_decay(t, 30, 0.1, 0.1);
        ck_assert_msg(a == OPT_STEP_LR[i], "step, step %lld: %.17g vs %.17g", (long long)t, a,
                      OPT_STEP_LR[i]);
        ck_assert(cg_schedule_lr(&st, t) == a);
    }
    /* down to lo: halfway through the decay, halfway between */
    ck_assert(fabs(cg_lr_warmup_linear(1050, 2000, 100, 1e-3, 1e-4) - 5.5e-4) < 1e-18);
    ck_assert(cg_lr_warmup_linear(3000, 2000, 100, 1e-3, 1e-4) == 1e-4);
    ck_assert(cg_lr_warmup_linear(5, 10, 0, 1.0, 0.0) == 0.5); /* no warmup */
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_LINEAR), "linear");
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_STEP), "step");
    /* bad arguments: NAN and a message naming them */
    ck_assert(isnan(cg_lr_warmup_linear(-1, 10, 2, 1.0, 0.0)));
    ck_assert_msg(strstr(cg_last_error(), "lr_warmup_linear: need step >= 0"), "%s",
                  cg_last_error());
    ck_assert(isnan(cg_lr_step_decay(3, 0, 0.5, 1.0)) && isnan(cg_lr_step_decay(3, 1, 0.0, 1.0)) &&
              isnan(cg_lr_step_decay(3, 1, INFINITY, 1.0)));
    ck_assert_msg(strstr(cg_last_error(), "lr_step_decay: need step >= 0 and step_size >= 1"), "%s",
                  cg_last_error());
    /* a step far out ends at the products' fixed point, at once */
    ck_assert(cg_lr_step_decay(INT64_MAX, 1, 1.0, 0.5) == 0.5);
    ck_assert(cg_lr_step_decay(INT64_MAX, 1, 0.5, 1.0) == 0.0);
    ck_assert(cg_lr_step_decay(INT64_MAX, 1, 2.0, 1.0) == INFINITY);
    ck_assert(cg_lr_step_decay(INT64_MAX, 1, 0.9999999, 1.0) == 0.0); /* not 9e18 products */
    double far = cg_lr_step_decay(100000, 1, 0.99999, 1.0); /* 65,536 products, then a power */
    ck_assert_msg(fabs(far - pow(0.99999, 100000)) < 1e-12, "%.17g", far);
}
END_TEST

/* StepLR past 65,536 decays: the first 65,536 are multiplied one by one,
 * as PyTorch's scheduler does, and the rest as one power; with one left
 * that is PyTorch's value exactly (torch 1.13, StepLR(step_size=1,
 * gamma=0.99995) after 65,537 steps, from lr 1). */
START_TEST(schedule_step_far)
{
    ck_assert(cg_lr_step_decay(65537, 1, 0.99995, 1.0) == 0x1.3532a783a19bdp-5);
    ck_assert(cg_lr_step_decay(3 * 65537 + 2, 3, 0.99995, 1.0) == 0x1.3532a783a19bdp-5);
}
END_TEST

START_TEST(schedule_noam)
{
    size_t n = sizeof OPT_NOAM_STEPS / sizeof OPT_NOAM_STEPS[0];
    cg_schedule s = cg_schedule_noam(128, 400, 0.25);
    for (size_t i = 0; i < n; i++) {
        int64_t t = OPT_NOAM_STEPS[i];
        double a = cg_lr_noam(t, 128, 400, 0.25);
        ck_assert_msg(fabs(a - OPT_NOAM_LR[i]) <= 1e-12 * OPT_NOAM_LR[i],
                      "step %lld: %.17g vs %.17g", (long long)t, a, OPT_NOAM_LR[i]);
        ck_assert(cg_schedule_lr(&s, t) == a);
        double b = cg_lr_noam(t, 256, 4000, 1.0);
        ck_assert_msg(fabs(b - OPT_NOAM_LR_BASE[i]) <= 1e-12 * OPT_NOAM_LR_BASE[i],
                      "step %lld: %.17g vs %.17g", (long long)t, b, OPT_NOAM_LR_BASE[i]);
    }
    /* Step 0 (Python raises there) gives 0; the peak is at step == warmup. */
    ck_assert(cg_lr_noam(0, 128, 400, 0.25) == 0.0);
    ck_assert(cg_lr_noam(400, 128, 400, 0.25) > cg_lr_noam(399, 128, 400, 0.25));
    ck_assert(cg_lr_noam(400, 128, 400, 0.25) > cg_lr_noam(401, 128, 400, 0.25));
}
END_TEST

/* warmup 0 with a step before 0 gave NaN (0 / 0) and a negative warmup a
 * rate from a nonsense ramp, with no error; both are refused as noam's bad
 * arguments are (NAN + error). Warmup 0 at step 0 is the peak. */
START_TEST(schedule_cosine_bad_arguments)
{
    cg_clear_error();
    ck_assert(cg_lr_warmup_cosine(0, 10, 0, 1e-3, 1e-4) == 1e-3);
    ck_assert(!cg_has_error());
    const int64_t step[2] = {-1, 5}, warmup[2] = {0, -3};
    for (int k = 0; k < 2; k++) {
        cg_clear_error();
        ck_assert(isnan(cg_lr_warmup_cosine(step[k], 10, warmup[k], 1e-3, 1e-4)));
        ck_assert_msg(cg_has_error() && strstr(cg_last_error(), "lr_warmup_cosine: need step >= 0"),
                      "%d: '%s'", k, cg_has_error() ? cg_last_error() : "");
    }
    cg_schedule s = cg_schedule_cosine(10, -3, 1e-3, 1e-4);
    ck_assert(isnan(cg_schedule_lr(&s, 5)));
}
END_TEST

/* A negative length (steps) gave a rate, lo or a ramp's, with no error,
 * and a far one overflowed int64 (steps - warmup, steps - step: undefined
 * behaviour, UBSan's report); refused as the other bad arguments are. A
 * length of 0 is a schedule already at its end. */
START_TEST(schedule_negative_length)
{
    const int64_t steps[3] = {-1, INT64_MIN, -2}, step[3] = {5, 5, INT64_MAX};
    for (int k = 0; k < 3; k++) {
        cg_clear_error();
        ck_assert_msg(isnan(cg_lr_warmup_cosine(step[k], steps[k], 1, 1e-3, 1e-4)), "cosine %d", k);
        ck_assert_msg(cg_has_error() &&
                          strstr(cg_last_error(), "lr_warmup_cosine: need steps >= 0"),
                      "%d: '%s'", k, cg_has_error() ? cg_last_error() : "");
        cg_clear_error();
        ck_assert_msg(isnan(cg_lr_warmup_linear(step[k], steps[k], 0, 1e-3, 0.0)), "linear %d", k);
        ck_assert_msg(cg_has_error() &&
                          strstr(cg_last_error(), "lr_warmup_linear: need steps >= 0"),
                      "%d: '%s'", k, cg_has_error() ? cg_last_error() : "");
    }
    cg_clear_error();
    ck_assert(cg_lr_warmup_cosine(INT64_MAX, 0, 0, 1e-3, 1e-4) == 1e-4);
    ck_assert(cg_lr_warmup_linear(INT64_MAX, 0, 0, 1e-3, 1e-5) == 1e-5);
    ck_assert(cg_lr_warmup_linear(INT64_MAX - 1, INT64_MAX, INT64_MAX - 1, 1e-3, 0.0) == 1e-3);
    ck_assert(!cg_has_error());
}
END_TEST

/* Warmup-stable-decay: the cosine's warmup, the peak, then a straight line
 * down to lo over the last `cooldown` steps (lo at step == steps), each
 * rate worked out here in double; the names parse back to their kinds. */
START_TEST(schedule_wsd)
{
    const int64_t steps = 1000, warmup = 50, cooldown = 200;
    const double hi = 1e-3, lo = 1e-5;
    cg_schedule w = cg_schedule_wsd(steps, warmup, cooldown, hi, lo);
    for (int64_t t = 0; t <= steps + 10; t++) {
        double want = lo; /* from step 1000 on */
        if (t < warmup)
            want = hi * (double)(t + 1) / (double)warmup;
        else if (t < steps - cooldown)
            want = hi;
        else if (t < steps)
            want = hi + (lo - hi) * ((double)(t - 800) / 200.0);
        double a = cg_lr_wsd(t, steps, warmup, cooldown, hi, lo);
        ck_assert_msg(a == want, "wsd step %lld: %.17g vs %.17g", (long long)t, a, want);
        ck_assert(cg_schedule_lr(&w, t) == a);
    }
    ck_assert(cg_lr_wsd(799, steps, warmup, cooldown, hi, lo) == hi);
    ck_assert(fabs(cg_lr_wsd(900, steps, warmup, cooldown, hi, lo) - (hi + lo) / 2) < 1e-18);
    ck_assert(cg_lr_wsd(1000, steps, warmup, cooldown, hi, lo) == lo);
    /* no cooldown: the peak to the end; all cooldown: a line from step 0 */
    ck_assert(cg_lr_wsd(999, steps, 0, 0, hi, lo) == hi);
    ck_assert(cg_lr_wsd(0, steps, 0, steps, hi, lo) == hi);
    ck_assert(cg_lr_wsd(500, steps, 0, steps, hi, lo) == hi + (lo - hi) * 0.5);
    ck_assert(isnan(cg_lr_wsd(5, 10, 0, 11, hi, lo)));
    ck_assert_msg(strstr(cg_last_error(), "lr_wsd: need cooldown in [0, steps] (got 11 of 10)"),
                  "%s", cg_last_error());
    ck_assert(isnan(cg_lr_wsd(5, 10, 0, -1, hi, lo)) && isnan(cg_lr_wsd(-1, 10, 0, 1, hi, lo)));
    cg_clear_error();
    for (int k = 0; k <= (int)CG_SCHED_WSD; k++) {
        cg_schedule_kind got;
        ck_assert(cg_schedule_parse(cg_schedule_name((cg_schedule_kind)k), &got) && (int)got == k);
    }
    cg_schedule_kind got = CG_SCHED_NOAM;
    ck_assert(!cg_schedule_parse("Cosine", &got) && got == CG_SCHED_NOAM);
    ck_assert_msg(strstr(cg_last_error(), "unknown schedule 'Cosine' (constant, cosine, noam"),
                  "%s", cg_last_error());
    ck_assert(!cg_schedule_parse(NULL, &got));
    cg_clear_error();
}
END_TEST

START_TEST(schedule_constant_and_kinds)
{
    cg_schedule s = cg_schedule_constant(3e-4);
    ck_assert(cg_schedule_lr(&s, 0) == 3e-4 && cg_schedule_lr(&s, 123456) == 3e-4);
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_NOAM), "noam");
    ck_assert_str_eq(cg_schedule_name((cg_schedule_kind)99), "?");
    ck_assert_str_eq(cg_schedule_name(CG_SCHED_CHAINED + 1), "?"); /* one past the last */
    ck_assert_str_eq(cg_schedule_name((cg_schedule_kind)-1), "?");
    s.kind = (cg_schedule_kind)99;
    cg_clear_error();
    ck_assert(isnan(cg_schedule_lr(&s, 1)));
    ck_assert(strstr(cg_last_error(), "unknown schedule") != NULL);
}
END_TEST

/* Warmup 0 (the rate's peak from the first step): at step 0 Noam gives 0
 * (0^-0.5 beside 0 x 0^-1.5 would be NaN), and the linear schedule its
 * peak, as Hugging Face's lambda (t < 0 never holds) through LambdaLR. */
START_TEST(schedule_warmup_zero)
{
    cg_clear_error();
    ck_assert(cg_lr_noam(0, 128, 0, 0.25) == 0.0);
    ck_assert(cg_lr_noam(4, 128, 0, 0.25) == 0.25 * pow(128.0, -0.5) * 0.5); /* no ramp */
    for (size_t i = 0; i < sizeof OPT_LIN0_STEPS / sizeof OPT_LIN0_STEPS[0]; i++) {
        int64_t t = OPT_LIN0_STEPS[i];
        double a = cg_lr_warmup_linear(t, 2000, 0, 1e-3, 0.0);
        ck_assert_msg(a == OPT_LIN0_LR[i], "linear, warmup 0, step %lld: %.17g vs %.17g",
                      (long long)t, a, OPT_LIN0_LR[i]);
    }
    ck_assert(!cg_has_error());
}
END_TEST

/* ------------------------------------------------ learning-rate scales */

/* The fixture parameters' scales: 0.1x, 1x, 3x, and 0.5x on d, which never
 * has a gradient. */
static const double SCALES[OPT_NPARAMS] = {0.1, 1.0, 3.0, 0.5};

/* Parameter ja's step count and state buffers in a equal jb's in b, bit
 * for bit. */
static void assert_same_param_state(const cg_optim *a, int ja, const cg_optim *b, int jb,
                                    cg_optim_type type)
{
    ck_assert_int_eq(cg_optim_param_steps(a, ja), cg_optim_param_steps(b, jb));
    for (int s = 0; s < (type == CG_OPTIM_SGD ? 1 : 2); s++) {
        const char *what =
            s == 1 ? "exp_avg_sq" : (type == CG_OPTIM_SGD ? "momentum_buffer" : "exp_avg");
        cg_tensor *x = cg_optim_state(a, ja, what), *y = cg_optim_state(b, jb, what);
        ck_assert(x && y && cg_numel(x) == cg_numel(y));
        ck_assert_msg(memcmp(cg_data(x), cg_data(y), (size_t)cg_numel(x) * sizeof(float)) == 0,
                      "%s of parameter %d differs", what, ja);
    }
}

/* AdamW with a scale per parameter against torch.optim.AdamW with one param
 * group per parameter at lr * scale (0.1x, 2.5x, 0, 1x), the rate changing
 * every step. */
START_TEST(lr_scale_as_torch)
{
    check_against_torch(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW,
                        OPT_EXPECT_ADAMW_SCALED, OPT_LR_SCALES);
}
END_TEST

/* A parameter at scale s steps exactly as an optimizer of its own at the
 * rate lr*s (computed in double by its caller), while a schedule changes
 * lr every step: values, moments and step counts bit for bit; at scale 1
 * exactly as without scales. */
static void own_rate_case(cg_optim_config cfg, const double *lrs)
{
    cg_tensor *a[OPT_NPARAMS], *r[OPT_NPARAMS];
    cg_optim *oa = fixture_optim(&cfg, a, SCALES), *own[OPT_NPARAMS];
    make_params(r);
    for (int j = 0; j < OPT_NPARAMS; j++) {
        own[j] = cg_optim_new(&cfg, 1, &(cg_optim_param){OPT_NAMES[j], r[j], OPT_WD[j]});
        ck_assert_ptr_nonnull(own[j]);
    }
    float va[OPT_N], vr[OPT_N];
    for (int k = 0; k < OPT_NSTEPS; k++) {
        do_step(oa, a, k, lrs[k]);
        for (int j = 0; j < OPT_NPARAMS; j++) {
            set_grad(r[j], OPT_HAS_GRAD[k][j] ? OPT_G[k] + offset_of(j) : NULL);
            ck_assert(cg_optim_set_lr(own[j], lrs[k] * SCALES[j]));
            ck_assert_msg(cg_optim_step(own[j]), "%s", cg_last_error());
        }
        gather(a, va);
        gather(r, vr);
        for (int e = 0; e < OPT_N; e++)
            ck_assert_msg(memcmp(&va[e], &vr[e], sizeof(float)) == 0,
                          "%s, step %d, element %d: %.9g with scales, %.9g at its own rate",
                          cg_optim_type_name(cfg.type), k, e, (double)va[e], (double)vr[e]);
    }
    ck_assert(cg_optim_lr(oa) == lrs[OPT_NSTEPS - 1]); /* the rate set, unscaled */
    for (int j = 0; j < OPT_NPARAMS; j++) {
        assert_same_param_state(oa, j, own[j], 0, cfg.type);
        cg_optim_free(own[j]);
    }
    free_fixture(oa, a);
    release_params(r);
}

START_TEST(lr_scale_is_own_rate)
{
    own_rate_case(cg_sgd_config(0.1, 0.9, false), OPT_LR_SGD);
    own_rate_case(cg_sgd_config(0.1, 0.9, true), OPT_LR_SGD_NESTEROV);
    own_rate_case(cg_adam_config(1e-2, 0.9, 0.98, 1e-9), OPT_LR_ADAM);
    own_rate_case(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW);
}
END_TEST

/* Scale 0 (a group lr of 0 in PyTorch): the parameter's values stay bit for
 * bit (AdamW's decay is 1 - 0*wd = 1), while its moments and step count
 * advance exactly as those of an optimizer of its own at lr 0; the other
 * parameters step as without the scale. */
START_TEST(lr_scale_zero)
{
    const cg_optim_config cfgs[3] = {cg_adamw_config(1e-2, 0.9, 0.99, 1e-8),
                                     cg_adam_config(1e-2, 0.9, 0.98, 1e-9),
                                     cg_sgd_config(0.1, 0.9, false)};
    for (int c = 0; c < 3; c++) {
        cg_tensor *a[OPT_NPARAMS], *b[OPT_NPARAMS];
        cg_optim *oa = fixture_optim(&cfgs[c], a, NULL), *ob = fixture_optim(&cfgs[c], b, NULL);
        cg_tensor *wz = cg_requires_grad(cg_from_data(CG_SHAPE(3, 4), OPT_P0), true);
        cg_optim *zero = cg_optim_new(&cfgs[c], 1, &(cg_optim_param){"w", wz, OPT_WD[0]});
        ck_assert(zero && cg_optim_set_lr_scale(oa, 0, 0.0) && cg_optim_param_lr_scale(oa, 0) == 0);
        for (int k = 0; k < OPT_NSTEPS; k++) {
            do_step(oa, a, k, 1e-2);
            do_step(ob, b, k, 1e-2);
            set_grad(wz, OPT_G[k]); /* w has a gradient at every step */
            ck_assert(cg_optim_set_lr(zero, 0.0) && cg_optim_step(zero));
        }
        const char *name = cg_optim_type_name(cfgs[c].type);
        ck_assert_msg(memcmp(cg_data(a[0]), OPT_P0, 12 * sizeof(float)) == 0, "%s: w moved", name);
        ck_assert(memcmp(cg_data(wz), OPT_P0, 12 * sizeof(float)) == 0);
        ck_assert_int_eq(cg_optim_param_steps(oa, 0), OPT_NSTEPS);
        assert_same_param_state(oa, 0, zero, 0, cfgs[c].type);
        const cg_tensor *m = cg_optim_state(oa, 0, c == 2 ? "momentum_buffer" : "exp_avg");
        ck_assert_msg(cg_data((cg_tensor *)m)[0] != 0, "%s: the state did not advance", name);
        for (int j = 1; j < OPT_NPARAMS; j++)
            ck_assert_msg(
                memcmp(cg_data(a[j]), cg_data(b[j]), (size_t)cg_numel(a[j]) * sizeof(float)) == 0,
                "%s: parameter %d", name, j);
        ck_assert(memcmp(cg_data(b[0]), OPT_P0, 12 * sizeof(float)) != 0); /* unscaled: moved */
        cg_optim_free(zero);
        cg_release(wz);
        free_fixture(ob, b);
        free_fixture(oa, a);
    }
}
END_TEST

/* A scale that is not finite and >= 0, or a parameter that is not there,
 * is refused in one line naming them; nothing changes. -0 is 0. */
START_TEST(lr_scale_refusals)
{
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, NULL);
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_optim_param_lr_scale(o, j) == 1.0);
    ck_assert(cg_optim_set_lr_scale(o, 1, 0.25));
    do_step(o, ps, 0, 1e-2);
    float before[OPT_N], after[OPT_N], m0[4], m1[4];
    gather(ps, before);
    ck_assert(cg_copy_to(cg_optim_state(o, 1, "exp_avg"), m0));
    const double bad[] = {-1e-3, -INFINITY, NAN, INFINITY, -NAN};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(o, 1, bad[i]),
                          "optim_set_lr_scale: parameter 'b': learning-rate scale");
        assert_error_has("must be finite and >= 0 (kept 0.25)");
        ck_assert(cg_optim_param_lr_scale(o, 1) == 0.25);
    }
    CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(o, 1, -1e-3), "scale -0.001 must be");
    CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(o, -1, 1.0), "no parameter -1 (the optimizer has 4)");
    CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(o, OPT_NPARAMS, 1.0), "no parameter 4");
    CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(NULL, 0, 1.0), "cg_optim_set_lr_scale: input is NULL");
    CG_ASSERT_REFUSED(cg_optim_param_lr_scale(o, OPT_NPARAMS) == -1, "no parameter 4");
    CG_ASSERT_REFUSED(cg_optim_param_lr_scale(NULL, 0) == -1, "no parameter 0");
    /* nothing changed: values, state, counts, rate and the other scales */
    gather(ps, after);
    ck_assert(memcmp(before, after, sizeof after) == 0);
    ck_assert(cg_copy_to(cg_optim_state(o, 1, "exp_avg"), m1));
    ck_assert(memcmp(m0, m1, sizeof m1) == 0);
    ck_assert(cg_optim_steps(o) == 1 && cg_optim_param_steps(o, 1) == 1 && cg_optim_lr(o) == 1e-2);
    ck_assert(cg_optim_param_lr_scale(o, 0) == 1.0 && cg_optim_param_lr_scale(o, 1) == 0.25);
    /* -0 is taken as 0 (the same rate), a large finite scale as it is while
     * the parameter's rate stays a float32 (lr_rule_rate_past_float_max) */
    ck_assert(cg_optim_set_lr_scale(o, 2, -0.0));
    ck_assert(cg_optim_param_lr_scale(o, 2) == 0 && !signbit(cg_optim_param_lr_scale(o, 2)));
    ck_assert(cg_optim_set_lr_scale(o, 3, 1e30) && cg_optim_param_lr_scale(o, 3) == 1e30);
    free_fixture(o, ps);
}
END_TEST

/* A copy of path with metadata key set to value (added if absent). */
static void write_with_meta(const char *path, const char *out, const char *key, const char *value)
{
    cg_st_file *f = cg_st_open(path);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(f && w);
    copy_tensors(f, w, NULL, 0, 0, NULL);
    copy_metadata(f, w, NULL, NULL);
    ck_assert(cg_st_set_metadata(w, key, value));
    cg_st_close(f);
    ck_assert(cg_st_writer_save(w, out));
    cg_st_writer_free(w);
}

/* A metadata entry set in a copy of a saved state, and the refusal's words. */
typedef struct {
    const char *key, *value, *msg;
} meta_edit;

/* Each edit of the file at path (written to bad) is refused by r's load
 * with its msg in the error, and r is left as it was: its scales, step
 * count, rate and w's exp_avg. */
static void assert_edits_refused(cg_optim *r, const char *path, const char *bad,
                                 const meta_edit *edits, size_t n)
{
    float m0[12], m1[12];
    double scales[OPT_NPARAMS];
    ck_assert(cg_copy_to(cg_optim_state(r, 0, "exp_avg"), m0));
    for (int j = 0; j < OPT_NPARAMS; j++)
        scales[j] = cg_optim_param_lr_scale(r, j);
    const int64_t steps = cg_optim_steps(r);
    const double lr = cg_optim_lr(r);
    for (size_t k = 0; k < n; k++) {
        write_with_meta(path, bad, edits[k].key, edits[k].value);
        cg_st_file *b = cg_st_open(bad);
        ck_assert_ptr_nonnull(b);
        CG_ASSERT_REFUSED(!cg_optim_load(r, b, "opt"), edits[k].msg);
        cg_st_close(b);
        for (int j = 0; j < OPT_NPARAMS; j++)
            ck_assert(cg_optim_param_lr_scale(r, j) == scales[j]);
        ck_assert(cg_optim_steps(r) == steps && cg_optim_lr(r) == lr);
        ck_assert(cg_copy_to(cg_optim_state(r, 0, "exp_avg"), m1));
        ck_assert(memcmp(m0, m1, sizeof m1) == 0);
    }
}

/* The scales go into the file as "<prefix>.<name>.lr_scale", those other
 * than 1 only (a file without scales is the file as before), and come
 * back exactly; a file without them (one written before scales existed)
 * loads every scale as 1; a damaged entry, or one for a parameter the
 * optimizer lacks, is refused naming it, the optimizer unchanged. */
START_TEST(lr_scale_state)
{
    static const double scales[OPT_NPARAMS] = {0.1, 1.0, 1.0 / 3, 0.0},
                        other[OPT_NPARAMS] = {7, 7, 7, 7};
    char path[4096], plain[4096], bad[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("scaled.safetensors"));
    snprintf(plain, sizeof plain, "%s", in_dir("plain.safetensors"));
    snprintf(bad, sizeof bad, "%s", in_dir("bad.safetensors"));
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, scales);
    do_step(o, ps, 0, 1e-2);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_optim_save(o, w, "opt") && cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_optim_free(o);
    write_state(plain, cfg); /* every scale 1: no entries */
    cg_st_file *f = cg_st_open(path), *g = cg_st_open(plain);
    ck_assert(f && g);
    ck_assert_str_eq(cg_st_metadata(f, "opt.w.lr_scale"), "0.10000000000000001");
    ck_assert_ptr_null(cg_st_metadata(f, "opt.b.lr_scale"));
    ck_assert_str_eq(cg_st_metadata(f, "opt.c.lr_scale"), "0.33333333333333331");
    ck_assert_str_eq(cg_st_metadata(f, "opt.d.lr_scale"), "0");
    for (int i = 0; i < cg_st_metadata_count(g); i++)
        ck_assert_ptr_null(strstr(cg_st_metadata_key(g, i), "lr_scale"));
    /* back exactly, over the scales the optimizer had */
    cg_optim *r = make_optim(&cfg, ps);
    set_scales(r, other);
    ck_assert_msg(cg_optim_load(r, f, "opt"), "%s", cg_last_error());
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_optim_param_lr_scale(r, j) == scales[j]);
    cg_st_close(f);
    /* a file without entries: every scale 1 */
    set_scales(r, other);
    ck_assert_msg(cg_optim_load(r, g, "opt"), "%s", cg_last_error());
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_optim_param_lr_scale(r, j) == 1.0);
    cg_st_close(g);
    /* the smallest subnormal scale, which strtod reads with ERANGE, round-trips */
    o = make_optim(&cfg, ps);
    ck_assert(cg_optim_set_lr_scale(o, 2, 0x1p-1074));
    w = cg_st_writer_new();
    ck_assert(cg_optim_save(o, w, "opt") && cg_st_writer_save(w, bad));
    cg_st_writer_free(w);
    cg_optim_free(o);
    g = cg_st_open(bad);
    ck_assert_msg(g && cg_optim_load(r, g, "opt"), "%s", cg_last_error());
    ck_assert(cg_optim_param_lr_scale(r, 2) == 0x1p-1074 && cg_optim_param_lr_scale(r, 0) == 1);
    cg_st_close(g);
    /* damaged entries, and one for a parameter the optimizer lacks */
    static const meta_edit cases[] = {
        {"opt.w.lr_scale", "-0.5",
         "metadata 'opt.w.lr_scale' = '-0.5': learning-rate scale -0.5 must be finite and >= 0"},
        {"opt.w.lr_scale", "nan", "'opt.w.lr_scale' = 'nan' is not a learning-rate scale"},
        {"opt.c.lr_scale", "inf", "'opt.c.lr_scale' = 'inf' is not"},
        {"opt.c.lr_scale", "1e999", "'opt.c.lr_scale' = '1e999' is not"},
        {"opt.d.lr_scale", "1e-999", "'opt.d.lr_scale' = '1e-999' is not"},
        {"opt.w.lr_scale", "0.1x", "'opt.w.lr_scale' = '0.1x' is not"},
        {"opt.b.lr_scale", "", "'opt.b.lr_scale' = '' is not"},
        {"opt.e.lr_scale", "0.5",
         "metadata 'opt.e.lr_scale' is the learning-rate scale of no "
         "parameter of the optimizer"},
    };
    set_scales(r, other); /* kept through every refusal */
    ck_assert(cg_optim_lr(r) == 1e-2);
    assert_edits_refused(r, path, bad, cases, sizeof cases / sizeof *cases);
    /* another prefix's scales are not this one's */
    write_with_meta(path, bad, "opt2.e.lr_scale", "0.5");
    cg_st_file *b = cg_st_open(bad);
    ck_assert_msg(b && cg_optim_load(r, b, "opt"), "%s", cg_last_error());
    ck_assert(cg_optim_param_lr_scale(r, 0) == 0.1);
    cg_st_close(b);
    free_fixture(r, ps);
}
END_TEST

/* cg_optim_copy_state carries the scales (gathering shards, splitting into
 * them); shards with the scales give their owned elements the unsharded
 * optimizer's values bit for bit; a shard loads them with its run. */
START_TEST(lr_scale_shards_and_copies)
{
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    cg_tensor *a[OPT_NPARAMS], *s[NSHARD][OPT_NPARAMS];
    cg_optim *oa = fixture_optim(&cfg, a, SCALES), *os[NSHARD];
    for (int k = 0; k < NSHARD; k++) {
        make_params(s[k]);
        os[k] = make_shard(&cfg, s[k], k);
        set_scales(os[k], SCALES);
    }
    float va[OPT_N], vs[OPT_N];
    for (int step = 0; step < OPT_NSTEPS; step++) {
        do_step(oa, a, step, OPT_LR_ADAMW[step]);
        for (int k = 0; k < NSHARD; k++)
            do_step(os[k], s[k], step, OPT_LR_ADAMW[step]);
        share_owned(s);
        gather(a, va);
        for (int k = 0; k < NSHARD; k++) {
            gather(s[k], vs);
            ck_assert_msg(memcmp(va, vs, sizeof va) == 0, "step %d, shard %d differs", step, k);
        }
    }
    /* the scales did something: w is not where an unscaled run takes it */
    ck_assert(fabsf(va[0] - OPT_EXPECT_ADAMW[OPT_NSTEPS - 1][0]) > 1e-4f);

    /* gathered into a whole optimizer: the scales come with the state */
    cg_tensor *f[OPT_NPARAMS];
    cg_optim *full = fixture_optim(&cfg, f, NULL);
    for (int k = 0; k < NSHARD; k++)
        ck_assert_msg(cg_optim_copy_state(full, os[k]), "%s", cg_last_error());
    assert_same_state(full, oa, cfg);
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_optim_param_lr_scale(full, j) == SCALES[j]);
    /* split: a fresh shard takes them from the whole */
    cg_optim *split = make_shard(&cfg, f, 1);
    ck_assert(cg_optim_copy_state(split, oa));
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_optim_param_lr_scale(split, j) == SCALES[j]);
    cg_optim_free(split);
    /* a shard loads them from the gathered file, with its run */
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_optim_save(full, w, "opt") && cg_st_writer_save(w, in_dir("full.st")));
    cg_st_writer_free(w);
    cg_st_file *file = cg_st_open(in_dir("full.st"));
    ck_assert_ptr_nonnull(file);
    cg_tensor *q[OPT_NPARAMS];
    make_params(q);
    cg_optim *loaded = make_shard(&cfg, q, 2);
    ck_assert_msg(cg_optim_load(loaded, file, "opt"), "%s", cg_last_error());
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_optim_param_lr_scale(loaded, j) == SCALES[j]);
    assert_same_state(loaded, os[2], cfg);
    cg_st_close(file);
    free_fixture(loaded, q);
    free_fixture(full, f);
    for (int k = 0; k < NSHARD; k++)
        free_fixture(os[k], s[k]);
    free_fixture(oa, a);
}
END_TEST

/* ------------------------------------------------ the learning-rate rule */

/* o saved under "opt" into path, then loaded into r: the load's result. */
static bool save_then_load(const cg_optim *o, cg_optim *r, const char *path)
{
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(w && cg_optim_save(o, w, "opt") && cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);
    bool ok = cg_optim_load(r, f, "opt");
    cg_st_close(f);
    return ok;
}

/* A subnormal rate is a rate, as in PyTorch (any lr >= 0): StepLR takes a
 * rate through them on its way to 0, and a checkpoint written then must
 * resume. Whatever the optimizer takes is saved and loaded back bit for
 * bit: a subnormal rate from the config and from cg_optim_set_lr, and
 * subnormal eps, beta1 and momentum (strtod reads each with ERANGE); a
 * step at such a rate leaves float32 weights where they were. */
START_TEST(lr_rule_subnormal_round_trip)
{
    const double tiny = cg_lr_step_decay(1070, 1, 0.5, 1.0);
    ck_assert(tiny == 0x1p-1070);
    const cg_optim_config cfgs[2] = {cg_adamw_config(0x1p-1074, 0x1p-1060, 0.99, 0x1p-1050),
                                     cg_sgd_config(0x1p-1074, 0x1p-1065, false)},
                          other[2] = {cg_adamw_default(1.0), cg_sgd_config(1.0, 0.5, false)};
    for (int c = 0; c < 2; c++) {
        cg_tensor *ps[OPT_NPARAMS], *qs[OPT_NPARAMS];
        cg_optim *o = fixture_optim(&cfgs[c], ps, NULL), *r = fixture_optim(&other[c], qs, NULL);
        ck_assert(cg_optim_lr(o) == 0x1p-1074);
        ck_assert_msg(save_then_load(o, r, in_dir("tiny.st")), "%s", cg_last_error());
        cg_optim_config a = cg_optim_get_config(o), b = cg_optim_get_config(r);
        ck_assert(b.lr == 0x1p-1074 && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
                  a.momentum == b.momentum);
        do_step(o, ps, 0, tiny); /* cg_optim_set_lr(o, tiny), then a step */
        ck_assert(cg_optim_lr(o) == tiny);
        float got[OPT_N];
        gather(ps, got);
        ck_assert_msg(memcmp(got, OPT_P0, sizeof got) == 0, "%s: a weight moved",
                      cg_optim_type_name(cfgs[c].type));
        ck_assert_msg(save_then_load(o, r, in_dir("tiny.st")), "%s", cg_last_error());
        ck_assert(cg_optim_lr(r) == tiny && cg_optim_steps(r) == 1);
        free_fixture(r, qs);
        free_fixture(o, ps);
    }
}
END_TEST

/* Each parameter's rate, lr * its scale, goes into the float32 step (-lr,
 * rounded once): past FLT_MAX it was inf, and the step wrote inf and NaN
 * into the weights. cg_optim_set_lr_scale and cg_optim_set_lr refuse a
 * value that takes some parameter's rate past FLT_MAX, naming it, and
 * change nothing; so does a config with such a rate. FLT_MAX itself is a
 * rate. At rate 0 any finite scale is taken (its rate is 0), and a rate
 * set later is judged with it. */
START_TEST(lr_rule_rate_past_float_max)
{
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, (const double[OPT_NPARAMS]){1, 1, 1e30, 1});
    do_step(o, ps, 0, 1e-2);
    float before[OPT_N], after[OPT_N], m0[12], m1[12];
    gather(ps, before);
    ck_assert(cg_copy_to(cg_optim_state(o, 0, "exp_avg"), m0));
    CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(o, 1, 1e300),
                      "optim_set_lr_scale: parameter 'b': learning rate 0.01 times scale 1e+300 "
                      "is 1e+298, past float32's largest (3.40282e+38) (kept 1)");
    CG_ASSERT_REFUSED(!cg_optim_set_lr(o, 1e9),
                      "optim set_lr: parameter 'c': learning rate 1e+09 times scale 1e+30 is "
                      "1e+39, past float32's largest (3.40282e+38) (kept 0.01)");
    CG_ASSERT_REFUSED(!cg_optim_set_lr(o, 1e39),
                      "optim set_lr: learning rate 1e+39 must be finite, >= 0 and at most "
                      "3.40282e+38 (float32's largest) (kept 0.01)");
    gather(ps, after);
    ck_assert(memcmp(before, after, sizeof after) == 0);
    ck_assert(cg_copy_to(cg_optim_state(o, 0, "exp_avg"), m1));
    ck_assert(memcmp(m0, m1, sizeof m1) == 0);
    ck_assert(cg_optim_lr(o) == 1e-2 && cg_optim_steps(o) == 1);
    ck_assert(cg_optim_param_lr_scale(o, 1) == 1 && cg_optim_param_lr_scale(o, 2) == 1e30);
    /* the edge: a rate of FLT_MAX is one, the next double is not */
    ck_assert(cg_optim_set_lr(o, 1e8)); /* c: 1e38 */
    ck_assert(cg_optim_set_lr(o, 1.0) && cg_optim_set_lr_scale(o, 1, FLT_MAX));
    CG_ASSERT_REFUSED(!cg_optim_set_lr_scale(o, 1, nextafter(FLT_MAX, INFINITY)),
                      "parameter 'b': learning rate 1 times scale 3.40282e+38 is 3.40282e+38, "
                      "past float32's largest");
    CG_ASSERT_REFUSED(!cg_optim_set_lr(o, nextafter(1.0, 2.0)), "parameter 'b': learning rate 1 ");
    ck_assert(cg_optim_set_lr_scale(o, 1, 1.0) && cg_optim_set_lr_scale(o, 2, 1.0));
    ck_assert(cg_optim_set_lr(o, FLT_MAX));
    CG_ASSERT_REFUSED(!cg_optim_set_lr(o, nextafter(FLT_MAX, INFINITY)),
                      "learning rate 3.40282e+38 must be finite, >= 0 and at most 3.40282e+38");
    /* at rate 0, a large scale is taken; a rate then is judged with it */
    ck_assert(cg_optim_set_lr(o, 0.0) && cg_optim_set_lr_scale(o, 3, 1e300));
    CG_ASSERT_REFUSED(!cg_optim_set_lr(o, 1e-2), "optim set_lr: parameter 'd': learning rate");
    ck_assert(cg_optim_lr(o) == 0 && cg_optim_param_lr_scale(o, 3) == 1e300);
    /* a config's rate */
    cg_optim_config big = cfg;
    big.lr = 1e39;
    CG_ASSERT_FAILS(cg_optim_new(&big, 1, &(cg_optim_param){"w", ps[0], 0}),
                    "optim_new: learning rate 1e+39 must be finite, >= 0 and at most");
    free_fixture(o, ps);
}
END_TEST

/* A file whose rate and scales take a parameter's rate past FLT_MAX
 * loaded, and the next step wrote inf into that parameter: refused now,
 * naming the entry, the optimizer unchanged, as a rate past FLT_MAX is.
 * A large scale saved at rate 0 loads, as cg_optim_set_lr_scale took it,
 * and a rate set afterwards is refused naming its parameter. */
START_TEST(lr_rule_load_past_float_max)
{
    char path[4096], bad[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(bad, sizeof bad, "%s", in_dir("bad.safetensors"));
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    static const double seven[OPT_NPARAMS] = {7, 7, 7, 7};
    cg_tensor *ps[OPT_NPARAMS], *qs[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, (const double[OPT_NPARAMS]){1, 1, 1e30, 1});
    cg_optim *r = fixture_optim(&cfg, qs, seven);
    do_step(o, ps, 0, 1e-2);
    ck_assert_msg(save_then_load(o, r, path), "%s", cg_last_error());
    ck_assert(cg_optim_param_lr_scale(r, 2) == 1e30);
    static const meta_edit cases[] = {
        {"opt.w.lr_scale", "1e300",
         "metadata 'opt.w.lr_scale' = '1e300': learning rate 0.01 times scale 1e+300 is "
         "1e+298, past float32's largest (3.40282e+38)"},
        {"opt.lr", "1e9",
         "metadata 'opt.c.lr_scale' = '1e+30': learning rate 1e+09 times scale 1e+30 is 1e+39, "
         "past float32's largest"},
        {"opt.lr", "1e39", "learning rate 1e+39 must be finite, >= 0 and at most 3.40282e+38"},
    };
    set_scales(r, seven); /* kept through every refusal */
    ck_assert(cg_optim_steps(r) == 1 && cg_optim_lr(r) == 1e-2);
    assert_edits_refused(r, path, bad, cases, sizeof cases / sizeof *cases);
    /* rate 0 and a scale of 1e300: saved, loaded, judged when a rate comes */
    ck_assert(cg_optim_set_lr(o, 0.0) && cg_optim_set_lr_scale(o, 0, 1e300));
    ck_assert_msg(save_then_load(o, r, path), "%s", cg_last_error());
    ck_assert(cg_optim_lr(r) == 0 && cg_optim_param_lr_scale(r, 0) == 1e300);
    CG_ASSERT_REFUSED(!cg_optim_set_lr(r, 1e-2), "optim set_lr: parameter 'w': learning rate");
    free_fixture(r, qs);
    free_fixture(o, ps);
}
END_TEST

static Suite *optim_lr_suite(void)
{
    Suite *s = suite_create("optim_lr");
    TCase *tc = tcase_create("schedule");
    tcase_add_test(tc, schedule_cosine);
    tcase_add_test(tc, schedule_noam);
    tcase_add_test(tc, schedule_linear_and_step);
    tcase_add_test(tc, schedule_cosine_bad_arguments);
    tcase_add_test(tc, schedule_negative_length);
    tcase_add_test(tc, schedule_constant_and_kinds);
    tcase_add_test(tc, schedule_wsd);
    tcase_add_test(tc, schedule_warmup_zero);
    tcase_add_test(tc, schedule_step_far);
    suite_add_tcase(s, tc);

    tc = tcase_create("lr_scale");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, lr_scale_as_torch);
    tcase_add_test(tc, lr_scale_is_own_rate);
    tcase_add_test(tc, lr_scale_zero);
    tcase_add_test(tc, lr_scale_refusals);
    tcase_add_test(tc, lr_scale_state);
    tcase_add_test(tc, lr_scale_shards_and_copies);
    suite_add_tcase(s, tc);

    tc = tcase_create("lr_rule");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, lr_rule_subnormal_round_trip);
    tcase_add_test(tc, lr_rule_rate_past_float_max);
    tcase_add_test(tc, lr_rule_load_past_float_max);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = optim_lr_suite();
    return cg_test_run(&s, 1);
}
