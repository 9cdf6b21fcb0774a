/* cgrad core, INTERNAL: the fused attention's products on AMX tiles, one
 * (batch, head) at a time (core/attention_amx.c; only core/attention_impl.h
 * and tests/test_bf16.c include this).
 *
 * Where the backward recomputes the weights within one key block (on AMX,
 * beyond 128 and up to 512 keys: charlm base's 256 x 256 x 64 heads), its
 * five products and the forward's two are small, and through the general
 * GEMM each packed its operands again and wrote its tiles back through a
 * store routine. Here each operand is rounded to bf16 once per head
 * (q once per strip of 32 rows in the forward), straight into the layout
 * the tiles read: the left operand's rows as they are (a 16 x 32 tile is 16
 * rows of 32 elements), the right operand as k-pairs ([K/2][N] 32-bit
 * words, the pair's first element in the low half). The products are the
 * GEMM's: the same tdpbf16ps sums in the same k order, from the same
 * rounded operands, so the same bits (tests/test_bf16.c holds the two
 * equal), and no zero padding reaches a sum that was not padded there. */
#ifndef CG_ATTENTION_AMX_H
#define CG_ATTENTION_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One head's operands: q [Tq, dh], k and v [Tk, dh], each row-contiguous
 * (element stride 1) with rows qr, kr, vr elements apart; floats, or bf16
 * bit patterns where the flag is set. */
typedef struct {
    const void *q, *k, *v;
    bool qbf, kbf, vbf;
    int64_t qr, kr, vr;
    int64_t Tq, Tk, dh;
} cg_attn_amx_head;

/* Whether attention's products run on AMX tiles here: the path is AMX
 * (cg_gemm_path CG_GEMM_BF16_AMX, an int here) and CG_ATTN_AMX is not 0
 * (CG_ATTN_AMX=0: through the GEMM, the same bits). */
bool cg_attn_amx_on(int path);

/* Bytes of scratch one thread needs for the forward of heads with Tk keys
 * of dh, and for the backward of Tq x Tk x dh ones. */
size_t cg_attn_amx_fwd_bytes(int64_t Tk, int64_t dh);
size_t cg_attn_amx_bwd_bytes(int64_t Tq, int64_t Tk, int64_t dh);

/* The forward's packed keys and values of head `id` (any number naming
 * the head, e.g. b H + h) in scratch w: packed unless w already holds
 * that head's; id -1 makes w forget (call it on each thread's scratch
 * before the heads). */
void cg_attn_amx_fwd_head(void *w, int64_t id, const cg_attn_amx_head *h);
/* Query rows [i0, i1) of the head last given to w, in strips of 32: the
 * scores S = q k^T over keys [0, kn) into a row of w, where row(ctx, i,
 * row, kn) turns them into row i's weights over [0, kn) (the softmax,
 * which also keeps the row's log-sum-exp); then out = P v over keys
 * [0, kn) (out: rows lo floats apart, element stride 1). */
void cg_attn_amx_fwd_rows(void *w, const cg_attn_amx_head *h, int64_t i0, int64_t i1, int64_t kn,
                          void (*row)(void *ctx, int64_t i, float *s, int64_t kn), void *ctx,
                          float *out, int64_t lo);

/* One head's backward from dO (g: rows gr floats apart, element stride
 * 1), in tiles of qb query rows, each in strips of 32: S = q k^T and
 * dP = dO v^T over the keys the tile's rows see, then rows(ctx, i, s, d,
 * kz) turns row i's scores s into its weights P and its dP d into dS over
 * columns [0, kz) (zeros past the row's keys); dq = dS k; then, over all
 * queries, dv = P^T dO and dk = dS^T q (dq, dk, dv: rows that many floats
 * apart, element stride 1; NULL: not wanted). sub: 0, or (causal) the keys
 * per sub-block, a multiple of 32 and of qb: a tile ending at row i1 then
 * sees keys [0, i1) and kz is that rounded up to sub, and key block j's
 * sums over queries start at query j rounded down to sub, where
 * core/attention_bwd.c's bwd_head starts them. */
void cg_attn_amx_bwd_head(void *w, const cg_attn_amx_head *h, const float *g, int64_t gr,
                          int64_t qb, int64_t sub,
                          void (*rows)(void *ctx, int64_t i, float *s, float *d, int64_t kz),
                          void *ctx, float *dq, int64_t dqr, float *dk, int64_t dkr, float *dv,
                          int64_t dvr);

#endif
