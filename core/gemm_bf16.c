/* bf16 matrix products with fp32 accumulation (see core/gemm.h).
 *
 * C = alpha A B + beta C where every element of A and B is rounded to
 * bfloat16 (round to nearest even; fp32 subnormals become zero, NaN stays
 * NaN) while it is packed, and the products are accumulated in fp32 by
 * AVX512_BF16's vdpbf16ps. The packing a GEMM does anyway does the
 * rounding; an operand given in bf16 (the copies of activations that bf16
 * training keeps for backward, cg_bf16_round_run's) is read as it is and
 * packs into the same panels (see "operands" below).
 *
 * Layout. vdpbf16ps multiplies pairs: each 32-bit lane holds two bf16
 * values adjacent in k, and the lane's fp32 sum gets a[k+1]b[k+1] and then
 * a[k]b[k]. Packed panels are therefore arrays of k-pairs: an A panel is
 * [kc/2][MR] pairs (16 rows to a vector), a B panel [kc/2][NR] pairs, each
 * broadcast to all lanes. An odd k gets a zero partner.
 *
 * The micro-kernel keeps a 32 x 12 tile of C in 24 registers, as BLIS's
 * fp32 skx kernel does; the loops around it are the Goto algorithm's, with
 * a k block of KC elements. A bf16 B whose k runs contiguously (x's bf16
 * copy in a linear layer's forward, dy's in its input gradient) is not
 * packed: the kernel broadcasts each k-pair from B's columns as they are
 * (b_in_place). Every element of C is the same in-order sum
 * over each k block for any split of C among threads, so results do not
 * depend on the thread count.
 *
 * The emulated kernel (CPUs without AVX512_BF16, or CG_BF16_EMULATE=1)
 * computes the same bits with AVX2 and FMA (AVX-512F's registers where the
 * CPU has them: Skylake-SP to Ice Lake). The instruction's rounding was
 * taken apart on an AVX512_BF16 CPU (tests/test_bf16.c holds the two
 * equal, and both equal to a scalar model of the instruction): each bf16
 * product is exact in fp32, the odd element of the pair is added first,
 * each addition is one fp32 rounding (a fused multiply-add), and a result
 * below the smallest normal float is flushed to zero, which is what FMA
 * does with MXCSR's flush-to-zero bit set (x86 detects tininess after
 * rounding, as the instruction does: to 24 bits as if the exponent had no
 * bound, so a sum under 2^-126 - 2^-151 is zero even where rounding it to
 * a subnormal's bits would give 2^-126; test_emulation_flush_boundary).
 * A GEMM's panels are "wide" there:
 * the bf16 values as floats, each pair's odd element first ([2 kp][MR] and
 * [2 kp][NR] floats), so the kernel is an fp32 one over a reordered k; a
 * packed weight (cg_bf16_matrix, the same k-pairs on both paths) is unpacked
 * in the kernel. A CPU without AVX2 and FMA has no bf16 path
 * (cg_precision_parse says so).
 *
 * AMX (Intel Xeon since Sapphire Rapids; on by default there,
 * CG_BF16_AMX=0 turns it off): tdpbf16ps multiplies a 16 x 32 bf16 tile by
 * a 32 x 16 one (as 16 rows of 16 pairs) into a 16 x 16 fp32 tile, 16x the
 * work of a vdpbf16ps. The A panels are the same k-pairs ([kp][MR]: 16
 * rows of 16 pairs are a tile's right operand); a B panel holds NR_AMX
 * columns of B each with its k-pairs in a row ([NR_AMX][kp rounded up to
 * 16]: the left operand), so the kernel computes C^T's 32 x 32 tile and
 * stores it as the column-major tile store_tile writes (loading C or the
 * bias into the tiles and storing them straight into C ran a charlm tiny
 * bf16 step 15% slower). With A prepacked (a weight) or short, each B
 * panel is packed just before the tiles use it (cg_bf16_gemm_serial). A
 * bf16 B whose k runs contiguously (the bf16 copy of a linear layer's x
 * in its forward, q in attention's backward) is not packed: its columns
 * hold the k-pairs a panel's rows hold, so the tiles load whole panels
 * from B itself with the column pitch as the stride, and only a k block's
 * partial last chunk of 16 pairs goes through a zeroed copy (b_in_place;
 * a 4096 x 384 x 1536 forward 15% faster, one of 3072 x 1024 x 256 with
 * rows off cache lines 5% slower). Its
 * sums are fp32 with roundings of the unit's own (measured: not one rounding per
 * product, not one per pair, not one per instruction), so its bits differ
 * from vdpbf16ps's; they are still the same in-order sum over each k block
 * for any split among threads, and tests/test_bf16.c holds them to the same
 * error bounds. */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/amx_tiles.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/shares.h"
#include "core/tensor.h"
#include "core/vmath.h"

enum { MR = CG_BF16_MR, NR = 12, NR_AMX = 32 };
/* k block (elements, even), m block (rows of A) and n block (columns of B):
 * an A block of MC x KC bf16 (72 KB) stays in L2, a B micro-panel of
 * NR x KC (9 KB) in L1. Chosen by timing the models' product shapes (one
 * thread, CPU time) against 512 x 192, 512 x 96, 512 x 64, 1024 x 96 and
 * 256 x 128. */
enum { KC = CG_BF16_KC, MC = 96, NC = 3072 };

/* The n block of a product: narrower for the emulated kernel, whose B
 * panels take twice the bytes, so that its largest B block (3.4 MB) is no
 * larger than fp32's (BLIS's 4080 x 256 floats, 4 MB). With NC its peak
 * resident memory was 3 MB above fp32's on charlm base (now equal); 512
 * took 2 MB less still but ran 8-12% slower. */
static inline int64_t n_block(cg_bf16_kind kind) { return kind == CG_BF16_EMULATED ? 1152 : NC; }

/* Rows of A (C turned over as the kernels store it) up to which a product
 * packs all of A's k block at once (AMX; the native kernel only with A
 * prepacked) and then each B panel just before its use (see
 * cg_bf16_gemm_serial). Above, the m blocks of MC: a 1024-row A block
 * (768 KB) multiplied slower than blocks of 96. */
enum { FUSE_ROWS = 384 };

/* The same for the native kernel with A prepacked: FUSE_ROWS where the L1
 * data cache holds 48 KB or more (Zen 5: 1024 rows were 2% slower than m
 * blocks), up to FUSE_ROWS_L1_32K rows where it holds less (Zen 4's 32
 * KB: there the m blocks' A panels come from L2 anyway, and C written a B
 * panel at a time, its columns whole, made a seq2seq base bf16 step 1.8%
 * faster, charlm base's 0.9%; the same bits either way). */
enum { FUSE_ROWS_L1_32K = 1536, L1_A_BLOCKS_BYTES = 48 << 10 };
static int64_t native_fuse_rows(void)
{
    return cg_gemm_l1d_bytes() >= L1_A_BLOCKS_BYTES ? FUSE_ROWS : FUSE_ROWS_L1_32K;
}

/* Rows ahead that pack_a_across prefetches (its loads missed the
 * caches: a weight gradient's x comes from the forward pass, in memory). */
enum { PF_ROWS = 16 };

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define AVX512_TARGET __attribute__((target("avx512f")))
#define AVX512BW_TARGET __attribute__((target("avx512f,avx512bw")))
#define AMX_TARGET CG_AMX_TARGET
/* MXCSR's flush-to-zero bit */
#define MXCSR_FTZ 0x8000u

/* ------------------------------------------------------------ rounding */

/* x rounded to bf16 as the products round their operands
 * (CG_BF16_ROUND_BITS on one float) */
static inline uint16_t bf16_bits(float x)
{
    return (uint16_t)(CG_BF16_ROUND_BITS((uint32_t)f2i(x)) >> 16);
}

static inline float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float cg_bf16_round(float x) { return bf16_value(bf16_bits(x)); }

/* ------------------------------------------------------------ operands */

/* An operand's elements are floats, or bf16 bit patterns when bf (the
 * products' own rounding of floats, cg_bf16_round_run: rounding such a
 * value again is the identity, NaN included, and none is subnormal, so a
 * bf16 operand packs into the panels its floats would give). The packing
 * reads them directly, 16 to a vector, and widens them in registers. */
static inline const void *elem_at(const void *p, bool bf, int64_t i)
{
    return bf ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}
static inline float elem(const void *p, bool bf, int64_t i)
{
    return bf ? bf16_value(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
/* 16 elements from p (lanes outside m zero, and not read) */
AVX512BW_TARGET static inline __m512 load16(bool bf, __mmask16 m, const void *p)
{
    if (!bf)
        return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* 8 elements from p, the first n (0-8) of them (the others zero, and not
 * read); AVX2 */
AVX2_TARGET static inline __m256 load8(bool bf, int64_t n, const void *p)
{
    const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0   ? 0
                                                                     : n > 8 ? 8
                                                                             : n)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (!bf)
        return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, below);
    __m128i h;
    if (n >= 8) {
        h = _mm_loadu_si128(p);
    } else {
        uint16_t t[8] = {0};
        for (int64_t i = 0; i < n; i++)
            t[i] = ((const uint16_t *)p)[i];
        h = _mm_loadu_si128((const __m128i *)t);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* y[i] = x[i] rounded as the products round their operands (bf16_bits). */
BF16_TARGET static void round_run_native(int64_t n, const float *x, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] = bf16_bits(x[i]);
}

/* CG_BF16_ROUND_BITS on AVX2's 8 lanes of floats */
AVX2_TARGET static inline __m256i round8(__m256 x)
{
    return (__m256i)CG_BF16_ROUND_BITS((cg_u32x8)_mm256_castps_si256(x));
}

/* round_run_native's bits without AVX512_BF16: CG_BF16_ROUND_BITS in
 * AVX-512's lanes, 16 at a time, the tail masked */
AVX512BW_TARGET static void round_run_avx512(int64_t n, const float *x, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(
                                cg_bf16_round16_bits(_mm512_loadu_ps(x + i)), 16)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_cvtepi32_storeu_epi16(
            y + i, m, _mm512_srli_epi32(cg_bf16_round16_bits(_mm512_maskz_loadu_ps(m, x + i)), 16));
    }
}

/* The same in AVX2's, 16 at a time (two halves packed), bf16_bits on the tail */
AVX2_TARGET static void round_run_avx2(int64_t n, const float *x, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i lo = _mm256_srli_epi32(round8(_mm256_loadu_ps(x + i)), 16);
        const __m256i hi = _mm256_srli_epi32(round8(_mm256_loadu_ps(x + i + 8)), 16);
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8));
    }
    for (; i < n; i++)
        y[i] = bf16_bits(x[i]);
}

/* And with neither */
static void round_run_scalar(int64_t n, const float *x, uint16_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16_bits(x[i]);
}

void cg_bf16_round_run(int64_t n, const float *x, uint16_t *y)
{
    cg_bf16_round_runs(n, 1, 0, x, 0, y);
}

void cg_bf16_round_runs(int64_t n, int64_t runs, int64_t ldx, const float *x, int64_t ldy,
                        uint16_t *y)
{
    /* the instruction, else the emulation in the registers its kernel
     * uses (cg_bf16_emulation_avx512): the same bits every way */
    void (*run)(int64_t, const float *, uint16_t *) =
        cg_bf16_native()                                ? round_run_native
        : cg_bf16_emulation_avx512                      ? round_run_avx512
        : cg_gemm_path_available(CG_GEMM_BF16_EMULATED) ? round_run_avx2
                                                        : round_run_scalar;
    for (int64_t r = 0; r < runs; r++)
        run(n, x + r * ldx, y + r * ldy);
}

/* ------------------------------------------------------------ packing */

/* Scalar packing of a panel of w <= W vectors of length k into k-pairs:
 * p[(l / 2) * W + i] holds src[i * vs + l * ls] in its low half when l is
 * even, its high half when odd; zero for i >= w and past k. Wide (the
 * emulated kernel's B panels): the value as a float at row l ^ 1 of
 * [2 ceil(k / 2)][W] floats, so each pair's odd element comes first. */
static void pack_panel_scalar(bool wide, int W, int64_t w, int64_t k, const void *src, bool bf,
                              int64_t vs, int64_t ls, uint32_t *p)
{
    for (int64_t l = 0; l < k; l += 2)
        for (int i = 0; i < W; i++) {
            uint32_t lo = i < w ? bf16_bits(elem(src, bf, i * vs + l * ls)) : 0;
            uint32_t hi = i < w && l + 1 < k ? bf16_bits(elem(src, bf, i * vs + (l + 1) * ls)) : 0;
            if (wide) {
                p[l * W + i] = hi << 16;
                p[(l + 1) * W + i] = lo << 16;
            } else {
                p[(l / 2) * W + i] = lo | hi << 16;
            }
        }
}

/* Two rows of 16 floats rounded to bf16 and interleaved into 16 k-pairs:
 * lane j <- (x0[j], x1[j]). */
BF16_TARGET static inline __m512i pair_rows(__m512 x0, __m512 x1)
{
    const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
}

/* Two rows of 32 bf16 elements (x0 low halves, x1 high) interleaved into
 * k-pairs, with no conversion (a bf16 operand packs as it is, above): *lo
 * gets lanes 0-15's pairs, *hi lanes 16-31's; pair_rows's words. */
BF16_TARGET static inline void pair_rows_bf(__m512i x0, __m512i x1, __m512i *lo, __m512i *hi)
{
    const __m512i il = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                        8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    *lo = _mm512_permutex2var_epi16(x0, il, x1);
    if (hi)
        *hi = _mm512_permutex2var_epi16(x0, _mm512_add_epi16(il, _mm512_set1_epi16(16)), x1);
}
/* lanes below n (0-32) set */
static inline __mmask32 mask32(int64_t n)
{
    return n >= 32 ? 0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1u);
}

