/* Check suite "optim": optim/optim.h and optim/schedule.h.
 *
 * Expected values come from PyTorch through tests/fixtures/optim_expected.h
 * (written by tests/fixtures/make_optim_expected.py): four parameters with
 * per-parameter weight decay, four steps with a learning rate set before
 * each, one parameter without a gradient at step 1 and one never with one.
 * Also: schedules against the reference trainers' formulas, clipping against
 * torch.nn.utils.clip_grad_norm_, the NaN/Inf check, bit-identical resume
 * through a safetensors file, and errors. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "tests/testutil.h"

#include "tests/fixtures/optim_expected.h"

/* ------------------------------------------------------------ helpers */

static char g_dir[1024];

static void setup(void)
{
    cg_clear_error();
    cg_test_mkdtemp(g_dir, sizeof g_dir, "cg_optim_test_");
}

static void teardown(void) { cg_test_rm_tree(g_dir); }

static const char *in_dir(const char *name)
{
    static char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

static int64_t offset_of(int j)
{
    int64_t off = 0;
    for (int k = 0; k < j; k++)
        off += cg_numel_shape((int)OPT_SHAPES[k][0], &OPT_SHAPES[k][1]);
    return off;
}

/* The four fixture parameters, fresh copies of OPT_P0. */
static void make_params(cg_tensor *ps[OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++) {
        ps[j] = cg_from_data((int)OPT_SHAPES[j][0], &OPT_SHAPES[j][1], OPT_P0 + offset_of(j));
        ck_assert_ptr_nonnull(ps[j]);
        cg_requires_grad(ps[j], true);
    }
}

static void release_params(cg_tensor *ps[OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        cg_release(ps[j]);
}

static cg_optim *make_optim(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS])
{
    cg_optim_param spec[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
    cg_optim *o = cg_optim_new(cfg, OPT_NPARAMS, spec);
    ck_assert_msg(o != NULL, "optim_new: %s", cg_last_error());
    return o;
}

static void set_grad(cg_tensor *p, const float *g)
{
    cg_release(p->grad);
    p->grad = g ? cg_from_data(p->ndim, p->shape, g) : NULL;
}

/* Gradients of fixture step k, then one optimizer step at lr. */
static void do_step(cg_optim *o, cg_tensor *ps[OPT_NPARAMS], int k, double lr)
{
    cg_optim_zero_grad(o);
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(ps[j], OPT_HAS_GRAD[k][j] ? OPT_G[k] + offset_of(j) : NULL);
    cg_optim_set_lr(o, lr);
    ck_assert_msg(cg_optim_step(o), "step %d: %s", k, cg_last_error());
}

static void gather(cg_tensor *ps[OPT_NPARAMS], float *out)
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_copy_to(ps[j], out + offset_of(j)));
}

static void set_scales(cg_optim *o, const double scales[OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert_msg(cg_optim_set_lr_scale(o, j, scales[j]), "%s", cg_last_error());
}

/* The opening of the learning-rate tests: the fixture parameters, fresh,
 * into ps (release_params), and an optimizer over them with cfg and each
 * parameter's learning-rate scale (scales NULL: every scale 1). */
static cg_optim *fixture_optim(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS],
                               const double *scales)
{
    make_params(ps);
    cg_optim *o = make_optim(cfg, ps);
    if (scales)
        set_scales(o, scales);
    return o;
}

/* fixture_optim's closing: the optimizer freed, then its parameters. */
static void free_fixture(cg_optim *o, cg_tensor *ps[OPT_NPARAMS])
{
    cg_optim_free(o);
    release_params(ps);
}

/* Run the fixture's steps and compare every parameter after every step;
 * scales: each parameter's learning-rate scale (NULL: none set). */
static void check_against_torch(cg_optim_config cfg, const double *lrs,
                                const float expect[OPT_NSTEPS][OPT_N], const double *scales)
{
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, scales);
    float got[OPT_N];
    for (int k = 0; k < OPT_NSTEPS; k++) {
        do_step(o, ps, k, lrs[k]);
        gather(ps, got);
        CG_ASSERT_CLOSE(got, expect[k], OPT_N, 1e-7, 1e-6);
    }
    /* d never had a gradient: untouched, no state; c missed one step. */
    int64_t od = offset_of(3);
    ck_assert(memcmp(got + od, OPT_P0 + od, 2 * sizeof(float)) == 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), OPT_NSTEPS);
    ck_assert_int_eq(cg_optim_param_steps(o, 2), OPT_NSTEPS - 1);
    ck_assert_int_eq(cg_optim_param_steps(o, 3), 0);
    ck_assert_int_eq(cg_optim_steps(o), OPT_NSTEPS);
    free_fixture(o, ps);
}

/* ------------------------------------------------------ vs PyTorch */

START_TEST(sgd_momentum_wd)
{
    check_against_torch(cg_sgd_config(0.1, 0.9, false), OPT_LR_SGD, OPT_EXPECT_SGD, NULL);
}
END_TEST

START_TEST(sgd_nesterov_wd)
{
    check_against_torch(cg_sgd_config(0.1, 0.9, true), OPT_LR_SGD_NESTEROV, OPT_EXPECT_SGD_NESTEROV,
                        NULL);
}
END_TEST

START_TEST(sgd_plain_wd)
{
    check_against_torch(cg_sgd_config(0.1, 0.0, false), OPT_LR_SGD_PLAIN, OPT_EXPECT_SGD_PLAIN,
                        NULL);
}
END_TEST

START_TEST(adam_l2)
{
    check_against_torch(cg_adam_config(1e-2, 0.9, 0.98, 1e-9), OPT_LR_ADAM, OPT_EXPECT_ADAM, NULL);
}
END_TEST

START_TEST(adamw_decoupled)
{
    check_against_torch(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW, OPT_EXPECT_ADAMW,
                        NULL);
}
END_TEST

/* A parameter without gradient keeps its values and its state exactly while
 * the others move; it counts no step. */
START_TEST(skip_param_without_grad)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    cg_optim *o = make_optim(&cfg, ps);
    do_step(o, ps, 0, 1e-2);
    float c_before[6], m_before[6], c_after[6], m_after[6];
    ck_assert(cg_copy_to(ps[2], c_before));
    ck_assert(cg_copy_to(cg_optim_state(o, 2, "exp_avg"), m_before));
    do_step(o, ps, 1, 1e-2); /* c has no gradient at step 1 */
    ck_assert(cg_copy_to(ps[2], c_after));
    ck_assert(cg_copy_to(cg_optim_state(o, 2, "exp_avg"), m_after));
    ck_assert(memcmp(c_before, c_after, sizeof c_after) == 0);
    ck_assert(memcmp(m_before, m_after, sizeof m_after) == 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 2), 1);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), 2);
    /* d: no gradient, weight decay 0.1, still not decayed; state zero. */
    float d[2], m[2];
    ck_assert(cg_copy_to(ps[3], d));
    ck_assert(memcmp(d, OPT_P0 + offset_of(3), sizeof d) == 0);
    ck_assert(cg_copy_to(cg_optim_state(o, 3, "exp_avg_sq"), m));
    ck_assert(m[0] == 0 && m[1] == 0);
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* Gradients computed by the autograd engine: loss = sum(p*p), grad 2p, plain
 * SGD at lr 0.1 gives 0.8p. */
START_TEST(step_with_autograd)
{
    float v[5] = {1, -2, 0.5f, 3, -0.25f};
    cg_tensor *p = cg_requires_grad(cg_from_data(CG_SHAPE(5), v), true);
    cg_optim_config cfg = cg_sgd_config(0.1, 0, false);
    cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"p", p, 0});
    ck_assert_ptr_nonnull(o);
    cg_tensor *sq = cg_mul(p, p);
    cg_tensor *loss = cg_sum_all(sq);
    ck_assert_msg(loss && cg_backward(loss, NULL, false), "%s", cg_last_error());
    cg_release_all(2, sq, loss);
    ck_assert(cg_optim_step(o));
    float want[5];
    for (int i = 0; i < 5; i++)
        want[i] = v[i] + (float)-0.1 * (2 * v[i]);
    CG_ASSERT_TENSOR(p, want, 0, 1e-6);
    cg_optim_zero_grad(o);
    ck_assert_ptr_null(p->grad);
    cg_optim_free(o);
    cg_release(p);
}
END_TEST

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
    ck_assert_str_eq(cg_schedule_name((cg_schedule_kind)9), "?");
    ck_assert_str_eq(cg_schedule_name((cg_schedule_kind)6), "?"); /* one past the last */
    ck_assert_str_eq(cg_schedule_name((cg_schedule_kind)-1), "?");
    s.kind = (cg_schedule_kind)9;
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

/* ------------------------------------------------------- clipping */

static void clip_case(double max_norm, double want_total, const float *want_grads, bool scaled)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(ps[j], OPT_HAS_GRAD[0][j] ? OPT_G[0] + offset_of(j) : NULL);
    double norm = cg_grad_norm(OPT_NPARAMS, ps);
    double total = cg_clip_grad_norm(OPT_NPARAMS, ps, max_norm);
    ck_assert(norm == total);
    ck_assert_msg(fabs(total - want_total) <= 1e-6 * want_total, "total %.9g, torch %.9g", total,
                  want_total);
    float got[OPT_N] = {0};
    for (int j = 0; j < OPT_NPARAMS; j++)
        if (ps[j]->grad)
            ck_assert(cg_copy_to(ps[j]->grad, got + offset_of(j)));
    ck_assert_ptr_null(ps[3]->grad); /* skipped, not created */
    CG_ASSERT_CLOSE(got, want_grads, OPT_N, 1e-7, 1e-6);
    if (!scaled) /* below the limit: not touched at all */
        for (int j = 0; j < 3; j++)
            ck_assert(memcmp(got + offset_of(j), OPT_G[0] + offset_of(j),
                             (size_t)cg_numel(ps[j]) * sizeof(float)) == 0);
    release_params(ps);
}

START_TEST(clip_scales) { clip_case(1.0, OPT_CLIP1_TOTAL, OPT_CLIP1_GRADS, true); }
END_TEST

START_TEST(clip_below_limit) { clip_case(100.0, OPT_CLIP100_TOTAL, OPT_CLIP100_GRADS, false); }
END_TEST

