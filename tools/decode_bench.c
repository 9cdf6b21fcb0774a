/* Decoding's bandwidth bound: how fast this machine reads memory, and how
 * fast the matrix-vector products of one decoded character run on fp32 and
 * on packed bf16 weights (cg_bf16_matrix).
 *
 *   decode_bench [--d N] [--d-ff N] [--layers N] [--vocab N] [--runs N]
 *
 * Defaults are charlm's base preset (d 384, d_ff 1536, 6 layers, vocab 65).
 * One "character" is the products of a decoding step with one row of x:
 * per layer q, k, v, o ([d, d]), fc1 ([d_ff, d]) and fc2 ([d, d_ff]), and
 * the tied head ([vocab, d]), each weight its own buffer as in a model.
 * Prints, for 1 and 2 threads, the median of RUNS runs:
 *   read_gbs_512mb   reading a 512 MB buffer (bytes read / s: memory)
 *   copy_gbs         memcpy of 256 MB (bytes copied / s)
 *   read_gbs_*_set   reading a buffer of the fp32 / bf16 weights' size
 *                    again and again (the bf16 weights of the base preset,
 *                    21 MB, fit this machine's 32 MB L3; fp32's 43 MB not)
 *   fp32 / bf16      the products of one character: characters / s and
 *                    weight bytes read / s,
 * and the bounds: read_gbs_*_set / (weight bytes of one character), one
 * JSON line per thread count. Runs take a few seconds. */
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/parse.h"
#include "core/tensor.h"
#include "models/train/prog.h"
#include "core/clock.h"
#include "models/util/files.h"

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

#define BIG ((size_t)512 << 20)

/* xor of the n 64-bit words of w (n a multiple of 32) in four independent
 * vector accumulators, compiled for AVX-512, AVX2 and the baseline. */
typedef uint64_t v8u64 __attribute__((vector_size(64), aligned(8)));
__attribute__((target_clones("avx512f", "avx2", "default"))) static uint64_t xor_words(
    const uint64_t *w, int64_t n)
{
    v8u64 a = {0}, b = {0}, c = {0}, d = {0};
    const v8u64 *v = (const v8u64 *)w;
    for (int64_t i = 0; i < n / 8; i += 4) {
        a ^= v[i];
        b ^= v[i + 1];
        c ^= v[i + 2];
        d ^= v[i + 3];
    }
    a ^= b ^ c ^ d;
    uint64_t s = 0;
    for (int j = 0; j < 8; j++)
        s ^= a[j];
    return s;
}

/* Bytes read per second by nt threads reading `bytes` of buf, after one
 * warm-up pass: a buffer that fits the caches is read from them, as
 * decoding reads its weights character after character. */
static double read_gbs(const float *buf, size_t bytes, int nt, int runs)
{
    const uint64_t *w = (const uint64_t *)buf;
    const int64_t n = (int64_t)(bytes / sizeof *w) / (32 * nt) * (32 * nt);
    double t[64];
    uint64_t sink = 0;
    for (int r = -1; r < runs; r++) {
        double t0 = cg_now();
        uint64_t s = 0;
#pragma omp parallel num_threads(nt) reduction(^ : s)
        {
            const int64_t part = n / omp_get_num_threads();
            s ^= xor_words(w + part * omp_get_thread_num(), part);
        }
        if (r >= 0)
            t[r] = cg_now() - t0;
        sink ^= s;
    }
    if (sink == 12345)
        puts("");
    return (double)(n * 8) / median(t, runs) / 1e9;
}

/* Bytes copied per second by nt threads copying half of BIG. */
static double copy_gbs(float *buf, int nt, int runs)
{
    const size_t half = BIG / 2, chunk = half / (size_t)nt;
    char *src = (char *)buf, *dst = (char *)buf + half;
    double t[64];
    for (int r = 0; r < runs; r++) {
        double t0 = cg_now();
#pragma omp parallel num_threads(nt)
        {
            size_t o = chunk * (size_t)omp_get_thread_num();
            memcpy(dst + o, src + o, chunk);
        }
        t[r] = cg_now() - t0;
    }
    return (double)(chunk * (size_t)nt) / median(t, runs) / 1e9;
}

typedef struct {
    int64_t n, k;
    float *w;
    cg_bf16_matrix *p;
} weight;

static const char HELP[] =
    "usage: decode_bench [--d N] [--d-ff N] [--layers N] [--vocab N] [--runs N]\n"
    "The products of one decoded character against the memory's speed (defaults: charlm's\n"
    "base preset, d 384, d_ff 1536, 6 layers, vocab 65; 9 runs, at most 64); one JSON\n"
    "line for 1 and for 2 threads. Exit status: 0 done, 1 failed, 2 bad command line.\n";

/* The command line (models/util/cli.h's parser and models/train/prog.h's
 * messages, as the zoo's programs): -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, int64_t *d, int64_t *dff, int64_t *layers,
                      int64_t *vocab, int *runs)
{
    int64_t r = *runs;
    const cg_cli_opt opts[] = {
        {"--d", CG_CLI_I64, d, 1, 1 << 16, NULL, 0},
        {"--d-ff", CG_CLI_I64, dff, 1, 1 << 16, NULL, 0},
        {"--layers", CG_CLI_I64, layers, 1, 1 << 16, NULL, 0},
        {"--vocab", CG_CLI_I64, vocab, 1, 1 << 16, NULL, 0},
        {"--runs", CG_CLI_I64, &r, 1, 64, NULL, 0},
    };
    cg_prog_set_name("decode_bench");
    cg_cli_streams();      /* fds 0-2, SIGPIPE and SIGXFSZ as every program (OpenMP left as set) */
    if (!cg_env_check()) { /* a malformed CG_ variable, as a malformed flag */
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    int rc = cg_prog_parse(argc - 1, argv + 1, opts, (int)(sizeof opts / sizeof opts[0]), HELP);
    *runs = (int)r;
    return rc;
}

