/* Random tensors from cgrad's counter-based generator (core/random.h):
 * element i of a result draws (counter + i), so every loop below may run
 * its chunks on any thread and gives the same bits for any count. */
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "core/random_impl.h"
#include "core/rng.h"
#include "core/shares.h"
#include "core/tensor_impl.h"

#define RAND_GRAIN 4096
#define RAND_PAR 32768

/* A 64-bit draw as a uniform double in [0, 1): its top 53 bits */
static inline double unit53(uint64_t b) { return (double)(b >> 11) * 0x1.0p-53; }

/* The stream of one element that needs more than its one draw: seeded by
 * that draw, so that it depends on nothing but the element's counter */
typedef struct {
    uint64_t key, next;
} elem_stream;

static elem_stream elem_stream_of(uint64_t draw) { return (elem_stream){cg_rng_key(draw), 0}; }

static double stream_unit(void *s)
{
    elem_stream *e = s;
    return unit53(cg_rng_draw(e->key, e->next++));
}

static bool have(const char *op, const void *a, const cg_rng *r)
{
    if (!a)
        return cg_error_null_input(op);
    if (!r)
        cg_set_error("%s: NULL generator", op);
    return r != NULL;
}

static int rand_team(int64_t n) { return cg_shares_team(n > RAND_PAR); }

/* ---------------------------------------------------------- bernoulli */
typedef struct {
    uint64_t key, base;
    const float *p; /* per element, or NULL: pd for all */
    double pd;
    float *out;
} bern_job;

static void bern_chunk(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const bern_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        const double u = unit53(cg_rng_draw(j->key, j->base + (uint64_t)i));
        j->out[i] = u < (j->p ? (double)j->p[i] : j->pd) ? 1.0f : 0.0f;
    }
}

/* out[0, n) from p (or pd), the generator's next n draws */
static void bern_fill(cg_rng *r, const float *p, double pd, float *out, int64_t n)
{
    const bern_job j = {cg_rng_key(r->seed), cg_rng_take(r, (uint64_t)n), p, pd, out};
    cg_shares_run(n, RAND_GRAIN, rand_team(n), bern_chunk, &j);
}

cg_tensor *cg_bernoulli(cg_rng *r, const cg_tensor *p)
{
    if (!have("bernoulli", p, r))
        return NULL;
    cg_tensor *pf = cg_rand_floats("bernoulli", p);
    const int64_t n = cg_numel(p);
    if (!pf || !cg_rand_probs_ok("bernoulli", cg_data(pf), n)) {
        cg_release(pf);
        return NULL;
    }
    cg_tensor *out = cg_empty(p->ndim, p->shape);
    if (out)
        bern_fill(r, cg_data(pf), 0, cg_data(out), n);
    cg_release(pf);
    return cg_upcast_round(out, p->dtype);
}

/* t's elements (any strides, any dtype) from the float32 values of src,
 * t marked written; false + error */
static bool write_into(const char *op, cg_tensor *t, cg_tensor *src)
{
    const bool ok = src && cg_k_copy_(t, src);
    cg_release(src);
    if (!ok && !*cg_last_error())
        cg_set_error("%s: out of memory", op);
    return ok;
}

bool cg_bernoulli_(cg_tensor *t, cg_rng *r, double p)
{
    if (!have("bernoulli_", t, r) || !cg_rand_p_ok("bernoulli_", p) ||
        !cg_check_no_history("bernoulli_", t) || !cg_check_writable("bernoulli_", t))
        return false;
    cg_tensor *v = cg_empty(t->ndim, t->shape);
    if (v)
        bern_fill(r, NULL, p, cg_data(v), cg_numel(v));
    return write_into("bernoulli_", t, v);
}

/* -------------------------------------------------- rand_like, randn_like */
static cg_tensor *like(const char *op, cg_rng *r, const cg_tensor *x, bool normal)
{
    if (!have(op, x, r))
        return NULL;
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("%s: x is %s, expected a float dtype", op, cg_dtype_name(x->dtype));
        return NULL;
    }
    cg_tensor *out = normal ? cg_randn(r, x->ndim, x->shape) : cg_rand(r, x->ndim, x->shape);
    return cg_upcast_round(out, x->dtype);
}

cg_tensor *cg_rand_like(cg_rng *r, const cg_tensor *x) { return like("rand_like", r, x, false); }

cg_tensor *cg_randn_like(cg_rng *r, const cg_tensor *x) { return like("randn_like", r, x, true); }

/* ------------------------------------------------------------- randint */
typedef struct {
    uint64_t key, base, range, limit; /* draws at or above limit are redrawn */
    int64_t low, *out;
} int_job;

