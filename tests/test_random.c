/* Random tensors (core/random.h), the rest of torch.nn.init (nn/init.h),
 * the dropouts with a noise (autograd/ops.h: dropout1d/2d/3d, alpha and
 * feature alpha dropout, their modules), clip_grad_value and the other
 * norms of clip_grad_norm (optim/optim.h), parameters_to_vector and
 * vector_to_parameters (nn/param.h):
 *   - distributions from fixed seeds: means and variances within 6 sigma
 *     of a sample of their size, chi-square on multinomial counts;
 *   - the same bits for the same seed, and at 1 and 2 threads;
 *   - PyTorch's edge cases and refusals, each one line;
 *   - the dropouts' gradcheck through the saved noise (one seed per call).
 * The _torch forms are compared with python3-torch by the meson test
 * torch_init (tests/interop/check_torch_random.c); here their refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "cgrad.h"
#include "tests/testutil.h"

/* |x - mu| within 6 sigma of a mean of n draws of variance var */
static void assert_mean(double x, double mu, double var, int64_t n, const char *what)
{
    const double sigma = sqrt(var / (double)n);
    ck_assert_msg(fabs(x - mu) <= 6 * sigma + 1e-12, "%s: mean %g, expected %g (6 sigma %g)", what,
                  x, mu, 6 * sigma);
}

/* The mean and variance of t's n values (as doubles) */
static void moments(const cg_tensor *t, double *mean, double *var)
{
    double *v = cg_test_doubles(t), s = 0, ss = 0;
    const int64_t n = cg_numel(t);
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    *var = ss / (double)(n - 1);
    free(v);
}

/* A sample variance of n draws near var: its standard error is about
 * sqrt((mu4 - var^2) / n); kurt = mu4 / var^2 */
static void assert_var(double x, double var, double kurt, int64_t n, const char *what)
{
    const double se = var * sqrt((kurt - 1) / (double)n);
    ck_assert_msg(fabs(x - var) <= 6 * se, "%s: variance %g, expected %g (6 sigma %g)", what, x,
                  var, 6 * se);
}

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || !cg_same_shape(a, b) || a->dtype != b->dtype)
        return false;
    cg_tensor *x = cg_k_contiguous(a), *y = cg_k_contiguous(b);
    const bool eq =
        !memcmp(cg_data_ptr(x), cg_data_ptr(y), (size_t)cg_numel(x) * cg_dtype_size(x->dtype));
    cg_release_all(2, x, y);
    return eq;
}

/* ---------------------------------------------------------- bernoulli */
START_TEST(test_bernoulli)
{
    enum { N = 200000 };
    cg_rng r = cg_rng_new(1);
    cg_tensor *p = cg_full(CG_SHAPE(N), 0.3f);
    cg_tensor *b = cg_bernoulli(&r, p);
    ck_assert_uint_eq(r.counter, N);
    double m, v;
    moments(b, &m, &v);
    assert_mean(m, 0.3, 0.21, N, "bernoulli(0.3)");
    float *x = cg_test_values(b);
    for (int i = 0; i < N; i++)
        ck_assert(x[i] == 0.0f || x[i] == 1.0f);
    free(x);
    /* p 0 and 1 exactly: never and always; bfloat16 p gives bfloat16 */
    cg_tensor *edge = cg_from_data(CG_SHAPE(2, 3), (const float[]){0, 1, 0, 1, 0, 1});
    cg_tensor *eb = cg_k_to(edge, CG_BF16), *y = cg_bernoulli(&r, eb);
    ck_assert_int_eq(y->dtype, CG_BF16);
    ck_assert(same_bits(y, eb));
    /* the same seed and counter: the same bits; a transposed p: its values */
    cg_rng r2 = cg_rng_new(1);
    cg_tensor *b2 = cg_bernoulli(&r2, p);
    ck_assert(same_bits(b, b2));
    cg_tensor *pt = cg_test_randn_layout(&r, CG_SHAPE(30, 40), 0);
    cg_tensor *pu = cg_k_clamp(pt, 0.0f, 1.0f), *put = cg_view_transpose(pu, 0, 1);
    cg_tensor *bt = cg_bernoulli(&r, put);
    ck_assert_ptr_nonnull(bt);
    ck_assert_int_eq(bt->shape[0], 40);
    cg_release_all(10, p, b, edge, eb, y, b2, pt, pu, put, bt);
}
END_TEST

START_TEST(test_bernoulli_)
{
    enum { N = 100000 };
    cg_rng r = cg_rng_new(2);
    cg_tensor *t = cg_empty(CG_SHAPE(N));
    ck_assert(cg_bernoulli_(t, &r, 0.625));
    double m, v;
    moments(t, &m, &v);
    assert_mean(m, 0.625, 0.625 * 0.375, N, "bernoulli_(0.625)");
    /* any dtype, any strides: an int64 tensor and a transposed view */
    cg_tensor *ti = cg_zeros_dtype(CG_I64, CG_SHAPE(50, 40));
    cg_tensor *tv = cg_view_transpose(ti, 0, 1);
    ck_assert(cg_bernoulli_(tv, &r, 1.0));
    for (int i = 0; i < 2000; i++)
        ck_assert_int_eq(cg_data_i64(ti)[i], 1);
    ck_assert(cg_bernoulli_(tv, &r, 0.0));
    for (int i = 0; i < 2000; i++)
        ck_assert_int_eq(cg_data_i64(ti)[i], 0);
    ck_assert_uint_gt(cg_version(ti), 0);
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_(t, &r, 1.5) ? t : NULL,
                           "bernoulli_: p must be in [0, 1], got 1.5");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_(t, &r, NAN) ? t : NULL, "bernoulli_: p must be in [0, 1]");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_(t, NULL, 0.5) ? t : NULL, "bernoulli_: NULL generator");
    cg_tensor *z1 = cg_zeros(CG_SHAPE(1)), *bc = cg_view_expand(z1, CG_SHAPE(4));
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_(bc, &r, 0.5) ? bc : NULL, "bernoulli_");
    cg_release_all(5, t, ti, tv, z1, bc);
}
END_TEST

START_TEST(test_bernoulli_refusals)
{
    cg_rng r = cg_rng_new(3);
    cg_mt19937 g;
    cg_mt19937_seed(&g, 3);
    cg_tensor *bad = cg_from_data(CG_SHAPE(3), (const float[]){0.5f, 1.5f, 0});
    cg_tensor *nan = cg_from_data(CG_SHAPE(2), (const float[]){0.5f, NAN});
    cg_tensor *ids = cg_test_ids(3, (const int64_t[]){0, 1, 0});
    CG_ASSERT_REFUSED_LINE(cg_bernoulli(&r, bad),
                           "bernoulli: p must be in [0, 1], element 1 is 1.5");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli(&r, nan), "element 1 is nan");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli(&r, ids), "bernoulli: the input is int64");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli(NULL, nan), "bernoulli: NULL generator");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli(&r, NULL), "bernoulli");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_torch(&g, bad), "p must be in [0, 1]");
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_torch(NULL, bad), "NULL generator");
    cg_tensor *z32 = cg_zeros(CG_SHAPE(3, 2)), *tt = cg_view_transpose(z32, 0, 1);
    CG_ASSERT_REFUSED_LINE(cg_bernoulli_torch_(tt, &g, 0.5) ? tt : NULL, "must be contiguous");
    ck_assert_uint_eq(r.counter, 0); /* nothing drawn by a refusal */
    cg_release_all(4, bad, nan, z32, tt);
}
END_TEST

