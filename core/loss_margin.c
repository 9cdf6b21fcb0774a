/* The margin losses of torch.nn.functional over class rows, fused (core/ops.h
 * cg_k_multi_margin_loss, cg_k_multilabel_margin_loss): PyTorch 1.13's CPU
 * kernels, each row's loss in double and rounded once, the rows run in
 * parallel (each writes only its own loss and gradient row, so the bits do
 * not depend on the team) and reduced in row order by core/loss.c's
 * cg_ce_reduced_rows. And the value check that F.binary_cross_entropy and
 * F.gaussian_nll_loss make of their inputs (cg_k_values_within). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/loss_rows.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

/* A call runs its rows on one thread below this many elements. */
#define MARGIN_PAR_THRESHOLD 32768

/* x as rows: [N, C] for a 2-D x, one row for a 1-D x, one row of one class
 * for a 0-d x; an empty row or more dims refused as PyTorch refuses them */
static bool margin_rows(const char *op, const cg_tensor *x, int64_t *N, int64_t *C)
{
    char b[96];
    if (!cg_f32_args(op, 1, &x))
        return false;
    if (x->ndim > 2 || (x->ndim >= 1 && x->shape[x->ndim - 1] == 0)) {
        cg_set_error("%s: input of shape %s, expected a non-empty vector [C] or matrix [N, C] "
                     "(or 0-d), as PyTorch",
                     op, cg_shape_str(x, b, sizeof b));
        return false;
    }
    *N = x->ndim == 2 ? x->shape[0] : 1;
    *C = x->ndim == 0 ? 1 : x->shape[x->ndim - 1];
    return true;
}

/* x and target given, r mean, sum or none, x's rows (margin_rows), an
 * int64 target */
static bool margin_args(const char *op, const cg_tensor *x, const cg_tensor *target, cg_reduction r,
                        int64_t *N, int64_t *C)
{
    if (!x || !target) {
        cg_error_null_input(op);
        return false;
    }
    return cg_ce_reduction(op, r) && margin_rows(op, x, N, C) &&
           cg_check_dtype(op, "target", target, CG_I64);
}

/* The upstream gradient of a loss of N rows reduced by r: a float32 0-d
 * (mean, sum, and none of one row given as 0-d: rows false) or [N]
 * (none); *held a contiguous reference */
static bool margin_grad(const char *op, const cg_tensor *g, cg_reduction r, int64_t N, bool rows,
                        cg_tensor **held)
{
    return cg_ce_upstream_grad(op, g, rows ? r : CG_REDUCTION_SUM, N, held);
}

/* The targets tc (contiguous, n of them) each in [lo, C), else tc released
 * and an error naming op (row: an element's row is its index / per_row);
 * then contiguous x and weight (NULL: none) into *xc, *wc; false + every
 * reference released on failure */
static bool margin_hold(const char *op, const cg_tensor *x, const cg_tensor *weight, int64_t n,
                        int64_t lo, int64_t C, int64_t per_row, const char *note, cg_tensor **xc,
                        cg_tensor **tc, cg_tensor **wc)
{
    for (int64_t i = 0; *tc && i < n; i++) {
        int64_t t = cg_data_i64(*tc)[i];
        if (t < lo || t >= C) {
            cg_set_error("%s: target %lld at row %lld is out of range [%lld, %lld)%s", op,
                         (long long)t, (long long)(i / per_row), (long long)lo, (long long)C, note);
            cg_release(*tc);
            *tc = NULL;
        }
    }
    *xc = *tc ? cg_k_contiguous(x) : NULL;
    *wc = *xc && weight ? cg_k_contiguous(weight) : NULL;
    if (*xc && (!weight || *wc))
        return true;
    cg_release_all(3, *xc, *tc, *wc);
    *xc = *tc = *wc = NULL;
    return false;
}

/* The rows' losses reduced by r; none: [N], or 0-d when rows is false */
static cg_tensor *margin_out(const double *row, int64_t N, cg_reduction r, bool rows)
{
    cg_tensor *out = cg_ce_reduced_rows(row, N, (double)N, r);
    if (!out || r != CG_REDUCTION_NONE || rows)
        return out;
    cg_tensor *s = cg_empty(0, NULL);
    if (s)
        cg_data(s)[0] = cg_data(out)[0];
    cg_release(out);
    return s;
}

/* What a call's rows share: x [N, C] contiguous, the targets, the options,
 * and (backward) each row's gradient scale and its gradient rows */
typedef struct {
    const float *x, *w;
    const int64_t *t;
    int64_t C;
    int p;
    float margin;
    double *loss;
    const float *g; /* none: one a row; else g[0] for every row */
    bool g_rows;
    double scale; /* 1 / C, or 1 / (N C) for the mean */
    float *dx;
    unsigned char *mark; /* multilabel: [N, C], which classes are a row's targets */
} margin_job;

static double row_scale(const margin_job *j, int64_t r)
{
    return j->scale * (double)j->g[j->g_rows ? r : 0];
}

