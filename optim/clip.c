/* cgrad optim: gradient clipping by global norm and the NaN/Inf check.
 *
 * The sum of squares is accumulated in double over fixed blocks of
 * CLIP_BLOCK elements (blocks in parallel, then added in order), so the
 * total is the same for any thread count (sq_blocks). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "core/ops.h"
#include "core/shares.h"
#include "optim/optim.h"

#define CLIP_BLOCK 16384

/* The gradients whose squares are summed: each tensor's floats cut into
 * blocks of CLIP_BLOCK (at least one a tensor), every block's sum in
 * double element by element, a tensor's sum its blocks' in order from 0,
 * the total the tensors' in order. The blocks are summed GROUP at a time
 * side by side, from whichever tensors they come: each keeps its own order
 * (the same bits), but the GROUP chains of additions run at once instead
 * of one after another (a double add's latency bound the single chain: 3%
 * of the translator's step, whose tensors are mostly one or a few blocks). */
#define GROUP 8
typedef struct {
    const float *p; /* the block's floats */
    int64_t n;      /* their count */
    int b;          /* its index among the blocks (the order of the sums) */
} sq_block;
typedef struct {
    const char *what; /* the caller, for errors */
    int nt, nb, cap;  /* tensors, blocks, capacity in blocks */
    sq_block *blk;
    int *last;        /* last[t]: tensor t's blocks end before it */
    cg_tensor **held; /* the contiguous copies the blocks point into */
} sq_blocks;

static void sq_free(sq_blocks *q)
{
    for (int t = 0; t < q->nt; t++)
        cg_release(q->held[t]);
    free(q->blk);
    free(q->last);
    free(q->held);
}

/* Tensor c's floats [lo, hi) (c is kept until sq_free); false + error when
 * out of memory (c released). */
static bool sq_add(sq_blocks *q, cg_tensor *c, int64_t lo, int64_t hi, int max_tensors)
{
    int64_t nb = hi - lo > CLIP_BLOCK ? (hi - lo + CLIP_BLOCK - 1) / CLIP_BLOCK : 1;
    bool ok = q->last || ((q->last = malloc((size_t)max_tensors * sizeof *q->last)) &&
                          (q->held = malloc((size_t)max_tensors * sizeof *q->held)));
    if (ok && q->nb + nb > q->cap) {
        int cap = (int)(q->nb + nb) * 2;
        sq_block *blk = realloc(q->blk, (size_t)cap * sizeof *blk);
        if ((ok = blk != NULL)) {
            q->blk = blk;
            q->cap = cap;
        }
    }
    if (!ok) {
        cg_release(c);
        cg_set_error("%s: out of memory", q->what);
        return false;
    }
    const float *x = cg_data(c) + lo;
    for (int64_t b = 0; b < nb; b++, q->nb++)
        q->blk[q->nb] = (sq_block){x + b * CLIP_BLOCK,
                                   b + 1 < nb ? CLIP_BLOCK : hi - lo - b * CLIP_BLOCK, q->nb};
    q->held[q->nt] = c;
    q->last[q->nt++] = q->nb;
    return true;
}

/* The sums of squares of k <= GROUP blocks into out[]: side by side up to
 * the shortest, then each on to its end. */
static void group_squares(const sq_block *blk, int k, double *out)
{
    double s[GROUP] = {0};
    int64_t m = blk[0].n;
    for (int g = 1; g < k; g++)
        m = blk[g].n < m ? blk[g].n : m;
    if (k == GROUP) /* a fixed count: unrolled */
        for (int64_t i = 0; i < m; i++)
            for (int g = 0; g < GROUP; g++) {
                double v = blk[g].p[i];
                s[g] += v * v;
            }
    else
        for (int64_t i = 0; i < m; i++)
            for (int g = 0; g < k; g++) {
                double v = blk[g].p[i];
                s[g] += v * v;
            }
    for (int g = 0; g < k; g++) {
        for (int64_t i = m; i < blk[g].n; i++) {
            double v = blk[g].p[i];
            s[g] += v * v;
        }
        out[g] = s[g];
    }
}

/* The sums of squares of blocks blk[0, nb), GROUP at a time, into out */
typedef struct {
    const sq_block *blk;
    int nb;
    double *out;
} groups_job;

static void square_groups(int64_t g0, int64_t g1, int thread, const void *ctx)
{
    const groups_job *j = ctx;
    for (int64_t g = g0; g < g1; g++) {
        const int k = j->nb - g * GROUP < GROUP ? (int)(j->nb - g * GROUP) : GROUP;
        group_squares(j->blk + g * GROUP, k, j->out + g * GROUP);
    }
}

