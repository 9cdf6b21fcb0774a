/* cgrad core, INTERNAL: what the fused attention's forward
 * (core/attention.c) and backward (core/attention_bwd.c) share: the tile
 * sizes, a head's operands, the loops over heads and the checks of the
 * arguments. Only those two files include it, and test_bf16 for the
 * tiles' bound. */
#ifndef CG_ATTENTION_IMPL_H
#define CG_ATTENTION_IMPL_H

#include <stdatomic.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/attention_amx.h"
#include "core/gemm.h"
#include "core/shares.h"
#include "core/tensor.h"

#define QB 64     /* query rows per tile; also keys per sub-block of dk/dv (causal) */
#define KB 512    /* keys per block (a multiple of QB) */
#define PKEEP 256 /* up to this many keys the weights are kept (<= KB) */

/* Keys row i may see (before key padding): [0, kend). */
static inline int64_t key_end(bool causal, int64_t i, int64_t Tk)
{
    return causal ? (i + 1 < Tk ? i + 1 : Tk) : Tk;
}
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The first element of head (b, h) of a float [B,H,T,dh] */
static inline float *at4(const cg_tensor *t, int64_t b, int64_t h)
{
    return cg_data(t) + b * t->strides[0] + h * t->strides[1];
}

/* The key/value head query head h reads: grouped-query attention's
 * (k [B,Hkv,Tk,dh] with Hkv dividing H: a group of H/Hkv query heads
 * reads one); h itself when Hkv = H */
static inline int64_t kv_head(const cg_tensor *q, const cg_tensor *k, int64_t h)
{
    return h / (q->shape[1] / k->shape[1]);
}

/* q, k or v of one (batch, head) as a product's operand: floats, or
 * bf16 elements (bf16 training's copies) */
typedef struct {
    const void *p;
    bool bf;
} head_op;
static inline head_op head_at(const cg_tensor *t, int64_t b, int64_t h)
{
    const int64_t off = b * t->strides[0] + h * t->strides[1];
    if (t->dtype == CG_BF16)
        return (head_op){cg_data_bf16(t) + off, true};
    return (head_op){cg_data(t) + off, false};
}
/* the operand from element i on */
static inline const void *from(head_op o, int64_t i)
{
    return o.bf ? (const void *)((const uint16_t *)o.p + i)
                : (const void *)((const float *)o.p + i);
}

/* Scratch of n floats for each of nt threads (one allocation). */
static inline float *thread_scratch(int nt, int64_t n)
{
    return cg_alloc((size_t)(n > 0 ? n : 1) * sizeof(float) * (size_t)(nt > 0 ? nt : 1));
}

/* The team of a loop over the heads of q [B,H,Tq,dh] and keys [.., Tk, ..]:
 * nt when the work is large (core/shares.h) */
static inline int heads_team(int nt, const cg_tensor *q, int64_t Tk)
{
    const int64_t BH = q->shape[0] * q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    return BH * Tq * Tk * dh > 32768 && !omp_in_parallel() ? nt : 1;
}

/* What the loops over heads (bh) or query tiles (bh * nqb + tile) read
 * and write; each loop sets the fields it uses. */
typedef struct {
    cg_gemm_path path;
    const cg_tensor *q, *k, *v, *out, *g, *gq, *gk, *gv;
    const cg_tensor *g16;    /* bf16: the backward's dO rounded (rows adjacent) */
    bool causal, keep, bf16; /* bf16: the backward's products are in bf16 */
    float scale;
    const int32_t *kmask;   /* [B, Tk] (key_masks), or NULL */
    const uint8_t *key_pad; /* [B, Tk], or NULL */
    int64_t qb, nqb;        /* query rows a tile, tiles a head */
    head_op saved;          /* the backward's kept weights, or its lse */
    const float *lse;       /* the forward's, read */
    float *lse_out, *P;     /* the forward's, written; the weights */
    uint16_t *P16;          /* the weights kept in bf16 */
    uint16_t *out16;        /* the output rounded to bf16 (out's layout), or NULL */
    void *scratch;          /* `each` a thread: bytes (AMX workspaces) or floats */
    size_t each;
    atomic_bool *failed; /* set by a product that fails (out of memory): the op then fails */
} heads_job;

/* q, k and v are float32 or bfloat16 (the copies bf16 training keeps:
 * attention reads them only in its products, which round them so) */
bool cg_attn_check_qkv(const char *op, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v);
/* The key-padding mask of op: NULL (none) or bool [B, Tk], true = a
 * padding key; *bytes a contiguous copy or alias (release it). */
bool cg_attn_key_pad_arg(const char *op, const cg_tensor *key_pad, int64_t B, int64_t Tk,
                         cg_tensor **bytes);
/* A [B,H,T,dh] view over fresh [B,T,H,dh] storage (zeroed if zero). */
cg_tensor *cg_attn_heads_out(int64_t B, int64_t H, int64_t T, int64_t dh, bool zero);
/* Query rows per tile (core/attention.c). */
int64_t cg_attn_tile_rows(bool causal, bool keep, int64_t Tq, int64_t BH);
/* A product of head operands on path, alpha 1 (core/attention.c); a
 * failure (out of memory) sets *failed, which the op reads after its
 * threads. */
void cg_attn_mm(atomic_bool *failed, cg_gemm_path path, int64_t m, int64_t n, int64_t k,
                const void *a, bool abf, int64_t rsa, int64_t csa, const void *b, bool bbf,
                int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc, int64_t csc);
/* Whether the products run on AMX tiles; one head's operands for them;
 * their scratch of `bytes` for each of nt threads (*each: one's). */
bool cg_attn_amx_fits(cg_gemm_path path, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                      const cg_tensor *g);
cg_attn_amx_head cg_attn_amx_head_of(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                     int64_t b, int64_t h);
char *cg_attn_amx_scratch(int nt, size_t bytes, size_t *each);

#endif
