/* F.unfold / F.fold: autograd's cg_unfold / cg_fold (core/unfold.c, the
 * convolution's im2col and col2im) and the modules nn.Unfold / nn.Fold
 * (nn/spatial.c); and nn.ConvTranspose's forward(x, output_size)
 * (core/conv_transpose.c cg_conv_transpose_output_padding, nn/conv.c).
 * Values and gradients against a direct loop in double (every case below:
 * stride, padding, dilation, non-square kernels, unbatched, transposed and
 * strided inputs), gradchecks of both ops, the same bits at 1 and 2
 * threads, bfloat16 inputs, refusals in one line. PyTorch's values and
 * gradients: tests/interop/check_conv.c (the test torch_conv). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "tests/testutil.h"

/* A case: N (0: unbatched), C, the input's H and W, the options, and x's
 * layout (cg_test_randn_layout's kind; unfold's x, fold's input) */
typedef struct {
    const char *name;
    int64_t N, C, H, W;
    cg_fold_cfg cfg;
    int layout;
} fold_case;

/* kernel (kh, kw), dilation, padding, stride */
#define FCFG(kh, kw, dh, dw, ph, pw, sh, sw) ((cg_fold_cfg){{kh, kw}, {dh, dw}, {ph, pw}, {sh, sw}})

