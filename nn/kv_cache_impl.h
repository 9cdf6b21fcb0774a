/* The decoder stacks' use of the key/value cache (nn/kv_cache.c), inside
 * the nn layer only. Include it after nn/kv_cache.h (it does not include
 * it: a module never includes itself round a circle). */
#ifndef CG_NN_KV_CACHE_IMPL_H
#define CG_NN_KV_CACHE_IMPL_H

/* The first step, inside the stack's forward (after its pre-hooks): a
 * copy of mem_pad (checked by the caller; may be NULL) becomes the
 * cross-attention's key padding, and S the memory's length. False + error
 * (out of memory), c unchanged. */
bool cg_kv_cache_take_pad(cg_kv_cache *c, const cg_tensor *mem_pad, int64_t S);
/* After a first step that succeeded: the memory and mem_pad the caller gave
 * are noted (detached aliases: storage and version, no graph) for
 * cg_kv_cache_memory_ok. False + error (out of memory). */
bool cg_kv_cache_note_memory(cg_kv_cache *c, const cg_tensor *memory, const cg_tensor *mem_pad);
/* After the first step: a memory or mem_pad given (either may be NULL)
 * must be the first step's, the same elements of the same storage not
 * written since, whose keys and values the cache answers with. False +
 * error otherwise. */
bool cg_kv_cache_memory_ok(const cg_kv_cache *c, const cg_tensor *memory, const cg_tensor *mem_pad);
/* Every layer's filled lengths and c->len (malloc'd; NULL + error), and putting them
 * back (freeing them) after a step that failed partway, so that a failed
 * step leaves the cache as it was: an append only grows len. */
int64_t *cg_kv_cache_lens(const cg_kv_cache *c);
void cg_kv_cache_restore_lens(cg_kv_cache *c, int64_t *lens);

#endif
