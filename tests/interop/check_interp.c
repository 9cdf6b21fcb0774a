/* F.interpolate and nn.Upsample against PyTorch (the meson test
 * torch_interp): tests/interop/interp.py writes the cases, this runs
 * them. Every case: the output and the gradient of sum(y * r), from the
 * input as PyTorch had it and (every second case) from a view of it with
 * transposed storage; every third case through an Upsample module
 * (nn/upsample.h) rather than cg_interpolate. Cases without PyTorch's
 * gradient (its nearest and bicubic backwards' same-size copies,
 * interp.py) are counted.
 * Prints the worst relative error (rel_diff.h) against the tolerance.
 *   check_interp DIR */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

#define TOL 1e-6

static cg_tensor *get(cg_st_file *f, int i, const char *what)
{
    return twin_get(f, "%d.%s", i, what);
}

/* case c's options (align_corners and recompute_scale_factor -1: None) */
static cg_interp options(const int64_t *c)
{
    return (cg_interp){.mode = (cg_interp_mode)c[0],
                       .size = {c[2], c[3]},
                       .scale_factor = {(double)c[4] / 1e6, (double)c[5] / 1e6},
                       .align_corners = c[6] == 1,
                       .recompute_scale_factor = c[7] == 1};
}

static cg_tensor *run(int i, const cg_interp *o, cg_tensor *x)
{
    if (i % 3)
        return cg_interpolate(x, *o);
    cg_upsample *u = cg_upsample_new(o);
    cg_tensor *y = u ? cg_upsample_forward(u, x) : NULL;
    cg_module_free(CG_MODULE(u));
    return y;
}

static bool one_case(cg_st_file *f, int i, int *counts, int *no_grad)
{
    cg_tensor *cfg = get(f, i, "cfg"), *x0 = get(f, i, "x"), *r = get(f, i, "r");
    cg_tensor *want_y = get(f, i, "y"), *want_g = get(f, i, "gx");
    cg_tensor *x = i % 2 && x0 ? twin_transposed(x0) : cg_retain(x0);
    cg_requires_grad(x, true);
    const int64_t *c = cfg ? cg_data_i64(cfg) : NULL;
    const cg_interp o = c ? options(c) : (cg_interp){0};
    cg_tensor *y = c ? run(i, &o, x) : NULL;
    cg_tensor *p = y ? cg_mul(y, r) : NULL, *l = p ? cg_sum_all(p) : NULL;
    bool ok = l && cg_backward(l, NULL, false);
    ok = twin_within("value", y, want_y, TOL) && ok;
    if (want_g)
        ok = twin_within("gradient", ok ? cg_grad(x) : NULL, want_g, TOL) && ok;
    else
        ++*no_grad;
    if (c && c[0] >= 0 && c[0] < 5)
        counts[c[0]]++;
    if (!ok)
        printf("interp case %d (mode %lld, %lldd): FAIL %s\n", i, c ? (long long)c[0] : -1LL,
               c ? (long long)c[1] : -1LL, cg_last_error());
    cg_release_all(9, cfg, x0, r, want_y, want_g, x, y, p, l);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_interp DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/interp.safetensors", argv[1]);
    cg_st_file *f = cg_st_open(path);
    if (!f) {
        fprintf(stderr, "check_interp: %s\n", cg_last_error());
        return 1;
    }
    int counts[5] = {0}, n = 0, failed = 0, no_grad = 0;
    for (; cg_st_has(f, (snprintf(path, sizeof path, "%d.cfg", n), path)); n++)
        failed += !one_case(f, n, counts, &no_grad);
    cg_st_close(f);
    printf("interpolate: %d cases (nearest %d, nearest-exact %d, linear %d, bilinear %d, bicubic "
           "%d; %d without PyTorch's gradient), %d failed, worst relative error %.2e (tolerance "
           "%.0e)\n",
           n, counts[0], counts[1], counts[2], counts[3], counts[4], no_grad, failed, twin_worst,
           TOL);
    return failed || n < 40 ? 1 : 0;
}
