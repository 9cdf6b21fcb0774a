/* Differentiable layers on the fused kernels: attention, and the linear
 * layers (cg_affine, cg_affine_relu, cg_affine_residual), with what each
 * node keeps for its
 * backward: in bf16 precision the bf16 copies the products read
 * (docs/autograd.md, "Saved in bf16"). Forward and backward side by side,
 * as in ops_nn.c. */
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

/* ---------------------------------------------------------- attention */
/* Fused scaled-dot-product attention (core/attention.c): the node keeps
 * the kernel's saved state (saved[0]): the weights up to 256 keys (128 in
 * bf16 on AMX), each row's log-sum-exp beyond (the backward then
 * recomputes the weights tile by tile). Over several key blocks it needs
 * the output too (cg_k_attention_needs_out): an alias of it, in slot
 * p.i[3] - 1; otherwise the output is not read, so its memory goes with
 * its other owners: in bf16 precision the output projection keeps a bf16
 * copy instead). The backward needs the key-padding mask: the node keeps a
 * copy of it (slot p.i[2] - 1), as PyTorch's backward does not depend on
 * the caller's mask either. In bf16 precision q, k and v are read only by
 * products, which round them to bf16: a recorded attention makes their
 * bf16 copies first (cg_k_bf16_operand), its forward reads them (packed as
 * they are, not converted from floats), and its node keeps them (from
 * slot p.i[1] - 1 on) instead of q, k and v, with the same bits. */
static const cg_tensor *slot_or_null(const cg_node *n, int64_t s1)
{
    return s1 ? n->saved[s1 - 1] : NULL;
}
static bool attention_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int64_t c = n->p.i[1];
    const cg_tensor *q = c ? n->saved[c - 1] : IN(0), *k = c ? n->saved[c] : IN(1);
    const cg_tensor *v = c ? n->saved[c + 1] : IN(2);
    return cg_k_attention_backward(q, k, v, slot_or_null(n, n->p.i[3]), n->saved[0], g,
                                   n->p.i[0] != 0, slot_or_null(n, n->p.i[2]),
                                   NEEDS(0) ? &gin[0] : NULL, NEEDS(1) ? &gin[1] : NULL,
                                   NEEDS(2) ? &gin[2] : NULL);
}
/* Save t on n, its slot + 1 in *slot1; false + error. */
static bool save_slot(cg_node *n, cg_tensor *t, int64_t *slot1)
{
    const int s = t ? cg_node_save(n, t) : -1;
    if (s >= 0)
        *slot1 = s + 1;
    return s >= 0;
}
/* In bf16 precision, when the op records: q, k and v's bf16 copies into
 * c (NULL each otherwise, and for inputs that are not three float32
 * tensors: cg_k_attention judges those). False + error when a copy fails. */
