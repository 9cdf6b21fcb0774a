/* torch.nn's remaining activation-like modules (2026-12-07): F.prelu and
 * nn.PReLU, F.rrelu and nn.RReLU, F.glu and nn.GLU, F.pixel_shuffle /
 * pixel_unshuffle and their modules, nn.Softmax / LogSoftmax / Softmin /
 * Softmax2d:
 *   - values and gradients against references computed here in double;
 *   - gradchecks (prelu on inputs away from 0, both weight forms, 0-d, 1-d,
 *     2-d and 4-d inputs, strided ones; rrelu in training on fixed draws
 *     and in evaluation; glu along each dim; the shuffles) with the reads
 *     masks of CG_OP_TABLE checked (cg_test_check_unread);
 *   - rrelu's draws in [lower, upper] and used by its gradient, its
 *     evaluation leaky_relu's bits;
 *   - 1 and 2 threads the same bits; bfloat16 in, bfloat16 out;
 *   - refusals in one line, asserted by message;
 *   - the modules: PReLU's weight trained, saved and loaded.
 * PyTorch's values and gradients: tests/interop/prelu.py + check_prelu.c
 * (torch_prelu). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/layers.h"
#include "nn/spatial.h"
#include "tests/testutil.h"

/* N(0, 1) values of shape moved at least 0.2 away from 0 (the kink), on
 * layout (cg_test_randn_layout's 0 contiguous, 1 transposed, 2 strided) */
static cg_tensor *away0(cg_rng *r, int nd, const int64_t *shape, int layout)
{
    cg_tensor *x = nd >= 2 ? cg_test_randn_layout(r, nd, shape, layout) : cg_randn(r, nd, shape);
    float *v = cg_test_values(x);
    const int64_t n = cg_numel(x);
    for (int64_t i = 0; i < n; i++)
        v[i] += v[i] > 0 ? 0.2f : -0.2f;
    cg_tensor *c = cg_from_data(nd, shape, v);
    free(v);
    if (layout && nd >= 2) { /* the values back into x's own layout */
        ck_assert(cg_copy_(x, c));
        cg_release(c);
        return x;
    }
    cg_release(x);
    return c;
}

/* ----------------------------------------------------------- prelu */
typedef struct {
    const char *name;
    int nd;
    int64_t shape[4];
    int64_t nw; /* the weight's elements; 0: a 0-d weight */
} prelu_case;

static const prelu_case PRELU_CASES[] = {
    {"0-d", 0, {0}, 1},
    {"1-d", 1, {7}, 1},
    {"1-d w0d", 1, {5}, 0},
    {"2-d C", 2, {4, 3}, 3},
    {"2-d one", 2, {4, 3}, 1},
    {"3-d C", 3, {2, 5, 4}, 5},
    {"4-d C", 4, {2, 3, 4, 5}, 3},
    {"4-d one", 4, {2, 3, 4, 5}, 1},
};
#define N_PRELU (int)(sizeof PRELU_CASES / sizeof PRELU_CASES[0])

static cg_tensor *weight_of(const prelu_case *c, cg_rng *r)
{
    const int64_t n = c->nw ? c->nw : 1;
    float v[8];
    for (int64_t i = 0; i < n; i++)
        v[i] = 0.5f * cg_rng_uniform(r) - 0.1f * (float)i; /* slopes of both signs */
    return c->nw ? cg_from_data(CG_SHAPE(n), v) : cg_from_data(0, NULL, v);
}

static cg_tensor *prelu_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_prelu(in[0], in[1]);
}

/* y, dx and dw of the loss sum(y * u) against double: y exact (a float
 * product rounded once), dw to 1e-6 relative */
