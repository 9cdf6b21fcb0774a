/* cgrad nn: recurrent modules, torch.nn.RNN, torch.nn.GRU and
 * torch.nn.LSTM, and their one-step modules nn.RNNCell, nn.GRUCell and
 * nn.LSTMCell.
 *
 * The same semantics and parameters as PyTorch's: input_size,
 * hidden_size, num_layers, bias, batch_first, dropout (on the outputs of
 * every layer but the last, in training mode only), bidirectional; the
 * parameters under PyTorch's names and shapes, in its order, layer by
 * layer and the reverse direction after the forward one:
 *     weight_ih_l0 [G H, input_size], weight_hh_l0 [G H, H],
 *     bias_ih_l0 [G H], bias_hh_l0 [G H], (weight_ih_l0_reverse, ...),
 *     weight_ih_l1 [G H, D H], ...
 * (G = 1 for the RNN, h' = tanh or relu of the two products; 3 for the
 * GRU, gates r, z, n; 4 for the LSTM, gates i, f, g, o; D = 2 when
 * bidirectional, else 1), so a PyTorch state dict loads as it is
 * (cg_module_load_file). The cells' are the same without the suffix
 * (weight_ih [G H, input_size], ...).
 *
 * Computed as cuDNN and PyTorch do: one product of every time step's input
 * with weight_ih a layer and direction (cg_affine over [T, B, in]), then a
 * step at a time the hidden product (cg_affine; for the LSTM with the
 * input's part added as the product writes it, cg_affine_residual) and
 * the fused cell (autograd/ops.h cg_gru_cell, cg_lstm_cell; the RNN's
 * tanh or relu): three graph nodes a step for the GRU and the RNN (the
 * step's view, the product, the cell; the output's cg_stack is one node),
 * five for the LSTM (and the views of h and c).
 *
 * Free with cg_module_free(CG_MODULE(m)). */
#ifndef CG_NN_RNN_H
#define CG_NN_RNN_H

#include "../nn/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a recurrent module computes a step: nn.RNN's two nonlinearities,
 * the GRU, the LSTM */
typedef enum { CG_RNN_TANH = 0, CG_RNN_RELU, CG_RNN_GRU, CG_RNN_LSTM } cg_rnn_mode;

/* nn.GRU(input_size, hidden_size, num_layers, bias, batch_first, dropout,
 * bidirectional), nn.LSTM's and nn.RNN's (with nonlinearity):
 * CG_RNN_CONFIG(in, hidden) gives PyTorch's defaults (num_layers 1, bias
 * true, tanh, the rest off); set the other fields after. */
typedef struct {
    int64_t input_size, hidden_size;
    int num_layers;     /* >= 1 */
    bool bias;          /* the two bias vectors of each layer */
    bool batch_first;   /* x and output [batch, seq, feature], else [seq, batch, feature] */
    float dropout;      /* in [0, 1]: after each layer but the last, when training */
    bool bidirectional; /* a second direction reading the sequence backwards */
    bool relu;          /* nn.RNN's nonlinearity='relu' (else tanh); the GRU and LSTM refuse it */
} cg_rnn_config;
#define CG_RNN_CONFIG(in, hidden) \
    ((cg_rnn_config){.input_size = (in), .hidden_size = (hidden), .num_layers = 1, .bias = true})

/* One struct for the three (cg_gru, cg_lstm: the same type). w (owned by
 * the module) holds borrowed pointers to the parameters, four per layer
 * and direction (weight_ih, weight_hh, bias_ih, bias_hh; the biases NULL
 * without bias), index 4 (layer D + direction) + k. */
typedef struct cg_rnn {
    cg_module base;
    cg_rnn_mode mode;
    int64_t input_size, hidden_size;
    int num_layers, directions;
    bool bias, batch_first;
    float dropout;
    /* the dropout's generator: own_rng (seeded 0) unless pointed
     * elsewhere (it must outlive the module) */
    cg_rng *rng;
    cg_rng own_rng;
    cg_tensor **w;
} cg_rnn;
typedef cg_rnn cg_gru;
typedef cg_rnn cg_lstm;

/* An RNN / a GRU / an LSTM of cfg's sizes, every parameter drawn U(-1/sqrt(H),
 * 1/sqrt(H)) from rng in PyTorch's order (NULL: a fresh generator seeded
 * 0; cg_init_skip(): left zero, for cg_module_reset_parameters_torch,
 * which draws what `torch.manual_seed(s); nn.GRU(...)` draws). NULL +
 * error ("GRU: num_layers must be >= 1 (got 0)") for a size below 1, a
 * dropout outside [0, 1], relu asked of a GRU or LSTM or a NULL cfg. */
cg_rnn *cg_rnn_new(const cg_rnn_config *cfg, cg_rng *rng);
cg_gru *cg_gru_new(const cg_rnn_config *cfg, cg_rng *rng);
cg_lstm *cg_lstm_new(const cg_rnn_config *cfg, cg_rng *rng);