static bool bf16_qkv(cg_tensor *const *in, cg_tensor **c)
{
    c[0] = c[1] = c[2] = NULL;
    bool rec = false, f32 = true;
    for (int i = 0; i < 3; i++) {
        rec |= in[i] && in[i]->requires_grad;
        f32 &= in[i] && in[i]->dtype == CG_F32;
    }
    if (!rec || !f32 || !cg_grad_enabled() || cg_get_matmul_precision() != CG_PRECISION_BF16)
        return true;
    for (int i = 0; i < 3; i++)
        if (!(c[i] = cg_k_bf16_operand(in[i]))) {
            cg_release_all(3, c[0], c[1], c[2]);
            c[0] = c[1] = c[2] = NULL;
            return false;
        }
    return true;
}
/* Keep the copies c (when made) on n instead of q, k and v. */
static bool keep_bf16_qkv(cg_node *n, cg_tensor *const *c)
{
    if (!c[0])
        return true;
    for (int i = 0; i < 3; i++) {
        const int slot = cg_node_save(n, c[i]);
        if (slot < 0)
            return false;
        if (i == 0)
            n->p.i[1] = slot + 1;
    }
    for (int i = 0; i < 3; i++)
        cg_node_set_reads(n, i, false);
    return true;
}
cg_tensor *cg_attention(cg_tensor *q, cg_tensor *k, cg_tensor *v, bool causal,
                        const cg_tensor *key_pad, cg_tensor **weights_out)
{
    if (weights_out)
        *weights_out = NULL;
    cg_tensor *saved = NULL, *w = NULL;
    cg_tensor *in[3] = {q, k, v}, *c[3];
    if (!bf16_qkv(in, c))
        return NULL;
    cg_tensor *out = cg_k_attention(c[0] ? c[0] : q, c[1] ? c[1] : k, c[2] ? c[2] : v, causal,
                                    key_pad, &saved, weights_out ? &w : NULL);
    if (!out) {
        cg_release_all(3, c[0], c[1], c[2]);
        return NULL;
    }
    cg_node *n = cg_record(out, CG_OP_ATTENTION, 3, in, attention_bw);
    bool ok = !cg_record_failed(n, 3, in);
    if (n) {
        n->p.i[0] = causal;
        cg_tensor *kp = key_pad ? cg_k_clone(key_pad) : NULL; /* the caller may change theirs */
        cg_tensor *al = cg_k_attention_needs_out(k, saved) ? cg_alias(out) : NULL;
        ok = cg_node_save(n, saved) == 0 && (!al || save_slot(n, al, &n->p.i[3])) &&
             (!key_pad || save_slot(n, kp, &n->p.i[2])) && keep_bf16_qkv(n, c);
        cg_release_all(2, kp, al);
    }
    cg_release_all(4, saved, c[0], c[1], c[2]);
    if (ok && weights_out && !(*weights_out = cg_detach(w)))
        ok = false;
    cg_release(w);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ------------------------------------------------------------- linear */
/* In bf16 precision a linear layer whose weight needs a gradient keeps x
 * rounded to bf16 as its products round it (cg_k_bf16_operand), not x:
 * half the bytes, and dW = g^T x reads it as it is, with the bits the
 * float x gave (autocast's saved activations, docs/autograd.md). The
 * forward's product reads the same copy. The node then does not read x
 * (it keeps a header: x's memory goes with its other owners), and
 * p.i[0] is the copy's slot + 1 (0: x itself is read). When x is the
 * output of a norm that makes its copy again (autograd/ops_impl.h), the
 * node keeps nothing of x between the forward and the backward
 * (p.i[0] = -1): its backward asks the norm's node, which x's header
 * holds, for the copy. */
static bool wants_bf16_copy(const cg_tensor *x, bool w_grad)
{
    return cg_get_matmul_precision() == CG_PRECISION_BF16 && cg_grad_enabled() && w_grad &&
           x->dtype == CG_F32;
}
static bool keep_bf16_copy(cg_node *n, const cg_tensor *x, cg_tensor *xb)
{
    if (cg_norm_remakes_bf16(x)) { /* xb is then the norm's copy */
        n->p.i[0] = -1;
    } else {
        const int slot = cg_node_save(n, xb);
        if (slot < 0)
            return false;
        n->p.i[0] = slot + 1;
    }
    cg_node_set_reads(n, 0, false);
    return true;
}
/* x or its bf16 copy, NULL + error when the copy cannot be made again */
static const cg_tensor *linear_x(const cg_node *n)
{
    if (n->p.i[0] < 0)
        return cg_norm_out_bf16(IN(0)->node);
    return n->p.i[0] ? n->saved[n->p.i[0] - 1] : IN(0);
}
static bool linear_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_tensor *x = linear_x(n);
    if (!x)
        return false;
    return cg_k_linear_backward(x, IN(1), g, cg_grad_acc_f32(n, 0), NEEDS(0) ? &gin[0] : NULL,
                                NEEDS(1) ? &gin[1] : NULL,
                                n->n_inputs > 2 && NEEDS(2) ? &gin[2] : NULL);
}
/* cg_affine and cg_affine_relu: the product (from x's bf16 copy when one
 * is kept; keeping the output's when keep16), ReLU applied when relu, the
 * node recorded; *xb the copy (a new reference) or NULL. NULL + error on
 * failure. */
