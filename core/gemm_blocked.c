/* Our blocked fp32 GEMM around one of BLIS's micro-kernels (the kernel and
 * its packing: core/gemm_skx.c, core/gemm_haswell.c).
 *
 * BLIS's own driver allocates its control tree and packing blocks with
 * BLIS's allocator, which aborts the process when malloc fails, and on the
 * skx kernel it packed through slow generic paths (gemm_skx.c). This
 * driver keeps BLIS's micro-kernel and block sizes (MC, KC, NC from the
 * context) and does the rest itself: the three cache-blocking loops of the
 * Goto algorithm (jc over NC columns, pc over KC steps of k, ic over MC
 * rows) and the two register-blocking loops (jr, ir) over micro-tiles, with
 * packing buffers of its own (cg_gemm_thread_buffer: NULL, and false here,
 * when out of memory).
 *
 * Bits: every element of C is one micro-kernel sum over each KC block of
 * k, in order, added to C with beta (the first block) or 1 (the others),
 * as in BLIS's driver. Tiles start every MR rows and NR columns from the
 * corner of the C a call is given (MC and NC are multiples of MR and NR),
 * and C is turned over (C^T = B^T A^T) when BLIS's driver turns it, so
 * that each tile is full or partial, stored in place or through the
 * kernel's temporary, as there: the same bits (tests/test_matmul.c). */
#include "core/gemm_blocked.h"

#include "core/gemm_internal.h"

#include <string.h>

void cg_sgemm_pack_a(const cg_sgemm_kernel *u, int64_t mc, int64_t kc, const float *a, int64_t rs,
                     int64_t cs, float *p)
{
    for (int64_t i = 0; i < mc; i += u->mr)
        u->pack_a_panel(mc - i < u->mr ? mc - i : u->mr, kc, a + i * rs, rs, cs, p + i * kc);
}

/* A [kc x nc] block of B (b[l * rs + j * cs]) into u's nr-column panels,
 * each kc x nr */
static void pack_b(const cg_sgemm_kernel *u, int64_t kc, int64_t nc, const float *b, int64_t rs,
                   int64_t cs, float *p)
{
    for (int64_t j = 0; j < nc; j += u->nr)
        u->pack_b_panel(nc - j < u->nr ? nc - j : u->nr, kc, b + j * cs, cs, rs, p + j * kc);
}

bool cg_sgemm_blocked(const cg_sgemm_kernel *u, cntx_t *cntx, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t rsa, int64_t csa, const float *b,
                      int64_t rsb, int64_t csb, float beta, const float *bias, int64_t bs, float *c,
                      int64_t rsc, int64_t csc, const float *pre)
{
    const int64_t MR = u->mr, NR = u->nr;
    /* The kernel writes tiles stored its way directly and others through a
     * temporary: a C stored the other way is turned over (C^T = B^T A^T),
     * the bias then running along the rows. */
    const bool turned = u->row_c ? rsc == 1 && csc != 1 : csc == 1 && rsc != 1;
    if (turned)
        cg_gemm_turn_over(&m, &n, &a, &rsa, &csa, &b, &rsb, &csb, &rsc, &csc);
    const int64_t bsr = turned ? bs : 0, bsc = turned ? 0 : bs;
    const int64_t MC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cntx);
    const int64_t KC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx);
    const int64_t NC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NC, cntx);
    const int64_t MCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_MC, cntx);
    const int64_t KCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, cntx);
    const int64_t NCX = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_NC, cntx);
    const int64_t kcmax = k < KCX ? k : KCX;
    const int64_t mcmax = (m < MCX ? m : MCX) + MR - 1, ncmax = (n < NCX ? n : NCX) + NR - 1;
    /* A's panels, then B's from a multiple of 16 floats: 64-byte aligned,
     * as kernels that load B's panels with aligned loads need */
    const size_t na = pre ? 0 : (size_t)((mcmax / MR * MR * kcmax + CG_SGEMM_SLACK + 15) / 16 * 16);
    const size_t nb = (size_t)(ncmax / NR * NR * kcmax + CG_SGEMM_SLACK);
    float *pa = cg_gemm_thread_buffer((na + nb) * sizeof(float));
    if (!pa)
        return false;
    float *pb = pa + na;
    auxinfo_t aux;
    memset(&aux, 0, sizeof aux);
    int64_t nc, kc, mc;
    for (int64_t jc = 0; jc < n; jc += nc) {
        nc = cg_gemm_block_at(n, jc, NC, NCX);
        for (int64_t pc = 0; pc < k; pc += kc) {
            kc = cg_gemm_block_at(k, pc, KC, KCX);
            float be = pc == 0 && !bias ? beta : 1.0f; /* later k blocks accumulate */
            pack_b(u, kc, nc, b + pc * rsb + jc * csb, rsb, csb, pb);
            for (int64_t ic = 0; ic < m; ic += mc) {
                mc = cg_gemm_block_at(m, ic, MC, MCX);
                /* the block's panels, packed now or at pre (panel stride
                 * k MR there, this k block from pc MR on) */
                const int64_t as = pre ? k : kc;
                float *pab = pre ? (float *)pre + ic * k + pc * MR : pa;
                if (!pre)
                    cg_sgemm_pack_a(u, mc, kc, a + ic * rsa + pc * csa, rsa, csa, pa);
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
                            u->fill_tile(mr, nr, bias + (ic + ir) * bsr + (jc + jr) * bsc, bsr, bsc,
                                         ct, rsc, csc);
                        u->kernel(mr, nr, kc, &alpha, ap, bp, &be, ct, rsc, csc, &aux, cntx);
                    }
                }
            }
        }
    }
    return true;
}