/* Blocks by length, longest first (qsort; the index breaks ties). */
static int sq_longer(const void *x, const void *y)
{
    const sq_block *a = x, *b = y;
    return a->n != b->n ? (a->n < b->n ? 1 : -1) : (a->b > b->b) - (a->b < b->b);
}

/* The total of the blocks' squares (above); -1 + error when out of memory.
 * The groups take the blocks longest first, so that the blocks side by
 * side have about one length (a bias beside whole blocks left them to run
 * one after another past its end). */
static double sq_total(const sq_blocks *q)
{
    const int nb = q->nb > 0 ? q->nb : 1;
    double *part = malloc((size_t)nb * 2 * sizeof *part);
    sq_block *ord = malloc((size_t)nb * sizeof *ord);
    if (!part || !ord) {
        free(part);
        free(ord);
        cg_set_error("%s: out of memory", q->what);
        return -1;
    }
    int64_t elements = 0;
    for (int b = 0; b < q->nb; b++) {
        ord[b] = q->blk[b];
        elements += q->blk[b].n;
    }
    qsort(ord, (size_t)q->nb, sizeof *ord, sq_longer);
    double *sorted = part + nb; /* sums in ord's order */
    const groups_job job = {ord, q->nb, sorted};
    cg_shares_run((q->nb + GROUP - 1) / GROUP, 1, cg_shares_team(elements >= 4 * CLIP_BLOCK),
                  square_groups, &job);
    for (int i = 0; i < q->nb; i++)
        part[ord[i].b] = sorted[i];
    double ss = 0;
    for (int t = 0, b = 0; t < q->nt; t++) {
        double st = 0;
        for (; b < q->last[t]; b++)
            st += part[b];
        ss += st;
    }
    free(part);
    free(ord);
    return ss;
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
    if (p->grad && !cg_dtype_is_float(p->grad->dtype)) {
        cg_set_error("%s: gradient of parameter %d is %s, expected a float dtype", what, i,
                     cg_dtype_name(p->grad->dtype));
        return false;
    }
    return true;
}

/* A gradient's values as contiguous floats: float32 as it is (a copy only
 * when strided), bfloat16 and float16 widened (exactly); NULL + error when
 * out of memory. */
static cg_tensor *grad_floats(const cg_tensor *g)
{
    return g->dtype == CG_F32 ? cg_k_contiguous(g) : cg_k_to(g, CG_F32);
}

/* g *= coef in float32, rounded into g's dtype (a low-precision gradient
 * scaled as its float32 values would be, then rounded as autograd rounds
 * it). */
static bool scale_grad(cg_tensor *g, float coef)
{
    if (g->dtype == CG_F32)
        return cg_k_muls_(g, coef);
    cg_tensor *w = cg_k_to(g, CG_F32);
    const bool ok = w && cg_k_muls_(w, coef) && cg_k_copy_(g, w);
    cg_release(w);
    return ok;
}

/* PyTorch, in float32: clip_coef = max_norm / (total_norm + 1e-6), where a
 * Python number divided by a tensor is reciprocal() * number; then
 * clamp(max=1) and grad.mul_(coef). A factor of 1 changes nothing. A
 * finite total past FLT_MAX (our sum is in double; PyTorch's float32 norm
 * is inf there) takes max_norm / total in double: 1 / inf would be 0 and
 * wipe every gradient. */
static float clip_coef(double total, double max_norm)
{
    float denom = (float)total + 1e-6f;
    if (isinf(denom))
        return (float)(max_norm / total);
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
    sq_blocks q = {.what = what};
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        const cg_tensor *g = params[i]->grad;
        cg_tensor *c = g ? grad_floats(g) : NULL;
        ok = !g || (c && sq_add(&q, c, 0, cg_numel(c), n));
    }
    double ss = ok ? sq_total(&q) : -1;
    sq_free(&q);
    return ss < 0 ? -1 : sqrt(ss);
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
        if (params[i]->grad && !scale_grad(params[i]->grad, coef))
            return -1;
    return total;
}

/* ------------------------------------ clip_grad_norm_'s other norms, clip_grad_value_ */
/* The norm of order q of every gradient element (q > 0, inf: the largest
 * magnitude), summed in double in parameter order: (sum |g|^q)^(1/q), the
 * 1-norm a plain sum; a NaN anywhere gives NaN. -1 + error on bad input. */
static double global_norm_q(const char *what, int n, cg_tensor *const *params, double q)
{
    if (n < 0 || (n > 0 && !params)) {
        cg_set_error("%s: %d parameters with a %s array", what, n, params ? "non-NULL" : "NULL");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!check_grad(what, params, i))
            return -1;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        const cg_tensor *g = params[i]->grad;
        cg_tensor *c = g ? grad_floats(g) : NULL;
        if (g && !c)
            return -1;
        const float *x = c ? cg_data(c) : NULL;
        for (int64_t k = 0, m = c ? cg_numel(c) : 0; k < m; k++) {
            const double a = fabs((double)x[k]);
            if (isnan(a))
                acc = NAN;
            else if (isinf(q))
                acc = a > acc ? a : acc;
            else
                acc += q == 1 ? a : pow(a, q);
        }
        cg_release(c);
    }
    return isinf(q) || q == 1 ? acc : pow(acc, 1 / q);
}

