/* cgrad core: group and instance normalisation (declared in core/ops.h,
 * "group and instance normalisation"), F.group_norm and F.instance_norm,
 * forward and backward.
 *
 * x [N, C, S...] is read as contiguous float32 [N, C, S]. Group norm's
 * statistics are a (sample, group) set's: C / G channels times S, summed
 * in double in index order by core/batchnorm.c's loops (core/norm_impl.h),
 * a set a task; the weight's and bias's gradients a channel a task, the
 * samples in order. Instance norm is group norm with G = C while it uses
 * the input's statistics, batch norm's eval on the running ones otherwise
 * (PyTorch's F.instance_norm). The bits do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/norm_impl.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

typedef cg_norm_job gn_job;

/* the set of group t = n G + g */
static cg_norm_set gn_set(const gn_job *j, int64_t t)
{
    const int64_t Cg = j->C / j->G, n = t / j->G, c0 = t % j->G * Cg;
    return (cg_norm_set){
        .base = (n * j->C + c0) * j->S, .blocks = 1, .stride = 0, .nch = Cg, .c0 = c0, .S = j->S};
}

static void gn_forward_group(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    (void)thread;
    const gn_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const cg_norm_set set = gn_set(j, t);
        double mean, var;
        cg_norm_moments(j->x, &set, &mean, &var);
        const double invstd = 1.0 / sqrt(var + (double)j->eps);
        cg_norm_apply(j->x, j->y, &set, mean, invstd, j->w ? j->w + set.c0 : NULL,
                      j->b ? j->b + set.c0 : NULL);
        j->mean[t] = (float)mean;
        j->invstd[t] = (float)invstd;
        if (j->bvar)
            j->bvar[t] = var;
    }
}

/* x's sizes and G against op's rules; false + error */
static bool gn_dims(const char *op, const cg_tensor *x, int64_t G, int64_t *N, int64_t *C,
                    int64_t *S)
{
    if (!cg_norm_dims(op, x, N, C, S))
        return false;
    if (G <= 0 || *C % G) {
        char b[96];
        cg_set_error("%s: num_groups %lld, expected a divisor of the %lld channels of input %s", op,
                     (long long)G, (long long)*C, cg_shape_str(x, b, sizeof b));
        return false;
    }
    return true;
}

/* group norm of x into a new tensor, mean and invstd [N, G]; bvar (N G
 * doubles or NULL) the biased variances. NULL + error. */
static cg_tensor *gn_run(const char *op, const cg_tensor *x, int64_t G, const cg_tensor *weight,
                         const cg_tensor *bias, float eps, cg_tensor **mean, cg_tensor **invstd,
                         double *bvar)
{
    int64_t N, C, S;
    if (!x || !mean || !invstd) {
        cg_error_null_input(op);
        return NULL;
    }
    *mean = *invstd = NULL;
    if (!gn_dims(op, x, G, &N, &C, &S))
        return NULL;
    if (!(eps >= 0.0f)) {
        cg_set_error("%s: eps %g, expected eps >= 0", op, (double)eps);
        return NULL;
    }
    if (N * (C / G) * S == 1) { /* PyTorch's _verify_batch_size of [N C / G, G, ...] */
        char b[96];
        cg_set_error("%s: expected more than 1 value per channel when training, got input size %s",
                     op, cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    cg_tensor *w = NULL, *b = NULL, *y = NULL, *xc = NULL;
    const int64_t ms[2] = {N, G};
    bool ok = cg_norm_channel_arg(op, "weight", weight, C, &w) &&
              cg_norm_channel_arg(op, "bias", bias, C, &b) && (xc = cg_upcast_dense(x, false)) &&
              (y = cg_empty(x->ndim, x->shape)) && (*mean = cg_empty(2, ms)) &&
              (*invstd = cg_empty(2, ms));
    if (ok) {
        gn_job job = cg_norm_job_of(xc, NULL, w, b, y, *mean, *invstd, N, C, S);
        job.bvar = bvar;
        job.G = G;
        job.eps = eps;
        cg_shares_run(N * G, 1, cg_shares_team(N * C * S > PAR_THRESHOLD), gn_forward_group, &job);
        ok = (y = cg_upcast_round(y, x->dtype)) != NULL;
    }
    cg_release_all(3, w, b, xc);
    if (!ok) {
        cg_release_all(3, y, *mean, *invstd);
        *mean = *invstd = NULL;
        return NULL;
    }
    return y;
}

cg_tensor *cg_k_group_norm(const cg_tensor *x, int64_t num_groups, const cg_tensor *weight,
                           const cg_tensor *bias, float eps, cg_tensor **mean, cg_tensor **invstd)
{
    return gn_run("group_norm", x, num_groups, weight, bias, eps, mean, invstd, NULL);
}

/* the dx of a group */
static void gn_backward_group(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    (void)thread;
    const gn_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const cg_norm_set set = gn_set(j, t);
        const float *w = j->w ? j->w + set.c0 : NULL;
        double sg, sgx;
        cg_norm_grad_sums(j->x, j->g, w, &set, j->mean[t], j->invstd[t], &sg, &sgx);
        cg_norm_dx(j->x, j->g, w, &set, j->mean[t], j->invstd[t], sg, sgx, 1.0, true, j->y);
    }
}

/* the weight's and bias's gradients of a channel, the samples in order */
static void gn_backward_channel(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    (void)thread;
    const gn_job *j = ctx;
    const int64_t Cg = j->C / j->G;
    for (int64_t c = c0; c < c1; c++) {
        double dw = 0.0, db = 0.0;
        for (int64_t n = 0; n < j->N; n++) {
            const int64_t t = n * j->G + c / Cg;
            const cg_norm_set set = {
                .base = (n * j->C + c) * j->S, .blocks = 1, .nch = 1, .c0 = c, .S = j->S};
            double sg, sgx;
            cg_norm_grad_sums(j->x, j->g, NULL, &set, j->mean[t], j->invstd[t], &sg, &sgx);
            dw += sgx;
            db += sg;
        }
        j->dw[c] = dw;
        j->db[c] = db;
    }
}

/* the group norm backward's tasks: dx a group a task, dw and db a
 * channel a task */
static void gn_backward_run(const cg_norm_job *j)
{
    const int team = cg_shares_team(j->N * j->C * j->S > PAR_THRESHOLD);
    if (j->y)
        cg_shares_run(j->N * j->G, 1, team, gn_backward_group, j);
    cg_shares_run(j->C, 1, team, gn_backward_channel, j);
}

/* G: x's channels when 0 (instance norm) */
static bool gn_backward(const char *op, const cg_tensor *x, const cg_tensor *g,
                        const cg_tensor *weight, const cg_tensor *mean, const cg_tensor *invstd,
                        int64_t G, cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    int64_t N, C, S;
    if (!x)
        return cg_error_null_input(op);
    if (!gn_dims(op, x, G ? G : x->ndim >= 2 ? x->shape[1] : 1, &N, &C, &S))
        return false;
    return cg_norm_backward(op, x, g, weight, mean, invstd, G ? G : C, true, gn_backward_run, dx,
                            dw, db);
}

bool cg_k_group_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                              const cg_tensor *mean, const cg_tensor *invstd, int64_t num_groups,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    return gn_backward("group_norm", x, g, weight, mean, invstd, num_groups, dx, dw, db);
}

