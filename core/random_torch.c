/* Random tensors from PyTorch's generator (cg_mt19937, core/mt19937.c):
 * PyTorch 1.13's CPU kernels rewritten draw for draw, one element after
 * another in row-major order (cpu_serial_kernel's order over a contiguous
 * result), so that a result and the generator's state after it are the
 * ones torch.manual_seed(s) and the same calls give (core/random.h). Read
 * from aten/src/ATen/native (DistributionTemplates.h, Distributions.cpp,
 * cpu/MultinomialKernel.cpp, TensorFactories.cpp) and
 * core/TransformationHelper.h, and checked against python3-torch by the
 * meson test torch_init. */
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "core/random_impl.h"

/* uniform_real_distribution<float>(0, 1): a 32-bit draw's low 24 bits */
static float unit24(cg_mt19937 *g) { return (float)(cg_mt19937_next(g) & 0xffffffu) * 0x1.0p-24f; }

/* random64(): two 32-bit draws, the first the high half */
static uint64_t draw64(cg_mt19937 *g)
{
    const uint64_t hi = cg_mt19937_next(g);
    return hi << 32 | cg_mt19937_next(g);
}

/* uniform_real_distribution<double>(0, 1): random64's low 53 bits */
static double unit53(cg_mt19937 *g)
{
    return (double)(draw64(g) & ((UINT64_C(1) << 53) - 1)) * 0x1.0p-53;
}

static double unit53_src(void *g) { return unit53(g); }

static bool have(const char *op, const void *a, const cg_mt19937 *g)
{
    if (!a)
        return cg_error_null_input(op);
    if (!g)
        cg_set_error("%s: NULL generator", op);
    return g != NULL;
}

cg_tensor *cg_bernoulli_torch(cg_mt19937 *g, const cg_tensor *p)
{
    const char *op = "bernoulli (PyTorch generator)";
    if (!have(op, p, g) || !cg_check_f32(op, "p", p))
        return NULL;
    cg_tensor *pc = cg_k_contiguous(p);
    const int64_t n = cg_numel(p);
    cg_tensor *out =
        pc && cg_rand_probs_ok(op, cg_data(pc), n) ? cg_empty(p->ndim, p->shape) : NULL;
    if (out) {
        const float *pp = cg_data(pc);
        float *o = cg_data(out);
        for (int64_t i = 0; i < n; i++) /* bernoulli_distribution<float>: u < p in float */
            o[i] = unit24(g) < pp[i] ? 1.0f : 0.0f;
    }
    cg_release(pc);
    return out;
}

bool cg_bernoulli_torch_(cg_tensor *t, cg_mt19937 *g, double p)
{
    const char *op = "bernoulli_ (PyTorch generator)";
    if (!have(op, t, g) || !cg_rand_p_ok(op, p) || !cg_check_no_history(op, t))
        return false;
    if (!cg_is_contiguous(t)) {
        cg_set_error("%s: tensor must be contiguous", op);
        return false;
    }
    char *d = cg_data_ptr(t);
    const size_t es = cg_dtype_size(t->dtype);
    for (int64_t i = 0, n = cg_numel(t); i < n; i++) /* bernoulli_distribution<double> */
        cg_elem_set(t->dtype, d + (size_t)i * es, unit53(g) < p ? 1.0 : 0.0);
    cg_tensor_modified(t);
    return true;
}

