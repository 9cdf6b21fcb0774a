/* Basic layers: the activation and norm tables, Linear, Embedding,
 * LayerNorm/RMSNorm, Dropout, sinusoidal positions, FeedForward. Forward
 * passes are autograd ops (fused where it pays: cg_affine, cg_affine_relu,
 * a norm with its residual add); without a graph, a bf16 Linear reads the
 * weight's packed copy and FeedForward's ReLU runs in place (core
 * kernels). */
#include "nn/layers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "nn/init.h"

/* ----------------------------------------------------------- choices */
static cg_tensor *rms_norm3(cg_tensor *x, cg_tensor *w, cg_tensor *b, float eps)
{
    (void)b;
    return cg_rms_norm(x, w, eps);
}

static cg_tensor *add_rms_norm3(cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *b, float eps)
{
    (void)b;
    return cg_add_rms_norm(x, y, w, eps);
}

static cg_tensor *affine_gelu_tanh(cg_tensor *x, cg_tensor *w, cg_tensor *b)
{
    return cg_affine_gelu(x, w, b, false);
}
static cg_tensor *affine_gelu_erf(cg_tensor *x, cg_tensor *w, cg_tensor *b)
{
    return cg_affine_gelu(x, w, b, true);
}

static const cg_act_info ACTS[] = {
    [CG_ACT_RELU] = {"relu", cg_relu, "ReLU", NULL, cg_affine_relu, NULL},
    [CG_ACT_GELU] = {"gelu", cg_gelu, "GELU", "tanh", affine_gelu_tanh, NULL},
    [CG_ACT_GELU_ERF] = {"gelu_erf", cg_gelu_erf, "GELU", "none", affine_gelu_erf, NULL},
    [CG_ACT_SILU] = {"silu", cg_silu, "SiLU", NULL, NULL, NULL},
    [CG_ACT_SWIGLU] = {"swiglu", cg_swiglu_halves, "SwiGLU", NULL, NULL, cg_swiglu},
    [CG_ACT_GEGLU] = {"geglu", cg_geglu_halves, "GEGLU", "tanh", NULL, cg_geglu},
    [CG_ACT_TANH] = {"tanh", cg_tanh, "Tanh", NULL, NULL, NULL},
    [CG_ACT_SIGMOID] = {"sigmoid", cg_sigmoid, "Sigmoid", NULL, NULL, NULL},
    [CG_ACT_MISH] = {"mish", cg_mish, "Mish", NULL, NULL, NULL},
    [CG_ACT_HARDSWISH] = {"hardswish", cg_hardswish, "Hardswish", NULL, NULL, NULL},
    [CG_ACT_HARDSIGMOID] = {"hardsigmoid", cg_hardsigmoid, "Hardsigmoid", NULL, NULL, NULL},
    [CG_ACT_RELU6] = {"relu6", cg_relu6, "ReLU6", NULL, NULL, NULL},
    [CG_ACT_SELU] = {"selu", cg_selu, "SELU", NULL, NULL, NULL},
    [CG_ACT_SOFTSIGN] = {"softsign", cg_softsign, "Softsign", NULL, NULL, NULL},
    [CG_ACT_LOGSIGMOID] = {"logsigmoid", cg_logsigmoid, "LogSigmoid", NULL, NULL, NULL},
    [CG_ACT_TANHSHRINK] = {"tanhshrink", cg_tanhshrink, "Tanhshrink", NULL, NULL, NULL},
};
static const cg_norm_info NORMS[] = {
    [CG_NORM_LAYERNORM] = {"layernorm", "LayerNorm", true, cg_layer_norm, cg_add_layer_norm},
    [CG_NORM_RMSNORM] = {"rmsnorm", "RMSNorm", false, rms_norm3, add_rms_norm3},
};
_Static_assert(sizeof ACTS / sizeof ACTS[0] == CG_N_ACTS, "a row for every cg_act");
_Static_assert(sizeof NORMS / sizeof NORMS[0] == CG_N_NORMS, "a row for every cg_norm_kind");

/* A table's n rows of `size` bytes each begin with their name. */
#define ROW_NAME(rows, size, i) \
    (*(const char *const *)((const char *)(rows) + (size_t)(i) * (size)))

