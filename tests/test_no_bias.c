/* Check suite "no_bias": PyTorch's bias=False in the transformer layers
 * (cg_tf_config.no_bias, nn/transformer.h; nanoGPT's bias = False).
 *
 * A layer made without biases draws the same weights as one with them, and
 * computes what that one computes with every bias zero: its output and the
 * gradients of its input and weights equal, value for value, those of the
 * biased layer whose biases are zero, in fp32 and in bf16 (every fused
 * product path: the bias-free write-outs, the residual's, the activation's,
 * the norms'), in train mode with dropout, pre- and post-norm, LayerNorm
 * and RMSNorm, for the encoder and decoder layers, the LM block and the
 * stacks. The gradchecks of the bias-less layers are test_nn's
 * (test_grad_enc_layer, test_grad_dec_layer, test_grad_block_and_stacks).
 * The meson file runs it again on the emulated kernels. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/gemm.h"
#include "nn/transformer.h"
#include "tests/testutil.h"

enum { ENC, DEC, BLOCK, ENC_STACK, DEC_STACK, N_KINDS };

static cg_module *make(int kind, const cg_tf_config *c)
{
    switch (kind) {
    case ENC: return CG_MODULE(cg_enc_layer_new(c, NULL));
    case DEC: return CG_MODULE(cg_dec_layer_new(c, NULL));
    case BLOCK: return CG_MODULE(cg_lm_block_new(c, NULL));
    case ENC_STACK: return CG_MODULE(cg_enc_stack_new(2, c, NULL));
    default: return CG_MODULE(cg_dec_stack_new(2, c, NULL));
    }
}

static cg_tensor *run(int kind, cg_module *m, cg_tensor *x, cg_tensor *mem)
{
    const cg_attn_mask causal = {.causal = true}, none = {0};
    switch (kind) {
    case ENC: return cg_enc_layer_forward((cg_enc_layer *)m, x, &none);
    case DEC: return cg_dec_layer_forward((cg_dec_layer *)m, x, mem, &causal, &none);
    case BLOCK: return cg_lm_block_forward((cg_lm_block *)m, x, &causal);
    case ENC_STACK: return cg_enc_stack_forward((cg_enc_stack *)m, x, &none);
    default: return cg_dec_stack_forward((cg_dec_stack *)m, x, mem, &causal, &none);
    }
}

/* One pass of m (dropout drawn from a generator seeded 7): its output and
 * the gradients of x, mem and the parameters named in names (NULL: m's
 * own), copied; the caller frees them. */
typedef struct {
    float *out, *gx, *gm;
    float **gp;
    int64_t n_out;
} pass;

static pass one_pass(int kind, cg_module *m, cg_rng *rng, const cg_tensor *x0, const cg_tensor *m0,
                     const cg_param_list *names)
{
    *rng = cg_rng_new(7);
    cg_tensor *x = cg_clone(x0), *mem = cg_clone(m0);
    cg_requires_grad(x, true);
    cg_requires_grad(mem, true);
    cg_tensor *y = run(kind, m, x, mem);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_rng gr = cg_rng_new(11);
    cg_tensor *g = cg_randn(&gr, y->ndim, y->shape);
    ck_assert(cg_backward(y, g, false));
    pass p = {.n_out = cg_numel(y)};
    p.out = cg_test_values(y);
    p.gx = cg_test_values(cg_grad(x));
    p.gm = kind == DEC || kind == DEC_STACK ? cg_test_values(cg_grad(mem)) : NULL;
    p.gp = calloc((size_t)names->n, sizeof *p.gp);
    for (int i = 0; i < names->n; i++) {
        cg_tensor *t = cg_module_get_param(m, names->items[i].name);
        ck_assert_msg(t && cg_grad(t), "%s", names->items[i].name);
        p.gp[i] = cg_test_values(cg_grad(t));
    }
    cg_release_all(4, x, mem, y, g);
    return p;
}

static void pass_free(pass *p, int n)
{
    free(p->out);
    free(p->gx);
    free(p->gm);
    for (int i = 0; i < n; i++)
        free(p->gp[i]);
    free(p->gp);
}

static void assert_equal(const float *a, const float *b, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "%s[%lld]: %.9g with zero biases, %.9g without", what,
                      (long long)i, a[i], b[i]);
}

