/* Module base: parameter/child registry, traversal (save/load: module_io.c). */
#include "nn/module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lifetime.h"

/* ------------------------------------------------------------ building */
cg_module *cg_module_alloc(size_t size, const char *type, void (*destroy)(cg_module *m))
{
    if (size < sizeof(cg_module)) {
        cg_set_error("module: struct size %zu is smaller than cg_module", size);
        return NULL;
    }
    cg_module *m = calloc(1, size);
    if (!m) {
        cg_set_error("module %s: out of memory", type ? type : "?");
        return NULL;
    }
    m->tag = CG_MODULE_TAG;
    m->type = type ? type : "Module";
    m->training = true;
    m->destroy = destroy;
    return m;
}

cg_module *cg_module_new(const char *type)
{
    return cg_module_alloc(sizeof(cg_module), type, NULL);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* A local name must be non-empty, dot-free and not yet used in m. */
static bool check_local_name(const cg_module *m, const char *what, const char *name)
{
    if (!name || !*name || strchr(name, '.')) {
        cg_set_error("module %s: %s name '%s' must be non-empty and contain no '.'", m->type, what,
                     name ? name : "(null)");
        return false;
    }
    for (int i = 0; i < m->n_params; i++) {
        if (!strcmp(m->params[i].name, name)) {
            cg_set_error("module %s: name '%s' is already a parameter", m->type, name);
            return false;
        }
    }
    for (int i = 0; i < m->n_buffers; i++) {
        if (!strcmp(m->buffers[i].name, name)) {
            cg_set_error("module %s: name '%s' is already a buffer", m->type, name);
            return false;
        }
    }
    for (int i = 0; i < m->n_children; i++) {
        if (!strcmp(m->children[i].name, name)) {
            cg_set_error("module %s: name '%s' is already a child module", m->type, name);
            return false;
        }
    }
    return true;
}

static bool grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap * 2 : 4;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = nc;
    return true;
}

bool cg_module_live(const cg_module *m, const char *fn)
{
    if (!m || !cg_debug_enabled() || m->tag != CG_MODULE_FREED)
        return true;
    cg_debug_report("%s: module %s was already freed (by cg_module_free)", fn, m->type);
    return false;
}

cg_tensor *cg_module_add_param(cg_module *m, const char *name, cg_tensor *t)
{
    return cg_module_add_param_at(m, name, t, NULL);
}

cg_tensor *cg_module_add_param_at(cg_module *m, const char *name, cg_tensor *t, cg_tensor **field)
{
    if (!m || !t) {
        cg_error_null_input("cg_module_add_param");
        return NULL;
    }
    if (!cg_module_live(m, "cg_module_add_param"))
        return NULL;
    if (!check_local_name(m, "parameter", name))
        return NULL;
    if (t->node) {
        cg_set_error("module %s: parameter '%s' must be a leaf tensor (it was made by an op)",
                     m->type, name);
        return NULL;
    }
    /* what the optimizers update and the kernels read: float32 memory in
     * one flat run (a contiguous view at an offset is one) */
    if (t->dtype != CG_F32) {
        cg_set_error("module %s: parameter '%s' is %s, expected float32 (convert with cg_to)",
                     m->type, name, cg_dtype_name(t->dtype));
        return NULL;
    }
    if (!cg_is_contiguous(t)) {
        cg_set_error("module %s: parameter '%s' is not contiguous (the optimizer updates a "
                     "parameter as one flat run: cg_contiguous)",
                     m->type, name);
        return NULL;
    }
    char *nm = dup_str(name);
    if (!nm || !grow((void **)&m->params, &m->cap_params, m->n_params + 1, sizeof *m->params)) {
        free(nm);
        cg_set_error("module %s: out of memory adding parameter '%s'", m->type, name);
        return NULL;
    }
    if (!cg_requires_grad(t, true)) {
        free(nm);
        return NULL;
    }
    m->params[m->n_params].name = nm;
    m->params[m->n_params].tensor = cg_hold(cg_retain(t)); /* beyond any scope */
    m->params[m->n_params].field = field;
    m->n_params++;
    if (field)
        *field = t;
    if (cg_debug_enabled())
        cg_lifetime_set_name(t, name, false); /* a tied tensor keeps its first name */
    return t;
}

