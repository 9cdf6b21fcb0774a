/* Corpus BLEU and chrF as sacreBLEU 2.x computes them by default; see
 * metrics.h and shared/reference/metrics.py, which this follows step by step
 * (including the order of floating-point operations, so that the two agree
 * to the last bits). */
#include "models/report/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"

/* ------------------------------------------------------------ buffers */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} u32vec;

static bool u32_reserve(u32vec *a, size_t want)
{
    if (want <= a->cap)
        return true;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < want)
        cap *= 2;
    uint32_t *v = realloc(a->v, cap * sizeof *v);
    if (!v)
        return false;
    a->v = v;
    a->cap = cap;
    return true;
}

static bool u32_push(u32vec *a, uint32_t c)
{
    if (a->n == a->cap && !u32_reserve(a, a->n + 1))
        return false;
    a->v[a->n++] = c;
    return true;
}

static void u32_free(u32vec *a)
{
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* ------------------------------------------------------------ Unicode */

/* Decode UTF-8 into code points. A byte that does not start a valid sequence
 * becomes U+DC80..U+DCFF (Python's 'surrogateescape'). */
static bool utf8_decode(const unsigned char *s, size_t len, u32vec *out)
{
    out->n = 0;
    if (!u32_reserve(out, len + 1))
        return false;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = cg_utf8_seq(s + i, len - i, &cp);
        if (k == 0) {
            cp = 0xDC00u + s[i];
            k = 1;
        }
        out->v[out->n++] = cp;
        i += (size_t)k;
    }
    return true;
}

/* Append code point cp to a byte string as UTF-8 (escaped bytes come back
 * as the byte they stood for). */
static size_t utf8_encode(uint32_t cp, char *dst)
{
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
        dst[0] = (char)(cp - 0xDC00);
        return 1;
    }
    return (size_t)cg_utf8_put(cp, dst);
}

/* Exactly the code points Python's str.isspace() / str.split() treat as
 * whitespace. */
static bool py_isspace(uint32_t c)
{
    if (c <= 0x20)
        return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    if (c < 0x85)
        return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* ------------------------------------------------------------ 13a */

/* Replace every non-overlapping occurrence of `from` in s (left to right, as
 * str.replace does). Returns a new string (s is freed) or NULL. */
static char *replace_all(char *s, const char *from, const char *to)
{
    size_t lf = strlen(from), lt = strlen(to), count = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + lf, from))
        count++;
    if (count == 0)
        return s;
    size_t ls = strlen(s);
    char *out = malloc(ls - count * lf + count * lt + 1);
    if (!out) {
        free(s);
        return NULL;
    }
    char *d = out;
    const char *p = s;
    for (const char *q = strstr(p, from); q; q = strstr(p, from)) {
        memcpy(d, p, (size_t)(q - p));
        d += q - p;
        memcpy(d, to, lt);
        d += lt;
        p = q + lf;
    }
    strcpy(d, p);
    free(s);
    return out;
}

/* Characters the first 13a rule surrounds with spaces: ASCII punctuation
 * except ' , - . (and the space itself, which changes nothing). */
