/* cgrad core: interpolation over the last one or two dims (declared in
 * core/ops.h, "interpolation"): F.interpolate's nearest, nearest-exact,
 * linear, bilinear and bicubic modes and their backward, PyTorch 1.13's CPU
 * rules.
 *
 * Each spatial dim has a table: for every output position its taps (one
 * for nearest, two for the linear modes, four for bicubic) of source
 * positions i[k] and weights l[k]. The input is copied into contiguous
 * float32 planes [P, H, W] (P = N * C); an output is sum_k t_k * l_k of
 * its rows' values, each sum_k x[i[k]] * l[k] along W, summed in tap
 * order (PyTorch's). The backward scatters each plane's output gradient
 * with the same tables in output order, a plane a task, so the bits do
 * not depend on the thread count.
 * bfloat16 and float16 inputs are computed in float32 and the values
 * rounded back (core/upcast.h), as the pools do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

static const char *const MODE_NAME[5] = {"nearest", "nearest-exact", "linear", "bilinear",
                                         "bicubic"};
#define TAPS 4 /* the most taps a mode has (bicubic) */

/* One spatial dim's table: out entries each, taps of them used */
typedef struct {
    int64_t *i[TAPS];
    float *l[TAPS];
} axis_t;

/* An interpolation's geometry: planes [P, H, W] to [P, OH, OW] (a 3-d
 * input: H = OH = 1, dim 0 unused); the scale passed to the kernel per
 * dim (0: none, the sizes' ratio) */
typedef struct {
    const cg_interp *o;
    int nd, taps;
    int64_t P, in[2], out[2];
    double scale[2];
    int64_t shape[4], out_shape[4];
    axis_t ax[2];
    void *mem; /* the tables */
} plan_t;

/* the modes that interpolate (take align_corners), not nearest's */
static bool interpolates(cg_interp_mode m) { return m >= CG_INTERP_LINEAR; }

bool cg_k_interp_options_ok(const cg_interp *o, const char *who)
{
    if (!o)
        return cg_error_null_arg(who, "options");
    if ((unsigned)o->mode > CG_INTERP_BICUBIC) {
        cg_set_error("%s: mode %d, expected nearest, nearest-exact, linear, bilinear or bicubic",
                     who, (int)o->mode);
        return false;
    }
    const bool has_size = o->size[0] || o->size[1];
    const bool has_scale = o->scale_factor[0] != 0.0 || o->scale_factor[1] != 0.0;
    if (has_size == has_scale) {
        cg_set_error(has_size ? "%s: only one of size or scale_factor should be defined"
                              : "%s: either size or scale_factor should be defined",
                     who);
        return false;
    }
    for (int i = 0; i < 2; i++) {
        const bool alone = i == 1 && !o->size[1] && !o->scale_factor[1]; /* one number */
        if (!alone && has_size && o->size[i] <= 0) {
            cg_set_error("%s: size [%lld, %lld], expected sizes > 0 (index 1 0: index 0's)", who,
                         (long long)o->size[0], (long long)o->size[1]);
            return false;
        }
        const double s = o->scale_factor[i];
        if (!alone && has_scale && !(s > 0.0 && s < 1e12)) {
            cg_set_error("%s: scale_factor [%g, %g], expected finite scales > 0 (index 1 0: "
                         "index 0's)",
                         who, o->scale_factor[0], o->scale_factor[1]);
            return false;
        }
    }
    if (o->align_corners && !interpolates(o->mode)) {
        cg_set_error("%s: align_corners can only be set with the interpolating modes linear, "
                     "bilinear and bicubic, not %s",
                     who, MODE_NAME[o->mode]);
        return false;
    }
    if (o->recompute_scale_factor && has_size) {
        cg_set_error("%s: recompute_scale_factor is not meaningful with an explicit size", who);
        return false;
    }
    return true;
}

