/* cgrad zoo: small helpers for the command-line programs: a flag table
 * whose values are read by core's strict parsers (core/parse.h: "12x", "",
 * " 3", "0x10", "1e999" and out-of-range values are errors, with a message
 * naming the flag and the bad text, which the programs print as their one
 * error line). */
#ifndef CG_MODELS_CLI_H
#define CG_MODELS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The thread count to use for --threads N: at most the CPUs this process
 * may run on (sched_getaffinity), since more threads only compete for them
 * (and 1000 OpenMP threads under a memory limit made libgomp abort with its
 * own message). Above that it prints "PROG: warning: --threads N is more
 * than the C CPUs available; using C" on stderr and returns C. N <= 0 (not
 * given) is returned unchanged. */
int64_t cg_cli_threads(const char *prog, int64_t n);
/* --threads N for the kernels: cg_set_num_threads(cg_cli_threads(prog, n))
 * when n > 0 (given); otherwise, when cg_cli_start lowered OMP_NUM_THREADS
 * to the CPUs (core's cg_cap_default_threads), the warning "PROG: warning:
 * OMP_NUM_THREADS=N is more than the C CPUs available; using C". */
void cg_cli_set_threads(const char *prog, int64_t n);

/* What every program does first with its standard streams and signals: a
 * closed fd 0, 1 or 2 is opened on /dev/null (stdin write-only, stdout and
 * stderr read-only, so that using a closed stream still fails) before any
 * file is opened; SIGXFSZ (a file-size limit) and SIGPIPE (a reader of the
 * output that went away: `| head`) are ignored, so that the write fails
 * instead of the signal ending the process, and the program says so in one
 * line, "cannot write the output: Broken pipe", and exits 1 (a result lost,
 * as on a full disk; a stream of output stops at its next write:
 * models/util/files.h cg_output_flush). */
void cg_cli_streams(void);
/* cg_cli_streams, then OpenMP's waiting threads spin briefly
 * (cg_omp_short_spin: the program starts again with GOMP_SPINCOUNT worth
 * about 50 us on this CPU, cg_omp_spin_count, unless the environment chose
 * a policy), and OpenMP's default thread count is capped at the CPUs. The
 * zoo's programs and bench; the GEMM and decoding benchmarks, which measure
 * OpenMP as the environment sets it, call cg_cli_streams alone. */
void cg_cli_start(void);
/* Flush stdout and check every write to it (models/util/files.h
 * cg_output_flush): false + "cannot write the output: <reason>" (a full
 * disk, a closed stdout, a reader gone). A program whose result is lost
 * exits 1. */
bool cg_cli_stdout_ok(void);

/* One row of a flag table. kind says how the value is read; dst points to
 * the variable that receives it. For CG_CLI_SWITCH no value is taken and
 * *(bool *)dst becomes true (false for CG_CLI_SWITCH_OFF).
 *
 * A command's table is the one place a flag is declared: its name, its
 * variable, its range, its --help lines and what a checkpoint does with it
 * (flags). Whether a flag was given comes from the parse (cg_cli_args,
 * cg_cli_given), not from a variable of its own. A row with name NULL is a
 * line of help text only (a heading between groups of flags). */
typedef enum {
    CG_CLI_I64,       /* int64_t, range [lo, hi] */
    CG_CLI_U64,       /* uint64_t */
    CG_CLI_F64,       /* double, range [lo, hi] */
    CG_CLI_BOOL,      /* bool with a value (--norm-first false) */
    CG_CLI_STR,       /* const char * (points into argv) */
    CG_CLI_TEXT,      /* const char *, UTF-8 text (a prompt, a sentence): other bytes
                   * are a bad value ("--prompt is not valid UTF-8 (bad byte 0xff
                   * at offset 2)") */
    CG_CLI_SWITCH,    /* bool, no value: true */
    CG_CLI_SWITCH_OFF /* bool, no value: false (--no-keep-best beside --keep-best,
                       * the same dst: the last given wins, as argparse's
                       * BooleanOptionalAction) */
} cg_cli_kind;

/* What a training checkpoint does with a flag (cg_cli_opt.flags). */
enum {
    CG_CLI_FIXED = 1, /* the checkpoint fixes it: --resume refuses it */
    CG_CLI_SAVED = 2  /* kept in the checkpoint's "options" and restored on
                       * --resume (under its name without "--", '-' as '_')
                       * unless given again (a FIXED one cannot be) */
};

typedef struct {
    const char *name; /* "--steps"; NULL: a help line only */
    cg_cli_kind kind;
    void *dst;
    double lo, hi;    /* for I64 and F64 */
    const char *help; /* its lines in --help ("  --steps N  ...\n"); NULL when
                        * another row's lines cover it */
    unsigned flags;   /* CG_CLI_FIXED | CG_CLI_SAVED */
} cg_cli_opt;

/* Parse argv[0..argc) against opts (n entries). Accepts "--flag value" and
 * "--flag=value". Sets *help when -h/--help is seen (and stops). False +
 * error on an unknown flag, a missing value, a stray positional argument or
 * a bad value. */
bool cg_cli_parse(int argc, char **argv, const cg_cli_opt *opts, int n, bool *help);

/* A parsed command line: the table and which of its rows were given. */
#define CG_CLI_MAX_OPTS 96
typedef struct {
    const cg_cli_opt *opts;
    int n;                      /* at most CG_CLI_MAX_OPTS */
    int given[CG_CLI_MAX_OPTS]; /* 0: not given, else its place (1, 2, ...) among
                                  * the flags given, in command-line order */
} cg_cli_args;

/* cg_cli_parse over a->opts, recording in a->given which rows were given. */
bool cg_cli_parse_args(int argc, char **argv, cg_cli_args *a, bool *help);
/* Was a flag that writes to dst given? (False for a NULL a.) */
bool cg_cli_given(const cg_cli_args *a, const void *dst);
/* The given flags whose row has all of `flags` set, in command-line order,
 * as "--a, --b" into buf (cap bytes); false when there are none. */
bool cg_cli_given_list(const cg_cli_args *a, unsigned flags, char *buf, size_t cap);
/* The help lines of opts[0..n), in table order. */
void cg_cli_help(FILE *f, const cg_cli_opt *opts, int n);

/* Split argv[0..argc) into flags (with their values) and positional
 * arguments: an argument starting with "--" (or "-h") is a flag, followed by
 * its value unless it is a switch of opts or has "="; "--" ends the flags.
 * flags and pos must hold argc entries each. */
void cg_cli_split(int argc, char **argv, const cg_cli_opt *opts, int n, char **flags, int *nf,
                  char **pos, int *np);

#ifdef __cplusplus
}
#endif
#endif
