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
} cg_seq2seq_ckpt;

/* Load a checkpoint with the weights w names (models/train/checkpoint.h:
 * the average a run with --ema-decay kept, when there is one, or the
 * trained weights); cg_seq2seq_ckpt_load: CG_CKPT_AVERAGE. False + error
 * naming the file. */
bool cg_seq2seq_ckpt_load_weights(const char *path, cg_ckpt_weights w, cg_seq2seq_ckpt *out);
/* How train --init-from loads its base: the model's generators seeded
 * with seed (its dropout masks), and the recipe's values that are not
 * parameters (NaN: the checkpoint's config's) set before the model is
 * built, as a new run's flags give them. */
typedef struct {
    uint64_t seed;
    double dropout, attn_dropout, label_smoothing, word_dropout;
    cg_ckpt_weights weights;
} cg_seq2seq_load_opts;
bool cg_seq2seq_ckpt_load_opts(const char *path, const cg_seq2seq_load_opts *o,
                               cg_seq2seq_ckpt *out);
bool cg_seq2seq_ckpt_load(const char *path, cg_seq2seq_ckpt *out);
void cg_seq2seq_ckpt_free(cg_seq2seq_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif
