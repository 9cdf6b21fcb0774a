/* The rest of torch.nn's losses (autograd/ops.h, 2026-12): binary
 * cross-entropy, Poisson and Gaussian NLL, the soft margin, margin
 * ranking, hinge and cosine embedding, triplet, multi-margin and the two
 * multilabel losses: gradchecks at each reduction (away from the kinks),
 * the reads masks of the new nodes, a float64 reference of every forward
 * (several shapes, every reduction, weights) and of the fused nodes'
 * gradients, 1 and 2 threads the same bits, bfloat16, the refusals by
 * message. PyTorch's own answers: tests/interop make_op_cases.py
 * gen_losses_rest (torch_ops). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

enum {
    L_BCE,
    L_POISSON,
    L_POISSON_FULL,
    L_GAUSS,
    L_GAUSS_FULL,
    L_SOFT,
    L_RANKING,
    L_HINGE,
    L_COSINE,
    L_TRIPLET,
    L_TRIPLET_SWAP,
    L_TRIPLET_P3,
    L_MULTI,
    L_MULTI_P2,
    L_MLSOFT,
    L_MLMARGIN,
    L_COUNT
};
static const char *const NAMES[L_COUNT] = {
    "binary_cross_entropy", "poisson_nll_loss",  "poisson_nll_loss(full)", "gaussian_nll_loss",
    "gaussian_nll(full)",   "soft_margin_loss",  "margin_ranking_loss",    "hinge_embedding",
    "cosine_embedding",     "triplet_margin",    "triplet_margin(swap)",   "triplet_margin(p 3)",
    "multi_margin_loss",    "multi_margin(p 2)", "multilabel_soft_margin", "multilabel_margin"};
/* the differentiable inputs of each */
static const int NIN[L_COUNT] = {2, 2, 2, 3, 3, 2, 2, 1, 2, 3, 3, 3, 1, 1, 2, 1};

typedef struct {
    int which;
    cg_reduction r;
    int64_t n, c;
    cg_tensor *sign;   /* [n, c] of +1 / -1 (soft margin's y is in[1]) */
    cg_tensor *rowsgn; /* [n] of +1 / -1 */
    cg_tensor *cls;    /* int64 [n], each in [0, c) */
    cg_tensor *labels; /* int64 [n, c], -1 ended */
    cg_tensor *w;      /* [c] */
} lm_case;

static cg_tensor *lm_fn(void *ctx, cg_tensor *const *in)
{
    const lm_case *c = ctx;
    const cg_reduction r = c->r;
    switch (c->which) {
    case L_BCE: return cg_binary_cross_entropy(in[0], in[1], c->w, r);
    case L_POISSON: return cg_poisson_nll_loss(in[0], in[1], true, false, 1e-8f, r);
    case L_POISSON_FULL: return cg_poisson_nll_loss(in[0], in[1], false, true, 1e-8f, r);
    case L_GAUSS: return cg_gaussian_nll_loss(in[0], in[1], in[2], false, 1e-6f, r);
    case L_GAUSS_FULL: {
        cg_tensor *v = cg_select(in[2], 1, 0),
                  *l = cg_gaussian_nll_loss(in[0], in[1], v, true, 1e-6f, r);
        cg_release(v);
        return l;
    }
    case L_SOFT: return cg_soft_margin_loss(in[0], in[1], r);
    case L_RANKING: return cg_margin_ranking_loss(in[0], in[1], c->sign, 0.3f, r);
    case L_HINGE: return cg_hinge_embedding_loss(in[0], c->sign, 1.0f, r);
    case L_COSINE: return cg_cosine_embedding_loss(in[0], in[1], c->rowsgn, 0.1f, r);
    case L_TRIPLET: return cg_triplet_margin_loss(in[0], in[1], in[2], 1.0f, 2.0f, 1e-6f, false, r);
    case L_TRIPLET_SWAP:
        return cg_triplet_margin_loss(in[0], in[1], in[2], 1.5f, 1.0f, 1e-6f, true, r);
    case L_TRIPLET_P3:
        return cg_triplet_margin_loss(in[0], in[1], in[2], 2.0f, 3.0f, 1e-6f, false, r);
    case L_MULTI: return cg_multi_margin_loss(in[0], c->cls, 1, 1.0f, NULL, r);
    case L_MULTI_P2: return cg_multi_margin_loss(in[0], c->cls, 2, 0.7f, c->w, r);
    case L_MLSOFT: return cg_multilabel_soft_margin_loss(in[0], in[1], c->w, r);
    default: return cg_multilabel_margin_loss(in[0], c->labels, r);
    }
}

