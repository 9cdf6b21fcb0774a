/* Gradients of gradients (autograd/grad2.c, engine.c): cg_autograd_grad
 * and create_graph. For every op with a differentiable backward, the
 * gradient computed with a graph (the upstream gradient an input too) is
 * gradchecked itself: its derivatives against central differences of
 * it, so every second derivative is checked, and it equals the
 * first-order backward's. Then what autograd.grad promises: no .grad
 * written, only the part of the graph that reaches the inputs computed,
 * non-leaf inputs, several outputs, unused inputs; Hessian-vector
 * products against differences of gradients; third derivatives; a
 * gradient penalty through nn.Linear layers; a user-defined op with a
 * differentiable backward; refusals by message. PyTorch's values on the
 * same computations: tests/interop/torch_grad2.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "tests/testutil.h"

typedef cg_tensor *(*op_fn)(cg_tensor *const *in);

/* ----------------------------------------------------------- the ops */
static cg_tensor *op_add(cg_tensor *const *x) { return cg_add(x[0], x[1]); }
static cg_tensor *op_sub(cg_tensor *const *x) { return cg_sub(x[0], x[1]); }
static cg_tensor *op_mul(cg_tensor *const *x) { return cg_mul(x[0], x[1]); }
static cg_tensor *op_square(cg_tensor *const *x) { return cg_mul(x[0], x[0]); }
static cg_tensor *op_div(cg_tensor *const *x) { return cg_div(x[0], x[1]); }
static cg_tensor *op_adds(cg_tensor *const *x) { return cg_adds(x[0], 0.5f); }
static cg_tensor *op_muls(cg_tensor *const *x) { return cg_muls(x[0], -1.5f); }
static cg_tensor *op_neg(cg_tensor *const *x) { return cg_neg(x[0]); }
static cg_tensor *op_exp(cg_tensor *const *x) { return cg_exp(x[0]); }
static cg_tensor *op_log(cg_tensor *const *x) { return cg_log(x[0]); }
static cg_tensor *op_sqrt(cg_tensor *const *x) { return cg_sqrt(x[0]); }
static cg_tensor *op_rsqrt(cg_tensor *const *x) { return cg_rsqrt(x[0]); }
static cg_tensor *op_pow(cg_tensor *const *x) { return cg_pow(x[0], 2.5f); }
static cg_tensor *op_tanh(cg_tensor *const *x) { return cg_tanh(x[0]); }
static cg_tensor *op_sigmoid(cg_tensor *const *x) { return cg_sigmoid(x[0]); }
static cg_tensor *op_sin(cg_tensor *const *x) { return cg_sin(x[0]); }
static cg_tensor *op_cos(cg_tensor *const *x) { return cg_cos(x[0]); }
static cg_tensor *op_erf(cg_tensor *const *x) { return cg_erf(x[0]); }
static cg_tensor *op_relu(cg_tensor *const *x) { return cg_relu(x[0]); }
static cg_tensor *op_abs(cg_tensor *const *x) { return cg_abs(x[0]); }
static cg_tensor *op_leaky(cg_tensor *const *x) { return cg_leaky_relu(x[0], 0.1f); }
static cg_tensor *op_hardtanh(cg_tensor *const *x) { return cg_hardtanh(x[0], -0.5f, 0.7f); }
static cg_tensor *op_clamp(cg_tensor *const *x) { return cg_clamp(x[0], -0.4f, 0.6f); }
static cg_tensor *op_maximum(cg_tensor *const *x) { return cg_maximum(x[0], x[1]); }
static cg_tensor *op_silu(cg_tensor *const *x) { return cg_silu(x[0]); }
static cg_tensor *op_gelu(cg_tensor *const *x) { return cg_gelu(x[0]); }
static cg_tensor *op_gelu_erf(cg_tensor *const *x) { return cg_gelu_erf(x[0]); }
static cg_tensor *op_softplus(cg_tensor *const *x) { return cg_softplus(x[0], 2.0f, 1.5f); }
static cg_tensor *op_mish(cg_tensor *const *x) { return cg_mish(x[0]); }
static cg_tensor *op_elu(cg_tensor *const *x) { return cg_elu(x[0], 0.7f); }
static cg_tensor *op_celu(cg_tensor *const *x) { return cg_celu(x[0], 1.3f); }
static cg_tensor *op_selu(cg_tensor *const *x) { return cg_selu(x[0]); }
static cg_tensor *op_logsigmoid(cg_tensor *const *x) { return cg_logsigmoid(x[0]); }
static cg_tensor *op_tanhshrink(cg_tensor *const *x) { return cg_tanhshrink(x[0]); }
static cg_tensor *op_softsign(cg_tensor *const *x) { return cg_softsign(x[0]); }
static cg_tensor *op_hardswish(cg_tensor *const *x) { return cg_hardswish(x[0]); }
static cg_tensor *op_sum(cg_tensor *const *x) { return cg_sum(x[0], 1, (const int[]){1}, false); }
static cg_tensor *op_mean(cg_tensor *const *x) { return cg_mean(x[0], 1, (const int[]){0}, true); }
static cg_tensor *op_var(cg_tensor *const *x)
{
    return cg_var(x[0], 1, (const int[]){1}, 1, false);
}
static cg_tensor *op_lse(cg_tensor *const *x)
{
    return cg_logsumexp(x[0], 1, (const int[]){-1}, false);
}
static cg_tensor *op_max(cg_tensor *const *x) { return cg_max(x[0], 1, false, NULL); }
static cg_tensor *op_matmul(cg_tensor *const *x) { return cg_matmul(x[0], x[1]); }
static cg_tensor *op_permute(cg_tensor *const *x)
{
    cg_tensor *p = cg_permute(x[0], (const int[]){1, 0}), *r = cg_mul(p, p);
    cg_release(p);
    return r;
}
static cg_tensor *op_slice(cg_tensor *const *x)
{
    cg_tensor *s = cg_slice(x[0], 1, 1, 4, 2), *r = cg_mul(s, s);
    cg_release(s);
    return r;
}
static cg_tensor *op_select(cg_tensor *const *x)
{
    cg_tensor *s = cg_select(x[0], 0, 1), *r = cg_exp(s);
    cg_release(s);
    return r;
}
static cg_tensor *op_broadcast(cg_tensor *const *x) { return cg_mul(x[0], x[1]); } /* [3,4]*[4] */
static cg_tensor *op_reshape(cg_tensor *const *x)
{
    cg_tensor *r = cg_reshape(x[0], 1, (const int64_t[]){12}), *y = cg_tanh(r);
    cg_release(r);
    return y;
}
static cg_tensor *op_softmax(cg_tensor *const *x) { return cg_softmax(x[0], 1); }
static cg_tensor *op_log_softmax(cg_tensor *const *x) { return cg_log_softmax(x[0], 0); }
static cg_tensor *op_ce(cg_tensor *const *x)
{
    return cg_cross_entropy(x[0], cg_test_ids(3, (const int64_t[]){2, -100, 0}), -100, 0.0f,
                            CG_REDUCTION_MEAN);
}
static cg_tensor *op_ce_smooth(cg_tensor *const *x)
{
    static const float w[4] = {0.5f, 2.0f, 1.0f, 1.5f};
    cg_tensor *wt = cg_from_data(1, (const int64_t[]){4}, w);
    cg_tensor *r = cg_cross_entropy_weighted(x[0], cg_test_ids(3, (const int64_t[]){2, 1, 3}), wt,
                                             1, 0.2f, CG_REDUCTION_MEAN);
    cg_release(wt);
    return r;
}
static cg_tensor *op_ce_none(cg_tensor *const *x)
{
    return cg_cross_entropy(x[0], cg_test_ids(3, (const int64_t[]){3, 1, 0}), -100, 0.1f,
                            CG_REDUCTION_NONE);
}
static cg_tensor *op_layer_norm(cg_tensor *const *x)
{
    return cg_layer_norm(x[0], x[1], x[2], 1e-5f);
}
static cg_tensor *op_rms_norm(cg_tensor *const *x) { return cg_rms_norm(x[0], x[1], 1e-5f); }
static cg_tensor *op_add_layer_norm(cg_tensor *const *x)
{
    return cg_add_layer_norm(x[0], x[1], x[2], x[3], 1e-5f);
}
static cg_tensor *op_concat(cg_tensor *const *x)
{
    cg_tensor *c = cg_concat(x, 2, 0), *r = cg_mul(c, c);
    cg_release(c);
    return r;
}
static cg_tensor *op_stack(cg_tensor *const *x)
{
    cg_tensor *c = cg_stack(x, 2, 1), *r = cg_sin(c);
    cg_release(c);
    return r;
}
static cg_tensor *op_embedding(cg_tensor *const *x)
{
    cg_tensor *e = cg_embedding(x[0], cg_test_ids(4, (const int64_t[]){2, 0, 2, 1}));
    cg_tensor *r = cg_mul(e, e);
    cg_release(e);
    return r;
}
static cg_tensor *op_gather(cg_tensor *const *x)
{
    const cg_tensor *idx =
        cg_test_ids_nd(2, (const int64_t[]){3, 2}, (const int64_t[]){0, 3, 1, 1, 2, 0});
    cg_tensor *g = cg_gather(x[0], 1, idx), *r = cg_mul(g, g);
    cg_release(g);
    return r;
}
static cg_tensor *op_index_add(cg_tensor *const *x)
{
    cg_tensor *a = cg_index_add(x[0], 0, cg_test_ids(2, (const int64_t[]){2, 0}), x[1]);
    cg_tensor *r = cg_mul(a, a);
    cg_release(a);
    return r;
}
static cg_tensor *op_scatter_add(cg_tensor *const *x)
{
    const cg_tensor *idx =
        cg_test_ids_nd(2, (const int64_t[]){2, 4}, (const int64_t[]){0, 1, 2, 0, 2, 2, 1, 0});
    cg_tensor *a = cg_scatter_add(x[0], 0, idx, x[1]), *r = cg_mul(a, a);
    cg_release(a);
    return r;
}
static cg_tensor *op_attention(cg_tensor *const *x)
{
    return cg_attention(x[0], x[1], x[2], true, NULL, NULL);
}
static cg_tensor *op_attention_pad(cg_tensor *const *x)
{
    const cg_tensor *kp = cg_test_mask(2, (const int64_t[]){1, 4}, (const uint8_t[]){0, 0, 1, 0});
    return cg_attention(x[0], x[1], x[2], false, kp, NULL);
}
static cg_tensor *op_attention_gqa(cg_tensor *const *x)
{
    return cg_attention(x[0], x[1], x[2], false, NULL, NULL);
}
static cg_tensor *op_linear(cg_tensor *const *x) { return cg_affine(x[0], x[1], x[2]); }
static cg_tensor *op_tril(cg_tensor *const *x)
{
    cg_tensor *t = cg_tril(x[0], 0), *r = cg_mul(t, t);
    cg_release(t);
    return r;
}
static cg_tensor *op_cumsum(cg_tensor *const *x)
{
    cg_tensor *c = cg_cumsum(x[0], 1), *r = cg_mul(c, c);
    cg_release(c);
    return r;
}
static cg_tensor *op_flip(cg_tensor *const *x)
{
    cg_tensor *f = cg_flip(x[0], 1, (const int[]){0}), *r = cg_mul(f, x[0]);
    cg_release(f);
    return r;
}
static cg_tensor *op_where(cg_tensor *const *x)
{
    const cg_tensor *m = cg_test_mask(2, (const int64_t[]){3, 4},
                                      (const uint8_t[]){1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1});
    cg_tensor *w = cg_where((cg_tensor *)m, x[0], x[1]), *r = cg_mul(w, w);
    cg_release(w);
    return r;
}
static cg_tensor *op_masked_fill(cg_tensor *const *x)
{
    cg_tensor *m = (cg_tensor *)cg_test_mask(2, (const int64_t[]){3, 4},
                                             (const uint8_t[]){1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0});
    cg_tensor *f = cg_masked_fill(x[0], m, 2.0f), *r = cg_mul(f, f);
    cg_release(f);
    return r;
}
static cg_tensor *op_mse(cg_tensor *const *x) { return cg_mse_loss(x[0], x[1], CG_REDUCTION_MEAN); }
static cg_tensor *op_l1(cg_tensor *const *x)
{
    cg_tensor *l = cg_l1_loss(x[0], x[1], CG_REDUCTION_NONE), *r = cg_mul(l, x[0]);
    cg_release(l);
    return r;
}

