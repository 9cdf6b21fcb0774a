/* A whole training state in one safetensors file (train_state.h). */
#include "optim/train_state.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/utf8.h"

enum { MAX_NAME = 200, MT_WORDS = 624, FORMAT = 1 };
#define META_KEY "train_state"

typedef enum { K_MODULE, K_OPTIM, K_RNG, K_MT, K_I64, K_U64, K_F64, K_STR, K_COUNT } kind;
static const char *const kind_names[K_COUNT] = {"module", "optim", "rng", "mt19937",
                                                "i64",    "u64",   "f64", "str"};

typedef struct {
    char *name;
    kind k;
    void *p;    /* the caller's object or variable */
    size_t cap; /* str: the buffer's size */
} item;

struct cg_train_state {
    item *items;
    int n, cap;
};

cg_train_state *cg_train_state_new(void)
{
    cg_train_state *s = calloc(1, sizeof *s);
    if (!s)
        cg_set_error("train_state_new: out of memory");
    return s;
}

void cg_train_state_free(cg_train_state *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->items[i].name);
    free(s->items);
    free(s);
}

static const item *find(const cg_train_state *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->items[i].name, name))
            return &s->items[i];
    return NULL;
}

static bool add(cg_train_state *s, const char *name, kind k, void *p, size_t cap)
{
    const char *fn = "train_state_add";
    if (!s || !name || !p) {
        cg_set_error("%s_%s: %s is NULL", fn, kind_names[k],
                     !s      ? "the state"
                     : !name ? "the name"
                             : "the object");
        return false;
    }
    size_t len = strlen(name);
    if (!len || len > MAX_NAME || strchr(name, '.') || cg_utf8_count(name, len, NULL) < 0) {
        cg_set_error("%s_%s: bad item name '%.*s' (non-empty UTF-8 without '.', at most %d "
                     "bytes)",
                     fn, kind_names[k], MAX_NAME, name, MAX_NAME);
        return false;
    }
    if (find(s, name)) {
        cg_set_error("%s_%s: the state already has an item '%s'", fn, kind_names[k], name);
        return false;
    }
    if (k == K_STR && cap == 0) {
        cg_set_error("%s_str: item '%s': the buffer's size is 0", fn, name);
        return false;
    }
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 8;
        item *ni = realloc(s->items, (size_t)nc * sizeof *ni);
        if (!ni) {
            cg_set_error("%s_%s: out of memory", fn, kind_names[k]);
            return false;
        }
        s->items = ni;
        s->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        cg_set_error("%s_%s: out of memory", fn, kind_names[k]);
        return false;
    }
    memcpy(copy, name, len + 1);
    s->items[s->n++] = (item){.name = copy, .k = k, .p = p, .cap = cap};
    return true;
}

bool cg_train_state_add_module(cg_train_state *s, const char *name, cg_module *m)
{
    return add(s, name, K_MODULE, m, 0);
}

bool cg_train_state_add_optim(cg_train_state *s, const char *name, cg_optim *o)
{
    return add(s, name, K_OPTIM, o, 0);
}

bool cg_train_state_add_rng(cg_train_state *s, const char *name, cg_rng *r)
{
    return add(s, name, K_RNG, r, 0);
}

bool cg_train_state_add_mt19937(cg_train_state *s, const char *name, cg_mt19937 *g)
{
    return add(s, name, K_MT, g, 0);
}

bool cg_train_state_add_i64(cg_train_state *s, const char *name, int64_t *v)
{
    return add(s, name, K_I64, v, 0);
}

bool cg_train_state_add_u64(cg_train_state *s, const char *name, uint64_t *v)
{
    return add(s, name, K_U64, v, 0);
}

bool cg_train_state_add_f64(cg_train_state *s, const char *name, double *v)
{
    return add(s, name, K_F64, v, 0);
}

bool cg_train_state_add_str(cg_train_state *s, const char *name, char *buf, size_t cap)
{
    return add(s, name, K_STR, buf, cap);
}

/* ----------------------------------------------------------------- save */

