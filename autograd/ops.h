/* cgrad autograd: differentiable ops.
 *
 * Each function computes its result with a core kernel (core/ops.h) and, if
 * grad mode is on and an input requires grad, records its backward rule on
 * the result. Same semantics, shapes and errors as the kernels; the result
 * is a new reference (cg_release it). Index arguments (token ids, targets,
 * indices, rows) are int64 tensors and masks bool tensors, each checked
 * against the other arguments: they carry no gradient. */
#ifndef CG_AUTOGRAD_OPS_H
#define CG_AUTOGRAD_OPS_H

#include "../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------- elementwise */
cg_tensor *cg_add(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_sub(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_mul(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_div(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_adds(cg_tensor *a, float s); /* a + s */
cg_tensor *cg_muls(cg_tensor *a, float s); /* a * s */
cg_tensor *cg_neg(cg_tensor *a);
cg_tensor *cg_exp(cg_tensor *a);
cg_tensor *cg_log(cg_tensor *a);
cg_tensor *cg_sqrt(cg_tensor *a);
cg_tensor *cg_rsqrt(cg_tensor *a);
cg_tensor *cg_pow(cg_tensor *a, float p);
cg_tensor *cg_tanh(cg_tensor *a);
cg_tensor *cg_sigmoid(cg_tensor *a);
/* One per row of core/ops.h's CG_UNARY_OPS, where each is defined: cg_relu,
 * cg_gelu (tanh form, approximate='tanh'), cg_gelu_erf
 * (torch.nn.functional.gelu's default approximate='none': 0.5 a (1 +
 * erf(a / sqrt 2))), cg_abs, cg_silu (x sigmoid(x), swish), cg_sin, cg_cos. */
#define CG_UNARY_DECLARE_(A, E, name, fwd, bwd) cg_tensor *cg_##name(cg_tensor *a);
CG_UNARY_OPS(CG_UNARY_DECLARE_, ~)
/* One per row of CG_UNARY_PARAM_OPS (core/ops.h, each defined and its
 * gradient at the kink there; PyTorch's defaults in brackets):
 * cg_leaky_relu(a, negative_slope [0.01]) (F.leaky_relu), cg_elu(a, alpha
 * [1]) (F.elu), cg_softplus(a, beta [1], threshold [20]) (F.softplus;
 * cg_softplus(a) before 2026-12 is cg_softplus(a, 1, 20), the same bits). */
#define CG_UNARY_PARAM_DECLARE_(A, E, name, fwd, bwd, rule, ...) \
    cg_tensor *cg_##name(cg_tensor *a, CG_PARAMS_DECL(__VA_ARGS__));
CG_UNARY_PARAM_OPS(CG_UNARY_PARAM_DECLARE_, ~)
cg_tensor *cg_clamp(cg_tensor *a, float lo, float hi);
/* The gate of a gated feed-forward: act(a) * b as one op (core/ops.h
 * cg_k_gated: no act(a) tensor is kept; the backward recomputes it from a).
 * cg_swiglu: silu(a) * b; cg_geglu: gelu(a) * b, the tanh form. a and b of
 * one shape and dtype (float32 or bfloat16), any strides (the two halves
 * of one product's output are two views). */
cg_tensor *cg_swiglu(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_geglu(cg_tensor *a, cg_tensor *b);
/* The same over the two halves of one tensor h [..., 2n] (a product of
 * width 2n: the gate's and the up projection's, concatenated), one op:
 * act(h[..., :n]) * h[..., n:] -> [..., n]; the backward writes h's whole
 * gradient in one pass. */
cg_tensor *cg_swiglu_halves(cg_tensor *h);
/* Rotary position embeddings of x [..., T, D] at positions start + t
 * (core/ops.h cg_k_rope: the rotate-half pairing of Hugging Face's LLaMA,
 * base theta), differentiable in x: the backward is the inverse rotation
 * (nothing is kept). */
cg_tensor *cg_rope(cg_tensor *x, int64_t start, double theta);
cg_tensor *cg_geglu_halves(cg_tensor *h);
/* F.glu(x, dim) (nn.GLU(dim), PyTorch's default dim -1): x's two halves a,
 * b along dim, a * sigmoid(b), one op (the gate of cg_swiglu with act the
 * sigmoid: core/gated.c); float32 or bfloat16 (the result in x's dtype),
 * any strides. Refused: a 0-d x, a dim out of range, an odd size along dim
 * ("glu: the halved dim must be even, but dim 1 of [2, 3] is 3"). */
cg_tensor *cg_glu(cg_tensor *x, int dim);
/* F.prelu(x, weight) (nn.PReLU's function): x > 0 ? x : a x, a the
 * weight's element of x's channel (dim 1; one channel below 2 dims, as
 * PyTorch 1.13's), weight 0-d or 1-d of 1 element or one per channel
 * (core/ops.h cg_k_prelu: its refusals, dtypes and the fixed order of the
 * weight's gradient, summed over every other dim). The gradient to x is g
 * where x > 0 and a g elsewhere (at 0 too); the weight's is the sum of g x
 * where x <= 0. */
cg_tensor *cg_prelu(cg_tensor *x, cg_tensor *weight);
/* F.rrelu(x, lower [1/8], upper [1/3], training): in training each
 * element's slope is drawn uniformly in [lower, upper] from rng (required
 * then: advanced by numel(x), the same draws for any thread count), y = x
 * where x > 0, a_i x elsewhere, and the gradient is g times the same
 * slopes (kept: x is not). In evaluation (rng unread, may be NULL) it is
 * cg_leaky_relu(x, (lower + upper) / 2), the same bits, the half-sum in
 * double as PyTorch's. lower > upper refused (core/ops.h cg_k_rrelu).
 * PyTorch's draws are not these: compare the evaluation with it. */
cg_tensor *cg_rrelu(cg_tensor *x, float lower, float upper, bool training, cg_rng *rng);
/* torch.maximum(a, b) / torch.minimum(a, b): elementwise, broadcast, NaN
 * where either is NaN; the gradient as PyTorch's: to the larger (smaller)
 * operand, half to each at a tie (both get all of it where one is NaN). */
cg_tensor *cg_maximum(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_minimum(cg_tensor *a, cg_tensor *b);
/* cond ? a : b, cond bool (no gradient flows to it). */
cg_tensor *cg_where(cg_tensor *cond, cg_tensor *a, cg_tensor *b);
/* mask ? value : a, mask bool (it broadcasts to a; no gradient to it). */
cg_tensor *cg_masked_fill(cg_tensor *a, cg_tensor *mask, float value);

/* -------------------------------------------------------- reductions */
/* ndims == 0 reduces over all dims. */
cg_tensor *cg_sum(cg_tensor *a, int ndims, const int *dims, bool keepdim);
cg_tensor *cg_mean(cg_tensor *a, int ndims, const int *dims, bool keepdim);
cg_tensor *cg_var(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim);
/* torch.std(a, dims, correction, keepdim): the square root of cg_var; its
 * gradient is var's of g / (2 std), 0 where std is 0 (PyTorch's). */
cg_tensor *cg_std(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim);
/* torch.var_mean / torch.std_mean: cg_var (cg_std) returned, and cg_mean
 * over the same dims into *mean (a new reference; NULL on failure). */
cg_tensor *cg_var_mean(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim,
                       cg_tensor **mean);
cg_tensor *cg_std_mean(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim,
                       cg_tensor **mean);
/* torch.logsumexp(a, dims, keepdim): log(sum(exp(a))) over the dims,
 * shifted by the maximum (by 0 where it is infinite, as PyTorch: a row of
 * -inf gives -inf). The gradient is softmax's, g exp(a - result), and 0
 * for a row whose result is -inf (PyTorch's is NaN there). */
cg_tensor *cg_logsumexp(cg_tensor *a, int ndims, const int *dims, bool keepdim);
/* Max along dim; the gradient flows to the (first) maximal element.
 * *indices (optional) receives the argmax as int64, without gradient. */
cg_tensor *cg_max(cg_tensor *a, int dim, bool keepdim, cg_tensor **indices);
/* torch.min(a, dim, keepdim): cg_max's twin for the minimum (the first
 * minimal element gets the gradient; NaN counts as the minimum). */
cg_tensor *cg_min(cg_tensor *a, int dim, bool keepdim, cg_tensor **indices);
cg_tensor *cg_sum_all(cg_tensor *a);  /* scalar */
cg_tensor *cg_mean_all(cg_tensor *a); /* scalar */

/* ------------------------------------------------------------ matmul */
/* PyTorch matmul: 1-D, 2-D and batched with broadcast batch dims. */
cg_tensor *cg_matmul(cg_tensor *a, cg_tensor *b);

/* ------------------------------------------------------------- views */
/* Differentiable views: no data is copied (except cg_reshape when the
 * strides make a view impossible, like PyTorch's reshape). */
cg_tensor *cg_permute(cg_tensor *a, const int *perm);
cg_tensor *cg_transpose(cg_tensor *a, int d0, int d1);
cg_tensor *cg_slice(cg_tensor *a, int dim, int64_t start, int64_t stop, int64_t step);
cg_tensor *cg_narrow(cg_tensor *a, int dim, int64_t start, int64_t len);
cg_tensor *cg_select(cg_tensor *a, int dim, int64_t index);
cg_tensor *cg_squeeze(cg_tensor *a, int dim);
cg_tensor *cg_unsqueeze(cg_tensor *a, int dim);
cg_tensor *cg_expand(cg_tensor *a, int ndim, const int64_t *shape);
/* A view if the strides allow it, else a copy; one entry may be -1. */
cg_tensor *cg_reshape(cg_tensor *a, int ndim, const int64_t *shape);
/* Strictly a view (error if the strides make that impossible). */
cg_tensor *cg_view(cg_tensor *a, int ndim, const int64_t *shape);
/* torch.flatten(a, start_dim, end_dim): dims start_dim..end_dim (negative
 * from the end) made one, by cg_reshape; a 0-d tensor becomes [1]. A start
 * after the end is refused. */
cg_tensor *cg_flatten(cg_tensor *a, int start_dim, int end_dim);
/* F.pixel_shuffle(x, r): [*, C r^2, H, W] -> [*, C, H r, W r], out[..., c,
 * h r + i, w r + j] = x[..., c r^2 + i r + j, h, w]; F.pixel_unshuffle(x,
 * r) its inverse, [*, C, H r, W r] -> [*, C r^2, H, W]. A view, a
 * permutation and one copy (cg_reshape), gradients theirs: PyTorch's bits.
 * Refused as PyTorch refuses: fewer than 3 dims, r < 1, channels not
 * divisible by r^2 (shuffle), height or width not divisible by r
 * (unshuffle). */
cg_tensor *cg_pixel_shuffle(cg_tensor *x, int64_t upscale_factor);
cg_tensor *cg_pixel_unshuffle(cg_tensor *x, int64_t downscale_factor);
/* F.channel_shuffle(x, groups) (nn.ChannelShuffle): x [N, C, *] viewed as
 * [N, groups, C / groups, *], dims 1 and 2 swapped, reshaped back to
 * [N, C, *] (one copy, cg_reshape; gradients theirs): out channel
 * j * groups + i is x's channel i * (C / groups) + j. Refused: fewer than
 * 3 dims, groups < 1 or not dividing C. */
cg_tensor *cg_channel_shuffle(cg_tensor *x, int64_t groups);
/* torch.Tensor.contiguous: a itself (a new reference) if contiguous, else a
 * contiguous copy that passes gradients to a. Either way the gradient flows:
 * it never depends on memory layout. */
cg_tensor *cg_contiguous(const cg_tensor *a);
/* The same function under its older name. */
cg_tensor *cg_to_contiguous(cg_tensor *a);
/* torch.Tensor.to(dtype): a itself (a new reference) when it already has
 * dtype dt, else a converted copy (core/dtype.h's conversions: float to
 * bfloat16 rounds to nearest even, float to int truncates toward zero).
 * Differentiable between float dtypes: the gradient comes back converted
 * to a's dtype. A result of an int or bool dtype has no gradient. */
cg_tensor *cg_to(const cg_tensor *a, cg_dtype dt);
/* torch.clone: a copy with fresh contiguous storage; differentiable (the
 * gradient passes to a unchanged). For a copy outside the graph, clone
 * under cg_no_grad_begin(), or cg_k_clone (core/tensor.h). */
cg_tensor *cg_clone(const cg_tensor *a);
/* torch.Tensor.copy_(src) without its gradient: copy src's values into
 * dst (same shape; any strides). A src that requires grad is refused while
 * grad mode is on (one line: the copy would be silently cut from the
 * graph); copy cg_detach(src), copy under cg_no_grad_begin() (as PyTorch
 * users do for weight copies and EMA updates), or use cg_clone for a
 * differentiable copy. Bumps dst's version counter. False + error. */
bool cg_copy_(cg_tensor *dst, const cg_tensor *src);
/* cg_reshape under the name of the old core function: differentiable. */
cg_tensor *cg_reshape_copy(const cg_tensor *a, int ndim, const int64_t *shape);

/* -------------------------------------------------------- nn building blocks */
cg_tensor *cg_softmax(cg_tensor *a, int dim);
cg_tensor *cg_log_softmax(cg_tensor *a, int dim);
/* Cross-entropy of logits [..., C] against targets, an int64 tensor of
 * the logits' shape without the class dim ([N] for [N, C], [B, T] for
 * [B, T, C]), PyTorch semantics (ignore_index, label_smoothing, reduction;
 * note the class dim is last here, not dim 1 as in F.cross_entropy).
 * Targets of another dtype or shape are refused naming both. The node
 * keeps the targets: writing them in place before backward is refused.
 * Mean (over the kept rows) and sum give a scalar, none the targets'
 * shape (0 at an ignored target).
 * Computed in fp32 in both precision policies; under bf16 autocast in
 * float lanes with one exponential an element, as PyTorch's autocast does
 * (core/ops.h cg_k_cross_entropy: the bits differ from fp32's). */
cg_tensor *cg_cross_entropy(cg_tensor *logits, const cg_tensor *targets, int64_t ignore_index,
                            float label_smoothing, cg_reduction r);
/* F.cross_entropy(..., weight=): cg_cross_entropy with class weights, a
 * float32 [C] tensor or NULL (NULL: cg_cross_entropy, its bits). Not
 * differentiated (as PyTorch's); any values taken. A kept row with target
 * t loses (1-ls) w_t (lse - x_t) + ls/C sum_j w_j (lse - x_j) (PyTorch's
 * formula with label smoothing); mean divides the sum by the kept rows'
 * sum of w_t (no kept row: NaN), none gives each row's weighted loss.
 * Weighted rows are computed in double lanes in both precision policies
 * (core/ops.h cg_k_cross_entropy_weighted). */
cg_tensor *cg_cross_entropy_weighted(cg_tensor *logits, const cg_tensor *targets,
                                     const cg_tensor *weight, int64_t ignore_index,
                                     float label_smoothing, cg_reduction r);
/* Over the last dim; w and b may be NULL. */
cg_tensor *cg_layer_norm(cg_tensor *x, cg_tensor *w, cg_tensor *b, float eps);
cg_tensor *cg_rms_norm(cg_tensor *x, cg_tensor *w, float eps);
/* layer_norm(x + y, w, b) and rms_norm(x + y, w): the add and the norm in
 * one op (post-norm residuals), the same bits as cg_add then the norm, the
 * sum never stored. x and y must have the same shape. */
cg_tensor *cg_add_layer_norm(cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *b, float eps);
cg_tensor *cg_add_rms_norm(cg_tensor *x, cg_tensor *y, cg_tensor *w, float eps);
/* Inverted dropout when training and p > 0 (p in [0, 1]; p = 1 gives a * 0,
 * zeros, as F.dropout(a, 1.0)); otherwise a new reference to a. */
cg_tensor *cg_dropout(cg_tensor *a, float p, cg_rng *rng, bool training);
/* The channel-wise dropouts (PyTorch 1.13's F.dropout1d, dropout2d,
 * dropout3d; autograd/ops_dropout.c): while training with p > 0, each
 * channel (x[n, c, ...], or x[c, ...] unbatched) zeroed whole with
 * probability p, the others scaled by 1/(1 - p), one draw per channel
 * (core/ops.h cg_k_noise_dropout). dropout1d: x [N, C, L] or unbatched
 * [C, L]; dropout2d: [N, C, H, W], or [N, C, L] taken as batched (as
 * PyTorch 1.13 does, which warns); dropout3d: [N, C, D, H, W] or
 * unbatched [C, D, H, W]; cg_feature_dropout (torch.feature_dropout):
 * any x of 2 dims or more, channels along dim 1. Other ranks are refused
 * (PyTorch 1.13 warns and runs dropout2d and dropout3d on them, a
 * deprecated use it says will be an error). Not training, p = 0 or no
 * elements: a new reference to x (no draws). p in [0, 1] ("dropout
 * probability has to be between 0 and 1"), checked first, and x's rank,
 * even when not training; rng may be NULL only then. p = 1: x times 0.
 * The node keeps the noise (one factor per channel); the gradient is g
 * times it. */
cg_tensor *cg_dropout1d(cg_tensor *x, float p, cg_rng *rng, bool training);
cg_tensor *cg_dropout2d(cg_tensor *x, float p, cg_rng *rng, bool training);
cg_tensor *cg_dropout3d(cg_tensor *x, float p, cg_rng *rng, bool training);
cg_tensor *cg_feature_dropout(cg_tensor *x, float p, cg_rng *rng, bool training);
/* F.alpha_dropout(x, p, training) (SELU networks'): each element kept
 * with probability 1 - p as a x + alpha a p, the others set to alpha a p
 * - alpha a (alpha = 1.7580993408473766, a = 1 / sqrt((alpha^2 p + 1)(1 -
 * p))), which keeps a zero mean and unit variance; F.feature_alpha_dropout
 * the same per channel (x of 2 dims or more, channels along dim 1). The
 * rest as the channel dropouts above (p = 1: x times 0, PyTorch's). Note
 * PyTorch's default training is False for these two. */
cg_tensor *cg_alpha_dropout(cg_tensor *x, float p, cg_rng *rng, bool training);
cg_tensor *cg_feature_alpha_dropout(cg_tensor *x, float p, cg_rng *rng, bool training);
cg_tensor *cg_concat(cg_tensor *const *ts, int n, int dim);
cg_tensor *cg_stack(cg_tensor *const *ts, int n, int dim);
/* Views of consecutive pieces along dim (sizes sum to the dim's size). */
bool cg_split(cg_tensor *a, int dim, int n, const int64_t *sizes, cg_tensor **out);
/* torch.index_select: rows of a picked along dim by index (int64, 0-d or
 * 1-d; the node keeps it). Out-of-range ids are an error. */
cg_tensor *cg_index_select(cg_tensor *a, int dim, const cg_tensor *index);
/* F.embedding: table [V, D], ids int64 of any shape [...] -> [..., D]. */
cg_tensor *cg_embedding(cg_tensor *table, const cg_tensor *ids);
/* F.embedding_bag (autograd/ops_bag.c): each bag's rows of weight [V, D]
 * (float32) reduced to one, -> [B, D]. ids int64 (int32 is refused, as
 * cg_embedding refuses it: cg_to): [B, N] (B bags of N ids, offsets
 * NULL) or [n] with offsets (int64 [B], each bag from its offset to the
 * next's, the last to n; include_last_offset: [B + 1], the last one the
 * end). Modes: CG_BAG_MEAN (PyTorch's default; a zeroed struct), SUM, MAX.
 * per_sample_weights (float32, ids' shape, mode sum only, as PyTorch):
 * each row scaled before the sum; it gets a gradient too. padding_idx
 * (has_padding_idx; in [-V, V), negative counted from V): its entries are
 * left out of the bag (and of a mean's count). An empty bag (or one of
 * padding only) gives zeros. Gradient to weight: sum the bag's g on each
 * row (times its weight), mean g / count, max g on the row of each
 * column's maximum (the first, as PyTorch's CPU kernel). o NULL: mean,
 * no offsets. Refused in one line: a bad mode, offsets with 2-d ids or
 * none with 1-d, offsets[0] not 0, offsets decreasing, an offset past
 * the end, an id or padding_idx out of range, per_sample_weights with
 * another mode or shape. */
typedef enum { CG_BAG_MEAN = 0, CG_BAG_SUM, CG_BAG_MAX } cg_bag_mode;
typedef struct {
    cg_bag_mode mode;
    const cg_tensor *offsets;      /* int64 1-d, with 1-d ids only; else NULL */
    bool include_last_offset;      /* offsets holds the end of the last bag */
    cg_tensor *per_sample_weights; /* NULL, or float32 of ids' shape (mode sum) */
    bool has_padding_idx;
    int64_t padding_idx;
} cg_bag_opts;
cg_tensor *cg_embedding_bag(cg_tensor *weight, const cg_tensor *ids, const cg_bag_opts *o);
/* Affine map (a Linear layer) as one fused op: x [..., in] (any strides),
 * w [out, in], b [out] or NULL -> x w^T + b, [..., out]. */
cg_tensor *cg_affine(cg_tensor *x, cg_tensor *w, cg_tensor *b);
/* F.conv1d / F.conv2d / F.conv3d as one op: x [N, C, L] or [C, L] / [N,
 * C, H, W] or [C, H, W] / [N, C, D, H, W] or [C, D, H, W] (float32, or
 * bfloat16: the result float32, x's gradient bfloat16), w [O, C / groups,
 * K] / [O, C / groups, KH, KW] / [O, C / groups, KD, KH, KW], b [O] or
 * NULL; cfg NULL for the defaults (stride 1, no padding, dilation 1,
 * groups 1), else core/ops.h's cg_conv_cfg (padding numbers, CG_CONV_SAME
 * or CG_CONV_VALID). Zero padding, or cfg's padding_mode as nn.Conv's:
 * x padded by cg_pad in that mode first (a pad node), then convolved
 * without padding. Gradients for x, w and b as PyTorch's; products in the
 * thread's matrix precision, as a Linear layer's. */
cg_tensor *cg_conv1d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg);
cg_tensor *cg_conv2d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg);
cg_tensor *cg_conv3d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg);
/* F.conv_transpose1d / F.conv_transpose2d / F.conv_transpose3d as one op:
 * x [N, C, L] or [C, L] / [N, C, H, W] or [C, H, W] / [N, C, D, H, W] or
 * [C, D, H, W] (float32, or bfloat16: the result float32, x's gradient
 * bfloat16), w [C, O / groups, K] / [C, O / groups, KH, KW] / [C, O /
 * groups, KD, KH, KW], b [O] or NULL; cfg NULL for the defaults, else a cg_conv_cfg
 * with padding numbers and output_padding (< stride or < dilation), as
 * core's cg_k_conv_transpose. Gradients for x, w and b as PyTorch's;
 * products in the thread's matrix precision. */
cg_tensor *cg_conv_transpose1d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg);
cg_tensor *cg_conv_transpose2d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg);
cg_tensor *cg_conv_transpose3d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg);
/* F.unfold(x, kernel_size, dilation, padding, stride) as one op: x [N, C,
 * H, W] or [C, H, W] (float32, or bfloat16: the result float32, x's
 * gradient bfloat16) -> [N, C KH KW, L] (or [C KH KW, L]), cfg core/ops.h's
 * cg_fold_cfg (CG_FOLD_CFG(kh, kw) for the defaults), as core's
 * cg_k_unfold. Its gradient is F.fold of g back to [H, W]. */
cg_tensor *cg_unfold(cg_tensor *x, const cg_fold_cfg *cfg);
/* F.fold(x, (oh, ow), kernel_size, dilation, padding, stride) as one op: x
 * [N, C KH KW, L] or [C KH KW, L] (float32 or bfloat16, as cg_unfold's)
 * -> [N, C, oh, ow] (or [C, oh, ow]), the overlaps summed, as core's
 * cg_k_fold. Its gradient is F.unfold of g. */
cg_tensor *cg_fold(cg_tensor *x, int64_t oh, int64_t ow, const cg_fold_cfg *cfg);
/* cg_affine for an output that bf16 products read (attention's q, k and v,
 * each a view of it): in bf16 precision the product keeps the output's
 * bf16 rounding as it writes the output (core's cg_k_linear_keep_bf16), so
 * that those products read it without another pass. The same bits and
 * graph as cg_affine. */
cg_tensor *cg_affine_keep_bf16(cg_tensor *x, cg_tensor *w, cg_tensor *b);
/* cg_affine_keep_bf16 of two weights stacked along the output dim:
 * x [w1; w2]^T + [b1; b2] -> [..., out1 + out2] (w1 [out1, in], w2
 * [out2, in]; both biases or neither), one product (x read and packed
 * once), the bits and gradients of cg_affine_keep_bf16(x, cg_concat(w1,
 * w2), cg_concat(b1, b2)). The stacked copy is made for the forward and
 * again for the backward, not kept between them: the node holds w1 and
 * w2. A gated FeedForward's fc1 and fc3 (nn/layers.c). */
