/* The fused attention's backward (core/attention.c describes the scheme):
 * one (batch, head) pair per thread, in the forward's tiles of query rows,
 * through the GEMM or (one key block, AMX) on tiles of its own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/attention_impl.h"
#include "core/attention_rows.h"
#include "core/ops.h"
#include "core/upcast.h"

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

/* bwd_amx's heads, each in its thread's workspace */
static void bwd_amx_heads(int64_t bh0, int64_t bh1, int thread, const void *ctx)
{
    const heads_job *j = ctx;
    const cg_tensor *g = j->g, *gq = j->gq, *gk = j->gk, *gv = j->gv;
    const int64_t H = j->q->shape[1], Tq = j->q->shape[2], Tk = j->k->shape[2];
    for (int64_t bh = bh0; bh < bh1; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const cg_attn_amx_head hd = cg_attn_amx_head_of(j->q, j->k, j->v, b, h);
        bwd_rows_ctx rows = {j->lse + bh * 2 * Tq, j->key_pad ? j->key_pad + b * Tk : NULL, Tk,
                             j->causal, j->scale};
        cg_attn_amx_bwd_head((char *)j->scratch + (size_t)thread * j->each, &hd, at4(g, b, h),
                             g->strides[2], j->qb, j->causal ? QB : 0, bwd_row, &rows,
                             gq ? at4(gq, b, h) : NULL, gq ? gq->strides[2] : 0,
                             gk ? at4(gk, b, h) : NULL, gk ? gk->strides[2] : 0,
                             gv ? at4(gv, b, h) : NULL, gv ? gv->strides[2] : 0);
    }
}

/* attention_bwd from the log-sum-exps (one key block) on AMX tiles, one
 * (batch, head) per thread as bwd_head, with its bits; the gradients not
 * wanted are NULL. False when out of memory. */
static bool bwd_amx(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v, const float *lse,
                    const cg_tensor *g, bool causal, const uint8_t *key_pad, int64_t qb,
                    const cg_tensor *gq, const cg_tensor *gk, const cg_tensor *gv, int nt)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2];
    size_t each;
    char *ws = cg_attn_amx_scratch(nt, cg_attn_amx_bwd_bytes(Tq, Tk, dh), &each);
    if (!ws)
        return false;
    const heads_job job = {.q = q,
                           .k = k,
                           .v = v,
                           .g = g,
                           .gq = gq,
                           .gk = gk,
                           .gv = gv,
                           .causal = causal,
                           .scale = (float)sqrt((double)dh),
                           .key_pad = key_pad,
                           .qb = qb,
                           .lse = lse,
                           .scratch = ws,
                           .each = each};
    cg_shares_run(B * H, 1, heads_team(nt, q, Tk), bwd_amx_heads, &job);
    cg_free(ws);
    return true;
}

bool cg_k_attention_needs_out(const cg_tensor *k, const cg_tensor *saved)
{
    return k && saved && saved->ndim == 3 && k->ndim == 4 && k->shape[2] > KB;
}

/* dq, dk, dv of one (batch, head), in tiles of qb query rows. Pb and Db:
 * Tq x ld scratch each, ld = min(Tk, KB); Dl: Tq floats. Ps: the kept
 * weights [Tq, Tk] (then Tk <= PKEEP = ld), floats or (Ps.bf) bf16, or
 * Ps.p NULL to recompute them from lse; kept weights use Pb only to widen
 * a bf16 row for the softmax's backward (the products read them as they
 * are). bf (bf16 products; NULL in fp32): Tq x ld bf16 scratch, where dS
 * is rounded once for the two products that read it, as g16 (g rounded
 * to bf16 once for all the heads, rows adjacent) is dO for its two (each
 * product would round its own copy while packing, from twice the bytes:
 * the same bits). */
