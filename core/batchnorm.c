/* cgrad core: batch normalisation (declared in core/ops.h, "batch
 * normalisation"), F.batch_norm's forward and its backward.
 *
 * x [N, C, S...] is read as contiguous float32 [N, C, S]; a channel is a
 * task, its sums taken in double over (n, s) in index order, so the bits
 * do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/norm_impl.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

typedef cg_norm_job bn_job;

/* channel c's set */
static cg_norm_set bn_set(const bn_job *j, int64_t c)
{
    return (cg_norm_set){
        .base = c * j->S, .blocks = j->N, .stride = j->C * j->S, .nch = 1, .c0 = 0, .S = j->S};
}

static void bn_forward_ch(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    (void)thread;
    const bn_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        const cg_norm_set set = bn_set(j, c);
        double mean, var;
        if (j->training) {
            cg_norm_moments(j->x, &set, &mean, &var);
            j->bvar[c] = var;
        } else {
            mean = j->rm[c];
            var = j->rv[c];
        }
        const double invstd = 1.0 / sqrt(var + (double)j->eps);
        cg_norm_apply(j->x, j->y, &set, mean, invstd, j->w ? j->w + c : NULL,
                      j->b ? j->b + c : NULL);
        j->mean[c] = (float)mean;
        j->invstd[c] = (float)invstd;
    }
}

bool cg_norm_channel_arg(const char *op, const char *arg, const cg_tensor *t, int64_t C,
                         cg_tensor **out)
{
    *out = NULL;
    if (!t)
        return true;
    if (!cg_check_f32(op, arg, t))
        return false;
    if (t->ndim != 1 || t->shape[0] != C) {
        char b[96];
        cg_set_error("%s: argument '%s' has shape %s, expected [C] = [%lld]", op, arg,
                     cg_shape_str(t, b, sizeof b), (long long)C);
        return false;
    }
    return (*out = cg_k_contiguous(t)) != NULL;
}

bool cg_norm_dims(const char *op, const cg_tensor *x, int64_t *N, int64_t *C, int64_t *S)
{
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("%s: argument 'input' is %s, expected a float tensor (float32, bfloat16 or "
                     "float16)",
                     op, cg_dtype_name(x->dtype));
        return false;
    }
    if (x->ndim < 2) {
        char b[96];
        cg_set_error("%s: input %s has %d dims, expected [N, C, ...] (at least 2)", op,
                     cg_shape_str(x, b, sizeof b), x->ndim);
        return false;
    }
    *N = x->shape[0];
    *C = x->shape[1];
    *S = 1;
    for (int i = 2; i < x->ndim; i++)
        *S *= x->shape[i];
    return true;
}

bool cg_norm_move_stat(cg_tensor *running, const cg_tensor *now_c, const double *v, int64_t C,
                       float m, double scale)
{
    cg_tensor *next = cg_empty(1, (int64_t[]){C});
    if (!next)
        return false;
    for (int64_t c = 0; c < C; c++)
        cg_data(next)[c] =
            (float)((1.0 - (double)m) * cg_data(now_c)[c] + (double)m * v[c] * scale);
    const bool ok = cg_k_copy_(running, next);
    cg_release(next);
    return ok;
}

