/* Random tensors and torch.nn.init's functions from PyTorch's generator
 * (core/random.h, nn/init.h: the _torch forms) against what PyTorch gives
 * (tests/interop/make_torch_init.py writes DIR/torch_random.safetensors):
 * the script's calls made in its order from one cg_mt19937 seeded as
 * torch.manual_seed(RSEED), each result compared with PyTorch's: bit for
 * bit where core/random.h and nn/init.h say so, normal draws within 2e-6
 * of the largest magnitude (log, cos and sin may differ in their last
 * bit: core/mt19937.c); the 5 uniforms after must be PyTorch's (the
 * generator advanced by exactly as many draws). calculate_gain's values
 * exactly; clip_grad_norm_ and clip_grad_value_. The dropouts (last) draw from cgrad's generator: their values
 * are compared where both masks agree (the dropped value, then each
 * element both kept). Called by check_torch_init.c's main. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

enum { RSEED = 4321 };

typedef struct {
    cg_st_file *f;
    int cases, bad;
} twin;

/* Bit for bit as int64 (integer tensors), or float32 within tol times
 * max(1, max |ref|) (tol 0: the same bits) */
static void cmp(twin *w, const char *name, cg_tensor *t, double tol)
{
    cg_tensor *ref = cg_st_get(w->f, name);
    bool ok = t && ref && cg_same_shape(t, ref);
    const bool ints = ok && !cg_dtype_is_float(ref->dtype);
    ok = ok && ints == !cg_dtype_is_float(t->dtype);
    double worst = 0, big = 1;
    if (ok && ints) {
        cg_tensor *a = cg_k_to(t, CG_I64), *b = cg_k_to(ref, CG_I64);
        for (int64_t i = 0; i < cg_numel(a); i++)
            ok = ok && cg_data_i64(a)[i] == cg_data_i64(b)[i];
        cg_release_all(2, a, b);
    } else if (ok) {
        cg_tensor *a = cg_k_to(t, CG_F32), *b = cg_k_to(ref, CG_F32);
        const float *x = cg_data(a), *y = cg_data(b);
        for (int64_t i = 0; i < cg_numel(a); i++)
            big = fmax(big, fabs((double)y[i]));
        for (int64_t i = 0; i < cg_numel(a); i++) {
            const double d = fabs((double)x[i] - (double)y[i]);
            worst = d > worst ? d : worst;
            ok = ok && (tol > 0 ? d <= tol * big : memcmp(&x[i], &y[i], sizeof *x) == 0);
        }
        cg_release_all(2, a, b);
    }
    printf("%-28s %s", name, ok ? "equal" : "DIFFERENT");
    if (tol > 0)
        printf(" (largest difference %.2g)", worst);
    printf("\n");
    if (!t || !ref)
        printf("  error: %s\n", cg_last_error());
    w->cases++;
    w->bad += !ok;
    cg_release_all(2, t, ref);
}

static cg_tensor *in(twin *w, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "in.%s", name);
    return cg_st_get_f32(w->f, key);
}

/* The value most elements of y (float32 [n]) have */
static float mode_of(const float *y, int64_t n)
{
    float best = y[0];
    int64_t most = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = 0;
        for (int64_t j = 0; j < n; j++)
            k += y[j] == y[i];
        if (k > most)
            most = k, best = y[i];
    }
    return best;
}

/* A dropout of ours against PyTorch's (different masks): the dropped
 * elements' value (the most common) is the same, and so is every element
 * both kept; both kinds must occur */
static void cmp_dropout(twin *w, const char *name, cg_tensor *ours)
{
    cg_tensor *ref = cg_st_get_f32(w->f, name);
    bool ok = ours && ref && cg_same_shape(ours, ref);
    int64_t kept = 0, dropped = 0;
    if (ok) {
        const float *a = cg_data(ours), *b = cg_data(ref);
        const int64_t n = cg_numel(ref);
        const float ma = mode_of(a, n), mb = mode_of(b, n);
        ok = memcmp(&ma, &mb, sizeof ma) == 0;
        for (int64_t i = 0; i < n; i++) {
            const bool ka = a[i] != ma, kb = b[i] != mb;
            kept += ka && kb;
            dropped += !ka && !kb;
            ok = ok && (!(ka && kb) || memcmp(&a[i], &b[i], sizeof *a) == 0);
        }
        ok = ok && kept > 0 && dropped > 0;
    }
    printf("%-28s %s (%lld kept and %lld dropped by both)\n", name,
           ok ? "equal where the masks agree" : "DIFFERENT", (long long)kept, (long long)dropped);
    w->cases++;
    w->bad += !ok;
    cg_release_all(2, ours, ref);
}