/* Inputs in each loss's domain, [n, c] (deterministic): probabilities
 * in [0.05, 0.95] and [0, 1] for bce, positive where a log is taken */
static void lm_inputs(int which, cg_rng *rng, int64_t n, int64_t c, cg_tensor **in)
{
    for (int k = 0; k < 3; k++) {
        cg_tensor *t = cg_randn(rng, CG_SHAPE(n, c));
        float *d = cg_data(t);
        for (int64_t i = 0; i < n * c; i++) {
            const float u = 1.0f / (1.0f + expf(-d[i])); /* (0, 1) */
            if (which == L_BCE)
                d[i] = k == 0 ? 0.05f + 0.9f * u : u;
            else if (which == L_POISSON_FULL) /* input > 0; target away from 1 (the mask) */
                d[i] = k == 0 ? 0.2f + 2.0f * u : (i % 2 ? 0.3f + 0.5f * u : 1.3f + 2.0f * u);
            else if ((which == L_GAUSS || which == L_GAUSS_FULL) && k == 2)
                d[i] = 0.4f + 1.5f * u;
            else if (which == L_MLSOFT && k == 1)
                d[i] = u;
        }
        in[k] = t;
    }
}

static void lm_case_init(lm_case *c, int which, cg_reduction r, int64_t n, int64_t cc)
{
    float *s = malloc((size_t)(n * cc) * sizeof *s), *rs = malloc((size_t)n * sizeof *rs);
    float *w = malloc((size_t)cc * sizeof *w);
    int64_t *cl = malloc((size_t)n * sizeof *cl), *lb = malloc((size_t)(n * cc) * sizeof *lb);
    for (int64_t i = 0; i < n * cc; i++)
        s[i] = (i * 7) % 3 ? 1.0f : -1.0f;
    for (int64_t i = 0; i < n; i++) {
        rs[i] = i % 3 == 1 ? -1.0f : 1.0f;
        cl[i] = (i * 5 + 2) % cc;
        for (int64_t j = 0; j < cc; j++) /* row i: (i % 3) + 1 classes, then -1 */
            lb[i * cc + j] = j < (i % 3) + 1 && j < cc - 1 ? (i + 3 * j) % cc : -1;
        if (cc > 2 && i % 4 == 3)
            lb[i * cc + 1] = lb[i * cc]; /* a class listed twice */
    }
    for (int64_t j = 0; j < cc; j++)
        w[j] = 0.25f + (float)((j * 5) % 7) * 0.25f;
    *c = (lm_case){.which = which, .r = r, .n = n, .c = cc};
    c->sign = cg_from_data(CG_SHAPE(n, cc), s);
    c->rowsgn = cg_from_data(CG_SHAPE(n), rs);
    c->cls = cg_test_ids(n, cl);
    c->labels = cg_test_ids_nd(CG_SHAPE(n, cc), lb);
    c->w = cg_from_data(CG_SHAPE(cc), w);
    free(s), free(rs), free(w), free(cl), free(lb);
}

static void lm_case_free(lm_case *c) { cg_release_all(3, c->sign, c->rowsgn, c->w); }

/* Gradchecks: every loss at mean, sum and none, contiguous and transposed
 * first inputs; the new nodes' reads masks (cg_test_check_unread) */
START_TEST(test_more_gradchecks)
{
    cg_rng rng = cg_rng_new(41);
    for (int which = 0; which < L_COUNT; which++)
        for (int red = 0; red < 3; red++)
            for (int layout = 0; layout < 2; layout++) {
                lm_case c;
                lm_case_init(&c, which, (cg_reduction)red, 4, 5);
                cg_tensor *in[3];
                lm_inputs(which, &rng, 4, 5, in);
                if (layout) { /* the first input's storage transposed */
                    cg_tensor *t = cg_empty(CG_SHAPE(5, 4));
                    for (int i = 0; i < 4; i++)
                        for (int j = 0; j < 5; j++)
                            cg_data(t)[j * 4 + i] = cg_data(in[0])[i * 5 + j];
                    cg_tensor *v = cg_transpose(t, 0, 1);
                    cg_release_all(2, in[0], t);
                    in[0] = v;
                }
                for (int k = 0; k < NIN[which]; k++)
                    cg_requires_grad(in[k], true);
                char what[96];
                snprintf(what, sizeof what, "%s reduction %d layout %d", NAMES[which], red, layout);
                cg_gradcheck_report rep;
                bool ok = cg_gradcheck(lm_fn, &c, NIN[which], in, NULL, &rep);
                ck_assert_msg(ok, "%s: %s", what, rep.message);
                if (which == L_BCE || which == L_MULTI_P2 || which == L_MLMARGIN)
                    cg_test_check_unread(lm_fn, &c, NIN[which], in, what);
                cg_release_all(3, in[0], in[1], in[2]);
                lm_case_free(&c);
            }
}
END_TEST

