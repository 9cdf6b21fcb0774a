/* The loss options of PyTorch's class and binary losses: F.cross_entropy's
 * and F.nll_loss's class weight= (cg_cross_entropy_weighted,
 * cg_nll_loss_weighted, with ignore_index and label smoothing) and
 * F.binary_cross_entropy_with_logits' weight= and pos_weight=
 * (cg_binary_cross_entropy_with_logits_ex): gradchecks at each reduction,
 * a float64 reference of the forward and the gradient, 1 and 2 threads the
 * same bits, the refusals. PyTorch's own answers: tests/interop
 * make_op_cases.py gen_loss_weights (torch_ops). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

enum { N = 6, C = 5 };
static const int64_t TGT[N] = {0, 4, -100, 2, 1, 4};
static const float W[C] = {0.5f, 2.0f, 1.25f, -0.75f, 3.0f}; /* any values, as PyTorch */

enum { WK_CE, WK_NLL, WK_BCE };
typedef struct {
    int which;
    cg_reduction r;
    int64_t ignore;
    float ls;
    bool w, pw; /* bce: weight [N, C], pos_weight [C] */
} wk_case;

static cg_tensor *wk_fn(void *ctx, cg_tensor *const *in)
{
    const wk_case *c = ctx;
    cg_tensor *w = cg_from_data(CG_SHAPE(C), W), *out = NULL;
    int64_t tg[N]; /* row 2 ignored, and with ignore_index 4 rows 1 and 5 too */
    for (int i = 0; i < N; i++)
        tg[i] = TGT[i] == -100 ? c->ignore : TGT[i];
    switch (c->which) {
    case WK_CE:
        out = cg_cross_entropy_weighted(in[0], cg_test_ids(N, tg), w, c->ignore, c->ls, c->r);
        break;
    case WK_NLL: {
        cg_tensor *lp = cg_log_softmax(in[0], -1);
        out = cg_nll_loss_weighted(lp, cg_test_ids(N, tg), w, c->ignore, c->r);
        cg_release(lp);
        break;
    }
    default: {
        /* weights of each element, some negative; pos_weight [C] */
        float ev[N * C];
        for (int i = 0; i < N * C; i++)
            ev[i] = (float)((i * 7) % 11) * 0.25f - 0.5f;
        cg_tensor *ew = c->w ? cg_from_data(CG_SHAPE(N, C), ev) : NULL;
        cg_tensor *pw = c->pw ? cg_from_data(CG_SHAPE(C), (const float[]){0.5f, 2, 1, 3, 0}) : NULL;
        cg_tensor *y = cg_sigmoid(in[1]);
        out = cg_binary_cross_entropy_with_logits_ex(in[0], y, ew, pw, c->r);
        cg_release_all(3, ew, pw, y);
    }
    }
    cg_release(w);
    return out;
}

/* Gradchecks: each loss at mean, sum and none; cross-entropy with
 * ignore_index and label smoothing and both together; bce with weight,
 * pos_weight and both; contiguous and transposed logits. */
