/* The learned and the randomized leaky ReLUs: F.prelu(x, weight) and its
 * backward, and F.rrelu's draws in training (core/ops.h). x is read as a
 * contiguous float32 [N, C, S] (N the first dim and C the second of an
 * input of 2 dims or more; N = C = 1 below, PyTorch 1.13's rule): rows of
 * S elements, each row computed by one thread, and the weight's gradient
 * summed per row, then over the rows in row order, so the same bits for
 * any thread count. */
#include <stdlib.h>

#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/shares.h"
#include "core/tensor_impl.h"
#include "core/upcast.h"

#define PRELU_RUN 16384

/* t as a contiguous float32 tensor (a new reference: t itself when it is
 * one already) */
static cg_tensor *dense_f32(const cg_tensor *t) { return cg_upcast_dense(t, false); }

/* x's channels (its dim 1; 1 below 2 dims), checked against w: false +
 * one line */
static bool prelu_args(const char *op, const cg_tensor *x, const cg_tensor *w, int64_t *channels)
{
    if (!x || !w)
        return cg_error_null_input(op), false;
    const cg_tensor *t[2] = {x, w};
    for (int k = 0; k < 2; k++)
        if (!cg_dtype_is_float(t[k]->dtype)) {
            cg_set_error("%s: the %s is %s, expected a float tensor", op, k ? "weight" : "input",
                         cg_dtype_name(t[k]->dtype));
            return false;
        }
    char a[96], b[96];
    if (w->ndim > 1) {
        cg_set_error("%s: the weight must be a scalar or 1-d (got %s)", op,
                     cg_shape_str(w, a, sizeof a));
        return false;
    }
    const int64_t c = x->ndim >= 2 ? x->shape[1] : 1, n = cg_numel(w);
    if (n != 1 && n != c) {
        cg_set_error("%s: a weight of %lld elements for the input %s of %lld channel%s (its dim 1; "
                     "1 below 2 dims): expected 1 or %lld (weight %s)",
                     op, (long long)n, cg_shape_str(x, a, sizeof a), (long long)c,
                     c == 1 ? "" : "s", (long long)c, cg_shape_str(w, b, sizeof b));
        return false;
    }
    *channels = c;
    return true;
}

typedef struct {
    const float *x, *w, *g; /* w NULL: dx not wanted (w not read) */
    float *y;               /* the forward's output, or the backward's dx (or NULL) */
    double *part;           /* the backward's sum of g x over x <= 0, per row */
    int64_t C, S;
    bool one; /* one weight for every channel */
} prelu_job;

/* Rows [r0, r1) of S elements: y = x > 0 ? x : a x; with g, dx = x > 0 ?
 * g : a g (the slope at 0, as PyTorch's) and the row's part of dw */
static void prelu_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const prelu_job *j = ctx;
    const int64_t S = j->S;
    for (int64_t r = r0; r < r1; r++) {
        const float a = j->w ? j->w[j->one ? 0 : r % j->C] : 0.0f;
        const float *x = j->x + r * S;
        float *y = j->y ? j->y + r * S : NULL;
        if (!j->g) {
            for (int64_t i = 0; i < S; i++)
                y[i] = x[i] > 0.0f ? x[i] : a * x[i];
            continue;
        }
        const float *g = j->g + r * S;
        if (y)
            for (int64_t i = 0; i < S; i++)
                y[i] = x[i] > 0.0f ? g[i] : a * g[i];
        if (!j->part)
            continue;
        double s = 0;
        for (int64_t i = 0; i < S; i++)
            s += x[i] > 0.0f ? 0.0 : (double)g[i] * x[i];
        j->part[r] = s;
    }
}

static void prelu_run(const prelu_job *j, int64_t rows)
{
    const int64_t grain = j->S >= PRELU_RUN ? 1 : PRELU_RUN / (j->S ? j->S : 1);
    cg_shares_run(rows, grain, cg_shares_team(rows * j->S > PRELU_RUN), prelu_rows, j);
}

cg_tensor *cg_k_prelu(const cg_tensor *x, const cg_tensor *w)
{
    int64_t C;
    if (!prelu_args("prelu", x, w, &C))
        return NULL;
    cg_tensor *xd = dense_f32(x), *wd = xd ? dense_f32(w) : NULL;
    cg_tensor *y = wd ? cg_empty(x->ndim, x->shape) : NULL;
    const int64_t N = x->ndim >= 2 ? x->shape[0] : 1, n = cg_numel(x);
    if (y && n) {
        const prelu_job j = {cg_data(xd), cg_data(wd), NULL,        cg_data(y),
                             NULL,        C,           n / (N * C), cg_numel(w) == 1};
        prelu_run(&j, N * C);
    }
    cg_release_all(2, xd, wd);
    return cg_upcast_round(y, x->dtype);
}

/* dw from the rows' parts: per weight, the rows of its channel in row
 * order, summed in double and rounded once */