/* ------------------------------------------------ float64 references */
static double dget(const cg_tensor *t, int64_t i) { return (double)cg_data(t)[i]; }

/* Whether class j is among a row's labels t (up to the first -1) */
static bool is_label(const int64_t *t, int64_t C, int64_t j)
{
    bool tgt = false;
    for (int64_t q = 0; q < C && t[q] >= 0; q++)
        tgt |= t[q] == j;
    return tgt;
}

/* Row i's loss (the row losses) or element i's, in double, from the
 * contiguous inputs x[k] [n, c]; *per_row: one a row */
static double lm_ref(const lm_case *c, cg_tensor *const *x, int64_t i, bool *per_row)
{
    const int64_t C = c->c;
    const double L2PI = log(2.0 * 3.14159265358979323846);
    *per_row = true;
    double s = 0.0, a = 0.0, b = 0.0;
    switch (c->which) {
    case L_COSINE: {
        double p = 0, m1 = 1e-12, m2 = 1e-12;
        for (int64_t j = 0; j < C; j++) {
            p += dget(x[0], i * C + j) * dget(x[1], i * C + j);
            m1 += dget(x[0], i * C + j) * dget(x[0], i * C + j);
            m2 += dget(x[1], i * C + j) * dget(x[1], i * C + j);
        }
        double cs = p / sqrt(m1 * m2);
        return dget(c->rowsgn, i) > 0 ? 1.0 - cs : fmax(0.0, cs - 0.1);
    }
    case L_TRIPLET:
    case L_TRIPLET_SWAP:
    case L_TRIPLET_P3: {
        const double p = c->which == L_TRIPLET ? 2 : c->which == L_TRIPLET_P3 ? 3 : 1;
        const double m = c->which == L_TRIPLET ? 1 : c->which == L_TRIPLET_P3 ? 2 : 1.5;
        double sw = 0.0;
        for (int64_t j = 0; j < C; j++) {
            a += pow(fabs(dget(x[0], i * C + j) - dget(x[1], i * C + j) + 1e-6), p);
            b += pow(fabs(dget(x[0], i * C + j) - dget(x[2], i * C + j) + 1e-6), p);
            sw += pow(fabs(dget(x[1], i * C + j) - dget(x[2], i * C + j) + 1e-6), p);
        }
        double dn = pow(b, 1 / p);
        if (c->which == L_TRIPLET_SWAP)
            dn = fmin(dn, pow(sw, 1 / p));
        return fmax(0.0, m + pow(a, 1 / p) - dn);
    }
    case L_MULTI:
    case L_MULTI_P2: {
        const int64_t y = cg_data_i64(c->cls)[i];
        const bool two = c->which == L_MULTI_P2;
        for (int64_t j = 0; j < C; j++) {
            double z = (two ? 0.7 : 1.0) - dget(x[0], i * C + y) + dget(x[0], i * C + j);
            if (j != y && z > 0)
                s += (two ? z * z * dget(c->w, y) : z);
        }
        return s / C;
    }
    case L_MLSOFT:
        for (int64_t j = 0; j < C; j++) {
            double v = dget(x[0], i * C + j), y = dget(x[1], i * C + j);
            double lsp = -log1p(exp(-v)), lsn = -log1p(exp(v));
            s += -(y * lsp + (1 - y) * lsn) * dget(c->w, j);
        }
        return s / C;
    case L_MLMARGIN: {
        const int64_t *t = cg_data_i64(c->labels) + i * C;
        for (int64_t k = 0; k < C && t[k] >= 0; k++)
            for (int64_t j = 0; j < C; j++) {
                double z = 1.0 - dget(x[0], i * C + t[k]) + dget(x[0], i * C + j);
                if (!is_label(t, C, j) && z > 0)
                    s += z;
            }
        return s / C;
    }
    default: break;
    }
    *per_row = false;
    const double v = dget(x[0], i), y = dget(x[1], i);
    switch (c->which) {
    case L_BCE:
        return -(y * fmax(log(v), -100) + (1 - y) * fmax(log(1 - v), -100)) * dget(c->w, i % C);
    case L_POISSON: return exp(v) - y * v;
    case L_POISSON_FULL:
        return v - y * log(v + 1e-8) +
               (y > 1 ? y * log(y) - y + 0.5 * log(2 * 3.141592653589793 * y) : 0.0);
    case L_GAUSS:
    case L_GAUSS_FULL: {
        double var = c->which == L_GAUSS ? dget(x[2], i) : dget(x[2], (i / C) * C);
        var = fmax(var, 1e-6);
        return 0.5 * (log(var) + (v - y) * (v - y) / var) + (c->which == L_GAUSS ? 0 : 0.5 * L2PI);
    }
    case L_SOFT: return log1p(exp(-y * v));
    case L_RANKING: return fmax(0.0, -dget(c->sign, i) * (v - y) + 0.3);
    default: /* hinge */ return dget(c->sign, i) > 0 ? v : fmax(0.0, 1.0 - v);
    }
}

