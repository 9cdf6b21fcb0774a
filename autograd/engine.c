/* The backward engine: topological order, gradient accumulation, the
 * version check, gradient-ready hooks. Recording and freeing nodes are
 * graph.c. */
#include "autograd/autograd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/engine_impl.h"
#include "autograd/ops.h"
#include "core/ops.h"

/* -------------------------------------------------------- backward hook */
static _Thread_local cg_backward_hook_fn g_bw_hook;
static _Thread_local void *g_bw_hook_ctx;

void cg_set_backward_hook(cg_backward_hook_fn fn, void *ctx)
{
    g_bw_hook = fn;
    g_bw_hook_ctx = ctx;
}

bool cg_backward_hook_on(void) { return g_bw_hook != NULL; }

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
/* The walk's nodes (roots: nroots of them, each entered once whatever
 * their number) in topological order. The inputs of a node in stops
 * (sorted, nstops) are not entered: a recomputation's stand-ins, below
 * which lies a graph its walk does not need. */
static bool topo_sort(cg_node *const *roots, int nroots, const void *const *stops, size_t nstops,
                      node_vec *order, freed_edge *freed, node_vec *claimed, cg_node **busy)
{
    uint64_t epoch = __atomic_add_fetch(&g_epoch, 1, __ATOMIC_RELAXED);
    node_vec stack = {0};
    size_t *next = NULL, next_cap = 0;
    bool ok = true;
    *busy = NULL;
    next = malloc(64 * sizeof *next);
    next_cap = 64;
    if (!next)
        return false;
    for (int r = 0; ok && r < nroots; r++) {
        cg_node *root = roots[r];
        if (root->mark == epoch)
            continue;
        if (!claim(root, claimed, busy)) {
            ok = false;
            break;
        }
        root->mark = epoch;
        if (!vec_push(&stack, root)) {
            ok = false;
            break;
        }
        next[0] = cg_ptr_in(stops, nstops, root) ? (size_t)root->n_inputs : 0;
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
                    next[stack.n - 1] = cg_ptr_in(stops, nstops, c) ? (size_t)c->n_inputs : 0;
                }
            } else {
                if (!vec_push(order, n))
                    ok = false;
                stack.n--;
            }
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
    cg_node *root = t->node;
    int64_t n = topo_sort(&root, 1, NULL, 0, &order, NULL, &claimed, &busy) ? (int64_t)order.n : -1;
    unclaim(&claimed);
    free(order.v);
    return n;
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

/* The walk's graph in topological order (sorted from every root node;
 * below a node of stops, nothing): no part of it freed by an earlier
 * backward. False + error. */
