/* Fused scaled-dot-product attention, forward and backward, in tiles with
 * recomputation (the FlashAttention scheme, as PyTorch's CPU kernel does it).
 *
 * Forward: a work item is one (batch, head) pair and a tile of QB query
 * rows (non-causal attention with kept weights: up to QT rows, see
 * tile_rows); it walks the keys in blocks of KB with an online softmax (a
 * running maximum m and sum l per row: a new block with a larger maximum
 * rescales the sum and the output rows by exp(m_old - m_new)) and keeps
 * only each row's log-sum-exp, lse = m + log(l). When a tile's keys fit in
 * one block (every row at T <= KB) this is the plain softmax: the
 * probabilities are normalised before the product with v, exactly as
 * before tiling.
 *
 * Backward: one (batch, head) pair per thread, in the forward's tiles of
 * query rows. D_i = <dO_i, O_i>; for each key block the probabilities
 * P = exp(s / sqrt(dh) - lse) and dS = P (dO v^T - D) / sqrt(dh) are
 * recomputed tile by tile into a per-thread buffer of Tq x KB floats, then
 * dq += dS k, and dk = dS^T q, dv = P^T dO for the block's keys (each key
 * is in one block, so these are written once). Memory is linear in T:
 * nothing of size Tq x Tk is kept.
 *
 * Short keys (Tk <= PKEEP) keep the weights instead of the log-sum-exps
 * (in bf16 precision rounded to bf16, as the product with v reads them):
 * Tk floats per query row is no more than the activations around the
 * attention hold, and the backward then skips the recomputation (one more
 * product and exponential per score) that would cost the short sequences
 * of the zoo's presets several percent of their step. Memory stays linear
 * in T, since beyond PKEEP keys nothing of size Tq x Tk is kept. In bf16
 * the weights are kept up to PKEEP_BF16 keys only: beyond, the
 * log-sum-exps, and on AMX, up to KB keys (one block), the products of
 * forward and backward run on tiles of their own (core/attention_amx.c),
 * where recomputing costs what reading the weights back did. With one key block
 * D_i is <P_i, dP_i> (the output is not read); over several, <dO_i, O_i>.
 *
 * Causal attention never computes tiles above the diagonal: a query tile
 * ending at row i1 reads keys [0, i1) only, and a key block starting at j0
 * is met only by rows >= j0. Every product goes through cg_sgemm_path, on
 * the path of the calling thread's precision (captured before the parallel
 * regions, whose worker threads do not see that thread's policy). Each work
 * item is computed by one thread from start to end (the product runs
 * single-threaded inside the region), so results are bit-identical for any
 * thread count. The row kernels (softmax, online softmax, recomputed
 * weights, the softmax's backward) are core/attention_rows.c's. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/attention_amx.h"
#include "core/attention_rows.h"
#include "core/shares.h"
#include "core/ops.h"
#include "core/upcast.h"

#define QB 64     /* query rows per tile; also keys per sub-block of dk/dv (causal) */
#define KB 512    /* keys per block (a multiple of QB) */
#define PKEEP 256 /* up to this many keys the weights are kept (<= KB) */

/* q, k and v are float32 or bfloat16 (the copies bf16 training keeps:
 * attention reads them only in its products, which round them so) */
static bool check_qkv(const char *op, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v)
{
    if (!q || !k || !v) {
        cg_error_null_input(op);
        return false;
    }
    const cg_tensor *f[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        f[i] = f[i]->dtype == CG_BF16 ? NULL : f[i];
    if (!cg_f32_args(op, 3, f))
        return false;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || q->shape[0] != k->shape[0] ||
        q->shape[1] != k->shape[1] || !cg_same_shape(k, v) || q->shape[3] != k->shape[3]) {
        char a[96], b[96], c[96];
        cg_set_error("%s: expected q [B,H,Tq,dh], k and v [B,H,Tk,dh]; got q %s, k %s, v %s", op,
                     cg_shape_str(q, a, sizeof a), cg_shape_str(k, b, sizeof b),
                     cg_shape_str(v, c, sizeof c));
        return false;
    }
    return true;
}

/* Keys row i may see (before key padding): [0, kend). */
static inline int64_t key_end(bool causal, int64_t i, int64_t Tk)
{
    return causal ? (i + 1 < Tk ? i + 1 : Tk) : Tk;
}
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A [B,H,T,dh] view over fresh [B,T,H,dh] contiguous storage: the layout
 * the heads merge into without a copy. */
static cg_tensor *heads_out(int64_t B, int64_t H, int64_t T, int64_t dh, bool zero)
{
    cg_tensor *base = zero ? cg_zeros(CG_SHAPE(B, T, H, dh)) : cg_empty(CG_SHAPE(B, T, H, dh));
    if (!base)
        return NULL;
    cg_tensor *t = cg_view_transpose(base, 1, 2);
    cg_release(base);
    return t;
}

