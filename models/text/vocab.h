/* cgrad zoo: character vocabulary (Unicode code points) and UTF-8 text.
 *
 * The vocabulary is the sorted set of code points of a text, as in the
 * reference trainers (sorted(set(text))): id i is the i-th smallest code
 * point. It is stored in checkpoints as the metadata entry "vocab": a JSON
 * string holding the characters in id order (json.dumps("".join(chars)),
 * the reference's format).
 *
 * Unknown characters (absent from the vocabulary, e.g. in a prompt) map to
 * a substitute id `unk`: U+FFFD if the vocabulary has it, else the space,
 * else id 0. No extra embedding row is reserved, so the model's vocabulary
 * is exactly the reference's and reference checkpoints stay loadable.
 *
 * Errors: NULL/false + cg_set_error. */
#ifndef CG_MODELS_VOCAB_H
#define CG_MODELS_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/utf8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "PROG: warning: COUNT character(s) of WHAT are not in the vocabulary
 * (first U+00F6 'ö'); they are read as SUBST" on stderr. */
void cg_warn_unknown_chars(const char *prog, const char *what, int64_t count, uint32_t first,
                           const char *subst);

typedef struct {
    int64_t n;       /* vocabulary size V */
    uint32_t *chars; /* n code points, strictly increasing */
    int64_t unk;     /* substitute id for unknown characters */
} cg_vocab;

/* The code points whose bit is set in a bitmap of 0x110000 bits (bit c of
 * byte c / 8), `count` of them, into out in increasing order: the set of
 * the characters of a text, read without a sort. */
void cg_codepoint_bits_sorted(const uint8_t *seen, int64_t count, uint32_t *out);
/* Build from code points (sorted set). NULL + error on an empty text or one
 * holding U+0000 (the checkpoint form cannot store it). */
cg_vocab *cg_vocab_from_codepoints(const uint32_t *cps, int64_t n);
/* From the checkpoint form (a JSON string literal). NULL + error if it is
 * malformed, empty, or its characters are not strictly increasing. */
cg_vocab *cg_vocab_from_json(const char *json);
/* The checkpoint form (malloc'd, caller frees) or NULL + error. */
char *cg_vocab_to_json(const cg_vocab *v);
void cg_vocab_free(cg_vocab *v);

/* Id of code point c, or -1 if it is not in the vocabulary. */
int64_t cg_vocab_id(const cg_vocab *v, uint32_t c);
/* The same when count > 0, with v's substitute character as SUBST. */
void cg_vocab_warn_unknown(const cg_vocab *v, const char *prog, const char *what, int64_t count,
                           uint32_t first);
/* Map n code points to ids (unknown -> v->unk). Returns the number of
 * unknown characters; *first_unknown (may be NULL) receives the first one. */
int64_t cg_vocab_encode(const cg_vocab *v, const uint32_t *cps, int64_t n, int64_t *ids,
                        uint32_t *first_unknown);
/* The ids of UTF-8 text (malloc'd; *n gets their count) or NULL + error
 * when it is not valid UTF-8 (the message names it `name`); *unknown and
 * *first_unknown (either may be NULL) as for cg_vocab_encode. */
int64_t *cg_vocab_encode_text(const cg_vocab *v, const char *text, const char *name, int64_t *n,
                              int64_t *unknown, uint32_t *first_unknown);
/* The same into 32-bit ids; ids may be cps itself (encoding in place). */
int64_t cg_vocab_encode32(const cg_vocab *v, const uint32_t *cps, int64_t n, int32_t *ids,
                          uint32_t *first_unknown);
/* UTF-8 text of n ids (malloc'd, NUL-terminated) or NULL + error on an id
 * out of range. */
char *cg_vocab_decode(const cg_vocab *v, const int64_t *ids, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