static cg_tensor *op_conv2d(cg_tensor *const *x)
{
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = 2, c.padding[0] = 1, c.padding[1] = 1, c.groups = 2;
    cg_tensor *y = cg_conv2d(x[0], x[1], x[2], &c), *r = cg_tanh(y);
    cg_release(y);
    return r;
}
static cg_tensor *op_conv2d_same(cg_tensor *const *x)
{
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.pad = CG_CONV_SAME, c.dilation[1] = 2;
    cg_tensor *y = cg_conv2d(x[0], x[1], NULL, &c), *r = cg_mul(y, y);
    cg_release(y);
    return r;
}
static cg_tensor *op_conv1d(cg_tensor *const *x)
{
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = 2, c.padding[0] = 2, c.dilation[0] = 2;
    cg_tensor *y = cg_conv1d(x[0], x[1], x[2], &c), *r = cg_sin(y);
    cg_release(y);
    return r;
}
static cg_tensor *op_pad(cg_tensor *const *x)
{
    cg_tensor *p = cg_pad(x[0], 4, (const int64_t[]){1, -1, 2, 0}, CG_PAD_CONSTANT, 0.5f);
    cg_tensor *r = cg_mul(p, p);
    cg_release(p);
    return r;
}
static cg_tensor *op_unfold_fold(cg_tensor *const *x)
{
    const cg_fold_cfg c = {{2, 2}, {1, 1}, {1, 0}, {1, 2}};
    cg_tensor *u = cg_unfold(x[0], &c), *sq = cg_mul(u, u);
    cg_tensor *f = cg_fold(sq, 3, 4, &c), *r = cg_mul(f, x[0]);
    cg_release_all(3, u, sq, f);
    return r;
}
static cg_tensor *op_max_pool2d(cg_tensor *const *x)
{
    cg_tensor *m = cg_max_pool2d(x[0], (cg_pool){.kernel_size = {2, 2}, .stride = {1, 2}});
    cg_tensor *r = cg_mul(m, m);
    cg_release(m);
    return r;
}
static cg_tensor *op_adaptive_max_pool1d(cg_tensor *const *x)
{
    cg_tensor *m = cg_adaptive_max_pool1d(x[0], 3, NULL), *r = cg_exp(m);
    cg_release(m);
    return r;
}

