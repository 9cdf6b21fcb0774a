/* cgrad zoo: decoding a Seq2Seq model (shared/reference/train_seq2seq.py
 * greedy, beam_search; models.py Seq2Seq.greedy_decode).
 *
 * Every function runs without recording a graph; the caller puts the model
 * in eval mode (cg_module_train(CG_MODULE(m), false)) to turn dropout off.
 * Output ids never include BOS or EOS. Errors: false + cg_set_error. */
#ifndef CG_MODELS_BEAM_H
#define CG_MODELS_BEAM_H

#include <stdio.h>

#include "models/seq2seq/seq2seq.h"
#include "models/text/tokenizer.h"
#include "nn/sample.h" /* cg_decode_limits */

#ifdef __cplusplus
extern "C" {
#endif

/* Greedy decoding of B sources at once (src [B,S], PAD-padded): from BOS,
 * append the argmax of the last position's logits, at most max_steps times,
 * rows that produced EOS get PAD afterwards; stops when every row is done.
 * out receives B*max_steps ids (row b at out + b*max_steps; caller
 * allocates), lens[b] the length of row b before its EOS (max_steps when
 * it never produced one). max_steps + 1 must not exceed the model's
 * max_len. use_cache: decode with a key/value cache (one position per
 * step; finished rows leave the cache), else recompute every prefix.
 * False + error ("greedy decode: ...", or the encoder's or decoder's),
 * also at a NaN or +inf logit (cg_logits_usable: a diverged model), where
 * an argmax would pick a token that means nothing. */
bool cg_greedy_decode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S, int64_t max_steps,
                      int64_t *out, int64_t *lens, bool use_cache);
/* cg_greedy_decode under fairseq-generate's limits (nn/sample.h; NULL:
 * none, cg_greedy_decode): row b stops after min(max_steps,
 * cg_decode_max_len(lim, n_b, max_len)) tokens, n_b its ids other than PAD
 * (its EOS included: the source as the encoder reads it), lens[b] that many
 * when it produced no EOS (0: nothing decoded); each next token is the
 * argmax after cg_decode_block (min_len, no_repeat_ngram_size). */
bool cg_greedy_decode_ex(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S, int64_t max_steps,
                         const cg_decode_limits *lim, int64_t *out, int64_t *lens, bool use_cache);

/* cg_greedy_decode_ex drawing each next token (nn/sample.h cg_sample: its
 * temperature, top-k and top-p, after cg_decode_block's limits) instead of
 * taking the argmax: row b draws from rngs[b], its own generator, so its
 * translation does not depend on the other rows of the batch (fairseq's
 * --sampling, e.g. for back-translation). cfg NULL: cg_greedy_decode_ex. */
bool cg_sample_decode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S, int64_t max_steps,
                      const cg_decode_limits *lim, const cg_sample_config *cfg, cg_rng *rngs,
                      int64_t *out, int64_t *lens, bool use_cache);

/* The length penalty ((5 + len) / 6)^alpha. */
double cg_length_penalty(int64_t len, double alpha);
/* The zoo's default alpha, tuned on the Ding validation split (docs/zoo.md):
 * 1.0 gives the BLEU of GNMT's 0.6 within 0.12 and 0.1-0.4 more chrF on
 * every checkpoint tried. CG_BEAM_ALPHA_TEXT is it as the help prints it. */
#define CG_BEAM_ALPHA 1.0
#define CG_BEAM_ALPHA_TEXT "1.0"

/* Beam search for one source (src: S ids): each step expands every live
 * hypothesis by its top `beam` tokens and keeps the best `beam` candidates
 * by summed log-probability; a kept candidate ending in EOS is finished,
 * scored sum / lp(len) with len counting the EOS. Stops when `beam`
 * hypotheses are finished or after max_steps (then live ones are scored the
 * same way, len without EOS; as in the reference, the live ones also join
 * when the search stops because `beam` hypotheses finished, so the best can
 * be an unfinished one). *out (malloc'd; caller frees) receives the best
 * hypothesis, *len its length, *score (optional) its score, *finished
 * (optional) whether it ended with EOS. beam >= 1, alpha finite. The live hypotheses
 * run as one batch; use_cache: with a key/value cache reordered to the
 * surviving hypotheses' parents at every step, else every prefix is
 * recomputed. False + error as cg_greedy_decode's ("beam search: ..."). */
