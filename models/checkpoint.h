/* cgrad zoo: checkpoints of the zoo's models (safetensors files,
 * nn/safetensors.h), one layout for every model.
 *
 * A checkpoint holds
 *   tensors   the model's parameters under their PyTorch names, and, for
 *             training checkpoints, the optimizer state under "optim."
 *             (optim/optim.h cg_optim_save);
 *   metadata  "model": the model kind ("charlm", "seq2seq")
 *             "config": the model config as JSON (models.py field names)
 *             the tokenizer (models/tokenizer.h): "vocab", the character
 *             vocabulary as JSON (models/vocab.h, models/pairs.h), or
 *             "tokenizer": "bpe" and the U8 tensor "tokenizer.spm"
 *             "step": completed training steps (decimal)
 *             "train": the trainer's state as JSON (models/trainer.h; absent
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

#include "models/charlm.h"
#include "models/pairs.h"
#include "models/seq2seq.h"
#include "models/tokenizer.h"
#include "models/vocab.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Save module (+ the optimizer state if optim is not NULL) with the
 * metadata above and the tokenizer tok; train_json may be NULL. */
bool cg_ckpt_save(const char *path, const char *kind, const char *config_json,
                  const cg_tokenizer *tok, const cg_module *module, const cg_optim *optim,
                  int64_t step, const char *train_json);
/* Open a checkpoint of the given kind: the file loads, its "model" is kind,
 * it has a "config" and a "vocab" (or a "tokenizer"), and its "step" (when present) is a
 * decimal in [0, 1e15]. NULL + error naming the file otherwise. */
cg_st_file *cg_ckpt_open(const char *path, const char *kind);
/* The "step" of a checkpoint opened by cg_ckpt_open (0 if absent). */
int64_t cg_ckpt_step(const cg_st_file *f);

/* ---- charlm */
bool cg_charlm_ckpt_save(const char *path, const cg_charlm *model, const cg_vocab *vocab,
                         const cg_optim *optim, int64_t step, const char *train_json);

typedef struct {
    cg_charlm *model;   /* owned: built from "config", parameters loaded */
    cg_tokenizer *tok;  /* owned (models/tokenizer.h): char or bpe */
    cg_vocab *vocab;    /* a char tokenizer's vocabulary (borrowed from tok), else NULL */
    int64_t step;       /* 0 if absent */
    cg_st_file *file;   /* owned, open: for cg_optim_load and "train" */
} cg_charlm_ckpt;

/* Load a checkpoint. False + error when the file is missing or corrupt, is
 * not a "charlm" checkpoint, or its config, vocabulary or parameters do not
 * agree. On success free with cg_charlm_ckpt_free. */
bool cg_charlm_ckpt_load(const char *path, cg_charlm_ckpt *out);
void cg_charlm_ckpt_free(cg_charlm_ckpt *c);
/* The "train" metadata (borrowed) or NULL. */
const char *cg_charlm_ckpt_train_json(const cg_charlm_ckpt *c);

/* Every tensor of f must be a parameter of m or an optimizer slot
 * "optim.<parameter>.<step|exp_avg|exp_avg_sq|momentum_buffer>" of one.
 * False + error naming the first other tensor (a config that says 0 layers
 * while the file holds block tensors, a truncated config, an unknown extra
 * tensor); "tokenizer.spm" (models/tokenizer.h) is allowed. Both loaders call it, so resume is covered too. */
bool cg_ckpt_check_tensors(const cg_module *m, const cg_st_file *f, const char *path);

/* ---- seq2seq */
bool cg_seq2seq_ckpt_save(const char *path, const cg_seq2seq *model, const cg_tokenizer *tok,
                          const cg_optim *optim, int64_t step, const char *train_json);

typedef struct {
    cg_seq2seq *model;     /* owned */
    cg_tokenizer *tok;     /* owned: char (with specials) or bpe */
    int64_t step;
    cg_st_file *file;      /* owned, open */
} cg_seq2seq_ckpt;

bool cg_seq2seq_ckpt_load(const char *path, cg_seq2seq_ckpt *out);
void cg_seq2seq_ckpt_free(cg_seq2seq_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif
