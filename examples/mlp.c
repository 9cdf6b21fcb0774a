/* example_mlp: a new model written against cgrad's nn API.
 *
 * A two-layer perceptron with a layer norm learns to classify points of two
 * interleaved spirals, trained with AdamW and a cosine schedule. It shows
 * the pieces a user combines for any model:
 *   - modules (cg_linear, cg_layernorm) registered under one parent, so the
 *     parameters have dotted names and can be listed, saved and loaded;
 *   - a forward pass built from autograd ops, inside a scope (cg_scope_begin
 *     / cg_scope_end) that frees every intermediate tensor: no releases;
 *   - an optimizer built from the module in one call;
 *   - cg_cross_entropy, cg_backward, an optimizer step, zero_grad;
 *   - a no-grad evaluation and a safetensors checkpoint.
 *
 *   build/examples/example_mlp [--steps N] [--out model.safetensors]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI /* POSIX, not C11 */
#define M_PI 3.14159265358979323846
#endif

#include "autograd/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "optim/schedule.h"

enum { N_POINTS = 512, HIDDEN = 64, CLASSES = 2 };

/* The model: x [N,2] -> fc1 -> layer norm -> gelu -> fc2 -> logits [N,2]. */
typedef struct {
    cg_module *root; /* owns the layers below */
    cg_linear *fc1, *fc2;
    cg_norm *ln;
} spiral_mlp;

static bool mlp_init(spiral_mlp *m, cg_rng *rng)
{
    m->root = cg_module_new("SpiralMLP");
    m->fc1 = cg_linear_new(2, HIDDEN, true, rng);
    m->ln = cg_layernorm_new(HIDDEN);
    m->fc2 = cg_linear_new(HIDDEN, CLASSES, true, rng);
    return m->root && cg_module_add_child(m->root, "fc1", m->fc1) &&
           cg_module_add_child(m->root, "ln", m->ln) && cg_module_add_child(m->root, "fc2", m->fc2);
}

/* Called inside a scope: the intermediates die at the caller's cg_scope_end. */
static cg_tensor *mlp_forward(spiral_mlp *m, cg_tensor *x)
{
    cg_tensor *h = cg_linear_forward(m->fc1, x);
    cg_tensor *a = cg_gelu(cg_norm_forward(m->ln, h));
    return cg_linear_forward(m->fc2, a); /* NULL if any step failed; cg_last_error() says why */
}

/* Two spirals, one per class, with a little noise. */
static void make_spirals(cg_rng *rng, float *xy, int64_t *label)
{
    for (int i = 0; i < N_POINTS; i++) {
        int c = i % 2;
        double t = 0.25 + 3.0 * (double)(i / 2) / (N_POINTS / 2);
        double angle = 2.2 * t + M_PI * c;
        xy[2 * i] = (float)(t * cos(angle) + 0.05 * cg_rng_normal(rng));
        xy[2 * i + 1] = (float)(t * sin(angle) + 0.05 * cg_rng_normal(rng));
        label[i] = c;
    }
}

static int usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "example_mlp: error: %s\n", msg);
    fprintf(stderr, "usage: example_mlp [--steps N (1..100000, default 600)] "
                    "[--out FILE.safetensors]\n");
    return msg ? 2 : 0;
}

int main(int argc, char **argv)
{
    long steps = 600;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return usage(NULL);
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            char *end;
            steps = strtol(argv[++i], &end, 10);
            if (*end || steps < 1 || steps > 100000)
                return usage("--steps needs a whole number from 1 to 100000");
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else {
            char b[256];
            snprintf(b, sizeof b, "unknown or incomplete argument '%s'", argv[i]);
            return usage(b);
        }
    }

    cg_rng rng = cg_rng_new(1);
    float xy[2 * N_POINTS];
    int64_t label[N_POINTS];
    make_spirals(&rng, xy, label);
    cg_tensor *x = cg_from_data(CG_SHAPE(N_POINTS, 2), xy);

    spiral_mlp m;
    if (!mlp_init(&m, &rng)) {
        fprintf(stderr, "example_mlp: error: %s\n", cg_last_error());
        return 1;
    }
    /* AdamW over every parameter of the registry (PyTorch's betas and eps);
     * weight decay 0.01 on matrices only, as in the zoo's recipes. The
     * one-call form with PyTorch's defaults: cg_adamw_from_module(root, lr). */
    cg_optim_config cfg = cg_adamw_default(1e-2);
    cg_optim *opt = cg_optim_from_module(&cfg, m.root, 0.01, CG_DECAY_MATRICES);
    if (!opt) {
        fprintf(stderr, "example_mlp: error: %s\n", cg_last_error());
        return 1;
    }
    printf("SpiralMLP: %lld parameters in %d tensors\n", (long long)cg_module_num_params(m.root),
           cg_optim_count(opt));

    int rc = 0;
    for (long step = 0; step < steps && !rc; step++) {
        cg_scope *scope = cg_scope_begin(); /* every tensor made below dies at its end */
        cg_optim_set_lr(opt, cg_lr_warmup_cosine(step, steps, 20, 1e-2, 1e-4));
        cg_tensor *loss =
            cg_cross_entropy(mlp_forward(&m, x), cg_from_i64(CG_SHAPE(N_POINTS), label), -100, 0.0f,
                             CG_REDUCTION_MEAN);
        if (!loss || !cg_backward(loss, NULL, false) || !cg_optim_step(opt)) {
            fprintf(stderr, "example_mlp: error at step %ld: %s\n", step, cg_last_error());
            rc = 1;
        } else if (step % 100 == 0 || step == steps - 1) {
            printf("step %4ld  loss %.4f\n", step, cg_item(loss));
        }
        cg_optim_zero_grad(opt);
        cg_scope_end(scope);
    }

    /* Accuracy without recording a graph. */
    cg_scope *scope = cg_scope_begin();
    cg_no_grad_begin();
    cg_tensor *logits = mlp_forward(&m, x);
    cg_no_grad_end();
    int correct = 0;
    for (int i = 0; logits && i < N_POINTS; i++) {
        float a = cg_get(logits, (int64_t[]){i, 0}), b = cg_get(logits, (int64_t[]){i, 1});
        correct += (b > a) == (label[i] == 1);
    }
    cg_scope_end(scope);
    printf("accuracy %.1f%% on %d points\n", 100.0 * correct / N_POINTS, N_POINTS);
    if (out && !cg_module_save(m.root, out, 0, NULL)) {
        fprintf(stderr, "example_mlp: error: %s\n", cg_last_error());
        rc = 1;
    }
    cg_release(x);
    cg_optim_free(opt);
    cg_module_free(m.root);
    return rc;
}
