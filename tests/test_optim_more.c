/* Check suite "optim_more": torch.optim's other first-order optimizers
 * (Adadelta, Adamax, NAdam, RAdam, ASGD, Rprop; optim/optim.h): every
 * parameter after every step equal to PyTorch 1.13's bits
 * (tests/fixtures/make_optim_expected.py's NEW_CONFIGS and RAdam's 8
 * steps), resumed through a file and sharded (ZeRO-1) to the same bits,
 * the same bits at 1 and 2 threads, their hyper-parameters refused as
 * PyTorch refuses them, their buffers and scalars counted, named and
 * checked at a load. */

#include "tests/optim_rig.h"

/* The fixture's steps with cfg: the parameters after each equal expect
 * bit for bit, and then w's state buffers named by names (NULL: none
 * checked) state's values; d (never a gradient) untouched, c one step
 * behind. */
static void check_bits(cg_optim_config cfg, int nsteps, const double *lrs, const float *expect,
                       const char *const *names, const float *state)
{
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim *o = fixture_optim(&cfg, ps, NULL);
    float got[OPT_N];
    for (int k = 0; k < nsteps; k++) {
        cg_optim_zero_grad(o);
        const int s = k % OPT_NSTEPS; /* past the fixture's steps: its gradients again */
        for (int j = 0; j < OPT_NPARAMS; j++)
            set_grad(ps[j], OPT_HAS_GRAD[s][j] ? OPT_G[s] + offset_of(j) : NULL);
        ck_assert(cg_optim_set_lr(o, lrs[k]));
        ck_assert_msg(cg_optim_step(o), "step %d: %s", k, cg_last_error());
        gather(ps, got);
        for (int e = 0; e < OPT_N; e++)
            ck_assert_msg(memcmp(&got[e], &expect[k * OPT_N + e], sizeof(float)) == 0,
                          "%s step %d element %d: %.9g, PyTorch %.9g", cg_optim_type_name(cfg.type),
                          k, e, (double)got[e], (double)expect[k * OPT_N + e]);
    }
    for (int b = 0, at = 0; names && names[b]; b++) {
        const cg_tensor *t = cg_optim_state(o, 0, names[b]);
        ck_assert_msg(t != NULL, "%s", cg_last_error());
        const float *v = cg_data((cg_tensor *)t);
        for (int64_t e = 0; e < cg_numel(t); e++, at++)
            ck_assert_msg(memcmp(&v[e], &state[at], sizeof(float)) == 0,
                          "%s's %s element %lld: %.9g, PyTorch %.9g", cg_optim_type_name(cfg.type),
                          names[b], (long long)e, (double)v[e], (double)state[at]);
    }
    ck_assert(memcmp(got + offset_of(3), OPT_P0 + offset_of(3), 2 * sizeof(float)) == 0);
    ck_assert_int_eq(cg_optim_param_steps(o, 0), nsteps);
    ck_assert_int_eq(cg_optim_param_steps(o, 3), 0);
    free_fixture(o, ps);
}

START_TEST(new_as_torch)
{
    check_bits(new_config(_i), OPT_NSTEPS, new_lrs[_i], new_expect[_i][0], new_state_names[_i],
               new_state[_i]);
}
END_TEST

/* RAdam's rectification: rho_t passes 5 at step 6 (beta2 0.99) */
START_TEST(radam_rectified)
{
    check_bits(cg_radam_config(1e-2, 0.9, 0.99, 1e-8), OPT_LONG_NSTEPS, OPT_LR_RADAM_LONG,
               OPT_EXPECT_RADAM_LONG[0], NULL, NULL);
}
END_TEST

START_TEST(new_resume) { resume_case(new_config(_i), new_lrs[_i]); }
END_TEST

START_TEST(new_sharded) { sharded_case(new_config(_i), new_lrs[_i]); }
END_TEST

START_TEST(new_thread_independent) { thread_case(new_config(_i)); }
END_TEST

