/* Internal: blocked GEMM around BLIS's skx micro-kernel (core/gemm_skx.c).
 * Only for core/gemm.c, which checks sizes, strides and the CPU first. */
#ifndef CG_GEMM_SKX_H
#define CG_GEMM_SKX_H

#include <stdbool.h>
#include <stdint.h>

#include <blis.h>

/* C[m,n] = alpha A[m,k] B[k,n] + beta C (beta == 0: C not read), one
 * thread. m, n, k >= 1; A and B with any strides; C with strides the
 * micro-kernel can address (BLIS's check). With a bias (beta then 0),
 * C = alpha A B + bias[j * bs]: the bits of C set to the bias and then
 * C = alpha A B + 1 C, each tile set just before its first k block.
 * cntx: an initialised skx context. pre (or NULL): the operand A is once
 * C is column-stored (B^T for a row-stored C, the weight W of y = x W^T)
 * already packed by cg_skx_pack_rows, that operand then unread (may be
 * NULL). Returns false when out of memory (C untouched). */
bool cg_skx_gemm(cntx_t *cntx, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta,
                 const float *bias, int64_t bs, float *c, int64_t rsc, int64_t csc,
                 const float *pre);

/* The block sizes core/gemm.c writes for the skx path's driver (skx) or
 * the haswell path's k blocks (!skx) without BLIS's context initialisers,
 * which allocate (core/gemm.c); NULL when this CPU has not the path. For
 * tests/test_matmul.c, which holds them to BLIS's. */
cntx_t *cg_gemm_blocks(bool skx);

/* The rows of the driver's A panels: CG_SKX_MR. cg_skx_pack_rows packs the
 * n rows of W [n, k] (w[i * rsw + l * csw]) as the driver packs A, over all
 * of k at once: panel q (rows CG_SKX_MR q ...) at p + q k CG_SKX_MR floats,
 * p[q k MR + l MR + i] = W[q MR + i, l], zero past row n; the driver reads
 * a k block from l on at the panel's l MR, the floats its own packing
 * would have made. cg_skx_pack_floats: the floats p needs (the panels and
 * the slack a kernel reads one step past a panel's end). */
enum { CG_SKX_MR = 32 };
size_t cg_skx_pack_floats(int64_t n, int64_t k);
void cg_skx_pack_rows(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw, float *p);

#endif
