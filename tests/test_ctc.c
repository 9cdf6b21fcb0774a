/* F.ctc_loss (autograd/ops.h cg_ctc_loss, core/loss_ctc.c): each
 * sample's loss and its gradient against a brute force over every path of
 * the frames (repeated labels, an empty target, impossible alignments, an
 * input length of 0, a blank other than 0), padded and concatenated
 * targets the same bits, unbatched input, the reductions and
 * zero_infinity, gradchecks through a log_softmax at every reduction, 1
 * and 2 threads the same bits, and the refusals by message. PyTorch's own
 * answers: tests/interop ctc.py (torch_ctc). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

enum { T = 5, NB = 7, C = 4, S = 3 };

/* The samples: input length, target length, target (padded to S), with
 * blank 0; labels b = 0 .. are mapped past the blank by map_label */
static const int64_t IL[NB] = {5, 4, 3, 2, 1, 0, 0};
static const int64_t TL[NB] = {3, 2, 0, 2, 1, 0, 1};
static const int64_t TG[NB][S] = {{1, 2, 2}, {1, 1, 0}, {0, 0, 0}, {3, 3, 0},
                                  {2, 0, 0}, {0, 0, 0}, {1, 0, 0}};

/* label k of the blank-0 samples for another blank: blank 0 swapped
 * with `blank` (so no label is the blank) */
static int64_t map_label(int64_t k, int64_t blank) { return k == blank ? 0 : k; }

typedef struct {
    int64_t blank;
    cg_tensor *padded, *concat, *il, *tl;
} ctc_case;

static ctc_case case_new(int64_t blank)
{
    int64_t pad[NB * S], cat[NB * S], n = 0;
    for (int b = 0; b < NB; b++)
        for (int k = 0; k < S; k++) {
            pad[b * S + k] = k < TL[b] ? map_label(TG[b][k], blank) : 0;
            if (k < TL[b])
                cat[n++] = pad[b * S + k];
        }
    return (ctc_case){blank, cg_test_ids_nd(CG_SHAPE(NB, S), pad), cg_test_ids(n, cat),
                      cg_test_ids(NB, IL), cg_test_ids(NB, TL)};
}

/* log_softmax of N(0, 1) draws over the last dim, [T, n, c], in double */
static cg_tensor *log_probs(cg_rng *rng, int64_t t, int64_t n, int64_t c)
{
    cg_tensor *x = cg_randn(rng, CG_SHAPE(t, n, c));
    float *d = cg_data(x);
    for (int64_t r = 0; r < t * n; r++) {
        double m = 0.0;
        for (int64_t k = 0; k < c; k++)
            m += exp((double)d[r * c + k]);
        for (int64_t k = 0; k < c; k++)
            d[r * c + k] = (float)((double)d[r * c + k] - log(m));
    }
    return x;
}

/* ------------------------------------------------------- brute force */
/* Whether path (il frames) collapses to target (tl labels): repeats
 * merged, then blanks dropped */
static bool collapses(const int *path, int il, const int64_t *target, int64_t tl, int64_t blank)
{
    int64_t n = 0;
    for (int t = 0; t < il; t++) {
        if (path[t] == blank || (t > 0 && path[t] == path[t - 1]))
            continue;
        if (n >= tl || target[n] != path[t])
            return false;
        n++;
    }
    return n == tl;
}

/* Sample b's likelihood p over all C^il paths and the posterior mass
 * gamma[t][c] of the paths through class c at frame t, in double, from
 * lp [T, NB, C] */
static double brute(const float *lp, int b, const int64_t *target, int64_t blank,
                    double gamma[T][C])
{
    const int il = (int)IL[b];
    memset(gamma, 0, sizeof(double) * T * C);
    int path[T] = {0};
    double p = 0.0;
    for (long code = 0, n = lround(pow(C, il)); code < n; code++) {
        long v = code;
        double lsum = 0.0;
        for (int t = 0; t < il; t++, v /= C) {
            path[t] = (int)(v % C);
            lsum += (double)lp[(t * NB + b) * C + path[t]];
        }
        if (!collapses(path, il, target, TL[b], blank))
            continue;
        p += exp(lsum);
        for (int t = 0; t < il; t++)
            gamma[t][path[t]] += exp(lsum);
    }
    return p;
}

