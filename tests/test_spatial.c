/* The modules without parameters of nn/spatial.h (pools, padding,
 * Flatten), torch.flatten (cg_flatten) and nn.Conv's padding_mode: a small
 * CNN made as
 * nn.Sequential makes it, whose parameters carry PyTorch's names and whose
 * output and gradients are the bits of the same ops called one by one;
 * each module's type; flatten's shapes and gradient; refusals in one
 * line. The ops themselves are checked against PyTorch by torch_pool and
 * torch_ops. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/spatial.h"
#include "tests/testutil.h"

/* nn.Sequential(Conv2d(1, 4, 3, padding=1), ReLU(), MaxPool2d(2),
 * ReflectionPad2d(1), Conv2d(4, 6, 3), AvgPool2d(2), ReplicationPad2d((1,
 * 0, 0, 1)), AdaptiveMaxPool2d(2), AdaptiveAvgPool2d(1), Flatten(),
 * Linear(6, 3)) */
static cg_module *small_cnn(cg_rng *r)
{
    cg_conv_cfg c1 = CG_CONV_DEFAULT;
    c1.padding[0] = c1.padding[1] = 1;
    return cg_sequential(11, cg_conv2d_new(1, 4, 3, 3, &c1, true, r),
                         cg_activation_new(CG_ACT_RELU),
                         cg_maxpool_new(2, (cg_pool){.kernel_size = {2, 2}}),
                         cg_padding_new(4, (int64_t[]){1, 1, 1, 1}, CG_PAD_REFLECT, 0.0f),
                         cg_conv2d_new(4, 6, 3, 3, NULL, true, r),
                         cg_avgpool_new(2, (cg_pool){.kernel_size = {2, 2}}),
                         cg_padding_new(4, (int64_t[]){1, 0, 0, 1}, CG_PAD_REPLICATE, 0.0f),
                         cg_adaptive_pool_new(2, true, 2, 2), cg_adaptive_pool_new(2, false, 1, 1),
                         cg_flatten_new(1, -1), cg_linear_new(6, 3, true, r));
}

/* the same network, its ops called one by one on the modules' parameters */
static cg_tensor *by_hand(cg_module *s, cg_tensor *x)
{
    cg_conv *c0 = (cg_conv *)s->children[0].module, *c4 = (cg_conv *)s->children[4].module;
    cg_linear *l = (cg_linear *)s->children[10].module;
    cg_tensor *t[10];
    t[0] = cg_conv2d(x, c0->weight, c0->bias, &c0->cfg);
    t[1] = cg_relu(t[0]);
    t[2] = cg_max_pool2d(t[1], (cg_pool){.kernel_size = {2, 2}});
    t[3] = cg_pad(t[2], 4, (int64_t[]){1, 1, 1, 1}, CG_PAD_REFLECT, 0.0f);
    t[4] = cg_conv2d(t[3], c4->weight, c4->bias, NULL);
    t[5] = cg_avg_pool2d(t[4], (cg_pool){.kernel_size = {2, 2}});
    t[6] = cg_pad(t[5], 4, (int64_t[]){1, 0, 0, 1}, CG_PAD_REPLICATE, 0.0f);
    t[7] = cg_adaptive_max_pool2d(t[6], 2, 2, NULL);
    t[8] = cg_adaptive_avg_pool2d(t[7], 1, 1);
    t[9] = cg_reshape(t[8], CG_SHAPE(t[8]->shape[0], -1));
    cg_tensor *y = cg_linear_forward(l, t[9]);
    for (int i = 0; i < 10; i++)
        cg_release(t[i]);
    return y;
}

/* every parameter's gradient, in order, copied; then zeroed */
static float *grads(cg_module *s, int64_t *n)
{
    cg_param_list p = {0};
    ck_assert(cg_module_params(s, &p));
    *n = 0;
    for (int i = 0; i < p.n; i++)
        *n += cg_numel(p.items[i].tensor);
    float *g = malloc((size_t)*n * sizeof *g), *at = g;
    for (int i = 0; i < p.n; i++) {
        float *v = cg_test_values(cg_grad(p.items[i].tensor));
        memcpy(at, v, (size_t)cg_numel(p.items[i].tensor) * sizeof *v);
        at += cg_numel(p.items[i].tensor);
        free(v);
        cg_zero_grad(p.items[i].tensor);
    }
    cg_param_list_free(&p);
    return g;
}