/* PyTorch's constructors' checks (and finite numbers), one line each */
START_TEST(new_refusals)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    const cg_optim_param w = {"w", ps[0], 0};
    static const struct {
        int cfg; /* new_config's */
        size_t off;
        double v;
        const char *msg;
    } bad[] = {
        {0, offsetof(cg_optim_config, rho), 1.5, "optim_new: adadelta rho 1.5 must be in [0, 1]"},
        {0, offsetof(cg_optim_config, rho), -0.1, "adadelta rho -0.1 must be in [0, 1]"},
        {1, offsetof(cg_optim_config, eps), -1, "adadelta eps -1 must be finite and >= 0"},
        {0, offsetof(cg_optim_config, lr), -1, "learning rate -1 must be finite"},
        {2, offsetof(cg_optim_config, beta1), 1, "adamax betas[0] 1 must be in [0, 1)"},
        {3, offsetof(cg_optim_config, beta2), -0.5, "adamax betas[1] -0.5 must be in [0, 1)"},
        {2, offsetof(cg_optim_config, eps), NAN, "adamax eps nan must be finite"},
        {4, offsetof(cg_optim_config, momentum_decay), -1,
         "nadam momentum_decay -1 must be finite and >= 0"},
        {5, offsetof(cg_optim_config, beta2), 1, "nadam betas[1] 1 must be in [0, 1)"},
        {6, offsetof(cg_optim_config, beta1), NAN, "radam betas[0] nan must be in [0, 1)"},
        {7, offsetof(cg_optim_config, eps), -1e-8, "radam eps -1e-08 must be finite and >= 0"},
        {8, offsetof(cg_optim_config, lambd), INFINITY, "asgd lambd inf must be finite"},
        {9, offsetof(cg_optim_config, alpha), NAN, "asgd alpha nan must be finite"},
        {9, offsetof(cg_optim_config, t0), -INFINITY, "asgd t0 -inf must be finite"},
        {10, offsetof(cg_optim_config, etaminus), 1.0,
         "rprop etas (1, 1.2) must be 0 < etaminus < 1 < etaplus"},
        {10, offsetof(cg_optim_config, etaminus), 0, "rprop etas (0, 1.2) must be"},
        {11, offsetof(cg_optim_config, etaplus), 1.0, "rprop etas (0.3, 1) must be"},
        {11, offsetof(cg_optim_config, etaplus), INFINITY, "rprop etas (0.3, inf) must be"},
        {11, offsetof(cg_optim_config, step_size_max), NAN, "rprop step_size_max nan must be"},
        {10, offsetof(cg_optim_config, step_size_min), INFINITY, "rprop step_size_min inf must"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cg_optim_config c = new_config(bad[i].cfg);
        *(double *)((char *)&c + bad[i].off) = bad[i].v;
        CG_ASSERT_REFUSED_LINE(cg_optim_new(&c, 1, &w), bad[i].msg);
    }
    /* the edges PyTorch takes: rho 0 and 1, eps 0, any finite lambd/t0 */
    const cg_optim_config ok[] = {cg_adadelta_config(1, 1, 0), cg_adadelta_config(1, 0, 1e-6),
                                  cg_asgd_config(0.1, -1, 2, -5), cg_rprop_config(1, 0.1, 5, 3, 1)};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        cg_optim *o = cg_optim_new(&ok[i], 1, &w);
        ck_assert_msg(o != NULL, "%s", cg_last_error());
        cg_optim_free(o);
    }
    /* Rprop takes no weight decay (1.13's has none): refused, not ignored */
    const cg_optim_config rp = cg_rprop_default(0.01);
    CG_ASSERT_REFUSED_LINE(cg_optim_new(&rp, 1, &(cg_optim_param){"w", ps[0], 0.1}),
                           "optim_new: parameter 'w': rprop takes no weight decay (0.1 given");
    cg_module *m = cg_module_new("M");
    cg_rng rng = cg_rng_new(3);
    cg_linear *fc = cg_linear_new(2, 3, true, &rng);
    cg_module_add_child(m, "fc", fc);
    CG_ASSERT_REFUSED_LINE(cg_optim_from_module(&rp, m, 0.01, CG_DECAY_MATRICES),
                           "parameter 'fc.weight': rprop takes no weight decay");
    cg_optim *o = cg_optim_from_module(&rp, m, 0.0, CG_DECAY_ALL);
    ck_assert_msg(o != NULL, "%s", cg_last_error());
    cg_optim_free(o);
    cg_module_free(m);

    /* momentum: beta1 for the Adam family, none for the rest */
    for (int i = 0; i < N_NEW; i += 2) {
        cg_optim_config c = new_config(i);
        o = cg_optim_new(&c, 1, &w);
        ck_assert_ptr_nonnull(o);
        const bool betas =
            c.type == CG_OPTIM_ADAMAX || c.type == CG_OPTIM_NADAM || c.type == CG_OPTIM_RADAM;
        if (betas) {
            ck_assert(cg_optim_set_momentum(o, 0.85));
            ck_assert(cg_optim_get_config(o).beta1 == 0.85);
            CG_ASSERT_REFUSED(!cg_optim_set_momentum(o, 1.0), "beta1 1 must be in [0, 1)");
        } else {
            char msg[96];
            snprintf(msg, sizeof msg, "optim set_momentum: %s has no momentum",
                     cg_optim_type_name(c.type));
            CG_ASSERT_REFUSED(!cg_optim_set_momentum(o, 0.9), msg);
        }
        cg_optim_free(o);
    }
    release_params(ps);
}
END_TEST