/* The nw weights of a decoder of width d (feed-forward dff, vocabulary
 * vocab) in ws (calloc'd: what was made is freed by the caller), each also
 * packed in bf16, and their bytes in each precision: -1 or the exit code. */
static int make_weights(weight *ws, int64_t nw, int64_t d, int64_t dff, int64_t vocab, cg_rng *rng,
                        double *fp32_bytes, double *bf16_bytes)
{
    for (int64_t i = 0; i < nw; i++) {
        int64_t j = i % 6;
        ws[i].n = i == nw - 1 ? vocab : j == 4 ? dff : d;
        ws[i].k = i == nw - 1 ? d : j == 5 ? dff : d;
        ws[i].w = malloc((size_t)(ws[i].n * ws[i].k) * sizeof(float));
        if (!ws[i].w)
            return cg_prog_fail("out of memory");
        for (int64_t e = 0; e < ws[i].n * ws[i].k; e++)
            ws[i].w[e] = 0.02f * cg_rng_normal(rng);
        ws[i].p = cg_bf16_matrix_new(ws[i].n, ws[i].k, ws[i].w, ws[i].k, 1);
        if (!ws[i].p)
            return cg_prog_fail_lib(NULL);
        *fp32_bytes += (double)(ws[i].n * ws[i].k) * 4.0;
        *bf16_bytes += (double)cg_bf16_matrix_bytes(ws[i].p);
    }
    return -1;
}

int main(int argc, char **argv)
{
    int64_t d = 384, dff = 1536, layers = 6, vocab = 65;
    int runs = 9;
    int rc = parse_args(argc, argv, &d, &dff, &layers, &vocab, &runs);
    if (rc >= 0)
        return rc;
    const int64_t nw = 6 * layers + 1;
    weight *ws = calloc((size_t)nw, sizeof *ws);
    float *buf = malloc(BIG), *x = malloc((size_t)(dff > d ? dff : d) * sizeof(float));
    float *y = malloc((size_t)(dff > vocab ? (dff > d ? dff : d) : vocab) * sizeof(float));
    cg_rng rng = cg_rng_new(1);
    double fp32_bytes = 0.0, bf16_bytes = 0.0;
    if (!ws || !buf || !x || !y) {
        rc = cg_prog_fail("out of memory");
    } else {
        memset(buf, 0, BIG);
        for (int64_t i = 0; i < (dff > d ? dff : d); i++)
            x[i] = cg_rng_normal(&rng);
        rc = make_weights(ws, nw, d, dff, vocab, &rng, &fp32_bytes, &bf16_bytes);
    }
    for (int nt = 1; nt <= 2 && rc < 0; nt++) {
        cg_set_num_threads(nt);
        double rb = read_gbs(buf, BIG, nt, runs), cb = copy_gbs(buf, nt, runs);
        /* the bound of each precision: its weight bytes read at the speed
         * a buffer of that size is read at */
        double r32 = read_gbs(buf, (size_t)fp32_bytes, nt, runs);
        double r16 = read_gbs(buf, (size_t)bf16_bytes, nt, runs);
        double t32[64], t16[64];
        for (int pass = 0; pass < 2; pass++)
            for (int r = -1; r < runs; r++) { /* r = -1: warm-up */
                double t0 = cg_now();
                for (int64_t i = 0; i < nw; i++) {
                    if (pass == 0) /* the fp32 product a linear layer runs */
                        cg_sgemm(1, ws[i].n, ws[i].k, 1.0f, x, ws[i].k, 1, ws[i].w, 1, ws[i].k,
                                 0.0f, y, ws[i].n, 1);
                    else
                        cg_bf16_matrix_mul(ws[i].p, CG_GEMM_AUTO, 0, 1, x, ws[i].k, 1, NULL, 0, y,
                                           ws[i].n, 1);
                }
                if (r >= 0)
                    (pass ? t16 : t32)[r] = cg_now() - t0;
            }
        double m32 = median(t32, runs), m16 = median(t16, runs);
        errno = 0;
        printf("{\"threads\": %d, \"read_gbs_512mb\": %.1f, \"copy_gbs\": %.1f, "
               "\"weight_mb_fp32\": %.1f, \"read_gbs_fp32_set\": %.1f, \"weight_mb_bf16\": %.1f, "
               "\"read_gbs_bf16_set\": %.1f, \"fp32_chars_per_s\": %.0f, \"fp32_gbs\": %.1f, "
               "\"bf16_chars_per_s\": %.0f, \"bf16_gbs\": %.1f, \"bf16_native\": %s, "
               "\"bound_fp32_chars_per_s\": %.0f, \"bound_bf16_chars_per_s\": %.0f}\n",
               nt, rb, cb, fp32_bytes / 1e6, r32, bf16_bytes / 1e6, r16, 1.0 / m32,
               fp32_bytes / m32 / 1e9, 1.0 / m16, bf16_bytes / m16 / 1e9,
               cg_bf16_native() ? "true" : "false", r32 * 1e9 / fp32_bytes, r16 * 1e9 / bf16_bytes);
        if (!cg_output_flush(stdout)) /* a reader gone: stop at once */
            rc = cg_prog_fail_lib(NULL);
    }
    for (int64_t i = 0; ws && i < nw; i++) {
        free(ws[i].w);
        cg_bf16_matrix_free(ws[i].p);
    }
    free(ws);
    free(buf);
    free(x);
    free(y);
    return rc < 0 ? 0 : rc;
}
