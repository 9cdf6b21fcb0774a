/* The backward engine: topological order, gradient accumulation, the
 * version check, gradient-ready hooks. Recording and freeing nodes are
 * graph.c. */
#include "autograd/autograd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph_impl.h"
#include "core/ops.h"

/* -------------------------------------------------------- backward hook */
static _Thread_local cg_backward_hook_fn g_bw_hook;
static _Thread_local void *g_bw_hook_ctx;

void cg_set_backward_hook(cg_backward_hook_fn fn, void *ctx)
{
    g_bw_hook = fn;
    g_bw_hook_ctx = ctx;
}

/* ---------------------------------------------------- topological order */
static uint64_t g_epoch; /* atomic; marks are epochs: no clearing pass needed */

typedef struct {
    cg_node **v;
    size_t n, cap;
} node_vec;

static bool vec_push(node_vec *s, cg_node *n)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        cg_node **p = realloc(s->v, cap * sizeof *p);
        if (!p)
            return false;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = n;
    return true;
}

/* ------------------------------------------------- gradient-ready hooks */
/* The hooked leaves, sorted by address (bsearch). pending counts, during
 * one backward, the nodes still to run that pass the leaf a gradient. */
typedef struct {
    const cg_tensor *t;
    cg_grad_ready_fn fn;
    void *ctx;
    int64_t pending;
} ready_hook;
static _Thread_local ready_hook *g_ready;
static _Thread_local size_t g_nready, g_capready;
static _Thread_local int g_bw_depth; /* nested backwards (checkpoint.c) fire no hooks */

static size_t ready_pos(const cg_tensor *t) /* first index with address >= t */
{
    size_t lo = 0, hi = g_nready;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)g_ready[mid].t < (uintptr_t)t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static ready_hook *ready_find(const cg_tensor *t)
{
    size_t i = ready_pos(t);
    return i < g_nready && g_ready[i].t == t ? &g_ready[i] : NULL;
}

bool cg_grad_ready_hook_add(cg_tensor *t, cg_grad_ready_fn fn, void *ctx)
{
    if (!t || !fn) {
        cg_set_error("grad_ready_hook_add: needs a tensor and a function");
        return false;
    }
    size_t i = ready_pos(t);
    if (i < g_nready && g_ready[i].t == t) {
        g_ready[i].fn = fn;
        g_ready[i].ctx = ctx;
        return true;
    }
    if (g_nready == g_capready) {
        size_t cap = g_capready ? 2 * g_capready : 64;
        ready_hook *p = realloc(g_ready, cap * sizeof *p);
        if (!p) {
            cg_set_error("grad_ready_hook_add: out of memory");
            return false;
        }
        g_ready = p;
        g_capready = cap;
    }
    memmove(g_ready + i + 1, g_ready + i, (g_nready - i) * sizeof *g_ready);
    g_ready[i] = (ready_hook){t, fn, ctx, 0};
    g_nready++;
    return true;
}

void cg_grad_ready_hook_remove(const cg_tensor *t)
{
    size_t i = ready_pos(t);
    if (!t || i >= g_nready || g_ready[i].t != t)
        return;
    memmove(g_ready + i, g_ready + i + 1, (g_nready - i - 1) * sizeof *g_ready);
    if (--g_nready == 0) {
        free(g_ready);
        g_ready = NULL;
        g_capready = 0;
    }
}

/* Before the walk: how many nodes of order pass each hooked leaf a
 * gradient (only the outermost backward fires hooks). */
static bool ready_count(const node_vec *order)
{
    if (!g_nready || g_bw_depth != 1)
        return false;
    for (size_t i = 0; i < g_nready; i++)
        g_ready[i].pending = 0;
    for (size_t k = 0; k < order->n; k++) {
        cg_node *n = order->v[k];
        for (int i = 0; i < n->n_inputs; i++) {
            ready_hook *h = cg_is_leaf_input(n->inputs[i]) ? ready_find(n->inputs[i]) : NULL;
            if (h)
                h->pending++;
        }
    }
    return true;
}

/* Node n has run (or got no gradient): its leaves may be final now. */
static void ready_node_done(const cg_node *n)
{
    for (int i = 0; i < n->n_inputs; i++) {
        cg_tensor *in = n->inputs[i];
        ready_hook *h = cg_is_leaf_input(in) ? ready_find(in) : NULL;
        if (h && --h->pending == 0 && in->grad)
            h->fn(h->ctx, in);
    }
}

