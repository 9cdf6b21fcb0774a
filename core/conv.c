/* cgrad core: convolution, PyTorch's F.conv1d / F.conv2d with zero padding
 * (declared in core/ops.h, "Convolution"), and its backward.
 *
 * A 1-d convolution is a 2-d one of height 1. Each group is a product:
 * x unfolded (im2col) into cols [N P, Cg KH KW] (a row an output
 * position, its columns the group's channels times the kernel's taps,
 * zero where a tap falls in the padding) times the group's weight rows
 * [Og, Cg KH KW] by cg_k_linear, with the bias; the rows [N P, Og] are
 * written out into the output's [N, O, P]. The backward gathers g's group
 * into [N P, Og], takes cg_k_linear_backward's dcols, dW and db, and folds
 * dcols back into dx (col2im): one input plane (n, c) a task, summed over
 * the output positions then the taps in index order, so the bits do not
 * depend on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"

#define PAR_THRESHOLD 32768

typedef struct {
    bool batched;
    int64_t N, C, O, G, Cg, Og;
    int64_t H, W, OH, OW, KH, KW;
    int64_t sh, sw, dh, dw, ph, pw; /* stride, dilation, padding before */
    int64_t P, Kp, CK;              /* output positions, taps, cols' width */
} geom;

static const char *op_name(int nd) { return nd == 1 ? "conv1d" : "conv2d"; }

/* the padding before and after of a spatial dim (kernel k, dilation d) */
static void pads(const cg_conv_cfg *c, int i, int64_t k, int64_t d, int64_t *lo, int64_t *hi)
{
    if (c->pad == CG_CONV_SAME) {
        *lo = d * (k - 1) / 2;
        *hi = d * (k - 1) - *lo;
    } else {
        *lo = *hi = c->pad == CG_CONV_VALID ? 0 : c->padding[i];
    }
}

bool cg_conv_cfg_check(const char *op, int nd, const cg_conv_cfg *c)
{
    if (!c)
        return cg_error_null_arg(op, "cfg");
    if (nd != 1 && nd != 2) {
        cg_set_error("%s: %d spatial dims, expected 1 or 2", op, nd);
        return false;
    }
    if (c->groups < 1) {
        cg_set_error("%s: groups must be positive (got %lld)", op, (long long)c->groups);
        return false;
    }
    if (c->pad != CG_CONV_PAD_NUMBERS && c->pad != CG_CONV_SAME && c->pad != CG_CONV_VALID) {
        cg_set_error("%s: padding mode %d is not one of numbers, 'same', 'valid'", op, (int)c->pad);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        const char *bad = c->stride[i] < 1                                     ? "stride"
                          : c->dilation[i] < 1                                 ? "dilation"
                          : c->padding[i] < 0 && c->pad == CG_CONV_PAD_NUMBERS ? "padding"
                                                                               : NULL;
        if (bad) {
            const int64_t v = !strcmp(bad, "stride")     ? c->stride[i]
                              : !strcmp(bad, "dilation") ? c->dilation[i]
                                                         : c->padding[i];
            cg_set_error("%s: %s must be %s (got %lld in spatial dim %d)", op, bad,
                         strcmp(bad, "padding") ? "positive" : "non-negative", (long long)v, i);
            return false;
        }
        if (c->pad == CG_CONV_SAME && c->stride[i] != 1) {
            cg_set_error("%s: padding='same' needs stride 1 (got %lld in spatial dim %d)", op,
                         (long long)c->stride[i], i);
            return false;
        }
    }
    return true;
}

