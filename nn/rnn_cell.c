/* nn.RNNCell, nn.GRUCell, nn.LSTMCell (nn/rnn.h): one step of the
 * recurrent modules, the step itself theirs (cg_rnn_step). */
#include <stdio.h>

#include "autograd/ops.h"
#include "nn/rnn.h"
#include "nn/rnn_impl.h"

static const char *cell_name(cg_rnn_mode mode)
{
    return mode == CG_RNN_LSTM ? "LSTMCell" : mode == CG_RNN_GRU ? "GRUCell" : "RNNCell";
}

static cg_rnn_cell *cell_new(int64_t in, int64_t H, bool bias, cg_rnn_mode mode, cg_rng *rng)
{
    const char *op = cell_name(mode);
    if (in < 1 || H < 1) {
        cg_set_error("%s: %s must be >= 1 (got %lld)", op, in < 1 ? "input_size" : "hidden_size",
                     (long long)(in < 1 ? in : H));
        return NULL;
    }
    cg_rng local = cg_rng_new(0);
    cg_rnn_cell *m = (cg_rnn_cell *)cg_module_alloc(sizeof *m, op, NULL);
    if (!m)
        return NULL;
    m->mode = mode;
    m->input_size = in;
    m->hidden_size = H;
    if (!cg_rnn_add_weights(&m->base, "", cg_rnn_mode_gates(mode) * H, in, H, bias,
                            rng ? rng : &local, m->w)) {
        cg_module_free(&m->base);
        return NULL;
    }
    return m;
}

cg_rnn_cell *cg_rnn_cell_new(int64_t input_size, int64_t hidden_size, bool bias, bool relu,
                             cg_rng *rng)
{
    return cell_new(input_size, hidden_size, bias, relu ? CG_RNN_RELU : CG_RNN_TANH, rng);
}
cg_rnn_cell *cg_gru_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_rng *rng)
{
    return cell_new(input_size, hidden_size, bias, CG_RNN_GRU, rng);
}
cg_rnn_cell *cg_lstm_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_rng *rng)
{
    return cell_new(input_size, hidden_size, bias, CG_RNN_LSTM, rng);
}

/* x [B, in] or [in]; a state [B, H] or [H] as x is batched or not. True,
 * or false + one line. */
static bool cell_args(const cg_rnn_cell *m, const char *op, const cg_tensor *x, const cg_tensor *h,
                      const cg_tensor *c)
{
    char a[96];
    if ((x->ndim != 1 && x->ndim != 2) || x->shape[x->ndim - 1] != m->input_size ||
        (x->ndim == 2 && x->shape[0] < 1)) {
        cg_set_error("%s: input %s, expected [batch, %lld] or [%lld] unbatched (input_size %lld)",
                     op, cg_shape_str(x, a, sizeof a), (long long)m->input_size,
                     (long long)m->input_size, (long long)m->input_size);
        return false;
    }
    const cg_tensor *st[2] = {h, c};
    for (int i = 0; i < 2; i++) {
        const cg_tensor *s = st[i];
        if (s && !(s->ndim == x->ndim && s->shape[s->ndim - 1] == m->hidden_size &&
                   (x->ndim == 1 || s->shape[0] == x->shape[0]))) {
            char b[96];
            if (x->ndim == 2)
                snprintf(b, sizeof b, "[%lld, %lld] (batch, hidden_size)", (long long)x->shape[0],
                         (long long)m->hidden_size);
            else
                snprintf(b, sizeof b, "[%lld] (hidden_size) for an unbatched input",
                         (long long)m->hidden_size);
            cg_set_error("%s: %s is %s, expected %s", op, i ? "c" : "h",
                         cg_shape_str(s, a, sizeof a), b);
            return false;
        }
    }
    return true;
}

/* h' (and *c_out) of any of the three; NULL + error */
static cg_tensor *cell_forward(cg_rnn_cell *m, const char *op, cg_rnn_mode want, cg_tensor *x,
                               cg_tensor *h, cg_tensor *c, cg_tensor **c_out)
{
    if (c_out)
        *c_out = NULL;
    if (!m || !x)
        return cg_error_null_input(op), NULL;
    if (cg_rnn_mode_name(m->mode) != cg_rnn_mode_name(want)) {
        cg_set_error("%s: the module is a%s %s", op, m->mode == CG_RNN_GRU ? "" : "n",
                     cell_name(m->mode));
        return NULL;
    }
    if (want == CG_RNN_LSTM && (!c_out || (!h) != (!c))) {
        cg_set_error(!c_out ? "%s: c_out is NULL" : "%s: h and c are both given or both NULL", op);
        return NULL;
    }
    if (!cell_args(m, cell_name(m->mode), x, h, c))
        return NULL;
    const bool unb = x->ndim == 1;
    const int64_t B = unb ? 1 : x->shape[0], H = m->hidden_size;
    /* batched [B, ...] from here */
    cg_tensor *xb = unb ? cg_unsqueeze(x, 0) : cg_retain(x);
    cg_tensor *hb = !h ? cg_zeros(CG_SHAPE(B, H)) : unb ? cg_unsqueeze(h, 0) : cg_retain(h);
    cg_tensor *cb = want != CG_RNN_LSTM ? NULL
                    : !c                ? cg_zeros(CG_SHAPE(B, H))
                    : unb               ? cg_unsqueeze(c, 0)
                                        : cg_retain(c);
    cg_tensor *gi = xb ? cg_affine(xb, m->w[0], m->w[2]) : NULL, *c1 = NULL;
    cg_tensor *h1 = gi && hb && (want != CG_RNN_LSTM || cb)
                        ? cg_rnn_step(m->mode, gi, hb, cb, m->w[1], m->w[3], &c1)
                        : NULL;
    cg_release_all(4, xb, hb, cb, gi);
    if (h1 && unb) {
        cg_tensor *q[2] = {cg_squeeze(h1, 0), c1 ? cg_squeeze(c1, 0) : NULL};
        cg_release_all(2, h1, c1);
        h1 = q[0], c1 = q[1];
    }
    if (!h1 || (want == CG_RNN_LSTM && !c1)) {
        cg_release_all(2, h1, c1);
        return NULL;
    }
    if (c_out)
        *c_out = c1;
    return h1;
}

cg_tensor *cg_rnn_cell_forward(cg_rnn_cell *m, cg_tensor *x, cg_tensor *h)
{
    return cell_forward(m, "cg_rnn_cell_forward", CG_RNN_TANH, x, h, NULL, NULL);
}

cg_tensor *cg_gru_cell_forward(cg_rnn_cell *m, cg_tensor *x, cg_tensor *h)
{
    return cell_forward(m, "cg_gru_cell_forward", CG_RNN_GRU, x, h, NULL, NULL);
}

cg_tensor *cg_lstm_cell_forward(cg_rnn_cell *m, cg_tensor *x, cg_tensor *h, cg_tensor *c,
                                cg_tensor **c_out)
{
    return cell_forward(m, "cg_lstm_cell_forward", CG_RNN_LSTM, x, h, c, c_out);
}
