/* Tensors: storage, lifecycle, creation, RNG, queries and views. */
#include "core/tensor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

/* Reference counts (PyTorch's intrusive_ptr): a new reference is made from
 * an existing one, so the increment needs no ordering; the decrement is
 * acquire-release, so that the thread that frees sees every write made
 * through the other references. */
static inline void ref_inc(int *c) { __atomic_add_fetch(c, 1, __ATOMIC_RELAXED); }
static inline int ref_dec(int *c) { return __atomic_sub_fetch(c, 1, __ATOMIC_ACQ_REL); }
static inline int ref_get(const int *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

static cg_storage *storage_new(int64_t numel, cg_dtype dt)
{
    cg_storage *s = malloc(sizeof *s);
    if (!s) {
        cg_set_error("out of memory allocating a storage header");
        return NULL;
    }
    size_t n = numel > 0 ? (size_t)numel : 1, z = cg_dtype_size(dt);
    if (n > SIZE_MAX / z) {
        free(s);
        cg_set_error("tensor of %lld elements is too large", (long long)numel);
        return NULL;
    }
    s->data = cg_alloc(n * z);
    if (!s->data) {
        free(s);
        if (dt == CG_F32)
            cg_set_error("out of memory allocating %lld floats", (long long)numel);
        else
            cg_set_error("out of memory allocating %lld elements of %s", (long long)numel,
                         cg_dtype_name(dt));
        return NULL;
    }
    s->nbytes = n * z;
    s->refcount = 1;
    s->derived = NULL;
    s->derived_free = NULL;
    s->version = 0;
    return s;
}

static void storage_release(cg_storage *s)
{
    if (s && ref_dec(&s->refcount) == 0) {
        if (s->derived)
            s->derived_free(s->derived);
        cg_free(s->data);
        free(s);
    }
}

/* ---------------------------------------------------------------- scopes */
/* A scope gives back two kinds of references:
 *   - those of the tensors made while it is open (list v; the tensor's
 *     scope field points at the scope): every reference to such a tensor
 *     that is not held (cg_hold, cg_retain_held: containers and graph
 *     nodes) is the scope's, so at the end it releases refcount - held
 *     (one fewer when kept);
 *   - new references (cg_retain) to older tensors (list x, one entry per
 *     reference): released one each at the end; an explicit cg_release or
 *     cg_hold of such a tensor takes one entry back.
 * Graph nodes hold their references (cg_retain_held), so no count depends
 * on which scope a node's tensor belongs to, and a tensor shared between
 * threads (a parameter) is never written by a scope: only its atomic
 * counts change. */
typedef struct {
    cg_tensor *t;
    bool kept;
} scope_ref;

struct cg_scope {
    cg_tensor **v;
    int64_t n, cap;
    scope_ref *x;
    int64_t nx, capx;
    cg_scope *parent;
};

static _Thread_local cg_scope *g_scope;
static int64_t g_live; /* atomic */

int64_t cg_live_tensors(void) { return __atomic_load_n(&g_live, __ATOMIC_RELAXED); }

static bool scope_add(cg_scope *s, cg_tensor *t)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        cg_tensor **v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return false; /* not tracked: the reference stays the caller's */
        s->v = v;
        s->cap = cap;
    }
    t->scope = s;
    t->scope_idx = s->n;
    t->scope_kept = false;
    s->v[s->n++] = t;
    return true;
}

static void scope_remove(cg_tensor *t)
{
    cg_scope *s = t->scope;
    cg_tensor *last = s->v[--s->n];
    s->v[t->scope_idx] = last;
    last->scope_idx = t->scope_idx;
    t->scope = NULL;
}

static bool xref_add(cg_scope *s, cg_tensor *t, bool kept)
{
    if (s->nx == s->capx) {
        int64_t cap = s->capx ? 2 * s->capx : 64;
        scope_ref *x = realloc(s->x, (size_t)cap * sizeof *x);
        if (!x)
            return false; /* not tracked: the reference stays the caller's */
        s->x = x;
        s->capx = cap;
    }
    s->x[s->nx++] = (scope_ref){t, kept};
    return true;
}

/* Take back one entry for t from the open scopes (innermost first, newest
 * first, an entry not kept before a kept one); false if there is none. */
static bool xref_take(cg_tensor *t)
{
    for (cg_scope *s = g_scope; s; s = s->parent) {
        int64_t found = -1;
        for (int64_t i = s->nx; i-- > 0;) {
            if (s->x[i].t == t) {
                found = i;
                if (!s->x[i].kept)
                    break;
            }
        }
        if (found >= 0) {
            s->x[found] = s->x[--s->nx];
            return true;
        }
    }
    return false;
}

