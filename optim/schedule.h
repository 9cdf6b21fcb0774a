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
 * Use: cg_optim_set_lr(opt, cg_schedule_lr(&sched, step)) before each step. */
#ifndef CG_SCHEDULE_H
#define CG_SCHEDULE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NAN + error for step < 0 or warmup < 0 (cg_optim_set_lr refuses it). */
double cg_lr_warmup_cosine(int64_t step, int64_t steps, int64_t warmup, double hi, double lo);
/* NAN + error for d_model < 1 or warmup < 0 (cg_optim_set_lr refuses it). */
double cg_lr_noam(int64_t step, int64_t d_model, int64_t warmup, double factor);

typedef enum { CG_SCHED_CONSTANT = 0, CG_SCHED_COSINE, CG_SCHED_NOAM } cg_schedule_kind;

/* A schedule as a value, for trainers that choose one from options. */
typedef struct cg_schedule {
    cg_schedule_kind kind;
    double lr;       /* constant: the rate; cosine: hi (the peak) */
    double lr_min;   /* cosine: lo (reached at step == steps) */
    int64_t warmup;  /* cosine, noam */
    int64_t steps;   /* cosine: total steps */
    int64_t d_model; /* noam */
    double factor;   /* noam */
} cg_schedule;

cg_schedule cg_schedule_constant(double lr);
cg_schedule cg_schedule_cosine(int64_t steps, int64_t warmup, double hi, double lo);
cg_schedule cg_schedule_noam(int64_t d_model, int64_t warmup, double factor);
/* The rate at step (counted as the kind's formula counts it); NAN + error
 * for an unknown kind. */
double cg_schedule_lr(const cg_schedule *s, int64_t step);
/* "constant", "cosine", "noam" (static; "?" if out of range). */
const char *cg_schedule_name(cg_schedule_kind k);

#ifdef __cplusplus
}
#endif
#endif
