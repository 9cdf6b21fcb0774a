/* Multi-head attention: the q/k/v projections, the heads split as views
 * (and the user's q/k hook), then the product: the fused kernel
 * cg_attention (one op with its own backward) for no mask, causal and
 * key-padding masks; graph ops (scores, mask, softmax, @ v) only for a
 * general attn_mask tensor; heads merged, output projection. Incremental
 * decoding keeps each layer's keys and values (cg_mha_kv, its buffers in
 * nn/attention_kv.c) and calls the same kernel. Masks are tensors checked here and in the kernel. */
#include "nn/attention.h"

#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/attention_impl.h"

/* --------------------------------------------------------------- masks */
/* The user's attention mask as a [B|1, 1|H, Tq, Tk] view (3-d [B, Tq, Tk]
 * gains the head dim; 2-d [Tq, Tk] and 4-d broadcast as they are), or NULL
 * + error naming its shape and dtype. A graph op, as everything made of
 * the mask here: a float mask that requires grad (a learnable relative
 * position or ALiBi bias) gets its gradient, as PyTorch's attn_mask does. */
static cg_tensor *mask_view(const cg_tensor *mask, const int64_t *full)
{
    char a[96], b[96];
    if (mask->dtype != CG_BOOL && !cg_dtype_is_float(mask->dtype)) {
        cg_set_error("attention: argument 'mask' is %s, expected bool (true = masked) or a float "
                     "tensor (added to the scores)",
                     cg_dtype_name(mask->dtype));
        return NULL;
    }
    cg_tensor *m = (cg_tensor *)mask; /* an input of the graph: it is not written */
    cg_tensor *v = mask->ndim == 3 ? cg_unsqueeze(m, 1) : cg_retain(m);
    int64_t bs[CG_MAX_DIMS];
    int nd = v && v->ndim >= 2 && v->ndim <= 4
                 ? cg_broadcast_shapes("attention mask", v->ndim, v->shape, 4, full, bs)
                 : -1;
    if (nd != 4 || memcmp(bs, full, 4 * sizeof *bs)) {
        cg_set_error("attention: argument 'mask' has shape %s, expected [Tq, Tk], [B, Tq, Tk] or "
                     "[B, H, Tq, Tk], each dim its size or 1, [B, H, Tq, Tk] = %s",
                     cg_shape_str(mask, a, sizeof a), cg_shape_str_n(4, full, b, sizeof b));
        cg_release(v);
        return NULL;
    }
    return v;
}

bool cg_attention_mask(int64_t B, int64_t H, int64_t Tq, int64_t Tk, bool causal,
                       const cg_tensor *key_pad, const cg_tensor *mask, cg_tensor **out)
{
    if (!out) {
        cg_set_error("attention mask: out is NULL");
        return false;
    }
    *out = NULL;
    if (B <= 0 || H <= 0 || Tq <= 0 || Tk <= 0) {
        cg_set_error("attention mask: sizes must be positive (B=%lld H=%lld Tq=%lld Tk=%lld)",
                     (long long)B, (long long)H, (long long)Tq, (long long)Tk);
        return false;
    }
    const int64_t full[4] = {B, H, Tq, Tk};
    if (key_pad && (!cg_check_dtype("attention", "key_pad", key_pad, CG_BOOL) ||
                    key_pad->ndim != 2 || key_pad->shape[0] != B || key_pad->shape[1] != Tk)) {
        char a[96], b[96];
        if (key_pad->dtype == CG_BOOL)
            cg_set_error("attention: argument 'key_pad' has shape %s, expected [B, Tk] = %s",
                         cg_shape_str(key_pad, a, sizeof a),
                         cg_shape_str_n(2, (const int64_t[]){B, Tk}, b, sizeof b));
        return false;
    }
    cg_tensor *um = mask ? mask_view(mask, full) : NULL;
    if (mask && !um)
        return false;
    cg_tensor *base = NULL; /* bool: causal or padding */
    if (key_pad || causal) {
        int64_t nb = key_pad ? B : 1;
        base = cg_zeros_dtype(CG_BOOL, CG_SHAPE(nb, 1, Tq, Tk));
        if (!base) {
            cg_release(um);
            return false;
        }
        bool *v = cg_data_bool(base);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < Tq; i++)
                for (int64_t j = 0; j < Tk; j++)
                    v[(b * Tq + i) * Tk + j] =
                        (causal && j > i) || (key_pad && cg_get_i64(key_pad, (int64_t[]){b, j}));
    }
    if (!um || !base) {
        *out = um ? um : base;
        return true;
    }
    /* both: "or" of bool masks; a float mask gets -inf where base masks
     * (PyTorch's masked_fill), expanded first where base has dims it has
     * not (a [Tq, Tk] bias under a padding mask [B, 1, Tq, Tk]) */
    if (um->dtype == CG_BOOL) {
        *out = cg_logical_or(base, um);
    } else {
        int64_t bs[4]; /* both broadcast to full (checked), so to each other */
        cg_broadcast_shapes("attention mask", 4, base->shape, um->ndim, um->shape, bs);
        bool fits = um->ndim == 4 && !memcmp(um->shape, bs, sizeof bs);
        cg_tensor *e = fits ? cg_retain(um) : cg_expand(um, 4, bs);
        *out = e ? cg_masked_fill(e, base, -INFINITY) : NULL;
        cg_release(e);
    }
    cg_release_all(2, base, um);
    return *out != NULL;
}