/* dtypes and ranks of x, w, b; false + error */
static bool check_args(const char *op, int nd, const cg_tensor *x, const cg_tensor *w,
                       const cg_tensor *b)
{
    char s1[96], s2[96];
    if (x->dtype != CG_F32 && x->dtype != CG_BF16) {
        cg_set_error("%s: input is %s, expected float32 or bfloat16", op, cg_dtype_name(x->dtype));
        return false;
    }
    const cg_tensor *wb[2] = {w, b};
    for (int i = 0; i < 2; i++)
        if (wb[i] && wb[i]->dtype != CG_F32) {
            cg_set_error("%s: %s is %s, expected float32%s", op, i ? "bias" : "weight",
                         cg_dtype_name(wb[i]->dtype),
                         cg_dtype_is_float(wb[i]->dtype) ? " (convert with cg_to)" : "");
            return false;
        }
    if (x->ndim != nd + 1 && x->ndim != nd + 2) {
        cg_set_error("%s: input %s has %d dims, expected %d (unbatched) or %d (batched)", op,
                     cg_shape_str(x, s1, sizeof s1), x->ndim, nd + 1, nd + 2);
        return false;
    }
    if (w->ndim != nd + 2 || cg_numel(w) == 0) {
        cg_set_error("%s: weight %s must be [out, in / groups, %s] with no empty dim", op,
                     cg_shape_str(w, s1, sizeof s1), nd == 1 ? "K" : "KH, KW");
        return false;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        cg_set_error("%s: bias %s, weight %s: the bias must be [%lld]", op,
                     cg_shape_str(b, s1, sizeof s1), cg_shape_str(w, s2, sizeof s2),
                     (long long)w->shape[0]);
        return false;
    }
    return true;
}

/* channels against the weight and groups; false + error */
static bool check_channels(const char *op, const cg_tensor *x, const cg_tensor *w, geom *g)
{
    char s1[96], s2[96];
    if (g->C % g->G || g->O % g->G) {
        cg_set_error("%s: groups %lld must divide the input channels (%lld) and the output "
                     "channels (%lld)",
                     op, (long long)g->G, (long long)g->C, (long long)g->O);
        return false;
    }
    if (w->shape[1] != g->C / g->G || g->C == 0) {
        cg_set_error("%s: input %s has %lld channels, weight %s with groups %lld expects %lld", op,
                     cg_shape_str(x, s1, sizeof s1), (long long)g->C,
                     cg_shape_str(w, s2, sizeof s2), (long long)g->G,
                     (long long)(w->shape[1] * g->G));
        return false;
    }
    return true;
}

/* the output length of spatial dim i (input n, kernel k); 0 + error when
 * the dilated kernel is larger than the padded input */
static int64_t out_len(const char *op, int i, int64_t n, int64_t k, int64_t s, int64_t d,
                       int64_t lo, int64_t hi)
{
    const int64_t span = d * (k - 1) + 1, padded = n + lo + hi;
    if (span > padded) {
        cg_set_error("%s: kernel %lld (dilated %lld) is larger than the padded input %lld in "
                     "spatial dim %d",
                     op, (long long)k, (long long)span, (long long)padded, i);
        return 0;
    }
    return (padded - span) / s + 1;
}

static bool geometry(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                     const cg_conv_cfg *cfg, geom *g)
{
    const char *op = nd == 1 || nd == 2 ? op_name(nd) : "conv";
    const cg_conv_cfg c = cfg ? *cfg : CG_CONV_DEFAULT;
    if (!cg_conv_cfg_check(op, nd, &c) || !check_args(op, nd, x, w, b))
        return false;
    *g = (geom){.batched = x->ndim == nd + 2, .G = c.groups, .O = w->shape[0]};
    const int s0 = g->batched ? 1 : 0; /* x's channel dim */
    g->N = g->batched ? x->shape[0] : 1;
    g->C = x->shape[s0];
    if (!check_channels(op, x, w, g))
        return false;
    g->Cg = g->C / g->G;
    g->Og = g->O / g->G;
    int64_t in[2] = {1, 1}, k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, lo[2] = {0, 0}, o[2];
    for (int i = 0; i < nd; i++) {
        const int j = 2 - nd + i; /* nd 1: the width */
        int64_t hi;
        in[j] = x->shape[s0 + 1 + i];
        k[j] = w->shape[2 + i];
        s[j] = c.stride[i];
        d[j] = c.dilation[i];
        pads(&c, i, k[j], d[j], &lo[j], &hi);
        if (!(o[j] = out_len(op, i, in[j], k[j], s[j], d[j], lo[j], hi)))
            return false;
    }
    if (nd == 1)
        o[0] = 1;
    g->H = in[0], g->W = in[1], g->KH = k[0], g->KW = k[1], g->OH = o[0], g->OW = o[1];
    g->sh = s[0], g->sw = s[1], g->dh = d[0], g->dw = d[1], g->ph = lo[0], g->pw = lo[1];
    g->P = g->OH * g->OW;
    g->Kp = g->KH * g->KW;
    g->CK = g->Cg * g->Kp;
    return true;
}