static bool is_13a_punct(uint32_t c)
{
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

typedef struct {
    u32vec cp;    /* the tokenised line as code points */
    u32vec tmp;   /* scratch */
    u32vec start; /* token i is cp.v[start.v[i] .. start.v[i] + len.v[i]) */
    u32vec len;
} tok13a;

static void tok_free(tok13a *t)
{
    u32_free(&t->cp);
    u32_free(&t->tmp);
    u32_free(&t->start);
    u32_free(&t->len);
}

static bool push4(u32vec *o, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    if (!u32_reserve(o, o->n + 4))
        return false;
    o->v[o->n++] = a;
    o->v[o->n++] = b;
    o->v[o->n++] = c;
    o->v[o->n++] = d;
    return true;
}

/* The three two-character 13a rules, each applied as re.sub does: scan left
 * to right and where (s[i], s[i+1]) matches, emit the replacement and go on
 * after both characters. */
enum { RULE_DOT_AFTER, RULE_DOT_BEFORE, RULE_DASH_AFTER_DIGIT };

static bool pair_rule_matches(int rule, uint32_t a, uint32_t b)
{
    switch (rule) {
    case RULE_DOT_AFTER: /* ([^0-9])([\.,]) -> "\1 \2 " */
        return !is_digit(a) && (b == '.' || b == ',');
    case RULE_DOT_BEFORE: /* ([\.,])([^0-9]) -> " \1 \2" */
        return (a == '.' || a == ',') && !is_digit(b);
    default: /* ([0-9])(-) -> "\1 \2 " */ return is_digit(a) && b == '-';
    }
}

static bool apply_pair_rule(int rule, const u32vec *in, u32vec *out)
{
    out->n = 0;
    if (!u32_reserve(out, in->n * 2 + 1))
        return false;
    const uint32_t *s = in->v;
    size_t n = in->n, i = 0;
    while (i < n) {
        if (i + 1 < n && pair_rule_matches(rule, s[i], s[i + 1])) {
            bool ok = rule == RULE_DOT_BEFORE ? push4(out, ' ', s[i], ' ', s[i + 1])
                                              : push4(out, s[i], ' ', s[i + 1], ' ');
            if (!ok)
                return false;
            i += 2;
        } else {
            if (!u32_push(out, s[i]))
                return false;
            i++;
        }
    }
    return true;
}

static bool tokenize_13a(const char *line, tok13a *t)
{
    size_t ll = strlen(line);
    char *s = malloc(ll + 3);
    if (!s)
        return false;
    memcpy(s, line, ll + 1);
    if (!(s = replace_all(s, "<skipped>", "")) || !(s = replace_all(s, "-\n", "")) ||
        !(s = replace_all(s, "\n", " ")))
        return false;
    if (strchr(s, '&')) {
        if (!(s = replace_all(s, "&quot;", "\"")) || !(s = replace_all(s, "&amp;", "&")) ||
            !(s = replace_all(s, "&lt;", "<")) || !(s = replace_all(s, "&gt;", ">")))
            return false;
    }
    /* " line " and rule 1: punctuation gets spaces around it. */
    bool ok = utf8_decode((const unsigned char *)s, strlen(s), &t->tmp);
    free(s);
    if (!ok)
        return false;
    t->cp.n = 0;
    if (!u32_reserve(&t->cp, t->tmp.n * 3 + 2))
        return false;
    t->cp.v[t->cp.n++] = ' ';
    for (size_t i = 0; i < t->tmp.n; i++) {
        uint32_t c = t->tmp.v[i];
        if (is_13a_punct(c)) {
            t->cp.v[t->cp.n++] = ' ';
            t->cp.v[t->cp.n++] = c;
            t->cp.v[t->cp.n++] = ' ';
        } else {
            t->cp.v[t->cp.n++] = c;
        }
    }
    t->cp.v[t->cp.n++] = ' ';
    /* rules 2-4, each a pass over the previous result */
    if (!apply_pair_rule(RULE_DOT_AFTER, &t->cp, &t->tmp) ||
        !apply_pair_rule(RULE_DOT_BEFORE, &t->tmp, &t->cp) ||
        !apply_pair_rule(RULE_DASH_AFTER_DIGIT, &t->cp, &t->tmp))
        return false;
    u32vec tmp = t->cp;
    t->cp = t->tmp;
    t->tmp = tmp;
    /* split() */
    t->start.n = t->len.n = 0;
    size_t i = 0, n = t->cp.n;
    while (i < n) {
        while (i < n && py_isspace(t->cp.v[i]))
            i++;
        if (i == n)
            break;
        size_t j = i;
        while (j < n && !py_isspace(t->cp.v[j]))
            j++;
        if (!u32_push(&t->start, (uint32_t)i) || !u32_push(&t->len, (uint32_t)(j - i)))
            return false;
        i = j;
    }
    return true;
}

char *cg_tokenize_13a(const char *line)
{
    if (!line) {
        cg_set_error("cg_tokenize_13a: line is NULL");
        return NULL;
    }
    tok13a t = {0};
    if (!tokenize_13a(line, &t)) {
        tok_free(&t);
        cg_set_error("cg_tokenize_13a: out of memory");
        return NULL;
    }
    char *out = malloc(t.cp.n * 4 + t.start.n + 1);
    if (!out) {
        tok_free(&t);
        cg_set_error("cg_tokenize_13a: out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t k = 0; k < t.start.n; k++) {
        if (k)
            out[o++] = ' ';
        for (uint32_t j = 0; j < t.len.v[k]; j++)
            o += utf8_encode(t.cp.v[t.start.v[k] + j], out + o);
    }
    out[o] = '\0';
    tok_free(&t);
    return out;
}

/* ------------------------------------------------------------ n-gram matches */

/* Scratch for counting clipped n-gram matches between two sequences. */
typedef struct {
    u32vec ia, ib, tmp;
} ngram_ws;

static void ngram_ws_free(ngram_ws *w)
{
    u32_free(&w->ia);
    u32_free(&w->ib);
    u32_free(&w->tmp);
}

static int ngram_cmp(const uint32_t *s, uint32_t x, uint32_t y, int n)
{
    for (int k = 0; k < n; k++) {
        if (s[x + k] != s[y + k])
            return s[x + k] < s[y + k] ? -1 : 1;
    }
    return 0;
}

/* Sort the n-gram start positions idx[0..m) of sequence s (bottom-up merge
 * sort; tmp holds m entries). */
static void ngram_sort(const uint32_t *s, int n, uint32_t *idx, uint32_t *tmp, size_t m)
{
    uint32_t *src = idx, *dst = tmp;
    for (size_t width = 1; width < m; width *= 2) {
        for (size_t lo = 0; lo < m; lo += 2 * width) {
            size_t mid = lo + width < m ? lo + width : m;
            size_t hi = lo + 2 * width < m ? lo + 2 * width : m;
            size_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                dst[o++] = ngram_cmp(s, src[b], src[a], n) < 0 ? src[b++] : src[a++];
            while (a < mid)
                dst[o++] = src[a++];
            while (b < hi)
                dst[o++] = src[b++];
        }
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx)
        memcpy(idx, src, m * sizeof *idx);
}

/* sum over distinct n-grams g of the hypothesis of min(count_h(g), count_r(g)).
 * Returns -1 when out of memory. */
static long long ngram_matches(ngram_ws *w, const uint32_t *h, size_t nh, const uint32_t *r,
                               size_t nr, int n)
{
    if (nh < (size_t)n || nr < (size_t)n)
        return 0;
    size_t mh = nh - (size_t)n + 1, mr = nr - (size_t)n + 1;
    size_t big = mh > mr ? mh : mr;
    if (!u32_reserve(&w->ia, mh) || !u32_reserve(&w->ib, mr) || !u32_reserve(&w->tmp, big))
        return -1;
    uint32_t *ia = w->ia.v, *ib = w->ib.v;
    for (size_t i = 0; i < mh; i++)
        ia[i] = (uint32_t)i;
    for (size_t i = 0; i < mr; i++)
        ib[i] = (uint32_t)i;
    ngram_sort(h, n, ia, w->tmp.v, mh);
    ngram_sort(r, n, ib, w->tmp.v, mr);
    long long matches = 0;
    size_t a = 0, b = 0;
    while (a < mh && b < mr) {
        /* compare n-grams across the two sequences */
        int c = 0;
        for (int k = 0; k < n && c == 0; k++) {
            uint32_t x = h[ia[a] + k], y = r[ib[b] + k];
            c = x < y ? -1 : x > y ? 1 : 0;
        }
        if (c < 0) {
            a++;
        } else if (c > 0) {
            b++;
        } else {
            size_t a2 = a + 1, b2 = b + 1;
            while (a2 < mh && ngram_cmp(h, ia[a], ia[a2], n) == 0)
                a2++;
            while (b2 < mr && ngram_cmp(r, ib[b], ib[b2], n) == 0)
                b2++;
            matches += (long long)((a2 - a) < (b2 - b) ? (a2 - a) : (b2 - b));
            a = a2;
            b = b2;
        }
    }
    return matches;
}

static bool check_args(const char *fn, int n, const char *const *hyps, const char *const *refs)
{
    if (n < 0) {
        cg_set_error("%s: n = %d is negative", fn, n);
        return false;
    }
    if (n > 0 && (!hyps || !refs)) {
        cg_set_error("%s: %s is NULL", fn, hyps ? "refs" : "hyps");
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!hyps[i] || !refs[i]) {
            cg_set_error("%s: %s[%d] is NULL", fn, hyps[i] ? "refs" : "hyps", i);
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------ BLEU */

/* Map the tokens of h and r to small integer ids (equal tokens, equal ids). */
typedef struct {
    u32vec slots; /* hash table: token index + 1, 0 = empty */
    u32vec ids_h, ids_r;
} intern_ws;

static uint32_t tok_hash(const uint32_t *s, uint32_t len)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 16777619u;
    }
    return h;
}

/* Tokens of both sides are addressed as one list: 0..nh-1 from h, then r. */
static const uint32_t *tok_at(const tok13a *h, const tok13a *r, size_t i, uint32_t *len)
{
    const tok13a *t = i < h->start.n ? h : r;
    size_t k = i < h->start.n ? i : i - h->start.n;
    *len = t->len.v[k];
    return t->cp.v + t->start.v[k];
}

static bool intern_tokens(intern_ws *w, const tok13a *h, const tok13a *r)
{
    size_t total = h->start.n + r->start.n, size = 16;
    while (size < 2 * total)
        size *= 2;
    if (!u32_reserve(&w->slots, size) || !u32_reserve(&w->ids_h, h->start.n + 1) ||
        !u32_reserve(&w->ids_r, r->start.n + 1))
        return false;
    memset(w->slots.v, 0, size * sizeof *w->slots.v);
    /* the id of a token is the index of its first occurrence */
    for (size_t i = 0; i < total; i++) {
        uint32_t len, len2;
        const uint32_t *s = tok_at(h, r, i, &len);
        size_t slot = tok_hash(s, len) & (size - 1);
        uint32_t id = (uint32_t)i;
        for (;;) {
            uint32_t e = w->slots.v[slot];
            if (e == 0) {
                w->slots.v[slot] = (uint32_t)i + 1;
                break;
            }
            const uint32_t *s2 = tok_at(h, r, e - 1, &len2);
            if (len2 == len && memcmp(s, s2, len * sizeof *s) == 0) {
                id = e - 1;
                break;
            }
            slot = (slot + 1) & (size - 1);
        }
        if (i < h->start.n)
            w->ids_h.v[i] = id;
        else
            w->ids_r.v[i - h->start.n] = id;
    }
    w->ids_h.n = h->start.n;
    w->ids_r.n = r->start.n;
    return true;
}

/* The corpus counts of BLEU into st (matches, totals, lengths): false when
 * memory runs out. */
static bool bleu_counts(int n, const char *const *hyps, const char *const *refs, cg_bleu_stats *st)
{
    tok13a th = {0}, tr = {0};
    intern_ws iw = {0};
    ngram_ws nw = {0};
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        if (!tokenize_13a(hyps[i], &th) || !tokenize_13a(refs[i], &tr) ||
            !intern_tokens(&iw, &th, &tr)) {
            ok = false;
            break;
        }
        size_t lh = iw.ids_h.n, lr = iw.ids_r.n;
        st->hyp_len += (long long)lh;
        st->ref_len += (long long)lr;
        for (int g = 1; g <= 4; g++) {
            long long m = ngram_matches(&nw, iw.ids_h.v, lh, iw.ids_r.v, lr, g);
            if (m < 0) {
                ok = false;
                break;
            }
            st->matches[g - 1] += m;
            st->totals[g - 1] += lh >= (size_t)g ? (long long)(lh - (size_t)g + 1) : 0;
        }
    }
    tok_free(&th);
    tok_free(&tr);
    u32_free(&iw.slots);
    u32_free(&iw.ids_h);
    u32_free(&iw.ids_r);
    ngram_ws_free(&nw);
    return ok;
}

/* The score, precisions, brevity penalty and ratio of st's counts (in the
 * order of metrics.py's operations: the score is its to the last bit). */
void cg_bleu_finish(cg_bleu_stats *st)
{
    st->score = st->bp = st->ratio = 0.0;
    for (int g = 0; g < 4; g++)
        st->precisions[g] = 0.0;
    long long hyp_len = st->hyp_len, ref_len = st->ref_len;
    st->ratio = ref_len ? (double)hyp_len / (double)ref_len : 0.0;
    st->bp = hyp_len >= ref_len ? 1.0
             : hyp_len == 0     ? 0.0
                                : exp(1 - (double)ref_len / (double)hyp_len);
    st->score = 0.0;
    if (hyp_len == 0)
        return;
    double log_p = 0.0;
    long long k = 1;
    for (int g = 0; g < 4; g++) {
        double p;
        if (st->totals[g] == 0)
            return;                /* no g+1-grams: BLEU 0, this and the higher precisions 0 */
        if (st->matches[g] == 0) { /* 'exp' smoothing */
            k *= 2;
            p = 100.0 / (double)(k * st->totals[g]);
        } else {
            p = 100.0 * (double)st->matches[g] / (double)st->totals[g];
        }
        st->precisions[g] = p;
        log_p += log(p) / 4;
    }
    st->score = st->bp * exp(log_p);
}

bool cg_bleu_count(int n, const char *const *hyps, const char *const *refs, cg_bleu_stats *st)
{
    if (!st) {
        cg_set_error("cg_bleu: st is NULL");
        return false;
    }
    *st = (cg_bleu_stats){0};
    if (!check_args("cg_bleu", n, hyps, refs))
        return false;
    if (!bleu_counts(n, hyps, refs, st)) {
        *st = (cg_bleu_stats){0};
        cg_set_error("cg_bleu: out of memory");
        return false;
    }
    return true;
}

bool cg_bleu_compute(int n, const char *const *hyps, const char *const *refs, cg_bleu_stats *st)
{
    if (!st) {
        cg_set_error("cg_bleu_compute: st is NULL");
        return false;
    }
    if (!cg_bleu_count(n, hyps, refs, st))
        return false;
    cg_bleu_finish(st);
    return true;
}

double cg_bleu(int n, const char *const *hyps, const char *const *refs)
{
    cg_bleu_stats st;
    return cg_bleu_compute(n, hyps, refs, &st) ? st.score : -1.0;
}

/* ------------------------------------------------------------ chrF */

static bool decode_nospace(const char *s, u32vec *out)
{
    if (!utf8_decode((const unsigned char *)s, strlen(s), out))
        return false;
    size_t o = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (!py_isspace(out->v[i]))
            out->v[o++] = out->v[i];
    }
    out->n = o;
    return true;
}