/* The names of the rows joined by sep. */
static const char *names(const void *rows, size_t size, int n, char *buf, size_t cap,
                         const char *sep)
{
    size_t k = 0;
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n && k < cap; i++) {
        int w = snprintf(buf + k, cap - k, "%s%s", i ? sep : "", ROW_NAME(rows, size, i));
        k += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

const char *cg_act_names(char *buf, size_t n, const char *sep)
{
    return names(ACTS, sizeof ACTS[0], CG_N_ACTS, buf, n, sep);
}

const char *cg_norm_names(char *buf, size_t n, const char *sep)
{
    return names(NORMS, sizeof NORMS[0], CG_N_NORMS, buf, n, sep);
}

/* The row called s, or -1 + "unknown KIND 's' (choices: ...)". */
static int by_name(const void *rows, size_t size, int n, const char *kind, const char *s)
{
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, ROW_NAME(rows, size, i)))
            return i;
    char list[160];
    cg_set_error("unknown %s '%s' (choices: %s)", kind, s ? s : "(null)",
                 names(rows, size, n, list, sizeof list, ", "));
    return -1;
}

/* Is i a row? Else false + "WHAT: unknown KIND i (choices: ...)". */
static bool in_table(const void *rows, size_t size, int n, const char *kind, int i,
                     const char *what)
{
    if (i >= 0 && i < n)
        return true;
    char list[160];
    cg_set_error("%s%sunknown %s %d (choices: %s)", what ? what : "", what ? ": " : "", kind, i,
                 names(rows, size, n, list, sizeof list, ", "));
    return false;
}

const cg_act_info *cg_act_info_of(cg_act a, const char *what)
{
    return in_table(ACTS, sizeof ACTS[0], CG_N_ACTS, "activation", (int)a, what) ? &ACTS[a] : NULL;
}

const cg_norm_info *cg_norm_info_of(cg_norm_kind k, const char *what)
{
    return in_table(NORMS, sizeof NORMS[0], CG_N_NORMS, "norm", (int)k, what) ? &NORMS[k] : NULL;
}

bool cg_act_parse(const char *s, cg_act *out)
{
    if (!out) {
        cg_set_error("cg_act_parse: argument 'out' is NULL");
        return false;
    }
    int i = by_name(ACTS, sizeof ACTS[0], CG_N_ACTS, "activation", s);
    if (i >= 0)
        *out = (cg_act)i;
    return i >= 0;
}

bool cg_norm_kind_parse(const char *s, cg_norm_kind *out)
{
    if (!out) {
        cg_set_error("cg_norm_kind_parse: argument 'out' is NULL");
        return false;
    }
    int i = by_name(NORMS, sizeof NORMS[0], CG_N_NORMS, "norm", s);
    if (i >= 0)
        *out = (cg_norm_kind)i;
    return i >= 0;
}

const char *cg_act_name(cg_act a) { return (int)a >= 0 && a < CG_N_ACTS ? ACTS[a].name : "?"; }

const char *cg_norm_kind_name(cg_norm_kind k)
{
    return (int)k >= 0 && k < CG_N_NORMS ? NORMS[k].name : "?";
}

cg_tensor *cg_activation(cg_tensor *x, cg_act act)
{
    if (!x) {
        cg_error_null_input("cg_activation");
        return NULL;
    }
    const cg_act_info *r = cg_act_info_of(act, "activation");
    return r ? r->forward(x) : NULL;
}

/* The one-tensor forwards (cg_module.forward), defined with each layer. */
static cg_tensor *linear_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *norm_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *drop_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *posenc_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *ff_impl(cg_module *m, cg_tensor *const *in, void *args);

/* A new parameter tensor registered under name and stored in *field, the
 * member the forward reads (so that cg_module_tie can rewrite it); NULL +
 * error on failure. */
static cg_tensor *new_param(cg_module *m, const char *name, cg_tensor **field, int ndim,
                            const int64_t *shape)
{
    cg_tensor *t = cg_zeros(ndim, shape);
    cg_tensor *r = cg_module_add_param_at(m, name, t, field);
    cg_release(t); /* the module holds its own reference */
    return r;
}

static bool positive(const char *op, const char *what, int64_t v)
{
    if (v <= 0)
        cg_set_error("%s: %s must be positive (got %lld)", op, what, (long long)v);
    return v > 0;
}