START_TEST(test_sequential_cnn)
{
    cg_rng r = cg_rng_new(3);
    cg_module *s = small_cnn(&r);
    ck_assert_msg(s != NULL, "%s", cg_last_error());
    /* PyTorch's state_dict names: the parameters of children 0, 4 and 10 */
    cg_param_list p = {0};
    ck_assert(cg_module_state_dict(s, &p) && p.n == 6);
    const char *names[6] = {"0.weight", "0.bias", "4.weight", "4.bias", "10.weight", "10.bias"};
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(p.items[i].name, names[i]);
    cg_param_list_free(&p);
    const char *types[11] = {"Conv2d",
                             "ReLU",
                             "MaxPool2d",
                             "ReflectionPad2d",
                             "Conv2d",
                             "AvgPool2d",
                             "ReplicationPad2d",
                             "AdaptiveMaxPool2d",
                             "AdaptiveAvgPool2d",
                             "Flatten",
                             "Linear"};
    for (int i = 0; i < 11; i++)
        ck_assert_str_eq(s->children[i].module->type, types[i]);
    /* the module's output and gradients are the hand-made network's bits */
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 10, 10));
    float *v[2], *g[2];
    int64_t ng[2];
    for (int k = 0; k < 2; k++) {
        cg_tensor *y = k ? by_hand(s, x) : cg_module_forward(s, x);
        ck_assert_msg(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 3, "%s",
                      cg_last_error());
        cg_tensor *sq = cg_mul(y, y), *l = cg_sum_all(sq);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        v[k] = cg_test_values(y);
        g[k] = grads(s, &ng[k]);
        cg_release_all(3, y, sq, l);
    }
    ck_assert(!memcmp(v[0], v[1], 6 * sizeof(float)));
    ck_assert(ng[0] == ng[1] && !memcmp(g[0], g[1], (size_t)ng[0] * sizeof(float)));
    for (int k = 0; k < 2; k++)
        free(v[k]), free(g[k]);
    cg_release(x);
    cg_module_free(s);
}
END_TEST

/* torch.flatten's shapes (negative dims, 0-d), its gradient, refusals;
 * nn.Flatten's defaults keep the batch dim */
START_TEST(test_flatten)
{
    cg_rng r = cg_rng_new(1);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 4, 5)), true);
    const struct {
        int s, e, nd;
        int64_t shape[4];
    } c[] = {{1, -1, 2, {2, 60}}, {0, 1, 3, {6, 4, 5}},    {-2, -1, 3, {2, 3, 20}},
             {0, -1, 1, {120}},   {2, 2, 4, {2, 3, 4, 5}}, {-4, -3, 3, {6, 4, 5}}};
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        cg_tensor *f = cg_flatten(x, c[i].s, c[i].e);
        ck_assert_msg(f && f->ndim == c[i].nd, "case %zu: %s", i, cg_last_error());
        ck_assert(!memcmp(f->shape, c[i].shape, (size_t)c[i].nd * sizeof(int64_t)));
        cg_release(f);
    }
    cg_module *m = cg_flatten_new(1, -1);
    cg_tensor *y = cg_module_forward(m, x), *w = cg_arange_dtype(CG_F32, 0, 120, 1);
    cg_tensor *w2 = cg_reshape(w, CG_SHAPE(2, 60)), *yw = cg_mul(y, w2), *l = cg_sum_all(yw);
    ck_assert_msg(l && y->shape[1] == 60 && cg_backward(l, NULL, false), "%s", cg_last_error());
    /* the gradient is the weight laid back in x's shape: element i gets i */
    float *g = cg_test_values(cg_grad(x));
    for (int i = 0; i < 120; i++)
        ck_assert(g[i] == (float)i);
    free(g);
    cg_tensor *s = cg_scalar(2.0f), *s1 = cg_flatten(s, 0, -1);
    ck_assert(s1 && s1->ndim == 1 && s1->shape[0] == 1 && cg_item(s1) == 2.0f);
    CG_ASSERT_REFUSED(cg_flatten(x, 2, 1) == NULL,
                      "flatten: start_dim 2 comes after end_dim 1 (shape of 4 dims)");
    CG_ASSERT_REFUSED(cg_flatten(x, 1, 4) == NULL, "flatten: dim 4 out of range");
    CG_ASSERT_REFUSED(cg_flatten(s, 1, 1) == NULL,
                      "flatten: dims (1, 1) of a 0-d tensor, expected 0 or -1");
    cg_release_all(8, x, y, w, w2, yw, l, s, s1);
    cg_module_free(m);
}
END_TEST