/* x's shape and o's output sizes into pl (no tables yet); false + error */
static bool plan_shape(plan_t *pl, const cg_tensor *x, const cg_interp *o)
{
    if (!x)
        return cg_error_null_input("interpolate");
    if (!cg_k_interp_options_ok(o, "interpolate"))
        return false;
    const int nd = x->ndim - 2;
    const bool rank_ok = o->mode == CG_INTERP_LINEAR ? nd == 1
                         : interpolates(o->mode)     ? nd == 2
                                                     : nd == 1 || nd == 2;
    if (!rank_ok) {
        char b[96];
        cg_set_error("interpolate: input %s has %d dims, %s expects %s",
                     cg_shape_str(x, b, sizeof b), x->ndim, MODE_NAME[o->mode],
                     o->mode == CG_INTERP_LINEAR ? "3 ([N, C, L])"
                     : interpolates(o->mode)     ? "4 ([N, C, H, W])"
                                                 : "3 ([N, C, L]) or 4 ([N, C, H, W])");
        return false;
    }
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("interpolate: argument 1 is %s, expected a float tensor (float32, bfloat16 "
                     "or float16)",
                     cg_dtype_name(x->dtype));
        return false;
    }
    if (nd == 1 && (o->size[1] || o->scale_factor[1] != 0.0)) {
        cg_set_error("interpolate: a 3-d input takes one size or scale_factor (index 0), got "
                     "index 1 %s",
                     o->size[1] ? "size" : "scale_factor");
        return false;
    }
    pl->o = o;
    pl->nd = nd;
    pl->taps = o->mode == CG_INTERP_BICUBIC ? 4 : interpolates(o->mode) ? 2 : 1;
    pl->mem = NULL;
    pl->P = x->shape[0] * x->shape[1];
    for (int i = 0; i < x->ndim; i++)
        pl->shape[i] = pl->out_shape[i] = x->shape[i];
    pl->in[0] = pl->out[0] = 1;
    pl->scale[0] = pl->scale[1] = 0.0;
    for (int i = 0; i < nd; i++) {
        const int j = i + 2 - nd, k = o->size[1] || o->scale_factor[1] != 0.0 ? i : 0;
        const int64_t in = x->shape[2 + i];
        int64_t out = o->size[k];
        if (!out) {
            const double v = (double)in * o->scale_factor[k]; /* PyTorch's floor */
            if (!(v < 1e15)) {
                cg_set_error("interpolate: scale_factor %g of size %lld is too large",
                             o->scale_factor[k], (long long)in);
                return false;
            }
            out = (int64_t)v;
            if (!o->recompute_scale_factor)
                pl->scale[j] = o->scale_factor[k];
        }
        if (in < 1 || out < 1) {
            char b[96];
            cg_set_error("interpolate: input %s and output size %lld along spatial dim %d: "
                         "input and output sizes should be greater than 0",
                         cg_shape_str(x, b, sizeof b), (long long)out, i);
            return false;
        }
        pl->in[j] = in;
        pl->out[j] = pl->out_shape[2 + i] = out;
    }
    return true;
}

/* PyTorch's cubic convolution (UpSample.h, A = -0.75) in float32: x the
 * distance, <= 1 (conv1) or in (1, 2) (conv2) */
