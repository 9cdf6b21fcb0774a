/* cgrad's F.embedding_bag, F.local_response_norm, F.channel_shuffle and
 * the modules nn.EmbeddingBag and weight_norm'd / spectral_norm'd Linear,
 * Conv2d and ConvTranspose2d against PyTorch's (tests/interop/param.py
 * writes the cases):
 *     check_param DIR     exit 0: every case within tolerance; 1: not
 * Ops: each case's op read from its file ("cfg"), the output and the
 * gradients of the loss sum(y * r) matched within TOL (relative to the
 * largest value; PyTorch ran in float64 on the float32 inputs). Modules:
 * built here by the case's name, PyTorch's state dict loaded by its names
 * (cg_module_load_file, strict: weight_g/weight_v, weight_orig/weight_u/
 * weight_v), one forward in the case's mode, the output, every gradient
 * and (spectral norm) the buffers after the power iterations matched
 * likewise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

#define TOL 2e-6

/* sum(y * f's r) taken back; y and the n gradients got[k] as f's "y" and
 * names[k] */
static bool matches(cg_st_file *f, cg_tensor *y, int n, const char *const *names,
                    cg_tensor *const *of)
{
    cg_tensor *r = cg_st_get_f32(f, "r"), *p = y ? cg_mul(y, r) : NULL;
    cg_tensor *s = p ? cg_sum_all(p) : NULL;
    bool ok = s && cg_backward(s, NULL, false);
    cg_tensor *want = cg_st_get_f32(f, "y");
    ok = twin_within("y", y, want, TOL) && ok;
    cg_release(want);
    for (int k = 0; k < n; k++) {
        want = cg_st_get_f32(f, names[k]);
        ok = twin_within(names[k], ok ? of[k]->grad : NULL, want, TOL) && ok;
        cg_release(want);
    }
    cg_release_all(3, r, p, s);
    return ok;
}

static bool run_case(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    cg_st_file *f = cg_st_open(path);
    cg_tensor *cfg = f ? cg_st_get(f, "cfg") : NULL;
    if (!cfg || cfg->dtype != CG_I64) {
        fprintf(stderr, "check_param: %s: no config (%s)\n", name, cg_last_error());
        cg_release(cfg);
        cg_st_close(f);
        return false;
    }
    const int64_t *q = cg_data_i64(cfg);
    cg_tensor *t[4] = {NULL}, *y = NULL; /* w, psw, ids, offsets; or x */
    bool ok = false;
    if (q[0] == 0) {
        t[0] = cg_requires_grad(cg_st_get_f32(f, "w"), true);
        t[1] = cg_st_has(f, "psw") ? cg_requires_grad(cg_st_get_f32(f, "psw"), true) : NULL;
        t[2] = cg_st_get(f, "ids");
        t[3] = cg_st_has(f, "offsets") ? cg_st_get(f, "offsets") : NULL;
        cg_bag_opts o = {(cg_bag_mode)q[1], t[3], q[2] != 0, t[1], q[3] != 0, q[4]};
        y = cg_embedding_bag(t[0], t[2], &o);
        const char *names[2] = {"grad.w", "grad.psw"};
        ok = matches(f, y, t[1] ? 2 : 1, names, t);
    } else {
        t[0] = cg_requires_grad(cg_st_get_f32(f, "x"), true);
        cg_tensor *lrn = q[0] == 1 ? cg_st_get_f32(f, "lrn") : NULL;
        const float *a = lrn ? cg_data(lrn) : NULL;
        y = q[0] == 2 ? cg_channel_shuffle(t[0], q[1])
            : a       ? cg_local_response_norm(t[0], q[1], a[0], a[1], a[2])
                      : NULL;
        const char *names[1] = {"grad.x"};
        ok = matches(f, y, 1, names, t);
        cg_release(lrn);
    }
    printf("%s: %s\n", name, ok ? "ok" : cg_last_error());
    cg_release_all(6, cfg, t[0], t[1], t[2], t[3], y);
    cg_st_close(f);
    return ok;
}

