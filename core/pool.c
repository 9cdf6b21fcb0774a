/* cgrad core: pooling over the last one or two dims (declared in core/ops.h,
 * "pooling"): max (with its indices), average, adaptive average and
 * adaptive max, as PyTorch's F.max_pool1d/2d, avg_pool1d/2d and
 * adaptive_*_pool1d/2d, and their backwards.
 *
 * The input is copied into contiguous float32 planes [P, H, W] (P the
 * leading dims: C or N * C; a 1d pool is a 2d one with H = 1). Each output
 * element reads its window in row-major order; the backwards scatter each
 * plane's output gradient in output order, a plane a task, so the bits do
 * not depend on the thread count. bfloat16 and float16 inputs are computed
 * in float32 and the values rounded back (core/upcast.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

typedef enum { WIN_MAX, WIN_AVG, WIN_ADAPTIVE_MAX, WIN_ADAPTIVE_AVG } win_kind;

/* A pool's geometry: planes [P, H, W] to [P, OH, OW]; per spatial dim
 * (0: H, 1: W) kernel, stride, padding, dilation (a 1d pool: dim 0 is the
 * identity window of H = 1). */
typedef struct {
    win_kind kind;
    int nd, lead; /* spatial dims (1, 2); leading dims (1 or 2) */
    int64_t P, in[2], out[2], k[2], s[2], p[2], d[2];
    bool exclude_pad;
    int64_t divisor;
    int64_t shape[4], out_shape[4];
} plan_t;

static const char *const KIND_NAME[2][4] = {
    {"max_pool1d", "avg_pool1d", "adaptive_max_pool1d", "adaptive_avg_pool1d"},
    {"max_pool2d", "avg_pool2d", "adaptive_max_pool2d", "adaptive_avg_pool2d"},
};

static const char *pool_name(win_kind kind, int nd) { return KIND_NAME[nd - 1][kind]; }

/* The output size along one dim, PyTorch's pooling_output_shape: the last
 * window of ceil_mode must start inside the input or the left padding. */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode)
{
    const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1; /* floor division */
    if (ceil_mode && (o - 1) * s >= in + p)
        o--;
    return o;
}

/* x's leading dims and spatial sizes into pl; false + error naming op */
static bool plan_shape(plan_t *pl, const cg_tensor *x)
{
    const char *op = pool_name(pl->kind, pl->nd);
    if (x->ndim != pl->nd + 1 && x->ndim != pl->nd + 2) {
        char b[96];
        cg_set_error("%s: input %s has %d dims, expected %d (unbatched) or %d (batched)", op,
                     cg_shape_str(x, b, sizeof b), x->ndim, pl->nd + 1, pl->nd + 2);
        return false;
    }
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("%s: argument 1 is %s, expected a float tensor (float32, bfloat16 or float16)",
                     op, cg_dtype_name(x->dtype));
        return false;
    }
    pl->lead = x->ndim - pl->nd;
    pl->exclude_pad = false;
    pl->divisor = 0;
    pl->P = 1;
    for (int i = 0; i < pl->lead; i++)
        pl->P *= x->shape[i];
    for (int i = 0; i < x->ndim; i++)
        pl->shape[i] = pl->out_shape[i] = x->shape[i];
    for (int i = 0; i < 2; i++) { /* a 1d pool's dim 0: H = 1, identity */
        pl->in[i] = i < 2 - pl->nd ? 1 : x->shape[pl->lead + i - (2 - pl->nd)];
        pl->k[i] = pl->s[i] = pl->d[i] = 1;
        pl->p[i] = 0;
        pl->out[i] = pl->in[i];
    }
    return true;
}

/* pl's kind and x's shape; false + error */
static bool plan_begin(plan_t *pl, win_kind kind, int nd, const cg_tensor *x)
{
    pl->kind = kind;
    pl->nd = nd;
    if (nd != 1 && nd != 2) {
        cg_set_error("pooling: %d spatial dims, expected 1 or 2", nd);
        return false;
    }
    if (!x)
        return cg_error_null_input(pool_name(kind, nd));
    return plan_shape(pl, x);
}

