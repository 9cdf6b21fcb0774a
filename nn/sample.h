/* cgrad nn: drawing tokens from logits (temperature, top-k, top-p) and
 * plain multinomial draws, deterministic under a cg_rng seed.
 *
 * cg_sample is nanoGPT's / the reference's generate() step: logits /
 * temperature, keep the top_k largest (ties at the k-th value kept, as
 * logits.masked_fill(logits < kth, -inf)), softmax (in double), then the
 * nucleus (top-p) filter: the smallest prefix of the sorted probabilities
 * whose mass reaches top_p, renormalised; then one uniform draw
 * (cg_rng_uniform_double) walks the cumulative sum in descending order
 * (ties: lower id first). Temperature 0 (or one so small that
 * logits / temperature overflow) is greedy: the first largest logit; one
 * past float's range (inf) draws uniformly among the logits not masked.
 * Errors: -1 / false + cg_set_error, also for a NaN or +inf logit (a
 * diverged model) and for logits that are all -inf. */
#ifndef CG_NN_SAMPLE_H
#define CG_NN_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double temperature; /* >= 0; 0 = greedy (argmax) */
    int64_t top_k;      /* 0 = off; else keep the k largest logits (k <= V) */
    double top_p;       /* in (0, 1]; 1 = off */
} cg_sample_config;

/* temperature 1, top_k 0, top_p 1: plain sampling from softmax(logits). */
cg_sample_config cg_sample_default(void);

/* Whether logits[0, V) can be decoded from: false + error ("WHAT: logit i
 * of V is NaN (a diverged model?)") at the first NaN or +inf, which no
 * draw, argmax or beam means anything for; -inf (a masked logit) passes. */
bool cg_logits_usable(const float *logits, int64_t V, const char *what);
/* One id in [0, V) drawn from logits[0..V) (cfg NULL: the default). */
int64_t cg_sample(const float *logits, int64_t V, const cg_sample_config *cfg, cg_rng *rng);
/* One id per row of logits [..., V] (any float dtype, any strides, no
 * graph): a new int64 tensor of the leading dims [...] (a scalar for
 * logits [V]). NULL + error. */
cg_tensor *cg_sample_rows(const cg_tensor *logits, const cg_sample_config *cfg, cg_rng *rng);
/* torch.multinomial(probs, 1): one index drawn with probability
 * proportional to probs[i] (>= 0, finite, not all 0; need not sum to 1),
 * by one uniform draw against the cumulative sum in index order. */
int64_t cg_multinomial(const float *probs, int64_t n, cg_rng *rng);

/* ------------------------------------------------ logit rules
 * Hugging Face generate()'s rules on the logits of the token that follows
 * ids[0..n) (the prompt and what was generated), applied before the draw
 * (before the temperature, as its logits processors come before its
 * warpers):
 *   repetition_penalty  CTRL's (Keskar et al. 2019; HF's
 *                       RepetitionPenaltyLogitsProcessor): the logit of
 *                       every id already in ids is divided by it when
 *                       positive, multiplied when negative; 1: off
 *   no_repeat_ngram_size  -inf on every id that would complete an n-gram
 *                       of that many ids already in ids (HF's
 *                       NoRepeatNGramLogitsProcessor); 0: off */
typedef struct {
    double repetition_penalty;
    int64_t no_repeat_ngram_size;
} cg_logit_rules;
/* {1, 0}: both off. */
cg_logit_rules cg_logit_rules_default(void);
/* False + error ("logit rules: repetition_penalty is 0, must be finite and
 * > 0") unless repetition_penalty is finite and > 0 and
 * no_repeat_ngram_size >= 0. NULL is fine (no rules). */
bool cg_logit_rules_check(const cg_logit_rules *r);
/* r on logits[0..V): whether a logit changed. r checked (NULL: nothing);
 * ids outside [0, V) change nothing. */
bool cg_logit_rules_apply(const cg_logit_rules *r, const int64_t *ids, int64_t n, float *logits,
                          int64_t V);

/* ------------------------------------------------ decoding limits
 * fairseq-generate's length and repetition controls (its SequenceGenerator's
 * max_len_a, max_len_b, min_len and no_repeat_ngram_size), for a decoder
 * that picks each next token from a row of scores (logits or
 * log-probabilities: greedy, beam search, sampling). Hypotheses are the
 * tokens generated so far, without BOS (fairseq's count BOS in its
 * n-grams; an n-gram holding BOS cannot recur, as BOS is never generated
 * after it, unless a model emits its id). */
typedef struct {
    /* at most floor(max_len_a * src_len + max_len_b) tokens before EOS,
     * src_len the source's length as the encoder reads it (its EOS
     * included, as fairseq's src_tokens); cg_decode_max_len */
    double max_len_a;
    int64_t max_len_b;
    /* EOS is not allowed before min_len tokens (0: at any step; fairseq's
     * default is 1) */
    int64_t min_len;
    /* 0: off; n: no n-gram of n tokens occurs twice in a hypothesis (a token
     * that would complete one already in it gets -inf, as fairseq's
     * NGramRepeatBlock does) */
    int64_t no_repeat_ngram_size;
} cg_decode_limits;

/* False + error ("decode limits: min_len is -1, must be >= 0") unless
 * max_len_a is finite and >= 0 and the other fields are >= 0. NULL is
 * fine (no limits). */
bool cg_decode_limits_check(const cg_decode_limits *l);
/* The most tokens a hypothesis of a source of src_len tokens may have:
 * floor(max_len_a * src_len + max_len_b) (fairseq's int(a * src_len + b)),
 * in [0, cap] (cap: what the decoder can hold, its positions). l checked. */
int64_t cg_decode_max_len(const cg_decode_limits *l, int64_t src_len, int64_t cap);
/* l's min_len and no_repeat_ngram_size on scores[0..V), the scores of the
 * token that follows hyp[0..len): -inf on eos (an id) while len < min_len,
 * and on every token that would complete an n-gram of no_repeat_ngram_size
 * tokens already in hyp. When that leaves no score above -inf, eos keeps
 * its own (min_len gives way: the hypothesis can end). Returns whether it
 * wrote a score; with neither limit on (or l NULL) nothing is read or
 * written. l checked; ids of hyp outside [0, V) block nothing. */
bool cg_decode_block(const cg_decode_limits *l, const int64_t *hyp, int64_t len, int64_t eos,
                     float *scores, int64_t V);

#ifdef __cplusplus
}
#endif
#endif
