/* The thread-local error slot (see error.h). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_msg[1024];
static _Thread_local bool g_set;
static _Thread_local unsigned long g_serial;
static unsigned long g_reports; /* cg_debug_report calls, all threads */

unsigned long cg_error_serial(void) { return g_serial; }

const char *cg_last_error(void) { return g_msg; }
bool cg_has_error(void) { return g_set; }

void cg_clear_error(void)
{
    g_msg[0] = '\0';
    g_set = false;
}

/* Back from s + k to the start of a UTF-8 character. */
static size_t char_start(const char *s, size_t k)
{
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    return k;
}

/* The message into g_msg. One longer than the slot (a long path in it)
 * keeps its start and its end, the reason, with " ... " for the middle, cut
 * on UTF-8 characters' boundaries. */
enum { HEAD = 256 };
static const char ELIDED[] = " ... ";
static void set_v(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int len = vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    char *full = len >= (int)sizeof g_msg ? malloc((size_t)len + 1) : NULL;
    if (full) {
        vsnprintf(full, (size_t)len + 1, fmt, again);
        size_t head = char_start(full, HEAD);
        size_t tail = (size_t)len - (sizeof g_msg - 1 - HEAD - strlen(ELIDED));
        while (tail < (size_t)len && ((unsigned char)full[tail] & 0xC0) == 0x80)
            tail++; /* forward to a character's start: the end fits */
        snprintf(g_msg, sizeof g_msg, "%.*s%s%s", (int)head, full, ELIDED, full + tail);
        free(full);
    }
    va_end(again);
    g_set = true;
    g_serial++;
}

void cg_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_v(fmt, ap);
    va_end(ap);
}

void cg_prefix_error(const char *fmt, ...)
{
    char old[sizeof g_msg], cut[sizeof g_msg];
    snprintf(old, sizeof old, "%s", g_msg);
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int len = vsnprintf(cut, sizeof cut, fmt, ap);
    char *prefix = len >= (int)sizeof cut ? malloc((size_t)len + 1) : NULL; /* whole: the end */
    if (prefix)                                                             /* of old is kept */
        vsnprintf(prefix, (size_t)len + 1, fmt, again);
    va_end(again);
    va_end(ap);
    cg_set_error("%s%s", prefix ? prefix : cut, old);
    free(prefix);
}

bool cg_error_null_input(const char *fn)
{
    if (!g_set)
        cg_set_error("%s: input is NULL", fn ? fn : "?");
    return false;
}

bool cg_error_null_arg(const char *op, const char *arg)
{
    if (!g_set)
        cg_set_error("%s: argument '%s' is NULL", op ? op : "?", arg ? arg : "?");
    return false;
}

void cg_debug_report(const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cg_set_error("%s", line);
    fprintf(stderr, "cgrad: CG_DEBUG: %s\n", line);
    __atomic_add_fetch(&g_reports, 1, __ATOMIC_RELAXED);
}

unsigned long cg_debug_reports(void) { return __atomic_load_n(&g_reports, __ATOMIC_RELAXED); }
