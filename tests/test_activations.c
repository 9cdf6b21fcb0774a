/* The activations of 2026-12-07 (core/ops.h's rows: mish, hardswish,
 * hardsigmoid, relu6, selu, softsign, logsigmoid, tanhshrink; hardtanh,
 * celu, softshrink, hardshrink, threshold with their parameters):
 *   - PyTorch 1.13's values and gradients at their kinks, signed zeros,
 *     NaN and infinities (its scalar loop's; torch_ops's nan_grad_paths
 *     says where its vectorised loop differs), element by element;
 *   - the parameters PyTorch refuses, refused in one line by the forward
 *     and the backward kernels;
 *   - bfloat16 in, bfloat16 out: the float32 result rounded;
 *   - the modules: the rows of nn's activation table (cg_activation_new,
 *     nn.Mish() ...) and those with parameters (cg_celu_new, ...), in a
 *     Sequential, each its function's bits.
 * Their values against a double reference are test_elementwise's, their
 * gradchecks test_grad_ops's, their random cases against PyTorch
 * torch_ops's. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/layers.h"
#include "tests/testutil.h"

#define NX 13
static const float X[NX] = {-3,        3,     0,    6,    -0.0f, NAN, INFINITY,
                            -INFINITY, -1.5f, 1.5f, 0.5f, -0.5f, 0.1f};

/* PyTorch 1.13's y and dy/dx at X (one element at a time: its scalar
 * loop), but for selu(-0) and celu(-0): -0 as cgrad's elu gives it (e^x - 1
 * taken as expm1, exact near 0), where PyTorch's scalar loop has +0 */
static cg_tensor *hardtanh_(cg_tensor *x) { return cg_hardtanh(x, -1.5f, 1.5f); }
static cg_tensor *celu_(cg_tensor *x) { return cg_celu(x, 0.5f); }
static cg_tensor *softshrink_(cg_tensor *x) { return cg_softshrink(x, 1.5f); }
static cg_tensor *hardshrink_(cg_tensor *x) { return cg_hardshrink(x, 1.5f); }
static cg_tensor *threshold_(cg_tensor *x) { return cg_threshold(x, 0.5f, -2.0f); }