static cg_tensor *affine_forward(cg_tensor *x, cg_tensor *w, cg_tensor *b, bool relu, bool keep16,
                                 cg_tensor **xb)
{
    *xb = NULL;
    if (wants_bf16_copy(x, w->requires_grad) && !(*xb = cg_k_bf16_operand(x)))
        return NULL;
    cg_tensor *out =
        keep16 ? cg_k_linear_keep_bf16(*xb ? *xb : x, w, b) : cg_k_linear(*xb ? *xb : x, w, b);
    if (!out || (relu && !cg_k_relu_(out))) {
        cg_release(out);
        cg_release(*xb);
        *xb = NULL;
        return NULL;
    }
    return out;
}
static cg_tensor *affine(const char *name, cg_tensor *x, cg_tensor *w, cg_tensor *b, bool keep16)
{
    if (!x || !w) {
        cg_error_null_input(name);
        return NULL;
    }
    cg_tensor *xb, *out = affine_forward(x, w, b, false, keep16, &xb);
    if (!out)
        return NULL;
    cg_tensor *in[3] = {x, w, b};
    cg_node *n = cg_record(out, CG_OP_LINEAR, b ? 3 : 2, in, linear_bw);
    const bool ok = !cg_record_failed(n, b ? 3 : 2, in) && (!n || !xb || keep_bf16_copy(n, x, xb));
    cg_release(xb);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}
cg_tensor *cg_affine(cg_tensor *x, cg_tensor *w, cg_tensor *b)
{
    return affine("cg_affine", x, w, b, false);
}
cg_tensor *cg_affine_keep_bf16(cg_tensor *x, cg_tensor *w, cg_tensor *b)
{
    return affine("cg_affine_keep_bf16", x, w, b, true);
}

/* cg_affine_pair_keep_bf16. inputs: x, w1, w2, then b1, b2 where given;
 * x's bf16 copy as cg_affine's (p.i[0]). The stacked weight [w1; w2] (and
 * bias) is made for the forward's product and again for the backward's,
 * never held between them: the node holds w1 and w2 themselves. The
 * weights' gradient is one product's, [out1 + out2, in], each weight's
 * part a view of it (as concat's backward hands out). */
