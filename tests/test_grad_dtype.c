/* How gradients treat dtypes (issue 31): only float tensors require
 * gradients, an int64 or bool result has none, cg_to is differentiable
 * between float dtypes, and every gradient has its input's dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "testutil.h"

START_TEST(test_ints_never_require_grad)
{
    cg_tensor *ids = cg_test_ids(3, (const int64_t[]){0, 1, 2});
    CG_ASSERT_FAILS(cg_requires_grad(ids, true),
                    "requires_grad: only tensors of a float dtype can require gradients (this one "
                    "is int64)");
    cg_tensor *m = cg_test_mask(1, (int64_t[]){2}, (const uint8_t[]){1, 0});
    CG_ASSERT_FAILS(cg_requires_grad(m, true), "(this one is bool)");
    ck_assert_ptr_eq(cg_requires_grad(ids, false), ids); /* switching off is always fine */
    /* results of an int dtype carry no graph, whatever their inputs */
    cg_tensor *x = cg_requires_grad(cg_full(CG_SHAPE(2, 3), 1.0f), true);
    cg_tensor *am = cg_argmax(x, 1, false), *xi = cg_to(x, CG_I64);
    cg_tensor *xs = cg_concat((cg_tensor *[]){xi, xi}, 2, 0);
    ck_assert(!am->requires_grad && !am->node && !xi->requires_grad && !xi->node);
    ck_assert(xs && !xs->requires_grad && xs->dtype == CG_I64);
    cg_tensor *fx = cg_to(xi, CG_F32); /* back to float: still outside the graph */
    ck_assert(fx && !fx->requires_grad);
    cg_release_all(5, x, am, xi, xs, fx);
    cg_clear_error();
}
END_TEST

/* cg_to(x, bf16) then back: x*x + w in bfloat16, the gradient flowing to
 * the float32 leaves. */
static cg_tensor *through_bf16(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    cg_tensor *b = cg_to(in[0], CG_BF16), *sq = cg_mul(b, b), *w = cg_to(in[1], CG_BF16);
    cg_tensor *sum = cg_add(sq, w), *out = cg_to(sum, CG_F32);
    cg_release_all(4, b, sq, w, sum);
    return out;
}

/* cg_to(x, f32) of a bfloat16 leaf. */
static cg_tensor *from_bf16(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    cg_tensor *f = cg_to(in[0], CG_F32), *out = cg_tanh(f);
    cg_release(f);
    return out;
}

/* Gradcheck of f32 -> bf16 -> f32. bfloat16 keeps 8 significant bits, so
 * a finite difference of rounded values is mostly rounding noise. Here the
 * inputs are multiples of 1/8 up to 10/8 and the step is 1/8: x*x + w
 * stays exactly representable at x and x +- h, the central difference of
 * a quadratic is exact, and the check keeps gradcheck's float32
 * tolerances. Only the analytic side rounds (the output's gradient R
 * becomes bfloat16: 2^-9 relative), well within rtol 1e-2. */
START_TEST(test_gradcheck_to_bf16)
{
    cg_tensor *x = cg_empty(CG_SHAPE(3, 4)), *w = cg_empty(CG_SHAPE(3, 4));
    for (int i = 0; i < 12; i++) {
        cg_data(x)[i] = (float)((i * 7) % 21 - 10) / 8;
        cg_data(w)[i] = (float)((i * 5) % 25 - 12) / 8;
    }
    cg_requires_grad(x, true), cg_requires_grad(w, true);
    cg_gradcheck_opts o = cg_gradcheck_defaults();
    o.eps = 0.125, o.proj_count = 0;
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(through_bf16, NULL, 2, (cg_tensor *[]){x, w}, &o, &rep), "%s",
                  rep.message);
    ck_assert_int_eq(rep.checked, 24);
    cg_test_check_unread(through_bf16, NULL, 2, (cg_tensor *[]){x, w}, "to bf16");
    /* the gradients are float32, as the leaves */
    cg_tensor *out = through_bf16(NULL, (cg_tensor *[]){x, w});
    cg_tensor *loss = cg_sum_all(out);
    ck_assert(loss->dtype == CG_F32 && cg_backward(loss, NULL, false));
    ck_assert(x->grad->dtype == CG_F32 && w->grad->dtype == CG_F32);
    for (int i = 0; i < 12; i++) {
        ck_assert_float_eq(cg_data(x->grad)[i], 2 * cg_data(x)[i]);
        ck_assert_float_eq(cg_data(w->grad)[i], 1.0f);
    }
    cg_release_all(4, out, loss, x, w);
}
END_TEST