static void int_chunk(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const int_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        uint64_t b = cg_rng_draw(j->key, j->base + (uint64_t)i);
        if (b >= j->limit) { /* the last, incomplete range: redrawn (unbiased) */
            elem_stream s = elem_stream_of(b);
            do
                b = cg_rng_draw(s.key, s.next++);
            while (b >= j->limit);
        }
        j->out[i] = (int64_t)((uint64_t)j->low + b % j->range);
    }
}

/* An int64 tensor of the shape, uniform in [low, high) (checked by the caller) */
static cg_tensor *randint_i64(cg_rng *r, int64_t low, int64_t high, int ndim, const int64_t *shape)
{
    cg_tensor *out = cg_empty_dtype(CG_I64, ndim, shape);
    if (!out)
        return NULL;
    const uint64_t range = (uint64_t)high - (uint64_t)low;
    const int64_t n = cg_numel(out);
    const int_job j = {cg_rng_key(r->seed),
                       cg_rng_take(r, (uint64_t)n),
                       range,
                       UINT64_MAX - UINT64_MAX % range,
                       low,
                       cg_data_i64(out)};
    cg_shares_run(n, RAND_GRAIN, rand_team(n), int_chunk, &j);
    return out;
}

cg_tensor *cg_randint(cg_rng *r, int64_t low, int64_t high, int ndim, const int64_t *shape)
{
    if (!r) {
        cg_set_error("randint: NULL generator");
        return NULL;
    }
    if (!cg_rand_range_ok("randint", low, high))
        return NULL;
    return randint_i64(r, low, high, ndim, shape);
}

cg_tensor *cg_randint_like(cg_rng *r, const cg_tensor *x, int64_t low, int64_t high)
{
    if (!have("randint_like", x, r) || !cg_rand_range_ok("randint_like", low, high) ||
        !cg_rand_like_range_ok("randint_like", x->dtype, low, high))
        return NULL;
    cg_tensor *v = randint_i64(r, low, high, x->ndim, x->shape);
    if (!v || x->dtype == CG_I64)
        return v;
    cg_tensor *out = cg_k_to(v, x->dtype); /* exact: the range fits */
    cg_release(v);
    return out;
}

bool cg_rand_like_range_ok(const char *op, cg_dtype dt, int64_t low, int64_t high)
{
    int64_t lo, hi; /* the dtype's exact integers */
    switch (dt) {
    case CG_I64: return true;
    case CG_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case CG_F32: lo = -(INT64_C(1) << 24), hi = INT64_C(1) << 24; break;
    default:
        cg_set_error("%s: x is %s, expected int64, int32 or float32", op, cg_dtype_name(dt));
        return false;
    }
    if (low < lo || high - 1 > hi) {
        cg_set_error("%s: [%lld, %lld) does not fit %s (its exact integers are [%lld, %lld])", op,
                     (long long)low, (long long)high, cg_dtype_name(dt), (long long)lo,
                     (long long)hi);
        return false;
    }
    return true;
}

/* -------------------------------------------------------------- normal */
/* mean and std float32 of broadcastable shapes, every std >= 0; the
 * shape of the result into shape, its ndim returned (-1 + error) */
int cg_rand_normal_args(const char *op, const cg_tensor *mean, const cg_tensor *std, int64_t *shape)
{
    if (!cg_check_f32(op, "mean", mean) || !cg_check_f32(op, "std", std))
        return -1;
    const int nd = cg_broadcast_shapes(op, mean->ndim, mean->shape, std->ndim, std->shape, shape);
    cg_tensor *s = nd >= 0 ? cg_k_contiguous(std) : NULL;
    const bool ok = s && cg_rand_std_ok(op, cg_data(s), cg_numel(s));
    cg_release(s);
    return ok ? nd : -1;
}

/* z * std + mean, z released: PyTorch's mul_ then add_ */
cg_tensor *cg_rand_normal_finish(cg_tensor *z, const cg_tensor *mean, const cg_tensor *std)
{
    cg_tensor *zs = z ? cg_k_mul(z, std) : NULL;
    cg_tensor *out = zs ? cg_k_add(zs, mean) : NULL;
    cg_release_all(2, z, zs);
    return out;
}

cg_tensor *cg_normal(cg_rng *r, const cg_tensor *mean, const cg_tensor *std)
{
    if (!have("normal", mean && std ? mean : NULL, r))
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_rand_normal_args("normal", mean, std, shape);
    return nd < 0 ? NULL : cg_rand_normal_finish(cg_randn(r, nd, shape), mean, std);
}