static bool plan_pool(plan_t *pl, win_kind kind, int nd, const cg_tensor *x, const cg_pool *o)
{
    if (!o)
        return cg_error_null_input("pooling options");
    if (!plan_begin(pl, kind, nd, x))
        return false;
    const char *op = pool_name(kind, nd);
    pl->exclude_pad = o->exclude_pad;
    pl->divisor = o->divisor_override;
    if (kind == WIN_AVG && nd == 1 && o->divisor_override) {
        cg_set_error("avg_pool1d: divisor_override is avg_pool2d's only");
        return false;
    }
    if (kind == WIN_AVG && o->divisor_override < 0) {
        cg_set_error("%s: divisor_override is %lld, expected > 0 (0: none)", op,
                     (long long)o->divisor_override);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        const int j = i + 2 - nd; /* the plan's dim */
        const int64_t k = o->kernel_size[i], s = o->stride[i] ? o->stride[i] : k;
        const int64_t d = kind == WIN_AVG ? 1 : o->dilation[i] ? o->dilation[i] : 1;
        if (k <= 0 || s <= 0 || d <= 0 || o->padding[i] < 0 ||
            (kind == WIN_AVG && o->dilation[i] > 1)) {
            cg_set_error("%s: kernel_size %lld, stride %lld, padding %lld, dilation %lld: expected "
                         "kernel_size, stride (0: the kernel's) and dilation > 0, padding >= 0%s",
                         op, (long long)k, (long long)o->stride[i], (long long)o->padding[i],
                         (long long)o->dilation[i], kind == WIN_AVG ? ", dilation 0 or 1" : "");
            return false;
        }
        if (o->padding[i] > k / 2) {
            cg_set_error("%s: padding %lld should be at most half of kernel_size %lld", op,
                         (long long)o->padding[i], (long long)k);
            return false;
        }
        pl->k[j] = k;
        pl->s[j] = s;
        pl->d[j] = d;
        pl->p[j] = o->padding[i];
        pl->out[j] = out_size(pl->in[j], k, s, o->padding[i], d, o->ceil_mode);
        if (pl->out[j] < 1) {
            char b[96];
            cg_set_error("%s: input %s is too small: output size %lld along spatial dim %d", op,
                         cg_shape_str(x, b, sizeof b), (long long)pl->out[j], i);
            return false;
        }
        pl->out_shape[pl->lead + i] = pl->out[j];
    }
    return true;
}

static bool plan_adaptive(plan_t *pl, win_kind kind, int nd, const cg_tensor *x, int64_t oh,
                          int64_t ow)
{
    if (!plan_begin(pl, kind, nd, x))
        return false;
    const int64_t want[2] = {nd == 2 ? oh : 1, nd == 2 ? ow : oh};
    for (int j = 2 - nd; j < 2; j++) {
        if (want[j] < 1) {
            cg_set_error("%s: output_size %lld, expected >= 1", pool_name(kind, nd),
                         (long long)want[j]);
            return false;
        }
        pl->out[j] = want[j];
        pl->out_shape[pl->lead + j - (2 - nd)] = want[j];
    }
    return true;
}

/* The window of output o along plan dim j: input positions lo, lo + step,
 * ... below hi (clipped to the input); *size the divisor's count */
typedef struct {
    int64_t lo, hi, step, size;
} win_t;

static win_t window(const plan_t *pl, int j, int64_t o)
{
    win_t w = {0, 0, 1, 0};
    const int64_t in = pl->in[j];
    if (pl->kind == WIN_ADAPTIVE_MAX || pl->kind == WIN_ADAPTIVE_AVG) {
        w.lo = o * in / pl->out[j];                          /* floor */
        w.hi = ((o + 1) * in + pl->out[j] - 1) / pl->out[j]; /* ceil */
        w.size = w.hi - w.lo;
        return w;
    }
    const int64_t start = o * pl->s[j] - pl->p[j];
    if (pl->kind == WIN_AVG) { /* PyTorch's: the padded window's size */
        const int64_t end = start + pl->k[j] < in + pl->p[j] ? start + pl->k[j] : in + pl->p[j];
        w.size = end - start;
        w.lo = start < 0 ? 0 : start;
        w.hi = end < in ? end : in;
        if (pl->exclude_pad)
            w.size = w.hi - w.lo;
        return w;
    }
    w.step = pl->d[j];
    w.lo = start;
    while (w.lo < 0)
        w.lo += w.step;
    const int64_t end = start + (pl->k[j] - 1) * pl->d[j] + 1;
    w.hi = end < in ? end : in;
    return w;
}

/* ------------------------------------------------------------- forward */
typedef struct {
    const plan_t *pl;
    const float *x;
    float *y;
    int64_t *idx; /* max: the flat index within the plane */
} fwd_job;