static const fold_case cases[] = {
    {"plain 2x2", 2, 3, 5, 6, FCFG(2, 2, 1, 1, 0, 0, 1, 1), 0},
    {"stride 2 pad 1", 2, 2, 7, 6, FCFG(3, 3, 1, 1, 1, 1, 2, 2), 0},
    {"non-square dilated", 1, 2, 7, 8, FCFG(2, 3, 2, 1, 1, 2, 1, 1), 0},
    {"stride (2,1) dilation (1,2)", 2, 3, 6, 7, FCFG(3, 2, 1, 2, 0, 1, 2, 1), 0},
    {"unbatched", 0, 3, 5, 4, FCFG(2, 3, 1, 1, 1, 0, 1, 2), 0},
    {"1x1 stride 2", 2, 2, 5, 5, FCFG(1, 1, 1, 1, 0, 0, 2, 2), 0},
    {"blocks tile it", 1, 2, 6, 4, FCFG(3, 2, 1, 1, 0, 0, 3, 2), 0},
    {"kernel past the input", 1, 2, 2, 3, FCFG(3, 4, 1, 1, 2, 1, 1, 1), 0},
    {"transposed x", 3, 4, 5, 5, FCFG(2, 2, 1, 1, 1, 0, 1, 1), 1},
    {"strided x", 2, 3, 6, 4, FCFG(3, 2, 1, 1, 1, 1, 2, 1), 2},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int64_t blocks(const fold_case *c, int i)
{
    const int64_t n = i ? c->W : c->H;
    return (n + 2 * c->cfg.padding[i] - c->cfg.dilation[i] * (c->cfg.kernel_size[i] - 1) - 1) /
               c->cfg.stride[i] +
           1;
}
static int64_t taps(const fold_case *c) { return c->cfg.kernel_size[0] * c->cfg.kernel_size[1]; }

/* the image's shape [N, C, H, W] (or [C, H, W]) and the cols' [N, C K, L] */
static int img_shape(const fold_case *c, int64_t *s)
{
    int k = 0;
    if (c->N)
        s[k++] = c->N;
    s[k++] = c->C, s[k++] = c->H, s[k++] = c->W;
    return k;
}
static int cols_shape(const fold_case *c, int64_t *s)
{
    int k = 0;
    if (c->N)
        s[k++] = c->N;
    s[k++] = c->C * taps(c), s[k++] = blocks(c, 0) * blocks(c, 1);
    return k;
}

static cg_tensor *unfold_fn(void *ctx, cg_tensor *const *in)
{
    return cg_unfold(in[0], &((const fold_case *)ctx)->cfg);
}
static cg_tensor *fold_fn(void *ctx, cg_tensor *const *in)
{
    const fold_case *c = ctx;
    return cg_fold(in[0], c->H, c->W, &c->cfg);
}
/* fold: 1, unfold: 0 */
static cg_tensor *op_fn(bool fold, const fold_case *c, cg_tensor *x)
{
    return (fold ? fold_fn : unfold_fn)((void *)c, &x);
}
/* the op's input, requiring grad (the image for unfold, cols for fold) */
static cg_tensor *make_input(bool fold, const fold_case *c, cg_rng *r)
{
    int64_t s[4];
    const int n = fold ? cols_shape(c, s) : img_shape(c, s);
    return cg_requires_grad(cg_test_randn_layout(r, n, s, c->layout), true);
}

/* ---------------------------------------------- the reference in double */
/* PyTorch's definition: cols[n, (c KH + kh) KW + kw, lh LW + lw] =
 * img[n, c, lh sh - ph + kh dh, lw sw - pw + kw dw] (0 outside). to_cols:
 * cols from img (unfold); else img += cols at those places (fold, the
 * adjoint). Contiguous arrays in double. */
static void reference(const fold_case *c, double *img, double *cols, bool to_cols)
{
    const int64_t N = c->N ? c->N : 1, KH = c->cfg.kernel_size[0], KW = c->cfg.kernel_size[1];
    const int64_t LH = blocks(c, 0), LW = blocks(c, 1), K = c->C * KH * KW;
    for (int64_t n = 0; n < N; n++)
        for (int64_t row = 0; row < K; row++)
            for (int64_t l = 0; l < LH * LW; l++) {
                const int64_t ch = row / (KH * KW), kh = row / KW % KH, kw = row % KW;
                const int64_t ih =
                    l / LW * c->cfg.stride[0] - c->cfg.padding[0] + kh * c->cfg.dilation[0];
                const int64_t iw =
                    l % LW * c->cfg.stride[1] - c->cfg.padding[1] + kw * c->cfg.dilation[1];
                const bool in = ih >= 0 && ih < c->H && iw >= 0 && iw < c->W;
                double *v = &cols[(n * K + row) * LH * LW + l];
                double *p = in ? &img[((n * c->C + ch) * c->H + ih) * c->W + iw] : NULL;
                if (to_cols)
                    *v = p ? *p : 0;
                else if (p)
                    *p += *v;
            }
}

/* the worst |got - want| / (1e-6 + 1e-6 |want|) over t */
static double worst_ratio(const cg_tensor *got, const double *want)
{
    float *f = cg_test_values(got);
    double worst = 0;
    for (int64_t i = 0; i < cg_numel(got); i++) {
        const double q = fabs(f[i] - want[i]) / (1e-6 + 1e-6 * fabs(want[i]));
        worst = q > worst || isnan(q) ? q : worst;
    }
    free(f);
    return worst;
}

/* op's forward and backward (g random) against the reference: unfold's
 * forward and fold's backward exact (copies), fold's forward and
 * unfold's backward (sums) within a few ulps */
static void check_case(const fold_case *c, bool fold, uint64_t seed)
{
    cg_rng r = cg_rng_new(seed);
    cg_tensor *x = make_input(fold, c, &r), *y = op_fn(fold, c, x);
    ck_assert_msg(y, "%s: %s", c->name, cg_last_error());
    int64_t si[4], sc[4];
    const int ni = img_shape(c, si), nc = cols_shape(c, sc);
    const int want_n = fold ? ni : nc;
    ck_assert_msg(y->ndim == want_n && !memcmp(y->shape, fold ? si : sc, sizeof(int64_t) * want_n),
                  "%s: wrong shape", c->name);
    cg_tensor *g = cg_randn(&r, y->ndim, y->shape);
    ck_assert_msg(cg_backward(y, g, false), "%s: %s", c->name, cg_last_error());
    double *xd = cg_test_doubles(x), *gd = cg_test_doubles(g);
    const int64_t nimg = cg_numel(fold ? y : x), ncols = cg_numel(fold ? x : y);
    double *img = calloc((size_t)nimg, sizeof(double)), *cols = calloc((size_t)ncols, 8);
    double *gimg = calloc((size_t)nimg, sizeof(double)), *gcols = calloc((size_t)ncols, 8);
    if (fold) { /* y = fold(x): img from x; x's gradient unfold(g) */
        memcpy(cols, xd, sizeof(double) * (size_t)ncols);
        reference(c, img, cols, false);
        memcpy(gimg, gd, sizeof(double) * (size_t)nimg);
        reference(c, gimg, gcols, true);
    } else { /* y = unfold(x); x's gradient fold(g) */
        memcpy(img, xd, sizeof(double) * (size_t)nimg);
        reference(c, img, cols, true);
        memcpy(gcols, gd, sizeof(double) * (size_t)ncols);
        reference(c, gimg, gcols, false);
    }
    const double ry = worst_ratio(y, fold ? img : cols);
    const double rx = worst_ratio(cg_grad(x), fold ? gcols : gimg);
    const double exact = fold ? rx : ry, summed = fold ? ry : rx;
    ck_assert_msg(exact == 0 && summed <= 4, "%s %s: worst error / 1e-6: copy %g, sum %g",
                  fold ? "fold" : "unfold", c->name, exact, summed);
    free(xd), free(gd), free(img), free(cols), free(gimg), free(gcols);
    cg_release_all(3, x, y, g);
}

/* ---------------------------------------------------------------- tests */
START_TEST(test_unfold_reference)
{
    for (int i = 0; i < N_CASES; i++)
        check_case(&cases[i], _i, 100 + (uint64_t)i);
}
END_TEST

START_TEST(test_unfold_gradcheck)
{
    for (int i = 0; i < N_CASES; i++) {
        const fold_case *c = &cases[i];
        cg_rng r = cg_rng_new(200 + (uint64_t)i);
        cg_tensor *x = make_input(_i, c, &r);
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(_i ? fold_fn : unfold_fn, (void *)c, 1, &x, NULL, &rep),
                      "%s %s: %s", _i ? "fold" : "unfold", c->name, rep.message);
        /* UNFOLD's and FOLD's rows: the backward reads no input's values */
        cg_test_check_unread(_i ? fold_fn : unfold_fn, (void *)c, 1, &x, c->name);
        cg_release(x);
    }
}
END_TEST

