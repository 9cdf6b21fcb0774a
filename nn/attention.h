/* cgrad nn: multi-head attention (models.py MultiHeadAttention).
 *
 * Per head: softmax(q @ k^T / sqrt(d_head), masked scores = -inf) @ v;
 * heads concatenated, then o_proj. Masks say where a query may NOT attend:
 *   - causal: key j is masked for query i when j > i (torch.triu(ones, 1));
 *   - key_pad: a bool tensor [B, Tk], true = padding key (PyTorch's
 *     key_padding_mask);
 *   - mask: PyTorch's attn_mask: bool (true = masked) or float of any
 *     float dtype (added to the scores: -inf masks, a large negative
 *     such as -1e9 only weighs down), of shape [Tq, Tk], [B, Tq, Tk]
 *     (unlike nn.MultiheadAttention's [B*H, Tq, Tk], and unlike the
 *     right-aligned broadcasting of later PyTorch's
 *     F.scaled_dot_product_attention: a per-head [H, Tq, Tk] bias is
 *     passed as [1, H, Tq, Tk]) or [B, H, Tq, Tk], any dim of these 1 to
 *     broadcast. A float mask that requires grad (a learnable
 *     relative-position or ALiBi bias, or one computed from such
 *     parameters) gets its gradient, as PyTorch's does, also through the
 *     transformer layers (with recomputation too).
 * They combine by "or" (a float mask gets -inf where another masks). A
 * query whose keys are all masked (-inf) gets NaN weights and a NaN
 * output, as in PyTorch: every sequence needs at least one key it may
 * attend to (left padding under a causal mask has none for its first
 * queries). Its gradients: with a mask tensor PyTorch's masked_fill
 * ones (the query's dq 0, dk finite, dv NaN at every key); on the fused
 * path (causal and key_pad alone) NaN in the query's dq and in the dk and
 * dv of the keys it masks (in bf16 dv at every key). A NaN or inf in
 * k at a key masked by causal, key_pad or a bool mask never reaches the
 * output (the score is replaced, as masked_fill does; nn.MultiheadAttention
 * of PyTorch 1.13 adds its masks and lets it through); through a float
 * mask it is added (NaN + -inf = NaN), as PyTorch's; a NaN or inf in v at
 * a masked key reaches the output (0 * NaN in the product with v) in both.
 * A mask of another dtype or shape is refused in one line naming it,
 * never read past its end. There is no dropout on the attention weights
 * (nn.MultiheadAttention's dropout=): dropout is the layers' own, on each
 * sublayer's output (nn/transformer.h).
 *
 * Ownership as in nn/layers.h: forward results are new references. */
#ifndef CG_NN_ATTENTION_H
#define CG_NN_ATTENTION_H

#include "../nn/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The masks of one attention call, bundled (used by the transformer
 * layers). All fields may be zero/NULL; a NULL cg_attn_mask* means none. */
typedef struct {
    bool causal;
    const cg_tensor *key_pad; /* bool [B, Tk], true = padding; borrowed */
    const cg_tensor *mask;    /* bool (true = masked) or float (added); borrowed */
} cg_attn_mask;

/* The combined mask broadcastable to [B,H,Tq,Tk] (new reference): bool
 * (true = masked) when mask is NULL or bool, else float (mask's values,
 * -inf where causal or key_pad masks); *out = NULL when nothing is masked.
 * Made by graph ops: a float mask that requires grad (a learnable bias)
 * gets its gradient through it (none where another mask masks). False +
 * error on a key_pad or mask of another dtype or shape. */
bool cg_attention_mask(int64_t B, int64_t H, int64_t Tq, int64_t Tk, bool causal,
                       const cg_tensor *key_pad, const cg_tensor *mask, cg_tensor **out);

/* Scaled dot-product attention on split heads: q [B,H,Tq,dh],
 * k and v [B,H,Tk,dh] (any strides), mask as cg_attn_mask's (may be NULL;
 * note: true = masked, the opposite of F.scaled_dot_product_attention's
 * bool mask and the same as nn.MultiheadAttention's). q, k and v float32
 * or bfloat16 (float16 refused), with a mask as without one: the result
 * float32, as cg_attention's. Returns [B,H,Tq,dh]; *weights_out (if not NULL) receives the
 * softmax weights [B,H,Tq,Tk], detached (a new reference). This is the
 * boundary a fused attention kernel can replace. */
cg_tensor *cg_scaled_dot_product_attention(cg_tensor *q, cg_tensor *k, cg_tensor *v,
                                           const cg_tensor *mask, cg_tensor **weights_out);