static void bwd_head(atomic_bool *failed, cg_gemm_path path, const cg_tensor *q, const cg_tensor *k,
                     const cg_tensor *v, const cg_tensor *o, head_op Ps, const float *lse,
                     const cg_tensor *g, const cg_tensor *g16, bool causal, const uint8_t *kpad,
                     int64_t b, int64_t h, const cg_tensor *gq, const cg_tensor *gk,
                     const cg_tensor *gv, float *Pb, float *Db, int64_t ld, float *Dl, int64_t qb,
                     uint16_t *bf)
{
    const int64_t Tq = q->shape[2], dh = q->shape[3], Tk = k->shape[2];
    const float scale = (float)sqrt((double)dh);
    const int64_t hk = kv_head(q, k, h);
    const head_op qa = head_at(q, b, h), ka = head_at(k, b, hk), va = head_at(v, b, hk);
    const float *gp = at4(g, b, h), *opp = o ? at4(o, b, h) : NULL;
    float *dqp = gq ? at4(gq, b, h) : NULL, *dkp = gk ? at4(gk, b, h) : NULL;
    float *dvp = gv ? at4(gv, b, h) : NULL;
    const int64_t qr = q->strides[2], qc = q->strides[3], kr = k->strides[2], kc = k->strides[3];
    const int64_t vr = v->strides[2], vc = v->strides[3], gr = g->strides[2], gc = g->strides[3];
    /* dO as the products read it: g, or (bf16) this head of its copy */
    head_op go = {gp, false};
    int64_t gor = gr, goc = gc;
    uint16_t *dbf = NULL; /* dS's bf16 copy (rows ld apart) */
    if (bf) {
        go = head_at(g16, b, h);
        gor = g16->strides[2];
        goc = g16->strides[3];
        dbf = bf;
    }
    /* D_i = <dO_i, O_i> over several key blocks (with kept weights or
     * one block: <P_i, dP_i>, below), from the dO that dP = dO v^T reads
     * (in bf16 its rounding: from g instead, each row's dS = P (dP - D)
     * would no longer sum to 0) */
    const bool one = Tk <= KB;
    for (int64_t i = 0; !Ps.p && !one && i < Tq; i++) {
        const float *oi = opp + i * o->strides[2];
        if (go.bf) {
            const uint16_t *gi = (const uint16_t *)go.p + i * gor;
            double acc = 0.0;
            for (int64_t c = 0; c < dh; c++)
                acc += (double)cg_bf16_to_f32(gi[c * goc]) * oi[c * o->strides[3]];
            Dl[i] = (float)acc;
        } else if (gc == 1 && o->strides[3] == 1) {
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
                cg_attn_mm(failed, path, rows, ke1, dh, from(qa, i0 * qr), qa.bf, qr, qc,
                           from(ka, j0 * kr), ka.bf, kc, kr, 0.0f, P, ld, 1);
            cg_attn_mm(failed, path, rows, ke1, dh, from(go, i0 * gor), go.bf, gor, goc,
                       from(va, j0 * vr), va.bf, vc, vr, 0.0f, D, ld, 1);
            /* kept in bf16 and dS rounded, on AVX512_BF16: each row in
             * registers from dP to dS's copy */
            const bool rows16 = Ps.p && Ps.bf && dbf && cg_bf16_native();
            for (int64_t i = i0; i < i1; i++) {
                int64_t ke = min64(key_end(causal, i, Tk), j1) - j0;
                float *dr = D + (i - i0) * ld;
                if (rows16 && cg_attn_dsoft_row_bf16((const uint16_t *)from(Ps, i * ld), dr, ke, kz,
                                                     scale, dbf + (i - is) * ld))
                    continue;
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
                                           kpad ? kpad + j0 : NULL, lse[i], lse[Tq + i], Dl[i]);
                }
                if (rows16) /* this row's copy, as the tile's pass below makes it */
                    cg_bf16_round_run(kz, dr, dbf + (i - is) * ld);
            }
            /* the columns the products below read, [0, kz), rounded once */
            if (dbf && !rows16)
                cg_bf16_round_runs(kz, rows, ld, D, ld, dbf + (i0 - is) * ld);
            /* dq[i0:i1] (+)= dS k[j0:j0+ke1] */
            if (dqp)
                cg_attn_mm(failed, path, rows, dh, ke1,
                           dbf ? (const void *)(dbf + (i0 - is) * ld) : D, dbf != NULL, ld, 1,
                           from(ka, j0 * kr), ka.bf, kr, kc, j0 ? 1.0f : 0.0f,
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
                cg_attn_mm(failed, path, s1 - s0, dh, Tq - r0, P, Pbase.bf, 1, ld,
                           from(go, r0 * gor), go.bf, gor, goc, 0.0f, dvp + s0 * gv->strides[2],
                           gv->strides[2], gv->strides[3]);
            if (dkp)
                cg_attn_mm(failed, path, s1 - s0, dh, Tq - r0, D, dbf != NULL, 1, ld,
                           from(qa, r0 * qr), qa.bf, qr, qc, 0.0f, dkp + s0 * gk->strides[2],
                           gk->strides[2], gk->strides[3]);
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
    if (!cg_attn_check_qkv("attention backward", q, k, v))
        return false;
    if (!saved || !g || (!out && cg_k_attention_needs_out(k, saved)))
        return cg_error_null_input("cg_k_attention_backward");
    if (!cg_f32_args("attention backward", 2, (const cg_tensor *[]){out, g}))
        return false;
    cg_tensor *kp;
    if (!cg_attn_key_pad_arg("attention backward", key_pad, q->shape[0], k->shape[2], &kp))
        return false;
    bool ok = attention_bwd(q, k, v, out, saved, g, causal,
                            kp ? (const uint8_t *)cg_data_bool(kp) : NULL, dq, dk, dv);
    cg_release(kp);
    return ok;
}

/* attention_bwd's heads, each in its thread's scratch of `each` floats:
 * P (np floats) and dS tiles, D, the bf16 copies (bwd_head) */
static void bwd_heads(int64_t bh0, int64_t bh1, int thread, const void *ctx)
{
    const heads_job *j = ctx;
    const int64_t H = j->q->shape[1], Tq = j->q->shape[2], Tk = j->k->shape[2];
    const int64_t kb = min64(Tk, KB), np = j->keep ? (j->saved.bf ? kb : 0) : Tq * kb;
    float *w = (float *)j->scratch + (int64_t)thread * (int64_t)j->each;
    for (int64_t bh = bh0; bh < bh1; bh++) {
        const int64_t b = bh / H;
        bwd_head(j->failed, j->path, j->q, j->k, j->v, j->out,
                 j->keep ? (head_op){from(j->saved, bh * Tq * Tk), j->saved.bf}
                         : (head_op){NULL, false},
                 j->keep ? NULL : (const float *)j->saved.p + bh * 2 * Tq, j->g, j->g16, j->causal,
                 j->key_pad ? j->key_pad + b * Tk : NULL, b, bh % H, j->gq, j->gk, j->gv, w, w + np,
                 kb, w + np + Tq * kb, j->qb, j->bf16 ? (uint16_t *)(w + np + Tq * kb + Tq) : NULL);
    }
}

/* Grouped-query attention's dk and dv: the query heads' rows [B,H,T,dh]
 * summed over each group of H/Hkv heads, in head order, into their key or
 * value head's; a chunk of rows a thread (the same bits for any team) */
typedef struct {
    const cg_tensor *all;
    cg_tensor *sum;
} groups_job;

static void groups_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const groups_job *j = ctx;
    const int64_t Hk = j->sum->shape[1], T = j->sum->shape[2], dh = j->sum->shape[3];
    const int64_t G = j->all->shape[1] / Hk;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (Hk * T), hk = r / T % Hk, t = r % T;
        float *restrict d = at4(j->sum, b, hk) + t * j->sum->strides[2];
        const float *restrict s = at4(j->all, b, hk * G) + t * j->all->strides[2];
        for (int64_t c = 0; c < dh; c++)
            d[c] = s[c];
        for (int64_t gi = 1; gi < G; gi++) {
            s = at4(j->all, b, hk * G + gi) + t * j->all->strides[2];
            for (int64_t c = 0; c < dh; c++)
                d[c] += s[c];
        }
    }
}