static cg_tensor *op_avg_pool2d(cg_tensor *const *x)
{
    cg_tensor *m = cg_avg_pool2d(
        x[0],
        (cg_pool){.kernel_size = {2, 3}, .stride = {1, 2}, .padding = {1, 1}, .exclude_pad = true});
    cg_tensor *r = cg_mul(m, m);
    cg_release(m);
    return r;
}
static cg_tensor *op_adaptive_avg_pool2d(cg_tensor *const *x)
{
    cg_tensor *m = cg_adaptive_avg_pool2d(x[0], 2, 3), *r = cg_tanh(m);
    cg_release(m);
    return r;
}
static cg_tensor *op_interpolate(cg_tensor *const *x)
{
    cg_interp o = {0};
    o.mode = CG_INTERP_BILINEAR, o.size[0] = 5, o.size[1] = 3;
    cg_tensor *m = cg_interpolate(x[0], o), *r = cg_mul(m, m);
    cg_release(m);
    return r;
}
static cg_tensor *op_pad_reflect(cg_tensor *const *x)
{
    cg_tensor *p = cg_pad(x[0], 2, (const int64_t[]){2, 1}, CG_PAD_REFLECT, 0.0f);
    cg_tensor *r = cg_sin(p);
    cg_release(p);
    return r;
}
static cg_tensor *op_repeat(cg_tensor *const *x)
{
    cg_tensor *p = cg_repeat(x[0], 3, (const int64_t[]){2, 1, 2}), *r = cg_mul(p, p);
    cg_release(p);
    return r;
}
static cg_tensor *op_roll(cg_tensor *const *x)
{
    cg_tensor *p = cg_roll(x[0], 1, (const int64_t[]){2}, (const int[]){1}), *r = cg_mul(p, x[0]);
    cg_release(p);
    return r;
}

static cg_tensor *op_dropout2d(cg_tensor *const *x)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *d = cg_dropout2d(x[0], 0.4f, &r, true), *y = cg_mul(d, d);
    cg_release(d);
    return y;
}
static cg_tensor *op_alpha_dropout(cg_tensor *const *x)
{
    cg_rng r = cg_rng_new(5);
    cg_tensor *d = cg_alpha_dropout(x[0], 0.3f, &r, true), *y = cg_sin(d);
    cg_release(d);
    return y;
}
static cg_tensor *op_fmod(cg_tensor *const *x)
{
    cg_tensor *f = cg_fmod(x[0], x[1]), *y = cg_mul(f, f);
    cg_release(f);
    return y;
}
static cg_tensor *op_clamp_tensor(cg_tensor *const *x)
{
    cg_tensor *c = cg_clamp_tensor(x[0], x[1], NULL), *y = cg_mul(c, x[0]);
    cg_release(c);
    return y;
}
static cg_tensor *op_masked_select(cg_tensor *const *x)
{
    cg_tensor *m = (cg_tensor *)cg_test_mask(2, (const int64_t[]){3, 4},
                                             (const uint8_t[]){1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1});
    cg_tensor *s = cg_masked_select(x[0], m), *y = cg_mul(s, s);
    cg_release(s);
    return y;
}

typedef struct {
    const char *name;
    op_fn f;
    int nin;
    int ndim;            /* every input's, unless shapes says */
    int64_t shape[4][4]; /* per input */
    int nd[4];           /* per input (0: ndim) */
    bool positive;       /* inputs in [0.5, 2] */
} grad2_case;

#define S2(a, b) \
    {            \
        a, b     \
    }
