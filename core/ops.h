/* cgrad core: kernels. Raw math on strided tensors, no graph recording.
 *
 * Dtypes: the float math computes in float32; bfloat16 and float16 inputs
 * of the elementwise math, reductions, softmax and matmul are converted to
 * float32 and the result rounded to their promoted dtype (as PyTorch's CPU
 * kernels do); the other float kernels take float32 (cg_to first). An
 * integer or bool tensor given to a float kernel is refused in one line
 * naming the op, the argument and both dtypes. Shape ops (concat, stack,
 * split, index_select, where, masked_fill, ...) and comparisons take every
 * dtype.
 *
 * Every function here returns a new tensor (caller owns it, see tensor.h)
 * or NULL with an error message naming the op and the shapes. Inputs may
 * have any strides, including 0 (broadcast views); outputs are contiguous.
 * Binary ops broadcast by NumPy rules. Functions ending in '_' write into
 * their first argument instead and return a bool.
 *
 * Determinism: every kernel gives bit-identical results for any number of
 * OpenMP threads (each output element is computed by one thread in a fixed
 * order; full reductions sum fixed-size blocks, then the blocks in order).
 *
 * The autograd layer (autograd/ops.h) wraps these with backward rules;
 * kernels whose name ends in _backward exist for those rules. */
#ifndef CG_OPS_H
#define CG_OPS_H

#include "../core/gemm.h"
#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------ unary ops, one row each */
/* The elementwise unary ops whose derivative is a function of the input:
 * one row each, from which everything mechanical is made (the kernels and
 * their declarations here, the op-table row in autograd/autograd.h, the
 * differentiable op and its backward in autograd/ops_misc.c and its
 * declaration in autograd/ops.h). A row
 *   OP(A, ENUM, name, forward, backward)
 * gives cg_k_<name>(x) and cg_k_<name>_backward(x, g) (core/elementwise.c),
 * cg_<name>(x) and the op CG_OP_<ENUM> (autograd), whose backward reads x.
 *   forward   the output element: a float expression of X, the input element
 *   backward  dL/dx: a float expression of X and Y, the upstream gradient
 * The expressions may call the helpers of core/elementwise_impl.h (f_sigmoid,
 * f_gelu, ...) and of core/vmath.h; they are compiled into the vectorised
 * segment kernels there (EW_UNARY, EW_BINARY). A is passed through to OP
 * untouched (for a table that nests this one). A new row also needs its
 * value test (tests/test_elementwise.c, ROW_REF) and its gradcheck
 * (tests/test_grad_ops.c, op_checks): both tables are indexed by the op and
 * a test fails, naming it, where its entry is missing. docs/autograd.md,
 * "Adding an op". */
/* clang-format off */
#define CG_UNARY_OPS(OP, A)                                                      \
    /* max(x, 0); the gradient at 0 is 0, as PyTorch's */                        \
    OP(A, RELU, relu, f_relu(X), X > 0.0f ? Y : 0.0f)                            \
    /* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */       \
    OP(A, GELU, gelu, f_gelu(X), Y * f_gelu_grad(X))                             \
    /* GELU, exact: x Phi(x), PyTorch's default (approximate='none') */          \
    OP(A, GELU_ERF, gelu_erf, f_gelu_erf(X), Y * f_gelu_erf_grad(X))             \
    OP(A, ABS, abs, fabsf(X), X > 0.0f ? Y : (X < 0.0f ? -Y : 0.0f))             \
    /* SiLU (swish): x sigmoid(x); d/dx = s (1 + x (1 - s)) */                   \
    OP(A, SILU, silu, X * f_sigmoid(X),                                          \
       Y * f_sigmoid(X) * (1.0f + X * (1.0f - f_sigmoid(X))))                    \
    OP(A, SIN, sin, sinf(X), Y * cosf(X))                                        \
    OP(A, COS, cos, cosf(X), -(Y * sinf(X)))                                     \
    /* Since 2026-12-07, the rest of torch.nn's activations without              \
     * parameters, each PyTorch 1.13's expressions (forward and backward)        \
     * and so its values at kinks and NaN. F.mish: x tanh(softplus(x)) */        \
    OP(A, MISH, mish, X * tanhf(log1pf(expf(X))), Y * f_mish_grad(X))            \
    /* F.hardswish: x relu6(x + 3) / 6; the gradient 0 below -3, x/3 + 1/2       \
     * up to 3 (both ends included), 1 above (and at NaN) */                     \
    OP(A, HARDSWISH, hardswish, X * f_clamp(X + 3.0f, 0.0f, 6.0f) / 6.0f,        \
       X < -3.0f ? 0.0f : (X <= 3.0f ? Y * (X / 3.0f + 0.5f) : Y))               \
    /* F.hardsigmoid: relu6(x + 3) / 6; the gradient 1/6 strictly inside         \
     * (-3, 3), 0 elsewhere */                                                   \
    OP(A, HARDSIGMOID, hardsigmoid, f_clamp(X + 3.0f, 0.0f, 6.0f) / 6.0f,        \
       X > -3.0f && X < 3.0f ? Y * (1.0f / 6.0f) : 0.0f)                         \
    /* F.relu6: hardtanh(x, 0, 6); the gradient 0 at 0 and 6 */                  \
    OP(A, RELU6, relu6, f_clamp(X, 0.0f, 6.0f),                                  \
       X <= 0.0f || X >= 6.0f ? 0.0f : Y)                                        \
    /* F.selu: scale (x > 0 ? x : alpha (e^x - 1)), alpha and scale the          \
     * self-normalising constants (CG_SELU_*) */                                 \
    OP(A, SELU, selu, X <= 0.0f ? expm1f(X) * CG_SELU_NEG : X * CG_SELU_SCALE,   \
       X <= 0.0f ? Y * CG_SELU_NEG * expf(X) : Y * CG_SELU_SCALE)                \
    /* F.softsign: x / (1 + |x|); the gradient as PyTorch's autograd sums        \
     * it (NaN at +-inf, where the output is NaN too) */                         \
    OP(A, SOFTSIGN, softsign, X / (1.0f + fabsf(X)), f_softsign_grad(X, Y))      \
    /* F.logsigmoid: log(sigmoid(x)) = min(x, 0) - log1p(e^-|x|), stable */      \
    OP(A, LOGSIGMOID, logsigmoid,                                                \
       (X < 0.0f ? X : 0.0f) - log1pf(expf(-fabsf(X))),                          \
       Y * f_logsigmoid_grad(X))                                                 \
    /* F.tanhshrink: x - tanh(x); the gradient as PyTorch's autograd sums it,    \
     * g - g (1 - tanh^2) */                                                     \
    OP(A, TANHSHRINK, tanhshrink, X - tanhf(X),                                  \
       Y - Y * (1.0f - tanhf(X) * tanhf(X)))                                     \
    /* torch.erf; d/dx = 2 / sqrt(pi) e^(-x^2) (since 2026-12-08: GELU's         \
     * exact form is differentiated twice through it) */                         \
    OP(A, ERF, erf, erff(X), Y * (1.1283791670955126f * expf(-X * X)))
/* clang-format on */
#define CG_UNARY_DECLARE_K_(A, E, name, fwd, bwd) \
    cg_tensor *cg_k_##name(const cg_tensor *a);   \
    cg_tensor *cg_k_##name##_backward(const cg_tensor *x, const cg_tensor *g);

/* ----------------------------- unary ops with parameters, one row each */
/* The elementwise unary ops with one or two float parameters, one row each
 * as CG_UNARY_OPS's, the parameters' names last:
 *   OP(A, ENUM, name, forward, backward, rule, p0[, p1])
 * gives cg_k_<name>(x, p0[, p1]) and cg_k_<name>_backward(x, g, p0[, p1])
 * (core/elementwise.c), cg_<name>(x, p0[, p1]) and the op CG_OP_<ENUM>
 * (autograd/ops_misc.c: the node keeps the parameters, its backward reads
 * x). The expressions read the parameters by their names (float locals of
 * the segment kernels: any names but theirs, X, Y, P, ctx, p, s, n, o, x,
 * y, i, os, xs, ys). rule is CG_PARAM_ANY or CG_PARAM_RULE(condition,
 * "what it asks"), a condition on the parameters under which the kernels
 * run: otherwise they refuse in one line, "celu: alpha cannot be 0 (got
 * alpha 0)", as PyTorch refuses those values. A new row
 * needs its value test (tests/test_elementwise.c, PROW_REF) and its
 * gradcheck (op_checks), as CG_UNARY_OPS's. PyTorch's defaults are in the
 * comments (C has none: pass them). */
#define CG_PARAM_RULE(cond, text) (cond, text)
#define CG_PARAM_ANY (true, "")
#define CG_PARAM_RULE_COND_(cond, text) (cond)
#define CG_PARAM_RULE_TEXT_(cond, text) text
/* F.selu's constants (PyTorch's, rounded to float): alpha scale and scale */
#define CG_SELU_NEG (1.6732632423543772848170429916717f * 1.0507009873554804934193349852946f)
#define CG_SELU_SCALE 1.0507009873554804934193349852946f
/* clang-format off */
#define CG_UNARY_PARAM_OPS(OP, A)                                                \
    /* F.leaky_relu(x, negative_slope=0.01): x > 0 ? x : slope x; the            \
     * gradient at 0 (and at NaN) is the slope, as PyTorch's */                  \
    OP(A, LEAKY_RELU, leaky_relu, X > 0.0f ? X : X * negative_slope,             \
       X > 0.0f ? Y : Y * negative_slope, CG_PARAM_ANY, negative_slope)          \
    /* F.elu(x, alpha=1.0): x <= 0 ? alpha (e^x - 1) : x; the gradient at 0      \
     * is alpha, at NaN 1, as PyTorch's (its not-in-place ELU) */                \
    OP(A, ELU, elu, X <= 0.0f ? alpha * expm1f(X) : X,                           \
       X <= 0.0f ? Y * alpha * expf(X) : Y, CG_PARAM_ANY, alpha)                 \
    /* F.softplus(x, beta=1, threshold=20): log(1 + e^(beta x)) / beta, x        \
     * itself where beta x > threshold; the gradient PyTorch's expression        \
     * (NaN where beta x is between 88.7 and a larger threshold, as there)       \
     * and beta 1, threshold 20 the bits of the row it was until 2026-12 */      \
    OP(A, SOFTPLUS, softplus, X * beta > threshold ? X : log1pf(expf(X * beta)) / beta, \
       X * beta > threshold ? Y : Y * expf(X * beta) / (expf(X * beta) + 1.0f),  \
       CG_PARAM_ANY, beta, threshold)                                            \
    /* F.hardtanh(x, min_val=-1.0, max_val=1.0): x clamped; the gradient 0       \
     * at and beyond the bounds, g at NaN */                                     \
    OP(A, HARDTANH, hardtanh, f_clamp(X, min_val, max_val),                      \
       X <= min_val || X >= max_val ? 0.0f : Y,                                  \
       CG_PARAM_RULE(min_val <= max_val, "min_val must be at most max_val"),     \
       min_val, max_val)                                                         \
    /* F.celu(x, alpha=1.0): x <= 0 ? alpha (e^(x/alpha) - 1) : x, the           \
     * quotient as PyTorch's, x (1/alpha) */                                     \
    OP(A, CELU, celu, X <= 0.0f ? expm1f(X * (1.0f / alpha)) * alpha : X,        \
       X <= 0.0f ? Y * (1.0f / alpha) * alpha * expf(X * (1.0f / alpha)) : Y,    \
       CG_PARAM_RULE(alpha != 0.0f, "alpha cannot be 0"), alpha)                 \
    /* F.softshrink(x, lambd=0.5): x - lambd above lambd, x + lambd below        \
     * -lambd, 0 between (and at NaN, as PyTorch's); the gradient 0 on           \
     * [-lambd, lambd] */                                                        \
    OP(A, SOFTSHRINK, softshrink,                                                \
       X > lambd ? X - lambd : (X < -lambd ? X + lambd : 0.0f),                  \
       X >= -lambd && X <= lambd ? 0.0f : Y,                                     \
       CG_PARAM_RULE(lambd >= 0.0f, "lambd must be at least 0"), lambd)          \
    /* F.hardshrink(x, lambd=0.5): 0 on [-lambd, lambd], x elsewhere */          \
    OP(A, HARDSHRINK, hardshrink, X >= -lambd && X <= lambd ? 0.0f : X,          \
       X >= -lambd && X <= lambd ? 0.0f : Y, CG_PARAM_ANY, lambd)                \
    /* F.threshold(x, threshold, value): value where x <= threshold, x           \
     * elsewhere; the gradient 0 where x <= threshold */                         \
    OP(A, THRESHOLD, threshold, X <= threshold ? value : X,                      \
       X <= threshold ? 0.0f : Y, CG_PARAM_ANY, threshold, value)
/* clang-format on */
/* A row's parameters (one or two names) as a declaration, float p0[,
 * float p1]; as the two floats the kernels carry, p0, p1 (p0, 0 for one);
 * as the values of an array of two, a[0][, a[1]]; and as float locals
 * made from two values, const float p0 = v0[, p1 = v1]. */
#define CG_PARAMS_N_(_1, _2, N, ...) N
#define CG_PARAMS_PASTE_(a, b) a##b
#define CG_PARAMS_CAT_(a, b) CG_PARAMS_PASTE_(a, b) /* b expanded first */
#define CG_PARAMS_SEL_(m, ...) CG_PARAMS_CAT_(m, CG_PARAMS_N_(__VA_ARGS__, 2, 1, 0))
#define CG_PARAMS_DECL_1(a) float a
#define CG_PARAMS_DECL_2(a, b) float a, float b
#define CG_PARAMS_DECL(...) CG_PARAMS_SEL_(CG_PARAMS_DECL_, __VA_ARGS__)(__VA_ARGS__)
#define CG_PARAMS_PAIR_1(a) a, 0.0f
#define CG_PARAMS_PAIR_2(a, b) a, b
#define CG_PARAMS_PAIR(...) CG_PARAMS_SEL_(CG_PARAMS_PAIR_, __VA_ARGS__)(__VA_ARGS__)
#define CG_PARAMS_AT_1(v, a) (v)[0]
#define CG_PARAMS_AT_2(v, a, b) (v)[0], (v)[1]
#define CG_PARAMS_AT(v, ...) CG_PARAMS_SEL_(CG_PARAMS_AT_, __VA_ARGS__)(v, __VA_ARGS__)
#define CG_PARAMS_LOCALS_1(v0, v1, a) \
    const float a = (v0);             \
    (void)a
#define CG_PARAMS_LOCALS_2(v0, v1, a, b) \
    const float a = (v0), b = (v1);      \
    (void)a, (void)b
#define CG_PARAMS_LOCALS(v0, v1, ...) \
    CG_PARAMS_SEL_(CG_PARAMS_LOCALS_, __VA_ARGS__)(v0, v1, __VA_ARGS__)
