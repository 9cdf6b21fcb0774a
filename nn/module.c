/* Module base: parameter/child registry, traversal, save/load. */
#include "nn/module.h"

#include <math.h>
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

cg_tensor *cg_module_add_param(cg_module *m, const char *name, cg_tensor *t)
{
    if (!m || !t) {
        cg_error_null_input("cg_module_add_param");
        return NULL;
    }
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
    m->n_params++;
    if (cg_debug_enabled())
        cg_lifetime_set_name(t, name, false); /* a tied tensor keeps its first name */
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
        cg_unhold(m->params[i].tensor);
        cg_release(m->params[i].tensor);
        free(m->params[i].name);
    }
    free(m->children);
    free(m->params);
    if (!cg_debug_enabled()) {
        free(m);
        return;
    }
    /* the checked mode: poisoned and kept, so that a second free is named */
    *m = (cg_module){.tag = CG_MODULE_FREED, .type = m->type};
    cg_lifetime_quarantine(m);
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

/* prefix is "" or "a.b." (ends with a dot). */
static bool collect(const cg_module *m, const char *prefix, cg_param_list *out)
{
    size_t pl = strlen(prefix);
    for (int i = 0; i < m->n_params; i++) {
        cg_tensor *t = m->params[i].tensor;
        if (list_has(out, t))
            continue;
        size_t n = pl + strlen(m->params[i].name) + 1;
        char *name = malloc(n);
        if (!name || !grow((void **)&out->items, &out->cap, out->n + 1, sizeof *out->items)) {
            free(name);
            cg_set_error("module params: out of memory");
            return false;
        }
        snprintf(name, n, "%s%s", prefix, m->params[i].name);
        out->items[out->n].name = name;
        out->items[out->n].tensor = t;
        out->n++;
    }
    for (int i = 0; i < m->n_children; i++) {
        size_t n = pl + strlen(m->children[i].name) + 2;
        char *p = malloc(n);
        if (!p) {
            cg_set_error("module params: out of memory");
            return false;
        }
        snprintf(p, n, "%s%s.", prefix, m->children[i].name);
        bool ok = collect(m->children[i].module, p, out);
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
    return collect(m, "", out);
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

cg_tensor *cg_module_get_param(const cg_module *m, const char *name)
{
    if (!m || !name) {
        cg_error_null_input("cg_module_get_param");
        return NULL;
    }
    const char *dot = strrchr(name, '.');
    const cg_module *owner = m;
    const char *local = name;
    if (dot) {
        size_t len = (size_t)(dot - name);
        char *path = malloc(len + 1);
        if (!path) {
            cg_set_error("module: out of memory");
            return NULL;
        }
        memcpy(path, name, len);
        path[len] = '\0';
        owner = cg_module_get_child(m, path);
        free(path);
        local = dot + 1;
    }
    if (owner) {
        for (int i = 0; i < owner->n_params; i++)
            if (!strcmp(owner->params[i].name, local))
                return owner->params[i].tensor;
    }
    cg_set_error("module %s: no parameter named '%s'", m->type, name);
    return NULL;
}

/* ------------------------------------------------------------- actions */
void cg_module_zero_grad(cg_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_params; i++)
        cg_zero_grad(m->params[i].tensor);
    for (int i = 0; i < m->n_children; i++)
        cg_module_zero_grad(m->children[i].module);
}

void cg_module_train(cg_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++)
        cg_module_train(m->children[i].module, training);
}

void cg_module_requires_grad(cg_module *m, bool on)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_params; i++)
        cg_requires_grad(m->params[i].tensor, on);
    for (int i = 0; i < m->n_children; i++)
        cg_module_requires_grad(m->children[i].module, on);
}

/* ------------------------------------------------------- save and load */
static char *join(const char *prefix, const char *name)
{
    size_t n = (prefix ? strlen(prefix) : 0) + strlen(name) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", prefix ? prefix : "", name);
    else
        cg_set_error("module: out of memory");
    return s;
}

bool cg_module_write_as(const cg_module *m, cg_st_writer *w, const char *prefix, cg_dtype dt)
{
    if (!m || !w) {
        cg_error_null_input("cg_module_write");
        return false;
    }
    cg_param_list l = {0};
    bool ok = cg_module_params(m, &l);
    for (int i = 0; ok && i < l.n; i++) {
        char *key = join(prefix, l.items[i].name);
        ok = key && cg_st_add_as(w, key, l.items[i].tensor, dt);
        free(key);
    }
    cg_param_list_free(&l);
    return ok;
}