/* Whether t was made in one of this thread's open scopes. */
static bool scope_is_mine(const cg_tensor *t)
{
    for (const cg_scope *s = g_scope; s && t->scope; s = s->parent)
        if (s == t->scope)
            return true;
    return false;
}

cg_scope *cg_scope_begin(void)
{
    cg_scope *s = calloc(1, sizeof *s);
    if (!s) {
        cg_set_error("scope_begin: out of memory");
        return NULL;
    }
    s->parent = g_scope;
    g_scope = s;
    return s;
}

cg_tensor *cg_keep(cg_tensor *t)
{
    if (!t || !g_scope)
        return t;
    if (t->scope == g_scope) {
        t->scope_kept = true;
        return t;
    }
    int64_t found = -1; /* a reference of this scope to an older tensor */
    for (int64_t i = 0; i < g_scope->nx; i++) {
        if (g_scope->x[i].t == t) {
            if (g_scope->x[i].kept)
                return t; /* one reference survives already */
            found = i;
        }
    }
    if (found >= 0)
        g_scope->x[found].kept = true;
    return t;
}

cg_tensor *cg_hold(cg_tensor *t)
{
    if (t) {
        ref_inc(&t->held);
        if (g_scope && !scope_is_mine(t))
            xref_take(t); /* the reference just handed out is now held */
    }
    return t;
}

void cg_unhold(cg_tensor *t)
{
    if (t && ref_get(&t->held) > 0)
        ref_dec(&t->held);
}

static void release_ref(cg_tensor *t);

static void scope_close(cg_scope *s)
{
    int64_t n = s->n, k = 0, nk = 0;
    cg_tensor **rel = malloc((size_t)(n ? n : 1) * sizeof *rel);
    cg_tensor **kept = malloc((size_t)(n ? n : 1) * sizeof *kept);
    int *cnt = malloc((size_t)(n ? n : 1) * sizeof *cnt);
    if (!rel || !kept || !cnt) { /* out of memory: leak rather than free too much */
        free(rel);
        free(kept);
        free(cnt);
        while (s->n)
            scope_remove(s->v[s->n - 1]);
        s->nx = 0;
        return;
    }
    /* the scope's share of each tensor it made, before anything is released */
    for (int64_t i = s->n; i-- > 0;) {
        cg_tensor *t = s->v[i];
        int share = ref_get(&t->refcount) - ref_get(&t->held);
        bool keep = t->scope_kept && share > 0;
        scope_remove(t);
        t->scope_kept = false;
        if (keep) {
            share--; /* one reference passes to the enclosing scope or the caller */
            kept[nk++] = t;
        }
        if (share > 0) {
            rel[k] = t;
            cnt[k++] = share;
        }
    }
    /* Kept tensors join the enclosing scope before anything is released
     * (a release never finds them in a closed scope's list). */
    cg_scope *up = s->parent;
    for (int64_t i = 0; up && i < nk; i++)
        scope_add(up, kept[i]);
    for (int64_t i = 0; i < s->nx; i++)
        if (s->x[i].kept && up)
            xref_add(up, s->x[i].t, false);
    /* Each tensor in rel keeps at least one reference until its own turn
     * (and a kept one its kept reference); references to older tensors are
     * released last, so the graphs of this scope's tensors go first. */
    for (int64_t i = 0; i < k; i++)
        for (int c = 0; c < cnt[i]; c++)
            release_ref(rel[i]);
    for (int64_t i = 0; i < s->nx; i++)
        if (!s->x[i].kept)
            release_ref(s->x[i].t);
    s->nx = 0;
    free(rel);
    free(kept);
    free(cnt);
}

void cg_scope_end(cg_scope *s)
{
    if (!s)
        return;
    cg_scope *p = g_scope;
    while (p && p != s)
        p = p->parent;
    if (!p) {
        cg_set_error("scope_end: the scope is not open on this thread");
        return;
    }
    const char *prev = cg_debug_enabled() ? cg_lifetime_enter("cg_scope_end") : NULL;
    cg_scope *stop = s->parent;
    while (g_scope != stop) { /* inner scopes left open end first */
        cg_scope *c = g_scope;
        g_scope = c->parent; /* releases from here on are not the closing scope's */
        scope_close(c);
        free(c->v);
        free(c->x);
        free(c);
    }
    if (cg_debug_enabled())
        cg_lifetime_leave(prev);
}