static cg_tensor *stack2(const cg_tensor *a, const cg_tensor *b)
{
    return cg_k_concat((cg_tensor *[]){(cg_tensor *)a, (cg_tensor *)b}, 2, 0);
}
static bool part_of(cg_tensor *whole, int64_t start, const cg_tensor *like, cg_tensor **part)
{
    return (*part = cg_view_slice(whole, 0, start, start + like->shape[0], 1)) != NULL;
}
static bool linear_pair_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const bool dw = NEEDS(1) || NEEDS(2), db = n->n_inputs > 3 && (NEEDS(3) || NEEDS(4));
    if (!NEEDS(0) && !dw && !db)
        return true;
    const cg_tensor *x = linear_x(n);
    if (!x)
        return false;
    cg_tensor *w = stack2(IN(1), IN(2)), *gw = NULL, *gb = NULL;
    const int64_t o1 = IN(1)->shape[0];
    bool ok = w && cg_k_linear_backward(x, w, g, cg_grad_acc_f32(n, 0), NEEDS(0) ? &gin[0] : NULL,
                                        dw ? &gw : NULL, db ? &gb : NULL);
    ok = ok && (!NEEDS(1) || part_of(gw, 0, IN(1), &gin[1])) &&
         (!NEEDS(2) || part_of(gw, o1, IN(2), &gin[2])) &&
         (!db || !NEEDS(3) || part_of(gb, 0, IN(3), &gin[3])) &&
         (!db || !NEEDS(4) || part_of(gb, o1, IN(4), &gin[4]));
    cg_release_all(3, w, gw, gb);
    return ok;
}
cg_tensor *cg_affine_pair_keep_bf16(cg_tensor *x, cg_tensor *w1, cg_tensor *w2, cg_tensor *b1,
                                    cg_tensor *b2)
{
    if (!x || !w1 || !w2) {
        cg_error_null_input("cg_affine_pair_keep_bf16");
        return NULL;
    }
    if (!b1 != !b2) {
        cg_set_error("cg_affine_pair_keep_bf16: both biases or neither (got %s)",
                     b1 ? "b1 alone" : "b2 alone");
        return NULL;
    }
    const bool bad_w = w1->ndim != 2 || w2->ndim != 2 || w1->shape[1] != w2->shape[1];
    if (bad_w || (b1 && (b1->ndim != 1 || b2->ndim != 1 || b1->shape[0] != w1->shape[0] ||
                         b2->shape[0] != w2->shape[0]))) {
        char s[4][96];
        cg_set_error("cg_affine_pair_keep_bf16: need w1 [out1, in], w2 [out2, in], b1 [out1] "
                     "and b2 [out2]; got %s, %s, %s and %s",
                     cg_shape_str(w1, s[0], sizeof s[0]), cg_shape_str(w2, s[1], sizeof s[1]),
                     b1 ? cg_shape_str(b1, s[2], sizeof s[2]) : "no b1",
                     b2 ? cg_shape_str(b2, s[3], sizeof s[3]) : "no b2");
        return NULL;
    }
    const bool w_grad = w1->requires_grad || w2->requires_grad;
    cg_tensor *xb = NULL;
    if (wants_bf16_copy(x, w_grad) && !(xb = cg_k_bf16_operand(x)))
        return NULL;
    cg_tensor *w = stack2(w1, w2), *b = w && b1 ? stack2(b1, b2) : NULL;
    cg_tensor *out = w && (b || !b1) ? cg_k_linear_keep_bf16(xb ? xb : x, w, b) : NULL;
    cg_release_all(2, w, b);
    if (!out) {
        cg_release(xb);
        return NULL;
    }
    cg_tensor *in[5] = {x, w1, w2, b1, b2};
    const int ni = b1 ? 5 : 3;
    cg_node *n = cg_record(out, CG_OP_LINEAR_PAIR, ni, in, linear_pair_bw);
    bool ok = !cg_record_failed(n, ni, in);
    if (ok && n && !w_grad) /* x is read for the weights' gradient only */
        cg_node_set_reads(n, 0, false);
    ok = ok && (!n || !xb || keep_bf16_copy(n, x, xb));
    cg_release(xb);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* cg_affine_relu and cg_affine_gelu. inputs: x, w, b (may be absent);
 * saved[0]: for relu the output a = relu(h) (an alias), or in bf16
 * precision its mask a > 0 (a bool tensor: the output itself then goes
 * with its other owners, the next layer keeping its own bf16 copy); for
 * the GELUs the pre-activation h. Then x's bf16 copy (see above). p.i[1]:
 * the activation (cg_k_act). relu's backward masks g where a > 0, which is
 * where h > 0 (h NaN or <= 0 gives a = NaN or 0, masked both ways):
 * cg_relu's backward without h. */
static bool linear_act_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_tensor *x = linear_x(n);
    if (!x)
        return false;
    return cg_k_linear_act_backward(x, IN(1), (cg_k_act)n->p.i[1], n->saved[0], g,
                                    cg_grad_acc_f32(n, 0), NEEDS(0) ? &gin[0] : NULL,
                                    NEEDS(1) ? &gin[1] : NULL,
                                    n->n_inputs > 2 && NEEDS(2) ? &gin[2] : NULL);
}
static cg_tensor *affine_act(const char *name, cg_tensor *x, cg_tensor *w, cg_tensor *b,
                             cg_k_act act)
{
    if (!x || !w) {
        cg_error_null_input(name);
        return NULL;
    }
    /* in bf16 precision with a node to record: the activation (relu's
     * mask) and the output's bf16 copy (what the next product reads) made
     * as the product writes its output */
    const bool grad =
        cg_grad_enabled() && (x->requires_grad || w->requires_grad || (b && b->requires_grad));
    const bool fused = cg_get_matmul_precision() == CG_PRECISION_BF16 && grad;
    cg_tensor *xb = NULL, *saved = NULL, *out;
    if (fused && wants_bf16_copy(x, w->requires_grad) && !(xb = cg_k_bf16_operand(x)))
        return NULL;
    if (fused || act != CG_K_ACT_RELU) {
        out = cg_k_linear_act(xb ? xb : x, w, b, act, &saved);
    } else { /* relu in place over the output, saved as an alias below */
        out = affine_forward(x, w, b, true, false, &xb);
    }
    if (!out) {
        cg_release(xb);
        return NULL;
    }
    cg_tensor *in[3] = {x, w, b};
    cg_node *n = cg_record(out, act == CG_K_ACT_RELU ? CG_OP_LINEAR_RELU : CG_OP_LINEAR_GELU,
                           b ? 3 : 2, in, linear_act_bw);
    bool ok = !cg_record_failed(n, b ? 3 : 2, in);
    if (ok && n) {
        n->p.i[1] = act;
        if (!saved) /* relu's output, as an alias (no cycle through it) */
            saved = cg_alias(out);
        ok = saved && cg_node_save(n, saved) >= 0;
    }
    ok = ok && (!n || !xb || keep_bf16_copy(n, x, xb));
    cg_release_all(2, xb, saved);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}
