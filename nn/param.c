/* Weight norm and spectral norm (nn/param.h): the registry's parameter
 * swapped for PyTorch's, and a forward pre-hook per kind that recomputes
 * each reparametrised weight from graph ops and points the module's field
 * at it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "nn/param.h"

/* One reparametrised parameter of a module */
typedef struct {
    char *name;
    int dim;           /* weight norm: -1 the whole tensor */
    int n_iter;        /* spectral norm's power iterations */
    float eps;         /* spectral norm's */
    cg_tensor **field; /* what the module's forward reads */
    cg_tensor *weight; /* held: the weight *field points at */
} entry;

/* The ctx of a module's weight-norm hook, or of its spectral-norm hook */
typedef struct {
    entry *items;
    int n;
    cg_hook_handle hook;
} reparam;

static void reparam_free(void *ctx)
{
    reparam *r = ctx;
    for (int i = 0; i < r->n; i++) {
        free(r->items[i].name);
        cg_release_held(r->items[i].weight);
    }
    free(r->items);
    free(r);
}

static entry *find_entry(reparam *r, const char *name)
{
    for (int i = 0; r && i < r->n; i++)
        if (!strcmp(r->items[i].name, name))
            return &r->items[i];
    return NULL;
}

/* e's weight becomes w (a new reference, taken), and e's field points at it */
static void set_weight(entry *e, cg_tensor *w)
{
    cg_release_held(e->weight);
    e->weight = cg_hold(w);
    *e->field = w;
}

/* m's own parameter `name` + suffix (borrowed), or NULL */
static cg_tensor *own(const cg_module *m, const char *name, const char *suffix, bool buffer)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    for (int i = 0; !buffer && i < m->n_params; i++)
        if (!strcmp(m->params[i].name, full))
            return m->params[i].tensor;
    for (int i = 0; buffer && i < m->n_buffers; i++)
        if (!strcmp(m->buffers[i].name, full))
            return m->buffers[i].tensor;
    return NULL;
}

/* ------------------------------------------------------- weight norm */
/* norm_except_dim(v, 2, dim): the norm over every dim but dim (kept, the
 * others 1), or of the whole tensor (dim -1, 0-d) */
static cg_tensor *norm_except_dim(cg_tensor *v, int dim)
{
    cg_tensor *sq = cg_mul(v, v), *s = NULL;
    int dims[CG_MAX_DIMS], nd = 0;
    for (int d = 0; d < v->ndim; d++)
        if (d != dim)
            dims[nd++] = d;
    if (sq)
        s = dim < 0 ? cg_sum_all(sq) : nd ? cg_sum(sq, nd, dims, true) : cg_retain(sq);
    cg_tensor *n = s ? cg_sqrt(s) : NULL;
    cg_release_all(2, sq, s);
    return n;
}

/* torch._weight_norm(v, g, dim) = v * (g / norm_except_dim(v, 2, dim)) */
static cg_tensor *weight_norm_of(cg_tensor *g, cg_tensor *v, int dim)
{
    cg_tensor *n = norm_except_dim(v, dim), *q = n ? cg_div(g, n) : NULL;
    cg_tensor *w = q ? cg_mul(v, q) : NULL;
    cg_release_all(2, n, q);
    return w;
}

/* The weight of m's entry e from name_g and name_v, or NULL + error */
static cg_tensor *wn_weight(const cg_module *m, const entry *e)
{
    cg_tensor *g = own(m, e->name, "_g", false), *v = own(m, e->name, "_v", false);
    if (!g || !v) {
        cg_set_error("weight_norm: module %s lost parameter '%s_g' or '%s_v'", m->type, e->name,
                     e->name);
        return NULL;
    }
    return weight_norm_of(g, v, e->dim);
}

static bool wn_hook(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)n_in, (void)in;
    reparam *r = ctx;
    for (int i = 0; i < r->n; i++) {
        cg_tensor *w = wn_weight(m, &r->items[i]);
        if (!w)
            return false;
        set_weight(&r->items[i], w);
    }
    return true;
}

/* ---------------------------------------------------- spectral norm */
/* W as the matrix [h, w]: dim moved first, the rest flattened */
static cg_tensor *weight_mat(cg_tensor *W, int dim)
{
    int perm[CG_MAX_DIMS], k = 0;
    perm[k++] = dim;
    for (int d = 0; d < W->ndim; d++)
        if (d != dim)
            perm[k++] = d;
    cg_tensor *p = dim ? cg_permute(W, perm) : cg_retain(W);
    cg_tensor *r = p ? cg_reshape(p, 2, (int64_t[]){W->shape[dim], -1}) : NULL;
    cg_release(p);
    return r;
}

/* dst (a buffer [n]) = normalize(a @ x) (x [k]): x / max(||x||, eps) */
static bool mv_normalized(cg_tensor *dst, cg_tensor *a, cg_tensor *x, float eps)
{
    cg_tensor *col = cg_reshape(x, 2, (int64_t[]){cg_numel(x), 1});
    cg_tensor *y = col ? cg_matmul(a, col) : NULL;
    cg_tensor *f = y ? cg_reshape(y, 1, (int64_t[]){cg_numel(y)}) : NULL;
    cg_tensor *n = f ? cg_normalize(f, 2.0f, 0, eps) : NULL;
    bool ok = n && cg_copy_(dst, n);
    cg_release_all(4, col, y, f, n);
    return ok;
}

/* sigma = u . (Wm v) with copies of u and v, into a 0-d tensor */
static cg_tensor *sigma_of(cg_tensor *Wm, const cg_tensor *u, const cg_tensor *v)
{
    cg_tensor *uc = cg_clone(u), *vc = cg_clone(v);
    cg_tensor *vcol = vc ? cg_reshape(vc, 2, (int64_t[]){cg_numel(vc), 1}) : NULL;
    cg_tensor *ucol = uc ? cg_reshape(uc, 2, (int64_t[]){cg_numel(uc), 1}) : NULL;
    cg_tensor *wv = vcol && ucol ? cg_matmul(Wm, vcol) : NULL;
    cg_tensor *p = wv ? cg_mul(wv, ucol) : NULL, *s = p ? cg_sum_all(p) : NULL;
    cg_release_all(6, uc, vc, vcol, ucol, wv, p);
    return s;
}

/* W / sigma, after the power iterations when `iterate` */
static cg_tensor *spectral_of(const cg_module *m, const entry *e, bool iterate)
{
    cg_tensor *W = own(m, e->name, "_orig", false), *u = own(m, e->name, "_u", true),
              *v = own(m, e->name, "_v", true);
    if (!W || !u || !v) {
        cg_set_error("spectral_norm: module %s lost '%s_orig', '%s_u' or '%s_v'", m->type, e->name,
                     e->name, e->name);
        return NULL;
    }
    cg_tensor *Wm = weight_mat(W, e->dim);
    bool ok = Wm != NULL;
    if (ok && iterate) {
        cg_no_grad_begin();
        cg_tensor *Wt = cg_transpose(Wm, 0, 1);
        ok = Wt != NULL;
        for (int k = 0; ok && k < e->n_iter; k++)
            ok = mv_normalized(v, Wt, u, e->eps) && mv_normalized(u, Wm, v, e->eps);
        cg_release(Wt);
        cg_no_grad_end();
    }
    cg_tensor *s = ok ? sigma_of(Wm, u, v) : NULL, *w = s ? cg_div(W, s) : NULL;
    cg_release_all(2, Wm, s);
    return w;
}

static bool sn_hook(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)n_in, (void)in;
    reparam *r = ctx;
    for (int i = 0; i < r->n; i++) {
        cg_tensor *w = spectral_of(m, &r->items[i], m->training);
        if (!w)
            return false;
        set_weight(&r->items[i], w);
    }
    return true;
}

/* ------------------------------------------------------ attach, remove */
/* The checks both attaches share: m's own parameter `name` with its field,
 * not yet under this kind (r the kind's ctx, or NULL) */
static cg_named_tensor *attachable(const char *fn, cg_module *m, const char *name, reparam *r,
                                   const char *kind)
{
    if (!m || !name)
        return cg_error_null_input(fn), NULL;
    if (find_entry(r, name)) {
        cg_set_error("%s: cannot register two %s hooks on parameter '%s' of module %s", fn, kind,
                     name, m->type);
        return NULL;
    }
    for (int i = 0; i < m->n_params; i++) {
        cg_named_tensor *p = &m->params[i];
        if (strcmp(p->name, name) != 0)
            continue;
        if (!p->field) {
            cg_set_error("%s: parameter '%s' of module %s was registered without its field "
                         "(cg_module_add_param_at), so its forward cannot read the new weight",
                         fn, name, m->type);
            return NULL;
        }
        return p;
    }
    cg_set_error("%s: module %s has no parameter '%s' (a local name, no dots)", fn, m->type, name);
    return NULL;
}