/* ------------------------------------------------------------- lifecycle */
static cg_node_release_fn g_node_release;

void cg_set_node_release_hook(cg_node_release_fn fn) { g_node_release = fn; }

cg_tensor *cg_retain(cg_tensor *t)
{
    if (t) {
        ref_inc(&t->refcount);
        if (g_scope && !scope_is_mine(t))
            xref_add(g_scope, t, false);
    }
    return t;
}

cg_tensor *cg_retain_held(cg_tensor *t)
{
    if (t) {
        ref_inc(&t->refcount);
        ref_inc(&t->held);
    }
    return t;
}

static void release_ref(cg_tensor *t)
{
    if (cg_debug_enabled() && !cg_lifetime_release_ok(t, NULL, false))
        return; /* a freed header: reported, nothing to give back */
    if (ref_dec(&t->refcount) > 0)
        return;
    struct cg_node *node = t->node;
    cg_tensor *grad = t->grad;
    if (t->scope)
        scope_remove(t);
    __atomic_sub_fetch(&g_live, 1, __ATOMIC_RELAXED);
    storage_release(t->storage);
    if (cg_debug_enabled())
        cg_lifetime_retire(t); /* poisoned and kept, never reused */
    else
        free(t);
    cg_release_held(grad); /* a leaf gradient has no node and no grad: depth 1 */
    if (node && g_node_release)
        g_node_release(node); /* iterative in autograd: no deep recursion */
}

static void release_owned(cg_tensor *t)
{
    if (g_scope && !scope_is_mine(t))
        xref_take(t); /* a reference a scope would have given back */
    release_ref(t);
}

void cg_release(cg_tensor *t)
{
    if (!t)
        return;
    if (!cg_debug_enabled()) {
        release_owned(t);
        return;
    }
    const char *prev = cg_lifetime_enter("cg_release");
    if (cg_lifetime_release_ok(t, prev ? prev : "cg_release", true))
        release_owned(t);
    cg_lifetime_leave(prev);
}

void cg_release_held(cg_tensor *t)
{
    if (!t)
        return;
    const char *prev = cg_debug_enabled() ? cg_lifetime_enter("cg_release_held") : NULL;
    cg_unhold(t);
    release_ref(t);
    if (cg_debug_enabled())
        cg_lifetime_leave(prev);
}

void cg_release_all(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        cg_release(va_arg(ap, cg_tensor *));
    va_end(ap);
}

/* A tensor header over storage s (retained), with the given layout. */
static cg_tensor *tensor_header(cg_storage *s, cg_dtype dt, int64_t offset, int ndim,
                                const int64_t *shape, const int64_t *strides)
{
    cg_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        cg_set_error("out of memory allocating a tensor header");
        return NULL;
    }
    ref_inc(&s->refcount);
    t->storage = s;
    t->offset = offset;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->strides[i] = strides[i];
    }
    t->dtype = dt;
    t->refcount = 1;
    t->magic = CG_TENSOR_LIVE;
    __atomic_add_fetch(&g_live, 1, __ATOMIC_RELAXED);
    if (g_scope)
        scope_add(g_scope, t);
    return t;
}

/* Byte address of element `off` (in elements) of t's storage. */
static inline char *cg_elem_ptr(const cg_tensor *t, int64_t off)
{
    return (char *)t->storage->data + off * (int64_t)cg_dtype_size(t->dtype);
}

/* ------------------------------------------------------------- queries */
int64_t cg_numel_shape(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int64_t cg_numel(const cg_tensor *t)
{
    if (!t)
        return cg_error_null_input("cg_numel");
    return cg_numel_shape(t->ndim, t->shape);
}

bool cg_is_contiguous(const cg_tensor *t)
{
    if (!t)
        return cg_error_null_input("cg_is_contiguous");
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect)
            return false;
        expect *= t->shape[i];
    }
    return true;
}

/* The accessors' check: t has dtype dt (NULL + error otherwise). */
static void *data_as(const char *fn, const cg_tensor *t, cg_dtype dt)
{
    if (!t) {
        cg_error_null_input(fn);
        return NULL;
    }
    if (t->dtype != dt) {
        cg_set_error("%s: the tensor is %s, not %s", fn, cg_dtype_name(t->dtype),
                     cg_dtype_name(dt));
        return NULL;
    }
    return cg_elem_ptr(t, t->offset);
}

