/* cgrad core: convolution, PyTorch's F.conv1d / F.conv2d / F.conv3d with
 * zero padding (declared in core/ops.h, "Convolution"), and its backward.
 *
 * Every convolution is a 3-d one: a 2-d one of depth 1, a 1-d one of depth
 * and height 1 (the loops below run once over a dim of 1, the same
 * copies and sums in the same order). Each sample's group is a
 * product on the GEMM (core/gemm.h, in the thread's matrix precision):
 * the group's weight rows W [Og, CK] (CK = Cg KD KH KW) times the sample's
 * cols [CK, P] (im2col: a row a channel's tap, a column an output
 * position, zero where the tap falls in the padding; each row copied as
 * runs between bounds found once a tap), written straight into the
 * output's [Og, P] set to the bias. A 1x1 kernel at stride 1 without
 * padding reads x itself as its cols. The backward: dW = the sum of g
 * [Og, P] cols^T over the samples, dcols = W^T g folded back into dx
 * (col2im: an input plane at a time, the taps in index order), db the sums
 * of g's rows in double. Threads take whole samples (each its products on
 * one thread, its cols its own); dW is summed in chunks of samples, at
 * most DW_PARTS, each in sample order, then the chunks' sums in order,
 * the chunks set by the batch: the bits do not depend on the thread
 * count. A batch of one threads the loops and the products inside. */
#include <stdlib.h>
#include <string.h>

#include "core/conv_impl.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/shares.h"

#define PAR_THRESHOLD 32768

typedef cg_conv_geom geom;

static const char *op_name(int nd) { return nd == 1 ? "conv1d" : nd == 2 ? "conv2d" : "conv3d"; }

void cg_conv_padding(const cg_conv_cfg *c, int i, int64_t k, int64_t *lo, int64_t *hi)
{
    const int64_t d = c->dilation[i];
    if (c->pad == CG_CONV_SAME) {
        *lo = d * (k - 1) / 2;
        *hi = d * (k - 1) - *lo;
    } else {
        *lo = *hi = c->pad == CG_CONV_VALID ? 0 : c->padding[i];
    }
}