/* all (the query heads' gradients) summed into Hk heads; all released */
static cg_tensor *sum_groups(cg_tensor *all, int64_t Hk)
{
    const int64_t B = all->shape[0], T = all->shape[2], dh = all->shape[3];
    cg_tensor *sum = cg_attn_heads_out(B, Hk, T, dh, false);
    if (sum && B * Hk * T * dh > 0) {
        const groups_job j = {all, sum};
        const int64_t rows = B * Hk * T;
        cg_shares_run(rows, cg_shares_rows(dh * (all->shape[1] / Hk)),
                      cg_shares_team(rows * dh * all->shape[1] / Hk > 65536), groups_rows, &j);
    }
    cg_release(all);
    return sum;
}

static bool attention_bwd(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                          const cg_tensor *out, const cg_tensor *saved, const cg_tensor *g,
                          bool causal, const uint8_t *key_pad, cg_tensor **dq, cg_tensor **dk,
                          cg_tensor **dv)
{
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2];
    /* saved: the weights [B,H,Tq,Tk], else the log-sum-exps [B,H,2 Tq] */
    const bool kept = saved->ndim == 4;
    /* the weights in float32 or bfloat16, the log-sum-exps in float32 */
    if (!(saved->dtype == CG_F32 || (kept && saved->dtype == CG_BF16))) {
        cg_set_error("attention backward: saved state is %s, expected float32%s",
                     cg_dtype_name(saved->dtype), kept ? " or bfloat16 weights" : "");
        return false;
    }
    if (!cg_same_shape(g, q) || (out && !cg_same_shape(out, q))) {
        char a[96], b[96], c[96];
        cg_set_error("attention backward: gradient %s and output %s must have q's shape %s",
                     cg_shape_str(g, a, sizeof a), out ? cg_shape_str(out, b, sizeof b) : "(none)",
                     cg_shape_str(q, c, sizeof c));
        return false;
    }
    if (saved->ndim != (kept ? 4 : 3) || saved->shape[0] != B || saved->shape[1] != H ||
        saved->shape[2] != (kept ? Tq : 2 * Tq) ||
        (kept && (saved->shape[3] != Tk || Tk > PKEEP)) || !cg_is_contiguous(saved)) {
        char a[96], b[96], c[96];
        cg_set_error("attention backward: saved state %s is neither the weights %s (kept up to %d "
                     "keys; k has %lld) nor the log-sum-exps %s (two floats a row), contiguous",
                     cg_shape_str(saved, a, sizeof a),
                     cg_shape_str_n(CG_SHAPE(B, H, Tq, Tk), b, sizeof b), PKEEP, (long long)Tk,
                     cg_shape_str_n(CG_SHAPE(B, H, 2 * Tq), c, sizeof c));
        return false;
    }
    /* every gradient element is written by a product below, except keys no
     * query sees (causal with Tk > Tq) and degenerate sizes: zero-fill then */
    const bool zero = causal ? Tk > Tq : false;
    const bool degen = Tq == 0 || Tk == 0 || dh == 0 || B * H == 0;
    cg_tensor *gq = cg_attn_heads_out(B, H, Tq, dh, degen);
    cg_tensor *gk = cg_attn_heads_out(B, H, Tk, dh, degen || zero);
    cg_tensor *gv = cg_attn_heads_out(B, H, Tk, dh, degen || zero);
    const int64_t BH = B * H, kb = Tk < KB ? Tk : KB;
    const int nt = cg_get_num_threads();
    const bool pbf = saved->dtype == CG_BF16;
    /* recomputed P tiles, or (kept in bf16) a row widened */
    const int64_t np = kept ? (pbf ? kb : 0) : Tq * kb;
    /* bf16 products: dS's bf16 copy (bwd_head), in floats */
    const bool bf = cg_get_matmul_precision() == CG_PRECISION_BF16;
    const int64_t nbf = bf ? (Tq * kb + 1) / 2 : 0;
    const int64_t per = np + Tq * kb + Tq + nbf; /* P and dS tiles, D, the copies */
    const cg_gemm_path path = cg_precision_path(cg_get_matmul_precision());
    const bool amx = !degen && !kept && cg_attn_amx_fits(path, q, k, v, g);
    float *scratch = amx ? NULL : thread_scratch(nt, per);
    /* bf16 products: dO rounded once for all the heads (g's strides, or
     * contiguous: its rows' elements adjacent), in one pass over g split
     * among the threads; each head rounding its own rows (4 dh bytes of
     * each, a call a row) cost 0.9% of a seq2seq base step (Zen 4) */
    const bool round_g = bf && !amx && !degen; /* bwd_heads runs, in bf16 */
    cg_tensor *g16 = NULL;
    if (round_g) {
        cg_tensor *gc = g->strides[3] == 1 ? cg_retain((cg_tensor *)g) : cg_k_contiguous(g);
        g16 = gc ? cg_k_bf16_operand(gc) : NULL;
        cg_release(gc);
    }
    if (!gq || !gk || !gv || (!amx && !scratch) || (round_g && !g16)) {
        cg_release_all(4, gq, gk, gv, g16);
        cg_free(scratch);
        cg_set_error("attention backward: out of memory");
        return false;
    }
    if (amx) {
        if (!bwd_amx(q, k, v, cg_data(saved), g, causal, key_pad,
                     cg_attn_tile_rows(causal, false, Tq, BH), dq ? gq : NULL, dk ? gk : NULL,
                     dv ? gv : NULL, nt)) {
            cg_release_all(3, gq, gk, gv);
            cg_set_error("attention backward: out of memory");
            return false;
        }
    } else if (!degen) {
        atomic_bool failed = false;
        const heads_job job = {.path = path,
                               .q = q,
                               .k = k,
                               .v = v,
                               .out = out,
                               .g = g,
                               .g16 = g16,
                               .gq = dq ? gq : NULL,
                               .gk = dk ? gk : NULL,
                               .gv = dv ? gv : NULL,
                               .causal = causal,
                               .keep = kept,
                               .key_pad = key_pad,
                               .qb = cg_attn_tile_rows(causal, kept, Tq, BH),
                               .saved = {cg_data_ptr(saved), pbf},
                               .bf16 = bf,
                               .scratch = scratch,
                               .each = (size_t)per,
                               .failed = &failed};
        cg_shares_run(BH, 1, heads_team(nt, q, Tk), bwd_heads, &job);
        if (atomic_load(&failed)) {
            cg_free(scratch);
            cg_release_all(4, gq, gk, gv, g16);
            cg_set_error("attention backward: out of memory for a product's packing buffers");
            return false;
        }
    }
    cg_free(scratch);
    cg_release(g16);
    if (k->shape[1] != H) { /* grouped-query: each group's sum */
        gk = sum_groups(gk, k->shape[1]);
        gv = sum_groups(gv, k->shape[1]);
        if (!gk || !gv) {
            cg_release_all(3, gq, gk, gv);
            cg_set_error("attention backward: out of memory");
            return false;
        }
    }
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
