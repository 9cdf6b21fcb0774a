/* Fused scaled-dot-product attention: forward and backward kernels.
 *
 * One (batch, head) pair is computed by one OpenMP thread from start to
 * end (BLIS runs single-threaded inside the region), so results are
 * bit-identical for any thread count. Causal attention computes only the
 * unmasked lower part: rows are processed in blocks of RB and a block
 * touches keys [0, min(Tk, i1)) only; the backward skips the same part. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/ops.h"
#include "core/vmath.h"

#define RB 64 /* rows (or keys) per block for the causal skip */

static bool check_qkv(const char *op, const cg_tensor *q, const cg_tensor *k,
                      const cg_tensor *v)
{
    if (!q || !k || !v)
        return false;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || q->shape[0] != k->shape[0] ||
        q->shape[1] != k->shape[1] || !cg_same_shape(k, v) || q->shape[3] != k->shape[3]) {
        char a[96], b[96], c[96];
        cg_set_error("%s: expected q [B,H,Tq,dh], k and v [B,H,Tk,dh]; got q %s, k %s, v %s",
                     op, cg_shape_str(q, a, sizeof a), cg_shape_str(k, b, sizeof b),
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

/* 16 floats (GCC/clang vector extension): one AVX-512 register, two AVX2
 * or four SSE ones, as the clone compiles it. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint8_t v16b __attribute__((vector_size(16)));

/* One row of scaled, masked softmax in place over s[0, ke); s[ke, Tk) = 0.
 * The maximum is taken in 16 lanes (element j in lane j % 16) so the first
 * pass runs on whole vectors; a maximum does not depend on its order. */
EW_CLONES static void softmax_row(float *s, int64_t ke, int64_t Tk, float scale,
                                  const uint8_t *kpad)
{
    v16f lanes;
    for (int l = 0; l < 16; l++)
        lanes[l] = -INFINITY;
    const v16f ninf = lanes;
    int64_t j0 = 0;
    for (; j0 + 16 <= ke; j0 += 16) {
        v16f x;
        memcpy(&x, s + j0, sizeof x);
        x = x / scale;
        if (kpad) {
            v16b pb;
            memcpy(&pb, kpad + j0, sizeof pb);
            v16i pad = __builtin_convertvector(pb, v16i) != 0;
            x = (v16f)((pad & (v16i)ninf) | (~pad & (v16i)x));
        }
        memcpy(s + j0, &x, sizeof x);
        v16i gt = x > lanes; /* lane-wise max; a NaN x keeps the lane */
        lanes = (v16f)((gt & (v16i)x) | (~gt & (v16i)lanes));
    }
    float mx = -INFINITY;
    for (int l = 0; l < 16; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (; j0 < ke; j0++) {
        float x = s[j0] / scale;
        if (kpad && kpad[j0])
            x = -INFINITY;
        s[j0] = x;
        mx = x > mx ? x : mx;
    }
    double acc[8] = {0};
    int64_t j = 0, kl = ke / 8 * 8;
    for (; j < kl; j += 8)
        for (int l = 0; l < 8; l++) {
            float e = ew_expf(s[j + l] - mx);
            s[j + l] = e;
            acc[l] += (double)e;
        }
    for (; j < ke; j++) {
        float e = ew_expf(s[j] - mx);
        s[j] = e;
        acc[j - kl] += (double)e;
    }
    /* every key masked: -inf - -inf gives NaN, as PyTorch */
    double inv = 1.0 / lanes8_total(acc);
    for (j = 0; j < ke; j++)
        s[j] = (float)(s[j] * inv);
    for (j = ke; j < Tk; j++)
        s[j] = 0.0f;
}

/* Softmax backward of one row in place: d = p * (d - <p, d>) / scale over
 * [0, ke); d[ke, Tk) = 0. */
EW_CLONES static void softmax_row_bwd(const float *p, float *d, int64_t ke, int64_t Tk,
                                      float scale)
{
    double acc[8] = {0};
    int64_t j = 0, kl = ke / 8 * 8;
    for (; j < kl; j += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += (double)p[j + l] * d[j + l];
    for (; j < ke; j++)
        acc[j - kl] += (double)p[j] * d[j];
    float fdot = (float)lanes8_total(acc);
    for (j = 0; j < ke; j++)
        d[j] = p[j] * (d[j] - fdot) / scale;
    for (j = ke; j < Tk; j++)
        d[j] = 0.0f;
}

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

static inline float *at4(const cg_tensor *t, int64_t b, int64_t h)
{
    return cg_data(t) + b * t->strides[0] + h * t->strides[1];
}

cg_tensor *cg_k_attention(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                          bool causal, const uint8_t *key_pad, cg_tensor **weights)
{
    if (weights)
        *weights = NULL;
    if (!check_qkv("attention", q, k, v))
        return NULL;
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2];
    cg_tensor *out = heads_out(B, H, Tq, dh, false);
    cg_tensor *P = cg_empty(CG_SHAPE(B, H, Tq, Tk));
    if (!out || !P) {
        cg_release_all(2, out, P);
        return NULL;
    }
    if (Tq == 0 || Tk == 0 || dh == 0 || B * H == 0) {
        /* degenerate: no keys gives NaN rows (softmax of nothing), as PyTorch */
        cg_fill_(P, NAN);
        cg_fill_(out, Tk == 0 ? NAN : 0.0f);
        if (weights)
            *weights = P;
        else
            cg_release(P);
        return out;
    }
    /* divide (not multiply by the reciprocal) to round as scores / sqrt(dh) */
    const float scale = (float)sqrt((double)dh);
    const int64_t BH = B * H;
    const int64_t rb = causal ? RB : Tq; /* without a causal mask: one block */
    float *pd = cg_data(P);
#pragma omp parallel for schedule(static) if (BH > 1 && BH * Tq * Tk * dh > 32768)
    for (int64_t bh = 0; bh < BH; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const float *qp = at4(q, b, h), *kp = at4(k, b, h), *vp = at4(v, b, h);
        float *op = at4(out, b, h);
        float *S = pd + bh * Tq * Tk;
        const uint8_t *kpad = key_pad ? key_pad + b * Tk : NULL;
        for (int64_t i0 = 0; i0 < Tq; i0 += rb) {
            int64_t i1 = i0 + rb < Tq ? i0 + rb : Tq;
            int64_t kn = key_end(causal, i1 - 1, Tk);
            /* S[i0:i1, :kn] = q k^T */
            cg_sgemm(i1 - i0, kn, dh, 1.0f, qp + i0 * q->strides[2], q->strides[2],
                     q->strides[3], kp, k->strides[3], k->strides[2], 0.0f, S + i0 * Tk, Tk,
                     1);
            for (int64_t i = i0; i < i1; i++)
                softmax_row(S + i * Tk, key_end(causal, i, Tk), Tk, scale, kpad);
            /* out[i0:i1] = P[i0:i1, :kn] v[:kn] */
            cg_sgemm(i1 - i0, dh, kn, 1.0f, S + i0 * Tk, Tk, 1, vp, v->strides[2], v->strides[3],
                     0.0f, op + i0 * out->strides[2], out->strides[2], out->strides[3]);
        }
    }
    if (weights)
        *weights = P;
    else
        cg_release(P);
    return out;
}

bool cg_k_attention_backward(const cg_tensor *q, const cg_tensor *k, const cg_tensor *v,
                             const cg_tensor *weights, const cg_tensor *g, bool causal,
                             cg_tensor **dq, cg_tensor **dk, cg_tensor **dv)
{
    if (dq)
        *dq = NULL;
    if (dk)
        *dk = NULL;
    if (dv)
        *dv = NULL;
    if (!check_qkv("attention backward", q, k, v) || !weights || !g)
        return false;
    const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], dh = q->shape[3];
    const int64_t Tk = k->shape[2];
    if (!cg_same_shape(g, q) || weights->ndim != 4 || weights->shape[0] != B ||
        weights->shape[1] != H || weights->shape[2] != Tq || weights->shape[3] != Tk ||
        !cg_is_contiguous(weights)) {
        char a[96], b[96];
        cg_set_error("attention backward: gradient %s or weights %s do not match q/k",
                     cg_shape_str(g, a, sizeof a), cg_shape_str(weights, b, sizeof b));
        return false;
    }
    /* every gradient element is written by a product below, except keys no
     * query sees (causal with Tk > Tq) and degenerate sizes: zero-fill then */
    const bool zero = causal ? Tk > Tq : false;
    const bool degen = Tq == 0 || Tk == 0 || dh == 0 || B * H == 0;
    cg_tensor *gq = heads_out(B, H, Tq, dh, degen);
    cg_tensor *gk = heads_out(B, H, Tk, dh, degen || zero);
    cg_tensor *gv = heads_out(B, H, Tk, dh, degen || zero);
    const int64_t BH = B * H;
    const int nt = cg_get_num_threads();
    float *scratch = cg_alloc((size_t)(Tq * Tk > 0 ? Tq * Tk : 1) * sizeof(float) *
                              (size_t)(nt > 0 ? nt : 1));
    if (!gq || !gk || !gv || !scratch) {
        cg_release_all(3, gq, gk, gv);
        cg_free(scratch);
        cg_set_error("attention backward: out of memory");
        return false;
    }
    if (Tq > 0 && Tk > 0 && dh > 0 && BH > 0) {
        const float scale = (float)sqrt((double)dh);
        const int64_t rb = causal ? RB : Tq, kb = causal ? RB : Tk; /* one block unless causal */
        const float *pd = cg_data(weights);
#pragma omp parallel for schedule(static) if (BH > 1 && BH * Tq * Tk * dh > 32768) num_threads(nt)
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t b = bh / H, h = bh % H;
            const int tid = omp_get_thread_num();
            float *D = scratch + (int64_t)tid * Tq * Tk;
            const float *P = pd + bh * Tq * Tk;
            const float *qp = at4(q, b, h), *kp = at4(k, b, h), *vp = at4(v, b, h);
            const float *gp = at4(g, b, h);
            float *dqp = at4(gq, b, h), *dkp = at4(gk, b, h), *dvp = at4(gv, b, h);
            const int64_t gr = g->strides[2], gc = g->strides[3];
            for (int64_t i0 = 0; i0 < Tq; i0 += rb) {
                int64_t i1 = i0 + rb < Tq ? i0 + rb : Tq;
                int64_t kn = key_end(causal, i1 - 1, Tk);
                /* D[i0:i1, :kn] = dO v^T */
                cg_sgemm(i1 - i0, kn, dh, 1.0f, gp + i0 * gr, gr, gc, vp, v->strides[3],
                         v->strides[2], 0.0f, D + i0 * Tk, Tk, 1);
                for (int64_t i = i0; i < i1; i++)
                    softmax_row_bwd(P + i * Tk, D + i * Tk, key_end(causal, i, Tk), Tk, scale);
                /* dq[i0:i1] = dS[i0:i1, :kn] k[:kn] */
                if (dq)
                    cg_sgemm(i1 - i0, dh, kn, 1.0f, D + i0 * Tk, Tk, 1, kp, k->strides[2],
                             k->strides[3], 0.0f, dqp + i0 * gq->strides[2], gq->strides[2],
                             gq->strides[3]);
            }
            /* keys in blocks: key j gets rows i >= j (causal) or all rows */
            for (int64_t j0 = 0; j0 < Tk; j0 += kb) {
                int64_t j1 = j0 + kb < Tk ? j0 + kb : Tk;
                int64_t is = causal ? j0 : 0;
                if (is >= Tq)
                    break; /* no query sees these keys: gradients stay zero */
                /* dv[j0:j1] = P[is:, j0:j1]^T dO[is:] */
                if (dv)
                    cg_sgemm(j1 - j0, dh, Tq - is, 1.0f, P + is * Tk + j0, 1, Tk, gp + is * gr, gr,
                             gc, 0.0f, dvp + j0 * gv->strides[2], gv->strides[2],
                             gv->strides[3]);
                /* dk[j0:j1] = dS[is:, j0:j1]^T q[is:] */
                if (dk)
                    cg_sgemm(j1 - j0, dh, Tq - is, 1.0f, D + is * Tk + j0, 1, Tk,
                             qp + is * q->strides[2], q->strides[2], q->strides[3], 0.0f,
                             dkp + j0 * gk->strides[2], gk->strides[2], gk->strides[3]);
            }
        }
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
