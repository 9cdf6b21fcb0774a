/* Check suite "bf16": mixed-precision products (core/gemm_bf16.c).
 *
 * - rounding to bfloat16: ties to even, subnormals to zero, NaN and Inf kept;
 * - products against a float64 reference, within a bound that grows with k,
 *   for every operand layout, tile and block edge and stride;
 * - the emulated kernel (AVX2 + FMA, and AVX-512 where the CPU has it)
 *   gives the bits of the AVX512_BF16 one
 *   and of a scalar model of the instruction;
 * - AMX (other bits) is held to the same bounds, and to the AVX512_BF16
 *   kernel's NaN, infinities and zeros;
 * - 1 and 2 threads give the same bits;
 * - a bias added as C is written has the bits of C set to the bias first;
 * - a bf16 operand read in place (AMX, and the native kernel) gives the bits of its floats, and
 *   nothing past its k values or its end is read;
 * - the precision switch reaches every product of the library. */
#include <check.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/amx_tiles.h"
#include "core/attention_amx.h"
#include "core/attention_impl.h"
#include "core/attention_rows.h"
#include "core/gemm_internal.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "nn/transformer.h"
#include "optim/optim.h"
#include "testutil.h"

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t to_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

START_TEST(test_round)
{
    ck_assert_float_eq(cg_bf16_round(1.0f), 1.0f);
    /* halfway between 1 and 1 + 2^-7: ties to the even one (1) */
    ck_assert_float_eq(cg_bf16_round(1.0f + 0x1p-8f), 1.0f);
    /* halfway between 1 + 2^-7 and 1 + 2^-6: ties to 1 + 2^-6 (even) */
    ck_assert_float_eq(cg_bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
    /* just above halfway rounds up */
    ck_assert_float_eq(cg_bf16_round(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
    ck_assert_float_eq(cg_bf16_round(-3.14159265f), -3.140625f);
    /* subnormals to signed zero, as the hardware conversion does */
    ck_assert_uint_eq(to_bits(cg_bf16_round(from_bits(0x00400000u))), 0u);
    ck_assert_uint_eq(to_bits(cg_bf16_round(from_bits(0x80000001u))), 0x80000000u);
    /* the largest float rounds to infinity; infinities and NaN stay */
    ck_assert(isinf(cg_bf16_round(3.4028235e38f)));
    ck_assert(isinf(cg_bf16_round(-INFINITY)) && cg_bf16_round(-INFINITY) < 0);
    ck_assert(isnan(cg_bf16_round(NAN)));
    ck_assert(isnan(cg_bf16_round(from_bits(0x7f800001u)))); /* low-bit NaN stays NaN */
    /* every result is a bf16: its low 16 bits are zero */
    cg_rng rng = cg_rng_new(3);
    for (int i = 0; i < 10000; i++) {
        float x = (cg_rng_uniform(&rng) - 0.5f) * 1e3f;
        float r = cg_bf16_round(x);
        ck_assert_uint_eq(to_bits(r) & 0xffffu, 0u);
        ck_assert(fabsf(r - x) <= fabsf(x) * 0x1p-8f);
    }
}
END_TEST

/* run() with the emulation in each width the CPU has: AVX-512's registers
 * (where it has them), then AVX2's; the CPU's own width restored after.
 * (Asking, not reading cg_bf16_emulation_avx512, initialises core/gemm.c:
 * first in a forked test, the global still said AVX2 only.) */
static void each_emulation_width(void (*run)(void))
{
    const bool avx512 = cg_bf16_emulation_use_avx512(true);
    for (int wide = avx512; wide >= 0; wide--) {
        ck_assert(cg_bf16_emulation_use_avx512(wide) == wide);
        run();
    }
    cg_bf16_emulation_use_avx512(avx512);
}

/* cg_bf16_round_runs (the vector rounding: the instruction's, or the
 * emulation's in AVX-512 or AVX2 lanes, with a masked or scalar tail) has
 * cg_bf16_round's bits on every element: any 32-bit pattern (subnormals to
 * signed zero, ties to even, the largest floats to infinity), a NaN kept a
 * NaN, for runs of every length around the vector widths, strided. The
 * emulation in both widths where the CPU has AVX-512. */
static void round_runs_case(void);
START_TEST(test_round_runs) { each_emulation_width(round_runs_case); }
END_TEST

static void round_runs_case(void)
{
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u,
                                0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0xff7f8000u,
                                0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u, 0x7fbfffffu};
    enum { NS = sizeof special / sizeof special[0], LEN = 80, RUNS = 3, LDX = 83, LDY = 81 };
    float x[RUNS * LDX];
    uint16_t y[RUNS * LDY];
    cg_rng rng = cg_rng_new(41);
    for (int trial = 0; trial < 40; trial++)
        for (int64_t n = 0; n <= LEN; n += trial % 2 ? 1 : 7) {
            for (int i = 0; i < RUNS * LDX; i++) {
                const uint64_t d = cg_rng_below(&rng, (uint64_t)4 << 32);
                x[i] = from_bits(d >> 32 ? (uint32_t)d : special[d % NS]);
            }
            memset(y, 0xa5, sizeof y);
            const int64_t runs = 1 + trial % RUNS;
            cg_bf16_round_runs(n, runs, LDX, x, LDY, y);
            for (int64_t r = 0; r < RUNS; r++)
                for (int64_t i = 0; i < LDY; i++) {
                    const uint16_t got = y[r * LDY + i];
                    if (r >= runs || i >= n) { /* nothing written outside the runs */
                        ck_assert_uint_eq(got, 0xa5a5u);
                        continue;
                    }
                    const float xi = x[r * LDX + i];
                    const uint16_t want = (uint16_t)(to_bits(cg_bf16_round(xi)) >> 16);
                    if (isnan(xi))
                        ck_assert_msg((got & 0x7f80u) == 0x7f80u && (got & 0x7fu),
                                      "NaN %#x rounded to %#x", to_bits(xi), got);
                    else
                        ck_assert_msg(got == want,
                                      "%#x (run %lld of %lld, element %lld of %lld) "
                                      "rounded to %#x, not %#x",
                                      to_bits(xi), (long long)r, (long long)runs, (long long)i,
                                      (long long)n, got, want);
                }
        }
}

/* Sizes on both sides of the micro-tile (32 x 12), the k pair, the k block
 * (384), the m block (96), the n block (3072: with one k block and with
 * two, each n block taking every k block) and the split of k in two
 * (cg_gemm_k_split: the last four but one are split). */
static const int64_t sizes[][3] = {
    {1, 1, 1},      {1, 1, 2},     {31, 11, 15},  {32, 12, 16},  {33, 13, 17},
    {64, 24, 31},   {70, 50, 385}, {200, 30, 40}, {97, 14, 3},   {20, 3080, 9},
    {5, 3080, 400}, {3, 40, 769},  {8, 17, 1001}, {1, 384, 768}, {1, 385, 769},
};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

/* Layouts of an r x c operand: 0 row-major, 1 column-major, 2 both strides
 * > 1 (every second element), 3 row-major with padded rows. */
static void layout(int l, int64_t r, int64_t c, int64_t *rs, int64_t *cs, size_t *len)
{
    switch (l) {
    case 0: *rs = c, *cs = 1; break;
    case 1: *rs = 1, *cs = r; break;
    case 2: *rs = 2 * c, *cs = 2; break;
    default: *rs = c + 5, *cs = 1; break;
    }
    *len = (size_t)((r - 1) * *rs + (c - 1) * *cs + 1);
}

/* Every bf16 path; a test skips those this CPU lacks. */
static const cg_gemm_path bf16_paths[] = {CG_GEMM_BF16_AMX, CG_GEMM_BF16, CG_GEMM_BF16_EMULATED};
#define NPATHS ((int)(sizeof bf16_paths / sizeof bf16_paths[0]))

/* A test of a path other than AMX's, run again by the AMX-emulated run of
 * this suite (CG_AMX_EMULATE=1, meson's test_bf16_amx_emulated): the plain
 * run has tested it already, so it skips there. */
static bool tested_by_plain_run(cg_gemm_path path)
{
    return cg_bf16_amx_emulated() && path != CG_GEMM_BF16_AMX;
}

/* The same for a test that names its path and packs nothing (a packed
 * matrix's layout follows the process's kind, which CG_BF16_EMULATE=1
 * changes): in the run with CG_BF16_EMULATE=1 (meson's
 * test_bf16_emulated) the emulated path is the one the plain run has
 * tested too. */
static bool emulation_forced(void)
{
    return cg_test_env_on("CG_BF16_EMULATE"); /* the meson test bf16_emulated sets it */
}
static bool path_tested_by_plain_run(cg_gemm_path path)
{
    return tested_by_plain_run(path) || (emulation_forced() && path == CG_GEMM_BF16_EMULATED);
}

static float *rand_buf(cg_rng *rng, size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = 4.0f * (cg_rng_uniform(rng) - 0.5f);
    return p;
}

START_TEST(test_against_double)
{
    cg_rng rng = cg_rng_new(7);
    const cg_gemm_path path = bf16_paths[_i];
    if (!cg_gemm_path_available(path) || path_tested_by_plain_run(path))
        return;
    for (int si = 0; si < NSIZES; si++) {
        const int64_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        for (int la = 0; la < 4; la++)
            for (int lb = 0; lb < 4; lb++)
                for (int lc = 0; lc < 3; lc++) {
                    int64_t rsa, csa, rsb, csb, rsc, csc;
                    size_t na, nb, nc;
                    layout(la, m, k, &rsa, &csa, &na);
                    layout(lb, k, n, &rsb, &csb, &nb);
                    layout(lc == 2 ? 2 : lc, m, n, &rsc, &csc, &nc);
                    float *a = rand_buf(&rng, na), *b = rand_buf(&rng, nb);
                    float *c = malloc(nc * sizeof(float));
                    /* the exact sums of each element, once for both betas:
                     * of the rounded inputs, of the inputs, and of |ab| */
                    double *sums = malloc((size_t)(3 * m * n) * sizeof(double));
                    float *ar = malloc(na * sizeof(float)), *br = malloc(nb * sizeof(float));
                    for (size_t i = 0; i < na; i++)
                        ar[i] = cg_bf16_round(a[i]);
                    for (size_t i = 0; i < nb; i++)
                        br[i] = cg_bf16_round(b[i]);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double sr = 0.0, sx = 0.0, mag = 0.0;
                            for (int64_t p = 0; p < k; p++) {
                                const int64_t ia = i * rsa + p * csa, ib = p * rsb + j * csb;
                                sr += (double)ar[ia] * br[ib];
                                sx += (double)a[ia] * b[ib];
                                mag += fabs((double)a[ia] * b[ib]);
                            }
                            double *e = sums + 3 * (i * n + j);
                            e[0] = sr;
                            e[1] = sx;
                            e[2] = mag;
                        }
                    /* C = A B, -1.5 A B - 0.5 C (a negative beta: its C is added, not
                     * dropped), and on AMX, whose tiles sum onto C for it, A B + C
                     * (elsewhere test_emulation_bits holds beta 1 to the model's bits) */
                    static const float alphas[] = {1.0f, -1.5f, 1.0f}, betas[] = {0, -0.5f, 1};
                    for (int bi = 0; bi < (path == CG_GEMM_BF16_AMX ? 3 : 2); bi++) {
                        const float beta = betas[bi], alpha = alphas[bi];
                        for (size_t i = 0; i < nc; i++)
                            c[i] = bi ? (float)(i % 5) : NAN;
                        float *c0 = malloc(nc * sizeof(float));
                        memcpy(c0, c, nc * sizeof(float));
                        ck_assert(cg_sgemm_path(path, 1, m, n, k, alpha, a, rsa, csa, b, rsb, csb,
                                                beta, c, rsc, csc));
                        /* every element: |c - exact(rounded inputs)| <= k eps32 sum|ab| and
                         * |c - exact(fp32 inputs)| <= (2^-7 + k eps32) sum|ab|:
                         * each input is off by at most 2^-8 of itself */
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++) {
                                const double *e = sums + 3 * (i * n + j);
                                const double sr = e[0], sx = e[1], mag = e[2];
                                double cin = bi ? c0[i * rsc + j * csc] : 0.0;
                                double got = c[i * rsc + j * csc];
                                double er = fabs(got - (alpha * sr + beta * cin));
                                double ex = fabs(got - (alpha * sx + beta * cin));
                                double scale = fabs(alpha) * mag + fabs(beta * cin) + 1e-30;
                                double eps = 0x1p-24 * (double)(k + 3);
                                if (!(er <= eps * scale) || !(ex <= (0x1p-7 + eps) * scale))
                                    ck_abort_msg("%s %lldx%lldx%lld layouts %d%d%d beta %g: "
                                                 "c[%lld,%lld] = %.9g, exact %.9g (rounded "
                                                 "inputs %.9g)",
                                                 cg_gemm_path_name(path), (long long)m,
                                                 (long long)n, (long long)k, la, lb, lc,
                                                 (double)beta, (long long)i, (long long)j, got,
                                                 alpha * sx + beta * cin, alpha * sr + beta * cin);
                            }
                        free(c0);
                    }
                    free(sums);
                    free(ar);
                    free(br);
                    free(a);
                    free(b);
                    free(c);
                }
    }
}
END_TEST

/* Random bit patterns with NaN, Inf, subnormals and values whose products
 * cancel, so the emulation is held to the instruction's rounding and
 * flushing, not only to typical data. */
static float *nasty_buf(cg_rng *rng, size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)cg_rng_below(rng, 1000);
        if (r < 5)
            p[i] = r < 2 ? NAN : r < 4 ? INFINITY : -INFINITY;
        else if (r < 60)
            p[i] = from_bits((uint32_t)cg_rng_below(rng, 0x00800000u)); /* subnormal */
        else if (r < 200)
            p[i] = (cg_rng_uniform(rng) - 0.5f) * 0x1p-60f; /* tiny products */
        else
            p[i] = 8.0f * (cg_rng_uniform(rng) - 0.5f);
    }
    return p;
}

/* An AMX sum of k products got against ref, another sum of the same
 * products (AVX512_BF16's, or made apart): NaN and infinities where ref
 * has them, else within 2^-23 (k + 3) mag, mag the sum of the products'
 * magnitudes (with |C| where C is added), and the flushes of subnormals. */
static bool near_amx(float got, float ref, int64_t k, double mag)
{
    if (isnan(ref))
        return isnan(got);
    if (isinf(ref))
        return got == ref;
    return isfinite(got) &&
           fabs((double)got - ref) <= 0x1p-23 * (double)(k + 3) * mag + 0x1p-124 * (double)(k + 1);
}

/* The instruction's arithmetic, one element at a time: each pair's odd
 * product and then its even one added to an fp32 sum, each addition one
 * rounding of the exact value (fmaf), a sum below the smallest normal float
 * flushed to a signed zero as x86 flushes it (model_fma: tininess after
 * rounding to 24 bits); a sum per k block of the driver (384), written
 * as alpha s + beta C for the first block and alpha s + C for later ones.
 * A product with k >= 768 and k >= 2 max(m, n) is two such sums, over
 * [0, h) and [h, k) with h = k / 2 rounded up to even, the second (with
 * beta 0) added to the first (cg_gemm_k_split). */
#define MODEL_KC 384
static float model_flush(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }
/* fmaf(a, b, s) flushed as x86's flush-to-zero flushes it: to a signed
 * zero where the exact a b + s, rounded to 24 bits as if the exponent had
 * no bound, is below 2^-126 (tininess after rounding). That is more than
 * model_flush of fmaf's result: fmaf rounds a sum just under 2^-126 to a
 * subnormal's 23 bits, which can carry it up to 2^-126 itself; it is tiny
 * unless it reaches the midpoint 2^-126 - 2^-151 (a tie goes to 2^-126,
 * whose significand is even). a b is exact in a double (a and b have 24
 * bits), and the double sum with its error (two-sum) is a b + s exactly. */
static float model_fma(float a, float b, float s)
{
    const float r = fmaf(a, b, s);
    if (fabsf(r) != 0x1p-126f)
        return model_flush(r);
    const double p = (double)a * b, hi = p + s, bb = hi - p, lo = (p - (hi - bb)) + (s - bb);
    const double sg = r > 0 ? 1.0 : -1.0, d = sg * hi - (0x1p-126 - 0x1p-151); /* exact */
    return d + sg * lo < 0.0 ? copysignf(0.0f, r) : r;
}

static void model_one_sum(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                          int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta,
                          float *c, int64_t rsc, int64_t csc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float *cij = &c[i * rsc + j * csc];
            for (int64_t p0 = 0; p0 < k; p0 += MODEL_KC) {
                const int64_t p1 = p0 + MODEL_KC < k ? p0 + MODEL_KC : k;
                float s = 0.0f;
                for (int64_t p = p0; p < p1; p += 2) {
                    float ah = 0.0f, bh = 0.0f; /* an odd k's zero partner */
                    if (p + 1 < p1) {
                        ah = cg_bf16_round(a[i * rsa + (p + 1) * csa]);
                        bh = cg_bf16_round(b[(p + 1) * rsb + j * csb]);
                    }
                    s = model_fma(ah, bh, s);
                    s = model_fma(cg_bf16_round(a[i * rsa + p * csa]),
                                  cg_bf16_round(b[p * rsb + j * csb]), s);
                }
                if (p0 > 0)
                    *cij = alpha * s + *cij;
                else
                    *cij = beta == 0.0f ? alpha * s : alpha * s + beta * *cij;
            }
        }
}

static void model_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                       int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
                       int64_t rsc, int64_t csc)
{
    if (k < 768 || k < 2 * (m > n ? m : n)) {
        model_one_sum(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
        return;
    }
    const int64_t h = ((k + 1) / 2 + 1) / 2 * 2;
    float *p = malloc((size_t)(m * n) * sizeof(float));
    ck_assert_ptr_nonnull(p);
    model_one_sum(m, n, h, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
    model_one_sum(m, n, k - h, alpha, a + h * csa, rsa, csa, b + h * rsb, rsb, csb, 0.0f, p, n, 1);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            c[i * rsc + j * csc] += p[i * n + j];
    free(p);
}

/* AMX's emulated tiles (core/amx_tiles.h; CG_AMX_EMULATE=1 runs AMX's
 * path on them): a load and a store move 16 rows of 64 bytes, stride
 * apart, and nothing else; tdpbf16ps has the bits of Intel's pseudo-code,
 * one element at a time: for each k-pair in order, the even product and
 * then the odd one added with one rounding (fmaf), subnormal inputs read as
 * zero and subnormal sums flushed, on nasty inputs (NaN, Inf, subnormals,
 * tiny products). */
static float bf16_daz(uint16_t h)
{
    const float x = from_bits((uint32_t)h << 16);
    return (h & 0x7f80u) == 0 ? copysignf(0.0f, x) : x;
}

START_TEST(test_amx_emulated_tiles)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f"))
        return; /* the emulation is offered with AVX512_BF16 only */
    enum { STRIDE = 80, ROWS = 16 };
    uint8_t src[ROWS * STRIDE], dst[ROWS * STRIDE + 16];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    memset(dst, 0xa5, sizeof dst);
    cg_amx_emu_loadd(3, src, STRIDE);
    cg_amx_emu_stored(3, dst, STRIDE);
    for (int r = 0; r < ROWS; r++)
        for (int b = 0; b < STRIDE; b++)
            ck_assert_uint_eq(dst[r * STRIDE + b], b < 64 ? src[r * STRIDE + b] : 0xa5);
    for (size_t i = ROWS * STRIDE; i < sizeof dst; i++)
        ck_assert_uint_eq(dst[i], 0xa5);
    cg_amx_emu_zero(3);
    cg_amx_emu_stored(3, dst, 64);
    for (int i = 0; i < 16 * 64; i++)
        ck_assert_uint_eq(dst[i], 0);

    cg_rng rng = cg_rng_new(17);
    for (int round = 0; round < 20; round++) {
        float *fa = nasty_buf(&rng, 16 * 32), *fb = nasty_buf(&rng, 16 * 32),
              *fc = nasty_buf(&rng, 16 * 16);
        uint16_t a[16][32], b[16][32]; /* a: 16 rows of 16 pairs; b: 16 k-pairs of 16 columns */
        float c[16][16], got[16][16];
        for (int i = 0; i < 16 * 32; i++) { /* bf16 bits as they are: subnormals included */
            a[i / 32][i % 32] = (uint16_t)(to_bits(fa[i]) >> 16);
            b[i / 32][i % 32] = (uint16_t)(to_bits(fb[i]) >> 16);
        }
        for (int i = 0; i < 16 * 16; i++)
            c[i / 16][i % 16] = fc[i];
        cg_amx_emu_loadd(0, c, 64);
        cg_amx_emu_loadd(4, a, 64);
        cg_amx_emu_loadd(6, b, 64);
        const unsigned csr = _mm_getcsr();
        cg_amx_emu_dpbf16ps(0, 4, 6);
        /* its DAZ and FTZ are its own: the thread's floats keep their subnormals */
        ck_assert_uint_eq(_mm_getcsr(), csr);
        cg_amx_emu_stored(0, got, 64);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                float x = model_flush(c[m][n]); /* a subnormal sum read as zero */
                for (int q = 0; q < 16; q++) {
                    x = model_fma(bf16_daz(a[m][2 * q]), bf16_daz(b[q][2 * n]), x);
                    x = model_fma(bf16_daz(a[m][2 * q + 1]), bf16_daz(b[q][2 * n + 1]), x);
                }
                const bool same = isnan(x) ? isnan(got[m][n]) : to_bits(x) == to_bits(got[m][n]);
                if (!same)
                    ck_abort_msg("emulated tdpbf16ps round %d [%d,%d]: %a, the model %a", round, m,
                                 n, (double)got[m][n], (double)x);
            }
        free(fa);
        free(fb);
        free(fc);
    }
    /* each product fused into its sum (the pseudo-code's FP32 FMA): 2^-70
     * squared is below FLT_MIN, which a multiply flushes to zero under FTZ,
     * while 1.5 2^-126 + 2^-140 is a normal float */
    uint16_t a1[16][32] = {{0}}, b1[16][32] = {{0}};
    float c1[16][16], got1[16][16];
    for (int i = 0; i < 16; i++) {
        a1[i][0] = 0x1c80; /* 2^-70 */
        b1[0][2 * i] = 0x1c80;
        for (int n = 0; n < 16; n++)
            c1[i][n] = 0x1.8p-126f;
    }
    cg_amx_emu_loadd(0, c1, 64);
    cg_amx_emu_loadd(4, a1, 64);
    cg_amx_emu_loadd(6, b1, 64);
    cg_amx_emu_dpbf16ps(0, 4, 6);
    cg_amx_emu_stored(0, got1, 64);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++)
            ck_assert_msg(got1[m][n] == 0x1.8p-126f + 0x1p-140f,
                          "emulated tdpbf16ps [%d,%d]: %a, a tiny product not fused", m, n,
                          (double)got1[m][n]);
}
END_TEST

/* Whether this CPU flushes a tiny result to zero under MXCSR's
 * flush-to-zero bit, as the emulation relies on (valgrind's CPU ignores the
 * bit): 2^-70 squared (subnormal) comes out 0. The MXCSR writes and the
 * multiply are one asm statement, which the compiler cannot take apart (C
 * code between two _mm_setcsr calls may be moved past them). Not the
 * emulated kernel's own flush, which a test skipped on would never check. */
static bool flush_to_zero_works(void)
{
    const unsigned saved = _mm_getcsr(), ftz = saved | 0x8000u;
    float x = 0x1p-70f;
    __asm__ volatile("ldmxcsr %1\n\tmulss %0, %0\n\tldmxcsr %2" : "+x"(x) : "m"(ftz), "m"(saved));
    return x == 0.0f;
}

/* Whether this CPU's flush-to-zero tests a fused multiply-add's result for
 * tininess after rounding it, as x86 does (the SDM's "after rounding"):
 * 2^-126 - 2^-151, rounded to 24 bits, is 2^-126 and is kept. QEMU's TCG
 * (7.2) tests before rounding and flushes it to 0. Only on a CPU with
 * FMA. */
static bool flush_after_rounding(void)
{
    const unsigned saved = _mm_getcsr(), ftz = saved | 0x8000u;
    float x = 0x1p-126f;
    const float a = -0x1p-76f, b = 0x1p-75f;
    __asm__ volatile("ldmxcsr %3\n\tvfmadd231ss %2, %1, %0\n\tldmxcsr %4"
                     : "+x"(x)
                     : "x"(a), "x"(b), "m"(ftz), "m"(saved));
    return x == 0x1p-126f;
}

/* One pass of test_emulation_bits with the emulated kernel in use */
static void emulation_bits_case(void)
{
    const bool native = cg_gemm_path_available(CG_GEMM_BF16);
    cg_rng rng = cg_rng_new(11);
    for (int si = 0; si < NSIZES; si++) {
        const int64_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        for (int la = 0; la < 4; la++)
            for (int lb = 0; lb < 4; lb++)
                for (int lc = 0; lc < 2; lc++) {
                    int64_t rsa, csa, rsb, csb, rsc, csc;
                    size_t na, nb, nc;
                    layout(la, m, k, &rsa, &csa, &na);
                    layout(lb, k, n, &rsb, &csb, &nb);
                    layout(lc, m, n, &rsc, &csc, &nc);
                    const bool nasty = (la + lb + lc + si) % 2 == 0;
                    float *a = nasty ? nasty_buf(&rng, na) : rand_buf(&rng, na);
                    float *b = nasty ? nasty_buf(&rng, nb) : rand_buf(&rng, nb);
                    /* cancelling pairs: b[p+1][j] = -b[p][j] where both exist */
                    if (!nasty && k > 1)
                        for (int64_t j = 0; j < n; j++)
                            b[rsb + j * csb] = -b[j * csb];
                    const float alpha = lb % 2 ? 1.0f : -0.75f, beta = la % 2 ? 0.0f : 1.0f;
                    float *c[3]; /* emulated, model, native */
                    for (int v = 0; v < 3; v++) {
                        c[v] = malloc(nc * sizeof(float));
                        for (size_t i = 0; i < nc; i++)
                            c[v][i] = (float)(i % 3) - 1.0f;
                    }
                    ck_assert(cg_sgemm_path(CG_GEMM_BF16_EMULATED, 1, m, n, k, alpha, a, rsa, csa,
                                            b, rsb, csb, beta, c[0], rsc, csc));
                    model_gemm(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c[1], rsc, csc);
                    if (native)
                        ck_assert(cg_sgemm_path(CG_GEMM_BF16, 1, m, n, k, alpha, a, rsa, csa, b,
                                                rsb, csb, beta, c[2], rsc, csc));
                    for (int v = 1; v < (native ? 3 : 2); v++)
                        for (size_t i = 0; i < nc; i++)
                            if (to_bits(c[0][i]) != to_bits(c[v][i]) &&
                                !(isnan(c[0][i]) && isnan(c[v][i])))
                                ck_abort_msg("bf16 %lldx%lldx%lld layouts %d%d%d: emulated %a, "
                                             "%s %a at %zu",
                                             (long long)m, (long long)n, (long long)k, la, lb, lc,
                                             (double)c[0][i], v == 1 ? "model" : "native",
                                             (double)c[v][i], i);
                    free(a);
                    free(b);
                    for (int v = 0; v < 3; v++)
                        free(c[v]);
                }
    }
}

/* The emulated product, on AVX2 and FMA and (where the CPU has it) on
 * AVX-512, has the model's bits on any CPU, and those of AVX512_BF16's
 * kernel where the CPU has it: nasty inputs (NaN, Inf, subnormals, tiny and
 * cancelling products), every layout, tile, pair and block edge, alpha and
 * beta. */
START_TEST(test_emulation_bits)
{
    if (!cg_gemm_path_available(CG_GEMM_BF16_EMULATED) ||
        path_tested_by_plain_run(CG_GEMM_BF16_EMULATED))
        return; /* no AVX2 + FMA, or a run with emulation forced */
    if (!flush_to_zero_works()) {
        /* valgrind's CPU ignores MXCSR's flush-to-zero, without which the
         * emulation cannot give the instruction's bits */
        fprintf(stderr, "test_emulation_bits: skipped (MXCSR's flush-to-zero ignored here)\n");
        return;
    }
    each_emulation_width(emulation_bits_case);
}
END_TEST

/* Sums that end just under the smallest normal float, 2^-126 - 2^-151 f
 * for a product's significand f: x86's flush-to-zero (the emulation's
 * MXCSR bit, the instruction's own) tests a result for tininess after
 * rounding it to 24 bits with no bound on the exponent, so the sum is 0
 * below the midpoint 2^-126 - 2^-151 (f > 1) and 2^-126 at it and above
 * (f <= 1), though fmaf's rounding to a subnormal's 23 bits gives 2^-126
 * for all of them. Each sum is the first
 * pair's 2^-126 (its even element) plus the second pair's even product
 * -2^-151 f, added last (its odd one is 0); both signs; on every
 * emulated kernel, fp32 and bf16 operands, a prepacked weight, the
 * native kernel where the CPU has it, and the scalar model. */
START_TEST(test_emulation_flush_boundary)
{
    if (!cg_gemm_path_available(CG_GEMM_BF16_EMULATED) ||
        path_tested_by_plain_run(CG_GEMM_BF16_EMULATED))
        return;
    if (!flush_to_zero_works()) {
        fprintf(stderr, "test_emulation_flush_boundary: skipped (flush-to-zero ignored here)\n");
        return;
    }
    if (!flush_after_rounding()) {
        /* QEMU: the boundary is x86's, which this CPU does not follow */
        fprintf(stderr, "test_emulation_flush_boundary: skipped (this CPU's flush-to-zero "
                        "tests tininess before rounding)\n");
        return;
    }
    /* f = fa fb: the two bf16 significands of the second pair's odd
     * product, and whether the sum is flushed */
    static const struct {
        float fa, fb;
        bool zero;
    } cases[] = {
        {1.0f + 0x1p-7f, 1.0f, true},           /* f = 1 + 2^-7: below the midpoint */
        {1.0f + 0x1p-7f, 1.0f + 0x1p-7f, true}, /* 1 + 2^-6 + 2^-14 */
        {1.0f, 1.0f, false},                    /* the midpoint: ties to 2^-126 (even) */
        {0.99609375f, 1.0f, false},             /* 255/256: above it */
        {1.0f + 0x1p-7f, 0.99609375f, true},    /* 1 + 2^-8 - 2^-15: below it */
        {0.99609375f, 0.99609375f, false},      /* 1 - 2^-7 + 2^-16: above it */
    };
    const bool native = cg_gemm_path_available(CG_GEMM_BF16);
    const bool avx512 = cg_bf16_emulation_avx512;
    enum { M = 3, N = 2, K = 4 };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int sign = 1; sign >= -1; sign -= 2) {
            /* row i of A: (2^-63 sign, 0, -fa 2^-76 sign, 0): elements 0
             * and 2 are the pairs' even ones; B's columns alike */
            float a[M * K] = {0}, b[K * N] = {0};
            uint16_t a16[M * K], bt16[N * K];
            for (int i = 0; i < M; i++) {
                a[i * K] = 0x1p-63f * (float)sign;
                a[i * K + 2] = -cases[ci].fa * 0x1p-76f * (float)sign;
            }
            for (int j = 0; j < N; j++) {
                b[j] = 0x1p-63f;
                b[2 * N + j] = cases[ci].fb * 0x1p-75f;
            }
            for (int i = 0; i < M * K; i++)
                a16[i] = (uint16_t)(to_bits(a[i]) >> 16);
            for (int l = 0; l < K; l++)
                for (int j = 0; j < N; j++)
                    bt16[j * K + l] = (uint16_t)(to_bits(b[l * N + j]) >> 16);
            const float want = cases[ci].zero ? 0.0f * (float)sign : 0x1p-126f * (float)sign;
            float model[M * N], w[N * K];
            model_gemm(M, N, K, 1.0f, a, K, 1, b, N, 1, 0.0f, model, N, 1);
            for (int i = 0; i < M * N; i++)
                ck_assert_msg(to_bits(model[i]) == to_bits(want),
                              "case %zu sign %d: the model %a, x86's flush %a", ci, sign,
                              (double)model[i], (double)want);
            for (int j = 0; j < N; j++)
                for (int l = 0; l < K; l++)
                    w[j * K + l] = b[l * N + j];
            for (int wide = avx512; wide >= -native; wide--) {
                /* wide 1: AVX-512's emulation, 0 AVX2's, -1 the native kernel */
                const cg_gemm_path path = wide >= 0 ? CG_GEMM_BF16_EMULATED : CG_GEMM_BF16;
                if (wide >= 0)
                    ck_assert(cg_bf16_emulation_use_avx512(wide) == wide);
                float c[3][M * N];
                ck_assert(
                    cg_sgemm_path(path, 1, M, N, K, 1.0f, a, K, 1, b, N, 1, 0.0f, c[0], N, 1));
                /* bf16 operands, B's k contiguous, C column-stored */
                ck_assert(cg_gemm_mixed_path(path, 1, M, N, K, 1.0f, a16, K, 1, bt16, 1, K,
                                             CG_GEMM_A_BF16 | CG_GEMM_B_BF16, 0.0f, c[1], 1, M));
                cg_bf16_matrix *pw = cg_bf16_matrix_new(N, K, w, K, 1);
                ck_assert_ptr_nonnull(pw);
                ck_assert(cg_bf16_matrix_mul(pw, path, 1, M, a, K, 1, NULL, 0, c[2], N, 1));
                cg_bf16_matrix_free(pw);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        const float got[3] = {c[0][i * N + j], c[1][j * M + i], c[2][i * N + j]};
                        for (int v = 0; v < 3; v++)
                            ck_assert_msg(to_bits(got[v]) == to_bits(want),
                                          "case %zu sign %d kernel %d form %d [%d,%d]: %a, not %a",
                                          ci, sign, wide, v, i, j, (double)got[v], (double)want);
                    }
            }
            cg_bf16_emulation_use_avx512(avx512);
        }
}
END_TEST

/* C = A B + bias (cg_sgemm_bias_path) has the bits of C set to the bias
 * and then C = A B + 1 C, on every path (fp32 adds the bias first, the bf16
 * kernels as they write C), for both C layouts, a strided bias, every tile,
 * pair and k block edge, and 1 or 2 threads. */
START_TEST(test_bias_fused)
{
    cg_rng rng = cg_rng_new(17);
    const cg_gemm_path paths[] = {CG_GEMM_AUTO, CG_GEMM_BF16_AMX, CG_GEMM_BF16,
                                  CG_GEMM_BF16_EMULATED};
    for (int pi = 0; pi < 4; pi++) {
        if (!cg_gemm_path_available(paths[pi]) || path_tested_by_plain_run(paths[pi]))
            continue;
        for (int si = 0; si < NSIZES; si++) {
            const int64_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
            for (int lc = 0; lc < 2; lc++)
                for (int bs = 1; bs <= 3; bs += 2) {
                    int64_t rsa, csa, rsb, csb, rsc, csc;
                    size_t na, nb, nc;
                    layout(si % 4, m, k, &rsa, &csa, &na);
                    layout((si + 1) % 4, k, n, &rsb, &csb, &nb);
                    layout(lc, m, n, &rsc, &csc, &nc);
                    float *a = rand_buf(&rng, na), *b = rand_buf(&rng, nb);
                    float *bias = rand_buf(&rng, (size_t)(n * bs));
                    float *c1 = malloc(nc * sizeof(float)), *c2 = malloc(nc * sizeof(float));
                    for (size_t i = 0; i < nc; i++)
                        c1[i] = c2[i] = NAN; /* never read */
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++)
                            c1[i * rsc + j * csc] = bias[j * bs];
                    const int nt = 1 + (si + lc) % 2;
                    ck_assert(cg_sgemm_path(paths[pi], nt, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb,
                                            1.0f, c1, rsc, csc));
                    ck_assert(cg_sgemm_bias_path(paths[pi], nt, m, n, k, a, rsa, csa, b, rsb, csb,
                                                 bias, bs, c2, rsc, csc));
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            const float x = c1[i * rsc + j * csc], y = c2[i * rsc + j * csc];
                            if (to_bits(x) != to_bits(y))
                                ck_abort_msg("%s %lldx%lldx%lld C layout %d bias stride %d, %d "
                                             "threads: [%lld, %lld] %a, fused %a",
                                             cg_gemm_path_name(paths[pi]), (long long)m,
                                             (long long)n, (long long)k, lc, bs, nt, (long long)i,
                                             (long long)j, (double)x, (double)y);
                        }
                    free(a);
                    free(b);
                    free(bias);
                    free(c1);
                    free(c2);
                }
        }
    }
}
END_TEST

/* AMX's sums round otherwise than vdpbf16ps's but see the same values: on
 * nasty inputs (NaN, Inf, subnormals, tiny and cancelling products) an
 * element is NaN, or an infinity of the same sign, exactly where
 * AVX512_BF16's kernel gives one, and finite elements differ from its by
 * at most the bound both are held to (k eps32 of the products' sum of
 * magnitudes, twice over) plus the flushing of sums below 2^-126. */
START_TEST(test_amx_specials)
{
    if (!cg_gemm_path_available(CG_GEMM_BF16_AMX))
        return; /* no AMX on this CPU: test_against_double skips it too */
    cg_rng rng = cg_rng_new(13);
    for (int si = 0; si < NSIZES; si++) {
        const int64_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        for (int la = 0; la < 4; la++)
            for (int lc = 0; lc < 2; lc++) {
                const int lb = (la + si) % 4;
                int64_t rsa, csa, rsb, csb, rsc, csc;
                size_t na, nb, nc;
                layout(la, m, k, &rsa, &csa, &na);
                layout(lb, k, n, &rsb, &csb, &nb);
                layout(lc, m, n, &rsc, &csc, &nc);
                float *a = nasty_buf(&rng, na), *b = nasty_buf(&rng, nb);
                float *c[2]; /* AMX, AVX512_BF16 */
                const float beta = la % 2 ? 0.0f : 1.0f;
                for (int v = 0; v < 2; v++) {
                    c[v] = malloc(nc * sizeof(float));
                    for (size_t i = 0; i < nc; i++)
                        c[v][i] = (float)(i % 3) - 1.0f;
                    ck_assert(cg_sgemm_path(v ? CG_GEMM_BF16 : CG_GEMM_BF16_AMX, 1, m, n, k, 1.0f,
                                            a, rsa, csa, b, rsb, csb, beta, c[v], rsc, csc));
                }
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        const size_t at = (size_t)(i * rsc + j * csc);
                        const float got = c[0][at], ref = c[1][at];
                        double mag = fabs((double)beta * ((double)(at % 3) - 1.0));
                        for (int64_t p = 0; p < k; p++)
                            mag += fabs((double)cg_bf16_round(a[i * rsa + p * csa]) *
                                        cg_bf16_round(b[p * rsb + j * csb]));
                        if (!near_amx(got, ref, k, mag))
                            ck_abort_msg("AMX %lldx%lldx%lld layouts %d%d%d: [%lld,%lld] %a, "
                                         "AVX512_BF16 %a",
                                         (long long)m, (long long)n, (long long)k, la, lb, lc,
                                         (long long)i, (long long)j, (double)got, (double)ref);
                    }
                free(a);
                free(b);
                free(c[0]);
                free(c[1]);
            }
    }
}
END_TEST

/* The shared-packing split (cg_bf16_gemm_parallel: 2 threads pack B once,
 * together, then each multiplies its rows of C) gives the bits of the
 * serial product on every kernel. Products take it only on AMX (core/
 * gemm.c), so it is called here directly: the native and emulated
 * kernels keep it tested on every CPU. */
START_TEST(test_shared_packing_bits)
{
    cg_rng rng = cg_rng_new(9);
    /* the last: two B panels, the second thread's run of them starting
     * at the n block's last panel */
    const int64_t dims[][3] = {{256, 256, 1000}, {200, 3100, 77}, {130, 96, 800}, {256, 20, 100}};
    const cg_bf16_kind kinds[] = {CG_BF16_NATIVE, CG_BF16_EMULATED};
    const cg_gemm_path paths[] = {CG_GEMM_BF16, CG_GEMM_BF16_EMULATED};
    int ran = 0;
    for (int d = 0; d < 4; d++) {
        const int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        float *a = rand_buf(&rng, (size_t)(m * k)), *b = rand_buf(&rng, (size_t)(k * n));
        float *bias = rand_buf(&rng, (size_t)n);
        float *o1 = malloc((size_t)(m * n) * sizeof(float));
        float *o2 = malloc((size_t)(m * n) * sizeof(float));
        for (int q = 0; q < 2; q++) {
            if (!cg_gemm_path_available(paths[q]))
                continue;
            /* A row-major, B column-major (k contiguous) and the other way */
            for (int l = 0; l < 2; l++) {
                const int64_t rsa = l ? 1 : k, csa = l ? m : 1, rsb = l ? n : 1, csb = l ? 1 : k;
                if (!cg_bf16_gemm_shares_packing(kinds[q], m, n, k, 1, m, 2))
                    continue;
                ck_assert(cg_bf16_gemm_serial(kinds[q], m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, 0,
                                              0.0f, bias, 1, o1, 1, m, NULL));
                ck_assert(cg_bf16_gemm_parallel(kinds[q], 2, m, n, k, 1.0f, a, rsa, csa, b, rsb,
                                                csb, 0, 0.0f, bias, 1, o2, 1, m, NULL));
                ck_assert_msg(memcmp(o1, o2, (size_t)(m * n) * sizeof(float)) == 0,
                              "%s %lldx%lldx%lld layout %d: shared packing differs from serial",
                              cg_gemm_path_name(paths[q]), (long long)m, (long long)n, (long long)k,
                              l);
                ran++;
            }
        }
        free(a);
        free(b);
        free(bias);
        free(o1);
        free(o2);
    }
    ck_assert_int_gt(ran, 0); /* the emulated kernel is on every CPU with AVX2 */
}
END_TEST

/* The shared packing's bound on B (SHARED_B_MAX_BYTES, 4 MB, in core/
 * gemm_bf16.c): cg_bf16_gemm_parallel's calling thread holds every k block
 * of a column block of B in its buffer, so past the bound the product
 * splits C into independent products instead, each packing one k block at
 * a time. C [128, 256] column-major (4 row panels, 2 a thread) shares over
 * one k block on every kernel and is refused over k = 16384 (B's panels
 * 8.4 MB on AMX, more on the others). Products share only on AMX's path
 * (core/gemm.c), so on it (emulated under CG_AMX_EMULATE=1) the memory is
 * measured too, each product in a fresh thread (its own gemm buffers and
 * OpenMP team): the shared packing called directly grows the resident set
 * by more than 6 MB (so the measure sees the buffer: 8.3 MB here), the
 * 2-thread product by less than 4 MB. */
typedef struct {
    bool direct; /* cg_bf16_gemm_parallel, else the product on AMX's path */
    const float *a, *b;
    float *c;
    long grew_kb;
    bool ok;
    char err[256]; /* the product's error: cg_last_error is per thread */
} shared_b_run;
enum { SB_M = 128, SB_N = 256, SB_K = 16384 };

static void *shared_b_product(void *arg)
{
    shared_b_run *r = arg;
    const long before = cg_test_rss_kb();
    r->ok = r->direct ? cg_bf16_gemm_parallel(CG_BF16_AMX, 2, SB_M, SB_N, SB_K, 1.0f, r->a, SB_K, 1,
                                              r->b, SB_N, 1, 0, 0.0f, NULL, 0, r->c, 1, SB_M, NULL)
                      : cg_sgemm_path(CG_GEMM_BF16_AMX, 2, SB_M, SB_N, SB_K, 1.0f, r->a, SB_K, 1,
                                      r->b, SB_N, 1, 0.0f, r->c, 1, SB_M);
    r->grew_kb = cg_test_rss_kb() - before;
    snprintf(r->err, sizeof r->err, "%s", r->ok ? "" : cg_last_error());
    return NULL;
}

START_TEST(test_shared_packing_bounds_b)
{
    const cg_bf16_kind kinds[] = {CG_BF16_NATIVE, CG_BF16_EMULATED, CG_BF16_AMX};
    for (int q = 0; q < 3; q++) {
        ck_assert(cg_bf16_gemm_shares_packing(kinds[q], SB_M, SB_N, CG_BF16_KC, 1, SB_M, 2));
        ck_assert_msg(!cg_bf16_gemm_shares_packing(kinds[q], SB_M, SB_N, SB_K, 1, SB_M, 2),
                      "kind %d: B's %d k blocks shared", (int)kinds[q], SB_K / CG_BF16_KC + 1);
    }
    if (!cg_gemm_path_available(CG_GEMM_BF16_AMX))
        return;
    cg_rng rng = cg_rng_new(11);
    float *a = rand_buf(&rng, (size_t)SB_M * SB_K), *b = rand_buf(&rng, (size_t)SB_K * SB_N);
    float *c = calloc((size_t)SB_M * SB_N, sizeof *c);
    shared_b_run runs[2] = {{false, a, b, c, 0, false, ""}, {true, a, b, c, 0, false, ""}};
    for (int i = 0; i < 2; i++) {
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, shared_b_product, &runs[i]), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        ck_assert_msg(runs[i].ok, "%s", runs[i].err);
    }
#if !defined(__SANITIZE_ADDRESS__) /* ASan's shadow and fake stacks */
    ck_assert_msg(runs[1].grew_kb > 6144, "the shared packing grew RSS by %ld kB only",
                  runs[1].grew_kb);
    ck_assert_msg(runs[0].grew_kb < 4096, "the product grew RSS by %ld kB", runs[0].grew_kb);
#endif
    free(a);
    free(b);
    free(c);
}
END_TEST

START_TEST(test_threads_bit_identical)
{
    cg_rng rng = cg_rng_new(5);
    /* C split into independent halves or (on AMX, cg_bf16_gemm_parallel)
     * its rows split over one packing of B shared by both threads, with one
     * or two column blocks of 3072 */
    const int64_t dims[][3] = {
        {513, 479, 611}, {64, 1100, 130}, {700, 40, 77}, {3100, 128, 40}, {256, 256, 1000}};
    for (int d = 0; d < 5; d++) {
        const int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        float *a = rand_buf(&rng, (size_t)(m * k)), *b = rand_buf(&rng, (size_t)(k * n));
        float *o1 = malloc((size_t)(m * n) * sizeof(float));
        float *o2 = malloc((size_t)(m * n) * sizeof(float));
        for (int p = 0; p < NPATHS; p++) {
            const cg_gemm_path path = bf16_paths[p];
            if (!cg_gemm_path_available(path) || path_tested_by_plain_run(path) ||
                (path == CG_GEMM_BF16_EMULATED && d == 0))
                continue;
            /* A row- or column-major, B column- or row-major (a weight
             * gradient's: the strided packings of B and A), C both ways */
            for (int l = 0; l < 8; l++) {
                const int lc = l & 1, la = l >> 1 & 1, lb = l >> 2;
                const int64_t rsc = lc ? 1 : n, csc = lc ? m : 1;
                const int64_t rsa = la ? 1 : k, csa = la ? m : 1;
                const int64_t rsb = lb ? n : 1, csb = lb ? 1 : k;
                ck_assert(cg_sgemm_path(path, 1, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, 0.0f, o1,
                                        rsc, csc));
                ck_assert(cg_sgemm_path(path, 2, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, 0.0f, o2,
                                        rsc, csc));
                ck_assert_msg(memcmp(o1, o2, (size_t)(m * n) * sizeof(float)) == 0,
                              "%s %lldx%lldx%lld layouts %d%d%d: 1 vs 2 threads differ",
                              cg_gemm_path_name(path), (long long)m, (long long)n, (long long)k, la,
                              lb, lc);
            }
        }
        free(a);
        free(b);
        free(o1);
        free(o2);
    }
}
END_TEST

/* The switch reaches cg_k_matmul (and so every product built on cg_sgemm):
 * under bf16 the result equals the explicit bf16 path and differs from fp32;
 * switching back gives the fp32 bits again. */
START_TEST(test_precision_switch)
{
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_FP32);
    if (emulation_forced()) {
        ck_assert(!cg_bf16_native());
        ck_assert(!cg_gemm_path_available(CG_GEMM_BF16));
    }
    cg_precision p;
    ck_assert(cg_precision_parse("bf16", &p) && p == CG_PRECISION_BF16);
    ck_assert(cg_precision_parse("fp32", &p) && p == CG_PRECISION_FP32);
    cg_clear_error();
    CG_ASSERT_FAILS(cg_precision_parse("fp16", &p) ? (void *)1 : NULL, "fp16");
    CG_ASSERT_REFUSED(!cg_precision_parse("bf16", NULL),
                      "cg_precision_parse: argument 'out' is NULL");
    ck_assert_str_eq(cg_precision_name(CG_PRECISION_BF16), "bf16");
    /* a value that is no precision (a C enum takes any int) is refused in
     * one line and the policy stays as it was, never silently fp32 */
    ck_assert_str_eq(cg_precision_name((cg_precision)5), "?");
    cg_set_matmul_precision(CG_PRECISION_BF16);
    CG_ASSERT_REFUSED((cg_set_matmul_precision((cg_precision)5), cg_has_error()),
                      "set_matmul_precision: unknown precision 5 (choices: fp32, bf16)");
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_BF16);
    cg_clear_error();
    ck_assert_int_eq(cg_autocast_begin((cg_precision)7), CG_PRECISION_BF16);
    ck_assert_str_eq(cg_last_error(), "autocast_begin: unknown precision 7 (choices: fp32, "
                                      "bf16); the policy stays bf16");
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_BF16);
    CG_ASSERT_REFUSED((cg_autocast_end((cg_precision)-1), cg_has_error()),
                      "autocast_end: unknown precision -1");
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_BF16);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_clear_error();

    cg_rng rng = cg_rng_new(9);
    const int64_t m = 70, k = 129, n = 45;
    cg_tensor *a = cg_randn(&rng, CG_SHAPE(m, k)), *b = cg_randn(&rng, CG_SHAPE(k, n));
    cg_tensor *f1 = cg_k_matmul(a, b);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_tensor *h = cg_k_matmul(a, b);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_tensor *f2 = cg_k_matmul(a, b);
    float *ref = malloc((size_t)(m * n) * sizeof(float));
    const cg_gemm_path path = cg_bf16_auto_path();
    ck_assert(
        cg_sgemm_path(path, 1, m, n, k, 1.0f, cg_data(a), k, 1, cg_data(b), n, 1, 0.0f, ref, n, 1));
    ck_assert(memcmp(cg_data(h), ref, (size_t)(m * n) * sizeof(float)) == 0);
    ck_assert(memcmp(cg_data(f1), cg_data(f2), (size_t)(m * n) * sizeof(float)) == 0);
    ck_assert(memcmp(cg_data(f1), cg_data(h), (size_t)(m * n) * sizeof(float)) != 0);
    free(ref);
    cg_release_all(5, a, b, f1, h, f2);
}
END_TEST

/* The policy is per thread (core/gemm.h): two threads, one in fp32 and one
 * in bf16 (cg_autocast_begin), run at the same time a linear layer, a
 * batched product of many small matrices (spread over OpenMP's worker
 * threads) and an attention forward and backward (products inside
 * parallel regions), with 2 OpenMP threads each. Each thread's results
 * equal bit for bit those of the same ops run on one thread under its
 * policy, and the two differ. */
enum { POL_OPS = 6, POL_REPS = 3 };
typedef struct {
    cg_precision p;
    pthread_barrier_t *start; /* both policies set before either computes */
    const cg_tensor *x, *w, *q, *k, *v, *g;
    cg_tensor *out[POL_OPS];
    bool scope_restored;
} policy_job;

static bool policy_ops(const policy_job *j, cg_tensor **out)
{
    cg_tensor *kt = cg_view_transpose(j->k, 2, 3), *saved = NULL;
    out[0] = cg_k_linear(j->x, j->w, NULL);
    out[1] = cg_k_matmul(j->q, kt);
    out[2] = cg_k_attention(j->q, j->k, j->v, true, NULL, &saved, NULL);
    bool ok = out[2] && cg_k_attention_backward(j->q, j->k, j->v, out[2], saved, j->g, true, NULL,
                                                &out[3], &out[4], &out[5]);
    cg_release_all(2, kt, saved);
    return ok && out[0] && out[1];
}

static void *policy_thread(void *arg)
{
    policy_job *j = arg;
    const cg_precision prev = cg_autocast_begin(j->p);
    pthread_barrier_wait(j->start);
    for (int r = 0; r < POL_REPS; r++) { /* keep the last results */
        for (int i = 0; i < POL_OPS; i++)
            cg_release(j->out[i]);
        memset(j->out, 0, sizeof j->out);
        if (!policy_ops(j, j->out))
            break;
    }
    cg_autocast_end(prev);
    j->scope_restored = prev == CG_PRECISION_FP32 && cg_get_matmul_precision() == prev;
    return NULL;
}

START_TEST(test_precision_per_thread)
{
    cg_rng rng = cg_rng_new(23);
    enum { B = 2, H = 4, T = 64, dh = 16, N = 96, K = 80, O = 64 };
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, K)), *w = cg_randn(&rng, CG_SHAPE(O, K));
    cg_tensor *q = cg_randn(&rng, CG_SHAPE(B, H, T, dh)),
              *k = cg_randn(&rng, CG_SHAPE(B, H, T, dh));
    cg_tensor *v = cg_randn(&rng, CG_SHAPE(B, H, T, dh)),
              *g = cg_randn(&rng, CG_SHAPE(B, H, T, dh));
    policy_job jobs[2] = {{.p = CG_PRECISION_FP32}, {.p = CG_PRECISION_BF16}};
    cg_tensor *ref[2][POL_OPS] = {{NULL}};
    cg_set_num_threads(1); /* the references: one thread, each policy */
    for (int t = 0; t < 2; t++) {
        jobs[t] = (policy_job){.p = jobs[t].p, .x = x, .w = w, .q = q, .k = k, .v = v, .g = g};
        const cg_precision prev = cg_autocast_begin(jobs[t].p);
        ck_assert_msg(policy_ops(&jobs[t], ref[t]), "%s", cg_last_error());
        cg_autocast_end(prev);
    }
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_FP32);
    cg_set_num_threads(2);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        jobs[t].start = &start;
        ck_assert(pthread_create(&th[t], NULL, policy_thread, &jobs[t]) == 0);
    }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&start);
    cg_set_num_threads(0);
    for (int t = 0; t < 2; t++) {
        ck_assert(jobs[t].scope_restored);
        for (int i = 0; i < POL_OPS; i++) {
            ck_assert_msg(jobs[t].out[i] != NULL, "%s op %d failed", cg_precision_name(jobs[t].p),
                          i);
            const size_t bytes = (size_t)cg_numel(ref[t][i]) * sizeof(float);
            ck_assert_msg(memcmp(cg_data(jobs[t].out[i]), cg_data(ref[t][i]), bytes) == 0,
                          "%s, op %d: not the bits of one thread in that policy",
                          cg_precision_name(jobs[t].p), i);
            ck_assert_msg(memcmp(cg_data(ref[0][i]), cg_data(ref[1][i]), bytes) != 0,
                          "op %d: fp32 and bf16 give the same bits", i);
        }
    }
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < POL_OPS; i++)
            cg_release_all(2, jobs[t].out[i], ref[t][i]);
    cg_release_all(6, x, w, q, k, v, g);
}
END_TEST

/* Gradients of a whole decoder layer (causal self-attention with key
 * padding, cross-attention, feed-forward, norms; pre- and post-norm, layer
 * and RMS norms, which keep x-hat in bf16) in bf16
 * against fp32: every parameter's and input's gradient within bf16
 * tolerance in norm (each product's inputs carry a relative rounding of up
 * to 2^-8): |g16 - g32| <= 2e-2 max(|g32|, 1e-2 G), G the largest gradient
 * norm of the layer (the key bias's gradient is zero in exact arithmetic,
 * rounding noise in both), and the input's not equal (bf16 really ran). */
static double norm_diff(const cg_tensor *x, const cg_tensor *y)
{
    float *a = cg_test_values(x), *b = y ? cg_test_values(y) : NULL;
    double s = 0.0;
    for (int64_t i = 0; i < cg_numel(x); i++)
        s += ((double)a[i] - (y ? b[i] : 0.0)) * ((double)a[i] - (y ? b[i] : 0.0));
    free(a);
    free(b);
    return sqrt(s);
}

START_TEST(test_layer_gradients)
{
    enum { B = 2, T = 13, S = 9, d = 64 };
    for (int v = 0; v < 4; v++) {
        const int nf = v & 1;
        cg_tf_config cfg = {.d = d,
                            .H = 4,
                            .d_ff = 4 * d,
                            .norm = v & 2 ? CG_NORM_RMSNORM : CG_NORM_LAYERNORM,
                            .act = CG_ACT_GELU,
                            .norm_first = nf == 1,
                            .dropout = 0.0f};
        cg_rng rng = cg_rng_new(17);
        cg_dec_layer *layer = cg_dec_layer_new(&cfg, &rng);
        cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(B, T, d)), true);
        cg_tensor *mem = cg_requires_grad(cg_randn(&rng, CG_SHAPE(B, S, d)), true);
        cg_tensor *w = cg_randn(&rng, CG_SHAPE(B, T, d));
        uint8_t tpad[B * T] = {0}, spad[B * S] = {0};
        tpad[B * T - 1] = tpad[B * T - 2] = 1;
        spad[S - 1] = 1;
        cg_attn_mask self_mask = {.causal = true, .key_pad = cg_test_mask(CG_SHAPE(B, T), tpad)};
        cg_attn_mask cross_mask = {.key_pad = cg_test_mask(CG_SHAPE(B, S), spad)};
        cg_param_list pl = {0};
        ck_assert(cg_module_params(CG_MODULE(layer), &pl));
        const int ng = pl.n + 2;
        cg_tensor **g32 = calloc((size_t)ng, sizeof *g32);
        for (int pass = 0; pass < 2; pass++) {
            cg_set_matmul_precision(pass ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
            for (int i = 0; i < pl.n; i++)
                cg_zero_grad(pl.items[i].tensor);
            cg_zero_grad(x);
            cg_zero_grad(mem);
            cg_tensor *y = cg_dec_layer_forward(layer, x, mem, &self_mask, &cross_mask);
            cg_tensor *yw = cg_mul(y, w);
            cg_tensor *loss = cg_sum_all(yw);
            ck_assert_msg(loss != NULL, "%s", cg_last_error());
            ck_assert(cg_backward(loss, NULL, false));
            cg_set_matmul_precision(CG_PRECISION_FP32);
            double G = 0.0;
            for (int i = 0; i < ng && pass == 1; i++)
                G = fmax(G, norm_diff(g32[i], NULL));
            for (int i = 0; i < ng; i++) {
                cg_tensor *t = i < pl.n ? pl.items[i].tensor : i == pl.n ? x : mem;
                ck_assert(t->grad != NULL);
                if (pass == 0) {
                    g32[i] = cg_contiguous(t->grad);
                    continue;
                }
                double diff = norm_diff(t->grad, g32[i]), ref = norm_diff(g32[i], NULL);
                const char *name = i < pl.n ? pl.items[i].name : i == pl.n ? "x" : "memory";
                ck_assert_msg(diff <= 2e-2 * fmax(ref, 1e-2 * G),
                              "%s norm-first %d, norm %d: bf16 gradient off by %.3g (norm %.3g)",
                              name, nf, v >> 1, diff, ref);
                if (i == pl.n) /* x's gradient goes through every product */
                    ck_assert_msg(diff > 0.0, "bf16 gradient of x equals fp32's");
            }
            cg_release_all(3, y, yw, loss);
        }
        for (int i = 0; i < ng; i++)
            cg_release(g32[i]);
        free(g32);
        cg_param_list_free(&pl);
        cg_release_all(3, x, mem, w);
        cg_module_free(CG_MODULE(layer));
    }
}
END_TEST

/* ------------------------------------------------ prepacked bf16 weights */

/* cg_sgemm_path's product as one sum over k: its k blocks (cg_gemm_k_block)
 * added one after another, which no split changes (cg_gemm_k_split) */
static void one_sum(cg_gemm_path path, int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                    int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
                    int64_t rsc, int64_t csc)
{
    for (int64_t i = 0, kb; i < k; i += kb) {
        kb = cg_gemm_k_block(path, k, i);
        ck_assert_int_eq(cg_gemm_k_split(path, m, n, kb), 0);
        ck_assert(cg_sgemm_path(path, 1, m, n, kb, 1.0f, a + i * csa, rsa, csa, b + i * rsb, rsb,
                                csb, i ? 1.0f : beta, c, rsc, csc));
    }
}

/* y = x W^T (+ bias) on a packed W, against cg_sgemm_path on the same path
 * (bit for bit, y prefilled with the bias and beta 1 as a linear layer does)
 * and against float64 within the bf16 bound; W and x in several layouts,
 * M = 1..8 and beyond a tile, odd N and K across the tile and k block; the
 * bias every second element when x's layout is odd (a strided bias). */