START_TEST(test_prelu_values)
{
    cg_rng r = cg_rng_new(11);
    for (int i = 0; i < N_PRELU; i++) {
        const prelu_case *c = &PRELU_CASES[i];
        for (int layout = 0; layout < (c->nd >= 2 ? 3 : 1); layout++) {
            cg_tensor *x = cg_requires_grad(away0(&r, c->nd, c->shape, layout), true);
            cg_tensor *w = cg_requires_grad(weight_of(c, &r), true);
            cg_tensor *u = cg_randn(&r, c->nd, c->shape);
            cg_tensor *y = cg_prelu(x, w), *yu = cg_mul(y, u), *l = cg_sum_all(yu);
            ck_assert_msg(l && cg_backward(l, NULL, false), "%s: %s", c->name, cg_last_error());
            double *xv = cg_test_doubles(x), *wv = cg_test_doubles(w), *uv = cg_test_doubles(u);
            float *yv = cg_test_values(y), *dx = cg_test_values(x->grad),
                  *dw = cg_test_values(w->grad);
            const int64_t n = cg_numel(x), C = c->nd >= 2 ? c->shape[1] : 1,
                          S = c->nd >= 2 ? n / (c->shape[0] * C) : n;
            double dwr[8] = {0};
            for (int64_t k = 0; k < n; k++) {
                const int64_t ch = c->nw > 1 ? (k / S) % C : 0;
                const double a = wv[ch], want = xv[k] > 0 ? xv[k] : (float)(a * xv[k]);
                ck_assert_msg(yv[k] == (float)want, "%s y[%lld] %g, want %g", c->name, (long long)k,
                              (double)yv[k], want);
                const double gx = xv[k] > 0 ? uv[k] : (float)(a * uv[k]);
                ck_assert_msg(dx[k] == (float)gx, "%s dx[%lld]", c->name, (long long)k);
                dwr[ch] += xv[k] > 0 ? 0 : uv[k] * xv[k];
            }
            for (int64_t k = 0; k < (c->nw ? c->nw : 1); k++)
                ck_assert_msg(fabs(dw[k] - dwr[k]) <= 1e-6 * (1 + fabs(dwr[k])),
                              "%s dw[%lld] %g, want %g", c->name, (long long)k, (double)dw[k],
                              dwr[k]);
            ck_assert_int_eq(w->grad->ndim, w->ndim);
            free(xv), free(wv), free(uv), free(yv), free(dx), free(dw);
            cg_release_all(6, x, w, u, y, yu, l);
        }
    }
}
END_TEST

START_TEST(test_prelu_gradcheck)
{
    cg_rng r = cg_rng_new(12);
    for (int i = 0; i < N_PRELU; i++) {
        const prelu_case *c = &PRELU_CASES[i];
        for (int layout = 0; layout < (c->nd >= 2 ? 3 : 1); layout++) {
            cg_tensor *in[2] = {cg_requires_grad(away0(&r, c->nd, c->shape, layout), true),
                                cg_requires_grad(weight_of(c, &r), true)};
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(prelu_fn, NULL, 2, in, NULL, &rep), "%s layout %d: %s",
                          c->name, layout, rep.message);
            ck_assert_int_gt(rep.checked, 0);
            cg_test_check_unread(prelu_fn, NULL, 2, in, c->name); /* PRELU's reads mask */
            cg_release_all(2, in[0], in[1]);
        }
    }
}
END_TEST

START_TEST(test_prelu_refusals)
{
    cg_tensor *x2 = cg_zeros(CG_SHAPE(4, 3)), *x1 = cg_zeros(CG_SHAPE(3));
    cg_tensor *w2 = cg_ones(CG_SHAPE(2)), *w3 = cg_ones(CG_SHAPE(3)),
              *w31 = cg_ones(CG_SHAPE(3, 1));
    cg_tensor *ids = cg_test_ids(3, NULL);
    CG_ASSERT_REFUSED_LINE(cg_prelu(x2, w2),
                           "prelu: a weight of 2 elements for the input [4, 3] of 3 channels");
    /* PyTorch 1.13: a 1-d input has one channel */
    CG_ASSERT_REFUSED_LINE(cg_prelu(x1, w3), "input [3] of 1 channel (its dim 1; 1 below 2 dims)");
    CG_ASSERT_REFUSED_LINE(cg_prelu(x2, w31),
                           "prelu: the weight must be a scalar or 1-d (got [3, 1])");
    CG_ASSERT_REFUSED_LINE(cg_prelu(ids, w3), "prelu: the input is int64, expected a float tensor");
    CG_ASSERT_REFUSED_LINE(cg_prelu(x2, NULL), "prelu");
    CG_ASSERT_REFUSED_LINE(cg_prelu(NULL, w3), "prelu");
    cg_tensor *dx = NULL;
    CG_ASSERT_REFUSED(!cg_k_prelu_backward(x2, w3, x1, &dx, NULL),
                      "prelu_backward: gradient [3] for the input [4, 3]");
    ck_assert_ptr_null(dx);
    CG_ASSERT_REFUSED_LINE(cg_prelu_new(0, 0.25f),
                           "PReLU: num_parameters must be at least 1 (got 0)");
    cg_module *m = cg_prelu_new(4, 0.25f);
    CG_ASSERT_REFUSED_LINE(cg_module_forward(m, x2), "a weight of 4 elements for the input [4, 3]");
    cg_module_free(m);
    cg_release_all(5, x2, x1, w2, w3, w31);
}
END_TEST

/* nn.PReLU: its weight filled with init, a parameter; a step of SGD
 * changes it, and a saved module loads into a fresh one */
