/* Gradients of gradients (grad2.c), the third kind: an op's function
 * made again from differentiable ops over stand-ins of its inputs, and
 * its gradient taken by a walk with create_graph through that alone
 * (linear, the norms, var, cross-entropy, attention, the pointwise
 * losses and the smooth activations). Each is a few lines of the op's
 * forward, and its gradients of every order are those of the ops it is
 * made of. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph_impl.h"
#include "autograd/ops.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

/* The op's function made again, from differentiable ops, over s (a
 * stand-in for each input, NULL where the input is absent); NULL + error
 * when it cannot be (a node that kept only bf16 copies). */
typedef cg_tensor *(*remake_fn)(cg_node *n, cg_tensor *const *s);

enum { MAX_REMADE_INPUTS = 8 };

static bool remade_g(cg_node *n, const cg_tensor *g, cg_tensor **gin, remake_fn f)
{
    const int ni = n->n_inputs;
    if (ni > MAX_REMADE_INPUTS) {
        cg_set_error("backward with create_graph: '%s' has more inputs than its recomputation "
                     "takes",
                     cg_node_name(n));
        return false;
    }
    /* A stand-in is the input seen through a view of its own (so that the
     * walk below stops there, and each input's gradient is its own even
     * when two inputs are one tensor), or for an input whose values the
     * node let go (the gradients do not depend on them), a leaf of zeros. */
    cg_tensor *s[MAX_REMADE_INPUTS] = {0}, *tg[MAX_REMADE_INPUTS], *cap[MAX_REMADE_INPUTS] = {0};
    cg_node *stops[MAX_REMADE_INPUTS];
    int at[MAX_REMADE_INPUTS], nt = 0, ns = 0;
    bool ok = true;
    for (int i = 0; ok && i < ni; i++) {
        cg_tensor *in = IN(i);
        if (!in)
            continue;
        if (!in->storage) {
            s[i] = cg_zeros_dtype(in->dtype, in->ndim, in->shape);
            ok = s[i] && cg_requires_grad(s[i], true);
        } else if (in->requires_grad) {
            s[i] = cg_expand(in, in->ndim, in->shape);
            ok = s[i] && s[i]->node;
            if (ok)
                stops[ns++] = s[i]->node;
        } else {
            s[i] = cg_retain(in);
        }
        if (ok && NEEDS(i)) {
            tg[nt] = s[i];
            at[nt++] = i;
        }
    }
    cg_tensor *y = ok && nt ? f(n, s) : NULL;
    if (y && y->requires_grad) {
        cg_tensor *gr = (cg_tensor *)g;
        cg_walk_args w = {.n_roots = 1,
                          .roots = &y,
                          .grads = &gr,
                          .retain = true,
                          .create = true,
                          .capture = true,
                          .allow_unused = true,
                          .n_targets = nt,
                          .targets = tg,
                          .captured = cap,
                          .n_stops = ns,
                          .stops = stops,
                          .who = cg_node_name(n)};
        ok = cg_walk(&w);
    } else if (nt) {
        ok = y != NULL;
    }
    for (int j = 0; j < nt; j++) {
        if (ok && !cap[j] && !(cap[j] = cg_zeros_like(IN(at[j]))))
            ok = false;
        if (ok)
            gin[at[j]] = cap[j];
        else
            cg_release(cap[j]);
    }
    cg_release(y);
    for (int i = 0; i < ni; i++)
        cg_release(s[i]);
    return ok;
}

/* x w^T + b */
static cg_tensor *linear_remake(cg_node *n, cg_tensor *const *s)
{
    cg_tensor *wt = cg_transpose(s[1], 0, 1), *y = wt ? cg_matmul(s[0], wt) : NULL;
    cg_tensor *r = y && n->n_inputs > 2 && s[2] ? cg_add(y, s[2]) : cg_retain(y);
    cg_release_all(2, wt, y);
    return r;
}
static bool linear_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return remade_g(n, g, gin, linear_remake);
}

/* The norms over the last dim: (x - mean) rsqrt(var + eps) w + b, or
 * x rsqrt(mean(x^2) + eps) w; the add_ forms normalise x + y. eps is in
 * p.i[3]'s bits (ops_nn.c). */