bool cg_beam_search(cg_seq2seq *m, const int64_t *src, int64_t S, int beam, double alpha,
                    int64_t max_steps, int64_t **out, int64_t *len, double *score, bool *finished,
                    bool use_cache);

/* One hypothesis of a beam search: ids[0..len) without BOS and EOS
 * (malloc'd), its score, whether it ended with EOS, and order, its place
 * in the order the search finished its hypotheses. */
typedef struct {
    int64_t *ids;
    int64_t len;
    double score;
    bool finished;
    int64_t order;
} cg_hypothesis;
/* The same search, keeping the nbest (1 <= nbest <= beam) best of the
 * hypotheses cg_beam_search ranks (the finished ones and, as there, the
 * live ones it stopped on, scored without EOS: fairseq lists finished ones
 * only), best first, the earlier finished first among equal scores
 * (out[0] is cg_beam_search's answer): out[0..*n_out), the caller's array
 * of nbest, *n_out < nbest only when the search has fewer
 * (cg_hypotheses_free frees their ids). fairseq-generate's --nbest.
 * lim (NULL: none, cg_beam_search's): the search stops after
 * min(max_steps, cg_decode_max_len(lim, n, max_len)) steps, n the source's
 * ids other than PAD (its EOS included), and each hypothesis's
 * log-probabilities pass cg_decode_block (min_len, no_repeat_ngram_size)
 * before its top tokens are taken; a blocked token (-inf) is never a
 * candidate. */
bool cg_beam_search_nbest(cg_seq2seq *m, const int64_t *src, int64_t S, int beam, double alpha,
                          int64_t max_steps, const cg_decode_limits *lim, bool use_cache, int nbest,
                          cg_hypothesis *out, int *n_out);
/* Free the ids of h[0..n) (the array is the caller's). */
void cg_hypotheses_free(cg_hypothesis *h, int n);

/* The score beam search gives hypothesis hyp[0..n) of source src: the sum
 * of log-probabilities of hyp (and of EOS after it if with_eos) divided by
 * lp(n + with_eos). NAN + error on failure. */
double cg_seq2seq_score(cg_seq2seq *m, const int64_t *src, int64_t S, const int64_t *hyp, int64_t n,
                        bool with_eos, double alpha);

/* ------------------------------------------------ sentences of text
 * (seq2seq translate, and the library's cg_zoo_translate: models/zoo/zoo.h) */

/* Set "WHAT: <the error recorded>" ("unknown error" when none is). */
void cg_seq2seq_prefix_error(const char *what);

/* Sources: the ids of n sentences, without EOS. */
typedef struct {
    int64_t **ids;
    int64_t *len;
    int64_t n;
} cg_sources;
/* Encode texts[0..n); a sentence of max_len tokens or more (room for EOS)
 * is an error ("sentence K has N tokens; the model takes at most M"). */
bool cg_sources_encode(const cg_tokenizer *tok, const char *const *texts, int64_t n,
                       int64_t max_len, cg_sources *out);
void cg_sources_free(cg_sources *s);

/* The translations' limits by default: at most the source's tokens + 50
 * (max_len_a 1 and max_len_b 49: src_len counts the source's EOS), what
 * `seq2seq translate` always gave; EOS at any step; no n-gram blocking. */
#define CG_MAX_LEN_A 1.0
#define CG_MAX_LEN_B 49
#define CG_MAX_LEN_A_TEXT "1"
#define CG_MAX_LEN_B_TEXT "49"
cg_decode_limits cg_translate_limits_default(void);

