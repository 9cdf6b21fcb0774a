/* More pointwise ops, predicates, grids and the calculus of sequences
 * (since 2026-12-08): nan_to_num, fmod, remainder, lerp, clamp with tensor
 * bounds, cross (autograd/ops_pointwise.c, core/pointwise.c); isnan,
 * isinf, isfinite, isposinf, isneginf, isclose, allclose, equal,
 * count_nonzero, any, all (core/select.c); diff, trapezoid, meshgrid,
 * cartesian_prod, rot90. Values worked out by hand from PyTorch 1.13's
 * rules (NaN, inf, signed zeros, ties at the bounds, promotion of mixed
 * dtypes, integers), gradients by hand at the kinks PyTorch defines and by
 * gradcheck away from them, refusals by message, and 1 and 2 threads
 * giving the same bits. PyTorch's answers on random cases:
 * tests/interop/make_op_cases.py gen_misc (torch_ops). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

/* t's values are want's (NaN where NaN, the sign of zero too); t released */
static void expect_f(cg_tensor *t, int64_t n, const float *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    ck_assert_msg(cg_numel(t) == n, "%s: %lld elements, expected %lld", what,
                  (long long)cg_numel(t), (long long)n);
    float *v = cg_test_values(t);
    for (int64_t i = 0; i < n; i++) {
        const bool same =
            isnan(want[i]) ? isnan(v[i]) : v[i] == want[i] && signbit(v[i]) == signbit(want[i]);
        ck_assert_msg(same, "%s: element %lld is %.9g, expected %.9g", what, (long long)i,
                      (double)v[i], (double)want[i]);
    }
    free(v);
    cg_release(t);
}

/* t (any integer or bool dtype, read as int64) holds want; t released */
static void expect_i(cg_tensor *t, int64_t n, const int64_t *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    ck_assert_msg(cg_numel(t) == n, "%s: %lld elements, expected %lld", what,
                  (long long)cg_numel(t), (long long)n);
    cg_tensor *c = cg_k_to(t, CG_I64), *d = cg_k_contiguous(c);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(cg_data_i64(d)[i] == want[i], "%s: element %lld is %lld, expected %lld", what,
                      (long long)i, (long long)cg_data_i64(d)[i], (long long)want[i]);
    cg_release_all(3, c, d, t);
}

static void expect_dtype(cg_tensor *t, cg_dtype dt, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    ck_assert_msg(t->dtype == dt, "%s: %s, expected %s", what, cg_dtype_name(t->dtype),
                  cg_dtype_name(dt));
    cg_release(t);
}

/* the gradients of the inputs of y for the upstream g (y released; the
 * inputs' gradients cleared first) */
static void backward_with(cg_tensor *y, const float *g, int n, cg_tensor *const *in)
{
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    for (int i = 0; i < n; i++)
        cg_zero_grad(in[i]);
    cg_tensor *gt = cg_from_data(y->ndim, y->shape, g);
    ck_assert_msg(cg_backward(y, gt, false), "%s", cg_last_error());
    cg_release_all(2, gt, y);
}

static void expect_grad(const cg_tensor *x, int64_t n, const float *want, const char *what)
{
    ck_assert_msg(cg_grad(x) != NULL, "%s: no gradient", what);
    expect_f(cg_k_to(cg_grad(x), CG_F32), n, want, what);
}

static cg_tensor *leaf(int ndim, const int64_t *shape, const float *v)
{
    return cg_requires_grad(cg_from_data(ndim, shape, v), true);
}

/* ------------------------------------------------------- nan_to_num */
START_TEST(test_nan_to_num)
{
    const float nan = NAN, inf = INFINITY, big = 3.40282347e38f;
    cg_tensor *x = leaf(CG_SHAPE(5), (const float[]){1, nan, inf, -inf, -0.0f});
    expect_f(cg_nan_to_num(x, 0, NULL, NULL), 5, (const float[]){1, 0, big, -big, -0.0f},
             "defaults");
    expect_f(cg_nan_to_num(x, 2, &(double){3}, &(double){-4}), 5,
             (const float[]){1, 2, 3, -4, -0.0f}, "given");
    expect_f(cg_nan_to_num(x, INFINITY, NULL, NULL), 5, (const float[]){1, inf, big, -big, -0.0f},
             "nan made inf");
    cg_tensor *xb = cg_k_to(x, CG_BF16), *xh = cg_k_to(x, CG_F16);
    expect_f(cg_nan_to_num(xb, 0, NULL, NULL), 5,
             (const float[]){1, 0, 0x1.fep127f, -0x1.fep127f, -0.0f}, "bfloat16's largest");
    expect_f(cg_nan_to_num(xh, 0, NULL, NULL), 5, (const float[]){1, 0, 65504, -65504, -0.0f},
             "float16's largest");
    expect_f(cg_nan_to_num(xb, 0, &(double){1e39}, NULL), 5,
             (const float[]){1, 0, inf, -0x1.fep127f, -0.0f}, "beyond bfloat16: inf");
    cg_tensor *xi = cg_from_i64(CG_SHAPE(2), (const int64_t[]){1, -2});
    cg_tensor *ci = cg_nan_to_num(xi, 3, NULL, NULL);
    ck_assert(ci && ci != xi && ci->dtype == CG_I64);
    expect_i(ci, 2, (const int64_t[]){1, -2}, "int64 copied");
    /* the gradient: g where x is finite, g * 0 elsewhere (NaN for an inf g) */
    backward_with(cg_nan_to_num(x, 0, NULL, NULL), (const float[]){2, 3, inf, 4, 5}, 1, &x);
    expect_grad(x, 5, (const float[]){2, 0, nan, 0, 5}, "gradient");
    cg_release_all(4, x, xb, xh, xi);
}
END_TEST

/* --------------------------------------------------- fmod, remainder */
START_TEST(test_fmod_remainder)
{
    const float nan = NAN, inf = INFINITY;
    cg_tensor *a = cg_from_data(CG_SHAPE(9), (const float[]){5, -5, 5, -5, 0, inf, 1, nan, -0.0f});
    cg_tensor *b = cg_from_data(CG_SHAPE(9), (const float[]){3, 3, -3, -3, 0, 2, inf, 1, 2});
    expect_f(cg_fmod(a, b), 9, (const float[]){2, -2, 2, -2, nan, nan, 1, nan, -0.0f}, "fmod");
    expect_f(cg_remainder(a, b), 9, (const float[]){2, 1, -1, -2, nan, nan, 1, nan, -0.0f},
             "remainder");
    cg_tensor *c = cg_from_data(CG_SHAPE(4), (const float[]){1, -1, -0.0f, 0});
    cg_tensor *d = cg_from_data(CG_SHAPE(4), (const float[]){-inf, inf, 3, -3});
    expect_f(cg_remainder(c, d), 4, (const float[]){-inf, inf, -0.0f, 0}, "remainder by inf");
    /* integers exactly; a zero divisor refused; INT64_MIN by -1 is 0 */
    cg_tensor *ia = cg_from_i64(CG_SHAPE(4), (const int64_t[]){5, -5, 5, INT64_MIN});
    cg_tensor *ib = cg_from_i64(CG_SHAPE(4), (const int64_t[]){3, 3, -3, -1});
    expect_i(cg_fmod(ia, ib), 4, (const int64_t[]){2, -2, 2, 0}, "int fmod");
    expect_i(cg_remainder(ia, ib), 4, (const int64_t[]){2, 1, -1, 0}, "int remainder");
    cg_tensor *i0 = cg_from_i64(CG_SHAPE(1), (const int64_t[]){0});
    CG_ASSERT_REFUSED_LINE(cg_fmod(ia, i0), "fmod: integer division by zero");
    CG_ASSERT_REFUSED_LINE(cg_remainder_scalar(ia, 0), "remainder: integer division by zero");
    /* the dtypes, as torch.result_type gives them */
    cg_tensor *i32 = cg_k_to(ia, CG_I32), *bl = cg_test_mask(CG_SHAPE(2), (const uint8_t[]){1, 0});
    cg_tensor *hb = cg_from_data(CG_SHAPE(1), (const float[]){2});
    cg_tensor *hbf = cg_k_to(hb, CG_BF16), *s0 = cg_test_scalar(2.5f);
    expect_dtype(cg_fmod_scalar(ia, 2), CG_I64, "int64 % a whole number");
    expect_dtype(cg_fmod_scalar(i32, 2), CG_I32, "int32 keeps its dtype");
    expect_dtype(cg_fmod_scalar(ia, 2.5), CG_F32, "int64 % 2.5: float32");
    expect_dtype(cg_fmod_scalar(bl, 2), CG_I64, "bool % 2: int64");
    expect_dtype(cg_fmod(ia, hbf), CG_BF16, "int64 % bfloat16 [1]");
    expect_dtype(cg_fmod(hbf, hb), CG_F32, "bfloat16 % float32");
    expect_dtype(cg_fmod(hbf, s0), CG_BF16, "bfloat16 % a 0-d float32");
    expect_dtype(cg_fmod(ia, s0), CG_F32, "int64 % a 0-d float32");
    expect_f(cg_fmod_scalar(ia, 2.5), 4, (const float[]){0, -0.0f, 0, -0.5f}, "int % 2.5");
    CG_ASSERT_REFUSED_LINE(cg_fmod(bl, bl), "fmod: bool operands are not supported");
    /* gradients: a's g; b's -g trunc(a / b) and -g floor(a / b) */
    cg_tensor *x = leaf(CG_SHAPE(3), (const float[]){5, -5, 1});
    cg_tensor *y = leaf(CG_SHAPE(3), (const float[]){3, 3, -inf});
    cg_tensor *in[2] = {x, y};
    backward_with(cg_fmod(x, y), (const float[]){1, 1, 1}, 2, in);
    expect_grad(x, 3, (const float[]){1, 1, 1}, "fmod: a's gradient");
    expect_grad(y, 3, (const float[]){-1, 1, 0}, "fmod: b's gradient");
    backward_with(cg_remainder(x, y), (const float[]){1, 2, 1}, 2, in);
    expect_grad(y, 3, (const float[]){-1, 4, 1}, "remainder: b's (Python's floor division)");
    cg_tensor *z = leaf(CG_SHAPE(3), (const float[]){0, 0, 0});
    cg_tensor *in2[2] = {x, z};
    backward_with(cg_fmod(x, z), (const float[]){1, 1, 1}, 2, in2);
    expect_grad(z, 3, (const float[]){-inf, inf, -inf}, "b = 0: -g trunc(a / 0)");
    backward_with(cg_remainder_scalar(x, 2), (const float[]){1, 2, 3}, 1, &x);
    expect_grad(x, 3, (const float[]){1, 2, 3}, "scalar remainder: a's gradient");
    cg_release_all(14, a, b, c, d, ia, ib, i0, i32, hb, hbf, x, y, z, NULL);
}
END_TEST

/* --------------------------------------------------------------- lerp */
START_TEST(test_lerp)
{
    cg_tensor *s = leaf(CG_SHAPE(2), (const float[]){1, 2}),
              *e = leaf(CG_SHAPE(2), (const float[]){3, 5});
    cg_tensor *w = leaf(CG_SHAPE(2), (const float[]){0.25f, 0.75f});
    expect_f(cg_lerp_scalar(s, e, 0.5f), 2, (const float[]){2, 3.5f}, "scalar weight");
    expect_f(cg_lerp(s, e, w), 2, (const float[]){1.5f, 4.25f}, "tensor weight");
    /* the two sides: w >= 0.5 computed from the end, exact at w = 1 */
    cg_tensor *s3 = cg_from_data(CG_SHAPE(3), (const float[]){0.1f, 1e8f, 3});
    cg_tensor *e3 = cg_from_data(CG_SHAPE(3), (const float[]){0.7f, 1, 3});
    expect_f(cg_lerp_scalar(s3, e3, 1.0f), 3, (const float[]){0.7f, 1, 3}, "w = 1: the end");
    /* broadcast: [1] x [2, 1] x [3] */
    cg_tensor *a1 = cg_from_data(CG_SHAPE(1), (const float[]){1});
    cg_tensor *b2 = cg_from_data(CG_SHAPE(2, 1), (const float[]){3, 5});
    cg_tensor *w3 = cg_from_data(CG_SHAPE(3), (const float[]){0, 0.5f, 1});
    expect_f(cg_lerp(a1, b2, w3), 6, (const float[]){1, 2, 3, 1, 3, 5}, "broadcast");
    cg_tensor *sb = cg_k_to(s, CG_BF16), *eb = cg_k_to(e, CG_BF16);
    cg_tensor *lb = cg_lerp_scalar(sb, eb, 0.3f);
    ck_assert(lb && lb->dtype == CG_BF16);
    expect_f(lb, 2, (const float[]){1.6015625f, 2.90625f}, "bfloat16, rounded once");
    /* gradients: g (1 - w), g w, g (end - start) */
    cg_tensor *in[3] = {s, e, w};
    backward_with(cg_lerp(s, e, w), (const float[]){1, 2}, 3, in);
    expect_grad(s, 2, (const float[]){0.75f, 0.5f}, "start");
    expect_grad(e, 2, (const float[]){0.25f, 1.5f}, "end");
    expect_grad(w, 2, (const float[]){2, 6}, "weight");
    backward_with(cg_lerp_scalar(s, e, 0.25f), (const float[]){1, 2}, 2, in);
    expect_grad(s, 2, (const float[]){0.75f, 1.5f}, "start, scalar weight");
    expect_grad(e, 2, (const float[]){0.25f, 0.5f}, "end, scalar weight");
    /* refusals: one float dtype */
    cg_tensor *eh = cg_k_to(e, CG_F16), *sh = cg_k_to(s, CG_F16), *si = cg_k_to(s, CG_I64);
    CG_ASSERT_REFUSED_LINE(cg_lerp_scalar(s, eb, 0.5f),
                           "lerp: expected dtype float32 for `end` but got dtype bfloat16");
    CG_ASSERT_REFUSED_LINE(cg_lerp(sb, eb, w), "expected dtype bfloat16 for `weight`");
    cg_tensor *lh = cg_lerp_scalar(sh, eh, 0.5f); /* float16: in float32, rounded */
    ck_assert(lh && lh->dtype == CG_F16);
    expect_f(lh, 2, (const float[]){2, 3.5f}, "float16");
    CG_ASSERT_REFUSED_LINE(cg_lerp_scalar(si, si, 0.5f), "lerp: int64 tensors");
    CG_ASSERT_REFUSED_LINE(cg_lerp(s, e, NULL), "lerp: argument 'weight' is NULL");
    CG_ASSERT_REFUSED_LINE(cg_lerp_scalar(s, e3, 0.5f), "cannot be broadcast");
    cg_release_all(15, s, e, w, s3, e3, a1, b2, w3, sb, eb, eh, sh, si, NULL, NULL);
}
END_TEST

/* ---------------------------------------------------- clamp (tensors) */
START_TEST(test_clamp_tensor)
{
    const float nan = NAN;
    cg_tensor *x = cg_from_data(CG_SHAPE(4), (const float[]){1, 5, nan, 3});
    cg_tensor *lo = cg_from_data(CG_SHAPE(4), (const float[]){2, 2, 2, nan});
    cg_tensor *hi = cg_from_data(CG_SHAPE(4), (const float[]){4, 4, 4, 4});
    expect_f(cg_clamp_tensor(x, lo, hi), 4, (const float[]){2, 4, nan, nan}, "both");
    expect_f(cg_clamp_tensor(x, lo, NULL), 4, (const float[]){2, 5, nan, nan}, "min only");
    expect_f(cg_clamp_tensor(x, NULL, lo), 4, (const float[]){1, 2, nan, nan}, "max only");
    cg_tensor *four = cg_from_data(CG_SHAPE(1), (const float[]){4});
    cg_tensor *two = cg_from_data(CG_SHAPE(1), (const float[]){2});
    expect_f(cg_clamp_tensor(x, four, two), 4, (const float[]){2, 2, nan, 2}, "min > max: max");
    cg_tensor *z = cg_from_data(CG_SHAPE(2), (const float[]){0, -0.0f});
    cg_tensor *zl = cg_from_data(CG_SHAPE(2), (const float[]){-0.0f, 0});
    expect_f(cg_clamp_tensor(z, zl, NULL), 2, (const float[]){0, -0.0f}, "a tie keeps x");
    cg_tensor *rows = cg_from_data(CG_SHAPE(2, 1), (const float[]){2, 0});
    cg_tensor *x3 = cg_from_data(CG_SHAPE(3), (const float[]){1, 5, 3});
    expect_f(cg_clamp_tensor(x3, rows, NULL), 6, (const float[]){2, 5, 3, 1, 5, 3}, "broadcast");
    /* integers exactly; promotion as torch.result_type */
    cg_tensor *xi = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 5, 3});
    cg_tensor *li = cg_from_i64(CG_SHAPE(1), (const int64_t[]){2});
    cg_tensor *hi4 = cg_from_i64(CG_SHAPE(1), (const int64_t[]){4});
    expect_i(cg_clamp_tensor(xi, li, hi4), 3, (const int64_t[]){2, 4, 3}, "int64");
    cg_tensor *lf = cg_from_data(CG_SHAPE(1), (const float[]){2.5f}), *l0 = cg_test_scalar(2.5f);
    expect_f(cg_clamp_tensor(xi, lf, hi4), 3, (const float[]){2.5f, 4, 3}, "int64 with float32");
    cg_tensor *xb = cg_k_to(x3, CG_BF16);
    expect_dtype(cg_clamp_tensor(xb, lf, NULL), CG_F32, "bfloat16 with float32 [1]");
    expect_dtype(cg_clamp_tensor(xb, l0, NULL), CG_BF16, "bfloat16 with a 0-d float32");
    cg_tensor *bl = cg_test_mask(CG_SHAPE(2), NULL);
    CG_ASSERT_REFUSED_LINE(cg_clamp_tensor(x, NULL, NULL), "clamp: at least one of min and max");
    CG_ASSERT_REFUSED_LINE(cg_clamp_tensor(bl, bl, NULL), "clamp: bool tensors");
    CG_ASSERT_REFUSED_LINE(cg_clamp_tensor(x, x3, NULL), "cannot be broadcast");
    /* gradients, PyTorch's at the bounds (ties, min > max) */
    cg_tensor *gx = leaf(CG_SHAPE(5), (const float[]){1, 2, 3, 4, 5});
    cg_tensor *glo = leaf(CG_SHAPE(5), (const float[]){2, 2, 2, 4, 6});
    cg_tensor *ghi = leaf(CG_SHAPE(5), (const float[]){4, 4, 2, 4, 5});
    cg_tensor *in[3] = {gx, glo, ghi};
    const float g[5] = {1, 2, 3, 4, 5};
    backward_with(cg_clamp_tensor(gx, glo, ghi), g, 3, in);
    expect_grad(gx, 5, (const float[]){0, 2, 0, 4, 0}, "x, both");
    expect_grad(glo, 5, (const float[]){1, 0, 0, 0, 0}, "min, both");
    expect_grad(ghi, 5, (const float[]){0, 0, 3, 0, 5}, "max, both (max < min at 4)");
    backward_with(cg_clamp_tensor(gx, glo, NULL), g, 2, in);
    expect_grad(gx, 5, (const float[]){0, 2, 3, 4, 0}, "x, min only");
    expect_grad(glo, 5, (const float[]){1, 0, 0, 0, 5}, "min, min only");
    cg_tensor *in2[2] = {gx, ghi};
    backward_with(cg_clamp_tensor(gx, NULL, ghi), g, 2, in2);
    expect_grad(gx, 5, (const float[]){1, 2, 0, 4, 5}, "x, max only");
    expect_grad(ghi, 5, (const float[]){0, 0, 3, 0, 0}, "max, max only");
    cg_tensor *nx = leaf(CG_SHAPE(2), (const float[]){nan, 1});
    cg_tensor *nl = leaf(CG_SHAPE(2), (const float[]){0, nan});
    cg_tensor *in3[2] = {nx, nl};
    backward_with(cg_clamp_tensor(nx, nl, NULL), (const float[]){1, 1}, 2, in3);
    expect_grad(nx, 2, (const float[]){0, 0}, "NaN: no gradient to x");
    expect_grad(nl, 2, (const float[]){0, 0}, "NaN: none to min");
    cg_release_all(19, x, lo, hi, four, two, z, zl, rows, x3, xi, li, hi4, lf, xb, gx, glo, ghi, nx,
                   nl);
}
END_TEST

/* -------------------------------------------------------------- cross */
START_TEST(test_cross)
{
    cg_tensor *a = leaf(CG_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
    cg_tensor *b = leaf(CG_SHAPE(2, 3), (const float[]){0, 1, 0, 1, 0, 0});
    expect_f(cg_cross(a, b, 1), 6, (const float[]){-3, 0, 1, 0, 6, -5}, "rows");
    expect_f(cg_cross(a, b, -1), 6, (const float[]){-3, 0, 1, 0, 6, -5}, "dim -1");
    cg_tensor *b1 = cg_from_data(CG_SHAPE(1, 3), (const float[]){0, 1, 0});
    expect_f(cg_cross(a, b1, 1), 6, (const float[]){-3, 0, 1, -6, 0, 4}, "broadcast");
    /* along dim 0 of transposed views: the same products */
    cg_tensor *at = cg_transpose(a, 0, 1), *bt = cg_transpose(b, 0, 1);
    expect_f(cg_cross(at, bt, 0), 6, (const float[]){-3, 0, 0, 6, 1, -5}, "dim 0 of .T");
    cg_tensor *ia = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 3});
    cg_tensor *ib = cg_from_i64(CG_SHAPE(3), (const int64_t[]){4, 5, 6});
    expect_i(cg_cross(ia, ib, 0), 3, (const int64_t[]){-3, 6, -3}, "int64");
    /* gradients: cross(b, g) to a, cross(g, a) to b */
    cg_tensor *in[2] = {a, b};
    backward_with(cg_cross(a, b, 1), (const float[]){1, 0, 0, 0, 0, 1}, 2, in);
    expect_grad(a, 6, (const float[]){0, 0, -1, 0, -1, 0}, "a's");
    expect_grad(b, 6, (const float[]){0, -3, 2, -5, 4, 0}, "b's");
    /* refusals */
    cg_tensor *af = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3}),
              *bl = cg_test_mask(CG_SHAPE(3), NULL);
    cg_tensor *a22 = cg_zeros(CG_SHAPE(2, 2)), *s = cg_test_scalar(1);
    CG_ASSERT_REFUSED_LINE(cg_cross(ia, af, 0), "the inputs are int64 and float32, expected one");
    CG_ASSERT_REFUSED_LINE(cg_cross(bl, bl, 0), "not bool");
    CG_ASSERT_REFUSED_LINE(cg_cross(a, af, -1), "inputs must have the same number of dimensions");
    CG_ASSERT_REFUSED_LINE(cg_cross(a22, a22, 0),
                           "inputs dimension 0 must have length 3. Got 2 and 2");
    CG_ASSERT_REFUSED_LINE(cg_cross(a, b, 2), "dim 2 out of range");
    CG_ASSERT_REFUSED_LINE(cg_cross(s, s, -1), "linalg.cross");
    cg_release_all(9, a, b, b1, at, bt, ia, ib, af, a22);
}
END_TEST

/* ------------------------------------------------------- predicates */
START_TEST(test_predicates)
{
    const float nan = NAN, inf = INFINITY;
    cg_tensor *x = cg_from_data(CG_SHAPE(5), (const float[]){1, nan, inf, -inf, -0.0f});
    expect_i(cg_isnan(x), 5, (const int64_t[]){0, 1, 0, 0, 0}, "isnan");
    expect_i(cg_isinf(x), 5, (const int64_t[]){0, 0, 1, 1, 0}, "isinf");
    expect_i(cg_isfinite(x), 5, (const int64_t[]){1, 0, 0, 0, 1}, "isfinite");
    expect_i(cg_isposinf(x), 5, (const int64_t[]){0, 0, 1, 0, 0}, "isposinf");
    expect_i(cg_isneginf(x), 5, (const int64_t[]){0, 0, 0, 1, 0}, "isneginf");
    cg_tensor *xb = cg_k_to(x, CG_BF16), *xi = cg_from_i64(CG_SHAPE(2), (const int64_t[]){1, 2});
    expect_i(cg_isnan(xb), 5, (const int64_t[]){0, 1, 0, 0, 0}, "isnan bfloat16");
    expect_i(cg_isfinite(xi), 2, (const int64_t[]){1, 1}, "integers are finite");
    expect_i(cg_isinf(xi), 2, (const int64_t[]){0, 0}, "and never inf");
    /* isclose: PyTorch's defaults rtol 1e-5, atol 1e-8 */
    cg_tensor *a = cg_from_data(CG_SHAPE(7), (const float[]){1, 1, nan, inf, inf, 0, 1e-9f});
    cg_tensor *b =
        cg_from_data(CG_SHAPE(7), (const float[]){1, 1.00002f, nan, inf, -inf, 1e-9f, 0});
    expect_i(cg_isclose(a, b, 1e-5, 1e-8, false), 7, (const int64_t[]){1, 0, 0, 1, 0, 1, 1},
             "isclose");
    expect_i(cg_isclose(a, b, 1e-5, 1e-8, true), 7, (const int64_t[]){1, 0, 1, 1, 0, 1, 1},
             "equal_nan");
    expect_i(cg_isclose(a, b, 0, 0, false), 7, (const int64_t[]){1, 0, 0, 1, 0, 0, 0},
             "no tolerance: equality");
    cg_tensor *ab = cg_k_to(a, CG_BF16), *bb = cg_k_to(b, CG_BF16);
    expect_i(cg_isclose(ab, bb, 1e-5, 1e-8, false), 7, (const int64_t[]){1, 1, 0, 1, 0, 1, 1},
             "bfloat16: 1.00002 is 1");
    cg_tensor *ia = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 100000000});
    cg_tensor *ib = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 3, 100000001});
    expect_i(cg_isclose(ia, ib, 1e-5, 1e-8, true), 3, (const int64_t[]){1, 0, 1}, "int64");
    cg_tensor *c2 = cg_from_data(CG_SHAPE(2, 1), (const float[]){1, 2});
    cg_tensor *r2 = cg_from_data(CG_SHAPE(2), (const float[]){1, 2});
    expect_i(cg_isclose(r2, c2, 1e-5, 1e-8, false), 4, (const int64_t[]){1, 0, 0, 1}, "broadcast");
    cg_tensor *bl = cg_test_mask(CG_SHAPE(2), (const uint8_t[]){1, 0});
    cg_tensor *bl2 = cg_test_mask(CG_SHAPE(2), (const uint8_t[]){1, 1});
    expect_i(cg_isclose(bl, bl2, 0, 0, false), 2, (const int64_t[]){1, 0}, "bool, no tolerance");
    expect_i(cg_isclose(bl, bl2, 0, 1, false), 2, (const int64_t[]){1, 1}, "bool, atol 1");
    /* integers compared in float32, as PyTorch converts them: 2^60 and
     * 2^60 + 1 are close with any tolerance, unequal without */
    cg_tensor *ja = cg_from_i64(CG_SHAPE(1), (const int64_t[]){1LL << 60});
    cg_tensor *jb = cg_from_i64(CG_SHAPE(1), (const int64_t[]){(1LL << 60) + 1});
    expect_i(cg_isclose(ja, jb, 0, 1e-30, false), 1, (const int64_t[]){1}, "int64 in float32");
    expect_i(cg_isclose(ja, jb, 0, 0, false), 1, (const int64_t[]){0}, "int64, no tolerance");
    cg_release_all(2, ja, jb);
    CG_ASSERT_REFUSED_LINE(cg_isclose(a, ab, 1e-5, 1e-8, false), "isclose: the dtypes differ");
    CG_ASSERT_REFUSED_LINE(cg_isclose(a, b, -1, 0, false), "rtol must be greater than or equal");
    CG_ASSERT_REFUSED_LINE(cg_isclose(a, b, 0, NAN, false), "atol must be greater than or equal");
    bool r = true;
    ck_assert(cg_allclose(a, b, 1e-5, 1e-8, false, &r) && !r);
    cg_tensor *a2 = cg_from_data(CG_SHAPE(2), (const float[]){1, 1}), *o = cg_test_scalar(1);
    ck_assert(cg_allclose(a2, o, 1e-5, 1e-8, false, &r) && r);
    CG_ASSERT_REFUSED(!cg_allclose(a, ab, 1e-5, 1e-8, false, &r), "allclose: isclose: the dtypes");
    /* equal: one shape, every element equal as a number */
    cg_tensor *f2 = cg_from_data(CG_SHAPE(2), (const float[]){1, 2});
    cg_tensor *i2 = cg_from_i64(CG_SHAPE(2), (const int64_t[]){1, 2});
    cg_tensor *n1 = cg_from_data(CG_SHAPE(1), (const float[]){nan});
    cg_tensor *z = cg_from_data(CG_SHAPE(1), (const float[]){0}),
              *mz = cg_from_data(CG_SHAPE(1), (const float[]){-0.0f});
    ck_assert(cg_equal(f2, r2, &r) && r);
    ck_assert(cg_equal(f2, i2, &r) && r);  /* the dtypes may differ */
    ck_assert(cg_equal(n1, n1, &r) && !r); /* NaN is unequal */
    ck_assert(cg_equal(z, mz, &r) && r);   /* -0 == 0 */
    ck_assert(cg_equal(a2, o, &r) && !r);  /* no broadcasting */
    ck_assert(cg_equal(c2, r2, &r) && !r);
    CG_ASSERT_REFUSED(!cg_equal(a, b, NULL), "equal: argument 'result' is NULL");
    /* count_nonzero, any, all */
    cg_tensor *y = cg_from_data(CG_SHAPE(2, 3), (const float[]){0, 1, nan, -0.0f, 2, 0});
    cg_tensor *cn = cg_count_nonzero(y, 0, NULL);
    ck_assert(cn && cn->ndim == 0 && cn->dtype == CG_I64);
    expect_i(cn, 1, (const int64_t[]){3}, "count all (NaN counts)");
    expect_i(cg_count_nonzero(y, 1, (const int[]){0}), 3, (const int64_t[]){0, 2, 1}, "dim 0");
    expect_i(cg_count_nonzero(y, 2, (const int[]){-1, 0}), 1, (const int64_t[]){3}, "dims");
    expect_i(cg_any(y, 0, NULL, false), 1, (const int64_t[]){1}, "any");
    expect_i(cg_all(y, 0, NULL, false), 1, (const int64_t[]){0}, "all");
    cg_tensor *al = cg_all(y, 1, (const int[]){1}, true);
    ck_assert(al && al->dtype == CG_BOOL && al->ndim == 2 && al->shape[1] == 1);
    expect_i(al, 2, (const int64_t[]){0, 0}, "all keepdim");
    expect_i(cg_any(y, 1, (const int[]){0}, false), 3, (const int64_t[]){0, 1, 1}, "any dim 0");
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 3));
    expect_i(cg_all(e, 1, (const int[]){0}, false), 3, (const int64_t[]){1, 1, 1}, "all of none");
    expect_i(cg_any(e, 1, (const int[]){0}, false), 3, (const int64_t[]){0, 0, 0}, "any of none");
    expect_i(cg_count_nonzero(e, 1, (const int[]){0}), 3, (const int64_t[]){0, 0, 0}, "count none");
    cg_tensor *s0 = cg_test_scalar(0);
    expect_i(cg_all(s0, 1, (const int[]){0}, false), 1, (const int64_t[]){0}, "0-d dim 0");
    expect_i(cg_any(xi, 0, NULL, false), 1, (const int64_t[]){1}, "int64");
    CG_ASSERT_REFUSED_LINE(cg_count_nonzero(y, 2, (const int[]){0, 0}), "appears more than once");
    CG_ASSERT_REFUSED_LINE(cg_any(y, 1, (const int[]){2}, false), "any: dim 2 out of range");
    cg_release_all(16, x, xb, xi, a, b, ab, bb, ia, ib, c2, r2, a2, f2, i2, n1, z);
    cg_release_all(3, mz, y, e);
}
END_TEST

/* --------------------------------------------------------------- diff */
START_TEST(test_diff)
{
    cg_tensor *x = leaf(CG_SHAPE(2, 3), (const float[]){1, 4, 9, 2, 3, 7});
    expect_f(cg_diff(x, 1, -1, NULL, NULL), 4, (const float[]){3, 5, 1, 4}, "n 1");
    expect_f(cg_diff(x, 2, 1, NULL, NULL), 2, (const float[]){2, 3}, "n 2");
    cg_tensor *big = cg_diff(x, 5, -1, NULL, NULL), *d0 = cg_diff(x, 2, 0, NULL, NULL);
    ck_assert(big && big->shape[0] == 2 && big->shape[1] == 0);
    ck_assert(d0 && d0->shape[0] == 0 && d0->shape[1] == 3);
    cg_release_all(2, big, d0);
    expect_f(cg_diff(x, 0, -1, NULL, NULL), 6, (const float[]){1, 4, 9, 2, 3, 7}, "n 0: a copy");
    cg_tensor *pre = cg_from_data(CG_SHAPE(2, 1), (const float[]){0, 0});
    cg_tensor *app = cg_from_data(CG_SHAPE(2, 1), (const float[]){10, 10});
    expect_f(cg_diff(x, 1, -1, pre, app), 8, (const float[]){1, 3, 5, 1, 2, 1, 4, 3}, "ends");
    expect_f(cg_diff(x, 0, -1, pre, app), 6, (const float[]){1, 4, 9, 2, 3, 7},
             "n 0: the ends left out");
    cg_tensor *prei = cg_from_i64(CG_SHAPE(2, 1), (const int64_t[]){0, 0});
    expect_dtype(cg_diff(x, 1, -1, prei, NULL), CG_F32, "promoted with an int64 prepend");
    /* integers wrap, bool xors, bfloat16 rounds each step */
    cg_tensor *xi = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 5, INT64_MIN});
    expect_i(cg_diff(xi, 1, 0, NULL, NULL), 2, (const int64_t[]){4, INT64_MAX - 4}, "int64 wraps");
    cg_tensor *bl = cg_test_mask(CG_SHAPE(3), (const uint8_t[]){1, 0, 0});
    cg_tensor *db = cg_diff(bl, 1, 0, NULL, NULL);
    ck_assert(db && db->dtype == CG_BOOL);
    expect_i(db, 2, (const int64_t[]){1, 0}, "bool: xor");
    cg_tensor *xb = cg_k_to(x, CG_BF16), *dbf = cg_diff(xb, 1, 1, NULL, NULL);
    ck_assert(dbf && dbf->dtype == CG_BF16);
    expect_f(dbf, 4, (const float[]){3, 5, 1, 4}, "bfloat16");
    /* the gradient: each step's, g shifted and subtracted */
    backward_with(cg_diff(x, 2, 1, NULL, NULL), (const float[]){1, 2}, 1, &x);
    expect_grad(x, 6, (const float[]){1, -2, 1, 2, -4, 2}, "n 2 gradient");
    cg_tensor *px = leaf(CG_SHAPE(2, 1), (const float[]){0, 0});
    cg_tensor *in[2] = {x, px};
    backward_with(cg_diff(x, 1, -1, px, NULL), (const float[]){1, 2, 3, 4, 5, 6}, 2, in);
    expect_grad(x, 6, (const float[]){-1, -1, 3, -1, -1, 6}, "with a prepend: x's");
    expect_grad(px, 2, (const float[]){-1, -4}, "the prepend's");
    /* refusals */
    cg_tensor *s = cg_test_scalar(1), *p1 = cg_zeros(CG_SHAPE(1));
    CG_ASSERT_REFUSED_LINE(cg_diff(s, 1, 0, NULL, NULL), "diff: expects input to be at least");
    CG_ASSERT_REFUSED_LINE(cg_diff(x, -1, 0, NULL, NULL), "order must be non-negative but got -1");
    CG_ASSERT_REFUSED_LINE(cg_diff(x, 1, -1, p1, NULL),
                           "expects prepend or append to be the same dimension as input");
    CG_ASSERT_REFUSED_LINE(cg_diff(x, 1, 2, NULL, NULL), "diff: dim 2 out of range");
    cg_release_all(9, x, pre, app, prei, xi, xb, px, p1, NULL);
}
END_TEST

/* ----------------------------------------- meshgrid, cartesian, rot90 */
START_TEST(test_grids)
{
    cg_tensor *a = leaf(CG_SHAPE(2), (const float[]){1, 2});
    cg_tensor *b = leaf(CG_SHAPE(3), (const float[]){3, 4, 5});
    cg_tensor *g[3] = {NULL, NULL, NULL};
    ck_assert_msg(cg_meshgrid((cg_tensor *[]){a, b}, 2, CG_MESHGRID_IJ, g), "%s", cg_last_error());
    ck_assert(g[0]->shape[0] == 2 && g[0]->shape[1] == 3);
    expect_f(g[0], 6, (const float[]){1, 1, 1, 2, 2, 2}, "ij 0");
    expect_f(g[1], 6, (const float[]){3, 4, 5, 3, 4, 5}, "ij 1");
    ck_assert(cg_meshgrid((cg_tensor *[]){a, b}, 2, CG_MESHGRID_XY, g));
    ck_assert(g[0]->shape[0] == 3 && g[0]->shape[1] == 2);
    expect_f(g[0], 6, (const float[]){1, 2, 1, 2, 1, 2}, "xy 0");
    expect_f(g[1], 6, (const float[]){3, 3, 4, 4, 5, 5}, "xy 1");
    cg_tensor *c = cg_zeros(CG_SHAPE(4)), *s = cg_test_scalar(7);
    ck_assert(cg_meshgrid((cg_tensor *[]){a, b, c}, 3, CG_MESHGRID_XY, g));
    for (int i = 0; i < 3; i++) {
        ck_assert(g[i]->shape[0] == 3 && g[i]->shape[1] == 2 && g[i]->shape[2] == 4);
        cg_release(g[i]);
    }
    ck_assert(cg_meshgrid((cg_tensor *[]){s, b}, 2, CG_MESHGRID_XY, g));
    ck_assert(g[0]->shape[0] == 3 && g[0]->shape[1] == 1);
    cg_release_all(2, g[0], g[1]);
    /* gradients: each grid's sums back to its tensor */
    ck_assert(cg_meshgrid((cg_tensor *[]){a, b}, 2, CG_MESHGRID_IJ, g));
    cg_tensor *sum = cg_add(g[0], g[1]);
    cg_release_all(2, g[0], g[1]);
    cg_tensor *in[2] = {a, b};
    backward_with(sum, (const float[]){1, 2, 3, 4, 5, 6}, 2, in);
    expect_grad(a, 2, (const float[]){6, 15}, "meshgrid a");
    expect_grad(b, 3, (const float[]){5, 7, 9}, "meshgrid b");
    /* cartesian_prod */
    cg_tensor *ia = cg_from_i64(CG_SHAPE(2), (const int64_t[]){1, 2});
    cg_tensor *ib = cg_from_i64(CG_SHAPE(3), (const int64_t[]){3, 4, 5});
    cg_tensor *cp = cg_cartesian_prod((cg_tensor *[]){ia, ib}, 2);
    ck_assert(cp && cp->shape[0] == 6 && cp->shape[1] == 2);
    expect_i(cp, 12, (const int64_t[]){1, 3, 1, 4, 1, 5, 2, 3, 2, 4, 2, 5}, "cartesian_prod");
    cg_tensor *one = cg_cartesian_prod(&ia, 1);
    ck_assert(one == ia);
    cg_release(one);
    backward_with(cg_cartesian_prod((cg_tensor *[]){a, b}, 2),
                  (const float[]){1, 0, 1, 0, 1, 0, 0, 1, 0, 2, 0, 3}, 2, in);
    expect_grad(a, 2, (const float[]){3, 0}, "cartesian_prod a");
    expect_grad(b, 3, (const float[]){1, 2, 3}, "cartesian_prod b");
    /* rot90: quarter turns from dim0 towards dim1 */
    cg_tensor *m = leaf(CG_SHAPE(2, 3), (const float[]){0, 1, 2, 3, 4, 5});
    expect_f(cg_rot90(m, 1, 0, 1), 6, (const float[]){2, 5, 1, 4, 0, 3}, "k 1");
    expect_f(cg_rot90(m, -1, 0, 1), 6, (const float[]){3, 0, 4, 1, 5, 2}, "k -1");
    expect_f(cg_rot90(m, 6, 1, 0), 6, (const float[]){5, 4, 3, 2, 1, 0}, "k 6 = 2");
    expect_f(cg_rot90(m, 3, 1, 0), 6, (const float[]){2, 5, 1, 4, 0, 3}, "k 3 the other way");
    expect_f(cg_rot90(m, 4, 0, 1), 6, (const float[]){0, 1, 2, 3, 4, 5}, "k 4: a copy");
    backward_with(cg_rot90(m, 1, 0, 1), (const float[]){1, 2, 3, 4, 5, 6}, 1, &m);
    expect_grad(m, 6, (const float[]){5, 3, 1, 6, 4, 2}, "rot90 gradient");
    cg_tensor *bl = cg_test_mask(CG_SHAPE(1, 2), (const uint8_t[]){1, 0});
    expect_i(cg_rot90(bl, 1, 0, 1), 2, (const int64_t[]){0, 1}, "bool");
    /* refusals */
    cg_tensor *m2 = cg_zeros(CG_SHAPE(2, 2));
    CG_ASSERT_REFUSED(!cg_meshgrid((cg_tensor *[]){ia, b}, 2, CG_MESHGRID_IJ, g),
                      "meshgrid: expects all tensors to have the same dtype");
    ck_assert(g[0] == NULL && g[1] == NULL);
    CG_ASSERT_REFUSED(!cg_meshgrid((cg_tensor *[]){m2}, 1, CG_MESHGRID_IJ, g),
                      "expected a 0-d or 1-d tensor, but tensor 0 is [2, 2]");
    CG_ASSERT_REFUSED(!cg_meshgrid(NULL, 0, CG_MESHGRID_IJ, g), "expects a non-empty list");
    CG_ASSERT_REFUSED(!cg_meshgrid(&a, 1, (cg_meshgrid_indexing)7, g), "indexing must be");
    CG_ASSERT_REFUSED_LINE(cg_cartesian_prod(&s, 1), "expects 1-d tensors, but tensor 0 is []");
    CG_ASSERT_REFUSED_LINE(cg_cartesian_prod((cg_tensor *[]){ia, a}, 2), "the same dtype");
    CG_ASSERT_REFUSED_LINE(cg_rot90(a, 1, 0, 1),
                           "expected total dims >= 2, but got total dims = 1");
    CG_ASSERT_REFUSED_LINE(cg_rot90(m, 1, 1, -1), "expected rotation dims to be different");
    CG_ASSERT_REFUSED_LINE(cg_rot90(m, 1, 0, 2), "rot90: dim 2 out of range");
    cg_release_all(7, a, b, c, ia, ib, m, m2);
}
END_TEST

