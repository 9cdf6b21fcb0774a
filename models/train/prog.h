/* cgrad zoo: what every zoo program shares: its name in messages, the one-line
 * errors and warnings, flag parsing, and main() with the command dispatch.
 *
 * Exit codes of every zoo program: 0 success (also a run stopped by
 * SIGINT/SIGTERM or --stop-at, which saves); 1 a failure (bad input, bad
 * data or checkpoint, a NaN, a failed save); 2 a bad command line (missing
 * or unknown command, unknown flag, bad flag value). Every error is one
 * line "PROG: error: ..." on stderr; under MPI an error ends every rank. */
#ifndef CG_MODELS_TRAIN_PROG_H
#define CG_MODELS_TRAIN_PROG_H

#include "models/util/cli.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CG_EXIT_OK = 0, CG_EXIT_FAIL = 1, CG_EXIT_USAGE = 2 };

/* The program name used in messages ("charlm"). */
void cg_prog_set_name(const char *prog);
const char *cg_prog_name(void);
/* "PROG: error: <msg>" (one line: newlines become spaces) on stderr;
 * returns CG_EXIT_FAIL. */
int cg_prog_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* cg_prog_fail with the library's last error message. */
int cg_prog_fail_lib(const char *what);
/* Print like cg_prog_fail and end the process with code (every MPI rank). */
_Noreturn void cg_prog_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cg_prog_die(CG_EXIT_FAIL) with the library's last error message
 * ("what: message" when what is not NULL). */
_Noreturn void cg_prog_die_lib(const char *what);
void cg_prog_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse a command's flags. Returns -1 to go on, else the exit code to
 * return at once: 0 after printing help on --help, CG_EXIT_USAGE after the
 * error line. */
int cg_prog_parse(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help);

/* cg_prog_parse for a command that also takes positional arguments
 * (cg_cli_split): the flags are parsed, and the positional arguments are
 * moved, in order, to argv[0..*np). */
int cg_prog_parse_pos(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help,
                      int *np);
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv after the command name */
} cg_prog_command;

/* A zoo program's main(): MPI set-up (models/train/dist.h), the command
 * dispatch (a missing or unknown command exits CG_EXIT_USAGE), and an
 * MPI abort of every rank when a command fails. */
int cg_prog_main(int argc, char **argv, const char *prog, const char *help,
                 const cg_prog_command *cmds, int ncmds);

#ifdef __cplusplus
}
#endif
#endif
