/* cgrad nn: parameter initialisation.
 *
 * Each function fills an existing tensor (any strides) in place, outside
 * the graph, drawing from rng (which advances). False + error on bad
 * arguments; NULL tensor gives false. */
#ifndef CG_NN_INIT_H
#define CG_NN_INIT_H

#include <math.h>

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

bool cg_init_zeros_(cg_tensor *t);
bool cg_init_ones_(cg_tensor *t);
/* N(mean, std): mean and std finite, std >= 0 */
bool cg_init_normal_(cg_tensor *t, cg_rng *rng, float mean, float std);
/* U[lo, hi): lo <= hi, both finite */
bool cg_init_uniform_(cg_tensor *t, cg_rng *rng, float lo, float hi);
/* Xavier/Glorot uniform: U(-a, a), a = sqrt(3) * gain * sqrt(2 / (fan_in +
 * fan_out)) (computed in double as torch.nn.init.xavier_uniform_ does),
 * with fan_in = shape[1] * r and fan_out = shape[0] * r, r the product of
 * shape[2:] (PyTorch's convention; a Linear weight [out, in] has fan_in =
 * in). Needs ndim >= 2 and a finite gain >= 0 (both xavier functions). */
bool cg_init_xavier_uniform_(cg_tensor *t, cg_rng *rng, float gain);
/* Xavier normal: N(0, gain * sqrt(2 / (fan_in + fan_out))). */
bool cg_init_xavier_normal_(cg_tensor *t, cg_rng *rng, float gain);
/* torch.nn.init.kaiming_uniform_(t, a) (fan_in mode, leaky_relu): U(-b, b),
 * b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in), computed in double as
 * PyTorch does. a = sqrt(5) is nn.Linear's weight: b = 1/sqrt(fan_in).
 * Needs ndim >= 2. */
bool cg_init_kaiming_uniform_(cg_tensor *t, cg_rng *rng, double a);
/* torch.nn.init.calculate_gain(nonlinearity, param): 1 for "linear",
 * "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
 * "conv_transpose3d" and "sigmoid"; 5/3 for "tanh"; sqrt(2) for "relu";
 * sqrt(2 / (1 + s^2)) for "leaky_relu", s = param its negative slope
 * (CG_GAIN_NO_PARAM, PyTorch's param=None: s = 0.01); 3/4 for "selu"
 * (PyTorch's empirical value; for self-normalising networks PyTorch
 * advises "linear"). param is read for leaky_relu only. -1 + error for
 * another name ("Unsupported nonlinearity") or an infinite slope. */
#define CG_GAIN_NO_PARAM NAN
double cg_init_calculate_gain(const char *nonlinearity, double param);
/* torch.nn.init._calculate_fan_in_and_fan_out(t): fan_in = shape[1] r,
 * fan_out = shape[0] r, r the product of shape[2:] (either pointer may
 * be NULL). False + error for fewer than 2 dims, as PyTorch refuses. */
bool cg_init_calculate_fans(const cg_tensor *t, int64_t *fan_in, int64_t *fan_out);
/* torch.nn.init.constant_(t, val) (any dtype, any strides; zeros_ and
 * ones_ above are constant_ of 0 and 1). */
bool cg_init_constant_(cg_tensor *t, float val);
/* eye_(t): 2-d t (any dtype, any strides) the identity: 1 at [i, i], 0
 * elsewhere. dirac_(t, groups): 3-, 4- or 5-d t [out, in, k...] zero but
 * 1 at [g out/groups + c, c, k/2...] for each group g and c < min(out /
 * groups, in), a convolution that passes its input through; shape[0]
 * divisible by groups >= 1. Refusals as PyTorch's. */
bool cg_init_eye_(cg_tensor *t);
bool cg_init_dirac_(cg_tensor *t, int groups);
/* torch.nn.init.kaiming_normal_(t, a, mode, nonlinearity): N(0, std),
 * std = calculate_gain(nonlinearity, a) / sqrt(fan), fan the fan_in or
 * fan_out (mode "fan_in" or "fan_out", any case; NULL: "fan_in"), a the
 * negative slope of leaky_relu (PyTorch's default 0), nonlinearity NULL:
 * "leaky_relu". kaiming_uniform_ex_: U(-b, b), b = sqrt(3) std
 * (cg_init_kaiming_uniform_ is its fan_in leaky_relu form). A tensor with
 * a zero size is left as it is (PyTorch's no-op), before any other
 * check; otherwise fewer than 2 dims, another mode or nonlinearity, or a
 * NaN a is refused. */