START_TEST(test_prelu_module)
{
    cg_module *m = cg_prelu_new(3, 0.25f);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->type, "PReLU");
    ck_assert_int_eq(cg_module_num_params(m), 3);
    cg_tensor *w = cg_module_get_param(m, "weight");
    ck_assert_ptr_nonnull(w);
    const float q[3] = {0.25f, 0.25f, 0.25f};
    CG_ASSERT_TENSOR(w, q, 0, 0);
    cg_rng r = cg_rng_new(13);
    cg_tensor *x = away0(&r, CG_SHAPE(2, 3, 4), 0);
    cg_tensor *y = cg_module_forward(m, x), *yf = cg_prelu(x, w), *l = cg_sum_all(y);
    float *a = cg_test_values(y), *b = cg_test_values(yf);
    ck_assert(!memcmp(a, b, sizeof(float) * 24));
    ck_assert(cg_backward(l, NULL, false));
    ck_assert_ptr_nonnull(w->grad);
    float *g = cg_test_values(w->grad), nw[3];
    for (int c = 0; c < 3; c++) {
        ck_assert_float_ne(g[c], 0.0f);
        nw[c] = 0.25f - 0.1f * g[c];
    }
    cg_tensor *nt = cg_from_data(CG_SHAPE(3), nw);
    ck_assert(cg_copy_(w, nt));
    char dir[256], path[300];
    cg_test_mkdtemp(dir, sizeof dir, "prelu");
    snprintf(path, sizeof path, "%s/prelu.safetensors", dir);
    ck_assert_msg(cg_module_save(m, path, 0, NULL), "%s", cg_last_error());
    cg_module *m2 = cg_prelu_new(3, 0.0f);
    ck_assert_msg(cg_module_load_file(m2, path), "%s", cg_last_error());
    CG_ASSERT_TENSOR(cg_module_get_param(m2, "weight"), nw, 0, 0);
    cg_module *m3 = cg_prelu_new(1, 0.0f); /* the shape is checked */
    CG_ASSERT_REFUSED(!cg_module_load_file(m3, path), "weight");
    cg_test_rm_tree(dir);
    free(a), free(b), free(g);
    cg_release_all(5, x, y, yf, l, nt);
    cg_module_free(m), cg_module_free(m2), cg_module_free(m3);
}
END_TEST

/* ----------------------------------------------------------- rrelu */
typedef struct {
    float lower, upper;
    bool training;
} rrelu_ctx;

/* the same draws at every call: a generator of its own, seeded 21 */
static cg_tensor *rrelu_fn(void *ctx, cg_tensor *const *in)
{
    const rrelu_ctx *c = ctx;
    cg_rng r = cg_rng_new(21);
    return cg_rrelu(in[0], c->lower, c->upper, c->training, &r);
}

/* Training: y = x where x > 0, a_i x elsewhere, a_i in [lower, upper],
 * spread over it; the gradient is the same a_i; the generator advances
 * by numel and the draws do not repeat; a seed gives its draws again */
START_TEST(test_rrelu_training)
{
    cg_rng r = cg_rng_new(22), d = cg_rng_new(5);
    const int64_t n = 4000;
    cg_tensor *x = cg_requires_grad(away0(&r, CG_SHAPE(40, 100), 0), true);
    cg_tensor *y = cg_rrelu(x, 0.125f, 1.0f / 3, true, &d), *l = cg_sum_all(y);
    ck_assert_uint_eq(d.counter, (uint64_t)n);
    ck_assert(cg_backward(l, NULL, false));
    float *xv = cg_test_values(x), *yv = cg_test_values(y), *gv = cg_test_values(x->grad);
    float lo = 1, hi = 0;
    int neg = 0;
    for (int64_t i = 0; i < n; i++) {
        if (xv[i] > 0) {
            ck_assert(yv[i] == xv[i] && gv[i] == 1.0f);
            continue;
        }
        const float a = gv[i];
        ck_assert_msg(a >= 0.125f && a <= 1.0f / 3, "slope %g", (double)a);
        ck_assert(yv[i] == xv[i] * a); /* the gradient's slope is the forward's */
        lo = fminf(lo, a), hi = fmaxf(hi, a);
        neg++;
    }
    ck_assert_int_gt(neg, 1500);
    ck_assert_msg(lo < 0.13f && hi > 0.328f, "draws spread over [%g, %g]", (double)lo, (double)hi);
    /* the next call draws others; seed 5 again gives these */
    cg_tensor *y2 = cg_rrelu(x, 0.125f, 1.0f / 3, true, &d);
    cg_rng d0 = cg_rng_new(5);
    cg_tensor *y3 = cg_rrelu(x, 0.125f, 1.0f / 3, true, &d0);
    float *v2 = cg_test_values(y2), *v3 = cg_test_values(y3);
    ck_assert(memcmp(v2, yv, sizeof(float) * (size_t)n));
    ck_assert(!memcmp(v3, yv, sizeof(float) * (size_t)n));
    /* lower == upper: that slope exactly */
    cg_tensor *y4 = cg_rrelu(x, 0.3f, 0.3f, true, &d), *y5 = cg_leaky_relu(x, 0.3f);
    float *v4 = cg_test_values(y4), *v5 = cg_test_values(y5);
    ck_assert(!memcmp(v4, v5, sizeof(float) * (size_t)n));
    free(xv), free(yv), free(gv), free(v2), free(v3), free(v4), free(v5);
    cg_release_all(7, x, y, l, y2, y3, y4, y5);
}
END_TEST