/* The module of case name as param.py builds it, and whether it trains */
static cg_module *module_of(const char *name, bool *train)
{
    cg_conv_cfg cfg = CG_CONV_DEFAULT;
    *train = strcmp(name, "sn_linear_eval") != 0;
    if (!strcmp(name, "bag_module")) {
        cg_bag_opts o = {.mode = CG_BAG_MAX, .has_padding_idx = true, .padding_idx = 2};
        return (cg_module *)cg_embed_bag_new(6, 3, &o, NULL);
    }
    if (!strncmp(name, "wn_conv", 7)) {
        cg_conv *c = cg_conv2d_new(2, 3, 2, 2, &cfg, true, NULL);
        return c && cg_weight_norm(&c->base, "weight", -1) ? &c->base : NULL;
    }
    if (!strcmp(name, "sn_convt")) {
        cg_conv *c = cg_conv_transpose2d_new(2, 3, 2, 2, &cfg, true, NULL);
        return c && cg_spectral_norm(&c->base, "weight", 2, 1e-12f, CG_SPECTRAL_DIM_AUTO, NULL)
                   ? &c->base
                   : NULL;
    }
    cg_linear *l = cg_linear_new(5, 4, true, NULL);
    bool ok =
        l && (name[0] == 'w'
                  ? cg_weight_norm(&l->base, "weight", strstr(name, "dim1") ? 1 : 0)
                  : cg_spectral_norm(&l->base, "weight", 1, 1e-12f, CG_SPECTRAL_DIM_AUTO, NULL));
    return ok ? &l->base : NULL;
}

/* m's parameters' gradients and buffers against io's */
static bool module_matches(cg_module *m, cg_st_file *io, cg_tensor *x, cg_tensor *y)
{
    cg_param_list l = {0};
    bool ok = cg_module_params(m, &l);
    const char *names[8];
    cg_tensor *of[8];
    char buf[8][64];
    int n = 0;
    if (x) {
        names[n] = "grad.x";
        of[n++] = x;
    }
    for (int i = 0; ok && i < l.n && n < 8; i++) {
        snprintf(buf[n], sizeof buf[n], "grad.%s", l.items[i].name);
        names[n] = buf[n];
        of[n++] = l.items[i].tensor;
    }
    ok = ok && matches(io, y, n, names, of);
    cg_param_list_free(&l);
    cg_param_list b = {0};
    ok = cg_module_buffers(m, &b) && ok;
    for (int i = 0; i < b.n; i++) {
        char key[96];
        snprintf(key, sizeof key, "after.%s", b.items[i].name);
        cg_tensor *want = cg_st_get_f32(io, key);
        ok = twin_within(key, b.items[i].tensor, want, TOL) && ok;
        cg_release(want);
    }
    cg_param_list_free(&b);
    return ok;
}

static bool run_module(const char *dir, const char *name)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    snprintf(io_path, sizeof io_path, "%s/%s.io.safetensors", dir, name);
    bool train;
    cg_module *m = module_of(name, &train);
    cg_st_file *io = cg_st_open(io_path);
    const bool loaded = m && io && cg_module_load_file(m, path);
    cg_module_train(m, train);
    cg_tensor *x = NULL, *y = NULL, *ids = NULL, *off = NULL;
    if (loaded && !strcmp(m->type, "EmbeddingBag")) {
        ids = cg_st_get(io, "ids"), off = cg_st_get(io, "offsets");
        y = cg_embed_bag_forward((cg_embed_bag *)m, ids, off, NULL);
    } else if (loaded) {
        x = cg_requires_grad(cg_st_get_f32(io, "x"), true);
        y = cg_module_forward(m, x);
    }
    const bool ok = loaded && module_matches(m, io, x, y);
    printf("%s: %s\n", name, ok ? "ok" : cg_last_error());
    cg_release_all(4, x, y, ids, off);
    cg_st_close(io);
    cg_module_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: check_param DIR\n"), 2;
    int bad = 0;
    const int n = twin_each_case(argv[1], "cases.txt", &bad, run_case);
    const int nm = twin_each_case(argv[1], "modules.txt", &bad, run_module);
    printf("check_param: %d op cases and %d modules, %d failed; worst %.1e (tolerance %.0e)\n", n,
           nm, bad, twin_worst, TOL);
    return bad || n <= 0 || nm <= 0 ? 1 : 0;
}
