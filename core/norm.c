/* Layer norm and RMS norm fused over the last dim, the same after a
 * residual add (norm(x + y), the post-norm block). (Inverted dropout:
 * core/dropout.c.)
 *
 * x is made contiguous and seen as [rows, D]. Forward: one row per task.
 * Backward: rows are cut into fixed chunks of CHUNK rows; a task computes dx
 * for its chunk and partial dw/db sums (double) for it; the partials are then
 * added in chunk order. The chunking does not depend on the thread count, so
 * results are bit-identical for any number of threads.
 *
 * norm(x + y) adds each row into a scratch row and normalises that (one
 * float addition per element: the bits of cg_add then the norm), or, when
 * the caller asks for the sum (*sum), into the sum's row, which the plain
 * backward then reads as its x; both inputs get its dx, as an add's
 * backward hands its gradient to both.
 *
 * In bf16 training the forward can keep x-hat = (x - mean) * rstd rounded
 * to bf16 instead of its input (xhat): the backward's terms are all of
 * x-hat (dw, the dx sums) or of rstd (dx's factor), so it runs from x-hat
 * and rstd alone, at half the bytes of the fp32 input and without the
 * mean (docs/bf16.md, "Saved in bf16"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/vmath.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768
#define CHUNK 64

/* Row sums in 8 interleaved double lanes (core/vmath.h); the per-row
 * helpers are compiled per ISA like the elementwise kernels. */
#define LANES 8
typedef double v8d_u __attribute__((vector_size(64), aligned(8))); /* v8d at any double */

/* A row the backward reads x-hat from: float x with x-hat = (x - m) * s,
 * or x-hat itself in bf16 (h, widened exactly; m = 0, s = 1 unused). */
typedef struct {
    const float *x;
    const uint16_t *h;
    double m, s;
} xrow;

/* x-hat at columns j..j+7, and at column j alone */
static inline __attribute__((always_inline)) v8d xhat8(xrow r, int64_t j)
{
    if (r.h) {
        float w[8]; /* an array, then copied: GCC 12 does not see the loop
                       fill a vector through a float pointer (-Wmaybe-uninitialized) */
        bf16_widen(8, r.h + j, w);
        v8f f;
        memcpy(&f, w, sizeof f);
        return __builtin_convertvector(f, v8d);
    }
    return (ld8(r.x + j) - r.m) * r.s;
}
static inline __attribute__((always_inline)) double xhat1(xrow r, int64_t j)
{
    if (r.h) {
        float f;
        bf16_widen(1, r.h + j, &f);
        return f;
    }
    return ((double)r.x[j] - r.m) * r.s;
}

/* One row forward: returns mean (0 for RMS) and rstd, writes y (yr not NULL). */
EW_CLONES static void norm_row_fwd(bool rms, const float *xr, float *yr, const float *wp,
                                   const float *bp, int64_t D, float eps, float *mean_out,
                                   float *rstd_out)
{
    double acc[LANES] = {0};
    double mean = 0.0;
    int64_t j, Dl = D / LANES * LANES;
    if (!rms)
        mean = sum_lanes(xr, NULL, D) / (double)D;
    for (j = 0; j < Dl; j += LANES)
        for (int l = 0; l < LANES; l++) {
            double d = (double)xr[j + l] - mean;
            acc[l] += d * d;
        }
    for (; j < D; j++) {
        double d = (double)xr[j] - mean;
        acc[j - Dl] += d * d;
    }
    double var = lanes8_total(acc) / (double)D;
    float mf = (float)mean;
    float rs = (float)(1.0 / sqrt(var + (double)eps));
    *mean_out = mf;
    *rstd_out = rs;
    if (!yr)
        return;
    if (wp && bp)
        for (j = 0; j < D; j++)
            yr[j] = (xr[j] - mf) * rs * wp[j] + bp[j];
    else if (wp)
        for (j = 0; j < D; j++)
            yr[j] = (xr[j] - mf) * rs * wp[j];
    else if (bp)
        for (j = 0; j < D; j++)
            yr[j] = (xr[j] - mf) * rs + bp[j];
    else
        for (j = 0; j < D; j++)
            yr[j] = (xr[j] - mf) * rs;
}

/* One row's dx sums over the first Dl columns (Dl a multiple of 8), in 8
 * lanes: ag[l] = sum of gw over columns j = l (mod 8), agx the same of
 * gw * xhat. Two rows at once (a, b) hide the additions' latency; each
 * row's sums are the same as alone. With cw or cb, the same pass adds the
 * two rows' dw and db terms over those columns (dwb_row's, row a's then,
 * when two, row b's: each column's chain in row order), so g and x-hat are
 * read and widened once for both. */