static void matrix_case(cg_rng *rng, cg_gemm_path path, int64_t M, int64_t N, int64_t K, int lw,
                        int lx, bool padded_y, bool with_bias)
{
    int64_t rsw, csw, rsx, csx;
    size_t nw, nx;
    layout(lw, N, K, &rsw, &csw, &nw);
    layout(lx, M, K, &rsx, &csx, &nx);
    const int64_t rsy = padded_y ? N + 3 : N;
    const size_t ny = (size_t)((M - 1) * rsy + N);
    const int64_t bs = 1 + lx % 2;
    float *w = rand_buf(rng, nw), *x = rand_buf(rng, nx), *bias = rand_buf(rng, (size_t)(N * bs));
    float *y = malloc(ny * sizeof(float)), *ref = malloc(ny * sizeof(float));
    for (size_t i = 0; i < ny; i++)
        y[i] = ref[i] = NAN; /* gaps must stay untouched */
    cg_bf16_matrix *pw = cg_bf16_matrix_new(N, K, w, rsw, csw);
    ck_assert_ptr_nonnull(pw);
    ck_assert_int_eq(cg_bf16_matrix_rows(pw), N);
    ck_assert_int_eq(cg_bf16_matrix_cols(pw), K);
    ck_assert(cg_bf16_matrix_bytes(pw) >= (size_t)(N * K) * 2);
    ck_assert(
        cg_bf16_matrix_mul(pw, path, 1, M, x, rsx, csx, with_bias ? bias : NULL, bs, y, rsy, 1));
    if (with_bias)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                ref[i * rsy + j] = bias[j * bs];
    if (cg_gemm_k_split(path, M, N, K)) /* cg_sgemm would split it: its one sum */
        one_sum(path, M, N, K, x, rsx, csx, w, csw, rsw, with_bias ? 1.0f : 0.0f, ref, rsy, 1);
    else
        ck_assert(cg_sgemm_path(path, 1, M, N, K, 1.0f, x, rsx, csx, w, csw, rsw,
                                with_bias ? 1.0f : 0.0f, ref, rsy, 1));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float got = y[i * rsy + j];
            if (to_bits(got) != to_bits(ref[i * rsy + j]))
                ck_abort_msg("%s %lldx%lldx%lld layouts %d%d bias %d: packed %a, gemm %a at "
                             "[%lld,%lld]",
                             cg_gemm_path_name(path), (long long)M, (long long)N, (long long)K, lw,
                             lx, (int)with_bias, (double)got, (double)ref[i * rsy + j],
                             (long long)i, (long long)j);
            double sx = with_bias ? bias[j * bs] : 0.0, mag = with_bias ? fabs(bias[j * bs]) : 0.0;
            for (int64_t p = 0; p < K; p++) {
                double t = (double)x[i * rsx + p * csx] * w[j * rsw + p * csw];
                sx += t;
                mag += fabs(t);
            }
            if (!(fabs(got - sx) <= (0x1p-7 + 0x1p-24 * (double)(K + 3)) * mag + 1e-30))
                ck_abort_msg("packed %lldx%lldx%lld: y[%lld,%lld] = %.9g, exact %.9g", (long long)M,
                             (long long)N, (long long)K, (long long)i, (long long)j, (double)got,
                             sx);
        }
    if (padded_y) /* the row gaps were not written */
        for (int64_t i = 0; i + 1 < M; i++)
            for (int64_t j = N; j < rsy; j++)
                ck_assert(isnan(y[i * rsy + j]));
    cg_bf16_matrix_free(pw);
    free(w);
    free(x);
    free(bias);
    free(y);
    free(ref);
}

START_TEST(test_matrix_against_gemm)
{
    cg_rng rng = cg_rng_new(21);
    const cg_gemm_path path = cg_bf16_auto_path();
    const int64_t nk[][2] = {{1, 1}, {31, 15}, {33, 17}, {97, 385}, {65, 769}, {7, 2}};
    const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 13, 25};
    for (size_t a = 0; a < sizeof nk / sizeof nk[0]; a++)
        for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++) {
            const int v = (int)(a + b);
            matrix_case(&rng, path, ms[b], nk[a][0], nk[a][1], v % 4, (v / 2) % 4, v % 3 == 0,
                        v % 2 == 0);
        }
    /* the shapes of charlm base decoding: q/k/v/o, fc1, fc2, the head */
    matrix_case(&rng, path, 1, 384, 384, 0, 0, false, true);
    matrix_case(&rng, path, 1, 1536, 384, 0, 0, false, true);
    matrix_case(&rng, path, 2, 384, 1536, 0, 0, false, true);
    matrix_case(&rng, path, 1, 65, 384, 0, 0, false, false);
    /* more than 64 rows of x: the GEMM driver with W's panels as A (on AMX
     * each panel of x packed just before its use), n, k and m off every
     * tile, pair and block edge */
    matrix_case(&rng, path, 100, 65, 769, 0, 1, true, true);
    matrix_case(&rng, path, 130, 97, 385, 1, 3, false, false);
    matrix_case(&rng, path, 3100, 33, 17, 2, 0, true, true);
    /* every other path on its own, whatever the CPU takes */
    for (int p = 0; p < NPATHS; p++)
        if (bf16_paths[p] != path && cg_gemm_path_available(bf16_paths[p])) {
            matrix_case(&rng, bf16_paths[p], 3, 97, 385, 1, 2, true, true);
            matrix_case(&rng, bf16_paths[p], 1, 33, 17, 0, 3, false, false);
            matrix_case(&rng, bf16_paths[p], 25, 65, 769, 2, 1, true, true);
        }
}
END_TEST

/* The emulated product gives the native bits (nasty inputs included), and
 * 1 and 2 threads give the same bits on both paths. */
START_TEST(test_matrix_paths_threads)
{
    cg_rng rng = cg_rng_new(23);
    const int64_t dims[][3] = {
        {1, 1536, 384}, {3, 385, 769}, {8, 97, 33}, {1, 4100, 9}, {200, 97, 385}};
    const cg_gemm_path paths[] = {CG_GEMM_BF16, CG_GEMM_BF16_EMULATED, CG_GEMM_BF16_AMX};
    for (int d = 0; d < 5; d++) {
        const int64_t M = dims[d][0], N = dims[d][1], K = dims[d][2];
        float *w = d % 2 ? nasty_buf(&rng, (size_t)(N * K)) : rand_buf(&rng, (size_t)(N * K));
        float *x = d % 2 ? nasty_buf(&rng, (size_t)(M * K)) : rand_buf(&rng, (size_t)(M * K));
        float *bias = rand_buf(&rng, (size_t)N);
        float *y[3][2];
        cg_bf16_matrix *pw = cg_bf16_matrix_new(N, K, w, K, 1);
        ck_assert_ptr_nonnull(pw);
        for (int p = 0; p < 3; p++)
            for (int t = 0; t < 2; t++) {
                y[p][t] = malloc((size_t)(M * N) * sizeof(float));
                if (!cg_gemm_path_available(paths[p])) {
                    memset(y[p][t], 0, (size_t)(M * N) * sizeof(float));
                    continue;
                }
                ck_assert(
                    cg_bf16_matrix_mul(pw, paths[p], t + 1, M, x, K, 1, bias, 1, y[p][t], N, 1));
            }
        for (int p = 0; p < 3; p++)
            ck_assert_msg(memcmp(y[p][0], y[p][1], (size_t)(M * N) * sizeof(float)) == 0,
                          "%s %lldx%lldx%lld: 1 vs 2 threads differ", cg_gemm_path_name(paths[p]),
                          (long long)M, (long long)N, (long long)K);
        if (cg_bf16_emulation_avx512 && cg_gemm_path_available(CG_GEMM_BF16_EMULATED)) {
            /* the emulation's AVX2 kernel: the bits of its AVX-512 one */
            float *y2 = malloc((size_t)(M * N) * sizeof(float));
            cg_bf16_emulation_use_avx512(false);
            ck_assert(
                cg_bf16_matrix_mul(pw, CG_GEMM_BF16_EMULATED, 2, M, x, K, 1, bias, 1, y2, N, 1));
            cg_bf16_emulation_use_avx512(true);
            ck_assert_msg(memcmp(y2, y[1][0], (size_t)(M * N) * sizeof(float)) == 0,
                          "packed %lldx%lldx%lld: emulated on AVX2 and AVX-512 differ",
                          (long long)M, (long long)N, (long long)K);
            free(y2);
        }
        if (cg_gemm_path_available(CG_GEMM_BF16))
            for (int64_t i = 0; i < M * N; i++)
                if (to_bits(y[0][0][i]) != to_bits(y[1][0][i]) &&
                    !(isnan(y[0][0][i]) && isnan(y[1][0][i])))
                    ck_abort_msg("packed %lldx%lldx%lld: native %a, emulated %a at %lld",
                                 (long long)M, (long long)N, (long long)K, (double)y[0][0][i],
                                 (double)y[1][0][i], (long long)i);
        for (int p = 0; p < 3; p++)
            for (int t = 0; t < 2; t++)
                free(y[p][t]);
        cg_bf16_matrix_free(pw);
        free(w);
        free(x);
        free(bias);
    }
    /* bad arguments: an error, no crash */
    ck_assert_ptr_null(cg_bf16_matrix_new(0, 3, (float[]){1}, 1, 1));
    ck_assert_ptr_null(cg_bf16_matrix_new(2, 3, NULL, 3, 1));
    ck_assert(!cg_bf16_matrix_mul(NULL, CG_GEMM_AUTO, 0, 1, (float[]){1}, 1, 1, NULL, 1,
                                  (float[]){0}, 1, 1));
    cg_bf16_matrix *one = cg_bf16_matrix_new(1, 1, (float[]){2}, 1, 1);
    ck_assert(!cg_bf16_matrix_mul(one, CG_GEMM_SKX, 0, 1, (float[]){1}, 1, 1, NULL, 1, (float[]){0},
                                  1, 1));
    cg_bf16_matrix_free(one);
    cg_bf16_matrix_free(NULL);
}
END_TEST

/* The bf16 reference of a linear layer: cg_affine with a graph (grad on),
 * i.e. the bf16 GEMM path, never the packed weight. */
static float *affine_ref(cg_linear *l, cg_tensor *x)
{
    cg_tensor *xc = cg_contiguous(x);
    const cg_tensor *w = l->weight;
    const int64_t in = w->shape[1], out = w->shape[0], M = cg_numel(xc) / in;
    float *v = malloc((size_t)(M * out) * sizeof(float));
    ck_assert(cg_sgemm_bias_path(cg_bf16_auto_path(), 0, M, out, in, cg_data(xc), in, 1, cg_data(w),
                                 w->strides[1], w->strides[0], cg_data(l->bias),
                                 l->bias->strides[0], v, out, 1));
    cg_release(xc);
    return v;
}

static float *packed_out(cg_linear *l, cg_tensor *x)
{
    cg_no_grad_begin();
    cg_tensor *y = cg_linear_forward(l, x);
    cg_no_grad_end();
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    float *v = cg_test_values(y);
    cg_release(y);
    return v;
}

/* The bf16 weight cache: an MLP of three Linear layers trained in bf16, two
 * micro-batches a step, converts and packs each weight once per step and
 * orientation (forward W, dx's W^T: 6 a step), the second micro-batch
 * reading the kept copies, and frees them at the optimizer step; its losses
 * and weights equal bit for bit a run with the cache off (limit 0, where
 * every product packs its own: 12 a step) and keep nothing. After a write
 * through cg_data() announced with cg_tensor_modified, the input gradient
 * (dx = dy W, W^T's copy) uses the new W: the bits of the bf16 GEMM on it. */
static void cache_run(size_t limit, float *losses, float *wts, uint64_t *packs)
{
    cg_weight_cache_limit(limit);
    cg_rng rng = cg_rng_new(41);
    cg_linear *l[3] = {cg_linear_new(70, 96, true, &rng), cg_linear_new(96, 80, true, &rng),
                       cg_linear_new(80, 33, true, &rng)};
    cg_module *root = cg_module_new("mlp");
    cg_module_add_child(root, "a", l[0]);
    cg_module_add_child(root, "b", l[1]);
    cg_module_add_child(root, "c", l[2]);
    cg_optim *opt = cg_adamw_from_module(root, 1e-2);
    const cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
    for (int step = 0; step < 3; step++) {
        const uint64_t p0 = cg_weight_cache_stats().packs;
        for (int mb = 0; mb < 2; mb++) {
            cg_scope *sc = cg_scope_begin();
            cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(150, 70)), true);
            cg_tensor *h = cg_gelu(cg_linear_forward(l[0], x));
            h = cg_gelu(cg_linear_forward(l[1], h));
            cg_tensor *loss =
                cg_sum_all(cg_mul(cg_linear_forward(l[2], h), cg_linear_forward(l[2], h)));
            ck_assert_msg(loss && cg_backward(loss, NULL, false), "%s", cg_last_error());
            losses[2 * step + mb] = cg_item(loss);
            cg_scope_end(sc);
        }
        packs[step] = cg_weight_cache_stats().packs - p0;
        ck_assert(cg_optim_step(opt));
        cg_optim_zero_grad(opt);
        ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0); /* the step freed them */
    }
    for (int i = 0; i < 3; i++)
        memcpy(wts + i * 96 * 80, cg_data(l[i]->weight),
               (size_t)cg_numel(l[i]->weight) * sizeof(float));
    cg_autocast_end(prev);
    cg_optim_free(opt);
    cg_module_free(root);
    cg_weight_cache_limit((size_t)1 << 30);
}

/* l's forward without a graph, its output let go */
static void forward_nograd(cg_linear *l, cg_tensor *x)
{
    cg_no_grad_begin();
    cg_tensor *y = cg_linear_forward(l, x);
    cg_no_grad_end();
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    cg_release(y);
}

/* Lowering the weight cache's limit frees the copies beyond it at once,
 * the oldest first: they stayed (and were read) until their weights were
 * written or freed, so a limit of 0 kept the copies already made. */
START_TEST(test_weight_cache_limit_lowered)
{
    cg_rng rng = cg_rng_new(43);
    cg_linear *a = cg_linear_new(64, 48, false, &rng), *b = cg_linear_new(64, 40, false, &rng);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(8, 64));
    const cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
    const size_t base = cg_weight_cache_stats().bytes;
    forward_nograd(a, x);
    const size_t ea = cg_weight_cache_stats().bytes - base;
    forward_nograd(b, x);
    const size_t eb = cg_weight_cache_stats().bytes - base - ea;
    ck_assert(ea > 0 && eb > 0);
    cg_weight_cache_limit(base + eb); /* room for the newest: a's copy goes */
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, base + eb);
    cg_weight_cache_limit(0); /* keeps nothing, b's copy included */
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0);
    const cg_cache_stats s0 = cg_weight_cache_stats();
    forward_nograd(b, x); /* packs its own, reads no copy kept before */
    const cg_cache_stats s1 = cg_weight_cache_stats();
    ck_assert_uint_eq(s1.packs, s0.packs + 1);
    ck_assert_uint_eq(s1.hits, s0.hits);
    ck_assert_uint_eq(s1.bytes, 0);
    cg_weight_cache_limit((size_t)1 << 30);
    forward_nograd(a, x); /* cached again */
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, ea);
    cg_autocast_end(prev);
    cg_module_free(CG_MODULE(a));
    cg_module_free(CG_MODULE(b));
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0);
    cg_release(x);
}
END_TEST

/* a's and b's values, bit for bit */
static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    float *x = cg_test_values(a), *y = cg_test_values(b);
    const bool same =
        cg_numel(a) == cg_numel(b) && !memcmp(x, y, (size_t)cg_numel(a) * sizeof(float));
    free(x);
    free(y);
    return same;
}

/* cg_k_linear_packed in fp32: the bits of cg_k_linear for x's rows on both
 * sides of CG_GEMM_SKINNY and CG_K_LINEAR_PACKED_ROWS and W's on both sides
 * of CG_GEMM_SKINNY, one column to three k blocks, with and without a bias,
 * 1 and 2 threads; W packed once into the cache's fp32 form (a pack, then
 * a hit) where the fp32 path reads such panels and the rows are within
 * those bounds, and no copy otherwise. After a write
 * announced with cg_tensor_modified the next product reads the new W. The
 * inference forms of cg_k_linear_act and cg_k_linear_residual (saved and
 * mask NULL) read the copy too, with the bits of their recording forms. */
static void linear_packed_f32_case(cg_rng *rng, int64_t N, int64_t out, int64_t in, bool bias,
                                   int nt)
{
    cg_set_num_threads(nt);
    cg_tensor *x = cg_randn(rng, CG_SHAPE(N, in)), *w = cg_randn(rng, CG_SHAPE(out, in));
    cg_tensor *b = bias ? cg_randn(rng, CG_SHAPE(out)) : NULL;
    const bool kept = cg_f32_packed_usable() && N > CG_GEMM_SKINNY &&
                      N <= CG_K_LINEAR_PACKED_ROWS && out > CG_GEMM_SKINNY;
    cg_tensor *want = cg_k_linear(x, w, b);
    const cg_cache_stats s0 = cg_weight_cache_stats();
    cg_tensor *y1 = cg_k_linear_packed(x, w, b), *y2 = cg_k_linear_packed(x, w, b);
    const cg_cache_stats s1 = cg_weight_cache_stats();
    ck_assert_msg(y1 && y2, "%s", cg_last_error());
    ck_assert_msg(same_bits(y1, want) && same_bits(y2, want),
                  "%lld x %lld x %lld, %s bias, %d threads", (long long)N, (long long)out,
                  (long long)in, bias ? "a" : "no", nt);
    ck_assert_uint_eq(s1.packs - s0.packs, kept ? 1 : 0);
    ck_assert_uint_eq(s1.hits - s0.hits, kept ? 1 : 0);
    ck_assert(kept ? s1.bytes > s0.bytes : s1.bytes == s0.bytes);
    /* a write through cg_data(), announced: the copy is remade */
    cg_data(w)[in + 1] += 1.0f;
    cg_tensor_modified(w);
    cg_tensor *want2 = cg_k_linear(x, w, b), *y3 = cg_k_linear_packed(x, w, b);
    ck_assert(same_bits(y3, want2) && !same_bits(y3, want));
    /* the fused inference kernels */
    cg_tensor *saved = NULL, *ha = cg_k_linear_act(x, w, b, CG_K_ACT_GELU, &saved);
    cg_tensor *hi = cg_k_linear_act(x, w, b, CG_K_ACT_GELU, NULL);
    cg_tensor *res = cg_randn(rng, CG_SHAPE(N, out)), *mask = NULL;
    cg_tensor *ra = cg_k_linear_residual(x, w, b, res, 0.0f, NULL, &mask);
    cg_tensor *ri = cg_k_linear_residual(x, w, b, res, 0.0f, NULL, NULL);
    ck_assert(ha && hi && ra && ri && same_bits(ha, hi) && same_bits(ra, ri));
    const cg_cache_stats s2 = cg_weight_cache_stats();
    ck_assert_uint_eq(s2.packs - s1.packs, kept ? 1 : 0); /* the remade copy, read by all */
    cg_release_all(10, x, w, b, want, y1, y2, want2, y3, saved, ha);
    cg_release_all(4, hi, res, ra, ri);
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, s0.bytes); /* died with W */
}

START_TEST(test_linear_packed_f32)
{
    ck_assert(cg_get_matmul_precision() == CG_PRECISION_FP32);
    cg_rng rng = cg_rng_new(47);
    const int64_t kc = cg_gemm_k_block(CG_GEMM_AUTO, 100000, 0);
    const int64_t Ns[] = {1,  CG_GEMM_SKINNY,          CG_GEMM_SKINNY + 1,
                          33, CG_K_LINEAR_PACKED_ROWS, CG_K_LINEAR_PACKED_ROWS + 1};
    const int64_t outs[] = {3, CG_GEMM_SKINNY + 1, 40, 130};
    const int64_t ins[] = {1, 7, kc > 0 ? kc + 5 : 389, kc > 0 ? 2 * kc + 3 : 771};
    for (int i = 0; i < 6; i++)
        for (int o = 0; o < 4; o++)
            for (int k = 0; k < 4; k++)
                for (int v = 0; v < 4; v++)
                    linear_packed_f32_case(&rng, Ns[i], outs[o], ins[k], v & 1, 1 + v / 2);
    cg_set_num_threads(0);
    /* the packed product's own checks */
    if (cg_f32_packed_usable()) {
        float wv[6 * 3] = {0}, xv[2 * 3] = {0}, yv[2 * 6];
        cg_f32_packed *pm = cg_f32_packed_new(6, 3, wv, 3, 1);
        ck_assert_ptr_nonnull(pm);
        ck_assert(!cg_f32_packed_mul(pm, 1, 2, xv, 3, 1, NULL, 0, yv, 6));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "more than 4 rows"));
        cg_f32_packed_free(pm);
    }
    ck_assert_ptr_null(cg_f32_packed_new(0, 3, (float[]){1}, 3, 1));
    cg_f32_packed_free(NULL);
    /* nn's layers without a graph read it (one pack, then hits), with it not */
    cg_linear *l = cg_linear_new(40, 24, true, &rng);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(16, 40));
    const cg_cache_stats s0 = cg_weight_cache_stats();
    cg_tensor *yg = cg_linear_forward(l, x);
    const cg_cache_stats s1 = cg_weight_cache_stats();
    forward_nograd(l, x);
    forward_nograd(l, x);
    const cg_cache_stats s2 = cg_weight_cache_stats();
    const bool usable = cg_f32_packed_usable();
    ck_assert(yg && s1.packs == s0.packs && s1.hits == s0.hits);
    ck_assert_uint_eq(s2.packs - s1.packs, usable ? 1 : 0);
    ck_assert_uint_eq(s2.hits - s1.hits, usable ? 1 : 0);
    cg_release_all(2, yg, x);
    cg_module_free(CG_MODULE(l));
}
END_TEST

/* cg_k_linear_packed in fp32 on weights of other layouts: a transposed
 * view, views of one storage taken in turn (each replaces the other's
 * copy: the slot keys the view), every second column, more rows of W
 * than the driver's MC block (480), and a square W and its transpose in
 * turn (one offset and shape: only the strides tell them apart); each the
 * bits of cg_k_linear, at 1 and 2 threads. */
START_TEST(test_linear_packed_f32_layouts)
{
    cg_rng rng = cg_rng_new(49);
    enum { N = 37, IN = 45, OUT = 50, BIG = 500 };
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, IN)), *b = cg_randn(&rng, CG_SHAPE(BIG));
    cg_tensor *wt = cg_randn(&rng, CG_SHAPE(IN, OUT)), *all = cg_randn(&rng, CG_SHAPE(3 * OUT, IN));
    cg_tensor *wide = cg_randn(&rng, CG_SHAPE(OUT, 2 * IN)),
              *big = cg_randn(&rng, CG_SHAPE(BIG, IN)), *sq = cg_randn(&rng, CG_SHAPE(IN, IN));
    cg_tensor *ws[8] = {cg_view_transpose(wt, 0, 1),
                        cg_view_narrow(all, 0, 0, OUT),
                        cg_view_narrow(all, 0, 2 * OUT, OUT),
                        cg_view_narrow(all, 0, 0, OUT),
                        cg_view_slice(wide, 1, 0, 2 * IN, 2),
                        big,
                        sq,
                        cg_view_transpose(sq, 0, 1)};
    for (int nt = 1; nt <= 2; nt++) {
        cg_set_num_threads(nt);
        for (int i = 0; i < 8; i++) {
            cg_tensor *bi = cg_view_narrow(b, 0, 0, ws[i]->shape[0]);
            cg_tensor *want = cg_k_linear(x, ws[i], bi), *y = cg_k_linear_packed(x, ws[i], bi);
            ck_assert_msg(y && same_bits(y, want), "weight %d, %d threads: %s", i, nt,
                          cg_last_error());
            cg_release_all(3, bi, want, y);
        }
    }
    cg_set_num_threads(0);
    for (int i = 0; i < 5; i++)
        cg_release(ws[i]);
    cg_release(ws[7]);
    cg_release_all(7, x, b, wt, all, wide, big, sq);
}
END_TEST

/* Under a limit that holds one copy, views of one storage taken in turn
 * replace each other's copy (the stale one counted as freed against the
 * limit): the second view's next product is a hit, not a product that
 * reads W for want of room. A limit lowered below two copies frees both. */
START_TEST(test_weight_cache_replaces_at_limit)
{
    if (!cg_f32_packed_usable())
        return; /* the fp32 form is the skx driver's */
    cg_rng rng = cg_rng_new(50);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(37, 45)), *all = cg_randn(&rng, CG_SHAPE(100, 45));
    cg_tensor *a = cg_view_narrow(all, 0, 0, 50), *b = cg_view_narrow(all, 0, 50, 50);
    const size_t limit = cg_weight_cache_stats().limit, base = cg_weight_cache_stats().bytes;
    cg_tensor *ya = cg_k_linear_packed(x, a, NULL);
    const size_t one = cg_weight_cache_stats().bytes - base;
    ck_assert(ya && one > 0);
    cg_weight_cache_limit(base + one);
    cg_tensor *yb = cg_k_linear_packed(x, b, NULL);
    const cg_cache_stats s0 = cg_weight_cache_stats();
    cg_tensor *yb2 = cg_k_linear_packed(x, b, NULL);
    const cg_cache_stats s1 = cg_weight_cache_stats();
    ck_assert(yb && yb2 && same_bits(yb, yb2));
    ck_assert_uint_eq(s1.hits - s0.hits, 1);
    ck_assert_uint_eq(s1.packs, s0.packs);
    ck_assert_uint_eq(s1.bytes, base + one);
    /* two copies (b's and c's), then a limit of 0: both freed at once */
    cg_weight_cache_limit(limit);
    cg_tensor *c = cg_randn(&rng, CG_SHAPE(50, 45)), *yc = cg_k_linear_packed(x, c, NULL);
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, base + 2 * one);
    cg_weight_cache_limit(0);
    ck_assert_uint_eq(cg_weight_cache_stats().bytes, 0);
    cg_weight_cache_limit(limit);
    cg_release_all(9, x, all, a, b, ya, yb, yb2, c, yc);
}
END_TEST

/* An fp32 product without a graph reads W's packed copy only when the
 * cache keeps it: with no room for the copy under the cache's limit (0
 * here, or weights beyond it), it reads W itself as the uncached product
 * does, with the same bits, and packs nothing (it packed a copy of W's
 * size for every product and freed it: a transient copy of every weight,
 * 128 MB more at the peak for a 128 MB weight, with the cache off). Room
 * made again: one pack, kept; the limit lowered below it: freed, W read
 * again. */
START_TEST(test_linear_packed_f32_over_limit)
{
    if (!cg_f32_packed_usable())
        return; /* the fp32 form is the skx driver's */
    cg_rng rng = cg_rng_new(48);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(40, 64)), *w = cg_randn(&rng, CG_SHAPE(48, 64));
    cg_tensor *b = cg_randn(&rng, CG_SHAPE(48));
    cg_tensor *want = cg_k_linear(x, w, b), *saved = NULL, *act = NULL;
    cg_tensor *want_act = cg_k_linear_act(x, w, b, CG_K_ACT_GELU, &saved);
    const size_t limit = cg_weight_cache_stats().limit;
    for (int pass = 0; pass < 3; pass++) {
        /* 0: no room; 1: room (one pack, then kept); 2: the limit lowered
         * below the kept copy's size (which frees it) */
        const size_t bytes = cg_weight_cache_stats().bytes;
        cg_weight_cache_limit(pass == 0 ? 0 : pass == 1 ? limit : bytes - 1);
        const cg_cache_stats s0 = cg_weight_cache_stats();
        cg_tensor *y = cg_k_linear_packed(x, w, b);
        act = cg_k_linear_act(x, w, b, CG_K_ACT_GELU, NULL);
        const cg_cache_stats s1 = cg_weight_cache_stats();
        ck_assert_msg(y && act, "%s", cg_last_error());
        ck_assert_msg(same_bits(y, want) && same_bits(act, want_act), "pass %d", pass);
        ck_assert_uint_eq(s1.packs - s0.packs, pass == 1 ? 1 : 0);
        ck_assert_uint_eq(s1.hits - s0.hits, pass == 1 ? 1 : 0);
        ck_assert(pass == 1 ? s1.bytes > 0 : s1.bytes == 0);
        cg_release_all(2, y, act);
    }
    cg_weight_cache_limit(limit);
    cg_release_all(6, x, w, b, want, want_act, saved);
}
END_TEST

/* In bf16, `passes` times: dx of the linear backward has the bits of
 * dy W on the bf16 path (W^T read from the cache's copy), then W's element
 * at + pass is written, announced with cg_tensor_modified or by its
 * storage's version alone: the next pass must read the new W. */
static void dx_follows_writes(const cg_tensor *x, cg_tensor *w, const cg_tensor *g, int passes,
                              int64_t at, bool announce)
{
    const int64_t N = x->shape[0], IN = w->shape[1], OUT = w->shape[0];
    float *ref = malloc((size_t)(N * IN) * sizeof(float));
    ck_assert(ref);
    const cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
    for (int pass = 0; pass < passes; pass++) {
        cg_tensor *dx = NULL;
        ck_assert(cg_k_linear_backward(x, w, g, NULL, &dx, NULL, NULL));
        ck_assert(cg_sgemm_path(cg_bf16_auto_path(), 0, N, IN, OUT, 1.0f, cg_data(g), OUT, 1,
                                cg_data(w), IN, 1, 0.0f, ref, IN, 1));
        ck_assert_mem_eq(cg_data(dx), ref, (size_t)(N * IN) * sizeof(float));
        cg_release(dx);
        cg_data(w)[at + pass] += 3.0f;
        if (announce)
            cg_tensor_modified(w);
        else
            w->storage->version++;
    }
    cg_autocast_end(prev);
    free(ref);
}

