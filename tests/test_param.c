/* torch.nn.utils.weight_norm and spectral_norm (nn/param.h):
 *   - the registry after attach and remove (PyTorch's names, shapes and
 *     order), the weight the forward reads against double;
 *   - gradchecks through the module's forward of the new parameters
 *     (weight norm: dims 0, 1, -1 on Linear and Conv2d; spectral norm in
 *     evaluation, and the power iteration's step against double);
 *   - the state dict saved under PyTorch's keys and loaded back;
 *   - refusals in one line, asserted by message.
 * PyTorch's values and gradients: tests/interop/param.py + check_param.c
 * (torch_param). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/param.h"
#include "tests/testutil.h"

/* m's state dict names joined by spaces, into buf */
static const char *names_of(const cg_module *m, char *buf, size_t n)
{
    cg_param_list l = {0};
    ck_assert(cg_module_state_dict(m, &l));
    buf[0] = 0;
    for (int i = 0; i < l.n; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? " " : "", l.items[i].name);
    cg_param_list_free(&l);
    return buf;
}

/* sum(module(x) * u) as a function of the module's tensors in[1..] (which
 * gradcheck perturbs in place) and x = in[0] */
typedef struct {
    cg_module *m;
} mod_ctx;

static cg_tensor *mod_fn(void *ctx, cg_tensor *const *in)
{
    return cg_module_forward(((mod_ctx *)ctx)->m, in[0]);
}

/* ------------------------------------------------------- weight norm */
/* g v / ||v|| in double, the norm over every dim but dim (-1: all) */
static void wn_ref(const double *v, const double *g, const int64_t *shape, int nd, int dim,
                   double *out)
{
    int64_t n = 1, inner = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    for (int d = dim + 1; dim >= 0 && d < nd; d++)
        inner *= shape[d];
    const int64_t S = dim >= 0 ? shape[dim] : 1;
    for (int64_t s = 0; s < S; s++) {
        double ss = 0;
        for (int64_t j = 0; j < n; j++)
            if (dim < 0 || (j / inner) % S == s)
                ss += v[j] * v[j];
        for (int64_t j = 0; j < n; j++)
            if (dim < 0 || (j / inner) % S == s)
                out[j] = g[s] * v[j] / sqrt(ss);
    }
}

START_TEST(test_weight_norm_linear)
{
    const int dims[3] = {0, 1, -1};
    const int64_t gshape[3][2] = {{3, 1}, {1, 4}, {0, 0}};
    for (int k = 0; k < 3; k++) {
        cg_rng r = cg_rng_new(20 + (uint64_t)k);
        cg_linear *l = cg_linear_new(4, 3, true, &r);
        cg_tensor *W0 = cg_clone(l->weight);
        ck_assert_msg(cg_weight_norm(&l->base, "weight", dims[k]), "%s", cg_last_error());
        char buf[256];
        ck_assert_str_eq(names_of(&l->base, buf, sizeof buf), "bias weight_g weight_v");
        cg_tensor *g = cg_module_get_param(&l->base, "weight_g"),
                  *v = cg_module_get_param(&l->base, "weight_v");
        ck_assert_int_eq(g->ndim, dims[k] < 0 ? 0 : 2);
        for (int d = 0; d < g->ndim; d++)
            ck_assert_int_eq(g->shape[d], gshape[k][d]);
        ck_assert(cg_same_shape(v, W0));
        /* the weight at attach is W again (g is its norm) */
        CG_ASSERT_TENSOR(l->weight, cg_data(W0), 1e-6, 1e-5);
        /* g changed: the forward reads g v / ||v|| */
        for (int64_t j = 0; j < cg_numel(g); j++)
            cg_data(g)[j] *= 1.5f + 0.25f * (float)j;
        cg_tensor_modified(g);
        cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4)), true);
        cg_tensor *y = cg_module_forward(&l->base, x);
        ck_assert_msg(y, "%s", cg_last_error());
        double *vd = cg_test_doubles(v), *gd = cg_test_doubles(g), want[12];
        wn_ref(vd, gd, v->shape, 2, dims[k], want);
        float wf[12];
        for (int j = 0; j < 12; j++)
            wf[j] = (float)want[j];
        CG_ASSERT_TENSOR(l->weight, wf, 1e-6, 1e-5);
        /* gradients reach g and v (and not the weight, a non-leaf) */
        cg_tensor *s = cg_sum_all(y);
        ck_assert(cg_backward(s, NULL, false));
        ck_assert(g->grad && v->grad && l->bias->grad);
        cg_module_zero_grad(&l->base);
        mod_ctx ctx = {&l->base};
        cg_tensor *in[4] = {x, g, v, l->bias};
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(mod_fn, &ctx, 4, in, NULL, &rep), "dim %d: %s", dims[k],
                      rep.message);
        /* remove: the weight folded back as a parameter, registered last */
        ck_assert_msg(cg_remove_weight_norm(&l->base, "weight"), "%s", cg_last_error());
        ck_assert_str_eq(names_of(&l->base, buf, sizeof buf), "bias weight");
        ck_assert(l->weight == cg_module_get_param(&l->base, "weight") && !l->weight->node);
        CG_ASSERT_TENSOR(l->weight, wf, 1e-6, 1e-5);
        cg_tensor *y2 = cg_module_forward(&l->base, x);
        CG_ASSERT_TENSOR(y2, cg_data(y), 1e-6, 1e-5);
        free(vd), free(gd);
        cg_release_all(5, W0, x, y, s, y2);
        cg_module_free(&l->base);
    }
}
END_TEST

