/* Check suite "elementwise": core/elementwise.c against naive loops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "core/elementwise_impl.h"
#include "core/ops.h"
#include "core/vmath.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------ helpers */
/* Element of t at the output index idx (nd dims), broadcasting t. */
static double bget(const cg_tensor *t, int nd, const int64_t *idx)
{
    int64_t ti[CG_MAX_DIMS];
    int lead = nd - t->ndim;
    ck_assert(lead >= 0 && nd <= CG_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        ti[i] = t->shape[i] == 1 ? 0 : idx[(unsigned)(i + lead) % CG_MAX_DIMS];
    return cg_get(t, ti);
}

/* Advance a row-major multi-index; false when done. */
static bool next_index(int nd, const int64_t *shape, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return true;
        idx[d] = 0;
    }
    return false;
}

static void assert_shape(const cg_tensor *t, int nd, const int64_t *shape)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ndim, nd);
    for (int i = 0; i < nd; i++)
        ck_assert_int_eq(t->shape[i], shape[i]);
    ck_assert(cg_is_contiguous(t));
}

typedef double (*ref1_fn)(double x);
typedef double (*ref2_fn)(double x, double y);
typedef double (*ref3_fn)(double c, double x, double y);

/* Expected values of an n-ary op over the broadcast shape: ref of the
 * operands, or for a backward of two (x, g), g * deriv(x) when deriv is
 * given. */
static float *expect_nary_d(int n, const cg_tensor **in, int nd, const int64_t *shape, void *ref,
                            ref1_fn deriv)
{
    int64_t total = cg_numel_shape(nd, shape);
    float *e = malloc((size_t)(total ? total : 1) * sizeof(float));
    int64_t idx[CG_MAX_DIMS] = {0};
    for (int64_t k = 0; k < total; k++) {
        double v[3];
        for (int i = 0; i < n; i++)
            v[i] = bget(in[i], nd, idx);
        double r = deriv    ? v[1] * deriv(v[0])
                   : n == 1 ? ((ref1_fn)ref)(v[0])
                   : n == 2 ? ((ref2_fn)ref)(v[0], v[1])
                            : ((ref3_fn)ref)(v[0], v[1], v[2]);
        e[k] = (float)r;
        next_index(nd, shape, idx);
    }
    return e;
}

static float *expect_nary(int n, const cg_tensor **in, int nd, const int64_t *shape, void *ref)
{
    return expect_nary_d(n, in, nd, shape, ref, NULL);
}

/* ---------------------------------------------------- reference math */
static double r_neg(double x) { return -x; }
static double r_exp(double x) { return exp(x); }
static double r_log(double x) { return log(x); }
static double r_sqrt(double x) { return sqrt(x); }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_pow2(double x) { return x * x; }
static double r_pow3(double x) { return x * x * x; }
static double r_pow25(double x) { return pow(x, 2.5); }
static double r_powm15(double x) { return pow(x, -1.5); }
static double r_tanh(double x) { return tanh(x); }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* tanh-form GELU in double, as x * sigmoid(2u) (0.5 (1 + tanh u) =
 * sigmoid(2u)), which keeps relative accuracy for negative x */
