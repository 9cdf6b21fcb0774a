/* Shape ops: concat, stack, split (views), index_select / index_add_ (the
 * embedding gather and its backward) and gather / scatter_add_ (torch.gather
 * semantics); index_add and scatter_add are the out-of-place forms (a copy
 * of the input, then the in-place add).
 *
 * Determinism of the accumulating ops without atomics:
 *   index_add_   ids are bucketed by destination row (stable counting sort);
 *                each destination row is owned by one task that adds its
 *                source rows in increasing position order.
 *   scatter_add_ each line of src along dim (all other coordinates fixed)
 *                writes only into the matching line of dst; one task per line,
 *                positions added in order.
 * Both give the same sums, bit for bit, as a serial loop over positions. */
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

static void contig_strides(int ndim, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

/* The dtype of a concatenation: torch.cat promotes its inputs' dtypes. */
static cg_dtype promoted(cg_tensor *const *ts, int n)
{
    cg_dtype dt = ts[0]->dtype;
    for (int i = 1; i < n; i++)
        dt = cg_promote_types(dt, ts[i]->dtype);
    return dt;
}

/* ------------------------------------------------------------- concat */
cg_tensor *cg_k_concat(cg_tensor *const *ts, int n, int dim)
{
    if (!ts || n < 1) {
        if (!ts)
            cg_set_error("concat: NULL array of tensors");
        else
            cg_set_error("concat: need at least one tensor (got %d)", n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i]) {
            cg_error_null_input("concat");
            return NULL;
        }
    }
    const cg_tensor *t0 = ts[0];
    if (t0->ndim == 0) {
        cg_set_error("concat: zero-dimensional tensors cannot be concatenated (use stack)");
        return NULL;
    }
    int d = cg_norm_dim("concat", dim, t0->ndim);
    if (d < 0)
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const cg_tensor *t = ts[i];
        bool ok = t->ndim == t0->ndim;
        for (int k = 0; ok && k < t0->ndim; k++)
            ok = k == d || t->shape[k] == t0->shape[k];
        if (!ok) {
            char b1[96], b2[96];
            cg_set_error("concat: tensor %d does not match tensor 0 outside dim %d "
                         "(shapes %s and %s)",
                         i, dim, cg_shape_str(t0, b1, sizeof b1), cg_shape_str(t, b2, sizeof b2));
            return NULL;
        }
        shape[d] += t->shape[d];
    }
    cg_tensor *out = cg_empty_dtype(promoted(ts, n), t0->ndim, shape);
    if (!out)
        return NULL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t len = ts[i]->shape[d];
        if (len > 0) {
            cg_tensor *v = cg_view_narrow(out, d, at, len);
            bool ok = v && cg_k_copy_(v, ts[i]);
            cg_release(v);
            if (!ok) {
                cg_release(out);
                return NULL;
            }
        }
        at += len;
    }
    return out;
}

/* -------------------------------------------------------------- stack */
int cg_k_stack_dim(cg_tensor *const *ts, int n, int dim)
{
    if (!ts || n < 1) {
        if (!ts)
            cg_set_error("stack: NULL array of tensors");
        else
            cg_set_error("stack: need at least one tensor (got %d)", n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!ts[i])
            return cg_error_null_input("stack"), -1;
    const cg_tensor *t0 = ts[0];
    if (t0->ndim >= CG_MAX_DIMS) {
        cg_set_error("stack: tensors already have the maximum of %d dims", CG_MAX_DIMS);
        return -1;
    }
    int d = cg_norm_dim("stack", dim, t0->ndim + 1);
    if (d < 0)
        return -1;
    for (int i = 1; i < n; i++) {
        if (!cg_same_shape(ts[i], t0)) {
            char b1[96], b2[96];
            cg_set_error("stack: all tensors must have the same shape; tensor %d differs "
                         "(shapes %s and %s)",
                         i, cg_shape_str(t0, b1, sizeof b1), cg_shape_str(ts[i], b2, sizeof b2));
            return -1;
        }
    }
    return d;
}

cg_tensor *cg_k_stack(cg_tensor *const *ts, int n, int dim)
{
    const int d = cg_k_stack_dim(ts, n, dim);
    if (d < 0)
        return NULL;
    const cg_tensor *t0 = ts[0];
    int64_t shape[CG_MAX_DIMS];
    for (int k = 0, s = 0; k <= t0->ndim; k++)
        shape[k] = k == d ? (int64_t)n : t0->shape[s++];
    cg_tensor *out = cg_empty_dtype(promoted(ts, n), t0->ndim + 1, shape);
    if (!out)
        return NULL;
    if (cg_numel(out) == 0)
        return out;
    for (int i = 0; i < n; i++) {
        cg_tensor *v = cg_view_select(out, d, i);
        bool ok = v && cg_k_copy_(v, ts[i]);
        cg_release(v);
        if (!ok) {
            cg_release(out);
            return NULL;
        }
    }
    return out;
}

/* -------------------------------------------------------------- split */
int cg_k_split_dim(const cg_tensor *a, int dim, int n, const int64_t *sizes)
{
    if (!a)
        return cg_error_null_input("split"), -1;
    if (n < 1 || !sizes) {
        cg_set_error("split: need n >= 1 sizes (got n = %d%s)", n, sizes ? "" : " and NULL sizes");
        return -1;
    }
    if (a->ndim == 0) {
        cg_set_error("split: cannot split a zero-dimensional tensor");
        return -1;
    }
    const int d = cg_norm_dim("split", dim, a->ndim);
    if (d < 0)
        return -1;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0) {
            cg_set_error("split: size %d is negative (%lld)", i, (long long)sizes[i]);
            return -1;
        }
        total += sizes[i];
    }
    if (total != a->shape[d]) {
        char b[96];
        cg_set_error("split: sizes sum to %lld but dim %d of shape %s has size %lld",
                     (long long)total, dim, cg_shape_str(a, b, sizeof b), (long long)a->shape[d]);
        return -1;
    }
    return d;
}

bool cg_k_split(const cg_tensor *a, int dim, int n, const int64_t *sizes, cg_tensor **out)
{
    if (!a)
        return cg_error_null_input("cg_k_split");
    if (!out) {
        cg_set_error("split: NULL output array");
        return false;
    }
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    const int d = cg_k_split_dim(a, dim, n, sizes);
    if (d < 0)
        return false;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        out[i] = cg_view_narrow(a, d, at, sizes[i]);
        if (!out[i]) {
            for (int k = 0; k < i; k++) {
                cg_release(out[k]);
                out[k] = NULL;
            }
            return false;
        }
        at += sizes[i];
    }
    return true;
}

/* ------------------------------------------------ index tensors */
/* The index tensor t of op (argument arg) as contiguous int64: a new
 * reference (release it) whose cg_data_i64 the kernel reads, or NULL +
 * error naming op, arg and t's dtype when t is not int64 (gather's and
 * scatter_add's, as PyTorch's; index_select's and index_add's may be int32
 * too: index_1d). */
static cg_tensor *index_arg(const char *op, const char *arg, const cg_tensor *t)
{
    if (!cg_check_dtype(op, arg, t, CG_I64))
        return NULL;
    return cg_k_contiguous(t);
}

/* ------------------------------------------------ index_select / add */
typedef struct {
    int64_t outer, S, inner;
} lines_t;

static void lines_of(const int64_t *shape, int ndim, int d, lines_t *l)
{
    l->outer = cg_numel_shape(d, shape);
    l->S = shape[d];
    l->inner = cg_numel_shape(ndim - d - 1, shape + d + 1);
}

static bool check_ids(const char *op, const cg_tensor *a, int dim, int d, const int64_t *ids,
                      int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= a->shape[d]) {
            char b[96];
            cg_set_error("%s: id %lld at position %lld is out of range [0, %lld) for dim %d of "
                         "shape %s",
                         op, (long long)ids[i], (long long)i, (long long)a->shape[d], dim,
                         cg_shape_str(a, b, sizeof b));
            return false;
        }
    }
    return true;
}