/* Query rows per tile: QB, except for non-causal attention with kept
 * weights (Tk <= PKEEP), where a tile takes up to QT rows (all the rows of
 * a (batch, head) of the zoo's presets). Every row of such a tile reads
 * every key, so the products' sums run over the same keys whatever the
 * tile: the same bits, while k and v are packed (and, in bf16, rounded)
 * once per tile instead of once per 64 rows, and the products are fewer
 * and larger. Causal tiles stay at QB rows: a bigger one would compute
 * more of the scores above the diagonal. Bigger tiles only when there are
 * at least QT_MIN_BH (batch, head) pairs, so that the threads still get
 * several work items each. The choice does not depend on the thread count:
 * with BLIS's own driver (CG_BLIS_DRIVER=1) the fp32 path of a product
 * depends on its size, and results must not depend on the thread count. */
#define QT 256
#define QT_MIN_BH 16
static int64_t tile_rows(bool causal, bool keep, int64_t Tq, int64_t BH)
{
    if (causal || !keep || BH < QT_MIN_BH)
        return QB;
    return Tq < QT ? Tq : QT;
}

static inline float *at4(const cg_tensor *t, int64_t b, int64_t h)
{
    return cg_data(t) + b * t->strides[0] + h * t->strides[1];
}

/* The n key-padding bytes as 32-bit masks (~0 where padded), the lanes
 * the forward's vector pass selects with; NULL when out of memory. */
static int32_t *key_masks(const uint8_t *key_pad, int64_t n)
{
    int32_t *km = cg_alloc((size_t)(n > 0 ? n : 1) * sizeof *km);
    if (!km)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        km[i] = -(int32_t)(key_pad[i] != 0);
    return km;
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

/* A product on `path` (the precision of the thread that called the
 * attention, captured before its parallel region: the worker threads do
 * not see the caller's policy, core/gemm.h; single-threaded inside the
 * region), alpha 1, with A and/or B given as head operands, floats or
 * bf16: the bits of the product of the floats they were rounded from */
static void mm_heads(cg_gemm_path path, int64_t m, int64_t n, int64_t k, const void *a, bool abf,
                     int64_t rsa, int64_t csa, const void *b, bool bbf, int64_t rsb, int64_t csb,
                     float beta, float *c, int64_t rsc, int64_t csc)
{
    const unsigned bf = (abf ? CG_GEMM_A_BF16 : 0) | (bbf ? CG_GEMM_B_BF16 : 0);
    if (!cg_gemm_mixed_path(path, 0, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, bf, beta, c, rsc,
                            csc))
        cg_set_error("attention: a product of %lld x %lld x %lld failed (out of memory)",
                     (long long)m, (long long)n, (long long)k);
}

/* Scratch of n floats for each of nt threads (one allocation). */
static float *thread_scratch(int nt, int64_t n)
{
    return cg_alloc((size_t)(n > 0 ? n : 1) * sizeof(float) * (size_t)(nt > 0 ? nt : 1));
}

/* One query tile [i0, i1) of one (batch, head): out rows and (unless
 * keep) lse; kmask: the batch's key masks (key_masks) or NULL. S is a QB x
 * ld scratch, ld = min(Tk, KB), or (keep) the tile's rows of the kept
 * weights, ld = Tk, whose rows are then completed with zeros to Tk. Pbf
 * (keep in bf16; else NULL): the tile's rows of the kept weights in bf16,
 * Tk apart, S then a scratch of the tile's rows: each row is rounded
 * into Pbf after its softmax, and the product with v reads Pbf (the
 * bits of the product reading S, which rounds S as Pbf holds it). */
static void fwd_tile(cg_gemm_path path, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                     const cg_tensor *out, int64_t b, int64_t h, int64_t i0, int64_t i1,
                     bool causal, const int32_t *kmask, float scale, float *S, int64_t ld,
                     bool keep, float *lse, uint16_t *Pbf)
{
    const int64_t Tk = k->shape[2], dh = q->shape[3];
    const head_op qa = head_at(q, b, h), ka = head_at(k, b, h), va = head_at(v, b, h);
    const void *qp = from(qa, i0 * q->strides[2]);
    float *op = at4(out, b, h) + i0 * out->strides[2];
    const int64_t rows = i1 - i0, ors = out->strides[2], ocs = out->strides[3];
    const int64_t kn = key_end(causal, i1 - 1, Tk); /* keys the tile reads */
    if (kn <= KB) { /* one block: the plain softmax, normalised before P v */
        mm_heads(path, rows, kn, dh, qp, qa.bf, q->strides[2], q->strides[3], ka.p, ka.bf,
                 k->strides[3], k->strides[2], 0.0f, S, ld, 1);
        for (int64_t i = i0; i < i1; i++) {
            cg_attn_softmax_row(S + (i - i0) * ld, key_end(causal, i, Tk), keep ? Tk : kn, scale,
                                kmask, keep ? NULL : lse + i);
            if (Pbf)
                cg_bf16_round_run(Tk, S + (i - i0) * ld, Pbf + (i - i0) * Tk);
        }
        mm_heads(path, rows, dh, kn, Pbf ? (const void *)Pbf : S, Pbf != NULL, Pbf ? Tk : ld, 1,
                 va.p, va.bf, v->strides[2], v->strides[3], 0.0f, op, ors, ocs);
        return;
    }
    float m[QB];
    double l[QB];
    for (int64_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0;
        for (int64_t c = 0; c < dh; c++)
            op[r * ors + c * ocs] = 0.0f;
    }
    for (int64_t j0 = 0; j0 < kn; j0 += KB) {
        const int64_t j1 = min64(j0 + KB, kn);
        /* S = q k[j0:j1]^T */
        mm_heads(path, rows, j1 - j0, dh, qp, qa.bf, q->strides[2], q->strides[3],
                 from(ka, j0 * k->strides[2]), ka.bf, k->strides[3], k->strides[2], 0.0f, S, ld, 1);
        for (int64_t r = 0; r < rows; r++) {
            int64_t ke = min64(key_end(causal, i0 + r, Tk), j1) - j0;
            float alpha = cg_attn_online_row(S + r * ld, ke > 0 ? ke : 0, j1 - j0, scale,
                                             kmask ? kmask + j0 : NULL, &m[r], &l[r]);
            if (alpha != 1.0f)
                for (int64_t c = 0; c < dh; c++)
                    op[r * ors + c * ocs] *= alpha;
        }
        /* out += P v[j0:j1] */
        mm_heads(path, rows, dh, j1 - j0, S, false, ld, 1, from(va, j0 * v->strides[2]), va.bf,
                 v->strides[2], v->strides[3], 1.0f, op, ors, ocs);
    }
    for (int64_t r = 0; r < rows; r++) {
        double inv = 1.0 / l[r]; /* every key masked: 0 * inf = NaN, as PyTorch */
        for (int64_t c = 0; c < dh; c++)
            op[r * ors + c * ocs] = (float)(op[r * ors + c * ocs] * inv);
        lse[i0 + r] = cg_attn_row_lse(m[r], l[r]);
    }
}

/* The weights [B,H,Tq,Tk] recomputed from the log-sum-exps (exact zeros
 * where masked), for callers who ask for them. */
static cg_tensor *attention_weights(const cg_tensor *q, const cg_tensor *k, bool causal,
                                    const uint8_t *key_pad, const float *lse)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2], BH = B * H;
    cg_tensor *P = cg_empty(CG_SHAPE(B, H, Tq, Tk));
    if (!P)
        return NULL;
    const float scale = (float)sqrt((double)dh);
    const cg_gemm_path path = cg_precision_path(cg_get_matmul_precision());
    float *pd = cg_data(P);