/* fold(unfold(x)) is x times how many blocks hold each element: x itself
 * when the blocks tile it */
START_TEST(test_unfold_fold_round_trip)
{
    const fold_case *c = &cases[6]; /* blocks tile it */
    cg_rng r = cg_rng_new(9);
    cg_tensor *x = make_input(false, c, &r), *u = unfold_fn((void *)c, &x);
    cg_tensor *y = u ? fold_fn((void *)c, &u) : NULL;
    ck_assert_msg(y, "%s", cg_last_error());
    float *vx = cg_test_values(x), *vy = cg_test_values(y);
    ck_assert(!memcmp(vx, vy, sizeof(float) * (size_t)cg_numel(x)));
    free(vx), free(vy);
    cg_release_all(3, x, u, y);
}
END_TEST

/* forward and gradient at 1 and 2 threads: the same bits */
START_TEST(test_unfold_threads)
{
    static const fold_case big[] = {
        {"big", 4, 16, 40, 36, FCFG(3, 3, 1, 1, 1, 1, 1, 1), 0},
        {"big strided", 3, 8, 50, 40, FCFG(4, 3, 2, 1, 2, 1, 2, 1), 2},
        {"batch of one", 1, 32, 30, 30, FCFG(3, 2, 1, 1, 1, 0, 1, 1), 0},
    };
    for (int k = 0; k < 6; k++) {
        const fold_case *c = &big[k / 2];
        const bool fold = k % 2;
        float *got[2][2];
        int64_t n[2];
        for (int nt = 1; nt <= 2; nt++) {
            cg_set_num_threads(nt);
            cg_rng r = cg_rng_new(7);
            cg_tensor *x = make_input(fold, c, &r), *y = op_fn(fold, c, x);
            ck_assert_msg(y, "%s", cg_last_error());
            cg_tensor *g = cg_randn(&r, y->ndim, y->shape);
            ck_assert_msg(cg_backward(y, g, false), "%s", cg_last_error());
            const cg_tensor *t[2] = {y, cg_grad(x)};
            for (int j = 0; j < 2; j++) {
                got[nt - 1][j] = cg_test_values(t[j]);
                n[j] = cg_numel(t[j]);
            }
            cg_release_all(3, x, y, g);
        }
        cg_set_num_threads(0);
        for (int j = 0; j < 2; j++) {
            ck_assert_msg(!memcmp(got[0][j], got[1][j], (size_t)n[j] * sizeof(float)),
                          "%s %s: result %d differs between 1 and 2 threads",
                          fold ? "fold" : "unfold", c->name, j);
            free(got[0][j]);
            free(got[1][j]);
        }
    }
}
END_TEST

/* a bfloat16 input: the result float32, the op of its float32 value bit
 * for bit; its gradient bfloat16, the float32 gradient rounded (_i: fold) */
