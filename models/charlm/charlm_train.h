/* charlm's training glue, private to the charlm program (charlm_main.c,
 * charlm_train.c, charlm_cmds.c): the program's name and default files,
 * the run the `train` flags write into (lm_run), and the three callbacks
 * cg_train_command takes (models/train/program.h): the checks of charlm's
 * own flags, the set-up of corpus, tokenizer and model, and the clean-up.
 * read_corpus is train's and eval's way of reading a text. */
#ifndef CG_MODELS_CHARLM_TRAIN_H
#define CG_MODELS_CHARLM_TRAIN_H

#include "models/charlm/charlm.h"
#include "models/data/data.h"
#include "models/train/finetune.h"
#include "models/train/lr_sched.h"
#include "models/train/program.h"

#define PROG "charlm"
#define DEFAULT_DATA "data/moby_dick.txt"
#define DEFAULT_OUT "out/charlm.safetensors"

/* Read the corpus once (models/data/data.h cg_corpus_read_tok: any stream, the
 * input limit) through *tok, or through a new tokenizer of kind made into
 * *tok; id gets the identity of the bytes read. */
cg_corpus *read_corpus(const char *path, cg_tokenizer **tok, cg_tokenizer_kind kind,
                       int64_t vocab_size, cg_data_id *id);

/* The char LM as the trainer sees it. */
typedef struct {
    cg_trainer *t;
    const char *preset; /* --preset */
    const char *init;   /* --init: normal (models.py's) or gpt2 (nanoGPT's) */
    cg_ft_lora lora;    /* --lora-rank and its kin */
    cg_charlm *model;
    cg_tokenizer *tok;
    cg_corpus *corpus;
    cg_split_view tr, va;
    int64_t B, T, r0, r1, steps;
    double lr, label_smoothing;
    cg_train_sched sched; /* --warmup, --lr-schedule and its flags */
    cg_rng batch_rng;
    int64_t *x, *y; /* grad_accum batches of B x T */
    double tl, vl;  /* the last evaluation */
} lm_run;

/* charlm train's checks of its flags: the LoRA flags and --base. */
int lm_check(void *self, const cg_train_opts *o, cg_train_recipe *rec);
/* Corpus, tokenizer and model (fresh, resumed or from a base), checked,
 * and the char LM as the trainer sees it. */
int lm_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec,
             cg_trainer_model *m);
void lm_cleanup(void *self);

#endif