#pragma omp parallel for schedule(static) if (BH > 1 && BH * Tq * Tk * dh > 32768)
    for (int64_t bh = 0; bh < BH; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const uint8_t *kpad = key_pad ? key_pad + b * Tk : NULL;
        float *S = pd + bh * Tq * Tk;
        for (int64_t i0 = 0; i0 < Tq; i0 += QB) {
            int64_t i1 = min64(i0 + QB, Tq), kn = key_end(causal, i1 - 1, Tk);
            const head_op qa = head_at(q, b, h), ka = head_at(k, b, h);
            mm_heads(path, i1 - i0, kn, dh, from(qa, i0 * q->strides[2]), qa.bf, q->strides[2],
                     q->strides[3], ka.p, ka.bf, k->strides[3], k->strides[2], 0.0f, S + i0 * Tk,
                     Tk, 1);
            for (int64_t i = i0; i < i1; i++)
                cg_attn_prob_row(S + i * Tk, key_end(causal, i, Tk), Tk, scale, kpad,
                                 lse[bh * Tq + i]);
        }
    }
    return P;
}

/* The key-padding mask of op: NULL (none) or bool [B, Tk], true = a
 * padding key. *bytes gets a contiguous copy or alias of it (release it;
 * NULL for none). False + error naming the argument, the expected and the
 * given dtype or shape (PyTorch: "expecting key_padding_mask shape of
 * (2, 3), but got torch.Size([1, 3])"). */
static bool key_pad_arg(const char *op, const cg_tensor *key_pad, int64_t B, int64_t Tk,
                        cg_tensor **bytes)
{
    *bytes = NULL;
    if (!key_pad)
        return true;
    if (!cg_check_dtype(op, "key_pad", key_pad, CG_BOOL))
        return false;
    if (key_pad->ndim != 2 || key_pad->shape[0] != B || key_pad->shape[1] != Tk) {
        char a[96], b[96];
        cg_set_error("%s: argument 'key_pad' has shape %s, expected [B, Tk] = %s", op,
                     cg_shape_str(key_pad, a, sizeof a),
                     cg_shape_str_n(2, (const int64_t[]){B, Tk}, b, sizeof b));
        return false;
    }
    return (*bytes = cg_k_contiguous(key_pad)) != NULL;
}

/* ------------------------------------------------------------ AMX tiles */

/* Whether the weights are kept for the backward: up to PKEEP keys, and in
 * bf16 precision up to PKEEP_BF16, beyond which the backward recomputes
 * them from the log-sum-exps (on AMX on tiles of its own,
 * core/attention_amx.h) in about the time reading them back took: charlm
 * base bf16 (256 keys) kept its step time and took 105 MB off its peak
 * memory on AMX (Xeon), 78 MB with the vdpbf16ps kernel (Zen 5, issue 32).
 * With fewer keys keeping them stays faster (seq2seq base, 96 keys:
 * recomputing took its step 10% longer on AMX). */
