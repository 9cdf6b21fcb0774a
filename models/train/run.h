/* cgrad zoo: a training run as the trainer (trainer.h) and its parts
 * (state.h, stepper.h) see it: what a model plugs in (cg_trainer_model)
 * and the trainer's own record of the run (cg_trainer). */
#ifndef CG_MODELS_TRAIN_RUN_H
#define CG_MODELS_TRAIN_RUN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tensor.h"
#include "models/text/tokenizer.h"
#include "models/train/finetune.h"
#include "models/train/options.h"
#include "models/util/config_json.h"
#include "models/train/outfile.h"
#include "models/train/train_common.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_TRAIN_RECENT 250 /* training losses averaged for the progress line */

typedef struct cg_trainer cg_trainer;

/* An evaluation's figures. */
typedef struct {
    double train, val;
    double score; /* in the run's --best-metric (options.h), when it has one; else NaN */
    int n_extra;
    struct {
        const char *key;  /* metrics-log key ("val_nll") */
        const char *name; /* on the evaluation line ("nll") */
        double value;
        int decimals;
    } extra[6];
} cg_eval_result;
/* Append a figure to e->extra (ignored when it is full). */
void cg_eval_add(cg_eval_result *e, const char *key, const char *name, double value, int decimals);

/* What a model plugs in. `self` is passed back to every callback. Needed:
 * name, module, batch, loss, lr, evaluate, finish, config_json and tok;
 * the others may be 0 or NULL (plot_title: the name). */
typedef struct cg_trainer_model {
    const char *name;       /* "charlm": the checkpoint's "model" and messages */
    const char *plot_title; /* title of the loss curve */
    cg_module *module;
    cg_rng *dropout_rng;    /* the model's dropout stream: saved, seeded per rank
                             * (NULL: none drawn; the trainer keeps one) */
    cg_optim_config optim;  /* the optimizer (its lr is set every step) */
    double weight_decay_2d; /* weight decay of parameters with >= 2 dims */
    double weight_decay_1d; /* ... and of the others */
    double clip_norm;       /* 0: no clipping */
    bool eval_at_start;     /* evaluate at step 0 too */
    void *self;
    /* Make micro-batch k (0 <= k < grad_accum) of the next optimizer step:
     * this rank's share. *weight: what the model's loss is a mean over on
     * this rank (rows, target tokens); *tokens: tokens processed here. */
    bool (*batch)(void *self, int k, double *weight, double *tokens);
    /* The mean loss of micro-batch k (a graph to backpropagate). The
     * trainer backpropagates it scaled by grad_scale, the micro-batch's
     * share w/W of the step's units (1 with one micro-batch): give it to
     * the model's fused head (cg_linear_cross_entropy's grad_scale), whose
     * forward then computes the gradients the backward uses, once. The
     * loss returned is not scaled. */
    cg_tensor *(*loss)(void *self, int k, float grad_scale);
    /* Learning rate of the optimizer step that brings the model to step
     * `step` (1-based). */
    double (*lr)(void *self, int64_t step);
    /* Its momentum (SGD's, RMSprop's; Adam's beta1), for a schedule that
     * moves it (onecycle's cycle_momentum), else NaN; NULL: none. */
    double (*momentum)(void *self, int64_t step);
    /* Evaluation at `step`: e->val, and e->train (NaN: the trainer uses
     * the mean of the recent training losses); e->extra: more figures for
     * the evaluation line and the metrics log; e->score: the run's
     * --best-metric, when it names one (the model checks the name). */
    bool (*evaluate)(void *self, int64_t step, cg_eval_result *e);
    /* At the end of a completed run (the checkpoint is saved): the final
     * evaluation; adds its fields to the JSON line (models/util/config_json.h
     * cg_json_put_num and the others). */
    bool (*finish)(void *self, const cg_trainer *t, cJSON *j);
    /* The checkpoint's "config" (malloc'd) and the model's own trainer
     * state, added to o. */
    char *(*config_json)(void *self);
    bool (*state_save)(void *self, cJSON *o);
    const cg_tokenizer *tok; /* the checkpoint's tokenizer (borrowed; models/text/tokenizer.h) */
} cg_trainer_model;

