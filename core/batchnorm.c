/* cgrad core: batch normalisation (declared in core/ops.h, "batch
 * normalisation"), F.batch_norm's forward and its backward.
 *
 * x [N, C, S...] is read as contiguous float32 [N, C, S]; a channel is a
 * task, its sums taken in double over (n, s) in index order, so the bits
 * do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"

#define PAR_THRESHOLD 32768

typedef struct {
    const float *x, *g, *w, *b; /* w, b NULL: 1, 0; g NULL: the forward */
    const float *rm, *rv;       /* eval: the running statistics */
    float *y, *mean, *invstd;   /* forward: y; backward: y is dx */
    double *dw, *db;            /* backward, per channel */
    double *bvar;               /* training forward: the biased variance */
    int64_t N, C, S;
    float eps;
    bool training;
} bn_job;

static void bn_forward_ch(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    (void)thread;
    const bn_job *j = ctx;
    const int64_t N = j->N, C = j->C, S = j->S;
    const double M = (double)(N * S);
    for (int64_t c = c0; c < c1; c++) {
        double mean, var;
        if (j->training) {
            double s = 0.0, q = 0.0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < S; k++)
                    s += j->x[(n * C + c) * S + k];
            mean = s / M;
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < S; k++) {
                    const double d = j->x[(n * C + c) * S + k] - mean;
                    q += d * d;
                }
            var = q / M;
            j->bvar[c] = var;
        } else {
            mean = j->rm[c];
            var = j->rv[c];
        }
        const double invstd = 1.0 / sqrt(var + (double)j->eps);
        const double w = j->w ? j->w[c] : 1.0, b = j->b ? j->b[c] : 0.0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < S; k++) {
                const int64_t i = (n * C + c) * S + k;
                j->y[i] = (float)((j->x[i] - mean) * invstd * w + b);
            }
        j->mean[c] = (float)mean;
        j->invstd[c] = (float)invstd;
    }
}

/* t (float32 [C] or NULL) as a contiguous float32 copy; false + error */
static bool channel_arg(const char *arg, const cg_tensor *t, int64_t C, cg_tensor **out)
{
    *out = NULL;
    if (!t)
        return true;
    if (!cg_check_f32("batch_norm", arg, t))
        return false;
    if (t->ndim != 1 || t->shape[0] != C) {
        char b[96];
        cg_set_error("batch_norm: argument '%s' has shape %s, expected [C] = [%lld]", arg,
                     cg_shape_str(t, b, sizeof b), (long long)C);
        return false;
    }
    return (*out = cg_k_contiguous(t)) != NULL;
}