bool cg_conv_cfg_common(const char *op, int nd, const cg_conv_cfg *c)
{
    if (!c)
        return cg_error_null_arg(op, "cfg");
    if (nd < 1 || nd > 3) {
        cg_set_error("%s: %d spatial dims, expected 1, 2 or 3", op, nd);
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
    if ((unsigned)c->padding_mode > CG_PAD_CIRCULAR) {
        cg_set_error(
            "%s: padding_mode %d is not one of zeros, reflect, replicate, circular (0 to 3)", op,
            (int)c->padding_mode);
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

bool cg_conv_cfg_check(const char *op, int nd, const cg_conv_cfg *c)
{
    if (!cg_conv_cfg_common(op, nd, c))
        return false;
    for (int i = 0; i < nd; i++)
        if (c->output_padding[i]) {
            cg_set_error("%s: output_padding is the transposed convolution's (got %lld in "
                         "spatial dim %d)",
                         op, (long long)c->output_padding[i], i);
            return false;
        }
    return true;
}

bool cg_conv_transpose_cfg_check(const char *op, int nd, const cg_conv_cfg *c)
{
    if (!cg_conv_cfg_common(op, nd, c))
        return false;
    if (c->pad != CG_CONV_PAD_NUMBERS) {
        cg_set_error("%s: padding must be numbers ('same' and 'valid' are the convolution's)", op);
        return false;
    }
    if (c->padding_mode != CG_PAD_CONSTANT) {
        cg_set_error(
            "%s: only the zeros padding mode is supported, as PyTorch's ConvTranspose (got "
            "padding_mode %d)",
            op, (int)c->padding_mode);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        const int64_t p = c->output_padding[i];
        if (p < 0) {
            cg_set_error("%s: negative output_padding is not supported (got %lld in spatial dim "
                         "%d)",
                         op, (long long)p, i);
            return false;
        }
        if (p >= c->stride[i] && p >= c->dilation[i]) {
            cg_set_error("%s: output padding must be smaller than either stride or dilation, but "
                         "got output_padding %lld, stride %lld, dilation %lld in spatial dim %d",
                         op, (long long)p, (long long)c->stride[i], (long long)c->dilation[i], i);
            return false;
        }
    }
    return true;
}

bool cg_conv_check_args(const char *op, int nd, const cg_tensor *x, const cg_tensor *w,
                        const cg_tensor *b, const char *wdims, int64_t out)
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
        cg_set_error("%s: weight %s must be [%s, %s] with no empty dim", op,
                     cg_shape_str(w, s1, sizeof s1), wdims,
                     nd == 1   ? "K"
                     : nd == 2 ? "KH, KW"
                               : "KD, KH, KW");
        return false;
    }
    if (b && (b->ndim != 1 || b->shape[0] != out)) {
        cg_set_error("%s: bias %s, weight %s: the bias must be [%lld]", op,
                     cg_shape_str(b, s1, sizeof s1), cg_shape_str(w, s2, sizeof s2),
                     (long long)out);
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
    const char *op = nd >= 1 && nd <= 3 ? op_name(nd) : "conv";
    const cg_conv_cfg c = cfg ? *cfg : CG_CONV_DEFAULT;
    if (!cg_conv_cfg_check(op, nd, &c) ||
        !cg_conv_check_args(op, nd, x, w, b, "out, in / groups", w->shape[0]))
        return false;
    if (c.padding_mode != CG_PAD_CONSTANT) {
        cg_set_error("%s: the kernel pads with zeros; padding_mode %d is cg_conv%dd's (autograd), "
                     "which pads x first",
                     op, (int)c.padding_mode, nd);
        return false;
    }
    *g = (geom){.op = op, .batched = x->ndim == nd + 2, .G = c.groups, .O = w->shape[0]};
    const int s0 = g->batched ? 1 : 0; /* x's channel dim */
    g->N = g->batched ? x->shape[0] : 1;
    g->C = x->shape[s0];
    if (!check_channels(op, x, w, g))
        return false;
    g->Cg = g->C / g->G;
    g->Og = g->O / g->G;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1};
    int64_t lo[3] = {0, 0, 0}, o[3] = {1, 1, 1};
    for (int i = 0; i < nd; i++) {
        const int j = 3 - nd + i; /* nd 1: the width, nd 2: the height and width */
        int64_t hi;
        in[j] = x->shape[s0 + 1 + i];
        k[j] = w->shape[2 + i];
        s[j] = c.stride[i];
        d[j] = c.dilation[i];
        cg_conv_padding(&c, i, k[j], &lo[j], &hi);
        if (!(o[j] = out_len(op, i, in[j], k[j], s[j], d[j], lo[j], hi)))
            return false;
    }
    cg_conv_geom_dims(g, in, o, k, s, d, lo);
    return true;
}

void cg_conv_geom_dims(geom *g, const int64_t in[3], const int64_t out[3], const int64_t k[3],
                       const int64_t s[3], const int64_t d[3], const int64_t p[3])
{
    g->D = in[0], g->H = in[1], g->W = in[2], g->KD = k[0], g->KH = k[1], g->KW = k[2];
    g->OD = out[0], g->OH = out[1], g->OW = out[2];
    g->sd = s[0], g->sh = s[1], g->sw = s[2], g->dd = d[0], g->dh = d[1], g->dw = d[2];
    g->pd = p[0], g->ph = p[1], g->pw = p[2];
    g->P = g->OD * g->OH * g->OW;
    g->Kp = g->KD * g->KH * g->KW;
    g->CK = g->Cg * g->Kp;
}

cg_tensor *cg_conv_x_f32(const cg_tensor *x, const geom *g, int64_t xs[5])
{
    cg_tensor *xf = x->dtype == CG_F32 ? cg_retain((cg_tensor *)x) : cg_k_to(x, CG_F32);
    if (!xf)
        return NULL;
    const int s0 = g->batched ? 1 : 0, nd = xf->ndim - s0 - 1;
    xs[0] = g->batched ? xf->strides[0] : 0;
    xs[1] = xf->strides[s0];
    for (int i = 0; i < 3; i++) /* the spatial dims x lacks: 0 */
        xs[2 + i] = i >= 3 - nd ? xf->strides[s0 + 1 + i - (3 - nd)] : 0;
    return xf;
}

/* Whether a sample's group of x is its own cols [Cg, P]: a 1x1 kernel at
 * stride 1 without padding, over positions one run of unit stride, the
 * channels apart by at least a plane */
static bool direct(const geom *g, const int64_t xs[5])
{
    return g->Kp == 1 && g->sd == 1 && g->sh == 1 && g->sw == 1 && g->pd == 0 && g->ph == 0 &&
           g->pw == 0 && xs[4] == 1 && (g->H == 1 || xs[3] == g->W) &&
           (g->D == 1 || xs[2] == g->H * g->W) && xs[1] >= g->P;
}

/* the output positions o < out (stride s) whose input position o s + off
 * falls in [0, n): [*lo, *hi) */
static void in_range(int64_t off, int64_t s, int64_t n, int64_t out, int64_t *lo, int64_t *hi)
{
    const int64_t a = -off, b = n - off; /* o s >= a, o s < b */
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    *hi = b <= 0 ? 0 : (b + s - 1) / s;
    *lo = *lo < out ? *lo : out;
    *hi = *hi < out ? *hi : out;
    *hi = *hi > *lo ? *hi : *lo;
}

/* What a chunk of the loops below reads: the geometry, x's sample and
 * group (strides xs, c d h w in 1..4) or dx's (contiguous planes), and
 * the cols [CK, P]: a row a tap (c, kd, kh, kw), a column an output
 * position */
typedef struct {
    const geom *g;
    const float *x;
    float *dx, *cols;
    int64_t xs[5];
} job;

/* fn over n items in chunks of grain, threaded past PAR_THRESHOLD work */
static void run(int64_t n, int64_t grain, int64_t work, cg_chunk_fn fn, const job *j)
{
    cg_shares_run(n, grain, cg_shares_team(work > PAR_THRESHOLD), fn, j);
}

/* ------------------------------------------------------------- im2col */
/* tap t's offsets into the input (its position times the dilation less
 * the padding before) per dim (d, h, w) and the output positions whose
 * input position falls inside it, [lo[i], hi[i]) */
static void tap_range(const geom *g, int64_t t, int64_t off[3], int64_t lo[3], int64_t hi[3])
{
    off[0] = t / (g->KH * g->KW) * g->dd - g->pd;
    off[1] = t / g->KW % g->KH * g->dh - g->ph;
    off[2] = t % g->KW * g->dw - g->pw;
    in_range(off[0], g->sd, g->D, g->OD, &lo[0], &hi[0]);
    in_range(off[1], g->sh, g->H, g->OH, &lo[1], &hi[1]);
    in_range(off[2], g->sw, g->W, g->OW, &lo[2], &hi[2]);
}

/* rows r0..r1 of the cols: each output row's run inside the input copied,
 * zeros around it (the run's bounds found once a tap) */
static void unfold_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const job *j = ctx;
    const geom *g = j->g;
    const int64_t sx = j->xs[4] * g->sw, HW = g->OH * g->OW;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t c = r / g->Kp;
        int64_t off[3], lo[3], hi[3];
        tap_range(g, r % g->Kp, off, lo, hi);
        const int64_t h0 = lo[1], h1 = hi[1], w0 = lo[2], w1 = hi[2];
        float *row = j->cols + r * g->P;
        memset(row, 0, sizeof(float) * (size_t)(lo[0] * HW));
        for (int64_t od = lo[0]; od < hi[0]; od++) {
            float *slab = row + od * HW;
            const float *xd = j->x + c * j->xs[1] + (od * g->sd + off[0]) * j->xs[2];
            memset(slab, 0, sizeof(float) * (size_t)(h0 * g->OW));
            for (int64_t oh = h0; oh < h1; oh++) {
                float *o = slab + oh * g->OW;
                const float *src =
                    xd + (oh * g->sh + off[1]) * j->xs[3] + (w0 * g->sw + off[2]) * j->xs[4];
                memset(o, 0, sizeof(float) * (size_t)w0);
                if (sx == 1)
                    memcpy(o + w0, src, sizeof(float) * (size_t)(w1 - w0));
                else
                    for (int64_t i = 0; i < w1 - w0; i++)
                        o[w0 + i] = src[i * sx];
                memset(o + w1, 0, sizeof(float) * (size_t)(g->OW - w1));
            }
            memset(slab + h1 * g->OW, 0, sizeof(float) * (size_t)((g->OH - h1) * g->OW));
        }
        memset(row + hi[0] * HW, 0, sizeof(float) * (size_t)((g->OD - hi[0]) * HW));
    }
}