static double r_gelu(double x)
{
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}
static double r_gelu_grad(double x)
{
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
    double s = 1.0 / (1.0 + exp(-2.0 * u));
    /* = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh u */
    return s + 2.0 * x * s * (1.0 - s) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
static double r_clamp(double x) { return x < -0.5 ? -0.5 : (x > 0.7 ? 0.7 : x); }
static double r_adds(double x) { return x + 1.25; }
static double r_muls(double x) { return x * -3.0; }

static cg_tensor *k_pow2(const cg_tensor *a) { return cg_k_pow(a, 2.0f); }
static cg_tensor *k_pow3(const cg_tensor *a) { return cg_k_pow(a, 3.0f); }
static cg_tensor *k_pow25(const cg_tensor *a) { return cg_k_pow(a, 2.5f); }
static cg_tensor *k_powm15(const cg_tensor *a) { return cg_k_pow(a, -1.5f); }
static cg_tensor *k_clamp(const cg_tensor *a) { return cg_k_clamp(a, -0.5f, 0.7f); }
static cg_tensor *k_adds(const cg_tensor *a) { return cg_k_adds(a, 1.25f); }
static cg_tensor *k_muls(const cg_tensor *a) { return cg_k_muls(a, -3.0f); }

typedef cg_tensor *(*k1_fn)(const cg_tensor *);
typedef struct {
    const char *name;
    k1_fn k;
    ref1_fn ref;
} unary_k;
static const unary_k UNARY[] = {
    {"neg", cg_k_neg, r_neg},
    {"exp", cg_k_exp, r_exp},
    {"log", cg_k_log, r_log},
    {"sqrt", cg_k_sqrt, r_sqrt},
    {"rsqrt", cg_k_rsqrt, r_rsqrt},
    {"pow2", k_pow2, r_pow2},
    {"pow3", k_pow3, r_pow3},
    {"pow2.5", k_pow25, r_pow25},
    {"pow-1.5", k_powm15, r_powm15},
    {"tanh", cg_k_tanh, r_tanh},
    {"sigmoid", cg_k_sigmoid, r_sigmoid},
    {"clamp", k_clamp, r_clamp},
    {"adds", k_adds, r_adds},
    {"muls", k_muls, r_muls},
};
#define N_UNARY (int)(sizeof UNARY / sizeof UNARY[0])

static double r_add(double x, double y) { return x + y; }
static double r_sub(double x, double y) { return x - y; }
static double r_mul(double x, double y) { return x * y; }
static double r_div(double x, double y) { return x / y; }
static double r_axpby(double x, double y) { return 2.5 * x - 0.5 * y; }
static double r_clamp_bwd(double x, double g) { return (x >= -0.5 && x <= 0.7) ? g : 0; }
static double r_masked_fill(double x, double m) { return m != 0 ? -7.0 : x; }

static cg_tensor *k_axpby(const cg_tensor *a, const cg_tensor *b)
{
    return cg_k_axpby(a, 2.5f, b, -0.5f);
}
static cg_tensor *k_clamp_bwd(const cg_tensor *a, const cg_tensor *b)
{
    return cg_k_clamp_backward(a, b, -0.5f, 0.7f);
}
static cg_tensor *k_masked_fill(const cg_tensor *a, const cg_tensor *m)
{
    return cg_k_masked_fill(a, m, -7.0f);
}

typedef cg_tensor *(*k2_fn)(const cg_tensor *, const cg_tensor *);
typedef struct {
    const char *name;
    k2_fn k;
    ref2_fn ref;
    ref1_fn deriv; /* a backward kernel (x, g): g * deriv(x), instead of ref */
} binary_k;
static const binary_k BINARY[] = {
    {"add", cg_k_add, r_add, NULL},    {"sub", cg_k_sub, r_sub, NULL},
    {"mul", cg_k_mul, r_mul, NULL},    {"div", cg_k_div, r_div, NULL},
    {"axpby", k_axpby, r_axpby, NULL}, {"clamp_backward", k_clamp_bwd, r_clamp_bwd, NULL},
};
#define N_BINARY (int)(sizeof BINARY / sizeof BINARY[0])

/* ------------------------------------------- the rows of CG_UNARY_OPS */
/* Each row of core/ops.h's table has its reference here, in double: the
 * function and its derivative, indexed by the row. A row without one fails
 * test_unary_rows, naming it; with one, its two kernels run through every
 * test of the unary ops and of the backward kernels below. */
static double r_relu(double x) { return x > 0 ? x : 0; }
static double d_relu(double x) { return x > 0 ? 1 : 0; }
static double r_gelu_erf(double x) { return x * 0.5 * erfc(-x / sqrt(2.0)); }
static double d_gelu_erf(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}
static double r_abs(double x) { return fabs(x); }
static double d_abs(double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }
static double r_silu(double x) { return x * r_sigmoid(x); }
static double d_silu(double x) { return r_sigmoid(x) * (1.0 + x * (1.0 - r_sigmoid(x))); }
static double d_sin(double x) { return cos(x); }
static double d_cos(double x) { return -sin(x); }
static double r_mish(double x) { return x * tanh(log1p(exp(x))); }
static double d_mish(double x)
{
    double t = tanh(log1p(exp(x)));
    return t + x * r_sigmoid(x) * (1 - t * t);
}
static double clamp_d(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }
static double r_hardswish(double x) { return x * clamp_d(x + 3, 0, 6) / 6; }
static double d_hardswish(double x) { return x < -3 ? 0 : (x <= 3 ? x / 3 + 0.5 : 1); }
static double r_hardsigmoid(double x) { return clamp_d(x + 3, 0, 6) / 6; }
static double d_hardsigmoid(double x) { return x > -3 && x < 3 ? 1.0 / 6 : 0; }
static double r_relu6(double x) { return clamp_d(x, 0, 6); }
static double d_relu6(double x) { return x <= 0 || x >= 6 ? 0 : 1; }
#define SELU_A 1.6732632423543772848170429916717
#define SELU_S 1.0507009873554804934193349852946
static double r_selu(double x) { return SELU_S * (x > 0 ? x : SELU_A * expm1(x)); }
static double d_selu(double x) { return SELU_S * (x > 0 ? 1 : SELU_A * exp(x)); }
static double r_softsign(double x) { return x / (1 + fabs(x)); }
static double d_softsign(double x) { return 1 / ((1 + fabs(x)) * (1 + fabs(x))); }
static double r_logsigmoid(double x) { return x < 0 ? x - log1p(exp(x)) : -log1p(exp(-x)); }
static double d_logsigmoid(double x) { return r_sigmoid(-x); }
static double r_tanhshrink(double x) { return x - tanh(x); }
static double d_tanhshrink(double x) { return tanh(x) * tanh(x); }
static double d_erf(double x) { return 2.0 / sqrt(M_PI) * exp(-x * x); }

#define ROW_ENUM_(A, E, name, fwd, bwd) ROW_##E,
enum { CG_UNARY_OPS(ROW_ENUM_, ~) N_ROWS };
#define ROW_KERNELS_(A, E, name, fwd, bwd) \
    {#name, #name "_backward", cg_k_##name, cg_k_##name##_backward},
static const struct {
    const char *name, *bname;
    k1_fn k;
    k2_fn backward;
} ROW_K[N_ROWS] = {CG_UNARY_OPS(ROW_KERNELS_, ~)};
static const struct {
    ref1_fn f, df;
} ROW_REF[N_ROWS] = {
    [ROW_RELU] = {r_relu, d_relu},
    [ROW_GELU] = {r_gelu, r_gelu_grad},
    [ROW_GELU_ERF] = {r_gelu_erf, d_gelu_erf},
    [ROW_ABS] = {r_abs, d_abs},
    [ROW_SILU] = {r_silu, d_silu},
    [ROW_SIN] = {sin, d_sin},
    [ROW_COS] = {cos, d_cos},
    [ROW_MISH] = {r_mish, d_mish},
    [ROW_HARDSWISH] = {r_hardswish, d_hardswish},
    [ROW_HARDSIGMOID] = {r_hardsigmoid, d_hardsigmoid},
    [ROW_RELU6] = {r_relu6, d_relu6},
    [ROW_SELU] = {r_selu, d_selu},
    [ROW_SOFTSIGN] = {r_softsign, d_softsign},
    [ROW_LOGSIGMOID] = {r_logsigmoid, d_logsigmoid},
    [ROW_TANHSHRINK] = {r_tanhshrink, d_tanhshrink},
    [ROW_ERF] = {erf, d_erf},
};

static void assert_row_ref(int j)
{
    ck_assert_msg(ROW_REF[j].f && ROW_REF[j].df,
                  "%s (a row of CG_UNARY_OPS, core/ops.h) has no reference in ROW_REF "
                  "(tests/test_elementwise.c)",
                  ROW_K[j].name);
}

/* Unary op i of the tests: UNARY's, then the rows'. */
#define N_UNARY_ALL (N_UNARY + N_ROWS)
static unary_k unary_at(int i)
{
    if (i < N_UNARY)
        return UNARY[i];
    assert_row_ref(i - N_UNARY);
    return (unary_k){ROW_K[i - N_UNARY].name, ROW_K[i - N_UNARY].k, ROW_REF[i - N_UNARY].f};
}
/* Binary kernel i: BINARY's, then the rows' backward kernels. */
#define N_BINARY_ALL (N_BINARY + N_ROWS)
static binary_k binary_at(int i)
{
    if (i < N_BINARY)
        return BINARY[i];
    assert_row_ref(i - N_BINARY);
    return (binary_k){ROW_K[i - N_BINARY].bname, ROW_K[i - N_BINARY].backward, NULL,
                      ROW_REF[i - N_BINARY].df};
}

/* -------------------------------------- the rows of CG_UNARY_PARAM_OPS */
/* Each row's reference in double, of x and the row's parameters p (two,
 * the second 0 for a row of one), and three parameter sets it is tested
 * at; indexed by the row, as ROW_REF. */
typedef double (*pref_fn)(double x, const double *p);
static double r_leaky_relu(double x, const double *p) { return x > 0 ? x : x * p[0]; }
static double d_leaky_relu(double x, const double *p) { return x > 0 ? 1 : p[0]; }
static double r_elu(double x, const double *p) { return x <= 0 ? p[0] * expm1(x) : x; }
static double d_elu(double x, const double *p) { return x <= 0 ? p[0] * exp(x) : 1; }
static double r_softplus(double x, const double *p)
{
    return x * p[0] > p[1] ? x : log1p(exp(x * p[0])) / p[0];
}
static double d_softplus(double x, const double *p)
{
    return x * p[0] > p[1] ? 1 : 1.0 / (1.0 + exp(-x * p[0]));
}

static double r_hardtanh(double x, const double *p) { return clamp_d(x, p[0], p[1]); }
static double d_hardtanh(double x, const double *p) { return x <= p[0] || x >= p[1] ? 0 : 1; }
static double r_celu(double x, const double *p) { return x <= 0 ? p[0] * expm1(x / p[0]) : x; }
static double d_celu(double x, const double *p) { return x <= 0 ? exp(x / p[0]) : 1; }
static double r_softshrink(double x, const double *p)
{
    return x > p[0] ? x - p[0] : (x < -p[0] ? x + p[0] : 0);
}
static double d_shrink(double x, const double *p) { return x >= -p[0] && x <= p[0] ? 0 : 1; }
static double r_hardshrink(double x, const double *p) { return x >= -p[0] && x <= p[0] ? 0 : x; }
static double r_threshold(double x, const double *p) { return x <= p[0] ? p[1] : x; }
static double d_threshold(double x, const double *p) { return x <= p[0] ? 0 : 1; }

#define PROW_ENUM_(A, E, name, fwd, bwd, rule, ...) PROW_##E,
enum { CG_UNARY_PARAM_OPS(PROW_ENUM_, ~) N_PROWS };
typedef cg_tensor *(*pk1_fn)(const cg_tensor *, const float *);
typedef cg_tensor *(*pk2_fn)(const cg_tensor *, const cg_tensor *, const float *);
#define PROW_KERNELS_(A, E, name, fwd, bwd, rule, ...)                                  \
    static cg_tensor *pk_##name(const cg_tensor *a, const float *p)                     \
    {                                                                                   \
        return cg_k_##name(a, CG_PARAMS_AT(p, __VA_ARGS__));                            \
    }                                                                                   \
    static cg_tensor *pb_##name(const cg_tensor *x, const cg_tensor *g, const float *p) \
    {                                                                                   \
        return cg_k_##name##_backward(x, g, CG_PARAMS_AT(p, __VA_ARGS__));              \
    }
CG_UNARY_PARAM_OPS(PROW_KERNELS_, ~)
#define PROW_K_(A, E, name, fwd, bwd, rule, ...) {#name, pk_##name, pb_##name},
static const struct {
    const char *name;
    pk1_fn k;
    pk2_fn backward;
} PROW_K[N_PROWS] = {CG_UNARY_PARAM_OPS(PROW_K_, ~)};
static const struct {
    pref_fn f, df;
    float p[3][2];
} PROW_REF[N_PROWS] = {
    [PROW_LEAKY_RELU] = {r_leaky_relu, d_leaky_relu, {{0.01f}, {0.2f}, {-1.5f}}},
    [PROW_ELU] = {r_elu, d_elu, {{1.0f}, {0.5f}, {2.0f}}},
    [PROW_SOFTPLUS] = {r_softplus, d_softplus, {{1, 20}, {2, 3}, {0.5f, 1}}},
    [PROW_HARDTANH] = {r_hardtanh, d_hardtanh, {{-1, 1}, {-0.5f, 2}, {0, 6}}},
    [PROW_CELU] = {r_celu, d_celu, {{1}, {0.5f}, {-2}}},
    [PROW_SOFTSHRINK] = {r_softshrink, d_shrink, {{0.5f}, {0}, {1.5f}}},
    [PROW_HARDSHRINK] = {r_hardshrink, d_shrink, {{0.5f}, {0}, {-1}}},
    [PROW_THRESHOLD] = {r_threshold, d_threshold, {{0, 0}, {0.1f, 20}, {-0.5f, -2}}},
};

#define ATOL 1e-6
#define RTOL 2e-6

static void check_unary(int op, const cg_tensor *a)
{
    unary_k c = unary_at(op);
    cg_tensor *out = c.k(a);
    ck_assert_msg(out != NULL, "%s: %s", c.name, cg_last_error());
    assert_shape(out, a->ndim, a->shape);
    float *e = expect_nary(1, (const cg_tensor *[]){a}, a->ndim, a->shape, (void *)c.ref);
    CG_ASSERT_TENSOR(out, e, ATOL, RTOL);
    free(e);
    cg_release(out);
}

static void check_binary(int op, const cg_tensor *a, const cg_tensor *b, int nd,
                         const int64_t *shape)
{
    binary_k c = binary_at(op);
    cg_tensor *out = c.k(a, b);
    ck_assert_msg(out != NULL, "%s: %s", c.name, cg_last_error());
    assert_shape(out, nd, shape);
    float *e = expect_nary_d(2, (const cg_tensor *[]){a, b}, nd, shape, (void *)c.ref, c.deriv);
    CG_ASSERT_TENSOR(out, e, ATOL, RTOL);
    free(e);
    cg_release(out);
}

/* Every row of CG_UNARY_OPS has its reference (a new row without one fails
 * here, naming it). */
START_TEST(test_unary_rows)
{
    for (int i = 0; i < N_ROWS; i++)
        assert_row_ref(i);
}
END_TEST

/* Every row of CG_UNARY_PARAM_OPS has its reference, and its kernels
 * compute it at each of its parameter sets, forward and backward, on
 * every layout, a 0-d and an empty tensor (values up to |6|, across
 * softplus's thresholds). */
START_TEST(test_unary_param_rows)
{
    cg_rng rng = cg_rng_new(12);
    for (int r = 0; r < N_PROWS; r++) {
        ck_assert_msg(PROW_REF[r].f && PROW_REF[r].df,
                      "%s (a row of CG_UNARY_PARAM_OPS, core/ops.h) has no reference in PROW_REF "
                      "(tests/test_elementwise.c)",
                      PROW_K[r].name);
        for (int ps = 0; ps < 3; ps++) {
            const float *p = PROW_REF[r].p[ps];
            const double pd[2] = {p[0], p[1]};
            for (int kind = 0; kind < 5; kind++) {
                cg_tensor *a = kind < 4 ? cg_test_randn_layout(&rng, CG_SHAPE(3, 4, 5), kind)
                                        : cg_scalar(-0.7f);
                float *st = (float *)a->storage->data; /* values to |6| or so */
                for (size_t i = 0; i < a->storage->nbytes / sizeof(float); i++)
                    st[i] *= 3.0f;
                cg_tensor *g = cg_randn(&rng, a->ndim, a->shape);
                cg_tensor *y = PROW_K[r].k(a, p), *d = PROW_K[r].backward(a, g, p);
                ck_assert_msg(y && d, "%s: %s", PROW_K[r].name, cg_last_error());
                assert_shape(y, a->ndim, a->shape);
                const int64_t n = cg_numel(a);
                float *av = cg_test_values(a), *gv = cg_test_values(g);
                float *ey = malloc((size_t)n * sizeof(float)),
                      *ed = malloc((size_t)n * sizeof(float));
                for (int64_t i = 0; i < n; i++) {
                    ey[i] = (float)PROW_REF[r].f(av[i], pd);
                    ed[i] = (float)(gv[i] * PROW_REF[r].df(av[i], pd));
                }
                CG_ASSERT_TENSOR(y, ey, ATOL, RTOL);
                CG_ASSERT_TENSOR(d, ed, ATOL, RTOL);
                free(av), free(gv), free(ey), free(ed);
                cg_release_all(4, a, g, y, d);
            }
            cg_tensor *z = cg_zeros(CG_SHAPE(0, 4)), *zy = PROW_K[r].k(z, p);
            assert_shape(zy, 2, (int64_t[]){0, 4});
            cg_release_all(2, z, zy);
        }
    }
}
END_TEST

/* -------------------------------------------------------------- tests */
START_TEST(test_unary_layouts)
{
    cg_rng rng = cg_rng_new(11);
    for (int op = 0; op < N_UNARY_ALL; op++) {
        for (int kind = 0; kind < 4; kind++) {
            cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(3, 4, 5), kind);
            check_unary(op, a);
            cg_release(a);
        }
        /* a scalar, a 1-D slice with step, an empty tensor */
        cg_tensor *s = cg_scalar(0.3f);
        check_unary(op, s);
        cg_tensor *base = cg_randn(&rng, CG_SHAPE(17));
        cg_tensor *sl = cg_view_slice(base, 0, 1, 17, 3);
        check_unary(op, sl);
        cg_tensor *z = cg_zeros(CG_SHAPE(0, 4));
        cg_tensor *zo = unary_at(op).k(z);
        assert_shape(zo, 2, (int64_t[]){0, 4});
        cg_release_all(5, s, base, sl, z, zo);
    }
}
END_TEST

START_TEST(test_binary_layouts)
{
    cg_rng rng = cg_rng_new(12);
    for (int op = 0; op < N_BINARY_ALL; op++) {
        for (int ka = 0; ka < 4; ka++) {
            for (int kb = 0; kb < 4; kb++) {
                cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(3, 4, 6), ka);
                cg_tensor *b = cg_test_randn_layout(&rng, CG_SHAPE(3, 4, 6), kb);
                check_binary(op, a, b, 3, (int64_t[]){3, 4, 6});
                cg_release_all(2, a, b);
            }
        }
    }
}
END_TEST

