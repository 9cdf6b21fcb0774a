/* LoRA adapters on Linear layers (nn/lora.h), attached by a forward hook. */
#include "nn/lora.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/init.h"

static const char *const child_names[3] = {"lora_A", "lora_B", "lora_dropout"};

/* y = base(x) + scale * B(A(dropout(x))), unless merged; made as
 * base(x) + B(scale * A(dropout(x))): the scale on the r values of a row,
 * not its out_features, and the add as B's product writes its output (the
 * same bits when the scale is a power of two, as the default alpha = 2r's
 * 2; the rounding of a product otherwise). */
static bool lora_hook(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m;
    (void)n_in;
    cg_lora *a = ctx;
    if (a->merged)
        return true;
    cg_tensor *d = cg_drop_forward(a->dropout, in[0]);
    cg_tensor *h = cg_linear_forward(a->lora_A, d);
    cg_tensor *s = cg_muls(h, a->scale);
    cg_tensor *y = cg_linear_forward_residual(a->lora_B, s, &(cg_residual){.res = *out});
    cg_release_all(3, d, h, s);
    if (!y)
        return false;
    cg_release(*out);
    *out = y;
    return true;
}

cg_lora *cg_lora_of(const cg_linear *l)
{
    return l ? cg_module_find_hook(&l->base, (const void *)lora_hook) : NULL;
}

cg_lora *cg_lora_attach(cg_linear *l, int r, float alpha, float dropout, cg_rng *rng)
{
    if (!l) {
        cg_error_null_input("cg_lora_attach");
        return NULL;
    }
    if (strcmp(l->base.type, "Linear")) {
        cg_set_error("LoRA: a %s is not a Linear", l->base.type);
        return NULL;
    }
    if (r < 1 || !(dropout >= 0.0f && dropout <= 1.0f) || !isfinite(alpha)) {
        cg_set_error("LoRA: need r >= 1, dropout in [0, 1] and a finite alpha (got r=%d, "
                     "dropout=%g, alpha=%g)",
                     r, (double)dropout, (double)alpha);
        return NULL;
    }
    if (cg_lora_of(l)) {
        cg_set_error("LoRA: this Linear already has an adapter");
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < l->base.n_children; j++)
            if (!strcmp(l->base.children[j].name, child_names[i])) {
                cg_set_error("LoRA: the Linear already has a child '%s'", child_names[i]);
                return NULL;
            }
    cg_rng local = cg_rng_new(0), scratch = cg_rng_new(0);
    if (!rng)
        rng = &local;
    cg_lora *a = calloc(1, sizeof *a);
    cg_module *kids[3] = {
        CG_MODULE(cg_linear_new(l->in_features, r, false, &scratch)),
        CG_MODULE(cg_linear_new(r, l->out_features, false, &scratch)),
        CG_MODULE(cg_drop_new(dropout, NULL)),
    };
    bool ok = a && kids[0] && kids[1] && kids[2];
    if (!a)
        cg_set_error("LoRA: out of memory");
    if (ok) { /* PEFT: kaiming_uniform_(A, a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); B = 0 */
        float bound = (float)(1.0 / sqrt((double)l->in_features));
        cg_linear *A = (cg_linear *)kids[0], *B = (cg_linear *)kids[1];
        ok = cg_init_uniform_(A->weight, rng, -bound, bound) && cg_init_zeros_(B->weight);
    }
    int added = 0;
    for (; ok && added < 3; added++) {
        if (!cg_module_add_child(&l->base, child_names[added], kids[added])) {
            kids[added] = NULL; /* freed by the failed add */
            ok = false;
            break;
        }
    }
    if (ok) {
        a->base = l;
        a->lora_A = (cg_linear *)kids[0];
        a->lora_B = (cg_linear *)kids[1];
        a->dropout = (cg_drop *)kids[2];
        a->r = r;
        a->alpha = alpha;
        a->scale = alpha / (float)r;
        /* a failed registration frees a (free_ctx): its handle is kept
         * only once it is known to have been registered */
        const cg_hook_handle h = cg_module_register_forward_hook(&l->base, lora_hook, a, free);
        ok = h.id != 0;
        if (ok)
            a->hook = h;
        else
            a = NULL;
    }
    if (!ok) { /* take back what was added: the layer is as it was */
        for (int i = added - 1; i >= 0; i--) {
            cg_named_module *c = &l->base.children[--l->base.n_children];
            free(c->name);
            c->module->n_owners--;
        }
        for (int i = 0; i < 3; i++)
            cg_module_free(kids[i]);
        free(a);
        return NULL;
    }
    cg_requires_grad(l->weight, false);
    if (l->bias)
        cg_requires_grad(l->bias, false);
    return a;
}