/* ------------------------------------------------------------ Linear */
cg_linear *cg_linear_new(int64_t in_features, int64_t out_features, bool bias, cg_rng *rng)
{
    if (!positive("Linear", "in_features", in_features) ||
        !positive("Linear", "out_features", out_features))
        return NULL;
    cg_rng local = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_linear *l = (cg_linear *)cg_module_alloc(sizeof *l, "Linear", NULL);
    if (!l)
        return NULL;
    l->base.forward = linear_impl;
    l->in_features = in_features;
    l->out_features = out_features;
    l->weight = new_param(&l->base, "weight", &l->weight, CG_SHAPE(out_features, in_features));
    bool ok = l->weight && cg_init_normal_(l->weight, rng, 0.0f, CG_INIT_STD);
    if (ok && bias)
        ok = (l->bias = new_param(&l->base, "bias", &l->bias, CG_SHAPE(out_features))) != NULL;
    if (!ok) {
        cg_module_free(&l->base);
        return NULL;
    }
    return l;
}

cg_tensor *cg_linear_fn(cg_tensor *x, cg_tensor *weight, cg_tensor *bias)
{
    if (!x || !weight) {
        cg_error_null_input("cg_linear_fn");
        return NULL;
    }
    /* The shapes are checked once, by core's product on either path
     * (core/linear_impl.h's linear_check: "linear: input ..., weight ...,
     * bias ...: need ... (x ends in 64, the weight's in is 32)").
     * Inference (no graph): the weight's packed copy, kept until the
     * weight is written; the bits of cg_affine, packing only x (in bf16
     * reading half the bytes: decoding is bound by them). */
    if (!cg_grad_enabled())
        return cg_k_linear_packed(x, weight, bias);
    return cg_affine(x, weight, bias); /* one fused op: GEMM with the bias */
}

static bool linear_input_ok(const cg_linear *l, const cg_tensor *x)
{
    if (x->ndim < 1 || x->shape[x->ndim - 1] != l->in_features) {
        char a[96], b[96];
        cg_set_error("Linear: input %s does not end in in_features %lld (weight %s)",
                     cg_shape_str(x, a, sizeof a), (long long)l->in_features,
                     cg_shape_str(l->weight, b, sizeof b));
        return false;
    }
    return true;
}

/* args: NULL, or a bool, true for cg_linear_forward_keep_bf16 */
static cg_tensor *linear_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_linear *l = (cg_linear *)m;
    if (!in[0] || !linear_input_ok(l, in[0]))
        return NULL;
    if (args && *(const bool *)args && cg_grad_enabled() &&
        cg_get_matmul_precision() == CG_PRECISION_BF16)
        return cg_affine_keep_bf16(in[0], l->weight, l->bias);
    return cg_linear_fn(in[0], l->weight, l->bias);
}

cg_tensor *cg_linear_forward(cg_linear *l, cg_tensor *x)
{
    if (!l || !x) {
        cg_error_null_input("cg_linear_forward");
        return NULL;
    }
    return cg_module_call(&l->base, linear_impl, 1, &x, NULL);
}

cg_tensor *cg_linear_forward_keep_bf16(cg_linear *l, cg_tensor *x)
{
    if (!l || !x) {
        cg_error_null_input("cg_linear_forward_keep_bf16");
        return NULL;
    }
    bool keep = true;
    return cg_module_call(&l->base, linear_impl, 1, &x, &keep);
}

cg_tensor *cg_residual_apply(const cg_residual *r, cg_tensor *y)
{
    if (!y)
        return NULL;
    if (!r)
        return cg_retain(y);
    if (r->res && !cg_same_shape(r->res, y)) { /* as the fused op: no broadcasting */
        char a[96], b[96];
        cg_set_error("residual: res %s does not match the sublayer's output %s",
                     cg_shape_str(r->res, a, sizeof a), cg_shape_str(y, b, sizeof b));
        return NULL;
    }
    if (r->res && !cg_check_f32("residual", "res", r->res)) /* as the fused op */
        return NULL;
    cg_tensor *d = cg_dropout(y, r->p, r->rng, r->training);
    if (!d || !r->res)
        return d;
    cg_tensor *out = cg_add(r->res, d);
    cg_release(d);
    return out;
}

/* r applied to y (released): a sublayer whose hooks see its own output */
static cg_tensor *residual_after(cg_tensor *y, const cg_residual *r)
{
    cg_tensor *out = cg_residual_apply(r, y);
    cg_release(y);
    return out;
}