/* Translate every source: beam <= 1 greedy in chunks of 50 (reference
 * `greedy`), else beam search (alpha: its length penalty) one sentence at a
 * time, both under lim (NULL: cg_translate_limits_default()): source i's
 * output has at most cg_decode_max_len(lim, its tokens + 1 (EOS), the
 * model's max_len) tokens, EOS not before lim->min_len of them, and no
 * repeated n-gram of lim->no_repeat_ngram_size (cg_greedy_decode_ex,
 * cg_beam_search_nbest). Returns n malloc'd UTF-8 strings (cg_strings_free);
 * echo (may be NULL) gets each line as soon as it is decoded (a write that
 * fails stops it: NULL + "cannot write the output: ...", models/util/files.h
 * cg_output_flush). use_cache:
 * with the key/value cache (else every prefix is recomputed). Decodes in
 * eval mode and leaves the model in the mode it was in. */
char **cg_translate_all(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int beam,
                        double alpha, bool use_cache, const cg_decode_limits *lim, FILE *echo);
/* cg_translate_all asking stop (may be NULL) before each chunk of sentences
 * (greedy) or sentence (beam): true ends it, NULL + "interrupted" (train
 * --eval-bleu's decoding, cut short by a signal as the validation loss is). */
char **cg_translate_all_until(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src,
                              int beam, double alpha, bool use_cache, const cg_decode_limits *lim,
                              FILE *echo, bool (*stop)(void));
/* cg_translate_all's greedy path drawing each token (cg_sample_decode,
 * cfg's temperature, top-k and top-p) instead of taking the argmax;
 * sentence i of src draws from its own generator, seeded from seed and i,
 * so its translation does not depend on the others or on how they are
 * batched (fairseq-generate's --sampling, as back-translation uses it). */
char **cg_translate_sample(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src,
                           const cg_sample_config *cfg, uint64_t seed, bool use_cache,
                           const cg_decode_limits *lim, FILE *echo);
/* The seed of draw j of sentence i's generator, from a run's seed (draw 0:
 * cg_translate_sample's for sentence i). */
uint64_t cg_sample_seed(uint64_t seed, int64_t i, int j);
/* fairseq-generate's --sampling --beam N --nbest K: `draws` (N)
 * translations of source i of src, each drawn as cg_translate_sample draws
 * (draw j from the generator of cg_sample_seed(seed, i, j): draw 0 is
 * cg_translate_sample's), scored as beam search scores a hypothesis
 * (cg_seq2seq_score under alpha: the model's log-probabilities, without
 * the temperature or truncation, with EOS unless the draw stopped at its
 * cap), and the nbest (1 <= nbest <= draws) best of them, best first (a tie:
 * the earlier draw): texts[0..nbest) (malloc'd UTF-8, the caller frees)
 * and scores; *n = nbest. Draws may repeat one another. Decodes in eval
 * mode and leaves the model in the mode it was in. False + error (nothing
 * to free). */
bool cg_translate_sample_nbest(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src,
                               int64_t i, const cg_sample_config *cfg, uint64_t seed, int draws,
                               double alpha, bool use_cache, const cg_decode_limits *lim, int nbest,
                               char **texts, double *scores, int *n);
/* The nbest best translations of source i of src by beam search (as
 * cg_translate_all's beam path, lim as there, 1 <= nbest <= beam), best
 * first: texts[0..*n) (malloc'd UTF-8, the caller frees) and their scores
 * (the summed log-probability over the length penalty), *n < nbest only
 * when the search finished fewer. Decodes in eval mode and leaves the
 * model in the mode it was in. False + error (nothing to free). */
bool cg_translate_nbest(cg_seq2seq *m, const cg_tokenizer *tok, const cg_sources *src, int64_t i,
                        int beam, double alpha, bool use_cache, const cg_decode_limits *lim,
                        int nbest, char **texts, double *scores, int *n);
/* Free s[0..n) and s (NULL is a no-op). */
void cg_strings_free(char **s, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
