/* cgrad core: torch.linalg.vector_norm and its backward (declared in
 * core/ops.h, "linear algebra"). The reduced dims are moved last, each
 * line of them reduced in double in index order and rounded once to x's
 * dtype (float32, bfloat16 or float16); each line is one task, so the
 * bits do not depend on the thread count. The backward recomputes the
 * line's norm in double and applies PyTorch 1.13's norm_backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/linalg_impl.h"
#include "core/reduce_impl.h"
#include "core/shares.h"

static const char *const OP = "linalg.vector_norm";

typedef struct {
    cg_dtype dt;
    const void *x; /* the lines, contiguous */
    const double *g;
    void *out;
    int64_t len;
    double ord;
} vn_ctx;

static inline double elem(cg_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case CG_F32: return ((const float *)p)[i];
    case CG_BF16: return cg_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return cg_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

static inline void put(cg_dtype dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case CG_F32: ((float *)p)[i] = (float)v; break;
    case CG_BF16: ((uint16_t *)p)[i] = cg_f32_to_bf16((float)v); break;
    default: ((uint16_t *)p)[i] = cg_f32_to_f16((float)v); break;
    }
}

/* PyTorch's sign: 0 for 0 and NaN */
static inline double sgn(double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }

static double line_norm(const vn_ctx *c, int64_t r)
{
    const int64_t len = c->len, o = r * len;
    const double p = c->ord;
    double s = p == -INFINITY ? INFINITY : 0.0;
    for (int64_t i = 0; i < len; i++) {
        const double v = elem(c->dt, c->x, o + i), d = fabs(v);
        if (p == 0.0)
            s += v != 0.0; /* NaN counts */
        else if (isinf(p)) {
            if (isnan(d))
                return NAN;
            s = p > 0 ? (d > s ? d : s) : (d < s ? d : s);
        } else if (p == 1.0)
            s += d;
        else if (p == 2.0)
            s += d * d;
        else
            s += pow(d, p);
    }
    if (p == 0.0 || p == 1.0 || isinf(p))
        return s;
    return p == 2.0 ? sqrt(s) : pow(s, 1.0 / p);
}

static void norm_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const vn_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++)
        put(c->dt, c->out, r, line_norm(c, r));
}

static void grad_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const vn_ctx *c = ctx;
    const double p = c->ord;
    for (int64_t r = r0; r < r1; r++) {
        const double nrm = line_norm(c, r), g = c->g[r];
        const int64_t o = r * c->len;
        double count = 0.0; /* inf: the maxima (and NaN) share g */
        for (int64_t i = 0; isinf(p) && i < c->len; i++) {
            const double d = fabs(elem(c->dt, c->x, o + i));
            count += d == nrm || isnan(d);
        }
        for (int64_t i = 0; i < c->len; i++) {
            const double v = elem(c->dt, c->x, o + i), d = fabs(v);
            double gx;
            if (p == 0.0)
                gx = 0.0;
            else if (p == 1.0)
                gx = sgn(v) * g;
            else if (p == 2.0)
                gx = nrm == 0.0 ? 0.0 : g * (v / nrm);
            else if (isinf(p))
                gx = sgn(v) * (g / count * (d == nrm || isnan(d)));
            else if (p < 1.0)
                gx = (v == 0.0 ? 0.0 : sgn(v) * pow(d, p - 1.0)) * g * pow(nrm, 1.0 - p);
            else if (p < 2.0)
                gx = sgn(v) * pow(d, p - 1.0) * (nrm == 0.0 ? 0.0 : g / pow(nrm, p - 1.0));
            else
                gx = v * pow(d, p - 2.0) * (nrm == 0.0 ? 0.0 : g / pow(nrm, p - 1.0));
            put(c->dt, c->out, o + i, gx);
        }
    }
}

/* x's reduced dims moved last (perm), their line length, the lines'
 * count; false + error on a bad argument */
static bool lines(const cg_tensor *x, double ord, int ndims, const int *dims, bool *mask, int *perm,
                  int64_t *len, int64_t *rows)
{
    if (!x)
        return cg_error_null_input(OP);
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("%s: Expected a floating point tensor as input. Got %s", OP,
                     cg_dtype_name(x->dtype));
        return false;
    }
    if (isnan(ord)) {
        cg_set_error("%s: ord is NaN", OP);
        return false;
    }
    if (!cg_reduce_dims(OP, x, ndims, dims, mask))
        return false;
    int k = 0;
    *len = *rows = 1;
    for (int d = 0; d < x->ndim; d++)
        if (!mask[d])
            perm[k++] = d, *rows *= x->shape[d];
    for (int d = 0; d < x->ndim; d++)
        if (mask[d]) {
            perm[k++] = d, *len *= x->shape[d];
            if ((ord < 0 || ord == INFINITY) && ndims > 0 && x->shape[d] == 0) {
                cg_set_error("%s cannot compute the %g norm on the dimension %d because this "
                             "dimension is empty and the operation does not have an identity",
                             OP, ord, d);
                return false;
            }
        }
    if ((ord < 0 || ord == INFINITY) && ndims == 0 && cg_numel(x) == 0) {
        cg_set_error("%s cannot compute the %g norm on an empty tensor because the operation "
                     "does not have an identity",
                     OP, ord);
        return false;
    }
    return true;
}

