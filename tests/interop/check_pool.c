/* Pooling and batch normalisation against PyTorch (the meson test
 * torch_pool): tests/interop/pool.py writes the cases, this runs them.
 * Every pooling case (1d, 2d, 3d, and the unpools of PyTorch's max pool
 * indices): the output, the max indices (exactly) and the gradient of
 * sum(y * r), from the input as PyTorch had it and (every second case)
 * from a view of it with transposed storage. Every
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

/* cfg c's op on x (uidx: an unpool's indices); *idx a max's indices */
static cg_tensor *pool(const int64_t *c, cg_tensor *x, cg_tensor *uidx, cg_tensor **idx)
{
    const int op = (int)c[0], nd = (int)c[1];
    const cg_pool o = {.kernel_size = {c[2], c[3], c[4]},
                       .stride = {c[5], c[6], c[7]},
                       .padding = {c[8], c[9], c[10]},
                       .dilation = {c[11], c[12], c[13]},
                       .ceil_mode = c[14],
                       .exclude_pad = !c[15],
                       .divisor_override = c[16]};
    const int64_t *out = c + 17;
    switch (op * 4 + nd) {
    case 1: return cg_max_pool1d_with_indices(x, o, idx);
    case 2: return cg_max_pool2d_with_indices(x, o, idx);
    case 3: return cg_max_pool3d_with_indices(x, o, idx);
    case 5: return cg_avg_pool1d(x, o);
    case 6: return cg_avg_pool2d(x, o);
    case 7: return cg_avg_pool3d(x, o);
    case 9: return cg_adaptive_max_pool1d(x, out[0], idx);
    case 10: return cg_adaptive_max_pool2d(x, out[0], out[1], idx);
    case 11: return cg_adaptive_max_pool3d(x, out[0], out[1], out[2], idx);
    case 13: return cg_adaptive_avg_pool1d(x, out[0]);
    case 14: return cg_adaptive_avg_pool2d(x, out[0], out[1]);
    case 15: return cg_adaptive_avg_pool3d(x, out[0], out[1], out[2]);
    case 17: return cg_max_unpool1d(x, uidx, o, out[0] ? out : NULL);
    case 18: return cg_max_unpool2d(x, uidx, o, out[0] ? out : NULL);
    case 19: return cg_max_unpool3d(x, uidx, o, out[0] ? out : NULL);
    default: return NULL;
    }
}

static bool pool_case(cg_st_file *f, int i, int *counts)
{
    cg_tensor *cfg = get(f, i, "cfg"), *x0 = get(f, i, "x"), *r = get(f, i, "r");
    cg_tensor *want_y = get(f, i, "y"), *want_g = get(f, i, "gx"), *want_i = get(f, i, "idx");
    cg_tensor *uidx = get(f, i, "uidx");
    cg_tensor *x = i % 2 && x0 && x0->ndim >= 2 ? twin_transposed(x0) : cg_retain(x0);
    cg_requires_grad(x, true);
    const int64_t *c = cfg ? cg_data_i64(cfg) : NULL;
    cg_tensor *idx = NULL, *y = c ? pool(c, x, uidx, &idx) : NULL;
    cg_tensor *p = y ? cg_mul(y, r) : NULL, *l = p ? cg_sum_all(p) : NULL;
    bool ok = l && cg_backward(l, NULL, false);
    ok = twin_within("value", y, want_y, TOL) && ok;
    ok = twin_within("gradient", ok ? cg_grad(x) : NULL, want_g, TOL) && ok;
    if (want_i && !twin_same_i64(idx, want_i)) {
        printf("  indices differ from PyTorch's\n");
        ok = false;
    }
    if (c && c[0] >= 0 && c[0] < 5 && c[1] >= 1 && c[1] <= 3)
        counts[c[0] * 3 + c[1] - 1]++;
    if (!ok)
        printf("pool case %d (op %lld, %lldd): FAIL %s\n", i, c ? (long long)c[0] : -1LL,
               c ? (long long)c[1] : -1LL, cg_last_error());
    cg_release_all(12, cfg, x0, r, want_y, want_g, want_i, uidx, x, idx, y, p, l);
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
    int counts[15] = {0}, n = 0, failed = 0; /* op * 3 + nd - 1 */
    for (; cg_st_has(f, (snprintf(path, sizeof path, "%d.cfg", n), path)); n++)
        failed += !pool_case(f, n, counts);
    cg_st_close(f);
    printf("pooling: %d cases (1d/2d/3d: max %d/%d/%d, avg %d/%d/%d, adaptive max %d/%d/%d, "
           "adaptive avg %d/%d/%d, max unpool %d/%d/%d), %d failed, worst relative error %.2e "
           "(tolerance %.0e)\n",
           n, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6],
           counts[7], counts[8], counts[9], counts[10], counts[11], counts[12], counts[13],
           counts[14], failed, twin_worst, TOL);
    twin_worst = 0;
    const char *bns[] = {"bn1d", "bn1d_2d", "bn2d", "bn2d_plain", "bn1d_notrack"};
    for (int i = 0; i < 5; i++)
        failed += !bn_case(argv[1], bns[i]);
    printf("batch norm: worst relative error %.2e (tolerance 1e-05)\n", twin_worst);
    int few = 0; /* every op of every nd has cases */
    for (int k = 0; k < 15; k++)
        few += counts[k] < 5;
    return failed || few || n < 200 ? 1 : 0;
}
