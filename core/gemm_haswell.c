/* BLIS's AVX2 (haswell) micro-kernel with our packing, for our blocked
 * driver (core/gemm_blocked.c): the haswell path's fp32 products on CPUs
 * with AVX2 and FMA but no AVX-512 (Zen 2, Zen 3), which BLIS's own driver
 * ran before, allocating with BLIS's allocator (it aborts when malloc
 * fails). The kernel multiplies 6 x 16 tiles and writes row-stored tiles
 * of C directly; the block sizes are those of BLIS's haswell context with
 * skx's KC (core/gemm.c blocks_haswell), and the results match BLIS's
 * driver with that context bit for bit (tests/test_matmul.c).
 *
 * Packing reads whole AVX2 vectors: 8 floats at a time along a panel when
 * the operand is contiguous across it, 8 x 8 blocks transposed in
 * registers when it is contiguous along k. A 6-float step of an A panel
 * is stored as 8 floats, the 2 past it overwritten by the next step (or
 * falling in the next panel, packed after, or the buffer's slack). */
#include "core/gemm_blocked.h"

#include "core/gemm_internal.h"

#include <immintrin.h>

/* The micro-kernel (exported by the static libblis.a, not in blis.h). BLIS
 * 0.9 kernels take the tile's m and n and handle partial tiles themselves;
 * this one loads B's panels with aligned loads (32 bytes). */
void bli_sgemm_haswell_asm_6x16(dim_t m, dim_t n, dim_t k, float *alpha, float *a, float *b,
                                float *beta, float *c, inc_t rs_c, inc_t cs_c, auxinfo_t *data,
                                cntx_t *cntx);

enum { MR = 6, NR = 16 };

/* ------------------------------------------------------------ packing */

/* All-ones in the first n of 8 lanes (n clamped to 0..8): a maskload's or
 * maskstore's mask. */
CG_AVX2 static inline __m256i lanes(int64_t n)
{
    static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1};
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_loadu_si256((const __m256i *)(ones + 8 - n));
}

/* Pack a panel of w <= W vectors of length k into p[l * W + i] =
 * src[i * vs + l * ls], zero for i >= w. W is MR (A) or NR (B); with W = 6
 * each step l writes 8 floats (see the top). */
CG_AVX2 static void pack_panel(int W, int64_t w, int64_t k, const float *src, int64_t vs,
                               int64_t ls, float *p)
{
    if (vs == 1) { /* each l: w contiguous floats */
        const __m256i m0 = lanes(w), m1 = lanes(w - 8);
        for (int64_t l = 0; l < k; l++) {
            const float *s = src + l * ls;
            float *d = p + l * W;
            if (W == 16 && w == 16) { /* a whole panel: plain loads */
                _mm256_storeu_ps(d, _mm256_loadu_ps(s));
                _mm256_storeu_ps(d + 8, _mm256_loadu_ps(s + 8));
                continue;
            }
            _mm256_storeu_ps(d, _mm256_maskload_ps(s, m0));
            if (W == 16)
                _mm256_storeu_ps(d + 8, _mm256_maskload_ps(s + 8, m1));
        }
        return;
    }
    int64_t l0 = 0;
    if (ls == 1) /* each vector contiguous along l: transpose 8 x 8 blocks */
        for (; l0 + 8 <= k; l0 += 8)
            for (int h = 0; h < W; h += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] =
                        h + i < w ? _mm256_loadu_ps(src + (h + i) * vs + l0) : _mm256_setzero_ps();
                cg_transpose8(r);
                for (int j = 0; j < 8; j++)
                    _mm256_storeu_ps(p + (l0 + j) * W + h, r[j]);
            }
    for (; l0 < k; l0++) /* the rest, and other strides */
        for (int i = 0; i < W; i++)
            p[l0 * W + i] = i < w ? src[i * vs + l0 * ls] : 0.0f;
}

CG_SGEMM_PANEL_PACKING(pack_panel, MR, NR)

/* ------------------------------------------------------------ bias */

/* C's mr x nr tile (nr <= NR) set to the bias: bias[i * bsr + j * bsc] at
 * (i, j), one of bsr and bsc 0. Rows of contiguous floats (csc 1, C as the
 * driver leaves it) in whole vectors. */
CG_AVX2 static void fill_tile(int64_t mr, int64_t nr, const float *bias, int64_t bsr, int64_t bsc,
                              float *c, int64_t rsc, int64_t csc)
{
    if (csc == 1 && (bsc == 0 || bsc == 1)) {
        const __m256i m0 = lanes(nr), m1 = lanes(nr - 8);
        for (int64_t i = 0; i < mr; i++) {
            const float *bi = bias + i * bsr;
            float *ci = c + i * rsc;
            const __m256 v0 = bsc ? _mm256_maskload_ps(bi, m0) : _mm256_set1_ps(*bi);
            const __m256 v1 = bsc ? _mm256_maskload_ps(bi + 8, m1) : v0;
            _mm256_maskstore_ps(ci, m0, v0);
            _mm256_maskstore_ps(ci + 8, m1, v1);
        }
        return;
    }
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < nr; j++)
            c[i * rsc + j * csc] = bias[i * bsr + j * bsc];
}

const cg_sgemm_kernel cg_sgemm_haswell = {
    .mr = MR,
    .nr = NR,
    .row_c = true,
    .kernel = bli_sgemm_haswell_asm_6x16,
    .pack_a_panel = pack_a_panel,
    .pack_b_panel = pack_b_panel,
    .fill_tile = fill_tile,
};
