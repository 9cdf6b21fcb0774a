/* cgrad core: single-precision GEMM through BLIS.
 *
 * Debian's BLIS does not recognise some CPUs (e.g. AMD family 0x1A with
 * AVX-512) and falls back to slow generic kernels. At first use we pick a
 * BLIS context from cpuid: AVX-512F -> skx, AVX2+FMA -> haswell, otherwise
 * BLIS's own choice. CG_BLIS_DEFAULT=1 in the environment forces BLIS's
 * own choice. See docs/api.md, "Libraries used, and why". */
#ifndef CG_GEMM_H
#define CG_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cg_gemm_path {
    CG_GEMM_AUTO = 0,      /* cpuid choice (or default when forced by env) */
    CG_GEMM_DEFAULT,       /* BLIS's own choice */
    CG_GEMM_SKX,           /* AVX-512 context */
    CG_GEMM_HASWELL,       /* AVX2 + FMA context */
    CG_GEMM_BF16,          /* bf16 products, fp32 sums: AVX512_BF16 micro-kernel */
    CG_GEMM_BF16_EMULATED, /* the same bits with AVX2 and FMA */
    CG_GEMM_BF16_AMX,      /* bf16 products, fp32 sums: AMX tiles (other bits, see below) */
} cg_gemm_path;

/* Precision of the matrix products the library computes (linear layers,
 * attention, matmul), a policy of the calling thread, as PyTorch's
 * torch.autocast("cpu", dtype=torch.bfloat16) is (a new thread starts in
 * fp32; docs/bf16.md says which ops compute in bf16 and which stay fp32):
 *   CG_PRECISION_FP32  fp32 products (the default);
 *   CG_PRECISION_BF16  mixed precision: both operands rounded to bfloat16
 *                      (round to nearest even) while packed, products
 *                      accumulated in fp32. Tensors, gradients, optimizer
 *                      states and every other op stay fp32.
 * bf16 runs on AMX tiles when the CPU has AMX-BF16 (Intel Xeon since
 * Sapphire Rapids), else on AVX512_BF16 when it has that, and otherwise on
 * an emulation giving AVX512_BF16's bits with AVX2 and FMA
 * (CG_BF16_EMULATE=1 forces it; about fp32's speed, not bf16's); a CPU with
 * none of them has no bf16 (cg_precision_parse refuses it). AMX sums its
 * products in fp32 with roundings of its own, so its bits differ from the
 * other two (within the same error bounds); CG_BF16_AMX=0 keeps an AMX CPU
 * on AVX512_BF16's bits.
 *
 * The policy is read on the thread that calls an op, never inside the
 * OpenMP regions the op opens (their worker threads have policies of their
 * own): a caller that runs products from inside its own parallel region
 * captures cg_precision_path(cg_get_matmul_precision()) before it and
 * passes the path to cg_sgemm_path. Backward runs each product in the
 * policy of the thread that runs the backward: keep the policy for the
 * forward and the backward of a step.
 *
 * cg_set_matmul_precision sets this thread's policy; cg_autocast_begin sets
 * it and returns the one it replaces, which cg_autocast_end restores
 * (scopes nest, as `with torch.autocast(...)` blocks do):
 *     cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
 *     ... forward, backward ...
 *     cg_autocast_end(prev);
 * A value that is neither (a cast int) is refused: an error naming it,
 * and the policy stays as it was. */
typedef enum { CG_PRECISION_FP32 = 0, CG_PRECISION_BF16 = 1 } cg_precision;
void cg_set_matmul_precision(cg_precision p);
cg_precision cg_get_matmul_precision(void);
cg_precision cg_autocast_begin(cg_precision p);
void cg_autocast_end(cg_precision prev);
/* The path a product takes in precision p (cg_bf16_auto_path() for bf16,
 * cg_gemm_active_path() for fp32): what CG_GEMM_AUTO means on a thread
 * whose policy is p. */
cg_gemm_path cg_precision_path(cg_precision p);
/* "fp32" / "bf16" ("?" for another value); parse returns false (and records an error) otherwise,
 * and when out is NULL. */
const char *cg_precision_name(cg_precision p);
bool cg_precision_parse(const char *s, cg_precision *out);
/* Whether the CPU has AVX512_BF16 (with AVX512F and AVX512BW), whatever
 * CG_BF16_EMULATE says. */
bool cg_cpu_has_avx512_bf16(void);
/* Whether bf16 products run on the CPU's bf16 instructions (false: emulated:
 * no AVX512_BF16, or CG_BF16_EMULATE=1). */
bool cg_bf16_native(void);
/* Whether CG_GEMM_BF16_AMX's tiles are emulated (CG_AMX_EMULATE=1: AMX's
 * path run and tested on a CPU with AVX512_BF16 and no AMX, at a fraction
 * of its speed; docs/bf16.md). */
