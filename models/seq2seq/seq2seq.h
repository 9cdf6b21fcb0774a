/* cgrad zoo: the encoder-decoder character model (models.py Seq2Seq).
 *
 *   encode:  m = encoder(drop(emb[src] * sqrt(d) + pe[:S]))     src [B,S]
 *            self-attention keys masked where src == PAD
 *   decode:  h = decoder(drop(emb[tgt_in] * sqrt(d) + pe[:T]), m)
 *            self-attention: causal + keys masked where tgt_in == PAD;
 *            cross-attention: keys masked where src == PAD
 *            logits = h @ emb.weight^T                          [B,T,V]
 *   loss:    label-smoothed cross-entropy over targets != PAD
 *            (per position (1-ls) * -log p[y] + ls * mean_j -log p[j]).
 *
 * One vocabulary and one embedding table emb.weight serve the encoder
 * input, the decoder input and the tied output head. PAD=0, BOS=1, EOS=2.
 *
 * Parameters, in models.py named_parameters() order (the safetensors keys):
 *   emb.weight [V,d]
 *   encoder.layers.{i}.{self_attn.{q,k,v,o}_proj, ln1, ff.fc1, ff.fc2, ln2}.*
 *   encoder.ln_f.*                                             (pre-norm only)
 *   decoder.layers.{i}.{self_attn.*, ln1, cross_attn.*, ln2, ff.*, ln3}.*
 *   decoder.ln_f.*                                             (pre-norm only)
 *
 * The model is a cg_module (nn/module.h): save/load/params/train mode work on
 * CG_MODULE(model). Forward results are new references; errors give
 * NULL/false and a message (core/error.h), never an exit. */
#ifndef CG_MODELS_SEQ2SEQ_H
#define CG_MODELS_SEQ2SEQ_H

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_PAD 0
#define CG_BOS 1
#define CG_EOS 2
#define CG_UNK 3 /* the zoo's tokenizers' unknown token (models/text/tokenizer.h) */

typedef struct {
    int64_t vocab; /* V, > 3 (PAD, BOS, EOS are 0, 1, 2) */
    int64_t d;     /* d % H == 0 */
    int64_t H;
    int64_t kv_heads;   /* key/value heads, a divisor of H (grouped-query); 0: H */
    int64_t enc_layers; /* >= 0 */
    int64_t dec_layers; /* >= 1: its layers are what reads the source */
    int64_t d_ff;
    int64_t max_len; /* longest source or target sequence */
    cg_norm_kind norm;
    cg_act act;
    bool norm_first;
    bool bias;          /* biases in every Linear and LayerNorm (PyTorch's bias; true) */
    float dropout;      /* in [0, 1] */
    float attn_dropout; /* in [0, 1]: on the attention weights (--attention-dropout; 0) */
    /* positions: sinusoidal (the default), rope (rotary embeddings of
     * base rope_theta, default 10000, in the encoder's and decoder's
     * self-attentions; nothing added to the embeddings) or learned (a
     * table [max_len, d] for each side, enc_pos_emb and dec_pos_emb,
     * added to the embeddings: fairseq's --encoder-learned-pos and
     * --decoder-learned-pos, the paper's Table 3 row E) */
    cg_pos_kind pos_enc;
    int64_t rope_theta;
    cg_emb_scale emb_scale; /* sqrt_d (the paper's, the default) or none */
    float label_smoothing;  /* in [0, 1] */
    /* word dropout in [0, 1]: in training, each source and target token's
     * embedding is zeroed with this probability (the others scaled by
     * 1/(1-p), as dropout), before the positions are added (Sennrich and
     * Zhang 2019, for small data); 0 draws nothing */
    float word_dropout;
    /* the training loss (cg_seq2seq_forward_loss): 0 = logits, then
     * cross-entropy; -1 (CG_LCE_EXACT) = the head fused with the loss in
     * chunks on its product's k blocks, the same bits; > 0 = fused in
     * chunks of this many rows, bits of their own (models/train/options.h
     * cg_train_loss_chunk) */
    int64_t loss_chunk;
} cg_seq2seq_config;

/* models.py Seq2SeqConfig defaults: V 96, d 128, H 4, 2+2 layers, d_ff 512,
 * max_len 256, layernorm, relu, post-norm, dropout 0, label smoothing 0.1. */
cg_seq2seq_config cg_seq2seq_config_default(void);
bool cg_seq2seq_config_check(const cg_seq2seq_config *c);
/* JSON object with the models.py field names; missing fields keep their
 * defaults, other keys are ignored. Checked. False + error. */
bool cg_seq2seq_config_from_json(const char *json, cg_seq2seq_config *out);
/* malloc'd JSON object string (caller frees), or NULL + error. */
char *cg_seq2seq_config_to_json(const cg_seq2seq_config *c);
/* Do two checkpoints' "config" JSON texts describe one architecture (every
 * field but the training recipe's dropout and label smoothing)? False + error
 * naming the first field that differs, or the bad config. */
bool cg_seq2seq_config_same_arch(const char *json_a, const char *json_b);