/* The same with dropout on the weights (F.scaled_dot_product_attention's
 * dropout_p, applied whenever dropout_p > 0: the caller gives 0 outside
 * training): each weight zeroed with probability dropout_p, the others
 * scaled by 1 / (1 - dropout_p), the mask drawn from rng as cg_dropout
 * draws (autograd/ops.h); then @ v. With dropout_p > 0 it takes the graph
 * path (scores, mask, softmax, dropout, @ v: the [B,H,Tq,Tk] weights are
 * kept for backward, as PyTorch's CPU math path does with dropout), mask
 * NULL included. *weights_out gets the weights before the dropout (the
 * attention's distribution, for heatmaps; PyTorch's need_weights returns
 * them after it). dropout_p 0: cg_scaled_dot_product_attention, rng
 * unused. False + error for dropout_p outside [0, 1] or rng NULL with
 * dropout_p > 0. */
cg_tensor *cg_scaled_dot_product_attention_ex(cg_tensor *q, cg_tensor *k, cg_tensor *v,
                                              const cg_tensor *mask, float dropout_p, cg_rng *rng,
                                              cg_tensor **weights_out);

typedef struct {
    cg_module base; /* type "MultiHeadAttention" */
    int64_t d, H, d_head;
    /* key/value heads: H, or (grouped-query attention, cg_mha_new_gqa) a
     * divisor of H, each read by H / H_kv query heads (1: multi-query) */
    int64_t H_kv;
    cg_linear *q_proj, *k_proj, *v_proj, *o_proj; /* [d, d] weights with bias; k_proj's
                                                   * and v_proj's [H_kv d_head, d] */
    /* When keep_weights is set, each forward replaces `weights` with that
     * call's attention weights [B,H,Tq,Tk] (detached, owned by the module,
     * released by cg_module_free). For heatmaps. Each query's row sums to
     * 1 over its unmasked keys (in bf16 precision, where the fused kernel
     * keeps them, up to 256 keys, 128 on AMX: their values rounded to
     * bf16, as the product with v reads them) and is 0 at masked ones
     * (a query with every key masked: NaN at all with a mask tensor, as
     * PyTorch's; on the fused path NaN at its padded keys, 0 at its
     * causal ones). These are PyTorch's
     * need_weights=True, average_attn_weights=False weights (in eval
     * mode: PyTorch's training mode returns them after its attention
     * dropout); its default, averaged over the heads, is
     * cg_mean(weights, 1, (int[]){1}, false). */
    bool keep_weights;
    cg_tensor *weights;
    /* Optional transform of q and k after the head split, before the
     * scores (e.g. rotary position embeddings: examples/rope.c): called
     * with q [B,H,Tq,dh] (is_key false) and k [B,H,Tk,dh] (is_key true),
     * returns a new reference of the same shape built from differentiable
     * ops, or NULL + error. NULL (the default): no transform, the same
     * computation as without the field. cg_mha_forward_cached refuses a
     * module with a hook (it would not know the cached keys' positions). */
    cg_tensor *(*qk_hook)(void *ctx, cg_tensor *x, bool is_key);
    void *qk_hook_ctx;
    /* Dropout on the attention weights (nn.MultiheadAttention's dropout=,
     * fairseq's --attention-dropout, nanoGPT's attn_dropout), set with
     * cg_mha_set_attn_dropout: in training mode with attn_dropout > 0,
     * cg_mha_forward and the residual form take
     * cg_scaled_dot_product_attention_ex's graph path, drawing from
     * *attn_dropout_rng (borrowed). 0 (the default): none, the fused
     * kernel. The cached form (decoding, without gradients) takes none. */
    float attn_dropout;
    cg_rng *attn_dropout_rng;
    /* Rotary position embeddings (autograd/ops.h cg_rope; RoFormer in the
     * rotate-half pairing of Hugging Face's LLaMA) on q and k after the
     * head split, before qk_hook, set with cg_mha_set_rope: base theta,
     * query and key t at position t (self-attention: both from one
     * sequence), and in the cached form the new ones at the cache's length
     * on (the cache keeps rotated keys). 0 (the default): none. */
    double rope_theta;
} cg_mha;

/* d % H must be 0. The projections have biases. */
cg_mha *cg_mha_new(int64_t d, int64_t H, cg_rng *rng);
/* bias false: projections without biases (nn.MultiheadAttention's
 * bias=False); their weights are drawn as cg_mha_new draws them. */
cg_mha *cg_mha_new_bias(int64_t d, int64_t H, bool bias, cg_rng *rng);
/* Grouped-query attention (Ainslie et al. 2023; LLaMA 2's
 * num_key_value_heads): H_kv key/value heads (a divisor of H; 1:
 * multi-query attention, Shazeer 2019), query head h reading head
 * h / (H / H_kv); k_proj and v_proj map d -> H_kv * d_head. The weights
 * are drawn in cg_mha_new_bias's order (H_kv = H: the same module). The
 * fused kernel reads the shared heads in place and sums their gradients
 * over each group; the key/value cache keeps H_kv heads. */
