/* cgrad core: random tensors (torch.bernoulli, randint, normal, poisson,
 * multinomial, randperm, rand_like, ...), each from cgrad's generator
 * (cg_rng) and, with a _torch name, from PyTorch's (cg_mt19937, seeded as
 * torch.manual_seed), core/tensor.h's two generators.
 *
 * cg_rng: element i of a result (row-major order of its shape) is drawn
 * from draw (c + i) of the generator, c its counter at the call, which
 * then advances by the element count, so a result is the same for any
 * number of threads. An element that needs several draws (a Poisson
 * count, a rejection) takes them from a stream seeded by its own draw. A
 * row of multinomial takes its row's draws (below).
 *
 * _torch: the values PyTorch 1.13's CPU kernels give after the same draws
 * from the same generator state, in the same order (cpu_serial_kernel's,
 * the row-major order of a contiguous result), and the generator advanced
 * by as many draws: where the functions say "bit for bit", the meson test
 * torch_init compares them with python3-torch (tests/interop). The
 * generator is sequential (not counter-based); these run on one thread.
 *
 * Every function returns a new tensor (or fills t) and records no graph;
 * NULL (false) + one line of error (core/error.h) on bad input, a NULL
 * generator included. */
#ifndef CG_CORE_RANDOM_H
#define CG_CORE_RANDOM_H

#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.bernoulli(p): 1 where a uniform u < p[i], else 0, of p's shape
 * and dtype (float32, bfloat16 or float16; any strides). Every p[i] in
 * [0, 1], as PyTorch refuses others (NaN too). cg_rng: u a 53-bit double.
 * _torch: float32 p only; u = (32-bit draw & (2^24 - 1)) 2^-24 compared
 * in float (bernoulli_distribution<float>): bit for bit. */
cg_tensor *cg_bernoulli(cg_rng *r, const cg_tensor *p);
cg_tensor *cg_bernoulli_torch(cg_mt19937 *g, const cg_tensor *p);
/* Tensor.bernoulli_(p): t (any dtype; any strides for cg_rng, contiguous
 * for _torch) filled with 1 where a uniform u < p, else 0; p in [0, 1].
 * u: a 53-bit double (_torch: of a 64-bit draw, two 32-bit ones, high
 * first, as bernoulli_distribution<double>: bit for bit). */
bool cg_bernoulli_(cg_tensor *t, cg_rng *r, double p);
bool cg_bernoulli_torch_(cg_tensor *t, cg_mt19937 *g, double p);

/* torch.rand_like(x) / torch.randn_like(x): U[0, 1) / N(0, 1) of x's
 * shape and dtype (a float dtype; contiguous), as cg_rand / cg_randn draw
 * (bfloat16 and float16 rounded from float32: a uniform within half a
 * unit of their last place of 1 rounds to 1, which PyTorch's narrower
 * draws never give). _torch: float32 x, the
 * values of cg_uniform_torch_ (bit for bit) and cg_normal_torch_ (to the
 * last bit of log, cos and sin: core/mt19937.c). */
cg_tensor *cg_rand_like(cg_rng *r, const cg_tensor *x);
cg_tensor *cg_randn_like(cg_rng *r, const cg_tensor *x);
cg_tensor *cg_rand_like_torch(cg_mt19937 *g, const cg_tensor *x);
cg_tensor *cg_randn_like_torch(cg_mt19937 *g, const cg_tensor *x);

/* torch.randint(low, high, shape): int64, uniform in [low, high); low <
 * high ("random_ expects 'from' to be less than 'to'", as PyTorch).
 * cg_rng: unbiased (a 64-bit draw, rejected and redrawn from its
 * element's stream in the rare case it falls in the last incomplete
 * range). _torch: (draw % (high - low)) + low with a 32-bit draw, or a
 * 64-bit one when high - low >= 2^32 (PyTorch's, which is slightly
 * biased): bit for bit. */
cg_tensor *cg_randint(cg_rng *r, int64_t low, int64_t high, int ndim, const int64_t *shape);
cg_tensor *cg_randint_torch(cg_mt19937 *g, int64_t low, int64_t high, int ndim,
                            const int64_t *shape);
/* torch.randint_like(x, low, high): x's shape and dtype (int64, int32 or
 * float32; [low, high) must fit the dtype: float32 within +-2^24, where
 * every integer is exact), the draws of cg_randint[_torch]. */