/* index_select's and index_add_'s index: int64, 0-d or 1-d (torch's
 * rule), contiguous (a new reference). */
static cg_tensor *index_1d(const char *op, const cg_tensor *index)
{
    cg_tensor *c = cg_k_ids_i64(op, "index", index);
    if (c && c->ndim > 1) {
        char b[96];
        cg_set_error("%s: index must be 0-d or 1-d, got shape %s", op,
                     cg_shape_str(c, b, sizeof b));
        cg_release(c);
        return NULL;
    }
    return c;
}

static cg_tensor *index_select_ids(const cg_tensor *a, int dim, const int64_t *ids, int64_t n);

cg_tensor *cg_k_index_select(const cg_tensor *a, int dim, const cg_tensor *index)
{
    if (!a) {
        cg_error_null_input("cg_k_index_select");
        return NULL;
    }
    cg_tensor *c = index_1d("index_select", index);
    if (!c)
        return NULL;
    cg_tensor *out = index_select_ids(a, dim, cg_data_i64(c), cg_numel(c));
    cg_release(c);
    return out;
}

/* Output row r = o n + i is row ids[i] of the outer index o's S rows */
typedef struct {
    const char *x;
    char *out;
    const int64_t *ids;
    int64_t n, S;
    size_t bytes; /* a row's */
} select_job;

static void select_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const select_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        int64_t o = r / j->n, i = r % j->n;
        memcpy(j->out + (size_t)r * j->bytes, j->x + (size_t)(o * j->S + j->ids[i]) * j->bytes,
               j->bytes);
    }
}

/* index_select of a strided a (a transposed or sliced table) copies the
 * picked slices one by one (cg_k_copy_ from a view of each) when they are
 * few beside a's size: a contiguous copy of the whole of a first made
 * picking 8 rows of a [32768, 64] view cost 2,400 times the contiguous
 * table's instructions an output element. SELECT_VIEW_COST: about what
 * one slice's two views and copy cost beyond its elements, in elements. */
#define SELECT_VIEW_COST 512
static bool select_by_views(int64_t n, const lines_t *l)
{
    const int64_t slice = l->outer * l->inner;
    return n * (slice + SELECT_VIEW_COST) < l->S * slice;
}

static cg_tensor *index_select_views(const cg_tensor *a, int d, const int64_t *ids, int64_t n,
                                     const int64_t *shape)
{
    cg_tensor *out = cg_empty_dtype(a->dtype, a->ndim, shape);
    for (int64_t i = 0; out && i < n; i++) {
        cg_tensor *to = cg_view_select(out, d, i), *from = cg_view_select(a, d, ids[i]);
        bool ok = to && from && cg_k_copy_(to, from);
        cg_release_all(2, to, from);
        if (!ok) {
            cg_release(out);
            out = NULL;
        }
    }
    return out;
}

static cg_tensor *index_select_ids(const cg_tensor *a, int dim, const int64_t *ids, int64_t n)
{
    if (a->ndim == 0) {
        cg_set_error("index_select: input must have at least 1 dim (shape [])");
        return NULL;
    }
    int d = cg_norm_dim("index_select", dim, a->ndim);
    if (d < 0 || !check_ids("index_select", a, dim, d, ids, n))
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[d] = n;
    lines_t l;
    lines_of(a->shape, a->ndim, d, &l);
    if (!cg_is_contiguous(a) && select_by_views(n, &l))
        return index_select_views(a, d, ids, n, shape);
    cg_tensor *x = cg_k_contiguous(a);
    cg_tensor *out = x ? cg_empty_dtype(a->dtype, a->ndim, shape) : NULL;
    if (!out) {
        cg_release(x);
        return NULL;
    }
    /* any dtype: rows of bytes */
    const select_job job = {
        cg_data_ptr(x), cg_data_ptr(out), ids, n, l.S, (size_t)l.inner * cg_dtype_size(a->dtype)};
    const int64_t rows = l.outer * n;
    cg_shares_run(rows, cg_shares_rows(l.inner), cg_shares_team(rows * l.inner > PAR_THRESHOLD),
                  select_rows, &job);
    cg_release(x);
    return out;
}