static const grad2_case CASES[] = {
    {"add", op_add, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"sub", op_sub, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"mul", op_mul, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"x*x", op_square, 1, 2, {S2(3, 4)}, {0}, false},
    {"div", op_div, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, true},
    {"adds", op_adds, 1, 2, {S2(3, 4)}, {0}, false},
    {"muls", op_muls, 1, 2, {S2(3, 4)}, {0}, false},
    {"neg", op_neg, 1, 2, {S2(3, 4)}, {0}, false},
    {"exp", op_exp, 1, 2, {S2(3, 4)}, {0}, false},
    {"log", op_log, 1, 2, {S2(3, 4)}, {0}, true},
    {"sqrt", op_sqrt, 1, 2, {S2(3, 4)}, {0}, true},
    {"rsqrt", op_rsqrt, 1, 2, {S2(3, 4)}, {0}, true},
    {"pow", op_pow, 1, 2, {S2(3, 4)}, {0}, true},
    {"tanh", op_tanh, 1, 2, {S2(3, 4)}, {0}, false},
    {"sigmoid", op_sigmoid, 1, 2, {S2(3, 4)}, {0}, false},
    {"sin", op_sin, 1, 2, {S2(3, 4)}, {0}, false},
    {"cos", op_cos, 1, 2, {S2(3, 4)}, {0}, false},
    {"erf", op_erf, 1, 2, {S2(3, 4)}, {0}, false},
    {"relu", op_relu, 1, 2, {S2(3, 4)}, {0}, false},
    {"abs", op_abs, 1, 2, {S2(3, 4)}, {0}, false},
    {"leaky_relu", op_leaky, 1, 2, {S2(3, 4)}, {0}, false},
    {"hardtanh", op_hardtanh, 1, 2, {S2(3, 4)}, {0}, false},
    {"clamp", op_clamp, 1, 2, {S2(3, 4)}, {0}, false},
    {"maximum", op_maximum, 2, 2, {S2(3, 4), S2(1, 4)}, {0}, false},
    {"silu", op_silu, 1, 2, {S2(3, 4)}, {0}, false},
    {"gelu", op_gelu, 1, 2, {S2(3, 4)}, {0}, false},
    {"gelu_erf", op_gelu_erf, 1, 2, {S2(3, 4)}, {0}, false},
    {"softplus", op_softplus, 1, 2, {S2(3, 4)}, {0}, false},
    {"mish", op_mish, 1, 2, {S2(3, 4)}, {0}, false},
    {"elu", op_elu, 1, 2, {S2(3, 4)}, {0}, false},
    {"celu", op_celu, 1, 2, {S2(3, 4)}, {0}, false},
    {"selu", op_selu, 1, 2, {S2(3, 4)}, {0}, false},
    {"logsigmoid", op_logsigmoid, 1, 2, {S2(3, 4)}, {0}, false},
    {"tanhshrink", op_tanhshrink, 1, 2, {S2(3, 4)}, {0}, false},
    {"softsign", op_softsign, 1, 2, {S2(3, 4)}, {0}, false},
    {"hardswish", op_hardswish, 1, 2, {S2(3, 4)}, {0}, false},
    {"sum", op_sum, 1, 2, {S2(3, 4)}, {0}, false},
    {"mean", op_mean, 1, 2, {S2(3, 4)}, {0}, false},
    {"var", op_var, 1, 2, {S2(3, 4)}, {0}, false},
    {"logsumexp", op_lse, 1, 2, {S2(3, 4)}, {0}, false},
    {"max", op_max, 1, 2, {S2(3, 4)}, {0}, false},
    {"matmul", op_matmul, 2, 3, {{2, 3, 4}, {4, 5}}, {3, 2}, false},
    {"permute", op_permute, 1, 2, {S2(3, 4)}, {0}, false},
    {"slice", op_slice, 1, 2, {S2(3, 4)}, {0}, false},
    {"select", op_select, 1, 2, {S2(3, 4)}, {0}, false},
    {"broadcast", op_broadcast, 2, 2, {S2(3, 4), {4}}, {2, 1}, false},
    {"reshape", op_reshape, 1, 2, {S2(3, 4)}, {0}, false},
    {"softmax", op_softmax, 1, 2, {S2(3, 4)}, {0}, false},
    {"log_softmax", op_log_softmax, 1, 2, {S2(3, 4)}, {0}, false},
    {"cross_entropy", op_ce, 1, 2, {S2(3, 4)}, {0}, false},
    {"cross_entropy_weighted_smoothed", op_ce_smooth, 1, 2, {S2(3, 4)}, {0}, false},
    {"cross_entropy_none", op_ce_none, 1, 2, {S2(3, 4)}, {0}, false},
    {"layer_norm", op_layer_norm, 3, 2, {S2(3, 4), {4}, {4}}, {2, 1, 1}, false},
    {"rms_norm", op_rms_norm, 2, 2, {S2(3, 4), {4}}, {2, 1}, false},
    {"add_layer_norm",
     op_add_layer_norm,
     4,
     2,
     {S2(3, 4), S2(3, 4), {4}, {4}},
     {2, 2, 1, 1},
     false},
    {"concat", op_concat, 2, 2, {S2(3, 4), S2(2, 4)}, {0}, false},
    {"stack", op_stack, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"embedding", op_embedding, 1, 2, {S2(3, 4)}, {0}, false},
    {"gather", op_gather, 1, 2, {S2(3, 4)}, {0}, false},
    {"index_add", op_index_add, 2, 2, {S2(3, 4), S2(2, 4)}, {0}, false},
    {"scatter_add", op_scatter_add, 2, 2, {S2(3, 4), S2(2, 4)}, {0}, false},
    {"attention_causal",
     op_attention,
     3,
     4,
     {{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}},
     {0},
     false},
    {"attention_key_pad",
     op_attention_pad,
     3,
     4,
     {{1, 2, 3, 4}, {1, 2, 4, 4}, {1, 2, 4, 4}},
     {0},
     false},
    {"attention_gqa",
     op_attention_gqa,
     3,
     4,
     {{1, 4, 3, 2}, {1, 2, 3, 2}, {1, 2, 3, 2}},
     {0},
     false},
    {"linear", op_linear, 3, 2, {S2(3, 4), S2(5, 4), {5}}, {2, 2, 1}, false},
    {"tril", op_tril, 1, 2, {S2(3, 4)}, {0}, false},
    {"cumsum", op_cumsum, 1, 2, {S2(3, 4)}, {0}, false},
    {"flip", op_flip, 1, 2, {S2(3, 4)}, {0}, false},
    {"where", op_where, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"masked_fill", op_masked_fill, 1, 2, {S2(3, 4)}, {0}, false},
    {"mse_loss", op_mse, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"l1_loss", op_l1, 2, 2, {S2(3, 4), S2(3, 4)}, {0}, false},
    {"conv2d_groups_stride_padding",
     op_conv2d,
     3,
     4,
     {{2, 4, 5, 4}, {6, 2, 3, 2}, {6}},
     {4, 4, 1},
     false},
    {"conv2d_same_dilated_unbatched",
     op_conv2d_same,
     2,
     3,
     {{2, 4, 5}, {3, 2, 2, 2}},
     {3, 4},
     false},
    {"conv1d", op_conv1d, 3, 3, {{2, 3, 7}, {4, 3, 3}, {4}}, {3, 3, 1}, false},
    {"pad_constant", op_pad, 1, 2, {S2(3, 4)}, {0}, false},
    {"unfold_fold", op_unfold_fold, 1, 4, {{1, 2, 3, 4}}, {0}, false},
    {"max_pool2d", op_max_pool2d, 1, 4, {{1, 2, 4, 5}}, {0}, false},
    {"adaptive_max_pool1d", op_adaptive_max_pool1d, 1, 3, {{2, 2, 7}}, {0}, false},
    {"avg_pool2d", op_avg_pool2d, 1, 4, {{1, 2, 4, 5}}, {0}, false},
    {"adaptive_avg_pool2d", op_adaptive_avg_pool2d, 1, 4, {{1, 2, 5, 4}}, {0}, false},
    {"interpolate_bilinear", op_interpolate, 1, 4, {{1, 2, 3, 4}}, {0}, false},
    {"pad_reflect", op_pad_reflect, 1, 3, {{2, 2, 4}}, {0}, false},
    {"repeat", op_repeat, 1, 2, {S2(3, 4)}, {0}, false},
    {"roll", op_roll, 1, 2, {S2(3, 4)}, {0}, false},
    {"dropout2d", op_dropout2d, 1, 4, {{2, 3, 2, 2}}, {0}, false},
    {"alpha_dropout", op_alpha_dropout, 1, 2, {S2(3, 4)}, {0}, false},
    {"fmod_broadcast", op_fmod, 2, 2, {S2(3, 4), S2(1, 4)}, {0}, true},
    {"clamp_tensor", op_clamp_tensor, 2, 2, {S2(3, 4), S2(3, 1)}, {0}, false},
    {"masked_select", op_masked_select, 1, 2, {S2(3, 4)}, {0}, false},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

/* The case's inputs (leaves requiring grad) drawn from rng */
static void make_inputs(const grad2_case *c, cg_rng *rng, cg_tensor **x)
{
    for (int i = 0; i < c->nin; i++) {
        const int nd = c->nd[i] ? c->nd[i] : c->ndim;
        x[i] = cg_randn(rng, nd, c->shape[i]);
        if (c->positive) {
            cg_tensor *a = cg_k_abs(x[i]), *b = cg_k_muls(a, 0.5f), *p = cg_k_adds(b, 0.5f);
            cg_release_all(3, x[i], a, b);
            x[i] = p;
        }
        cg_requires_grad(x[i], true);
    }
}

/* The gradient of the case's output (upstream gradient g) with respect
 * to its inputs, computed with a graph, flattened and concatenated: a
 * function of the inputs and g, which gradcheck differentiates */
typedef struct {
    const grad2_case *c;
} g2ctx;
static cg_tensor *first_grads(void *ctx, cg_tensor *const *in)
{
    const grad2_case *c = ((g2ctx *)ctx)->c;
    ck_assert(cg_enable_grad_begin()); /* gradcheck's differences run under no-grad */
    cg_tensor *y = c->f(in);
    if (!y) {
        cg_enable_grad_end();
        return NULL;
    }
    cg_tensor *g = in[c->nin], *gr[4] = {0}, *flat[4] = {0};
    cg_grad_opts o = {.create_graph = true};
    bool ok = cg_autograd_grad(1, &y, &g, c->nin, in, &o, gr);
    cg_release(y);
    cg_tensor *out = NULL;
    if (ok) {
        for (int i = 0; i < c->nin; i++)
            flat[i] = cg_reshape(gr[i], 1, (const int64_t[]){-1});
        out = cg_concat(flat, c->nin, 0);
    }
    for (int i = 0; i < c->nin; i++)
        cg_release_all(2, gr[i], flat[i]);
    cg_enable_grad_end();
    return out;
}

/* Every case's gradient is differentiable, and its derivatives (the
 * second derivatives, and the derivative in g) are central differences'. */
START_TEST(test_second_derivatives)
{
    cg_rng rng = cg_rng_new(42);
    for (int k = 0; k < NCASES; k++) {
        const grad2_case *c = &CASES[k];
        cg_tensor *in[5];
        make_inputs(c, &rng, in);
        cg_tensor *y = c->f(in);
        ck_assert_msg(y != NULL, "%s: %s", c->name, cg_last_error());
        in[c->nin] = cg_requires_grad(cg_randn(&rng, y->ndim, y->shape), true);
        cg_release(y);
        g2ctx ctx = {c};
        cg_gradcheck_opts o = cg_gradcheck_defaults();
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(first_grads, &ctx, c->nin + 1, in, &o, &rep), "%s: %s", c->name,
                      rep.message);
        for (int i = 0; i <= c->nin; i++)
            cg_release(in[i]);
    }
}
END_TEST

