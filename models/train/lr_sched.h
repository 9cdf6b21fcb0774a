/* cgrad zoo: the learning-rate schedule of the train commands, one for
 * both models: --lr-schedule and its flags, their checks, the state a
 * checkpoint keeps, and the rate (and momentum) of each step.
 *
 * The kinds are optim/schedule.h's, after a warmup of --warmup steps (the
 * program's own row: its default and help differ): cosine, linear,
 * constant and wsd (the warmup is theirs), PyTorch's exponential,
 * multistep, polynomial and cosine_restarts (a SequentialLR of the
 * warmup's ramp and the kind), onecycle (its own warmup), noam (the
 * Transformer paper's: its warmup is the Noam formula's; the peak --lr
 * gives factor = lr sqrt(d warmup)), and plateau: the peak after the
 * warmup, cut as PyTorch's ReduceLROnPlateau (optim/plateau.h) cuts it on
 * the validation loss of each evaluation after the warmup.
 *
 * The rate of a step is a function of the step and the evaluations before
 * it (plateau replays them from the run's history, which a checkpoint
 * keeps), so a resumed run takes the same rates as an uninterrupted one
 * with nothing more to save. Onecycle with --cycle-momentum moves the
 * optimizer's momentum (Adam's beta1) the other way, as OneCycleLR's
 * cycle_momentum (off by default here, as in optim/schedule.h). */
#ifndef CG_MODELS_TRAIN_LR_SCHED_H
#define CG_MODELS_TRAIN_LR_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "models/train/options.h"
#include "models/train/train_common.h"
#include "models/util/config_json.h"
#include "optim/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* --lr-schedule as given (the program's default kind's name until
     * then), then the kind's static name; plateau: kind constant */
    const char *text;
    cg_schedule_kind kind;
    bool plateau;
    double lr;      /* the peak (the program sets it: --lr, or its default) */
    int64_t warmup; /* the program's --warmup row writes it */
    double min_lr;  /* --min-lr (NAN until given or recorded: lr/10; plateau: 0) */
    int64_t cooldown;
    /* PyTorch's kinds: --gamma (exponential, multistep, plateau's factor;
     * 0 until set), --milestones ("a,b": multistep's, counted after the
     * warmup, parsed into ms), --power (polynomial: 1), --t0 and --t-mult
     * (cosine_restarts) */
    double gamma, power;
    const char *milestones;
    int64_t ms[CG_SCHED_MAX_MILESTONES];
    int n_ms;
    int64_t t0, t_mult;
    int64_t lr_patience; /* plateau's patience in evaluations (PyTorch's 10) */
    bool cycle_momentum; /* onecycle: move the momentum too */
    /* noam: the model's width (the program sets it) and the factor (0
     * until set: lr sqrt(d_model warmup), the peak lr at step warmup) */
    int64_t d_model;
    double factor;
} cg_train_sched;

/* Defaults: the kind named def ("cosine", "noam"), warmup, min_lr NAN,
 * power 1, t_mult 1, lr_patience 10; the rest 0. */
void cg_train_sched_init(cg_train_sched *s, const char *def, int64_t warmup);

/* --help's text of --lr-schedule (a #define: clang-format keeps its lines) */
#define CG_TRAIN_SCHEDULE_HELP                                                           \
    "  --min-lr X           where the schedule ends, at the last step (default lr/10;\n" \
    "                       plateau: the floor of its cuts, default 0)\n"                \
    "  --lr-schedule S      after the warmup (default: charlm cosine, seq2seq noam):\n"  \
    "                       cosine, linear (Hugging Face's: a straight line to\n"        \
    "                       --min-lr at the last step; its warmup starts at 0),\n"       \
    "                       constant (--lr), wsd (warmup-stable-decay: --lr, then a\n"   \
    "                       straight line to --min-lr over --cooldown), noam (the\n"     \
    "                       Transformer paper's: peak --lr at --warmup, then down as\n"  \
    "                       1/sqrt(step)), plateau (--lr, times --gamma 0.1 when the\n"  \
    "                       validation loss has not improved for --lr-patience 10\n"     \
    "                       evaluations: ReduceLROnPlateau's), or PyTorch's after\n"     \
    "                       the warmup: exponential (--gamma), multistep\n"              \
    "                       (--milestones, --gamma 0.1), polynomial (towards 0 at\n"     \
    "                       --steps, --power 1), cosine_restarts (--t0, --t-mult 1,\n"   \
    "                       down to --min-lr), onecycle (--lr its peak; no --warmup:\n"  \
    "                       its own 30%; --cycle-momentum: the momentum or beta1\n"      \
    "                       from 0.95 to 0.85 and back, OneCycleLR's)\n"                 \
    "  --gamma G --milestones A,B --power P --t0 N --t-mult M --lr-patience N\n"         \
    "                       those kinds' parameters (PyTorch's; milestones counted\n"    \
    "                       after the warmup)\n"                                         \
    "  --cooldown N         wsd's last N steps, which decay the rate (default: a\n"      \
    "                       fifth of --steps, so a resumed run with more --steps\n"      \
    "                       decays later)\n"

