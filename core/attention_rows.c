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
