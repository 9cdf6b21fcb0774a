/* Activation recomputation: see autograd/checkpoint.h. */
#include "autograd/checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/graph_impl.h"

/* What the node keeps besides its inputs: the block and the generators'
 * states before its forward. */
typedef struct {
    cg_checkpoint_fn fn;
    void *ctx;
    void (*ctx_free)(void *);
    int n_inputs, n_rngs;
    cg_rng **rngs;
    cg_rng *before;
} ck_state;

static void ck_state_free(void *p)
{
    ck_state *s = p;
    if (!s)
        return;
    if (s->ctx_free)
        s->ctx_free(s->ctx);
    free(s->rngs);
    free(s->before);
    free(s);
}

/* Recompute the block with grad on and backpropagate g through it. */
static bool ck_backward(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    ck_state *s = n->ctx;
    if (!cg_grad_enabled()) {
        cg_set_error("checkpoint: backward under no-grad cannot recompute the block (grad "
                     "mode must be on when backward runs)");
        return false;
    }
    cg_tensor **det = calloc((size_t)s->n_inputs, sizeof *det);
    cg_rng *now = calloc((size_t)(s->n_rngs ? s->n_rngs : 1), sizeof *now);
    bool ok = det && now;
    for (int i = 0; ok && i < s->n_inputs; i++) {
        cg_tensor *in = n->inputs[i];
        det[i] = cg_detach(in);
        ok = det[i] && (!in->requires_grad || cg_requires_grad(det[i], true));
        /* The gradient the input has gathered so far (from its users run
         * before this node) continues in the detached copy, so that the
         * block's parts add to it one by one as without recomputation
         * (summing them first would change the order of float additions
         * when the input has other users, e.g. an encoder's memory read by
         * every decoder layer). It comes back whole as this node's result. */
        if (ok && cg_node_needs_grad(n, i))  /* in's node is live: backward checked */
            det[i]->grad = cg_grad_take(in); /* a leaf's gradient, as det's: held */
    }
    cg_tensor *y = NULL;
    if (ok) {
        for (int i = 0; i < s->n_rngs; i++) {
            now[i] = *s->rngs[i];
            *s->rngs[i] = s->before[i];
        }
        y = s->fn(s->ctx, det);
        for (int i = 0; i < s->n_rngs; i++)
            *s->rngs[i] = now[i];
        ok = y != NULL;
    } else if (!det || !now) {
        cg_set_error("checkpoint: out of memory in backward");
    }
    if (ok && !y->requires_grad) {
        cg_set_error("checkpoint: the recomputed block's output does not require grad (the "
                     "block must use its inputs or parameters)");
        ok = false;
    }
    if (ok && (y->ndim != n->out_ndim ||
               memcmp(y->shape, n->out_shape, sizeof(int64_t) * (size_t)y->ndim) != 0)) {
        cg_set_error("checkpoint: the recomputed block's output has another shape than in "
                     "the forward (the block must be deterministic)");
        ok = false;
    }
    ok = ok && cg_backward(y, g, false);
    cg_release(y);
    for (int i = 0; det && i < s->n_inputs; i++) {
        if (ok && det[i] && cg_node_needs_grad(n, i) && det[i]->grad) {
            gin[i] = det[i]->grad; /* the leaf's gradient becomes the node's result */
            det[i]->grad = NULL;
            cg_unhold(gin[i]);
        }
        cg_release(det[i]);
    }
    free(det);
    free(now);
    return ok;
}

cg_tensor *cg_checkpoint(const cg_checkpoint_block *blk)
{
    if (!blk) {
        cg_error_null_input("cg_checkpoint");
        return NULL;
    }
    bool bad = !blk->fn || blk->n_inputs < 1 || !blk->inputs || blk->n_params < 0 ||
               (blk->n_params && !blk->params) || blk->n_rngs < 0 || (blk->n_rngs && !blk->rngs);
    for (int i = 0; !bad && i < blk->n_inputs; i++)
        bad = !blk->inputs[i];
    for (int i = 0; !bad && i < blk->n_params; i++)
        bad = !blk->params[i];
    for (int i = 0; !bad && i < blk->n_rngs; i++)
        bad = !blk->rngs[i];
    if (bad) {
        cg_set_error("checkpoint: a block needs fn, at least one input, and no NULL among its "
                     "inputs, parameters and generators");
        if (blk->ctx_free)
            blk->ctx_free(blk->ctx);
        return NULL;
    }
    bool record = cg_grad_enabled();
    bool any = false;
    for (int i = 0; i < blk->n_inputs; i++)
        any |= blk->inputs[i]->requires_grad;
    for (int i = 0; i < blk->n_params; i++)
        any |= blk->params[i]->requires_grad;
    if (!record || !any) { /* nothing to recompute later: just run it */
        cg_tensor *y = blk->fn(blk->ctx, blk->inputs);
        if (blk->ctx_free)
            blk->ctx_free(blk->ctx);
        return y;
    }
    int nin = blk->n_inputs + blk->n_params;
    ck_state *s = calloc(1, sizeof *s);
    cg_tensor **all = calloc((size_t)nin, sizeof *all);
    if (s) {
        s->rngs = calloc((size_t)(blk->n_rngs ? blk->n_rngs : 1), sizeof *s->rngs);
        s->before = calloc((size_t)(blk->n_rngs ? blk->n_rngs : 1), sizeof *s->before);
    }
    if (!s || !all || !s->rngs || !s->before) {
        if (s) {
            free(s->rngs);
            free(s->before);
        }
        free(s);
        free(all);
        if (blk->ctx_free)
            blk->ctx_free(blk->ctx);
        cg_set_error("checkpoint: out of memory");
        return NULL;
    }
    *s = (ck_state){blk->fn,     blk->ctx, blk->ctx_free, blk->n_inputs,
                    blk->n_rngs, s->rngs,  s->before};
    for (int i = 0; i < blk->n_rngs; i++) {
        s->rngs[i] = blk->rngs[i];
        s->before[i] = *blk->rngs[i];
    }
    memcpy(all, blk->inputs, sizeof *all * (size_t)blk->n_inputs);
    if (blk->n_params)
        memcpy(all + blk->n_inputs, blk->params, sizeof *all * (size_t)blk->n_params);

    /* The block as recorded, and its graph dropped with y below: an op may
     * compute other bits without a graph than with one (a norm in bf16
     * precision takes its output from the rounded x-hat it keeps only when
     * recorded), and which of its ops record depends on what requires
     * grad inside the block (a frozen norm of an adapted block), so a run
     * with grad mode off would not give the values the recomputation gives
     * in backward, nor the run without recomputation. */
    cg_tensor *y = blk->fn(blk->ctx, blk->inputs);
    /* A header of its own: y may be an input, a view of one, or a leaf. */
    cg_tensor *out = y ? cg_alias(y) : NULL;
    cg_release(y);
    cg_node *n = out ? cg_record(out, CG_OP_CHECKPOINT, nin, all, ck_backward) : NULL;
    free(all);
    if (!n) {
        ck_state_free(s);
        cg_release(out);
        return NULL;
    }
    n->ctx = s;
    n->ctx_free = ck_state_free;
    return out;
}
