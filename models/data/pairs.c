/* Sentence-pair data for the seq2seq model (see pairs.h). */
#include "models/data/pairs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/text/vocab.h"
#include "models/util/files.h"
#include "core/utf8.h"

/* ------------------------------------------------------------ MT19937 */
/* numpy random_interval(max): uniform in [0, max] by masked rejection. */
static uint64_t mt_interval(cg_mt19937 *r, uint64_t max)
{
    if (max == 0)
        return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t v;
    if (max <= 0xffffffffu) {
        while ((v = (cg_mt19937_next(r) & mask)) > max) {
        }
    } else {
        do {
            uint64_t hi = cg_mt19937_next(r), lo = cg_mt19937_next(r);
            v = ((hi << 32) | lo) & mask;
        } while (v > max);
    }
    return v;
}

void cg_mt_permutation(cg_mt19937 *r, int64_t n, int64_t *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = i;
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)mt_interval(r, (uint64_t)i);
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

/* ------------------------------------------------------------ pairs */
void cg_pairs_free(cg_pairs *p)
{
    if (!p)
        return;
    free(p->items);
    free(p->buf);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

static bool pairs_push(cg_pairs *p, char *src, char *tgt, int64_t sl, int64_t tl)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 1024;
        cg_pair *it = realloc(p->items, (size_t)cap * sizeof *it);
        if (!it) {
            cg_set_error("pairs: out of memory");
            return false;
        }
        p->items = it;
        p->cap = cap;
    }
    p->items[p->n++] = (cg_pair){src, tgt, (int32_t)sl, (int32_t)tl, NULL, NULL};
    return true;
}

/* s[0..n) holds only ASCII white space (a side that tokenizes to nothing). */
static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \r\v\f", s[i]) || !s[i])
            return false;
    return true;
}

/* A malloc'd copy of text[0..*len) as Python's text mode reads it: "\r\n"
 * and a lone "\r" become "\n". *len becomes the copy's length, and a NUL
 * follows it. NULL: out of memory. */
static char *text_mode_copy(const char *text, size_t *len)
{
    char *buf = malloc(*len + 1);
    if (!buf)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < *len; i++) {
        if (text[i] == '\r') {
            buf[w++] = '\n';
            if (i + 1 < *len && text[i + 1] == '\n')
                i++;
        } else {
            buf[w++] = text[i];
        }
    }
    *len = w;
    buf[w] = '\0';
    return buf;
}

/* Line `line` of name, start[0..llen) (a NUL after it), checked and cut at
 * its tab into a pair appended to out. False + error naming the line. */
static bool parse_pair_line(cg_pairs *out, char *start, size_t llen, const char *name, int64_t line)
{
    if (memchr(start, '\0', llen)) {
        cg_set_error("%s:%lld: NUL byte in line", name, (long long)line);
        return false;
    }
    size_t bad;
    if (cg_utf8_count(start, llen, &bad) < 0) {
        cg_set_error("%s:%lld: not valid UTF-8 (byte 0x%02x at column %zu)", name, (long long)line,
                     (unsigned)(unsigned char)start[bad], bad + 1);
        return false;
    }
    char *tab = memchr(start, '\t', llen);
    if (!tab) {
        cg_set_error("%s:%lld: missing tab (expected \"source<TAB>target\")", name,
                     (long long)line);
        return false;
    }
    if (memchr(tab + 1, '\t', llen - (size_t)(tab + 1 - start))) {
        cg_set_error("%s:%lld: more than one tab (expected \"source<TAB>target\")", name,
                     (long long)line);
        return false;
    }
    if (tab == start || tab + 1 == start + llen) {
        cg_set_error("%s:%lld: empty %s (expected \"source<TAB>target\" with text on both "
                     "sides)",
                     name, (long long)line, tab == start ? "source" : "target");
        return false;
    }
    bool blank_src = blank(start, (size_t)(tab - start));
    if (blank_src || blank(tab + 1, llen - (size_t)(tab + 1 - start))) {
        cg_set_error("%s:%lld: the %s holds only spaces (expected \"source<TAB>target\" with "
                     "text on both sides)",
                     name, (long long)line, blank_src ? "source" : "target");
        return false;
    }
    *tab = '\0';
    char *tgt = tab + 1;
    int64_t sl = cg_utf8_count(start, (size_t)(tab - start), NULL);
    int64_t tl = cg_utf8_count(tgt, strlen(tgt), NULL);
    if (sl > INT32_MAX || tl > INT32_MAX) {
        cg_set_error("%s:%lld: line too long", name, (long long)line);
        return false;
    }
    return pairs_push(out, start, tgt, sl, tl);
}