/* Conv2d's weight [out, in, kh, kw] along dims 0 and 2 and whole, and a
 * second parameter (the bias) under weight norm beside the weight */
START_TEST(test_weight_norm_conv)
{
    const int dims[3] = {0, 2, -1};
    for (int k = 0; k < 3; k++) {
        cg_rng r = cg_rng_new(30 + (uint64_t)k);
        cg_conv_cfg cfg = CG_CONV_DEFAULT;
        cg_conv *c = cg_conv2d_new(2, 3, 2, 3, &cfg, true, &r);
        ck_assert(cg_weight_norm(&c->base, "weight", dims[k]));
        ck_assert(k != 1 || cg_weight_norm(&c->base, "bias", 0));
        cg_tensor *g = cg_module_get_param(&c->base, "weight_g");
        const int64_t want_g[3][4] = {{3, 1, 1, 1}, {1, 1, 2, 1}, {0}};
        ck_assert_int_eq(g->ndim, dims[k] < 0 ? 0 : 4);
        for (int d = 0; d < g->ndim; d++)
            ck_assert_int_eq(g->shape[d], want_g[k][d]);
        cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(1, 2, 3, 4)), true);
        mod_ctx ctx = {&c->base};
        cg_tensor *in[5] = {x, g, cg_module_get_param(&c->base, "weight_v"),
                            k == 1 ? cg_module_get_param(&c->base, "bias_g") : c->bias,
                            k == 1 ? cg_module_get_param(&c->base, "bias_v") : NULL};
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(mod_fn, &ctx, k == 1 ? 5 : 4, in, NULL, &rep), "dim %d: %s",
                      dims[k], rep.message);
        char buf[256];
        ck_assert_str_eq(names_of(&c->base, buf, sizeof buf),
                         k == 1 ? "weight_g weight_v bias_g bias_v" : "bias weight_g weight_v");
        cg_release(x);
        cg_module_free(&c->base);
    }
}
END_TEST

/* saved under PyTorch's keys; loaded by a module under weight norm */
START_TEST(test_weight_norm_state_dict)
{
    cg_rng r = cg_rng_new(40);
    cg_linear *a = cg_linear_new(5, 2, true, &r), *b = cg_linear_new(5, 2, true, &r);
    ck_assert(cg_weight_norm(&a->base, "weight", 0) && cg_weight_norm(&b->base, "weight", 0));
    char dir[256], path[300];
    cg_test_mkdtemp(dir, sizeof dir, "wn");
    snprintf(path, sizeof path, "%s/wn.safetensors", dir);
    ck_assert(cg_module_save(&a->base, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    ck_assert(f && cg_st_has(f, "weight_g") && cg_st_has(f, "weight_v") && !cg_st_has(f, "weight"));
    cg_st_close(f);
    ck_assert_msg(cg_module_load_file(&b->base, path), "%s", cg_last_error());
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 5));
    cg_tensor *ya = cg_module_forward(&a->base, x), *yb = cg_module_forward(&b->base, x);
    CG_ASSERT_TENSOR(yb, cg_data(ya), 0, 0);
    /* a plain Linear's file is refused by name */
    cg_linear *plain = cg_linear_new(5, 2, true, &r);
    ck_assert(cg_module_save(&plain->base, path, 0, NULL));
    CG_ASSERT_REFUSED(!cg_module_load_file(&b->base, path), "weight_g");
    cg_test_rm_tree(dir);
    cg_release_all(3, x, ya, yb);
    cg_module_free(&a->base), cg_module_free(&b->base), cg_module_free(&plain->base);
}
END_TEST

START_TEST(test_weight_norm_refusals)
{
    cg_rng r = cg_rng_new(41);
    cg_linear *l = cg_linear_new(4, 3, true, &r);
    CG_ASSERT_REFUSED(!cg_weight_norm(&l->base, "nope", 0),
                      "module Linear has no parameter 'nope'");
    CG_ASSERT_REFUSED(!cg_weight_norm(&l->base, "weight", 2), "dim 2 is outside [-1, 2)");
    CG_ASSERT_REFUSED(!cg_weight_norm(&l->base, "weight", -2), "dim -2 is outside");
    CG_ASSERT_REFUSED(!cg_remove_weight_norm(&l->base, "weight"),
                      "weight_norm of 'weight' not found in module Linear");
    CG_ASSERT_REFUSED(!cg_weight_norm(NULL, "weight", 0), "cg_weight_norm");
    char buf[256];
    ck_assert_str_eq(names_of(&l->base, buf, sizeof buf), "weight bias"); /* unchanged */
    ck_assert(cg_weight_norm(&l->base, "weight", 0));
    CG_ASSERT_REFUSED(!cg_weight_norm(&l->base, "weight", 0),
                      "cannot register two weight_norm hooks on parameter 'weight'");
    CG_ASSERT_REFUSED(!cg_weight_norm(&l->base, "weight_g", 0), "registered without its field");
    cg_module *m = cg_module_new("Mine");
    cg_tensor *t = cg_randn(&r, CG_SHAPE(2, 2));
    ck_assert(cg_module_add_param(m, "w", t));
    CG_ASSERT_REFUSED(!cg_weight_norm(m, "w", 0), "registered without its field");
    /* a name already taken: nothing changes */
    cg_linear *l2 = cg_linear_new(4, 3, true, &r);
    cg_tensor *z = cg_zeros(CG_SHAPE(1));
    ck_assert(cg_module_add_buffer(&l2->base, "weight_v", z, true));
    CG_ASSERT_REFUSED(!cg_weight_norm(&l2->base, "weight", 0), "'weight_v' is already a buffer");
    ck_assert_str_eq(names_of(&l2->base, buf, sizeof buf), "weight bias weight_v");
    cg_release_all(2, t, z);
    cg_module_free(m);
    cg_module_free(&l->base), cg_module_free(&l2->base);
}
END_TEST

/* ---------------------------------------------------- spectral norm */
/* W [h, w] (row-major doubles) times x, and its transpose */
static void mv(const double *W, int h, int w, const double *x, bool t, double *out)
{
    for (int i = 0; i < (t ? w : h); i++) {
        out[i] = 0;
        for (int j = 0; j < (t ? h : w); j++)
            out[i] += (t ? W[j * w + i] : W[i * w + j]) * x[j];
    }
}
static void normalize(double *x, int n, double eps)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i] * x[i];
    s = fmax(sqrt(s), eps);
    for (int i = 0; i < n; i++)
        x[i] /= s;
}

