/* The recurrent cells as ops (nn/rnn.h builds torch.nn.GRU and
 * torch.nn.LSTM on them): one node a time step, whose backward is one
 * pass of core's fused kernel (core/rnn_cell.c). Forward and backward
 * side by side, as in ops.c. */
#include "autograd/ops.h"
#include "core/ops.h"

#define IN(i) (n->inputs[(i)])
#define NEEDS(i) cg_node_needs_grad(n, (i))

/* out with a node of op over in recorded on it; NULL (out released) when
 * recording failed */
static cg_tensor *record(cg_tensor *out, cg_op op, int nin, cg_tensor *const *in, cg_backward_fn bw)
{
    cg_node *n = cg_record(out, op, nin, in, bw);
    if (out && cg_record_failed(n, nin, in)) {
        cg_release(out);
        return NULL;
    }
    return out;
}

static bool gru_cell_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return cg_k_gru_cell_backward(IN(0), IN(1), IN(2), g, NEEDS(0) ? &gin[0] : NULL,
                                  NEEDS(1) ? &gin[1] : NULL, NEEDS(2) ? &gin[2] : NULL);
}

cg_tensor *cg_gru_cell(cg_tensor *gi, cg_tensor *gh, cg_tensor *h)
{
    cg_tensor *in[3] = {gi, gh, h};
    return record(cg_k_gru_cell(gi, gh, h), CG_OP_GRU_CELL, 3, in, gru_cell_bw);
}

static bool lstm_cell_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return cg_k_lstm_cell_backward(IN(0), IN(1), g, NEEDS(0) ? &gin[0] : NULL,
                                   NEEDS(1) ? &gin[1] : NULL);
}

cg_tensor *cg_lstm_cell(cg_tensor *gates, cg_tensor *c)
{
    cg_tensor *in[2] = {gates, c};
    return record(cg_k_lstm_cell(gates, c), CG_OP_LSTM_CELL, 2, in, lstm_cell_bw);
}
