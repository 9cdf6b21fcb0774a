/* cnn: a small convolutional classifier (LeNet's shape): nn.Conv2d,
 * nn.BatchNorm2d, ReLU and nn.MaxPool2d twice, nn.AdaptiveAvgPool2d to one
 * value a channel, a linear head; cross-entropy and AdamW on 16 x 16
 * images of four shapes (a horizontal bar, a vertical bar, a square's
 * outline, a diagonal) drawn at random places over noise, then evaluated
 * in eval mode (BatchNorm's running statistics) on images it has not
 * seen. cnn.py is the same program in PyTorch: the images come from an
 * integer hash both compute, and the C side draws the initial weights
 * from PyTorch's generator (cg_mt19937) in the order torch.manual_seed(1);
 * nn.Conv2d; nn.BatchNorm2d; nn.Conv2d; nn.Linear draws them, so the two
 * print the same losses (the meson test example_cnn_torch compares the
 * first 20 steps).
 *
 *   build/examples/example_cnn [--steps N]      (default 200) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

enum { S = 16, B = 32, NCLASS = 4, EVAL = 512 }; /* classes: bars -, |, a square, a diagonal */

/* a 32-bit integer hash (a xorshift-multiply mix) */
static uint32_t mix(uint32_t x)
{
    x = (x ^ (x >> 16)) * 0x45D9F3Bu;
    x = (x ^ (x >> 16)) * 0x45D9F3Bu;
    return x ^ (x >> 16);
}

/* Image i into px[S * S]: noise in [0, 1/4), then its class's shape (i %
 * 4) of side 4..9 at a place from the hash, clamped to 1. Its class. */
static int64_t image(uint32_t i, float *px)
{
    const uint32_t c = i % 4, h = mix(i + 1), n = 4 + h % 6;
    const uint32_t r = (h >> 8) % (S - n + 1), q = (h >> 16) % (S - n + 1);
    for (uint32_t p = 0; p < S * S; p++)
        px[p] = (float)(mix(i * S * S + p + 7) & 0xFF) / 1024.0f;
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t at[4][2] = {
            {r + n / 2, q + k}, {r + k, q + n / 2}, {r, q + k}, {r + k, q + k}};
        px[at[c][0] * S + at[c][1]] += 1.0f;
        if (c == 2) /* the square's other three sides */
            px[(r + n - 1) * S + q + k] += 1.0f, px[(r + k) * S + q] += 1.0f,
                px[(r + k) * S + q + n - 1] += 1.0f;
    }
    for (uint32_t p = 0; p < S * S; p++)
        px[p] = px[p] < 1.0f ? px[p] : 1.0f;
    return c;
}

/* Images first .. first + n - 1 (n <= EVAL): x [n, 1, S, S] and their
 * labels y [n]. */
static cg_tensor *batch(uint32_t first, int64_t n, cg_tensor **y)
{
    static float px[EVAL * S * S];
    static int64_t labels[EVAL];
    for (int64_t i = 0; i < n; i++)
        labels[i] = image(first + (uint32_t)i, px + i * S * S);
    *y = cg_from_i64(1, &n, labels);
    return cg_from_data(CG_SHAPE(n, 1, S, S), px);
}

/* Under cnn.py's names (conv1, bn1, conv2, head). */
typedef struct {
    cg_module base;
    cg_conv *conv1, *conv2;
    cg_batchnorm *bn1;
    cg_linear *head;
} cnn;

/* Built in PyTorch's order; the constructors draw nothing (cg_init_skip),
 * cg_module_reset_parameters_torch does (nn.Conv2d's and nn.Linear's
 * defaults; BatchNorm's weight 1 and bias 0 draw nothing). */
