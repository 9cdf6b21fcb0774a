/* cgrad zoo: one-line JSON objects (see jline.h). */
#include "models/train/jline.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/util/config_json.h"

static void jl_put(cg_jline *j, const char *s, size_t n)
{
    if (j->oom)
        return;
    if (j->len + n + 3 > j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 256;
        while (cap < j->len + n + 3)
            cap *= 2;
        char *b = realloc(j->buf, cap);
        if (!b) {
            j->oom = true;
            return;
        }
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void jl_puts(cg_jline *j, const char *s) { jl_put(j, s, strlen(s)); }

/* Strings and numbers are written as the printf'd JSON lines write them
 * (models/util/config_json.h cg_json_quote, cg_json_num: null when not finite). */
static void jl_str_escaped(cg_jline *j, const char *s)
{
    size_t n = 6 * strlen(s) + 3; /* every byte escaped at worst */
    char *b = malloc(n);
    if (!b) {
        j->oom = true;
        return;
    }
    jl_puts(j, cg_json_quote(b, n, s));
    free(b);
}

static void jl_key(cg_jline *j, const char *key)
{
    jl_puts(j, j->len == 0 ? "{" : ", ");
    jl_str_escaped(j, key);
    jl_puts(j, ": ");
}

void cg_jline_num(cg_jline *j, const char *key, double v, int decimals)
{
    jl_key(j, key);
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%.%df", decimals < 0 ? 0 : decimals > 17 ? 17 : decimals);
    jl_puts(j, CG_JSON_NUM(fmt, v));
}

void cg_jline_int(cg_jline *j, const char *key, int64_t v)
{
    jl_key(j, key);
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    jl_puts(j, b);
}

void cg_jline_str(cg_jline *j, const char *key, const char *v)
{
    jl_key(j, key);
    jl_str_escaped(j, v ? v : "");
}

void cg_jline_bool(cg_jline *j, const char *key, bool v)
{
    jl_key(j, key);
    jl_puts(j, v ? "true" : "false");
}

const char *cg_jline_end(cg_jline *j)
{
    if (j->len == 0)
        jl_puts(j, "{");
    jl_puts(j, "}");
    return j->oom ? NULL : j->buf;
}

void cg_jline_free(cg_jline *j)
{
    free(j->buf);
    memset(j, 0, sizeof *j);
}
