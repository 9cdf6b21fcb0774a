/* The row kernels of core/attention.c: one row of scores at a time
 * through the scaled, masked softmax (plain, online, recomputed from a
 * log-sum-exp) and its backward. Vectorised for AVX-512, AVX2 or SSE2
 * (EW_CLONES, chosen at load time) with the same IEEE operations in every
 * clone, and sums in 8 double lanes of a fixed order, so the bits depend on
 * neither the CPU nor the thread count. exp is ew_expf (core/vmath.h). */
#include <math.h>
#include <string.h>

#include "core/attention_rows.h"
#include "core/vmath.h"

/* s[j] = s[j] / scale, or -inf where kmask[j] (0 or ~0: the key-padding
 * bytes widened once per call, see key_masks; widening 16 bytes here cost
 * GCC a byte-by-byte gather, and masking doubled this pass), over [0, ke);
 * returns the maximum, and in *mn the minimum of the elements other than
 * -inf (+inf when there are none; NaN when any element is NaN), for
 * exp_sum's range check. Maximum and minimum are taken in 16 lanes
 * (element j in lane j % 16) so the pass runs on whole vectors; neither
 * depends on its order. */
EW_CLONES static float scale_mask_max(float *s, int64_t ke, float scale, const int32_t *kmask,
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
 * *lse (unless NULL: kept weights need none) gets the row's log-sum-exp. */
EW_CLONES void cg_attn_softmax_row(float *s, int64_t ke, int64_t Tk, float scale,
                                   const int32_t *kmask, float *lse)
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
        *lse = cg_attn_row_lse(mx, sum);
}

/* One row of one key block in the online softmax: s[0, ke) becomes
 * exp(s / scale - m_new) (masked keys 0), s[ke, kz) = 0; the running
 * maximum *m and sum *l are updated. Returns the factor exp(m_old - m_new)
 * by which the row's earlier output must be scaled. */