cg_tensor *cg_affine_pair_keep_bf16(cg_tensor *x, cg_tensor *w1, cg_tensor *w2, cg_tensor *b1,
                                    cg_tensor *b2);
/* relu(x w^T + b) as one op, the bits of cg_relu(cg_affine(x, w, b)): the
 * ReLU runs over the product's fresh output, so the pre-activation is never
 * kept for the backward (a relu node would hold it). */
cg_tensor *cg_affine_relu(cg_tensor *x, cg_tensor *w, cg_tensor *b);
/* gelu(x w^T + b) as one op, tanh form or (exact) the erf form: the bits
 * of cg_gelu(cg_affine(x, w, b)) or cg_gelu_erf(...). The node keeps the
 * pre-activation, as a gelu node would; in bf16 precision the GELU is
 * applied as the product writes each block of its output, and the
 * backward takes the gradient through it in the pass that rounds it for
 * its products (core/linear.c, cg_k_linear_act). */
cg_tensor *cg_affine_gelu(cg_tensor *x, cg_tensor *w, cg_tensor *b, bool exact);
/* res + dropout(x w^T + b) as one op, the bits of cg_add(res,
 * cg_dropout(cg_affine(x, w, b), p, rng, training)) (res NULL: the
 * dropout alone): a residual block's last product and what follows it,
 * pre-norm's x + drop(sub(norm(x))) or post-norm's drop(sub(x)). The
 * dropout (when training and p > 0) draws as cg_dropout does and is
 * applied, with the add, as the product writes its output (core's
 * cg_k_linear_residual); the node keeps the dropout's mask, and the
 * residual's gradient is g, as cg_add's. b and res may be NULL. */
cg_tensor *cg_affine_residual(cg_tensor *x, cg_tensor *w, cg_tensor *b, cg_tensor *res, float p,
                              cg_rng *rng, bool training);
/* Fused scaled-dot-product attention: q [B,H,Tq,dh], k and v [B,H,Tk,dh]
 * (any strides) -> softmax(q k^T / sqrt(dh), masked) v, [B,H,Tq,dh] (a view
 * of [B,Tq,H,dh] contiguous storage). Key j is masked for query i when
 * (causal && j > i) or key_pad[b, j] (key_pad: bool [B, Tk], true =
 * padding, or NULL; checked: another dtype or shape is refused).
 * *weights_out (if not NULL) gets the weights [B,H,Tq,Tk], detached
 * (computed only when asked for). A query with every key masked: NaN
 * output and gradients (nn/attention.h says which, against PyTorch's).
 * Tiled with an online softmax: the graph
 * keeps the weights up to 256 keys (128 in bf16 on AMX), else one
 * log-sum-exp per row, from which the backward recomputes the weights tile
 * by tile (and the output too beyond 512 keys: core/ops.h cg_k_attention),
 * so memory is linear in T; the causal part above the diagonal is never
 * computed. */
cg_tensor *cg_attention(cg_tensor *q, cg_tensor *k, cg_tensor *v, bool causal,
                        const cg_tensor *key_pad, cg_tensor **weights_out);
/* torch.gather along dim: index int64 with a's ndim, the result's shape. */
cg_tensor *cg_gather(cg_tensor *a, int dim, const cg_tensor *index);
/* torch.index_add(a, dim, index, src) (out of place: a is not written):
 * a copy of a with the slices of src added along dim at the rows index
 * names, repeated rows accumulating in src's order (the bits do not depend
 * on the thread count). index int64, 0-d or 1-d; src has a's shape with
 * numel(index) at dim. Differentiable in a (the gradient passes unchanged)
 * and in src (the gradient's rows at index: index_select). The combine
 * step of a mixture of experts: out = cg_index_add(out, 0, tokens, y).
 * a and src float32. */
cg_tensor *cg_index_add(cg_tensor *a, int dim, const cg_tensor *index, cg_tensor *src);
/* torch.scatter_add(a, dim, index, src) (out of place): a copy of a with
 * out[...][index[i][j]][...] += src[i][j] along dim; index int64 of src's
 * shape, fitting in a outside dim. Differentiable in a (unchanged) and in
 * src (cg_gather of the gradient at index). a and src float32. */
cg_tensor *cg_scatter_add(cg_tensor *a, int dim, const cg_tensor *index, cg_tensor *src);