/* ------------------------------------------------ rand_like, randn_like */
START_TEST(test_like)
{
    enum { N = 100000 };
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_empty(CG_SHAPE(100, 1000));
    cg_tensor *u = cg_rand_like(&r, x), *z = cg_randn_like(&r, x);
    ck_assert(cg_same_shape(u, x) && cg_same_shape(z, x));
    double m, v;
    moments(u, &m, &v);
    assert_mean(m, 0.5, 1.0 / 12, N, "rand_like");
    assert_var(v, 1.0 / 12, 1.8, N, "rand_like");
    moments(z, &m, &v);
    assert_mean(m, 0, 1, N, "randn_like");
    assert_var(v, 1, 3, N, "randn_like");
    float *a = cg_test_values(u);
    for (int i = 0; i < N; i++)
        ck_assert(a[i] >= 0.0f && a[i] < 1.0f);
    free(a);
    /* cg_rand's draws: the same bits from the same generator state */
    cg_rng r2 = cg_rng_new(4);
    cg_tensor *u2 = cg_rand(&r2, CG_SHAPE(100, 1000));
    ck_assert(same_bits(u, u2));
    cg_tensor *xb = cg_k_to(x, CG_BF16), *ub = cg_rand_like(&r, xb);
    ck_assert_int_eq(ub->dtype, CG_BF16);
    cg_tensor *ids = cg_test_ids(2, NULL);
    CG_ASSERT_REFUSED_LINE(cg_rand_like(&r, ids), "rand_like: x is int64, expected a float dtype");
    CG_ASSERT_REFUSED_LINE(cg_randn_like(NULL, x), "randn_like: NULL generator");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    CG_ASSERT_REFUSED_LINE(cg_rand_like_torch(&g, xb), "expected float32");
    cg_release_all(6, x, u, z, u2, xb, ub);
}
END_TEST

/* ------------------------------------------------------------- randint */
START_TEST(test_randint)
{
    enum { N = 120000, K = 12 };
    cg_rng r = cg_rng_new(5);
    cg_tensor *t = cg_randint(&r, -5, 7, CG_SHAPE(N));
    ck_assert_int_eq(t->dtype, CG_I64);
    int64_t count[K] = {0};
    for (int i = 0; i < N; i++) {
        const int64_t v = cg_data_i64(t)[i];
        ck_assert(v >= -5 && v < 7);
        count[v + 5]++;
    }
    double chi2 = 0; /* 11 degrees of freedom: P(chi2 > 50) ~ 5e-7 */
    for (int k = 0; k < K; k++)
        chi2 += pow((double)count[k] - N / K, 2) / (N / K);
    ck_assert_msg(chi2 < 50, "randint: chi-square %g over 12 values", chi2);
    /* the widest ranges */
    cg_tensor *w = cg_randint(&r, INT64_MIN, INT64_MAX, CG_SHAPE(1000));
    cg_tensor *w2 = cg_randint(&r, INT64_MAX - 3, INT64_MAX, CG_SHAPE(1000));
    int neg = 0;
    for (int i = 0; i < 1000; i++) {
        neg += cg_data_i64(w)[i] < 0;
        ck_assert(cg_data_i64(w2)[i] >= INT64_MAX - 3 && cg_data_i64(w2)[i] < INT64_MAX);
    }
    ck_assert(neg > 400 && neg < 600);
    /* randint_like: x's dtype */
    cg_tensor *x32 = cg_zeros_dtype(CG_I32, CG_SHAPE(3, 4)), *xf = cg_zeros(CG_SHAPE(50));
    cg_tensor *l32 = cg_randint_like(&r, x32, -3, 3), *lf = cg_randint_like(&r, xf, 0, 1 << 24);
    ck_assert_int_eq(l32->dtype, CG_I32);
    ck_assert_int_eq(lf->dtype, CG_F32);
    for (int i = 0; i < 12; i++)
        ck_assert(cg_data_i32(l32)[i] >= -3 && cg_data_i32(l32)[i] < 3);
    for (int i = 0; i < 50; i++)
        ck_assert(cg_data(lf)[i] == floorf(cg_data(lf)[i]) && cg_data(lf)[i] < 16777216.0f);
    CG_ASSERT_REFUSED_LINE(cg_randint(&r, 3, 3, CG_SHAPE(2)),
                           "randint: random_ expects 'from' to be less than 'to', but got from=3 "
                           ">= to=3");
    CG_ASSERT_REFUSED_LINE(cg_randint(NULL, 0, 3, CG_SHAPE(2)), "randint: NULL generator");
    CG_ASSERT_REFUSED_LINE(cg_randint(&r, 0, 3, CG_SHAPE(-1)), "");
    CG_ASSERT_REFUSED_LINE(cg_randint_like(&r, xf, 0, (1 << 24) + 2), "does not fit float32");
    CG_ASSERT_REFUSED_LINE(cg_randint_like(&r, x32, 0, INT64_C(1) << 32), "does not fit int32");
    cg_tensor *bf = cg_k_to(xf, CG_BF16);
    CG_ASSERT_REFUSED_LINE(cg_randint_like(&r, bf, 0, 2), "expected int64, int32 or float32");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    CG_ASSERT_REFUSED_LINE(cg_randint_torch(&g, 5, -5, CG_SHAPE(2)), "from=5 >= to=-5");
    cg_release_all(8, t, w, w2, x32, xf, l32, lf, bf);
}
END_TEST

/* -------------------------------------------------------------- normal */
START_TEST(test_normal)
{
    enum { N = 60000 };
    cg_rng r = cg_rng_new(6);
    /* mean [2, 1] and std [N]: [2, N], row i ~ N(mean[i], std) */
    cg_tensor *mean = cg_from_data(CG_SHAPE(2, 1), (const float[]){-3.0f, 5.0f});
    cg_tensor *std = cg_full(CG_SHAPE(N), 2.0f);
    cg_tensor *y = cg_normal(&r, mean, std);
    ck_assert_int_eq(y->ndim, 2);
    ck_assert_int_eq(y->shape[0], 2);
    ck_assert_int_eq(y->shape[1], N);
    for (int row = 0; row < 2; row++) {
        cg_tensor *s = cg_view_select(y, 0, row);
        double m, v;
        moments(s, &m, &v);
        assert_mean(m, row ? 5.0 : -3.0, 4, N, "normal row");
        assert_var(v, 4, 3, N, "normal row");
        cg_release(s);
    }
    /* std 0: the mean itself; the draws are z * std + mean of cg_randn's z */
    cg_tensor *z0 = cg_zeros(CG_SHAPE(3)),
              *m3 = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3});
    cg_tensor *y0 = cg_normal(&r, m3, z0);
    ck_assert(same_bits(y0, m3));
    cg_rng a = cg_rng_new(9), b = cg_rng_new(9);
    cg_tensor *z = cg_randn(&a, CG_SHAPE(2, N)), *yb = cg_normal(&b, mean, std);
    float *zv = cg_test_values(z), *yv = cg_test_values(yb);
    for (int i = 0; i < 2 * N; i++)
        ck_assert(yv[i] == zv[i] * 2.0f + (i < N ? -3.0f : 5.0f));
    free(zv), free(yv);
    cg_tensor *neg = cg_from_data(CG_SHAPE(2), (const float[]){1, -1});
    cg_tensor *nan = cg_from_data(CG_SHAPE(2), (const float[]){1, NAN});
    cg_tensor *m2 = cg_view_slice(m3, 0, 0, 2, 1);
    CG_ASSERT_REFUSED_LINE(cg_normal(&r, m2, neg), "normal: normal expects all elements of std >= "
                                                   "0.0 (element 1 is -1)");
    CG_ASSERT_REFUSED_LINE(cg_normal(&r, m2, nan), "element 1 is nan");
    CG_ASSERT_REFUSED_LINE(cg_normal(&r, m3, std), "cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_normal(&r, cg_test_ids(3, NULL), z0), "expected float32");
    CG_ASSERT_REFUSED_LINE(cg_normal(&r, NULL, z0), "normal");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    CG_ASSERT_REFUSED_LINE(cg_normal_torch(&g, m2, neg), "std >= 0.0");
    cg_release_all(11, mean, std, y, z0, m3, m2, y0, z, yb, neg, nan);
}
END_TEST

