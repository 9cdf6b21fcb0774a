/* Check suite "optim": optim/optim.h's optimizers against PyTorch.
 *
 * Expected values come from PyTorch through tests/fixtures/optim_expected.h
 * (written by tests/fixtures/make_optim_expected.py): four parameters with
 * per-parameter weight decay, four steps with a learning rate set before
 * each, one parameter without a gradient at step 1 and one never with one.
 * Also: clipping against torch.nn.utils.clip_grad_norm_, the NaN/Inf check,
 * and errors. Their state files: test_optim_state.c; schedules and
 * learning-rate scales: test_optim_lr.c (the rig: tests/optim_rig.h). */

#include "tests/optim_rig.h"

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

/* Every one within 1e-7 + 1e-6 relative of PyTorch at every step. */
START_TEST(more_optimizers)
{
    check_against_torch(more_config(_i), more_lrs[_i], more_expect[_i], NULL);
}
END_TEST

/* The new types' and options' bad hyper-parameters refused as PyTorch's
 * constructors refuse them, a bf16 gradient as every type refuses it, and
 * state asked by a name the optimizer does not keep. */
START_TEST(more_refusals)
{
    cg_tensor *ps[OPT_NPARAMS];
    make_params(ps);
    const cg_optim_param w = {"w", ps[0], 0};
    static const struct {
        int cfg; /* more_config's */
        size_t off;
        double v;
        const char *msg;
    } bad[] = {
        {0, offsetof(cg_optim_config, alpha), -0.5, "rmsprop alpha -0.5 must be finite and >= 0"},
        {0, offsetof(cg_optim_config, alpha), INFINITY, "rmsprop alpha inf must be finite"},
        {1, offsetof(cg_optim_config, momentum), NAN, "rmsprop momentum nan must be finite"},
        {2, offsetof(cg_optim_config, eps), -1e-8, "rmsprop eps -1e-08 must be finite and >= 0"},
        {4, offsetof(cg_optim_config, lr_decay), -0.1, "adagrad lr_decay -0.1 must be finite"},
        {5, offsetof(cg_optim_config, initial_accumulator_value), -1,
         "adagrad initial_accumulator_value -1 must be finite and >= 0"},
        {5, offsetof(cg_optim_config, eps), NAN, "adagrad eps nan must be finite"},
        {4, offsetof(cg_optim_config, lr), -1, "learning rate -1 must be finite"},
        {6, offsetof(cg_optim_config, beta2), 1.0, "adam betas[1] 1 must be in [0, 1)"},
        {8, offsetof(cg_optim_config, dampening), NAN, "sgd dampening nan must be finite"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cg_optim_config c = more_config(bad[i].cfg);
        *(double *)((char *)&c + bad[i].off) = bad[i].v;
        CG_ASSERT_FAILS(cg_optim_new(&c, 1, &w), bad[i].msg);
    }
    /* PyTorch: "Nesterov momentum requires a momentum and zero dampening" */
    cg_optim_config c = cg_sgd_config(0.1, 0.9, true);
    c.dampening = 0.1;
    CG_ASSERT_FAILS(cg_optim_new(&c, 1, &w),
                    "Nesterov momentum needs momentum > 0 and dampening 0");
    c.dampening = 1.5; /* PyTorch takes any dampening without nesterov */
    c.nesterov = false;
    cg_optim *o = cg_optim_new(&c, 1, &w);
    ck_assert_msg(o != NULL, "%s", cg_last_error());
    cg_optim_free(o);

    /* Adagrad's sum starts at initial_accumulator_value; a bf16 gradient
     * is refused (a float32 parameter's), nothing moved */
    c = more_config(5);
    o = cg_optim_new(&c, 1, &w);
    ck_assert_ptr_nonnull(o);
    const cg_tensor *sum = cg_optim_state(o, 0, "sum");
    ck_assert_ptr_nonnull(sum);
    for (int e = 0; e < 12; e++)
        ck_assert(cg_data((cg_tensor *)sum)[e] == 0.5f);
    cg_tensor *g = cg_full(CG_SHAPE(3, 4), 1.0f);
    ps[0]->grad = cg_to(g, CG_BF16);
    cg_release(g);
    CG_ASSERT_FAILS(cg_optim_step(o) ? (void *)1 : NULL,
                    "gradient of 'w' is bfloat16, expected float32");
    ck_assert(cg_data(ps[0])[0] == OPT_P0[0] && cg_data((cg_tensor *)sum)[0] == 0.5f);
    CG_ASSERT_FAILS(cg_optim_state(o, 0, "exp_avg"),
                    "adagrad optimizer has no state 'exp_avg' (it keeps sum)");
    cg_optim_free(o);
    c = more_config(0); /* plain RMSprop: no momentum_buffer, no grad_avg */
    o = cg_optim_new(&c, 1, &w);
    CG_ASSERT_FAILS(cg_optim_state(o, 0, "grad_avg"), "(it keeps square_avg)");
    ck_assert(!cg_optim_keeps(&c, CG_OPTIM_BUF_MOMENTUM) &&
              cg_optim_keeps(&c, CG_OPTIM_BUF_SQUARE_AVG));
    /* the buffers a parameter: plain SGD 0, with momentum 1, Adam 2 (3
     * with amsgrad), RMSprop 1 to 3, Adagrad 1 */
    cg_optim_config amsgrad = cg_adam_config(1e-3, 0.9, 0.999, 1e-8);
    amsgrad.amsgrad = true;
    const cg_optim_config cs[7] = {cg_sgd_config(0.1, 0, false),
                                   cg_sgd_config(0.1, 0.9, false),
                                   cg_adamw_config(1e-3, 0.9, 0.999, 1e-8),
                                   amsgrad,
                                   c,
                                   cg_rmsprop_config(0.01, 0.99, 1e-8, 0.9, true),
                                   cg_adagrad_config(0.01, 0, 0, 1e-10)};
    const int nb[7] = {0, 1, 2, 3, 1, 3, 1};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(cg_optim_n_buffers(&cs[i]), nb[i]);
    ck_assert_int_eq(cg_optim_n_buffers(NULL), 0);
    ck_assert_ptr_null(cg_optim_buffer_name(0));
    ck_assert_ptr_null(cg_optim_buffer_name(CG_OPTIM_NBUFS));
    ck_assert_str_eq(cg_optim_type_name(CG_OPTIM_RMSPROP), "rmsprop");
    ck_assert_str_eq(cg_optim_type_name(CG_OPTIM_ADAGRAD), "adagrad");
    cg_optim_free(o);
    release_params(ps);
}
END_TEST

/* PyTorch's defaults */
START_TEST(more_defaults)
{
    cg_optim_config r = cg_rmsprop_default(0.5), a = cg_adagrad_default(0.25);
    ck_assert(r.type == CG_OPTIM_RMSPROP && r.lr == 0.5 && r.alpha == 0.99 && r.eps == 1e-8 &&
              r.momentum == 0 && !r.centered);
    ck_assert(a.type == CG_OPTIM_ADAGRAD && a.lr == 0.25 && a.lr_decay == 0 &&
              a.initial_accumulator_value == 0 && a.eps == 1e-10);
    ck_assert(!cg_adam_default(1).amsgrad && cg_sgd_default(1).dampening == 0);
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

/* The new types and options on the OpenMP path: same bits for 1 and 2
 * threads, every state buffer too. */
START_TEST(more_thread_independent) { thread_case(more_config(_i)); }
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
    bad.type = CG_OPTIM_NTYPES;
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
    tcase_add_loop_test(tc, more_optimizers, 0, N_MORE);
    tcase_add_test(tc, skip_param_without_grad);
    tcase_add_test(tc, step_with_autograd);
    tcase_add_test(tc, step_thread_independent);
    tcase_add_test(tc, step_across_chunks);
    tcase_add_loop_test(tc, more_thread_independent, 0, N_MORE);
    tcase_add_test(tc, more_refusals);
    tcase_add_test(tc, more_defaults);
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

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, build_errors);
    tcase_add_test(tc, step_errors);
    tcase_add_test(tc, accessors);
    tcase_add_test(tc, from_module);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = optim_suite();
    return cg_test_run(&s, 1);
}