static inline __attribute__((always_inline)) void dx_sums(int64_t Dl, xrow xa, const float *ga,
                                                          xrow xb, const float *gb, bool two,
                                                          const float *wp, double *cw, double *cb,
                                                          v8d *aga, v8d *agxa, v8d *agb, v8d *agxb)
{
    v8d sa = {0}, sxa = {0}, sb = {0}, sxb = {0};
    for (int64_t j = 0; j < Dl; j += 8) {
        const v8d g8a = ld8(ga + j), g8b = ld8(gb + j);
        const v8d xha = xhat8(xa, j), xhb = xhat8(xb, j);
        if (cw) {
            v8d t = *(v8d_u *)(cw + j) + g8a * xha;
            if (two)
                t = t + g8b * xhb;
            *(v8d_u *)(cw + j) = t;
        }
        if (cb) {
            v8d t = *(v8d_u *)(cb + j) + g8a;
            if (two)
                t = t + g8b;
            *(v8d_u *)(cb + j) = t;
        }
        v8d gwa = g8a, gwb = g8b;
        if (wp) {
            v8d w = ld8(wp + j);
            gwa = gwa * w;
            gwb = gwb * w;
        }
        sa += gwa;
        sxa += gwa * xha;
        sb += gwb;
        sxb += gwb * xhb;
    }
    *aga = sa, *agxa = sxa, *agb = sb, *agxb = sxb;
}

/* Row r's terms of the dw and db sums over columns [j0, D), added to cw
 * and cb (each column's chain in row order, from the chunk's zeros). */
static inline __attribute__((always_inline)) void dwb_row(int64_t j0, int64_t D, xrow xr,
                                                          const float *gr, double *cw, double *cb)
{
    int64_t j = j0;
    for (; j + 8 <= D; j += 8) {
        v8d g = ld8(gr + j);
        if (cw) {
            v8d t = *(v8d_u *)(cw + j) + g * xhat8(xr, j);
            *(v8d_u *)(cw + j) = t;
        }
        if (cb)
            *(v8d_u *)(cb + j) = *(v8d_u *)(cb + j) + g;
    }
    for (; j < D; j++) {
        double g = gr[j];
        if (cw)
            cw[j] += g * xhat1(xr, j);
        if (cb)
            cb[j] += g;
    }
}

/* Row r of the chunk: from float x (mp may be NULL: mean 0) or from bf16
 * x-hat (hp; x-hat needs no mean and no scale). */
static inline __attribute__((always_inline)) xrow row_at(int64_t r, int64_t D, const float *xp,
                                                         const uint16_t *hp, const float *mp,
                                                         const float *rp)
{
    if (hp)
        return (xrow){.h = hp + r * D, .m = 0.0, .s = 1.0};
    return (xrow){.x = xp + r * D, .m = mp ? (double)mp[r] : 0.0, .s = rp[r]};
}

/* One chunk of rows backward: dx for each row (when dxp; with add, each
 * element added into what dxp holds, acc + (float)dx rounded once: the bits
 * of cg_k_add_ after), and this chunk's
 * partial dw (cw) and db (cb) sums, each column's in row order from zero
 * (cw and cb come zeroed). One pass over the rows: each row's terms are
 * added to cw and cb (in L1) as it is read for dx (a pass down each block
 * of columns first read the chunk's rows apart, bound by the misses). The
 * rows are float x (xp, with mp and rp) or bf16 x-hat (hp); always_inline
 * so that each caller's form is compiled without the other's tests. */
