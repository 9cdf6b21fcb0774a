/* The key/value cache of incremental decoding (nn/kv_cache.h): its
 * layers' keys and values, and the memory a decoder's first step gave. */
#include <stdlib.h>

#include "autograd/ops.h"
#include "nn/kv_cache.h"
#include "nn/kv_cache_impl.h"

cg_kv_cache *cg_kv_cache_new(int n_layers)
{
    if (n_layers < 0) {
        cg_set_error("kv cache: n_layers must be >= 0 (got %d)", n_layers);
        return NULL;
    }
    cg_kv_cache *c = calloc(1, sizeof *c);
    size_t n = (size_t)(n_layers ? n_layers : 1);
    if (c) {
        c->self = calloc(n, sizeof *c->self);
        c->cross = calloc(n, sizeof *c->cross);
    }
    if (!c || !c->self || !c->cross) {
        cg_kv_cache_free(c);
        cg_set_error("kv cache: out of memory");
        return NULL;
    }
    c->n_layers = n_layers;
    return c;
}

cg_mha_kv *cg_kv_cache_layer(cg_kv_cache *c, int i)
{
    if (!c)
        return NULL;
    if (i < 0) {
        cg_set_error("kv cache: layer %d is negative", i);
        return NULL;
    }
    if (i >= c->n_layers) { /* a model of one's own: grow to i + 1 layers */
        size_t n = (size_t)i + 1;
        cg_mha_kv *s = realloc(c->self, n * sizeof *s);
        if (s)
            c->self = s;
        cg_mha_kv *x = s ? realloc(c->cross, n * sizeof *x) : NULL;
        if (!x) {
            cg_set_error("kv cache: out of memory");
            return NULL;
        }
        c->cross = x;
        for (int j = c->n_layers; j <= i; j++)
            c->self[j] = c->cross[j] = (cg_mha_kv){0};
        c->n_layers = i + 1;
    }
    return &c->self[i];
}

int64_t cg_kv_cache_len(const cg_kv_cache *c)
{
    int64_t len = 0;
    for (int i = 0; c && i < c->n_layers; i++)
        if (c->self[i].len > len)
            len = c->self[i].len;
    return len;
}

/* Drop the memory's padding copy and the first step's memory and mask. */
static void forget_memory(cg_kv_cache *c)
{
    cg_release_held(c->cross_pad);
    cg_release_held(c->memory);
    cg_release_held(c->mem_pad);
    c->cross_pad = c->memory = c->mem_pad = NULL;
}

void cg_kv_cache_free(cg_kv_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_layers; i++) {
        cg_mha_kv_free(&c->self[i]);
        cg_mha_kv_free(&c->cross[i]);
    }
    free(c->self);
    free(c->cross);
    forget_memory(c);
    free(c);
}

void cg_kv_cache_reset(cg_kv_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_layers; i++) {
        cg_mha_kv_clear(&c->self[i]);
        cg_mha_kv_clear(&c->cross[i]);
    }
    forget_memory(c);
    c->S = 0;
    c->len = 0;
}

bool cg_kv_cache_reorder(cg_kv_cache *c, const cg_tensor *rows)
{
    if (!c) {
        cg_set_error("kv cache reorder: NULL cache");
        return false;
    }
    for (int i = 0; i < c->n_layers; i++)
        if (!cg_mha_kv_reorder(&c->self[i], rows) || !cg_mha_kv_reorder(&c->cross[i], rows))
            return false;
    if (c->cross_pad) { /* rows were checked against the keys above */
        cg_tensor *p = cg_index_select(c->cross_pad, 0, rows); /* bool: no graph */
        if (!p)
            return false;
        cg_release_held(c->cross_pad);
        c->cross_pad = cg_hold(p);
    }
    return true;
}

/* A later step's memory or mem_pad is the first step's (kept, version
 * then): the same elements of the same storage, not written since. */
static bool same_as_kept(const cg_tensor *t, const cg_tensor *kept, uint64_t version)
{
    if (!kept || t->storage != kept->storage || t->offset != kept->offset ||
        t->ndim != kept->ndim || cg_version(t) != version)
        return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != kept->shape[i] || t->strides[i] != kept->strides[i])
            return false;
    return true;
}

bool cg_kv_cache_memory_ok(const cg_kv_cache *c, const cg_tensor *memory, const cg_tensor *mem_pad)
{
    const char *what = memory && !same_as_kept(memory, c->memory, c->memory_version) ? "memory"
                       : mem_pad && !same_as_kept(mem_pad, c->mem_pad, c->mem_pad_version)
                           ? "mem_pad"
                           : NULL;
    if (what)
        cg_set_error("TransformerDecoder cached: the %s is not the first step's (or was written "
                     "since); the cache keeps that one's keys, reordered with its rows: pass it "
                     "or NULL, or cg_kv_cache_reset for a new one",
                     what);
    return !what;
}

bool cg_kv_cache_take_pad(cg_kv_cache *c, const cg_tensor *mem_pad, int64_t S)
{
    cg_tensor *copy = NULL; /* the caller's mask may change between steps */
    if (mem_pad && !(copy = cg_k_clone(mem_pad)))
        return false;
    cg_release_held(c->cross_pad);
    c->cross_pad = copy ? cg_hold(copy) : NULL;
    c->S = S;
    return true;
}

bool cg_kv_cache_note_memory(cg_kv_cache *c, const cg_tensor *memory, const cg_tensor *mem_pad)
{
    cg_tensor *kept = cg_detach(memory), *kept_pad = mem_pad ? cg_detach(mem_pad) : NULL;
    if (!kept || (mem_pad && !kept_pad)) {
        cg_release_all(2, kept, kept_pad);
        return false;
    }
    cg_release_held(c->memory);
    cg_release_held(c->mem_pad);
    c->memory = cg_hold(kept);
    c->mem_pad = kept_pad ? cg_hold(kept_pad) : NULL;
    c->memory_version = cg_version(memory);
    c->mem_pad_version = mem_pad ? cg_version(mem_pad) : 0;
    return true;
}

int64_t *cg_kv_cache_lens(const cg_kv_cache *c)
{
    int64_t *l = malloc((size_t)(2 * c->n_layers + 1) * sizeof *l);
    if (!l) {
        cg_set_error("kv cache: out of memory");
        return NULL;
    }
    for (int i = 0; i < c->n_layers; i++) {
        l[2 * i] = c->self[i].len;
        l[2 * i + 1] = c->cross[i].len;
    }
    l[2 * c->n_layers] = c->len;
    return l;
}

void cg_kv_cache_restore_lens(cg_kv_cache *c, int64_t *lens)
{
    for (int i = 0; i < c->n_layers; i++) {
        c->self[i].len = lens[2 * i];
        c->cross[i].len = lens[2 * i + 1];
    }
    c->len = lens[2 * c->n_layers];
    free(lens);
}