/* ------------------------------------------------------------- poisson */
typedef struct {
    uint64_t key, base;
    const float *rate;
    float *out;
} pois_job;

static void pois_chunk(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const pois_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        elem_stream s = elem_stream_of(cg_rng_draw(j->key, j->base + (uint64_t)i));
        j->out[i] = (float)cg_rand_poisson((double)j->rate[i], stream_unit, &s);
    }
}

cg_tensor *cg_poisson(cg_rng *r, const cg_tensor *rates)
{
    if (!have("poisson", rates, r) || !cg_check_f32("poisson", "rates", rates))
        return NULL;
    cg_tensor *rc = cg_k_contiguous(rates);
    const int64_t n = cg_numel(rates);
    cg_tensor *out = rc && cg_rand_rates_ok("poisson", cg_data(rc), n)
                         ? cg_empty(rates->ndim, rates->shape)
                         : NULL;
    if (out) {
        const pois_job j = {cg_rng_key(r->seed), cg_rng_take(r, (uint64_t)n), cg_data(rc),
                            cg_data(out)};
        cg_shares_run(n, 256, rand_team(n * 16), pois_chunk, &j);
    }
    cg_release(rc);
    return out;
}

/* --------------------------------------------------------- multinomial */
typedef struct {
    uint64_t key, base;
    const float *p;
    int64_t n, ns;
    double *work; /* per row: n cumulative sums, or n scores and n indices */
    int64_t *out;
} multi_job;

/* Row b with replacement: sample s is the first category whose cumulative
 * weight exceeds u * total (one of weight 0 never does: its cumulative is
 * its predecessor's) */
static void multi_row_repl(const multi_job *j, int64_t b)
{
    const float *p = j->p + b * j->n;
    double *cum = j->work + b * j->n, total = 0;
    int64_t last = 0; /* the last category of nonzero weight */
    for (int64_t c = 0; c < j->n; c++) {
        total += p[c];
        cum[c] = total;
        last = p[c] > 0 ? c : last;
    }
    for (int64_t s = 0; s < j->ns; s++) {
        const double t = unit53(cg_rng_draw(j->key, j->base + (uint64_t)(b * j->ns + s))) * total;
        int64_t lo = 0, hi = j->n;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (cum[mid] > t)
                hi = mid;
            else
                lo = mid + 1;
        }
        j->out[b * j->ns + s] = lo < j->n ? lo : last; /* u t rounded up to total */
    }
}

typedef struct {
    double score;
    int64_t c;
} multi_score;

static int score_order(const void *x, const void *y)
{
    const multi_score *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return (a->c > b->c) - (a->c < b->c);
}

/* Row b without replacement: the exponential race, the ns highest scores
 * w / E (E ~ Exp(1)); weight 0 scores -1, below every other */
static void multi_row_race(const multi_job *j, int64_t b)
{
    const float *p = j->p + b * j->n;
    multi_score *sc = (multi_score *)(j->work + 2 * b * j->n);
    for (int64_t c = 0; c < j->n; c++) {
        const double u = unit53(cg_rng_draw(j->key, j->base + (uint64_t)(b * j->n + c)));
        const double e = -log1p(-u);
        sc[c] = (multi_score){p[c] > 0 ? (double)p[c] / e : -1.0, c}; /* e = 0: inf, first */
    }
    qsort(sc, (size_t)j->n, sizeof *sc, score_order);
    for (int64_t s = 0; s < j->ns; s++)
        j->out[b * j->ns + s] = sc[s].c;
}

static void multi_repl_chunk(int64_t b0, int64_t b1, int thread, const void *ctx)
{
    (void)thread;
    for (int64_t b = b0; b < b1; b++)
        multi_row_repl(ctx, b);
}

static void multi_race_chunk(int64_t b0, int64_t b1, int thread, const void *ctx)
{
    (void)thread;
    for (int64_t b = b0; b < b1; b++)
        multi_row_race(ctx, b);
}