cg_tensor *cg_linear_forward_residual(cg_linear *l, cg_tensor *x, const cg_residual *r)
{
    if (!l || !x) {
        cg_error_null_input("cg_linear_forward_residual");
        return NULL;
    }
    /* the hooks see the layer's own output; a freed layer is named there (checked mode) */
    if (!r || l->base.hooks || l->base.tag == CG_MODULE_FREED)
        return residual_after(cg_linear_forward(l, x), r);
    if (!linear_input_ok(l, x))
        return NULL;
    if (!cg_grad_enabled()) /* the kernel alone; bf16 on the weight's packed copy, as cg_linear_fn */
        return cg_k_linear_residual(x, l->weight, l->bias, r->res, r->training ? r->p : 0.0f,
                                    r->rng, NULL);
    return cg_affine_residual(x, l->weight, l->bias, r->res, r->p, r->rng, r->training);
}

/* act(l(x)), the bits of cg_activation(cg_linear_forward(l, x), act): one
 * op while gradients are recorded (the row's affine: cg_affine_relu keeps
 * no pre-activation; in bf16 the activation runs as the product writes),
 * without a graph the kernel alone, keeping nothing for a backward (bf16:
 * on the weight's packed copy, as the product writes; the output's bf16
 * rounding is kept for the next layer's product to read). */
static cg_tensor *linear_act(cg_linear *l, cg_tensor *x, cg_act act)
{
    const cg_act_info *r = cg_act_info_of(act, "activation");
    if (!r)
        return NULL;
    /* the hooks see the layer's own output; a row without a fused op (silu)
     * runs after the product */
    if ((l && l->base.hooks) || !r->affine) {
        cg_tensor *h = cg_linear_forward(l, x);
        cg_tensor *y = h ? r->forward(h) : NULL;
        cg_release(h);
        return y;
    }
    if (!l || !x || !linear_input_ok(l, x))
        return NULL;
    if (cg_grad_enabled())
        return r->affine(x, l->weight, l->bias);
    const cg_k_act k = act == CG_ACT_RELU   ? CG_K_ACT_RELU
                       : act == CG_ACT_GELU ? CG_K_ACT_GELU
                                            : CG_K_ACT_GELU_ERF;
    return cg_k_linear_act(x, l->weight, l->bias, k, NULL);
}

/* --------------------------------------------------------- Embedding */
cg_embed *cg_embed_new(int64_t num, int64_t dim, cg_rng *rng)
{
    if (!positive("Embedding", "num", num) || !positive("Embedding", "dim", dim))
        return NULL;
    cg_rng local = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_embed *e = (cg_embed *)cg_module_alloc(sizeof *e, "Embedding", NULL);
    if (!e)
        return NULL;
    e->num = num;
    e->dim = dim;
    e->weight = new_param(&e->base, "weight", &e->weight, CG_SHAPE(num, dim));
    if (!e->weight || !cg_init_normal_(e->weight, rng, 0.0f, CG_INIT_STD)) {
        cg_module_free(&e->base);
        return NULL;
    }
    return e;
}

static cg_tensor *embed_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    return cg_embedding(((cg_embed *)m)->weight, in[0]);
}

cg_tensor *cg_embed_forward(cg_embed *e, const cg_tensor *ids)
{
    if (!e) {
        cg_error_null_input("cg_embed_forward");
        return NULL;
    }
    if (!cg_check_ids("Embedding", "ids", ids))
        return NULL;
    cg_tensor *in = (cg_tensor *)ids; /* the hooks see the ids, as PyTorch's do */
    return cg_module_call(&e->base, embed_impl, 1, &in, NULL);
}

/* -------------------------------------------------- LayerNorm/RMSNorm */
cg_norm_opts cg_norm_opts_default(void)
{
    return (cg_norm_opts){.eps = CG_NORM_EPS, .elementwise_affine = true, .bias = true};
}

