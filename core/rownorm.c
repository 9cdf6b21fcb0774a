/* cgrad core: ops over the rows along one dim (declared in core/ops.h,
 * "norms along a dim"): F.normalize and F.cosine_similarity, with their
 * backwards.
 *
 * The dim is moved last (a permuted view) and the operands copied into
 * contiguous rows (no copy when it is last already); each row is one task,
 * its sums taken in double in index order, so the bits do not depend on
 * the thread count; the results are permuted back. bfloat16 and float16
 * operands are computed in float32 and rounded (core/upcast.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

/* a's rows along dim: [rows, D] contiguous, with what puts them back */
typedef struct {
    int nd, perm[CG_MAX_DIMS];
    int64_t shape[CG_MAX_DIMS]; /* the permuted shape */
    int64_t rows, D;
} rows_t;

/* dim of a (0-d: dim 0 or -1, one row of one) into r; false + error */
static bool rows_plan(const char *op, const cg_tensor *a, int dim, rows_t *r)
{
    r->nd = a->ndim;
    r->rows = 1;
    r->D = 1;
    if (a->ndim == 0 && (dim == 0 || dim == -1))
        return true;
    const int d = cg_norm_dim(op, dim, a->ndim);
    if (d < 0)
        return false;
    for (int i = 0, k = 0; i < a->ndim; i++)
        if (i != d)
            r->perm[k++] = i;
    r->perm[a->ndim - 1] = d;
    for (int i = 0; i < a->ndim; i++) {
        r->shape[i] = a->shape[r->perm[i]];
        r->rows *= i < a->ndim - 1 ? r->shape[i] : 1;
    }
    r->D = a->shape[d];
    return true;
}

/* a's elements as r's contiguous rows (a new reference) */
static cg_tensor *rows_of(const cg_tensor *a, const rows_t *r)
{
    cg_tensor *p = r->nd ? cg_view_permute(a, r->perm) : cg_retain((cg_tensor *)a);
    cg_tensor *c = p ? cg_k_contiguous(p) : NULL;
    cg_release(p);
    return c;
}

/* rows [rows, D] (contiguous, in r's order) back in the original order */
static cg_tensor *rows_back(cg_tensor *rows, const rows_t *r)
{
    if (!rows || r->nd == 0)
        return rows;
    int inv[CG_MAX_DIMS];
    for (int i = 0; i < r->nd; i++)
        inv[r->perm[i]] = i;
    cg_tensor *v = cg_view_permute(rows, inv), *out = v ? cg_k_contiguous(v) : NULL;
    cg_release_all(2, v, rows);
    return out;
}

/* ---------------------------------------------------------- normalize */
typedef struct {
    const float *x, *g; /* g NULL: the forward */
    float *out;
    int64_t D;
    float p, eps;
} norm_job;

/* ||x||_p of a row, in double: p inf the largest |x| (NaN if one is) */
static double row_norm(const float *x, int64_t D, float p)
{
    double s = 0.0;
    for (int64_t j = 0; j < D; j++) {
        const double a = fabs((double)x[j]);
        if (isinf(p))
            s = a > s || a != a ? a : s;
        else
            s += p == 2.0f ? a * a : p == 1.0f ? a : pow(a, (double)p);
    }
    return isinf(p) ? s : p == 2.0f ? sqrt(s) : p == 1.0f ? s : pow(s, 1.0 / (double)p);
}

/* d||x||_p / dx_j (n the norm > 0; inf: split among the largest, cnt) */
static double norm_grad(double xj, double n, float p, int64_t cnt)
{
    const double sg = xj > 0 ? 1.0 : xj < 0 ? -1.0 : 0.0;
    if (isinf(p))
        return fabs(xj) == n || xj != xj ? sg / (double)cnt : 0.0;
    return p == 2.0f ? xj / n : p == 1.0f ? sg : sg * pow(fabs(xj) / n, (double)p - 1.0);
}