static void unfold(const job *j)
{
    const geom *g = j->g;
    run(g->CK, cg_shares_rows(g->P), g->CK * g->P, unfold_rows, j);
}

/* rows r0..r1 of the samples' cols [N, CK, P] (a batch's unfold): each
 * sample's rows as unfold_rows copies them (j: sample 0's x and cols) */
static void unfold_batch_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const job *j = ctx;
    const geom *g = j->g;
    for (int64_t r = r0; r < r1;) {
        const int64_t n = r / g->CK, end = (n + 1) * g->CK < r1 ? (n + 1) * g->CK : r1;
        job s = *j;
        s.x += n * j->xs[0];
        s.cols += n * g->CK * g->P;
        unfold_rows(r - n * g->CK, end - n * g->CK, thread, &s);
        r = end;
    }
}

void cg_conv_im2col(const geom *g, const float *x, const int64_t xs[5], float *cols)
{
    const job j = {g, x, NULL, cols, {xs[0], xs[1], xs[2], xs[3], xs[4]}};
    run(g->N * g->CK, cg_shares_rows(g->P), g->N * g->CK * g->P, unfold_batch_rows, &j);
}

/* ------------------------------------------------------------- col2im */
/* planes c0..c1 of the sample's group: each zeroed, then its taps' rows
 * added in index order (each over the output positions inside the plane) */
