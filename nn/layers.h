/* cgrad nn: the tables of activations and norms, and the basic layers,
 * built from autograd ops (autograd/ops.h; without a graph some run core's
 * kernels directly, with the same bits).
 *
 * Each layer is a struct whose first member is a cg_module (see
 * nn/module.h): free it with cg_module_free(CG_MODULE(layer)). The tensor
 * pointers in the structs (weight, bias, ...) are borrowed views of the
 * registry entries, for convenience. Forward functions return a NEW
 * reference (cg_release it) or NULL + error; a NULL input gives NULL.
 *
 * Initialisation follows shared/reference/models.py (init_params): Linear
 * and Embedding weights ~ N(0, 0.02), biases zero, norm weights one. The
 * `rng` argument of a constructor draws those values (it advances); NULL
 * means a fresh generator seeded with 0 for that call. */
#ifndef CG_NN_LAYERS_H
#define CG_NN_LAYERS_H

#include "../nn/module.h"
#include "../autograd/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_INIT_STD 0.02f /* models.py init_params default */
#define CG_NORM_EPS 1e-5f

/* --------------------------------------------------------- choices
 * The activations and the norms, one table each (nn/layers.c): the one
 * list that nn's modules, the zoo's models, their configs and the
 * programs' flags and --help read. Every module that takes a cg_act
 * (FeedForward, the transformer layers, cg_activation_new; cg_mlp but for
 * the gated rows) or a cg_norm_kind (cg_norm_new, the transformer layers)
 * accepts every row.
 * A new activation is an enum value and a row. */
/* GELU: tanh form (the zoo's); GELU_ERF: exact, PyTorch's nn.GELU() default;
 * SILU: x sigmoid(x) (nn.SiLU). SWIGLU and GEGLU are gated: a FeedForward
 * with one is fc2(act(fc1 x) * fc3 x), act SiLU or GELU (tanh form), the
 * LLaMA / PaLM feed-forward (cg_ff below); as a function of one tensor
 * (cg_activation, cg_activation_new) they take the last dim's two halves,
 * act(x[..., :h]) * x[..., h:], as PyTorch's F.glu does. Since 2026-12-07
 * the rest of torch.nn's activations without parameters are rows too
 * (nn.Tanh, nn.Sigmoid, nn.Mish, nn.Hardswish, nn.Hardsigmoid, nn.ReLU6,
 * nn.SELU, nn.Softsign, nn.LogSigmoid, nn.Tanhshrink: autograd/ops.h's
 * functions), so a FeedForward, the zoo's --act and cg_mlp take them; those
 * with parameters are modules of their own (cg_leaky_relu_new, ...,
 * below). New rows go at the end: the values are in no file, but keep them
 * stable anyway. */
typedef enum {
    CG_ACT_RELU = 0,
    CG_ACT_GELU,
    CG_ACT_GELU_ERF,
    CG_ACT_SILU,
    CG_ACT_SWIGLU,
    CG_ACT_GEGLU,
    CG_ACT_TANH,
    CG_ACT_SIGMOID,
    CG_ACT_MISH,
    CG_ACT_HARDSWISH,
    CG_ACT_HARDSIGMOID,
    CG_ACT_RELU6,
    CG_ACT_SELU,
    CG_ACT_SOFTSIGN,
    CG_ACT_LOGSIGMOID,
    CG_ACT_TANHSHRINK,
    CG_N_ACTS
} cg_act;
typedef enum { CG_NORM_LAYERNORM = 0, CG_NORM_RMSNORM, CG_N_NORMS } cg_norm_kind;

typedef struct {
    const char *name;                    /* in flags and configs: "gelu" */
    cg_tensor *(*forward)(cg_tensor *x); /* cg_gelu */
    const char *type;                    /* the module's type: "GELU" (cg_activation_new) */
    /* PyTorch's nn.GELU(approximate=...) for a GELU ("tanh", "none"), NULL
     * for another function */
    const char *gelu_approximate;
    /* act(x w^T + b) as one op (cg_affine_relu, cg_affine_gelu): what a
     * linear layer followed by this activation records */
    cg_tensor *(*affine)(cg_tensor *x, cg_tensor *w, cg_tensor *b);
    /* a gated row's gate, act(a) * b as one op (cg_swiglu, cg_geglu); NULL
     * for an ungated row */
    cg_tensor *(*gate)(cg_tensor *a, cg_tensor *b);
} cg_act_info;

typedef struct {
    const char *name; /* "layernorm" */
    const char *type; /* the module's type: "LayerNorm" */
    bool bias;        /* has a bias parameter */
    /* norm(x) and norm(x + y) over the last dim (bias NULL without one) */
    cg_tensor *(*forward)(cg_tensor *x, cg_tensor *w, cg_tensor *b, float eps);
    cg_tensor *(*add_forward)(cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *b, float eps);
} cg_norm_info;

/* The row of a, or NULL + "<what>: unknown activation 7 (choices: relu,
 * gelu, gelu_erf)" (what NULL: no prefix); the same for norms. */
const cg_act_info *cg_act_info_of(cg_act a, const char *what);
const cg_norm_info *cg_norm_info_of(cg_norm_kind k, const char *what);
/* A name of the table into *out: false + "unknown activation 'x'
 * (choices: relu, gelu, gelu_erf, silu, swiglu, geglu)" (norms: "unknown norm 'x' (choices:
 * ...)"), or false + error when out is NULL. */
bool cg_act_parse(const char *s, cg_act *out);
bool cg_norm_kind_parse(const char *s, cg_norm_kind *out);
/* The row's name, "?" out of range. */
const char *cg_act_name(cg_act a);
const char *cg_norm_kind_name(cg_norm_kind k);
/* Every name of the table, in table order, joined by sep ("relu|gelu|gelu_erf")
 * into buf (n bytes; truncated to fit). Returns buf. */
const char *cg_act_names(char *buf, size_t n, const char *sep);
const char *cg_norm_names(char *buf, size_t n, const char *sep);
/* The row's forward of x: relu(x), gelu_tanh(x), gelu_erf(x), silu(x); for
 * swiglu and geglu act(x[..., :h]) * x[..., h:] (cg_swiglu_halves). */
cg_tensor *cg_activation(cg_tensor *x, cg_act act);
/* The activation as a module without parameters (the row's type: "ReLU",
 * "GELU"), for cg_sequential: nn.ReLU(), nn.GELU(approximate="tanh"),
 * nn.GELU() for gelu_erf. */
cg_module *cg_activation_new(cg_act act);
/* The activations with parameters as modules, PyTorch's classes and
 * defaults (C has none: pass them), each calling its function of
 * autograd/ops.h, which checks the parameters at the forward as PyTorch's
 * do (cg_celu_new(0)'s forward: "celu: alpha cannot be 0 (got alpha 0)"):
 *   cg_leaky_relu_new(0.01f)      nn.LeakyReLU()       "LeakyReLU"
 *   cg_elu_new(1.0f)              nn.ELU()             "ELU"
 *   cg_celu_new(1.0f)             nn.CELU()            "CELU"
 *   cg_softplus_new(1.0f, 20.0f)  nn.Softplus()        "Softplus"
 *   cg_hardtanh_new(-1.0f, 1.0f)  nn.Hardtanh()        "Hardtanh"
 *   cg_softshrink_new(0.5f)       nn.Softshrink()      "Softshrink"
 *   cg_hardshrink_new(0.5f)       nn.Hardshrink()      "Hardshrink"
 *   cg_threshold_new(t, v)        nn.Threshold(t, v)   "Threshold"
 * No parameters to train; NULL + error when out of memory. */
cg_module *cg_leaky_relu_new(float negative_slope);
cg_module *cg_elu_new(float alpha);
cg_module *cg_celu_new(float alpha);
cg_module *cg_softplus_new(float beta, float threshold);
cg_module *cg_hardtanh_new(float min_val, float max_val);
cg_module *cg_softshrink_new(float lambd);
cg_module *cg_hardshrink_new(float lambd);
cg_module *cg_threshold_new(float threshold, float value);
/* nn.PReLU(num_parameters [1], init [0.25]): cg_prelu(x, weight), the
 * weight [num_parameters] filled with init, a parameter ("weight": trained,
 * saved and loaded as every module's). num_parameters 1 or the input's
 * channels (dim 1; an input of fewer than 2 dims takes 1), checked at the
 * forward; below 1 refused here. As PyTorch's docs say, do not decay this
 * weight (leave it out of an optimizer's weight decay) for good
 * performance. NULL + error. */
cg_module *cg_prelu_new(int64_t num_parameters, float init);
/* F.bilinear(x1, x2, weight, bias): y[..., o] = sum_ij x1[..., i] w[o, i,
 * j] x2[..., j] + b[o], x1 [..., in1] and x2 [..., in2] of one batch shape
 * (no broadcasting, as PyTorch), w [out, in1, in2], b [out] or NULL: one
 * cg_einsum("...i,oij,...j->...o") (x1 with w, then with x2: two batched
 * products) and the add, their gradients. Shapes refused in one line. */
cg_tensor *cg_bilinear(cg_tensor *x1, cg_tensor *x2, cg_tensor *w, cg_tensor *b);
/* nn.Bilinear(in1_features, in2_features, out_features, bias): parameters
 * "weight" [out, in1, in2] and "bias" [out] (PyTorch's state dict names),
 * each drawn U(-1/sqrt(in1), 1/sqrt(in1)) from rng (NULL: a generator of
 * seed 0), nn.Bilinear.reset_parameters' distribution
 * (cg_module_reset_parameters_torch draws PyTorch's bits). Sizes below 1
 * refused. cg_bilinear_forward(m, x1, x2): cg_bilinear with them. */
cg_module *cg_bilinear_new(int64_t in1_features, int64_t in2_features, int64_t out_features,
                           bool bias, cg_rng *rng);
cg_tensor *cg_bilinear_forward(cg_module *m, cg_tensor *x1, cg_tensor *x2);
/* nn.RReLU(lower [1/8], upper [1/3]): cg_rrelu(x, lower, upper, training,
 * rng), training the module's mode (cg_module_train / eval): random slopes
 * in training drawn from rng (borrowed: it must outlive the module; NULL:
 * one of the module's own, seeded with 0), (lower + upper) / 2 in
 * evaluation. lower > upper refused here ("RReLU: rrelu: lower 0.5 must
 * not exceed upper 0.2"). */
cg_module *cg_rrelu_new(float lower, float upper, cg_rng *rng);
/* Modules of one function along a dim, PyTorch's, the dim checked at the
 * forward by the function:
 *   cg_glu_new(-1)           nn.GLU()          cg_glu(x, dim)
 *   cg_softmax_new(dim)      nn.Softmax(dim)   cg_softmax(x, dim)
 *   cg_log_softmax_new(dim)  nn.LogSoftmax(dim) cg_log_softmax(x, dim)
 *   cg_softmin_new(dim)      nn.Softmin(dim)   cg_softmax(-x, dim)
 *   cg_softmax2d_new()       nn.Softmax2d()    cg_softmax(x, -3) of a 3-d or
 *                                              4-d x (another refused)
 * No parameters; NULL + error when out of memory. */
cg_module *cg_glu_new(int dim);
cg_module *cg_softmax_new(int dim);
cg_module *cg_log_softmax_new(int dim);
cg_module *cg_softmin_new(int dim);
cg_module *cg_softmax2d_new(void);
/* A multilayer perceptron: cg_sequential of Linear(sizes[0], sizes[1]),
 * act, Linear(sizes[1], sizes[2]), act, ..., Linear(sizes[n-2], sizes[n-1])
 * (no activation after the last), with biases, drawn from rng in that
 * order: nn.Sequential(nn.Linear(2, 64), nn.ReLU(), ..., nn.Linear(64, K)),
 * names "0.weight", "0.bias", "2.weight", ... n >= 2 sizes. A gated act
 * (swiglu, geglu) is refused. NULL + error. */
cg_module *cg_mlp(int n, const int64_t *sizes, cg_act act, cg_rng *rng);