START_TEST(test_weighted_gradchecks)
{
    cg_rng r = cg_rng_new(31);
    const wk_case cases[] = {
        {WK_CE, CG_REDUCTION_MEAN, -100, 0.0f, 0, 0}, {WK_CE, CG_REDUCTION_SUM, -100, 0.0f, 0, 0},
        {WK_CE, CG_REDUCTION_NONE, -100, 0.0f, 0, 0}, {WK_CE, CG_REDUCTION_MEAN, 4, 0.0f, 0, 0},
        {WK_CE, CG_REDUCTION_MEAN, -100, 0.2f, 0, 0}, {WK_CE, CG_REDUCTION_MEAN, 4, 0.3f, 0, 0},
        {WK_CE, CG_REDUCTION_SUM, 4, 0.3f, 0, 0},     {WK_CE, CG_REDUCTION_NONE, 4, 0.3f, 0, 0},
        {WK_NLL, CG_REDUCTION_MEAN, -100, 0, 0, 0},   {WK_NLL, CG_REDUCTION_SUM, 4, 0, 0, 0},
        {WK_NLL, CG_REDUCTION_NONE, 4, 0, 0, 0},      {WK_BCE, CG_REDUCTION_MEAN, 0, 0, 1, 0},
        {WK_BCE, CG_REDUCTION_SUM, 0, 0, 0, 1},       {WK_BCE, CG_REDUCTION_NONE, 0, 0, 1, 1},
        {WK_BCE, CG_REDUCTION_MEAN, 0, 0, 1, 1},      {WK_BCE, CG_REDUCTION_SUM, 0, 0, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int layout = 0; layout < 2; layout++) {
            cg_tensor *in[2] = {cg_test_randn_layout(&r, CG_SHAPE(N, C), layout),
                                cg_test_randn_layout(&r, CG_SHAPE(N, C), 0)};
            bool two = cases[c].which == WK_BCE;
            cg_requires_grad(in[0], true);
            cg_requires_grad(in[1], two);
            char what[64];
            snprintf(what, sizeof what, "case %zu layout %d", c, layout);
            cg_gradcheck_report rep;
            bool ok = cg_gradcheck(wk_fn, (void *)&cases[c], two ? 2 : 1, in, NULL, &rep);
            ck_assert_msg(ok, "%s: %s", what, rep.message);
            cg_test_check_unread(wk_fn, (void *)&cases[c], two ? 2 : 1, in, what);
            cg_release_all(2, in[0], in[1]);
        }
    }
}
END_TEST

/* PyTorch's formula in double: each kept row's weighted loss into row[],
 * the gradient of sum_r u_r loss_r (mean: divided by the kept weight) */
static double ref_ce(const float *x, const int64_t *t, int64_t n, int64_t c, const float *w,
                     int64_t ignore, double ls, cg_reduction r, const float *u, double *row,
                     double *dx)
{
    double total = 0.0, wk = 0.0, W_all = 0.0;
    for (int64_t j = 0; j < c; j++)
        W_all += w[j];
    for (int64_t i = 0; i < n; i++) {
        row[i] = 0.0;
        const float *xi = x + i * c;
        double mx = xi[0], s = 0.0;
        for (int64_t j = 1; j < c; j++)
            mx = fmax(mx, xi[j]);
        for (int64_t j = 0; j < c; j++)
            s += exp(xi[j] - mx);
        double lse = mx + log(s), wt = t[i] == ignore ? 0.0 : w[t[i]], sw = 0.0;
        for (int64_t j = 0; j < c; j++) /* the gradient of row i for g = 1 */
            dx[i * c + j] = t[i] == ignore ? 0.0
                                           : (1 - ls) * wt * (exp(xi[j] - lse) - (j == t[i])) +
                                                 ls / c * (W_all * exp(xi[j] - lse) - w[j]);
        if (t[i] == ignore)
            continue;
        for (int64_t j = 0; j < c; j++)
            sw += w[j] * (lse - xi[j]);
        row[i] = (1 - ls) * wt * (lse - xi[t[i]]) + ls / c * sw;
        total += row[i];
        wk += wt;
    }
    for (int64_t i = 0; i < n; i++) {
        double g = r == CG_REDUCTION_NONE ? u[i] : r == CG_REDUCTION_MEAN ? u[0] / wk : u[0];
        for (int64_t j = 0; j < c; j++)
            dx[i * c + j] *= g;
    }
    return r == CG_REDUCTION_MEAN ? total / wk : total;
}

/* [512, 100] rows (past the kernel's parallel threshold) at nt threads:
 * none's losses, mean's, and the logits' gradient of both */