cg_tensor *cg_module_add_buffer(cg_module *m, const char *name, cg_tensor *t, bool persistent)
{
    if (!m || !t) {
        cg_error_null_input("cg_module_add_buffer");
        return NULL;
    }
    if (!cg_module_live(m, "cg_module_add_buffer"))
        return NULL;
    if (!check_local_name(m, "buffer", name))
        return NULL;
    if (t->requires_grad || t->node) {
        cg_set_error("module %s: buffer '%s' requires grad (a trained tensor is a parameter: "
                     "cg_module_add_param; or cg_detach it)",
                     m->type, name);
        return NULL;
    }
    if (!cg_is_contiguous(t)) {
        cg_set_error("module %s: buffer '%s' is not contiguous (cg_contiguous)", m->type, name);
        return NULL;
    }
    char *nm = dup_str(name);
    if (!nm || !grow((void **)&m->buffers, &m->cap_buffers, m->n_buffers + 1, sizeof *m->buffers)) {
        free(nm);
        cg_set_error("module %s: out of memory adding buffer '%s'", m->type, name);
        return NULL;
    }
    m->buffers[m->n_buffers].name = nm;
    m->buffers[m->n_buffers].tensor = cg_hold(cg_retain(t)); /* beyond any scope */
    m->buffers[m->n_buffers].persistent = persistent;
    m->n_buffers++;
    if (cg_debug_enabled())
        cg_lifetime_set_name(t, name, false);
    return t;
}

/* Whether target is m or one of its descendants (recursion as deep as the
 * module tree, as every traversal here). */
static bool module_contains(const cg_module *m, const cg_module *target)
{
    if (m == target)
        return true;
    for (int i = 0; i < m->n_children; i++)
        if (module_contains(m->children[i].module, target))
            return true;
    return false;
}

/* The checked mode names each parameter of child by its dotted path from
 * child's new parent (its first name there, as cg_module_params lists it). */
static void name_params(const cg_module *child, const char *name)
{
    cg_param_list l = {0};
    unsigned long serial = cg_error_serial();
    if (cg_module_params(child, &l)) {
        for (int i = 0; i < l.n; i++) {
            char full[512];
            snprintf(full, sizeof full, "%s.%s", name, l.items[i].name);
            cg_lifetime_set_name(l.items[i].tensor, full, true);
        }
    } else if (cg_error_serial() != serial) {
        cg_clear_error(); /* out of memory for names only: the add succeeded */
    }
    cg_param_list_free(&l);
}

/* A failed add frees the child only when nobody owns it yet. */
static void drop_unowned(cg_module *child)
{
    if (child && child->n_owners == 0)
        cg_module_free(child);
}

void *cg_module_add_child(cg_module *m, const char *name, void *child_)
{
    cg_module *child = child_;
    uint32_t tag = CG_MODULE_TAG; /* read as bytes: child may be any object */
    if (child)
        memcpy(&tag, child_, sizeof tag);
    if (!cg_module_live(m, "cg_module_add_child") ||
        (tag == CG_MODULE_FREED && !cg_module_live(child, "cg_module_add_child")))
        return NULL; /* the checked mode: a freed parent or child, not ours to free */
    if (tag != CG_MODULE_TAG && tag != 0) { /* 0: a struct the caller zeroed (calloc) */
        cg_set_error("module %s: child '%s' is not a module (a tensor? that is "
                     "cg_module_add_param)",
                     m ? m->type : "(null)", name ? name : "(null)");
        return NULL; /* not ours to free */
    }
    if (!m || !child) {
        cg_error_null_input("cg_module_add_child");
        drop_unowned(child);
        return NULL;
    }
    if (module_contains(child, m)) {
        cg_set_error(child == m ? "module %s: a module cannot be its own child"
                                : "module %s: adding '%s' would make a cycle (the parent is "
                                  "inside the child)",
                     m->type, name ? name : "(null)");
        return NULL; /* child owns m, or is m: never freed here */
    }
    if (!check_local_name(m, "child", name)) {
        drop_unowned(child);
        return NULL;
    }
    char *nm = dup_str(name);
    if (!nm ||
        !grow((void **)&m->children, &m->cap_children, m->n_children + 1, sizeof *m->children)) {
        free(nm);
        drop_unowned(child);
        cg_set_error("module %s: out of memory adding child '%s'", m->type, name);
        return NULL;
    }
    m->children[m->n_children].name = nm;
    m->children[m->n_children].module = child;
    m->n_children++;
    if (child->n_owners++ == 0)
        child->parent = m;
    if (cg_debug_enabled())
        name_params(child, name);
    return child;
}

