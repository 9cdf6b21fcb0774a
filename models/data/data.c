/* cgrad zoo: character corpus (see data.h). */
#include "models/data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

cg_corpus *cg_corpus_new(const cg_vocab *vocab, const uint32_t *cps, int64_t n)
{
    cg_corpus *c = calloc(1, sizeof *c);
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!c || !ids) {
        free(c);
        free(ids);
        cg_set_error("out of memory");
        return NULL;
    }
    c->n = n;
    c->ids = ids;
    c->unknown = cg_vocab_encode32(vocab, cps, n, ids, &c->first_unknown);
    c->n_train = (int64_t)(0.9 * (double)n); /* Python int(0.9 * len) */
    c->chars = n;
    c->chars_train = c->n_train;
    return c;
}

/* The code points of a file read once (*len: its bytes; id: their
 * identity, may be NULL) or NULL + error. */
static uint32_t *read_codepoints(const char *path, size_t max_bytes, cg_data_id *id, int64_t *n,
                                 size_t *len)
{
    char *text = cg_read_file_once(path, max_bytes, true, len);
    if (!text)
        return NULL;
    if (id)
        cg_data_id_of(path, text, *len, id);
    uint32_t *cps = cg_utf8_decode(text, *len, path, n);
    free(text);
    return cps;
}

cg_corpus *cg_corpus_read(const char *path, const cg_vocab *vocab, size_t max_bytes,
                          cg_vocab **built, cg_data_id *id)
{
    if (built)
        *built = NULL;
    if (!vocab && !built) {
        cg_set_error("cg_corpus_read: no vocabulary and nowhere to put a built one");
        return NULL;
    }
    size_t len;
    int64_t n;
    uint32_t *cps = read_codepoints(path, max_bytes, id, &n, &len);
    if (!cps)
        return NULL;
    cg_vocab *own = NULL;
    if (!vocab) {
        own = cg_vocab_from_codepoints(cps, n);
        if (!own) {
            free(cps);
            return NULL;
        }
        vocab = own;
    }
    cg_corpus *c = calloc(1, sizeof *c);
    if (!c) {
        free(cps);
        cg_vocab_free(own);
        cg_set_error("out of memory");
        return NULL;
    }
    /* the ids take the code points' place (both 4 bytes) */
    c->n = n;
    c->ids = (int32_t *)cps;
    c->unknown = cg_vocab_encode32(vocab, cps, n, c->ids, &c->first_unknown);
    c->n_train = (int64_t)(0.9 * (double)n);
    c->chars = n;
    c->chars_train = c->n_train;
    if (n + 1 < (int64_t)(len + 1)) { /* shrink: \r\n and multibyte characters */
        int32_t *nb = realloc(c->ids, (size_t)(n > 0 ? n : 1) * sizeof *nb);
        if (nb)
            c->ids = nb;
    }
    if (built)
        *built = own;
    return c;
}