static bool index_add_ids(const char *op, cg_tensor *dst, int dim, const int64_t *ids, int64_t n,
                          const cg_tensor *src, bool sums);

/* Task t = o S + row adds to that row of w the source rows whose id is row
 * (positions order[start[row]] on, in increasing order): one by one, or
 * (sums) their sum, made SUM_BLOCK columns at a time. */
typedef struct {
    const float *src;
    float *w;
    const int64_t *start, *order;
    int64_t n, S, inner;
    bool sums;
} add_job;

enum { SUM_BLOCK = 64 };

static void add_rows_by_id(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    const add_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t o = t / j->S, row = t % j->S, k0 = j->start[row], k1 = j->start[row + 1];
        const float *src = j->src + o * j->n * j->inner;
        float *dr = j->w + (o * j->S + row) * j->inner;
        if (!j->sums || k1 - k0 <= 1) {
            for (int64_t k = k0; k < k1; k++) {
                const float *sr = src + j->order[k] * j->inner;
                for (int64_t i = 0; i < j->inner; i++)
                    dr[i] += sr[i];
            }
            continue;
        }
        for (int64_t i0 = 0; i0 < j->inner; i0 += SUM_BLOCK) {
            const int64_t m = j->inner - i0 < SUM_BLOCK ? j->inner - i0 : SUM_BLOCK;
            float sum[SUM_BLOCK];
            memcpy(sum, src + j->order[k0] * j->inner + i0, (size_t)m * sizeof *sum);
            for (int64_t k = k0 + 1; k < k1; k++) {
                const float *sr = src + j->order[k] * j->inner + i0;
                for (int64_t i = 0; i < m; i++)
                    sum[i] += sr[i];
            }
            for (int64_t i = 0; i < m; i++)
                dr[i0 + i] += sum[i];
        }
    }
}

static bool index_add_in_place(const char *op, cg_tensor *dst, int dim, const cg_tensor *index,
                               const cg_tensor *src, bool sums)
{
    cg_tensor *c = index_1d(op, index);
    if (!c)
        return false;
    cg_tensor *copy = NULL;
    bool ok = cg_check_f32(op, "dst", dst) && cg_check_f32(op, "src", src) &&
              (src = cg_k_unaliased(dst, src, false, &copy)) &&
              index_add_ids(op, dst, dim, cg_data_i64(c), cg_numel(c), src, sums);
    cg_release_all(2, c, copy);
    return ok;
}

bool cg_k_index_add_(cg_tensor *dst, int dim, const cg_tensor *index, const cg_tensor *src)
{
    if (!dst || !src)
        return cg_error_null_input("cg_k_index_add_");
    return index_add_in_place("index_add_", dst, dim, index, src, false);
}

bool cg_k_index_add_sums_(cg_tensor *dst, int dim, const cg_tensor *index, const cg_tensor *src)
{
    if (!dst || !src)
        return cg_error_null_input("cg_k_index_add_sums_");
    return index_add_in_place("index_add_sums_", dst, dim, index, src, true);
}

cg_tensor *cg_k_index_add(const cg_tensor *a, int dim, const cg_tensor *index, const cg_tensor *src)
{
    if (!a || !src) {
        cg_error_null_input("cg_k_index_add");
        return NULL;
    }
    if (!cg_check_f32("index_add", "input", a) || !cg_check_f32("index_add", "source", src))
        return NULL;
    cg_tensor *c = index_1d("index_add", index);
    cg_tensor *out = c ? cg_k_clone(a) : NULL;
    if (out && !index_add_ids("index_add", out, dim, cg_data_i64(c), cg_numel(c), src, false)) {
        cg_release(out);
        out = NULL;
    }
    cg_release(c);
    return out;
}