/* ------------------------------ einsum and its family (ops_einsum.c) */
/* torch.diagonal(a, offset, dim1, dim2): a view (core/tensor.h
 * cg_view_diagonal: dim1 and dim2 removed, the diagonal appended last);
 * its gradient is g in the diagonal of zeros of a's shape. */
cg_tensor *cg_diagonal(cg_tensor *a, int64_t offset, int dim1, int dim2);
/* torch.einsum(equation, *operands) as PyTorch 1.13's: subscripts a-z and
 * A-Z, spaces ignored; "->" and the output's subscripts, or an implicit
 * output (the subscripts seen once, in the order A-Z then a-z, after the
 * ellipsis); an ellipsis "..." per operand (and in the output) standing
 * for dims broadcast together, aligned right (dropped from an explicit
 * output without one: summed); a subscript repeated within an operand
 * takes its diagonal (cg_diagonal); a size of 1 broadcasts against the
 * others of its subscript. The operands (n of them, up to 32) are
 * contracted left to right: each dim summed with the last operand where
 * its size is not 1, through one batched cg_matmul of permuted, reshaped
 * operands (PyTorch's sumproduct_pair), or multiplied when nothing is
 * summed. A chain of the graph's ops: their values and gradients. An
 * operand with no elements gives zeros of the output's shape, outside the
 * graph (as PyTorch's). Refused in one line: a character outside a-zA-Z,
 * an ellipsis malformed or repeated, more or fewer operands than the
 * equation's, an operand's subscripts against its dims, a repeated
 * subscript's sizes, sizes of a subscript that do not broadcast, an output
 * subscript repeated or in no input, more than CG_MAX_DIMS distinct dims. */
cg_tensor *cg_einsum(const char *equation, int n, cg_tensor *const *operands);
/* torch.trace(x): the sum of a matrix's diagonal (of min(n, m) elements):
 * cg_sum_all of cg_diagonal. */
cg_tensor *cg_trace(cg_tensor *x);
/* torch.diag(x, offset): x 1-d [m] -> [m + |offset|, m + |offset|] with x
 * on the diagonal offset above the main one (below: negative), zeros
 * elsewhere (cg_scatter_add into zeros); x 2-d -> that diagonal,
 * cg_diagonal(x, offset, 0, 1) (a view: PyTorch's is a copy). */
cg_tensor *cg_diag(cg_tensor *x, int64_t offset);
/* torch.outer(a, b): 1-d a [n] and b [m] -> [n, m] (einsum "i,j->ij"). */
cg_tensor *cg_outer(cg_tensor *a, cg_tensor *b);
/* torch.kron(a, b): the Kronecker product, the dims aligned right
 * (leading 1s added), of size a_i b_i: a [.., a_i, 1, ..] times b [.., 1,
 * b_i, ..] reshaped, as PyTorch's; up to CG_MAX_DIMS / 2 dims. */
cg_tensor *cg_kron(cg_tensor *a, cg_tensor *b);
/* torch.tensordot(a, b, dims): dims_a and dims_b NULL for the int form
 * (a's last ndims against b's first ndims), else ndims dims of each
 * contracted pairwise (negative allowed); the output a's free dims then
 * b's, through cg_einsum. Contracted sizes must match or be 1. */
cg_tensor *cg_tensordot(cg_tensor *a, cg_tensor *b, int ndims, const int *dims_a,
                        const int *dims_b);

/* ---------------------------------------------- distances (ops_dist.c) */
/* torch.cdist(x1, x2, p) (compute_mode's default,
 * use_mm_for_euclid_dist_if_necessary): x1 [*, P, M], x2 [*, R, M] float32
 * (the batch dims broadcast) -> [*, P, R], the p-norm of each pair of
 * rows' difference (p = 0 counts the nonzero differences, INFINITY takes
 * the largest). p = 2 with P or R past 25: PyTorch's matrix form,
 * sqrt(max(|x1|^2 - 2 x1 x2^T + |x2|^2, 0)) made of the graph's ops (one
 * cg_matmul), its gradient 0 where that is 0; else one node over the
 * direct kernel (core/ops.h cg_k_cdist: sums in double), its gradient
 * PyTorch's _cdist_backward (0 at a zero distance; inf: g to each maximal
 * difference). Refused as PyTorch: fewer than 2 dims, other column counts,
 * p < 0, batch dims that do not broadcast; bfloat16 refused. */
cg_tensor *cg_cdist(cg_tensor *x1, cg_tensor *x2, float p);
/* torch.pdist(x, p): x [N, M] float32 -> [N (N - 1) / 2], the distances of
 * the rows i < j in row order, those of the direct cdist of x with itself
 * (its gradient; the N^2 pairs computed, half of them kept). */
cg_tensor *cg_pdist(cg_tensor *x, float p);
/* F.pairwise_distance(x1, x2, p, eps, keepdim) (F's defaults 2, 1e-6,
 * false): ||x1 - x2 + eps||_p over the last dim of the broadcast shape
 * (eps added to the difference, as PyTorch's; p >= 0), any float dtype
 * (bfloat16: the difference in bfloat16, its norm in float32 by cdist's
 * direct kernel, rounded); the gradient torch.norm's (0 at a zero norm;
 * inf: shared among the maxima). cg_triplet_margin_loss's distance. */
cg_tensor *cg_pairwise_distance(cg_tensor *x1, cg_tensor *x2, float p, float eps, bool keepdim);

/* ------------------------------------- linear algebra (ops_linalg.c) */
/* torch.linalg: float32 matrices [*, m, n] of any strides, batched over
 * the leading dims, through LAPACK (core/ops.h, "linear algebra"): each
 * matrix computed in double, its results rounded once to float32, one
 * node per op whose backward is PyTorch 1.13's formula in double from the
 * factors the forward kept (the backward reads no input). Refused in one
 * line as PyTorch refuses: fewer than 2 dims, int and bool ("Expected a
 * floating point tensor as input. Got int64"), bfloat16 and float16
 * (PyTorch 1.13's CPU linear algebra has none), not square where square is
 * needed, a singular matrix in solve ("The solver failed because the input
 * matrix is singular.") and inv ("The diagonal element 2 is zero, ..."), a
 * matrix that is not positive-definite in cholesky ("... the leading minor
 * of order 2 is not positive-definite"), a NaN in svd's input; in a batch
 * "(Batch element b): " names the matrix. The ops of several outputs
 * return the first and put the others into the pointers given (each may
 * be NULL); they are contiguous views of one packed result. Where a
 * gradient is not defined (repeated eigenvalues or singular values with a
 * loss that reads the vectors, a singular matrix's slogdet), it is inf or
 * NaN, as PyTorch's. */
/* torch.linalg.solve(A, B): X with A X = B; A [*, n, n]; B [*, n, k], or
 * a vector [*, n] (B 1-d, or B's shape A's without its last dim) giving X
 * [*, n]; the batch dims broadcast. Gradients gB = A^-T gX, gA = -gB X^T. */
cg_tensor *cg_linalg_solve(cg_tensor *A, cg_tensor *B);
/* torch.linalg.inv(A): [*, n, n]; gradient -A^-T g A^-T. */
cg_tensor *cg_linalg_inv(cg_tensor *A);
/* torch.linalg.det(A): [*, n, n] -> [*] (0 x 0: 1). Gradient g det A^-T;
 * where |det| < 100 eps (float32's eps) g adj(A)^T through the SVD, exact
 * at a singular A (PyTorch 1.13's formula for singular inputs, which its
 * first-order backward replaces by 0 at an exactly singular A). */
cg_tensor *cg_linalg_det(cg_tensor *A);
/* torch.linalg.slogdet(A): the sign of det (0 where det is 0 or NaN),
 * returned, and log|det| into *logabsdet, [*] each. Gradient of logabsdet
 * g A^-T (inf and NaN at a singular A); the sign has none. */
cg_tensor *cg_linalg_slogdet(cg_tensor *A, cg_tensor **logabsdet);
/* torch.linalg.cholesky(A, upper): L (lower, A = L L^T) from A's lower
 * triangle, or U = L^T (upper) from its upper triangle; the other triangle
 * is not read. Gradient PyTorch's cholesky_backward, symmetric. A NaN in
 * the triangle read gives that triangle NaN (PyTorch with OpenBLAS; the
 * reference LAPACK would call it not positive-definite). */
cg_tensor *cg_linalg_cholesky(cg_tensor *A, bool upper);
/* torch.linalg.qr(A, mode): Q returned, R into *R; mode NULL or "reduced"
 * (Q [*, m, k], R [*, k, n], k = min(m, n)), "complete" (Q [*, m, m], R
 * [*, m, n]) or "r" (Q empty [0], R [*, k, n]). Householder's signs
 * (LAPACK's dgeqrf, as PyTorch's). Gradient PyTorch's linalg_qr_backward;
 * its backward refuses mode "r" and "complete" with m > n, as PyTorch's. */
cg_tensor *cg_linalg_qr(cg_tensor *A, const char *mode, cg_tensor **R);
/* torch.linalg.eigh(A, UPLO): the eigenvalues [*, n] ascending, returned,
 * and the eigenvectors [*, n, n] (columns) into *eigenvectors, from A's
 * lower (UPLO NULL or "L") or upper ("U") triangle. Each eigenvector's
 * sign is LAPACK's (a loss should not depend on it). A NaN or inf in the
 * triangle read: both outputs NaN, as PyTorch's. Gradient PyTorch's
 * linalg_eig_backward (is_hermitian), symmetric; V diag(gL) V^T when the
 * eigenvectors are unused. */
cg_tensor *cg_linalg_eigh(cg_tensor *A, const char *UPLO, cg_tensor **eigenvectors);
/* torch.linalg.eigvalsh(A, UPLO): the eigenvalues alone; gradient V
 * diag(g) V^T (defined at repeated eigenvalues too). */
