/* Group and instance normalisation (autograd/ops.h cg_group_norm,
 * cg_instance_norm; nn/batchnorm.h GroupNorm, InstanceNorm1d/2d):
 * gradchecks over groups, affine options and layouts; values and running
 * statistics against numbers computed here in double; the modules' names,
 * unbatched input and train/eval; the same bits at 1 and 2 threads;
 * refusals in one line. PyTorch's values and gradients:
 * tests/interop/norm.py + check_norm.c (torch_norm). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/batchnorm.h"
#include "tests/testutil.h"

typedef struct {
    int64_t G;
    bool instance, use_input_stats;
    cg_tensor *rm, *rv;
} norm_ctx;

static cg_tensor *norm_fn(void *ctx, cg_tensor *const *in)
{
    const norm_ctx *c = ctx;
    if (c->instance)
        return cg_instance_norm(in[0], c->rm, c->rv, in[1], in[2], c->use_input_stats, 0.1f, 1e-5f);
    return cg_group_norm(in[0], c->G, in[1], in[2], 1e-5f);
}

static const int64_t SHAPES[3][4] = {{4, 6, 0, 0}, {3, 6, 5, 0}, {2, 6, 4, 3}};
static const int NDS[3] = {2, 3, 4};

/* inputs x (layout), weight? (affine bit 1), bias? (bit 2) */
static void make_inputs(cg_rng *r, int s, int layout, int affine, cg_tensor *in[3])
{
    in[0] = cg_requires_grad(cg_test_randn_layout(r, NDS[s], SHAPES[s], layout), true);
    in[1] = (affine & 1) ? cg_requires_grad(cg_randn(r, CG_SHAPE(6)), true) : NULL;
    in[2] = (affine & 2) ? cg_requires_grad(cg_randn(r, CG_SHAPE(6)), true) : NULL;
}

START_TEST(test_group_norm_gradcheck)
{
    cg_rng r = cg_rng_new(11);
    const int64_t groups[4] = {1, 2, 3, 6};
    for (int s = 0; s < 3; s++)
        for (int gi = 0; gi < 4; gi++)
            for (int affine = 0; affine < 4; affine++) {
                const int layout = (s + gi + affine) % 3;
                norm_ctx c = {.G = groups[gi]};
                cg_tensor *in[3];
                make_inputs(&r, s, layout, affine, in);
                cg_gradcheck_report rep;
                ck_assert_msg(cg_gradcheck(norm_fn, &c, 3, in, NULL, &rep),
                              "shape %d G %lld affine %d layout %d: %s", s, (long long)c.G, affine,
                              layout, rep.message);
                if (affine == 3 && gi == 1)
                    cg_test_check_unread(norm_fn, &c, 3, in, "group_norm");
                cg_release_all(3, in[0], in[1], in[2]);
            }
}
END_TEST

START_TEST(test_instance_norm_gradcheck)
{
    cg_rng r = cg_rng_new(12);
    for (int s = 1; s < 3; s++)              /* instance norm needs a spatial dim */
        for (int mode = 0; mode < 3; mode++) /* input stats, + running, running only */
            for (int affine = 0; affine < 4; affine++) {
                cg_tensor *rm = cg_randn(&r, CG_SHAPE(6)), *rv = cg_rand(&r, CG_SHAPE(6));
                norm_ctx c = {.instance = true,
                              .use_input_stats = mode < 2,
                              .rm = mode ? rm : NULL,
                              .rv = mode ? rv : NULL};
                cg_tensor *in[3];
                make_inputs(&r, s, (s + affine) % 3, affine, in);
                cg_gradcheck_report rep;
                ck_assert_msg(cg_gradcheck(norm_fn, &c, 3, in, NULL, &rep),
                              "shape %d mode %d affine %d: %s", s, mode, affine, rep.message);
                cg_release_all(5, in[0], in[1], in[2], rm, rv);
            }
}
END_TEST

/* group norm's value at element (n, c, k) of x [N, C, S], worked in double */
static double gn_ref(const float *x, int64_t N, int64_t C, int64_t S, int64_t G, const float *w,
                     const float *b, int64_t n, int64_t c, int64_t k)
{
    (void)N;
    const int64_t Cg = C / G, c0 = c / Cg * Cg;
    double s = 0, q = 0;
    for (int64_t j = 0; j < Cg * S; j++)
        s += x[(n * C + c0) * S + j];
    const double mean = s / (double)(Cg * S);
    for (int64_t j = 0; j < Cg * S; j++)
        q += (x[(n * C + c0) * S + j] - mean) * (x[(n * C + c0) * S + j] - mean);
    const double var = q / (double)(Cg * S);
    return (x[(n * C + c) * S + k] - mean) / sqrt(var + 1e-5) * (w ? w[c] : 1) + (b ? b[c] : 0);
}