/* The fused nodes' gradient of sum_i u_i loss_i in double (row r's): dx [n, c] */
static void lm_ref_grad(const lm_case *c, const cg_tensor *x, const cg_tensor *yv, const double *u,
                        double *dx)
{
    const int64_t N = c->n, C = c->c;
    memset(dx, 0, (size_t)(N * C) * sizeof *dx);
    for (int64_t i = 0; i < N; i++) {
        const float *xr = cg_data(x) + i * C;
        if (c->which == L_BCE) {
            for (int64_t j = 0; j < C; j++) {
                double p = xr[j], y = dget(yv, i * C + j);
                dx[i * C + j] = u[i * C + j] * dget(c->w, j) * (p - y) / fmax((1 - p) * p, 1e-12);
            }
        } else if (c->which == L_MULTI_P2) {
            const int64_t y = cg_data_i64(c->cls)[i];
            for (int64_t j = 0; j < C; j++) {
                double z = 0.7 - xr[y] + xr[j];
                if (j != y && z > 0) {
                    double d = u[i] * 2 * z * dget(c->w, y) / C;
                    dx[i * C + j] += d;
                    dx[i * C + y] -= d;
                }
            }
        } else { /* multilabel margin */
            const int64_t *t = cg_data_i64(c->labels) + i * C;
            for (int64_t k = 0; k < C && t[k] >= 0; k++)
                for (int64_t j = 0; j < C; j++) {
                    if (!is_label(t, C, j) && 1.0 - xr[t[k]] + xr[j] > 0) {
                        dx[i * C + j] += u[i] / C;
                        dx[i * C + t[k]] -= u[i] / C;
                    }
                }
        }
    }
}

/* Every loss's forward against the float64 reference at [1, 3], [6, 7]
 * and [33, 4], each reduction; the fused nodes' gradients (bce's with its
 * weight, multi_margin p 2 with its weight, multilabel) too. */
