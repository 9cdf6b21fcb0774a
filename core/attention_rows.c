/* The row kernels of core/attention.c: one row of scores at a time
 * through the scaled, masked softmax (plain, online, recomputed from a
 * log-sum-exp) and its backward. Vectorised for AVX-512, AVX2 or SSE2
 * (EW_CLONES, chosen at load time) with the same IEEE operations in every
 * clone, and sums in 8 double lanes of a fixed order, so the bits depend on
 * neither the CPU nor the thread count. exp is ew_expf (core/vmath.h). */
#include <math.h>
#include <string.h>

#include "core/attention_rows.h"
#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/vmath.h"

/* s[j] = s[j] / scale, or -inf where kmask[j] (0 or ~0: the key-padding
 * bytes widened once per call, see key_masks; widening 16 bytes here cost
 * GCC a byte-by-byte gather, and masking doubled this pass), over [0, ke);
 * returns the maximum, and in *mn the minimum of the elements other than
 * -inf (+inf when there are none; NaN when any element is NaN), for
 * exp_sum's range check. Maximum and minimum are taken in 16 lanes
 * (element j in lane j % 16) so the pass runs on whole vectors; neither
 * depends on its order. */
EW_BODY float scale_mask_max_body(float *s, int64_t ke, float scale, const int32_t *kmask,
                                  float *mn)
{
    const v16f ninf = (v16f){0} - INFINITY, pinf = (v16f){0} + INFINITY;
    v16f hi = ninf, lo = pinf;
    v16i nan = {0};
    int64_t j0 = 0;
    for (; j0 + 16 <= ke; j0 += 16) {
        v16f x;
        memcpy(&x, s + j0, sizeof x);
        x = x / scale;
        if (kmask) {
            v16i pad;
            memcpy(&pad, kmask + j0, sizeof pad);
            x = (v16f)((pad & (v16i)ninf) | (~pad & (v16i)x));
        }
        memcpy(s + j0, &x, sizeof x);
        hi = max16_lanes(hi, x); /* a NaN x keeps the lane */
        v16i fin = x != ninf;    /* -inf (a masked key) is not in the minimum */
        lo = min16_lanes(lo, (v16f)((fin & (v16i)x) | (~fin & (v16i)pinf)));
        nan |= x != x;
    }
    float mx = -INFINITY, mi = INFINITY;
    bool bad = false;
    for (int l = 0; l < 16; l++) {
        mx = hi[l] > mx ? hi[l] : mx;
        mi = lo[l] < mi ? lo[l] : mi;
        bad |= nan[l] != 0;
    }
    for (; j0 < ke; j0++) {
        float x = s[j0] / scale;
        if (kmask && kmask[j0])
            x = -INFINITY;
        s[j0] = x;
        mx = x > mx ? x : mx;
        mi = x != -INFINITY && x < mi ? x : mi;
        bad |= x != x;
    }
    *mn = bad ? NAN : mi;
    return mx;
}
EW_CLONES static float scale_mask_max(float *s, int64_t ke, float scale, const int32_t *kmask,
                                      float *mn)
{
    return scale_mask_max_body(s, ke, scale, kmask, mn); /* EW_BODY: core/vmath.h */
}

/* Whether exp(x - m) is in ew_expf16_normal's range for every x of a row
 * whose minimum (other than -inf) is mn, m finite and at least its
 * maximum: then exp_sum takes the faster exponentials (the same bits). */
static inline bool exp_normal(float mn, float m)
{
    return m > -INFINITY && m < INFINITY && mn - m >= EW_EXP_NORMAL_MIN;
}

/* exp(x - mx) in 16 lanes: ew_expf16's bits; normal (exp_normal): by its
 * faster twin, -inf lanes (masked keys) set to exp(-inf) = 0 after. */
static inline __attribute__((always_inline)) v16f exp16_from(v16f x, float mx, bool normal)
{
    if (!normal)
        return ew_expf16(x - mx);
    v16i fin = x != ((v16f){0} - INFINITY);
    return (v16f)(fin & (v16i)ew_expf16_normal(x - mx));
}

