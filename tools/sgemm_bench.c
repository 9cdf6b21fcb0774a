/* GEMM throughput: the chosen fp32 path, BLIS's default path, and bf16
 * products with fp32 accumulation (AVX512_BF16; "n/a" without it).
 *
 *   sgemm_bench [N [RUNS]]      (default N=1024, RUNS=5)
 *
 * Times C = A @ B for N x N x N float32 row-major matrices on 1 and 2
 * threads, reports the median of RUNS runs (after one warm-up run) as
 * GFLOP/s in a table, then one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gemm.h"
#include "core/tensor.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median GFLOP/s, or -1 if the path is not available. */
static double bench(cg_gemm_path path, int threads, int64_t n, int runs, const float *a,
                    const float *b, float *c) {
    if (!cg_gemm_path_available(path)) return -1.0;
    double *t = malloc((size_t)runs * sizeof(double));
    cg_sgemm_path(path, threads, n, n, n, 1.0f, a, n, 1, b, n, 1, 0.0f, c, n, 1); /* warm-up */
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        cg_sgemm_path(path, threads, n, n, n, 1.0f, a, n, 1, b, n, 1, 0.0f, c, n, 1);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)runs, sizeof(double), cmp_double);
    double med = t[runs / 2];
    free(t);
    return 2.0 * (double)n * (double)n * (double)n / med * 1e-9;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 1024;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (n <= 0 || runs <= 0 || (argc > 1 && !strcmp(argv[1], "--help"))) {
        fprintf(stderr, "usage: sgemm_bench [N [RUNS]]   (N > 0, RUNS > 0)\n");
        return argc > 1 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    size_t nn = (size_t)(n * n);
    float *a = cg_alloc(nn * sizeof(float)), *b = cg_alloc(nn * sizeof(float)),
          *c = cg_alloc(nn * sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "sgemm_bench: out of memory\n");
        return 1;
    }
    cg_rng rng = cg_rng_new(1);
    for (size_t i = 0; i < nn; i++) {
        a[i] = cg_rng_uniform(&rng) - 0.5f;
        b[i] = cg_rng_uniform(&rng) - 0.5f;
    }

    cg_gemm_path chosen = cg_gemm_active_path();
    double g[3][2]; /* [chosen, default, bf16][1 thread, 2 threads] */
    for (int th = 1; th <= 2; th++) {
        g[0][th - 1] = bench(chosen, th, n, runs, a, b, c);
        g[1][th - 1] = bench(CG_GEMM_DEFAULT, th, n, runs, a, b, c);
        g[2][th - 1] = bench(CG_GEMM_BF16, th, n, runs, a, b, c);
    }

    printf("gemm %lldx%lldx%lld, median of %d runs, GFLOP/s\n", (long long)n,
           (long long)n, (long long)n, runs);
    printf("%-22s %10s %10s\n", "path", "1 thread", "2 threads");
    char label[64];
    snprintf(label, sizeof label, "chosen (%s)", cg_gemm_path_name(chosen));
    printf("%-22s %10.1f %10.1f\n", label, g[0][0], g[0][1]);
    printf("%-22s %10.1f %10.1f\n", "default (BLIS's own)", g[1][0], g[1][1]);
    if (g[2][0] < 0)
        printf("%-22s %10s %10s\n", "bf16 (no AVX512_BF16)", "n/a", "n/a");
    else
        printf("%-22s %10.1f %10.1f\n", "bf16 in, fp32 sums", g[2][0], g[2][1]);
    char b1[32], b2[32];
    snprintf(b1, sizeof b1, g[2][0] < 0 ? "null" : "%.1f", g[2][0]);
    snprintf(b2, sizeof b2, g[2][1] < 0 ? "null" : "%.1f", g[2][1]);
    printf("{\"bench\": \"sgemm\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"runs\": %d, "
           "\"path\": \"%s\", \"gflops_1t\": %.1f, \"gflops_2t\": %.1f, "
           "\"default_gflops_1t\": %.1f, \"default_gflops_2t\": %.1f, "
           "\"bf16_gflops_1t\": %s, \"bf16_gflops_2t\": %s}\n",
           (long long)n, (long long)n, (long long)n, runs, cg_gemm_path_name(chosen), g[0][0],
           g[0][1], g[1][0], g[1][1], b1, b2);
    cg_free(a);
    cg_free(b);
    cg_free(c);
    return 0;
}