/* PyTorch 1.13's defaults; names; the buffers each keeps and counts */
START_TEST(new_defaults_and_buffers)
{
    cg_optim_config c = cg_adadelta_default(1.0);
    ck_assert(c.type == CG_OPTIM_ADADELTA && c.lr == 1.0 && c.rho == 0.9 && c.eps == 1e-6);
    c = cg_adamax_default(2e-3);
    ck_assert(c.type == CG_OPTIM_ADAMAX && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8);
    c = cg_nadam_default(2e-3);
    ck_assert(c.type == CG_OPTIM_NADAM && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 &&
              c.momentum_decay == 4e-3);
    c = cg_radam_default(1e-3);
    ck_assert(c.type == CG_OPTIM_RADAM && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8);
    c = cg_asgd_default(1e-2);
    ck_assert(c.type == CG_OPTIM_ASGD && c.lambd == 1e-4 && c.alpha == 0.75 && c.t0 == 1e6);
    c = cg_rprop_default(1e-2);
    ck_assert(c.type == CG_OPTIM_RPROP && c.etaminus == 0.5 && c.etaplus == 1.2 &&
              c.step_size_min == 1e-6 && c.step_size_max == 50);
    static const char *const names[] = {"adadelta", "adamax", "nadam", "radam", "asgd", "rprop"};
    for (int t = CG_OPTIM_ADADELTA; t < CG_OPTIM_NTYPES; t++)
        ck_assert_str_eq(cg_optim_type_name((cg_optim_type)t), names[t - CG_OPTIM_ADADELTA]);
    ck_assert_str_eq(cg_optim_type_name(CG_OPTIM_NTYPES), "?");

    /* n_buffers: those of the parameter's shape (a ZeRO shard's split) */
    const int nb[N_NEW] = {2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 2, 2};
    static const char *const keeps[N_NEW] = {"square_avg acc_delta",
                                             "square_avg acc_delta",
                                             "exp_avg exp_inf",
                                             "exp_avg exp_inf",
                                             "exp_avg exp_avg_sq mu_product",
                                             "exp_avg exp_avg_sq mu_product",
                                             "exp_avg exp_avg_sq",
                                             "exp_avg exp_avg_sq",
                                             "ax eta mu",
                                             "ax eta mu",
                                             "prev step_size",
                                             "prev step_size"};
    for (int i = 0; i < N_NEW; i++) {
        c = new_config(i);
        ck_assert_int_eq(cg_optim_n_buffers(&c), nb[i]);
        char got[128] = "";
        for (int k = 1; k < CG_OPTIM_NBUFS; k++)
            if (cg_optim_keeps(&c, k))
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", got[0] ? " " : "",
                         cg_optim_buffer_name(k));
        ck_assert_str_eq(got, keeps[i]);
    }
    ck_assert(cg_optim_buffer_is_scalar(CG_OPTIM_BUF_MU_PRODUCT) &&
              cg_optim_buffer_is_scalar(CG_OPTIM_BUF_ETA) &&
              cg_optim_buffer_is_scalar(CG_OPTIM_BUF_MU) &&
              !cg_optim_buffer_is_scalar(CG_OPTIM_BUF_STEP_SIZE) && !cg_optim_buffer_is_scalar(0) &&
              !cg_optim_buffer_is_scalar(CG_OPTIM_NBUFS));
}
END_TEST