/* The schedule's rows both train commands share (s: cg_train_sched *),
 * after the program's own --warmup row. The checkpoint keeps them in the
 * model's state (cg_train_sched_fields), not as "options". */
/* clang-format off */
#define CG_TRAIN_SCHEDULE_FLAGS(s)                                                          \
    {"--min-lr", CG_CLI_F64, &(s)->min_lr, 0, 10, CG_TRAIN_SCHEDULE_HELP, CG_CLI_FIXED},    \
    {"--lr-schedule", CG_CLI_STR, &(s)->text, 0, 0, NULL, CG_CLI_FIXED},                   \
    {"--gamma", CG_CLI_F64, &(s)->gamma, 1e-12, 1e6, NULL, CG_CLI_FIXED},                  \
    {"--milestones", CG_CLI_STR, &(s)->milestones, 0, 0, NULL, CG_CLI_FIXED},              \
    {"--power", CG_CLI_F64, &(s)->power, 0, 1e6, NULL, CG_CLI_FIXED},                      \
    {"--t0", CG_CLI_I64, &(s)->t0, 1, 1e12, NULL, CG_CLI_FIXED},                           \
    {"--t-mult", CG_CLI_I64, &(s)->t_mult, 1, 1e6, NULL, CG_CLI_FIXED},                    \
    {"--lr-patience", CG_CLI_I64, &(s)->lr_patience, 0, 1e9, NULL, CG_CLI_FIXED},          \
    {"--cycle-momentum", CG_CLI_SWITCH, &(s)->cycle_momentum, 0, 0, NULL, CG_CLI_FIXED},   \
    {"--cooldown", CG_CLI_I64, &(s)->cooldown, 1, 1e9, NULL, CG_CLI_FIXED}
/* clang-format on */

/* The schedule's flags checked and --milestones parsed: each kind's flags
 * given for that kind only, the ones it needs given, --min-lr not above
 * the peak (s->lr, when known: > 0), a moved momentum one the optimizer
 * (opt: its config) has. A fresh run's before any file is read; ckpt: the
 * resumed checkpoint, whose recorded values a refusal names as damaged.
 * -1 to go on, else the exit code (the message said). */
int cg_train_sched_check(cg_train_sched *s, const cg_train_opts *o, const cg_optim_config *opt,
                         const char *ckpt);
/* Ready to give rates: the peak lr, the model's width (noam's), min_lr's
 * default (lr/10; plateau: 0) when neither given nor recorded. */
void cg_train_sched_ready(cg_train_sched *s, double lr, int64_t d_model);

/* At most this many state fields. */
#define CG_TRAIN_SCHED_NFIELDS 10
/* The fields a checkpoint keeps of s (its recorded recipe: each optional,
 * absent in a checkpoint from before the flag) into f; their count. */
int cg_train_sched_fields(cg_train_sched *s, cg_json_field *f);

/* The rate of the optimizer step that brings the model to step (1-based)
 * of a run of steps, after the evaluations of hist (plateau's; NULL:
 * none); NAN + error where the schedule refuses the step. PyTorch's
 * schedulers count from 0 (the first step reads their step 0), noam from 1
 * (the paper's step_num). */
double cg_train_sched_lr(const cg_train_sched *s, int64_t steps, int64_t step,
                         const cg_history *hist);
/* Its momentum (onecycle with cycle_momentum), or NAN for a schedule that
 * moves none (no error). */
double cg_train_sched_momentum(const cg_train_sched *s, int64_t steps, int64_t step);

/* --resume with another --steps, where the rate depends on them: said once,
 * with the rate of the next step both ways (resume: the checkpoint's path,
 * ckpt_steps: its run's --steps, start: its step). */
void cg_train_sched_note(const cg_train_sched *s, const char *resume, int64_t ckpt_steps,
                         int64_t steps, int64_t start, const cg_history *hist);

#ifdef __cplusplus
}
#endif
#endif