/* Evaluation: leaky_relu(x, (lower + upper) / 2)'s bits, value and
 * gradient, with or without a generator (not advanced) */
START_TEST(test_rrelu_eval)
{
    cg_rng r = cg_rng_new(23), d = cg_rng_new(1);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(6, 7)), true);
    cg_tensor *xl = cg_requires_grad(cg_detach(x), true);
    ck_assert_float_eq(cg_k_rrelu_slope(0.125f, 1.0f / 3),
                       (float)((0.125 + (double)(1.0f / 3)) / 2));
    cg_tensor *y = cg_rrelu(x, 0.125f, 1.0f / 3, false, &d),
              *ya = cg_rrelu(x, 0.125f, 1.0f / 3, false, NULL);
    cg_tensor *yl = cg_leaky_relu(xl, cg_k_rrelu_slope(0.125f, 1.0f / 3));
    ck_assert_uint_eq(d.counter, 0);
    cg_tensor *l = cg_sum_all(y), *ll = cg_sum_all(yl);
    ck_assert(cg_backward(l, NULL, false) && cg_backward(ll, NULL, false));
    float *a = cg_test_values(y), *b = cg_test_values(yl), *c = cg_test_values(ya);
    float *ga = cg_test_values(x->grad), *gb = cg_test_values(xl->grad);
    ck_assert(!memcmp(a, b, sizeof(float) * 42) && !memcmp(c, b, sizeof(float) * 42));
    ck_assert(!memcmp(ga, gb, sizeof(float) * 42));
    free(a), free(b), free(c), free(ga), free(gb);
    cg_release_all(7, x, xl, y, ya, yl, l, ll);
}
END_TEST

START_TEST(test_rrelu_gradcheck)
{
    cg_rng r = cg_rng_new(24);
    const rrelu_ctx cases[3] = {{0.125f, 1.0f / 3, true}, {-0.5f, 0.9f, true}, {0.1f, 0.3f, false}};
    for (int i = 0; i < 3; i++)
        for (int layout = 0; layout < 3; layout++) {
            cg_tensor *x = cg_requires_grad(away0(&r, CG_SHAPE(3, 5, 4), layout), true);
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(rrelu_fn, (void *)&cases[i], 1, &x, NULL, &rep),
                          "case %d layout %d: %s", i, layout, rep.message);
            cg_test_check_unread(rrelu_fn, (void *)&cases[i], 1, &x, "rrelu"); /* RRELU's mask */
            cg_release(x);
        }
}
END_TEST

START_TEST(test_rrelu_refusals)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(3));
    cg_rng d = cg_rng_new(0);
    CG_ASSERT_REFUSED_LINE(cg_rrelu(x, 0.5f, 0.2f, true, &d),
                           "rrelu: lower 0.5 must not exceed upper 0.2");
    CG_ASSERT_REFUSED_LINE(cg_rrelu(x, 0.5f, 0.2f, false, NULL),
                           "rrelu: lower 0.5 must not exceed upper 0.2");
    CG_ASSERT_REFUSED_LINE(cg_rrelu(x, NAN, 0.2f, false, NULL), "rrelu: lower nan");
    CG_ASSERT_REFUSED_LINE(cg_rrelu(x, 0.1f, 0.2f, true, NULL), "rrelu");
    CG_ASSERT_REFUSED_LINE(cg_rrelu(cg_test_ids(3, NULL), 0.1f, 0.2f, true, &d),
                           "rrelu: the input is int64");
    ck_assert_uint_eq(d.counter, 0);
    CG_ASSERT_REFUSED_LINE(cg_rrelu_new(0.5f, 0.2f, NULL),
                           "RReLU: rrelu: lower 0.5 must not exceed upper 0.2");
    cg_release(x);
}
END_TEST

/* nn.RReLU: training draws from the module's generator (its own, seeded 0,
 * or the one given), evaluation is leaky_relu's */
