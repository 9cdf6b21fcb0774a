/* cgrad core: searching, counting and uniques (declared in core/ops.h,
 * "searching, counting and uniques"): searchsorted, bucketize, bincount,
 * histc, unique and unique_consecutive (whole, or slices along a dim).
 *
 * Nothing here is differentiable; each is computed sequentially, in index
 * order (the same bits for any thread count). Values are compared as
 * PyTorch 1.13's CPU kernels compare them: integers exactly as int64,
 * floats as numbers in the dtype the op promotes to. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/typed_impl.h"

/* ------------------------------------------------------- searchsorted */
typedef struct {
    const float *f;        /* the sequence (floats) or */
    const int64_t *i;      /* (integers), its rows of n */
    const int64_t *sorter; /* NULL, or the order of each row */
    int64_t n;
    bool right;
} search_row;

/* PyTorch's cus_lower_bound / cus_upper_bound: the first position whose
 * value is not below v (left) or above v (right); comparisons written as
 * theirs, !(x >= v) and !(x > v), so that a NaN counts as below anything */
static int64_t bound_f(const search_row *r, int64_t row, float v)
{
    int64_t lo = 0, hi = r->n;
    const float *s = r->f + row * r->n;
    const int64_t *o = r->sorter ? r->sorter + row * r->n : NULL;
    while (lo < hi) {
        const int64_t mid = lo + ((hi - lo) >> 1);
        const float x = o ? s[o[mid]] : s[mid];
        if (r->right ? !(x > v) : !(x >= v))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int64_t bound_i(const search_row *r, int64_t row, int64_t v)
{
    int64_t lo = 0, hi = r->n;
    const int64_t *s = r->i + row * r->n;
    const int64_t *o = r->sorter ? r->sorter + row * r->n : NULL;
    while (lo < hi) {
        const int64_t mid = lo + ((hi - lo) >> 1);
        const int64_t x = o ? s[o[mid]] : s[mid];
        if (r->right ? !(x > v) : !(x >= v))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* the checks of searchsorted's arguments; false + error */
static bool search_args(const cg_tensor *seq, const cg_tensor *values, const cg_search_opts *o,
                        bool *right)
{
    *right = o->right;
    if (o->side) {
        if (strcmp(o->side, "left") && strcmp(o->side, "right")) {
            cg_set_error("searchsorted: side can only be 'left' or 'right' but got '%s'", o->side);
            return false;
        }
        if (o->right && !strcmp(o->side, "left")) {
            cg_set_error("searchsorted: side and right can't be set to opposites, got side of "
                         "left while right was true");
            return false;
        }
        *right = !strcmp(o->side, "right");
    }
    char b1[96], b2[96];
    if (seq->ndim == 0) {
        cg_set_error("searchsorted: the sorted sequence must have at least one dimension, but "
                     "it is 0-d");
        return false;
    }
    bool match = seq->ndim == 1 || seq->ndim == values->ndim;
    for (int d = 0; match && seq->ndim > 1 && d < seq->ndim - 1; d++)
        match = seq->shape[d] == values->shape[d];
    if (!match) {
        cg_set_error("searchsorted: the sorted sequence %s must be 1-d or share all but its last "
                     "dim with the values %s",
                     cg_shape_str(seq, b1, sizeof b1), cg_shape_str(values, b2, sizeof b2));
        return false;
    }
    const cg_tensor *s = o->sorter;
    if (s && s->dtype != CG_I64) {
        cg_set_error("searchsorted: sorter must be a tensor of long dtype but got dtype %s",
                     cg_dtype_name(s->dtype));
        return false;
    }
    if (s && (s->ndim != seq->ndim || !cg_same_shape(s, seq))) {
        cg_set_error("searchsorted: boundary and sorter must have the same size, but got "
                     "boundary tensor %s and sorter tensor %s",
                     cg_shape_str(seq, b1, sizeof b1), cg_shape_str(s, b2, sizeof b2));
        return false;
    }
    return true;
}

/* sorter (contiguous int64) holding indices in [0, n) only */
static bool sorter_in_range(const cg_tensor *sorter, int64_t n)
{
    for (int64_t i = 0; i < cg_numel(sorter); i++) {
        const int64_t v = cg_data_i64(sorter)[i];
        if (v < 0 || v >= n) {
            cg_set_error("searchsorted: sorter holds %lld at %lld, out of range [0, %lld) (PyTorch "
                         "reads past the sequence)",
                         (long long)v, (long long)i, (long long)n);
            return false;
        }
    }
    return true;
}

cg_tensor *cg_searchsorted(const cg_tensor *sorted_sequence, const cg_tensor *values,
                           const cg_search_opts *opts)
{
    if (!sorted_sequence || !values) {
        cg_error_null_input("searchsorted");
        return NULL;
    }
    const cg_search_opts o = opts ? *opts : (cg_search_opts){0};
    bool right;
    if (!search_args(sorted_sequence, values, &o, &right))
        return NULL;
    const cg_dtype dt = cg_result_type(2, (const cg_tensor *[]){sorted_sequence, values});
    if (dt == CG_BOOL) {
        cg_set_error("searchsorted: bool sequences and values are not supported (as PyTorch)");
        return NULL;
    }
    const int64_t n = sorted_sequence->shape[sorted_sequence->ndim - 1];
    cg_tensor *s =
        cg_dense_common(sorted_sequence, dt, sorted_sequence->ndim, sorted_sequence->shape);
    cg_tensor *v = s ? cg_dense_common(values, dt, values->ndim, values->shape) : NULL;
    cg_tensor *so = v && o.sorter ? cg_k_contiguous(o.sorter) : NULL;
    cg_tensor *out = NULL;
    if (v && (!o.sorter || (so && sorter_in_range(so, n))))
        out = cg_empty_dtype(o.out_int32 ? CG_I32 : CG_I64, values->ndim, values->shape);
    if (out) {
        const bool fl = cg_dtype_is_float(dt);
        search_row r = {fl ? cg_data(s) : NULL, fl ? NULL : cg_data_i64(s),
                        so ? cg_data_i64(so) : NULL, n, right};
        /* the values' last dim runs along one row of an N-d sequence */
        const int64_t m = cg_numel(values), per = sorted_sequence->ndim > 1 && values->ndim
                                                      ? values->shape[values->ndim - 1]
                                                      : (m ? m : 1);
        for (int64_t i = 0; i < m; i++) {
            const int64_t row = sorted_sequence->ndim > 1 ? i / per : 0;
            const int64_t at =
                fl ? bound_f(&r, row, cg_data(v)[i]) : bound_i(&r, row, cg_data_i64(v)[i]);
            if (o.out_int32)
                cg_data_i32(out)[i] = (int32_t)at;
            else
                cg_data_i64(out)[i] = at;
        }
    }
    cg_release_all(3, s, v, so);
    return out;
}

cg_tensor *cg_bucketize(const cg_tensor *input, const cg_tensor *boundaries, bool out_int32,
                        bool right)
{
    if (!input || !boundaries) {
        cg_error_null_input("bucketize");
        return NULL;
    }
    if (boundaries->ndim != 1) {
        cg_set_error("bucketize: boundaries tensor must be 1 dimension, but got dim(%d)",
                     boundaries->ndim);
        return NULL;
    }
    cg_search_opts o = {.right = right, .out_int32 = out_int32};
    cg_tensor *out = cg_searchsorted(boundaries, input, &o);
    if (!out && strncmp(cg_last_error(), "searchsorted", 12) == 0)
        cg_prefix_error("bucketize: ");
    return out;
}

/* ----------------------------------------------------------- bincount */
cg_tensor *cg_k_bincount(const cg_tensor *x, const cg_tensor *weights, int64_t minlength)
{
    if (!x) {
        cg_error_null_input("bincount");
        return NULL;
    }
    if (x->dtype != CG_I64 && x->dtype != CG_I32) {
        cg_set_error("bincount: the input is %s, expected int64 or int32 (as PyTorch)",
                     cg_dtype_name(x->dtype));
        return NULL;
    }
    if (minlength < 0) {
        cg_set_error("bincount: minlength should be >= 0 (got %lld)", (long long)minlength);
        return NULL;
    }
    char b[96];
    if (x->ndim != 1) {
        cg_set_error("bincount: only supports 1-d non-negative integral inputs (got %s)",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    if (cg_numel(x) == 0) /* PyTorch's: int64 zeros, weights or not */
        return cg_zeros_dtype(CG_I64, 1, &minlength);
    if (weights && (weights->ndim != 1 || weights->shape[0] != x->shape[0])) {
        cg_set_error("bincount: weights should be 1-d and have the same length as input (got "
                     "%s for %lld)",
                     cg_shape_str(weights, b, sizeof b), (long long)x->shape[0]);
        return NULL;
    }
    if (weights && weights->dtype != CG_F32) {
        cg_set_error("bincount: the weights are %s; PyTorch counts weights other than float32 "
                     "in float64, which cgrad has not (cg_to them CG_F32)",
                     cg_dtype_name(weights->dtype));
        return NULL;
    }
    cg_tensor *ids = cg_dense_as(x, CG_I64, 1, x->shape);
    cg_tensor *w = ids && weights ? cg_k_contiguous(weights) : NULL;
    if (!ids || (weights && !w)) {
        cg_release_all(2, ids, w);
        return NULL;
    }
    const int64_t *v = cg_data_i64(ids), n = x->shape[0];
    int64_t hi = -1;
    for (int64_t i = 0; i < n && hi >= -1; i++)
        hi = v[i] < 0 ? -2 : (v[i] > hi ? v[i] : hi);
    cg_tensor *out = NULL;
    if (hi == -2)
        cg_set_error("bincount: only supports 1-d non-negative integral inputs (a negative id)");
    else {
        int64_t len = hi + 1 > minlength ? hi + 1 : minlength;
        out = cg_zeros_dtype(w ? CG_F32 : CG_I64, 1, &len);
    }
    for (int64_t i = 0; out && i < n; i++) { /* in index order: PyTorch's float sums */
        if (w)
            cg_data(out)[v[i]] += cg_data(w)[i];
        else
            cg_data_i64(out)[v[i]]++;
    }
    cg_release_all(2, ids, w);
    return out;
}

/* -------------------------------------------------------------- histc */
/* v rounded to dt (bfloat16's arithmetic rounds each op, as PyTorch's;
 * float16, which PyTorch 1.13's histc lacks, computed in float32) */
static float rnd(cg_dtype dt, float v)
{
    return dt == CG_BF16 ? cg_bf16_to_f32(cg_f32_to_bf16(v)) : v;
}

/* histc's range: [min, max] as given, else the data's (min == max), else
 * widened by 1 each way; false + error when not finite or empty */
static bool histc_range(const cg_tensor *x, const float *v, double *lo, double *hi)
{
    if (*lo == *hi && cg_numel(x) > 0) {
        double a = v[0], b = v[0];
        for (int64_t i = 1; i < cg_numel(x); i++) { /* aminmax: a NaN takes over */
            a = isnan(a) || isnan(v[i]) ? NAN : (v[i] < a ? v[i] : a);
            b = isnan(b) || isnan(v[i]) ? NAN : (v[i] > b ? v[i] : b);
        }
        *lo = a, *hi = b;
    }
    if (*lo == *hi)
        *lo -= 1, *hi += 1;
    if (!isfinite(*lo) || !isfinite(*hi)) {
        cg_set_error("histc: range of [%g, %g] is not finite", *lo, *hi);
        return false;
    }
    if (!(*lo < *hi)) {
        cg_set_error("histc: max must be larger than min (got [%g, %g])", *lo, *hi);
        return false;
    }
    return true;
}

cg_tensor *cg_histc(const cg_tensor *x, int64_t bins, double min, double max)
{
    if (!x) {
        cg_error_null_input("histc");
        return NULL;
    }
    if (!cg_dtype_is_float(x->dtype)) {
        cg_set_error("histc: the input is %s, expected a float dtype (as PyTorch)",
                     cg_dtype_name(x->dtype));
        return NULL;
    }
    if (bins <= 0) {
        cg_set_error("histc: bins must be > 0, but got %lld", (long long)bins);
        return NULL;
    }
    cg_tensor *d = cg_dense_as(x, CG_F32, x->ndim, x->shape);
    if (!d)
        return NULL;
    const float *v = cg_data(d);
    double lo = min, hi = max;
    int64_t *cnt = NULL;
    cg_tensor *out = NULL;
    if (histc_range(x, v, &lo, &hi)) {
        cnt = calloc((size_t)bins, sizeof *cnt);
        if (!cnt)
            cg_set_error("histc: out of memory");
    }
    if (cnt) {
        const cg_dtype dt = x->dtype;
        /* the edges as the op's dtype holds them (linspace's first and last) */
        const float left = rnd(dt, (float)lo), right = rnd(dt, (float)hi);
        const float width = rnd(dt, right - left), nb = rnd(dt, (float)bins);
        for (int64_t i = 0; i < cg_numel(x); i++) {
            const float e = v[i];
            if (!(e >= left && e <= right)) /* outside, or NaN */
                continue;
            /* PyTorch's linear interpolation, each op in the dtype */
            int64_t pos = (int64_t)rnd(dt, rnd(dt, rnd(dt, e - left) * nb) / width);
            pos = pos >= bins ? bins - 1 : (pos < 0 ? 0 : pos); /* the last bin holds max */
            cnt[pos]++;
        }
        out = cg_empty_dtype(dt, 1, &bins);
        for (int64_t b = 0; out && b < bins; b++) /* each count rounded once */
            cg_elem_set(dt, (char *)cg_data_ptr(out) + b * (int64_t)cg_dtype_size(dt),
                        (double)cnt[b]);
    }
    free(cnt);
    cg_release(d);
    return out;
}

/* ------------------------------------------------------------- unique */
/* n rows of m keys (floats or integers) */
typedef struct {
    const float *f;
    const int64_t *i;
    int64_t m;
} rows_ctx;

/* row a against row b in the order of the unique values: element by
 * element, NaN the largest (two NaN alike, as PyTorch's sort of slices) */
static int row_cmp(const rows_ctx *c, int64_t a, int64_t b)
{
    for (int64_t k = 0; k < c->m; k++) {
        if (c->f) {
            const float x = c->f[a * c->m + k], y = c->f[b * c->m + k];
            const bool xn = isnan(x), yn = isnan(y);
            if (xn || yn) {
                if (xn && yn)
                    continue;
                return xn ? 1 : -1;
            }
            if (x != y)
                return x < y ? -1 : 1;
        } else {
            const int64_t x = c->i[a * c->m + k], y = c->i[b * c->m + k];
            if (x != y)
                return x < y ? -1 : 1;
        }
    }
    return 0;
}

/* rows equal as their values are (a NaN equals nothing, -0 equals 0) */
static bool row_eq(const rows_ctx *c, int64_t a, int64_t b)
{
    for (int64_t k = 0; k < c->m; k++)
        if (c->f ? !(c->f[a * c->m + k] == c->f[b * c->m + k])
                 : c->i[a * c->m + k] != c->i[b * c->m + k])
            return false;
    return true;
}

/* idx[0, n) sorted by row_cmp, stably (bottom-up merges through tmp) */
static void sort_rows(const rows_ctx *c, int64_t *idx, int64_t *tmp, int64_t n)
{
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = row_cmp(c, idx[b], idx[a]) < 0 ? idx[b++] : idx[a++];
            while (a < mid)
                tmp[k++] = idx[a++];
            while (b < hi)
                tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

/* The groups of n rows: sorted (unless consecutive), equal neighbours one
 * group. rep[g]: the first row of group g (in the order), inv[r]: row r's
 * group, cnt[g]: its size; returns the number of groups (-1: no memory) */
static int64_t group_rows(const rows_ctx *c, int64_t n, bool consecutive, int64_t *rep,
                          int64_t *inv, int64_t *cnt)
{
    int64_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    int64_t *tmp = consecutive ? NULL : malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!idx || (!consecutive && !tmp)) {
        free(idx);
        free(tmp);
        return -1;
    }
    for (int64_t r = 0; r < n; r++)
        idx[r] = r;
    if (!consecutive)
        sort_rows(c, idx, tmp, n);
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j == 0 || !row_eq(c, idx[j - 1], idx[j])) {
            rep[k] = idx[j];
            cnt[k++] = 0;
        }
        inv[idx[j]] = k - 1;
        cnt[k - 1]++;
    }
    free(idx);
    free(tmp);
    return k;
}

/* The checks of unique's dim, normalised into *d; false + error (PyTorch's
 * refusals of an empty x but along its one empty dim) */
static bool unique_dim_ok(const char *op, const cg_tensor *x, int dim, int *d)
{
    if (x->ndim == 0) {
        cg_set_error("%s: dim %d given, but the tensor has no dimensions", op, dim);
        return false;
    }
    if ((*d = cg_norm_dim(op, dim, x->ndim)) < 0)
        return false;
    if (cg_numel(x) == 0) {
        int zeros = 0;
        for (int i = 0; i < x->ndim; i++)
            zeros += x->shape[i] == 0;
        if (zeros > 1 || x->shape[*d] != 0) {
            cg_set_error("%s: %s, so unique cannot be applied", op,
                         zeros > 1 ? "there is more than one zero-sized dimension"
                                   : "there are 0-sized dimensions, and they aren't selected");
            return false;
        }
    }
    return true;
}

/* x (nd dims, dim d moved first) as rows: keys [n, m] in the compute
 * dtype, and the rows in x's dtype, *rows [n, ...] (contiguous) */
static cg_tensor *unique_keys(const cg_tensor *x, bool has_dim, int d, cg_tensor **rows)
{
    int perm[CG_MAX_DIMS], nd = 0;
    int64_t n = cg_numel(x), shape[CG_MAX_DIMS];
    cg_tensor *xp;
    if (has_dim) {
        perm[nd++] = d;
        for (int i = 0; i < x->ndim; i++)
            if (i != d)
                perm[nd++] = i;
        xp = cg_view_permute(x, perm);
    } else
        xp = cg_k_reshape(x, 1, &n);
    *rows = xp ? cg_k_contiguous(xp) : NULL;
    if (*rows)
        memcpy(shape, (*rows)->shape, sizeof shape);
    cg_tensor *keys =
        *rows ? cg_dense_as(*rows, cg_compute_dtype(x->dtype), (*rows)->ndim, shape) : NULL;
    cg_release(xp);
    return keys;
}

static cg_tensor *unique_impl(const char *op, const cg_tensor *x, bool has_dim, int dim,
                              bool consecutive, cg_tensor **inverse, cg_tensor **counts)
{
    if (inverse)
        *inverse = NULL;
    if (counts)
        *counts = NULL;
    if (!x) {
        cg_error_null_input(op);
        return NULL;
    }
    int d = 0;
    if (has_dim && !unique_dim_ok(op, x, dim, &d))
        return NULL;
    cg_tensor *rows, *keys = unique_keys(x, has_dim, d, &rows);
    const int64_t n = keys ? (has_dim ? keys->shape[0] : cg_numel(keys)) : 0;
    int64_t *buf = keys ? malloc((size_t)(3 * n + 1) * sizeof *buf) : NULL;
    if (keys && !buf)
        cg_set_error("%s: out of memory", op);
    int64_t k = -1;
    if (buf) {
        const bool fl = cg_dtype_is_float(keys->dtype);
        const rows_ctx c = {fl ? cg_data(keys) : NULL, fl ? NULL : cg_data_i64(keys),
                            n ? cg_numel(keys) / n : 0};
        if ((k = group_rows(&c, n, consecutive, buf, buf + n, buf + 2 * n)) < 0)
            cg_set_error("%s: out of memory", op);
    }
    cg_tensor *rep = k >= 0 ? cg_from_i64(1, &k, buf) : NULL;
    cg_tensor *vals = rep ? cg_k_index_select(rows, 0, rep) : NULL, *out = NULL;
    if (vals && has_dim) { /* dim back in its place */
        int inv_perm[CG_MAX_DIMS];
        for (int i = 0; i < x->ndim; i++)
            inv_perm[i] = i == d ? 0 : (i < d ? i + 1 : i);
        cg_tensor *v = cg_view_permute(vals, inv_perm);
        out = v ? cg_k_contiguous(v) : NULL;
        cg_release(v);
    } else if (vals)
        out = cg_retain(vals);
    /* the inverse: x's shape (of the dim's size with a dim) */
    int64_t ni = has_dim ? x->shape[d] : 0;
    cg_tensor *inv = out && inverse ? (has_dim ? cg_from_i64(1, &ni, buf + n)
                                               : cg_from_i64(x->ndim, x->shape, buf + n))
                                    : NULL;
    cg_tensor *cnt = out && counts ? cg_from_i64(1, &k, buf + 2 * n) : NULL;
    if (out && ((inverse && !inv) || (counts && !cnt))) {
        cg_release_all(3, out, inv, cnt);
        out = inv = cnt = NULL;
    }
    if (inverse)
        *inverse = inv;
    if (counts)
        *counts = cnt;
    free(buf);
    cg_release_all(4, rows, keys, rep, vals);
    return out;
}

cg_tensor *cg_k_unique(const cg_tensor *x, bool sorted, cg_tensor **inverse, cg_tensor **counts)
{
    (void)sorted; /* sorted either way: an order PyTorch leaves open for sorted=False */
    return unique_impl("unique", x, false, 0, false, inverse, counts);
}

cg_tensor *cg_k_unique_dim(const cg_tensor *x, int dim, bool sorted, cg_tensor **inverse,
                           cg_tensor **counts)
{
    (void)sorted;
    return unique_impl("unique", x, true, dim, false, inverse, counts);
}

cg_tensor *cg_k_unique_consecutive(const cg_tensor *x, cg_tensor **inverse, cg_tensor **counts)
{
    return unique_impl("unique_consecutive", x, false, 0, true, inverse, counts);
}

cg_tensor *cg_k_unique_consecutive_dim(const cg_tensor *x, int dim, cg_tensor **inverse,
                                       cg_tensor **counts)
{
    return unique_impl("unique_consecutive", x, true, dim, true, inverse, counts);
}
