/* The 3-d convolutions: autograd's cg_conv3d / cg_conv_transpose3d and the
 * modules nn.Conv3d / nn.ConvTranspose3d (nn/conv.c) beyond what
 * tests/test_conv.c's cases check (values and gradients against a direct
 * sum in double, gradchecks, 1 and 2 threads, bf16): their refusals in one
 * line naming conv3d / conv_transpose3d, the modules' names, shapes,
 * PyTorch's init bounds, forward(x, output_size), padding modes, and their
 * safetensors files. PyTorch's values and gradients:
 * tests/interop/check_conv.c (the test torch_conv). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "tests/testutil.h"

#define REFUSED CG_ASSERT_REFUSED_LINE

START_TEST(test_conv3d_refusals)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 3, 5, 6)),
              *w = cg_randn(&r, CG_SHAPE(6, 4, 2, 3, 3));
    cg_tensor *b = cg_randn(&r, CG_SHAPE(6)), *x3 = cg_randn(&r, CG_SHAPE(4, 5, 6));
    cg_tensor *w3 = cg_randn(&r, CG_SHAPE(6, 4, 3)), *wb = cg_k_to(w, CG_BF16);
    cg_tensor *xi = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 4, 3, 5, 6)),
              *b4 = cg_randn(&r, CG_SHAPE(4));
    cg_conv_cfg c = CG_CONV_DEFAULT;
    REFUSED(cg_conv3d(NULL, w, b, NULL), "input is NULL");
    REFUSED(cg_conv3d(xi, w, b, NULL), "conv3d: input is int64, expected float32 or bfloat16");
    REFUSED(cg_conv3d(x, wb, b, NULL),
            "conv3d: weight is bfloat16, expected float32 (convert with cg_to)");
    REFUSED(cg_conv3d(x3, w, b, NULL),
            "conv3d: input [4, 5, 6] has 3 dims, expected 4 (unbatched) or 5 (batched)");
    REFUSED(cg_conv3d(x, w3, b, NULL), "conv3d: weight [6, 4, 3] must be [out, in / groups, KD, "
                                       "KH, KW] with no empty dim");
    REFUSED(cg_conv3d(x, w, b4, NULL),
            "conv3d: bias [4], weight [6, 4, 2, 3, 3]: the bias must be [6]");
    c.groups = 2;
    REFUSED(cg_conv3d(x, w, b, &c), "conv3d: input [2, 4, 3, 5, 6] has 4 channels, weight [6, 4, "
                                    "2, 3, 3] with groups 2 expects 8");
    c = CG_CONV_DEFAULT, c.groups = 4;
    REFUSED(cg_conv3d(x, w, b, &c), "conv3d: groups 4 must divide the input channels (4) and the "
                                    "output channels (6)");
    c = CG_CONV_DEFAULT, c.stride[2] = 0;
    REFUSED(cg_conv3d(x, w, b, &c), "conv3d: stride must be positive (got 0 in spatial dim 2)");
    c = CG_CONV_DEFAULT, c.dilation[0] = -1;
    REFUSED(cg_conv3d(x, w, b, &c), "conv3d: dilation must be positive (got -1 in spatial dim 0)");
    c = CG_CONV_DEFAULT, c.padding[1] = -2;
    REFUSED(cg_conv3d(x, w, b, &c),
            "conv3d: padding must be non-negative (got -2 in spatial dim 1)");
    c = CG_CONV_DEFAULT, c.pad = CG_CONV_SAME, c.stride[1] = 2;
    REFUSED(cg_conv3d(x, w, b, &c),
            "conv3d: padding='same' needs stride 1 (got 2 in spatial dim 1)");
    c = CG_CONV_DEFAULT, c.dilation[0] = 3;
    REFUSED(cg_conv3d(x, w, b, &c), "conv3d: kernel 2 (dilated 4) is larger than the padded input "
                                    "3 in spatial dim 0");
    c = CG_CONV_DEFAULT, c.output_padding[2] = 1;
    REFUSED(cg_conv3d(x, w, b, &c), "conv3d: output_padding is the transposed convolution's (got 1 "
                                    "in spatial dim 2)");
    c = CG_CONV_DEFAULT, c.padding_mode = CG_PAD_CIRCULAR;
    REFUSED(cg_k_conv(3, x, w, b, &c),
            "conv3d: the kernel pads with zeros; padding_mode 3 is cg_conv3d's (autograd), which "
            "pads x first");
    cg_tensor *dx = NULL;
    CG_ASSERT_REFUSED(!cg_k_conv_backward(3, x, w, NULL, x, &dx, NULL, NULL),
                      "conv3d backward: gradient float32 [2, 4, 3, 5, 6], expected float32 [2, 6, "
                      "2, 3, 4]");
    ck_assert(!dx);
    /* the modules */
    REFUSED(cg_conv3d_new(4, 6, 3, 0, 3, NULL, true, &r),
            "Conv3d: channels and kernel size must be positive (in 4, out 6, kernel 3x0x3)");
    c = CG_CONV_DEFAULT, c.groups = 4;
    REFUSED(cg_conv3d_new(4, 6, 3, 3, 3, &c, true, &r),
            "Conv3d: in_channels 4 and out_channels 6 must be divisible by groups 4");
    c = CG_CONV_DEFAULT, c.padding_mode = (cg_pad_mode)9;
    REFUSED(cg_conv3d_new(4, 6, 3, 3, 3, &c, true, &r),
            "Conv3d: padding_mode 9 is not one of zeros, reflect, replicate, circular (0 to 3)");
    cg_conv *m = cg_conv3d_new(3, 2, 1, 2, 2, NULL, true, &r);
    REFUSED(cg_conv_forward(m, x), "conv3d: input [2, 4, 3, 5, 6] has 4 channels, weight [2, 3, 1, "
                                   "2, 2] with groups 1 expects 3");
    REFUSED(cg_conv_transpose_forward(m, x, 3, (int64_t[]){3, 5, 6}),
            "cg_conv_transpose_forward: the module is a Conv3d, not a transposed convolution "
            "(output_size is ConvTranspose's)");
    cg_module_free(CG_MODULE(m));
    cg_release_all(8, x, w, b, x3, w3, wb, xi, b4);
}
END_TEST

