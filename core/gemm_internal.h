/* Internal to core/: what the fp32 (gemm_blocked.c) and bf16 (gemm_bf16.c)
 * drivers share: the per-thread packing buffer, BLIS's stride and
 * block-size rules, a 16 x 16 in-register transpose and the bf16
 * rounding of the emulation (one text for scalars and vectors); matmul.c
 * asks the stride rules
 * before it calls into gemm.c. */
#ifndef CG_GEMM_INTERNAL_H
#define CG_GEMM_INTERNAL_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CG_AVX512 __attribute__((target("avx512f")))
#define CG_AVX2 __attribute__((target("avx2,fma")))

/* Whether the fp32 skx and haswell paths run our blocked driver (true,
 * the default) or BLIS's own (false: what CG_BLIS_DRIVER=1 sets). Sets it,
 * for tests that hold the two to the same bits; returns the previous
 * setting. Call it between products, from one thread. */
bool cg_gemm_use_own_driver(bool on);

/* This thread's packing buffer of at least `bytes` bytes, 64-byte aligned,
 * kept between calls (mapped outside the malloc heap, unmapped at thread
 * exit); NULL when out of memory. */
void *cg_gemm_thread_buffer(size_t bytes);

/* The CPU's L1 data cache in bytes (sysconf's, read once; 32 KB where it
 * does not say) */
int64_t cg_gemm_l1d_bytes(void);

/* Whether this CPU has a bf16 product: AVX512_BF16's kernel, or its
 * emulation on AVX2 and FMA (without either, the packing alone would be a
 * SIGILL); what the refusals say when it has not */
bool cg_bf16_usable(void);
#define CG_NO_BF16 "bf16 needs a CPU with AVX512_BF16, or with AVX2 and FMA; this one has neither"

/* The bf16 kernels of core/gemm_bf16.c: AVX512_BF16's vdpbf16ps, its
 * emulation with FMA in AVX2's or AVX-512's registers (the same bits), and
 * AMX tiles (tdpbf16ps, whose fp32 sums round otherwise: other bits, within
 * the same bounds). */
typedef enum { CG_BF16_NATIVE = 1, CG_BF16_EMULATED = 2, CG_BF16_AMX = 3 } cg_bf16_kind;

/* The emulated kernel's registers: AVX-512F's (a whole 32 x 12 tile at
 * once) where the CPU has AVX-512, AVX2's elsewhere; the same bits either
 * way (set when core/gemm.c first runs). cg_bf16_emulation_use_avx512(false)
 * takes AVX2's on a CPU with AVX-512, so that tests hold both kernels to
 * the same bits; true takes AVX-512's back where the CPU has it. Returns
 * whether AVX-512's is in use. Call it between products, from one thread. */
extern bool cg_bf16_emulation_avx512;
bool cg_bf16_emulation_use_avx512(bool on);

/* Whether this process may use AMX tiles: the CPU has AMX-TILE and
 * AMX-BF16, the OS enables their state and grants it (arch_prctl). Asks
 * once; call it from one thread before any product. */
bool cg_amx_init(void);
/* Configures this thread's tiles as the bf16 kernels use them (palette 1,
 * 8 tiles of 16 rows of 64 bytes) unless it has, or the tiles are
 * emulated (core/amx_tiles.h); after cg_amx_init. */
void cg_amx_thread_tiles(void);

/* A product's A operand already packed, A being the weight W after a
 * row-stored C is turned over (C^T = W x^T): a cg_bf16_matrix's panels
 * (rounded to bf16) on the bf16 paths, a cg_f32_packed's (core/gemm_skx.h)
 * on the fp32 skx path. Panel q (rows CG_BF16_MR q ..., CG_BF16_MR ==
 * CG_SKX_MR) at p + q kp CG_BF16_MR 32-bit words: kp = ceil(k / 2) k-pairs
 * (bf16) or kp = k floats (fp32). NULL where A is packed as the product
 * runs. */
#define CG_BF16_MR 32
/* The bf16 kernels' k block (elements, even): a sum over k runs in blocks
 * of CG_BF16_KC, the last one the rest (core/gemm.h cg_gemm_k_block). */
#define CG_BF16_KC 384
/* What a product does to each block of C once the block is final (its
 * last k block added), while the block is in cache: fn(e, c, rows, cols,
 * rsc, csc) for the elements c[i * rsc + j * csc], i < rows, j < cols, C as
 * the kernels store it (turned over: cg_gemm_to_column_c). Blocks come in
 * any order and from any thread, each once: elementwise work only. c0 is
 * C's origin, from which fn finds an element's offset (the outputs it
 * writes beside C share C's layout). */
