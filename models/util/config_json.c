/* JSON for the zoo (see config_json.h): typed readers, the one writer of
 * the programs' JSON lines, names as bytes, the trainer's state fields,
 * and a model's config read, written and checked from its field table. */
#include "models/util/config_json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/utf8.h"
#include "models/util/files.h"

bool cg_json_int(const cJSON *o, const char *what, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 9e15) {
        cg_set_error("%s: \"%s\" must be an integer", what, key);
        return false;
    }
    *out = (int64_t)v->valuedouble;
    return true;
}

bool cg_json_float(const cJSON *o, const char *what, const char *key, float *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return true;
    if (!cJSON_IsNumber(v)) {
        cg_set_error("%s: \"%s\" must be a number", what, key);
        return false;
    }
    *out = (float)v->valuedouble;
    return true;
}

bool cg_json_bool(const cJSON *o, const char *what, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return true;
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
    } else if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) {
        *out = v->valuedouble != 0;
    } else {
        cg_set_error("%s: \"%s\" must be true or false", what, key);
        return false;
    }
    return true;
}

const char *cg_json_str(const cJSON *o, const char *what, const char *key, bool *ok)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return NULL;
    if (!cJSON_IsString(v)) {
        cg_set_error("%s: \"%s\" must be a string", what, key);
        *ok = false;
        return NULL;
    }
    return v->valuestring;
}

cJSON *cg_json_parse(const char *text) { return text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL; }

cJSON *cg_json_parse_mem(const char *text, bool *no_memory)
{
    errno = 0;
    cJSON *o = cg_json_parse(text);
    *no_memory = !o && text && errno == ENOMEM;
    if (*no_memory)
        cg_set_error("out of memory");
    return o;
}