#define PKEEP_BF16 128
static bool keeps_weights(bool bf16, int64_t Tk) { return Tk <= (bf16 ? PKEEP_BF16 : PKEEP); }

/* Whether an attention with log-sum-exps and one key block runs its
 * products on AMX tiles (core/attention_amx.h): the path is AMX and q, k,
 * v (and g) have rows of contiguous elements. */
static bool amx_fits(cg_gemm_path path, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                     const cg_tensor *g)
{
    return k->shape[2] <= KB && q->strides[3] == 1 && k->strides[3] == 1 && v->strides[3] == 1 &&
           (!g || g->strides[3] == 1) && cg_attn_amx_on(path);
}
static cg_attn_amx_head amx_head(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                 int64_t b, int64_t h)
{
    const head_op qa = head_at(q, b, h), ka = head_at(k, b, h), va = head_at(v, b, h);
    return (cg_attn_amx_head){.q = qa.p,
                              .k = ka.p,
                              .v = va.p,
                              .qbf = qa.bf,
                              .kbf = ka.bf,
                              .vbf = va.bf,
                              .qr = q->strides[2],
                              .kr = k->strides[2],
                              .vr = v->strides[2],
                              .Tq = q->shape[2],
                              .Tk = k->shape[2],
                              .dh = q->shape[3]};
}
/* Scratch of `bytes` (rounded up to 64) for each of nt threads; *each
 * gets the rounded size */
static char *amx_scratch(int nt, size_t bytes, size_t *each)
{
    *each = (bytes + 63) / 64 * 64;
    return cg_alloc(*each * (size_t)(nt > 0 ? nt : 1));
}

typedef struct {
    int64_t Tk;
    bool causal;
    float scale;
    const int32_t *kmask;
    float *lse;
} fwd_rows_ctx;
/* fwd_tile's row: the softmax over the tile's kn keys, with its lse */
static void fwd_row(void *c, int64_t i, float *s, int64_t kn)
{
    const fwd_rows_ctx *x = c;
    cg_attn_softmax_row(s, key_end(x->causal, i, x->Tk), kn, x->scale, x->kmask, x->lse + i);
}

/* attention_fwd's work items (tiles of qb rows, log-sum-exps into lse)
 * on AMX tiles: fwd_tile's bits. False when out of memory. */
static bool fwd_amx(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                    const cg_tensor *out, bool causal, const int32_t *kmask, float scale,
                    int64_t qb, float *lse, int nt)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2], BH = B * H, nqb = (Tq + qb - 1) / qb, items = BH * nqb;
    size_t each;
    char *ws = amx_scratch(nt, cg_attn_amx_fwd_bytes(Tk, dh), &each);
    if (!ws)
        return false;
    for (int t = 0; t < nt; t++)
        cg_attn_amx_fwd_head(ws + (size_t)t * each, -1, NULL);
#pragma omp parallel for schedule(static) if (items > 1 && BH * Tq * Tk * dh > 32768) \
    num_threads(nt)
    for (int64_t it = 0; it < items; it++) {
        const int64_t bh = it / nqb, i0 = it % nqb * qb, i1 = min64(i0 + qb, Tq);
        const int64_t b = bh / H, h = bh % H;
        void *w = ws + (size_t)omp_get_thread_num() * each;
        const cg_attn_amx_head hd = amx_head(q, k, v, b, h);
        fwd_rows_ctx ctx = {Tk, causal, scale, kmask ? kmask + b * Tk : NULL, lse + bh * Tq};
        cg_attn_amx_fwd_head(w, bh, &hd);
        cg_attn_amx_fwd_rows(w, &hd, i0, i1, key_end(causal, i1 - 1, Tk), fwd_row, &ctx,
                             at4(out, b, h) + i0 * out->strides[2], out->strides[2]);
    }
    cg_free(ws);
    return true;
}

typedef struct {
    const float *lse;
    const uint8_t *kpad;
    int64_t Tk;
    bool causal;
    float scale;
} bwd_rows_ctx;
/* bwd_head's row with one key block: P from the log-sum-exp, then dS */
static void bwd_row(void *c, int64_t i, float *s, float *d, int64_t kz)
{
    const bwd_rows_ctx *x = c;
    const int64_t ke = key_end(x->causal, i, x->Tk);
    cg_attn_prob_row(s, ke, kz, x->scale, x->kpad, x->lse[i]);
    cg_attn_dsoft_row(s, d, ke, kz, cg_attn_dot(s, d, ke), x->scale);
}

/* attention_bwd from the log-sum-exps (one key block) on AMX tiles, one
 * (batch, head) per thread as bwd_head, with its bits; the gradients not
 * wanted are NULL. False when out of memory. */
static bool bwd_amx(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, const float *lse,
                    const cg_tensor *g, bool causal, const uint8_t *key_pad, int64_t qb,
                    const cg_tensor *gq, const cg_tensor *gk, const cg_tensor *gv, int nt)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2], BH = B * H;
    size_t each;
    char *ws = amx_scratch(nt, cg_attn_amx_bwd_bytes(Tq, Tk, dh), &each);
    if (!ws)
        return false;
    const float scale = (float)sqrt((double)dh);