/* m's ctx of this kind, made and its hook registered when there is none */
static reparam *reparam_of(cg_module *m, cg_forward_pre_hook fn)
{
    reparam *r = cg_module_find_hook(m, (const void *)fn);
    if (r)
        return r;
    if (!(r = calloc(1, sizeof *r))) {
        cg_set_error("module %s: out of memory adding a weight hook", m->type);
        return NULL;
    }
    r->hook = cg_module_register_forward_pre_hook(m, fn, r, reparam_free);
    return r->hook.id ? r : NULL; /* on failure reparam_free has run */
}

/* A new entry of r for name (its weight NULL), or NULL + error */
static entry *add_entry(reparam *r, const char *name, cg_tensor **field)
{
    entry *items = realloc(r->items, (size_t)(r->n + 1) * sizeof *items);
    char *nm = items ? malloc(strlen(name) + 1) : NULL;
    if (items)
        r->items = items;
    if (!nm) {
        cg_set_error("weight hook: out of memory");
        return NULL;
    }
    strcpy(nm, name);
    r->items[r->n] = (entry){.name = nm, .field = field};
    return &r->items[r->n++];
}

/* The name + suffix parameters / buffers added by an attach taken back */
static void undo(cg_module *m, const char *name, const char *const *params, int np,
                 const char *const *buffers, int nb)
{
    char full[256];
    for (int i = 0; i < np; i++) {
        if (snprintf(full, sizeof full, "%s%s", name, params[i]) < (int)sizeof full)
            cg_release(cg_module_remove_param(m, full, NULL));
    }
    for (int i = 0; i < nb; i++) {
        if (snprintf(full, sizeof full, "%s%s", name, buffers[i]) < (int)sizeof full)
            cg_release(cg_module_remove_buffer(m, full));
    }
}

/* Register t under name + suffix (buffer or parameter); t's reference is
 * released either way */
static bool add_named(cg_module *m, const char *name, const char *suffix, cg_tensor *t, bool buffer)
{
    char full[256];
    if (snprintf(full, sizeof full, "%s%s", name, suffix) >= (int)sizeof full) {
        cg_set_error("module %s: parameter name '%s' is too long", m->type, name);
        cg_release(t);
        return false;
    }
    bool ok =
        t && (buffer ? cg_module_add_buffer(m, full, t, true) : cg_module_add_param(m, full, t));
    cg_release(t);
    return ok;
}

/* The parameter `name` swapped for the attach's (already registered):
 * removed from the registry, an entry of r made, its weight w (a new
 * reference) */
static bool swap_in(cg_module *m, reparam *r, const char *name, cg_tensor *w, int dim)
{
    cg_tensor **field = NULL;
    entry *e = w ? add_entry(r, name, NULL) : NULL;
    cg_tensor *old = e ? cg_module_remove_param(m, name, &field) : NULL;
    if (!old) { /* out of memory (attachable found the parameter) */
        if (e)
            free(e->name), r->n--;
        cg_release(w);
        return false;
    }
    e->field = field;
    e->dim = dim;
    set_weight(e, w);
    cg_release(old);
    return true;
}

/* A kind's hook without entries (an attach failed) removed */
static void drop_if_empty(reparam *r)
{
    if (r && r->n == 0) {
        cg_hook_handle h = r->hook; /* its removal frees r */
        cg_hook_remove(&h);
    }
}

bool cg_weight_norm(cg_module *m, const char *name, int dim)
{
    reparam *have = m ? cg_module_find_hook(m, (const void *)wn_hook) : NULL;
    cg_named_tensor *p = attachable("cg_weight_norm", m, name, have, "weight_norm");
    if (!p)
        return false;
    cg_tensor *W = p->tensor;
    if (dim < -1 || dim >= W->ndim) {
        char s[96];
        cg_set_error("cg_weight_norm: dim %d is outside [-1, %d) for parameter '%s' %s of module "
                     "%s (-1: the whole tensor)",
                     dim, W->ndim, name, cg_shape_str(W, s, sizeof s), m->type);
        return false;
    }
    cg_no_grad_begin();
    cg_tensor *g = norm_except_dim(W, dim);
    cg_no_grad_end();
    static const char *const added[2] = {"_g", "_v"};
    if (!add_named(m, name, "_g", g, false))
        return false;
    if (!add_named(m, name, "_v", cg_retain(W), false)) {
        undo(m, name, added, 1, NULL, 0);
        return false;
    }
    reparam *r = reparam_of(m, wn_hook);
    cg_tensor *w =
        r ? weight_norm_of(own(m, name, "_g", false), own(m, name, "_v", false), dim) : NULL;
    if (!r || !swap_in(m, r, name, w, dim)) {
        drop_if_empty(r);
        undo(m, name, added, 2, NULL, 0);
        return false;
    }
    return true;
}