bool cg_module_write(const cg_module *m, cg_st_writer *w, const char *prefix)
{
    return cg_module_write_as(m, w, prefix, CG_F32);
}

bool cg_module_save_as(const cg_module *m, const char *path, cg_dtype dt, int n_meta,
                       const char *const *meta)
{
    if (!m || !path) {
        cg_error_null_input("cg_module_save");
        return false;
    }
    if (n_meta < 0 || (n_meta > 0 && !meta)) {
        cg_set_error("module save %s: bad metadata (%d pairs, array %p)", path, n_meta,
                     (const void *)meta);
        return false;
    }
    cg_st_writer *w = cg_st_writer_new();
    bool ok = w != NULL;
    for (int i = 0; ok && i < n_meta; i++)
        ok = cg_st_set_metadata(w, meta[2 * i], meta[2 * i + 1]);
    ok = ok && cg_module_write_as(m, w, NULL, dt) && cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    return ok;
}

bool cg_module_save(const cg_module *m, const char *path, int n_meta, const char *const *meta)
{
    return cg_module_save_as(m, path, CG_F32, n_meta, meta);
}

void cg_load_keys_free(cg_load_keys *k)
{
    if (!k)
        return;
    for (int i = 0; i < k->n_missing; i++)
        free(k->missing[i]);
    for (int i = 0; i < k->n_unexpected; i++)
        free(k->unexpected[i]);
    free(k->missing);
    free(k->unexpected);
    memset(k, 0, sizeof *k);
}

/* Whether the file tensor name is one the caller said to expect. */
static bool load_ignored(const cg_load_options *o, const char *name)
{
    for (int i = 0; i < o->n_ignore; i++) {
        const char *p = o->ignore ? o->ignore[i] : NULL;
        size_t n = p ? strlen(p) : 0;
        if (n && (p[n - 1] == '*' ? !strncmp(name, p, n - 1) : !strcmp(name, p)))
            return true;
    }
    return false;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append a copy of name to (*list)[*n]. */
static bool push_name(char ***list, int *n, const char *name)
{
    char **l = realloc(*list, (size_t)(*n + 1) * sizeof *l);
    char *d = l ? dup_str(name) : NULL;
    if (l)
        *list = l;
    if (!d) {
        cg_set_error("module load: out of memory");
        return false;
    }
    l[(*n)++] = d;
    return true;
}

/* "N <what>: 'a', 'b', ... and K more" into buf (first 8 names). */
static void describe_keys(char *buf, size_t cap, int n, char *const *names, const char *one,
                          const char *many)
{
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%d %s: ", n, n == 1 ? one : many);
    for (int i = 0; i < n && i < 8; i++) {
        len = strlen(buf);
        snprintf(buf + len, cap - len, "%s'%.100s'", i ? ", " : "", names[i]);
    }
    len = strlen(buf);
    if (n > 8)
        snprintf(buf + len, cap - len, " ... and %d more", n - 8);
}

/* The missing and unexpected keys of loading m's parameters l (file names
 * keys[i]) from f. */
static bool find_unmatched(const cg_st_file *f, const cg_load_options *o, int n, char **keys,
                           cg_load_keys *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++)
        if (!cg_st_has(f, keys[i]) && !push_name(&out->missing, &out->n_missing, keys[i]))
            return false;
    char **sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) {
        cg_set_error("module load: out of memory");
        return false;
    }
    memcpy(sorted, keys, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_cstr);
    const char *prefix = o->prefix ? o->prefix : "";
    size_t pl = strlen(prefix);
    bool ok = true;
    for (int i = 0; ok && i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        if (strncmp(name, prefix, pl) || load_ignored(o, name) ||
            bsearch(&name, sorted, (size_t)n, sizeof *sorted, cmp_cstr))
            continue;
        ok = push_name(&out->unexpected, &out->n_unexpected, name);
    }
    free(sorted);
    return ok;
}

bool cg_module_load(cg_module *m, const cg_st_file *f, const char *prefix)
{
    cg_load_options o = {.prefix = prefix};
    return cg_module_load_ex(m, f, &o);
}