START_TEST(test_binary_broadcast)
{
    cg_rng rng = cg_rng_new(13);
    for (int op = 0; op < N_BINARY_ALL; op++) {
        for (int ka = 0; ka < 4; ka++) {
            for (int kb = 0; kb < 4; kb++) {
                /* [3,1,5] with [4,1] -> [3,4,5], both ways round */
                cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(3, 1, 5), ka);
                cg_tensor *b = cg_test_randn_layout(&rng, CG_SHAPE(4, 1), kb);
                check_binary(op, a, b, 3, (int64_t[]){3, 4, 5});
                check_binary(op, b, a, 3, (int64_t[]){3, 4, 5});
                cg_release_all(2, a, b);
            }
        }
        /* scalar (ndim 0) with a tensor, and with a scalar */
        cg_tensor *s = cg_scalar(-0.75f);
        cg_tensor *t = cg_test_randn_layout(&rng, CG_SHAPE(2, 3), 1);
        check_binary(op, s, t, 2, (int64_t[]){2, 3});
        check_binary(op, t, s, 2, (int64_t[]){2, 3});
        cg_tensor *s2 = cg_scalar(1.5f);
        check_binary(op, s, s2, 0, NULL);
        /* a [1] with a [5] of step 3, and a row of a column */
        cg_tensor *one = cg_full(CG_SHAPE(1), 2.0f);
        cg_tensor *base = cg_randn(&rng, CG_SHAPE(15));
        cg_tensor *sl = cg_view_slice(base, 0, 0, 15, 3);
        check_binary(op, one, sl, 1, (int64_t[]){5});
        cg_tensor *col = cg_randn(&rng, CG_SHAPE(6, 1)), *row = cg_randn(&rng, CG_SHAPE(1, 7));
        check_binary(op, col, row, 2, (int64_t[]){6, 7});
        /* empty broadcasting: [0,1] with [1,4] -> [0,4] */
        cg_tensor *z = cg_zeros(CG_SHAPE(0, 1)), *w = cg_ones(CG_SHAPE(1, 4));
        cg_tensor *zo = binary_at(op).k(z, w);
        assert_shape(zo, 2, (int64_t[]){0, 4});
        cg_release_all(11, s, t, s2, one, base, sl, col, row, z, w, zo);
    }
}
END_TEST

static double r_where(double c, double x, double y) { return c != 0 ? x : y; }

START_TEST(test_where)
{
    cg_rng rng = cg_rng_new(14);
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *r = cg_test_randn_layout(&rng, CG_SHAPE(3, 1, 5), kind);
        cg_tensor *c = cg_k_relu(r);        /* about half zeros: the reference's */
        cg_tensor *cb = cg_gt_scalar(r, 0); /* the same truth as bool */
        cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(4, 1), kind);
        cg_tensor *b = cg_test_randn_layout(&rng, CG_SHAPE(4, 5), 3 - kind);
        cg_tensor *out = cg_k_where(cb, a, b);
        assert_shape(out, 3, (int64_t[]){3, 4, 5});
        float *e = expect_nary(3, (const cg_tensor *[]){c, a, b}, 3, (int64_t[]){3, 4, 5},
                               (void *)r_where);
        CG_ASSERT_TENSOR(out, e, 0, 0);
        free(e);
        cg_release_all(6, r, c, cb, a, b, out);
    }
    /* scalar condition */
    cg_tensor *one = cg_from_bool(0, NULL, (const bool[]){true});
    cg_tensor *a = cg_randn(&rng, CG_SHAPE(2, 2)), *b = cg_scalar(9.0f);
    cg_tensor *out = cg_k_where(one, a, b);
    float *av = cg_test_values(a);
    CG_ASSERT_TENSOR(out, av, 0, 0);
    free(av);
    cg_release_all(4, one, a, b, out);
    /* incompatible: all three shapes in the message */
    cg_tensor *c3 = cg_zeros_dtype(CG_BOOL, CG_SHAPE(3)), *a4 = cg_ones(CG_SHAPE(4));
    cg_tensor *b1 = cg_ones(CG_SHAPE(1));
    CG_ASSERT_FAILS(cg_k_where(c3, a4, b1), "[3], [4] and [1]");
    cg_release_all(3, c3, a4, b1);
}
END_TEST

START_TEST(test_masked_fill)
{
    cg_rng rng = cg_rng_new(15);
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(3, 4, 5), kind);
        cg_tensor *r = cg_randn(&rng, CG_SHAPE(4, 1));
        cg_tensor *m = cg_k_relu(r), *mb = cg_gt_scalar(r, 0); /* the reference's; the mask */
        cg_tensor *out = k_masked_fill(a, mb);
        assert_shape(out, 3, a->shape);
        float *e = expect_nary(2, (const cg_tensor *[]){a, m}, 3, a->shape, (void *)r_masked_fill);
        CG_ASSERT_TENSOR(out, e, 0, 0);
        free(e);
        cg_release_all(5, a, r, m, mb, out);
    }
    cg_tensor *a = cg_ones(CG_SHAPE(4, 5));
    cg_tensor *bad = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 5));
    cg_tensor *big = cg_zeros_dtype(CG_BOOL, CG_SHAPE(3, 4, 5));
    CG_ASSERT_FAILS(cg_k_masked_fill(a, bad, 0.0f), "[2, 5]");
    CG_ASSERT_FAILS(cg_k_masked_fill(a, big, 0.0f), "[3, 4, 5]");
    ck_assert(strstr(cg_last_error(), "[4, 5]") != NULL);
    cg_release_all(3, a, bad, big);
}
END_TEST