/* ------------------------------------------------------------- poisson */
START_TEST(test_poisson)
{
    enum { N = 20000 };
    static const float rates[] = {0.0f, 0.05f, 0.5f, 3.0f, 9.99f, 10.0f, 25.0f, 1000.0f};
    enum { R = sizeof rates / sizeof *rates };
    cg_rng r = cg_rng_new(7);
    cg_tensor *lam = cg_empty(CG_SHAPE(R, N));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < N; j++)
            cg_data(lam)[i * N + j] = rates[i];
    cg_tensor *k = cg_poisson(&r, lam);
    ck_assert_uint_eq(r.counter, R * N);
    for (int i = 0; i < R; i++) {
        cg_tensor *row = cg_view_select(k, 0, i);
        const float *v = cg_data(k) + i * N;
        for (int j = 0; j < N; j++)
            ck_assert(v[j] >= 0 && v[j] == floorf(v[j]));
        double m, var;
        moments(row, &m, &var);
        if (rates[i] == 0) {
            ck_assert(m == 0 && var == 0);
        } else {
            assert_mean(m, rates[i], rates[i], N, "poisson mean");
            assert_var(var, rates[i], 3 + 1 / rates[i], N, "poisson variance");
        }
        cg_release(row);
    }
    /* any strides: a transposed view draws as its row-major copy */
    cg_tensor *t = cg_view_transpose(lam, 0, 1), *tc = cg_k_contiguous(t);
    cg_rng a = cg_rng_new(8), b = cg_rng_new(8);
    cg_tensor *ka = cg_poisson(&a, t), *kb = cg_poisson(&b, tc);
    ck_assert(same_bits(ka, kb));
    cg_tensor *bad = cg_from_data(CG_SHAPE(3), (const float[]){1, -0.5f, 2});
    cg_tensor *inf = cg_from_data(CG_SHAPE(2), (const float[]){1, INFINITY});
    cg_tensor *nan = cg_from_data(CG_SHAPE(2), (const float[]){NAN, 1});
    CG_ASSERT_REFUSED_LINE(cg_poisson(&r, bad), "poisson: invalid Poisson rate -0.5 at element 1");
    CG_ASSERT_REFUSED_LINE(cg_poisson(&r, inf), "invalid Poisson rate inf");
    CG_ASSERT_REFUSED_LINE(cg_poisson(&r, nan), "invalid Poisson rate nan at element 0");
    CG_ASSERT_REFUSED_LINE(cg_poisson(NULL, bad), "poisson: NULL generator");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    CG_ASSERT_REFUSED_LINE(cg_poisson_torch(&g, inf), "invalid Poisson rate inf");
    cg_release_all(9, lam, k, t, tc, ka, kb, bad, inf, nan);
}
END_TEST

/* --------------------------------------------------------- multinomial */
/* The chi-square of counts[0, n) against n_total * w / sum(w) over the
 * categories of nonzero weight (those of zero weight must have none) */
static double chi_square(const int64_t *counts, const float *w, int n, int64_t total)
{
    double sw = 0, chi2 = 0;
    for (int c = 0; c < n; c++)
        sw += w[c];
    for (int c = 0; c < n; c++) {
        if (w[c] == 0) {
            ck_assert_msg(counts[c] == 0, "category %d of weight 0 drawn %lld times", c,
                          (long long)counts[c]);
            continue;
        }
        const double e = (double)total * w[c] / sw;
        chi2 += pow((double)counts[c] - e, 2) / e;
    }
    return chi2;
}

START_TEST(test_multinomial_replacement)
{
    enum { N = 100000 };
    static const float w[6] = {0.1f, 0.0f, 0.4f, 0.2f, 0.0f, 0.3f}; /* need not sum to 1 */
    cg_rng r = cg_rng_new(10);
    cg_tensor *p = cg_from_data(CG_SHAPE(6), w);
    cg_tensor *s = cg_multinomial_tensor(&r, p, N, true);
    ck_assert_int_eq(s->ndim, 1);
    ck_assert_int_eq(s->shape[0], N);
    ck_assert_uint_eq(r.counter, N);
    int64_t counts[6] = {0};
    for (int i = 0; i < N; i++)
        counts[cg_data_i64(s)[i]]++;
    const double chi2 = chi_square(counts, w, 6, N); /* 3 degrees of freedom */
    ck_assert_msg(chi2 < 40, "multinomial: chi-square %g", chi2);
    /* rows: [B, n] -> [B, num_samples], each row its own weights */
    cg_tensor *rows = cg_from_data(CG_SHAPE(2, 3), (const float[]){0, 0, 5, 1, 0, 0});
    cg_tensor *t = cg_multinomial_tensor(&r, rows, 7, true);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 7);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(cg_data_i64(t)[i], 2);
        ck_assert_int_eq(cg_data_i64(t)[7 + i], 0);
    }
    /* a transposed probs: its values */
    cg_tensor *p32 = cg_from_data(CG_SHAPE(3, 2), (const float[]){0, 1, 0, 0, 5, 0});
    cg_tensor *pt = cg_view_transpose(p32, 0, 1);
    cg_rng a = cg_rng_new(3), b = cg_rng_new(3);
    cg_tensor *ta = cg_multinomial_tensor(&a, pt, 7, true),
              *tb = cg_multinomial_tensor(&b, rows, 7, true);
    ck_assert(same_bits(ta, tb));
    cg_release_all(8, p, s, rows, t, p32, pt, ta, tb);
}
END_TEST

START_TEST(test_multinomial_without)
{
    enum { B = 20000, n = 6 };
    static const float w[n] = {0.1f, 0.0f, 0.4f, 0.2f, 0.0f, 0.3f};
    cg_rng r = cg_rng_new(11);
    cg_tensor *w1 = cg_from_data(CG_SHAPE(1, n), w), *p = cg_view_expand(w1, CG_SHAPE(B, n));
    cg_tensor *s = cg_multinomial_tensor(&r, p, 4, false);
    ck_assert_uint_eq(r.counter, B * n);
    int64_t first[n] = {0};
    for (int b = 0; b < B; b++) {
        const int64_t *row = cg_data_i64(s) + b * 4;
        for (int i = 0; i < 4; i++) {
            ck_assert(row[i] != 1 && row[i] != 4); /* weight 0: never */
            for (int j = 0; j < i; j++)
                ck_assert(row[i] != row[j]); /* distinct */
        }
        first[row[0]]++;
    }
    const double chi2 = chi_square(first, w, n, B); /* the first draw ~ w */
    ck_assert_msg(chi2 < 40, "multinomial without replacement: chi-square %g", chi2);
    /* as many samples as categories: a permutation */
    cg_tensor *ones = cg_ones(CG_SHAPE(9)), *all = cg_multinomial_tensor(&r, ones, 9, false);
    int seen = 0;
    for (int i = 0; i < 9; i++)
        seen |= 1 << cg_data_i64(all)[i];
    ck_assert_int_eq(seen, 511);
    cg_release_all(5, w1, p, s, ones, all);
}
END_TEST

START_TEST(test_multinomial_refusals)
{
    cg_rng r = cg_rng_new(12);
    cg_tensor *ok = cg_from_data(CG_SHAPE(3), (const float[]){1, 0, 2});
    cg_tensor *neg = cg_from_data(CG_SHAPE(3), (const float[]){1, -1, 2});
    cg_tensor *inf = cg_from_data(CG_SHAPE(3), (const float[]){1, INFINITY, 2});
    cg_tensor *nan = cg_from_data(CG_SHAPE(3), (const float[]){NAN, 1, 2});
    cg_tensor *zero = cg_from_data(CG_SHAPE(2, 2), (const float[]){1, 1, 0, 0});
    cg_tensor *d3 = cg_ones(CG_SHAPE(2, 2, 2)), *d0 = cg_scalar(1),
              *none = cg_zeros(CG_SHAPE(2, 0));
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, d3, 1, true),
                           "multinomial: prob_dist must be 1 or 2 dim (got shape [2, 2, 2])");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, d0, 1, true), "prob_dist must be 1 or 2 dim");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, ok, 0, true),
                           "cannot sample n_sample <= 0 samples (got 0)");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, ok, 4, false),
                           "cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement (4 > 3)");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, ok, 3, false),
                           "cannot draw 3 samples without replacement from row 0, which has 2 "
                           "categories of nonzero probability");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, neg, 1, true),
                           "(encountering probability entry < 0): row 0, category 1 is -1");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, inf, 1, false),
                           "(encountering probability entry = infinity or NaN)");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, nan, 1, true), "infinity or NaN");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, zero, 1, true),
                           "invalid multinomial distribution (sum of probabilities <= 0) in row 1");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, none, 1, true), "no categories");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, none, 1, false), "size(-1)");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(NULL, ok, 1, true), "NULL generator");
    cg_tensor *big = cg_zeros(CG_SHAPE((1 << 24) + 1));
    CG_ASSERT_REFUSED_LINE(cg_multinomial_tensor(&r, big, 1, true),
                           "number of categories cannot exceed 2^24");
    ck_assert_uint_eq(r.counter, 0);
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    CG_ASSERT_REFUSED_LINE(cg_multinomial_torch(&g, ok, 3, false), "nonzero probability");
    CG_ASSERT_REFUSED_LINE(cg_multinomial_torch(&g, zero, 2, true), "sum of probabilities <= 0");
    /* no rows: an empty result */
    cg_tensor *e0 = cg_zeros(CG_SHAPE(0, 3)), *e = cg_multinomial_tensor(&r, e0, 2, true);
    ck_assert_int_eq(e->shape[0], 0);
    ck_assert_int_eq(e->shape[1], 2);
    cg_release_all(11, ok, neg, inf, nan, zero, d3, d0, none, big, e0, e);
}
END_TEST

