/* cgrad zoo: the decoder-only character language model (models.py CharLM).
 *
 *   h      = drop(tok_emb[x] * sqrt(d) + pe[:T])          x [B,T] int64
 *                                  (pos_enc rope: no pe; q and k rotated instead)
 *   h      = blocks.i(h) for i < layers                   causal self-attention
 *   h      = ln_f(h)                                      pre-norm only
 *   logits = h @ tok_emb.weight^T                         tied head, [B,T,V]
 *   loss   = mean cross-entropy(logits, targets)
 *
 * Parameters, in models.py named_parameters() order (the safetensors keys):
 *   tok_emb.weight [V,d]
 *   blocks.{i}.ln1.{weight,bias}                       (bias only for layernorm)
 *   blocks.{i}.attn.{q,k,v,o}_proj.{weight,bias}
 *   blocks.{i}.ln2.{weight,bias}
 *   blocks.{i}.ff.fc1.{weight,bias}, blocks.{i}.ff.fc2.{weight,bias}
 *   ln_f.{weight,bias}                                 (pre-norm only)
 *
 * The model is a cg_module (nn/module.h): cg_module_params, cg_module_save,
 * cg_module_load, cg_module_train (dropout on/off) all work on
 * CG_MODULE(model). Free it with cg_charlm_free (or cg_module_free).
 * Forward results are new references (cg_release them); errors give NULL and
 * a message (core/error.h), never an exit. */
#ifndef CG_MODELS_CHARLM_H
#define CG_MODELS_CHARLM_H

#include "models/data/data.h"
#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t vocab;      /* V */
    int64_t d;          /* model width; d % H == 0 */
    int64_t H;          /* attention heads */
    int64_t kv_heads;   /* key/value heads, a divisor of H (grouped-query); 0: H */
    int64_t layers;     /* >= 0 */
    int64_t d_ff;       /* feed-forward width */
    int64_t max_len;    /* longest sequence (positions table) */
    cg_norm_kind norm;  /* layernorm | rmsnorm (eps 1e-5; nn/layers.h's table) */
    cg_act act;         /* a row of nn/layers.h's table: relu, gelu (tanh form), gelu_erf,
                        * silu, swiglu, geglu (gated: the FF gains fc3, d_ff as given) */
    bool norm_first;    /* pre-norm (true) or post-norm */
    bool bias;          /* biases in every Linear and LayerNorm (nanoGPT's bias; true) */
    float dropout;      /* in [0, 1]; after the embedding and each sublayer */
    float attn_dropout; /* in [0, 1]; on the attention weights (nanoGPT's attn_dropout; 0) */
    /* positions: sinusoidal (models.py's, the default), rope (rotary
     * embeddings of base rope_theta, default 10000, in every attention;
     * nothing added to the embeddings) or learned (a table pos_emb.weight
     * [max_len, d] added, drawn N(0, 0.02): GPT-2's and nanoGPT's wpe) */
    cg_pos_kind pos_enc;
    int64_t rope_theta;
    cg_emb_scale emb_scale; /* sqrt_d (models.py's, the default) or none (nanoGPT's) */
    /* the training loss (cg_charlm_forward_loss): 0 = logits, then
     * cross-entropy; -1 (CG_LCE_EXACT) = the head fused with the loss in
     * chunks on its product's k blocks, the same bits; > 0 = fused in
     * chunks of this many rows, bits of their own (models/train/options.h
     * cg_train_loss_chunk) */
    int64_t loss_chunk;
} cg_charlm_config;

/* models.py CharLMConfig defaults: V 65, d 128, H 4, 4 layers, d_ff 512,
 * max_len 256, layernorm, gelu, pre-norm, dropout 0. */
cg_charlm_config cg_charlm_config_default(void);
/* False + error naming the bad field (e.g. "d=30 is not divisible by H=4"). */
bool cg_charlm_config_check(const cg_charlm_config *c);
/* Parse a JSON object with the models.py field names ("vocab", "d", "H",
 * "layers", "d_ff", "max_len", "norm", "act", "norm_first", "bias", "dropout");
 * other keys are ignored, missing fields keep their defaults. The result is
 * checked. False + error on malformed JSON or a field of the wrong type. */
bool cg_charlm_config_from_json(const char *json, cg_charlm_config *out);
/* The config as a JSON object string (malloc'd; caller frees), or NULL. */
char *cg_charlm_config_to_json(const cg_charlm_config *c);
/* Do two checkpoints' "config" JSON texts describe one architecture (every
 * field but the training recipe's dropout)? False + error
 * naming the first field that differs, or the bad config. */
bool cg_charlm_config_same_arch(const char *json_a, const char *json_b);

typedef struct {
    cg_module base; /* type "CharLM" */
    cg_charlm_config cfg;
    cg_embed *tok_emb;   /* child "tok_emb" */
    cg_module *blocks;   /* child "blocks" with children "0".."layers-1" */
    cg_lm_block **block; /* borrowed pointers to the blocks */
    cg_norm *ln_f;       /* child "ln_f", NULL for post-norm */
    cg_tensor *pe;       /* [max_len, d] sinusoidal positions, owned (else NULL) */
    cg_embed *pos_emb;   /* child "pos_emb": learned positions (else NULL) */
    cg_rng dropout_rng;  /* every dropout mask of the model */
} cg_charlm;