/* The gradients with a graph are the first-order backward's (to rounding). */
START_TEST(test_same_first_order)
{
    cg_rng rng = cg_rng_new(7);
    for (int k = 0; k < NCASES; k++) {
        const grad2_case *c = &CASES[k];
        cg_tensor *in[4], *a[4] = {0}, *b[4] = {0};
        make_inputs(c, &rng, in);
        cg_tensor *y = c->f(in);
        cg_tensor *g = cg_randn(&rng, y->ndim, y->shape);
        ck_assert_msg(
            cg_autograd_grad(1, &y, &g, c->nin, in, &(cg_grad_opts){.retain_graph = true}, a),
            "%s: %s", c->name, cg_last_error());
        ck_assert_msg(
            cg_autograd_grad(1, &y, &g, c->nin, in, &(cg_grad_opts){.create_graph = true}, b),
            "%s: %s", c->name, cg_last_error());
        for (int i = 0; i < c->nin; i++) {
            ck_assert_msg(a[i] && b[i] && cg_same_shape(a[i], b[i]), "%s: input %d", c->name, i);
            ck_assert_msg(!a[i]->node && b[i]->requires_grad == (b[i]->node != NULL),
                          "%s: input %d: only the create_graph gradient has a graph", c->name, i);
            float *va = cg_test_values(a[i]), *vb = cg_test_values(b[i]);
            for (int64_t j = 0; j < cg_numel(a[i]); j++)
                ck_assert_msg(fabsf(va[j] - vb[j]) <= 2e-5f * (1.0f + fabsf(va[j])),
                              "%s: input %d element %lld: %.9g vs %.9g", c->name, i, (long long)j,
                              (double)va[j], (double)vb[j]);
            free(va);
            free(vb);
            ck_assert_msg(!in[i]->grad, "%s: autograd_grad wrote a .grad", c->name);
        }
        for (int i = 0; i < c->nin; i++)
            cg_release_all(3, in[i], a[i], b[i]);
        cg_release_all(2, y, g);
    }
}
END_TEST

static cg_tensor *mk(int ndim, const int64_t *shape, const float *v)
{
    return cg_requires_grad(cg_from_data(ndim, shape, v), true);
}

static float item(const cg_tensor *t) { return cg_item(t); }

