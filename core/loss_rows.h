/* cgrad core, INTERNAL: the cross-entropy rows that core/loss.c's
 * cross-entropy and core/loss_linear.c's fused head share (not a public
 * header; only those files and core/loss_margin.c include it). */
#ifndef CG_LOSS_ROWS_H
#define CG_LOSS_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "core/tensor.h"

/* A call runs its rows on one thread below this many elements. */
#define CG_CE_PAR_THRESHOLD 32768

/* What the rows of one call share. autocast: the thread's matrix precision
 * is bf16 (core/gemm.h), and the rows take bf16 autocast's kernel (core/loss.c);
 * in fp32 they take the double-lane kernel (its bits are pinned). */
typedef struct {
    int64_t C, ignore_index, kept;
    double ls, scale; /* scale: g / kept (mean) or g (sum), 0 when no row is kept */
    bool autocast;
    /* the class weights [C] (F.cross_entropy's weight=) or NULL; wsum:
     * their total, sum_j weight[j] (the smoothing term's) */
    const float *weight;
    double wsum;
} cg_ce_rows;

/* The rows of one call: C classes, the loss's g / kept (mean) or g (sum)
 * as scale, and the calling thread's precision policy. */
cg_ce_rows cg_ce_rows_for(int64_t C, int64_t ignore_index, int64_t kept, float ls, float g,
                          bool mean);

/* Row xr's loss (0 when ignored); *lse (when not NULL) its log-sum-exp
 * rounded to float; dr (when not NULL, may be xr) its gradient for g. */
double cg_ce_row(const cg_ce_rows *c, const float *xr, int64_t t, float *lse, float *dr);

/* cg_ce_row on the rows of x [N, C] with their targets t: loss[r], lse[r]
 * (when lse is not NULL) and row r of dx (when not NULL; may be x), in
 * parallel when N C is large (core/shares.h). g_rows (NULL: c's scale for
 * every row): reduction none's upstream gradient [N], row r's gradient
 * scaled by g_rows[r] (the bits of cg_k_cross_entropy_backward's rows). */
void cg_ce_rows_run(const cg_ce_rows *c, int64_t N, const float *x, const int64_t *t,
                    const float *g_rows, float *lse, float *dx, double *loss);

/* A class loss's reduction: mean, sum or none, else an error naming op. */
bool cg_ce_reduction(const char *op, cg_reduction r);

/* The loss of rows row[N] (0 at an ignored row) reduced by r: the mean
 * over the kept ones (kept: their count or total weight) or the sum,
 * summed in row order in double, or each ([N]). */
cg_tensor *cg_ce_reduced_rows(const double *row, int64_t N, double kept, cg_reduction r);

/* The upstream gradient g of a class loss of N rows reduced by r: a
 * float32 0-d (mean, sum) or [N] (none), else an error naming op. *held:
 * a contiguous reference (release it). */
bool cg_ce_upstream_grad(const char *op, const cg_tensor *g, cg_reduction r, int64_t N,
                         cg_tensor **held);

/* Check the targets (int64 [N], each in [0, C) or ignore_index) of logits
 * [N, C] (shape: their shape for messages) and count the kept rows; *held
 * gets a contiguous reference to them (release it). op names the caller. */
bool cg_ce_targets(const char *op, int64_t N, int64_t C, const char *shape,
                   const cg_tensor *target_t, int64_t ignore_index, int64_t *kept,
                   cg_tensor **held);

/* label_smoothing in [0, 1], else an error naming op. */
bool cg_ce_ls_check(const char *op, float ls);

#endif