/* ----------------------------------------------------------- Linear */
/* y = x @ W^T + b. weight [out, in], bias [out] (or NULL). */
typedef struct {
    cg_module base;
    int64_t in_features, out_features;
    cg_tensor *weight;
    cg_tensor *bias;
} cg_linear;

cg_linear *cg_linear_new(int64_t in_features, int64_t out_features, bool bias, cg_rng *rng);
/* x [..., in] -> [..., out]. */
cg_tensor *cg_linear_forward(cg_linear *l, cg_tensor *x);
/* The same for an output that bf16 products read (attention's q, k and v):
 * in bf16 training the product also keeps the output's bf16 rounding as it
 * writes the output (cg_affine_keep_bf16), which those products then read
 * instead of rounding the output again. The same result. */
cg_tensor *cg_linear_forward_keep_bf16(cg_linear *l, cg_tensor *x);
/* What follows a sublayer in a residual block, made as the write-out of
 * the sublayer's last product: res + dropout(y) for its output y, the
 * dropout's p applied when training (drawing from rng as cg_dropout
 * does). res: of y's shape, or NULL for the dropout alone (post-norm's,
 * whose add is in the norm: cg_norm_add_forward). */
typedef struct {
    cg_tensor *res;
    float p;
    cg_rng *rng;
    bool training;
} cg_residual;
/* res + dropout(l(x)) for r (NULL: l(x)): one op while gradients are
 * recorded (cg_affine_residual: the dropout and the add as the product
 * writes its output), unless l has forward hooks (a LoRA adapter is one),
 * which see the layer's own output: then the ops one by one, as without a
 * graph. The same bits either way. */
cg_tensor *cg_linear_forward_residual(cg_linear *l, cg_tensor *x, const cg_residual *r);
/* r applied to a sublayer's output y the unfused way, res + dropout(y)
 * (r NULL: a new reference to y); a res of another shape (no
 * broadcasting) or another dtype than float32 is refused, as the fused op
 * refuses it. */
cg_tensor *cg_residual_apply(const cg_residual *r, cg_tensor *y);
/* The same as a function (PyTorch's F.linear), e.g. for a tied output head:
 * x [..., in], weight [out, in] (any strides; used through a transposed
 * view, never copied), bias [out] or NULL. */
cg_tensor *cg_linear_fn(cg_tensor *x, cg_tensor *weight, cg_tensor *bias);

/* -------------------------------------------------------- Embedding */
/* weight [num, dim]. */
typedef struct {
    cg_module base;
    int64_t num, dim;
    cg_tensor *weight;
} cg_embed;

cg_embed *cg_embed_new(int64_t num, int64_t dim, cg_rng *rng);
/* ids: an int64 tensor of any shape [...] -> [..., dim]. An id outside
 * [0, num) is an error naming the id, its position and num. */
cg_tensor *cg_embed_forward(cg_embed *e, const cg_tensor *ids);

/* ----------------------------------------------------- EmbeddingBag */
/* nn.EmbeddingBag(num, dim, mode=..., include_last_offset=...,
 * padding_idx=...) (nn/embedding_bag.c): weight [num, dim] drawn N(0, 1)
 * from rng (NULL: seeded 0), as PyTorch's reset_parameters draws it, its
 * padding_idx row zeroed. o gives mode, include_last_offset and padding_idx
 * (NULL: mean, none); its offsets and per_sample_weights are the
 * forward's (set there: refused here). No max_norm, scale_grad_by_freq
 * or sparse. */
typedef struct {
    cg_module base; /* type "EmbeddingBag" */
    int64_t num, dim;
    cg_tensor *weight;
    cg_bag_opts opts; /* mode, include_last_offset, padding_idx */
} cg_embed_bag;

cg_embed_bag *cg_embed_bag_new(int64_t num, int64_t dim, const cg_bag_opts *o, cg_rng *rng);
/* module(ids, offsets, per_sample_weights): cg_embedding_bag with the
 * module's weight and options, hooks included (they see in[0] ids, in[1]
 * offsets, in[2] per_sample_weights, NULL where not given). -> [B, dim]. */
