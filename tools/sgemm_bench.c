/* GEMM throughput: the chosen fp32 path, BLIS's default path, and bf16
 * products with fp32 accumulation on the path bf16 precision takes (AMX
 * tiles, else AVX512_BF16, else its emulation with AVX2 and FMA; "n/a"
 * without any).
 *
 *   sgemm_bench [N [RUNS]]      (default N=1024, RUNS=5)
 *
 * Times C = A @ B for N x N x N float32 row-major matrices on 1 and 2
 * threads, reports the median of RUNS runs (after one warm-up run) as
 * GFLOP/s in a table, then one JSON line. It also measures the CPU's
 * instruction peak, which no product can pass: independent chains of
 * fp32 FMAs (AVX-512: 32 flops each; else AVX2: 16) and of AVX512_BF16
 * vdpbf16ps (64 flops each) on every thread, so that the products read as a
 * share of it (Zen 4 runs a 512-bit instruction on two 256-bit halves: half
 * Zen 5's peak). */
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/parse.h"
#include "core/tensor.h"
#include "models/train/prog.h"
#include "core/clock.h"

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median GFLOP/s, or -1 if the path is not available. */
static double bench(cg_gemm_path path, int threads, int64_t n, int runs, const float *a,
                    const float *b, float *c)
{
    if (!cg_gemm_path_available(path))
        return -1.0;
    double *t = malloc((size_t)runs * sizeof(double));
    cg_sgemm_path(path, threads, n, n, n, 1.0f, a, n, 1, b, n, 1, 0.0f, c, n, 1); /* warm-up */
    for (int r = 0; r < runs; r++) {
        double t0 = cg_now();
        cg_sgemm_path(path, threads, n, n, n, 1.0f, a, n, 1, b, n, 1, 0.0f, c, n, 1);
        t[r] = cg_now() - t0;
    }
    qsort(t, (size_t)runs, sizeof(double), cmp_double);
    double med = t[runs / 2];
    free(t);
    return 2.0 * (double)n * (double)n * (double)n / med * 1e-9;
}

/* Peak GFLOP/s of `threads` threads each running ITER rounds of CHAINS
 * independent multiply-adds in zmm registers (more than latency x
 * throughput in flight: Zen 5's vdpbf16ps needs more than 12, which read
 * 405 against 454 GFLOP/s there), or CHAINS_YMM in AVX2's 16 ymm
 * registers. */
enum { ITER = 20000000, CHAINS = 24, CHAINS_YMM = 12 };

__attribute__((target("avx512f"))) static double fma_round(void)
{
    __m512 acc[CHAINS], x = _mm512_set1_ps(1e-9f);
    for (int j = 0; j < CHAINS; j++)
        acc[j] = _mm512_setzero_ps();
    for (long i = 0; i < ITER; i++)
#pragma GCC unroll 24
        for (int j = 0; j < CHAINS; j++) {
            acc[j] = _mm512_fmadd_ps(x, x, acc[j]);
            __asm__ volatile("" ::"v"(acc[j])); /* keep every chain */
        }
    float s = 0;
    for (int j = 0; j < CHAINS; j++)
        s += _mm512_reduce_add_ps(acc[j]);
    return s;
}

__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_round(void)
{
    __m512 acc[CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3000); /* bf16 2^-31 */
    for (int j = 0; j < CHAINS; j++)
        acc[j] = _mm512_setzero_ps();
    for (long i = 0; i < ITER; i++)
#pragma GCC unroll 24
        for (int j = 0; j < CHAINS; j++) {
            acc[j] = _mm512_dpbf16_ps(acc[j], x, x);
            __asm__ volatile("" ::"v"(acc[j]));
        }
    float s = 0;
    for (int j = 0; j < CHAINS; j++)
        s += _mm512_reduce_add_ps(acc[j]);
    return s;
}

__attribute__((target("avx2,fma"))) static double fma256_round(void)
{
    __m256 acc[CHAINS_YMM], x = _mm256_set1_ps(1e-9f);
    for (int j = 0; j < CHAINS_YMM; j++)
        acc[j] = _mm256_setzero_ps();
    for (long i = 0; i < ITER; i++)
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS_YMM; j++) {
            acc[j] = _mm256_fmadd_ps(x, x, acc[j]);
            __asm__ volatile("" ::"v"(acc[j]));
        }
    float s = 0, lanes[8];
    for (int j = 0; j < CHAINS_YMM; j++) {
        _mm256_storeu_ps(lanes, acc[j]);
        for (int q = 0; q < 8; q++)
            s += lanes[q];
    }
    return s;
}

/* The widest fp32 FMA the CPU has. */
static bool has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

/* bf16: vdpbf16ps, else fp32 FMA (AVX-512, or AVX2); -1 when the CPU lacks
 * the instruction. */
static double peak(bool bf16, int threads)
{
    __builtin_cpu_init();
    const bool zmm = has_avx512();
    if (bf16 ? !(zmm && __builtin_cpu_supports("avx512bf16"))
             : !(zmm || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))))
        return -1.0;
    volatile double sink = 0;
    double t0 = cg_now();
#pragma omp parallel num_threads(threads)
    {
        double s = bf16 ? dpbf16_round() : zmm ? fma_round() : fma256_round();
#pragma omp atomic
        sink += s;
    }
    const double t = cg_now() - t0;
    return (double)threads * ITER * (double)(zmm ? CHAINS : CHAINS_YMM) *
           (bf16  ? 64.0
            : zmm ? 32.0
                  : 16.0) /
           t * 1e-9;
}

static void fmt(char *buf, size_t n, double g) { snprintf(buf, n, g < 0 ? "null" : "%.1f", g); }