/* exp_sum's loop; normal as exp16_from. Each vector's halves go into the
 * 8 double lanes as they are made (lanes past ke get +0.0, which changes
 * no sum of exponentials): sum_lanes's order, so its bits, without a
 * second pass over the row. */
static inline __attribute__((always_inline)) double exp_sum_of(float *s, int64_t ke, float mx,
                                                               bool normal)
{
    v8d acc = {0}, lo, hi;
    int64_t j = 0;
    for (; j + 16 <= ke; j += 16) {
        v16f v;
        memcpy(&v, s + j, sizeof v);
        v = exp16_from(v, mx, normal);
        memcpy(s + j, &v, sizeof v);
        widen16(v, &lo, &hi);
        acc += lo;
        acc += hi;
    }
    if (j < ke) { /* the last partial block in 16 lanes too (short rows are common) */
        v16i live;
        for (int l = 0; l < 16; l++)
            live[l] = -(int32_t)(l < ke - j);
        v16f v = exp16_from(load_part16(s + j, ke - j, 0.0f), mx, normal);
        store_part16(s + j, ke - j, v);
        widen16((v16f)(live & (v16i)v), &lo, &hi);
        acc += lo;
        acc += hi;
    }
    double lanes[8];
    for (int l = 0; l < 8; l++)
        lanes[l] = acc[l];
    return lanes8_total(lanes);
}

/* s[j] = exp(s[j] - mx) over [0, ke); returns their sum (8 double lanes:
 * element j in lane j % 8). mn: the row's minimum as scale_mask_max gives
 * it; in range (exp_normal), the faster exponentials. */
EW_CLONES static double exp_sum(float *s, int64_t ke, float mx, float mn)
{
    return exp_normal(mn, mx) ? exp_sum_of(s, ke, mx, true) : exp_sum_of(s, ke, mx, false);
}

/* One row of scaled, masked softmax in place over s[0, ke); s[ke, Tk) = 0.
 * *lse and *lse_lo (unless lse is NULL: kept weights need none) get the
 * row's log-sum-exp. */
EW_CLONES static void attn_softmax_row(float *s, int64_t ke, int64_t Tk, float scale,
                                       const int32_t *kmask, float *lse, float *lse_lo)
{
    float mn, mx = scale_mask_max(s, ke, scale, kmask, &mn);
    double sum = exp_sum(s, ke, mx, mn);
    /* every key masked: -inf - -inf gives NaN, as PyTorch */
    double inv = 1.0 / sum;
    int64_t j;
    for (j = 0; j < ke; j++)
        s[j] = (float)(s[j] * inv);
    for (j = ke; j < Tk; j++)
        s[j] = 0.0f;
    if (lse)
        *lse = cg_attn_row_lse(mx, sum, lse_lo);
}

void cg_attn_softmax_row(float *s, int64_t ke, int64_t Tk, float scale, const int32_t *kmask,
                         float *lse, float *lse_lo)
{
    attn_softmax_row(s, ke, Tk, scale, kmask, lse,
                     lse_lo); /* the clones: EW_CLONES, core/vmath.h */
}

/* One row of one key block in the online softmax: s[0, ke) becomes
 * exp(s / scale - m_new) (masked keys 0), s[ke, kz) = 0; the running
 * maximum *m and sum *l are updated. Returns the factor exp(m_old - m_new)
 * by which the row's earlier output must be scaled. */
EW_CLONES static float attn_online_row(float *s, int64_t ke, int64_t kz, float scale,
                                       const int32_t *kmask, float *m, double *l)
{
    float mn, bmx = scale_mask_max(s, ke, scale, kmask, &mn);
    float mnew = bmx > *m ? bmx : *m;
    float alpha = 1.0f;
    if (mnew == -INFINITY) { /* nothing visible yet: the block adds nothing */
        for (int64_t j = 0; j < ke; j++)
            s[j] = 0.0f;
    } else {
        alpha = ew_expf(*m - mnew); /* 0 when *m is -inf */
        double sum = exp_sum(s, ke, mnew, mn);
        *l = *l * (double)alpha + sum;
        *m = mnew;
    }
    for (int64_t j = ke; j < kz; j++)
        s[j] = 0.0f;
    return alpha;
}

