/* Our blocked GEMM around BLIS's AVX-512 (skx) micro-kernel.
 *
 * BLIS 0.9's skx context multiplies 32 x 12 tiles, but the packing kernels
 * a context can register stop at 31 rows: every 32-row panel of A is packed
 * by the generic path, one strided scal2v call per column, and the 12-wide
 * panels of B by a scalar reference loop that gathers across rows. On the
 * tiny models' products (k = 128, n = 128..512) that packing took 13-15%
 * of a training step. This file keeps BLIS's micro-kernel and its block
 * sizes (MC, KC, NC from the context) and does the rest itself: the three
 * cache-blocking loops of the Goto algorithm and packing that reads whole
 * vectors, transposing 16 x 16 blocks in registers when the operand is
 * contiguous along k.
 *
 * Every element of C is one micro-kernel sum over each KC block of k, in
 * order, the same as BLIS's own gemm with this context: results match it
 * bit for bit and do not depend on how the caller splits C among threads. */
#include "core/gemm_skx.h"

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
/* SLACK floats past each packed buffer's last panel: room for a kernel
 * that loads one k step ahead (its reads land in the next panel elsewhere) */
enum { SLACK = 4 * MR };

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

/* A block [mc x kc] into MR-row panels, each kc x MR. */
static void pack_a(int64_t mc, int64_t kc, const float *a, int64_t rs, int64_t cs, float *p)
{
    for (int64_t i = 0; i < mc; i += MR)
        pack_panel(MR, mc - i < MR ? mc - i : MR, kc, a + i * rs, rs, cs, p + i * kc);
}

/* B block [kc x nc] into NR-column panels, each kc x NR. */
static void pack_b(int64_t kc, int64_t nc, const float *b, int64_t rs, int64_t cs, float *p)
{
    for (int64_t j = 0; j < nc; j += NR)
        pack_panel(NR, nc - j < NR ? nc - j : NR, kc, b + j * cs, cs, rs, p + j * kc);
}

size_t cg_skx_pack_floats(int64_t n, int64_t k)
{
    return (size_t)((n + MR - 1) / MR * MR * k + SLACK);
}

void cg_skx_pack_rows(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw, float *p)
{
    pack_a(n, k, w, rsw, csw, p);
    memset(p + (n + MR - 1) / MR * MR * k, 0, sizeof(float) * SLACK);
}

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

/* ------------------------------------------------------------ direct */

/* Small products without packing B. Attention's tiles (32 to 96 query
 * rows, keys and head widths) packed both operands for a few hundred
 * thousand multiply-adds each. Here B is read where it is, one broadcast
 * per element as the micro-kernel reads its packed panel, and A where its
 * columns are contiguous (rsa 1); else A's k block is packed as the packed
 * path packs it. Each element of C is summed as the micro-kernel sums it:
 * over each KC block of k in order, one fused multiply-add from zero, times
 * alpha, then stored (the first block, beta 0) or added to C (the bias set
 * first, beta 1, or a later block: C + 1 ab is one rounding whether or not
 * the kernel fuses it). So the bits are the packed path's (test_matmul
 * test_direct_product_bits). */

/* C's mr x nr tile (mr <= MR, nr <= NR, C column-stored: rsc 1) = alpha
 * A B over k, A's columns lda apart (rows contiguous), B's elements at
 * b[l * rsb + j * csb]; added to C when add. */