START_TEST(test_more_vs_double)
{
    static const int64_t SH[3][2] = {{1, 3}, {6, 7}, {33, 4}};
    cg_rng rng = cg_rng_new(5);
    double worst = 0.0, worst_g = 0.0;
    for (int which = 0; which < L_COUNT; which++)
        for (int s = 0; s < 3; s++)
            for (int red = 0; red < 3; red++) {
                const int64_t N = SH[s][0], C = SH[s][1];
                lm_case c;
                lm_case_init(&c, which, (cg_reduction)red, N, C);
                cg_tensor *in[3];
                lm_inputs(which, &rng, N, C, in);
                if (which == L_BCE) { /* p at 0 and 1: the logs clamped at -100 */
                    cg_data(in[0])[0] = 0.0f;
                    cg_data(in[0])[N * C - 1] = 1.0f;
                }
                if (which == L_GAUSS || which == L_GAUSS_FULL) /* var below eps: clamped */
                    cg_data(in[2])[0] = 1e-9f;
                cg_requires_grad(in[0], true);
                cg_tensor *l = lm_fn(&c, in);
                ck_assert_msg(l, "%s: %s", NAMES[which], cg_last_error());
                bool per_row;
                double total = 0.0, ref[33 * 7];
                lm_ref(&c, in, 0, &per_row);
                const int64_t m = per_row ? N : N * C;
                for (int64_t i = 0; i < m; i++) {
                    ref[i] = lm_ref(&c, in, i, &per_row);
                    total += ref[i];
                }
                ck_assert_int_eq(cg_numel(l), red == CG_REDUCTION_NONE ? m : 1);
                for (int64_t i = 0; i < cg_numel(l); i++) {
                    double want = red == CG_REDUCTION_NONE  ? ref[i]
                                  : red == CG_REDUCTION_SUM ? total
                                                            : total / (double)m;
                    double got = cg_data(l)[i], e = fabs(got - want) / (1e-6 + fabs(want));
                    worst = fmax(worst, fabs(got - want) / (1 + fabs(want)));
                    ck_assert_msg(fabs(got - want) <= 2e-5 * (1 + fabs(want)),
                                  "%s [%lld, %lld] reduction %d element %lld: %.9g, want %.9g (%g)",
                                  NAMES[which], (long long)N, (long long)C, red, (long long)i, got,
                                  want, e);
                }
                if (which == L_BCE || which == L_MULTI_P2 || which == L_MLMARGIN) {
                    cg_tensor *u = red == CG_REDUCTION_NONE ? cg_randn(&rng, l->ndim, l->shape)
                                                            : cg_scalar(0.75f);
                    ck_assert_msg(cg_backward(l, u, false), "%s", cg_last_error());
                    double uu[33 * 7], dx[33 * 7];
                    for (int64_t i = 0; i < m; i++)
                        uu[i] = red == CG_REDUCTION_NONE  ? dget(u, i)
                                : red == CG_REDUCTION_SUM ? 0.75
                                                          : 0.75 / (double)m;
                    lm_ref_grad(&c, in[0], in[1], uu, dx);
                    for (int64_t i = 0; i < N * C; i++) {
                        double got = cg_data(in[0]->grad)[i];
                        worst_g = fmax(worst_g, fabs(got - dx[i]) / (1 + fabs(dx[i])));
                        ck_assert_msg(fabs(got - dx[i]) <= 2e-5 * (1 + fabs(dx[i])),
                                      "%s reduction %d grad %lld: %.9g, want %.9g", NAMES[which],
                                      red, (long long)i, got, dx[i]);
                    }
                    cg_release(u);
                }
                cg_release_all(4, l, in[0], in[1], in[2]);
                lm_case_free(&c);
            }
    printf("loss_more: worst relative difference from float64: loss %.3g, gradient %.3g\n", worst,
           worst_g);
}
END_TEST

/* [600, 80] (past the fused kernels' parallel threshold) at nt threads:
 * each loss's none and mean and their gradients */
static int thread_pair; /* 0: the first two losses of thread_run's, 1: the others */
static void thread_run(int nt, float **got)
{
    static const int ws[4] = {L_MULTI, L_MULTI_P2, L_MLMARGIN, L_BCE};
    cg_rng rng = cg_rng_new(19);
    cg_set_num_threads(nt);
    got -= 6 * thread_pair;
    for (int k = 2 * thread_pair; k < 2 * thread_pair + 2; k++) {
        lm_case c;
        lm_case_init(&c, ws[k], CG_REDUCTION_NONE, 600, 80);
        cg_tensor *in[3];
        lm_inputs(ws[k], &rng, 600, 80, in);
        cg_requires_grad(in[0], true);
        cg_tensor *l = lm_fn(&c, in);
        c.r = CG_REDUCTION_MEAN;
        cg_tensor *lm = lm_fn(&c, in);
        cg_tensor *u = l ? cg_randn(&rng, l->ndim, l->shape) : NULL;
        cg_tensor *lu = u ? cg_mul(l, u) : NULL, *s = lu ? cg_sum_all(lu) : NULL;
        cg_tensor *root = s && lm ? cg_add(s, lm) : NULL;
        ck_assert_msg(root && cg_backward(root, NULL, false), "%s", cg_last_error());
        got[3 * k] = cg_test_values(l);
        got[3 * k + 1] = cg_test_values(lm);
        got[3 * k + 2] = cg_test_values(in[0]->grad);
        cg_release_all(9, l, lm, u, lu, s, root, in[0], in[1], in[2]);
        lm_case_free(&c);
    }
    cg_set_num_threads(0);
}

