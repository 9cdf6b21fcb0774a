/* cgrad zoo: sentence-pair data for the seq2seq model
 * (shared/reference/train_seq2seq.py load_split, make_batches, tensorize).
 *
 *   file     UTF-8 lines "source<TAB>target" (exactly one tab), read as
 *            Python's text mode does ("\r\n" and a lone "\r" end a line too;
 *            a final line without a newline counts). Lengths are counted
 *            in Unicode code points, as Python's len(str).
 *   split    pair indices shuffled as numpy.random.RandomState(0).permutation
 *            (MT19937, bit-exact); the last n_test are the test split, the
 *            n_valid before them validation, the rest training.
 *   vocab    pad=0, bos=1, eos=2, unk=3, then the sorted code points of the
 *            training pairs; unknown characters map to unk.
 *   batches  pairs sorted (stably) by (target length, source length), cut in
 *            that order into runs whose padded size
 *            n_pairs * (longest source + 1 + longest target + 1) <= max_tokens.
 *
 * Errors: false/NULL + cg_set_error (core/error.h) naming the file and line. */
#ifndef CG_MODELS_PAIRS_H
#define CG_MODELS_PAIRS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "models/text/pair_vocab.h"
#include "core/utf8.h"
#include "models/data/data_id.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------ numpy's RandomState */
/* numpy.random.RandomState(seed) is core's cg_mt19937 seeded with
 * cg_mt19937_seed (the same init_genrand as torch.manual_seed).
 * RandomState.permutation(n): out[0..n) (legacy Fisher-Yates with masked
 * rejection sampling, exactly as numpy). */
void cg_mt_permutation(cg_mt19937 *r, int64_t n, int64_t *out);

/* ------------------------------------------------------------ pairs */
typedef struct {
    char *src, *tgt; /* NUL-terminated UTF-8, owned by the set */
    int32_t src_len; /* code points (after tokenizing: ids) */
    int32_t tgt_len;
    /* The sides' ids once tokenized (models/seq2seq/translate.h
     * cg_pairs_tokenize; src_len and tgt_len of them), else NULL: batches
     * then copy them instead of encoding the text again. */
    const int64_t *src_ids, *tgt_ids;
} cg_pair;

typedef struct {
    cg_pair *items;
    int64_t n, cap;
    char *buf;    /* backing text (NULL for sets of borrowed strings) */
    int64_t *ids; /* backing ids of the items' src_ids/tgt_ids (owned; NULL) */
} cg_pairs;

/* Read a pair file. Errors (one clear message each): the file cannot be
 * read, it has no pairs, a line has no tab or more than one, a line is not
 * valid UTF-8. On failure *out is left empty. id (may be NULL) gets the
 * identity of the bytes read (models/data/data_id.h). */
bool cg_pairs_read(const char *path, cg_pairs *out, cg_data_id *id);
/* Same from a buffer (name used in messages). */
bool cg_pairs_parse(const char *text, size_t len, const char *name, cg_pairs *out);
void cg_pairs_free(cg_pairs *p);

/* A split: three arrays of indices into a cg_pairs (malloc'd; free with
 * cg_pair_split_free). */
typedef struct {
    int64_t *train, *valid, *test;
    int64_t n_train, n_valid, n_test;
} cg_pair_split;

/* Shuffle with RandomState(0) and cut as described above. Needs
 * p->n > n_valid + n_test (error otherwise). */
bool cg_pairs_split(const cg_pairs *p, int64_t n_valid, int64_t n_test, cg_pair_split *out);
void cg_pair_split_free(cg_pair_split *s);
/* cg_pairs_read then cg_pairs_split: the data set of a translator. On
 * failure both are left empty; a split error is "PATH: why". */
bool cg_pairs_load(const char *path, int64_t n_valid, int64_t n_test, cg_pairs *p,
                   cg_pair_split *split, cg_data_id *id);
/* Keep the indices whose pair has both sides at most max_chars code points
 * (in place); returns the new count. */
int64_t cg_pairs_filter(const cg_pairs *p, int64_t *idx, int64_t n, int64_t max_chars);