/* Through the optimizer, and on a strided gradient. */
START_TEST(clip_optim_and_strided_grad)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_sgd_config(0.1, 0, false);
    cg_optim *o = make_optim(&cfg, ps);
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(ps[j], OPT_HAS_GRAD[0][j] ? OPT_G[0] + offset_of(j) : NULL);
    /* w's gradient as a transposed view of a [4,3] buffer holding the same values */
    float wt[12];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            wt[c * 3 + r] = OPT_G[0][r * 4 + c];
    cg_tensor *base = cg_from_data(CG_SHAPE(4, 3), wt);
    cg_release(ps[0]->grad);
    ps[0]->grad = cg_view_transpose(base, 0, 1);
    cg_release(base);
    ck_assert(!cg_is_contiguous(ps[0]->grad));
    /* an infinite bound: the norm alone, nothing scaled (the trainer's
     * check of a step it does not clip) */
    float before[OPT_N] = {0};
    for (int j = 0; j < 3; j++)
        ck_assert(cg_copy_to(ps[j]->grad, before + offset_of(j)));
    double total = cg_optim_clip_grad_norm(o, INFINITY);
    ck_assert(fabs(total - OPT_CLIP1_TOTAL) <= 1e-6 * OPT_CLIP1_TOTAL);
    float same[OPT_N] = {0};
    for (int j = 0; j < 3; j++)
        ck_assert(cg_copy_to(ps[j]->grad, same + offset_of(j)));
    ck_assert_mem_eq(same, before, sizeof same);
    total = cg_optim_clip_grad_norm(o, 1.0);
    ck_assert(fabs(total - OPT_CLIP1_TOTAL) <= 1e-6 * OPT_CLIP1_TOTAL);
    float got[OPT_N] = {0};
    for (int j = 0; j < 3; j++)
        ck_assert(cg_copy_to(ps[j]->grad, got + offset_of(j)));
    CG_ASSERT_CLOSE(got, OPT_CLIP1_GRADS, OPT_N, 1e-7, 1e-6);
    /* a strided gradient also feeds the update */
    ck_assert(cg_optim_step(o));
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* The norm of a large gradient is the same for 1 and 4 threads, and has
 * the bits of optim/clip.c's order: blocks of 16,384 elements each summed
 * in order (in double), then the blocks in order (300,001 elements: two
 * groups of 8 blocks summed side by side, 2 more whole blocks, a part). */
START_TEST(clip_norm_thread_independent)
{
    cg_rng rng = cg_rng_new(5);
    cg_tensor *p = cg_randn(&rng, CG_SHAPE(300001));
    p->grad = cg_randn(&rng, CG_SHAPE(300001));
    int saved = cg_get_num_threads();
    cg_set_num_threads(1);
    double a = cg_grad_norm(1, &p);
    cg_set_num_threads(4);
    double b = cg_grad_norm(1, &p);
    cg_set_num_threads(saved);
    ck_assert(a == b && a > 0);
    double ref = 0;
    float *g = cg_data(p->grad);
    for (int64_t i = 0; i < 300001; i++)
        ref += (double)g[i] * g[i];
    ck_assert(fabs(a - sqrt(ref)) <= 1e-12 * a);
    double blocked = 0;
    for (int64_t b = 0; b < 300001; b += 16384) {
        double sb = 0;
        for (int64_t i = b; i < b + 16384 && i < 300001; i++)
            sb += (double)g[i] * g[i];
        blocked += sb;
    }
    ck_assert(a == sqrt(blocked));
    cg_release(p);
}
END_TEST

/* The order of blocks (above) holds over several tensors, whichever blocks
 * are summed side by side: each tensor's blocks from 0 in order, the
 * tensors in order; sizes of no, one and several blocks, with parts, and
 * a tensor without a gradient; 1 and 2 threads. */
START_TEST(clip_norm_blocks_across_tensors)
{
    const int64_t sizes[] = {5, 16384, 0, 16385, 70000, 7, 300001, 33000, 1};
    enum { NT = sizeof sizes / sizeof sizes[0] };
    cg_rng rng = cg_rng_new(9);
    cg_tensor *p[NT];
    double want = 0;
    for (int t = 0; t < NT; t++) {
        p[t] = cg_randn(&rng, CG_SHAPE(sizes[t]));
        if (t == 5)
            continue; /* no gradient */
        p[t]->grad = cg_randn(&rng, CG_SHAPE(sizes[t]));
        const float *g = cg_data(p[t]->grad);
        double st = 0;
        for (int64_t b = 0; b < sizes[t] || b == 0; b += 16384) {
            double sb = 0;
            for (int64_t i = b; i < b + 16384 && i < sizes[t]; i++)
                sb += (double)g[i] * g[i];
            st += sb;
        }
        want += st;
    }
    for (int th = 1; th <= 2; th++) {
        cg_set_num_threads(th);
        ck_assert(cg_grad_norm(NT, p) == sqrt(want));
    }
    cg_set_num_threads(0);
    for (int t = 0; t < NT; t++)
        cg_release(p[t]);
}
END_TEST

/* Gradients of 3e38 are finite floats, their norm 4.2e38 (summed in
 * double) is past FLT_MAX: the factor is max_norm / total (a float of
 * 2.4e-39), not 0. It was 1 / (float)total = 1 / inf = 0, which wiped
 * every gradient while a finite norm was returned; both forms. */
static void clip_past_float_max(bool through_optim)
{
    cg_tensor *p = cg_requires_grad(cg_zeros(CG_SHAPE(2)), true);
    p->grad = cg_from_data(CG_SHAPE(2), (const float[]){3e38f, 3e38f});
    const double want = sqrt(2.0 * (double)3e38f * (double)3e38f);
    cg_optim_config cfg = cg_sgd_default(0.1);
    cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"p", p, 0});
    ck_assert_ptr_nonnull(o);
    if (through_optim)
        ck_assert(cg_optim_clip_grads_by(o, want, 1.0));
    else
        ck_assert(cg_clip_grad_norm(1, &p, 1.0) == want);
    float g[2];
    ck_assert(cg_copy_to(p->grad, g));
    ck_assert_msg(fabsf(g[0] - (float)M_SQRT1_2) < 1e-6f && g[1] == g[0], "%g %g", (double)g[0],
                  (double)g[1]);
    cg_optim_free(o);
    cg_release(p);
}

START_TEST(clip_norm_past_float_max)
{
    clip_past_float_max(false);
    clip_past_float_max(true);
}
END_TEST

/* Gradients of norm 4.8e-6 clipped at 1e-6: torch's factor is max_norm /
 * (total + 1e-6), a fifth below max_norm / total here (the other cases'
 * norms of about 5 hide the 1e-6 under the tolerance). */
/* PyTorch's factor is max_norm * (1 / (total + 1e-6)) in float32 (a
 * number divided by a tensor is its reciprocal times the number), which
 * differs in its last bit from max_norm / (total + 1e-6) for these: the
 * clipped gradient is torch.nn.utils.clip_grad_norm_'s (1.13), exactly,
 * through each of the three clipping calls. */
START_TEST(clip_factor_as_torch)
{
    const float g = 3.967585563659668f, max_norm = 0.8095858097076416f;
    const float expect = 0.8095855712890625f; /* torch; max_norm / denom gives 0.80958563 */
    for (int k = 0; k < 3; k++) {
        cg_tensor *p = cg_zeros(CG_SHAPE(1));
        cg_requires_grad(p, true);
        p->grad = cg_full(CG_SHAPE(1), g);
        cg_optim_config cfg = cg_sgd_default(0.1);
        cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"p", p, 0});
        ck_assert_ptr_nonnull(o);
        double total = k == 0   ? cg_clip_grad_norm(1, &p, max_norm)
                       : k == 1 ? cg_optim_clip_grad_norm(o, max_norm)
                                : (cg_optim_clip_grads_by(o, g, max_norm) ? g : -1);
        ck_assert(total == g);
        ck_assert_msg(cg_data(p->grad)[0] == expect, "call %d: %.9g", k, cg_data(p->grad)[0]);
        cg_optim_free(o);
        cg_release(p);
    }
}
END_TEST

START_TEST(clip_tiny_norm)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    for (int j = 0; j < OPT_NPARAMS; j++) {
        if (!OPT_HAS_GRAD[0][j])
            continue;
        float g[OPT_N];
        int64_t n = cg_numel(ps[j]);
        for (int64_t e = 0; e < n; e++)
            g[e] = OPT_G[0][offset_of(j) + e] * OPT_CLIP_TINY_SCALE;
        set_grad(ps[j], g);
    }
    double total = cg_clip_grad_norm(OPT_NPARAMS, ps, 1e-6);
    ck_assert_msg(fabs(total - OPT_CLIP_TINY_TOTAL) <= 1e-6 * OPT_CLIP_TINY_TOTAL,
                  "total %.9g, torch %.9g", total, OPT_CLIP_TINY_TOTAL);
    float got[OPT_N] = {0};
    for (int j = 0; j < OPT_NPARAMS; j++)
        if (ps[j]->grad)
            ck_assert(cg_copy_to(ps[j]->grad, got + offset_of(j)));
    CG_ASSERT_CLOSE(got, OPT_CLIP_TINY_GRADS, OPT_N, 1e-13, 1e-6);
    release_params(ps);
}
END_TEST

/* A parameter big enough for the OpenMP path: same bits for 1 and 4 threads. */
START_TEST(step_thread_independent)
{
    float *out[2];
    int saved = cg_get_num_threads();
    for (int r = 0; r < 2; r++) {
        cg_set_num_threads(r == 0 ? 1 : 4);
        cg_rng rng = cg_rng_new(11);
        cg_tensor *p = cg_randn(&rng, CG_SHAPE(200, 301));
        cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
        cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"p", p, 0.1});
        for (int k = 0; k < 3; k++) {
            cg_zero_grad(p);
            p->grad = cg_randn(&rng, CG_SHAPE(200, 301));
            ck_assert(cg_optim_step(o));
        }
        out[r] = cg_test_values(p);
        cg_optim_free(o);
        cg_release(p);
    }
    cg_set_num_threads(saved);
    ck_assert(memcmp(out[0], out[1], 200 * 301 * sizeof(float)) == 0);
    free(out[0]);
    free(out[1]);
}
END_TEST

/* Parameters longer than one chunk of the update (16,384 elements), one
 * starting inside a chunk: every element is updated once, on one thread
 * as on several (SGD: p - lr * g, exact here). */
START_TEST(step_across_chunks)
{
    int saved = cg_get_num_threads();
    for (int r = 0; r < 2; r++) {
        cg_set_num_threads(r == 0 ? 1 : 2);
        cg_tensor *a = cg_zeros(CG_SHAPE(10000)), *b = cg_zeros(CG_SHAPE(30000));
        cg_requires_grad(a, true);
        cg_requires_grad(b, true);
        cg_optim_config cfg = cg_sgd_default(0.5);
        cg_optim *o = cg_optim_new(&cfg, 2, (cg_optim_param[]){{"a", a, 0}, {"b", b, 0}});
        ck_assert_ptr_nonnull(o);
        a->grad = cg_full(CG_SHAPE(10000), 1.0f);
        b->grad = cg_full(CG_SHAPE(30000), 2.0f);
        ck_assert(cg_optim_step(o));
        for (int64_t e = 0; e < 10000; e++)
            ck_assert_msg(cg_data(a)[e] == -0.5f, "threads %d: a[%lld] = %g", r + 1, (long long)e,
                          cg_data(a)[e]);
        for (int64_t e = 0; e < 30000; e++)
            ck_assert_msg(cg_data(b)[e] == -1.0f, "threads %d: b[%lld] = %g", r + 1, (long long)e,
                          cg_data(b)[e]);
        cg_optim_free(o);
        cg_release_all(2, a, b);
    }
    cg_set_num_threads(saved);
}
END_TEST

