/* cgrad nn: data for training, on tensors: batches of token ids for
 * language models, padding variable-length sequences into a batch
 * (PyTorch's pad_sequence), a shuffling loader over a labelled data set of
 * fixed-size rows (DataLoader over a TensorDataset) or of variable-length
 * sequences (DataLoader with a padding collate_fn), and classification
 * accuracy.
 *
 * cg_random_batch is nanoGPT's get_batch: B windows of T+1 tokens at random
 * starts; x holds each window's first T tokens, y the same shifted by one
 * (the next-token targets). cg_batch_iter goes through an epoch instead:
 * the tokens cut into windows of T+1 tokens starting every T tokens
 * (0, T, 2T, ...), visited in the order of a random permutation
 * (cg_randperm), B per batch, the last incomplete batch dropped; the next
 * epoch draws a new permutation. Tokens are an int64 tensor [n]; batches
 * are new int64 tensors [B, T] (the caller's references).
 * Errors: false/-1/NULL/NAN + cg_set_error. */
#ifndef CG_NN_DATA_H
#define CG_NN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tokens: int64 [n] with n >= T + 1. *x and *y: new int64 [B, T]. */
bool cg_random_batch(const cg_tensor *tokens, int64_t B, int64_t T, cg_rng *rng, cg_tensor **x,
                     cg_tensor **y);

typedef struct cg_batch_iter cg_batch_iter;
/* tokens: int64 [n] with n >= B*T + 1 (retained: the iterator keeps a
 * reference). rng is borrowed. Free with cg_batch_iter_free. */
cg_batch_iter *cg_batch_iter_new(const cg_tensor *tokens, int64_t B, int64_t T, cg_rng *rng);
/* The next batch as new int64 tensors *x, *y [B, T]: 1, or 0 at the end of
 * an epoch (no error, *x = *y = NULL; the next call starts a new one), or
 * -1 + error. */
int cg_batch_iter_next(cg_batch_iter *it, cg_tensor **x, cg_tensor **y);
/* Epochs started (1 after the first batch). */
int64_t cg_batch_iter_epoch(const cg_batch_iter *it);
void cg_batch_iter_free(cg_batch_iter *it); /* NULL is a no-op */

/* torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True,
 * padding_value=pad): n sequences [L_i, ...] of one dtype and the same
 * trailing shape (L_i >= 0) into a new tensor [n, max L_i, ...], row i's
 * positions L_i.. filled with pad (converted to the dtype; a pad the dtype
 * cannot hold, NaN or 1e300 for int64 ids, is refused). pad_mask, if
 * not NULL, receives a new bool [n, max L_i]: true at padding, the
 * convention of a key-padding mask (cg_mha_forward's key_pad). */
cg_tensor *cg_pad_sequence(int64_t n, cg_tensor *const *seqs, double pad, cg_tensor **pad_mask);

/* PyTorch's DataLoader(TensorDataset(x, y), batch_size=B, shuffle=True):
 * the rows of x ([N, ...], any dtype) with the rows of y ([N, ...], any
 * dtype: int64 class labels, float targets, ...), B per batch in the order
 * of a random permutation (cg_randperm(rng, N), drawn at the first batch
 * of each epoch), the last batch smaller when B does not divide N.
 *     for (int epoch = 0; epoch < E; epoch++)
 *         while (cg_loader_next(ld))
 *             cg_train_step(opt, cg_cross_entropy(model_fwd(ld->x), ld->y, -100, 0,
 *                                                 CG_REDUCTION_MEAN));
 * Each batch runs in its own scope (core/tensor.h): cg_loader_next ends
 * the previous batch's scope, so ld->x, ld->y, ld->mask and every tensor
 * made for that batch die at the next call (cg_keep one to pass it on),
 * and opens a new one. A batch lives to its own loader's next call also
 * when a scope around its own ends first: two loaders in one loop (b's
 * scope inside a's, which a's next call ends), a loop left early inside a
 * scope of the caller's. Leaving the loop early (break): cg_loader_free ends
 * the scope; a loader kept instead continues that epoch at its next call
 * (a new `for x, y in loader` in PyTorch starts a new epoch; here that
 * loop would see only the rest of the old one: cg_loader_restart first,
 * or give a loop that stops early, `next(iter(loader))`, a loader of its
 * own). The data are
 * retained, not copied. rng is borrowed (NULL: no
 * shuffle, rows in order). */
typedef struct {
    cg_tensor *x;    /* this batch's inputs: [n, ...] */
    cg_tensor *y;    /* this batch's labels: [n, ...] (NULL: a loader without labels) */
    cg_tensor *mask; /* sequences: bool [n, T], true = padding; else NULL */
    int64_t n;       /* rows in this batch */
    int64_t epoch;   /* epochs started */
    bool failed;     /* the last cg_loader_next's false was an error, not an epoch's end */
    /* private */
    cg_tensor *data, *labels, **seqs;
    double pad;
    int64_t *perm, N, B, pos;
    cg_rng *rng;
    uint64_t scope_id; /* the batch's scope (cg_scope_id) */
} cg_loader;

/* x: [N, ...] with N >= 1, y: [N, ...] or NULL (inputs alone, as
 * DataLoader(x) for an autoencoder or a VAE: ld->y is then NULL), B >= 1.
 * NULL + error. */
cg_loader *cg_loader_new(cg_tensor *x, cg_tensor *y, int64_t B, cg_rng *rng);
/* A loader over N variable-length sequences seqs[i] ([L_i, ...], one dtype,
 * usually int64 ids) with labels y [N, ...]: each batch's ld->x is the
 * batch's sequences padded with pad to the longest of the batch
 * (cg_pad_sequence), ld->mask the bool padding mask [n, T] and ld->y the
 * labels (y NULL: none). Each sequence is retained. NULL + error. */
cg_loader *cg_loader_new_seqs(int64_t N, cg_tensor *const *seqs, cg_tensor *y, double pad,
                              int64_t B, cg_rng *rng);
/* Next batch of this epoch into ld->x, ld->y, ld->mask, ld->n: true; false
 * at the end of the epoch (ld->failed false; the next call starts a new
 * epoch) or on an error (out of memory: ld->failed true, the message in
 * cg_last_error(); cg_has_error may hold an older one either way). */
bool cg_loader_next(cg_loader *ld);
/* End the batch and the epoch under way: the next cg_loader_next starts a
 * new epoch (a new order), as a new `for x, y in loader` does in PyTorch
 * after a loop left with break. NULL is a no-op. */
void cg_loader_restart(cg_loader *ld);
void cg_loader_free(cg_loader *ld); /* NULL is a no-op */

/* The fraction of rows of logits [n, C] whose largest entry is at the
 * target's index, y int64 [n]: (logits.argmax(1) == y).float().mean().
 * NAN + error. */
double cg_accuracy(const cg_tensor *logits, const cg_tensor *y);
/* The accuracy of a classifier m (a module with a one-tensor forward,
 * cg_module_forward) on the rows of x with labels y (int64 [N]), evaluated
 * without a graph (no-grad, its own scope): PyTorch's
 *     with torch.no_grad(): (m(x).argmax(1) == y).float().mean()
 * NAN + error. */
struct cg_module;
double cg_module_accuracy(struct cg_module *m, cg_tensor *x, const cg_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