/* One k-pair of w <= W <= 32 adjacent vectors (their elements at s0, the
 * next k's at s1; s1 NULL: an odd k's zero partner) as W words at d, zero
 * past w: bf16 elements paired as they are, floats rounded (pair_rows). */
BF16_TARGET static inline __attribute__((always_inline)) void pack_pair(int W, int64_t w,
                                                                        const void *s0,
                                                                        const void *s1, bool bf,
                                                                        uint32_t *d)
{
    if (bf) {
        const __mmask32 ld = mask32(w);
        const __m512i x0 = _mm512_maskz_loadu_epi16(ld, s0);
        const __m512i x1 = s1 ? _mm512_maskz_loadu_epi16(ld, s1) : _mm512_setzero_si512();
        __m512i lo, hi;
        pair_rows_bf(x0, x1, &lo, W > 16 ? &hi : NULL);
        _mm512_mask_storeu_epi32(d, (__mmask16)mask32(W), lo);
        if (W > 16)
            _mm512_mask_storeu_epi32(d + 16, (__mmask16)mask32(W - 16), hi);
        return;
    }
    for (int h = 0; h < W; h += 16) {
        const __mmask16 ld = (__mmask16)mask32(w - h);
        const __m512 x0 = load16(bf, ld, elem_at(s0, bf, h));
        const __m512 x1 = s1 ? load16(bf, ld, elem_at(s1, bf, h)) : _mm512_setzero_ps();
        _mm512_mask_storeu_epi32(d + h, (__mmask16)mask32(W - h), pair_rows(x0, x1));
    }
}

/* The same with the hardware conversion (identical bits), reading whole
 * vectors: along the panel when vs == 1, along k when ls == 1 (16 x 16
 * transposes of pairs in registers). */
BF16_TARGET static inline __attribute__((always_inline)) void pack_panel_native_of(
    int W, int64_t w, int64_t k, const void *src, bool bf, int64_t vs, int64_t ls, uint32_t *p)
{
    if (vs == 1) { /* the panel's vectors side by side: a k-pair at a time */
        for (int64_t l = 0; l < k; l += 2)
            pack_pair(W, w, elem_at(src, bf, l * ls),
                      l + 1 < k ? elem_at(src, bf, (l + 1) * ls) : NULL, bf, p + l / 2 * W);
        return;
    }
    if (ls == 1) {
        /* 32 values of k (16 pairs) of 16 vectors at a time; the last
         * block's loads are masked (zeros past k: an odd k gets its zero
         * partner) and only its pairs are stored */
        for (int64_t l0 = 0; l0 < k; l0 += 32) {
            const int64_t left = k - l0;
            const __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1u);
            const __mmask16 m1 = left >= 32  ? 0xffff
                                 : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u)
                                             : 0;
            const int npairs = left >= 32 ? 16 : (int)((left + 1) / 2);
            for (int h = 0; h < W; h += 16) {
                __m512 r[16];
                for (int i = 0; i < 16; i++) {
                    const int64_t si = (h + i) * vs + l0;
                    if (bf) { /* 32 bf16 values are 16 pairs as they are */
                        r[i] = h + i < w ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                               (__mmask32)m1 << 16 | m0, elem_at(src, bf, si)))
                                         : _mm512_setzero_ps();
                        continue;
                    }
                    r[i] =
                        h + i < w
                            ? (__m512)_mm512_cvtne2ps_pbh(load16(bf, m1, elem_at(src, bf, si + 16)),
                                                          load16(bf, m0, elem_at(src, bf, si)))
                            : _mm512_setzero_ps();
                }
                cg_transpose16(r); /* r[j]: pair j of rows h..h+15 */
                __mmask16 st = (__mmask16)((1u << (W - h < 16 ? W - h : 16)) - 1u);
                for (int j = 0; j < npairs; j++)
                    _mm512_mask_storeu_ps((float *)(p + (l0 / 2 + j) * W + h), st, r[j]);
            }
        }
        return;
    }
    pack_panel_scalar(false, W, w, k, src, bf, vs, ls, p);
}

/* pack_panel_native_of for floats and for bf16 elements, each compiled on its own */
BF16_TARGET static void pack_panel_native(int W, int64_t w, int64_t k, const void *src, bool bf,
                                          int64_t vs, int64_t ls, uint32_t *p)
{
    if (bf)
        pack_panel_native_of(W, w, k, src, true, vs, ls, p);
    else
        pack_panel_native_of(W, w, k, src, false, vs, ls, p);
}

/* Lanes below n set, for masked loads. */
AVX2_TARGET static inline __m256i lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0   ? 0
                                                      : n > 8 ? 8
                                                              : n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The first `lanes` (8 or 4) lanes of v to p. */
AVX2_TARGET static inline void store_lanes(uint32_t *p, int lanes, __m256i v)
{
    if (lanes == 8)
        _mm256_storeu_si256((__m256i *)p, v);
    else
        _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(v));
}

/* Two rounded rows lo (value l) and hi (value l + 1) of lanes [h, h + 8)
 * to their places: as one row of k-pairs, or as two wide rows. */
AVX2_TARGET static inline void emit_pair(bool wide, int W, int h, int64_t l, __m256i lo, __m256i hi,
                                         uint32_t *p)
{
    const int lanes = W - h < 8 ? W - h : 8;
    if (wide) {
        store_lanes(p + l * W + h, lanes, hi);
        store_lanes(p + (l + 1) * W + h, lanes, lo);
    } else {
        store_lanes(p + l / 2 * W + h, lanes, _mm256_or_si256(hi, _mm256_srli_epi32(lo, 16)));
    }
}

/* pack_panel_scalar's layouts (k-pairs, or wide) with AVX2: along the
 * panel when vs == 1 (two values of k at a time), along k when ls == 1 (8
 * vectors' 8 values of k at a time, turned in registers). W is 32 or 12. */
AVX2_TARGET static void pack_panel_avx2(bool wide, int W, int64_t w, int64_t k, const void *src,
                                        bool bf, int64_t vs, int64_t ls, uint32_t *p)
{
    if (vs == 1) {
        for (int64_t l = 0; l < k; l += 2) {
            const void *s0 = elem_at(src, bf, l * ls), *s1 = elem_at(src, bf, (l + 1) * ls);
            for (int h = 0; h < W; h += 8) {
                /* plain loads for whole vectors: masked ones are slower */
                const __m256 x0 = load8(bf, w - h, elem_at(s0, bf, h));
                const __m256 x1 = l + 1 >= k ? _mm256_setzero_ps() /* zero partner */
                                             : load8(bf, w - h, elem_at(s1, bf, h));
                emit_pair(wide, W, h, l, round8(x0), round8(x1), p);
            }
        }
        return;
    }
    if (ls != 1) {
        pack_panel_scalar(wide, W, w, k, src, bf, vs, ls, p);
        return;
    }
    for (int64_t l0 = 0; l0 < k; l0 += 8) {
        const __m256i km = lanes_below(k - l0); /* zeros past k: an odd k's partner */
        const int64_t kk = k - l0 >= 8 ? 8 : (k - l0 + 1) & ~(int64_t)1;
        for (int h = 0; h < W; h += 8) {
            __m256 r[8];
            const int64_t sh = h * vs + l0;
            if (bf)
                for (int i = 0; i < 8; i++)
                    r[i] = h + i < w ? load8(bf, k - l0, elem_at(src, bf, sh + i * vs))
                                     : _mm256_setzero_ps();
            else if (kk == 8 && k - l0 >= 8 && h + 8 <= w)
                for (int i = 0; i < 8; i++) /* plain loads: masked ones are slower */
                    r[i] = _mm256_loadu_ps((const float *)src + sh + i * vs);
            else
                for (int i = 0; i < 8; i++)
                    r[i] = h + i < w ? _mm256_maskload_ps((const float *)src + sh + i * vs, km)
                                     : _mm256_setzero_ps();
            cg_transpose8(r); /* r[j]: value l0 + j of vectors h .. h + 7 */
            if (kk == 8) {
                for (int j = 0; j < 8; j += 2)
                    emit_pair(wide, W, h, l0 + j, round8(r[j]), round8(r[j + 1]), p);
            } else {
                for (int j = 0; j < kk; j += 2)
                    emit_pair(wide, W, h, l0 + j, round8(r[j]), round8(r[j + 1]), p);
            }
        }
    }
}

/* Two rounded rows lo (value l) and hi (value l + 1) of lanes [h, h + 16)
 * to their places, as emit_pair's */
AVX512_TARGET static inline void emit_pair16(bool wide, int W, int h, int64_t l, __m512i lo,
                                             __m512i hi, uint32_t *p)
{
    const __mmask16 st = (__mmask16)((1u << (W - h < 16 ? W - h : 16)) - 1u);
    if (wide) {
        _mm512_mask_storeu_epi32(p + l * W + h, st, hi);
        _mm512_mask_storeu_epi32(p + (l + 1) * W + h, st, lo);
    } else {
        _mm512_mask_storeu_epi32(p + l / 2 * W + h, st,
                                 _mm512_or_si512(hi, _mm512_srli_epi32(lo, 16)));
    }
}

/* pack_panel_avx2 with AVX-512's registers: 16 vectors (or 16 values of
 * k, turned 16 x 16 in registers) at a time; the same words */
AVX512BW_TARGET static inline __attribute__((always_inline)) void pack_panel_avx512_of(
    bool wide, int W, int64_t w, int64_t k, const void *src, bool bf, int64_t vs, int64_t ls,
    uint32_t *p)
{
    if (vs == 1) {
        for (int64_t l = 0; l < k; l += 2) {
            const void *s0 = elem_at(src, bf, l * ls), *s1 = elem_at(src, bf, (l + 1) * ls);
            for (int h = 0; h < W; h += 16) {
                const int64_t n = w - h;
                const __mmask16 m = n >= 16 ? 0xffff : n > 0 ? (__mmask16)((1u << n) - 1u) : 0;
                const __m512 x0 = load16(bf, m, elem_at(s0, bf, h));
                const __m512 x1 = l + 1 >= k ? _mm512_setzero_ps() /* zero partner */
                                             : load16(bf, m, elem_at(s1, bf, h));
                emit_pair16(wide, W, h, l, cg_bf16_round16_bits(x0), cg_bf16_round16_bits(x1), p);
            }
        }
        return;
    }
    for (int64_t l0 = 0; l0 < k; l0 += 16) {
        const int64_t left = k - l0;
        const __mmask16 km = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1u);
        const int64_t kk = left >= 16 ? 16 : (left + 1) & ~(int64_t)1; /* an odd k's partner: 0 */
        for (int h = 0; h < W; h += 16) {
            __m512 r[16];
            const int64_t sh = h * vs + l0;
            for (int i = 0; i < 16; i++)
                r[i] =
                    h + i < w ? load16(bf, km, elem_at(src, bf, sh + i * vs)) : _mm512_setzero_ps();
            cg_transpose16(r); /* r[j]: value l0 + j of vectors h .. h + 15 */
            for (int j = 0; j < kk; j += 2)
                emit_pair16(wide, W, h, l0 + j, cg_bf16_round16_bits(r[j]),
                            cg_bf16_round16_bits(r[j + 1]), p);
        }
    }
}

/* pack_panel_avx512_of for floats and for bf16 elements, each compiled on
 * its own; strided both ways: the scalar packing */
AVX512BW_TARGET static void pack_panel_avx512(bool wide, int W, int64_t w, int64_t k,
                                              const void *src, bool bf, int64_t vs, int64_t ls,
                                              uint32_t *p)
{
    if (vs != 1 && ls != 1)
        pack_panel_scalar(wide, W, w, k, src, bf, vs, ls, p);
    else if (bf)
        pack_panel_avx512_of(wide, W, w, k, src, true, vs, ls, p);
    else
        pack_panel_avx512_of(wide, W, w, k, src, false, vs, ls, p);
}

/* A panel of W vectors: k-pairs on the native and AMX paths; on the
 * emulated one, wide for a GEMM's panels, k-pairs for a packed weight's
 * (wide false), in AVX-512's registers where the CPU has them. */
static void pack_panel(cg_bf16_kind kind, bool wide, int W, int64_t w, int64_t k, const void *src,
                       bool bf, int64_t vs, int64_t ls, uint32_t *p)
{
    if (kind != CG_BF16_EMULATED)
        pack_panel_native(W, w, k, src, bf, vs, ls, p);
    else if (cg_bf16_emulation_avx512)
        pack_panel_avx512(wide, W, w, k, src, bf, vs, ls, p);
    else
        pack_panel_avx2(wide, W, w, k, src, bf, vs, ls, p);
}