/* output, h_n = gru(x, h0): x [T, B, input_size] ([B, T, input_size] when
 * batch_first; or unbatched [T, input_size]), h0 [num_layers D, B, H]
 * ([num_layers D, H] unbatched) or NULL for zeros. Returns output [T, B,
 * D H] ([B, T, D H] when batch_first, contiguous), the last layer's h at
 * every step (both directions' side by side); *h_n (if h_n is not NULL) a
 * new reference to h_n [num_layers D, B, H], every layer's and
 * direction's last h (the reverse direction's after it has read the
 * whole sequence back to step 0). float32. NULL + one line naming the
 * module, the shapes and what was expected; a NULL x gives NULL. */
cg_tensor *cg_gru_forward(cg_gru *m, cg_tensor *x, cg_tensor *h0, cg_tensor **h_n);
/* output, h_n = rnn(x, h0): the same, for nn.RNN */
cg_tensor *cg_rnn_forward(cg_rnn *m, cg_tensor *x, cg_tensor *h0, cg_tensor **h_n);
/* output, (h_n, c_n) = lstm(x, (h0, c0)): as above, with the cell state c
 * beside h (c0 of h0's shape; both NULL for zeros, or both given). */
cg_tensor *cg_lstm_forward(cg_lstm *m, cg_tensor *x, cg_tensor *h0, cg_tensor *c0, cg_tensor **h_n,
                           cg_tensor **c_n);

/* The same over a batch of sequences of different lengths padded to x's T
 * steps: PyTorch's
 *     packed = pack_padded_sequence(x, lengths, batch_first,
 *                                   enforce_sorted=False)
 *     out, h_n = gru(packed, h0)
 *     output, _ = pad_packed_sequence(out, batch_first, total_length=T)
 * lengths int64 [B], each in [1, T] (NULL: all T). Sequence b is read over
 * its first lengths[b] steps only (the reverse direction from step
 * lengths[b] - 1 back to 0); its output is zero past them, and its h_n
 * (and c_n) its state after its own last step. The padding is never
 * computed: as PyTorch's packed sequences do, the batch is sorted longest
 * first and each step runs only the sequences still going (a step's rows
 * are a prefix of the sorted batch), h0 and h_n in the caller's order.
 * Batched inputs only; a bad length is one line ("GRU: lengths[2] is 0,
 * each must be in [1, 7] (the input's steps)"). */
cg_tensor *cg_gru_forward_lengths(cg_gru *m, cg_tensor *x, const cg_tensor *lengths, cg_tensor *h0,
                                  cg_tensor **h_n);
cg_tensor *cg_rnn_forward_lengths(cg_rnn *m, cg_tensor *x, const cg_tensor *lengths, cg_tensor *h0,
                                  cg_tensor **h_n);
cg_tensor *cg_lstm_forward_lengths(cg_lstm *m, cg_tensor *x, const cg_tensor *lengths,
                                   cg_tensor *h0, cg_tensor *c0, cg_tensor **h_n, cg_tensor **c_n);

/* ------------------------------------------------------------ cells */
/* nn.RNNCell, nn.GRUCell, nn.LSTMCell: one step of the modules above, for
 * a loop of one's own (an attention decoder feeding its context back,
 * say): parameters weight_ih [G H, input_size], weight_hh [G H, H],
 * bias_ih, bias_hh [G H] (without bias: none), drawn U(-1/sqrt(H),
 * 1/sqrt(H)) from rng in that order as PyTorch draws them (NULL: a fresh
 * generator seeded 0; cg_init_skip(): left zero). The step is the
 * modules' own: two products and the fused cell. */
typedef struct cg_rnn_cell {
    cg_module base;
    cg_rnn_mode mode;
    int64_t input_size, hidden_size;
    cg_tensor *w[4]; /* weight_ih, weight_hh, bias_ih, bias_hh (borrowed; the biases NULL
                      * without bias) */
} cg_rnn_cell;

/* NULL + error ("GRUCell: hidden_size must be >= 1 (got 0)") for a size
 * below 1. */
cg_rnn_cell *cg_rnn_cell_new(int64_t input_size, int64_t hidden_size, bool bias, bool relu,
                             cg_rng *rng);
cg_rnn_cell *cg_gru_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_rng *rng);
cg_rnn_cell *cg_lstm_cell_new(int64_t input_size, int64_t hidden_size, bool bias, cg_rng *rng);

/* h' = cell(x, h): x [B, input_size] (or unbatched [input_size]), h [B,
 * H] ([H]) or NULL for zeros. Returns h' [B, H] ([H]). NULL + one line
 * naming the cell and the shapes; a NULL x gives NULL. */
cg_tensor *cg_rnn_cell_forward(cg_rnn_cell *m, cg_tensor *x, cg_tensor *h);
cg_tensor *cg_gru_cell_forward(cg_rnn_cell *m, cg_tensor *x, cg_tensor *h);
/* h', c' = lstm_cell(x, (h, c)): h and c both given or both NULL; *c_out
 * (required) gets c'. */
cg_tensor *cg_lstm_cell_forward(cg_rnn_cell *m, cg_tensor *x, cg_tensor *h, cg_tensor *c,
                                cg_tensor **c_out);

#ifdef __cplusplus
}
#endif
#endif
