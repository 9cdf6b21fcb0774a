/* Gradients of gradients (cg_autograd_grad with create_graph) against
 * PyTorch 1.13's (tests/interop/grad2.py writes the cases and says what
 * each computes):
 *     check_grad2 DIR     exit 0: every case within TOL; 1: not
 * Each case is computed here from the same inputs with cgrad's ops, and
 * every result compared (max |a - b| / max(1, max |b|)). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/twin.h"

#define TOL 2e-5

static cg_st_file *g_f;
static bool g_ok;

static cg_tensor *get(const char *name)
{
    cg_tensor *t = cg_st_get(g_f, name);
    if (!t)
        printf("  no %s: %s\n", name, cg_last_error());
    return t;
}
static cg_tensor *param(const char *name) { return cg_requires_grad(get(name), true); }
static void check(const char *what, const cg_tensor *got, const char *want_name)
{
    cg_tensor *want = get(want_name);
    g_ok = twin_within(what, got, want, TOL) && g_ok;
    cg_release(want);
}
static const cg_grad_opts CREATE = {.create_graph = true};

/* sum over k of sum(a[k] * b[k]) */
static cg_tensor *dots(int n, cg_tensor *const *a, cg_tensor *const *b)
{
    cg_tensor *acc = NULL;
    for (int k = 0; k < n; k++) {
        cg_tensor *p = cg_mul(a[k], b[k]), *s = cg_sum_all(p);
        cg_tensor *t = acc ? cg_add(acc, s) : cg_retain(s);
        cg_release_all(3, p, s, acc);
        acc = t;
    }
    return acc;
}

static void hvp_mlp(void)
{
    const char *names[3] = {"w1", "b1", "w2"};
    cg_tensor *x = get("x"), *cw = get("cw"), *t = get("t"), *p[3], *v[3], *g[3], *hv[3];
    for (int k = 0; k < 3; k++) {
        char vn[16];
        p[k] = param(names[k]);
        snprintf(vn, sizeof vn, "v.%s", names[k]);
        v[k] = get(vn);
    }
    cg_tensor *h = cg_affine(x, p[0], p[1]), *a = cg_tanh(h), *o = cg_affine(a, p[2], NULL);
    cg_tensor *l = cg_cross_entropy_weighted(o, t, cw, -100, 0.1f, CG_REDUCTION_MEAN);
    g_ok = cg_autograd_grad(1, &l, NULL, 3, p, &CREATE, g);
    cg_tensor *gv = g_ok ? dots(3, g, v) : NULL;
    g_ok = gv && cg_autograd_grad(1, &gv, NULL, 3, p, NULL, hv);
    for (int k = 0; g_ok && k < 3; k++) {
        char w[16], what[32];
        snprintf(w, sizeof w, "g.%s", names[k]);
        check(w, g[k], w);
        snprintf(w, sizeof w, "hv.%s", names[k]);
        snprintf(what, sizeof what, "H v, %s", names[k]);
        check(what, hv[k], w);
        cg_release_all(2, g[k], hv[k]);
    }
    for (int k = 0; k < 3; k++)
        cg_release_all(2, p[k], v[k]);
    cg_release_all(9, x, cw, t, h, a, o, l, gv, NULL);
}

static void penalty(void)
{
    cg_tensor *x = cg_requires_grad(get("x"), true),
              *p[3] = {param("w1"), param("b1"), param("w2")};
    cg_tensor *h = cg_affine(x, p[0], p[1]), *a = cg_leaky_relu(h, 0.2f);
    cg_tensor *d = cg_affine(a, p[2], NULL), *s = cg_sum_all(d), *gx = NULL, *gr[3] = {0};
    g_ok = cg_autograd_grad(1, &s, NULL, 1, &x, &CREATE, &gx);
    cg_tensor *sq = g_ok ? cg_mul(gx, gx) : NULL,
              *n2 = sq ? cg_sum(sq, 1, (const int[]){1}, false) : NULL;
    cg_tensor *nrm = n2 ? cg_sqrt(n2) : NULL, *m1 = nrm ? cg_adds(nrm, -1.0f) : NULL;
    cg_tensor *p2 = m1 ? cg_mul(m1, m1) : NULL, *gp = p2 ? cg_mean_all(p2) : NULL;
    g_ok = gp && cg_autograd_grad(1, &gp, NULL, 3, p, &(cg_grad_opts){.allow_unused = true}, gr);
    if (g_ok) {
        check("penalty", gp, "gp");
        check("grad w1", gr[0], "grad.w1");
        /* b1 moves only where leaky_relu bends: PyTorch's gradient is 0
         * (here: none reaches it, NULL with allow_unused, or zeros) */
        cg_tensor *z = gr[1] ? cg_retain(gr[1]) : cg_zeros_like(p[1]);
        check("grad b1", z, "grad.b1");
        check("grad w2", gr[2], "grad.w2");
        cg_release(z);
    }
    cg_release_all(12, x, h, a, d, s, gx, sq, n2, nrm, m1, p2, gp);
    for (int k = 0; k < 3; k++)
        cg_release_all(2, p[k], gr[k]);
}

