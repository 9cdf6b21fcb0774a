/* More pointwise ops and the calculus of sequences: nan_to_num, fmod,
 * remainder, lerp, clamp with tensor bounds, cross (nodes over
 * core/pointwise.c's kernels, forward and backward side by side); diff and
 * trapezoid (made of the graph's ops, gradients theirs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

/* ------------------------------------------------------- nan_to_num */
static bool nan_to_num_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_nan_to_num_backward(IN(0), g)) != NULL;
}
cg_tensor *cg_nan_to_num(cg_tensor *a, double nan, const double *posinf, const double *neginf)
{
    return cg_op_finish1(cg_k_nan_to_num(a, nan, posinf, neginf), CG_OP_NAN_TO_NUM, a,
                         nan_to_num_bw, NULL);
}

/* ---------------------------------------------- fmod, remainder */
/* a's gradient g; b's -g trunc(a / b) (fmod) or -g floor(a / b)
 * (remainder), PyTorch's */
static bool mod_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin, bool floor)
{
    if (NEEDS(0) && !(gin[0] = cg_retain((cg_tensor *)g)))
        return false;
    if (!NEEDS(1))
        return true;
    cg_tensor *q = cg_k_div_rounded(IN(0), IN(1), floor), *m = q ? cg_k_mul(g, q) : NULL;
    gin[1] = m ? cg_k_neg(m) : NULL;
    cg_release_all(2, q, m);
    return gin[1] != NULL;
}
static bool fmod_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return mod_bw(n, g, gin, false);
}
static bool remainder_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return mod_bw(n, g, gin, true);
}

cg_tensor *cg_fmod(cg_tensor *a, cg_tensor *b)
{
    return cg_op_finish(cg_k_fmod(a, b), CG_OP_FMOD, 2, (cg_tensor *[]){a, b}, fmod_bw, NULL);
}

cg_tensor *cg_remainder(cg_tensor *a, cg_tensor *b)
{
    return cg_op_finish(cg_k_remainder(a, b), CG_OP_REMAINDER, 2, (cg_tensor *[]){a, b},
                        remainder_bw, NULL);
}

/* The number s as the 0-d operand of an op with a, of the dtype PyTorch
 * gives a tensor op with a Python number: a's float dtype; for integers
 * and bool a whole s keeps a's integer dtype (bool: int64), another
 * float32 (a new reference) */
static cg_tensor *number_for(const cg_tensor *a, double s)
{
    cg_dtype dt = CG_F32;
    if (cg_dtype_is_float(a->dtype))
        dt = a->dtype;
    else if (s == floor(s) && fabs(s) < 0x1p63)
        dt = a->dtype == CG_BOOL ? CG_I64 : a->dtype;
    if (cg_dtype_is_float(dt))
        return cg_full_dtype(dt, 0, NULL, s);
    cg_tensor *i = cg_scalar_i64((int64_t)s), *t = i ? cg_k_to(i, dt) : NULL; /* int32: wraps */
    cg_release(i);
    return t;
}

static cg_tensor *with_number(cg_tensor *(*op)(cg_tensor *, cg_tensor *), const char *name,
                              cg_tensor *a, double s)
{
    if (!a) {
        cg_error_null_input(name);
        return NULL;
    }
    cg_tensor *b = number_for(a, s), *out = b ? op(a, b) : NULL;
    cg_release(b);
    return out;
}

cg_tensor *cg_fmod_scalar(cg_tensor *a, double b) { return with_number(cg_fmod, "fmod", a, b); }

cg_tensor *cg_remainder_scalar(cg_tensor *a, double b)
{
    return with_number(cg_remainder, "remainder", a, b);
}

/* --------------------------------------------------------------- lerp */
/* start: g (1 - w), end: g w, weight: g (end - start) (PyTorch's); a
 * scalar weight (2 inputs) in p.f[0], 1 - w taken in double */