/* x's [N, C, S] sizes; false + error */
static bool bn_dims(const cg_tensor *x, int64_t *N, int64_t *C, int64_t *S)
{
    if (!cg_check_f32("batch_norm", "input", x))
        return false;
    if (x->ndim < 2) {
        char b[96];
        cg_set_error("batch_norm: input %s has %d dims, expected [N, C, ...] (at least 2)",
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

/* running <- (1 - m) running + m v (float32 [C], written in place) */
static bool move_stat(cg_tensor *running, const cg_tensor *now_c, const double *v, int64_t C,
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

cg_tensor *cg_k_batch_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                           const cg_tensor *weight, const cg_tensor *bias, bool training,
                           float momentum, float eps, cg_tensor **mean, cg_tensor **invstd)
{
    int64_t N, C, S;
    if (!x || !mean || !invstd) {
        cg_error_null_input("cg_k_batch_norm");
        return NULL;
    }
    *mean = *invstd = NULL;
    if (!bn_dims(x, &N, &C, &S))
        return NULL;
    if (training && N * S <= 1) {
        char b[96];
        cg_set_error("batch_norm: expected more than 1 value per channel when training, got input "
                     "size %s",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    if (!training && (!running_mean || !running_var)) {
        cg_set_error("batch_norm: eval (training false) needs running_mean and running_var");
        return NULL;
    }
    if (!(eps >= 0.0f) || !isfinite(momentum)) {
        cg_set_error("batch_norm: eps %g and momentum %g, expected eps >= 0 and a finite momentum",
                     (double)eps, (double)momentum);
        return NULL;
    }
    cg_tensor *rm = NULL, *rv = NULL, *w = NULL, *b = NULL, *y = NULL, *xc = NULL;
    double *bvar = NULL;
    bool ok = channel_arg("running_mean", running_mean, C, &rm) &&
              channel_arg("running_var", running_var, C, &rv) &&
              channel_arg("weight", weight, C, &w) && channel_arg("bias", bias, C, &b) &&
              (xc = cg_k_contiguous(x)) && (y = cg_empty(x->ndim, x->shape)) &&
              (*mean = cg_empty(1, (int64_t[]){C})) && (*invstd = cg_empty(1, (int64_t[]){C})) &&
              (bvar = calloc((size_t)(C ? C : 1), sizeof *bvar));
    if (ok) {
        const bn_job job = {.x = cg_data(xc),
                            .w = w ? cg_data(w) : NULL,
                            .b = b ? cg_data(b) : NULL,
                            .rm = rm ? cg_data(rm) : NULL,
                            .rv = rv ? cg_data(rv) : NULL,
                            .y = cg_data(y),
                            .mean = cg_data(*mean),
                            .invstd = cg_data(*invstd),
                            .bvar = bvar,
                            .N = N,
                            .C = C,
                            .S = S,
                            .eps = eps,
                            .training = training};
        cg_shares_run(C, 1, cg_shares_team(N * C * S > PAR_THRESHOLD), bn_forward_ch, &job);
        const double M = (double)(N * S), unbiased = M / (M - 1.0);
        double *mean_d =
            training && running_mean ? malloc((size_t)(C ? C : 1) * sizeof *mean_d) : NULL;
        if (training && running_mean && !mean_d) {
            cg_set_error("batch_norm: out of memory");
            ok = false;
        }
        if (mean_d) {
            for (int64_t c = 0; c < C; c++)
                mean_d[c] = cg_data(*mean)[c];
            ok = move_stat(running_mean, rm, mean_d, C, momentum, 1.0);
        }
        if (ok && training && running_var)
            ok = move_stat(running_var, rv, bvar, C, momentum, unbiased);
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

static void bn_backward_ch(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    (void)thread;
    const bn_job *j = ctx;
    const int64_t N = j->N, C = j->C, S = j->S;
    const double M = (double)(N * S);
    for (int64_t c = c0; c < c1; c++) {
        const double mean = j->mean[c], invstd = j->invstd[c], w = j->w ? j->w[c] : 1.0;
        double sg = 0.0, sgx = 0.0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < S; k++) {
                const int64_t i = (n * C + c) * S + k;
                sg += j->g[i];
                sgx += j->g[i] * ((j->x[i] - mean) * invstd);
            }
        j->dw[c] = sgx;
        j->db[c] = sg;
        if (!j->y)
            continue;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < S; k++) {
                const int64_t i = (n * C + c) * S + k;
                const double xhat = (j->x[i] - mean) * invstd;
                const double d = j->training ? j->g[i] - sg / M - xhat * sgx / M : j->g[i];
                j->y[i] = (float)(w * invstd * d);
            }
    }
}

/* [C] float32 from C doubles (NULL out: nothing) */
static bool channel_out(cg_tensor **out, const double *v, int64_t C)
{
    if (!out)
        return true;
    if (!(*out = cg_empty(1, (int64_t[]){C})))
        return false;
    for (int64_t c = 0; c < C; c++)
        cg_data(*out)[c] = (float)v[c];
    return true;
}

bool cg_k_batch_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                              const cg_tensor *mean, const cg_tensor *invstd, bool training,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    int64_t N, C, S;
    if (!x || !g || !mean || !invstd) {
        cg_error_null_input("cg_k_batch_norm_backward");
        return false;
    }
    if (dw)
        *dw = NULL;
    if (db)
        *db = NULL;
    if (!bn_dims(x, &N, &C, &S))
        return false;
    if (g->ndim != x->ndim || memcmp(g->shape, x->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char a[96], b[96];
        cg_set_error("batch_norm backward: gradient %s, expected the input's shape %s",
                     cg_shape_str(g, a, sizeof a), cg_shape_str(x, b, sizeof b));
        return false;
    }
    cg_tensor *xc = NULL, *gc = NULL, *w = NULL, *m = NULL, *is = NULL, *out = NULL;
    double *sums = NULL;
    bool ok = channel_arg("weight", weight, C, &w) && channel_arg("mean", mean, C, &m) &&
              channel_arg("invstd", invstd, C, &is) && (xc = cg_k_contiguous(x)) &&
              (gc = g->dtype == CG_F32 ? cg_k_contiguous(g) : cg_k_to(g, CG_F32)) &&
              (!dx || (out = cg_empty(x->ndim, x->shape))) &&
              (sums = malloc((size_t)(2 * C + 1) * sizeof *sums));
    if (!ok && !cg_has_error())
        cg_set_error("batch_norm backward: out of memory");
    if (ok) {
        const bn_job job = {.x = cg_data(xc),
                            .g = cg_data(gc),
                            .w = w ? cg_data(w) : NULL,
                            .y = out ? cg_data(out) : NULL,
                            .mean = cg_data(m),
                            .invstd = cg_data(is),
                            .dw = sums,
                            .db = sums + C,
                            .N = N,
                            .C = C,
                            .S = S,
                            .training = training};
        cg_shares_run(C, 1, cg_shares_team(N * C * S > PAR_THRESHOLD), bn_backward_ch, &job);
        ok = channel_out(dw, sums, C) && channel_out(db, sums + C, C);
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
