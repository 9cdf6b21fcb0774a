/* Check suite "gated": SiLU and the gated activations of a gated
 * feed-forward (cg_swiglu, cg_geglu: core/gated.c; nn/layers.h's silu,
 * swiglu and geglu rows and cg_ff's fc3).
 *
 * The forward against float64 values computed here from the formulas
 * (x sigmoid(x), GELU's tanh form), fp32 and bf16 (rounded once: within
 * half an ulp of bf16 of the float64 value of the bf16 inputs); the
 * gradchecks, contiguous and on the two halves of one tensor (strided
 * views; the halves op's bits equal the two-tensor op's); bfloat16
 * operands read in place with their float32 widenings' bits; the bits at 1
 * and 2 threads; the FeedForward's parameters, its output against the
 * unfused ops and its gradcheck, with a hook on fc3 too (the two products'
 * path); the table's rows; bad inputs refused, each with its message. The
 * PyTorch reference is tests/interop/swiglu.py (torch_swiglu). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "nn/layers.h"
#include "tests/testutil.h"

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    return a && b && cg_numel(a) == cg_numel(b) &&
           !memcmp(cg_data_ptr(a), cg_data_ptr(b), (size_t)cg_numel(a) * cg_dtype_size(a->dtype));
}

static double ref_act(int gelu, double x)
{
    if (!gelu)
        return x / (1.0 + exp(-x));
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}
static double ref_grad(int gelu, double x)
{
    const double h = 1e-5;
    if (!gelu) {
        const double s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 + x * (1.0 - s));
    }
    return (ref_act(1, x + h) - ref_act(1, x - h)) / (2 * h);
}

/* out, da and db of act(a) * b against float64, within atol + rtol |ref| */
static void check_values(int gelu, cg_tensor *a, cg_tensor *b, double rtol, double atol)
{
    cg_tensor *g = cg_randn(&(cg_rng){0}, a->ndim, a->shape);
    cg_tensor *gd = a->dtype == CG_F32 ? cg_retain(g) : cg_k_to(g, a->dtype);
    cg_tensor *out = cg_k_gated(a, b, gelu ? CG_K_GATE_GELU : CG_K_GATE_SILU), *da, *db;
    ck_assert_msg(out && out->dtype == a->dtype, "%s", cg_last_error());
    ck_assert(cg_k_gated_backward(a, b, gd, gelu ? CG_K_GATE_GELU : CG_K_GATE_SILU, &da, &db));
    float *av = cg_test_values(a), *bv = cg_test_values(b), *gv = cg_test_values(gd);
    float *ov = cg_test_values(out), *dav = cg_test_values(da), *dbv = cg_test_values(db);
    const int64_t n = cg_numel(a);
    for (int64_t i = 0; i < n; i++) {
        const double x = av[i], y = bv[i], gg = gv[i];
        const double want[3] = {ref_act(gelu, x) * y, gg * y * ref_grad(gelu, x),
                                gg * ref_act(gelu, x)};
        const float got[3] = {ov[i], dav[i], dbv[i]};
        for (int k = 0; k < 3; k++)
            ck_assert_msg(fabs(got[k] - want[k]) <= atol + rtol * fabs(want[k]),
                          "%s %d at %lld: %.9g vs %.9g (x %g)", gelu ? "geglu" : "swiglu", k,
                          (long long)i, got[k], want[k], x);
    }
    free(av), free(bv), free(gv), free(ov), free(dav), free(dbv);
    cg_release_all(5, g, gd, out, da, db);
}