/* the padding modules' PyTorch types, a 3-d one at work on [N, C, D, H,
 * W], a 1-d pool's forward; refusals in one line, at construction for
 * what the module owns and at forward for what the op checks */
START_TEST(test_types_and_refusals)
{
    const struct {
        int nd;
        cg_pad_mode mode;
        float value;
        const char *type;
    } c[] = {{2, CG_PAD_CONSTANT, 0.0f, "ZeroPad2d"},
             {2, CG_PAD_CONSTANT, 1.5f, "ConstantPad2d"},
             {1, CG_PAD_CONSTANT, 0.0f, "ConstantPad1d"},
             {3, CG_PAD_REFLECT, 0.0f, "ReflectionPad3d"},
             {1, CG_PAD_REPLICATE, 0.0f, "ReplicationPad1d"},
             {3, CG_PAD_CIRCULAR, 0.0f, "CircularPad3d"}};
    cg_rng r = cg_rng_new(2);
    cg_tensor *x5 = cg_randn(&r, CG_SHAPE(1, 2, 3, 3, 3));
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        cg_module *m =
            cg_padding_new(2 * c[i].nd, (int64_t[]){1, 1, 2, 0, 0, 1}, c[i].mode, c[i].value);
        ck_assert_msg(m && !strcmp(m->type, c[i].type), "case %zu: %s", i, m ? m->type : "NULL");
        cg_tensor *y = cg_module_forward(m, x5);
        const int64_t want = 3 + (c[i].nd == 3); /* dim 2 padded (0, 1) by a 3-d pad */
        ck_assert_msg(y && y->shape[4] == 5 && y->shape[2] == want, "case %zu: %s", i,
                      cg_last_error());
        cg_release(y);
        cg_module_free(m);
    }
    cg_module *mp = cg_maxpool_new(1, (cg_pool){.kernel_size = {2}});
    cg_tensor *x3 = cg_from_data(CG_SHAPE(1, 1, 4), (float[]){1, 5, -2, 3});
    cg_tensor *y3 = cg_module_forward(mp, x3);
    ck_assert_msg(y3 && !strcmp(mp->type, "MaxPool1d"), "%s", cg_last_error());
    CG_ASSERT_TENSOR(y3, ((float[]){5, 3}), 0, 0);
    cg_release(y3);
    /* what the op checks, at forward: a 2-d pool of a 3-d input */
    cg_module *m2 = cg_avgpool_new(2, (cg_pool){.kernel_size = {2, 2}});
    CG_ASSERT_REFUSED(cg_module_forward(m2, x3) == NULL, "avg_pool2d");
    CG_ASSERT_REFUSED(cg_maxpool_new(4, (cg_pool){0}) == NULL,
                      "cg_maxpool_new: nd 4, expected 1 to 3 (the spatial dims)");
    CG_ASSERT_REFUSED(cg_maxunpool_new(0, (cg_pool){0}) == NULL,
                      "cg_maxunpool_new: nd 0, expected 1 to 3 (the spatial dims)");
    CG_ASSERT_REFUSED(cg_maxunpool_forward(m2, x3, x3, NULL) == NULL,
                      "cg_maxunpool_forward: module AvgPool2d, expected a MaxUnpool1d/2d/3d");
    CG_ASSERT_REFUSED(cg_adaptive_pool_new(0, true, 1, 1) == NULL,
                      "cg_adaptive_pool_new: nd 0, expected 1 or 2 (the spatial dims)");
    CG_ASSERT_REFUSED(cg_adaptive_pool_new(3, true, 1, 1) == NULL,
                      "cg_adaptive_pool_new: nd 3, expected 1 or 2");
    CG_ASSERT_REFUSED(cg_padding_new(8, (int64_t[8]){0}, CG_PAD_REFLECT, 0.0f) == NULL,
                      "cg_padding_new: more than 6 padding sizes, expected 2, 4 or 6 (pairs, the "
                      "last dim's first)");
    CG_ASSERT_REFUSED(cg_padding_new(3, (int64_t[3]){0}, CG_PAD_REFLECT, 0.0f) == NULL,
                      "cg_padding_new: an odd or negative number of padding sizes");
    CG_ASSERT_REFUSED(cg_padding_new(0, (int64_t[1]){0}, CG_PAD_REFLECT, 0.0f) == NULL,
                      "cg_padding_new: no padding sizes");
    CG_ASSERT_REFUSED(cg_padding_new(4, (int64_t[4]){0}, (cg_pad_mode)5, 0.0f) == NULL,
                      "cg_padding_new: mode 5, expected constant, reflect, replicate or circular");
    CG_ASSERT_REFUSED(cg_padding_new(4, NULL, CG_PAD_REFLECT, 0.0f) == NULL, "cg_padding_new");
    cg_module_free(mp);
    cg_module_free(m2);
    cg_release_all(2, x3, x5);
}
END_TEST