cg_tensor *cg_norm_batch(const char *op, const cg_tensor *x, cg_tensor *running_mean,
                         cg_tensor *running_var, const cg_tensor *weight, const cg_tensor *bias,
                         bool training, float momentum, float eps, cg_tensor **mean,
                         cg_tensor **invstd)
{
    int64_t N, C, S;
    if (!x || !mean || !invstd) {
        cg_error_null_input(op);
        return NULL;
    }
    *mean = *invstd = NULL;
    if (!cg_norm_dims(op, x, &N, &C, &S))
        return NULL;
    if (training && N * S <= 1) {
        char b[96];
        cg_set_error("batch_norm: expected more than 1 value per channel when training, got input "
                     "size %s",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    if (!training && (!running_mean || !running_var)) {
        cg_set_error("%s: eval (training false) needs running_mean and running_var", op);
        return NULL;
    }
    if (!(eps >= 0.0f) || !isfinite(momentum)) {
        cg_set_error("%s: eps %g and momentum %g, expected eps >= 0 and a finite momentum", op,
                     (double)eps, (double)momentum);
        return NULL;
    }
    cg_tensor *rm = NULL, *rv = NULL, *w = NULL, *b = NULL, *y = NULL, *xc = NULL;
    double *bvar = NULL;
    bool ok = cg_norm_channel_arg(op, "running_mean", running_mean, C, &rm) &&
              cg_norm_channel_arg(op, "running_var", running_var, C, &rv) &&
              cg_norm_channel_arg(op, "weight", weight, C, &w) &&
              cg_norm_channel_arg(op, "bias", bias, C, &b) && (xc = cg_upcast_dense(x, false)) &&
              (y = cg_empty(x->ndim, x->shape)) && (*mean = cg_empty(1, (int64_t[]){C})) &&
              (*invstd = cg_empty(1, (int64_t[]){C})) &&
              (bvar = calloc((size_t)(C ? C : 1), sizeof *bvar));
    if (ok) {
        bn_job job = cg_norm_job_of(xc, NULL, w, b, y, *mean, *invstd, N, C, S);
        job.rm = rm ? cg_data(rm) : NULL;
        job.rv = rv ? cg_data(rv) : NULL;
        job.bvar = bvar;
        job.eps = eps;
        job.training = training;
        cg_shares_run(C, 1, cg_shares_team(N * C * S > PAR_THRESHOLD), bn_forward_ch, &job);
        ok = (y = cg_upcast_round(y, x->dtype)) != NULL; /* before the statistics move */
        const double M = (double)(N * S), unbiased = M / (M - 1.0);
        double *mean_d =
            ok && training && running_mean ? malloc((size_t)(C ? C : 1) * sizeof *mean_d) : NULL;
        if (ok && training && running_mean && !mean_d) {
            cg_set_error("%s: out of memory", op);
            ok = false;
        }
        if (mean_d) {
            for (int64_t c = 0; c < C; c++)
                mean_d[c] = cg_data(*mean)[c];
            ok = cg_norm_move_stat(running_mean, rm, mean_d, C, momentum, 1.0);
        }
        if (ok && training && running_var)
            ok = cg_norm_move_stat(running_var, rv, bvar, C, momentum, unbiased);
        free(mean_d);
    }
    free(bvar);
    cg_release_all(5, rm, rv, w, b, xc);
    if (!ok) {
        cg_release_all(3, y, *mean, *invstd);
        *mean = *invstd = NULL;
        return NULL;
    }
    return y;
}

cg_tensor *cg_k_batch_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                           const cg_tensor *weight, const cg_tensor *bias, bool training,
                           float momentum, float eps, cg_tensor **mean, cg_tensor **invstd)
{
    return cg_norm_batch("batch_norm", x, running_mean, running_var, weight, bias, training,
                         momentum, eps, mean, invstd);
}

static void bn_backward_ch(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    (void)thread;
    const bn_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        const cg_norm_set set = bn_set(j, c);
        const double mean = j->mean[c], invstd = j->invstd[c], w = j->w ? j->w[c] : 1.0;
        double sg, sgx;
        cg_norm_grad_sums(j->x, j->g, NULL, &set, mean, invstd, &sg, &sgx);
        j->dw[c] = sgx;
        j->db[c] = sg;
        if (j->y)
            cg_norm_dx(j->x, j->g, NULL, &set, mean, invstd, sg, sgx, w, j->training, j->y);
    }
}

bool cg_norm_channel_out(cg_tensor **out, const double *v, int64_t C)
{
    if (!out)
        return true;
    if (!(*out = cg_empty(1, (int64_t[]){C})))
        return false;
    for (int64_t c = 0; c < C; c++)
        cg_data(*out)[c] = (float)v[c];
    return true;
}

/* [C] (G 0) or [N, G] float32 statistics t as a contiguous copy; false + error */
static bool stat_arg(const char *op, const char *arg, const cg_tensor *t, int64_t N, int64_t C,
                     int64_t G, cg_tensor **out)
{
    if (!G)
        return cg_norm_channel_arg(op, arg, t, C, out);
    *out = NULL;
    if (!cg_check_f32(op, arg, t))
        return false;
    if (t->ndim != 2 || t->shape[0] != N || t->shape[1] != G) {
        char b[96];
        cg_set_error("%s backward: argument '%s' has shape %s, expected [N, G] = [%lld, %lld]", op,
                     arg, cg_shape_str(t, b, sizeof b), (long long)N, (long long)G);
        return false;
    }
    return (*out = cg_k_contiguous(t)) != NULL;
}

bool cg_norm_backward(const char *op, const cg_tensor *x, const cg_tensor *g,
                      const cg_tensor *weight, const cg_tensor *mean, const cg_tensor *invstd,
                      int64_t G, bool training, void (*run)(const cg_norm_job *j), cg_tensor **dx,
                      cg_tensor **dw, cg_tensor **db)
{
    int64_t N, C, S;
    if (!x || !g || !mean || !invstd) {
        cg_error_null_input(op);
        return false;
    }
    if (dw)
        *dw = NULL;
    if (db)
        *db = NULL;
    if (!cg_norm_dims(op, x, &N, &C, &S))
        return false;
    if (g->ndim != x->ndim || memcmp(g->shape, x->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char a[96], b[96];
        cg_set_error("%s backward: gradient %s, expected the input's shape %s", op,
                     cg_shape_str(g, a, sizeof a), cg_shape_str(x, b, sizeof b));
        return false;
    }
    cg_tensor *xc = NULL, *gc = NULL, *w = NULL, *m = NULL, *is = NULL, *out = NULL;
    double *sums = NULL;
    bool ok = cg_norm_channel_arg(op, "weight", weight, C, &w) &&
              stat_arg(op, "mean", mean, N, C, G, &m) &&
              stat_arg(op, "invstd", invstd, N, C, G, &is) && (xc = cg_upcast_dense(x, false)) &&
              (gc = cg_upcast_dense(g, false)) && (!dx || (out = cg_empty(x->ndim, x->shape))) &&
              (sums = malloc((size_t)(2 * C + 1) * sizeof *sums));
    if (!ok && !cg_has_error())
        cg_set_error("%s backward: out of memory", op);
    if (ok) {
        cg_norm_job job = cg_norm_job_of(xc, gc, w, NULL, out, m, is, N, C, S);
        job.dw = sums;
        job.db = sums + C;
        job.G = G;
        job.training = training;
        run(&job);
        ok = cg_norm_channel_out(dw, sums, C) && cg_norm_channel_out(db, sums + C, C) &&
             (!out || (out = cg_upcast_round(out, x->dtype)));
    }
    free(sums);
    cg_release_all(5, xc, gc, w, m, is);
    if (!ok) {
        cg_release_all(3, out, dw ? *dw : NULL, db ? *db : NULL);
        if (dw)
            *dw = NULL;
        if (db)
            *db = NULL;
        return false;
    }
    if (dx)
        *dx = out;
    return true;
}

void cg_norm_batch_tasks(const cg_norm_job *j)
{
    cg_shares_run(j->C, 1, cg_shares_team(j->N * j->C * j->S > PAR_THRESHOLD), bn_backward_ch, j);
}

bool cg_k_batch_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                              const cg_tensor *mean, const cg_tensor *invstd, bool training,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    return cg_norm_backward("batch_norm", x, g, weight, mean, invstd, 0, training,
                            cg_norm_batch_tasks, dx, dw, db);
}