/* Each sample's loss and (g of ones) gradient against the brute force:
 * -log p, and exp(lp) - gamma / p over the input length, 0 after, as
 * PyTorch's gradient (the true one plus exp(lp), exact through a
 * log_softmax); an impossible sample inf with a NaN gradient; padded and
 * concatenated targets the same bits; blank 0 and 3 */
START_TEST(test_ctc_brute_force)
{
    cg_rng rng = cg_rng_new(3);
    for (int64_t blank = 0; blank < C; blank += 3) {
        ctc_case c = case_new(blank);
        cg_tensor *lp = log_probs(&rng, T, NB, C), *la = NULL, *la2 = NULL;
        cg_tensor *l = cg_k_ctc_loss(lp, c.padded, c.il, c.tl, blank, &la);
        cg_tensor *l2 = cg_k_ctc_loss(lp, c.concat, c.il, c.tl, blank, &la2);
        ck_assert_msg(l && l2 && la, "%s", cg_last_error());
        ck_assert(l->ndim == 1 && l->shape[0] == NB);
        ck_assert(!memcmp(cg_data(l), cg_data(l2), NB * sizeof(float)));
        cg_tensor *ones = cg_ones(CG_SHAPE(NB));
        cg_tensor *g = cg_k_ctc_loss_backward(ones, lp, c.padded, c.il, c.tl, blank, l, la, false);
        cg_tensor *g2 =
            cg_k_ctc_loss_backward(ones, lp, c.concat, c.il, c.tl, blank, l2, la2, false);
        ck_assert_msg(g && g2, "%s", cg_last_error());
        ck_assert(!memcmp(cg_data(g), cg_data(g2), T * NB * C * sizeof(float)));
        for (int b = 0; b < NB; b++) {
            int64_t target[S];
            for (int k = 0; k < S; k++)
                target[k] = map_label(TG[b][k], blank);
            double gamma[T][C];
            const double p = brute(cg_data(lp), b, target, blank, gamma);
            const float got = cg_data(l)[b];
            if (p == 0.0) {
                ck_assert_msg(got == INFINITY, "blank %lld sample %d: %g, expected inf",
                              (long long)blank, b, (double)got);
            } else {
                const double want = -log(p);
                ck_assert_msg(fabs(got - want) <= 2e-6 * fmax(1.0, fabs(want)),
                              "blank %lld sample %d: loss %.9g, expected %.9g", (long long)blank, b,
                              (double)got, want);
            }
            for (int t = 0; t < T; t++)
                for (int k = 0; k < C; k++) {
                    const float gv = cg_data(g)[(t * NB + b) * C + k];
                    const float lv = cg_data(lp)[(t * NB + b) * C + k];
                    if (t >= IL[b] || (p == 0.0 && IL[b] == 0)) {
                        ck_assert_msg(gv == 0.0f, "sample %d frame %d: gradient %g past the input",
                                      b, t, (double)gv);
                    } else if (p == 0.0) {
                        ck_assert_msg(isnan(gv), "sample %d: impossible, gradient %g", b,
                                      (double)gv);
                    } else {
                        const double want = exp((double)lv) - gamma[t][k] / p;
                        ck_assert_msg(fabs(gv - want) <= 3e-6,
                                      "blank %lld sample %d frame %d class %d: %.9g, expected "
                                      "%.9g",
                                      (long long)blank, b, t, k, (double)gv, want);
                    }
                }
        }
        cg_release_all(8, lp, la, la2, l, l2, ones, g, g2);
    }
}
END_TEST

/* The graph op: unbatched [T, C] as one sample of a batch (0-d loss);
 * the reductions from the per-sample losses (mean over each target length,
 * at least 1); zero_infinity's 0 for an impossible sample and its zero
 * gradient, the others' gradients unchanged */
