/* cgrad core: p-norm distances between rows (declared in core/ops.h,
 * "distances"): torch.cdist's direct kernel and its backward, which
 * autograd's cdist, pdist and pairwise_distance share.
 *
 * Each difference is formed in float32 (x1 - x2, as PyTorch's), its
 * powers summed in double in index order and the distance rounded once;
 * each output element (a distance, a row of a gradient) is one task, so
 * the bits do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"

#define PAR_THRESHOLD 32768

/* x1 [B, P, M], x2 [B, R, M] float32 of one B and M, else false + error */
static bool dist_args(const char *op, const cg_tensor *x1, const cg_tensor *x2)
{
    if (!x1 || !x2) {
        cg_error_null_input(op);
        return false;
    }
    if (!cg_check_f32(op, "x1", x1) || !cg_check_f32(op, "x2", x2))
        return false;
    if (x1->ndim != 3 || x2->ndim != 3 || x1->shape[0] != x2->shape[0] ||
        x1->shape[2] != x2->shape[2]) {
        char a[96], b[96];
        cg_set_error("%s: expected x1 [B, P, M] and x2 [B, R, M], got %s and %s", op,
                     cg_shape_str(x1, a, sizeof a), cg_shape_str(x2, b, sizeof b));
        return false;
    }
    return true;
}

/* ||u - v||_p over m elements (u, v contiguous) */
static float row_dist(const float *u, const float *v, int64_t m, double p)
{
    double s = 0.0;
    for (int64_t k = 0; k < m; k++) {
        const double d = fabs((double)(u[k] - v[k]));
        if (p == 0.0)
            s += d != 0.0;
        else if (p == 1.0)
            s += d;
        else if (p == 2.0)
            s += d * d;
        else if (isinf(p))
            s = d > s || isnan(d) ? d : s;
        else
            s += pow(d, p);
    }
    if (p == 2.0)
        s = sqrt(s);
    else if (p != 0.0 && p != 1.0 && !isinf(p))
        s = pow(s, 1.0 / p);
    return (float)s;
}

cg_tensor *cg_k_cdist(const cg_tensor *x1, const cg_tensor *x2, float p)
{
    const char *op = "cdist";
    if (!dist_args(op, x1, x2))
        return NULL;
    if (!(p >= 0.0f)) {
        cg_set_error("%s: p is %g, expected a non-negative p (inf allowed)", op, (double)p);
        return NULL;
    }
    const int64_t B = x1->shape[0], P = x1->shape[1], R = x2->shape[1], M = x1->shape[2];
    cg_tensor *a = cg_k_contiguous(x1), *b = a ? cg_k_contiguous(x2) : NULL;
    cg_tensor *out = b ? cg_empty(CG_SHAPE(B, P, R)) : NULL;
    if (!out) {
        cg_release_all(2, a, b);
        return NULL;
    }
    const float *av = cg_data(a), *bv = cg_data(b);
    float *o = cg_data(out);
    const int64_t n = B * P * R;
#pragma omp parallel for schedule(static) if (n * M > PAR_THRESHOLD)
    for (int64_t e = 0; e < n; e++) {
        const int64_t bi = e / (P * R), i = e / R % P, j = e % R;
        o[e] = row_dist(av + (bi * P + i) * M, bv + (bi * R + j) * M, M, (double)p);
    }
    cg_release_all(2, a, b);
    return out;
}

/* d(dist)/d(u_k) times g for one difference d = u_k - v_k, PyTorch's
 * _cdist_backward (an inf norm's maxima each get g, or g / ties: torch.norm's) */
static double grad_term(double d, double dist, double g, double p, double ties)
{
    const double sgn = (d > 0) - (d < 0);
    if (p == 0.0)
        return 0.0;
    if (p == 1.0)
        return g * sgn;
    if (isinf(p))
        return fabs(d) == dist ? g * sgn / ties : 0.0;
    if (dist == 0.0)
        return 0.0;
    if (p == 2.0)
        return g * d / dist;
    if (p < 2.0)
        return d == 0.0 && p < 1.0 ? 0.0 : sgn * pow(fabs(d), p - 1.0) * g / pow(dist, p - 1.0);
    return d * pow(fabs(d), p - 2.0) * g / pow(dist, p - 1.0);
}

/* One side's gradient rows: gx[r, k] = sum over the partners j of
 * grad_term(u_k - v_jk, dist, g) (u this side's row, v the partner's: the
 * difference's sign follows, dist being even in it); the pair's distance
 * and gradient at i * sx + j * sy of its batch in dist and g, ties (may be
 * NULL: 1) as dist */