float cg_attn_online_row(float *s, int64_t ke, int64_t kz, float scale, const int32_t *kmask,
                         float *m, double *l)
{
    return attn_online_row(s, ke, kz, scale, kmask, m, l); /* the clones: EW_CLONES, core/vmath.h */
}

/* The key-padding bytes kpad[j, j + n) (n <= 16) as lanes: ~0 where
 * padded, 0 elsewhere and past n. */
static inline __attribute__((always_inline)) v16i pad_lanes(const uint8_t *kpad, int64_t n)
{
    v16i m = {0};
    for (int l = 0; l < 16; l++)
        m[l] = l < n ? -(int32_t)(kpad[l] != 0) : 0;
    return m;
}

/* exp(v / scale - lse) in 16 lanes, -inf where pad: the scalar code's
 * bits, ew_expf(bsel(padded, -inf, s / scale) - lse), lane by lane;
 * normal (every unpadded lane's v / scale - lse in ew_expf16_normal's
 * range): by that faster twin, the same bits, padded lanes set to 0. */
static inline __attribute__((always_inline)) v16f prob16(v16f v, float scale, float lse, v16i pad,
                                                         bool normal)
{
    const v16f ninf = (v16f){0} - INFINITY;
    v = v / scale;
    if (normal)
        return (v16f)(~pad & (v16i)ew_expf16_normal(v - lse));
    v = (v16f)((pad & (v16i)ninf) | (~pad & (v16i)v));
    return ew_expf16(v - lse);
}

/* cg_attn_prob_row's loop; normal as prob16 */
static inline __attribute__((always_inline)) void prob_run(float *s, int64_t ke, float scale,
                                                           const uint8_t *kpad, float lse,
                                                           bool normal)
{
    const v16i none = {0};
    int64_t j;
    for (j = 0; j + 16 <= ke; j += 16) {
        v16f v;
        memcpy(&v, s + j, sizeof v);
        v = prob16(v, scale, lse, kpad ? pad_lanes(kpad + j, 16) : none, normal);
        memcpy(s + j, &v, sizeof v);
    }
    if (j < ke)
        store_part16(s + j, ke - j,
                     prob16(load_part16(s + j, ke - j, 0.0f), scale, lse,
                            kpad ? pad_lanes(kpad + j, ke - j) : none, normal));
}

/* Recomputed probabilities of one row: s[j] = exp(s[j] / scale - lse)
 * over [0, ke) (masked keys 0, a NaN lse gives NaN), s[ke, kz) = 0, then
 * divided by their sum (8 double lanes), as the softmax row divides: lse
 * is rounded to float, half an ulp of |lse| (5e-4 at scores of 1e4), by
 * which the row would sum to more or less than 1, and its backward's
 * dS = P (dP - <P, dP>) would no longer sum to 0. In 16 lanes, the last
 * partial block too (ew_expf's bits). When the row's scores all map into
 * ew_expf16_normal's range (they do unless a score is far below the row's
 * maximum, or is not finite), by that twin: s / scale - lse is monotonic
 * in s, so the row's minimum and maximum bound it. */
EW_CLONES static void attn_prob_row(float *s, int64_t ke, int64_t kz, float scale,
                                    const uint8_t *kpad, float lse)
{
    float mn;
    bool bad;
    const float mx = ke > 0 ? max16_min(s, ke, &mn, &bad) : 0.0f;
    if (ke > 0 && !bad && lse == lse && mn / scale - lse >= EW_EXP_NORMAL_MIN &&
        mx / scale - lse <= 0.0f)
        prob_run(s, ke, scale, kpad, lse, true);
    else
        prob_run(s, ke, scale, kpad, lse, false);
    const double sum = sum_lanes(s, NULL, ke);
    if (sum > 0.0) { /* (a row of NaN stays NaN; one without keys, zeros) */
        const double inv = 1.0 / sum;
        for (int64_t j = 0; j < ke; j++)
            s[j] = (float)(s[j] * inv);
    }
    for (int64_t j = ke; j < kz; j++)
        s[j] = 0.0f;
}