START_TEST(test_rrelu_module)
{
    cg_rng r = cg_rng_new(25), g = cg_rng_new(0);
    cg_tensor *x = away0(&r, CG_SHAPE(5, 6), 0);
    cg_module *m = cg_rrelu_new(0.125f, 1.0f / 3, NULL), *mg = cg_rrelu_new(0.125f, 1.0f / 3, &g);
    ck_assert_str_eq(m->type, "RReLU");
    ck_assert_int_eq(cg_module_num_params(m), 0);
    cg_tensor *y = cg_module_forward(m, x), *yg = cg_module_forward(mg, x);
    ck_assert_uint_eq(g.counter, 30);
    cg_rng s = cg_rng_new(0);
    cg_tensor *yr = cg_rrelu(x, 0.125f, 1.0f / 3, true, &s);
    cg_module_train(m, false);
    cg_tensor *ye = cg_module_forward(m, x),
              *yl = cg_leaky_relu(x, cg_k_rrelu_slope(0.125f, 1.0f / 3));
    float *a = cg_test_values(y), *b = cg_test_values(yg), *c = cg_test_values(yr),
          *e = cg_test_values(ye), *f = cg_test_values(yl);
    ck_assert(!memcmp(a, c, sizeof(float) * 30) && !memcmp(b, c, sizeof(float) * 30));
    ck_assert(!memcmp(e, f, sizeof(float) * 30));
    ck_assert(memcmp(a, e, sizeof(float) * 30));
    free(a), free(b), free(c), free(e), free(f);
    cg_release_all(6, x, y, yg, yr, ye, yl);
    cg_module_free(m), cg_module_free(mg);
}
END_TEST

/* ------------------------------------------------------------- glu */
typedef struct {
    int nd;
    int64_t shape[3];
    int dim;
} glu_case;

static const glu_case GLU_CASES[] = {
    {1, {6}, 0}, {2, {4, 6}, -1}, {2, {4, 6}, 0}, {3, {2, 4, 6}, 1}, {3, {2, 3, 8}, -1},
};
#define N_GLU (int)(sizeof GLU_CASES / sizeof GLU_CASES[0])

static cg_tensor *glu_fn(void *ctx, cg_tensor *const *in)
{
    return cg_glu(in[0], ((const glu_case *)ctx)->dim);
}

/* a * sigmoid(b) and its gradients against double, to 1e-6 */
START_TEST(test_glu_values)
{
    cg_rng r = cg_rng_new(31);
    for (int i = 0; i < N_GLU; i++) {
        const glu_case *c = &GLU_CASES[i];
        cg_tensor *x = cg_requires_grad(cg_randn(&r, c->nd, c->shape), true);
        const int d = c->dim < 0 ? c->dim + c->nd : c->dim;
        int64_t os[3];
        memcpy(os, c->shape, sizeof os);
        os[d] /= 2;
        cg_tensor *u = cg_randn(&r, c->nd, os);
        cg_tensor *y = cg_glu(x, c->dim), *yu = cg_mul(y, u), *l = cg_sum_all(yu);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%d: %s", i, cg_last_error());
        ck_assert(cg_same_shape(y, u));
        double *xv = cg_test_doubles(x), *uv = cg_test_doubles(u);
        float *yv = cg_test_values(y), *gv = cg_test_values(x->grad);
        int64_t inner = 1;
        for (int k = d + 1; k < c->nd; k++)
            inner *= c->shape[k];
        const int64_t h = os[d], outer = cg_numel(y) / (h * inner);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < h; j++)
                for (int64_t k = 0; k < inner; k++) {
                    const int64_t ia = (o * 2 * h + j) * inner + k, ib = ia + h * inner,
                                  iy = (o * h + j) * inner + k;
                    const double s = 1 / (1 + exp(-xv[ib]));
                    const double ga = uv[iy] * s, gb = uv[iy] * xv[ia] * s * (1 - s);
                    ck_assert_msg(fabs(yv[iy] - xv[ia] * s) <= 1e-6 * (1 + fabs(xv[ia])),
                                  "%d y[%lld]", i, (long long)iy);
                    ck_assert_msg(fabs(gv[ia] - ga) <= 1e-6 && fabs(gv[ib] - gb) <= 1e-6,
                                  "%d grad at %lld", i, (long long)ia);
                }
        free(xv), free(uv), free(yv), free(gv);
        cg_release_all(5, x, u, y, yu, l);
    }
}
END_TEST

START_TEST(test_glu_gradcheck)
{
    cg_rng r = cg_rng_new(32);
    for (int i = 0; i < N_GLU; i++) {
        const glu_case *c = &GLU_CASES[i];
        for (int layout = 0; layout < (c->nd >= 2 ? 3 : 1); layout++) {
            cg_tensor *x =
                cg_requires_grad(c->nd >= 2 ? cg_test_randn_layout(&r, c->nd, c->shape, layout)
                                            : cg_randn(&r, c->nd, c->shape),
                                 true);
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(glu_fn, (void *)c, 1, &x, NULL, &rep),
                          "case %d layout %d: %s", i, layout, rep.message);
            cg_test_check_unread(glu_fn, (void *)c, 1, &x, "glu");
            cg_release(x);
        }
    }
}
END_TEST

