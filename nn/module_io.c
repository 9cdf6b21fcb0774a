/* Module base: save and load (nn/module.h), PyTorch's state_dict and
 * load_state_dict. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/module.h"

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

/* Whether t's finite values stay finite in the narrower float dtype dt
 * (float16 ends at 65504): a finite weight saved as inf makes a file whose
 * load refuses it. False + error naming the first that does not; an inf
 * or NaN of t's own is t's (a buffer's -inf mask). */
static bool fits_in(const cg_tensor *t, cg_dtype dt, const char *key)
{
    if (!cg_dtype_is_float(t->dtype))
        return true;
    double v = 0.0;
    const int64_t bad = cg_k_first_overflow(t, dt, &v);
    if (bad >= 0)
        cg_set_error("module save: tensor '%s' holds %g at element %lld, beyond %s's range (it "
                     "would be saved as inf; save as float32 or bfloat16)",
                     key, v, (long long)bad, cg_dtype_name(dt));
    return bad == -1;
}

bool cg_module_write_as(const cg_module *m, cg_st_writer *w, const char *prefix, cg_dtype dt)
{
    if (!m || !w) {
        cg_error_null_input("cg_module_write");
        return false;
    }
    if (!cg_module_live(m, "cg_module_write"))
        return false;
    cg_param_list l = {0};
    bool ok = cg_module_state_dict(m, &l);
    for (int i = 0; ok && i < l.n; i++) {
        const cg_tensor *t = l.items[i].tensor;
        char *key = join(prefix, l.items[i].name);
        /* a buffer keeps its dtype, but a float one follows a narrower dt
         * (PyTorch's model.to(torch.bfloat16) converts float buffers too) */
        bool as_is = l.items[i].is_buffer && (!cg_dtype_is_float(t->dtype) || dt == CG_F32);
        ok = key &&
             (as_is ? cg_st_add(w, key, t) : fits_in(t, dt, key) && cg_st_add_as(w, key, t, dt));
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
    if (!cg_module_live(m, "cg_module_save"))
        return false; /* the checked mode: a freed model, no file written */
    if (n_meta < 0 || (n_meta > 0 && !meta)) {
        cg_set_error("module save %s: bad metadata (%d pairs, array %p)", path, n_meta,
                     (const void *)meta);
        return false;
    }
    cg_st_writer *w = cg_st_writer_new_deferred(); /* saved at once: read then */
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
    char *d = l ? strdup(name) : NULL;
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

/* What a load matches against the file. l is m's state dict, one entry per
 * tensor; all[0..n_all) are the file keys (prefix + name) of every name of
 * it (cg_module_state_dict_all: a tied or shared tensor has several), all[j]
 * naming l.items[owner[j]]. Entry i loads from all[src[i]], the first of its
 * names the file holds (-1: none, it is missing). */
typedef struct {
    cg_param_list l;
    int n_all;
    char **all;
    int *owner, *src;
} load_plan;

static void plan_free(load_plan *p)
{
    for (int j = 0; p->all && j < p->n_all; j++)
        free(p->all[j]);
    free(p->all);
    free(p->owner);
    free(p->src);
    cg_param_list_free(&p->l);
}

static bool plan_make(const cg_module *m, const cg_st_file *f, const char *prefix, load_plan *p)
{
    memset(p, 0, sizeof *p);
    cg_param_list a = {0};
    bool ok = cg_module_state_dict(m, &p->l) && cg_module_state_dict_all(m, &a);
    size_t n = (size_t)(a.n ? a.n : 1);
    p->all = ok ? calloc(n, sizeof *p->all) : NULL;
    p->owner = ok ? malloc(n * sizeof *p->owner) : NULL;
    p->src = ok ? malloc((size_t)(p->l.n ? p->l.n : 1) * sizeof *p->src) : NULL;
    if (ok && (!p->all || !p->owner || !p->src)) {
        cg_set_error("module load: out of memory");
        ok = false;
    }
    p->n_all = ok ? a.n : 0;
    for (int i = 0; ok && i < p->l.n; i++)
        p->src[i] = -1;
    for (int j = 0; ok && j < a.n; j++) {
        int i = 0;
        while (i < p->l.n && p->l.items[i].tensor != a.items[j].tensor)
            i++;
        p->owner[j] = i; /* always found: both lists walk the same tree */
        ok = (p->all[j] = join(prefix, a.items[j].name)) != NULL;
        if (ok && p->src[i] < 0 && cg_st_has(f, p->all[j]))
            p->src[i] = j;
    }
    cg_param_list_free(&a);
    return ok;
}

/* The key of entry i: where it loads from, else its first name. */
static const char *plan_key(const load_plan *p, int i)
{
    if (p->src[i] >= 0)
        return p->all[p->src[i]];
    int j = 0;
    while (p->owner[j] != i)
        j++;
    return p->all[j];
}

/* The missing and unexpected keys of the plan: entries none of whose names
 * the file holds, and the file's tensors under the prefix that name none. */
static bool find_unmatched(const cg_st_file *f, const cg_load_options *o, const load_plan *p,
                           cg_load_keys *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->l.n; i++)
        if (p->src[i] < 0 && !push_name(&out->missing, &out->n_missing, plan_key(p, i)))
            return false;
    int n = p->n_all;
    char **sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) {
        cg_set_error("module load: out of memory");
        return false;
    }
    memcpy(sorted, p->all, (size_t)n * sizeof *sorted);
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

/* A tensor the file holds under two of its names (PyTorch's state_dict of
 * a tied weight or a shared module lists every name) is loaded once, from
 * the first: every other copy must be the same, bit for bit. */
static bool aliases_agree(const cg_st_file *f, const char *fname, const load_plan *p)
{
    for (int j = 0; j < p->n_all; j++) {
        int s = p->src[p->owner[j]];
        if (s < 0 || s == j || !cg_st_has(f, p->all[j]))
            continue;
        cg_st_dtype da, db;
        int na, nb;
        int64_t sa[CG_MAX_DIMS], sb[CG_MAX_DIMS];
        size_t ba = 0, bb = 0;
        if (!cg_st_info(f, p->all[s], &da, &na, sa) || !cg_st_info(f, p->all[j], &db, &nb, sb))
            return false;
        const unsigned char *xa = cg_st_raw(f, p->all[s], &ba), *xb = cg_st_raw(f, p->all[j], &bb);
        if (!xa || !xb)
            return false;
        char why[160];
        if (da != db || na != nb || memcmp(sa, sb, sizeof *sa * (size_t)na)) {
            char a[96], b[96];
            snprintf(why, sizeof why, "%s %s and %s %s", cg_st_dtype_name(da),
                     cg_shape_str_n(na, sa, a, sizeof a), cg_st_dtype_name(db),
                     cg_shape_str_n(nb, sb, b, sizeof b));
        } else if (ba != bb || memcmp(xa, xb, ba)) {
            size_t k = 0, es = cg_st_dtype_size(da);
            while (k < ba && k < bb && xa[k] == xb[k])
                k++;
            snprintf(why, sizeof why, "first at element %zu", es ? k / es : k);
        } else {
            continue;
        }
        cg_set_error("load %s: '%s' and '%s' are one tied tensor but differ in the file (%s); "
                     "a tied or shared tensor has one value",
                     fname, p->all[s], p->all[j], why);
        return false;
    }
    return true;
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

/* A BOOL tensor holds bytes 0 and 1 only (cg_st_get checks them): checked
 * in the first pass, as the floats' finiteness, so that a bad byte is
 * refused before anything is copied. */
static bool bools_valid(const cg_st_file *f, const char *key)
{
    cg_tensor *t = cg_st_get(f, key);
    cg_release(t);
    return t != NULL;
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
    if (!cg_module_live(m, "cg_module_load"))
        return false;
    const char *fname = cg_st_path(f) ? cg_st_path(f) : "(memory)";
    load_plan p;
    cg_load_keys un = {0};
    bool ok = plan_make(m, f, o->prefix, &p) && find_unmatched(f, o, &p, &un);
    if (ok && !o->non_strict && (un.n_missing || un.n_unexpected)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "load %.200s: ", fname);
        bool buf = false; /* a buffer among the missing: say so */
        for (int i = 0; i < p.l.n; i++)
            buf |= p.l.items[i].is_buffer && p.src[i] < 0;
        if (un.n_missing)
            describe_keys(msg, sizeof msg, un.n_missing, un.missing,
                          buf ? "parameter or buffer missing from the file"
                              : "parameter missing from the file",
                          buf ? "parameters or buffers missing from the file"
                              : "parameters missing from the file");
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
    ok = ok && aliases_agree(f, fname, &p);
    /* pass 1: check everything, so that a bad file changes nothing */
    for (int i = 0; ok && i < p.l.n; i++) {
        if (p.src[i] < 0)
            continue; /* missing, and non-strict */
        const char *key = plan_key(&p, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        if (!cg_st_info(f, key, &dt, &nd, shape)) {
            ok = false;
            break;
        }
        const cg_tensor *t = p.l.items[i].tensor;
        bool fl = dt == CG_ST_F32 || dt == CG_ST_BF16 || dt == CG_ST_F16;
        if (!fl && cg_dtype_is_float(t->dtype)) {
            cg_set_error("load %s: tensor '%s' has dtype %s, expected F32, BF16 or F16", fname, key,
                         cg_st_dtype_name(dt));
            ok = false;
            break;
        }
        cg_dtype own;
        if (!cg_dtype_is_float(t->dtype) && (!cg_st_dtype_cg(dt, &own) || own != t->dtype)) {
            cg_set_error("load %s: buffer '%s' has dtype %s in the file but the model's is %s",
                         fname, key, cg_st_dtype_name(dt), cg_dtype_name(t->dtype));
            ok = false;
            break;
        }
        bool same = nd == t->ndim;
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == t->shape[d];
        if (!same) {
            char a[128], b[128];
            cg_set_error("load %s: tensor '%s' has shape %s in the file but the model expects %s",
                         fname, key, cg_shape_str_n(nd, shape, a, sizeof a),
                         cg_shape_str(t, b, sizeof b));
            ok = false;
            break;
        }
        /* a buffer may hold -inf on purpose (an additive mask) */
        ok = p.l.items[i].is_buffer ? dt != CG_ST_BOOL || bools_valid(f, key)
                                    : all_finite(f, fname, key);
    }
    /* pass 2: copy, each tensor once */
    for (int i = 0; ok && i < p.l.n; i++)
        ok = p.src[i] < 0 || cg_st_load_into(f, plan_key(&p, i), p.l.items[i].tensor);
    if (ok && o->keys) {
        *o->keys = un;
        memset(&un, 0, sizeof un);
    }
    cg_load_keys_free(&un);
    plan_free(&p);
    return ok;
}