/* A bfloat16 leaf: its gradient is bfloat16, the exact one rounded. */
START_TEST(test_bf16_leaf_gets_bf16_grad)
{
    const float v[4] = {0.5f, -1.25f, 2.0f, 0.1f};
    cg_tensor *x32 = cg_from_data(CG_SHAPE(4), v),
              *x = cg_requires_grad(cg_k_to(x32, CG_BF16), true);
    cg_tensor *y = from_bf16(NULL, &x), *loss = cg_sum_all(y);
    ck_assert(cg_backward(loss, NULL, false));
    ck_assert(x->grad && x->grad->dtype == CG_BF16);
    for (int i = 0; i < 4; i++) {
        float xi = cg_bf16_to_f32(cg_f32_to_bf16(v[i])), t = tanhf(xi);
        float want = cg_bf16_to_f32(cg_f32_to_bf16(1 - t * t));
        ck_assert_float_eq(cg_get(x->grad, (int64_t[]){i}), want);
    }
    cg_release_all(2, y, loss);
    /* bf16 all the way: the loss is bf16, its default gradient too */
    cg_zero_grad(x);
    cg_tensor *sq = cg_mul(x, x), *l2 = cg_sum_all(sq);
    ck_assert(l2->dtype == CG_BF16 && cg_backward(l2, NULL, false));
    ck_assert(x->grad->dtype == CG_BF16);
    for (int i = 0; i < 4; i++) /* 2x, exact in bf16 for these x */
        ck_assert_float_eq(cg_get(x->grad, (int64_t[]){i}),
                           2 * cg_bf16_to_f32(cg_f32_to_bf16(v[i])));
    /* an explicit float32 gradient for a bf16 root is converted */
    cg_zero_grad(x);
    cg_tensor *g = cg_full(CG_SHAPE(4), 3.0f), *id = cg_muls(x, 1.0f);
    ck_assert(cg_backward(id, g, false));
    ck_assert(x->grad->dtype == CG_BF16 && cg_get(x->grad, (int64_t[]){0}) == 3.0f);
    cg_release_all(6, sq, l2, g, id, x, x32);
}
END_TEST

/* What docs/api.md's dtype table says of the fused ops: a linear layer
 * and attention take a bfloat16 x (q, k, v) and return float32, the same
 * values as on x's float32 copy, and x's gradient is that run's rounded to
 * bfloat16; bfloat16 weights, float16 inputs, losses and dropout are
 * refused (the norms take reduced-precision inputs:
 * test_norms_take_reduced_precision). */
static double max_diff(const cg_tensor *a, const cg_tensor *b)
{
    cg_tensor *fa = cg_k_to(a, CG_F32), *fb = cg_k_to(b, CG_F32);
    cg_tensor *ca = cg_k_contiguous(fa), *cb = cg_k_contiguous(fb);
    double m = 0;
    for (int64_t i = 0; i < cg_numel(ca); i++)
        m = fmax(m, fabs((double)cg_data(ca)[i] - cg_data(cb)[i]));
    cg_release_all(4, fa, fb, ca, cb);
    return m;
}
/* Under bf16 precision GELU keeps a float32 input rounded to bf16 for its
 * backward (autograd/ops_misc.c); a bfloat16 input is kept as it is: both
 * forms take one, as under fp32, with the same bf16 gradient (rounding it
 * again would be refused: cg_k_bf16_operand takes float32). */