START_TEST(test_glu_refusals)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(2, 3)), *s = cg_test_scalar(1);
    CG_ASSERT_REFUSED_LINE(cg_glu(x, 1),
                           "glu: the halved dim must be even, but dim 1 of [2, 3] is 3");
    CG_ASSERT_REFUSED_LINE(cg_glu(x, 2), "glu: dim 2 out of range");
    CG_ASSERT_REFUSED_LINE(cg_glu(x, -3), "glu: dim -3 out of range");
    CG_ASSERT_REFUSED_LINE(cg_glu(s, -1), "glu: a 0-d input has no dim to halve");
    CG_ASSERT_REFUSED_LINE(cg_glu(NULL, -1), "glu");
    cg_module *m = cg_glu_new(-1);
    CG_ASSERT_REFUSED_LINE(cg_module_forward(m, x), "glu: the halved dim must be even");
    cg_module_free(m);
    cg_release(x);
}
END_TEST

/* ------------------------------------------------------- bfloat16 */
/* bf16 in, bf16 out, the float32 result rounded once (as leaky_relu and
 * the gates do); the gradients bf16 */
START_TEST(test_bf16)
{
    cg_rng r = cg_rng_new(41);
    cg_tensor *x0 = away0(&r, CG_SHAPE(2, 3, 4, 4), 0), *xb = cg_to(x0, CG_BF16);
    cg_tensor *xf = cg_to(xb, CG_F32); /* xb's values in float32 */
    cg_requires_grad(xb, true);
    cg_tensor *w = cg_from_data(CG_SHAPE(3), (const float[]){0.25f, -0.3f, 0.7f});
    cg_rng d1 = cg_rng_new(3), d2 = cg_rng_new(3);
    cg_tensor *ys[4][2] = {
        {cg_prelu(xb, w), cg_prelu(xf, w)},
        {cg_glu(xb, 2), cg_glu(xf, 2)},
        {cg_rrelu(xb, 0.1f, 0.3f, true, &d1), cg_rrelu(xf, 0.1f, 0.3f, true, &d2)},
        {cg_pixel_shuffle(xb, 1), cg_pixel_unshuffle(xf, 1)},
    };
    const char *what[4] = {"prelu", "glu", "rrelu", "shuffle"};
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(ys[k][0] && ys[k][1], "%s: %s", what[k], cg_last_error());
        ck_assert_int_eq(ys[k][0]->dtype, CG_BF16);
        cg_test_assert_bf16_rounded(ys[k][0], ys[k][1], what[k]);
        cg_tensor *l = cg_sum_all(ys[k][0]);
        ck_assert(cg_backward(l, NULL, false));
        ck_assert_int_eq(xb->grad->dtype, CG_BF16);
        cg_zero_grad(xb);
        cg_release(l);
    }
    for (int k = 0; k < 4; k++)
        cg_release_all(2, ys[k][0], ys[k][1]);
    cg_release_all(4, x0, xb, xf, w);
}
END_TEST

/* -------------------------------------------------- pixel shuffles */
/* out[..., c, h r + i, w r + j] = x[..., c r^2 + i r + j, h, w], by index;
 * unshuffle its inverse (bit for bit) */