static inline int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }
static inline int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* An AMX B panel: w <= NR_AMX vectors of length k (vector i at src + i vs,
 * its elements ls apart) as NR_AMX rows of ldq k-pairs, zero past k and up
 * to round16(ceil(k / 2)) (ldq's multiple of 16 at least that). A vector
 * whose k runs contiguously is converted in place; otherwise each k block
 * is packed as the native panels are ([pairs][NR_AMX]) and turned over 16 x
 * 16 pairs at a time (reading vectors side by side as pairs of rows and
 * turning them without the block in between was no faster: the strided
 * loads are the cost). */
BF16_TARGET static inline __attribute__((always_inline)) void pack_panel_amx_of(
    int64_t w, int64_t k, const void *src, bool bf, int64_t vs, int64_t ls, uint32_t *q,
    int64_t ldq)
{
    /* rows read: the kernel loads the second 16 only for more than 16 columns */
    const int rows = w > 16 ? NR_AMX : 16;
    if (ls == 1) { /* k contiguous: 32 values convert to a row's 16 pairs in place */
        const int64_t words = round16((k + 1) / 2);
        for (int i = 0; i < rows; i++) {
            uint32_t *qi = q + i * ldq;
            if (i >= w) {
                memset(qi, 0, (size_t)words * sizeof(uint32_t));
                continue;
            }
            for (int64_t l = 0; l < 2 * words; l += 32) {
                const int64_t left = k - l;
                const __mmask16 m0 = left >= 16 ? 0xffff
                                     : left > 0 ? (__mmask16)((1u << left) - 1u)
                                                : 0;
                const __mmask16 m1 = left >= 32  ? 0xffff
                                     : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u)
                                                 : 0;
                const int64_t si = i * vs + l;
                if (bf) { /* a copy */
                    _mm512_storeu_si512(
                        qi + l / 2,
                        _mm512_maskz_loadu_epi16((__mmask32)m1 << 16 | m0, elem_at(src, bf, si)));
                    continue;
                }
                _mm512_storeu_si512(qi + l / 2, (__m512i)_mm512_cvtne2ps_pbh(
                                                    load16(bf, m1, elem_at(src, bf, si + 16)),
                                                    load16(bf, m0, elem_at(src, bf, si))));
            }
        }
        return;
    }
    uint32_t t[(KC / 2) * NR_AMX] __attribute__((aligned(64)));
    for (int64_t l0 = 0; l0 < k; l0 += KC) {
        const int64_t kc = k - l0 < KC ? k - l0 : KC, kp = (kc + 1) / 2;
        pack_panel_native(NR_AMX, w, kc, elem_at(src, bf, l0 * ls), bf, vs, ls, t);
        for (int64_t p0 = 0; p0 < round16(kp); p0 += 16)
            for (int h = 0; h < rows; h += 16) {
                __m512 r[16];
                for (int i = 0; i < 16; i++)
                    r[i] = p0 + i < kp ? _mm512_load_ps((const float *)(t + (p0 + i) * NR_AMX + h))
                                       : _mm512_setzero_ps();
                cg_transpose16(r); /* r[j]: column h + j's 16 pairs */
                for (int j = 0; j < 16; j++)
                    _mm512_storeu_ps((float *)(q + (h + j) * ldq + l0 / 2 + p0), r[j]);
            }
    }
}

/* pack_panel_amx_of for floats and for bf16 elements, each compiled on its own */
BF16_TARGET static void pack_panel_amx(int64_t w, int64_t k, const void *src, bool bf, int64_t vs,
                                       int64_t ls, uint32_t *q, int64_t ldq)
{
    if (bf)
        pack_panel_amx_of(w, k, src, true, vs, ls, q, ldq);
    else
        pack_panel_amx_of(w, k, src, false, vs, ls, q, ldq);
}

/* AMX B panels of the columns [j0, j1) (j0 a multiple of NR_AMX) of a
 * k x nc block of B whose columns are adjacent (vs 1) and whose k runs ls
 * apart (a weight gradient's dy), into pb (the panel of column j at pb +
 * j / NR_AMX panels of `words`, rows ldq = round16(ceil(k / 2)) pairs
 * apart), with pack_panel_amx's contents: 32 values of k (16 pairs) of 16
 * columns are read as 32 row pieces, paired and turned over 16 x 16 pairs
 * in registers, straight to the panels' rows. The panels are swept side by
 * side, 32 rows of B at a time, so each row is read in order (a panel at a
 * time read 128 bytes of each of kc rows ls apart, into a copy turned
 * afterwards). */
BF16_TARGET static inline __attribute__((always_inline)) void pack_amx_strided_of(
    int64_t nc, int64_t k, const void *src, bool bf, int64_t ls, int64_t j0, int64_t j1,
    uint32_t *pb, int64_t words)
{
    const int64_t ldq = round16((k + 1) / 2), jend = min64(j1, nc);
    for (int64_t p0 = 0; p0 < ldq; p0 += 16)
        for (int64_t j = j0; j < jend; j += 16) {
            const int64_t n = min64(jend - j, 16);
            const __mmask16 m = (__mmask16)((1u << n) - 1u);
            __m512 r[16];
            for (int i = 0; bf && i < 16; i++) { /* bf16: paired as they are */
                const int64_t l = 2 * (p0 + i);
                __m512i x0 = _mm512_setzero_si512(), x1 = x0, lo;
                if (l < k)
                    x0 = _mm512_maskz_loadu_epi16(m, elem_at(src, bf, j + l * ls));
                if (l + 1 < k)
                    x1 = _mm512_maskz_loadu_epi16(m, elem_at(src, bf, j + (l + 1) * ls));
                pair_rows_bf(x0, x1, &lo, NULL);
                r[i] = _mm512_castsi512_ps(lo);
            }
            for (int i = 0; !bf && i < 16; i++) { /* zeros past k: an odd k's partner */
                const int64_t l = 2 * (p0 + i);
                __m512 x0 = _mm512_setzero_ps(), x1 = x0;
                if (l < k)
                    x0 = load16(bf, m, elem_at(src, bf, j + l * ls));
                if (l + 1 < k)
                    x1 = load16(bf, m, elem_at(src, bf, j + (l + 1) * ls));
                r[i] = (__m512)pair_rows(x0, x1);
            }
            cg_transpose16(r); /* r[c]: column j + c's 16 pairs */
            uint32_t *q = pb + j / NR_AMX * words + (j % NR_AMX) * ldq + p0;
            for (int c = 0; c < 16; c++)
                _mm512_storeu_ps((float *)(q + c * ldq), r[c]);
        }
}

/* pack_amx_strided_of for floats and for bf16 elements, each compiled on its own */
BF16_TARGET static void pack_amx_strided(int64_t nc, int64_t k, const void *src, bool bf,
                                         int64_t ls, int64_t j0, int64_t j1, uint32_t *pb,
                                         int64_t words)
{
    if (bf)
        pack_amx_strided_of(nc, k, src, true, ls, j0, j1, pb, words);
    else
        pack_amx_strided_of(nc, k, src, false, ls, j0, j1, pb, words);
}

/* 32-bit words of a GEMM's A panel per k-pair and row */
static inline int64_t a_words(cg_bf16_kind kind) { return kind == CG_BF16_EMULATED ? 2 : 1; }

/* Columns of a B panel, and its 32-bit words for kp k-pairs: [kp][NR]
 * pairs (native), [2 kp][NR] floats (emulated), [NR_AMX][round16(kp)]
 * pairs (AMX). */
static inline int64_t b_cols(cg_bf16_kind kind) { return kind == CG_BF16_AMX ? NR_AMX : NR; }
static inline int64_t b_panel_words(cg_bf16_kind kind, int64_t kp)
{
    return kind == CG_BF16_AMX ? NR_AMX * round16(kp) : kp * NR * a_words(kind);
}

/* B panel of w <= b_cols(kind) vectors, k deep (see b_panel_words). */
static void pack_b_panel(cg_bf16_kind kind, int64_t w, int64_t k, const void *src, bool bf,
                         int64_t vs, int64_t ls, uint32_t *p)
{
    if (kind == CG_BF16_AMX)
        pack_panel_amx(w, k, src, bf, vs, ls, p, round16((k + 1) / 2));
    else
        pack_panel(kind, true, NR, w, k, src, bf, vs, ls, p);
}

/* ------------------------------------------------------------ kernels */

/* What a tile adds to its products: beta C (C not read when beta == 0)
 * or, with beta 0, a bias b[i * rs + j * cs] (one of the strides 0: a bias
 * per row or per column of C). */
typedef struct {
    float alpha, beta;
    const float *bias;
    int64_t rs, cs;
    /* a whole tile's write-out of the product's epilogue (see
     * cg_gemm_epilogue's wo; tile_whole), or NULL; with pre16 and out16
     * at the tile's first element */
    const cg_gemm_epilogue *wo;
    uint16_t *pre16, *out16;
    /* beta C added to the sums once on AMX too (CG_GEMM_C_ONCE): its
     * tiles then start from zero, not from C (amx_starts_from_c) */
    bool once;
} tile_out;

/* Whether the native kernel writes its tile (mr x nr of a tile of nru
 * columns) straight from its registers: a whole tile of a column-stored C
 * with no bias or one per row of the tile. The epilogue's write-out
 * (tile_out's wo) is taken only there. */
static inline bool tile_whole(int64_t mr, int64_t nr, int64_t nru, int64_t rsc, const float *bias,
                              int64_t brs)
{
    return mr == MR && nr == nru && rsc == 1 && (!bias || brs == 1);
}

/* Write an accumulated tile t (column-major, ld MR) into C:
 * C = alpha t + beta C, or alpha t + bias. alpha t + bias has the bits of
 * C set to the bias first and then alpha t + 1 * C. */
static void store_tile(int64_t mr, int64_t nr, const float *t, const tile_out *o, float *c,
                       int64_t rsc, int64_t csc)
{
    /* locals (C's stores could alias *o), one loop per case (each
     * vectorises along a column when C's rows are adjacent) */
    const float alpha = o->alpha, beta = o->beta, *bias = o->bias;
    const int64_t brs = o->rs, bcs = o->cs;
    if (bias)
        for (int64_t j = 0; j < nr; j++)
            for (int64_t i = 0; i < mr; i++)
                c[i * rsc + j * csc] = alpha * t[j * MR + i] + bias[i * brs + j * bcs];
    else if (beta == 0.0f)
        for (int64_t j = 0; j < nr; j++)
            for (int64_t i = 0; i < mr; i++)
                c[i * rsc + j * csc] = alpha * t[j * MR + i];
    else
        for (int64_t j = 0; j < nr; j++)
            for (int64_t i = 0; i < mr; i++) {
                float *cij = c + i * rsc + j * csc;
                *cij = alpha * t[j * MR + i] + beta * *cij;
            }
}

/* Column cj of a whole tile of a column-stored C from its sums v0 (rows
 * 0-15) and v1 (16-31): alpha v + bias (one per row of the tile) or
 * alpha v + beta C, rounded twice as store_tile does; C is not read when
 * beta is 0. */
BF16_TARGET static inline __attribute__((always_inline)) void column_value(
    __m512 v0, __m512 v1, __m512 va, __m512 vb, float beta, const float *bias, const float *cj,
    __m512 *r0, __m512 *r1)
{
    *r0 = _mm512_mul_ps(va, v0);
    *r1 = _mm512_mul_ps(va, v1);
    if (bias) {
        *r0 = _mm512_add_ps(*r0, _mm512_loadu_ps(bias));
        *r1 = _mm512_add_ps(*r1, _mm512_loadu_ps(bias + 16));
    } else if (beta != 0.0f) {
        *r0 = _mm512_add_ps(*r0, _mm512_mul_ps(vb, _mm512_loadu_ps(cj)));
        *r1 = _mm512_add_ps(*r1, _mm512_mul_ps(vb, _mm512_loadu_ps(cj + 16)));
    }
}
/* ... and stored */
BF16_TARGET static inline __attribute__((always_inline)) void store_column(
    __m512 v0, __m512 v1, __m512 va, __m512 vb, float beta, const float *bias, float *cj)
{
    __m512 r0, r1;
    column_value(v0, v1, va, vb, beta, bias, cj, &r0, &r1);
    _mm512_storeu_ps(cj, r0);
    _mm512_storeu_ps(cj + 16, r1);
}

/* ew_gelu16 over 16 floats in memory: clang refuses a call that passes a
 * v16f from a function of another target (core/vmath.h); inlined into
 * write_out16, it compiles for that function's target */
static inline __attribute__((always_inline)) void gelu16_in_place(float *x)
{
    v16f v;
    memcpy(&v, x, sizeof v);
    v = ew_gelu16(v, ew_gelu16_normal(v));
    memcpy(x, &v, sizeof v);
}

/* 16 values of C's column as the epilogue's write-out leaves them (see
 * cg_gemm_epilogue's wo): v rounded into pre16, act(v) into C at c and
 * rounded into out16 (the roundings cg_bf16_round_run's). With out16, C's
 * floats bypass the caches (whole aligned lines: no read for ownership):
 * what reads on in a bf16 step is the bf16 copy (a 3072 x 1024 x 256
 * product keeping it 0.93 of the time; a seq2seq base step 0.983 at 1
 * thread, 0.988 at 2, charlm base 0.992, on Zen 4). cg_bf16_gemm_serial
 * fences them before it returns. */
BF16_TARGET static inline __attribute__((always_inline)) void write_out16(__m512 v, int act,
                                                                          float *c, uint16_t *pre16,
                                                                          uint16_t *out16)
{
    if (pre16)
        _mm256_storeu_si256((__m256i *)pre16, (__m256i)_mm512_cvtneps_pbh(v));
    if (act == CG_GEMM_WO_RELU) /* v > 0 or NaN kept */
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
    else if (act == CG_GEMM_WO_GELU) {
        float x[16];
        _mm512_storeu_ps(x, v);
        gelu16_in_place(x);
        v = _mm512_loadu_ps(x);
    }
    if (out16 && !((uintptr_t)c & 63))
        _mm512_stream_ps(c, v);
    else
        _mm512_storeu_ps(c, v);
    if (out16)
        _mm256_storeu_si256((__m256i *)out16, (__m256i)_mm512_cvtneps_pbh(v));
}

/* A whole tile's sums t (column-major, ld MR; nru columns) written as
 * store_column writes them, with the epilogue's write-out o->wo (pre16
 * and out16 at the tile's first element, column j's at j csc) */
