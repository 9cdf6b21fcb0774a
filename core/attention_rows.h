/* cgrad core, INTERNAL: the row kernels of the fused attention
 * (core/attention_rows.c; only core/attention.c and attention_bwd.c
 * include this). A row is one query's scores over keys [0, ke) of a
 * block; kz >= ke is the block's width, whose columns past ke each kernel
 * sets to 0. kmask: the key padding as 32-bit masks (~0 where padded),
 * kpad: as bytes; either may be NULL (no padding). scale: sqrt(dh), which
 * the scores are divided by. */
#ifndef CG_ATTENTION_ROWS_H
#define CG_ATTENTION_ROWS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The log-sum-exp of a row from its maximum and sum, as two floats: the
 * value rounded (returned) and the rest (*lo; 0 unless both are finite),
 * hi + lo the log-sum-exp to about 2^-48 of itself. Rounded alone it is
 * off by up to half an ulp of |lse| (5e-4 at scores of 1e4), which the
 * weights exp(s - lse) recomputed over several key blocks would carry as
 * a relative error (they cannot be divided by their sum block by block):
 * exp((s - hi) - lo), where s - hi is exact for the largest scores. NaN
 * when every key was masked (the row's output is NaN then, as PyTorch's). */
static inline float cg_attn_row_lse(float mx, double sum, float *lo)
{
    const double l = sum > 0.0 ? (double)mx + log(sum) : NAN;
    const float hi = (float)l;
    *lo = isfinite(hi) ? (float)(l - (double)hi) : 0.0f;
    return hi;
}

/* The softmax of s[0, ke) in place, s[ke, Tk) = 0; *lse and *lse_lo
 * (unless lse is NULL) the row's log-sum-exp (cg_attn_row_lse). */
void cg_attn_softmax_row(float *s, int64_t ke, int64_t Tk, float scale, const int32_t *kmask,
                         float *lse, float *lse_lo);
/* One key block of the online softmax: s[0, ke) = exp(s / scale - m_new),
 * the running maximum *m and sum *l updated; returns exp(m_old - m_new),
 * the factor for the row's earlier output. */
float cg_attn_online_row(float *s, int64_t ke, int64_t kz, float scale, const int32_t *kmask,
                         float *m, double *l);
/* The probabilities recomputed: s[j] = exp(s[j] / scale - lse), divided
 * by their sum (lse is rounded to float: the row sums to 1 again). */
void cg_attn_prob_row(float *s, int64_t ke, int64_t kz, float scale, const uint8_t *kpad,
                      float lse);
/* For one key block of several: s[j] = exp((s[j] / scale - lse) -
 * lse_lo) (the log-sum-exp as cg_attn_row_lse's two floats), not divided
 * by the block's sum as cg_attn_prob_row divides, and cg_attn_dsoft_row
 * with the given D (dP in d), in one pass. */
void cg_attn_prob_dsoft_row(float *s, float *d, int64_t ke, int64_t kz, float scale,
                            const uint8_t *kpad, float lse, float lse_lo, float D);
/* <a, b> over [0, n), in 8 double lanes (element j in lane j % 8). */
float cg_attn_dot(const float *a, const float *b, int64_t n);
/* A row of weights kept in bf16 (their 16-bit patterns), widened to f. */
void cg_attn_widen_row(const uint16_t *h, int64_t n, float *f);
/* The softmax's backward: d = p (d - D) / scale, D = <p, dP> = <dO, O>. */
void cg_attn_dsoft_row(const float *p, float *d, int64_t ke, int64_t kz, float D, float scale);

/* bf16's own recipe for kept weights (attention_rows.c says which
 * operations): p[0, Tk) the weights in float, before their rounding to
 * bf16; any CPU (the emulation's); p may be s. The rows16 form writes up
 * to CG_ATTN_ROWS rows (n) rounded, row r from s + r lds with ke[r] keys
 * into p + r ldp, in registers, their passes interleaved, with the same
 * bits, on a CPU with AVX-512 (AVX512_BF16's rounding, or the emulation's
 * where the CPU lacks it or CG_BF16_EMULATE=1); false (nothing written)
 * without AVX-512, when Tk > CG_ATTN_ROW_KEYS or a ke is outside [0, Tk]. */
void cg_attn_softmax_row_bf16r(const float *s, int64_t ke, int64_t Tk, float scale,
                               const int32_t *kmask, float *p);
enum { CG_ATTN_ROWS = 4, CG_ATTN_ROW_KEYS = 256 };
bool cg_attn_softmax_rows_bf16r16(int n, const float *s, int64_t lds, const int64_t *ke, int64_t Tk,
                                  float scale, const int32_t *kmask, uint16_t *p, int64_t ldp);
/* Backward (a row at a time: interleaving rows gained nothing in a step,
 * where the kept weights come from memory): d16[0, kz) =
 * cg_attn_dsoft_row(p, d, ke, kz, cg_attn_dot(p, d, ke), scale) rounded,
 * p being the row's weights in bf16, d (dP) left as it was; false
 * (nothing written) when kz > CG_ATTN_ROW_KEYS. */
bool cg_attn_dsoft_row_bf16(const uint16_t *p, const float *d, int64_t ke, int64_t kz, float scale,
                            uint16_t *d16);

#endif
