/* cgrad zoo: a character corpus for the language model (the reference's
 * recipe, shared/reference/train_charlm.py).
 *
 *   text   a UTF-8 file read as Python's open(encoding="utf-8").read()
 *          (strict UTF-8, "\r\n" and "\r" read as "\n")
 *   ids    each character's id in the vocabulary
 *   split  first int(0.9 * n) characters train, the rest validation
 *   batch  B windows at offsets drawn uniformly from [0, len - T) with the
 *          caller's generator: inputs split[i:i+T], targets split[i+1:i+T+1]
 *
 * Errors: NULL/false + cg_set_error naming the file. */
#ifndef CG_MODELS_DATA_H
#define CG_MODELS_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/tensor.h"
#include "models/data/data_id.h"
#include "models/text/tokenizer.h"
#include "models/text/vocab.h"
#include "models/util/files.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t n;       /* characters */
    int32_t *ids;    /* n ids (int32: half the memory of int64) */
    int64_t n_train; /* int(0.9 * n); train = ids[0, n_train) */
    int64_t unknown; /* characters mapped to vocab->unk (0 when the
                           vocabulary was built from this text) */
    uint32_t first_unknown;
    int64_t chars, chars_train; /* the characters the ids spell, in all and in
                                   the training split (n and n_train for a
                                   character corpus) */
} cg_corpus;

/* Encode code points with vocab and split 90/10. */
cg_corpus *cg_corpus_new(const cg_vocab *vocab, const uint32_t *cps, int64_t n);
/* The corpus of a file, read once (cg_read_file_once, max_bytes 0: the
 * default limit): with vocab NULL the vocabulary is built from the text and
 * returned in *built (caller frees); otherwise characters outside vocab are
 * counted in ->unknown. Peak memory about 5 bytes per byte of text (was 12:
 * the file read twice, code points and int64 ids alive together). id (may
 * be NULL) gets the identity of the bytes read (models/data/data_id.h). */
cg_corpus *cg_corpus_read(const char *path, const cg_vocab *vocab, size_t max_bytes,
                          cg_vocab **built, cg_data_id *id);
/* The corpus of a file through a tokenizer (models/text/tokenizer.h). *tok
 * set: its ids; *tok NULL: a new tokenizer of `kind`, returned in *tok.
 *   char  cg_corpus_read over (*tok)->cv, or building the vocabulary from
 *         the whole text (the reference's recipe), unchanged;
 *   bpe   the text is split 90/10 by characters as above, a new tokenizer
 *         is trained with vocab_size ids on the lines of the training split
 *         only, and each split is encoded on its own (n_train: the training
 *         split's ids; chars, chars_train: their characters).
 * NULL + error (naming path). */
cg_corpus *cg_corpus_read_tok(const char *path, cg_tokenizer **tok, cg_tokenizer_kind kind,
                              int64_t vocab_size, cg_data_id *id);
void cg_corpus_free(cg_corpus *c);

/* A split as a view: pointer + length. */
typedef struct {
    const int32_t *ids;
    int64_t n;
} cg_split_view;

/* Bits per character of a mean loss in nats per token over the validation
 * split (models/text/tokenizer.h cg_bits_per_char; for characters simply
 * nats / ln 2). */
double cg_corpus_val_bpc(const cg_corpus *c, double nats);

cg_split_view cg_corpus_train(const cg_corpus *c);
cg_split_view cg_corpus_val(const cg_corpus *c);

/* Window at offset i: x = ids[i, i+T), y = ids[i+1, i+T+1) (needs
 * i + T < s.n; not checked: callers derive i from s.n). */
void cg_split_window(cg_split_view s, int64_t i, int64_t T, int64_t *x, int64_t *y);
/* Fill x and y (B*T each) with B random windows of s (needs s.n > T). */
bool cg_get_batch(cg_split_view s, int64_t B, int64_t T, cg_rng *rng, int64_t *x, int64_t *y);

#ifdef __cplusplus
}
#endif
#endif