static cg_tensor *like(const char *op, cg_mt19937 *g, const cg_tensor *x, bool normal)
{
    if (!have(op, x, g) || !cg_check_f32(op, "x", x))
        return NULL;
    cg_tensor *out = cg_empty(x->ndim, x->shape);
    if (out && !(normal ? cg_normal_torch_(out, g, 0.0f, 1.0f) : cg_uniform_torch_(out, g, 0, 1))) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_rand_like_torch(cg_mt19937 *g, const cg_tensor *x)
{
    return like("rand_like (PyTorch generator)", g, x, false);
}

cg_tensor *cg_randn_like_torch(cg_mt19937 *g, const cg_tensor *x)
{
    return like("randn_like (PyTorch generator)", g, x, true);
}

/* random_from_to: (draw % range) + low, a 64-bit draw from a range of
 * 2^32 up */
static cg_tensor *randint_i64(cg_mt19937 *g, int64_t low, int64_t high, int ndim,
                              const int64_t *shape)
{
    cg_tensor *out = cg_empty_dtype(CG_I64, ndim, shape);
    if (!out)
        return NULL;
    const uint64_t range = (uint64_t)high - (uint64_t)low;
    int64_t *o = cg_data_i64(out);
    for (int64_t i = 0, n = cg_numel(out); i < n; i++) {
        const uint64_t v = range >= (UINT64_C(1) << 32) ? draw64(g) : cg_mt19937_next(g);
        o[i] = (int64_t)(v % range + (uint64_t)low);
    }
    return out;
}

cg_tensor *cg_randint_torch(cg_mt19937 *g, int64_t low, int64_t high, int ndim,
                            const int64_t *shape)
{
    const char *op = "randint (PyTorch generator)";
    if (!g) {
        cg_set_error("%s: NULL generator", op);
        return NULL;
    }
    return cg_rand_range_ok(op, low, high) ? randint_i64(g, low, high, ndim, shape) : NULL;
}

cg_tensor *cg_randint_like_torch(cg_mt19937 *g, const cg_tensor *x, int64_t low, int64_t high)
{
    const char *op = "randint_like (PyTorch generator)";
    if (!have(op, x, g) || !cg_rand_range_ok(op, low, high) ||
        !cg_rand_like_range_ok(op, x->dtype, low, high))
        return NULL;
    cg_tensor *v = randint_i64(g, low, high, x->ndim, x->shape);
    if (!v || x->dtype == CG_I64)
        return v;
    cg_tensor *out = cg_k_to(v, x->dtype);
    cg_release(v);
    return out;
}

cg_tensor *cg_normal_torch(cg_mt19937 *g, const cg_tensor *mean, const cg_tensor *std)
{
    const char *op = "normal (PyTorch generator)";
    if (!have(op, mean && std ? mean : NULL, g))
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_rand_normal_args(op, mean, std, shape);
    cg_tensor *z = nd >= 0 ? cg_empty(nd, shape) : NULL;
    if (z && !cg_normal_torch_(z, g, 0.0f, 1.0f)) {
        cg_release(z);
        return NULL;
    }
    return z ? cg_rand_normal_finish(z, mean, std) : NULL;
}

cg_tensor *cg_poisson_torch(cg_mt19937 *g, const cg_tensor *rates)
{
    const char *op = "poisson (PyTorch generator)";
    if (!have(op, rates, g) || !cg_check_f32(op, "rates", rates))
        return NULL;
    cg_tensor *rc = cg_k_contiguous(rates);
    const int64_t n = cg_numel(rates);
    cg_tensor *out =
        rc && cg_rand_rates_ok(op, cg_data(rc), n) ? cg_empty(rates->ndim, rates->shape) : NULL;
    if (out) {
        const float *r = cg_data(rc);
        float *o = cg_data(out);
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)cg_rand_poisson((double)r[i], unit53_src, g);
    }
    cg_release(rc);
    return out;
}

/* With replacement, row by row: float cumulative sums normalised by their
 * total in float, the last set to 1, then for each sample the first
 * category whose cumulative is not below a 53-bit uniform (binary search) */