cg_tensor *cg_multinomial_tensor(cg_rng *r, const cg_tensor *probs, int64_t num_samples,
                                 bool replacement)
{
    const char *op = "multinomial";
    int64_t rows, n;
    if (!have(op, probs, r) ||
        !cg_rand_multinomial_shape_ok(op, probs, num_samples, replacement, &rows, &n))
        return NULL;
    cg_tensor *pf = cg_rand_floats(op, probs);
    if (!pf || !cg_rand_multinomial_ok(op, probs, cg_data(pf), num_samples, replacement)) {
        cg_release(pf);
        return NULL;
    }
    const int64_t oshape[2] = {rows, num_samples};
    cg_tensor *out = probs->ndim == 1 ? cg_empty_dtype(CG_I64, 1, &num_samples)
                                      : cg_empty_dtype(CG_I64, 2, oshape);
    double *work = out ? malloc((size_t)(rows * n * 2 + 1) * sizeof *work) : NULL;
    if (out && !work) {
        cg_set_error("%s: out of memory for %lld x %lld categories", op, (long long)rows,
                     (long long)n);
        cg_release(out);
        out = NULL;
    }
    if (out) {
        const uint64_t draws = (uint64_t)(rows * (replacement ? num_samples : n));
        const multi_job j = {
            cg_rng_key(r->seed), cg_rng_take(r, draws), cg_data(pf), n, num_samples, work,
            cg_data_i64(out)};
        cg_shares_run(rows, 1, rand_team(rows * n),
                      replacement ? multi_repl_chunk : multi_race_chunk, &j);
    }
    free(work);
    cg_release(pf);
    return out;
}

/* The shape checks of multinomial, in PyTorch's order and words */
bool cg_rand_multinomial_shape_ok(const char *op, const cg_tensor *probs, int64_t num_samples,
                                  bool replacement, int64_t *rows, int64_t *n)
{
    char b[96];
    if (probs->ndim < 1 || probs->ndim > 2) {
        cg_set_error("%s: prob_dist must be 1 or 2 dim (got shape %s)", op,
                     cg_shape_str(probs, b, sizeof b));
        return false;
    }
    *n = probs->shape[probs->ndim - 1];
    *rows = probs->ndim == 2 ? probs->shape[0] : 1;
    if (num_samples <= 0) {
        cg_set_error("%s: cannot sample n_sample <= 0 samples (got %lld)", op,
                     (long long)num_samples);
        return false;
    }
    if (!replacement && num_samples > *n) {
        cg_set_error("%s: cannot sample n_sample > prob_dist.size(-1) samples without "
                     "replacement (%lld > %lld)",
                     op, (long long)num_samples, (long long)*n);
        return false;
    }
    if (*n > (INT64_C(1) << 24)) {
        cg_set_error("%s: number of categories cannot exceed 2^24 (got %lld)", op, (long long)*n);
        return false;
    }
    if (*rows > 0 && num_samples > CG_MAX_NUMEL / *rows) { /* the result's size */
        cg_set_error("%s: %lld rows of %lld samples are too many", op, (long long)*rows,
                     (long long)num_samples);
        return false;
    }
    return true;
}

/* The weights of each row: finite, >= 0, a total > 0 and, without
 * replacement, at least num_samples of them nonzero */
bool cg_rand_multinomial_ok(const char *op, const cg_tensor *probs, const float *p,
                            int64_t num_samples, bool replacement)
{
    const int64_t n = probs->shape[probs->ndim - 1], rows = probs->ndim == 2 ? probs->shape[0] : 1;
    for (int64_t b = 0; b < (n ? rows : 0); b++) {
        int64_t nonzero = 0;
        for (int64_t c = 0; c < n; c++) {
            const float w = p[b * n + c];
            if (!(w >= 0.0f) || isinf(w)) {
                cg_set_error("%s: invalid multinomial distribution (encountering probability "
                             "entry %s): row %lld, category %lld is %g",
                             op, isnan(w) || isinf(w) ? "= infinity or NaN" : "< 0", (long long)b,
                             (long long)c, (double)w);
                return false;
            }
            nonzero += w > 0.0f;
        }
        if (nonzero == 0) {
            cg_set_error("%s: invalid multinomial distribution (sum of probabilities <= 0) in "
                         "row %lld",
                         op, (long long)b);
            return false;
        }
        if (!replacement && num_samples > nonzero) {
            cg_set_error("%s: cannot draw %lld samples without replacement from row %lld, which "
                         "has %lld categories of nonzero probability",
                         op, (long long)num_samples, (long long)b, (long long)nonzero);
            return false;
        }
    }
    if (n == 0 && rows > 0) { /* with replacement (without: n_sample > 0 = n) */
        cg_set_error("%s: invalid multinomial distribution (sum of probabilities <= 0): no "
                     "categories",
                     op);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ randperm */
cg_tensor *cg_randperm_tensor(cg_rng *r, int64_t n)
{
    int64_t *p = cg_randperm(r, n);
    if (!p)
        return NULL;
    cg_tensor *t = cg_from_i64(1, &n, p);
    free(p);
    return t;
}