float *cg_data(const cg_tensor *t) { return data_as("cg_data", t, CG_F32); }
int64_t *cg_data_i64(const cg_tensor *t) { return data_as("cg_data_i64", t, CG_I64); }
int32_t *cg_data_i32(const cg_tensor *t) { return data_as("cg_data_i32", t, CG_I32); }
bool *cg_data_bool(const cg_tensor *t) { return data_as("cg_data_bool", t, CG_BOOL); }
uint16_t *cg_data_bf16(const cg_tensor *t) { return data_as("cg_data_bf16", t, CG_BF16); }
uint16_t *cg_data_f16(const cg_tensor *t) { return data_as("cg_data_f16", t, CG_F16); }

void *cg_data_ptr(const cg_tensor *t)
{
    if (!t) {
        cg_error_null_input("cg_data_ptr");
        return NULL;
    }
    return cg_elem_ptr(t, t->offset);
}

bool cg_check_dtype(const char *op, const char *arg, const cg_tensor *t, cg_dtype dt)
{
    if (!t) {
        cg_set_error("%s: argument '%s' is NULL", op, arg);
        return false;
    }
    if (t->dtype != dt) {
        cg_set_error("%s: argument '%s' is %s, expected %s", op, arg, cg_dtype_name(t->dtype),
                     cg_dtype_name(dt));
        return false;
    }
    return true;
}

bool cg_check_f32(const char *op, const char *arg, const cg_tensor *t)
{
    return cg_check_dtype(op, arg, t, CG_F32);
}

/* The storage offset of t[idx] (negative indices count from the end), or
 * -1 + error naming op when an index is out of range. */
static int64_t offset_of(const char *op, const cg_tensor *t, const int64_t *idx)
{
    if (!t || (!idx && t->ndim > 0)) {
        cg_error_null_input(op);
        return -1;
    }
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        int64_t j = idx[i] < 0 ? idx[i] + t->shape[i] : idx[i];
        if (j < 0 || j >= t->shape[i]) {
            char b[96];
            cg_set_error("%s: index %lld is out of range for dim %d of shape %s", op,
                         (long long)idx[i], i, cg_shape_str(t, b, sizeof b));
            return -1;
        }
        off += j * t->strides[i];
    }
    return off;
}

float cg_get(const cg_tensor *t, const int64_t *idx)
{
    int64_t off = offset_of("cg_get", t, idx);
    return off < 0 ? NAN : (float)cg_elem_get(t->dtype, cg_elem_ptr(t, off));
}

int64_t cg_get_i64(const cg_tensor *t, const int64_t *idx)
{
    int64_t off = offset_of("cg_get_i64", t, idx);
    return off < 0 ? 0 : cg_elem_get_i64(t->dtype, cg_elem_ptr(t, off));
}

bool cg_set(cg_tensor *t, const int64_t *idx, float v)
{
    int64_t off = offset_of("cg_set", t, idx);
    if (off < 0)
        return false;
    cg_tensor_modified(t);
    float src = v;
    cg_convert_run(t->dtype, cg_elem_ptr(t, off), 1, CG_F32, &src, 1, 1);
    return true;
}

void cg_tensor_modified(cg_tensor *t)
{
    if (!t || !t->storage)
        return;
    t->storage->version++; /* autograd compares it with the version it saved */
    if (t->storage->derived) {
        t->storage->derived_free(t->storage->derived);
        t->storage->derived = NULL;
    }
}

uint64_t cg_version(const cg_tensor *t)
{
    if (!t)
        return cg_error_null_input("cg_version");
    return t->storage ? t->storage->version : 0;
}

static bool one_element(const char *fn, const cg_tensor *t)
{
    if (!t)
        return cg_error_null_input(fn);
    if (cg_numel(t) != 1) {
        char b[96];
        cg_set_error("item: tensor of shape %s has %lld elements, expected 1",
                     cg_shape_str(t, b, sizeof b), (long long)cg_numel(t));
        return false;
    }
    return true;
}

float cg_item(const cg_tensor *t)
{
    if (!one_element("cg_item", t))
        return NAN;
    return (float)cg_elem_get(t->dtype, cg_elem_ptr(t, t->offset));
}

int64_t cg_item_i64(const cg_tensor *t)
{
    if (!one_element("cg_item_i64", t))
        return 0;
    return cg_elem_get_i64(t->dtype, cg_elem_ptr(t, t->offset));
}

bool cg_same_shape(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b)
        return cg_error_null_input("cg_same_shape");
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