START_TEST(test_unfold_bf16_input)
{
    const fold_case *c = &cases[1];
    cg_rng r = cg_rng_new(11);
    cg_tensor *x0 = make_input(_i, c, &r);
    cg_tensor *xb = cg_requires_grad(cg_k_to(x0, CG_BF16), true);
    cg_tensor *xf = cg_requires_grad(cg_k_to(xb, CG_F32), true);
    cg_tensor *yb = op_fn(_i, c, xb), *yf = op_fn(_i, c, xf);
    ck_assert_msg(yb, "%s", cg_last_error());
    cg_tensor *w = cg_randn(&r, yb->ndim, yb->shape);
    cg_test_bf16_input_same(yb, yf, xb, xf, w);
    cg_release_all(6, x0, xb, xf, yb, yf, w);
}
END_TEST

/* every refusal one line, NULL returned */
#define REFUSED CG_ASSERT_REFUSED_LINE

START_TEST(test_unfold_refusals)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 5, 6)), *c = cg_randn(&r, CG_SHAPE(2, 12, 20));
    cg_tensor *xi = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 3, 5, 6));
    cg_tensor *x5 = cg_randn(&r, CG_SHAPE(2, 3, 4, 5, 6)), *x0 = cg_randn(&r, CG_SHAPE(2, 0, 4, 5));
    cg_tensor *c13 = cg_randn(&r, CG_SHAPE(2, 13, 20)), *c0 = cg_randn(&r, CG_SHAPE(2, 12, 0));
    cg_tensor *xh = cg_k_to(x, CG_F16);
    cg_fold_cfg k = CG_FOLD_CFG(2, 2);
    REFUSED(cg_unfold(NULL, &k), "input is NULL");
    REFUSED(cg_unfold(x, NULL), "unfold: argument 'cfg' is NULL");
    REFUSED(cg_unfold(xi, &k), "unfold: input is int64, expected float32 or bfloat16");
    REFUSED(cg_unfold(xh, &k), "unfold: input is float16, expected float32 or bfloat16");
    REFUSED(cg_unfold(x5, &k), "unfold: input [2, 3, 4, 5, 6], expected 3 dims (unbatched) or 4 "
                               "(batched), none empty but the batch");
    REFUSED(cg_unfold(x0, &k), "unfold: input [2, 0, 4, 5], expected 3 dims");
    k = CG_FOLD_CFG(7, 3);
    REFUSED(cg_unfold(x, &k), "unfold: input spatial size (5, 6) with kernel_size (7, 3), "
                              "dilation (1, 1), padding (0, 0), stride (1, 1) gives (-1, 4) "
                              "sliding blocks, each must be at least one");
    k = CG_FOLD_CFG(2, 0);
    REFUSED(cg_unfold(x, &k), "unfold: kernel_size must be positive (got 0 in spatial dim 1)");
    k = CG_FOLD_CFG(2, 2), k.stride[0] = 0;
    REFUSED(cg_unfold(x, &k), "unfold: stride must be positive (got 0 in spatial dim 0)");
    k = CG_FOLD_CFG(2, 2), k.dilation[1] = -1;
    REFUSED(cg_unfold(x, &k), "unfold: dilation must be positive (got -1 in spatial dim 1)");
    k = CG_FOLD_CFG(2, 2), k.padding[0] = -1;
    REFUSED(cg_fold(c, 5, 6, &k), "fold: padding must be non-negative (got -1 in spatial dim 0)");
    k = CG_FOLD_CFG(2, 2);
    REFUSED(cg_fold(NULL, 5, 6, &k), "input is NULL");
    REFUSED(cg_fold(c, 5, 7, &k), "fold: output_size (5, 7) with kernel_size (2, 2), dilation "
                                  "(1, 1), padding (0, 0), stride (1, 1) gives 4 * 6 sliding "
                                  "blocks, but input [2, 12, 20] has 20 (its dim 2)");
    REFUSED(cg_fold(c, 1, 6, &k), "fold: output_size (1, 6) with kernel_size (2, 2), dilation "
                                  "(1, 1), padding (0, 0), stride (1, 1) gives 0 * 5 sliding");
    REFUSED(cg_fold(c, 0, 6, &k), "fold: output_size must be positive (got (0, 6))");
    REFUSED(cg_fold(c13, 5, 6, &k), "fold: input [2, 13, 20]'s dim 1 (13) is not divisible by "
                                    "the kernel's taps 2 * 2");
    REFUSED(cg_fold(x, 5, 6, &k), "fold: input [2, 3, 5, 6], expected 2 dims (unbatched) or 3 "
                                  "(batched)");
    REFUSED(cg_fold(c0, 5, 6, &k), "fold: input [2, 12, 0], expected 2 dims");
    REFUSED(cg_fold(xi, 5, 6, &k), "fold: input is int64");
    /* the modules */
    REFUSED(cg_unfold_new(NULL), "cg_unfold_new: argument 'cfg' is NULL");
    REFUSED(cg_fold_new(5, 6, NULL), "cg_fold_new: argument 'cfg' is NULL");
    cg_module *m = cg_fold_new(5, 7, &k);
    ck_assert(m);
    REFUSED(cg_module_forward(m, c), "fold: output_size (5, 7)");
    cg_module_free(m);
    cg_release_all(8, x, c, xi, x5, x0, c13, c0, xh);
}
END_TEST

