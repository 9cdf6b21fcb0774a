/* cgrad zoo: seq2seq checkpoints (the layout: models/train/checkpoint.h). */
#ifndef CG_MODELS_SEQ2SEQ_CKPT_H
#define CG_MODELS_SEQ2SEQ_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/seq2seq/seq2seq.h"
#include "models/text/tokenizer.h"
#include "models/train/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

bool cg_seq2seq_ckpt_save(const char *path, const cg_seq2seq *model, const cg_tokenizer *tok,
                          const cg_optim *optim, int64_t step, const char *train_json);

typedef struct {
    cg_seq2seq *model; /* owned */
    cg_tokenizer *tok; /* owned: char (with specials) or bpe */
    int64_t step;
    cg_st_file *file; /* owned, open */
    bool averaged;    /* the model holds the checkpoint's weights' average */
    bool adapter;     /* an adapter checkpoint: model = its base + the adapters */
    char *base_path;  /* then the base loaded (owned) */
} cg_seq2seq_ckpt;

/* Load a checkpoint with the weights w names (models/train/checkpoint.h:
 * the average a run with --ema-decay kept, when there is one, or the
 * trained weights); cg_seq2seq_ckpt_load: CG_CKPT_AVERAGE. False + error
 * naming the file. An adapter checkpoint (train --lora-rank) loads its
 * base, the file it recorded or `base` (--base, NULL: the recorded one),
 * with the adapters attached (models/train/finetune.h cg_ft_adapt: an
 * error names the base when it is missing, damaged, of another
 * architecture, not the same file, or an adapter itself). */
bool cg_seq2seq_ckpt_load_weights(const char *path, const char *base, cg_ckpt_weights w,
                                  cg_seq2seq_ckpt *out);
/* How train --init-from loads its base: the model's generators seeded
 * with seed (its dropout masks), and the recipe's values that are not
 * parameters (NaN: the checkpoint's config's) set before the model is
 * built, as a new run's flags give them. */
typedef struct {
    uint64_t seed;
    double dropout, attn_dropout, label_smoothing, word_dropout;
    cg_ckpt_weights weights;
    const char *base; /* an adapter checkpoint's base instead of the one it recorded */
} cg_seq2seq_load_opts;
bool cg_seq2seq_ckpt_load_opts(const char *path, const cg_seq2seq_load_opts *o,
                               cg_seq2seq_ckpt *out);
bool cg_seq2seq_ckpt_load(const char *path, cg_seq2seq_ckpt *out);
void cg_seq2seq_ckpt_free(cg_seq2seq_ckpt *c);
/* The LoRA adapter checkpoint at path with its base (base: --base, NULL:
 * the one it recorded) and the weights w, for merge (models/train/average.h
 * cg_avg_model's load_adapted): the model, adapters attached (the caller's
 * to free), and *base_path the base read (malloc'd; NULL for a full
 * checkpoint, which merge refuses first). NULL + error. */
cg_module *cg_seq2seq_load_adapted(const char *path, const char *base, cg_ckpt_weights w,
                                   char **base_path);

#ifdef __cplusplus
}
#endif
#endif