cg_tensor *cg_randint_like(cg_rng *r, const cg_tensor *x, int64_t low, int64_t high);
cg_tensor *cg_randint_like_torch(cg_mt19937 *g, const cg_tensor *x, int64_t low, int64_t high);

/* torch.normal(mean, std): float32 of the broadcast shape of mean and std
 * (float32, any strides), z * std + mean for z ~ N(0, 1) drawn over that
 * shape (PyTorch's order: normal_(0, 1), then mul_(std), add_(mean), two
 * roundings). Every std >= 0 ("normal expects all elements of std >= 0.0";
 * NaN refused). _torch: z from cg_normal_torch_ (to the last bit). */
cg_tensor *cg_normal(cg_rng *r, const cg_tensor *mean, const cg_tensor *std);
cg_tensor *cg_normal_torch(cg_mt19937 *g, const cg_tensor *mean, const cg_tensor *std);

/* torch.poisson(rates): float32 counts of rates' shape (float32, any
 * strides), each Poisson(rate): for a rate below 10 the product of
 * uniforms until it drops to exp(-rate) or below, for 10 and above
 * Hoermann's transformed rejection (PTRS, 1993), PyTorch's two methods.
 * A rate 0 gives 0. Rates must be >= 0 (PyTorch's "invalid Poisson rate")
 * and finite (PyTorch loops or returns -2^63 for inf: refused here).
 * _torch: 53-bit uniforms (random64), the same double arithmetic as
 * PyTorch's sample_poisson with glibc's log, exp and lgamma: bit for bit. */
cg_tensor *cg_poisson(cg_rng *r, const cg_tensor *rates);
cg_tensor *cg_poisson_torch(cg_mt19937 *g, const cg_tensor *rates);

/* torch.multinomial(probs, num_samples, replacement) (nn/sample.h's
 * cg_multinomial is one draw from a float array): int64 [num_samples]
 * for probs [n], [B, num_samples] for [B, n] (float32, any strides: a
 * row's weights need not sum to 1). Refused as PyTorch refuses: probs
 * not 1-d or 2-d, n > 2^24, num_samples <= 0, a negative, infinite or NaN
 * weight, a row that sums to 0, and without replacement num_samples > n;
 * and, a departure, without replacement num_samples above a row's count
 * of nonzero weights (PyTorch 1.13 then returns categories of weight 0).
 * A category of weight 0 is never drawn. Without replacement the samples
 * are distinct.
 *   cg_rng: with replacement, sample s of row b is the first category
 *   whose cumulative weight (in double) exceeds u * the row's total, u
 *   the 53-bit uniform of draw (b num_samples + s); without, every
 *   category j gets a score w_j / E_j, E_j = -log(1 - u) from draw
 *   (b n + j), and the num_samples highest scores are taken, highest
 *   first (ties: the lower index), which draws them one by one without
 *   replacement (the exponential race, as PyTorch's).
 *   _torch: PyTorch 1.13's two paths: with replacement its float
 *   cumulative sum, normalised, and a binary search for each 53-bit
 *   uniform, row by row; without, exponential_ over probs' shape (double,
 *   rounded to float), w / E in float, then topk (argmax for one). Bit for bit, but
 *   for a tie of two float scores (PyTorch's topk may order them either
 *   way) and a uniform of exactly 0 (with probability 2^-53 PyTorch draws
 *   category 0 even if its weight is 0, and so does this twin). */
cg_tensor *cg_multinomial_tensor(cg_rng *r, const cg_tensor *probs, int64_t num_samples,
                                 bool replacement);
cg_tensor *cg_multinomial_torch(cg_mt19937 *g, const cg_tensor *probs, int64_t num_samples,
                                bool replacement);

/* torch.randperm(n) as a tensor: int64 [n], the permutation cg_randperm
 * draws (the same draws and values). _torch: PyTorch's CPU shuffle: for
 * i from 0 to n - 2, swap elements i and i + (32-bit draw % (n - i)):
 * bit for bit (PyTorch releases after 1.13 draw 64 bits from n of about
 * 2^28 up). */
cg_tensor *cg_randperm_tensor(cg_rng *r, int64_t n);
cg_tensor *cg_randperm_torch(cg_mt19937 *g, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