static void pinn(void)
{
    cg_tensor *x = cg_requires_grad(get("x"), true);
    cg_tensor *p[4] = {param("w1"), param("b1"), param("w2"), param("b2")}, *gr[4] = {0};
    cg_tensor *h = cg_affine(x, p[0], p[1]), *a = cg_tanh(h), *u = cg_affine(a, p[2], p[3]);
    cg_tensor *su = cg_sum_all(u), *ux = NULL, *sux = NULL, *uxx = NULL;
    g_ok = cg_autograd_grad(1, &su, NULL, 1, &x, &CREATE, &ux);
    sux = g_ok ? cg_sum_all(ux) : NULL;
    g_ok = sux && cg_autograd_grad(1, &sux, NULL, 1, &x, &CREATE, &uxx);
    cg_tensor *sn = g_ok ? cg_sin(x) : NULL, *r = sn ? cg_add(uxx, sn) : NULL;
    cg_tensor *r2 = r ? cg_mul(r, r) : NULL, *l = r2 ? cg_mean_all(r2) : NULL;
    g_ok = l && cg_autograd_grad(1, &l, NULL, 4, p, &(cg_grad_opts){.allow_unused = true}, gr);
    if (g_ok) {
        check("u''", uxx, "uxx");
        check("loss", l, "loss");
        check("grad w1", gr[0], "grad.w1");
        check("grad b1", gr[1], "grad.b1");
        check("grad w2", gr[2], "grad.w2");
        if (gr[3]) /* u'' does not depend on b2: PyTorch's is None too */
            printf("  grad b2: expected none\n"), g_ok = false;
    }
    cg_release_all(12, x, h, a, u, su, ux, sux, uxx, sn, r, r2, l);
    for (int k = 0; k < 4; k++)
        cg_release_all(2, p[k], gr[k]);
}

static cg_tensor *maml_net(cg_tensor *w1, cg_tensor *w2, cg_tensor *x)
{
    cg_tensor *h = cg_affine(x, w1, NULL), *a = cg_relu(h), *o = cg_affine(a, w2, NULL);
    cg_release_all(2, h, a);
    return o;
}
static void maml(void)
{
    cg_tensor *xa = get("xa"), *ya = get("ya"), *xb = get("xb"), *yb = get("yb");
    cg_tensor *w[2] = {param("w1"), param("w2")}, *ga[2] = {0}, *gs[2] = {0}, *wn[2] = {0};
    cg_tensor *oa = maml_net(w[0], w[1], xa), *la = cg_mse_loss(oa, ya, CG_REDUCTION_MEAN);
    g_ok = cg_autograd_grad(1, &la, NULL, 2, w, &CREATE, ga);
    for (int k = 0; g_ok && k < 2; k++) { /* w - 0.1 g, differentiable in w through g */
        cg_tensor *s = cg_muls(ga[k], -0.1f);
        wn[k] = cg_add(w[k], s);
        cg_release(s);
    }
    cg_tensor *ob = g_ok ? maml_net(wn[0], wn[1], xb) : NULL;
    cg_tensor *lb = ob ? cg_mse_loss(ob, yb, CG_REDUCTION_MEAN) : NULL;
    g_ok = lb && cg_autograd_grad(1, &lb, NULL, 2, w, NULL, gs);
    if (g_ok) {
        check("outer loss", lb, "loss");
        check("grad w1", gs[0], "grad.w1");
        check("grad w2", gs[1], "grad.w2");
    }
    cg_release_all(8, xa, ya, xb, yb, oa, la, ob, lb);
    for (int k = 0; k < 2; k++)
        cg_release_all(4, w[k], ga[k], gs[k], wn[k]);
}

static void attention(void)
{
    cg_tensor *p[3] = {param("q"), param("k"), param("v")}, *r = get("r");
    cg_tensor *v[3] = {get("vq"), get("vk"), get("vv")}, *g[3] = {0}, *hv[3] = {0};
    cg_tensor *y = cg_attention(p[0], p[1], p[2], true, NULL, NULL);
    cg_tensor *yr = y ? cg_mul(y, r) : NULL, *l = yr ? cg_sum_all(yr) : NULL;
    g_ok = l && cg_autograd_grad(1, &l, NULL, 3, p, &CREATE, g);
    cg_tensor *gv = g_ok ? dots(3, g, v) : NULL;
    g_ok = gv && cg_autograd_grad(1, &gv, NULL, 3, p, NULL, hv);
    if (g_ok) {
        check("y", y, "y");
        check("H v, q", hv[0], "hv.q");
        check("H v, k", hv[1], "hv.k");
        check("H v, v", hv[2], "hv.v");
    }
    cg_release_all(5, r, y, yr, l, gv);
    for (int k = 0; k < 3; k++)
        cg_release_all(4, p[k], v[k], g[k], hv[k]);
}

