/* cgrad zoo: what every zoo program shares: its name in messages, the one-line
 * errors and warnings, and flag parsing (main() and the command dispatch:
 * program.h).
 *
 * Exit codes of every zoo program: 0 success (also a run stopped by
 * SIGINT/SIGTERM or --stop-at, which saves); 1 a failure (bad input, bad
 * data or checkpoint, a NaN, a failed save); 2 a bad command line (missing
 * or unknown command, unknown flag, bad flag value). Every error is one
 * line "PROG: error: ..." on stderr, printed where it happens; the code goes
 * back up to main (nothing below main exits: program.h); under MPI an error
 * ends every rank. */
#ifndef CG_MODELS_TRAIN_PROG_H
#define CG_MODELS_TRAIN_PROG_H

#include "models/util/cli.h"
#include "nn/safetensors.h"

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
/* cg_prog_fail with the library's last error message ("what: message"
 * when what is not NULL); returns CG_EXIT_FAIL. */
int cg_prog_fail_lib(const char *what);
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
/* The stderr line of a command that uses the weights' average a
 * checkpoint f keeps (models/train/checkpoint.h cg_ckpt_weights; path:
 * f's name): its decay and updates, and --no-ema. */
void cg_prog_note_average(const cg_st_file *f, const char *path);
#ifdef __cplusplus
}
#endif
#endif