START_TEST(test_gelu_of_bf16_under_bf16_precision)
{
    const float v[5] = {-2.5f, -0.75f, 0.0f, 0.3f, 1.9f};
    cg_tensor *x32 = cg_from_data(CG_SHAPE(5), v);
    for (int erf = 0; erf < 2; erf++) {
        cg_tensor *grads[2];
        for (int p = 0; p < 2; p++) {
            cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
            cg_tensor *x = cg_requires_grad(cg_k_to(x32, CG_BF16), true);
            cg_tensor *y = erf ? cg_gelu_erf(x) : cg_gelu(x);
            ck_assert_msg(y, "gelu%s, precision %d: %s", erf ? "_erf" : "", p, cg_last_error());
            cg_tensor *l = cg_sum_all(y);
            ck_assert(cg_backward(l, NULL, false));
            grads[p] = cg_retain(x->grad);
            cg_release_all(3, x, y, l);
        }
        cg_set_matmul_precision(CG_PRECISION_FP32);
        ck_assert_int_eq(grads[1]->dtype, CG_BF16);
        ck_assert(max_diff(grads[0], grads[1]) == 0);
        cg_release_all(2, grads[0], grads[1]);
    }
    cg_release(x32);
}
END_TEST

enum { FUSED_AFFINE, FUSED_GELU, FUSED_ATTENTION };
static cg_tensor *fused_op(int which, cg_tensor *const *in, cg_tensor *w, cg_tensor *b)
{
    switch (which) {
    case FUSED_AFFINE: return cg_affine(in[0], w, b);
    case FUSED_GELU: return cg_affine_gelu(in[0], w, b, true);
    default: return cg_attention(in[0], in[1], in[2], true, NULL, NULL);
    }
}
START_TEST(test_fused_ops_take_bf16_inputs)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *w = cg_randn(&r, CG_SHAPE(6, 8)), *b = cg_randn(&r, CG_SHAPE(6));
    for (int which = FUSED_AFFINE; which <= FUSED_ATTENTION; which++) {
        int n = which == FUSED_ATTENTION ? 3 : 1;
        cg_tensor *x[3] = {0}, *xf[3] = {0};
        for (int i = 0; i < n; i++) {
            cg_tensor *v =
                n == 3 ? cg_randn(&r, CG_SHAPE(2, 2, 5, 4)) : cg_randn(&r, CG_SHAPE(5, 8));
            x[i] = cg_requires_grad(cg_k_to(v, CG_BF16), true);
            xf[i] = cg_requires_grad(cg_k_to(x[i], CG_F32), true); /* the same values */
            cg_release(v);
        }
        cg_tensor *y = fused_op(which, x, w, b), *yf = fused_op(which, xf, w, b);
        ck_assert_msg(y && yf, "op %d: %s", which, cg_last_error());
        ck_assert_int_eq(y->dtype, CG_F32);
        ck_assert(max_diff(y, yf) == 0);
        cg_tensor *s = cg_sum_all(y), *sf = cg_sum_all(yf);
        ck_assert(cg_backward(s, NULL, false) && cg_backward(sf, NULL, false));
        for (int i = 0; i < n; i++) {
            cg_tensor *g = cg_k_to(cg_grad(xf[i]), CG_BF16);
            ck_assert_int_eq(cg_grad(x[i])->dtype, CG_BF16);
            ck_assert_msg(max_diff(cg_grad(x[i]), g) == 0, "op %d, input %d", which, i);
            cg_release(g);
        }
        cg_release_all(4, y, yf, s, sf);
        for (int i = 0; i < n; i++)
            cg_release_all(2, x[i], xf[i]);
    }
    cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 8)), *xh = cg_k_to(x, CG_F16),
              *xb = cg_k_to(x, CG_BF16), *wb = cg_k_to(w, CG_BF16);
    CG_ASSERT_REFUSED(cg_affine(x, wb, b) == NULL, "linear: argument 2 is bfloat16");
    CG_ASSERT_REFUSED(cg_affine(xh, w, b) == NULL, "linear: argument 1 is float16");
    cg_rng dr = cg_rng_new(1);
    CG_ASSERT_REFUSED(cg_dropout(xb, 0.5f, &dr, true) == NULL, "dropout: argument 1 is bfloat16");
    cg_release_all(6, w, b, x, xh, xb, wb);
}
END_TEST