START_TEST(test_ctc_reductions)
{
    cg_rng rng = cg_rng_new(5);
    ctc_case c = case_new(0);
    cg_tensor *lp = cg_requires_grad(log_probs(&rng, T, NB, C), true);
    cg_tensor *none = cg_ctc_loss(lp, c.padded, c.il, c.tl, 0, CG_REDUCTION_NONE, false);
    cg_tensor *zi = cg_ctc_loss(lp, c.padded, c.il, c.tl, 0, CG_REDUCTION_NONE, true);
    cg_tensor *sum = cg_ctc_loss(lp, c.padded, c.il, c.tl, 0, CG_REDUCTION_SUM, true);
    cg_tensor *mean = cg_ctc_loss(lp, c.padded, c.il, c.tl, 0, CG_REDUCTION_MEAN, true);
    ck_assert_msg(none && zi && sum && mean, "%s", cg_last_error());
    ck_assert(sum->ndim == 0 && mean->ndim == 0 && zi->ndim == 1);
    double s = 0.0, m = 0.0;
    for (int b = 0; b < NB; b++) {
        const float v = cg_data(none)[b], z = cg_data(zi)[b];
        ck_assert(isinf(v) ? z == 0.0f : z == v);
        s += z;
        m += z / (double)(TL[b] > 1 ? TL[b] : 1);
    }
    ck_assert(isinf(cg_data(none)[3]) && isinf(cg_data(none)[6]) && cg_data(none)[5] == 0.0f);
    ck_assert_msg(fabs(cg_data(sum)[0] - s) <= 1e-5 * s, "sum %g, expected %g",
                  (double)cg_data(sum)[0], s);
    ck_assert_msg(fabs(cg_data(mean)[0] - m / NB) <= 1e-5 * m, "mean %g, expected %g",
                  (double)cg_data(mean)[0], m / NB);
    /* zero_infinity: the impossible samples' gradient 0, the others' the
     * kernel's for a gradient of ones */
    ck_assert_msg(cg_backward(sum, NULL, false), "%s", cg_last_error());
    cg_tensor *la = NULL, *k = cg_k_ctc_loss(lp, c.padded, c.il, c.tl, 0, &la);
    cg_tensor *ones = cg_ones(CG_SHAPE(NB));
    cg_tensor *kg = cg_k_ctc_loss_backward(ones, lp, c.padded, c.il, c.tl, 0, k, la, true);
    ck_assert_msg(kg, "%s", cg_last_error());
    for (int i = 0; i < T * NB * C; i++) {
        const int b = (i / C) % NB;
        ck_assert(cg_data(lp->grad)[i] == cg_data(kg)[i]);
        if (b == 3 || b == 6)
            ck_assert(cg_data(kg)[i] == 0.0f);
    }
    /* unbatched: sample 0 alone */
    cg_tensor *x0 = cg_select(lp, 1, 0), *t0 = cg_slice(c.padded, 0, 0, 1, 1);
    cg_tensor *t0s = cg_squeeze(t0, 0);
    const int64_t five = 5, three = 3;
    cg_tensor *il0 = cg_test_ids_nd(0, NULL, &five), *tl0 = cg_test_ids_nd(0, NULL, &three);
    cg_tensor *u = cg_ctc_loss(x0, t0s, il0, tl0, 0, CG_REDUCTION_NONE, false);
    cg_tensor *um = cg_ctc_loss(x0, t0, cg_test_ids(1, &five), cg_test_ids(1, &three), 0,
                                CG_REDUCTION_MEAN, false);
    ck_assert_msg(u && um, "%s", cg_last_error());
    ck_assert(u->ndim == 0 && cg_data(u)[0] == cg_data(none)[0]);
    ck_assert(um->ndim == 0 && cg_data(um)[0] == cg_data(none)[0] / 3.0f);
    cg_release_all(14, lp, none, zi, sum, mean, la, k, ones, kg, x0, t0, t0s, u, um);
}
END_TEST

/* ------------------------------------------------------ gradchecks */
typedef struct {
    ctc_case c;
    cg_reduction r;
    bool zero_inf, concat;
} grad_ctx;

static cg_tensor *ctc_fn(void *ctx, cg_tensor *const *in)
{
    const grad_ctx *g = ctx;
    cg_tensor *lp = cg_log_softmax(in[0], -1);
    cg_tensor *l = lp ? cg_ctc_loss(lp, g->concat ? g->c.concat : g->c.padded, g->c.il, g->c.tl,
                                    g->c.blank, g->r, g->zero_inf)
                      : NULL;
    cg_release(lp);
    return l;
}

/* Through a log_softmax (PyTorch's gradient is exact there): every
 * reduction, padded and concatenated targets, blank 0 and 3, with
 * zero_infinity (the impossible samples' gradient 0), x contiguous and
 * with its storage transposed; the node reads its input */