START_TEST(test_weight_cache)
{
    float loss[2][6],
        *w[2] = {calloc(3 * 96 * 80, sizeof(float)), calloc(3 * 96 * 80, sizeof(float))};
    uint64_t packs[2][3];
    cache_run((size_t)1 << 30, loss[0], w[0], packs[0]);
    cache_run(0, loss[1], w[1], packs[1]);
    for (int s = 0; s < 3; s++) {
        /* the third layer is used twice a micro-batch: still once a step */
        ck_assert_uint_eq(packs[0][s], 6);
        ck_assert_uint_eq(packs[1][s], 2 * (4 + 4));
    }
    ck_assert_mem_eq(loss[0], loss[1], sizeof loss[0]);
    ck_assert_mem_eq(w[0], w[1], 3 * 96 * 80 * sizeof(float));
    free(w[0]);
    free(w[1]);

    /* a raw write announced: the backward's W^T copy is remade */
    cg_rng rng = cg_rng_new(43);
    enum { N = 130, IN = 70, OUT = 45 };
    cg_tensor *wt = cg_randn(&rng, CG_SHAPE(OUT, IN)), *x = cg_randn(&rng, CG_SHAPE(N, IN));
    cg_tensor *g = cg_randn(&rng, CG_SHAPE(N, OUT));
    dx_follows_writes(x, wt, g, 3, 7, true);
    cg_release_all(3, wt, x, g);
}
END_TEST

/* A cached copy is keyed by its storage's version as well: a version that
 * moved on without the slot being freed (a write path that bumped the
 * counter alone; cg_tensor_modified does both) is a miss, and the product
 * reads the new W, in the fp32 form (where this CPU has it) and in the
 * backward's bf16 W^T form. */
START_TEST(test_weight_cache_version_moved)
{
    cg_rng rng = cg_rng_new(44);
    enum { N = 130, IN = 70, OUT = 45 };
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(OUT, IN)), *x = cg_randn(&rng, CG_SHAPE(N, IN));
    cg_tensor *g = cg_randn(&rng, CG_SHAPE(N, OUT));
    if (cg_f32_packed_usable()) {
        cg_tensor *y0 = cg_k_linear_packed(x, w, NULL);
        ck_assert(y0);
        cg_data(w)[3] += 2.0f;
        w->storage->version++;
        cg_tensor *want = cg_k_linear(x, w, NULL), *y1 = cg_k_linear_packed(x, w, NULL);
        ck_assert(want && y1 && same_bits(y1, want) && !same_bits(y1, y0));
        cg_release_all(3, y0, want, y1);
    }
    dx_follows_writes(x, w, g, 2, 5, false);
    cg_release_all(3, w, x, g);
}
END_TEST

/* nn's inference path in bf16 reads a packed bf16 copy of the weight (the
 * bf16 weight cache, which the graph's products share): the bits of the
 * bf16 GEMM on the fp32 weight, for few rows and many; made once, and never
 * used after the weight is written (an optimizer step, an in-place op, a
 * write through cg_data() announced with cg_tensor_modified). fp32 never
 * makes one. */
START_TEST(test_packed_linear_refresh)
{
    cg_rng rng = cg_rng_new(31);
    const int64_t in = 385, out = 97, M = 3;
    cg_linear *l = cg_linear_new(in, out, true, &rng);
    ck_assert_ptr_nonnull(l);
    ck_assert(cg_normal_(l->bias, &rng, 0.0f, 1.0f));
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(1, M, in));
    cg_tensor *big = cg_randn(&rng, CG_SHAPE(200, in));
    cg_storage *ws = l->weight->storage;
    const size_t bytes = (size_t)(M * out) * sizeof(float);

    float *y = packed_out(l, x); /* fp32: no copy */
    ck_assert_ptr_null(ws->derived);
    free(y);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    float *ref = affine_ref(l, x);
    ck_assert_ptr_null(ws->derived);
    float *refbig = affine_ref(l, big);
    y = packed_out(l, big); /* many rows: the GEMM's driver on the copy */
    ck_assert_ptr_nonnull(ws->derived);
    ck_assert_mem_eq(y, refbig, (size_t)((200) * out) * sizeof(float));
    free(y);
    free(refbig);
    y = packed_out(l, x);
    ck_assert_ptr_nonnull(ws->derived);
    ck_assert_mem_eq(y, ref, bytes);
    const void *kept = ws->derived;
    free(y);
    y = packed_out(l, x); /* the kept copy is reused */
    ck_assert_ptr_eq(ws->derived, kept);
    ck_assert_mem_eq(y, ref, bytes);
    free(y);
    free(ref);

    /* an optimizer step changes W: the copy is dropped and remade */
    cg_tensor *fx = cg_affine(x, l->weight, l->bias), *loss = cg_sum_all(fx);
    ck_assert(cg_backward(loss, NULL, false));
    cg_optim *o = cg_sgd_from_module(CG_MODULE(l), 0.5);
    ck_assert(cg_optim_step(o));
    ck_assert_ptr_null(ws->derived);
    ref = affine_ref(l, x);
    y = packed_out(l, x);
    ck_assert_mem_eq(y, ref, bytes);
    free(y);
    free(ref);
    /* in-place ops and announced raw writes */
    for (int w = 0; w < 3; w++) {
        float *before = packed_out(l, x);
        ck_assert_ptr_nonnull(ws->derived);
        if (w == 0)
            ck_assert(cg_k_muls_(l->weight, -2.0f));
        else if (w == 1) {
            cg_tensor *r = cg_randn(&rng, CG_SHAPE(out, in));
            ck_assert(cg_copy_(l->weight, r));
            cg_release(r);
        } else {
            cg_data(l->weight)[5] += 100.0f;
            cg_tensor_modified(l->weight);
        }
        ck_assert_ptr_null(ws->derived);
        ref = affine_ref(l, x);
        y = packed_out(l, x);
        ck_assert_mem_eq(y, ref, bytes);
        ck_assert_msg(memcmp(y, before, bytes) != 0, "write %d: the output did not change", w);
        free(y);
        free(ref);
        free(before);
    }
    /* a transposed view of the same storage gets its own copy */
    cg_tensor *wtv = cg_transpose(l->weight, 0, 1);
    cg_tensor *wt = cg_contiguous(wtv);     /* [in, out] */
    cg_tensor *tv = cg_transpose(wt, 0, 1); /* [out, in] view */
    cg_release(wtv);
    cg_no_grad_begin();
    cg_tensor *a = cg_linear_fn(x, tv, NULL);
    cg_no_grad_end();
    cg_tensor *b = cg_affine(x, tv, NULL);
    ck_assert(a && b);
    float *va = cg_test_values(a), *vb = cg_test_values(b);
    ck_assert_mem_eq(va, vb, bytes);
    free(va);
    free(vb);
    cg_release_all(4, a, b, wt, tv);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_optim_free(o);
    cg_release_all(4, x, big, fx, loss);
    cg_module_free(CG_MODULE(l));
}
END_TEST

/* An operand as the bf16 products round it (cg_bf16_round_run), element
 * for element of a strided buffer of n floats. */
static uint16_t *rounded_copy(const float *x, size_t n)
{
    uint16_t *h = malloc(n * sizeof(uint16_t));
    cg_bf16_round_run((int64_t)n, x, h);
    return h;
}

/* cg_bf16_round_run gives cg_bf16_round's bits (the GEMM's packing),
 * NaN, infinities and subnormals included, on runs of every length
 * around the vector width. */
START_TEST(test_round_run)
{
    cg_rng rng = cg_rng_new(41);
    for (size_t n = 0; n < 70; n++) {
        float *x = nasty_buf(&rng, n + 1);
        uint16_t *h = rounded_copy(x, n);
        for (size_t i = 0; i < n; i++) {
            const uint32_t want = to_bits(cg_bf16_round(x[i]));
            ck_assert_msg(want == (uint32_t)h[i] << 16, "%zu of %zu: %a gives %04x, not %08x", i, n,
                          (double)x[i], h[i], want);
        }
        free(x);
        free(h);
    }
}
END_TEST

/* A product given bf16 operands (cg_gemm_mixed_path: A, B or both) has the
 * bits of the product of the floats they were rounded from, on every bf16
 * path, every layout of A, B and C, 1 and 2 threads, NaN, infinities and
 * subnormals included; on an fp32 path the bits of the product of the
 * widened values. */
START_TEST(test_bf16_operands)
{
    cg_rng rng = cg_rng_new(43);
    const int64_t more[][3] = {{384, 256, 1000}, {64, 1100, 130}, {700, 40, 77}};
    const int nall = NSIZES + 3;
    for (int si = 0; si < nall; si++) {
        const int64_t *d = si < NSIZES ? sizes[si] : more[si - NSIZES];
        const int64_t m = d[0], n = d[1], k = d[2];
        for (int l = 0; l < 32; l++) {
            const int la = l & 3, lb = l >> 2 & 3, lc = l >> 4;
            if (si >= NSIZES && (la > 1 || lb > 1)) /* the larger ones row- or column-major */
                continue;
            int64_t rsa, csa, rsb, csb, rsc, csc;
            size_t na, nb, nc;
            layout(la, m, k, &rsa, &csa, &na);
            layout(lb, k, n, &rsb, &csb, &nb);
            layout(lc, m, n, &rsc, &csc, &nc);
            float *a = l % 3 ? rand_buf(&rng, na) : nasty_buf(&rng, na);
            float *b = l % 3 ? rand_buf(&rng, nb) : nasty_buf(&rng, nb);
            uint16_t *ah = rounded_copy(a, na), *bh = rounded_copy(b, nb);
            float *ref = malloc(nc * sizeof(float)), *got = malloc(nc * sizeof(float));
            for (int p = 0; p <= NPATHS; p++) {
                /* the bf16 paths, then fp32 (on the values as floats) */
                const cg_gemm_path path = p < NPATHS ? bf16_paths[p] : cg_gemm_active_path();
                if (!cg_gemm_path_available(path) || path_tested_by_plain_run(path) ||
                    (p == NPATHS && si >= NSIZES))
                    continue;
                float *aw = a, *bw = b;
                if (p == NPATHS) { /* fp32: the reference is the product of the bf16 values */
                    aw = malloc(na * sizeof(float));
                    bw = malloc(nb * sizeof(float));
                    for (size_t i = 0; i < na; i++)
                        aw[i] = cg_bf16_round(a[i]);
                    for (size_t i = 0; i < nb; i++)
                        bw[i] = cg_bf16_round(b[i]);
                }
                for (int nt = 1; nt <= 2; nt++) {
                    for (size_t i = 0; i < nc; i++)
                        ref[i] = (float)(i % 3) - 1.0f;
                    ck_assert(cg_sgemm_path(path, nt, m, n, k, 0.5f, aw, rsa, csa, bw, rsb, csb,
                                            1.0f, ref, rsc, csc));
                    for (unsigned bf = 1; bf <= 3; bf++) {
                        for (size_t i = 0; i < nc; i++)
                            got[i] = (float)(i % 3) - 1.0f;
                        const void *ap = bf & CG_GEMM_A_BF16 ? (const void *)ah : aw;
                        const void *bp = bf & CG_GEMM_B_BF16 ? (const void *)bh : bw;
                        ck_assert(cg_gemm_mixed_path(path, nt, m, n, k, 0.5f, ap, rsa, csa, bp, rsb,
                                                     csb, bf, 1.0f, got, rsc, csc));
                        for (size_t i = 0; i < nc; i++)
                            if (to_bits(got[i]) != to_bits(ref[i]) &&
                                !(p == NPATHS && isnan(got[i]) && isnan(ref[i])))
                                ck_abort_msg("%s %lldx%lldx%lld layouts %d%d%d bf16 %u, %d "
                                             "threads: %a, from floats %a at %zu",
                                             cg_gemm_path_name(path), (long long)m, (long long)n,
                                             (long long)k, la, lb, lc, bf, nt, (double)got[i],
                                             (double)ref[i], i);
                    }
                }
                if (p == NPATHS) {
                    free(aw);
                    free(bw);
                }
            }
            free(a);
            free(b);
            free(ah);
            free(bh);
            free(ref);
            free(got);
        }
    }
}
END_TEST

/* A packed weight times a bf16 x (cg_bf16_matrix_mul_bf16) has the bits
 * of the same product of the floats x was rounded from, for few and many
 * rows of x (the driver with prepacked panels), with and without a bias,
 * on every bf16 path and 1 and 2 threads. */
START_TEST(test_matrix_bf16_x)
{
    cg_rng rng = cg_rng_new(47);
    const int64_t dims[][3] = {{1, 33, 17},    {5, 97, 385},   {64, 65, 769},
                               {100, 65, 769}, {3100, 33, 17}, {300, 384, 384}};
    for (int d = 0; d < 6; d++) {
        const int64_t M = dims[d][0], N = dims[d][1], K = dims[d][2];
        float *w = rand_buf(&rng, (size_t)(N * K)), *bias = rand_buf(&rng, (size_t)N);
        float *x = d % 2 ? nasty_buf(&rng, (size_t)(M * K)) : rand_buf(&rng, (size_t)(M * K));
        uint16_t *xh = rounded_copy(x, (size_t)(M * K));
        float *y = malloc((size_t)(M * N) * sizeof(float));
        float *ref = malloc((size_t)(M * N) * sizeof(float));
        cg_bf16_matrix *pw = cg_bf16_matrix_new(N, K, w, K, 1);
        for (int p = 0; p < NPATHS; p++)
            for (int v = 0; v < 4; v++) {
                if (!cg_gemm_path_available(bf16_paths[p]) || tested_by_plain_run(bf16_paths[p]))
                    continue;
                const float *bs = v & 1 ? bias : NULL;
                const int nt = 1 + (v >> 1);
                ck_assert(cg_bf16_matrix_mul(pw, bf16_paths[p], nt, M, x, K, 1, bs, 1, ref, N, 1));
                ck_assert(
                    cg_bf16_matrix_mul_bf16(pw, bf16_paths[p], nt, M, xh, K, 1, bs, 1, y, N, 1));
                ck_assert_msg(memcmp(y, ref, (size_t)(M * N) * sizeof(float)) == 0,
                              "%s %lldx%lldx%lld bias %d, %d threads: bf16 x differs",
                              cg_gemm_path_name(bf16_paths[p]), (long long)M, (long long)N,
                              (long long)K, v & 1, nt);
            }
        cg_bf16_matrix_free(pw);
        free(w);
        free(bias);
        free(x);
        free(xh);
        free(y);
        free(ref);
    }
}
END_TEST

/* n vectors of k bf16 values ld >= k apart, ending right before an
 * unreadable page, so that a read past the last vector faults; the
 * elements between one vector's k values and the next vector are NaN and
 * infinities, so that a read past k gives NaN. The values are cg_rng's
 * finite ones, rounded; *f gets them as floats with the same layout (its
 * gaps NaN too). Free with guarded_free(p, n, ld, k). */
static size_t guarded_bytes(int64_t n, int64_t ld, int64_t k)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (size_t)((n - 1) * ld + k) * sizeof(uint16_t);
    return (bytes + page - 1) / page * page + page;
}
static uint16_t *guarded_operand(cg_rng *rng, int64_t n, int64_t ld, int64_t k, float **f)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = guarded_bytes(n, ld, k);
    const size_t elems = (size_t)((n - 1) * ld + k);
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(map != MAP_FAILED);
    ck_assert_int_eq(mprotect(map + len - page, page, PROT_NONE), 0);
    uint16_t *h = (uint16_t *)(map + len - page) - elems;
    *f = malloc(elems * sizeof(float));
    const uint16_t junk[] = {0x7fc0u, 0x7f80u, 0xff80u, 0xffc1u}; /* NaN, +Inf, -Inf, NaN */
    for (size_t i = 0; i < elems; i++) {
        const int64_t l = (int64_t)i % ld;
        h[i] = l < k ? (uint16_t)(to_bits(cg_bf16_round(4.0f * (cg_rng_uniform(rng) - 0.5f))) >> 16)
                     : junk[(size_t)l % 4];
        (*f)[i] = from_bits((uint32_t)h[i] << 16);
    }
    return h;
}
static void guarded_free(uint16_t *h, int64_t n, int64_t ld, int64_t k)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = guarded_bytes(n, ld, k);
    char *end = (char *)(h + (n - 1) * ld + k); /* the unreadable page */
    munmap(end + page - len, len);
}

/* A bf16 operand whose k runs contiguously (AMX and the native kernel
 * read whole panels of it in place, core/gemm_bf16.c b_in_place; the
 * native one only for an even k) gives the bits of the same
 * product of its values as floats (always packed), and reads nothing past
 * k or past the operand: k not a multiple of 32 (the last chunk copied)
 * and odd (its partner zero), a k block and a half, vectors of the
 * operand not a multiple of 32 (edge panels packed), the operand as A of a
 * row-stored C, as B of a column-stored one and as x of a packed weight
 * (few rows: x packed once; many: the driver), 1 and 2 threads, every bf16
 * path. Between the vectors NaN and infinities: any of them read gives
 * NaN where every output is finite. */
START_TEST(test_bf16_operand_in_place)
{
    cg_rng rng = cg_rng_new(67);
    const int64_t ks[] = {1, 16, 31, 32, 33, 64, 95, 384, 417, 769};
    /* vectors of the bf16 operand, and columns (rows of W) of the other */
    const int64_t dims[][2] = {{16, 40}, {32, 33}, {48, 97}, {97, 16}, {200, 64}, {70, 700}};
    for (int ki = 0; ki < 10; ki++)
        for (int d = 0; d < 6; d++) {
            const int64_t k = ks[ki], v = dims[d][0], w = dims[d][1];
            const int64_t ld = k + 1 + (k + d) % 7; /* odd pitches too */
            if (k > 100 && (d + ki) % 2)            /* half of the large ones */
                continue;
            float *xf;
            uint16_t *x = guarded_operand(&rng, v, ld, k, &xf);
            float *o = rand_buf(&rng, (size_t)(k * w)); /* [k, w] row-major; as W: [w, k] */
            float *ref = malloc((size_t)(v * w) * sizeof(float));
            float *got = malloc((size_t)(v * w) * sizeof(float));
            cg_bf16_matrix *pw = cg_bf16_matrix_new(w, k, o, k, 1);
            for (int p = 0; p < NPATHS; p++) {
                const cg_gemm_path path = bf16_paths[p];
                if (!cg_gemm_path_available(path) || tested_by_plain_run(path))
                    continue;
                for (int r = 0; r < 6; r++) {
                    const int nt = 1 + r % 2, route = r / 2;
                    float *y[2] = {ref, got};
                    for (int bf = 0; bf < 2; bf++) { /* floats, then bf16 */
                        const void *xp = bf ? (const void *)x : xf;
                        bool ok;
                        if (route == 0) /* C [v, w] row-stored = x [v, k] o [k, w] */
                            ok = cg_gemm_mixed_path(path, nt, v, w, k, 1.0f, xp, ld, 1, o, w, 1,
                                                    bf ? CG_GEMM_A_BF16 : 0, 0.0f, y[bf], w, 1);
                        else if (route == 1) /* C [w, v] column-stored = o^T [w, k] x^T */
                            ok = cg_gemm_mixed_path(path, nt, w, v, k, 1.0f, o, 1, w, xp, 1, ld,
                                                    bf ? CG_GEMM_B_BF16 : 0, 0.0f, y[bf], 1, w);
                        else if (bf)
                            ok = cg_bf16_matrix_mul_bf16(pw, path, nt, v, x, ld, 1, NULL, 0, y[bf],
                                                         w, 1);
                        else
                            ok = cg_bf16_matrix_mul(pw, path, nt, v, xf, ld, 1, NULL, 0, y[bf], w,
                                                    1);
                        ck_assert(ok);
                    }
                    for (int64_t i = 0; i < v * w; i++)
                        if (to_bits(got[i]) != to_bits(ref[i]) || !isfinite(got[i]))
                            ck_abort_msg("%s k %lld, %lld x %lld (pitch %lld), route %d, %d "
                                         "threads: %a at %lld, from floats %a",
                                         cg_gemm_path_name(path), (long long)k, (long long)v,
                                         (long long)w, (long long)ld, route, nt, (double)got[i],
                                         (long long)i, (double)ref[i]);
                }
            }
            cg_bf16_matrix_free(pw);
            guarded_free(x, v, ld, k);
            free(xf);
            free(o);
            free(ref);
            free(got);
        }
}
END_TEST

/* ------------------------------------------- saved activations in bf16 */

/* In bf16 precision cg_affine and cg_affine_relu keep x's bf16 copy
 * (cg_k_bf16_operand, x's rounding by the products) and not x, and
 * cg_affine_relu a bool mask and not its output; x's memory goes, one copy
 * serves every layer reading x; output and gradients have the bits of the
 * kernels on the float x (forward, then cg_k_relu_backward and
 * cg_k_linear_backward), for x contiguous or a transposed view. */
START_TEST(test_affine_saves_bf16)
{
    cg_rng rng = cg_rng_new(53);
    for (int v = 0; v < 4; v++) {
        const bool relu = v & 1, view = v & 2;
        cg_tensor *w = cg_requires_grad(cg_randn(&rng, CG_SHAPE(45, 70)), true);
        cg_tensor *w2 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(9, 70)), true);
        cg_tensor *b = cg_requires_grad(cg_randn(&rng, CG_SHAPE(45)), true);
        cg_tensor *x0 = cg_requires_grad(
            view ? cg_randn(&rng, CG_SHAPE(70, 37)) : cg_randn(&rng, CG_SHAPE(37, 70)), true);
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(37, 45));
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *x1 = cg_muls(x0, 2.0f); /* a non-leaf x, let go by the nodes */
        cg_tensor *x = view ? cg_transpose(x1, 0, 1) : cg_retain(x1);
        cg_tensor *y = relu ? cg_affine_relu(x, w, b) : cg_affine(x, w, b);
        cg_tensor *y2 = cg_affine(x, w2, NULL);
        ck_assert_msg(y && y2, "%s", cg_last_error());
        /* the references, from the float x */
        cg_tensor *ref = cg_k_linear(x, w, b);
        if (relu)
            ck_assert(cg_k_relu_(ref));
        ck_assert(same_bits(y, ref));
        const cg_node *n = y->node;
        const cg_tensor *xb = n->saved[n->p.i[0] - 1];
        ck_assert_int_eq(xb->dtype, CG_BF16);
        ck_assert_ptr_null(n->inputs[0]->storage);                   /* x itself is not kept */
        ck_assert_ptr_eq(y2->node->saved[y2->node->p.i[0] - 1], xb); /* one copy for both */
        /* a frozen weight: dx = g W reads no x, so no copy is kept */
        cg_tensor *wf = cg_detach(w), *y3 = cg_affine(x, wf, NULL);
        ck_assert_msg(y3 != NULL, "%s", cg_last_error());
        ck_assert_int_eq(y3->node->p.i[0], 0);
        for (int k = 0; k < CG_NODE_MAX_SAVED; k++)
            ck_assert_ptr_null(y3->node->saved[k]);
        cg_release_all(2, wf, y3);
        if (relu) /* the output's bf16 rounding, which the next layer keeps */
            ck_assert_int_eq(n->saved[0]->dtype, CG_BF16);
        cg_tensor *gh = relu ? cg_k_relu_backward(ref, g) : cg_retain(g);
        cg_tensor *dx, *dw, *db;
        ck_assert(cg_k_linear_backward(x, w, gh, NULL, &dx, &dw, &db));
        cg_tensor *s = cg_mul(y, g), *loss = cg_sum_all(s);
        cg_release_all(4, x1, x, y2, s); /* the graph keeps what it reads */
        ck_assert(cg_backward(loss, NULL, false));
        cg_set_matmul_precision(CG_PRECISION_FP32);
        cg_tensor *dx0 = view ? cg_transpose(dx, 0, 1) : cg_retain(dx);
        cg_tensor *dx2 = cg_muls(dx0, 2.0f);
        ck_assert(same_bits(w->grad, dw) && same_bits(b->grad, db));
        ck_assert(same_bits(x0->grad, dx2));
        cg_release_all(14, w, w2, b, x0, g, y, ref, gh, dx, dw, db, loss, dx0, dx2);
    }
}
END_TEST

/* cg_k_bf16_operand: cg_bf16_round's bits for a transposed view, in its
 * layout (it is dense: cg_is_dense), and contiguous for a view that is not;
 * the same tensor again for the same view at the same version, a new one
 * after a write (the copy follows the data) or for another view. */
START_TEST(test_bf16_operand_copy)
{
    cg_rng rng = cg_rng_new(59);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(50, 40));
    cg_data(x)[3] = from_bits(0x00400000u); /* subnormal: to zero */
    cg_data(x)[4] = NAN;
    cg_tensor *xt = cg_transpose(x, 0, 1);
    cg_tensor *a = cg_k_bf16_operand(xt), *a2 = cg_k_bf16_operand(xt);
    ck_assert_ptr_eq(a, a2);
    ck_assert_int_eq(a->dtype, CG_BF16);
    ck_assert(a->strides[0] == 1 && a->strides[1] == 40);
    for (int64_t i = 0; i < 40; i++) /* element (i, j) of xt is x's (j, i) */
        for (int64_t j = 0; j < 50; j++)
            ck_assert_uint_eq((uint32_t)cg_data_bf16(a)[j * 40 + i] << 16,
                              to_bits(cg_bf16_round(cg_data(x)[j * 40 + i])));
    cg_tensor *xs = cg_view_narrow(xt, 0, 5, 20), *as = cg_k_bf16_operand(xs); /* not dense */
    ck_assert(cg_is_contiguous(as));
    for (int64_t i = 0; i < 20; i++)
        for (int64_t j = 0; j < 50; j++)
            ck_assert_uint_eq((uint32_t)cg_data_bf16(as)[i * 50 + j] << 16,
                              to_bits(cg_bf16_round(cg_data(x)[j * 40 + i + 5])));
    cg_release_all(2, xs, as);
    cg_tensor *c = cg_k_bf16_operand(x); /* another view */
    ck_assert_ptr_ne(c, a);
    cg_tensor *c2 = cg_k_bf16_operand(x);
    ck_assert_ptr_eq(c, c2);
    cg_data(x)[0] = 1.0f;
    cg_tensor_modified(x);
    cg_tensor *d = cg_k_bf16_operand(x);
    ck_assert_ptr_ne(d, c);
    ck_assert_uint_eq(cg_data_bf16(d)[0], 0x3f80u);
    /* a version moved on without the slot being freed (cg_tensor_modified
     * does both): rows within d's dense view are a miss too, not a view of
     * the stale copy */
    cg_data(x)[41] = 2.0f;
    x->storage->version++;
    cg_tensor *xr = cg_view_narrow(x, 0, 1, 3), *r = cg_k_bf16_operand(xr);
    ck_assert(r && cg_same_shape(r, xr));
    ck_assert_uint_eq(cg_data_bf16(r)[1], 0x4000u); /* x's (1, 1) */
    cg_release_all(2, xr, r);
    cg_release_all(7, x, xt, a, a2, c, c2, d);
    ck_assert_ptr_null(cg_k_bf16_operand(NULL));
    cg_tensor *i64 = cg_empty_dtype(CG_I64, CG_SHAPE(3));
    ck_assert_ptr_null(cg_k_bf16_operand(i64));
    cg_release(i64);
}
END_TEST

/* Each element of the bf16 tensor c (any layout) is x's at the same index
 * rounded as the products round it. */
static void assert_rounding_of(const cg_tensor *c, const cg_tensor *x)
{
    ck_assert_int_eq(c->dtype, CG_BF16);
    ck_assert(cg_same_shape(c, x));
    cg_tensor *cf = cg_k_to(c, CG_F32), *xc = cg_k_contiguous(x);
    for (int64_t i = 0; i < cg_numel(x); i++)
        ck_assert_uint_eq(to_bits(cg_data(cf)[i]), to_bits(cg_bf16_round(cg_data(xc)[i])));
    cg_release_all(2, cf, xc);
}

/* cg_k_linear_keep_bf16: cg_k_linear's bits, in bf16 precision with the
 * output's rounding kept as its operand, made by the product (the GEMM
 * driver's epilogue for 120 rows, the packed weight's panels for 5), which
 * cg_k_bf16_operand returns for the output and, as a view of the copy, for
 * attention's heads of it; after a write, a new copy. In fp32 nothing is
 * kept. A contiguous kept view serves the views within it and only them. */
START_TEST(test_linear_keep_bf16)
{
    cg_rng rng = cg_rng_new(67);
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(48, 64)), *b = cg_randn(&rng, CG_SHAPE(48));
    cg_set_matmul_precision(CG_PRECISION_BF16);
    for (int pass = 0; pass < 2; pass++) {
        const int64_t B = pass ? 1 : 6, T = pass ? 5 : 20;
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(B, T, 64));
        cg_tensor *y = cg_k_linear_keep_bf16(x, w, b), *ref = cg_k_linear(x, w, b);
        ck_assert_msg(y && ref, "%s", cg_last_error());
        ck_assert(memcmp(cg_data(y), cg_data(ref), sizeof(float) * (size_t)cg_numel(y)) == 0);
        cg_tensor *c = cg_k_bf16_operand(y), *c2 = cg_k_bf16_operand(y);
        ck_assert_ptr_eq(c, c2);
        assert_rounding_of(c, y);
        /* the heads [B, 4, T, 12]: a view of the kept copy in the heads' layout */
        cg_tensor *r = cg_view_reshape(y, CG_SHAPE(B, T, 4, 12));
        cg_tensor *hv = cg_view_transpose(r, 1, 2), *hc = cg_k_bf16_operand(hv);
        ck_assert_ptr_eq(hc->storage, c->storage);
        ck_assert(!memcmp(hc->strides, hv->strides, sizeof(int64_t) * 4));
        assert_rounding_of(hc, hv);
        cg_tensor *h1 = cg_view_select(hv, 1, 2), *h1c = cg_k_bf16_operand(h1); /* one head */
        ck_assert_ptr_eq(h1c->storage, c->storage);
        assert_rounding_of(h1c, h1);
        cg_data(y)[7] += 1.0f;
        cg_tensor_modified(y);
        cg_tensor *hd = cg_k_bf16_operand(hv);
        ck_assert_ptr_ne(hd->storage, c->storage);
        assert_rounding_of(hd, hv);
        cg_release_all(12, x, y, ref, c, c2, r, hv, hc, h1, h1c, hd, NULL);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(30, 64)), *y = cg_k_linear_keep_bf16(x, w, b);
    ck_assert_ptr_null(y->storage->derived);
    /* rows 2-4 of a [8, 16] tensor kept: rows 3 and 2-4 are served from the
     * copy, rows 0-3 are not (a copy of their own) */
    cg_tensor *big = cg_randn(&rng, CG_SHAPE(8, 16)), *x0 = cg_view_narrow(big, 0, 2, 3);
    cg_tensor *c0 = cg_k_bf16_operand(x0);
    cg_tensor *in = cg_view_narrow(big, 0, 3, 1), *inc = cg_k_bf16_operand(in);
    cg_tensor *out = cg_view_narrow(big, 0, 0, 4), *outc = cg_k_bf16_operand(out);
    ck_assert_ptr_eq(inc->storage, c0->storage);
    ck_assert_ptr_ne(outc->storage, c0->storage);
    assert_rounding_of(inc, in);
    assert_rounding_of(outc, out);
    cg_release_all(10, x, y, big, x0, c0, in, inc, out, outc, w);
    cg_release(b);
}
END_TEST