START_TEST(test_pixel_shuffle_values)
{
    cg_rng g = cg_rng_new(51);
    const struct {
        int nd;
        int64_t shape[5];
        int64_t r;
    } cases[] = {
        {3, {8, 2, 3}, 2}, {4, {2, 9, 2, 2}, 3}, {5, {2, 1, 4, 3, 2}, 2}, {4, {1, 3, 2, 2}, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int nd = cases[i].nd;
        const int64_t *s = cases[i].shape, r = cases[i].r;
        cg_tensor *x = cg_randn(&g, nd, s), *y = cg_pixel_shuffle(x, r);
        ck_assert_msg(y, "%s", cg_last_error());
        const int64_t C = s[nd - 3] / (r * r), H = s[nd - 2], W = s[nd - 1];
        ck_assert(y->ndim == nd && y->shape[nd - 3] == C && y->shape[nd - 2] == H * r &&
                  y->shape[nd - 1] == W * r);
        float *xv = cg_test_values(x), *yv = cg_test_values(y);
        const int64_t B = cg_numel(x) / (s[nd - 3] * H * W);
        for (int64_t b = 0; b < B; b++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t h = 0; h < H * r; h++)
                    for (int64_t w = 0; w < W * r; w++) {
                        const int64_t ci = c * r * r + (h % r) * r + (w % r);
                        const float want = xv[((b * C * r * r + ci) * H + h / r) * W + w / r];
                        ck_assert(yv[((b * C + c) * H * r + h) * W * r + w] == want);
                    }
        cg_tensor *z = cg_pixel_unshuffle(y, r);
        float *zv = cg_test_values(z);
        ck_assert(cg_same_shape(z, x) && !memcmp(zv, xv, sizeof(float) * (size_t)cg_numel(x)));
        free(xv), free(yv), free(zv);
        cg_release_all(3, x, y, z);
    }
}
END_TEST

static cg_tensor *shuffle_fn(void *ctx, cg_tensor *const *in)
{
    const int64_t r = *(const int64_t *)ctx;
    return r > 0 ? cg_pixel_shuffle(in[0], r) : cg_pixel_unshuffle(in[0], -r);
}

START_TEST(test_pixel_shuffle_gradcheck)
{
    cg_rng g = cg_rng_new(52);
    const int64_t rs[2] = {2, -2};
    for (int k = 0; k < 2; k++)
        for (int layout = 0; layout < 3; layout++) {
            cg_tensor *x =
                cg_requires_grad(cg_test_randn_layout(&g, CG_SHAPE(2, 4, 4, 6), layout), true);
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(shuffle_fn, (void *)&rs[k], 1, &x, NULL, &rep),
                          "%s layout %d: %s", k ? "unshuffle" : "shuffle", layout, rep.message);
            cg_test_check_unread(shuffle_fn, (void *)&rs[k], 1, &x, "pixel_shuffle");
            cg_release(x);
        }
}
END_TEST

START_TEST(test_pixel_shuffle_refusals)
{
    cg_tensor *x2 = cg_zeros(CG_SHAPE(3, 3)), *x = cg_zeros(CG_SHAPE(2, 7, 3, 3)),
              *u = cg_zeros(CG_SHAPE(2, 2, 5, 6)), *v = cg_zeros(CG_SHAPE(2, 2, 4, 5));
    CG_ASSERT_REFUSED_LINE(
        cg_pixel_shuffle(x2, 2),
        "pixel_shuffle: the input must have at least 3 dims [*, C, H, W] (got [3, 3])");
    CG_ASSERT_REFUSED_LINE(cg_pixel_shuffle(x, 2),
                           "pixel_shuffle: the channels (dim -3) of 7 are not divisible by "
                           "upscale_factor^2 (2^2)");
    CG_ASSERT_REFUSED_LINE(cg_pixel_shuffle(x, 0),
                           "pixel_shuffle: upscale_factor must be positive (got 0)");
    CG_ASSERT_REFUSED_LINE(cg_pixel_shuffle(x, INT64_MAX), "not divisible");
    CG_ASSERT_REFUSED_LINE(cg_pixel_unshuffle(x2, 2),
                           "pixel_unshuffle: the input must have at least 3 dims");
    CG_ASSERT_REFUSED_LINE(cg_pixel_unshuffle(u, 2),
                           "pixel_unshuffle: the height (dim -2) of 5 is not divisible by "
                           "downscale_factor 2");
    CG_ASSERT_REFUSED_LINE(cg_pixel_unshuffle(v, 2), "pixel_unshuffle: the width (dim -1) of 5");
    CG_ASSERT_REFUSED_LINE(cg_pixel_unshuffle(v, -1),
                           "pixel_unshuffle: downscale_factor must be positive (got -1)");
    CG_ASSERT_REFUSED_LINE(cg_pixel_shuffle(NULL, 2), "pixel_shuffle");
    cg_module *m = cg_pixel_shuffle_new(2);
    CG_ASSERT_REFUSED_LINE(cg_module_forward(m, x), "not divisible by upscale_factor^2");
    cg_module_free(m);
    cg_release_all(4, x2, x, u, v);
}
END_TEST