typedef struct {
    cg_module base; /* type "Seq2Seq" */
    cg_seq2seq_config cfg;
    cg_embed *emb;         /* child "emb" (shared, tied head) */
    cg_enc_stack *encoder; /* child "encoder" */
    cg_dec_stack *decoder; /* child "decoder" */
    cg_tensor *pe;         /* [max_len, d], owned (sinusoidal; else NULL) */
    cg_embed *enc_pos_emb; /* child "enc_pos_emb": learned source positions (else NULL) */
    cg_embed *dec_pos_emb; /* child "dec_pos_emb": learned target positions (else NULL) */
    cg_rng dropout_rng;
} cg_seq2seq;

/* Weights ~ N(0, 0.02), biases 0, norm weights 1 from a generator seeded
 * with seed. Train mode on. NULL + error on a bad config. */
cg_seq2seq *cg_seq2seq_new(const cg_seq2seq_config *cfg, uint64_t seed);
/* The same without drawing (nn/init.h cg_init_skip): the Linear and
 * Embedding weights are left at zero (norm weights 1, biases 0), for a
 * checkpoint to fill; the loaders use it. */
cg_seq2seq *cg_seq2seq_new_skip_init(const cg_seq2seq_config *cfg, uint64_t seed);
void cg_seq2seq_free(cg_seq2seq *m); /* NULL is a no-op */
/* The table added to the source's (target false) or the target's
 * embeddings: the sinusoidal one (both sides), the side's learned one's
 * weight (a parameter), or NULL (rope, or m NULL); borrowed. */
cg_tensor *cg_seq2seq_positions(const cg_seq2seq *m, bool target);
/* Recompute every encoder and decoder layer's activations in backward
 * (nn/transformer.h "Recomputation"; --recompute): the same gradients. */
void cg_seq2seq_set_recompute(cg_seq2seq *m, bool on);

/* The encoder's output for one batch, kept for any number of decode calls. */
typedef struct {
    cg_tensor *memory;  /* [B,S,d], owned (one reference) */
    cg_tensor *src_pad; /* bool [B, S], true where src == PAD; owned (one reference) */
    int64_t B, S;
} cg_seq2seq_memory;

/* src: B*S ids, row-major [B,S]; every row needs at least one non-PAD token.
 * On success fills *out (release with cg_seq2seq_memory_free). Errors:
 * sizes < 1, S > max_len, an id outside [0, V), an all-PAD row. */
bool cg_seq2seq_encode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                       cg_seq2seq_memory *out);
/* Releases the memory tensor and mask; *mem is zeroed. NULL is a no-op. */
void cg_seq2seq_memory_free(cg_seq2seq_memory *mem);
/* A new memory made of batch rows rows[0..n) of mem (repeats allowed), e.g.
 * to give each beam its own copy or to reorder beams. The tensor rows keep
 * their gradient path. False + error on a bad row. */
bool cg_seq2seq_memory_select(const cg_seq2seq_memory *mem, const int64_t *rows, int64_t n,
                              cg_seq2seq_memory *out);

/* tgt_in: B*T ids [B,T] (B must equal mem->B); row b must not start with
 * PAD (a query with every key masked has no attention distribution).
 * Returns logits [B,T,V]. Errors: T < 1, T > max_len, ids out of range. */
cg_tensor *cg_seq2seq_decode(cg_seq2seq *m, const int64_t *tgt_in, int64_t B, int64_t T,
                             const cg_seq2seq_memory *mem);
/* Incremental decoding with nn's key/value cache (nn/transformer.h): an
 * empty cache for the decoder, and one step: ids [B] (one new token per
 * row, BOS on the first step) at position cg_kv_cache_len(c) -> logits [B,1,V] equal
 * to the last position of cg_seq2seq_decode over the whole prefix (up to
 * float rounding). mem is read on the first step only (its rows are the
 * cache's rows; the cross-attention keys are computed from it then) and
 * may be NULL after it. Reorder the cache (cg_kv_cache_reorder) when the
 * rows change. No graph is recorded; put the model in eval mode. */
cg_kv_cache *cg_seq2seq_kv_cache_new(const cg_seq2seq *m);
cg_tensor *cg_seq2seq_decode_step(cg_seq2seq *m, const int64_t *ids, int64_t B,
                                  const cg_seq2seq_memory *mem, cg_kv_cache *c);
/* encode + decode: logits [B,T,V]. */
cg_tensor *cg_seq2seq_forward(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                              const int64_t *tgt_in, int64_t T);
/* Label-smoothed cross-entropy of logits [B,T,V] against numel/V targets,
 * PAD targets ignored (all PAD gives NaN, as PyTorch). Scalar. */
cg_tensor *cg_seq2seq_loss(cg_seq2seq *m, cg_tensor *logits, const int64_t *tgt_out);
/* The training loss: cg_seq2seq_loss of cg_seq2seq_forward's logits, or,
 * when cfg.loss_chunk != 0, the head fused with the loss
 * (cg_linear_cross_entropy), which never keeps the [B*T, V] logits.
 * grad_scale: the gradient the backward will bring to the loss (1 when it
 * starts there), given to the fused head (cg_linear_cross_entropy), whose
 * forward then computes the gradients once for it. */
cg_tensor *cg_seq2seq_forward_loss(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                                   const int64_t *tgt_in, int64_t T, const int64_t *tgt_out,
                                   float grad_scale);

#ifdef __cplusplus
}
#endif
#endif
