/* Containers and the one-tensor forward (nn/module.h): cg_module_forward,
 * cg_module_append, cg_sequential; activation modules (nn/layers.h). */
#include <stdarg.h>
#include <stdio.h>

#include "autograd/ops.h"
#include "nn/layers.h"

cg_tensor *cg_module_forward(cg_module *m, cg_tensor *x)
{
    if (!m || !x) {
        cg_error_null_input("cg_module_forward");
        return NULL;
    }
    if (!cg_module_live(m, "forward"))
        return NULL;
    if (!m->forward) {
        cg_set_error("%s: no one-tensor forward (call its own forward function; a module of "
                     "your own that maps one tensor to one sets base.forward)",
                     m->type);
        return NULL;
    }
    return cg_module_call(m, m->forward, 1, &x, NULL);
}

void *cg_module_append(cg_module *list, void *child)
{
    char name[24];
    snprintf(name, sizeof name, "%d", list ? list->n_children : 0);
    return cg_module_add_child(list, name, child);
}

static cg_tensor *sequential_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_tensor *h = cg_retain(in[0]);
    for (int i = 0; i < m->n_children && h; i++) {
        cg_tensor *y = cg_module_forward(m->children[i].module, h);
        cg_release(h);
        h = y;
    }
    return h;
}

cg_module *cg_sequential(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    cg_module *s = n >= 0 ? cg_module_new("Sequential") : NULL;
    bool ok = s != NULL;
    if (s)
        s->forward = sequential_impl;
    else if (n < 0)
        cg_set_error("Sequential: n must be >= 0 (got %d)", n);
    for (int i = 0; i < n; i++) {
        cg_module *c = va_arg(ap, void *);
        if (ok && c && !c->forward) {
            cg_set_error("Sequential: module %d (%s) has no one-tensor forward (a module of your "
                         "own sets base.forward)",
                         i, c->type);
            ok = false;
        }
        if (!ok || !c || !cg_module_append(s, c)) { /* take what is left */
            if (ok && c)
                c = NULL; /* the failed append freed it */
            ok = false;
            if (c && c->n_owners == 0)
                cg_module_free(c);
        }
    }
    va_end(ap);
    if (!ok) {
        cg_error_null_input("cg_sequential"); /* a NULL module (a failed constructor) */
        cg_module_free(s);
        return NULL;
    }
    return s;
}

typedef struct {
    cg_module base;
    cg_act act;
} act_module;

static cg_tensor *act_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    return cg_activation(in[0], ((act_module *)m)->act);
}

cg_module *cg_activation_new(cg_act act)
{
    const cg_act_info *r = cg_act_info_of(act, "activation");
    act_module *a = r ? (act_module *)cg_module_alloc(sizeof *a, r->type, NULL) : NULL;
    if (!a)
        return NULL;
    a->act = act;
    a->base.forward = act_impl;
    return &a->base;
}

/* An activation with one or two parameters: its function and them */
typedef struct {
    cg_module base;
    cg_tensor *(*one)(cg_tensor *x, float a);
    cg_tensor *(*two)(cg_tensor *x, float a, float b);
    float a, b;
} param_act;

static cg_tensor *param_act_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    const param_act *p = (const param_act *)m;
    return p->one ? p->one(in[0], p->a) : p->two(in[0], p->a, p->b);
}

static cg_module *param_act_new(const char *type, cg_tensor *(*one)(cg_tensor *, float),
                                cg_tensor *(*two)(cg_tensor *, float, float), float a, float b)
{
    param_act *p = (param_act *)cg_module_alloc(sizeof *p, type, NULL);
    if (!p)
        return NULL;
    *p = (param_act){p->base, one, two, a, b};
    p->base.forward = param_act_impl;
    return &p->base;
}

cg_module *cg_leaky_relu_new(float negative_slope)
{
    return param_act_new("LeakyReLU", cg_leaky_relu, NULL, negative_slope, 0);
}
cg_module *cg_elu_new(float alpha) { return param_act_new("ELU", cg_elu, NULL, alpha, 0); }
cg_module *cg_celu_new(float alpha) { return param_act_new("CELU", cg_celu, NULL, alpha, 0); }
cg_module *cg_softplus_new(float beta, float threshold)
{
    return param_act_new("Softplus", NULL, cg_softplus, beta, threshold);
}
cg_module *cg_hardtanh_new(float min_val, float max_val)
{
    return param_act_new("Hardtanh", NULL, cg_hardtanh, min_val, max_val);
}
cg_module *cg_softshrink_new(float lambd)
{
    return param_act_new("Softshrink", cg_softshrink, NULL, lambd, 0);
}
cg_module *cg_hardshrink_new(float lambd)
{
    return param_act_new("Hardshrink", cg_hardshrink, NULL, lambd, 0);
}
cg_module *cg_threshold_new(float threshold, float value)
{
    return param_act_new("Threshold", NULL, cg_threshold, threshold, value);
}

/* nn.PReLU: its weight [num_parameters], a parameter */
typedef struct {
    cg_module base;
    cg_tensor *weight;
} prelu_module;

static cg_tensor *prelu_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    return cg_prelu(in[0], ((prelu_module *)m)->weight);
}