/* ---------------------------------------------------- NaN/Inf check */

START_TEST(nonfinite_grads_named)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_adam_config(1e-3, 0.9, 0.98, 1e-9);
    cg_optim *o = make_optim(&cfg, ps);
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(ps[j], OPT_HAS_GRAD[0][j] ? OPT_G[0] + offset_of(j) : NULL);
    int bad = 7;
    ck_assert(cg_optim_grads_finite(o, &bad));
    ck_assert_int_eq(bad, -1);
    ck_assert_int_eq(cg_first_nonfinite_grad(OPT_NPARAMS, ps, NULL), -1);

    cg_data(ps[2]->grad)[5] = NAN;
    ck_assert(!cg_optim_grads_finite(o, &bad));
    ck_assert_int_eq(bad, 2);
    ck_assert_msg(strstr(cg_last_error(), "'c' has nan at element 5"), "%s", cg_last_error());
    int64_t el = -1;
    ck_assert_int_eq(cg_first_nonfinite_grad(OPT_NPARAMS, ps, &el), 2);
    ck_assert_int_eq(el, 5);
    /* clipping returns the non-finite norm and leaves the gradients alone */
    float w0 = cg_data(ps[0]->grad)[0];
    ck_assert(isnan(cg_optim_clip_grad_norm(o, 1.0)));
    ck_assert(cg_data(ps[0]->grad)[0] == w0);

    cg_data(ps[2]->grad)[5] = 1;
    cg_data(ps[1]->grad)[3] = -INFINITY;
    ck_assert(!cg_optim_grads_finite(o, &bad));
    ck_assert_int_eq(bad, 1);
    ck_assert_msg(strstr(cg_last_error(), "'b' has -inf at element 3"), "%s", cg_last_error());
    /* an infinite norm too: no factor of 0 wipes the finite gradients or
     * turns the -inf into a NaN the check would then name instead */
    ck_assert(isinf(cg_optim_clip_grad_norm(o, 1.0)));
    ck_assert(cg_data(ps[0]->grad)[0] == w0);
    ck_assert(cg_data(ps[1]->grad)[3] == -INFINITY);
    ck_assert(!cg_optim_grads_finite(o, &bad));
    ck_assert_msg(strstr(cg_last_error(), "'b' has -inf at element 3"), "%s", cg_last_error());
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* ------------------------------------------------------ save / load */

/* N steps straight == N/2 steps, save params + state, a new optimizer over
 * the reloaded params loads the state, N/2 steps: bit-identical. */
static void resume_case(cg_optim_config cfg, const double *lrs)
{
    cg_tensor *a[OPT_NPARAMS], *b[OPT_NPARAMS];
    make_params(a);
    cg_optim *oa = make_optim(&cfg, a);
    for (int k = 0; k < OPT_NSTEPS; k++)
        do_step(oa, a, k, lrs[k]);

    make_params(b);
    cg_optim *ob = make_optim(&cfg, b);
    for (int k = 0; k < OPT_NSTEPS / 2; k++)
        do_step(ob, b, k, lrs[k]);
    cg_st_writer *w = cg_st_writer_new();
    for (int j = 0; j < OPT_NPARAMS; j++)
        ck_assert(cg_st_add_f32(w, OPT_NAMES[j], b[j]));
    ck_assert_msg(cg_optim_save(ob, w, NULL), "%s", cg_last_error());
    ck_assert_msg(cg_st_writer_save(w, in_dir("ckpt.safetensors")), "%s", cg_last_error());
    cg_st_writer_free(w);
    cg_optim_free(ob);
    release_params(b);

    cg_st_file *f = cg_st_open(in_dir("ckpt.safetensors"));
    ck_assert_msg(f != NULL, "%s", cg_last_error());
    for (int j = 0; j < OPT_NPARAMS; j++) {
        b[j] = cg_st_get_f32(f, OPT_NAMES[j]);
        ck_assert_ptr_nonnull(b[j]);
        cg_requires_grad(b[j], true);
    }
    cg_optim_config other = cfg;
    other.lr = 123; /* restored from the file */
    ob = make_optim(&other, b);
    ck_assert_msg(cg_optim_load(ob, f, "optim"), "%s", cg_last_error());
    cg_st_close(f);
    ck_assert(cg_optim_lr(ob) == lrs[OPT_NSTEPS / 2 - 1]);
    ck_assert_int_eq(cg_optim_steps(ob), OPT_NSTEPS / 2);
    ck_assert_int_eq(cg_optim_param_steps(ob, 2), OPT_NSTEPS / 2 - 1);
    for (int k = OPT_NSTEPS / 2; k < OPT_NSTEPS; k++)
        do_step(ob, b, k, lrs[k]);

    float va[OPT_N], vb[OPT_N];
    gather(a, va);
    gather(b, vb);
    ck_assert(memcmp(va, vb, sizeof va) == 0);
    for (int j = 0; j < OPT_NPARAMS; j++) {
        ck_assert_int_eq(cg_optim_param_steps(oa, j), cg_optim_param_steps(ob, j));
        for (int s = 0; s < 2; s++) {
            const char *what =
                s == 0 ? (cfg.type == CG_OPTIM_SGD ? "momentum_buffer" : "exp_avg") : "exp_avg_sq";
            if (s == 1 && cfg.type == CG_OPTIM_SGD)
                continue;
            float x[12], y[12];
            ck_assert(cg_copy_to(cg_optim_state(oa, j, what), x));
            ck_assert(cg_copy_to(cg_optim_state(ob, j, what), y));
            ck_assert(memcmp(x, y, (size_t)cg_numel(a[j]) * sizeof(float)) == 0);
        }
    }
    ck_assert_int_eq(cg_optim_steps(ob), OPT_NSTEPS);
    cg_optim_free(oa);
    cg_optim_free(ob);
    release_params(a);
    release_params(b);
}

START_TEST(resume_sgd) { resume_case(cg_sgd_config(0.1, 0.9, true), OPT_LR_SGD); }
END_TEST

START_TEST(resume_adam) { resume_case(cg_adam_config(1e-2, 0.9, 0.98, 1e-9), OPT_LR_ADAM); }
END_TEST

START_TEST(resume_adamw) { resume_case(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW); }
END_TEST

/* A file with AdamW state for the fixture params, after two steps. */
static void write_state(const char *path, cg_optim_config cfg)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim *o = make_optim(&cfg, ps);
    do_step(o, ps, 0, 1e-2);
    do_step(o, ps, 1, 1e-2);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_optim_save(o, w, "opt"));
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    cg_optim_free(o);
    release_params(ps);
}

static void assert_error_has(const char *needle)
{
    ck_assert_msg(strstr(cg_last_error(), needle) != NULL, "error '%s' lacks '%s'", cg_last_error(),
                  needle);
}

/* f's tensors into w: element `at` of F32 tensor `name` set to v (name
 * may be NULL), tensor `drop` left out (may be NULL). */
static void copy_tensors(const cg_st_file *f, cg_st_writer *w, const char *name, int64_t at,
                         float v, const char *drop)
{
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *n = cg_st_name(f, i);
        if (drop && strcmp(n, drop) == 0)
            continue;
        cg_st_dtype dt;
        ck_assert(cg_st_info(f, n, &dt, NULL, NULL));
        if (dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, n);
            if (name && strcmp(n, name) == 0)
                cg_data(t)[at] = v;
            ck_assert(cg_st_add_f32(w, n, t));
            cg_release(t);
        } else {
            cg_tensor *iv = cg_st_get(f, n);
            ck_assert(cg_st_add(w, n, iv));
            cg_release(iv);
        }
    }
}

/* f's metadata into w, key (may be NULL) set to value. */
static void copy_metadata(const cg_st_file *f, cg_st_writer *w, const char *key, const char *value)
{
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        bool set = key && strcmp(k, key) == 0;
        ck_assert(cg_st_set_metadata(w, k, set ? value : cg_st_metadata(f, k)));
    }
}

/* A copy of path with element `at` of F32 tensor `name` set to v (name may
 * be NULL) and without tensor `drop` (may be NULL). */
static void write_edited(const char *path, const char *out, const char *name, int64_t at, float v,
                         const char *drop)
{
    cg_st_file *f = cg_st_open(path);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(f && w);
    copy_tensors(f, w, name, at, v, drop);
    copy_metadata(f, w, NULL, NULL);
    cg_st_close(f);
    ck_assert(cg_st_writer_save(w, out));
    cg_st_writer_free(w);
}

/* A copy of path with the I64 step count `name` set to step (name may be
 * NULL) and metadata key (may be NULL) set to value. */
static void write_steps(const char *path, const char *out, const char *name, int64_t step,
                        const char *key, const char *value)
{
    cg_st_file *f = cg_st_open(path);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(f && w);
    copy_tensors(f, w, NULL, 0, 0, name);
    cg_tensor *t = name ? cg_scalar_i64(step) : NULL;
    ck_assert(!name || cg_st_add(w, name, t));
    cg_release(t);
    copy_metadata(f, w, key, value);
    cg_st_close(f);
    ck_assert(cg_st_writer_save(w, out));
    cg_st_writer_free(w);
}

/* A host program that set a locale with a decimal comma (setlocale(LC_ALL,
 * "") in Germany) wrote "0,01" into the state's metadata, which a program
 * in the "C" locale (charlm --resume) refused, and the other way round: the
 * numbers are written and read with a decimal point whatever the locale. */
START_TEST(state_locale_independent)
{
    if (!cg_test_comma_locale())
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s", in_dir("de.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(cg_st_metadata(f, "opt.lr"), "0.01");
    ck_assert_str_eq(cg_st_metadata(f, "opt.beta2"), "0.98999999999999999");
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_adamw_config(5e-3, 0.8, 0.9, 1e-7);
    for (int pass = 0; pass < 2; pass++) { /* read under the comma locale, then under "C" */
        if (pass == 1)
            cg_test_c_locale();
        cg_optim *o = make_optim(&cfg, ps);
        ck_assert_msg(cg_optim_load(o, f, "opt"), "%s", cg_last_error());
        cg_optim_config got = cg_optim_get_config(o);
        ck_assert(got.lr == 1e-2 && got.beta1 == 0.9 && got.beta2 == 0.99 && got.eps == 1e-8);
        cg_optim_free(o);
    }
    cg_st_close(f);
    release_params(ps);
}
END_TEST

