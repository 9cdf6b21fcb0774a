/* Internal: our blocked fp32 GEMM driver (core/gemm_blocked.c) around one
 * of BLIS's micro-kernels, with its packing (core/gemm_skx.c for AVX-512's
 * 32 x 12 kernel, core/gemm_haswell.c for AVX2's 6 x 16). Only for
 * core/gemm.c (and gemm_skx.c), which check sizes, strides and the CPU
 * first. */
#ifndef CG_GEMM_BLOCKED_H
#define CG_GEMM_BLOCKED_H

#include <stdbool.h>
#include <stdint.h>

#include <blis.h>

/* A BLIS 0.9 float micro-kernel: the tile's m <= MR and n <= NR (it
 * handles partial tiles itself, through a temporary), kc steps of packed
 * panels a and b, C = alpha a b + beta C (beta 0: C not read). */
typedef void cg_sgemm_ukr(dim_t m, dim_t n, dim_t k, float *alpha, float *a, float *b, float *beta,
                          float *c, inc_t rs_c, inc_t cs_c, auxinfo_t *data, cntx_t *cntx);

typedef void cg_sgemm_pack_fn(int64_t w, int64_t k, const float *src, int64_t vs, int64_t ls,
                              float *p);

/* A kernel's two packing functions, pack_a_panel and pack_b_panel, from
 * its file's pack_panel(W, w, k, src, vs, ls, p) for W = MR and NR: each a
 * copy of it for its own width (the compiler's, from the constant). */
#define CG_SGEMM_PANEL_PACKING(pack_panel, MR, NR)                                           \
    static void pack_a_panel(int64_t w, int64_t k, const float *src, int64_t vs, int64_t ls, \
                             float *p)                                                       \
    {                                                                                        \
        pack_panel(MR, w, k, src, vs, ls, p);                                                \
    }                                                                                        \
    static void pack_b_panel(int64_t w, int64_t k, const float *src, int64_t vs, int64_t ls, \
                             float *p)                                                       \
    {                                                                                        \
        pack_panel(NR, w, k, src, vs, ls, p);                                                \
    }

/* A kernel with its packing: pack_a_panel packs a panel of w <= mr rows
 * of A of length k into p[l * mr + i] = src[i * vs + l * ls], zero for i
 * >= w; pack_b_panel the same with nr columns of B. Either may write up to
 * CG_SGEMM_SLACK floats past the panel (cg_sgemm_pack_a and the driver lay
 * the panels one after another). fill_tile sets C's mr x nr tile at c to the bias:
 * bias[i * bsr + j * bsc] at (i, j), one of bsr and bsc 0. row_c: the
 * kernel writes row-stored tiles of C directly (a column-stored C is
 * turned over), else column-stored ones (a row-stored C is turned). */
typedef struct {
    int mr, nr;
    bool row_c;
    cg_sgemm_ukr *kernel;
    cg_sgemm_pack_fn *pack_a_panel, *pack_b_panel;
    void (*fill_tile)(int64_t mr, int64_t nr, const float *bias, int64_t bsr, int64_t bsc, float *c,
                      int64_t rsc, int64_t csc);
} cg_sgemm_kernel;

/* Floats past each packed buffer's last panel: room for a kernel that
 * loads one k step ahead (its reads land in the next panel elsewhere) and
 * for packing that stores whole vectors. A multiple of 16. */
enum { CG_SGEMM_SLACK = 128 };

/* AVX-512's kernel (core/gemm_skx.c) and AVX2's (core/gemm_haswell.c) */
extern const cg_sgemm_kernel cg_sgemm_skx;
extern const cg_sgemm_kernel cg_sgemm_haswell;

/* An [mc x kc] block of A (a[i * rs + l * cs]) into u's mr-row panels,
 * each kc x mr, one after another (mc rounded up to mr rows, the rest
 * zero). */
void cg_sgemm_pack_a(const cg_sgemm_kernel *u, int64_t mc, int64_t kc, const float *a, int64_t rs,
                     int64_t cs, float *p);

/* C[m,n] = alpha A[m,k] B[k,n] + beta C (beta == 0: C not read), one
 * thread, on kernel u with the block sizes MC, KC, NC of cntx (the last
 * block of each stretched to its maximum, as BLIS does). m, n, k >= 1; A
 * and B with any strides; C with strides the micro-kernel can address
 * (BLIS's check). With a bias (beta then 0), C = alpha A B + bias[j * bs]:
 * the bits of C set to the bias and then C = alpha A B + 1 C, each tile
 * set just before its first k block. pre (or NULL; skx only): the operand
 * A is once C is column-stored already packed by cg_skx_pack_rows, that
 * operand then unread. Every element of C is one micro-kernel sum over
 * each KC block of k, in order, as in BLIS's own driver with the same
 * context: the same bits, whatever rows or columns of C a call is given.
 * False when out of memory (C untouched). */
bool cg_sgemm_blocked(const cg_sgemm_kernel *u, cntx_t *cntx, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t rsa, int64_t csa, const float *b,
                      int64_t rsb, int64_t csb, float beta, const float *bias, int64_t bs, float *c,
                      int64_t rsc, int64_t csc, const float *pre);

#endif