static void thread_run(int nt, float **got)
{
    cg_rng rng = cg_rng_new(77);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(512, 100)), true);
    cg_tensor *u = cg_randn(&rng, CG_SHAPE(512)), *w0 = cg_randn(&rng, CG_SHAPE(100));
    cg_tensor *w = cg_k_adds(w0, 1.0f);
    int64_t tb[512];
    for (int i = 0; i < 512; i++)
        tb[i] = i % 9 == 0 ? -100 : (i * 7) % 100;
    cg_set_num_threads(nt);
    cg_tensor *l =
        cg_cross_entropy_weighted(x, cg_test_ids(512, tb), w, -100, 0.2f, CG_REDUCTION_NONE);
    cg_tensor *lm =
        cg_cross_entropy_weighted(x, cg_test_ids(512, tb), w, -100, 0.2f, CG_REDUCTION_MEAN);
    ck_assert(l && lm && cg_backward(l, u, false) && cg_backward(lm, NULL, false));
    cg_set_num_threads(0);
    got[0] = cg_test_values(l);
    got[1] = cg_test_values(lm);
    got[2] = cg_test_values(x->grad);
    cg_release_all(6, x, u, w0, w, l, lm);
}

/* Weighted cross-entropy against the double reference: [64, 37] logits,
 * every reduction, ignore_index and label smoothing; nll_loss_weighted of
 * the log-softmax equals it at ls 0; all rows ignored; 1 and 2 threads
 * give the same bits (thread_run). */
START_TEST(test_weighted_ce_vs_double)
{
    enum { R = 64, K = 37 };
    cg_rng rng = cg_rng_new(8);
    int64_t t[R];
    float w[K];
    for (int i = 0; i < R; i++)
        t[i] = i % 7 == 3 ? 5 : (i * 11) % K;
    for (int j = 0; j < K; j++)
        w[j] = 0.25f + (float)((j * 13) % 9) * 0.3f - (j == 6 ? 2.0f : 0.0f);
    cg_tensor *wt = cg_from_data(CG_SHAPE(K), w);
    const double lss[] = {0.0, 0.15};
    const int64_t ignores[] = {-100, 5};
    double row[R], dx[R * K], worst = 0.0;
    for (int rr = 0; rr < 3; rr++)
        for (int k = 0; k < 4; k++) {
            cg_reduction red = (cg_reduction)rr;
            cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(R, K)), true);
            cg_tensor *u = red == CG_REDUCTION_NONE ? cg_randn(&rng, CG_SHAPE(R)) : cg_scalar(0.7f);
            cg_tensor *l = cg_cross_entropy_weighted(x, cg_test_ids(R, t), wt, ignores[k / 2],
                                                     (float)lss[k % 2], red);
            ck_assert_msg(l && cg_backward(l, u, false), "%s", cg_last_error());
            double want = ref_ce(cg_data(x), t, R, K, w, ignores[k / 2], lss[k % 2], red,
                                 cg_data(u), row, dx);
            for (int i = 0; i < (red == CG_REDUCTION_NONE ? R : 1); i++) {
                double wi = red == CG_REDUCTION_NONE ? row[i] : want, got = cg_data(l)[i];
                worst = fmax(worst, fabs(got - wi) / (1 + fabs(wi)));
                ck_assert_msg(fabs(got - wi) <= 2e-6 * (1 + fabs(wi)),
                              "r %d k %d row %d: %.9g %.9g", rr, k, i, got, wi);
            }
            for (int i = 0; i < R * K; i++)
                ck_assert_msg(fabs(cg_data(x->grad)[i] - dx[i]) <= 1e-6 * (1 + fabs(dx[i])),
                              "r %d k %d grad %d: %.9g %.9g", rr, k, i, cg_data(x->grad)[i], dx[i]);
            if (k % 2 == 0) { /* nll_loss_weighted(log_softmax) */
                cg_tensor *lp = cg_log_softmax(x, -1);
                cg_tensor *nl =
                    cg_nll_loss_weighted(lp, cg_test_ids(R, t), wt, ignores[k / 2], red);
                ck_assert_msg(nl, "%s", cg_last_error());
                for (int i = 0; i < (red == CG_REDUCTION_NONE ? R : 1); i++)
                    ck_assert(fabsf(cg_data(nl)[i] - cg_data(l)[i]) <=
                              2e-6f * (1 + fabsf(cg_data(l)[i])));
                cg_release_all(2, lp, nl);
            }
            cg_release_all(3, x, u, l);
        }
    ck_assert(worst < 2e-6);

    /* all targets ignored: mean NaN (as PyTorch), sum 0, zero gradient */
    int64_t ig[3] = {-100, -100, -100};
    cg_tensor *x3 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, K)), true);
    cg_tensor *m =
        cg_cross_entropy_weighted(x3, cg_test_ids(3, ig), wt, -100, 0.1f, CG_REDUCTION_MEAN);
    cg_tensor *s =
        cg_cross_entropy_weighted(x3, cg_test_ids(3, ig), wt, -100, 0.1f, CG_REDUCTION_SUM);
    ck_assert(m && s && isnan(cg_item(m)) && cg_item(s) == 0.0f);
    ck_assert(cg_backward(s, NULL, false));
    for (int i = 0; i < 3 * K; i++)
        ck_assert(cg_data(x3->grad)[i] == 0.0f);
    cg_release_all(3, x3, m, s);

    cg_release(wt);
    cg_test_same_bits_1_2_threads(thread_run, 3, (const int64_t[]){512, 1, 512 * 100});
}
END_TEST

