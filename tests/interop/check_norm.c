/* Group and instance normalisation against PyTorch (the meson test
 * torch_norm): tests/interop/norm.py writes the cases, this runs them.
 * Every F.group_norm / F.instance_norm case: the output, the gradients of
 * sum(y * r) for x, weight and bias, and the running statistics after the
 * call, from the input as PyTorch had it and (every second case) from a
 * view of it with transposed storage. Every GroupNorm / InstanceNorm1d/2d
 * case: PyTorch's state dict loaded by name, three training steps, one
 * eval step, and the buffers after them. Prints the worst relative error
 * (rel_diff.h) against the tolerance.
 *   check_norm DIR */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

/* float32 statistics (saved for the backward as float32) against
 * PyTorch's float64: a group of two close values makes invstd large and
 * dx's cancellation loses about 7e-6 (case 26, [3, 2] with one group) */
#define TOL 1e-5

/* case i's tensor what, or NULL */
static cg_tensor *get(cg_st_file *f, int i, const char *what)
{
    return twin_get(f, "%d.%s", i, what);
}

static bool norm_case(cg_st_file *f, int i, int *counts)
{
    cg_tensor *cfg = get(f, i, "cfg"), *x0 = get(f, i, "x"), *r = get(f, i, "r");
    cg_tensor *w = cg_requires_grad(get(f, i, "w"), true),
              *b = cg_requires_grad(get(f, i, "b"), true);
    cg_tensor *rm = get(f, i, "rm"), *rv = get(f, i, "rv");
    cg_tensor *x = i % 2 && x0 && x0->ndim >= 2 ? twin_transposed(x0) : cg_retain(x0);
    cg_requires_grad(x, true);
    const int64_t *c = cfg ? cg_data_i64(cfg) : NULL;
    cg_tensor *y = NULL;
    if (c && c[0] == 0)
        y = cg_group_norm(x, c[1], w, b, (float)((double)c[4] / 1e6));
    else if (c)
        y = cg_instance_norm(x, rm, rv, w, b, c[6], (float)c[7] / 1000.0f,
                             (float)((double)c[4] / 1e6));
    cg_tensor *p = y ? cg_mul(y, r) : NULL, *l = p ? cg_sum_all(p) : NULL;
    bool ok = l && cg_backward(l, NULL, false);
    const char *names[5] = {"y", "gx", "gw", "gb", "rm1"};
    const cg_tensor *got[6] = {y, ok ? cg_grad(x) : NULL, cg_grad(w), cg_grad(b), rm, rv};
    for (int k = 0; k < 6; k++) {
        cg_tensor *want = get(f, i, k < 5 ? names[k] : "rv1");
        if (want || k < 2)
            ok = twin_within(k < 5 ? names[k] : "rv1", got[k], want, k < 4 ? TOL : 1e-6) && ok;
        cg_release(want);
    }
    if (c)
        counts[c[0]]++;
    if (!ok)
        printf("norm case %d (op %lld): FAIL %s\n", i, c ? (long long)c[0] : -1LL, cg_last_error());
    cg_release_all(12, cfg, x0, r, w, b, rm, rv, x, y, p, l, NULL);
    return ok;
}

static cg_module *module_of(const int64_t *c)
{
    cg_batchnorm_opts o = cg_instancenorm_opts_default();
    o.affine = c[3];
    o.track_running_stats = c[4];
    o.momentum = (float)c[5] / 1000.0f;
    switch (c[0]) {
    case 0: return CG_MODULE(cg_groupnorm_new(c[2], c[1], 1e-5f, c[3]));
    case 1: return CG_MODULE(cg_instancenorm1d_new(c[1], &o));
    default: return CG_MODULE(cg_instancenorm2d_new(c[1], &o));
    }
}

static bool module_case(const char *dir, const char *name)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/mod_%s.safetensors", dir, name);
    snprintf(io_path, sizeof io_path, "%s/mod_%s.io.safetensors", dir, name);
    cg_st_file *io = cg_st_open(io_path);
    cg_tensor *cfg = io ? cg_st_get(io, "cfg") : NULL;
    const int64_t *c = cfg ? cg_data_i64(cfg) : NULL;
    cg_module *m = c ? module_of(c) : NULL;
    bool ok = m && cg_module_load_file(m, path);
    cg_tensor *w = m ? cg_module_get_param(m, "weight") : NULL;
    cg_tensor *b = m ? cg_module_get_param(m, "bias") : NULL;
    if (!w)
        cg_clear_error();
    for (int step = 0; ok && step < 3; step++)
        ok = twin_module_step(m, w, b, io, step, 1e-5);
    ok = ok && twin_module_eval(m, io, 1e-5);
    printf("module %s: %s %s\n", name, ok ? "ok" : "FAIL", ok ? "" : cg_last_error());
    cg_release(cfg);
    cg_st_close(io);
    cg_module_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_norm DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/norms.safetensors", argv[1]);
    cg_st_file *f = cg_st_open(path);
    if (!f) {
        fprintf(stderr, "check_norm: %s\n", cg_last_error());
        return 1;
    }
    int counts[2] = {0}, n = 0, failed = 0;
    for (; cg_st_has(f, (snprintf(path, sizeof path, "%d.cfg", n), path)); n++)
        failed += !norm_case(f, n, counts);
    cg_st_close(f);
    printf("norms: %d cases (group_norm %d, instance_norm %d), %d failed, worst relative error "
           "%.2e (tolerance %.0e)\n",
           n, counts[0], counts[1], failed, twin_worst, TOL);
    twin_worst = 0;
    const char *mods[] = {"gn",         "gn_plain",   "in1d", "in1d_track", "in1d_unbatched",
                          "in2d_track", "in2d_affine"};
    for (int i = 0; i < 7; i++)
        failed += !module_case(argv[1], mods[i]);
    printf("modules: worst relative error %.2e (tolerance 1e-05)\n", twin_worst);
    return failed || n < 80 ? 1 : 0;
}