/* d/dx of x^3 is 3x^2, then 6x, then 6: three orders through one graph */
START_TEST(test_third_derivative)
{
    cg_tensor *x = mk(0, NULL, (const float[]){1.5f});
    cg_tensor *y = cg_pow(x, 3.0f), *d1, *d2, *d3;
    cg_grad_opts o = {.create_graph = true};
    ck_assert(cg_autograd_grad(1, &y, NULL, 1, &x, &o, &d1));
    ck_assert(cg_autograd_grad(1, &d1, NULL, 1, &x, &o, &d2));
    ck_assert(cg_autograd_grad(1, &d2, NULL, 1, &x, &o, &d3));
    ck_assert_float_eq_tol(item(d1), 6.75f, 1e-5f);
    ck_assert_float_eq_tol(item(d2), 9.0f, 1e-5f);
    ck_assert_float_eq_tol(item(d3), 6.0f, 1e-5f);
    ck_assert(!x->grad);
    /* and through tanh's saved output: d2/dx2 tanh = -2 tanh (1 - tanh^2) */
    cg_tensor *t = cg_tanh(x), *e1, *e2;
    ck_assert(cg_autograd_grad(1, &t, NULL, 1, &x, &o, &e1));
    ck_assert(cg_autograd_grad(1, &e1, NULL, 1, &x, &o, &e2));
    const double th = tanh(1.5);
    ck_assert_float_eq_tol(item(e1), (float)(1 - th * th), 1e-6f);
    ck_assert_float_eq_tol(item(e2), (float)(-2 * th * (1 - th * th)), 1e-6f);
    cg_release_all(9, x, y, d1, d2, d3, t, e1, e2, NULL);
}
END_TEST

/* A Hessian-vector product of a small network's loss, H v, against the
 * central differences of its gradient along v */
static cg_tensor *mlp_loss(cg_tensor *w1, cg_tensor *w2, cg_tensor *x)
{
    cg_tensor *h = cg_affine(x, w1, NULL), *a = cg_tanh(h), *o = cg_affine(a, w2, NULL);
    cg_tensor *l = cg_cross_entropy(o, cg_test_ids(4, (const int64_t[]){0, 2, 1, 2}), -100, 0.0f,
                                    CG_REDUCTION_MEAN);
    cg_release_all(3, h, a, o);
    return l;
}
START_TEST(test_hessian_vector_product)
{
    cg_rng rng = cg_rng_new(3);
    cg_tensor *x = cg_randn(&rng, 2, (const int64_t[]){4, 5});
    cg_tensor *w1 = cg_requires_grad(cg_randn(&rng, 2, (const int64_t[]){6, 5}), true);
    cg_tensor *w2 = cg_requires_grad(cg_randn(&rng, 2, (const int64_t[]){3, 6}), true);
    cg_tensor *v1 = cg_randn(&rng, 2, w1->shape), *v2 = cg_randn(&rng, 2, w2->shape);
    cg_tensor *l = mlp_loss(w1, w2, x), *g[2], *hv[2];
    cg_tensor *w[2] = {w1, w2};
    ck_assert(cg_autograd_grad(1, &l, NULL, 2, w, &(cg_grad_opts){.create_graph = true}, g));
    /* g . v, differentiated again */
    cg_tensor *p1 = cg_mul(g[0], v1), *p2 = cg_mul(g[1], v2);
    cg_tensor *s1 = cg_sum_all(p1), *s2 = cg_sum_all(p2), *gv = cg_add(s1, s2);
    ck_assert_msg(cg_autograd_grad(1, &gv, NULL, 2, w, NULL, hv), "%s", cg_last_error());
    /* (grad(w + h v) - grad(w - h v)) / 2h, in double from float gradients */
    const float h = 1e-2f;
    double *num[2];
    float *base[2] = {cg_test_values(w1), cg_test_values(w2)};
    float *dir[2] = {cg_test_values(v1), cg_test_values(v2)};
    for (int sgn = 0; sgn < 2; sgn++) {
        for (int k = 0; k < 2; k++) {
            float *d = cg_data(w[k]);
            for (int64_t j = 0; j < cg_numel(w[k]); j++)
                d[j] = base[k][j] + (sgn ? -h : h) * dir[k][j];
            cg_tensor_modified(w[k]);
        }
        cg_tensor *lp = mlp_loss(w1, w2, x), *gp[2];
        ck_assert(cg_autograd_grad(1, &lp, NULL, 2, w, NULL, gp));
        for (int k = 0; k < 2; k++) {
            double *v = cg_test_doubles(gp[k]);
            if (!sgn) {
                num[k] = v;
            } else {
                for (int64_t j = 0; j < cg_numel(w[k]); j++)
                    num[k][j] = (num[k][j] - v[j]) / (2.0 * h);
                free(v);
            }
            cg_release(gp[k]);
        }
        cg_release(lp);
    }
    for (int k = 0; k < 2; k++) {
        float *a = cg_test_values(hv[k]);
        for (int64_t j = 0; j < cg_numel(w[k]); j++)
            ck_assert_msg(fabs(a[j] - num[k][j]) <= 2e-3 * (1 + fabs(num[k][j])),
                          "Hv of w%d [%lld]: %.7g vs differences %.7g", k + 1, (long long)j,
                          (double)a[j], num[k][j]);
        free(a);
        free(num[k]);
        free(base[k]);
        free(dir[k]);
    }
    cg_release_all(12, x, w1, w2, v1, v2, l, g[0], g[1], p1, p2, s1, s2);
    cg_release_all(3, gv, hv[0], hv[1]);
}
END_TEST

/* autograd.grad computes only what reaches its inputs: a branch that
 * leads only to a weight is not run, and no .grad is written */
static int g_calls;
static bool counting_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    g_calls++;
    gin[0] = cg_k_clone(g);
    return gin[0] != NULL;
}
static cg_tensor *counted(cg_tensor *a)
{
    cg_tensor *out = cg_k_clone(a);
    cg_node *n;
    ck_assert(cg_record_op(out, "counted", 1, &a, counting_bw, &n) == CG_RECORD_OK);
    return out;
}
START_TEST(test_only_what_reaches_the_inputs)
{
    cg_tensor *x = mk(1, (const int64_t[]){3}, (const float[]){1, 2, 3});
    cg_tensor *w = mk(1, (const int64_t[]){3}, (const float[]){0.5f, -1, 2});
    cg_tensor *cw = counted(w), *y = cg_mul(x, cw), *l = cg_sum_all(y), *gx;
    g_calls = 0;
    ck_assert(cg_autograd_grad(1, &l, NULL, 1, &x, &(cg_grad_opts){.retain_graph = true}, &gx));
    ck_assert_int_eq(g_calls, 0);
    float *v = cg_test_values(gx);
    ck_assert(v[0] == 0.5f && v[1] == -1.0f && v[2] == 2.0f);
    free(v);
    ck_assert(!x->grad && !w->grad);
    /* and the graph is still there for a backward (retain_graph) */
    ck_assert(cg_backward(l, NULL, false));
    ck_assert_int_eq(g_calls, 1);
    ck_assert(x->grad && w->grad);
    cg_release_all(6, x, w, cw, y, l, gx);
    /* without retain_graph, only what ran is freed (PyTorch's): the
     * branch to w still backpropagates from another root */
    x = mk(1, (const int64_t[]){3}, (const float[]){1, 2, 3});
    w = mk(1, (const int64_t[]){3}, (const float[]){0.5f, -1, 2});
    cw = counted(w);
    y = cg_mul(x, cw);
    l = cg_sum_all(y);
    cg_tensor *l2 = cg_sum_all(cw);
    ck_assert(cg_autograd_grad(1, &l, NULL, 1, &x, NULL, &gx));
    cg_tensor *again = NULL;
    ck_assert(!cg_autograd_grad(1, &l, NULL, 1, &x, NULL, &again) && !again);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "already freed"));
    ck_assert_msg(cg_backward(l2, NULL, false), "%s", cg_last_error());
    ck_assert_int_eq(g_calls, 2);
    ck_assert(w->grad && !x->grad);
    cg_release_all(7, x, w, cw, y, l, l2, gx);
}
END_TEST

