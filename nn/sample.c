/* Sampling from logits (nn/sample.h). */
#include "nn/sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/ops.h"

cg_sample_config cg_sample_default(void)
{
    return (cg_sample_config){.temperature = 1.0, .top_k = 0, .top_p = 1.0};
}

typedef struct {
    double p;
    int64_t id;
} prob_id;

/* pi[0, n) sorted by p descending, the lower id first among equals (-0
 * equal to 0), as a stable sort of that order would leave them: by a key
 * of 64 bits, the complement of p's float bits made to order as unsigned
 * integers, then the id, in eight passes of a byte (least significant
 * first). p holds floats (logits / temperature) or -inf; glibc's qsort
 * with a comparison function took 27% of sampling 4,000 ids. */
static bool sort_desc(prob_id *pi, int64_t n)
{
    uint64_t *key = malloc((size_t)n * 2 * sizeof *key);
    if (!key)
        return false;
    uint64_t *tmp = key + n;
    for (int64_t i = 0; i < n; i++) {
        const float f = (float)pi[i].p;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u = u == 0x80000000u ? 0 : u;                     /* -0 as 0 */
        u = u & 0x80000000u ? ~u : u | 0x80000000u;       /* ascending as unsigned */
        key[i] = (uint64_t)~u << 32 | (uint64_t)pi[i].id; /* descending, then by id */
    }
    for (int shift = 0; shift < 64; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++)
            count[(key[i] >> shift & 0xff) + 1]++;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (int64_t i = 0; i < n; i++)
            tmp[count[key[i] >> shift & 0xff]++] = key[i];
        uint64_t *t = key;
        key = tmp;
        tmp = t;
    }
    /* eight passes: the sorted keys are back in the first half */
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = ~(uint32_t)(key[i] >> 32);
        u = u & 0x80000000u ? u & 0x7fffffffu : ~u;
        float f;
        memcpy(&f, &u, sizeof f);
        pi[i] = (prob_id){(double)f, (int64_t)(uint32_t)key[i]};
    }
    free(key);
    return true;
}

/* The k-th largest of pi[0, n).p (0 < k < n), counting equal values, in
 * *out: the last of topk's k. */
static bool kth_largest(const prob_id *pi, int64_t n, int64_t k, double *out)
{
    cg_tensor *p = cg_empty(1, &n);
    for (int64_t i = 0; p && i < n; i++)
        cg_data(p)[i] = (float)pi[i].p; /* floats or -inf: exact */
    cg_tensor *top = p ? cg_k_topk_indices(p, k, 0, true) : NULL;
    if (top)
        *out = pi[cg_data_i64(top)[k - 1]].p;
    cg_release_all(2, p, top);
    return top != NULL;
}

bool cg_logits_usable(const float *logits, int64_t V, const char *what)
{
    /* one pass over the bits without an early exit, which vectorises
     * (decoding checks every row of every step; float compares did not):
     * NaN has the magnitude's bits above +inf's, +inf is 0x7f800000, -inf
     * (0xff800000) passes; then the first of them for the message */
    uint32_t bad = 0;
    for (int64_t i = 0; i < V; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], sizeof u);
        bad |= ((u & 0x7fffffffu) > 0x7f800000u) | (u == 0x7f800000u);
    }
    for (int64_t i = 0; bad && i < V; i++)
        if (!(logits[i] < INFINITY)) {
            cg_set_error("%s: logit %lld of %lld is %s (a diverged model?)", what, (long long)i,
                         (long long)V, isnan(logits[i]) ? "NaN" : "+inf");
            return false;
        }
    return true;
}