START_TEST(test_group_norm_values)
{
    cg_rng r = cg_rng_new(13);
    enum { N = 3, C = 6, S = 7 };
    const int64_t groups[3] = {1, 3, 6};
    for (int gi = 0; gi < 3; gi++) {
        cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(N, C, S), 1);
        cg_tensor *w = cg_randn(&r, CG_SHAPE(C)), *b = cg_randn(&r, CG_SHAPE(C));
        float *xv = cg_test_values(x);
        cg_tensor *y = cg_group_norm(x, groups[gi], w, b, 1e-5f);
        ck_assert_msg(y, "%s", cg_last_error());
        float want[N * C * S];
        for (int64_t i = 0; i < N * C * S; i++)
            want[i] = (float)gn_ref(xv, N, C, S, groups[gi], cg_data(w), cg_data(b), i / (C * S),
                                    i / S % C, i % S);
        CG_ASSERT_TENSOR(y, want, 1e-5, 1e-5);
        if (groups[gi] == C) { /* instance norm is group norm with a group a channel: bits */
            cg_tensor *yi = cg_instance_norm(x, NULL, NULL, w, b, true, 0.1f, 1e-5f);
            ck_assert(yi && !memcmp(cg_data(yi), cg_data(y), sizeof want));
            cg_release(yi);
        }
        free(xv);
        cg_release_all(4, x, w, b, y);
    }
}
END_TEST

/* Training moves the running statistics as PyTorch: toward the batch's
 * average of the instance means and unbiased variances; eval uses them */
START_TEST(test_instance_norm_running)
{
    cg_rng r = cg_rng_new(14);
    enum { N = 3, C = 2, S = 5 };
    cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(N, C, S), 2);
    cg_tensor *rm = cg_randn(&r, CG_SHAPE(C)), *rv = cg_rand(&r, CG_SHAPE(C));
    float *xv = cg_test_values(x), rm0[C], rv0[C];
    memcpy(rm0, cg_data(rm), sizeof rm0);
    memcpy(rv0, cg_data(rv), sizeof rv0);
    cg_tensor *y = cg_instance_norm(x, rm, rv, NULL, NULL, true, 0.3f, 1e-5f);
    ck_assert_msg(y, "%s", cg_last_error());
    for (int c = 0; c < C; c++) {
        double am = 0, av = 0;
        for (int n = 0; n < N; n++) {
            double s = 0, q = 0;
            for (int k = 0; k < S; k++)
                s += xv[(n * C + c) * S + k];
            for (int k = 0; k < S; k++)
                q += pow(xv[(n * C + c) * S + k] - s / S, 2);
            am += s / S / N;
            av += q / (S - 1) / N;
        }
        ck_assert_double_eq_tol(cg_data(rm)[c], 0.7 * rm0[c] + 0.3 * am, 1e-6);
        ck_assert_double_eq_tol(cg_data(rv)[c], 0.7 * rv0[c] + 0.3 * av, 1e-6);
    }
    cg_tensor *ye = cg_instance_norm(x, rm, rv, NULL, NULL, false, 0.3f, 1e-5f);
    ck_assert_msg(ye, "%s", cg_last_error());
    float want[N * C * S];
    for (int i = 0; i < N * C * S; i++)
        want[i] = (float)((xv[i] - cg_data(rm)[i / S % C]) / sqrt(cg_data(rv)[i / S % C] + 1e-5));
    CG_ASSERT_TENSOR(ye, want, 1e-5, 1e-5);
    free(xv);
    cg_release_all(5, x, rm, rv, y, ye);
}
END_TEST

