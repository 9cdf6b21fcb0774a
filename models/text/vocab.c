/* cgrad zoo: character vocabulary and UTF-8 (see vocab.h). */
#include "models/text/vocab.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/util/config_json.h"

void cg_warn_unknown_chars(const char *prog, const char *what, int64_t count, uint32_t first,
                           const char *subst)
{
    char c[8] = "";
    if (first >= 0x20 && first != 0x7F)
        c[cg_utf8_put(first, c)] = '\0';
    fprintf(stderr,
            "%s: warning: %lld character(s) of %s are not in the vocabulary (first "
            "U+%04X%s%s%s); they are read as %s\n",
            prog, (long long)count, what, (unsigned)first, c[0] ? " '" : "", c, c[0] ? "'" : "",
            subst);
}

void cg_vocab_warn_unknown(const cg_vocab *v, const char *prog, const char *what, int64_t count,
                           uint32_t first)
{
    char s[16], c[5] = "";
    uint32_t u = v->chars[v->unk];
    if (u >= 0x20 && u != 0x7F)
        c[cg_utf8_put(u, c)] = '\0';
    snprintf(s, sizeof s, "U+%04X%s%s%s", (unsigned)u, c[0] ? " '" : "", c, c[0] ? "'" : "");
    if (count > 0)
        cg_warn_unknown_chars(prog, what, count, first, s);
}

static cg_vocab *vocab_from_sorted(uint32_t *chars, int64_t n)
{
    cg_vocab *v = malloc(sizeof *v);
    if (!v) {
        free(chars);
        cg_set_error("out of memory");
        return NULL;
    }
    v->n = n;
    v->chars = chars;
    int64_t unk = cg_vocab_id(v, 0xFFFD);
    if (unk < 0)
        unk = cg_vocab_id(v, ' ');
    v->unk = unk < 0 ? 0 : unk;
    return v;
}

void cg_codepoint_bits_sorted(const uint8_t *seen, int64_t count, uint32_t *out)
{
    /* up to the last one set (not all 0x110000 bits: the fuzz targets build
     * a vocabulary per input), a byte of 8 at a time where none is */
    int64_t j = 0;
    for (uint32_t c = 0; j < count && c < 0x110000; c++)
        if (!seen[c >> 3])
            c |= 7;
        else if (seen[c >> 3] & (1u << (c & 7)))
            out[j++] = c;
}

cg_vocab *cg_vocab_from_codepoints(const uint32_t *cps, int64_t n)
{
    if (n <= 0) {
        cg_set_error("cannot build a vocabulary from an empty text");
        return NULL;
    }
    /* the set of code points as a bitmap (0x110000 bits, 136 KiB): no copy
     * or sort of the text, whose code points may be hundreds of MB */
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) {
        cg_set_error("out of memory");
        return NULL;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        if (c == 0) {
            /* the checkpoint form (a JSON string through cJSON) ends at a
             * NUL: such a vocabulary would be saved truncated and never
             * load again */
            free(seen);
            cg_set_error("the text has a NUL character (U+0000) at character %lld, which a "
                         "vocabulary cannot hold (is it a binary file?)",
                         (long long)i);
            return NULL;
        }
        if (c >= 0x110000) {
            free(seen);
            cg_set_error("character %lld (0x%X) is not a Unicode code point", (long long)i,
                         (unsigned)c);
            return NULL;
        }
        if (!(seen[c >> 3] & (1u << (c & 7)))) {
            seen[c >> 3] |= (uint8_t)(1u << (c & 7));
            k++;
        }
    }
    uint32_t *chars = malloc((size_t)k * sizeof *chars);
    if (!chars) {
        free(seen);
        cg_set_error("out of memory");
        return NULL;
    }
    cg_codepoint_bits_sorted(seen, k, chars);
    free(seen);
    return vocab_from_sorted(chars, k);
}

