/* cgrad core: pooling over the last one, two or three dims (declared in
 * core/ops.h, "pooling"): max (with its indices), average, adaptive
 * average and adaptive max, as PyTorch's F.max_pool1d/2d/3d,
 * avg_pool1d/2d/3d and adaptive_*_pool1d/2d/3d, their backwards, and
 * F.max_unpool1d/2d/3d (the inverse of max pool given its indices).
 *
 * The input is copied into contiguous float32 planes [P, D, H, W] (P the
 * leading dims: C or N * C; a 2d pool is a 3d one with D = 1, a 1d pool
 * one with D = H = 1). Each output
 * element reads its window in row-major order; the backwards scatter each
 * plane's output gradient in output order, a plane a task, so the bits do
 * not depend on the thread count. bfloat16 and float16 inputs are computed
 * in float32 and the values rounded back (core/upcast.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

typedef enum { WIN_MAX, WIN_AVG, WIN_ADAPTIVE_MAX, WIN_ADAPTIVE_AVG, WIN_UNPOOL } win_kind;

/* A pool's geometry: planes [P, D, H, W] to [P, OD, OH, OW]; per plan dim
 * (0: D, 1: H, 2: W) kernel, stride, padding, dilation (a pool of nd
 * spatial dims reads plan dims 3 - nd to 2; the others are identity
 * windows of size 1). */
typedef struct {
    win_kind kind;
    int nd, lead; /* spatial dims (1 to 3); leading dims (1 or 2) */
    int64_t P, in[3], out[3], k[3], s[3], p[3], d[3];
    bool exclude_pad;
    int64_t divisor;
    int64_t shape[5], out_shape[5];
} plan_t;