cJSON *cg_json_parse_object(const char *json, const char *what)
{
    if (!json) {
        cg_set_error("%s: NULL argument", what);
        return NULL;
    }
    bool no_memory;
    cJSON *o = cg_json_parse_mem(json, &no_memory);
    if (no_memory) {
        cg_set_error("%s: out of memory", what);
        return NULL;
    }
    if (!o || !cJSON_IsObject(o)) {
        cg_set_error("%s: not a JSON object", what);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

bool cg_json_norm_act(const cJSON *o, const char *what, cg_norm_kind *norm, cg_act *act)
{
    bool ok = true;
    const char *s = cg_json_str(o, what, "norm", &ok);
    if (ok && s)
        ok = cg_norm_kind_parse(s, norm);
    if (ok) {
        s = cg_json_str(o, what, "act", &ok);
        if (ok && s)
            ok = cg_act_parse(s, act);
    }
    return ok;
}

bool cg_json_write_fields(cJSON *o, const cg_json_field *f, int n)
{
    bool ok = o != NULL;
    for (int i = 0; ok && i < n; i++) {
        char b[40];
        switch (f[i].kind) {
        case CG_JF_I64:
            ok = cJSON_AddNumberToObject(o, f[i].key, (double)*(int64_t *)f[i].dst) != NULL;
            break;
        case CG_JF_F64:
            cg_snprintf_c(b, sizeof b, "%.17g", *(double *)f[i].dst);
            ok = cJSON_AddStringToObject(o, f[i].key, b) != NULL;
            break;
        case CG_JF_U64STR:
            snprintf(b, sizeof b, "%" PRIu64, *(uint64_t *)f[i].dst);
            ok = cJSON_AddStringToObject(o, f[i].key, b) != NULL;
            break;
        case CG_JF_STR:
            ok = cJSON_AddStringToObject(o, f[i].key, *(const char **)f[i].dst) != NULL;
            break;
        case CG_JF_BOOL: ok = cJSON_AddBoolToObject(o, f[i].key, *(bool *)f[i].dst) != NULL; break;
        }
    }
    if (!ok)
        cg_set_error("out of memory");
    return ok;
}

bool cg_json_read_fields(const cJSON *o, const char *what, const cg_json_field *f, int n)
{
    if (!cJSON_IsObject(o)) {
        cg_set_error("%s: not a JSON object", what);
        return false;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f[i].key);
        if (!v) {
            if (f[i].optional)
                continue;
            cg_set_error("%s: \"%s\" is missing", what, f[i].key);
            return false;
        }
        switch (f[i].kind) {
        case CG_JF_I64:
        case CG_JF_F64: {
            double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
            bool num = cJSON_IsNumber(v);
            if (f[i].kind == CG_JF_F64 && cJSON_IsString(v) && *v->valuestring) {
                char *end; /* a double kept exactly as its decimal string */
                x = cg_strtod_c(v->valuestring, &end);
                num = *end == '\0';
            }
            if (!num || !isfinite(x) || (f[i].kind == CG_JF_I64 && x != floor(x))) {
                cg_set_error("%s: \"%s\" must be %s", what, f[i].key,
                             f[i].kind == CG_JF_I64 ? "an integer" : "a finite number");
                return false;
            }
            if (!(x >= f[i].lo && x <= f[i].hi)) {
                cg_set_error("%s: \"%s\" is %.17g, outside [%.17g, %.17g]", what, f[i].key, x,
                             f[i].lo, f[i].hi);
                return false;
            }
            if (f[i].kind == CG_JF_I64)
                *(int64_t *)f[i].dst = (int64_t)x;
            else
                *(double *)f[i].dst = x;
            break;
        }
        case CG_JF_U64STR: {
            const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
            char *end = NULL;
            errno = 0;
            unsigned long long u = s ? strtoull(s, &end, 10) : 0;
            if (!s || *s < '0' || *s > '9' || *end != '\0' || errno == ERANGE) {
                cg_set_error("%s: \"%s\" must be a decimal string of a 64-bit integer", what,
                             f[i].key);
                return false;
            }
            *(uint64_t *)f[i].dst = (uint64_t)u;
            break;
        }
        case CG_JF_STR:
            if (!cJSON_IsString(v)) {
                cg_set_error("%s: \"%s\" must be a string", what, f[i].key);
                return false;
            }
            *(const char **)f[i].dst = v->valuestring;
            break;
        case CG_JF_BOOL:
            if (!cJSON_IsBool(v)) {
                cg_set_error("%s: \"%s\" must be true or false", what, f[i].key);
                return false;
            }
            *(bool *)f[i].dst = cJSON_IsTrue(v);
            break;
        }
    }
    return true;
}

bool cg_json_f64_array(const cJSON *o, const char *what, const char *key, double *out, int max,
                       int *n)
{
    *n = 0;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a)
        return true;
    if (!cJSON_IsArray(a)) {
        cg_set_error("%s: \"%s\" must be an array", what, key);
        return false;
    }
    for (const cJSON *x = a->child; x; x = x->next) {
        if (*n >= max) {
            cg_set_error("%s: \"%s\" holds more than %d values", what, key, max);
            return false;
        }
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
            cg_set_error("%s: \"%s\" must hold finite numbers", what, key);
            return false;
        }
        out[(*n)++] = x->valuedouble;
    }
    return true;
}

const char *cg_json_num(char *buf, size_t n, const char *fmt, double x)
{
    if (!isfinite(x))
        snprintf(buf, n, "null");
    else
        cg_snprintf_c(buf, n, fmt, x); /* "1.5", never "1,5" (a host's locale) */
    return buf;
}