static void random_tensors(twin *w, cg_mt19937 *g)
{
    const double normal_tol = 2e-6;
    cg_tensor *e = cg_empty(CG_SHAPE(3, 7)), *e5 = cg_empty(CG_SHAPE(5, 7)),
              *e2 = cg_empty(CG_SHAPE(2, 3));
    cmp(w, "rand_like", cg_rand_like_torch(g, e), 0);
    cmp(w, "randn_like", cg_randn_like_torch(g, e5), normal_tol);
    cmp(w, "randn_like_small", cg_randn_like_torch(g, e2), normal_tol);
    cg_release_all(3, e, e5, e2);
    cg_tensor *p = in(w, "bernoulli");
    cmp(w, "bernoulli", cg_bernoulli_torch(g, p), 0);
    cg_tensor *b = cg_empty(CG_SHAPE(300)), *bi = cg_empty_dtype(CG_I64, CG_SHAPE(40));
    cmp(w, "bernoulli_", cg_bernoulli_torch_(b, g, 0.375) ? cg_retain(b) : NULL, 0);
    cmp(w, "bernoulli_i64", cg_bernoulli_torch_(bi, g, 0.5) ? cg_retain(bi) : NULL, 0);
    cg_release_all(3, p, b, bi);
    cmp(w, "randint", cg_randint_torch(g, -5, 12, CG_SHAPE(4, 25)), 0);
    cmp(w, "randint_2_33", cg_randint_torch(g, 0, INT64_C(1) << 33, CG_SHAPE(20)), 0);
    cmp(w, "randint_wide", cg_randint_torch(g, -(INT64_C(1) << 62), INT64_C(1) << 62, CG_SHAPE(10)),
        0);
    cg_tensor *i32 = cg_empty_dtype(CG_I32, CG_SHAPE(3, 4)), *f10 = cg_empty(CG_SHAPE(10));
    cmp(w, "randint_like_i32", cg_randint_like_torch(g, i32, 3, 9), 0);
    cmp(w, "randint_like_f32", cg_randint_like_torch(g, f10, -7, 7), 0);
    cg_release_all(2, i32, f10);
    cg_tensor *m = in(w, "normal.mean"), *s = in(w, "normal.std");
    cg_tensor *mb = in(w, "normal_big.mean"), *sb = in(w, "normal_big.std");
    cmp(w, "normal", cg_normal_torch(g, m, s), normal_tol);
    cmp(w, "normal_big", cg_normal_torch(g, mb, sb), normal_tol);
    cg_release_all(4, m, s, mb, sb);
    cg_tensor *rates = in(w, "poisson");
    cmp(w, "poisson", cg_poisson_torch(g, rates), 0);
    cg_release(rates);
    cg_tensor *pm = in(w, "multinomial"), *pr = in(w, "multinomial_rows"),
              *pz = in(w, "multinomial_zeros");
    cmp(w, "multinomial_repl", cg_multinomial_torch(g, pm, 30, true), 0);
    cmp(w, "multinomial_rows", cg_multinomial_torch(g, pr, 5, false), 0);
    cmp(w, "multinomial_one", cg_multinomial_torch(g, pr, 1, true), 0);
    cmp(w, "multinomial_1d", cg_multinomial_torch(g, pm, 4, false), 0);
    cmp(w, "multinomial_zeros", cg_multinomial_torch(g, pz, 50, true), 0);
    cg_release_all(3, pm, pr, pz);
    const int64_t ns[] = {1, 2, 10, 1000, 100000};
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "randperm_%lld", (long long)ns[i]);
        cmp(w, name, cg_randperm_torch(g, ns[i]), 0);
    }
}

/* t filled by ok (a call on t), or NULL */
static cg_tensor *filled(cg_tensor *t, bool ok)
{
    if (!ok) {
        cg_release(t);
        return NULL;
    }
    return t;
}

