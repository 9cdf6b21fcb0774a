/* Fused scaled-dot-product attention, forward and backward, in tiles with
 * recomputation (the FlashAttention scheme, as PyTorch's CPU kernel does it).
 *
 * Forward: a work item is one (batch, head) pair and a tile of QB query
 * rows (non-causal attention with kept weights: up to QT rows, see
 * cg_attn_tile_rows); it walks the keys in blocks of KB with an online
 * softmax (a running maximum m and sum l per row: a new block with a
 * larger maximum rescales the sum and the output rows by exp(m_old -
 * m_new)) and keeps only each row's log-sum-exp, lse = m + log(l), as two
 * floats (cg_attn_row_lse: rounded, and the rest, which the weights
 * recomputed over several key blocks need at large scores). When a tile's keys fit in
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
 * on AMX the weights are kept up to PKEEP_BF16 keys
 * only (keeps_weights): beyond, the log-sum-exps, and on AMX, up to KB
 * keys (one block), the products of
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
 * thread count. The backward is core/attention_bwd.c; the row kernels
 * (softmax, online softmax, recomputed weights, the softmax's backward)
 * are core/attention_rows.c's. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/attention_impl.h"
#include "core/attention_rows.h"
#include "core/ops.h"
#include "core/upcast.h"

/* q, k and v are float32 or bfloat16 (the copies bf16 training keeps:
 * attention reads them only in its products, which round them so) */
bool cg_attn_check_qkv(const char *op, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v)
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
    /* k and v may have fewer heads, a divisor of q's: grouped-query attention */
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || q->shape[0] != k->shape[0] ||
        k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0 || !cg_same_shape(k, v) ||
        q->shape[3] != k->shape[3]) {
        char a[96], b[96], c[96];
        cg_set_error("%s: expected q [B,H,Tq,dh], k and v [B,Hkv,Tk,dh] with Hkv dividing H; got "
                     "q %s, k %s, v %s",
                     op, cg_shape_str(q, a, sizeof a), cg_shape_str(k, b, sizeof b),
                     cg_shape_str(v, c, sizeof c));
        return false;
    }
    return true;
}

bool cg_k_attention_check(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v)
{
    return cg_attn_check_qkv("attention", q, k, v);
}

/* A [B,H,T,dh] view over fresh [B,T,H,dh] contiguous storage: the layout
 * the heads merge into without a copy. */
cg_tensor *cg_attn_heads_out(int64_t B, int64_t H, int64_t T, int64_t dh, bool zero)
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
 * on BLIS's default path (CG_BLIS_DEFAULT=1) the kernels of an fp32
 * product depend on its size, and results must not depend on the thread
 * count. */