void cg_attn_prob_row(float *s, int64_t ke, int64_t kz, float scale, const uint8_t *kpad, float lse)
{
    attn_prob_row(s, ke, kz, scale, kpad, lse); /* the clones: EW_CLONES, core/vmath.h */
}

/* cg_attn_prob_row and cg_attn_dsoft_row in one pass: p = exp((s / scale -
 * lse) - lse_lo) into s, d = p (d - D) / scale, over [0, ke); both zero
 * over [ke, kz). */
EW_BODY void prob_dsoft_row_body(float *s, float *d, int64_t ke, int64_t kz, float scale,
                                 const uint8_t *kpad, float lse, float lse_lo, float D)
{
    int64_t j;
    if (kpad)
        for (j = 0; j < ke; j++) {
            float p = ew_expf(bsel(M(kpad[j] != 0), -INFINITY, s[j] / scale) - lse - lse_lo);
            s[j] = p;
            d[j] = p * (d[j] - D) / scale;
        }
    else {
        for (j = 0; j + 16 <= ke; j += 16) { /* as the scalar tail, 16 lanes */
            v16f v, g;
            memcpy(&v, s + j, sizeof v);
            memcpy(&g, d + j, sizeof g);
            v = ew_expf16(v / scale - lse - lse_lo);
            g = v * (g - D) / scale;
            memcpy(s + j, &v, sizeof v);
            memcpy(d + j, &g, sizeof g);
        }
        if (j < ke) { /* the last partial block: the same operations in 16 lanes */
            v16f v = ew_expf16(load_part16(s + j, ke - j, 0.0f) / scale - lse - lse_lo);
            v16f g = v * (load_part16(d + j, ke - j, 0.0f) - D) / scale;
            store_part16(s + j, ke - j, v);
            store_part16(d + j, ke - j, g);
            j = ke;
        }
    }
    for (j = ke; j < kz; j++)
        s[j] = d[j] = 0.0f;
}
EW_CLONES static void attn_prob_dsoft_row(float *s, float *d, int64_t ke, int64_t kz, float scale,
                                          const uint8_t *kpad, float lse, float lse_lo, float D)
{
    prob_dsoft_row_body(s, d, ke, kz, scale, kpad, lse, lse_lo, D); /* EW_BODY: core/vmath.h */
}

void cg_attn_prob_dsoft_row(float *s, float *d, int64_t ke, int64_t kz, float scale,
                            const uint8_t *kpad, float lse, float lse_lo, float D)
{
    attn_prob_dsoft_row(s, d, ke, kz, scale, kpad, lse, lse_lo,
                        D); /* the clones: EW_CLONES, core/vmath.h */
}

/* <a, b> over [0, n) in 8 double lanes (element j in lane j % 8). */
EW_CLONES static float attn_dot(const float *a, const float *b, int64_t n)
{
    return (float)sum_lanes(a, b, n);
}

float cg_attn_dot(const float *a, const float *b, int64_t n)
{
    return attn_dot(a, b, n); /* the clones: EW_CLONES, core/vmath.h */
}

EW_CLONES static void attn_widen_row(const uint16_t *h, int64_t n, float *f)
{
    bf16_widen(n, h, f);
}

/* Softmax backward of one row given its probabilities p and dP in d:
 * d = p (d - D) / scale over [0, ke), d[ke, kz) = 0, where D = <p, dP> =
 * <dO, O>. */
EW_CLONES static void attn_dsoft_row(const float *p, float *d, int64_t ke, int64_t kz, float D,
                                     float scale)
{
    int64_t j = 0;
    for (; j < ke; j++)
        d[j] = p[j] * (d[j] - D) / scale;
    for (; j < kz; j++)
        d[j] = 0.0f;
}