static bool sort_graph(cg_node *const *roots, int nroots, const void *const *stops, size_t nstops,
                       node_vec *order, node_vec *claimed)
{
    freed_edge freed = {0};
    cg_node *busy;
    if (!topo_sort(roots, nroots, stops, nstops, order, &freed, claimed, &busy)) {
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
    return true;
}

/* The backward a walk with create_graph runs for n: the op's
 * differentiable one (grad2.c), or a user-defined op's own when it
 * composes differentiable ops; NULL when there is none. */
static cg_backward_fn graph_backward(const cg_node *n)
{
    if (n->bw_composes)
        return n->backward;
    return cg_graph_backward_of(n->op);
}

/* ------------------------------------------------------------ the walk */
static bool walk_impl(const cg_walk_args *a);

bool cg_walk(const cg_walk_args *a)
{
    const bool no_acc = cg_no_acc;
    const int mode = a->create ? cg_grad_mode_enter(true) : 0;
    cg_no_acc = no_acc || a->create || a->capture;
    g_bw_depth++;
    bool ok = walk_impl(a);
    g_bw_depth--;
    cg_no_acc = no_acc;
    if (a->create)
        cg_grad_mode_leave(mode);
    return ok;
}

bool cg_backward(cg_tensor *root, const cg_tensor *grad_root, bool retain_graph)
{
    return cg_backward_ex(root, grad_root, &(cg_grad_opts){.retain_graph = retain_graph});
}

bool cg_backward_ex(cg_tensor *root, const cg_tensor *grad_root, const cg_grad_opts *opts)
{
    if (cg_debug_enabled() &&
        (!cg_lifetime_use_ok(root, "cg_backward") || !cg_lifetime_use_ok(grad_root, "cg_backward")))
        return false; /* a freed root or gradient (the checked mode): named */
    if (!root)
        return cg_error_null_input("cg_backward");
    const cg_grad_opts o = opts ? *opts : (cg_grad_opts){0};
    const cg_tensor *gr = grad_root;
    cg_walk_args a = {.n_roots = 1,
                      .roots = &root,
                      .grads = (cg_tensor *const *)&gr,
                      .retain = o.retain_graph || o.create_graph,
                      .create = o.create_graph,
                      .who = "backward"};
    return cg_walk(&a);
}

bool cg_autograd_grad(int n_out, cg_tensor *const *outputs, cg_tensor *const *grad_outputs,
                      int n_in, cg_tensor *const *inputs, const cg_grad_opts *opts,
                      cg_tensor **grads)
{
    if (n_out < 1 || n_in < 1) {
        cg_set_error("autograd_grad: needs at least one output and one input (got %d and %d)",
                     n_out, n_in);
        return false;
    }
    if (!outputs || !inputs || !grads)
        return cg_error_null_input("cg_autograd_grad");
    for (int i = 0; i < n_in; i++)
        grads[i] = NULL;
    for (int i = 0; i < n_out; i++)
        if (cg_debug_enabled() &&
            (!cg_lifetime_use_ok(outputs[i], "cg_autograd_grad") ||
             (grad_outputs && !cg_lifetime_use_ok(grad_outputs[i], "cg_autograd_grad"))))
            return false;
    for (int i = 0; i < n_in; i++) {
        if (!inputs[i])
            return cg_error_null_input("cg_autograd_grad");
        if (cg_debug_enabled() && !cg_lifetime_use_ok(inputs[i], "cg_autograd_grad"))
            return false;
        if (!inputs[i]->requires_grad) {
            cg_set_error("autograd_grad: input %d does not require grad", i);
            return false;
        }
    }
    const cg_grad_opts o = opts ? *opts : (cg_grad_opts){0};
    cg_walk_args a = {.n_roots = n_out,
                      .roots = outputs,
                      .grads = grad_outputs,
                      .retain = o.retain_graph || o.create_graph,
                      .create = o.create_graph,
                      .capture = true,
                      .n_targets = n_in,
                      .targets = inputs,
                      .captured = grads,
                      .allow_unused = o.allow_unused,
                      .who = "autograd_grad"};
    return cg_walk(&a);
}

void cg_node_set_backward_differentiable(cg_node *n, bool on)
{
    if (n)
        n->bw_composes = on;
}

/* The seed of root r: its grad_outputs' (converted to its dtype: with
 * create_graph differentiably, else a copy the walk may add into), or
 * ones for a one-element root. NULL + error. */
static cg_tensor *seed(const cg_walk_args *a, int r)
{
    const cg_tensor *root = a->roots[r], *gr = a->grads ? a->grads[r] : NULL;
    const char *who = a->who;
    char at[32] = "";
    if (a->n_roots > 1)
        snprintf(at, sizeof at, " (output %d)", r);
    if (!root->requires_grad) {
        cg_set_error("%s: the tensor%s does not require grad (no input of its graph "
                     "requires grad, or it was computed under no-grad)",
                     who, at);
        return NULL;
    }
    if (root->node && root->node->freed) {
        cg_set_error("%s: the graph%s was already freed by an earlier backward "
                     "(pass retain_graph to backward twice)",
                     who, at);
        return NULL;
    }
    if (gr) {
        if (!cg_same_shape(gr, root)) {
            char b1[96], b2[96];
            cg_set_error("%s: gradient shape %s differs from the tensor's shape %s%s", who,
                         cg_shape_str(gr, b1, sizeof b1), cg_shape_str(root, b2, sizeof b2), at);
            return NULL;
        }
        if (a->create)
            return cg_to(gr, root->dtype);
        return gr->dtype == root->dtype ? cg_k_clone(gr) : cg_k_to(gr, root->dtype);
    }
    if (cg_numel(root) != 1) {
        char b[96];
        cg_set_error("%s: without an explicit gradient the tensor%s must have one element "
                     "(shape %s)",
                     who, at, cg_shape_str(root, b, sizeof b));
        return NULL;
    }
    return cg_full_dtype(root->dtype, root->ndim, root->shape, 1.0);
}

/* The first target that is t, or -1 */
static int target_of(const cg_walk_args *a, const cg_tensor *t)
{
    for (int j = 0; j < a->n_targets; j++)
        if (a->targets[j] == t)
            return j;
    return -1;
}

/* Input in's share g (consumed) of a walk's gradient: into a target's
 * slot (capture), a leaf's .grad, or the node that made in. */
static bool deliver(const cg_walk_args *a, cg_tensor *in, cg_tensor *g)
{
    if (!in->node) {
        if (a->capture) {
            int j = target_of(a, in);
            if (j < 0) { /* a leaf no live edge leads to: cannot happen, dropped */
                cg_release(g);
                return true;
            }
            return a->create ? cg_acc_graph(&a->captured[j], g)
                             : cg_accumulate_unlocked(&a->captured[j], g, false);
        }
        return a->create ? cg_acc_leaf_graph(&in->grad, g) : cg_accumulate(&in->grad, g, true);
    }
    return a->create ? cg_acc_graph(&in->node->grad, g) : cg_accumulate(&in->node->grad, g, false);
}

/* A capture's gradients as the caller gets them: each its own (a copy
 * where the walk shared it; with create_graph as computed), a target
 * named twice given the same, and an input no gradient reached refused
 * unless allow_unused. */
static bool captured_final(const cg_walk_args *a)
{
    for (int j = 0; j < a->n_targets; j++) {
        const int f = target_of(a, a->targets[j]);
        cg_tensor *g = a->captured[f];
        if (f != j) {
            a->captured[j] = g ? cg_retain(g) : NULL;
        } else if (g && !a->create &&
                   (g->refcount > 1 || g->storage->refcount > 1 || !cg_is_contiguous(g))) {
            cg_tensor *c = cg_k_clone(g);
            if (!c)
                return false;
            cg_release(g);
            a->captured[j] = c;
        }
    }
    for (int j = 0; j < a->n_targets; j++) {
        if (!a->captured[j] && !a->allow_unused) {
            cg_set_error("%s: input %d was not used in computing the outputs (no gradient "
                         "reaches it); allow_unused gives it NULL",
                         a->who, j);
            return false;
        }
    }
    return true;
}

/* n's backward, and its gradients delivered to its inputs */
static bool run_node(const cg_walk_args *a, cg_node *n)
{
    cg_tensor *gin[16] = {0};
    cg_tensor **gv = n->n_inputs <= 16 ? gin : calloc((size_t)n->n_inputs, sizeof *gv);
    if (!gv) {
        cg_set_error("backward: out of memory");
        return false;
    }
    unsigned long serial = cg_error_serial();
    const cg_node *outer = cg_running_node;
    /* a walk run from inside a backward that holds a leaf's lock (a
     * recomputed block's) hands over no leaf's gradient */
    const bool outer_holds = cg_leaf_handed();
    cg_running_node = n;
    bool ok = (a->create ? graph_backward(n) : n->backward)(n, n->grad, gv);
    cg_running_node = outer;
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
        cg_handed_back(n, gv);
    for (int i = 0; i < n->n_inputs; i++) {
        cg_tensor *g = gv[i];
        if (!g)
            continue;
        cg_tensor *in = n->inputs[i];
        if (!ok || !cg_node_needs_grad(n, i) || (in->node && g == in->node->grad)) {
            cg_release(g); /* or added into the input's gradient: cg_node_grad_acc */
            continue;
        }
        g = cg_to_input_dtype(cg_fit_to_shape(n, i, g, in, a->create), in, a->create);
        if (!g) {
            ok = false;
            continue;
        }
        if (in->node && in->node->freed) { /* checked above: only a backward run from
                                              inside this one frees it */
            cg_release(g);
            cg_set_error("backward: the node of '%s' that input %d of '%s' comes from was "
                         "freed while this backward ran",
                         cg_node_name(in->node), i, cg_node_name(n));
            ok = false;
        } else {
            ok = deliver(a, in, g);
        }
    }
    if (gv != gin)
        free(gv);
    return ok;
}

/* The checks, before anything is computed (a refusal changes no
 * gradient): what the running backwards read is as they saved it,
 * and with create_graph each has a differentiable backward. */
static bool walk_checks(const cg_walk_args *a, const node_vec *order, const cg_walk_plan *plan)
{
    node_vec runs = {0};
    bool ok = true;
    for (size_t k = 0; ok && k < order->n; k++)
        if (!a->capture || plan->run[k])
            ok = vec_push(&runs, order->v[k]) || (cg_set_error("%s: out of memory", a->who), false);
    ok = ok && versions_unchanged(&runs);
    for (size_t k = 0; ok && a->create && k < runs.n; k++) {
        const cg_node *n = runs.v[k];
        const char *why = n->bw_composes ? NULL : cg_graph_backward_why_not(n);
        if (!graph_backward(n)) {
            cg_set_error("%s with create_graph: '%s' has no differentiable backward yet "
                         "(docs/autograd.md, \"Gradients of gradients\", lists the ops that "
                         "have one)",
                         a->who, cg_node_name(n));
            ok = false;
        } else if (why) {
            cg_set_error("%s with create_graph: '%s' %s", a->who, cg_node_name(n), why);
            ok = false;
        }
    }
    free(runs.v);
    return ok;
}

/* The walk's nodes from its nrn root nodes, below its stops nothing */
static bool walk_sort(const cg_walk_args *a, cg_node *const *rn, int nrn, node_vec *order,
                      node_vec *claimed)
{
    const void **stops = NULL;
    bool ok = true;
    if (a->n_stops) {
        stops = malloc((size_t)a->n_stops * sizeof *stops);
        if (!stops)
            return cg_set_error("%s: out of memory", a->who), false;
        for (int i = 0; i < a->n_stops; i++)
            stops[i] = a->stops[i];
        qsort(stops, (size_t)a->n_stops, sizeof *stops, cg_ptr_cmp);
    }
    ok = sort_graph(rn, nrn, stops, stops ? (size_t)a->n_stops : 0, order, claimed);
    free(stops);
    return ok;
}

static bool walk_impl(const cg_walk_args *a)
{
    const int nr = a->n_roots;
    cg_tensor **g0 = calloc((size_t)nr, sizeof *g0);
    cg_node **rn = calloc((size_t)nr, sizeof *rn);
    node_vec order = {0}, claimed = {0};
    cg_walk_plan plan = {0};
    bool ok = g0 && rn, held = false;
    int nrn = 0;
    if (!ok)
        cg_set_error("%s: out of memory", a->who);
    for (int r = 0; ok && r < nr; r++) {
        if (!a->roots[r])
            ok = cg_error_null_input(a->who);
        else if (!(g0[r] = seed(a, r)))
            ok = false;
        else if (a->roots[r]->node)
            rn[nrn++] = a->roots[r]->node;
    }
    /* a leaf root's gradient is its seed */
    for (int r = 0; ok && r < nr; r++) {
        cg_tensor *root = a->roots[r];
        if (root->node)
            continue;
        cg_tensor *g = g0[r];
        g0[r] = NULL;
        if (a->capture && target_of(a, root) < 0) {
            cg_release(g);
            continue;
        }
        ok = deliver(a, root, g);
        ready_hook *h = ok && !a->capture && g_bw_depth == 1 ? ready_find(root) : NULL;
        if (h)
            h->fn(h->ctx, root);
    }
    ok = ok && (!nrn || walk_sort(a, rn, nrn, &order, &claimed));
    if (ok && nrn && a->capture)
        ok = cg_plan_make(&plan, order.v, order.n, a->n_targets, a->targets);
    ok = ok && walk_checks(a, &order, &plan);
    /* As PyTorch does, unless the graph is to be kept, what a node kept for
     * its backward goes as soon as the backward has run, not when the walk
     * ends: a layer's activations are freed as the gradient passes below
     * it, and the backward's own buffers never add to all of them. The walk
     * holds every node of its order until the end (a node whose last user
     * has gone waits for its turn). */
    if (ok) {
        for (size_t k = 0; k < order.n; k++)
            cg_node_hold(order.v[k]);
        held = true;
    }
    for (int r = 0; ok && r < nr; r++) {
        if (g0[r]) {
            cg_tensor *g = g0[r];
            g0[r] = NULL;
            ok = a->create ? cg_acc_graph(&a->roots[r]->node->grad, g)
                           : cg_accumulate(&a->roots[r]->node->grad, g, false);
        }
    }
    bool hooks = ok && held && !a->capture && ready_count(&order);
    /* order has inputs before users: walk it backwards. */
    for (size_t k = order.n; ok && k-- > 0;) {
        cg_node *n = order.v[k];
        if (a->capture && plan.target[k] && n->grad) { /* a target's gradient is final */
            for (int j = 0; j < a->n_targets; j++)
                if (a->targets[j]->node == n && target_of(a, a->targets[j]) == j)
                    a->captured[j] = cg_retain(n->grad);
        }
        if (!n->grad || (a->capture && !plan.run[k])) { /* nothing to pass on */
            cg_release(n->grad);
            n->grad = NULL;
            if (hooks)
                ready_node_done(n);
            if (!a->retain && !a->capture) /* autograd.grad frees what it ran, as PyTorch */
                cg_node_drop_refs(n);
            continue;
        }
        ok = run_node(a, n);
        cg_release(n->grad);
        n->grad = NULL;
        if (hooks && ok)
            ready_node_done(n);
        if (ok && !a->retain)
            cg_node_drop_refs(n);
    }
    /* Drop leftover gradients (after a failure) and, unless asked to keep it,
     * the graph itself. */
    for (size_t k = 0; k < order.n; k++) {
        cg_node *n = order.v[k];
        cg_release(n->grad);
        n->grad = NULL;
        if (held && !a->retain && (!a->capture || plan.run[k]))
            cg_node_drop_refs(n);
    }
    cg_plan_restore(&plan, order.v, order.n);
    cg_plan_free(&plan);
    unclaim(&claimed);
    for (size_t k = 0; held && k < order.n; k++)
        cg_node_unhold(order.v[k]);
    free(order.v);
    for (int r = 0; g0 && r < nr; r++)
        cg_release(g0[r]);
    free(g0);
    free(rn);
    if (a->capture)
        ok = ok && captured_final(a);
    if (!ok && a->capture)
        for (int j = 0; j < a->n_targets; j++) {
            cg_release(a->captured[j]);
            a->captured[j] = NULL;
        }
    return ok;
}