START_TEST(test_inplace)
{
    cg_rng rng = cg_rng_new(16);
    /* add_ into a transposed view, src [5] broadcast */
    cg_tensor *base = cg_randn(&rng, CG_SHAPE(5, 4));
    cg_tensor *dst = cg_view_transpose(base, 0, 1); /* [4, 5], strides (1, 4) */
    cg_tensor *src = cg_randn(&rng, CG_SHAPE(5));
    float *before = cg_test_values(dst), *sv = cg_test_values(src);
    float e[20];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            e[i * 5 + j] = before[i * 5 + j] + sv[j];
    ck_assert(cg_k_add_(dst, src));
    CG_ASSERT_TENSOR(dst, e, 0, 0);
    /* the base sees the same update through its own layout */
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            ck_assert_float_eq(cg_get(base, (int64_t[]){j, i}), e[i * 5 + j]);
    free(before);
    free(sv);
    cg_release_all(3, base, dst, src);

    /* add_ and muls_ into a step-2 slice: the skipped elements stay put */
    cg_tensor *b2 = cg_randn(&rng, CG_SHAPE(4, 10));
    float *orig = cg_test_values(b2);
    cg_tensor *d2 = cg_view_slice(b2, 1, 0, 10, 2); /* [4, 5] */
    cg_tensor *s2 = cg_test_randn_layout(&rng, CG_SHAPE(4, 5), 1);
    cg_tensor *sc = cg_scalar(0.5f);
    ck_assert(cg_k_add_(d2, s2));
    ck_assert(cg_k_add_(d2, sc));
    ck_assert(cg_k_muls_(d2, -2.0f));
    float *now = cg_test_values(b2);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 10; j++) {
            float want = orig[i * 10 + j];
            if (j % 2 == 0)
                want = (want + cg_get(s2, (int64_t[]){i, j / 2}) + 0.5f) * -2.0f;
            ck_assert_float_eq(now[i * 10 + j], want);
        }
    free(orig);
    free(now);
    /* dst += dst (aliasing source) */
    cg_tensor *d3 = cg_randn(&rng, CG_SHAPE(3, 3));
    float *v3 = cg_test_values(d3);
    for (int i = 0; i < 9; i++)
        v3[i] *= 2.0f;
    ck_assert(cg_k_add_(d3, d3));
    CG_ASSERT_TENSOR(d3, v3, 0, 0);
    free(v3);
    /* a scalar destination */
    cg_tensor *s0 = cg_scalar(1.0f);
    ck_assert(cg_k_add_(s0, sc));
    ck_assert(cg_k_muls_(s0, 4.0f));
    ck_assert_float_eq(cg_item(s0), 6.0f);

    /* errors: src does not broadcast to dst, src larger than dst, expanded dst */
    cg_tensor *s3 = cg_ones(CG_SHAPE(3)), *big = cg_ones(CG_SHAPE(2, 4, 5));
    CG_ASSERT_FAILS(cg_k_add_(d2, s3) ? d2 : NULL, "[3]");
    ck_assert(strstr(cg_last_error(), "[4, 5]") != NULL);
    CG_ASSERT_FAILS(cg_k_add_(d2, big) ? d2 : NULL, "[2, 4, 5]");
    cg_tensor *row = cg_ones(CG_SHAPE(1, 5));
    cg_tensor *ex = cg_view_expand(row, CG_SHAPE(4, 5));
    CG_ASSERT_FAILS(cg_k_add_(ex, s2) ? ex : NULL, "stride-0");
    CG_ASSERT_FAILS(cg_k_muls_(ex, 2.0f) ? ex : NULL, "stride-0");
    cg_release_all(10, b2, d2, s2, sc, d3, s0, s3, big, row, ex);
}
END_TEST

/* An in-place kernel whose source views its destination's memory
 * other than element for element reads the source as it was before the
 * call (NumPy's rule; PyTorch refuses): x[1:] += x[:-1], x += x[0],
 * x.copy_(x^T), x.index_add_(0, perm, x), x.scatter_add_(0, idx, x).
 * Written as they read, these gave a running sum, sums of sums and a
 * half-transposed matrix. Sizes over a threaded run's worth of elements. */
enum { OV_N = 300 };
static cg_tensor *ov_base(int nd)
{
    cg_tensor *a = cg_arange(0, OV_N * OV_N, 1);
    cg_tensor *x = nd == 1 ? cg_retain(a) : cg_k_reshape(a, CG_SHAPE(OV_N, OV_N));
    cg_release(a);
    return x;
}

static void ov_check(cg_tensor *got, cg_tensor *want, const char *what)
{
    float *g = cg_test_values(got), *w = cg_test_values(want);
    for (int64_t i = 0; i < cg_numel(want); i++)
        ck_assert_msg(g[i] == w[i], "%s: element %lld is %g, expected %g", what, (long long)i, g[i],
                      w[i]);
    free(g);
    free(w);
}

/* dst (a view of x) op= src (another view of x), against src cloned first */
static void ov_case(cg_tensor *x, cg_tensor *dst, cg_tensor *src, bool copy, const char *what)
{
    cg_tensor *y = cg_k_clone(x), *s = cg_k_clone(src);
    cg_tensor *ydst = cg_view_as_strided(y, dst->ndim, dst->shape, dst->strides, dst->offset);
    ck_assert(copy ? cg_k_copy_(ydst, s) : cg_k_add_(ydst, s));
    ck_assert(copy ? cg_k_copy_(dst, src) : cg_k_add_(dst, src));
    ov_check(x, y, what);
    cg_release_all(5, y, s, ydst, dst, src);
}

START_TEST(test_inplace_overlap)
{
    cg_tensor *x = ov_base(1);
    ov_case(x, cg_view_slice(x, 0, 1, OV_N * OV_N, 1), cg_view_slice(x, 0, 0, OV_N * OV_N - 1, 1),
            false, "x[1:] += x[:-1]");
    cg_release(x);
    x = ov_base(2);
    ov_case(x, cg_view_alias(x), cg_view_select(x, 0, 0), false, "x += x[0]");
    cg_release(x);
    x = ov_base(2);
    ov_case(x, cg_view_alias(x), cg_view_transpose(x, 0, 1), true, "x.copy_(x^T)");
    cg_release(x);
    x = ov_base(2);
    ov_case(x, cg_view_slice(x, 0, 1, OV_N, 1), cg_view_slice(x, 0, 0, OV_N - 1, 1), true,
            "x[1:].copy_(x[:-1])");
    cg_release(x);
    /* index_add_ and scatter_add_ of x into itself, rows moved by one */
    int64_t ids[OV_N];
    for (int i = 0; i < OV_N; i++)
        ids[i] = (i + 1) % OV_N;
    cg_tensor *idx = cg_from_i64(CG_SHAPE(OV_N), ids);
    cg_tensor *col = cg_view_unsqueeze(idx, 1);
    cg_tensor *wide = cg_view_expand(col, CG_SHAPE(OV_N, OV_N));
    cg_tensor *sidx = cg_k_contiguous(wide);
    cg_release_all(2, col, wide);
    x = ov_base(2);
    cg_tensor *y = cg_k_clone(x), *s = cg_k_clone(x);
    ck_assert(cg_k_index_add_(y, 0, idx, s) && cg_k_index_add_(x, 0, idx, x));
    ov_check(x, y, "x.index_add_(0, idx, x)");
    cg_release_all(3, x, y, s);
    x = ov_base(2);
    y = cg_k_clone(x);
    s = cg_k_clone(x);
    ck_assert(cg_k_scatter_add_(y, 0, sidx, s) && cg_k_scatter_add_(x, 0, sidx, x));
    ov_check(x, y, "x.scatter_add_(0, idx, x)");
    cg_release_all(5, x, y, s, idx, sidx);
}
END_TEST

static cg_tensor *k_softplus(const cg_tensor *a) { return cg_k_softplus(a, 1.0f, 20.0f); }
static cg_tensor *k_elu2(const cg_tensor *a) { return cg_k_elu(a, 2.0f); }

static float item_of(cg_tensor *(*k)(const cg_tensor *), float x)
{
    cg_tensor *s = cg_scalar(x);
    cg_tensor *r = k(s);
    float v = cg_item(r);
    cg_release_all(2, s, r);
    return v;
}