/* ------------------------------------------------- scaled dot product */
/* k [B,Hkv,T,dh] as [B,H,T,dh], each head repeated H/Hkv times in a row
 * (PyTorch's k.repeat_interleave(H // Hkv, dim=1)): grouped-query
 * attention on the graph path; a new reference (k itself when Hkv = H) */
static cg_tensor *repeat_kv(cg_tensor *k, int64_t H)
{
    const int64_t B = k->shape[0], Hk = k->shape[1], T = k->shape[2], dh = k->shape[3];
    if (Hk == H)
        return cg_retain(k);
    cg_tensor *u = cg_unsqueeze(k, 2);
    cg_tensor *e = u ? cg_expand(u, 5, (const int64_t[]){B, Hk, H / Hk, T, dh}) : NULL;
    cg_tensor *r = e ? cg_reshape(e, 4, (const int64_t[]){B, H, T, dh}) : NULL;
    cg_release_all(2, u, e);
    return r;
}

cg_tensor *cg_scaled_dot_product_attention(cg_tensor *q, cg_tensor *k, cg_tensor *v,
                                           const cg_tensor *mask, cg_tensor **weights_out)
{
    return cg_scaled_dot_product_attention_ex(q, k, v, mask, 0.0f, NULL, weights_out);
}

cg_tensor *cg_scaled_dot_product_attention_ex(cg_tensor *q, cg_tensor *k, cg_tensor *v,
                                              const cg_tensor *mask, float dropout_p, cg_rng *rng,
                                              cg_tensor **weights_out)
{
    if (weights_out)
        *weights_out = NULL;
    if (!q || !k || !v) {
        cg_error_null_input("cg_scaled_dot_product_attention");
        return NULL;
    }
    if (!(dropout_p >= 0.0f && dropout_p <= 1.0f) || (dropout_p > 0.0f && !rng)) {
        cg_set_error("attention: dropout_p %g must be in [0, 1], with a generator when above 0",
                     (double)dropout_p);
        return NULL;
    }
    /* q, k and v as the fused kernel takes them, with a mask too */
    if (!cg_k_attention_check(q, k, v))
        return NULL;
    if (!mask && dropout_p == 0.0f) /* nothing masked or dropped: the fused kernel */
        return cg_attention(q, k, v, false, NULL, weights_out);
    /* bfloat16 read as its float32 values (cg_to: the gradient comes back
     * bfloat16), so that the result is float32 with a mask as without one */
    const int64_t full[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]};
    cg_tensor *mv = mask ? mask_view(mask, full) : NULL;
    if (mask && !mv)
        return NULL;
    q = cg_to(q, CG_F32), k = cg_to(k, CG_F32), v = cg_to(v, CG_F32); /* released below */
    if (q && k && v && k->shape[1] != q->shape[1]) { /* grouped-query: heads repeated */
        cg_tensor *kr = repeat_kv(k, q->shape[1]), *vr = repeat_kv(v, q->shape[1]);
        cg_release_all(2, k, v);
        k = kr, v = vr;
    }
    if (!q || !k || !v) {
        cg_release_all(4, q, k, v, mv);
        return NULL;
    }
    /* divide (not multiply by the reciprocal) to round exactly as PyTorch's
     * scores / math.sqrt(d_head) */
    cg_tensor *scale = cg_scalar((float)sqrt((double)q->shape[3]));
    cg_tensor *kt = cg_transpose(k, 2, 3); /* [B,H,dh,Tk], a view */
    cg_tensor *s = cg_matmul(q, kt);
    cg_tensor *ss = cg_div(s, scale);
    cg_release_all(3, scale, kt, s);
    if (ss && mv) { /* bool: -inf where true; float: added, as PyTorch's attn_mask */
        cg_tensor *sm = mv->dtype == CG_BOOL ? cg_masked_fill(ss, mv, -INFINITY) : cg_add(ss, mv);
        cg_release(ss);
        ss = sm;
    }
    cg_release(mv);
    cg_tensor *w = cg_softmax(ss, -1);
    cg_release(ss);
    cg_tensor *wd = w && dropout_p > 0.0f ? cg_dropout(w, dropout_p, rng, true) : cg_retain(w);
    cg_tensor *out = wd ? cg_matmul(wd, v) : NULL;
    cg_release_all(4, q, k, v, wd);
    if (!w)
        return NULL;
    if (out && weights_out && !(*weights_out = cg_detach(w))) {
        cg_release(out);
        out = NULL;
    }
    cg_release(w);
    return out;
}