/* The weight (values now, a fresh leaf) registered as `name` again, e's
 * entry dropped from r and r's hook removed when it was the last */
static bool fold_back(cg_module *m, reparam *r, entry *e, cg_tensor *w)
{
    cg_no_grad_begin();
    cg_tensor *leaf = w ? cg_clone(w) : NULL;
    cg_no_grad_end();
    cg_release(w);
    if (!leaf || !cg_module_add_param_at(m, e->name, leaf, e->field)) {
        cg_release(leaf);
        return false;
    }
    cg_release(leaf);
    free(e->name);
    cg_release_held(e->weight);
    *e = r->items[--r->n];
    drop_if_empty(r);
    return true;
}

bool cg_remove_weight_norm(cg_module *m, const char *name)
{
    if (!m || !name)
        return cg_error_null_input("cg_remove_weight_norm");
    reparam *r = cg_module_find_hook(m, (const void *)wn_hook);
    entry *e = find_entry(r, name);
    if (!e) {
        cg_set_error("cg_remove_weight_norm: weight_norm of '%s' not found in module %s", name,
                     m->type);
        return false;
    }
    cg_no_grad_begin();
    cg_tensor *w = wn_weight(m, e);
    cg_no_grad_end();
    static const char *const added[2] = {"_g", "_v"};
    char saved[256];
    snprintf(saved, sizeof saved, "%s", name);
    if (!fold_back(m, r, e, w))
        return false;
    undo(m, saved, added, 2, NULL, 0);
    return true;
}

/* u or v: N(0, 1) of n elements normalised with eps, or NULL */
static cg_tensor *unit_draw(cg_rng *rng, int64_t n, float eps)
{
    cg_tensor *x = cg_randn(rng, 1, &n), *u = x ? cg_normalize(x, 2.0f, 0, eps) : NULL;
    cg_release(x);
    return u;
}

bool cg_spectral_norm(cg_module *m, const char *name, int n_power_iterations, float eps, int dim,
                      cg_rng *rng)
{
    reparam *have = m ? cg_module_find_hook(m, (const void *)sn_hook) : NULL;
    cg_named_tensor *p = attachable("cg_spectral_norm", m, name, have, "spectral_norm");
    if (!p)
        return false;
    cg_tensor *W = p->tensor;
    if (dim == CG_SPECTRAL_DIM_AUTO)
        dim = strncmp(m->type, "ConvTranspose", 13) == 0 ? 1 : 0;
    char s[96];
    if (n_power_iterations < 1 || !(eps >= 0 && isfinite(eps)) || dim < 0 || dim >= W->ndim) {
        cg_set_error("cg_spectral_norm: %s (parameter '%s' %s of module %s: n_power_iterations "
                     "%d, eps %g, dim %d)",
                     n_power_iterations < 1         ? "n_power_iterations must be positive"
                     : !(eps >= 0 && isfinite(eps)) ? "eps must be finite and not negative"
                                                    : "dim must be within [0, the weight's ndim)",
                     name, cg_shape_str(W, s, sizeof s), m->type, n_power_iterations, (double)eps,
                     dim);
        return false;
    }
    cg_rng own_rng = cg_rng_new(0);
    rng = rng ? rng : &own_rng;
    const int64_t h = W->shape[dim], w = h ? cg_numel(W) / h : 0;
    static const char *const params[1] = {"_orig"}, *const buffers[2] = {"_u", "_v"};
    cg_no_grad_begin();
    cg_tensor *u = unit_draw(rng, h, eps), *v = u ? unit_draw(rng, w, eps) : NULL;
    cg_no_grad_end();
    if (!v) {
        cg_release(u);
        return false;
    }
    if (!add_named(m, name, "_orig", cg_retain(W), false)) {
        cg_release_all(2, u, v);
        return false;
    }
    if (!add_named(m, name, "_u", u, true) || !add_named(m, name, "_v", v, true)) {
        undo(m, name, params, 1, buffers, 2);
        return false;
    }
    reparam *r = reparam_of(m, sn_hook);
    entry *e = NULL;
    if (!r || !swap_in(m, r, name, cg_retain(W), dim)) {
        drop_if_empty(r);
        undo(m, name, params, 1, buffers, 2);
        return false;
    }
    e = find_entry(r, name);
    e->n_iter = n_power_iterations;
    e->eps = eps;
    return true;
}