#define CG_UNARY_PARAM_DECLARE_K_(A, E, name, fwd, bwd, rule, ...)            \
    cg_tensor *cg_k_##name(const cg_tensor *a, CG_PARAMS_DECL(__VA_ARGS__));  \
    cg_tensor *cg_k_##name##_backward(const cg_tensor *x, const cg_tensor *g, \
                                      CG_PARAMS_DECL(__VA_ARGS__));

/* -------------------------------------------------------- elementwise */
cg_tensor *cg_k_add(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_k_sub(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_k_mul(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_k_div(const cg_tensor *a, const cg_tensor *b);
/* a + s, a * s */
cg_tensor *cg_k_adds(const cg_tensor *a, float s);
cg_tensor *cg_k_muls(const cg_tensor *a, float s);
/* torch.maximum / torch.minimum: a and b broadcast (promoted as the other
 * binary ops); NaN where either is NaN; a tie gives a's value (its sign of
 * zero, as std::max and std::min). */
cg_tensor *cg_k_maximum(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_k_minimum(const cg_tensor *a, const cg_tensor *b);
/* The gradient of the operand x of maximum(x, y) (minimum when minimum)
 * given g, PyTorch's rule: g where x wins (and where either is NaN), g / 2
 * at a tie, 0 where y wins; x, y and g broadcast together (the result has
 * their shape: the engine sums it to x's). y's gradient is this with x and
 * y swapped. */
cg_tensor *cg_k_maximum_backward(const cg_tensor *x, const cg_tensor *y, const cg_tensor *g,
                                 bool minimum);
/* a*alpha + b*beta (broadcast); a handy fused form for backward rules. */
cg_tensor *cg_k_axpby(const cg_tensor *a, float alpha, const cg_tensor *b, float beta);

cg_tensor *cg_k_neg(const cg_tensor *a);
cg_tensor *cg_k_exp(const cg_tensor *a);
cg_tensor *cg_k_log(const cg_tensor *a);
cg_tensor *cg_k_sqrt(const cg_tensor *a);
cg_tensor *cg_k_rsqrt(const cg_tensor *a);
cg_tensor *cg_k_pow(const cg_tensor *a, float p);
cg_tensor *cg_k_tanh(const cg_tensor *a);
cg_tensor *cg_k_sigmoid(const cg_tensor *a);
/* The unary ops of CG_UNARY_OPS (below): cg_k_relu, cg_k_gelu, ... and
 * their cg_k_relu_backward, ... */
CG_UNARY_OPS(CG_UNARY_DECLARE_K_, ~)
/* and those of CG_UNARY_PARAM_OPS: cg_k_leaky_relu(a, negative_slope),
 * cg_k_elu(a, alpha), cg_k_softplus(a, beta, threshold), their backwards */
CG_UNARY_PARAM_OPS(CG_UNARY_PARAM_DECLARE_K_, ~)
/* The gate of a gated feed-forward (SwiGLU, GEGLU; core/gated.c):
 * act(a) * b elementwise, act SiLU (x sigmoid(x)) or GELU's tanh form
 * (cg_k_gelu's function). a and b: one shape (no broadcasting), one dtype,
 * float32 or bfloat16, any strides (a copy when not contiguous; a
 * contiguous bfloat16 operand is read as it is, a run at a time widened);
 * the result is contiguous, of that dtype (bf16: computed in float32,
 * rounded once). The backward gives da = g b act'(a) and db = g act(a)
 * (either pointer NULL: not made), in a's dtype; g float32 or bfloat16 of
 * a's shape. One pass each, OpenMP over fixed runs of elements: the same
 * bits for any thread count. */
/* CG_K_GATE_SIGMOID: act(a) = sigmoid(a), F.glu's gate (autograd's cg_glu
 * passes its halves swapped: glu(x) = x1 * sigmoid(x2) = act(x2) * x1). */
typedef enum { CG_K_GATE_SILU, CG_K_GATE_GELU, CG_K_GATE_SIGMOID } cg_k_gate;
cg_tensor *cg_k_gated(const cg_tensor *a, const cg_tensor *b, cg_k_gate act);
bool cg_k_gated_backward(const cg_tensor *a, const cg_tensor *b, const cg_tensor *g, cg_k_gate act,
                         cg_tensor **da, cg_tensor **db);
/* The same over the two halves of one tensor h [..., 2n] (one product's
 * output): act(h[..., :n]) * h[..., n:] -> [..., n], and the backward's
 * gradient of h, [..., 2n], both halves written in one pass. h and g as
 * a and g above (no float copy of a bfloat16 h: autograd's gate keeps h so
 * in bf16 precision). The output has h's dtype;
 * the gradient is bfloat16 only when h and g both are (PyTorch's
 * promotion), else float32. */
cg_tensor *cg_k_gated_halves(const cg_tensor *h, cg_k_gate act);
cg_tensor *cg_k_gated_halves_backward(const cg_tensor *h, const cg_tensor *g, cg_k_gate act);
/* F.prelu(x, weight) (core/prelu.c): x > 0 ? x : a x, a the weight's
 * element of x's channel, x of any float dtype and strides. The channels
 * are x's dim 1, and an input of fewer than 2 dims has 1 (PyTorch 1.13's
 * rule: a [3] input takes a weight of 1 element, not 3); the weight is 0-d
 * or 1-d, of 1 element or one per channel, else refused in one line. The
 * result is contiguous, in x's dtype (computed in float32, rounded once).
 * The backward: dx = x > 0 ? g : a g (the slope at 0, as PyTorch's), in
 * x's dtype, and dw (float32, w's shape) the sum over every other dim of
 * g x where x <= 0, per row of x's last dims in double, then over the
 * rows in order: the same bits for any thread count. Either pointer NULL:
 * not made. */
cg_tensor *cg_k_prelu(const cg_tensor *x, const cg_tensor *w);
bool cg_k_prelu_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *g, cg_tensor **dx,
                         cg_tensor **dw);
/* F.rrelu(x, lower, upper, training): with rng (training), element i's
 * slope a_i drawn uniformly in [lower, upper] from rng (counter-based: rng
 * advances by numel(x), the same draws for any thread count; where x > 0
 * the draw is taken and unused), y = x > 0 ? x : a_i x, and *noise
 * (float32, contiguous, x's shape) the factor of each element (1 or a_i):
 * the backward is g noise. Without rng (evaluation): cg_k_leaky_relu(x,
 * cg_k_rrelu_slope(lower, upper)), *noise NULL. lower > upper (or NaN) is
 * refused: "rrelu: lower 0.5 must not exceed upper 0.2"
 * (cg_k_rrelu_bounds_ok: false + that line). y in x's dtype. */
cg_tensor *cg_k_rrelu(const cg_tensor *x, float lower, float upper, cg_rng *rng, cg_tensor **noise);
bool cg_k_rrelu_bounds_ok(float lower, float upper);
/* (lower + upper) / 2 in double, rounded to float: PyTorch's evaluation
 * slope */
float cg_k_rrelu_slope(float lower, float upper);
/* The fused cells of torch.nn.GRU and torch.nn.LSTM (core/rnn_cell.c),
 * float32, 2-d operands whose rows may be strided (last dim contiguous;
 * else copied); one pass over the rows, OpenMP over fixed chunks of rows:
 * the same bits for any thread count, and those of the cell made of
 * cgrad's ops (add, sigmoid, tanh, mul).
 * GRU: gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh [B, 3H] (gates r, z,
 * n), h [B, H] -> h' [B, H]:
 *   r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
 *   n = tanh(gi_n + r gh_n), h' = (1 - z) n + z h (computed n + z (h - n)).
 * Its backward from g [B, H]: dgi, dgh [B, 3H] and dh [B, H] (a pointer
 * NULL: not wanted). */
cg_tensor *cg_k_gru_cell(const cg_tensor *gi, const cg_tensor *gh, const cg_tensor *h);
bool cg_k_gru_cell_backward(const cg_tensor *gi, const cg_tensor *gh, const cg_tensor *h,
                            const cg_tensor *g, cg_tensor **dgi, cg_tensor **dgh, cg_tensor **dh);
/* LSTM: the summed pre-activations gates = x W_ih^T + b_ih + h W_hh^T +
 * b_hh [B, 4H] (gates i, f, g, o) and c [B, H] -> [h' | c'] [B, 2H]:
 *   c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c').
 * Its backward from g [B, 2H] (h''s gradient, then c''s): dgates [B, 4H]
 * and dc [B, H]. */
cg_tensor *cg_k_lstm_cell(const cg_tensor *gates, const cg_tensor *c);
bool cg_k_lstm_cell_backward(const cg_tensor *gates, const cg_tensor *c, const cg_tensor *g,
                             cg_tensor **dgates, cg_tensor **dc);
/* Rotary position embeddings (core/rope.c: RoFormer's rotation in the
 * rotate-half pairing of GPT-NeoX and Hugging Face's LLaMA): along the last
 * dim D (even, h = D/2) of x [..., T, D], the row at position start + t
 * (t its index along dim -2) has each pair (i, i + h) rotated by the angle
 * (start + t) theta^(-2i/D); inverse: by its negative (the backward).
 * float32 or bfloat16, any strides; the result contiguous, of x's dtype
 * (bf16: computed in float32, rounded once). start >= 0, theta > 1 (10000
 * in RoFormer and LLaMA). OpenMP over rows: the same bits for any team. */
cg_tensor *cg_k_rope(const cg_tensor *x, int64_t start, double theta, bool inverse);
/* cg_k_rope's forward for an output that bf16 products read (attention's q
 * and k in training): in bf16 precision it also rounds each row as it
 * writes it and keeps the rounding as the output's operand
 * (cg_k_bf16_operand_keep), instead of another pass over the output. The
 * same bits as cg_k_rope(x, start, theta, false). */
cg_tensor *cg_k_rope_keep_bf16(const cg_tensor *x, int64_t start, double theta);
cg_tensor *cg_k_clamp(const cg_tensor *a, float lo, float hi);
/* cond ? a : b, all three broadcast together; cond is bool (another
 * dtype refused, as torch.where refuses it); a and b of any dtypes, the
 * result of their promoted dtype. */
cg_tensor *cg_k_where(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b);
/* mask ? value : a; mask (bool; another dtype refused) broadcasts to a's
 * shape; a of any dtype (value converted to it). */
cg_tensor *cg_k_masked_fill(const cg_tensor *a, const cg_tensor *mask, float value);

/* Backward helper: given the input x and upstream gradient g (same shape),
 * return dL/dx. */
cg_tensor *cg_k_clamp_backward(const cg_tensor *x, const cg_tensor *g, float lo, float hi);

/* dst += src (src broadcasts to dst's shape). */
bool cg_k_add_(cg_tensor *dst, const cg_tensor *src);
/* dst *= s */
bool cg_k_muls_(cg_tensor *dst, float s);
/* dst = relu(dst): the bits of cg_k_relu, written over its input. */
bool cg_k_relu_(cg_tensor *dst);
/* ReLU's mask, a > 0 (NaN and -0 false), as a bool tensor (a float32, any
 * strides), and the gradient g where the mask holds, 0 elsewhere (same
 * shapes): cg_k_relu_backward(a, g)'s bits, from a byte an element. */
cg_tensor *cg_k_relu_mask(const cg_tensor *a);
/* A new tensor of dtype dt made from x (float32, any strides) by conv(n,
 * x, y) over runs of 16,384 elements (y: the run's first element of the
 * result), the runs split among threads: for conversions whose elements do
 * not depend on the run (the mask above, the bf16 copies of
 * cg_k_bf16_operand). The result has x's strides when x is dense
 * (cg_is_dense: split attention heads are read in place), and is
 * contiguous otherwise. */
cg_tensor *cg_k_map_runs(const cg_tensor *x, cg_dtype dt,
                         void (*conv)(int64_t n, const float *x, void *y));
cg_tensor *cg_k_relu_mask_backward(const cg_tensor *mask, const cg_tensor *g);

/* ------------------------------------- comparisons and logic (any dtype) */
/* torch.eq, ne, lt, le, gt, ge: a and b broadcast; integers and bool
 * compare exactly (as int64), anything else as numbers (NaN is unequal to
 * everything). The _scalar forms compare with one number, as `ids == 0`.
 * torch.logical_and / or / not: nonzero (NaN included) is true. Every
 * result is a new bool tensor; nothing here is differentiable (no k_: they
 * record nothing and need no autograd twin). */
cg_tensor *cg_eq(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_ne(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_lt(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_le(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_gt(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_ge(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_eq_scalar(const cg_tensor *a, double v);
cg_tensor *cg_ne_scalar(const cg_tensor *a, double v);
cg_tensor *cg_lt_scalar(const cg_tensor *a, double v);
cg_tensor *cg_le_scalar(const cg_tensor *a, double v);
cg_tensor *cg_gt_scalar(const cg_tensor *a, double v);
cg_tensor *cg_ge_scalar(const cg_tensor *a, double v);
cg_tensor *cg_logical_and(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_logical_or(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_logical_not(const cg_tensor *a);
/* torch.nonzero(a) (as_tuple=False): the coordinates of a's nonzero
 * elements (NaN and true included), an int64 tensor [count, ndim] in
 * row-major order; a of any dtype and layout (0-d: [0 or 1, 0]). Column k
 * is torch.where(a)[k]: cg_select(cg_nonzero(mask), 1, k), e.g. the tokens
 * routed to an expert (an index for cg_index_select and cg_index_add). */
cg_tensor *cg_nonzero(const cg_tensor *a);

/* --------------------------------------------------------- reductions */
/* Reduce over ndims dims listed in dims (negative allowed; duplicates are an
 * error). ndims == 0 (dims may be NULL) reduces over all dims. keepdim keeps
 * reduced dims as size 1. */
cg_tensor *cg_k_sum(const cg_tensor *a, int ndims, const int *dims, bool keepdim);
cg_tensor *cg_k_mean(const cg_tensor *a, int ndims, const int *dims, bool keepdim);
/* Variance with the given correction (0 = biased, 1 = unbiased). */
cg_tensor *cg_k_var(const cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim);
/* Its square root (torch.std), taken in double and rounded once. */
cg_tensor *cg_k_std(const cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim);
/* Max along one dim; *indices (if not NULL) receives the argmax as an
 * int64 tensor of the same shape as the result (first maximum wins; NaN
 * counts as the maximum, as in PyTorch). cg_k_argmax: those indices.
 * cg_k_min and cg_k_argmin: the same for the minimum (first minimum wins;
 * NaN counts as the minimum too, as torch.min). One implementation. */
cg_tensor *cg_k_max(const cg_tensor *a, int dim, bool keepdim, cg_tensor **indices);
cg_tensor *cg_k_argmax(const cg_tensor *a, int dim, bool keepdim);
cg_tensor *cg_k_min(const cg_tensor *a, int dim, bool keepdim, cg_tensor **indices);
cg_tensor *cg_k_argmin(const cg_tensor *a, int dim, bool keepdim);
/* torch.logsumexp(a, dims, keepdim): log(sum(exp(a))) over the dims (as
 * cg_k_sum takes them; ndims 0: all), shifted by the maximum, by 0 where it
 * is infinite, as PyTorch: every element -inf (or none) gives -inf, a +inf
 * gives +inf, a NaN NaN. Each output's row summed in double in order; one
 * row a task: the same bits for any thread count. */
cg_tensor *cg_k_logsumexp(const cg_tensor *a, int ndims, const int *dims, bool keepdim);
/* Its backward: g exp(x - lse), with g and lse the result's gradient and
 * the result with the reduced dims kept (size 1: they broadcast to x); 0
 * where lse is -inf (PyTorch: NaN). */
cg_tensor *cg_k_logsumexp_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *lse);
/* Full reductions to a scalar (ndim 0). */
cg_tensor *cg_k_sum_all(const cg_tensor *a);
cg_tensor *cg_k_max_all(const cg_tensor *a);
/* Sum a (broadcast) gradient back to a shape that broadcasts to a's shape:
 * the backward of broadcasting. */
cg_tensor *cg_k_sum_to_shape(const cg_tensor *a, int ndim, const int64_t *shape);

/* --------------------------------------------------------------- matmul */
/* PyTorch's matmul for ndim >= 2 on both sides: [..., n, k] @ [..., k, m]
 * with broadcast batch dims. 1-D operands are treated as in PyTorch
 * (prepended/appended 1, removed from the result). Strided and transposed
 * views go to BLIS without copies when BLIS can read them as they are. */
cg_tensor *cg_k_matmul(const cg_tensor *a, const cg_tensor *b);
/* C = alpha * op(A) @ op(B) + beta * C for 2-D or batched (same batch shape)
 * views, written in place into c (any strides BLIS accepts). For backward
 * rules that accumulate. An operand that shares c's memory (c = a @ b
 * into a) is read as it was before the call (copied first, as NumPy's
 * matmul(a, b, out=a) does). */
bool cg_k_matmul_into(cg_tensor *c, const cg_tensor *a, const cg_tensor *b, float alpha,
                      float beta);

/* ------------------------------------------------- softmax and friends */
cg_tensor *cg_k_softmax(const cg_tensor *a, int dim);
cg_tensor *cg_k_log_softmax(const cg_tensor *a, int dim);
/* Given y = softmax(x) and g = dL/dy: dL/dx = y * (g - sum(g*y, dim)). */
cg_tensor *cg_k_softmax_backward(const cg_tensor *y, const cg_tensor *g, int dim);
/* Given y = log_softmax(x) and g: dL/dx = g - exp(y) * sum(g, dim). */
cg_tensor *cg_k_log_softmax_backward(const cg_tensor *y, const cg_tensor *g, int dim);

/* A loss's reduction, torch.nn.functional's reduction=: the mean of the
 * losses, their sum, none (the losses themselves: of the inputs' shape,
 * or for the class losses one a row, 0 at an ignored row), or (kl_div's
 * alone) batchmean, their sum over the size of dim 0 (a 0-d input: the
 * sum), as F.kl_div's. The class losses' mean is over the kept rows. */
typedef enum {
    CG_REDUCTION_MEAN,
    CG_REDUCTION_SUM,
    CG_REDUCTION_NONE,
    CG_REDUCTION_BATCHMEAN
} cg_reduction;

/* The pointwise losses, before their reduction (autograd/ops.h reduces
 * them): x the input and y the target, broadcast and promoted as the
 * binary ops (float dtypes), p beta (smooth_l1) or delta (huber):
 *   L1          |x - y|                                   F.l1_loss
 *   SMOOTH_L1   |d| < p ? 0.5 d^2 / p : |d| - 0.5 p        F.smooth_l1_loss
 *   HUBER       |d| < p ? 0.5 d^2 : p (|d| - 0.5 p)        F.huber_loss
 *   KL_DIV      xlogy(y, y) - y x                          F.kl_div
 *   KL_DIV_LOG  e^y (y - x)                                F.kl_div, log_target
 * (d = x - y). cg_k_loss_backward: the gradient of the input (target
 * false) or of the target, given g of the broadcast shape: PyTorch's
 * expressions, its values at the kinks and at NaN included (l1's gradient
 * is sgn(d) g, 0 at d = 0 and at NaN; smooth_l1's with beta 0 is -g at
 * d = 0, PyTorch's; kl_div's of the target NaN at y = 0, as there), and
 *   MSE         d^2                                       F.mse_loss
 *   BCE_LOGITS  max(x, 0) - x y + log(1 + e^-|x|)         F.binary_cross_entropy_with_logits
 * (BCE_LOGITS computed in double and rounded once; at an infinite x its
 * limit, (1 - y) x or -y x, 0 where the factor is 0, where PyTorch 1.13
 * gives NaN at x = -inf and at x = +inf, y = 1; its gradients (sigmoid(x)
 * - y) g and -x g), and
 *   BCE         -(y max(log x, -100) + (1 - y) max(log(1 - x), -100))
 *                                                         F.binary_cross_entropy
 * (x probabilities, checked by the caller; the logs clamped at -100 as
 * PyTorch's; its gradients PyTorch 1.13's, (x - y) g / max((1 - x) x,
 * 1e-12) and (log(1 - x) - log x) g, unclamped). */
typedef enum {
    CG_K_LOSS_L1,
    CG_K_LOSS_SMOOTH_L1,
    CG_K_LOSS_HUBER,
    CG_K_LOSS_MSE,
    CG_K_LOSS_BCE_LOGITS,
    CG_K_LOSS_KL_DIV,
    CG_K_LOSS_KL_DIV_LOG,
    CG_K_LOSS_BCE
} cg_k_loss_kind;
cg_tensor *cg_k_loss(cg_k_loss_kind kind, const cg_tensor *x, const cg_tensor *y, float p);
cg_tensor *cg_k_loss_backward(cg_k_loss_kind kind, const cg_tensor *x, const cg_tensor *y,
                              const cg_tensor *g, float p, bool target);

/* Cross-entropy with PyTorch semantics: logits [N, C] (float32), targets
 * an int64 tensor [N] of class ids (another dtype or shape is refused
 * naming both), ignore_index (e.g. -100 or pad), label_smoothing in [0,1],
 * reduction r (mean, sum or none). Per kept row:
 *   (1-ls) * -log p[y] + ls * mean_j(-log p[j]);
 *   mean: their mean over the kept rows (0/0 gives NaN, as PyTorch), a
 *   scalar; sum: their sum (in double, row order), a scalar; none: [N],
 *   each row's loss, 0 at an ignored row.
 * A target outside [0,C) that is not ignore_index is an error. Optionally
 *   *lse (if not NULL) gets the per-row log-sum-exp [N] for the backward,
 *   and *grad (if not NULL; mean and sum only) the gradient for an upstream
 *   gradient of 1 ([N, C], the bits of cg_k_cross_entropy_backward(...,
 *   g = 1)), computed while each row is in cache so that the backward need
 *   not read the logits again.
 * Precision (the calling thread's policy, core/gemm.h): in fp32 a row sums
 * in double lanes, with one exponential for the log-sum-exp and another
 * for the gradient (bits pinned); under bf16 autocast, as PyTorch's
 * autocast computes the loss (its float log-softmax), in float lanes with
 * one exponential an element, exp(x - max) written into the gradient while
 * summed and then scaled in place (its bits differ from fp32's by float
 * rounding: about 1e-6 of the loss). The backward under bf16 reads no lse
 * and computes its rows again as the forward did. */
cg_tensor *cg_k_cross_entropy(const cg_tensor *logits, const cg_tensor *targets,
                              int64_t ignore_index, float label_smoothing, cg_reduction r,
                              cg_tensor **lse, cg_tensor **grad);
/* cg_k_cross_entropy with F.cross_entropy's class weights weight=:
 * float32 [C] or NULL (cg_k_cross_entropy: the same bits). A kept row
 * with target t loses, as PyTorch's formula,
 *   (1-ls) w_t (lse - x_t) + ls/C sum_j w_j (lse - x_j),
 * and the mean divides the sum by the kept rows' sum of w_t (PyTorch's
 * total weight; no kept row: NaN). Any weight values (negative, 0) are
 * taken, as PyTorch takes them. Weighted rows take double lanes in both
 * precision policies (their bits are not autocast's). */
cg_tensor *cg_k_cross_entropy_weighted(const cg_tensor *logits, const cg_tensor *targets,
                                       const cg_tensor *weight, int64_t ignore_index,
                                       float label_smoothing, cg_reduction r, cg_tensor **lse,
                                       cg_tensor **grad);
/* cg_k_cross_entropy's rows without their mean: each kept row's loss
 * (the same bits) added to *total in row order, and the kept rows counted
 * into *kept. Calls over consecutive row blocks of one [N, C] give, as
 * (float)(*total / *kept), the bits of one call's loss on all of it, with
 * one block's logits alive at a time (an evaluation over [tokens, V]
 * logits too large to keep whole). False + error as cg_k_cross_entropy's
 * checks; *total and *kept are then unchanged. */
bool cg_k_cross_entropy_sum(const cg_tensor *logits, const cg_tensor *targets, int64_t ignore_index,
                            float label_smoothing, double *total, int64_t *kept);
/* The output projection fused with cross-entropy (Liger-Kernel's fused
 * linear cross-entropy): the loss of cg_k_cross_entropy(h w^T + b, ...,
 * r) with h [N, d], w [V, d], b [V] (or NULL), computed in chunks of rows
 * so that the [N, V] logits never exist: reduction r mean (over the kept
 * rows) or sum gives a 0-d loss, none [N] (0 at an ignored row); another
 * r is refused. *dh, *dw, *db (each may be NULL: not computed) get the
 * gradients ([N, d], [V, d], [V]) for an upstream gradient g (mean, sum;
 * g_rows NULL, else refused) or g_rows (none: float32 [N], each row's,
 * needed when a gradient is asked; g not read), by which the logits'
 * gradient is scaled row by row before the products (as
 * cg_k_cross_entropy_backward scales it). The products follow the
 * matrix precision (core/gemm.h), and so do the loss's rows (the policy of
 * cg_k_cross_entropy); the bits do not depend on the thread count. chunk:
 *   N >= 1         chunks of N rows (at most [N, V] logits at a time); the
 *                  weight's gradient is summed chunk by chunk, so its bits
 *                  depend on the chunk;
 *   CG_LCE_EXACT   chunks on the k blocks of the weight gradient's product
 *                  (core/gemm.h cg_gemm_k_block; at most [384, V] or
 *                  [480, V] logits), so every result has the bits of the
 *                  unfused head: the products and cg_k_cross_entropy
 *                  (none's gradients: cg_k_cross_entropy_backward's for
 *                  g_rows; the bias: cg_k_linear_backward's column
 *                  sums), every reduction, for d and V
 *                  above 1. (On BLIS's default path, which promises no k
 *                  blocks: one chunk of all N rows.) */
#define CG_LCE_EXACT (-1)
cg_tensor *cg_k_linear_cross_entropy(const cg_tensor *h, const cg_tensor *w, const cg_tensor *b,
                                     const cg_tensor *targets, int64_t ignore_index,
                                     float label_smoothing, cg_reduction r, int64_t chunk, float g,
                                     const cg_tensor *g_rows, cg_tensor **dh, cg_tensor **dw,
                                     cg_tensor **db);
/* How many times cg_k_linear_cross_entropy has run its chunks in this
 * process (every thread; calls refused by its checks are not counted): for
 * tests that a step computes the fused head once. */
uint64_t cg_k_linear_cross_entropy_runs(void);
/* torch.nn.functional.nll_loss: logp [N, C] (log probabilities), targets
 * int64 [N] checked as for cross-entropy, reduction r: -logp[r, y_r] per
 * kept row, their mean (0/0 = NaN) or sum, or [N] (0 at an ignored row).
 * The backward: -g/K (mean), -g (sum) or -g[r] (none) at each kept
 * (r, y_r), zero elsewhere; g as for cg_k_cross_entropy_backward. */
cg_tensor *cg_k_nll_loss(const cg_tensor *logp, const cg_tensor *targets, int64_t ignore_index,
                         cg_reduction r);
cg_tensor *cg_k_nll_loss_backward(const cg_tensor *logp, const cg_tensor *targets,
                                  int64_t ignore_index, cg_reduction r, const cg_tensor *g);
/* The same with F.nll_loss's class weights (float32 [C] or NULL: the
 * functions above): -w[y_r] logp[r, y_r] a kept row, the mean over the
 * kept rows' sum of w[y_r]; the backward -w[y_r] g / that sum (mean),
 * -w[y_r] g (sum), -w[y_r] g[r] (none). */
cg_tensor *cg_k_nll_loss_weighted(const cg_tensor *logp, const cg_tensor *targets,
                                  const cg_tensor *weight, int64_t ignore_index, cg_reduction r);
cg_tensor *cg_k_nll_loss_backward_weighted(const cg_tensor *logp, const cg_tensor *targets,
                                           const cg_tensor *weight, int64_t ignore_index,
                                           cg_reduction r, const cg_tensor *g);
/* F.multi_margin_loss(x, target, p, margin, weight, reduction): x
 * float32 [N, C] or [C] (one row; 0-d: one class), target int64 of N
 * elements ([N], or [] / [1] for one row), each in [0, C); p 1 or 2;
 * weight float32 [C] or NULL. Row r with target y loses
 *   sum_{i != y} w_y max(0, margin - x_y + x_i)^p / C
 * (in double, rounded once, as PyTorch 1.13's CPU kernel); r mean (over
 * the rows; no row: NaN) or sum gives a 0-d loss, none one a row (the
 * target's shape). The backward: the gradient of x for g (0-d for mean and
 * sum, float32 of the none loss's shape). The rows' bits do not depend on
 * the thread count. */
cg_tensor *cg_k_multi_margin_loss(const cg_tensor *x, const cg_tensor *target, int p, float margin,
                                  const cg_tensor *weight, cg_reduction r);
cg_tensor *cg_k_multi_margin_loss_backward(const cg_tensor *x, const cg_tensor *target, int p,
                                           float margin, const cg_tensor *weight, cg_reduction r,
                                           const cg_tensor *g);
/* F.multilabel_margin_loss(x, target, reduction): x float32 [N, C] or [C]
 * (0-d: one class), target int64 of x's shape whose row holds the row's
 * classes up to its first -1 (each in [0, C); every element of the target,
 * those after the -1 too, in [-1, C), as PyTorch checks). Row r loses
 *   sum_{j target} sum_{i not a target} max(0, 1 - x_j + x_i) / C
 * (a class listed twice counts twice, as PyTorch's); reductions as
 * cg_k_multi_margin_loss's (none: [N], 0-d for one row). */
cg_tensor *cg_k_multilabel_margin_loss(const cg_tensor *x, const cg_tensor *target, cg_reduction r);
cg_tensor *cg_k_multilabel_margin_loss_backward(const cg_tensor *x, const cg_tensor *target,
                                                cg_reduction r, const cg_tensor *g);
/* F.ctc_loss's per-sample losses (core/loss_ctc.c): log_probs float32
 * [T, N, C] (or [T, C], one sample: the loss 0-d), targets int64 padded
 * [N, S] or concatenated 1-d (the target lengths' sum), input_lengths and
 * target_lengths int64 [N] (0-d or [1] unbatched), each input length in
 * [0, T], each target length at most S, every label in [0, C) and not
 * blank (in [0, C)): the negative log-likelihood of each sample's target
 * over all its alignments, in float32 as PyTorch 1.13's CPU kernel (inf
 * where none exists; an input length of 0: 0 for an empty target, else
 * inf). *log_alpha (or NULL): a new reference to the forward variables
 * [N, T, 2 max(target_lengths) + 1], which the backward reads. */
cg_tensor *cg_k_ctc_loss(const cg_tensor *log_probs, const cg_tensor *targets,
                         const cg_tensor *input_lengths, const cg_tensor *target_lengths,
                         int64_t blank, cg_tensor **log_alpha);
/* Its gradient with respect to log_probs for g (float32, the losses'
 * shape), given the forward's nll and log_alpha: PyTorch's
 * ctc_loss_backward_cpu, (e^lp - e^(log(sum alpha beta) + nll - lp)) g
 * over each sample's input length, 0 past it (and for the whole sample
 * when zero_infinity and its loss is inf). */
cg_tensor *cg_k_ctc_loss_backward(const cg_tensor *g, const cg_tensor *log_probs,
                                  const cg_tensor *targets, const cg_tensor *input_lengths,
                                  const cg_tensor *target_lengths, int64_t blank,
                                  const cg_tensor *nll, const cg_tensor *log_alpha,
                                  bool zero_infinity);
/* Whether every element of a (any float dtype) lies in [lo, hi] (NaN
 * does when nan_ok, else not): false + "<op>: <what>" otherwise. */
bool cg_k_values_within(const char *op, const cg_tensor *a, double lo, double hi, bool nan_ok,
                        const char *what);
/* The gradient of cg_k_cross_entropy(..., r) for the upstream gradient g,
 * a float32 tensor of the loss's shape (0-d for mean and sum, [N] for
 * none). */
cg_tensor *cg_k_cross_entropy_backward(const cg_tensor *logits, const cg_tensor *targets,
                                       int64_t ignore_index, float label_smoothing, cg_reduction r,
                                       const cg_tensor *lse, const cg_tensor *g);
/* The same with class weights (cg_k_cross_entropy_weighted's). */
cg_tensor *cg_k_cross_entropy_backward_weighted(const cg_tensor *logits, const cg_tensor *targets,
                                                const cg_tensor *weight, int64_t ignore_index,
                                                float label_smoothing, cg_reduction r,
                                                const cg_tensor *lse, const cg_tensor *g);

/* Layer norm over the last dim: y = (x - mean) * rstd * w + b, biased var,
 * w/b may be NULL ([D] otherwise, float32). *mean and *rstd ([rows]) are
 * for backward. x (and the addend of the add forms below) may be
 * bfloat16 or float16: computed in float32, y in their promoted dtype,
 * and the backwards' dx in x's dtype unless added into acc; g of any
 * float dtype. */
cg_tensor *cg_k_layer_norm(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, float eps,
                           cg_tensor **mean, cg_tensor **rstd);
/* Writes dx (may be NULL to skip), dw, db (each NULL to skip) as new
 * tensors. acc (or NULL): a contiguous float32 tensor of x's shape that dx
 * is added into in place as each row is written, each element acc + dx
 * rounded once (cg_k_add_'s bits); *dx is then a new reference to acc
 * (autograd's cg_node_grad_acc). The same acc in the two below. */
bool cg_k_layer_norm_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *mean,
                              const cg_tensor *rstd, const cg_tensor *g, cg_tensor *acc,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db);
/* RMS norm over the last dim: y = x * rsqrt(mean(x^2) + eps) * w (w may be NULL). */
cg_tensor *cg_k_rms_norm(const cg_tensor *x, const cg_tensor *w, float eps, cg_tensor **rstd);
bool cg_k_rms_norm_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *rstd,
                            const cg_tensor *g, cg_tensor *acc, cg_tensor **dx, cg_tensor **dw);
/* The same of the sum x + y (y of x's shape), the residual add of a post-norm
 * block: bit for bit the norm of cg_k_add(x, y). *sum (NULL to skip) gets
 * x + y, written as the norm reads it: the input its backward takes
 * (cg_k_layer_norm_backward or cg_k_rms_norm_backward of the sum, whose dx
 * is the gradient of both x and y). Without it no sum is stored. */
cg_tensor *cg_k_add_layer_norm(const cg_tensor *x, const cg_tensor *y, const cg_tensor *w,
                               const cg_tensor *b, float eps, cg_tensor **mean, cg_tensor **rstd,
                               cg_tensor **sum);
cg_tensor *cg_k_add_rms_norm(const cg_tensor *x, const cg_tensor *y, const cg_tensor *w, float eps,
                             cg_tensor **rstd, cg_tensor **sum);
/* The four norms above in one call: RMS norm when rms (no b, no mean),
 * of x + y when y is not NULL (sum as above; ignored without y). With
 * bf16_copy the output's bf16 copy is kept as its operand
 * (cg_k_bf16_operand_keep), each row rounded as it is written: what bf16
 * training's next products read, without another pass over the output.
 * *xhat (NULL to skip) gets x-hat = (x - mean) * rstd of the norm's input
 * (x + y with y), computed in float and rounded to bf16: a CG_BF16 tensor
 * of x's shape that cg_k_norm_backward_xhat takes in place of the input
 * (bf16 training keeps it, not the input). The output is then computed
 * from that rounding, x-hat16 * w + b in float, so that
 * cg_k_norm_out_bf16 makes its bf16 copy again from x-hat alone. */
cg_tensor *cg_k_norm(bool rms, const cg_tensor *x, const cg_tensor *y, const cg_tensor *w,
                     const cg_tensor *b, float eps, bool bf16_copy, cg_tensor **mean,
                     cg_tensor **rstd, cg_tensor **sum, cg_tensor **xhat);
/* The bf16 copy of a norm's output made again from its saved x-hat (bf16,
 * cg_k_norm's *xhat), w and b (may be NULL): bf16(x-hat16 * w + b), the
 * bits of the copy that cg_k_norm made with that x-hat (bf16_copy). A new
 * CG_BF16 tensor of x-hat's shape, or NULL + error. */
cg_tensor *cg_k_norm_out_bf16(const cg_tensor *xhat, const cg_tensor *w, const cg_tensor *b);
/* The norms' backward from x-hat (bf16, cg_k_norm's *xhat) and rstd: dx,
 * dw and db (NULL to skip each; db is NULL for RMS norm) as
 * cg_k_layer_norm_backward and cg_k_rms_norm_backward compute them, each
 * term taken at the rounded x-hat. */
bool cg_k_norm_backward_xhat(bool rms, const cg_tensor *xhat, const cg_tensor *w,
                             const cg_tensor *rstd, const cg_tensor *g, cg_tensor *acc,
                             cg_tensor **dx, cg_tensor **dw, cg_tensor **db);

/* Inverted dropout: keep with prob 1-p, scale kept by 1/(1-p). *mask (if not
 * NULL) gets which elements were kept (bool, a byte an element, as
 * PyTorch's native_dropout keeps). p in [0,1]: at p = 1 nothing is kept
 * and the result is a * 0, as PyTorch's (no division by 1 - p). Seeded and
 * thread-count independent. */
cg_tensor *cg_k_dropout(const cg_tensor *a, float p, cg_rng *rng, cg_tensor **mask);
/* Its backward: g times 1/(1-p) where mask is true and times 0 where it is
 * false (NaN stays NaN), the bits of g times the factor. */
cg_tensor *cg_k_dropout_backward(const cg_tensor *mask, const cg_tensor *g, float p);
/* The dropouts whose noise is a tensor of its own, PyTorch's
 * _dropout_impl: feature dropout (dropout1d/2d/3d), alpha dropout and
 * feature alpha dropout. The noise has x's first `lead` sizes and 1 after
 * (2: one per channel of [N, C, ...]; x's ndim: one per element); noise
 * element j (row-major) is kept iff draw (counter + j) of rng is >= p,
 * cg_k_dropout's rule (rng advances by the noise's element count; p = 1
 * draws nothing). Plain (alpha false): y = x times 1/(1-p) where kept, x
 * times 0 where not. Alpha: y = x noise + shift, two roundings, noise = a
 * where kept and 0 where not, shift = alpha a p where kept and alpha a p
 * - alpha a where not (alpha = 1.7580993408473766, SELU's, a = 1 /
 * sqrt((alpha^2 p + 1)(1 - p)); each product rounded as PyTorch's float
 * ops round it). p = 1: y = x times 0 (PyTorch's, alpha too). x float32,
 * any strides; y contiguous. *noise (if not NULL) gets the noise (float32,
 * of the noise's shape): the gradient is g times it, broadcast. */
cg_tensor *cg_k_noise_dropout(const cg_tensor *x, float p, cg_rng *rng, int lead, bool alpha,
                              cg_tensor **noise);
/* A dropout's draws, cg_k_dropout's: the element at row-major offset o is
 * kept iff draw (base + o) of key (core/rng.h) is >= p, and scaled by
 * scale = 1/(1-p) (0 at p = 1). */
typedef struct {
    uint64_t key, base;
    float p, scale;
} cg_k_drop;
/* The draws of a dropout of p over n elements, taken from rng
 * (cg_rng_take: rng advances by n) */
cg_k_drop cg_k_drop_take(cg_rng *rng, float p, int64_t n);
/* The factor of a dropout of p's kept elements: 1/(1 - p), 0 at p = 1 */
float cg_k_dropout_scale(float p);
/* A dropout and a residual add over `runs` runs of n elements ld apart,
 * the first element at offset off of the tensor's origin (y, res and m
 * point at it): y = res + dropout(y) in place, the bits of cg_k_dropout
 * then cg_k_add; res NULL: the dropout alone; d NULL or d->p == 0: no
 * dropout (y = res + y). m (if not NULL) gets the keep (1 or 0) where
 * there is a dropout. What cg_k_linear_residual runs on each block of its
 * product's output. */
void cg_k_dropout_add_run(const cg_k_drop *d, int64_t n, int64_t runs, int64_t ld, int64_t off,
                          float *y, const float *res, uint8_t *m);

/* Linear layer: y = x W^T + b, x [..., in] (any strides), W [out, in], b
 * [out] or NULL -> [..., out]. One GEMM with the bias pre-written into y.
 * x may be bfloat16 (cg_k_bf16_operand's): bf16 products read it as it is
 * (the bits they give for the floats it was rounded from), fp32 ones
 * widen it. A float32 x whose bf16 copy is kept (cg_k_bf16_operand_keep)
 * is read from that copy by bf16 products (the same bits, half the bytes,
 * no rounding). */
cg_tensor *cg_k_linear(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b);
/* cg_k_linear for an output that bf16 products read (attention's q, k and
 * v): in bf16 precision the product also rounds each block of the output
 * as it finishes it, while it is in cache, and keeps the rounding as the
 * output's operand (cg_k_bf16_operand_keep), which cg_k_bf16_operand then
 * returns for the output and, as a view, for any view within it (the
 * heads), instead of another pass over the output. The same bits. */
cg_tensor *cg_k_linear_keep_bf16(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b);
/* x (float32, any strides) as a bfloat16 tensor rounded as the bf16
 * products round their operands (core/gemm.h cg_bf16_round_run: ties to
 * even, subnormals to signed zero, NaN made quiet; cg_k_to keeps
 * subnormals, as PyTorch does): x's strides when x is dense (cg_k_map_runs)
 * or lies within a kept copy (below), contiguous otherwise. What the linear
 * layers save for their backward in bf16 precision (autograd's
 * cg_affine): half the bytes, and the products' bits. */
cg_tensor *cg_k_bf16_operand(const cg_tensor *x);
/* Keep y, x rounded as cg_k_bf16_operand rounds it (made by its caller
 * with the same bits), as x's copy: cg_k_bf16_operand(x) returns it while x
 * is not written, and when x and y are contiguous, a view of y for any
 * view of x's storage whose elements all lie within x. One copy a storage:
 * a new one replaces it. On failure nothing is kept (the copy is made
 * again when asked for). */
void cg_k_bf16_operand_keep(const cg_tensor *x, cg_tensor *y);
/* cg_k_linear for a product no backward follows (inference), with W read
 * from a packed copy of it made at the first call and kept with W's
 * storage until the storage dies or is written (cg_tensor_modified): the
 * weight cache below. In bf16 precision the bf16 copy cg_k_linear reads
 * too (a product with few rows of x, decoding, reads half the bytes and
 * packs nothing); in fp32 the fp32 driver's panels (CG_PACKED_F32) where
 * the thread's fp32 path reads them, W has more than CG_GEMM_SKINNY rows,
 * x more than CG_GEMM_SKINNY and at most CG_K_LINEAR_PACKED_ROWS, and the
 * cache keeps the copy (room under its limit; else W itself, as
 * cg_k_linear reads it: no copy made for one product), so that each
 * product packs only x: decoding's products (sampling past the window
 * recomputes it, 64 rows for charlm tiny; batched greedy decoding, a row a
 * sentence), where packing W took 17% and 12% of the time (Ice Lake).
 * With more rows packing is a few percent of a product, and the copy, the
 * weight's size again, would stay until the weight is written (an
 * evaluation pass during training: until the next step). The bits of
 * cg_k_linear either way. */
#define CG_K_LINEAR_PACKED_ROWS 256
cg_tensor *cg_k_linear_packed(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b);
/* The activations a linear layer applies as its product writes its
 * output (cg_k_linear_act). */
typedef enum { CG_K_ACT_RELU, CG_K_ACT_GELU, CG_K_ACT_GELU_ERF } cg_k_act;
/* act(x W^T + b), the bits of cg_k_<act>(cg_k_linear(x, w, b)). In bf16
 * precision (on W's cached bf16 copy, as above) the activation is applied to
 * each block of the product's output as the block is finished, while it
 * is in cache, and the output's bf16 rounding made in the same pass is
 * kept as its operand (cg_k_bf16_operand_keep: the next layer's product
 * reads it); in fp32 it is one pass after the product. *saved gets what
 * the backward reads (cg_k_linear_act_backward): for relu the mask (bool,
 * y > 0), in bf16 precision the output's kept bf16 copy (positive where
 * the mask is, but for outputs below 2^-126, which it rounds to zero);
 * for the GELUs the pre-activation h = x W^T + b, in bf16
 * precision rounded to bf16 (cg_k_bf16_operand's bits: the GELU node's
 * saved input, autograd's cg_gelu). The output is the product's own
 * buffer, activated in place, except for a GELU in fp32 (h is kept).
 * saved NULL: no backward will run (inference), nothing is made for one:
 * the output is activated in place, and in bf16 only its rounding is
 * kept; W is read as cg_k_linear_packed reads it. NULL + error on failure. */
cg_tensor *cg_k_linear_act(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, cg_k_act act,
                           cg_tensor **saved);
/* res + dropout(x W^T + b): a sublayer's last product and what follows
 * it in a residual block (pre-norm's x + drop(sub(norm(x))), or with res
 * NULL post-norm's drop(sub(x)), whose add is in the norm), the bits of
 * cg_k_add(res, cg_k_dropout(cg_k_linear(x, w, b), p, rng, mask)). In bf16
 * precision (on W's cached bf16 copy) each block of the product's output
 * gets its dropout and add as the block is finished, while it is in
 * cache; in fp32 one pass after the product does. p in [0, 1]: p > 0
 * draws as cg_k_dropout does (the output's row-major offsets; rng's
 * counter then advances by its elements) and *mask (when mask is not
 * NULL) gets the keep, bool of the output's shape; p == 0 draws nothing
 * (rng may be NULL, *mask is NULL); mask NULL says no backward will
 * run (inference): W is read as cg_k_linear_packed reads it. res: float32
 * of the output's shape (any strides), or NULL. NULL + error on failure. */
cg_tensor *cg_k_linear_residual(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                                const cg_tensor *res, float p, cg_rng *rng, cg_tensor **mask);
/* runs of n outputs of such a layer, run r at r * ld in every array: h16
 * (if not NULL) = h rounded as the bf16 products round it; relu: h =
 * relu(h) in place and m (if not NULL) its mask; the GELUs: a = act(h), in place when a
 * is NULL; then a16 (if not NULL) the output rounded. */
void cg_k_act_run(cg_k_act act, int64_t n, int64_t runs, int64_t ld, float *h, float *a, uint8_t *m,
                  uint16_t *h16, uint16_t *a16);
/* out = g act'(h) for n elements, cg_k_<act>_backward's bits, h floats or
 * (hbf) bf16 elements; relu from its mask m (h unread; the GELUs do not
 * read m). */
void cg_k_act_grad_run(cg_k_act act, int64_t n, const void *h, bool hbf, const uint8_t *m,
                       const float *g, float *out);

/* The weight cache (PyTorch autocast's weight cache, and inference's packed
 * weights; core/weight_cache.c): the linear layers' products in bf16
 * precision (cg_k_linear forward, cg_k_linear_backward's dx) read a weight
 * rounded to bf16 and packed into the GEMM's panels once per version of
 * its data, not once per product; fp32 products without a graph
 * (cg_k_linear_packed) read W in the fp32 driver's panels so. Forms:
 * CG_PACKED_BF16, W [n, k] in bf16; CG_PACKED_BF16_T, W^T [k, n] in bf16
 * (the dx = dy W orientation); CG_PACKED_F32, W [n, k] in the fp32 AVX-512
 * driver's panels (NULL + error where the calling thread's fp32 path is
 * another: cg_k_linear_packed then reads W itself). cg_packed_weight_get
 * gives the copy kept with W's storage when it was made from the same view
 * at W's current version, else a new one, kept (replacing that form's old
 * copy) while the cache holds at most its limit of bytes. Any write
 * through the library frees a storage's copies (cg_tensor_modified, which
 * optimizer steps call), and a version change is a miss, so a stale copy
 * is never read; they also die with the storage. Thread-safe; release
 * what get returns. NULL + error when w is not a float32 [n >= 1, k >= 1]
 * matrix or out of memory. cg_packed_weight_bf16: a bf16 form's matrix
 * (NULL for the fp32 form). */
typedef enum { CG_PACKED_BF16, CG_PACKED_BF16_T, CG_PACKED_F32 } cg_packed_form;
typedef struct cg_packed_weight cg_packed_weight;
cg_packed_weight *cg_packed_weight_get(const cg_tensor *w, cg_packed_form form);
const cg_bf16_matrix *cg_packed_weight_bf16(const cg_packed_weight *e);
void cg_packed_weight_release(cg_packed_weight *e); /* NULL is a no-op */
/* packs: weights converted and packed (misses), hits: products served
 * from a kept copy, bytes: held by the cache now, limit: its bound
 * (default 1 GiB; 0 keeps nothing: every bf16 product packs its own, fp32
 * products without a graph read W itself, with the same bits). Lowering the limit frees the kept copies beyond it at once,
 * the oldest first (cg_weight_cache_limit(0) empties the cache). */
typedef struct {
    uint64_t packs, hits;
    size_t bytes, limit;
} cg_cache_stats;
cg_cache_stats cg_weight_cache_stats(void);
void cg_weight_cache_limit(size_t bytes);

/* Its gradients given g [..., out]: dx [..., in], dW [out, in], db [out]
 * (each may be NULL to skip). x may be bfloat16 (only dW reads it), as
 * for cg_k_linear. acc (or NULL): a contiguous float32 tensor of x's shape
 * that dx is added into in place, each element acc + dx rounded once
 * (cg_k_add_'s bits); *dx is then a new reference to acc. With out
 * within one k block of the product (cg_gemm_k_block), the product adds
 * into acc as it writes (beta 1), and no dx tensor is made (autograd's
 * cg_node_grad_acc). An operand that shares acc's memory (acc = x) is
 * read as it was before the call (copied first). */
bool cg_k_linear_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *g,
                          cg_tensor *acc, cg_tensor **dx, cg_tensor **dw, cg_tensor **db);
/* The same for y = act(x W^T + b) given what the forward saved: for relu
 * its mask (bool, y > 0: cg_k_relu_mask, cg_k_linear_act's) or y itself
 * (float32, or bf16: g passes where it is positive), for the GELUs the
 * pre-activation h (float32, or bf16: then
 * the derivative is taken at its rounded values). The bits of
 * cg_k_linear_backward given cg_k_relu_mask_backward(mask, g),
 * cg_k_relu_backward(y, g) or cg_k_<act>_backward(h, g). In bf16 precision,
 * with dx and dW both asked for, one pass over g takes it through the
 * activation, rounds it for both products and sums the bias's gradient (no
 * float gradient of the pre-activation is made). */
bool cg_k_linear_act_backward(const cg_tensor *x, const cg_tensor *w, cg_k_act act,
                              const cg_tensor *saved, const cg_tensor *g, cg_tensor *acc,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db);

/* The same for y = dropout(x W^T + b) given the dropout's mask (bool, as
 * cg_k_dropout keeps it) and p: the bits of cg_k_linear_backward given
 * cg_k_dropout_backward(mask, g, p). In bf16 precision, with dx and dW
 * both asked for, the pass over g that rounds it for both products takes
 * it through the dropout (no float gradient of the product's output is
 * made). */
bool cg_k_linear_dropout_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *mask,
                                  float p, const cg_tensor *g, cg_tensor *acc, cg_tensor **dx,
                                  cg_tensor **dw, cg_tensor **db);

/* Fused scaled-dot-product attention on split heads: q [B,H,Tq,dh], k and
 * v [B,H,Tk,dh] (any strides; float32, or bfloat16 bit patterns, which the
 * products read as the floats they hold: bf16 training hands over the
 * copies its node keeps, cg_k_bf16_operand, with the bits their float32
 * originals give). softmax(q k^T / sqrt(dh), masked) v with
 * key j masked for query i when (causal && j > i) or key_pad[b, j]
 * (key_pad: bool [B, Tk], true = padding, any strides; may be NULL; another
 * dtype or shape is refused naming both). A query with every
 * key masked gets NaN, as PyTorch; with no keys (Tk = 0) every output is
 * 0, the empty weighted sum, as PyTorch's softmax(q k^T) v. Computed in tiles with an online
 * softmax (memory linear in T; the causal part above the diagonal is never
 * computed). Returns [B,H,Tq,dh] as a VIEW of fresh [B,Tq,H,dh] contiguous
 * storage (so merging the heads needs no copy). *saved (if not NULL) gets
 * what the backward needs: the weights [B,H,Tq,Tk] when Tk <= 256 (short
 * rows are cheaper to keep than to recompute; in bf16 precision on AMX
 * up to 128, where recomputing costs about what reading them back did),
 * in bf16 precision rounded to bf16
 * (the product with v reads them so), else each row's log-sum-exp of the
 * scaled, masked scores as two floats, rounded and the rest, [B,H,2 Tq]
 * (head (b, h)'s Tq rounded values, then their Tq rests; NaN for a row
 * with every key masked);
 * contiguous either way. *weights (if not NULL) gets the softmax
 * weights [B,H,Tq,Tk] (float32, contiguous, exact zeros where masked;
 * where bf16 keeps them, their rounded values), computed only when asked
 * for beyond 256 keys. */
cg_tensor *cg_k_attention(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, bool causal,
                          const cg_tensor *key_pad, cg_tensor **saved, cg_tensor **weights);
/* cg_k_attention's check of q, k and v, for a caller that computes the
 * same attention another way (nn's masked path): float32 or bfloat16,
 * q [B,H,Tq,dh], k and v [B,H,Tk,dh]; false + error as cg_k_attention
 * refuses them. */
bool cg_k_attention_check(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v);
/* Whether cg_k_attention_backward reads the output for this saved state:
 * only with the log-sum-exps over several key blocks (Tk > 512). */
bool cg_k_attention_needs_out(const cg_tensor *k, const cg_tensor *saved);
/* Gradients of cg_k_attention given its output out, its saved state, the
 * same masks and the output gradient g ([B,H,Tq,dh], any strides); from
 * log-sum-exps the weights are recomputed tile by tile. out is read only
 * where cg_k_attention_needs_out says (otherwise it may be NULL). dq/dk/dv
 * may each be NULL to skip; results are [B,H,T,dh] views of [B,T,H,dh]
 * contiguous storage. */
bool cg_k_attention_backward(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                             const cg_tensor *out, const cg_tensor *saved, const cg_tensor *g,
                             bool causal, const cg_tensor *key_pad, cg_tensor **dq, cg_tensor **dk,
                             cg_tensor **dv);

/* ---------------------------------------------------------- shape ops */
cg_tensor *cg_k_concat(cg_tensor *const *ts, int n, int dim);
cg_tensor *cg_k_stack(cg_tensor *const *ts, int n, int dim);
/* A stack's check (cg_k_stack's, so the graph's cg_stack's): n >= 1
 * tensors, none NULL, all of one shape, below CG_MAX_DIMS dims, dim in
 * range for the result. Returns dim counted from 0, or -1 + error. */
int cg_k_stack_dim(cg_tensor *const *ts, int n, int dim);
/* Split into pieces of the given sizes along dim (sum must equal the dim
 * size); out[i] receive views. Returns false on error. */
bool cg_k_split(const cg_tensor *a, int dim, int n, const int64_t *sizes, cg_tensor **out);
/* A split's check (cg_k_split's and the graph's cg_split): a has a dim
 * dim (negative: from the end), n >= 1 sizes, none negative, that sum to
 * its size. Returns dim counted from 0, or -1 + error. */
int cg_k_split_dim(const cg_tensor *a, int dim, int n, const int64_t *sizes);
/* torch.index_select: rows of a (any dtype) along dim picked by index (an
 * int64 tensor, 0-d or 1-d, any strides): the result has a's shape with
 * numel(index) at dim. Every id must be in [0, size). */
cg_tensor *cg_k_index_select(const cg_tensor *a, int dim, const cg_tensor *index);
/* dst[index[i]] += src[i] along dim (the backward of index_select; float32). */
bool cg_k_index_add_(cg_tensor *dst, int dim, const cg_tensor *index, const cg_tensor *src);
/* cg_k_index_add_, each destination row adding once the sum of its source
 * rows (in increasing i): every element of dst rounded once, the bits of
 * adding index_add(zeros, ...) into dst, up to a zero's sign (rows no id
 * names are left as they are). For adding a gradient into the one a tensor
 * already has: index_select's backward, from cg_node_grad_acc. */
bool cg_k_index_add_sums_(cg_tensor *dst, int dim, const cg_tensor *index, const cg_tensor *src);
/* torch.gather: out[i][j] = a[i][index[i][j]] along dim; index is int64
 * with a's ndim, fits in a outside dim, and gives the result's shape. */
cg_tensor *cg_k_gather(const cg_tensor *a, int dim, const cg_tensor *index);
/* dst[i][index[i][j]] += src[i][j] along dim (index of src's shape). */
bool cg_k_scatter_add_(cg_tensor *dst, int dim, const cg_tensor *index, const cg_tensor *src);
/* torch.index_add(a, dim, index, src) and torch.scatter_add(a, dim,
 * index, src): a contiguous copy of a with src added as cg_k_index_add_ and
 * cg_k_scatter_add_ add it (the same checks and bits; a and src float32,
 * named 'input' and 'source' in messages). */
cg_tensor *cg_k_index_add(const cg_tensor *a, int dim, const cg_tensor *index,
                          const cg_tensor *src);
cg_tensor *cg_k_scatter_add(const cg_tensor *a, int dim, const cg_tensor *index,
                            const cg_tensor *src);

/* ----------------------------------------------------------- pooling */
/* A pool's options over its spatial dims (index 0 the first; a pool of
 * nd spatial dims reads indices 0 to nd - 1), PyTorch's F.max_pool*d /
 * avg_pool*d / max_unpool*d arguments:
 * kernel_size > 0; stride 0 means the kernel's (PyTorch's None);
 * padding >= 0 and at most half the kernel; dilation 0 means 1 (max
 * pools only); ceil_mode as PyTorch's (the last window starts inside the
 * input or its left padding); avg pools: exclude_pad is PyTorch's
 * count_include_pad=False (zero, C's default, is PyTorch's True), and
 * divisor_override (0: none). Zero-initialise and set what you need:
 * (cg_pool){.kernel_size = {2, 2}} is F.max_pool2d(x, 2). */
typedef struct {
    int64_t kernel_size[3], stride[3], padding[3], dilation[3];
    bool ceil_mode, exclude_pad;
    int64_t divisor_override;
} cg_pool;
/* core/pool.c: x [N, C, L] or [C, L] (nd 1), [N, C, H, W] or [C, H, W]
 * (nd 2), [N, C, D, H, W] or [C, D, H, W] (nd 3), any strides, a float
 * dtype (bfloat16 and float16 computed in float32, the values rounded
 * back). Max pools give the values (x's dtype) and *indices (int64, the
 * output's shape: the flat index of each maximum within its plane, L, H *
 * W or D * H * W, as return_indices=True; the first
 * maximum, a NaN taking the place as PyTorch's CPU kernel). Averages are
 * summed in double. Refused in one line: another rank, kernel or stride
 * <= 0, padding above half the kernel, an output size below 1. */
cg_tensor *cg_k_max_pool(const cg_tensor *x, int nd, const cg_pool *o, cg_tensor **indices);
cg_tensor *cg_k_avg_pool(const cg_tensor *x, int nd, const cg_pool *o);
/* F.adaptive_{max,avg}_pool{1,2,3}d(x, output_size) (its nd sizes):
 * PyTorch's windows, floor(i * in / out) to ceil((i + 1) * in / out);
 * max: *indices as above. */
cg_tensor *cg_k_adaptive_pool(const cg_tensor *x, int nd, bool max, const int64_t *output_size,
                              cg_tensor **indices);
/* The backwards (float32, x's shape; x is read for its shape only): a max
 * pool's (adaptive or not) scatters g to its indices, an average's spreads
 * g over each window; a plane's outputs in order, so the bits do not
 * depend on the thread count. */
cg_tensor *cg_k_max_pool_backward(const cg_tensor *g, const cg_tensor *indices, const cg_tensor *x,
                                  int nd);
cg_tensor *cg_k_avg_pool_backward(const cg_tensor *g, const cg_tensor *x, int nd, const cg_pool *o);
cg_tensor *cg_k_adaptive_avg_pool_backward(const cg_tensor *g, const cg_tensor *x, int nd);
/* F.max_unpool{1,2,3}d(x, indices, kernel_size, stride, padding,
 * output_size) (nd 1 to 3; o's kernel_size, stride (0: the kernel's) and
 * padding; dilation 0 or 1; ceil_mode, exclude_pad and divisor_override
 * refused): zeros of [N, C, *output_size] (x's leading dims) with each
 * value of x at its index (int64, x's shape, flat within the output's
 * plane; a repeated index keeps the last value, as PyTorch's CPU kernel).
 * output_size (nd sizes; NULL: (in - 1) * stride - 2 * padding +
 * kernel_size each) must lie strictly within a stride of that default, as
 * PyTorch's; an index outside the plane is refused. Same dtypes as the
 * pools. The backward (float32, x's shape; x read for its shape only):
 * g read at each index, as PyTorch 1.13's. */
cg_tensor *cg_k_max_unpool(const cg_tensor *x, const cg_tensor *indices, int nd, const cg_pool *o,
                           const int64_t *output_size);
cg_tensor *cg_k_max_unpool_backward(const cg_tensor *g, const cg_tensor *indices,
                                    const cg_tensor *x, int nd);

/* ------------------------------------------------------ interpolation */
/* F.interpolate's modes (PyTorch 1.13): 'nearest' (the legacy rule, source
 * floor(dst * scale)), 'nearest-exact' (floor((dst + 0.5) * scale)),
 * 'linear' (3-d input), 'bilinear' and 'bicubic' (4-d; cubic convolution
 * with A = -0.75 over 4 x 4 sources, those past a border clamped to it, as
 * upsample_bicubic2d). */
typedef enum {
    CG_INTERP_NEAREST,
    CG_INTERP_NEAREST_EXACT,
    CG_INTERP_LINEAR,
    CG_INTERP_BILINEAR,
    CG_INTERP_BICUBIC
} cg_interp_mode;
/* F.interpolate's arguments over the spatial dims (index 0 the first; a
 * 3-d input reads index 0 only): exactly one of size (the output sizes,
 * > 0) and scale_factor (finite, > 0; the output size floor(in *
 * scale)) given, 0 meaning not given; for a 4-d input index 0 alone given
 * is one number for both dims (PyTorch's size=int, scale_factor=float).
 * align_corners: the interpolating modes only (linear, bilinear, bicubic;
 * PyTorch refuses it with nearest).
 * recompute_scale_factor: with scale_factor only; false (PyTorch's None
 * and False) passes the scale to the kernel, whose source index then uses
 * 1 / scale, true the ratio in / out of the sizes. Zero-initialise and set
 * what you need: (cg_interp){.mode = CG_INTERP_BILINEAR, .scale_factor =
 * {2}} is F.interpolate(x, scale_factor=2, mode='bilinear'). */
typedef struct {
    cg_interp_mode mode;
    int64_t size[2];
    double scale_factor[2];
    bool align_corners, recompute_scale_factor;
} cg_interp;
/* core/interp.c: x [N, C, L] (nearest, nearest-exact, linear) or [N, C,
 * H, W] (nearest, nearest-exact, bilinear, bicubic), any strides, a float
 * dtype (bfloat16 and float16 computed in float32, the values rounded
 * back). PyTorch's CPU index and weight rules in float32 (the linear
 * source index in double, as its CPU kernel; an output size equal to the
 * input's copies, except bicubic's, whose forward PyTorch never copies:
 * the same size with a scale passed is not the identity). Refused in one line: a rank the mode does not take, both or
 * neither of size and scale_factor, a size or scale <= 0, an output size
 * 0, align_corners with nearest, recompute_scale_factor with size. */
cg_tensor *cg_k_interpolate(const cg_tensor *x, const cg_interp *o);
/* o's own checks (those that need no input), false + error naming who:
 * what nn/upsample.h's constructors check once. */
bool cg_k_interp_options_ok(const cg_interp *o, const char *who);
/* The backward (float32, x's shape; x is read for its shape only): g
 * scattered with the forward's indices and weights (nearest: summed into
 * each source), each (N, C) plane's outputs in order, so the bits do not
 * depend on the thread count. bicubic's is the forward's adjoint even
 * where PyTorch's backward copies (both sizes the input's, a scale other
 * than 1 passed). */
cg_tensor *cg_k_interpolate_backward(const cg_tensor *g, const cg_tensor *x, const cg_interp *o);

/* ------------------------------------------------ batch normalisation */
/* F.batch_norm over x [N, C, ...] (float32, any strides; core/
 * batchnorm.c; a bfloat16 or float16 x is computed in float32 and its
 * output and dx rounded to its dtype, the statistics, weight, bias and
 * their gradients float32, as PyTorch's mixed-type batch norm): statistics over every dim but 1, each channel's summed in
 * double in order. training: the batch mean and biased variance
 * normalise, and running_mean / running_var (float32 [C], or NULL) move
 * by momentum toward the mean and the UNBIASED variance (written in
 * place, cg_tensor_modified); eval: the running statistics normalise.
 * weight, bias: [C] or NULL. *mean and *invstd (float32 [C], new) are what
 * normalised, for the backward. Refused: a single value per channel in
 * training, a [C] argument of another length, eval without running
 * statistics, an x that is not a float tensor, parameters that are not
 * float32. */
cg_tensor *cg_k_batch_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                           const cg_tensor *weight, const cg_tensor *bias, bool training,
                           float momentum, float eps, cg_tensor **mean, cg_tensor **invstd);
/* Its backward from g (x's shape): *dx (training: through the batch
 * statistics; eval: g w invstd), *dw = sum(g xhat), *db = sum(g), each
 * channel's summed in double in order; dx, dw or db NULL: not computed. */
bool cg_k_batch_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                              const cg_tensor *mean, const cg_tensor *invstd, bool training,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db);

/* ------------------------------------ group and instance normalisation */
/* F.group_norm over x [N, C, ...] (float32, any strides; core/
 * groupnorm.c; a reduced-precision x as cg_k_batch_norm's): each sample's num_groups groups of C / num_groups
 * channels normalised by their mean and biased variance over the group's
 * channels and every spatial position (summed in double in order), then
 * weight[c] and bias[c] ([C] or NULL). *mean and *invstd (float32 [N,
 * num_groups], new) are what normalised, for the backward. Refused: a
 * num_groups that does not divide C, a [C] argument of another length,
 * eps < 0, an x that is not a float tensor, parameters that are not
 * float32. */
cg_tensor *cg_k_group_norm(const cg_tensor *x, int64_t num_groups, const cg_tensor *weight,
                           const cg_tensor *bias, float eps, cg_tensor **mean, cg_tensor **invstd);
/* Its backward from g (x's shape): *dx through the group statistics,
 * *dw = sum(g xhat), *db = sum(g) per channel (samples in order); dx, dw
 * or db NULL: not computed. */
bool cg_k_group_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                              const cg_tensor *mean, const cg_tensor *invstd, int64_t num_groups,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db);
/* F.instance_norm(x, running_mean, running_var, weight, bias,
 * use_input_stats, momentum, eps) over x [N, C, ...]: use_input_stats,
 * group norm with a group a channel (more than one spatial element
 * needed), and running_mean / running_var ([C] or NULL) moved in place
 * by momentum toward the samples' mean of the instance means and of the
 * UNBIASED variances (PyTorch's); else batch norm's eval on the running
 * statistics (*mean, *invstd [C]). */
cg_tensor *cg_k_instance_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                              const cg_tensor *weight, const cg_tensor *bias, bool use_input_stats,
                              float momentum, float eps, cg_tensor **mean, cg_tensor **invstd);
bool cg_k_instance_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                                 const cg_tensor *mean, const cg_tensor *invstd,
                                 bool use_input_stats, cg_tensor **dx, cg_tensor **dw,
                                 cg_tensor **db);

/* ------------------------------------------------ norms along a dim */
/* F.normalize(a, p, dim, eps): a / max(||a||_p, eps) along dim (core/
 * rownorm.c: p > 0, inf the largest |a|; eps >= 0), each row's norm summed
 * in double and rounded to a float, as PyTorch's norm tensor; its backward
 * PyTorch's (the gradient through the norm where it is >= eps and > 0;
 * p inf: split among the largest |a|). */
cg_tensor *cg_k_normalize(const cg_tensor *a, float p, int dim, float eps);
cg_tensor *cg_k_normalize_backward(const cg_tensor *x, const cg_tensor *g, float p, int dim,
                                   float eps);
/* F.cosine_similarity(a, b, dim, eps): a and b broadcast, dim of their
 * broadcast shape, removed: sum(a b) / sqrt(max(|a|^2, eps^2) max(|b|^2,
 * eps^2)), PyTorch 1.13's (its clamps pass the gradient: they are made
 * under no_grad). Its backward, g of the result's shape: da and db of the
 * broadcast shape. */
cg_tensor *cg_k_cosine_similarity(const cg_tensor *a, const cg_tensor *b, int dim, float eps);
bool cg_k_cosine_similarity_backward(const cg_tensor *a, const cg_tensor *b, const cg_tensor *g,
                                     int dim, float eps, cg_tensor **da, cg_tensor **db);

/* ------------------------------------------------------ distances */
/* torch.cdist's direct kernel (core/distance.c): x1 [B, P, M] and x2 [B,
 * R, M] float32 (any strides) -> [B, P, R], the p-norm of each pair of
 * rows' difference: p = 0 counts the nonzero differences, inf takes the
 * largest; p >= 0 (else refused). Its backward, g of the distances'
 * shape: dx1 and dx2 (NULL to skip each) by PyTorch's _cdist_backward
 * (0 where a distance is 0; inf: g to each maximal |difference|, or
 * g / their count when split_ties, as torch.norm's backward). */
cg_tensor *cg_k_cdist(const cg_tensor *x1, const cg_tensor *x2, float p);
bool cg_k_cdist_backward(const cg_tensor *x1, const cg_tensor *x2, const cg_tensor *dist,
                         const cg_tensor *g, float p, bool split_ties, cg_tensor **dx1,
                         cg_tensor **dx2);

/* ------------------------------------------------- linear algebra */
/* torch.linalg through LAPACK (core/linalg.c, core/linalg_decomp.c,
 * core/linalg_lstsq.c; LAPACK's Fortran symbols, core/lapack.h): float32
 * matrices [*, m, n] of any strides (bfloat16 and float16 refused, as
 * PyTorch 1.13's CPU linear algebra has none; int and bool refused),
 * batched over the leading dims (one batch: autograd's ops broadcast),
 * each matrix read into double, factorised in double and its results
 * rounded once to float32; one matrix per task, so the bits do not depend
 * on the thread count. PyTorch's refusals, in one line: fewer than 2 dims,
 * not square where square is needed, a singular matrix in solve and inv,
 * a matrix that is not positive-definite in cholesky ("the leading minor
 * of order k"), a NaN in the SVD's input; "(Batch element b): " names the
 * matrix of a batch.
 *
 * keep: NULL, or it gets what the backward needs (the factors in double,
 * a cg_la that cg_la_free frees); cg_k_linalg_backward then takes the
 * gradient of the output (its shape: a packed output's 1-d one) to the
 * gradients of the inputs (g0 of input 0, g1 of input 1 where there is
 * one; NULL to skip either), float32, by PyTorch 1.13's formulas in
 * double. False + error (a mode the backward refuses: QR's). */
typedef struct cg_la cg_la;
void cg_la_free(void *la);
bool cg_k_linalg_backward(const cg_la *la, const cg_tensor *g, cg_tensor **g0, cg_tensor **g1);
/* op's checks of a matrix argument arg (the kernels' and autograd's): not
 * NULL, float32 (int and bool refused as PyTorch does, bfloat16 and
 * float16 as PyTorch 1.13's CPU linear algebra does), at least 2 dims,
 * square when square, each dim within LAPACK's 32-bit indices. False +
 * one-line error. */
bool cg_k_linalg_check(const char *op, const char *arg, const cg_tensor *t, bool square);
/* torch.linalg.solve: A [*, n, n], B [*, n, k] (one batch) -> X [*, n, k]
 * with A X = B (dgetrf, dgetrs). */
cg_tensor *cg_k_linalg_solve(const cg_tensor *A, const cg_tensor *B, cg_la **keep);
/* torch.linalg.inv: [*, n, n] -> [*, n, n]. */
cg_tensor *cg_k_linalg_inv(const cg_tensor *A, cg_la **keep);
/* torch.linalg.det: [*, n, n] -> [*] (the LU's diagonal's product; 1 for
 * n = 0). */
cg_tensor *cg_k_linalg_det(const cg_tensor *A, cg_la **keep);
/* torch.linalg.slogdet packed: [2 batch], the signs (0 where det is 0 or
 * NaN) then log|det|. */
cg_tensor *cg_k_linalg_slogdet(const cg_tensor *A, cg_la **keep);
/* torch.linalg.cholesky(A, upper): L [*, n, n] lower with A = L L^T from
 * A's lower triangle, or (upper) U = L^T from its upper triangle (dpotrf;
 * the other triangle 0). A NaN in the triangle read makes that triangle of
 * the result NaN (no refusal). */
cg_tensor *cg_k_linalg_cholesky(const cg_tensor *A, bool upper, cg_la **keep);
typedef enum { CG_QR_REDUCED, CG_QR_COMPLETE, CG_QR_R } cg_qr_mode;
/* torch.linalg.qr(A, mode) packed (dgeqrf, dorgqr), A [*, m, n], k =
 * min(m, n): reduced [Q [*, m, k] | R [*, k, n]], complete [Q [*, m, m] |
 * R [*, m, n]], r [R [*, k, n]]. */
cg_tensor *cg_k_linalg_qr(const cg_tensor *A, cg_qr_mode mode, cg_la **keep);
/* torch.linalg.eigh(A, UPLO) (dsyevd) from A's lower (upper) triangle:
 * vectors, packed [L [*, n] | V [*, n, n]], eigenvalues ascending, the
 * eigenvectors as V's columns; else (eigvalsh) L [*, n]. A NaN or inf in
 * the triangle read: every output NaN (as PyTorch's). */
cg_tensor *cg_k_linalg_eigh(const cg_tensor *A, bool upper, bool vectors, cg_la **keep);
/* torch.linalg.svd(A, full_matrices) (dgesdd), k = min(m, n): vectors,
 * packed [U [*, m, k or m] | S [*, k] | Vh [*, k or n, n]], S descending;
 * else (svdvals) S [*, k]. An inf in A: every output NaN (as PyTorch's);
 * a NaN: refused. */
cg_tensor *cg_k_linalg_svd(const cg_tensor *A, bool full_matrices, bool vectors, cg_la **keep);
/* torch.linalg.pinv(A, atol, rtol): [*, m, n] -> [*, n, m], V diag(1/s)
 * U^T over the singular values s > max(atol, rtol s_max); a negative atol
 * or rtol is PyTorch's None (both None: rtol = eps max(m, n), eps
 * float32's). */
cg_tensor *cg_k_linalg_pinv(const cg_tensor *A, double atol, double rtol, cg_la **keep);
/* torch.linalg.lstsq(A, B, rcond).solution (dgelsy, PyTorch's CPU
 * default): A [*, m, n], B [*, m, k] (one batch) -> X [*, n, k], the
 * minimum-norm least-squares solution at rank by rcond (negative:
 * PyTorch's None, eps max(m, n)). */
cg_tensor *cg_k_linalg_lstsq(const cg_tensor *A, const cg_tensor *B, double rcond, cg_la **keep);
/* torch.linalg.vector_norm(x, ord, dims, keepdim) (core/linalg_norm.c):
 * any float dtype, the result in x's; ndims 0 reduces every dim; ord 0
 * counts the nonzeros, +-INFINITY the largest / smallest |x|, else
 * (sum |x|^ord)^(1/ord), in double. An empty reduction is refused for ord
 * < 0 and inf (no identity), as PyTorch. Its backward: g of the output's
 * shape -> the gradient of x (x's dtype), PyTorch's norm_backward. */
cg_tensor *cg_k_linalg_vector_norm(const cg_tensor *x, double ord, int ndims, const int *dims,
                                   bool keepdim);
cg_tensor *cg_k_linalg_vector_norm_backward(const cg_tensor *x, const cg_tensor *g, double ord,
                                            int ndims, const int *dims, bool keepdim);

/* ------------------------------------------------------- rearranging */
/* Copies of a's elements in new places (core/rearrange.c), every dtype,
 * a fresh contiguous result (never a view), the same bits for any thread
 * count; each backward is its forward again or a sum in a fixed order.
 * cg_k_pad: F.pad(a, pad, mode, value): n_pad sizes, pairs (left, right)
 * for the last dim first, then the one before it, ... (n_pad / 2 <=
 * ndim); a negative size crops.
 * - CG_PAD_CONSTANT: value (converted to a's dtype as cg_full_dtype
 *   converts it) around the kept part; a crop not more than the dim holds.
 * - CG_PAD_REFLECT: a position p before the dim's start reads -p, one past
 *   its end n - 1 reads 2 (n - 1) - p (the edge not repeated); each size
 *   less than the dim's, as PyTorch's reflection_pad.
 * - CG_PAD_REPLICATE: the nearest edge element; a padded dim not empty.
 * - CG_PAD_CIRCULAR: the dim cropped first, then wrapped around (the
 *   left pad reads the kept part's end), each size at most the kept part's
 *   length, as PyTorch's circular pad.
 * The non-constant modes take value 0 (PyTorch's "doesn't take in value
 * argument") and pad any dims of any rank (PyTorch's kernels: the last 1
 * to 3 under a batch dim or two; circular under two). */
typedef enum { CG_PAD_CONSTANT = 0, CG_PAD_REFLECT, CG_PAD_REPLICATE, CG_PAD_CIRCULAR } cg_pad_mode;
cg_tensor *cg_k_pad(const cg_tensor *a, int n_pad, const int64_t *pad, cg_pad_mode mode,
                    float value);
/* The gradient of cg_k_pad's input (ndim dims of shape, the padded
 * tensor's) from g (float32 or bfloat16, the pad's output shape): what a
 * constant pad kept, cropped back; for the other modes each input
 * element's sum of the gradients of the positions that read it, the last
 * dim folded first, in increasing position, in float32 (a bfloat16 g's
 * result rounded once at the end). */
cg_tensor *cg_k_pad_backward(const cg_tensor *g, int ndim, const int64_t *shape, int n_pad,
                             const int64_t *pad, cg_pad_mode mode);
/* torch.flip(a, dims): reversed along each of the ndims dims (each named
 * once; none: a copy). */
cg_tensor *cg_k_flip(const cg_tensor *a, int ndims, const int *dims);
/* torch.roll(a, shifts, dims): n shifts, shifts[i] along dims[i] (a dim
 * named twice rolls twice; element j goes to j + shift, modulo the size);
 * dims NULL: one shift of a flattened, as torch.roll without dims. */
cg_tensor *cg_k_roll(const cg_tensor *a, int n, const int64_t *shifts, const int *dims);
/* Tensor.repeat(sizes): a tiled sizes[d] times along dim d, n >= ndim
 * sizes (the first n - ndim make new leading dims; n <= CG_MAX_DIMS), each
 * >= 0. Its backward: g (the repeated shape) summed over the tiles back to
 * shape [ndim] (float dtypes). */
cg_tensor *cg_k_repeat(const cg_tensor *a, int n, const int64_t *sizes);
cg_tensor *cg_k_repeat_backward(const cg_tensor *g, int ndim, const int64_t *shape);

/* torch.tril (upper false) / torch.triu (upper true) over the last two dims
 * (a needs >= 2; any dtype): keeps a[..., i, j] where j - i <= diagonal
 * (tril) or j - i >= diagonal (triu), zeros elsewhere. */
cg_tensor *cg_k_triangle(const cg_tensor *a, int64_t diagonal, bool upper);
/* Inclusive cumulative sum along dim (reverse: from the end, the backward
 * of cumsum), accumulated in double in index order (bf16 and f16: rounded
 * back to their dtype; integers and bool refused). */
cg_tensor *cg_k_cumsum(const cg_tensor *a, int dim, bool reverse);
/* Indices of the k largest (or smallest) elements along dim, in order
 * (largest first, as torch.topk(sorted=True); ties: the lower index first;
 * NaN counts as the largest): an int64 tensor of a's shape with k at dim
 * (a 0-d a: 0-d for k = 1, [0] for k = 0).
 * a: any float or integer dtype (integers: the first k of a stable sort,
 * exact); bool refused, as PyTorch. */
cg_tensor *cg_k_topk_indices(const cg_tensor *a, int64_t k, int dim, bool largest);

/* Sorting, products and scans along one dim (core/scan.c). Each line is
 * computed in index order (products and scans in double, rounded once per
 * element): the same bits for any strides and thread count. a: any float
 * dtype (read as float32; float results rounded back to a's dtype; an
 * integer or bool a refused naming the op) unless said otherwise.
 * cg_k_sort_indices: the int64 indices that sort each line (a's shape),
 * ascending or descending, NaN the largest, ties in index order (stable).
 * cg_k_cum_extreme_indices: torch.cummax's (smallest: cummin's) indices: a
 * NaN takes over, a tie moves to the later element. These two take every
 * dtype (integers and bool compared exactly, as int64).
 * cg_k_prod: torch.prod(a, dim, keepdim); an integer or bool a gives int64
 * (wrapping), as PyTorch promotes; 1 over an empty dim. Its backward: g
 * (keepdim's shape) times the product of the other elements of the line.
 * cg_k_cumprod: torch.cumprod (integers and bool: int64); its backward
 * dx_k = sum_{j >= k} g_j prod_{i <= j, i != k} x_i, exact at zeros.
 * cg_k_logcumsumexp: torch.logcumsumexp (PyTorch's formula: runs of -inf
 * stay -inf, +inf gives +inf); its backward from x, the output y and g. */
cg_tensor *cg_k_sort_indices(const cg_tensor *a, int dim, bool descending);
cg_tensor *cg_k_cum_extreme_indices(const cg_tensor *a, int dim, bool smallest);
cg_tensor *cg_k_prod(const cg_tensor *a, int dim, bool keepdim);
cg_tensor *cg_k_prod_backward(const cg_tensor *x, const cg_tensor *g, int dim);
cg_tensor *cg_k_cumprod(const cg_tensor *a, int dim);
cg_tensor *cg_k_cumprod_backward(const cg_tensor *x, const cg_tensor *g, int dim);
cg_tensor *cg_k_logcumsumexp(const cg_tensor *a, int dim);
cg_tensor *cg_k_logcumsumexp_backward(const cg_tensor *x, const cg_tensor *y, const cg_tensor *g,
                                      int dim);
/* F.one_hot(ids, num_classes): int64 ids (any shape) to int64 [..., K], K
 * = num_classes or, for -1, the largest id + 1; a negative id, an id >=
 * num_classes, num_classes < -1, or -1 with no ids: NULL + error. */
cg_tensor *cg_k_one_hot(const cg_tensor *ids, int64_t num_classes);
/* torch.take_along_dim(a, index, dim) for an index of a's shape but along
 * dim (k entries there, each in [0, size)): a's elements copied, any
 * dtype, exactly; the values of sort, topk and cummax of integers. */
cg_tensor *cg_k_take_along_dim(const cg_tensor *a, int dim, const cg_tensor *index);

/* ---------------------------- masks, selection and predicates (core/select.c) */
/* torch.masked_select(a, mask): a's elements where mask is true, a and
 * mask broadcast together, in row-major order of that shape: a 1-d tensor
 * of a's dtype (any dtype). mask bool (another dtype refused: PyTorch also
 * takes uint8, which cgrad has not). */
cg_tensor *cg_k_masked_select(const cg_tensor *a, const cg_tensor *mask);
/* Tensor.masked_scatter(mask, source): a copy of a (broadcast with mask,
 * as PyTorch's out-of-place form) whose elements where mask is true are
 * source's first elements in row-major order. source of a's dtype and at
 * least as many elements as mask's true ones (else refused, as PyTorch).
 * Any dtype. Its gradient of source: g's elements where mask is true (g
 * and mask broadcast), then zeros, as a tensor of the source's shape
 * (ndim, shape), g's dtype (PyTorch's masked_scatter_backward). */
cg_tensor *cg_k_masked_scatter(const cg_tensor *a, const cg_tensor *mask, const cg_tensor *source);
cg_tensor *cg_k_masked_scatter_source_backward(const cg_tensor *g, const cg_tensor *mask, int ndim,
                                               const int64_t *shape);
/* torch.isnan, isinf, isfinite, isposinf, isneginf: bool of a's shape, any
 * dtype (integers and bool are finite, never NaN or inf). Not
 * differentiable (no k_: nothing to record). */
cg_tensor *cg_isnan(const cg_tensor *a);
cg_tensor *cg_isinf(const cg_tensor *a);
cg_tensor *cg_isfinite(const cg_tensor *a);
cg_tensor *cg_isposinf(const cg_tensor *a);
cg_tensor *cg_isneginf(const cg_tensor *a);
/* torch.isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False): bool of
 * the broadcast shape, a == b or |a - b| <= atol + rtol |b| with |a - b|
 * finite (equal_nan: NaN close to NaN), each step rounded in a's dtype as
 * PyTorch 1.13's ops round them (integers and bool: the bound and the
 * difference in float32, as PyTorch converts them); zero tolerances
 * compare for equality alone. a and b of one dtype; rtol and atol >= 0.
 * Where a's shape is not the broadcast one, PyTorch 1.13 refuses
 * equal_nan (an in-place op) and cgrad computes it. torch.allclose:
 * whether every element is close, into *result
 * (false + error on a refusal). torch.equal: one shape and every element
 * equal as numbers (NaN unequal; the dtypes may differ, as PyTorch 1.13's
 * CPU compares them), into *result. */
cg_tensor *cg_isclose(const cg_tensor *a, const cg_tensor *b, double rtol, double atol,
                      bool equal_nan);
bool cg_allclose(const cg_tensor *a, const cg_tensor *b, double rtol, double atol, bool equal_nan,
                 bool *result);
bool cg_equal(const cg_tensor *a, const cg_tensor *b, bool *result);
/* torch.count_nonzero(a, dims) (int64) and torch.any / torch.all(a, dims,
 * keepdim) (bool) over ndims dims, as cg_sum takes them (ndims 0: all;
 * PyTorch 1.13's any and all take one dim, later ones a tuple); any dtype,
 * NaN counts as nonzero; over no elements any is false, all true. */
cg_tensor *cg_count_nonzero(const cg_tensor *a, int ndims, const int *dims);
cg_tensor *cg_any(const cg_tensor *a, int ndims, const int *dims, bool keepdim);
cg_tensor *cg_all(const cg_tensor *a, int ndims, const int *dims, bool keepdim);

/* --------------------------- searching, counting and uniques (core/search.c) */
/* torch.searchsorted's keyword arguments (a zeroed struct or NULL: its
 * defaults) */
typedef struct {
    bool right;              /* right=True: the last position (a[i-1] <= v < a[i]) */
    const char *side;        /* side=: NULL, "left" or "right" (against right: refused) */
    const cg_tensor *sorter; /* sorter=: int64 of the sequence's shape, or NULL */
    bool out_int32;          /* out_int32=True: int32 positions, else int64 */
} cg_search_opts;
/* torch.searchsorted(sorted_sequence, values, ...): for each value, the
 * first position of its row of the sequence (1-d, or sharing all but the
 * last dim with values) whose element is not below it (right: above it),
 * by PyTorch's binary search (a NaN in the sequence counts as below
 * everything it is compared with; a NaN value goes last), through sorter's
 * order when given (its entries in [0, n), else refused: PyTorch reads out
 * of range). Both converted to their torch.result_type (bool refused);
 * integers compared exactly. Positions of values' shape. */
cg_tensor *cg_searchsorted(const cg_tensor *sorted_sequence, const cg_tensor *values,
                           const cg_search_opts *o);
/* torch.bucketize(input, boundaries, out_int32, right): searchsorted of
 * input in 1-d boundaries. */
cg_tensor *cg_bucketize(const cg_tensor *input, const cg_tensor *boundaries, bool out_int32,
                        bool right);
/* torch.bincount(x, weights, minlength): x 1-d int64 or int32 of
 * non-negative ids; counts (int64) or the weights' sums (weights float32
 * of x's length, added in index order in float32, PyTorch's bits), of
 * max(max(x) + 1, minlength) bins; an empty x gives int64 zeros of
 * minlength, weights or not (PyTorch's). Weights of another dtype are
 * refused (PyTorch sums them in float64, which cgrad has not).
 * autograd/ops.h's cg_bincount refuses weights that require grad. */
cg_tensor *cg_k_bincount(const cg_tensor *x, const cg_tensor *weights, int64_t minlength);
/* torch.histc(x, bins=100, min=0, max=0): the counts of x's elements
 * (float32 or bfloat16, any shape) in bins equal bins over [min, max] (min
 * == max: the data's range; still equal: widened by 1 each way; not finite
 * or max <= min refused), the last bin closed, elements outside and NaN
 * left out (PyTorch 1.13 counts NaN in the first bin, an accident of its
 * index arithmetic); a bin found by PyTorch's interpolation, each step in
 * x's dtype (float16, which PyTorch 1.13's CPU lacks: in float32). [bins]
 * of x's dtype (any float); counts rounded once (PyTorch's bfloat16 counts
 * add in bfloat16, stuck at 256). Not differentiable (PyTorch's neither). */
cg_tensor *cg_histc(const cg_tensor *x, int64_t bins, double min, double max);
/* torch.unique(x, sorted, return_inverse, return_counts): x's distinct
 * elements in ascending order, 1-d, x's dtype (any); *inverse (NULL: not
 * wanted) each element's position among them, int64 of x's shape; *counts
 * how many of each, int64. Elements equal as numbers are one (-0 and 0:
 * the first met); NaN are all distinct, last (PyTorch 1.13's CPU orders
 * NaN wrongly). sorted=false sorts too (PyTorch leaves that order open).
 * The _dim forms: torch.unique(x, dim=d), the distinct slices along d
 * (sorted by their elements in order, NaN the largest), inverse [size],
 * counts; an empty x only along d (PyTorch's refusals otherwise).
 * unique_consecutive: the runs of equal neighbours, in order. autograd's
 * cg_unique and friends refuse an x that requires grad. */
cg_tensor *cg_k_unique(const cg_tensor *x, bool sorted, cg_tensor **inverse, cg_tensor **counts);
cg_tensor *cg_k_unique_dim(const cg_tensor *x, int dim, bool sorted, cg_tensor **inverse,
                           cg_tensor **counts);
cg_tensor *cg_k_unique_consecutive(const cg_tensor *x, cg_tensor **inverse, cg_tensor **counts);
cg_tensor *cg_k_unique_consecutive_dim(const cg_tensor *x, int dim, cg_tensor **inverse,
                                       cg_tensor **counts);

/* ------------------------------------------ more pointwise ops (core/pointwise.c) */
/* These broadcast their operands and promote them as torch.result_type
 * (0-d operands decide only across categories), compute each element as
 * PyTorch 1.13's CPU kernel does (float32 arithmetic; bfloat16 and float16
 * computed in float32 and rounded once) and return a contiguous result.
 *
 * torch.nan_to_num(a, nan, posinf, neginf): NaN, +inf, -inf replaced
 * (posinf / neginf NULL: the dtype's largest / lowest finite value); the
 * values converted to a's dtype (beyond it: inf); integers and bool
 * copied. Its backward: g where x is finite, g * 0 elsewhere (PyTorch's
 * grad * isfinite(x)). */
cg_tensor *cg_k_nan_to_num(const cg_tensor *a, double nan, const double *posinf,
                           const double *neginf);
cg_tensor *cg_k_nan_to_num_backward(const cg_tensor *x, const cg_tensor *g);
/* torch.fmod (C's fmod: the sign of a) and torch.remainder (Python's %:
 * the sign of b): floats, or integers exactly (a zero divisor refused,
 * PyTorch's ZeroDivisionError; INT64_MIN by -1 gives 0, where PyTorch
 * traps); bool refused. cg_k_div_rounded: a / b rounded toward zero
 * (trunc) or down (floor, PyTorch's div_floor_floating), floats: the
 * gradients of their divisor, -g trunc(a / b) and -g floor(a / b). */
cg_tensor *cg_k_fmod(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_k_remainder(const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_k_div_rounded(const cg_tensor *a, const cg_tensor *b, bool floor);
/* torch.lerp(start, end, weight): start + w (end - start) where |w| < 0.5,
 * else end - (end - start) (1 - w) (PyTorch's two sides); weight a tensor
 * or NULL (then w); start, end and weight of one float dtype (else
 * refused, as PyTorch; float16, which PyTorch 1.13's CPU lacks, computed
 * in float32 and rounded once). */
cg_tensor *cg_k_lerp(const cg_tensor *start, const cg_tensor *end, const cg_tensor *weight,
                     float w);
/* torch.clamp(x, min, max) with tensors (either NULL, not both): min(max(x,
 * min), max), NaN where x or a bound is NaN, max where min > max; any dtype
 * but bool. Its backward (which: 0 x, 1 min, 2 max), PyTorch's
 * clamp_backward and clamp_backward_min_max: g to x where min <= x <= max
 * (at a bound too), to min where x < min < max, to max where x > max or
 * max < min; the broadcast shape, g's dtype. */
cg_tensor *cg_k_clamp_tensor(const cg_tensor *x, const cg_tensor *lo, const cg_tensor *hi);
cg_tensor *cg_k_clamp_tensor_backward(const cg_tensor *x, const cg_tensor *lo, const cg_tensor *hi,
                                      const cg_tensor *g, int which);
/* torch.linalg.cross(a, b, dim): the cross product along dim (size 3 in
 * both), a and b of one number of dims (the others broadcast) and one
 * dtype (not bool); integers wrap. */
cg_tensor *cg_k_cross(const cg_tensor *a, const cg_tensor *b, int dim);
/* One step of torch.diff along dim (a of at least 1 dim, any dtype):
 * a[i + 1] - a[i] (bool: their xor; integers wrap), size - 1 along dim. */
cg_tensor *cg_k_diff(const cg_tensor *a, int dim);

/* Convolution (core/conv.c), PyTorch's F.conv1d / F.conv2d / F.conv3d
 * with zero padding. nd spatial dims (1, 2 or 3); x [N, C, L] or
 * unbatched [C, L] (nd 1), [N, C, H, W] or [C, H, W] (nd 2), [N, C, D, H,
 * W] or [C, D, H, W] (nd 3), float32 or bfloat16 (widened: the result is
 * float32), any strides; w [O, C / groups, K], [O, C / groups, KH, KW] or
 * [O, C / groups, KD, KH, KW] and b [O] (or NULL), float32. cfg (NULL:
 * the defaults, CG_CONV_DEFAULT) per spatial dim, entry 0 the first (nd
 * reads entries 0 to nd - 1 only): stride >= 1, padding >= 0 on both sides, dilation >= 1, groups
 * >= 1 dividing C and O. pad CG_CONV_SAME pads dilation (K - 1) in all,
 * the odd one on the right (PyTorch's padding='same', stride 1 only);
 * CG_CONV_VALID pads nothing (padding='valid'). Output length (L + 2 pad -
 * dilation (K - 1) - 1) / stride + 1 >= 1. Each sample's group is its
 * weight rows [O / groups, C / groups K] times x's unfold (im2col: a row
 * a channel's tap, a column an output position; x itself for a 1x1
 * kernel at stride 1 without padding) on the GEMM, written where the
 * output has it, so the thread's matrix precision (bf16 or fp32) applies
 * as for a Linear layer. The result is contiguous, x's batchedness. NULL + one-line error on a bad
 * shape, dtype or configuration. */
typedef enum { CG_CONV_PAD_NUMBERS = 0, CG_CONV_SAME, CG_CONV_VALID } cg_conv_pad;
typedef struct {
    int64_t stride[3], padding[3], dilation[3];
    int64_t groups;
    cg_conv_pad pad; /* CG_CONV_PAD_NUMBERS: padding[] is read */
    /* the transposed convolution's only (0 for a convolution): the size
     * added to one side of the output, < stride or < dilation */
    int64_t output_padding[3];
    /* nn.Conv's padding_mode: CG_PAD_CONSTANT is 'zeros', what these
     * kernels do; 'reflect', 'replicate' and 'circular' are autograd's
     * cg_conv1d / cg_conv2d / cg_conv3d's, which pad x by the padding (numbers or
     * 'same') in that mode with cg_pad and convolve without padding, as
     * PyTorch's module does. The kernels refuse them; a transposed
     * convolution takes 'zeros' only, as PyTorch's. */
    cg_pad_mode padding_mode;
} cg_conv_cfg;
#define CG_CONV_DEFAULT \
    ((cg_conv_cfg){     \
        {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, CG_CONV_PAD_NUMBERS, {0, 0, 0}, CG_PAD_CONSTANT})
/* cfg's numbers valid for nd spatial dims (cg_k_conv checks them first):
 * false + one-line error naming op ("conv2d: stride must be positive (got
 * 0 in spatial dim 1)"); output_padding must be 0. */
bool cg_conv_cfg_check(const char *op, int nd, const cg_conv_cfg *cfg);
/* The same for a transposed convolution (what cg_k_conv_transpose checks
 * first): padding numbers only, output_padding >= 0 and smaller than the
 * stride or the dilation (PyTorch's rule), padding_mode zeros. */
bool cg_conv_transpose_cfg_check(const char *op, int nd, const cg_conv_cfg *cfg);
/* The padding before (*lo) and after (*hi) spatial dim i of a kernel of k
 * taps under cfg: 'same' dilation (k - 1) in all, the odd one after;
 * 'valid' none; else padding[i] on both sides. */
void cg_conv_padding(const cg_conv_cfg *cfg, int i, int64_t k, int64_t *lo, int64_t *hi);
cg_tensor *cg_k_conv(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                     const cg_conv_cfg *cfg);
/* Its gradients given g (the output's shape, any strides): dx (x's shape,
 * float32), dw (w's shape), db [O] (each may be NULL to skip). dx is
 * folded back from W^T g (col2im) one input plane a task, the taps in
 * a fixed order; dw sums the samples' g x^T in chunks of samples set by
 * the batch, each in order; db sums g's rows in double: the same bits for
 * any thread count. False + error on failure. */
bool cg_k_conv_backward(int nd, const cg_tensor *x, const cg_tensor *w, const cg_conv_cfg *cfg,
                        const cg_tensor *g, cg_tensor **dx, cg_tensor **dw, cg_tensor **db);

/* Transposed convolution (core/conv_transpose.c), PyTorch's
 * F.conv_transpose1d / F.conv_transpose2d / F.conv_transpose3d: the data
 * gradient of the convolution whose output x would be. x [N, C, L] or
 * unbatched [C, L] (nd 1), [N, C, H, W] or [C, H, W] (nd 2), [N, C, D, H,
 * W] or [C, D, H, W] (nd 3), float32 or bfloat16 (widened: the result is
 * float32), any strides; w [C, O / groups, K], [C, O / groups, KH, KW] or
 * [C, O / groups, KD, KH, KW] and b [O] (or NULL), float32. cfg (NULL: CG_CONV_DEFAULT)
 * as cg_conv_transpose_cfg_check accepts it, groups dividing C. Output
 * length (L - 1) stride - 2 padding + dilation (K - 1) + output_padding + 1
 * >= 1. Made of the convolution's passes: each sample's group is W^T x
 * [O / groups K, L] on the GEMM (the thread's matrix precision) folded
 * back (col2im, a plane a task, the taps in index order), then the bias
 * added. The result is contiguous, x's batchedness. NULL + one-line error
 * on a bad shape, dtype or configuration. */
cg_tensor *cg_k_conv_transpose(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                               const cg_conv_cfg *cfg);
/* Its gradients given g (the output's shape, any strides): dx (x's shape,
 * float32) the convolution of g with w, dw (w's shape) the convolution's
 * weight gradient with g as its input and x as its output's gradient
 * (summed in chunks of samples set by the batch), db [O] g's rows summed
 * in double (each may be NULL to skip): the same bits for any thread
 * count. False + error on failure. */
bool cg_k_conv_transpose_backward(int nd, const cg_tensor *x, const cg_tensor *w,
                                  const cg_conv_cfg *cfg, const cg_tensor *g, cg_tensor **dx,
                                  cg_tensor **dw, cg_tensor **db);
/* nn.ConvTranspose's forward(x, output_size): cfg->output_padding set
 * for the requested output size (n_size numbers: nd, or x's dims, as
 * PyTorch's, the last nd read) of a transposed convolution of x by w
 * under cfg (its output_padding ignored, as PyTorch's): size minus the
 * smallest output, (L - 1) stride - 2 padding + dilation (K - 1) + 1, in
 * each dim. A size outside [smallest, smallest + stride - 1]: false + one
 * line naming the valid range, as PyTorch's ValueError ("conv_transpose2d:
 * requested an output size of [13, 12], but valid sizes range from [11,
 * 11] to [12, 12] for an input of [5, 5]"); so are a wrong count and
 * cfg, x or w that cg_k_conv_transpose would refuse by rank. */
bool cg_conv_transpose_output_padding(int nd, const cg_tensor *x, const cg_tensor *w, int n_size,
                                      const int64_t *size, cg_conv_cfg *cfg);

/* F.unfold / F.fold (core/unfold.c), PyTorch's nn.Unfold / nn.Fold: the
 * convolution's im2col and col2im. The options per spatial dim (entry 0
 * the height): kernel_size >= 1, dilation >= 1, padding >= 0 (zeros on
 * both sides), stride >= 1. */
typedef struct {
    int64_t kernel_size[2], dilation[2], padding[2], stride[2];
} cg_fold_cfg;
/* a kernel of kh x kw taps, dilation 1, padding 0, stride 1 */
#define CG_FOLD_CFG(kh, kw) ((cg_fold_cfg){{(kh), (kw)}, {1, 1}, {0, 0}, {1, 1}})
/* F.unfold(x, kernel_size, dilation, padding, stride): x [N, C, H, W] or
 * unbatched [C, H, W] (float32 or bfloat16, widened: the result is
 * float32; any strides; no empty dim but the batch) -> [N, C KH KW, L]
 * (or [C KH KW, L]), contiguous: row c KH KW + kh KW + kw holds channel
 * c's tap (kh, kw) at each of the L = LH LW sliding blocks (row-major),
 * zero in the padding; LH = (H + 2 padding - dilation (KH - 1) - 1) /
 * stride + 1 (and LW) must be >= 1. NULL + one-line error on a bad shape,
 * dtype or option. */
cg_tensor *cg_k_unfold(const cg_tensor *x, const cg_fold_cfg *cfg);
/* F.fold(x, output_size (oh, ow), ...): the adjoint, x [N, C KH KW, L] or
 * [C KH KW, L] (float32 or bfloat16, widened; any strides; no empty dim
 * but the batch) -> [N, C, oh, ow] (or [C, oh, ow]), each block's taps
 * added where unfold takes them from (the overlaps summed, a plane's taps
 * in index order: the same bits for any thread count; the padding
 * dropped). x's dim -2 must divide by KH KW and L be the sliding blocks
 * of [oh, ow] as unfold counts them, else NULL + one-line error. */
cg_tensor *cg_k_fold(const cg_tensor *x, int64_t oh, int64_t ow, const cg_fold_cfg *cfg);

#ifdef __cplusplus
}
#endif
#endif