/* dst (float32) += src at ids along dim; op names the caller in messages. */
static bool index_add_ids(const char *op, cg_tensor *dst, int dim, const int64_t *ids, int64_t n,
                          const cg_tensor *src, bool sums)
{
    if (dst->ndim == 0) {
        cg_set_error("%s: destination must have at least 1 dim (shape [])", op);
        return false;
    }
    int d = cg_norm_dim(op, dim, dst->ndim);
    if (d < 0 || !cg_check_writable(op, dst) || !check_ids(op, dst, dim, d, ids, n))
        return false;
    bool shape_ok = src->ndim == dst->ndim;
    for (int k = 0; shape_ok && k < dst->ndim; k++)
        shape_ok = src->shape[k] == (k == d ? n : dst->shape[k]);
    if (!shape_ok) {
        char b1[96], b2[96];
        cg_set_error("%s: source must have the destination's shape with %lld at dim %d "
                     "(shapes %s and %s)",
                     op, (long long)n, dim, cg_shape_str(dst, b1, sizeof b1),
                     cg_shape_str(src, b2, sizeof b2));
        return false;
    }
    if (n == 0 || cg_numel(dst) == 0) {
        cg_tensor_modified(dst);
        return true;
    }
    lines_t l;
    lines_of(dst->shape, dst->ndim, d, &l);
    /* Stable counting sort of positions by id: bucket s holds the positions
     * i with ids[i] == s, in increasing order. */
    int64_t *start = calloc((size_t)l.S + 1, sizeof(int64_t));
    int64_t *order = malloc((size_t)n * sizeof(int64_t));
    cg_tensor *s = cg_k_contiguous(src);
    cg_tensor *w = (start && order && s) ? cg_k_contiguous(dst) : NULL;
    if (!w) {
        if (!start || !order)
            cg_set_error("%s: out of memory", op);
        free(start);
        free(order);
        cg_release(s);
        return false;
    }
    for (int64_t i = 0; i < n; i++)
        start[ids[i] + 1]++;
    for (int64_t k = 0; k < l.S; k++)
        start[k + 1] += start[k];
    {
        int64_t *fill = malloc((size_t)l.S * sizeof(int64_t) + 1);
        if (!fill) {
            cg_set_error("%s: out of memory", op);
            free(start);
            free(order);
            cg_release_all(2, s, w);
            return false;
        }
        memcpy(fill, start, (size_t)l.S * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++)
            order[fill[ids[i]]++] = i;
        free(fill);
    }
    const add_job job = {cg_data(s), cg_data(w), start, order, n, l.S, l.inner, sums};
    cg_shares_run(l.outer * l.S, cg_shares_rows(l.inner),
                  cg_shares_team(l.outer * n * l.inner > PAR_THRESHOLD), add_rows_by_id, &job);
    bool ok = true;
    if (!cg_is_contiguous(dst))
        ok = cg_k_copy_(dst, w); /* w is a contiguous copy of dst: write back */
    cg_tensor_modified(dst);     /* once written: see cg_tensor_modified */
    free(start);
    free(order);
    cg_release_all(2, s, w);
    return ok;
}

/* ------------------------------------------------ gather / scatter_add */
/* Checks shared by gather and scatter_add_: ids has shape (ndim, shape),
 * which must fit in t outside dim; ids must index t's dim. */
static bool check_gather_ids(const char *op, const cg_tensor *t, int dim, int d, const int64_t *ids,
                             int ndim, const int64_t *shape)
{
    char b1[96], b2[96];
    bool ok = ndim == t->ndim;
    for (int k = 0; ok && k < ndim; k++)
        ok = shape[k] >= 0 && (k == d || shape[k] <= t->shape[k]);
    if (!ok) {
        cg_set_error("%s: the index must have as many dims as the tensor and fit in it "
                     "outside dim %d (shapes %s and %s)",
                     op, dim, cg_shape_str(t, b2, sizeof b2),
                     cg_shape_str_n(ndim, shape, b1, sizeof b1));
        return false;
    }
    int64_t n = cg_numel_shape(ndim, shape);
    if (n > 0 && !ids) {
        cg_set_error("%s: NULL ids", op);
        return false;
    }
    int64_t size = ndim ? t->shape[d] : 1;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= size) {
            cg_set_error("%s: id %lld at position %lld is out of range [0, %lld) for dim %d of "
                         "shape %s",
                         op, (long long)ids[i], (long long)i, (long long)size, dim,
                         cg_shape_str(t, b2, sizeof b2));
            return false;
        }
    }
    return true;
}