bool cg_pairs_parse(const char *text, size_t len, const char *name, cg_pairs *out)
{
    memset(out, 0, sizeof *out);
    if (!name)
        name = "<pairs>";
    if (!text) {
        cg_set_error("%s: no text", name);
        return false;
    }
    if (len == 0) {
        cg_set_error("%s: empty file (expected lines \"source<TAB>target\")", name);
        return false;
    }
    char *buf = text_mode_copy(text, &len);
    if (!buf) {
        cg_set_error("%s: out of memory", name);
        return false;
    }
    out->buf = buf;
    size_t pos = 0;
    int64_t line = 0;
    while (pos < len) {
        line++;
        char *start = buf + pos;
        char *nl = memchr(start, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - start) : len - pos;
        pos += llen + (nl ? 1 : 0);
        start[llen] = '\0';
        if (!parse_pair_line(out, start, llen, name, line))
            goto fail;
    }
    if (out->n == 0) {
        cg_set_error("%s: no pairs", name);
        goto fail;
    }
    return true;
fail:
    cg_pairs_free(out);
    return false;
}

bool cg_pairs_read(const char *path, cg_pairs *out, cg_data_id *id)
{
    memset(out, 0, sizeof *out);
    size_t n;
    char *buf = cg_read_file_once(path, 0, true, &n);
    if (!buf)
        return false;
    if (id)
        cg_data_id_of(path, buf, n, id);
    bool ok = cg_pairs_parse(buf, n, path, out);
    free(buf);
    return ok;
}

void cg_pair_split_free(cg_pair_split *s)
{
    if (!s)
        return;
    free(s->train);
    free(s->valid);
    free(s->test);
    memset(s, 0, sizeof *s);
}

bool cg_pairs_split(const cg_pairs *p, int64_t n_valid, int64_t n_test, cg_pair_split *out)
{
    memset(out, 0, sizeof *out);
    if (n_valid < 0 || n_test < 0 || p->n <= n_valid + n_test) {
        cg_set_error("split: %lld pairs are too few for %lld validation + %lld test pairs and "
                     "a training set",
                     (long long)p->n, (long long)n_valid, (long long)n_test);
        return false;
    }
    int64_t *perm = malloc((size_t)p->n * sizeof *perm);
    cg_mt19937 r;
    if (!perm) {
        cg_set_error("split: out of memory");
        return false;
    }
    cg_mt19937_seed(&r, 0);
    cg_mt_permutation(&r, p->n, perm);
    out->n_train = p->n - n_valid - n_test;
    out->n_valid = n_valid;
    out->n_test = n_test;
    out->train = malloc((size_t)out->n_train * sizeof(int64_t));
    out->valid = malloc((size_t)(n_valid ? n_valid : 1) * sizeof(int64_t));
    out->test = malloc((size_t)(n_test ? n_test : 1) * sizeof(int64_t));
    if (!out->train || !out->valid || !out->test) {
        free(perm);
        cg_pair_split_free(out);
        cg_set_error("split: out of memory");
        return false;
    }
    memcpy(out->train, perm, (size_t)out->n_train * sizeof(int64_t));
    memcpy(out->valid, perm + out->n_train, (size_t)n_valid * sizeof(int64_t));
    memcpy(out->test, perm + out->n_train + n_valid, (size_t)n_test * sizeof(int64_t));
    free(perm);
    return true;
}

bool cg_pairs_load(const char *path, int64_t n_valid, int64_t n_test, cg_pairs *p,
                   cg_pair_split *split, cg_data_id *id)
{
    memset(split, 0, sizeof *split);
    if (!cg_pairs_read(path, p, id))
        return false;
    if (cg_pairs_split(p, n_valid, n_test, split))
        return true;
    cg_prefix_error("%s: ", path);
    cg_pairs_free(p);
    return false;
}

int64_t cg_pairs_filter(const cg_pairs *p, int64_t *idx, int64_t n, int64_t max_chars)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &p->items[idx[i]];
        if (q->src_len <= max_chars && q->tgt_len <= max_chars)
            idx[k++] = idx[i];
    }
    return k;
}