/* ------------------------------------------------------------ randperm */
START_TEST(test_randperm_tensor)
{
    cg_rng a = cg_rng_new(13), b = cg_rng_new(13);
    int64_t *p = cg_randperm(&a, 1000);
    cg_tensor *t = cg_randperm_tensor(&b, 1000);
    ck_assert_int_eq(t->dtype, CG_I64);
    ck_assert(!memcmp(p, cg_data_i64(t), 1000 * sizeof *p));
    ck_assert_uint_eq(a.counter, b.counter);
    free(p);
    cg_mt19937 g;
    cg_mt19937_seed(&g, 13);
    cg_tensor *tt = cg_randperm_torch(&g, 1000);
    char seen[1000] = {0};
    for (int i = 0; i < 1000; i++)
        seen[cg_data_i64(tt)[i]]++;
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(seen[i], 1);
    cg_tensor *z = cg_randperm_tensor(&b, 0);
    ck_assert_int_eq(z->shape[0], 0);
    CG_ASSERT_REFUSED_LINE(cg_randperm_tensor(&b, -1), "randperm: n must be >= 0");
    CG_ASSERT_REFUSED_LINE(cg_randperm_torch(&g, -1), "n must be >= 0");
    CG_ASSERT_REFUSED_LINE(cg_randperm_torch(NULL, 3), "NULL generator");
    cg_release_all(3, t, tt, z);
}
END_TEST

/* ----------------------------------------------------- thread counts */
/* Every random tensor of the generator at nt threads, big enough to run
 * in parallel */
static void random_at(int nt, float **got)
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(14);
    enum { N = 1 << 17 };
    cg_tensor *p = cg_rand(&r, CG_SHAPE(N)), *lam = cg_muls(p, 30.0f);
    cg_tensor *probs = cg_rand(&r, CG_SHAPE(64, 2048));
    cg_tensor *t[7] = {cg_bernoulli(&r, p),
                       cg_randint_like(&r, p, -1000, 1000),
                       cg_normal(&r, p, lam),
                       cg_poisson(&r, lam),
                       cg_multinomial_tensor(&r, probs, 300, true),
                       cg_multinomial_tensor(&r, probs, 300, false),
                       cg_empty(CG_SHAPE(N))};
    ck_assert(cg_bernoulli_(t[6], &r, 0.3));
    for (int i = 0; i < 7; i++) {
        cg_tensor *f = cg_k_to(t[i], CG_F32);
        got[i] = cg_test_values(f);
        cg_release_all(2, f, t[i]);
    }
    cg_release_all(3, p, lam, probs);
    cg_set_num_threads(0);
}

START_TEST(test_threads_identical)
{
    const int64_t n[7] = {1 << 17, 1 << 17, 1 << 17, 1 << 17, 64 * 300, 64 * 300, 1 << 17};
    cg_test_same_bits_1_2_threads(random_at, 7, n);
}
END_TEST

Suite *random_tensor_suite(void);
Suite *random_init_suite(void);
Suite *random_nn_suite(void);

Suite *random_tensor_suite(void)
{
    Suite *s = suite_create("random");
    TCase *tc = tcase_create("tensors");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_bernoulli);
    tcase_add_test(tc, test_bernoulli_);
    tcase_add_test(tc, test_bernoulli_refusals);
    tcase_add_test(tc, test_like);
    tcase_add_test(tc, test_randint);
    tcase_add_test(tc, test_normal);
    tcase_add_test(tc, test_poisson);
    tcase_add_test(tc, test_multinomial_replacement);
    tcase_add_test(tc, test_multinomial_without);
    tcase_add_test(tc, test_multinomial_refusals);
    tcase_add_test(tc, test_randperm_tensor);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

