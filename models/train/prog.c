/* cgrad zoo: program plumbing (see prog.h). */
#include "models/train/prog.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/train/train_common.h"

static const char *g_prog = "cgrad";

void cg_prog_set_name(const char *prog) { g_prog = prog; }
const char *cg_prog_name(void) { return g_prog; }

static void vprint_line(const char *kind, const char *fmt, va_list ap)
{
    cg_progress_end();
    char buf[2048];
    va_list again;
    va_copy(again, ap);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    /* whole, however long (two paths of 4,000 bytes): the reason is at the end */
    char *msg = len >= (int)sizeof buf ? malloc((size_t)len + 1) : NULL;
    if (msg)
        vsnprintf(msg, (size_t)len + 1, fmt, again);
    va_end(again);
    for (char *p = msg ? msg : buf; *p; p++) /* keep it one line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, "%s: %s: %s\n", g_prog, kind, msg ? msg : buf);
    fflush(stderr);
    free(msg);
}

int cg_prog_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    return CG_EXIT_FAIL;
}

int cg_prog_fail_lib(const char *what)
{
    const char *e = cg_has_error() ? cg_last_error() : "unknown error";
    return what ? cg_prog_fail("%s: %s", what, e) : cg_prog_fail("%s", e);
}

void cg_prog_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_line("warning", fmt, ap);
    va_end(ap);
}

int cg_prog_parse(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help)
{
    bool want_help = false;
    if (!cg_cli_parse(argc, argv, opts, n, &want_help)) {
        cg_prog_fail("%s", cg_last_error());
        return CG_EXIT_USAGE;
    }
    if (want_help) {
        fputs(help, stdout);
        return 0;
    }
    return -1;
}

int cg_prog_parse_pos(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help,
                      int *np)
{
    char **flags = malloc((size_t)(argc + 1) * sizeof *flags);
    char **pos = malloc((size_t)(argc + 1) * sizeof *pos);
    int nf, rc = CG_EXIT_FAIL;
    if (!flags || !pos) {
        cg_prog_fail("out of memory");
    } else {
        cg_cli_split(argc, argv, opts, n, flags, &nf, pos, np);
        rc = cg_prog_parse(nf, flags, opts, n, help);
        memcpy(argv, pos, (size_t)*np * sizeof *argv);
    }
    free(flags);
    free(pos);
    return rc;
}

void cg_prog_note_average(const cg_st_file *f, const char *path)
{
    const char *d = cg_st_metadata(f, "ema.decay"), *n = cg_st_metadata(f, "ema.updates");
    fprintf(stderr,
            "%s: '%s': using the weights' moving average (EMA, decay %g, %.30s updates); "
            "--no-ema: the trained weights\n",
            cg_prog_name(), path, d ? strtod(d, NULL) : NAN, n ? n : "?");
}
