/* cgrad core, INTERNAL: what core/conv.c (the convolution) and
 * core/conv_transpose.c (the transposed one, made of the convolution's
 * passes) share. */
#ifndef CG_CONV_IMPL_H
#define CG_CONV_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"

/* A convolution's geometry: x [N, C, D, H, W] (a 2-d one of depth 1, a
 * 1-d one of depth and height 1) into the output [N, O, OD, OH, OW], the
 * weight [O, Cg, KD, KH, KW]. A transposed
 * convolution is described by the convolution whose data gradient it is:
 * its input is this output, its output this x. op names the op errors
 * report. */
typedef struct {
    const char *op;
    bool batched;
    int64_t N, C, O, G, Cg, Og;
    int64_t D, H, W, OD, OH, OW, KD, KH, KW;
    int64_t sd, sh, sw, dd, dh, dw, pd, ph, pw; /* stride, dilation, padding before */
    int64_t P, Kp, CK;                          /* output positions, taps, cols' width */
} cg_conv_geom;

/* g's spatial numbers per dim (depth, height, width): x's sizes in, the
 * output's out, the kernel's k, stride s, dilation d, padding before p;
 * then its output positions P, taps Kp and cols' width CK (g->Cg set) */
void cg_conv_geom_dims(cg_conv_geom *g, const int64_t in[3], const int64_t out[3],
                       const int64_t k[3], const int64_t s[3], const int64_t d[3],
                       const int64_t p[3]);

/* The checks shared by cg_conv_cfg_check and cg_conv_transpose_cfg_check
 * (groups, stride, dilation, padding numbers); false + error naming op */
bool cg_conv_cfg_common(const char *op, int nd, const cg_conv_cfg *c);

/* x's dtype (float32 or bfloat16) and rank (nd + 1 or nd + 2), w's and
 * b's (float32; w nd + 2 dims described as [wdims, K], none empty; b
 * [out]); false + error naming op */
bool cg_conv_check_args(const char *op, int nd, const cg_tensor *x, const cg_tensor *w,
                        const cg_tensor *b, const char *wdims, int64_t out);

/* x as float32 (a new reference) and its strides (n, c, d, h, w) in
 * elements (0 for a dim x lacks), x's channel dim after the batch's when
 * g->batched */
cg_tensor *cg_conv_x_f32(const cg_tensor *x, const cg_conv_geom *g, int64_t xs[5]);

/* The forward's pass: out [N, O, P] (contiguous) = the convolution of x
 * (float32, strides xs) with w (contiguous) plus b (or NULL); false +
 * error. */
bool cg_conv_pass_forward(const cg_conv_geom *g, const float *x, const int64_t xs[5],
                          const float *w, const cg_tensor *b, float *out);

/* The backward's pass given gc [N, O, P] (contiguous): dx (contiguous, or
 * NULL) = W^T g folded back, dw (or NULL) = the samples' g cols(x)^T
 * summed in chunks of samples set by the batch, db (or NULL) g's rows
 * summed in double. x (strides xs) is read only for dw (NULL without it;
 * xs then dx's strides). False + error. */
bool cg_conv_pass_backward(const cg_conv_geom *g, const float *x, const int64_t xs[5],
                           const float *w, const float *gc, float *dx, float *dw, float *db);
/* Both cg_conv_pass_forward's out (no bias) and cg_conv_pass_backward's
 * dw given gc, each sample's cols unfolded once for both: the same bits
 * as the two passes. False + error. */
bool cg_conv_pass_forward_dw(const cg_conv_geom *g, const float *x, const int64_t xs[5],
                             const float *w, const float *gc, float *out, float *dw);
/* The samples' cols [N, CK, P] (contiguous) of x (float32, strides xs):
 * im2col, as the passes unfold (a row a channel's tap, zero in the
 * padding); groups 1. */
void cg_conv_im2col(const cg_conv_geom *g, const float *x, const int64_t xs[5], float *cols);
/* dx [N, C, D, H, W] (contiguous) = cols [N, CK, P] (contiguous) folded back:
 * col2im, each plane zeroed then its taps' rows added in index order (the
 * same bits for any thread count); groups 1. */
void cg_conv_col2im(const cg_conv_geom *g, const float *cols, float *dx);
/* db[o] = the sum over the samples then the positions of gc [N, O, P]'s
 * row o, in double (the backward's db) */
void cg_conv_pass_db(const cg_conv_geom *g, const float *gc, float *db);

#endif