/* Recorded attention in bf16 keeps its output's rounding for the output
 * projection: the heads merged back ([B, T, H dh], a view) get a view of
 * it, with the output's rounding; causal and not, 20 and 200 keys (one
 * key block and several). Without a graph nothing is kept. */
START_TEST(test_attention_keeps_out16)
{
    cg_rng rng = cg_rng_new(71);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    for (int pass = 0; pass < 4; pass++) {
        const int64_t B = 2, H = 3, T = pass & 1 ? 200 : 20, dh = 16;
        const bool causal = pass & 2;
        cg_tensor *qkv[3];
        for (int i = 0; i < 3; i++) {
            qkv[i] = cg_randn(&rng, CG_SHAPE(B, H, T, dh));
            cg_requires_grad(qkv[i], true);
        }
        cg_tensor *o = cg_attention(qkv[0], qkv[1], qkv[2], causal, NULL, NULL);
        ck_assert_msg(o, "%s", cg_last_error());
        /* kept by the attention (AMX's tiles keep none: the projection rounds) */
        ck_assert(o->storage->derived || cg_bf16_auto_path() == CG_GEMM_BF16_AMX);
        cg_tensor *ot = cg_view_transpose(o, 1, 2);
        cg_tensor *merged = cg_view_reshape(ot, CG_SHAPE(B, T, H * dh));
        /* the copy is the merged heads' own: asking for it serves the kept
         * copy rather than making and keeping another (AMX's tiles take 200
         * keys and keep none) */
        const bool amx = cg_bf16_auto_path() == CG_GEMM_BF16_AMX && T == 200;
        const void *slot = o->storage->derived;
        cg_tensor *m16 = cg_k_bf16_operand(merged), *m16b = cg_k_bf16_operand(merged);
        ck_assert_msg(amx || o->storage->derived == slot, "the output's copy was made again");
        ck_assert_ptr_nonnull(merged);
        ck_assert_ptr_eq(m16->storage, m16b->storage); /* kept, not made per call */
        ck_assert(cg_is_contiguous(m16));
        assert_rounding_of(m16, merged);
        cg_release_all(6, o, ot, merged, m16, m16b, NULL);
        cg_release_all(3, qkv[0], qkv[1], qkv[2]);
    }
    cg_no_grad_begin();
    cg_tensor *q = cg_randn(&rng, CG_SHAPE(1, 2, 8, 16));
    cg_tensor *o = cg_attention(q, q, q, false, NULL, NULL);
    ck_assert_ptr_null(o->storage->derived);
    cg_release_all(2, q, o);
    cg_no_grad_end();
    cg_set_matmul_precision(CG_PRECISION_FP32);
}
END_TEST

/* cg_k_relu_mask and its backward: cg_k_relu_backward's bits (NaN, -0, +0,
 * infinities; a strided input), a byte an element; wrong dtypes and shapes
 * refused. */
START_TEST(test_relu_mask)
{
    cg_rng rng = cg_rng_new(61);
    cg_tensor *a0 = cg_randn(&rng, CG_SHAPE(70, 300));
    const float special[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 0x1p-140f, -0x1p-140f};
    for (int i = 0; i < 7; i++)
        cg_data(a0)[i * 301] = special[i];
    cg_tensor *a = cg_transpose(a0, 0, 1), *g = cg_randn(&rng, CG_SHAPE(300, 70));
    cg_data(g)[5] = NAN; /* masked out where a <= 0: zero, as relu's backward */
    cg_tensor *m = cg_k_relu_mask(a);
    ck_assert_int_eq(m->dtype, CG_BOOL);
    cg_tensor *got = cg_k_relu_mask_backward(m, g), *want = cg_k_relu_backward(a, g);
    ck_assert(same_bits(got, want));
    cg_tensor *short_g = cg_randn(&rng, CG_SHAPE(300, 69));
    ck_assert_ptr_null(cg_k_relu_mask_backward(m, short_g));
    ck_assert_ptr_null(cg_k_relu_mask_backward(g, g));
    cg_release_all(7, a0, a, g, m, got, want, short_g);
}
END_TEST

/* y = x W^T + beta y with beta 1: on every bf16 path, few rows (W's
 * panels) and many (the driver), 1 and 2 threads, with k within one k
 * block each element is y + its sum rounded once, the bits of the beta 0
 * product added to y apart (cg_gemm_adds_c_once); on AMX, whose tiles sum
 * onto y (kernel_amx), 1 and 2 threads the same bits, within the
 * products' bound of that sum (NaN and infinities where it has them).
 * With CG_GEMM_C_ONCE (core/linear_backward.c's dx added into a
 * gradient) every path, AMX's too, gives the bits made apart. */
START_TEST(test_matrix_beta_one)
{
    cg_rng rng = cg_rng_new(79);
    /* few rows, C split by rows, and (100 x 512) C split by columns, whose
     * threads pack x together on AMX (cg_bf16_gemm_parallel) */
    const int64_t dims[][3] = {
        {40, 213, 96}, {300, 97, CG_BF16_KC}, {1000, 64, 33}, {100, 512, 96}};
    for (int d = 0; d < 4; d++) {
        const int64_t M = dims[d][0], N = dims[d][1], K = dims[d][2];
        float *w = nasty_buf(&rng, (size_t)(N * K)), *x = rand_buf(&rng, (size_t)(M * K));
        float *y0 = rand_buf(&rng, (size_t)(M * N));
        float *want = malloc((size_t)(M * N) * sizeof(float));
        float *y = malloc((size_t)(M * N) * sizeof(float));
        cg_bf16_matrix *pw = cg_bf16_matrix_new(N, K, w, K, 1);
        ck_assert_ptr_nonnull(pw);
        for (int p = 0; p < NPATHS; p++) {
            if (!cg_gemm_path_available(bf16_paths[p]) || tested_by_plain_run(bf16_paths[p]))
                continue;
            for (unsigned flags = 0; flags <= CG_GEMM_C_ONCE; flags += CG_GEMM_C_ONCE) {
                ck_assert(
                    cg_bf16_matrix_mul(pw, bf16_paths[p], 1, M, x, K, 1, NULL, 0, want, N, 1));
                for (int64_t i = 0; i < M * N; i++)
                    want[i] = y0[i] + want[i];
                const bool once = flags || cg_gemm_adds_c_once(bf16_paths[p]);
                for (int nt = 1; nt <= 2; nt++) {
                    memcpy(y, y0, (size_t)(M * N) * sizeof(float));
                    ck_assert(cg_bf16_matrix_mul_epi(pw, bf16_paths[p], nt, M, x, flags, K, 1, NULL,
                                                     0, 1.0f, y, N, 1, NULL));
                    for (int64_t i = 0; i < M * N && !once && nt == 1; i++) {
                        double mag = fabs((double)y0[i]);
                        for (int64_t q = 0; q < K; q++)
                            mag += fabs((double)cg_bf16_round(x[i / N * K + q]) *
                                        cg_bf16_round(w[i % N * K + q]));
                        ck_assert_msg(near_amx(y[i], want[i], K, mag),
                                      "%s %lldx%lldx%lld, element %lld: %a, apart %a",
                                      cg_gemm_path_name(bf16_paths[p]), (long long)M, (long long)N,
                                      (long long)K, (long long)i, (double)y[i], (double)want[i]);
                    }
                    if (!once && nt == 1) /* 2 threads: these bits */
                        memcpy(want, y, (size_t)(M * N) * sizeof(float));
                    for (int64_t i = 0; i < M * N; i++)
                        ck_assert_msg(to_bits(y[i]) == to_bits(want[i]),
                                      "%s %lldx%lldx%lld, %d threads, flags %u, element %lld: %a, "
                                      "want %a",
                                      cg_gemm_path_name(bf16_paths[p]), (long long)M, (long long)N,
                                      (long long)K, nt, flags, (long long)i, (double)y[i],
                                      (double)want[i]);
                }
            }
        }
        cg_bf16_matrix_free(pw);
        free(w);
        free(x);
        free(y0);
        free(want);
        free(y);
    }
}
END_TEST

/* A product's epilogue (cg_bf16_matrix_mul_epi) runs once on every
 * element of y, after its last k block: the values it sees are the
 * product's final bits (those of cg_bf16_matrix_mul), on every path, 1 and
 * 2 threads, for few rows (the panel path), many (the driver: fused AMX
 * panels, m blocks, shared packing), several k blocks and edge tiles. */
static bool same_float(float a, float b)
{
    return to_bits(a) == to_bits(b) || (isnan(a) && isnan(b));
}
typedef struct {
    cg_gemm_epilogue e;
    float *seen;
    uint8_t *count;
} seen_epi;
static void record_block(const cg_gemm_epilogue *e, float *c, int64_t rows, int64_t cols,
                         int64_t rsc, int64_t csc)
{
    const seen_epi *s = (const seen_epi *)e;
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) {
            const ptrdiff_t off = (c + i * rsc + j * csc) - e->c0;
            s->seen[off] = c[i * rsc + j * csc];
            s->count[off]++;
        }
}

START_TEST(test_matrix_epilogue)
{
    cg_rng rng = cg_rng_new(71);
    const int64_t dims[][3] = {{1, 97, 33},     {40, 213, 96},  {65, 97, 33},
                               {300, 213, 400}, {1000, 64, 40}, {130, 1536, 800}};
    for (int d = 0; d < 6; d++) {
        const int64_t M = dims[d][0], N = dims[d][1], K = dims[d][2];
        float *w = nasty_buf(&rng, (size_t)(N * K)), *x = rand_buf(&rng, (size_t)(M * K));
        float *bias = rand_buf(&rng, (size_t)N);
        float *want = malloc((size_t)(M * N) * sizeof(float));
        float *y = malloc((size_t)(M * N) * sizeof(float));
        float *seen = malloc((size_t)(M * N) * sizeof(float));
        uint8_t *count = malloc((size_t)(M * N));
        cg_bf16_matrix *pw = cg_bf16_matrix_new(N, K, w, K, 1);
        ck_assert_ptr_nonnull(pw);
        for (int p = 0; p < NPATHS; p++) {
            if (!cg_gemm_path_available(bf16_paths[p]) || tested_by_plain_run(bf16_paths[p]))
                continue;
            ck_assert(cg_bf16_matrix_mul(pw, bf16_paths[p], 1, M, x, K, 1, bias, 1, want, N, 1));
            for (int nt = 1; nt <= 2; nt++) {
                memset(count, 0, (size_t)(M * N));
                const seen_epi e = {{.fn = record_block, .c0 = y}, seen, count};
                ck_assert(cg_bf16_matrix_mul_epi(pw, bf16_paths[p], nt, M, x, 0, K, 1, bias, 1,
                                                 0.0f, y, N, 1, &e.e));
                for (int64_t i = 0; i < M * N; i++) /* (a NaN's sign: valgrind's own) */
                    ck_assert_msg(count[i] == 1 && same_float(seen[i], want[i]) &&
                                      to_bits(y[i]) == to_bits(seen[i]),
                                  "%s %lldx%lldx%lld, %d threads, element %lld: seen %d times, "
                                  "%a of %a",
                                  cg_gemm_path_name(bf16_paths[p]), (long long)M, (long long)N,
                                  (long long)K, nt, (long long)i, count[i], (double)seen[i],
                                  (double)want[i]);
            }
        }
        cg_bf16_matrix_free(pw);
        free(w);
        free(x);
        free(bias);
        free(want);
        free(y);
        free(seen);
        free(count);
    }
}
END_TEST

/* cg_k_linear_act: the bits of the activation over cg_k_linear's output
 * (relu, both GELUs; NaN, infinities, huge and subnormal pre-activations
 * through the bias), what it saves (relu's mask; a GELU's pre-activation,
 * rounded in bf16 as cg_k_bf16_operand rounds it), its output in place
 * over the product where it says so, and in bf16 the output's copy kept
 * for cg_k_bf16_operand; without a backward (saved NULL), the same output
 * and a next product that reads its kept copy with the bits of one that
 * rounds it; fp32 and bf16, 1 and 2 threads, rows of the panel path and
 * of the driver, several k blocks. Bad arguments refused. */
START_TEST(test_linear_act)
{
    cg_rng rng = cg_rng_new(67);
    const float special[] = {NAN,
                             -0.0f,
                             0.0f,
                             INFINITY,
                             -INFINITY,
                             0x1p-140f,
                             -0x1p-140f,
                             from_bits(0x7f800001u),
                             0x1.fffffep+127f,
                             -0x1.00ff01p+0f,
                             30.0f,
                             -30.0f};
    const int64_t rows[] = {3, 70, 301}, ins[] = {96, 400};
    cg_tensor *(*const ref[])(const cg_tensor *) = {cg_k_relu, cg_k_gelu, cg_k_gelu_erf};
    for (int v = 0; v < 3 * 2 * 3 * 2 * 2; v++) {
        const int act = v % 3, bf16 = v / 3 % 2, r = v / 6 % 3, in = v / 18 % 2,
                  nt = 1 + v / 36 % 2;
        cg_set_num_threads(nt);
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(rows[r], ins[in]));
        cg_tensor *w = cg_randn(&rng, CG_SHAPE(213, ins[in])), *b = cg_randn(&rng, CG_SHAPE(213));
        for (int i = 0; i < 12; i++)
            cg_data(b)[i * 17] = special[i];
        cg_tensor *h = cg_k_linear(x, w, b), *want = ref[act](h), *saved = NULL;
        cg_tensor *want_c = cg_k_bf16_operand(want), *want_h = cg_k_bf16_operand(h);
        cg_tensor *y = cg_k_linear_act(x, w, b, (cg_k_act)act, &saved);
        ck_assert_ptr_nonnull(y);
        ck_assert_msg(same_bits(y, want), "act %d, %s, %lld x %lld, %d threads", act,
                      bf16 ? "bf16" : "fp32", (long long)rows[r], (long long)ins[in], nt);
        if (act == 0 && bf16) { /* relu in bf16: the output's rounding (its kept copy) */
            ck_assert_int_eq(saved->dtype, CG_BF16);
            ck_assert(!memcmp(cg_data_bf16(saved), cg_data_bf16(want_c),
                              sizeof(uint16_t) * (size_t)cg_numel(y)));
        } else if (act == 0) {
            cg_tensor *want_m = cg_k_relu_mask(want);
            ck_assert_int_eq(saved->dtype, CG_BOOL);
            ck_assert(!memcmp(cg_data_bool(saved), cg_data_bool(want_m), (size_t)cg_numel(y)));
            cg_release(want_m);
        } else if (bf16) {
            ck_assert_int_eq(saved->dtype, CG_BF16);
            ck_assert(!memcmp(cg_data_bf16(saved), cg_data_bf16(want_h),
                              sizeof(uint16_t) * (size_t)cg_numel(y)));
        } else {
            ck_assert(saved->dtype == CG_F32 && same_bits(saved, h) && saved != y);
        }
        cg_tensor *c = cg_k_bf16_operand(y), *c2 = cg_k_bf16_operand(y);
        ck_assert(
            !memcmp(cg_data_bf16(c), cg_data_bf16(want_c), sizeof(uint16_t) * (size_t)cg_numel(y)));
        ck_assert(!bf16 || c == c2); /* bf16: the copy the product's pass kept */
        /* saved NULL (inference): the same output, in bf16 its rounding
         * kept, which the next product reads: the bits of a product of a
         * fresh copy of the output (rounded by the product itself) */
        cg_tensor *yi = cg_k_linear_act(x, w, b, (cg_k_act)act, NULL);
        ck_assert_ptr_nonnull(yi);
        ck_assert(same_bits(yi, want));
        cg_tensor *ci = bf16 ? cg_k_bf16_operand(yi) : NULL; /* the kept one */
        ck_assert(!ci || !memcmp(cg_data_bf16(ci), cg_data_bf16(want_c),
                                 sizeof(uint16_t) * (size_t)cg_numel(y)));
        cg_release(ci);
        cg_tensor *w2 = cg_randn(&rng, CG_SHAPE(7, 213)), *fresh = cg_k_clone(yi);
        cg_tensor *p_kept = cg_k_linear(yi, w2, NULL), *p_fresh = cg_k_linear(fresh, w2, NULL);
        ck_assert_msg(same_bits(p_kept, p_fresh), "the next product: act %d, %s", act,
                      bf16 ? "bf16" : "fp32");
        cg_release_all(16, x, w, b, h, want, want_c, want_h, y, saved, c, c2, yi, w2, fresh, p_kept,
                       p_fresh);
    }
    cg_set_num_threads(0);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(4, 6)), *w = cg_randn(&rng, CG_SHAPE(5, 6)), *s = NULL;
    ck_assert_ptr_null(cg_k_linear_act(x, w, NULL, (cg_k_act)7, &s));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "activation"));
    cg_tensor *w7 = cg_randn(&rng, CG_SHAPE(5, 7));
    ck_assert_ptr_null(cg_k_linear_act(x, w7, NULL, CG_K_ACT_GELU, &s)); /* shapes */
    ck_assert_ptr_null(s);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release_all(3, x, w, w7);
}
END_TEST

/* A linear layer's bias as a strided view (every second element of a
 * buffer) gives the bits of its contiguous copy: cg_k_linear and
 * cg_k_linear_act (the bias added as the kernels write y), fp32 and bf16,
 * rows of the panel path and of the driver. */
START_TEST(test_linear_bias_strided)
{
    cg_rng rng = cg_rng_new(71);
    const int64_t rows[] = {3, 70};
    for (int v = 0; v < 4; v++) {
        const bool bf16 = v % 2;
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(rows[v / 2], 40));
        cg_tensor *w = cg_randn(&rng, CG_SHAPE(45, 40)), *bb = cg_randn(&rng, CG_SHAPE(90));
        cg_tensor *b = cg_view_slice(bb, 0, 0, 90, 2), *bc = cg_k_contiguous(b);
        ck_assert_int_eq(b->strides[0], 2);
        cg_tensor *y = cg_k_linear(x, w, b), *want = cg_k_linear(x, w, bc);
        cg_tensor *ya = cg_k_linear_act(x, w, b, CG_K_ACT_GELU, NULL);
        cg_tensor *wanta = cg_k_linear_act(x, w, bc, CG_K_ACT_GELU, NULL);
        ck_assert_msg(same_bits(y, want), "%s, %lld rows", bf16 ? "bf16" : "fp32",
                      (long long)rows[v / 2]);
        ck_assert_msg(same_bits(ya, wanta), "gelu, %s, %lld rows", bf16 ? "bf16" : "fp32",
                      (long long)rows[v / 2]);
        cg_release_all(9, x, w, bb, b, bc, y, want, ya, wanta);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
}
END_TEST

/* cg_k_linear_residual: the bits of cg_k_add(res, cg_k_dropout(cg_k_linear))
 * and the dropout's mask and draws (the rng advanced as cg_k_dropout
 * advances it), with and without the residual and the dropout (p 0, 0.3,
 * 1), NaN and infinities through the bias; fp32 and bf16, 1 and 2 threads,
 * rows of the panel path and of the driver, a residual view with strides
 * of its own, several k blocks. Bad arguments refused in one line. */
START_TEST(test_linear_residual)
{
    cg_rng rng = cg_rng_new(83);
    const int64_t rows[] = {3, 70, 301}, ins[] = {96, 400};
    const float ps[] = {0.0f, 0.3f, 1.0f};
    for (int v = 0; v < 3 * 2 * 3 * 2 * 2 * 2; v++) {
        const int pi = v % 3, bf16 = v / 3 % 2, r = v / 6 % 3, in = v / 18 % 2, nt = 1 + v / 36 % 2,
                  with_res = v / 72 % 2;
        const float p = ps[pi];
        cg_set_num_threads(nt);
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(rows[r], ins[in]));
        cg_tensor *w = cg_randn(&rng, CG_SHAPE(213, ins[in])), *b = cg_randn(&rng, CG_SHAPE(213));
        cg_data(b)[3] = NAN;
        cg_data(b)[20] = INFINITY;
        cg_data(b)[40] = -INFINITY;
        /* the residual: a transposed view (strides of its own) */
        cg_tensor *rt = cg_randn(&rng, CG_SHAPE(213, rows[r]));
        cg_tensor *res = with_res ? cg_view_transpose(rt, 0, 1) : NULL;
        cg_rng r1 = cg_rng_new(5 + (uint64_t)v), r2 = r1;
        const uint64_t c0 = r1.counter;
        cg_tensor *h = cg_k_linear(x, w, b), *want_m = NULL;
        cg_tensor *dh = p > 0.0f ? cg_k_dropout(h, p, &r1, &want_m) : cg_retain(h);
        cg_tensor *want = res ? cg_k_add(res, dh) : cg_retain(dh), *m = NULL;
        cg_tensor *y = cg_k_linear_residual(x, w, b, res, p, &r2, &m);
        ck_assert_ptr_nonnull(y);
        ck_assert_msg(same_bits(y, want), "p %g, %s, %lld x %lld, %d threads, %s residual",
                      (double)p, bf16 ? "bf16" : "fp32", (long long)rows[r], (long long)ins[in], nt,
                      res ? "a" : "no");
        if (p > 0.0f) {
            ck_assert(m && m->dtype == CG_BOOL && cg_same_shape(m, y));
            ck_assert(!memcmp(cg_data_bool(m), cg_data_bool(want_m), (size_t)cg_numel(y)));
        } else {
            ck_assert_ptr_null(m);
        }
        ck_assert(r2.counter == r1.counter &&
                  r2.counter == c0 + (p > 0.0f ? (uint64_t)cg_numel(y) : 0));
        cg_release_all(10, x, w, b, rt, res, h, want_m, dh, want, y);
        cg_release(m);
    }
    cg_set_num_threads(0);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(4, 6)), *w = cg_randn(&rng, CG_SHAPE(5, 6)), *m = NULL;
    cg_tensor *res = cg_randn(&rng, CG_SHAPE(4, 5)), *bad = cg_randn(&rng, CG_SHAPE(4, 6));
    cg_tensor *ids = cg_zeros_dtype(CG_I64, CG_SHAPE(4, 5));
    ck_assert_ptr_null(cg_k_linear_residual(x, w, NULL, bad, 0.0f, NULL, &m));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "residual [4, 6] does not match"));
    ck_assert_ptr_null(cg_k_linear_residual(x, w, NULL, ids, 0.0f, NULL, &m));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "int64"));
    ck_assert_ptr_null(cg_k_linear_residual(x, w, NULL, res, 1.5f, &rng, &m));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "p must be in [0, 1]"));
    ck_assert_ptr_null(cg_k_linear_residual(x, w, NULL, res, 0.5f, NULL, &m));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "NULL rng"));
    ck_assert_ptr_null(m);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release_all(5, x, w, res, bad, ids);
}
END_TEST

/* cg_k_norm with bf16_copy: the four norms' outputs, statistics and sums
 * are those of cg_k_layer_norm and the rest, bit for bit, and the output's
 * bf16 copy, kept for cg_k_bf16_operand, is the one it would make (rows of
 * 70 columns: a partial vector; NaN and large values), and asking for it
 * allocates nothing; an RMS norm with a bias refused. */
START_TEST(test_norm_bf16_copy)
{
    cg_rng rng = cg_rng_new(71);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(3, 37, 70)), *a = cg_randn(&rng, CG_SHAPE(3, 37, 70));
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(70)), *b = cg_randn(&rng, CG_SHAPE(70));
    cg_data(x)[75] = NAN;
    cg_data(x)[500] = 3e38f;
    for (int v = 0; v < 4; v++) {
        const bool rms = v & 1, add = v & 2;
        cg_tensor *m0 = NULL, *r0 = NULL, *s0 = NULL, *m1 = NULL, *r1 = NULL, *s1 = NULL;
        cg_tensor *want = rms ? (add ? cg_k_add_rms_norm(x, a, w, 1e-5f, &r0, &s0)
                                     : cg_k_rms_norm(x, w, 1e-5f, &r0))
                              : (add ? cg_k_add_layer_norm(x, a, w, b, 1e-5f, &m0, &r0, &s0)
                                     : cg_k_layer_norm(x, w, b, 1e-5f, &m0, &r0));
        cg_tensor *got = cg_k_norm(rms, x, add ? a : NULL, w, rms ? NULL : b, 1e-5f, true,
                                   rms ? NULL : &m1, &r1, add ? &s1 : NULL, NULL);
        ck_assert_ptr_nonnull(got);
        ck_assert(same_bits(got, want) && same_bits(r1, r0));
        ck_assert(rms || same_bits(m1, m0));
        ck_assert(!add || same_bits(s1, s0));
        cg_tensor *c = cg_k_bf16_operand(got), *c2 = cg_k_bf16_operand(got);
        cg_tensor *fresh = cg_k_bf16_operand(want);
        ck_assert_ptr_eq(c, c2); /* the kept copy */
        ck_assert(!memcmp(cg_data_bf16(c), cg_data_bf16(fresh),
                          sizeof(uint16_t) * (size_t)cg_numel(got)));
        cg_release_all(11, m0, r0, s0, m1, r1, s1, want, got, c, c2, fresh);
    }
    /* the copy is the one made as the rows were written: asking for it
     * allocates nothing (cg_k_bf16_operand would make and keep one
     * otherwise). 64 KB: the allocator counts blocks of 32 KB and more. */
    cg_tensor *xl = cg_randn(&rng, CG_SHAPE(64, 512)), *wl = cg_randn(&rng, CG_SHAPE(512));
    cg_tensor *rl = NULL,
              *yl = cg_k_norm(false, xl, NULL, wl, NULL, 1e-5f, true, NULL, &rl, NULL, NULL);
    ck_assert_ptr_nonnull(yl);
    const size_t live = cg_alloc_get_stats().live_bytes;
    cg_tensor *cl = cg_k_bf16_operand(yl);
    ck_assert_msg(cg_alloc_get_stats().live_bytes == live, "the norm's bf16 copy was not kept");
    cg_release_all(5, xl, wl, rl, yl, cl);
    cg_tensor *r = NULL;
    ck_assert_ptr_null(cg_k_norm(true, x, NULL, w, b, 1e-5f, true, NULL, &r, NULL, NULL));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "no bias"));
    cg_release_all(4, x, a, w, b);
}
END_TEST

/* The norms where nothing is recorded (no_grad, or no input requiring
 * grad) in bf16 precision: no backward reads an x-hat, so the output is
 * fp32's, bit for bit, not the one computed from x-hat's rounding that
 * bf16 training uses. */
START_TEST(test_norm_unrecorded_fp32_bits)
{
    cg_rng rng = cg_rng_new(72);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 70)), *a = cg_randn(&rng, CG_SHAPE(6, 70));
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(70)), *b = cg_randn(&rng, CG_SHAPE(70));
    cg_tensor *r = NULL, *m = NULL, *sum = NULL;
    cg_tensor *ln = cg_k_layer_norm(x, w, b, 1e-5f, &m, &r);
    cg_release_all(2, m, r);
    cg_tensor *rn = cg_k_rms_norm(x, w, 1e-5f, &r);
    cg_release(r);
    cg_tensor *aln = cg_k_add_layer_norm(x, a, w, b, 1e-5f, &m, &r, &sum);
    cg_release_all(3, m, r, sum);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: inputs that need no grad; pass 1: they do, under no_grad */
        cg_requires_grad(w, pass == 1);
        if (pass == 1)
            cg_no_grad_begin();
        cg_tensor *y1 = cg_layer_norm(x, w, b, 1e-5f), *y2 = cg_rms_norm(x, w, 1e-5f);
        cg_tensor *y3 = cg_add_layer_norm(x, a, w, b, 1e-5f);
        if (pass == 1)
            cg_no_grad_end();
        ck_assert_msg(y1 && y2 && y3, "%s", cg_last_error());
        ck_assert_msg(same_bits(y1, ln) && same_bits(y2, rn) && same_bits(y3, aln),
                      "pass %d: a norm nothing records is not fp32's", pass);
        cg_release_all(3, y1, y2, y3);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release_all(7, x, a, w, b, ln, rn, aln);
}
END_TEST

/* cg_k_norm's x-hat, what bf16 training keeps for the norms' backward: the
 * float x-hat of the norm's input, (s - mean) * rstd, rounded to bf16, the
 * output and rstd unchanged. cg_k_norm_backward_xhat: with rstd 1, the bits
 * of the fp32 backward of the widened x-hat (mean 0, rstd 1), the same
 * terms at the same x-hat; with the real rstd, within bf16's bound of a
 * float64 backward of the exact input, and not fp32's bits. Rows of 70
 * columns (a partial vector), 111 rows (a partial chunk, an odd last pair),
 * inputs off zero (the mean matters); bad arguments refused. */
static void xhat_bound_case(bool rms, const float *in, const float *wp, const float *gp,
                            const float *dx, const float *dw, const float *db, int64_t R, int64_t D)
{
    double *cw = calloc((size_t)D, sizeof *cw), *cwa = calloc((size_t)D, sizeof *cwa);
    double *cb = calloc((size_t)D, sizeof *cb), *xh = malloc((size_t)D * sizeof *xh);
    for (int64_t r = 0; r < R; r++) {
        const float *s = in + r * D, *g = gp + r * D;
        double m = 0.0, v = 0.0, mg = 0.0, mgx = 0.0, mag = 0.0, amgx = 0.0;
        for (int64_t j = 0; j < D && !rms; j++)
            m += s[j] / (double)D;
        for (int64_t j = 0; j < D; j++)
            v += (s[j] - m) * (s[j] - m) / (double)D;
        const double rs = 1.0 / sqrt(v + 1e-5);
        for (int64_t j = 0; j < D; j++) {
            xh[j] = (s[j] - m) * rs;
            const double gw = (double)g[j] * wp[j];
            mg += rms ? 0.0 : gw / (double)D;
            mag += fabs(gw) / (double)D;
            mgx += gw * xh[j] / (double)D;
            amgx += fabs(gw * xh[j]) / (double)D;
            cw[j] += g[j] * xh[j];
            cwa[j] += fabs(g[j] * xh[j]);
            cb[j] += g[j];
        }
        for (int64_t j = 0; j < D; j++) {
            const double gw = (double)g[j] * wp[j], want = rs * (gw - mg - xh[j] * mgx);
            /* x-hat's rounding (2^-8 relative, and rstd's in float) in x-hat
             * and in mean(gw * x-hat) */
            const double bound = rs * (0x1p-7 * fabs(xh[j]) * amgx + 1e-5 * (fabs(gw) + mag));
            ck_assert_msg(fabs(dx[r * D + j] - want) <= bound, "dx[%lld][%lld] %.9g vs %.9g",
                          (long long)r, (long long)j, (double)dx[r * D + j], want);
        }
    }
    for (int64_t j = 0; j < D; j++) {
        ck_assert_msg(fabs(dw[j] - cw[j]) <= (0x1p-8 + 1e-5) * cwa[j] + 1e-6, "dw[%lld]",
                      (long long)j);
        ck_assert(rms || fabs(db[j] - cb[j]) <= 1e-6 * (1.0 + fabs(cb[j])));
    }
    free(cw);
    free(cwa);
    free(cb);
    free(xh);
}