/* Resolve dim; a 0-d tensor accepts dim 0 or -1. */
static int gather_dim(const char *op, int dim, int ndim)
{
    if (ndim == 0) {
        if (dim == 0 || dim == -1)
            return 0;
        cg_set_error("%s: dim %d out of range for a tensor with 0 dims", op, dim);
        return -1;
    }
    return cg_norm_dim(op, dim, ndim);
}

static cg_tensor *gather_ids(const cg_tensor *a, int d, const int64_t *ids, int ndim,
                             const int64_t *shape);

cg_tensor *cg_k_gather(const cg_tensor *a, int dim, const cg_tensor *index)
{
    if (!a) {
        cg_error_null_input("cg_k_gather");
        return NULL;
    }
    cg_tensor *c = index_arg("gather", "index", index);
    if (!c)
        return NULL;
    int d = gather_dim("gather", dim, a->ndim);
    cg_tensor *out = NULL;
    if (d >= 0 && check_gather_ids("gather", a, dim, d, cg_data_i64(c), c->ndim, c->shape))
        out = gather_ids(a, d, cg_data_i64(c), c->ndim, c->shape);
    cg_release(c);
    return out;
}

/* Rows of gather's output (shape, ndim dims) along its last dim */
typedef struct {
    const cg_tensor *a;
    int d, ndim;
    const int64_t *shape, *ids;
    float *out;
} gather_job;

static void gather_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const gather_job *g = ctx;
    const int last = g->ndim - 1, d = g->d;
    const int64_t inner = g->shape[last], *st = g->a->strides;
    const float *ap = g->a->storage->data;
    for (int64_t r = r0; r < r1; r++) {
        int64_t base = g->a->offset, rem = r;
        for (int k = last - 1; k >= 0; k--) {
            int64_t i = rem % g->shape[k];
            rem /= g->shape[k];
            if (k != d)
                base += i * st[k];
        }
        const int64_t *ir = g->ids + r * inner;
        float *orow = g->out + r * inner;
        if (d == last) {
            for (int64_t j = 0; j < inner; j++)
                orow[j] = ap[base + ir[j] * st[last]];
        } else {
            for (int64_t j = 0; j < inner; j++)
                orow[j] = ap[base + j * st[last] + ir[j] * st[d]];
        }
    }
}

static cg_tensor *gather_ids(const cg_tensor *a, int d, const int64_t *ids, int ndim,
                             const int64_t *shape)
{
    if (!cg_check_f32("gather", "input", a))
        return NULL;
    cg_tensor *out = cg_empty(ndim, shape);
    if (!out)
        return NULL;
    int64_t n = cg_numel(out);
    if (n == 0)
        return out;
    float *op = cg_data(out);
    const float *ap = a->storage->data;
    if (ndim == 0) {
        op[0] = ap[a->offset];
        return out;
    }
    const int64_t inner = shape[ndim - 1];
    const gather_job job = {a, d, ndim, shape, ids, op};
    cg_shares_run(n / inner, cg_shares_rows(inner), cg_shares_team(n > PAR_THRESHOLD), gather_rows,
                  &job);
    return out;
}

static bool scatter_add_ids(cg_tensor *dst, int d, const int64_t *ids, const cg_tensor *src);

