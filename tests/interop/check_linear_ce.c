/* The fused output projection and cross-entropy (cg_linear_cross_entropy)
 * against PyTorch's F.cross_entropy(h @ w.T + b, ..., reduction=) (written
 * by tests/interop/make_linear_ce.py; reduction none's backward from
 * (loss * gw).sum(), one upstream gradient a target):
 *     check_linear_ce FILE     exit 0: every case within its bound; 1: not
 * Each case runs with chunks of 3 rows and of all rows: in fp32 the loss and
 * the gradients of h, w and b match PyTorch's float32 (|a - b| <= 1e-6 +
 * 1e-4 |b|, elementwise) and cgrad's unfused cg_cross_entropy(cg_affine());
 * with bf16 products (when the CPU has them) they stay within 2% of the
 * largest float64 value of each tensor (bf16 keeps 8 significant bits).
 * The loss alone, cg_cross_entropy of PyTorch's float32 logits, in both of
 * its precision policies (fp32, and bf16 autocast's float lanes): its loss
 * and its logits' gradient within 1e-4 of PyTorch's float32 elementwise,
 * and within 1e-5 of the largest float64 value. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "core/gemm.h"

static int g_fail;

/* max |a - b| over the elements, relative to max |b| (rel) or checked
 * elementwise against atol + rtol |b| (rel false). */
static void compare(const char *what, const cg_tensor *a, const cg_tensor *b, bool rel, double tol)
{
    if (!a || !b || cg_numel(a) != cg_numel(b)) {
        printf("%-28s MISSING or wrong size (%s)\n", what, cg_has_error() ? cg_last_error() : "");
        g_fail = 1;
        return;
    }
    cg_tensor *ac = cg_k_contiguous(a), *bc = cg_k_contiguous(b);
    const float *x = cg_data(ac), *y = cg_data(bc);
    double worst = 0, big = 0;
    bool ok = true;
    for (int64_t i = 0; i < cg_numel(a); i++) {
        double e = fabs((double)x[i] - y[i]);
        worst = e > worst ? e : worst;
        big = fabs(y[i]) > big ? fabs(y[i]) : big;
        if (!rel && !(e <= 1e-6 + tol * fabs(y[i])))
            ok = false;
    }
    if (rel)
        ok = worst <= tol * big;
    printf("%-28s max error %.3g (%.3g of the largest)%s\n", what, worst, big > 0 ? worst / big : 0,
           ok ? "" : "  OUT OF BOUNDS");
    if (!ok)
        g_fail = 1;
    cg_release_all(2, ac, bc);
}

static cg_tensor *get(const cg_st_file *f, const char *c, const char *k)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", c, k);
    return cg_st_has(f, name) ? cg_st_get(f, name) : NULL;
}

/* The case's reduction (K.red) */
static cg_reduction reduction_of(const cg_st_file *f, const char *c)
{
    cg_tensor *red = get(f, c, "red");
    const cg_reduction r = (cg_reduction)cg_data_i64(red)[0];
    cg_release(red);
    return r;
}

/* The root the backward starts at: the loss, or reduction none's loss
 * times the case's upstream gradient (K.gw), summed */
static cg_tensor *root_of(const cg_st_file *f, const char *c, cg_tensor *loss)
{
    if (!loss || reduction_of(f, c) != CG_REDUCTION_NONE)
        return cg_retain(loss);
    cg_tensor *gw = get(f, c, "gw"), *lw = cg_mul(loss, gw), *s = lw ? cg_sum_all(lw) : NULL;
    cg_release_all(2, gw, lw);
    return s;
}

/* One case, fused with the given chunk, against `ref` ("32" or "64"). */
static void run_case(const cg_st_file *f, const char *c, int64_t chunk, const char *ref, bool rel,
                     double tol, const char *tag)
{
    cg_tensor *h = cg_requires_grad(get(f, c, "h"), true);
    cg_tensor *w = cg_requires_grad(get(f, c, "w"), true);
    cg_tensor *b = get(f, c, "b"), *t = get(f, c, "t"), *ls = get(f, c, "ls");
    cg_tensor *ig = get(f, c, "ignore");
    if (b)
        cg_requires_grad(b, true);
    cg_tensor *loss = cg_linear_cross_entropy(h, w, b, t, cg_data_i64(ig)[0], cg_data(ls)[0],
                                              reduction_of(f, c), chunk, 1.0f);
    cg_tensor *root = root_of(f, c, loss);
    if (!root || !cg_backward(root, NULL, false)) {
        printf("%s: %s\n", c, cg_last_error());
        g_fail = 1;
    } else {
        const char *names[4] = {"loss", "dh", "dw", "db"};
        const cg_tensor *got[4] = {loss, h->grad, w->grad, b ? b->grad : NULL};
        for (int k = 0; k < (b ? 4 : 3); k++) {
            char key[16], what[96];
            snprintf(key, sizeof key, "%s%s", names[k], ref);
            snprintf(what, sizeof what, "%s %s %s chunk %lld", c, tag, names[k], (long long)chunk);
            cg_tensor *want = get(f, c, key);
            compare(what, got[k], want, rel, tol);
            cg_release(want);
        }
    }
    cg_release_all(8, h, w, b, t, ls, ig, loss, root);
}