const char *cg_json_quote(char *buf, size_t n, const char *s)
{
    size_t k = 0;
    if (n < 3) {
        if (n)
            buf[0] = '\0';
        return buf;
    }
    buf[k++] = '"';
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    for (size_t left = strlen((const char *)p); *p; p++, left--) {
        char esc[8];
        int len;
        uint32_t cp;
        int seq = *p >= 0x80 ? cg_utf8_seq(p, left, &cp) : 1;
        if (*p == '"' || *p == '\\') {
            len = snprintf(esc, sizeof esc, "\\%c", *p);
        } else if (*p < 0x20 || *p == 0x7f) {
            len = snprintf(esc, sizeof esc, "\\u%04x", *p);
        } else if (seq == 0) { /* a byte that is not UTF-8 (names are bytes): Python's
                                 * surrogateescape, os.fsencode() gives the byte back */
            len = snprintf(esc, sizeof esc, "\\udc%02x", *p);
        } else { /* a whole character, or one byte of ASCII */
            memcpy(esc, p, (size_t)seq);
            esc[seq] = '\0';
            len = seq;
            p += seq - 1;
            left -= (size_t)seq - 1;
        }
        if (k + (size_t)len + 2 > n)
            break; /* at a character boundary: only whole characters are written */
        memcpy(buf + k, esc, (size_t)len);
        k += (size_t)len;
    }
    buf[k++] = '"';
    buf[k] = '\0';
    return buf;
}

/* ------------------------------------------------------------ names */
bool cg_json_add_name(cJSON *o, const char *key, const char *name)
{
    size_t n = strlen(name);
    if (cg_utf8_count(name, n, NULL) >= 0)
        return cJSON_AddStringToObject(o, key, name) != NULL;
    /* readable: each byte that is not UTF-8 as U+FFFD; lossless: key_hex */
    char *shown = malloc(3 * n + 1), *hex = malloc(2 * n + 1), hkey[128];
    size_t k = 0;
    for (size_t i = 0; shown && i < n;) {
        uint32_t cp;
        int seq = cg_utf8_seq((const unsigned char *)name + i, n - i, &cp);
        if (seq == 0) {
            k += (size_t)cg_utf8_put(0xFFFD, shown + k);
            i++;
        } else {
            memcpy(shown + k, name + i, (size_t)seq);
            k += (size_t)seq;
            i += (size_t)seq;
        }
    }
    for (size_t i = 0; hex && i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)name[i]);
    bool ok = shown && hex && snprintf(hkey, sizeof hkey, "%s_hex", key) < (int)sizeof hkey;
    if (ok) {
        shown[k] = '\0';
        hex[2 * n] = '\0';
        ok = cJSON_AddStringToObject(o, key, shown) && cJSON_AddStringToObject(o, hkey, hex);
    }
    free(shown);
    free(hex);
    if (!ok)
        cg_set_error("out of memory");
    return ok;
}

char *cg_json_get_name(const cJSON *o, const char *key)
{
    char hkey[128];
    snprintf(hkey, sizeof hkey, "%s_hex", key);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, hkey);
    if (!h) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    }
    size_t n = cJSON_IsString(h) ? strlen(h->valuestring) : 1;
    char *bytes = n % 2 == 0 && strspn(h->valuestring, "0123456789abcdefABCDEF") == n
                      ? malloc(n / 2 + 1)
                      : NULL;
    for (size_t i = 0; bytes && i < n / 2; i++) {
        unsigned v = 0;
        sscanf(h->valuestring + 2 * i, "%2x", &v);
        bytes[i] = (char)v;
        if (v == 0) { /* a name holds no NUL */
            free(bytes);
            bytes = NULL;
        }
    }
    if (bytes)
        bytes[n / 2] = '\0';
    return bytes;
}

bool cg_json_name_decode(cJSON *o, const char *key, const char *what)
{
    char hkey[128];
    snprintf(hkey, sizeof hkey, "%s_hex", key);
    if (!cJSON_GetObjectItemCaseSensitive(o, hkey))
        return true;
    errno = 0;
    char *bytes = cg_json_get_name(o, key);
    if (!bytes) { /* malloc's ENOMEM, else the text is not a name's hex */
        if (errno == ENOMEM)
            cg_set_error("%s: out of memory", what);
        else
            cg_set_error("%s: \"%s\" is not the hex digits of a name", what, hkey);
        return false;
    }
    /* the shown string's text replaced in place: cJSON 1.7.15's
     * ReplaceItemInObject drops the key it cannot copy and says it
     * succeeded */
    cJSON *shown = cJSON_GetObjectItemCaseSensitive(o, key), *item = NULL;
    bool ok;
    if (cJSON_IsString(shown) && !(shown->type & cJSON_IsReference)) {
        ok = cJSON_SetValuestring(shown, bytes) != NULL;
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(o, key);
        ok = (item = cJSON_CreateString(bytes)) && cJSON_AddItemToObject(o, key, item);
        if (!ok)
            cJSON_Delete(item);
    }
    if (!ok)
        cg_set_error("%s: out of memory", what);
    free(bytes);
    return ok;
}