cg_tensor *cg_embed_bag_forward(cg_embed_bag *b, const cg_tensor *ids, const cg_tensor *offsets,
                                cg_tensor *per_sample_weights);

/* ----------------------------------------------- LayerNorm / RMSNorm */
/* Over the last dim, eps 1e-5.
 *   layernorm: (x - mean) / sqrt(var + eps) * weight + bias (biased var)
 *   rmsnorm:   x / sqrt(mean(x^2) + eps) * weight (bias is NULL)
 * The module type is "LayerNorm" or "RMSNorm". A norm made without a weight
 * or a bias (cg_norm_new_opts) has NULL there, and no such parameter. */
typedef struct {
    cg_module base;
    cg_norm_kind kind;
    int64_t dim;
    float eps;
    cg_tensor *weight;
    cg_tensor *bias;
} cg_norm;

/* A norm's options, as nn.LayerNorm's and nn.RMSNorm's: eps (finite, >= 0);
 * elementwise_affine (false: no weight and no bias); bias (LayerNorm's,
 * PyTorch's bias=False: a weight alone; RMSNorm has none either way). */
typedef struct {
    float eps;
    bool elementwise_affine, bias;
} cg_norm_opts;
/* PyTorch's defaults: eps 1e-5, a weight, and (LayerNorm) a bias. */
cg_norm_opts cg_norm_opts_default(void);

/* opts NULL: cg_norm_opts_default(). */
cg_norm *cg_norm_new_opts(cg_norm_kind kind, int64_t dim, const cg_norm_opts *opts);
cg_norm *cg_norm_new(cg_norm_kind kind, int64_t dim);
cg_norm *cg_layernorm_new(int64_t dim);
cg_norm *cg_rmsnorm_new(int64_t dim);
/* x [..., dim] -> same shape. */
cg_tensor *cg_norm_forward(cg_norm *n, cg_tensor *x);
/* norm(x + y), x and y [..., dim] of one shape: the residual add of a
 * post-norm block fused into the norm (cg_add_layer_norm, cg_add_rms_norm),
 * the same bits as cg_norm_forward(n, cg_add(x, y)). */
cg_tensor *cg_norm_add_forward(cg_norm *n, cg_tensor *x, cg_tensor *y);

/* ---------------------------------------------------------- Dropout */
/* Inverted dropout with probability p in [0, 1] while the module is in
 * train mode (p = 1: zeros, as nn.Dropout(1.0)); the identity (a new
 * reference to x) in eval mode or at p=0.
 * rng: the generator used for the masks (borrowed: it must outlive the
 * module), or NULL for one owned by the module (own_rng, seeded with 0;
 * reseed with own_rng = cg_rng_new(seed)). No parameters. */
typedef enum {
    CG_DROPOUT_PLAIN,         /* nn.Dropout: cg_dropout */
    CG_DROPOUT_1D,            /* nn.Dropout1d: cg_dropout1d (autograd/ops.h) */
    CG_DROPOUT_2D,            /* nn.Dropout2d: cg_dropout2d */
    CG_DROPOUT_3D,            /* nn.Dropout3d: cg_dropout3d */
    CG_DROPOUT_ALPHA,         /* nn.AlphaDropout: cg_alpha_dropout */
    CG_DROPOUT_FEATURE_ALPHA, /* nn.FeatureAlphaDropout: cg_feature_alpha_dropout */
} cg_dropout_kind;

typedef struct {
    cg_module base;
    float p;
    cg_rng *rng;
    cg_rng own_rng;
    cg_dropout_kind kind; /* CG_DROPOUT_PLAIN from cg_drop_new */
} cg_drop;

cg_drop *cg_drop_new(float p, cg_rng *rng);
/* The dropout modules of torch.nn (the module's type: "Dropout",
 * "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
 * "FeatureAlphaDropout"), each its op of autograd/ops.h in train mode,
 * the identity in eval mode, rng as cg_drop_new's; p in [0, 1]. */
cg_drop *cg_drop_new_kind(cg_dropout_kind kind, float p, cg_rng *rng);
cg_tensor *cg_drop_forward(cg_drop *d, cg_tensor *x);