cg_vocab *cg_vocab_from_json(const char *json)
{
    bool no_memory;
    cJSON *j = cg_json_parse_mem(json, &no_memory);
    if (no_memory) {
        cg_set_error("vocabulary: out of memory");
        return NULL;
    }
    if (!j || !cJSON_IsString(j)) {
        cJSON_Delete(j);
        cg_set_error("vocabulary: expected a JSON string");
        return NULL;
    }
    const char *s = cJSON_GetStringValue(j);
    int64_t n = 0;
    uint32_t *cps = cg_utf8_decode_exact(s, strlen(s), "vocabulary", &n);
    cJSON_Delete(j);
    if (!cps)
        return NULL;
    if (n == 0) {
        free(cps);
        cg_set_error("vocabulary is empty");
        return NULL;
    }
    for (int64_t i = 1; i < n; i++)
        if (cps[i] <= cps[i - 1]) {
            free(cps);
            cg_set_error("vocabulary characters are not strictly increasing at index %lld",
                         (long long)i);
            return NULL;
        }
    return vocab_from_sorted(cps, n);
}

char *cg_vocab_to_json(const cg_vocab *v)
{
    char *s = malloc((size_t)v->n * 4 + 1);
    if (!s) {
        cg_set_error("out of memory");
        return NULL;
    }
    size_t k = 0;
    for (int64_t i = 0; i < v->n; i++)
        k += (size_t)cg_utf8_put(v->chars[i], s + k);
    s[k] = '\0';
    cJSON *j = cJSON_CreateString(s);
    free(s);
    char *out = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!out)
        cg_set_error("out of memory");
    return out;
}

void cg_vocab_free(cg_vocab *v)
{
    if (!v)
        return;
    free(v->chars);
    free(v);
}

int64_t cg_vocab_id(const cg_vocab *v, uint32_t c)
{
    int64_t lo = 0, hi = v->n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v->chars[mid] == c)
            return mid;
        if (v->chars[mid] < c)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* One encoder for both id widths (exactly one of ids64, ids32 is set).
 * ids32 may alias cps: each id is written after its code point is read. */
static int64_t encode(const cg_vocab *v, const uint32_t *cps, int64_t n, int64_t *ids64,
                      int32_t *ids32, uint32_t *first_unknown)
{
    int64_t unknown = 0, last_id = -1;
    uint32_t last_cp = 0;
    bool have_last = false;
    for (int64_t i = 0; i < n; i++) {
        uint32_t cp = cps[i];
        if (!have_last || cp != last_cp) { /* runs of one character are common */
            last_cp = cp;
            last_id = cg_vocab_id(v, cp);
            have_last = true;
        }
        int64_t id = last_id;
        if (id < 0) {
            if (unknown == 0 && first_unknown)
                *first_unknown = cp;
            unknown++;
            id = v->unk;
        }
        if (ids64)
            ids64[i] = id;
        else
            ids32[i] = (int32_t)id;
    }
    return unknown;
}

int64_t cg_vocab_encode(const cg_vocab *v, const uint32_t *cps, int64_t n, int64_t *ids,
                        uint32_t *first_unknown)
{
    return encode(v, cps, n, ids, NULL, first_unknown);
}

int64_t *cg_vocab_encode_text(const cg_vocab *v, const char *text, const char *name, int64_t *n,
                              int64_t *unknown, uint32_t *first_unknown)
{
    uint32_t *cps = cg_utf8_decode(text, strlen(text), name, n);
    int64_t *ids = cps ? malloc((size_t)(*n > 0 ? *n : 1) * sizeof *ids) : NULL;
    if (cps && !ids)
        cg_set_error("out of memory");
    int64_t unk = ids ? cg_vocab_encode(v, cps, *n, ids, first_unknown) : 0;
    if (unknown)
        *unknown = unk;
    free(cps);
    return ids;
}

int64_t cg_vocab_encode32(const cg_vocab *v, const uint32_t *cps, int64_t n, int32_t *ids,
                          uint32_t *first_unknown)
{
    return encode(v, cps, n, NULL, ids, first_unknown);
}

char *cg_vocab_decode(const cg_vocab *v, const int64_t *ids, int64_t n)
{
    char *s = malloc((size_t)n * 4 + 1);
    if (!s) {
        cg_set_error("out of memory");
        return NULL;
    }
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n) {
            free(s);
            cg_set_error("token id %lld is outside the vocabulary [0, %lld)", (long long)ids[i],
                         (long long)v->n);
            return NULL;
        }
        k += (size_t)cg_utf8_put(v->chars[ids[i]], s + k);
    }
    s[k] = '\0';
    return s;
}