/* The state as PyTorch starts it (Rprop's step size and ASGD's eta at the
 * rate of a parameter's first step, mu and mu_product at 1); the scalars
 * of shape [] and 4 bytes uncounted by cg_optim_state_bytes */
START_TEST(new_state_start)
{
    cg_tensor *ps[OPT_NPARAMS];
    cg_optim_config c = cg_asgd_default(0.5);
    cg_optim *o = fixture_optim(&c, ps, NULL);
    const cg_tensor *eta = cg_optim_state(o, 0, "eta"), *mu = cg_optim_state(o, 0, "mu");
    ck_assert(eta && mu && eta->ndim == 0 && mu->ndim == 0);
    ck_assert(cg_data((cg_tensor *)eta)[0] == 0.5f && cg_data((cg_tensor *)mu)[0] == 1.0f);
    ck_assert_int_eq(cg_optim_state_bytes(o), OPT_N * 4); /* ax alone */
    ck_assert(cg_optim_set_lr_scale(o, 0, 0.5));
    do_step(o, ps, 0, 0.25); /* eta starts at this step's rate, 0.125: then lr/(1+lambd*lr)^a */
    const float p0 = OPT_P0[0], g = fmaf((float)OPT_WD[0], p0, OPT_G[0][0]);
    ck_assert(cg_data(ps[0])[0] == fmaf(-0.125f, g, p0 * (float)(1 - 1e-4 * 0.125f)));
    ck_assert(cg_data((cg_tensor *)eta)[0] == (float)(0.125 / pow(1 + 1e-4 * 0.125, 0.75)));
    ck_assert(cg_data((cg_tensor *)mu)[0] == 1.0f);
    CG_ASSERT_REFUSED(cg_optim_state(o, 0, "mu_product") == NULL,
                      "asgd optimizer has no state 'mu_product' (it keeps ax, eta, mu)");
    free_fixture(o, ps);

    c = cg_rprop_default(0.5);
    o = fixture_optim(&c, ps, NULL);
    const cg_tensor *ss = cg_optim_state(o, 1, "step_size");
    ck_assert(ss && cg_data((cg_tensor *)ss)[0] == 0.5f);
    do_step(o, ps, 0, 0.125); /* the first step's rate, then lr is not read */
    const float *st = cg_data((cg_tensor *)ss);
    for (int e = 0; e < 4; e++) /* prev was 0: sign 0, factor 1 */
        ck_assert(st[e] == 0.125f);
    float before[OPT_N], after[OPT_N];
    gather(ps, before);
    do_step(o, ps, 1, 100.0);
    gather(ps, after);
    for (int e = 0; e < 4; e++) {
        const int i = (int)offset_of(1) + e; /* b: |step| is 0.125 * eta (+-), lr unread */
        const float g0 = OPT_G[0][i], g1 = OPT_G[1][i];
        const float f = g0 * g1 > 0 ? 1.2f : 0.5f;
        ck_assert(st[e] == 0.125f * f);
        ck_assert(after[i] == (g0 * g1 < 0 ? before[i] : before[i] - (g1 > 0 ? 1 : -1) * st[e]));
    }
    free_fixture(o, ps);

    c = cg_nadam_default(0.01);
    o = fixture_optim(&c, ps, NULL);
    const cg_tensor *mp = cg_optim_state(o, 2, "mu_product");
    ck_assert(mp && mp->ndim == 0 && cg_data((cg_tensor *)mp)[0] == 1.0f);
    do_step(o, ps, 0, 0.01);
    const double mu1 = 0.9 * (1. - 0.5 * pow(0.96, 1 * 4e-3));
    ck_assert(cg_data((cg_tensor *)mp)[0] == (float)mu1);
    ck_assert(cg_data((cg_tensor *)cg_optim_state(o, 3, "mu_product"))[0] == 1.0f); /* d: none */
    free_fixture(o, ps);
}
END_TEST