/* Non-leaf inputs, several outputs with their gradients, an input named
 * twice, and unused inputs (refused, or NULL with allow_unused) */
START_TEST(test_inputs_and_outputs)
{
    cg_tensor *x = mk(1, (const int64_t[]){2}, (const float[]){1, -2});
    cg_tensor *u = cg_muls(x, 3.0f), *y1 = cg_mul(u, u), *y2 = cg_sum_all(u), *z = NULL;
    cg_tensor *g1 = cg_from_data(1, (const int64_t[]){2}, (const float[]){1, 0.5f});
    cg_tensor *outs[2] = {y1, y2}, *gouts[2] = {g1, NULL}, *ins[3] = {u, x, u}, *r[3];
    ck_assert_msg(
        cg_autograd_grad(2, outs, gouts, 3, ins, &(cg_grad_opts){.retain_graph = true}, r), "%s",
        cg_last_error());
    /* d/du: 2u g1 + 1 = (6 + 1, -12 * 0.5 + 1); d/dx: 3 of that */
    float *a = cg_test_values(r[0]), *b = cg_test_values(r[1]), *c = cg_test_values(r[2]);
    ck_assert(a[0] == 7.0f && a[1] == -5.0f && b[0] == 21.0f && b[1] == -15.0f);
    ck_assert(c[0] == 7.0f && c[1] == -5.0f);
    free(a);
    free(b);
    free(c);
    cg_release_all(3, r[0], r[1], r[2]);
    /* an input the outputs do not reach */
    cg_tensor *lone = mk(1, (const int64_t[]){2}, (const float[]){0, 0});
    cg_tensor *ins2[2] = {x, lone}, *r2[2];
    ck_assert(!cg_autograd_grad(1, &y2, NULL, 2, ins2, &(cg_grad_opts){.retain_graph = true}, r2));
    ck_assert_ptr_null(strstr(cg_last_error(), "input 0"));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "input 1 was not used"));
    ck_assert(!r2[0] && !r2[1]);
    ck_assert(cg_autograd_grad(1, &y2, NULL, 2, ins2,
                               &(cg_grad_opts){.retain_graph = true, .allow_unused = true}, r2));
    ck_assert(r2[0] && !r2[1]);
    cg_release(r2[0]);
    /* a leaf output that is its own input */
    ck_assert(cg_autograd_grad(1, &lone, &g1, 1, &lone, NULL, &z));
    float *zv = cg_test_values(z);
    ck_assert(zv[0] == 1.0f && zv[1] == 0.5f);
    free(zv);
    cg_release_all(8, x, u, y1, y2, g1, lone, z, NULL);
}
END_TEST

/* loss.backward(create_graph=True): .grad has a graph, and a gradient
 * penalty on it trains (here: its gradient against the closed form) */
START_TEST(test_backward_create_graph)
{
    cg_tensor *w = mk(1, (const int64_t[]){3}, (const float[]){0.5f, -1, 2});
    cg_tensor *x = cg_from_data(1, (const int64_t[]){3}, (const float[]){1, 2, 3});
    cg_tensor *p = cg_mul(w, w), *q = cg_mul(p, x), *l = cg_sum_all(q); /* sum x w^2 */
    ck_assert(cg_backward_ex(l, NULL, &(cg_grad_opts){.create_graph = true}));
    cg_tensor *gw = cg_retain((cg_tensor *)cg_grad(w)); /* 2 x w */
    ck_assert(gw->node != NULL);
    cg_zero_grad(w);
    cg_tensor *sq = cg_mul(gw, gw), *pen = cg_sum_all(sq); /* sum 4 x^2 w^2 */
    ck_assert(cg_backward(pen, NULL, false));
    float *v = cg_test_values(cg_grad(w)); /* 8 x^2 w */
    ck_assert(v[0] == 4.0f && v[1] == -32.0f && v[2] == 144.0f);
    free(v);
    cg_release_all(8, w, x, p, q, l, gw, sq, pen);
}
END_TEST

/* WGAN-GP's penalty through two nn.Linear-shaped layers: the gradient
 * of the critic in its input, its norm's distance from 1 squared, back to
 * the weights; against the same computed by differences of the penalty */