/* ---------------------------------------------------------------- init */
START_TEST(test_calculate_gain)
{
    static const char *const one[] = {"linear",           "conv1d",           "conv2d",
                                      "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                      "conv_transpose3d", "sigmoid"};
    for (int i = 0; i < 8; i++)
        ck_assert(cg_init_calculate_gain(one[i], CG_GAIN_NO_PARAM) == 1.0);
    ck_assert(cg_init_calculate_gain("tanh", 0) == 5.0 / 3);
    ck_assert(cg_init_calculate_gain("relu", 7) == sqrt(2.0)); /* param unread */
    ck_assert(cg_init_calculate_gain("selu", CG_GAIN_NO_PARAM) == 0.75);
    ck_assert(cg_init_calculate_gain("leaky_relu", CG_GAIN_NO_PARAM) ==
              sqrt(2.0 / (1 + 0.01 * 0.01)));
    ck_assert(cg_init_calculate_gain("leaky_relu", 0) == sqrt(2.0));
    ck_assert(cg_init_calculate_gain("leaky_relu", 0.2) == sqrt(2.0 / 1.04));
    CG_ASSERT_REFUSED(cg_init_calculate_gain("gelu", 0) == -1,
                      "calculate_gain: Unsupported nonlinearity gelu");
    CG_ASSERT_REFUSED(cg_init_calculate_gain("leaky_relu", INFINITY) == -1,
                      "negative_slope inf not a valid number");
    CG_ASSERT_REFUSED(cg_init_calculate_gain(NULL, 0) == -1, "nonlinearity is NULL");
}
END_TEST

START_TEST(test_fans)
{
    int64_t fi = -1, fo = -1;
    cg_tensor *w = cg_empty(CG_SHAPE(8, 3, 5, 2)), *l = cg_empty(CG_SHAPE(4, 7));
    ck_assert(cg_init_calculate_fans(w, &fi, &fo));
    ck_assert_int_eq(fi, 30);
    ck_assert_int_eq(fo, 80);
    ck_assert(cg_init_calculate_fans(l, &fi, NULL));
    ck_assert_int_eq(fi, 7);
    cg_tensor *v = cg_empty(CG_SHAPE(5)), *z = cg_empty(CG_SHAPE(0, 3));
    CG_ASSERT_REFUSED(!cg_init_calculate_fans(v, &fi, &fo),
                      "Fan in and fan out can not be computed for tensor with fewer than 2 "
                      "dimensions (got 1)");
    ck_assert(cg_init_calculate_fans(z, &fi, &fo) && fi == 3 && fo == 0);
    cg_release_all(4, w, l, v, z);
}
END_TEST

START_TEST(test_kaiming)
{
    cg_rng r = cg_rng_new(20);
    cg_tensor *w = cg_empty(CG_SHAPE(256, 128, 3)); /* fan_in 384, fan_out 768 */
    const int64_t n = 256 * 128 * 3;
    double m, v;
    ck_assert(cg_init_kaiming_normal_(w, &r, 0, NULL, "relu"));
    moments(w, &m, &v);
    assert_mean(m, 0, 2.0 / 384, n, "kaiming_normal fan_in relu");
    assert_var(v, 2.0 / 384, 3, n, "kaiming_normal fan_in relu");
    ck_assert(cg_init_kaiming_normal_(w, &r, 0.3, "Fan_Out", NULL)); /* leaky_relu, a = 0.3 */
    moments(w, &m, &v);
    assert_var(v, 2.0 / 1.09 / 768, 3, n, "kaiming_normal fan_out leaky_relu");
    ck_assert(cg_init_kaiming_uniform_ex_(w, &r, 0, "fan_out", "tanh"));
    const float b = (float)(sqrt(3.0) * (5.0 / 3) / sqrt(768.0));
    float *x = cg_test_values(w), lo = 0, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    free(x);
    ck_assert(lo >= -b && hi < b && hi > 0.99f * b && lo < -0.99f * b);
    /* the fan_in leaky_relu form: cg_init_kaiming_uniform_'s bits */
    cg_rng a = cg_rng_new(21);
    cg_tensor *w2 = cg_empty(CG_SHAPE(7, 5));
    ck_assert(cg_init_kaiming_uniform_ex_(w, &a, sqrt(5.0), "fan_in", "leaky_relu"));
    cg_tensor *w3 = cg_empty(CG_SHAPE(256, 128, 3));
    cg_rng c2 = cg_rng_new(21);
    ck_assert(cg_init_kaiming_uniform_(w3, &c2, sqrt(5.0)));
    ck_assert(same_bits(w, w3));
    /* a zero size: left as it is, before any check (PyTorch's no-op) */
    cg_tensor *e = cg_empty(CG_SHAPE(0)), *v1 = cg_empty(CG_SHAPE(4));
    ck_assert(cg_init_kaiming_normal_(e, &r, 0, "bogus", "bogus"));
    CG_ASSERT_REFUSED(!cg_init_kaiming_normal_(v1, &r, 0, NULL, NULL), "fewer than 2 dimensions");
    CG_ASSERT_REFUSED(!cg_init_kaiming_normal_(w2, &r, 0, "fan_avg", NULL),
                      "Mode fan_avg not supported, please use one of ['fan_in', 'fan_out']");
    CG_ASSERT_REFUSED(!cg_init_kaiming_uniform_ex_(w2, &r, 0, NULL, "swish"),
                      "Unsupported nonlinearity swish");
    CG_ASSERT_REFUSED(!cg_init_kaiming_normal_(w2, &r, NAN, NULL, NULL),
                      "a (the negative slope) is NaN");
    CG_ASSERT_REFUSED(!cg_init_kaiming_normal_(w2, NULL, 0, NULL, NULL), "rng is NULL");
    /* the skip generator: checked, not drawn */
    cg_tensor *k = cg_zeros(CG_SHAPE(3, 4));
    ck_assert(cg_init_kaiming_normal_(k, cg_init_skip(), 0, NULL, NULL));
    ck_assert(cg_init_kaiming_uniform_ex_(k, cg_init_skip(), 0, NULL, NULL));
    ck_assert_float_eq(cg_data(k)[5], 0.0f);
    CG_ASSERT_REFUSED(!cg_init_kaiming_normal_(k, cg_init_skip(), 0, "x", NULL), "Mode x");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    cg_tensor *kt = cg_view_transpose(k, 0, 1);
    CG_ASSERT_REFUSED(!cg_init_kaiming_uniform_torch_(kt, &g, 0, NULL, NULL), "contiguous");
    cg_release_all(7, w, w2, w3, e, v1, k, kt);
}
END_TEST

/* phi and Phi of the standard normal */
static double phi(double x) { return exp(-x * x / 2) / sqrt(2 * M_PI); }
static double Phi(double x) { return (1 + erf(x / sqrt(2))) / 2; }

START_TEST(test_trunc_normal)
{
    enum { N = 200000 };
    static const double cases[][4] = {
        {0, 1, -2, 2}, {0.5, 2, -1, 3}, {0, 1, -0.1, 0.2}, {-1, 0.5, -1, INFINITY}};
    cg_rng r = cg_rng_new(22);
    cg_tensor *t = cg_empty(CG_SHAPE(N));
    for (int c = 0; c < 4; c++) {
        const double mu = cases[c][0], sd = cases[c][1], a = cases[c][2], b = cases[c][3];
        ck_assert(cg_init_trunc_normal_(t, &r, mu, sd, a, b));
        float *x = cg_test_values(t);
        for (int i = 0; i < N; i++)
            ck_assert_msg(x[i] >= (float)a && x[i] <= (float)b, "case %d: %g outside", c,
                          (double)x[i]);
        free(x);
        /* the truncated normal's mean and variance */
        const double al = (a - mu) / sd, be = (b - mu) / sd, z = Phi(be) - Phi(al);
        const double pb = isinf(be) ? 0 : phi(be), bpb = isinf(be) ? 0 : be * phi(be);
        const double mean = mu + sd * (phi(al) - pb) / z;
        const double var = sd * sd * (1 + (al * phi(al) - bpb) / z - pow((phi(al) - pb) / z, 2));
        double m, v;
        moments(t, &m, &v);
        assert_mean(m, mean, var, N, "trunc_normal");
        assert_var(v, var, 4, N, "trunc_normal");
    }
    /* any strides: a transposed view */
    cg_tensor *w = cg_zeros(CG_SHAPE(20, 30)), *wt = cg_view_transpose(w, 0, 1);
    ck_assert(cg_init_trunc_normal_(wt, &r, 0, 1, -2, 2));
    ck_assert(cg_data(w)[7] != 0.0f);
    ck_assert(cg_init_trunc_normal_(w, cg_init_skip(), 0, 1, -2, 2));
    CG_ASSERT_REFUSED(!cg_init_trunc_normal_(w, &r, 0, 0, -2, 2),
                      "need a finite mean, a finite std > 0 and a <= b");
    CG_ASSERT_REFUSED(!cg_init_trunc_normal_(w, &r, 0, 1, 2, -2),
                      "a <= b (got mean 0, std 1, a 2, b -2)");
    CG_ASSERT_REFUSED(!cg_init_trunc_normal_(w, &r, NAN, 1, -2, 2), "finite mean");
    cg_tensor *i = cg_zeros_dtype(CG_I64, CG_SHAPE(3));
    CG_ASSERT_REFUSED(!cg_init_trunc_normal_(i, &r, 0, 1, -2, 2), "expected float32");
    cg_release_all(4, t, w, wt, i);
}
END_TEST

START_TEST(test_sparse)
{
    cg_rng r = cg_rng_new(23);
    cg_tensor *t = cg_empty(CG_SHAPE(1000, 40));
    ck_assert(cg_init_sparse_(t, &r, 0.3, 0.05));
    double m, v;
    moments(t, &m, &v); /* 30% zeros, the rest N(0, 0.05^2) */
    assert_var(v, 0.7 * 0.0025, 3 / 0.7, 40000, "sparse");
    for (int c = 0; c < 40; c++) {
        int zeros = 0;
        for (int i = 0; i < 1000; i++)
            zeros += cg_data(t)[i * 40 + c] == 0.0f;
        ck_assert_int_eq(zeros, 300); /* ceil(0.3 * 1000), the normals never 0 */
    }
    cg_tensor *s = cg_empty(CG_SHAPE(7, 3));
    ck_assert(cg_init_sparse_(s, &r, 0.1, 1.0)); /* ceil(0.7) = 1 a column */
    for (int c = 0; c < 3; c++) {
        int zeros = 0;
        for (int i = 0; i < 7; i++)
            zeros += cg_data(s)[i * 3 + c] == 0.0f;
        ck_assert_int_eq(zeros, 1);
    }
    ck_assert(cg_init_sparse_(s, &r, 1.0, 1.0));
    for (int i = 0; i < 21; i++)
        ck_assert_float_eq(cg_data(s)[i], 0.0f);
    cg_tensor *d3 = cg_empty(CG_SHAPE(2, 2, 2));
    CG_ASSERT_REFUSED(!cg_init_sparse_(d3, &r, 0.5, 0.01),
                      "init sparse: Only tensors with 2 dimensions are supported (got 3)");
    CG_ASSERT_REFUSED(!cg_init_sparse_(s, &r, -0.5, 0.01), "need sparsity in [0, 1]");
    CG_ASSERT_REFUSED(!cg_init_sparse_(s, &r, 0.5, -1), "finite std >= 0");
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    CG_ASSERT_REFUSED(!cg_init_sparse_torch_(d3, &g, 0.5, 0.01), "2 dimensions");
    cg_release_all(3, t, s, d3);
}
END_TEST

START_TEST(test_eye_dirac_constant)
{
    cg_tensor *e = cg_full(CG_SHAPE(3, 5), 7.0f), *et = cg_view_transpose(e, 0, 1);
    ck_assert(cg_init_eye_(et)); /* [5, 3]: ones at [i, i], i < 3 */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            ck_assert_float_eq(cg_data(e)[i * 5 + j], i == j ? 1.0f : 0.0f);
    cg_tensor *ei = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 2));
    ck_assert(cg_init_eye_(ei));
    ck_assert(cg_data_i64(ei)[0] == 1 && cg_data_i64(ei)[1] == 0 && cg_data_i64(ei)[3] == 1);
    cg_tensor *d = cg_full(CG_SHAPE(6, 2, 3, 3), 5.0f); /* groups 2: 3 out channels each */
    ck_assert(cg_init_dirac_(d, 2));
    float sum = 0;
    for (int i = 0; i < 108; i++)
        sum += cg_data(d)[i];
    ck_assert_float_eq(sum, 4.0f); /* min(3, 2) per group */
    const int64_t at[4][4] = {{0, 0, 1, 1}, {1, 1, 1, 1}, {3, 0, 1, 1}, {4, 1, 1, 1}};
    for (int k = 0; k < 4; k++)
        ck_assert_float_eq(cg_get(d, at[k]), 1.0f);
    cg_tensor *d3 = cg_empty(CG_SHAPE(2, 4, 4));
    ck_assert(cg_init_dirac_(d3, 1));
    ck_assert_float_eq(cg_get(d3, (const int64_t[]){1, 1, 2}), 1.0f);
    ck_assert_float_eq(cg_get(d3, (const int64_t[]){1, 2, 2}), 0.0f);
    CG_ASSERT_REFUSED(!cg_init_dirac_(e, 1),
                      "Only tensors with 3, 4, or 5 dimensions are supported");
    CG_ASSERT_REFUSED(!cg_init_dirac_(d, 4), "dim 0 must be divisible by groups (6 by 4)");
    CG_ASSERT_REFUSED(!cg_init_dirac_(d, 0), "divisible by groups");
    CG_ASSERT_REFUSED(!cg_init_eye_(d3), "eye_: Only tensors with 2 dimensions are supported");
    ck_assert(cg_init_constant_(d3, -2.5f));
    ck_assert_float_eq(cg_data(d3)[31], -2.5f);
    cg_release_all(5, e, et, ei, d, d3);
}
END_TEST

