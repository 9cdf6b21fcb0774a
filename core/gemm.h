/* cgrad core: single-precision GEMM through BLIS.
 *
 * Debian's BLIS does not recognise some CPUs (e.g. AMD family 0x1A with
 * AVX-512) and falls back to slow generic kernels. At first use we pick a
 * BLIS context from cpuid: AVX-512F -> skx, AVX2+FMA -> haswell, otherwise
 * BLIS's own choice. CG_BLIS_DEFAULT=1 in the environment forces BLIS's
 * own choice. See DESIGN.md section 6. */
#ifndef CG_GEMM_H
#define CG_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CG_GEMM_AUTO = 0,    /* cpuid choice (or default when forced by env) */
    CG_GEMM_DEFAULT,     /* BLIS's own choice */
    CG_GEMM_SKX,         /* AVX-512 context */
    CG_GEMM_HASWELL,     /* AVX2 + FMA context */
} cg_gemm_path;

/* C[m,n] = alpha * A[m,k] @ B[k,n] + beta * C, each operand given by a
 * pointer and row/column strides in elements (any sign-free strides BLIS
 * accepts; a transposed operand is just swapped strides). beta == 0 means C
 * is not read (may hold garbage/NaN). Uses cg_get_num_threads() threads;
 * must not be called from inside an OpenMP parallel region with >1 thread
 * (it then runs single-threaded). */
void cg_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
              int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
              int64_t rsc, int64_t csc);
/* The same on an explicit path (for benchmarks and tests). Returns false if
 * the path is not available on this CPU. */
bool cg_sgemm_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t rsa, int64_t csa, const float *b,
                   int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc, int64_t csc);
/* The path cg_sgemm uses, and a name for it ("skx", "haswell", "default"). */
cg_gemm_path cg_gemm_active_path(void);
const char *cg_gemm_path_name(cg_gemm_path p);
bool cg_gemm_path_available(cg_gemm_path p);

#ifdef __cplusplus
}
#endif
#endif