static void fold_planes(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    const job *j = ctx;
    const geom *g = j->g;
    const int64_t DHW = g->D * g->H * g->W;
    for (int64_t c = c0; c < c1; c++) {
        float *plane = j->dx + c * DHW;
        memset(plane, 0, sizeof(float) * (size_t)DHW);
        for (int64_t t = 0; t < g->Kp; t++) {
            int64_t off[3], lo[3], hi[3];
            tap_range(g, t, off, lo, hi);
            const int64_t h0 = lo[1], h1 = hi[1], w0 = lo[2], w1 = hi[2];
            const float *row = j->cols + (c * g->Kp + t) * g->P;
            for (int64_t od = lo[0]; od < hi[0]; od++)
                for (int64_t oh = h0; oh < h1; oh++) {
                    float *d = plane + ((od * g->sd + off[0]) * g->H + oh * g->sh + off[1]) * g->W +
                               w0 * g->sw + off[2];
                    const float *s = row + (od * g->OH + oh) * g->OW + w0;
                    if (g->sw == 1)
                        for (int64_t i = 0; i < w1 - w0; i++)
                            d[i] += s[i];
                    else
                        for (int64_t i = 0; i < w1 - w0; i++)
                            d[i * g->sw] += s[i];
                }
        }
    }
}

static void fold(const job *j)
{
    const geom *g = j->g;
    run(g->Cg, 1, g->Cg * g->Kp * g->P, fold_planes, j);
}

void cg_conv_col2im(const geom *g, const float *cols, float *dx)
{
    /* the samples' planes follow each other in dx and their rows in cols */
    const job j = {g, NULL, dx, (float *)cols, {0, 0, 0, 0, 0}};
    run(g->N * g->Cg, 1, g->N * g->Cg * g->Kp * g->P, fold_planes, &j);
}

/* ---------------------------------------------------------- forward */
/* the output's shape (x's batchedness): nd + 1 or nd + 2 dims */
static int out_shape(int nd, const geom *g, int64_t *shape)
{
    int k = 0;
    if (g->batched)
        shape[k++] = g->N;
    shape[k++] = g->O;
    if (nd == 3)
        shape[k++] = g->OD;
    if (nd >= 2)
        shape[k++] = g->OH;
    shape[k++] = g->OW;
    return k;
}