static const struct {
    const char *name;
    cg_tensor *(*fn)(cg_tensor *);
    float y[NX], g[NX];
} TORCH[] = {
    {"hardswish",
     cg_hardswish,
     {-0.0f, 3, 0, 6, -0.0f, NAN, INFINITY, NAN, -0.375f, 1.125f, 0.2916666567325592f,
      -0.2083333283662796f, 0.05166666582226753f},
     {-0.5f, 1.5f, 0.5f, 1, 0.5f, 1, 1, 0, 0, 1, 0.6666666865348816f, 0.3333333134651184f,
      0.5333333611488342f}},
    {"hardsigmoid",
     cg_hardsigmoid,
     {0, 1, 0.5f, 1, 0.5f, NAN, 1, 0, 0.25f, 0.75f, 0.5833333134651184f, 0.4166666567325592f,
      0.5166666507720947f},
     {0, 0, 0.1666666716337204f, 0, 0.1666666716337204f, 0, 0, 0, 0.1666666716337204f,
      0.1666666716337204f, 0.1666666716337204f, 0.1666666716337204f, 0.1666666716337204f}},
    {"relu6",
     cg_relu6,
     {0, 3, 0, 6, -0.0f, NAN, 6, 0, 0, 1.5f, 0.5f, 0, 0.10000000149011612f},
     {0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 1}},
    {"selu",
     cg_selu,
     {-1.6705687046051025f, 3.1521029472351074f, 0, 6.304205894470215f, -0.0f, NAN, INFINITY,
      -1.7580993175506592f, -1.3658143281936646f, 1.5760514736175537f, 0.5253505110740662f,
      -0.6917581558227539f, 0.10507010668516159f},
     {0.08753060549497604f, 1.0507010221481323f, 1.7580993175506592f, 1.0507010221481323f,
      1.7580993175506592f, 1.0507010221481323f, 1.0507010221481323f, 0, 0.39228498935699463f,
      1.0507010221481323f, 1.0507010221481323f, 1.0663411617279053f, 1.0507010221481323f}},
    {"softsign",
     cg_softsign,
     {-0.75f, 0.75f, 0, 0.8571428656578064f, -0.0f, NAN, NAN, NAN, -0.6000000238418579f,
      0.6000000238418579f, 0.3333333432674408f, -0.3333333432674408f, 0.09090909361839294f},
     {0.0625f, 0.0625f, 1, 0.02040816843509674f, 1, NAN, NAN, NAN, 0.1599999964237213f,
      0.1599999964237213f, 0.444444477558136f, 0.444444477558136f, 0.8264462351799011f}},
    {"logsigmoid",
     cg_logsigmoid,
     {-3.0485873222351074f, -0.04858735203742981f, -0.6931471824645996f, -0.0024756852071732283f,
      -0.6931471824645996f, NAN, 0, -INFINITY, -1.7014132738113403f, -0.20141328871250153f,
      -0.4740769863128662f, -0.9740769863128662f, -0.6443966627120972f},
     {0.9525741338729858f, 0.04742587357759476f, 0.5f, 0.0024726232513785362f, 0.5f, NAN, 0, 1,
      0.8175745010375977f, 0.18242551386356354f, 0.3775406777858734f, 0.6224592924118042f,
      0.4750208258628845f}},
    {"tanhshrink",
     cg_tanhshrink,
     {-2.0049452781677246f, 2.0049452781677246f, 0, 5.000012397766113f, 0, NAN, INFINITY, -INFINITY,
      -0.5948517322540283f, 0.5948517322540283f, 0.037882834672927856f, -0.037882834672927856f,
      0.0003320053219795227f},
     {0.9901340007781982f, 0.9901340007781982f, 0, 0.9999754428863525f, 0, NAN, 1, 1,
      0.8192933797836304f, 0.8192933797836304f, 0.2135522961616516f, 0.2135522961616516f,
      0.009933710098266602f}},
    {"mish",
     cg_mish,
     {-0.14564746618270874f, 2.98653507232666f, 0, 5.999926567077637f, -0.0f, NAN, INFINITY, NAN,
      -0.2980997562408447f, 1.4033782482147217f, 0.37524524331092834f, -0.22074376046657562f,
      0.06317941844463348f},
     {-0.09339312463998795f, 1.0211069583892822f, 0.6000000238418579f, 1.000133991241455f,
      0.6000000238418579f, NAN, NAN, NAN, -0.0640978142619133f, 1.088487982749939f,
      0.8864244222640991f, 0.2895106375217438f, 0.6633368134498596f}},
    {"hardtanh(-1.5, 1.5)",
     hardtanh_,
     {-1.5f, 1.5f, 0, 1.5f, -0.0f, NAN, 1.5f, -1.5f, -1.5f, 1.5f, 0.5f, -0.5f,
      0.10000000149011612f},
     {0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1}},
    {"celu(0.5)",
     celu_,
     {-0.4987606108188629f, 3, 0, 6, -0.0f, NAN, INFINITY, -0.5f, -0.47510647773742676f, 1.5f, 0.5f,
      -0.31606027483940125f, 0.10000000149011612f},
     {0.0024787522852420807f, 1, 1, 1, 1, 1, 1, 0, 0.049787066876888275f, 1, 1, 0.3678794503211975f,
      1}},
    {"softshrink(1.5)",
     softshrink_,
     {-1.5f, 1.5f, 0, 4.5f, 0, 0, INFINITY, -INFINITY, 0, 0, 0, 0, 0},
     {1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0}},
    {"hardshrink(1.5)",
     hardshrink_,
     {-3, 3, 0, 6, 0, NAN, INFINITY, -INFINITY, 0, 0, 0, 0, 0},
     {1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0}},
    {"threshold(0.5, -2)",
     threshold_,
     {-2, 3, -2, 6, -2, NAN, INFINITY, -2, -2, 1.5f, -2, -2, -2},
     {0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0}},
};
#define N_TORCH (int)(sizeof TORCH / sizeof TORCH[0])

/* the same value: NaN as NaN, a zero's sign, an infinity, else within 2
 * ulps of float32 (libm's exp, log1p and tanh against PyTorch's) */
static bool same(float got, float want)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (want == 0 || isinf(want))
        return got == want && signbit(got) == signbit(want);
    return fabsf(got - want) <= 2.4e-7f * fabsf(want);
}

START_TEST(test_torch_points)
{
    for (int k = 0; k < N_TORCH; k++) {
        cg_tensor *x = cg_requires_grad(cg_from_data(CG_SHAPE(NX), X), true);
        cg_tensor *y = TORCH[k].fn(x);
        ck_assert_msg(y, "%s: %s", TORCH[k].name, cg_last_error());
        cg_tensor *s = cg_sum_all(y);
        ck_assert(cg_backward(s, NULL, false));
        const float *yv = cg_data(y), *gv = cg_data(cg_grad(x));
        for (int i = 0; i < NX; i++) {
            ck_assert_msg(same(yv[i], TORCH[k].y[i]), "%s(%g) = %.9g, PyTorch %.9g", TORCH[k].name,
                          (double)X[i], (double)yv[i], (double)TORCH[k].y[i]);
            ck_assert_msg(same(gv[i], TORCH[k].g[i]), "%s'(%g) = %.9g, PyTorch %.9g", TORCH[k].name,
                          (double)X[i], (double)gv[i], (double)TORCH[k].g[i]);
        }
        cg_release_all(3, s, y, x);
    }
}
END_TEST