static const char HELP[] =
    "usage: sgemm_bench [N [RUNS]]   (default N 1024, RUNS 5; N in [1, 16384], RUNS in\n"
    "[1, 1000])\n"
    "GFLOP/s of C = A @ B, N x N x N float32, on 1 and 2 threads: the chosen path,\n"
    "BLIS's default and bf16, and the CPU's instruction peak; a table, then one JSON\n"
    "line. Exit status: 0 done, 1 failed, 2 bad command line.\n";

/* N and RUNS (models/train/prog.h's parse and messages, as the zoo's
 * programs): -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, int64_t *n, int64_t *runs)
{
    int np;
    cg_prog_set_name("sgemm_bench");
    cg_cli_streams();      /* fds 0-2, SIGPIPE and SIGXFSZ as every program (OpenMP left as set) */
    if (!cg_env_check()) { /* a malformed CG_ variable, as a malformed flag */
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    int rc = cg_prog_parse_pos(argc - 1, argv + 1, NULL, 0, HELP, &np);
    if (rc >= 0)
        return rc;
    if (np > 2) {
        cg_prog_fail("unexpected argument '%s' (try --help)", argv[1 + 2]);
        return CG_EXIT_USAGE;
    }
    if ((np > 0 && !cg_parse_i64("N", argv[1], 1, 16384, n)) ||
        (np > 1 && !cg_parse_i64("RUNS", argv[2], 1, 1000, runs))) {
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    return -1;
}

int main(int argc, char **argv)
{
    int64_t n = 1024, nruns = 5;
    int rc = parse_args(argc, argv, &n, &nruns);
    if (rc >= 0)
        return rc;
    const int runs = (int)nruns;
    size_t nn = (size_t)(n * n);
    float *a = cg_alloc(nn * sizeof(float)), *b = cg_alloc(nn * sizeof(float)),
          *c = cg_alloc(nn * sizeof(float));
    if (!a || !b || !c) {
        return cg_prog_fail("out of memory");
    }
    cg_rng rng = cg_rng_new(1);
    for (size_t i = 0; i < nn; i++) {
        a[i] = cg_rng_uniform(&rng) - 0.5f;
        b[i] = cg_rng_uniform(&rng) - 0.5f;
    }

    cg_gemm_path chosen = cg_gemm_active_path();
    const cg_gemm_path bf16 = cg_bf16_auto_path();
    double g[3][2]; /* [chosen, default, bf16][1 thread, 2 threads] */
    for (int th = 1; th <= 2; th++) {
        g[0][th - 1] = bench(chosen, th, n, runs, a, b, c);
        g[1][th - 1] = bench(CG_GEMM_DEFAULT, th, n, runs, a, b, c);
        g[2][th - 1] = bench(bf16, th, n, runs, a, b, c);
    }

    double pk[2][2]; /* [fp32 FMA, vdpbf16ps][1 thread, 2 threads] */
    for (int th = 1; th <= 2; th++) {
        pk[0][th - 1] = peak(false, th);
        pk[1][th - 1] = peak(true, th);
    }

    printf("gemm %lldx%lldx%lld, median of %d runs, GFLOP/s\n", (long long)n, (long long)n,
           (long long)n, runs);
    printf("%-22s %10s %10s\n", "path", "1 thread", "2 threads");
    char label[64];
    snprintf(label, sizeof label, "chosen (%s)", cg_gemm_path_name(chosen));
    printf("%-22s %10.1f %10.1f\n", label, g[0][0], g[0][1]);
    printf("%-22s %10.1f %10.1f\n", "default (BLIS's own)", g[1][0], g[1][1]);
    snprintf(label, sizeof label, "bf16 (%s)", cg_gemm_path_name(bf16));
    if (g[2][0] < 0)
        printf("%-22s %10s %10s\n", "bf16 (no path)", "n/a", "n/a");
    else
        printf("%-22s %10.1f %10.1f\n", label, g[2][0], g[2][1]);
    const char *pname[2] = {has_avx512() ? "peak: fp32 FMA zmm" : "peak: fp32 FMA ymm",
                            "peak: vdpbf16ps zmm"};
    for (int i = 0; i < 2; i++)
        if (pk[i][0] < 0)
            printf("%-22s %10s %10s\n", pname[i], "n/a", "n/a");
        else
            printf("%-22s %10.1f %10.1f\n", pname[i], pk[i][0], pk[i][1]);
    char b1[32], b2[32], p[4][32];
    fmt(b1, sizeof b1, g[2][0]);
    fmt(b2, sizeof b2, g[2][1]);
    for (int i = 0; i < 4; i++)
        fmt(p[i], sizeof p[i], pk[i / 2][i % 2]);
    printf("{\"bench\": \"sgemm\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"runs\": %d, "
           "\"path\": \"%s\", \"gflops_1t\": %.1f, \"gflops_2t\": %.1f, "
           "\"default_gflops_1t\": %.1f, \"default_gflops_2t\": %.1f, "
           "\"bf16_path\": \"%s\", \"bf16_gflops_1t\": %s, \"bf16_gflops_2t\": %s, "
           "\"peak_fp32_gflops_1t\": %s, "
           "\"peak_fp32_gflops_2t\": %s, \"peak_bf16_gflops_1t\": %s, "
           "\"peak_bf16_gflops_2t\": %s}\n",
           (long long)n, (long long)n, (long long)n, runs, cg_gemm_path_name(chosen), g[0][0],
           g[0][1], g[1][0], g[1][1], cg_gemm_path_name(bf16), b1, b2, p[0], p[1], p[2], p[3]);
    cg_free(a);
    cg_free(b);
    cg_free(c);
    return cg_cli_stdout_ok() ? 0 : cg_prog_fail_lib(NULL); /* the result reached stdout */
}