bool cg_bf16_amx_emulated(void);
/* The path bf16 products take: CG_GEMM_BF16_AMX, CG_GEMM_BF16 or
 * CG_GEMM_BF16_EMULATED (see above). */
cg_gemm_path cg_bf16_auto_path(void);
/* x rounded to the nearest bfloat16 (ties to even; subnormals to zero, as
 * the hardware conversion does), returned as a float. */
float cg_bf16_round(float x);
/* y[i] = the bf16 bits of x[i] rounded as cg_bf16_round rounds it (and as
 * the bf16 products round their operands while they pack them), i < n. A
 * product given such bf16 operands (cg_gemm_mixed_path) has the bits it
 * gives for the floats they were rounded from. */
void cg_bf16_round_run(int64_t n, const float *x, uint16_t *y);
/* The same over `runs` runs of n, x's run r at x + r ldx, y's at y + r ldy. */
void cg_bf16_round_runs(int64_t n, int64_t runs, int64_t ldx, const float *x, int64_t ldy,
                        uint16_t *y);

/* C[m,n] = alpha * A[m,k] @ B[k,n] + beta * C, each operand given by a
 * pointer and row/column strides in elements (any sign-free strides BLIS
 * accepts; a transposed operand is just swapped strides). beta == 0 means C
 * is not read (may hold garbage/NaN). In the calling thread's precision.
 * Uses cg_get_num_threads() threads; must not be called from inside an
 * OpenMP parallel region with >1 thread (it then runs single-threaded, in
 * the worker thread's policy: use cg_sgemm_path there, see above). */
void cg_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
              int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
              int64_t rsc, int64_t csc);
/* The same on an explicit path (CG_GEMM_AUTO: the calling thread's
 * policy's) and thread count (<= 0: from the size). Returns false + error
 * if the path is not available on this CPU, a size is negative or memory
 * runs out (C then partly written). cg_sgemm leaves the same errors. */
bool cg_sgemm_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t rsa, int64_t csa, const float *b, int64_t rsb,
                   int64_t csb, float beta, float *c, int64_t rsc, int64_t csc);
/* cg_sgemm_path with A and/or B given as bf16 bit patterns: a and b point
 * at floats, or at uint16_t where bf has CG_GEMM_A_BF16 / CG_GEMM_B_BF16
 * (strides count elements). On a bf16 path the packing reads the bf16
 * elements as they are (half the bytes of floats) and the product has the
 * bits of cg_sgemm_path on their values as floats; on an fp32 path the bf16
 * operands are widened into float copies first (exact). */
#define CG_GEMM_A_BF16 1u
#define CG_GEMM_B_BF16 2u
/* Also in bf: beta 1 adds C to each element's sum over a k block rounded
 * once on every path, AMX's included (cg_gemm_adds_c_once: its tiles
 * otherwise sum the products onto C). */
#define CG_GEMM_C_ONCE 4u
bool cg_gemm_mixed_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k,
                        float alpha, const void *a, int64_t rsa, int64_t csa, const void *b,
                        int64_t rsb, int64_t csb, unsigned bf, float beta, float *c, int64_t rsc,
                        int64_t csc);
/* C[m,n] = A B + bias, bias[j * bs] added to column j of every row (a
 * linear layer's y = x W^T + b): the bits of C set to the bias rows and
 * then cg_sgemm with beta 1; the bf16 path adds the bias as it writes C, so
 * C is written once. The _path form as cg_sgemm_path. */
void cg_sgemm_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                   const float *b, int64_t rsb, int64_t csb, const float *bias, int64_t bs,
                   float *c, int64_t rsc, int64_t csc);
bool cg_sgemm_bias_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t rsa, int64_t csa, const float *b, int64_t rsb,
                        int64_t csb, const float *bias, int64_t bs, float *c, int64_t rsc,
                        int64_t csc);
/* Products with at most this many rows or columns of C whose A rows and
 * B columns both run along k contiguously (a row of x times a weight, in
 * decoding) are fp32 dot products on AVX2 CPUs, summed in lanes of their
 * own: other bits than the packed kernels give the same elements of a
 * larger product. */
#define CG_GEMM_SKINNY 4

/* The k blocks of a product on a path (CG_GEMM_AUTO: the calling thread's
 * policy's). A packed product sums each element of C = A B over k one
 * block after another, each block one micro-kernel sum in k order added to
 * C (with beta 1 from the second block on); the block that starts at
 * offset i of a sum over k has cg_gemm_k_block(path, k, i) elements
 * (0 <= i < k): BLIS's KC of the fp32 context, the whole rest when that fits
 * under its maximum, and the bf16 kernels' KC. So the products of A's
 * columns and B's rows block by block, added into C with beta 1 (the first
 * with the caller's beta), give the whole product's bits, for any thread
 * count, when neither C is skinny (above) nor the split changes that,
 * and the product is not split in two (cg_gemm_k_split).
 * 0 (no promise) on BLIS's default path (CG_BLIS_DEFAULT=1), which picks
 * its kernels from the sizes it is given, and for an unavailable path. */
