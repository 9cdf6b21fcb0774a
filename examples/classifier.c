/* classifier: an MLP on three interleaved spirals, trained with SGD +
 * momentum, then Adam, on shuffled mini-batches (cg_loader); accuracy on a
 * held-out set without a graph
 * (cg_module_accuracy). classifier.py is the same in PyTorch. */
#include <math.h>
#include <stdio.h>

#include "cgrad.h"

enum { N = 100, K = 3, BATCH = 32 }; /* points per class, classes */

static cg_tensor *spirals(cg_rng *rng, cg_tensor **labels)
{
    cg_tensor *x = cg_empty(CG_SHAPE(N * K, 2));
    *labels = cg_empty_dtype(CG_I64, CG_SHAPE(N * K));
    for (int i = 0; i < N * K; i++) {
        float r = (float)(i % N) / N,
              t = (i / N) * 6.2831853f / K + r * 4 + cg_rng_normal(rng) * 0.2f;
        cg_data(x)[2 * i] = r * sinf(t), cg_data(x)[2 * i + 1] = r * cosf(t);
        cg_data_i64(*labels)[i] = i / N;
    }
    return x;
}

static void train(cg_module *model, cg_optim *opt, cg_loader *data)
{
    for (int epoch = 0; epoch < 100; epoch++)
        while (cg_loader_next(data)) /* each batch in its own scope */
            cg_train_step(opt, cg_cross_entropy(cg_module_forward(model, data->x), data->y, -100, 0,
                                                CG_REDUCTION_MEAN));
    cg_optim_free(opt);
}

int main(void)
{
    cg_rng rng = cg_rng_new(1);
    cg_tensor *y, *yt, *x = spirals(&rng, &y), *xt = spirals(&rng, &yt);
    cg_module *model = cg_mlp(4, (int64_t[]){2, 64, 64, K}, CG_ACT_RELU, &rng);
    cg_loader *data = cg_loader_new(x, y, BATCH, &rng);
    cg_optim_config sgd = cg_sgd_config(0.05, 0.9, false);
    train(model, cg_optim_from_module(&sgd, model, 0, CG_DECAY_ALL), data);
    printf("SGD + momentum: held-out accuracy %.3f\n", cg_module_accuracy(model, xt, yt));
    train(model, cg_adam_from_module(model, 1e-3), data);
    double acc = cg_module_accuracy(model, xt, yt);
    printf("then Adam:      held-out accuracy %.3f\n", acc);
    cg_loader_free(data);
    cg_release_all(4, x, xt, y, yt);
    cg_module_free(model);
    return acc > 0.9 ? 0 : 1;
}
