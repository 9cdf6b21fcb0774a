/* cgrad autograd, INTERNAL: what the op files share. Not installed. */
#ifndef CG_AUTOGRAD_OPS_IMPL_H
#define CG_AUTOGRAD_OPS_IMPL_H

#include "autograd/autograd.h"

/* A norm recorded in bf16 precision keeps x-hat in bf16 (ops_nn.c), from
 * which its output's bf16 copy is made again, the same bits: the products
 * that read that copy (ops_layers.c) then need not keep it between the
 * forward and the backward.
 *
 * cg_norm_remakes_bf16: whether x is the output of such a norm as the
 * norm wrote it (not written since), its node not yet run.
 * cg_norm_out_bf16: the copy of n's output, made at the first call and
 * kept on n until n's own backward has run (its users' backwards run
 * before it); NULL + error when it cannot be made. */
bool cg_norm_remakes_bf16(const cg_tensor *x);
const cg_tensor *cg_norm_out_bf16(cg_node *n);

/* The gradient of an op that picks elements of `in` (max, topk's gather,
 * index_select, embedding, gather): g added into zeros of in's shape along
 * dim at index (scatter: cg_k_scatter_add_, index of g's shape; else
 * cg_k_index_add_, a 1-d index). Those add float32, so for a bf16 or f16
 * input g is added in float32 and the sums rounded once to in's dtype.
 * A new tensor, or NULL + error. */
cg_tensor *cg_pick_grad(const cg_tensor *in, int dim, const cg_tensor *index, const cg_tensor *g,
                        bool scatter);

/* a's elements at the int64 idx along dim (idx of a's ndim; a 0-d a: a
 * 0-d or [0] idx), in a's dtype: a gather, whose backward scatters the
 * gradient back to where each came from (topk, sort, cummax, cummin). A
 * new tensor, or NULL + error. */
cg_tensor *cg_pick_values(cg_tensor *a, int dim, const cg_tensor *idx);

/* cg_node_grad_acc for the backwards whose kernels add into float32 only
 * (the linear layers', the embedding's): input i's gradient when i is
 * float32, else NULL and the engine adds (asked for only then: a leaf's is
 * handed over under its lock). */
static inline cg_tensor *cg_grad_acc_f32(const cg_node *n, int i)
{
    return n->inputs[i]->dtype == CG_F32 ? cg_node_grad_acc(n, i) : NULL;
}

/* ops.c's recording (ops_reduce.c's too): a node for op on out, none for an
 * int64 or bool out (no gradient, whatever the inputs). When it should
 * have recorded (grad mode on, an input requires grad) and did not,
 * recording failed (out of memory): out is released and NULL returned
 * with the error, never a silently detached result. node: NULL, or gets
 * the node (NULL when none). */
cg_tensor *cg_op_finish(cg_tensor *out, cg_op op, int nin, cg_tensor *const *in, cg_backward_fn bw,
                        cg_node **node);
cg_tensor *cg_op_finish1(cg_tensor *out, cg_op op, cg_tensor *a, cg_backward_fn bw, cg_node **node);
/* Save the op's own output on its node n (NULL: nothing recorded, true),
 * as an alias: no reference cycle. */
bool cg_op_save_output(cg_node *n, cg_tensor *out);

/* out recorded as op over in (released, NULL returned, when it should
 * have been recorded and was not: out of memory); the node, or NULL when
 * nothing was recorded, into *node */
static inline cg_tensor *cg_recorded(cg_tensor *out, cg_op op, int nin, cg_tensor *const *in,
                                     cg_backward_fn bw, cg_node **node)
{
    *node = out ? cg_record(out, op, nin, in, bw) : NULL;
    if (out && cg_record_failed(*node, nin, in)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

/* The losses' shared steps (ops_loss.c): r one of mean, sum, none (and
 * batchmean when batchmean is true), else false + "<op>: reduction ...";
 * the loss l reduced by r (a new reference; none: l retained); a weight
 * argument (arg names it), NULL or a float tensor that broadcasts to x's
 * shape, else false + error naming op. */
bool cg_loss_reduction_ok(const char *op, cg_reduction r, bool batchmean);
cg_tensor *cg_loss_reduce(cg_tensor *l, cg_reduction r);
bool cg_loss_weight_arg(const char *op, const char *arg, const cg_tensor *w, const cg_tensor *x);

#endif