/* An edge of the graph into a part that an earlier backward freed: input
 * `input` of node `user` was made by `node`, which that backward freed. */
typedef struct {
    const cg_node *node, *user;
    int input;
} freed_edge;

/* This thread's token in cg_node.walker. */
static _Thread_local char g_walker;

/* Claim n for this thread's walk: true if it is this thread's now (pushed
 * to *claimed) or was already (a backward run from inside one); false if
 * another thread's backward walks it. */
static bool claim(cg_node *n, node_vec *claimed, cg_node **busy)
{
    const void *was = NULL;
    if (__atomic_compare_exchange_n(&n->walker, &was, (const void *)&g_walker, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (vec_push(claimed, n))
            return true;
        __atomic_store_n(&n->walker, NULL, __ATOMIC_RELEASE); /* out of memory */
        return false;
    }
    if (was == &g_walker)
        return true;
    *busy = n;
    return false;
}

/* Give back the nodes of *claimed (and empty it). */
static void unclaim(node_vec *claimed)
{
    for (size_t k = 0; k < claimed->n; k++)
        __atomic_store_n(&claimed->v[k]->walker, NULL, __ATOMIC_RELEASE);
    free(claimed->v);
    *claimed = (node_vec){0};
}

/* Post-order DFS with an explicit stack: order->v ends with root's node.
 * A stack entry is the node and how many of its inputs were visited,
 * encoded as two parallel vectors. A freed node is not entered (it has
 * let its inputs go); the first edge into one that needs a gradient goes
 * to *freed (if not NULL; its node stays NULL when there is none). Every
 * node entered is claimed for this thread (*claimed: give them back with
 * unclaim); one that another thread's backward walks ends the sort:
 * false, *busy set (else NULL: out of memory). */
static bool topo_sort(cg_node *root, node_vec *order, freed_edge *freed, node_vec *claimed,
                      cg_node **busy)
{
    uint64_t epoch = __atomic_add_fetch(&g_epoch, 1, __ATOMIC_RELAXED);
    node_vec stack = {0};
    size_t *next = NULL, next_cap = 0;
    bool ok = true;
    *busy = NULL;
    if (!claim(root, claimed, busy))
        return false;
    root->mark = epoch;
    if (!vec_push(&stack, root))
        return false;
    next = malloc(64 * sizeof *next);
    next_cap = 64;
    if (!next) {
        free(stack.v);
        return false;
    }
    next[0] = 0;
    while (stack.n && ok) {
        cg_node *n = stack.v[stack.n - 1];
        size_t *i = &next[stack.n - 1];
        if (*i < (size_t)n->n_inputs) {
            int idx = (int)(*i)++;
            cg_tensor *in = n->inputs[idx];
            cg_node *c = in ? in->node : NULL;
            if (c && c->freed) {
                if (freed && !freed->node && in->requires_grad)
                    *freed = (freed_edge){c, n, idx};
            } else if (c && !claim(c, claimed, busy)) {
                ok = false;
            } else if (c && c->mark != epoch) {
                c->mark = epoch;
                if (!vec_push(&stack, c)) {
                    ok = false;
                    break;
                }
                if (stack.n > next_cap) {
                    size_t *p = realloc(next, 2 * next_cap * sizeof *p);
                    if (!p) {
                        ok = false;
                        break;
                    }
                    next = p;
                    next_cap *= 2;
                }
                next[stack.n - 1] = 0;
            }
        } else {
            if (!vec_push(order, n))
                ok = false;
            stack.n--;
        }
    }
    free(stack.v);
    free(next);
    return ok;
}

int64_t cg_graph_size(const cg_tensor *t)
{
    if (!t || !t->node || t->node->freed)
        return 0;
    node_vec order = {0}, claimed = {0};
    cg_node *busy;
    int64_t n = topo_sort(t->node, &order, NULL, &claimed, &busy) ? (int64_t)order.n : -1;
    unclaim(&claimed);
    free(order.v);
    return n;
}

/* -------------------------------------------------------- accumulation */
/* Reduce g to shape (ndim, shape) if it is a broadcast of it; g (consumed)
 * must be a float tensor. NULL + error otherwise. */
static cg_tensor *fit_to_shape(cg_node *n, int idx, cg_tensor *g, const cg_tensor *input)
{
    if (!cg_dtype_is_float(g->dtype)) { /* rounding it to the input's dtype would hide it */
        cg_set_error("backward of %s: gradient %d is %s; a gradient must be a float tensor "
                     "(float32, bfloat16 or float16)",
                     cg_node_name(n), idx, cg_dtype_name(g->dtype));
        cg_release(g);
        return NULL;
    }
    if (g->ndim == input->ndim && cg_same_shape(g, input))
        return g;
    int64_t bshape[CG_MAX_DIMS];
    int nd =
        cg_broadcast_shapes(cg_node_name(n), input->ndim, input->shape, g->ndim, g->shape, bshape);
    bool ok = nd == g->ndim;
    for (int i = 0; ok && i < nd; i++)
        ok = bshape[i] == g->shape[i];
    if (!ok) {
        char b1[96], b2[96];
        cg_set_error("backward of %s: gradient %d has shape %s, which does not reduce to the "
                     "input shape %s",
                     cg_node_name(n), idx, cg_shape_str(g, b1, sizeof b1),
                     cg_shape_str(input, b2, sizeof b2));
        cg_release(g);
        return NULL;
    }
    cg_tensor *r = cg_k_sum_to_shape(g, input->ndim, input->shape);
    cg_release(g);
    return r;
}

/* A gradient has its input's dtype (PyTorch's validate_outputs): a
 * backward computed in float32 for a bfloat16 input is rounded to
 * bfloat16 here, and cg_to's backward is the identity. g is consumed. */
static cg_tensor *to_input_dtype(cg_tensor *g, const cg_tensor *input)
{
    if (!g || g->dtype == input->dtype)
        return g;
    cg_tensor *r = cg_k_to(g, input->dtype);
    cg_release(g);
    return r;
}

/* *slot += g (g consumed). Adds in place only into a contiguous tensor whose
 * storage nobody else shares. A leaf's .grad (private = true) must own its
 * storage outright, because optimizers and clipping update it in place; a
 * node's gradient is internal to the engine and may share storage (the two
 * inputs of an add receive the same tensor), which saves a copy per use. */
static bool accumulate_unlocked(cg_tensor **slot, cg_tensor *g, bool private)
{
    if (!*slot) {
        bool owned =
            g->refcount == 1 && g->storage->refcount == 1 && cg_is_contiguous(g) && !g->node;
        if (owned || (!private && !g->node)) {
            *slot = private ? cg_hold_shared(g) : g; /* a leaf's gradient outlives scopes */
            return true;
        }
        *slot = cg_k_clone(g);
        cg_release(g);
        if (private)
            cg_hold_shared(*slot);
        return *slot != NULL;
    }
    cg_tensor *s = *slot;
    bool ok;
    if (s->storage->refcount == 1 && s->refcount == 1 && cg_is_contiguous(s)) {
        ok = cg_k_add_(s, g);
    } else {
        cg_tensor *sum = cg_k_add(s, g);
        ok = sum != NULL;
        if (ok) {
            if (private) {
                cg_unhold(s);
                cg_hold_shared(sum);
            }
            cg_release(s);
            *slot = sum;
        }
    }
    cg_release(g);
    return ok;
}

/* A leaf's .grad may be shared by threads that run backwards through one
 * model at once (Hogwild-style): accumulation into it is locked, as
 * PyTorch's AccumulateGrad locks. One of 64 mutexes, picked by the slot's
 * address; a node's gradient is private to its backward and needs none. */
enum { GRAD_LOCKS = 64 };
static pthread_mutex_t g_grad_locks[GRAD_LOCKS];
static pthread_once_t g_grad_locks_once = PTHREAD_ONCE_INIT;

static void grad_locks_init(void)
{
    for (int i = 0; i < GRAD_LOCKS; i++)
        pthread_mutex_init(&g_grad_locks[i], NULL);
}

static pthread_mutex_t *grad_lock(cg_tensor *const *slot)
{
    pthread_once(&g_grad_locks_once, grad_locks_init);
    return &g_grad_locks[((uintptr_t)slot >> 4) % GRAD_LOCKS];
}

/* The node whose backward runs now on this thread (cg_node_grad_acc
 * offers gradients only to it; a recomputed block's inner backward, run
 * from inside a node's, puts it back when done), and the leaf's gradient
 * handed to that backward with the leaf's lock, held until the backward
 * returns: at most one leaf a backward, so that a thread holding one lock
 * never waits for another. */
static _Thread_local const cg_node *g_running;
typedef struct {
    const cg_tensor *grad;
    pthread_mutex_t *mu;
} handed_leaf;
static _Thread_local handed_leaf g_handed;

/* Lock the leaf gradient at slot: its mutex, or NULL when this thread
 * holds it already (a walk run from inside a backward it was handed to);
 * leaf_unlock takes what leaf_lock gave. */
static pthread_mutex_t *leaf_lock(cg_tensor *const *slot)
{
    pthread_mutex_t *mu = grad_lock(slot);
    if (mu == g_handed.mu)
        return NULL;
    pthread_mutex_lock(mu);
    return mu;
}

static void leaf_unlock(pthread_mutex_t *mu)
{
    if (mu)
        pthread_mutex_unlock(mu);
}

static bool accumulate(cg_tensor **slot, cg_tensor *g, bool private)
{
    if (!private)
        return accumulate_unlocked(slot, g, false);
    pthread_mutex_t *mu = leaf_lock(slot);
    bool ok = accumulate_unlocked(slot, g, true);
    leaf_unlock(mu);
    return ok;
}

/* Can s, the gradient that input in already has, take a sum in place? */
static bool acc_fits(const cg_tensor *s, const cg_tensor *in)
{
    return s && !s->node && s->dtype == in->dtype && cg_same_shape(s, in) && cg_is_contiguous(s) &&
           __atomic_load_n(&s->refcount, __ATOMIC_RELAXED) == 1 &&
           __atomic_load_n(&s->storage->refcount, __ATOMIC_RELAXED) == 1;
}

cg_tensor *cg_node_grad_acc(const cg_node *n, int i)
{
    if (!n || n != g_running || g_bw_hook || !cg_node_needs_grad(n, i))
        return NULL;
    cg_tensor *in = n->inputs[i];
    if (in->node && in->node->freed)
        return NULL;
    for (int j = 0; j < n->n_inputs; j++) { /* x op x: both gradients go to one tensor */
        const cg_tensor *o = n->inputs[j];  /* NULL: an optional input left out */
        if (j != i && o && (o == in || (in->node && o->node == in->node)))
            return NULL;
    }
    if (in->node)
        return acc_fits(in->node->grad, in) ? in->node->grad : NULL;
    if (g_handed.mu) /* one leaf a backward */
        return NULL;
    pthread_mutex_t *mu = leaf_lock(&in->grad);
    if (!acc_fits(in->grad, in)) {
        leaf_unlock(mu);
        return NULL;
    }
    g_handed = (handed_leaf){in->grad, mu};
    return in->grad;
}

/* After n's backward: the references to the leaf's gradient it handed
 * back in gv are given back (the engine adds nothing), then the leaf's
 * lock: no other thread sees the gradient held twice, and so none is
 * refused it. */
static void handed_back(const cg_node *n, cg_tensor **gv)
{
    for (int i = 0; g_handed.grad && i < n->n_inputs; i++) {
        if (gv[i] && gv[i] == g_handed.grad && !n->inputs[i]->node) {
            cg_release(gv[i]);
            gv[i] = NULL;
        }
    }
    leaf_unlock(g_handed.mu);
    g_handed = (handed_leaf){0};
}

cg_tensor *cg_grad_take(cg_tensor *in)
{
    if (in->node) {
        cg_tensor *g = in->node->grad;
        if (!g || !cg_same_shape(g, in))
            return NULL;
        in->node->grad = NULL;
        return cg_hold(g);
    }
    pthread_mutex_t *mu = leaf_lock(&in->grad);
    cg_tensor *g = in->grad;
    if (g && cg_same_shape(g, in))
        in->grad = NULL;
    else
        g = NULL;
    leaf_unlock(mu);
    return g;
}

void cg_grad_drop(cg_tensor *t)
{
    pthread_mutex_t *mu = leaf_lock(&t->grad);
    cg_tensor *g = t->grad;
    t->grad = NULL;
    leaf_unlock(mu);
    cg_release_held(g);
}

/* The version check: a tensor the backward will read must hold the values
 * the forward saw. Checks every node of order before anything is computed,
 * so that a refusal changes no gradient. */
static bool versions_unchanged(const node_vec *order)
{
    for (size_t k = 0; k < order->n; k++) {
        const cg_node *n = order->v[k];
        const cg_tensor *t = NULL;
        const char *what = "input";
        int idx = -1;
        uint64_t saved_at = 0;
        for (int i = 0; i < n->n_inputs && !t; i++) {
            if (n->inputs[i] && cg_node_reads(n, i) &&
                cg_version(n->inputs[i]) != n->in_version[i]) {
                t = n->inputs[i];
                idx = i;
                saved_at = n->in_version[i];
            }
        }
        for (int i = 0; i < CG_NODE_MAX_SAVED && !t; i++) {
            if (n->saved[i] && cg_version(n->saved[i]) != n->saved_version[i]) {
                t = n->saved[i];
                what = "saved tensor";
                idx = i;
                saved_at = n->saved_version[i];
            }
        }
        if (!t)
            continue;
        char shp[96], who[160];
        cg_shape_str(t, shp, sizeof shp);
        if (idx >= 0 && what[0] == 's') /* a saved tensor may be an alias without a node */
            snprintf(who, sizeof who, "%s", shp);
        else if (t->node)
            snprintf(who, sizeof who, "the output of '%s' %s", cg_node_name(t->node), shp);
        else
            snprintf(who, sizeof who, "a leaf %s", shp);
        cg_set_error("backward: %s %d of '%s' (%s) was modified in place after it was saved "
                     "(version %llu, saved at %llu)",
                     what, idx, cg_node_name(n), who, (unsigned long long)cg_version(t),
                     (unsigned long long)saved_at);
        return false;
    }
    return true;
}

/* root's graph in topological order, checked before anything is computed,
 * so that a refusal changes no gradient: no part of it freed by an earlier
 * backward, no tensor a backward reads written in place. False + error. */
static bool sort_and_check(cg_node *root, node_vec *order, node_vec *claimed)
{
    freed_edge freed = {0};
    cg_node *busy;
    if (!topo_sort(root, order, &freed, claimed, &busy)) {
        if (busy)
            cg_set_error("backward: another thread is running a backward through part of this "
                         "graph (its node '%s'); backwards that share part of a graph must not "
                         "run at the same time (hold a lock around them)",
                         cg_node_name(busy));
        else
            cg_set_error("backward: out of memory sorting the graph");
        return false;
    }
    /* Part of the graph was freed by an earlier backward without
     * retain_graph (two losses that share a trunk, each backwarded once):
     * the freed nodes have let go of their inputs and of what their
     * backward reads, so the gradient cannot go on through them. Refused,
     * as PyTorch refuses it, never a backward that stops there and leaves
     * that part's gradients out. */
    if (freed.node) {
        char shp[96];
        cg_set_error("backward: part of the graph was already freed by an earlier backward: "
                     "input %d of '%s' is the output of '%s' %s, which a backward without "
                     "retain_graph went through (pass retain_graph to that backward, or "
                     "backward the sum of the losses once)",
                     freed.input, cg_node_name(freed.user), cg_node_name(freed.node),
                     cg_shape_str(freed.user->inputs[freed.input], shp, sizeof shp));
        return false;
    }
    return versions_unchanged(order);
}

static bool backward_impl(cg_tensor *root, const cg_tensor *grad_root, bool retain_graph);

bool cg_backward(cg_tensor *root, const cg_tensor *grad_root, bool retain_graph)
{
    if (cg_debug_enabled() &&
        (!cg_lifetime_use_ok(root, "cg_backward") || !cg_lifetime_use_ok(grad_root, "cg_backward")))
        return false; /* a freed root or gradient (the checked mode): named */
    g_bw_depth++;
    bool ok = backward_impl(root, grad_root, retain_graph);
    g_bw_depth--;
    return ok;
}

static bool backward_impl(cg_tensor *root, const cg_tensor *grad_root, bool retain_graph)
{
    if (!root)
        return cg_error_null_input("cg_backward");
    if (!root->requires_grad) {
        cg_set_error("backward: the tensor does not require grad (no input of its graph "
                     "requires grad, or it was computed under no-grad)");
        return false;
    }
    cg_tensor *g0;
    if (grad_root) {
        if (!cg_same_shape(grad_root, root)) {
            char b1[96], b2[96];
            cg_set_error("backward: gradient shape %s differs from the tensor's shape %s",
                         cg_shape_str(grad_root, b1, sizeof b1), cg_shape_str(root, b2, sizeof b2));
            return false;
        }
        g0 = grad_root->dtype == root->dtype ? cg_k_clone(grad_root)
                                             : cg_k_to(grad_root, root->dtype);
    } else {
        if (cg_numel(root) != 1) {
            char b[96];
            cg_set_error("backward: without an explicit gradient the tensor must have one "
                         "element (shape %s)",
                         cg_shape_str(root, b, sizeof b));
            return false;
        }
        g0 = cg_full_dtype(root->dtype, root->ndim, root->shape, 1.0);
    }
    if (!g0)
        return false;
    if (!root->node) { /* a leaf */
        bool ok = accumulate(&root->grad, g0, true);
        ready_hook *h = ok && g_bw_depth == 1 ? ready_find(root) : NULL;
        if (h)
            h->fn(h->ctx, root);
        return ok;
    }
    if (root->node->freed) {
        cg_release(g0);
        cg_set_error("backward: the graph was already freed by an earlier backward "
                     "(pass retain_graph to backward twice)");
        return false;
    }
    node_vec order = {0}, claimed = {0};
    if (!sort_and_check(root->node, &order, &claimed)) {
        unclaim(&claimed);
        free(order.v);
        cg_release(g0);
        return false;
    }
    /* As PyTorch does, unless the graph is to be kept, what a node kept for
     * its backward goes as soon as the backward has run, not when the walk
     * ends: a layer's activations are freed as the gradient passes below
     * it, and the backward's own buffers never add to all of them. The walk
     * holds every node of its order until the end (a node whose last user
     * has gone waits for its turn). */
    for (size_t k = 0; k < order.n; k++)
        cg_node_hold(order.v[k]);
    bool ok = accumulate(&root->node->grad, g0, false);
    bool hooks = ready_count(&order);
    /* order has inputs before users: walk it backwards. */
    for (size_t k = order.n; ok && k-- > 0;) {
        cg_node *n = order.v[k];
        if (!n->grad) { /* no gradient reached this node */
            if (hooks)
                ready_node_done(n);
            if (!retain_graph)
                cg_node_drop_refs(n);
            continue;
        }
        cg_tensor *gin[16] = {0};
        cg_tensor **gv = n->n_inputs <= 16 ? gin : calloc((size_t)n->n_inputs, sizeof *gv);
        if (!gv) {
            cg_set_error("backward: out of memory");
            ok = false;
            break;
        }
        unsigned long serial = cg_error_serial();
        const cg_node *outer = g_running;
        /* a walk run from inside a backward that holds a leaf's lock (a
         * recomputed block's) hands over no leaf's gradient */
        const bool outer_holds = g_handed.mu;
        g_running = n;
        ok = n->backward(n, n->grad, gv);
        g_running = outer;
        if (!ok && cg_error_serial() == serial) /* no message of its own: never a stale one */
            cg_set_error("backward of %s failed without recording a reason", cg_node_name(n));
        if (ok && g_bw_hook)
            g_bw_hook(g_bw_hook_ctx, n, gv);
        for (int i = 0; ok && n->name && i < n->n_inputs; i++) {
            if (cg_node_needs_grad(n, i) && !gv[i]) {
                cg_set_error("backward of %s gave no gradient for input %d, which needs one",
                             cg_node_name(n), i);
                ok = false;
            }
        }
        if (!outer_holds)
            handed_back(n, gv);
        for (int i = 0; i < n->n_inputs; i++) {
            cg_tensor *g = gv[i];
            if (!g)
                continue;
            cg_tensor *in = n->inputs[i];
            if (!ok || !cg_node_needs_grad(n, i) || (in->node && g == in->node->grad)) {
                cg_release(g); /* or added into the input's gradient: cg_node_grad_acc */
                continue;
            }
            g = to_input_dtype(fit_to_shape(n, i, g, in), in);
            if (!g) {
                ok = false;
                continue;
            }
            if (!in->node) {
                ok = accumulate(&in->grad, g, true);
            } else if (!in->node->freed) {
                ok = accumulate(&in->node->grad, g, false);
            } else { /* checked above: only a backward run from inside this one frees it */
                cg_release(g);
                cg_set_error("backward: the node of '%s' that input %d of '%s' comes from was "
                             "freed while this backward ran",
                             cg_node_name(in->node), i, cg_node_name(n));
                ok = false;
            }
        }
        if (gv != gin)
            free(gv);
        cg_release(n->grad);
        n->grad = NULL;
        if (hooks && ok)
            ready_node_done(n);
        if (ok && !retain_graph)
            cg_node_drop_refs(n);
    }
    /* Drop leftover gradients (after a failure) and, unless asked to keep it,
     * the graph itself. */
    for (size_t k = 0; k < order.n; k++) {
        cg_node *n = order.v[k];
        cg_release(n->grad);
        n->grad = NULL;
        if (!retain_graph)
            cg_node_drop_refs(n);
    }
    unclaim(&claimed);
    for (size_t k = 0; k < order.n; k++)
        cg_node_unhold(order.v[k]);
    free(order.v);
    return ok;
}