/* x as float32 with its strides (n, c, h, w) in elements, a new reference */
static cg_tensor *x_f32(const cg_tensor *x, const geom *g, int64_t xs[4])
{
    cg_tensor *xf = x->dtype == CG_F32 ? cg_retain((cg_tensor *)x) : cg_k_to(x, CG_F32);
    if (!xf)
        return NULL;
    const int s0 = g->batched ? 1 : 0, nd = xf->ndim - s0 - 1;
    xs[0] = g->batched ? xf->strides[0] : 0;
    xs[1] = xf->strides[s0];
    xs[2] = nd == 2 ? xf->strides[s0 + 1] : 0;
    xs[3] = xf->strides[xf->ndim - 1];
    return xf;
}

/* What a chunk of the loops below reads: the geometry, the group's first
 * channel (of x for im2col and col2im, of the output for the moves), and
 * src/dst: x (strides xs) into cols, dcols into dx, or the [N P, Og] rows
 * to (to_nop) or from the output's [N, O, P] */
typedef struct {
    const geom *g;
    float *src, *dst;
    int64_t xs[4], first;
    bool to_nop;
} job;

/* fn over n items in chunks of grain, threaded past PAR_THRESHOLD work */
static void run(int64_t n, int64_t grain, int64_t work, cg_chunk_fn fn, const job *j)
{
    cg_shares_run(n, grain, cg_shares_team(work > PAR_THRESHOLD), fn, j);
}

/* ------------------------------------------------------------- im2col */
static void unfold_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const job *j = ctx;
    const geom *g = j->g;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r / g->P, p = r % g->P, oh = p / g->OW, ow = p % g->OW;
        float *row = j->dst + r * g->CK;
        for (int64_t c = 0; c < g->Cg; c++) {
            const float *xc = j->src + n * j->xs[0] + (j->first + c) * j->xs[1];
            for (int64_t kh = 0; kh < g->KH; kh++, row += g->KW) {
                const int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                if (ih < 0 || ih >= g->H) {
                    memset(row, 0, sizeof(float) * (size_t)g->KW);
                    continue;
                }
                for (int64_t kw = 0; kw < g->KW; kw++) {
                    const int64_t iw = ow * g->sw - g->pw + kw * g->dw;
                    row[kw] = iw < 0 || iw >= g->W ? 0.0f : xc[ih * j->xs[2] + iw * j->xs[3]];
                }
            }
        }
    }
}

/* group gi's cols [N P, CK] of x (float32 xf with strides xs) */
static cg_tensor *unfold(const geom *g, const cg_tensor *xf, const int64_t xs[4], int64_t gi)
{
    cg_tensor *cols = cg_empty(CG_SHAPE(g->N * g->P, g->CK));
    if (!cols)
        return NULL;
    const job j = {g, cg_data(xf), cg_data(cols), {xs[0], xs[1], xs[2], xs[3]}, gi * g->Cg, false};
    const int64_t rows = g->N * g->P;
    run(rows, cg_shares_rows(g->CK), rows * g->CK, unfold_rows, &j);
    return cols;
}

/* ------------------------------------------------------------- col2im */
/* planes (n, c) of the group: each zeroed, then every output position's
 * taps added in index order */
static void fold_planes(int64_t q0, int64_t q1, int thread, const void *ctx)
{
    const job *j = ctx;
    const geom *g = j->g;
    for (int64_t q = q0; q < q1; q++) {
        const int64_t n = q / g->Cg, c = q % g->Cg, HW = g->H * g->W;
        float *plane = j->dst + (n * g->C + j->first + c) * HW;
        memset(plane, 0, sizeof(float) * (size_t)HW);
        for (int64_t p = 0; p < g->P; p++) {
            const int64_t oh = p / g->OW, ow = p % g->OW;
            const float *taps = j->src + (n * g->P + p) * g->CK + c * g->Kp;
            for (int64_t kh = 0; kh < g->KH; kh++) {
                const int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                if (ih < 0 || ih >= g->H)
                    continue;
                for (int64_t kw = 0; kw < g->KW; kw++) {
                    const int64_t iw = ow * g->sw - g->pw + kw * g->dw;
                    if (iw >= 0 && iw < g->W)
                        plane[ih * g->W + iw] += taps[kh * g->KW + kw];
                }
            }
        }
    }
}

