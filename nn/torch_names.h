/* cgrad nn: PyTorch's nn.Transformer* state-dict names (issue 33).
 *
 * A checkpoint of nn.TransformerEncoderLayer, nn.TransformerDecoderLayer,
 * nn.TransformerEncoder / nn.TransformerDecoder, nn.Transformer or
 * nn.MultiheadAttention loads into cgrad's equivalent modules
 * (nn/transformer.h, nn/attention.h), and cgrad's weights save under
 * PyTorch's names, so that the file loads into PyTorch with
 * load_state_dict(strict=True). The names, by the type of the module that
 * holds them:
 *
 *   cgrad                                  PyTorch
 *   MultiHeadAttention {q,k,v}_proj.weight in_proj_weight [3d, d] (q, k, v rows)
 *   MultiHeadAttention {q,k,v}_proj.bias   in_proj_bias [3d]
 *   MultiHeadAttention o_proj.*            out_proj.*
 *   encoder/decoder layer ff.fc1.*         linear1.*
 *   encoder/decoder layer ff.fc2.*         linear2.*
 *   encoder/decoder layer ff.fc3.*         linear3.* (a gated act's up
 *                                          projection: a layer of your own,
 *                                          x + linear2(F.silu(linear1(h)) *
 *                                          linear3(h)); PyTorch's have none)
 *   encoder/decoder layer ln1, ln2, ln3    norm1, norm2, norm3
 *   decoder layer cross_attn               multihead_attn
 *   LM block ln1, attn, ln2, ff            norm1, self_attn, norm2, linear1/2
 *                                          (a norm_first encoder layer)
 *   encoder/decoder stack ln_f             norm
 *
 * Every other name (a stack's layers.{i}, containers of your own such as
 * "encoder" and "decoder" for nn.Transformer, Linear, Embedding, LayerNorm)
 * is the same in both, and so are persistent buffers' (cg_module_add_buffer:
 * saved and loaded with the weights). The whole tree is mapped, so a model
 * of your own that holds these modules maps too. What has no equivalent is refused in
 * one line naming the module: an RMSNorm in a layer or stack (PyTorch's
 * layers have LayerNorm only), anything attached below an attention or a
 * layer's feed-forward projection (LoRA adapters: save them with
 * cg_lora_save), q/k/v
 * projections shared with another module one by one (an attention or a
 * layer shared whole by two parents is fine: a load takes PyTorch's state
 * dict, which lists it under both names, as cg_module_load_ex does).
 *
 * Errors: NULL/false + cg_set_error (core/error.h). */
#ifndef CG_NN_TORCH_NAMES_H
#define CG_NN_TORCH_NAMES_H

#include "../nn/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of PyTorch's state dict and the cgrad parameters it is made
 * of: one, or three (q, k, v, concatenated along dim 0) for in_proj. */
typedef struct {
    char *torch_name;     /* owned */
    int n_parts;          /* 1 or 3 */
    char *names[3];       /* cgrad's full names, owned */
    cg_tensor *params[3]; /* borrowed from the module */
} cg_torch_entry;

typedef struct {
    cg_torch_entry *items;
    int n, cap;
} cg_torch_names;

/* The state-dict names of m's parameters, in m's named_parameters() order
 * (a packed in_proj at the place of its q projection). *out must be zeroed.
 * False + error (a module with no PyTorch equivalent, out of memory). */
bool cg_torch_names_of(const cg_module *m, cg_torch_names *out);
void cg_torch_names_free(cg_torch_names *l); /* zeroes it; NULL is a no-op */

/* cg_module_write / cg_module_save under PyTorch's names (float32). */
bool cg_torch_write(const cg_module *m, cg_st_writer *w, const char *prefix);
bool cg_torch_save(const cg_module *m, const char *path);
/* cg_module_load_ex of a file holding PyTorch's names (opt NULL: strict, no
 * prefix); the missing and unexpected keys are PyTorch's names. On failure
 * m is unchanged. */
bool cg_torch_load(cg_module *m, const cg_st_file *f, const cg_load_options *opt);
/* Strict load of the file at path. */
bool cg_torch_load_file(cg_module *m, const char *path);

/* The constructor arguments of nn.TransformerEncoderLayer /
 * nn.TransformerDecoderLayer / nn.Transformer. */
typedef struct {
    int64_t d_model, nhead, dim_feedforward;
    float dropout;
    const char *activation; /* "relu" or "gelu" (erf form); NULL: "relu" */
    double layer_norm_eps;  /* 0: 1e-5, the default; any other value is refused */
    /* Names and weights do not depend on it. cgrad's layers take [B, T, d]
     * (batch_first=True); feed [T, B, d] inputs through cg_transpose(x, 0, 1). */
    bool batch_first;
    bool norm_first;
    bool no_bias; /* bias=False (PyTorch 2.1's): cfg.no_bias, no Linear or LayerNorm bias */
} cg_torch_layer_args;

/* The cg_tf_config of those arguments (layernorm; dropout_rng NULL). The
 * dropout becomes cfg.dropout, which drops each sublayer's output only
 * (PyTorch's dropout1/2/3); PyTorch's layers also drop the attention
 * weights and the feed-forward's hidden activations, cgrad's do not (eval
 * mode and dropout 0 agree exactly; training with dropout does not). False +
 * error naming what has no equivalent: an eps other than 1e-5,
 * an activation other than "relu" and "gelu" (cgrad's tanh GELU,
 * CG_ACT_GELU, is PyTorch's activation=nn.GELU(approximate="tanh"), a
 * callable, with the same names). */
bool cg_tf_config_from_torch(const cg_torch_layer_args *a, cg_tf_config *out);

#ifdef __cplusplus
}
#endif
#endif
