/* BLIS's AVX-512 (skx) micro-kernel with our packing, for our blocked
 * driver (core/gemm_blocked.c).
 *
 * BLIS 0.9's skx context multiplies 32 x 12 tiles, but the packing kernels
 * a context can register stop at 31 rows: every 32-row panel of A is packed
 * by the generic path, one strided scal2v call per column, and the 12-wide
 * panels of B by a scalar reference loop that gathers across rows. On the
 * tiny models' products (k = 128, n = 128..512) that packing took 13-15%
 * of a training step. This file keeps BLIS's micro-kernel and packs
 * reading whole vectors, transposing 16 x 16 blocks in registers when the
 * operand is contiguous along k; the driver's loops are gemm_blocked.c's.
 * The results match BLIS's own gemm with this context bit for bit. */
#include "core/gemm_skx.h"

#include "core/gemm_blocked.h"
#include "core/gemm_internal.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"

/* The micro-kernel (exported by the static libblis.a, not in blis.h). BLIS
 * 0.9 kernels take the tile's m and n and handle partial tiles themselves. */
void bli_sgemm_skx_asm_32x12_l2(dim_t m, dim_t n, dim_t k, float *alpha, float *a, float *b,
                                float *beta, float *c, inc_t rs_c, inc_t cs_c, auxinfo_t *data,
                                cntx_t *cntx);

enum { MR = CG_SKX_MR, NR = 12 };
enum { SLACK = CG_SGEMM_SLACK };

#define AVX512 CG_AVX512

/* ------------------------------------------------------------ packing */

/* Pack a panel of w <= W vectors of length k into p[l * W + i] =
 * src[i * vs + l * ls], zero for i >= w. W is MR (A) or NR (B). */
AVX512 static void pack_panel(int W, int64_t w, int64_t k, const float *src, int64_t vs, int64_t ls,
                              float *p)
{
    if (vs == 1) { /* each l: w contiguous floats */
        for (int64_t l = 0; l < k; l++) {
            const float *s = src + l * ls;
            float *d = p + l * W;
            for (int h = 0; h < W; h += 16) {
                int64_t n = w - h < 16 ? (w - h > 0 ? w - h : 0) : 16;
                __mmask16 ld = (__mmask16)((1u << n) - 1u);
                __mmask16 st = (__mmask16)((1u << (W - h < 16 ? W - h : 16)) - 1u);
                _mm512_mask_storeu_ps(d + h, st, _mm512_maskz_loadu_ps(ld, s + h));
            }
        }
        return;
    }
    if (ls == 1) { /* each vector contiguous along l: transpose 16 x 16 blocks */
        int64_t l0 = 0;
        for (; l0 + 16 <= k; l0 += 16)
            for (int h = 0; h < W; h += 16) {
                __m512 r[16];
                for (int i = 0; i < 16; i++)
                    r[i] =
                        h + i < w ? _mm512_loadu_ps(src + (h + i) * vs + l0) : _mm512_setzero_ps();
                cg_transpose16(r);
                __mmask16 st = (__mmask16)((1u << (W - h < 16 ? W - h : 16)) - 1u);
                for (int j = 0; j < 16; j++)
                    _mm512_mask_storeu_ps(p + (l0 + j) * W + h, st, r[j]);
            }
        for (; l0 < k; l0++)
            for (int i = 0; i < W; i++)
                p[l0 * W + i] = i < w ? src[i * vs + l0] : 0.0f;
        return;
    }
    for (int64_t l = 0; l < k; l++)
        for (int i = 0; i < W; i++)
            p[l * W + i] = i < w ? src[i * vs + l * ls] : 0.0f;
}

size_t cg_skx_pack_floats(int64_t n, int64_t k)
{
    return (size_t)((n + MR - 1) / MR * MR * k + SLACK);
}

void cg_skx_pack_rows(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw, float *p)
{
    cg_sgemm_pack_a(&cg_sgemm_skx, n, k, w, rsw, csw, p);
    memset(p + (n + MR - 1) / MR * MR * k, 0, sizeof(float) * SLACK);
}

CG_SGEMM_PANEL_PACKING(pack_panel, MR, NR)

/* ------------------------------------------------------------ bias */

/* C's mr x nr tile (mr <= MR) set to the bias: bias[i * bsr + j * bsc] at
 * (i, j), one of bsr and bsc 0. Columns of contiguous floats (rsc 1, what
 * cg_gemm_to_column_c leaves) in whole vectors. */
AVX512 static void fill_tile(int64_t mr, int64_t nr, const float *bias, int64_t bsr, int64_t bsc,
                             float *c, int64_t rsc, int64_t csc)
{
    if (rsc == 1 && (bsr == 0 || bsr == 1)) {
        const __mmask16 lo = (__mmask16)((1u << (mr < 16 ? mr : 16)) - 1u);
        const __mmask16 hi = (__mmask16)((1u << (mr > 16 ? mr - 16 : 0)) - 1u);
        for (int64_t j = 0; j < nr; j++) {
            const float *bj = bias + j * bsc;
            float *cj = c + j * csc;
            const __m512 v0 = bsr ? _mm512_maskz_loadu_ps(lo, bj) : _mm512_set1_ps(*bj);
            const __m512 v1 = bsr ? _mm512_maskz_loadu_ps(hi, bj + 16) : v0;
            _mm512_mask_storeu_ps(cj, lo, v0);
            _mm512_mask_storeu_ps(cj + 16, hi, v1);
        }
        return;
    }
    for (int64_t j = 0; j < nr; j++)
        for (int64_t i = 0; i < mr; i++)
            c[i * rsc + j * csc] = bias[i * bsr + j * bsc];
}

/* ------------------------------------------------------------ driver */

const cg_sgemm_kernel cg_sgemm_skx = {
    .mr = MR,
    .nr = NR,
    .row_c = false,
    .kernel = bli_sgemm_skx_asm_32x12_l2,
    .pack_a_panel = pack_a_panel,
    .pack_b_panel = pack_b_panel,
    .fill_tile = fill_tile,
};

bool cg_skx_gemm(cntx_t *cntx, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta,
                 const float *bias, int64_t bs, float *c, int64_t rsc, int64_t csc,
                 const float *pre)
{
    return cg_sgemm_blocked(&cg_sgemm_skx, cntx, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta,
                            bias, bs, c, rsc, csc, pre);
}