static cnn *cnn_new(cg_mt19937 *g)
{
    cnn *m = (cnn *)cg_module_alloc(sizeof *m, "CNN", NULL);
    cg_rng *skip = cg_init_skip();
    cg_conv_cfg pad1 = CG_CONV_DEFAULT;
    pad1.padding[0] = pad1.padding[1] = 1;
    m->conv1 = cg_module_add_child(&m->base, "conv1", cg_conv2d_new(1, 8, 3, 3, &pad1, true, skip));
    m->bn1 = cg_module_add_child(&m->base, "bn1", cg_batchnorm2d_new(8, NULL));
    m->conv2 =
        cg_module_add_child(&m->base, "conv2", cg_conv2d_new(8, 16, 3, 3, &pad1, true, skip));
    m->head = cg_module_add_child(&m->base, "head", cg_linear_new(16, NCLASS, true, skip));
    if (!m->conv1 || !m->bn1 || !m->conv2 || !m->head ||
        !cg_module_reset_parameters_torch(CG_MODULE(m), g)) {
        cg_module_free(CG_MODULE(m)); /* cg_last_error() says why */
        return NULL;
    }
    return m;
}

/* x [n, 1, S, S] -> logits [n, 4]. Called in a scope. */
static cg_tensor *cnn_forward(cnn *m, cg_tensor *x)
{
    const cg_pool two = {.kernel_size = {2, 2}}; /* F.max_pool2d(h, 2) */
    cg_tensor *h = cg_relu(cg_batchnorm_forward(m->bn1, cg_conv_forward(m->conv1, x)));
    h = cg_max_pool2d(cg_relu(cg_conv_forward(m->conv2, cg_max_pool2d(h, two))), two);
    h = cg_adaptive_avg_pool2d(h, 1, 1); /* [n, 16, 1, 1] */
    return cg_linear_forward(m->head, h ? cg_reshape(h, CG_SHAPE(h->shape[0], 16)) : NULL);
}

int main(int argc, char **argv)
{
    cg_omp_short_spin(); /* OpenMP threads wait 50 us, not 6 ms: many small ops a step */
    char *end = "";
    long steps = argc == 1                                  ? 200
                 : argc == 3 && !strcmp(argv[1], "--steps") ? strtol(argv[2], &end, 10)
                                                            : 0;
    if (steps < 1 || *end)
        return fprintf(stderr, "usage: example_cnn [--steps N (N >= 1, default 200)]\n"), 2;
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1); /* torch.manual_seed(1) */
    cnn *m = cnn_new(&g);
    cg_optim *opt = m ? cg_adamw_from_module(CG_MODULE(m), 3e-3) : NULL; /* weight decay 0.01 */
    if (!opt)
        return fprintf(stderr, "error: %s\n", cg_last_error()), 1;
    float loss = 0, first = 0;
    for (long step = 0; step < steps; step++) {
        cg_scope *s = cg_scope_begin();
        cg_tensor *y, *x = batch((uint32_t)(step * B), B, &y);
        cg_tensor *l = cg_cross_entropy(cnn_forward(m, x), y, -100, 0, CG_REDUCTION_MEAN);
        if (!cg_backward(l, NULL, false) || !cg_optim_step(opt))
            return fprintf(stderr, "error: %s\n", cg_last_error()), 1;
        cg_optim_zero_grad(opt);
        loss = cg_item(l);
        first = step ? first : loss;
        if (step < 20 || step % 50 == 0 || step == steps - 1)
            printf("step %3ld loss %.6f\n", step, loss);
        cg_scope_end(s);
    }

    /* Images no step has seen, in eval mode, without a graph. */
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    cg_tensor *y, *x = batch(1u << 20, EVAL, &y);
    cg_tensor *pred = x ? cg_argmax(cnn_forward(m, x), 1, false) : NULL;
    int64_t right = 0;
    for (int64_t i = 0; pred && i < EVAL; i++)
        right += cg_data_i64(pred)[i] == cg_data_i64(y)[i];
    printf("held-out accuracy %.4f (%lld of %d images)\n", (double)right / EVAL, (long long)right,
           EVAL);
    if (!pred)
        fprintf(stderr, "error: %s\n", cg_last_error());
    cg_scope_end(s);
    cg_no_grad_end();
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    return pred && loss < first && (steps < 200 || right > 0.9 * EVAL) ? 0 : 1;
}