/* cg_scaled_dot_product_attention with a mask (the ops one by one, not the
 * fused kernel) takes q, k and v as the fused kernel does: bfloat16 ones
 * give a float32 result, the values of their float32 copies, and bfloat16
 * gradients (the result was bfloat16 under a bool mask, computed from
 * bfloat16 scores), float16 ones are refused (they were taken). */
START_TEST(test_masked_sdpa_dtypes)
{
    cg_scope *sc = cg_scope_begin();
    cg_rng r = cg_rng_new(9);
    const uint8_t pad[9] = {0, 1, 0, 0, 0, 1, 1, 0, 0};
    cg_tensor *masks[2] = {cg_test_mask(2, (int64_t[]){3, 3}, pad), cg_randn(&r, CG_SHAPE(3, 3))};
    for (int m = 0; m < 2; m++) {
        cg_tensor *x[3], *xf[3];
        for (int i = 0; i < 3; i++) {
            x[i] = cg_requires_grad(cg_k_to(cg_randn(&r, CG_SHAPE(1, 2, 3, 4)), CG_BF16), true);
            xf[i] = cg_requires_grad(cg_k_to(x[i], CG_F32), true);
        }
        cg_tensor *y = cg_scaled_dot_product_attention(x[0], x[1], x[2], masks[m], NULL);
        cg_tensor *yf = cg_scaled_dot_product_attention(xf[0], xf[1], xf[2], masks[m], NULL);
        ck_assert_msg(y && yf, "mask %d: %s", m, cg_last_error());
        ck_assert_int_eq(y->dtype, CG_F32);
        ck_assert(max_diff(y, yf) == 0);
        ck_assert(cg_backward(cg_sum_all(cg_mul(y, y)), NULL, false));
        ck_assert(cg_backward(cg_sum_all(cg_mul(yf, yf)), NULL, false));
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(cg_grad(x[i])->dtype, CG_BF16);
            ck_assert_msg(max_diff(cg_grad(x[i]), cg_k_to(cg_grad(xf[i]), CG_BF16)) == 0,
                          "mask %d, input %d", m, i);
        }
        cg_tensor *h = cg_k_to(x[0], CG_F16);
        CG_ASSERT_REFUSED(
            cg_scaled_dot_product_attention(h, xf[1], xf[2], masks[m], NULL) == NULL,
            "attention: argument 1 is float16, expected float32 (convert with cg_to)");
        CG_ASSERT_REFUSED(cg_scaled_dot_product_attention(xf[0], xf[1], h, masks[m], NULL) == NULL,
                          "attention: argument 3 is float16");
    }
    cg_scope_end(sc);
}
END_TEST

/* A norm's refusal of a bfloat16 or float16 weight or bias names the
 * argument as the caller counts them: layer_norm(x, w, b) and rms_norm(x,
 * w) have no addend (they said "argument 3" of w, "argument 4" of b, the
 * places they have in add_layer_norm(x, y, w, b)). */
