/* cgrad optim: PyTorch's ReduceLROnPlateau (1.13), which cuts the learning
 * rate when a metric stops improving:
 *
 *     cg_plateau *p = cg_plateau_new(CG_PLATEAU_MIN, 0.1, 10, 1e-4,
 *                                    CG_PLATEAU_REL, 0, 0.0, 1e-8);
 *     for (epoch ...) {
 *         ... train, evaluate: val_loss
 *         lr = cg_plateau_step(p, val_loss, lr);
 *         cg_optim_set_lr(opt, lr);
 *     }
 *     cg_plateau_free(p);
 *
 * Each step, as scheduler.step(metric) does: the metric is better than the
 * best so far when (mode min, rel) metric < best * (1 - threshold), (min,
 * abs) metric < best - threshold, (max, rel) metric > best * (1 +
 * threshold), (max, abs) metric > best + threshold; the best starts at inf
 * for min (-inf for max), so the first finite metric is better. Better:
 * best = metric and the bad count goes to 0; else the count goes up (a NaN
 * metric is never better: a bad step). In cooldown (its counter > 0) the
 * counter goes down and the bad count to 0. A bad count past patience
 * reduces the rate to max(lr * factor, min_lr), unless that moves it by
 * eps or less (then it stays), starts the cooldown (cooldown steps) and
 * zeroes the count. The rate is one (one param group: a per-parameter
 * scale of cg_optim_set_lr_scale scales it as before).
 *
 * Its state, cg_plateau_state, is plain values: save them as the training
 * state's f64 and i64 items (optim/train_state.h) and load them back with
 * cg_plateau_set_state, and the steps go on as PyTorch's load_state_dict
 * would. Errors: NULL / NAN / false + cg_set_error (core/error.h). */
#ifndef CG_OPTIM_PLATEAU_H
#define CG_OPTIM_PLATEAU_H

#include <stdbool.h>
#include <stdint.h>

#include "../optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CG_PLATEAU_MIN = 0, CG_PLATEAU_MAX } cg_plateau_mode;
typedef enum { CG_PLATEAU_REL = 0, CG_PLATEAU_ABS } cg_plateau_threshold_mode;

typedef struct cg_plateau cg_plateau;

/* What a step changes (PyTorch's attributes of the same names; last_epoch
 * counts the steps). */
typedef struct cg_plateau_state {
    double best;
    int64_t num_bad_epochs, cooldown_counter, last_epoch;
} cg_plateau_state;

/* PyTorch's defaults: CG_PLATEAU_MIN, 0.1, 10, 1e-4, CG_PLATEAU_REL, 0, 0,
 * 1e-8. NULL + error for an unknown mode or threshold_mode, factor outside
 * [0, 1), patience or cooldown < 0, threshold, min_lr or eps not finite and
 * >= 0, or no memory. */
cg_plateau *cg_plateau_new(cg_plateau_mode mode, double factor, int64_t patience, double threshold,
                           cg_plateau_threshold_mode threshold_mode, int64_t cooldown,
                           double min_lr, double eps);
/* One step on metric (any double: NaN and inf as PyTorch takes them) with
 * the current rate lr: the rate to use from now on (lr, or the reduced
 * one). NAN + error, the state unchanged, for a NULL p or an lr not finite
 * and >= 0. */
double cg_plateau_step(cg_plateau *p, double metric, double lr);
/* The step applied to an optimizer, as PyTorch's scheduler.step(metric)
 * sets its param group's lr: cg_plateau_step on the optimizer's rate
 * (cg_optim_lr), the result set with cg_optim_set_lr. False + error, the
 * plateau and the optimizer unchanged, for a NULL argument or a rate
 * cg_plateau_step refuses. A trainer that also sets a schedule's rate
 * every step overwrites the cut: step one or the other. */
bool cg_plateau_step_optim(cg_plateau *p, double metric, cg_optim *o);
/* The state now (a zeroed one with an error for NULL). */
cg_plateau_state cg_plateau_get_state(const cg_plateau *p);
/* Sets the state: false + error, p unchanged, for NULL arguments, a best
 * that is NaN, or counts < 0. */
bool cg_plateau_set_state(cg_plateau *p, const cg_plateau_state *st);
void cg_plateau_free(cg_plateau *p);

#ifdef __cplusplus
}
#endif
#endif