/* The parameters PyTorch refuses: by both kernels, in one line */
START_TEST(test_parameters_refused)
{
    cg_tensor *x = cg_from_data(CG_SHAPE(2), (float[]){-1, 1});
    CG_ASSERT_REFUSED(cg_celu(x, 0.0f) == NULL, "celu: alpha cannot be 0 (got alpha 0)");
    CG_ASSERT_REFUSED(cg_k_celu_backward(x, x, 0.0f) == NULL,
                      "celu: alpha cannot be 0 (got alpha 0)");
    CG_ASSERT_REFUSED(cg_softshrink(x, -1.0f) == NULL,
                      "softshrink: lambd must be at least 0 (got lambd -1)");
    CG_ASSERT_REFUSED(cg_k_softshrink_backward(x, x, -1.0f) == NULL,
                      "softshrink: lambd must be at least 0");
    CG_ASSERT_REFUSED(cg_hardtanh(x, 1.0f, -1.0f) == NULL,
                      "hardtanh: min_val must be at most max_val (got min_val 1, max_val -1)");
    CG_ASSERT_REFUSED(cg_hardtanh(x, NAN, 1.0f) == NULL,
                      "hardtanh: min_val must be at most max_val");
    CG_ASSERT_REFUSED(cg_k_hardtanh_backward(x, x, 2.0f, 1.0f) == NULL,
                      "hardtanh: min_val must be at most");
    /* the edges PyTorch takes: min_val == max_val, lambd 0, a negative
     * hardshrink lambd, a negative celu alpha */
    cg_tensor *ok[4] = {cg_hardtanh(x, 0.5f, 0.5f), cg_softshrink(x, 0.0f), cg_hardshrink(x, -1.0f),
                        cg_celu(x, -1.0f)};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(ok[i], "%d: %s", i, cg_last_error());
    ck_assert(((float *)cg_data(ok[0]))[0] == 0.5f && ((float *)cg_data(ok[0]))[1] == 0.5f);
    ck_assert(((float *)cg_data(ok[2]))[0] == -1.0f); /* nothing lies in [1, -1] */
    cg_release_all(4, ok[0], ok[1], ok[2], ok[3]);
    cg_tensor *xi = cg_from_i64(CG_SHAPE(2), (int64_t[]){1, 2});
    CG_ASSERT_REFUSED(cg_mish(xi) == NULL, "mish: argument 1 is int64, expected a float tensor");
    CG_ASSERT_REFUSED(cg_threshold(xi, 0, 1) == NULL, "threshold: argument 1 is int64");
    CG_ASSERT_REFUSED(cg_relu6(NULL) == NULL, "relu6: input is NULL");
    cg_release_all(2, x, xi);
}
END_TEST

/* bfloat16 in, bfloat16 out: each row's float32 result of the widened
 * input, rounded once */
START_TEST(test_bf16)
{
    cg_rng r = cg_rng_new(11);
    cg_tensor *n = cg_randn(&r, CG_SHAPE(4, 33)), *xf = cg_muls(n, 3.0f);
    cg_tensor *xb = cg_to(xf, CG_BF16), *xw = cg_to(xb, CG_F32);
    cg_tensor *(*fns[])(cg_tensor *) = {cg_mish,   cg_hardswish, cg_hardsigmoid, cg_relu6,
                                        cg_selu,   cg_softsign,  cg_logsigmoid,  cg_tanhshrink,
                                        hardtanh_, celu_,        softshrink_,    hardshrink_,
                                        threshold_};
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        cg_tensor *yb = fns[k](xb), *yw = fns[k](xw);
        ck_assert(yb && yw && yb->dtype == CG_BF16);
        cg_tensor *want = cg_to(yw, CG_BF16);
        ck_assert_msg(!memcmp(cg_data_ptr(yb), cg_data_ptr(want), (size_t)cg_numel(yb) * 2),
                      "row %zu: bf16 result not the float32 one rounded", k);
        cg_release_all(3, yb, yw, want);
    }
    cg_release_all(4, n, xf, xb, xw);
}
END_TEST

/* The modules: each row of the table and each module with parameters is
 * its function, in a Sequential of PyTorch's names and types */