START_TEST(test_gated_forward_f64)
{
    cg_rng r = cg_rng_new(7);
    for (int gelu = 0; gelu < 2; gelu++) {
        const int64_t shapes[2][2] = {{3, 37}, {70, 1000}}; /* one run; many, threaded */
        for (int s = 0; s < 2; s++) {
            cg_tensor *a = cg_randn(&r, 2, shapes[s]), *b = cg_randn(&r, 2, shapes[s]);
            cg_k_muls_(a, 3.0f); /* into sigmoid's tails */
            check_values(gelu, a, b, 2e-6, 1e-6);
            cg_release_all(2, a, b);
        }
        /* strided inputs: the two halves of one tensor, a half within a
         * run (512) and across one */
        for (int w = 0; w < 2; w++) {
            const int64_t n = w ? 700 : 9;
            cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 2 * n));
            cg_tensor *a = cg_narrow(x, 1, 0, n), *b = cg_narrow(x, 1, n, n);
            check_values(gelu, a, b, 2e-6, 1e-6);
            /* the halves op: the two-tensor op's bits, forward and backward */
            const cg_k_gate k = gelu ? CG_K_GATE_GELU : CG_K_GATE_SILU;
            cg_tensor *y2 = cg_k_gated(a, b, k), *yh = cg_k_gated_halves(x, k), *da, *db;
            ck_assert_msg(same_bits(y2, yh), "width %lld", (long long)n);
            ck_assert(cg_k_gated_backward(a, b, y2, k, &da, &db));
            cg_tensor *dh = cg_k_gated_halves_backward(x, y2, k);
            cg_tensor *dha = cg_narrow(dh, 1, 0, n), *dhb = cg_narrow(dh, 1, n, n);
            cg_tensor *dhac = cg_k_contiguous(dha), *dhbc = cg_k_contiguous(dhb);
            ck_assert_msg(same_bits(da, dhac) && same_bits(db, dhbc), "width %lld", (long long)n);
            cg_release_all(11, x, a, b, y2, yh, da, db, dh, dha, dhb, dhac);
            cg_release(dhbc);
        }
    }
}
END_TEST

START_TEST(test_gated_bf16)
{
    cg_rng r = cg_rng_new(8);
    for (int gelu = 0; gelu < 2; gelu++) {
        cg_tensor *a32 = cg_randn(&r, CG_SHAPE(33, 65)), *b32 = cg_randn(&r, CG_SHAPE(33, 65));
        cg_k_muls_(a32, 3.0f);
        cg_tensor *a = cg_k_to(a32, CG_BF16), *b = cg_k_to(b32, CG_BF16);
        /* one rounding to bf16: half an ulp, at most 2^-8 relative, of the
         * float64 value of the bf16 inputs (and float32's own error below it) */
        check_values(gelu, a, b, 1.0 / 256 + 1e-5, 1e-6);
        cg_release_all(4, a32, b32, a, b);
    }
}
END_TEST

/* x rounded to bfloat16, and *widened its float32 widening */
static cg_tensor *rounded(const cg_tensor *x, cg_tensor **widened)
{
    cg_tensor *b = cg_k_to(x, CG_BF16);
    *widened = cg_k_to(b, CG_F32);
    return b;
}
/* x's values in a strided view: a transposed view (dims d0, d1) of its
 * transpose's contiguous copy */
static cg_tensor *strided_like(cg_tensor *x, int d0, int d1)
{
    cg_tensor *t = cg_transpose(x, d0, d1), *c = cg_k_contiguous(t), *v = cg_transpose(c, d0, d1);
    cg_release_all(2, t, c);
    ck_assert(!cg_is_contiguous(v));
    return v;
}

/* A bfloat16 h is read as it is, its runs widened as they are read (no
 * float copy of h): the bits of its float32 widening, forward and
 * backward, at widths within, at and across a run (512); the gradient is
 * float32 unless g is bfloat16 too (PyTorch's promotion), and a strided
 * bfloat16 h gives the same. */