static void fold(const geom *g, const cg_tensor *dcols, float *dx, int64_t gi)
{
    const job j = {g, cg_data(dcols), dx, {0}, gi * g->Cg, false};
    run(g->N * g->Cg, 1, g->N * g->Cg * g->P * g->Kp, fold_planes, &j);
}

/* ------------------------------------------- [N P, Og] <-> [N, O, P] */
static void move_lines(int64_t l0, int64_t l1, int thread, const void *ctx)
{
    const job *j = ctx;
    const geom *g = j->g;
    for (int64_t l = l0; l < l1; l++) {
        const int64_t n = l / g->Og, o = l % g->Og;
        float *line = j->dst + (n * g->O + j->first + o) * g->P;
        float *col = j->src + n * g->P * g->Og + o;
        if (j->to_nop)
            for (int64_t p = 0; p < g->P; p++)
                line[p] = col[p * g->Og];
        else
            for (int64_t p = 0; p < g->P; p++)
                col[p * g->Og] = line[p];
    }
}

/* group gi's rows [N P, Og] to (to_nop) or from the [N, O, P] nop */
static void move(const geom *g, float *rows, float *nop, int64_t gi, bool to_nop)
{
    const job j = {g, rows, nop, {0}, gi * g->Og, to_nop};
    run(g->N * g->Og, cg_shares_rows(g->P), g->N * g->Og * g->P, move_lines, &j);
}

/* ---------------------------------------------------------- forward */
/* the output's shape (x's batchedness): nd + 1 or nd + 2 dims */
static int out_shape(int nd, const geom *g, int64_t *shape)
{
    int k = 0;
    if (g->batched)
        shape[k++] = g->N;
    shape[k++] = g->O;
    if (nd == 2)
        shape[k++] = g->OH;
    shape[k++] = g->OW;
    return k;
}

/* group gi's weight rows [Og, CK] of the contiguous wc, and bias [Og] */
static cg_tensor *w_rows(const geom *g, const cg_tensor *wc, int64_t gi)
{
    return cg_view_as_strided(wc, 2, (const int64_t[]){g->Og, g->CK}, (const int64_t[]){g->CK, 1},
                              wc->offset + gi * g->Og * g->CK);
}
static cg_tensor *b_rows(const geom *g, const cg_tensor *b, int64_t gi)
{
    return cg_view_as_strided(b, 1, &g->Og, &b->strides[0], b->offset + gi * g->Og * b->strides[0]);
}

/* group gi of the forward into out's data */
static bool forward_group(const geom *g, const cg_tensor *xf, const int64_t xs[4],
                          const cg_tensor *wc, const cg_tensor *b, int64_t gi, float *out)
{
    cg_tensor *cols = unfold(g, xf, xs, gi), *wg = cols ? w_rows(g, wc, gi) : NULL;
    cg_tensor *bg = wg && b ? b_rows(g, b, gi) : NULL;
    cg_tensor *y = wg && (bg || !b) ? cg_k_linear(cols, wg, bg) : NULL;
    if (y)
        move(g, cg_data(y), out, gi, true);
    cg_release_all(4, cols, wg, bg, y);
    return y != NULL;
}