static inline __attribute__((always_inline)) void chunk_bwd(bool rms, int64_t r0, int64_t r1,
                                                            int64_t D, const float *xp,
                                                            const uint16_t *hp, const float *gp,
                                                            const float *mp, const float *rp,
                                                            const float *wp, float *dxp, bool add,
                                                            double *cw, double *cb)
{
    int64_t Dl = D / LANES * LANES;
    if (!dxp) {
        for (int64_t r = r0; r < r1 && (cw || cb); r++)
            dwb_row(0, D, row_at(r, D, xp, hp, mp, rp), gp + r * D, cw, cb);
        return;
    }
    for (int64_t r = r0; r < r1; r += 2) {
        const int64_t rb = r + 1 < r1 ? r + 1 : r; /* an odd last row pairs with itself */
        const xrow xr2[2] = {row_at(r, D, xp, hp, mp, rp), row_at(rb, D, xp, hp, mp, rp)};
        const double rs[2] = {rp[r], rp[rb]}; /* dx's factor */
        double mg[2], mgx[2];
        v8d ag[2], agx[2];
        dx_sums(Dl, xr2[0], gp + r * D, xr2[1], gp + rb * D, rb > r, wp, cw, cb, &ag[0], &agx[0],
                &ag[1], &agx[1]);
        for (int h = 0; (cw || cb) && h < (rb > r ? 2 : 1); h++) /* the last columns */
            dwb_row(Dl, D, xr2[h], gp + (r + h) * D, cw, cb);
        for (int h = 0; h < (rb > r ? 2 : 1); h++) {
            const xrow xr = xr2[h];
            const float *gr = gp + (r + h) * D;
            double a[LANES], ax[LANES];
            for (int l = 0; l < LANES; l++)
                a[l] = ag[h][l], ax[l] = agx[h][l];
            for (int64_t j = Dl; j < D; j++) {
                double gw = wp ? (double)gr[j] * wp[j] : (double)gr[j];
                a[j - Dl] += gw;
                ax[j - Dl] += gw * xhat1(xr, j);
            }
            mg[h] = rms ? 0.0 : lanes8_total(a) / (double)D;
            mgx[h] = lanes8_total(ax) / (double)D;
            float *dr = dxp + (r + h) * D;
            int64_t j = 0;
            for (; j < Dl; j += 8) {
                v8d gw = ld8(gr + j);
                if (wp)
                    gw = gw * ld8(wp + j);
                v8f o = __builtin_convertvector(rs[h] * (gw - mg[h] - xhat8(xr, j) * mgx[h]), v8f);
                if (add) {
                    v8f a8;
                    memcpy(&a8, dr + j, sizeof a8);
                    o = a8 + o;
                }
                memcpy(dr + j, &o, sizeof o);
            }
            for (; j < D; j++) {
                double gw = wp ? (double)gr[j] * wp[j] : (double)gr[j];
                const float o = (float)(rs[h] * (gw - mg[h] - xhat1(xr, j) * mgx[h]));
                dr[j] = add ? dr[j] + o : o;
            }
        }
    }
}

/* The two forms of chunk_bwd, each compiled per ISA. */
EW_CLONES static void norm_chunk_bwd(bool rms, int64_t r0, int64_t r1, int64_t D, const float *xp,
                                     const float *gp, const float *mp, const float *rp,
                                     const float *wp, float *dxp, bool add, double *cw, double *cb)
{
    chunk_bwd(rms, r0, r1, D, xp, NULL, gp, mp, rp, wp, dxp, add, cw, cb);
}
EW_CLONES static void norm_chunk_bwd_xhat(bool rms, int64_t r0, int64_t r1, int64_t D,
                                          const uint16_t *hp, const float *gp, const float *rp,
                                          const float *wp, float *dxp, bool add, double *cw,
                                          double *cb)
{
    chunk_bwd(rms, r0, r1, D, NULL, hp, gp, NULL, rp, wp, dxp, add, cw, cb);
}

static bool check_param(const char *op, const char *name, const cg_tensor *p, const cg_tensor *x,
                        int64_t D)
{
    if (p && (p->ndim != 1 || p->shape[0] != D)) {
        char b1[96], b2[96];
        cg_set_error("%s: %s must have shape [%lld] to match the last dim of x (shapes %s and %s)",
                     op, name, (long long)D, cg_shape_str(x, b1, sizeof b1),
                     cg_shape_str(p, b2, sizeof b2));
        return false;
    }
    return true;
}

static bool check_x(const char *op, const cg_tensor *x)
{
    if (x->ndim < 1) {
        cg_set_error("%s: x must have at least 1 dim (shape [])", op);
        return false;
    }
    return true;
}

/* Contiguous copy of an optional parameter (NULL stays NULL). */
static bool opt_contig(const cg_tensor *p, cg_tensor **out)
{
    *out = NULL;
    if (!p)
        return true;
    *out = cg_k_contiguous(p);
    return *out != NULL;
}

/* The addend of norm(x + y) must have x's shape (no broadcasting). */
static bool check_addend(const char *op, const cg_tensor *x, const cg_tensor *y)
{
    if (!y || cg_same_shape(x, y))
        return true;
    char b1[96], b2[96];
    cg_set_error("%s: x and y must have the same shape (shapes %s and %s)", op,
                 cg_shape_str(x, b1, sizeof b1), cg_shape_str(y, b2, sizeof b2));
    return false;
}