cg_tensor *cg_affine_relu(cg_tensor *x, cg_tensor *w, cg_tensor *b)
{
    return affine_act("cg_affine_relu", x, w, b, CG_K_ACT_RELU);
}
cg_tensor *cg_affine_gelu(cg_tensor *x, cg_tensor *w, cg_tensor *b, bool exact)
{
    return affine_act("cg_affine_gelu", x, w, b, exact ? CG_K_ACT_GELU_ERF : CG_K_ACT_GELU);
}

/* cg_affine_residual. inputs: x, w, then b (p.i[3] = 1) and res where
 * given; p.i[2]: the dropout's mask slot + 1 (0: no dropout), p.f[2] its
 * p (p is a union: f[2] lies in i[1]); x's bf16 copy as cg_affine's
 * (p.i[0]). The residual's gradient is g, the product's g through the
 * dropout. */
static bool linear_residual_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int bi = n->p.i[3] ? 2 : -1, ri = n->n_inputs > 2 + (bi > 0) ? n->n_inputs - 1 : -1;
    if (ri >= 0 && NEEDS(ri))
        gin[ri] = cg_retain((cg_tensor *)g);
    const bool has_db = bi >= 0 && NEEDS(bi);
    if (!NEEDS(0) && !NEEDS(1) && !has_db)
        return true;
    const cg_tensor *x = linear_x(n);
    if (!x)
        return false;
    cg_tensor *acc = cg_grad_acc_f32(n, 0), **dx = NEEDS(0) ? &gin[0] : NULL;
    cg_tensor **dw = NEEDS(1) ? &gin[1] : NULL, **db = has_db ? &gin[bi] : NULL;
    if (n->p.i[2] > 0) /* through the dropout (in bf16, in the pass that rounds g) */
        return cg_k_linear_dropout_backward(x, IN(1), n->saved[n->p.i[2] - 1], n->p.f[2], g, acc,
                                            dx, dw, db);
    return cg_k_linear_backward(x, IN(1), g, acc, dx, dw, db);
}
cg_tensor *cg_affine_residual(cg_tensor *x, cg_tensor *w, cg_tensor *b, cg_tensor *res, float p,
                              cg_rng *rng, bool training)
{
    if (!x || !w) {
        cg_error_null_input("cg_affine_residual");
        return NULL;
    }
    const float pe = training ? p : 0.0f; /* cg_dropout: the identity unless training */
    cg_tensor *in[4] = {x, w, b ? b : res, res};
    const int ni = 2 + (b != NULL) + (res != NULL);
    bool grad = false;
    for (int i = 0; i < ni; i++)
        grad |= in[i]->requires_grad;
    grad &= cg_grad_enabled();
    cg_tensor *xb = NULL, *mask = NULL;
    if (grad && wants_bf16_copy(x, w->requires_grad) && !(xb = cg_k_bf16_operand(x)))
        return NULL;
    cg_tensor *out = cg_k_linear_residual(xb ? xb : x, w, b, res, pe, rng, grad ? &mask : NULL);
    if (!out) {
        cg_release(xb);
        return NULL;
    }
    cg_node *n = cg_record(out, CG_OP_LINEAR_RESIDUAL, ni, in, linear_residual_bw);
    bool ok = !cg_record_failed(n, ni, in);
    if (ok && n) {
        n->p.i[3] = b != NULL;
        n->p.f[2] = pe;
        ok = !mask || save_slot(n, mask, &n->p.i[2]);
    }
    ok = ok && (!n || !xb || keep_bf16_copy(n, x, xb));
    cg_release_all(2, xb, mask);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ------------------------------------------------------- convolution */
/* One node a convolution or a transposed one: x, w (both read: the
 * backward unfolds x again for dW and reads w for dx) and b. A 1-d or
 * 2-d one (CG_OP_CONV, CG_OP_CONV_TRANSPOSE): the spatial rank in p.i[0],
 * the configuration in p.i[1..9] (stride, padding, dilation per dim,
 * groups, then the padding mode of a convolution or the output padding
 * per dim of a transposed one); a 3-d one (CG_OP_CONV3D,
 * CG_OP_CONV_TRANSPOSE3D): a copy of the configuration in ctx. */
static bool conv_3d(const cg_node *n)
{
    return n->op == CG_OP_CONV3D || n->op == CG_OP_CONV_TRANSPOSE3D;
}
static cg_conv_cfg conv_cfg_of(const cg_node *n)
{
    if (conv_3d(n))
        return *(const cg_conv_cfg *)n->ctx;
    const int64_t *q = n->p.i + 1;
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = q[0], c.stride[1] = q[1], c.padding[0] = q[2], c.padding[1] = q[3];
    c.dilation[0] = q[4], c.dilation[1] = q[5], c.groups = q[6];
    if (n->op == CG_OP_CONV)
        c.pad = (cg_conv_pad)q[7];
    else
        c.output_padding[0] = q[7], c.output_padding[1] = q[8];
    return c;
}
static bool conv_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_conv_cfg c = conv_cfg_of(n);
    const bool t = n->op == CG_OP_CONV_TRANSPOSE || n->op == CG_OP_CONV_TRANSPOSE3D;
    return (t ? cg_k_conv_transpose_backward : cg_k_conv_backward)(
        conv_3d(n) ? 3 : (int)n->p.i[0], IN(0), IN(1), &c, g, NEEDS(0) ? &gin[0] : NULL,
        NEEDS(1) ? &gin[1] : NULL, n->n_inputs > 2 && NEEDS(2) ? &gin[2] : NULL);
}
static cg_tensor *conv(const char *name, int nd, cg_op op, cg_tensor *x, cg_tensor *w, cg_tensor *b,
                       const cg_conv_cfg *cfg);