static bool lerp_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (n->n_inputs == 2) {
        const double w = n->p.f[0];
        if (NEEDS(0) && !(gin[0] = cg_k_muls(g, (float)(1.0 - w))))
            return false;
        return !NEEDS(1) || (gin[1] = cg_k_muls(g, (float)w)) != NULL;
    }
    if (NEEDS(0)) {
        cg_tensor *nw = cg_k_neg(IN(2)), *om = nw ? cg_k_adds(nw, 1.0f) : NULL; /* 1 - w */
        gin[0] = om ? cg_k_mul(g, om) : NULL;
        cg_release_all(2, nw, om);
        if (!gin[0])
            return false;
    }
    if (NEEDS(1) && !(gin[1] = cg_k_mul(g, IN(2))))
        return false;
    if (NEEDS(2)) {
        cg_tensor *d = cg_k_sub(IN(1), IN(0));
        gin[2] = d ? cg_k_mul(g, d) : NULL;
        cg_release(d);
        if (!gin[2])
            return false;
    }
    return true;
}

cg_tensor *cg_lerp(cg_tensor *start, cg_tensor *end, cg_tensor *weight)
{
    if (!weight) {
        cg_error_null_arg("lerp", "weight");
        return NULL;
    }
    return cg_op_finish(cg_k_lerp(start, end, weight, 0.0f), CG_OP_LERP, 3,
                        (cg_tensor *[]){start, end, weight}, lerp_bw, NULL);
}

cg_tensor *cg_lerp_scalar(cg_tensor *start, cg_tensor *end, float weight)
{
    cg_node *n;
    cg_tensor *out = cg_op_finish(cg_k_lerp(start, end, NULL, weight), CG_OP_LERP, 2,
                                  (cg_tensor *[]){start, end}, lerp_bw, &n);
    if (n)
        n->p.f[0] = weight;
    return out;
}

/* -------------------------------------------------------------- clamp */
/* The inputs x, min?, max? as recorded (the bounds given: p.i[0], p.i[1]) */
static bool clamp_tensor_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const bool has_lo = n->p.i[0], has_hi = n->p.i[1];
    const cg_tensor *lo = has_lo ? IN(1) : NULL, *hi = has_hi ? IN(1 + has_lo) : NULL;
    for (int i = 0; i < n->n_inputs; i++) {
        const int which = i == 0 ? 0 : (i == 1 && has_lo ? 1 : 2);
        if (NEEDS(i) && !(gin[i] = cg_k_clamp_tensor_backward(IN(0), lo, hi, g, which)))
            return false;
    }
    return true;
}

cg_tensor *cg_clamp_tensor(cg_tensor *x, cg_tensor *min, cg_tensor *max)
{
    cg_tensor *in[3] = {x, min ? min : max, min ? max : NULL};
    cg_node *n;
    cg_tensor *out = cg_op_finish(cg_k_clamp_tensor(x, min, max), CG_OP_CLAMP_TENSOR,
                                  1 + (min != NULL) + (max != NULL), in, clamp_tensor_bw, &n);
    if (n) {
        n->p.i[0] = min != NULL;
        n->p.i[1] = max != NULL;
    }
    return out;
}

/* -------------------------------------------------------------- cross */
/* a: cross(b, g), b: cross(g, a) (PyTorch's), along the dim in p.i[0] */
static bool cross_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int d = (int)n->p.i[0];
    if (NEEDS(0) && !(gin[0] = cg_k_cross(IN(1), g, d)))
        return false;
    return !NEEDS(1) || (gin[1] = cg_k_cross(g, IN(0), d)) != NULL;
}

cg_tensor *cg_cross(cg_tensor *a, cg_tensor *b, int dim)
{
    cg_node *n;
    cg_tensor *out =
        cg_op_finish(cg_k_cross(a, b, dim), CG_OP_CROSS, 2, (cg_tensor *[]){a, b}, cross_bw, &n);
    if (n)
        n->p.i[0] = cg_norm_dim("linalg.cross", dim, a->ndim);
    return out;
}