static bool merge(cg_lora *a, bool in, const char *what)
{
    if (!a) {
        cg_set_error("LoRA %s: the adapter is NULL", what);
        return false;
    }
    if (a->merged == in) {
        cg_set_error("LoRA %s: the adapter is %s merged", what, in ? "already" : "not");
        return false;
    }
    cg_no_grad_begin();
    /* W += (+-scale) * B @ A */
    bool ok = cg_k_matmul_into(a->base->weight, a->lora_B->weight, a->lora_A->weight,
                               in ? a->scale : -a->scale, 1.0f);
    cg_no_grad_end();
    if (!ok)
        return false;
    cg_tensor_modified(a->base->weight);
    a->merged = in;
    return true;
}

bool cg_lora_merge(cg_lora *a) { return merge(a, true, "merge"); }
bool cg_lora_unmerge(cg_lora *a) { return merge(a, false, "unmerge"); }

/* ------------------------------------------------------- module trees */
typedef bool (*visit_fn)(void *ctx, cg_module *m, const char *path);

/* Depth first, in registration order; the lora_* children are skipped. */
static bool walk(cg_module *m, const char *path, visit_fn fn, void *ctx)
{
    if (!fn(ctx, m, path))
        return false;
    for (int i = 0; i < m->n_children; i++) {
        const char *nm = m->children[i].name;
        if (!strcmp(m->type, "Linear") && !strncmp(nm, "lora_", 5) && cg_lora_of((cg_linear *)m))
            continue;
        size_t n = strlen(path) + strlen(nm) + 2;
        char *p = malloc(n);
        if (!p) {
            cg_set_error("LoRA: out of memory");
            return false;
        }
        snprintf(p, n, "%s%s%s", path, *path ? "." : "", nm);
        bool ok = walk(m->children[i].module, p, fn, ctx);
        free(p);
        if (!ok)
            return false;
    }
    return true;
}

bool cg_lora_target_matches(const char *target, const char *path)
{
    if (!target || !path || !*target)
        return false;
    size_t t = strlen(target), p = strlen(path);
    return p >= t && !strcmp(path + p - t, target) && (p == t || path[p - t - 1] == '.');
}

static bool is_target(const cg_lora_config *c, const char *path)
{
    for (int i = 0; i < c->n_targets; i++)
        if (cg_lora_target_matches(c->targets[i], path))
            return true;
    return false;
}

typedef struct {
    const cg_lora_config *cfg;
    cg_rng *rng;
    cg_linear **found;
    int n, cap;
} attach_ctx;

static bool collect_targets(void *vctx, cg_module *m, const char *path)
{
    attach_ctx *c = vctx;
    if (strcmp(m->type, "Linear") || !is_target(c->cfg, path))
        return true;
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 8;
        cg_linear **p = realloc(c->found, (size_t)nc * sizeof *p);
        if (!p) {
            cg_set_error("LoRA: out of memory");
            return false;
        }
        c->found = p;
        c->cap = nc;
    }
    c->found[c->n++] = (cg_linear *)m;
    return true;
}