struct cg_trainer {
    cg_train_opts *o; /* with --resume: the checkpoint's recipe filled in */
    const char *out;  /* the checkpoint written */
    /* resuming: the checkpoint (open) and its state */
    cg_st_file *ckpt;
    cJSON *state;
    const cJSON *model_state; /* its "model" object (borrowed from state) */
    int64_t start, step;
    int64_t ckpt_steps; /* resuming: the --steps of the checkpoint's run (0: not resuming) */
    /* the run */
    cg_history hist;
    double recent[CG_TRAIN_RECENT];
    int n_recent;
    double elapsed, tokens; /* training seconds and tokens of this process */
    double comm;            /* of elapsed, the seconds in communication (dist/dist.h) */
    double last_loss;       /* loss of the last step taken */
    int64_t skipped;
    /* --ema-update-freq: the optimizer updates since the weights' average
     * last moved (fairseq's update_freq_counter), below the flag's value;
     * kept in the checkpoint ("ema_since") so that a resumed run moves it
     * where the uninterrupted run would */
    int64_t ema_since;
    bool interrupted;
    bool out_of_time;   /* stopped by --max-minutes (a normal end otherwise) */
    cg_rng dropout_rng; /* the saved stream (from the checkpoint on resume) */
    bool dropout_rng_set;
    cg_rng own_dropout_rng; /* the stream of a model that gives none (saved as one) */
    /* MPI: every rank's dropout counter at the last save (a rank's stream
     * advances by its own share of the batch), n_rank_counters of them
     * (0: none); a resume on as many ranks gives each rank its own */
    uint64_t *rank_counters;
    int n_rank_counters;
    cg_data_id data; /* the data read (models/train/outfile.h), once set */
    bool data_set;
    cg_data_id data_stored; /* resuming: the identity the checkpoint recorded */
    bool data_stored_set;
    cg_out_lock lock; /* flock'd NAME.cgrad-lock beside the checkpoint (models/train/outfile.h) */
    /* a fine-tuning run (models/train/finetune.h): the checkpoint it started
     * from (recorded in every save as "init_from"), and whether it trains
     * and saves LoRA adapters only */
    cg_ft_origin origin;
    bool from_origin, adapters;
    cg_metrics_log metrics; /* FILE.metrics.jsonl (rank 0; models/train/outfile.h) */
    /* --precision as this thread's policy from cg_trainer_begin to
     * cg_trainer_end (cg_autocast_begin), and the policy it replaced */
    bool autocast;
    cg_precision outer_precision;
    /* --keep-last: the steps of the evaluation checkpoints this run (with
     * the runs it resumes) wrote beside out and keeps, oldest first
     * (models/train/outfile.h cg_kept_path); kept in the checkpoint with
     * the resolved out they were written beside */
    int64_t kept[CG_TRAIN_KEEP_MAX + 1];
    int n_kept;
    /* the steps of the evaluation checkpoints a save drops from kept: in
     * the checkpoint it writes ("kept_dropped"), removed once its files are
     * written, so that a run killed (or failing) in between leaves none its
     * checkpoint does not name; a resume removes them at its first save */
    int64_t dropping[CG_TRAIN_KEEP_MAX + 1];
    int n_dropping;
    /* --keep-best: the step of the evaluation whose checkpoint the best
     * checkpoint (cg_best_path) holds, or -1 (a resumed run: the best of the
     * history it resumes, written then or not) */
    int64_t best_saved;
    bool early_stopped; /* --patience ran out (a normal end otherwise) */
};

#ifdef __cplusplus
}
#endif
#endif