bool cg_init_kaiming_normal_(cg_tensor *t, cg_rng *rng, double a, const char *mode,
                             const char *nonlinearity);
bool cg_init_kaiming_uniform_ex_(cg_tensor *t, cg_rng *rng, double a, const char *mode,
                                 const char *nonlinearity);
/* torch.nn.init.trunc_normal_(t, mean, std, a, b) (PyTorch's defaults 0,
 * 1, -2, 2): N(mean, std) cut to [a, b], PyTorch's method: u uniform in
 * [2 cdf(alpha) - 1, 2 cdf(beta) - 1) (alpha = (a - mean) / std, beta the
 * same of b), then erfinv(u) std sqrt(2) + mean, clamped to [a, b], in
 * float32. A finite mean, a finite std > 0 and a <= b (infinite a or b
 * allowed; PyTorch divides by std = 0). Float32 t, any strides. */
bool cg_init_trunc_normal_(cg_tensor *t, cg_rng *rng, double mean, double std, double a, double b);
/* torch.nn.init.sparse_(t, sparsity, std) (PyTorch's std 0.01): 2-d t
 * [rows, cols] N(0, std), then in each column ceil(sparsity rows) rows
 * set to 0, the first of a random permutation of the rows (one drawn per
 * column, as PyTorch's). sparsity in [0, 1] (PyTorch takes others: a
 * negative one zeroes all but the last rows), std >= 0 finite. */
bool cg_init_sparse_(cg_tensor *t, cg_rng *rng, double sparsity, double std);
/* The same on PyTorch's generator g (core/tensor.h cg_mt19937): the values
 * torch.manual_seed(s) and then torch.nn.init's function give, the
 * generator advanced by as many draws. Contiguous float32 t. Uniform
 * draws (kaiming_uniform, xavier_uniform) bit for bit; trunc_normal bit
 * for bit (its uniforms, PyTorch's float erfinv, then its float mul, add
 * and clamp); normal draws (kaiming_normal, xavier_normal, sparse's
 * values) to the last bit of cg_normal_torch_, sparse's zeros where
 * PyTorch's are (torch.randperm: cg_randperm_torch). Checked against
 * python3-torch by the meson test torch_init. */
bool cg_init_kaiming_normal_torch_(cg_tensor *t, cg_mt19937 *g, double a, const char *mode,
                                   const char *nonlinearity);
bool cg_init_kaiming_uniform_torch_(cg_tensor *t, cg_mt19937 *g, double a, const char *mode,
                                    const char *nonlinearity);
bool cg_init_xavier_uniform_torch_(cg_tensor *t, cg_mt19937 *g, double gain);
bool cg_init_xavier_normal_torch_(cg_tensor *t, cg_mt19937 *g, double gain);
bool cg_init_trunc_normal_torch_(cg_tensor *t, cg_mt19937 *g, double mean, double std, double a,
                                 double b);
bool cg_init_sparse_torch_(cg_tensor *t, cg_mt19937 *g, double sparsity, double std);
/* torch.nn.init.orthogonal_(t, gain): t (ndim >= 2, any float dtype, any
 * strides) seen as [rows, cols] (rows = shape[0], cols the product of the
 * others) filled with a (semi-)orthogonal matrix times gain: the Q of the
 * QR of an N(0, 1) draw [rows, cols] (of its transpose when rows < cols,
 * so that the rows come out orthonormal), each column times the sign of
 * R's diagonal element (Mezzadri's correction, as PyTorch's), through
 * LAPACK's QR in double (core/ops.h cg_k_linalg_qr), rounded to float32
 * and multiplied by gain there, as PyTorch's q.mul_(gain); then rounded to
 * t's dtype (bfloat16 too, where PyTorch's QR has none). An empty t is
 * left as it is, after the checks. */
bool cg_init_orthogonal_(cg_tensor *t, float gain, cg_rng *rng);
/* The same with PyTorch's generator g (seeded by cg_mt19937_seed(g, s) as
 * torch.manual_seed(s)): torch.nn.init.orthogonal_(t, gain)'s values,
 * within its float32 QR's rounding (about 1e-6). */
bool cg_init_orthogonal_torch_(cg_tensor *t, float gain, cg_mt19937 *g);
/* A generator that the initialisers above do not draw from (as
 * torch.nn.utils.skip_init): given it, each checks its arguments and leaves
 * the tensor as it is, and the constructors of nn/layers.h, nn/attention.h
 * and nn/transformer.h leave their weights at zero. For a model whose
 * weights are filled next, by a checkpoint or by a second initialisation:
 * loading a model then costs no draws. Only for these functions: core's
 * (cg_normal_, ...) would draw from it like any other. */