BF16_TARGET static __attribute__((noinline)) void store_tile_wo(const float *t, int nru,
                                                                float alpha, float beta,
                                                                const float *bias, float *c,
                                                                int64_t csc, const tile_out *o)
{
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const int act = o->wo->act;
    for (int j = 0; j < nru; j++) {
        float *cj = c + j * csc;
        __m512 r0, r1;
        column_value(_mm512_load_ps(t + j * MR), _mm512_load_ps(t + j * MR + 16), va, vb, beta,
                     bias, cj, &r0, &r1);
        uint16_t *p16 = o->pre16 ? o->pre16 + j * csc : NULL;
        uint16_t *o16 = o->out16 ? o->out16 + j * csc : NULL;
        write_out16(r0, act, cj, p16, o16);
        write_out16(r1, act, cj + 16, p16 ? p16 + 16 : NULL, o16 ? o16 + 16 : NULL);
    }
}

/* kp k-pairs of an A panel times the first nru columns of a B panel, into
 * C (mr x nr of the tile, nr <= nru). nru is a constant at every call
 * (kernel_native's switch), so the loops over columns unroll; a column's
 * sums are the same whatever nru is. Column j's pair p is the 32-bit word
 * at b + p ps + j cs bytes: a packed panel's (ps 4 NR, cs 4), or a bf16 B
 * read in place (ps 4, cs its column pitch in bytes, any even number: the
 * words are loaded unaligned). Three columns share a base pointer (cs
 * apart with the index scaled by 1 and 2), so twelve columns take four
 * pointers and the pitch in registers. */
BF16_TARGET static inline __attribute__((always_inline)) void kernel_native_n(
    const int nru, int64_t kp, const uint32_t *a, const char *b, const int64_t ps, const int64_t cs,
    int64_t mr, int64_t nr, const tile_out *o, float alpha, float beta, const float *bias,
    int64_t brs, float *c, int64_t rsc, int64_t csc)
{
    __m512 acc[NR][2];
#pragma GCC unroll 12
    for (int j = 0; j < nru; j++)
        acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    const char *base[NR / 3];
    for (int q = 0; q < NR / 3; q++)
        base[q] = b + 3 * q * cs;
    for (int64_t p = 0; p < kp; p++) {
        const __m512bh a0 = (__m512bh)_mm512_loadu_si512(a + p * MR);
        const __m512bh a1 = (__m512bh)_mm512_loadu_si512(a + p * MR + 16);
#pragma GCC unroll 12
        for (int j = 0; j < nru; j++) {
            const __m512bh bj = (__m512bh)_mm512_broadcastd_epi32(
                _mm_loadu_si32(base[j / 3] + p * ps + (j % 3) * cs));
            acc[j][0] = _mm512_dpbf16_ps(acc[j][0], a0, bj);
            acc[j][1] = _mm512_dpbf16_ps(acc[j][1], a1, bj);
        }
    }
    /* whole tiles: straight from the registers (with the epilogue's
     * write-out, through t: inlined here it cost attention's short
     * products 2% more, 11% with the loop not unrolled) */
    if (tile_whole(mr, nr, nru, rsc, bias, brs) && !o->wo) {
        const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
        for (int j = 0; j < nru; j++) {
            store_column(acc[j][0], acc[j][1], va, vb, beta, bias, c + j * csc);
        }
        return;
    }
    float t[MR * NR] __attribute__((aligned(64)));
#pragma GCC unroll 12
    for (int j = 0; j < nru; j++) {
        _mm512_store_ps(t + j * MR, acc[j][0]);
        _mm512_store_ps(t + j * MR + 16, acc[j][1]);
    }
    if (o->wo)
        store_tile_wo(t, nru, alpha, beta, bias, c, csc, o);
    else
        store_tile(mr, nr, t, o, c, rsc, csc);
}

/* kp k-pairs of an A panel times a packed B panel, into C (mr x nr of the
 * tile): only the nr columns C receives are computed (a matrix-vector
 * product of decoding is one column). */
BF16_TARGET static void kernel_native(int64_t kp, const uint32_t *a, const uint32_t *b, int64_t mr,
                                      int64_t nr, const tile_out *o, float *c, int64_t rsc,
                                      int64_t csc)
{
    /* the tile's parameters as scalars: read through o, they cost the
     * accumulators their registers (spilled before the write-out) */
    const float alpha = o->alpha, beta = o->beta, *bias = o->bias;
    const int64_t brs = o->rs;
    const char *bb = (const char *)b;
#define CG_KN(N) \
    kernel_native_n(N, kp, a, bb, 4 * NR, 4, mr, nr, o, alpha, beta, bias, brs, c, rsc, csc)
    switch (nr) {
    case 1: CG_KN(1); break;
    case 2: CG_KN(2); break;
    case 3: CG_KN(3); break;
    case 4: CG_KN(4); break;
    case 5: CG_KN(5); break;
    case 6: CG_KN(6); break;
    case 7: CG_KN(7); break;
    case 8: CG_KN(8); break;
    default: CG_KN(NR); break;
    }
#undef CG_KN
}

/* kp k-pairs of an A panel times NR columns of a bf16 B read in place
 * (b_in_place): column j's k-pairs are the words from b + j cs bytes on. */
BF16_TARGET static void kernel_native_in_place(int64_t kp, const uint32_t *a, const uint16_t *b,
                                               int64_t cs, int64_t mr, const tile_out *o, float *c,
                                               int64_t rsc, int64_t csc)
{
    kernel_native_n(NR, kp, a, (const char *)b, 4, cs, mr, NR, o, o->alpha, o->beta, o->bias, o->rs,
                    c, rsc, csc);
}

/* 16 rows of an A panel (k-pairs) times ncol <= 4 columns of a wide B
 * panel, kp pairs deep, into t (ld MR). Each sum takes a pair's odd
 * product, then its even one, in fused multiply-adds. */
AVX2_TARGET static inline __attribute__((always_inline)) void block_avx2(const int ncol, int64_t kp,
                                                                         const uint32_t *a,
                                                                         const float *b, float *t)
{
    __m256 acc[4][2];
    for (int j = 0; j < ncol; j++)
        acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t p = 0; p < kp; p++) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(a + p * MR));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(a + p * MR + 8));
        const __m256 a0h = _mm256_castsi256_ps(_mm256_and_si256(x0, hi));
        const __m256 a1h = _mm256_castsi256_ps(_mm256_and_si256(x1, hi));
        const float *bp = b + 2 * p * NR;
        for (int j = 0; j < ncol; j++) {
            const __m256 bj = _mm256_broadcast_ss(bp + j);
            acc[j][0] = _mm256_fmadd_ps(a0h, bj, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(a1h, bj, acc[j][1]);
        }
        const __m256 a0l = _mm256_castsi256_ps(_mm256_slli_epi32(x0, 16));
        const __m256 a1l = _mm256_castsi256_ps(_mm256_slli_epi32(x1, 16));
        for (int j = 0; j < ncol; j++) {
            const __m256 bj = _mm256_broadcast_ss(bp + NR + j);
            acc[j][0] = _mm256_fmadd_ps(a0l, bj, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(a1l, bj, acc[j][1]);
        }
    }
    for (int j = 0; j < ncol; j++) {
        _mm256_store_ps(t + j * MR, acc[j][0]);
        _mm256_store_ps(t + j * MR + 8, acc[j][1]);
    }
}

/* The same with a wide A panel: 16 rows times ncol <= 6 columns, one
 * fused multiply-add per value of k (odd element of each pair first): an
 * fp32 kernel, whose 12 sums hide the latency that the two dependent
 * multiply-adds per pair above expose. */
AVX2_TARGET static inline __attribute__((always_inline)) void block_wide(const int ncol, int64_t kp,
                                                                         const float *a,
                                                                         const float *b, float *t)
{
    __m256 acc[6][2];
    for (int j = 0; j < ncol; j++)
        acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < 2 * kp; p++) {
        const __m256 a0 = _mm256_load_ps(a + p * MR), a1 = _mm256_load_ps(a + p * MR + 8);
        for (int j = 0; j < ncol; j++) {
            const __m256 bj = _mm256_broadcast_ss(b + p * NR + j);
            acc[j][0] = _mm256_fmadd_ps(a0, bj, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(a1, bj, acc[j][1]);
        }
    }
    for (int j = 0; j < ncol; j++) {
        _mm256_store_ps(t + j * MR, acc[j][0]);
        _mm256_store_ps(t + j * MR + 8, acc[j][1]);
    }
}

/* block_avx2's and block_wide's sums with AVX-512F, for the whole tile at
 * once: 32 rows (two vectors) by NR columns in 24 registers, as BLIS's fp32
 * skx kernel holds its tile (CPUs with AVX-512 but not AVX512_BF16, such as
 * Skylake-SP to Ice Lake). Each lane does the same fused multiply-adds in
 * the same order as the AVX2 blocks, so the bits are theirs; columns past
 * the tile's nr multiply the B panel's zero padding (t's rows past mr and
 * columns past nr are not written to C). */
AVX512_TARGET static void tile_avx512(bool a_pairs, int64_t kp, const uint32_t *a, const float *b,
                                      float *t)
{
    __m512 acc[NR][2];
    for (int j = 0; j < NR; j++)
        acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    if (a_pairs) {
        const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
        for (int64_t p = 0; p < kp; p++) {
            const __m512i x0 = _mm512_loadu_si512(a + p * MR);
            const __m512i x1 = _mm512_loadu_si512(a + p * MR + 16);
            const float *bp = b + 2 * p * NR;
            const __m512 a0h = _mm512_castsi512_ps(_mm512_and_si512(x0, hi));
            const __m512 a1h = _mm512_castsi512_ps(_mm512_and_si512(x1, hi));
            for (int j = 0; j < NR; j++) {
                const __m512 bj = _mm512_set1_ps(bp[j]);
                acc[j][0] = _mm512_fmadd_ps(a0h, bj, acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(a1h, bj, acc[j][1]);
            }
            const __m512 a0l = _mm512_castsi512_ps(_mm512_slli_epi32(x0, 16));
            const __m512 a1l = _mm512_castsi512_ps(_mm512_slli_epi32(x1, 16));
            for (int j = 0; j < NR; j++) {
                const __m512 bj = _mm512_set1_ps(bp[NR + j]);
                acc[j][0] = _mm512_fmadd_ps(a0l, bj, acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(a1l, bj, acc[j][1]);
            }
        }
    } else {
        const float *af = (const float *)a;
        for (int64_t p = 0; p < 2 * kp; p++) {
            const __m512 a0 = _mm512_loadu_ps(af + p * MR), a1 = _mm512_loadu_ps(af + p * MR + 16);
            for (int j = 0; j < NR; j++) {
                const __m512 bj = _mm512_set1_ps(b[p * NR + j]);
                acc[j][0] = _mm512_fmadd_ps(a0, bj, acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(a1, bj, acc[j][1]);
            }
        }
    }
    for (int j = 0; j < NR; j++) {
        _mm512_store_ps(t + j * MR, acc[j][0]);
        _mm512_store_ps(t + j * MR + 16, acc[j][1]);
    }
}

/* The sums of kernel_emulated's tile into t, with AVX2 (blocks of 16 rows
 * and 3 or 6 columns, as many as the tile has) */
AVX2_TARGET static void tile_avx2(bool a_pairs, int64_t kp, const uint32_t *a, const float *b,
                                  int64_t mr, int64_t nr, float *t)
{
    if (a_pairs)
        for (int64_t jb = 0; jb < nr; jb += 3)
            for (int64_t ib = 0; ib < mr; ib += 16) {
                const uint32_t *ai = a + ib;
                const float *bj = b + jb;
                float *tb = t + jb * MR + ib;
                switch (nr - jb) {
                case 1: block_avx2(1, kp, ai, bj, tb); break;
                case 2: block_avx2(2, kp, ai, bj, tb); break;
                default: block_avx2(3, kp, ai, bj, tb); break;
                }
            }
    else
        for (int64_t jb = 0; jb < nr; jb += 6)
            for (int64_t ib = 0; ib < mr; ib += 16) {
                const float *ai = (const float *)a + ib, *bj = b + jb;
                float *tb = t + jb * MR + ib;
                switch (nr - jb) {
                case 1: block_wide(1, kp, ai, bj, tb); break;
                case 2: block_wide(2, kp, ai, bj, tb); break;
                case 3: block_wide(3, kp, ai, bj, tb); break;
                case 4: block_wide(4, kp, ai, bj, tb); break;
                case 5: block_wide(5, kp, ai, bj, tb); break;
                default: block_wide(6, kp, ai, bj, tb); break;
                }
            }
}

/* The native kernel's bits with FMA (see the top of the file): kp k-pairs
 * of an A panel (wide, or k-pairs when a_pairs: a packed weight's) times a
 * wide B panel, into C (mr x nr of the tile), the whole tile on AVX-512
 * (tile_avx512), else in blocks of 16 rows (tile_avx2), under
 * flush-to-zero. The sums go through t so that C is
 * written with the caller's MXCSR, as the native kernel writes it. */
AVX2_TARGET static void kernel_emulated(bool a_pairs, int64_t kp, const uint32_t *a, const float *b,
                                        int64_t mr, int64_t nr, const tile_out *o, float *c,
                                        int64_t rsc, int64_t csc)
{
    float t[MR * NR] __attribute__((aligned(64)));
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | MXCSR_FTZ);
    if (cg_bf16_emulation_avx512)
        tile_avx512(a_pairs, kp, a, b, t);
    else
        tile_avx2(a_pairs, kp, a, b, mr, nr, t);
    _mm_setcsr(csr);
    const float alpha = o->alpha, beta = o->beta, *bias = o->bias;
    if (mr == MR && nr == NR && rsc == 1 && (!bias || o->rs == 1)) {
        /* as kernel_native_n writes a whole tile: alpha t, then + bias or
         * + beta C, each rounded */
        const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        for (int j = 0; j < NR; j++) {
            float *cj = c + j * csc;
            for (int q = 0; q < MR; q += 8) {
                __m256 r = _mm256_mul_ps(va, _mm256_load_ps(t + j * MR + q));
                if (bias)
                    r = _mm256_add_ps(r, _mm256_loadu_ps(bias + q));
                else if (beta != 0.0f)
                    r = _mm256_add_ps(r, _mm256_mul_ps(vb, _mm256_loadu_ps(cj + q)));
                _mm256_storeu_ps(cj + q, r);
            }
        }
        return;
    }
    store_tile(mr, nr, t, o, c, rsc, csc);
}

/* ------------------------------------------------------------ AMX */

/* Linux's arch_prctl request for a dynamically enabled state component,
 * and AMX's tile data (asm/prctl.h; not in glibc's headers) */
#define CG_ARCH_REQ_XCOMP_PERM 0x1023
#define CG_XFEATURE_XTILEDATA 18

bool cg_amx_init(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
    if (!amx_bf16 || !amx_tile || !__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        return false; /* no AMX, or no OSXSAVE to ask XCR0 */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) /* XTILECFG and XTILEDATA */
        return false;
    return syscall(SYS_arch_prctl, CG_ARCH_REQ_XCOMP_PERM, CG_XFEATURE_XTILEDATA) == 0;
}

/* Each thread configures its tiles once (palette 1: 8 tiles of 16 rows of
 * 64 bytes) and keeps them; the kernel saves them with the thread. */
static _Thread_local bool amx_ready;

AMX_TARGET static void amx_configure(void)
{
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg __attribute__((aligned(64)));
    _Static_assert(sizeof cfg == 64, "the tile configuration is 64 bytes");
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* not _tile_loadconfig: GCC 12's reads its operand as 8 bytes, so the
     * stores of colsb and rows above may be dropped as dead (they were,
     * once this function stopped being inlined: every tile then had no
     * rows and the first tile instruction faulted) */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
    amx_ready = true;
}

void cg_amx_thread_tiles(void)
{
    if (!amx_ready && !cg_amx_emulated())
        amx_configure();
}

/* x + y, rounded once; where both are NaN, x's NaN (x86 returns its first
 * source's). The order is pinned, not left to the compiler, because it
 * decides which NaN C keeps: store_tile's edge tiles took the sums' NaN
 * over C's, the vector path of whole tiles C's over the sums'. */
BF16_TARGET static inline __m512 add_first(__m512 x, __m512 y)
{
    __m512 r;
    __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y));
    return r;
}

