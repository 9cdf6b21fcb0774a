/* cgrad zoo: charlm checkpoints (the layout: models/train/checkpoint.h). */
#ifndef CG_MODELS_CHARLM_CKPT_H
#define CG_MODELS_CHARLM_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/charlm/charlm.h"
#include "models/text/tokenizer.h"
#include "models/text/vocab.h"
#include "models/train/checkpoint.h"
#include "models/train/finetune.h"

#ifdef __cplusplus
extern "C" {
#endif

bool cg_charlm_ckpt_save(const char *path, const cg_charlm *model, const cg_vocab *vocab,
                         const cg_optim *optim, int64_t step, const char *train_json);

typedef struct {
    cg_charlm *model;  /* owned: built from "config", parameters loaded */
    cg_tokenizer *tok; /* owned (models/tokenizer.h): char or bpe */
    cg_vocab *vocab;   /* a char tokenizer's vocabulary (borrowed from tok), else NULL */
    int64_t step;      /* 0 if absent */
    cg_st_file *file;  /* owned, open: for cg_optim_load and "train" */
    /* a fine-tuned model (models/train/finetune.h): where it started from */
    cg_ft_origin origin;
    bool has_origin;
    bool adapter;    /* an adapter checkpoint: model = its base + the adapters */
    char *base_path; /* then the base loaded (owned) */
    bool averaged;   /* the model holds the checkpoint's weights' average (cg_ckpt_weights) */
} cg_charlm_ckpt;

/* How a checkpoint is loaded (cg_charlm_ckpt_load_opts). */
typedef struct {
    const char *base; /* an adapter checkpoint's base instead of the one it recorded (--base) */
    uint64_t seed;    /* of the model's generators (cg_charlm_new): its dropout masks */
    double dropout;   /* the model's dropout instead of the config's; NaN: the config's */
    /* set_attn_dropout: attn_dropout instead of the config's (false, the
     * zero value: the config's) */
    bool set_attn_dropout;
    double attn_dropout;
    /* the checkpoint's weights' average when it keeps one (the default),
     * or its trained weights (models/train/checkpoint.h); an adapter
     * checkpoint's base gives its average either way (the weights the
     * adapters were trained on) */
    cg_ckpt_weights weights;
} cg_charlm_load_opts;

/* Load a checkpoint. False + error when the file is missing or corrupt, is
 * not a "charlm" checkpoint, or its config, vocabulary or parameters do not
 * agree. An adapter checkpoint loads its base (the file it recorded) with
 * the adapters attached; an error names the base when it is missing,
 * damaged, of another shape or not the same file, and when it is the
 * adapter itself or another adapter (a load follows "init_from" one file
 * at most: models/train/finetune.h cg_ft_base_path). On success free with
 * cg_charlm_ckpt_free. */
bool cg_charlm_ckpt_load(const char *path, cg_charlm_ckpt *out);
/* cg_charlm_ckpt_load with options (NULL: the defaults, base NULL, seed 0,
 * dropout NaN). */
bool cg_charlm_ckpt_load_opts(const char *path, const cg_charlm_load_opts *o, cg_charlm_ckpt *out);
void cg_charlm_ckpt_free(cg_charlm_ckpt *c);
/* The LoRA adapter checkpoint at path with its base (base: --base, NULL:
 * the one it recorded) and the weights w, for merge (models/train/average.h
 * cg_avg_model's load_adapted): the model, adapters attached (the caller's
 * to free), and *base_path the base read (malloc'd; NULL for a full
 * checkpoint, which merge refuses first). NULL + error. */
cg_module *cg_charlm_load_adapted(const char *path, const char *base, cg_ckpt_weights w,
                                  char **base_path);
/* The "train" metadata (borrowed) or NULL. */
const char *cg_charlm_ckpt_train_json(const cg_charlm_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif
