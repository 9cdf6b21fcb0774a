/* Interpolation (autograd/ops.h cg_interpolate, core/ops.h cg_interp;
 * nn/upsample.h): every mode's values and gradients against a reference
 * computed here in double from PyTorch 1.13's rules (the scale passed to
 * the kernel, or recomputed from the sizes); values worked by hand;
 * gradchecks of every mode, align_corners and scale path on contiguous,
 * transposed and strided inputs (and the reads mask); the same bits at 1
 * and 2 threads; bfloat16; Upsample and its 2d constructors; refusals in
 * one line. PyTorch's values and gradients: tests/interop/interp.py +
 * check_interp.c (torch_interp). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/upsample.h"
#include "tests/testutil.h"

typedef struct {
    const char *name;
    int nd;
    cg_interp o;
} icase;

#define I(...) ((cg_interp){__VA_ARGS__})
#define NEAR CG_INTERP_NEAREST
#define EXACT CG_INTERP_NEAREST_EXACT
#define LIN CG_INTERP_LINEAR
#define BIL CG_INTERP_BILINEAR
#define CUB CG_INTERP_BICUBIC
static const icase CASES[] = {
    {"nearest1d size 11", 1, I(.mode = NEAR, .size = {11})},
    {"nearest1d size 3", 1, I(.mode = NEAR, .size = {3})},
    {"nearest1d scale 1.7", 1, I(.mode = NEAR, .scale_factor = {1.7})},
    {"nearest1d scale 1.7 recompute", 1,
     I(.mode = NEAR, .scale_factor = {1.7}, .recompute_scale_factor = true)},
    {"nearest2d scale 0.6", 2, I(.mode = NEAR, .scale_factor = {0.6})},
    {"nearest2d scale 0.6 recompute", 2,
     I(.mode = NEAR, .scale_factor = {0.6}, .recompute_scale_factor = true)},
    {"nearest2d size 9x4", 2, I(.mode = NEAR, .size = {9, 4})},
    {"nearest2d scale 2", 2, I(.mode = NEAR, .scale_factor = {2})},
    {"nearest-exact1d scale 1.7", 1, I(.mode = EXACT, .scale_factor = {1.7})},
    {"nearest-exact1d size 4", 1, I(.mode = EXACT, .size = {4})},
    {"nearest-exact2d scale 1.7x0.6", 2, I(.mode = EXACT, .scale_factor = {1.7, 0.6})},
    {"nearest-exact2d scale 0.6 recompute", 2,
     I(.mode = EXACT, .scale_factor = {0.6}, .recompute_scale_factor = true)},
    {"linear size 12", 1, I(.mode = LIN, .size = {12})},
    {"linear size 12 align", 1, I(.mode = LIN, .size = {12}, .align_corners = true)},
    {"linear size 4 align", 1, I(.mode = LIN, .size = {4}, .align_corners = true)},
    {"linear size 1 align", 1, I(.mode = LIN, .size = {1}, .align_corners = true)},
    {"linear scale 1.7", 1, I(.mode = LIN, .scale_factor = {1.7})},
    {"linear scale 1.7 recompute", 1,
     I(.mode = LIN, .scale_factor = {1.7}, .recompute_scale_factor = true)},
    {"linear scale 0.6", 1, I(.mode = LIN, .scale_factor = {0.6})},
    {"linear scale 0.6 recompute", 1,
     I(.mode = LIN, .scale_factor = {0.6}, .recompute_scale_factor = true)},
    {"linear scale 1.1 (same size)", 1, I(.mode = LIN, .scale_factor = {1.1})},
    {"bilinear size 9x4", 2, I(.mode = BIL, .size = {9, 4})},
    {"bilinear size 9x4 align", 2, I(.mode = BIL, .size = {9, 4}, .align_corners = true)},
    {"bilinear scale 1.7x0.6", 2, I(.mode = BIL, .scale_factor = {1.7, 0.6})},
    {"bilinear scale 1.7x0.6 recompute", 2,
     I(.mode = BIL, .scale_factor = {1.7, 0.6}, .recompute_scale_factor = true)},
    {"bilinear scale 0.6 align", 2, I(.mode = BIL, .scale_factor = {0.6}, .align_corners = true)},
    {"bilinear scale 2.5", 2, I(.mode = BIL, .scale_factor = {2.5})},
    {"bicubic size 9x4", 2, I(.mode = CUB, .size = {9, 4})},
    {"bicubic size 9x4 align", 2, I(.mode = CUB, .size = {9, 4}, .align_corners = true)},
    {"bicubic size 1x3 align", 2, I(.mode = CUB, .size = {1, 3}, .align_corners = true)},
    {"bicubic scale 1.7x0.6", 2, I(.mode = CUB, .scale_factor = {1.7, 0.6})},
    {"bicubic scale 1.7x0.6 recompute", 2,
     I(.mode = CUB, .scale_factor = {1.7, 0.6}, .recompute_scale_factor = true)},
    {"bicubic scale 0.6 align", 2, I(.mode = CUB, .scale_factor = {0.6}, .align_corners = true)},
    {"bicubic scale 2.5", 2, I(.mode = CUB, .scale_factor = {2.5})},
    {"bicubic scale 1.1 (same size)", 2, I(.mode = CUB, .scale_factor = {1.1})},
    {"bicubic size 5x7 (identity)", 2, I(.mode = CUB, .size = {5, 7})},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

static cg_tensor *interp_fn(void *ctx, cg_tensor *const *in)
{
    return cg_interpolate(in[0], ((const icase *)ctx)->o);
}

/* ------------------------------------------------------- reference */
/* bicubic's weights at distance t in double (A = -0.75) */
static void ref_cubic(double t, double l[4])
{
    const double A = -0.75, d[4] = {t + 1, t, 1 - t, 2 - t};
    for (int k = 0; k < 4; k++)
        l[k] = d[k] <= 1 ? ((A + 2) * d[k] - (A + 3)) * d[k] * d[k] + 1
                         : A * d[k] * d[k] * d[k] - 5 * A * d[k] * d[k] + 8 * A * d[k] - 4 * A;
}

/* Output o's sources along one dim in double (four; unused ones weigh
 * 0): PyTorch's rules with the scale sc passed to the kernel (0: none,
 * the sizes' ratio) */
static void ref_src(const cg_interp *c, int64_t in, int64_t out, double sc, int64_t o, int64_t i[4],
                    double l[4])
{
    double s = sc > 0 ? 1.0 / sc : (double)in / (double)out;
    l[0] = 1.0;
    l[1] = l[2] = l[3] = 0.0;
    i[2] = i[3] = 0;
    if (c->mode == CUB) { /* not clamped, the sources clamped; no same-size copy */
        if (c->align_corners)
            s = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
        const double r = c->align_corners ? s * (double)o : s * ((double)o + 0.5) - 0.5;
        const int64_t k = (int64_t)floor(r);
        ref_cubic(r - (double)k, l);
        for (int q = 0; q < 4; q++)
            i[q] = k - 1 + q < 0 ? 0 : k - 1 + q > in - 1 ? in - 1 : k - 1 + q;
        return;
    }
    if (c->mode == NEAR || c->mode == EXACT) {
        const int64_t k = (int64_t)floor(c->mode == NEAR ? (double)o * s : ((double)o + 0.5) * s);
        i[0] = i[1] = k < in - 1 ? k : in - 1;
        return;
    }
    if (out == in) {
        i[0] = i[1] = o;
        return;
    }
    if (c->align_corners)
        s = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
    const double r = c->align_corners ? s * (double)o : fmax(0.0, s * ((double)o + 0.5) - 0.5);
    i[0] = (int64_t)r;
    i[1] = i[0] + (i[0] < in - 1);
    l[1] = r - (double)i[0];
    l[0] = 1.0 - l[1];
}

/* y (the output's [P, OH, OW]) and dx (x's [P, H, W]) of x and g in
 * double; the output sizes from y's shape */
static void reference(const icase *c, const cg_tensor *x, const cg_tensor *y, const float *xv,
                      const float *gv, double *yv, double *dx)
{
    const int64_t P = x->shape[0] * x->shape[1];
    const int64_t H = c->nd == 2 ? x->shape[2] : 1, W = x->shape[x->ndim - 1];
    const int64_t OH = c->nd == 2 ? y->shape[2] : 1, OW = y->shape[y->ndim - 1];
    const bool one = !c->o.size[1] && c->o.scale_factor[1] == 0.0;
    double sc[2] = {0, 0};
    for (int k = 0; k < c->nd && !c->o.recompute_scale_factor; k++)
        sc[k + 2 - c->nd] = c->o.scale_factor[one ? 0 : k];
    memset(dx, 0, (size_t)(P * H * W) * sizeof *dx);
    for (int64_t p = 0; p < P; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ih[4], iw[4];
                double lh[4], lw[4], s = 0;
                ref_src(&c->o, H, OH, sc[0], oh, ih, lh);
                ref_src(&c->o, W, OW, sc[1], ow, iw, lw);
                const int64_t o = (p * OH + oh) * OW + ow;
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 4; b++) {
                        const int64_t k = (p * H + ih[a]) * W + iw[b];
                        s += lh[a] * lw[b] * xv[k];
                        dx[k] += lh[a] * lw[b] * gv[o];
                    }
                yv[o] = s;
            }
}

static void assert_near(const cg_tensor *t, const double *want, double tol, const char *what)
{
    float *v = cg_test_values(t);
    for (int64_t i = 0; i < cg_numel(t); i++)
        ck_assert_msg(fabs(v[i] - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s: element %lld %.9g, "
                      "expected %.9g",
                      what, (long long)i, (double)v[i], want[i]);
    free(v);
}

static cg_tensor *input_of(cg_rng *r, int nd, int layout)
{
    const int64_t s2[4] = {2, 3, 5, 7}, s1[3] = {2, 3, 7};
    return cg_test_randn_layout(r, nd + 2, nd == 2 ? s2 : s1, layout);
}

/* Every case's output and gradient of sum(y * g) against the double
 * reference, on a transposed input */
START_TEST(test_interp_reference)
{
    cg_rng r = cg_rng_new(1);
    for (int i = 0; i < NCASES; i++) {
        const icase *c = &CASES[i];
        cg_tensor *x = cg_requires_grad(input_of(&r, c->nd, 1), true);
        cg_tensor *y = cg_interpolate(x, c->o);
        ck_assert_msg(y, "%s: %s", c->name, cg_last_error());
        cg_tensor *g = cg_randn(&r, y->ndim, y->shape), *p = cg_mul(y, g), *l = cg_sum_all(p);
        ck_assert(cg_backward(l, NULL, false));
        float *xv = cg_test_values(x);
        double *yv = malloc((size_t)cg_numel(y) * sizeof *yv),
               *dx = malloc((size_t)cg_numel(x) * sizeof *dx);
        reference(c, x, y, xv, cg_data(g), yv, dx);
        /* bicubic's float32 weights (PyTorch's, Horner's rule with
         * cancellation) are a few 1e-7 off the double ones, 16 of them */
        const double tol = c->o.mode == CUB ? 5e-6 : 1e-6;
        assert_near(y, yv, tol, c->name);
        assert_near(cg_grad(x), dx, tol, c->name);
        free(xv);
        free(yv);
        free(dx);
        cg_release_all(5, x, y, g, p, l);
    }
}
END_TEST

/* Values worked by hand (PyTorch gives the same); a scale of 1.7 and 0.6
 * passed to the kernel or recomputed from the sizes */
START_TEST(test_interp_values)
{
    cg_tensor *x = cg_from_data(CG_SHAPE(1, 1, 4), ((float[]){1, 2, 3, 4}));
    struct {
        cg_interp o;
        int n;
        float want[8];
    } T[] = {
        {I(.mode = LIN, .size = {8}), 8, {1, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f, 3.75f, 4}},
        {I(.mode = LIN, .size = {7}, .align_corners = true), 7, {1, 1.5f, 2, 2.5f, 3, 3.5f, 4}},
        {I(.mode = LIN, .size = {2}), 2, {1.5f, 3.5f}},
        /* out 6: 1 / 1.7 = 0.588 passed, or 4 / 6 recomputed */
        {I(.mode = NEAR, .scale_factor = {1.7}), 6, {1, 1, 2, 2, 3, 3}},
        {I(.mode = NEAR, .scale_factor = {1.7}, .recompute_scale_factor = true),
         6,
         {1, 1, 2, 3, 3, 4}},
        {I(.mode = EXACT, .scale_factor = {1.7}), 6, {1, 1, 2, 3, 3, 4}},
        /* out 2: 1 / 0.6 = 1.667 passed, or 4 / 2 recomputed */
        {I(.mode = NEAR, .scale_factor = {0.6}), 2, {1, 2}},
        {I(.mode = NEAR, .scale_factor = {0.6}, .recompute_scale_factor = true), 2, {1, 3}},
        {I(.mode = LIN, .scale_factor = {0.6}), 2, {1.33333333f, 3}},
        {I(.mode = LIN, .scale_factor = {0.6}, .recompute_scale_factor = true), 2, {1.5f, 3.5f}},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        cg_tensor *y = cg_interpolate(x, T[i].o);
        ck_assert_msg(y && y->shape[2] == T[i].n, "case %zu: %s", i, cg_last_error());
        CG_ASSERT_TENSOR(y, T[i].want, 1e-6, 1e-6);
        cg_release(y);
    }
    /* bilinear of a 2x2 to 3x3, align_corners: the centre the mean */
    cg_tensor *x2 = cg_from_data(CG_SHAPE(1, 1, 2, 2), ((float[]){0, 4, 8, 12}));
    cg_tensor *y = cg_interpolate(x2, I(.mode = BIL, .size = {3}, .align_corners = true));
    CG_ASSERT_TENSOR(y, ((float[]){0, 2, 4, 4, 6, 8, 8, 10, 12}), 0, 0);
    /* bicubic of the row 1 2 3 4 to 7, align_corners: halfway sources 2
     * and 3 of a straight line (2.5), next to a border a clamped one */
    cg_tensor *x4 = cg_from_data(CG_SHAPE(1, 1, 1, 4), ((float[]){1, 2, 3, 4}));
    cg_tensor *yc = cg_interpolate(x4, I(.mode = CUB, .size = {1, 7}, .align_corners = true));
    CG_ASSERT_TENSOR(yc, ((float[]){1, 1.40625f, 2, 2.5f, 3, 3.59375f, 4}), 1e-6, 1e-6);
    cg_release_all(5, yc, x4, y, x2, x);
}
END_TEST

/* Gradchecks of every case on three layouts, and the reads mask */
START_TEST(test_interp_gradcheck)
{
    cg_rng r = cg_rng_new(3);
    for (int i = 0; i < NCASES; i++)
        for (int layout = 0; layout < 3; layout++) {
            const icase *c = &CASES[i];
            cg_tensor *x = cg_requires_grad(input_of(&r, c->nd, layout), true);
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(interp_fn, (void *)c, 1, &x, NULL, &rep), "%s layout %d: %s",
                          c->name, layout, rep.message);
            cg_test_check_unread(interp_fn, (void *)c, 1, &x, c->name);
            cg_release(x);
        }
}
END_TEST

/* bfloat16: the float32 result rounded once; the gradient bfloat16 */
START_TEST(test_interp_bf16)
{
    cg_rng r = cg_rng_new(4);
    for (int i = 0; i < NCASES; i++) {
        cg_tensor *xf = input_of(&r, CASES[i].nd, 0), *xb = cg_k_to(xf, CG_BF16);
        cg_tensor *xr = cg_k_to(xb, CG_F32);
        cg_tensor *yb = cg_interpolate(xb, CASES[i].o), *yf = cg_interpolate(xr, CASES[i].o);
        cg_test_assert_bf16_rounded(yb, yf, CASES[i].name);
        cg_release_all(5, xf, xb, xr, yb, yf);
    }
    cg_tensor *xf = cg_ones(CG_SHAPE(1, 2, 3, 3));
    cg_tensor *xb = cg_requires_grad(cg_k_to(xf, CG_BF16), true);
    cg_tensor *y = cg_interpolate(xb, I(.mode = NEAR, .scale_factor = {2})), *s = cg_sum_all(y);
    ck_assert(s && cg_backward(s, NULL, false));
    ck_assert(cg_grad(xb)->dtype == CG_BF16);
    cg_tensor *g = cg_k_to(cg_grad(xb), CG_F32);
    for (int64_t i = 0; i < cg_numel(g); i++)
        ck_assert(cg_data(g)[i] == 4.0f); /* each source copied 2 x 2 times */
    cg_release_all(5, g, s, y, xf, xb);
}
END_TEST

START_TEST(test_interp_refusals)
{
    cg_tensor *x3 = cg_zeros(CG_SHAPE(2, 3, 5)), *x4 = cg_zeros(CG_SHAPE(2, 3, 5, 6));
    cg_tensor *x5 = cg_zeros(CG_SHAPE(1, 2, 3, 5, 5)), *x2 = cg_zeros(CG_SHAPE(3, 5));
    cg_tensor *xi = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 3, 5));
    CG_ASSERT_REFUSED(!cg_interpolate(x4, I(.mode = LIN, .size = {4})),
                      "interpolate: input [2, 3, 5, 6] has 4 dims, linear expects 3 ([N, C, L])");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = BIL, .size = {4})),
                      "bilinear expects 4 ([N, C, H, W])");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = CUB, .size = {4})),
                      "interpolate: input [2, 3, 5] has 3 dims, bicubic expects 4 ([N, C, H, W])");
    CG_ASSERT_REFUSED(!cg_interpolate(x5, I(.mode = CUB, .size = {4})),
                      "has 5 dims, bicubic expects 4");
    CG_ASSERT_REFUSED(!cg_interpolate(x5, I(.mode = NEAR, .size = {4})),
                      "nearest expects 3 ([N, C, L]) or 4");
    CG_ASSERT_REFUSED(!cg_interpolate(x2, I(.mode = EXACT, .size = {4})), "has 2 dims");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = NEAR, .size = {4}, .scale_factor = {2})),
                      "interpolate: only one of size or scale_factor should be defined");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = NEAR)),
                      "interpolate: either size or scale_factor should be defined");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = NEAR, .size = {4}, .align_corners = true)),
                      "align_corners can only be set with the interpolating modes linear, "
                      "bilinear and bicubic, not nearest");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = EXACT, .size = {4}, .align_corners = true)),
                      "not nearest-exact");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = LIN, .size = {-1})),
                      "interpolate: size [-1, 0], expected sizes > 0");
    CG_ASSERT_REFUSED(!cg_interpolate(x4, I(.mode = BIL, .size = {0, 3})), "size [0, 3]");
    CG_ASSERT_REFUSED(!cg_interpolate(x4, I(.mode = BIL, .size = {3, -2})), "size [3, -2]");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = LIN, .scale_factor = {-1.5})),
                      "interpolate: scale_factor [-1.5, 0], expected finite scales > 0");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = LIN, .scale_factor = {NAN})), "scale_factor");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = LIN, .scale_factor = {INFINITY})),
                      "scale_factor");
    CG_ASSERT_REFUSED(!cg_interpolate(x4, I(.mode = NEAR, .scale_factor = {0, 2})),
                      "scale_factor [0, 2]");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = NEAR, .scale_factor = {0.1})),
                      "interpolate: input [2, 3, 5] and output size 0 along spatial dim 0: input "
                      "and output sizes should be greater than 0");
    CG_ASSERT_REFUSED(!cg_interpolate(x4, I(.mode = BIL, .scale_factor = {1, 0.1})),
                      "output size 0 along spatial dim 1");
    CG_ASSERT_REFUSED(
        !cg_interpolate(x3, I(.mode = NEAR, .size = {4}, .recompute_scale_factor = true)),
        "recompute_scale_factor is not meaningful with an explicit size");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = NEAR, .size = {4, 4})),
                      "a 3-d input takes one size or scale_factor (index 0), got index 1 size");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = (cg_interp_mode)7, .size = {4})),
                      "interpolate: mode 7, expected nearest, nearest-exact, linear, bilinear or "
                      "bicubic");
    CG_ASSERT_REFUSED(!cg_interpolate(x4, I(.mode = (cg_interp_mode)5, .size = {4})),
                      "interpolate: mode 5");
    CG_ASSERT_REFUSED(!cg_interpolate(xi, I(.mode = NEAR, .size = {4})),
                      "interpolate: argument 1 is int64");
    CG_ASSERT_REFUSED(!cg_interpolate(x3, I(.mode = NEAR, .scale_factor = {1e300})),
                      "scale_factor [1e+300, 0]");
    cg_tensor *xl = cg_zeros(CG_SHAPE(1, 1, 2000));
    CG_ASSERT_REFUSED(!cg_interpolate(xl, I(.mode = NEAR, .scale_factor = {9e11})),
                      "interpolate: scale_factor 9e+11 of size 2000 is too large");
    cg_release(xl);
    CG_ASSERT_REFUSED(!cg_interpolate(NULL, I(.mode = NEAR, .size = {4})), "interpolate");
    cg_tensor *g = cg_zeros(CG_SHAPE(2, 3, 5));
    const cg_interp o = I(.mode = LIN, .size = {4});
    CG_ASSERT_REFUSED(!cg_k_interpolate_backward(g, x3, &o),
                      "interpolate backward: gradient [2, 3, 5] does not match the output");
    CG_ASSERT_REFUSED(!cg_k_interpolate(x3, NULL), "interpolate: argument 'options' is NULL");
    cg_release_all(6, x3, x4, x5, x2, xi, g);
}
END_TEST

/* Upsample and its constructors: cg_interpolate's values, no parameters */
START_TEST(test_upsample_module)
{
    cg_rng r = cg_rng_new(9);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 4, 5));
    const cg_interp o = I(.mode = BIL, .scale_factor = {1.7, 0.6});
    cg_upsample *u = cg_upsample_new(&o);
    cg_upsample *n2 = cg_upsampling_nearest2d_new(NULL, (const double[]){2, 3});
    cg_upsample *b2 = cg_upsampling_bilinear2d_new((const int64_t[]){6, 7}, NULL);
    ck_assert(u && n2 && b2);
    ck_assert_str_eq(CG_MODULE(u)->type, "Upsample");
    ck_assert_str_eq(CG_MODULE(n2)->type, "UpsamplingNearest2d");
    ck_assert_str_eq(CG_MODULE(b2)->type, "UpsamplingBilinear2d");
    const cg_interp want[3] = {o, I(.mode = NEAR, .scale_factor = {2, 3}),
                               I(.mode = BIL, .size = {6, 7}, .align_corners = true)};
    cg_upsample *m[3] = {u, n2, b2};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(CG_MODULE(m[i])->n_params, 0);
        cg_tensor *a = cg_upsample_forward(m[i], x), *b = cg_interpolate(x, want[i]);
        ck_assert_msg(a && b, "%s", cg_last_error());
        ck_assert(a->ndim == 4 && !memcmp(a->shape, b->shape, sizeof(int64_t) * 4));
        float *va = cg_test_values(a), *vb = cg_test_values(b);
        ck_assert(!memcmp(va, vb, (size_t)cg_numel(a) * sizeof(float)));
        free(va);
        free(vb);
        cg_release_all(2, a, b);
    }
    cg_tensor *x3 = cg_zeros(CG_SHAPE(2, 3, 5));
    CG_ASSERT_REFUSED(!cg_upsample_forward(b2, x3), "bilinear expects 4");
    CG_ASSERT_REFUSED(!cg_upsample_forward(u, NULL), "cg_upsample_forward");
    CG_ASSERT_REFUSED(!cg_upsample_new(&(cg_interp){.mode = NEAR}),
                      "Upsample: either size or scale_factor should be defined");
    CG_ASSERT_REFUSED(!cg_upsampling_nearest2d_new((const int64_t[]){2, 2}, (const double[]){2, 2}),
                      "UpsamplingNearest2d: only one of size or scale_factor");
    CG_ASSERT_REFUSED(!cg_upsampling_bilinear2d_new((const int64_t[]){0, 2}, NULL),
                      "UpsamplingBilinear2d: size [0, 2]");
    CG_ASSERT_REFUSED(!cg_upsample_new(NULL), "Upsample: argument 'options' is NULL");
    for (int i = 0; i < 3; i++)
        cg_module_free(CG_MODULE(m[i]));
    cg_release_all(2, x, x3);
}
END_TEST

/* ----------------------------------------------------------- threads */
/* every case at nt threads on a large batch: the loss sum_i (i + 1) y_i^2
 * and x's gradient (malloc'd) */
static void run_at(int nt, float *got[3])
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(5);
    cg_tensor *x4 = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(8, 64, 20, 18), 1), true);
    cg_tensor *x3 = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(8, 64, 300), 2), true);
    cg_tensor *y[NCASES];
    for (int i = 0; i < NCASES; i++)
        y[i] = cg_interpolate(CASES[i].nd == 2 ? x4 : x3, CASES[i].o);
    cg_tensor *sum = cg_test_weighted_squares(NCASES, y);
    cg_test_backward_values(sum, 2, (cg_tensor *[]){x4, x3}, got);
    cg_release_all(3, x4, x3, sum);
}

START_TEST(test_threads_identical)
{
    const int64_t n[3] = {1, 8 * 64 * 20 * 18, 8 * 64 * 300};
    cg_test_same_bits_1_2_threads(run_at, 3, n);
}
END_TEST

static Suite *interp_suite(void)
{
    Suite *s = suite_create("interp");
    TCase *tc = tcase_create("interp");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_interp_reference);
    tcase_add_test(tc, test_interp_values);
    tcase_add_test(tc, test_interp_gradcheck);
    tcase_add_test(tc, test_interp_bf16);
    tcase_add_test(tc, test_interp_refusals);
    tcase_add_test(tc, test_upsample_module);
    tcase_add_test(tc, test_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {interp_suite()};
    return cg_test_run(s, 1);
}