cg_tensor *cg_linalg_eigvalsh(cg_tensor *A, const char *UPLO);
/* torch.linalg.svd(A, full_matrices): U returned, S [*, k] (descending)
 * and Vh into *S and *Vh; U [*, m, k] and Vh [*, k, n], or [*, m, m] and
 * [*, n, n] with full_matrices (PyTorch's default is true; the gradient
 * then reads the first k columns of U and rows of Vh, as PyTorch's). The
 * singular vectors' signs are LAPACK's. An inf in A: every output NaN; a
 * NaN: refused ("... the input matrix contained non-finite values."), as
 * PyTorch's. Gradient PyTorch's svd_backward. */
cg_tensor *cg_linalg_svd(cg_tensor *A, bool full_matrices, cg_tensor **S, cg_tensor **Vh);
/* torch.linalg.svdvals(A): S [*, k]; gradient U diag(g) Vh. */
cg_tensor *cg_linalg_svdvals(cg_tensor *A);
/* torch.linalg.pinv(A, atol, rtol): [*, m, n] -> [*, n, m] through the
 * SVD, 1/s for the singular values s > max(atol, rtol s_max); a negative
 * atol or rtol is PyTorch's None (both: rtol = max(m, n) eps, eps
 * float32's; atol > 0 alone: rtol 0). Gradient PyTorch's pinv_backward. */
cg_tensor *cg_linalg_pinv(cg_tensor *A, double atol, double rtol);
/* torch.linalg.lstsq(A, B, rcond).solution: the minimum-norm X minimising
 * |A X - B| (LAPACK's dgelsy, PyTorch's CPU default driver), A [*, m, n],
 * B [*, m, k] or a vector [*, m] (as cg_linalg_solve's), rank decided by
 * rcond (negative: PyTorch's None, max(m, n) eps). Gradient PyTorch's
 * linalg_lstsq_backward: pinv(A)'s. The residuals, rank and singular
 * values PyTorch also returns are not. */
cg_tensor *cg_linalg_lstsq(cg_tensor *A, cg_tensor *B, double rcond);
/* torch.linalg.vector_norm(x, ord, dim, keepdim): over ndims dims (0:
 * all), any float dtype (bfloat16 and float16 too: the result in x's
 * dtype), accumulated in double; ord any float: 0 counts the nonzeros,
 * INFINITY / -INFINITY the largest / smallest |x|, else (sum |x|^ord)^(1 /
 * ord). Refused as PyTorch: an empty reduction for ord < 0 or inf (no
 * identity), a dim given twice. Gradient PyTorch's norm_backward (0 at a
 * zero norm; inf: g shared among the maxima). */
cg_tensor *cg_linalg_vector_norm(cg_tensor *x, double ord, int ndims, const int *dims,
                                 bool keepdim);
/* torch.linalg.matrix_norm(A, ord, dim, keepdim): ord NULL or "fro"
 * (vector_norm 2 over the two dims), "nuc" (the sum of the singular
 * values), "2" / "-2" (the largest / smallest), "1" / "-1" (the largest /
 * smallest column sum of |A|), "inf" / "-inf" (row sums); dim NULL (-2,
 * -1) or two different dims. Made of the ops above as PyTorch's (a
 * maximum's gradient shared among ties, as its amax's); "fro", "1" and
 * "inf" take any float dtype, "nuc" and "2" float32 (through the SVD). */
cg_tensor *cg_linalg_matrix_norm(cg_tensor *A, const char *ord, const int *dim, bool keepdim);

/* ------------------------------------ recurrent cells (ops_rnn.c) */
/* One time step of torch.nn.GRU as one op (core/ops.h cg_k_gru_cell, its
 * equations): gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh [B, 3H] (gate
 * order r, z, n; the products stay ordinary cg_affine ops), h [B, H] ->
 * h' [B, H]. The node keeps gi, gh and h, from which the backward
 * recomputes the gates in its one pass (dgi, dgh, dh). float32; rows may
 * be strided (a step of a [T, B, 3H] product). */
cg_tensor *cg_gru_cell(cg_tensor *gi, cg_tensor *gh, cg_tensor *h);
/* One time step of torch.nn.LSTM as one op (cg_k_lstm_cell): the summed
 * pre-activations gates [B, 4H] (order i, f, g, o) and c [B, H] -> one
 * tensor [h' | c'] [B, 2H], whose halves (cg_narrow(out, -1, 0, H) and
 * cg_narrow(out, -1, H, H)) are h' and c'. */
cg_tensor *cg_lstm_cell(cg_tensor *gates, cg_tensor *c);

/* ------------------------------------ more of PyTorch's ops (ops_misc.c) */
/* torch.tril / torch.triu over the last two dims (diagonal 0 = the main). */
cg_tensor *cg_tril(cg_tensor *a, int64_t diagonal);
cg_tensor *cg_triu(cg_tensor *a, int64_t diagonal);
/* torch.cumsum along dim. */
cg_tensor *cg_cumsum(cg_tensor *a, int dim);
/* F.pad(a, pad, mode, value): n_pad sizes, pairs (left, right) for the
 * last dim first, then the dim before it (n_pad / 2 <= ndim); a negative
 * size crops. mode CG_PAD_CONSTANT (value around), CG_PAD_REFLECT,
 * CG_PAD_REPLICATE or CG_PAD_CIRCULAR (value 0; core/ops.h cg_k_pad says
 * what each reads and the sizes it takes), any dims padded. Any dtype;
 * differentiable (constant: the kept part's gradient, 0 for what a crop
 * removed; the others: each element's sum over the positions that read
 * it). */
cg_tensor *cg_pad(cg_tensor *a, int n_pad, const int64_t *pad, cg_pad_mode mode, float value);
/* torch.flip(a, dims): reversed along each of ndims dims (a copy). */
cg_tensor *cg_flip(cg_tensor *a, int ndims, const int *dims);
/* torch.roll(a, shifts, dims): shifts[i] along dims[i], n of each; dims
 * NULL rolls a flattened by one shift (n = 1), as torch.roll(a, s). */
cg_tensor *cg_roll(cg_tensor *a, int n, const int64_t *shifts, const int *dims);
/* Tensor.repeat(*sizes) (numpy's tile): n >= ndim sizes, the first n -
 * ndim new leading dims; the gradient sums the copies. */
cg_tensor *cg_repeat(cg_tensor *a, int n, const int64_t *sizes);
/* torch.topk(a, k, dim, largest, sorted=True): the values, in a's dtype
 * (differentiable: the gradient flows to the chosen elements; among equal
 * values the lower index is chosen first, which PyTorch leaves unspecified,
 * so its gradient may reach other elements of a tie); *indices
 * (may be NULL) gets their indices, an int64 tensor of the values' shape.
 * a: any float or integer dtype (integers: the first k of a stable
 * sort, exact, no gradient); bool refused, as PyTorch. */
cg_tensor *cg_topk(cg_tensor *a, int64_t k, int dim, bool largest, cg_tensor **indices);
/* torch.argmax(a, dim, keepdim): int64 indices (first maximum; NaN counts
 * as the maximum) of a float a of any dtype. Not differentiable. */
cg_tensor *cg_argmax(const cg_tensor *a, int dim, bool keepdim);
/* torch.argmin(a, dim, keepdim): the first minimum's index, as cg_argmax. */
cg_tensor *cg_argmin(const cg_tensor *a, int dim, bool keepdim);

/* --------------------------- sorting, products and scans (ops_scan.c) */
/* torch.sort(a, dim, descending, stable): the values, in a's dtype
 * (differentiable: the gradient goes back to where each came from), and
 * their int64 indices into *indices (may be NULL). NaN sorts as the
 * largest (last ascending, first descending). The sort is always stable
 * (equal elements keep their order), which stable = false allows too.
 * a: any dtype (since 2026-12-08 integers and bool too, compared exactly:
 * their values keep the dtype and have no gradient). */
cg_tensor *cg_sort(cg_tensor *a, int dim, bool descending, bool stable, cg_tensor **indices);
/* torch.argsort(a, dim, descending, stable): cg_sort's indices alone. */
cg_tensor *cg_argsort(const cg_tensor *a, int dim, bool descending, bool stable);
/* torch.prod(a, dim, keepdim) and torch.prod(a) (0-d): computed in double
 * in index order, rounded once; an integer or bool a gives int64 (no
 * gradient), as PyTorch promotes; the empty product is 1. The gradient is
 * g times the product of the other elements: where a line has one zero,
 * the others' product at that zero (0 elsewhere), with two or more, 0. */
cg_tensor *cg_prod(cg_tensor *a, int dim, bool keepdim);
cg_tensor *cg_prod_all(cg_tensor *a);
/* torch.cumprod(a, dim) (integers and bool: int64, no gradient); the
 * gradient is exact where a has zeros, as PyTorch 1.13's. */
cg_tensor *cg_cumprod(cg_tensor *a, int dim);
/* torch.logcumsumexp(a, dim): log(sum_{j <= i} exp(a_j)) (a run of -inf
 * stays -inf, +inf gives +inf from there), accumulated in double. */
cg_tensor *cg_logcumsumexp(cg_tensor *a, int dim);
/* torch.cummax / torch.cummin(a, dim): the running maximum (minimum) in
 * a's dtype, and its int64 indices into *indices (may be NULL): a tie
 * takes the later index, a NaN takes over from where it is (PyTorch's).
 * The gradient of each value goes to the element its index names.
 * a: any dtype (integers and bool: exact values, no gradient). */
cg_tensor *cg_cummax(cg_tensor *a, int dim, cg_tensor **indices);
cg_tensor *cg_cummin(cg_tensor *a, int dim, cg_tensor **indices);
/* F.one_hot(ids, num_classes): int64 ids to int64 [..., K] (K =
 * num_classes, or the largest id + 1 for -1); a negative id or one not
 * below num_classes is refused in one line. Not differentiable. */