/* the transposed one's: its weight [in, out / groups, ...], its output
 * padding, its output length, output_size */
START_TEST(test_conv_transpose3d_refusals)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 3, 2, 4)),
              *w = cg_randn(&r, CG_SHAPE(4, 3, 2, 2, 3));
    cg_tensor *b = cg_randn(&r, CG_SHAPE(3)), *w1 = cg_randn(&r, CG_SHAPE(3, 4, 2, 2, 3));
    cg_tensor *w2 = cg_randn(&r, CG_SHAPE(4, 3, 3, 3)), *x1 = cg_randn(&r, CG_SHAPE(4, 1, 2, 4));
    cg_conv_cfg c = CG_CONV_DEFAULT;
    REFUSED(cg_conv_transpose3d(x, w2, b, NULL),
            "conv_transpose3d: weight [4, 3, 3, 3] must be "
            "[in, out / groups, KD, KH, KW] with no empty dim");
    REFUSED(cg_conv_transpose3d(x, w1, NULL, NULL),
            "conv_transpose3d: input [2, 4, 3, 2, 4] has 4 channels, weight [3, 4, 2, 2, 3] with "
            "groups 1: the weight must be [4, out / groups, ...] and groups divide the channels");
    c.output_padding[1] = 1;
    REFUSED(cg_conv_transpose3d(x, w, b, &c),
            "conv_transpose3d: output padding must be smaller than either stride or dilation, but "
            "got output_padding 1, stride 1, dilation 1 in spatial dim 1");
    c.stride[2] = 2, c.output_padding[1] = 0, c.output_padding[2] = -1;
    REFUSED(cg_conv_transpose3d(x, w, b, &c), "conv_transpose3d: negative output_padding is not "
                                              "supported (got -1 in spatial dim 2)");
    c = CG_CONV_DEFAULT, c.pad = CG_CONV_VALID;
    REFUSED(cg_conv_transpose3d(x, w, b, &c), "conv_transpose3d: padding must be numbers");
    c = CG_CONV_DEFAULT, c.padding[0] = 1;
    REFUSED(cg_conv_transpose3d(x1, w, b, &c), "conv_transpose3d: input length 1 in spatial dim 0 "
                                               "gives the output length 0, too small");
    c = CG_CONV_DEFAULT, c.padding_mode = CG_PAD_REFLECT;
    REFUSED(cg_conv_transpose3d(x, w, b, &c), "conv_transpose3d: only the zeros padding mode is "
                                              "supported, as PyTorch's ConvTranspose");
    cg_tensor *dw = NULL;
    CG_ASSERT_REFUSED(!cg_k_conv_transpose_backward(3, x, w, NULL, x, NULL, &dw, NULL),
                      "conv_transpose3d backward: gradient float32 [2, 4, 3, 2, 4], expected "
                      "float32 [2, 3, 4, 3, 6]");
    ck_assert(!dw);
    /* output_size at stride (2, 1, 3): from [6, 3, 12] to [7, 3, 14] */
    c = CG_CONV_DEFAULT;
    c.stride[0] = 2, c.stride[2] = 3;
    CG_ASSERT_REFUSED(!cg_conv_transpose_output_padding(3, x, w, 3, (int64_t[]){6, 3, 6}, &c),
                      "conv_transpose3d: requested an output size of [6, 3, 6], but valid sizes "
                      "range from [6, 3, 12] to [7, 3, 14] for an input of [3, 2, 4]");
    CG_ASSERT_REFUSED(!cg_conv_transpose_output_padding(3, x, w, 2, (int64_t[]){6, 3}, &c),
                      "conv_transpose3d: for 5-d input, output_size must have 3 or 5 elements "
                      "(got 2)");
    ck_assert(cg_conv_transpose_output_padding(3, x, w, 5, (int64_t[]){2, 3, 7, 3, 14}, &c));
    ck_assert(c.output_padding[0] == 1 && c.output_padding[1] == 0 && c.output_padding[2] == 2);
    /* the modules */
    c = CG_CONV_DEFAULT, c.output_padding[0] = 2, c.stride[0] = 2;
    REFUSED(cg_conv_transpose3d_new(4, 6, 3, 3, 3, &c, true, &r),
            "ConvTranspose3d: output padding must be smaller than either stride or dilation");
    c = CG_CONV_DEFAULT, c.groups = 4;
    REFUSED(cg_conv_transpose3d_new(4, 6, 3, 3, 3, &c, true, &r),
            "ConvTranspose3d: in_channels 4 and out_channels 6 must be divisible by groups 4");
    cg_conv *m = cg_conv_transpose3d_new(3, 2, 3, 1, 2, NULL, true, &r);
    REFUSED(cg_conv_forward(m, x), "conv_transpose3d: input [2, 4, 3, 2, 4] has 4 channels");
    cg_module_free(CG_MODULE(m));
    cg_release_all(6, x, w, b, w1, w2, x1);
}
END_TEST