#pragma omp parallel for schedule(static) if (BH > 1 && BH * Tq * Tk * dh > 32768) num_threads(nt)
    for (int64_t bh = 0; bh < BH; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const cg_attn_amx_head hd = amx_head(q, k, v, b, h);
        bwd_rows_ctx ctx = {lse + bh * Tq, key_pad ? key_pad + b * Tk : NULL, Tk, causal, scale};
        cg_attn_amx_bwd_head(ws + (size_t)omp_get_thread_num() * each, &hd, at4(g, b, h),
                             g->strides[2], qb, causal ? QB : 0, bwd_row, &ctx,
                             gq ? at4(gq, b, h) : NULL, gq ? gq->strides[2] : 0,
                             gk ? at4(gk, b, h) : NULL, gk ? gk->strides[2] : 0,
                             gv ? at4(gv, b, h) : NULL, gv ? gv->strides[2] : 0);
    }
    cg_free(ws);
    return true;
}

bool cg_k_attention_needs_out(const cg_tensor *k, const cg_tensor *saved)
{
    return k && saved && saved->ndim == 3 && k->ndim == 4 && k->shape[2] > KB;
}

static cg_tensor *attention_fwd(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                bool causal, const uint8_t *key_pad, cg_tensor **saved,
                                cg_tensor **weights);

cg_tensor *cg_k_attention(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, bool causal,
                          const cg_tensor *key_pad, cg_tensor **saved, cg_tensor **weights)
{
    if (weights)
        *weights = NULL;
    if (saved)
        *saved = NULL;
    if (!check_qkv("attention", q, k, v))
        return NULL;
    cg_tensor *kp;
    if (!key_pad_arg("attention", key_pad, q->shape[0], k->shape[2], &kp))
        return NULL;
    cg_tensor *out = attention_fwd(q, k, v, causal, kp ? (const uint8_t *)cg_data_bool(kp) : NULL,
                                   saved, weights);
    cg_release(kp);
    return out;
}

static cg_tensor *attention_fwd(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                bool causal, const uint8_t *key_pad, cg_tensor **saved,
                                cg_tensor **weights)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2], BH = B * H;
    const bool degen = Tq == 0 || Tk == 0 || dh == 0 || BH == 0;
    const cg_gemm_path path = cg_precision_path(cg_get_matmul_precision());
    const bool keep = keeps_weights(cg_get_matmul_precision() == CG_PRECISION_BF16, Tk);
    /* in bf16 the weights are kept in bf16, as autocast's softmax of
     * bf16 scores keeps them: the products read them so rounded anyway */
    const bool pbf = keep && cg_get_matmul_precision() == CG_PRECISION_BF16;
    cg_tensor *out = heads_out(B, H, Tq, dh, false);
    /* the log-sum-exps, unless the weights are kept (the backward and
     * the weights then need none) */
    cg_tensor *lse = keep ? NULL : cg_empty(CG_SHAPE(B, H, Tq));
    cg_tensor *P = keep ? cg_empty_dtype(pbf ? CG_BF16 : CG_F32, CG_SHAPE(B, H, Tq, Tk)) : NULL;
    if (!out || (!keep && !lse) || (keep && !P)) {
        cg_release_all(3, out, lse, P);
        return NULL;
    }
    if (degen) {
        /* degenerate: no keys gives NaN rows (softmax of nothing), as PyTorch */
        if (lse)
            cg_fill_(lse, NAN);
        cg_fill_(out, Tk == 0 ? NAN : 0.0f);
        if (P)
            cg_fill_(P, NAN);
    } else {
        /* divide (not multiply by the reciprocal) to round as scores / sqrt(dh) */
        const float scale = (float)sqrt((double)dh);
        const int nt = cg_get_num_threads();
        const int64_t ld = Tk < KB ? Tk : KB;
        /* within one key block beyond PKEEP_BF16 keys on AMX: its tiles */
        const bool amx = !keep && amx_fits(path, q, k, v, NULL) && out->strides[3] == 1;
        const int64_t qb = tile_rows(causal, keep, Tq, BH);
        /* a tile's scores: QB x ld, or (weights kept in bf16) its rows */
        const int64_t ns = pbf ? qb * Tk : QB * ld;
        float *scratch = (keep && !pbf) || amx ? NULL : thread_scratch(nt, ns);
        int32_t *kmask = key_pad ? key_masks(key_pad, B * Tk) : NULL;
        bool ok = ((keep && !pbf) || amx || scratch) && (!key_pad || kmask);
        const int64_t nqb = (Tq + qb - 1) / qb, items = BH * nqb;
        cg_shares sh;
        float *lp = keep ? NULL : cg_data(lse), *pp = keep && !pbf ? cg_data(P) : NULL;
        uint16_t *pb = pbf ? cg_data_bf16(P) : NULL;
        if (ok && amx) {
            ok = fwd_amx(q, k, v, out, causal, kmask, scale, qb, lp, nt);
        } else if (ok) {
            cg_shares_init(&sh, items, nt);
#pragma omp parallel if (items > 1 && BH * Tq * Tk * dh > 32768) num_threads(nt)
            for (int64_t it; (it = cg_shares_next(&sh, omp_get_thread_num())) >= 0;) {
                const int64_t bh = it / nqb, i0 = it % nqb * qb, b = bh / H;
                float *S = keep && !pbf ? pp + (bh * Tq + i0) * Tk
                                        : scratch + (int64_t)omp_get_thread_num() * ns;
                fwd_tile(path, q, k, v, out, b, bh % H, i0, min64(i0 + qb, Tq), causal,
                         kmask ? kmask + b * Tk : NULL, scale, S, keep ? Tk : ld, keep,
                         keep ? NULL : lp + bh * Tq, pbf ? pb + (bh * Tq + i0) * Tk : NULL);
            }
            cg_shares_free(&sh);
        }
        cg_free(scratch);
        cg_free(kmask);
        if (!ok) {
            cg_release_all(3, out, lse, P);
            cg_set_error("attention: out of memory");
            return NULL;
        }
    }
    if (weights) {
        *weights = keep    ? (pbf ? cg_k_to(P, CG_F32) : cg_retain(P))
                   : degen ? cg_full(CG_SHAPE(B, H, Tq, Tk), NAN)
                           : attention_weights(q, k, causal, key_pad, cg_data(lse));
        if (!*weights) {
            cg_release_all(3, out, lse, P);
            return NULL;
        }
    }
    if (saved)
        *saved = keep ? cg_retain(P) : cg_retain(lse);
    cg_release_all(2, lse, P);
    return out;
}

