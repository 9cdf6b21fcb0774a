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
 * cntx: an initialised skx context. Returns false when out of memory (C
 * untouched). */
bool cg_skx_gemm(cntx_t *cntx, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta,
                 const float *bias, int64_t bs, float *c, int64_t rsc, int64_t csc);

#endif