START_TEST(load_errors)
{
    char path[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);

    /* w with the transposed shape: names the entry and both shapes; nothing changes */
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_tensor *wt = cg_zeros(CG_SHAPE(4, 3));
    cg_optim_param spec[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], j == 0 ? wt : ps[j], OPT_WD[j]};
    cg_optim_config cfg = cg_adamw_config(5e-3, 0.8, 0.9, 1e-7);
    cg_optim *o = cg_optim_new(&cfg, OPT_NPARAMS, spec);
    ck_assert_ptr_nonnull(o);
    cg_clear_error();
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.exp_avg' is F32 [3, 4], but parameter 'w' is F32 [4, 3]");
    ck_assert_int_eq(cg_optim_steps(o), 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 1), 0);
    ck_assert(cg_optim_lr(o) == 5e-3 && cg_optim_get_config(o).beta1 == 0.8);
    cg_optim_free(o);
    cg_release(wt);
    /* w wider: the shapes differ in the last dim alone */
    wt = cg_zeros(CG_SHAPE(3, 5));
    spec[0].tensor = wt;
    o = cg_optim_new(&cfg, OPT_NPARAMS, spec);
    ck_assert(o && !cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.exp_avg' is F32 [3, 4], but parameter 'w' is F32 [3, 5]");
    ck_assert_int_eq(cg_optim_steps(o), 0);
    cg_optim_free(o);

    /* a different optimizer type */
    cg_optim_config adam = cg_adam_config(1e-3, 0.9, 0.99, 1e-8);
    o = make_optim(&adam, ps);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("holds adamw state, the optimizer is adam");
    cg_optim_free(o);

    /* wrong prefix */
    cg_optim_config aw = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    o = make_optim(&aw, ps);
    ck_assert(!cg_optim_load(o, f, "optim"));
    assert_error_has("no optimizer state under 'optim'");
    ck_assert(cg_optim_load(o, f, "opt"));
    ck_assert_int_eq(cg_optim_steps(o), 2);
    cg_optim_free(o);

    /* a parameter the file does not know */
    spec[0] = (cg_optim_param){"w2", ps[0], 0.1};
    for (int j = 1; j < OPT_NPARAMS; j++)
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
    o = cg_optim_new(&aw, OPT_NPARAMS, spec);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.");
    cg_optim_free(o);

    /* the file holds state for a parameter the optimizer lacks */
    o = cg_optim_new(&aw, OPT_NPARAMS - 1, spec + 1);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.step' is not the adamw state of any parameter");
    cg_optim_free(o);
    cg_st_close(f);

    /* an SGD momentum buffer in an AdamW file: not AdamW state */
    {
        char odd[4096]; /* in_dir's buffer is reused */
        snprintf(odd, sizeof odd, "%s", in_dir("odd.safetensors"));
        cg_st_file *g = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(g && w);
        copy_tensors(g, w, NULL, 0, 0, NULL);
        copy_metadata(g, w, NULL, NULL);
        cg_tensor *mb = cg_zeros(CG_SHAPE(3, 4));
        ck_assert(cg_st_add_f32(w, "opt.w.momentum_buffer", mb));
        cg_release(mb);
        ck_assert(cg_st_writer_save(w, odd));
        cg_st_writer_free(w);
        cg_st_close(g);
        g = cg_st_open(odd);
        o = make_optim(&aw, ps);
        ck_assert(!cg_optim_load(o, g, "opt"));
        assert_error_has("'opt.w.momentum_buffer' is not the adamw state of any parameter");
        ck_assert_int_eq(cg_optim_steps(o), 0);
        cg_optim_free(o);
        cg_st_close(g);
    }

    /* a parameter missing from the file */
    cg_tensor *extra = cg_zeros(CG_SHAPE(2));
    cg_optim_param spec5[OPT_NPARAMS + 1];
    for (int j = 0; j < OPT_NPARAMS; j++)
        spec5[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
    spec5[OPT_NPARAMS] = (cg_optim_param){"e", extra, 0};
    o = cg_optim_new(&aw, OPT_NPARAMS + 1, spec5);
    f = cg_st_open(path);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("has no 'opt.e.step' (no state for parameter 'e')");
    cg_optim_free(o);
    cg_st_close(f);

    /* a truncated state: exp_avg_sq of c missing */
    char cut[4096]; /* in_dir's buffer is reused */
    snprintf(cut, sizeof cut, "%s", in_dir("cut.safetensors"));
    write_edited(path, cut, NULL, 0, 0, "opt.c.exp_avg_sq");
    f = cg_st_open(in_dir("cut.safetensors"));
    o = make_optim(&aw, ps);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("has no 'opt.c.exp_avg_sq'");
    ck_assert_int_eq(cg_optim_steps(o), 0);
    cg_optim_free(o);
    cg_st_close(f);

    cg_release_all(2, wt, extra);
    release_params(ps);
}
END_TEST

/* Issue 25: a negative exp_avg_sq was reported at the next step as a
 * non-finite gradient of another tensor. Damaged values are refused at
 * load, naming the entry, and nothing changes. */
START_TEST(load_damaged_values)
{
    char path[4096], bad[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(bad, sizeof bad, "%s", in_dir("bad.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    static const struct {
        const char *name;
        float v;
        const char *msg;
    } cases[] = {
        {"opt.c.exp_avg_sq", -1.0f, "'opt.c.exp_avg_sq' holds -1 at element 0"},
        {"opt.w.exp_avg_sq", INFINITY, "'opt.w.exp_avg_sq' holds inf at element 0"},
        {"opt.w.exp_avg", NAN, "'opt.w.exp_avg' holds nan at element 0"},
    };
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config aw = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        write_edited(path, bad, cases[k].name, 0, cases[k].v, NULL);
        cg_st_file *f = cg_st_open(bad);
        cg_optim *o = make_optim(&aw, ps);
        cg_clear_error();
        ck_assert(!cg_optim_load(o, f, "opt"));
        assert_error_has(cases[k].msg);
        ck_assert_int_eq(cg_optim_steps(o), 0);
        cg_optim_free(o);
        cg_st_close(f);
    }
    release_params(ps);
}
END_TEST

/* A step count that no run reaches (INT64_MAX: the next step overflowed
 * it, and AdamW's bias correction at step -2^63 made every weight NaN) is
 * refused at load like any damaged value, per parameter and overall;
 * 2^53, the last count a double holds exactly, loads and steps. Damaged
 * metadata and step entries of other kinds are refused likewise, each
 * named, the optimizer unchanged. */
START_TEST(load_damaged_steps_and_metadata)
{
    char path[4096], bad[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(bad, sizeof bad, "%s", in_dir("bad.safetensors"));
    write_state(path, cg_adamw_config(1e-2, 0.9, 0.99, 1e-8));
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config aw = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);
    cg_optim *o = make_optim(&aw, ps);
    write_steps(path, bad, "opt.w.step", INT64_MAX, NULL, NULL);
    cg_st_file *f = cg_st_open(bad);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.step' = 9223372036854775807 is not a step count");
    cg_st_close(f);
    write_steps(path, bad, NULL, 0, "opt.step", "9223372036854775807");
    f = cg_st_open(bad);
    ck_assert(!cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.step' = '9223372036854775807' is not a step count");
    cg_st_close(f);
    /* other damaged metadata and step entries, each named, nothing changed */
    static const struct {
        const char *key, *value, *msg;
    } meta[] = {
        {"opt.nesterov", "yes", "metadata 'opt.nesterov' = 'yes' is not true/false"},
        {"opt.eps", "1e-999", "metadata 'opt.eps' = '1e-999' is not a finite number"},
        {"opt.beta2", "0.99x", "metadata 'opt.beta2' = '0.99x' is not a finite number"},
    };
    for (size_t k = 0; k < sizeof meta / sizeof *meta; k++) {
        write_steps(path, bad, NULL, 0, meta[k].key, meta[k].value);
        f = cg_st_open(bad);
        ck_assert(f && !cg_optim_load(o, f, "opt"));
        assert_error_has(meta[k].msg);
        cg_st_close(f);
    }
    write_steps(path, bad, "opt.w.step", -1, NULL, NULL);
    f = cg_st_open(bad);
    ck_assert(f && !cg_optim_load(o, f, "opt"));
    assert_error_has("'opt.w.step' = -1 is not a step count (0 to 2^53)");
    cg_st_close(f);
    for (int kind = 0; kind < 2; kind++) { /* a float step, two steps */
        cg_st_file *g = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(g && w);
        copy_tensors(g, w, NULL, 0, 0, "opt.w.step");
        copy_metadata(g, w, NULL, NULL);
        cg_st_close(g);
        cg_tensor *t = kind ? cg_zeros_dtype(CG_I64, CG_SHAPE(2)) : cg_zeros(0, NULL);
        ck_assert(cg_st_add(w, "opt.w.step", t));
        cg_release(t);
        ck_assert(cg_st_writer_save(w, bad));
        cg_st_writer_free(w);
        g = cg_st_open(bad);
        ck_assert(g && !cg_optim_load(o, g, "opt"));
        assert_error_has(kind ? "'opt.w.step' is I64 [2], expected one I64"
                              : "'opt.w.step' is F32 [], expected one I64");
        cg_st_close(g);
    }
    cg_optim_config got = cg_optim_get_config(o);
    ck_assert(cg_optim_steps(o) == 0 && got.lr == 1e-3 && !got.nesterov && got.eps == 1e-8);
    write_steps(path, bad, "opt.w.step", INT64_C(1) << 53, NULL, NULL);
    f = cg_st_open(bad);
    ck_assert_msg(cg_optim_load(o, f, "opt"), "%s", cg_last_error());
    cg_st_close(f);
    do_step(o, ps, 2, 1e-2);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), (INT64_C(1) << 53) + 1);
    float w[12];
    ck_assert(cg_copy_to(ps[0], w));
    for (int i = 0; i < 12; i++)
        ck_assert(isfinite(w[i]));
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* SGD without momentum keeps no buffers; its state is the step counts. */
/* The saved hyperparameters come back exactly, as PyTorch's
 * load_state_dict restores its param_groups' floats: a rate or beta
 * rounded in the file (%.6g) changed a resumed step that does not set the
 * rate again (the other tests set it before every step). */
START_TEST(state_config_exact)
{
    const cg_optim_config cfgs[2] = {
        cg_adamw_config(1e-2 / 3, 0.9 + 0x1p-40, 0.999 - 0x1p-30, 1e-8 / 3),
        cg_sgd_config(0.1 / 3, 0.9 - 0x1p-40, true)};
    for (int k = 0; k < 2; k++) {
        cg_tensor *ps[OPT_NPARAMS];
        make_params(ps);
        cg_optim *o = make_optim(&cfgs[k], ps);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(cg_optim_save(o, w, "opt") && cg_st_writer_save(w, in_dir("cfg.safetensors")));
        cg_st_writer_free(w);
        cg_optim_config other = k == 0 ? cg_adamw_default(1.0) : cg_sgd_config(1.0, 0.5, false);
        cg_optim *r = make_optim(&other, ps);
        cg_st_file *f = cg_st_open(in_dir("cfg.safetensors"));
        ck_assert_msg(f && cg_optim_load(r, f, "opt"), "%s", cg_last_error());
        cg_st_close(f);
        cg_optim_config a = cg_optim_get_config(o), b = cg_optim_get_config(r);
        ck_assert_msg(a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
                          a.momentum == b.momentum && a.nesterov == b.nesterov,
                      "%d: lr %.17g/%.17g beta1 %.17g/%.17g beta2 %.17g/%.17g eps %.17g/%.17g "
                      "momentum %.17g/%.17g",
                      k, a.lr, b.lr, a.beta1, b.beta1, a.beta2, b.beta2, a.eps, b.eps, a.momentum,
                      b.momentum);
        cg_optim_free(r);
        cg_optim_free(o);
        release_params(ps);
    }
}
END_TEST

START_TEST(state_sgd_plain)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_sgd_config(0.1, 0, false);
    cg_optim *o = make_optim(&cfg, ps);
    do_step(o, ps, 0, 0.1);
    cg_clear_error();
    ck_assert_ptr_null(cg_optim_state(o, 0, "momentum_buffer"));
    assert_error_has("no buffers");
    ck_assert_ptr_null(cg_optim_state(o, 9, "exp_avg"));
    assert_error_has("no parameter 9");
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_optim_save(o, w, NULL));
    ck_assert(cg_st_writer_save(w, in_dir("s.safetensors")));
    cg_st_writer_free(w);
    cg_st_file *f = cg_st_open(in_dir("s.safetensors"));
    ck_assert_int_eq(cg_st_count(f), OPT_NPARAMS);
    ck_assert_str_eq(cg_st_metadata(f, "optim.type"), "sgd");
    ck_assert_str_eq(cg_st_metadata(f, "optim.step"), "1");
    cg_optim *o2 = make_optim(&cfg, ps);
    ck_assert(cg_optim_load(o2, f, NULL));
    ck_assert_int_eq(cg_optim_param_steps(o2, 0), 1);
    ck_assert_int_eq(cg_optim_param_steps(o2, 3), 0);
    cg_st_close(f);
    cg_optim_free(o);
    cg_optim_free(o2);
    release_params(ps);
}
END_TEST

