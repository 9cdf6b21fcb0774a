/* The work of seq2seq's translate, eval and score commands, private to the
 * seq2seq program (their flags and help stay in seq2seq_main.c). */
#ifndef CG_MODELS_SEQ2SEQ_CMDS_H
#define CG_MODELS_SEQ2SEQ_CMDS_H

#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/seq2seq/translate.h"

/* Translate texts[0..n) (why: as translatable's, per line, or NULL), the
 * input's sentences first.. (their numbers in messages and H lines), and
 * print one line each, in order; *nbad (the sentences of the input not
 * translated so far) grows by this buffer's. -1 or the exit code. */
int translate_texts(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, char *const *texts,
                    char *const *why, int64_t n, const char *what, int64_t first, int64_t *nbad);

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

/* translate's own flags' help, after those it shares with eval */
#define NBEST_HELP                                                                       \
    "  --nbest N            the N best translations of each sentence (N <= --beam),\n"   \
    "                       as fairseq-generate's lines: H-I<TAB>SCORE<TAB>TEXT, best\n" \
    "                       first, I the sentence's index from 0, SCORE the beam's\n"    \
    "                       (summed natural-log probability over the length penalty;\n"  \
    "                       fairseq's is base 2 over its own); ranked as the one\n"      \
    "                       translation is, a live hypothesis the search stopped on\n"   \
    "                       included; a sentence that cannot be translated has none\n"
#define SAMPLING_HELP                                                                   \
    "  --sampling           draw each token from the model's distribution instead of\n" \
    "                       taking the likeliest (fairseq-generate's --sampling, as\n"  \
    "                       back-translation uses it); each sentence has its own\n"     \
    "                       generator, seeded from --seed and its position, so its\n"   \
    "                       translation does not depend on the other sentences;\n"      \
    "                       with --beam N it draws N translations a sentence and\n"     \
    "                       keeps the best by --nbest's score (--nbest K: K of them)\n" \
    "  --sampling-topk K    draw among the K likeliest tokens only (default 0: all)\n"  \
    "  --sampling-topp P    draw among the smallest set of likeliest tokens whose\n"    \
    "                       probability reaches P, in (0, 1] (default 1: all)\n"        \
    "  --temperature T      divide the logits by T (default 1; 0: the likeliest)\n"     \
    "  --seed N             the draws' seed (default 1)\n"

#define SCORE_REF_HELP                                                                      \
    "  --buffer-size N      translate standard input N lines at a time, each\n"             \
    "                       printed once its buffer is (default: 1 from a terminal,\n"      \
    "                       as fairseq-interactive, else 50)\n"                             \
    "  --score-reference FILE\n"                                                            \
    "                       decode nothing: score the references, FILE's lines, one a\n"    \
    "                       sentence, as fairseq-generate's --score-reference: lines\n"     \
    "                       H-I<TAB>SCORE<TAB>REFERENCE, SCORE the one beam search gives\n" \
    "                       that hypothesis (--nbest's: its natural-log probability with\n" \
    "                       EOS over the length penalty), e.g. to rerank --nbest's lists\n"

/* translate_texts over standard input's lines, a buffer of --buffer-size
 * at a time (translate_opts.buffer); *total gets the lines read, *nbad
 * those not translated. -1 or the exit code. */
int translate_stdin(const cg_seq2seq_ckpt *c, const cg_translate_opts *t, int64_t *total,
                    int64_t *nbad);

/* Standard input, read as the sentences, is not the checkpoint loaded
 * (`translate --ckpt m.st <m.st` translated the checkpoint's bytes): false
 * + error. */
bool stdin_not_ckpt(const char *ckpt);

/* translate's own flags (--sampling's, --score-reference, --buffer-size)
 * against the others: -1, or the exit code (2, the error printed). */
int translate_flag_rules(const cg_translate_opts *t);

#endif