/* the largest |value| of t */
static double max_abs(const cg_tensor *t)
{
    float *v = cg_test_values(t);
    double mx = 0;
    for (int64_t i = 0; i < cg_numel(t); i++)
        mx = fmax(mx, fabs(v[i]));
    free(v);
    return mx;
}

static bool bit_equal(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || cg_numel(a) != cg_numel(b))
        return false;
    float *va = cg_test_values(a), *vb = cg_test_values(b);
    const bool eq = !memcmp(va, vb, sizeof(float) * (size_t)cg_numel(a));
    free(va);
    free(vb);
    return eq;
}

/* the modules: PyTorch's names, shapes and init bounds (fan_in the
 * weight's dim 1 times the taps), the forward the functional op's, the
 * transposed one's output_size, and a safetensors file saved and loaded
 * into a module drawn otherwise (the same outputs). _i 1: ConvTranspose3d */
START_TEST(test_conv3d_modules)
{
    const bool t = _i;
    cg_rng r = cg_rng_new(21);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.groups = 2, c.padding[0] = 1, c.padding[2] = 2;
    if (t)
        c.stride[0] = c.stride[2] = 2, c.output_padding[2] = 1;
    cg_conv *m = (t ? cg_conv_transpose3d_new : cg_conv3d_new)(4, 6, 2, 3, 5, &c, true, &r);
    ck_assert_msg(m, "%s", cg_last_error());
    ck_assert_str_eq(m->base.type, t ? "ConvTranspose3d" : "Conv3d");
    ck_assert_int_eq(m->nd, 3);
    const int64_t ws[2][5] = {{6, 2, 2, 3, 5}, {4, 3, 2, 3, 5}};
    ck_assert(m->weight->ndim == 5 && !memcmp(m->weight->shape, ws[t], sizeof ws[t]));
    ck_assert(m->bias->ndim == 1 && m->bias->shape[0] == 6);
    const double bound = 1 / sqrt((t ? 3.0 : 2.0) * 30);
    cg_tensor *w0 = cg_k_clone(m->weight);
    for (int pass = 0; pass < 2; pass++) {
        const double mw = max_abs(m->weight), mb = max_abs(m->bias);
        ck_assert_msg(mw <= bound && mw > 0.5 * bound && mb <= bound, "max %g %g, bound %g", mw, mb,
                      bound);
        ck_assert(cg_module_reset_parameters(CG_MODULE(m), &r));
    }
    /* redrawn, transposed or not (the transposed ones were kept before
     * 2026-12-07) */
    ck_assert(!bit_equal(w0, m->weight));
    cg_release(w0);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 3, 4, 5)), *y = cg_conv_forward(m, x);
    cg_tensor *z = (t ? cg_conv_transpose3d : cg_conv3d)(x, m->weight, m->bias, &c);
    /* transposed: 2 2 - 2 + 1 + 1, 3 + 2 + 1, 4 2 - 4 + 4 + 1 + 1 */
    const int64_t ys[2][5] = {{2, 6, 4, 2, 5}, {2, 6, 4, 6, 10}};
    ck_assert_msg(y && z, "%s", cg_last_error());
    ck_assert(y->ndim == 5 && !memcmp(y->shape, ys[t], sizeof ys[t]) && bit_equal(y, z));
    if (t) { /* output_size one more in depth, one less in width: output_padding (1, 0, 0) */
        cg_tensor *y2 = cg_conv_transpose_forward(m, x, 3, (int64_t[]){5, 6, 9});
        cg_conv_cfg c2 = c;
        c2.output_padding[2] = 0, c2.output_padding[0] = 1;
        cg_tensor *z2 = cg_conv_transpose3d(x, m->weight, m->bias, &c2);
        ck_assert_msg(y2 && y2->shape[2] == 5 && y2->shape[4] == 9 && bit_equal(y2, z2), "%s",
                      cg_last_error());
        cg_release_all(2, y2, z2);
    }
    /* its file loads into a module drawn from another seed */
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_conv3d_");
    close(fd);
    ck_assert_msg(cg_module_save(CG_MODULE(m), path, 0, NULL), "%s", cg_last_error());
    cg_rng r2 = cg_rng_new(99);
    cg_conv *m2 = (t ? cg_conv_transpose3d_new : cg_conv3d_new)(4, 6, 2, 3, 5, &c, true, &r2);
    cg_tensor *before = cg_conv_forward(m2, x);
    ck_assert(!bit_equal(before, y));
    ck_assert_msg(cg_module_load_file(CG_MODULE(m2), path), "%s", cg_last_error());
    cg_tensor *after = cg_conv_forward(m2, x);
    ck_assert(bit_equal(after, y));
    /* a 2-d module does not take the file: its weight's shape differs */
    cg_conv *m3 = (t ? cg_conv_transpose2d_new : cg_conv2d_new)(4, 6, 3, 5, &c, true, &r2);
    cg_clear_error();
    ck_assert(!cg_module_load_file(CG_MODULE(m3), path));
    ck_assert_msg(strstr(cg_last_error(), "weight"), "%s", cg_last_error());
    unlink(path);
    cg_release_all(5, x, y, z, before, after);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(m2));
    cg_module_free(CG_MODULE(m3));
}
END_TEST