int64_t cg_pairs_warn_unknown(const cg_pairs *p, const int64_t *idx, int64_t n,
                              const cg_pair_vocab *v, const char *prog, const char *what)
{
    int64_t unk = 0;
    uint32_t first = 0;
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &p->items[idx ? idx[i] : i];
        uint32_t f1 = 0, f2 = 0;
        int64_t a = cg_pair_vocab_count_unknown(v, q->src, &f1),
                b = cg_pair_vocab_count_unknown(v, q->tgt, &f2);
        if (unk == 0 && a + b > 0)
            first = a ? f1 : f2;
        unk += a + b;
    }
    if (unk > 0 && prog)
        cg_warn_unknown_chars(prog, what, unk, first, "<unk>");
    return unk;
}

bool cg_pair_vocab_build(const cg_pairs *p, const int64_t *idx, int64_t n, cg_pair_vocab *out)
{
    /* the same set of characters whatever the order: both sides of each pair */
    const char **texts = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof *texts);
    if (!texts) {
        memset(out, 0, sizeof *out);
        cg_set_error("vocab: out of memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &p->items[idx ? idx[i] : i];
        texts[2 * i] = q->src;
        texts[2 * i + 1] = q->tgt;
    }
    bool ok = cg_pair_vocab_from_texts(texts, 2 * n, out);
    free(texts);
    return ok;
}

/* ---------------------------------------------------------- batches */
void cg_batches_free(cg_batches *b)
{
    if (!b)
        return;
    free(b->idx);
    free(b->start);
    memset(b, 0, sizeof *b);
}

/* stable merge sort of indices by (tgt_len, src_len) */
static bool pair_less(const cg_pairs *p, int64_t a, int64_t b)
{
    const cg_pair *x = &p->items[a], *y = &p->items[b];
    if (x->tgt_len != y->tgt_len)
        return x->tgt_len < y->tgt_len;
    return x->src_len < y->src_len;
}