START_TEST(test_special_values)
{
    ck_assert(isinf(item_of(cg_k_exp, 100.0f)) && item_of(cg_k_exp, 100.0f) > 0);
    ck_assert_float_eq(item_of(cg_k_exp, -200.0f), 0.0f);
    ck_assert(isinf(item_of(cg_k_log, 0.0f)) && item_of(cg_k_log, 0.0f) < 0);
    ck_assert(isnan(item_of(cg_k_log, -1.0f)));
    ck_assert(isnan(item_of(cg_k_sqrt, -1.0f)));
    ck_assert(isinf(item_of(cg_k_rsqrt, 0.0f)));
    /* sigmoid is stable at both ends */
    ck_assert_float_eq(item_of(cg_k_sigmoid, 100.0f), 1.0f);
    float sm = item_of(cg_k_sigmoid, -100.0f);
    ck_assert(sm >= 0.0f && sm < 1e-40f && !isnan(sm));
    ck_assert_float_eq_tol(sm, (float)exp(-100.0), 1e-45f);
    ck_assert_float_eq(item_of(cg_k_sigmoid, INFINITY), 1.0f);
    ck_assert_float_eq(item_of(cg_k_sigmoid, -INFINITY), 0.0f);
    ck_assert_float_eq(item_of(cg_k_sigmoid, 0.0f), 0.5f);
    ck_assert_float_eq(item_of(cg_k_tanh, 50.0f), 1.0f);
    /* relu exactly at 0, and its backward there (0, as PyTorch) */
    ck_assert_float_eq(item_of(cg_k_relu, 0.0f), 0.0f);
    ck_assert(isnan(item_of(cg_k_relu, NAN)));
    cg_tensor *x = cg_from_data(CG_SHAPE(5), (float[]){-1.0f, 0.0f, 1.0f, 0.5f, 0.7f});
    cg_tensor *g = cg_full(CG_SHAPE(5), 3.0f);
    cg_tensor *rb = cg_k_relu_backward(x, g);
    CG_ASSERT_TENSOR(rb, ((float[]){0, 0, 3, 3, 3}), 0, 0);
    /* relu_ in place: cg_k_relu's bits (NaN kept, -0 and -inf to +0), also
     * strided; its output masks a backward as the input does */
    {
        const float v[8] = {-1.0f, -0.0f, 0.0f, NAN, INFINITY, -INFINITY, 1e-40f, -1e-40f};
        cg_tensor *a = cg_from_data(CG_SHAPE(8), v), *ref = cg_k_relu(a);
        ck_assert(cg_k_relu_(a));
        ck_assert(memcmp(cg_data(a), cg_data(ref), sizeof v) == 0);
        cg_tensor *g8 = cg_full(CG_SHAPE(8), 3.0f), *in = cg_from_data(CG_SHAPE(8), v);
        cg_tensor *b1 = cg_k_relu_backward(in, g8), *b2 = cg_k_relu_backward(a, g8);
        ck_assert(memcmp(cg_data(b1), cg_data(b2), sizeof v) == 0);
        cg_tensor *base = cg_from_data(CG_SHAPE(2, 4), v);
        cg_tensor *col = cg_view_slice(base, 1, 1, 4, 2); /* [2, 2], strides 4, 2 */
        ck_assert(cg_k_relu_(col));
        const float *bp = cg_data(base);
        /* columns 1 and 3 changed (-0 -> 0, NaN, -inf -> 0, -1e-40 -> 0), 0 and 2 not */
        ck_assert(bp[0] == -1.0f && bp[1] == 0.0f && !signbit(bp[1]) && isnan(bp[3]));
        ck_assert(bp[5] == 0.0f && !signbit(bp[5]) && bp[7] == 0.0f && !signbit(bp[7]));
        ck_assert(isinf(bp[4]) && bp[6] == 1e-40f && bp[2] == 0.0f);
        cg_release_all(7, a, ref, g8, in, b1, b2, col);
        cg_release(base);
        cg_tensor *one = cg_scalar(1.0f), *ex = cg_view_expand(one, 1, (int64_t[]){3});
        CG_ASSERT_FAILS(cg_k_relu_(ex) ? (void *)1 : NULL, "relu_");
        cg_release_all(2, one, ex);
    }
    /* clamp backward passes the gradient at the bounds */
    cg_tensor *cb = cg_k_clamp_backward(x, g, 0.0f, 0.5f);
    CG_ASSERT_TENSOR(cb, ((float[]){0, 3, 0, 3, 0}), 0, 0);
    /* abs backward: sign(x) * g, 0 at 0 */
    cg_tensor *ab = cg_k_abs_backward(x, g);
    CG_ASSERT_TENSOR(ab, ((float[]){-3, 0, 3, 3, 3}), 0, 0);
    cg_release_all(5, x, g, rb, cb, ab);
    /* gelu at large |x| */
    ck_assert_float_eq(item_of(cg_k_gelu, 20.0f), 20.0f);
    ck_assert_float_eq(item_of(cg_k_gelu, 1e10f), 1e10f);
    ck_assert_float_eq(item_of(cg_k_gelu, -20.0f), 0.0f);
    ck_assert_float_eq(item_of(cg_k_gelu, -1e10f), 0.0f);
    ck_assert_float_eq(item_of(cg_k_gelu, 0.0f), 0.0f);
    cg_tensor *gx = cg_from_data(CG_SHAPE(4), (float[]){30.0f, -30.0f, 1e20f, -1e20f});
    cg_tensor *gg = cg_ones(CG_SHAPE(4));
    cg_tensor *gb = cg_k_gelu_backward(gx, gg);
    CG_ASSERT_TENSOR(gb, ((float[]){1, 0, 1, 0}), 0, 0);
    cg_release_all(3, gx, gg, gb);
    /* softplus (beta 1, threshold 20, torch's defaults): x itself above
     * the threshold, no overflow */
    ck_assert_float_eq(item_of(k_softplus, 20.5f), 20.5f);
    ck_assert_float_eq(item_of(k_softplus, 1e30f), 1e30f);
    ck_assert_float_eq(item_of(k_softplus, INFINITY), INFINITY);
    ck_assert_float_eq(item_of(k_softplus, -INFINITY), 0.0f);
    ck_assert(isnan(item_of(k_softplus, NAN)));
    float sp = item_of(k_softplus, -100.0f); /* e^-100, a subnormal */
    ck_assert(sp > 0.0f && sp < 1e-40f);
    cg_tensor *sx = cg_from_data(CG_SHAPE(4), (float[]){25.0f, 1e30f, -INFINITY, 0.0f});
    cg_tensor *sg = cg_full(CG_SHAPE(4), 3.0f), *sb = cg_k_softplus_backward(sx, sg, 1, 20);
    CG_ASSERT_TENSOR(sb, ((float[]){3, 3, 0, 1.5f}), 0, 0);
    /* the threshold compares beta x: beta 2, threshold 3 passes x = 1.6
     * through (2 x = 3.2), and its gradient 1; not 1.4; beta x beyond
     * exp's range under a larger threshold is inf, and its gradient NaN,
     * as PyTorch's expressions give */
    cg_tensor *t2 = cg_from_data(CG_SHAPE(3), (float[]){1.6f, 1.4f, 50.0f});
    cg_tensor *s3 = cg_full(CG_SHAPE(3), 3.0f);
    cg_tensor *y2 = cg_k_softplus(t2, 2, 3), *y3 = cg_k_softplus(t2, 2, 1000);
    cg_tensor *g2 = cg_k_softplus_backward(t2, s3, 2, 3);
    cg_tensor *g3 = cg_k_softplus_backward(t2, s3, 2, 1000);
    ck_assert_msg(y2 && y3 && g2 && g3, "%s", cg_last_error());
    ck_assert(cg_data(y2)[0] == 1.6f && cg_data(y2)[2] == 50.0f && cg_data(g2)[0] == 3.0f);
    ck_assert_float_eq_tol(cg_data(y2)[1], (float)(log1p(exp(2.8)) / 2), 1e-6);
    ck_assert(isinf(cg_data(y3)[2]) && isnan(cg_data(g3)[2]));
    cg_release_all(9, sx, sg, sb, t2, s3, y2, y3, g2, g3);
    /* leaky_relu and elu at their kink 0 and at NaN: PyTorch's gradients
     * (leaky: the slope at 0 and at NaN; elu: alpha at 0, 1 at NaN) */
    cg_tensor *kx = cg_from_data(CG_SHAPE(3), (float[]){0.0f, NAN, -0.0f}),
              *kg = cg_ones(CG_SHAPE(3));
    cg_tensor *lb = cg_k_leaky_relu_backward(kx, kg, 0.2f), *eb = cg_k_elu_backward(kx, kg, 0.5f);
    cg_tensor *ly = cg_k_leaky_relu(kx, 0.2f), *ey = cg_k_elu(kx, 0.5f);
    CG_ASSERT_TENSOR(lb, ((float[]){0.2f, 0.2f, 0.2f}), 0, 0);
    CG_ASSERT_TENSOR(eb, ((float[]){0.5f, 1, 0.5f}), 0, 0);
    ck_assert(cg_data(ly)[0] == 0 && isnan(cg_data(ly)[1]) && signbit(cg_data(ly)[2]));
    ck_assert(cg_data(ey)[0] == 0 && isnan(cg_data(ey)[1]) && cg_data(ey)[2] == 0);
    ck_assert_float_eq(item_of(k_elu2, -INFINITY), -2.0f);
    cg_release_all(6, kx, kg, lb, eb, ly, ey);
    /* clamp: NaN propagates, lo > hi gives hi */
    cg_tensor *cx = cg_from_data(CG_SHAPE(3), (float[]){NAN, -5.0f, 5.0f});
    cg_tensor *c1 = cg_k_clamp(cx, -1.0f, 1.0f), *c2 = cg_k_clamp(cx, 2.0f, 1.0f);
    CG_ASSERT_TENSOR(c1, ((float[]){NAN, -1, 1}), 0, 0);
    CG_ASSERT_TENSOR(c2, ((float[]){NAN, 1, 1}), 0, 0);
    /* division by zero, pow special exponents */
    cg_tensor *zx = cg_k_muls(cx, 0.0f);
    cg_tensor *dz = cg_k_div(cx, zx);
    ck_assert(isnan(cg_get(dz, (int64_t[]){0})));
    ck_assert(isinf(cg_get(dz, (int64_t[]){1})));
    cg_tensor *p0 = cg_k_pow(cx, 0.0f);
    CG_ASSERT_TENSOR(p0, ((float[]){1, 1, 1}), 0, 0);
    cg_release_all(6, cx, c1, c2, zx, dz, p0);
}
END_TEST

/* tanh over [-12, 12] (each float of [-1, 1] by a fine step, the rest by
 * a coarser one) and its far and special values, against double
 * precision: at most 2 ulp of the result (core/vmath.h's ew_tanhf, written
 * without a libm call so that its loops vectorise, reached 1.32 on every
 * third float of (0, 12); glibc's tanhf 2.18). */
START_TEST(test_tanh_accuracy)
{
    const int64_t n = 600000;
    cg_tensor *x = cg_empty(CG_SHAPE(n));
    float *xv = cg_data(x);
    for (int64_t i = 0; i < n; i++)
        xv[i] = i < n / 2 ? -1.0f + 2.0f * (float)i / (float)(n / 2)
                          : -12.0f + 24.0f * (float)(i - n / 2) / (float)(n / 2);
    xv[0] = 1e-30f, xv[1] = -1e-30f, xv[2] = 1e-40f, xv[3] = 0.625f, xv[4] = -0.625f;
    cg_tensor *t = cg_k_tanh(x);
    const float *tv = cg_data(t);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double ref = tanh((double)xv[i]);
        const float fr = (float)ref;
        const double ulp = fabsf(fr) < 1.17549435e-38f ? 0x1p-149 : ldexp(1.0, ilogb(fr) - 23);
        const double err = fabs(tv[i] - ref) / ulp;
        worst = err > worst ? err : worst;
        ck_assert_msg(err <= 2.0, "tanh(%.9g) = %.9g, expected %.9g (%.2f ulp)", xv[i], tv[i], ref,
                      err);
    }
    ck_assert(worst > 0.0); /* the sweep did compare something */
    cg_release_all(2, x, t);
    /* the far ends, the signed zeros, infinities and NaN */
    const float sp[] = {0.0f, -0.0f, 9.0f, -9.0f, 100.0f, -100.0f, INFINITY, -INFINITY, NAN};
    cg_tensor *s = cg_from_data(1, (const int64_t[]){9}, sp), *ts = cg_k_tanh(s);
    const float *v = cg_data(ts);
    ck_assert(v[0] == 0.0f && !signbit(v[0]) && v[1] == 0.0f && signbit(v[1]));
    ck_assert(v[2] == tanhf(9.0f) && v[3] == tanhf(-9.0f));
    ck_assert(v[4] == 1.0f && v[5] == -1.0f && v[6] == 1.0f && v[7] == -1.0f && isnan(v[8]));
    cg_release_all(2, s, ts);
}
END_TEST