/* kind at width d in precision prec: bias=False against zero biases. */
static void check_case(int kind, int64_t d, bool norm_first, cg_norm_kind norm, cg_precision prec)
{
    cg_rng drop[2];
    cg_tf_config c = {.d = d,
                      .H = 2,
                      .d_ff = 2 * d,
                      .norm = norm,
                      .act = CG_ACT_GELU,
                      .norm_first = norm_first,
                      .dropout = 0.1f};
    cg_module *m[2];
    for (int nb = 0; nb < 2; nb++) {
        c.no_bias = nb;
        c.dropout_rng = &drop[nb];
        m[nb] = make(kind, &c);
        ck_assert_msg(m[nb], "%s", cg_last_error());
        cg_module_train(m[nb], true);
    }
    cg_param_list with = {0}, without = {0};
    ck_assert(cg_module_params(m[0], &with) && cg_module_params(m[1], &without));
    ck_assert_int_lt(without.n, with.n);
    for (int i = 0; i < with.n; i++) /* the biases are zero: those made, as drawn */
        if (strstr(with.items[i].name, "bias"))
            ck_assert(!cg_module_get_param(m[1], with.items[i].name));
    for (int i = 0; i < without.n; i++) { /* the same weights */
        cg_tensor *a = cg_module_get_param(m[0], without.items[i].name),
                  *b = without.items[i].tensor;
        ck_assert(a && cg_numel(a) == cg_numel(b));
        ck_assert(memcmp(cg_data(a), cg_data(b), (size_t)cg_numel(b) * sizeof(float)) == 0);
    }
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, d / 2 + 5, d)), *mem = cg_randn(&r, CG_SHAPE(2, 5, d));
    cg_precision was = cg_autocast_begin(prec);
    pass p[2];
    for (int nb = 0; nb < 2; nb++)
        p[nb] = one_pass(kind, m[nb], &drop[nb], x, mem, &without);
    cg_autocast_end(was);
    if (prec == CG_PRECISION_BF16) { /* the products were bf16's: not fp32's numbers */
        was = cg_autocast_begin(CG_PRECISION_FP32);
        pass f = one_pass(kind, m[1], &drop[1], x, mem, &without);
        cg_autocast_end(was);
        ck_assert(memcmp(f.out, p[1].out, (size_t)f.n_out * sizeof(float)) != 0);
        pass_free(&f, without.n);
    }
    assert_equal(p[0].out, p[1].out, p[0].n_out, "output");
    assert_equal(p[0].gx, p[1].gx, cg_numel(x), "input's gradient");
    if (p[0].gm)
        assert_equal(p[0].gm, p[1].gm, cg_numel(mem), "memory's gradient");
    for (int i = 0; i < without.n; i++)
        assert_equal(p[0].gp[i], p[1].gp[i], cg_numel(without.items[i].tensor),
                     without.items[i].name);
    for (int nb = 0; nb < 2; nb++) {
        pass_free(&p[nb], without.n);
        cg_module_free(m[nb]);
    }
    cg_param_list_free(&with);
    cg_param_list_free(&without);
    cg_release_all(2, x, mem);
}

START_TEST(test_no_bias_is_zero_bias)
{
    const cg_precision precs[] = {CG_PRECISION_FP32, CG_PRECISION_BF16};
    for (int kind = 0; kind < N_KINDS; kind++)
        for (int v = 0; v < 8; v++) /* v & 1: pre-norm; v & 2: RMSNorm; v & 4: bf16 */
            for (int64_t d = 8; d <= 128; d *= 4)
                check_case(kind, d, v & 1, v & 2 ? CG_NORM_RMSNORM : CG_NORM_LAYERNORM,
                           precs[v >> 2 & 1]);
}
END_TEST

/* The names a bias-less layer has: PyTorch's bias=False state dict's. */
START_TEST(test_no_bias_names)
{
    cg_tf_config c = {.d = 6,
                      .H = 2,
                      .d_ff = 5,
                      .norm = CG_NORM_LAYERNORM,
                      .act = CG_ACT_RELU,
                      .norm_first = true,
                      .no_bias = true};
    cg_enc_layer *e = cg_enc_layer_new(&c, NULL);
    cg_param_list l = {0};
    ck_assert(e && cg_module_params(CG_MODULE(e), &l));
    const char *want[] = {"self_attn.q_proj.weight",
                          "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight",
                          "ln1.weight",
                          "ff.fc1.weight",
                          "ff.fc2.weight",
                          "ln2.weight"};
    ck_assert_int_eq(l.n, 8);
    for (int i = 0; i < l.n; i++)
        ck_assert_str_eq(l.items[i].name, want[i]);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(e)), 4 * 36 + 6 + 30 + 30 + 6);
    cg_param_list_free(&l);
    cg_module_free(CG_MODULE(e));
}
END_TEST

static Suite *no_bias_suite(void)
{
    Suite *s = suite_create("no_bias");
    TCase *tc = tcase_create("no_bias");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_no_bias_is_zero_bias);
    tcase_add_test(tc, test_no_bias_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {no_bias_suite()};
    return cg_test_run(s, 1);
}