/* -------------------------------------------------------------- module */
static void mha_destroy(cg_module *m) { cg_release_held(((cg_mha *)m)->weights); }

bool cg_mha_set_rope(cg_mha *m, double theta)
{
    if (!m) {
        cg_error_null_input("cg_mha_set_rope");
        return false;
    }
    if (theta != 0.0 && !(theta > 1.0 && isfinite(theta))) {
        cg_set_error("MultiHeadAttention: rotary base theta %g must be a finite number above 1 "
                     "(or 0: none)",
                     theta);
        return false;
    }
    m->rope_theta = theta;
    return true;
}

/* *q and *k (split heads, either NULL: none) rotated from position start
 * when m has rotary embeddings, replacing them; false when one failed
 * (both released and NULL). */
static bool rope_qk(const cg_mha *m, cg_tensor **q, cg_tensor **k, int64_t start)
{
    if (m->rope_theta == 0.0)
        return true;
    cg_tensor *q2 = *q ? cg_rope(*q, start, m->rope_theta) : NULL;
    cg_tensor *k2 = *k ? cg_rope(*k, start, m->rope_theta) : NULL;
    const bool ok = (!*q || q2) && (!*k || k2);
    cg_release_all(2, *q, *k);
    *q = ok ? q2 : NULL;
    *k = ok ? k2 : NULL;
    if (!ok)
        cg_release_all(2, q2, k2);
    return ok;
}

bool cg_mha_set_attn_dropout(cg_mha *m, float p, cg_rng *rng)
{
    if (!m) {
        cg_error_null_input("cg_mha_set_attn_dropout");
        return false;
    }
    if (!(p >= 0.0f && p <= 1.0f) || (p > 0.0f && !rng)) { /* nn.Dropout's range */
        cg_set_error("MultiHeadAttention: attention dropout %g must be in [0, 1], with a "
                     "generator when above 0",
                     (double)p);
        return false;
    }
    m->attn_dropout = p;
    m->attn_dropout_rng = rng;
    return true;
}

cg_mha *cg_mha_new(int64_t d, int64_t H, cg_rng *rng) { return cg_mha_new_bias(d, H, true, rng); }

