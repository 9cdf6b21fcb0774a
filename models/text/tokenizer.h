/* cgrad zoo: one tokenizer interface over characters and BPE subwords.
 *
 * kind "char": the existing character vocabularies, unchanged:
 *   with specials (seq2seq)  models/text/pair_vocab.h: pad 0, bos 1,
 *                            eos 2, unk 3, then the sorted characters;
 *   without (charlm)         models/text/vocab.h cg_vocab: id = rank of the
 *                            character, unknown characters -> its unk.
 * kind "bpe": SentencePiece BPE (models/text/spm.h), ids as spm's (pad 0, bos 1,
 *   eos 2, unk 3, 256 byte pieces, learnt pieces), for both flavours. The
 *   encoding is lossless (byte fallback), so no character is unknown.
 *
 * Training (cg_tokenizer_train) is from sentences of the TRAINING split
 * only. In a checkpoint (cg_tokenizer_write / cg_tokenizer_read):
 *   char  the metadata "vocab" (models/text/vocab.h's JSON string), exactly as
 *         before, so old checkpoints load;
 *   bpe   the metadata "tokenizer": "bpe" and the 1-D U8 tensor
 *         "tokenizer.spm" (cg_spm_st_add / cg_spm_st_load).
 *
 * Errors: NULL/false/-1 + a message in the error slot; a NULL tokenizer
 * gives NULL/false/-1 without a new message. */
#ifndef CG_MODELS_TOKENIZER_H
#define CG_MODELS_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "models/text/pair_vocab.h"
#include "models/text/spm.h"
#include "models/text/vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cg_st_writer;
struct cg_st_file;

typedef enum { CG_TOK_CHAR = 0, CG_TOK_BPE = 1 } cg_tokenizer_kind;

/* The tensor holding a BPE tokenizer in a checkpoint. */
#define CG_TOKENIZER_TENSOR "tokenizer.spm"

typedef struct cg_tokenizer {
    cg_tokenizer_kind kind;
    bool specials;    /* pad/bos/eos/unk = 0..3 (seq2seq); always so for bpe */
    cg_pair_vocab pv; /* char with specials */
    cg_vocab *cv;     /* char without specials */
    cg_spm *spm;      /* bpe */
} cg_tokenizer;

/* "char" or "bpe" -> *out; false + error naming the choices otherwise. */
bool cg_tokenizer_kind_parse(const char *s, cg_tokenizer_kind *out);
const char *cg_tokenizer_kind_name(cg_tokenizer_kind k);

/* Train on n NUL-terminated UTF-8 sentences (the training split only).
 * char: the sorted set of their characters (vocab_size ignored); bpe:
 * cg_spm_train with vocab_size ids (>= CG_SPM_MIN_VOCAB; "unavailable"
 * error when the build lacks SentencePiece). specials: the seq2seq flavour
 * (see above). Returns a new tokenizer (cg_tokenizer_free) or NULL + error. */
cg_tokenizer *cg_tokenizer_train(cg_tokenizer_kind kind, bool specials,
                                 const char *const *sentences, int64_t n, int64_t vocab_size);
/* Read from a checkpoint's metadata/tensors (see above), or NULL + error
 * naming the file (a damaged tokenizer.spm is rejected here). */
cg_tokenizer *cg_tokenizer_read(const struct cg_st_file *f, bool specials);
/* Add to a checkpoint being written. */
bool cg_tokenizer_write(const cg_tokenizer *t, struct cg_st_writer *w);
void cg_tokenizer_free(cg_tokenizer *t); /* NULL is a no-op */

/* Number of ids (the embedding rows a model needs); -1 for NULL. */
int64_t cg_tokenizer_vocab_size(const cg_tokenizer *t);
/* Ids of UTF-8 text (malloc'd, *n receives the count) or NULL + error on
 * invalid UTF-8. *n_unk (optional) counts characters read as unknown
 * (always 0 for bpe). */
int64_t *cg_tokenizer_encode(const cg_tokenizer *t, const char *text, int64_t *n, int64_t *n_unk);
/* The text of n ids (malloc'd); pad/bos/eos are dropped. NULL + error on an
 * id out of range. */
char *cg_tokenizer_decode(const cg_tokenizer *t, const int64_t *ids, int64_t n);
/* A readable label of one id for plots (malloc'd): specials as "<pad>",
 * "<s>", "</s>", "<unk>"; characters as themselves; BPE pieces with the
 * word-start mark U+2581 shown as U+2423 ("\u2423Haus"), byte pieces as
 * "<0x0A>". NULL + error on an id out of range. */
char *cg_tokenizer_label(const cg_tokenizer *t, int64_t id);
/* The labels of n ids (a malloc'd array of malloc'd strings; free each and
 * the array) or NULL + error. */
char **cg_tokenizer_labels(const cg_tokenizer *t, const int64_t *ids, int64_t n);
/* Same tokenizer (kind and vocabulary)? */
bool cg_tokenizer_equal(const cg_tokenizer *a, const cg_tokenizer *b);

/* Validation loss in bits per target character, comparable across
 * tokenizers: nats_per_token * tokens / chars / ln 2, where tokens is the
 * number of target tokens the mean loss is over and chars the number of
 * target characters (Unicode code points) they spell; each sentence's EOS
 * counts as one token and one character. For the char tokenizer tokens ==
 * chars, so this is nats_per_token / ln 2. NaN when chars <= 0. */
double cg_bits_per_char(double nats_per_token, double tokens, double chars);

#ifdef __cplusplus
}
#endif
#endif