/* nn.Conv's padding_mode: a Conv2d with reflect padding 'same' (an even
 * kernel: one more after) is the reflect pad then the convolution without
 * padding, bits and gradients; a transposed one takes zeros only (as
 * PyTorch's); core's kernel refuses the modes it does not run. PyTorch's
 * values: torch_conv's p cases. */
/* The 3d pools and the unpools as modules: their types, and the
 * functional op's bits (x [N, C, D, H, W] and unbatched) */
START_TEST(test_pool3d_modules)
{
    cg_rng r = cg_rng_new(21);
    const cg_pool o = {.kernel_size = {2, 3, 2}, .stride = {1, 2, 2}, .padding = {1, 1, 0}};
    cg_tensor *xs[2] = {cg_randn(&r, CG_SHAPE(2, 3, 4, 5, 6)), cg_randn(&r, CG_SHAPE(3, 4, 5, 6))};
    for (int b = 0; b < 2; b++) {
        cg_tensor *x = xs[b], *idx = NULL;
        cg_module *m[4] = {cg_maxpool_new(3, o), cg_avgpool_new(3, o),
                           cg_adaptive_pool3d_new(true, 2, 3, 1),
                           cg_adaptive_pool3d_new(false, 3, 1, 2)};
        const char *types[4] = {"MaxPool3d", "AvgPool3d", "AdaptiveMaxPool3d", "AdaptiveAvgPool3d"};
        cg_tensor *want[4] = {cg_max_pool3d(x, o), cg_avg_pool3d(x, o),
                              cg_adaptive_max_pool3d(x, 2, 3, 1, NULL),
                              cg_adaptive_avg_pool3d(x, 3, 1, 2)};
        for (int i = 0; i < 4; i++) {
            cg_tensor *y = cg_module_forward(m[i], x);
            ck_assert_msg(y && want[i] && !strcmp(m[i]->type, types[i]), "%s: %s", types[i],
                          cg_last_error());
            ck_assert_int_eq(cg_numel(y), cg_numel(want[i]));
            ck_assert(!memcmp(cg_data(y), cg_data(want[i]), (size_t)cg_numel(y) * sizeof(float)));
            cg_release_all(2, y, want[i]);
            cg_module_free(m[i]);
        }
        /* MaxUnpool3d(x, indices, output_size) */
        cg_module *u = cg_maxunpool_new(3, o);
        cg_tensor *p = cg_max_pool3d_with_indices(x, o, &idx);
        const int64_t *size = x->shape + x->ndim - 3;
        cg_tensor *y = cg_maxunpool_forward(u, p, idx, size), *w = cg_max_unpool3d(p, idx, o, size);
        ck_assert_msg(y && w && !strcmp(u->type, "MaxUnpool3d") && !u->forward, "%s",
                      cg_last_error());
        ck_assert_int_eq(cg_numel(y), cg_numel(x));
        ck_assert(!memcmp(cg_data(y), cg_data(w), (size_t)cg_numel(y) * sizeof(float)));
        CG_ASSERT_REFUSED(cg_module_forward(u, p) == NULL, "");
        cg_release_all(4, p, idx, y, w);
        cg_module_free(u);
    }
    cg_module *u1 = cg_maxunpool_new(1, (cg_pool){.kernel_size = {2}});
    cg_tensor *v = cg_from_data(CG_SHAPE(1, 2), (float[]){5, 3});
    cg_tensor *i1 = cg_zeros_dtype(CG_I64, CG_SHAPE(1, 2));
    cg_data_i64(i1)[0] = 1;
    cg_data_i64(i1)[1] = 2;
    cg_tensor *y1 = cg_maxunpool_forward(u1, v, i1, NULL);
    ck_assert_msg(y1 && !strcmp(u1->type, "MaxUnpool1d"), "%s", cg_last_error());
    CG_ASSERT_TENSOR(y1, ((float[]){0, 5, 3, 0}), 0, 0);
    cg_release_all(5, xs[0], xs[1], v, i1, y1);
    cg_module_free(u1);
}
END_TEST