/* nn.Conv's padding_mode other than zeros, as PyTorch's module runs it:
 * x padded in that mode (a pad node), then convolved without padding */
static cg_tensor *conv_padded(const char *name, int nd, cg_tensor *x, cg_tensor *w, cg_tensor *b,
                              const cg_conv_cfg *c)
{
    if (!cg_conv_cfg_check(name, nd, c))
        return NULL;
    if (w->ndim != nd + 2) { /* the kernel's taps are read below; conv() names the rest */
        cg_conv_cfg z = *c;
        z.padding_mode = CG_PAD_CONSTANT;
        return conv(name, nd, CG_OP_CONV, x, w, b, &z);
    }
    int64_t pad[6];
    for (int i = 0; i < nd; i++) { /* F.pad's order: the last dim's pair first */
        const int j = nd - 1 - i;
        cg_conv_padding(c, i, w->shape[2 + i], &pad[2 * j], &pad[2 * j + 1]);
    }
    cg_conv_cfg z = *c;
    z.padding_mode = CG_PAD_CONSTANT;
    z.pad = CG_CONV_PAD_NUMBERS;
    z.padding[0] = z.padding[1] = z.padding[2] = 0;
    cg_tensor *xp = cg_pad(x, 2 * nd, pad, c->padding_mode, 0.0f);
    cg_tensor *out = xp ? conv(name, nd, CG_OP_CONV, xp, w, b, &z) : NULL;
    cg_release(xp);
    return out;
}
static cg_tensor *conv(const char *name, int nd, cg_op op, cg_tensor *x, cg_tensor *w, cg_tensor *b,
                       const cg_conv_cfg *cfg)
{
    if (!x || !w) {
        cg_error_null_input(name);
        return NULL;
    }
    const cg_conv_cfg c = cfg ? *cfg : CG_CONV_DEFAULT;
    if (op == CG_OP_CONV && c.padding_mode != CG_PAD_CONSTANT)
        return conv_padded(name, nd, x, w, b, &c);
    /* checks every argument */
    cg_tensor *out =
        op == CG_OP_CONV ? cg_k_conv(nd, x, w, b, &c) : cg_k_conv_transpose(nd, x, w, b, &c);
    if (!out)
        return NULL;
    cg_tensor *in[3] = {x, w, b};
    const cg_op rec = nd != 3 ? op : op == CG_OP_CONV ? CG_OP_CONV3D : CG_OP_CONV_TRANSPOSE3D;
    cg_node *n = cg_record(out, rec, b ? 3 : 2, in, conv_bw);
    if (cg_record_failed(n, b ? 3 : 2, in)) {
        cg_release(out);
        return NULL;
    }
    if (n && nd == 3) {
        if (!(n->ctx = malloc(sizeof c))) {
            cg_set_error("%s: out of memory", name);
            cg_release(out);
            return NULL;
        }
        memcpy(n->ctx, &c, sizeof c);
        n->ctx_free = free;
    } else if (n) {
        const bool t = op != CG_OP_CONV;
        const int64_t q[10] = {nd,
                               c.stride[0],
                               c.stride[1],
                               c.padding[0],
                               c.padding[1],
                               c.dilation[0],
                               c.dilation[1],
                               c.groups,
                               t ? c.output_padding[0] : (int64_t)c.pad,
                               t ? c.output_padding[1] : 0};
        memcpy(n->p.i, q, sizeof q);
    }
    return out;
}
cg_tensor *cg_conv1d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg)
{
    return conv("cg_conv1d", 1, CG_OP_CONV, x, w, b, cfg);
}
cg_tensor *cg_conv2d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg)
{
    return conv("cg_conv2d", 2, CG_OP_CONV, x, w, b, cfg);
}
cg_tensor *cg_conv_transpose1d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg)
{
    return conv("cg_conv_transpose1d", 1, CG_OP_CONV_TRANSPOSE, x, w, b, cfg);
}
cg_tensor *cg_conv_transpose2d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg)
{
    return conv("cg_conv_transpose2d", 2, CG_OP_CONV_TRANSPOSE, x, w, b, cfg);
}
cg_tensor *cg_conv3d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg)
{
    return conv("cg_conv3d", 3, CG_OP_CONV, x, w, b, cfg);
}
cg_tensor *cg_conv_transpose3d(cg_tensor *x, cg_tensor *w, cg_tensor *b, const cg_conv_cfg *cfg)
{
    return conv("cg_conv_transpose3d", 3, CG_OP_CONV_TRANSPOSE, x, w, b, cfg);
}