cg_tensor *cg_one_hot(const cg_tensor *ids, int64_t num_classes);
/* The losses take PyTorch's reduction= as a cg_reduction (core/ops.h):
 * CG_REDUCTION_MEAN (PyTorch's default), _SUM, or _NONE (the losses
 * themselves). F.mse_loss: (x - y)^2, reduced; x and y of one shape, any
 * float dtype, either may require grad. */
cg_tensor *cg_mse_loss(cg_tensor *x, cg_tensor *y, cg_reduction r);
/* F.l1_loss: |x - y|, reduced; x and y of one shape (as cg_mse_loss), any
 * float dtype; the gradient sgn(x - y), 0 where they are equal (PyTorch's). */
cg_tensor *cg_l1_loss(cg_tensor *x, cg_tensor *y, cg_reduction r);
/* F.smooth_l1_loss(x, y, reduction, beta) (beta >= 0: 0.5 d^2 / beta where
 * |d| < beta, else |d| - 0.5 beta; beta 0 is l1) and F.huber_loss(x, y,
 * reduction, delta) (delta > 0: 0.5 d^2 where |d| < delta, else delta (|d|
 * - 0.5 delta)), d = x - y, their gradients PyTorch's expressions (with
 * beta 0, -1 at d = 0 as there). */
cg_tensor *cg_smooth_l1_loss(cg_tensor *x, cg_tensor *y, cg_reduction r, float beta);
cg_tensor *cg_huber_loss(cg_tensor *x, cg_tensor *y, cg_reduction r, float delta);
/* F.kl_div(input, target, reduction, log_target): input log-probabilities;
 * target probabilities, xlogy(t, t) - t input a point (0 where t = 0), or
 * with log_target log-probabilities, e^t (t - input). reduction as
 * PyTorch's (its default mean averages over every element; batchmean is
 * the KL divergence per sample). */
cg_tensor *cg_kl_div(cg_tensor *input, cg_tensor *target, cg_reduction r, bool log_target);
/* F.normalize(a, p, dim, eps): a / max(||a||_p, eps) along dim, one op
 * (a zero row's gradient g / eps, as PyTorch's; p > 0 or INFINITY; F's
 * defaults p 2, dim 1, eps 1e-12). */
cg_tensor *cg_normalize(cg_tensor *a, float p, int dim, float eps);
/* F.cosine_similarity(x1, x2, dim, eps): broadcast, dim of the broadcast
 * shape removed; PyTorch 1.13's formula and gradient (F's defaults dim 1,
 * eps 1e-8). One op. */
cg_tensor *cg_cosine_similarity(cg_tensor *x1, cg_tensor *x2, int dim, float eps);
/* Pooling as PyTorch's F.* (autograd/ops_pool.c; core/ops.h's cg_pool holds
 * the options: kernel_size, stride 0 the kernel's, padding, dilation 0 =
 * 1, ceil_mode, exclude_pad = !count_include_pad, divisor_override 0 =
 * none). x [N, C, L] or [C, L] (1d), [N, C, H, W] or [C, H, W] (2d),
 * [N, C, D, H, W] or [C, D, H, W] (3d), any strides, float32 or bfloat16/float16 (computed in float32, the values
 * rounded back). One node each; max's gradient goes to the maximum
 * PyTorch picks (the first; a NaN takes the place). *indices (int64, the
 * output's shape, the flat index within each plane as return_indices=True;
 * NULL: not wanted) is a new reference. */
cg_tensor *cg_max_pool1d(cg_tensor *x, cg_pool o);
cg_tensor *cg_max_pool2d(cg_tensor *x, cg_pool o);
cg_tensor *cg_max_pool1d_with_indices(cg_tensor *x, cg_pool o, cg_tensor **indices);
cg_tensor *cg_max_pool2d_with_indices(cg_tensor *x, cg_pool o, cg_tensor **indices);
cg_tensor *cg_avg_pool1d(cg_tensor *x, cg_pool o); /* no divisor_override, as PyTorch's */
cg_tensor *cg_avg_pool2d(cg_tensor *x, cg_pool o);
cg_tensor *cg_adaptive_avg_pool1d(cg_tensor *x, int64_t out_size);
cg_tensor *cg_adaptive_avg_pool2d(cg_tensor *x, int64_t oh, int64_t ow);
cg_tensor *cg_adaptive_max_pool1d(cg_tensor *x, int64_t out_size, cg_tensor **indices);
cg_tensor *cg_adaptive_max_pool2d(cg_tensor *x, int64_t oh, int64_t ow, cg_tensor **indices);
cg_tensor *cg_max_pool3d(cg_tensor *x, cg_pool o);
cg_tensor *cg_max_pool3d_with_indices(cg_tensor *x, cg_pool o, cg_tensor **indices);
cg_tensor *cg_avg_pool3d(cg_tensor *x, cg_pool o);
/* F.local_response_norm(x, size, alpha, beta, k) (nn.LocalResponseNorm;
 * PyTorch's defaults alpha 1e-4, beta 0.75, k 1): x [N, C, *] over
 * (k + alpha avg(x^2 over `size` neighbouring channels, zero-padded))^beta,
 * composed of graph ops as torch/nn/functional.py composes it (avg_pool2d
 * for 3 dims, avg_pool3d above; the pools sum in double, PyTorch's in
 * float). An empty x is returned as it is. Refused: fewer than 3 dims,
 * size < 1. */
cg_tensor *cg_local_response_norm(cg_tensor *x, int64_t size, float alpha, float beta, float k);
cg_tensor *cg_adaptive_avg_pool3d(cg_tensor *x, int64_t od, int64_t oh, int64_t ow);
cg_tensor *cg_adaptive_max_pool3d(cg_tensor *x, int64_t od, int64_t oh, int64_t ow,
                                  cg_tensor **indices);
/* F.max_unpool1d/2d/3d(x, indices, kernel_size, stride, padding,
 * output_size): the inverse of a max pool given its indices (int64, x's
 * shape, flat within each output plane, as the pools give them): zeros of
 * x's leading dims and output_size (its nd sizes; NULL: PyTorch's
 * default, (in - 1) * stride - 2 * padding + kernel_size, and a given one
 * must lie strictly within a stride of it), each value of x at its index
 * (a repeated index keeps the last). o's kernel_size, stride (0: the
 * kernel's) and padding are read; dilation above 1, ceil_mode,
 * exclude_pad and divisor_override are refused, and so is an index
 * outside the plane. One node (the indices saved); x's gradient is g read
 * at each index, as PyTorch 1.13's. */
cg_tensor *cg_max_unpool1d(cg_tensor *x, cg_tensor *indices, cg_pool o, const int64_t *output_size);
cg_tensor *cg_max_unpool2d(cg_tensor *x, cg_tensor *indices, cg_pool o, const int64_t *output_size);
cg_tensor *cg_max_unpool3d(cg_tensor *x, cg_tensor *indices, cg_pool o, const int64_t *output_size);
/* F.interpolate(x, size, scale_factor, mode, align_corners,
 * recompute_scale_factor) as PyTorch 1.13's (autograd/ops_pool.c;
 * core/ops.h's cg_interp holds the options: the mode, size or
 * scale_factor, 0 not given). x [N, C, L] (nearest, nearest-exact,
 * linear) or [N, C, H, W] (nearest, nearest-exact, bilinear, bicubic), any
 * strides, float32 or bfloat16/float16 (computed in float32, the values
 * rounded back). One node; the gradient goes back with the forward's weights
 * (nearest: summed into each source). */
cg_tensor *cg_interpolate(cg_tensor *x, cg_interp o);
/* F.batch_norm(x, running_mean, running_var, weight, bias, training,
 * momentum, eps), one node: x [N, C, ...] float32, or bfloat16 / float16
 * computed in float32 with the output and x's gradient in x's dtype (the
 * parameters and running statistics float32, as PyTorch's mixed-type
 * batch norm on CPU), statistics over every dim but 1. training: the
 * batch mean and biased variance normalise, and running_mean /
 * running_var (float32 [C] or NULL) move in place, outside the graph, by
 * momentum toward the mean and the unbiased variance; eval: the running
 * statistics normalise. weight, bias: [C] or NULL. */
cg_tensor *cg_batch_norm(cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                         cg_tensor *weight, cg_tensor *bias, bool training, float momentum,
                         float eps);
/* F.group_norm(x, num_groups, weight, bias, eps), one node: x [N, C, ...]
 * float32, bfloat16 or float16 as cg_batch_norm's (the parameters
 * float32), each sample's groups of C / num_groups channels normalised by
 * their mean and biased variance over the group's channels and
 * positions; weight, bias [C] or NULL.
 * F's default eps 1e-5. */
cg_tensor *cg_group_norm(cg_tensor *x, int64_t num_groups, cg_tensor *weight, cg_tensor *bias,
                         float eps);
/* F.instance_norm(x, running_mean, running_var, weight, bias,
 * use_input_stats, momentum, eps), one node: x [N, C, ...] float32,
 * bfloat16 or float16 as cg_batch_norm's, each (sample, channel)
 * normalised by its own statistics when use_input_stats (then
 * running_mean / running_var, [C] or NULL, move in place by momentum
 * toward the batch's average instance mean and unbiased variance, as
 * PyTorch's), else by the running statistics. F's defaults:
 * use_input_stats true, momentum 0.1, eps 1e-5. */
cg_tensor *cg_instance_norm(cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                            cg_tensor *weight, cg_tensor *bias, bool use_input_stats,
                            float momentum, float eps);
/* F.binary_cross_entropy_with_logits(x, y, reduction=): the binary
 * cross-entropy of logits x against targets y (same shape, values in
 * [0, 1]), computed stably, max(x,0) - x*y + log(1+exp(-|x|)) (at an
 * infinite x, its limit: core/ops.h CG_K_LOSS_BCE_LOGITS), reduced. Float
 * dtypes: labels held as int64 or bool are refused (cg_to them). */