#define QT 256
#define QT_MIN_BH 16
int64_t cg_attn_tile_rows(bool causal, bool keep, int64_t Tq, int64_t BH)
{
    if (causal || !keep || BH < QT_MIN_BH)
        return QB;
    return Tq < QT ? Tq : QT;
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

/* A product on `path` (the precision of the thread that called the
 * attention, captured before its parallel region: the worker threads do
 * not see the caller's policy, core/gemm.h; single-threaded inside the
 * region), alpha 1, with A and/or B given as head operands, floats or
 * bf16: the bits of the product of the floats they were rounded from */
void cg_attn_mm(atomic_bool *failed, cg_gemm_path path, int64_t m, int64_t n, int64_t k,
                const void *a, bool abf, int64_t rsa, int64_t csa, const void *b, bool bbf,
                int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc, int64_t csc)
{
    const unsigned bf = (abf ? CG_GEMM_A_BF16 : 0) | (bbf ? CG_GEMM_B_BF16 : 0);
    if (!cg_gemm_mixed_path(path, 0, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, bf, beta, c, rsc,
                            csc))
        atomic_store(failed, true);
}

/* One query tile [i0, i1) of one (batch, head): out rows and (unless
 * keep) the log-sum-exps, lse and lse_lo (cg_attn_row_lse); kmask: the batch's key masks (key_masks) or NULL. S is a QB x
 * ld scratch, ld = min(Tk, KB), or (keep) the tile's rows of the kept
 * weights, ld = Tk, whose rows are then completed with zeros to Tk. Pbf
 * (keep in bf16; else NULL): the tile's rows of the kept weights in bf16,
 * Tk apart, S then a scratch of the tile's rows: each row is rounded
 * into Pbf after its softmax, and the product with v reads Pbf (the
 * bits of the product reading S, which rounds S as Pbf holds it). */
static void fwd_tile(atomic_bool *failed, cg_gemm_path path, const cg_tensor *q, const cg_tensor *k,
                     const cg_tensor *v, const cg_tensor *out, int64_t b, int64_t h, int64_t i0,
                     int64_t i1, bool causal, const int32_t *kmask, float scale, float *S,
                     int64_t ld, bool keep, float *lse, float *lse_lo, uint16_t *Pbf)
{
    const int64_t Tk = k->shape[2], dh = q->shape[3];
    const int64_t hk = kv_head(q, k, h);
    const head_op qa = head_at(q, b, h), ka = head_at(k, b, hk), va = head_at(v, b, hk);
    const void *qp = from(qa, i0 * q->strides[2]);
    float *op = at4(out, b, h) + i0 * out->strides[2];
    const int64_t rows = i1 - i0, ors = out->strides[2], ocs = out->strides[3];
    const int64_t kn = key_end(causal, i1 - 1, Tk); /* keys the tile reads */
    if (kn <= KB) { /* one block: the plain softmax, normalised before P v */
        cg_attn_mm(failed, path, rows, kn, dh, qp, qa.bf, q->strides[2], q->strides[3], ka.p, ka.bf,
                   k->strides[3], k->strides[2], 0.0f, S, ld, 1);
        if (Pbf) {
            /* kept in bf16: bf16's own recipe (attention_rows.c), rows in
             * registers to their copies, CG_ATTN_ROWS at a time, on
             * AVX-512; else in floats rounded after (the same bits) */
            for (int64_t g = i0; g < i1; g += CG_ATTN_ROWS) {
                const int n = (int)min64(i1 - g, CG_ATTN_ROWS);
                int64_t ke[CG_ATTN_ROWS];
                for (int r = 0; r < n; r++)
                    ke[r] = key_end(causal, g + r, Tk);
                float *sg = S + (g - i0) * ld;
                uint16_t *pg = Pbf + (g - i0) * Tk;
                if (cg_attn_softmax_rows_bf16r16(n, sg, ld, ke, Tk, scale, kmask, pg, Tk))
                    continue;
                for (int r = 0; r < n; r++) {
                    cg_attn_softmax_row_bf16r(sg + r * ld, ke[r], Tk, scale, kmask, sg + r * ld);
                    cg_bf16_round_run(Tk, sg + r * ld, pg + r * Tk);
                }
            }
        }
        for (int64_t i = i0; i < i1 && !Pbf; i++)
            cg_attn_softmax_row(S + (i - i0) * ld, key_end(causal, i, Tk), keep ? Tk : kn, scale,
                                kmask, keep ? NULL : lse + i, keep ? NULL : lse_lo + i);
        cg_attn_mm(failed, path, rows, dh, kn, Pbf ? (const void *)Pbf : S, Pbf != NULL,
                   Pbf ? Tk : ld, 1, va.p, va.bf, v->strides[2], v->strides[3], 0.0f, op, ors, ocs);
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
        cg_attn_mm(failed, path, rows, j1 - j0, dh, qp, qa.bf, q->strides[2], q->strides[3],
                   from(ka, j0 * k->strides[2]), ka.bf, k->strides[3], k->strides[2], 0.0f, S, ld,
                   1);
        for (int64_t r = 0; r < rows; r++) {
            int64_t ke = min64(key_end(causal, i0 + r, Tk), j1) - j0;
            float alpha = cg_attn_online_row(S + r * ld, ke > 0 ? ke : 0, j1 - j0, scale,
                                             kmask ? kmask + j0 : NULL, &m[r], &l[r]);
            if (alpha != 1.0f)
                for (int64_t c = 0; c < dh; c++)
                    op[r * ors + c * ocs] *= alpha;
        }
        /* out += P v[j0:j1] */
        cg_attn_mm(failed, path, rows, dh, j1 - j0, S, false, ld, 1, from(va, j0 * v->strides[2]),
                   va.bf, v->strides[2], v->strides[3], 1.0f, op, ors, ocs);
    }
    for (int64_t r = 0; r < rows; r++) {
        double inv = 1.0 / l[r]; /* every key masked: 0 * inf = NaN, as PyTorch */
        for (int64_t c = 0; c < dh; c++)
            op[r * ors + c * ocs] = (float)(op[r * ors + c * ocs] * inv);
        lse[i0 + r] = cg_attn_row_lse(m[r], l[r], &lse_lo[i0 + r]);
    }
}

/* attention_weights's heads: the weights of each, from the lse */
static void weights_heads(int64_t bh0, int64_t bh1, int thread, const void *ctx)
{
    const heads_job *j = ctx;
    const cg_tensor *q = j->q, *k = j->k;
    const int64_t H = q->shape[1], Tq = q->shape[2], dh = q->shape[3], Tk = k->shape[2];
    for (int64_t bh = bh0; bh < bh1; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const uint8_t *kpad = j->key_pad ? j->key_pad + b * Tk : NULL;
        float *S = j->P + bh * Tq * Tk;
        for (int64_t i0 = 0; i0 < Tq; i0 += QB) {
            int64_t i1 = min64(i0 + QB, Tq), kn = key_end(j->causal, i1 - 1, Tk);
            const head_op qa = head_at(q, b, h), ka = head_at(k, b, kv_head(q, k, h));
            cg_attn_mm(j->failed, j->path, i1 - i0, kn, dh, from(qa, i0 * q->strides[2]), qa.bf,
                       q->strides[2], q->strides[3], ka.p, ka.bf, k->strides[3], k->strides[2],
                       0.0f, S + i0 * Tk, Tk, 1);
            for (int64_t i = i0; i < i1; i++)
                cg_attn_prob_row(S + i * Tk, key_end(j->causal, i, Tk), Tk, j->scale, kpad,
                                 j->lse[bh * 2 * Tq + i]);
        }
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
    atomic_bool failed = false;
    const heads_job job = {.path = cg_precision_path(cg_get_matmul_precision()),
                           .q = q,
                           .k = k,
                           .causal = causal,
                           .scale = (float)sqrt((double)dh),
                           .key_pad = key_pad,
                           .lse = lse,
                           .P = cg_data(P),
                           .failed = &failed};
    cg_shares_run(BH, 1, cg_shares_team(BH * Tq * Tk * dh > 32768), weights_heads, &job);
    if (atomic_load(&failed)) {
        cg_release(P);
        cg_set_error("attention weights: out of memory for a product's packing buffers");
        return NULL;
    }
    return P;
}

/* The key-padding mask of op: NULL (none) or bool [B, Tk], true = a
 * padding key. *bytes gets a contiguous copy or alias of it (release it;
 * NULL for none). False + error naming the argument, the expected and the
 * given dtype or shape (PyTorch: "expecting key_padding_mask shape of
 * (2, 3), but got torch.Size([1, 3])"). */
bool cg_attn_key_pad_arg(const char *op, const cg_tensor *key_pad, int64_t B, int64_t Tk,
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

/* Whether the weights are kept for the backward: up to PKEEP keys, and so
 * in bf16 precision on the vdpbf16ps kernel, whose rows of kept weights
 * run in registers (cg_attn_softmax_rows_bf16r16, up to CG_ATTN_ROW_KEYS):
 * there charlm base bf16 (256 keys) stepped 2.4% faster than recomputing
 * them, its peak memory 75 MB higher, 0.64 of fp32's (Zen 4). So does the
 * emulation, whose steps then have the kernel's bits at any length (Ice
 * Lake, AVX-512 rows: charlm base level, 0.99 of the step recomputing, 76
 * MB more). On AMX up to PKEEP_BF16, beyond which the backward recomputes
 * them from the log-sum-exps on tiles of its own (core/attention_amx.h) in
 * about the time reading them back took: charlm base bf16 kept its step
 * time and took 105 MB off its peak memory (Xeon). With fewer keys keeping
 * them stays faster (seq2seq base, 96 keys: recomputing took its step 10%
 * longer on AMX). */
#define PKEEP_BF16 128
_Static_assert(CG_ATTN_ROW_KEYS <= PKEEP, "kept bf16 rows beyond PKEEP");
static bool keeps_weights(cg_precision prec, cg_gemm_path path, int64_t Tk)
{
    if (prec != CG_PRECISION_BF16)
        return Tk <= PKEEP;
    return Tk <= (path == CG_GEMM_BF16_AMX ? PKEEP_BF16 : CG_ATTN_ROW_KEYS);
}

/* Whether an attention with log-sum-exps and one key block runs its
 * products on AMX tiles (core/attention_amx.h): the path is AMX and q, k,
 * v (and g) have rows of contiguous elements. */
bool cg_attn_amx_fits(cg_gemm_path path, const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                      const cg_tensor *g)
{
    return k->shape[2] <= KB && q->strides[3] == 1 && k->strides[3] == 1 && v->strides[3] == 1 &&
           (!g || g->strides[3] == 1) && cg_attn_amx_on(path);
}
cg_attn_amx_head cg_attn_amx_head_of(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                     int64_t b, int64_t h)
{
    const int64_t hk = kv_head(q, k, h);
    const head_op qa = head_at(q, b, h), ka = head_at(k, b, hk), va = head_at(v, b, hk);
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
char *cg_attn_amx_scratch(int nt, size_t bytes, size_t *each)
{
    *each = (bytes + 63) / 64 * 64;
    return cg_alloc(*each * (size_t)(nt > 0 ? nt : 1));
}

typedef struct {
    int64_t Tk;
    bool causal;
    float scale;
    const int32_t *kmask;
    float *lse, *lse_lo;
} fwd_rows_ctx;
/* fwd_tile's row: the softmax over the tile's kn keys, with its lse */
static void fwd_row(void *c, int64_t i, float *s, int64_t kn)
{
    const fwd_rows_ctx *x = c;
    cg_attn_softmax_row(s, key_end(x->causal, i, x->Tk), kn, x->scale, x->kmask, x->lse + i,
                        x->lse_lo + i);
}

/* fwd_amx's tiles, in the thread's workspace (which keeps the head it
 * packed last) */
static void fwd_amx_tiles(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    const heads_job *j = ctx;
    const int64_t H = j->q->shape[1], Tq = j->q->shape[2], Tk = j->k->shape[2];
    void *w = (char *)j->scratch + (size_t)thread * j->each;
    for (int64_t it = t0; it < t1; it++) {
        const int64_t bh = it / j->nqb, i0 = it % j->nqb * j->qb, i1 = min64(i0 + j->qb, Tq);
        const int64_t b = bh / H, h = bh % H;
        const cg_attn_amx_head hd = cg_attn_amx_head_of(j->q, j->k, j->v, b, h);
        fwd_rows_ctx rows = {Tk,
                             j->causal,
                             j->scale,
                             j->kmask ? j->kmask + b * Tk : NULL,
                             j->lse_out + bh * 2 * Tq,
                             j->lse_out + bh * 2 * Tq + Tq};
        cg_attn_amx_fwd_head(w, bh, &hd);
        cg_attn_amx_fwd_rows(w, &hd, i0, i1, key_end(j->causal, i1 - 1, Tk), fwd_row, &rows,
                             at4(j->out, b, h) + i0 * j->out->strides[2], j->out->strides[2]);
    }
}

/* attention_fwd's work items (tiles of qb rows, log-sum-exps into lse)
 * on AMX tiles: fwd_tile's bits. False when out of memory. */
static bool fwd_amx(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                    const cg_tensor *out, bool causal, const int32_t *kmask, float scale,
                    int64_t qb, float *lse, int nt)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2], BH = B * H, nqb = (Tq + qb - 1) / qb;
    size_t each;
    char *ws = cg_attn_amx_scratch(nt, cg_attn_amx_fwd_bytes(Tk, dh), &each);
    if (!ws)
        return false;
    for (int t = 0; t < nt; t++)
        cg_attn_amx_fwd_head(ws + (size_t)t * each, -1, NULL);
    const heads_job job = {.q = q,
                           .k = k,
                           .v = v,
                           .out = out,
                           .causal = causal,
                           .scale = scale,
                           .kmask = kmask,
                           .qb = qb,
                           .nqb = nqb,
                           .lse_out = lse,
                           .scratch = ws,
                           .each = each};
    cg_shares_run(BH * nqb, 1, heads_team(nt, q, Tk), fwd_amx_tiles, &job);
    cg_free(ws);
    return true;
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
    if (!cg_attn_check_qkv("attention", q, k, v))
        return NULL;
    cg_tensor *kp;
    if (!cg_attn_key_pad_arg("attention", key_pad, q->shape[0], k->shape[2], &kp))
        return NULL;
    cg_tensor *out = attention_fwd(q, k, v, causal, kp ? (const uint8_t *)cg_data_bool(kp) : NULL,
                                   saved, weights);
    cg_release(kp);
    return out;
}

/* attention_fwd's tiles: S in the kept weights (keep in fp32), else in
 * the thread's scratch of `each` floats */
static void fwd_tiles(int64_t t0, int64_t t1, int thread, const void *ctx)
{
    const heads_job *j = ctx;
    const int64_t H = j->q->shape[1], Tq = j->q->shape[2], Tk = j->k->shape[2];
    const int64_t ld = j->keep ? Tk : min64(Tk, KB);
    for (int64_t it = t0; it < t1; it++) {
        const int64_t bh = it / j->nqb, i0 = it % j->nqb * j->qb, b = bh / H;
        float *S = j->P ? j->P + (bh * Tq + i0) * Tk
                        : (float *)j->scratch + (int64_t)thread * (int64_t)j->each;
        fwd_tile(j->failed, j->path, j->q, j->k, j->v, j->out, b, bh % H, i0, min64(i0 + j->qb, Tq),
                 j->causal, j->kmask ? j->kmask + b * Tk : NULL, j->scale, S, ld, j->keep,
                 j->keep ? NULL : j->lse_out + bh * 2 * Tq,
                 j->keep ? NULL : j->lse_out + bh * 2 * Tq + Tq,
                 j->P16 ? j->P16 + (bh * Tq + i0) * Tk : NULL);
        if (j->out16) { /* the tile's rows of the output, final and in cache */
            const float *op = at4(j->out, b, bh % H) + i0 * j->out->strides[2];
            const int64_t ors = j->out->strides[2];
            cg_bf16_round_runs(j->q->shape[3], min64(j->qb, Tq - i0), ors, op, ors,
                               j->out16 + (op - cg_data(j->out)));
        }
    }
}

static cg_tensor *attention_fwd(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                                bool causal, const uint8_t *key_pad, cg_tensor **saved,
                                cg_tensor **weights)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2], BH = B * H;
    const bool degen = Tq == 0 || Tk == 0 || dh == 0 || BH == 0;
    const cg_precision prec = cg_get_matmul_precision();
    const cg_gemm_path path = cg_precision_path(prec);
    const bool keep = keeps_weights(prec, path, Tk);
    /* in bf16 the weights are kept in bf16, as autocast's softmax of
     * bf16 scores keeps them: the products read them so rounded anyway */
    const bool pbf = keep && prec == CG_PRECISION_BF16;
    cg_tensor *out = cg_attn_heads_out(B, H, Tq, dh, false);
    /* the log-sum-exps, unless the weights are kept (the backward and
     * the weights then need none) */
    cg_tensor *lse = keep ? NULL : cg_empty(CG_SHAPE(B, H, 2 * Tq));
    cg_tensor *P = keep ? cg_empty_dtype(pbf ? CG_BF16 : CG_F32, CG_SHAPE(B, H, Tq, Tk)) : NULL;
    if (!out || (!keep && !lse) || (keep && !P)) {
        cg_release_all(3, out, lse, P);
        return NULL;
    }
    if (degen) {
        /* degenerate: with no keys a row's weights are empty and its
         * output their empty sum, 0 (PyTorch's softmax(q k^T) v), its
         * log-sum-exp -inf; a row with keys that are all masked is NaN.
         * The fills cannot fail: tensors just made here, none of them an
         * op's output (no history) nor freed. */
        if (lse)
            (void)cg_fill_(lse, Tk == 0 ? -INFINITY : NAN);
        (void)cg_fill_(out, 0.0f);
        if (P)
            (void)cg_fill_(P, NAN);
    } else {
        /* divide (not multiply by the reciprocal) to round as scores / sqrt(dh) */
        const float scale = (float)sqrt((double)dh);
        const int nt = cg_get_num_threads();
        const int64_t ld = Tk < KB ? Tk : KB;
        /* within one key block beyond PKEEP_BF16 keys on AMX: its tiles */
        const bool amx = !keep && cg_attn_amx_fits(path, q, k, v, NULL) && out->strides[3] == 1;
        const int64_t qb = cg_attn_tile_rows(causal, keep, Tq, BH);
        /* a tile's scores: QB x ld, or (weights kept in bf16) its rows */
        const int64_t ns = pbf ? qb * Tk : QB * ld;
        float *scratch = (keep && !pbf) || amx ? NULL : thread_scratch(nt, ns);
        int32_t *kmask = key_pad ? key_masks(key_pad, B * Tk) : NULL;
        bool ok = ((keep && !pbf) || amx || scratch) && (!key_pad || kmask);
        const int64_t nqb = (Tq + qb - 1) / qb;
        float *lp = keep ? NULL : cg_data(lse);
        /* bf16 training (q, k and v are the bf16 copies): the output's
         * rounding, which the output projection reads, made tile by tile
         * and kept as the operand of the heads' merged storage */
        cg_tensor *o16 = !amx && q->dtype == CG_BF16 && out->strides[3] == 1
                             ? cg_empty_dtype(CG_BF16, CG_SHAPE(B, Tq, H, dh))
                             : NULL;
        atomic_bool failed = false;
        if (ok && amx) {
            ok = fwd_amx(q, k, v, out, causal, kmask, scale, qb, lp, nt);
        } else if (ok) {
            const heads_job job = {.path = path,
                                   .q = q,
                                   .k = k,
                                   .v = v,
                                   .out = out,
                                   .causal = causal,
                                   .keep = keep,
                                   .scale = scale,
                                   .kmask = kmask,
                                   .qb = qb,
                                   .nqb = nqb,
                                   .lse_out = lp,
                                   .P = keep && !pbf ? cg_data(P) : NULL,
                                   .P16 = pbf ? cg_data_bf16(P) : NULL,
                                   .out16 = o16 ? cg_data_bf16(o16) : NULL,
                                   .scratch = scratch,
                                   .each = (size_t)ns,
                                   .failed = &failed};
            cg_shares_run(BH * nqb, 1, heads_team(nt, q, Tk), fwd_tiles, &job);
            ok = !atomic_load(&failed);
            cg_tensor *merged = o16 ? cg_view_transpose(out, 1, 2) : NULL; /* [B,Tq,H,dh] */
            if (merged)
                cg_k_bf16_operand_keep(merged, o16);
            cg_release(merged);
        }
        cg_release(o16);
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
