/* cgrad's MultiHeadAttention with rotary embeddings (cg_mha_set_rope) and
 * grouped-query heads (cg_mha_new_gqa) against PyTorch's, written as
 * Hugging Face's LLaMA computes them
 * (tests/interop/rope.py writes the cases):
 *     check_rope DIR     exit 0: every case within tolerance; 1: not
 * For each case the module is built, PyTorch's weights loaded by name
 * (strict), x run through causal self-attention, and the output, the
 * input's gradient and the parameters' gradients of sum(y * r) matched:
 * fp32 within 1e-5 (relative to the largest value), in bf16 precision
 * within 3e-2. Then the cached form: x fed one position at a time through
 * a key/value cache gives the same output rows within 1e-5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "rel_diff.h"

enum { D = 16, H = 4, B = 2, T = 7 };

typedef struct {
    const char *name;
    double theta; /* 0: no rotation */
    bool bias;
    int64_t kv; /* key/value heads */
} rcase;

static const rcase CASES[] = {{"rope", 10000.0, true, H},
                              {"rope_theta", 500000.0, false, H},
                              {"gqa", 0.0, true, 2},
                              {"gqa_rope", 10000.0, true, 1}};
static const char *const GRADS[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight",
                                    "o_proj.weight"};

/* x one position at a time through a cache: the output's rows against y */
static double cached_diff(cg_mha *m, cg_tensor *x, const cg_tensor *y)
{
    cg_mha_kv kv = {0};
    double worst = 0;
    for (int64_t t = 0; t < T && worst < INFINITY; t++) {
        cg_tensor *xt = cg_view_narrow(x, 1, t, 1);
        cg_tensor *yt = xt ? cg_mha_forward_cached(m, xt, xt, true, NULL, &kv) : NULL;
        cg_tensor *want = cg_view_narrow((cg_tensor *)y, 1, t, 1);
        worst = fmax(worst, rel_diff(yt, want));
        cg_release_all(3, xt, yt, want);
    }
    cg_mha_kv_free(&kv);
    return worst;
}

static bool run(const char *dir, const rcase *c, cg_precision prec, double tol)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
    snprintf(io_path, sizeof io_path, "%s/%s.io.safetensors", dir, c->name);
    cg_rng rng = cg_rng_new(5);
    cg_mha *m = cg_mha_new_gqa(D, H, c->kv, c->bias, &rng);
    cg_st_file *io = cg_st_open(io_path);
    bool ok = m && io && cg_mha_set_rope(m, c->theta) && cg_module_load_file(CG_MODULE(m), path);
    cg_tensor *x = ok ? cg_st_get_f32(io, "x") : NULL, *y = NULL, *loss = NULL, *yr = NULL;
    cg_tensor *want = ok ? cg_st_get_f32(io, "y") : NULL, *r = ok ? cg_st_get_f32(io, "r") : NULL;
    const cg_precision prev = cg_get_matmul_precision();
    cg_set_matmul_precision(prec);
    if (x && want && r) {
        x->requires_grad = true;
        y = cg_mha_forward(m, x, x, true, NULL, NULL, NULL);
        yr = y ? cg_mul(y, r) : NULL;
        loss = yr ? cg_sum(yr, 0, NULL, false) : NULL;
        ok = loss && cg_backward(loss, NULL, false);
    } else {
        ok = false;
    }
    double ec = ok && prec == CG_PRECISION_FP32 ? cached_diff(m, x, want) : 0;
    cg_set_matmul_precision(prev);
    const char *pn = prec == CG_PRECISION_BF16 ? "bf16" : "fp32";
    if (!ok) {
        fprintf(stderr, "check_rope: %s %s: %s\n", c->name, pn, cg_last_error());
    } else {
        double e = rel_diff(y, want);
        cg_tensor *gx = cg_st_get_f32(io, "grad.x");
        double ex = rel_diff(x->grad, gx);
        cg_release(gx);
        printf("%s %s: y %.2e, grad.x %.2e", c->name, pn, e, ex);
        ok = e <= tol && ex <= tol && ec <= tol;
        for (int k = 0; k < 4; k++) {
            char tn[128];
            snprintf(tn, sizeof tn, "grad.%s", GRADS[k]);
            cg_tensor *tg = cg_st_get_f32(io, tn), *p = cg_module_get_param(CG_MODULE(m), GRADS[k]);
            double ep = p ? rel_diff(p->grad, tg) : INFINITY;
            printf(", %s %.2e", GRADS[k], ep);
            ok = ok && ep <= tol;
            cg_release(tg);
        }
        if (prec == CG_PRECISION_FP32)
            printf(", cached rows %.2e", ec);
        printf(ok ? " ok\n" : " FAIL (tolerance %.0e)\n", tol);
    }
    cg_release_all(6, x, y, want, r, yr, loss);
    cg_st_close(io);
    cg_module_free(CG_MODULE(m));
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_rope DIR\n");
        return 2;
    }
    bool ok = true;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ok = run(argv[1], &CASES[i], CG_PRECISION_FP32, 1e-5) && ok;
        ok = run(argv[1], &CASES[i], CG_PRECISION_BF16, 3e-2) && ok;
    }
    return ok ? 0 : 1;
}