typedef struct cg_gemm_epilogue cg_gemm_epilogue;
/* The activations the write-out applies (cg_gemm_epilogue's act) */
enum { CG_GEMM_WO_NONE, CG_GEMM_WO_RELU, CG_GEMM_WO_GELU };
struct cg_gemm_epilogue {
    void (*fn)(const cg_gemm_epilogue *e, float *c, int64_t rows, int64_t cols, int64_t rsc,
               int64_t csc);
    const float *c0;
    /* When wo, what fn does is also this, which the bf16 kernels do
     * themselves as they write a whole tile on C's last k block (the
     * native one from its registers, AMX's from the tile it has just
     * stored in C; fn still runs on every other block, with the same
     * bits): each value v written to C is rounded to bf16 into pre16, then
     * C's element is act(v) (CG_GEMM_WO_RELU: v, or +0 where v <= 0;
     * CG_GEMM_WO_GELU: the tanh form, core/vmath.h ew_gelu16), rounded into
     * out16 (pre16 and out16 NULL, or laid out as C from c0). */
    bool wo;
    int act;
    uint16_t *pre16, *out16;
};
typedef struct {
    const void *p; /* 32-bit words: bf16 k-pairs or floats */
    int64_t kp;
    const cg_gemm_epilogue *epi; /* run on C's final blocks, or NULL */
} cg_prepacked;

/* C[m, n] = x[m, k] W^T + bias[j * bs] (bias may be NULL) or, without a
 * bias, x W^T + beta C, for W given as prepacked panels (W itself is not
 * read), through the GEMM driver with its blocking and threading
 * (core/gemm.c): the bits of cg_sgemm_bias / cg_sgemm on the same bf16
 * path. C must be row-stored (csc 1, rsc >= n, m and n >= 2). bf:
 * CG_GEMM_A_BF16 (x's elements bf16) and CG_GEMM_C_ONCE (core/gemm.h).
 * False when out of memory or the path does not read such panels (a bf16
 * path, or fp32's skx path with our driver). path is a cg_gemm_path (an
 * int here: core/gemm.h is the gemm module's own header). */
bool cg_gemm_prepacked(int path, int nthreads, int64_t m, int64_t n, int64_t k, const void *x,
                       unsigned bf, int64_t rsx, int64_t csx, const cg_prepacked *w,
                       const float *bias, int64_t bs, float beta, float *c, int64_t rsc,
                       int64_t csc);

/* A weight W [n, k] packed once into the fp32 skx driver's panels (the
 * fp32 form of core/weight_cache.c), for products y = x W^T (+ bias) that
 * then pack only x. cg_f32_packed_usable: the calling thread's fp32 path
 * is skx with our driver, where such products have the bits of
 * cg_sgemm_bias / cg_sgemm (with beta 0) on W itself; elsewhere _new fails
 * with an error. cg_f32_packed_mul: y [m, n] row-stored (rsy >= n), x's
 * elements at x[i * rsx + l * csx]; m and n above CG_GEMM_SKINNY (fewer:
 * cg_sgemm's dot products read W itself, which the copy does not keep);
 * nthreads as cg_sgemm_path's. The copy does not follow later changes of
 * W. False + error on bad sizes or out of memory. */
typedef struct cg_f32_packed cg_f32_packed;
bool cg_f32_packed_usable(void);
cg_f32_packed *cg_f32_packed_new(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw);
void cg_f32_packed_free(cg_f32_packed *m); /* NULL is a no-op */
size_t cg_f32_packed_bytes(const cg_f32_packed *m);
/* cg_f32_packed_bytes of a W [n, k]'s copy, before it is made */
size_t cg_f32_packed_size(int64_t n, int64_t k);
bool cg_f32_packed_mul(const cg_f32_packed *w, int nthreads, int64_t m, const float *x, int64_t rsx,
                       int64_t csx, const float *bias, int64_t bs, float *y, int64_t rsy);
/* The fp32 form's panels of a cache entry (core/ops.h cg_packed_weight_get
 * with CG_PACKED_F32; NULL for the bf16 forms). */
struct cg_packed_weight;
struct cg_tensor;
const cg_f32_packed *cg_packed_weight_f32(const struct cg_packed_weight *e);
/* cg_packed_weight_get(w, CG_PACKED_F32) for a product that can read W
 * itself: the kept copy, or a new one made only when the cache keeps it
 * (room under its limit); NULL otherwise, and when w is no float32 matrix
 * or out of memory, with the thread's error left as it was. A copy the
 * cache would not keep is W's size packed for one product: a transient
 * copy of every weight beyond the limit. */
struct cg_packed_weight *cg_packed_weight_f32_kept(const struct cg_tensor *w);