/* dq, dk, dv of one (batch, head), in tiles of qb query rows. Pb and Db:
 * Tq x ld scratch each, ld = min(Tk, KB); Dl: Tq floats. Ps: the kept
 * weights [Tq, Tk] (then Tk <= PKEEP = ld), floats or (Ps.bf) bf16, or
 * Ps.p NULL to recompute them from lse; kept weights use Pb only to widen
 * a bf16 row for the softmax's backward (the products read them as they
 * are). bf (bf16 products; NULL in fp32): Tq x dh + Tq
 * x ld bf16 scratch, where dO and dS are rounded once each for the two
 * products that read them (each product would round its own copy while
 * packing, from twice the bytes: the same bits). */
static void bwd_head(cg_gemm_path path, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                     const cg_tensor *o, head_op Ps, const float *lse, const cg_tensor *g,
                     bool causal, const uint8_t *kpad, int64_t b, int64_t h, const cg_tensor *gq,
                     const cg_tensor *gk, const cg_tensor *gv, float *Pb, float *Db, int64_t ld,
                     float *Dl, int64_t qb, uint16_t *bf)
{
    const int64_t Tq = q->shape[2], dh = q->shape[3], Tk = k->shape[2];
    const float scale = (float)sqrt((double)dh);
    const head_op qa = head_at(q, b, h), ka = head_at(k, b, h), va = head_at(v, b, h);
    const float *gp = at4(g, b, h), *opp = o ? at4(o, b, h) : NULL;
    float *dqp = gq ? at4(gq, b, h) : NULL, *dkp = gk ? at4(gk, b, h) : NULL;
    float *dvp = gv ? at4(gv, b, h) : NULL;
    const int64_t qr = q->strides[2], qc = q->strides[3], kr = k->strides[2], kc = k->strides[3];
    const int64_t vr = v->strides[2], vc = v->strides[3], gr = g->strides[2], gc = g->strides[3];
    /* dO as the products read it: g, or its bf16 copy (rows dh apart) */
    head_op go = {gp, false};
    int64_t gor = gr, goc = gc;
    uint16_t *dbf = NULL; /* dS's bf16 copy (rows ld apart) */
    if (bf && gc == 1) {
        cg_bf16_round_runs(dh, Tq, gr, gp, dh, bf);
        go = (head_op){bf, true};
        gor = dh;
        goc = 1;
        dbf = bf + Tq * dh;
    }
    /* D_i = <dO_i, O_i> over several key blocks (with kept weights or
     * one block: <P_i, dP_i>, below) */
    const bool one = Tk <= KB;
    for (int64_t i = 0; !Ps.p && !one && i < Tq; i++) {
        const float *oi = opp + i * o->strides[2];
        if (gc == 1 && o->strides[3] == 1) {
            Dl[i] = cg_attn_dot(gp + i * gr, oi, dh);
        } else {
            double acc = 0.0;
            for (int64_t c = 0; c < dh; c++)
                acc += (double)gp[i * gr + c * gc] * oi[c * o->strides[3]];
            Dl[i] = (float)acc;
        }
    }
    const head_op Pbase = Ps.p ? Ps : (head_op){Pb, false};
    for (int64_t j0 = 0; j0 < Tk; j0 += KB) {
        const int64_t j1 = min64(j0 + KB, Tk), kn = j1 - j0;
        const int64_t is = causal ? j0 : 0; /* rows before j0 see none of these keys */
        if (is >= Tq)
            break; /* no query sees these keys: their gradients stay zero */
        for (int64_t i0 = is; i0 < Tq; i0 += qb) {
            const int64_t i1 = min64(i0 + qb, Tq), rows = i1 - i0;
            const int64_t ke1 = min64(key_end(causal, i1 - 1, Tk), j1) - j0; /* keys read */
            /* columns the dk/dv products below read for these rows */
            const int64_t kz = causal ? min64(kn, (ke1 + QB - 1) / QB * QB) : kn;
            float *P = Pb + (i0 - is) * ld, *D = Db + (i0 - is) * ld;
            /* S = q k^T (unless kept), dP = dO v^T over the tile */
            if (!Ps.p)
                mm_heads(path, rows, ke1, dh, from(qa, i0 * qr), qa.bf, qr, qc, from(ka, j0 * kr),
                         ka.bf, kc, kr, 0.0f, P, ld, 1);
            mm_heads(path, rows, ke1, dh, from(go, i0 * gor), go.bf, gor, goc, from(va, j0 * vr),
                     va.bf, vc, vr, 0.0f, D, ld, 1);
            for (int64_t i = i0; i < i1; i++) {
                int64_t ke = min64(key_end(causal, i, Tk), j1) - j0;
                float *dr = D + (i - i0) * ld;
                if (Ps.p) {
                    const float *pr = Ps.bf ? Pb : (const float *)from(Ps, i * ld);
                    if (Ps.bf)
                        cg_attn_widen_row((const uint16_t *)from(Ps, i * ld), ke, Pb);
                    cg_attn_dsoft_row(pr, dr, ke, kz, cg_attn_dot(pr, dr, ke), scale);
                } else if (one) {
                    float *pr = P + (i - i0) * ld;
                    cg_attn_prob_row(pr, ke, kz, scale, kpad, lse[i]);
                    cg_attn_dsoft_row(pr, dr, ke, kz, cg_attn_dot(pr, dr, ke), scale);
                } else {
                    cg_attn_prob_dsoft_row(P + (i - i0) * ld, dr, ke, kz, scale,
                                           kpad ? kpad + j0 : NULL, lse[i], Dl[i]);
                }
            }
            /* the columns the products below read, [0, kz), rounded once */
            if (dbf)
                cg_bf16_round_runs(kz, rows, ld, D, ld, dbf + (i0 - is) * ld);
            /* dq[i0:i1] (+)= dS k[j0:j0+ke1] */
            if (dqp)
                mm_heads(path, rows, dh, ke1, dbf ? (const void *)(dbf + (i0 - is) * ld) : D,
                         dbf != NULL, ld, 1, from(ka, j0 * kr), ka.bf, kr, kc, j0 ? 1.0f : 0.0f,
                         dqp + i0 * gq->strides[2], gq->strides[2], gq->strides[3]);
        }
        /* keys in sub-blocks: key j gets rows i >= j (causal) or all rows */
        const int64_t sb = causal ? QB : kn;
        for (int64_t s0 = j0; s0 < j1; s0 += sb) {
            const int64_t s1 = min64(s0 + sb, j1), r0 = causal ? s0 : 0;
            if (r0 >= Tq)
                break;
            const int64_t off = (r0 - is) * ld + (s0 - j0);
            const void *P = from(Pbase, off);
            const void *D = dbf ? (const void *)(dbf + off) : (const void *)(Db + off);
            /* dv[s0:s1] = P^T dO[r0:], dk[s0:s1] = dS^T q[r0:] */
            if (dvp)
                mm_heads(path, s1 - s0, dh, Tq - r0, P, Pbase.bf, 1, ld, from(go, r0 * gor), go.bf,
                         gor, goc, 0.0f, dvp + s0 * gv->strides[2], gv->strides[2], gv->strides[3]);
            if (dkp)
                mm_heads(path, s1 - s0, dh, Tq - r0, D, dbf != NULL, 1, ld, from(qa, r0 * qr),
                         qa.bf, qr, qc, 0.0f, dkp + s0 * gk->strides[2], gk->strides[2],
                         gk->strides[3]);
        }
    }
}

static bool attention_bwd(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                          const cg_tensor *out, const cg_tensor *saved, const cg_tensor *g,
                          bool causal, const uint8_t *key_pad, cg_tensor **dq, cg_tensor **dk,
                          cg_tensor **dv);

bool cg_k_attention_backward(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                             const cg_tensor *out, const cg_tensor *saved, const cg_tensor *g,
                             bool causal, const cg_tensor *key_pad, cg_tensor **dq, cg_tensor **dk,
                             cg_tensor **dv)
{
    if (dq)
        *dq = NULL;
    if (dk)
        *dk = NULL;
    if (dv)
        *dv = NULL;
    if (!check_qkv("attention backward", q, k, v))
        return false;
    if (!saved || !g || (!out && cg_k_attention_needs_out(k, saved)))
        return cg_error_null_input("cg_k_attention_backward");
    if (!cg_f32_args("attention backward", 2, (const cg_tensor *[]){out, g}))
        return false;
    cg_tensor *kp;
    if (!key_pad_arg("attention backward", key_pad, q->shape[0], k->shape[2], &kp))
        return false;
    bool ok = attention_bwd(q, k, v, out, saved, g, causal,
                            kp ? (const uint8_t *)cg_data_bool(kp) : NULL, dq, dk, dv);
    cg_release(kp);
    return ok;
}