char *cg_shape_str_n(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, n - used, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

char *cg_shape_str(const cg_tensor *t, char *buf, size_t n)
{
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    return cg_shape_str_n(t->ndim, t->shape, buf, n);
}

int cg_norm_dim(const char *op, int dim, int ndim)
{
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) {
        cg_set_error("%s: dim %d out of range for a tensor with %d dims", op, dim, ndim);
        return -1;
    }
    return d;
}

int cg_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char b1[96], b2[96];
            cg_set_error("%s: shapes %s and %s cannot be broadcast together (dim %d: %lld vs %lld)",
                         op, cg_shape_str_n(na, sa, b1, sizeof b1),
                         cg_shape_str_n(nb, sb, b2, sizeof b2), i, (long long)da, (long long)db);
            return -1;
        }
        out[i] = da == 1 ? db : da;
    }
    return n;
}

/* -------------------------------------------------- strided iteration */
/* Calls a row kernel over every innermost row of t (row-major order of the
 * outer dims). Rows are independent, so callers may parallelise. */
static int64_t outer_offset(const cg_tensor *t, int64_t row)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 2; d >= 0; d--) {
        int64_t i = row % t->shape[d];
        row /= t->shape[d];
        off += i * t->strides[d];
    }
    return off;
}

#define PAR_THRESHOLD 32768

/* Copy t's elements in row-major order into contiguous out of dtype dt,
 * converting. */
static void copy_out(const cg_tensor *t, cg_dtype dt, void *out)
{
    int64_t n = cg_numel(t);
    if (n == 0)
        return;
    size_t z = cg_dtype_size(dt);
    if (cg_is_contiguous(t)) {
        cg_convert_run(dt, out, 1, t->dtype, cg_elem_ptr(t, t->offset), 1, n);
        return;
    }
    int64_t inner = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t is = t->ndim ? t->strides[t->ndim - 1] : 0;
    int64_t rows = n / inner;
#pragma omp parallel for schedule(static) if (n > PAR_THRESHOLD)
    for (int64_t r = 0; r < rows; r++)
        cg_convert_run(dt, (char *)out + (size_t)(r * inner) * z, 1, t->dtype,
                       cg_elem_ptr(t, outer_offset(t, r)), is, inner);
}

bool cg_copy_to(const cg_tensor *t, float *out)
{
    if (!t || !out) {
        if (!t)
            return cg_error_null_input("cg_copy_to");
        cg_set_error("copy_to: NULL destination");
        return false;
    }
    copy_out(t, CG_F32, out);
    return true;
}

bool cg_copy_to_array(const cg_tensor *t, void *out)
{
    if (!t || !out) {
        if (!t)
            return cg_error_null_input("cg_copy_to_array");
        cg_set_error("copy_to_array: NULL destination");
        return false;
    }
    copy_out(t, t->dtype, out);
    return true;
}

bool cg_check_writable(const char *op, const cg_tensor *dst)
{
    if (!dst)
        return cg_error_null_input(op);
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] > 1 && dst->strides[i] == 0) {
            char b[96];
            cg_set_error("%s: destination of shape %s is a broadcast view (stride-0 dim %d): "
                         "several elements share one memory location",
                         op, cg_shape_str(dst, b, sizeof b), i);
            return false;
        }
    }
    return true;
}

bool cg_k_copy_(cg_tensor *dst, const cg_tensor *src)
{
    if (!dst || !src)
        return cg_error_null_input("cg_copy_");
    if (!cg_check_writable("copy_", dst))
        return false;
    if (!cg_same_shape(dst, src)) {
        char b1[96], b2[96];
        cg_set_error("copy_: destination shape %s differs from source shape %s",
                     cg_shape_str(dst, b1, sizeof b1), cg_shape_str(src, b2, sizeof b2));
        return false;
    }
    cg_tensor_modified(dst);
    int64_t n = cg_numel(dst);
    if (n == 0)
        return true;
    if (cg_is_contiguous(dst)) {
        copy_out(src, dst->dtype, cg_elem_ptr(dst, dst->offset));
        return true;
    }
    int64_t inner = dst->ndim ? dst->shape[dst->ndim - 1] : 1;
    int64_t ds = dst->ndim ? dst->strides[dst->ndim - 1] : 0;
    int64_t ss = src->ndim ? src->strides[src->ndim - 1] : 0;
    int64_t rows = n / inner;
#pragma omp parallel for schedule(static) if (n > PAR_THRESHOLD)
    for (int64_t r = 0; r < rows; r++)
        cg_convert_run(dst->dtype, cg_elem_ptr(dst, outer_offset(dst, r)), ds, src->dtype,
                       cg_elem_ptr(src, outer_offset(src, r)), ss, inner);
    return true;
}