/* cg_bf16_matrix_mul (core/gemm.h) with x's elements floats, or bf16 bit
 * patterns when bf has CG_GEMM_A_BF16, y = x W^T + beta y without a bias
 * (beta 0: y is only written), and epi (or NULL) run on every block of y
 * once it is final: the whole of y, in blocks, whatever the path (y is
 * then as the product leaves it plus what epi does; core/linear.c's
 * activations). With beta 1, k in one block (cg_gemm_k_block) and
 * CG_GEMM_C_ONCE in bf, each element is y + its sum rounded once on every
 * path: the bits of adding the product with beta 0 into y
 * (core/linear_backward.c adds dx into a gradient so). */
struct cg_bf16_matrix;
bool cg_bf16_matrix_mul_epi(const struct cg_bf16_matrix *w, int path, int nthreads, int64_t m,
                            const void *x, unsigned bf, int64_t rsx, int64_t csx, const float *bias,
                            int64_t bs, float beta, float *y, int64_t rsy, int64_t csy,
                            const cg_gemm_epilogue *epi);

/* core/gemm_bf16.c: C = alpha A B + beta C on one thread with A and B
 * rounded to bf16 while packed and fp32 sums, on the given kernel; any
 * strides. a and b point at floats, or at bf16 bit patterns where bf has
 * CG_GEMM_A_BF16 / CG_GEMM_B_BF16 (core/gemm.h; strides count elements).
 * With a bias (beta must be 0), C = alpha A B + bias[j * bs] for column j,
 * added as the tiles are written (the bits of C set to the bias first and
 * beta 1). False when out of memory. */
bool cg_bf16_gemm_serial(cg_bf16_kind kind, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb,
                         int64_t csb, unsigned bf, float beta, const float *bias, int64_t bs,
                         float *c, int64_t rsc, int64_t csc, const cg_prepacked *pre);

/* pre (or NULL): C's turned-over A operand (B's transpose here, the
 * weight) already packed; C must then be row-stored. */

/* The same split among nt threads that pack B once, together: each thread
 * packs a share of B's panels, then multiplies its rows of C (turned over
 * as the kernels store it) by all of B. Every element of C has the bits of
 * cg_bf16_gemm_serial (gemm_run takes it on AMX only; the other kernels
 * were faster with each thread packing its own). cg_bf16_gemm_shares_packing tells whether C has
 * enough rows for equal shares and B is small enough; call it only then. Not from inside a
 * parallel region. False when out of memory. */
bool cg_bf16_gemm_shares_packing(cg_bf16_kind kind, int64_t m, int64_t n, int64_t k, int64_t rsc,
                                 int64_t csc, int nt);
bool cg_bf16_gemm_parallel(cg_bf16_kind kind, int nt, int64_t m, int64_t n, int64_t k, float alpha,
                           const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb,
                           int64_t csb, unsigned bf, float beta, const float *bias, int64_t bs,
                           float *c, int64_t rsc, int64_t csc, const cg_prepacked *pre);

/* The stride of a size-1 dimension means nothing, but BLIS checks it.
 * Rewrite it so that BLIS sees plain row- or column-major storage. */
static inline void cg_gemm_normalise_strides(int64_t m, int64_t n, int64_t *rs, int64_t *cs)
{
    if (m == 1 && n == 1) {
        *rs = 1;
        *cs = 1;
    } else if (m == 1) {
        *rs = *cs == 0 ? 0 : n * *cs; /* keep 0 so the check below rejects it */
    } else if (n == 1) {
        *cs = *rs == 0 ? 0 : m * *rs;
    }
}

/* BLIS 0.9's bli_check_matrix_strides for m, n >= 1 and non-negative
 * strides: no zero strides; unit rs needs cs >= m; unit cs needs rs >= n;
 * general strides must not overlap along the tilt. */
static inline bool cg_gemm_strides_ok(int64_t m, int64_t n, int64_t rs, int64_t cs)
{
    if (rs <= 0 || cs <= 0)
        return false;
    if (rs != 1 && cs != 1) {
        if (rs == cs)
            return m == 1 || n == 1;
        if (rs < cs)
            return m * rs <= cs;
        return n * cs <= rs;
    }
    if (rs == 1 && cs == 1)
        return m == 1 || n == 1;
    if (rs == 1)
        return cs >= m;
    return rs >= n;
}

/* Size of the block at offset i of dim, as BLIS picks it: the default size,
 * but the whole rest when that fits under the maximum (k = 389 is one block
 * of 389, not 384 + 5). */
static inline int64_t cg_gemm_block_at(int64_t dim, int64_t i, int64_t def, int64_t max)
{
    int64_t left = dim - i;
    return left <= max ? left : def;
}

