/* cgrad core: the UTF-8 codec (see utf8.h). */
#include "core/utf8.h"

#include <stdbool.h>
#include <stdlib.h>

#include "core/error.h"

int cg_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

int64_t cg_utf8_count(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    int64_t count = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = cg_utf8_seq(u + i, n - i, &cp);
        if (k == 0) {
            if (bad_at)
                *bad_at = i;
            return -1;
        }
        i += (size_t)k;
        count++;
    }
    return count;
}

static uint32_t *decode(const char *s, size_t len, const char *name, int64_t *n, bool newlines)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t *out = malloc((len + 1) * sizeof *out);
    if (!out) {
        cg_set_error("out of memory decoding %zu bytes of text", len);
        return NULL;
    }
    int64_t k = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int m = cg_utf8_seq(p + i, len - i, &cp);
        if (m == 0) {
            free(out);
            cg_set_error("%s is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                         name ? name : "text", p[i], i);
            return NULL;
        }
        if (newlines && cp == '\r') {
            cp = '\n';
            if (i + 1 < len && p[i + 1] == '\n')
                i++;
        }
        out[k++] = cp;
        i += (size_t)m;
    }
    *n = k;
    return out;
}

uint32_t *cg_utf8_decode(const char *s, size_t len, const char *name, int64_t *n)
{
    return decode(s, len, name, n, true);
}

uint32_t *cg_utf8_decode_exact(const char *s, size_t len, const char *name, int64_t *n)
{
    return decode(s, len, name, n, false);
}

int cg_utf8_put(uint32_t c, char *buf)
{
    unsigned char *b = (unsigned char *)buf;
    if (c < 0x80) {
        b[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (unsigned char)(0xC0 | (c >> 6));
        b[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (c >> 12));
        b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (c >> 18));
    b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}