START_TEST(test_ctc_gradcheck)
{
    cg_rng rng = cg_rng_new(11);
    for (int blank = 0; blank < C; blank += 3)
        for (int red = 0; red < 3; red++)
            for (int layout = 0; layout < 2; layout++) {
                grad_ctx g = {case_new(blank), (cg_reduction)red, true, layout == 1};
                cg_tensor *x = cg_randn(&rng, CG_SHAPE(T, NB, C)), *in = x;
                if (layout) { /* [T, NB, C] over [T, C, NB] storage */
                    cg_tensor *s = cg_randn(&rng, CG_SHAPE(T, C, NB));
                    in = cg_transpose(s, 1, 2);
                    cg_release_all(2, s, x);
                    x = NULL;
                }
                cg_requires_grad(in, true);
                char what[64];
                snprintf(what, sizeof what, "ctc blank %d reduction %d layout %d", blank, red,
                         layout);
                cg_gradcheck_report rep;
                ck_assert_msg(cg_gradcheck(ctc_fn, &g, 1, &in, NULL, &rep), "%s: %s", what,
                              rep.message);
                cg_test_check_unread(ctc_fn, &g, 1, &in, what);
                cg_release(in);
            }
}
END_TEST

/* ---------------------------------------------------------- threads */
enum { TT = 60, TN = 24, TC = 8, TS = 10 };
static void thread_run(int nt, float **got)
{
    cg_rng rng = cg_rng_new(19);
    cg_set_num_threads(nt);
    int64_t il[TN], tl[TN], tg[TN * TS];
    for (int b = 0; b < TN; b++) {
        il[b] = TT - (b % 7);
        tl[b] = TS - (b % 4);
        for (int k = 0; k < TS; k++)
            tg[b * TS + k] = 1 + (b * 3 + k * (k % 3 ? 1 : 0)) % (TC - 1); /* repeats too */
    }
    cg_tensor *lp = cg_requires_grad(log_probs(&rng, TT, TN, TC), true);
    cg_tensor *l = cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(TN, TS), tg), cg_test_ids(TN, il),
                               cg_test_ids(TN, tl), 0, CG_REDUCTION_NONE, false);
    cg_tensor *s = l ? cg_sum_all(l) : NULL;
    ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
    got[0] = cg_test_values(l);
    got[1] = cg_test_values(lp->grad);
    cg_release_all(3, lp, l, s);
    cg_set_num_threads(0);
}

START_TEST(test_ctc_threads)
{
    const int64_t n[2] = {TN, TT * TN * TC};
    cg_test_same_bits_1_2_threads(thread_run, 2, n);
}
END_TEST