/* ---------------------------------------------------------- trapezoid */
START_TEST(test_trapezoid)
{
    cg_tensor *y = leaf(CG_SHAPE(2, 3), (const float[]){1, 2, 4, 0, 1, 3});
    expect_f(cg_trapezoid(y, 1, -1), 2, (const float[]){4.5f, 2.5f}, "dx 1");
    expect_f(cg_trapezoid(y, 0.5, 0), 3, (const float[]){0.25f, 0.75f, 1.75f}, "dx 0.5 dim 0");
    cg_tensor *x = leaf(CG_SHAPE(3), (const float[]){0, 1, 3});
    expect_f(cg_trapezoid_x(y, x, -1), 2, (const float[]){7.5f, 4.5f}, "x 1-d");
    cg_tensor *x2 = cg_from_data(CG_SHAPE(2, 3), (const float[]){0, 1, 3, 0, 2, 3});
    expect_f(cg_trapezoid_x(y, x2, 1), 2, (const float[]){7.5f, 3}, "x 2-d");
    cg_tensor *yi = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 4});
    cg_tensor *ti = cg_trapezoid(yi, 2, 0);
    ck_assert(ti && ti->dtype == CG_F32);
    expect_f(ti, 1, (const float[]){9}, "int64 y: float32");
    cg_tensor *e = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 0)), *te = cg_trapezoid(e, 1, -1);
    ck_assert(te && te->dtype == CG_I64);
    expect_i(te, 2, (const int64_t[]){0, 0}, "no samples: zeros of y's dtype");
    cg_tensor *one = cg_from_data(CG_SHAPE(2, 1), (const float[]){1, 2});
    expect_f(cg_trapezoid(one, 1, -1), 2, (const float[]){0, 0}, "one sample");
    /* gradients: dx (1/2, 1, ..., 1, 1/2); with x, the neighbours' sums */
    cg_tensor *in[2] = {y, x};
    backward_with(cg_trapezoid(y, 2, -1), (const float[]){1, 2}, 1, in);
    expect_grad(y, 6, (const float[]){1, 2, 1, 2, 4, 2}, "y, dx 2");
    backward_with(cg_trapezoid_x(y, x, -1), (const float[]){1, 1}, 2, in);
    expect_grad(y, 6, (const float[]){0.5f, 1.5f, 1, 0.5f, 1.5f, 1}, "y, with x");
    expect_grad(x, 3, (const float[]){-2, -3, 5}, "x");
    /* an integer x takes y's float dtype (PyTorch's result: bfloat16 here) */
    cg_tensor *yb = cg_k_to(y, CG_BF16), *xi = cg_from_i64(CG_SHAPE(3), (const int64_t[]){0, 1, 3});
    cg_tensor *tb = cg_trapezoid_x(yb, xi, -1);
    ck_assert(tb && tb->dtype == CG_BF16);
    expect_f(tb, 2, (const float[]){7.5f, 4.5f}, "bfloat16 y, int64 x");
    cg_release_all(2, yb, xi);
    cg_tensor *bl = cg_test_mask(CG_SHAPE(2), NULL), *x4 = cg_zeros(CG_SHAPE(4));
    CG_ASSERT_REFUSED_LINE(cg_trapezoid(bl, 1, 0), "received a bool input for `y`");
    CG_ASSERT_REFUSED_LINE(cg_trapezoid_x(y, bl, 0), "received a bool input for `x`");
    CG_ASSERT_REFUSED_LINE(cg_trapezoid_x(y, x4, -1), "There must be one `x` value for each");
    CG_ASSERT_REFUSED_LINE(cg_trapezoid(y, 1, 2), "trapezoid: dim 2 out of range");
    cg_release_all(8, y, x, x2, yi, e, one, x4, NULL);
}
END_TEST

