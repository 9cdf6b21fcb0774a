/* cgrad's F.ctc_loss (autograd/ops.h cg_ctc_loss) against PyTorch 1.13's
 * (tests/interop/ctc.py writes the cases):
 *     check_ctc DIR     exit 0: every case within tolerance; 1: not
 * Each case's blank, reduction and zero_infinity are read from its file
 * ("cfg"); the loss and the gradient of log_probs of sum(y * r) must be
 * PyTorch's float32 values: an inf or NaN where PyTorch has one, and
 * finite values within TOL of them (max |a - b| / max(1, max |b|)). It
 * counts the cases whose every value has PyTorch's bits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

#define TOL 1e-6

static int exact_cases;

/* got against want: the non-finite values where want has them (inf of
 * its sign, NaN), the finite within TOL (the worst kept); *exact: every
 * value has want's bits */
static bool close_to(const char *what, const cg_tensor *got, const cg_tensor *want, bool *exact)
{
    if (!got || !want || cg_numel(got) != cg_numel(want)) {
        printf("  %s: missing or of another size (%s)\n", what, cg_last_error());
        return false;
    }
    const float *a = cg_data(got), *b = cg_data(want);
    double d = 0.0, m = 1.0;
    for (int64_t i = 0; i < cg_numel(want); i++) {
        *exact = *exact && memcmp(&a[i], &b[i], sizeof *a) == 0;
        if (!isfinite(b[i]) || !isfinite(a[i])) {
            if (!(isnan(a[i]) && isnan(b[i])) && a[i] != b[i]) {
                printf("  %s[%lld]: %g, PyTorch's %g\n", what, (long long)i, (double)a[i],
                       (double)b[i]);
                return false;
            }
            continue;
        }
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    twin_worst = fmax(twin_worst, d / m);
    if (!(d / m <= TOL))
        printf("  %s: error %.2e over %.0e\n", what, d / m, TOL);
    return d / m <= TOL;
}

static bool run_case(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    cg_st_file *f = cg_st_open(path);
    cg_tensor *cfg = f ? cg_st_get(f, "cfg") : NULL;
    if (!cfg || cfg->dtype != CG_I64 || cg_numel(cfg) != 3) {
        fprintf(stderr, "check_ctc: %s: no config (%s)\n", name, cg_last_error());
        cg_release(cfg);
        cg_st_close(f);
        return false;
    }
    const int64_t *q = cg_data_i64(cfg);
    cg_tensor *lp = cg_requires_grad(cg_st_get(f, "lp"), true);
    cg_tensor *tg = cg_st_get(f, "targets"), *il = cg_st_get(f, "il"), *tl = cg_st_get(f, "tl");
    cg_tensor *r = cg_st_get(f, "r"), *wy = cg_st_get(f, "y"), *wg = cg_st_get(f, "grad.lp");
    cg_tensor *y = cg_ctc_loss(lp, tg, il, tl, q[0], (cg_reduction)q[1], q[2] != 0);
    cg_tensor *p = y ? cg_mul(y, r) : NULL, *s = p ? cg_sum_all(p) : NULL;
    bool ok = s && cg_backward(s, NULL, false), exact = true;
    ok = close_to("loss", y, wy, &exact) && ok;
    ok = close_to("grad log_probs", ok ? lp->grad : NULL, wg, &exact) && ok;
    exact_cases += ok && exact;
    printf("%s: %s%s\n", name, ok ? "ok" : cg_last_error(), ok && exact ? " (PyTorch's bits)" : "");
    cg_release_all(11, cfg, lp, tg, il, tl, r, wy, wg, y, p, s);
    cg_st_close(f);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: check_ctc DIR\n"), 2;
    int bad = 0;
    const int n = twin_each_case(argv[1], "cases.txt", &bad, run_case);
    printf("check_ctc: %d cases, %d failed, %d with PyTorch's bits; worst %.1e (tolerance %.0e)\n",
           n, bad, exact_cases, twin_worst, TOL);
    return bad || n <= 0 ? 1 : 0;
}