/* ----------------------------------------------------------- errors */

START_TEST(build_errors)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_adamw_config(1e-3, 0.9, 0.99, 1e-8);

    cg_tensor *t = cg_view_transpose(ps[0], 0, 1);
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 1, &(cg_optim_param){"wt", t, 0}), "'wt' is not contiguous");
    cg_release(t);

    cg_tensor *sum = cg_add(ps[0], ps[0]);
    ck_assert_ptr_nonnull(sum);
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 1, &(cg_optim_param){"s", sum, 0}), "'s' is not a leaf");
    cg_release(sum);

    cg_optim_param two[2] = {{"w", ps[0], 0}, {"w", ps[1], 0}};
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 2, two), "'w' appears twice");
    two[1] = (cg_optim_param){"w_again", ps[0], 0};
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 2, two), "share memory");
    cg_tensor *row = cg_view_select(ps[0], 0, 1); /* a contiguous row of w */
    two[1] = (cg_optim_param){"row", row, 0};
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 2, two), "share memory");
    cg_release(row);
    /* rows 0 and 1 of w touch but do not overlap (parameters packed in one
     * buffer): two parameters, each stepped as its own */
    cg_tensor *r0 = cg_view_select(ps[0], 0, 0), *r1 = cg_view_select(ps[0], 0, 1);
    cg_optim_param rows[2] = {{"r0", r0, 0}, {"r1", r1, 0}};
    cg_optim_config sgd = cg_sgd_default(0.5);
    cg_optim *packed = cg_optim_new(&sgd, 2, rows);
    ck_assert_msg(packed != NULL, "%s", cg_last_error());
    const float ones[4] = {1, 1, 1, 1};
    set_grad(r0, ones);
    set_grad(r1, ones);
    ck_assert(cg_optim_step(packed));
    for (int e = 0; e < 8; e++) /* w[e] - 0.5 * 1, computed in float as the update does */
        ck_assert(cg_data(ps[0])[e] == OPT_P0[e] + -0.5f * 1.0f);
    ck_assert(cg_data(ps[0])[8] == OPT_P0[8]);
    cg_optim_free(packed);
    cg_release_all(2, r0, r1);

    CG_ASSERT_FAILS(cg_optim_new(&cfg, 1, &(cg_optim_param){"", ps[0], 0}), "no name");
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 1, &(cg_optim_param){"x", NULL, 0}), "'x' is NULL");
    CG_ASSERT_FAILS(cg_optim_new(&cfg, 1, &(cg_optim_param){"x", ps[0], -1}), "weight decay");
    CG_ASSERT_FAILS(cg_optim_new(NULL, 0, NULL), "config is NULL");

    cg_optim_config bad = cg_adam_config(1e-3, 1.0, 0.99, 1e-8);
    CG_ASSERT_FAILS(cg_optim_new(&bad, 1, &(cg_optim_param){"w", ps[0], 0}), "betas");
    bad = cg_sgd_config(0.1, 0, true);
    CG_ASSERT_FAILS(cg_optim_new(&bad, 1, &(cg_optim_param){"w", ps[0], 0}), "Nesterov");
    bad = cg_sgd_config(-1, 0, false);
    CG_ASSERT_FAILS(cg_optim_new(&bad, 1, &(cg_optim_param){"w", ps[0], 0}), "learning rate");
    bad.type = (cg_optim_type)7;
    CG_ASSERT_FAILS(cg_optim_new(&bad, 1, &(cg_optim_param){"w", ps[0], 0}), "unknown optimizer");

    /* zero parameters is allowed */
    cg_optim *o = cg_optim_new(&cfg, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert(cg_optim_step(o));
    ck_assert(cg_optim_clip_grad_norm(o, 1.0) == 0.0);
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* A gradient of the wrong shape fails the step before anything moves. */
START_TEST(step_errors)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    cg_optim *o = make_optim(&cfg, ps);
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(ps[j], OPT_HAS_GRAD[0][j] ? OPT_G[0] + offset_of(j) : NULL);
    cg_release(ps[2]->grad);
    ps[2]->grad = cg_zeros(CG_SHAPE(3, 2));
    cg_clear_error();
    ck_assert(!cg_optim_step(o));
    assert_error_has("gradient of 'c' has shape [3, 2], the parameter [2, 3]");
    float got[OPT_N];
    gather(ps, got);
    ck_assert(memcmp(got, OPT_P0, sizeof got) == 0);
    ck_assert_int_eq(cg_optim_steps(o), 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), 0);

    ck_assert(cg_clip_grad_norm(OPT_NPARAMS, ps, 1.0) < 0);
    assert_error_has("gradient of parameter 2 has shape [3, 2]");
    ck_assert(cg_clip_grad_norm(OPT_NPARAMS, ps, -1.0) < 0);
    assert_error_has("max_norm");
    ck_assert(!cg_optim_step(NULL));
    /* no optimizer is not "every gradient finite" */
    int bad = 7;
    cg_clear_error();
    ck_assert(!cg_optim_grads_finite(NULL, &bad));
    ck_assert_int_eq(bad, -1);
    assert_error_has("optim_grads_finite: optimizer is NULL");
    ck_assert(!cg_optim_save(NULL, NULL, NULL));
    ck_assert(!cg_optim_load(o, NULL, NULL));
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

START_TEST(accessors)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim_config cfg = cg_sgd_config(0.1, 0.9, false);
    cg_optim *o = make_optim(&cfg, ps);
    ck_assert_int_eq(cg_optim_count(o), OPT_NPARAMS);
    ck_assert_str_eq(cg_optim_param_name(o, 2), "c");
    ck_assert_ptr_eq(cg_optim_param_tensor(o, 1), ps[1]);
    ck_assert(cg_optim_param_weight_decay(o, 0) == 0.1);
    ck_assert_int_eq(cg_optim_find(o, "d"), 3);
    ck_assert_int_eq(cg_optim_find(o, "zz"), -1);
    ck_assert_ptr_nonnull(cg_optim_state(o, 0, "momentum_buffer"));
    ck_assert_ptr_null(cg_optim_state(o, 0, "exp_avg"));
    ck_assert_str_eq(cg_optim_type_name(CG_OPTIM_ADAMW), "adamw");
    ck_assert(cg_optim_set_lr(o, 0.25));
    ck_assert(cg_optim_lr(o) == 0.25 && cg_optim_get_config(o).lr == 0.25);
    /* a schedule's NaN or inf (cg_lr_noam with d_model 0 gave inf) is refused */
    cg_clear_error();
    ck_assert(isnan(cg_lr_noam(1, 0, 10, 1.0)));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "d_model"));
    const double bad[3] = {NAN, INFINITY, -1e-3};
    for (int i = 0; i < 3; i++) {
        cg_clear_error();
        ck_assert(!cg_optim_set_lr(o, bad[i]));
        ck_assert(cg_optim_lr(o) == 0.25);
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "learning rate"));
    }
    /* the optimizer keeps its parameters alive */
    release_params(ps);
    ck_assert_int_eq(cg_optim_param_tensor(o, 0)->refcount, 1);
    cg_optim_free(o);
}
END_TEST

/* An optimizer from a module in one call, with PyTorch's defaults. */
START_TEST(from_module)
{
    cg_optim_config c = cg_adamw_default(3e-4);
    ck_assert_int_eq(c.type, CG_OPTIM_ADAMW);
    ck_assert(c.lr == 3e-4 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8);
    c = cg_sgd_default(0.1);
    ck_assert(c.type == CG_OPTIM_SGD && c.momentum == 0.0 && !c.nesterov);

    cg_rng r = cg_rng_new(4);
    cg_module *root = cg_module_new("Net");
    cg_linear *a = cg_linear_new(3, 4, true, &r);
    cg_module_add_child(root, "a", a);
    cg_module_add_child(root, "b", a); /* shared: its parameters once */
    cg_module_add_child(root, "ln", cg_layernorm_new(4));
    cg_optim *o = cg_adamw_from_module(root, 1e-3);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(cg_optim_count(o), 4);
    ck_assert_str_eq(cg_optim_param_name(o, 0), "a.weight");
    ck_assert_str_eq(cg_optim_param_name(o, 3), "ln.bias");
    for (int i = 0; i < 4; i++)
        ck_assert(cg_optim_param_weight_decay(o, i) == 0.01); /* torch.optim.AdamW's default */
    cg_optim_config got = cg_optim_get_config(o);
    ck_assert(got.type == CG_OPTIM_ADAMW && got.lr == 1e-3 && got.beta2 == 0.999);
    cg_optim_free(o);
    c = cg_adam_default(1e-3);
    o = cg_optim_from_module(&c, root, 0.1, CG_DECAY_MATRICES);
    ck_assert(cg_optim_param_weight_decay(o, 0) == 0.1); /* a.weight */
    ck_assert(cg_optim_param_weight_decay(o, 1) == 0.0); /* a.bias */
    ck_assert(cg_optim_param_weight_decay(o, 2) == 0.0); /* ln.weight */
    cg_optim_free(o);
    o = cg_adam_from_module(root, 1e-3);
    ck_assert(cg_optim_param_weight_decay(o, 0) == 0.0);
    cg_optim_free(o);
    o = cg_sgd_from_module(root, 0.5);
    ck_assert_int_eq(cg_optim_get_config(o).type, CG_OPTIM_SGD);
    cg_optim_free(o);
    CG_ASSERT_FAILS(cg_optim_from_module(NULL, root, 0.0, CG_DECAY_ALL), "config is NULL");
    c.lr = -1;
    CG_ASSERT_FAILS(cg_optim_from_module(&c, root, 0.0, CG_DECAY_ALL), "learning rate -1");
    c.lr = 1e-3;
    CG_ASSERT_FAILS(cg_optim_from_module(&c, root, 0.1, (cg_decay_rule)7), "decay rule 7");
    ck_assert_ptr_null(cg_adamw_from_module(NULL, 1e-3));
    cg_module_free(root);
}
END_TEST

