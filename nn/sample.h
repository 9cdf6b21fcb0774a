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

#ifdef __cplusplus
}
#endif
#endif