/* dst (float32) += src at index along dim; op names the caller. */
static bool scatter_add_checked(const char *op, cg_tensor *dst, int dim, const cg_tensor *index,
                                const cg_tensor *src)
{
    cg_tensor *c = index_arg(op, "index", index);
    if (!c)
        return false;
    bool ok = false;
    if (!cg_same_shape(c, src)) {
        char b1[96], b2[96];
        cg_set_error("%s: index shape %s differs from source shape %s", op,
                     cg_shape_str(c, b1, sizeof b1), cg_shape_str(src, b2, sizeof b2));
    } else {
        int d = gather_dim(op, dim, dst->ndim);
        ok = d >= 0 && cg_check_writable(op, dst) &&
             check_gather_ids(op, dst, dim, d, cg_data_i64(c), src->ndim, src->shape) &&
             scatter_add_ids(dst, d, cg_data_i64(c), src);
    }
    cg_release(c);
    return ok;
}

bool cg_k_scatter_add_(cg_tensor *dst, int dim, const cg_tensor *index, const cg_tensor *src)
{
    if (!dst || !src)
        return cg_error_null_input("cg_k_scatter_add_");
    if (!cg_check_f32("scatter_add_", "dst", dst) || !cg_check_f32("scatter_add_", "src", src))
        return false;
    cg_tensor *copy;
    const cg_tensor *s = cg_k_unaliased(dst, src, false, &copy);
    bool ok = s && scatter_add_checked("scatter_add_", dst, dim, index, s);
    cg_release(copy);
    return ok;
}

cg_tensor *cg_k_scatter_add(const cg_tensor *a, int dim, const cg_tensor *index,
                            const cg_tensor *src)
{
    if (!a || !src) {
        cg_error_null_input("cg_k_scatter_add");
        return NULL;
    }
    if (!cg_check_f32("scatter_add", "input", a) || !cg_check_f32("scatter_add", "source", src))
        return NULL;
    cg_tensor *out = cg_k_clone(a);
    if (out && !scatter_add_checked("scatter_add", out, dim, index, src)) {
        cg_release(out);
        out = NULL;
    }
    return out;
}

/* Lines of src along dim d added into dst's at their ids */
typedef struct {
    cg_tensor *dst;
    const cg_tensor *src;
    const int64_t *ids;
    int d;
    int64_t ist[CG_MAX_DIMS]; /* the ids' (contiguous) strides */
} scatter_job;

static void scatter_lines(int64_t l0, int64_t l1, int thread, const void *ctx)
{
    const scatter_job *j = ctx;
    const cg_tensor *dst = j->dst, *src = j->src;
    const int d = j->d;
    const int64_t L = src->shape[d];
    float *dp = dst->storage->data;
    const float *sp = src->storage->data;
    for (int64_t line = l0; line < l1; line++) {
        int64_t sb = src->offset, db = dst->offset, ib = 0, rem = line;
        for (int k = src->ndim - 1; k >= 0; k--) {
            if (k == d)
                continue;
            int64_t i = rem % src->shape[k];
            rem /= src->shape[k];
            sb += i * src->strides[k];
            db += i * dst->strides[k];
            ib += i * j->ist[k];
        }
        for (int64_t p = 0; p < L; p++)
            dp[db + j->ids[ib + p * j->ist[d]] * dst->strides[d]] += sp[sb + p * src->strides[d]];
    }
}

static void scatter_add_into(cg_tensor *dst, int d, const int64_t *ids, const cg_tensor *src);

static bool scatter_add_ids(cg_tensor *dst, int d, const int64_t *ids, const cg_tensor *src)
{
    scatter_add_into(dst, d, ids, src);
    cg_tensor_modified(dst); /* once written: see cg_tensor_modified */
    return true;
}

static void scatter_add_into(cg_tensor *dst, int d, const int64_t *ids, const cg_tensor *src)
{
    int64_t n = cg_numel(src);
    if (n == 0)
        return;
    float *dp = dst->storage->data;
    const float *sp = src->storage->data;
    if (src->ndim == 0) {
        dp[dst->offset] += sp[src->offset];
        return;
    }
    scatter_job job = {dst, src, ids, d, {0}};
    contig_strides(src->ndim, src->shape, job.ist);
    const int64_t L = src->shape[d];
    cg_shares_run(n / L, cg_shares_rows(L), cg_shares_team(n > PAR_THRESHOLD), scatter_lines, &job);
}