static cg_tensor *norm_remake(cg_node *n, cg_tensor *const *s)
{
    const bool add = n->op == CG_OP_ADD_LAYER_NORM || n->op == CG_OP_ADD_RMS_NORM;
    const bool rms = n->op == CG_OP_RMS_NORM || n->op == CG_OP_ADD_RMS_NORM;
    const int wi = add ? 2 : 1;
    float eps;
    memcpy(&eps, &n->p.i[3], sizeof eps);
    const int last = -1;
    cg_tensor *x = add ? cg_add(s[0], s[1]) : cg_retain(s[0]);
    cg_tensor *c = NULL, *sq = NULL, *v = NULL, *ve = NULL, *r = NULL, *h = NULL, *hw = NULL;
    cg_tensor *out = NULL;
    if (x) {
        cg_tensor *m = rms ? NULL : cg_mean(x, 1, &last, true);
        c = rms ? cg_retain(x) : m ? cg_sub(x, m) : NULL;
        cg_release(m);
    }
    sq = c ? cg_mul(c, c) : NULL;
    v = sq ? cg_mean(sq, 1, &last, true) : NULL;
    ve = v ? cg_adds(v, eps) : NULL;
    r = ve ? cg_rsqrt(ve) : NULL;
    h = r ? cg_mul(c, r) : NULL;
    hw = h && s[wi] ? cg_mul(h, s[wi]) : cg_retain(h);
    out = hw && !rms && s[wi + 1] ? cg_add(hw, s[wi + 1]) : cg_retain(hw);
    cg_release_all(8, x, c, sq, v, ve, r, h, hw);
    return out;
}
static bool norm_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return remade_g(n, g, gin, norm_remake);
}

/* var: sum((x - mean)^2) / (count - correction), the dims in p.i[2..] */
static cg_tensor *var_remake(cg_node *n, cg_tensor *const *s)
{
    const int nd = (int)n->p.i[0];
    int dims[CG_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        dims[i] = (int)n->p.i[2 + i];
    const int64_t kept = cg_numel_shape(n->out_ndim, n->out_shape);
    const double count = (double)cg_numel(s[0]) / (double)(kept ? kept : 1);
    cg_tensor *m = cg_mean(s[0], nd, dims, true), *c = m ? cg_sub(s[0], m) : NULL;
    cg_tensor *sq = c ? cg_mul(c, c) : NULL, *sum = sq ? cg_sum(sq, nd, dims, false) : NULL;
    cg_tensor *v = sum ? cg_muls(sum, (float)(1.0 / (count - (double)n->p.i[1]))) : NULL;
    cg_tensor *r = v ? cg_reshape(v, n->out_ndim, n->out_shape) : NULL;
    cg_release_all(5, m, c, sq, sum, v);
    return r;
}
static bool var_g(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return remade_g(n, g, gin, var_remake);
}

/* The smooth activations, from the ops above */
static cg_tensor *silu_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *sg = cg_sigmoid(s[0]), *r = sg ? cg_mul(s[0], sg) : NULL;
    cg_release(sg);
    return r;
}
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static cg_tensor *gelu_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *x3 = cg_pow(s[0], 3.0f), *a = x3 ? cg_muls(x3, 0.044715f) : NULL;
    cg_tensor *b = a ? cg_add(s[0], a) : NULL, *c = b ? cg_muls(b, 0.7978845608028654f) : NULL;
    cg_tensor *t = c ? cg_tanh(c) : NULL, *t1 = t ? cg_adds(t, 1.0f) : NULL;
    cg_tensor *h = t1 ? cg_mul(s[0], t1) : NULL, *r = h ? cg_muls(h, 0.5f) : NULL;
    cg_release_all(7, x3, a, b, c, t, t1, h);
    return r;
}
/* x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) */
static cg_tensor *gelu_erf_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *a = cg_muls(s[0], 0.70710678118654752f), *e = a ? cg_erf(a) : NULL;
    cg_tensor *e1 = e ? cg_adds(e, 1.0f) : NULL, *h = e1 ? cg_mul(s[0], e1) : NULL;
    cg_tensor *r = h ? cg_muls(h, 0.5f) : NULL;
    cg_release_all(4, a, e, e1, h);
    return r;
}
/* log(1 + e^(beta x)) / beta, x where beta x > threshold (a constant
 * choice, as the forward's) */