/* the modules: their type names, the functional op's values; an empty
 * batch */
START_TEST(test_unfold_modules)
{
    const fold_case *c = &cases[2];
    cg_rng r = cg_rng_new(21);
    cg_module *u = cg_unfold_new(&c->cfg), *f = cg_fold_new(c->H, c->W, &c->cfg);
    ck_assert_msg(u && f, "%s", cg_last_error());
    ck_assert_str_eq(u->type, "Unfold");
    ck_assert_str_eq(f->type, "Fold");
    cg_tensor *x = make_input(false, c, &r), *y = cg_module_forward(u, x);
    cg_tensor *z = y ? cg_module_forward(f, y) : NULL;
    cg_tensor *y2 = unfold_fn((void *)c, &x), *z2 = fold_fn((void *)c, &y2);
    ck_assert_msg(z && z2, "%s", cg_last_error());
    float *a = cg_test_values(z), *b = cg_test_values(z2);
    ck_assert(!memcmp(a, b, sizeof(float) * (size_t)cg_numel(z)));
    free(a), free(b);
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 2, 7, 8)), *ue = cg_module_forward(u, e);
    ck_assert(ue && ue->ndim == 3 && ue->shape[0] == 0 && ue->shape[1] == 12);
    cg_tensor *fe = cg_module_forward(f, ue);
    ck_assert(fe && fe->ndim == 4 && fe->shape[0] == 0 && fe->shape[3] == 8);
    cg_release_all(8, x, y, z, y2, z2, e, ue, fe);
    cg_module_free(u);
    cg_module_free(f);
}
END_TEST

/* nn.ConvTranspose's forward(x, output_size): the output padding found,
 * the values those of the op with it; the range refused as PyTorch's */
START_TEST(test_conv_transpose_output_size)
{
    cg_rng r = cg_rng_new(5);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = 3, c.stride[1] = 2, c.padding[0] = 1, c.dilation[1] = 2;
    c.output_padding[0] = 1; /* not used with output_size, as PyTorch's */
    cg_conv *m = cg_conv_transpose2d_new(3, 4, 3, 2, &c, true, &r);
    ck_assert_msg(m, "%s", cg_last_error());
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 4, 5));
    /* smallest: (4 - 1) 3 - 2 + 2 + 1 = 10, (5 - 1) 2 + 2 + 1 = 11 */
    const int64_t sizes[3][4] = {{10, 11}, {12, 12}, {2, 4, 11, 11}};
    const int64_t pads[3][2] = {{0, 0}, {2, 1}, {1, 0}};
    for (int k = 0; k < 3; k++) {
        const int n = k == 2 ? 4 : 2;
        cg_conv_cfg got = c;
        ck_assert_msg(cg_conv_transpose_output_padding(2, x, m->weight, n, sizes[k], &got), "%s",
                      cg_last_error());
        ck_assert(got.output_padding[0] == pads[k][0] && got.output_padding[1] == pads[k][1]);
        cg_tensor *y = cg_conv_transpose_forward(m, x, n, sizes[k]);
        cg_conv_cfg want = c;
        want.output_padding[0] = pads[k][0], want.output_padding[1] = pads[k][1];
        cg_tensor *z = cg_conv_transpose2d(x, m->weight, m->bias, &want);
        ck_assert_msg(y && z, "%s", cg_last_error());
        ck_assert(y->shape[2] == sizes[k][n - 2] && y->shape[3] == sizes[k][n - 1]);
        float *a = cg_test_values(y), *b = cg_test_values(z);
        ck_assert(!memcmp(a, b, sizeof(float) * (size_t)cg_numel(y)));
        free(a), free(b);
        cg_release_all(2, y, z);
    }
    const int64_t big[2] = {13, 11}, small[2] = {10, 10}, one[1] = {10};
    REFUSED(cg_conv_transpose_forward(m, x, 2, big),
            "conv_transpose2d: requested an output size of [13, 11], but valid sizes range from "
            "[10, 11] to [12, 12] for an input of [4, 5]");
    REFUSED(cg_conv_transpose_forward(m, x, 2, small),
            "conv_transpose2d: requested an output size of [10, 10]");
    REFUSED(cg_conv_transpose_forward(m, x, 1, one),
            "conv_transpose2d: for 4-d input, output_size must have 2 or 4 elements (got 1)");
    REFUSED(cg_conv_transpose_forward(m, x, 2, NULL),
            "conv_transpose2d: argument 'output_size' is NULL");
    cg_tensor *x1 = cg_randn(&r, CG_SHAPE(2, 3, 5)), *x2 = cg_randn(&r, CG_SHAPE(3, 5));
    REFUSED(cg_conv_transpose_forward(m, x2, 2, big), "conv_transpose2d: input [3, 5] has 2 "
                                                      "dims");
    cg_conv *m1 = cg_conv_transpose1d_new(3, 2, 3, NULL, false, &r), *mc;
    mc = cg_conv1d_new(3, 2, 3, NULL, false, &r);
    const int64_t len[3] = {2, 2, 7};
    cg_tensor *y1 = cg_conv_transpose_forward(m1, x1, 3, len);
    ck_assert_msg(y1 && y1->shape[2] == 7, "%s", cg_last_error());
    REFUSED(cg_conv_transpose_forward(m1, x1, 1, len), "conv_transpose1d: requested an output "
                                                       "size of [2], but valid sizes range from "
                                                       "[7] to [7]");
    REFUSED(cg_conv_transpose_forward(mc, x1, 1, len),
            "cg_conv_transpose_forward: the module is a Conv1d, not a transposed convolution");
    cg_release_all(4, x, x1, x2, y1);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(m1));
    cg_module_free(CG_MODULE(mc));
}
END_TEST