/* o[key] = a decimal string of v (exact), false when out of memory. */
static bool put_text(cJSON *o, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool put_text(cJSON *o, const char *key, const char *fmt, ...)
{
    char b[64];
    va_list ap;
    va_start(ap, fmt);
    cg_vsnprintf_c(b, sizeof b, fmt, ap); /* "0.001" whatever the locale */
    va_end(ap);
    return cJSON_AddStringToObject(o, key, b) != NULL;
}

/* The small values of one item into its manifest entry e. */
static bool save_value(const item *it, cJSON *e, const char *path)
{
    switch (it->k) {
    case K_RNG: {
        const cg_rng *r = it->p;
        return put_text(e, "seed", "%" PRIu64, r->seed) &&
               put_text(e, "counter", "%" PRIu64, r->counter);
    }
    case K_MT: {
        const cg_mt19937 *g = it->p;
        cJSON *words = cJSON_AddArrayToObject(e, "state");
        for (int j = 0; words && j < MT_WORDS; j++)
            if (!cJSON_AddItemToArray(words, cJSON_CreateNumber((double)g->state[j])))
                return false;
        return words && cJSON_AddNumberToObject(e, "index", g->index) &&
               cJSON_AddBoolToObject(e, "has_next_normal", g->has_next_normal) &&
               put_text(e, "next_normal", "%.17g", g->next_normal);
    }
    case K_I64: return put_text(e, "value", "%" PRId64, *(const int64_t *)it->p);
    case K_U64: return put_text(e, "value", "%" PRIu64, *(const uint64_t *)it->p);
    case K_F64: return put_text(e, "value", "%.17g", *(const double *)it->p);
    case K_STR: {
        const char *str = it->p;
        size_t len = strnlen(str, it->cap);
        if (len == it->cap || cg_utf8_count(str, len, NULL) < 0) {
            cg_set_error("train_state save '%s': item '%s': the string is %s", path, it->name,
                         len == it->cap ? "not NUL-terminated within its buffer"
                                        : "not valid UTF-8");
            return false;
        }
        return cJSON_AddStringToObject(e, "value", str) != NULL;
    }
    default: return true;
    }
}

static bool save_item(const item *it, cg_st_writer *w, cJSON *items, const char *path)
{
    cJSON *e = cJSON_AddObjectToObject(items, it->name);
    if (!e || !cJSON_AddStringToObject(e, "kind", kind_names[it->k])) {
        cg_set_error("train_state save '%s': out of memory", path);
        return false;
    }
    if (it->k == K_MODULE) {
        char prefix[MAX_NAME + 2];
        snprintf(prefix, sizeof prefix, "%s.", it->name);
        return cg_module_write(it->p, w, prefix);
    }
    if (it->k == K_OPTIM)
        return cg_optim_save(it->p, w, it->name);
    unsigned long before = cg_error_serial();
    bool ok = save_value(it, e, path);
    if (!ok && cg_error_serial() == before)
        cg_set_error("train_state save '%s': out of memory", path);
    return ok;
}

bool cg_train_state_save(const cg_train_state *s, const char *path)
{
    if (!s || !path)
        return cg_error_null_input("cg_train_state_save");
    cg_st_writer *w = cg_st_writer_new_deferred(); /* saved at once: read then */
    cJSON *root = cJSON_CreateObject();
    cJSON *items = root ? cJSON_AddObjectToObject(root, "items") : NULL;
    bool ok = w && items && cJSON_AddNumberToObject(root, "format", FORMAT);
    if (!ok)
        cg_set_error("train_state save '%s': out of memory", path);
    for (int i = 0; ok && i < s->n; i++)
        ok = save_item(&s->items[i], w, items, path);
    ok = ok && cg_st_set_metadata_json(w, META_KEY, root) && cg_st_writer_save(w, path);
    cJSON_Delete(root);
    cg_st_writer_free(w);
    return ok;
}

/* ----------------------------------------------------------------- load */

/* What load reads for one item before anything changes. */
typedef union {
    cg_rng rng;
    cg_mt19937 mt;
    int64_t i64;
    uint64_t u64;
    double f64;
    const char *str; /* borrowed from the manifest */
    cg_optim *scratch;
} value;

/* The manifest's "items" object, checked against the state's items: the
 * same names, each of the same kind. */
static cJSON *read_manifest(const cg_train_state *s, const cg_st_file *f, const char *path)
{
    if (!cg_st_metadata(f, META_KEY)) {
        cg_set_error("train_state load '%s': not a training state (no '" META_KEY
                     "' metadata: write it with cg_train_state_save)",
                     path);
        return NULL;
    }
    cJSON *root = cg_st_metadata_json(f, META_KEY);
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    cJSON *items = cJSON_GetObjectItemCaseSensitive(root, "items");
    if (!root || !cJSON_IsNumber(fmt) || fmt->valuedouble != FORMAT || !cJSON_IsObject(items)) {
        cg_set_error("train_state load '%s': the '" META_KEY "' metadata is not a format %d "
                     "training state",
                     path, FORMAT);
        cJSON_Delete(root);
        return NULL;
    }
    for (int i = 0; i < s->n; i++) {
        const item *it = &s->items[i];
        cJSON *e = cJSON_GetObjectItemCaseSensitive(items, it->name);
        cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kind");
        const char *ks = cJSON_IsString(k) ? k->valuestring : NULL;
        if (!e || !ks || strcmp(ks, kind_names[it->k])) {
            cg_set_error("train_state load '%s': item '%s' (%s) %s%s%s", path, it->name,
                         kind_names[it->k], !e ? "is missing from the file" : "is ",
                         e ? (ks ? ks : "of no kind") : "", e ? " in the file" : "");
            cJSON_Delete(root);
            return NULL;
        }
    }
    for (cJSON *e = items->child; e; e = e->next)
        if (!find(s, e->string)) {
            cg_set_error("train_state load '%s': the file holds item '%s', which the state "
                         "does not have (add it before loading)",
                         path, e->string);
            cJSON_Delete(root);
            return NULL;
        }
    return root;
}

/* Every tensor of f must belong to a module or optimizer item. */
static bool check_tensors(const cg_train_state *s, const cg_st_file *f, const char *path)
{
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *t = cg_st_name(f, i);
        const char *dot = strchr(t, '.');
        size_t n = dot ? (size_t)(dot - t) : 0;
        bool owned = false;
        for (int j = 0; !owned && dot && j < s->n; j++)
            owned = (s->items[j].k == K_MODULE || s->items[j].k == K_OPTIM) &&
                    strlen(s->items[j].name) == n && !strncmp(s->items[j].name, t, n);
        if (!owned) {
            cg_set_error("train_state load '%s': tensor '%s' belongs to no module or optimizer "
                         "item of the state",
                         path, t);
            return false;
        }
    }
    return true;
}