/* ------------------------------------------------ the shared loops */
static const float *data_or_null(const cg_tensor *t) { return t ? cg_data(t) : NULL; }

cg_norm_job cg_norm_job_of(const cg_tensor *x, const cg_tensor *g, const cg_tensor *w,
                           const cg_tensor *b, cg_tensor *y, const cg_tensor *mean,
                           const cg_tensor *invstd, int64_t N, int64_t C, int64_t S)
{
    return (cg_norm_job){.x = data_or_null(x),
                         .g = data_or_null(g),
                         .w = data_or_null(w),
                         .b = data_or_null(b),
                         .y = y ? cg_data(y) : NULL,
                         .mean = mean ? cg_data(mean) : NULL,
                         .invstd = invstd ? cg_data(invstd) : NULL,
                         .N = N,
                         .C = C,
                         .S = S,
                         .G = 1};
}

/* The set's element (block a, channel k, position i) and its channel */
#define SET_AT(s, a, k, i) ((s)->base + (a) * (s)->stride + (k) * (s)->S + (i))

void cg_norm_moments(const float *x, const cg_norm_set *s, double *mean, double *var)
{
    const double M = (double)(s->blocks * s->nch * s->S);
    double sum = 0.0, q = 0.0;
    for (int64_t a = 0; a < s->blocks; a++)
        for (int64_t i = 0; i < s->nch * s->S; i++)
            sum += x[SET_AT(s, a, 0, i)];
    const double m = sum / M;
    for (int64_t a = 0; a < s->blocks; a++)
        for (int64_t i = 0; i < s->nch * s->S; i++) {
            const double d = x[SET_AT(s, a, 0, i)] - m;
            q += d * d;
        }
    *mean = m;
    *var = q / M;
}

void cg_norm_apply(const float *x, float *y, const cg_norm_set *s, double mean, double invstd,
                   const float *w, const float *b)
{
    for (int64_t a = 0; a < s->blocks; a++)
        for (int64_t k = 0; k < s->nch; k++) {
            const double wc = w ? w[k] : 1.0, bc = b ? b[k] : 0.0;
            for (int64_t i = 0; i < s->S; i++) {
                const int64_t e = SET_AT(s, a, k, i);
                y[e] = (float)((x[e] - mean) * invstd * wc + bc);
            }
        }
}

void cg_norm_grad_sums(const float *x, const float *g, const float *w, const cg_norm_set *s,
                       double mean, double invstd, double *sg, double *sgx)
{
    double s1 = 0.0, s2 = 0.0;
    for (int64_t a = 0; a < s->blocks; a++)
        for (int64_t k = 0; k < s->nch; k++)
            for (int64_t i = 0; i < s->S; i++) {
                const int64_t e = SET_AT(s, a, k, i);
                const double gw = w ? (double)g[e] * w[k] : (double)g[e];
                s1 += gw;
                s2 += gw * ((x[e] - mean) * invstd);
            }
    *sg = s1;
    *sgx = s2;
}

void cg_norm_dx(const float *x, const float *g, const float *w, const cg_norm_set *s, double mean,
                double invstd, double sg, double sgx, double scale, bool through_stats, float *dx)
{
    const double M = (double)(s->blocks * s->nch * s->S);
    for (int64_t a = 0; a < s->blocks; a++)
        for (int64_t k = 0; k < s->nch; k++)
            for (int64_t i = 0; i < s->S; i++) {
                const int64_t e = SET_AT(s, a, k, i);
                const double gw = w ? (double)g[e] * w[k] : (double)g[e];
                const double xhat = (x[e] - mean) * invstd;
                const double d = through_stats ? gw - sg / M - xhat * sgx / M : gw;
                dx[e] = (float)(scale * invstd * d);
            }
}