/* A NaN or Inf weight makes every later result NaN (or a sampler print one
 * character forever): refused at load, naming it. Reads the file's floats
 * as float32 (a BF16 or F16 tensor widened exactly). */
static bool all_finite(const cg_st_file *f, const char *fname, const char *key)
{
    cg_tensor *v = cg_st_get_f32(f, key);
    const float *x = v ? cg_data(v) : NULL;
    int64_t n = v ? cg_numel(v) : 0, bad = -1;
    for (int64_t e = 0; x && e < n && bad < 0; e++)
        bad = isfinite(x[e]) ? -1 : e;
    if (bad >= 0)
        cg_set_error("load %s: tensor '%s' holds %s at element %lld (a damaged or diverged "
                     "checkpoint)",
                     fname, key,
                     isnan(x[bad]) ? "nan"
                     : x[bad] > 0  ? "inf"
                                   : "-inf",
                     (long long)bad);
    cg_release(v);
    return x && bad < 0;
}

bool cg_module_load_ex(cg_module *m, const cg_st_file *f, const cg_load_options *opt)
{
    cg_load_options none = {0};
    const cg_load_options *o = opt ? opt : &none;
    if (o->keys)
        memset(o->keys, 0, sizeof *o->keys);
    if (!m || !f) {
        cg_error_null_input("cg_module_load");
        return false;
    }
    const char *prefix = o->prefix;
    const char *fname = cg_st_path(f) ? cg_st_path(f) : "(memory)";
    cg_param_list l = {0};
    cg_load_keys un = {0};
    bool ok = cg_module_params(m, &l);
    char **keys = ok ? calloc((size_t)(l.n ? l.n : 1), sizeof *keys) : NULL;
    ok = ok && keys;
    for (int i = 0; ok && i < l.n; i++)
        ok = (keys[i] = join(prefix, l.items[i].name)) != NULL;
    ok = ok && find_unmatched(f, o, l.n, keys, &un);
    if (ok && !o->non_strict && (un.n_missing || un.n_unexpected)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "load %.200s: ", fname);
        if (un.n_missing)
            describe_keys(msg, sizeof msg, un.n_missing, un.missing,
                          "parameter missing from the file", "parameters missing from the file");
        if (un.n_missing && un.n_unexpected)
            strncat(msg, "; ", sizeof msg - strlen(msg) - 1);
        if (un.n_unexpected)
            describe_keys(msg, sizeof msg, un.n_unexpected, un.unexpected,
                          "unexpected tensor in the file", "unexpected tensors in the file");
        cg_set_error("%s (a strict load: cg_module_load_ex takes .ignore or .non_strict)", msg);
        ok = false;
        if (o->keys) { /* the caller sees the lists of a refused load too */
            *o->keys = un;
            memset(&un, 0, sizeof un);
        }
    }
    /* pass 1: check everything, so that a bad file changes nothing */
    for (int i = 0; ok && i < l.n; i++) {
        if (!cg_st_has(f, keys[i]))
            continue; /* missing, and non-strict */
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        if (!cg_st_info(f, keys[i], &dt, &nd, shape)) {
            ok = false;
            break;
        }
        const cg_tensor *t = l.items[i].tensor;
        if (dt != CG_ST_F32 && dt != CG_ST_BF16 && dt != CG_ST_F16) {
            cg_set_error("load %s: tensor '%s' has dtype %s, expected F32, BF16 or F16", fname,
                         keys[i], cg_st_dtype_name(dt));
            ok = false;
            break;
        }
        bool same = nd == t->ndim;
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == t->shape[d];
        if (!same) {
            char a[128], b[128];
            cg_set_error("load %s: tensor '%s' has shape %s in the file but the model expects %s",
                         fname, keys[i], cg_shape_str_n(nd, shape, a, sizeof a),
                         cg_shape_str(t, b, sizeof b));
            ok = false;
            break;
        }
        ok = all_finite(f, fname, keys[i]);
    }
    /* pass 2: copy */
    for (int i = 0; ok && i < l.n; i++)
        ok = !cg_st_has(f, keys[i]) || cg_st_load_into(f, keys[i], l.items[i].tensor);
    if (ok && o->keys) {
        *o->keys = un;
        memset(&un, 0, sizeof un);
    }
    cg_load_keys_free(&un);
    for (int i = 0; keys && i < l.n; i++)
        free(keys[i]);
    free(keys);
    cg_param_list_free(&l);
    return ok;
}