static void block(void)
{
    cg_tensor *x = cg_requires_grad(get("x"), true);
    cg_tensor *p[4] = {param("lw"), param("lb"), param("w"), param("b")}, *gr[4] = {0}, *gx = NULL;
    cg_tensor *ln = cg_layer_norm(x, p[0], p[1], 1e-5f), *h = cg_gelu_erf(ln);
    cg_tensor *o = cg_affine(h, p[2], p[3]), *y = cg_log_softmax(o, -1);
    cg_tensor *c = cg_select(y, 1, 0), *s = cg_sum_all(c);
    g_ok = cg_autograd_grad(1, &s, NULL, 1, &x, &CREATE, &gx);
    cg_tensor *sq = g_ok ? cg_mul(gx, gx) : NULL, *n = sq ? cg_sum_all(sq) : NULL;
    g_ok = n && cg_autograd_grad(1, &n, NULL, 4, p, NULL, gr);
    if (g_ok) {
        check("|dx|^2", n, "n");
        check("grad lw", gr[0], "grad.lw");
        check("grad lb", gr[1], "grad.lb");
        check("grad w", gr[2], "grad.w");
        check("grad b", gr[3], "grad.b");
    }
    cg_release_all(10, x, ln, h, o, y, c, s, gx, sq, n);
    for (int k = 0; k < 4; k++)
        cg_release_all(2, p[k], gr[k]);
}

static void conv_gp(void)
{
    cg_tensor *x = cg_requires_grad(get("x"), true), *gx = NULL;
    cg_tensor *p[4] = {param("c1"), param("b1"), param("c2"), param("w")}, *gr[4] = {0};
    cg_conv_cfg c1 = CG_CONV_DEFAULT, c2 = CG_CONV_DEFAULT;
    c1.stride[0] = c1.stride[1] = 2, c1.padding[0] = c1.padding[1] = 1;
    c2.padding[0] = c2.padding[1] = 1, c2.groups = 2;
    cg_tensor *h1 = cg_conv2d(x, p[0], p[1], &c1), *a1 = cg_leaky_relu(h1, 0.2f);
    cg_tensor *h2 = cg_conv2d(a1, p[2], NULL, &c2), *a2 = cg_tanh(h2);
    cg_tensor *m = cg_max_pool2d(a2, (cg_pool){.kernel_size = {2, 2}});
    cg_tensor *f = cg_flatten(m, 1, -1), *o = cg_affine(f, p[3], NULL), *s = cg_sum_all(o);
    g_ok = cg_autograd_grad(1, &s, NULL, 1, &x, &CREATE, &gx);
    cg_tensor *gf = g_ok ? cg_flatten(gx, 1, -1) : NULL, *sq = gf ? cg_mul(gf, gf) : NULL;
    cg_tensor *n2 = sq ? cg_sum(sq, 1, (const int[]){1}, false) : NULL;
    cg_tensor *nrm = n2 ? cg_sqrt(n2) : NULL, *m1 = nrm ? cg_adds(nrm, -1.0f) : NULL;
    cg_tensor *p2 = m1 ? cg_mul(m1, m1) : NULL, *gp = p2 ? cg_mean_all(p2) : NULL;
    g_ok = gp && cg_autograd_grad(1, &gp, NULL, 4, p, NULL, gr);
    if (g_ok) {
        check("penalty", gp, "gp");
        check("grad c1", gr[0], "grad.c1");
        check("grad b1", gr[1], "grad.b1");
        check("grad c2", gr[2], "grad.c2");
        check("grad w", gr[3], "grad.w");
    }
    cg_release_all(11, x, h1, a1, h2, a2, m, f, o, s, gx, gf);
    cg_release_all(6, sq, n2, nrm, m1, p2, gp);
    for (int k = 0; k < 4; k++)
        cg_release_all(2, p[k], gr[k]);
}

static const struct {
    const char *name;
    void (*run)(void);
} CASES[] = {{"hvp_mlp", hvp_mlp},     {"penalty", penalty}, {"pinn", pinn},      {"maml", maml},
             {"attention", attention}, {"block", block},     {"conv_gp", conv_gp}};

static bool run_case(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    if (!(g_f = cg_st_open(path))) {
        printf("%s: %s\n", name, cg_last_error());
        return false;
    }
    g_ok = false;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (!strcmp(CASES[i].name, name)) {
            g_ok = true;
            CASES[i].run();
        }
    printf("%s: %s\n", name, g_ok ? "ok" : cg_last_error());
    cg_st_close(g_f);
    return g_ok;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: check_grad2 DIR\n"), 2;
    int bad = 0;
    const int n = twin_each_case(argv[1], "cases.txt", &bad, run_case);
    printf("check_grad2: %d cases, %d failed; worst %.1e (tolerance %.0e)\n", n, bad, twin_worst,
           TOL);
    return bad || n <= 0 ? 1 : 0;
}