/* padding_mode: a Conv3d with reflect 'same' (even kernels: one more
 * after) and one with circular numbers are the pad then the convolution
 * without padding, bits and gradients */
START_TEST(test_conv3d_padding_mode)
{
    cg_rng r = cg_rng_new(7);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.pad = _i ? CG_CONV_PAD_NUMBERS : CG_CONV_SAME;
    c.padding_mode = _i ? CG_PAD_CIRCULAR : CG_PAD_REFLECT;
    c.padding[0] = 1, c.padding[1] = 0, c.padding[2] = 2;
    cg_conv *m = cg_conv3d_new(2, 3, 2, 3, 4, &c, true, &r);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 2, 4, 5, 6)), true);
    /* F.pad's order: the width's pair first; 'same' (2, 3, 4): (1, 2), (1, 1), (0, 1) */
    const int64_t pads[2][6] = {{1, 2, 1, 1, 0, 1}, {2, 2, 0, 0, 1, 1}};
    float *v[2], *g[2];
    int64_t ny = 0;
    for (int k = 0; k < 2; k++) {
        cg_tensor *xp = k ? cg_pad(x, 6, pads[_i], c.padding_mode, 0.0f) : NULL;
        cg_tensor *y = k ? cg_conv3d(xp, m->weight, m->bias, NULL) : cg_conv_forward(m, x);
        ck_assert_msg(y, "%s", cg_last_error());
        cg_tensor *sq = cg_mul(y, y), *l = cg_sum_all(sq);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        ny = cg_numel(y);
        v[k] = cg_test_values(y);
        g[k] = cg_test_values(cg_grad(x));
        cg_zero_grad(x);
        cg_release_all(4, xp, y, sq, l);
    }
    ck_assert_int_eq(ny, _i ? 2 * 3 * 5 * 3 * 7 : 2 * 3 * 4 * 5 * 6);
    ck_assert(!memcmp(v[0], v[1], (size_t)ny * sizeof(float)));
    ck_assert(!memcmp(g[0], g[1], 2 * 2 * 4 * 5 * 6 * sizeof(float)));
    for (int k = 0; k < 2; k++)
        free(v[k]), free(g[k]);
    cg_release(x);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* a 1x1x1 kernel (x itself its cols where its positions are one run) over
 * x sliced every second depth (its planes not one run, so unfolded): the
 * values and gradients of the same convolution over a contiguous copy
 * (read as its own cols), within a few ulps (the two products may sum in
 * another order); _i 1: the transposed one */