EW_CLONES float cg_attn_online_row(float *s, int64_t ke, int64_t kz, float scale,
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
 * over [0, ke) (masked keys 0, a NaN lse gives NaN), s[ke, kz) = 0. In 16
 * lanes, the last partial block too (ew_expf's bits). When the row's
 * scores all map into ew_expf16_normal's range (they do unless a score is
 * far below the row's maximum, or is not finite), by that twin: s / scale
 * - lse is monotonic in s, so the row's minimum and maximum bound it. */
EW_CLONES void cg_attn_prob_row(float *s, int64_t ke, int64_t kz, float scale, const uint8_t *kpad,
                                float lse)
{
    float mn;
    bool bad;
    const float mx = ke > 0 ? max16_min(s, ke, &mn, &bad) : 0.0f;
    if (ke > 0 && !bad && lse == lse && mn / scale - lse >= EW_EXP_NORMAL_MIN &&
        mx / scale - lse <= 0.0f)
        prob_run(s, ke, scale, kpad, lse, true);
    else
        prob_run(s, ke, scale, kpad, lse, false);
    for (int64_t j = ke; j < kz; j++)
        s[j] = 0.0f;
}

/* cg_attn_prob_row and cg_attn_dsoft_row in one pass: p = exp(s / scale - lse) into s,
 * d = p (d - D) / scale, over [0, ke); both zero over [ke, kz). */
EW_CLONES void cg_attn_prob_dsoft_row(float *s, float *d, int64_t ke, int64_t kz, float scale,
                                      const uint8_t *kpad, float lse, float D)
{
    int64_t j;
    if (kpad)
        for (j = 0; j < ke; j++) {
            float p = ew_expf(bsel(M(kpad[j] != 0), -INFINITY, s[j] / scale) - lse);
            s[j] = p;
            d[j] = p * (d[j] - D) / scale;
        }
    else {
        for (j = 0; j + 16 <= ke; j += 16) { /* as the scalar tail, 16 lanes */
            v16f v, g;
            memcpy(&v, s + j, sizeof v);
            memcpy(&g, d + j, sizeof g);
            v = ew_expf16(v / scale - lse);
            g = v * (g - D) / scale;
            memcpy(s + j, &v, sizeof v);
            memcpy(d + j, &g, sizeof g);
        }
        if (j < ke) { /* the last partial block: the same operations in 16 lanes */
            v16f v = ew_expf16(load_part16(s + j, ke - j, 0.0f) / scale - lse);
            v16f g = v * (load_part16(d + j, ke - j, 0.0f) - D) / scale;
            store_part16(s + j, ke - j, v);
            store_part16(d + j, ke - j, g);
            j = ke;
        }
    }
    for (j = ke; j < kz; j++)
        s[j] = d[j] = 0.0f;
}

/* <a, b> over [0, n) in 8 double lanes (element j in lane j % 8). */
EW_CLONES float cg_attn_dot(const float *a, const float *b, int64_t n)
{
    return (float)sum_lanes(a, b, n);
}

EW_CLONES void cg_attn_widen_row(const uint16_t *h, int64_t n, float *f) { bf16_widen(n, h, f); }

/* Softmax backward of one row given its probabilities p and dP in d:
 * d = p (d - D) / scale over [0, ke), d[ke, kz) = 0, where D = <p, dP> =
 * <dO, O>. */
EW_CLONES void cg_attn_dsoft_row(const float *p, float *d, int64_t ke, int64_t kz, float D,
                                 float scale)
{
    int64_t j = 0;
    for (; j < ke; j++)
        d[j] = p[j] * (d[j] - D) / scale;
    for (; j < kz; j++)
        d[j] = 0.0f;
}

/* ------------------------------------------- rows of weights kept in bf16
 *
 * Rows of up to ROW_VECS x 16 keys (weights kept in bf16 have at most
 * PKEEP_BF16 = 128) held in registers from the scores to the bf16 result:
 * the passes above, and the rounding after them, each read and wrote the
 * row again. The same operations on the same lanes in the same order as
 * those passes (the same source for the exponential and the sums), so the
 * same bits; only where a bf16 product reads the rows, so on CPUs with
 * AVX512_BF16 (the caller checks: cg_bf16_native). Zen 5 traps, measured
 * (docs/performance.md): a masked load that misses the caches streams at
 * under half a plain load's speed, and a masked division costs more than a
 * division and a select; so whole vectors take plain loads, and masks
 * select after the arithmetic. */
#include <immintrin.h>

#define ROWS_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
enum { ROW_VECS = 8 };

/* The lanes of a row's vector v below n: all 16, or the first n - 16 v */
static inline __attribute__((always_inline)) __mmask16 lanes_below(int64_t n, int v)
{
    const int64_t left = n - 16 * (int64_t)v;
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : 0;
}

/* 16 floats, or bf16 widened, from p: lanes outside live zero and not
 * read (a whole vector by a plain load) */
ROWS_BF16_TARGET static inline __attribute__((always_inline)) __m512 ld_ps(__mmask16 live,
                                                                           const float *p)
{
    return live == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(live, p);
}
ROWS_BF16_TARGET static inline __attribute__((always_inline)) __m512 ld_bf16(__mmask16 live,
                                                                             const uint16_t *p)
{
    const __m256i h =
        live == 0xffff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(live, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x's halves widened to double (vcvtps2pd each) */
ROWS_BF16_TARGET static inline __attribute__((always_inline)) __m512d lo_pd(__m512 x)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(x));
}
ROWS_BF16_TARGET static inline __attribute__((always_inline)) __m512d hi_pd(__m512 x)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

/* The total of 8 double lanes, as lanes8_total adds them */
ROWS_BF16_TARGET static inline __attribute__((always_inline)) double total_pd(__m512d acc)
{
    double lanes[8];
    _mm512_storeu_pd(lanes, acc);
    return lanes8_total(lanes);
}

/* The softmax of n <= CG_ATTN_ROWS rows, each as cg_attn_softmax_row
 * and the rounding compute it alone, the rows' passes interleaved: a row
 * alone is a chain of latencies (its maximum, then its sum, then the
 * division by it) that leaves the core half idle (Zen 5, 96 keys, 1
 * thread: 75 ns a row alone, 58 in fours; causal rows 50 and 38). n is a
 * constant at every call and the loops over rows are unrolled (without
 * the pragmas GCC kept the rows' maxima on the stack, where each masked
 * store stalled the next iteration's load, and the fours gained
 * nothing). */
ROWS_BF16_TARGET static inline __attribute__((always_inline)) unsigned softmax_rows_n(
    const int n, const float *s, int64_t lds, const int64_t *ke, int64_t Tk, float scale,
    const int32_t *kmask, uint16_t *p, int64_t ldp)
{
    if (Tk > 16 * ROW_VECS)
        return 0;
    const __m512 ninf = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
    __m512 hi[CG_ATTN_ROWS], lo[CG_ATTN_ROWS];
    __mmask16 nan[CG_ATTN_ROWS];
    float x[CG_ATTN_ROWS][16 * ROW_VECS] __attribute__((aligned(64)));
    int nv[CG_ATTN_ROWS], nvmax = 0;
    const int nt = (int)((Tk + 15) / 16);
#pragma GCC unroll 4
    for (int r = 0; r < n; r++) {
        hi[r] = ninf;
        lo[r] = _mm512_set1_ps(INFINITY);
        nan[r] = 0;
        nv[r] = ke[r] > 0 ? (int)((ke[r] + 15) / 16) : 0;
        nvmax = nv[r] > nvmax ? nv[r] : nvmax;
    }
    /* scale_mask_max; lanes past ke are -inf, as masked keys */
    for (int v = 0; v < nvmax; v++)
#pragma GCC unroll 4
        for (int r = 0; r < n; r++) {
            if (v >= nv[r])
                continue;
            const __mmask16 live = lanes_below(ke[r], v);
            __mmask16 keep = live;
            if (kmask)
                keep &= _mm512_testn_epi32_mask(_mm512_maskz_loadu_epi32(live, kmask + 16 * v),
                                                _mm512_set1_epi32(-1));
            const __m512 a = _mm512_mask_mov_ps(
                ninf, keep, _mm512_div_ps(ld_ps(live, s + r * lds + 16 * v), vs));
            _mm512_store_ps(x[r] + 16 * v, a);
            hi[r] = _mm512_mask_mov_ps(hi[r], _mm512_cmp_ps_mask(a, hi[r], _CMP_GT_OQ), a);
            /* the minimum of the lanes other than -inf; NaN lanes found apart */
            lo[r] = _mm512_mask_mov_ps(lo[r],
                                       _mm512_cmp_ps_mask(a, lo[r], _CMP_LT_OQ) &
                                           _mm512_cmp_ps_mask(a, ninf, _CMP_NEQ_UQ),
                                       a);
            nan[r] |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        }
    /* a row with no key, a NaN, or a score out of the faster exponential's
     * range is refused (nothing written: the caller takes the passes
     * above). Without NaN the maximum and the minimum of the lanes do not
     * depend on their order (a zero's sign changes no x - mx below). */
    float mx[CG_ATTN_ROWS];
    unsigned done = 0;
#pragma GCC unroll 4
    for (int r = 0; r < n; r++) {
        mx[r] = _mm512_reduce_max_ps(hi[r]);
        if (nv[r] && !nan[r] && exp_normal(_mm512_reduce_min_ps(lo[r]), mx[r]))
            done |= 1u << r;
    }
    /* exp_sum_of: exp(x - mx) (masked keys and lanes past ke 0), the
     * halves of each vector into 8 double lanes in order */
    __m512d acc[CG_ATTN_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < n; r++)
        acc[r] = _mm512_setzero_pd();
    for (int v = 0; v < nvmax; v++)
#pragma GCC unroll 4
        for (int r = 0; r < n; r++) {
            if (v >= nv[r] || !(done >> r & 1))
                continue;
            v16f a, ea;
            memcpy(&a, x[r] + 16 * v, sizeof a);
            const __mmask16 fin = _mm512_cmp_ps_mask((__m512)a, ninf, _CMP_NEQ_UQ);
            EW_EXPF16_NORMAL(a - mx[r], ea);
            const __m512 e = _mm512_maskz_mov_ps(fin, (__m512)ea);
            _mm512_store_ps(x[r] + 16 * v, e);
            acc[r] = _mm512_add_pd(acc[r], lo_pd(e));
            acc[r] = _mm512_add_pd(acc[r], hi_pd(e));
        }
    __m512d inv[CG_ATTN_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < n; r++)
        inv[r] = _mm512_set1_pd(1.0 / total_pd(acc[r]));
    /* cg_attn_softmax_row's (float)(e inv), zero past ke, rounded */
    for (int v = 0; v < nt; v++)
#pragma GCC unroll 4
        for (int r = 0; r < n; r++) {
            if (!(done >> r & 1))
                continue;
            __m512 q = _mm512_setzero_ps();
            if (v < nv[r]) {
                const __m512 e = _mm512_load_ps(x[r] + 16 * v);
                const __m256 l = _mm512_cvtpd_ps(_mm512_mul_pd(lo_pd(e), inv[r]));
                const __m256 h = _mm512_cvtpd_ps(_mm512_mul_pd(hi_pd(e), inv[r]));
                q = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(l)),
                                                        _mm256_castps_pd(h), 1));
            }
            _mm256_mask_storeu_epi16(p + r * ldp + 16 * v, lanes_below(Tk, v),
                                     (__m256i)_mm512_cvtneps_pbh(q));
        }
    return done;
}

ROWS_BF16_TARGET unsigned cg_attn_softmax_rows_bf16(int n, const float *s, int64_t lds,
                                                    const int64_t *ke, int64_t Tk, float scale,
                                                    const int32_t *kmask, uint16_t *p, int64_t ldp)
{
#define CG_SR(N) softmax_rows_n(N, s, lds, ke, Tk, scale, kmask, p, ldp)
    switch (n) {
    case 1: return CG_SR(1);
    case 2: return CG_SR(2);
    case 3: return CG_SR(3);
    case 4: return CG_SR(4);
    default: return 0;
    }
#undef CG_SR
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
