/* Ops along one dimension (or the last two): tril / triu, cumsum, and
 * topk's indices. */
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/reduce_impl.h"
#include "core/upcast.h"

cg_tensor *cg_k_triangle(const cg_tensor *a, int64_t diagonal, bool upper)
{
    if (!a) {
        cg_error_null_input("cg_k_triangle");
        return NULL;
    }
    const char *op = upper ? "triu" : "tril";
    if (a->ndim < 2) {
        char b[96];
        cg_set_error("%s: needs at least 2 dims (shape %s)", op, cg_shape_str(a, b, sizeof b));
        return NULL;
    }
    cg_tensor *out = cg_k_clone(a); /* contiguous */
    if (!out)
        return NULL;
    int64_t R = a->shape[a->ndim - 2], C = a->shape[a->ndim - 1];
    int64_t mats = R > 0 && C > 0 ? cg_numel(a) / (R * C) : 0;
    char *o = cg_data_ptr(out); /* any dtype: zero is all zero bits in each */
    size_t es = cg_dtype_size(a->dtype);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
                if (!keep)
                    memset(o + ((m * R + i) * C + j) * (int64_t)es, 0, es);
            }
    return out;
}

cg_tensor *cg_k_cumsum(const cg_tensor *a, int dim, bool reverse)
{
    if (!a) {
        cg_error_null_input("cg_k_cumsum");
        return NULL;
    }
    cg_upcast u; /* bf16 and f16 summed in float32 (double), rounded back */
    if (!cg_upcast_begin(&u, "cumsum", 1, (const cg_tensor **[]){&a}))
        return NULL;
    int64_t outer, n, inner;
    cg_tensor *out = cg_around_dim("cumsum", a, &dim, &outer, &n, &inner) ? cg_k_clone(a) : NULL;
    if (!out)
        return cg_upcast_end(&u, NULL);
    float *o = cg_data(out);
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            double s = 0.0;
            for (int64_t t = 0; t < n; t++) {
                int64_t i = reverse ? n - 1 - t : t;
                float *e = &o[(p * n + i) * inner + q];
                s += *e;
                *e = (float)s;
            }
        }
    return cg_upcast_end(&u, out);
}

/* Whether x comes before y in the order of topk (NaN is the largest). */
static bool topk_before(float x, int64_t ix, float y, int64_t iy, bool largest)
{
    bool xn = x != x, yn = y != y;
    if (xn || yn) {
        if (xn && yn)
            return ix < iy;
        return largest ? xn : yn;
    }
    if (x != y)
        return largest ? x > y : x < y;
    return ix < iy;
}

/* Moves the element held for index i down from heap slot j of h[0, m), in
 * which every parent comes after its children in topk's order (the root is
 * the last of the kept ones), until it is in place. */
static void topk_sift_down(const float *row, int64_t s, bool largest, int64_t *h, int64_t m,
                           int64_t j, int64_t i)
{
    for (;;) {
        int64_t c = 2 * j + 1;
        if (c >= m)
            break;
        if (c + 1 < m && topk_before(row[h[c] * s], h[c], row[h[c + 1] * s], h[c + 1], largest))
            c++; /* the later child */
        if (!topk_before(row[i * s], i, row[h[c] * s], h[c], largest))
            break;
        h[j] = h[c];
        j = c;
    }
    h[j] = i;
}

/* The indices of the first k of row[0, n) (stride s) in topk's order, in
 * that order, into best[0, k): a heap of the first k so far whose root is
 * the last of them, which a later element replaces only when it comes
 * before it (n log k; one comparison for most elements), then a heapsort
 * of the k. */
static void topk_row(const float *row, int64_t s, int64_t n, int64_t k, bool largest, int64_t *best)
{
    int64_t i = 0;
    for (; i < n && i < k; i++) { /* sift up from the end: parents after i move down */
        int64_t j = i;
        for (; j > 0; j = (j - 1) / 2) {
            const int64_t p = best[(j - 1) / 2];
            if (!topk_before(row[p * s], p, row[i * s], i, largest))
                break;
            best[j] = p;
        }
        best[j] = i;
    }
    float root = k > 0 ? row[best[0] * s] : 0.0f;
    for (; k > 0 && i < n; i++) {
        const float v = row[i * s];
        if (largest ? v < root : v > root)
            continue; /* after the root, as most are: one comparison */
        if (topk_before(v, i, root, best[0], largest)) {
            topk_sift_down(row, s, largest, best, k, 0, i);
            root = row[best[0] * s];
        }
    }
    for (int64_t m = k - 1; m > 0; m--) { /* the last one to the end, and again */
        const int64_t last = best[0];
        topk_sift_down(row, s, largest, best, m, 0, best[m]);
        best[m] = last;
    }
}

/* topk of an integer a: the first k of a stable sort (largest: descending),
 * ties in index order as topk_row orders them */
static cg_tensor *topk_int(const cg_tensor *a, int64_t k, int dim, bool largest)
{
    cg_tensor *all = cg_k_sort_indices(a, dim, largest);
    if (!all || a->ndim == 0) { /* k 1: the 0-d index; k 0: [0] */
        if (all && k == 0) {
            cg_release(all);
            return cg_empty_dtype(CG_I64, 1, (int64_t[]){0});
        }
        return all;
    }
    cg_tensor *v = cg_view_narrow(all, dim, 0, k), *out = v ? cg_k_contiguous(v) : NULL;
    cg_release_all(2, all, v);
    return out;
}

cg_tensor *cg_k_topk_indices(const cg_tensor *a, int64_t k, int dim, bool largest)
{
    if (!a) {
        cg_error_null_input("cg_k_topk_indices");
        return NULL;
    }
    if (a->dtype == CG_BOOL) {
        cg_set_error("topk: bool tensors are not supported (as PyTorch)");
        return NULL;
    }
    int64_t outer, n, inner;
    if (!cg_around_dim("topk", a, &dim, &outer, &n, &inner))
        return NULL;
    if (k < 0 || k > n) {
        char b[96];
        cg_set_error("topk: k=%lld is out of range [0, %lld] for dim %d of %s", (long long)k,
                     (long long)n, dim, cg_shape_str(a, b, sizeof b));
        return NULL;
    }
    if (!cg_dtype_is_float(a->dtype))
        return topk_int(a, k, dim, largest);
    int64_t shape[CG_MAX_DIMS] = {1};
    /* a 0-d a gives 0-d indices, as torch.topk (k = 0: an empty [0]) */
    int nd = a->ndim ? a->ndim : k ? 0 : 1;
    if (a->ndim)
        memcpy(shape, a->shape, sizeof shape);
    shape[dim] = k;
    cg_tensor *c = cg_k_to(a, CG_F32); /* exact for every float dtype: the order is kept */
    cg_tensor *out = c ? cg_empty_dtype(CG_I64, nd, shape) : NULL;
    int64_t *best = out ? malloc((size_t)(k ? k : 1) * sizeof *best) : NULL;
    cg_tensor *cc = best ? cg_k_contiguous(c) : NULL;
    if (!cc) {
        if (out && !best)
            cg_set_error("topk: out of memory");
        free(best);
        cg_release_all(2, c, out);
        return NULL;
    }
    const float *x = cg_data(cc);
    int64_t *ids = cg_data_i64(out);
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            topk_row(x + p * n * inner + q, inner, n, k, largest, best);
            for (int64_t t = 0; t < k; t++)
                ids[(p * k + t) * inner + q] = best[t];
        }
    free(best);
    cg_release_all(2, c, cc);
    return out;
}