AVX512 static void direct_tile(int64_t mr, int64_t nr, int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t rsb, int64_t csb, bool add,
                               float *c, int64_t csc)
{
    const __mmask16 lo = (__mmask16)((1u << (mr < 16 ? mr : 16)) - 1u);
    const __mmask16 hi = (__mmask16)((1u << (mr > 16 ? mr - 16 : 0)) - 1u);
    int64_t off[NR]; /* columns past nr read column 0, never stored */
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++)
        off[j] = (j < nr ? j : 0) * csb;
    __m512 c0[NR], c1[NR];
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++)
        c0[j] = c1[j] = _mm512_setzero_ps();
    const float *al = a, *bl = b;
    for (int64_t l = 0; l < k; l++, al += lda, bl += rsb) {
        const __m512 a0 = _mm512_maskz_loadu_ps(lo, al);
        const __m512 a1 = _mm512_maskz_loadu_ps(hi, al + 16);
#pragma GCC unroll 12
        for (int j = 0; j < NR; j++) {
            const __m512 bb = _mm512_set1_ps(bl[off[j]]);
            c0[j] = _mm512_fmadd_ps(a0, bb, c0[j]);
            c1[j] = _mm512_fmadd_ps(a1, bb, c1[j]);
        }
    }
    const __m512 alv = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++) {
        if (j >= nr)
            break;
        float *cj = c + j * csc;
        __m512 t0 = _mm512_mul_ps(c0[j], alv), t1 = _mm512_mul_ps(c1[j], alv);
        if (add) {
            t0 = _mm512_add_ps(_mm512_maskz_loadu_ps(lo, cj), t0);
            t1 = _mm512_add_ps(_mm512_maskz_loadu_ps(hi, cj + 16), t1);
        }
        _mm512_mask_storeu_ps(cj, lo, t0);
        _mm512_mask_storeu_ps(cj + 16, hi, t1);
    }
}

/* Small enough for the direct path: A's k block (at most 16 KB), read once
 * for each NR columns of B, stays in L1 (48 KB on Ice Lake-SP, 32 KB on
 * Zen 4) beside B's panel of NR columns. The base presets' attention
 * tiles are below it (at most 96 x 32 or 32 x 96). Past it the packed
 * path's contiguous panels were faster or the same: on Ice Lake-SP, one
 * thread, a 64 x 64 x 192 product took 1.24x as long directly, 128 x 128 x
 * 128 1.22x, 128 x 64 x 64 1.00x, where 64 x 64 x 64 took 0.93x and
 * attention's 0.86x to 0.92x. */
static bool direct_small(int64_t m, int64_t k, int64_t KC) { return m * (k < KC ? k : KC) <= 4096; }

/* cg_skx_gemm's product when it is small (direct_small), C column-
 * stored (rsc 1), beta 0 or 1. */
static bool direct_gemm(cntx_t *cntx, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb,
                        float beta, const float *bias, int64_t bsr, int64_t bsc, float *c,
                        int64_t csc)
{
    const int64_t KC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx);
    const int64_t KCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, cntx);
    const bool packs = rsa != 1; /* A's panels packed, a k block at a time */
    float *pa = NULL;
    if (packs &&
        !(pa = cg_gemm_thread_buffer(
              (size_t)((m + MR - 1) / MR * MR * (k < KCX ? k : KCX) + SLACK) * sizeof(float))))
        return false;
    int64_t kc;
    for (int64_t pc = 0; pc < k; pc += kc) {
        kc = cg_gemm_block_at(k, pc, KC, KCX);
        const bool add = pc > 0 || bias || beta != 0.0f;
        if (packs)
            pack_a(m, kc, a + pc * csa, rsa, csa, pa);
        /* B's columns [j, j + NR) read from L1 by every panel of A */
        for (int64_t j = 0; j < n; j += NR) {
            const int64_t nr = n - j < NR ? n - j : NR;
            for (int64_t i = 0; i < m; i += MR) {
                const int64_t mr = m - i < MR ? m - i : MR;
                float *ct = c + i + j * csc;
                if (bias && pc == 0)
                    fill_tile(mr, nr, bias + i * bsr + j * bsc, bsr, bsc, ct, 1, csc);
                direct_tile(mr, nr, kc, alpha, packs ? pa + i * kc : a + i + pc * csa,
                            packs ? MR : csa, b + pc * rsb + j * csb, rsb, csb, add, ct, csc);
            }
        }
    }
    return true;
}