/* ------------------------------------------------------ sharded (ZeRO-1) */
#define NSHARD 3

/* Shard k's range of parameter j: thirds, except that shard 1 owns nothing
 * of "b" (shard 0 takes its first half, shard 2 the rest). */
static cg_optim_range shard_of(int k, int j)
{
    int64_t n = cg_numel_shape((int)OPT_SHAPES[j][0], &OPT_SHAPES[j][1]);
    if (j == 1)
        return k == 0   ? (cg_optim_range){0, n / 2}
               : k == 1 ? (cg_optim_range){n / 2, n / 2}
                        : (cg_optim_range){n / 2, n};
    return (cg_optim_range){n * k / NSHARD, n * (k + 1) / NSHARD};
}

static cg_optim *make_shard(const cg_optim_config *cfg, cg_tensor *ps[OPT_NPARAMS], int k)
{
    cg_optim_param spec[OPT_NPARAMS];
    cg_optim_range own[OPT_NPARAMS];
    for (int j = 0; j < OPT_NPARAMS; j++) {
        spec[j] = (cg_optim_param){OPT_NAMES[j], ps[j], OPT_WD[j]};
        own[j] = shard_of(k, j);
    }
    cg_optim *o = cg_optim_new_sharded(cfg, OPT_NPARAMS, spec, own);
    ck_assert_msg(o != NULL, "%s", cg_last_error());
    ck_assert(cg_optim_is_sharded(o));
    return o;
}

/* Every shard's own elements into every replica (what an all-gather does). */
static void share_owned(cg_tensor *s[NSHARD][OPT_NPARAMS])
{
    for (int j = 0; j < OPT_NPARAMS; j++)
        for (int k = 0; k < NSHARD; k++) {
            cg_optim_range r = shard_of(k, j);
            for (int m = 0; m < NSHARD; m++)
                if (m != k)
                    memcpy(cg_data(s[m][j]) + r.lo, cg_data(s[k][j]) + r.lo,
                           (size_t)(r.hi - r.lo) * sizeof(float));
        }
}

static void assert_same_state(cg_optim *a, cg_optim *b, cg_optim_config cfg)
{
    ck_assert_int_eq(cg_optim_steps(a), cg_optim_steps(b));
    for (int j = 0; j < OPT_NPARAMS; j++) {
        ck_assert_int_eq(cg_optim_param_steps(a, j), cg_optim_param_steps(b, j));
        for (int s = 0; s < 2; s++) {
            if (s == 1 && cfg.type == CG_OPTIM_SGD)
                continue;
            const char *what =
                s == 0 ? (cfg.type == CG_OPTIM_SGD ? "momentum_buffer" : "exp_avg") : "exp_avg_sq";
            float x[12], y[12];
            cg_tensor *ta = cg_optim_state(a, j, what), *tb = cg_optim_state(b, j, what);
            ck_assert_int_eq(cg_numel(ta), cg_numel(tb));
            ck_assert(cg_copy_to(ta, x) && cg_copy_to(tb, y));
            ck_assert(memcmp(x, y, (size_t)cg_numel(ta) * sizeof(float)) == 0);
        }
    }
}

/* NSHARD sharded optimizers, each on its own replica of the parameters,
 * with their owned elements shared after every step, equal one unsharded
 * optimizer bit for bit (parameters, then the state gathered with
 * cg_optim_copy_state); the state splits back and loads from the
 * unsharded file layout. */
static void sharded_case(cg_optim_config cfg, const double *lrs)
{
    cg_tensor *a[OPT_NPARAMS], *s[NSHARD][OPT_NPARAMS];
    make_params(a);
    cg_optim *oa = make_optim(&cfg, a), *os[NSHARD];
    int64_t bytes = 0;
    for (int k = 0; k < NSHARD; k++) {
        make_params(s[k]);
        os[k] = make_shard(&cfg, s[k], k);
        bytes += cg_optim_state_bytes(os[k]);
    }
    ck_assert_int_eq(bytes, cg_optim_state_bytes(oa));
    ck_assert_int_eq(cg_optim_state_bytes(oa), (cfg.type == CG_OPTIM_SGD ? 1 : 2) * OPT_N * 4);
    float va[OPT_N], vs[OPT_N];
    for (int step = 0; step < OPT_NSTEPS; step++) {
        do_step(oa, a, step, lrs[step]);
        for (int k = 0; k < NSHARD; k++)
            do_step(os[k], s[k], step, lrs[step]);
        share_owned(s);
        gather(a, va);
        for (int k = 0; k < NSHARD; k++) {
            gather(s[k], vs);
            ck_assert_msg(memcmp(va, vs, sizeof va) == 0, "step %d, shard %d differs", step, k);
        }
    }
    cg_tensor *f[OPT_NPARAMS];
    make_params(f);
    cg_optim *full = make_optim(&cfg, f);
    for (int k = 0; k < NSHARD; k++)
        ck_assert_msg(cg_optim_copy_state(full, os[k]), "%s", cg_last_error());
    assert_same_state(full, oa, cfg);
    cg_optim *back = make_optim(&cfg, f); /* each shard copies its own run only: any order */
    for (int k = NSHARD - 1; k >= 0; k--)
        ck_assert_msg(cg_optim_copy_state(back, os[k]), "%s", cg_last_error());
    assert_same_state(back, oa, cfg);
    cg_optim_free(back);

    /* a sharded optimizer does not save; the gathered one does, and a shard
     * loads its part of that file (and splits from an unsharded one) */
    cg_st_writer *w = cg_st_writer_new();
    CG_ASSERT_FAILS(cg_optim_save(os[0], w, "opt") ? (void *)1 : NULL, "shard");
    ck_assert(cg_optim_save(full, w, "opt"));
    ck_assert(cg_st_writer_save(w, in_dir("full.st")));
    cg_st_writer_free(w);
    cg_st_file *file = cg_st_open(in_dir("full.st"));
    ck_assert_ptr_nonnull(file);
    for (int k = 0; k < NSHARD; k++) {
        cg_tensor *q[OPT_NPARAMS];
        make_params(q);
        cg_optim *loaded = make_shard(&cfg, q, k), *split = make_shard(&cfg, q, k);
        ck_assert_msg(cg_optim_load(loaded, file, "opt"), "%s", cg_last_error());
        ck_assert(cg_optim_copy_state(split, oa));
        assert_same_state(loaded, split, cfg);
        assert_same_state(loaded, os[k], cfg);
        cg_optim_free(loaded);
        cg_optim_free(split);
        release_params(q);
    }
    cg_st_close(file);
    /* a damaged value is named by its element in the whole tensor, by the
     * shard whose run holds it (the others read theirs alone) */
    if (cfg.type != CG_OPTIM_SGD) {
        char full_path[4096];
        snprintf(full_path, sizeof full_path, "%s", in_dir("full.st"));
        const int64_t n = cg_numel_shape((int)OPT_SHAPES[0][0], &OPT_SHAPES[0][1]);
        write_edited(full_path, in_dir("damaged.st"), "opt.w.exp_avg", n - 1, NAN, NULL);
        file = cg_st_open(in_dir("damaged.st"));
        ck_assert_ptr_nonnull(file);
        char msg[96];
        snprintf(msg, sizeof msg, "'opt.w.exp_avg' holds nan at element %lld", (long long)(n - 1));
        for (int k = 0; k < NSHARD; k++) {
            cg_tensor *q[OPT_NPARAMS];
            make_params(q);
            cg_optim *loaded = make_shard(&cfg, q, k);
            cg_clear_error();
            const bool ok = cg_optim_load(loaded, file, "opt");
            ck_assert_msg(ok == (k < NSHARD - 1), "shard %d: %s", k, cg_last_error());
            if (!ok)
                assert_error_has(msg);
            cg_optim_free(loaded);
            release_params(q);
        }
        cg_st_close(file);
    }
    cg_optim_free(full);
    release_params(f);
    for (int k = 0; k < NSHARD; k++) {
        cg_optim_free(os[k]);
        release_params(s[k]);
    }
    cg_optim_free(oa);
    release_params(a);
}

START_TEST(sharded_adamw) { sharded_case(cg_adamw_config(1e-2, 0.9, 0.99, 1e-8), OPT_LR_ADAMW); }
END_TEST

START_TEST(sharded_adam_sgd)
{
    sharded_case(cg_adam_config(1e-2, 0.9, 0.98, 1e-9), OPT_LR_ADAM);
    sharded_case(cg_sgd_config(0.1, 0.9, true), OPT_LR_SGD);
}
END_TEST

/* The shards' sums of squares add up to the global one; clipping each
 * shard by the global norm gives its elements the unsharded clip's values;
 * the NaN check sees the owned elements only; bad ranges are refused; whole
 * ranges make a plain optimizer. */
/* Adam's moments stored BF16 or F16 (a checkpoint written by a tool that
 * keeps state in half precision) load widened to float32, as PyTorch's
 * load_state_dict casts state to its parameter's dtype: whole, and as a
 * shard's run of them; an integer moment is still refused. */