/* ---------------------------------------------- extra training pairs */
/* What cg_pairs_add_extra did with the pairs of another file. */
typedef struct {
    int64_t read;       /* the file's pairs */
    int64_t held_out;   /* dropped: a side equals a side of a validation or test pair */
    int64_t duplicates; /* dropped: the source equals a training pair's (first wins) */
    int64_t used;       /* joined the training split */
} cg_pairs_extra;

/* Extra training pairs (seq2seq train --extra-data): the pairs of x join
 * p's training split (their text copied into p, their indices appended to
 * split->train in x's order), except a pair whose source or target equals
 * either side of a validation or test pair of split (held out: no extra
 * pair repeats a held-out sentence), and a pair whose source equals that
 * of a training pair or of an earlier extra pair (a duplicate). Sides
 * compare as bytes, as cg_pairs_parse left them. The validation and test
 * splits and the indices of p's own pairs are unchanged. Call it before
 * the pairs are tokenized. *c: the counts. False + error (out of memory;
 * p and split are then as they were). */
bool cg_pairs_add_extra(cg_pairs *p, cg_pair_split *split, const cg_pairs *x, cg_pairs_extra *c);

/* ------------------------------------------------------------ vocab */
/* The code points of the given pairs (both sides) (models/text/pair_vocab.h). */
bool cg_pair_vocab_build(const cg_pairs *p, const int64_t *idx, int64_t n, cg_pair_vocab *out);
/* cg_pair_vocab_warn_unknown over both sides of pairs idx[0..n) (NULL: 0..n),
 * one warning for all. */
int64_t cg_pairs_warn_unknown(const cg_pairs *p, const int64_t *idx, int64_t n,
                              const cg_pair_vocab *v, const char *prog, const char *what);

/* ---------------------------------------------------------- batches */
typedef struct {
    int64_t *idx;   /* pair indices, all batches back to back */
    int64_t *start; /* batch b is idx[start[b] .. start[b+1]) */
    int64_t n_batches;
} cg_batches;

/* make_batches of the reference over pairs idx[0..n). max_tokens >= 1. A
 * single pair larger than max_tokens becomes a batch of its own. */
bool cg_make_batches(const cg_pairs *p, const int64_t *idx, int64_t n, int64_t max_tokens,
                     cg_batches *out);
void cg_batches_free(cg_batches *b);

/* One padded batch (tensorize): src [B,S] = chars eos pad..,
 * tgt_in [B,T] = bos chars pad.., tgt_out [B,T] = chars eos pad..
 * (arrays malloc'd; free with cg_batch_free). */
typedef struct {
    int64_t B, S, T;
    int64_t *src, *tgt_in, *tgt_out;
    int64_t n_tokens; /* non-pad entries of tgt_out */
} cg_batch;

bool cg_batch_make(const cg_pairs *p, const int64_t *idx, int64_t n, const cg_pair_vocab *v,
                   cg_batch *out);
/* The same with any encoder of the ids (cg_pair_vocab_encode's shape; ctx
 * is passed back; models/text/tokenizer.h for subwords). The pairs' src_len and
 * tgt_len must then be the encodings' lengths in ids (S and T are cut from
 * them; a longer encoding is an error). A pair whose ids are stored
 * (src_ids, tgt_ids) is not encoded again. */
typedef int64_t *(*cg_encode_fn)(const void *ctx, const char *text, int64_t *n, int64_t *n_unk);
bool cg_batch_make_with(const cg_pairs *p, const int64_t *idx, int64_t n, cg_encode_fn enc,
                        const void *ctx, cg_batch *out);
void cg_batch_free(cg_batch *b);
/* Bucketed shapes (fairseq's --pad-to-multiple): S and T rounded up to a
 * multiple of `multiple` (1 leaves the batch as it is) but not past limit
 * (the model's longest sequence; 0: no limit), the new positions
 * padding (CG_PAIR_PAD in src, tgt_in and tgt_out, so masks and the loss's
 * ignore_index skip them); n_tokens is unchanged. False + error when
 * multiple < 1 or out of memory (the batch is then unchanged). */
bool cg_batch_pad_to(cg_batch *b, int64_t multiple, int64_t limit);

#ifdef __cplusplus
}
#endif
#endif