/* exp (and the sigmoid/gelu built on it) over the whole float range,
 * against double precision: at most 2 ulp, subnormals included. */
START_TEST(test_exp_accuracy)
{
    const int64_t n = 400000;
    cg_tensor *x = cg_empty(CG_SHAPE(n));
    float *xv = cg_data(x);
    for (int64_t i = 0; i < n; i++)
        xv[i] = -106.0f + 196.0f * (float)i / (float)n; /* [-106, 90) */
    cg_tensor *e = cg_k_exp(x), *sg = cg_k_sigmoid(x);
    float *ev = cg_test_values(e), *sv = cg_test_values(sg);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = exp((double)xv[i]);
        float fr = (float)ref;
        if (isinf(fr)) {
            ck_assert_msg(isinf(ev[i]) && ev[i] > 0, "exp(%.9g) = %.9g, expected inf", xv[i],
                          ev[i]);
            continue;
        }
        double ulp = fr < 1.17549435e-38f ? 0x1p-149 : ldexp(1.0, ilogb(fr) - 23);
        double err = fabs(ev[i] - ref) / ulp;
        worst = err > worst ? err : worst;
        ck_assert_msg(err <= 2.0, "exp(%.9g) = %.9g, expected %.9g (%.2f ulp)", xv[i], ev[i], ref,
                      err);
        double sref = 1.0 / (1.0 + exp(-(double)xv[i]));
        ck_assert_msg(fabs(sv[i] - sref) <= 3e-7 * sref + 1e-45,
                      "sigmoid(%.9g) = %.9g, expected %.9g", xv[i], sv[i], sref);
    }
    ck_assert(worst > 0.0); /* the sweep did compare something */
    free(ev);
    free(sv);
    cg_release_all(3, x, e, sg);
    /* gelu and its gradient on [-12, 12]: relative accuracy (no cancellation) */
    cg_tensor *g = cg_arange(-12.0, 12.0, 0.001);
    cg_tensor *one = cg_ones(CG_SHAPE(1));
    cg_tensor *gv = cg_k_gelu(g), *gb = cg_k_gelu_backward(g, one);
    float *xs = cg_test_values(g), *y = cg_test_values(gv), *d = cg_test_values(gb);
    for (int64_t i = 0; i < cg_numel(g); i++) {
        double ref = r_gelu(xs[i]), dref = r_gelu_grad(xs[i]);
        /* u is computed in float: exp(2u) inherits |2u| times its rounding */
        double x = xs[i], u2 = 2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
        double rt = 1e-6 + 3e-7 * fabs(u2);
        ck_assert_msg(fabs(y[i] - ref) <= rt * fabs(ref) + 1e-38,
                      "gelu(%.9g) = %.9g, expected %.9g", xs[i], y[i], ref);
        ck_assert_msg(fabs(d[i] - dref) <= 2.0 * rt * fabs(dref) + 1e-7,
                      "gelu'(%.9g) = %.9g, expected %.9g", xs[i], d[i], dref);
    }
    free(xs);
    free(y);
    free(d);
    cg_release_all(4, g, one, gv, gb);
}
END_TEST

/* Run f with 1 and 2 threads: bit-identical. */
static void same_1_2(cg_tensor *(*f)(void *), void *ctx)
{
    cg_set_num_threads(1);
    cg_tensor *r1 = f(ctx);
    cg_set_num_threads(2);
    cg_tensor *r2 = f(ctx);
    ck_assert_ptr_nonnull(r1);
    ck_assert_ptr_nonnull(r2);
    ck_assert(cg_same_shape(r1, r2));
    float *v1 = cg_test_values(r1), *v2 = cg_test_values(r2);
    ck_assert(memcmp(v1, v2, (size_t)cg_numel(r1) * sizeof(float)) == 0);
    free(v1);
    free(v2);
    cg_release_all(2, r1, r2);
}

typedef struct {
    cg_tensor *a, *b;
} pair;
static cg_tensor *f_add(void *c) { return cg_k_add(((pair *)c)->a, ((pair *)c)->b); }
static cg_tensor *t_gelu(void *c) { return cg_k_gelu(((pair *)c)->a); }
static cg_tensor *t_sigmoid(void *c) { return cg_k_sigmoid(((pair *)c)->a); }
static cg_tensor *t_gelu_bwd(void *c) { return cg_k_gelu_backward(((pair *)c)->a, ((pair *)c)->a); }
static cg_tensor *f_add_(void *c)
{
    pair *p = c;
    cg_tensor *d = cg_k_clone(p->a);
    cg_tensor *v = cg_view_transpose(d, 0, 1);
    cg_k_add_(v, p->b);
    cg_release(v);
    return d;
}

START_TEST(test_threads_identical)
{
    cg_rng rng = cg_rng_new(17);
    cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(301, 257), 1); /* 77k, transposed */
    cg_tensor *b = cg_randn(&rng, CG_SHAPE(257));
    pair p = {a, b};
    same_1_2(f_add, &p);
    same_1_2(t_gelu, &p);
    same_1_2(t_sigmoid, &p);
    same_1_2(t_gelu_bwd, &p);
    cg_tensor *sq = cg_randn(&rng, CG_SHAPE(257, 257));
    pair q = {sq, b};
    same_1_2(f_add_, &q);
    /* and the 2-thread result is right */
    cg_tensor *r = cg_k_add(a, b);
    float *e = expect_nary(2, (const cg_tensor *[]){a, b}, 2, (int64_t[]){301, 257}, (void *)r_add);
    CG_ASSERT_TENSOR(r, e, ATOL, RTOL);
    free(e);
    cg_release_all(4, a, b, sq, r);
}
END_TEST

START_TEST(test_errors)
{
    cg_tensor *a = cg_ones(CG_SHAPE(3, 1, 5)), *b = cg_ones(CG_SHAPE(4, 2));
    CG_ASSERT_FAILS(cg_k_add(a, b), "[3, 1, 5]");
    ck_assert(strstr(cg_last_error(), "[4, 2]") != NULL);
    ck_assert(strstr(cg_last_error(), "add") != NULL);
    CG_ASSERT_FAILS(cg_k_mul(b, a), "[4, 2] and [3, 1, 5]");
    CG_ASSERT_FAILS(cg_k_axpby(a, 1.0f, b, 1.0f), "axpby");
    CG_ASSERT_FAILS(cg_k_relu_backward(a, b), "[4, 2]");
    /* NULL input: NULL result, and "<op>: input is NULL" when no message
     * was recorded (never an empty one) */
    cg_clear_error();
    ck_assert_ptr_null(cg_k_add(NULL, a));
    ck_assert_ptr_null(cg_k_exp(NULL));
    ck_assert_ptr_null(cg_k_where(a, NULL, a));
    ck_assert_ptr_null(cg_k_masked_fill(NULL, a, 0.0f));
    ck_assert(!cg_k_add_(NULL, a));
    ck_assert(!cg_k_muls_(NULL, 1.0f));
    ck_assert_str_eq(cg_last_error(), "add: input is NULL");
    cg_release_all(2, a, b);
}
END_TEST

/* ew_expf16 (the 16-lane exp of the loss and attention kernels) gives
 * ew_expf's bits in every lane: a sweep of float bit patterns over the
 * range exp reaches, each in a different lane, and the special values. */
START_TEST(test_exp16_bits)
{
    const float special[] = {NAN,   -NAN,  INFINITY, -INFINITY, 0.0f,    -0.0f,    -104.0f, -104.5f,
                             89.0f, 88.7f, 89.5f,    1e-45f,    -87.33f, -103.97f, 0.5f,    -0.5f};
    int64_t checked = 0;
    for (int64_t i = 0; i < (1 << 20) + 16; i += 16) {
        v16f v;
        for (int l = 0; l < 16; l++) {
            /* bit patterns spread over [-110, 95] and its negatives */
            float x = -110.0f + 205.0f * (float)(i + l) / (float)(1 << 20);
            v[l] = i < (1 << 20) ? x : special[l];
        }
        v16f e = ew_expf16(v);
        for (int l = 0; l < 16; l++) {
            float a = ew_expf(v[l]), b = e[l];
            ck_assert_msg(memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)),
                          "ew_expf16(%.9g) = %.9g, ew_expf gives %.9g", v[l], b, a);
            checked++;
        }
    }
    ck_assert_int_eq(checked, (1 << 20) + 16);
}
END_TEST

/* ew_expf16_normal (the loss's exp for rows whose spread it covers) gives
 * ew_expf16's bits over its whole range [EW_EXP_NORMAL_MIN, 0]: every
 * 61st float bit pattern from -0 down to the range's end, and the ends. */
START_TEST(test_exp16_normal_bits)
{
    uint32_t lo, hi;
    float end = EW_EXP_NORMAL_MIN, nz = -0.0f;
    memcpy(&lo, &nz, sizeof lo);
    memcpy(&hi, &end, sizeof hi);
    int64_t checked = 0;
    for (uint64_t b = lo; b <= hi + 16ull * 61; b += 16 * 61) {
        v16f v;
        for (int l = 0; l < 16; l++) {
            uint32_t u = (uint32_t)(b + (uint64_t)l * 61);
            u = u > hi ? hi - (uint32_t)l : u; /* the last block: the range's end */
            float f;
            memcpy(&f, &u, sizeof f); /* not &v[l]: clang takes no vector element's address */
            v[l] = f;
        }
        if (b == lo)
            v[1] = 0.0f, v[2] = -1e-45f, v[3] = -85.99999f;
        v16f a = ew_expf16(v), e = ew_expf16_normal(v);
        ck_assert_msg(memcmp(&a, &e, sizeof a) == 0, "ew_expf16_normal differs near %.9g", v[0]);
        checked += 16;
    }
    ck_assert_int_gt(checked, 18000000);
}
END_TEST