cg_tensor *cg_k_conv(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                     const cg_conv_cfg *cfg)
{
    if (!x || !w)
        return cg_error_null_input("cg_k_conv"), NULL;
    geom g;
    if (!geometry(nd, x, w, b, cfg, &g))
        return NULL;
    int64_t shape[4], xs[4];
    cg_tensor *out = cg_empty(out_shape(nd, &g, shape), shape);
    if (!out || g.N == 0)
        return out;
    cg_tensor *xf = x_f32(x, &g, xs), *wc = xf ? cg_k_contiguous(w) : NULL;
    bool ok = wc != NULL;
    for (int64_t gi = 0; ok && gi < g.G; gi++)
        ok = forward_group(&g, xf, xs, wc, b, gi, cg_data(out));
    cg_release_all(2, xf, wc);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ---------------------------------------------------------- backward */
typedef struct {
    const geom *g;
    const cg_tensor *xf, *wc;
    int64_t xs[4];
    float *gc;               /* g contiguous [N, O, P] */
    cg_tensor *dx, *dw, *db; /* made by the caller where asked for */
} back_job;

/* group gi's gradients into the job's dx, dw and db */
static bool backward_group(const back_job *j, int64_t gi)
{
    const geom *g = j->g;
    const int64_t rows = g->N * g->P;
    cg_tensor *gg = cg_empty(CG_SHAPE(rows, g->Og)), *wg = gg ? w_rows(g, j->wc, gi) : NULL;
    cg_tensor *cols = NULL, *dcols = NULL, *dwg = NULL, *dbg = NULL;
    if (wg) {
        move(g, cg_data(gg), j->gc, gi, false);
        /* only dW reads the cols: otherwise a zero-stride stand-in of their shape */
        cols = j->dw ? unfold(g, j->xf, j->xs, gi)
                     : cg_view_as_strided(gg, 2, (const int64_t[]){rows, g->CK},
                                          (const int64_t[]){0, 0}, gg->offset);
    }
    bool ok = cols && cg_k_linear_backward(cols, wg, gg, NULL, j->dx ? &dcols : NULL,
                                           j->dw ? &dwg : NULL, j->db ? &dbg : NULL);
    if (ok && j->dx)
        fold(g, dcols, cg_data(j->dx), gi);
    if (ok && j->dw)
        memcpy(cg_data(j->dw) + gi * g->Og * g->CK, cg_data(dwg),
               sizeof(float) * (size_t)(g->Og * g->CK));
    if (ok && j->db)
        memcpy(cg_data(j->db) + gi * g->Og, cg_data(dbg), sizeof(float) * (size_t)g->Og);
    cg_release_all(6, gg, wg, cols, dcols, dwg, dbg);
    return ok;
}

static bool check_grad(int nd, const geom *g, const cg_tensor *grad)
{
    int64_t shape[4];
    const int k = out_shape(nd, g, shape);
    if (grad->ndim == k && !memcmp(grad->shape, shape, sizeof(int64_t) * (size_t)k) &&
        grad->dtype == CG_F32)
        return true;
    char s1[96], s2[96];
    cg_set_error("%s backward: gradient %s %s, expected float32 %s", op_name(nd),
                 cg_dtype_name(grad->dtype), cg_shape_str(grad, s1, sizeof s1),
                 cg_shape_str_n(k, shape, s2, sizeof s2));
    return false;
}

bool cg_k_conv_backward(int nd, const cg_tensor *x, const cg_tensor *w, const cg_conv_cfg *cfg,
                        const cg_tensor *g, cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    if (db)
        *db = NULL;
    if (!x || !w || !g)
        return cg_error_null_input("cg_k_conv_backward");
    geom ge;
    if (!geometry(nd, x, w, NULL, cfg, &ge) || !check_grad(nd, &ge, g))
        return false;
    back_job j = {.g = &ge};
    j.dx = dx ? cg_empty(x->ndim, x->shape) : NULL;
    j.dw = dw ? cg_zeros(w->ndim, w->shape) : NULL;
    j.db = db ? cg_zeros(1, w->shape) : NULL;
    bool ok = (!dx || j.dx) && (!dw || j.dw) && (!db || j.db);
    cg_tensor *gc = NULL;
    if (ok && ge.N > 0) {
        j.xf = x_f32(x, &ge, j.xs);
        j.wc = j.xf ? cg_k_contiguous(w) : NULL;
        gc = j.wc ? cg_k_contiguous(g) : NULL;
        j.gc = gc ? cg_data(gc) : NULL;
        ok = gc != NULL;
        for (int64_t gi = 0; ok && gi < ge.G; gi++)
            ok = backward_group(&j, gi);
        cg_release_all(2, (cg_tensor *)j.xf, (cg_tensor *)j.wc);
    }
    cg_release(gc);
    if (!ok) {
        cg_release_all(3, j.dx, j.dw, j.db);
        return false;
    }
    if (dx)
        *dx = j.dx;
    if (dw)
        *dw = j.dw;
    if (db)
        *db = j.db;
    return true;
}
