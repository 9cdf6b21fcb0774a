/* Pooling and batch normalisation against PyTorch (the meson test
 * torch_pool): tests/interop/pool.py writes the cases, this runs them.
 * Every pooling case: the output, the max indices (exactly) and the
 * gradient of sum(y * r), from the input as PyTorch had it and (every
 * second case) from a view of it with transposed storage. Every
 * BatchNorm1d/2d case: PyTorch's state dict loaded by name, three
 * training steps (outputs, gradients of x, weight and bias), one eval
 * step, and the buffers after them (num_batches_tracked exactly). Prints
 * each case's worst relative error (rel_diff.h) against its tolerance.
 *   check_pool DIR */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

#define TOL 2e-6

/* case i's tensor what, or NULL */
static cg_tensor *get(cg_st_file *f, int i, const char *what)
{
    return twin_get(f, "%d.%s", i, what);
}

static cg_tensor *pool(const int64_t *c, cg_tensor *x, cg_tensor **idx)
{
    const int op = (int)c[0], nd = (int)c[1];
    const cg_pool o = {.kernel_size = {c[2], c[3]},
                       .stride = {c[4], c[5]},
                       .padding = {c[6], c[7]},
                       .dilation = {c[8], c[9]},
                       .ceil_mode = c[10],
                       .exclude_pad = !c[11],
                       .divisor_override = c[12]};
    switch (op) {
    case 0:
        return nd == 1 ? cg_max_pool1d_with_indices(x, o, idx)
                       : cg_max_pool2d_with_indices(x, o, idx);
    case 1: return nd == 1 ? cg_avg_pool1d(x, o) : cg_avg_pool2d(x, o);
    case 2:
        return nd == 1 ? cg_adaptive_max_pool1d(x, c[13], idx)
                       : cg_adaptive_max_pool2d(x, c[13], c[14], idx);
    default:
        return nd == 1 ? cg_adaptive_avg_pool1d(x, c[13]) : cg_adaptive_avg_pool2d(x, c[13], c[14]);
    }
}

static bool pool_case(cg_st_file *f, int i, int *counts)
{
    cg_tensor *cfg = get(f, i, "cfg"), *x0 = get(f, i, "x"), *r = get(f, i, "r");
    cg_tensor *want_y = get(f, i, "y"), *want_g = get(f, i, "gx"), *want_i = get(f, i, "idx");
    cg_tensor *x = i % 2 && x0 && x0->ndim >= 2 ? twin_transposed(x0) : cg_retain(x0);
    cg_requires_grad(x, true);
    const int64_t *c = cfg ? cg_data_i64(cfg) : NULL;
    cg_tensor *idx = NULL, *y = c ? pool(c, x, &idx) : NULL;
    cg_tensor *p = y ? cg_mul(y, r) : NULL, *l = p ? cg_sum_all(p) : NULL;
    bool ok = l && cg_backward(l, NULL, false);
    ok = twin_within("value", y, want_y, TOL) && ok;
    ok = twin_within("gradient", ok ? cg_grad(x) : NULL, want_g, TOL) && ok;
    if (want_i && !twin_same_i64(idx, want_i)) {
        printf("  indices differ from PyTorch's\n");
        ok = false;
    }
    if (c)
        counts[c[0]]++;
    if (!ok)
        printf("pool case %d (op %lld, %lldd): FAIL %s\n", i, c ? (long long)c[0] : -1LL,
               c ? (long long)c[1] : -1LL, cg_last_error());
    cg_release_all(11, cfg, x0, r, want_y, want_g, want_i, x, idx, y, p, l);
    return ok;
}

/* ------------------------------------------------------- batch norm */
static bool bn_case(const char *dir, const char *name)
{
    char path[4096], io_path[4096];
    snprintf(path, sizeof path, "%s/bn_%s.safetensors", dir, name);
    snprintf(io_path, sizeof io_path, "%s/bn_%s.io.safetensors", dir, name);
    cg_st_file *io = cg_st_open(io_path);
    cg_tensor *cfg = io ? cg_st_get(io, "cfg") : NULL;
    const int64_t *c = cfg ? cg_data_i64(cfg) : NULL;
    cg_batchnorm_opts o = cg_batchnorm_opts_default();
    cg_batchnorm *bn = NULL;
    if (c) {
        o.affine = c[2];
        o.track_running_stats = c[3];
        o.cumulative_average = c[4] < 0;
        o.momentum = c[4] < 0 ? 0.0f : (float)c[4] / 1000.0f;
        bn = c[0] == 1 ? cg_batchnorm1d_new(c[1], &o) : cg_batchnorm2d_new(c[1], &o);
    }
    bool ok = bn && cg_module_load_file(CG_MODULE(bn), path);
    for (int step = 0; ok && step < 3; step++)
        ok = twin_module_step(CG_MODULE(bn), bn->weight, bn->bias, io, step, 1e-5);
    ok = ok && twin_module_eval(CG_MODULE(bn), io, 1e-5);
    printf("batch norm %s: %s %s\n", name, ok ? "ok" : "FAIL", ok ? "" : cg_last_error());
    cg_release(cfg);
    cg_st_close(io);
    cg_module_free(CG_MODULE(bn));
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_pool DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/pools.safetensors", argv[1]);
    cg_st_file *f = cg_st_open(path);
    if (!f) {
        fprintf(stderr, "check_pool: %s\n", cg_last_error());
        return 1;
    }
    int counts[4] = {0}, n = 0, failed = 0;
    for (; cg_st_has(f, (snprintf(path, sizeof path, "%d.cfg", n), path)); n++)
        failed += !pool_case(f, n, counts);
    cg_st_close(f);
    printf("pooling: %d cases (max %d, avg %d, adaptive max %d, adaptive avg %d), %d failed, "
           "worst relative error %.2e (tolerance %.0e)\n",
           n, counts[0], counts[1], counts[2], counts[3], failed, twin_worst, TOL);
    twin_worst = 0;
    const char *bns[] = {"bn1d", "bn1d_2d", "bn2d", "bn2d_plain", "bn1d_notrack"};
    for (int i = 0; i < 5; i++)
        failed += !bn_case(argv[1], bns[i]);
    printf("batch norm: worst relative error %.2e (tolerance 1e-05)\n", twin_worst);
    return failed || n < 100 ? 1 : 0;
}
