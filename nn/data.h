/* cgrad nn: data for training: batches of token ids for language models,
 * a shuffling loader over a labelled data set (PyTorch's DataLoader over a
 * TensorDataset), and classification accuracy.
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

/* PyTorch's DataLoader(TensorDataset(x, y), batch_size=B, shuffle=True):
 * the rows of x ([N, ...]) with their labels y[0..N), B per batch in the
 * order of a random permutation (cg_randperm(rng, N), drawn at the first
 * batch of each epoch), the last batch smaller when B does not divide N.
 *     for (int epoch = 0; epoch < E; epoch++)
 *         while (cg_loader_next(ld))
 *             cg_train_step(opt, cg_cross_entropy(model_fwd(ld->x), ld->y, ld->n, -100, 0));
 * Each batch runs in its own scope (core/tensor.h): cg_loader_next ends
 * the previous batch's scope, so ld->x and every tensor made for that
 * batch die at the next call (cg_keep one to pass it on), and opens a new
 * one. Leaving the loop early (break): cg_loader_free ends the scope.
 * x is retained; y is copied. rng is borrowed (NULL: no shuffle, rows in
 * order). */
typedef struct {
    cg_tensor *x;  /* this batch: rows of the data, [n, ...] (the loader's) */
    int64_t *y;    /* this batch's labels (n), valid until the next call */
    int64_t n;     /* rows in this batch */
    int64_t epoch; /* epochs started */
    /* private */
    cg_tensor *data;
    int64_t *labels, *perm, N, B, pos;
    cg_rng *rng;
    cg_scope *scope;
} cg_loader;

/* x: [N, ...] with N >= 1, y: N labels, B >= 1. NULL + error. */
cg_loader *cg_loader_new(cg_tensor *x, const int64_t *y, int64_t B, cg_rng *rng);
/* Next batch of this epoch into ld->x, ld->y, ld->n: true; false at the
 * end of the epoch (no error; the next call starts a new epoch) or on an
 * error (cg_has_error). */
bool cg_loader_next(cg_loader *ld);
void cg_loader_free(cg_loader *ld); /* NULL is a no-op */

/* The fraction of rows of logits [n, C] whose largest entry is at the
 * target's index ((logits.argmax(1) == y).float().mean()). NAN + error. */
double cg_accuracy(const cg_tensor *logits, const int64_t *y, int64_t n);
/* The accuracy of a classifier m (a module with a one-tensor forward,
 * cg_module_forward) on the rows of x with labels y[0..x->shape[0]),
 * evaluated without a graph (no-grad, its own scope): PyTorch's
 *     with torch.no_grad(): (m(x).argmax(1) == y).float().mean()
 * NAN + error. */
struct cg_module;
double cg_module_accuracy(struct cg_module *m, cg_tensor *x, const int64_t *y);

#ifdef __cplusplus
}
#endif
#endif