START_TEST(test_norm_xhat)
{
    enum { D = 70 };
    cg_rng rng = cg_rng_new(72);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(3, 37, D)), *a = cg_randn(&rng, CG_SHAPE(3, 37, D));
    cg_tensor *w = cg_randn(&rng, CG_SHAPE(D)), *b = cg_randn(&rng, CG_SHAPE(D));
    cg_tensor *g = cg_randn(&rng, CG_SHAPE(3, 37, D));
    const int64_t R = 3 * 37;
    for (int64_t i = 0; i < R * D; i++)
        cg_data(x)[i] = 2.0f + 3.0f * cg_data(x)[i];
    cg_tensor *ones = cg_full(CG_SHAPE(R), 1.0f), *zeros = cg_full(CG_SHAPE(R), 0.0f);
    for (int v = 0; v < 4; v++) {
        const bool rms = v & 1, add = v & 2;
        cg_tensor *m0 = NULL, *r0 = NULL, *s0 = NULL, *r1 = NULL, *h = NULL;
        cg_tensor *want = cg_k_norm(rms, x, add ? a : NULL, w, rms ? NULL : b, 1e-5f, false,
                                    rms ? NULL : &m0, &r0, add ? &s0 : NULL, NULL);
        cg_tensor *got =
            cg_k_norm(rms, x, add ? a : NULL, w, rms ? NULL : b, 1e-5f, true, NULL, &r1, NULL, &h);
        ck_assert_ptr_nonnull(got);
        ck_assert(same_bits(r1, r0));
        ck_assert_int_eq(h->dtype, CG_BF16);
        ck_assert(cg_same_shape(h, x));
        const float *in = add ? cg_data(s0) : cg_data(x);
        /* the output from the rounded x-hat, in float; its kept bf16 copy
         * (bf16_copy) is its rounding, which cg_k_norm_out_bf16 makes
         * again from x-hat alone */
        cg_tensor *c16 = cg_k_bf16_operand(got);
        cg_tensor *o16 = cg_k_norm_out_bf16(h, w, rms ? NULL : b);
        ck_assert_msg(o16 != NULL, "%s", cg_last_error());
        ck_assert(same_bits(o16, c16));
        for (int64_t i = 0; i < R * D; i++) {
            const int64_t r = i / D, j = i % D;
            const float t = (in[i] - (rms ? 0.0f : cg_data(m0)[r])) * cg_data(r0)[r];
            ck_assert_uint_eq(cg_data_bf16(h)[i], to_bits(cg_bf16_round(t)) >> 16);
            float y = from_bits((uint32_t)cg_data_bf16(h)[i] << 16) * cg_data(w)[j];
            if (!rms)
                y = y + cg_data(b)[j];
            ck_assert_uint_eq(to_bits(cg_data(got)[i]), to_bits(y));
            ck_assert_uint_eq(cg_data_bf16(c16)[i], to_bits(cg_bf16_round(y)) >> 16);
            /* against the output of the unrounded x-hat: x-hat's rounding (2^-8) */
            const double tw = fabs((double)t * cg_data(w)[j]);
            ck_assert_msg(fabs(cg_data(got)[i] - cg_data(want)[i]) <=
                              0x1p-8 * tw + 0x1p-22 * (tw + fabs(cg_data(want)[i])),
                          "v %d i %lld: got %a want %a t %a h %a w %a", v, (long long)i,
                          cg_data(got)[i], cg_data(want)[i], t,
                          from_bits((uint32_t)cg_data_bf16(h)[i] << 16), cg_data(w)[j]);
        }
        cg_release_all(2, c16, o16);
        /* rstd 1: the fp32 backward's bits at the widened x-hat */
        cg_tensor *hw = cg_k_to(h, CG_F32), *dx = NULL, *dw = NULL, *db = NULL, *ex = NULL,
                  *ew = NULL, *eb = NULL;
        ck_assert(cg_k_norm_backward_xhat(rms, h, w, ones, g, NULL, &dx, &dw, &db));
        ck_assert(rms ? cg_k_rms_norm_backward(hw, w, ones, g, NULL, &ex, &ew)
                      : cg_k_layer_norm_backward(hw, w, zeros, ones, g, NULL, &ex, &ew, &eb));
        ck_assert(same_bits(dx, ex) && same_bits(dw, ew));
        ck_assert(rms ? db == NULL : same_bits(db, eb));
        cg_release_all(6, dx, dw, db, ex, ew, eb);
        /* the real rstd: float64's bound; fp32's backward of the input differs */
        ck_assert(cg_k_norm_backward_xhat(rms, h, w, r1, g, NULL, &dx, &dw, rms ? NULL : &db));
        xhat_bound_case(rms, in, cg_data(w), cg_data(g), cg_data(dx), cg_data(dw),
                        db ? cg_data(db) : NULL, R, D);
        cg_tensor *in_t = add ? s0 : x;
        ck_assert(rms ? cg_k_rms_norm_backward(in_t, w, r0, g, NULL, &ex, NULL)
                      : cg_k_layer_norm_backward(in_t, w, m0, r0, g, NULL, &ex, NULL, NULL));
        ck_assert(!same_bits(dx, ex));
        /* only some gradients asked for: the same bits */
        cg_tensor *dw2 = NULL;
        ck_assert(cg_k_norm_backward_xhat(rms, h, w, r1, g, NULL, NULL, &dw2, NULL));
        ck_assert(same_bits(dw2, dw));
        cg_release_all(6, dx, dw, db, ex, dw2, hw);
        cg_release_all(7, m0, r0, s0, r1, h, want, got);
    }
    /* refused: an fp32 x-hat, a gradient of another shape, rstd of another
     * length, NULL arguments */
    cg_tensor *h = NULL, *r = NULL, *dx = NULL;
    cg_release(cg_k_norm(false, x, NULL, w, b, 1e-5f, false, NULL, &r, NULL, &h));
    cg_tensor *g2 = cg_randn(&rng, CG_SHAPE(3, 36, D));
    CG_ASSERT_REFUSED(!cg_k_norm_backward_xhat(false, x, w, r, g, NULL, &dx, NULL, NULL),
                      "'xhat' is float32, expected bfloat16");
    ck_assert_ptr_null(dx);
    CG_ASSERT_REFUSED(!cg_k_norm_backward_xhat(false, h, w, r, g2, NULL, &dx, NULL, NULL),
                      "shapes differ");
    CG_ASSERT_REFUSED(!cg_k_norm_backward_xhat(true, h, w, ones, g2, NULL, &dx, NULL, NULL),
                      "shapes differ");
    cg_tensor *r2 = cg_full(CG_SHAPE(R - 1), 1.0f);
    CG_ASSERT_REFUSED(!cg_k_norm_backward_xhat(false, h, w, r2, g, NULL, &dx, NULL, NULL),
                      "saved statistics");
    CG_ASSERT_REFUSED(!cg_k_norm_backward_xhat(false, h, w, NULL, g, NULL, &dx, NULL, NULL),
                      "NULL");
    ck_assert_ptr_null(dx);
    /* the output's copy without w or b: x-hat's own bits; refused: an fp32
     * x-hat, a weight of another length, no x-hat */
    cg_tensor *o16 = cg_k_norm_out_bf16(h, NULL, NULL);
    ck_assert(o16 && o16->dtype == CG_BF16 && cg_same_shape(o16, h));
    ck_assert_int_eq(memcmp(cg_data_bf16(o16), cg_data_bf16(h), (size_t)(R * D) * 2), 0);
    cg_release(o16);
    cg_tensor *w2 = cg_randn(&rng, CG_SHAPE(D - 1));
    CG_ASSERT_REFUSED(cg_k_norm_out_bf16(x, w, b) == NULL, "'xhat' is float32, expected bfloat16");
    CG_ASSERT_REFUSED(cg_k_norm_out_bf16(h, w2, b) == NULL, "weight must have shape [70]");
    CG_ASSERT_REFUSED(cg_k_norm_out_bf16(NULL, w, b) == NULL, "NULL");
    cg_release(w2);
    cg_release_all(12, x, a, w, b, g, ones, zeros, h, r, g2, r2, dx);
}
END_TEST

/* In bf16 precision the four norms' nodes keep x-hat in bf16 and rstd, not
 * the input (the norms of x keep a header of x) nor the sum x + y nor the
 * mean, and their gradients are cg_k_norm_backward_xhat's bits; in fp32 the
 * input and the sum are kept. */
START_TEST(test_norm_saves_xhat)
{
    cg_rng rng = cg_rng_new(73);
    for (int v = 0; v < 8; v++) {
        const bool rms = v & 1, add = v & 2, bf16 = v & 4;
        cg_tensor *x0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 9, 40)), true);
        cg_tensor *y0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 9, 40)), true);
        cg_tensor *w = cg_requires_grad(cg_randn(&rng, CG_SHAPE(40)), true);
        cg_tensor *b = cg_requires_grad(cg_randn(&rng, CG_SHAPE(40)), true);
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(2, 9, 40));
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *x = cg_muls(x0, 1.0f), *y = cg_muls(y0, 1.0f);
        cg_tensor *out =
            rms ? (add ? cg_add_rms_norm(x, y, w, 1e-5f) : cg_rms_norm(x, w, 1e-5f))
                : (add ? cg_add_layer_norm(x, y, w, b, 1e-5f) : cg_layer_norm(x, w, b, 1e-5f));
        cg_set_matmul_precision(CG_PRECISION_FP32);
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        const cg_node *n = out->node;
        int nsaved = 0;
        for (int i = 0; i < CG_NODE_MAX_SAVED; i++)
            nsaved += n->saved[i] != NULL;
        const cg_tensor *rstd = n->saved[0], *h = n->saved[1];
        ck_assert_int_eq(rstd->dtype, CG_F32);
        /* bf16: rstd, x-hat and the bias (the output's copy is made from them) */
        ck_assert_int_eq(nsaved, bf16 ? 2 + !rms : 1 + !rms + add);
        ck_assert((n->inputs[0]->storage != NULL) == (!bf16 && !add));
        cg_tensor *dx = NULL, *dw = NULL, *db = NULL;
        if (bf16) {
            ck_assert_int_eq(h->dtype, CG_BF16);
            ck_assert(cg_same_shape(h, x));
            ck_assert(
                cg_k_norm_backward_xhat(rms, h, w, rstd, g, NULL, &dx, &dw, rms ? NULL : &db));
        } else {
            ck_assert(!add || n->saved[rms ? 1 : 2]->dtype == CG_F32);
        }
        cg_tensor *s = cg_mul(out, g), *loss = cg_sum_all(s);
        cg_release_all(3, x, y, s);
        ck_assert(cg_backward(loss, NULL, false));
        if (bf16) {
            ck_assert(same_bits(x0->grad, dx) && same_bits(w->grad, dw));
            ck_assert(!add || same_bits(y0->grad, dx));
            ck_assert(rms || same_bits(b->grad, db));
        }
        cg_release_all(10, x0, y0, w, b, g, out, loss, dx, dw, db);
    }
}
END_TEST

/* In bf16 precision a linear layer that reads a norm's output keeps
 * nothing of it: its backward asks the norm's node for the output's bf16
 * copy, made again from x-hat (cg_norm_out_bf16). The weight gradients are
 * the bits of cg_k_linear_backward from the copy the forward read, for
 * every kind of linear layer and three of them reading one norm (q, k and
 * v); the copy made again is let go in the norm's backward, and a second
 * backward (retain_graph) makes it again, the same bits. A norm's output
 * written in place after the norm is the linear layer's own copy again. */
START_TEST(test_norm_output_remade)
{
    cg_rng rng = cg_rng_new(75);
    for (int v = 0; v < 6; v++) {
        const bool rms = v & 1, written = v >= 4;
        const int kind = (v / 2) % 2; /* 0: affine x3 (one norm, three layers), 1: relu, gelu */
        cg_tensor *x0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, 11, 40)), true);
        cg_tensor *nw = cg_requires_grad(cg_randn(&rng, CG_SHAPE(40)), true);
        cg_tensor *nb = cg_requires_grad(cg_randn(&rng, CG_SHAPE(40)), true);
        cg_tensor *W[3], *g[3], *o[3];
        for (int i = 0; i < 3; i++) {
            W[i] = cg_requires_grad(cg_randn(&rng, CG_SHAPE(24, 40)), true);
            g[i] = cg_randn(&rng, CG_SHAPE(3, 11, 24));
        }
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *x = cg_muls(x0, 1.5f);
        cg_tensor *y = rms ? cg_rms_norm(x, nw, 1e-5f) : cg_layer_norm(x, nw, nb, 1e-5f);
        if (written) { /* a write (through an alias: y has history): the copy is the layer's own */
            cg_tensor *d = cg_detach(y);
            ck_assert(cg_copy_(d, d));
            cg_release(d);
        }
        cg_tensor *c16 = cg_k_bf16_operand(y); /* what the products read */
        o[0] = kind ? cg_affine_relu(y, W[0], NULL) : cg_affine(y, W[0], NULL);
        o[1] = kind ? cg_affine_gelu(y, W[1], NULL, true) : cg_affine_keep_bf16(y, W[1], NULL);
        o[2] = cg_affine(y, W[2], NULL);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        cg_node *nn = written ? NULL : y->node;
        int nsaved = 0;
        for (int i = 0; nn && i < CG_NODE_MAX_SAVED; i++)
            nsaved += nn->saved[i] != NULL;
        for (int i = 0; i < 3; i++) {
            ck_assert_msg(o[i] != NULL, "%s", cg_last_error());
            const cg_node *ln = o[i]->node;
            ck_assert(written ? ln->p.i[0] > 0 : ln->p.i[0] == -1);
            for (int k = 0; !written && k < CG_NODE_MAX_SAVED; k++)
                ck_assert(!ln->saved[k] || ln->saved[k]->dtype != CG_BF16 ||
                          !cg_same_shape(ln->saved[k], y));
        }
        cg_release_all(2, x, y);
        /* what each layer's dW is: cg_k_linear_backward from the forward's copy */
        cg_tensor *want[3];
        cg_set_matmul_precision(CG_PRECISION_BF16);
        for (int i = 0; i < 3; i++) {
            want[i] = NULL;
            if (kind && i < 2)
                ck_assert(cg_k_linear_act_backward(c16, W[i], i ? CG_K_ACT_GELU_ERF : CG_K_ACT_RELU,
                                                   o[i]->node->saved[0], g[i], NULL, NULL, &want[i],
                                                   NULL));
            else
                ck_assert(cg_k_linear_backward(c16, W[i], g[i], NULL, NULL, &want[i], NULL));
        }
        cg_set_matmul_precision(CG_PRECISION_FP32);
        /* the loss sum(o_i * g_i): each layer's gradient is g_i through its activation */
        cg_tensor *loss = NULL;
        for (int i = 0; i < 3; i++) {
            cg_tensor *m = cg_mul(o[i], g[i]), *t = cg_sum_all(m), *l = loss;
            loss = l ? cg_add(l, t) : cg_retain(t);
            cg_release_all(3, m, t, l);
        }
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < 3; i++)
                cg_zero_grad(W[i]);
            cg_set_matmul_precision(CG_PRECISION_BF16);
            ck_assert_msg(cg_backward(loss, NULL, pass == 0), "%s", cg_last_error());
            cg_set_matmul_precision(CG_PRECISION_FP32);
            if (nn && pass == 0) { /* the copy made again is gone with the norm's
                                    * backward (the second frees the node) */
                int after = 0;
                for (int k = 0; k < CG_NODE_MAX_SAVED; k++)
                    after += nn->saved[k] != NULL;
                ck_assert_int_eq(after, nsaved);
            }
            for (int i = 0; i < 3; i++)
                ck_assert_msg(same_bits(W[i]->grad, want[i]), "v %d layer %d pass %d", v, i, pass);
        }
        cg_release_all(5, x0, nw, nb, c16, loss);
        for (int i = 0; i < 3; i++)
            cg_release_all(4, W[i], g[i], o[i], want[i]);
    }
}
END_TEST

/* A norm recorded in fp32 precision keeps no bf16 x-hat (a layer norm's
 * saved[1] is its fp32 mean, an added norm's the sum): a linear layer
 * reading its output in bf16 precision keeps its own copy, and its dW is
 * the backward kernel's from that copy. */
START_TEST(test_norm_fp32_then_linear_bf16)
{
    cg_rng rng = cg_rng_new(76);
    for (int v = 0; v < 2; v++) { /* layer norm, add + RMS norm */
        cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(5, 40)), true);
        cg_tensor *x2 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(5, 40)), true);
        cg_tensor *nw = cg_requires_grad(cg_randn(&rng, CG_SHAPE(40)), true);
        cg_tensor *nb = cg_requires_grad(cg_randn(&rng, CG_SHAPE(40)), true);
        cg_tensor *W = cg_requires_grad(cg_randn(&rng, CG_SHAPE(24, 40)), true);
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(5, 24));
        cg_set_matmul_precision(CG_PRECISION_FP32);
        cg_tensor *y = v ? cg_add_rms_norm(x, x2, nw, 1e-5f) : cg_layer_norm(x, nw, nb, 1e-5f);
        ck_assert(y && y->node->saved[1] && y->node->saved[1]->dtype == CG_F32);
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *o = cg_affine(y, W, NULL);
        ck_assert_msg(o && o->node->p.i[0] > 0, "the layer keeps no copy of its own");
        cg_tensor *c16 = cg_k_bf16_operand(y), *want = NULL;
        ck_assert(cg_k_linear_backward(c16, W, g, NULL, NULL, &want, NULL));
        cg_tensor *m = cg_mul(o, g), *loss = cg_sum_all(m);
        ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
        cg_set_matmul_precision(CG_PRECISION_FP32);
        ck_assert(same_bits(W->grad, want));
        cg_release_all(12, x, x2, nw, nb, W, g, y, o, c16, want, m, loss);
    }
}
END_TEST

/* cg_k_linear_act_backward: the bits of the gradient through the
 * activation given to cg_k_linear_backward, in fp32 and in bf16 precision
 * (where dx and dW together take the fused pass: the activation, the
 * rounding and the bias's sums at once, over the threads' column blocks),
 * for relu from its mask or its output (float, or rounded to bf16: what
 * bf16 training keeps) and for the GELUs from a float or a bf16
 * pre-activation, with and without the bias, with only some gradients
 * asked for, for a strided g; saved state of another shape or dtype
 * refused. */
START_TEST(test_linear_act_backward)
{
    cg_rng rng = cg_rng_new(63);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(3, 100, 96)), *w = cg_randn(&rng, CG_SHAPE(530, 96));
    cg_tensor *h = cg_randn(&rng, CG_SHAPE(3, 100, 530));
    cg_tensor *hb = cg_k_bf16_operand(h), *a = cg_k_relu(h), *m = cg_k_relu_mask(h);
    cg_tensor *ab = cg_k_bf16_operand(a);
    cg_tensor *g0 = cg_randn(&rng, CG_SHAPE(3, 530, 100)), *g = cg_transpose(g0, 1, 2);
    cg_data(g0)[7] = NAN; /* masked out or not: as the unfused gradient has it */
    const struct {
        cg_k_act act;
        const cg_tensor *saved;
    } cases[] = {{CG_K_ACT_RELU, m},     {CG_K_ACT_RELU, a},  {CG_K_ACT_RELU, ab},
                 {CG_K_ACT_GELU, h},     {CG_K_ACT_GELU, hb}, {CG_K_ACT_GELU_ERF, h},
                 {CG_K_ACT_GELU_ERF, hb}};
    for (int k = 0; k < 7; k++)
        for (int v = 0; v < 8; v++) {
            const bool bf16 = v & 1, all = v & 2, bias = v & 4;
            const cg_tensor *sv = cases[k].saved;
            cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
            cg_tensor *got[3] = {NULL, NULL, NULL}, *want[3] = {NULL, NULL, NULL};
            /* relu's rounded output: positive where the mask is (no
             * subnormal outputs here, which bf16 rounds to zero) */
            cg_tensor *gm =
                cases[k].act == CG_K_ACT_RELU
                    ? (sv == a ? cg_k_relu_backward(a, g) : cg_k_relu_mask_backward(m, g))
                : cases[k].act == CG_K_ACT_GELU ? cg_k_gelu_backward(sv, g)
                                                : cg_k_gelu_erf_backward(sv, g);
            ck_assert(cg_k_linear_act_backward(x, w, cases[k].act, sv, g, NULL, &got[0],
                                               all ? &got[1] : NULL, bias ? &got[2] : NULL));
            ck_assert(cg_k_linear_backward(x, w, gm, NULL, &want[0], all ? &want[1] : NULL,
                                           bias ? &want[2] : NULL));
            cg_set_matmul_precision(CG_PRECISION_FP32);
            for (int i = 0; i < 3; i++) {
                ck_assert((got[i] == NULL) == (want[i] == NULL));
                ck_assert_msg(!got[i] || same_bits(got[i], want[i]), "case %d, variant %d, %d", k,
                              v, i);
            }
            cg_release_all(7, gm, got[0], got[1], got[2], want[0], want[1], want[2]);
        }
    cg_tensor *dx = NULL, *dw = NULL;
    cg_tensor *h2 = cg_randn(&rng, CG_SHAPE(3, 100, 529)), *m2 = cg_k_relu_mask(h2);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    ck_assert(!cg_k_linear_act_backward(x, w, CG_K_ACT_RELU, m2, g, NULL, &dx, &dw, NULL));
    cg_tensor *mi = cg_k_to(m, CG_I64);
    ck_assert(!cg_k_linear_act_backward(x, w, CG_K_ACT_RELU, mi, g, NULL, &dx, &dw, NULL));
    ck_assert(strstr(cg_last_error(), "bool mask") != NULL);
    cg_release(mi);
    ck_assert(!cg_k_linear_act_backward(x, w, CG_K_ACT_GELU, m, g, NULL, &dx, &dw, NULL));
    ck_assert(strstr(cg_last_error(), "pre-activation") != NULL);
    ck_assert(!cg_k_linear_act_backward(x, w, (cg_k_act)9, h, g, NULL, &dx, &dw, NULL));
    ck_assert(strstr(cg_last_error(), "unknown activation 9") != NULL);
    ck_assert(!cg_k_linear_act_backward(x, w, CG_K_ACT_RELU, NULL, g, NULL, &dx, &dw, NULL));
    cg_set_matmul_precision(CG_PRECISION_FP32);
    ck_assert(dx == NULL && dw == NULL);
    cg_release_all(10, x, w, h, hb, a, ab, m, g0, g, h2);
    cg_release(m2);
}
END_TEST

/* cg_k_linear_dropout_backward: the bits of cg_k_dropout_backward then
 * cg_k_linear_backward, fp32 and bf16 (dx and dW together: the dropout in
 * the pass that rounds g), p 0.3, 0 and 1, 1 and 2 threads, with and
 * without the bias, with only some gradients asked for, a strided g with
 * a NaN (dropped or not, as the unfused gradient has it); a mask of
 * another dtype or shape, or p outside [0, 1], refused in one line. */
START_TEST(test_linear_dropout_backward)
{
    cg_rng rng = cg_rng_new(65);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(3, 100, 96)), *w = cg_randn(&rng, CG_SHAPE(530, 96));
    cg_tensor *h = cg_randn(&rng, CG_SHAPE(3, 100, 530));
    cg_tensor *g0 = cg_randn(&rng, CG_SHAPE(3, 530, 100)), *g = cg_transpose(g0, 1, 2);
    cg_data(g0)[7] = NAN;
    const float ps[] = {0.3f, 0.0f, 1.0f};
    for (int k = 0; k < 3; k++) {
        cg_rng d = cg_rng_new(11);
        cg_tensor *m = NULL, *dh = cg_k_dropout(h, ps[k], &d, &m);
        for (int v = 0; v < 16; v++) {
            const bool bf16 = v & 1, all = v & 2, bias = v & 4;
            cg_set_num_threads(1 + (v >> 3 & 1));
            cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
            cg_tensor *got[3] = {NULL, NULL, NULL}, *want[3] = {NULL, NULL, NULL};
            cg_tensor *gm = cg_k_dropout_backward(m, g, ps[k]);
            ck_assert(cg_k_linear_dropout_backward(x, w, m, ps[k], g, NULL, &got[0],
                                                   all ? &got[1] : NULL, bias ? &got[2] : NULL));
            ck_assert(cg_k_linear_backward(x, w, gm, NULL, &want[0], all ? &want[1] : NULL,
                                           bias ? &want[2] : NULL));
            for (int i = 0; i < 3; i++) {
                ck_assert((got[i] == NULL) == (want[i] == NULL));
                ck_assert_msg(!got[i] || same_bits(got[i], want[i]), "p %g, variant %d, %d",
                              (double)ps[k], v, i);
            }
            cg_release_all(7, gm, got[0], got[1], got[2], want[0], want[1], want[2]);
        }
        cg_release_all(2, m, dh);
    }
    cg_set_num_threads(0);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_tensor *dx = NULL, *dw = NULL, *hm = cg_k_relu_mask(h), *hf = cg_k_to(hm, CG_F32);
    cg_tensor *h2 = cg_randn(&rng, CG_SHAPE(3, 100, 529)), *m2 = cg_k_relu_mask(h2);
    ck_assert(!cg_k_linear_dropout_backward(x, w, hf, 0.5f, g, NULL, &dx, &dw, NULL));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "need a bool mask of the gradient's shape"));
    ck_assert(!cg_k_linear_dropout_backward(x, w, m2, 0.5f, g, NULL, &dx, &dw, NULL));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[3, 100, 529]"));
    ck_assert(!cg_k_linear_dropout_backward(x, w, hm, 1.5f, g, NULL, &dx, &dw, NULL));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "p must be in [0, 1]"));
    ck_assert(!cg_k_linear_dropout_backward(x, w, NULL, 0.5f, g, NULL, &dx, &dw, NULL));
    ck_assert(dx == NULL && dw == NULL);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_release_all(9, x, w, h, g0, g, hm, hf, h2, m2);
}
END_TEST

/* The bias's gradient of a linear layer's bf16 backward (both products
 * asked for: g rounded once, its column sums in the same pass) is summed in
 * blocks of 128 rows, the blocks' sums added in order: the same bits on 1
 * and 2 threads, within one rounding of the float64 sum, and with one block
 * (N <= 128) the bits of fp32's one chain a column. The gradients of x and
 * W are those of the product on g rounded (the same on either thread
 * count). */
START_TEST(test_bias_grad_blocks)
{
    cg_rng rng = cg_rng_new(71);
    const int64_t rows[] = {100, 6 * 128 + 17};
    for (int c = 0; c < 2; c++) {
        const int64_t N = rows[c], out = 70, in = 40;
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, in)), *w = cg_randn(&rng, CG_SHAPE(out, in));
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(N, out));
        float *gv = cg_data(g);
        for (int64_t i = 0; i < N * out; i++) /* magnitudes 2^-20 to 2^20: sums that round */
            gv[i] = ldexpf(gv[i], (int)(i * 7919 % 41) - 20);
        cg_tensor *got[2][3];
        cg_set_matmul_precision(CG_PRECISION_BF16);
        for (int t = 0; t < 2; t++) {
            cg_set_num_threads(t + 1);
            ck_assert(cg_k_linear_backward(x, w, g, NULL, &got[t][0], &got[t][1], &got[t][2]));
        }
        cg_set_num_threads(0);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(same_bits(got[0][i], got[1][i]), "N %lld, gradient %d", (long long)N, i);
        const float *db = cg_data(got[0][2]);
        for (int64_t j = 0; j < out; j++) {
            double exact = 0.0, mag = 0.0;
            for (int64_t r = 0; r < N; r++) {
                exact += gv[r * out + j];
                mag += fabs(gv[r * out + j]);
            }
            /* the float rounding, and each double sum's (N additions) */
            ck_assert_msg(fabs(db[j] - exact) <= fabs(exact) * 0x1p-24 + 2.0 * N * 0x1p-53 * mag,
                          "N %lld, column %lld: %.9g, exact %.17g", (long long)N, (long long)j,
                          db[j], exact);
        }
        if (N <= 128) {
            cg_tensor *db32 = NULL;
            ck_assert(cg_k_linear_backward(x, w, g, NULL, NULL, NULL, &db32));
            ck_assert(same_bits(got[0][2], db32));
            cg_release(db32);
        }
        for (int t = 0; t < 2; t++)
            cg_release_all(3, got[t][0], got[t][1], got[t][2]);
        cg_release_all(3, x, w, g);
    }
}
END_TEST

/* cg_k_linear_backward given an acc it refuses: no outputs set */
typedef struct {
    cg_tensor *x, *w, *g;
} linear_acc_call;
static bool linear_acc_refused(void *ctx, cg_tensor *acc, bool want_dx)
{
    const linear_acc_call *c = ctx;
    cg_tensor *dx = NULL, *dw = NULL;
    const bool ok = cg_k_linear_backward(c->x, c->w, c->g, acc, want_dx ? &dx : NULL, &dw, NULL);
    ck_assert(!dx && !dw);
    return ok;
}

/* dx added into a gradient the input already has (acc, autograd's
 * cg_node_grad_acc): acc + dx rounded once, the bits of cg_k_add_ on the
 * dx made apart, in fp32 and bf16 precision, with out within one k block
 * of the bf16 product (added as the product writes) and beyond it (added
 * after), x as floats and as its bf16 copy, with and without a ReLU, few
 * rows (the panel path) and many, on 1 and 2 threads; dW and db as
 * without acc, *dx acc itself, acc's version bumped (cg_tensor_modified).
 * A wrong acc is refused, named. */