/* The same bits, or both NaN (whose sign a vector loop may take from either
 * operand of a product) */
static bool same_or_nan(float a, float b)
{
    return (a != a && b != b) || !memcmp(&a, &b, sizeof a);
}

/* ew_gelu16 (the 16-lane GELU of cg_k_gelu's contiguous runs and of the
 * bf16 kernels' write-out) and ew_gelu_grad16 (cg_k_gelu_backward's) give
 * the scalar expressions' bits in every lane: 2^20 values spread over
 * [-60, 60] and the special ones, read through a strided view (the scalar
 * loop); with normal where every lane is within EW_GELU_NORMAL_MAX, which
 * ew_gelu16_normal says exactly. */
START_TEST(test_gelu16_bits)
{
    const int64_t n = (1 << 20) + 16;
    const float special[] = {NAN,   -NAN,  INFINITY, -INFINITY, 0.0f,    -0.0f, 8.0f,   -8.0f,
                             8.01f, 1e10f, -1e10f,   1e-40f,    -1e-40f, 30.0f, -30.0f, 0.5f};
    cg_tensor *x = cg_empty(CG_SHAPE(n, 2));
    for (int64_t i = 0; i < n; i++) {
        const float v =
            i < (1 << 20) ? -60.0f + 120.0f * (float)i / (float)(1 << 20) : special[i - (1 << 20)];
        cg_data(x)[2 * i] = v;
        cg_data(x)[2 * i + 1] = 0.0f;
    }
    /* the scalar expressions (a strided view ran them until cg_k_gelu's
     * strided segments went through gelu_run too) */
    cg_tensor *ref = cg_empty(CG_SHAPE(n)), *dref = cg_empty(CG_SHAPE(n));
    for (int64_t i = 0; i < n; i++) {
        cg_data(ref)[i] = f_gelu(cg_data(x)[2 * i]);
        cg_data(dref)[i] = 1.0f * f_gelu_grad(cg_data(x)[2 * i]);
    }
    int64_t normal_blocks = 0;
    for (int64_t i = 0; i < n; i += 16) {
        v16f v;
        bool within = true;
        for (int l = 0; l < 16; l++) {
            v[l] = cg_data(x)[2 * (i + l)];
            within = within && fabsf(v[l]) <= EW_GELU_NORMAL_MAX;
        }
        ck_assert_int_eq(ew_gelu16_normal(v), within);
        normal_blocks += within;
        for (int pass = 0; pass < 1 + within; pass++) {
            const v16f g = ew_gelu16(v, pass == 1), d = ew_gelu_grad16(v, pass == 1);
            for (int l = 0; l < 16; l++) {
                ck_assert_msg(same_or_nan(g[l], cg_data(ref)[i + l]),
                              "ew_gelu16(%.9g, normal %d) = %.9g, the scalar %.9g", v[l], pass,
                              g[l], cg_data(ref)[i + l]);
                ck_assert_msg(same_or_nan(d[l], cg_data(dref)[i + l]),
                              "ew_gelu_grad16(%.9g, normal %d) = %.9g, the scalar %.9g", v[l], pass,
                              d[l], cg_data(dref)[i + l]);
            }
        }
    }
    ck_assert_int_gt(normal_blocks, 8000); /* [-8, 8] of the spread */
    cg_release_all(3, x, ref, dref);
}
END_TEST

/* A linear layer's activation gradient from a bf16 pre-activation
 * (cg_k_act_grad_run with hbf: its derivatives looked up by the 16 bits)
 * gives the bits of the same values as floats (the derivative computed),
 * for both GELUs, at every one of the 65,536 bf16 values (NaNs and
 * infinities among them), against a gradient of varied signs and sizes. */
START_TEST(test_act_grad_bf16_bits)
{
    const int64_t n = 1 << 16;
    uint16_t *h = malloc(sizeof *h * (size_t)n);
    float *x = malloc(sizeof *x * (size_t)n), *g = malloc(sizeof *g * (size_t)n);
    float *a = malloc(sizeof *a * (size_t)n), *b = malloc(sizeof *b * (size_t)n);
    ck_assert(h && x && g && a && b);
    for (int64_t i = 0; i < n; i++) {
        h[i] = (uint16_t)i;
        x[i] = cg_bf16_to_f32(h[i]);
        g[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f * (i % 3 ? 1.0f : 1e20f);
    }
    const cg_k_act acts[] = {CG_K_ACT_GELU, CG_K_ACT_GELU_ERF};
    for (int k = 0; k < 2; k++) {
        /* in rows of 1000 (the last short), as round_cols hands them over */
        for (int64_t i = 0; i < n; i += 1000) {
            const int64_t w = n - i < 1000 ? n - i : 1000;
            cg_k_act_grad_run(acts[k], w, h + i, true, NULL, g + i, a + i);
            cg_k_act_grad_run(acts[k], w, x + i, false, NULL, g + i, b + i);
        }
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(same_or_nan(a[i], b[i]),
                          "act %d at bf16 0x%04x (%.9g): %.9g from the bits, %.9g computed", k,
                          (unsigned)h[i], x[i], a[i], b[i]);
    }
    free(h), free(x), free(g), free(a), free(b);
}
END_TEST

/* Every row's kernels give the bits of its expression on contiguous
 * tensors too, where a row may run its own kernel (GELU's takes the fast
 * exp in blocks whose |x| <= 8): the same values through a transposed view
 * take the expression's strided loop. Special values sit in some blocks
 * only. */
START_TEST(test_unary_rows_contiguous_bits)
{
    cg_rng rng = cg_rng_new(29);
    const float special[] = {NAN,   INFINITY, -INFINITY, 9.0f,    -9.0f,
                             20.0f, -20.0f,   1e10f,     -1e-40f, -0.0f};
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(40, 25)), *g = cg_randn(&rng, CG_SHAPE(40, 25));
    for (int i = 0; i < 10; i++)
        cg_data(x)[300 + 37 * i] = special[i];     /* blocks 1 and 2 of 256 */
    cg_data(x)[7] = -8.0f, cg_data(x)[999] = 8.0f; /* the fast exp's bounds */
    cg_tensor *xv = cg_view_transpose(x, 0, 1), *gv = cg_view_transpose(g, 0, 1);
    cg_tensor *xt = cg_k_contiguous(xv), *gt = cg_k_contiguous(gv);
    /* x's and g's values, strided */
    cg_tensor *xs = cg_view_transpose(xt, 0, 1), *gs = cg_view_transpose(gt, 0, 1);
    for (int r = 0; r < N_ROWS; r++) {
        cg_tensor *y[2] = {ROW_K[r].k(x), ROW_K[r].k(xs)};
        cg_tensor *d[2] = {ROW_K[r].backward(x, g), ROW_K[r].backward(xs, gs)};
        for (int k = 0; k < 2; k++)
            ck_assert(y[k] && d[k] && cg_is_contiguous(y[k]) && cg_is_contiguous(d[k]));
        for (int64_t i = 0; i < 1000; i++) {
            ck_assert_msg(same_or_nan(cg_data(y[0])[i], cg_data(y[1])[i]), "%s at %lld",
                          ROW_K[r].name, (long long)i);
            ck_assert_msg(same_or_nan(cg_data(d[0])[i], cg_data(d[1])[i]), "%s at %lld",
                          ROW_K[r].bname, (long long)i);
            if (r == ROW_GELU) { /* both layouts run gelu_run: its expression's bits */
                const float xi = cg_data(x)[i], gi = cg_data(g)[i];
                ck_assert_msg(same_or_nan(cg_data(y[0])[i], f_gelu(xi)), "gelu(%.9g)", xi);
                ck_assert_msg(same_or_nan(cg_data(d[0])[i], gi * f_gelu_grad(xi)), "gelu'(%.9g)",
                              xi);
            }
        }
        cg_release_all(4, y[0], y[1], d[0], d[1]);
    }
    cg_release_all(8, x, g, xv, gv, xt, gt, xs, gs);
}
END_TEST

/* GELU on strided operands (transposed, step-sliced, permuted, broadcast
 * along its rows; the gradient transposed too): cg_k_gelu and
 * cg_k_gelu_backward gather their segments EW_GATHER (256) at a time into
 * gelu_run, and give the bits of the contiguous copies' (a NaN where
 * they have a NaN, as unary_rows_contiguous_bits has it: gelu_run's
 * copies inlined in two places may order a NaN's operands apart), in segments
 * longer than a block and shorter, in blocks with and without the fast
 * exp (|x| > 8, NaN, infinities), with 1 and 2 threads. */
static void gelu_same_bits(const cg_tensor *x, const cg_tensor *g)
{
    cg_tensor *xc = cg_k_contiguous(x), *gc = cg_k_contiguous(g);
    cg_tensor *y0 = cg_k_gelu(xc), *d0 = cg_k_gelu_backward(xc, gc);
    ck_assert_msg(y0 && d0, "%s", cg_last_error());
    for (int threads = 1; threads <= 2; threads++) {
        cg_set_num_threads(threads);
        cg_tensor *y = cg_k_gelu(x), *d = cg_k_gelu_backward(x, g);
        ck_assert(y && d && cg_same_shape(y, y0) && cg_same_shape(d, d0));
        for (int64_t i = 0; i < cg_numel(y0); i++) {
            const float xi = cg_data(xc)[i];
            ck_assert_msg(same_or_nan(cg_data(y)[i], cg_data(y0)[i]),
                          "gelu(%.9g), %d threads: %.9g, contiguous %.9g", xi, threads,
                          cg_data(y)[i], cg_data(y0)[i]);
            ck_assert_msg(same_or_nan(cg_data(d)[i], cg_data(d0)[i]),
                          "gelu'(%.9g), %d threads: %.9g, contiguous %.9g", xi, threads,
                          cg_data(d)[i], cg_data(d0)[i]);
        }
        cg_release_all(2, y, d);
    }
    cg_release_all(4, xc, gc, y0, d0);
}