START_TEST(load_half_precision_moments)
{
    const cg_optim_config cfg = cg_adamw_config(1e-2, 0.9, 0.99, 1e-8);
    char path[4096], half[4096]; /* in_dir's buffer is reused */
    snprintf(path, sizeof path, "%s", in_dir("state.safetensors"));
    snprintf(half, sizeof half, "%s", in_dir("half.safetensors"));
    write_state(path, cfg);
    const cg_dtype dts[] = {CG_BF16, CG_F16, CG_I32};
    for (int d = 0; d < 3; d++) {
        /* the copy, its moments in dts[d]; want: them widened back */
        cg_st_file *f = cg_st_open(path);
        cg_st_writer *w = cg_st_writer_new();
        ck_assert(f && w);
        for (int i = 0; i < cg_st_count(f); i++) {
            const char *n = cg_st_name(f, i);
            cg_tensor *t = cg_st_get(f, n);
            cg_tensor *h = strstr(n, ".exp_avg") ? cg_to(t, dts[d]) : cg_retain(t);
            ck_assert(h && cg_st_add(w, n, h));
            cg_release_all(2, t, h);
        }
        copy_metadata(f, w, NULL, NULL);
        cg_st_close(f);
        ck_assert(cg_st_writer_save(w, half));
        cg_st_writer_free(w);
        f = cg_st_open(half);
        ck_assert_ptr_nonnull(f);
        cg_tensor *ps[OPT_NPARAMS];
        make_params(ps);
        cg_optim *o = make_optim(&cfg, ps);
        cg_clear_error();
        const bool ok = cg_optim_load(o, f, "opt");
        if (dts[d] == CG_I32) {
            ck_assert(!ok);
            assert_error_has("'opt.w.exp_avg' is I32 [3, 4], but parameter 'w' is F32 [3, 4]");
            ck_assert_int_eq(cg_optim_steps(o), 0);
        } else {
            ck_assert_msg(ok, "%s", cg_last_error());
            for (int j = 0; j < OPT_NPARAMS; j++)
                for (int s = 0; s < 2; s++) {
                    char key[64];
                    snprintf(key, sizeof key, "opt.%s.%s", OPT_NAMES[j],
                             s ? "exp_avg_sq" : "exp_avg");
                    cg_tensor *stored = cg_st_get(f, key), *wide = cg_to(stored, CG_F32);
                    cg_tensor *got = cg_optim_state(o, j, s ? "exp_avg_sq" : "exp_avg");
                    ck_assert_int_eq(got->dtype, CG_F32);
                    ck_assert_int_eq(cg_numel(got), cg_numel(wide));
                    ck_assert_msg(memcmp(cg_data(got), cg_data(wide),
                                         (size_t)cg_numel(got) * sizeof(float)) == 0,
                                  "%s: not the stored values widened", key);
                    cg_release_all(2, stored, wide);
                }
            /* each shard reads its run of the half-precision moments */
            for (int k = 0; k < NSHARD; k++) {
                cg_tensor *q[OPT_NPARAMS];
                make_params(q);
                cg_optim *shard = make_shard(&cfg, q, k), *split = make_shard(&cfg, q, k);
                ck_assert_msg(cg_optim_load(shard, f, "opt"), "shard %d: %s", k, cg_last_error());
                ck_assert(cg_optim_copy_state(split, o));
                assert_same_state(shard, split, cfg);
                cg_optim_free(shard);
                cg_optim_free(split);
                release_params(q);
            }
        }
        cg_optim_free(o);
        release_params(ps);
        cg_st_close(f);
    }
}
END_TEST

START_TEST(sharded_clip_and_checks)
{
    cg_optim_config cfg = cg_adamw_default(1e-3);
    cg_tensor *a[OPT_NPARAMS], *s[NSHARD][OPT_NPARAMS];
    make_params(a);
    cg_optim *oa = make_optim(&cfg, a), *os[NSHARD];
    for (int j = 0; j < OPT_NPARAMS; j++)
        set_grad(a[j], OPT_G[0] + offset_of(j));
    double sq = 0;
    for (int k = 0; k < NSHARD; k++) {
        make_params(s[k]);
        os[k] = make_shard(&cfg, s[k], k);
        for (int j = 0; j < OPT_NPARAMS; j++)
            set_grad(s[k][j], OPT_G[0] + offset_of(j));
        sq += cg_optim_grad_sqsum(os[k]);
    }
    double ss = cg_optim_grad_sqsum(oa), total = sqrt(ss);
    ck_assert(fabs(sq - ss) <= 1e-12 * ss && ss > 0);
    ck_assert(cg_optim_clip_grad_norm(oa, 0.5 * total) == total);
    for (int k = 0; k < NSHARD; k++) {
        ck_assert(cg_optim_clip_grads_by(os[k], total, 0.5 * total));
        for (int j = 0; j < OPT_NPARAMS; j++) {
            cg_optim_range r = shard_of(k, j);
            for (int64_t e = r.lo; e < r.hi; e++)
                ck_assert(cg_data(s[k][j]->grad)[e] == cg_data(a[j]->grad)[e]);
            for (int64_t e = 0; e < cg_numel(a[j]); e++) /* the others' elements: untouched */
                ck_assert((e >= r.lo && e < r.hi) ||
                          cg_data(s[k][j]->grad)[e] == OPT_G[0][offset_of(j) + e]);
        }
    }
    ck_assert(!cg_optim_clip_grads_by(os[0], total, -1));
    /* a non-finite total leaves the gradients unscaled (an inf one made the
     * factor 0 and would wipe them) */
    float before[12];
    ck_assert(cg_copy_to(s[0][0]->grad, before));
    ck_assert(cg_optim_clip_grads_by(os[0], INFINITY, 1.0));
    ck_assert(cg_optim_clip_grads_by(os[0], NAN, 1.0));
    ck_assert(memcmp(cg_data(s[0][0]->grad), before, sizeof before) == 0);
    /* a shard's own cg_optim_clip_grad_norm: the norm of its elements, and
     * those clipped by it as cg_optim_clip_grads_by clips them */
    {
        cg_tensor *q[OPT_NPARAMS], *r[OPT_NPARAMS];
        make_params(q);
        make_params(r);
        cg_optim *oq = make_shard(&cfg, q, 2), *ob = make_shard(&cfg, r, 2);
        for (int j = 0; j < OPT_NPARAMS; j++) {
            set_grad(q[j], OPT_G[0] + offset_of(j));
            set_grad(r[j], OPT_G[0] + offset_of(j));
        }
        const double own = sqrt(cg_optim_grad_sqsum(oq));
        ck_assert(own > 0 && own < total);
        ck_assert(cg_optim_clip_grad_norm(oq, 0.5 * own) == own);
        ck_assert(cg_optim_clip_grads_by(ob, own, 0.5 * own));
        for (int j = 0; j < OPT_NPARAMS; j++)
            ck_assert(memcmp(cg_data(q[j]->grad), cg_data(r[j]->grad),
                             (size_t)cg_numel(q[j]) * sizeof(float)) == 0);
        ck_assert(cg_data(q[0]->grad)[8] != OPT_G[0][8]); /* clipped */
        cg_optim_free(oq);
        cg_optim_free(ob);
        release_params(q);
        release_params(r);
    }

    /* element 5 of "w" is shard 1's */
    cg_data(s[0][0]->grad)[5] = NAN;
    ck_assert(cg_optim_grads_finite(os[0], NULL));
    cg_data(s[2][0]->grad)[0] = NAN; /* before shard 2's run [8, 12) */
    ck_assert_msg(cg_optim_grads_finite(os[2], NULL), "%s", cg_last_error());
    cg_data(s[1][0]->grad)[5] = INFINITY;
    int bad = 0;
    ck_assert(!cg_optim_grads_finite(os[1], &bad));
    ck_assert_int_eq(bad, 0);
    assert_error_has("'w' has inf at element 5");

    cg_optim_param spec = {"w", a[0], 0};
    CG_ASSERT_FAILS(cg_optim_new_sharded(&cfg, 1, &spec, &(cg_optim_range){3, 13}),
                    "[3, 13) is not inside it");
    CG_ASSERT_FAILS(cg_optim_new_sharded(&cfg, 1, &spec, &(cg_optim_range){4, 3}), "not inside");
    cg_optim *whole = cg_optim_new_sharded(&cfg, 1, &spec, &(cg_optim_range){0, 12});
    ck_assert(whole && !cg_optim_is_sharded(whole));
    ck_assert_int_eq(cg_optim_state(whole, 0, "exp_avg")->ndim, 2);
    int64_t lo, hi;
    ck_assert(cg_optim_shard_range(os[2], 0, &lo, &hi) && lo == 8 && hi == 12);
    ck_assert(!cg_optim_shard_range(os[2], 9, &lo, &hi));
    ck_assert_int_eq(cg_optim_state(os[2], 0, "exp_avg")->ndim, 1);
    /* copy_state needs the same parameters */
    CG_ASSERT_FAILS(cg_optim_copy_state(whole, oa) ? (void *)1 : NULL, "parameters");
    /* and their shapes, not only their sizes: a [4, 3] 'w' is not the [3, 4] one */
    cg_tensor *wt = cg_zeros(CG_SHAPE(4, 3));
    cg_requires_grad(wt, true);
    cg_optim *turned = cg_optim_new(&cfg, 1, &(cg_optim_param){"w", wt, 0});
    CG_ASSERT_FAILS(cg_optim_copy_state(turned, whole) ? (void *)1 : NULL, "[4, 3]");
    cg_optim_free(turned);
    cg_release(wt);
    cg_optim_free(whole);
    for (int k = 0; k < NSHARD; k++) {
        cg_optim_free(os[k]);
        release_params(s[k]);
    }
    cg_optim_free(oa);
    release_params(a);
}
END_TEST

/* Gradients in bfloat16 and float16 (a low-precision leaf's .grad, as
 * autograd makes it): the norm is their values' (widened exactly to
 * float32, summed in double as float32 ones), clipping scales them in
 * float32 and rounds into their dtype, the NaN check finds theirs; a
 * gradient of no float dtype, and one not of its parameter's float32 in an
 * optimizer (which updates float32 only), are refused in one line. */