/* ---------------------------------------------------------- refusals */
START_TEST(test_ctc_refused)
{
    cg_rng rng = cg_rng_new(2);
    ctc_case c = case_new(0);
    const cg_reduction M = CG_REDUCTION_MEAN;
    cg_tensor *lp = log_probs(&rng, T, NB, C), *lpb = cg_k_to(lp, CG_BF16);
    cg_tensor *lp4 = cg_unsqueeze(lp, 0);
    cg_tensor *il_f = cg_k_to(c.il, CG_F32);
    int64_t il[NB], tl[NB], tg[NB * S];
    memcpy(il, IL, sizeof il);
    memcpy(tl, TL, sizeof tl);
    memcpy(tg, cg_data_i64(c.padded), sizeof tg);
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(NULL, c.padded, c.il, c.tl, 0, M, false), "ctc_loss");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, c.il, NULL, 0, M, false), "ctc_loss");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lpb, c.padded, c.il, c.tl, 0, M, false),
                           "ctc_loss: log_probs is bfloat16, expected float32");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp4, c.padded, c.il, c.tl, 0, M, false),
                           "ctc_loss: log_probs of shape [1, 5, 7, 4], expected [T, N, C]");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, c.il, c.tl, 4, M, false),
                           "ctc_loss: blank is 4, expected a class in [0, 4)");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, c.il, c.tl, -1, M, false),
                           "ctc_loss: blank is -1");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, c.il, c.tl, 0, CG_REDUCTION_BATCHMEAN, false),
                           "ctc_loss: reduction 3 is not one of");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, il_f, c.tl, 0, M, false),
                           "ctc_loss: argument 'input_lengths'");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, cg_test_ids(NB - 1, il), c.tl, 0, M, false),
                           "ctc_loss: input_lengths of shape [6], expected [N]");
    il[2] = T + 1;
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, cg_test_ids(NB, il), c.tl, 0, M, false),
                           "ctc_loss: input_lengths[2] is 6, expected 0 to 5");
    il[2] = -1;
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, cg_test_ids(NB, il), c.tl, 0, M, false),
                           "ctc_loss: input_lengths[2] is -1, expected 0 to 5");
    tl[4] = -2;
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, c.il, cg_test_ids(NB, tl), 0, M, false),
                           "ctc_loss: target_lengths[4] is -2, expected 0 to");
    tl[4] = S + 1;
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, c.padded, c.il, cg_test_ids(NB, tl), 0, M, false),
                           "ctc_loss: target_lengths[4] is 4, longer than the padded targets' 3");
    tg[1] = 0; /* sample 0's second label, the blank */
    CG_ASSERT_REFUSED_LINE(
        cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(NB, S), tg), c.il, c.tl, 0, M, false),
        "ctc_loss: target 1 of sample 0 is 0, expected a label in [0, 4) other than the blank 0");
    tg[1] = 4;
    CG_ASSERT_REFUSED_LINE(
        cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(NB, S), tg), c.il, c.tl, 0, M, false),
        "ctc_loss: target 1 of sample 0 is 4");
    tg[1] = -3;
    CG_ASSERT_REFUSED_LINE(
        cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(NB, S), tg), c.il, c.tl, 0, M, false),
        "ctc_loss: target 1 of sample 0 is -3");
    tg[1] = 2;
    tg[S + 2] = 0; /* past sample 1's length 2: padding, not read */
    cg_tensor *ok = cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(NB, S), tg), c.il, c.tl, 0, M, false);
    ck_assert_msg(ok, "%s", cg_last_error());
    CG_ASSERT_REFUSED_LINE(
        cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(NB - 1, S), tg), c.il, c.tl, 0, M, false),
        "ctc_loss: targets of shape [6, 3], expected [N, S] = [7, S] (padded) or 1-d");
    CG_ASSERT_REFUSED_LINE(
        cg_ctc_loss(lp, cg_test_ids_nd(CG_SHAPE(1, NB, S), tg), c.il, c.tl, 0, M, false),
        "ctc_loss: targets of shape [1, 7, 3]");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, cg_test_ids(8, tg), c.il, c.tl, 0, M, false),
                           "ctc_loss: concatenated targets of shape [8], expected [9]");
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(lp, il_f, c.il, c.tl, 0, M, false),
                           "ctc_loss: argument 'targets'");
    /* unbatched: 0-d or [1] lengths */
    cg_tensor *x0 = cg_select(lp, 1, 0);
    CG_ASSERT_REFUSED_LINE(cg_ctc_loss(x0, cg_test_ids(3, tg), c.il, c.tl, 0, M, false),
                           "ctc_loss: input_lengths of shape [7], expected 0-d or [1] (unbatched");
    /* the backward's own arguments */
    cg_tensor *la = NULL, *l = cg_k_ctc_loss(lp, c.padded, c.il, c.tl, 0, &la);
    cg_tensor *g3 = cg_ones(CG_SHAPE(3));
    CG_ASSERT_REFUSED_LINE(
        cg_k_ctc_loss_backward(g3, lp, c.padded, c.il, c.tl, 0, l, la, false),
        "ctc_loss_backward: the upstream gradient has shape [3], expected [N], one a row");
    CG_ASSERT_REFUSED_LINE(cg_k_ctc_loss_backward(g3, lp, c.padded, c.il, c.tl, 0, g3, la, false),
                           "ctc_loss_backward: nll [3] or log_alpha [7, 5, 7] is not");
    CG_ASSERT_REFUSED_LINE(cg_k_ctc_loss_backward(g3, lp, c.padded, c.il, c.tl, 0, l, NULL, false),
                           "ctc_loss_backward: input is NULL");
    cg_release_all(9, lp, lpb, lp4, il_f, x0, la, l, g3, ok);
}
END_TEST

static Suite *ctc_suite(void)
{
    Suite *s = suite_create("ctc");
    TCase *tc = tcase_create("ctc");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_ctc_brute_force);
    tcase_add_test(tc, test_ctc_reductions);
    tcase_add_test(tc, test_ctc_gradcheck);
    tcase_add_test(tc, test_ctc_threads);
    tcase_add_test(tc, test_ctc_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {ctc_suite()};
    return cg_test_run(s, 1);
}