/* A file's scalars are checked as its buffers are: missing, of a shape
 * other than [], or not finite: refused, naming the entry, nothing taken */
START_TEST(new_scalars_loaded)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", in_dir("nadam.st"));
    cg_optim_config c = new_config(5);
    write_state(path, c);
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);
    const char *v = cg_st_metadata(f, "opt.momentum_decay");
    ck_assert(v && strcmp(v, "0.10000000000000001") == 0);
    cg_st_dtype dt;
    int nd = -1;
    ck_assert(cg_st_info(f, "opt.w.mu_product", &dt, &nd, NULL) && dt == CG_ST_F32 && nd == 0);
    cg_st_close(f);

    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    cg_optim *o = make_optim(&c, ps);
    write_edited(path, in_dir("nan.st"), "opt.c.mu_product", 0, NAN, NULL);
    write_edited(path, in_dir("gone.st"), NULL, 0, 0, "opt.b.mu_product");
    struct {
        const char *file, *msg;
    } bad[] = {{"nan.st", "'opt.c.mu_product' holds nan at element 0 (not finite)"},
               {"gone.st", "has no 'opt.b.mu_product' (nadam state of parameter 'b')"}};
    for (int i = 0; i < 2; i++) {
        f = cg_st_open(in_dir(bad[i].file));
        ck_assert_ptr_nonnull(f);
        CG_ASSERT_REFUSED(!cg_optim_load(o, f, "opt"), bad[i].msg);
        cg_st_close(f);
        ck_assert(cg_data(cg_optim_state(o, 0, "mu_product"))[0] == 1.0f); /* unchanged */
    }
    /* a scalar with a parameter's shape: not the scalar */
    cg_st_writer *w = cg_st_writer_new();
    f = cg_st_open(path);
    copy_tensors(f, w, NULL, 0, 0, "opt.w.mu_product");
    copy_metadata(f, w, NULL, NULL);
    cg_st_close(f);
    cg_tensor *big = cg_zeros(CG_SHAPE(3, 4));
    ck_assert(cg_st_add_f32(w, "opt.w.mu_product", big));
    ck_assert(cg_st_writer_save(w, in_dir("shape.st")));
    cg_st_writer_free(w);
    cg_release(big);
    f = cg_st_open(in_dir("shape.st"));
    CG_ASSERT_REFUSED(!cg_optim_load(o, f, "opt"),
                      "'opt.w.mu_product' is F32 [3, 4], expected an F32 scalar (shape [])");
    cg_st_close(f);
    /* another type's scalar is a stray */
    w = cg_st_writer_new();
    f = cg_st_open(path);
    copy_tensors(f, w, NULL, 0, 0, NULL);
    copy_metadata(f, w, NULL, NULL);
    cg_st_close(f);
    cg_tensor *eta = cg_scalar(0.01f);
    ck_assert(cg_st_add_f32(w, "opt.w.eta", eta));
    cg_release(eta);
    ck_assert(cg_st_writer_save(w, in_dir("mixed.st")));
    cg_st_writer_free(w);
    f = cg_st_open(in_dir("mixed.st"));
    CG_ASSERT_REFUSED(!cg_optim_load(o, f, "opt"),
                      "'opt.w.eta' is not the nadam state of any parameter");
    cg_st_close(f);
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

static Suite *optim_more_suite(void)
{
    Suite *s = suite_create("optim_more");
    TCase *tc = tcase_create("more");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, new_as_torch, 0, N_NEW);
    tcase_add_test(tc, radam_rectified);
    tcase_add_loop_test(tc, new_resume, 0, N_NEW);
    tcase_add_loop_test(tc, new_sharded, 0, N_NEW);
    tcase_add_loop_test(tc, new_thread_independent, 0, N_NEW);
    tcase_add_test(tc, new_refusals);
    tcase_add_test(tc, new_defaults_and_buffers);
    tcase_add_test(tc, new_state_start);
    tcase_add_test(tc, new_scalars_loaded);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = optim_more_suite();
    return cg_test_run(&s, 1);
}