int64_t cg_sample(const float *logits, int64_t V, const cg_sample_config *cfg, cg_rng *rng)
{
    cg_sample_config def = cg_sample_default();
    const cg_sample_config *o = cfg ? cfg : &def;
    if (!logits || V < 1 || V > UINT32_MAX || !rng) {
        cg_set_error("sample: bad arguments (%s)", !logits || !rng ? "NULL logits or rng"
                                                   : V < 1         ? "no logits (V < 1)"
                                                                   : "more than 2^32 logits");
        return -1;
    }
    /* The field and its value: a config written {.temperature = 0.8} has
     * top_p 0, which is not "off" (1 is) */
    if (!(o->temperature >= 0) || o->top_k < 0 || !(o->top_p > 0 && o->top_p <= 1)) {
        if (!(o->temperature >= 0))
            cg_set_error("sample: temperature %g is not >= 0 (0 = greedy)", o->temperature);
        else if (o->top_k < 0)
            cg_set_error("sample: top_k %lld is negative (0 = off)", (long long)o->top_k);
        else
            cg_set_error("sample: top_p %g is not in (0, 1] (1 = off; a config whose fields "
                         "are not all set has top_p 0: start from cg_sample_default())",
                         o->top_p);
        return -1;
    }
    if (o->top_k > V) { /* torch.topk: "selected index k out of range" */
        cg_set_error("sample: top_k %lld is more than the %lld logits", (long long)o->top_k,
                     (long long)V);
        return -1;
    }
    /* -inf is a masked logit, but not every one of them */
    if (!cg_logits_usable(logits, V, "sample"))
        return -1;
    int64_t masked = 0;
    for (int64_t i = 0; i < V; i++)
        masked += logits[i] == -INFINITY;
    if (masked == V) {
        cg_set_error("sample: all %lld logits are -inf: nothing to draw", (long long)V);
        return -1;
    }
    /* greedy: temperature 0, and its limit: a temperature so small that
     * logits / temperature overflow (1e-40 is not even a normal float) */
    bool greedy = o->temperature == 0 || !((float)o->temperature >= FLT_MIN);
    prob_id *pi = greedy ? NULL : malloc((size_t)V * sizeof *pi);
    if (!greedy && !pi) {
        cg_set_error("sample: out of memory");
        return -1;
    }
    for (int64_t i = 0; !greedy && i < V; i++) {
        /* a masked logit stays masked: -inf / inf (a temperature past
         * float's range) would be NaN */
        const float l = logits[i] == -INFINITY ? -INFINITY : logits[i] / (float)o->temperature;
        pi[i] = (prob_id){(double)l, i};
        greedy = !isfinite(pi[i].p) && isfinite(logits[i]);
    }
    if (greedy) {
        free(pi);
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    /* top-k keeps every logit >= the k-th largest (ties included), in id
     * order; then the kept ones sorted by logit, descending: the order of
     * their sums and of the draw. (Sorting all V logits every token was 30%
     * of sampling a model of 4,000 ids.) */
    int64_t keep = V;
    if (o->top_k > 0 && o->top_k < V) {
        double kth;
        if (!kth_largest(pi, V, o->top_k, &kth)) {
            free(pi);
            cg_set_error("sample: out of memory");
            return -1;
        }
        keep = 0;
        for (int64_t i = 0; i < V; i++)
            if (pi[i].p >= kth)
                pi[keep++] = pi[i];
    }
    if (!sort_desc(pi, keep)) {
        free(pi);
        cg_set_error("sample: out of memory");
        return -1;
    }
    double mx = pi[0].p, sum = 0;
    for (int64_t i = 0; i < keep; i++) {
        pi[i].p = exp(pi[i].p - mx);
        sum += pi[i].p;
    }
    for (int64_t i = 0; i < keep; i++)
        pi[i].p /= sum;
    if (o->top_p < 1) {
        double cum = 0;
        int64_t k = 0;
        while (k < keep) {
            cum += pi[k].p;
            k++;
            if (cum >= o->top_p)
                break;
        }
        keep = k;
        sum = 0;
        for (int64_t i = 0; i < keep; i++)
            sum += pi[i].p;
        for (int64_t i = 0; i < keep; i++)
            pi[i].p /= sum;
    }
    /* u past the rounded total: the last kept id with mass (sorted
     * descending, a masked logit's 0 comes last) */
    int64_t last = keep - 1;
    while (last > 0 && !(pi[last].p > 0))
        last--;
    double u = cg_rng_uniform_double(rng), cum = 0;
    int64_t id = pi[last].id;
    for (int64_t i = 0; i < keep; i++) {
        cum += pi[i].p;
        if (u < cum) {
            id = pi[i].id;
            break;
        }
    }
    free(pi);
    return id;
}

cg_tensor *cg_sample_rows(const cg_tensor *logits, const cg_sample_config *cfg, cg_rng *rng)
{
    if (!logits) {
        cg_error_null_input("cg_sample_rows");
        return NULL;
    }
    if (cg_debug_enabled() && !cg_lifetime_use_ok(logits, "cg_sample_rows"))
        return NULL;
    if (!cg_dtype_is_float(logits->dtype) || logits->ndim < 1 ||
        logits->shape[logits->ndim - 1] < 1) {
        char b[96];
        cg_set_error("cg_sample_rows: logits must be a float tensor [..., V] with V >= 1 (got %s "
                     "%s)",
                     cg_dtype_name(logits->dtype), cg_shape_str(logits, b, sizeof b));
        return NULL;
    }
    int64_t V = logits->shape[logits->ndim - 1], rows = cg_numel(logits) / V;
    float *buf = malloc((size_t)cg_numel(logits) * sizeof *buf);
    cg_tensor *ids = cg_empty_dtype(CG_I64, logits->ndim - 1, logits->shape);
    int64_t *id = ids ? cg_data_i64(ids) : NULL;
    bool ok = buf && id && cg_copy_to(logits, buf);
    if (!buf)
        cg_set_error("cg_sample_rows: out of memory");
    for (int64_t r = 0; ok && r < rows; r++)
        ok = (id[r] = cg_sample(buf + r * V, V, cfg, rng)) >= 0;
    free(buf);
    if (!ok) {
        cg_release(ids);
        return NULL;
    }
    return ids;
}

int64_t cg_multinomial(const float *probs, int64_t n, cg_rng *rng)
{
    if (!probs || !rng || n < 1) {
        cg_set_error("multinomial: %s", n < 1 ? "no probabilities (n < 1)" : "NULL argument");
        return -1;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(probs[i] >= 0) || !isfinite(probs[i])) {
            cg_set_error("multinomial: probability %lld is %g (must be finite and >= 0)",
                         (long long)i, (double)probs[i]);
            return -1;
        }
        sum += probs[i];
    }
    if (sum <= 0) {
        cg_set_error("multinomial: the %lld probabilities sum to 0", (long long)n);
        return -1;
    }
    double u = cg_rng_uniform_double(rng) * sum, cum = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < n; i++) {
        if (probs[i] <= 0)
            continue;
        last = i;
        cum += probs[i];
        if (u < cum)
            return i;
    }
    return last; /* rounding: the last index with mass */
}

