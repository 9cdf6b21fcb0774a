/* cgrad autograd: activation recomputation (PyTorch's
 * torch.utils.checkpoint).
 *
 * cg_checkpoint(&blk) runs blk.fn(blk.ctx, blk.inputs) and drops the
 * block's graph as soon as it returns, so none of the block's intermediate
 * tensors is kept past its forward, and records its output as one graph
 * node that holds only the block's inputs (and its parameters, which live
 * anyway). The forward runs with grad mode on, as the recomputation does:
 * some ops compute other bits without a graph (a norm in bf16 precision),
 * and which ops record depends on what requires grad inside the block. When backward reaches that node it runs
 * the block again, with grad mode on, on detached copies of the inputs,
 * and backpropagates the output gradient through the recomputed graph:
 * the parameters' gradients accumulate into their .grad there, the inputs'
 * gradients go on to the rest of the graph. The recomputed graph is freed
 * at once. Memory: between forward and backward a block costs its inputs
 * and output instead of every intermediate; backward costs one extra
 * forward of the block.
 *
 * Random draws: blk.rngs lists the generators the block draws from (e.g.
 * the dropout generator of a transformer layer). Their states before the
 * forward are saved on the node; the recomputation starts from them, so it
 * draws the same masks, and afterwards the generators get back the state
 * they had when backward reached the node (later forwards draw as if there
 * had been no recomputation).
 *
 * Gradients are bit-identical to the run without recomputation when the
 * block is a function of its inputs, parameters and generators only, in
 * fp32 and bf16 precision alike: the gradient an input has
 * gathered before the node runs continues in the recomputed graph, so its
 * parts are added in the same order as without recomputation (tested with
 * transformer layers with dropout, and with an encoder's memory read by
 * every decoder layer: tests/test_checkpoint.c).
 *
 * Nested checkpoints are allowed (a block whose fn calls cg_checkpoint):
 * the inner one records its node in the outer block's forward, dropped
 * with that block's graph, and again in the recomputation.
 *
 * The backward needs grad mode on (as it is by default); blk.ctx must stay
 * valid until the output's graph is freed: pass ctx_free to hand it to the
 * node (it is then freed with the node, or at once when cg_checkpoint
 * fails). */
#ifndef CG_AUTOGRAD_CHECKPOINT_H
#define CG_AUTOGRAD_CHECKPOINT_H

#include "../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The block: a new reference to its output (or NULL + error). It must use
 * inputs[0 .. n_inputs) (not other tensors made outside it that need a
 * gradient, except the parameters listed) and draw only from the listed
 * generators. */
typedef cg_tensor *(*cg_checkpoint_fn)(void *ctx, cg_tensor *const *inputs);

typedef struct {
    cg_checkpoint_fn fn;
    void *ctx;
    void (*ctx_free)(void *ctx); /* NULL: ctx is the caller's */
    int n_inputs;                /* >= 1 */
    cg_tensor *const *inputs;
    int n_params; /* leaves the block reads (may be 0) */
    cg_tensor *const *params;
    int n_rngs; /* generators the block draws from (may be 0) */
    cg_rng *const *rngs;
} cg_checkpoint_block;

/* The block's output (new reference). With grad mode off, or when no input
 * and no parameter requires grad, this is just fn's result. NULL + error
 * when fn fails (or on NULL arguments). */
cg_tensor *cg_checkpoint(const cg_checkpoint_block *blk);

#ifdef __cplusplus
}
#endif
#endif