static void merge_sort(const cg_pairs *p, int64_t *a, int64_t *tmp, int64_t n)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    merge_sort(p, a, tmp, h);
    merge_sort(p, a + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = pair_less(p, a[j], a[i]) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

bool cg_make_batches(const cg_pairs *p, const int64_t *idx, int64_t n, int64_t max_tokens,
                     cg_batches *out)
{
    memset(out, 0, sizeof *out);
    if (max_tokens < 1) {
        cg_set_error("batches: max_tokens must be >= 1 (got %lld)", (long long)max_tokens);
        return false;
    }
    out->idx = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    out->start = malloc((size_t)(n + 2) * sizeof(int64_t));
    if (!out->idx || !tmp || !out->start) {
        free(tmp);
        cg_batches_free(out);
        cg_set_error("batches: out of memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++)
        out->idx[i] = idx ? idx[i] : i;
    merge_sort(p, out->idx, tmp, n);
    free(tmp);
    /* the reference: a batch is cut when adding the next pair would exceed
     * max_tokens; the (possibly empty) last batch is always appended */
    int64_t nb = 0, count = 0, S = 0, T = 0;
    out->start[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &p->items[out->idx[i]];
        int64_t S2 = S > q->src_len + 1 ? S : q->src_len + 1;
        int64_t T2 = T > q->tgt_len + 1 ? T : q->tgt_len + 1;
        if (count > 0 && (count + 1) * (S2 + T2) > max_tokens) {
            out->start[++nb] = i;
            count = 0;
            S2 = q->src_len + 1;
            T2 = q->tgt_len + 1;
        }
        count++;
        S = S2;
        T = T2;
    }
    if (count > 0)
        out->start[++nb] = n;
    out->n_batches = nb;
    return true;
}

void cg_batch_free(cg_batch *b)
{
    if (!b)
        return;
    free(b->src);
    free(b->tgt_in);
    free(b->tgt_out);
    memset(b, 0, sizeof *b);
}

/* rows [B, from] of ids widened to [B, to] with pad after each row's ids */
static int64_t *pad_rows(const int64_t *ids, int64_t B, int64_t from, int64_t to)
{
    int64_t *w = calloc((size_t)(B * to > 0 ? B * to : 1), sizeof *w);
    if (w) /* calloc's zeros are CG_PAIR_PAD */
        for (int64_t i = 0; i < B; i++)
            memcpy(w + i * to, ids + i * from, (size_t)from * sizeof *w);
    return w;
}

static int64_t round_up(int64_t n, int64_t multiple, int64_t limit)
{
    int64_t r = (n + multiple - 1) / multiple * multiple;
    return limit > 0 && r > limit ? (n > limit ? n : limit) : r;
}

bool cg_batch_pad_to(cg_batch *b, int64_t multiple, int64_t limit)
{
    if (multiple < 1) {
        cg_set_error("batch: pad to a multiple of %lld (need 1 or more)", (long long)multiple);
        return false;
    }
    int64_t S = round_up(b->S, multiple, limit), T = round_up(b->T, multiple, limit);
    if (S == b->S && T == b->T)
        return true;
    int64_t *src = pad_rows(b->src, b->B, b->S, S);
    int64_t *ti = pad_rows(b->tgt_in, b->B, b->T, T);
    int64_t *to = pad_rows(b->tgt_out, b->B, b->T, T);
    if (!src || !ti || !to) {
        free(src);
        free(ti);
        free(to);
        cg_set_error("batch: out of memory");
        return false;
    }
    free(b->src);
    free(b->tgt_in);
    free(b->tgt_out);
    b->src = src;
    b->tgt_in = ti;
    b->tgt_out = to;
    b->S = S;
    b->T = T;
    return true;
}

static int64_t *pair_vocab_encode(const void *v, const char *s, int64_t *n, int64_t *n_unk)
{
    return cg_pair_vocab_encode(v, s, n, n_unk);
}

bool cg_batch_make(const cg_pairs *p, const int64_t *idx, int64_t n, const cg_pair_vocab *v,
                   cg_batch *out)
{
    return cg_batch_make_with(p, idx, n, pair_vocab_encode, v, out);
}

/* ids of one side, at most len of them, its recorded length (else an
 * error: the encoder is not the one that recorded it): the stored ones (a
 * copy) or the text encoded */
static int64_t *encode_side(cg_encode_fn enc, const void *ctx, const char *s, const int64_t *stored,
                            int64_t len, int64_t *k)
{
    int64_t *ids;
    if (stored) {
        ids = malloc((size_t)(len > 0 ? len : 1) * sizeof *ids);
        if (!ids) {
            cg_set_error("batch: out of memory");
            return NULL;
        }
        if (len > 0)
            memcpy(ids, stored, (size_t)len * sizeof *ids);
        *k = len;
    } else
        ids = enc(ctx, s, k, NULL);
    if (ids && *k > len) {
        cg_set_error("batch: a sentence encodes to %lld ids, more than its recorded length %lld",
                     (long long)*k, (long long)len);
        free(ids);
        return NULL;
    }
    return ids;
}

bool cg_batch_make_with(const cg_pairs *p, const int64_t *idx, int64_t n, cg_encode_fn enc,
                        const void *ctx, cg_batch *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1) {
        cg_set_error("batch: no pairs");
        return false;
    }
    int64_t S = 0, T = 0;
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &p->items[idx[i]];
        if (q->src_len + 1 > S)
            S = q->src_len + 1;
        if (q->tgt_len + 1 > T)
            T = q->tgt_len + 1;
    }
    out->B = n;
    out->S = S;
    out->T = T;
    out->src = calloc((size_t)(n * S), sizeof(int64_t));
    out->tgt_in = calloc((size_t)(n * T), sizeof(int64_t));
    out->tgt_out = calloc((size_t)(n * T), sizeof(int64_t));
    if (!out->src || !out->tgt_in || !out->tgt_out) {
        cg_batch_free(out);
        cg_set_error("batch: out of memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &p->items[idx[i]];
        int64_t k, *ids = encode_side(enc, ctx, q->src, q->src_ids, q->src_len, &k);
        if (!ids) {
            cg_batch_free(out);
            return false;
        }
        memcpy(out->src + i * S, ids, (size_t)k * sizeof(int64_t));
        out->src[i * S + k] = CG_PAIR_EOS;
        free(ids);
        ids = encode_side(enc, ctx, q->tgt, q->tgt_ids, q->tgt_len, &k);
        if (!ids) {
            cg_batch_free(out);
            return false;
        }
        out->tgt_in[i * T] = CG_PAIR_BOS;
        memcpy(out->tgt_in + i * T + 1, ids, (size_t)k * sizeof(int64_t));
        memcpy(out->tgt_out + i * T, ids, (size_t)k * sizeof(int64_t));
        out->tgt_out[i * T + k] = CG_PAIR_EOS;
        out->n_tokens += k + 1;
        free(ids);
    }
    return true;
}
