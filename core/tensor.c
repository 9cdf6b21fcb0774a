/* Tensors: storage, scopes, lifecycle and queries: the part that owns memory
 * (cg_alloc) and counts references. Creation, copies, fills and random
 * tensors are tensor_create.c, views tensor_views.c, shapes alone shape.c;
 * tensor_impl.h is what they share. */
#include "core/tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_impl.h"

/* Reference counts (PyTorch's intrusive_ptr): a new reference is made from
 * an existing one, so the increment needs no ordering; the decrement is
 * acquire-release, so that the thread that frees sees every write made
 * through the other references. */
static inline void ref_inc(int *c) { __atomic_add_fetch(c, 1, __ATOMIC_RELAXED); }
static inline int ref_dec(int *c) { return __atomic_sub_fetch(c, 1, __ATOMIC_ACQ_REL); }
static inline int ref_get(const int *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

cg_storage *cg_storage_new(int64_t numel, cg_dtype dt, bool zeroed)
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
    s->data = zeroed ? cg_alloc_zeroed(n * z) : cg_alloc(n * z);
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

void cg_storage_release(cg_storage *s)
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
    /* what closing needs for cap tensors (two lists and their counts),
     * grown with v: a scope closes without allocating */
    void *closing;
    scope_ref *x;
    int64_t nx, capx;
    cg_scope *parent;
    uint64_t id; /* cg_scope_id: never the same twice */
};

static _Thread_local cg_scope *g_scope;
static int64_t g_live; /* atomic */

int64_t cg_live_tensors(void) { return __atomic_load_n(&g_live, __ATOMIC_RELAXED); }

/* The bytes of a scope's `closing` for cap tensors. */
static size_t closing_bytes(int64_t cap)
{
    return (size_t)cap * (2 * sizeof(cg_tensor *) + sizeof(int));
}

static bool scope_add(cg_scope *s, cg_tensor *t)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        void *closing = malloc(closing_bytes(cap));
        cg_tensor **v = closing ? realloc(s->v, (size_t)cap * sizeof *v) : NULL;
        if (!v) {
            free(closing);
            return false; /* not tracked: the reference stays the caller's */
        }
        free(s->closing);
        s->closing = closing;
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
    static uint64_t next_id; /* atomic */
    s->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    s->parent = g_scope;
    g_scope = s;
    return s;
}

uint64_t cg_scope_id(const cg_scope *s) { return s ? s->id : 0; }

bool cg_scope_end_id(uint64_t id)
{
    for (cg_scope *p = g_scope; id && p; p = p->parent)
        if (p->id == id) {
            cg_scope_end(p);
            return true;
        }
    return false;
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

cg_tensor *cg_hold_shared(cg_tensor *t)
{
    cg_hold(t);
    /* every reference held: the scope that made t has no share left */
    if (t && t->scope && scope_is_mine(t) && ref_get(&t->refcount) == ref_get(&t->held)) {
        scope_remove(t);
        t->scope_kept = false;
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
    int64_t k = 0, nk = 0;
    cg_tensor **rel = s->closing, **kept = rel ? rel + s->cap : NULL;
    int *cnt = kept ? (int *)(kept + s->cap) : NULL;
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
        free(c->closing);
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
    if (t && cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_retain"))
        return t; /* a freed tensor: named, and no count brought back to life */
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
    cg_storage_release(t->storage);
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
cg_tensor *cg_tensor_header(cg_storage *s, cg_dtype dt, int64_t offset, int ndim,
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
    if (g_scope && !scope_add(g_scope, t)) { /* untracked, it would outlive the scope */
        release_ref(t);
        cg_set_error("out of memory recording a tensor in its scope");
        return NULL;
    }
    return t;
}

cg_tensor *cg_meta_held(const cg_tensor *t)
{
    cg_tensor *m = t ? calloc(1, sizeof *m) : NULL;
    if (!m)
        return NULL;
    m->offset = t->offset;
    m->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        m->shape[i] = t->shape[i];
        m->strides[i] = t->strides[i];
    }
    m->dtype = t->dtype;
    m->refcount = 1;
    m->held = 1;
    m->magic = CG_TENSOR_LIVE;
    __atomic_add_fetch(&g_live, 1, __ATOMIC_RELAXED);
    return m;
}

/* ------------------------------------------------------------- queries */
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

bool cg_is_dense(const cg_tensor *t)
{
    if (!t)
        return cg_error_null_input("cg_is_dense");
    /* the dims of more than one element, by stride: each stride the
     * product of the sizes below it */
    int64_t st[CG_MAX_DIMS], sz[CG_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1)
            continue;
        if (t->strides[i] <= 0)
            return t->shape[i] == 0;
        int j = n++;
        for (; j > 0 && st[j - 1] > t->strides[i]; j--) {
            st[j] = st[j - 1];
            sz[j] = sz[j - 1];
        }
        st[j] = t->strides[i];
        sz[j] = t->shape[i];
    }
    int64_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (st[i] != expect)
            return false;
        expect *= sz[i];
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
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, fn))
        return NULL;
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
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_data_ptr"))
        return NULL;
    return cg_elem_ptr(t, t->offset);
}

bool cg_check_dtype(const char *op, const char *arg, const cg_tensor *t, cg_dtype dt)
{
    if (!t)
        return cg_error_null_arg(op, arg);
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, op))
        return false;
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
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, op))
        return -1;
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
    if (off < 0 || !cg_check_no_history("cg_set", t))
        return false;
    float src = v;
    cg_convert_run(t->dtype, cg_elem_ptr(t, off), 1, CG_F32, &src, 1, 1);
    cg_tensor_modified(t);
    return true;
}

/* The lock of the storages' derived slots (tensor_impl.h). */
static pthread_mutex_t g_derived_lock = PTHREAD_MUTEX_INITIALIZER;

void cg_derived_lock(void) { pthread_mutex_lock(&g_derived_lock); }
void cg_derived_unlock(void) { pthread_mutex_unlock(&g_derived_lock); }

void cg_tensor_modified(cg_tensor *t)
{
    if (!t || !t->storage)
        return;
    cg_storage *s = t->storage;
    /* autograd compares it with the version it saved; atomic, as threads
     * that write one weight at once (Hogwild's steps) each count */
    __atomic_add_fetch(&s->version, 1, __ATOMIC_SEQ_CST);
    /* Taken out under the lock its owner reads it under, then freed
     * without it (its free takes what it needs): two threads that announce
     * a write at once freed one form twice, and a product on another
     * thread read a form as it was freed (tests/test_threads.c). */
    cg_derived_lock();
    void *d = s->derived;
    void (*free_fn)(void *) = s->derived_free;
    s->derived = NULL;
    cg_derived_unlock();
    if (d)
        free_fn(d);
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
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, fn))
        return false;
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
