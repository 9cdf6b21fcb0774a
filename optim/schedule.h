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
 * And torch.optim.lr_scheduler's (PyTorch 1.13), the rate get_last_lr()
 * gives after step scheduler.step() calls, step counted from 0, base lr:
 *   exponential      ExponentialLR(gamma): step's bits (its products, one
 *                    step at a time).
 *   multistep        MultiStepLR(milestones, gamma): lr times gamma^c at
 *                    each milestone reached (c: its count; 0 counts at step
 *                    0; repeats allowed), product by product as it does.
 *   polynomial       PolynomialLR(total_iters, power): lr * (1 -
 *                    min(step, total_iters) / total_iters)^power, the
 *                    closed form (PyTorch's chained factors differ in the
 *                    last bits: within 1e-12 relative).
 *   cosine_restarts  CosineAnnealingWarmRestarts(T_0, T_mult, eta_min):
 *                    cycles of T_0, T_0 T_mult, T_0 T_mult^2, ... steps,
 *                    each eta_min + (lr - eta_min) * (1 + cos(pi * T_cur /
 *                    T_i)) / 2, its bits.
 *   onecycle         OneCycleLR(max_lr, total_steps, pct_start,
 *                    anneal_strategy, div_factor, final_div_factor,
 *                    three_phase): its phases and bits. As PyTorch raises,
 *                    a step past total_steps and a step in a phase of
 *                    length 0 (pct_start * total_steps == 1, ...) are
 *                    refused. Its cycle_momentum (PyTorch's default; off
 *                    here unless cg_schedule_cycle_momentum turns it on):
 *                    the momentum goes the other way, max_momentum down
 *                    to base_momentum while the rate rises, and back up
 *                    (three phases: then stays at max_momentum), with the
 *                    same anneal and bits (cg_schedule_momentum); applied
 *                    (cg_schedule_apply) as SGD's and RMSprop's momentum or
 *                    Adam's and AdamW's beta1, as PyTorch sets
 *                    param_group['momentum'] or ['betas'][0].
 *   linear_lr        LinearLR(start_factor, end_factor, total_iters): lr *
 *                    (start + (end - start) * min(step, total_iters) /
 *                    total_iters), the closed form (within 1e-12 relative
 *                    of its chained factors).
 *   constant_lr      ConstantLR(factor, total_iters): lr * factor before
 *                    total_iters, then lr * factor * (1 / factor), its
 *                    bits.
 *   sequential       SequentialLR(schedulers, milestones): child i from
 *                    milestone i-1 on (child 0 from step 0), counting its
 *                    own steps from 0 there (PyTorch's scheduler.step(0)
 *                    at the milestone, then its steps); each child's rate is
 *                    its own (its lr: give each the optimizer's rate), its
 *                    bits. Children: any kind but the composites (PyTorch's
 *                    SequentialLR cannot step a ChainedScheduler).
 *   chained          ChainedScheduler(schedulers): the multiplicative
 *                    composition of chainable children, lr * f_1(step) *
 *                    f_2(step) * ..., f_i a child's rate at lr 1 (the
 *                    children's own lr is not read): the closed form of
 *                    PyTorch's in-place products (within 1e-12 relative).
 *                    Children: constant, step, exponential, multistep,
 *                    polynomial, linear_lr, constant_lr (those that scale
 *                    the rate; the others set it and are refused).
 * (linear and constant were taken: those two keep PyTorch's class names.)
 * total_iters 0, which PyTorch 1.13 takes and then keeps the first factor
 * forever, is refused.
 * Use: cg_schedule_apply(&sched, step, opt) (or cg_optim_set_lr(opt,
 * cg_schedule_lr(&sched, step)) when it moves no momentum) before each
 * step. */
#ifndef CG_SCHEDULE_H
#define CG_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "../optim/optim.h"

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
/* NAN + error for step < 0 or gamma not finite and > 0. */
double cg_lr_exponential(int64_t step, double gamma, double lr);
/* At most this many milestones. */
#define CG_SCHED_MAX_MILESTONES 16
/* NAN + error for step < 0, n outside [1, CG_SCHED_MAX_MILESTONES], NULL
 * milestones, a milestone < 0 or below the one before, or gamma not finite
 * and > 0. */
double cg_lr_multistep(int64_t step, const int64_t *milestones, int n, double gamma, double lr);
/* NAN + error for step < 0, total_iters < 1 or power not finite and >= 0. */
double cg_lr_polynomial(int64_t step, int64_t total_iters, double power, double lr);
/* NAN + error for step < 0, t_0 < 1 or t_mult < 1. */
double cg_lr_cosine_restarts(int64_t step, int64_t t_0, int64_t t_mult, double lr, double eta_min);
/* OneCycleLR's anneal_strategy. */
typedef enum { CG_ANNEAL_COS = 0, CG_ANNEAL_LINEAR } cg_anneal;
/* NAN + error for step < 0 or > total_steps, total_steps < 1, pct_start
 * outside [0, 1], an unknown anneal, div_factor or final_div_factor not
 * finite and > 0, or a step in a phase of length 0. PyTorch's defaults:
 * pct_start 0.3, CG_ANNEAL_COS, div_factor 25, final_div_factor 1e4, no
 * three_phase. */
double cg_lr_onecycle(int64_t step, int64_t total_steps, double max_lr, double pct_start,
                      cg_anneal anneal, double div_factor, double final_div_factor,
                      bool three_phase);
/* NAN + error for step < 0, start_factor outside (0, 1], end_factor
 * outside [0, 1] or total_iters < 1. */
double cg_lr_linear_lr(int64_t step, double start_factor, double end_factor, int64_t total_iters,
                       double lr);
/* NAN + error for step < 0, factor outside (0, 1] or total_iters < 1. */
double cg_lr_constant_lr(int64_t step, double factor, int64_t total_iters, double lr);

typedef enum {
    CG_SCHED_CONSTANT = 0,
    CG_SCHED_COSINE,
    CG_SCHED_NOAM,
    CG_SCHED_LINEAR,
    CG_SCHED_STEP,
    CG_SCHED_WSD,
    CG_SCHED_EXPONENTIAL,
    CG_SCHED_MULTISTEP,
    CG_SCHED_POLYNOMIAL,
    CG_SCHED_COSINE_RESTARTS,
    CG_SCHED_ONECYCLE,
    CG_SCHED_LINEAR_LR,
    CG_SCHED_CONSTANT_LR,
    CG_SCHED_SEQUENTIAL,
    CG_SCHED_CHAINED
} cg_schedule_kind;

/* A schedule as a value, for trainers that choose one from options. */
typedef struct cg_schedule {
    cg_schedule_kind kind;
    double lr;         /* constant, step and PyTorch's: the rate (onecycle: max_lr);
                          cosine, linear: hi (the peak) */
    double lr_min;     /* cosine, linear: lo (reached at step == steps);
                          cosine_restarts: eta_min */
    int64_t warmup;    /* cosine, noam, linear */
    int64_t steps;     /* cosine, linear: total steps; polynomial, linear_lr,
                          constant_lr: total_iters; cosine_restarts: T_0;
                          onecycle: total_steps */
    int64_t d_model;   /* noam */
    double factor;     /* noam; constant_lr; linear_lr: start_factor */
    int64_t step_size; /* step */
    double gamma;      /* step, exponential, multistep */
    int64_t cooldown;  /* wsd: the last steps, which decay lr to lr_min */
    double end_factor; /* linear_lr */
    double power;      /* polynomial */
    int64_t t_mult;    /* cosine_restarts */
    double pct_start, div_factor, final_div_factor; /* onecycle */
    cg_anneal anneal;                               /* onecycle */
    bool three_phase;                               /* onecycle */
    int n_milestones;                               /* multistep; sequential: n_children - 1 */
    int64_t milestones[CG_SCHED_MAX_MILESTONES];    /* multistep, sequential */
    bool cycle_momentum;                            /* onecycle */
    double base_momentum, max_momentum;             /* onecycle with cycle_momentum */
    const struct cg_schedule *children;             /* sequential, chained: borrowed */
    int n_children;                                 /* sequential, chained */
} cg_schedule;

cg_schedule cg_schedule_constant(double lr);
cg_schedule cg_schedule_cosine(int64_t steps, int64_t warmup, double hi, double lo);
cg_schedule cg_schedule_noam(int64_t d_model, int64_t warmup, double factor);
cg_schedule cg_schedule_linear(int64_t steps, int64_t warmup, double hi, double lo);
cg_schedule cg_schedule_step(int64_t step_size, double gamma, double lr);
cg_schedule cg_schedule_wsd(int64_t steps, int64_t warmup, int64_t cooldown, double hi, double lo);
cg_schedule cg_schedule_exponential(double gamma, double lr);
/* Copies the first n milestones (up to CG_SCHED_MAX_MILESTONES; n kept for
 * cg_schedule_lr to refuse a longer list; NULL keeps none). */
cg_schedule cg_schedule_multistep(const int64_t *milestones, int n, double gamma, double lr);
cg_schedule cg_schedule_polynomial(int64_t total_iters, double power, double lr);
cg_schedule cg_schedule_cosine_restarts(int64_t t_0, int64_t t_mult, double lr, double eta_min);
cg_schedule cg_schedule_onecycle(int64_t total_steps, double max_lr, double pct_start,
                                 cg_anneal anneal, double div_factor, double final_div_factor,
                                 bool three_phase);
cg_schedule cg_schedule_linear_lr(double start_factor, double end_factor, int64_t total_iters,
                                  double lr);
cg_schedule cg_schedule_constant_lr(double factor, int64_t total_iters, double lr);
/* n children (2 to CG_SCHED_MAX_MILESTONES + 1; borrowed: they must
 * outlive the schedule) and their n - 1 milestones (copied; >= 1, strictly
 * increasing), checked by cg_schedule_lr. */
cg_schedule cg_schedule_sequential(const cg_schedule *children, int n, const int64_t *milestones);
/* n children (1 to CG_SCHED_MAX_MILESTONES + 1; borrowed) composed on the
 * rate lr, checked by cg_schedule_lr. */
cg_schedule cg_schedule_chained(const cg_schedule *children, int n, double lr);
/* s with OneCycleLR's cycle_momentum on (PyTorch's defaults:
 * base_momentum 0.85, max_momentum 0.95), checked by cg_schedule_momentum
 * (s not onecycle, momentums not finite and >= 0: refused there). */
cg_schedule cg_schedule_cycle_momentum(cg_schedule s, double base_momentum, double max_momentum);
/* The rate at step (counted as the kind's formula counts it); NAN + error
 * for an unknown kind. */
double cg_schedule_lr(const cg_schedule *s, int64_t step);
/* Does s move the momentum (a onecycle schedule with cycle_momentum)? */
bool cg_schedule_moves_momentum(const cg_schedule *s);
/* The momentum at step of a schedule that moves it; NAN + error for one
 * that does not, a step cg_schedule_lr refuses, or momentums not finite
 * and >= 0 (PyTorch takes base_momentum above max_momentum: so does
 * this). */
double cg_schedule_momentum(const cg_schedule *s, int64_t step);
/* Sets the optimizer's rate to the schedule's at step, and its momentum
 * (cg_optim_set_momentum: SGD's or RMSprop's momentum, Adam's or AdamW's
 * beta1) when the schedule moves it. False + error, the optimizer
 * unchanged: a step the schedule refuses, a rate or momentum the
 * optimizer refuses (Adagrad, an SGD built without momentum: PyTorch's
 * "optimizer must support momentum"). */
bool cg_schedule_apply(const cg_schedule *s, int64_t step, cg_optim *o);
/* "constant", "cosine", "noam", "linear", "step", "wsd", "exponential",
 * "multistep", "polynomial", "cosine_restarts", "onecycle", "linear_lr",
 * "constant_lr", "sequential", "chained" (static; "?" if out of range). */
const char *cg_schedule_name(cg_schedule_kind k);
/* The kind named name (cg_schedule_name's): true, or false + error listing
 * the names. */
bool cg_schedule_parse(const char *name, cg_schedule_kind *out);

#ifdef __cplusplus
}
#endif
#endif