START_TEST(test_conv3d_1x1x1_sliced)
{
    cg_rng r = cg_rng_new(12);
    cg_tensor *big = cg_randn(&r, CG_SHAPE(2, 3, 8, 4, 5)),
              *w = cg_randn(&r, CG_SHAPE(3, 3, 1, 1, 1));
    cg_tensor *xs = cg_requires_grad(cg_slice(big, 2, 0, 8, 2), true);
    cg_tensor *xc = cg_requires_grad(cg_k_contiguous(xs), true);
    ck_assert(!cg_is_contiguous(xs) && cg_is_contiguous(xc));
    cg_requires_grad(w, true);
    float *v[2], *gw[2], *gx[2];
    for (int k = 0; k < 2; k++) {
        cg_tensor *x = k ? xc : xs;
        cg_tensor *y = (_i ? cg_conv_transpose3d : cg_conv3d)(x, w, NULL, NULL);
        cg_tensor *sq = cg_mul(y, y), *l = cg_sum_all(sq);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        v[k] = cg_test_values(y);
        gw[k] = cg_test_values(cg_grad(w));
        gx[k] = cg_test_values(cg_grad(x));
        cg_zero_grad(w);
        cg_release_all(3, y, sq, l);
    }
    const int64_t n = 2 * 3 * 4 * 4 * 5;
    CG_ASSERT_CLOSE(v[0], v[1], n, 1e-6, 1e-6);
    CG_ASSERT_CLOSE(gw[0], gw[1], 9, 1e-5, 1e-5);
    CG_ASSERT_CLOSE(gx[0], gx[1], n, 1e-6, 1e-6);
    for (int k = 0; k < 2; k++)
        free(v[k]), free(gw[k]), free(gx[k]);
    cg_release_all(4, big, w, xs, xc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conv3d");
    TCase *tc = tcase_create("conv3d");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_conv3d_refusals);
    tcase_add_test(tc, test_conv_transpose3d_refusals);
    tcase_add_loop_test(tc, test_conv3d_modules, 0, 2);
    tcase_add_loop_test(tc, test_conv3d_padding_mode, 0, 2);
    tcase_add_loop_test(tc, test_conv3d_1x1x1_sliced, 0, 2);
    suite_add_tcase(s, tc);
    return cg_test_run(&s, 1);
}
