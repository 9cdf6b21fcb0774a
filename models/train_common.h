/* cgrad zoo: pieces shared by the training programs: a monotonic clock,
 * SIGINT handling, the progress line, the evaluation history (kept in the
 * checkpoint so that a resumed run continues its loss curve) and its PNG. */
#ifndef CG_MODELS_TRAIN_COMMON_H
#define CG_MODELS_TRAIN_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds from a monotonic clock. */
double cg_now(void);

/* SIGINT and SIGTERM set a flag (the first time; a second signal gets the
 * default action). The trainer polls it between steps. */
void cg_train_catch_signals(void);
bool cg_train_interrupted(void);

/* The progress line on stderr: rewritten in place on a terminal, one line
 * per call otherwise. cg_progress_end() finishes a line left open. */
void cg_progress(const char *prog, int64_t step, int64_t steps, double loss, double lr,
                 double tokens_per_s, double eta_s);
void cg_progress_end(void);
/* True when stderr is a terminal. */
bool cg_progress_is_tty(void);

/* Evaluations: (step, train loss, val loss). */
typedef struct {
    int n, cap;
    float *step, *train, *val;
} cg_history;

bool cg_history_push(cg_history *h, int64_t step, double train, double val);
void cg_history_free(cg_history *h);
/* {"step":[...],"train":[...],"val":[...]} (malloc'd) or NULL. */
char *cg_history_to_json(const cg_history *h);
/* Parse what cg_history_to_json wrote into an empty history. */
bool cg_history_from_json(const char *json, cg_history *h);
/* Loss curve (train and val) as a PNG at path. */
bool cg_history_plot(const cg_history *h, const char *path, const char *title);

/* "<path without .safetensors>.loss.png" (malloc'd). */
char *cg_loss_png_path(const char *ckpt_path);
/* Create the parent directory of path if it is missing (one level). */
bool cg_ensure_parent_dir(const char *path);

#ifdef __cplusplus
}
#endif
#endif
