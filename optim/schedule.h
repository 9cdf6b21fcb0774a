/* cgrad optim: learning-rate schedules, pure functions of the step.
 *
 * Each one reproduces a formula of the reference trainers in double
 * precision, operation by operation:
 *   cosine  shared/reference/train_charlm.py lr_at(step, steps, warmup, hi, lo),
 *           step counted from 0:
 *             step < warmup:  hi * (step + 1) / warmup
 *             else:           r = min(1, (step - warmup) / max(1, steps - warmup))
 *                             lo + 0.5 * (1 + cos(pi * r)) * (hi - lo)
 *   noam    shared/reference/train_seq2seq.py, step counted from 1:
 *             factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)
 *           (Python raises at step 0; here step <= 0 gives 0.)
 *   linear  Hugging Face's get_linear_schedule_with_warmup (BERT's; with
 *           lo, fairseq's polynomial_decay of power 1), step from 0:
 *             step < warmup:  hi * (step / max(1, warmup))
 *             else:           lo + (hi - lo) * max(0, (steps - step) /
 *                                                     max(1, steps - warmup))
 *           (0 at step 0, as theirs; lo 0 gives their bits.)
 *   wsd     warmup-stable-decay (MiniCPM; Hagele et al. 2024, "Scaling Laws
 *           and Compute-Optimal Training Beyond Fixed Training Durations",
 *           linear cooldown), step from 0, cosine's warmup:
 *             step < warmup:            hi * (step + 1) / warmup
 *             step < steps - cooldown:  hi
 *             else:                     hi + (lo - hi) * (step - (steps -
 *                                       cooldown)) / max(1, cooldown)
 *           (lo reached at step == steps, as the cosine's)
 *   step    PyTorch's StepLR, step from 0: lr times gamma every step_size
 *           steps, multiplied as its scheduler does step by step (its bits,
 *           not those of lr * gamma^k; beyond 65,536 decays the rest as
 *           one power).
 * Use: cg_optim_set_lr(opt, cg_schedule_lr(&sched, step)) before each step. */
#ifndef CG_SCHEDULE_H
#define CG_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NAN + error for step < 0, warmup < 0 or steps < 0 (cg_optim_set_lr
 * refuses it). */
double cg_lr_warmup_cosine(int64_t step, int64_t steps, int64_t warmup, double hi, double lo);
/* NAN + error for d_model < 1 or warmup < 0 (cg_optim_set_lr refuses it). */
double cg_lr_noam(int64_t step, int64_t d_model, int64_t warmup, double factor);
/* NAN + error for step < 0, warmup < 0 or steps < 0. */
double cg_lr_warmup_linear(int64_t step, int64_t steps, int64_t warmup, double hi, double lo);
/* NAN + error for step < 0, warmup < 0, steps < 0 or cooldown outside
 * [0, steps]. */
double cg_lr_wsd(int64_t step, int64_t steps, int64_t warmup, int64_t cooldown, double hi,
                 double lo);
/* NAN + error for step < 0, step_size < 1 or gamma not finite and > 0. */
double cg_lr_step_decay(int64_t step, int64_t step_size, double gamma, double lr);

typedef enum {
    CG_SCHED_CONSTANT = 0,
    CG_SCHED_COSINE,
    CG_SCHED_NOAM,
    CG_SCHED_LINEAR,
    CG_SCHED_STEP,
    CG_SCHED_WSD
} cg_schedule_kind;

/* A schedule as a value, for trainers that choose one from options. */
typedef struct cg_schedule {
    cg_schedule_kind kind;
    double lr;         /* constant, step: the rate; cosine, linear: hi (the peak) */
    double lr_min;     /* cosine, linear: lo (reached at step == steps) */
    int64_t warmup;    /* cosine, noam, linear */
    int64_t steps;     /* cosine, linear: total steps */
    int64_t d_model;   /* noam */
    double factor;     /* noam */
    int64_t step_size; /* step */
    double gamma;      /* step */
    int64_t cooldown;  /* wsd: the last steps, which decay lr to lr_min */
} cg_schedule;

cg_schedule cg_schedule_constant(double lr);
cg_schedule cg_schedule_cosine(int64_t steps, int64_t warmup, double hi, double lo);
cg_schedule cg_schedule_noam(int64_t d_model, int64_t warmup, double factor);
cg_schedule cg_schedule_linear(int64_t steps, int64_t warmup, double hi, double lo);
cg_schedule cg_schedule_step(int64_t step_size, double gamma, double lr);
cg_schedule cg_schedule_wsd(int64_t steps, int64_t warmup, int64_t cooldown, double hi, double lo);
/* The rate at step (counted as the kind's formula counts it); NAN + error
 * for an unknown kind. */
double cg_schedule_lr(const cg_schedule *s, int64_t step);
/* "constant", "cosine", "noam", "linear", "step", "wsd" (static; "?" if
 * out of range). */
const char *cg_schedule_name(cg_schedule_kind k);
/* The kind named name (cg_schedule_name's): true, or false + error listing
 * the names. */
bool cg_schedule_parse(const char *name, cg_schedule_kind *out);

#ifdef __cplusplus
}
#endif
#endif