bool cg_fill_(cg_tensor *t, float v)
{
    if (!t)
        return cg_error_null_input("cg_fill_");
    cg_tensor_modified(t);
    int64_t n = cg_numel(t);
    if (n == 0)
        return true;
    int64_t inner = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t is = t->ndim ? t->strides[t->ndim - 1] : 0;
    int64_t rows = n / inner;
    if (t->dtype != CG_F32) { /* one converted element, copied (stride 0) */
        char e[8];
        cg_convert_run(t->dtype, e, 1, CG_F32, &v, 1, 1);
#pragma omp parallel for schedule(static) if (n > PAR_THRESHOLD)
        for (int64_t r = 0; r < rows; r++)
            cg_convert_run(t->dtype, cg_elem_ptr(t, outer_offset(t, r)), is, t->dtype, e, 0, inner);
        return true;
    }
#pragma omp parallel for schedule(static) if (n > PAR_THRESHOLD)
    for (int64_t r = 0; r < rows; r++) {
        float *p = (float *)t->storage->data + outer_offset(t, r);
        for (int64_t j = 0; j < inner; j++)
            p[j * is] = v;
    }
    return true;
}

/* ------------------------------------------------------------- creation */
static bool check_shape(const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > CG_MAX_DIMS) {
        cg_set_error("%s: ndim %d out of range [0, %d]", op, ndim, CG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        cg_set_error("%s: NULL shape", op);
        return false;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            char b[96];
            cg_set_error("%s: negative size in shape %s", op,
                         cg_shape_str_n(ndim, shape, b, sizeof b));
            return false;
        }
        if (shape[i] && n > INT64_MAX / 4 / shape[i]) {
            cg_set_error("%s: shape too large", op);
            return false;
        }
        n *= shape[i];
    }
    return true;
}

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