/* ------------------------------------------------------ unfold, fold */
/* One node each, the other's kernel its backward (neither reads x's
 * values; unfold's reads x's height and width); the options in p.i[0..7]
 * (kernel_size, dilation, padding, stride per dim) */
static cg_fold_cfg fold_cfg_of(const cg_node *n)
{
    const int64_t *q = n->p.i;
    return (cg_fold_cfg){{q[0], q[1]}, {q[2], q[3]}, {q[4], q[5]}, {q[6], q[7]}};
}
static bool unfold_fold_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_fold_cfg c = fold_cfg_of(n);
    const cg_tensor *x = IN(0);
    gin[0] = n->op == CG_OP_UNFOLD ? cg_k_fold(g, x->shape[x->ndim - 2], x->shape[x->ndim - 1], &c)
                                   : cg_k_unfold(g, &c);
    return gin[0] != NULL;
}
/* out (the kernel's, which checked every argument) recorded over x */
static cg_tensor *fold_recorded(cg_tensor *x, cg_tensor *out, cg_op op, const cg_fold_cfg *c)
{
    cg_node *n;
    out = cg_recorded(out, op, 1, &x, unfold_fold_bw, &n);
    if (n) {
        const int64_t q[8] = {c->kernel_size[0], c->kernel_size[1], c->dilation[0], c->dilation[1],
                              c->padding[0],     c->padding[1],     c->stride[0],   c->stride[1]};
        memcpy(n->p.i, q, sizeof q);
    }
    return out;
}
cg_tensor *cg_unfold(cg_tensor *x, const cg_fold_cfg *cfg)
{
    if (!x) {
        cg_error_null_input("cg_unfold");
        return NULL;
    }
    cg_tensor *out = cg_k_unfold(x, cfg);
    return out ? fold_recorded(x, out, CG_OP_UNFOLD, cfg) : NULL;
}
cg_tensor *cg_fold(cg_tensor *x, int64_t oh, int64_t ow, const cg_fold_cfg *cfg)
{
    if (!x) {
        cg_error_null_input("cg_fold");
        return NULL;
    }
    cg_tensor *out = cg_k_fold(x, oh, ow, cfg);
    return out ? fold_recorded(x, out, CG_OP_FOLD, cfg) : NULL;
}