START_TEST(test_gated_halves_bf16_input)
{
    cg_rng r = cg_rng_new(14);
    const int64_t widths[3] = {5, 512, 700};
    for (int v = 0; v < 6; v++) {
        const cg_k_gate act = v & 1 ? CG_K_GATE_GELU : CG_K_GATE_SILU;
        const int64_t n = widths[v / 2];
        cg_tensor *h32 = cg_randn(&r, CG_SHAPE(3, 2, 2 * n)), *g = cg_randn(&r, CG_SHAPE(3, 2, n));
        cg_k_muls_(h32, 3.0f);
        cg_tensor *hw, *gw, *hb = rounded(h32, &hw), *gb = rounded(g, &gw);
        cg_tensor *y = cg_k_gated_halves(hb, act), *yw = cg_k_gated_halves(hw, act);
        cg_tensor *ywb = cg_k_to(yw, CG_BF16);
        ck_assert(y->dtype == CG_BF16 && same_bits(y, ywb));
        cg_tensor *d = cg_k_gated_halves_backward(hb, g, act);
        cg_tensor *dw = cg_k_gated_halves_backward(hw, g, act);
        ck_assert(d->dtype == CG_F32 && same_bits(d, dw));
        cg_tensor *d16 = cg_k_gated_halves_backward(hb, gb, act);
        cg_tensor *dw16 = cg_k_gated_halves_backward(hw, gw, act), *want16 = cg_k_to(dw16, CG_BF16);
        ck_assert(d16->dtype == CG_BF16 && same_bits(d16, want16));
        /* a float32 h with a bfloat16 g: float32, g's widening's bits */
        cg_tensor *d32 = cg_k_gated_halves_backward(hw, gb, act);
        ck_assert(d32->dtype == CG_F32 && same_bits(d32, dw16));
        /* the same h strided (a copy is read) */
        cg_tensor *hv = strided_like(hb, 1, 2), *dv = cg_k_gated_halves_backward(hv, g, act);
        ck_assert(same_bits(dv, dw));
        cg_release_all(11, h32, g, hb, hw, gb, gw, y, yw, ywb, d, dw);
        cg_release_all(6, d16, dw16, want16, d32, hv, dv);
    }
}
END_TEST

/* The two-tensor form's bfloat16 operands are read as they are too, a
 * run at a time widened: the bits of their float32 widenings (outputs
 * rounded once to a's dtype), a gradient g float32 or bfloat16, at sizes
 * within, at and across a run (512), and from strided views (copied). */
START_TEST(test_gated_bf16_input)
{
    cg_rng r = cg_rng_new(15);
    const int64_t widths[3] = {5, 512, 700};
    for (int v = 0; v < 6; v++) {
        const cg_k_gate act = v & 1 ? CG_K_GATE_GELU : CG_K_GATE_SILU;
        const int64_t n = widths[v / 2];
        cg_tensor *a32 = cg_randn(&r, CG_SHAPE(3, n)), *b32 = cg_randn(&r, CG_SHAPE(3, n));
        cg_tensor *g = cg_randn(&r, CG_SHAPE(3, n));
        cg_k_muls_(a32, 3.0f);
        cg_tensor *aw, *bw, *gw;
        cg_tensor *ab = rounded(a32, &aw), *bb = rounded(b32, &bw), *gb = rounded(g, &gw);
        cg_tensor *y = cg_k_gated(ab, bb, act), *yw = cg_k_gated(aw, bw, act);
        cg_tensor *ywb = cg_k_to(yw, CG_BF16);
        ck_assert(y->dtype == CG_BF16 && same_bits(y, ywb));
        for (int gi = 0; gi < 2; gi++) { /* g float32, then bfloat16 */
            cg_tensor *da, *db, *daw, *dbw;
            ck_assert(cg_k_gated_backward(ab, bb, gi ? gb : g, act, &da, &db));
            ck_assert(cg_k_gated_backward(aw, bw, gi ? gw : g, act, &daw, &dbw));
            cg_tensor *want_a = cg_k_to(daw, CG_BF16), *want_b = cg_k_to(dbw, CG_BF16);
            ck_assert(da->dtype == CG_BF16 && same_bits(da, want_a) && same_bits(db, want_b));
            cg_release_all(6, da, db, daw, dbw, want_a, want_b);
        }
        /* a and b strided (copied) */
        cg_tensor *va = strided_like(ab, 0, 1), *vb = strided_like(bb, 0, 1);
        cg_tensor *yv = cg_k_gated(va, vb, act);
        ck_assert(same_bits(yv, y));
        cg_release_all(12, a32, b32, g, ab, bb, gb, aw, bw, gw, y, yw, ywb);
        cg_release_all(3, va, vb, yv);
    }
}
END_TEST

