/* cgrad nn: batches of token ids for language-model training.
 *
 * cg_random_batch is nanoGPT's get_batch: B windows of T+1 tokens at random
 * starts; x holds each window's first T tokens, y the same shifted by one
 * (the next-token targets). cg_batch_iter goes through an epoch instead:
 * the token array cut into windows of T+1 tokens starting every T tokens
 * (0, T, 2T, ...), visited in the order of a random permutation
 * (cg_randperm), B per batch, the last incomplete batch dropped; the next
 * epoch draws a new permutation. Errors: false/-1/NULL + cg_set_error. */
#ifndef CG_NN_DATA_H
#define CG_NN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x and y: B*T ids each ([B, T] row-major). Needs n >= T + 1 tokens. */
bool cg_random_batch(const int64_t *tokens, int64_t n, int64_t B, int64_t T, cg_rng *rng,
                     int64_t *x, int64_t *y);

typedef struct {
    const int64_t *tokens; /* borrowed: must outlive the iterator */
    int64_t n, B, T;
    int64_t n_windows; /* (n - 1) / T */
    int64_t *perm;     /* this epoch's order of the windows */
    int64_t pos;       /* windows used in this epoch */
    int64_t epoch;     /* epochs started (1 after the first batch) */
    cg_rng *rng;       /* borrowed */
} cg_batch_iter;

/* Needs at least B windows: n >= B*T + 1. Free with cg_batch_iter_free. */
cg_batch_iter *cg_batch_iter_new(const int64_t *tokens, int64_t n, int64_t B, int64_t T,
                                 cg_rng *rng);
/* The next batch into x and y (B*T ids each): 1, or 0 at the end of an
 * epoch (no error; the next call starts a new one), or -1 + error. */
int cg_batch_iter_next(cg_batch_iter *it, int64_t *x, int64_t *y);
void cg_batch_iter_free(cg_batch_iter *it); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif
