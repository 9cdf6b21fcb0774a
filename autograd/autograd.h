/* cgrad autograd: the reverse-mode graph over core tensors.
 *
 * An op given an input that requires grad (while grad mode is on) records a
 * node on its output: the op, its inputs (retained), what it saved for the
 * backward, and the backward function. The output tensor owns its node; a
 * node never references its own output, so there are no cycles and dropping
 * the last reference to a loss frees its whole graph (iteratively: a graph
 * of 100,000 nodes does not touch the stack).
 *
 * cg_backward(loss) walks the nodes reachable from loss in reverse
 * topological order (iteratively), accumulates gradients where a tensor is
 * used more than once, reduces broadcast gradients back to each input's
 * shape, and adds the result into the .grad of every leaf that requires
 * grad. Unless retain_graph, the graph is freed afterwards (a second
 * backward through it is an error).
 *
 * Ownership: as in core/tensor.h, every returned tensor is a new reference.
 * t->grad belongs to t: read it, do not release it (cg_zero_grad clears). */
#ifndef CG_AUTOGRAD_H
#define CG_AUTOGRAD_H

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- ops */
/* Every differentiable op has one enum value and one name; the table in
 * engine.c is guarded by a static_assert on CG_OP_COUNT, so adding an op
 * without a name fails to compile. */
typedef enum {
    CG_OP_ADD, CG_OP_SUB, CG_OP_MUL, CG_OP_DIV, CG_OP_ADDS, CG_OP_MULS,
    CG_OP_NEG, CG_OP_EXP, CG_OP_LOG, CG_OP_SQRT, CG_OP_RSQRT, CG_OP_POW,
    CG_OP_TANH, CG_OP_SIGMOID, CG_OP_RELU, CG_OP_GELU, CG_OP_ABS, CG_OP_CLAMP,
    CG_OP_WHERE, CG_OP_MASKED_FILL,
    CG_OP_SUM, CG_OP_MEAN, CG_OP_VAR, CG_OP_MAX,
    CG_OP_MATMUL,
    CG_OP_PERMUTE, CG_OP_SLICE, CG_OP_SELECT, CG_OP_EXPAND, CG_OP_RESHAPE,
    CG_OP_CONTIGUOUS,
    CG_OP_SOFTMAX, CG_OP_LOG_SOFTMAX, CG_OP_CROSS_ENTROPY, CG_OP_LAYER_NORM,
    CG_OP_RMS_NORM, CG_OP_DROPOUT, CG_OP_CONCAT, CG_OP_INDEX_SELECT, CG_OP_GATHER,
    CG_OP_ATTENTION, CG_OP_LINEAR,
    CG_OP_SILU, CG_OP_SIN, CG_OP_COS, CG_OP_TRIL, CG_OP_TRIU, CG_OP_CUMSUM, CG_OP_NLL_LOSS,
    CG_OP_BCE_WITH_LOGITS,
    CG_OP_ADD_LAYER_NORM, CG_OP_ADD_RMS_NORM, CG_OP_LINEAR_RELU,
    CG_OP_CUSTOM,
    CG_OP_CHECKPOINT, /* autograd/checkpoint.h */
    CG_OP_COUNT
} cg_op;

const char *cg_op_name(cg_op op);

/* ------------------------------------------------------------- nodes */
#define CG_NODE_MAX_SAVED 6

typedef struct cg_node cg_node;

/* Compute the gradient of each input from the output gradient g. gin[i] is
 * NULL on entry; set it (a new reference, in the output's broadcast shape or
 * the input's shape) only where cg_node_needs_grad(n, i). Return false with
 * an error recorded on failure. */
typedef bool (*cg_backward_fn)(cg_node *n, const cg_tensor *g, cg_tensor **gin);

struct cg_node {
    cg_op op;
    char *name;                            /* a user-defined op's name (owned), else NULL */
    cg_backward_fn backward;
    int n_inputs;
    cg_tensor **inputs;                    /* retained */
    cg_tensor *saved[CG_NODE_MAX_SAVED];   /* retained; NULL where unused */
    union {                                /* small op parameters */
        float f[4];
        int64_t i[CG_MAX_DIMS + 2];
    } p;
    void *ctx;                             /* op-owned heap data, freed with ctx_free */
    void (*ctx_free)(void *);
    cg_tensor *grad;                       /* output gradient while backward runs */
    int out_ndim;                          /* output shape, to check gradients */
    int64_t out_shape[CG_MAX_DIMS];
    uint64_t mark;                         /* topological sort bookkeeping */
    bool freed;                            /* inputs already released */
};

/* Record a node on out if grad mode is on and any input requires grad.
 * Returns the node (owned by out) or NULL when nothing was recorded or on
 * error (then out is left as it is; check cg_has_error() if it matters).
 * The library's ops use this; user-defined ops use cg_record_op below. */
cg_node *cg_record(cg_tensor *out, cg_op op, int n_inputs, cg_tensor *const *inputs,
                   cg_backward_fn backward);