/* C = A B turned into C^T = B^T A^T: swaps m and n, A and B (each
 * transposed by swapping its strides) and C's strides. cg_gemm_to_column_c
 * does it for a row-stored C (csc == 1, rsc != 1), which the kernels that
 * store column-stored tiles of C directly (skx's, bf16's) turn over;
 * other layouts are left as they are. */
static inline void cg_gemm_turn_over(int64_t *m, int64_t *n, const float **a, int64_t *rsa,
                                     int64_t *csa, const float **b, int64_t *rsb, int64_t *csb,
                                     int64_t *rsc, int64_t *csc)
{
    const float *p = *a;
    *a = *b;
    *b = p;
    int64_t t = *rsa;
    *rsa = *csb;
    *csb = t;
    t = *csa;
    *csa = *rsb;
    *rsb = t;
    t = *m;
    *m = *n;
    *n = t;
    t = *rsc;
    *rsc = *csc;
    *csc = t;
}
static inline void cg_gemm_to_column_c(int64_t *m, int64_t *n, const float **a, int64_t *rsa,
                                       int64_t *csa, const float **b, int64_t *rsb, int64_t *csb,
                                       int64_t *rsc, int64_t *csc)
{
    if (*csc == 1 && *rsc != 1)
        cg_gemm_turn_over(m, n, a, rsa, csa, b, rsb, csb, rsc, csc);
}

/* Float bits in GCC's vectors of 32-bit lanes: AVX2's 8 and AVX-512's 16 */
typedef uint32_t cg_u32x8 __attribute__((vector_size(32)));
typedef uint32_t cg_u32x16 __attribute__((vector_size(64)));

/* u (a uint32_t, or a cg_u32x* of lanes) holding float bits, rounded to
 * bf16 as the products round their operands: to nearest, ties to even; a
 * NaN kept quiet; zero and subnormals to signed zero. The rounded value as
 * a float's bits, its low 16 bits zero. One text for every width, without
 * branches (a loop of it vectorises): gemm_bf16.c's bf16_bits, and the
 * emulation's rounding in AVX2's and AVX-512's registers, for CPUs without
 * AVX512_BF16's conversion (whose bits these are). */
#define CG_BF16_ROUND_BITS(u)                                                      \
    __extension__({                                                                \
        typedef __typeof__(u) lanes_;                                              \
        const lanes_ u_ = (u);                                                     \
        const lanes_ nan_ = CG_ALL_ONES_IF_(u_, (u_ & 0x7fffffffu) > 0x7f800000u); \
        const lanes_ tiny_ = CG_ALL_ONES_IF_(u_, (u_ & 0x7f800000u) == 0);         \
        const lanes_ even_ = u_ + 0x7fffu + ((u_ >> 16) & 1u);                     \
        const lanes_ r_ = (nan_ & (u_ | 0x00400000u)) | (~nan_ & even_);           \
        ((tiny_ & (u_ & 0x80000000u)) | (~tiny_ & r_)) & 0xffff0000u;              \
    })
/* A condition c on u's lanes as all-ones masks of u's type: a scalar
 * comparison gives 1, a vector's lanes -1 */
#define CG_ALL_ONES_IF_(u, c) \
    _Generic((u), uint32_t : 0u - (__typeof__(u))(c), default : (__typeof__(u))(c))

/* CG_BF16_ROUND_BITS on AVX-512's 16 lanes of floats */
CG_AVX512 static inline __m512i cg_bf16_round16_bits(__m512 x)
{
    return (__m512i)CG_BF16_ROUND_BITS((cg_u32x16)_mm512_castps_si512(x));
}

/* In-register transpose of 8 rows of 8 32-bit lanes: r[i][j] -> r[j][i]. */
CG_AVX2 static inline void cg_transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);     /* per lane: a0 b0 a1 b1 */
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]); /* per lane: a2 b2 a3 b3 */
    }
    for (int g = 0; g < 8; g += 4) { /* u[g + c], lane q: rows g..g+3 of column 4q + c */
        u[g + 0] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

/* In-register transpose of 16 rows of 16 32-bit lanes: r[i][j] -> r[j][i]. */
CG_AVX512 static inline void cg_transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);     /* per lane: a0 b0 a1 b1 */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); /* per lane: a2 b2 a3 b3 */
    }
    /* u[4g + c], lane q: rows 4g..4g+3 of column 4q + c */
    for (int g = 0; g < 4; g++) {
        __m512 lo01 = t[4 * g], hi01 = t[4 * g + 1], lo23 = t[4 * g + 2], hi23 = t[4 * g + 3];
        u[4 * g + 0] = _mm512_shuffle_ps(lo01, lo23, 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(lo01, lo23, 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(hi01, hi23, 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(hi01, hi23, 0xEE);
    }
    /* column 4q + c gathers lane q of u[c], u[4 + c], u[8 + c], u[12 + c] */
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

#endif