void cg_attn_dsoft_row(const float *p, float *d, int64_t ke, int64_t kz, float D, float scale)
{
    attn_dsoft_row(p, d, ke, kz, D, scale); /* the clones: EW_CLONES, core/vmath.h */
}

void cg_attn_widen_row(const uint16_t *h, int64_t n, float *f)
{
    attn_widen_row(h, n, f); /* the clones: EW_CLONES, core/vmath.h */
}

/* ------------------------------------ bf16's recipe for the kept weights
 *
 * Under the bf16 policy the kept weights are read by bf16 products and
 * kept rounded to bf16, so their softmax need not carry the fp32 rows'
 * recipe (a division, an exponential without fused multiply-adds, double
 * sums), which made it cost more than the two products around it. This
 * one is float throughout, as PyTorch's autocast computes a softmax (on
 * its fp32 list): x = s * (1 / scale); m the maximum of the visible x (a
 * NaN never wins); e = exp(max(x - m, EXP16_MIN)) by the polynomial of
 * EW_EXP_POLY in fused multiply-adds (every CPU that runs bf16 has FMA);
 * the sum in 16 float lanes (element j in lane j % 16, in order), the
 * lanes added as sum16_tree; p = e * (1 / sum), rounded to bf16. Masked
 * keys and keys past ke get 0; a row with a NaN score, or an infinite
 * one, is all NaN, and so is a row with no visible key (1 / 0 times 0),
 * as PyTorch's. The vector kernel below gives the bits of this scalar
 * model, which the emulation runs. */
#define EXP16_MIN (-87.0f) /* exp(x) stays normal down to here */

/* exp(x) for x in [EXP16_MIN, 0] (or NaN: the caller drops the row) */
static inline float exp_fma(float x)
{
    const float t = fmaf(x, EW_EXP_LOG2E, EW_EXP_SHIFT);
    const float kf = t - EW_EXP_SHIFT;
    float r = fmaf(-kf, EW_EXP_LN2_HI, x);
    r = fmaf(-kf, EW_EXP_LN2_LO, r);
    float p = EW_EXP_P0;
    p = fmaf(p, r, EW_EXP_P1);
    p = fmaf(p, r, EW_EXP_P2);
    p = fmaf(p, r, EW_EXP_P3);
    p = fmaf(p, r, EW_EXP_P4);
    p = fmaf(p, r, EW_EXP_P5);
    p = fmaf(p, r * r, r + 1.0f);
    /* 2^k into the exponent, in 32-bit words that wrap, as the vector
     * lanes do (a NaN x gives a garbage k, never an overflow) */
    const uint32_t k = (uint32_t)f2i(t) - 0x4B400000u;
    return i2f((int32_t)((uint32_t)f2i(p) + (k << 23)));
}

/* 16 lanes added: halves, then quarters, ... (lane i with lane i + 8,
 * then i + 4, i + 2, i + 1) */
static inline float sum16_tree(const float a[16])
{
    float s8[8], s4[4], s2[2];
    for (int i = 0; i < 8; i++)
        s8[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++)
        s4[i] = s8[i] + s8[i + 4];
    for (int i = 0; i < 2; i++)
        s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
}

void cg_attn_softmax_row_bf16r(const float *s, int64_t ke, int64_t Tk, float scale,
                               const int32_t *kmask, float *p)
{
    const float is = 1.0f / scale;
    float m = -INFINITY;
    for (int64_t j = 0; j < ke; j++) {
        const float x = kmask && kmask[j] ? -INFINITY : s[j] * is;
        m = x > m ? x : m;
    }
    float acc[16] = {0};
    bool nan = false;
    for (int64_t j = 0; j < Tk; j++) {
        const bool live = j < ke && !(kmask && kmask[j]);
        const float d = (live ? s[j] * is : -INFINITY) - m;
        nan |= live && d != d;
        p[j] = live ? exp_fma(d < EXP16_MIN ? EXP16_MIN : d) : 0.0f;
        acc[j % 16] += p[j];
    }
    const float inv = 1.0f / sum16_tree(acc);
    for (int64_t j = 0; j < Tk; j++)
        p[j] = nan ? NAN : p[j] * inv;
}