static cg_tensor *gate_fn(void *ctx, cg_tensor *const *in)
{
    return (*(int *)ctx ? cg_geglu : cg_swiglu)(in[0], in[1]);
}
static cg_tensor *halves_fn(void *ctx, cg_tensor *const *in)
{
    return cg_activation(in[0], *(int *)ctx ? CG_ACT_GEGLU : CG_ACT_SWIGLU);
}
/* the two-tensor op on two strided views of one tensor */
static cg_tensor *views_fn(void *ctx, cg_tensor *const *in)
{
    const int64_t w = in[0]->shape[1] / 2;
    cg_tensor *a = cg_narrow(in[0], 1, 0, w), *b = cg_narrow(in[0], 1, w, w);
    cg_tensor *y = (*(int *)ctx ? cg_geglu : cg_swiglu)(a, b);
    cg_release_all(2, a, b);
    return y;
}
static cg_tensor *silu_fn(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_activation(in[0], CG_ACT_SILU);
}

START_TEST(test_gated_gradcheck)
{
    cg_rng r = cg_rng_new(9);
    for (int gelu = 0; gelu < 2; gelu++) {
        cg_tensor *in[2] = {cg_randn(&r, CG_SHAPE(2, 3, 5)), cg_randn(&r, CG_SHAPE(2, 3, 5))};
        in[0]->requires_grad = in[1]->requires_grad = true;
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(gate_fn, &gelu, 2, in, NULL, &rep), "%s", rep.message);
        /* only b needs a gradient: da is not made */
        in[0]->requires_grad = false;
        ck_assert_msg(cg_gradcheck(gate_fn, &gelu, 2, in, NULL, &rep), "%s", rep.message);
        cg_release_all(2, in[0], in[1]);
        /* the halves of one tensor (strided views), and a transposed layout */
        for (int kind = 0; kind < 2; kind++) {
            cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(6, 8), kind);
            x->requires_grad = true;
            ck_assert_msg(cg_gradcheck(halves_fn, &gelu, 1, &x, NULL, &rep), "%s", rep.message);
            ck_assert_msg(cg_gradcheck(views_fn, &gelu, 1, &x, NULL, &rep), "%s", rep.message);
            cg_release(x);
        }
    }
    cg_tensor *x = cg_randn(&r, CG_SHAPE(4, 7));
    x->requires_grad = true;
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(silu_fn, NULL, 1, &x, NULL, &rep), "%s", rep.message);
    cg_release(x);
}
END_TEST

START_TEST(test_gated_threads)
{
    cg_rng r = cg_rng_new(10);
    const int saved = cg_get_num_threads();
    for (int dt = 0; dt < 2; dt++) {
        cg_tensor *a0 = cg_randn(&r, CG_SHAPE(64, 3000)), *b0 = cg_randn(&r, CG_SHAPE(64, 3000));
        cg_tensor *a = cg_k_to(a0, dt ? CG_BF16 : CG_F32), *b = cg_k_to(b0, dt ? CG_BF16 : CG_F32);
        cg_tensor *out[2], *da[2], *db[2], *hs[2], *dh[2];
        for (int t = 0; t < 2; t++) {
            cg_set_num_threads(t + 1);
            out[t] = cg_k_gated(a, b, CG_K_GATE_SILU);
            ck_assert(cg_k_gated_backward(a, b, out[t], CG_K_GATE_GELU, &da[t], &db[t]));
            hs[t] = cg_k_gated_halves(a, CG_K_GATE_GELU);
            dh[t] = cg_k_gated_halves_backward(a, hs[t], CG_K_GATE_SILU);
        }
        cg_set_num_threads(saved);
        ck_assert(same_bits(out[0], out[1]) && same_bits(da[0], da[1]) && same_bits(db[0], db[1]));
        ck_assert(same_bits(hs[0], hs[1]) && same_bits(dh[0], dh[1]));
        cg_release_all(4, hs[0], hs[1], dh[0], dh[1]);
        cg_release_all(10, a0, b0, a, b, out[0], out[1], da[0], da[1], db[0], db[1]);
    }
}
END_TEST