/* A string field of a manifest entry, or NULL + error. */
static const char *text(const cJSON *e, const char *key, const char *path, const item *it)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!cJSON_IsString(v))
        cg_set_error("train_state load '%s': item '%s' (%s): '%s' is missing or not a string", path,
                     it->name, kind_names[it->k], key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A double written by "%.17g" (inf and nan included), read back exactly. */
static bool parse_f64(const char *what, const char *t, double *out)
{
    char *end = NULL;
    errno = 0;
    double d = t ? cg_strtod_c(t, &end) : 0;
    if (!t || end == t || *end || (errno == ERANGE && isinf(d))) {
        cg_set_error("%s: '%s' is not a number", what, t ? t : "");
        return false;
    }
    *out = d;
    return true;
}

static bool parse_mt(const cJSON *e, const char *what, cg_mt19937 *g)
{
    const cJSON *words = cJSON_GetObjectItemCaseSensitive(e, "state");
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(e, "index");
    const cJSON *has = cJSON_GetObjectItemCaseSensitive(e, "has_next_normal");
    bool ok = cJSON_IsArray(words) && cJSON_GetArraySize(words) == MT_WORDS &&
              cJSON_IsNumber(idx) && idx->valuedouble >= 0 && idx->valuedouble <= MT_WORDS &&
              idx->valuedouble == floor(idx->valuedouble) && cJSON_IsBool(has);
    int j = 0;
    for (const cJSON *w = ok ? words->child : NULL; w; w = w->next, j++) {
        double d = cJSON_IsNumber(w) ? w->valuedouble : -1;
        ok = ok && d >= 0 && d <= 4294967295.0 && d == floor(d);
        g->state[j] = ok ? (uint32_t)d : 0;
    }
    if (!ok) {
        cg_set_error("%s: not a generator state (624 words of 32 bits, an index in [0, 624], "
                     "has_next_normal)",
                     what);
        return false;
    }
    g->index = (int)idx->valuedouble;
    g->has_next_normal = cJSON_IsTrue(has);
    return true;
}

/* A new optimizer over o's parameters with o's configuration, weight
 * decays and owned ranges, its state zeroed: cg_optim_load reads a file
 * into it, so that o changes only once every item has been read. */
static cg_optim *optim_like(const cg_optim *o)
{
    int n = cg_optim_count(o);
    cg_optim_param *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
    cg_optim_range *r = calloc((size_t)(n > 0 ? n : 1), sizeof *r);
    bool ok = p && r;
    for (int i = 0; ok && i < n; i++) {
        p[i] = (cg_optim_param){cg_optim_param_name(o, i), cg_optim_param_tensor(o, i),
                                cg_optim_param_weight_decay(o, i)};
        ok = cg_optim_shard_range(o, i, &r[i].lo, &r[i].hi);
    }
    cg_optim_config c = cg_optim_get_config(o);
    cg_optim *x = ok ? cg_optim_new_sharded(&c, n, p, r) : NULL;
    if (!p || !r)
        cg_set_error("train_state load: out of memory");
    free(p);
    free(r);
    return x;
}

/* A buffer kept or not by a choice (SGD's and RMSprop's momentum,
 * RMSprop's centered, Adam's amsgrad: cg_optim_keeps): a file saved with
 * the other choice cannot be copied into o. */
static bool same_buffers(const cg_optim *o, const cg_optim *loaded, const char *what)
{
    static const struct {
        int k;
        const char *by;
    } choices[] = {{CG_OPTIM_BUF_MOMENTUM, "momentum"},
                   {CG_OPTIM_BUF_GRAD_AVG, "centered"},
                   {CG_OPTIM_BUF_MAX_EXP_AVG_SQ, "amsgrad"}};
    static const char *const shown[CG_OPTIM_NTYPES] = {"SGD",     "Adam",     "AdamW",  "RMSprop",
                                                       "Adagrad", "Adadelta", "Adamax", "NAdam",
                                                       "RAdam",   "ASGD",     "Rprop"};
    cg_optim_config a = cg_optim_get_config(o), b = cg_optim_get_config(loaded);
    for (size_t j = 0; j < sizeof choices / sizeof *choices; j++) {
        int k = choices[j].k;
        if (cg_optim_keeps(&a, k) == cg_optim_keeps(&b, k))
            continue;
        char saved[32], has[32];
        if (k == CG_OPTIM_BUF_MOMENTUM) {
            snprintf(saved, sizeof saved, "%g", b.momentum);
            snprintf(has, sizeof has, "%g", a.momentum);
        } else {
            snprintf(saved, sizeof saved, "%s", cg_optim_keeps(&b, k) ? "true" : "false");
            snprintf(has, sizeof has, "%s", cg_optim_keeps(&a, k) ? "true" : "false");
        }
        cg_set_error("%s: %s saved with %s %s, the optimizer has %s (build it with the %s of the "
                     "run)",
                     what, shown[a.type], choices[j].by, saved, has, choices[j].by);
        return false;
    }
    return true;
}

/* Read one item's value (or, for an optimizer, its state into a scratch
 * optimizer) without changing the item. */
static bool read_value(const item *it, const cJSON *e, const cg_st_file *f, const char *path,
                       value *v)
{
    char what[320];
    snprintf(what, sizeof what, "train_state load '%.200s': item '%s' (%s)", path, it->name,
             kind_names[it->k]);
    const char *t;
    switch (it->k) {
    case K_OPTIM:
        return (v->scratch = optim_like(it->p)) && cg_optim_load(v->scratch, f, it->name) &&
               same_buffers(it->p, v->scratch, what);
    case K_RNG:
        return (t = text(e, "seed", path, it)) && cg_parse_u64(what, t, &v->rng.seed) &&
               (t = text(e, "counter", path, it)) && cg_parse_u64(what, t, &v->rng.counter);
    case K_MT:
        return parse_mt(e, what, &v->mt) && (t = text(e, "next_normal", path, it)) &&
               parse_f64(what, t, &v->mt.next_normal);
    case K_I64:
        return (t = text(e, "value", path, it)) &&
               cg_parse_i64(what, t, INT64_MIN, INT64_MAX, &v->i64);
    case K_U64: return (t = text(e, "value", path, it)) && cg_parse_u64(what, t, &v->u64);
    case K_F64: return (t = text(e, "value", path, it)) && parse_f64(what, t, &v->f64);
    case K_STR:
        if (!(v->str = text(e, "value", path, it)))
            return false;
        if (strlen(v->str) >= it->cap) {
            cg_set_error("%s: the string has %zu bytes, the buffer holds %zu with its NUL", what,
                         strlen(v->str), it->cap);
            return false;
        }
        return true;
    default: return true;
    }
}

/* A copy of every parameter and persistent buffer of m (to put back if a
 * later load fails). */
typedef struct {
    cg_param_list l;
    cg_tensor **copy;
} snapshot;

static void snapshot_free(snapshot *b)
{
    for (int i = 0; b->copy && i < b->l.n; i++)
        cg_release(b->copy[i]);
    free(b->copy);
    cg_param_list_free(&b->l);
    memset(b, 0, sizeof *b);
}

static bool snapshot_take(const cg_module *m, snapshot *b)
{
    bool ok = cg_module_state_dict(m, &b->l) &&
              (b->copy = calloc((size_t)(b->l.n ? b->l.n : 1), sizeof *b->copy));
    for (int i = 0; ok && i < b->l.n; i++)
        ok = (b->copy[i] = cg_k_clone(b->l.items[i].tensor)) != NULL;
    return ok;
}

static void snapshot_restore(const snapshot *b)
{
    /* cannot fail: each copy is a clone of its tensor (same shape, its
     * own storage: no overlap to copy around), and the tensor was just
     * loaded, so it can be written */
    for (int i = 0; i < b->l.n; i++)
        (void)cg_k_copy_(b->l.items[i].tensor, b->copy[i]);
}

/* Every module item from f; on a failure the modules loaded before it are
 * put back (each load is all or nothing itself). */
static bool load_modules(const cg_train_state *s, const cg_st_file *f)
{
    snapshot *b = calloc((size_t)(s->n ? s->n : 1), sizeof *b);
    int last = -1;
    for (int i = 0; i < s->n; i++)
        last = s->items[i].k == K_MODULE ? i : last;
    bool ok = b != NULL;
    if (!ok)
        cg_set_error("train_state load: out of memory");
    int i = 0;
    for (; ok && i < s->n; i++) {
        const item *it = &s->items[i];
        if (it->k != K_MODULE)
            continue;
        char prefix[MAX_NAME + 2];
        snprintf(prefix, sizeof prefix, "%s.", it->name);
        ok = (i == last || snapshot_take(it->p, &b[i])) && cg_module_load(it->p, f, prefix);
    }
    for (int j = i - 2; !ok && b && j >= 0; j--) /* i - 1 failed and changed nothing */
        if (s->items[j].k == K_MODULE)
            snapshot_restore(&b[j]);
    for (int j = 0; b && j < s->n; j++)
        snapshot_free(&b[j]);
    free(b);
    return ok;
}

/* Write what read_value read into the items (nothing here can fail). */
static void commit(const cg_train_state *s, const value *v)
{
    for (int i = 0; i < s->n; i++) {
        const item *it = &s->items[i];
        switch (it->k) {
        case K_OPTIM: (void)cg_optim_copy_state(it->p, v[i].scratch); break;
        case K_RNG: *(cg_rng *)it->p = v[i].rng; break;
        case K_MT: *(cg_mt19937 *)it->p = v[i].mt; break;
        case K_I64: *(int64_t *)it->p = v[i].i64; break;
        case K_U64: *(uint64_t *)it->p = v[i].u64; break;
        case K_F64: *(double *)it->p = v[i].f64; break;
        case K_STR: memcpy(it->p, v[i].str, strlen(v[i].str) + 1); break;
        default: break;
        }
    }
}

bool cg_train_state_load(cg_train_state *s, const char *path)
{
    if (!s || !path)
        return cg_error_null_input("cg_train_state_load");
    cg_st_file *f = cg_st_open(path);
    cJSON *root = f ? read_manifest(s, f, path) : NULL;
    value *v = root ? calloc((size_t)(s->n ? s->n : 1), sizeof *v) : NULL;
    bool ok = v && check_tensors(s, f, path);
    if (root && !v)
        cg_set_error("train_state load '%s': out of memory", path);
    cJSON *items = cJSON_GetObjectItemCaseSensitive(root, "items");
    for (int i = 0; ok && i < s->n; i++) {
        const item *it = &s->items[i];
        ok = read_value(it, cJSON_GetObjectItemCaseSensitive(items, it->name), f, path, &v[i]);
    }
    ok = ok && load_modules(s, f);
    if (ok)
        commit(s, v);
    for (int i = 0; v && i < s->n; i++)
        if (s->items[i].k == K_OPTIM)
            cg_optim_free(v[i].scratch);
    free(v);
    cJSON_Delete(root);
    cg_st_close(f);
    return ok;
}
