/* cgrad's gated feed-forward and LM block against PyTorch's
 * (tests/interop/swiglu.py writes the cases):
 *     check_swiglu DIR     exit 0: every case within tolerance; 1: not
 * For each case the module is built, PyTorch's weights loaded by name
 * (strict: cg_module_load_file for the FeedForwards, which share PyTorch's
 * names fc1 / fc2 / fc3; cg_torch_load_file for the block, under PyTorch's
 * layer names linear1 / linear2 / linear3, norm1, self_attn, norm2), x run
 * and the output, the input's gradient and the parameters' gradients of
 * sum(y * r) matched: fp32 within 1e-5 (relative to the largest value), and
 * in bf16 precision within 3e-2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "rel_diff.h"

typedef struct {
    const char *name;
    cg_act act;
    bool bias, block;
    /* grads compared: PyTorch's name, cgrad's */
    const char *grads[3][2];
} gcase;

static const gcase CASES[] = {
    {"ff_swiglu",
     CG_ACT_SWIGLU,
     true,
     false,
     {{"fc1.weight", "fc1.weight"}, {"fc2.bias", "fc2.bias"}, {"fc3.weight", "fc3.weight"}}},
    {"ff_geglu",
     CG_ACT_GEGLU,
     false,
     false,
     {{"fc1.weight", "fc1.weight"}, {"fc2.weight", "fc2.weight"}, {"fc3.weight", "fc3.weight"}}},
    {"block",
     CG_ACT_SWIGLU,
     true,
     true,
     {{"linear1.weight", "ff.fc1.weight"},
      {"linear3.bias", "ff.fc3.bias"},
      {"self_attn.out_proj.weight", "attn.o_proj.weight"}}},
};

static bool run(const char *dir, const gcase *c, cg_precision prec, double tol)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
    snprintf(io_path, sizeof io_path, "%s/%s.io.safetensors", dir, c->name);
    cg_rng rng = cg_rng_new(5);
    cg_tf_config tc = {.d = 16, .H = 4, .d_ff = 40, .act = c->act, .norm_first = true};
    cg_module *m = c->block ? CG_MODULE(cg_lm_block_new(&tc, &rng))
                            : CG_MODULE(cg_ff_new_bias(16, 40, c->act, c->bias, &rng));
    cg_st_file *io = cg_st_open(io_path);
    bool ok = m && io && (c->block ? cg_torch_load_file(m, path) : cg_module_load_file(m, path));
    cg_tensor *x = ok ? cg_st_get_f32(io, "x") : NULL, *y = NULL, *loss = NULL, *yr = NULL;
    cg_tensor *want = ok ? cg_st_get_f32(io, "y") : NULL, *r = ok ? cg_st_get_f32(io, "r") : NULL;
    const cg_precision prev = cg_get_matmul_precision();
    cg_set_matmul_precision(prec);
    if (x && want && r) {
        x->requires_grad = true;
        const cg_attn_mask causal = {.causal = true};
        y = c->block ? cg_lm_block_forward((cg_lm_block *)m, x, &causal)
                     : cg_ff_forward((cg_ff *)m, x);
        yr = y ? cg_mul(y, r) : NULL;
        loss = yr ? cg_sum(yr, 0, NULL, false) : NULL;
        ok = loss && cg_backward(loss, NULL, false);
    } else {
        ok = false;
    }
    cg_set_matmul_precision(prev);
    const char *pn = prec == CG_PRECISION_BF16 ? "bf16" : "fp32";
    if (!ok) {
        fprintf(stderr, "check_swiglu: %s %s: %s\n", c->name, pn, cg_last_error());
    } else {
        double e = rel_diff(y, want);
        cg_tensor *gx = cg_st_get_f32(io, "grad.x");
        double ex = rel_diff(x->grad, gx);
        cg_release(gx);
        printf("%s %s: y %.2e, grad.x %.2e", c->name, pn, e, ex);
        ok = e <= tol && ex <= tol;
        for (int k = 0; k < 3; k++) {
            char tn[128];
            snprintf(tn, sizeof tn, "grad.%s", c->grads[k][0]);
            cg_tensor *tg = cg_st_get_f32(io, tn), *p = cg_module_get_param(m, c->grads[k][1]);
            double ep = p ? rel_diff(p->grad, tg) : INFINITY;
            printf(", %s %.2e", c->grads[k][1], ep);
            ok = ok && ep <= tol;
            cg_release(tg);
        }
        printf(ok ? " ok\n" : " FAIL (tolerance %.0e)\n", tol);
    }
    cg_release_all(6, x, y, want, r, yr, loss);
    cg_st_close(io);
    cg_module_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_swiglu DIR\n");
        return 2;
    }
    bool ok = true;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ok = run(argv[1], &CASES[i], CG_PRECISION_FP32, 1e-5) && ok;
        ok = run(argv[1], &CASES[i], CG_PRECISION_BF16, 3e-2) && ok;
    }
    return ok ? 0 : 1;
}
