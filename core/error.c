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

static void set_v(const char *fmt, va_list ap)
{
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
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
    char prefix[sizeof g_msg], old[sizeof g_msg];
    snprintf(old, sizeof old, "%s", g_msg);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    cg_set_error("%s%s", prefix, old);
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