static void fwd_planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const fwd_job *j = ctx;
    const plan_t *pl = j->pl;
    const int64_t H = pl->in[0], W = pl->in[1], OH = pl->out[0], OW = pl->out[1];
    const bool is_max = pl->kind == WIN_MAX || pl->kind == WIN_ADAPTIVE_MAX;
    for (int64_t p = p0; p < p1; p++) {
        const float *x = j->x + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            const win_t a = window(pl, 0, oh);
            for (int64_t ow = 0; ow < OW; ow++) {
                const win_t b = window(pl, 1, ow);
                const int64_t o = (p * OH + oh) * OW + ow;
                if (is_max) { /* PyTorch's CPU rule: > or NaN takes it */
                    float m = -INFINITY;
                    int64_t mi = a.lo * W + b.lo;
                    for (int64_t h = a.lo; h < a.hi; h += a.step)
                        for (int64_t w = b.lo; w < b.hi; w += b.step) {
                            const float v = x[h * W + w];
                            if (v > m || isnan(v)) {
                                m = v;
                                mi = h * W + w;
                            }
                        }
                    j->y[o] = m;
                    j->idx[o] = mi;
                    continue;
                }
                double s = 0.0;
                for (int64_t h = a.lo; h < a.hi; h++)
                    for (int64_t w = b.lo; w < b.hi; w++)
                        s += x[h * W + w];
                const int64_t div = pl->divisor ? pl->divisor : a.size * b.size;
                j->y[o] = (float)(s / (double)div);
            }
        }
    }
}

/* Run pl's forward on x (float32); values (and max's indices) */
static cg_tensor *pool_forward(const plan_t *pl, const cg_tensor *x, cg_tensor **indices)
{
    const int nd = pl->lead + pl->nd;
    cg_tensor *xc = cg_k_contiguous(x), *y = xc ? cg_empty(nd, pl->out_shape) : NULL;
    cg_tensor *idx = y && indices ? cg_empty_dtype(CG_I64, nd, pl->out_shape) : NULL;
    if (!y || (indices && !idx)) {
        cg_release_all(3, xc, y, idx);
        return NULL;
    }
    const int64_t per = pl->out[0] * pl->out[1] * pl->k[0] * pl->k[1];
    const fwd_job job = {pl, cg_data(xc), cg_data(y), idx ? cg_data_i64(idx) : NULL};
    cg_shares_run(pl->P, cg_shares_rows(per), cg_shares_team(pl->P * per > PAR_THRESHOLD),
                  fwd_planes, &job);
    cg_release(xc);
    if (indices)
        *indices = idx;
    return y;
}

/* bfloat16 and float16 computed in float32, the values rounded back */
static cg_tensor *run_forward(const plan_t *pl, const cg_tensor *x, cg_tensor **indices)
{
    cg_upcast u;
    if (!cg_upcast_begin(&u, pool_name(pl->kind, pl->nd), 1, (const cg_tensor **[]){&x}))
        return NULL;
    cg_tensor *idx = NULL, *y = cg_upcast_end(&u, pool_forward(pl, x, indices ? &idx : NULL));
    if (!y) {
        cg_release(idx);
        return NULL;
    }
    if (indices)
        *indices = idx;
    return y;
}

cg_tensor *cg_k_max_pool(const cg_tensor *x, int nd, const cg_pool *o, cg_tensor **indices)
{
    plan_t pl;
    if (!indices)
        return cg_error_null_arg("max_pool", "indices"), NULL;
    *indices = NULL;
    return plan_pool(&pl, WIN_MAX, nd, x, o) ? run_forward(&pl, x, indices) : NULL;
}

cg_tensor *cg_k_avg_pool(const cg_tensor *x, int nd, const cg_pool *o)
{
    plan_t pl;
    return plan_pool(&pl, WIN_AVG, nd, x, o) ? run_forward(&pl, x, NULL) : NULL;
}

cg_tensor *cg_k_adaptive_pool(const cg_tensor *x, int nd, bool max, int64_t oh, int64_t ow,
                              cg_tensor **indices)
{
    plan_t pl;
    if (max && !indices)
        return cg_error_null_arg("adaptive_max_pool", "indices"), NULL;
    if (!plan_adaptive(&pl, max ? WIN_ADAPTIVE_MAX : WIN_ADAPTIVE_AVG, nd, x, oh, ow))
        return NULL;
    return run_forward(&pl, x, max ? indices : NULL);
}

/* ------------------------------------------------------------ backward */
typedef struct {
    const plan_t *pl;
    const float *g;
    const int64_t *idx; /* max: where each output's gradient goes */
    float *dx;
} bwd_job;