int64_t cg_gemm_k_block(cg_gemm_path path, int64_t k, int64_t i);
/* Whether beta 1 adds C to each element's sum (over a k block) rounded
 * once, the bits of the product made apart and added into C, on a path
 * (CG_GEMM_AUTO: the calling thread's policy's) without CG_GEMM_C_ONCE:
 * every path but AMX's, whose tiles sum the products onto C and onto the
 * bias (core/gemm_bf16.c kernel_amx). With CG_GEMM_C_ONCE every path
 * does (a product written into a gradient that already holds a sum,
 * core/linear_backward.c, has the bits of the addition made apart). */
bool cg_gemm_adds_c_once(cg_gemm_path path);
/* Where a product C [m, n] over k is split in two on a path (CG_GEMM_AUTO:
 * the calling thread's policy's), or 0 when it is one sum. The bf16 paths
 * other than AMX split a product with k >= 768 and k >= 2 max(m, n) (a
 * weight's gradient over a batch's tokens) at h, about k / 2 and even:
 * C = (alpha A[:, :h] B[:h] + beta C) + alpha A[:, h:] B[h:], each half
 * summed in its own k blocks (cg_gemm_k_block(path, h, i) and
 * cg_gemm_k_block(path, k - h, i)), the second added to the first element
 * by element. Each thread packs the tokens of its half, and the bits do
 * not depend on the thread count. A product given a prepacked weight
 * (cg_bf16_matrix_mul) is never split. */
int64_t cg_gemm_k_split(cg_gemm_path path, int64_t m, int64_t n, int64_t k);

/* The fp32 path cg_sgemm uses, and a name for a path ("skx", "haswell",
 * "default", "bf16", "bf16-emulated", "bf16-amx", or "bf16-amx-emulated"
 * when its tiles are emulated). */
cg_gemm_path cg_gemm_active_path(void);
const char *cg_gemm_path_name(cg_gemm_path p);
bool cg_gemm_path_available(cg_gemm_path p);

/* A weight matrix W [n, k] rounded to bf16 once (round to nearest even, as
 * the bf16 products round) and packed for products y = x W^T with few rows
 * of x: the matrix-vector products of decoding, which are bound by the
 * bytes of W they read, read half the bytes of fp32 and pack nothing.
 * The product's bits are those of cg_sgemm in bf16 precision on the same
 * operands (y = x W^T with beta 0, or y set to the bias first and beta 1, as
 * a linear layer computes it), on either path, for any thread count, except
 * where cg_sgemm would split the product's k in two (cg_gemm_k_split: k at
 * least twice the rows of x and of W): the packed W's product is one sum,
 * the bits of cg_sgemm's products over its k blocks added one after
 * another (cg_gemm_k_block). The packed form is a copy: it does not follow
 * later changes of W. */
typedef struct cg_bf16_matrix cg_bf16_matrix;
/* From W's elements w[i * rsw + j * csw]; NULL + error when n or k < 1 or
 * out of memory. */
cg_bf16_matrix *cg_bf16_matrix_new(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw);
void cg_bf16_matrix_free(cg_bf16_matrix *m);          /* NULL is a no-op */
int64_t cg_bf16_matrix_rows(const cg_bf16_matrix *m); /* n */
int64_t cg_bf16_matrix_cols(const cg_bf16_matrix *m); /* k */
/* Bytes of the packed W (what one product reads). */
size_t cg_bf16_matrix_bytes(const cg_bf16_matrix *m);
/* y[i, j] = sum_l x[i, l] W[j, l] (+ bias[j]) for i < m, each operand by
 * pointer and strides in elements (bias may be NULL; y must not overlap x
 * or W). path: CG_GEMM_AUTO (cg_bf16_auto_path), CG_GEMM_BF16_AMX,
 * CG_GEMM_BF16 or CG_GEMM_BF16_EMULATED; nthreads <= 0 picks the count from
 * W's size (at most cg_get_num_threads()); threads split W's rows. False +
 * error on a NULL argument, an unavailable path or out of memory. */
bool cg_bf16_matrix_mul(const cg_bf16_matrix *w, cg_gemm_path path, int nthreads, int64_t m,
                        const float *x, int64_t rsx, int64_t csx, const float *bias, int64_t bs,
                        float *y, int64_t rsy, int64_t csy);
/* The same with x given as bf16 bit patterns (cg_bf16_round_run's): the
 * bits cg_bf16_matrix_mul gives for the floats x was rounded from, x read
 * as it is. */
bool cg_bf16_matrix_mul_bf16(const cg_bf16_matrix *w, cg_gemm_path path, int nthreads, int64_t m,
                             const uint16_t *x, int64_t rsx, int64_t csx, const float *bias,
                             int64_t bs, float *y, int64_t rsy, int64_t csy);

#ifdef __cplusplus
}
#endif
#endif
