/* cgrad zoo: program plumbing (see prog.h). */
#include "models/train/prog.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/parse.h"
#include "models/train/dist.h"
#include "models/train/train_common.h"

static const char *g_prog = "cgrad";

void cg_prog_set_name(const char *prog) { g_prog = prog; }
const char *cg_prog_name(void) { return g_prog; }

static void vprint_line(const char *kind, const char *fmt, va_list ap)
{
    cg_progress_end();
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (char *p = msg; *p; p++) /* keep it one line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, "%s: %s: %s\n", g_prog, kind, msg);
    fflush(stderr);
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

void cg_prog_die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (cg_dist_size() > 1) /* do not leave the other ranks waiting */
        cg_dist_abort(code, "stopping every rank");
    exit(code);
}

void cg_prog_die_lib(const char *what)
{
    const char *e = cg_has_error() ? cg_last_error() : "unknown error";
    if (what)
        cg_prog_die(CG_EXIT_FAIL, "%s: %s", what, e);
    cg_prog_die(CG_EXIT_FAIL, "%s", e);
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

/* SIGXCPU (past the soft CPU-time limit, ulimit -t) outside training,
 * whose default action ends the process with a core dump and no message:
 * one line and exit 1 (training saves and stops instead:
 * cg_train_catch_signals). */
static char g_xcpu_msg[160];
static void on_xcpu(int sig)
{
    (void)sig;
    ssize_t k = write(STDERR_FILENO, g_xcpu_msg, strlen(g_xcpu_msg));
    (void)k;
    _exit(CG_EXIT_FAIL);
}

int cg_prog_main(int argc, char **argv, const char *prog, const char *help,
                 const cg_prog_command *cmds, int ncmds)
{
    cg_prog_set_name(prog);
    snprintf(g_xcpu_msg, sizeof g_xcpu_msg,
             "%s: error: the CPU time limit (ulimit -t) was reached; stopping\n", prog);
    signal(SIGXCPU, on_xcpu);
    cg_cli_start();        /* fds 0-2 taken, OMP_NUM_THREADS capped: before anything else */
    if (!cg_env_check()) { /* a malformed CG_ variable, as a malformed flag */
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot())
        return cg_prog_fail_lib("MPI");
    char names[256] = "";
    for (int i = 0; i < ncmds; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 i == 0           ? ""
                 : i + 1 == ncmds ? " or "
                                  : ", ",
                 cmds[i].name);
    int rc;
    if (argc < 2) {
        cg_prog_fail("missing command (%s; try --help)", names);
        rc = CG_EXIT_USAGE;
    } else if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(help, stdout);
        rc = 0;
    } else {
        rc = -1;
        for (int i = 0; i < ncmds && rc < 0; i++)
            if (!strcmp(argv[1], cmds[i].name))
                rc = cmds[i].run(argc - 2, argv + 2);
        if (rc < 0) {
            cg_prog_fail("unknown command '%s' (%s; try --help)", argv[1], names);
            rc = CG_EXIT_USAGE;
        }
    }
    if (rc == 0 && !cg_cli_stdout_ok()) /* the result is lost: a failure */
        rc = cg_prog_fail_lib(NULL);
    fflush(stdout);
    if (rc != 0 && cg_dist_size() > 1) /* do not leave the other ranks waiting */
        cg_dist_abort(rc, "stopping every rank");
    cg_dist_finalize();
    return rc;
}
