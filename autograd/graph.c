/* The graph: the op table's columns, grad mode, recording nodes, what a
 * node keeps, freeing nodes (iteratively), the leaf API. The backward walk
 * is engine.c; graph_impl.h is what the two share. */
#include "autograd/autograd.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph_impl.h"
#include "core/lifetime.h"
#include "core/ops.h"

/* Columns of the op table (autograd.h, CG_OP_TABLE). */
#define OP_NAME_(e, name, nin, reads, cross) name,
static const char *const op_names[] = {CG_OP_TABLE(OP_NAME_)};
#undef OP_NAME_
#define OP_NIN_(e, name, nin, reads, cross) nin,
static const int op_max_inputs[] = {CG_OP_TABLE(OP_NIN_)};
#undef OP_NIN_
#define OP_READS_(e, name, nin, reads, cross) (reads) | ((cross) ? OP_CROSS : 0u),
#define OP_CROSS 0x80000000u
static const uint32_t op_reads[] = {CG_OP_TABLE(OP_READS_)};
#undef OP_READS_
static_assert(sizeof op_names / sizeof op_names[0] == CG_OP_COUNT, "one name per op");

const char *cg_op_name(cg_op op) { return (unsigned)op < CG_OP_COUNT ? op_names[op] : "?"; }

/* ---------------------------------------------------------- grad mode */
static _Thread_local int g_no_grad_depth;

void cg_no_grad_begin(void) { g_no_grad_depth++; }
void cg_no_grad_end(void) { g_no_grad_depth -= g_no_grad_depth > 0; } /* never below 0 */
bool cg_grad_enabled(void) { return g_no_grad_depth == 0; }
int cg_grad_mode_enter(bool on)
{
    const int saved = g_no_grad_depth;
    g_no_grad_depth = on ? 0 : saved + 1;
    return saved;
}
void cg_grad_mode_leave(int saved) { g_no_grad_depth = saved; }

enum { ENABLE_GRAD_DEPTH = 64 };
static _Thread_local int g_enable_saved[ENABLE_GRAD_DEPTH], g_enable_depth;
bool cg_enable_grad_begin(void)
{
    if (g_enable_depth == ENABLE_GRAD_DEPTH) {
        cg_set_error("enable_grad: nested more than %d deep", ENABLE_GRAD_DEPTH);
        return false;
    }
    g_enable_saved[g_enable_depth++] = cg_grad_mode_enter(true);
    return true;
}
void cg_enable_grad_end(void)
{
    if (g_enable_depth > 0)
        cg_grad_mode_leave(g_enable_saved[--g_enable_depth]);
}

/* -------------------------------------------------- freeing, iteratively */
/* Releasing a node's inputs may free tensors that own nodes, whose inputs
 * may free more: a chain as long as the graph. Nodes to free go on a
 * worklist and are freed in a loop, never by recursion. */
static _Thread_local cg_node **g_pending;
static _Thread_local size_t g_npending, g_cappending;
static _Thread_local bool g_draining;

void cg_node_drop_refs(cg_node *n)
{
    if (n->freed)
        return;
    n->freed = true;
    for (int i = 0; i < n->n_inputs; i++)
        cg_release_held(n->inputs[i]);
    n->n_inputs = 0;
    for (int i = 0; i < CG_NODE_MAX_SAVED; i++) {
        cg_release_held(n->saved[i]);
        n->saved[i] = NULL;
    }
    if (n->ctx && n->ctx_free)
        n->ctx_free(n->ctx);
    n->ctx = NULL;
    cg_release(n->grad);
    n->grad = NULL;
}

static void node_free_hook(cg_node *n)
{
    if (g_npending == g_cappending) {
        size_t cap = g_cappending ? 2 * g_cappending : 256;
        cg_node **p = realloc(g_pending, cap * sizeof *p);
        if (!p) { /* out of memory: free this one directly (may recurse) */
            cg_node_drop_refs(n);
            free(n->inputs);
            free(n->in_version);
            free(n->name);
            free(n);
            return;
        }
        g_pending = p;
        g_cappending = cap;
    }
    g_pending[g_npending++] = n;
    if (g_draining)
        return;
    g_draining = true;
    while (g_npending) {
        cg_node *m = g_pending[--g_npending];
        cg_node_drop_refs(m);
        free(m->inputs);
        free(m->in_version);
        free(m->name);
        free(m);
    }
    g_draining = false;
    free(g_pending);
    g_pending = NULL;
    g_cappending = 0;
}

/* A reference to n is given back: by its output tensor when it dies, or by
 * the header of an input that a user's node kept (node_input_ref). The
 * last one frees it. */
static void node_unref(cg_node *n)
{
    if (__atomic_sub_fetch(&n->refs, 1, __ATOMIC_ACQ_REL) == 0)
        node_free_hook(n);
}

void cg_node_hold(cg_node *n) { __atomic_add_fetch(&n->refs, 1, __ATOMIC_RELAXED); }
void cg_node_unhold(cg_node *n) { node_unref(n); }

static void set_hook(void) { cg_set_node_release_hook(node_unref); }