/* m's reference given back by from (its parent, or NULL: the caller). */
static void module_drop(cg_module *m, const cg_module *from)
{
    if (m->n_owners > 1) { /* shared: another parent still holds it */
        m->n_owners--;
        if (m->parent == from)
            m->parent = NULL;
        return;
    }
    if (m->destroy)
        m->destroy(m);
    cg_module_hooks_free(m);
    for (int i = 0; i < m->n_children; i++) {
        module_drop(m->children[i].module, m);
        free(m->children[i].name);
    }
    for (int i = 0; i < m->n_params; i++) {
        cg_release_held(m->params[i].tensor);
        free(m->params[i].name);
    }
    for (int i = 0; i < m->n_buffers; i++) {
        cg_release_held(m->buffers[i].tensor);
        free(m->buffers[i].name);
    }
    free(m->children);
    free(m->params);
    free(m->buffers);
    if (!cg_debug_enabled()) {
        free(m);
        return;
    }
    /* the checked mode: poisoned and kept, so that a second free is named */
    *m = (cg_module){.tag = CG_MODULE_FREED, .type = m->type};
    cg_lifetime_quarantine(m);
}

bool cg_module_remove_child(cg_module *m, const char *name)
{
    if (!m || !name)
        return cg_error_null_input("cg_module_remove_child");
    if (!cg_module_live(m, "cg_module_remove_child"))
        return false;
    for (int i = 0; i < m->n_children; i++)
        if (strcmp(m->children[i].name, name) == 0) {
            cg_module *c = m->children[i].module;
            free(m->children[i].name);
            memmove(&m->children[i], &m->children[i + 1],
                    (size_t)(m->n_children - i - 1) * sizeof *m->children);
            m->n_children--;
            module_drop(c, m);
            return true;
        }
    cg_set_error("module %s has no child '%s'", m->type, name);
    return false;
}

cg_tensor *cg_module_remove_param(cg_module *m, const char *name, cg_tensor ***field)
{
    if (!m || !name)
        return cg_error_null_input("cg_module_remove_param"), NULL;
    if (!cg_module_live(m, "cg_module_remove_param"))
        return NULL;
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) {
            cg_tensor *t = m->params[i].tensor;
            if (field)
                *field = m->params[i].field;
            free(m->params[i].name);
            memmove(&m->params[i], &m->params[i + 1],
                    (size_t)(m->n_params - i - 1) * sizeof *m->params);
            m->n_params--;
            cg_unhold(t); /* the registry's reference is the caller's now */
            return t;
        }
    cg_set_error("module %s has no parameter '%s'", m->type, name);
    return NULL;
}

cg_tensor *cg_module_remove_buffer(cg_module *m, const char *name)
{
    if (!m || !name)
        return cg_error_null_input("cg_module_remove_buffer"), NULL;
    if (!cg_module_live(m, "cg_module_remove_buffer"))
        return NULL;
    for (int i = 0; i < m->n_buffers; i++)
        if (strcmp(m->buffers[i].name, name) == 0) {
            cg_tensor *t = m->buffers[i].tensor;
            free(m->buffers[i].name);
            memmove(&m->buffers[i], &m->buffers[i + 1],
                    (size_t)(m->n_buffers - i - 1) * sizeof *m->buffers);
            m->n_buffers--;
            cg_unhold(t);
            return t;
        }
    cg_set_error("module %s has no buffer '%s'", m->type, name);
    return NULL;
}

