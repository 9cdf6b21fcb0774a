/* cgrad zoo: the one shape of a zoo program (issue 35).
 *
 * main() hands its command line to cg_program_main, which sets up (the
 * program's name, fds, CG_ variables, MPI), dispatches to a command, checks
 * that the result reached stdout and cleans up. A `train` command is
 * cg_train_command: parse, the model's own flag checks, the output rules
 * and --resume (cg_trainer_begin), the model's set-up, the loop
 * (cg_trainer_run), the report, clean-up. A model supplies only its flag
 * tables and its callbacks.
 *
 * One error style: every function below main returns an exit code (-1: go
 * on) or false with the library's error set, and the message is printed
 * once (prog.h cg_prog_fail); nothing below main ends the process
 * (tests/check_exits.py checks it). Under MPI, main's failure ends every
 * rank. */
#ifndef CG_MODELS_TRAIN_PROGRAM_H
#define CG_MODELS_TRAIN_PROGRAM_H

#include "models/train/average.h"
#include "models/train/merge.h"
#include "models/train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv after the command name; the exit code */
} cg_prog_command;

/* A zoo program: its commands, then `average` (models/train/average.h) and
 * `merge` (models/train/merge.h). */
typedef struct {
    const char *name; /* "charlm": in every message */
    const char *help; /* PROG --help */
    const cg_prog_command *cmds;
    int ncmds;
    cg_avg_model average;
} cg_program;

/* A zoo program's main(): a missing or unknown command is CG_EXIT_USAGE;
 * a result that did not reach stdout is CG_EXIT_FAIL. Returns the exit
 * code (after an MPI abort of every rank when it is not 0). */
int cg_program_main(int argc, char **argv, const cg_program *p);

/* What a model's `train` command plugs into cg_train_command. `self` (the
 * model's run) is passed back to each callback. */
typedef struct {
    const char *kind;                       /* the checkpoint's "model": "charlm" */
    const char *help;                       /* printed above the flag table's help lines */
    const char *default_out, *default_data; /* --out and --data when not given */
    /* The model's checks of its flags, once parsed (o->args: which were
     * given), before any file is touched: -1 to go on, else the exit code
     * (the error printed). It may fill rec's shape from the preset
     * (cg_train_shape), as the set-up does again. NULL: none. */
    int (*check)(void *self, const cg_train_opts *o, cg_train_recipe *rec);
    /* Data, tokenizer and model, fresh, resumed (t->o->resume) or from a
     * base (t->o->init_from), and *m filled in: -1 or the exit code. */
    int (*setup)(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec,
                 cg_trainer_model *m);
    void (*cleanup)(void *self); /* whatever setup made, run or not */
} cg_train_program;

/* A train command over the flag table a (its rows write o, rec and the
 * model's run): parse, check, begin, set up, run, report, end. Returns
 * the exit code. */
int cg_train_command(int argc, char **argv, cg_cli_args *a, cg_train_opts *o, cg_train_recipe *rec,
                     const cg_train_program *p, void *self);

#ifdef __cplusplus
}
#endif
#endif