static void ensure_hook(void) /* once, whichever thread records first */
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, set_hook);
}

/* ---------------------------------------------------------- recording */
static bool tensor_needs_grad(const cg_tensor *t) { return t && t->requires_grad; }

/* What a node keeps of input in (docs/autograd.md, "What a node keeps"):
 * in itself (a new held reference) when the backward reads its values or
 * it is a leaf whose .grad the engine writes; otherwise a header without
 * storage (cg_meta_held) with everything else the engine and the backward
 * use (shape, strides, dtype, requires_grad) that holds the node which
 * made in, where in's gradient goes. So in's memory dies with its other
 * owners, not with the graph. Out of memory for the header: in itself. */
static cg_tensor *node_input_ref(cg_tensor *in, bool read)
{
    if (!in || read || !in->storage || cg_is_leaf_input(in))
        return cg_retain_held(in);
    cg_tensor *m = cg_meta_held(in);
    if (!m)
        return cg_retain_held(in);
    m->requires_grad = in->requires_grad;
    if (in->node) { /* in is no leaf (its node may be freed: a backward then refuses) */
        __atomic_add_fetch(&in->node->refs, 1, __ATOMIC_RELAXED);
        m->node = in->node;
    }
    return m;
}

static cg_record_status record(cg_tensor *out, cg_op op, const char *name, int n_inputs,
                               cg_tensor *const *inputs, cg_backward_fn backward,
                               cg_node **node_out)
{
    const char *opn = name ? name : cg_op_name(op);
    *node_out = NULL;
    if (!out || !cg_grad_enabled() || !cg_dtype_is_float(out->dtype))
        return CG_RECORD_NONE; /* an int64 or bool result has no gradient */
    /* one line saying what is wrong (a limit only for ops that have one:
     * a user-defined op takes any number of inputs) */
    if ((unsigned)op >= CG_OP_COUNT) {
        cg_set_error("%s: recording an unknown op %d", opn, (int)op);
        return CG_RECORD_FAILED;
    }
    if (!backward) {
        cg_set_error("%s: recording needs a backward function", opn);
        return CG_RECORD_FAILED;
    }
    if (n_inputs < 0) {
        cg_set_error("%s: recording needs n_inputs >= 0 (got %d)", opn, n_inputs);
        return CG_RECORD_FAILED;
    }
    if (op_max_inputs[op] && n_inputs > op_max_inputs[op]) {
        cg_set_error("%s: recording needs at most %d inputs (got %d)", opn, op_max_inputs[op],
                     n_inputs);
        return CG_RECORD_FAILED;
    }
    if (n_inputs > 0 && !inputs) {
        cg_set_error("%s: recording needs the %d inputs (got NULL)", opn, n_inputs);
        return CG_RECORD_FAILED;
    }
    bool any = false;
    for (int i = 0; i < n_inputs; i++) {
        any |= tensor_needs_grad(inputs[i]);
        if (inputs[i] == out) {
            cg_set_error("%s: the output is also input %d; an op records on a tensor it has "
                         "just made (in-place ops cannot be recorded)",
                         opn, i);
            return CG_RECORD_FAILED;
        }
    }
    if (!any)
        return CG_RECORD_NONE;
    if (out->node) { /* an op must record on a fresh output */
        cg_set_error("%s: the output tensor already has a graph node (made by %s); an op "
                     "records on a tensor it has just made, e.g. from cg_empty_like",
                     opn, cg_node_name(out->node));
        return CG_RECORD_FAILED;
    }
    if (out->requires_grad) {
        cg_set_error("%s: the output tensor is a leaf that requires grad (a parameter?); an op "
                     "records on a tensor it has just made",
                     opn);
        return CG_RECORD_FAILED;
    }
    ensure_hook();
    cg_node *n = calloc(1, sizeof *n);
    cg_tensor **ins = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *ins);
    /* in_version and in_needs in one block (in_needs after the versions) */
    const size_t nv = (size_t)(n_inputs ? n_inputs : 1);
    uint64_t *vers = malloc(nv * (sizeof *vers + sizeof(bool)));
    bool *needs = vers ? (bool *)(vers + nv) : NULL;
    char *nm = NULL;
    if (name) {
        size_t len = strlen(name) + 1;
        nm = malloc(len);
        if (nm)
            memcpy(nm, name, len);
    }
    if (!n || !ins || !vers || (name && !nm)) {
        free(n);
        free(ins);
        free(vers);
        free(nm);
        cg_set_error("%s: out of memory recording the graph", opn);
        return CG_RECORD_FAILED;
    }
    n->op = op;
    n->name = nm;
    n->backward = backward;
    n->n_inputs = n_inputs;
    n->inputs = ins;
    n->in_version = vers;
    n->in_needs = needs;
    n->refs = 1; /* out's */
    /* Which inputs the backward reads (op table); a product reads each
     * input only for the other's gradient. A user-defined op: all of them
     * until it says otherwise (cg_node_set_reads). */
    if ((op_reads[op] & ~OP_CROSS) == CG_IN_ALL) {
        n->reads = ~(uint64_t)0;
    } else {
        n->reads = op_reads[op] & ~OP_CROSS;
        if ((op_reads[op] & OP_CROSS) && n_inputs >= 2) {
            n->reads |= tensor_needs_grad(inputs[1]) ? 1u : 0u;
            n->reads |= tensor_needs_grad(inputs[0]) ? 2u : 0u;
        }
    }
    for (int i = 0; i < n_inputs; i++) { /* the node's references, never a scope's */
        vers[i] = inputs[i] ? cg_version(inputs[i]) : 0;
        needs[i] = tensor_needs_grad(inputs[i]);
        ins[i] = node_input_ref(inputs[i], cg_node_reads(n, i));
    }
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    out->node = n;
    out->requires_grad = true;
    *node_out = n;
    return CG_RECORD_OK;
}

