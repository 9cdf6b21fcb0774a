/* The decoder stacks' use of the key/value cache (nn/kv_cache.c), inside
 * the nn layer only. Include it after nn/kv_cache.h (it does not include
 * it: a module never includes itself round a circle). */
#ifndef CG_NN_KV_CACHE_IMPL_H
#define CG_NN_KV_CACHE_IMPL_H

/* The first step's memory [B,S,d] and mem_pad (may be NULL), both checked
 * by the caller: a copy of the mask becomes the cross-attention's padding,
 * and both are kept (held, with their versions) for
 * cg_kv_cache_memory_ok. False + error (out of memory), c unchanged. */
bool cg_kv_cache_keep_memory(cg_kv_cache *c, cg_tensor *memory, const cg_tensor *mem_pad);
/* After the first step: a memory or mem_pad given (either may be NULL)
 * must be the first step's, the same elements of the same storage not
 * written since, whose keys and values the cache answers with. False +
 * error otherwise. */
bool cg_kv_cache_memory_ok(const cg_kv_cache *c, const cg_tensor *memory, const cg_tensor *mem_pad);

#endif
