/* The checked mode's lifetime bookkeeping (see core/lifetime.h). Only
 * called with CG_DEBUG=1; nothing here runs in a release run. */
#include "core/lifetime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cg_tensor_debug {
    char *name;           /* a parameter's name (owned), or NULL */
    const char *from;     /* the accessor that handed it out borrowed, or NULL */
    const char *freed_by; /* the call that freed it (a static string) */
};

/* ------------------------------------------------------------ quarantine */
/* Freed blocks, reachable from here for the rest of the process (so that a
 * leak checker does not count them). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void **g_kept;
static int64_t g_n, g_cap;

void cg_lifetime_quarantine(void *block)
{
    pthread_mutex_lock(&g_lock);
    if (g_n == g_cap) {
        int64_t cap = g_cap ? 2 * g_cap : 1024;
        void **k = realloc(g_kept, (size_t)cap * sizeof *k);
        if (k) {
            g_kept = k;
            g_cap = cap;
        }
    }
    if (g_n < g_cap)
        g_kept[g_n++] = block;
    /* else: out of memory; the block stays allocated, unlisted (a leak a
     * checker may report, never a reuse) */
    pthread_mutex_unlock(&g_lock);
}

int64_t cg_lifetime_quarantined(void)
{
    pthread_mutex_lock(&g_lock);
    int64_t n = g_n;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* ------------------------------------------------------------ the call */
static _Thread_local const char *g_call;

const char *cg_lifetime_enter(const char *call)
{
    const char *prev = g_call;
    if (!prev)
        g_call = call;
    return prev;
}

void cg_lifetime_leave(const char *prev)
{
    if (!prev)
        g_call = NULL;
}

/* ------------------------------------------------------------ names */
/* t's debug record, made on first use (NULL when out of memory). Two
 * threads may race to make it: one wins, the other frees its own. */
static struct cg_tensor_debug *debug_of(const cg_tensor *t)
{
    cg_tensor *w = (cg_tensor *)t; /* the record is bookkeeping, not the value */
    struct cg_tensor_debug *d = __atomic_load_n(&w->debug, __ATOMIC_ACQUIRE);
    if (d)
        return d;
    struct cg_tensor_debug *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    if (__atomic_compare_exchange_n(&w->debug, &d, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return n;
    free(n);
    return d;
}

void cg_lifetime_set_name(const cg_tensor *t, const char *name, bool replace)
{
    struct cg_tensor_debug *d = t && name ? debug_of(t) : NULL;
    if (!d || (d->name && (!replace || !strcmp(d->name, name))))
        return;
    char *copy = strdup(name);
    if (!copy)
        return; /* the old name stays */
    free(d->name);
    d->name = copy;
}

void cg_lifetime_borrowed_grad(const cg_tensor *g, const cg_tensor *t)
{
    if (!g || !t)
        return;
    const char *tn = t->debug ? t->debug->name : NULL;
    if (tn) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s.grad", tn);
        cg_lifetime_set_name(g, buf, true);
    } else {
        struct cg_tensor_debug *d = debug_of(g);
        if (d)
            d->from = "cg_grad";
    }
}

char *cg_lifetime_describe(const cg_tensor *t, char *buf, size_t n)
{
    char shape[160];
    cg_shape_str_n(t->ndim >= 0 && t->ndim <= CG_MAX_DIMS ? t->ndim : 0, t->shape, shape,
                   sizeof shape);
    const struct cg_tensor_debug *d = t->debug;
    if (d && d->name)
        snprintf(buf, n, "tensor '%s' %s %s", d->name, shape, cg_dtype_name(t->dtype));
    else
        snprintf(buf, n, "tensor %s %s%s%s%s", shape, cg_dtype_name(t->dtype),
                 d && d->from ? " (from " : "", d && d->from ? d->from : "",
                 d && d->from ? ")" : "");
    return buf;
}

/* ------------------------------------------------------------ checks */
bool cg_lifetime_release_ok(const cg_tensor *t, const char *call, bool owned)
{
    char what[512];
    if (!call)
        call = g_call ? g_call : "a release";
    if (t->magic == CG_TENSOR_FREED) {
        const char *by = t->debug && t->debug->freed_by ? t->debug->freed_by : "an earlier call";
        cg_debug_report("%s: %s was already freed (by %s)", call,
                        cg_lifetime_describe(t, what, sizeof what), by);
        return false;
    }
    if (t->magic != CG_TENSOR_LIVE) {
        cg_debug_report("%s: %p is not a tensor (its magic word is 0x%08x)", call, (const void *)t,
                        (unsigned)t->magic);
        return false;
    }
    if (!owned)
        return true;
    /* Held references are taken (cg_retain_held) count first and given
     * back (cg_release_held) hold first, so refcount >= held at any time;
     * read held first and the count again, so that a concurrent pair of
     * those does not look like a borrowed release. */
    int held, rc;
    do {
        held = __atomic_load_n(&t->held, __ATOMIC_ACQUIRE);
        rc = __atomic_load_n(&t->refcount, __ATOMIC_ACQUIRE);
    } while (held != __atomic_load_n(&t->held, __ATOMIC_ACQUIRE));
    if (rc > held)
        return true;
    cg_debug_report("%s: %s is borrowed: its %d reference%s held by a module, an optimizer, "
                    "a gradient or a graph node (released twice, or ->weight, cg_grad, a "
                    "parameter lookup); release only references you own",
                    call, cg_lifetime_describe(t, what, sizeof what), rc,
                    rc == 1 ? " is" : "s are");
    return false;
}

bool cg_lifetime_use_ok(const cg_tensor *t, const char *op)
{
    /* only the poison is named: a header with another word may be a copy
     * made on the stack (core/matmul.c), which is no mistake */
    if (!t || t->magic != CG_TENSOR_FREED)
        return true;
    return cg_lifetime_release_ok(t, op ? op : "a use", false);
}

void cg_lifetime_retire(cg_tensor *t)
{
    struct cg_tensor_debug *d = debug_of(t);
    if (d)
        d->freed_by = g_call ? g_call : "a release";
    t->magic = CG_TENSOR_FREED;
    t->storage = NULL; /* a use of the freed tensor faults at once, never reads freed data */
    t->offset = 0;
    t->refcount = 0;
    t->held = 0;
    t->grad = NULL;
    t->node = NULL;
    t->scope = NULL;
    t->requires_grad = false;
    cg_lifetime_quarantine(t);
}