/* ------------------------------------------------ user-defined ops */
/* A new differentiable op, written outside the library (the worked example
 * is examples/rope.c, rotary position embeddings):
 *
 *   1. forward: compute the output with kernels (core/ops.h) or plain loops
 *      into a tensor you have just made (cg_empty_like, cg_k_*), never into
 *      an input;
 *   2. cg_record_op(out, "my_op", n, inputs, my_backward, &node): when it
 *      returns CG_RECORD_OK, save what the backward needs on the node
 *      (cg_node_save for tensors, node->p for a few numbers, node->ctx +
 *      ctx_free for anything else);
 *   3. my_backward(node, g, gin): g has the output's shape; set gin[i] (a
 *      new tensor, the input's shape or broadcast to the output's) where
 *      cg_node_needs_grad(node, i); on failure cg_set_error and return false;
 *   4. test it with cg_gradcheck (autograd/gradcheck.h).
 *
 * The name (copied) appears in every message about the node: errors in its
 * backward, a gradient of the wrong shape, a missing gradient. */
typedef enum {
    CG_RECORD_FAILED = -1, /* error recorded (e.g. out already has a node) */
    CG_RECORD_NONE = 0,    /* nothing to record: grad mode off or no input needs grad */
    CG_RECORD_OK = 1,      /* *node_out is the new node, owned by out */
} cg_record_status;
cg_record_status cg_record_op(cg_tensor *out, const char *name, int n_inputs,
                              cg_tensor *const *inputs, cg_backward_fn backward,
                              cg_node **node_out);
/* The node's op name: a user-defined op's own name, else cg_op_name(op). */
const char *cg_node_name(const cg_node *n);
/* Whether input i of n needs a gradient. */
bool cg_node_needs_grad(const cg_node *n, int i);
/* Save a tensor on the node (retained). Returns slot index or -1. */
int cg_node_save(cg_node *n, cg_tensor *t);
/* A header aliasing t's storage with no autograd fields: for saving an
 * op's own output on its node without a reference cycle. */
cg_tensor *cg_alias(const cg_tensor *t);

/* ------------------------------------------------------------ engine */
/* Gradients of every leaf that requires grad, from root (any shape) with
 * upstream gradient grad_root (NULL: ones, i.e. d root/d root; root must
 * then have one element). Returns false with an error on failure. */
bool cg_backward(cg_tensor *root, const cg_tensor *grad_root, bool retain_graph);

/* Grad mode: ops record nodes only while it is on (the default). Scopes
 * nest: cg_no_grad_begin() ... cg_no_grad_end(). */
void cg_no_grad_begin(void);
void cg_no_grad_end(void);
bool cg_grad_enabled(void);

/* Mark a leaf as requiring gradient (false: stop). Returns t. A tensor
 * produced by an op cannot be changed (error, returns NULL). */
cg_tensor *cg_requires_grad(cg_tensor *t, bool on);
/* A new tensor sharing t's storage, outside any graph. */
cg_tensor *cg_detach(const cg_tensor *t);
/* Drop t's accumulated gradient (t->grad becomes NULL). */
void cg_zero_grad(cg_tensor *t);
/* t's gradient (borrowed; NULL if none yet). */
const cg_tensor *cg_grad(const cg_tensor *t);
/* Number of nodes reachable from t (for tests and debugging). */
int64_t cg_graph_size(const cg_tensor *t);
/* Debugging and testing: fn (if not NULL) is called after every node's
 * backward on this thread with the node and the input gradients it
 * computed (gin[i] may be NULL; fn may replace them: release the old one).
 * tests/test_gradcheck.c plants errors with it. NULL removes it. */
typedef void (*cg_backward_hook_fn)(void *ctx, cg_node *n, cg_tensor **gin);
void cg_set_backward_hook(cg_backward_hook_fn fn, void *ctx);

/* Gradient-ready hooks (PyTorch's post-accumulate-grad hook): fn(ctx, t)
 * is called during cg_backward as soon as leaf t's .grad is final for this
 * backward, i.e. every node of the graph that passes t a gradient has run
 * (t->grad may be read, and updated in place, from fn; fn must not run a
 * backward itself). Leaves in graphs of recomputed blocks
 * (autograd/checkpoint.h) count as used by the block: their hook runs
 * after the block's recomputed backward. Called at most once per leaf per
 * backward, and only when t has a gradient (NULL: none reached it). A
 * leaf has at most one hook (adding again replaces it); hooks are per
 * thread (set them on the thread that runs backward) and hold no
 * reference: remove t's hook before t is freed. With no hooks set,
 * backward costs nothing more. False + error on a NULL t or fn, or out of
 * memory. */
typedef void (*cg_grad_ready_fn)(void *ctx, cg_tensor *t);
bool cg_grad_ready_hook_add(cg_tensor *t, cg_grad_ready_fn fn, void *ctx);
/* Remove t's hook (no-op when it has none). */
void cg_grad_ready_hook_remove(const cg_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
