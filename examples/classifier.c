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

static cg_linear *fc[3];
static cg_tensor *model(cg_tensor *x) /* inside a scope: the intermediates die with it */
{
    return cg_linear_forward(fc[2], cg_relu(cg_linear_forward(fc[1], cg_relu(cg_linear_forward(fc[0], x)))));
}

static void train(cg_optim *opt, int epochs, cg_tensor *x, const int64_t *y, cg_rng *rng)
{
    int64_t yb[BATCH];
    for (int e = 0; e < epochs; e++) {
        int64_t *perm = cg_randperm(rng, N * K);
        for (int i = 0; i < N * K; i += BATCH) {
            int n = N * K - i < BATCH ? N * K - i : BATCH;
            for (int j = 0; j < n; j++)
                yb[j] = y[perm[i + j]];
            cg_scope *s = cg_scope_begin();
            cg_backward(cg_cross_entropy(model(cg_index_select(x, 0, perm + i, n)), yb, n, -100, 0), NULL, false);
            cg_optim_step(opt);
            cg_optim_zero_grad(opt);
            cg_scope_end(s);
        }
        free(perm);
    }
    cg_optim_free(opt);
}

static double accuracy(cg_tensor *x, const int64_t *y)
{
    int64_t pred[N * K], hits = 0;
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    cg_argmax(model(x), 1, pred, N * K);
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
    cg_module *mlp = cg_module_new("MLP");
    const int64_t sizes[4] = {2, 64, 64, K};
    for (int i = 0; i < 3; i++)
        fc[i] = (cg_linear *)cg_module_add_child(mlp, (char[]){(char)('0' + 2 * i), 0}, CG_MODULE(cg_linear_new(sizes[i], sizes[i + 1], true, &rng)));
    cg_optim_config sgd = cg_sgd_config(0.05, 0.9, false);
    train(cg_optim_from_module(&sgd, mlp, 0, CG_DECAY_ALL), 100, x, y, &rng);
    printf("SGD + momentum: held-out accuracy %.3f\n", accuracy(xt, yt));
    train(cg_adam_from_module(mlp, 1e-3), 100, x, y, &rng);
    double acc = accuracy(xt, yt);
    printf("then Adam:      held-out accuracy %.3f\n", acc);
    cg_release_all(2, x, xt);
    cg_module_free(mlp);
    return acc > 0.9 ? 0 : 1;
}
