/* cgrad core, INTERNAL: the statistics and the per-element loops the
 * normalisations over sets of channels share (core/batchnorm.c defines
 * them; core/batchnorm.c and core/groupnorm.c use them). Not installed.
 *
 * x is contiguous float32 [N, C, S] (a bfloat16 or float16 x is widened
 * first and the output and dx rounded to its dtype, as PyTorch's CPU
 * kernels compute reduced precision in float). A set is `blocks` blocks `stride`
 * elements apart from `base`, each `nch` channels (S elements each) from
 * channel c0: batch norm's channel c is {base c S, blocks N, stride C S,
 * nch 1}, group norm's group (n, g) {base (n C + g C/G) S, blocks 1, nch
 * C/G}. Every loop reads the set in that order, block by block, so a set
 * summed by one thread gives the same bits whichever thread runs it. */
#ifndef CG_NORM_IMPL_H
#define CG_NORM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

typedef struct {
    int64_t base, blocks, stride, nch, c0, S;
} cg_norm_set;

/* What a normalisation's tasks read and write (a task's own items only). */
typedef struct {
    const float *x, *g, *w, *b; /* w, b NULL: 1, 0; g NULL: the forward */
    const float *rm, *rv;       /* batch norm's eval: the running statistics */
    float *y, *mean, *invstd;   /* forward: y; backward: y is dx (or NULL) */
    double *bvar;               /* forward: the biased variances, or NULL */
    double *dw, *db;            /* backward, per channel */
    int64_t N, C, S, G;
    float eps;
    bool training;
} cg_norm_job;
/* A job over the contiguous float32 tensors given (NULL: a NULL field). */
cg_norm_job cg_norm_job_of(const cg_tensor *x, const cg_tensor *g, const cg_tensor *w,
                           const cg_tensor *b, cg_tensor *y, const cg_tensor *mean,
                           const cg_tensor *invstd, int64_t N, int64_t C, int64_t S);

/* The set's mean and biased variance, summed in double in order. */
void cg_norm_moments(const float *x, const cg_norm_set *s, double *mean, double *var);
/* y = (x - mean) invstd w[c] + b[c] over the set (w, b NULL: 1, 0). */
void cg_norm_apply(const float *x, float *y, const cg_norm_set *s, double mean, double invstd,
                   const float *w, const float *b);
/* *sg = sum(g w[c]), *sgx = sum(g w[c] xhat) over the set (w NULL: 1). */
void cg_norm_grad_sums(const float *x, const float *g, const float *w, const cg_norm_set *s,
                       double mean, double invstd, double *sg, double *sgx);
/* dx = scale invstd d over the set, d = g w[c] - sg / M - xhat sgx / M
 * (through_stats: the statistics were the set's, M its size) or g w[c]. */
void cg_norm_dx(const float *x, const float *g, const float *w, const cg_norm_set *s, double mean,
                double invstd, double sg, double sgx, double scale, bool through_stats, float *dx);

/* x's [N, C, S] sizes (a float tensor: float32, bfloat16 or float16; at
 * least 2 dims); false + error naming op */
bool cg_norm_dims(const char *op, const cg_tensor *x, int64_t *N, int64_t *C, int64_t *S);

/* t (float32 [C] or NULL) as a contiguous float32 copy in *out (NULL for
 * NULL); false + error naming op and arg */
bool cg_norm_channel_arg(const char *op, const char *arg, const cg_tensor *t, int64_t C,
                         cg_tensor **out);
/* running <- (1 - m) now + m v scale (float32 [C], written in place; now
 * a contiguous copy of running) */
bool cg_norm_move_stat(cg_tensor *running, const cg_tensor *now, const double *v, int64_t C,
                       float m, double scale);
/* [C] float32 from C doubles into a new *out (out NULL: nothing); false
 * when out of memory */
bool cg_norm_channel_out(cg_tensor **out, const double *v, int64_t C);
/* cg_k_batch_norm with op naming the errors */
cg_tensor *cg_norm_batch(const char *op, const cg_tensor *x, cg_tensor *running_mean,
                         cg_tensor *running_var, const cg_tensor *weight, const cg_tensor *bias,
                         bool training, float momentum, float eps, cg_tensor **mean,
                         cg_tensor **invstd);
/* A normalisation's backward from g (x's shape): checks, contiguous
 * float32 copies of x, g, weight and the statistics mean, invstd ([C]
 * when G is 0, else [N, G]), a job with dx (or NULL), dw and db (C
 * doubles each) for run, then *dw, *db as float32 [C] and *dx (each NULL:
 * not wanted). false + error naming op. */
bool cg_norm_backward(const char *op, const cg_tensor *x, const cg_tensor *g,
                      const cg_tensor *weight, const cg_tensor *mean, const cg_tensor *invstd,
                      int64_t G, bool training, void (*run)(const cg_norm_job *j), cg_tensor **dx,
                      cg_tensor **dw, cg_tensor **db);
/* batch norm's backward tasks for cg_norm_backward (G 0): a channel a task */
void cg_norm_batch_tasks(const cg_norm_job *j);

#endif