/* ------------------------------------------- rows of weights kept in bf16
 *
 * Rows of up to CG_ATTN_ROW_KEYS keys (ROW_VECS vectors of 16: the most
 * the vdpbf16ps kernel's bf16 weights keep, core/attention.c) held in
 * registers from the scores (the softmax: bf16's recipe above) or from dP
 * (the softmax's backward: the passes above) to the bf16 result, which
 * passes and a rounding would each read and write again. The same
 * operations on the same lanes in the same order as the scalar code they
 * stand for, so the same bits; only where a bf16 product reads the rows:
 * the backward's rows on CPUs with AVX512_BF16 (the caller checks:
 * cg_bf16_native), the softmax's on any CPU with AVX-512 (the rounding the
 * emulation's where AVX512_BF16 is missing). Zen 5 traps, measured
 * (docs/performance.md): a masked load that misses the caches streams at
 * under half a plain load's speed, and a masked division costs more than a
 * division and a select; so whole vectors take plain loads, and masks
 * select after the arithmetic. */
#include <immintrin.h>

#define ROWS_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
/* what the rows' arithmetic needs: AVX512_BF16's rounding is taken apart
 * (round16 below), so softmax rows also run on AVX-512 CPUs without it */
#define ROWS_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
enum { ROW_VECS = CG_ATTN_ROW_KEYS / 16 };

/* The lanes of a row's vector v below n: all 16, or the first n - 16 v */
static inline __attribute__((always_inline)) __mmask16 lanes_below(int64_t n, int v)
{
    const int64_t left = n - 16 * (int64_t)v;
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : 0;
}

/* 16 floats, or bf16 widened, from p: lanes outside live zero and not
 * read (a whole vector by a plain load) */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) __m512 ld_ps(__mmask16 live,
                                                                             const float *p)
{
    return live == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(live, p);
}
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) __m512 ld_bf16(__mmask16 live,
                                                                               const uint16_t *p)
{
    const __m256i h =
        live == 0xffff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(live, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x's halves widened to double (vcvtps2pd each) */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) __m512d lo_pd(__m512 x)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(x));
}
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) __m512d hi_pd(__m512 x)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

/* The total of 8 double lanes, as lanes8_total adds them */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) double total_pd(__m512d acc)
{
    double lanes[8];
    _mm512_storeu_pd(lanes, acc);
    return lanes8_total(lanes);
}

ROWS_BF16_TARGET bool cg_attn_dsoft_row_bf16(const uint16_t *p, const float *d, int64_t ke,
                                             int64_t kz, float scale, uint16_t *d16)
{
    if (kz > 16 * ROW_VECS || ke > kz)
        return false;
    const int nv = (int)((ke + 15) / 16), nz = (int)((kz + 15) / 16);
    /* D = <p, dP> as cg_attn_dot sums it (lanes past ke add +0.0) */
    __m512d acc = _mm512_setzero_pd();
    for (int v = 0; v < nv; v++) {
        const __mmask16 live = lanes_below(ke, v);
        const __m512 pv = ld_bf16(live, p + 16 * v), dv = ld_ps(live, d + 16 * v);
        acc = _mm512_add_pd(acc, _mm512_mul_pd(lo_pd(pv), lo_pd(dv)));
        acc = _mm512_add_pd(acc, _mm512_mul_pd(hi_pd(pv), hi_pd(dv)));
    }
    const __m512 D = _mm512_set1_ps((float)total_pd(acc)), vs = _mm512_set1_ps(scale);
    /* cg_attn_dsoft_row: p (dP - D) / scale, zero past ke, rounded */
    for (int v = 0; v < nz; v++) {
        const __mmask16 live = lanes_below(ke, v);
        const __m512 pv = ld_bf16(live, p + 16 * v), dv = ld_ps(live, d + 16 * v);
        const __m512 q =
            _mm512_maskz_mov_ps(live, _mm512_div_ps(_mm512_mul_ps(pv, _mm512_sub_ps(dv, D)), vs));
        _mm256_mask_storeu_epi16(d16 + 16 * v, lanes_below(kz, v), (__m256i)_mm512_cvtneps_pbh(q));
    }
    return true;
}