cg_mha *cg_mha_new_bias(int64_t d, int64_t H, bool bias, cg_rng *rng)
{
    return cg_mha_new_gqa(d, H, H, bias, rng);
}

cg_mha *cg_mha_new_gqa(int64_t d, int64_t H, int64_t H_kv, bool bias, cg_rng *rng)
{
    if (d > 0 && H > 0 && d % H == 0 && (H_kv < 1 || H % H_kv != 0)) {
        cg_set_error("MultiHeadAttention: %lld key/value heads do not divide H=%lld (give a "
                     "divisor of H: H for multi-head, 1 for multi-query attention)",
                     (long long)H_kv, (long long)H);
        return NULL;
    }
    if (d <= 0 || H <= 0 || d % H) {
        cg_set_error("MultiHeadAttention: d=%lld is not divisible by H=%lld (both must be "
                     "positive)",
                     (long long)d, (long long)H);
        return NULL;
    }
    cg_rng local = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_mha *m = (cg_mha *)cg_module_alloc(sizeof *m, "MultiHeadAttention", mha_destroy);
    if (!m)
        return NULL;
    m->d = d;
    m->H = H;
    m->d_head = d / H;
    m->H_kv = H_kv;
    static const char *names[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    cg_linear **slots[4] = {&m->q_proj, &m->k_proj, &m->v_proj, &m->o_proj};
    for (int i = 0; i < 4; i++) {
        const int64_t out = i == 1 || i == 2 ? H_kv * m->d_head : d;
        *slots[i] = cg_module_add_child(&m->base, names[i], cg_linear_new(d, out, bias, rng));
        if (!*slots[i]) {
            cg_module_free(&m->base);
            return NULL;
        }
    }
    return m;
}

/* [B,T,n dh] -> [B,n,T,dh], n = H (queries) or H_kv (keys, values): a
 * view when x is contiguous. */
static cg_tensor *split_heads(const cg_mha *m, cg_tensor *x)
{
    if (!x)
        return NULL;
    const int64_t n = x->shape[2] / m->d_head;
    cg_tensor *r = cg_reshape(x, CG_SHAPE(x->shape[0], x->shape[1], n, m->d_head));
    cg_tensor *t = cg_transpose(r, 1, 2);
    cg_release(r);
    return t;
}

/* o_proj(concat heads(o)): o [B,H,Tq,dh] -> [B,Tq,d], and r (or NULL)
 * made as o_proj writes its output. Concatenating is a view after the
 * fused kernel, a copy otherwise. */
static cg_tensor *merge_heads_out(const cg_mha *m, cg_tensor *o, const cg_residual *r)
{
    if (!o)
        return NULL;
    cg_tensor *ot = cg_transpose(o, 1, 2); /* [B,Tq,H,dh] */
    cg_tensor *merged = cg_reshape(ot, CG_SHAPE(o->shape[0], o->shape[2], m->d));
    cg_release(ot);
    cg_tensor *y = merged ? cg_linear_forward_residual(m->o_proj, merged, r) : NULL;
    cg_release(merged);
    return y;
}

typedef struct {
    bool causal;
    const cg_tensor *key_pad;
    const cg_tensor *mask;
    cg_tensor **weights_out;
    cg_mha_kv *kv;          /* the cached form */
    const cg_residual *res; /* what follows, made by o_proj (or NULL) */
} mha_args;

static cg_tensor *mha_impl(cg_module *mod, cg_tensor *const *in, void *args)
{
    cg_mha *m = (cg_mha *)mod;
    cg_tensor *xq = in[0], *xkv = in[1];
    const mha_args *a = args;
    bool causal = a->causal;
    const cg_tensor *key_pad = a->key_pad, *mask = a->mask;
    cg_tensor **weights_out = a->weights_out;
    if (!xq || !xkv)
        return NULL;
    if (xq->ndim != 3 || xkv->ndim != 3 || xq->shape[0] != xkv->shape[0] || xq->shape[2] != m->d ||
        xkv->shape[2] != m->d || xq->shape[1] <= 0 || xkv->shape[1] <= 0 || xq->shape[0] <= 0) {
        char a[96], b[96];
        cg_set_error("MultiHeadAttention: expected xq [B,Tq,%lld] and xkv [B,Tk,%lld] with "
                     "B, Tq, Tk > 0; got %s and %s",
                     (long long)m->d, (long long)m->d, cg_shape_str(xq, a, sizeof a),
                     cg_shape_str(xkv, b, sizeof b));
        return NULL;
    }
    int64_t B = xq->shape[0], Tq = xq->shape[1], Tk = xkv->shape[1];
    /* Causal and key-padding masks go to the fused kernel (cg_attention);
     * only a general mask tensor needs the mask built and the graph path. */
    cg_tensor *amask = NULL;
    /* attention dropout: the graph path, its mask made of all three */
    const float drop = mod->training ? m->attn_dropout : 0.0f;
    if ((mask || drop > 0.0f) && !cg_attention_mask(B, m->H, Tq, Tk, causal, key_pad, mask, &amask))
        return NULL;

    /* q, k and v are read by attention's bf16 products: their rounding
     * made as the projections write them (rotated q and k: as the rotation
     * writes them, core/rope.c) */
    const bool rope = m->rope_theta != 0.0;
    cg_tensor *q =
        rope ? cg_linear_forward(m->q_proj, xq) : cg_linear_forward_keep_bf16(m->q_proj, xq);
    cg_tensor *k =
        rope ? cg_linear_forward(m->k_proj, xkv) : cg_linear_forward_keep_bf16(m->k_proj, xkv);
    cg_tensor *v = cg_linear_forward_keep_bf16(m->v_proj, xkv);
    cg_tensor *qh = split_heads(m, q), *kh = split_heads(m, k), *vh = split_heads(m, v);
    cg_release_all(3, q, k, v);
    /* a rotation that failed leaves qh and kh NULL (its error set), and
     * so no attention below: the forward returns NULL */
    if (qh && kh)
        (void)rope_qk(m, &qh, &kh, 0);
    if (m->qk_hook && qh && kh) { /* e.g. rotary embeddings of the user's */
        cg_tensor *q2 = m->qk_hook(m->qk_hook_ctx, qh, false);
        cg_tensor *k2 = q2 ? m->qk_hook(m->qk_hook_ctx, kh, true) : NULL;
        if (k2 && (!cg_same_shape(q2, qh) || !cg_same_shape(k2, kh))) {
            char a[96], b[96];
            cg_set_error("MultiHeadAttention: the q/k hook returned %s for an input of shape %s",
                         cg_shape_str(cg_same_shape(q2, qh) ? k2 : q2, a, sizeof a),
                         cg_shape_str(cg_same_shape(q2, qh) ? kh : qh, b, sizeof b));
            cg_release_all(2, q2, k2);
            q2 = k2 = NULL;
        }
        cg_release_all(2, qh, kh);
        qh = k2 ? q2 : NULL;
        kh = k2;
        if (!k2)
            cg_release(q2);
    }

    bool want_w = weights_out || m->keep_weights;
    cg_tensor *w = NULL;
    cg_tensor *o = !(qh && kh && vh) ? NULL
                   : mask || drop > 0.0f
                       ? cg_scaled_dot_product_attention_ex(qh, kh, vh, amask, drop,
                                                            m->attn_dropout_rng, want_w ? &w : NULL)
                       : cg_attention(qh, kh, vh, causal, key_pad, want_w ? &w : NULL);
    cg_release_all(4, qh, kh, vh, amask);

    cg_tensor *y = merge_heads_out(m, o, a->res);
    cg_release(o);
    if (!y) {
        cg_release(w);
        return NULL;
    }
    if (m->keep_weights) {
        cg_release_held(m->weights);
        m->weights = cg_hold(cg_retain(w));
    }
    if (weights_out)
        *weights_out = w;
    else
        cg_release(w);
    return y;
}

cg_tensor *cg_mha_forward(cg_mha *m, cg_tensor *xq, cg_tensor *xkv, bool causal,
                          const cg_tensor *key_pad, const cg_tensor *mask, cg_tensor **weights_out)
{
    if (weights_out)
        *weights_out = NULL;
    if (!m || !xq || !xkv) {
        cg_error_null_input("cg_mha_forward");
        return NULL;
    }
    mha_args a = {causal, key_pad, mask, weights_out, NULL, NULL};
    return cg_module_call(&m->base, mha_impl, 2, (cg_tensor *const[]){xq, xkv}, &a);
}

cg_tensor *cg_mha_forward_residual(cg_mha *m, cg_tensor *xq, cg_tensor *xkv,
                                   const cg_attn_mask *mask, cg_tensor **weights_out,
                                   const cg_residual *r)
{
    if (weights_out)
        *weights_out = NULL;
    if (!m || !xq || !xkv) {
        cg_error_null_input("cg_mha_forward_residual");
        return NULL;
    }
    if (!r || m->base.hooks) { /* the hooks see the module's own output */
        cg_tensor *y = cg_mha_forward_masked(m, xq, xkv, mask, weights_out);
        cg_tensor *out = cg_residual_apply(r, y);
        cg_release(y);
        return out;
    }
    mha_args a = {mask && mask->causal,
                  mask ? mask->key_pad : NULL,
                  mask ? mask->mask : NULL,
                  weights_out,
                  NULL,
                  r};
    return cg_module_call(&m->base, mha_impl, 2, (cg_tensor *const[]){xq, xkv}, &a);
}

cg_tensor *cg_mha_forward_masked(cg_mha *m, cg_tensor *xq, cg_tensor *xkv, const cg_attn_mask *mask,
                                 cg_tensor **weights_out)
{
    if (!mask)
        return cg_mha_forward(m, xq, xkv, false, NULL, NULL, weights_out);
    return cg_mha_forward(m, xq, xkv, mask->causal, mask->key_pad, mask->mask, weights_out);
}

/* ------------------------------------------- incremental decoding */
static cg_tensor *mha_cached_impl(cg_module *mod, cg_tensor *const *in, void *args)
{
    cg_mha *m = (cg_mha *)mod;
    cg_tensor *xq = in[0], *xkv = in[1];
    const mha_args *a = args;
    bool causal = a->causal;
    const cg_tensor *key_pad = a->key_pad;
    cg_mha_kv *kv = a->kv;
    if (!xq)
        return NULL;
    if (xq->ndim != 3 || xq->shape[2] != m->d || xq->shape[1] < 1 || xq->shape[0] < 1 ||
        (xkv && (xkv->ndim != 3 || xkv->shape[0] != xq->shape[0] || xkv->shape[2] != m->d ||
                 xkv->shape[1] < 1))) {
        char a[96], b[96];
        cg_set_error("MultiHeadAttention cached: expected xq [B,n,%lld] and xkv [B,m,%lld] or "
                     "NULL; got %s and %s",
                     (long long)m->d, (long long)m->d, cg_shape_str(xq, a, sizeof a),
                     xkv ? cg_shape_str(xkv, b, sizeof b) : "NULL");
        return NULL;
    }
    if (!xkv && kv->len == 0) {
        cg_set_error("MultiHeadAttention cached: the cache is empty and no keys were given");
        return NULL;
    }
    if (m->qk_hook) { /* the hook sees no positions: cached keys would be transformed wrongly */
        cg_set_error("MultiHeadAttention cached: a q/k hook is set, and the hook is not told the "
                     "positions of cached keys; decode without the cache (cg_mha_forward)");
        return NULL;
    }
    const int64_t B = xq->shape[0], n = xq->shape[1], past = kv->len;
    cg_no_grad_begin();
    cg_tensor *y = NULL, *qh = NULL, *mask = NULL, *K = NULL, *V = NULL, *o = NULL;
    bool ok = true;
    if (xkv) {
        cg_tensor *k = cg_linear_forward(m->k_proj, xkv);
        cg_tensor *v = cg_linear_forward(m->v_proj, xkv);
        cg_tensor *kh = split_heads(m, k), *vh = split_heads(m, v), *none = NULL;
        ok = kh && vh && rope_qk(m, &none, &kh, past) && cg_mha_kv_append(kv, kh, vh);
        cg_release_all(4, k, v, kh, vh);
    }
    if (ok && kv->k->shape[0] != B) {
        cg_set_error("MultiHeadAttention cached: %lld queries for a cache of %lld rows",
                     (long long)B, (long long)kv->k->shape[0]);
        ok = false;
    }
    if (ok) {
        const int64_t Tk = kv->len;
        cg_tensor *q = cg_linear_forward(m->q_proj, xq), *none = NULL;
        qh = split_heads(m, q);
        cg_release(q);
        if (qh && !rope_qk(m, &qh, &none, past)) /* the new queries' positions */
            ok = false;
        K = cg_view_narrow(kv->k, 2, 0, Tk);
        V = cg_view_narrow(kv->v, 2, 0, Tk);
        /* One new query sees every cached key; new queries from position 0
         * are the kernel's causal case; otherwise an explicit mask. */
        bool offset_causal = causal && n > 1 && past > 0;
        if (offset_causal && key_pad &&
            (key_pad->dtype != CG_BOOL || key_pad->ndim != 2 || key_pad->shape[0] != B ||
             key_pad->shape[1] != Tk)) { /* the kernel's check, for this path too */
            char a[96], b[96];
            cg_set_error("attention: argument 'key_pad' (%s %s) is not bool [B, Tk] = %s",
                         cg_dtype_name(key_pad->dtype), cg_shape_str(key_pad, a, sizeof a),
                         cg_shape_str_n(2, (const int64_t[]){B, Tk}, b, sizeof b));
            ok = false;
        }
        if (ok && offset_causal &&
            (mask = cg_zeros_dtype(CG_BOOL, CG_SHAPE(key_pad ? B : 1, 1, n, Tk)))) {
            bool *md = cg_data_bool(mask);
            for (int64_t b = 0; b < mask->shape[0]; b++)
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < Tk; j++)
                        md[(b * n + i) * Tk + j] =
                            j > past + i || (key_pad && cg_get_i64(key_pad, (int64_t[]){b, j}));
        }
        if (ok && qh && K && V && (!offset_causal || mask))
            o = offset_causal ? cg_scaled_dot_product_attention(qh, K, V, mask, NULL)
                              : cg_attention(qh, K, V, causal && n > 1, key_pad, NULL);
        y = merge_heads_out(m, o, NULL);
    }
    cg_release_all(5, qh, mask, K, V, o);
    cg_no_grad_end();
    return y;
}