START_TEST(test_norm_refusals_name_the_argument)
{
    cg_scope *sc = cg_scope_begin();
    cg_rng r = cg_rng_new(6);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 4)), *w = cg_randn(&r, CG_SHAPE(4));
    cg_tensor *wb = cg_k_to(w, CG_BF16), *wh = cg_k_to(w, CG_F16);
    CG_ASSERT_REFUSED(cg_layer_norm(x, wb, NULL, 1e-5f) == NULL,
                      "layer_norm: argument 2 is bfloat16, expected float32 (convert with cg_to)");
    CG_ASSERT_REFUSED(cg_layer_norm(x, w, wh, 1e-5f) == NULL, "layer_norm: argument 3 is float16");
    CG_ASSERT_REFUSED(cg_rms_norm(x, wh, 1e-5f) == NULL, "rms_norm: argument 2 is float16");
    CG_ASSERT_REFUSED(cg_add_layer_norm(x, x, w, wb, 1e-5f) == NULL,
                      "add_layer_norm: argument 4 is bfloat16");
    CG_ASSERT_REFUSED(cg_add_rms_norm(x, x, wb, 1e-5f) == NULL,
                      "add_rms_norm: argument 3 is bfloat16");
    cg_scope_end(sc);
}
END_TEST

/* LayerNorm and RMSNorm, alone or after an add, take a bfloat16 or
 * float16 x (and addend): computed in float32, the output and x's
 * gradient in x's dtype, the bits of the float32 run on x widened,
 * rounded; the weight's and bias's gradients float32, the same bits (as
 * PyTorch's CPU kernels compute reduced precision; its layer_norm wants
 * the weight in x's dtype, ours are float32 parameters). Under bf16
 * precision the same bits: x-hat is kept in bf16 only for a float32 x. An
 * int64 x is refused. */
static cg_tensor *norm_of(int op, cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *b)
{
    switch (op) {
    case 0: return cg_layer_norm(x, w, b, 1e-5f);
    case 1: return cg_rms_norm(x, w, 1e-5f);
    case 2: return cg_add_layer_norm(x, y, w, b, 1e-5f);
    default: return cg_add_rms_norm(x, y, w, 1e-5f);
    }
}
START_TEST(test_norms_take_reduced_precision)
{
    cg_scope *sc = cg_scope_begin();
    cg_rng r = cg_rng_new(12);
    for (int op = 0; op < 4; op++)
        for (int d = 0; d < 2; d++)
            for (int p = 0; p < 2; p++) {
                const cg_dtype dt = d ? CG_F16 : CG_BF16;
                cg_tensor *v = cg_randn(&r, CG_SHAPE(2, 5, 8)),
                          *u = cg_randn(&r, CG_SHAPE(2, 5, 8));
                cg_tensor *gv = cg_k_to(cg_randn(&r, CG_SHAPE(2, 5, 8)), dt);
                cg_tensor *x[2], *y[2], *w[2], *b[2], *out[2];
                cg_tensor *w0 = cg_randn(&r, CG_SHAPE(8)), *b0 = cg_randn(&r, CG_SHAPE(8));
                for (int k = 0; k < 2; k++) { /* k 0: the reduced dtype, 1: float32 */
                    x[k] = cg_requires_grad(cg_k_to(k ? x[0] : v, k ? CG_F32 : dt), true);
                    y[k] = cg_requires_grad(cg_k_to(k ? y[0] : u, k ? CG_F32 : dt), true);
                    w[k] = cg_requires_grad(cg_clone(w0), true);
                    b[k] = cg_requires_grad(cg_clone(b0), true);
                    /* the float32 reference under fp32: its bf16 path keeps x-hat */
                    const cg_precision prev =
                        cg_autocast_begin(p && !k ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
                    out[k] = norm_of(op, x[k], y[k], w[k], b[k]);
                    ck_assert_msg(out[k], "op %d dtype %d: %s", op, d, cg_last_error());
                    cg_tensor *g = k ? cg_k_to(gv, CG_F32) : cg_retain(gv);
                    ck_assert(cg_backward(out[k], g, false));
                    cg_autocast_end(prev);
                    cg_release(g);
                }
                const char *what = op < 2 ? "" : " (add)";
                ck_assert_int_eq(out[0]->dtype, dt);
                ck_assert_int_eq(cg_grad(x[0])->dtype, dt);
                ck_assert_msg(max_diff(out[0], cg_k_to(out[1], dt)) == 0, "op %d%s dtype %d", op,
                              what, d);
                ck_assert_msg(max_diff(cg_grad(x[0]), cg_k_to(cg_grad(x[1]), dt)) == 0,
                              "op %d dx, dtype %d, precision %d", op, d, p);
                if (op >= 2)
                    ck_assert(max_diff(cg_grad(y[0]), cg_k_to(cg_grad(y[1]), dt)) == 0);
                ck_assert_int_eq(cg_grad(w[0])->dtype, CG_F32);
                ck_assert(max_diff(cg_grad(w[0]), cg_grad(w[1])) == 0);
                if (op % 2 == 0)
                    ck_assert(max_diff(cg_grad(b[0]), cg_grad(b[1])) == 0);
                /* a second backward adds into x's bfloat16 gradient */
                cg_tensor *once = cg_clone(cg_grad(x[0])), *twice = cg_add(once, once);
                cg_tensor *again = norm_of(op, x[0], y[0], w[0], b[0]);
                ck_assert_msg(again && cg_backward(again, gv, false), "op %d: %s", op,
                              cg_last_error());
                ck_assert(max_diff(cg_grad(x[0]), twice) == 0);
            }
    /* core's backward alone: dx in x's dtype */
    cg_tensor *xb = cg_k_to(cg_randn(&r, CG_SHAPE(3, 8)), CG_BF16), *m, *rs, *dx;
    cg_tensor *o = cg_k_layer_norm(xb, NULL, NULL, 1e-5f, &m, &rs);
    ck_assert(o && cg_k_layer_norm_backward(xb, NULL, m, rs, o, NULL, &dx, NULL, NULL));
    ck_assert_int_eq(o->dtype, CG_BF16);
    ck_assert_int_eq(dx->dtype, CG_BF16);
    cg_tensor *xi = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 8));
    CG_ASSERT_REFUSED(cg_layer_norm(xi, NULL, NULL, 1e-5f) == NULL,
                      "layer_norm: argument 1 is int64, expected a float tensor (float32, "
                      "bfloat16 or float16)");
    CG_ASSERT_REFUSED(cg_add_rms_norm(cg_zeros(CG_SHAPE(2, 8)), xi, NULL, 1e-5f) == NULL,
                      "add_rms_norm: argument 2 is int64");
    cg_scope_end(sc);
}
END_TEST

