/* cgrad's charlm configured as nanoGPT's GPT (--pos-enc learned --emb-scale
 * none --act gelu_erf, pre-norm LayerNorm, tied head) against nanoGPT's
 * architecture in PyTorch (tests/interop/nanogpt.py writes the cases):
 *     check_nanogpt DIR     exit 0: every case within tolerance; 1: not
 * For each case the checkpoint scripts/nanogpt_import.py made from
 * nanoGPT's ckpt.pt and meta.pkl is loaded as charlm loads one (its config
 * and vocabulary, then every tensor by name, strictly), the config checked
 * to be nanoGPT's architecture, the ids run, and the logits, the mean
 * cross-entropy and every parameter's gradient matched in fp32 within 1e-5
 * (relative to the largest value). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "models/charlm/charlm.h"
#include "models/charlm/charlm_ckpt.h"
#include "rel_diff.h"

enum { V = 29, D = 32, NH = 4, L = 2, BS = 16, B = 3, T = 12 };

/* ids saved as float32 values, back as int64 */
static bool ids_of(cg_st_file *io, const char *name, int64_t *out)
{
    cg_tensor *t = cg_st_get_f32(io, name), *c = t ? cg_k_contiguous(t) : NULL;
    bool ok = c && cg_numel(c) == B * T;
    for (int64_t i = 0; ok && i < B * T; i++)
        out[i] = (int64_t)cg_data(c)[i];
    cg_release_all(2, t, c);
    return ok;
}

static bool run(const char *dir, const char *name, bool bias)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    snprintf(io_path, sizeof io_path, "%s/%s.io.safetensors", dir, name);
    cg_charlm_ckpt ck = {0};
    bool ok = cg_charlm_ckpt_load(path, &ck);
    cg_charlm *m = ok ? ck.model : NULL;
    const cg_charlm_config *c = m ? &m->cfg : NULL;
    if (c && !(c->vocab == V && c->d == D && c->H == NH && c->layers == L && c->d_ff == 4 * D &&
               c->max_len == BS && c->act == CG_ACT_GELU_ERF && c->bias == bias &&
               c->pos_enc == CG_POS_LEARNED && c->emb_scale == CG_EMB_SCALE_NONE &&
               c->norm == CG_NORM_LAYERNORM && c->norm_first && c->kv_heads == 0 && ck.vocab &&
               ck.vocab->n == V)) {
        fprintf(stderr, "check_nanogpt: %s: the imported config is not nanoGPT's GPT\n", name);
        ok = false;
    }
    cg_st_file *io = ok ? cg_st_open(io_path) : NULL;
    int64_t x[B * T], y[B * T];
    ok = ok && io && ids_of(io, "x", x) && ids_of(io, "y", y);
    cg_tensor *logits = ok ? cg_charlm_forward(m, x, B, T) : NULL;
    cg_tensor *loss = logits ? cg_charlm_loss(m, logits, y) : NULL;
    ok = loss && cg_backward(loss, NULL, false);
    if (!ok) {
        fprintf(stderr, "check_nanogpt: %s: %s\n", name, cg_last_error());
    } else {
        cg_tensor *wl = cg_st_get_f32(io, "logits"), *wloss = cg_st_get_f32(io, "loss");
        double el = rel_diff(logits, wl), ee = rel_diff(loss, wloss), eg = 0;
        cg_release_all(2, wl, wloss);
        cg_param_list ps = {0};
        ok = cg_module_params(CG_MODULE(m), &ps);
        for (int i = 0; ok && i < ps.n; i++) {
            char tn[256];
            snprintf(tn, sizeof tn, "grad.%s", ps.items[i].name);
            cg_tensor *tg = cg_st_get_f32(io, tn);
            const double e = rel_diff(ps.items[i].tensor->grad, tg);
            if (e > 1e-5)
                printf("%s %s: gradient of %s off by %.2e\n", name, bias ? "bias" : "no bias",
                       ps.items[i].name, e);
            eg = e > eg ? e : eg;
            cg_release(tg);
        }
        printf("%s: %d tensors; logits %.2e, loss %.2e, worst gradient %.2e", name, ps.n, el, ee,
               eg);
        ok = ok && el <= 1e-5 && ee <= 1e-5 && eg <= 1e-5;
        printf(ok ? " ok\n" : " FAIL (tolerance 1e-5)\n");
        cg_param_list_free(&ps);
    }
    cg_release_all(2, logits, loss);
    cg_st_close(io);
    cg_charlm_ckpt_free(&ck);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_nanogpt DIR\n");
        return 2;
    }
    const cg_precision prev = cg_get_matmul_precision();
    cg_set_matmul_precision(CG_PRECISION_FP32);
    bool ok = run(argv[1], "gpt", true);
    ok = run(argv[1], "gpt_nb", false) && ok;
    cg_set_matmul_precision(prev);
    return ok ? 0 : 1;
}