/* ------------------------------------------------------------ driver */

bool cg_skx_gemm(cntx_t *cntx, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta,
                 const float *bias, int64_t bs, float *c, int64_t rsc, int64_t csc,
                 const float *pre)
{
    /* The kernel writes column-stored tiles directly and others through a
     * temporary: for row-stored C compute C^T = B^T A^T instead, where the
     * bias runs along the rows. */
    const bool turned = csc == 1 && rsc != 1;
    cg_gemm_to_column_c(&m, &n, &a, &rsa, &csa, &b, &rsb, &csb, &rsc, &csc);
    const int64_t bsr = turned ? bs : 0, bsc = turned ? 0 : bs;
    const int64_t MC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cntx);
    const int64_t KC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx);
    const int64_t NC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NC, cntx);
    const int64_t MCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_MC, cntx);
    const int64_t KCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, cntx);
    const int64_t NCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_NC, cntx);
    /* small: B read where it is */
    if (!pre && rsc == 1 && (beta == 0.0f || beta == 1.0f || bias) && direct_small(m, k, KC))
        return direct_gemm(cntx, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bias ? 0.0f : beta, bias,
                           bsr, bsc, c, csc);
    const int64_t kcmax = k < KCX ? k : KCX;
    const int64_t mcmax = (m < MCX ? m : MCX) + MR - 1, ncmax = (n < NCX ? n : NCX) + NR - 1;
    const size_t na = pre ? 0 : (size_t)(mcmax / MR * MR * kcmax + SLACK);
    const size_t nb = (size_t)(ncmax / NR * NR * kcmax + SLACK);
    float *pa = cg_gemm_thread_buffer((na + nb) * sizeof(float));
    if (!pa)
        return false;
    float *pb = pa + na; /* na is 0 or a multiple of 16 floats: 64-byte aligned */
    auxinfo_t aux;
    memset(&aux, 0, sizeof aux);
    int64_t nc, kc, mc;
    for (int64_t jc = 0; jc < n; jc += nc) {
        nc = cg_gemm_block_at(n, jc, NC, NCX);
        for (int64_t pc = 0; pc < k; pc += kc) {
            kc = cg_gemm_block_at(k, pc, KC, KCX);
            float be = pc == 0 && !bias ? beta : 1.0f; /* later k blocks accumulate */
            pack_b(kc, nc, b + pc * rsb + jc * csb, rsb, csb, pb);
            for (int64_t ic = 0; ic < m; ic += mc) {
                mc = cg_gemm_block_at(m, ic, MC, MCX);
                /* the block's panels, packed now or at pre (panel stride
                 * k MR there, this k block from pc MR on) */
                const int64_t as = pre ? k : kc;
                float *pab = pre ? (float *)pre + ic * k + pc * MR : pa;
                if (!pre)
                    pack_a(mc, kc, a + ic * rsa + pc * csa, rsa, csa, pa);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    const int64_t nr = nc - jr < NR ? nc - jr : NR;
                    float *bp = pb + jr * kc;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int64_t mr = mc - ir < MR ? mc - ir : MR;
                        float *ap = pab + ir * as;
                        /* prefetch hints: the next tile's panels */
                        bool last_i = ir + MR >= mc;
                        aux.a_next = last_i ? pab : ap + MR * as;
                        aux.b_next = last_i && jr + NR < nc ? bp + NR * kc : bp;
                        float *ct = c + (ic + ir) * rsc + (jc + jr) * csc;
                        if (bias && pc == 0) /* in L1 when the kernel reads it */
                            fill_tile(mr, nr, bias + (ic + ir) * bsr + (jc + jr) * bsc, bsr, bsc,
                                      ct, rsc, csc);
                        bli_sgemm_skx_asm_32x12_l2(mr, nr, kc, &alpha, ap, bp, &be, ct, rsc, csc,
                                                   &aux, cntx);
                    }
                }
            }
        }
    }
    return true;
}