/* x's lines, contiguous (x's dtype) */
static cg_tensor *lined(const cg_tensor *x, const int *perm)
{
    cg_tensor *v = x->ndim ? cg_view_permute(x, perm) : cg_retain((cg_tensor *)x);
    cg_tensor *c = v ? cg_k_contiguous(v) : NULL;
    cg_release(v);
    return c;
}

static int team(int64_t rows, int64_t len)
{
    return cg_shares_team(rows > 1 && rows * len > 32768);
}

cg_tensor *cg_k_linalg_vector_norm(const cg_tensor *x, double ord, int ndims, const int *dims,
                                   bool keepdim)
{
    bool mask[CG_MAX_DIMS] = {0};
    int perm[CG_MAX_DIMS];
    int64_t len, rows, shape[CG_MAX_DIMS];
    if (!lines(x, ord, ndims, dims, mask, perm, &len, &rows))
        return NULL;
    const int nd = cg_reduce_shape(x, mask, keepdim, shape);
    cg_tensor *xc = lined(x, perm), *out = xc ? cg_empty_dtype(x->dtype, nd, shape) : NULL;
    if (out) {
        const vn_ctx c = {x->dtype, cg_data_ptr(xc), NULL, cg_data_ptr(out), len, ord};
        cg_shares_run(rows, 1, team(rows, len), norm_chunk, &c);
    }
    cg_release(xc);
    return out;
}

cg_tensor *cg_k_linalg_vector_norm_backward(const cg_tensor *x, const cg_tensor *g, double ord,
                                            int ndims, const int *dims, bool keepdim)
{
    bool mask[CG_MAX_DIMS] = {0};
    int perm[CG_MAX_DIMS], inv[CG_MAX_DIMS];
    int64_t len, rows, shape[CG_MAX_DIMS], pshape[CG_MAX_DIMS];
    if (!g)
        return cg_error_null_input(OP), NULL;
    if (!lines(x, ord, ndims, dims, mask, perm, &len, &rows))
        return NULL;
    const int nd = cg_reduce_shape(x, mask, keepdim, shape);
    if (cg_numel(g) != rows || g->ndim != nd ||
        memcmp(g->shape, shape, sizeof(int64_t) * (size_t)nd)) {
        char a[96], b[96];
        cg_set_error("%s backward: the gradient is %s, expected %s", OP,
                     cg_shape_str(g, a, sizeof a), cg_shape_str_n(nd, shape, b, sizeof b));
        return NULL;
    }
    for (int d = 0; d < x->ndim; d++)
        pshape[d] = x->shape[perm[d]], inv[perm[d]] = d;
    cg_tensor *xc = lined(x, perm), *lines_out = NULL, *back = NULL, *out = NULL;
    double *gd = xc ? cg_la_alloc(rows) : NULL;
    if (gd) { /* g in the lines' order: the output's own (kept dims in order) */
        int64_t idx[CG_MAX_DIMS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            int64_t off = g->offset;
            for (int d = 0; d < g->ndim; d++)
                off += idx[d] * g->strides[d];
            cg_la_get(g, off, 1, 1, 0, 0, &gd[r], 1, false);
            for (int d = g->ndim - 1; d >= 0; d--) {
                if (++idx[d] < g->shape[d])
                    break;
                idx[d] = 0;
            }
        }
        lines_out = cg_empty_dtype(x->dtype, x->ndim, pshape);
    }
    if (lines_out) {
        const vn_ctx c = {x->dtype, cg_data_ptr(xc), gd, cg_data_ptr(lines_out), len, ord};
        cg_shares_run(rows, 1, team(rows, len), grad_chunk, &c);
        back = x->ndim ? cg_view_permute(lines_out, inv) : cg_retain(lines_out);
        out = back ? cg_k_contiguous(back) : NULL;
    }
    free(gd);
    cg_release_all(3, xc, lines_out, back);
    return out;
}