/* ------------------------------------------------------------ the writer */
/* A put that failed marks its object as lacking a field: an object's
 * valueint, which cJSON neither prints nor frees for an object. cg_json_line
 * refuses such an object (and one holding such), so a result line is whole
 * or not printed: a caller that does not check each put never prints a
 * line without its "val_loss". */
static bool put_failed(cJSON *o)
{
    if (o)
        o->valueint = 1;
    cg_set_error("out of memory");
    return false;
}

static bool lacks_field(const cJSON *o)
{
    if (cJSON_IsObject(o) && o->valueint)
        return true;
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next)
        if (lacks_field(c))
            return true;
    return false;
}

static bool put_raw(cJSON *o, const char *key, const char *text)
{
    if (o && text && cJSON_AddRawToObject(o, key, text))
        return true;
    return put_failed(o);
}

bool cg_json_put_num(cJSON *o, const char *key, const char *fmt, double v)
{
    return put_raw(o, key, CG_JSON_NUM(fmt, v));
}

bool cg_json_put_int(cJSON *o, const char *key, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    return put_raw(o, key, b);
}

bool cg_json_put_str(cJSON *o, const char *key, const char *s)
{
    size_t n = 6 * strlen(s ? s : "") + 3; /* every byte escaped at worst */
    char *b = malloc(n);
    bool ok = b ? put_raw(o, key, cg_json_quote(b, n, s)) : put_failed(o);
    free(b);
    return ok;
}

bool cg_json_put_bool(cJSON *o, const char *key, bool v)
{
    return put_raw(o, key, v ? "true" : "false");
}

char *cg_json_line(const cJSON *o)
{
    if (!o || lacks_field(o)) {
        cg_set_error("out of memory (a field of the line could not be made)");
        return NULL;
    }
    size_t len = 1, cap = 256;
    char *line = malloc(cap);
    bool ok = line != NULL;
    if (ok)
        strcpy(line, "{");
    for (const cJSON *c = o ? o->child : NULL; ok && c; c = c->next) {
        char *v = cJSON_PrintUnformatted(c), *k = NULL;
        size_t kn = 6 * strlen(c->string ? c->string : "") + 3;
        ok = v && (k = malloc(kn));
        size_t need = ok ? len + kn + strlen(v) + 8 : 0;
        if (ok && need > cap) {
            while (cap < need)
                cap *= 2;
            char *b = realloc(line, cap);
            ok = b != NULL;
            line = b ? b : line;
        }
        if (ok && line) /* (line is never NULL here: said for GCC's -Wformat-overflow) */
            len += (size_t)sprintf(line + len, "%s%s: %s", c == o->child ? "" : ", ",
                                   cg_json_quote(k, kn, c->string), v);
        free(v);
        free(k);
    }
    if (ok) {
        strcpy(line + len, "}");
        return line;
    }
    free(line);
    cg_set_error("out of memory");
    return NULL;
}

bool cg_json_print_line(FILE *f, const cJSON *o)
{
    char *s = cg_json_line(o);
    bool ok = s != NULL;
    if (ok) {
        errno = 0;
        fprintf(f, "%s\n", s);
        ok = cg_output_flush(f); /* a full disk, a reader gone: the line is lost */
    }
    free(s);
    return ok;
}

/* ------------------------------------------------------------ configs */
#define FIELD(r) ((void *)((char *)cfg + (r).offset))

/* The JSON text of a fact of cfg (CG_CF_CONST, CG_CF_SAME, CG_CF_GELU) in
 * buf. */