bool cg_remove_spectral_norm(cg_module *m, const char *name)
{
    if (!m || !name)
        return cg_error_null_input("cg_remove_spectral_norm");
    reparam *r = cg_module_find_hook(m, (const void *)sn_hook);
    entry *e = find_entry(r, name);
    if (!e) {
        cg_set_error("cg_remove_spectral_norm: spectral_norm of '%s' not found in module %s", name,
                     m->type);
        return false;
    }
    cg_no_grad_begin();
    cg_tensor *w = spectral_of(m, e, false);
    cg_no_grad_end();
    static const char *const params[1] = {"_orig"}, *const buffers[2] = {"_u", "_v"};
    char saved[256];
    snprintf(saved, sizeof saved, "%s", name);
    if (!fold_back(m, r, e, w))
        return false;
    undo(m, saved, params, 1, buffers, 2);
    return true;
}

/* ------------------------------ parameters_to_vector, vector_to_parameters */
cg_tensor *cg_parameters_to_vector(const cg_module *m)
{
    if (!m)
        return cg_error_null_input("cg_parameters_to_vector"), NULL;
    cg_param_list l = {0};
    if (!cg_module_params(m, &l)) {
        cg_param_list_free(&l); /* what it listed before it failed */
        return NULL;
    }
    cg_tensor *out = NULL;
    cg_tensor **flat = calloc((size_t)(l.n ? l.n : 1), sizeof *flat);
    bool ok = flat != NULL;
    if (!ok)
        cg_set_error("parameters_to_vector: out of memory");
    for (int i = 0; ok && i < l.n; i++) {
        if (l.items[i].tensor->dtype != l.items[0].tensor->dtype) {
            cg_set_error("parameters_to_vector: '%s' is %s, '%s' %s: one dtype expected",
                         l.items[i].name, cg_dtype_name(l.items[i].tensor->dtype), l.items[0].name,
                         cg_dtype_name(l.items[0].tensor->dtype));
            ok = false;
        }
        ok = ok && (flat[i] = cg_reshape(l.items[i].tensor, 1, (const int64_t[]){-1})) != NULL;
    }
    if (ok)
        out = l.n ? cg_concat(flat, l.n, 0) : cg_empty(1, (const int64_t[]){0});
    for (int i = 0; flat && i < l.n; i++)
        cg_release(flat[i]);
    free(flat);
    cg_param_list_free(&l);
    return out;
}

bool cg_vector_to_parameters(const cg_tensor *vec, cg_module *m)
{
    if (!vec || !m)
        return cg_error_null_input("cg_vector_to_parameters");
    if (vec->ndim != 1) {
        char b[96];
        cg_set_error("vector_to_parameters: vec must be 1-d (got %s)",
                     cg_shape_str(vec, b, sizeof b));
        return false;
    }
    cg_param_list l = {0};
    if (!cg_module_params(m, &l)) {
        cg_param_list_free(&l);
        return false;
    }
    int64_t total = 0;
    for (int i = 0; i < l.n; i++)
        total += cg_numel(l.items[i].tensor);
    bool ok = total == vec->shape[0];
    if (!ok)
        cg_set_error("vector_to_parameters: vec has %lld elements, the %d parameters %lld",
                     (long long)vec->shape[0], l.n, (long long)total);
    cg_tensor *vc = ok ? cg_k_contiguous(vec) : NULL;
    ok = ok && vc;
    int64_t at = 0;
    for (int i = 0; ok && i < l.n; i++) { /* each parameter's run of vec */
        cg_tensor *p = l.items[i].tensor;
        const int64_t k = cg_numel(p);
        cg_tensor *run = cg_view_slice(vc, 0, at, at + k, 1);
        cg_tensor *shaped = run ? cg_view_reshape(run, p->ndim, p->shape) : NULL;
        ok = shaped && cg_k_copy_(p, shaped);
        cg_release_all(2, run, shaped);
        at += k;
    }
    cg_release(vc);
    cg_param_list_free(&l);
    return ok;
}