int cg_lora_attach_all(cg_module *root, const cg_lora_config *cfg, cg_rng *rng)
{
    if (!root || !cfg) {
        cg_error_null_input("cg_lora_attach_all");
        return -1;
    }
    attach_ctx c = {cfg, rng, NULL, 0, 0};
    if (!walk(root, "", collect_targets, &c)) {
        free(c.found);
        return -1;
    }
    if (c.n == 0) {
        char names[256] = "";
        for (int i = 0; i < cfg->n_targets && cfg->targets; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "",
                     cfg->targets[i] ? cfg->targets[i] : "(null)");
        cg_set_error("LoRA: no Linear of the %s matches the target modules %s", root->type,
                     cfg->n_targets ? names : "(none given)");
        free(c.found);
        return -1;
    }
    cg_module_requires_grad(root, false);
    int n = 0;
    for (; n < c.n; n++)
        if (!cg_lora_attach(c.found[n], cfg->r, cfg->alpha, cfg->dropout, rng))
            break;
    free(c.found);
    return n == c.n ? n : -1;
}

/* Every adapter below root with its path, in walk order. */
typedef struct {
    cg_lora **items;
    char **paths;
    int n, cap;
} lora_list;

static bool collect_loras(void *vctx, cg_module *m, const char *path)
{
    lora_list *l = vctx;
    cg_lora *a = strcmp(m->type, "Linear") ? NULL : cg_lora_of((cg_linear *)m);
    if (!a)
        return true;
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 8;
        cg_lora **p = realloc(l->items, (size_t)nc * sizeof *p);
        if (p)
            l->items = p;
        char **q = p ? realloc(l->paths, (size_t)nc * sizeof *q) : NULL;
        if (!q) {
            cg_set_error("LoRA: out of memory");
            return false;
        }
        l->paths = q;
        l->cap = nc;
    }
    size_t n = strlen(path) + 1;
    if (!(l->paths[l->n] = malloc(n))) {
        cg_set_error("LoRA: out of memory");
        return false;
    }
    memcpy(l->paths[l->n], path, n);
    l->items[l->n++] = a;
    return true;
}

/* Frees what l holds and leaves it empty (a second call frees nothing). */
static void lora_list_free(lora_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    free(l->items);
    *l = (lora_list){0};
}

static bool list_loras(const cg_module *root, lora_list *l)
{
    *l = (lora_list){0};
    if (!root)
        return false;
    if (!walk((cg_module *)root, "", collect_loras, l)) {
        lora_list_free(l);
        return false;
    }
    return true;
}

static int merge_all(cg_module *root, bool in)
{
    lora_list l;
    if (!list_loras(root, &l))
        return -1;
    int n = 0;
    for (; n < l.n; n++)
        if (l.items[n]->merged != in && !merge(l.items[n], in, in ? "merge" : "unmerge"))
            break;
    int r = n == l.n ? l.n : -1;
    lora_list_free(&l);
    return r;
}

int cg_lora_merge_all(cg_module *root) { return merge_all(root, true); }
int cg_lora_unmerge_all(cg_module *root) { return merge_all(root, false); }

bool cg_lora_unload(cg_lora *a, bool merge_first)
{
    if (!a) {
        cg_set_error("LoRA unload: the adapter is NULL");
        return false;
    }
    if (a->merged != merge_first && !merge(a, merge_first, merge_first ? "merge" : "unmerge"))
        return false;
    cg_module *l = &a->base->base;
    cg_hook_handle h = a->hook; /* its removal frees a */
    bool ok = true;
    for (int i = 0; i < 3; i++)
        ok = cg_module_remove_child(l, child_names[i]) && ok;
    return cg_hook_remove(&h) && ok;
}