static void norm_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const norm_job *j = ctx;
    const int64_t D = j->D;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * D;
        float *o = j->out + r * D;
        const float nf = (float)row_norm(x, D, j->p); /* the norm, a float as PyTorch's */
        const double n = nf;
        const float den = nf < j->eps ? j->eps : nf; /* clamp_min: NaN stays */
        if (!j->g) {
            for (int64_t k = 0; k < D; k++)
                o[k] = x[k] / den;
            continue;
        }
        /* dx = g / den - [n >= eps] (sum g x) / den^2 dn/dx (PyTorch's
         * x / clamp_min(norm, eps): the clamp passes at n >= eps) */
        const float *g = j->g + r * D;
        double dot = 0.0;
        int64_t cnt = 0;
        for (int64_t k = 0; k < D; k++) {
            dot += (double)g[k] * (double)x[k];
            cnt += fabs((double)x[k]) == n || x[k] != x[k];
        }
        const bool through = n >= (double)j->eps && n > 0.0;
        const double c = through ? dot / ((double)den * (double)den) : 0.0;
        for (int64_t k = 0; k < D; k++)
            o[k] = (float)((double)g[k] / (double)den -
                           (through ? c * norm_grad(x[k], n, j->p, cnt) : 0.0));
    }
}

static bool norm_args(const char *op, float p, float eps)
{
    if (!(p > 0.0f) || !(eps >= 0.0f)) {
        cg_set_error("%s: p is %g and eps %g, expected p > 0 (inf: the largest |x|) and eps >= 0",
                     op, (double)p, (double)eps);
        return false;
    }
    return true;
}

static cg_tensor *normalize_f32(const char *op, const cg_tensor *a, const cg_tensor *g, float p,
                                int dim, float eps)
{
    if (!a || (!g && !strcmp(op, "normalize_backward"))) {
        cg_error_null_input(op);
        return NULL;
    }
    rows_t r;
    if (!norm_args(op, p, eps) || !rows_plan(op, a, dim, &r))
        return NULL;
    if (g && !cg_same_shape(a, g)) {
        char b1[96], b2[96];
        cg_set_error("%s: input %s and gradient %s differ in shape", op,
                     cg_shape_str(a, b1, sizeof b1), cg_shape_str(g, b2, sizeof b2));
        return NULL;
    }
    cg_tensor *x = rows_of(a, &r), *gr = g ? rows_of(g, &r) : NULL;
    cg_tensor *out = x && (!g || gr) ? cg_empty(r.nd, r.shape) : NULL;
    if (out) {
        const norm_job job = {cg_data(x), gr ? cg_data(gr) : NULL, cg_data(out), r.D, p, eps};
        cg_shares_run(r.rows, cg_shares_rows(r.D), cg_shares_team(r.rows * r.D > PAR_THRESHOLD),
                      norm_rows, &job);
    }
    cg_release_all(2, x, gr);
    return rows_back(out, &r);
}

cg_tensor *cg_k_normalize(const cg_tensor *a, float p, int dim, float eps)
{
    CG_UPCAST1("normalize", a, normalize_f32("normalize", a, NULL, p, dim, eps));
}

cg_tensor *cg_k_normalize_backward(const cg_tensor *x, const cg_tensor *g, float p, int dim,
                                   float eps)
{
    CG_UPCAST2("normalize_backward", x, g, normalize_f32("normalize_backward", x, g, p, dim, eps));
}

/* -------------------------------------------------- cosine_similarity */
typedef struct {
    const float *a, *b, *g; /* g NULL: the forward */
    float *out, *da, *db;
    int64_t D;
    double eps2;
} cos_job;

/* PyTorch 1.13's: sum(a b) / sqrt(max(|a|^2, eps^2) max(|b|^2, eps^2)),
 * whose clamps pass the gradient as if they were not there (they are made
 * in place under no_grad); the backward, with s the clamped squares, r =
 * 1 / sqrt(s_a s_b): da = g (b r - cos a / s_a), db likewise */
static void cos_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const cos_job *j = ctx;
    const int64_t D = j->D;
    for (int64_t r = r0; r < r1; r++) {
        const float *a = j->a + r * D, *b = j->b + r * D;
        double ab = 0.0, aa = 0.0, bb = 0.0;
        for (int64_t k = 0; k < D; k++) {
            ab += (double)a[k] * (double)b[k];
            aa += (double)a[k] * (double)a[k];
            bb += (double)b[k] * (double)b[k];
        }
        const double sa = aa > j->eps2 ? aa : j->eps2, sb = bb > j->eps2 ? bb : j->eps2;
        const double rs = 1.0 / sqrt(sa * sb), cs = ab * rs;
        if (!j->g) {
            j->out[r] = (float)cs;
            continue;
        }
        const double g = j->g[r];
        for (int64_t k = 0; k < D; k++) {
            j->da[r * D + k] = (float)(g * ((double)b[k] * rs - cs * (double)a[k] / sa));
            j->db[r * D + k] = (float)(g * ((double)a[k] * rs - cs * (double)b[k] / sb));
        }
    }
}