/* The checked mode's test before the caller frees m: false (reported) for
 * a module freed already, something else than a module, or a child that a
 * parent holds and frees. */
static bool module_free_ok(const cg_module *m)
{
    if (m->tag == CG_MODULE_FREED) {
        cg_debug_report("cg_module_free: module %s was already freed (by cg_module_free)", m->type);
        return false;
    }
    if (m->tag != CG_MODULE_TAG && m->tag != 0) {
        cg_debug_report("cg_module_free: %p is not a module (its first word is 0x%08x)",
                        (const void *)m, (unsigned)m->tag);
        return false;
    }
    if (m->n_owners == 0)
        return true;
    const cg_module *p = m->parent;
    for (int i = 0; p && i < p->n_children; i++) {
        if (p->children[i].module == m) {
            cg_debug_report("cg_module_free: module %s is child '%s' of module %s, which owns it "
                            "and frees it with itself; free the parent only",
                            m->type, p->children[i].name, p->type);
            return false;
        }
    }
    cg_debug_report("cg_module_free: module %s is held by %d parent module%s, which free it; "
                    "free the parents only",
                    m->type, m->n_owners, m->n_owners == 1 ? "" : "s");
    return false;
}

void cg_module_free(cg_module *m)
{
    if (!m)
        return;
    if (!cg_debug_enabled()) {
        module_drop(m, NULL);
        return;
    }
    if (!module_free_ok(m))
        return;
    const char *prev = cg_lifetime_enter("cg_module_free");
    module_drop(m, NULL);
    cg_lifetime_leave(prev);
}

/* ------------------------------------------------------------- queries */
static bool list_has(const cg_param_list *l, const cg_tensor *t)
{
    for (int i = 0; i < l->n; i++)
        if (l->items[i].tensor == t)
            return true;
    return false;
}

/* What collect lists: parameters, buffers, or PyTorch's state dict (the
 * parameters and the persistent buffers); WANT_ALL: a tensor under every
 * name that reaches it, not only its first. */
enum { WANT_PARAMS = 1, WANT_BUFFERS = 2, WANT_PERSISTENT = 4, WANT_ALL = 8 };

/* Append prefix + local under t, unless t is listed already (and not all
 * names are wanted). */
static bool collect_one(cg_param_list *out, const char *prefix, const char *local, cg_tensor *t,
                        bool is_buffer, int want)
{
    if (!(want & WANT_ALL) && list_has(out, t))
        return true;
    size_t n = strlen(prefix) + strlen(local) + 1;
    char *name = malloc(n);
    if (!name || !grow((void **)&out->items, &out->cap, out->n + 1, sizeof *out->items)) {
        free(name);
        cg_set_error("module params: out of memory");
        return false;
    }
    snprintf(name, n, "%s%s", prefix, local);
    out->items[out->n] = (cg_param){.name = name, .tensor = t, .is_buffer = is_buffer};
    out->n++;
    return true;
}

/* prefix is "" or "a.b." (ends with a dot). PyTorch's order: a module's
 * parameters, then its buffers, then its children's, depth first. */
static bool collect(const cg_module *m, const char *prefix, cg_param_list *out, int want)
{
    size_t pl = strlen(prefix);
    for (int i = 0; (want & WANT_PARAMS) && i < m->n_params; i++)
        if (!collect_one(out, prefix, m->params[i].name, m->params[i].tensor, false, want))
            return false;
    for (int i = 0; (want & WANT_BUFFERS) && i < m->n_buffers; i++)
        if ((!(want & WANT_PERSISTENT) || m->buffers[i].persistent) &&
            !collect_one(out, prefix, m->buffers[i].name, m->buffers[i].tensor, true, want))
            return false;
    for (int i = 0; i < m->n_children; i++) {
        size_t n = pl + strlen(m->children[i].name) + 2;
        char *p = malloc(n);
        if (!p) {
            cg_set_error("module params: out of memory");
            return false;
        }
        snprintf(p, n, "%s%s.", prefix, m->children[i].name);
        bool ok = collect(m->children[i].module, p, out, want);
        free(p);
        if (!ok)
            return false;
    }
    return true;
}

