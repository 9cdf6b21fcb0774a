/* cgrad core: copies that put a tensor's elements in new places, every
 * dtype (declared in core/ops.h, "rearranging"): F.pad in its four modes
 * and its backward, torch.flip, torch.roll, Tensor.repeat, and repeat's
 * backward (a sum).
 *
 * Each is a view (negative strides, narrowed pieces, an expand) copied by
 * cg_k_copy_ or cg_k_clone, whose loops (core/iter.h) give each output
 * element to one thread: the same bits for any thread count, any layout.
 * The non-constant pads gather each padded dim with cg_k_index_select and
 * fold its gradient back with cg_k_index_add_ (shape_ops.c: a row's
 * sources added in increasing order); repeat's backward sums with
 * cg_k_sum, whose order is fixed (reduce.c). */
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/reduce_impl.h"

/* A view of t narrowed to [lo[d], lo[d] + len[d]) along every dim */
static cg_tensor *box(const cg_tensor *t, const int64_t *lo, const int64_t *len)
{
    cg_tensor *v = cg_view_alias(t);
    for (int d = 0; v && d < t->ndim; d++) {
        cg_tensor *w = cg_view_narrow(v, d, lo[d], len[d]);
        cg_release(v);
        v = w;
    }
    return v;
}

/* dst's box [dlo, dlo + len) = src's box [slo, slo + len) */
static bool copy_box(cg_tensor *dst, const int64_t *dlo, const cg_tensor *src, const int64_t *slo,
                     const int64_t *len)
{
    cg_tensor *d = box(dst, dlo, len), *s = d ? box(src, slo, len) : NULL;
    const bool ok = s && cg_k_copy_(d, s);
    cg_release_all(2, d, s);
    return ok;
}

/* ---------------------------------------------------------------- pad */
static const char *const pad_modes[] = {"constant", "reflect", "replicate", "circular"};

/* The sizes (l, r) dim d of an ndim-dim tensor is padded by */
static void pad_of(int ndim, int d, int n_pad, const int64_t *pad, int64_t *l, int64_t *r)
{
    const int k = ndim - 1 - d; /* pad[2k], pad[2k + 1] pad dim d */
    *l = k < n_pad / 2 ? pad[2 * k] : 0;
    *r = k < n_pad / 2 ? pad[2 * k + 1] : 0;
}

/* The part of a dim of size n padded (l, r) kept in place: [*slo, *slo +
 * *len) of the input at *dlo of the output */
static void pad_kept(int64_t n, int64_t l, int64_t r, int64_t *slo, int64_t *len, int64_t *dlo)
{
    *slo = l < 0 ? -l : 0;
    *len = n - *slo - (r < 0 ? -r : 0);
    *dlo = l > 0 ? l : 0;
}

/* The pad's arguments for a tensor of ndim dims of shape: pairs, a mode,
 * no value but constant's, sizes the mode can pad by; the padded shape
 * into out (may be NULL). False + one line naming the dim otherwise. */
static bool pad_check(int ndim, const int64_t *shape, int n_pad, const int64_t *pad,
                      cg_pad_mode mode, float value, int64_t *out)
{
    char b[96];
    if ((unsigned)mode > CG_PAD_CIRCULAR) {
        cg_set_error("pad: mode %d, expected constant, reflect, replicate or circular (0 to 3)",
                     (int)mode);
        return false;
    }
    if (mode != CG_PAD_CONSTANT && value != 0.0f) {
        cg_set_error("pad: mode %s takes no value (got %g): only constant pads with one",
                     pad_modes[mode], (double)value);
        return false;
    }
    if (n_pad < 0 || n_pad % 2 || (n_pad && !pad)) {
        cg_set_error("pad: %d padding sizes%s, expected pairs (left, right), the last dim's first",
                     n_pad, n_pad && !pad ? " and no array" : "");
        return false;
    }
    if (n_pad / 2 > ndim) {
        cg_set_error("pad: %d pairs of padding for a tensor of %d dims (shape %s)", n_pad / 2, ndim,
                     cg_shape_str_n(ndim, shape, b, sizeof b));
        return false;
    }
    for (int d = 0; d < ndim; d++) {
        int64_t l, r, slo, len, dlo;
        pad_of(ndim, d, n_pad, pad, &l, &r);
        pad_kept(shape[d], l, r, &slo, &len, &dlo);
        const int64_t n = shape[d], m = n + l + r;
        const char *why = NULL;
        if (mode == CG_PAD_REFLECT && (l >= n || r >= n) && (l > 0 || r > 0))
            why = "more than reflect takes (each size less than the dim's)";
        else if (mode == CG_PAD_REPLICATE && n == 0 && m > 0)
            why = "but replicate has no edge to repeat in an empty dim";
        else if (mode == CG_PAD_CIRCULAR && len >= 0 && (l > len || r > len))
            why = "more than circular takes (it wraps around once: each size at most the kept "
                  "length)";
        else if (mode == CG_PAD_CONSTANT || mode == CG_PAD_CIRCULAR ? len < 0 : m < 0)
            why = "more than it holds";
        if (why) {
            cg_set_error("pad: dim %d of size %lld %s by (%lld, %lld), %s (shape %s)", d,
                         (long long)n, len < 0 ? "cropped" : "padded", (long long)l, (long long)r,
                         why, cg_shape_str_n(ndim, shape, b, sizeof b));
            return false;
        }
        if (out)
            out[d] = m;
    }
    return true;
}

