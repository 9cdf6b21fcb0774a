/* Tensors: views (permute, transpose, slice, narrow, select, squeeze,
 * unsqueeze, expand, reshape, diagonal): new headers over the same storage, no copy.
 * The storage and lifecycle are tensor.c. */
#include "core/tensor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_impl.h"

/* ---------------------------------------------------------------- views */
static cg_tensor *view_of(const cg_tensor *t, int64_t offset, int ndim, const int64_t *shape,
                          const int64_t *strides)
{
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "view"))
        return NULL; /* a freed tensor has no storage to view */
    return cg_tensor_header(t->storage, t->dtype, offset, ndim, shape, strides);
}

cg_tensor *cg_view_alias(const cg_tensor *t)
{
    return t ? view_of(t, t->offset, t->ndim, t->shape, t->strides) : NULL;
}

cg_tensor *cg_view_permute(const cg_tensor *t, const int *perm)
{
    if (!t) {
        cg_error_null_input("cg_view_permute");
        return NULL;
    }
    if (!perm && t->ndim) {
        cg_set_error("permute: NULL permutation");
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    bool seen[CG_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        int d = perm[i] < 0 ? perm[i] + t->ndim : perm[i];
        if (d < 0 || d >= t->ndim || seen[d]) {
            char b[96];
            cg_set_error("permute: invalid permutation for shape %s (entry %d = %d)",
                         cg_shape_str(t, b, sizeof b), i, perm[i]);
            return NULL;
        }
        seen[d] = true;
        shape[i] = t->shape[d];
        strides[i] = t->strides[d];
    }
    return view_of(t, t->offset, t->ndim, shape, strides);
}

cg_tensor *cg_view_transpose(const cg_tensor *t, int d0, int d1)
{
    if (!t) {
        cg_error_null_input("cg_view_transpose");
        return NULL;
    }
    int a = cg_norm_dim("transpose", d0, t->ndim), b = cg_norm_dim("transpose", d1, t->ndim);
    if (a < 0 || b < 0)
        return NULL;
    int perm[CG_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return cg_view_permute(t, perm);
}

cg_tensor *cg_view_slice(const cg_tensor *t, int dim, int64_t start, int64_t stop, int64_t step)
{
    if (!t) {
        cg_error_null_input("cg_view_slice");
        return NULL;
    }
    int d = cg_norm_dim("slice", dim, t->ndim);
    if (d < 0)
        return NULL;
    if (step < 1) {
        cg_set_error("slice: step must be >= 1 (got %lld)", (long long)step);
        return NULL;
    }
    int64_t size = t->shape[d];
    if (start < 0)
        start += size;
    if (stop < 0)
        stop += size;
    if (start < 0)
        start = 0;
    if (start > size)
        start = size;
    if (stop > size)
        stop = size;
    if (stop < start)
        stop = start;
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    /* ceil((stop - start) / step) without stop - start + step - 1, which
     * overflows for a step near INT64_MAX (x[0:10:2^63-1] is x[0:1]). The
     * new stride, and the offset of an empty slice at the end, may not fit
     * where they are never used (one element taken, or none): the old
     * stride and offset then */
    shape[d] = stop == start ? 0 : (stop - start - 1) / step + 1;
    if (__builtin_mul_overflow(t->strides[d], step, &strides[d]))
        strides[d] = t->strides[d];
    int64_t off;
    if (__builtin_mul_overflow(start, t->strides[d], &off) ||
        __builtin_add_overflow(off, t->offset, &off))
        off = t->offset;
    return view_of(t, off, t->ndim, shape, strides);
}

cg_tensor *cg_view_narrow(const cg_tensor *t, int dim, int64_t start, int64_t len)
{
    if (!t) {
        cg_error_null_input("cg_view_narrow");
        return NULL;
    }
    int d = cg_norm_dim("narrow", dim, t->ndim);
    if (d < 0)
        return NULL;
    if (start < 0)
        start += t->shape[d];
    if (start < 0 || start > t->shape[d] || len < 0 || len > t->shape[d] - start) {
        char b[96]; /* start + len may overflow: named as a sum */
        cg_set_error("narrow: range [%lld, %lld + %lld) out of bounds for dim %d of shape %s",
                     (long long)start, (long long)start, (long long)len, dim,
                     cg_shape_str(t, b, sizeof b));
        return NULL;
    }
    return cg_view_slice(t, d, start, start + len, 1);
}

cg_tensor *cg_view_select(const cg_tensor *t, int dim, int64_t index)
{
    if (!t) {
        cg_error_null_input("cg_view_select");
        return NULL;
    }
    int d = cg_norm_dim("select", dim, t->ndim);
    if (d < 0)
        return NULL;
    int64_t i = index < 0 ? index + t->shape[d] : index;
    if (i < 0 || i >= t->shape[d]) {
        char b[96];
        cg_set_error("select: index %lld out of range for dim %d of shape %s", (long long)index,
                     dim, cg_shape_str(t, b, sizeof b));
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < t->ndim; k++) {
        if (k == d)
            continue;
        shape[n] = t->shape[k];
        strides[n++] = t->strides[k];
    }
    return view_of(t, t->offset + i * t->strides[d], n, shape, strides);
}

/* torch.diagonal: dim1 and dim2 removed, the diagonal appended last */
cg_tensor *cg_view_diagonal(const cg_tensor *t, int64_t offset, int dim1, int dim2)
{
    if (!t) {
        cg_error_null_input("cg_view_diagonal");
        return NULL;
    }
    int a = cg_norm_dim("diagonal", dim1, t->ndim), b = cg_norm_dim("diagonal", dim2, t->ndim);
    if (a < 0 || b < 0)
        return NULL;
    if (a == b) {
        cg_set_error("diagonal: diagonal dimensions cannot be identical %d, %d", dim1, dim2);
        return NULL;
    }
    /* the first element: offset along dim2 (offset >= 0) or dim1 (< 0) */
    const int64_t na = t->shape[a], nb = t->shape[b];
    int64_t len = offset >= 0 ? (offset < nb ? nb - offset : 0) : (-offset < na ? na + offset : 0);
    len = len < (offset >= 0 ? na : nb) ? len : (offset >= 0 ? na : nb);
    int64_t start = t->offset;
    if (len > 0)
        start += offset >= 0 ? offset * t->strides[b] : -offset * t->strides[a];
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < t->ndim; k++)
        if (k != a && k != b) {
            shape[n] = t->shape[k];
            strides[n++] = t->strides[k];
        }
    shape[n] = len;
    strides[n++] = t->strides[a] + t->strides[b];
    return view_of(t, start, n, shape, strides);
}

cg_tensor *cg_view_squeeze(const cg_tensor *t, int dim)
{
    if (!t) {
        cg_error_null_input("cg_view_squeeze");
        return NULL;
    }
    if (t->ndim == 0 && (dim == 0 || dim == -1)) /* torch.squeeze: a 0-d tensor's dim 0 */
        return cg_view_alias(t);
    int d = cg_norm_dim("squeeze", dim, t->ndim);
    if (d < 0)
        return NULL;
    if (t->shape[d] != 1) {
        char b[96];
        cg_set_error("squeeze: dim %d of shape %s has size %lld, not 1", dim,
                     cg_shape_str(t, b, sizeof b), (long long)t->shape[d]);
        return NULL;
    }
    return cg_view_select(t, d, 0);
}

cg_tensor *cg_view_unsqueeze(const cg_tensor *t, int dim)
{
    if (!t) {
        cg_error_null_input("cg_view_unsqueeze");
        return NULL;
    }
    if (t->ndim >= CG_MAX_DIMS) {
        cg_set_error("unsqueeze: tensor already has the maximum of %d dims", CG_MAX_DIMS);
        return NULL;
    }
    int d = dim < 0 ? dim + t->ndim + 1 : dim;
    if (d < 0 || d > t->ndim) { /* a new dim goes anywhere in [0, ndim] */
        cg_set_error("unsqueeze: dim %d out of range [%d, %d] for a tensor with %d dims", dim,
                     -t->ndim - 1, t->ndim, t->ndim);
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    int n = 0;
    for (int k = 0; k <= t->ndim; k++) {
        if (k == d) {
            shape[n] = 1;
            strides[n++] = k < t->ndim ? t->strides[k] * t->shape[k] : 1;
        }
        if (k < t->ndim) {
            shape[n] = t->shape[k];
            strides[n++] = t->strides[k];
        }
    }
    return view_of(t, t->offset, t->ndim + 1, shape, strides);
}

cg_tensor *cg_view_expand(const cg_tensor *t, int ndim, const int64_t *shape)
{
    if (!t) {
        cg_error_null_input("cg_view_expand");
        return NULL;
    }
    if (ndim > 0 && !shape) {
        cg_set_error("expand: NULL shape");
        return NULL;
    }
    if (ndim < t->ndim || ndim > CG_MAX_DIMS) {
        char b1[96], b2[96];
        cg_set_error("expand: cannot expand shape %s to %s", cg_shape_str(t, b1, sizeof b1),
                     cg_shape_str_n(ndim, shape, b2, sizeof b2));
        return NULL;
    }
    int64_t strides[CG_MAX_DIMS], out[CG_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int k = i - lead;
        /* torch.Tensor.expand: -1 keeps an existing dim's size; a new
         * (leading) dim needs a size >= 0 */
        out[i] = k >= 0 && shape[i] == -1 ? t->shape[k] : shape[i];
        if (k < 0 && out[i] >= 0) {
            strides[i] = 0;
        } else if (k >= 0 && t->shape[k] == out[i]) {
            strides[i] = t->strides[k];
        } else if (k >= 0 && t->shape[k] == 1 && out[i] >= 0) {
            strides[i] = 0;
        } else {
            char b1[96], b2[96];
            cg_set_error("expand: cannot expand shape %s to %s (dim %d: %lld vs %lld)",
                         cg_shape_str(t, b1, sizeof b1), cg_shape_str_n(ndim, shape, b2, sizeof b2),
                         i, k >= 0 ? (long long)t->shape[k] : 1LL, (long long)shape[i]);
            return NULL;
        }
    }
    if (!cg_shape_check("expand", ndim, out)) /* [4, 2^62 + 1]'s count wraps to 4 */
        return NULL;
    return view_of(t, t->offset, ndim, out, strides);
}

cg_tensor *cg_view_as_strided(const cg_tensor *t, int ndim, const int64_t *shape,
                              const int64_t *strides, int64_t offset)
{
    if (!t) {
        cg_error_null_input("cg_view_as_strided");
        return NULL;
    }
    if (ndim < 0 || ndim > CG_MAX_DIMS || (ndim > 0 && (!shape || !strides))) {
        cg_set_error("as_strided: need 0 to %d dims with a shape and strides (got %d%s)",
                     CG_MAX_DIMS, ndim, ndim > 0 && (!shape || !strides) ? ", NULL" : "");
        return NULL;
    }
    if (!cg_shape_check("as_strided", ndim, shape))
        return NULL;
    /* the elements' range of offsets, which must lie within the storage;
     * each reach and their sums checked, as a wrapped one (stride 2^61 over
     * 9 elements reaches 2^64, read as 0) would pass as in range */
    const int64_t have = (int64_t)(t->storage->nbytes / cg_dtype_size(t->dtype));
    int64_t lo = offset, hi = offset;
    bool empty = false, wraps = false;
    for (int i = 0; i < ndim; i++) {
        empty |= shape[i] == 0;
        int64_t reach;
        wraps |= __builtin_mul_overflow(strides[i], shape[i] > 0 ? shape[i] - 1 : 0, &reach);
        if (reach < 0)
            wraps |= __builtin_add_overflow(lo, reach, &lo);
        else
            wraps |= __builtin_add_overflow(hi, reach, &hi);
    }
    if (!empty && wraps) {
        char b[96], c[96];
        cg_set_error("as_strided: shape %s with strides %s at offset %lld reaches past 2^63 "
                     "elements",
                     cg_shape_str_n(ndim, shape, b, sizeof b),
                     cg_shape_str_n(ndim, strides, c, sizeof c), (long long)offset);
        return NULL;
    }
    if (offset < 0 || (!empty && (lo < 0 || hi >= have))) {
        char b[96];
        cg_set_error("as_strided: shape %s at offset %lld reaches elements [%lld, %lld] of a "
                     "storage of %lld",
                     cg_shape_str_n(ndim, shape, b, sizeof b), (long long)offset, (long long)lo,
                     (long long)hi, (long long)have);
        return NULL;
    }
    return view_of(t, offset, ndim, shape, strides);
}

/* Resolve a -1 entry and check the element count. */
static bool infer_shape(const char *op, const cg_tensor *t, int ndim, const int64_t *shape,
                        int64_t *out)
{
    if (ndim < 0 || ndim > CG_MAX_DIMS) {
        cg_set_error("%s: bad target ndim %d", op, ndim);
        return false;
    }
    if (ndim && !shape) {
        cg_set_error("%s: NULL shape", op);
        return false;
    }
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                cg_set_error("%s: only one dimension can be -1", op);
                return false;
            }
            infer = i;
            out[i] = 1; /* for the count below, then inferred */
        } else if (shape[i] < 0) {
            cg_set_error("%s: negative size %lld", op, (long long)shape[i]);
            return false;
        }
    }
    /* the known sizes' count, checked first: [4, 2^62 + 1]'s wraps to 4 */
    if (!cg_shape_check(op, ndim, out))
        return false;
    int64_t known = cg_numel_shape(ndim, out);
    int64_t n = cg_numel(t);
    if (infer >= 0) {
        if (known == 0 || n % known) {
            char b1[96], b2[96];
            cg_set_error("%s: cannot reshape %s into %s", op, cg_shape_str(t, b1, sizeof b1),
                         cg_shape_str_n(ndim, shape, b2, sizeof b2));
            return false;
        }
        out[infer] = n / known;
        known *= out[infer];
    }
    if (known != n) {
        char b1[96], b2[96];
        cg_set_error("%s: cannot reshape %s (%lld elements) into %s", op,
                     cg_shape_str(t, b1, sizeof b1), (long long)n,
                     cg_shape_str_n(ndim, shape, b2, sizeof b2));
        return false;
    }
    return true;
}