bool cg_module_params(const cg_module *m, cg_param_list *out)
{
    if (!m || !out) {
        cg_error_null_input("cg_module_params");
        return false;
    }
    if (!cg_module_live(m, "cg_module_params"))
        return false;
    return collect(m, "", out, WANT_PARAMS);
}

bool cg_module_buffers(const cg_module *m, cg_param_list *out)
{
    if (!m || !out) {
        cg_error_null_input("cg_module_buffers");
        return false;
    }
    if (!cg_module_live(m, "cg_module_buffers"))
        return false;
    return collect(m, "", out, WANT_BUFFERS);
}

bool cg_module_state_dict(const cg_module *m, cg_param_list *out)
{
    if (!m || !out) {
        cg_error_null_input("cg_module_state_dict");
        return false;
    }
    if (!cg_module_live(m, "cg_module_state_dict"))
        return false;
    return collect(m, "", out, WANT_PARAMS | WANT_BUFFERS | WANT_PERSISTENT);
}

bool cg_module_state_dict_all(const cg_module *m, cg_param_list *out)
{
    if (!m || !out) {
        cg_error_null_input("cg_module_state_dict_all");
        return false;
    }
    if (!cg_module_live(m, "cg_module_state_dict_all"))
        return false;
    return collect(m, "", out, WANT_PARAMS | WANT_BUFFERS | WANT_PERSISTENT | WANT_ALL);
}

void cg_param_list_free(cg_param_list *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        free(l->items[i].name);
    free(l->items);
    memset(l, 0, sizeof *l);
}

int64_t cg_module_num_params(const cg_module *m)
{
    cg_param_list l = {0};
    if (!cg_module_params(m, &l)) {
        cg_param_list_free(&l);
        return 0;
    }
    int64_t n = 0;
    for (int i = 0; i < l.n; i++)
        n += cg_numel(l.items[i].tensor);
    cg_param_list_free(&l);
    return n;
}

int cg_module_num_param_tensors(const cg_module *m)
{
    cg_param_list l = {0};
    int n = cg_module_params(m, &l) ? l.n : 0;
    cg_param_list_free(&l);
    return n;
}

cg_module *cg_module_get_child(const cg_module *m, const char *path)
{
    if (!m || !path) {
        cg_error_null_input("cg_module_get_child");
        return NULL;
    }
    if (!cg_module_live(m, "cg_module_get_child"))
        return NULL;
    const cg_module *cur = m;
    const char *p = path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        const cg_module *next = NULL;
        for (int i = 0; i < cur->n_children; i++) {
            if (strlen(cur->children[i].name) == len && !strncmp(cur->children[i].name, p, len)) {
                next = cur->children[i].module;
                break;
            }
        }
        if (!next) {
            cg_set_error("module %s: no child module at '%s' (no '%.*s' in %s)", m->type, path,
                         (int)len, p, cur->type);
            return NULL;
        }
        cur = next;
        p = dot ? dot + 1 : p + len;
    }
    return (cg_module *)cur;
}

/* The module that holds the dotted name's last part (*local), or NULL +
 * error. */
static const cg_module *owner_of(const cg_module *m, const char *name, const char **local)
{
    const char *dot = strrchr(name, '.');
    *local = dot ? dot + 1 : name;
    if (!dot)
        return m;
    size_t len = (size_t)(dot - name);
    char *path = malloc(len + 1);
    if (!path) {
        cg_set_error("module: out of memory");
        return NULL;
    }
    memcpy(path, name, len);
    path[len] = '\0';
    const cg_module *owner = cg_module_get_child(m, path);
    free(path);
    return owner;
}