START_TEST(test_linear_backward_into)
{
    cg_rng rng = cg_rng_new(73);
    const int64_t rows[] = {40, 300}, outs[] = {70, CG_BF16_KC + 116};
    for (int v = 0; v < 32; v++) {
        const int64_t N = rows[v & 1], out = outs[(v >> 1) & 1], in = 48;
        const bool bf16 = v & 4, x16 = v & 8, relu = v & 16;
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, in)), *w = cg_randn(&rng, CG_SHAPE(out, in));
        cg_tensor *b = cg_randn(&rng, CG_SHAPE(out)), *g = cg_randn(&rng, CG_SHAPE(N, out));
        cg_tensor *acc0 = cg_randn(&rng, CG_SHAPE(N, in));
        cg_tensor *xr = x16 ? cg_k_bf16_operand(x) : cg_retain(x);
        cg_tensor *h = cg_k_linear(x, w, b), *mask = cg_k_relu_mask(h);
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        for (int t = 1; t <= 2; t++) {
            cg_set_num_threads(t);
            cg_tensor *want[3], *got[3], *acc = cg_k_clone(acc0);
            ck_assert(relu ? cg_k_linear_act_backward(xr, w, CG_K_ACT_RELU, mask, g, NULL, &want[0],
                                                      &want[1], &want[2])
                           : cg_k_linear_backward(xr, w, g, NULL, &want[0], &want[1], &want[2]));
            cg_tensor *sum = cg_k_clone(acc0);
            ck_assert(cg_k_add_(sum, want[0]));
            const uint64_t v0 = cg_version(acc);
            ck_assert(relu ? cg_k_linear_act_backward(xr, w, CG_K_ACT_RELU, mask, g, acc, &got[0],
                                                      &got[1], &got[2])
                           : cg_k_linear_backward(xr, w, g, acc, &got[0], &got[1], &got[2]));
            ck_assert_ptr_eq(got[0], acc);
            ck_assert_msg(cg_version(acc) > v0, "acc written in place, its version not bumped");
            ck_assert_msg(same_bits(acc, sum) && same_bits(got[1], want[1]) &&
                              same_bits(got[2], want[2]),
                          "N %lld, out %lld, %s, x %s, relu %d, %d threads", (long long)N,
                          (long long)out, bf16 ? "bf16" : "fp32", x16 ? "bf16" : "float", relu, t);
            cg_release_all(4, sum, got[0], got[1], got[2]);
            cg_release_all(4, acc, want[0], want[1], want[2]);
        }
        cg_set_num_threads(0);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        cg_release_all(8, x, w, b, g, acc0, xr, h, mask);
    }
    /* refused: another dtype, another shape, a view, or no dx asked for */
    linear_acc_call c = {cg_randn(&rng, CG_SHAPE(6, 4)), cg_randn(&rng, CG_SHAPE(5, 4)),
                         cg_randn(&rng, CG_SHAPE(6, 5))};
    cg_test_acc_refused(6, 4, "linear backward", linear_acc_refused, &c);
    cg_release_all(3, c.x, c.w, c.g);
}
END_TEST

/* dx added into the input itself (acc = x) or into g (in == out): the
 * weight's gradient reads x and g as they were before the call, bit for
 * bit the gradients made apart (it read x with dx already added: wrong by
 * hundreds, silently, whenever the product added into acc as it wrote). */
START_TEST(test_linear_backward_acc_aliased)
{
    cg_rng rng = cg_rng_new(79);
    for (int v = 0; v < 8; v++) {
        const bool bf16 = v & 1, into_g = v & 2, relu = v & 4;
        const int64_t N = 64, in = 48, out = 48;
        cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, in)), *w = cg_randn(&rng, CG_SHAPE(out, in));
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(N, out)), *mask = cg_k_relu_mask(g);
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *want[3], *got[3];
        ck_assert(relu ? cg_k_linear_act_backward(x, w, CG_K_ACT_RELU, mask, g, NULL, &want[0],
                                                  &want[1], &want[2])
                       : cg_k_linear_backward(x, w, g, NULL, &want[0], &want[1], &want[2]));
        cg_tensor *sum = cg_k_clone(into_g ? g : x);
        ck_assert(cg_k_add_(sum, want[0]));
        cg_tensor *x2 = cg_k_clone(x), *g2 = cg_k_clone(g), *acc = into_g ? g2 : x2;
        ck_assert(relu ? cg_k_linear_act_backward(x2, w, CG_K_ACT_RELU, mask, g2, acc, &got[0],
                                                  &got[1], &got[2])
                       : cg_k_linear_backward(x2, w, g2, acc, &got[0], &got[1], &got[2]));
        ck_assert_msg(same_bits(acc, sum) && same_bits(got[1], want[1]) &&
                          same_bits(got[2], want[2]),
                      "%s, acc = %s, relu %d", bf16 ? "bf16" : "fp32", into_g ? "g" : "x", relu);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        cg_release_all(10, x, w, g, mask, want[0], want[1], want[2], sum, x2, g2);
        cg_release_all(3, got[0], got[1], got[2]);
    }
}
END_TEST

/* GELU (both forms) in bf16 precision keeps its input rounded to bf16
 * (the products' rounding) and not the input: the gradient is the kernel's
 * on the rounded input, bit for bit (in runs of 65,536 elements: 90,300
 * here), and within 2% of |g| of the exact derivative at the float input
 * (float64). In fp32 precision the input itself is read, as before. */
static double gelu_grad64(double x, bool erf_form)
{
    if (erf_form)
        return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
    const double c = sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

START_TEST(test_gelu_saves_bf16)
{
    cg_rng rng = cg_rng_new(67);
    for (int v = 0; v < 4; v++) {
        const bool erf_form = v & 1, bf16 = v & 2;
        cg_tensor *x0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(300, 301)), true);
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(300, 301));
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *x = cg_muls(x0, 2.0f);
        cg_tensor *y = erf_form ? cg_gelu_erf(x) : cg_gelu(x);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        const cg_node *n = y->node;
        cg_tensor *xr = bf16 ? cg_k_to(n->saved[0], CG_F32) : cg_retain(x);
        ck_assert(bf16 ? n->saved[0]->dtype == CG_BF16 && !n->inputs[0]->storage
                       : n->saved[0] == NULL && n->inputs[0]->storage);
        cg_tensor *want = erf_form ? cg_k_gelu_erf_backward(xr, g) : cg_k_gelu_backward(xr, g);
        cg_tensor *s = cg_mul(y, g), *loss = cg_sum_all(s);
        ck_assert(cg_backward(loss, NULL, false));
        cg_tensor *got = cg_muls(want, 2.0f); /* x = 2 x0 */
        ck_assert(same_bits(x0->grad, got));
        float *gx = cg_test_values(x0->grad), *xv = cg_test_values(x), *gv = cg_test_values(g);
        for (int64_t i = 0; i < cg_numel(x); i++) {
            const double exact = 2.0 * gv[i] * gelu_grad64(xv[i], erf_form);
            ck_assert_msg(fabs(gx[i] - exact) <= 0.02 * fabs(gv[i]) + 1e-6,
                          "gelu%s %lld: %.9g, exact %.9g", erf_form ? "_erf" : "", (long long)i,
                          (double)gx[i], exact);
        }
        free(gx);
        free(xv);
        free(gv);
        cg_release_all(9, x0, g, x, y, xr, want, s, loss, got);
    }
}
END_TEST

/* A gated feed-forward's gate (cg_swiglu_halves, cg_geglu_halves) in bf16
 * precision keeps its input h rounded to bf16, not h, as GELU does above:
 * the node saves a bf16 tensor and holds none of h's memory (a header
 * without storage), h's gradient is the kernel's at the rounded h bit for
 * bit, and within 2% of the exact gradient at the float h (float64), per
 * unit of |g| (1 + |a|) (1 + |b|). A feed-forward's product keeps that
 * rounding as it writes h (cg_affine_keep_bf16): the gate takes it. In
 * fp32 precision h itself is read, as before. */
static double gate64(double x, bool gelu, double *d)
{
    if (gelu) {
        const double c = sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
        *d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
        return 0.5 * x * (1.0 + t);
    }
    const double s = 1.0 / (1.0 + exp(-x));
    *d = s * (1.0 + x * (1.0 - s));
    return x * s;
}

START_TEST(test_gate_saves_bf16)
{
    enum { R = 90, N = 700 }; /* a half's rows cross the kernel's runs of 512 */
    cg_rng rng = cg_rng_new(68);
    for (int v = 0; v < 4; v++) {
        const bool gelu = v & 1, bf16 = v & 2;
        cg_tensor *h0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(R, 2 * N)), true);
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(R, N));
        cg_set_matmul_precision(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *h = cg_muls(h0, 2.0f);
        cg_tensor *y = gelu ? cg_geglu_halves(h) : cg_swiglu_halves(h);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        const cg_node *n = y->node;
        ck_assert(bf16 ? n->saved[0] && n->saved[0]->dtype == CG_BF16 && !n->inputs[0]->storage
                       : n->saved[0] == NULL && n->inputs[0]->storage);
        cg_tensor *hr = bf16 ? cg_retain(n->saved[0]) : cg_retain(h);
        cg_tensor *want = cg_k_gated_halves_backward(hr, g, gelu ? CG_K_GATE_GELU : CG_K_GATE_SILU);
        ck_assert(want && want->dtype == CG_F32);
        cg_tensor *s = cg_mul(y, g), *loss = cg_sum_all(s);
        ck_assert(cg_backward(loss, NULL, false));
        cg_tensor *got = cg_muls(want, 2.0f); /* h = 2 h0 */
        ck_assert(same_bits(h0->grad, got));
        float *gh = cg_test_values(h0->grad), *hv = cg_test_values(h), *gv = cg_test_values(g);
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < N; i++) {
                const double a = hv[r * 2 * N + i], b = hv[r * 2 * N + N + i], gi = gv[r * N + i];
                double d;
                const double act = gate64(a, gelu, &d);
                const double bound = 0.02 * fabs(gi) * (1 + fabs(a)) * (1 + fabs(b)) + 1e-6;
                const double da = gh[r * 2 * N + i], db = gh[r * 2 * N + N + i];
                ck_assert_msg(
                    fabs(da - 2.0 * gi * b * d) <= bound && fabs(db - 2.0 * gi * act) <= bound,
                    "%s (%lld, %lld): %.9g %.9g, exact %.9g %.9g", gelu ? "geglu" : "swiglu",
                    (long long)r, (long long)i, da, db, 2.0 * gi * b * d, 2.0 * gi * act);
            }
        free(gh);
        free(hv);
        free(gv);
        cg_release_all(9, h0, g, h, y, hr, want, s, loss, got);
    }
    /* a feed-forward's product keeps h's rounding, which the gate saves */
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 16)), *w = cg_randn(&rng, CG_SHAPE(2 * 24, 16));
    w->requires_grad = true;
    cg_tensor *hp = cg_affine_keep_bf16(x, w, NULL), *y = cg_swiglu_halves(hp);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_tensor *kept = cg_k_bf16_operand(hp);
    ck_assert(kept && y->node->saved[0] && cg_data_ptr(y->node->saved[0]) == cg_data_ptr(kept));
    cg_release_all(5, x, w, hp, y, kept);
}
END_TEST

/* cg_k_attention given q, k and v as bf16 copies (what a recorded bf16
 * attention hands it): in bf16 precision the output, the saved state and
 * the weights asked for have the bits of the float q, k, v (the products
 * round them so); in fp32 precision those of the floats the copies hold.
 * Head views of [B,T,H,dh] storage (strided, as MultiHeadAttention splits
 * them) and contiguous copies; 40, 200 and 600 keys; causal with key
 * padding and not. */
START_TEST(test_attention_bf16_inputs)
{
    cg_rng rng = cg_rng_new(74);
    const int64_t Ts[3] = {40, 200, 600};
    for (int v = 0; v < 6; v++) {
        const int64_t T = Ts[v % 3];
        const bool causal = v >= 3;
        cg_tensor *in[3], *hd[3], *c[3], *wide[3];
        for (int i = 0; i < 3; i++) {
            in[i] = cg_randn(&rng, CG_SHAPE(2, T, 2, 8));
            hd[i] = cg_transpose(in[i], 1, 2); /* [2,2,T,8], strided */
            c[i] = cg_k_bf16_operand(hd[i]);
            wide[i] = cg_k_to(c[i], CG_F32);
            ck_assert_int_eq(c[i]->dtype, CG_BF16);
        }
        uint8_t pad[2 * 600] = {0};
        pad[T - 1] = pad[2 * T - 1] = pad[2 * T - 2] = 1;
        cg_tensor *kpad = causal ? NULL : cg_test_mask(CG_SHAPE(2, T), pad);
        for (int prec = 0; prec < 2; prec++) {
            cg_set_matmul_precision(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
            cg_tensor *const *ref_in = prec ? hd : wide;
            cg_tensor *s0 = NULL, *w0 = NULL, *s1 = NULL, *w1 = NULL;
            cg_tensor *y0 = cg_k_attention(ref_in[0], ref_in[1], ref_in[2], causal, kpad, &s0, &w0);
            cg_tensor *y1 = cg_k_attention(c[0], c[1], c[2], causal, kpad, &s1, &w1);
            cg_set_matmul_precision(CG_PRECISION_FP32);
            ck_assert_msg(y1 != NULL, "%s", cg_last_error());
            ck_assert(same_bits(y0, y1) && same_bits(s0, s1) && same_bits(w0, w1));
            cg_release_all(6, y0, y1, s0, s1, w0, w1);
        }
        /* another dtype still refused, and a NULL input by the attention
         * itself, also where bf16 training makes copies first */
        cg_tensor *ids = cg_k_to(hd[0], CG_I64);
        ck_assert_ptr_null(cg_k_attention(ids, c[1], c[2], causal, kpad, NULL, NULL));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "expected float32"));
        cg_tensor *qg = cg_requires_grad(cg_k_contiguous(hd[0]), true);
        cg_set_matmul_precision(CG_PRECISION_BF16);
        CG_ASSERT_FAILS(cg_attention(qg, NULL, hd[2], causal, kpad, NULL), "attention");
        cg_tensor *cb = cg_requires_grad(cg_k_contiguous(c[0]), true);
        cg_tensor *yb = cg_attention(cb, hd[1], hd[2], causal, kpad, NULL); /* a bf16 q as it is */
        cg_set_matmul_precision(CG_PRECISION_FP32);
        ck_assert_msg(yb != NULL, "%s", cg_last_error());
        cg_release_all(3, qg, cb, yb);
        cg_release(ids); /* kpad: the harness's (cg_test_mask) */
        for (int i = 0; i < 3; i++)
            cg_release_all(4, in[i], hd[i], c[i], wide[i]);
    }
}
END_TEST

/* Keys up to which attention in bf16 precision keeps its weights on this
 * machine's bf16 kernel (core/attention.c keeps_weights): all 256 of
 * PKEEP on the vdpbf16ps kernel and the emulation; 128 on AMX */
static int64_t bf16_kept_keys(void)
{
    return cg_bf16_auto_path() == CG_GEMM_BF16_AMX ? 128 : CG_ATTN_ROW_KEYS;
}

/* Attention in bf16 precision keeps q, k and v's bf16 copies instead of
 * them (its backward reads them only in products, which round them), and
 * its output only where the backward reads it (weights recomputed over
 * several key blocks, beyond 512 keys): the gradients have the bits of
 * cg_k_attention_backward on the float q, k, v, with kept weights (40
 * keys, kept in bf16: the weights asked for are their values; 200 and
 * 256, the last length kept, on the vdpbf16ps kernel and the emulation)
 * and recomputed ones (200 and 256 keys on AMX tiles, 300 on every
 * kernel; 600 keys: S = q k^T from the copies),
 * causal with key padding and not. */
START_TEST(test_attention_saves_bf16)
{
    cg_rng rng = cg_rng_new(71);
    const int64_t Ts[5] = {40, 200, 256, 300, 600};
    for (int v = 0; v < 10; v++) {
        const int64_t T = Ts[v % 5];
        const bool causal = v >= 5;
        cg_tensor *q0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 2, T, 8)), true);
        cg_tensor *k0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 2, T, 8)), true);
        cg_tensor *v0 = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 2, T, 8)), true);
        cg_tensor *g = cg_randn(&rng, CG_SHAPE(2, 2, T, 8));
        uint8_t pad[2 * 600] = {0};
        pad[T - 1] = pad[2 * T - 1] = pad[2 * T - 2] = 1;
        cg_tensor *kpad = causal ? NULL : cg_test_mask(CG_SHAPE(2, T), pad);
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *q = cg_muls(q0, 1.0f), *k = cg_muls(k0, 1.0f), *vv = cg_muls(v0, 1.0f);
        cg_tensor *y = cg_attention(q, k, vv, causal, kpad, NULL);
        ck_assert_msg(y != NULL, "%s", cg_last_error());
        const cg_node *n = y->node;
        for (int i = 0; i < 3; i++) {
            ck_assert_ptr_null(n->inputs[i]->storage);
            ck_assert_int_eq(n->saved[n->p.i[1] - 1 + i]->dtype, CG_BF16);
        }
        /* the output only where the backward reads it (T > 512) */
        bool keeps_out = false;
        for (int i = 0; i < CG_NODE_MAX_SAVED; i++)
            keeps_out |= n->saved[i] && n->saved[i]->storage == y->storage;
        ck_assert(keeps_out == (T > 512));
        cg_tensor *saved = NULL, *wts = NULL, *dq, *dk, *dv;
        cg_tensor *ref = cg_k_attention(q, k, vv, causal, kpad, &saved, &wts);
        ck_assert(same_bits(y, ref));
        /* weights are kept up to bf16_kept_keys() keys (in bf16, and the
         * weights asked for are those values as floats); beyond, the
         * log-sum-exps */
        ck_assert_int_eq(saved->ndim, T <= bf16_kept_keys() ? 4 : 3);
        ck_assert_int_eq(saved->dtype, saved->ndim == 4 ? CG_BF16 : CG_F32);
        ck_assert_int_eq(wts->dtype, CG_F32);
        for (int64_t i = 0; saved->ndim == 4 && i < cg_numel(wts); i++)
            ck_assert_float_eq(cg_bf16_to_f32(cg_data_bf16(saved)[i]), cg_data(wts)[i]);
        /* saved state of another dtype (log-sum-exps in bf16, ids) refused */
        cg_tensor *bad = cg_k_to(saved, saved->ndim == 4 ? CG_I64 : CG_BF16);
        ck_assert(!cg_k_attention_backward(q, k, vv, ref, bad, g, causal, kpad, &dq, &dk, &dv));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "attention backward: saved state is"));
        cg_release(bad);
        ck_assert(cg_k_attention_backward(q, k, vv, ref, saved, g, causal, kpad, &dq, &dk, &dv));
        cg_tensor *s = cg_mul(y, g), *loss = cg_sum_all(s);
        cg_release_all(4, q, k, vv, s);
        ck_assert(cg_backward(loss, NULL, false));
        cg_set_matmul_precision(CG_PRECISION_FP32);
        ck_assert(same_bits(q0->grad, dq) && same_bits(k0->grad, dk) && same_bits(v0->grad, dv));
        cg_release_all(12, q0, k0, v0, g, y, ref, saved, wts, dq, dk, dv, loss);
    }
}
END_TEST

/* q, k, v and dO of one shape, drawn in that order. */
static void qkvg_randn(cg_rng *rng, int ndim, const int64_t *shape, cg_tensor **q, cg_tensor **k,
                       cg_tensor **v, cg_tensor **g)
{
    *q = cg_randn(rng, ndim, shape);
    *k = cg_randn(rng, ndim, shape);
    *v = cg_randn(rng, ndim, shape);
    *g = cg_randn(rng, ndim, shape);
}

/* Over several key blocks (beyond 512 keys) attention's backward takes
 * D_i = <dO_i, O_i> from the output instead of <P_i, dP_i>; in bf16 the
 * two must read the same dO, the rounded one dP = dO v^T reads, or each
 * row's dS = P (dP - D) no longer sums to 0 (a shift of all of a row's
 * scores changes nothing, so its gradient must be 0). A query that sees
 * one key has weight 1 there: dq and dk are exactly 0 (PyTorch's autocast
 * gives 0); with D from the unrounded dO they came out up to 0.02 and
 * 0.17 at 513 and 1,100 keys (1e-6 at 512, one block), the error in dk
 * growing with the queries. Key padding that leaves only key 0, causal or
 * not. */
START_TEST(test_attention_lse_blocks_bf16)
{
    cg_rng rng = cg_rng_new(79);
    const int64_t B = 1, H = 2, dh = 32, Ts[3] = {512, 513, 1100};
    for (int v = 0; v < 6; v++) {
        const int64_t T = Ts[v % 3];
        const bool causal = v >= 3;
        cg_tensor *q, *k, *vv, *g;
        qkvg_randn(&rng, CG_SHAPE(B, H, T, dh), &q, &k, &vv, &g);
        uint8_t *pad = malloc((size_t)T);
        for (int64_t j = 0; j < T; j++)
            pad[j] = j != 0;
        cg_tensor *kpad = cg_test_mask(CG_SHAPE(B, T), pad);
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *saved = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
        cg_tensor *y = cg_k_attention(q, k, vv, causal, kpad, &saved, NULL);
        ck_assert_msg(y != NULL, "%s", cg_last_error());
        ck_assert(cg_k_attention_backward(q, k, vv, y, saved, g, causal, kpad, &dq, &dk, &dv));
        cg_set_matmul_precision(CG_PRECISION_FP32);
        float *a = cg_test_values(dq), *b = cg_test_values(dk), *c = cg_test_values(dv);
        double wq = 0.0, wk = 0.0, big = 0.0;
        for (int64_t i = 0; i < B * H * T * dh; i++) {
            wq = fmax(wq, fabs(a[i]));
            wk = fmax(wk, fabs(b[i]));
            big = fmax(big, fabs(c[i]));
        }
        ck_assert_msg(wq < 1e-5 && wk < 1e-5 * big,
                      "T %lld causal %d, one key: |dq| %g, |dk| %g (|dv| %g), want 0", (long long)T,
                      causal, wq, wk, big);
        free(a), free(b), free(c), free(pad);
        cg_release_all(9, y, saved, dq, dk, dv, q, k, vv, g); /* kpad: the harness's */
    }
}
END_TEST

/* Attention's backward in bf16 rounds dO once for all the heads: its
 * gradients have the same bits whatever g's layout, contiguous, the heads
 * of a [B, T, H dh] tensor (what a layer hands over), a slice of a wider
 * tensor (not dense) or a head's elements dh apart T (a transposed view:
 * rounded through a contiguous copy), with kept weights (40 keys) and
 * recomputed ones (600), causal and not. */
START_TEST(test_attention_grad_layouts_bf16)
{
    cg_rng rng = cg_rng_new(73);
    /* 33: an odd count of dS's elements, whose bf16 copy ends in half a float */
    const int64_t B = 2, H = 3, dh = 16, Ts[3] = {40, 600, 33};
    for (int v = 0; v < 6; v++) {
        const int64_t T = Ts[v % 3];
        const bool causal = v >= 3;
        cg_tensor *q, *k, *vv, *g;
        qkvg_randn(&rng, CG_SHAPE(B, H, T, dh), &q, &k, &vv, &g);
        /* the heads of [B, T, H dh]: dense, rows H dh apart */
        cg_tensor *gv1 = cg_view_transpose(g, 1, 2), *gt = cg_k_contiguous(gv1);
        cg_tensor *heads = cg_view_transpose(gt, 1, 2);
        /* a slice of [B, H, T, 2 dh]: not dense */
        cg_tensor *wide = cg_zeros(CG_SHAPE(B, H, T, 2 * dh));
        cg_tensor *slice = cg_view_slice(wide, 3, 0, dh, 1);
        ck_assert(cg_k_add_(slice, g));
        /* [B, H, dh, T] transposed: a head's elements T apart */
        cg_tensor *gv2 = cg_view_transpose(g, 2, 3), *gc = cg_k_contiguous(gv2);
        cg_tensor *across = cg_view_transpose(gc, 2, 3);
        ck_assert(cg_is_dense(heads) && !cg_is_dense(slice) && across->strides[3] == T);
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *saved = NULL;
        cg_tensor *out = cg_k_attention(q, k, vv, causal, NULL, &saved, NULL);
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        const cg_tensor *o = cg_k_attention_needs_out(k, saved) ? out : NULL;
        cg_tensor *d[4][3];
        const cg_tensor *gs[4] = {g, heads, slice, across};
        for (int l = 0; l < 4; l++)
            ck_assert_msg(cg_k_attention_backward(q, k, vv, o, saved, gs[l], causal, NULL, &d[l][0],
                                                  &d[l][1], &d[l][2]),
                          "%s", cg_last_error());
        cg_set_matmul_precision(CG_PRECISION_FP32);
        for (int l = 1; l < 4; l++)
            for (int i = 0; i < 3; i++)
                ck_assert_msg(same_bits(d[l][i], d[0][i]), "T %lld causal %d: g's layout %d, d%c",
                              (long long)T, causal, l, "qkv"[i]);
        for (int l = 0; l < 4; l++)
            cg_release_all(3, d[l][0], d[l][1], d[l][2]);
        cg_release_all(14, q, k, vv, g, gv1, gt, heads, wide, slice, gv2, gc, across, saved, out);
    }
}
END_TEST

/* ------------------------------------------------ attention on AMX tiles */

/* Attention in bf16 (core/attention_amx.h): the weights of rows longer
 * than bf16_kept_keys() are recomputed in the backward, and on AMX the
 * products of rows up to 512 keys then run on tiles of their own. Their
 * results have the bits of the same products through the GEMM
 * (CG_ATTN_AMX=0) on 1 and 2 threads, from q, k and v as floats and as
 * their bf16 copies, across strips, tiles, padding of dh and of the keys,
 * causal and key-padded rows, cross-attention and keys no query sees; and
 * they are within bf16's error of attention in double. On a CPU without
 * AMX the same cases run through the GEMM. */
typedef struct {
    int64_t B, H, Tq, Tk, dh;
    bool causal, pad;
} amx_case;

/* out, saved, dq, dk, dv */
static void amx_attention(const amx_case *c, cg_tensor *const *in, const cg_tensor *kp,
                          cg_tensor **r)
{
    r[0] = cg_k_attention(in[0], in[1], in[2], c->causal, kp, &r[1], NULL);
    ck_assert_msg(r[0] != NULL, "%s", cg_last_error());
    const cg_tensor *out = cg_k_attention_needs_out(in[1], r[1]) ? r[0] : NULL;
    ck_assert_msg(cg_k_attention_backward(in[0], in[1], in[2], out, r[1], in[3], c->causal, kp,
                                          &r[2], &r[3], &r[4]),
                  "%s", cg_last_error());
}

/* The worst difference of out, dq, dk, dv (r[0], r[2..4]) from attention in
 * double, relative to each result's largest magnitude. */
static double amx_worst(const amx_case *c, cg_tensor *const *in, const uint8_t *pad,
                        cg_tensor *const *r)
{
    const int64_t Tq = c->Tq, Tk = c->Tk, dh = c->dh;
    float *x[4], *y[4];
    for (int i = 0; i < 4; i++) {
        x[i] = cg_test_values(in[i]);
        y[i] = cg_test_values(r[i == 0 ? 0 : i + 1]);
    }
    double *ref[4], big[4] = {0};
    ref[0] = calloc((size_t)(c->B * c->H * Tq * dh), sizeof(double));
    ref[1] = calloc((size_t)(c->B * c->H * Tq * dh), sizeof(double));
    ref[2] = calloc((size_t)(c->B * c->H * Tk * dh), sizeof(double));
    ref[3] = calloc((size_t)(c->B * c->H * Tk * dh), sizeof(double));
    double *P = malloc((size_t)Tk * sizeof(double)), *dP = malloc((size_t)Tk * sizeof(double));
    const double sc = sqrt((double)dh);
    for (int64_t bh = 0; bh < c->B * c->H; bh++) {
        const float *q = x[0] + bh * Tq * dh, *k = x[1] + bh * Tk * dh;
        const float *v = x[2] + bh * Tk * dh, *g = x[3] + bh * Tq * dh;
        for (int64_t i = 0; i < Tq; i++) {
            double mx = -INFINITY, sum = 0.0, dot = 0.0;
            for (int64_t j = 0; j < Tk; j++) {
                const bool masked = (c->causal && j > i) || (pad && pad[bh / c->H * Tk + j]);
                double s = 0.0;
                for (int64_t e = 0; e < dh; e++)
                    s += (double)q[i * dh + e] * k[j * dh + e];
                P[j] = masked ? -INFINITY : s / sc;
                mx = fmax(mx, P[j]);
            }
            for (int64_t j = 0; j < Tk; j++)
                sum += (P[j] = exp(P[j] - mx));
            for (int64_t j = 0; j < Tk; j++) {
                P[j] /= sum;
                dP[j] = 0.0;
                for (int64_t e = 0; e < dh; e++)
                    dP[j] += (double)g[i * dh + e] * v[j * dh + e];
                dot += P[j] * dP[j];
            }
            for (int64_t j = 0; j < Tk; j++) {
                const double ds = P[j] * (dP[j] - dot) / sc;
                for (int64_t e = 0; e < dh; e++) {
                    ref[0][(bh * Tq + i) * dh + e] += P[j] * v[j * dh + e];
                    ref[1][(bh * Tq + i) * dh + e] += ds * k[j * dh + e];
                    ref[2][(bh * Tk + j) * dh + e] += ds * q[i * dh + e];
                    ref[3][(bh * Tk + j) * dh + e] += P[j] * g[i * dh + e];
                }
            }
        }
    }
    double worst = 0.0;
    for (int t = 0; t < 4; t++) {
        const int64_t n = c->B * c->H * (t < 2 ? Tq : Tk) * dh;
        for (int64_t i = 0; i < n; i++)
            big[t] = fmax(big[t], fabs(ref[t][i]));
        for (int64_t i = 0; i < n; i++) /* also NaN: fmax keeps the number, so test it */
            worst = isnan(y[t][i]) ? INFINITY : fmax(worst, fabs(y[t][i] - ref[t][i]) / big[t]);
    }
    for (int i = 0; i < 4; i++) {
        free(x[i]);
        free(y[i]);
        free(ref[i]);
    }
    free(P);
    free(dP);
    return worst;
}