START_TEST(test_gated_refusals)
{
    cg_tensor *a = cg_zeros(CG_SHAPE(2, 3)), *b = cg_zeros(CG_SHAPE(3, 2));
    cg_tensor *c = cg_zeros(CG_SHAPE(2, 5)), *h = cg_k_to(a, CG_BF16);
    CG_ASSERT_REFUSED(cg_swiglu(a, b) == NULL, "differ");
    CG_ASSERT_REFUSED(cg_geglu(a, h) == NULL, "one dtype");
    CG_ASSERT_REFUSED(cg_swiglu(NULL, a) == NULL, "");
    CG_ASSERT_REFUSED(cg_activation(c, CG_ACT_SWIGLU) == NULL, "even");
    cg_release_all(4, a, b, c, h);
}
END_TEST

/* Bad arguments, each refused with its message: an unknown activation
 * (the enum's next value and -1) to every entry; an operand or a gradient
 * neither float32 nor bfloat16; a gradient of another shape (as many
 * elements) or none (da and db then NULL); the halves form's empty last
 * dim and int64 input; its gradient with the wrong count, the wrong last
 * dim, another rank, other leading dims (each alone) or int64. Each would
 * otherwise be read as what it is not. */
START_TEST(test_gated_bad_args)
{
    cg_tensor *a = cg_zeros(CG_SHAPE(2, 3)), *gt = cg_zeros(CG_SHAPE(3, 2));
    cg_tensor *ai = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 3)), *h = cg_zeros(CG_SHAPE(4, 8));
    cg_tensor *hi = cg_zeros_dtype(CG_I64, CG_SHAPE(4, 8)), *h0 = cg_zeros(CG_SHAPE(4, 0));
    cg_tensor *g = cg_zeros(CG_SHAPE(4, 4)), *gi = cg_zeros_dtype(CG_I64, CG_SHAPE(4, 4));
    cg_tensor *g_rows = cg_zeros(CG_SHAPE(2, 4)), *g_wide = cg_zeros(CG_SHAPE(2, 8)), *da, *db;
    cg_tensor *g3 = cg_zeros(CG_SHAPE(1, 4, 4));
    const cg_k_gate bad[2] = {(cg_k_gate)3, (cg_k_gate)-1}; /* 2: the sigmoid (glu) */
    const char *said[2] = {"unknown gate activation 3", "unknown gate activation -1"};
    for (int k = 0; k < 2; k++) {
        CG_ASSERT_REFUSED(cg_k_gated(a, a, bad[k]) == NULL, said[k]);
        CG_ASSERT_REFUSED(!cg_k_gated_backward(a, a, a, bad[k], &da, &db), said[k]);
        CG_ASSERT_REFUSED(cg_k_gated_halves(h, bad[k]) == NULL, said[k]);
        CG_ASSERT_REFUSED(cg_k_gated_halves_backward(h, g, bad[k]) == NULL, said[k]);
    }
    CG_ASSERT_REFUSED(cg_k_gated(ai, ai, CG_K_GATE_SILU) == NULL,
                      "cg_k_gated: float32 or bfloat16 tensors only (got int64)");
    CG_ASSERT_REFUSED(!cg_k_gated_backward(a, a, ai, CG_K_GATE_SILU, &da, &db),
                      "cg_k_gated_backward: float32 or bfloat16 tensors only (got int64)");
    da = db = a; /* cleared by a refusal */
    CG_ASSERT_REFUSED(!cg_k_gated_backward(a, a, gt, CG_K_GATE_GELU, &da, &db),
                      "cg_k_gated_backward: shapes [2, 3] and [3, 2] differ");
    ck_assert(da == NULL && db == NULL);
    da = db = a;
    CG_ASSERT_REFUSED(!cg_k_gated_backward(a, a, NULL, CG_K_GATE_SILU, &da, &db),
                      "cg_k_gated_backward");
    ck_assert(da == NULL && db == NULL);
    CG_ASSERT_REFUSED(cg_k_gated_halves(hi, CG_K_GATE_SILU) == NULL,
                      "cg_k_gated_halves: float32 or bfloat16 tensors only (got int64)");
    CG_ASSERT_REFUSED(cg_k_gated_halves(h0, CG_K_GATE_SILU) == NULL,
                      "the last dim of [4, 0] must be even, two halves (got 0)");
    CG_ASSERT_REFUSED(cg_k_gated_halves_backward(h, g_rows, CG_K_GATE_SILU) == NULL,
                      "gradient [2, 4] for input [4, 8]");
    CG_ASSERT_REFUSED(cg_k_gated_halves_backward(h, g_wide, CG_K_GATE_SILU) == NULL,
                      "gradient [2, 8] for input [4, 8]");
    CG_ASSERT_REFUSED(cg_k_gated_halves_backward(h, g3, CG_K_GATE_SILU) == NULL,
                      "gradient [1, 4, 4] for input [4, 8]");
    CG_ASSERT_REFUSED(cg_k_gated_halves_backward(h, gi, CG_K_GATE_GELU) == NULL,
                      "gradient [4, 4] for input [4, 8]");
    /* as many elements and the right last dim, other leading dims */
    cg_tensor *h3 = cg_zeros(CG_SHAPE(2, 2, 8)), *g_lead = cg_zeros(CG_SHAPE(4, 1, 4));
    CG_ASSERT_REFUSED(cg_k_gated_halves_backward(h3, g_lead, CG_K_GATE_SILU) == NULL,
                      "gradient [4, 1, 4] for input [2, 2, 8]");
    cg_release_all(13, a, gt, ai, h, hi, h0, g, gi, g_rows, g_wide, g3, h3, g_lead);
}
END_TEST

