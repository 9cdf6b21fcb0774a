/* libFuzzer target: the environment variables cgrad reads (core/parse.h
 * cg_env_number, cg_env_flag, cg_env_check), as a shell hands them over.
 *
 * The input is lines (split at newline bytes, at most 8); a line's first
 * byte picks a variable of the table, the rest is its value (up to a NUL,
 * which an environment cannot hold). The variables are set, every other
 * one unset, then each is read as the program reads it. Checked: a value
 * is taken exactly when core's parser of its kind takes it (the same
 * number), within the variable's documented range; an empty value is "not
 * given"; a refusal names the variable and leaves *out as it was; the
 * other kind's reader refuses the name; cg_env_check refuses exactly when
 * one is malformed, with the first one's message in the table's order. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "fuzz/fuzz.h"

enum { FLAG, INT, NUM };

/* core/parse.c's table as parse.h and the programs' docs describe it */
static const struct {
    const char *name;
    int kind;
    double lo, hi;
} VARS[] = {
    {"CG_MALLOC_DEFAULT", FLAG, 0, 0},
    {"CG_ALLOC_CACHE_MB", INT, 0, 1 << 30},
    {"CG_BF16_EMULATE", FLAG, 0, 0},
    {"CG_BF16_AMX", FLAG, 0, 0},
    {"CG_AMX_EMULATE", FLAG, 0, 0},
    {"CG_ATTN_AMX", FLAG, 0, 0},
    {"CG_BLIS_DRIVER", FLAG, 0, 0},
    {"CG_BLIS_DEFAULT", FLAG, 0, 0},
    {"CG_MAX_INPUT_MB", INT, 1, 1 << 30},
    {"CG_DIST_MPI", FLAG, 0, 0},
    {"CG_DIST_TIMEOUT", NUM, 0, 1e6},
    {"CG_DIST_BUCKET_MB", NUM, 1e-3, 1024},
    {"CG_DEBUG", FLAG, 0, 0},
    {"CG_DIST_OVERLAP", FLAG, 0, 0},
    {"CG_DIST_VERBOSE", FLAG, 0, 0},
};
enum { N_VARS = sizeof VARS / sizeof VARS[0], MAX_LINES = 8 };

/* Reads variable i as its readers do and checks the result against the
 * value it was given (NULL: unset). Returns whether it is malformed; its
 * message then goes into msg. */
static bool read_var(int i, const char *value, char *msg, size_t cap)
{
    char what[64];
    snprintf(what, sizeof what, "environment variable %s", VARS[i].name);
    bool given = value && *value, parsed = false;
    double want = 0;
    bool want_flag = false;
    if (given) { /* what core's parser of its kind makes of it */
        cg_clear_error();
        if (VARS[i].kind == FLAG) {
            parsed = cg_parse_bool(what, value, &want_flag);
        } else if (VARS[i].kind == INT) {
            int64_t v = 0;
            parsed = cg_parse_i64(what, value, (int64_t)VARS[i].lo, (int64_t)VARS[i].hi, &v);
            want = (double)v;
        } else {
            parsed = cg_parse_f64(what, value, VARS[i].lo, VARS[i].hi, &want);
        }
    }
    cg_clear_error();
    bool ok, wrong_kind;
    char e[1024] = "";
    if (VARS[i].kind == FLAG) {
        bool out = true;
        ok = cg_env_flag(VARS[i].name, &out);
        snprintf(e, sizeof e, "%s", cg_last_error());
        CG_FUZZ_CHECK(ok == !cg_has_error());
        if (ok) { /* read again: the same (set again when given) */
            bool out2 = given ? !out : out;
            CG_FUZZ_CHECK(cg_env_flag(VARS[i].name, &out2) && out2 == out);
        }
        CG_FUZZ_CHECK(ok ? (given ? out == want_flag : out == true) : out == true);
        double d = 42;
        wrong_kind = !cg_env_number(VARS[i].name, &d) && d == 42;
    } else {
        double out = -7.5;
        ok = cg_env_number(VARS[i].name, &out);
        snprintf(e, sizeof e, "%s", cg_last_error());
        CG_FUZZ_CHECK(ok == !cg_has_error());
        if (ok && given) {
            CG_FUZZ_CHECK(out == want && out >= VARS[i].lo && out <= VARS[i].hi);
            CG_FUZZ_CHECK(VARS[i].kind != INT || out == floor(out));
        } else {
            CG_FUZZ_CHECK(out == -7.5);
        }
        bool b = true;
        wrong_kind = !cg_env_flag(VARS[i].name, &b) && b;
    }
    CG_FUZZ_CHECK(wrong_kind);
    CG_FUZZ_CHECK(ok == (!given || parsed));
    if (ok)
        return false;
    /* a refusal names the variable, as the programs print it */
    CG_FUZZ_CHECK(strncmp(e, what, strlen(what)) == 0);
    snprintf(msg, cap, "%s", e);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *value[N_VARS] = {0};
    char *buf = malloc(size + 1);
    CG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *p = buf, *end = buf + size;
    for (int line = 0; line < MAX_LINES && p < end; line++) {
        char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q)
            q = end;
        *q = '\0';
        value[(unsigned char)*p % N_VARS] = p + 1 > q ? q : p + 1; /* a later line wins */
        p = q + 1;
    }
    for (int i = 0; i < N_VARS; i++) {
        if (value[i])
            CG_FUZZ_CHECK(setenv(VARS[i].name, value[i], 1) == 0);
        else
            CG_FUZZ_CHECK(unsetenv(VARS[i].name) == 0);
    }
    char first[1024] = "", msg[1024];
    for (int i = 0; i < N_VARS; i++)
        if (read_var(i, value[i], msg, sizeof msg) && !first[0])
            snprintf(first, sizeof first, "%s", msg);
    cg_clear_error();
    bool all = cg_env_check();
    CG_FUZZ_CHECK(all == !first[0]);
    if (!all)
        CG_FUZZ_CHECK(strcmp(cg_last_error(), first) == 0);
    /* a name outside the table is refused by both readers */
    double d = 1;
    bool b = false;
    cg_clear_error();
    CG_FUZZ_CHECK(!cg_env_number("CG_NOT_A_VARIABLE", &d) && d == 1 && cg_has_error());
    cg_clear_error();
    CG_FUZZ_CHECK(!cg_env_flag("CG_NOT_A_VARIABLE", &b) && !b && cg_has_error());
    for (int i = 0; i < N_VARS; i++) /* the next input, or the process, starts clean */
        unsetenv(VARS[i].name);
    free(buf);
    return 0;
}
