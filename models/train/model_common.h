/* cgrad zoo, train layer: what the two models (charlm, seq2seq) do alike
 * and spell once: the transformer config and dropout stream a model builds
 * its layers with, the check of a [B, L] batch of token ids, the scaled
 * embedding with its positions, and the loss over a batch's logits.
 *
 * Errors: false/NULL + cg_set_error (core/error.h), one line. */
#ifndef CG_MODELS_TRAIN_MODEL_COMMON_H
#define CG_MODELS_TRAIN_MODEL_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layers' config of a zoo model config c (a pointer to a struct with
 * the fields of models/util/config_json.h's CG_CONFIG_ZOO_WIDTH and
 * CG_CONFIG_ZOO_BLOCK, and dropout), its dropout drawn from *rng. */
#define CG_MODEL_TF_CONFIG(c, rng)                                                             \
    ((cg_tf_config){.d = (c)->d,                                                               \
                    .H = (c)->H,                                                               \
                    .kv_heads = (c)->kv_heads,                                                 \
                    .d_ff = (c)->d_ff,                                                         \
                    .norm = (c)->norm,                                                         \
                    .act = (c)->act,                                                           \
                    .norm_first = (c)->norm_first,                                             \
                    .dropout = (c)->dropout,                                                   \
                    .attn_dropout = (c)->attn_dropout,                                         \
                    .rope_theta = (c)->pos_enc == CG_POS_ROPE ? (double)(c)->rope_theta : 0.0, \
                    .no_bias = !(c)->bias,                                                     \
                    .dropout_rng = (rng)})
/* A zoo model's config c (as above) as --init-from compares it
 * (models/train/options.h cg_train_arch), shape given: the one model's
 * own fields (charlm's layers and T, seq2seq's enc_layers, dec_layers and
 * max_len). */
#define CG_MODEL_TRAIN_ARCH(c, ...)                                      \
    ((cg_train_arch){.shape = __VA_ARGS__,                               \
                     .norm = (c)->norm,                                  \
                     .act = (c)->act,                                    \
                     .norm_first = (c)->norm_first,                      \
                     .bias = (c)->bias,                                  \
                     .pos = (c)->pos_enc,                                \
                     .kv_heads = (c)->kv_heads ? (c)->kv_heads : (c)->H, \
                     .emb_scale = (c)->emb_scale,                        \
                     .rope_theta = (c)->rope_theta})
/* A model's own norm (charlm's ln_f): kind over d, with a bias unless
 * bias is false (the layers' own: nn/transformer.h no_bias). */
cg_norm *cg_model_norm(cg_norm_kind kind, int64_t d, bool bias);

/* The dropout stream of a model built with seed (apart from the stream of
 * its initial weights, which is the seed's own). */
cg_rng cg_model_dropout_rng(uint64_t seed);

/* A [B, L] batch of ids: not NULL, B and L at least 1, L at most max_len,
 * every id in [0, vocab). False + "<model> <op>: <what> length 17 exceeds
 * max_len 16" (and the like) otherwise. */
bool cg_model_check_ids(const char *model, const char *op, const char *what, const int64_t *ids,
                        int64_t B, int64_t L, int64_t max_len, int64_t vocab);

/* dropout(e * scale + pe[pos : pos + L]) for the embeddings e [B, L, d]
 * (scale 1: e itself, no pass)
 * (models.py's embedding scale and positions; pe NULL: none added, the
 * rotary positions' case; pe a parameter, learned positions: its rows get
 * their gradient); a new tensor of the caller's scope. */
/* The embeddings' scale: (float)sqrt((double)d), or 1 (none) */
float cg_model_emb_scale(cg_emb_scale kind, int64_t d);
cg_tensor *cg_model_embed_scaled(cg_tensor *e, cg_tensor *pe, int64_t pos, int64_t L, float scale,
                                 float dropout, cg_rng *rng, bool training);

/* The mean cross-entropy of logits [..., vocab] over targets (logits'
 * shape without its last dimension), ignore_index and label smoothing ls
 * as cg_cross_entropy's; have_model false (a NULL model) or NULL targets:
 * NULL + "<model> loss: NULL model" or "... NULL targets"; a NULL logits
 * (a failed forward): NULL, its error kept. */
cg_tensor *cg_model_logits_loss(const char *model, bool have_model, int64_t vocab,
                                cg_tensor *logits, const int64_t *targets, int64_t ignore_index,
                                float ls);

#ifdef __cplusplus
}
#endif
#endif