START_TEST(test_conv_padding_mode)
{
    cg_rng r = cg_rng_new(7);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.pad = CG_CONV_SAME;
    c.padding_mode = CG_PAD_REFLECT;
    cg_conv *m = cg_conv2d_new(2, 3, 4, 3, &c, true, &r);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 2, 6, 5)), true);
    float *v[2], *g[2];
    for (int k = 0; k < 2; k++) {
        cg_tensor *xp = k ? cg_pad(x, 4, (int64_t[]){1, 1, 1, 2}, CG_PAD_REFLECT, 0.0f) : NULL;
        cg_tensor *y = k ? cg_conv2d(xp, m->weight, m->bias, NULL) : cg_conv_forward(m, x);
        ck_assert_msg(y && y->shape[2] == 6 && y->shape[3] == 5, "%s", cg_last_error());
        cg_tensor *sq = cg_mul(y, y), *l = cg_sum_all(sq);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        v[k] = cg_test_values(y);
        g[k] = cg_test_values(cg_grad(x));
        cg_zero_grad(x);
        cg_release_all(4, xp, y, sq, l);
    }
    ck_assert(!memcmp(v[0], v[1], 2 * 3 * 6 * 5 * sizeof(float)));
    ck_assert(!memcmp(g[0], g[1], 2 * 2 * 6 * 5 * sizeof(float)));
    for (int k = 0; k < 2; k++)
        free(v[k]), free(g[k]);
    /* refusals: a transposed module, a mode out of range, the kernel */
    c.pad = CG_CONV_PAD_NUMBERS;
    CG_ASSERT_REFUSED(cg_conv_transpose1d_new(2, 3, 3, &c, true, NULL) == NULL,
                      "only the zeros padding mode is supported, as PyTorch's ConvTranspose");
    c.padding_mode = (cg_pad_mode)9;
    CG_ASSERT_REFUSED(cg_conv2d_new(2, 3, 3, 3, &c, true, NULL) == NULL,
                      "Conv2d: padding_mode 9 is not one of zeros, reflect, replicate, circular");
    c.padding_mode = CG_PAD_CIRCULAR;
    CG_ASSERT_REFUSED(cg_k_conv(2, x, m->weight, m->bias, &c) == NULL,
                      "conv2d: the kernel pads with zeros; padding_mode 3 is cg_conv2d's");
    cg_release(x);
    cg_module_free(CG_MODULE(m));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spatial");
    TCase *tc = tcase_create("spatial");
    tcase_add_test(tc, test_sequential_cnn);
    tcase_add_test(tc, test_flatten);
    tcase_add_test(tc, test_types_and_refusals);
    tcase_add_test(tc, test_conv_padding_mode);
    tcase_add_test(tc, test_pool3d_modules);
    suite_add_tcase(s, tc);
    Suite *all[] = {s};
    return cg_test_run(all, 1);
}