static const char *fact_text(const cg_config_field *f, const void *cfg, char *buf, size_t n)
{
    if (f->kind == CG_CF_CONST)
        return f->value;
    if (f->kind == CG_CF_SAME)
        return *(const bool *)FIELD(*f) ? "true" : "false";
    /* CG_CF_GELU: the row's form; a model without a GELU records the form
     * the name "gelu" has, as every config before gelu_erf did */
    const cg_act_info *r = cg_act_info_of(*(const cg_act *)FIELD(*f), NULL);
    snprintf(buf, n, "\"%s\"", r && r->gelu_approximate ? r->gelu_approximate : "tanh");
    return buf;
}

/* Name i of a CG_CF_NAME row ("a|b|c") in buf, or "" past the end */
static const char *name_at(const cg_config_field *f, int i, char *buf, size_t n)
{
    const char *p = f->value;
    for (; i > 0 && p; i--)
        p = (p = strchr(p, '|')) ? p + 1 : NULL;
    size_t len = p ? strcspn(p, "|") : 0;
    snprintf(buf, n, "%.*s", (int)len, p ? p : "");
    return buf;
}

/* A CG_CF_NAME row read: absent keeps *cfg's value */
static bool config_name(const cJSON *o, const char *what, const cg_config_field *f, void *cfg)
{
    bool ok = true;
    const char *s = cg_json_str(o, what, f->key, &ok);
    if (!s)
        return ok;
    char buf[64];
    for (int i = 0; *name_at(f, i, buf, sizeof buf); i++)
        if (!strcmp(buf, s)) {
            *(int *)FIELD(*f) = i;
            return true;
        }
    cg_set_error("%s: \"%s\" is \"%s\"; the zoo's models have %s (docs/architectures.md)", what,
                 f->key, s, f->value);
    return false;
}

/* A fact of the table (after the fields are read): absent is fine, another
 * value than cfg's is refused. */
static bool config_fact(const cJSON *o, const char *what, const cg_config_field *f, const void *cfg)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f->key);
    if (!v)
        return true;
    if (f->kind == CG_CF_SAME) {
        bool want = *(const bool *)((const char *)cfg + f->offset), got = want;
        if (!cg_json_bool(o, what, f->key, &got))
            return false;
        if (got != want)
            cg_set_error("%s: \"%s\" is %s, but the rest of the config says %s", what, f->key,
                         got ? "true" : "false", want ? "true" : "false");
        return got == want;
    }
    char buf[64];
    const char *text = fact_text(f, cfg, buf, sizeof buf);
    bool no_memory;
    cJSON *want = cg_json_parse_mem(text, &no_memory);
    if (no_memory) {
        cg_set_error("%s: out of memory", what);
        return false;
    }
    bool same = want && cJSON_Compare(v, want, true);
    if (!same) {
        char *got = cJSON_PrintUnformatted(v);
        if (f->kind == CG_CF_GELU)
            cg_set_error("%s: \"%s\" is %s, but act %s has %s (docs/architectures.md)", what,
                         f->key, got ? got : "?", cg_act_name(*(const cg_act *)FIELD(*f)), text);
        else
            cg_set_error("%s: \"%s\" is %s, but the zoo's model has only %s "
                         "(docs/architectures.md)",
                         what, f->key, got ? got : "?", text);
        free(got);
    }
    cJSON_Delete(want);
    return same;
}

static bool is_fact(cg_config_kind k)
{
    return k == CG_CF_CONST || k == CG_CF_SAME || k == CG_CF_GELU;
}