/* bce with weight and pos_weight against double: w [(1 + (p-1) y)
 * softplus(-x) + (1 - y) x], its gradients (1 - y) - (1 + (p-1) y)
 * sigmoid(-x) times w for x, (-x + (p-1) softplus(-x)) w for y; mean over
 * the elements. bf16 logits and targets: the loss in bf16, as PyTorch's. */
START_TEST(test_bce_weights_vs_double)
{
    enum { R = 7, K = 4 };
    cg_rng rng = cg_rng_new(9);
    cg_tensor *x0 = cg_randn(&rng, CG_SHAPE(R, K)), *y0 = cg_randn(&rng, CG_SHAPE(R, K));
    cg_tensor *x = cg_requires_grad(cg_k_muls(x0, 4.0f), true);
    cg_tensor *y = cg_requires_grad(cg_k_sigmoid(y0), true);
    cg_release_all(2, x0, y0);
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(R, 1));
    cg_tensor *p = cg_from_data(CG_SHAPE(K), (const float[]){0.5f, 1.0f, 3.0f, 0.0f});
    cg_tensor *l = cg_binary_cross_entropy_with_logits_ex(x, y, w, p, CG_REDUCTION_MEAN);
    ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
    double total = 0.0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < K; j++) {
            double xv = cg_data(x)[i * K + j], yv = cg_data(y)[i * K + j];
            double wv = cg_data(w)[i], pv = cg_data(p)[j];
            double sp = log1p(exp(-fabs(xv))) + fmax(-xv, 0.0), lw = 1 + (pv - 1) * yv;
            total += wv * (lw * sp + (1 - yv) * xv);
            double gx = wv * ((1 - yv) - lw / (1 + exp(xv))) / (R * K);
            double gy = wv * (-xv + (pv - 1) * sp) / (R * K);
            ck_assert_msg(fabs(cg_data(x->grad)[i * K + j] - gx) <= 1e-6 * (1 + fabs(gx)),
                          "dx %d %d: %.9g %.9g", i, j, cg_data(x->grad)[i * K + j], gx);
            ck_assert_msg(fabs(cg_data(y->grad)[i * K + j] - gy) <= 1e-6 * (1 + fabs(gy)),
                          "dy %d %d: %.9g %.9g", i, j, cg_data(y->grad)[i * K + j], gy);
        }
    ck_assert_msg(fabs(cg_item(l) - total / (R * K)) <= 2e-6 * (1 + fabs(total)), "%.9g %.9g",
                  cg_item(l), total / (R * K));
    /* no weights: the plain loss's bits */
    cg_tensor *a = cg_binary_cross_entropy_with_logits_ex(x, y, NULL, NULL, CG_REDUCTION_SUM);
    cg_tensor *b = cg_binary_cross_entropy_with_logits(x, y, CG_REDUCTION_SUM);
    ck_assert(a && b && memcmp(cg_data(a), cg_data(b), sizeof(float)) == 0);
    /* bf16: the loss keeps the logits' dtype */
    cg_tensor *xb = cg_k_to(x, CG_BF16), *yb = cg_k_to(y, CG_BF16);
    cg_tensor *lb = cg_binary_cross_entropy_with_logits_ex(xb, yb, w, p, CG_REDUCTION_NONE);
    ck_assert_msg(lb && lb->dtype == CG_BF16 && lb->shape[0] == R && lb->shape[1] == K, "%s",
                  cg_last_error());
    cg_release_all(9, x, y, w, p, l, a, b, xb, yb);
    cg_release(lb);
}
END_TEST