cg_tensor *cg_empty_dtype(cg_dtype dt, int ndim, const int64_t *shape)
{
    if ((unsigned)dt >= CG_NDTYPES) {
        cg_set_error("empty: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (!check_shape("empty", ndim, shape))
        return NULL;
    int64_t strides[CG_MAX_DIMS];
    contiguous_strides(ndim, shape, strides);
    cg_storage *s = storage_new(cg_numel_shape(ndim, shape), dt);
    if (!s)
        return NULL;
    cg_tensor *t = tensor_header(s, dt, 0, ndim, shape, strides);
    storage_release(s);
    return t;
}

cg_tensor *cg_empty(int ndim, const int64_t *shape) { return cg_empty_dtype(CG_F32, ndim, shape); }

cg_tensor *cg_full_dtype(cg_dtype dt, int ndim, const int64_t *shape, double value)
{
    if (dt == CG_F32)
        return cg_full(ndim, shape, (float)value);
    cg_tensor *t = cg_empty_dtype(dt, ndim, shape);
    if (!t)
        return NULL;
    char e[8];
    cg_elem_set(dt, e, value);
    cg_convert_run(dt, t->storage->data, 1, dt, e, 0, cg_numel(t));
    return t;
}

cg_tensor *cg_zeros_dtype(cg_dtype dt, int ndim, const int64_t *shape)
{
    return cg_full_dtype(dt, ndim, shape, 0.0);
}

cg_tensor *cg_full(int ndim, const int64_t *shape, float value)
{
    cg_tensor *t = cg_empty(ndim, shape);
    if (!t)
        return NULL;
    float *p = cg_data(t);
    int64_t n = cg_numel(t);
    if (value == 0.0f && !signbit(value)) {
        memset(p, 0, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < n; i++)
            p[i] = value;
    }
    return t;
}

cg_tensor *cg_zeros(int ndim, const int64_t *shape) { return cg_full(ndim, shape, 0.0f); }
cg_tensor *cg_ones(int ndim, const int64_t *shape) { return cg_full(ndim, shape, 1.0f); }
cg_tensor *cg_scalar(float value) { return cg_full(0, NULL, value); }

cg_tensor *cg_arange(double start, double stop, double step)
{
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        cg_set_error("arange: need finite start/stop and a non-zero step (got %g, %g, %g)", start,
                     stop, step);
        return NULL;
    }
    double count = ceil((stop - start) / step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    cg_tensor *t = cg_empty(1, &n);
    if (!t)
        return NULL;
    float *p = cg_data(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)(start + (double)i * step);
    return t;
}

cg_tensor *cg_from_data(int ndim, const int64_t *shape, const float *data)
{
    if (!data) {
        cg_set_error("from_data: NULL data");
        return NULL;
    }
    cg_tensor *t = cg_empty(ndim, shape);
    if (t)
        memcpy(cg_data(t), data, (size_t)cg_numel(t) * sizeof(float));
    return t;
}

cg_tensor *cg_empty_like(const cg_tensor *t)
{
    return t ? cg_empty_dtype(t->dtype, t->ndim, t->shape)
             : (cg_error_null_input("cg_empty_like"), NULL);
}
cg_tensor *cg_zeros_like(const cg_tensor *t)
{
    return t ? cg_zeros_dtype(t->dtype, t->ndim, t->shape)
             : (cg_error_null_input("cg_zeros_like"), NULL);
}

cg_tensor *cg_k_clone(const cg_tensor *t)
{
    if (!t) {
        cg_error_null_input("cg_clone");
        return NULL;
    }
    cg_tensor *c = cg_empty_like(t);
    if (c)
        copy_out(t, t->dtype, c->storage->data);
    return c;
}

cg_tensor *cg_k_contiguous(const cg_tensor *t)
{
    if (!t) {
        cg_error_null_input("cg_k_contiguous");
        return NULL;
    }
    if (cg_is_contiguous(t)) {
        /* a fresh header over the same storage: callers own a new reference
         * without autograd fields */
        return tensor_header(t->storage, t->dtype, t->offset, t->ndim, t->shape, t->strides);
    }
    return cg_k_clone(t);
}

/* ----------------------------------------------------------------- RNG */
/* The generator's arithmetic is core/rng.h's (kernels draw with it too). */
static inline uint64_t rng_bits(uint64_t seed, uint64_t i)
{
    return cg_rng_draw(cg_rng_key(seed), i);
}

static inline float bits_to_unit(uint64_t b) { return cg_rng_draw_unit(b); }

static inline double bits_to_unit_d(uint64_t b) { return (double)(b >> 11) * 0x1.0p-53; }

/* Standard normal from the draw i (uses one 64-bit draw: two 32-bit halves). */
static inline float normal_from(uint64_t seed, uint64_t i)
{
    uint64_t b = rng_bits(seed, i);
    double u1 = ((double)(b >> 32) + 1.0) * 0x1.0p-32; /* (0, 1] */
    double u2 = (double)(b & 0xffffffffu) * 0x1.0p-32; /* [0, 1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

cg_rng cg_rng_new(uint64_t seed) { return (cg_rng){.seed = seed, .counter = 0}; }

float cg_rng_uniform(cg_rng *r) { return bits_to_unit(rng_bits(r->seed, r->counter++)); }

double cg_rng_uniform_double(cg_rng *r) { return bits_to_unit_d(rng_bits(r->seed, r->counter++)); }

float cg_rng_normal(cg_rng *r) { return normal_from(r->seed, r->counter++); }

uint64_t cg_rng_below(cg_rng *r, uint64_t n)
{
    if (n == 0)
        return 0;
    /* rejection sampling: unbiased */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t b = rng_bits(r->seed, r->counter++);
        if (b < limit)
            return b % n;
    }
}

int64_t *cg_randperm(cg_rng *r, int64_t n)
{
    if (!r || n < 0) {
        cg_set_error("randperm: %s", r ? "n must be >= 0" : "NULL generator");
        return NULL;
    }
    int64_t *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) {
        cg_set_error("randperm: out of memory for %lld ids", (long long)n);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)cg_rng_below(r, (uint64_t)(i + 1));
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

/* Fill with f(seed, base + row-major index): thread-count independent. */
#define RNG_FILL(t, r, expr)                                                                       \
    do {                                                                                           \
        int64_t n_ = cg_numel(t);                                                                  \
        int64_t inner_ = (t)->ndim ? (t)->shape[(t)->ndim - 1] : 1;                                \
        int64_t is_ = (t)->ndim ? (t)->strides[(t)->ndim - 1] : 0;                                 \
        int64_t rows_ = inner_ ? n_ / inner_ : 0;                                                  \
        uint64_t seed_ = (r)->seed, base_ = (r)->counter;                                          \
        cg_tensor_modified(t);                                                                     \
        _Pragma("omp parallel for schedule(static) if (n_ > PAR_THRESHOLD)") for (int64_t row = 0; \
                                                                                  row < rows_;     \
                                                                                  row++)           \
        {                                                                                          \
            float *p_ = (float *)(t)->storage->data + outer_offset((t), row);                      \
            for (int64_t j = 0; j < inner_; j++) {                                                 \
                uint64_t i_ = base_ + (uint64_t)(row * inner_ + j);                                \
                p_[j * is_] = (expr);                                                              \
            }                                                                                      \
        }                                                                                          \
        (r)->counter += (uint64_t)n_;                                                              \
    } while (0)

bool cg_uniform_(cg_tensor *t, cg_rng *r, float lo, float hi)
{
    if (!t || !r)
        return cg_error_null_input("cg_uniform_");
    if (!cg_check_f32("uniform_", "t", t))
        return false;
    RNG_FILL(t, r, lo + (hi - lo) * bits_to_unit(rng_bits(seed_, i_)));
    return true;
}

bool cg_normal_(cg_tensor *t, cg_rng *r, float mean, float std)
{
    if (!t || !r)
        return cg_error_null_input("cg_normal_");
    if (!cg_check_f32("normal_", "t", t))
        return false;
    RNG_FILL(t, r, mean + std * normal_from(seed_, i_));
    return true;
}

cg_tensor *cg_rand(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_empty(ndim, shape);
    if (t && !cg_uniform_(t, r, 0.0f, 1.0f)) {
        cg_release(t);
        return NULL;
    }
    return t;
}

cg_tensor *cg_randn(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_empty(ndim, shape);
    if (t && !cg_normal_(t, r, 0.0f, 1.0f)) {
        cg_release(t);
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------- views */
static cg_tensor *view_of(const cg_tensor *t, int64_t offset, int ndim, const int64_t *shape,
                          const int64_t *strides)
{
    return tensor_header(t->storage, t->dtype, offset, ndim, shape, strides);
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
    shape[d] = (stop - start + step - 1) / step;
    strides[d] = t->strides[d] * step;
    return view_of(t, t->offset + start * t->strides[d], t->ndim, shape, strides);
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
    if (start < 0 || len < 0 || start + len > t->shape[d]) {
        char b[96];
        cg_set_error("narrow: range [%lld, %lld) out of bounds for dim %d of shape %s",
                     (long long)start, (long long)(start + len), dim, cg_shape_str(t, b, sizeof b));
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

cg_tensor *cg_view_squeeze(const cg_tensor *t, int dim)
{
    if (!t) {
        cg_error_null_input("cg_view_squeeze");
        return NULL;
    }
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
    if (ndim < t->ndim || ndim > CG_MAX_DIMS) {
        char b1[96], b2[96];
        cg_set_error("expand: cannot expand shape %s to %s", cg_shape_str(t, b1, sizeof b1),
                     cg_shape_str_n(ndim, shape, b2, sizeof b2));
        return NULL;
    }
    int64_t strides[CG_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int k = i - lead;
        if (k < 0) {
            strides[i] = 0;
            continue;
        }
        if (t->shape[k] == shape[i]) {
            strides[i] = t->strides[k];
        } else if (t->shape[k] == 1 && shape[i] >= 0) {
            strides[i] = 0;
        } else {
            char b1[96], b2[96];
            cg_set_error("expand: cannot expand shape %s to %s (dim %d: %lld vs %lld)",
                         cg_shape_str(t, b1, sizeof b1), cg_shape_str_n(ndim, shape, b2, sizeof b2),
                         i, (long long)t->shape[k], (long long)shape[i]);
            return NULL;
        }
    }
    return view_of(t, t->offset, ndim, shape, strides);
}

/* Resolve a -1 entry and check the element count. */
static bool infer_shape(const char *op, const cg_tensor *t, int ndim, const int64_t *shape,
                        int64_t *out)
{
    if (ndim < 0 || ndim > CG_MAX_DIMS || (ndim && !shape)) {
        cg_set_error("%s: bad target ndim %d", op, ndim);
        return false;
    }
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                cg_set_error("%s: only one dimension can be -1", op);
                return false;
            }
            infer = i;
        } else if (shape[i] < 0) {
            cg_set_error("%s: negative size %lld", op, (long long)shape[i]);
            return false;
        } else {
            known *= shape[i];
        }
    }
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
        contiguous_strides(ndim, shape, strides);
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
    contiguous_strides(ndim, s, st);
    cg_tensor *v = view_of(c, 0, ndim, s, st);
    cg_release(c);
    return v;
}