static cg_tensor *softplus_of(cg_tensor *x, float beta, float threshold)
{
    cg_tensor *bx = cg_muls(x, beta), *big = bx ? cg_gt_scalar(bx, threshold) : NULL;
    /* e^(beta x) where it is small, else e^0 (the branch not taken) */
    cg_tensor *small = big ? cg_masked_fill(bx, big, 0.0f) : NULL;
    cg_tensor *e = small ? cg_exp(small) : NULL, *e1 = e ? cg_adds(e, 1.0f) : NULL;
    cg_tensor *l = e1 ? cg_log(e1) : NULL, *q = l ? cg_muls(l, 1.0f / beta) : NULL;
    cg_tensor *r = q ? cg_where(big, x, q) : NULL;
    cg_release_all(7, bx, big, small, e, e1, l, q);
    return r;
}
static cg_tensor *softplus_remake(cg_node *n, cg_tensor *const *s)
{
    return softplus_of(s[0], n->p.f[0], n->p.f[1]);
}
static cg_tensor *mish_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *sp = softplus_of(s[0], 1.0f, 20.0f), *t = sp ? cg_tanh(sp) : NULL;
    cg_tensor *r = t ? cg_mul(s[0], t) : NULL;
    cg_release_all(2, sp, t);
    return r;
}
/* x <= 0 ? scale (e^x - 1) : x, as elu, celu and selu write it (alpha,
 * the input's scale in the exponent, and the scale of both branches) */