Suite *random_init_suite(void)
{
    Suite *s = suite_create("random_init");
    TCase *tc = tcase_create("init");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_calculate_gain);
    tcase_add_test(tc, test_fans);
    tcase_add_test(tc, test_kaiming);
    tcase_add_test(tc, test_trunc_normal);
    tcase_add_test(tc, test_sparse);
    tcase_add_test(tc, test_eye_dirac_constant);
    suite_add_tcase(s, tc);
    return s;
}

/* ------------------------------------------------------------ dropouts */
typedef cg_tensor *(*drop_fn)(cg_tensor *x, float p, cg_rng *rng, bool training);

/* Channel c of x (its run of `inner` elements, k-th of the noise) all
 * dropped (0) or all x / (1 - p); the fraction dropped near p */
START_TEST(test_channel_dropouts)
{
    static const struct {
        drop_fn f;
        int64_t shape[5];
        int nd, lead; /* the noise's leading dims */
    } cases[] = {{cg_dropout1d, {64, 50, 7}, 3, 2},       {cg_dropout1d, {500, 9}, 2, 1},
                 {cg_dropout2d, {40, 30, 3, 4}, 4, 2},    {cg_dropout2d, {40, 30, 6}, 3, 2},
                 {cg_dropout3d, {10, 60, 2, 3, 2}, 5, 2}, {cg_dropout3d, {400, 2, 2, 3}, 4, 1},
                 {cg_feature_dropout, {30, 40, 5}, 3, 2}};
    cg_rng r = cg_rng_new(30);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const float p = 0.3f, scale = (float)(1 / (1 - (double)p));
        cg_tensor *x = cg_rand(&r, cases[k].nd, cases[k].shape); /* never 0 in practice */
        cg_tensor *y = cases[k].f(x, p, &r, true);
        int64_t channels = 1;
        for (int d = 0; d < cases[k].lead; d++)
            channels *= cases[k].shape[d];
        const int64_t inner = cg_numel(x) / channels;
        int64_t dropped = 0;
        for (int64_t c = 0; c < channels; c++) {
            const float *xc = cg_data(x) + c * inner, *yc = cg_data(y) + c * inner;
            const bool drop = yc[0] == 0.0f;
            dropped += drop;
            for (int64_t i = 0; i < inner; i++)
                ck_assert_msg(yc[i] == (drop ? 0.0f : xc[i] * scale), "case %zu channel %lld", k,
                              (long long)c);
        }
        assert_mean((double)dropped / (double)channels, p, p * (1 - p), channels,
                    "channels dropped");
        cg_release_all(2, x, y);
    }
}
END_TEST

/* alpha dropout keeps a zero mean and unit variance of N(0, 1) inputs;
 * every element a x + alpha a p or the one dropped value */
START_TEST(test_alpha_dropouts)
{
    enum { N = 200000 };
    const double alpha = 1.7580993408473766;
    cg_rng r = cg_rng_new(31);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(100, 2000)),
              *x3 = cg_view_reshape(x, CG_SHAPE(1, 100, 2000));
    for (int feature = 0; feature < 2; feature++) {
        const float p = feature ? 0.375f : 0.2f;
        const double a = 1 / sqrt((alpha * alpha * p + 1) * (1 - (double)p));
        const float fa = (float)a, c = (float)(alpha * a * p), dv = c - (float)(alpha * a);
        cg_tensor *y =
            feature ? cg_feature_alpha_dropout(x3, p, &r, true) : cg_alpha_dropout(x, p, &r, true);
        double m, v;
        moments(y, &m, &v);
        if (!feature) { /* elementwise: the moments of the whole sample */
            assert_mean(m, 0, 1, N, "alpha_dropout mean");
            assert_var(v, 1, 4, N, "alpha_dropout variance");
        }
        int64_t dropped = 0;
        for (int64_t i = 0; i < N; i++) {
            const float yi = cg_data(y)[i], kept = cg_data(x)[i] * fa + c;
            ck_assert_msg(yi == kept || yi == dv, "element %lld: %.9g (kept %.9g, dropped %.9g)",
                          (long long)i, (double)yi, (double)kept, (double)dv);
            dropped += yi == dv && yi != kept;
        }
        if (feature) /* [1, 100, 2000]: 100 channels of 2000, each dropped whole or kept */
            for (int64_t ch = 0; ch < 100; ch++) {
                const bool d0 = cg_data(y)[ch * 2000] == dv;
                for (int64_t i = 1; i < 2000; i++)
                    ck_assert((cg_data(y)[ch * 2000 + i] == dv) == d0);
            }
        else
            assert_mean((double)dropped / N, p, p * (1 - p), N, "alpha_dropout dropped");
        cg_release(y);
    }
    cg_release_all(2, x, x3);
}
END_TEST

START_TEST(test_dropout_edges)
{
    cg_rng r = cg_rng_new(32);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 4)), true);
    r = cg_rng_new(33); /* the dropouts' */
    const drop_fn fs[] = {cg_dropout1d, cg_dropout2d, cg_feature_dropout, cg_alpha_dropout,
                          cg_feature_alpha_dropout};
    for (int k = 0; k < 5; k++) {
        /* not training, p = 0: x itself, nothing drawn */
        cg_tensor *a = fs[k](x, 0.5f, &r, false), *b = fs[k](x, 0.0f, &r, true);
        ck_assert_ptr_eq(a, x);
        ck_assert_ptr_eq(b, x);
        ck_assert_uint_eq(r.counter, 0);
        /* p = 1: x times 0, nothing drawn, the gradient 0 */
        cg_tensor *z = fs[k](x, 1.0f, &r, true), *l = cg_sum_all(z);
        ck_assert_uint_eq(r.counter, 0);
        for (int i = 0; i < 24; i++)
            ck_assert_float_eq(cg_data(z)[i], 0.0f);
        ck_assert(cg_backward(l, NULL, false));
        for (int i = 0; i < 24; i++)
            ck_assert_float_eq(cg_data(x->grad)[i], 0.0f);
        cg_zero_grad(x);
        CG_ASSERT_REFUSED_LINE(fs[k](x, 1.5f, &r, false),
                               "dropout probability has to be between 0 and 1, but got 1.5");
        CG_ASSERT_REFUSED_LINE(fs[k](x, NAN, &r, true), "dropout probability");
        CG_ASSERT_REFUSED_LINE(fs[k](x, 0.5f, NULL, true), "NULL generator");
        cg_release_all(4, a, b, z, l);
    }
    /* ranks, refused even when not training */
    cg_tensor *x1 = cg_zeros(CG_SHAPE(5)), *x4 = cg_zeros(CG_SHAPE(1, 2, 3, 4));
    CG_ASSERT_REFUSED_LINE(cg_dropout1d(x4, 0.5f, &r, false),
                           "dropout1d: Expected 2D or 3D input, but received a 4D input");
    CG_ASSERT_REFUSED_LINE(cg_dropout2d(x1, 0.5f, &r, false), "Expected 3D or 4D input");
    CG_ASSERT_REFUSED_LINE(cg_dropout3d(x, 0.5f, &r, false), "Expected 4D or 5D input");
    CG_ASSERT_REFUSED_LINE(cg_feature_alpha_dropout(x1, 0.5f, &r, false),
                           "Feature dropout requires at least 2 dimensions in the input (got 1)");
    CG_ASSERT_REFUSED_LINE(cg_feature_dropout(x1, 0.5f, &r, true), "at least 2 dimensions");
    CG_ASSERT_REFUSED_LINE(cg_dropout1d(NULL, 0.5f, &r, true), "dropout1d");
    cg_tensor *xi = cg_test_ids(4, NULL), *xi2 = cg_view_reshape(xi, CG_SHAPE(2, 2));
    CG_ASSERT_REFUSED_LINE(cg_dropout1d(xi2, 0.5f, &r, true), "expected float32");
    /* alpha dropout of a 0-d and an empty tensor */
    cg_tensor *s = cg_scalar(2.0f), *e = cg_zeros(CG_SHAPE(0, 3));
    cg_tensor *ys = cg_alpha_dropout(s, 0.5f, &r, true), *ye = cg_dropout1d(e, 0.5f, &r, true);
    ck_assert_int_eq(ys->ndim, 0);
    ck_assert_ptr_eq(ye, e);
    cg_release_all(8, x, x1, x4, xi2, s, e, ys, ye);
}
END_TEST

