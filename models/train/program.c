/* cgrad zoo: the one shape of a zoo program (see program.h). */
#include "models/train/program.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/parse.h"

static char g_xcpu_msg[160];
/* SIGXCPU (past the soft CPU-time limit, ulimit -t) outside training,
 * whose default action ends the process with a core dump and no message:
 * one line and exit 1 (training saves and stops instead:
 * cg_train_catch_signals).
 * exit: a signal handler can only end the process (write and _exit are
 * async-signal-safe; exit is not). */
static void on_xcpu(int sig)
{
    (void)sig;
    ssize_t k = write(STDERR_FILENO, g_xcpu_msg, strlen(g_xcpu_msg));
    (void)k;
    _exit(CG_EXIT_FAIL);
}

/* The program's name, its SIGXCPU message, fds 0-2 and OMP_NUM_THREADS
 * (cg_cli_start), the CG_ variables and MPI: -1 or the exit code. */
static int start(int *argc, char ***argv, const char *prog)
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
    if (!cg_dist_init(argc, argv) || !cg_dist_quiet_nonroot())
        return cg_prog_fail_lib("MPI");
    return -1;
}

/* Under mpirun (more than one rank), train alone is data-parallel: any
 * other command would run once per rank, each writing the same --out
 * (average, sample --attention, attention), so it is refused on every
 * rank before it starts; its --help is printed (by rank 0). -1 to go on,
 * or the exit code. */
static int one_process(const char *cmd, int argc, char **argv)
{
    if (cg_dist_size() <= 1 || !strcmp(cmd, "train"))
        return -1;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return -1;
    cg_prog_fail("%s runs as one process: start it without mpirun (train alone is "
                 "data-parallel; each of the %d ranks would run all of it, writing the same files)",
                 cmd, cg_dist_size());
    return CG_EXIT_USAGE;
}

/* Run the command argv[1]: its exit code. */
static int dispatch(int argc, char **argv, const cg_program *p)
{
    char names[256] = "";
    for (int i = 0; i < p->ncmds; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s, ", p->cmds[i].name);
    snprintf(names + strlen(names), sizeof names - strlen(names), "average or merge");
    if (argc < 2) {
        cg_prog_fail("missing command (%s; try --help)", names);
        return CG_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        (!strcmp(argv[1], "help") && argc == 2)) {
        fputs(p->help, stdout);
        return 0;
    }
    /* "help CMD" is "CMD --help", as git's */
    char *help_argv[] = {"--help", NULL};
    const bool help = !strcmp(argv[1], "help");
    if (help && argc > 3) {
        cg_prog_fail("help takes one command (%s), got %d", names, argc - 2);
        return CG_EXIT_USAGE;
    }
    const char *cmd = help ? argv[2] : argv[1];
    const int cargc = help ? 1 : argc - 2;
    char **cargv = help ? help_argv : argv + 2;
    int rc;
    for (int i = 0; i < p->ncmds; i++)
        if (!strcmp(cmd, p->cmds[i].name))
            return (rc = one_process(cmd, cargc, cargv)) >= 0 ? rc : p->cmds[i].run(cargc, cargv);
    if (!strcmp(cmd, "average") || !strcmp(cmd, "merge"))
        return (rc = one_process(cmd, cargc, cargv)) >= 0 ? rc
               : cmd[0] == 'a' ? cg_average_command(cargc, cargv, &p->average)
                               : cg_merge_command(cargc, cargv, &p->average);
    cg_prog_fail("unknown command '%s' (%s; try --help)", cmd, names);
    return CG_EXIT_USAGE;
}

int cg_program_main(int argc, char **argv, const cg_program *p)
{
    int rc = start(&argc, &argv, p->name);
    if (rc >= 0)
        return rc;
    rc = dispatch(argc, argv, p);
    if (rc == 0 && !cg_cli_stdout_ok()) /* the result is lost: a failure */
        rc = cg_prog_fail_lib(NULL);
    fflush(stdout);
    /* exit: under MPI a failed rank must take the other ranks down with it,
     * or they wait forever in their next collective */
    if (rc != 0 && cg_dist_size() > 1)
        cg_dist_abort(rc, "stopping every rank");
    cg_dist_finalize();
    return rc;
}

int cg_train_command(int argc, char **argv, cg_cli_args *a, cg_train_opts *o, cg_train_recipe *rec,
                     const cg_train_program *p, void *self)
{
    /* parse, and the model's own checks, before any file is touched */
    int rc = cg_train_parse(argc, argv, a, p->help, o, rec);
    if (rc < 0 && p->check)
        rc = p->check(self, o, rec);
    if (rc >= 0)
        return rc;
    if (!o->data) /* before the output checks: the default is a file read too */
        o->data = p->default_data;
    /* a signal from here on stops the run before its first step, saving
     * nothing (reading the data or training a tokenizer can take minutes) */
    cg_train_catch_signals();
    /* set up: the output rules and --resume, then the model's data and model */
    cg_trainer t;
    cg_trainer_model m;
    memset(&m, 0, sizeof m);
    rc = cg_trainer_begin(&t, o, p->kind, p->default_out);
    if (rc < 0)
        rc = p->setup(self, &t, o, rec, &m);
    /* run and report (cg_trainer_run ends with the JSON line) */
    if (rc < 0)
        rc = cg_trainer_run(&t, &m);
    /* clean up */
    cg_trainer_end(&t);
    p->cleanup(self);
    return rc;
}