bool cg_chrf_count(int n, const char *const *hyps, const char *const *refs, cg_chrf_counts *c)
{
    if (!c) {
        cg_set_error("cg_chrf: c is NULL");
        return false;
    }
    *c = (cg_chrf_counts){0};
    if (!check_args("cg_chrf", n, hyps, refs))
        return false;
    u32vec h = {0}, r = {0};
    ngram_ws nw = {0};
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        if (!decode_nospace(hyps[i], &h) || !decode_nospace(refs[i], &r)) {
            ok = false;
            break;
        }
        for (int g = 1; g <= CG_CHRF_ORDER; g++) {
            long long m = ngram_matches(&nw, h.v, h.n, r.v, r.n, g);
            if (m < 0) {
                ok = false;
                break;
            }
            c->hyp[g - 1] += h.n >= (size_t)g ? (long long)(h.n - (size_t)g + 1) : 0;
            c->ref[g - 1] += r.n >= (size_t)g ? (long long)(r.n - (size_t)g + 1) : 0;
            c->match[g - 1] += m;
        }
    }
    u32_free(&h);
    u32_free(&r);
    ngram_ws_free(&nw);
    if (!ok) {
        *c = (cg_chrf_counts){0};
        cg_set_error("cg_chrf: out of memory");
    }
    return ok;
}

double cg_chrf_score(const cg_chrf_counts *c)
{
    const double beta = 2.0, f = beta * beta;
    double prec = 0.0, rec = 0.0;
    int effective = 0;
    for (int g = 0; g < CG_CHRF_ORDER; g++) {
        long long nh = c->hyp[g], nr = c->ref[g], nm = c->match[g];
        if (nh && nr) {
            prec = prec + (double)nm / (double)nh;
            rec = rec + (double)nm / (double)nr;
            effective++;
        }
    }
    if (effective == 0)
        return 0.0;
    prec = prec / effective;
    rec = rec / effective;
    if (prec + rec == 0)
        return 0.0;
    return 100.0 * (1 + f) * prec * rec / (f * prec + rec);
}

double cg_chrf(int n, const char *const *hyps, const char *const *refs)
{
    cg_chrf_counts c;
    return cg_chrf_count(n, hyps, refs, &c) ? cg_chrf_score(&c) : -1.0;
}