/* The exponential of cg_attn_softmax_row_bf16r's model on 16 lanes: c in
 * [EXP16_MIN, 0] (or NaN) */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) __m512 exp16_fma(__m512 c)
{
    const __m512 t = _mm512_fmadd_ps(c, _mm512_set1_ps(EW_EXP_LOG2E), _mm512_set1_ps(EW_EXP_SHIFT));
    const __m512 kf = _mm512_sub_ps(t, _mm512_set1_ps(EW_EXP_SHIFT));
    __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(EW_EXP_LN2_HI), c);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(EW_EXP_LN2_LO), r);
    __m512 q = _mm512_set1_ps(EW_EXP_P0);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EW_EXP_P1));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EW_EXP_P2));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EW_EXP_P3));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EW_EXP_P4));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EW_EXP_P5));
    q = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i k = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000));
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(q), _mm512_slli_epi32(k, 23)));
}

/* sum16_tree of the 16 lanes */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) float tree16(__m512 a)
{
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(a),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

/* 16 floats rounded to bf16 as the products round them: vcvtneps2bf16
 * (written out, so that the code around it is compiled for AVX-512F alone
 * and runs only where the caller found AVX512_BF16), or, in the emulation,
 * bf16_bits's integer steps in the lanes (cg_bf16_round16_bits): the same
 * bits */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) __m256i round16(bool emu, __m512 x)
{
    if (!emu) {
        __m256i r;
        __asm__("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(x));
        return r;
    }
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(cg_bf16_round16_bits(x), 16));
}

/* n rows of cg_attn_softmax_rows_bf16r16, their passes interleaved (a
 * row alone is a chain of latencies: its maximum, its sum, the division);
 * n is a constant at every call and the loops over rows unroll. A row's
 * vectors past its keys hold 0 (or NaN: see the model) and take no pass. */