cg_tensor *cg_binary_cross_entropy_with_logits(cg_tensor *x, cg_tensor *y, cg_reduction r);
/* F.binary_cross_entropy_with_logits(x, y, weight=, pos_weight=,
 * reduction=): weight (a rescaling of each element) and pos_weight (the
 * positive examples' weight, e.g. [C] along the last, class dim) each
 * NULL or a float tensor that broadcasts to x's shape (else refused);
 * neither is differentiated, as PyTorch's. The loss before its reduction:
 *   w [(1 + (p - 1) y) softplus(-x) + (1 - y) x]
 * = -w [p y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], computed
 * stably (the unweighted loss plus (p - 1) y softplus(-x), then times w);
 * mean is over the elements (not the weights), as PyTorch's. Both NULL:
 * cg_binary_cross_entropy_with_logits, its bits. */
cg_tensor *cg_binary_cross_entropy_with_logits_ex(cg_tensor *x, cg_tensor *y,
                                                  const cg_tensor *weight,
                                                  const cg_tensor *pos_weight, cg_reduction r);
/* F.cross_entropy(h @ w.T + b, targets, ignore_index=, label_smoothing=,
 * reduction=) with the output projection fused in (core/ops.h
 * cg_k_linear_cross_entropy): h [..., d], w [V, d], b [V] or NULL, targets
 * int64 of h's shape without its last dim, reduction r as
 * cg_cross_entropy's (mean over the kept targets or sum: a scalar; none:
 * the targets' shape, 0 at an ignored target; another r refused). The
 * logits are made a chunk of rows at a time and never kept. Mean and sum:
 * the gradients are computed by the forward (for the inputs that require
 * grad) and used by the backward. None: the upstream gradient is a tensor,
 * one g a target, which the forward cannot know: its backward computes the
 * chunks again with each row's logits' gradient scaled by its g (grad_scale
 * is not read). chunk: rows per chunk (every reduction's loss and
 * gradients are the unfused head's up to the products' rounding: the
 * weight's gradient is summed chunk by chunk, its bits depend on the
 * chunk; mean and sum: an upstream gradient g != 1 scales the gradients
 * the forward computed for 1; none: each row's logits' gradient is scaled
 * by its g before the products, as exact's), or CG_LCE_EXACT: chunks on the weight
 * gradient's k blocks, so that the loss and every gradient have the bits
 * of cg_cross_entropy(cg_matmul(h, cg_transpose(w, 0, 1)) (+ b, as
 * cg_linear_fn adds it), ..., r), g included, for every reduction.
 * grad_scale (mean and sum): the gradient g the backward will bring to the
 * loss (1 when the backward starts from it; s when it starts from
 * cg_muls(loss, s), as the trainer's gradient accumulation does). With
 * CG_LCE_EXACT the forward computes the gradients for that g, and a
 * backward that brings it uses them: the chunks are computed once. A
 * backward that brings another g computes them again for it (the same
 * bits, twice the time), so any value gives the right gradients; with
 * fixed chunks it is not read. The loss returned is never scaled. The
 * products and the loss's rows follow the matrix precision in every
 * reduction (bf16: as the mean's). */
cg_tensor *cg_linear_cross_entropy(cg_tensor *h, cg_tensor *w, cg_tensor *b,
                                   const cg_tensor *targets, int64_t ignore_index,
                                   float label_smoothing, cg_reduction r, int64_t chunk,
                                   float grad_scale);
/* torch.nn.functional.nll_loss: log-probabilities [..., C] against int64
 * targets (the shape without the class dim, checked), ignore_index,
 * reduction as cg_cross_entropy's. cg_nll_loss(cg_log_softmax(x, -1), ...)
 * equals cg_cross_entropy(x, ...). */
cg_tensor *cg_nll_loss(cg_tensor *logp, const cg_tensor *targets, int64_t ignore_index,
                       cg_reduction r);
/* F.nll_loss(..., weight=): class weights float32 [C] or NULL (NULL:
 * cg_nll_loss). -w[y] logp[y] a kept row; mean over the kept rows' sum
 * of w[y] (as PyTorch; no kept row: NaN). The weights are not
 * differentiated. cg_nll_loss_weighted(cg_log_softmax(x, -1), t, w, ...)
 * equals cg_cross_entropy_weighted(x, t, w, ..., 0, ...). */
cg_tensor *cg_nll_loss_weighted(cg_tensor *logp, const cg_tensor *targets, const cg_tensor *weight,
                                int64_t ignore_index, cg_reduction r);
/* The rest of torch.nn's losses (PyTorch 1.13's definitions, defaults
 * and refusals; r as the losses above: mean, sum or none, batchmean
 * refused). Float inputs of any float dtype, computed as the ops they are
 * made of compute them (bfloat16: each op in float32, rounded), except
 * where a fused kernel is named.
 *
 * F.binary_cross_entropy(p, y, weight=): p probabilities in [0, 1] (any
 * other value, NaN too, refused: "all elements of input should be between
 * 0 and 1"), y of p's shape; -(y log p + (1 - y) log(1 - p)), each log
 * clamped at -100 as PyTorch's (one pointwise node, core/ops.h
 * CG_K_LOSS_BCE: its gradients PyTorch's, (p - y) / max(p (1 - p), 1e-12)
 * for p and log(1 - p) - log p for y); weight NULL or a float tensor that
 * broadcasts to p's shape, not differentiated (PyTorch refuses one that
 * requires grad; cgrad detaches it). bfloat16 is computed in float32 and
 * rounded (PyTorch 1.13 has no bfloat16 kernel). */
cg_tensor *cg_binary_cross_entropy(cg_tensor *p, cg_tensor *y, const cg_tensor *weight,
                                   cg_reduction r);
/* F.poisson_nll_loss(input, target, log_input, full, eps) (F's defaults
 * true, false, 1e-8): exp(input) - target input (log_input), else input -
 * target log(input + eps); full adds the Stirling term target log(target)
 * - target + 0.5 log(2 pi target) where target > 1. Broadcast. */
cg_tensor *cg_poisson_nll_loss(cg_tensor *input, cg_tensor *target, bool log_input, bool full,
                               float eps, cg_reduction r);
/* F.gaussian_nll_loss(input, target, var, full, eps) (defaults false,
 * 1e-6): 0.5 (log v + (input - target)^2 / v) (+ 0.5 log(2 pi) when full),
 * v = max(var, eps) with var's gradient passed through the clamp, as
 * PyTorch's clamp under no_grad (v is var + (v - var) detached, which can
 * differ from eps by an ulp where var < eps / 2). var of input's shape,
 * or of its shape without the last dim (a dim of 1 is added), or with a
 * last dim of 1; another shape refused ("var is of incorrect size"), and
 * a negative entry ("var has negative entry/entries"). Input and target
 * broadcast. */
cg_tensor *cg_gaussian_nll_loss(cg_tensor *input, cg_tensor *target, cg_tensor *var, bool full,
                                float eps, cg_reduction r);
/* F.soft_margin_loss(x, y): log(1 + exp(-y x)), made as softplus(-y x)
 * (cg_softplus, threshold 20: PyTorch's log1p(exp(.)) is inf past -y x =
 * 88, cgrad's the value); y broadcasts to x's shape. */
cg_tensor *cg_soft_margin_loss(cg_tensor *x, cg_tensor *y, cg_reduction r);
/* F.margin_ranking_loss(x1, x2, y, margin) (default 0): max(0, -y (x1 -
 * x2) + margin), broadcast; the three of one number of dims (else refused
 * as PyTorch). */
cg_tensor *cg_margin_ranking_loss(cg_tensor *x1, cg_tensor *x2, cg_tensor *y, float margin,
                                  cg_reduction r);
/* F.hinge_embedding_loss(x, y, margin) (default 1): x where y != -1, plus
 * max(0, margin - x) where y != 1 (y of 1 and -1: one of the two),
 * broadcast. */
cg_tensor *cg_hinge_embedding_loss(cg_tensor *x, cg_tensor *y, float margin, cg_reduction r);
/* F.cosine_embedding_loss(x1, x2, y, margin) (default 0): x1, x2 [N, D]
 * with y [N] or [D] with y 0-d (else refused as PyTorch), cos the cosine
 * of their rows (PyTorch 1.13's: sum x1 x2 / sqrt((|x1|^2 + 1e-12)
 * (|x2|^2 + 1e-12))); 1 - cos where y = 1, max(0, cos - margin) where y =
 * -1, 0 elsewhere. */
cg_tensor *cg_cosine_embedding_loss(cg_tensor *x1, cg_tensor *x2, cg_tensor *y, float margin,
                                    cg_reduction r);
/* F.triplet_margin_loss(a, pos, neg, margin, p, eps, swap) (defaults 1, 2,
 * 1e-6, false): max(0, margin + d(a, pos) - d(a, neg)), d(u, v) = ||u - v
 * + eps||_p over the last dim (F.pairwise_distance); swap: d(a, neg)
 * replaced by min(d(a, neg), d(pos, neg)). The three of one number of
 * dims (else refused as PyTorch), broadcast. p > 0 and finite (PyTorch's
 * p = 0, negative and infinite norms are refused by cgrad); d is
 * cg_pairwise_distance (its gradient 0 where a distance is 0, PyTorch's). */
cg_tensor *cg_triplet_margin_loss(cg_tensor *a, cg_tensor *pos, cg_tensor *neg, float margin,
                                  float p, float eps, bool swap, cg_reduction r);
/* F.multi_margin_loss(x, target, p, margin, weight) (defaults 1, 1, NULL),
 * one fused node (core/ops.h cg_k_multi_margin_loss: x float32 [N, C] or
 * [C], target int64, p 1 or 2, weight float32 [C] or NULL, not
 * differentiated; bfloat16 refused as PyTorch 1.13 refuses it). */
cg_tensor *cg_multi_margin_loss(cg_tensor *x, const cg_tensor *target, int p, float margin,
                                const cg_tensor *weight, cg_reduction r);