static void init_functions(twin *w, cg_mt19937 *g)
{
    cg_tensor *t;
    t = cg_empty(CG_SHAPE(6, 4, 3));
    cmp(w, "kaiming_uniform", filled(t, cg_init_kaiming_uniform_torch_(t, g, 0.1, "fan_out", NULL)),
        0);
    t = cg_empty(CG_SHAPE(8, 5));
    cmp(w, "kaiming_normal", filled(t, cg_init_kaiming_normal_torch_(t, g, 0, "fan_in", "relu")),
        2e-6);
    t = cg_empty(CG_SHAPE(3, 2, 2));
    cmp(w, "kaiming_normal_small",
        filled(t, cg_init_kaiming_normal_torch_(t, g, 0, "FAN_OUT", "tanh")), 2e-6);
    t = cg_empty(CG_SHAPE(5, 7));
    cmp(w, "xavier_uniform",
        filled(t, cg_init_xavier_uniform_torch_(t, g, cg_init_calculate_gain("tanh", 0))), 0);
    t = cg_empty(CG_SHAPE(6, 4, 2));
    cmp(w, "xavier_normal", filled(t, cg_init_xavier_normal_torch_(t, g, 1.5)), 2e-6);
    t = cg_empty(CG_SHAPE(50, 3));
    cmp(w, "trunc_normal", filled(t, cg_init_trunc_normal_torch_(t, g, 0.5, 2.0, -1.0, 3.0)), 0);
    t = cg_empty(CG_SHAPE(1000));
    cmp(w, "trunc_normal_default", filled(t, cg_init_trunc_normal_torch_(t, g, 0, 1, -2, 2)), 0);
    t = cg_empty(CG_SHAPE(200));
    cmp(w, "trunc_normal_tight", filled(t, cg_init_trunc_normal_torch_(t, g, 0, 1, -0.1, 0.2)), 0);
    t = cg_empty(CG_SHAPE(10, 6));
    cmp(w, "sparse", filled(t, cg_init_sparse_torch_(t, g, 0.3, 0.05)), 2e-6);
    t = cg_empty(CG_SHAPE(3, 5));
    cmp(w, "eye", filled(t, cg_init_eye_(t)), 0);
    t = cg_empty(CG_SHAPE(6, 2, 3, 3));
    cmp(w, "dirac", filled(t, cg_init_dirac_(t, 2)), 0);
    t = cg_empty(CG_SHAPE(4, 6, 5));
    cmp(w, "dirac_3d", filled(t, cg_init_dirac_(t, 1)), 0);
    t = cg_empty(CG_SHAPE(2, 2, 3, 2, 4));
    cmp(w, "dirac_5d", filled(t, cg_init_dirac_(t, 1)), 0);
    static const struct {
        const char *name;
        double param;
    } gains[] = {{"linear", CG_GAIN_NO_PARAM},
                 {"conv1d", CG_GAIN_NO_PARAM},
                 {"conv2d", CG_GAIN_NO_PARAM},
                 {"conv3d", CG_GAIN_NO_PARAM},
                 {"conv_transpose1d", CG_GAIN_NO_PARAM},
                 {"conv_transpose2d", CG_GAIN_NO_PARAM},
                 {"conv_transpose3d", CG_GAIN_NO_PARAM},
                 {"sigmoid", CG_GAIN_NO_PARAM},
                 {"tanh", CG_GAIN_NO_PARAM},
                 {"relu", CG_GAIN_NO_PARAM},
                 {"leaky_relu", CG_GAIN_NO_PARAM},
                 {"leaky_relu", 0.2},
                 {"leaky_relu", 3.0},
                 {"selu", CG_GAIN_NO_PARAM}};
    enum { NG = sizeof gains / sizeof *gains };
    float v[NG];
    for (int i = 0; i < NG; i++)
        v[i] = (float)cg_init_calculate_gain(gains[i].name, gains[i].param);
    cmp(w, "gains", cg_from_data(CG_SHAPE(NG), v), 0);
}

/* clip_grad_norm_ of each norm type (max_norm 1) and clip_grad_value_(0.3)
 * of the file's two gradients: the totals within 1e-6 (ours summed in
 * double, PyTorch's in float), the gradients within 1e-6 (the factor from
 * that total; the inf norm's and clip_grad_value's bit for bit) */
static void clip_functions(twin *w)
{
    static const struct {
        const char *name;
        double q;
    } norms[] = {{"inf", INFINITY}, {"1", 1}, {"3", 3}, {"2", 2}, {"0_5", 0.5}, {"value", 0}};
    for (int k = 0; k < 6; k++) {
        cg_tensor *p[2] = {cg_requires_grad(cg_zeros(CG_SHAPE(3, 4)), true),
                           cg_requires_grad(cg_zeros(CG_SHAPE(5)), true)};
        p[0]->grad = in(w, "clip.g0");
        p[1]->grad = in(w, "clip.g1");
        char name[64];
        const bool exact = norms[k].q == 0 || isinf(norms[k].q);
        if (norms[k].q == 0) {
            if (!cg_clip_grad_value(2, p, 0.3))
                printf("  error: %s\n", cg_last_error());
        } else {
            const float total = (float)cg_clip_grad_norm_ex(2, p, 1.0, norms[k].q, false);
            snprintf(name, sizeof name, "clip.%s.total", norms[k].name);
            cmp(w, name, cg_from_data(CG_SHAPE(1), &total), exact ? 0 : 1e-6);
        }
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "clip.%s.g%d", norms[k].name, i);
            cmp(w, name, cg_retain(p[i]->grad), exact ? 0 : 1e-6);
        }
        cg_release_all(2, p[0], p[1]);
    }
}

int check_torch_random(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/torch_random.safetensors", dir);
    twin w = {cg_st_open(path), 0, 0};
    if (!w.f)
        return fprintf(stderr, "check_torch_random: %s\n", cg_last_error()), 1;
    cg_mt19937 g;
    cg_mt19937_seed(&g, RSEED);
    random_tensors(&w, &g);
    init_functions(&w, &g);
    clip_functions(&w);
    cg_tensor *after = cg_empty(CG_SHAPE(5));
    cmp(&w, "after", filled(after, cg_uniform_torch_(after, &g, 0.0f, 1.0f)), 0);
    cg_tensor *x = in(&w, "dropout");
    cg_rng r = cg_rng_new(3);
    cmp_dropout(&w, "dropout2d", cg_dropout2d(x, 0.25f, &r, true));
    cmp_dropout(&w, "alpha_dropout", cg_alpha_dropout(x, 0.25f, &r, true));
    cmp_dropout(&w, "feature_alpha_dropout", cg_feature_alpha_dropout(x, 0.375f, &r, true));
    cg_release(x);
    printf("check_torch_random: %d cases, %d different\n", w.cases, w.bad);
    cg_st_close(w.f);
    return w.bad ? 1 : 0;
}
