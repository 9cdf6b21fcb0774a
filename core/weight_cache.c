/* The weight cache (PyTorch autocast's cached casts, and the packed weights
 * of inference): a weight used by bf16 products is rounded to bf16 and
 * packed into the GEMM's panels once per version of its data, not once per
 * product; one used by fp32 products without a graph is packed so into the
 * fp32 driver's panels, when the cache keeps that copy (those products can
 * read W itself: cg_packed_weight_f32_kept).
 *
 * A cached form lives in its storage's derived slot (core/tensor.h): a
 * slot holds one entry per form (cg_packed_form: W in bf16 as the products
 * y = x W^T read it, W^T in bf16 as dx = dy W reads it, W in fp32 panels),
 * each keyed by the view it was made
 * from (offset, shape, strides) and the storage's version. Any write
 * through the library (cg_tensor_modified: optimizer steps, copies, fills,
 * loads) frees the slot, and a version that moved on without that is a
 * miss too, so a stale copy is never read. The slot dies with its storage.
 *
 * Thread-safe: one mutex, the storages' derived-slot lock
 * (core/tensor_impl.h, which cg_tensor_modified takes a slot out under),
 * guards the slots, the list and the byte count; an entry is reference
 * counted, so a product that holds one can finish while another thread
 * replaces it or writes the weight. The cache holds at most g_limit
 * bytes; beyond that a weight is packed for its caller alone and freed
 * after the product (the same bits, no saving). The entries in slots are also on one list, oldest
 * first, so that lowering the limit frees the oldest at once (they would
 * otherwise stay, and be read, until their weights are written or die). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "core/tensor_impl.h"

struct cg_packed_weight {
    cg_packed_form form;
    cg_bf16_matrix *m;  /* the bf16 forms */
    cg_f32_packed *m32; /* CG_PACKED_F32 */
    atomic_int refs;
    bool cached; /* counted in g_bytes while in a slot */
    size_t bytes;
    int64_t offset, shape[2], strides[2];
    uint64_t version;
    struct weight_slot *slot;        /* while cached: slot->e[form] is this entry */
    cg_packed_weight *older, *newer; /* the list of cached entries */
};

/* a storage's entries, one per cg_packed_form */
enum { FORMS = CG_PACKED_F32 + 1 };
typedef struct weight_slot {
    cg_packed_weight *e[FORMS];
} weight_slot;

static size_t g_bytes;                        /* held by slots (under the lock) */
static size_t g_limit = (size_t)1 << 30;      /* 1 GiB */
static cg_packed_weight *g_oldest, *g_newest; /* the cached entries (under the lock) */
static atomic_uint_fast64_t g_packs, g_hits;

void cg_packed_weight_release(cg_packed_weight *e)
{
    if (e && atomic_fetch_sub(&e->refs, 1) == 1) {
        cg_bf16_matrix_free(e->m);
        cg_f32_packed_free(e->m32);
        free(e);
    }
}

/* Take e out of its slot (under the lock). */
static void unslot(cg_packed_weight *e)
{
    if (!e)
        return;
    e->slot->e[e->form] = NULL;
    *(e->older ? &e->older->newer : &g_oldest) = e->newer;
    *(e->newer ? &e->newer->older : &g_newest) = e->older;
    g_bytes -= e->bytes;
    e->cached = false;
    cg_packed_weight_release(e);
}

static void slot_free(void *p)
{
    weight_slot *s = p;
    cg_derived_lock();
    for (int f = 0; f < FORMS; f++)
        unslot(s->e[f]);
    cg_derived_unlock();
    free(s);
}

/* The dimensions of the packed matrix: W [n, k], or W^T [k, n]. */
static void oriented(const cg_tensor *w, bool tr, int64_t shape[2], int64_t strides[2])
{
    shape[0] = w->shape[tr];
    shape[1] = w->shape[!tr];
    strides[0] = w->strides[tr];
    strides[1] = w->strides[!tr];
}

static bool same_key(const cg_packed_weight *e, const cg_tensor *w)
{
    const bool tr = e && e->form == CG_PACKED_BF16_T;
    int64_t sh[2], st[2];
    oriented(w, tr, sh, st);
    return e && e->offset == w->offset && e->shape[0] == sh[0] && e->shape[1] == sh[1] &&
           e->strides[0] == st[0] && e->strides[1] == st[1] &&
           e->version == __atomic_load_n(&w->storage->version, __ATOMIC_SEQ_CST);
}

/* w's slot, made when make is set and the derived slot is free (under
 * the lock); NULL when another kind of form holds the slot. */
static weight_slot *slot_of(cg_storage *s, bool make)
{
    if (s->derived) /* cg_tensor_modified leaves derived_free set */
        return s->derived_free == slot_free ? s->derived : NULL;
    if (!make)
        return NULL;
    weight_slot *ws = calloc(1, sizeof *ws);
    if (ws) {
        s->derived = ws;
        s->derived_free = slot_free;
    }
    return ws;
}