/* Each plane's gradient scattered in output order (zeroed first) */
static void bwd_planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const bwd_job *j = ctx;
    const plan_t *pl = j->pl;
    const int64_t H = pl->in[0], W = pl->in[1], OH = pl->out[0], OW = pl->out[1];
    for (int64_t p = p0; p < p1; p++) {
        float *dx = j->dx + p * H * W;
        memset(dx, 0, (size_t)(H * W) * sizeof *dx);
        const float *g = j->g + p * OH * OW;
        if (j->idx) {
            const int64_t *idx = j->idx + p * OH * OW;
            for (int64_t o = 0; o < OH * OW; o++)
                if (idx[o] >= 0 && idx[o] < H * W)
                    dx[idx[o]] += g[o];
            continue;
        }
        for (int64_t oh = 0; oh < OH; oh++) {
            const win_t a = window(pl, 0, oh);
            for (int64_t ow = 0; ow < OW; ow++) {
                const win_t b = window(pl, 1, ow);
                const int64_t div = pl->divisor ? pl->divisor : a.size * b.size;
                const float v = g[oh * OW + ow] / (float)div;
                for (int64_t h = a.lo; h < a.hi; h++)
                    for (int64_t w = b.lo; w < b.hi; w++)
                        dx[h * W + w] += v;
            }
        }
    }
}

/* dx (float32, x's shape) from g (the output's shape) and max's indices */
static cg_tensor *pool_backward(const plan_t *pl, const cg_tensor *g, const cg_tensor *indices)
{
    const int nd = pl->lead + pl->nd;
    if (g->ndim != nd || memcmp(g->shape, pl->out_shape, (size_t)nd * sizeof *g->shape) ||
        (indices && (indices->dtype != CG_I64 || cg_numel(indices) != cg_numel(g)))) {
        char b[96];
        cg_set_error("%s backward: gradient %s does not match the output (or its indices)",
                     pool_name(pl->kind, pl->nd), cg_shape_str(g, b, sizeof b));
        return NULL;
    }
    cg_tensor *gf = g->dtype == CG_F32 ? cg_k_contiguous(g) : cg_k_to(g, CG_F32);
    cg_tensor *ic = gf && indices ? cg_k_contiguous(indices) : NULL;
    cg_tensor *dx = gf && (ic || !indices) ? cg_empty(nd, pl->shape) : NULL;
    if (dx) {
        const int64_t per = pl->out[0] * pl->out[1] * pl->k[0] * pl->k[1] + pl->in[0] * pl->in[1];
        const bwd_job job = {pl, cg_data(gf), ic ? cg_data_i64(ic) : NULL, cg_data(dx)};
        cg_shares_run(pl->P, cg_shares_rows(per), cg_shares_team(pl->P * per > PAR_THRESHOLD),
                      bwd_planes, &job);
    }
    cg_release_all(2, gf, ic);
    return dx;
}

cg_tensor *cg_k_max_pool_backward(const cg_tensor *g, const cg_tensor *indices, const cg_tensor *x,
                                  int nd)
{
    plan_t pl;
    if (!g || !indices)
        return cg_error_null_input("cg_k_max_pool_backward"), NULL;
    if (!plan_begin(&pl, WIN_MAX, nd, x))
        return NULL;
    for (int i = 0; i < nd && g->ndim == x->ndim; i++) /* the output's sizes are g's */
        pl.out[i + 2 - nd] = pl.out_shape[pl.lead + i] = g->shape[pl.lead + i];
    return pool_backward(&pl, g, indices);
}

cg_tensor *cg_k_avg_pool_backward(const cg_tensor *g, const cg_tensor *x, int nd, const cg_pool *o)
{
    plan_t pl;
    if (!g)
        return cg_error_null_input("cg_k_avg_pool_backward"), NULL;
    return plan_pool(&pl, WIN_AVG, nd, x, o) ? pool_backward(&pl, g, NULL) : NULL;
}

cg_tensor *cg_k_adaptive_avg_pool_backward(const cg_tensor *g, const cg_tensor *x, int nd)
{
    plan_t pl;
    if (!g)
        return cg_error_null_input("cg_k_adaptive_avg_pool_backward"), NULL;
    const int64_t oh = g->ndim >= 2 ? g->shape[g->ndim - nd] : 0;
    const int64_t ow = g->ndim >= 1 ? g->shape[g->ndim - 1] : 0;
    if (!plan_adaptive(&pl, WIN_ADAPTIVE_AVG, nd, x, oh, ow))
        return NULL;
    return pool_backward(&pl, g, NULL);
}
