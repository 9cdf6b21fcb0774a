/* cgrad's F.prelu, F.glu, F.pixel_shuffle / pixel_unshuffle, F.rrelu in
 * evaluation and the modules nn.Softmin, nn.Softmax2d, nn.LogSoftmax and
 * nn.PReLU (autograd/ops.h's cg_prelu, cg_glu, ..., nn/layers.h's modules)
 * against PyTorch's (tests/interop/prelu.py writes the cases):
 *     check_prelu DIR     exit 0: every case within tolerance; 1: not
 * Each case's op is read from its file ("cfg"), the output and the
 * gradients of x (and of the weight) of the loss sum(y * r) matched within
 * 2e-6 (relative to the largest value; PyTorch ran in float64 on float32
 * values). nn.PReLU: PyTorch's state dict loaded by its names
 * (cg_module_load_file, strict), the output and the gradients of x and of
 * the weight matched likewise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

#define TOL 2e-6

/* sum(y * f's r) taken back; y, x's gradient and (w not NULL) w's as f's
 * "y", "grad.x" and wname, within TOL (twin_within: the worst kept) */
static bool matches(cg_st_file *f, cg_tensor *y, cg_tensor *x, cg_tensor *w, const char *wname)
{
    cg_tensor *r = cg_st_get_f32(f, "r"), *p = y ? cg_mul(y, r) : NULL;
    cg_tensor *s = p ? cg_sum_all(p) : NULL;
    bool ok = s && cg_backward(s, NULL, false);
    const char *names[3] = {"y", "grad.x", wname};
    const cg_tensor *got[3] = {y, ok ? x->grad : NULL, w && ok ? w->grad : NULL};
    for (int k = 0; k < (w ? 3 : 2); k++) {
        cg_tensor *want = cg_st_get_f32(f, names[k]);
        ok = twin_within(names[k], got[k], want, TOL) && ok;
        cg_release(want);
    }
    cg_release_all(3, r, p, s);
    return ok;
}

/* The op of kind (prelu.py's numbers) on x */
static cg_tensor *op_of(int64_t kind, int64_t arg, cg_tensor *x, cg_tensor *w, const float *bounds)
{
    cg_module *m = kind == 5   ? cg_softmin_new((int)arg)
                   : kind == 6 ? cg_softmax2d_new()
                   : kind == 7 ? cg_log_softmax_new((int)arg)
                               : NULL;
    if (m) {
        cg_tensor *y = cg_module_forward(m, x);
        cg_module_free(m);
        return y;
    }
    switch (kind) {
    case 0: return cg_prelu(x, w);
    case 1: return cg_glu(x, (int)arg);
    case 2: return cg_pixel_shuffle(x, arg);
    case 3: return cg_pixel_unshuffle(x, arg);
    case 4: return bounds ? cg_rrelu(x, bounds[0], bounds[1], false, NULL) : NULL;
    }
    return NULL;
}

static bool run_case(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    cg_st_file *f = cg_st_open(path);
    cg_tensor *cfg = f ? cg_st_get(f, "cfg") : NULL;
    if (!cfg || cfg->dtype != CG_I64 || cg_numel(cfg) != 2) {
        fprintf(stderr, "check_prelu: %s: no config (%s)\n", name, cg_last_error());
        cg_release(cfg);
        cg_st_close(f);
        return false;
    }
    const int64_t *q = cg_data_i64(cfg);
    cg_tensor *x = cg_requires_grad(cg_st_get_f32(f, "x"), true);
    cg_tensor *w = cg_st_has(f, "w") ? cg_requires_grad(cg_st_get_f32(f, "w"), true) : NULL;
    cg_tensor *b = cg_st_has(f, "bounds") ? cg_st_get_f32(f, "bounds") : NULL;
    cg_tensor *y = x ? op_of(q[0], q[1], x, w, b ? cg_data(b) : NULL) : NULL;
    const bool ok = matches(f, y, x, w, "grad.w");
    printf("%s: %s\n", name, ok ? "ok" : cg_last_error());
    cg_release_all(5, cfg, x, w, b, y);
    cg_st_close(f);
    return ok;
}

/* nn.PReLU(3) with PyTorch's weight, by name */
static bool run_module(const char *dir)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/module.safetensors", dir);
    snprintf(io_path, sizeof io_path, "%s/module.io.safetensors", dir);
    cg_module *m = cg_prelu_new(3, 0.25f);
    cg_st_file *io = cg_st_open(io_path);
    const bool loaded = m && io && cg_module_load_file(m, path);
    cg_tensor *x = loaded ? cg_requires_grad(cg_st_get_f32(io, "x"), true) : NULL;
    cg_tensor *y = x ? cg_module_forward(m, x) : NULL;
    const bool ok = loaded && matches(io, y, x, cg_module_get_param(m, "weight"), "grad.weight");
    printf("module: %s\n", ok ? "ok" : cg_last_error());
    cg_release_all(2, x, y);
    cg_st_close(io);
    cg_module_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: check_prelu DIR\n"), 2;
    int bad = 0;
    const int n = twin_each_case(argv[1], "cases.txt", &bad, run_case);
    bad += !run_module(argv[1]);
    printf("check_prelu: %d cases and nn.PReLU, %d failed; worst %.1e (tolerance %.0e)\n", n, bad,
           twin_worst, TOL);
    return bad || n <= 0 ? 1 : 0;
}
