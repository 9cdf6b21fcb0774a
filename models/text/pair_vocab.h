/* cgrad zoo, text layer: the character vocabulary of the seq2seq model:
 * pad=0, bos=1, eos=2, unk=3, then the sorted code points of the training
 * pairs; unknown characters map to unk.
 *
 * Errors: false/NULL + cg_set_error (core/error.h). */
#ifndef CG_MODELS_TEXT_PAIR_VOCAB_H
#define CG_MODELS_TEXT_PAIR_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CG_PAIR_PAD 0
#define CG_PAIR_BOS 1
#define CG_PAIR_EOS 2
#define CG_PAIR_UNK 3

typedef struct {
    uint32_t *chars; /* sorted code points; id = 4 + position */
    int64_t n_chars;
} cg_pair_vocab;

/* The sorted set of the code points of n NUL-terminated UTF-8 texts;
 * false + error on invalid UTF-8. */
bool cg_pair_vocab_from_texts(const char *const *texts, int64_t n, cg_pair_vocab *out);
/* The checkpoint form of the characters (models/vocab.h: a JSON string of
 * the characters in id order, without the 4 specials). */
bool cg_pair_vocab_from_json(const char *json, cg_pair_vocab *out);
char *cg_pair_vocab_to_json(const cg_pair_vocab *v); /* malloc'd or NULL */
void cg_pair_vocab_free(cg_pair_vocab *v);
static inline int64_t cg_pair_vocab_size(const cg_pair_vocab *v) { return v->n_chars + 4; }
/* Id of a code point (unk if absent). */
int64_t cg_pair_vocab_id(const cg_pair_vocab *v, uint32_t cp);
/* Encode UTF-8 text to ids (malloc'd, *n receives the count), NULL + error
 * on invalid UTF-8. *n_unk (optional) counts unknown characters. */
int64_t *cg_pair_vocab_encode(const cg_pair_vocab *v, const char *s, int64_t *n, int64_t *n_unk);
/* Characters outside the vocabulary are read as unk; these count them and,
 * when prog is not NULL and some are found, print one warning on stderr
 * ("prog: warning: N character(s) of WHAT are not in the vocabulary (first
 * U+XXXX 'c'); they are read as <unk>"), as charlm does for its prompt.
 * Returns the count. _warn_unknown: one text (WHAT NUMBER: "sentence 3");
 * models/data/pairs.h cg_pairs_warn_unknown: both sides of pairs. */
int64_t cg_pair_vocab_warn_unknown(const cg_pair_vocab *v, const char *s, const char *prog,
                                   const char *what, int64_t number);
/* The characters of s outside v (no warning); *first (optional) gets the
 * first. Invalid UTF-8 stops the count (the encoder reports it). */
int64_t cg_pair_vocab_count_unknown(const cg_pair_vocab *v, const char *s, uint32_t *first);
/* Ids to UTF-8 (malloc'd); ids < 4 (specials) are skipped. */
char *cg_pair_vocab_decode(const cg_pair_vocab *v, const int64_t *ids, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