int cg_lora_unload_all(cg_module *root, bool merge_first)
{
    lora_list l;
    if (!list_loras(root, &l))
        return -1;
    int n = 0; /* merged (or unmerged) all first: a failure leaves every adapter in place */
    for (; n < l.n; n++)
        if (l.items[n]->merged != merge_first &&
            !merge(l.items[n], merge_first, merge_first ? "merge" : "unmerge"))
            break;
    bool ok = n == l.n;
    for (int i = 0; ok && i < l.n; i++)
        ok = cg_lora_unload(l.items[i], merge_first);
    int r = ok ? l.n : -1;
    lora_list_free(&l);
    return r;
}

/* ------------------------------------------------------ save and load */
#define PEFT_PREFIX "base_model.model."

static char *key_of(const char *path, const char *which)
{
    size_t n = strlen(PEFT_PREFIX) + strlen(path) + strlen(which) + 16;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, PEFT_PREFIX "%s.%s.weight", path, which);
    else
        cg_set_error("LoRA: out of memory");
    return k;
}

static char *local_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    return (char *)(dot ? dot + 1 : path);
}

/* A float as the shortest decimal that reads back as it (0.2f as 0.2, not
 * 0.200000003), as PEFT's JSON has it. */
static double short_decimal(float x)
{
    char b[32];
    for (int digits = 6; digits < 9; digits++) {
        snprintf(b, sizeof b, "%.*g", digits, (double)x);
        if ((float)strtod(b, NULL) == x)
            return strtod(b, NULL);
    }
    return (double)x;
}

/* How many Linears below root the n targets name (cg_lora_target_matches),
 * or -1 + error. */
static int count_named(const cg_module *root, const char **targets, int n)
{
    const cg_lora_config by = {.n_targets = n, .targets = targets};
    attach_ctx c = {&by, NULL, NULL, 0, 0};
    bool ok = walk((cg_module *)root, "", collect_targets, &c);
    free(c.found);
    return ok ? c.n : -1;
}

/* PEFT's target_modules for the adapters l below root, added to arr: their
 * local names, each once, when those name exactly the adapted Linears;
 * else (adapters attached by full path to some of the Linears of a name)
 * their full paths, which a load attaches to the same Linears. Refused
 * when even those name more (an adapted "block.fc" and a plain
 * "sub.block.fc": PEFT's rule cannot tell them apart). */
static bool add_targets(const cg_module *root, const lora_list *l, cJSON *arr)
{
    const char **names = malloc(sizeof *names * (size_t)l->n);
    if (!names) {
        cg_set_error("LoRA save: out of memory");
        return false;
    }
    int n = 0;
    for (int i = 0; i < l->n; i++) { /* local names, each once */
        bool seen = false;
        for (int j = 0; j < n; j++)
            seen = seen || !strcmp(names[j], local_of(l->paths[i]));
        if (!seen)
            names[n++] = local_of(l->paths[i]);
    }
    int got = count_named(root, names, n);
    if (got >= 0 && got != l->n) { /* the local names would take more Linears */
        for (n = 0; n < l->n; n++)
            names[n] = l->paths[n];
        got = count_named(root, names, n);
    }
    if (got >= 0 && got != l->n)
        cg_set_error("LoRA save: target_modules cannot name the adapted Linears alone: their "
                     "paths are also the ends of other Linears' paths (PEFT matches a path or "
                     "its end after a dot)");
    bool ok = got == l->n;
    for (int i = 0; ok && i < n; i++)
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString(names[i]))) {
            cg_set_error("LoRA save: out of memory");
            ok = false;
        }
    free(names);
    return ok;
}