START_TEST(test_gelu_strided_bits)
{
    cg_rng rng = cg_rng_new(31);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(300, 700)), *g = cg_randn(&rng, CG_SHAPE(700, 300));
    float *xp = cg_data(x);
    const float special[] = {NAN, INFINITY, -INFINITY, 9.0f, -30.0f, 8.0f, -8.0f, 1e10f};
    for (int64_t i = 0; i < 300 * 700; i += 997) /* some blocks of each layout */
        xp[i] = special[(i / 997) % 8];
    for (int64_t i = 0; i < 300 * 700; i++)
        xp[i] *= i % 5 == 0 ? 4.0f : 1.0f; /* more of them past the fast exp's 8 */
    cg_tensor *xt = cg_view_transpose(x, 0, 1), *gt = cg_view_transpose(g, 0, 1); /* [700, 300] */
    gelu_same_bits(xt, g); /* runs of 300, stride 700 */
    gelu_same_bits(x, gt); /* x contiguous, g strided */
    cg_tensor *gc = cg_k_contiguous(gt), *gtt = cg_view_transpose(gc, 0, 1); /* [700, 300] */
    gelu_same_bits(xt, gtt);                                                 /* both strided */
    cg_tensor *xs = cg_view_slice(x, 1, 1, 700, 3), *gs = cg_view_slice(gt, 1, 1, 700, 3);
    gelu_same_bits(xs, gs); /* every third column: 233 a run */
    cg_tensor *x4 = cg_view_reshape(x, CG_SHAPE(30, 10, 7, 100));
    cg_tensor *xp4 = cg_view_permute(x4, (int[]){3, 1, 2, 0}); /* [100, 10, 7, 30] */
    cg_tensor *g4 = cg_randn(&rng, CG_SHAPE(100, 10, 7, 30));
    gelu_same_bits(xp4, g4);
    cg_tensor *col = cg_view_slice(x, 1, 0, 1, 1); /* [300, 1] */
    cg_tensor *wide = cg_view_expand(col, CG_SHAPE(300, 700)),
              *gw = cg_randn(&rng, CG_SHAPE(300, 700));
    gelu_same_bits(wide, gw); /* stride 0 along each row: 700 = 2 blocks and 188 */
    cg_release_all(14, x, g, xt, gt, gc, gtt, xs, gs, x4, xp4, g4, col, wide, gw);
}
END_TEST

/* The build keeps C arithmetic unfused (-ffp-contract=off, meson.build):
 * the kernels' C text compiled for FMA (target("avx2,fma") or
 * "avx512f", everything under -march=native) must give the bits of the
 * same text in the baseline clone and of GCC's build. clang's default
 * (-ffp-contract=on) fuses a * b + c there. This file is compiled with
 * the library's flags, so a build that contracts fails here. a * a is
 * 1 + 2^-11 + 2^-24, a tie rounded to 1 + 2^-11: 0 unfused, 2^-24 fused. */
#if defined(__x86_64__)
__attribute__((target("avx2,fma"), noinline)) static float mul_add_fma_isa(float a, float b,
                                                                           float c)
{
    return a * b + c;
}
#endif
__attribute__((noinline)) static float mul_add(float a, float b, float c) { return a * b + c; }

START_TEST(test_no_fp_contraction)
{
    volatile float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
    ck_assert_msg(mul_add(a, a, c) == 0.0f, "a * b + c fused in the baseline code: %a",
                  (double)mul_add(a, a, c));
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        ck_assert_msg(mul_add_fma_isa(a, a, c) == 0.0f,
                      "a * b + c fused in code compiled for FMA: %a (-ffp-contract is not off)",
                      (double)mul_add_fma_isa(a, a, c));
#endif
}
END_TEST

/* pow's small exponents as PyTorch computes them, each element's bits:
 * x^3 = x * x * x and x^-2 = 1 / (x * x) (two roundings, where powf rounds
 * once), x^-1 = 1 / x, x^0.5 = sqrt(x), x^-0.5 = 1 / sqrt(x). */
START_TEST(test_pow_small_exponents_bits)
{
    enum { N = 1000 };
    cg_tensor *x = cg_empty(CG_SHAPE(N));
    float *xv = cg_data(x);
    for (int i = 0; i < N; i++)
        xv[i] = 0.5f + 0.00731f * (float)i;
    const float ps[] = {3.0f, -2.0f, -1.0f, 0.5f, -0.5f};
    float e[N];
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        for (int i = 0; i < N; i++) {
            const float v = xv[i];
            e[i] = k == 0   ? v * v * v
                   : k == 1 ? 1.0f / (v * v)
                   : k == 2 ? 1.0f / v
                   : k == 3 ? sqrtf(v)
                            : 1.0f / sqrtf(v);
        }
        cg_tensor *p = cg_k_pow(x, ps[k]);
        ck_assert_msg(p != NULL, "%s", cg_last_error());
        CG_ASSERT_TENSOR(p, e, 0, 0);
        cg_release(p);
    }
    cg_release(x);
}
END_TEST

/* cg_k_act_run with the GELUs' output apart (a) and both roundings: h16
 * is the pre-activation's, a16 the output's (core/linear.c asks for a or
 * a16, never both; the kernel's contract has both), h left as it was. */
START_TEST(test_act_run_out16)
{
    enum { N = 10, RUNS = 2 };
    float h[RUNS * N], hc[RUNS * N], a[RUNS * N];
    uint16_t h16[RUNS * N], a16[RUNS * N];
    for (int i = 0; i < RUNS * N; i++)
        h[i] = -2.0f + 0.21f * (float)i;
    const cg_k_act acts[] = {CG_K_ACT_GELU, CG_K_ACT_GELU_ERF};
    for (int k = 0; k < 2; k++) {
        memcpy(hc, h, sizeof h);
        cg_k_act_run(acts[k], N, RUNS, N, hc, a, NULL, h16, a16);
        for (int i = 0; i < RUNS * N; i++) {
            float ra = cg_bf16_round(a[i]), rh = cg_bf16_round(h[i]);
            uint32_t ua, uh;
            memcpy(&ua, &ra, sizeof ua);
            memcpy(&uh, &rh, sizeof uh);
            ck_assert_msg(hc[i] == h[i], "act %d: h[%d] written", k, i);
            ck_assert_msg(a[i] == (k ? f_gelu_erf(h[i]) : f_gelu(h[i])), "act %d: a[%d]", k, i);
            ck_assert_msg(h16[i] == (uint16_t)(uh >> 16), "act %d: h16[%d]", k, i);
            ck_assert_msg(a16[i] == (uint16_t)(ua >> 16), "act %d: a16[%d] %#x, want %#x", k, i,
                          a16[i], ua >> 16);
        }
    }
}
END_TEST

/* Mixed dtypes where the float32 kernels meet them: add_ of a bf16 source
 * into a float32 destination adds its values (each bf16 exact in float);
 * where of a float32 and an int64 branch promotes as torch.where, to
 * float32; relu_mask refuses a bf16 input, naming itself. */
START_TEST(test_mixed_dtypes)
{
    cg_tensor *dst = cg_from_data(CG_SHAPE(3), (float[]){1, 2, 3});
    cg_tensor *s32 = cg_from_data(CG_SHAPE(3), (float[]){0.5f, 0.25f, 4});
    cg_tensor *src = cg_k_to(s32, CG_BF16);
    ck_assert_msg(cg_k_add_(dst, src), "%s", cg_last_error());
    CG_ASSERT_TENSOR(dst, ((float[]){1.5f, 2.25f, 7}), 0, 0);
    cg_tensor *c = cg_test_mask(CG_SHAPE(3), (const uint8_t[]){1, 0, 1});
    cg_tensor *i = cg_from_i64(CG_SHAPE(3), (int64_t[]){7, 8, 9});
    cg_tensor *w = cg_k_where(c, dst, i);
    ck_assert_msg(w, "%s", cg_last_error());
    ck_assert_int_eq(w->dtype, CG_F32);
    CG_ASSERT_TENSOR(w, ((float[]){1.5f, 8, 7}), 0, 0);
    CG_ASSERT_FAILS(cg_k_relu_mask(src), "relu_mask");
    cg_release_all(5, dst, s32, src, i, w);
}
END_TEST

static Suite *elementwise_suite(void)
{
    Suite *s = suite_create("elementwise");
    struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"unary_rows", test_unary_rows},
        {"unary_param_rows", test_unary_param_rows},
        {"unary", test_unary_layouts},
        {"unary_rows_contiguous_bits", test_unary_rows_contiguous_bits},
        {"gelu16_bits", test_gelu16_bits},
        {"gelu_strided_bits", test_gelu_strided_bits},
        {"act_grad_bf16_bits", test_act_grad_bf16_bits},
        {"binary", test_binary_layouts},
        {"broadcast", test_binary_broadcast},
        {"where", test_where},
        {"masked_fill", test_masked_fill},
        {"inplace", test_inplace},
        {"inplace_overlap", test_inplace_overlap},
        {"special", test_special_values},
        {"mixed_dtypes", test_mixed_dtypes},
        {"act_run_out16", test_act_run_out16},
        {"pow_small_exponents_bits", test_pow_small_exponents_bits},
        {"threads", test_threads_identical},
        {"errors", test_errors},
        {"exp_accuracy", test_exp_accuracy},
        {"tanh_accuracy", test_tanh_accuracy},
        {"exp16_bits", test_exp16_bits},
        {"exp16_normal_bits", test_exp16_normal_bits},
        {"no_fp_contraction", test_no_fp_contraction},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    Suite *s[] = {elementwise_suite()};
    return cg_test_run(s, 1);
}