bool cg_config_read(const char *json, const char *what, const cg_config_field *f, int n, void *cfg)
{
    cJSON *o = cg_json_parse_object(json, what);
    bool ok = o != NULL;
    cg_norm_kind *norm = NULL;
    cg_act *act = NULL;
    for (int i = 0; ok && i < n; i++) {
        switch (f[i].kind) {
        case CG_CF_I64: ok = cg_json_int(o, what, f[i].key, FIELD(f[i])); break;
        case CG_CF_BOOL: ok = cg_json_bool(o, what, f[i].key, FIELD(f[i])); break;
        case CG_CF_PROB: ok = cg_json_float(o, what, f[i].key, FIELD(f[i])); break;
        case CG_CF_NORM: norm = FIELD(f[i]); break;
        case CG_CF_ACT: act = FIELD(f[i]); break;
        case CG_CF_NAME: ok = config_name(o, what, &f[i], cfg); break;
        case CG_CF_CONST:
        case CG_CF_SAME:
        case CG_CF_GELU: break; /* below, once the fields are read */
        }
    }
    if (ok && (norm || act)) {
        cg_norm_kind nk = norm ? *norm : CG_NORM_LAYERNORM;
        cg_act ak = act ? *act : CG_ACT_GELU;
        ok = cg_json_norm_act(o, what, &nk, &ak);
        if (ok && norm)
            *norm = nk;
        if (ok && act)
            *act = ak;
    }
    for (int i = 0; ok && i < n; i++)
        if (is_fact(f[i].kind))
            ok = config_fact(o, what, &f[i], cfg);
    cJSON_Delete(o);
    return ok;
}

char *cg_config_write(const char *model, const cg_config_field *f, int n, const void *cfg)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = cg_json_put_str(o, "model", model);
    char fact[64];
    for (int i = 0; ok && i < n; i++) {
        switch (f[i].kind) {
        case CG_CF_I64: ok = cg_json_put_int(o, f[i].key, *(int64_t *)FIELD(f[i])); break;
        case CG_CF_BOOL: ok = cg_json_put_bool(o, f[i].key, *(bool *)FIELD(f[i])); break;
        case CG_CF_PROB:
            ok = cg_json_put_num(o, f[i].key, "%.9g", (double)*(float *)FIELD(f[i]));
            break;
        case CG_CF_NORM:
            ok = cg_json_put_str(o, f[i].key, cg_norm_kind_name(*(cg_norm_kind *)FIELD(f[i])));
            break;
        case CG_CF_ACT:
            ok = cg_json_put_str(o, f[i].key, cg_act_name(*(cg_act *)FIELD(f[i])));
            break;
        case CG_CF_NAME:
            ok = cg_json_put_str(o, f[i].key,
                                 name_at(&f[i], *(int *)FIELD(f[i]), fact, sizeof fact));
            break;
        case CG_CF_CONST:
        case CG_CF_SAME:
        case CG_CF_GELU: ok = put_raw(o, f[i].key, fact_text(&f[i], cfg, fact, sizeof fact)); break;
        }
    }
    char *s = ok ? cg_json_line(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* The value of field r of cfg as text ("128", "rmsnorm", "true"). */
static const char *field_text(const cg_config_field *r, const void *cfg, char *buf, size_t n)
{
    switch (r->kind) {
    case CG_CF_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)FIELD(*r)); break;
    case CG_CF_BOOL: snprintf(buf, n, "%s", *(const bool *)FIELD(*r) ? "true" : "false"); break;
    case CG_CF_PROB: snprintf(buf, n, "%.9g", (double)*(const float *)FIELD(*r)); break;
    case CG_CF_NORM:
        snprintf(buf, n, "%s", cg_norm_kind_name(*(const cg_norm_kind *)FIELD(*r)));
        break;
    case CG_CF_ACT: snprintf(buf, n, "%s", cg_act_name(*(const cg_act *)FIELD(*r))); break;
    case CG_CF_NAME: name_at(r, *(const int *)FIELD(*r), buf, n); break;
    case CG_CF_CONST:
    case CG_CF_SAME:
    case CG_CF_GELU: { /* the kind's facts */
        char fact[64];
        snprintf(buf, n, "%s", fact_text(r, cfg, fact, sizeof fact));
        break;
    }
    }
    return buf;
}