/* What the loops over the samples read: the geometry, x (strides xs), W
 * and g contiguous, the bias; what they write (out, or dx and dW: dW's
 * partial sums, a chunk of samples each, where there are several);
 * scratch, each thread's cols (and dcols); the product's path (the
 * calling thread's precision), and a flag a failed product sets */
typedef struct {
    const geom *g;
    const float *x, *w, *gc;
    const cg_tensor *b;
    int64_t xs[5], grain;
    float *out, *dx, *dw, *scratch;
    cg_gemm_path path;
    bool dir;
    _Atomic bool *failed;
} pass;

/* sample n's group gi as a job of the row loops (cols: the thread's) */
static job sample_job(const pass *s, int64_t n, int64_t gi, float *cols)
{
    const geom *g = s->g;
    job j = {g,
             s->x ? s->x + n * s->xs[0] + gi * g->Cg * s->xs[1] : NULL,
             NULL,
             cols,
             {s->xs[0], s->xs[1], s->xs[2], s->xs[3], s->xs[4]}};
    if (s->dx)
        j.dx = s->dx + (n * g->C + gi * g->Cg) * g->D * g->H * g->W;
    return j;
}

static void gemm(const pass *s, int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                 int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c)
{
    if (!cg_sgemm_path(s->path, 0, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, beta, c, n, 1))
        atomic_store(s->failed, true);
}

/* sample n's group gi of the forward: out [Og, P] = W [Og, CK] times its
 * cols (x itself when direct), beta 1 over the bias */
static void forward_product(const pass *s, const job *j, int64_t n, int64_t gi, float beta)
{
    const geom *g = s->g;
    gemm(s, g->Og, g->P, g->CK, s->w + gi * g->Og * g->CK, g->CK, 1, s->dir ? j->x : j->cols,
         s->dir ? s->xs[1] : g->P, 1, beta, s->out + (n * g->O + gi * g->Og) * g->P);
}

/* samples n0..n1 of the forward: out [Og, P] = W [Og, CK] cols [CK, P]
 * (+ the bias, set first), written where the output has it */
static void forward_samples(int64_t n0, int64_t n1, int thread, const void *ctx)
{
    const pass *s = ctx;
    const geom *g = s->g;
    float *cols = s->scratch ? s->scratch + thread * g->CK * g->P : NULL;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            const job j = sample_job(s, n, gi, cols);
            float *y = s->out + (n * g->O + gi * g->Og) * g->P;
            for (int64_t o = 0; s->b && o < g->Og; o++) {
                const float v = cg_data(s->b)[(gi * g->Og + o) * s->b->strides[0]];
                for (int64_t p = 0; p < g->P; p++)
                    y[o * g->P + p] = v;
            }
            if (!s->dir)
                unfold(&j);
            forward_product(s, &j, n, gi, s->b ? 1.0f : 0.0f);
        }
}

/* The team for a loop over the samples (several: each thread runs whole
 * samples, its products on one thread; one: the loops inside threaded)
 * and its scratch, per cols [CK, P] of a thread; false + error */
static bool samples_team(pass *s, int per, int *nt, cg_tensor **scratch)
{
    const geom *g = s->g;
    *nt = cg_shares_team(g->N > 1 && g->N * g->G * g->Og * g->P * g->CK > PAR_THRESHOLD);
    *scratch = NULL;
    s->scratch = NULL;
    if (s->dir || !per)
        return true;
    if (!(*scratch = cg_empty(CG_SHAPE((int64_t)*nt * per, g->CK * g->P))))
        return false;
    s->scratch = cg_data(*scratch);
    return true;
}

/* Whether no product failed; a failure on another thread (its error
 * there) recorded on this one */
static bool products_ok(const geom *g, bool failed, int nt)
{
    if (failed && nt > 1)
        cg_set_error("%s: a product failed on a worker thread (out of memory)", g->op);
    return !failed;
}

