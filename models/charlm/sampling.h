/* cgrad zoo: sampling from the char LM, with a key/value cache.
 *
 * The cache is nn's (nn/kv_cache.h cg_kv_cache): every layer's keys and
 * values of the positions seen so far. cg_charlm_forward_cached runs only
 * the new tokens through the model (under no-grad, in eval mode) using the
 * model's own parameters and the same ops as cg_charlm_forward, so its
 * logits equal a full recompute up to float rounding.
 *
 * Positions are absolute (sinusoidal, added to the embedding), so once a
 * context reaches max_len the window must slide and every cached key
 * changes: generation then recomputes the window of the last max_len tokens
 * at each step, exactly as the reference's generate() (which crops the
 * context to idx[:, -max_len:]). Below max_len each new token costs one
 * position.
 *
 * Errors: NULL/false/-1 + cg_set_error. */
#ifndef CG_MODELS_SAMPLING_H
#define CG_MODELS_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "models/charlm/charlm.h"
#include "models/util/cli.h"
#include "models/text/tokenizer.h"
#include "models/text/vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An empty cache for m (cg_kv_cache_new(layers)); free with cg_kv_cache_free. */
cg_kv_cache *cg_charlm_kv_cache_new(const cg_charlm *m);

/* Logits [B, n, V] (new reference) for n new tokens per row (ids: B*n,
 * row-major) at positions p .. p+n-1 (p = cg_kv_cache_len(c)), attending
 * to the cached positions and causally to each other; the cache grows by
 * n. Error if p + n > max_len or an id is out of range. Runs without recording a
 * graph. */
cg_tensor *cg_charlm_forward_cached(cg_charlm *m, cg_kv_cache *c, const int64_t *ids, int64_t B,
                                    int64_t n);

/* The library's sampling options (nn/sample.h): temperature (0 = greedy),
 * top_k (0 = off), top_p (1 = off). Ids are drawn by cg_sample. */
typedef cg_sample_config cg_sample_opts;

/* The sampling flags --temperature --top-k --top-p --seed, appended to a
 * flag table (models/util/cli.h; room for 4) over *o and *seed, which get
 * their defaults (1, 0 = all, 1 = off, 1); returns 4. CG_SAMPLE_HELP is
 * their help. */
int cg_sample_cli_opts(cg_sample_opts *o, uint64_t *seed, cg_cli_opt *opts);
#define CG_SAMPLE_HELP                                                          \
    "  --temperature X     softmax temperature (default 1; 0 = greedy)\n"       \
    "  --top-k K           keep the K most likely tokens (default 0 = all)\n"   \
    "  --top-p P           nucleus sampling mass in (0, 1] (default 1 = off)\n" \
    "  --seed N            sampling seed (default 1)\n"

/* Called with each new id as it is generated (for printing as it goes);
 * returning false stops the generation with an error. */
typedef bool (*cg_token_fn)(void *ctx, int64_t id);

/* Generate n_new tokens after the prompt (n_prompt >= 1 ids). Returns a
 * malloc'd array of n_prompt + n_new ids (prompt first) or NULL + error.
 * use_cache false recomputes the whole window at every step. on_token (may
 * be NULL) sees every new id as it is drawn. The model runs in eval mode
 * and is left in the mode it was in. */
int64_t *cg_charlm_generate(cg_charlm *m, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                            const cg_sample_opts *o, cg_rng *rng, bool use_cache,
                            cg_token_fn on_token, void *ctx);

/* cg_charlm_generate with Hugging Face's logit rules (nn/sample.h
 * cg_logit_rules: --repetition-penalty, --no-repeat-ngram-size) applied to
 * each step's logits over all the ids so far, the prompt's included,
 * before the draw; rules NULL: none (cg_charlm_generate). An n-gram rule
 * that blocks every token fails the step, saying so. */
int64_t *cg_charlm_generate_ex(cg_charlm *m, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                               const cg_sample_opts *o, const cg_logit_rules *rules, cg_rng *rng,
                               bool use_cache, cg_token_fn on_token, void *ctx);

/* cg_charlm_generate_ex, writing the text of the new ids to out (flushed) as
 * they are generated, decoded with tok (models/text/tokenizer.h): the text of
 * the ids since an anchor (the last prompt id at first) is decoded at each
 * id and what is new is written; for BPE an ending that decodes to U+FFFD
 * (a byte piece waiting for the rest of its UTF-8 sequence) is held back
 * until it completes or the sample ends. A write that fails (a reader gone)
 * stops the sample there: NULL + "cannot write the output: Broken pipe"
 * (models/util/files.h cg_output_flush). */
int64_t *cg_charlm_generate_text(cg_charlm *m, const cg_tokenizer *tok, const int64_t *prompt,
                                 int64_t n_prompt, int64_t n_new, const cg_sample_opts *o,
                                 const cg_logit_rules *rules, cg_rng *rng, bool use_cache,
                                 FILE *out);

#ifdef __cplusplus
}
#endif
#endif