/* Strides for viewing t with a new shape without a copy (PyTorch's rule:
 * each run of old dims that is contiguous in memory may be re-split). */
static bool view_strides(const cg_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t n = cg_numel(t);
    if (n == 0 || t->ndim == 0) {
        cg_contiguous_strides(ndim, shape, strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tensor_numel *= t->shape[td];
        if (td == 0 ||
            (t->shape[td - 1] != 1 && t->strides[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel)
                return false;
            if (td > 0) {
                chunk_base_stride = t->strides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

cg_tensor *cg_view_reshape(const cg_tensor *t, int ndim, const int64_t *shape)
{
    if (!t) {
        cg_error_null_input("cg_view_reshape");
        return NULL;
    }
    int64_t s[CG_MAX_DIMS], st[CG_MAX_DIMS];
    if (!infer_shape("view", t, ndim, shape, s))
        return NULL;
    if (!view_strides(t, ndim, s, st)) {
        char b1[96], b2[96];
        cg_set_error("view: shape %s with these strides cannot be viewed as %s without a copy "
                     "(use reshape)",
                     cg_shape_str(t, b1, sizeof b1), cg_shape_str_n(ndim, s, b2, sizeof b2));
        return NULL;
    }
    return view_of(t, t->offset, ndim, s, st);
}

cg_tensor *cg_k_reshape(const cg_tensor *t, int ndim, const int64_t *shape)
{
    if (!t) {
        cg_error_null_input("cg_k_reshape");
        return NULL;
    }
    int64_t s[CG_MAX_DIMS], st[CG_MAX_DIMS];
    if (!infer_shape("reshape", t, ndim, shape, s))
        return NULL;
    if (view_strides(t, ndim, s, st))
        return view_of(t, t->offset, ndim, s, st);
    cg_tensor *c = cg_k_clone(t);
    if (!c)
        return NULL;
    cg_contiguous_strides(ndim, s, st);
    cg_tensor *v = view_of(c, 0, ndim, s, st);
    cg_release(c);
    return v;
}
