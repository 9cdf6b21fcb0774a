/* cgrad nn: the key/value cache of incremental decoding, for the decoder
 * stacks and LM blocks of nn/transformer.h and for blocks of your own. */
#ifndef CG_NN_KV_CACHE_H
#define CG_NN_KV_CACHE_H

#include "../nn/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Key/value cache of a decoder stack (or of a list of LM blocks), so that a
 * model built from them decodes one token at a time: each layer's
 * self-attention keys and values are appended per step; a decoder layer's
 * cross-attention keys and values are computed once, on the first step,
 * from the encoder's memory (its key padding is copied into the cache).
 * Reorder it when the batch rows change (beam search keeps the parents of
 * the surviving hypotheses; a batch of sentences drops finished ones).
 *
 *     cg_kv_cache *c = cg_kv_cache_new(dec->n_layers);
 *     x = embedding of BOS at position 0, [B,1,d]
 *     for (step = 0; ...; step++) {
 *         h = cg_dec_stack_forward_cached(dec, x, memory, src_pad, c);  [B,1,d]
 *         ... logits, choose tokens, x = their embedding at position
 *             cg_kv_cache_len(c)
 *         cg_kv_cache_reorder(c, parents);  (beam search: int64 [n] rows)
 *     }
 *     cg_kv_cache_free(c);
 *
 * Positions are the caller's (cg_kv_cache_len(c) is the next one). Decoding
 * with the cache gives the logits of a full forward over the prefix up to
 * float rounding (tests/test_seq2seq.c and test_zoo.c hold them to 1e-5). */
typedef struct {
    int n_layers;
    cg_mha_kv *self;      /* [n_layers] */
    cg_mha_kv *cross;     /* [n_layers]; decoder stacks only */
    cg_tensor *cross_pad; /* bool [B, S] key padding of the memory (a copy), or NULL */
    int64_t S;            /* memory length (0 until the first decoder step) */
    int64_t len;          /* positions decoded by the library's stacks (read cg_kv_cache_len) */
    /* The first step's memory and mem_pad as the caller gave them (held as
     * detached aliases: their storage and version, no graph), against which
     * a later step's are checked. */
    cg_tensor *memory, *mem_pad;
    uint64_t memory_version, mem_pad_version;
} cg_kv_cache;

cg_kv_cache *cg_kv_cache_new(int n_layers);
void cg_kv_cache_free(cg_kv_cache *c); /* NULL is a no-op */
/* The number of positions the cache holds, which is the position of the next
 * token: the longest self-attention cache of its layers (layers advance as
 * they attend, so a model of your own adds nothing after a step). 0 for a
 * NULL cache (the training forward starts at position 0) or an empty one. */
int64_t cg_kv_cache_len(const cg_kv_cache *c);
/* Forget every position and the memory; the buffers are kept for reuse. */
void cg_kv_cache_reset(cg_kv_cache *c);
/* Keep batch rows rows (int64 [n], repeats allowed) of every layer's keys
 * and values and of the memory's padding. False + error on a bad row. */
bool cg_kv_cache_reorder(cg_kv_cache *c, const cg_tensor *rows);

/* The self-attention cache of layer i (borrowed), for a model of your own
 * whose blocks call cg_mha_self (nn/attention.h) or cg_mha_forward_cached:
 *
 *     pos = cg_kv_cache_len(cache);   (0 for a NULL cache: training)
 *     h = my_block_forward(block[i], h, cg_kv_cache_layer(cache, i));
 *
 * NULL for a NULL cache (so one forward serves training, cache NULL, and
 * decoding). A cache made with cg_kv_cache_new(0) grows to i + 1 layers
 * here. NULL + error for i < 0 or out of memory. */
cg_mha_kv *cg_kv_cache_layer(cg_kv_cache *c, int i);

#ifdef __cplusplus
}
#endif
#endif