/* -------------------------------------------------------- multi_margin */
static bool multi_margin_check(const char *op, const cg_tensor *x, const cg_tensor *target, int p,
                               const cg_tensor *weight, cg_reduction r, int64_t *N, int64_t *C,
                               cg_tensor **xc, cg_tensor **tc, cg_tensor **wc)
{
    char a[96], b[96];
    *xc = *tc = *wc = NULL;
    if (!margin_args(op, x, target, r, N, C))
        return false;
    if (p != 1 && p != 2) {
        cg_set_error("%s: p is %d, expected 1 or 2 (as PyTorch)", op, p);
        return false;
    }
    if (target->ndim > 1 || cg_numel(target) != *N) {
        cg_set_error("%s: target of shape %s, expected %lld class ids ([N]) for input of shape %s",
                     op, cg_shape_str(target, a, sizeof a), (long long)*N,
                     cg_shape_str(x, b, sizeof b));
        return false;
    }
    if (weight &&
        (!cg_check_f32(op, "weight", weight) || weight->ndim != 1 || weight->shape[0] != *C)) {
        if (weight->dtype == CG_F32)
            cg_set_error("%s: argument 'weight' has shape %s, expected [C] = [%lld], one a class",
                         op, cg_shape_str(weight, a, sizeof a), (long long)*C);
        return false;
    }
    *tc = cg_k_contiguous(target);
    return margin_hold(op, x, weight, *N, 0, *C, 1, "", xc, tc, wc);
}

/* Row r of multi_margin: its loss (dx NULL) or its gradient row */
static void multi_margin_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const margin_job *j = ctx;
    const int64_t C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C;
        const int64_t y = j->t[r];
        const double w = j->w ? (double)j->w[y] : 1.0, s = j->dx ? row_scale(j, r) : 0.0;
        double sum = 0.0, gy = 0.0;
        for (int64_t i = 0; i < C; i++) {
            if (i == y)
                continue;
            double z = (double)j->margin - (double)xr[y] + (double)xr[i];
            double h = z > 0 ? (j->p == 1 ? z : z * z) * w : 0.0;
            sum += h;
            if (j->dx) {
                double d = z > 0 ? (j->p == 1 ? 1.0 : 2.0 * z) * w * s : 0.0;
                j->dx[r * C + i] = (float)d;
                gy -= d;
            }
        }
        if (j->dx)
            j->dx[r * C + y] = (float)gy;
        else
            j->loss[r] = sum / (double)C;
    }
}

/* The forward (g NULL) or the backward of multi_margin */
static cg_tensor *multi_margin_run(const char *op, const cg_tensor *x, const cg_tensor *target,
                                   int p, float margin, const cg_tensor *weight, cg_reduction r,
                                   const cg_tensor *g)
{
    int64_t N, C;
    cg_tensor *xc, *tc, *wc, *gc = NULL, *out = NULL;
    if (!multi_margin_check(op, x, target, p, weight, r, &N, &C, &xc, &tc, &wc))
        return NULL;
    const bool rows = target->ndim == 1;
    double *row = NULL;
    if (g ? margin_grad(op, g, r, N, rows, &gc) && (out = cg_empty(x->ndim, x->shape))
          : (row = malloc((size_t)(N > 0 ? N : 1) * sizeof *row)) != NULL) {
        const margin_job j = {.x = cg_data(xc),
                              .w = wc ? cg_data(wc) : NULL,
                              .t = cg_data_i64(tc),
                              .C = C,
                              .p = p,
                              .margin = margin,
                              .loss = row,
                              .g = gc ? cg_data(gc) : NULL,
                              .g_rows = r == CG_REDUCTION_NONE && rows,
                              .scale = 1.0 / (double)(r == CG_REDUCTION_MEAN ? N * C : C),
                              .dx = out ? cg_data(out) : NULL};
        cg_shares_run(N, cg_shares_rows(C), cg_shares_team(N * C > MARGIN_PAR_THRESHOLD),
                      multi_margin_chunk, &j);
        if (row)
            out = margin_out(row, N, r, rows);
    } else if (!g)
        cg_set_error("%s: out of memory", op);
    free(row);
    cg_release_all(4, xc, tc, wc, gc);
    return out;
}

cg_tensor *cg_k_multi_margin_loss(const cg_tensor *x, const cg_tensor *target, int p, float margin,
                                  const cg_tensor *weight, cg_reduction r)
{
    return multi_margin_run("multi_margin_loss", x, target, p, margin, weight, r, NULL);
}

cg_tensor *cg_k_multi_margin_loss_backward(const cg_tensor *x, const cg_tensor *target, int p,
                                           float margin, const cg_tensor *weight, cg_reduction r,
                                           const cg_tensor *g)
{
    return multi_margin_run("multi_margin_loss_backward", x, target, p, margin, weight, r, g);
}