START_TEST(test_spectral_norm_linear)
{
    cg_rng r = cg_rng_new(50);
    cg_linear *l = cg_linear_new(5, 4, true, &r);
    ck_assert_msg(cg_spectral_norm(&l->base, "weight", 2, 1e-12f, CG_SPECTRAL_DIM_AUTO, &r), "%s",
                  cg_last_error());
    char buf[256];
    ck_assert_str_eq(names_of(&l->base, buf, sizeof buf), "bias weight_orig weight_u weight_v");
    cg_tensor *W = cg_module_get_param(&l->base, "weight_orig");
    cg_tensor *u = cg_module_get_buffer(&l->base, "weight_u"),
              *v = cg_module_get_buffer(&l->base, "weight_v");
    ck_assert(u->ndim == 1 && u->shape[0] == 4 && v->ndim == 1 && v->shape[0] == 5);
    ck_assert(!u->requires_grad && !v->requires_grad);
    double *ud = cg_test_doubles(u), *vd = cg_test_doubles(v), nu = 0, nv = 0;
    for (int i = 0; i < 4; i++)
        nu += ud[i] * ud[i];
    for (int i = 0; i < 5; i++)
        nv += vd[i] * vd[i];
    ck_assert(fabs(nu - 1) < 1e-6 && fabs(nv - 1) < 1e-6);
    /* training: two power iterations from u, then W / (u . W v) */
    double *Wd = cg_test_doubles(W), t[5];
    for (int it = 0; it < 2; it++) {
        mv(Wd, 4, 5, ud, true, vd);
        normalize(vd, 5, 1e-12);
        mv(Wd, 4, 5, vd, false, ud);
        normalize(ud, 4, 1e-12);
    }
    mv(Wd, 4, 5, vd, false, t);
    double sigma = 0;
    for (int i = 0; i < 4; i++)
        sigma += ud[i] * t[i];
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 5)), true);
    cg_tensor *y = cg_module_forward(&l->base, x);
    ck_assert_msg(y, "%s", cg_last_error());
    float fu[4], fv[5], fw[20];
    for (int i = 0; i < 4; i++)
        fu[i] = (float)ud[i];
    for (int i = 0; i < 5; i++)
        fv[i] = (float)vd[i];
    for (int i = 0; i < 20; i++)
        fw[i] = (float)(Wd[i] / sigma);
    CG_ASSERT_TENSOR(u, fu, 1e-6, 1e-5);
    CG_ASSERT_TENSOR(v, fv, 1e-6, 1e-5);
    CG_ASSERT_TENSOR(l->weight, fw, 1e-6, 1e-5);
    cg_tensor *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false) && W->grad && !u->grad);
    cg_module_zero_grad(&l->base);
    /* evaluation: u and v stay; the same weight */
    cg_module_train(&l->base, false);
    float *u0 = cg_test_values(u);
    cg_tensor *y2 = cg_module_forward(&l->base, x);
    CG_ASSERT_TENSOR(u, u0, 0, 0);
    CG_ASSERT_TENSOR(l->weight, fw, 1e-6, 1e-5);
    mod_ctx ctx = {&l->base};
    cg_tensor *in[3] = {x, W, l->bias};
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(mod_fn, &ctx, 3, in, NULL, &rep), "%s", rep.message);
    /* many training steps: sigma the largest singular value, weight's 1 */
    cg_module_train(&l->base, true);
    for (int i = 0; i < 100; i++)
        cg_release(cg_module_forward(&l->base, x));
    double *wn = cg_test_doubles(l->weight), a[5] = {1, 1, 1, 1, 1}, b[4];
    for (int i = 0; i < 300; i++) {
        mv(wn, 4, 5, a, false, b);
        mv(wn, 4, 5, b, true, a);
        normalize(a, 5, 0);
    }
    mv(wn, 4, 5, a, false, b);
    ck_assert_msg(fabs(sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2] + b[3] * b[3]) - 1) < 1e-4,
                  "largest singular value not 1");
    /* remove: W / sigma from the stored u, v, registered last */
    cg_module_train(&l->base, false);
    cg_tensor *y3 = cg_module_forward(&l->base, x);
    ck_assert(cg_remove_spectral_norm(&l->base, "weight"));
    ck_assert_str_eq(names_of(&l->base, buf, sizeof buf), "bias weight");
    cg_tensor *y4 = cg_module_forward(&l->base, x);
    CG_ASSERT_TENSOR(y4, cg_data(y3), 0, 0);
    free(ud), free(vd), free(Wd), free(u0), free(wn);
    cg_release_all(6, x, y, s, y2, y3, y4);
    cg_module_free(&l->base);
}
END_TEST

/* ConvTranspose2d's default dim is 1: u has the weight's dim 1 */
START_TEST(test_spectral_norm_conv)
{
    cg_rng r = cg_rng_new(51);
    cg_conv_cfg cfg = CG_CONV_DEFAULT;
    cg_conv *ct = cg_conv_transpose2d_new(2, 3, 2, 2, &cfg, true, &r);
    cg_conv *c = cg_conv2d_new(2, 3, 2, 2, &cfg, false, &r);
    ck_assert(cg_spectral_norm(&ct->base, "weight", 1, 1e-12f, CG_SPECTRAL_DIM_AUTO, NULL));
    ck_assert(cg_spectral_norm(&c->base, "weight", 3, 1e-12f, 1, NULL));
    ck_assert_int_eq(cg_module_get_buffer(&ct->base, "weight_u")->shape[0], 3);
    ck_assert_int_eq(cg_module_get_buffer(&ct->base, "weight_v")->shape[0], 8);
    ck_assert_int_eq(cg_module_get_buffer(&c->base, "weight_u")->shape[0], 2);
    ck_assert_int_eq(cg_module_get_buffer(&c->base, "weight_v")->shape[0], 12);
    cg_module_train(&ct->base, false);
    cg_module_train(&c->base, false);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(1, 2, 3, 3)), true);
    mod_ctx ctx = {&ct->base};
    cg_tensor *in[2] = {x, cg_module_get_param(&ct->base, "weight_orig")};
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(mod_fn, &ctx, 2, in, NULL, &rep), "%s", rep.message);
    ctx.m = &c->base;
    in[1] = cg_module_get_param(&c->base, "weight_orig");
    ck_assert_msg(cg_gradcheck(mod_fn, &ctx, 2, in, NULL, &rep), "%s", rep.message);
    cg_release(x);
    cg_module_free(&ct->base), cg_module_free(&c->base);
}
END_TEST