/* The gradient is g times the noise: checked numerically (one seed per
 * call, so every evaluation draws the same noise) on four layouts */
typedef struct {
    drop_fn f;
    float p;
} drop_case;

static cg_tensor *drop_call(void *ctx, cg_tensor *const *in)
{
    const drop_case *c = ctx;
    cg_rng r = cg_rng_new(33);
    return c->f(in[0], c->p, &r, true);
}

START_TEST(test_dropout_gradcheck)
{
    const drop_case cases[] = {{cg_dropout1d, 0.4f},     {cg_dropout2d, 0.3f},
                               {cg_dropout3d, 0.5f},     {cg_feature_dropout, 0.25f},
                               {cg_alpha_dropout, 0.3f}, {cg_feature_alpha_dropout, 0.4f}};
    const int64_t shapes[][5] = {{3, 4, 5}, {2, 3, 4, 3}, {2, 3, 2, 2, 3},
                                 {4, 3, 5}, {3, 4, 5},    {3, 4, 2, 3}};
    const int nds[] = {3, 4, 5, 3, 3, 4};
    cg_rng r = cg_rng_new(34);
    for (int k = 0; k < 6; k++)
        for (int layout = 0; layout < 3; layout++) {
            cg_tensor *x = cg_test_randn_layout(&r, nds[k], shapes[k], layout);
            cg_requires_grad(x, true);
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(drop_call, (void *)&cases[k], 1, &x, NULL, &rep),
                          "case %d layout %d: %s", k, layout, rep.message);
            cg_test_check_unread(drop_call, (void *)&cases[k], 1, &x, "noise dropout");
            cg_release(x);
        }
    /* unbatched dropout1d: the noise per row, the gradient g times it */
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(50, 6)), true);
    cg_rng d = cg_rng_new(35);
    cg_tensor *y = cg_dropout1d(x, 0.5f, &d, true), *l = cg_sum_all(y);
    ck_assert(cg_backward(l, NULL, false));
    for (int i = 0; i < 300; i++)
        ck_assert_float_eq(cg_data(x->grad)[i], cg_data(y)[i] == 0.0f ? 0.0f : 2.0f);
    cg_release_all(3, x, y, l);
}
END_TEST

START_TEST(test_dropout_modules)
{
    static const cg_dropout_kind kinds[] = {CG_DROPOUT_PLAIN, CG_DROPOUT_1D,
                                            CG_DROPOUT_2D,    CG_DROPOUT_3D,
                                            CG_DROPOUT_ALPHA, CG_DROPOUT_FEATURE_ALPHA};
    static const char *const types[] = {"Dropout",   "Dropout1d",    "Dropout2d",
                                        "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"};
    const drop_fn fs[] = {cg_dropout,   cg_dropout1d,     cg_dropout2d,
                          cg_dropout3d, cg_alpha_dropout, cg_feature_alpha_dropout};
    cg_rng r = cg_rng_new(36);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 4, 5));
    for (int k = 0; k < 6; k++) {
        cg_rng mr = cg_rng_new(37), fr = cg_rng_new(37);
        cg_drop *m = cg_drop_new_kind(kinds[k], 0.4f, &mr);
        ck_assert_str_eq(m->base.type, types[k]);
        cg_tensor *xk = k == 1 ? cg_view_select(x, 0, 0) : cg_retain(x); /* 1d: 3 dims */
        cg_tensor *y = cg_drop_forward(m, xk), *ref = fs[k](xk, 0.4f, &fr, true);
        ck_assert(same_bits(y, ref));
        cg_module_train(&m->base, false);
        cg_tensor *ye = cg_drop_forward(m, xk);
        ck_assert_ptr_eq(ye, xk);
        cg_release_all(4, xk, y, ref, ye);
        cg_module_free(&m->base);
    }
    CG_ASSERT_REFUSED_LINE(cg_drop_new_kind(CG_DROPOUT_ALPHA, 1.5f, NULL),
                           "AlphaDropout: p must be in [0, 1] (got 1.5)");
    CG_ASSERT_REFUSED_LINE(cg_drop_new_kind((cg_dropout_kind)17, 0.5f, NULL), "unknown kind 17");
    cg_release(x);
}
END_TEST

/* The dropouts at 1 and 2 threads (big enough to run in parallel) */
static void dropout_at(int nt, float **got)
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(38), d = cg_rng_new(39);
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(8, 64, 40, 36), 1), true);
    cg_tensor *t[3] = {cg_dropout2d(x, 0.3f, &d, true), cg_alpha_dropout(x, 0.2f, &d, true),
                       cg_feature_alpha_dropout(x, 0.5f, &d, true)};
    cg_tensor *l = cg_test_weighted_squares(3, t);
    cg_test_backward_values(l, 1, &x, got);
    cg_release_all(2, x, l);
}

START_TEST(test_dropout_threads)
{
    const int64_t n[2] = {1, 8 * 64 * 40 * 36};
    cg_test_same_bits_1_2_threads(dropout_at, 2, n);
}
END_TEST

/* ------------------------------------------------------------ clipping */
/* Two parameters whose gradients are given */
static void two_params(cg_tensor **p, const float *g0, int n0, const float *g1, int n1)
{
    p[0] = cg_requires_grad(cg_zeros(CG_SHAPE(n0)), true);
    p[1] = cg_requires_grad(cg_zeros(CG_SHAPE(n1)), true);
    p[0]->grad = cg_from_data(CG_SHAPE(n0), g0);
    p[1]->grad = cg_from_data(CG_SHAPE(n1), g1);
}

START_TEST(test_clip_grad_value)
{
    cg_tensor *p[3];
    two_params(p, (const float[]){-3, 0.5f, NAN}, 3, (const float[]){2, -0.25f}, 2);
    p[2] = cg_zeros(CG_SHAPE(2)); /* no grad: skipped */
    ck_assert(cg_clip_grad_value(3, p, 1.0));
    const float *a = cg_data(p[0]->grad), *b = cg_data(p[1]->grad);
    ck_assert(a[0] == -1.0f && a[1] == 0.5f && isnan(a[2]) && b[0] == 1.0f && b[1] == -0.25f);
    ck_assert(cg_clip_grad_value(2, p, 0.0)); /* everything 0 but the NaN */
    ck_assert(a[0] == 0.0f && b[1] == 0.0f);
    /* a bfloat16 gradient: clamped as its floats, rounded back */
    cg_tensor *q = cg_requires_grad(cg_k_to(cg_test_scalar(0), CG_BF16), true);
    q->grad = cg_k_to(cg_test_scalar(5), CG_BF16);
    ck_assert(cg_clip_grad_value(1, &q, 2.0));
    ck_assert_float_eq(cg_bf16_to_f32(cg_data_bf16(q->grad)[0]), 2.0f);
    CG_ASSERT_REFUSED(!cg_clip_grad_value(2, p, -1), "clip_grad_value: clip_value -1 must be >= 0");
    CG_ASSERT_REFUSED(!cg_clip_grad_value(2, p, NAN), "clip_value nan");
    CG_ASSERT_REFUSED(!cg_clip_grad_value(2, NULL, 1), "NULL array");
    cg_tensor *bad[1] = {NULL};
    CG_ASSERT_REFUSED(!cg_clip_grad_value(1, bad, 1), "parameter 0 is NULL");
    cg_release_all(4, p[0], p[1], p[2], q);
}
END_TEST