cg_norm *cg_norm_new_opts(cg_norm_kind kind, int64_t dim, const cg_norm_opts *opts)
{
    const cg_norm_info *r = cg_norm_info_of(kind, "norm");
    if (!r)
        return NULL;
    const char *type = r->type;
    const cg_norm_opts o = opts ? *opts : cg_norm_opts_default();
    if (!positive(type, "dim", dim))
        return NULL;
    if (!(o.eps >= 0) || !isfinite(o.eps)) {
        cg_set_error("%s: eps must be finite and >= 0 (got %g)", type, (double)o.eps);
        return NULL;
    }
    cg_norm *n = (cg_norm *)cg_module_alloc(sizeof *n, type, NULL);
    if (!n)
        return NULL;
    n->base.forward = norm_impl;
    n->kind = kind;
    n->dim = dim;
    n->eps = o.eps;
    bool ok = true;
    if (o.elementwise_affine)
        ok = (n->weight = new_param(&n->base, "weight", &n->weight, CG_SHAPE(dim))) &&
             cg_init_ones_(n->weight);
    if (ok && r->bias && o.elementwise_affine && o.bias)
        ok = (n->bias = new_param(&n->base, "bias", &n->bias, CG_SHAPE(dim))) != NULL;
    if (!ok) {
        cg_module_free(&n->base);
        return NULL;
    }
    return n;
}

cg_norm *cg_norm_new(cg_norm_kind kind, int64_t dim) { return cg_norm_new_opts(kind, dim, NULL); }

cg_norm *cg_layernorm_new(int64_t dim) { return cg_norm_new(CG_NORM_LAYERNORM, dim); }

cg_norm *cg_rmsnorm_new(int64_t dim) { return cg_norm_new(CG_NORM_RMSNORM, dim); }

/* x's last dimension is the norm's. */
static bool norm_input_ok(const cg_norm *n, const cg_tensor *x)
{
    if (x->ndim < 1 || x->shape[x->ndim - 1] != n->dim) {
        char a[96];
        cg_set_error("%s: input %s does not end in dim %lld", n->base.type,
                     cg_shape_str(x, a, sizeof a), (long long)n->dim);
        return false;
    }
    return true;
}

static cg_tensor *norm_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_norm *n = (cg_norm *)m;
    cg_tensor *x = in[0];
    if (!x || !norm_input_ok(n, x))
        return NULL;
    return cg_norm_info_of(n->kind, NULL)->forward(x, n->weight, n->bias, n->eps);
}

cg_tensor *cg_norm_forward(cg_norm *n, cg_tensor *x)
{
    if (!n || !x) {
        cg_error_null_input("cg_norm_forward");
        return NULL;
    }
    return cg_module_call(&n->base, norm_impl, 1, &x, NULL);
}

cg_tensor *cg_norm_add_forward(cg_norm *n, cg_tensor *x, cg_tensor *y)
{
    if (!n || !x || !y || !norm_input_ok(n, x)) {
        cg_error_null_input("cg_norm_add_forward");
        return NULL;
    }
    if (n->base.hooks) { /* the hooks see the norm's input x + y */
        cg_tensor *s = cg_add(x, y);
        cg_tensor *r = cg_norm_forward(n, s);
        cg_release(s);
        return r;
    }
    return cg_norm_info_of(n->kind, NULL)->add_forward(x, y, n->weight, n->bias, n->eps);
}

/* ----------------------------------------------------------- Dropout */
cg_drop *cg_drop_new(float p, cg_rng *rng) { return cg_drop_new_kind(CG_DROPOUT_PLAIN, p, rng); }

/* Each kind's module type and op */
static const struct {
    const char *type;
    cg_tensor *(*op)(cg_tensor *x, float p, cg_rng *rng, bool training);
} drop_kinds[] = {
    [CG_DROPOUT_PLAIN] = {"Dropout", cg_dropout},
    [CG_DROPOUT_1D] = {"Dropout1d", cg_dropout1d},
    [CG_DROPOUT_2D] = {"Dropout2d", cg_dropout2d},
    [CG_DROPOUT_3D] = {"Dropout3d", cg_dropout3d},
    [CG_DROPOUT_ALPHA] = {"AlphaDropout", cg_alpha_dropout},
    [CG_DROPOUT_FEATURE_ALPHA] = {"FeatureAlphaDropout", cg_feature_alpha_dropout},
};