START_TEST(test_norm_refusals)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 6, 3)), *x2 = cg_zeros(CG_SHAPE(2, 6)),
              *w = cg_ones(CG_SHAPE(4)), *xb = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 6, 3)),
              *x1 = cg_zeros(CG_SHAPE(6)), *wb = cg_full_dtype(CG_BF16, CG_SHAPE(6), 1.0);
    CG_ASSERT_REFUSED(!cg_group_norm(x, 4, NULL, NULL, 1e-5f),
                      "group_norm: num_groups 4, expected a divisor of the 6 channels of input "
                      "[2, 6, 3]");
    CG_ASSERT_REFUSED(!cg_group_norm(x, 0, NULL, NULL, 1e-5f), "num_groups 0");
    CG_ASSERT_REFUSED(!cg_group_norm(x, 2, w, NULL, 1e-5f),
                      "group_norm: argument 'weight' has shape [4], expected [C] = [6]");
    CG_ASSERT_REFUSED(!cg_group_norm(xb, 2, NULL, NULL, 1e-5f),
                      "group_norm: argument 'input' is int64, expected a float tensor (float32, "
                      "bfloat16 or float16)");
    CG_ASSERT_REFUSED(!cg_batch_norm(xb, NULL, NULL, NULL, NULL, true, 0.1f, 1e-5f),
                      "batch_norm: argument 'input' is int64, expected a float tensor");
    CG_ASSERT_REFUSED(!cg_group_norm(x, 2, wb, NULL, 1e-5f),
                      "group_norm: argument 'weight' is bfloat16, expected float32");
    CG_ASSERT_REFUSED(!cg_batch_norm(x, NULL, NULL, NULL, wb, true, 0.1f, 1e-5f),
                      "batch_norm: argument 'bias' is bfloat16, expected float32");
    CG_ASSERT_REFUSED(!cg_group_norm(x1, 2, NULL, NULL, 1e-5f), "expected [N, C, ...]");
    CG_ASSERT_REFUSED(!cg_group_norm(x, 2, NULL, NULL, -1.0f), "group_norm: eps -1");
    cg_tensor *one = cg_zeros(CG_SHAPE(1, 6)); /* PyTorch's rule: N C / G positions of 1 */
    CG_ASSERT_REFUSED(!cg_group_norm(one, 6, NULL, NULL, 1e-5f),
                      "group_norm: expected more than 1 value per channel when training, got "
                      "input size [1, 6]");
    cg_release(one);
    CG_ASSERT_REFUSED(!cg_instance_norm(x2, NULL, NULL, NULL, NULL, true, 0.1f, 1e-5f),
                      "instance_norm: expected more than 1 spatial element when training, got "
                      "input size [2, 6]");
    CG_ASSERT_REFUSED(!cg_instance_norm(x, NULL, NULL, NULL, NULL, false, 0.1f, 1e-5f),
                      "instance_norm: eval (training false) needs running_mean");
    CG_ASSERT_REFUSED(!cg_instance_norm(x, w, NULL, NULL, NULL, true, 0.1f, 1e-5f),
                      "instance_norm: argument 'running_mean' has shape [4]");
    CG_ASSERT_REFUSED(!cg_instance_norm(x, NULL, NULL, NULL, w, true, 0.1f, 1e-5f),
                      "instance_norm: argument 'bias' has shape [4]");
    CG_ASSERT_REFUSED(!cg_groupnorm_new(4, 6, 1e-5f, true), "GroupNorm: num_groups 4");
    cg_batchnorm_opts o = cg_instancenorm_opts_default();
    o.cumulative_average = true;
    CG_ASSERT_REFUSED(!cg_instancenorm1d_new(6, &o), "InstanceNorm1d: momentum None");
    cg_instancenorm *in = cg_instancenorm2d_new(6, NULL);
    CG_ASSERT_REFUSED(!cg_instancenorm_forward(in, x2),
                      "InstanceNorm2d: input [2, 6], expected [N, C, H, W] or [C, H, W]");
    cg_groupnorm *gn = cg_groupnorm_new(3, 6, 1e-5f, true);
    cg_tensor *x5 = cg_zeros(CG_SHAPE(2, 5, 3));
    CG_ASSERT_REFUSED(!cg_groupnorm_forward(gn, x5), "group_norm: num_groups 3");
    cg_module_free(CG_MODULE(in));
    cg_module_free(CG_MODULE(gn));
    cg_release_all(7, x, x2, w, xb, x1, x5, wb);
}
END_TEST

/* A reduced-precision x: config k is batch norm training (0) and eval
 * (1), group norm (2), instance norm on its own statistics (3) and on the
 * running ones (4); running statistics rm, rv */
static cg_tensor *norm_k(int k, cg_tensor *x, cg_tensor *w, cg_tensor *b, cg_tensor *rm,
                         cg_tensor *rv)
{
    if (k < 2)
        return cg_batch_norm(x, rm, rv, w, b, k == 0, 0.1f, 1e-5f);
    if (k == 2)
        return cg_group_norm(x, 3, w, b, 1e-5f);
    return cg_instance_norm(x, rm, rv, w, b, k == 3, 0.1f, 1e-5f);
}

/* t's values as float32 bits (a bfloat16 t widened exactly), malloc'd */
static float *f32_values(const cg_tensor *t)
{
    cg_tensor *f = cg_to(t, CG_F32);
    ck_assert_msg(f, "%s", cg_last_error());
    float *v = cg_test_values(f);
    cg_release(f);
    return v;
}

