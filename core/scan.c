/* cgrad core: sorting, products and scans along one dim (declared in
 * core/ops.h, "sorting, products and scans"): sort's and cummax/cummin's
 * indices, prod, cumprod and logcumsumexp with their backwards, one_hot.
 *
 * Each float op reads its input as contiguous float32 [outer, n, inner]
 * around dim (bf16 and f16 widened, exactly) and runs one function per line
 * (a run of n elements at stride inner); the lines are independent and each
 * is computed in index order, in double where it accumulates, so the bits
 * depend on neither the strides nor the thread count. PyTorch 1.13's CPU
 * kernels accumulate cumprod and logcumsumexp in double too, with the same
 * formulas: their outputs are its bits. Sort and cummax/cummin take
 * integer and bool lines too, read as int64 (exact); their values are
 * picked by cg_k_take_along_dim, which copies elements of any dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/reduce_impl.h"
#include "core/shares.h"
#include "core/typed_impl.h"
#include "core/upcast.h"

#define SCAN_PAR 32768

typedef enum {
    L_SORT,
    L_CUMEXT,
    L_CUMPROD,
    L_CUMPROD_BW,
    L_LCSE,
    L_LCSE_BW,
    L_PROD,
    L_PROD_BW
} kind;

typedef struct {
    float v;
    int64_t i;
} sort_key;

/* an integer or bool line's key: the value exactly, then the index */
typedef struct {
    int64_t v, i;
} int_key;

typedef struct {
    kind k;
    bool flag;              /* sort: descending; cummax/cummin: smallest */
    const float *x, *y, *g; /* [outer, n, inner]; prod's g [outer, 1, inner] */
    const int64_t *xi;      /* sort, cummax/cummin of integers and bool: x as int64 */
    void *out;              /* float or int64; prod's [outer, 1, inner] */
    int64_t n, inner;
    unsigned char *scratch; /* n * sizeof(int_key) bytes per thread */
} line_job;

