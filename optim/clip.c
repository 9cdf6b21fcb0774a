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

/* Sum of squares of n floats, in double, deterministic. */
static double sum_squares(const float *x, int64_t n)
{
    int64_t nb = (n + CLIP_BLOCK - 1) / CLIP_BLOCK;
    if (nb <= 1) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (double)x[i] * x[i];
        return s;
    }
    double *part = malloc((size_t)nb * sizeof *part);
    if (!part) { /* serial, same block order */
        double s = 0;
        for (int64_t b = 0; b < nb; b++) {
            double sb = 0;
            int64_t e = b * CLIP_BLOCK + CLIP_BLOCK < n ? b * CLIP_BLOCK + CLIP_BLOCK : n;
            for (int64_t i = b * CLIP_BLOCK; i < e; i++)
                sb += (double)x[i] * x[i];
            s += sb;
        }
        return s;
    }
#pragma omp parallel for schedule(static) if (n >= 4 * CLIP_BLOCK)
    for (int64_t b = 0; b < nb; b++) {
        double sb = 0;
        int64_t e = b * CLIP_BLOCK + CLIP_BLOCK < n ? b * CLIP_BLOCK + CLIP_BLOCK : n;
        for (int64_t i = b * CLIP_BLOCK; i < e; i++)
            sb += (double)x[i] * x[i];
        part[b] = sb;
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

double cg_grad_norm(int n, cg_tensor *const *params)
{
    return global_norm("grad_norm", n, params);
}

double cg_clip_grad_norm(int n, cg_tensor *const *params, double max_norm)
{
    if (!(max_norm >= 0)) {
        cg_set_error("clip_grad_norm: max_norm %g must be >= 0", max_norm);
        return -1;
    }
    double total = global_norm("clip_grad_norm", n, params);
    if (total < 0 || !isfinite(total))
        return total;
    /* PyTorch, in float32: clip_coef = max_norm / (total_norm + 1e-6), where
     * a Python number divided by a tensor is reciprocal() * number; then
     * clamp(max=1) and grad.mul_(coef). A factor of 1 changes nothing. */
    float denom = (float)total + 1e-6f;
    float coef = (1.0f / denom) * (float)max_norm;
    if (!(coef < 1.0f))
        return total;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && !cg_k_muls_(params[i]->grad, coef))
            return -1;
    return total;
}

double cg_optim_clip_grad_norm(cg_optim *o, double max_norm)
{
    if (!o) {
        cg_set_error("clip_grad_norm: optimizer is NULL");
        return -1;
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
        int64_t at = p->grad ? first_nonfinite(p->grad, &v) : -1;
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