cg_drop *cg_drop_new_kind(cg_dropout_kind kind, float p, cg_rng *rng)
{
    if ((unsigned)kind >= sizeof drop_kinds / sizeof *drop_kinds) {
        cg_set_error("Dropout: unknown kind %d", (int)kind);
        return NULL;
    }
    if (!(p >= 0.0f && p <= 1.0f)) { /* as cg_dropout: p = 1 drops everything */
        cg_set_error("%s: p must be in [0, 1] (got %g)", drop_kinds[kind].type, (double)p);
        return NULL;
    }
    cg_drop *d = (cg_drop *)cg_module_alloc(sizeof *d, drop_kinds[kind].type, NULL);
    if (!d)
        return NULL;
    d->base.forward = drop_impl;
    d->p = p;
    d->own_rng = cg_rng_new(0);
    d->rng = rng ? rng : &d->own_rng;
    d->kind = kind;
    return d;
}

static cg_tensor *drop_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_drop *d = (cg_drop *)m;
    return drop_kinds[d->kind].op(in[0], d->p, d->rng, d->base.training);
}

cg_tensor *cg_drop_forward(cg_drop *d, cg_tensor *x)
{
    if (!d || !x) {
        cg_error_null_input("cg_drop_forward");
        return NULL;
    }
    return cg_module_call(&d->base, drop_impl, 1, &x, NULL);
}

/* ------------------------------------------------ sinusoidal positions */
cg_tensor *cg_sinusoidal_pe(int64_t max_len, int64_t d)
{
    if (!positive("sinusoidal_pe", "max_len", max_len) || !positive("sinusoidal_pe", "d", d))
        return NULL;
    cg_tensor *pe = cg_empty(CG_SHAPE(max_len, d));
    if (!pe)
        return NULL;
    float *v = cg_data(pe);
    for (int64_t c = 0; c < d; c++) {
        /* column c uses 2i = c rounded down to even */
        double div = pow(10000.0, (double)(c - (c & 1)) / (double)d);
        for (int64_t pos = 0; pos < max_len; pos++) {
            double angle = (double)pos / div;
            v[pos * d + c] = (float)((c & 1) ? cos(angle) : sin(angle));
        }
    }
    return pe;
}

cg_posenc *cg_posenc_new(int64_t max_len, int64_t dim)
{
    cg_tensor *pe = cg_sinusoidal_pe(max_len, dim);
    if (!pe)
        return NULL;
    cg_posenc *p = (cg_posenc *)cg_module_alloc(sizeof *p, "PositionalEncoding", NULL);
    /* register_buffer('pe', pe, persistent=False): the module holds it */
    if (p && !(p->pe = cg_module_add_buffer(&p->base, "pe", pe, false))) {
        cg_module_free(&p->base);
        p = NULL;
    }
    cg_release(pe);
    if (!p)
        return NULL;
    p->base.forward = posenc_impl;
    p->max_len = max_len;
    p->dim = dim;
    return p;
}

cg_tensor *cg_posenc_rows(cg_posenc *p, int64_t start, int64_t len)
{
    if (!p) {
        cg_error_null_input("cg_posenc_rows");
        return NULL;
    }
    if (start < 0 || len < 0 || start + len > p->max_len) {
        cg_set_error("PositionalEncoding: positions [%lld, %lld) exceed max_len %lld",
                     (long long)start, (long long)(start + len), (long long)p->max_len);
        return NULL;
    }
    return cg_view_narrow(p->pe, 0, start, len);
}

static cg_tensor *posenc_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_posenc *p = (cg_posenc *)m;
    cg_tensor *x = in[0];
    if (!x)
        return NULL;
    if (x->ndim < 2 || x->shape[x->ndim - 1] != p->dim) {
        char a[96];
        cg_set_error("PositionalEncoding: input %s must be [..., T, %lld]",
                     cg_shape_str(x, a, sizeof a), (long long)p->dim);
        return NULL;
    }
    int64_t T = x->shape[x->ndim - 2];
    if (T > p->max_len) {
        cg_set_error("PositionalEncoding: sequence length %lld exceeds max_len %lld", (long long)T,
                     (long long)p->max_len);
        return NULL;
    }
    cg_tensor *rows = cg_posenc_rows(p, 0, T);
    cg_tensor *y = cg_add(x, rows);
    cg_release(rows);
    return y;
}

cg_tensor *cg_posenc_forward(cg_posenc *p, cg_tensor *x)
{
    if (!p || !x) {
        cg_error_null_input("cg_posenc_forward");
        return NULL;
    }
    return cg_module_call(&p->base, posenc_impl, 1, &x, NULL);
}