/* The ops whose backward scatters (max, topk, index_select, embedding,
 * gather) take bf16 and f16 inputs forward, so their backward must give
 * those inputs a gradient of their dtype: it was refused ("scatter_add_:
 * argument 'dst' is bfloat16, expected float32"). And the max of a 0-d
 * tensor (dim 0 or -1, as torch.max takes) is the tensor: its backward
 * was refused too. Gradients against PyTorch: tests/interop/check_ops.c. */
START_TEST(test_scatter_backwards_of_bf16)
{
    cg_scope *sc = cg_scope_begin(); /* everything below dies with it */
    for (int d = 0; d < 2; d++) {
        cg_dtype dt = d ? CG_F16 : CG_BF16;
        cg_tensor *x32 = cg_from_data(CG_SHAPE(2, 3), (float[]){1, 5, 2, 7, 3, 4});
        cg_tensor *x = cg_requires_grad(cg_k_to(x32, dt), true);
        cg_tensor *ids = cg_test_ids(3, (const int64_t[]){1, 0, 1});
        cg_tensor *outs[4] = {cg_max(x, 1, false, NULL), cg_topk(x, 2, 1, true, NULL),
                              cg_index_select(x, 0, ids), cg_embedding(x, ids)};
        for (int i = 0; i < 4; i++) {
            cg_zero_grad(x);
            cg_tensor *o = outs[i], *u = o ? cg_full_dtype(o->dtype, o->ndim, o->shape, 1) : NULL;
            ck_assert_msg(u && cg_backward(o, u, false), "op %d: %s", i, cg_last_error());
            ck_assert(cg_grad(x) && cg_grad(x)->dtype == dt);
            if (i == 0) { /* max of row 0 is at 1, of row 1 at 0 */
                cg_tensor *g = cg_k_to(cg_grad(x), CG_F32);
                float want[6] = {0, 1, 0, 1, 0, 0};
                for (int j = 0; j < 6; j++)
                    ck_assert_float_eq(cg_data(g)[j], want[j]);
            }
        }
    }
    cg_tensor *s = cg_requires_grad(cg_scalar(2.5f), true), *m = cg_max(s, 0, false, NULL);
    ck_assert_msg(m && cg_backward(m, NULL, false), "%s", cg_last_error());
    ck_assert_float_eq(cg_item(cg_grad(s)), 1.0f);
    cg_scope_end(sc);
}
END_TEST