cg_module *cg_prelu_new(int64_t num_parameters, float init)
{
    if (num_parameters < 1) {
        cg_set_error("PReLU: num_parameters must be at least 1 (got %lld)",
                     (long long)num_parameters);
        return NULL;
    }
    prelu_module *p = (prelu_module *)cg_module_alloc(sizeof *p, "PReLU", NULL);
    if (!p)
        return NULL;
    p->base.forward = prelu_impl;
    cg_tensor *w = cg_full(CG_SHAPE(num_parameters), init);
    const bool ok = w && cg_module_add_param_at(&p->base, "weight", w, &p->weight);
    cg_release(w);
    if (!ok) {
        cg_module_free(&p->base);
        return NULL;
    }
    return &p->base;
}

/* nn.RReLU: its bounds and generator */
typedef struct {
    cg_module base;
    float lower, upper;
    cg_rng *rng;
    cg_rng own_rng;
} rrelu_module;

static cg_tensor *rrelu_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    rrelu_module *r = (rrelu_module *)m;
    return cg_rrelu(in[0], r->lower, r->upper, m->training, r->rng);
}

cg_module *cg_rrelu_new(float lower, float upper, cg_rng *rng)
{
    if (!cg_k_rrelu_bounds_ok(lower, upper)) {
        cg_prefix_error("RReLU: ");
        return NULL;
    }
    rrelu_module *r = (rrelu_module *)cg_module_alloc(sizeof *r, "RReLU", NULL);
    if (!r)
        return NULL;
    r->base.forward = rrelu_impl;
    r->lower = lower;
    r->upper = upper;
    r->own_rng = cg_rng_new(0);
    r->rng = rng ? rng : &r->own_rng;
    return &r->base;
}

/* A module of one dim: GLU, Softmax, LogSoftmax, Softmin, Softmax2d */
typedef enum { DIM_GLU, DIM_SOFTMAX, DIM_LOG_SOFTMAX, DIM_SOFTMIN, DIM_SOFTMAX2D } dim_kind;
typedef struct {
    cg_module base;
    dim_kind kind;
    int dim;
} dim_module;

static cg_tensor *dim_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    const dim_module *d = (const dim_module *)m;
    cg_tensor *x = in[0], *y = NULL;
    switch (d->kind) {
    case DIM_GLU: return cg_glu(x, d->dim);
    case DIM_SOFTMAX: return cg_softmax(x, d->dim);
    case DIM_LOG_SOFTMAX: return cg_log_softmax(x, d->dim);
    case DIM_SOFTMIN: /* softmax(-x) */
        y = cg_neg(x);
        x = y ? cg_softmax(y, d->dim) : NULL;
        cg_release(y);
        return x;
    case DIM_SOFTMAX2D:
        if (x->ndim != 3 && x->ndim != 4) {
            char s[96];
            cg_set_error("Softmax2d: the input must be 3-d or 4-d, [(N,) C, H, W] (got %s)",
                         cg_shape_str(x, s, sizeof s));
            return NULL;
        }
        return cg_softmax(x, -3);
    }
    return NULL;
}

static cg_module *dim_new(const char *type, dim_kind kind, int dim)
{
    dim_module *d = (dim_module *)cg_module_alloc(sizeof *d, type, NULL);
    if (!d)
        return NULL;
    d->base.forward = dim_impl;
    d->kind = kind;
    d->dim = dim;
    return &d->base;
}

cg_module *cg_glu_new(int dim) { return dim_new("GLU", DIM_GLU, dim); }
cg_module *cg_softmax_new(int dim) { return dim_new("Softmax", DIM_SOFTMAX, dim); }
cg_module *cg_log_softmax_new(int dim) { return dim_new("LogSoftmax", DIM_LOG_SOFTMAX, dim); }
cg_module *cg_softmin_new(int dim) { return dim_new("Softmin", DIM_SOFTMIN, dim); }
cg_module *cg_softmax2d_new(void) { return dim_new("Softmax2d", DIM_SOFTMAX2D, -3); }

cg_module *cg_mlp(int n, const int64_t *sizes, cg_act act, cg_rng *rng)
{
    if (n < 2 || !sizes) {
        cg_set_error("MLP: need at least 2 sizes (got %d)", sizes ? n : 0);
        return NULL;
    }
    const cg_act_info *r = cg_act_info_of(act, "MLP");
    if (!r)
        return NULL;
    if (r->gate) { /* each hidden layer would halve its width */
        cg_set_error("MLP: a gated activation (%s) halves its input; use a FeedForward "
                     "(cg_ff_new) or cg_activation on a layer twice as wide",
                     r->name);
        return NULL;
    }
    cg_module *s = cg_sequential(0);
    if (s)
        s->type = "MLP";
    for (int i = 0; s && i + 1 < n; i++) {
        if (!cg_module_append(s, cg_linear_new(sizes[i], sizes[i + 1], true, rng)) ||
            (i + 2 < n && !cg_module_append(s, cg_activation_new(act)))) {
            cg_module_free(s);
            return NULL;
        }
    }
    return s;
}

bool cg_module_load_file(cg_module *m, const char *path)
{
    if (!m || !path) {
        cg_error_null_input("cg_module_load_file");
        return false;
    }
    cg_st_file *f = cg_st_open(path);
    bool ok = f && cg_module_load(m, f, NULL);
    cg_st_close(f);
    return ok;
}