bool cg_lora_write(const cg_module *root, cg_st_writer *w)
{
    if (!root || !w) {
        cg_error_null_input("cg_lora_write");
        return false;
    }
    lora_list l;
    if (!list_loras(root, &l))
        return false;
    bool ok = true;
    if (l.n == 0) {
        cg_set_error("LoRA save: the %s has no adapters", root->type);
        ok = false;
    }
    for (int i = 1; ok && i < l.n; i++)
        if (l.items[i]->r != l.items[0]->r || l.items[i]->alpha != l.items[0]->alpha ||
            l.items[i]->dropout->p != l.items[0]->dropout->p) {
            cg_set_error("LoRA save: adapters '%s' and '%s' differ in r, alpha or dropout",
                         l.paths[0], l.paths[i]);
            ok = false;
        }
    cJSON *cfg = ok ? cJSON_CreateObject() : NULL;
    cJSON *targets = cfg ? cJSON_CreateArray() : NULL;
    char *json = NULL;
    if (ok && targets) {
        cJSON_AddStringToObject(cfg, "peft_type", "LORA");
        cJSON_AddNumberToObject(cfg, "r", l.items[0]->r);
        cJSON_AddNumberToObject(cfg, "lora_alpha", short_decimal(l.items[0]->alpha));
        cJSON_AddNumberToObject(cfg, "lora_dropout", short_decimal(l.items[0]->dropout->p));
        ok = add_targets(root, &l, targets);
        cJSON_AddItemToObject(cfg, "target_modules", targets);
        targets = NULL;
        json = cJSON_PrintUnformatted(cfg);
    }
    cJSON_Delete(targets);
    cJSON_Delete(cfg);
    if (ok && !json) {
        cg_set_error("LoRA save: out of memory");
        ok = false;
    }
    ok = ok && cg_st_set_metadata(w, "format", "pt") &&
         cg_st_set_metadata(w, "adapter_config", json);
    for (int i = 0; ok && i < l.n; i++) {
        char *ka = key_of(l.paths[i], "lora_A"), *kb = key_of(l.paths[i], "lora_B");
        ok = ka && kb && cg_st_add_f32(w, ka, l.items[i]->lora_A->weight) &&
             cg_st_add_f32(w, kb, l.items[i]->lora_B->weight);
        free(ka);
        free(kb);
    }
    free(json);
    lora_list_free(&l);
    return ok;
}

bool cg_lora_save(const cg_module *root, const char *path)
{
    if (!root || !path) {
        cg_error_null_input("cg_lora_save");
        return false;
    }
    cg_st_writer *w = cg_st_writer_new_deferred(); /* saved at once: read then */
    bool ok = w && cg_lora_write(root, w);
    if (!ok && w)
        cg_prefix_error("%s: ", path);
    ok = ok && cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    return ok;
}

/* The config's r is a whole number the file's lora_A tensors have as rows,
 * and lora_alpha is finite: checked before anything is allocated for it
 * (issue 34: "r": 2.5 was read as 2, "r": 1e300 allocated first). */
static bool rank_matches(const cg_st_file *f, const char *path, const cJSON *r, const cJSON *al)
{
    double v = r->valuedouble;
    if (!(v >= 1 && v <= (double)(1 << 20)) || v != floor(v) || !isfinite(al->valuedouble)) {
        cg_set_error("LoRA load %s: the adapter config's %s is %g (r must be a whole number "
                     "in [1, 2^20], lora_alpha finite)",
                     path, isfinite(al->valuedouble) ? "r" : "lora_alpha",
                     isfinite(al->valuedouble) ? v : al->valuedouble);
        return false;
    }
    const char *suffix = ".lora_A.weight";
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *n = cg_st_name(f, i);
        size_t ln = strlen(n), ls = strlen(suffix);
        int nd;
        int64_t shape[CG_MAX_DIMS];
        if (ln < ls || strcmp(n + ln - ls, suffix) || !cg_st_info(f, n, NULL, &nd, shape))
            continue;
        if (nd != 2 || shape[0] != (int64_t)v) {
            cg_set_error("LoRA load %s: the adapter config's r is %lld but '%s' has %lld rows",
                         path, (long long)v, n, nd >= 1 ? (long long)shape[0] : 0LL);
            return false;
        }
    }
    return true;
}