/* ------------------------------------------------ decoding limits */
bool cg_decode_limits_check(const cg_decode_limits *l)
{
    if (!l)
        return true;
    if (!isfinite(l->max_len_a) || l->max_len_a < 0) {
        cg_set_error("decode limits: max_len_a is %g, must be finite and >= 0", l->max_len_a);
        return false;
    }
    const struct {
        const char *name;
        int64_t v;
    } f[] = {{"max_len_b", l->max_len_b},
             {"min_len", l->min_len},
             {"no_repeat_ngram_size", l->no_repeat_ngram_size}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 0) {
            cg_set_error("decode limits: %s is %lld, must be >= 0", f[i].name, (long long)f[i].v);
            return false;
        }
    return true;
}

int64_t cg_decode_max_len(const cg_decode_limits *l, int64_t src_len, int64_t cap)
{
    if (cap <= 0)
        return 0;
    /* fairseq's int(a * src_len + b): the same double arithmetic, then
     * toward zero (floor: nothing is negative) */
    const double v = floor(l->max_len_a * (double)src_len + (double)l->max_len_b);
    if (!(v < (double)cap))
        return cap;
    return v > 0 ? (int64_t)v : 0;
}

/* -inf on every token that would complete an n-gram of hyp[0..len) again:
 * each earlier occurrence of the last n - 1 tokens bans the token that
 * followed it (n = 1: every token of hyp). Returns whether one was banned. */