/* Rows [r0, r1) of x + y into s (row r0 first), one float addition each. */
EW_CLONES static void add_rows(int64_t r0, int64_t r1, int64_t D, const float *xp, const float *yp,
                               float *s)
{
    const float *xr = xp + r0 * D, *yr = yp + r0 * D;
    for (int64_t i = 0, n = (r1 - r0) * D; i < n; i++)
        s[i] = xr[i] + yr[i];
}

/* t = (x - m) * s, a row of x-hat in float (the product the output's
 * row starts with); t may be x. */
EW_CLONES static void xhat_row(int64_t D, const float *xr, float m, float s, float *t)
{
    for (int64_t j = 0; j < D; j++)
        t[j] = (xr[j] - m) * s;
}

/* y = x-hat * w + b from x-hat's bf16 rounding h, in float (w, b may be
 * NULL): bf16 training's output, which cg_k_norm_out_bf16 makes again from
 * the saved x-hat alone. One multiplication and one addition an element,
 * never fused, wherever it runs: the forward's copy and the backward's
 * are the same bits. */
EW_CLONES static void affine_row_xhat(int64_t D, const uint16_t *h, const float *w, const float *b,
                                      float *y)
{
    bf16_widen(D, h, y);
    if (w)
        for (int64_t j = 0; j < D; j++)
            y[j] = y[j] * w[j];
    if (b)
        for (int64_t j = 0; j < D; j++)
            y[j] = y[j] + b[j];
}

/* ------------------------------------------------------------ forward */
/* What norm_forward's rows read and write (NULL: not wanted) */
typedef struct {
    bool rms;
    int64_t D;
    float eps;
    const float *x, *a, *w, *b; /* x, the addend, the weight and bias */
    float *y, *mean, *rstd, *sum;
    uint16_t *y16, *xhat16; /* y and x-hat rounded to bf16 */
    /* D floats a thread: x + a when the sum is not kept, and x-hat */
    float *scratch;
} fwd_rows;

/* Rows [r0, r1) of norm_forward */
static void norm_fwd_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const fwd_rows *f = ctx;
    const int64_t D = f->D;
    float *row = f->scratch ? f->scratch + (int64_t)thread * D : NULL;
    for (int64_t r = r0; r < r1; r++) {
        float mf, rs;
        const float *xr = f->x + r * D;
        if (f->a) {
            float *s = f->sum ? f->sum + r * D : row;
            add_rows(r, r + 1, D, f->x, f->a, s);
            xr = s;
        }
        norm_row_fwd(f->rms, xr, f->xhat16 ? NULL : f->y + r * D, f->w, f->b, D, f->eps, &mf, &rs);
        if (f->xhat16) { /* x-hat rounded while in L1, and y from it */
            xhat_row(D, xr, mf, rs, row);
            cg_bf16_round_run(D, row, f->xhat16 + r * D);
            affine_row_xhat(D, f->xhat16 + r * D, f->w, f->b, f->y + r * D);
        }
        if (f->y16) /* the row rounded while in L1 */
            cg_bf16_round_run(D, f->y + r * D, f->y16 + r * D);
        if (f->mean)
            f->mean[r] = mf;
        f->rstd[r] = rs;
    }
}

