/* classifier: an MLP on three interleaved spirals, trained with SGD +
 * momentum, then Adam, on shuffled mini-batches (cg_randperm); accuracy on
 * a held-out set without a graph. classifier.py is the same in PyTorch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"

enum { N = 100, K = 3, BATCH = 32 }; /* points per class, classes */

static cg_tensor *spirals(cg_rng *rng, int64_t *labels)
{
    cg_tensor *x = cg_empty(CG_SHAPE(N * K, 2));
    for (int i = 0; i < N * K; i++) {
        float r = (float)(i % N) / N, t = (i / N) * 6.2831853f / K + r * 4 + cg_rng_normal(rng) * 0.2f;
        cg_data(x)[2 * i] = r * sinf(t);
        cg_data(x)[2 * i + 1] = r * cosf(t);
        labels[i] = i / N;
    }
    return x;
}

static void train(cg_module *model, cg_optim *opt, cg_tensor *x, const int64_t *y, cg_rng *rng)
{
    for (int epoch = 0; epoch < 100; epoch++) {
        int64_t *perm = cg_randperm(rng, N * K), yb[BATCH];
        for (int i = 0, n; i < N * K; i += n) {
            n = N * K - i < BATCH ? N * K - i : BATCH;
            for (int j = 0; j < n; j++)
                yb[j] = y[perm[i + j]];
            cg_scope *s = cg_scope_begin();
            cg_tensor *logits = cg_module_forward(model, cg_index_select(x, 0, perm + i, n));
            cg_backward(cg_cross_entropy(logits, yb, n, -100, 0), NULL, false);
            cg_optim_step(opt);
            cg_optim_zero_grad(opt);
            cg_scope_end(s);
        }
        free(perm);
    }
    cg_optim_free(opt);
}

static double accuracy(cg_module *model, cg_tensor *x, const int64_t *y)
{
    int64_t pred[N * K], hits = 0;
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    cg_argmax(cg_module_forward(model, x), 1, pred, N * K);
    cg_scope_end(s);
    cg_no_grad_end();
    for (int i = 0; i < N * K; i++)
        hits += pred[i] == y[i];
    return (double)hits / (N * K);
}

int main(void)
{
    cg_rng rng = cg_rng_new(1);
    int64_t y[N * K], yt[N * K];
    cg_tensor *x = spirals(&rng, y), *xt = spirals(&rng, yt);
    cg_module *model = cg_sequential(5, cg_linear_new(2, 64, true, &rng), cg_activation_new(CG_ACT_RELU),
                                     cg_linear_new(64, 64, true, &rng), cg_activation_new(CG_ACT_RELU),
                                     cg_linear_new(64, K, true, &rng));
    cg_optim_config sgd = cg_sgd_config(0.05, 0.9, false);
    train(model, cg_optim_from_module(&sgd, model, 0, CG_DECAY_ALL), x, y, &rng);
    printf("SGD + momentum: held-out accuracy %.3f\n", accuracy(model, xt, yt));
    train(model, cg_adam_from_module(model, 1e-3), x, y, &rng);
    double acc = accuracy(model, xt, yt);
    printf("then Adam:      held-out accuracy %.3f\n", acc);
    cg_release_all(2, x, xt);
    cg_module_free(model);
    return acc > 0.9 ? 0 : 1;
}