cg_node *cg_record(cg_tensor *out, cg_op op, int n_inputs, cg_tensor *const *inputs,
                   cg_backward_fn backward)
{
    cg_node *n;
    record(out, op, NULL, n_inputs, inputs, backward, &n);
    return n;
}

bool cg_record_failed(const cg_node *n, int n_inputs, cg_tensor *const *inputs)
{
    if (n || !cg_grad_enabled() || !inputs)
        return false;
    for (int i = 0; i < n_inputs; i++)
        if (tensor_needs_grad(inputs[i]))
            return true;
    return false;
}

cg_record_status cg_record_op(cg_tensor *out, const char *name, int n_inputs,
                              cg_tensor *const *inputs, cg_backward_fn backward, cg_node **node_out)
{
    cg_node *dummy;
    if (!node_out)
        node_out = &dummy;
    if (!name || !*name) {
        *node_out = NULL;
        cg_set_error("record_op: a user-defined op needs a name (it appears in errors)");
        return CG_RECORD_FAILED;
    }
    return record(out, CG_OP_CUSTOM, name, n_inputs, inputs, backward, node_out);
}

const char *cg_node_name(const cg_node *n)
{
    return !n ? "?" : n->name ? n->name : cg_op_name(n->op);
}

void cg_node_set_reads(cg_node *n, int i, bool reads)
{
    if (!n || i < 0 || i >= n->n_inputs || i >= 63)
        return; /* inputs from 63 on share bit 63: they stay as they are */
    cg_tensor *in = n->inputs[i];
    if (reads && in && !in->storage) {
        cg_set_error("%s: input %d cannot be read by the backward again: the node let its "
                     "values go when it was marked unread (cg_node_set_reads)",
                     cg_node_name(n), i);
        return;
    }
    if (reads) {
        n->reads |= (uint64_t)1 << i;
        return;
    }
    n->reads &= ~((uint64_t)1 << i);
    n->inputs[i] = node_input_ref(in, false);
    cg_release_held(in);
}

bool cg_node_needs_grad(const cg_node *n, int i)
{
    return i >= 0 && i < n->n_inputs && n->in_needs[i] && tensor_needs_grad(n->inputs[i]);
}

int cg_node_save(cg_node *n, cg_tensor *t)
{
    for (int i = 0; i < CG_NODE_MAX_SAVED; i++) {
        if (!n->saved[i]) {
            n->saved[i] = cg_retain_held(t);
            n->saved_version[i] = cg_version(t);
            return i;
        }
    }
    cg_set_error("%s: too many saved tensors (at most %d)", cg_node_name(n), CG_NODE_MAX_SAVED);
    return -1;
}

cg_tensor *cg_alias(const cg_tensor *t)
{
    if (!t) {
        cg_error_null_input("cg_alias");
        return NULL;
    }
    return cg_view_alias(t);
}

/* ----------------------------------------------------------- leaf API */
cg_tensor *cg_requires_grad(cg_tensor *t, bool on)
{
    if (!t) {
        cg_error_null_input("cg_requires_grad");
        return NULL;
    }
    if (cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_requires_grad"))
        return NULL;
    if (t->node) {
        cg_set_error("requires_grad: only leaf tensors can change requires_grad "
                     "(this one was produced by %s)",
                     cg_node_name(t->node));
        return NULL;
    }
    if (on && !cg_dtype_is_float(t->dtype)) { /* PyTorch's rule: ids and masks have no gradient */
        cg_set_error("requires_grad: only tensors of a float dtype can require gradients (this "
                     "one is %s)",
                     cg_dtype_name(t->dtype));
        return NULL;
    }
    t->requires_grad = on;
    return t;
}

cg_tensor *cg_detach(const cg_tensor *t) { return cg_alias(t); }

void cg_zero_grad(cg_tensor *t)
{
    if (t && cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_zero_grad"))
        return;
    if (t)
        cg_grad_drop(t);
}

const cg_tensor *cg_grad(const cg_tensor *t)
{
    if (t && cg_debug_enabled() && !cg_lifetime_use_ok(t, "cg_grad"))
        return NULL;
    if (t && t->grad && cg_debug_enabled())
        cg_lifetime_borrowed_grad(t->grad, t); /* named, should it be released by mistake */
    return t ? t->grad : NULL;
}