/* ---------------------------------------------------- multilabel_margin */
static bool multilabel_check(const char *op, const cg_tensor *x, const cg_tensor *target,
                             cg_reduction r, int64_t *N, int64_t *C, cg_tensor **xc, cg_tensor **tc)
{
    char a[96], b[96];
    *xc = *tc = NULL;
    if (!margin_args(op, x, target, r, N, C))
        return false;
    if (!cg_same_shape(x, target)) {
        cg_set_error("%s: target of shape %s, expected the input's %s", op,
                     cg_shape_str(target, a, sizeof a), cg_shape_str(x, b, sizeof b));
        return false;
    }
    *tc = cg_k_contiguous(target);
    cg_tensor *wc;
    return margin_hold(op, x, NULL, *N * *C, -1, *C, *C, " (-1 ends a row's classes)", xc, tc, &wc);
}

/* Row r of multilabel_margin: its loss (dx NULL) or its gradient row */
static void multilabel_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const margin_job *j = ctx;
    const int64_t C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C;
        const int64_t *tr = j->t + r * C;
        float *dr = j->dx ? j->dx + r * C : NULL;
        const double s = dr ? row_scale(j, r) : 0.0;
        unsigned char *is_target = j->mark + r * C;
        int64_t k = 0; /* the targets tr[0..k) */
        memset(is_target, 0, (size_t)C);
        for (; k < C && tr[k] >= 0; k++)
            is_target[tr[k]] = 1;
        double sum = 0.0;
        if (dr)
            memset(dr, 0, (size_t)C * sizeof *dr);
        for (int64_t a = 0; a < k; a++) {
            const int64_t y = tr[a];
            double gy = 0.0;
            for (int64_t i = 0; i < C; i++) {
                double z = 1.0 - (double)xr[y] + (double)xr[i];
                if (is_target[i] || !(z > 0))
                    continue;
                sum += z;
                if (dr) {
                    dr[i] = (float)((double)dr[i] + s);
                    gy -= s;
                }
            }
            if (dr)
                dr[y] = (float)((double)dr[y] + gy);
        }
        if (!dr)
            j->loss[r] = sum / (double)C;
    }
}

static cg_tensor *multilabel_run(const char *op, const cg_tensor *x, const cg_tensor *target,
                                 cg_reduction r, const cg_tensor *g)
{
    int64_t N, C;
    cg_tensor *xc, *tc, *gc = NULL, *out = NULL;
    if (!multilabel_check(op, x, target, r, &N, &C, &xc, &tc))
        return NULL;
    const bool rows = x->ndim == 2;
    double *row = NULL;
    unsigned char *mark = malloc((size_t)(N * C > 0 ? N * C : 1));
    if (mark && (g ? margin_grad(op, g, r, N, rows, &gc) && (out = cg_empty(x->ndim, x->shape))
                   : (row = malloc((size_t)(N > 0 ? N : 1) * sizeof *row)) != NULL)) {
        const margin_job j = {.x = cg_data(xc),
                              .t = cg_data_i64(tc),
                              .C = C,
                              .loss = row,
                              .mark = mark,
                              .g = gc ? cg_data(gc) : NULL,
                              .g_rows = r == CG_REDUCTION_NONE && rows,
                              .scale = 1.0 / (double)(r == CG_REDUCTION_MEAN ? N * C : C),
                              .dx = out ? cg_data(out) : NULL};
        cg_shares_run(N, cg_shares_rows(C * C), cg_shares_team(N * C > MARGIN_PAR_THRESHOLD),
                      multilabel_chunk, &j);
        if (row)
            out = margin_out(row, N, r, rows);
    } else if (!mark || !g)
        cg_set_error("%s: out of memory", op);
    free(row);
    free(mark);
    cg_release_all(3, xc, tc, gc);
    return out;
}

cg_tensor *cg_k_multilabel_margin_loss(const cg_tensor *x, const cg_tensor *target, cg_reduction r)
{
    return multilabel_run("multilabel_margin_loss", x, target, r, NULL);
}

cg_tensor *cg_k_multilabel_margin_loss_backward(const cg_tensor *x, const cg_tensor *target,
                                                cg_reduction r, const cg_tensor *g)
{
    return multilabel_run("multilabel_margin_loss_backward", x, target, r, g);
}

/* ------------------------------------------------------- value checks */
bool cg_k_values_within(const char *op, const cg_tensor *a, double lo, double hi, bool nan_ok,
                        const char *what)
{
    if (!a) {
        cg_error_null_input(op);
        return false;
    }
    cg_tensor *f = cg_k_to(a, CG_F32), *c = f ? cg_k_contiguous(f) : NULL;
    bool ok = c != NULL;
    for (int64_t i = 0, n = c ? cg_numel(c) : 0; ok && i < n; i++)
        ok = (cg_data(c)[i] >= lo && cg_data(c)[i] <= hi) || (nan_ok && isnan(cg_data(c)[i]));
    if (c && !ok)
        cg_set_error("%s: %s", op, what);
    cg_release_all(2, f, c);
    return ok;
}