START_TEST(test_modules)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *n = cg_randn(&r, CG_SHAPE(3, 8)), *x = cg_muls(n, 2.5f);
    const struct {
        cg_act act;
        const char *type;
        cg_tensor *(*fn)(cg_tensor *);
    } rows[] = {{CG_ACT_TANH, "Tanh", cg_tanh},
                {CG_ACT_SIGMOID, "Sigmoid", cg_sigmoid},
                {CG_ACT_MISH, "Mish", cg_mish},
                {CG_ACT_HARDSWISH, "Hardswish", cg_hardswish},
                {CG_ACT_HARDSIGMOID, "Hardsigmoid", cg_hardsigmoid},
                {CG_ACT_RELU6, "ReLU6", cg_relu6},
                {CG_ACT_SELU, "SELU", cg_selu},
                {CG_ACT_SOFTSIGN, "Softsign", cg_softsign},
                {CG_ACT_LOGSIGMOID, "LogSigmoid", cg_logsigmoid},
                {CG_ACT_TANHSHRINK, "Tanhshrink", cg_tanhshrink}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cg_module *m = cg_activation_new(rows[i].act);
        ck_assert_str_eq(m->type, rows[i].type);
        cg_tensor *a = cg_module_forward(m, x), *b = rows[i].fn(x);
        ck_assert(!memcmp(cg_data(a), cg_data(b), sizeof(float) * 24));
        cg_release_all(2, a, b);
        cg_module_free(m);
    }
    const struct {
        cg_module *m;
        const char *type;
        cg_tensor *(*fn)(cg_tensor *);
    } params[] = {{cg_hardtanh_new(-1.5f, 1.5f), "Hardtanh", hardtanh_},
                  {cg_celu_new(0.5f), "CELU", celu_},
                  {cg_softshrink_new(1.5f), "Softshrink", softshrink_},
                  {cg_hardshrink_new(1.5f), "Hardshrink", hardshrink_},
                  {cg_threshold_new(0.5f, -2.0f), "Threshold", threshold_}};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        ck_assert_str_eq(params[i].m->type, params[i].type);
        cg_tensor *a = cg_module_forward(params[i].m, x), *b = params[i].fn(x);
        ck_assert(!memcmp(cg_data(a), cg_data(b), sizeof(float) * 24));
        cg_release_all(2, a, b);
        cg_module_free(params[i].m);
    }
    /* nn.Sequential(Linear(8, 8), LeakyReLU(0.2), Linear(8, 8), ELU(0.5),
     * Linear(8, 4), Softplus(2, 10)): the names of PyTorch's, the bits of
     * the functions one by one */
    cg_linear *l[3] = {cg_linear_new(8, 8, true, &r), cg_linear_new(8, 8, true, &r),
                       cg_linear_new(8, 4, true, &r)};
    cg_module *s = cg_sequential(6, l[0], cg_leaky_relu_new(0.2f), l[1], cg_elu_new(0.5f), l[2],
                                 cg_softplus_new(2.0f, 10.0f));
    ck_assert_msg(s, "%s", cg_last_error());
    ck_assert_str_eq(s->children[1].module->type, "LeakyReLU");
    ck_assert_str_eq(s->children[3].module->type, "ELU");
    ck_assert_str_eq(s->children[5].module->type, "Softplus");
    cg_param_list pl = {0};
    ck_assert(cg_module_params(s, &pl));
    ck_assert_int_eq(pl.n, 6);
    ck_assert_str_eq(pl.items[2].name, "2.weight");
    ck_assert_str_eq(pl.items[5].name, "4.bias");
    cg_param_list_free(&pl);
    cg_tensor *y = cg_module_forward(s, x);
    cg_tensor *h0 = cg_linear_forward(l[0], x), *a0 = cg_leaky_relu(h0, 0.2f);
    cg_tensor *h1 = cg_linear_forward(l[1], a0), *a1 = cg_elu(h1, 0.5f);
    cg_tensor *h2 = cg_linear_forward(l[2], a1), *want = cg_softplus(h2, 2.0f, 10.0f);
    ck_assert(y && !memcmp(cg_data(y), cg_data(want), sizeof(float) * 12));
    cg_release_all(7, y, h0, a0, h1, a1, h2, want);
    cg_module_free(s);
    /* a module's forward meets its function's checks */
    cg_module *bad = cg_celu_new(0.0f);
    CG_ASSERT_REFUSED(cg_module_forward(bad, x) == NULL, "celu: alpha cannot be 0");
    cg_module_free(bad);
    cg_release_all(2, n, x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("activations");
    TCase *tc = tcase_create("activations");
    tcase_add_test(tc, test_torch_points);
    tcase_add_test(tc, test_parameters_refused);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_modules);
    suite_add_tcase(s, tc);
    Suite *all[] = {s};
    return cg_test_run(all, 1);
}