/* Columns [0, nr) of a tile t (column-major, ld MR) into a column-stored
 * C, rows under the masks m0 (0-15) and m1 (16-31): alpha t + bias (one
 * per row of the tile), alpha t, or alpha t + beta C, each product and sum
 * rounded as store_tile rounds them; c_first: C's NaN over the sums' (a
 * whole tile). one: alpha is 1 (alpha t is t, NaN and -0 included, so the
 * product is left out); so is beta C for beta 1. C's rows outside the
 * masks are neither read nor written. */
BF16_TARGET static inline __attribute__((always_inline)) void store_columns(
    bool one, bool c_first, int64_t nr, const float *t, __mmask16 m0, __mmask16 m1, float alpha,
    float beta, const float *bias, float *c, int64_t csc)
{
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int64_t j = 0; j < nr; j++) {
        float *cj = c + j * csc;
        __m512 r0 = _mm512_maskz_load_ps(m0, t + j * MR);
        __m512 r1 = _mm512_maskz_load_ps(m1, t + j * MR + 16);
        if (!one) {
            r0 = _mm512_mul_ps(va, r0);
            r1 = _mm512_mul_ps(va, r1);
        }
        if (bias) {
            r0 = add_first(r0, b0);
            r1 = add_first(r1, b1);
        } else if (beta != 0.0f) {
            __m512 c0 = _mm512_maskz_loadu_ps(m0, cj), c1 = _mm512_maskz_loadu_ps(m1, cj + 16);
            if (beta != 1.0f) {
                c0 = _mm512_mul_ps(vb, c0);
                c1 = _mm512_mul_ps(vb, c1);
            }
            r0 = c_first ? add_first(c0, r0) : add_first(r0, c0);
            r1 = c_first ? add_first(c1, r1) : add_first(r1, c1);
        }
        _mm512_mask_storeu_ps(cj, m0, r0);
        _mm512_mask_storeu_ps(cj + 16, m1, r1);
    }
}

/* Write a 32 x 32 tile t (column-major, ld MR) into C as store_tile does;
 * a column-stored C with no bias or one per row of the tile with vectors
 * (the same two roundings), an edge tile (m not a multiple of 32: 65
 * characters) under masks. */
BF16_TARGET static void store_tile_wide(int64_t mr, int64_t nr, const float *t, const tile_out *o,
                                        float *c, int64_t rsc, int64_t csc)
{
    if (rsc != 1 || (o->bias && o->rs != 1)) {
        store_tile(mr, nr, t, o, c, rsc, csc);
        return;
    }
    const __mmask16 m0 = (__mmask16)(mr >= 16 ? 0xffffu : (1u << mr) - 1u);
    const __mmask16 m1 = (__mmask16)(mr >= 32 ? 0xffffu : mr <= 16 ? 0u : (1u << (mr - 16)) - 1u);
    if (o->alpha == 1.0f)
        store_columns(true, mr == MR, nr, t, m0, m1, 1.0f, o->beta, o->bias, c, csc);
    else
        store_columns(false, mr == MR, nr, t, m0, m1, o->alpha, o->beta, o->bias, c, csc);
}

/* Where kernel_amx's sums of a tile that is not loaded in place start: the
 * bias's values (alpha t + bias) or C's (beta 1) for its mr x nr into t
 * (column-major, ld MR), zeros around them; by columns with vectors for a
 * column-stored C or a bias of one per row of the tile. */
BF16_TARGET static void tile_start(int64_t mr, int64_t nr, const tile_out *o, const float *c,
                                   int64_t rsc, int64_t csc, float *t)
{
    const __mmask16 m0 = (__mmask16)mask32(mr), m1 = (__mmask16)mask32(mr - 16);
    const bool vec = o->bias ? o->rs == 1 && o->cs == 0 : rsc == 1;
    for (int64_t j = 0; j < NR_AMX; j++) {
        float *tj = t + j * MR;
        if (j >= nr || !vec) {
            _mm512_store_ps(tj, _mm512_setzero_ps());
            _mm512_store_ps(tj + 16, _mm512_setzero_ps());
            for (int64_t i = 0; j < nr && i < mr; i++)
                tj[i] = o->bias ? o->bias[i * o->rs + j * o->cs] : c[i * rsc + j * csc];
            continue;
        }
        const float *s = o->bias ? o->bias : c + j * csc;
        _mm512_store_ps(tj, _mm512_maskz_loadu_ps(m0, s));
        _mm512_store_ps(tj + 16, _mm512_maskz_loadu_ps(m1, s + 16));
    }
}

/* Such a tile's result t into C: its mr x nr as they are */
BF16_TARGET static void tile_end(int64_t mr, int64_t nr, const float *t, float *c, int64_t rsc,
                                 int64_t csc)
{
    const __mmask16 m0 = (__mmask16)mask32(mr), m1 = (__mmask16)mask32(mr - 16);
    for (int64_t j = 0; j < nr; j++) {
        float *cj = c + j * csc;
        if (rsc == 1) {
            _mm512_mask_storeu_ps(cj, m0, _mm512_load_ps(t + j * MR));
            _mm512_mask_storeu_ps(cj + 16, m1, _mm512_load_ps(t + j * MR + 16));
        } else {
            for (int64_t i = 0; i < mr; i++)
                cj[i * rsc] = t[j * MR + i];
        }
    }
}

/* An AMX B operand as kernel_amx reads it: NR_AMX rows (16 when the
 * kernel loads only 16), row i's k-pair q at p + i sb + 4 q bytes for q
 * below `direct` (a multiple of 16), and the chunk of 16 pairs from there
 * in `tail` (rows of 64 bytes), if any. A packed panel is all direct (zero
 * from kp up to round16(kp)); a bf16 B read in place (b_in_place) has its
 * last partial chunk copied to `tail`, zero past k. */
typedef struct {
    const void *p;
    size_t sb;
    int64_t direct;
    const uint32_t *tail;
} amx_b;

/* Whether kernel_amx's tiles start from C or the bias (alpha 1 with a
 * bias or beta 1), and whether its tile (mr x nr) is summed and stored in
 * C in place: a whole tile of a column-stored C whose result is the tiles'
 * as they are (see kernel_amx_of). The epilogue's write-out (tile_out's
 * wo) is taken only there. */
static inline bool amx_starts_from_c(const tile_out *o)
{
    return o->alpha == 1.0f && (o->bias || (o->beta == 1.0f && !o->once));
}
static inline bool amx_in_place(int64_t mr, int64_t nr, int64_t rsc, const tile_out *o)
{
    const bool whole = mr == MR && nr == NR_AMX && rsc == 1;
    return whole && (amx_starts_from_c(o) ? !o->bias || (o->rs == 1 && o->cs == 0)
                                          : o->alpha == 1.0f && o->beta == 0.0f && !o->bias);
}

/* Whether the kernel of kind writes the epilogue's write-out (tile_out's
 * wo) of a tile of MR rows and nr columns: a whole tile its registers
 * (native) or its tiles (AMX) store in C as they are. */
static inline bool tile_writes_out(cg_bf16_kind kind, int64_t nr, int64_t rsc, const tile_out *o)
{
    if (kind == CG_BF16_NATIVE)
        return tile_whole(MR, nr, NR, rsc, o->bias, o->rs);
    return kind == CG_BF16_AMX && amx_in_place(MR, nr, rsc, o);
}

/* The epilogue's write-out (o->wo) of a whole AMX tile already in C
 * (column-stored, NR_AMX columns csc apart, each MR rows): C's values
 * read back from the first cache level and written as store_tile_wo writes
 * its sums (write_out16: the activation in place, the bf16 copies). */
BF16_TARGET static __attribute__((noinline)) void write_out_tile(float *c, int64_t csc,
                                                                 const tile_out *o)
{
    const int act = o->wo->act;
    for (int j = 0; j < NR_AMX; j++) {
        float *cj = c + j * csc;
        const __m512 r0 = _mm512_loadu_ps(cj), r1 = _mm512_loadu_ps(cj + 16);
        uint16_t *p16 = o->pre16 ? o->pre16 + j * csc : NULL;
        uint16_t *o16 = o->out16 ? o->out16 + j * csc : NULL;
        write_out16(r0, act, cj, p16, o16);
        write_out16(r1, act, cj + 16, p16 ? p16 + 16 : NULL, o16 ? o16 + 16 : NULL);
    }
}

/* kp k-pairs of an A panel ([kp][MR]) times an AMX B operand b (zero from
 * kp up to round16(kp)), into C (mr x nr of the tile). Tiles 0-3 hold
 * C^T's four 16 x 16 quarters; 4-5 the B rows, 6-7 the A pairs. A pair
 * chunk past the end of the A panel is read from a zeroed copy (the panel
 * may be followed by other data). Quarters that C does not receive are not
 * computed. emu: the tiles emulated (core/amx_tiles.h).
 *
 * With alpha 1, the tiles sum from where C starts: the bias (alpha t +
 * bias) or C (beta 1), loaded into them, and the result is stored as it
 * is. A whole tile of a column-stored C loads C in place and a bias of one
 * per row of the tile with stride 0 (every row of a quarter the same 16
 * values); other tiles go through t (tile_start). So each product rounds
 * onto C or the bias as the unit adds it, not summed from zero with C added
 * once (store_tile; cg_gemm_adds_c_once is false here). Those tiles were
 * 119,000 of the 249,000 of a seq2seq base bf16 step (the forward
 * products' bias, and every k block after a product's first; emulated,
 * Zen 5), and their write-out 3.5% to 6.6% of the step on the Xeon
 * (2026-11-25). A subnormal C or bias reads as zero, as the unit reads its
 * inputs. Other alpha and beta: the sums start from zero, and
 * store_tile_wide writes them out. */
