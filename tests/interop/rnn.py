"""torch.nn.RNN, GRU, LSTM and their cells: cases for tests/interop/check_rnn.c (run
by tests/interop/run_swiglu.sh):

    /usr/bin/python3 rnn.py DIR    (exit 77: no torch)

Each case: DIR/CASE.safetensors, the module's state dict (PyTorch's names);
DIR/CASE.io.safetensors, the input x, the states given (h0, c0), the
output y, h_n and c_n, the weights of the loss sum(y * ry) + sum(hn * rh)
(+ sum(cn * rc)), and that loss's gradients: "grad.x", "grad.h0",
"grad.c0" and every parameter's "grad.NAME". Run in float64, saved as
float32. And DIR/init_CASE.safetensors: the state dict of the module that
torch.manual_seed(7) then its constructor gives (PyTorch's default
initialisation, which cg_module_reset_parameters_torch must match bit for
bit). The cases (their sizes are check_rnn.c's table):

  gru       2 layers, batch_first, h0 given
  gru_bi    2 layers, bidirectional, no bias, seq first, h0 zeros
  lstm      2 layers, seq first, h0 and c0 given
  lstm_bi   1 layer, bidirectional, batch_first, states zeros

and with lengths (x padded to T steps, run as
pack_padded_sequence(x, lengths, batch_first, enforce_sorted=False), the
module, pad_packed_sequence(total_length=T); "lengths" in the io file):

  gru_len       2 layers, bidirectional, batch_first, h0 given, [2, 4, 1, 4]
  gru_len_short 1 layer, seq first, states zeros, [2, 3, 3, 1] (none is T)
  lstm_len      2 layers, bidirectional, seq first, states given, [3, 1, 4, 2]

nn.RNN (tanh and relu):

  rnn_tanh      2 layers, bidirectional, batch_first, h0 given, lengths [3, 4, 1]
  rnn_relu      2 layers, seq first, no bias, states zeros

and the cells (nn.RNNCell, nn.GRUCell, nn.LSTMCell), stepped over x [T, B,
IN] from h0 (c0) or zeros: y the stack of every step's h, hn the last h,
cn the last c:

  rnn_cell      tanh, h0 given          rnn_cell_relu  relu, no bias, zeros
  gru_cell      h0 given                gru_cell_unb   unbatched x [T, IN], zeros
  lstm_cell     h0 and c0 given

and DIR/init_params.safetensors, a 2-layer GRU under a linear head as
torch.manual_seed(7), the constructors and the reference's init_params
leave them (cg_module_init_params_torch's meaning).
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
except ImportError as e:
    print(f"rnn: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

IN, H, T, B = 5, 6, 4, 3

CASES = [  # name, kind, layers, bias, batch_first, bidirectional, states given, lengths
    ("gru", "gru", 2, True, True, False, True, None),
    ("gru_bi", "gru", 2, False, False, True, False, None),
    ("lstm", "lstm", 2, True, False, False, True, None),
    ("lstm_bi", "lstm", 1, True, True, True, False, None),
    ("gru_len", "gru", 2, True, True, True, True, [2, 4, 1, 4]),
    ("gru_len_short", "gru", 1, True, False, False, False, [2, 3, 3, 1]),
    ("lstm_len", "lstm", 2, True, False, True, True, [3, 1, 4, 2]),
    ("rnn_tanh", "rnn_tanh", 2, True, True, True, True, [3, 4, 1]),
    ("rnn_relu", "rnn_relu", 2, False, False, False, False, None),
    ("rnn_cell", "rnn_tanh_cell", 1, True, False, False, True, None),
    ("rnn_cell_relu", "rnn_relu_cell", 1, False, False, False, False, None),
    ("gru_cell", "gru_cell", 1, True, False, False, True, None),
    ("gru_cell_unb", "gru_cell", 1, True, False, False, False, "unbatched"),
    ("lstm_cell", "lstm_cell", 1, True, False, False, True, None),
]


def make(kind, layers, bias, bf, bi):
    if kind.endswith("_cell"):
        if kind.startswith("rnn"):
            return nn.RNNCell(IN, H, bias=bias, nonlinearity=kind.split("_")[1])
        return (nn.LSTMCell if kind == "lstm_cell" else nn.GRUCell)(IN, H, bias=bias)
    if kind.startswith("rnn"):
        return nn.RNN(IN, H, num_layers=layers, nonlinearity=kind[4:], bias=bias, batch_first=bf,
                      bidirectional=bi)
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    return cls(IN, H, num_layers=layers, bias=bias, batch_first=bf, bidirectional=bi)


def run_cell(m, lstm, x, h0, c0):
    """The cell stepped over x's first dim: every h stacked, the last h and c."""
    h, c, ys = h0, c0, []
    for t in range(x.shape[0]):
        if lstm:
            h, c = m(x[t], (h, c)) if h is not None else m(x[t])
        else:
            h = m(x[t], h)
        ys.append(h)
    return torch.stack(ys), h, c