/* ------------------------------------------- sinusoidal positions */
/* A transformer's positions: sinusoidal tables added to the embeddings
 * (below; models.py's), rotary embeddings of every self-attention's q and
 * k (nn/attention.h cg_mha_set_rope; RoFormer, LLaMA), nothing added, or
 * a learnt table added (GPT-2's and nanoGPT's wpe: an Embedding of the
 * model's). */
typedef enum { CG_POS_SINUSOIDAL, CG_POS_ROPE, CG_POS_LEARNED } cg_pos_kind;
/* The token embeddings' scale before the positions are added: sqrt(d)
 * ("Attention Is All You Need", models.py, fairseq's default) or none
 * (GPT-2, nanoGPT; fairseq's --no-scale-embedding). */
typedef enum { CG_EMB_SCALE_SQRT_D, CG_EMB_SCALE_NONE } cg_emb_scale;

/* pe [max_len, d]: pe[pos, 2i] = sin(pos / 10000^(2i/d)),
 * pe[pos, 2i+1] = cos(same), computed in double then rounded to float
 * (exactly models.py sinusoidal_pe; odd d has one more sin column). */
cg_tensor *cg_sinusoidal_pe(int64_t max_len, int64_t d);

/* PyTorch's register_buffer('pe', pe, persistent=False): pe is a buffer
 * named "pe" (cg_module_buffers lists it; not a parameter, not saved, not
 * expected by a load). */
typedef struct {
    cg_module base;
    int64_t max_len, dim;
    cg_tensor *pe; /* [max_len, dim], borrowed from the module's buffer "pe" */
} cg_posenc;

cg_posenc *cg_posenc_new(int64_t max_len, int64_t dim);
/* Rows [start, start+len) of pe: a view [len, dim] (new reference). Error
 * if they are not all below max_len. */
cg_tensor *cg_posenc_rows(cg_posenc *p, int64_t start, int64_t len);
/* x [..., T, dim] -> x + pe[:T]. Error if T > max_len. */
cg_tensor *cg_posenc_forward(cg_posenc *p, cg_tensor *x);

/* ------------------------------------------------------ FeedForward */
/* fc2(act(fc1(x))): fc1 [d_ff, d], fc2 [d, d_ff], both with bias
 * (cg_ff_new_bias with bias false: neither has one; the weights are drawn
 * as with them).
 * A gated act (swiglu, geglu) adds the up projection fc3 [d_ff, d]:
 * fc2(act(fc1(x)) * fc3(x)), fc1 the gate projection, fc2 the down one,
 * drawn fc1, fc2, fc3 and named so ("fc1.weight", "fc2.weight",
 * "fc3.weight"): LLaMA's w2(F.silu(w1(x)) * w3(x)) is fc1 = w1, fc2 = w2,
 * fc3 = w3, and a PyTorch module written with attributes fc1, fc2, fc3
 * loads by name. d_ff is the width as given (LLaMA's ~8d/3 is the user's
 * to pass): three d x d_ff matrices, 3/2 of an ungated FF's parameters. The
 * two products are separate (fc1 and fc3 keep PyTorch's names and shapes);
 * the gate is one op over both outputs (cg_swiglu, cg_geglu). */
typedef struct {
    cg_module base;
    cg_act act;
    cg_linear *fc1, *fc2;
    cg_linear *fc3; /* a gated act's up projection, else NULL */
} cg_ff;

cg_ff *cg_ff_new(int64_t d, int64_t d_ff, cg_act act, cg_rng *rng);
cg_ff *cg_ff_new_bias(int64_t d, int64_t d_ff, cg_act act, bool bias, cg_rng *rng);
cg_tensor *cg_ff_forward(cg_ff *f, cg_tensor *x);
/* res + dropout(f(x)) for r (NULL: f(x)), made by fc2's product
 * (cg_linear_forward_residual); with forward hooks on f, which see its
 * own output, after it. */
cg_tensor *cg_ff_forward_residual(cg_ff *f, cg_tensor *x, const cg_residual *r);

#ifdef __cplusplus
}
#endif
#endif