/* --------------------------------------------------------------- diff */
/* [prepend, a, append] along dim (a new reference) */
static cg_tensor *with_ends(cg_tensor *a, int dim, cg_tensor *prepend, cg_tensor *append)
{
    cg_tensor *parts[3];
    int k = 0;
    if (prepend)
        parts[k++] = prepend;
    parts[k++] = a;
    if (append)
        parts[k++] = append;
    for (int i = 0; i < k; i++)
        if (parts[i]->ndim != a->ndim) {
            cg_set_error("diff: expects prepend or append to be the same dimension as input "
                         "(%d dims, input %d)",
                         parts[i]->ndim, a->ndim);
            return NULL;
        }
    return k == 1 ? cg_retain(a) : cg_concat(parts, k, dim);
}

cg_tensor *cg_diff(cg_tensor *a, int64_t n, int dim, cg_tensor *prepend, cg_tensor *append)
{
    if (!a) {
        cg_error_null_input("diff");
        return NULL;
    }
    if (a->ndim == 0) {
        cg_set_error("diff: expects input to be at least one-dimensional");
        return NULL;
    }
    if (n < 0) {
        cg_set_error("diff: order must be non-negative but got %lld", (long long)n);
        return NULL;
    }
    const int d = cg_norm_dim("diff", dim, a->ndim);
    cg_tensor *r = d < 0 ? NULL : with_ends(a, d, prepend, append);
    if (!r || n == 0) { /* order 0: a copy of a, the ends left out (PyTorch's) */
        cg_release(r);
        return r ? cg_clone(a) : NULL;
    }
    const bool fl = cg_dtype_is_float(r->dtype);
    for (int64_t i = 0, len = r->shape[d]; r && i < n && len > 0; i++, len--) {
        cg_tensor *next;
        if (fl) { /* r[1:] - r[:-1]: the graph's ops, their gradients */
            cg_tensor *hi = cg_narrow(r, d, 1, len - 1), *lo = cg_narrow(r, d, 0, len - 1);
            next = hi && lo ? cg_sub(hi, lo) : NULL;
            cg_release_all(2, hi, lo);
        } else
            next = cg_k_diff(r, d); /* integers and bool: no gradient */
        cg_release(r);
        r = next;
    }
    return r;
}

/* ---------------------------------------------------------- trapezoid */
/* y's checks, its dim normalised into *d; *empty: y has no samples along
 * it, the result zeros of y's shape without dim (PyTorch's) */
static bool trapezoid_y(cg_tensor *y, int dim, int *d, cg_tensor **empty)
{
    *empty = NULL;
    if (!y) {
        cg_error_null_input("trapezoid");
        return false;
    }
    if ((*d = cg_norm_dim("trapezoid", dim, y->ndim)) < 0)
        return false;
    if (y->shape[*d] == 0) {
        int64_t shape[CG_MAX_DIMS];
        int nd = 0;
        for (int i = 0; i < y->ndim; i++)
            if (i != *d)
                shape[nd++] = y->shape[i];
        *empty = cg_zeros_dtype(y->dtype, nd, shape);
        return *empty != NULL;
    }
    if (y->dtype == CG_BOOL) {
        cg_set_error("trapezoid: received a bool input for `y`, but bool is not supported");
        return false;
    }
    return true;
}

/* t as floats: itself (a new reference), or integers converted to float32 */
static cg_tensor *as_float(cg_tensor *t)
{
    return cg_dtype_is_float(t->dtype) ? cg_retain(t) : cg_to(t, CG_F32);
}

