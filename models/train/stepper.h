/* cgrad zoo: one optimizer step of the trainer. */
#ifndef CG_MODELS_TRAIN_STEPPER_H
#define CG_MODELS_TRAIN_STEPPER_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dist.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_trainer_model cg_trainer_model; /* run.h */

/* The optimizer step alone (what cg_trainer_run repeats; build/tools/bench
 * times it): grad_accum micro-batches (each loss weighted by its share of
 * the step's units), backward, gradients averaged over MPI ranks, the NaN
 * check, clipping, the optimizer. */
typedef struct {
    const cg_trainer_model *m;
    cg_optim *opt; /* over the module's trainable parameters (m->optim);
                             * frozen ones (cg_module_requires_grad, LoRA's
                             * base: models/train/finetune.h) are left out */
    int n_train;   /* their number */
    int grad_accum;
    bool skip_nonfinite;
    cg_param_list pl;
    cg_optim_param *op;
    double *w, *tok;
    /* With more than one rank: gradients averaged during the last
     * micro-batch's backward (dist/dist.h cg_dist_reducer; buckets
     * of CG_DIST_BUCKET_MB, default 4); CG_DIST_OVERLAP=0 averages them
     * after backward instead (cg_dist_average_grads). */
    cg_dist_reducer *reducer;
    /* ZeRO-1 (zero_stage 1 with more than one rank; dist/dist.h):
     * opt is this rank's shard (cg_optim_new_sharded), the reducer
     * reduce-scatters during backward (always; CG_DIST_OVERLAP is not
     * read), clipping and the NaN check use the global norm, and the
     * parameters are all-gathered after the update. A checkpoint gathers
     * the state as it writes it (dist.h cg_dist_stream). With one process
     * zero_stage 1 changes nothing. */
    bool zero;
} cg_stepper;

typedef enum {
    CG_STEP_OK = 0,
    CG_STEP_SKIPPED,   /* non-finite with skip_nonfinite: no update (error: why) */
    CG_STEP_NONFINITE, /* non-finite loss or gradient (error: the step and the parameter) */
    CG_STEP_FAILED     /* error */
} cg_step_result;

/* False + error (free with cg_stepper_free either way). zero_stage: 0, or
 * 1 for ZeRO-1 (above). */
bool cg_stepper_init(cg_stepper *s, const cg_trainer_model *m, int grad_accum, int zero_stage);
/* The weights' average of --ema-decay over the trainable parameters:
 * under ZeRO sharded as the optimizer (optim/ema.h cg_ema_new_sharded; a
 * swap all-gathers the parameters, so every rank swaps together), else
 * whole. NULL + error. */
cg_ema *cg_stepper_ema_new(cg_stepper *s, double decay);
void cg_stepper_free(cg_stepper *s);
/* Take the optimizer step numbered step (1-based; its learning rate is
 * m->lr(step)). *loss: the step's mean loss over every rank; *tokens: the
 * tokens processed by every rank. */
cg_step_result cg_stepper_step(cg_stepper *s, int64_t step, double *loss, double *tokens);

#ifdef __cplusplus
}
#endif
#endif