/* A transposed convolution's backward unfolds g once for dx and dw: the
 * same bits as dx alone and dw alone (the two passes it was), at 1 and 2
 * threads, batched (chunks of samples for dw) and a batch of one */
START_TEST(test_conv_transpose_backward_once)
{
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = c.stride[1] = 2, c.padding[0] = 1, c.output_padding[1] = 1, c.groups = 2;
    for (int k = 0; k < 4; k++) {
        cg_set_num_threads(1 + k % 2);
        cg_rng r = cg_rng_new(31);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(k < 2 ? 11 : 1, 8, 9, 10));
        cg_tensor *w = cg_randn(&r, CG_SHAPE(8, 3, 3, 4));
        cg_tensor *y = cg_k_conv_transpose(2, x, w, NULL, &c), *g = NULL;
        ck_assert_msg(y, "%s", cg_last_error());
        g = cg_randn(&r, y->ndim, y->shape);
        cg_tensor *dx = NULL, *dw = NULL, *dx1 = NULL, *dw1 = NULL;
        ck_assert(cg_k_conv_transpose_backward(2, x, w, &c, g, &dx, &dw, NULL));
        ck_assert(cg_k_conv_transpose_backward(2, x, w, &c, g, &dx1, NULL, NULL));
        ck_assert(cg_k_conv_transpose_backward(2, x, w, &c, g, NULL, &dw1, NULL));
        ck_assert(!memcmp(cg_data(dx), cg_data(dx1), sizeof(float) * (size_t)cg_numel(dx)));
        ck_assert(!memcmp(cg_data(dw), cg_data(dw1), sizeof(float) * (size_t)cg_numel(dw)));
        cg_release_all(8, x, w, y, g, dx, dw, dx1, dw1);
    }
    cg_set_num_threads(0);
}
END_TEST

static Suite *unfold_suite(void)
{
    Suite *s = suite_create("unfold");
    TCase *tc = tcase_create("unfold");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_unfold_reference, 0, 2);
    tcase_add_loop_test(tc, test_unfold_gradcheck, 0, 2);
    tcase_add_test(tc, test_unfold_fold_round_trip);
    tcase_add_test(tc, test_unfold_threads);
    tcase_add_loop_test(tc, test_unfold_bf16_input, 0, 2);
    tcase_add_test(tc, test_unfold_refusals);
    tcase_add_test(tc, test_unfold_modules);
    tcase_add_test(tc, test_conv_transpose_output_size);
    tcase_add_test(tc, test_conv_transpose_backward_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {unfold_suite()};
    return cg_test_run(s, 1);
}
