/* Forward hooks (nn/module.h): registration, removal, and cg_module_call,
 * the dispatch point every module forward goes through. */
#include <stdlib.h>

#include "nn/module.h"

typedef struct {
    int64_t id;
    bool pre;
    cg_forward_pre_hook pre_fn;
    cg_forward_hook post_fn;
    void *ctx;
    void (*free_ctx)(void *ctx);
    bool dead; /* removed during a call of its module: dropped when the call ends */
} hook;

struct cg_module_hooks {
    hook *items;
    int n, cap;
    int64_t next_id;
    /* Calls of the module under way (cg_module_call), atomic: threads
     * sharing a model call its forward at once (a lost update left it
     * above 0, and a hook removed afterwards ran on for good). */
    int running;
};

/* Drop hs->items[i], freeing its ctx. */
static void drop_hook(struct cg_module_hooks *hs, int i)
{
    hook gone = hs->items[i];
    for (int j = i + 1; j < hs->n; j++)
        hs->items[j - 1] = hs->items[j];
    hs->n--;
    if (gone.free_ctx)
        gone.free_ctx(gone.ctx);
}

static cg_hook_handle add_hook(cg_module *m, hook h, const char *what)
{
    cg_hook_handle none = {0};
    if (!m || (!h.pre_fn && !h.post_fn)) {
        cg_set_error("%s: %s", what, m ? "NULL hook function" : "NULL module");
        if (h.free_ctx)
            h.free_ctx(h.ctx);
        return none;
    }
    struct cg_module_hooks *hs = m->hooks;
    if (!hs && !(hs = m->hooks = calloc(1, sizeof *hs)))
        goto oom;
    if (hs->n == hs->cap) {
        int nc = hs->cap ? 2 * hs->cap : 4;
        hook *p = realloc(hs->items, (size_t)nc * sizeof *p);
        if (!p)
            goto oom;
        hs->items = p;
        hs->cap = nc;
    }
    h.id = ++hs->next_id;
    hs->items[hs->n++] = h;
    return (cg_hook_handle){m, h.id};
oom:
    cg_set_error("%s on %s: out of memory", what, m->type);
    if (h.free_ctx)
        h.free_ctx(h.ctx);
    return none;
}

cg_hook_handle cg_module_register_forward_pre_hook(cg_module *m, cg_forward_pre_hook fn, void *ctx,
                                                   void (*free_ctx)(void *ctx))
{
    return add_hook(m, (hook){.pre = true, .pre_fn = fn, .ctx = ctx, .free_ctx = free_ctx},
                    "register_forward_pre_hook");
}

cg_hook_handle cg_module_register_forward_hook(cg_module *m, cg_forward_hook fn, void *ctx,
                                               void (*free_ctx)(void *ctx))
{
    return add_hook(m, (hook){.post_fn = fn, .ctx = ctx, .free_ctx = free_ctx},
                    "register_forward_hook");
}

bool cg_hook_remove(cg_hook_handle *h)
{
    if (!h || !h->module || !h->module->hooks)
        return false;
    struct cg_module_hooks *hs = h->module->hooks;
    for (int i = 0; i < hs->n; i++) {
        if (hs->items[i].id != h->id || hs->items[i].dead)
            continue;
        /* from a hook: the call's other hooks still run, as in PyTorch */
        if (__atomic_load_n(&hs->running, __ATOMIC_ACQUIRE))
            hs->items[i].dead = true;
        else
            drop_hook(hs, i);
        *h = (cg_hook_handle){0};
        return true;
    }
    return false;
}

void *cg_module_find_hook(const cg_module *m, const void *fn)
{
    if (!m || !m->hooks || !fn)
        return NULL;
    for (int i = 0; i < m->hooks->n; i++) {
        const hook *h = &m->hooks->items[i];
        if (!h->dead && ((h->pre && (const void *)h->pre_fn == fn) ||
                         (!h->pre && (const void *)h->post_fn == fn)))
            return h->ctx;
    }
    return NULL;
}

void cg_module_hooks_free(cg_module *m)
{
    if (!m || !m->hooks)
        return;
    struct cg_module_hooks *hs = m->hooks;
    m->hooks = NULL;
    for (int i = 0; i < hs->n; i++)
        if (hs->items[i].free_ctx)
            hs->items[i].free_ctx(hs->items[i].ctx);
    free(hs->items);
    free(hs);
}

cg_tensor *cg_module_call(cg_module *m, cg_forward_fn fn, int n_in, cg_tensor *const *in,
                          void *args)
{
    if (!m || !fn) {
        cg_error_null_input("cg_module_call");
        return NULL;
    }
    if (cg_debug_enabled() && m->tag == CG_MODULE_FREED) { /* the checked mode keeps its struct */
        cg_debug_report("forward: module %s was already freed (by cg_module_free)", m->type);
        return NULL;
    }
    /* checked with or without hooks: a module must not fail only once a
     * hook (a LoRA adapter, a user's) is added */
    if (n_in < 0 || n_in > CG_MAX_FORWARD_INPUTS || (n_in > 0 && !in)) {
        cg_set_error("%s: %d forward inputs%s (at most %d)", m->type, n_in,
                     n_in > 0 && !in ? " given as NULL" : "", CG_MAX_FORWARD_INPUTS);
        return NULL;
    }
    if (!m->hooks || m->hooks->n == 0)
        return fn(m, in, args);
    /* The hooks may replace inputs and output: hold a reference to each. */
    cg_tensor *x[CG_MAX_FORWARD_INPUTS] = {0};
    for (int i = 0; i < n_in; i++)
        x[i] = cg_retain(in[i]);
    struct cg_module_hooks *hs = m->hooks;
    /* The hooks registered when the call starts run, in order, also those
     * another hook removes meanwhile (PyTorch runs a copy of its dict):
     * removal during the call only marks them, so the indices hold. */
    __atomic_add_fetch(&hs->running, 1, __ATOMIC_ACQ_REL);
    const int n_hooks = hs->n;
    cg_tensor *y = NULL;
    bool ok = true;
    for (int i = 0; ok && i < n_hooks; i++)
        if (hs->items[i].pre) {
            const unsigned long serial = cg_error_serial();
            ok = hs->items[i].pre_fn(hs->items[i].ctx, m, n_in, x);
            if (!ok && cg_error_serial() == serial) /* never an empty or stale message */
                cg_set_error("%s: forward pre-hook %d returned false without recording a reason",
                             m->type, i + 1);
        }
    if (ok)
        y = fn(m, x, args);
    for (int i = 0; y && i < n_hooks; i++) {
        if (hs->items[i].pre)
            continue;
        const unsigned long serial = cg_error_serial();
        if (!hs->items[i].post_fn(hs->items[i].ctx, m, n_in, x, &y)) {
            if (cg_error_serial() == serial)
                cg_set_error("%s: forward hook %d returned false without recording a reason",
                             m->type, i + 1);
            cg_release(y);
            y = NULL;
        } else if (!y)
            cg_set_error("%s: forward hook %d left no output", m->type, i + 1);
    }
    for (int i = 0; i < n_in; i++)
        cg_release(x[i]);
    if (__atomic_sub_fetch(&hs->running, 1, __ATOMIC_ACQ_REL) == 0)
        for (int i = hs->n - 1; i >= 0; i--)
            if (hs->items[i].dead)
                drop_hook(hs, i);
    return y;
}