cg_mha *cg_mha_new_gqa(int64_t d, int64_t H, int64_t H_kv, bool bias, cg_rng *rng);
/* Attention dropout p in [0, 1] drawn from rng (borrowed: it must outlive
 * m; may be NULL when p is 0). False + error otherwise, m unchanged. */
bool cg_mha_set_attn_dropout(cg_mha *m, float p, cg_rng *rng);
/* Rotary embeddings of base theta (> 1, finite; 10000 in RoFormer and
 * LLaMA), or none (0). False + error otherwise, m unchanged. */
bool cg_mha_set_rope(cg_mha *m, double theta);
/* xq [B,Tq,d], xkv [B,Tk,d] (pass xq twice for self-attention) -> [B,Tq,d].
 * key_pad and mask may be NULL; *weights_out (if not NULL) receives the
 * attention weights [B,H,Tq,Tk], detached (new reference). */
cg_tensor *cg_mha_forward(cg_mha *m, cg_tensor *xq, cg_tensor *xkv, bool causal,
                          const cg_tensor *key_pad, const cg_tensor *mask, cg_tensor **weights_out);
/* Same with the masks bundled (mask may be NULL). */
cg_tensor *cg_mha_forward_masked(cg_mha *m, cg_tensor *xq, cg_tensor *xkv, const cg_attn_mask *mask,
                                 cg_tensor **weights_out);
/* The same and r (nn/layers.h; NULL: nothing more), res + dropout of the
 * output, made as o_proj writes it (cg_linear_forward_residual); with
 * forward hooks on m, which see its own output, after it. */
cg_tensor *cg_mha_forward_residual(cg_mha *m, cg_tensor *xq, cg_tensor *xkv,
                                   const cg_attn_mask *mask, cg_tensor **weights_out,
                                   const cg_residual *r);

/* ------------------------------------------- incremental decoding */
/* The keys and values one attention module has seen, for decoding a token
 * at a time: [B, H, cap, d_head] buffers (owned) of which positions
 * [0, len) are filled. The buffers are made by the first append and double
 * when full, so a zero-initialised struct is an empty cache:
 *     cg_mha_kv kv = {0};
 * Self-attention appends the new positions' keys and values at every step;
 * cross-attention computes them once from the encoder's memory. */
typedef struct {
    cg_tensor *k, *v;
    int64_t len;
} cg_mha_kv;

/* Forget the positions (len = 0) and keep the buffers for reuse. */
void cg_mha_kv_clear(cg_mha_kv *kv);
/* Release the buffers; *kv becomes an empty cache. NULL is a no-op. */
void cg_mha_kv_free(cg_mha_kv *kv);
/* Keep batch rows rows (int64 [n], n >= 1; repeats allowed: row i of the
 * result is old row rows[i]), e.g. the parents of the surviving beam
 * hypotheses, or the sentences still being decoded. False + error on a bad
 * row, dtype or shape. */
bool cg_mha_kv_reorder(cg_mha_kv *kv, const cg_tensor *rows);

/* Attention of new queries xq [B,n,d] over the cache, without recording a
 * graph. When xkv ([B,m,d]) is not NULL its keys and values are appended
 * first (self-attention: xkv = xq; cross-attention: xkv = the memory, on
 * the first step only, then NULL). causal: new query i, at position
 * kv->len + i before the append, sees keys [0, kv->len + i]. key_pad: bool
 * [B, Tk] over all Tk cached keys (after the append), or NULL. Returns
 * [B,n,d] equal to cg_mha_forward over the whole sequence up to float
 * rounding. */
cg_tensor *cg_mha_forward_cached(cg_mha *m, cg_tensor *xq, cg_tensor *xkv, bool causal,
                                 const cg_tensor *key_pad, cg_mha_kv *kv);

/* Self-attention for a block of your own, one code path for training and
 * decoding: kv NULL is cg_mha_forward(m, x, x, causal, NULL, NULL, NULL)
 * (a graph is recorded); otherwise cg_mha_forward_cached(m, x, x, causal,
 * NULL, kv), x holding only the new positions. kv is typically
 * cg_kv_cache_layer(cache, i) (nn/kv_cache.h). */
cg_tensor *cg_mha_self(cg_mha *m, cg_tensor *x, bool causal, cg_mha_kv *kv);

/* Set keep_weights on every MultiHeadAttention in a module tree (off also
 * drops the kept weights). */
void cg_module_keep_attention_weights(cg_module *m, bool on);

#ifdef __cplusplus
}
#endif
#endif