static cg_tensor *elu_of(cg_tensor *x, float alpha, float inv, float scale)
{
    cg_tensor *le = cg_le_scalar(x, 0.0), *pos = le ? cg_gt_scalar(x, 0.0) : NULL;
    cg_tensor *xi = pos ? cg_muls(x, inv) : NULL;
    cg_tensor *neg = xi ? cg_masked_fill(xi, pos, 0.0f) : NULL; /* the other branch: e^0 */
    cg_tensor *e = neg ? cg_exp(neg) : NULL, *e1 = e ? cg_adds(e, -1.0f) : NULL;
    cg_tensor *a = e1 ? cg_muls(e1, alpha * scale) : NULL, *px = a ? cg_muls(x, scale) : NULL;
    cg_tensor *r = px ? cg_where(le, a, px) : NULL;
    cg_release_all(8, le, pos, xi, neg, e, e1, a, px);
    return r;
}
static cg_tensor *elu_remake(cg_node *n, cg_tensor *const *s)
{
    return elu_of(s[0], n->p.f[0], 1.0f, 1.0f);
}
static cg_tensor *celu_remake(cg_node *n, cg_tensor *const *s)
{
    return elu_of(s[0], n->p.f[0], 1.0f / n->p.f[0], 1.0f);
}
static cg_tensor *selu_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    return elu_of(s[0], CG_SELU_NEG / CG_SELU_SCALE, 1.0f, CG_SELU_SCALE);
}
static cg_tensor *logsigmoid_remake(cg_node *n, cg_tensor *const *s)
{
    /* -softplus(-x) */
    (void)n;
    cg_tensor *m = cg_neg(s[0]), *sp = m ? softplus_of(m, 1.0f, 20.0f) : NULL;
    cg_tensor *r = sp ? cg_neg(sp) : NULL;
    cg_release_all(2, m, sp);
    return r;
}
static cg_tensor *tanhshrink_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *t = cg_tanh(s[0]), *r = t ? cg_sub(s[0], t) : NULL;
    cg_release(t);
    return r;
}
static cg_tensor *softsign_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *a = cg_abs(s[0]), *a1 = a ? cg_adds(a, 1.0f) : NULL;
    cg_tensor *r = a1 ? cg_div(s[0], a1) : NULL;
    cg_release_all(2, a, a1);
    return r;
}
static cg_tensor *hardswish_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *a = cg_adds(s[0], 3.0f), *c = a ? cg_clamp(a, 0.0f, 6.0f) : NULL;
    cg_tensor *m = c ? cg_mul(s[0], c) : NULL, *r = m ? cg_muls(m, 1.0f / 6.0f) : NULL;
    cg_release_all(3, a, c, m);
    return r;
}
#define REMADE_(name)                                                     \
    static bool name##_g(cg_node *n, const cg_tensor *g, cg_tensor **gin) \
    {                                                                     \
        return remade_g(n, g, gin, name##_remake);                        \
    }
REMADE_(silu)
REMADE_(gelu)
REMADE_(gelu_erf)
REMADE_(softplus)
REMADE_(mish)
REMADE_(elu)
REMADE_(celu)
REMADE_(selu)
REMADE_(logsigmoid)
REMADE_(tanhshrink)
REMADE_(softsign)
REMADE_(hardswish)

/* The pointwise losses (ops_loss.c): (x - y)^2, and the others' forms */
static cg_tensor *mse_remake(cg_node *n, cg_tensor *const *s)
{
    (void)n;
    cg_tensor *d = cg_sub(s[0], s[1]), *r = d ? cg_mul(d, d) : NULL;
    cg_release(d);
    return r;
}
REMADE_(mse)

/* Cross-entropy of logits [..., C] against int64 targets (ops_nn.c's
 * node: saved[0] the targets [N], p.i[0] ignore_index, p.f[2] the label
 * smoothing, p.i[2] the reduction, p.i[3] the class weights' slot), as
 * PyTorch 1.13 composes it with label smoothing: each kept row's
 * (1 - ls) w[t] nll + ls / C sum_c w_c (-log p_c), the mean divided by the
 * kept rows' sum of w[t] (their count without weights). */
static cg_tensor *cross_entropy_remake(cg_node *n, cg_tensor *const *s)
{
    const cg_tensor *t = n->saved[0];
    const cg_tensor *w = n->p.i[3] >= 0 ? n->saved[n->p.i[3]] : NULL;
    const int64_t ignore = n->p.i[0];
    const float ls = n->p.f[2];
    const cg_reduction r = (cg_reduction)n->p.i[2];
    const int64_t C = s[0]->shape[s[0]->ndim - 1], N = cg_numel(t);
    cg_tensor *tc = cg_k_clone(t), *wc = w ? cg_k_clone(w) : NULL;
    cg_tensor *idx = cg_empty_dtype(CG_I64, 2, (int64_t[]){N, 1});
    cg_tensor *wt = cg_empty(1, &N), *keep = cg_empty(1, &N);
    cg_tensor *out = NULL;
    if (!tc || (w && !wc) || !idx || !wt || !keep)
        goto done;
    const int64_t *td = cg_data_i64(tc);
    const float *wd = wc ? cg_data(wc) : NULL;
    int64_t *id = cg_data_i64(idx);
    float *wtd = cg_data(wt), *kd = cg_data(keep);
    double denom = 0.0;
    for (int64_t i = 0; i < N; i++) {
        const bool kept = td[i] != ignore;
        id[i] = kept ? td[i] : 0;
        kd[i] = kept ? 1.0f : 0.0f;
        wtd[i] = kept ? (wd ? wd[td[i]] : 1.0f) : 0.0f;
        denom += wtd[i];
    }
    cg_tensor *x2 = cg_reshape(s[0], 2, (int64_t[]){N, C});
    cg_tensor *lp = x2 ? cg_log_softmax(x2, 1) : NULL;
    cg_tensor *pick = lp ? cg_gather(lp, 1, idx) : NULL;
    cg_tensor *p1 = pick ? cg_reshape(pick, 1, &N) : NULL;
    cg_tensor *l = p1 ? cg_mul(p1, wt) : NULL, *row = l ? cg_muls(l, ls - 1.0f) : NULL;
    cg_release_all(5, x2, pick, p1, l, NULL);
    if (row && ls != 0.0f) { /* the smoothing term */
        const int one = 1;
        cg_tensor *lw = wc ? cg_mul(lp, wc) : cg_retain(lp);
        cg_tensor *sm = lw ? cg_sum(lw, 1, &one, false) : NULL;
        cg_tensor *smk = sm ? cg_mul(sm, keep) : NULL;
        cg_tensor *sc = smk ? cg_muls(smk, -ls / (float)C) : NULL;
        cg_tensor *sum = sc ? cg_add(row, sc) : NULL;
        cg_release_all(5, lw, sm, smk, sc, row);
        row = sum;
    }
    cg_release(lp);
    if (row && r == CG_REDUCTION_NONE)
        out = cg_reshape(row, n->out_ndim, n->out_shape);
    else if (row && r == CG_REDUCTION_SUM)
        out = cg_sum_all(row);
    else if (row) {
        cg_tensor *sum = cg_sum_all(row);
        out = sum ? cg_muls(sum, (float)(1.0 / denom)) : NULL;
        cg_release(sum);
    }
    cg_release(row);
done:
    cg_release_all(5, tc, wc, idx, wt, keep);
    return out;
}
REMADE_(cross_entropy)

/* Attention (ops_layers.c's node: q, k, v; p.i[0] causal, p.i[2] the key
 * padding's slot + 1, p.i[1] the bf16 copies' slot + 1): softmax(q k^T /
 * sqrt(dh) + mask) v, k's and v's heads repeated for grouped queries */
static cg_tensor *heads_repeated(cg_tensor *k, int64_t H)
{
    const int64_t B = k->shape[0], Hk = k->shape[1], T = k->shape[2], D = k->shape[3];
    if (Hk == H)
        return cg_retain(k);
    cg_tensor *u = cg_unsqueeze(k, 2);
    cg_tensor *e = u ? cg_expand(u, 5, (int64_t[]){B, Hk, H / Hk, T, D}) : NULL;
    cg_tensor *r = e ? cg_reshape(e, 4, (int64_t[]){B, H, T, D}) : NULL;
    cg_release_all(2, u, e);
    return r;
}
static cg_tensor *attention_remake(cg_node *n, cg_tensor *const *s)
{
    const int64_t B = s[0]->shape[0], H = s[0]->shape[1], Tq = s[0]->shape[2];
    const int64_t Tk = s[1]->shape[2], dh = s[0]->shape[3];
    const cg_tensor *kp = n->p.i[2] ? n->saved[n->p.i[2] - 1] : NULL;
    cg_tensor *mask = cg_zeros(4, (int64_t[]){B, 1, Tq, Tk}), *kpc = kp ? cg_k_clone(kp) : NULL;
    if (!mask || (kp && !kpc)) {
        cg_release_all(2, mask, kpc);
        return NULL;
    }
    float *md = cg_data(mask);
    const bool *pad = kpc ? (const bool *)cg_data_bool(kpc) : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = 0; j < Tk; j++)
                if ((n->p.i[0] && j > i) || (pad && pad[b * Tk + j]))
                    md[(b * Tq + i) * Tk + j] = -INFINITY;
    cg_tensor *k = heads_repeated(s[1], H), *v = k ? heads_repeated(s[2], H) : NULL;
    cg_tensor *kt = v ? cg_transpose(k, -1, -2) : NULL, *sc = kt ? cg_matmul(s[0], kt) : NULL;
    cg_tensor *ss = sc ? cg_muls(sc, (float)(1.0 / sqrt((double)dh))) : NULL;
    cg_tensor *sm = ss ? cg_add(ss, mask) : NULL, *p = sm ? cg_softmax(sm, -1) : NULL;
    cg_tensor *out = p ? cg_matmul(p, v) : NULL;
    cg_release_all(9, mask, kpc, k, v, kt, sc, ss, sm, p);
    return out;
}
REMADE_(attention)