def f32(t):
    return t.detach().float().contiguous()


def write(out, seed, name, kind, layers, bias, bf, bi, states, lengths):
    lstm, cell = kind.startswith("lstm"), kind.endswith("_cell")
    unbatched = lengths == "unbatched"
    lengths = None if unbatched else lengths
    torch.manual_seed(7)
    save(f"{out}/init_{name}.safetensors",
         {k: f32(v) for k, v in make(kind, layers, bias, bf, bi).state_dict().items()})
    g = torch.Generator().manual_seed(seed)
    m = make(kind, layers, bias, bf, bi)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    m = m.double()
    D = 2 if bi else 1
    nb = len(lengths) if lengths else B
    xs = (T, IN) if unbatched else (nb, T, IN) if bf else (T, nb, IN)
    x = torch.randn(*xs, generator=g, dtype=torch.float64, requires_grad=True)
    io = {}
    h0 = c0 = None
    if states:
        hs = (nb, H) if cell else (layers * D, nb, H)
        h0 = torch.randn(*hs, generator=g, dtype=torch.float64, requires_grad=True)
        c0 = torch.randn(*hs, generator=g, dtype=torch.float64, requires_grad=True)
    src = x
    if lengths:
        src = pack_padded_sequence(x, torch.tensor(lengths), batch_first=bf, enforce_sorted=False)
        io["lengths"] = torch.tensor(lengths, dtype=torch.int64)
    if cell:
        y, hn, cn = run_cell(m, lstm, x, h0, c0)
    elif lstm:
        y, (hn, cn) = m(src, (h0, c0)) if states else m(src)
    else:
        y, hn = m(src, h0) if states else m(src)
        cn = None
    if lengths:
        y = pad_packed_sequence(y, batch_first=bf, total_length=T)[0]
    ry = torch.randn(y.shape, generator=g, dtype=torch.float64)
    rh = torch.randn(hn.shape, generator=g, dtype=torch.float64)
    loss = (y * ry).sum() + (hn * rh).sum()
    io.update({"x": x, "y": y, "hn": hn, "ry": ry, "rh": rh})
    if lstm:
        rc = torch.randn(cn.shape, generator=g, dtype=torch.float64)
        loss = loss + (cn * rc).sum()
        io.update({"cn": cn, "rc": rc})
    if states:
        io["h0"] = h0
        if lstm:
            io["c0"] = c0
    loss.backward()
    io = {k: v if v.dtype == torch.int64 else f32(v) for k, v in io.items()}
    io["grad.x"] = f32(x.grad)
    if states:
        io["grad.h0"] = f32(h0.grad)
        if lstm:
            io["grad.c0"] = f32(c0.grad)
    for k, p in m.named_parameters():
        io["grad." + k] = f32(p.grad)
    save(f"{out}/{name}.safetensors", {k: f32(v) for k, v in m.state_dict().items()})
    save(f"{out}/{name}.io.safetensors", io)


class GRUHead(nn.Module):
    """A GRU under a linear head: the model of init_params.safetensors."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(IN, H, num_layers=2)
        self.head = nn.Linear(H, 4)


def write_init_params(out):
    """torch.manual_seed(7), the constructors, then the reference's
    init_params (std 0.02): Linear weights N(0, std), parameters named bias
    zero; the GRU keeps its constructor's draws (cg_module_init_params_torch
    must give the same)."""
    torch.manual_seed(7)
    m = GRUHead()
    for mod in m.modules():
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, 0.0, 0.02)
        bias = getattr(mod, "bias", None)
        if isinstance(bias, nn.Parameter):
            nn.init.zeros_(bias)
    save(f"{out}/init_params.safetensors", {k: f32(v) for k, v in m.state_dict().items()})


def main():
    out = sys.argv[1]
    for i, c in enumerate(CASES):
        write(out, 10 + i, *c)
    write_init_params(out)


if __name__ == "__main__":
    main()