/* norm(x) or, with an addend y, norm(x + y). */
static cg_tensor *norm_forward(const char *op, bool rms, const cg_tensor *x, const cg_tensor *a,
                               const cg_tensor *w, const cg_tensor *b, float eps, bool bf16_copy,
                               cg_tensor **mean_out, cg_tensor **rstd_out, cg_tensor **sum_out,
                               cg_tensor **xhat_out)
{
    if (mean_out)
        *mean_out = NULL;
    if (rstd_out)
        *rstd_out = NULL;
    if (sum_out)
        *sum_out = NULL;
    if (xhat_out)
        *xhat_out = NULL;
    if (!x)
        return cg_error_null_input(op), NULL;
    /* numbered as the caller counts them: the norm of x alone has no addend;
     * x and the addend of any float dtype (computed in float32, y rounded
     * to their promoted dtype), the parameters float32 */
    const cg_tensor *args[4] = {NULL, a ? NULL : w, a ? w : b, a ? b : NULL};
    if (!cg_f32_args(op, 4, args) || !check_x(op, x) || !check_addend(op, x, a))
        return NULL;
    cg_upcast u;
    if (!cg_upcast_begin(&u, op, 2, (const cg_tensor **[]){&x, &a}))
        return NULL;
    if (u.out != CG_F32) /* y itself is then the rounded tensor the products read */
        bf16_copy = false;
    int64_t D = x->shape[x->ndim - 1];
    if (!check_param(op, "weight", w, x, D) || !check_param(op, "bias", b, x, D))
        return NULL;
    int64_t n = cg_numel(x), rows = cg_numel_shape(x->ndim - 1, x->shape);
    const int nt = cg_get_num_threads();
    cg_tensor *xc = cg_k_contiguous(x), *ac = a ? cg_k_contiguous(a) : NULL, *wc = NULL, *bc = NULL;
    cg_tensor *y = NULL, *mt = NULL, *rt = NULL, *st = NULL, *yb = NULL, *ht = NULL;
    /* one row per thread for x + a (unless the sum is kept) and for x-hat */
    float *scratch = NULL;
    if (!xc || (a && !ac) || !opt_contig(w, &wc) || !opt_contig(b, &bc))
        goto fail;
    y = cg_empty(x->ndim, x->shape);
    mt = rms ? NULL : cg_empty(1, &rows);
    rt = cg_empty(1, &rows);
    st = a && sum_out ? cg_empty(x->ndim, x->shape) : NULL;
    yb = bf16_copy ? cg_empty_dtype(CG_BF16, x->ndim, x->shape) : NULL;
    ht = xhat_out ? cg_empty_dtype(CG_BF16, x->ndim, x->shape) : NULL;
    if (!y || (!rms && !mt) || !rt || (a && sum_out && !st) || (bf16_copy && !yb) ||
        (xhat_out && !ht))
        goto fail;
    if (((a && !st) || ht) &&
        !(scratch = cg_alloc((size_t)nt * (size_t)(D > 0 ? D : 1) * sizeof(float)))) {
        cg_set_error("%s: out of memory", op);
        goto fail;
    }
    const float *xp = cg_data(xc), *ap = ac ? cg_data(ac) : NULL;
    const float *wp = wc ? cg_data(wc) : NULL, *bp = bc ? cg_data(bc) : NULL;
    float *yp = cg_data(y), *mp = mt ? cg_data(mt) : NULL, *rp = cg_data(rt);
    float *sp = st ? cg_data(st) : NULL;
    uint16_t *yh = yb ? cg_data_bf16(yb) : NULL, *hh = ht ? cg_data_bf16(ht) : NULL;
    fwd_rows fr = {rms, D, eps, xp, ap, wp, bp, yp, mp, rp, sp, yh, hh, scratch};
    /* rows in chunks of CHUNK, in shares (core/shares.h) */
    cg_shares_run(rows, CHUNK, n > PAR_THRESHOLD && !omp_in_parallel() ? nt : 1, norm_fwd_rows,
                  &fr);
    cg_free(scratch);
    cg_release_all(4, xc, ac, wc, bc);
    if (!(y = cg_upcast_end(&u, y))) {
        cg_release_all(4, mt, rt, st, ht);
        return NULL;
    }
    if (yb)
        cg_k_bf16_operand_keep(y, yb);
    cg_release(yb);
    if (mean_out)
        *mean_out = mt;
    else
        cg_release(mt);
    if (rstd_out)
        *rstd_out = rt;
    else
        cg_release(rt);
    if (sum_out)
        *sum_out = st;
    if (xhat_out)
        *xhat_out = ht;
    return y;
fail:
    cg_free(scratch);
    cg_release_all(10, xc, ac, wc, bc, y, mt, rt, st, yb, ht);
    cg_upcast_undo(&u);
    return NULL;
}

cg_tensor *cg_k_layer_norm(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, float eps,
                           cg_tensor **mean, cg_tensor **rstd)
{
    return norm_forward("layer_norm", false, x, NULL, w, b, eps, false, mean, rstd, NULL, NULL);
}

cg_tensor *cg_k_rms_norm(const cg_tensor *x, const cg_tensor *w, float eps, cg_tensor **rstd)
{
    return norm_forward("rms_norm", true, x, NULL, w, NULL, eps, false, NULL, rstd, NULL, NULL);
}

cg_tensor *cg_k_add_layer_norm(const cg_tensor *x, const cg_tensor *y, const cg_tensor *w,
                               const cg_tensor *b, float eps, cg_tensor **mean, cg_tensor **rstd,
                               cg_tensor **sum)
{
    if (!y) {
        cg_error_null_input("cg_k_add_layer_norm");
        return NULL;
    }
    return norm_forward("add_layer_norm", false, x, y, w, b, eps, false, mean, rstd, sum, NULL);
}

