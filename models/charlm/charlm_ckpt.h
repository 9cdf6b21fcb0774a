/* cgrad zoo: charlm checkpoints (the layout: models/train/checkpoint.h). */
#ifndef CG_MODELS_CHARLM_CKPT_H
#define CG_MODELS_CHARLM_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/charlm/charlm.h"
#include "models/text/tokenizer.h"
#include "models/text/vocab.h"
#include "models/train/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