/* torch.sort's order: NaN the largest, ties by index (so a stable sort) */
static int cmp_ascending(const void *pa, const void *pb)
{
    const sort_key *a = pa, *b = pb;
    const bool an = a->v != a->v, bn = b->v != b->v;
    if (an != bn)
        return an ? 1 : -1;
    if (!an && a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}
static int cmp_descending(const void *pa, const void *pb)
{
    const sort_key *a = pa, *b = pb;
    const bool an = a->v != a->v, bn = b->v != b->v;
    if (an != bn)
        return an ? -1 : 1;
    if (!an && a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int cmp_int_ascending(const void *pa, const void *pb)
{
    const int_key *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}
static int cmp_int_descending(const void *pa, const void *pb)
{
    const int_key *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* an integer line: exact int64 keys, ties in index order */
static void sort_line_int(const line_job *j, const int64_t *x, int64_t *o, int_key *key)
{
    const int64_t n = j->n, s = j->inner;
    for (int64_t i = 0; i < n; i++)
        key[i] = (int_key){x[i * s], i};
    qsort(key, (size_t)n, sizeof *key, j->flag ? cmp_int_descending : cmp_int_ascending);
    for (int64_t i = 0; i < n; i++)
        o[i * s] = key[i].i;
}

/* cummax / cummin of an integer line: a tie moves to the later element */
static void cum_extreme_line_int(const line_job *j, const int64_t *x, int64_t *o)
{
    int64_t best = x[0], at = 0;
    for (int64_t i = 0; i < j->n; i++) {
        const int64_t v = x[i * j->inner];
        if (j->flag ? v <= best : v >= best) {
            best = v;
            at = i;
        }
        o[i * j->inner] = at;
    }
}

static void sort_line(const line_job *j, const float *x, int64_t *o, sort_key *key)
{
    const int64_t n = j->n, s = j->inner;
    for (int64_t i = 0; i < n; i++)
        key[i] = (sort_key){x[i * s], i};
    qsort(key, (size_t)n, sizeof *key, j->flag ? cmp_descending : cmp_ascending);
    for (int64_t i = 0; i < n; i++)
        o[i * s] = key[i].i;
}

/* PyTorch's cummax_cummin_helper: a NaN always takes over, and a tie
 * moves the index to the later element (>= and <=) */
static void cum_extreme_line(const line_job *j, const float *x, int64_t *o)
{
    float best = x[0];
    int64_t at = 0;
    for (int64_t i = 0; i < j->n; i++) {
        const float v = x[i * j->inner];
        if (v != v || (best == best && (j->flag ? v <= best : v >= best))) {
            best = v;
            at = i;
        }
        o[i * j->inner] = at;
    }
}

/* log(exp(a) + exp(b)) as PyTorch's logcumsumexp_cpu_kernel takes it (x
 * the new element, y the sum so far, std::min and std::max's NaN rules) */
static double log_add_exp(double x, double y)
{
    const double mn = y != y ? y : (y < x ? y : x), mx = y != y ? y : (x < y ? y : x);
    if (mn != mx || isfinite(mn))
        return log1p(exp(mn - mx)) + mx;
    return x; /* both the same infinity */
}

/* d cumprod: dx_k = prod_{i<k} x_i * T_k, T_k = g_k + x_{k+1} T_{k+1} (the
 * sum over j >= k of g_j times the x_i for k < i <= j): no division, so a
 * zero needs no case of its own (after the first zero the prefix is 0;
 * at it, T_k stops at the second). */
static void cumprod_bw_line(const line_job *j, const float *x, const float *g, float *o, double *t)
{
    const int64_t n = j->n, s = j->inner;
    double acc = 0.0;
    for (int64_t k = n - 1; k >= 0; k--) {
        acc = (double)g[k * s] + (k + 1 < n ? (double)x[(k + 1) * s] * acc : 0.0);
        t[k] = acc;
    }
    double pre = 1.0;
    for (int64_t k = 0; k < n; k++) {
        o[k * s] = (float)(pre * t[k]);
        pre *= x[k * s];
    }
}

/* d logcumsumexp: dx_k = exp(x_k - y_k) T_k, T_k = g_k + exp(y_k -
 * y_{k+1}) T_{k+1} (each factor <= 1: y never decreases; runs of the same
 * infinity take 1); dx_k 0 at x_k = -inf unless T_k is NaN */
static void lcse_bw_line(const line_job *j, const float *x, const float *y, const float *g,
                         float *o)
{
    const int64_t n = j->n, s = j->inner;
    double t = 0.0;
    for (int64_t k = n - 1; k >= 0; k--) {
        const double yk = y[k * s];
        if (k + 1 < n) {
            const double y1 = y[(k + 1) * s];
            const double f = yk == y1 ? 1.0 : exp(yk - y1);
            t = f == 0.0 ? 0.0 : f * t;
        }
        t += g[k * s];
        const double xk = x[k * s];
        o[k * s] = (float)(xk == -INFINITY ? 0.0 * t : exp(xk - yk) * t);
    }
}

/* d prod: g times the product of the others, prefix times suffix (exact
 * at zeros: one zero gives the others' product there, two give 0) */
static void prod_bw_line(const line_job *j, const float *x, double g, float *o, double *suf)
{
    const int64_t n = j->n, s = j->inner;
    double acc = 1.0;
    for (int64_t k = n - 1; k >= 0; k--) {
        suf[k] = acc;
        acc *= x[k * s];
    }
    double pre = 1.0;
    for (int64_t k = 0; k < n; k++) {
        o[k * s] = (float)(g * pre * suf[k]);
        pre *= x[k * s];
    }
}

static void line(const line_job *j, int64_t l, unsigned char *scratch)
{
    const int64_t p = l / j->inner, q = l % j->inner, n = j->n;
    const int64_t at = p * n * j->inner + q, at1 = p * j->inner + q; /* [.., n, ..], [.., 1, ..] */
    const float *x = j->x ? j->x + at : NULL;
    float *of = (float *)j->out + at;
    double acc;
    switch (j->k) {
    case L_SORT:
        if (j->xi)
            sort_line_int(j, j->xi + at, (int64_t *)j->out + at, (int_key *)scratch);
        else
            sort_line(j, x, (int64_t *)j->out + at, (sort_key *)scratch);
        break;
    case L_CUMEXT:
        if (j->xi)
            cum_extreme_line_int(j, j->xi + at, (int64_t *)j->out + at);
        else
            cum_extreme_line(j, x, (int64_t *)j->out + at);
        break;
    case L_CUMPROD:
        acc = 1.0;
        for (int64_t i = 0; i < n; i++)
            of[i * j->inner] = (float)(acc *= x[i * j->inner]);
        break;
    case L_CUMPROD_BW: cumprod_bw_line(j, x, j->g + at, of, (double *)scratch); break;
    case L_LCSE:
        acc = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            of[i * j->inner] = (float)(acc = log_add_exp(x[i * j->inner], acc));
        break;
    case L_LCSE_BW: lcse_bw_line(j, x, j->y + at, j->g + at, of); break;
    case L_PROD:
        acc = 1.0;
        for (int64_t i = 0; i < n; i++)
            acc *= x[i * j->inner];
        ((float *)j->out)[at1] = (float)acc;
        break;
    case L_PROD_BW: prod_bw_line(j, x, j->g[at1], of, (double *)scratch); break;
    }
}

typedef struct {
    const line_job *j;
} chunk_ctx;

static void lines_chunk(int64_t l0, int64_t l1, int thread, const void *ctx)
{
    const line_job *j = ((const chunk_ctx *)ctx)->j;
    unsigned char *scratch = j->scratch + (size_t)thread * (size_t)j->n * sizeof(int_key);
    for (int64_t l = l0; l < l1; l++)
        line(j, l, scratch);
}

/* Every line of j (outer * inner of them); false + error naming op when
 * out of memory for the scratch. */
static bool run_lines(const char *op, line_job *j, int64_t outer)
{
    const int64_t lines = outer * j->inner;
    if (lines == 0 || j->n == 0)
        return true;
    const int nt = cg_shares_team(lines * j->n > SCAN_PAR);
    const bool scratch = j->k == L_SORT || j->k == L_CUMPROD_BW || j->k == L_PROD_BW;
    j->scratch = scratch ? malloc((size_t)nt * (size_t)j->n * sizeof(int_key)) : NULL;
    if (scratch && !j->scratch) {
        cg_set_error("%s: out of memory", op);
        return false;
    }
    const chunk_ctx c = {j};
    cg_shares_run(lines, cg_shares_rows(j->n), nt, lines_chunk, &c);
    free(j->scratch);
    j->scratch = NULL;
    return true;
}

/* The inputs of a float line op as contiguous float32 (a new reference
 * each, NULL where t is NULL); false + error (nothing held) otherwise. */
static bool dense_args(int n, const cg_tensor *const *t, cg_tensor **d)
{
    for (int i = 0; i < n; i++) {
        d[i] = t[i] ? cg_upcast_dense(t[i], false) : NULL;
        if (t[i] && !d[i]) {
            for (int k = 0; k < i; k++)
                cg_release(d[k]);
            return false;
        }
    }
    return true;
}

/* The int64 indices of a line op (sort, cummax/cummin) of a, any dtype
 * (integers and bool read as int64, exactly) */
static cg_tensor *index_op(const char *op, const char *fn, const cg_tensor *a, int dim, kind k,
                           bool flag)
{
    if (!a) {
        cg_error_null_input(fn);
        return NULL;
    }
    int64_t outer, n, inner;
    if (!cg_around_dim(op, a, &dim, &outer, &n, &inner))
        return NULL;
    const bool fl = cg_dtype_is_float(a->dtype);
    cg_tensor *x, *out = NULL;
    if (fl ? !dense_args(1, &a, &x) : !(x = cg_dense_as(a, CG_I64, a->ndim, a->shape)))
        return NULL;
    out = cg_empty_dtype(CG_I64, a->ndim, a->shape);
    line_job j = {.k = k, .flag = flag, .n = n, .inner = inner};
    j.x = fl ? cg_data(x) : NULL;
    j.xi = fl ? NULL : cg_data_i64(x);
    if (out) {
        j.out = cg_data_i64(out);
        if (!run_lines(op, &j, outer)) {
            cg_release(out);
            out = NULL;
        }
    }
    cg_release(x);
    return out;
}

cg_tensor *cg_k_sort_indices(const cg_tensor *a, int dim, bool descending)
{
    return index_op("sort", "cg_k_sort_indices", a, dim, L_SORT, descending);
}

cg_tensor *cg_k_take_along_dim(const cg_tensor *a, int dim, const cg_tensor *index)
{
    if (!a || !index) {
        cg_error_null_input("take_along_dim");
        return NULL;
    }
    if (index->dtype != CG_I64) {
        cg_set_error("take_along_dim: the index is %s, expected int64",
                     cg_dtype_name(index->dtype));
        return NULL;
    }
    int64_t outer, n, inner;
    if (!cg_around_dim("take_along_dim", a, &dim, &outer, &n, &inner))
        return NULL;
    bool fits = index->ndim == a->ndim;
    for (int i = 0; fits && i < a->ndim; i++)
        fits = i == dim || index->shape[i] == a->shape[i];
    if (!fits) {
        char b1[96], b2[96];
        cg_set_error("take_along_dim: the index %s must have the input's shape %s but along dim "
                     "%d",
                     cg_shape_str(index, b1, sizeof b1), cg_shape_str(a, b2, sizeof b2), dim);
        return NULL;
    }
    const int64_t k = a->ndim ? index->shape[dim] : 1;
    cg_tensor *x = cg_k_contiguous(a), *ix = x ? cg_k_contiguous(index) : NULL;
    cg_tensor *out = ix ? cg_empty_dtype(a->dtype, index->ndim, index->shape) : NULL;
    const size_t z = cg_dtype_size(a->dtype);
    for (int64_t p = 0; out && p < outer; p++)
        for (int64_t t = 0; out && t < k; t++)
            for (int64_t q = 0; q < inner; q++) {
                const int64_t at = (p * k + t) * inner + q, i = cg_data_i64(ix)[at];
                if (i < 0 || i >= n) {
                    cg_set_error("take_along_dim: index %lld out of range [0, %lld)", (long long)i,
                                 (long long)n);
                    cg_release(out);
                    out = NULL;
                    break;
                }
                memcpy((char *)cg_data_ptr(out) + (size_t)at * z,
                       (const char *)cg_data_ptr(x) + (size_t)((p * n + i) * inner + q) * z, z);
            }
    cg_release_all(2, x, ix);
    return out;
}

cg_tensor *cg_k_cum_extreme_indices(const cg_tensor *a, int dim, bool smallest)
{
    return index_op(smallest ? "cummin" : "cummax", "cg_k_cum_extreme_indices", a, dim, L_CUMEXT,
                    smallest);
}

/* A float line op over up to three inputs of a's shape (g: reduced at
 * dim, keepdim's shape, for prod's backward): float32 lines, the result in
 * the promoted dtype of the inputs with a's shape (prod: 1 at dim) */
static cg_tensor *float_op(const char *op, const cg_tensor *a, const cg_tensor *y,
                           const cg_tensor *g, int dim, kind k)
{
    if (!a) {
        cg_error_null_input(op);
        return NULL;
    }
    cg_upcast u;
    if (!cg_upcast_begin(&u, op, 3, (const cg_tensor **[]){&a, &y, &g}))
        return NULL;
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    cg_tensor *d[3] = {NULL, NULL, NULL}, *out = NULL;
    if (!cg_around_dim(op, a, &dim, &outer, &n, &inner) ||
        !dense_args(3, (const cg_tensor *[]){a, y, g}, d))
        return cg_upcast_end(&u, NULL);
    memcpy(shape, a->shape, sizeof shape);
    if (k == L_PROD && a->ndim)
        shape[dim] = 1;
    out = cg_empty(a->ndim, shape);
    line_job j = {.k = k, .x = cg_data(d[0]), .n = n, .inner = inner};
    j.y = d[1] ? cg_data(d[1]) : NULL;
    j.g = d[2] ? cg_data(d[2]) : NULL;
    if (out) {
        j.out = cg_data(out);
        if (k == L_PROD && n == 0) /* the empty product */
            for (int64_t i = 0; i < outer * inner; i++)
                ((float *)j.out)[i] = 1.0f;
        if (!run_lines(op, &j, outer)) {
            cg_release(out);
            out = NULL;
        }
    }
    cg_release_all(3, d[0], d[1], d[2]);
    return cg_upcast_end(&u, out);
}

/* prod and cumprod of an integer or bool a: int64, wrapping as PyTorch's */
static cg_tensor *int_prod(const char *op, const cg_tensor *a, int dim, bool cumulative)
{
    int64_t outer, n, inner, shape[CG_MAX_DIMS];
    if (!cg_around_dim(op, a, &dim, &outer, &n, &inner))
        return NULL;
    memcpy(shape, a->shape, sizeof shape);
    if (!cumulative && a->ndim)
        shape[dim] = 1;
    cg_tensor *w = cg_k_to(a, CG_I64), *c = w ? cg_k_contiguous(w) : NULL;
    cg_tensor *out = c ? cg_empty_dtype(CG_I64, a->ndim, shape) : NULL;
    if (out) {
        const int64_t *x = cg_data_i64(c);
        int64_t *o = cg_data_i64(out);
        for (int64_t p = 0; p < outer; p++)
            for (int64_t q = 0; q < inner; q++) {
                uint64_t acc = 1;
                for (int64_t i = 0; i < n; i++) {
                    acc *= (uint64_t)x[(p * n + i) * inner + q];
                    if (cumulative)
                        o[(p * n + i) * inner + q] = (int64_t)acc;
                }
                if (!cumulative)
                    o[p * inner + q] = (int64_t)acc;
            }
    }
    cg_release_all(2, w, c);
    return out;
}

cg_tensor *cg_k_prod(const cg_tensor *a, int dim, bool keepdim)
{
    if (!a) {
        cg_error_null_input("cg_k_prod");
        return NULL;
    }
    cg_tensor *p = cg_dtype_is_float(a->dtype) ? float_op("prod", a, NULL, NULL, dim, L_PROD)
                                               : int_prod("prod", a, dim, false);
    if (!p || keepdim || a->ndim == 0)
        return p;
    int64_t shape[CG_MAX_DIMS];
    int nd = 0, d = dim < 0 ? dim + a->ndim : dim;
    for (int i = 0; i < a->ndim; i++)
        if (i != d)
            shape[nd++] = a->shape[i];
    cg_tensor *r = cg_k_reshape(p, nd, shape);
    cg_release(p);
    return r;
}

cg_tensor *cg_k_prod_backward(const cg_tensor *x, const cg_tensor *g, int dim)
{
    return g ? float_op("prod backward", x, NULL, g, dim, L_PROD_BW)
             : (cg_error_null_input("prod backward"), NULL);
}

cg_tensor *cg_k_cumprod(const cg_tensor *a, int dim)
{
    if (a && !cg_dtype_is_float(a->dtype))
        return int_prod("cumprod", a, dim, true);
    return float_op("cumprod", a, NULL, NULL, dim, L_CUMPROD);
}

cg_tensor *cg_k_cumprod_backward(const cg_tensor *x, const cg_tensor *g, int dim)
{
    return g ? float_op("cumprod backward", x, NULL, g, dim, L_CUMPROD_BW)
             : (cg_error_null_input("cumprod backward"), NULL);
}

cg_tensor *cg_k_logcumsumexp(const cg_tensor *a, int dim)
{
    return float_op("logcumsumexp", a, NULL, NULL, dim, L_LCSE);
}

cg_tensor *cg_k_logcumsumexp_backward(const cg_tensor *x, const cg_tensor *y, const cg_tensor *g,
                                      int dim)
{
    return y && g ? float_op("logcumsumexp backward", x, y, g, dim, L_LCSE_BW)
                  : (cg_error_null_input("logcumsumexp backward"), NULL);
}

cg_tensor *cg_k_one_hot(const cg_tensor *ids, int64_t num_classes)
{
    if (!ids) {
        cg_error_null_input("one_hot");
        return NULL;
    }
    if (ids->dtype != CG_I64) {
        cg_set_error("one_hot: ids are %s, expected int64 (class indices)",
                     cg_dtype_name(ids->dtype));
        return NULL;
    }
    if (ids->ndim >= CG_MAX_DIMS) {
        cg_set_error("one_hot: ids of %d dims, at most %d", ids->ndim, CG_MAX_DIMS - 1);
        return NULL;
    }
    cg_tensor *c = cg_k_contiguous(ids);
    if (!c)
        return NULL;
    const int64_t *v = cg_data_i64(c), m = cg_numel(c);
    int64_t lo = 0, hi = -1;
    for (int64_t i = 0; i < m; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    const char *why = NULL;
    if (num_classes < -1)
        why = "num_classes must be -1 (inferred) or >= 0";
    else if (num_classes == -1 && m == 0)
        why = "cannot infer num_classes from no ids (pass it)";
    else if (lo < 0)
        why = "ids must be non-negative";
    else if (num_classes >= 0 && hi >= num_classes)
        why = "an id is not below num_classes";
    if (why) {
        cg_set_error("one_hot: %s (num_classes %lld, ids in [%lld, %lld])", why,
                     (long long)num_classes, (long long)lo, (long long)hi);
        cg_release(c);
        return NULL;
    }
    const int64_t k = num_classes == -1 ? hi + 1 : num_classes;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, ids->shape, (size_t)ids->ndim * sizeof *shape);
    shape[ids->ndim] = k;
    cg_tensor *out = cg_zeros_dtype(CG_I64, ids->ndim + 1, shape);
    if (out)
        for (int64_t i = 0; i < m; i++)
            cg_data_i64(out)[i * k + v[i]] = 1;
    cg_release(c);
    return out;
}
