/* example_pinn: a physics-informed network, trained through gradients of
 * gradients (cg_autograd_grad with create_graph).
 *
 * A small tanh network u(x) learns to solve u''(x) = -sin(x) on [0, pi]
 * with u(0) = u(pi) = 0, whose solution is sin(x), from the equation
 * alone: no value of the solution is shown to it. Each step
 *   - computes u at collocation points x that require grad;
 *   - takes u' = du/dx and u'' = du'/dx with create_graph, so that u'' is
 *     itself a differentiable function of the weights;
 *   - minimises mean((u'' + sin x)^2) + u(0)^2 + u(pi)^2 with Adam.
 * At the end it prints the largest error against sin(x) on a fine grid
 * and, trained for the 1,500 steps or more, fails (exit 1) if the network
 * has not learnt it. pinn.py is its
 * PyTorch twin: the same initial weights, and the same losses step by
 * step (the test example_pinn_torch).
 *
 *   build/examples/example_pinn [--steps N]
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

enum { POINTS = 64, HIDDEN = 24 };

/* d(sum f)/dx with a graph of its own (f's rows depend on their own x) */
static cg_tensor *d_dx(cg_tensor *f, cg_tensor *x)
{
    cg_tensor *s = cg_sum_all(f), *g = NULL;
    const cg_grad_opts o = {.create_graph = true};
    return s && cg_autograd_grad(1, &s, NULL, 1, &x, &o, &g) ? g : NULL;
}

/* The loss: the equation's residual at the points, and the two ends */
static cg_tensor *pinn_loss(cg_module *u_of, cg_tensor *x, cg_tensor *ends)
{
    cg_tensor *u = cg_module_forward(u_of, x), *ux = u ? d_dx(u, x) : NULL,
              *uxx = ux ? d_dx(ux, x) : NULL;
    cg_tensor *r = uxx ? cg_add(uxx, cg_sin(x)) : NULL;
    cg_tensor *ub = u ? cg_module_forward(u_of, ends) : NULL;
    if (!r || !ub)
        return NULL;
    return cg_add(cg_mean_all(cg_mul(r, r)), cg_sum_all(cg_mul(ub, ub)));
}

int main(int argc, char **argv)
{
    int steps = 1500;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            steps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: example_pinn [--steps N (> 0)]\n");
            return 2;
        }
    }
    /* u: nn.Sequential(Linear(1, H), Tanh, Linear(H, H), Tanh, Linear(H, 1))
     * with the weights PyTorch draws after torch.manual_seed(1), from its
     * generator (cg_mt19937) */
    cg_mt19937 g;
    cg_mt19937_seed(&g, 1);
    cg_module *net =
        cg_mlp(4, (const int64_t[]){1, HIDDEN, HIDDEN, 1}, CG_ACT_TANH, cg_init_skip());
    cg_optim_config cfg = cg_adam_default(1e-2);
    cg_optim *opt = net && cg_module_reset_parameters_torch(net, &g)
                        ? cg_optim_from_module(&cfg, net, 0.0, CG_DECAY_ALL)
                        : NULL;
    float xs[POINTS];
    for (int i = 0; i < POINTS; i++) /* collocation points inside (0, pi) */
        xs[i] = (float)(M_PI * (i + 0.5) / POINTS);
    cg_tensor *x = cg_requires_grad(cg_from_data(2, (const int64_t[]){POINTS, 1}, xs), true);
    cg_tensor *ends = cg_from_data(2, (const int64_t[]){2, 1}, (const float[]){0.0f, (float)M_PI});
    bool ok = opt && x && ends;
    for (int step = 1; ok && step <= steps; step++) {
        cg_scope *sc = cg_scope_begin();
        cg_tensor *loss = pinn_loss(net, x, ends);
        ok = loss && cg_backward(loss, NULL, false) && cg_optim_step(opt);
        if (ok && (steps <= 100 || step % 250 == 0 || step == steps))
            printf("step %d loss %.6f\n", step, (double)cg_item(loss));
        cg_optim_zero_grad(opt);
        cg_scope_end(sc);
    }
    double worst = INFINITY;
    if (ok) { /* against sin(x) on a grid that includes the ends */
        float grid[101];
        for (int i = 0; i <= 100; i++)
            grid[i] = (float)(M_PI * i / 100);
        cg_no_grad_begin();
        cg_scope *sc = cg_scope_begin();
        cg_tensor *u = cg_module_forward(net, cg_from_data(2, (const int64_t[]){101, 1}, grid));
        ok = u != NULL;
        worst = 0.0;
        for (int i = 0; ok && i <= 100; i++)
            worst = fmax(worst, fabs(cg_data(u)[i] - sin(grid[i])));
        cg_scope_end(sc);
        cg_no_grad_end();
    }
    if (!ok)
        fprintf(stderr, "error: %s\n", cg_last_error());
    else
        printf("largest |u(x) - sin(x)| on [0, pi]: %.4f\n", worst);
    cg_release_all(2, x, ends);
    cg_optim_free(opt);
    cg_module_free(net);
    return ok && (steps < 1500 || worst < 0.05) ? 0 : 1;
}
