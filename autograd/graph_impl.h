/* cgrad autograd, INTERNAL: what graph.c (recording, node lifetime) and
 * engine.c (the backward walk) share. Not installed. */
#ifndef CG_AUTOGRAD_GRAPH_IMPL_H
#define CG_AUTOGRAD_GRAPH_IMPL_H

#include "autograd/autograd.h"

/* Whether n's backward reads input i's values (bit i of n->reads; inputs
 * from 63 on share bit 63). */
static inline bool cg_node_reads(const cg_node *n, int i)
{
    return (n->reads >> (i < 63 ? i : 63)) & 1u;
}

/* A leaf that requires grad: the engine writes its .grad. (A tensor whose
 * node an earlier backward freed is no leaf: a backward that reaches it is
 * refused.) */
static inline bool cg_is_leaf_input(const cg_tensor *in)
{
    return in && in->requires_grad && !in->node;
}

/* The gradient input in has gathered so far in this backward (a node's,
 * or a leaf's .grad, taken under the leaf's lock), taken out of its slot
 * and held, when it has in's shape; else NULL and the slot as it was.
 * checkpoint.c continues it in a recomputed block's detached input. */
cg_tensor *cg_grad_take(cg_tensor *in);
/* Drop leaf t's .grad under the leaf's lock (cg_zero_grad): a backward
 * on another thread adds into it before or after, never into a freed one. */
void cg_grad_drop(cg_tensor *t);

/* Release what n holds (inputs, saved tensors, ctx, its gradient) and
 * mark it freed; the struct stays while a reference to it does (its
 * output tensor, headers of inputs that other nodes kept: n->refs). */
void cg_node_drop_refs(cg_node *n);

/* Take and give back a reference to n (n->refs): the backward walk holds
 * every node of its order, so that a node whose output tensor dies while
 * the walk frees what its users kept stays until its own turn. */
void cg_node_hold(cg_node *n);
void cg_node_unhold(cg_node *n);

/* Grad mode set for a backward with create_graph: cg_grad_mode_enter
 * returns what cg_grad_mode_leave puts back. */
int cg_grad_mode_enter(bool on);
void cg_grad_mode_leave(int saved);

/* One walk of the engine (engine.c): cg_backward, cg_backward_ex and
 * cg_autograd_grad are each one, and so is every recomputed backward of
 * a create_graph walk (grad2.c). */
typedef struct {
    int n_roots;
    cg_tensor *const *roots;
    cg_tensor *const *grads; /* NULL, or one per root (NULL: ones) */
    bool retain, create;
    /* autograd.grad: the targets' gradients into captured (n_targets
     * slots, NULL on entry; new references), no .grad written */
    bool capture, allow_unused;
    int n_targets;
    cg_tensor *const *targets;
    cg_tensor **captured;
    /* nodes whose inputs the sort does not enter */
    int n_stops;
    cg_node *const *stops;
    const char *who; /* names the caller in messages */
} cg_walk_args;
bool cg_walk(const cg_walk_args *a);

/* The differentiable backward of op (grad2.c): computed with graph ops,
 * so that a walk with create_graph can record it; NULL when op has none. */
cg_backward_fn cg_graph_backward_of(cg_op op);
/* Those made by recomputing the op (grad2_remake.c), which
 * cg_graph_backward_of falls back to; NULL when op has none. */
cg_backward_fn cg_remade_backward_of(cg_op op);
/* Why n's differentiable backward cannot run although its op has one (a
 * node that kept only bf16 copies of its inputs, a padding mode, a
 * convolution's form), or NULL: the walk refuses before computing. */
const char *cg_graph_backward_why_not(const cg_node *n);
const char *cg_remade_why_not(const cg_node *n);

#endif
