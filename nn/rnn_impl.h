/* What the recurrent modules (nn/rnn.c) and their one-step modules
 * (nn/rnn_cell.c) share: the names of the modes, the parameters, and the
 * step. Internal to nn. Include it after nn/rnn.h (it does not include it:
 * a module never includes itself round a circle). */
#ifndef CG_NN_RNN_IMPL_H
#define CG_NN_RNN_IMPL_H

/* "RNN", "GRU", "LSTM" (both of nn.RNN's modes are "RNN"); the gates a
 * step: 1, 3, 4 */
const char *cg_rnn_mode_name(cg_rnn_mode mode);
int cg_rnn_mode_gates(cg_rnn_mode mode);

/* weight_ih<suffix> [G, in], weight_hh<suffix> [G, H] and, with bias,
 * bias_ih<suffix> and bias_hh<suffix> [G] added to m in PyTorch's order,
 * into fields[0..3], each drawn U(-1/sqrt(H), 1/sqrt(H)) from rng as
 * PyTorch's reset_parameters draws them. False + error. */
bool cg_rnn_add_weights(cg_module *m, const char *suffix, int64_t G, int64_t in, int64_t H,
                        bool bias, cg_rng *rng, cg_tensor **fields);

/* One step of mode over gi, the step's input part (x W_ih^T + b_ih) [B,
 * G H], and the state h [B, H] (and c, the LSTM's): the new h, the LSTM's
 * new c into *c_next. Nothing given is released. NULL + error. */
cg_tensor *cg_rnn_step(cg_rnn_mode mode, cg_tensor *gi, cg_tensor *h, cg_tensor *c, cg_tensor *w_hh,
                       cg_tensor *b_hh, cg_tensor **c_next);

#endif
