/* cgrad zoo: subword tokenization (BPE) with SentencePiece, behind a C API.
 *
 * SentencePiece (Debian's libsentencepiece-dev) trains and applies the BPE
 * model; models/text/spm.cc wraps its C++ API and is built only when meson finds
 * the library and a C++ compiler. Without it every function below fails
 * with "BPE tokenization is unavailable: ..." (cg_spm_available() says
 * which build this is), and the rest of the zoo works as before.
 *
 * Ids follow the zoo's conventions (models/text/pair_vocab.h, models/seq2seq/seq2seq.h):
 * pad = 0, bos = 1, eos = 2, unk = 3 ("<pad>", "<s>", "</s>", "<unk>"),
 * then 256 byte pieces "<0x00>".."<0xFF>", then the learnt pieces. Encoding
 * never produces pad, bos or eos: the caller adds bos/eos as it does for
 * characters.
 *
 * Lossless: the text is not normalised (no NFKC, spaces kept as they are),
 * and a character the model has no piece for is encoded as its UTF-8 bytes
 * (byte fallback), so cg_spm_decode(cg_spm_encode(s)) == s for every valid
 * UTF-8 string s without U+2581. A word-initial piece starts with U+2581
 * ("\u2581Haus"), which stands for the space before it; so SentencePiece
 * reads a U+2581 in the text as a space, and it decodes as one ("a\u2581b"
 * comes back as "a b").
 *
 * Storage: a tokenizer is a blob of bytes (cg_spm_blob / cg_spm_from_blob):
 * an 24-byte header (magic "CGSPM\0\0\1", the payload length and an FNV-1a
 * checksum, little-endian u64 each) and SentencePiece's serialized model
 * (the bytes of a ".model" file; cg_spm_model_proto gives them alone, e.g.
 * for Python's sentencepiece). A truncated or damaged blob is rejected with
 * a message. In a checkpoint the blob is a 1-D U8 tensor
 * (cg_spm_st_add / cg_spm_st_load), so the checkpoint stays self-contained.
 *
 * Errors: NULL/false/-1 + a message in the error slot (core/error.h); a NULL
 * tokenizer (or file) gives NULL/false with "<fn>: input is NULL" only when
 * no message is recorded (the root cause of a chain stays), and
 * cg_spm_vocab_size -1 with none. No C++ exception
 * crosses this API. A tokenizer may be used from several threads at once
 * for encoding, decoding and lookups. */
#ifndef CG_MODELS_SPM_H
#define CG_MODELS_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CG_SPM_PAD 0
#define CG_SPM_BOS 1
#define CG_SPM_EOS 2
#define CG_SPM_UNK 3
/* The smallest vocabulary: 4 special ids + 256 byte pieces + 1. */
#define CG_SPM_MIN_VOCAB 261

typedef struct cg_spm cg_spm;

/* True when this build has SentencePiece. */
bool cg_spm_available(void);

/* Train a BPE model on n UTF-8 sentences (the training split only; each
 * NUL-terminated, newlines not allowed inside one) with vocab_size ids in
 * all, CG_SPM_MIN_VOCAB .. 1,000,000. Every character of the sentences (of any length) gets
 * a piece. Deterministic for the same sentences and size. If the sentences
 * cannot fill vocab_size, the vocabulary is smaller (cg_spm_vocab_size).
 * Returns a new tokenizer (free with cg_spm_free) or NULL + error. */
cg_spm *cg_spm_train(const char *const *sentences, int64_t n, int64_t vocab_size);

/* A tokenizer from a blob made by cg_spm_blob (the bytes are copied), or
 * NULL + error if the blob is truncated, damaged, or not a model with the
 * zoo's special ids. */
cg_spm *cg_spm_from_blob(const void *blob, size_t len);
/* A tokenizer from SentencePiece's serialized model alone (the bytes of a
 * ".model" file, as cg_spm_model_proto gives them or Python's
 * sentencepiece writes them; copied), or NULL + error if they are not a
 * model with the zoo's special ids that gives text back as it was. */
cg_spm *cg_spm_from_model_proto(const void *model, size_t len);
/* The blob (malloc'd, caller frees; *len receives its size) or NULL + error. */
unsigned char *cg_spm_blob(const cg_spm *t, size_t *len);
/* SentencePiece's serialized model alone (borrowed from t, valid until
 * cg_spm_free); *len receives its size. */
const unsigned char *cg_spm_model_proto(const cg_spm *t, size_t *len);
void cg_spm_free(cg_spm *t); /* NULL is a no-op */

/* Number of ids, V (the embedding rows a model needs). -1 for NULL. */
int64_t cg_spm_vocab_size(const cg_spm *t);

/* Ids of a UTF-8 text (malloc'd, caller frees; *n receives the count; an
 * empty text gives a valid allocation and *n = 0), or NULL + error if the
 * text is not valid UTF-8 (the message names the byte offset). */
int64_t *cg_spm_encode(const cg_spm *t, const char *text, int64_t *n);
/* The UTF-8 text of n ids (malloc'd, NUL-terminated), or NULL + error on
 * an id outside [0, V). pad, bos and eos decode to nothing, unk to U+2047,
 * byte pieces that are no UTF-8 text (<0xFF>, <0x00>: a C string ends at a
 * NUL) to U+FFFD. */
char *cg_spm_decode(const cg_spm *t, const int64_t *ids, int64_t n);
/* The piece of an id as stored in the model ("\u2581Haus", "<s>", "<0x0A>",
 * ...; borrowed, valid until cg_spm_free), or NULL + error if out of range.
 * Meant for labels (attention heatmaps). */
const char *cg_spm_piece(const cg_spm *t, int64_t id);

/* ------------------------------------------------------------ checkpoints */
/* The two take the safetensors types of nn/safetensors.h. */
struct cg_st_writer;
struct cg_st_file;
/* Add t's blob to a safetensors writer as the 1-D U8 tensor `name`
 * (e.g. "tokenizer.spm"). */
bool cg_spm_st_add(struct cg_st_writer *w, const char *name, const cg_spm *t);
/* The tokenizer stored as tensor `name` of an opened file, or NULL + error
 * (absent, not U8, or a bad blob; the message names the file). */
cg_spm *cg_spm_st_load(const struct cg_st_file *f, const char *name);

#ifdef __cplusplus
}
#endif
#endif