ROWS_AVX512_TARGET static inline __attribute__((always_inline)) void softmax_rows_r16(
    const int n, const bool emu, const float *s, int64_t lds, const int64_t *ke, int64_t Tk,
    float scale, const int32_t *kmask, uint16_t *p, int64_t ldp)
{
    const int nt = (int)((Tk + 15) / 16);
    const __m512 is = _mm512_set1_ps(1.0f / scale), ninf = _mm512_set1_ps(-INFINITY);
    const __m512 lo = _mm512_set1_ps(EXP16_MIN);
    float x[CG_ATTN_ROWS][16 * ROW_VECS] __attribute__((aligned(64)));
    __mmask16 live[CG_ATTN_ROWS][ROW_VECS];
    __m512 hi[CG_ATTN_ROWS], acc[CG_ATTN_ROWS], m[CG_ATTN_ROWS], inv[CG_ATTN_ROWS];
    __mmask16 nan[CG_ATTN_ROWS];
    int nv[CG_ATTN_ROWS], nvmax = 0;
#pragma GCC unroll 4
    for (int r = 0; r < n; r++) {
        hi[r] = ninf;
        acc[r] = _mm512_setzero_ps();
        nan[r] = 0;
        nv[r] = (int)((ke[r] + 15) / 16);
        nvmax = nv[r] > nvmax ? nv[r] : nvmax;
    }
    nvmax = nvmax < ROW_VECS ? nvmax : ROW_VECS; /* (the caller checked: for the compiler) */
    for (int v = 0; v < nvmax; v++)
#pragma GCC unroll 4
        for (int r = 0; r < n; r++) {
            if (v >= nv[r])
                continue;
            __mmask16 l = lanes_below(ke[r], v);
            const __mmask16 in = l;
            if (kmask)
                l &= _mm512_testn_epi32_mask(_mm512_maskz_loadu_epi32(in, kmask + 16 * v),
                                             _mm512_set1_epi32(-1));
            live[r][v] = l;
            const __m512 a = _mm512_mask_mul_ps(ninf, l, ld_ps(in, s + r * lds + 16 * v), is);
            _mm512_store_ps(x[r] + 16 * v, a);
            hi[r] = _mm512_mask_mov_ps(hi[r], _mm512_cmp_ps_mask(a, hi[r], _CMP_GT_OQ), a);
        }
#pragma GCC unroll 4
    for (int r = 0; r < n; r++)
        m[r] = _mm512_set1_ps(_mm512_reduce_max_ps(hi[r]));
    for (int v = 0; v < nvmax; v++)
#pragma GCC unroll 4
        for (int r = 0; r < n; r++) {
            if (v >= nv[r])
                continue;
            const __m512 d = _mm512_sub_ps(_mm512_load_ps(x[r] + 16 * v), m[r]);
            nan[r] |= _mm512_mask_cmp_ps_mask(live[r][v], d, d, _CMP_UNORD_Q);
            /* max(lo, d): d where it is NaN (max's second operand) */
            const __m512 e = _mm512_maskz_mov_ps(live[r][v], exp16_fma(_mm512_max_ps(lo, d)));
            _mm512_store_ps(x[r] + 16 * v, e);
            acc[r] = _mm512_add_ps(acc[r], e);
        }
#pragma GCC unroll 4
    for (int r = 0; r < n; r++)
        inv[r] = nan[r] ? _mm512_set1_ps(NAN) : _mm512_set1_ps(1.0f / tree16(acc[r]));
    for (int v = 0; v < nt; v++)
#pragma GCC unroll 4
        for (int r = 0; r < n; r++) {
            /* e / sum; past the row's keys 0 / sum (0, or NaN as the
             * model's row with no key) */
            const __m512 e = v < nv[r] ? _mm512_load_ps(x[r] + 16 * v) : _mm512_setzero_ps();
            _mm256_mask_storeu_epi16(p + r * ldp + 16 * v, lanes_below(Tk, v),
                                     round16(emu, _mm512_mul_ps(e, inv[r])));
        }
}

ROWS_AVX512_TARGET static void softmax_rows_of(bool emu, int n, const float *s, int64_t lds,
                                               const int64_t *ke, int64_t Tk, float scale,
                                               const int32_t *kmask, uint16_t *p, int64_t ldp)
{
#define CG_SR(N, E) softmax_rows_r16(N, E, s, lds, ke, Tk, scale, kmask, p, ldp)
    if (emu)
        switch (n) {
        case 1: CG_SR(1, true); break;
        case 2: CG_SR(2, true); break;
        case 3: CG_SR(3, true); break;
        default: CG_SR(4, true); break;
        }
    else
        switch (n) {
        case 1: CG_SR(1, false); break;
        case 2: CG_SR(2, false); break;
        case 3: CG_SR(3, false); break;
        default: CG_SR(4, false); break;
        }
#undef CG_SR
}

bool cg_attn_softmax_rows_bf16r16(int n, const float *s, int64_t lds, const int64_t *ke, int64_t Tk,
                                  float scale, const int32_t *kmask, uint16_t *p, int64_t ldp)
{
    const bool native = cg_bf16_native();
    if (!native && !cg_bf16_emulation_avx512)
        return false; /* no AVX-512: the caller runs the scalar model */
    if (Tk > 16 * ROW_VECS || n < 1 || n > CG_ATTN_ROWS)
        return false;
    for (int r = 0; r < n; r++)
        if (ke[r] < 0 || ke[r] > Tk)
            return false;
    softmax_rows_of(!native, n, s, lds, ke, Tk, scale, kmask, p, ldp);
    return true;
}