/* ------------------------------------------------------- FeedForward */
cg_ff *cg_ff_new(int64_t d, int64_t d_ff, cg_act act, cg_rng *rng)
{
    return cg_ff_new_bias(d, d_ff, act, true, rng);
}

cg_ff *cg_ff_new_bias(int64_t d, int64_t d_ff, cg_act act, bool bias, cg_rng *rng)
{
    if (!cg_act_info_of(act, "FeedForward"))
        return NULL;
    if (!positive("FeedForward", "d", d) || !positive("FeedForward", "d_ff", d_ff))
        return NULL;
    cg_rng local = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_ff *f = (cg_ff *)cg_module_alloc(sizeof *f, "FeedForward", NULL);
    if (!f)
        return NULL;
    f->base.forward = ff_impl;
    f->act = act;
    f->fc1 = cg_module_add_child(&f->base, "fc1", cg_linear_new(d, d_ff, bias, rng));
    f->fc2 =
        f->fc1 ? cg_module_add_child(&f->base, "fc2", cg_linear_new(d_ff, d, bias, rng)) : NULL;
    if (f->fc2 && cg_act_info_of(act, NULL)->gate)
        f->fc3 = cg_module_add_child(&f->base, "fc3", cg_linear_new(d, d_ff, bias, rng));
    if (!f->fc2 || (cg_act_info_of(act, NULL)->gate && !f->fc3)) {
        cg_module_free(&f->base);
        return NULL;
    }
    return f;
}

/* act(fc1 x) * fc3 x, a gated FF's hidden layer: one product of width
 * 2 d_ff, x [fc1.weight; fc3.weight]^T + [fc1.bias; fc3.bias]
 * (cg_affine_pair_keep_bf16: the weights stacked for the call, a copy of
 * 2 d_ff x d small beside the product of every row of x with them and not
 * kept for the backward, and one packing of x instead of two), whose
 * halves the gate reads in one pass (cg_swiglu_halves), writing the
 * product's whole gradient in one pass too. With hooks on fc1 or fc3
 * (which see their layer's own output), and without a graph (evaluation,
 * decoding: each weight's packed copy is kept by the weight cache, where
 * a concatenation made for the call was packed again at every call;
 * sampling a charlm base 26% faster): the two products, then the gate. */
static cg_tensor *gated_ff(cg_ff *f, cg_tensor *x)
{
    const cg_act_info *r = cg_act_info_of(f->act, NULL);
    if (f->fc1->base.hooks || f->fc3->base.hooks || !cg_grad_enabled()) {
        cg_tensor *g = cg_linear_forward(f->fc1, x);
        cg_tensor *u = g ? cg_linear_forward(f->fc3, x) : NULL;
        cg_tensor *a = u ? r->gate(g, u) : NULL;
        cg_release_all(2, g, u);
        return a;
    }
    if (!linear_input_ok(f->fc1, x))
        return NULL;
    /* h's bf16 rounding made as the product writes it (bf16 precision):
     * what the gate keeps for its backward */
    cg_tensor *h =
        cg_affine_pair_keep_bf16(x, f->fc1->weight, f->fc3->weight, f->fc1->bias, f->fc3->bias);
    cg_tensor *a = h ? r->forward(h) : NULL;
    cg_release(h);
    return a;
}

/* args: the cg_residual fc2 applies, or NULL */
static cg_tensor *ff_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_ff *f = (cg_ff *)m;
    cg_tensor *x = in[0];
    cg_tensor *a = f->fc3 ? gated_ff(f, x) : linear_act(f->fc1, x, f->act);
    cg_tensor *y = a ? cg_linear_forward_residual(f->fc2, a, args) : NULL;
    cg_release(a);
    return y;
}

cg_tensor *cg_ff_forward(cg_ff *f, cg_tensor *x)
{
    if (!f || !x) {
        cg_error_null_input("cg_ff_forward");
        return NULL;
    }
    return cg_module_call(&f->base, ff_impl, 1, &x, NULL);
}

cg_tensor *cg_ff_forward_residual(cg_ff *f, cg_tensor *x, const cg_residual *r)
{
    if (!f || !x) {
        cg_error_null_input("cg_ff_forward_residual");
        return NULL;
    }
    if (r && f->base.hooks) /* the hooks see the module's own output */
        return residual_after(cg_ff_forward(f, x), r);
    return cg_module_call(&f->base, ff_impl, 1, &x, (void *)r);
}