/* ------------------------------------------------------- gradchecks */
enum {
    GC_NAN_TO_NUM,
    GC_FMOD,
    GC_REMAINDER,
    GC_LERP,
    GC_LERP_SCALAR,
    GC_CLAMP,
    GC_CLAMP_MIN,
    GC_CROSS,
    GC_DIFF,
    GC_TRAPEZOID,
    GC_TRAPEZOID_X,
    GC_ROT90,
    GC_CARTESIAN,
    GC_N
};
static const char *const gc_name[GC_N] = {
    "nan_to_num", "fmod", "remainder", "lerp",        "lerp_scalar", "clamp",         "clamp_min",
    "cross",      "diff", "trapezoid", "trapezoid_x", "rot90",       "cartesian_prod"};
static const int gc_inputs[GC_N] = {1, 2, 2, 3, 2, 3, 2, 2, 2, 1, 2, 1, 2};

static cg_tensor *gc_fn(void *ctx, cg_tensor *const *in)
{
    switch (*(const int *)ctx) {
    case GC_NAN_TO_NUM: return cg_nan_to_num(in[0], 0, NULL, NULL);
    case GC_FMOD: return cg_fmod(in[0], in[1]);
    case GC_REMAINDER: return cg_remainder(in[0], in[1]);
    case GC_LERP: return cg_lerp(in[0], in[1], in[2]);
    case GC_LERP_SCALAR: return cg_lerp_scalar(in[0], in[1], 0.7f);
    case GC_CLAMP: return cg_clamp_tensor(in[0], in[1], in[2]);
    case GC_CLAMP_MIN: return cg_clamp_tensor(in[0], in[1], NULL);
    case GC_CROSS: return cg_cross(in[0], in[1], 1);
    case GC_DIFF: return cg_diff(in[0], 2, 0, in[1], NULL);
    case GC_TRAPEZOID: return cg_trapezoid(in[0], 0.3, 1);
    case GC_TRAPEZOID_X: return cg_trapezoid_x(in[0], in[1], 1);
    case GC_ROT90: return cg_rot90(in[0], 3, 2, 0);
    default: return cg_cartesian_prod(in, 2);
    }
}

/* the inputs of case c: transposed views where the shapes allow, values
 * kept from the kinks (fmod's and remainder's quotient from integers, the
 * clamps' x from its bounds) */
static void gc_inputs_of(int c, cg_rng *r, cg_tensor **in)
{
    static const int64_t shapes[GC_N][3][3] = {
        [GC_NAN_TO_NUM] = {{3, 4}},          [GC_FMOD] = {{3, 4}, {4}},
        [GC_REMAINDER] = {{3, 4}, {3, 4}},   [GC_LERP] = {{3, 4}, {3, 4}, {4}},
        [GC_LERP_SCALAR] = {{3, 4}, {1, 4}}, [GC_CLAMP] = {{3, 4}, {3, 4}, {4}},
        [GC_CLAMP_MIN] = {{3, 4}, {3, 1}},   [GC_CROSS] = {{2, 3, 2}, {1, 3, 2}},
        [GC_DIFF] = {{4, 3}, {2, 3}},        [GC_TRAPEZOID] = {{2, 5}},
        [GC_TRAPEZOID_X] = {{2, 4}, {4}},    [GC_ROT90] = {{2, 3, 4}},
        [GC_CARTESIAN] = {{3}, {4}}};
    for (int i = 0; i < gc_inputs[c]; i++) {
        int nd = 0;
        while (nd < 3 && shapes[c][i][nd])
            nd++;
        in[i] = cg_test_randn_layout(r, nd, shapes[c][i], nd >= 2 && i == 0 ? 1 : 0);
        float *p = (float *)in[i]->storage->data;
        const int64_t m = (int64_t)(in[i]->storage->nbytes / sizeof(float));
        for (int64_t k = 0; k < m; k++) {
            if ((c == GC_FMOD || c == GC_REMAINDER) && i == 0) /* a/b near k + 1/2 */
                p[k] = (float)((k % 7) - 3) * 1.5f + 0.75f;
            if ((c == GC_FMOD || c == GC_REMAINDER) && i == 1)
                p[k] = (k % 2 ? 1.5f : -1.5f);
            if (c == GC_CLAMP && i == 0)
                p[k] = (float)((k % 5) - 2) * 0.6f + 0.1f; /* from the bounds below */
            if (c == GC_CLAMP && i == 1)
                p[k] = -0.75f + 0.02f * (float)k;
            if (c == GC_CLAMP && i == 2)
                p[k] = 0.75f - 0.01f * (float)k;
            if (c == GC_CLAMP_MIN && i == 0)
                p[k] = (float)((k % 5) - 2) * 0.6f + 0.1f;
            if (c == GC_CLAMP_MIN && i == 1)
                p[k] = 0.05f * (float)k - 0.4f;
        }
        cg_requires_grad(in[i], true);
    }
}

START_TEST(test_pointwise_gradchecks)
{
    cg_rng r = cg_rng_new(77);
    for (int c = 0; c < GC_N; c++) {
        cg_tensor *in[3] = {NULL, NULL, NULL};
        gc_inputs_of(c, &r, in);
        cg_gradcheck_opts o = cg_gradcheck_defaults();
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(gc_fn, &c, gc_inputs[c], in, &o, &rep), "%s: %s", gc_name[c],
                      rep.message);
        ck_assert(rep.checked > 0);
        cg_test_check_unread(gc_fn, &c, gc_inputs[c], in, gc_name[c]); /* the reads masks */
        cg_release_all(3, in[0], in[1], in[2]);
    }
}
END_TEST

/* ----------------------------------------------------------- threads */
static void run_at(int nt, float *got[3])
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(12);
    cg_tensor *x = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(300, 500), 1), true);
    cg_tensor *w = cg_requires_grad(cg_rand(&r, CG_SHAPE(500)), true);
    cg_tensor *b = cg_full(CG_SHAPE(1), 0.7f);
    cg_tensor *y[4] = {cg_remainder(x, b), cg_lerp(x, b, w), cg_clamp_tensor(x, w, NULL),
                       cg_nan_to_num(x, 0, NULL, NULL)};
    cg_tensor *sum = cg_test_weighted_squares(4, y);
    cg_test_backward_values(sum, 2, (cg_tensor *[]){x, w}, got);
    cg_release_all(4, x, w, b, sum);
}

START_TEST(test_threads_identical)
{
    cg_test_same_bits_1_2_threads(run_at, 3, (const int64_t[]){1, 300 * 500, 500});
}
END_TEST

static Suite *pointwise_suite(void)
{
    Suite *s = suite_create("pointwise");
    TCase *tc = tcase_create("pointwise");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_nan_to_num);
    tcase_add_test(tc, test_fmod_remainder);
    tcase_add_test(tc, test_lerp);
    tcase_add_test(tc, test_clamp_tensor);
    tcase_add_test(tc, test_cross);
    tcase_add_test(tc, test_predicates);
    tcase_add_test(tc, test_diff);
    tcase_add_test(tc, test_grids);
    tcase_add_test(tc, test_trapezoid);
    tcase_add_test(tc, test_pointwise_gradchecks);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {pointwise_suite()};
    return cg_test_run(s, 1);
}