/* Where each of the n + l + r positions of a dim of size n padded (l, r)
 * in a mode other than constant reads from (pad_check passed) */
static cg_tensor *pad_sources(cg_pad_mode mode, int64_t n, int64_t l, int64_t r)
{
    const int64_t m = n + l + r;
    int64_t slo, len, dlo;
    pad_kept(n, l, r, &slo, &len, &dlo);
    cg_tensor *idx = cg_empty_dtype(CG_I64, 1, (int64_t[]){m});
    int64_t *src = idx ? cg_data_i64(idx) : NULL;
    for (int64_t o = 0; src && o < m; o++) {
        int64_t p = o - l;
        if (mode == CG_PAD_CIRCULAR)
            p = slo + ((o - dlo) % len + len) % len;
        else if (mode == CG_PAD_REPLICATE)
            p = p < 0 ? 0 : p >= n ? n - 1 : p;
        else
            p = p < 0 ? -p : p >= n ? 2 * (n - 1) - p : p;
        src[o] = p;
    }
    return idx;
}

/* The constant pad: value around the kept boxes */
static cg_tensor *pad_constant(const cg_tensor *a, int n_pad, const int64_t *pad, float value,
                               const int64_t *shape)
{
    int64_t slo[CG_MAX_DIMS] = {0}, dlo[CG_MAX_DIMS] = {0}, len[CG_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        int64_t l, r;
        pad_of(a->ndim, d, n_pad, pad, &l, &r);
        pad_kept(a->shape[d], l, r, &slo[d], &len[d], &dlo[d]);
    }
    cg_tensor *out = cg_full_dtype(a->dtype, a->ndim, shape, value);
    if (out && !copy_box(out, dlo, a, slo, len)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

cg_tensor *cg_k_pad(const cg_tensor *a, int n_pad, const int64_t *pad, cg_pad_mode mode,
                    float value)
{
    if (!a) {
        cg_error_null_input("cg_k_pad");
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS];
    if (!pad_check(a->ndim, a->shape, n_pad, pad, mode, value, shape))
        return NULL;
    if (mode == CG_PAD_CONSTANT)
        return pad_constant(a, n_pad, pad, value, shape);
    /* one gather a padded dim, the last first: each element read once */
    cg_tensor *x = NULL;
    for (int d = a->ndim - 1; d >= 0; d--) {
        int64_t l, r;
        pad_of(a->ndim, d, n_pad, pad, &l, &r);
        if (!l && !r)
            continue;
        cg_tensor *idx = pad_sources(mode, a->shape[d], l, r);
        cg_tensor *y = idx ? cg_k_index_select(x ? x : a, d, idx) : NULL;
        cg_release_all(2, idx, x);
        if (!(x = y))
            return NULL;
    }
    return x ? x : cg_k_clone(a); /* nothing padded: a copy */
}

cg_tensor *cg_k_pad_backward(const cg_tensor *g, int ndim, const int64_t *shape, int n_pad,
                             const int64_t *pad, cg_pad_mode mode)
{
    if (!g || !shape) {
        cg_error_null_input("cg_k_pad_backward");
        return NULL;
    }
    int64_t padded[CG_MAX_DIMS];
    if (ndim < 0 || ndim > CG_MAX_DIMS) {
        cg_set_error("pad backward: %d dims", ndim);
        return NULL;
    }
    if (!pad_check(ndim, shape, n_pad, pad, mode, 0.0f, padded))
        return NULL;
    bool same = g->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = g->shape[d] == padded[d];
    if (!same) {
        char b1[96], b2[96];
        cg_set_error("pad backward: gradient of shape %s, expected the padded shape %s",
                     cg_shape_str(g, b1, sizeof b1), cg_shape_str_n(ndim, padded, b2, sizeof b2));
        return NULL;
    }
    if (mode == CG_PAD_CONSTANT) { /* the kept part, cropped back */
        int64_t neg[2 * CG_MAX_DIMS];
        for (int i = 0; i < n_pad; i++)
            neg[i] = -pad[i];
        return cg_k_pad(g, n_pad, neg, CG_PAD_CONSTANT, 0.0f);
    }
    if (g->dtype != CG_F32 && g->dtype != CG_BF16) {
        cg_set_error("pad backward: gradient of dtype %s, expected float32 or bfloat16",
                     cg_dtype_name(g->dtype));
        return NULL;
    }
    /* each padded dim folded onto its sources, the last first, in float32 */
    cg_tensor *x = g->dtype == CG_F32 ? cg_view_alias(g) : cg_k_to(g, CG_F32);
    bool folded = false;
    int64_t cur[CG_MAX_DIMS];
    memcpy(cur, padded, sizeof *cur * (size_t)ndim);
    for (int d = ndim - 1; x && d >= 0; d--) {
        int64_t l, r;
        pad_of(ndim, d, n_pad, pad, &l, &r);
        if (!l && !r)
            continue;
        cur[d] = shape[d];
        cg_tensor *idx = pad_sources(mode, shape[d], l, r);
        cg_tensor *y = idx ? cg_zeros_dtype(CG_F32, ndim, cur) : NULL;
        if (y && !cg_k_index_add_(y, d, idx, x)) {
            cg_release(y);
            y = NULL;
        }
        cg_release_all(2, idx, x);
        x = y;
        folded = true;
    }
    /* a fresh tensor of g's dtype, never g's storage */
    cg_tensor *out = !x ? NULL : folded ? cg_k_to(x, g->dtype) : cg_k_clone(g);
    cg_release(x);
    return out;
}

/* --------------------------------------------------------------- flip */
cg_tensor *cg_k_flip(const cg_tensor *a, int ndims, const int *dims)
{
    if (!a) {
        cg_error_null_input("cg_k_flip");
        return NULL;
    }
    bool flip[CG_MAX_DIMS] = {0}; /* a reduction's dims: each once (none: a copy) */
    if (ndims && !cg_reduce_dims("flip", a, ndims, dims, flip))
        return NULL;
    if (cg_numel(a) == 0)
        return cg_k_clone(a);
    /* the same elements seen from the other end along each flipped dim */
    int64_t strides[CG_MAX_DIMS], offset = a->offset;
    for (int d = 0; d < a->ndim; d++) {
        strides[d] = flip[d] ? -a->strides[d] : a->strides[d];
        offset += flip[d] ? (a->shape[d] - 1) * a->strides[d] : 0;
    }
    cg_tensor *v = cg_view_as_strided(a, a->ndim, a->shape, strides, offset);
    cg_tensor *out = v ? cg_k_clone(v) : NULL;
    cg_release(v);
    return out;
}

/* --------------------------------------------------------------- roll */
/* a rolled by s[d] (in [0, size)) along each dim: the 2^k boxes of the k
 * rolled dims, each a piece of a that moves whole */
static cg_tensor *roll_boxes(const cg_tensor *a, const int64_t *s)
{
    int rolled[CG_MAX_DIMS], k = 0;
    for (int d = 0; d < a->ndim; d++)
        if (s[d])
            rolled[k++] = d;
    if (k == 0)
        return cg_k_clone(a);
    cg_tensor *out = cg_empty_dtype(a->dtype, a->ndim, a->shape);
    for (int64_t m = 0; out && m < ((int64_t)1 << k); m++) {
        int64_t slo[CG_MAX_DIMS] = {0}, dlo[CG_MAX_DIMS] = {0}, len[CG_MAX_DIMS];
        memcpy(len, a->shape, (size_t)a->ndim * sizeof *len);
        for (int j = 0; j < k; j++) {
            const int d = rolled[j];
            const int64_t n = a->shape[d];
            if (m >> j & 1) { /* the last s elements come first */
                slo[d] = n - s[d];
                len[d] = s[d];
            } else {
                dlo[d] = s[d];
                len[d] = n - s[d];
            }
        }
        if (!copy_box(out, dlo, a, slo, len)) {
            cg_release(out);
            return NULL;
        }
    }
    return out;
}

cg_tensor *cg_k_roll(const cg_tensor *a, int n, const int64_t *shifts, const int *dims)
{
    if (!a) {
        cg_error_null_input("cg_k_roll");
        return NULL;
    }
    if (n < 1 || !shifts || (!dims && n != 1)) {
        cg_set_error("roll: %d shifts%s, expected one a dim of dims, or one (the tensor "
                     "flattened) without dims",
                     n, shifts ? "" : " (NULL)");
        return NULL;
    }
    if (!dims) { /* the tensor flattened, rolled, and given its shape back */
        const int64_t numel = cg_numel(a);
        cg_tensor *f = cg_k_reshape(a, 1, &numel),
                  *r = f ? cg_k_roll(f, 1, shifts, (int[]){0}) : NULL;
        cg_tensor *out = r ? cg_k_reshape(r, a->ndim, a->shape) : NULL;
        cg_release_all(2, f, r);
        return out;
    }
    int64_t s[CG_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) { /* a dim named twice rolls twice, as torch.roll */
        const int d = cg_norm_dim("roll", dims[i], a->ndim);
        if (d < 0)
            return NULL;
        const int64_t size = a->shape[d];
        s[d] = size ? ((s[d] + shifts[i] % size) % size + size) % size : 0;
    }
    return roll_boxes(a, s);
}

/* ------------------------------------------------------------- repeat */
/* t's shape seen as [P, 1, Q] around dim d: P the dims before d, Q d and
 * those after it */
static void around(const cg_tensor *t, int d, int64_t *pq)
{
    pq[0] = pq[1] = pq[2] = 1;
    for (int i = 0; i < t->ndim; i++)
        pq[i < d ? 0 : 2] *= t->shape[i];
}

cg_tensor *cg_k_repeat(const cg_tensor *a, int n, const int64_t *sizes)
{
    if (!a) {
        cg_error_null_input("cg_k_repeat");
        return NULL;
    }
    char b[96];
    if (n < a->ndim || n > CG_MAX_DIMS || (n && !sizes)) {
        cg_set_error("repeat: %d sizes for a tensor of shape %s, expected %d to %d (one a dim, and "
                     "new leading dims)",
                     n, cg_shape_str(a, b, sizeof b), a->ndim, CG_MAX_DIMS);
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS] = {0};
    for (int d = 0; d < n; d++) {
        if (sizes[d] < 0) {
            cg_set_error("repeat: size %lld at %d is negative", (long long)sizes[d], d);
            return NULL;
        }
        shape[d] = d < n - a->ndim ? 1 : a->shape[d - (n - a->ndim)];
    }
    /* one dim at a time: [P, 1, Q] expanded to [P, r, Q] and copied */
    cg_tensor *cur = cg_k_reshape(a, n, shape);
    bool copied = false;
    for (int d = 0; cur && d < n; d++) {
        if (sizes[d] == 1)
            continue;
        int64_t pq[3];
        around(cur, d, pq);
        cg_tensor *v = cg_k_reshape(cur, 3, pq);
        pq[1] = sizes[d];
        cg_tensor *e = v ? cg_view_expand(v, 3, pq) : NULL, *c = e ? cg_k_clone(e) : NULL;
        cg_release_all(3, cur, v, e);
        shape[d] *= sizes[d];
        cur = c ? cg_k_reshape(c, n, shape) : NULL;
        cg_release(c);
        copied = true;
    }
    if (cur && !copied) { /* a copy, as torch's repeat, never a view */
        cg_tensor *c = cg_k_clone(cur);
        cg_release(cur);
        cur = c;
    }
    return cur;
}

cg_tensor *cg_k_repeat_backward(const cg_tensor *g, int ndim, const int64_t *shape)
{
    if (!g) {
        cg_error_null_input("cg_k_repeat_backward");
        return NULL;
    }
    char b1[96], b2[96];
    const int lead = g->ndim - ndim;
    bool ok = lead >= 0 && ndim >= 0 && (ndim == 0 || shape);
    for (int d = 0; ok && d < ndim; d++)
        ok = shape[d] ? g->shape[lead + d] % shape[d] == 0 : g->shape[lead + d] == 0;
    if (!ok) {
        cg_set_error("repeat_backward: gradient %s is not a repeat of the shape %s",
                     cg_shape_str(g, b1, sizeof b1), cg_shape_str_n(ndim, shape, b2, sizeof b2));
        return NULL;
    }
    if (cg_numel(g) == 0) /* a size 0 repeated, or repeated 0 times */
        return cg_zeros_dtype(g->dtype, ndim, shape);
    /* each repeated dim's r copies summed, one dim at a time: [P, r, Q] */
    cg_tensor *cur = cg_retain((cg_tensor *)g);
    for (int d = 0; cur && d < g->ndim; d++) {
        const int64_t s = d < lead ? 1 : shape[d - lead], r = cur->shape[d] / s;
        if (r == 1)
            continue;
        int64_t pq[3], sh[CG_MAX_DIMS];
        memcpy(sh, cur->shape, (size_t)cur->ndim * sizeof *sh);
        around(cur, d, pq);
        pq[1] = r;
        pq[2] = pq[2] / r;
        cg_tensor *v = cg_k_reshape(cur, 3, pq);
        cg_tensor *sum = v ? cg_k_sum(v, 1, (int[]){1}, false) : NULL;
        cg_release_all(2, cur, v);
        sh[d] = s;
        cur = sum ? cg_k_reshape(sum, g->ndim, sh) : NULL;
        cg_release(sum);
    }
    cg_tensor *out = cur ? cg_k_reshape(cur, ndim, shape) : NULL;
    cg_release(cur);
    return out;
}