bool cg_config_same_arch(const cg_config_field *f, int n, const void *a, const void *b)
{
    for (int i = 0; i < n; i++) {
        char ta[64], tb[64];
        if (f[i].kind == CG_CF_PROB ||
            strcmp(field_text(&f[i], a, ta, sizeof ta), field_text(&f[i], b, tb, sizeof tb)) == 0)
            continue;
        cg_set_error("%s is %s in one and %s in the other", f[i].key, ta, tb);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ a model's config */
static const cg_config_field *field_by_key(const cg_config_field *f, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].key, key))
            return &f[i];
    return NULL;
}

/* Row r's rule on cfg; false + "<what>: ..." */
static bool field_ok(const cg_config_model *m, const char *what, const cg_config_field *r,
                     const void *cfg)
{
    switch (r->kind) {
    case CG_CF_I64: {
        long long v = (long long)*(const int64_t *)FIELD(*r);
        if (r->hi > r->lo && !(v >= r->lo && v <= r->hi)) {
            cg_set_error("%s: %s must be %s %lld (got %lld)%s", what, r->key,
                         v < r->lo ? ">=" : "<=", (long long)(v < r->lo ? r->lo : r->hi), v,
                         r->note ? r->note : "");
            return false;
        }
        const cg_config_field *num = r->divides ? field_by_key(m->fields, m->n, r->divides) : NULL;
        long long d = num ? (long long)*(const int64_t *)FIELD(*num) : 0;
        if (num && v && d % v) {
            cg_set_error("%s: %s=%lld is not divisible by %s=%lld", what, num->key, d, r->key, v);
            return false;
        }
        return true;
    }
    case CG_CF_PROB: {
        double v = (double)*(const float *)FIELD(*r);
        if (!(v >= 0 && v <= 1)) {
            cg_set_error("%s: %s must be in [0, 1] (got %g)", what, r->key, v);
            return false;
        }
        return true;
    }
    case CG_CF_NORM: return cg_norm_info_of(*(const cg_norm_kind *)FIELD(*r), what) != NULL;
    case CG_CF_ACT: return cg_act_info_of(*(const cg_act *)FIELD(*r), what) != NULL;
    case CG_CF_NAME: {
        char buf[64];
        const int v = *(const int *)FIELD(*r);
        if (v >= 0 && *name_at(r, v, buf, sizeof buf))
            return true;
        cg_set_error("%s: %s %d is none of %s", what, r->key, v, r->value);
        return false;
    }
    default: return true;
    }
}

bool cg_config_check(const cg_config_model *m, const void *cfg)
{
    char what[64];
    snprintf(what, sizeof what, "%s config", m->model);
    if (!cfg) {
        cg_set_error("%s: NULL", what);
        return false;
    }
    for (int i = 0; i < m->n; i++)
        if (!field_ok(m, what, &m->fields[i], cfg))
            return false;
    return true;
}

bool cg_config_parse(const cg_config_model *m, const char *json, void *out)
{
    char what[64];
    snprintf(what, sizeof what, "%s config", m->model);
    void *c = out ? malloc(m->size) : NULL;
    if (!c) {
        cg_set_error("%s: %s", what, out ? "out of memory" : "NULL argument");
        return false;
    }
    memcpy(c, m->defaults, m->size);
    bool ok = cg_config_read(json, what, m->fields, m->n, c) && cg_config_check(m, c);
    if (ok)
        memcpy(out, c, m->size);
    free(c);
    return ok;
}

char *cg_config_to_json(const cg_config_model *m, const void *cfg)
{
    return cg_config_check(m, cfg) ? cg_config_write(m->model, m->fields, m->n, cfg) : NULL;
}

bool cg_config_same_arch_json(const cg_config_model *m, const char *json_a, const char *json_b)
{
    void *a = malloc(m->size), *b = malloc(m->size);
    bool ok = a && b;
    if (!ok)
        cg_set_error("%s config: out of memory", m->model);
    ok = ok && cg_config_parse(m, json_a, a) && cg_config_parse(m, json_b, b) &&
         cg_config_same_arch(m->fields, m->n, a, b);
    free(a);
    free(b);
    return ok;
}