cg_tensor *cg_mha_forward_cached(cg_mha *m, cg_tensor *xq, cg_tensor *xkv, bool causal,
                                 const cg_tensor *key_pad, cg_mha_kv *kv)
{
    if (!m || !xq || !kv) {
        if (m && xq)
            cg_set_error("MultiHeadAttention cached: NULL cache");
        return NULL;
    }
    mha_args a = {causal, key_pad, NULL, NULL, kv, NULL};
    return cg_module_call(&m->base, mha_cached_impl, 2, (cg_tensor *const[]){xq, xkv}, &a);
}

cg_tensor *cg_mha_self(cg_mha *m, cg_tensor *x, bool causal, cg_mha_kv *kv)
{
    if (kv)
        return cg_mha_forward_cached(m, x, x, causal, NULL, kv);
    return cg_mha_forward(m, x, x, causal, NULL, NULL, NULL);
}

void cg_module_keep_attention_weights(cg_module *m, bool on)
{
    if (!m)
        return;
    if (!strcmp(m->type, "MultiHeadAttention")) {
        cg_mha *a = (cg_mha *)m;
        a->keep_weights = on;
        if (!on) {
            cg_release_held(a->weights);
            a->weights = NULL;
        }
    }
    for (int i = 0; i < m->n_children; i++)
        cg_module_keep_attention_weights(m->children[i].module, on);
}
