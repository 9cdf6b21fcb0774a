/* Where a gradient goes, and how it is added there: reduced to its
 * input's shape and dtype, added into a node's gradient or a leaf's .grad
 * (under the leaf's lock), handed to a backward that adds into it in
 * place (cg_node_grad_acc); with create_graph, all of it by differentiable
 * ops. The walk that calls these is engine.c. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd/engine_impl.h"
#include "autograd/ops.h"
#include "core/ops.h"

/* -------------------------------------------------------- accumulation */
/* Reduce g to shape (ndim, shape) if it is a broadcast of it; g (consumed)
 * must be a float tensor. NULL + error otherwise. */
static cg_tensor *sum_to_graph(cg_tensor *g, const cg_tensor *in);
cg_tensor *cg_fit_to_shape(cg_node *n, int idx, cg_tensor *g, const cg_tensor *input, bool create)
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
    cg_tensor *r =
        create ? sum_to_graph(g, input) : cg_k_sum_to_shape(g, input->ndim, input->shape);
    cg_release(g);
    return r;
}

/* A gradient has its input's dtype (PyTorch's validate_outputs): a
 * backward computed in float32 for a bfloat16 input is rounded to
 * bfloat16 here, and cg_to's backward is the identity. g is consumed. */
cg_tensor *cg_to_input_dtype(cg_tensor *g, const cg_tensor *input, bool create)
{
    if (!g || g->dtype == input->dtype)
        return g;
    cg_tensor *r = create ? cg_to(g, input->dtype) : cg_k_to(g, input->dtype);
    cg_release(g);
    return r;
}

/* *slot += g (g consumed). Adds in place only into a contiguous tensor whose
 * storage nobody else shares. A leaf's .grad (private = true) must own its
 * storage outright, because optimizers and clipping update it in place; a
 * node's gradient is internal to the engine and may share storage (the two
 * inputs of an add receive the same tensor), which saves a copy per use. */
bool cg_accumulate_unlocked(cg_tensor **slot, cg_tensor *g, bool private)
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
_Thread_local const cg_node *cg_running_node;
/* A walk that captures its gradients or computes them with a graph:
 * cg_node_grad_acc hands nothing over. */
_Thread_local bool cg_no_acc;
typedef struct {
    const cg_tensor *grad;
    pthread_mutex_t *mu;
} handed_leaf;
static _Thread_local handed_leaf g_handed;

bool cg_leaf_handed(void) { return g_handed.mu != NULL; }

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

bool cg_accumulate(cg_tensor **slot, cg_tensor *g, bool private)
{
    if (!private)
        return cg_accumulate_unlocked(slot, g, false);
    pthread_mutex_t *mu = leaf_lock(slot);
    bool ok = cg_accumulate_unlocked(slot, g, true);
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
    if (!n || n != cg_running_node || cg_backward_hook_on() || cg_no_acc ||
        !cg_node_needs_grad(n, i))
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
void cg_handed_back(const cg_node *n, cg_tensor **gv)
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

/* ------------------------------------------ gradients with a graph */
/* With create_graph, gradients are graph tensors: reduced, converted and
 * added by differentiable ops, never in place. */

static cg_tensor *sum_to_graph(cg_tensor *g, const cg_tensor *in)
{
    const int lead = g->ndim - in->ndim;
    int dims[CG_MAX_DIMS], nd = 0;
    for (int i = 0; i < lead; i++)
        dims[nd++] = i;
    for (int i = 0; i < in->ndim; i++)
        if (in->shape[i] == 1 && g->shape[lead + i] != 1)
            dims[nd++] = lead + i;
    cg_tensor *s = nd ? cg_sum(g, nd, dims, true) : cg_retain(g);
    cg_tensor *r = s ? cg_reshape(s, in->ndim, in->shape) : NULL;
    cg_release(s);
    return r;
}

/* *slot += g as a graph op (g consumed) */
bool cg_acc_graph(cg_tensor **slot, cg_tensor *g)
{
    if (!*slot) {
        *slot = g;
        return true;
    }
    cg_tensor *s = cg_add(*slot, g);
    cg_release(g);
    if (!s)
        return false;
    cg_release(*slot);
    *slot = s;
    return true;
}

/* A leaf's .grad += g as a graph op, under the leaf's lock; the .grad
 * owns its storage (a differentiable clone when g shares it) */
bool cg_acc_leaf_graph(cg_tensor **slot, cg_tensor *g)
{
    pthread_mutex_t *mu = leaf_lock(slot);
    cg_tensor *s = *slot, *sum;
    if (s)
        sum = cg_add(s, g);
    else if (g->refcount == 1 && g->storage->refcount == 1 && cg_is_contiguous(g))
        sum = cg_retain(g);
    else
        sum = cg_clone(g);
    cg_release(g);
    if (sum) {
        if (s)
            cg_unhold(s);
        *slot = cg_hold_shared(sum);
        cg_release(s);
    }
    leaf_unlock(mu);
    return sum != NULL;
}
