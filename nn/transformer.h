/* cgrad nn: transformer layers and stacks (models.py EncoderLayer,
 * DecoderLayer, Stack, CharLMBlock).
 *
 * Each sublayer is wrapped as in models.py Residual:
 *   pre-norm  (norm_first): x + drop(sub(norm(x)))
 *   post-norm:              norm(x + drop(sub(x)))
 * Parameter names and registration order are those of models.py:
 *   encoder layer: self_attn.{q,k,v,o}_proj.*, ln1.*, ff.fc1.*, ff.fc2.*, ln2.*
 *   decoder layer: self_attn, ln1, cross_attn, ln2, ff, ln3
 *   stack:         layers.{i}.*, then ln_f.* when norm_first
 *   LM block:      ln1, attn, ln2, ff (the decoder-only CharLM block)
 * Dropout (probability cfg.dropout) acts only in train mode
 * (cg_module_train). Forward results are new references; x is [B,T,d]. */
#ifndef CG_NN_TRANSFORMER_H
#define CG_NN_TRANSFORMER_H

#include "../nn/attention.h"
#include "../nn/kv_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t d; /* model width */
    int64_t H; /* heads; d % H == 0 */
    /* key/value heads of every attention (nn/attention.h cg_mha_new_gqa):
     * a divisor of H; 0 (the zero value): H, multi-head attention */
    int64_t kv_heads;
    int64_t d_ff;      /* feed-forward width */
    cg_norm_kind norm; /* layernorm | rmsnorm (eps 1e-5; nn/layers.h's table) */
    cg_act act;        /* a row of nn/layers.h's table: relu, gelu (tanh form), gelu_erf,
                        * silu, swiglu, geglu (gated: the FF gains fc3) */
    bool norm_first;   /* pre-norm (true) or post-norm */
    float dropout;     /* in [0, 1] (1: every value dropped, as nn.Dropout(1.0)) */
    /* dropout on every attention's weights, in [0, 1] (nn/attention.h
     * cg_mha_set_attn_dropout; fairseq's --attention-dropout, nanoGPT's
     * attn_dropout); 0 (the zero value): none, the fused kernel */
    float attn_dropout;
    /* rotary position embeddings of this base on every self-attention's q
     * and k (nn/attention.h cg_mha_set_rope; not on cross-attention, whose
     * keys are another sequence's); 0 (the zero value): none */
    double rope_theta;
    /* PyTorch's bias=False (nanoGPT's bias = False): the attention's and
     * feed-forward's Linears and the LayerNorms have no bias (the weights
     * are drawn as with them). false (the zero value): biases. */
    bool no_bias;
    /* Generator for every dropout mask of the layer/stack (borrowed: must
     * outlive the module). NULL: the module owns one, seeded with 0. */
    cg_rng *dropout_rng;
} cg_tf_config;

/* Checks the fields; false + error naming the bad one. */
bool cg_tf_config_check(const cg_tf_config *cfg);

/* ------------------------------------------------------------- layers */
typedef struct {
    cg_module base; /* "TransformerEncoderLayer" */
    cg_tf_config cfg;
    cg_rng own_rng, *rng; /* dropout generator (rng = cfg.dropout_rng or &own_rng) */
    cg_mha *self_attn;
    cg_norm *ln1;
    cg_ff *ff;
    cg_norm *ln2;
    bool recompute; /* see "Recomputation" below */
} cg_enc_layer;

typedef struct {
    cg_module base; /* "TransformerDecoderLayer" */
    cg_tf_config cfg;
    cg_rng own_rng, *rng;
    cg_mha *self_attn;
    cg_norm *ln1;
    cg_mha *cross_attn;
    cg_norm *ln2;
    cg_ff *ff;
    cg_norm *ln3;
    bool recompute;
} cg_dec_layer;

/* Decoder-only block (models.py CharLMBlock): self-attention + FF. */
typedef struct {
    cg_module base; /* "LMBlock" */
    cg_tf_config cfg;
    cg_rng own_rng, *rng;
    cg_norm *ln1;
    cg_mha *attn;
    cg_norm *ln2;
    cg_ff *ff;
    bool recompute;
} cg_lm_block;

/* Recomputation: a layer whose recompute field is true (false when made)
 * runs its forward under cg_checkpoint (autograd/checkpoint.h) while grad
 * mode is on: it keeps only its inputs (and the masks, copied) for backward,
 * which runs the layer again from the same dropout generator state.
 * Gradients are bit-identical to recompute off; memory per layer drops
 * from every activation to its input, for one more forward per layer in
 * backward. Set it per layer, or for a stack's layers with
 * cg_enc_stack_set_recompute / cg_dec_stack_set_recompute. */

