/* The work of seq2seq's translate, eval and score commands, private to the
 * seq2seq program (their flags and help stay in seq2seq_main.c). */
#ifndef CG_MODELS_SEQ2SEQ_CMDS_H
#define CG_MODELS_SEQ2SEQ_CMDS_H

#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/seq2seq/translate.h"

/* Translate texts[0..n) (why: as translatable's, per line, or NULL) and
 * print one line each, in order. -1 or the exit code. */
int translate_texts(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, char *const *texts,
                    char *const *why, int64_t n, const char *what);

/* eval's scores of c on the split (valid, else test) of its data (the
 * file data, else the one it recorded), as one JSON line: -1 or the exit
 * code. */
int eval_split(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, cg_mt_data *ds,
               const char *data, bool valid, int64_t limit);

/* attention's sentence and target checked as translate checks its
 * sentences, each named by its flag: the text within the model's length
 * (false + error), and characters a char vocabulary lacks announced (they
 * are read as unk). */
bool attention_inputs(const cg_seq2seq_ckpt *c, const char *text, const char *target);

/* score: corpus BLEU (with sacreBLEU's details) and chrF of the hypotheses
 * (the file hyp, or standard input when NULL) against the references ref,
 * one line each, as one JSON line: -1 or the exit code. */
int score_files(const char *ref, const char *hyp);

#endif