cg_tensor *cg_module_get_buffer(const cg_module *m, const char *name)
{
    if (!m || !name) {
        cg_error_null_input("cg_module_get_buffer");
        return NULL;
    }
    if (!cg_module_live(m, "cg_module_get_buffer"))
        return NULL;
    const char *local;
    const cg_module *owner = owner_of(m, name, &local);
    for (int i = 0; owner && i < owner->n_buffers; i++)
        if (!strcmp(owner->buffers[i].name, local))
            return owner->buffers[i].tensor;
    cg_set_error("module %s: no buffer named '%s'", m->type, name);
    return NULL;
}

cg_tensor *cg_module_get_param(const cg_module *m, const char *name)
{
    if (!m || !name) {
        cg_error_null_input("cg_module_get_param");
        return NULL;
    }
    if (!cg_module_live(m, "cg_module_get_param"))
        return NULL;
    const char *local;
    const cg_module *owner = owner_of(m, name, &local);
    for (int i = 0; owner && i < owner->n_params; i++)
        if (!strcmp(owner->params[i].name, local))
            return owner->params[i].tensor;
    cg_set_error("module %s: no parameter named '%s'", m->type, name);
    return NULL;
}

bool cg_module_tie(cg_module *m, const char *name, const char *src)
{
    if (!m || !name || !src) {
        cg_error_null_input("cg_module_tie");
        return false;
    }
    if (!cg_module_live(m, "cg_module_tie"))
        return false;
    cg_tensor *s = cg_module_get_param(m, src);
    const char *local;
    cg_module *owner = s ? (cg_module *)owner_of(m, name, &local) : NULL;
    cg_named_tensor *e = NULL;
    for (int i = 0; owner && !e && i < owner->n_params; i++)
        e = strcmp(owner->params[i].name, local) ? NULL : &owner->params[i];
    if (!s)
        return false;
    if (!e) {
        cg_set_error("module %s: cannot tie '%s': no parameter named '%s'", m->type, name, name);
        return false;
    }
    cg_tensor *old = e->tensor;
    if (old == s)
        return true;
    char a[96], b[96];
    if (old->dtype != s->dtype || old->ndim != s->ndim ||
        memcmp(old->shape, s->shape, sizeof *old->shape * (size_t)old->ndim)) {
        cg_set_error("module %s: cannot tie '%s' (%s %s) to '%s' (%s %s): shapes or dtypes differ",
                     m->type, name, cg_shape_str(old, a, sizeof a), cg_dtype_name(old->dtype), src,
                     cg_shape_str(s, b, sizeof b), cg_dtype_name(s->dtype));
        return false;
    }
    if (!e->field || *e->field != old) {
        cg_set_error("module %s: cannot tie '%s': its module (%s) %s the field its forward "
                     "reads (cg_module_add_param_at), which would go on reading the old tensor",
                     m->type, name, owner->type,
                     e->field ? "changed it behind the registry in" : "registered it without");
        return false;
    }
    e->tensor = cg_hold(cg_retain(s));
    *e->field = s;
    cg_release_held(old);
    return true;
}

/* ------------------------------------------------------------- actions */
void cg_module_zero_grad(cg_module *m)
{
    if (!m || !cg_module_live(m, "cg_module_zero_grad"))
        return;
    for (int i = 0; i < m->n_params; i++)
        cg_zero_grad(m->params[i].tensor);
    for (int i = 0; i < m->n_children; i++)
        cg_module_zero_grad(m->children[i].module);
}

void cg_module_train(cg_module *m, bool training)
{
    if (!m || !cg_module_live(m, "cg_module_train"))
        return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++)
        cg_module_train(m->children[i].module, training);
}

void cg_module_requires_grad(cg_module *m, bool on)
{
    if (!m || !cg_module_live(m, "cg_module_requires_grad"))
        return;
    for (int i = 0; i < m->n_params; i++)
        cg_requires_grad(m->params[i].tensor, on);
    for (int i = 0; i < m->n_children; i++)
        cg_module_requires_grad(m->children[i].module, on);
}