static bool block_ngrams(const int64_t *hyp, int64_t len, int64_t n, float *scores, int64_t V)
{
    if (n < 1 || len < n)
        return false;
    const int64_t *tail = hyp + len - (n - 1);
    bool changed = false;
    for (int64_t i = 0; i + n <= len; i++) {
        if (n > 1 && memcmp(hyp + i, tail, (size_t)(n - 1) * sizeof *hyp) != 0)
            continue;
        const int64_t t = hyp[i + n - 1];
        if (t >= 0 && t < V && scores[t] != -INFINITY) {
            scores[t] = -INFINITY;
            changed = true;
        }
    }
    return changed;
}

cg_logit_rules cg_logit_rules_default(void)
{
    return (cg_logit_rules){.repetition_penalty = 1.0, .no_repeat_ngram_size = 0};
}

bool cg_logit_rules_check(const cg_logit_rules *r)
{
    if (!r)
        return true;
    if (!isfinite(r->repetition_penalty) || r->repetition_penalty <= 0) {
        cg_set_error("logit rules: repetition_penalty is %g, must be finite and > 0",
                     r->repetition_penalty);
        return false;
    }
    if (r->no_repeat_ngram_size < 0) {
        cg_set_error("logit rules: no_repeat_ngram_size is %lld, must be >= 0",
                     (long long)r->no_repeat_ngram_size);
        return false;
    }
    return true;
}

bool cg_logit_rules_apply(const cg_logit_rules *r, const int64_t *ids, int64_t n, float *logits,
                          int64_t V)
{
    if (!r)
        return false;
    bool changed = false;
    if (r->repetition_penalty != 1.0) {
        /* each id once, however often it occurs: a bit a vocabulary id (or,
         * with no memory for it, a scan of the ids before) */
        uint8_t *seen = calloc((size_t)(V + 7) / 8, 1);
        for (int64_t i = 0; i < n; i++) {
            const int64_t t = ids[i];
            bool done = t < 0 || t >= V;
            if (!done && seen)
                done = seen[t >> 3] >> (t & 7) & 1;
            for (int64_t j = 0; !done && !seen && j < i; j++)
                done = ids[j] == t;
            if (done)
                continue;
            if (seen)
                seen[t >> 3] |= (uint8_t)(1u << (t & 7));
            const double x = logits[t];
            float y = (float)(x < 0 ? x * r->repetition_penalty : x / r->repetition_penalty);
            changed |= y != logits[t];
            logits[t] = y;
        }
        free(seen);
    }
    return block_ngrams(ids, n, r->no_repeat_ngram_size, logits, V) || changed;
}

bool cg_decode_block(const cg_decode_limits *l, const int64_t *hyp, int64_t len, int64_t eos,
                     float *scores, int64_t V)
{
    if (!l || (l->min_len <= 0 && l->no_repeat_ngram_size <= 0))
        return false;
    const bool has_eos = eos >= 0 && eos < V;
    const float eos_score = has_eos ? scores[eos] : 0.0f;
    bool changed = false;
    if (has_eos && len < l->min_len && scores[eos] != -INFINITY) {
        scores[eos] = -INFINITY;
        changed = true;
    }
    changed |= block_ngrams(hyp, len, l->no_repeat_ngram_size, scores, V);
    if (!changed || !has_eos)
        return changed;
    for (int64_t v = 0; v < V; v++)
        if (scores[v] != -INFINITY)
            return true;
    scores[eos] = eos_score; /* nothing left: the hypothesis may end */
    return true;
}
