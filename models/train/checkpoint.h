/* cgrad zoo, train layer: checkpoints of the zoo's models (safetensors files,
 * nn/safetensors.h), one layout for every model.
 *
 * A checkpoint holds
 *   tensors   the model's parameters under their PyTorch names, and, for
 *             training checkpoints, the optimizer state under "optim."
 *             (optim/optim.h cg_optim_save);
 *   metadata  "model": the model kind ("charlm", "seq2seq")
 *             "config": the model config as JSON (models.py field names)
 *             the tokenizer (models/text/tokenizer.h): "vocab", the character
 *             vocabulary as JSON (models/text/vocab.h, models/data/pairs.h), or
 *             "tokenizer": "bpe" and the U8 tensor "tokenizer.spm"
 *             "step": completed training steps (decimal)
 *             "train": the trainer's state as JSON (models/train/trainer.h; absent
 *             from inference-only files)
 * which is the reference trainers' format plus extras, so a file written by
 * shared/reference/train_charlm.py loads too.
 *
 * Writing is atomic (temporary file + rename): an existing checkpoint is
 * never lost, even when the save fails. Errors: NULL/false + cg_set_error. */
#ifndef CG_MODELS_CHECKPOINT_H
#define CG_MODELS_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/gemm.h"
#include "models/text/tokenizer.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/ema.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Save module (+ the optimizer state if optim is not NULL) with the
 * metadata above and the tokenizer tok; train_json may be NULL. */
bool cg_ckpt_save(const char *path, const char *kind, const char *config_json,
                  const cg_tokenizer *tok, const cg_module *module, const cg_optim *optim,
                  int64_t step, const char *train_json);
/* cg_ckpt_save in two halves, for files that hold more or less
 * (models/train/finetune.h): the writer with the metadata above, the
 * tokenizer (unless tok is NULL), the parameters (unless module is NULL)
 * and the optimizer state (unless optim is NULL), or NULL + error (a
 * deferred writer, nn/safetensors.h: the tensors are read at the save, not
 * copied, and must not change before it); then the atomic save to path
 * (its directory made if missing), which frees w (NULL: false). A NULL
 * config_json or w, what a failed call returned, keeps that call's message
 * (core/error.h cg_error_null_arg). */
/* A checkpoint writer once filled: w when ok, else w freed and NULL, with
 * the error: "out of memory" when none was recorded since serial, the
 * cg_error_serial() that the caller took before it began making w (a
 * cJSON or malloc failure records nothing; core/error.h). */
cg_st_writer *cg_ckpt_writer_filled(cg_st_writer *w, bool ok, unsigned long serial);
cg_st_writer *cg_ckpt_writer(const char *kind, const char *config_json, const cg_tokenizer *tok,
                             const cg_module *module, const cg_optim *optim, int64_t step,
                             const char *train_json);
bool cg_ckpt_writer_save(cg_st_writer *w, const char *path);
/* Open a checkpoint of the given kind: the file loads, its "model" is kind,
 * it has a "config" and a "vocab" (or a "tokenizer", or an "adapter_config":
 * an adapter checkpoint, models/train/finetune.h), and its "step" (when present) is a
 * decimal in [0, 1e15]. NULL + error naming the file otherwise. */
cg_st_file *cg_ckpt_open(const char *path, const char *kind);
/* The "step" of a checkpoint opened by cg_ckpt_open (0 if absent). */
int64_t cg_ckpt_step(const cg_st_file *f);
/* A model loader's opening: cg_ckpt_open, and *step its "step". */
cg_st_file *cg_ckpt_open_at(const char *path, const char *kind, int64_t *step);
/* A model loader's end: m (NULL: false, its error kept) checked against
 * f's tensors (cg_ckpt_check_tensors), then its parameters loaded from
 * them; false + error naming the file. */
bool cg_ckpt_load_params(cg_module *m, cg_st_file *f, const char *path);

/* Every tensor of f must be a parameter of m, an optimizer slot
 * "optim.<parameter>.<step|buffer>" (optim/optim.h cg_optim_buffer_name) of one or
 * its average "ema.<parameter>".
 * False + error naming the first other tensor (a config that says 0 layers
 * while the file holds block tensors, a truncated config, an unknown extra
 * tensor); "tokenizer.spm" (models/text/tokenizer.h) is allowed. Both loaders call it, so resume is covered too. */
bool cg_ckpt_check_tensors(const cg_module *m, const cg_st_file *f, const char *path);
/* The load options of a checkpoint's model (cg_module_load_ex, strict):
 * beside the parameters the file holds the optimizer state ("optim.*") and
 * the tokenizer (CG_TOKENIZER_TENSOR), which the model does not take. */