cg_rng *cg_init_skip(void);

/* Two initialisations of a whole module tree, not to be confused:
 *
 *   cg_module_reset_parameters[_torch]: PyTorch's defaults, what its
 *     constructors (each module's reset_parameters) give;
 *   cg_module_init_params[_torch]: the zoo's, models.py init_params,
 *     N(0, std) for every Linear and Embedding weight (std 0.02), which
 *     the zoo's models and the nn constructors (cg_linear_new, ...) use.
 *
 * cg_module_reset_parameters: PyTorch's default initialisation of every
 * module of the tree, visited depth first in registration order (a
 * module's own parameters, then its children), each drawing in PyTorch's
 * order:
 *   Linear, Conv1d,  weight kaiming_uniform_(a = sqrt(5)), i.e.
 *   Conv2d, Conv3d,  U(-1/sqrt(in), 1/sqrt(in)); bias U(-1/sqrt(in),
 *   ConvTranspose-   1/sqrt(in)) (nn.Linear.reset_parameters; in the
 *   1d, 2d, 3d       weight's dim 1 times the kernel's taps);
 *   Bilinear         weight, then bias, U(-1/sqrt(in1), 1/sqrt(in1))
 *                    (nn.Bilinear.reset_parameters);
 *   Embedding        weight N(0, 1);
 *   LayerNorm        weight 1, bias 0; RMSNorm weight 1;
 *   RNN, GRU, LSTM   every parameter U(-1/sqrt(H), 1/sqrt(H)), in
 *   and their cells  registration order (nn.GRU's, nn.GRUCell's, ...:
 *                    nn/rnn.h);
 *   MultiHeadAttention  as nn.MultiheadAttention: o_proj as a Linear
 *                    (out_proj is built first), then q, k and v weights
 *                    as one xavier_uniform_ of the packed in_proj_weight
 *                    [3d, d] (fan_in d, fan_out 3d), every bias 0;
 *   TransformerEncoder, TransformerDecoder  layer 0 initialised, the
 *                    others copies of it (nn.TransformerEncoder deep-copies
 *                    the layer it is given: every layer starts equal);
 *   a LoRA adapter   lora_A as a Linear weight (PEFT's kaiming_uniform_),
 *                    lora_B 0.
 * Other parameters (a module of your own) are left as they are; the
 * containers (FeedForward, the encoder and decoder layers, LMBlock, ...)
 * initialise their children. The draws come from rng: the same
 * distributions as PyTorch, not its numbers. */
bool cg_module_reset_parameters(cg_module *m, cg_rng *rng);
/* The same with PyTorch's generator g (seeded by cg_mt19937_seed(g, s) as
 * torch.manual_seed(s); it advances, so further modules continue the
 * stream): the values `torch.manual_seed(s); nn.Linear(...)` (Embedding,
 * LayerNorm, MultiheadAttention, TransformerEncoderLayer, ...) gives,
 * when the PyTorch modules are built in the order of the tree. Uniform
 * draws are PyTorch's bits; normal ones (Embedding) may differ in the last
 * bit (core/tensor.h, cg_normal_torch_). Parameters must be contiguous. */
bool cg_module_reset_parameters_torch(cg_module *m, cg_mt19937 *g);

/* models.py init_params semantics over a module tree, visited depth first
 * in registration order: every Linear and Embedding weight ~ N(0, std);
 * every LayerNorm/RMSNorm weight = 1; every parameter named "bias" = 0.
 * Other parameters are left as they are. */
bool cg_module_init_params(cg_module *m, cg_rng *rng, float std);
/* The same with PyTorch's generator and normal_ (core/tensor.h
 * cg_mt19937): the weights a PyTorch script gets from torch.manual_seed(seed),
 * then building a model of the same structure (whose nn.Linear and
 * nn.Embedding constructors draw their default initialisation first) and
 * running models.py init_params on it; a recurrent module keeps what its
 * constructor drew (init_params leaves it), as there. This is the
 * zoo models' initialisation, so a --seed means what it means to the
 * reference scripts. Parameters must be contiguous. */
bool cg_module_init_params_torch(cg_module *m, uint64_t seed, float std);

#ifdef __cplusplus
}
#endif
#endif