/* F.multilabel_soft_margin_loss(x, y, weight): -(y logsigmoid(x) + (1 -
 * y) logsigmoid(-x)) (times weight when not NULL: broadcast and
 * differentiated, as PyTorch's product), summed over the last dim and
 * divided by its size: one a row, then reduced. x of at least 1 dim. */
cg_tensor *cg_multilabel_soft_margin_loss(cg_tensor *x, cg_tensor *y, cg_tensor *weight,
                                          cg_reduction r);
/* F.multilabel_margin_loss(x, target), one fused node (core/ops.h
 * cg_k_multilabel_margin_loss: x float32 [N, C] or [C], target int64 of
 * x's shape, each row's classes up to its first -1). */
cg_tensor *cg_multilabel_margin_loss(cg_tensor *x, const cg_tensor *target, cg_reduction r);
/* F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
 * reduction, zero_infinity) (PyTorch's defaults blank 0, mean, false),
 * nn.CTCLoss's: log_probs float32 [T, N, C] (or [T, C] unbatched)
 * log-softmaxed over C, targets int64 padded [N, S] or concatenated 1-d,
 * the lengths int64 [N] (0-d or [1] unbatched); core/ops.h cg_k_ctc_loss
 * says what it checks. One node for the per-sample losses (its gradient
 * PyTorch's ctc_loss_backward), then graph ops as PyTorch's ctc_loss: with
 * zero_infinity an inf loss (no alignment) becomes 0 and its gradient 0;
 * mean divides each loss by its target length (at least 1) and averages
 * over the batch, sum adds, none keeps one a sample ([N]; 0-d unbatched).
 * Departures: no float64 (cgrad has none); lengths and targets int64 only
 * (PyTorch also takes int32 and lists); an input length of 0 gives 0 or
 * inf as later PyTorch (1.13 reads unwritten memory); negative lengths
 * and labels that are the blank or >= C are refused (1.13 reads out of
 * range or computes nonsense). */
cg_tensor *cg_ctc_loss(cg_tensor *log_probs, const cg_tensor *targets,
                       const cg_tensor *input_lengths, const cg_tensor *target_lengths,
                       int64_t blank, cg_reduction r, bool zero_infinity);

/* ----------------------- masks, grids, uniques (ops_select.c; since 2026-12-08) */
/* torch.masked_select(a, mask): a's elements where mask (bool) holds, a
 * and mask broadcast, 1-d in row-major order, a's dtype (core/ops.h
 * cg_k_masked_select). Differentiable in a: g goes back to where each
 * element came from (summed over a broadcast of a). */
cg_tensor *cg_masked_select(cg_tensor *a, cg_tensor *mask);
/* Tensor.masked_scatter(mask, source) (out of place): a copy of a (a and
 * mask broadcast) with source's first elements, in order, where mask holds
 * (source of a's dtype, at least the mask's true count of elements).
 * Differentiable in a (g with zeros where mask holds) and source (g where
 * mask holds, then zeros, in source's shape), as PyTorch's. */
cg_tensor *cg_masked_scatter(cg_tensor *a, cg_tensor *mask, cg_tensor *source);
/* torch.msort(a): cg_sort along dim 0, the values. */
cg_tensor *cg_msort(cg_tensor *a);
/* torch.meshgrid(*ts, indexing=): n (1 to CG_MAX_DIMS) tensors of one
 * dtype, each 0-d (one element) or 1-d, into out[0, n): each of the shape
 * [len_0, ..., len_n-1] ('ij'; 'xy' swaps the first two) holding tensor i
 * along its dim: views (cg_expand of a reshape), differentiable. false +
 * error (out NULL) on a refusal. */
typedef enum { CG_MESHGRID_IJ = 0, CG_MESHGRID_XY } cg_meshgrid_indexing;
bool cg_meshgrid(cg_tensor *const *ts, int n, cg_meshgrid_indexing indexing, cg_tensor **out);
/* torch.cartesian_prod(*ts): n 1-d tensors of one dtype -> [prod len_i,
 * n], the rows their combinations in order (meshgrid 'ij' flattened and
 * stacked); one tensor: itself (a new reference), as PyTorch. */
cg_tensor *cg_cartesian_prod(cg_tensor *const *ts, int n);
/* torch.rot90(a, k, dims=[dim0, dim1]): a rotated by k quarter turns from
 * dim0 towards dim1 (k taken modulo 4: flips and a transposed view;
 * k = 0: a copy), any dtype, differentiable. At least 2 dims, two
 * different dims. */
cg_tensor *cg_rot90(cg_tensor *a, int64_t k, int dim0, int dim1);
/* torch.unique(x, sorted, return_inverse, return_counts[, dim]) and
 * torch.unique_consecutive(x, return_inverse, return_counts[, dim]): core/
 * ops.h cg_k_unique and friends (*inverse, *counts NULL: not wanted). No
 * gradient: an x that requires grad (grad mode on) is refused in one line
 * (PyTorch computes it, and its backward fails). */
cg_tensor *cg_unique(const cg_tensor *x, bool sorted, cg_tensor **inverse, cg_tensor **counts);
cg_tensor *cg_unique_dim(const cg_tensor *x, int dim, bool sorted, cg_tensor **inverse,
                         cg_tensor **counts);
cg_tensor *cg_unique_consecutive(const cg_tensor *x, cg_tensor **inverse, cg_tensor **counts);
cg_tensor *cg_unique_consecutive_dim(const cg_tensor *x, int dim, cg_tensor **inverse,
                                     cg_tensor **counts);
/* torch.bincount(x, weights, minlength): core/ops.h cg_k_bincount; weights
 * that require grad (grad mode on) refused, as cg_unique's x. */
cg_tensor *cg_bincount(const cg_tensor *x, const cg_tensor *weights, int64_t minlength);

/* --------------- more pointwise ops, diff, trapezoid (ops_pointwise.c; since 2026-12-08) */
/* torch.nan_to_num(a, nan=0.0, posinf=None, neginf=None) (posinf, neginf
 * NULL: the dtype's largest and lowest finite values); the gradient g
 * where a is finite, g * 0 elsewhere (PyTorch's). Integers and bool:
 * copied. */
cg_tensor *cg_nan_to_num(cg_tensor *a, double nan, const double *posinf, const double *neginf);
/* torch.fmod(a, b) (the sign of a) and torch.remainder(a, b) (the sign of
 * b, Python's %): broadcast, promoted as torch.result_type; integers exact
 * (a zero divisor refused); bool refused. The gradient: g to a, -g
 * trunc(a / b) (fmod) or -g floor(a / b) (remainder) to b, PyTorch's. The
 * _scalar forms take a number b as PyTorch takes a Python number: a whole
 * b keeps an integer a's dtype, another b makes it float32 (C cannot tell
 * 2 from 2.0: pass a float tensor for the float op). */
cg_tensor *cg_fmod(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_fmod_scalar(cg_tensor *a, double b);
cg_tensor *cg_remainder(cg_tensor *a, cg_tensor *b);
cg_tensor *cg_remainder_scalar(cg_tensor *a, double b);
/* torch.lerp(start, end, weight): start + weight (end - start), computed
 * as PyTorch (from the nearer end), broadcast; the three of one float
 * dtype. The gradients g (1 - w), g w and g (end - start).
 * cg_lerp_scalar: a number weight (no gradient). */
cg_tensor *cg_lerp(cg_tensor *start, cg_tensor *end, cg_tensor *weight);
cg_tensor *cg_lerp_scalar(cg_tensor *start, cg_tensor *end, float weight);
/* torch.clamp(x, min, max) with tensor bounds (either NULL, not both):
 * broadcast, promoted; NaN where x or a bound is NaN; max where min > max.
 * The gradients PyTorch's: x gets g where min <= x <= max (a bound
 * included), min where x < min < max, max where x > max or max < min.
 * cg_clamp(x, lo, hi) keeps the number bounds. */
cg_tensor *cg_clamp_tensor(cg_tensor *x, cg_tensor *min, cg_tensor *max);
/* torch.linalg.cross(a, b, dim) and torch.cross(a, b, dim): the cross
 * product along dim (size 3 in both; negative counts from the end), a and
 * b of one number of dims (the rest broadcast) and one dtype (not bool).
 * The gradients cross(b, g) and cross(g, a). torch.cross without dim (the
 * first dim of size 3, deprecated) has no form here: name the dim. */
cg_tensor *cg_cross(cg_tensor *a, cg_tensor *b, int dim);
/* torch.diff(a, n, dim, prepend, append) (PyTorch's defaults 1, -1, None,
 * None): prepend and append (NULL: none; a's number of dims, a's other
 * sizes) joined to a along dim (cg_concat, promoted), then the forward
 * difference n times (bool: xor), each a step shorter (to 0); n = 0: a
 * copy of a, the ends left out (PyTorch's, which checks their dims). Floats through cg_narrow and cg_sub (their gradients);
 * integers and bool exact, no gradient. A negative n is refused (PyTorch
 * 1.13 returns the input). */
cg_tensor *cg_diff(cg_tensor *a, int64_t n, int dim, cg_tensor *prepend, cg_tensor *append);
/* torch.trapezoid(y, dx=1, dim=-1) and torch.trapezoid(y, x, dim=-1): the
 * trapezoidal rule along dim, (sum(y) - (y_0 + y_last) / 2) dx or the sum
 * of (y_i + y_i+1) (x_i+1 - x_i) / 2 (x 1-d along dim, or broadcasting
 * with y), made of the graph's ops (their gradients, to y and x). An
 * integer y or x is converted to the other's float dtype (both integers:
 * float32), as PyTorch's result dtype; bool refused; no samples: zeros of
 * y's dtype. */
cg_tensor *cg_trapezoid(cg_tensor *y, double dx, int dim);
cg_tensor *cg_trapezoid_x(cg_tensor *y, cg_tensor *x, int dim);

#ifdef __cplusplus
}
#endif
#endif