START_TEST(test_gated_table)
{
    cg_act a;
    const char *names[3] = {"silu", "swiglu", "geglu"};
    const cg_act want[3] = {CG_ACT_SILU, CG_ACT_SWIGLU, CG_ACT_GEGLU};
    for (int i = 0; i < 3; i++) {
        ck_assert(cg_act_parse(names[i], &a) && a == want[i]);
        ck_assert_str_eq(cg_act_name(a), names[i]);
        ck_assert_int_eq(cg_act_info_of(a, NULL)->gate != NULL, i > 0);
    }
    CG_ASSERT_REFUSED(
        !cg_act_parse("reglu", &a),
        "unknown activation 'reglu' (choices: relu, gelu, gelu_erf, silu, swiglu, geglu, tanh, "
        "sigmoid, mish, hardswish, hardsigmoid, relu6, selu, softsign, logsigmoid, tanhshrink)");
    CG_ASSERT_REFUSED(cg_mlp(3, (int64_t[]){2, 4, 2}, CG_ACT_SWIGLU, NULL) == NULL, "gated");
    cg_module *m = cg_activation_new(CG_ACT_SILU);
    ck_assert_str_eq(m->type, "SiLU");
    cg_module_free(m);
}
END_TEST

/* fc2(act(fc1 x) * fc3 x) by the unfused ops */
static cg_tensor *ff_by_ops(cg_ff *f, cg_tensor *x, int gelu)
{
    cg_tensor *g = cg_linear_forward(f->fc1, x), *u = cg_linear_forward(f->fc3, x);
    cg_tensor *s = gelu ? cg_gelu(g) : cg_silu(g), *p = cg_mul(s, u);
    cg_tensor *y = cg_linear_forward(f->fc2, p);
    cg_release_all(4, g, u, s, p);
    return y;
}

static cg_tensor *ff_fn(void *ctx, cg_tensor *const *in) { return cg_ff_forward(ctx, in[0]); }

START_TEST(test_gated_ff)
{
    cg_rng r = cg_rng_new(11);
    for (int gelu = 0; gelu < 2; gelu++) {
        cg_ff *f = cg_ff_new(8, 12, gelu ? CG_ACT_GEGLU : CG_ACT_SWIGLU, &r);
        ck_assert(f && f->fc3);
        ck_assert(cg_module_get_param(CG_MODULE(f), "fc3.weight") &&
                  cg_module_get_param(CG_MODULE(f), "fc3.bias"));
        ck_assert_int_eq(f->fc1->out_features, 12); /* d_ff as given */
        ck_assert_int_eq(f->fc3->weight->shape[0], 12);
        ck_assert_int_eq(f->fc2->in_features, 12);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 8));
        cg_tensor *y = cg_ff_forward(f, x), *want = ff_by_ops(f, x, gelu);
        float *w = cg_test_values(want);
        CG_ASSERT_TENSOR(y, w, 1e-6, 1e-5);
        free(w);
        x->requires_grad = true;
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(ff_fn, f, 1, &x, NULL, &rep), "%s", rep.message);
        cg_release_all(3, x, y, want);
        cg_module_free(CG_MODULE(f));
    }
    cg_ff *f = cg_ff_new(8, 12, CG_ACT_SILU, NULL); /* ungated: no fc3 */
    ck_assert(f && !f->fc3 && !cg_module_get_param(CG_MODULE(f), "fc3.weight"));
    cg_module_free(CG_MODULE(f));
}
END_TEST