static const char *const KIND_NAME[3][5] = {
    {"max_pool1d", "avg_pool1d", "adaptive_max_pool1d", "adaptive_avg_pool1d", "max_unpool1d"},
    {"max_pool2d", "avg_pool2d", "adaptive_max_pool2d", "adaptive_avg_pool2d", "max_unpool2d"},
    {"max_pool3d", "avg_pool3d", "adaptive_max_pool3d", "adaptive_avg_pool3d", "max_unpool3d"},
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
    for (int i = 0; i < 3; i++) { /* the dims before the pool's: size 1, identity */
        pl->in[i] = i < 3 - pl->nd ? 1 : x->shape[pl->lead + i - (3 - pl->nd)];
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
    if (nd < 1 || nd > 3) {
        cg_set_error("pooling: %d spatial dims, expected 1 to 3", nd);
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
        cg_set_error("avg_pool1d: divisor_override is avg_pool2d's and avg_pool3d's only");
        return false;
    }
    if (kind == WIN_AVG && o->divisor_override < 0) {
        cg_set_error("%s: divisor_override is %lld, expected > 0 (0: none)", op,
                     (long long)o->divisor_override);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        const int j = i + 3 - nd; /* the plan's dim */
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

/* size: the nd output sizes */
static bool plan_adaptive(plan_t *pl, win_kind kind, int nd, const cg_tensor *x,
                          const int64_t *size)
{
    if (!plan_begin(pl, kind, nd, x))
        return false;
    if (!size)
        return cg_error_null_arg(pool_name(kind, nd), "output_size");
    for (int i = 0; i < nd; i++) {
        if (size[i] < 1) {
            cg_set_error("%s: output_size %lld, expected >= 1", pool_name(kind, nd),
                         (long long)size[i]);
            return false;
        }
        pl->out[i + 3 - nd] = size[i];
        pl->out_shape[pl->lead + i] = size[i];
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

/* A plan's input and output planes, and its output count times its
 * window: a plane's work */
static int64_t plane_in(const plan_t *pl) { return pl->in[0] * pl->in[1] * pl->in[2]; }
static int64_t plane_out(const plan_t *pl) { return pl->out[0] * pl->out[1] * pl->out[2]; }
static int64_t plane_work(const plan_t *pl)
{
    return plane_out(pl) * pl->k[0] * pl->k[1] * pl->k[2];
}

/* ------------------------------------------------------------- forward */
/* One plane's work: x (forward: the input plane; backward: the gradient
 * of the output plane), y (forward: the output plane; backward: dx, the
 * input plane's gradient), idx (max's indices of the output plane) */
typedef struct {
    const plan_t *pl;
    const float *x;
    float *y;
    int64_t *idx;
} plane_t;

typedef void (*out_fn)(const plane_t *t, int64_t o, const win_t *w);

/* fn on each output of a plane in order: its flat index o within the
 * plane and its windows along D, H and W */
static void each_output(const plane_t *t, out_fn fn)
{
    const plan_t *pl = t->pl;
    int64_t o = 0;
    win_t w[3];
    for (int64_t od = 0; od < pl->out[0]; od++) {
        w[0] = window(pl, 0, od);
        for (int64_t oh = 0; oh < pl->out[1]; oh++) {
            w[1] = window(pl, 1, oh);
            for (int64_t ow = 0; ow < pl->out[2]; ow++, o++) {
                w[2] = window(pl, 2, ow);
                fn(t, o, w);
            }
        }
    }
}

/* the divisor of an average's window w */
static int64_t divisor(const plan_t *pl, const win_t *w)
{
    return pl->divisor ? pl->divisor : w[0].size * w[1].size * w[2].size;
}

/* PyTorch's CPU rule: > or NaN takes it */
static void max_out(const plane_t *t, int64_t o, const win_t *w)
{
    const int64_t H = t->pl->in[1], W = t->pl->in[2];
    float m = -INFINITY;
    int64_t mi = (w[0].lo * H + w[1].lo) * W + w[2].lo;
    for (int64_t d = w[0].lo; d < w[0].hi; d += w[0].step)
        for (int64_t h = w[1].lo; h < w[1].hi; h += w[1].step)
            for (int64_t x = w[2].lo; x < w[2].hi; x += w[2].step) {
                const float v = t->x[(d * H + h) * W + x];
                if (v > m || isnan(v)) {
                    m = v;
                    mi = (d * H + h) * W + x;
                }
            }
    t->y[o] = m;
    t->idx[o] = mi;
}

static void avg_out(const plane_t *t, int64_t o, const win_t *w)
{
    const int64_t H = t->pl->in[1], W = t->pl->in[2];
    double s = 0.0;
    for (int64_t d = w[0].lo; d < w[0].hi; d++)
        for (int64_t h = w[1].lo; h < w[1].hi; h++)
            for (int64_t x = w[2].lo; x < w[2].hi; x++)
                s += t->x[(d * H + h) * W + x];
    t->y[o] = (float)(s / (double)divisor(t->pl, w));
}

/* the planes [p0, p1) of ctx (a plane_t of plane 0) */
static void fwd_planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const plane_t *j = ctx;
    const plan_t *pl = j->pl;
    const int64_t in = plane_in(pl), out = plane_out(pl);
    const bool is_max = pl->kind == WIN_MAX || pl->kind == WIN_ADAPTIVE_MAX;
    for (int64_t p = p0; p < p1; p++) {
        const plane_t t = {pl, j->x + p * in, j->y + p * out, is_max ? j->idx + p * out : NULL};
        each_output(&t, is_max ? max_out : avg_out);
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
    const int64_t per = plane_work(pl);
    const plane_t job = {pl, cg_data(xc), cg_data(y), idx ? cg_data_i64(idx) : NULL};
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

cg_tensor *cg_k_adaptive_pool(const cg_tensor *x, int nd, bool max, const int64_t *output_size,
                              cg_tensor **indices)
{
    plan_t pl;
    if (max && !indices)
        return cg_error_null_arg("adaptive_max_pool", "indices"), NULL;
    if (!plan_adaptive(&pl, max ? WIN_ADAPTIVE_MAX : WIN_ADAPTIVE_AVG, nd, x, output_size))
        return NULL;
    return run_forward(&pl, x, max ? indices : NULL);
}

/* ------------------------------------------------------------ backward */
/* an average's output gradient t->x[o] spread over its window */
static void avg_back(const plane_t *t, int64_t o, const win_t *w)
{
    const int64_t H = t->pl->in[1], W = t->pl->in[2];
    const float v = t->x[o] / (float)divisor(t->pl, w);
    for (int64_t d = w[0].lo; d < w[0].hi; d++)
        for (int64_t h = w[1].lo; h < w[1].hi; h++)
            for (int64_t x = w[2].lo; x < w[2].hi; x++)
                t->y[(d * H + h) * W + x] += v;
}

/* Each plane's gradient scattered in output order (zeroed first); ctx: a
 * plane_t of plane 0 (x: g, y: dx, idx: max's indices) */
static void bwd_planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const plane_t *j = ctx;
    const plan_t *pl = j->pl;
    const int64_t in = plane_in(pl), out = plane_out(pl);
    for (int64_t p = p0; p < p1; p++) {
        const plane_t t = {pl, j->x + p * out, j->y + p * in, j->idx ? j->idx + p * out : NULL};
        memset(t.y, 0, (size_t)in * sizeof *t.y);
        if (!t.idx) {
            each_output(&t, avg_back);
            continue;
        }
        for (int64_t o = 0; o < out; o++)
            if (t.idx[o] >= 0 && t.idx[o] < in)
                t.y[t.idx[o]] += t.x[o];
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
    cg_tensor *gf = cg_upcast_dense(g, false);
    cg_tensor *ic = gf && indices ? cg_k_contiguous(indices) : NULL;
    cg_tensor *dx = gf && (ic || !indices) ? cg_empty(nd, pl->shape) : NULL;
    if (dx) {
        const int64_t per = plane_work(pl) + plane_in(pl);
        const plane_t job = {pl, cg_data(gf), cg_data(dx), ic ? cg_data_i64(ic) : NULL};
        cg_shares_run(pl->P, cg_shares_rows(per), cg_shares_team(pl->P * per > PAR_THRESHOLD),
                      bwd_planes, &job);
    }
    cg_release_all(2, gf, ic);
    return dx;
}

/* pl of kind over x for a backward of g through indices (fn: the
 * caller, for the NULL message): the output's sizes are g's */
static bool plan_grad(plan_t *pl, win_kind kind, int nd, const cg_tensor *g,
                      const cg_tensor *indices, const cg_tensor *x, const char *fn)
{
    if (!g || !indices)
        return cg_error_null_input(fn);
    if (!plan_begin(pl, kind, nd, x))
        return false;
    for (int i = 0; i < nd && g->ndim == x->ndim; i++)
        pl->out[i + 3 - nd] = pl->out_shape[pl->lead + i] = g->shape[pl->lead + i];
    return true;
}

cg_tensor *cg_k_max_pool_backward(const cg_tensor *g, const cg_tensor *indices, const cg_tensor *x,
                                  int nd)
{
    plan_t pl;
    if (!plan_grad(&pl, WIN_MAX, nd, g, indices, x, "cg_k_max_pool_backward"))
        return NULL;
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
    int64_t size[3] = {0, 0, 0}; /* g's last nd sizes (0: refused) */
    for (int i = 0; i < nd && i < 3 && g->ndim >= nd; i++)
        size[i] = g->shape[g->ndim - nd + i];
    if (!plan_adaptive(&pl, WIN_ADAPTIVE_AVG, nd, x, size))
        return NULL;
    return pool_backward(&pl, g, NULL);
}

/* ------------------------------------------------------------ max unpool */
/* pl for unpooling x (its indices checked against it) into planes of the
 * nd sizes size (NULL: PyTorch's default, (in - 1) * stride - 2 * padding
 * + kernel_size), which must lie strictly within a stride of the default
 * (F._unpool_output_size's rule); false + error */
static bool plan_unpool(plan_t *pl, int nd, const cg_tensor *x, const cg_tensor *indices,
                        const cg_pool *o, const int64_t *size)
{
    if (!plan_begin(pl, WIN_UNPOOL, nd, x))
        return false;
    const char *op = pool_name(WIN_UNPOOL, nd);
    if (!indices || !o)
        return cg_error_null_input(op);
    for (int i = pl->lead - 1; i < x->ndim; i++) /* PyTorch 1.13 refuses an empty one */
        if (x->shape[i] == 0) {
            char b[96];
            cg_set_error("%s: expected input to have non-zero size for non-batch dimensions, but "
                         "got %s with dimension %d being empty (as PyTorch)",
                         op, cg_shape_str(x, b, sizeof b), i);
            return false;
        }
    if (indices->dtype != CG_I64 || indices->ndim != x->ndim ||
        memcmp(indices->shape, x->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char b[96], c[96];
        cg_set_error("%s: indices %s (%s), expected int64 of the input's shape %s", op,
                     cg_shape_str(indices, b, sizeof b), cg_dtype_name(indices->dtype),
                     cg_shape_str(x, c, sizeof c));
        return false;
    }
    if (o->ceil_mode || o->exclude_pad || o->divisor_override) {
        cg_set_error("%s: ceil_mode, exclude_pad and divisor_override are not max_unpool's options",
                     op);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        const int j = i + 3 - nd;
        const int64_t k = o->kernel_size[i], s = o->stride[i] ? o->stride[i] : k;
        if (k <= 0 || s <= 0 || o->padding[i] < 0 || o->dilation[i] > 1 || o->dilation[i] < 0) {
            cg_set_error("%s: kernel_size %lld, stride %lld, padding %lld, dilation %lld: expected "
                         "kernel_size, stride (0: the kernel's) > 0, padding >= 0, dilation 0 or 1",
                         op, (long long)k, (long long)o->stride[i], (long long)o->padding[i],
                         (long long)o->dilation[i]);
            return false;
        }
        const int64_t def = (pl->in[j] - 1) * s - 2 * o->padding[i] + k;
        const int64_t want = size ? size[i] : def;
        if (size && (want <= def - s || want >= def + s)) {
            cg_set_error("%s: output_size %lld along spatial dim %d, expected between %lld and "
                         "%lld (exclusive)",
                         op, (long long)want, i, (long long)(def - s), (long long)(def + s));
            return false;
        }
        if (want < 1) {
            char b[96];
            cg_set_error("%s: input %s gives output size %lld along spatial dim %d", op,
                         cg_shape_str(x, b, sizeof b), (long long)want, i);
            return false;
        }
        pl->out[j] = want;
        pl->out_shape[pl->lead + i] = want;
    }
    return true;
}

typedef struct {
    const plan_t *pl;
    const float *src; /* forward: x; backward: g */
    const int64_t *idx;
    float *dst; /* forward: y (the output planes); backward: dx (x's shape) */
} unpool_job;

/* Each plane's inputs written at their indices, in input order (a
 * repeated index: the last write stays, as PyTorch's CPU kernel) */
static void unpool_planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const unpool_job *j = ctx;
    const int64_t in = plane_in(j->pl), out = plane_out(j->pl);
    for (int64_t p = p0; p < p1; p++) {
        float *y = j->dst + p * out;
        const float *x = j->src + p * in;
        const int64_t *idx = j->idx + p * in;
        memset(y, 0, (size_t)out * sizeof *y);
        for (int64_t i = 0; i < in; i++)
            y[idx[i]] = x[i];
    }
}

/* The backward: each input's gradient read at its index */
static void unpool_bwd_planes(int64_t p0, int64_t p1, int thread, const void *ctx)
{
    (void)thread;
    const unpool_job *j = ctx;
    const int64_t in = plane_in(j->pl), out = plane_out(j->pl);
    for (int64_t p = p0; p < p1; p++) {
        const float *g = j->src + p * out;
        const int64_t *idx = j->idx + p * in;
        float *dx = j->dst + p * in;
        for (int64_t i = 0; i < in; i++)
            dx[i] = idx[i] >= 0 && idx[i] < out ? g[idx[i]] : 0.0f;
    }
}

/* idx (contiguous, pl's input planes) all within the output planes;
 * false + PyTorch's error */
static bool unpool_indices_ok(const plan_t *pl, const int64_t *idx)
{
    const int64_t out = plane_out(pl), n = pl->P * plane_in(pl);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= out) {
            char sz[64];
            int len = 0;
            for (int d = 3 - pl->nd; d < 3; d++)
                len += snprintf(sz + len, sizeof sz - (size_t)len,
                                d > 3 - pl->nd ? "x%lld" : "%lld", (long long)pl->out[d]);
            cg_set_error("%s: found an invalid max index %lld (the output planes are %s)",
                         pool_name(WIN_UNPOOL, pl->nd), (long long)idx[i], sz);
            return false;
        }
    return true;
}

/* Run job over pl's planes: fn writes dst (shape, float32) from src
 * (float32 of any layout) and the indices */
static cg_tensor *unpool_run(const plan_t *pl, const cg_tensor *src, const cg_tensor *indices,
                             const int64_t *shape, bool check, cg_chunk_fn fn)
{
    const int nd = pl->lead + pl->nd;
    cg_tensor *sc = cg_upcast_dense(src, false);
    cg_tensor *ic = sc ? cg_k_contiguous(indices) : NULL;
    cg_tensor *dst =
        ic && (!check || unpool_indices_ok(pl, cg_data_i64(ic))) ? cg_empty(nd, shape) : NULL;
    if (dst) {
        const int64_t per = plane_in(pl) + plane_out(pl);
        const unpool_job job = {pl, cg_data(sc), cg_data_i64(ic), cg_data(dst)};
        cg_shares_run(pl->P, cg_shares_rows(per), cg_shares_team(pl->P * per > PAR_THRESHOLD), fn,
                      &job);
    }
    cg_release_all(2, sc, ic);
    return dst;
}

cg_tensor *cg_k_max_unpool(const cg_tensor *x, const cg_tensor *indices, int nd, const cg_pool *o,
                           const int64_t *output_size)
{
    plan_t pl;
    if (!plan_unpool(&pl, nd, x, indices, o, output_size))
        return NULL;
    cg_upcast u;
    if (!cg_upcast_begin(&u, pool_name(WIN_UNPOOL, nd), 1, (const cg_tensor **[]){&x}))
        return NULL;
    return cg_upcast_end(&u, unpool_run(&pl, x, indices, pl.out_shape, true, unpool_planes));
}

cg_tensor *cg_k_max_unpool_backward(const cg_tensor *g, const cg_tensor *indices,
                                    const cg_tensor *x, int nd)
{
    plan_t pl;
    if (!plan_grad(&pl, WIN_UNPOOL, nd, g, indices, x, "cg_k_max_unpool_backward"))
        return NULL;
    if (g->ndim != x->ndim || memcmp(g->shape, x->shape, (size_t)pl.lead * sizeof *g->shape) ||
        indices->dtype != CG_I64 || cg_numel(indices) != cg_numel(x)) {
        char b[96];
        cg_set_error("%s backward: gradient %s does not match the output (or its indices)",
                     pool_name(WIN_UNPOOL, nd), cg_shape_str(g, b, sizeof b));
        return NULL;
    }
    return unpool_run(&pl, g, indices, pl.shape, false, unpool_bwd_planes);
}