/* A 1-d or 2-d convolution (ops_layers.c's node: x, w, b; p.i[0] the
 * spatial dims, p.i[1..8] stride, padding, dilation per dim, groups and
 * the padding's kind), as im2col: x padded, unfolded, and each group's
 * weight rows times its columns */
static cg_tensor *conv_remake(cg_node *n, cg_tensor *const *s)
{
    const int nd = (int)n->p.i[0];
    const int64_t *q = n->p.i + 1;
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = q[0], c.stride[1] = q[1], c.padding[0] = q[2], c.padding[1] = q[3];
    c.dilation[0] = q[4], c.dilation[1] = q[5], c.groups = q[6], c.pad = (cg_conv_pad)q[7];
    const bool batched = s[0]->ndim == nd + 2;
    cg_tensor *x = batched ? cg_retain(s[0]) : cg_unsqueeze(s[0], 0), *w = cg_retain(s[1]);
    if (x && nd == 1) { /* [N, C, L] as [N, C, 1, L] */
        cg_tensor *x4 = cg_unsqueeze(x, 2), *w4 = cg_unsqueeze(w, 2);
        cg_release_all(2, x, w);
        x = x4, w = w4;
    }
    if (!x || !w) {
        cg_release_all(2, x, w);
        return NULL;
    }
    const int64_t N = x->shape[0], O = w->shape[0], G = c.groups;
    const int64_t KH = w->shape[2], KW = w->shape[3];
    int64_t pad[4] = {0, 0, 0, 0}; /* F.pad's order: the last dim's pair first */
    cg_conv_padding(&c, nd - 1, KW, &pad[0], &pad[1]);
    if (nd == 2)
        cg_conv_padding(&c, 0, KH, &pad[2], &pad[3]);
    const bool padded = pad[0] || pad[1] || pad[2] || pad[3];
    cg_tensor *xp = padded ? cg_pad(x, 4, pad, CG_PAD_CONSTANT, 0.0f) : cg_retain(x);
    const int64_t sh = nd == 2 ? c.stride[0] : 1, sw = c.stride[nd - 1];
    const int64_t dh = nd == 2 ? c.dilation[0] : 1, dw = c.dilation[nd - 1];
    const cg_fold_cfg fc = {{KH, KW}, {dh, dw}, {0, 0}, {sh, sw}};
    cg_tensor *cols = xp ? cg_unfold(xp, &fc) : NULL, *out = NULL;
    if (cols) {
        const int64_t LH = (xp->shape[2] - dh * (KH - 1) - 1) / sh + 1;
        const int64_t LW = (xp->shape[3] - dw * (KW - 1) - 1) / sw + 1;
        const int64_t CK = cols->shape[1] / G;
        cg_tensor *cg4 = cg_reshape(cols, 4, (const int64_t[]){N, G, CK, LH * LW});
        cg_tensor *wg = cg_reshape(w, 3, (const int64_t[]){G, O / G, CK});
        cg_tensor *y = cg4 && wg ? cg_matmul(wg, cg4) : NULL;
        int64_t shape[4] = {N, O, LH, LW};
        if (nd == 1)
            shape[2] = LW;
        cg_tensor *yr = y ? cg_reshape(y, nd + 2, shape) : NULL, *yb = NULL;
        if (yr && n->n_inputs > 2 && s[2]) {
            const int64_t bs[4] = {1, O, 1, 1};
            cg_tensor *b = cg_reshape(s[2], nd + 2, bs);
            yb = b ? cg_add(yr, b) : NULL;
            cg_release(b);
        } else {
            yb = cg_retain(yr);
        }
        out = yb && !batched ? cg_squeeze(yb, 0) : cg_retain(yb);
        cg_release_all(5, cg4, wg, y, yr, yb);
    }
    cg_release_all(4, x, w, xp, cols);
    return out;
}
REMADE_(conv)