cg_tensor *cg_trapezoid(cg_tensor *y, double dx, int dim)
{
    int d;
    cg_tensor *empty;
    if (!trapezoid_y(y, dim, &d, &empty))
        return NULL;
    if (empty)
        return empty;
    /* (sum(y) - (y_0 + y_last) / 2) dx, PyTorch's order of operations */
    cg_tensor *f = as_float(y);
    cg_tensor *s = f ? cg_sum(f, 1, &d, false) : NULL;
    cg_tensor *y0 = s ? cg_select(f, d, 0) : NULL, *yn = y0 ? cg_select(f, d, -1) : NULL;
    cg_tensor *e = yn ? cg_add(y0, yn) : NULL, *h = e ? cg_muls(e, 0.5f) : NULL;
    cg_tensor *t = h ? cg_sub(s, h) : NULL, *out = t ? cg_muls(t, (float)dx) : NULL;
    cg_release_all(7, f, s, y0, yn, e, h, t);
    return out;
}

/* x seen with y's number of dims: 1-d x along dim d (its length y's
 * there), fewer dims padded with leading ones, else x (a new reference) */
static cg_tensor *x_like_y(cg_tensor *x, const cg_tensor *y, int d)
{
    int64_t shape[CG_MAX_DIMS];
    if (x->ndim == 1) {
        if (x->shape[0] != y->shape[d]) {
            cg_set_error("trapezoid: There must be one `x` value for each sample point (x has "
                         "%lld, y %lld along dim %d)",
                         (long long)x->shape[0], (long long)y->shape[d], d);
            return NULL;
        }
        for (int i = 0; i < y->ndim; i++)
            shape[i] = i == d ? x->shape[0] : 1;
        return cg_reshape(x, y->ndim, shape);
    }
    if (x->ndim < y->ndim) {
        const int pad = y->ndim - x->ndim;
        for (int i = 0; i < y->ndim; i++)
            shape[i] = i < pad ? 1 : x->shape[i - pad];
        return cg_reshape(x, y->ndim, shape);
    }
    return cg_retain(x);
}

cg_tensor *cg_trapezoid_x(cg_tensor *y, cg_tensor *x, int dim)
{
    int d;
    cg_tensor *empty;
    if (!trapezoid_y(y, dim, &d, &empty))
        return NULL;
    if (empty)
        return empty;
    if (!x) {
        cg_error_null_arg("trapezoid", "x");
        return NULL;
    }
    if (x->dtype == CG_BOOL) {
        cg_set_error("trapezoid: received a bool input for `x`, but bool is not supported");
        return NULL;
    }
    /* sum((y[:-1] + y[1:]) (x[1:] - x[:-1])) / 2 along dim, PyTorch's; an
     * integer operand in the other's float dtype (both: float32) */
    const int64_t len = y->shape[d];
    const bool yfl = cg_dtype_is_float(y->dtype), xfl = cg_dtype_is_float(x->dtype);
    cg_tensor *xv = x_like_y(x, y, d);
    cg_tensor *xf = xv ? (xfl ? cg_retain(xv) : cg_to(xv, yfl ? y->dtype : CG_F32)) : NULL;
    cg_tensor *yf = xf ? (yfl ? cg_retain(y) : cg_to(y, xf->dtype)) : NULL;
    cg_tensor *xr = yf ? cg_narrow(xf, d, 1, xf->shape[d] - 1) : NULL;
    cg_tensor *xl = xr ? cg_narrow(xf, d, 0, xf->shape[d] - 1) : NULL;
    cg_tensor *yl = xl ? cg_narrow(yf, d, 0, len - 1) : NULL;
    cg_tensor *yr = yl ? cg_narrow(yf, d, 1, len - 1) : NULL;
    cg_tensor *dxt = yr ? cg_sub(xr, xl) : NULL, *ys = dxt ? cg_add(yl, yr) : NULL;
    cg_tensor *p = ys ? cg_mul(ys, dxt) : NULL, *s = p ? cg_sum(p, 1, &d, false) : NULL;
    cg_tensor *out = s ? cg_muls(s, 0.5f) : NULL;
    cg_release_all(11, xv, xf, yf, xr, xl, yl, yr, dxt, ys, p, s);
    return out;
}
