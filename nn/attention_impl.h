/* What nn/attention.c and nn/attention_kv.c share, inside the nn layer
 * only. Include it after nn/attention.h (it does not include it). */
#ifndef CG_NN_ATTENTION_IMPL_H
#define CG_NN_ATTENTION_IMPL_H

/* Append kh, vh [B,H,n,dh] (H the module's key/value heads) at position
 * kv->len, growing the buffers (doubling, from 16 positions). False +
 * error when the batch, heads or head size differ from the cached ones'
 * (reorder the cache when the batch changes) or out of memory; the cache
 * is unchanged then. */
bool cg_mha_kv_append(cg_mha_kv *kv, const cg_tensor *kh, const cg_tensor *vh);

#endif