/* PEFT's adapter config from the file's metadata. targets are malloc'd. */
static bool read_config(const cg_st_file *f, const char *path, cg_lora_config *c, char ***targets)
{
    const char *js = cg_st_metadata(f, "adapter_config");
    /* the whole value is the JSON (cg_st_metadata_json: "{...}p" refused,
     * which cJSON_Parse took for its object; found by fuzz/fuzz_lora.c) */
    errno = 0; /* malloc's ENOMEM: out of memory, not a bad config */
    cJSON *j = js ? cg_st_metadata_json(f, "adapter_config") : NULL;
    bool no_memory = js && !j && errno == ENOMEM;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "r");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(j, "target_modules");
    int n = cJSON_IsArray(tm) ? cJSON_GetArraySize(tm) : 0;
    bool ok = cJSON_IsNumber(r) && cJSON_IsNumber(al) && n > 0;
    *targets = ok ? calloc((size_t)n, sizeof **targets) : NULL;
    no_memory = no_memory || (ok && !*targets);
    ok = ok && *targets;
    c->n_targets = ok ? n : 0;
    int k = 0;
    for (const cJSON *t = tm ? tm->child : NULL; ok && t; t = t->next, k++) {
        ok = cJSON_IsString(t) && ((*targets)[k] = strdup(t->valuestring));
        no_memory = no_memory || (cJSON_IsString(t) && !ok);
    }
    bool rank_bad = ok && !rank_matches(f, path, r, al); /* its message is set */
    ok = ok && !rank_bad;
    if (ok)
        *c = (cg_lora_config){.r = r->valueint,
                              .alpha = (float)al->valuedouble,
                              .dropout = cJSON_IsNumber(dr) ? (float)dr->valuedouble : 0.0f,
                              .n_targets = n,
                              .targets = (const char *const *)*targets};
    else if (!rank_bad)
        cg_set_error("LoRA load %s: %s", path,
                     !js         ? "no 'adapter_config' in the metadata (not a LoRA adapter file)"
                     : no_memory ? "out of memory reading the adapter config"
                     : !j        ? "the 'adapter_config' metadata is not JSON"
                                 : "the adapter config lacks r, lora_alpha or target_modules");
    cJSON_Delete(j);
    return ok;
}

/* The file tensors the adapters of a config need: A and B of every target
 * Linear, in walk order (the order cg_lora_attach_all attaches them). */
typedef struct {
    const cg_lora_config *cfg;
    const cg_st_file *f;
    const char *path;
    char **keys; /* 2 per target: A, B */
    int n, cap;
    char missing[512];
} need_ctx;

/* A target's two keys added to c; the ones the file holds must have the
 * shapes an adapter of r on it has, [r, in] and [out, r]. */
static bool need_keys(void *vctx, cg_module *m, const char *path)
{
    need_ctx *c = vctx;
    if (strcmp(m->type, "Linear") || !is_target(c->cfg, path))
        return true;
    if (c->n + 2 > c->cap) {
        int nc = c->cap ? 2 * c->cap : 16;
        char **p = realloc(c->keys, (size_t)nc * sizeof *p);
        if (!p) {
            cg_set_error("LoRA: out of memory");
            return false;
        }
        c->keys = p;
        c->cap = nc;
    }
    const cg_linear *l = (const cg_linear *)m;
    const int64_t want[2][2] = {{c->cfg->r, l->in_features}, {l->out_features, c->cfg->r}};
    for (int k = 0; k < 2; k++) {
        char *key = key_of(path, k ? "lora_B" : "lora_A");
        if (!key)
            return false;
        c->keys[c->n++] = key;
        int nd = 0;
        int64_t sh[CG_MAX_DIMS];
        if (!cg_st_has(c->f, key)) {
            snprintf(c->missing + strlen(c->missing), sizeof c->missing - strlen(c->missing),
                     "%s'%s'", *c->missing ? ", " : "", key);
        } else if (!cg_st_info(c->f, key, NULL, &nd, sh) || nd != 2 || sh[0] != want[k][0] ||
                   sh[1] != want[k][1]) {
            char got[64] = "[";
            for (int d = 0; d < nd; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                         (long long)sh[d]);
            cg_set_error("LoRA load %s: '%s' is %s], not the [%lld, %lld] of an adapter of r %d "
                         "on '%s'",
                         c->path, key, got, (long long)want[k][0], (long long)want[k][1], c->cfg->r,
                         path);
            return false;
        }
    }
    return true;
}