double cg_clip_grad_norm_ex(int n, cg_tensor *const *params, double max_norm, double norm_type,
                            bool error_if_nonfinite)
{
    const char *what = "clip_grad_norm";
    if (!(max_norm >= 0) || !(norm_type > 0)) {
        cg_set_error("%s: need max_norm >= 0 and norm_type > 0 or inf (got %g, %g)", what, max_norm,
                     norm_type);
        return -1;
    }
    const double total =
        norm_type == 2 ? global_norm(what, n, params) : global_norm_q(what, n, params, norm_type);
    if (total < 0)
        return -1;
    if (!isfinite(total)) {
        if (error_if_nonfinite) {
            cg_set_error("%s: The total norm of order %g for gradients from `parameters` is "
                         "non-finite, so it cannot be clipped. To disable this error and scale the "
                         "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`",
                         what, norm_type);
            return -1;
        }
        return total;
    }
    const float coef = clip_coef(total, max_norm);
    if (!(coef < 1.0f))
        return total;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && !scale_grad(params[i]->grad, coef))
            return -1;
    return total;
}

bool cg_clip_grad_value(int n, cg_tensor *const *params, double clip_value)
{
    const char *what = "clip_grad_value";
    if (!(clip_value >= 0)) {
        cg_set_error("%s: clip_value %g must be >= 0", what, clip_value);
        return false;
    }
    if (n < 0 || (n > 0 && !params)) {
        cg_set_error("%s: %d parameters with a %s array", what, n, params ? "non-NULL" : "NULL");
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!check_grad(what, params, i))
            return false;
    const float c = (float)clip_value;
    for (int i = 0; i < n; i++) {
        cg_tensor *g = params[i]->grad;
        if (!g)
            continue;
        cg_tensor *f = grad_floats(g), *v = f ? cg_k_clamp(f, -c, c) : NULL;
        const bool ok = v && cg_k_copy_(g, v);
        cg_release_all(2, f, v);
        if (!ok)
            return false;
    }
    return true;
}

/* An optimizer updates float32 parameters (optim.c) from float32
 * gradients: false + error naming parameter i unless g is one. */
static bool optim_grad_f32(const cg_optim *o, int i, const char *what, const cg_tensor *g)
{
    if (g->dtype == CG_F32)
        return true;
    cg_set_error("%s: gradient of '%s' is %s, expected float32 (its parameter's dtype)", what,
                 cg_optim_param_name(o, i), cg_dtype_name(g->dtype));
    return false;
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
    if (!optim_grad_f32(o, i, what, p->grad))
        return false;
    *c = cg_k_contiguous(p->grad);
    return *c != NULL;
}

double cg_optim_grad_sqsum(const cg_optim *o)
{
    if (!o) {
        cg_set_error("optim_grad_sqsum: optimizer is NULL");
        return -1;
    }
    sq_blocks q = {.what = "optim_grad_sqsum"};
    bool ok = true;
    for (int i = 0; ok && i < cg_optim_count(o); i++) {
        cg_tensor *c;
        int64_t lo, hi;
        ok = owned_grad(o, i, "optim_grad_sqsum", &c, &lo, &hi) &&
             (!c || sq_add(&q, c, lo, hi, cg_optim_count(o)));
    }
    double ss = ok ? sq_total(&q) : -1;
    sq_free(&q);
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
        if (!cg_optim_shard_range(o, i, &lo, &hi) ||
            !optim_grad_f32(o, i, "optim_clip_grads_by", g))
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
    if (!cg_dtype_is_float(t->dtype)) /* integers and bools are finite */
        return -1;
    cg_tensor *c = grad_floats(t);
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
    if (!o) { /* not "every gradient finite" */
        if (bad)
            *bad = -1;
        cg_set_error("optim_grads_finite: optimizer is NULL");
        return false;
    }
    int n = cg_optim_count(o);
    for (int i = 0; i < n; i++) {
        const cg_tensor *p = cg_optim_param_tensor(o, i);
        float v;
        int64_t at = -1, lo = 0, hi = 0;
        if (cg_optim_is_sharded(o)) { /* the owned elements only */
            cg_tensor *c;
            if (!owned_grad(o, i, "optim_grads_finite", &c, &lo, &hi)) {
                if (bad) /* a gradient that cannot be read: refused, named */
                    *bad = i;
                return false;
            }
            if (c) {
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