START_TEST(clip_low_precision_grads)
{
    const float gv[4] = {3.0f, -4.0f, 1.5f, 0.25f}; /* exact in both */
    const double norm = sqrt(9.0 + 16.0 + 2.25 + 0.0625);
    for (int d = 0; d < 2; d++) {
        const cg_dtype dt = d ? CG_F16 : CG_BF16;
        cg_tensor *f = cg_from_data(CG_SHAPE(2, 2), gv);
        cg_tensor *p = cg_requires_grad(cg_to(f, dt), true);
        cg_tensor *y = cg_mul(p, f), *l = cg_sum_all(y); /* dl/dp = f */
        ck_assert(cg_backward(l, NULL, false));
        ck_assert_int_eq(p->grad->dtype, dt);
        ck_assert(cg_grad_norm(1, &p) == norm);
        ck_assert_int_eq(cg_first_nonfinite_grad(1, &p, NULL), -1);
        ck_assert(cg_clip_grad_norm(1, &p, 1.0) == norm);
        ck_assert_int_eq(p->grad->dtype, dt);
        cg_tensor *g32 = cg_to(p->grad, CG_F32);
        const float coef = (1.0f / ((float)norm + 1e-6f)) * 1.0f;
        for (int i = 0; i < 4; i++) {
            cg_tensor *one = cg_from_data(CG_SHAPE(1), &(float){gv[i] * coef});
            cg_tensor *r = cg_to(one, dt), *w = cg_to(r, CG_F32); /* rounded to dt */
            ck_assert_msg(cg_data(g32)[i] == cg_data(w)[0], "%d: %g %g", i, (double)cg_data(g32)[i],
                          (double)cg_data(w)[0]);
            cg_release_all(3, one, r, w);
        }
        /* a strided low-precision gradient: its values in its order */
        cg_tensor *t = cg_view_transpose(p->grad, 0, 1);
        cg_tensor *keep = p->grad;
        p->grad = t;
        ck_assert(fabs(cg_grad_norm(1, &p) - 1.0) < 1e-2);
        p->grad = keep;
        cg_release(t);
        cg_tensor *nan = cg_from_data(CG_SHAPE(2, 2), (const float[]){1, 2, NAN, 4});
        ck_assert(cg_copy_(p->grad, nan));
        int64_t el = -1;
        ck_assert_int_eq(cg_first_nonfinite_grad(1, &p, &el), 0);
        ck_assert_int_eq(el, 2);
        ck_assert(isnan(cg_clip_grad_norm(1, &p, 1.0)));
        cg_release_all(5, f, p, y, l, g32);
        cg_release(nan);
    }
    /* a gradient of no float dtype */
    cg_tensor *q = cg_requires_grad(cg_zeros(CG_SHAPE(3)), true);
    q->grad = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 3});
    CG_ASSERT_FAILS(cg_grad_norm(1, &q) < 0 ? NULL : (void *)1,
                    "grad_norm: gradient of parameter 0 is int64, expected a float dtype");
    CG_ASSERT_FAILS(cg_clip_grad_norm(1, &q, 1.0) < 0 ? NULL : (void *)1,
                    "clip_grad_norm: gradient of parameter 0 is int64");
    ck_assert_int_eq(cg_first_nonfinite_grad(1, &q, NULL), -1);
    /* an optimizer's float32 parameter given a bfloat16 gradient */
    cg_release(q->grad);
    cg_tensor *z = cg_zeros(CG_SHAPE(3));
    q->grad = cg_to(z, CG_BF16);
    cg_release(z);
    cg_optim_config cfg = cg_adamw_default(1e-3);
    cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"q", q, 0});
    cg_optim *os =
        cg_optim_new_sharded(&cfg, 1, &(cg_optim_param){"q", q, 0}, &(cg_optim_range){1, 3});
    ck_assert(o && os && cg_optim_is_sharded(os));
    const char *want = "gradient of 'q' is bfloat16, expected float32 (its parameter's dtype)";
    CG_ASSERT_FAILS(cg_optim_grad_sqsum(os) < 0 ? NULL : (void *)1, want);
    CG_ASSERT_FAILS(cg_optim_clip_grads_by(os, 10.0, 1.0) ? (void *)1 : NULL, want);
    CG_ASSERT_FAILS(cg_optim_grads_finite(os, NULL) ? (void *)1 : NULL, want);
    CG_ASSERT_FAILS(cg_optim_step(o) ? (void *)1 : NULL, want);
    cg_optim_free(o);
    cg_optim_free(os);
    cg_release(q);
}
END_TEST

/* cg_optim_copy_state between whole optimizers: the configuration, the
 * step counts and the buffers come across; it refuses another type, the
 * other use of momentum, and a parameter of another name even with the
 * same shape, and a refusal changes nothing. */
START_TEST(copy_state_whole)
{
    cg_tensor *w = cg_zeros(CG_SHAPE(3, 4)), *v = cg_zeros(CG_SHAPE(3, 4));
    cg_requires_grad(w, true);
    cg_requires_grad(v, true);
    cg_optim_config mom = cg_sgd_config(0.1, 0.9, false), plain = cg_sgd_config(0.5, 0, false);
    cg_optim_config adam = cg_adam_config(0.1, 0.9, 0.99, 1e-8);
    cg_optim *a = cg_optim_new(&mom, 1, &(cg_optim_param){"w", w, 0});
    cg_optim *b = cg_optim_new(&mom, 1, &(cg_optim_param){"w", w, 0});
    cg_optim *p = cg_optim_new(&plain, 1, &(cg_optim_param){"w", w, 0});
    cg_optim *n = cg_optim_new(&mom, 1, &(cg_optim_param){"v", v, 0});
    cg_optim *d = cg_optim_new(&adam, 1, &(cg_optim_param){"w", w, 0});
    ck_assert(a && b && p && n && d);
    for (int step = 0; step < 2; step++) {
        cg_release(w->grad);
        w->grad = cg_full(CG_SHAPE(3, 4), 1.0f + (float)step);
        ck_assert(cg_optim_step(a));
    }
    cg_optim_set_lr(b, 0.25);
    ck_assert_msg(cg_optim_copy_state(b, a), "%s", cg_last_error());
    ck_assert(cg_optim_lr(b) == 0.1 && cg_optim_steps(b) == 2 && cg_optim_param_steps(b, 0) == 2);
    const cg_tensor *ma = cg_optim_state(a, 0, "momentum_buffer");
    const cg_tensor *mb = cg_optim_state(b, 0, "momentum_buffer");
    ck_assert(ma && mb && memcmp(cg_data((cg_tensor *)ma), cg_data((cg_tensor *)mb), 12 * 4) == 0);
    CG_ASSERT_FAILS(cg_optim_copy_state(p, a) ? (void *)1 : NULL,
                    "sgd optimizer of 1 parameters into sgd of 1 (the type, momentum use");
    CG_ASSERT_FAILS(cg_optim_copy_state(a, p) ? (void *)1 : NULL, "momentum use");
    CG_ASSERT_FAILS(cg_optim_copy_state(d, a) ? (void *)1 : NULL, "into adam of 1");
    CG_ASSERT_FAILS(cg_optim_copy_state(n, a) ? (void *)1 : NULL,
                    "parameter 0 is 'w' [3, 4] in src, 'v' [3, 4] in dst");
    ck_assert(cg_optim_lr(p) == 0.5 && cg_optim_steps(p) == 0 && cg_optim_steps(n) == 0);
    cg_optim *all[] = {a, b, p, n, d};
    for (int i = 0; i < 5; i++)
        cg_optim_free(all[i]);
    cg_release_all(2, w, v);
}
END_TEST

/* An SGD optimizer of one parameter "w" saved under "opt", with extra
 * tensors: another optimizer's state under "opt2" (its own prefix, not
 * this one's), and a tensor named stray (NULL: none). Loaded back into an
 * optimizer of cfg: the result, the error in the message. */
static bool load_with_extra(cg_optim_config cfg, const char *stray)
{
    cg_tensor *w = cg_zeros(CG_SHAPE(3, 4));
    cg_requires_grad(w, true);
    cg_optim *o = cg_optim_new(&cfg, 1, &(cg_optim_param){"w", w, 0});
    cg_optim_config other = cg_adam_config(0.1, 0.9, 0.99, 1e-8);
    cg_optim *o2 = cg_optim_new(&other, 1, &(cg_optim_param){"u", w, 0});
    cg_st_writer *wr = cg_st_writer_new();
    ck_assert(o && o2 && wr && cg_optim_save(o, wr, "opt") && cg_optim_save(o2, wr, "opt2"));
    cg_tensor *z = cg_zeros(CG_SHAPE(3, 4));
    ck_assert(!stray || cg_st_add_f32(wr, stray, z));
    const char *path = in_dir("extra.safetensors");
    ck_assert_msg(cg_st_writer_save(wr, path), "%s", cg_last_error());
    cg_st_writer_free(wr);
    cg_st_file *f = cg_st_open(path);
    ck_assert(f);
    bool ok = cg_optim_load(o, f, "opt");
    ck_assert(!ok || cg_optim_load(o2, f, "opt2"));
    cg_st_close(f);
    cg_optim_free(o);
    cg_optim_free(o2);
    cg_release_all(2, w, z);
    return ok;
}

/* The state a load takes: another prefix's tensors are not strays; a
 * moment of another optimizer's kind is, per kind (SGD with momentum has
 * no exp_avg, plain SGD no momentum_buffer). */
START_TEST(load_strays_by_kind)
{
    cg_optim_config mom = cg_sgd_config(0.1, 0.9, false), plain = cg_sgd_config(0.1, 0, false);
    ck_assert_msg(load_with_extra(mom, NULL), "%s", cg_last_error());
    ck_assert_msg(load_with_extra(plain, NULL), "%s", cg_last_error());
    CG_ASSERT_FAILS(load_with_extra(mom, "opt.w.exp_avg") ? (void *)1 : NULL,
                    "'opt.w.exp_avg' is not the sgd state of any parameter");
    CG_ASSERT_FAILS(load_with_extra(plain, "opt.w.momentum_buffer") ? (void *)1 : NULL,
                    "'opt.w.momentum_buffer' is not the sgd state of any parameter");
    CG_ASSERT_FAILS(load_with_extra(plain, "opt.w.exp_avg_sq") ? (void *)1 : NULL,
                    "'opt.w.exp_avg_sq' is not the sgd state");
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

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("torch");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, sgd_momentum_wd);
    tcase_add_test(tc, sgd_nesterov_wd);
    tcase_add_test(tc, sgd_plain_wd);
    tcase_add_test(tc, adam_l2);
    tcase_add_test(tc, adamw_decoupled);
    tcase_add_test(tc, skip_param_without_grad);
    tcase_add_test(tc, step_with_autograd);
    tcase_add_test(tc, step_thread_independent);
    tcase_add_test(tc, step_across_chunks);
    suite_add_tcase(s, tc);

    tc = tcase_create("schedule");
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

    tc = tcase_create("clip");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, clip_scales);
    tcase_add_test(tc, clip_below_limit);
    tcase_add_test(tc, clip_optim_and_strided_grad);
    tcase_add_test(tc, clip_norm_thread_independent);
    tcase_add_test(tc, clip_norm_blocks_across_tensors);
    tcase_add_test(tc, clip_norm_past_float_max);
    tcase_add_test(tc, clip_tiny_norm);
    tcase_add_test(tc, clip_factor_as_torch);
    tcase_add_test(tc, nonfinite_grads_named);
    suite_add_tcase(s, tc);

    tc = tcase_create("state");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, resume_sgd);
    tcase_add_test(tc, resume_adam);
    tcase_add_test(tc, resume_adamw);
    tcase_add_test(tc, load_errors);
    tcase_add_test(tc, state_locale_independent);
    tcase_add_test(tc, load_damaged_values);
    tcase_add_test(tc, load_damaged_steps_and_metadata);
    tcase_add_test(tc, state_sgd_plain);
    tcase_add_test(tc, state_config_exact);
    tcase_add_test(tc, sharded_adamw);
    tcase_add_test(tc, sharded_adam_sgd);
    tcase_add_test(tc, sharded_clip_and_checks);
    tcase_add_test(tc, load_half_precision_moments);
    tcase_add_test(tc, copy_state_whole);
    tcase_add_test(tc, load_strays_by_kind);
    tcase_add_test(tc, clip_low_precision_grads);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, build_errors);
    tcase_add_test(tc, step_errors);
    tcase_add_test(tc, accessors);
    tcase_add_test(tc, from_module);
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
    Suite *s = optim_suite();
    return cg_test_run(&s, 1);
}
