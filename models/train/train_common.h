/* cgrad zoo: pieces shared by the training programs: SIGINT handling, the progress line, the evaluation history (kept in the
 * checkpoint so that a resumed run continues its loss curve) and its PNG. */
#ifndef CG_MODELS_TRAIN_COMMON_H
#define CG_MODELS_TRAIN_COMMON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "models/report/plot.h"
#include "models/text/tokenizer.h"
#include "core/clock.h"
#include "models/util/files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SIGINT, SIGTERM, SIGUSR1 (mpirun forwards it to every rank), SIGXCPU
 * (ulimit -t) and SIGHUP set a flag (the first time; a second one gets the
 * default action, except SIGXCPU, ignored from then on). The trainer polls
 * it between steps, and the evaluations between batches (charlm's
 * cg_charlm_sampled_loss is given it, seq2seq's cg_seq2seq_valid_loss
 * asks it; both stop with the error "interrupted"): a signal during an
 * evaluation is answered in one batch's time. SIGPIPE is ignored from the
 * program's start (models/util/cli.h cg_cli_streams): a closed pipe on
 * stdout or stderr fails the write, it does not end the run. */
void cg_train_catch_signals(void);
bool cg_train_interrupted(void);
/* After the last checkpoint is saved, for the final evaluation: SIGINT,
 * SIGTERM, SIGUSR1 and SIGHUP end the process at once (everything is
 * saved), SIGXCPU is ignored, and a flag already set is cleared (the
 * final evaluation runs whole or not at all). */
void cg_train_release_signals(void);

/* The progress line on stderr: rewritten in place on a terminal, one line
 * per call otherwise. cg_progress_end() finishes a line left open. */
void cg_progress(const char *prog, int64_t step, int64_t steps, double loss, double lr,
                 double tokens_per_s, double eta_s);
void cg_progress_end(void);
/* True when stderr is a terminal. */
bool cg_progress_is_tty(void);

/* The loss history of a run, kept in the checkpoint so that a resumed run
 * continues its curve:
 *  - evaluations: (step, train loss, val loss) at each evaluation, the
 *    step exact (the trainer asks whether a step was evaluated);
 *  - the dense training loss: the mean loss of each block of `every`
 *    consecutive recorded steps (CG_HISTORY_EVERY at first). When
 *    CG_HISTORY_DENSE_MAX blocks are kept, adjacent pairs merge and `every`
 *    doubles, so a long run keeps at most that many points. dstep is the
 *    mean step number of a block's losses. The block being filled is kept
 *    as sums (acc_*), so a resumed run gives the same series as an
 *    uninterrupted one.
 * A zeroed cg_history is empty and ready to use. */
#define CG_HISTORY_EVERY 10
#define CG_HISTORY_DENSE_MAX 2000

typedef struct {
    int n, cap;
    int64_t *step; /* exact at any step (a float's rounded past 2^24) */
    float *train, *val;
    /* each evaluation's score in `metric` (static: "bleu"), higher is
     * better, which then chooses the best evaluation instead of the
     * validation loss (fairseq's --best-checkpoint-metric with
     * --maximize-best-checkpoint-metric); metric NULL: none (NaN) */
    float *score;
    const char *metric;
    int dn, dcap;
    float *dstep, *dloss;
    int64_t every; /* 0 means CG_HISTORY_EVERY */
    double acc_loss;
    int64_t acc_step, acc_n;
    /* the validation line's legend in the plot (static; NULL: "validation") */
    const char *val_name;
} cg_history;

bool cg_history_push(cg_history *h, int64_t step, double train, double val);
/* cg_history_push with the evaluation's score in h->metric. */
bool cg_history_push_scored(cg_history *h, int64_t step, double train, double val, double score);
/* The best evaluation: that of the highest score when h->metric is set,
 * else of the lowest validation loss (the first of equal ones; NaN is
 * never the best): its index in h, or -1 when none is finite. */
int cg_history_best(const cg_history *h);
/* What chooses the best evaluation: h->metric, or "validation loss". */
const char *cg_history_best_name(const cg_history *h);
/* Its value at evaluation i (the score, or the validation loss). */
double cg_history_best_value(const cg_history *h, int i);
/* Record the training loss of one optimizer step (the loss of the step that
 * brought the model to `step`). A non-finite loss is not recorded. */
bool cg_history_train_step(cg_history *h, int64_t step, double loss);
/* Steps per point of the dense series. */
int64_t cg_history_every(const cg_history *h);
void cg_history_free(cg_history *h);
/* {"step":[...],"train":[...],"val":[...],("score":[...] with a metric,)
 *  "dense_every":K,"dense_step":[...],
 *  "dense_loss":[...],"dense_acc":{"loss":"<sum, %.17g>","step":S,"n":N}}
 * (malloc'd) or NULL. */
char *cg_history_to_json(const cg_history *h);
/* Parse what cg_history_to_json wrote into an empty history. The dense_*
 * fields are optional (histories written before them have none); a null
 * loss value reads as NaN. */
bool cg_history_from_json(const char *json, cg_history *h);
/* The same from a parsed cJSON object (const cJSON *), in linear time. */
bool cg_history_from_cjson(const cJSON *json, cg_history *h);
/* Loss curve as a PNG at path: the dense training loss as a thin line (with
 * the evaluations' train loss before its first point, for histories that
 * began without it) and the validation loss as a line with markers. */
bool cg_history_plot(const cg_history *h, const char *path, const char *title);
/* That curve's training line into x and y (room for h->n + h->dn + 1
 * points each): the evaluations' training losses before the first dense
 * point, the dense points, then the mean of the block being filled.
 * Returns the number of points. */
int cg_history_train_line(const cg_history *h, float *x, float *y);

/* The position of an epoch-based batch order (seq2seq) read back from a
 * checkpoint: `epoch` shuffles drawn so far, `pos` batches of the current
 * order consumed, n_batches per epoch, `step` steps done (one batch each).
 * Valid: epoch 0 with pos == n_batches at step 0 (no order drawn yet), or
 * epoch >= 1, 0 <= pos <= n_batches and (epoch-1)*n_batches + pos == step.
 * Anything else is refused (false + error naming path), so a resume never
 * indexes an order that was never drawn and replays at most `step`
 * batches' worth of shuffles. */
bool cg_train_position_check(int64_t epoch, int64_t pos, int64_t n_batches, int64_t step,
                             const char *path);

/* A file kept beside a checkpoint: "<path without .safetensors><suffix>"
 * (malloc'd), e.g. ".metrics.jsonl"; cg_loss_png_path: ".loss.png". A
 * name that is ".safetensors" alone keeps it (it has no stem). */
char *cg_ckpt_sibling(const char *ckpt_path, const char *suffix);
char *cg_loss_png_path(const char *ckpt_path);

/* models/report/plot.h cg_plot_attention_of labelled with token ids through tok
 * (cg_tokenizer_labels: subword pieces readable): rows are
 * row_ids[0..rows), columns col_ids[0..cols). */
bool cg_plot_attention_ids(const char *path, const char *title, int layers, cg_mha *const *mods,
                           const cg_tokenizer *tok, const int64_t *row_ids, int rows,
                           const int64_t *col_ids, int cols);

#ifdef __cplusplus
}
#endif
#endif