const char *cg_remade_why_not(const cg_node *n)
{
    const bool copies = (n->op == CG_OP_LINEAR && n->p.i[0] != 0) ||
                        (n->op == CG_OP_ATTENTION && n->p.i[1] != 0) ||
                        ((n->op == CG_OP_LAYER_NORM || n->op == CG_OP_RMS_NORM ||
                          n->op == CG_OP_ADD_LAYER_NORM || n->op == CG_OP_ADD_RMS_NORM) &&
                         n->saved[1] && n->saved[1]->dtype == CG_BF16);
    if (copies)
        return "kept bf16 copies of its inputs (recorded in bf16 precision; record it in "
               "float32 precision)";
    return NULL;
}

static const cg_backward_fn remade_bw[CG_OP_COUNT] = {
    [CG_OP_SILU] = silu_g,
    [CG_OP_GELU] = gelu_g,
    [CG_OP_GELU_ERF] = gelu_erf_g,
    [CG_OP_SOFTPLUS] = softplus_g,
    [CG_OP_MISH] = mish_g,
    [CG_OP_ELU] = elu_g,
    [CG_OP_CELU] = celu_g,
    [CG_OP_SELU] = selu_g,
    [CG_OP_LOGSIGMOID] = logsigmoid_g,
    [CG_OP_TANHSHRINK] = tanhshrink_g,
    [CG_OP_SOFTSIGN] = softsign_g,
    [CG_OP_HARDSWISH] = hardswish_g,
    [CG_OP_VAR] = var_g,
    [CG_OP_CROSS_ENTROPY] = cross_entropy_g,
    [CG_OP_LAYER_NORM] = norm_g,
    [CG_OP_RMS_NORM] = norm_g,
    [CG_OP_ADD_LAYER_NORM] = norm_g,
    [CG_OP_ADD_RMS_NORM] = norm_g,
    [CG_OP_ATTENTION] = attention_g,
    [CG_OP_CONV] = conv_g,
    [CG_OP_LINEAR] = linear_g,
    [CG_OP_MSE_LOSS] = mse_g,
};

cg_backward_fn cg_remade_backward_of(cg_op op)
{
    return (unsigned)op < CG_OP_COUNT ? remade_bw[op] : NULL;
}
