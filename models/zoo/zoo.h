/* cgrad zoo as a library: the zoo's two models loaded from a checkpoint
 * that `charlm train` or `seq2seq train` wrote, with the tokenizer stored
 * in it, for generation, translation and scoring through the installed
 * API (library libcgrad-zoo, `pkg-config cgrad-zoo`; examples/zoo_generate.c).
 * The architectures, equation by equation, with their parameter names:
 * docs/architectures.md.
 *
 *     cg_zoo_model *m = cg_zoo_load("out/charlm.safetensors");
 *     cg_tensor *prompt = cg_zoo_encode(m, "Call me", NULL);     int64 [n]
 *     cg_sample_config s = {.temperature = 1, .top_k = 5, .top_p = 1};
 *     cg_tensor *ids = cg_zoo_generate(m, prompt, 300, &s, 1);   int64 [n + 300]
 *     char *text = cg_zoo_decode(m, ids);                        what `charlm sample` prints
 *
 * The library's conventions hold: every returned tensor is a new reference
 * (cg_release), every returned string is malloc'd (free), and a failing
 * call returns NULL (NaN for a score) and records one line in the error
 * slot (cg_last_error); NULL in gives NULL out. Ids are int64 tensors.
 * Matrix products run in the precision the caller set
 * (cg_set_matmul_precision, fp32 by default), where the programs take the
 * checkpoint's training precision (cg_zoo_precision). */
#ifndef CG_MODELS_ZOO_H
#define CG_MODELS_ZOO_H

#include <stdbool.h>
#include <stdint.h>

#include "../../core/gemm.h"
#include "../../core/tensor.h"
#include "../../nn/module.h"
#include "../../nn/sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded zoo model and its tokenizer (opaque). */
typedef struct cg_zoo_model cg_zoo_model;

/* Load a checkpoint of either program (its metadata "model" says which):
 * the config, the tokenizer and every parameter, checked as the programs
 * check them; a LoRA adapter checkpoint (either program's) loads with its
 * base (the file it recorded). The weights are the moving average a run with
 * --ema-decay kept, when the checkpoint has one, as the programs use them
 * (models/train/checkpoint.h cg_ckpt_weights). The model is in eval mode
 * (cg_module_train to train it; generate, translate and score run in eval
 * mode and leave the mode as it was). NULL + error naming the file
 * otherwise. */
cg_zoo_model *cg_zoo_load(const char *path);
/* cg_zoo_load of a LoRA adapter checkpoint whose base moved: base is read
 * instead of the file it recorded (the programs' --base), and must be
 * that file's copy; a full checkpoint with a base given is refused. base
 * NULL: cg_zoo_load. */
cg_zoo_model *cg_zoo_load_base(const char *path, const char *base);
void cg_zoo_free(cg_zoo_model *m); /* NULL is a no-op */

/* "charlm" or "seq2seq"; NULL for NULL. */
const char *cg_zoo_kind(const cg_zoo_model *m);
/* The model's config as JSON (borrowed; docs/architectures.md lists every
 * key), written by this build: a checkpoint older than a key reads with
 * the key's meaning, so the facts are all there. */
const char *cg_zoo_config(const cg_zoo_model *m);
/* The precision of the matrix products the checkpoint was trained in (its
 * training state's "precision"; fp32 when it records none, and for NULL):
 * the one `charlm sample`, `seq2seq translate` and both evals decode in by
 * default. The library does not set it; cg_set_matmul_precision(
 * cg_zoo_precision(m)) makes generate, translate and score match the
 * programs on a bf16-trained checkpoint (train's --precision auto is bf16
 * on a CPU with native bf16). */
cg_precision cg_zoo_precision(const cg_zoo_model *m);
/* The model as a module (borrowed): cg_module_params, hooks, LoRA,
 * cg_module_save, train/eval mode. */
cg_module *cg_zoo_module(cg_zoo_model *m);

/* ------------------------------------------------------------ tokenizer
 * The checkpoint's own: characters (charlm: the sorted characters of its
 * training text; seq2seq: pad 0, bos 1, eos 2, unk 3, then the characters)
 * or SentencePiece BPE (the same specials, 256 byte pieces, the learnt
 * pieces). */
int64_t cg_zoo_vocab_size(const cg_zoo_model *m); /* -1 for NULL */
/* The ids of UTF-8 text: int64 [n] (no BOS or EOS). A character a char
 * vocabulary lacks is read as its substitute (charlm: U+FFFD, else the
 * space, else id 0; seq2seq: unk), as the programs read it;
 * *n_unknown (may be NULL) counts them. NULL + error on text that is not
 * UTF-8. */
cg_tensor *cg_zoo_encode(const cg_zoo_model *m, const char *text, int64_t *n_unknown);
/* The text of ids (int64, any shape, read in order; pad, bos and eos
 * dropped), malloc'd; NULL + error on an id outside the vocabulary. */
char *cg_zoo_decode(const cg_zoo_model *m, const cg_tensor *ids);