/* Strict, before any adapter is attached (an adapter of r rows is allocated
 * as it is attached, so that a config's r is only taken with the file's
 * tensors of that size): every tensor the config's adapters need is in f
 * with its shape, and (all) every tensor of f is one of them, else those
 * under PEFT_PREFIX are. c->keys (c->n) are the tensors needed. */
static bool file_holds_adapters(cg_module *root, need_ctx *c, bool all)
{
    if (!walk(root, "", need_keys, c))
        return false;
    if (c->n == 0) /* nothing matches: cg_lora_attach_all's message */
        return cg_lora_attach_all(root, c->cfg, NULL) > 0;
    char unexpected[512] = "";
    for (int i = 0; i < cg_st_count(c->f); i++) {
        const char *t = cg_st_name(c->f, i);
        bool used = !all && strncmp(t, PEFT_PREFIX, strlen(PEFT_PREFIX)) != 0;
        for (int k = 0; !used && k < c->n; k++)
            used = !strcmp(c->keys[k], t);
        if (!used)
            snprintf(unexpected + strlen(unexpected), sizeof unexpected - strlen(unexpected),
                     "%s'%s'", *unexpected ? ", " : "", t);
    }
    if (*c->missing || *unexpected) {
        cg_set_error("LoRA load %s: %s%s%s%s%s", c->path, *c->missing ? "missing " : "", c->missing,
                     *c->missing && *unexpected ? "; " : "", *unexpected ? "unexpected " : "",
                     unexpected);
        return false;
    }
    return true;
}

/* cg_lora_read; all: every tensor of f must be an adapter's (cg_lora_load),
 * else those outside "base_model.model." are the caller's. */
static bool lora_read(cg_module *root, const cg_st_file *f, const char *path, bool all)
{
    if (!root || !f || !path)
        return false;
    cg_lora_config cfg = {0};
    char **targets = NULL;
    bool ok = read_config(f, path, &cfg, &targets);
    if (ok) {
        lora_list before;
        ok = list_loras(root, &before);
        if (ok && before.n) {
            cg_set_error("LoRA load %s: the model already has adapters ('%s')", path,
                         before.paths[0]);
            ok = false;
            lora_list_free(&before);
        } else if (ok) {
            lora_list_free(&before);
        }
    }
    need_ctx need = {.cfg = &cfg, .f = f, .path = path};
    ok = ok && file_holds_adapters(root, &need, all) && cg_lora_attach_all(root, &cfg, NULL) > 0;
    /* the copies, dtypes and finite values checked first (nn/module.h);
     * the base's parameters are not in the file */
    const cg_load_options lo = {.prefix = PEFT_PREFIX, .non_strict = true};
    ok = ok && cg_module_load_ex(root, f, &lo);
    for (int i = 0; i < need.n; i++)
        free(need.keys[i]);
    free(need.keys);
    for (int i = 0; targets && i < cfg.n_targets; i++)
        free(targets[i]);
    free(targets);
    return ok;
}

bool cg_lora_read(cg_module *root, const cg_st_file *f, const char *path)
{
    return lora_read(root, f, path, false);
}

bool cg_lora_load(cg_module *root, const char *path)
{
    if (!root || !path) {
        cg_error_null_input("cg_lora_load");
        return false;
    }
    cg_st_file *f = cg_st_open(path);
    bool ok = f && lora_read(root, f, path, true);
    cg_st_close(f);
    return ok;
}
