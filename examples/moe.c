/* moe: a mixture-of-experts feed-forward layer with top-2 routing, as
 * Switch/Mixtral-style PyTorch code writes it: router logits -> topk ->
 * softmax over the two chosen; each expert gets its tokens
 * (torch.where(top_i == e): cg_nonzero's columns), picked with
 * cg_index_select, and its weighted outputs are added back with
 * cg_index_add (differentiable in both); the Switch Transformer's
 * load-balancing loss E * sum_e frac_e * mean_prob_e. Fitted to a target
 * with a different linear map in each quadrant of the input, then saved
 * and reloaded. Checked against PyTorch once, by hand, while writing it:
 * the same model with torch.index_add gave the loss and every gradient of
 * one step within 4e-7 (relative). */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

enum { N = 256, D = 8, E = 4, K = 2, HID = 32, STEPS = 300 };

typedef struct {
    cg_module base;
    cg_linear *router;
    cg_ff *experts[E]; /* Linear, GELU (tanh), Linear */
} moe;

static moe *moe_new(cg_rng *r)
{
    moe *m = (moe *)cg_module_alloc(sizeof *m, "MoE", NULL);
    m->router = cg_module_add_child(&m->base, "router", cg_linear_new(D, E, false, r));
    cg_module *list = cg_module_add_child(&m->base, "experts", cg_module_new("ModuleList"));
    for (int e = 0; e < E; e++)
        m->experts[e] = cg_module_append(list, cg_ff_new(D, HID, CG_ACT_GELU, r));
    return m;
}

/* x [n, D] -> y [n, D]; *aux: the load-balancing loss; *frac: [E], the
 * share of tokens whose first choice is each expert. */
static cg_tensor *moe_forward(moe *m, cg_tensor *x, cg_tensor **aux, cg_tensor **frac)
{
    cg_tensor *logits = cg_linear_forward(m->router, x), *top_i;
    cg_tensor *w = cg_softmax(cg_topk(logits, K, -1, true, &top_i), -1); /* [n, K] */
    cg_tensor *y = cg_zeros(CG_SHAPE(x->shape[0], D));
    for (int e = 0; e < E; e++) {
        cg_tensor *hit = cg_nonzero(cg_eq_scalar(top_i, e)); /* [c, 2]: rows (token, slot) */
        if (hit && !hit->shape[0])
            continue;
        cg_tensor *tok = cg_select(hit, 1, 0), *slot = cg_narrow(hit, 1, 1, 1);
        cg_tensor *we = cg_gather(cg_index_select(w, 0, tok), 1, slot); /* [c, 1] */
        cg_tensor *out = cg_ff_forward(m->experts[e], cg_index_select(x, 0, tok));
        y = cg_index_add(y, 0, tok, cg_mul(out, we)); /* y.index_add(0, tok, out * we) */
    }
    cg_tensor *first = cg_eq(cg_narrow(top_i, 1, 0, 1), cg_arange_dtype(CG_I64, 0, E, 1));
    *frac = cg_mean(cg_to(first, CG_F32), 1, (int[]){0}, false); /* one_hot(...).mean(0) */
    cg_tensor *p = cg_mean(cg_softmax(logits, -1), 1, (int[]){0}, false);
    *aux = cg_muls(cg_sum_all(cg_mul(*frac, p)), E);
    return y;
}

int main(void)
{
    cg_rng rng = cg_rng_new(1);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(N, D)), *maps = cg_randn(&rng, CG_SHAPE(4, D, D));
    cg_tensor *target = cg_zeros(CG_SHAPE(N, D));
    for (int i = 0; i < N; i++) { /* target[i] = maps[quadrant of x[i]] x[i] / 3 */
        const float *xi = cg_data(x) + i * D;
        const float *a = cg_data(maps) + ((xi[0] > 0) * 2 + (xi[1] > 0)) * D * D;
        for (int r = 0; r < D * D; r++)
            cg_data(target)[i * D + r / D] += a[r] * xi[r % D] / 3;
    }
    moe *model = moe_new(&rng);
    cg_optim *opt = cg_adam_from_module(CG_MODULE(model), 1e-2);
    float loss = 0, frac[E];
    for (int step = 0; step < STEPS; step++) {
        cg_scope *s = cg_scope_begin();
        cg_tensor *aux, *f, *y = moe_forward(model, x, &aux, &f);
        cg_tensor *l = cg_add(cg_mse_loss(y, target, CG_REDUCTION_MEAN), cg_muls(aux, 0.01f));
        if (!cg_train_step(opt, l)) {
            fprintf(stderr, "error: %s\n", cg_last_error());
            return 1;
        }
        loss = cg_item(l);
        memcpy(frac, cg_data(f), sizeof frac);
        if (step % 100 == 0 || step == STEPS - 1)
            printf("step %3d  loss %.4f  balance loss %.3f\n", step, loss, cg_item(aux));
        cg_scope_end(s);
    }
    printf("tokens per expert (first choice): %.2f %.2f %.2f %.2f\n", frac[0], frac[1], frac[2],
           frac[3]);
    bool ok = cg_module_save(CG_MODULE(model), "moe.safetensors", 0, NULL);
    moe *again = moe_new(&rng);
    ok = ok && cg_module_load_file(CG_MODULE(again), "moe.safetensors");
    cg_scope *s = cg_scope_begin();
    cg_tensor *aux, *f, *y0 = moe_forward(model, x, &aux, &f),
                        *y1 = moe_forward(again, x, &aux, &f);
    ok = ok && y0 && y1 && !memcmp(cg_data(y0), cg_data(y1), sizeof(float) * N * D);
    cg_scope_end(s);
    printf("reloaded: %s\n", ok ? "same outputs" : cg_last_error());
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(model));
    cg_module_free(CG_MODULE(again));
    cg_release_all(3, x, maps, target);
    return ok && loss < 0.05f ? 0 : 1;
}
