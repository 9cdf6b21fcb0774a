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
#include <stdint.h>

#include "core/tensor.h"
#include "models/vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read a whole file as UTF-8 code points (malloc'd). NULL + error if it is
 * missing, unreadable, empty, or not valid UTF-8. */
uint32_t *cg_read_text_file(const char *path, int64_t *n);

typedef struct {
    int64_t n;          /* characters */
    int64_t *ids;       /* n ids */
    int64_t n_train;    /* int(0.9 * n); train = ids[0, n_train) */
    int64_t unknown;    /* characters mapped to vocab->unk (0 when the
                           vocabulary was built from this text) */
    uint32_t first_unknown;
} cg_corpus;

/* Encode code points with vocab and split 90/10. */
cg_corpus *cg_corpus_new(const cg_vocab *vocab, const uint32_t *cps, int64_t n);
void cg_corpus_free(cg_corpus *c);

/* A split as a view: pointer + length. */
typedef struct {
    const int64_t *ids;
    int64_t n;
} cg_split_view;

cg_split_view cg_corpus_train(const cg_corpus *c);
cg_split_view cg_corpus_val(const cg_corpus *c);

/* Fill x and y (B*T each) with B random windows of s (needs s.n > T). */
bool cg_get_batch(cg_split_view s, int64_t B, int64_t T, cg_rng *rng, int64_t *x, int64_t *y);

#ifdef __cplusplus
}
#endif
#endif