static float penalty(cg_tensor *w1, cg_tensor *b1, cg_tensor *w2, cg_tensor *x, bool backward)
{
    cg_tensor *xi = cg_requires_grad(cg_k_clone(x), true);
    cg_tensor *h = cg_affine(xi, w1, b1), *a = cg_leaky_relu(h, 0.2f), *d = cg_affine(a, w2, NULL);
    cg_tensor *s = cg_sum_all(d), *gx;
    ck_assert(cg_autograd_grad(1, &s, NULL, 1, &xi, &(cg_grad_opts){.create_graph = true}, &gx));
    cg_tensor *sq = cg_mul(gx, gx), *n2 = cg_sum(sq, 1, (const int[]){1}, false);
    cg_tensor *nrm = cg_sqrt(n2), *m1 = cg_adds(nrm, -1.0f), *p2 = cg_mul(m1, m1);
    cg_tensor *gp = cg_mean_all(p2);
    const float v = cg_item(gp);
    if (backward)
        ck_assert_msg(cg_backward(gp, NULL, false), "%s", cg_last_error());
    cg_release_all(12, xi, h, a, d, s, gx, sq, n2, nrm, m1, p2, gp);
    return v;
}
START_TEST(test_gradient_penalty)
{
    cg_rng rng = cg_rng_new(11);
    cg_tensor *x = cg_randn(&rng, 2, (const int64_t[]){5, 4});
    cg_tensor *w1 = cg_requires_grad(cg_randn(&rng, 2, (const int64_t[]){8, 4}), true);
    cg_tensor *b1 = cg_requires_grad(cg_randn(&rng, 1, (const int64_t[]){8}), true);
    cg_tensor *w2 = cg_requires_grad(cg_randn(&rng, 2, (const int64_t[]){1, 8}), true);
    penalty(w1, b1, w2, x, true);
    ck_assert(cg_grad(w1) && cg_grad(w2));
    /* b1 shifts where leaky_relu bends, a derivative that is 0 almost
     * everywhere: its gradient is 0, as PyTorch's */
    float *gb = cg_grad(b1) ? cg_test_values(cg_grad(b1)) : NULL;
    for (int j = 0; gb && j < 8; j++)
        ck_assert(gb[j] == 0.0f);
    free(gb);
    cg_tensor *ws[2] = {w1, w2};
    for (int k = 0; k < 2; k++) {
        float *g = cg_test_values(cg_grad(ws[k]));
        float *d = cg_data(ws[k]);
        for (int64_t j = 0; j < cg_numel(ws[k]); j++) {
            const float keep = d[j], h = 1e-2f;
            d[j] = keep + h;
            cg_tensor_modified(ws[k]);
            const double up = penalty(w1, b1, w2, x, false);
            d[j] = keep - h;
            cg_tensor_modified(ws[k]);
            const double dn = penalty(w1, b1, w2, x, false);
            d[j] = keep;
            cg_tensor_modified(ws[k]);
            const double num = (up - dn) / (2.0 * h);
            ck_assert_msg(fabs(g[j] - num) <= 3e-3 * (1 + fabs(num)), "w%d[%lld]: %.7g vs %.7g",
                          k + 1, (long long)j, (double)g[j], num);
        }
        free(g);
    }
    cg_release_all(4, x, w1, b1, w2);
}
END_TEST

/* A user-defined op whose backward composes differentiable ops takes
 * part in a create_graph walk; one written with kernels is refused */
static bool cube_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *x2 = cg_mul(n->inputs[0], n->inputs[0]), *t = x2 ? cg_muls(x2, 3.0f) : NULL;
    gin[0] = t ? cg_mul((cg_tensor *)g, t) : NULL;
    cg_release_all(2, x2, t);
    return gin[0] != NULL;
}
static cg_tensor *cube(cg_tensor *x, bool composes)
{
    cg_tensor *out = cg_k_pow(x, 3.0f);
    cg_node *n;
    ck_assert(cg_record_op(out, "cube", 1, &x, cube_bw, &n) == CG_RECORD_OK);
    cg_node_set_backward_differentiable(n, composes);
    return out;
}
START_TEST(test_user_op)
{
    cg_tensor *x = mk(0, NULL, (const float[]){2.0f}), *d1, *d2;
    cg_tensor *y = cube(x, true);
    cg_grad_opts o = {.create_graph = true};
    ck_assert(cg_autograd_grad(1, &y, NULL, 1, &x, &o, &d1));
    ck_assert(cg_autograd_grad(1, &d1, NULL, 1, &x, &o, &d2));
    ck_assert_float_eq(item(d1), 12.0f);
    ck_assert_float_eq(item(d2), 12.0f);
    cg_tensor *z = cube(x, false), *e;
    ck_assert(!cg_autograd_grad(1, &z, NULL, 1, &x, &o, &e));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'cube' has no differentiable backward"));
    cg_release_all(5, x, d1, d2, y, z);
}
END_TEST

/* Refusals, each one line and nothing computed */
START_TEST(test_refusals)
{
    cg_tensor *x = mk(1, (const int64_t[]){2}, (const float[]){1, 2}), *r = NULL;
    cg_tensor *c = cg_from_data(1, (const int64_t[]){2}, (const float[]){1, 2});
    cg_tensor *y = cg_sum_all(x);
    ck_assert(!cg_autograd_grad(1, &y, NULL, 1, &c, NULL, &r));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "input 0 does not require grad"));
    ck_assert(!cg_autograd_grad(1, &c, NULL, 1, &x, NULL, &r));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "does not require grad"));
    ck_assert(!cg_autograd_grad(0, &y, NULL, 1, &x, NULL, &r));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "at least one output"));
    cg_tensor *e = cg_mul(x, x);
    ck_assert(!cg_autograd_grad(1, &e, NULL, 1, &x, NULL, &r));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "must have one element"));
    /* an op without a differentiable backward: prod */
    cg_tensor *img =
        cg_requires_grad(cg_full_dtype(CG_F32, 3, (const int64_t[]){2, 2, 3}, 1.0), true);
    cg_tensor *k = NULL;
    cg_tensor *cv = cg_prod(img, 1, false), *s = cg_sum_all(cv);
    ck_assert(!cg_autograd_grad(1, &s, NULL, 1, &img, &(cg_grad_opts){.create_graph = true}, &r));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'prod' has no differentiable backward yet"));
    ck_assert(!img->grad && !r);
    /* and the graph is whole: the plain backward still runs */
    ck_assert(cg_backward(s, NULL, false));
    /* an op that has one, in a form it does not cover: refused up front */
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_tensor *w = mk(2, (const int64_t[]){3, 2}, (const float[]){1, 2, 3, 4, 5, 6});
    cg_tensor *xin = mk(2, (const int64_t[]){1, 2}, (const float[]){1, -1});
    cg_tensor *lin = cg_affine(xin, w, NULL), *ls = cg_sum_all(lin);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    ck_assert(!cg_autograd_grad(1, &ls, NULL, 1, &w, &(cg_grad_opts){.create_graph = true}, &r));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "'linear' kept bf16 copies of its inputs"));
    cg_release_all(4, w, xin, lin, ls);
    cg_release_all(9, x, c, y, e, img, k, cv, s, NULL);
}
END_TEST

static Suite *grad2_suite(void)
{
    Suite *s = suite_create("grad2");
    TCase *tc = tcase_create("grad2");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_second_derivatives);
    tcase_add_test(tc, test_same_first_order);
    tcase_add_test(tc, test_third_derivative);
    tcase_add_test(tc, test_hessian_vector_product);
    tcase_add_test(tc, test_only_what_reaches_the_inputs);
    tcase_add_test(tc, test_inputs_and_outputs);
    tcase_add_test(tc, test_backward_create_graph);
    tcase_add_test(tc, test_gradient_penalty);
    tcase_add_test(tc, test_user_op);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {grad2_suite()};
    return cg_test_run(s, 1);
}
