/* cgrad zoo: the character vocabulary of the seq2seq model (see
 * pair_vocab.h). */
#include "models/text/pair_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/text/vocab.h"
#include "core/utf8.h"

/* ------------------------------------------------------------ vocab */
static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void cg_pair_vocab_free(cg_pair_vocab *v)
{
    if (!v)
        return;
    free(v->chars);
    memset(v, 0, sizeof *v);
}

bool cg_pair_vocab_from_texts(const char *const *texts, int64_t n, cg_pair_vocab *out)
{
    memset(out, 0, sizeof *out);
    /* a bitmap over all code points (0x110000 bits = 136 KiB) */
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) {
        cg_set_error("vocab: out of memory");
        return false;
    }
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *s = (const unsigned char *)texts[i];
        size_t len = strlen((const char *)s), j = 0;
        while (j < len) {
            uint32_t cp;
            int k = cg_utf8_seq(s + j, len - j, &cp);
            if (k == 0) {
                free(seen);
                cg_set_error("vocab: invalid UTF-8");
                return false;
            }
            j += (size_t)k;
            if (!(seen[cp >> 3] & (1u << (cp & 7)))) {
                seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
                count++;
            }
        }
    }
    out->chars = malloc((size_t)(count ? count : 1) * sizeof(uint32_t));
    if (!out->chars) {
        free(seen);
        cg_set_error("vocab: out of memory");
        return false;
    }
    cg_codepoint_bits_sorted(seen, count, out->chars);
    out->n_chars = count;
    free(seen);
    return true;
}

bool cg_pair_vocab_from_json(const char *json, cg_pair_vocab *out)
{
    memset(out, 0, sizeof *out);
    cg_vocab *v = cg_vocab_from_json(json);
    if (!v)
        return false;
    out->chars = malloc((size_t)v->n * sizeof(uint32_t));
    if (!out->chars) {
        cg_vocab_free(v);
        cg_set_error("vocab: out of memory");
        return false;
    }
    memcpy(out->chars, v->chars, (size_t)v->n * sizeof(uint32_t));
    out->n_chars = v->n;
    cg_vocab_free(v);
    return true;
}

char *cg_pair_vocab_to_json(const cg_pair_vocab *v)
{
    cg_vocab *cv = cg_vocab_from_codepoints(v->chars, v->n_chars);
    if (!cv)
        return NULL;
    char *s = cg_vocab_to_json(cv);
    cg_vocab_free(cv);
    return s;
}

int64_t cg_pair_vocab_id(const cg_pair_vocab *v, uint32_t cp)
{
    const uint32_t *hit =
        v->n_chars ? bsearch(&cp, v->chars, (size_t)v->n_chars, sizeof(uint32_t), cmp_u32) : NULL;
    return hit ? 4 + (int64_t)(hit - v->chars) : CG_PAIR_UNK;
}

int64_t *cg_pair_vocab_encode(const cg_pair_vocab *v, const char *s, int64_t *n, int64_t *n_unk)
{
    size_t len = strlen(s);
    int64_t k = 0;
    uint32_t *cps = cg_utf8_decode_exact(s, len, NULL, &k);
    if (!cps)
        return NULL; /* its error: the bad byte, or out of memory */
    int64_t *ids = malloc((size_t)(k ? k : 1) * sizeof *ids);
    if (!ids) {
        free(cps);
        cg_set_error("vocab: out of memory");
        return NULL;
    }
    int64_t unk = 0;
    for (int64_t i = 0; i < k; i++) {
        ids[i] = cg_pair_vocab_id(v, cps[i]);
        unk += ids[i] == CG_PAIR_UNK;
    }
    free(cps);
    *n = k;
    if (n_unk)
        *n_unk = unk;
    return ids;
}

int64_t cg_pair_vocab_count_unknown(const cg_pair_vocab *v, const char *s, uint32_t *first)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), j = 0;
    int64_t unk = 0;
    while (j < len) {
        uint32_t cp;
        int k = cg_utf8_seq(p + j, len - j, &cp);
        if (k == 0)
            break;
        j += (size_t)k;
        if (cg_pair_vocab_id(v, cp) == CG_PAIR_UNK) {
            if (unk++ == 0 && first)
                *first = cp;
        }
    }
    return unk;
}

int64_t cg_pair_vocab_warn_unknown(const cg_pair_vocab *v, const char *s, const char *prog,
                                   const char *what, int64_t number)
{
    uint32_t first = 0;
    int64_t unk = cg_pair_vocab_count_unknown(v, s, &first);
    if (unk > 0 && prog) {
        char w[96];
        snprintf(w, sizeof w, "%s %lld", what, (long long)number);
        cg_warn_unknown_chars(prog, w, unk, first, "<unk>");
    }
    return unk;
}

char *cg_pair_vocab_decode(const cg_pair_vocab *v, const int64_t *ids, int64_t n)
{
    char *s = malloc((size_t)n * 4 + 1);
    if (!s) {
        cg_set_error("vocab: out of memory");
        return NULL;
    }
    size_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= 4 && ids[i] < 4 + v->n_chars)
            k += (size_t)cg_utf8_put(v->chars[ids[i] - 4], s + k);
    s[k] = '\0';
    return s;
}