static float cubic_conv1(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static float cubic_conv2(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/* bicubic's four taps of output i: PyTorch's source index (float32, not
 * clamped), its floor k - 1 ... k + 2 clamped to [0, in - 1] */
static void cubic_taps(const axis_t *a, int64_t in, float s, bool ac, int64_t i)
{
    const float real = ac ? s * (float)i : (float)((double)s * ((double)i + 0.5) - 0.5);
    const int64_t k = (int64_t)floorf(real);
    const float t = real - (float)k, A = -0.75f;
    const float l[TAPS] = {cubic_conv2(t + 1.0f, A), cubic_conv1(t, A), cubic_conv1(1.0f - t, A),
                           cubic_conv2((1.0f - t) + 1.0f, A)};
    for (int q = 0; q < TAPS; q++) {
        const int64_t at = k - 1 + q;
        a->i[q][i] = at < 0 ? 0 : at > in - 1 ? in - 1 : at;
        a->l[q][i] = l[q];
    }
}

/* plan dim j's table (PyTorch's UpSample.h: the scale in float32, the
 * linear source index in double) */
static void axis_fill(const plan_t *pl, int j)
{
    const axis_t *a = &pl->ax[j];
    const int64_t in = pl->in[j], out = pl->out[j];
    const double sc = pl->scale[j];
    const bool ac = pl->o->align_corners;
    float s = sc > 0.0 ? (float)(1.0 / sc) : (float)in / (float)out;
    if (ac) /* interpolating modes only */
        s = out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
    for (int64_t i = 0; i < out; i++) {
        int64_t i0, i1;
        if (pl->o->mode == CG_INTERP_BICUBIC) { /* PyTorch's forward has no same-size copy */
            cubic_taps(a, in, s, ac, i);
            continue;
        }
        float l1 = 0.0f;
        if (pl->o->mode == CG_INTERP_NEAREST) {
            i0 = (int64_t)floorf((float)i * s);
            i0 = i1 = i0 < in - 1 ? i0 : in - 1;
        } else if (pl->o->mode == CG_INTERP_NEAREST_EXACT) {
            float real = (float)((double)s * ((double)i + 0.5) - 0.5);
            real = real < 0.0f ? 0.0f : real;
            i0 = (int64_t)floorf((float)((double)real + 0.5));
            i0 = i1 = i0 < in - 1 ? i0 : in - 1;
        } else if (out == in) { /* PyTorch copies */
            i0 = i1 = i;
        } else {
            double real = ac ? (double)s * (double)i : (double)s * ((double)i + 0.5) - 0.5;
            real = real < 0.0 ? 0.0 : real;
            i0 = (int64_t)real;
            i1 = i0 + (i0 < in - 1);
            l1 = (float)(real - (double)i0);
        }
        a->i[0][i] = i0;
        a->l[0][i] = 1.0f - l1;
        if (pl->taps > 1) {
            a->i[1][i] = i1;
            a->l[1][i] = l1;
        }
    }
}

/* pl's tables (one block, pl->mem); false + error */
static bool plan_tables(plan_t *pl)
{
    const int64_t n = pl->out[0] + pl->out[1];
    pl->mem = malloc((size_t)(n * pl->taps) * (sizeof(int64_t) + sizeof(float)));
    if (!pl->mem) {
        cg_set_error("interpolate: out of memory");
        return false;
    }
    int64_t *ip = pl->mem;
    float *fp = (float *)(ip + pl->taps * n);
    for (int64_t j = 0, off = 0; j < 2; off += pl->out[j], j++) {
        for (int q = 0; q < TAPS; q++) {
            pl->ax[j].i[q] = q < pl->taps ? ip + q * n + off : NULL;
            pl->ax[j].l[q] = q < pl->taps ? fp + q * n + off : NULL;
        }
        axis_fill(pl, j);
    }
    return true;
}

/* ---------------------------------------------------- the planes' loops */
/* sum_k x[i[k]] * l[k] over the taps along W at output ow of row x */
static inline float along_w(const axis_t *w, int taps, const float *x, int64_t ow)
{
    float s = x[w->i[0][ow]] * w->l[0][ow];
    for (int q = 1; q < taps; q++)
        s += x[w->i[q][ow]] * w->l[q][ow];
    return s;
}

/* One plane's output y [OH, OW] from its input x [H, W] */
static void gather_plane(const plan_t *pl, const float *x, float *y)
{
    const int64_t W = pl->in[1], OH = pl->out[0], OW = pl->out[1];
    const axis_t *ah = &pl->ax[0], *aw = &pl->ax[1];
    const int taps = pl->taps;
    for (int64_t oh = 0; oh < OH; oh++, y += OW) {
        const float *r0 = x + ah->i[0][oh] * W;
        if (taps == 1) {
            for (int64_t ow = 0; ow < OW; ow++)
                y[ow] = r0[aw->i[0][ow]];
        } else if (pl->nd == 1) {
            for (int64_t ow = 0; ow < OW; ow++)
                y[ow] = along_w(aw, taps, r0, ow);
        } else {
            for (int64_t ow = 0; ow < OW; ow++) {
                float s = along_w(aw, taps, r0, ow) * ah->l[0][oh];
                for (int q = 1; q < taps; q++)
                    s += along_w(aw, taps, x + ah->i[q][oh] * W, ow) * ah->l[q][oh];
                y[ow] = s;
            }
        }
    }
}

/* One plane's gradient g [OH, OW] scattered into dx [H, W] (zeroed
 * first) in output order */
static void scatter_plane(const plan_t *pl, const float *g, float *dx)
{
    const int64_t W = pl->in[1], OH = pl->out[0], OW = pl->out[1];
    const axis_t *ah = &pl->ax[0], *aw = &pl->ax[1];
    const int taps = pl->taps;
    memset(dx, 0, (size_t)(pl->in[0] * W) * sizeof *dx);
    for (int64_t oh = 0; oh < OH; oh++, g += OW) {
        for (int64_t ow = 0; ow < OW; ow++) {
            if (taps == 1) {
                dx[ah->i[0][oh] * W + aw->i[0][ow]] += g[ow];
            } else if (pl->nd == 1) {
                for (int q = 0; q < taps; q++)
                    dx[aw->i[q][ow]] += aw->l[q][ow] * g[ow];
            } else { /* PyTorch's bilinear order and products, row by row */
                for (int p = 0; p < taps; p++) {
                    float *r = dx + ah->i[p][oh] * W;
                    for (int q = 0; q < taps; q++)
                        r[aw->i[q][ow]] += ah->l[p][oh] * aw->l[q][ow] * g[ow];
                }
            }
        }
    }
}

typedef struct {
    const plan_t *pl;
    const float *src; /* forward: x [P, H, W]; backward: g [P, OH, OW] */
    float *dst;       /* y; dx */
    bool backward;
} job_t;

static void planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const job_t *j = ctx;
    const int64_t in = j->pl->in[0] * j->pl->in[1], out = j->pl->out[0] * j->pl->out[1];
    for (int64_t p = p0; p < p1; p++) {
        if (j->backward)
            scatter_plane(j->pl, j->src + p * out, j->dst + p * in);
        else
            gather_plane(j->pl, j->src + p * in, j->dst + p * out);
    }
}

/* pl's tables made, then every plane of src into dst, a plane a task;
 * false + error */
static bool run_planes(plan_t *pl, const float *src, float *dst, bool backward)
{
    if (!plan_tables(pl))
        return false;
    const job_t job = {pl, src, dst, backward};
    const int64_t per = 4 * (pl->taps == TAPS ? TAPS : 1) * pl->out[0] * pl->out[1] +
                        (backward ? pl->in[0] * pl->in[1] : 0);
    cg_shares_run(pl->P, cg_shares_rows(per), cg_shares_team(pl->P * per > PAR_THRESHOLD), planes,
                  &job);
    return true;
}

/* ------------------------------------------------------------- forward */
/* pl's forward on x (float32) */
static cg_tensor *interp_forward(plan_t *pl, const cg_tensor *x)
{
    cg_tensor *xc = cg_k_contiguous(x), *y = xc ? cg_empty(pl->nd + 2, pl->out_shape) : NULL;
    if (y && !run_planes(pl, cg_data(xc), cg_data(y), false)) {
        cg_release(y);
        y = NULL;
    }
    cg_release(xc);
    return y;
}

cg_tensor *cg_k_interpolate(const cg_tensor *x, const cg_interp *o)
{
    plan_t pl;
    if (!plan_shape(&pl, x, o))
        return NULL;
    cg_upcast u;
    if (!cg_upcast_begin(&u, "interpolate", 1, (const cg_tensor **[]){&x}))
        return NULL;
    cg_tensor *y = cg_upcast_end(&u, interp_forward(&pl, x));
    free(pl.mem);
    return y;
}

/* ------------------------------------------------------------ backward */
cg_tensor *cg_k_interpolate_backward(const cg_tensor *g, const cg_tensor *x, const cg_interp *o)
{
    plan_t pl;
    if (!g)
        return cg_error_null_input("cg_k_interpolate_backward"), NULL;
    if (!plan_shape(&pl, x, o))
        return NULL;
    if (g->ndim != x->ndim || memcmp(g->shape, pl.out_shape, (size_t)g->ndim * sizeof *g->shape)) {
        char b[96];
        cg_set_error("interpolate backward: gradient %s does not match the output",
                     cg_shape_str(g, b, sizeof b));
        return NULL;
    }
    cg_tensor *gf = cg_upcast_dense(g, false);
    cg_tensor *dx = gf ? cg_empty(x->ndim, pl.shape) : NULL;
    if (dx && !run_planes(&pl, cg_data(gf), cg_data(dx), true)) {
        cg_release(dx);
        dx = NULL;
    }
    free(pl.mem);
    cg_release(gf);
    return dx;
}