static void assert_same(const cg_tensor *a, const cg_tensor *b, const char *what, int k)
{
    ck_assert_msg(a && b, "config %d %s: %s", k, what, cg_last_error());
    ck_assert_int_eq(cg_numel(a), cg_numel(b));
    float *u = f32_values(a), *v = f32_values(b);
    ck_assert_msg(!memcmp(u, v, (size_t)cg_numel(a) * sizeof *u), "config %d: %s differs", k, what);
    free(u);
    free(v);
}

/* bfloat16 x: the output and x's gradient are bfloat16, the bits of the
 * float32 computation on x widened, rounded; the weight's and bias's
 * gradients and the running statistics float32, the same bits (PyTorch's
 * mixed-type batch norm; its float kernels keep reduced precision the
 * same way) */
START_TEST(test_norms_bf16_input)
{
    for (int k = 0; k < 5; k++) {
        cg_rng r = cg_rng_new(40 + (uint64_t)k);
        cg_tensor *xf = cg_test_randn_layout(&r, CG_SHAPE(3, 6, 4, 5), k % 3);
        cg_tensor *x16 = cg_requires_grad(cg_k_to(xf, CG_BF16), true);
        cg_tensor *x32 = cg_requires_grad(cg_k_to(x16, CG_F32), true);
        cg_tensor *gf = cg_randn(&r, CG_SHAPE(3, 6, 4, 5));
        cg_tensor *g16 = cg_to(gf, CG_BF16), *g32 = cg_to(g16, CG_F32);
        cg_tensor *w[2], *b[2], *rm[2], *rv[2], *y[2], *l[2];
        cg_tensor *w0 = cg_randn(&r, CG_SHAPE(6)), *b0 = cg_randn(&r, CG_SHAPE(6));
        cg_tensor *m0 = cg_randn(&r, CG_SHAPE(6)), *v0 = cg_rand(&r, CG_SHAPE(6));
        for (int p = 0; p < 2; p++) {
            w[p] = cg_requires_grad(cg_clone(w0), true);
            b[p] = cg_requires_grad(cg_clone(b0), true);
            rm[p] = cg_clone(m0);
            rv[p] = cg_clone(v0);
            y[p] = norm_k(k, p ? x32 : x16, w[p], b[p], rm[p], rv[p]);
            cg_tensor *yg = cg_mul(y[p], p ? g32 : g16);
            l[p] = cg_sum_all(yg);
            cg_release(yg);
            ck_assert_msg(l[p] && cg_backward(l[p], NULL, false), "config %d: %s", k,
                          cg_last_error());
        }
        ck_assert_int_eq(y[0]->dtype, CG_BF16);
        ck_assert_int_eq(cg_grad(x16)->dtype, CG_BF16);
        if (k == 2) { /* core's backward alone: dx in x's dtype */
            cg_tensor *m, *is, *dx = NULL, *o = cg_k_group_norm(x16, 3, NULL, NULL, 1e-5f, &m, &is);
            ck_assert_msg(o && cg_k_group_norm_backward(x16, g16, NULL, m, is, 3, &dx, NULL, NULL),
                          "%s", cg_last_error());
            ck_assert_int_eq(dx->dtype, CG_BF16);
            cg_release_all(4, o, m, is, dx);
        }
        cg_tensor *y32 = cg_to(y[1], CG_BF16), *dx32 = cg_to(cg_grad(x32), CG_BF16);
        assert_same(y[0], y32, "output", k);
        assert_same(cg_grad(x16), dx32, "x's gradient", k);
        assert_same(cg_grad(w[0]), cg_grad(w[1]), "weight's gradient", k);
        assert_same(cg_grad(b[0]), cg_grad(b[1]), "bias's gradient", k);
        assert_same(rm[0], rm[1], "running_mean", k);
        assert_same(rv[0], rv[1], "running_var", k);
        cg_release_all(8, y32, dx32, xf, x16, x32, g16, g32, w0);
        cg_release_all(4, b0, m0, v0, gf);
        for (int p = 0; p < 2; p++)
            cg_release_all(6, w[p], b[p], rm[p], rv[p], y[p], l[p]);
    }
}
END_TEST

