"""PyTorch's nn.Transformer* layers and cgrad's, through their state dicts
(nn/torch_names.h; run by tests/interop/run_torch_names.sh):

    /usr/bin/python3 torch_names.py make DIR    writes the cases
    /usr/bin/python3 torch_names.py check DIR   loads cgrad's files back
    (exit 0: equal; 1: a difference; 77: no torch)

make: for each case, a layer (or stack, or nn.Transformer) built with a
seed and random values in every parameter, its state dict saved as
DIR/CASE.safetensors (PyTorch's names, nothing else), and DIR/CASE.io.safetensors
holding the configuration (metadata), an input and PyTorch's output
(eval mode, dropout off). check_torch_names (C) loads the first into cgrad's
module, matches the output, then saves other weights under PyTorch's names
(DIR/CASE.cg.safetensors) with its output (DIR/CASE.cg_out.safetensors).
check: PyTorch loads those with load_state_dict(strict=True) and matches
cgrad's output.
"""
import sys

try:
    import numpy  # noqa: F401  (tensor.numpy() in the writer)
    import torch
except ImportError as e:
    print(f"torch_names: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import load, save  # noqa: E402  (the format's reader and writer)

D, H, FF, B, T, S = 16, 4, 24, 2, 5, 4
CASES = {  # name: (kind, activation, norm_first, batch_first, layers, key padding, bias)
    "enc_post_relu": ("enc_layer", "relu", False, True, 1, True, True),
    "enc_pre_gelu": ("enc_layer", "gelu", True, False, 1, False, True),
    "dec_post_relu": ("dec_layer", "relu", False, True, 1, False, True),
    "dec_pre_gelu": ("dec_layer", "gelu", True, True, 1, False, True),
    "encoder_pre": ("encoder", "relu", True, True, 2, False, True),
    "encoder_post": ("encoder", "gelu", False, True, 2, False, True),
    "decoder_pre": ("decoder", "gelu", True, True, 2, False, True),
    "transformer_pre": ("transformer", "relu", True, True, 2, False, True),
    # bias=False (PyTorch 2.1's; strip_biases on older ones); batch_first False
    # keeps 1.13's encoder fast path, which needs every bias, out of the way
    "enc_post_nobias": ("enc_layer", "relu", False, False, 1, True, False),
    "dec_pre_nobias": ("dec_layer", "gelu", True, True, 1, False, False),
    "encoder_pre_nobias": ("encoder", "gelu", True, False, 2, False, False),
    "transformer_pre_nobias": ("transformer", "relu", True, False, 2, False, False),
}


def build(kind, act, norm_first, batch_first, n):
    kw = dict(d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0, activation=act,
              batch_first=batch_first, norm_first=norm_first)
    if kind == "enc_layer":
        return torch.nn.TransformerEncoderLayer(**kw)
    if kind == "dec_layer":
        return torch.nn.TransformerDecoderLayer(**kw)
    norm = torch.nn.LayerNorm(D) if norm_first else None  # cgrad's stacks: ln_f when pre-norm
    if kind == "encoder":
        return torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**kw), n, norm,
                                           enable_nested_tensor=False)
    if kind == "decoder":
        return torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw), n, norm)
    return torch.nn.Transformer(num_encoder_layers=n, num_decoder_layers=n, **kw)


def strip_biases(model):
    """bias=False as PyTorch 2.1 makes it, on a PyTorch without the argument:
    the attention's in_proj_bias and every Linear's and LayerNorm's bias
    unregistered (None, as bias=False leaves them)."""
    for m in model.modules():
        if isinstance(m, torch.nn.MultiheadAttention):
            m.register_parameter("in_proj_bias", None)
        if isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm)):
            m.register_parameter("bias", None)
    return model


def build_case(kind, act, nf, bf, n, bias):
    model = build(kind, act, nf, bf, n)
    return model if bias else strip_biases(model)


def run(model, kind, bf, x, mem, pad):
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
    if kind in ("enc_layer", "encoder"):
        return model(x, src_key_padding_mask=pad)
    if kind == "transformer":
        return model(mem, x, tgt_mask=causal)
    return model(x, mem, tgt_mask=causal)


def inputs(batch_first, seed):
    g = torch.Generator().manual_seed(seed)
    x, mem = torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)
    if not batch_first:
        x, mem = x.transpose(0, 1).contiguous(), mem.transpose(0, 1).contiguous()
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, T - 2:] = True
    return x, mem, pad


def make(out):
    for i, (name, (kind, act, nf, bf, n, use_pad, bias)) in enumerate(CASES.items()):
        torch.manual_seed(100 + i)
        model = build_case(kind, act, nf, bf, n, bias)
        with torch.no_grad():  # every parameter distinct: a swapped name cannot pass
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
        model.eval()
        x, mem, pad = inputs(bf, 200 + i)
        y = run(model, kind, bf, x, mem, pad if use_pad else None).detach()
        save(f"{out}/{name}.safetensors", model.state_dict())
        io = {"x": x, "mem": mem, "y": y}
        if use_pad:
            io["pad"] = pad
        meta = {"kind": kind, "activation": act, "norm_first": int(nf), "batch_first": int(bf),
                "layers": n, "d_model": D, "nhead": H, "dim_feedforward": FF, "bias": int(bias)}
        save(f"{out}/{name}.io.safetensors", io, {k: str(v) for k, v in meta.items()})
    # nn.Transformer post-norm has encoder.norm and decoder.norm: no cgrad equivalent
    torch.manual_seed(1)
    save(f"{out}/transformer_post.safetensors", build("transformer", "relu", False, True, 1).state_dict())
    with open(f"{out}/cases", "w") as f:
        f.write("\n".join(CASES) + "\n")
    print(f"torch_names: {len(CASES)} cases written")


def check(out):
    bad = 0
    for i, (name, (kind, act, nf, bf, n, use_pad, bias)) in enumerate(CASES.items()):
        model = build_case(kind, act, nf, bf, n, bias)
        model.load_state_dict(load(f"{out}/{name}.cg.safetensors"), strict=True)
        model.eval()
        x, mem, pad = inputs(bf, 200 + i)  # the inputs make() wrote
        y = run(model, kind, bf, x, mem, pad if use_pad else None).detach()
        ours = load(f"{out}/{name}.cg_out.safetensors")["y"]
        err = (y - ours).abs().max().item()
        ok = err <= 1e-5
        bad += not ok
        print(f"{name}: cgrad's weights in PyTorch (strict), max |output difference| {err:.3g}: "
              f"{'ok' if ok else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
