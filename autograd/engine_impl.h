/* cgrad autograd, INTERNAL: what the backward walk (engine.c), the
 * accumulation of its gradients (accumulate.c) and its plan
 * (walk_plan.c) share. Not installed. */
#ifndef CG_AUTOGRAD_ENGINE_IMPL_H
#define CG_AUTOGRAD_ENGINE_IMPL_H

#include "autograd/graph_impl.h"

/* ------------------------------------------------------- accumulation */
/* g (consumed) reduced to input idx's shape if it is a broadcast of it
 * (with create_graph by differentiable ops); a float tensor, else NULL +
 * error naming n */
cg_tensor *cg_fit_to_shape(cg_node *n, int idx, cg_tensor *g, const cg_tensor *input, bool create);
/* g (consumed) in input's dtype (PyTorch's validate_outputs) */
cg_tensor *cg_to_input_dtype(cg_tensor *g, const cg_tensor *input, bool create);
/* *slot += g (g consumed): in place where nobody else holds *slot; a
 * leaf's .grad (private) owns its storage and is added under its lock */
bool cg_accumulate_unlocked(cg_tensor **slot, cg_tensor *g, bool private);
bool cg_accumulate(cg_tensor **slot, cg_tensor *g, bool private);
/* The same by differentiable ops (create_graph), never in place */
bool cg_acc_graph(cg_tensor **slot, cg_tensor *g);
bool cg_acc_leaf_graph(cg_tensor **slot, cg_tensor *g);
/* After n's backward: a leaf's gradient it was handed back (gv), and the
 * leaf's lock given back */
void cg_handed_back(const cg_node *n, cg_tensor **gv);
/* Whether this thread holds a leaf's gradient handed to a backward */
bool cg_leaf_handed(void);
/* The node whose backward runs on this thread (cg_node_grad_acc offers
 * gradients to it alone); a walk that captures or makes a graph hands
 * nothing over */
extern _Thread_local const cg_node *cg_running_node;
extern _Thread_local bool cg_no_acc;

/* Whether this thread has a cg_set_backward_hook (it sees each
 * backward's own gradients: none is handed over) */
bool cg_backward_hook_on(void);

/* -------------------------------------------------------------- plan */
/* Sorted arrays of pointers, searched by address */
int cg_ptr_cmp(const void *a, const void *b);
bool cg_ptr_in(const void *const *v, size_t n, const void *p);

/* cg_autograd_grad computes only what reaches its inputs (its targets),
 * as PyTorch's engine does: a node's backward runs when one of its input
 * edges is live (it leads to a target: a target leaf, or a node that is a
 * target's or runs), and only its live edges need a gradient (in_needs
 * is cleared on the others for the walk, and given back after). */
typedef struct {
    const cg_node *node;
    size_t pos;
} cg_node_pos;
typedef struct {
    cg_node_pos *index; /* the walk's nodes by address */
    size_t n;           /* how many */
    bool *run, *target; /* per position: the backward runs; a target's node */
    bool *needs;        /* every node's in_needs as it was */
    int *nin;           /* and how many */
    const void **tleaf; /* the targets that are leaves, sorted */
    size_t ntleaf;
} cg_walk_plan;
/* The plan of the count nodes (inputs before users) for the nt targets:
 * false + error when out of memory */
bool cg_plan_make(cg_walk_plan *p, cg_node *const *nodes, size_t count, int nt,
                  cg_tensor *const *targets);
/* Every node's in_needs as it was, then the plan freed */
void cg_plan_restore(const cg_walk_plan *p, cg_node *const *nodes, size_t count);
void cg_plan_free(cg_walk_plan *p);

#endif