START_TEST(test_spectral_norm_state_dict)
{
    cg_rng r = cg_rng_new(52);
    cg_linear *a = cg_linear_new(3, 4, false, &r), *b = cg_linear_new(3, 4, false, &r);
    ck_assert(cg_spectral_norm(&a->base, "weight", 1, 1e-12f, 0, &r));
    ck_assert(cg_spectral_norm(&b->base, "weight", 1, 1e-12f, 0, &r));
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3));
    cg_release(cg_module_forward(&a->base, x)); /* u, v moved on */
    char dir[256], path[300];
    cg_test_mkdtemp(dir, sizeof dir, "sn");
    snprintf(path, sizeof path, "%s/sn.safetensors", dir);
    ck_assert(cg_module_save(&a->base, path, 0, NULL));
    ck_assert_msg(cg_module_load_file(&b->base, path), "%s", cg_last_error());
    CG_ASSERT_TENSOR(cg_module_get_buffer(&b->base, "weight_u"),
                     cg_data(cg_module_get_buffer(&a->base, "weight_u")), 0, 0);
    cg_module_train(&a->base, false), cg_module_train(&b->base, false);
    cg_tensor *ya = cg_module_forward(&a->base, x), *yb = cg_module_forward(&b->base, x);
    CG_ASSERT_TENSOR(yb, cg_data(ya), 0, 0);
    cg_test_rm_tree(dir);
    cg_release_all(3, x, ya, yb);
    cg_module_free(&a->base), cg_module_free(&b->base);
}
END_TEST

START_TEST(test_spectral_norm_refusals)
{
    cg_rng r = cg_rng_new(53);
    cg_linear *l = cg_linear_new(4, 3, true, &r);
    cg_module *m = &l->base;
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "nope", 1, 1e-12f, 0, NULL), "has no parameter 'nope'");
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "weight", 0, 1e-12f, 0, NULL),
                      "n_power_iterations must be positive");
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "weight", 1, -1.0f, 0, NULL), "eps must be finite");
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "weight", 1, NAN, 0, NULL), "eps must be finite");
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "weight", 1, 1e-12f, 2, NULL),
                      "dim must be within [0, the weight's ndim)");
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "weight", 1, 1e-12f, -1, NULL), "dim -1");
    CG_ASSERT_REFUSED(!cg_remove_spectral_norm(m, "weight"),
                      "spectral_norm of 'weight' not found in module Linear");
    char buf[256];
    ck_assert_str_eq(names_of(m, buf, sizeof buf), "weight bias");
    ck_assert(cg_spectral_norm(m, "weight", 1, 1e-12f, 0, NULL));
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "weight", 1, 1e-12f, 0, NULL),
                      "cannot register two spectral_norm hooks on parameter 'weight'");
    CG_ASSERT_REFUSED(!cg_weight_norm(m, "weight", 0), "has no parameter 'weight'");
    ck_assert(cg_spectral_norm(m, "bias", 1, 1e-12f, 0, NULL)); /* a 1-d one: [1, 3]... [3] */
    CG_ASSERT_REFUSED(!cg_spectral_norm(m, "bias", 1, 1e-12f, 0, NULL),
                      "cannot register two spectral_norm hooks on parameter 'bias'");
    ck_assert(cg_remove_spectral_norm(m, "weight") && cg_remove_spectral_norm(m, "bias"));
    ck_assert_str_eq(names_of(m, buf, sizeof buf), "weight bias");
    cg_module_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("param");
    TCase *tc = tcase_create("param");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_weight_norm_linear);
    tcase_add_test(tc, test_weight_norm_conv);
    tcase_add_test(tc, test_weight_norm_state_dict);
    tcase_add_test(tc, test_weight_norm_refusals);
    tcase_add_test(tc, test_spectral_norm_linear);
    tcase_add_test(tc, test_spectral_norm_conv);
    tcase_add_test(tc, test_spectral_norm_state_dict);
    tcase_add_test(tc, test_spectral_norm_refusals);
    suite_add_tcase(s, tc);
    return cg_test_run(&s, 1);
}