static bool attention_bwd(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                          const cg_tensor *out, const cg_tensor *saved, const cg_tensor *g,
                          bool causal, const uint8_t *key_pad, cg_tensor **dq, cg_tensor **dk,
                          cg_tensor **dv)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2];
    const bool kept = saved->ndim == 4; /* saved: the weights [B,H,Tq,Tk], else lse [B,H,Tq] */
    /* the weights in float32 or bfloat16, the log-sum-exps in float32 */
    if (!(saved->dtype == CG_F32 || (kept && saved->dtype == CG_BF16))) {
        cg_set_error("attention backward: saved state is %s, expected float32%s",
                     cg_dtype_name(saved->dtype), kept ? " or bfloat16 weights" : "");
        return false;
    }
    if (!cg_same_shape(g, q) || (out && !cg_same_shape(out, q)) || saved->ndim != (kept ? 4 : 3) ||
        saved->shape[0] != B || saved->shape[1] != H || saved->shape[2] != Tq ||
        (kept && (saved->shape[3] != Tk || Tk > PKEEP)) || !cg_is_contiguous(saved)) {
        char a[96], b[96], c[96];
        cg_set_error("attention backward: gradient %s, output %s or saved state %s do not "
                     "match q/k",
                     cg_shape_str(g, a, sizeof a), cg_shape_str(out, b, sizeof b),
                     cg_shape_str(saved, c, sizeof c));
        return false;
    }
    /* every gradient element is written by a product below, except keys no
     * query sees (causal with Tk > Tq) and degenerate sizes: zero-fill then */
    const bool zero = causal ? Tk > Tq : false;
    const bool degen = Tq == 0 || Tk == 0 || dh == 0 || B * H == 0;
    cg_tensor *gq = heads_out(B, H, Tq, dh, degen);
    cg_tensor *gk = heads_out(B, H, Tk, dh, degen || zero);
    cg_tensor *gv = heads_out(B, H, Tk, dh, degen || zero);
    const int64_t BH = B * H, kb = Tk < KB ? Tk : KB;
    const int nt = cg_get_num_threads();
    const bool pbf = saved->dtype == CG_BF16;
    /* recomputed P tiles, or (kept in bf16) a row widened */
    const int64_t np = kept ? (pbf ? kb : 0) : Tq * kb;
    /* bf16 products: dO's and dS's bf16 copies (bwd_head), in floats */
    const bool bf = cg_get_matmul_precision() == CG_PRECISION_BF16;
    const int64_t nbf = bf ? (Tq * dh + Tq * kb + 1) / 2 : 0;
    const int64_t per = np + Tq * kb + Tq + nbf; /* P and dS tiles, D, the copies */
    const cg_gemm_path path = cg_precision_path(cg_get_matmul_precision());
    const bool amx = !degen && !kept && amx_fits(path, q, k, v, g);
    float *scratch = amx ? NULL : thread_scratch(nt, per);
    if (!gq || !gk || !gv || (!amx && !scratch)) {
        cg_release_all(3, gq, gk, gv);
        cg_free(scratch);
        cg_set_error("attention backward: out of memory");
        return false;
    }
    if (amx) {
        if (!bwd_amx(q, k, v, cg_data(saved), g, causal, key_pad, tile_rows(causal, false, Tq, BH),
                     dq ? gq : NULL, dk ? gk : NULL, dv ? gv : NULL, nt)) {
            cg_release_all(3, gq, gk, gv);
            cg_set_error("attention backward: out of memory");
            return false;
        }
    } else if (!degen) {
        const head_op sd = {cg_data_ptr(saved), pbf};
        const int64_t qb = tile_rows(causal, kept, Tq, BH);
        cg_shares sh;
        cg_shares_init(&sh, BH, nt);
#pragma omp parallel if (BH > 1 && BH * Tq * Tk * dh > 32768) num_threads(nt)
        for (int64_t bh; (bh = cg_shares_next(&sh, omp_get_thread_num())) >= 0;) {
            const int64_t b = bh / H;
            float *w = scratch + (int64_t)omp_get_thread_num() * per;
            bwd_head(path, q, k, v, out,
                     kept ? (head_op){from(sd, bh * Tq * Tk), pbf} : (head_op){NULL, false},
                     kept ? NULL : (const float *)sd.p + bh * Tq, g, causal,
                     key_pad ? key_pad + b * Tk : NULL, b, bh % H, dq ? gq : NULL, dk ? gk : NULL,
                     dv ? gv : NULL, w, w + np, kb, w + np + Tq * kb, qb,
                     bf ? (uint16_t *)(w + np + Tq * kb + Tq) : NULL);
        }
        cg_shares_free(&sh);
    }
    cg_free(scratch);
    if (dq)
        *dq = gq;
    else
        cg_release(gq);
    if (dk)
        *dk = gk;
    else
        cg_release(gk);
    if (dv)
        *dv = gv;
    else
        cg_release(gv);
    return true;
}