static bool count_hook(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m, (void)n_in, (void)in, (void)out;
    ++*(int *)ctx;
    return true;
}

/* a hook on fc3 sees fc3's own output: the two products and the two-tensor
 * gate, the same function (and its gradient) as the one product's */
START_TEST(test_gated_ff_hooks)
{
    cg_rng r = cg_rng_new(12);
    cg_ff *f = cg_ff_new(8, 12, CG_ACT_SWIGLU, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 8));
    cg_tensor *fused = cg_ff_forward(f, x);
    int calls = 0;
    ck_assert(cg_module_register_forward_hook(CG_MODULE(f->fc3), count_hook, &calls, NULL).id);
    cg_tensor *hooked = cg_ff_forward(f, x);
    ck_assert_int_eq(calls, 1);
    float *w = cg_test_values(fused);
    CG_ASSERT_TENSOR(hooked, w, 1e-6, 1e-5);
    free(w);
    x->requires_grad = true;
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(ff_fn, f, 1, &x, NULL, &rep), "%s", rep.message);
    cg_release_all(3, x, fused, hooked);
    cg_module_free(CG_MODULE(f));
}
END_TEST

/* Without a graph (evaluation, decoding) the gated FF runs its two
 * products: each weight is packed once and kept by the weight cache (the
 * concatenation made for a recorded call would be packed again at every
 * call), and the output is the recorded one's, in fp32 and in bf16. */
START_TEST(test_gated_ff_no_grad)
{
    const cg_precision prev = cg_get_matmul_precision();
    for (int p = 0; p < 2; p++) {
        cg_set_matmul_precision(p ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_rng r = cg_rng_new(13);
        cg_ff *f = cg_ff_new(32, 48, p ? CG_ACT_GEGLU : CG_ACT_SWIGLU, &r);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 5, 32));
        cg_tensor *rec = cg_ff_forward(f, x);
        ck_assert(rec && rec->node);
        cg_no_grad_begin();
        cg_tensor *a = cg_ff_forward(f, x), *b = cg_ff_forward(f, x);
        cg_no_grad_end();
        ck_assert(a && b && !a->node);
        if (p) /* the bf16 copies the products read, kept with each weight */
            ck_assert(f->fc1->weight->storage->derived && f->fc3->weight->storage->derived);
        float *w = cg_test_values(rec), *wa = cg_test_values(a);
        CG_ASSERT_TENSOR(a, w, 1e-6, 1e-5);
        CG_ASSERT_TENSOR(b, wa, 0, 0);
        free(w);
        free(wa);
        cg_release_all(4, x, rec, a, b);
        cg_module_free(CG_MODULE(f));
    }
    cg_set_matmul_precision(prev);
}
END_TEST

static Suite *gated_suite(void)
{
    Suite *s = suite_create("gated");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gated_forward_f64);
    tcase_add_test(tc, test_gated_bf16);
    tcase_add_test(tc, test_gated_gradcheck);
    tcase_add_test(tc, test_gated_threads);
    tcase_add_test(tc, test_gated_halves_bf16_input);
    tcase_add_test(tc, test_gated_bf16_input);
    tcase_add_test(tc, test_gated_refusals);
    tcase_add_test(tc, test_gated_bad_args);
    tcase_add_test(tc, test_gated_table);
    tcase_add_test(tc, test_gated_ff);
    tcase_add_test(tc, test_gated_ff_hooks);
    tcase_add_test(tc, test_gated_ff_no_grad);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {gated_suite()};
    return cg_test_run(s, 1);
}