cg_tensor *cg_k_add_rms_norm(const cg_tensor *x, const cg_tensor *y, const cg_tensor *w, float eps,
                             cg_tensor **rstd, cg_tensor **sum)
{
    if (!y) {
        cg_error_null_input("cg_k_add_rms_norm");
        return NULL;
    }
    return norm_forward("add_rms_norm", true, x, y, w, NULL, eps, false, NULL, rstd, sum, NULL);
}

cg_tensor *cg_k_norm(bool rms, const cg_tensor *x, const cg_tensor *y, const cg_tensor *w,
                     const cg_tensor *b, float eps, bool bf16_copy, cg_tensor **mean,
                     cg_tensor **rstd, cg_tensor **sum, cg_tensor **xhat)
{
    const char *op = rms ? (y ? "add_rms_norm" : "rms_norm") : y ? "add_layer_norm" : "layer_norm";
    if (rms && (b || mean)) {
        cg_set_error("%s: RMS norm has no bias and no mean", op);
        return NULL;
    }
    return norm_forward(op, rms, x, y, w, b, eps, bf16_copy, mean, rstd, y ? sum : NULL, xhat);
}

/* What cg_k_norm_out_bf16's rows read and write */
typedef struct {
    int64_t D;
    const uint16_t *h;
    const float *w, *b;
    uint16_t *y16;
    float *scratch; /* D floats a thread */
} out16_rows;

static void norm_out16_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const out16_rows *o = ctx;
    float *row = o->scratch + (int64_t)thread * o->D;
    for (int64_t r = r0; r < r1; r++) {
        affine_row_xhat(o->D, o->h + r * o->D, o->w, o->b, row);
        cg_bf16_round_run(o->D, row, o->y16 + r * o->D);
    }
}

cg_tensor *cg_k_norm_out_bf16(const cg_tensor *xhat, const cg_tensor *w, const cg_tensor *b)
{
    const char *op = "norm_out_bf16";
    if (!xhat)
        return cg_error_null_input(op), NULL;
    if (!cg_check_dtype(op, "xhat", xhat, CG_BF16) ||
        !cg_f32_args(op, 2, (const cg_tensor *[]){w, b}) || !check_x(op, xhat))
        return NULL;
    const int64_t D = xhat->shape[xhat->ndim - 1];
    if (!check_param(op, "weight", w, xhat, D) || !check_param(op, "bias", b, xhat, D))
        return NULL;
    const int64_t n = cg_numel(xhat), rows = cg_numel_shape(xhat->ndim - 1, xhat->shape);
    const int nt = cg_get_num_threads();
    cg_tensor *hc = cg_k_contiguous(xhat), *wc = NULL, *bc = NULL;
    cg_tensor *y16 = cg_empty_dtype(CG_BF16, xhat->ndim, xhat->shape);
    float *scratch = NULL;
    if (!hc || !y16 || !opt_contig(w, &wc) || !opt_contig(b, &bc))
        goto fail;
    if (!(scratch = cg_alloc((size_t)nt * (size_t)(D > 0 ? D : 1) * sizeof(float)))) {
        cg_set_error("%s: out of memory", op);
        goto fail;
    }
    out16_rows o = {D,
                    cg_data_bf16(hc),
                    wc ? cg_data(wc) : NULL,
                    bc ? cg_data(bc) : NULL,
                    cg_data_bf16(y16),
                    scratch};
    cg_shares_run(rows, CHUNK, n > PAR_THRESHOLD && !omp_in_parallel() ? nt : 1, norm_out16_rows,
                  &o);
    cg_free(scratch);
    cg_release_all(3, hc, wc, bc);
    return y16;
fail:
    cg_free(scratch);
    cg_release_all(4, hc, wc, bc, y16);
    return NULL;
}

/* ----------------------------------------------------------- backward */
/* What norm_backward's chunks read and write: dx (added into it with add),
 * and each chunk's partial sums of dw and db (Dp doubles a chunk; NULL: not
 * wanted) */
typedef struct {
    bool rms, add;
    int64_t D, Dp;
    const float *x;
    const uint16_t *xhat; /* instead of x (and the mean) */
    const float *g, *mean, *rstd, *w;
    float *dx;
    double *pw, *pb;
} bwd_rows;