/* init_rng draws the initial weights (NULL: a generator seeded with 0). */
cg_enc_layer *cg_enc_layer_new(const cg_tf_config *cfg, cg_rng *init_rng);
cg_dec_layer *cg_dec_layer_new(const cg_tf_config *cfg, cg_rng *init_rng);
cg_lm_block *cg_lm_block_new(const cg_tf_config *cfg, cg_rng *init_rng);

/* x [B,T,d] -> [B,T,d]. mask: self-attention masks (NULL: none). */
cg_tensor *cg_enc_layer_forward(cg_enc_layer *l, cg_tensor *x, const cg_attn_mask *mask);
/* x [B,T,d], memory [B,S,d] -> [B,T,d]. self_mask for self-attention
 * (typically causal + target padding), cross_mask for attention over
 * memory (typically source padding, key_pad bool [B, S]). */
cg_tensor *cg_dec_layer_forward(cg_dec_layer *l, cg_tensor *x, cg_tensor *memory,
                                const cg_attn_mask *self_mask, const cg_attn_mask *cross_mask);
cg_tensor *cg_lm_block_forward(cg_lm_block *b, cg_tensor *x, const cg_attn_mask *mask);

/* ------------------------------------------------------------- stacks */
/* n layers in a child "layers" (children "0".."n-1"), then "ln_f" when
 * norm_first (applied after the last layer). A stack's layers share its
 * dropout generator. */
typedef struct {
    cg_module base; /* "TransformerEncoder" */
    cg_tf_config cfg;
    cg_rng own_rng;
    int n_layers;
    cg_enc_layer **layers; /* borrowed from the "layers" child */
    cg_norm *ln_f;         /* NULL for post-norm */
} cg_enc_stack;

typedef struct {
    cg_module base; /* "TransformerDecoder" */
    cg_tf_config cfg;
    cg_rng own_rng;
    int n_layers;
    cg_dec_layer **layers;
    cg_norm *ln_f;
} cg_dec_stack;

/* n_layers >= 0 (0 gives just ln_f, or the identity for post-norm). */
cg_enc_stack *cg_enc_stack_new(int n_layers, const cg_tf_config *cfg, cg_rng *init_rng);
cg_dec_stack *cg_dec_stack_new(int n_layers, const cg_tf_config *cfg, cg_rng *init_rng);
cg_tensor *cg_enc_stack_forward(cg_enc_stack *s, cg_tensor *x, const cg_attn_mask *mask);
/* Set recompute on every layer of the stack (no-op on NULL). */
void cg_enc_stack_set_recompute(cg_enc_stack *s, bool on);
void cg_dec_stack_set_recompute(cg_dec_stack *s, bool on);
cg_tensor *cg_dec_stack_forward(cg_dec_stack *s, cg_tensor *x, cg_tensor *memory,
                                const cg_attn_mask *self_mask, const cg_attn_mask *cross_mask);

/* ------------------------------------------------ incremental decoding */
/* The key/value cache (cg_kv_cache, its use: nn/kv_cache.h) for the stacks. */

/* x [B,n,d]: the embeddings of n new positions p .. p+n-1 (p = cg_kv_cache_len(c)) ->
 * [B,n,d] (ln_f applied for pre-norm), attending causally to the cached
 * positions. memory [B,S,d] and mem_pad (bool [B, S], true = padding; may
 * be NULL; copied) are read on the first step only (when c holds no memory yet)
 * and may be NULL after it; a later step given another memory or mask (or
 * the same one written since) is refused, the cache unchanged: the cache
 * answers with the first memory's keys, so a new sentence needs
 * cg_kv_cache_reset first. Eval mode expected (dropout off); no graph is
 * recorded. The cache grows by n. */
cg_tensor *cg_dec_stack_forward_cached(cg_dec_stack *s, cg_tensor *x, cg_tensor *memory,
                                       const cg_tensor *mem_pad, cg_kv_cache *c);
/* The same for n_blocks LM blocks applied in turn (a decoder-only model). */
cg_tensor *cg_lm_blocks_forward_cached(cg_lm_block *const *blocks, int n_blocks, cg_tensor *x,
                                       cg_kv_cache *c);

#ifdef __cplusplus
}
#endif
#endif