/* A new entry of w's form f (not in the cache yet), or NULL + error. */
static cg_packed_weight *pack(const cg_tensor *w, cg_packed_form f)
{
    int64_t sh[2], st[2];
    oriented(w, f == CG_PACKED_BF16_T, sh, st);
    cg_packed_weight *e = malloc(sizeof *e);
    if (!e) {
        cg_set_error("packed weight: out of memory");
        return NULL;
    }
    *e = (cg_packed_weight){.form = f,
                            .offset = w->offset,
                            .shape = {sh[0], sh[1]},
                            .strides = {st[0], st[1]},
                            .version = __atomic_load_n(&w->storage->version, __ATOMIC_SEQ_CST)};
    if (f == CG_PACKED_F32) { /* its own error: another fp32 path, or out of memory */
        e->m32 = cg_f32_packed_new(sh[0], sh[1], cg_data(w), st[0], st[1]);
        e->bytes = cg_f32_packed_bytes(e->m32);
    } else {
        e->m = cg_bf16_matrix_new(sh[0], sh[1], cg_data(w), st[0], st[1]);
        e->bytes = cg_bf16_matrix_bytes(e->m);
        /* out of memory, or no bf16 on this CPU (cg_bf16_matrix_new's error) */
        if (!e->m &&
            (cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED)))
            cg_set_error("bf16 weight: out of memory packing a %lld x %lld weight",
                         (long long)sh[0], (long long)sh[1]);
    }
    if (!e->m && !e->m32) {
        free(e);
        return NULL;
    }
    atomic_init(&e->refs, 1);
    atomic_fetch_add(&g_packs, 1);
    return e;
}

/* Whether the storage's slot has room for a new entry of form f of
 * `bytes` (under the lock): the limit counting the form's stale entry as
 * freed, and the derived slot free or a weight slot. */
static bool fits(const cg_storage *s, int f, size_t bytes)
{
    const weight_slot *ws = s->derived && s->derived_free == slot_free ? s->derived : NULL;
    const size_t old = ws && ws->e[f] ? ws->e[f]->bytes : 0;
    return (!s->derived || ws) && g_bytes - old + bytes <= g_limit;
}

/* cg_packed_weight_get; kept_only: make no entry the cache would not
 * keep (NULL, no error, then) */
static cg_packed_weight *get(const cg_tensor *w, cg_packed_form form, bool kept_only)
{
    if (!w || w->ndim != 2 || w->dtype != CG_F32 || w->shape[0] < 1 || w->shape[1] < 1) {
        cg_set_error("packed weight: need a float32 [n, k] matrix with n, k >= 1");
        return NULL;
    }
    if ((unsigned)form >= FORMS) {
        cg_set_error("packed weight: unknown form %d", (int)form);
        return NULL;
    }
    const int f = form;
    cg_derived_lock();
    weight_slot *ws = slot_of(w->storage, false);
    cg_packed_weight *e = ws && same_key(ws->e[f], w) ? ws->e[f] : NULL;
    if (e)
        atomic_fetch_add(&e->refs, 1);
    cg_derived_unlock();
    if (e) {
        atomic_fetch_add(&g_hits, 1);
        return e;
    }
    if (kept_only) { /* the fp32 form's size, known before packing */
        cg_derived_lock();
        const bool room = fits(w->storage, f, cg_f32_packed_size(w->shape[0], w->shape[1]));
        cg_derived_unlock();
        if (!room)
            return NULL;
    }
    if (!(e = pack(w, form)))
        return NULL;
    cg_derived_lock();
    if (fits(w->storage, f, e->bytes) && (ws = slot_of(w->storage, true))) {
        unslot(ws->e[f]);
        atomic_fetch_add(&e->refs, 1); /* the slot's reference */
        e->cached = true;
        g_bytes += e->bytes;
        ws->e[f] = e;
        e->slot = ws;
        e->older = g_newest;
        *(g_newest ? &g_newest->newer : &g_oldest) = e;
        g_newest = e;
    }
    cg_derived_unlock();
    return e;
}

cg_packed_weight *cg_packed_weight_get(const cg_tensor *w, cg_packed_form form)
{
    return get(w, form, false);
}

cg_packed_weight *cg_packed_weight_f32_kept(const cg_tensor *w)
{
    /* a failure here is no error of the product's, which reads W instead:
     * the thread's error as it was */
    const bool had = cg_has_error();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", had ? cg_last_error() : "");
    cg_packed_weight *e = get(w, CG_PACKED_F32, true);
    if (!e && had)
        cg_set_error("%s", msg);
    else if (!e)
        cg_clear_error();
    return e;
}

const cg_bf16_matrix *cg_packed_weight_bf16(const cg_packed_weight *e) { return e ? e->m : NULL; }

const cg_f32_packed *cg_packed_weight_f32(const cg_packed_weight *e) { return e ? e->m32 : NULL; }

cg_cache_stats cg_weight_cache_stats(void)
{
    cg_derived_lock();
    cg_cache_stats s = {atomic_load(&g_packs), atomic_load(&g_hits), g_bytes, g_limit};
    cg_derived_unlock();
    return s;
}

void cg_weight_cache_limit(size_t bytes)
{
    cg_derived_lock();
    g_limit = bytes;
    while (g_bytes > g_limit)
        unslot(g_oldest);
    cg_derived_unlock();
}