/* ---------------------------------------------------------- modules */
/* Each module its function's bits, in a Sequential; Softmin against double */
START_TEST(test_modules)
{
    cg_rng r = cg_rng_new(61);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 8, 2, 3)), *x2 = cg_randn(&r, CG_SHAPE(3, 4));
    struct {
        cg_module *m;
        cg_tensor *want, *in;
        const char *type;
    } c[] = {
        {cg_glu_new(1), cg_glu(x, 1), x, "GLU"},
        {cg_softmax_new(1), cg_softmax(x, 1), x, "Softmax"},
        {cg_log_softmax_new(-1), cg_log_softmax(x, -1), x, "LogSoftmax"},
        {cg_softmax2d_new(), cg_softmax(x, 1), x, "Softmax2d"},
        {cg_pixel_shuffle_new(2), cg_pixel_shuffle(x, 2), x, "PixelShuffle"},
        {cg_pixel_unshuffle_new(1), cg_pixel_unshuffle(x, 1), x, "PixelUnshuffle"},
        {cg_softmin_new(0), NULL, x2, "Softmin"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ck_assert_str_eq(c[i].m->type, c[i].type);
        cg_tensor *y = cg_module_forward(c[i].m, c[i].in);
        ck_assert_msg(y, "%s: %s", c[i].type, cg_last_error());
        if (c[i].want) {
            float *a = cg_test_values(y), *b = cg_test_values(c[i].want);
            ck_assert(cg_same_shape(y, c[i].want));
            ck_assert_msg(!memcmp(a, b, sizeof(float) * (size_t)cg_numel(y)), "%s", c[i].type);
            free(a), free(b);
        } else { /* softmin over dim 0 of [3, 4] */
            double *xv = cg_test_doubles(x2);
            float *yv = cg_test_values(y);
            for (int j = 0; j < 4; j++) {
                double s = 0;
                for (int k = 0; k < 3; k++)
                    s += exp(-xv[k * 4 + j]);
                for (int k = 0; k < 3; k++)
                    ck_assert(fabs(yv[k * 4 + j] - exp(-xv[k * 4 + j]) / s) <= 1e-6);
            }
            free(xv), free(yv);
        }
        cg_release_all(2, y, c[i].want);
        cg_module_free(c[i].m);
    }
    /* Softmax2d on a 3-d input: dim 0; on a 2-d one refused */
    cg_module *s2 = cg_softmax2d_new();
    cg_tensor *x3 = cg_randn(&r, CG_SHAPE(4, 2, 3)), *y3 = cg_module_forward(s2, x3),
              *w3 = cg_softmax(x3, 0);
    float *a = cg_test_values(y3), *b = cg_test_values(w3);
    ck_assert(!memcmp(a, b, sizeof(float) * 24));
    CG_ASSERT_REFUSED_LINE(cg_module_forward(s2, x2),
                           "Softmax2d: the input must be 3-d or 4-d, [(N,) C, H, W] (got [3, 4])");
    free(a), free(b);
    cg_module_free(s2);
    /* in a Sequential, with PReLU's parameter named by its index */
    cg_module *seq = cg_sequential(3, cg_prelu_new(8, 0.25f), cg_glu_new(1), cg_softmax_new(-1));
    ck_assert_ptr_nonnull(cg_module_get_param(seq, "0.weight"));
    cg_tensor *ys = cg_module_forward(seq, x);
    ck_assert(ys && ys->shape[1] == 4);
    cg_module_free(seq);
    cg_release_all(6, x, x2, x3, y3, w3, ys);
}
END_TEST

/* ---------------------------------------------------------- threads */
/* prelu (both weight forms), rrelu in training, glu, the shuffles at nt
 * threads: the loss, x's and the weights' gradients */
static void run_at(int nt, float *got[4])
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(71), d = cg_rng_new(72);
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(8, 64, 40, 36), 1), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, CG_SHAPE(64)), true);
    cg_tensor *w1 = cg_requires_grad(cg_randn(&r, CG_SHAPE(1)), true);
    cg_tensor *t[5] = {cg_prelu(x, w), cg_prelu(x, w1), cg_rrelu(x, 0.1f, 0.4f, true, &d),
                       cg_glu(x, 1), cg_pixel_shuffle(x, 4)};
    cg_tensor *l = cg_test_weighted_squares(5, t);
    cg_test_backward_values(l, 3, (cg_tensor *[]){x, w, w1}, got);
    cg_release_all(4, x, w, w1, l);
}

START_TEST(test_threads_identical)
{
    const int64_t n[4] = {1, 8 * 64 * 40 * 36, 64, 1};
    cg_test_same_bits_1_2_threads(run_at, 4, n);
}
END_TEST

static Suite *prelu_suite(void)
{
    Suite *s = suite_create("prelu");
    TCase *tc = tcase_create("prelu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_prelu_values);
    tcase_add_test(tc, test_prelu_gradcheck);
    tcase_add_test(tc, test_prelu_refusals);
    tcase_add_test(tc, test_prelu_module);
    tcase_add_test(tc, test_rrelu_training);
    tcase_add_test(tc, test_rrelu_eval);
    tcase_add_test(tc, test_rrelu_gradcheck);
    tcase_add_test(tc, test_rrelu_refusals);
    tcase_add_test(tc, test_rrelu_module);
    tcase_add_test(tc, test_glu_values);
    tcase_add_test(tc, test_glu_gradcheck);
    tcase_add_test(tc, test_glu_refusals);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_pixel_shuffle_values);
    tcase_add_test(tc, test_pixel_shuffle_gradcheck);
    tcase_add_test(tc, test_pixel_shuffle_refusals);
    tcase_add_test(tc, test_modules);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {prelu_suite()};
    return cg_test_run(s, 1);
}