/* Bad weights are refused with one line naming the argument. */
START_TEST(test_weights_refused)
{
    cg_rng rng = cg_rng_new(3);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, C)), *t = cg_test_ids(N, TGT);
    cg_tensor *w4 = cg_ones(CG_SHAPE(4)), *w2d = cg_ones(CG_SHAPE(1, C));
    cg_tensor *w5 = cg_ones(CG_SHAPE(C)), *wb = cg_k_to(w5, CG_BF16), *wi = cg_k_to(w5, CG_I64);
    CG_ASSERT_REFUSED(cg_cross_entropy_weighted(x, t, w4, -100, 0.0f, CG_REDUCTION_MEAN) == NULL,
                      "cross_entropy: argument 'weight' has shape [4], expected [C] = [5]");
    CG_ASSERT_REFUSED(cg_cross_entropy_weighted(x, t, w2d, -100, 0.0f, CG_REDUCTION_SUM) == NULL,
                      "cross_entropy: argument 'weight' has shape [1, 5], expected [C] = [5]");
    CG_ASSERT_REFUSED(cg_cross_entropy_weighted(x, t, wb, -100, 0.0f, CG_REDUCTION_MEAN) == NULL,
                      "cross_entropy: argument 'weight' is bfloat16, expected float32");
    CG_ASSERT_REFUSED(cg_nll_loss_weighted(x, t, wi, -100, CG_REDUCTION_NONE) == NULL,
                      "nll_loss: argument 'weight' is int64, expected float32");
    CG_ASSERT_REFUSED(cg_nll_loss_weighted(x, t, w4, -100, CG_REDUCTION_MEAN) == NULL,
                      "nll_loss: argument 'weight' has shape [4], expected [C] = [5]");
    cg_tensor *y = cg_k_sigmoid(x);
    CG_ASSERT_REFUSED(
        cg_binary_cross_entropy_with_logits_ex(x, y, NULL, w4, CG_REDUCTION_MEAN) == NULL,
        "binary_cross_entropy_with_logits: argument 'pos_weight' of shape [4] does not "
        "broadcast to the input's [6, 5]");
    cg_tensor *big = cg_ones(CG_SHAPE(2, N, C));
    CG_ASSERT_REFUSED(
        cg_binary_cross_entropy_with_logits_ex(x, y, big, NULL, CG_REDUCTION_SUM) == NULL,
        "binary_cross_entropy_with_logits: argument 'weight' of shape [2, 6, 5] does not "
        "broadcast to the input's [6, 5]");
    CG_ASSERT_REFUSED(
        cg_binary_cross_entropy_with_logits_ex(x, y, wi, NULL, CG_REDUCTION_SUM) == NULL,
        "binary_cross_entropy_with_logits: argument 'weight' has dtype int64, expected a float");
    CG_ASSERT_REFUSED(
        cg_binary_cross_entropy_with_logits_ex(x, y, NULL, w2d, CG_REDUCTION_BATCHMEAN) == NULL,
        "binary_cross_entropy_with_logits: reduction 3 is not one of");
    CG_ASSERT_REFUSED(
        cg_binary_cross_entropy_with_logits_ex(NULL, y, NULL, w2d, CG_REDUCTION_MEAN) == NULL,
        "binary_cross_entropy_with_logits");
    cg_release_all(8, x, w4, w2d, wb, wi, y, big, w5);
}
END_TEST

static Suite *loss_weights_suite(void)
{
    Suite *s = suite_create("loss_weights");
    TCase *tc = tcase_create("weights");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_weighted_gradchecks);
    tcase_add_test(tc, test_weighted_ce_vs_double);
    tcase_add_test(tc, test_bce_weights_vs_double);
    tcase_add_test(tc, test_weights_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {loss_weights_suite()};
    return cg_test_run(s, 1);
}