/* cg_stack takes bfloat16 inputs as cg_concat does: all bfloat16, a
 * bfloat16 result; with a float32 input, promoted to float32. Each
 * input's gradient is its slice in the input's dtype, an input given
 * twice the sum of its two. */
START_TEST(test_stack_of_bf16)
{
    cg_scope *sc = cg_scope_begin();                /* everything below dies with it */
    const float v[6] = {1, -2, 0.5f, 3, 4, -0.25f}; /* bfloat16 holds them */
    cg_tensor *a = cg_requires_grad(cg_k_to(cg_from_data(CG_SHAPE(2, 3), v), CG_BF16), true);
    cg_tensor *b = cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), v), true);
    cg_tensor *s = cg_stack((cg_tensor *[]){a, b, a}, 3, -1); /* [2, 3, 3] */
    ck_assert_msg(s && s->dtype == CG_F32 && s->ndim == 3, "%s", cg_last_error());
    CG_ASSERT_TENSOR(s,
                     ((float[]){1, 1, 1, -2, -2, -2, 0.5f, 0.5f, 0.5f, 3, 3, 3, 4, 4, 4, -0.25f,
                                -0.25f, -0.25f}),
                     0, 0);
    cg_tensor *g = cg_reshape(cg_arange(1, 19, 1), CG_SHAPE(2, 3, 3));
    ck_assert_msg(cg_backward(s, g, false), "%s", cg_last_error());
    ck_assert(cg_grad(a)->dtype == CG_BF16 && cg_grad(b)->dtype == CG_F32);
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){1 + 3, 4 + 6, 7 + 9, 10 + 12, 13 + 15, 16 + 18}), 0, 0);
    CG_ASSERT_TENSOR(cg_grad(b), ((float[]){2, 5, 8, 11, 14, 17}), 0, 0);
    cg_zero_grad(a);
    cg_tensor *s16 = cg_stack((cg_tensor *[]){a, a}, 2, 0);
    ck_assert_msg(s16 && s16->dtype == CG_BF16, "%s", cg_last_error());
    ck_assert(cg_backward(s16, cg_full_dtype(CG_BF16, s16->ndim, s16->shape, 1), false));
    ck_assert(cg_grad(a)->dtype == CG_BF16);
    CG_ASSERT_TENSOR(cg_grad(a), ((float[]){2, 2, 2, 2, 2, 2}), 0, 0);
    cg_scope_end(sc);
}
END_TEST

static Suite *grad_dtype_suite(void)
{
    Suite *s = suite_create("grad_dtype");
    TCase *tc = tcase_create("autograd");
    tcase_add_test(tc, test_ints_never_require_grad);
    tcase_add_test(tc, test_gradcheck_to_bf16);
    tcase_add_test(tc, test_bf16_leaf_gets_bf16_grad);
    tcase_add_test(tc, test_fused_ops_take_bf16_inputs);
    tcase_add_test(tc, test_gelu_of_bf16_under_bf16_precision);
    tcase_add_test(tc, test_masked_sdpa_dtypes);
    tcase_add_test(tc, test_norm_refusals_name_the_argument);
    tcase_add_test(tc, test_norms_take_reduced_precision);
    tcase_add_test(tc, test_scatter_backwards_of_bf16);
    tcase_add_test(tc, test_stack_of_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {grad_dtype_suite()};
    return cg_test_run(s, 1);
}