#define CG_CKPT_LOAD_OPTIONS          \
    ((cg_load_options){.n_ignore = 3, \
                       .ignore = (const char *const[]){"optim.*", "ema.*", CG_TOKENIZER_TENSOR}})
/* Which of a checkpoint's weights a loader gives. A run with --ema-decay
 * (models/train/options.h) keeps the moving average of its trainable
 * weights beside them: tensors "ema.<parameter>" and metadata "ema.decay",
 * "ema.updates" (optim/ema.h cg_ema_save). */
typedef enum {
    CG_CKPT_AVERAGE = 0, /* the average when there is one: the weights the run's evaluations
                          * judged, which sample, translate, eval, average and --init-from use */
    CG_CKPT_TRAINED      /* the trained weights (--resume, which reads the average as its EMA;
                          * --no-ema) */
} cg_ckpt_weights;
/* Does f keep a weights' average (*keeps: metadata "ema.updates")? False +
 * error naming the file for a part of one without it (an "ema.*" tensor,
 * or "ema.decay"): a damaged file, whose trained weights are not to be
 * taken for what its evaluations judged. */
bool cg_ckpt_keeps_average(const cg_st_file *f, const char *path, bool *keeps);
/* m (its parameters loaded from f) takes the average f keeps of its
 * trainable parameters, when f keeps one (*used, may be NULL: whether it
 * did); true without change for a file that keeps none. False +
 * error naming the file for an average that does not match m's trainable
 * parameters (optim/ema.h cg_ema_load's checks) or a damaged one
 * (cg_ckpt_keeps_average). */
bool cg_ckpt_use_average(cg_module *m, const cg_st_file *f, const char *path, bool *used);
/* --resume: e (NULL for a run without --ema-decay) takes the average f
 * keeps, which must be its run's: kept when e is not NULL (cg_ema_load's
 * checks), of that run's decay, at most one update a step. False + error
 * naming path otherwise. */
bool cg_ckpt_resume_average(cg_ema *e, const cg_st_file *f, const char *path, double decay);
/* The help of the flag that asks a command for CG_CKPT_TRAINED. */
#define CG_CKPT_NO_EMA_HELP                                                             \
    "  --no-ema             the checkpoint's trained weights, not the moving average\n" \
    "                       a run with --ema-decay keeps beside them (the default)\n"
/* The same for an adapter checkpoint (models/train/finetune.h) over m with
 * its adapters attached: every tensor of f is a trainable parameter of m
 * under PEFT's prefix "base_model.model." or its optimizer state. */
bool cg_ckpt_check_adapter_tensors(const cg_module *m, const cg_st_file *f, const char *path);

/* The pieces of the models' loaders (models/charlm/charlm_ckpt.h,
 * models/seq2seq/seq2seq_ckpt.h): cg_ckpt_save that frees config_json; a corrupt or
 * hostile config ("d": 100000) must not make the loader allocate gigabytes
 * before it finds that the parameters do not match: the parameters the
 * config implies (need, a lower bound) must be present in the file (which
 * is already in memory), and the positions table (max_len x d, not stored)
 * must be of a plausible size (false + error otherwise). */
bool cg_ckpt_save_owned(const char *path, const char *kind, char *config_json,
                        const cg_tokenizer *tok, const cg_module *module, const cg_optim *optim,
                        int64_t step, const char *train_json);
bool cg_ckpt_config_fits(double need, int64_t max_len, int64_t d, const cg_st_file *f,
                         const char *path);

/* A checkpoint's "train" metadata (of ckpt_path, for messages) parsed into
 * *out (caller deletes it): NULL when there is none (true); false + error
 * "'FILE': its training state is damaged (not a JSON object)" when it is
 * there but does not parse (or cJSON ran out of memory), never read as none
 * recorded (eval took the default data, split sizes or precision). */
bool cg_train_state_read(const char *train_json, const char *ckpt_path, cJSON **out);
/* The matrix-product precision a checkpoint's "train" metadata recorded
 * (fp32 when it recorded none); false + error when it is malformed. */
bool cg_train_precision(const char *train_json, const char *ckpt_path, cg_precision *out);
/* The name of the precision a training state's "options" (an object, or
 * NULL) recorded: "fp32" or "bf16" (static strings; "fp32" when it records
 * none: trained before options were kept), or NULL + error "WHAT: "options":
 * "precision" is 3, not "fp32" or "bf16"" naming a damaged one. */
const char *cg_train_precision_recorded(const cJSON *options, const char *what);

#ifdef __cplusplus
}
#endif
#endif