/* The forward, the samples among the threads */
bool cg_conv_pass_forward(const geom *g, const float *x, const int64_t xs[5], const float *w,
                          const cg_tensor *b, float *out)
{
    _Atomic bool failed = false;
    pass s = {g,
              x,
              w,
              NULL,
              b,
              {xs[0], xs[1], xs[2], xs[3], xs[4]},
              1,
              out,
              NULL,
              NULL,
              NULL,
              cg_precision_path(cg_get_matmul_precision()),
              direct(g, xs),
              &failed};
    int nt;
    cg_tensor *scratch;
    if (!samples_team(&s, 1, &nt, &scratch))
        return false;
    cg_shares_run(g->N, 1, nt, forward_samples, &s);
    cg_release(scratch);
    return products_ok(g, failed, nt);
}

cg_tensor *cg_k_conv(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                     const cg_conv_cfg *cfg)
{
    if (!x || !w)
        return cg_error_null_input("cg_k_conv"), NULL;
    geom g;
    if (!geometry(nd, x, w, b, cfg, &g))
        return NULL;
    int64_t shape[5], xs[5];
    cg_tensor *out = cg_empty(out_shape(nd, &g, shape), shape);
    if (!out || g.N == 0)
        return out;
    cg_tensor *xf = cg_conv_x_f32(x, &g, xs), *wc = xf ? cg_k_contiguous(w) : NULL;
    const bool ok = wc && cg_conv_pass_forward(&g, cg_data(xf), xs, cg_data(wc), b, cg_data(out));
    cg_release_all(2, xf, wc);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ---------------------------------------------------------- backward */
/* samples n0..n1 (one chunk) of the backward: its dW [Og, CK] (the
 * chunk's partial sum) = the sum over its samples in order of g [Og, P]
 * cols^T; dcols [CK, P] = W^T g folded into dx (a direct 1x1 kernel:
 * written into dx itself); out (when asked) the forward's W cols from
 * the cols unfolded once for dW */
static void backward_samples(int64_t n0, int64_t n1, int thread, const void *ctx)
{
    const pass *s = ctx;
    const geom *g = s->g;
    const int64_t CKP = g->CK * g->P, wn = g->G * g->Og * g->CK;
    float *cols = s->scratch ? s->scratch + 2 * thread * CKP : NULL;
    float *dcols = cols ? cols + CKP : NULL, *dw = s->dw ? s->dw + n0 / s->grain * wn : NULL;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            job j = sample_job(s, n, gi, cols);
            const float *gy = s->gc + (n * g->O + gi * g->Og) * g->P;
            if ((dw || s->out) && !s->dir)
                unfold(&j);
            if (s->out) /* the forward's product from the same cols */
                forward_product(s, &j, n, gi, 0.0f);
            if (dw)
                gemm(s, g->Og, g->CK, g->P, gy, g->P, 1, s->dir ? j.x : j.cols, 1,
                     s->dir ? s->xs[1] : g->P, n > n0 ? 1.0f : 0.0f, dw + gi * g->Og * g->CK);
            if (!s->dx)
                continue;
            gemm(s, g->CK, g->P, g->Og, s->w + gi * g->Og * g->CK, 1, g->CK, gy, g->P, 1, 0.0f,
                 s->dir ? j.dx : dcols);
            j.cols = dcols;
            if (!s->dir)
                fold(&j);
        }
}

typedef struct {
    const geom *g;
    const float *gc, *part; /* g; dW's partial sums */
    int64_t nparts, wn;
    float *db, *dw;
} sums_job;

/* db[o] = the sum of g[n, o, :] over n then the positions, in double */
static void db_rows(int64_t o0, int64_t o1, int thread, const void *ctx)
{
    const sums_job *j = ctx;
    const geom *g = j->g;
    for (int64_t o = o0; o < o1; o++) {
        double s = 0;
        for (int64_t n = 0; n < g->N; n++) {
            const float *r = j->gc + (n * g->O + o) * g->P;
            for (int64_t p = 0; p < g->P; p++)
                s += (double)r[p];
        }
        j->db[o] = (float)s;
    }
}

/* dW = its partial sums added in order */
static void dw_sum(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const sums_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        float s = j->part[i];
        for (int64_t c = 1; c < j->nparts; c++)
            s += j->part[c * j->wn + i];
        j->dw[i] = s;
    }
}

/* The backward, chunks of samples among the threads: at most DW_PARTS,
 * their number the batch's (the same sums for any team); dw, db NULL:
 * not asked for */