/* The modules: PyTorch's names, unbatched input, train and eval */
START_TEST(test_norm_modules)
{
    cg_rng r = cg_rng_new(15);
    cg_groupnorm *gn = cg_groupnorm_new(2, 4, 1e-5f, true);
    ck_assert(gn && CG_MODULE(gn)->n_params == 2);
    cg_param_list sd = {0};
    ck_assert(cg_module_state_dict(CG_MODULE(gn), &sd));
    ck_assert_int_eq(sd.n, 2);
    ck_assert_str_eq(sd.items[0].name, "weight");
    ck_assert_str_eq(sd.items[1].name, "bias");
    cg_param_list_free(&sd);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 4, 2, 5)), *y = cg_groupnorm_forward(gn, x);
    cg_tensor *want = cg_group_norm(x, 2, NULL, NULL, 1e-5f);
    ck_assert(y && want && !memcmp(cg_data(y), cg_data(want), 120 * sizeof(float)));
    cg_release_all(3, x, y, want);
    cg_module_free(CG_MODULE(gn));
    gn = cg_groupnorm_new(2, 4, 1e-5f, false);
    ck_assert(gn && CG_MODULE(gn)->n_params == 0);
    cg_module_free(CG_MODULE(gn));

    cg_batchnorm_opts o = cg_instancenorm_opts_default();
    cg_instancenorm *in = cg_instancenorm1d_new(3, NULL);
    ck_assert(in && CG_MODULE(in)->n_params == 0 && !in->running_mean);
    cg_module_free(CG_MODULE(in));
    o.affine = o.track_running_stats = true;
    in = cg_instancenorm1d_new(3, &o);
    const char *names[] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    ck_assert(cg_module_state_dict(CG_MODULE(in), &sd));
    ck_assert_int_eq(sd.n, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(sd.items[i].name, names[i]);
    cg_param_list_free(&sd);
    x = cg_randn(&r, CG_SHAPE(3, 6)); /* unbatched [C, L] */
    y = cg_instancenorm_forward(in, x);
    ck_assert_msg(y && y->ndim == 2 && y->shape[0] == 3, "%s", cg_last_error());
    cg_tensor *rm1 = cg_clone(in->running_mean);
    ck_assert_int_eq(cg_data_i64(in->num_batches_tracked)[0], 0); /* as PyTorch's */
    cg_release(y);
    cg_module_train(CG_MODULE(in), false); /* eval: the running statistics, unchanged */
    y = cg_instancenorm_forward(in, x);
    ck_assert_msg(y, "%s", cg_last_error());
    ck_assert(!memcmp(cg_data(rm1), cg_data(in->running_mean), 3 * sizeof(float)));
    for (int i = 0; i < 18; i++)
        ck_assert_double_eq_tol(cg_data(y)[i],
                                (cg_data(x)[i] - cg_data(in->running_mean)[i / 6]) /
                                    sqrt(cg_data(in->running_var)[i / 6] + 1e-5),
                                1e-5);
    cg_release_all(3, x, y, rm1);
    cg_module_free(CG_MODULE(in));
}
END_TEST

/* every op at nt threads: the loss, x's and w's gradients (malloc'd) */
static void run_at(int nt, float *got[3])
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(5);
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(8, 64, 20, 18), 1), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, CG_SHAPE(64)), true);
    cg_tensor *rm = cg_zeros(CG_SHAPE(64)), *rv = cg_ones(CG_SHAPE(64));
    cg_tensor *a = cg_group_norm(x, 8, w, NULL, 1e-5f);
    cg_tensor *b = cg_instance_norm(x, rm, rv, w, NULL, true, 0.1f, 1e-5f);
    cg_tensor *a2 = cg_mul(a, a), *ab = cg_mul(a2, b), *l = cg_sum_all(ab);
    ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
    const cg_tensor *t[3] = {l, cg_grad(x), cg_grad(w)};
    for (int k = 0; k < 3; k++)
        got[k] = cg_test_values(t[k]);
    cg_release_all(9, x, w, rm, rv, a, b, a2, ab, l);
    cg_set_num_threads(0);
}

START_TEST(test_norm_threads_identical)
{
    const int64_t n[3] = {1, 8 * 64 * 20 * 18, 64};
    cg_test_same_bits_1_2_threads(run_at, 3, n);
}
END_TEST

static Suite *norm_suite(void)
{
    Suite *s = suite_create("norm");
    TCase *tc = tcase_create("norm");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_group_norm_gradcheck);
    tcase_add_test(tc, test_instance_norm_gradcheck);
    tcase_add_test(tc, test_group_norm_values);
    tcase_add_test(tc, test_instance_norm_running);
    tcase_add_test(tc, test_norm_refusals);
    tcase_add_test(tc, test_norms_bf16_input);
    tcase_add_test(tc, test_norm_modules);
    tcase_add_test(tc, test_norm_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {norm_suite()};
    return cg_test_run(s, 1);
}