START_TEST(test_clip_grad_norm_ex)
{
    static const float g0[3] = {3, -4, 1}, g1[2] = {-2, 0.5f};
    cg_tensor *p[2], *q[2];
    /* p = 2: cg_clip_grad_norm's bits */
    two_params(p, g0, 3, g1, 2);
    two_params(q, g0, 3, g1, 2);
    const double t2 = cg_clip_grad_norm_ex(2, p, 1.0, 2, false), u2 = cg_clip_grad_norm(2, q, 1.0);
    ck_assert(t2 == u2 && t2 == sqrt(30.25));
    ck_assert(same_bits(p[0]->grad, q[0]->grad) && same_bits(p[1]->grad, q[1]->grad));
    cg_release_all(4, p[0], p[1], q[0], q[1]);
    /* inf: the largest magnitude; 1: the sum; 3: (sum |g|^3)^(1/3) */
    const double norms[3] = {INFINITY, 1, 3};
    const double want[3] = {4, 10.5, cbrt(27 + 64 + 1 + 8 + 0.125)};
    for (int k = 0; k < 3; k++) {
        two_params(p, g0, 3, g1, 2);
        const double t = cg_clip_grad_norm_ex(2, p, 2.0, norms[k], false);
        ck_assert_msg(fabs(t - want[k]) <= 1e-12 * want[k], "norm %g: %.17g", norms[k], t);
        const float coef = (1.0f / ((float)t + 1e-6f)) * 2.0f;
        ck_assert_float_eq(cg_data(p[0]->grad)[1], -4.0f * coef);
        ck_assert_float_eq(cg_data(p[1]->grad)[0], -2.0f * coef);
        cg_release_all(2, p[0], p[1]);
    }
    /* under max_norm: untouched */
    two_params(p, g0, 3, g1, 2);
    ck_assert(cg_clip_grad_norm_ex(2, p, 100, 1, false) == 10.5);
    ck_assert_float_eq(cg_data(p[0]->grad)[0], 3.0f);
    cg_release_all(2, p[0], p[1]);
    /* non-finite: an error with error_if_nonfinite, else returned; untouched */
    two_params(p, (const float[]){1, INFINITY}, 2, (const float[]){2}, 1);
    for (int k = 0; k < 3; k++)
        CG_ASSERT_REFUSED(cg_clip_grad_norm_ex(2, p, 1, norms[k], true) == -1,
                          "is non-finite, so it cannot be clipped");
    ck_assert(isinf(cg_clip_grad_norm_ex(2, p, 1, 3, false)));
    ck_assert_float_eq(cg_data(p[1]->grad)[0], 2.0f);
    cg_release_all(2, p[0], p[1]);
    two_params(p, (const float[]){1, NAN}, 2, (const float[]){2}, 1);
    ck_assert(isnan(cg_clip_grad_norm_ex(2, p, 1, INFINITY, false)));
    ck_assert(isnan(cg_clip_grad_norm_ex(2, p, 1, 1, false)));
    CG_ASSERT_REFUSED(cg_clip_grad_norm_ex(2, p, 1, 2, true) == -1, "The total norm of order 2");
    CG_ASSERT_REFUSED(cg_clip_grad_norm_ex(2, p, 1, 0, false) == -1,
                      "need max_norm >= 0 and norm_type > 0 or inf (got 1, 0)");
    CG_ASSERT_REFUSED(cg_clip_grad_norm_ex(2, p, 1, -INFINITY, false) == -1, "norm_type > 0");
    CG_ASSERT_REFUSED(cg_clip_grad_norm_ex(2, p, -1, 2, false) == -1, "max_norm >= 0");
    cg_release_all(2, p[0], p[1]);
}
END_TEST

/* ------------------------------------------- parameters_to_vector & back */
START_TEST(test_parameters_vector)
{
    cg_rng r = cg_rng_new(40);
    cg_module *root = cg_module_new("Root");
    cg_linear *a = cg_linear_new(3, 2, true, &r), *b = cg_linear_new(2, 4, false, &r);
    ck_assert(cg_module_add_child(root, "a", a) && cg_module_add_child(root, "b", b));
    cg_param_list l = {0};
    ck_assert(cg_module_params(root, &l));
    cg_tensor *v = cg_parameters_to_vector(root);
    ck_assert_int_eq(v->ndim, 1);
    ck_assert_int_eq(v->shape[0], 6 + 2 + 8);
    int64_t at = 0; /* named_parameters() order: a.weight, a.bias, b.weight */
    for (int i = 0; i < l.n; i++) {
        float *x = cg_test_values(l.items[i].tensor);
        for (int64_t k = 0; k < cg_numel(l.items[i].tensor); k++)
            ck_assert_float_eq(cg_data(v)[at + k], x[k]);
        at += cg_numel(l.items[i].tensor);
        free(x);
    }
    /* the gradient flows back to each parameter */
    cg_tensor *w = cg_arange(0, 16, 1), *vw = cg_mul(v, w), *s = cg_sum_all(vw);
    ck_assert(cg_backward(s, NULL, false));
    at = 0;
    for (int i = 0; i < l.n; i++) {
        const cg_tensor *g = l.items[i].tensor->grad;
        for (int64_t k = 0; k < cg_numel(g); k++)
            ck_assert_float_eq(cg_data(g)[k], (float)(at + k));
        at += cg_numel(g);
    }
    /* and back: the values of a vector into the parameters */
    cg_tensor *nv = cg_arange(100, 116, 1), *twice = cg_arange(0, 32, 1);
    cg_tensor *strided = cg_view_slice(twice, 0, 0, 32, 2);
    ck_assert(cg_vector_to_parameters(nv, root));
    ck_assert_float_eq(cg_data(l.items[1].tensor)[1], 107.0f);
    ck_assert(cg_vector_to_parameters(strided, root));
    ck_assert_float_eq(cg_data(l.items[2].tensor)[7], 30.0f);
    cg_tensor *shorter = cg_view_slice(nv, 0, 0, 15, 1), *m2 = cg_zeros(CG_SHAPE(4, 4));
    CG_ASSERT_REFUSED(!cg_vector_to_parameters(shorter, root),
                      "vector_to_parameters: vec has 15 elements, the 3 parameters 16");
    CG_ASSERT_REFUSED(!cg_vector_to_parameters(twice, root), "vec has 32 elements");
    CG_ASSERT_REFUSED(!cg_vector_to_parameters(m2, root), "vec must be 1-d (got [4, 4])");
    ck_assert_float_eq(cg_data(l.items[2].tensor)[7], 30.0f); /* unchanged */
    /* no parameters: [0] */
    cg_module *empty = cg_module_new("Empty");
    cg_tensor *ev = cg_parameters_to_vector(empty);
    ck_assert_int_eq(ev->shape[0], 0);
    ck_assert(cg_vector_to_parameters(ev, empty));
    CG_ASSERT_REFUSED(!cg_parameters_to_vector(NULL), "cg_parameters_to_vector");
    cg_release_all(10, v, w, vw, s, nv, twice, strided, shorter, m2, ev);
    cg_param_list_free(&l);
    cg_module_free(root);
    cg_module_free(empty);
}
END_TEST

Suite *random_nn_suite(void)
{
    Suite *s = suite_create("random_nn");
    TCase *tc = tcase_create("nn");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_channel_dropouts);
    tcase_add_test(tc, test_alpha_dropouts);
    tcase_add_test(tc, test_dropout_edges);
    tcase_add_test(tc, test_dropout_gradcheck);
    tcase_add_test(tc, test_dropout_modules);
    tcase_add_test(tc, test_dropout_threads);
    tcase_add_test(tc, test_clip_grad_value);
    tcase_add_test(tc, test_clip_grad_norm_ex);
    tcase_add_test(tc, test_parameters_vector);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {random_tensor_suite(), random_init_suite(), random_nn_suite()};
    return cg_test_run(s, 3);
}