AMX_TARGET static inline __attribute__((always_inline)) void kernel_amx_of(
    bool emu, int64_t kp, const uint32_t *a, const amx_b *b, int64_t mr, int64_t nr,
    const tile_out *o, float *c, int64_t rsc, int64_t csc)
{
    if (!emu && !amx_ready)
        amx_configure();
    uint32_t tail[16 * MR] __attribute__((aligned(64)));
    float t[NR_AMX * MR] __attribute__((aligned(64)));
    const bool m2 = mr > 16, n2 = nr > 16;
    const size_t sa = MR * sizeof(uint32_t), sc = (size_t)csc * sizeof(float);
    const bool start = amx_starts_from_c(o);
    const bool in_place = amx_in_place(mr, nr, rsc, o);
    if (start && in_place && o->bias) {
        CG_TILE_LOADD(emu, 0, o->bias, 0);
        CG_TILE_LOADD(emu, 1, o->bias + 16, 0);
        CG_TILE_LOADD(emu, 2, o->bias, 0);
        CG_TILE_LOADD(emu, 3, o->bias + 16, 0);
    } else if (start && in_place) {
        CG_TILE_LOADD(emu, 0, c, sc);
        CG_TILE_LOADD(emu, 1, c + 16, sc);
        CG_TILE_LOADD(emu, 2, c + 16 * csc, sc);
        CG_TILE_LOADD(emu, 3, c + 16 * csc + 16, sc);
    } else if (start) {
        tile_start(mr, nr, o, c, rsc, csc, t);
        CG_TILE_LOADD(emu, 0, t, sa);
        CG_TILE_LOADD(emu, 1, t + 16, sa);
        CG_TILE_LOADD(emu, 2, t + 16 * MR, sa);
        CG_TILE_LOADD(emu, 3, t + 16 * MR + 16, sa);
    } else {
        CG_TILE_ZERO(emu, 0);
        CG_TILE_ZERO(emu, 1);
        CG_TILE_ZERO(emu, 2);
        CG_TILE_ZERO(emu, 3);
    }
    for (int64_t p = 0; p < kp; p += 16) {
        const uint32_t *ap = a + p * MR;
        if (kp - p < 16) {
            memset(tail, 0, sizeof tail);
            memcpy(tail, ap, (size_t)(kp - p) * MR * sizeof(uint32_t));
            ap = tail;
        }
        const char *bp = (const char *)b->p + p * (int64_t)sizeof(uint32_t);
        size_t sb = b->sb;
        if (p >= b->direct) {
            bp = (const char *)b->tail;
            sb = 16 * sizeof(uint32_t);
        }
        CG_TILE_LOADD(emu, 4, bp, sb);
        CG_TILE_LOADD(emu, 6, ap, sa);
        CG_TILE_DPBF16PS(emu, 0, 4, 6);
        if (m2) {
            CG_TILE_LOADD(emu, 7, ap + 16, sa);
            CG_TILE_DPBF16PS(emu, 1, 4, 7);
        }
        if (n2) {
            CG_TILE_LOADD(emu, 5, bp + 16 * sb, sb);
            CG_TILE_DPBF16PS(emu, 2, 5, 6);
            if (m2)
                CG_TILE_DPBF16PS(emu, 3, 5, 7);
        }
    }
    /* C^T's row j is column j of the tile: t[j * MR + i]; a whole tile of
     * a column-stored C that is C's result as it is goes there directly
     * (1024^3 from zero: 646 GFLOP/s against 586 through t) */
    if (in_place) {
        CG_TILE_STORED(emu, 0, c, sc);
        CG_TILE_STORED(emu, 1, c + 16, sc);
        CG_TILE_STORED(emu, 2, c + 16 * csc, sc);
        CG_TILE_STORED(emu, 3, c + 16 * csc + 16, sc);
        if (o->wo)
            write_out_tile(c, csc, o);
        return;
    }
    CG_TILE_STORED(emu, 0, t, sa); /* the quarters C receives */
    if (m2)
        CG_TILE_STORED(emu, 1, t + 16, sa);
    if (n2)
        CG_TILE_STORED(emu, 2, t + 16 * MR, sa);
    if (m2 && n2)
        CG_TILE_STORED(emu, 3, t + 16 * MR + 16, sa);
    if (start)
        tile_end(mr, nr, t, c, rsc, csc);
    else
        store_tile_wide(mr, nr, t, o, c, rsc, csc);
}

/* kernel_amx_of on the unit and emulated, each compiled on its own */
AMX_TARGET static void kernel_amx_unit(int64_t kp, const uint32_t *a, const amx_b *b, int64_t mr,
                                       int64_t nr, const tile_out *o, float *c, int64_t rsc,
                                       int64_t csc)
{
    kernel_amx_of(false, kp, a, b, mr, nr, o, c, rsc, csc);
}
AMX_TARGET static void kernel_amx_emulated(int64_t kp, const uint32_t *a, const amx_b *b,
                                           int64_t mr, int64_t nr, const tile_out *o, float *c,
                                           int64_t rsc, int64_t csc)
{
    kernel_amx_of(true, kp, a, b, mr, nr, o, c, rsc, csc);
}
/* (not inlined: the drivers that call it compile as they did before the
 * emulation) */
static __attribute__((noinline)) void kernel_amx(int64_t kp, const uint32_t *a, const amx_b *b,
                                                 int64_t mr, int64_t nr, const tile_out *o,
                                                 float *c, int64_t rsc, int64_t csc)
{
    if (cg_amx_emulated())
        kernel_amx_emulated(kp, a, b, mr, nr, o, c, rsc, csc);
    else
        kernel_amx_unit(kp, a, b, mr, nr, o, c, rsc, csc);
}

/* ------------------------------------------------------------ driver */

/* A product as the kernels see it: C column-stored (row-stored C turned
 * over, C^T = B^T A^T), the bias per row or per column of C. */
typedef struct {
    cg_bf16_kind kind;
    int64_t m, n, k;
    float alpha, beta;
    const void *a, *b; /* floats, or bf16 where abf, bbf */
    bool abf, bbf;
    const float *bias;
    int64_t rsa, csa, rsb, csb, rsbias, csbias;
    float *c;
    int64_t rsc, csc;
    cg_prepacked pre; /* A already packed (pre.p), or pre.p NULL */
    bool c_once;      /* CG_GEMM_C_ONCE: the first k block's beta C */
} product;

static product product_of(cg_bf16_kind kind, int64_t m, int64_t n, int64_t k, float alpha,
                          const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb,
                          int64_t csb, unsigned bf, float beta, const float *bias, int64_t bs,
                          float *c, int64_t rsc, int64_t csc, const cg_prepacked *pre)
{
    /* a bias per column of C; per row of the tiles once C is turned over */
    int64_t rsbias = 0, csbias = bs;
    bool abf = bf & CG_GEMM_A_BF16, bbf = bf & CG_GEMM_B_BF16;
    if (bias && csc == 1 && rsc != 1) {
        rsbias = bs;
        csbias = 0;
    }
    if (csc == 1 && rsc != 1) { /* turned over below: A and B swap */
        const void *t = a;
        a = b;
        b = t;
        const bool tb = abf;
        abf = bbf;
        bbf = tb;
    }
    const float *fa = NULL, *fb = NULL; /* (a and b swapped above) */
    cg_gemm_to_column_c(&m, &n, &fa, &rsa, &csa, &fb, &rsb, &csb, &rsc, &csc);
    return (product){.kind = kind,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = alpha,
                     .beta = beta,
                     .a = a,
                     .b = b,
                     .abf = abf,
                     .bbf = bbf,
                     .bias = bias,
                     .rsa = rsa,
                     .csa = csa,
                     .rsb = rsb,
                     .csb = csb,
                     .rsbias = rsbias,
                     .csbias = csbias,
                     .c = c,
                     .rsc = rsc,
                     .csc = csc,
                     .pre = pre ? *pre : (cg_prepacked){NULL, 0, NULL},
                     .c_once = (bf & CG_GEMM_C_ONCE) != 0};
}

/* Whether the kernel reads the B panel of nr columns in place, not
 * packed: B's elements are bf16 (the products' own rounding: packing them
 * is the identity) and each column's k runs contiguously, so that it holds
 * the k-pairs a packed panel holds. AMX: the panel has every row the
 * kernel loads (16, or NR_AMX for more than 16 columns). Native: a whole
 * panel of NR columns, k even (seq2seq base's forward products and input
 * gradients: 8% of a bf16 step went to packing them, Zen 5). */
static inline bool b_in_place(const product *p, int64_t nr)
{
    if (!p->bbf || p->rsb != 1 || p->csb <= 0)
        return false;
    if (p->kind == CG_BF16_AMX)
        return nr == NR_AMX || nr == 16;
    /* the native kernel's broadcasts read the words themselves: whole
     * panels, and every k block even, so that no pair reaches past it */
    return p->kind == CG_BF16_NATIVE && nr == NR && p->k % 2 == 0;
}

/* 32 elements of a row from p as bf16 (the first n, 0-32, read; zeros
 * past them), floats rounded as pair_rows rounds them. Whole vectors by
 * plain loads (a masked load that misses the caches streams at half the
 * speed on Zen 5). */
