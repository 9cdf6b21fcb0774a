/* seq2seq's training glue, private to the seq2seq program (seq2seq_main.c,
 * seq2seq_train.c, seq2seq_cmds.c): the program's name and default files,
 * the run the `train` flags write into (mt_run), and the three callbacks
 * cg_train_command takes (models/train/program.h): the checks of seq2seq's
 * own flags, the set-up of data, vocabulary, model and batch order, and the
 * clean-up. ckpt_load is how train (--resume) and the commands read a
 * checkpoint. */
#ifndef CG_MODELS_SEQ2SEQ_TRAIN_H
#define CG_MODELS_SEQ2SEQ_TRAIN_H

#include "models/seq2seq/seq2seq.h"
#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/seq2seq/translate.h"
#include "models/train/finetune.h"
#include "models/train/lr_sched.h"
#include "models/train/program.h"

#define PROG "seq2seq"
#define DEFAULT_DATA "data/en_de_ding.tsv"
#define DEFAULT_CKPT "seq2seq.safetensors"

/* A checkpoint that --resume (w: CG_CKPT_TRAINED), translate, eval or
 * attention reads (never standard output, their result); the commands say
 * when they use its weights' average. False + error (*c freed either
 * way). */
bool ckpt_load(const char *path, const char *base, cg_ckpt_weights w, cg_seq2seq_ckpt *c);

/* The translator as the trainer sees it. */
typedef struct {
    const cg_trainer *t;
    const char *preset;
    int64_t max_tokens, pad_to, max_len, valid_size, test_size, test_limit, beam, examples;
    double alpha, word_dropout;
    /* --warmup, --factor (noam's), --lr-schedule and its flags; its peak lr
     * (recorded: a resumed run's --lr is not given) */
    cg_train_sched sched;
    /* --eval-bleu N: the first N validation pairs decoded greedily at each
     * evaluation, their BLEU and chrF reported (0: none) */
    int64_t eval_bleu;
    int64_t eval_beam; /* --eval-bleu-beam: their beam (1: greedy) */
    /* --max-len counts ids (BPE pieces too); false: a BPE checkpoint from
     * before, whose training pairs were kept by their characters */
    bool max_len_tokens;
    /* --extra-data (t->o->extra_data; NULL: none): its pairs' identity (kept
     * in the checkpoint's model state as "extra_data_id") and counts */
    cg_data_id extra_id;
    cg_pairs_extra extra;
    cg_mt_data d;
    cg_ft_lora lora; /* --lora-rank and its kin */
    cg_seq2seq *model;
} mt_run;

/* seq2seq train's checks of its flags (before any file is read). */
int mt_check(void *self, const cg_train_opts *o, cg_train_recipe *rec);
/* Data, vocabulary, model, batches and batch order (fresh or resumed), and
 * the translator as the trainer sees it. */
int mt_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec,
             cg_trainer_model *m);
void mt_cleanup(void *self);

#endif