static void multi_cumulative(cg_mt19937 *g, const float *p, int64_t rows, int64_t n, int64_t ns,
                             float *cum, int64_t *out)
{
    for (int64_t b = 0; b < rows; b++) {
        float total = 0;
        for (int64_t c = 0; c < n; c++) {
            total += p[b * n + c];
            cum[c] = total;
        }
        for (int64_t c = 0; c < n; c++)
            cum[c] /= total;
        cum[n - 1] = 1;
        for (int64_t s = 0; s < ns; s++) {
            const double u = unit53(g);
            int64_t lo = 0, hi = n;
            while (hi - lo > 0) {
                const int64_t mid = lo + (hi - lo) / 2;
                if ((double)cum[mid] < u)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            out[b * ns + s] = lo;
        }
    }
}

typedef struct {
    float score;
    int64_t c;
} score_f;

static int score_f_order(const void *x, const void *y)
{
    const score_f *a = x, *b = y;
    const bool an = isnan(a->score), bn = isnan(b->score); /* NaN first, as topk's */
    if (an != bn)
        return an ? -1 : 1;
    if (!an && a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return (a->c > b->c) - (a->c < b->c);
}

/* Without replacement: exponential_(1) over every weight
 * (double, stored as float), w / E in float, then each row's highest
 * (argmax) or ns highest, highest first (topk) */
static void multi_race(cg_mt19937 *g, const float *p, int64_t rows, int64_t n, int64_t ns,
                       score_f *sc, int64_t *out)
{
    for (int64_t i = 0; i < rows * n; i++) {
        const float e = (float)(-1.0 / 1.0 * log(1.0 - unit53(g)));
        sc[i] = (score_f){p[i] / e, i % n};
    }
    for (int64_t b = 0; b < rows; b++) {
        qsort(sc + b * n, (size_t)n, sizeof *sc, score_f_order);
        for (int64_t s = 0; s < ns; s++)
            out[b * ns + s] = sc[b * n + s].c;
    }
}

cg_tensor *cg_multinomial_torch(cg_mt19937 *g, const cg_tensor *probs, int64_t num_samples,
                                bool replacement)
{
    const char *op = "multinomial (PyTorch generator)";
    int64_t rows, n;
    if (!have(op, probs, g) || !cg_check_f32(op, "probs", probs) ||
        !cg_rand_multinomial_shape_ok(op, probs, num_samples, replacement, &rows, &n))
        return NULL;
    cg_tensor *pc = cg_k_contiguous(probs);
    if (!pc || !cg_rand_multinomial_ok(op, probs, cg_data(pc), num_samples, replacement)) {
        cg_release(pc);
        return NULL;
    }
    const int64_t oshape[2] = {rows, num_samples};
    cg_tensor *out = probs->ndim == 1 ? cg_empty_dtype(CG_I64, 1, &num_samples)
                                      : cg_empty_dtype(CG_I64, 2, oshape);
    const bool race = !replacement; /* PyTorch 1.13's fast path */
    void *work = out ? malloc(race ? (size_t)(rows * n + 1) * sizeof(score_f)
                                   : (size_t)(n + 1) * sizeof(float))
                     : NULL;
    if (out && !work) {
        cg_set_error("%s: out of memory for %lld x %lld categories", op, (long long)rows,
                     (long long)n);
        cg_release(out);
        out = NULL;
    }
    if (out && race)
        multi_race(g, cg_data(pc), rows, n, num_samples, work, cg_data_i64(out));
    else if (out)
        multi_cumulative(g, cg_data(pc), rows, n, num_samples, work, cg_data_i64(out));
    free(work);
    cg_release(pc);
    return out;
}

cg_tensor *cg_randperm_torch(cg_mt19937 *g, int64_t n)
{
    const char *op = "randperm (PyTorch generator)";
    if (!g || n < 0) {
        cg_set_error("%s: %s", op, g ? "n must be >= 0" : "NULL generator");
        return NULL;
    }
    cg_tensor *t = cg_empty_dtype(CG_I64, 1, &n);
    if (!t)
        return NULL;
    int64_t *p = cg_data_i64(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = i;
    for (int64_t i = 0; i + 1 < n; i++) {
        const int64_t z = (int64_t)(cg_mt19937_next(g) % (uint64_t)(n - i)) + i;
        const int64_t keep = p[i];
        p[i] = p[z];
        p[z] = keep;
    }
    return t;
}