typedef struct {
    const float *x, *y, *dist, *g, *ties;
    int64_t B, nx, ny, M;
    int64_t sx, sy;
    double p;
} bwd_t;

static void grad_rows(const bwd_t *w, float *gx)
{
    const int64_t n = w->B * w->nx;
#pragma omp parallel for schedule(static) if (n * w->ny * w->M > PAR_THRESHOLD)
    for (int64_t r = 0; r < n; r++) {
        const int64_t bi = r / w->nx, i = r % w->nx;
        const float *u = w->x + r * w->M;
        for (int64_t k = 0; k < w->M; k++) {
            double s = 0.0;
            for (int64_t j = 0; j < w->ny; j++) {
                const int64_t e = bi * w->nx * w->ny + i * w->sx + j * w->sy;
                const float v = w->y[(bi * w->ny + j) * w->M + k];
                s += grad_term((double)(u[k] - v), w->dist[e], w->g[e], w->p,
                               w->ties ? w->ties[e] : 1.0);
            }
            gx[r * w->M + k] = (float)s;
        }
    }
}

/* How many |u_k - v_k| of each pair equal its distance (an inf norm's
 * maxima, at least 1), [B, P, R] */
static cg_tensor *ties_of(const float *a, const float *b, const float *dist, int64_t B, int64_t P,
                          int64_t R, int64_t M)
{
    cg_tensor *t = cg_empty(CG_SHAPE(B, P, R));
    float *tv = t ? cg_data(t) : NULL;
    for (int64_t e = 0; tv && e < B * P * R; e++) {
        const float *u = a + (e / R) * M, *v = b + (e / (P * R) * R + e % R) * M;
        int64_t c = 0;
        for (int64_t k = 0; k < M; k++)
            c += fabsf(u[k] - v[k]) == dist[e];
        tv[e] = (float)(c > 0 ? c : 1);
    }
    return t;
}

bool cg_k_cdist_backward(const cg_tensor *x1, const cg_tensor *x2, const cg_tensor *dist,
                         const cg_tensor *g, float p, bool split_ties, cg_tensor **dx1,
                         cg_tensor **dx2)
{
    const char *op = "cdist_backward";
    if (dx1)
        *dx1 = NULL;
    if (dx2)
        *dx2 = NULL;
    if (!dist_args(op, x1, x2) || !dist || !g) {
        if (!dist || !g)
            cg_error_null_input(op);
        return false;
    }
    const int64_t B = x1->shape[0], P = x1->shape[1], R = x2->shape[1], M = x1->shape[2];
    const int64_t dshape[3] = {B, P, R};
    if (dist->ndim != 3 || memcmp(dist->shape, dshape, sizeof dshape) || !cg_same_shape(dist, g)) {
        char a[96], b[96];
        cg_set_error("%s: distances %s and gradient %s, expected [%lld, %lld, %lld]", op,
                     cg_shape_str(dist, a, sizeof a), cg_shape_str(g, b, sizeof b), (long long)B,
                     (long long)P, (long long)R);
        return false;
    }
    cg_tensor *a = cg_k_contiguous(x1), *b = a ? cg_k_contiguous(x2) : NULL;
    cg_tensor *d = b ? cg_k_contiguous(dist) : NULL, *gc = d ? cg_k_contiguous(g) : NULL;
    cg_tensor *o1 = gc && dx1 ? cg_empty(CG_SHAPE(B, P, M)) : NULL;
    cg_tensor *o2 = gc && dx2 ? cg_empty(CG_SHAPE(B, R, M)) : NULL;
    cg_tensor *ties = gc && split_ties && isinf(p)
                          ? ties_of(cg_data(a), cg_data(b), cg_data(d), B, P, R, M)
                          : NULL;
    bool ok = gc && (!dx1 || o1) && (!dx2 || o2) && (ties || !(split_ties && isinf(p)));
    const float *tv = ties ? cg_data(ties) : NULL;
    if (ok && o1)
        grad_rows(&(bwd_t){cg_data(a), cg_data(b), cg_data(d), cg_data(gc), tv, B, P, R, M, R, 1,
                           (double)p},
                  cg_data(o1));
    if (ok && o2)
        grad_rows(&(bwd_t){cg_data(b), cg_data(a), cg_data(d), cg_data(gc), tv, B, R, P, M, 1, R,
                           (double)p},
                  cg_data(o2));
    cg_release(ties);
    cg_release_all(4, a, b, d, gc);
    if (!ok) {
        cg_release_all(2, o1, o2);
        return false;
    }
    if (dx1)
        *dx1 = o1;
    if (dx2)
        *dx2 = o2;
    return true;
}