/* ------------------------------------------------------------ forward */
/* Logits [B, T, V] (a graph is recorded when grad mode is on and the
 * model requires grad). charlm: x = ids int64 [B, T] (T <= max_len),
 * tgt_in NULL. seq2seq: x = source ids int64 [B, S] (padded with 0, each
 * row ending in EOS 2), tgt_in = decoder input int64 [B, T] (BOS 1 first). */
cg_tensor *cg_zoo_forward(cg_zoo_model *m, const cg_tensor *x, const cg_tensor *tgt_in);

/* The mean cross-entropy in nats per predicted token (perplexity =
 * exp(score)), without label smoothing or dropout; NaN + error. Each
 * argument is one sequence: [n], or [1, n] (a batch is refused).
 *   charlm:  ids int64 [n] (n >= 2; y NULL): each id predicted from those
 *            before it, over consecutive windows of min(max_len, n - 1)
 *            ids as `charlm eval` scores its validation split (a remainder
 *            shorter than a window is left out);
 *   seq2seq: the translation y (int64 [T], no BOS/EOS) of source x (int64
 *            [S], no EOS): BOS + y predicts y + EOS given x + EOS, the
 *            validation loss `seq2seq train` reports as val_nll. */
double cg_zoo_score(cg_zoo_model *m, const cg_tensor *x, const cg_tensor *y);

/* ------------------------------------------------------------ decoding */
/* charlm: n_new ids after the prompt (int64 [n] or [1, n], n >= 1), drawn as
 * `charlm sample` draws them (key/value cache; beyond max_len the window
 * slides): softmax(logits / temperature) restricted to top_k and top_p
 * (nn/sample.h; NULL: cg_sample_default(); temperature 0: greedy), from a
 * generator seeded `seed`. The same checkpoint, prompt, options and seed
 * give `charlm sample`'s text: cg_zoo_decode of the result is the prompt
 * and what it prints. Returns int64 [n + n_new], the prompt first. */
cg_tensor *cg_zoo_generate(cg_zoo_model *m, const cg_tensor *prompt, int64_t n_new,
                           const cg_sample_config *s, uint64_t seed);
/* cg_zoo_generate under Hugging Face's logit rules (nn/sample.h
 * cg_logit_rules; NULL: none): `charlm sample --repetition-penalty P
 * --no-repeat-ngram-size N`'s output. */
cg_tensor *cg_zoo_generate_ex(cg_zoo_model *m, const cg_tensor *prompt, int64_t n_new,
                              const cg_sample_config *s, const cg_logit_rules *rules,
                              uint64_t seed);

/* seq2seq: the translations of n sentences, as `seq2seq translate` gives
 * them: beam <= 1 greedy (in batches of 50), else beam search of that
 * width with length penalty ((5 + len) / 6)^alpha (finite;
 * CG_ZOO_LENGTH_PENALTY: the program's default); each output at most its source's length + 50 tokens. Returns n
 * malloc'd strings (cg_zoo_strings_free) or NULL + error (a sentence that
 * is NULL, not UTF-8, or of max_len tokens or more, names its number). */
/* `seq2seq translate`'s default alpha, tuned on the Ding validation split. */
#define CG_ZOO_LENGTH_PENALTY 1.0
char **cg_zoo_translate(cg_zoo_model *m, const char *const *texts, int64_t n, int beam,
                        double alpha);
/* cg_zoo_translate under fairseq-generate's decoding limits (nn/sample.h
 * cg_decode_limits, `seq2seq translate`'s --max-len-a, --max-len-b,
 * --min-len and --no-repeat-ngram-size): each translation at most
 * floor(max_len_a * src_len + max_len_b) tokens, src_len its source's
 * tokens with the EOS the encoder reads (never more than the model's
 * max_len), no EOS before min_len tokens (unless the n-gram rule leaves no
 * other token), no n-gram of no_repeat_ngram_size tokens twice. NULL: the
 * program's defaults, {CG_ZOO_MAX_LEN_A, CG_ZOO_MAX_LEN_B, 0, 0} (the
 * source's tokens + 50, as cg_zoo_translate). */
#define CG_ZOO_MAX_LEN_A 1.0
#define CG_ZOO_MAX_LEN_B 49
char **cg_zoo_translate_ex(cg_zoo_model *m, const char *const *texts, int64_t n, int beam,
                           double alpha, const cg_decode_limits *lim);
/* cg_zoo_translate_ex drawing each token instead of taking the likeliest,
 * as `seq2seq translate --sampling` does (fairseq-generate's --sampling):
 * softmax(logits / temperature) restricted to top_k and top_p (nn/sample.h;
 * NULL: cg_sample_default(); temperature 0 or top_k 1: greedy), sentence i
 * drawing from its own generator, seeded from seed and i, so its
 * translation does not depend on the others. The same checkpoint,
 * sentences, options and seed give the program's lines. */
char **cg_zoo_translate_sample(cg_zoo_model *m, const char *const *texts, int64_t n,
                               const cg_sample_config *s, uint64_t seed,
                               const cg_decode_limits *lim);
/* Free s[0..n) and s (NULL is a no-op). */
void cg_zoo_strings_free(char **s, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
