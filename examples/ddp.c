/* ddp: a model of your own trained data-parallel (PyTorch's
 * DistributedDataParallel, with libcgrad-dist: dist/dist.h).
 *
 * A two-layer perceptron with a layer norm learns two interleaved spirals.
 * Every rank builds the whole model, then takes rank 0's weights
 * (cg_dist_broadcast_module: DDP's constructor); every step, all ranks draw
 * the same global batch of B rows and each runs forward and backward on its
 * own share of it (cg_dist_share); the reducer averages the gradients over
 * the ranks in buckets while backward still runs, each rank weighted by its
 * rows, so that the average is the gradient of the global batch's mean loss;
 * then every rank takes the same AdamW step. N ranks end with the
 * parameters of one process up to float rounding (the meson test
 * example_ddp compares 2 ranks with 1 process). Rank 0 prints and saves.
 *
 *   build/examples/example_ddp [--steps N] [--out FILE] [--blocking]
 *   mpirun -np 2 build/examples/example_ddp --out ddp.safetensors
 *
 * --blocking averages after backward instead (cg_dist_average_grads): the
 * same numbers, no overlap. Without mpirun (or built without MPI) it runs
 * as one process. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "dist/dist.h"

enum { N_POINTS = 512, B = 64, HIDDEN = 64 };

/* Two spirals, one per class, with a little noise (the same on every rank:
 * a real run would read its files). */
static void make_spirals(cg_rng *rng, float *xy, int64_t *label)
{
    for (int i = 0; i < N_POINTS; i++) {
        double t = 0.25 + 3.0 * (double)(i / 2) / (N_POINTS / 2),
               a = 2.2 * t + 3.14159265358979 * (i % 2);
        xy[2 * i] = (float)(t * cos(a) + 0.05 * cg_rng_normal(rng));
        xy[2 * i + 1] = (float)(t * sin(a) + 0.05 * cg_rng_normal(rng));
        label[i] = i % 2;
    }
}

static int fail(const char *what)
{
    fprintf(stderr, "example_ddp: rank %d: %s: %s\n", cg_dist_rank(), what, cg_last_error());
    cg_dist_abort(1, "a rank failed"); /* the other ranks would wait for it */
}

int main(int argc, char **argv)
{
    long steps = 200;
    const char *out = NULL;
    bool blocking = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc && (steps = atol(argv[++i])) > 0)
            continue;
        if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--blocking"))
            blocking = true;
        else
            return fprintf(stderr, "usage: example_ddp [--steps N] [--out FILE] [--blocking]\n"), 2;
    }
    if (!cg_dist_init(&argc, &argv)) /* MPI under mpirun, else one process */
        return fprintf(stderr, "example_ddp: %s\n", cg_last_error()), 1;

    /* Each rank draws other initial weights (rank 0 uses the seed itself):
     * the broadcast below makes them rank 0's, as DDP's constructor does. */
    cg_rng rng = cg_rng_new(cg_dist_rank_seed(1)), data_rng = cg_rng_new(7);
    cg_module *root = cg_module_new("MLP");
    cg_linear *fc1 = cg_linear_new(2, HIDDEN, true, &rng),
              *fc2 = cg_linear_new(HIDDEN, 2, true, &rng);
    cg_norm *ln = cg_layernorm_new(HIDDEN);
    if (!root || !cg_module_add_child(root, "fc1", fc1) || !cg_module_add_child(root, "ln", ln) ||
        !cg_module_add_child(root, "fc2", fc2) || !cg_dist_broadcast_module(root))
        return fail("model");
    cg_param_list pl = {0};
    cg_tensor **params = NULL;
    if (!cg_module_params(root, &pl) || !(params = calloc((size_t)pl.n, sizeof *params)))
        return fail("parameters");
    for (int i = 0; i < pl.n; i++)
        params[i] = pl.items[i].tensor;
    /* Buckets of 1 KB (the zoo's default is 4 MB): even this small model
     * gets a few, each reduced while backward still runs. */
    cg_dist_reducer *reducer = blocking ? NULL : cg_dist_reducer_new(pl.n, params, 1.0 / 1024);
    cg_optim *opt = cg_adamw_from_module(root, 1e-2);
    if ((!blocking && !reducer) || !opt)
        return fail("reducer and optimizer");

    if (cg_dist_is_root())
        printf("MLP: %lld parameters, %d rank(s), %d bucket(s)\n",
               (long long)cg_module_num_params(root), cg_dist_size(),
               reducer ? cg_dist_reducer_buckets(reducer) : 0);
    static float xy[2 * N_POINTS];
    static int64_t label[N_POINTS];
    make_spirals(&data_rng, xy, label);
    int64_t lo, hi; /* this rank's rows of every global batch */
    if (!cg_dist_share(B, &lo, &hi))
        return fail("share");
    for (long step = 0; step < steps; step++) {
        cg_scope *scope = cg_scope_begin();
        float bx[2 * B];
        int64_t by[B];
        for (int64_t r = 0; r < B; r++) { /* the global batch: the same draws on every rank */
            uint64_t k = cg_rng_below(&data_rng, N_POINTS);
            bx[2 * r] = xy[2 * k], bx[2 * r + 1] = xy[2 * k + 1], by[r] = label[k];
        }
        cg_tensor *x = cg_from_data(CG_SHAPE(hi - lo, 2), bx + 2 * lo); /* this rank's rows */
        cg_tensor *y = cg_from_i64(CG_SHAPE(hi - lo), by + lo);
        if (reducer && !cg_dist_reducer_prepare(reducer, (double)(hi - lo)))
            return fail("prepare");
        cg_tensor *h = cg_gelu(cg_norm_forward(ln, cg_linear_forward(fc1, x)));
        cg_tensor *loss =
            cg_cross_entropy(cg_linear_forward(fc2, h), y, -100, 0.0f, CG_REDUCTION_MEAN);
        if (!loss || !cg_backward(loss, NULL, false))
            return fail("forward and backward");
        bool averaged = reducer ? cg_dist_reducer_finish(reducer)
                                : cg_dist_average_grads(root, (double)(hi - lo));
        double sum[1] = {cg_item(loss) * (double)(hi - lo)}; /* the global batch's mean */
        if (!averaged || !cg_optim_step(opt) || !cg_dist_allreduce_sum(sum, 1))
            return fail("step");
        if (cg_dist_is_root() && (step % 50 == 0 || step == steps - 1))
            printf("step %4ld  loss %.4f  (%d rank(s))\n", step, sum[0] / B, cg_dist_size());
        cg_optim_zero_grad(opt);
        cg_scope_end(scope);
    }
    if (cg_dist_is_root() && out && !cg_module_save(root, out, 0, NULL))
        return fail("save");
    cg_dist_reducer_free(reducer);
    cg_optim_free(opt);
    free(params);
    cg_param_list_free(&pl);
    cg_module_free(root);
    cg_dist_finalize();
    return 0;
}