START_TEST(test_more_threads)
{
    int64_t n[12];
    for (int k = 0; k < 4; k++) {
        n[3 * k] = 600 * (k == 3 ? 80 : 1);
        n[3 * k + 1] = 1;
        n[3 * k + 2] = 600 * 80;
    }
    for (thread_pair = 0; thread_pair < 2; thread_pair++)
        cg_test_same_bits_1_2_threads(thread_run, 6, n + 6 * thread_pair);
}
END_TEST

/* bfloat16: the composed losses and bce take it (bce computed in float32
 * and rounded once: the float32 loss of the same values, rounded), the
 * fused margin losses refuse it as PyTorch 1.13 does */
START_TEST(test_more_bf16)
{
    cg_rng rng = cg_rng_new(3);
    for (int which = 0; which < L_COUNT; which++) {
        lm_case c;
        lm_case_init(&c, which, CG_REDUCTION_NONE, 3, 4);
        cg_tensor *in[3], *ib[3];
        lm_inputs(which, &rng, 3, 4, in);
        for (int k = 0; k < 3; k++) {
            ib[k] = cg_k_to(in[k], CG_BF16);
            cg_tensor *f = cg_k_to(ib[k], CG_F32); /* the bf16 values, as float32 */
            cg_release(in[k]);
            in[k] = f;
        }
        cg_requires_grad(ib[0], true);
        lm_case cb = c; /* the constants in bfloat16 too (their values exact there) */
        cb.sign = cg_k_to(c.sign, CG_BF16);
        cb.rowsgn = cg_k_to(c.rowsgn, CG_BF16);
        cb.w = cg_k_to(c.w, CG_BF16);
        cg_tensor *lb = lm_fn(&cb, ib), *lf = lm_fn(&c, in);
        lm_case_free(&cb);
        if (which == L_MULTI || which == L_MULTI_P2 || which == L_MLMARGIN) {
            ck_assert_msg(!lb && strstr(cg_last_error(), "is bfloat16, expected float32"), "%s: %s",
                          NAMES[which], lb ? "taken" : cg_last_error());
        } else {
            ck_assert_msg(lb && lf && lb->dtype == CG_BF16, "%s: %s", NAMES[which],
                          cg_last_error());
            if (which == L_BCE)
                cg_test_assert_bf16_rounded(lb, lf, NAMES[which]);
            else { /* each op rounded: within bf16's few ulps */
                float *bv = cg_test_values(lb);
                for (int64_t i = 0; i < cg_numel(lf); i++) {
                    double b = bv[i], f = cg_data(lf)[i];
                    ck_assert_msg(fabs(b - f) <= 0.03 * (1 + fabs(f)), "%s %lld: %g %g",
                                  NAMES[which], (long long)i, b, f);
                }
                free(bv);
            }
            cg_tensor *s = cg_sum_all(lb);
            ck_assert(s && cg_backward(s, NULL, false));
            ck_assert(ib[0]->grad && ib[0]->grad->dtype == CG_BF16);
            cg_release(s);
        }
        cg_release_all(8, lb, lf, in[0], in[1], in[2], ib[0], ib[1], ib[2]);
        lm_case_free(&c);
    }
}
END_TEST