/* A new model: Linear/Embedding weights ~ N(0, 0.02), biases 0, norm
 * weights 1, drawn from a generator seeded with seed (the dropout masks use
 * a generator derived from the same seed). Train mode is on. NULL + error
 * on a bad config. */
cg_charlm *cg_charlm_new(const cg_charlm_config *cfg, uint64_t seed);
/* GPT-2's initialisation as nanoGPT makes it: the residual projections
 * (every block's attn.o_proj.weight and ff.fc2.weight, nanoGPT's
 * c_proj.weight) scaled by 1/sqrt(2 layers), the N(0, 0.02) draw made
 * N(0, 0.02/sqrt(2 layers)). For a model just made by cg_charlm_new. */
void cg_charlm_gpt2_init(cg_charlm *m);
/* The table added to the embeddings: the sinusoidal one, the learned
 * one's weight (a parameter), or NULL (rope); borrowed. */
cg_tensor *cg_charlm_positions(const cg_charlm *m);
/* The same without drawing (nn/init.h cg_init_skip): the Linear and
 * Embedding weights are left at zero (norm weights 1, biases 0), for a
 * checkpoint to fill; the loaders use it. */
cg_charlm *cg_charlm_new_skip_init(const cg_charlm_config *cfg, uint64_t seed);
void cg_charlm_free(cg_charlm *m); /* NULL is a no-op */
/* Recompute every block's activations in backward (nn/transformer.h
 * "Recomputation"; --recompute): the same gradients, bit for bit, with
 * only the blocks' inputs kept between forward and backward. */
void cg_charlm_set_recompute(cg_charlm *m, bool on);

/* ids: B*T token ids, row-major [B,T]. Returns logits [B,T,V] (new
 * reference). Errors: B or T < 1, T > max_len, an id outside [0, V). */
cg_tensor *cg_charlm_forward(cg_charlm *m, const int64_t *ids, int64_t B, int64_t T);
/* Mean cross-entropy of logits [B,T,V] (or [N,V]) against numel/V targets
 * (every target in [0, V)). Returns a scalar (new reference). */
cg_tensor *cg_charlm_loss(cg_charlm *m, cg_tensor *logits, const int64_t *targets);
/* The training loss of ids [B,T] against targets [B,T] (ignore_index -100)
 * with label smoothing ls: cg_cross_entropy of cg_charlm_forward's logits,
 * or, when cfg.loss_chunk != 0, the head fused with the loss
 * (cg_linear_cross_entropy), which never keeps the [B*T, V] logits.
 * grad_scale: the gradient the backward will bring to the loss (1 when it
 * starts there), given to the fused head (cg_linear_cross_entropy), whose
 * forward then computes the gradients once for it. */
cg_tensor *cg_charlm_forward_loss(cg_charlm *m, const int64_t *ids, int64_t B, int64_t T,
                                  const int64_t *targets, float ls, float grad_scale);

/* ------------------------------------------------------------ evaluation
 * The reference's (shared/reference/train_charlm.py) two validation
 * figures, computed in eval mode without gradients (the mode is restored):
 *  - sampled: the mean loss of n_batches batches of B windows of T drawn
 *    (cg_get_batch) from a generator seeded `seed` (its estimate_loss);
 *  - full: the mean loss over all (s.n - 1) / T consecutive windows of
 *    the split (its full_split_loss); *nwin gets their number.
 * False + error (a split shorter than one window of T + 1 for the full
 * loss). The sampled loss asks stop (may be NULL; the trainer gives its
 * cg_train_interrupted) before each batch, and fails with "interrupted"
 * when it says to stop. */
bool cg_charlm_sampled_loss(cg_charlm *m, cg_split_view s, int64_t B, int64_t T, int n_batches,
                            uint64_t seed, bool (*stop)(void), double *out);
bool cg_charlm_full_loss(cg_charlm *m, cg_split_view s, int64_t T, double *out, int64_t *nwin);
/* The mean loss over windows of T advancing by stride (1 <= stride <= T),
 * as Hugging Face's sliding-window perplexity: the first window scores its
 * T targets, each next one, stride further, only its last stride (those no
 * window scored before), each then seen after at least T - stride tokens
 * of context. *nwin windows ((s.n - 1 - T) / stride + 1; the targets after
 * the last one are not scored), *scored targets. stride == T is
 * cg_charlm_full_loss, bit for bit. False + error (stride out of range, a
 * split shorter than one window of T + 1). */
bool cg_charlm_strided_loss(cg_charlm *m, cg_split_view s, int64_t T, int64_t stride, double *out,
                            int64_t *nwin, int64_t *scored);

#ifdef __cplusplus
}
#endif
#endif