static cg_tensor *prelu_dw(const cg_tensor *w, const double *part, int64_t N, int64_t C)
{
    cg_tensor *dw = cg_empty(w->ndim, w->shape);
    if (!dw)
        return NULL;
    float *d = cg_data(dw);
    const int64_t k = cg_numel(w);
    for (int64_t c = 0; c < k; c++) {
        double s = 0;
        for (int64_t r = c; r < N * C; r += k)
            s += part[r];
        d[c] = (float)s;
    }
    return dw;
}

bool cg_k_prelu_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *g, cg_tensor **dx,
                         cg_tensor **dw)
{
    int64_t C;
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    if (!prelu_args("prelu_backward", x, w, &C))
        return false;
    if (!g || !cg_same_shape(g, x) || !cg_dtype_is_float(g->dtype)) {
        char a[96], b[96];
        cg_set_error("prelu_backward: gradient %s for the input %s (a float tensor of its shape)",
                     g ? cg_shape_str(g, a, sizeof a) : "NULL", cg_shape_str(x, b, sizeof b));
        return false;
    }
    const int64_t N = x->ndim >= 2 ? x->shape[0] : 1, n = cg_numel(x), rows = N * C;
    /* w is read for dx only (autograd keeps it for that only) */
    cg_tensor *xd = dense_f32(x), *wd = xd && dx ? dense_f32(w) : NULL;
    cg_tensor *gd = xd && (wd || !dx) ? dense_f32(g) : NULL;
    cg_tensor *rx = gd && dx ? cg_empty(x->ndim, x->shape) : NULL;
    double *part = gd && dw ? calloc((size_t)rows + 1, sizeof *part) : NULL;
    bool ok = gd && (!dx || rx) && (!dw || part);
    if (gd && (!dx || rx) && dw && !part)
        cg_set_error("prelu_backward: out of memory");
    if (ok && n) {
        const prelu_job j = {
            cg_data(xd), wd ? cg_data(wd) : NULL, cg_data(gd), rx ? cg_data(rx) : NULL, part, C,
            n / rows,    cg_numel(w) == 1};
        prelu_run(&j, rows);
    }
    cg_tensor *rw = ok && dw ? prelu_dw(w, part, n ? N : 0, C) : NULL;
    ok = ok && (!dw || rw);
    free(part);
    cg_release_all(3, xd, wd, gd);
    rx = ok && rx ? cg_upcast_round(rx, x->dtype) : (cg_release(rx), NULL);
    if (!ok || (dx && !rx)) {
        cg_release_all(2, rx, rw);
        return false;
    }
    if (dx)
        *dx = rx;
    if (dw)
        *dw = rw;
    return true;
}

/* ------------------------------------------------------------- rrelu */
typedef struct {
    const float *x;
    float *y, *noise;
    uint64_t key, base;
    float lower, width;
} rrelu_job;

/* Elements [i0, i1): the slope of element i is lower + width u, u draw
 * (base + i) of key; noise = x > 0 ? 1 : slope, y = x noise */
static void rrelu_run(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const rrelu_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        const float u = cg_rng_draw_unit(cg_rng_draw(j->key, j->base + (uint64_t)i));
        const float a = j->x[i] > 0.0f ? 1.0f : j->lower + j->width * u;
        j->noise[i] = a;
        j->y[i] = j->x[i] * a;
    }
}

bool cg_k_rrelu_bounds_ok(float lower, float upper)
{
    if (!(lower <= upper)) { /* NaN too */
        cg_set_error("rrelu: lower %g must not exceed upper %g", (double)lower, (double)upper);
        return false;
    }
    return true;
}

cg_tensor *cg_k_rrelu(const cg_tensor *x, float lower, float upper, cg_rng *rng, cg_tensor **noise)
{
    if (noise)
        *noise = NULL;
    if (!x || !noise)
        return cg_error_null_input("rrelu"), NULL;
    if (!cg_k_rrelu_bounds_ok(lower, upper))
        return NULL;
    if (!rng)
        return cg_k_leaky_relu(x, cg_k_rrelu_slope(lower, upper));
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("rrelu: the input is %s, expected a float tensor", cg_dtype_name(x->dtype));
        return NULL;
    }
    const int64_t n = cg_numel(x);
    cg_tensor *xd = dense_f32(x), *y = xd ? cg_empty(x->ndim, x->shape) : NULL;
    cg_tensor *m = y ? cg_empty(x->ndim, x->shape) : NULL;
    if (m) {
        const rrelu_job j = {cg_data(xd),
                             cg_data(y),
                             cg_data(m),
                             cg_rng_key(rng->seed),
                             cg_rng_take(rng, (uint64_t)n),
                             lower,
                             upper - lower};
        cg_shares_run(n, PRELU_RUN, cg_shares_team(n > PRELU_RUN), rrelu_run, &j);
    }
    cg_release(xd);
    y = m ? cg_upcast_round(y, x->dtype) : (cg_release(y), NULL);
    if (!y) {
        cg_release(m);
        return NULL;
    }
    *noise = m;
    return y;
}

float cg_k_rrelu_slope(float lower, float upper)
{
    return (float)(((double)lower + (double)upper) / 2.0);
}