/* Bad inputs refused in one line, naming the op and the reason */
START_TEST(test_more_refused)
{
    cg_rng rng = cg_rng_new(2);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(2, 4)), *y = cg_randn(&rng, CG_SHAPE(2, 4));
    cg_tensor *x3 = cg_randn(&rng, CG_SHAPE(4)), *x23 = cg_randn(&rng, CG_SHAPE(2, 3));
    cg_tensor *p = cg_k_sigmoid(x), *neg = cg_k_muls(p, -1.0f), *big = cg_k_adds(p, 1.0f);
    cg_tensor *nan = cg_k_log(neg), *w3 = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3});
    const cg_reduction M = CG_REDUCTION_MEAN;
    /* binary_cross_entropy: values, shapes, weight, reduction */
    CG_ASSERT_REFUSED_LINE(cg_binary_cross_entropy(big, p, NULL, M),
                           "binary_cross_entropy: all elements of input should be between 0 and 1");
    CG_ASSERT_REFUSED_LINE(cg_binary_cross_entropy(nan, p, NULL, M), "between 0 and 1");
    CG_ASSERT_REFUSED_LINE(cg_binary_cross_entropy(p, x3, NULL, M),
                           "binary_cross_entropy: input [2, 4] and target [4] differ in shape");
    CG_ASSERT_REFUSED_LINE(cg_binary_cross_entropy(p, p, w3, M),
                           "binary_cross_entropy: argument 'weight' of shape [3] does not "
                           "broadcast");
    CG_ASSERT_REFUSED_LINE(cg_binary_cross_entropy(p, p, NULL, CG_REDUCTION_BATCHMEAN),
                           "binary_cross_entropy: reduction 3 is not one of");
    CG_ASSERT_REFUSED_LINE(cg_binary_cross_entropy(NULL, p, NULL, M), "binary_cross_entropy");
    /* the composed losses' reductions and shapes */
    CG_ASSERT_REFUSED_LINE(cg_poisson_nll_loss(x, y, true, false, 1e-8f, (cg_reduction)7),
                           "poisson_nll_loss: reduction 7 is not one of");
    CG_ASSERT_REFUSED_LINE(cg_poisson_nll_loss(x, x23, true, false, 1e-8f, M),
                           "poisson_nll_loss: shapes [2, 4] and [2, 3] cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_gaussian_nll_loss(x, y, x3, false, 1e-6f, M),
                           "gaussian_nll_loss: var is of incorrect size: [4] for input [2, 4]");
    CG_ASSERT_REFUSED_LINE(cg_gaussian_nll_loss(x, y, neg, false, 1e-6f, M),
                           "gaussian_nll_loss: var has negative entry/entries");
    CG_ASSERT_REFUSED_LINE(cg_gaussian_nll_loss(x, y, p, false, 1e-6f, CG_REDUCTION_BATCHMEAN),
                           "gaussian_nll_loss: reduction 3");
    CG_ASSERT_REFUSED_LINE(cg_soft_margin_loss(x3, x, M),
                           "soft_margin_loss: argument 'target' of shape [2, 4] does not "
                           "broadcast to the input's [4]");
    CG_ASSERT_REFUSED_LINE(cg_margin_ranking_loss(x, x3, x3, 0.0f, M),
                           "margin_ranking_loss: all inputs should have the same number of dims");
    CG_ASSERT_REFUSED_LINE(cg_hinge_embedding_loss(x, x23, 1.0f, M),
                           "hinge_embedding_loss: shapes [2, 4] and [2, 3] cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_cosine_embedding_loss(x, y, x3, 0.0f, M),
                           "cosine_embedding_loss: shapes [2] and [4] cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_triplet_margin_loss(x, y, x23, 1.0f, 2.0f, 1e-6f, false, M),
                           "triplet_margin_loss: shapes [2, 4] and [2, 3] cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_cosine_embedding_loss(x, y, x, 0.0f, M),
                           "cosine_embedding_loss: 0D or 1D target tensor expected");
    CG_ASSERT_REFUSED_LINE(cg_cosine_embedding_loss(x3, x3, x3, 0.0f, M),
                           "cosine_embedding_loss: 1D target tensor expects 2D input tensors");
    CG_ASSERT_REFUSED_LINE(cg_triplet_margin_loss(x, x3, x, 1.0f, 2.0f, 1e-6f, false, M),
                           "triplet_margin_loss: all inputs should have the same number of dims");
    CG_ASSERT_REFUSED_LINE(cg_triplet_margin_loss(x, y, x, 1.0f, 0.0f, 1e-6f, false, M),
                           "triplet_margin_loss: p is 0, expected a finite norm > 0");
    CG_ASSERT_REFUSED_LINE(cg_triplet_margin_loss(x, y, x, 1.0f, INFINITY, 1e-6f, false, M),
                           "triplet_margin_loss: p is inf");
    CG_ASSERT_REFUSED_LINE(
        cg_multilabel_soft_margin_loss(cg_test_scalar(1), cg_test_scalar(1), NULL, M),
        "multilabel_soft_margin_loss: input is 0-d");
    /* multi_margin: p, targets, shapes, weight, dtypes */
    const int64_t t2[2] = {0, 3}, bad[2] = {0, 4}, negt[2] = {-1, 0};
    cg_tensor *t = cg_test_ids(2, t2);
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x, t, 3, 1.0f, NULL, M),
                           "multi_margin_loss: p is 3, expected 1 or 2");
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x, cg_test_ids(2, bad), 1, 1.0f, NULL, M),
                           "multi_margin_loss: target 4 at row 1 is out of range [0, 4)");
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x, cg_test_ids(2, negt), 1, 1.0f, NULL, M),
                           "multi_margin_loss: target -1 at row 0 is out of range");
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x, cg_test_ids(1, t2), 1, 1.0f, NULL, M),
                           "multi_margin_loss: target of shape [1], expected 2 class ids");
    CG_ASSERT_REFUSED_LINE(
        cg_multi_margin_loss(x, t, 1, 1.0f, w3, M),
        "multi_margin_loss: argument 'weight' has shape [3], expected [C] = [4]");
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x, x3, 1, 1.0f, NULL, M),
                           "multi_margin_loss: argument 'target'");
    cg_tensor *x222 = cg_randn(&rng, CG_SHAPE(2, 2, 2));
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x222, t, 1, 1.0f, NULL, M),
                           "multi_margin_loss: input of shape [2, 2, 2], expected a non-empty");
    CG_ASSERT_REFUSED_LINE(cg_multi_margin_loss(x, t, 1, 1.0f, NULL, CG_REDUCTION_BATCHMEAN),
                           "multi_margin_loss: reduction 3 is not one of");
    /* multilabel_margin: targets and shapes */
    const int64_t lb[8] = {0, 5, -1, 0, 1, -1, 0, 0}, lbn[8] = {0, -1, 3, -2, 1, -1, 0, 0};
    CG_ASSERT_REFUSED_LINE(cg_multilabel_margin_loss(x, cg_test_ids_nd(CG_SHAPE(2, 4), lb), M),
                           "multilabel_margin_loss: target 5 at row 0 is out of range [-1, 4)");
    CG_ASSERT_REFUSED_LINE(cg_multilabel_margin_loss(x, cg_test_ids_nd(CG_SHAPE(2, 4), lbn), M),
                           "multilabel_margin_loss: target -2 at row 0 is out of range");
    CG_ASSERT_REFUSED_LINE(cg_multilabel_margin_loss(x, t, M),
                           "multilabel_margin_loss: target of shape [2], expected the input's "
                           "[2, 4]");
    CG_ASSERT_REFUSED_LINE(cg_multilabel_margin_loss(x, NULL, M), "multilabel_margin_loss");
    cg_release_all(10, x, y, x3, x23, p, neg, big, nan, w3, x222);
}
END_TEST