/* Rows [r0, r1): one chunk of CHUNK rows (the last may be short) */
static void norm_bwd_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const bwd_rows *b = ctx;
    const int64_t c = r0 / CHUNK;
    double *cw = b->pw ? b->pw + c * b->Dp : NULL, *cb = b->pb ? b->pb + c * b->Dp : NULL;
    if (b->xhat)
        norm_chunk_bwd_xhat(b->rms, r0, r1, b->D, b->xhat, b->g, b->rstd, b->w, b->dx, b->add, cw,
                            cb);
    else
        norm_chunk_bwd(b->rms, r0, r1, b->D, b->x, b->g, b->mean, b->rstd, b->w, b->dx, b->add, cw,
                       cb);
}

/* The chunks' partial sums of dw and db added in chunk order */
typedef struct {
    int64_t nchunks, Dp;
    const double *pw, *pb;
    float *dw, *db;
} partial_sums;

/* Columns [j0, j1): each column's chunks summed in chunk order from 0,
 * a block of columns at a time across the chunks (a column at a time down
 * its chunks was a strided scalar chain, 0.4 ms of a seq2seq base step) */
static void sum_partials(int64_t j0, int64_t j1, int thread, const void *ctx)
{
    enum { W = 64 };
    const partial_sums *p = ctx;
    for (int64_t b0 = j0; b0 < j1; b0 += W) {
        const int64_t w = j1 - b0 < W ? j1 - b0 : W;
        double sw[W] = {0}, sb[W] = {0};
        for (int64_t c = 0; c < p->nchunks; c++) {
            if (p->pw)
                for (int64_t j = 0; j < w; j++)
                    sw[j] += p->pw[c * p->Dp + b0 + j];
            if (p->pb)
                for (int64_t j = 0; j < w; j++)
                    sb[j] += p->pb[c * p->Dp + b0 + j];
        }
        for (int64_t j = 0; j < w; j++) {
            if (p->dw)
                p->dw[b0 + j] = (float)sw[j];
            if (p->db)
                p->db[b0 + j] = (float)sb[j];
        }
    }
}

/* xhat = (x - mean) * rstd (mean = 0 for RMS norm), gw = g * w:
 *   layer norm: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
 *   rms norm:   dx = rstd * (gw - xhat * mean(gw * xhat))
 *   dw = sum_rows g * xhat, db = sum_rows g.
 * x is the norm's input, or with hat its x-hat in bf16 (no mean then).
 * With acc, dx is added into it as each row's dx is written. */