/* ------------------------------------------------ instance norm */
/* the running statistics moved by the per-(n, c) ones: (1 - m) r + m
 * times their mean over the samples (the variance unbiased), as PyTorch's
 * repeated buffers averaged back */
static bool instance_move(cg_tensor *rm, cg_tensor *rv, const cg_tensor *mean, const double *bvar,
                          int64_t N, int64_t C, int64_t S, float momentum)
{
    cg_tensor *rmc = NULL, *rvc = NULL;
    double *avg = malloc((size_t)(2 * C + 1) * sizeof *avg);
    bool ok = avg && cg_norm_channel_arg("instance_norm", "running_mean", rm, C, &rmc) &&
              cg_norm_channel_arg("instance_norm", "running_var", rv, C, &rvc);
    if (ok) {
        for (int64_t c = 0; c < C; c++) {
            double sm = 0.0, sv = 0.0;
            for (int64_t n = 0; n < N; n++) {
                sm += cg_data(mean)[n * C + c];
                sv += bvar[n * C + c];
            }
            avg[c] = sm / (double)N;
            avg[C + c] = sv / (double)N;
        }
        ok = (!rm || cg_norm_move_stat(rm, rmc, avg, C, momentum, 1.0)) &&
             (!rv || cg_norm_move_stat(rv, rvc, avg + C, C, momentum, (double)S / (double)(S - 1)));
    }
    if (!ok && !cg_has_error())
        cg_set_error("instance_norm: out of memory");
    free(avg);
    cg_release_all(2, rmc, rvc);
    return ok;
}

cg_tensor *cg_k_instance_norm(const cg_tensor *x, cg_tensor *running_mean, cg_tensor *running_var,
                              const cg_tensor *weight, const cg_tensor *bias, bool use_input_stats,
                              float momentum, float eps, cg_tensor **mean, cg_tensor **invstd)
{
    const char *op = "instance_norm";
    if (!use_input_stats)
        return cg_norm_batch(op, x, running_mean, running_var, weight, bias, false, momentum, eps,
                             mean, invstd);
    int64_t N, C, S;
    if (!x || !cg_norm_dims(op, x, &N, &C, &S)) /* gn_run: the NULL outputs */
        return x ? NULL : gn_run(op, x, 1, NULL, NULL, eps, mean, invstd, NULL);
    if (S <= 1) {
        char b[96];
        cg_set_error("instance_norm: expected more than 1 spatial element when training, got "
                     "input size %s",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    if (!isfinite(momentum)) {
        cg_set_error("instance_norm: momentum %g, expected a finite momentum", (double)momentum);
        return NULL;
    }
    const bool track = running_mean || running_var;
    double *bvar = track ? malloc((size_t)(N * C) * sizeof *bvar) : NULL;
    if (track && !bvar) {
        cg_set_error("instance_norm: out of memory");
        return NULL;
    }
    cg_tensor *y = gn_run(op, x, C, weight, bias, eps, mean, invstd, bvar);
    if (y && track && !instance_move(running_mean, running_var, *mean, bvar, N, C, S, momentum)) {
        cg_release_all(3, y, *mean, *invstd);
        *mean = *invstd = y = NULL;
    }
    free(bvar);
    return y;
}

bool cg_k_instance_norm_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *weight,
                                 const cg_tensor *mean, const cg_tensor *invstd,
                                 bool use_input_stats, cg_tensor **dx, cg_tensor **dw,
                                 cg_tensor **db)
{
    if (!use_input_stats)
        return cg_norm_backward("instance_norm", x, g, weight, mean, invstd, 0, false,
                                cg_norm_batch_tasks, dx, dw, db);
    return gn_backward("instance_norm", x, g, weight, mean, invstd, 0, dx, dw, db);
}