enum { DW_PARTS = 8 };
static bool backward_all(pass *s, float *dw, float *db)
{
    const geom *g = s->g;
    const int64_t parts = g->N < DW_PARTS ? g->N : DW_PARTS, wn = g->G * g->Og * g->CK;
    s->grain = (g->N + parts - 1) / parts;
    const int64_t nparts = (g->N + s->grain - 1) / s->grain;
    cg_tensor *part = dw && nparts > 1 ? cg_empty(CG_SHAPE(nparts, wn)) : NULL;
    s->dw = part ? cg_data(part) : dw;
    int nt;
    cg_tensor *scratch;
    _Atomic bool failed = false;
    s->failed = &failed;
    if ((dw && nparts > 1 && !part) || !samples_team(s, 2, &nt, &scratch)) {
        cg_release(part);
        return false;
    }
    cg_shares_run(g->N, s->grain, nt, backward_samples, s);
    const sums_job j = {g, s->gc, s->dw, nparts, wn, db, dw};
    if (part)
        cg_shares_run(wn, 4096, cg_shares_team(wn * nparts > PAR_THRESHOLD), dw_sum, &j);
    if (db)
        cg_conv_pass_db(g, s->gc, db);
    cg_release_all(2, part, scratch);
    return products_ok(g, failed, nt);
}

/* the backward's pass, out the forward's (or NULL) */
static bool backward_pass(const geom *g, const float *x, const int64_t xs[5], const float *w,
                          const float *gc, float *out, float *dx, float *dw, float *db)
{
    pass s = {g,     x,   w,  gc,   NULL, {xs[0], xs[1], xs[2], xs[3], xs[4]},
              1,     out, dx, NULL, NULL, cg_precision_path(cg_get_matmul_precision()),
              false, NULL};
    s.dir = direct(g, xs);
    return backward_all(&s, dw, db);
}

bool cg_conv_pass_backward(const geom *g, const float *x, const int64_t xs[5], const float *w,
                           const float *gc, float *dx, float *dw, float *db)
{
    return backward_pass(g, x, xs, w, gc, NULL, dx, dw, db);
}

bool cg_conv_pass_forward_dw(const geom *g, const float *x, const int64_t xs[5], const float *w,
                             const float *gc, float *out, float *dw)
{
    return backward_pass(g, x, xs, w, gc, out, NULL, dw, NULL);
}

void cg_conv_pass_db(const geom *g, const float *gc, float *db)
{
    const sums_job j = {g, gc, NULL, 0, 0, db, NULL};
    cg_shares_run(g->O, cg_shares_rows(g->N * g->P),
                  cg_shares_team(g->O * g->N * g->P > PAR_THRESHOLD), db_rows, &j);
}

static bool check_grad(int nd, const geom *g, const cg_tensor *grad)
{
    int64_t shape[5];
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
    cg_tensor *tdx = dx ? cg_empty(x->ndim, x->shape) : NULL;
    cg_tensor *tdw = dw ? cg_zeros(w->ndim, w->shape) : NULL;
    cg_tensor *tdb = db ? cg_zeros(1, w->shape) : NULL;
    bool ok = (!dx || tdx) && (!dw || tdw) && (!db || tdb);
    cg_tensor *xf = NULL, *gc = NULL, *wc = NULL;
    int64_t xs[5] = {0};
    if (ok && ge.N > 0) {
        xf = cg_conv_x_f32(x, &ge, xs);
        wc = xf ? cg_k_contiguous(w) : NULL;
        gc = wc ? cg_k_contiguous(g) : NULL;
        ok = gc && cg_conv_pass_backward(&ge, cg_data(xf), xs, cg_data(wc), cg_data(gc),
                                         tdx ? cg_data(tdx) : NULL, tdw ? cg_data(tdw) : NULL,
                                         tdb ? cg_data(tdb) : NULL);
    }
    cg_release_all(3, xf, gc, wc);
    if (!ok) {
        cg_release_all(3, tdx, tdw, tdb);
        return false;
    }
    if (dx)
        *dx = tdx;
    if (dw)
        *dw = tdw;
    if (db)
        *db = tdb;
    return true;
}
