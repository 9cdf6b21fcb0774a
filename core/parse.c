/* cgrad core: strict parsing of flags and environment variables (see
 * parse.h). */
#include "core/parse.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool cg_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s || is_space(*s)) {
        cg_set_error("%s: expected an integer, got '%s'", what, s ? s : "");
        return false;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0') {
        cg_set_error("%s: '%s' is not an integer", what, s);
        return false;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        cg_set_error("%s: %s is out of range [%lld, %lld]", what, s, (long long)lo, (long long)hi);
        return false;
    }
    *out = (int64_t)v;
    return true;
}

bool cg_parse_u64(const char *what, const char *s, uint64_t *out)
{
    if (!s || !*s || is_space(*s) || *s == '-' || *s == '+') {
        cg_set_error("%s: expected a non-negative integer, got '%s'", what, s ? s : "");
        return false;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') {
        cg_set_error("%s: '%s' is not a non-negative integer", what, s);
        return false;
    }
    if (errno == ERANGE) {
        cg_set_error("%s: %s is too large (at most 18446744073709551615)", what, s);
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

/* ------------------------------------------------- numbers without a locale */

static locale_t g_c_locale; /* (locale_t)0: newlocale failed, the caller's locale is used */
static pthread_once_t g_c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { g_c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* The "C" locale made the calling thread's (uselocale); the previous one
 * is returned for back_locale. */
static locale_t to_c_locale(void)
{
    pthread_once(&g_c_locale_once, make_c_locale);
    return g_c_locale ? uselocale(g_c_locale) : (locale_t)0;
}

static void back_locale(locale_t old)
{
    int e = errno;
    if (old)
        uselocale(old);
    errno = e;
}

double cg_strtod_c(const char *s, char **end)
{
    locale_t old = to_c_locale();
    double v = strtod(s, end);
    back_locale(old);
    return v;
}

int cg_vsnprintf_c(char *buf, size_t n, const char *fmt, va_list ap)
{
    locale_t old = to_c_locale();
    int k = vsnprintf(buf, n, fmt, ap);
    back_locale(old);
    return k;
}

int cg_snprintf_c(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = cg_vsnprintf_c(buf, n, fmt, ap);
    va_end(ap);
    return k;
}

bool cg_parse_f64(const char *what, const char *s, double lo, double hi, double *out)
{
    if (!s || !*s || is_space(*s)) {
        cg_set_error("%s: expected a number, got '%s'", what, s ? s : "");
        return false;
    }
    char *end = NULL;
    errno = 0;
    double v = cg_strtod_c(s, &end);
    if (*end != '\0') {
        cg_set_error("%s: '%s' is not a number", what, s);
        return false;
    }
    if (errno == ERANGE && isfinite(v)) { /* an underflow: below DBL_MIN */
        cg_set_error("%s: '%s' is too small in magnitude for a double (use 0 or a value of "
                     "2.3e-308 or more)",
                     what, s);
        return false;
    }
    if (errno == ERANGE || !isfinite(v)) {
        cg_set_error("%s: '%s' is not a finite number", what, s);
        return false;
    }
    /* strtod also reads hexadecimal ("0x10" = 16): decimal digits only */
    if (s[strspn(s, "0123456789+-.eE")] != '\0') {
        cg_set_error("%s: '%s' is not a decimal number", what, s);
        return false;
    }
    if (v < lo || v > hi) {
        cg_set_error("%s: %s is out of range [%g, %g]", what, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cg_parse_bool(const char *what, const char *s, bool *out)
{
    static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
    for (int i = 0; s && i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    cg_set_error("%s: expected true or false, got '%s'", what, s ? s : "");
    return false;
}

/* ------------------------------------------------------------ environment */

enum { ENV_FLAG, ENV_INT, ENV_NUM };

static const struct {
    const char *name;
    int kind;
    double lo, hi;
} ENV[] = {
    {"CG_MALLOC_DEFAULT", ENV_FLAG, 0, 0},
    {"CG_ALLOC_CACHE_MB", ENV_INT, 0, 1 << 30},
    {"CG_BF16_EMULATE", ENV_FLAG, 0, 0},
    {"CG_BF16_AMX", ENV_FLAG, 0, 0},
    {"CG_AMX_EMULATE", ENV_FLAG, 0, 0}, /* core/amx_emulate.c */
    {"CG_ATTN_AMX", ENV_FLAG, 0, 0},    /* core/attention_amx.c */
    {"CG_BLIS_DRIVER", ENV_FLAG, 0, 0},
    {"CG_BLIS_DEFAULT", ENV_FLAG, 0, 0},
    {"CG_MAX_INPUT_MB", ENV_INT, 1, 1 << 30},
    {"CG_DIST_MPI", ENV_FLAG, 0, 0},
    {"CG_DIST_TIMEOUT", ENV_NUM, 0, 1e6},       /* seconds; 0: no watchdog */
    {"CG_DIST_BUCKET_MB", ENV_NUM, 1e-3, 1024}, /* megabytes */
    {"CG_DEBUG", ENV_FLAG, 0, 0},               /* core/debug.c */
    {"CG_DIST_OVERLAP", ENV_FLAG, 0, 0},
    {"CG_DIST_VERBOSE", ENV_FLAG, 0, 0},
};
enum { N_ENV = sizeof ENV / sizeof ENV[0] };

/* Parse variable i: 0 not given, 1 valid (*num or *flag set), -1 malformed
 * (error recorded). */
static int env_read(int i, double *num, bool *flag)
{
    const char *s = getenv(ENV[i].name);
    if (!s || !*s)
        return 0;
    char what[64];
    snprintf(what, sizeof what, "environment variable %s", ENV[i].name);
    bool ok;
    if (ENV[i].kind == ENV_FLAG) {
        ok = cg_parse_bool(what, s, flag);
    } else if (ENV[i].kind == ENV_INT) {
        int64_t v = 0;
        ok = cg_parse_i64(what, s, (int64_t)ENV[i].lo, (int64_t)ENV[i].hi, &v);
        *num = (double)v;
    } else {
        ok = cg_parse_f64(what, s, ENV[i].lo, ENV[i].hi, num);
    }
    return ok ? 1 : -1;
}

static int env_find(const char *name, bool flag)
{
    for (int i = 0; i < N_ENV; i++)
        if (!strcmp(ENV[i].name, name))
            return (ENV[i].kind == ENV_FLAG) == flag ? i : -1;
    return -1;
}

bool cg_env_number(const char *name, double *out)
{
    int i = env_find(name, false);
    if (i < 0) {
        cg_set_error("cg_env_number: '%s' is not a numeric variable cgrad reads", name);
        return false;
    }
    double v = 0;
    bool unused;
    int r = env_read(i, &v, &unused);
    if (r > 0)
        *out = v;
    return r >= 0;
}

bool cg_env_flag(const char *name, bool *out)
{
    int i = env_find(name, true);
    if (i < 0) {
        cg_set_error("cg_env_flag: '%s' is not a switch cgrad reads", name);
        return false;
    }
    double unused;
    bool v = false;
    int r = env_read(i, &unused, &v);
    if (r > 0)
        *out = v;
    return r >= 0;
}

bool cg_env_check(void)
{
    for (int i = 0; i < N_ENV; i++) {
        double num;
        bool flag;
        if (env_read(i, &num, &flag) < 0)
            return false;
    }
    return true;
}
