/* cgrad optim: gradient clipping by global norm and the NaN/Inf check.
 *
 * The sum of squares is accumulated in double over fixed blocks of
 * CLIP_BLOCK elements (blocks in parallel, then added in order), so the
 * total is the same for any thread count. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "core/ops.h"
#include "optim/optim.h"

#define CLIP_BLOCK 16384

/* The sum of squares of block b of x (n elements), in double, element
 * by element. */
static double block_squares(const float *x, int64_t n, int64_t b)
{
    double s = 0;
    int64_t e = b * CLIP_BLOCK + CLIP_BLOCK < n ? b * CLIP_BLOCK + CLIP_BLOCK : n;
    for (int64_t i = b * CLIP_BLOCK; i < e; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* The sums of squares of the GROUP whole blocks from block b into part[b,
 * b + GROUP): each block's sum in its own order, as block_squares adds it
 * (the same bits), but the blocks side by side, so that the additions are
 * GROUP independent chains instead of one (a double add's latency bound
 * the single chain: 3% of the translator's step). */
#define GROUP 8
static void group_squares(const float *x, int64_t b, double *part)
{
    double s[GROUP] = {0};
    const float *x0 = x + b * CLIP_BLOCK;
    for (int64_t i = 0; i < CLIP_BLOCK; i++)
        for (int g = 0; g < GROUP; g++) {
            double v = x0[g * CLIP_BLOCK + i];
            s[g] += v * v;
        }
    for (int g = 0; g < GROUP; g++)
        part[b + g] = s[g];
}

/* Sum of squares of n floats, in double, deterministic: fixed blocks of
 * CLIP_BLOCK elements, each summed in order, then the blocks in order. */
static double sum_squares(const float *x, int64_t n)
{
    int64_t nb = (n + CLIP_BLOCK - 1) / CLIP_BLOCK;
    if (nb <= 1)
        return block_squares(x, n, 0);
    double *part = malloc((size_t)nb * sizeof *part);
    if (!part) { /* serial, same block order */
        double s = 0;
        for (int64_t b = 0; b < nb; b++)
            s += block_squares(x, n, b);
        return s;
    }
    const int64_t whole = n / CLIP_BLOCK, ng = whole / GROUP; /* groups of whole blocks */
#pragma omp parallel for schedule(static) if (n >= 4 * CLIP_BLOCK)
    for (int64_t q = 0; q < ng + (nb - ng * GROUP); q++) {
        if (q < ng)
            group_squares(x, q * GROUP, part);
        else
            part[ng * GROUP + (q - ng)] = block_squares(x, n, ng * GROUP + (q - ng));
    }
    double s = 0;
    for (int64_t b = 0; b < nb; b++)
        s += part[b];
    free(part);
    return s;
}

/* Checks params[i] and its grad; false + error naming what is wrong. */
static bool check_grad(const char *what, cg_tensor *const *params, int i)
{
    const cg_tensor *p = params[i];
    if (!p) {
        cg_set_error("%s: parameter %d is NULL", what, i);
        return false;
    }
    if (p->grad && !cg_same_shape(p->grad, p)) {
        char b1[96], b2[96];
        cg_set_error("%s: gradient of parameter %d has shape %s, the parameter %s", what, i,
                     cg_shape_str(p->grad, b1, sizeof b1), cg_shape_str(p, b2, sizeof b2));
        return false;
    }
    return true;
}

/* PyTorch, in float32: clip_coef = max_norm / (total_norm + 1e-6), where a
 * Python number divided by a tensor is reciprocal() * number; then
 * clamp(max=1) and grad.mul_(coef). A factor of 1 changes nothing. */
static float clip_coef(double total, double max_norm)
{
    float denom = (float)total + 1e-6f;
    return (1.0f / denom) * (float)max_norm;
}

static double global_norm(const char *what, int n, cg_tensor *const *params)
{
    if (n < 0 || (n > 0 && !params)) {
        cg_set_error("%s: %d parameters with a %s array", what, n, params ? "non-NULL" : "NULL");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!check_grad(what, params, i))
            return -1;
    double ss = 0;
    for (int i = 0; i < n; i++) {
        const cg_tensor *g = params[i]->grad;
        if (!g)
            continue;
        cg_tensor *c = cg_k_contiguous(g);
        if (!c)
            return -1;
        ss += sum_squares(cg_data(c), cg_numel(c));
        cg_release(c);
    }
    return sqrt(ss);
}

double cg_grad_norm(int n, cg_tensor *const *params) { return global_norm("grad_norm", n, params); }

double cg_clip_grad_norm(int n, cg_tensor *const *params, double max_norm)
{
    if (!(max_norm >= 0)) {
        cg_set_error("clip_grad_norm: max_norm %g must be >= 0", max_norm);
        return -1;
    }
    double total = global_norm("clip_grad_norm", n, params);
    if (total < 0 || !isfinite(total))
        return total;
    float coef = clip_coef(total, max_norm);
    if (!(coef < 1.0f))
        return total;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && !cg_k_muls_(params[i]->grad, coef))
            return -1;
    return total;
}

/* The owned run [*lo, *hi) of parameter i's gradient as contiguous floats:
 * *c is the (possibly copied) gradient to release, NULL if there is none. */
static bool owned_grad(const cg_optim *o, int i, const char *what, cg_tensor **c, int64_t *lo,
                       int64_t *hi)
{
    *c = NULL;
    const cg_tensor *p = cg_optim_param_tensor(o, i);
    if (!p || !cg_optim_shard_range(o, i, lo, hi))
        return false;
    if (!p->grad)
        return true;
    if (!cg_same_shape(p->grad, p)) {
        char b1[96], b2[96];
        cg_set_error("%s: gradient of '%s' has shape %s, the parameter %s", what,
                     cg_optim_param_name(o, i), cg_shape_str(p->grad, b1, sizeof b1),
                     cg_shape_str(p, b2, sizeof b2));
        return false;
    }
    *c = cg_k_contiguous(p->grad);
    return *c != NULL;
}

double cg_optim_grad_sqsum(const cg_optim *o)
{
    if (!o) {
        cg_set_error("optim_grad_sqsum: optimizer is NULL");
        return -1;
    }
    double ss = 0;
    for (int i = 0; i < cg_optim_count(o); i++) {
        cg_tensor *c;
        int64_t lo, hi;
        if (!owned_grad(o, i, "optim_grad_sqsum", &c, &lo, &hi))
            return -1;
        if (c)
            ss += sum_squares(cg_data(c) + lo, hi - lo);
        cg_release(c);
    }
    return ss;
}

bool cg_optim_clip_grads_by(cg_optim *o, double total, double max_norm)
{
    if (!o || !(max_norm >= 0) || !(total >= 0 || isnan(total))) {
        cg_set_error("optim_clip_grads_by: %s",
                     !o ? "optimizer is NULL" : "max_norm and total must be >= 0");
        return false;
    }
    if (!isfinite(total))
        return true;
    float coef = clip_coef(total, max_norm);
    if (!(coef < 1.0f))
        return true;
    for (int i = 0; i < cg_optim_count(o); i++) {
        cg_tensor *p = cg_optim_param_tensor(o, i), *g = p->grad;
        int64_t lo, hi;
        if (!g)
            continue;
        if (!cg_optim_shard_range(o, i, &lo, &hi))
            return false;
        if (lo == 0 && hi == cg_numel(p)) { /* whole: as cg_clip_grad_norm */
            if (!cg_k_muls_(g, coef))
                return false;
            continue;
        }
        if (!cg_same_shape(g, p) || !cg_is_contiguous(g)) {
            cg_set_error("optim_clip_grads_by: gradient of '%s' is not a contiguous tensor of "
                         "its parameter's shape",
                         cg_optim_param_name(o, i));
            return false;
        }
        float *x = cg_data(g);
        for (int64_t k = lo; k < hi; k++)
            x[k] *= coef;
        cg_tensor_modified(g);
    }
    return true;
}

double cg_optim_clip_grad_norm(cg_optim *o, double max_norm)
{
    if (!o) {
        cg_set_error("clip_grad_norm: optimizer is NULL");
        return -1;
    }
    if (cg_optim_is_sharded(o)) { /* the owned elements only */
        if (!(max_norm >= 0)) {
            cg_set_error("clip_grad_norm: max_norm %g must be >= 0", max_norm);
            return -1;
        }
        double ss = cg_optim_grad_sqsum(o);
        if (ss < 0)
            return -1;
        double total = sqrt(ss);
        return cg_optim_clip_grads_by(o, total, max_norm) ? total : -1;
    }
    int n = cg_optim_count(o);
    cg_tensor **ps = malloc((size_t)(n > 0 ? n : 1) * sizeof *ps);
    if (!ps) {
        cg_set_error("clip_grad_norm: out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++)
        ps[i] = cg_optim_param_tensor(o, i);
    double total = cg_clip_grad_norm(n, ps, max_norm);
    free(ps);
    return total;
}

/* Flat index of the first non-finite element of t (any strides), or -1;
 * *val receives the element. */
static int64_t first_nonfinite(const cg_tensor *t, float *val)
{
    cg_tensor *c = cg_k_contiguous(t);
    if (!c)
        return -1;
    const float *x = cg_data(c);
    int64_t n = cg_numel(c), at = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            at = i;
            *val = x[i];
            break;
        }
    cg_release(c);
    return at;
}

int cg_first_nonfinite_grad(int n, cg_tensor *const *params, int64_t *elem)
{
    for (int i = 0; params && i < n; i++) {
        if (!params[i] || !params[i]->grad)
            continue;
        float v;
        int64_t at = first_nonfinite(params[i]->grad, &v);
        if (at >= 0) {
            if (elem)
                *elem = at;
            return i;
        }
    }
    return -1;
}

bool cg_optim_grads_finite(const cg_optim *o, int *bad)
{
    int n = cg_optim_count(o);
    for (int i = 0; i < n; i++) {
        const cg_tensor *p = cg_optim_param_tensor(o, i);
        float v;
        int64_t at = -1, lo = 0, hi = 0;
        if (cg_optim_is_sharded(o)) { /* the owned elements only */
            cg_tensor *c;
            if (owned_grad(o, i, "optim_grads_finite", &c, &lo, &hi) && c) {
                const float *x = cg_data(c);
                for (int64_t k = lo; k < hi && at < 0; k++)
                    if (!isfinite(x[k])) {
                        at = k;
                        v = x[k];
                    }
            }
            cg_release(c);
        } else if (p->grad) {
            at = first_nonfinite(p->grad, &v);
        }
        if (at >= 0) {
            if (bad)
                *bad = i;
            cg_set_error("non-finite gradient: '%s' has %s at element %" PRId64,
                         cg_optim_param_name(o, i), isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"),
                         at);
            return false;
        }
    }
    if (bad)
        *bad = -1;
    return true;
}