/* The forward (g NULL: the result into *out) or the backward (g of the
 * result's shape: *da and *db of the broadcast shape) */
static bool cosine_f32(const char *op, const cg_tensor *a, const cg_tensor *b, const cg_tensor *g,
                       int dim, float eps, cg_tensor **out, cg_tensor **db)
{
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_broadcast_shapes(op, a->ndim, a->shape, b->ndim, b->shape, shape);
    cg_tensor *ea = nd >= 0 ? cg_view_expand(a, nd, shape) : NULL;
    cg_tensor *eb = ea ? cg_view_expand(b, nd, shape) : NULL;
    rows_t r;
    bool ok = eb && rows_plan(op, ea, dim, &r);
    if (ok && g && cg_numel(g) != r.rows) {
        char b1[96];
        cg_set_error("%s: gradient %s, expected %lld elements", op, cg_shape_str(g, b1, sizeof b1),
                     (long long)r.rows);
        ok = false;
    }
    cg_tensor *ra = ok ? rows_of(ea, &r) : NULL, *rb = ra ? rows_of(eb, &r) : NULL;
    cg_tensor *rg = rb && g ? cg_k_contiguous(g) : NULL;
    cg_tensor *o = rb && (!g || rg) ? cg_empty(g ? r.nd : 1, g ? r.shape : &r.rows) : NULL;
    cg_tensor *o2 = o && g ? cg_empty(r.nd, r.shape) : NULL;
    ok = o && (!g || o2);
    if (ok) {
        const cos_job job = {cg_data(ra),
                             cg_data(rb),
                             rg ? cg_data(rg) : NULL,
                             g ? NULL : cg_data(o),
                             g ? cg_data(o) : NULL,
                             o2 ? cg_data(o2) : NULL,
                             r.D,
                             (double)eps * (double)eps};
        cg_shares_run(r.rows, cg_shares_rows(r.D), cg_shares_team(r.rows * r.D > PAR_THRESHOLD),
                      cos_rows, &job);
    }
    cg_release_all(5, ea, eb, ra, rb, rg);
    if (!ok) {
        cg_release_all(2, o, o2);
        return false;
    }
    if (!g) { /* the broadcast shape without dim */
        int64_t os[CG_MAX_DIMS];
        for (int i = 0; i < r.nd - 1; i++)
            os[i] = r.shape[i];
        *out = cg_k_reshape(o, r.nd ? r.nd - 1 : 0, os);
        cg_release(o);
        return *out != NULL;
    }
    *out = rows_back(o, &r);
    *db = rows_back(o2, &r);
    return *out && *db;
}

static bool cos_args(const char *op, const cg_tensor *a, const cg_tensor *b, float eps)
{
    if (!a || !b) {
        cg_error_null_input(op);
        return false;
    }
    if (!(eps >= 0.0f)) {
        cg_set_error("%s: eps is %g, expected >= 0", op, (double)eps);
        return false;
    }
    return true;
}

static cg_tensor *cosine_fwd(const cg_tensor *a, const cg_tensor *b, int dim, float eps)
{
    cg_tensor *out = NULL;
    return cosine_f32("cosine_similarity", a, b, NULL, dim, eps, &out, NULL) ? out : NULL;
}

cg_tensor *cg_k_cosine_similarity(const cg_tensor *a, const cg_tensor *b, int dim, float eps)
{
    if (!cos_args("cosine_similarity", a, b, eps))
        return NULL;
    CG_UPCAST2("cosine_similarity", a, b, cosine_fwd(a, b, dim, eps));
}

bool cg_k_cosine_similarity_backward(const cg_tensor *a, const cg_tensor *b, const cg_tensor *g,
                                     int dim, float eps, cg_tensor **da, cg_tensor **db)
{
    *da = *db = NULL;
    const char *op = "cosine_similarity_backward";
    if (!cos_args(op, a, b, eps) || !g)
        return g ? false : cg_error_null_input(op);
    cg_upcast u;
    if (!cg_upcast_begin(&u, op, 3, (const cg_tensor **[]){&a, &b, &g}))
        return false;
    const bool ok = cosine_f32(op, a, b, g, dim, eps, da, db);
    *da = cg_upcast_end(&u, *da);
    if (*db && u.active && u.out != CG_F32) { /* both rounded to the promoted dtype */
        cg_tensor *r = cg_k_to(*db, u.out);
        cg_release(*db);
        *db = r;
    }
    return ok && *da && *db;
}