/* PyTorch's shapes of the fused losses' none: [N] for rows, 0-d for a
 * 1-D input with a 0-d target (multi_margin) or a 1-D input
 * (multilabel); a 0-d input is one class (loss 0) */
START_TEST(test_more_shapes)
{
    cg_rng rng = cg_rng_new(9);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(4)), *x0 = cg_scalar(0.5f);
    const int64_t one = 2, lb[4] = {1, 3, -1, 0}, zero = 0;
    cg_tensor *t1 = cg_test_ids(1, &one), *t0 = cg_test_ids_nd(0, NULL, &one);
    cg_tensor *a = cg_multi_margin_loss(x, t1, 1, 1.0f, NULL, CG_REDUCTION_NONE);
    cg_tensor *b = cg_multi_margin_loss(x, t0, 1, 1.0f, NULL, CG_REDUCTION_NONE);
    cg_tensor *c = cg_multilabel_margin_loss(x, cg_test_ids(4, lb), CG_REDUCTION_NONE);
    cg_tensor *d =
        cg_multi_margin_loss(x0, cg_test_ids_nd(0, NULL, &zero), 1, 1.0f, NULL, CG_REDUCTION_NONE);
    ck_assert_msg(a && b && c && d, "%s", cg_last_error());
    ck_assert(a->ndim == 1 && a->shape[0] == 1 && b->ndim == 0 && c->ndim == 0 && d->ndim == 0);
    ck_assert(cg_data(a)[0] == cg_data(b)[0] && cg_data(d)[0] == 0.0f);
    cg_release_all(6, x, x0, a, b, c, d);
}
END_TEST

static Suite *loss_more_suite(void)
{
    Suite *s = suite_create("loss_more");
    TCase *tc = tcase_create("more");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_more_gradchecks);
    tcase_add_test(tc, test_more_vs_double);
    tcase_add_test(tc, test_more_threads);
    tcase_add_test(tc, test_more_bf16);
    tcase_add_test(tc, test_more_refused);
    tcase_add_test(tc, test_more_shapes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {loss_more_suite()};
    return cg_test_run(s, 1);
}