BF16_TARGET static inline __attribute__((always_inline)) __m512i row32(const void *p, bool bf,
                                                                       int64_t n)
{
    if (bf)
        return n >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(mask32(n), p);
    const float *f = p;
    const __m512 lo = n >= 16 ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps((__mmask16)mask32(n), f);
    const __m512 hi = n >= 32 ? _mm512_loadu_ps(f + 16)
                              : _mm512_maskz_loadu_ps((__mmask16)mask32(n - 16), f + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* The native B panels of columns [j0, j1) (multiples of NR; columns past
 * nc zero) of a block of B whose columns are adjacent (csb 1: a weight
 * gradient's x, attention's q and dO; row l at src + l ls), kc deep: 16
 * k-pairs at a time, read 48 columns (four panels) at a time from each
 * row, so that the block's rows are read from the first cache (not once a
 * panel: 24 bytes of each of kc rows ls apart, then back for the next 24,
 * was 15% of a 1024 x 256 x 3072 weight gradient's time, Zen 5) and each
 * panel gets 16 pairs' words in a run (a pair at a time across all the
 * panels wrote 22 streams 48 bytes at a time). The words of
 * pack_panel_native. */
BF16_TARGET static inline __attribute__((always_inline)) void pack_b_across_of(
    int64_t nc, int64_t kc, const void *src, bool bf, int64_t ls, int64_t j0, int64_t j1,
    uint32_t *pb)
{
    enum { PAIRS = 16 };
    const int64_t words = (kc + 1) / 2 * NR, end = min64(j1, nc);
    /* a panel's 12 words from two vectors of 16 pairs, from word 4, 8 or
     * 12 of the first on */
    const __m512i at4 =
        _mm512_set_epi32(0, 0, 0, 0, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12);
    const __m512i at8 = _mm512_set_epi32(0, 0, 0, 0, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8);
    const __m512i at12 = _mm512_set_epi32(0, 0, 0, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4);
    const __mmask16 st = 0x0fff;
    for (int64_t l0 = 0; l0 < kc; l0 += 2 * PAIRS) {
        const int64_t l1 = min64(l0 + 2 * PAIRS, kc);
        for (int64_t r = l1; r < min64(l1 + 2 * PAIRS, kc); r++) /* the next block's rows */
            for (int64_t c = j0; c < end; c += bf ? 32 : 16)
                _mm_prefetch(elem_at(src, bf, r * ls + c), _MM_HINT_T0);
        for (int64_t c = j0; c < end; c += 48) {
            const int64_t n = end - c, nb = n - 32 < 16 ? n - 32 : 16;
            uint32_t *d = pb + c / NR * words + l0 / 2 * NR;
            for (int64_t l = l0; l < l1; l += 2, d += NR) {
                const void *s0 = elem_at(src, bf, l * ls + c);
                const void *s1 = l + 1 < kc ? elem_at(src, bf, (l + 1) * ls + c) : NULL;
                const __m512i a0 = row32(s0, bf, n);
                const __m512i a1 = s1 ? row32(s1, bf, n) : _mm512_setzero_si512();
                __m512i p0, p1, p2 = _mm512_setzero_si512();
                pair_rows_bf(a0, a1, &p0, &p1); /* columns c .. c + 31 */
                if (n > 32) {
                    const __m512i b0 = row32(elem_at(s0, bf, 32), bf, nb);
                    const __m512i b1 =
                        s1 ? row32(elem_at(s1, bf, 32), bf, nb) : _mm512_setzero_si512();
                    pair_rows_bf(b0, b1, &p2, NULL); /* columns c + 32 .. c + 47 */
                }
                _mm512_mask_storeu_epi32(d, st, p0);
                if (n > 12)
                    _mm512_mask_storeu_epi32(d + words, st, _mm512_permutex2var_epi32(p0, at4, p1));
                if (n > 24)
                    _mm512_mask_storeu_epi32(d + 2 * words, st,
                                             _mm512_permutex2var_epi32(p1, at8, p2));
                if (n > 36)
                    _mm512_mask_storeu_epi32(d + 3 * words, st, _mm512_permutexvar_epi32(at12, p2));
            }
        }
    }
}

BF16_TARGET static void pack_b_across(int64_t nc, int64_t kc, const void *src, bool bf, int64_t ls,
                                      int64_t j0, int64_t j1, uint32_t *pb)
{
    if (bf)
        pack_b_across_of(nc, kc, src, true, ls, j0, j1, pb);
    else
        pack_b_across_of(nc, kc, src, false, ls, j0, j1, pb);
}

/* B panels [j0, j1) (multiples of b_cols) of the block of B at k offset
 * pc (kc deep) and column offset jc (nc wide), into pb: the panel of
 * column j at pb + j / b_cols panels; none for a panel read in place
 * (b_in_place). */
static void pack_b(const product *p, int64_t jc, int64_t nc, int64_t pc, int64_t kc, int64_t j0,
                   int64_t j1, uint32_t *pb)
{
    const int64_t bc = b_cols(p->kind), words = b_panel_words(p->kind, (kc + 1) / 2);
    if (p->kind == CG_BF16_NATIVE && p->csb == 1 && p->rsb != 1) {
        pack_b_across(nc, kc, elem_at(p->b, p->bbf, pc * p->rsb + jc), p->bbf, p->rsb, j0, j1, pb);
        return;
    }
    if (p->kind == CG_BF16_AMX && p->csb == 1 && p->rsb != 1) {
        pack_amx_strided(nc, kc, elem_at(p->b, p->bbf, pc * p->rsb + jc), p->bbf, p->rsb, j0, j1,
                         pb, words);
        return;
    }
    for (int64_t j = j0; j < j1; j += bc)
        if (!b_in_place(p, min64(nc - j, bc)))
            pack_b_panel(p->kind, min64(nc - j, bc), kc,
                         elem_at(p->b, p->bbf, pc * p->rsb + (jc + j) * p->csb), p->bbf, p->csb,
                         p->rsb, pb + j / bc * words);
}

/* pack_a's panels of mc rows of an A whose rows are adjacent (a weight
 * gradient's x^T: each k holds the rows side by side, ls apart): a k-pair
 * at a time across all the panels, so that each k row is read in order (a
 * panel at a time read 64 or 128 bytes of each of kc rows ls apart, bound
 * by the misses), with the next rows prefetched. pack_panel_native's
 * panels. */
BF16_TARGET static inline __attribute__((always_inline)) void pack_a_across_of(
    int64_t mc, int64_t kc, const void *src, bool bf, int64_t ls, uint32_t *pa)
{
    const int64_t kp = (kc + 1) / 2;
    for (int64_t l = 0; l < kc; l += 2) {
        const void *s0 = elem_at(src, bf, l * ls);
        const void *s1 = l + 1 < kc ? elem_at(src, bf, (l + 1) * ls) : NULL;
        for (int64_t i = 0; i < mc; i += MR) {
            for (int64_t r = l + PF_ROWS; r < l + PF_ROWS + 2 && r < kc; r++)
                for (int64_t e = 0; e < (bf ? 1 : 2); e++)
                    _mm_prefetch(elem_at(src, bf, r * ls + i + 16 * e), _MM_HINT_T0);
            pack_pair(MR, mc - i, elem_at(s0, bf, i), s1 ? elem_at(s1, bf, i) : NULL, bf,
                      pa + i * kp + l / 2 * MR);
        }
    }
}

/* pack_a_across_of for floats and for bf16 elements, each compiled on its own */
BF16_TARGET static void pack_a_across(int64_t mc, int64_t kc, const void *src, bool bf, int64_t ls,
                                      uint32_t *pa)
{
    if (bf)
        pack_a_across_of(mc, kc, src, true, ls, pa);
    else
        pack_a_across_of(mc, kc, src, false, ls, pa);
}

/* The m block of A at row ic (mc rows) and k offset pc (kc deep) as the
 * kernels' A panels, into pa (panel i / MR at pa + i / MR panels). */
static void pack_a(const product *p, int64_t ic, int64_t mc, int64_t pc, int64_t kc, uint32_t *pa)
{
    const int64_t kp = (kc + 1) / 2;
    if (p->kind != CG_BF16_EMULATED && p->rsa == 1) {
        pack_a_across(mc, kc, elem_at(p->a, p->abf, ic + pc * p->csa), p->abf, p->csa, pa);
        return;
    }
    for (int64_t i = 0; i < mc; i += MR)
        pack_panel(p->kind, true, MR, min64(mc - i, MR), kc,
                   elem_at(p->a, p->abf, (ic + i) * p->rsa + pc * p->csa), p->abf, p->rsa, p->csa,
                   pa + i * kp * a_words(p->kind));
}

/* The B panel of C's columns [j, j + nr) in B's k block at pc (kc deep)
 * as kernel_amx reads it in place: whole chunks of 16 pairs from B's
 * columns, the last partial one (kc not a multiple of 32) copied to tail
 * (NR_AMX rows of 16 pairs) with zeros past kc, an odd kc's partner
 * included, so that no element past the k block is read. */
static amx_b b_amx_in_place(const product *p, int64_t j, int64_t nr, int64_t pc, int64_t kc,
                            uint32_t *tail)
{
    const uint16_t *src = (const uint16_t *)p->b + pc + j * p->csb;
    const size_t sb = (size_t)p->csb * sizeof(uint16_t);
    const int64_t whole = kc / 32 * 32, left = kc - whole;
    if (left) {
        memset(tail, 0, (size_t)nr * 16 * sizeof(uint32_t));
        for (int64_t i = 0; i < nr; i++)
            memcpy(tail + i * 16, src + i * p->csb + whole, (size_t)left * sizeof(uint16_t));
    }
    return (amx_b){src, sb, whole / 2, tail};
}

/* One B panel (C's columns [j, j + nr)), packed at bp or, where bp is
 * NULL, read in place (b_in_place), times the row panels of A's rows
 * [ic, ic + mc) (packed at pa, or the prepacked ones), the k block at pc
 * (kc deep): each tile of C gets the block's sums, the first block adding
 * beta C or the bias. After the last k block the product's epilogue (if
 * any) runs on the mc x nr block, still in cache (tile by tile, as each
 * was written, it cost more: seq2seq base's ReLU ran 6% slower). */
static void panel_times_rows(const product *p, int64_t ic, int64_t mc, int64_t j, int64_t nr,
                             int64_t pc, int64_t kc, const uint32_t *bp, const uint32_t *pa)
{
    const int64_t kp = (kc + 1) / 2;
    const bool first = pc == 0, bias = first && p->bias;
    const bool last = p->pre.epi && pc + kc == p->k; /* the tiles are final: the epilogue */
    /* (the bias at each row panel's, below) */
    tile_out o = {p->alpha,
                  first ? (bias ? 0.0f : p->beta) : 1.0f,
                  bias ? p->bias + ic * p->rsbias + j * p->csbias : NULL,
                  p->rsbias,
                  p->csbias,
                  NULL,
                  NULL,
                  NULL,
                  first && p->c_once};
    /* the kernel writes the epilogue itself on the block's whole tiles (fn
     * then runs on the rows of a partial last one only) */
    const cg_gemm_epilogue *e = p->pre.epi;
    const bool wo = last && e->wo && tile_writes_out(p->kind, nr, p->rsc, &o);
    uint32_t tail[NR_AMX * 16] __attribute__((aligned(64)));
    amx_b b = {bp, (size_t)round16(kp) * sizeof(uint32_t), INT64_MAX, NULL};
    if (!bp && p->kind == CG_BF16_AMX)
        b = b_amx_in_place(p, j, nr, pc, kc, tail);
    for (int64_t ir = 0; ir < mc; ir += MR) {
        const int64_t mr = min64(mc - ir, MR);
        float *cp = p->c + (ic + ir) * p->rsc + j * p->csc;
        o.bias = bias ? p->bias + (ic + ir) * p->rsbias + j * p->csbias : NULL;
        if (wo && mr == MR) {
            const ptrdiff_t off = cp - e->c0;
            o.wo = e;
            o.pre16 = e->pre16 ? e->pre16 + off : NULL;
            o.out16 = e->out16 ? e->out16 + off : NULL;
        } else {
            o.wo = NULL;
        }
        /* the A panel: packed, or the prepacked one's k block (k-pairs on
         * every path: the emulated kernel unpacks them) */
        const uint32_t *ap =
            p->pre.p ? (const uint32_t *)p->pre.p + (ic + ir) / MR * p->pre.kp * MR + pc / 2 * MR
                     : pa + ir * kp * a_words(p->kind);
        if (p->kind == CG_BF16_AMX)
            kernel_amx(kp, ap, &b, mr, nr, &o, cp, p->rsc, p->csc);
        else if (p->kind == CG_BF16_NATIVE && !bp)
            kernel_native_in_place(kp, ap, (const uint16_t *)p->b + pc + j * p->csb,
                                   p->csb * (int64_t)sizeof(uint16_t), mr, &o, cp, p->rsc, p->csc);
        else if (p->kind == CG_BF16_NATIVE)
            kernel_native(kp, ap, bp, mr, nr, &o, cp, p->rsc, p->csc);
        else
            kernel_emulated(p->pre.p != NULL, kp, ap, (const float *)bp, mr, nr, &o, cp, p->rsc,
                            p->csc);
    }
    const int64_t done = wo ? mc / MR * MR : 0; /* rows the write-out finished */
    if (last && done < mc)
        e->fn(e, p->c + (ic + done) * p->rsc + j * p->csc, mc - done, nr, p->rsc, p->csc);
}

/* Rows [i0, i1) of C's block at column offset jc (nc wide) get the k block
 * at pc (kc deep) of their products with B's packed block pb (a panel read
 * in place is not packed there: b_in_place): A is packed an m block at a
 * time into pa, and the tiles are computed in the same order for any
 * [i0, i1), so an element's sums do not depend on the rows that share its
 * call. */
static void rows_times_block(const product *p, int64_t i0, int64_t i1, int64_t jc, int64_t nc,
                             int64_t pc, int64_t kc, const uint32_t *pb, uint32_t *pa)
{
    const int64_t bc = b_cols(p->kind), bw = b_panel_words(p->kind, (kc + 1) / 2);
    for (int64_t ic = i0; ic < i1; ic += MC) {
        const int64_t mc = min64(i1 - ic, MC);
        if (!p->pre.p)
            pack_a(p, ic, mc, pc, kc, pa);
        for (int64_t jr = 0; jr < nc; jr += bc) {
            const int64_t nr = min64(nc - jr, bc);
            panel_times_rows(p, ic, mc, jc + jr, nr, pc, kc,
                             b_in_place(p, nr) ? NULL : pb + jr / bc * bw, pa);
        }
    }
}

/* Elements of one packed A block and of one packed B block of p, sized to
 * p (a block sized for the largest product put B 72 KB after A: both at
 * the same L1 sets, and small products, attention's, ran 15% slower). */
static size_t a_rows_size(const product *p, int64_t rows)
{
    const int64_t kp = (min64(p->k, KC) + 1) / 2;
    return (size_t)((rows + MR - 1) / MR * MR * kp * a_words(p->kind) + 15) / 16 * 16;
}
static size_t a_block_size(const product *p) { return a_rows_size(p, min64(p->m, MC)); }
static size_t b_block_size(const product *p)
{
    const int64_t kp = (min64(p->k, KC) + 1) / 2;
    const int64_t bc = b_cols(p->kind);
    return (size_t)((min64(p->n, n_block(p->kind)) + bc - 1) / bc * b_panel_words(p->kind, kp) +
                    15) /
           16 * 16;
}

bool cg_bf16_gemm_serial(cg_bf16_kind kind, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb,
                         int64_t csb, unsigned bf, float beta, const float *bias, int64_t bs,
                         float *c, int64_t rsc, int64_t csc, const cg_prepacked *pre)
{
    const product p = product_of(kind, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias, bs,
                                 c, rsc, csc, pre);
    /* AMX, with A prepacked (the weight) or in one m block: each B panel
     * is packed just before every row panel of C multiplies it, into one
     * buffer that stays in L1 (packing a whole block first, then reading it
     * back once per m block, went through L2 and L3). The native kernel
     * too with a prepacked A of at most native_fuse_rows() rows (a 3072 x
     * 256 x 256 forward 4% faster on Zen 5). */
    const bool fused = (kind == CG_BF16_AMX && (p.pre.p || p.m <= FUSE_ROWS)) ||
                       (kind == CG_BF16_NATIVE && p.pre.p && p.m <= native_fuse_rows());
    const size_t na = p.pre.p ? 0 : fused ? a_rows_size(&p, p.m) : a_block_size(&p);
    const size_t nb =
        fused ? (size_t)b_panel_words(kind, (min64(p.k, KC) + 1) / 2) : b_block_size(&p);
    uint32_t *pa = cg_gemm_thread_buffer((na + nb) * sizeof(uint32_t));
    if (!pa)
        return false;
    uint32_t *pb = pa + na;
    const int64_t bc = b_cols(kind);
    for (int64_t jc = 0; jc < p.n; jc += n_block(kind)) {
        const int64_t nc = min64(p.n - jc, n_block(kind));
        for (int64_t pc = 0; pc < p.k; pc += KC) {
            const int64_t kc = min64(p.k - pc, KC);
            if (!fused) {
                pack_b(&p, jc, nc, pc, kc, 0, nc, pb);
                rows_times_block(&p, 0, p.m, jc, nc, pc, kc, pb, pa);
                continue;
            }
            if (!p.pre.p)
                pack_a(&p, 0, p.m, pc, kc, pa);
            for (int64_t jr = 0; jr < nc; jr += bc) {
                const int64_t nr = min64(nc - jr, bc);
                const bool in_place = b_in_place(&p, nr);
                if (!in_place)
                    pack_b(&p, jc + jr, nc - jr, pc, kc, 0, nr, pb);
                panel_times_rows(&p, 0, p.m, jc + jr, nr, pc, kc, in_place ? NULL : pb, pa);
            }
        }
    }
    _mm_sfence(); /* write_out16's streamed stores done before C is read */
    return true;
}

/* The shared-packing split needs at least two row panels of C a thread,
 * equal shares (or many panels), and all of B's k blocks in no more memory
 * than a thread's buffer holds at most for one block of a serial product
 * (a weight gradient's B over 4096 rows took 14 MB more resident memory):
 * otherwise the caller splits C into independent products. */
#define SHARED_B_MAX_BYTES ((size_t)4 << 20)
bool cg_bf16_gemm_shares_packing(cg_bf16_kind kind, int64_t m, int64_t n, int64_t k, int64_t rsc,
                                 int64_t csc, int nt)
{
    const bool turned = csc == 1 && rsc != 1;
    const int64_t rows = turned ? n : m, cols = turned ? m : n; /* C as the kernels store it */
    const int64_t panels = (rows + MR - 1) / MR;
    const int64_t bc = b_cols(kind);
    const size_t bbytes = (size_t)((min64(cols, n_block(kind)) + bc - 1) / bc) *
                          (size_t)b_panel_words(kind, KC / 2) * (size_t)((k + KC - 1) / KC) *
                          sizeof(uint32_t);
    return nt > 1 && panels >= 2 * nt && (panels % nt == 0 || panels >= 8 * nt) &&
           bbytes <= SHARED_B_MAX_BYTES;
}

bool cg_bf16_gemm_parallel(cg_bf16_kind kind, int nt, int64_t m, int64_t n, int64_t k, float alpha,
                           const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb,
                           int64_t csb, unsigned bf, float beta, const float *bias, int64_t bs,
                           float *c, int64_t rsc, int64_t csc, const cg_prepacked *pre)
{
    const product p = product_of(kind, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias, bs,
                                 c, rsc, csc, pre);
    /* the calling thread's buffer holds every k block of B (one column
     * block at a time) and each thread's A block (none when prepacked) */
    const int64_t nblk = (p.k + KC - 1) / KC, ncmax = min64(p.n, n_block(kind));
    const size_t na = p.pre.p ? 0 : a_block_size(&p), nbk = b_block_size(&p);
    uint32_t *buf =
        cg_gemm_thread_buffer((na * (size_t)nt + nbk * (size_t)nblk) * sizeof(uint32_t));
    if (!buf)
        return false;
    uint32_t *pb = buf + na * (size_t)nt;
    const int64_t bc = b_cols(kind), panels = (p.m + MR - 1) / MR, npb = (ncmax + bc - 1) / bc;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t i0 = min64(panels * t / T * MR, p.m);
        const int64_t i1 = min64(panels * (t + 1) / T * MR, p.m);
        uint32_t *pa = buf + na * (size_t)t;
        for (int64_t jc = 0; jc < p.n; jc += n_block(kind)) {
            const int64_t nc = min64(p.n - jc, n_block(kind));
            /* B's panels of every k block, split among the threads in
             * runs of adjacent panels (one call a k block: the strided AMX
             * packing reads B's rows in order across a run); panels read
             * in place (b_in_place) are not packed, and every thread's
             * tiles load them from B */
            const int64_t nq = nblk * npb, q1 = nq * (t + 1) / T;
            for (int64_t q = nq * t / T; q < q1;) {
                const int64_t blk = q / npb, j = q % npb, jn = min64(npb, j + q1 - q);
                const int64_t pc = blk * KC;
                if (j * bc < nc)
                    pack_b(&p, jc, nc, pc, min64(p.k - pc, KC), j * bc, min64(jn * bc, nc),
                           pb + blk * nbk);
                q += jn - j;
            }
#pragma omp barrier
            for (int64_t pc = 0; pc < p.k; pc += KC)
                rows_times_block(&p, i0, i1, jc, nc, pc, min64(p.k - pc, KC), pb + (pc / KC) * nbk,
                                 pa);
#pragma omp barrier
        }
    }
    return true;
}