/* The fused op against the unfused cg_cross_entropy(cg_affine(h, w, b)). */
static void run_unfused(const cg_st_file *f, const char *c)
{
    cg_tensor *h = get(f, c, "h"), *w = get(f, c, "w"), *b = get(f, c, "b"), *t = get(f, c, "t");
    cg_tensor *ls = get(f, c, "ls"), *ig = get(f, c, "ignore");
    const cg_reduction r = reduction_of(f, c);
    cg_tensor *fused =
        cg_linear_cross_entropy(h, w, b, t, cg_data_i64(ig)[0], cg_data(ls)[0], r, 7, 1.0f);
    cg_tensor *logits = cg_affine(h, w, b);
    cg_tensor *plain = cg_cross_entropy(logits, t, cg_data_i64(ig)[0], cg_data(ls)[0], r);
    char what[96];
    snprintf(what, sizeof what, "%s fp32 loss vs unfused", c);
    compare(what, fused, plain, false, 1e-6);
    cg_release_all(9, h, w, b, t, ls, ig, fused, logits, plain);
}

/* cg_cross_entropy of the case's float32 logits in the thread's policy,
 * against PyTorch's on the same logits. */
static void run_loss(const cg_st_file *f, const char *c, const char *tag)
{
    cg_tensor *x = cg_requires_grad(get(f, c, "x"), true);
    cg_tensor *t = get(f, c, "t"), *ls = get(f, c, "ls"), *ig = get(f, c, "ignore");
    cg_tensor *t1 = cg_reshape(t, 1, (int64_t[]){cg_numel(t)});
    cg_tensor *loss =
        cg_cross_entropy(x, t1, cg_data_i64(ig)[0], cg_data(ls)[0], CG_REDUCTION_MEAN);
    if (!loss || !cg_backward(loss, NULL, false)) {
        printf("%s: %s\n", c, cg_last_error());
        g_fail = 1;
    } else {
        const char *names[2] = {"ce", "dx"};
        const cg_tensor *got[2] = {loss, x->grad};
        for (int k = 0; k < 2; k++)
            for (int bits = 32; bits <= 64; bits += 32) {
                char key[16], what[96];
                snprintf(key, sizeof key, "%s%d", names[k], bits);
                snprintf(what, sizeof what, "%s %s loss alone %s", c, tag, key);
                cg_tensor *want = get(f, c, key);
                compare(what, got[k], want, bits == 64, bits == 64 ? 1e-5 : 1e-4);
                cg_release(want);
            }
    }
    cg_release_all(6, x, t, ls, ig, t1, loss);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: check_linear_ce FILE\n");
        return 2;
    }
    cg_st_file *f = cg_st_open(argv[1]);
    if (!f) {
        fprintf(stderr, "check_linear_ce: %s\n", cg_last_error());
        return 1;
    }
    const char *cases[] = {"plain",       "smooth_ignored",     "nobias_3d",
                           "smooth_only", "sum_smooth_ignored", "sum_nobias",
                           "none_plain",  "none_nobias_3d",     "none_smooth_ignored"};
    cg_precision bf16;
    bool has_bf16 = cg_precision_parse("bf16", &bf16);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t chunks[] = {3, 1000, CG_LCE_EXACT};
        for (int k = 0; k < 3; k++) {
            int64_t chunk = chunks[k];
            run_case(f, cases[i], chunk, "32", false, 1e-4, "fp32");
            if (has_bf16) {
                cg_set_matmul_precision(CG_PRECISION_BF16);
                run_case(f, cases[i], chunk, "64", true, 2e-2, "bf16");
                cg_set_matmul_precision(CG_PRECISION_FP32);
            }
        }
        run_unfused(f, cases[i]);
        run_loss(f, cases[i], "fp32");
        cg_set_matmul_precision(CG_PRECISION_BF16); /* the loss's autocast policy */
        run_loss(f, cases[i], "bf16 autocast");
        cg_set_matmul_precision(CG_PRECISION_FP32);
    }
    if (!has_bf16)
        printf("bf16: not on this CPU (%s), fp32 only\n", cg_last_error());
    cg_st_close(f);
    printf("%s\n", g_fail ? "FAILED" : "all within bounds");
    return g_fail;
}