/* UTF-8 of code points cps[0..n) (malloc'd) or NULL + error. */
static char *utf8_of(const uint32_t *cps, int64_t n)
{
    char *s = malloc((size_t)n * 4 + 1), *p = s;
    if (!s) {
        cg_set_error("out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        p += cg_utf8_put(cps[i], p);
    *p = '\0';
    return s;
}

/* A BPE tokenizer of vocab_size ids trained on the non-empty lines of
 * text (each line is NUL-terminated in place). A line longer than
 * LINE_MAX_BYTES is cut (SentencePiece skipped such a sentence before
 * cg_spm_train raised its limit; the cut keeps the tokenizers as they
 * were): at its
 * last space in the second half of the limit (the space dropped, as a
 * newline is), or else (CJK, a long token) before the character that
 * would cross it, nothing dropped: that piece is a copy (in `cut`), the
 * text going on from the character. */
#define LINE_MAX_BYTES 2048
static cg_tokenizer *train_on_lines(char *text, int64_t vocab_size)
{
    int64_t n = 0, cap = 0, nc = 0;
    char **lines = NULL, **cut = NULL;
    bool ok = true;
    for (char *p = text; ok && *p;) {
        /* the line's end, looked for in its first LINE_MAX_BYTES + 1 bytes
         * only (a strcspn to the end of each piece of a one-line file of
         * 50 MB was quadratic) */
        size_t k = strnlen(p, LINE_MAX_BYTES + 1);
        char *e = memchr(p, '\n', k);
        e = e ? e : p + k;
        if (e - p > LINE_MAX_BYTES) {
            e = p + LINE_MAX_BYTES;
            while (e > p + LINE_MAX_BYTES / 2 && *e != ' ')
                e--;
            if (*e != ' ') { /* no space: between two characters */
                e = p + LINE_MAX_BYTES;
                while ((*e & 0xC0) == 0x80)
                    e--;
            }
        }
        /* whole: the piece ends at a separator (dropped) or the text's end */
        const bool whole = *e == '\0' || *e == '\n' || *e == ' ';
        char *next = whole ? e + 1 : e;
        if (e > p && n == cap) {
            char **nl = realloc(lines, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof *nl);
            char **ncut = realloc(cut, (size_t)cap * sizeof *ncut);
            lines = nl ? nl : lines;
            cut = ncut ? ncut : cut;
            ok = nl && ncut;
        }
        if (ok && e > p && !whole) { /* a copy: e's byte starts the next piece */
            ok = (lines[n] = cut[nc] = strndup(p, (size_t)(e - p))) != NULL;
            nc += ok;
            n += ok;
        } else if (ok && e > p) {
            lines[n++] = p;
        }
        if (*e == '\0')
            break;
        if (whole)
            *e = '\0';
        p = next;
    }
    cg_tokenizer *t =
        ok && n ? cg_tokenizer_train(CG_TOK_BPE, true, (const char *const *)lines, n, vocab_size)
                : NULL;
    if (!ok)
        cg_set_error("out of memory");
    else if (!n)
        cg_set_error("the training split has no text to train a tokenizer on");
    for (int64_t i = 0; i < nc; i++)
        free(cut[i]);
    free(cut);
    free(lines);
    return t;
}

/* The BPE corpus (see cg_corpus_read_tok). */
static cg_corpus *corpus_bpe(const char *path, cg_tokenizer **tok, int64_t vocab_size,
                             cg_data_id *id)
{
    const unsigned long serial = cg_error_serial();
    size_t len;
    int64_t n;
    uint32_t *cps = read_codepoints(path, 0, id, &n, &len);
    if (!cps)
        return NULL;
    int64_t n_train = (int64_t)(0.9 * (double)n), nt = 0, nv = 0;
    /* SentencePiece needs a piece for every character of the lines it
     * trains on, besides the 4 special ids and 256 byte pieces */
    cg_vocab *chars = *tok ? NULL : cg_vocab_from_codepoints(cps, n_train);
    /* (the word boundary has a piece of its own, also in a text without a
     * space: CJK) */
    int64_t need = chars ? CG_SPM_MIN_VOCAB - 1 + chars->n - (cg_vocab_id(chars, '\n') >= 0) +
                               (cg_vocab_id(chars, ' ') < 0)
                         : 0;
    cg_vocab_free(chars);
    char *tr = utf8_of(cps, n_train), *va = utf8_of(cps + n_train, n - n_train);
    free(cps);
    cg_tokenizer *own = NULL;
    if (vocab_size < need) {
        free(tr);
        tr = NULL;
        cg_set_error("--vocab-size %lld is too small for this text: BPE needs at least %lld ids "
                     "(260 + one piece for each character of the training split and for the "
                     "word boundary)",
                     (long long)vocab_size, (long long)need);
    }
    if (tr && va && !*tok) {
        char *lines = strdup(tr);
        if (!lines)
            cg_set_error("out of memory");
        own = lines ? train_on_lines(lines, vocab_size) : NULL;
        free(lines);
    }
    const cg_tokenizer *t = *tok ? *tok : own;
    int64_t *a = t ? cg_tokenizer_encode(t, tr, &nt, NULL) : NULL;
    int64_t *b = a ? cg_tokenizer_encode(t, va, &nv, NULL) : NULL;
    free(tr);
    free(va);
    cg_corpus *c = b ? calloc(1, sizeof *c) : NULL;
    int32_t *ids = c ? malloc((size_t)(nt + nv + 1) * sizeof *ids) : NULL;
    if (ids) {
        for (int64_t i = 0; i < nt + nv; i++)
            ids[i] = (int32_t)(i < nt ? a[i] : b[i - nt]);
        *c = (cg_corpus){
            .n = nt + nv, .ids = ids, .n_train = nt, .chars = n, .chars_train = n_train};
    } else {
        if (b && cg_error_serial() == serial)
            cg_set_error("out of memory");
        free(c);
        c = NULL;
    }
    free(a);
    free(b);
    if (!c) {
        cg_prefix_error("'%s': ", path);
        cg_tokenizer_free(own);
    } else if (own) {
        *tok = own;
    }
    return c;
}

cg_corpus *cg_corpus_read_tok(const char *path, cg_tokenizer **tok, cg_tokenizer_kind kind,
                              int64_t vocab_size, cg_data_id *id)
{
    if (*tok ? (*tok)->kind == CG_TOK_BPE : kind == CG_TOK_BPE)
        return corpus_bpe(path, tok, vocab_size, id);
    if (*tok)
        return cg_corpus_read(path, (*tok)->cv, 0, NULL, id);
    cg_tokenizer *t = calloc(1, sizeof *t);
    cg_corpus *c = t ? cg_corpus_read(path, NULL, 0, &t->cv, id) : NULL;
    if (!t)
        cg_set_error("out of memory");
    if (c)
        *tok = t;
    else
        free(t);
    return c;
}

void cg_corpus_free(cg_corpus *c)
{
    if (!c)
        return;
    free(c->ids);
    free(c);
}

double cg_corpus_val_bpc(const cg_corpus *c, double nats)
{
    int64_t tokens = c->n - c->n_train, chars = c->chars - c->chars_train;
    return tokens == chars ? nats / log(2.0)
                           : cg_bits_per_char(nats, (double)tokens, (double)chars);
}

cg_split_view cg_corpus_train(const cg_corpus *c) { return (cg_split_view){c->ids, c->n_train}; }

cg_split_view cg_corpus_val(const cg_corpus *c)
{
    return (cg_split_view){c->ids + c->n_train, c->n - c->n_train};
}

void cg_split_window(cg_split_view s, int64_t i, int64_t T, int64_t *x, int64_t *y)
{
    for (int64_t t = 0; t < T; t++) {
        x[t] = s.ids[i + t];
        y[t] = s.ids[i + t + 1];
    }
}

bool cg_get_batch(cg_split_view s, int64_t B, int64_t T, cg_rng *rng, int64_t *x, int64_t *y)
{
    if (s.n <= T) {
        cg_set_error("a split of %lld characters is too short for windows of %lld+1",
                     (long long)s.n, (long long)T);
        return false;
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t i = (int64_t)cg_rng_below(rng, (uint64_t)(s.n - T));
        cg_split_window(s, i, T, x + b * T, y + b * T);
    }
    return true;
}