START_TEST(test_attention_amx)
{
    const amx_case cases[] = {
        {2, 3, 200, 200, 32, true, false},  /* causal: tiles of 64 in strips, keys % 32 = 8 */
        {1, 2, 37, 300, 8, false, true},    /* cross, padded keys, dh padded to 32, odd rows */
        {2, 2, 150, 140, 64, true, true},   /* causal with Tq > Tk, padded keys */
        {1, 4, 129, 129, 40, false, false}, /* dh 40 (two k chunks, padded), odd keys */
        {1, 2, 20, 512, 16, true, false},   /* causal with keys no query sees, one block */
        {2, 2, 64, 96, 32, false, true},    /* weights kept (96 keys) */
        {1, 3, 1, 200, 32, false, false},   /* one query (decoding) */
        {1, 1, 600, 600, 32, true, false},  /* several key blocks: the GEMM's products */
        {1, 2, 145, 145, 49, false, false}, /* 17 keys, rows and dh past a tile pair's 32 */
        {4, 4, 96, 96, 16, false, false},   /* 16 heads, weights kept: tiles of all 96 rows */
    };
    cg_rng rng = cg_rng_new(97);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const amx_case *c = &cases[ci];
        cg_tensor *in[4] = {cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tq, c->dh)),
                            cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tk, c->dh)),
                            cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tk, c->dh)),
                            cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tq, c->dh))};
        uint8_t *pad = NULL;
        cg_tensor *kp = NULL;
        if (c->pad) {
            pad = calloc((size_t)(c->B * c->Tk), 1);
            for (int64_t b = 0; b < c->B; b++)
                for (int64_t j = 1; j < c->Tk; j++)
                    pad[b * c->Tk + j] = j % 11 == 3 || j >= c->Tk - 5 * (b + 1);
            kp = cg_test_mask(CG_SHAPE(c->B, c->Tk), pad);
        }
        cg_set_matmul_precision(CG_PRECISION_BF16);
        cg_tensor *r[4][5];
        /* q, k and v as training hands them over (their bf16 copies), and
         * as floats: the products read both as the same values */
        cg_tensor *in16[4] = {cg_k_bf16_operand(in[0]), cg_k_bf16_operand(in[1]),
                              cg_k_bf16_operand(in[2]), cg_retain(in[3])};
        for (int run = 0; run < 4; run++) { /* tiles 1 and 2 threads, GEMM 1 and 2 */
            ck_assert(setenv("CG_ATTN_AMX", run < 2 ? "1" : "0", 1) == 0);
            cg_set_num_threads(run % 2 ? 2 : 1);
            amx_attention(c, run == 0 || run == 3 ? in16 : in, kp, r[run]);
        }
        cg_release_all(4, in16[0], in16[1], in16[2], in16[3]);
        unsetenv("CG_ATTN_AMX");
        cg_set_num_threads(0);
        cg_set_matmul_precision(CG_PRECISION_FP32);
        /* in bf16 the weights of rows over bf16_kept_keys() are recomputed */
        ck_assert_int_eq(r[0][1]->ndim, c->Tk > bf16_kept_keys() ? 3 : 4);
        for (int run = 1; run < 4; run++)
            for (int t = 0; t < 5; t++)
                ck_assert_msg(same_bits(r[run][t], r[0][t]),
                              "attention case %zu: result %d of run %d differs", ci, t, run);
        if (!cg_bf16_native() && cg_bf16_emulation_avx512) {
            /* the emulation without AVX-512, as an AVX2 CPU runs it: kept
             * rows through the scalar model (cg_attn_softmax_row_bf16r, then
             * rounded) where the register kernels would take them; the
             * same bits */
            cg_tensor *r5[5];
            cg_set_matmul_precision(CG_PRECISION_BF16);
            cg_bf16_emulation_use_avx512(false);
            amx_attention(c, in, kp, r5);
            cg_bf16_emulation_use_avx512(true);
            cg_set_matmul_precision(CG_PRECISION_FP32);
            for (int t = 0; t < 5; t++) {
                ck_assert_msg(same_bits(r5[t], r[0][t]),
                              "attention case %zu: result %d without AVX-512 differs", ci, t);
                cg_release(r5[t]);
            }
        }
        const double worst = amx_worst(c, in, pad, r[0]);
        ck_assert_msg(worst < 0.02, "attention case %zu: %g of the largest from double", ci, worst);
        for (int run = 0; run < 4; run++)
            for (int t = 0; t < 5; t++)
                cg_release(r[run][t]);
        cg_release_all(4, in[0], in[1], in[2], in[3]); /* kp: the harness's */
        free(pad);
    }
}
END_TEST

/* CG_ATTN_AMX chooses attention's own tiles or the GEMM on AMX's path
 * (core/attention_amx.h), and only there: test_attention_amx compares the
 * two, which have the same bits, so a switch that stopped switching would
 * compare the tiles with themselves and pass. */
START_TEST(test_attention_amx_switch)
{
    unsetenv("CG_ATTN_AMX");
    ck_assert(cg_attn_amx_on(CG_GEMM_BF16_AMX));
    ck_assert(setenv("CG_ATTN_AMX", "0", 1) == 0);
    ck_assert(!cg_attn_amx_on(CG_GEMM_BF16_AMX));
    ck_assert(setenv("CG_ATTN_AMX", "1", 1) == 0);
    ck_assert(cg_attn_amx_on(CG_GEMM_BF16_AMX));
    ck_assert(!cg_attn_amx_on(CG_GEMM_BF16));
    ck_assert(!cg_attn_amx_on(CG_GEMM_BF16_EMULATED));
    ck_assert(!cg_attn_amx_on(CG_GEMM_AUTO));
    unsetenv("CG_ATTN_AMX");
    ck_assert(!cg_attn_amx_on(CG_GEMM_BF16));
    /* the tiles take one key block, KB keys, and no more */
    cg_tensor *q = cg_zeros(CG_SHAPE(1, 1, 4, 32));
    for (int64_t tk = KB; tk <= KB + 1; tk++) {
        cg_tensor *k = cg_zeros(CG_SHAPE(1, 1, tk, 32));
        ck_assert(cg_attn_amx_fits(CG_GEMM_BF16_AMX, q, k, k, NULL) == (tk == KB));
        cg_release(k);
    }
    cg_release(q);
}
END_TEST

/* q, k, v and dO of case c, N(0, 1) from seed */
static void amx_case_inputs(const amx_case *c, uint64_t seed, cg_tensor *in[4])
{
    cg_rng rng = cg_rng_new(seed);
    in[0] = cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tq, c->dh));
    in[1] = cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tk, c->dh));
    in[2] = cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tk, c->dh));
    in[3] = cg_randn(&rng, CG_SHAPE(c->B, c->H, c->Tq, c->dh));
}

/* Case c in bf16 on attention's tiles (r[0]) and on the GEMM
 * (CG_ATTN_AMX=0, r[1]) */
static void tiles_then_gemm(const amx_case *c, cg_tensor *const *in, cg_tensor *r[2][5])
{
    cg_set_matmul_precision(CG_PRECISION_BF16);
    for (int run = 0; run < 2; run++) {
        ck_assert(setenv("CG_ATTN_AMX", run ? "0" : "1", 1) == 0);
        amx_attention(c, in, NULL, r[run]);
    }
    unsetenv("CG_ATTN_AMX");
    cg_set_matmul_precision(CG_PRECISION_FP32);
}

/* Keys no query sees (causal, 37 queries of 300 keys) holding +inf in k
 * and v: the tiles' last chunk of keys (37 of them, an odd count) reads
 * none past the 37th, as the GEMM's panels do not (an odd K's last pair
 * is half past it), so out and dq are finite and every result has the
 * GEMM's bits (CG_ATTN_AMX=0). */
START_TEST(test_attention_amx_unseen_keys)
{
    const amx_case c = {1, 2, 37, 300, 16, true, false};
    cg_tensor *in[4];
    amx_case_inputs(&c, 31, in);
    for (int64_t h = 0; h < c.H; h++)
        for (int64_t j = c.Tq; j < c.Tk; j++)
            for (int64_t e = 0; e < c.dh; e++) {
                cg_data(in[1])[(h * c.Tk + j) * c.dh + e] = INFINITY;
                cg_data(in[2])[(h * c.Tk + j) * c.dh + e] = INFINITY;
            }
    cg_tensor *r[2][5];
    tiles_then_gemm(&c, in, r);
    for (int t = 0; t < 3; t += 2) { /* out, dq */
        const int64_t n = cg_numel(r[0][t]);
        float *x = cg_test_values(r[0][t]);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(isfinite(x[i]), "result %d [%lld] = %g", t, (long long)i, (double)x[i]);
        free(x);
    }
    for (int t = 0; t < 5; t++) {
        ck_assert_msg(same_bits(r[1][t], r[0][t]), "result %d differs from the GEMM's", t);
        cg_release(r[0][t]);
        cg_release(r[1][t]);
    }
    cg_release_all(4, in[0], in[1], in[2], in[3]);
}
END_TEST

/* dO holding +inf in query 0's row (causal, 200 x 200): the sums over
 * queries of key blocks past the first sub-block of 64 start at their
 * sub-block, where the GEMM's start (core/attention_bwd.c), so query 0's
 * row, whose weights there are 0, is not in them: dv of keys 64 on is
 * finite and has the GEMM's bits (CG_ATTN_AMX=0). */
START_TEST(test_attention_amx_causal_sums)
{
    const amx_case c = {1, 1, 200, 200, 32, true, false};
    cg_tensor *in[4];
    amx_case_inputs(&c, 37, in);
    for (int64_t e = 0; e < c.dh; e++)
        cg_data(in[3])[e] = INFINITY;
    cg_tensor *r[2][5];
    tiles_then_gemm(&c, in, r);
    float *dv = cg_test_values(r[0][4]), *gemm = cg_test_values(r[1][4]);
    for (int64_t i = 64 * c.dh; i < c.Tk * c.dh; i++) {
        ck_assert_msg(isfinite(dv[i]), "dv[%lld] = %g", (long long)(i / c.dh), (double)dv[i]);
        ck_assert_uint_eq(to_bits(dv[i]), to_bits(gemm[i]));
    }
    free(dv);
    free(gemm);
    for (int t = 0; t < 5; t++) {
        cg_release(r[0][t]);
        cg_release(r[1][t]);
    }
    cg_release_all(4, in[0], in[1], in[2], in[3]);
}
END_TEST

/* ------------------------------------------- attention's rows kept in bf16 */

/* The weights kept in bf16 (bf16's own softmax recipe,
 * cg_attn_softmax_row_bf16r, attention_rows.c), made in registers on
 * AVX-512 (cg_attn_softmax_rows_bf16r16, its rounding the emulation's
 * without AVX512_BF16), and the softmax's backward made in registers on
 * AVX512_BF16 (cg_attn_dsoft_row_bf16). The recipe is held to a double softmax, its
 * special rows to PyTorch's (NaN where a score is NaN or infinite or no
 * key is visible); the register kernels to the bits of the scalar model
 * (the emulation's) and of the row kernel followed by the rounding,
 * across row lengths (partial vectors, Tk past ke), key padding (a
 * padded key far above the visible ones too), NaN scores (one whose
 * payload the exponential would turn into a number too), NaN dP and dP
 * past ke (not read); they leave their inputs as they were and write nothing past Tk, and
 * refuse rows over CG_ATTN_ROW_KEYS (256) keys with nothing written. */
static float row_value(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return ((float)(*st >> 8) / 16777216.0f - 0.5f) * 12.0f;
}

static float bf16_value(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The recipe's row against a softmax in double: each weight within 1e-6
 * of the row (weights are at most 1) plus 1e-5 of itself; keys past ke
 * and padded keys 0 */
static void check_recipe_row(const float *s, int64_t ke, int64_t Tk, float scale, const int32_t *km,
                             const float *p, const char *what)
{
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < ke; j++)
        if (!(km && km[j]))
            m = fmax(m, (double)s[j] / scale);
    for (int64_t j = 0; j < ke; j++)
        if (!(km && km[j]))
            sum += exp((double)s[j] / scale - m);
    for (int64_t j = 0; j < Tk; j++) {
        const bool live = j < ke && !(km && km[j]);
        const double want = live ? exp((double)s[j] / scale - m) / sum : 0.0;
        ck_assert_msg(fabs(p[j] - want) <= 1e-6 + 1e-5 * want, "%s: key %lld: %.9g, double %.9g",
                      what, (long long)j, (double)p[j], want);
    }
}

/* One row through the register kernel for groups of rows */
static bool rows16_one(const float *s, int64_t ke, int64_t Tk, float scale, const int32_t *km,
                       uint16_t *p)
{
    return cg_attn_softmax_rows_bf16r16(1, s, 0, &ke, Tk, scale, km, p, 0);
}

START_TEST(test_attention_rows_bf16)
{
    /* the softmax's register rows on AVX-512, the backward's on AVX512_BF16 */
    const bool native = cg_bf16_native(), rows = native || cg_bf16_emulation_avx512;
    const float scale = sqrtf(32.0f);
    enum { K = CG_ATTN_ROW_KEYS };
    const int64_t tks[] = {1, 5, 16, 17, 31, 96, 100, 128, 129, 200, 255, K};
    uint32_t st = 7;
    for (size_t ti = 0; ti < sizeof tks / sizeof *tks; ti++) {
        const int64_t Tk = tks[ti];
        const int64_t kes[] = {1, Tk / 2 > 0 ? Tk / 2 : 1, Tk > 1 ? Tk - 1 : 1, Tk};
        for (int ki = 0; ki < 4; ki++)
            for (int kind = 0; kind < 9; kind++) {
                /* 0 plain (dP NaN past ke: not read), 1 every third key
                 * padded, 2 every key padded, 3 a NaN score, 4 an
                 * infinite one, 5 one far below the others, 6 a NaN in
                 * dP, 7 as 1 with padded key 1 far above the visible
                 * ones (the maximum is of the visible keys), 8 a NaN
                 * score in the first vector whose low payload bits are
                 * set (the exponential's 2^k turns such a NaN into a
                 * number: the row is NaN by its flag, not by the sum) */
                const int64_t ke = kes[ki];
                float s[K], s0[K], f[K], d[K], d0[K], w[K];
                int32_t kmask[K];
                uint16_t p[K], ref[K];
                for (int64_t j = 0; j < K; j++) {
                    s[j] = row_value(&st);
                    d[j] = row_value(&st) / 8.0f;
                    kmask[j] = kind == 2 || ((kind == 1 || kind == 7) && j % 3 == 1) ? -1 : 0;
                }
                for (int64_t j = ke; kind == 0 && j < K; j++)
                    d[j] = NAN;
                if (kind == 7)
                    s[1] = 1000.0f;
                if (kind == 8)
                    s[0] = from_bits(0x7fc00001u);
                if (kind == 3)
                    s[ke / 2] = NAN;
                if (kind == 4)
                    s[ke - 1] = INFINITY;
                if (kind == 5)
                    s[0] = -1000.0f;
                if (kind == 6)
                    d[ke - 1] = NAN;
                const int32_t *km = kind == 1 || kind == 2 || kind == 7 ? kmask : NULL;
                /* the recipe: a softmax, or a NaN row (a NaN or infinite
                 * score, no key visible) */
                bool visible = false;
                for (int64_t j = 0; j < ke; j++)
                    visible |= !(km && km[j]);
                const bool nan_row = kind == 3 || kind == 4 || kind == 8 || !visible;
                memcpy(s0, s, sizeof s);
                for (int64_t j = 0; j < K; j++)
                    f[j] = 1234.0f;
                cg_attn_softmax_row_bf16r(s, ke, Tk, scale, km, f);
                ck_assert(!memcmp(s, s0, sizeof s));
                for (int64_t j = Tk; j < K; j++)
                    ck_assert(f[j] == 1234.0f);
                char what[96];
                snprintf(what, sizeof what, "softmax row Tk %lld ke %lld kind %d", (long long)Tk,
                         (long long)ke, kind);
                if (nan_row) {
                    for (int64_t j = 0; j < Tk; j++)
                        ck_assert_msg(isnan(f[j]), "%s: key %lld not NaN", what, (long long)j);
                } else {
                    check_recipe_row(s, ke, Tk, scale, km, f, what);
                }
                cg_bf16_round_run(Tk, f, ref);
                /* in place, as the attention calls it */
                memcpy(f, s, sizeof f);
                cg_attn_softmax_row_bf16r(f, ke, Tk, scale, km, f);
                cg_bf16_round_run(Tk, f, p);
                ck_assert_msg(!memcmp(p, ref, (size_t)Tk * sizeof *p), "%s: in place", what);
                if (!rows)
                    continue;
                /* the register kernel: the scalar model's bits, rounded */
                for (int64_t j = 0; j < K; j++)
                    p[j] = 0x1234;
                ck_assert(rows16_one(s, ke, Tk, scale, km, p));
                ck_assert(!memcmp(s, s0, sizeof s)); /* read only */
                for (int64_t j = Tk; j < K; j++)
                    ck_assert_uint_eq(p[j], 0x1234); /* nothing past Tk */
                for (int64_t j = 0; j < Tk; j++)
                    ck_assert_msg(
                        p[j] == ref[j] || (isnan(bf16_value(p[j])) && isnan(bf16_value(ref[j]))),
                        "%s: key %lld: %04x, the model's %04x", what, (long long)j, p[j], ref[j]);
                if (!native)
                    continue;
                /* backward, on the weights the forward rounded */
                for (int64_t j = 0; j < Tk; j++)
                    w[j] = bf16_value(ref[j]);
                memcpy(d0, d, sizeof d);
                cg_attn_dsoft_row(w, d0, ke, Tk, cg_attn_dot(w, d0, ke), scale);
                uint16_t dref[K];
                cg_bf16_round_run(Tk, d0, dref);
                memcpy(d0, d, sizeof d);
                ck_assert(cg_attn_dsoft_row_bf16(ref, d, ke, Tk, scale, p));
                ck_assert(!memcmp(d, d0, sizeof d));
                for (int64_t j = 0; j < Tk; j++)
                    ck_assert_msg(
                        p[j] == dref[j] || (isnan(bf16_value(p[j])) && isnan(bf16_value(dref[j]))),
                        "dsoft row Tk %lld ke %lld kind %d", (long long)Tk, (long long)ke, kind);
            }
    }
    /* many rows: a float's last bit changes its bf16 rounding about once
     * in 2^15, so that an operation done otherwise than the scalar model
     * (a division for the product by 1 / scale, say) shows */
    for (int r = 0; r < 20000; r++) {
        const int64_t Tk = 97 + r % (K - 96), ke = 1 + (int64_t)(row_value(&st) + 6.0f) * Tk / 12;
        float s[K], f[K], d[K], d0[K], w[K];
        uint16_t p[K], ref[K], dref[K];
        for (int64_t j = 0; j < K; j++) {
            s[j] = row_value(&st);
            d[j] = row_value(&st) / 8.0f;
        }
        cg_attn_softmax_row_bf16r(s, ke, Tk, scale, NULL, f);
        if (r % 50 == 0)
            check_recipe_row(s, ke, Tk, scale, NULL, f, "a random row");
        cg_bf16_round_run(Tk, f, ref);
        if (!rows)
            continue;
        ck_assert(rows16_one(s, ke, Tk, scale, NULL, p));
        ck_assert_msg(!memcmp(p, ref, (size_t)Tk * sizeof *p), "softmax row %d", r);
        if (!native)
            continue;
        for (int64_t j = 0; j < Tk; j++)
            w[j] = bf16_value(ref[j]);
        memcpy(d0, d, sizeof d);
        cg_attn_dsoft_row(w, d0, ke, Tk, cg_attn_dot(w, d0, ke), scale);
        cg_bf16_round_run(Tk, d0, dref);
        ck_assert(cg_attn_dsoft_row_bf16(ref, d, ke, Tk, scale, p));
        ck_assert_msg(!memcmp(p, dref, (size_t)Tk * sizeof *p), "dsoft row %d", r);
    }
    /* over K keys (or no AVX-512): refused, nothing written */
    float s[K + 1] = {0};
    uint16_t p[K + 1] = {0};
    ck_assert(!rows16_one(s, K + 1, K + 1, scale, NULL, p));
    if (native)
        ck_assert(!cg_attn_dsoft_row_bf16(p, s, K + 1, K + 1, scale, p));
    for (int j = 0; j < K + 1; j++)
        ck_assert_uint_eq(p[j], 0);
}
END_TEST

/* Groups of 1 to CG_ATTN_ROWS rows, rows apart by a pitch past their
 * length, each with its own keys (a causal tile's, or any), some with a
 * NaN score or no visible key: every row has the bits of the scalar model
 * rounded (NaN rows NaN), and nothing past the rows' Tk is written. */
START_TEST(test_attention_rows_bf16_groups)
{
    if (!cg_bf16_native() && !cg_bf16_emulation_avx512)
        return; /* no AVX-512: the scalar model is all there is */
    enum { LD = CG_ATTN_ROW_KEYS + 8, R = CG_ATTN_ROWS };
    const float scale = sqrtf(32.0f);
    uint32_t st = 11;
    int32_t kmask[LD];
    for (int j = 0; j < LD; j++)
        kmask[j] = j % 5 == 2 ? -1 : 0;
    int nans = 0;
    for (int it = 0; it < 4000; it++) {
        const int n = 1 + it % R;
        const int64_t Tk = 1 + (int64_t)(row_value(&st) + 6.0f) * CG_ATTN_ROW_KEYS / 12;
        const int32_t *km = it % 7 == 3 ? kmask : NULL;
        float s[R * LD], s0[R * LD], f[LD];
        uint16_t p[R * LD], ref[LD];
        int64_t ke[R];
        for (int j = 0; j < R * LD; j++) {
            s[j] = row_value(&st);
            p[j] = 0x1234;
        }
        for (int r = 0; r < n; r++) {
            ke[r] = it % 3 ? Tk - (n - 1 - r) : 1 + (int64_t)(row_value(&st) + 6.0f) * Tk / 12;
            ke[r] = ke[r] > Tk ? Tk : ke[r] < 0 ? 0 : ke[r];
            if ((it / R + r) % 11 == 1 && ke[r] > 0)
                s[r * LD + ke[r] / 2] = NAN;
        }
        memcpy(s0, s, sizeof s);
        ck_assert(cg_attn_softmax_rows_bf16r16(n, s, LD, ke, Tk, scale, km, p, LD));
        ck_assert(!memcmp(s, s0, sizeof s)); /* read only */
        for (int r = 0; r < n; r++) {
            cg_attn_softmax_row_bf16r(s + r * LD, ke[r], Tk, scale, km, f);
            cg_bf16_round_run(Tk, f, ref);
            for (int64_t j = 0; j < Tk; j++)
                ck_assert_msg(p[r * LD + j] == ref[j] ||
                                  (isnan(bf16_value(p[r * LD + j])) && isnan(bf16_value(ref[j]))),
                              "group %d row %d of %d key %lld", it, r, n, (long long)j);
            nans += isnan(f[0]);
            for (int64_t j = Tk; j < LD; j++)
                ck_assert_uint_eq(p[r * LD + j], 0x1234); /* past Tk */
        }
        for (int j = n * LD; j < R * LD; j++)
            ck_assert_uint_eq(p[j], 0x1234); /* past the group */
    }
    ck_assert_int_gt(nans, 100); /* NaN rows were tried */
    /* a ke outside [0, Tk]: refused, nothing written */
    float s[LD] = {0};
    uint16_t p[LD] = {0};
    const int64_t bad = 6;
    ck_assert(!cg_attn_softmax_rows_bf16r16(1, s, LD, &bad, 5, scale, NULL, p, LD));
    for (int j = 0; j < LD; j++)
        ck_assert_uint_eq(p[j], 0);
}
END_TEST

/* Whether this CPU has a bf16 product (AVX512_BF16, or AVX2 and FMA) */
static bool bf16_usable(void)
{
    return cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED);
}

/* A CPU with neither AVX512_BF16 nor AVX2 and FMA (QEMU's Nehalem here:
 * scripts/isa_check.sh) has no bf16, and says so in one line wherever bf16
 * is asked for: the programs' --precision, the thread's policy (which
 * stays fp32, as PyTorch's CPU autocast turns itself off for a dtype it
 * cannot run), a packed weight, an explicit bf16 path. A bf16 policy let
 * through ran the emulation's AVX2 packing: SIGILL in the first linear
 * layer. Products under the refused policy are fp32's. The only test of
 * the suite on such a CPU; a no-op on others. */
START_TEST(test_no_bf16_refused)
{
    if (bf16_usable())
        return;
    const char *no =
        "bf16 needs a CPU with AVX512_BF16, or with AVX2 and FMA; this one has neither";
    cg_precision p = CG_PRECISION_FP32;
    CG_ASSERT_REFUSED(!cg_precision_parse("bf16", &p), no);
    CG_ASSERT_REFUSED((cg_set_matmul_precision(CG_PRECISION_BF16), cg_has_error()),
                      "set_matmul_precision: bf16 needs");
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_FP32);
    cg_clear_error();
    ck_assert_int_eq(cg_autocast_begin(CG_PRECISION_BF16), CG_PRECISION_FP32);
    ck_assert_str_eq(cg_last_error(), "autocast_begin: bf16 needs a CPU with AVX512_BF16, or with "
                                      "AVX2 and FMA; this one has neither; the policy stays fp32");
    ck_assert_int_eq(cg_get_matmul_precision(), CG_PRECISION_FP32);
    cg_rng rng = cg_rng_new(5);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 40)), *w = cg_randn(&rng, CG_SHAPE(9, 40));
    cg_tensor *y = cg_k_linear(x, w, NULL); /* fp32: the policy was refused */
    ck_assert_ptr_nonnull(y);
    float ref[6 * 9];
    ck_assert(cg_sgemm_path(CG_GEMM_AUTO, 1, 6, 9, 40, 1.0f, cg_data(x), 40, 1, cg_data(w), 1, 40,
                            0.0f, ref, 9, 1));
    ck_assert(memcmp(cg_data(y), ref, sizeof ref) == 0);
    cg_autocast_end(CG_PRECISION_FP32);
    CG_ASSERT_REFUSED(cg_bf16_matrix_new(9, 40, cg_data(w), 40, 1) == NULL, "bf16 matrix: "
                                                                            "bf16 needs");
    CG_ASSERT_REFUSED(cg_packed_weight_get(w, CG_PACKED_BF16) == NULL, "bf16 matrix: bf16 needs");
    CG_ASSERT_REFUSED(!cg_sgemm_path(CG_GEMM_BF16_EMULATED, 1, 6, 9, 40, 1.0f, cg_data(x), 40, 1,
                                     cg_data(w), 1, 40, 0.0f, ref, 9, 1),
                      "gemm: the bf16-emulated path needs what this CPU lacks");
    cg_release_all(3, x, w, y);
}
END_TEST

static Suite *bf16_suite(void)
{
    Suite *s = suite_create("bf16");
    if (!bf16_usable()) { /* every other test runs bf16 products */
        TCase *tn = tcase_create("no_bf16");
        tcase_add_test(tn, test_no_bf16_refused);
        suite_add_tcase(s, tn);
        return s;
    }
    TCase *tc = tcase_create("gemm");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_round);
    tcase_add_test(tc, test_round_runs);
    tcase_add_loop_test(tc, test_against_double, 0, NPATHS);
    tcase_add_test(tc, test_amx_specials);
    tcase_add_test(tc, test_amx_emulated_tiles);
    tcase_add_test(tc, test_emulation_bits);
    tcase_add_test(tc, test_emulation_flush_boundary);
    tcase_add_test(tc, test_threads_bit_identical);
    tcase_add_test(tc, test_shared_packing_bits);
    tcase_add_test(tc, test_shared_packing_bounds_b);
    tcase_add_test(tc, test_bias_fused);
    tcase_add_test(tc, test_precision_switch);
    tcase_add_test(tc, test_no_bf16_refused);
    tcase_add_test(tc, test_precision_per_thread);
    tcase_add_test(tc, test_layer_gradients);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("matrix");
    tcase_set_timeout(tm, 300);
    tcase_add_test(tm, test_matrix_against_gemm);
    tcase_add_test(tm, test_matrix_paths_threads);
    tcase_add_test(tm, test_matrix_epilogue);
    tcase_add_test(tm, test_matrix_beta_one);
    tcase_add_test(tm, test_packed_linear_refresh);
    tcase_add_test(tm, test_weight_cache);
    tcase_add_test(tm, test_weight_cache_version_moved);
    tcase_add_test(tm, test_linear_packed_f32);
    tcase_add_test(tm, test_linear_packed_f32_over_limit);
    tcase_add_test(tm, test_linear_packed_f32_layouts);
    tcase_add_test(tm, test_weight_cache_replaces_at_limit);
    tcase_add_test(tm, test_weight_cache_limit_lowered);
    suite_add_tcase(s, tm);
    TCase *to = tcase_create("operands");
    tcase_set_timeout(to, 300);
    tcase_add_test(to, test_round_run);
    tcase_add_test(to, test_bf16_operands);
    tcase_add_test(to, test_matrix_bf16_x);
    tcase_add_test(to, test_bf16_operand_in_place);
    tcase_add_test(to, test_affine_saves_bf16);
    tcase_add_test(to, test_bf16_operand_copy);
    tcase_add_test(to, test_linear_keep_bf16);
    tcase_add_test(to, test_attention_keeps_out16);
    tcase_add_test(to, test_relu_mask);
    tcase_add_test(to, test_linear_act);
    tcase_add_test(to, test_linear_bias_strided);
    tcase_add_test(to, test_linear_residual);
    tcase_add_test(to, test_norm_bf16_copy);
    tcase_add_test(to, test_norm_unrecorded_fp32_bits);
    tcase_add_test(to, test_norm_xhat);
    tcase_add_test(to, test_norm_saves_xhat);
    tcase_add_test(to, test_norm_output_remade);
    tcase_add_test(to, test_norm_fp32_then_linear_bf16);
    tcase_add_test(to, test_linear_act_backward);
    tcase_add_test(to, test_linear_dropout_backward);
    tcase_add_test(to, test_bias_grad_blocks);
    tcase_add_test(to, test_linear_backward_into);
    tcase_add_test(to, test_linear_backward_acc_aliased);
    tcase_add_test(to, test_gelu_saves_bf16);
    tcase_add_test(to, test_gate_saves_bf16);
    tcase_add_test(to, test_attention_saves_bf16);
    tcase_add_test(to, test_attention_grad_layouts_bf16);
    tcase_add_test(to, test_attention_lse_blocks_bf16);
    tcase_add_test(to, test_attention_bf16_inputs);
    suite_add_tcase(s, to);
    TCase *ta = tcase_create("attention");
    tcase_set_timeout(ta, 300);
    tcase_add_test(ta, test_attention_amx);
    tcase_add_test(ta, test_attention_amx_switch);
    tcase_add_test(ta, test_attention_amx_unseen_keys);
    tcase_add_test(ta, test_attention_amx_causal_sums);
    tcase_add_test(ta, test_attention_rows_bf16);
    tcase_add_test(ta, test_attention_rows_bf16_groups);
    suite_add_tcase(s, ta);
    return s;
}

int main(void)
{
    Suite *s = bf16_suite();
    return cg_test_run(&s, 1);
}