/* ------------------------------------------------ prepacked bf16 weights */

/* W [n, k] as the driver's A panels: panel q holds rows 32q .. 32q + 31 as
 * [ceil(k / 2)][MR] k-pairs (rows past n zero). A k block of KC elements
 * starting at pc is the sub-panel at pair pc / 2 (KC is even), so the
 * product below runs the driver's kernels on the driver's k blocks and
 * gives its bits. */
struct cg_bf16_matrix {
    int64_t n, k, kp, npanel;
    uint32_t *p;
};

/* W's panels [q0, q1) packed */
typedef struct {
    cg_bf16_kind kind;
    int64_t n, k, kp;
    const float *w;
    int64_t rsw, csw;
    uint32_t *p;
} panel_job;

static void pack_panels(int64_t q0, int64_t q1, int thread, const void *ctx)
{
    const panel_job *j = ctx;
    for (int64_t q = q0; q < q1; q++)
        pack_panel(j->kind, false, MR, min64(j->n - q * MR, MR), j->k, j->w + q * MR * j->rsw,
                   false, j->rsw, j->csw, j->p + q * j->kp * MR);
}

cg_bf16_matrix *cg_bf16_matrix_new(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw)
{
    if (n < 1 || k < 1 || !w) {
        cg_set_error("bf16 matrix: need a [n, k] matrix with n, k >= 1 (got %lld x %lld%s)",
                     (long long)n, (long long)k, w ? "" : ", no data");
        return NULL;
    }
    if (!cg_bf16_usable()) { /* the packing is AVX2 code at least: a SIGILL here */
        cg_set_error("bf16 matrix: " CG_NO_BF16);
        return NULL;
    }
    cg_bf16_matrix *m = malloc(sizeof *m);
    const int64_t kp = (k + 1) / 2, npanel = (n + MR - 1) / MR;
    const size_t bytes = (size_t)(npanel * kp * MR) * sizeof(uint32_t);
    /* from the tensors' caching allocator (core/alloc.c): the cache packs
     * every weight again after each optimizer step, the same sizes each
     * time, and glibc mapped and unmapped the large ones every step (11,700
     * page faults a seq2seq paper step) while the heap's layout decided
     * where the rest went, and with it the peak */
    uint32_t *p = m ? cg_alloc(bytes) : NULL;
    if (!p) {
        free(m);
        cg_set_error("bf16 matrix: out of memory for %lld x %lld", (long long)n, (long long)k);
        return NULL;
    }
    *m = (cg_bf16_matrix){n, k, kp, npanel, p};
    const panel_job job = {
        cg_bf16_native() ? CG_BF16_NATIVE : CG_BF16_EMULATED, n, k, kp, w, rsw, csw, p};
    /* in parallel from 3e4 elements: a 256 x 256 weight (its forward and
     * its transposed form, 72 a seq2seq base step after each optimizer
     * step) was packed by one thread while the other waited (1e5 before:
     * the 2-thread bf16 step 1.1% faster, Zen 5) */
    cg_shares_run(npanel, 1, cg_shares_team((double)n * (double)k > 3e4), pack_panels, &job);
    return m;
}

void cg_bf16_matrix_free(cg_bf16_matrix *m)
{
    if (m)
        cg_free(m->p);
    free(m);
}

int64_t cg_bf16_matrix_rows(const cg_bf16_matrix *m) { return m ? m->n : 0; }
int64_t cg_bf16_matrix_cols(const cg_bf16_matrix *m) { return m ? m->k : 0; }

/* Bytes of W one product reads (for bandwidth figures). */
size_t cg_bf16_matrix_bytes(const cg_bf16_matrix *m)
{
    return m ? (size_t)(m->npanel * m->kp * MR) * sizeof(uint32_t) : 0;
}

/* Panels [q0, q1) of W times every row of x (packed as xp: ceil(m /
 * b_cols) B panels of kp pairs), into y, plus the bias when given. */
static void bf16_matrix_panels(const cg_bf16_matrix *w, cg_bf16_kind kind, int64_t q0, int64_t q1,
                               int64_t m, const uint32_t *xp, const float *bias, int64_t bs,
                               float beta, bool once, float *y, int64_t rsy, int64_t csy,
                               const cg_gemm_epilogue *epi)
{
    const int64_t kp = w->kp, bc = b_cols(kind);
    for (int64_t q = q0; q < q1; q++) {
        const int64_t i0 = q * MR, mr = w->n - i0 < MR ? w->n - i0 : MR;
        for (int64_t j0 = 0; j0 < m; j0 += bc) {
            const int64_t nr = m - j0 < bc ? m - j0 : bc;
            const uint32_t *bp = xp + j0 / bc * b_panel_words(kind, kp);
            float *c = y + j0 * rsy + i0 * csy;
            for (int64_t pc = 0; pc < w->k; pc += KC) {
                const int64_t kc = w->k - pc < KC ? w->k - pc : KC;
                /* the first k block adds the bias (one per row of the
                 * tile) or beta y, later ones accumulate */
                const tile_out o = {1.0f,
                                    pc == 0 ? (bias ? 0.0f : beta) : 1.0f,
                                    pc == 0 && bias ? bias + i0 * bs : NULL,
                                    bs,
                                    0,
                                    NULL,
                                    NULL,
                                    NULL,
                                    pc == 0 && once};
                const uint32_t *ap = w->p + q * kp * MR + (pc / 2) * MR;
                if (kind == CG_BF16_AMX)
                    kernel_amx(
                        (kc + 1) / 2, ap,
                        &(amx_b){bp + pc / 2, round16(kp) * sizeof(uint32_t), INT64_MAX, NULL}, mr,
                        nr, &o, c, csy, rsy);
                else if (kind == CG_BF16_NATIVE)
                    kernel_native((kc + 1) / 2, ap, bp + (pc / 2) * NR, mr, nr, &o, c, csy, rsy);
                else
                    kernel_emulated(true, (kc + 1) / 2, ap, (const float *)(bp + pc * NR), mr, nr,
                                    &o, c, csy, rsy);
            }
            if (epi)
                epi->fn(epi, c, mr, nr, csy, rsy);
        }
    }
}

/* Rows of x up to which a product multiplies W's panels by all of x
 * packed at once, W's panels split among threads (decoding); above, the
 * GEMM driver's blocking. */
#define MATRIX_PANEL_MAX_ROWS 64

/* Bytes of W below which a product runs on one thread: waking the second
 * thread (a few microseconds) costs more than it saves. */
#define MATRIX_MIN_BYTES_PER_THREAD (512 * 1024)

/* cg_bf16_matrix_mul with x's elements floats, or bf16 when bf has
 * CG_GEMM_A_BF16, beta y added without a bias (once on every path with
 * CG_GEMM_C_ONCE), and the epilogue epi (or NULL) on y's final blocks */
static bool matrix_mul(const cg_bf16_matrix *w, cg_gemm_path path, int nthreads, int64_t m,
                       const void *x, unsigned bf, int64_t rsx, int64_t csx, const float *bias,
                       int64_t bs, float beta, float *y, int64_t rsy, int64_t csy,
                       const cg_gemm_epilogue *epi)
{
    const bool xbf = bf & CG_GEMM_A_BF16, once = bf & CG_GEMM_C_ONCE;
    if (!w || (m > 0 && (!x || !y)) || m < 0) {
        cg_set_error("bf16 matrix product: NULL argument or negative row count");
        return false;
    }
    if (path == CG_GEMM_AUTO)
        path = cg_bf16_auto_path();
    const cg_bf16_kind kind = path == CG_GEMM_BF16_AMX ? CG_BF16_AMX
                              : path == CG_GEMM_BF16   ? CG_BF16_NATIVE
                                                       : CG_BF16_EMULATED;
    if ((path != CG_GEMM_BF16_AMX && path != CG_GEMM_BF16 && path != CG_GEMM_BF16_EMULATED) ||
        !cg_gemm_path_available(path)) {
        cg_set_error("bf16 matrix product: path '%s' is not available", cg_gemm_path_name(path));
        return false;
    }
    if (m == 0)
        return true;
    if (m > MATRIX_PANEL_MAX_ROWS && w->n >= 2 && csy == 1 && rsy >= w->n) {
        /* many rows (training): the GEMM driver's blocking and threads,
         * with W's panels in place of the ones it would pack */
        const cg_prepacked pre = {w->p, w->kp, epi};
        if (cg_gemm_prepacked(path, nthreads, m, w->n, w->k, x, bf, rsx, csx, &pre, bias, bs, beta,
                              y, rsy, csy))
            return true;
        cg_set_error("bf16 matrix product: out of memory");
        return false;
    }
    /* x rounded to bf16 once, as B panels of the driver */
    const int64_t bc = b_cols(kind), nxp = (m + bc - 1) / bc;
    const int64_t xw = b_panel_words(kind, w->kp); /* words of a panel of x */
    uint32_t *xp = cg_gemm_thread_buffer((size_t)(nxp * xw) * sizeof(uint32_t));
    if (!xp) {
        cg_set_error("bf16 matrix product: out of memory");
        return false;
    }
    for (int64_t j = 0; j < nxp; j++)
        pack_b_panel(kind, min64(m - j * bc, bc), w->k, elem_at(x, xbf, j * bc * rsx), xbf, rsx,
                     csx, xp + j * xw);
    /* threads split W's panels into contiguous runs: each element of y is
     * the same kernel's sum over the same k blocks for any split */
    int nt = nthreads > 0 ? nthreads : cg_get_num_threads();
    const double per = (double)cg_bf16_matrix_bytes(w) / MATRIX_MIN_BYTES_PER_THREAD;
    if (nthreads <= 0 && per < nt)
        nt = per < 2.0 ? 1 : (int)per;
    if (nt > w->npanel)
        nt = (int)w->npanel;
    if (nt <= 1 || omp_in_parallel()) {
        bf16_matrix_panels(w, kind, 0, w->npanel, m, xp, bias, bs, beta, once, y, rsy, csy, epi);
        return true;
    }
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t q0 = w->npanel * t / T, q1 = w->npanel * (t + 1) / T;
        bf16_matrix_panels(w, kind, q0, q1, m, xp, bias, bs, beta, once, y, rsy, csy, epi);
    }
    return true;
}

bool cg_bf16_matrix_mul(const cg_bf16_matrix *w, cg_gemm_path path, int nthreads, int64_t m,
                        const float *x, int64_t rsx, int64_t csx, const float *bias, int64_t bs,
                        float *y, int64_t rsy, int64_t csy)
{
    return matrix_mul(w, path, nthreads, m, x, 0, rsx, csx, bias, bs, 0.0f, y, rsy, csy, NULL);
}

bool cg_bf16_matrix_mul_bf16(const cg_bf16_matrix *w, cg_gemm_path path, int nthreads, int64_t m,
                             const uint16_t *x, int64_t rsx, int64_t csx, const float *bias,
                             int64_t bs, float *y, int64_t rsy, int64_t csy)
{
    return matrix_mul(w, path, nthreads, m, x, CG_GEMM_A_BF16, rsx, csx, bias, bs, 0.0f, y, rsy,
                      csy, NULL);
}

bool cg_bf16_matrix_mul_epi(const cg_bf16_matrix *w, int path, int nthreads, int64_t m,
                            const void *x, unsigned bf, int64_t rsx, int64_t csx, const float *bias,
                            int64_t bs, float beta, float *y, int64_t rsy, int64_t csy,
                            const cg_gemm_epilogue *epi)
{
    return matrix_mul(w, (cg_gemm_path)path, nthreads, m, x, bf, rsx, csx, bias, bs, beta, y, rsy,
                      csy, epi);
}