static bool norm_backward(const char *op, bool rms, bool hat, const cg_tensor *x,
                          const cg_tensor *w, const cg_tensor *mean, const cg_tensor *rstd,
                          const cg_tensor *g, cg_tensor *acc, cg_tensor **dx, cg_tensor **dw,
                          cg_tensor **db)
{
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    if (db)
        *db = NULL;
    if (!x || !rstd || !g || (!rms && !hat && !mean)) {
        cg_error_null_input(op);
        return false;
    }
    /* x-hat in bf16, or x of any float dtype (dx then in its dtype unless
     * added into acc); g of any float dtype; the rest float32 */
    const bool dtypes = hat ? cg_check_dtype(op, "xhat", x, CG_BF16) &&
                                  cg_f32_args(op, 3, (const cg_tensor *[]){w, NULL, rstd})
                            : cg_f32_args(op, 4, (const cg_tensor *[]){NULL, w, NULL, rstd});
    if (!dtypes || (!hat && !cg_dtype_is_float(x->dtype) && !cg_upcast_refuse(op, 0, x)) ||
        (!cg_dtype_is_float(g->dtype) && !cg_upcast_refuse(op, hat ? 1 : 2, g)) || !check_x(op, x))
        return false;
    char b1[96], b2[96];
    if (!cg_same_shape(x, g)) {
        cg_set_error("%s: x and gradient shapes differ (shapes %s and %s)", op,
                     cg_shape_str(x, b1, sizeof b1), cg_shape_str(g, b2, sizeof b2));
        return false;
    }
    int64_t D = x->shape[x->ndim - 1];
    if (!check_param(op, "weight", w, x, D) || !cg_check_grad_acc(op, acc, x, dx != NULL))
        return false;
    int64_t n = cg_numel(x), rows = cg_numel_shape(x->ndim - 1, x->shape);
    if (cg_numel(rstd) != rows || (mean && !rms && cg_numel(mean) != rows)) {
        cg_set_error("%s: saved statistics must have %lld elements (shapes %s and %s)", op,
                     (long long)rows, cg_shape_str(x, b1, sizeof b1),
                     cg_shape_str(cg_numel(rstd) != rows ? rstd : mean, b2, sizeof b2));
        return false;
    }
    bool ok = false;
    cg_tensor *xc = hat ? cg_k_contiguous(x) : cg_upcast_dense(x, false),
              *gc = cg_upcast_dense(g, false);
    cg_tensor *wc = NULL, *mc = NULL, *rc = cg_k_contiguous(rstd);
    cg_tensor *dxt = NULL, *dwt = NULL, *dbt = NULL;
    int64_t nchunks = (rows + CHUNK - 1) / CHUNK;
    int64_t Dp = D > 0 ? D : 1;
    bool want_w = dw != NULL, want_b = db != NULL && !rms;
    double *pw = NULL, *pb = NULL;
    const int nt = cg_get_num_threads();
    if (!xc || !gc || !rc || !opt_contig(w, &wc) || !opt_contig(rms || hat ? NULL : mean, &mc))
        goto done;
    if (dx && !(dxt = acc ? cg_retain(acc) : cg_empty(x->ndim, x->shape)))
        goto done;
    if (want_w && !(dwt = cg_empty(1, &D)))
        goto done;
    if (want_b && !(dbt = cg_empty(1, &D)))
        goto done;
    if (want_w && !(pw = calloc((size_t)(nchunks ? nchunks : 1) * (size_t)Dp, sizeof(double))))
        goto oom;
    if (want_b && !(pb = calloc((size_t)(nchunks ? nchunks : 1) * (size_t)Dp, sizeof(double))))
        goto oom;
    const float *xp = hat ? NULL : cg_data(xc);
    const uint16_t *hp = hat ? cg_data_bf16(xc) : NULL;
    const float *gp = cg_data(gc), *rp = cg_data(rc);
    const float *mp = mc ? cg_data(mc) : NULL, *wp = wc ? cg_data(wc) : NULL;
    float *dxp = dxt ? cg_data(dxt) : NULL;
    bwd_rows br = {rms, acc != NULL, D, Dp, xp, hp, gp, mp, rp, wp, dxp, pw, pb};
    cg_shares_run(rows, CHUNK, n > PAR_THRESHOLD && !omp_in_parallel() ? nt : 1, norm_bwd_rows,
                  &br);
    if (acc) /* dx added into it in place */
        cg_tensor_modified(acc);
    /* Sum the chunk partials in chunk order, parallel over columns. */
    if (dwt || dbt) {
        partial_sums ps = {
            nchunks, Dp, pw, pb, dwt ? cg_data(dwt) : NULL, dbt ? cg_data(dbt) : NULL};
        cg_shares_run(D, cg_shares_rows(nchunks), cg_shares_team(nchunks * D > PAR_THRESHOLD),
                      sum_partials, &ps);
    }
    /* a reduced-precision x's dx rounded to its dtype (not one added into acc) */
    ok = !dxt || acc || hat || (dxt = cg_upcast_round(dxt, x->dtype));
    goto done;
oom:
    cg_set_error("%s: out of memory for %lld x %lld partial sums", op, (long long)nchunks,
                 (long long)D);
done:
    free(pw);
    free(pb);
    cg_release_all(5, xc, gc, wc, mc, rc);
    if (!ok) {
        cg_release_all(3, dxt, dwt, dbt);
        return false;
    }
    if (dx)
        *dx = dxt;
    if (dw)
        *dw = dwt;
    if (db)
        *db = rms ? NULL : dbt;
    return true;
}

bool cg_k_layer_norm_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *mean,
                              const cg_tensor *rstd, const cg_tensor *g, cg_tensor *acc,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    return norm_backward("layer_norm_backward", false, false, x, w, mean, rstd, g, acc, dx, dw, db);
}

bool cg_k_rms_norm_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *rstd,
                            const cg_tensor *g, cg_tensor *acc, cg_tensor **dx, cg_tensor **dw)
{
    return norm_backward("rms_norm_backward", true, false, x, w, NULL, rstd, g, acc, dx, dw, NULL);
}

bool cg_k_norm_backward_xhat(bool rms, const cg_tensor *xhat, const cg_tensor *w,
                             const cg_tensor *rstd, const cg_tensor *g, cg_tensor *acc,
                             cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (rms && db)
        *db = NULL;
    return norm_backward(rms ? "rms_norm_backward" : "layer_norm_backward", rms, true, xhat, w,
                         NULL, rstd, g, acc, dx, dw, rms ? NULL : db);
}
