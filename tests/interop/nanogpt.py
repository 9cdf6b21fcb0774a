"""nanoGPT's GPT in PyTorch (its model.py's architecture and parameter
names, but for the transformer. prefix, written here: token and learnt position embeddings added unscaled,
dropout, pre-norm blocks of causal self-attention with one fused c_attn and
an exact-GELU MLP, the final LayerNorm, the head tied to wte; Linear and
Embedding weights N(0, 0.02), the residual projections c_proj N(0,
0.02/sqrt(2 n_layer))), for tests/interop/check_nanogpt.c (run by
tests/interop/run_swiglu.sh):

    /usr/bin/python3 nanogpt.py DIR    (exit 77: no torch)

Each case: DIR/CASE.ckpt.pt and DIR/CASE.meta.pkl, the model as nanoGPT's
train.py and prepare.py save it (state dict under "transformer.", the
tied lm_head.weight, model_args; the characters' itos), and
DIR/CASE.safetensors made from those two by scripts/nanogpt_import.py, run
as a user runs it; DIR/CASE.io.safetensors: ids x and targets y [B, T] (as
float32 values), the logits, the mean cross-entropy "loss" and the
gradients of that loss under cgrad's names ("grad.NAME", the importer's
mapping). In float64, saved as float32, dropout 0 (eval: the masks are
generators').

  gpt      n_layer 2, n_head 4, n_embd 32, vocab 29, block 16, bias True;
           torch < 2.0's causal-mask buffers (attn.bias) in the state dict
  gpt_nb   the same with bias False (nanoGPT's bias = False), saved from a
           torch.compile'd model (keys under "_orig_mod.")
"""
import math
import os
import pickle
import subprocess
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    print(f"nanogpt: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

IMPORTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                        "nanogpt_import.py")
sys.path.insert(0, os.path.dirname(IMPORTER))
from nanogpt_import import cgrad_tensors  # noqa: E402

L, NH, D, V, BS, B, T = 2, 4, 32, 29, 16, 3, 12


class LayerNorm(nn.Module):
    """nanoGPT's: a LayerNorm whose bias is optional (torch 1.13's has none)"""

    def __init__(self, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))
        self.bias = nn.Parameter(torch.zeros(D)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, (D,), self.weight, self.bias, 1e-5)


class Attn(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D, bias=bias)
        self.c_proj = nn.Linear(D, D, bias=bias)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(D, dim=2)
        heads = lambda t: t.view(B, T, NH, D // NH).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        s = q @ k.transpose(-2, -1) / math.sqrt(D // NH)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))


class Mlp(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.c_fc = nn.Linear(D, 4 * D, bias=bias)
        self.c_proj = nn.Linear(4 * D, D, bias=bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.ln_1 = LayerNorm(bias)
        self.attn = Attn(bias)
        self.ln_2 = LayerNorm(bias)
        self.mlp = Mlp(bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, bias, g):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(BS, D)
        self.h = nn.ModuleList([Block(bias) for _ in range(L)])
        self.ln_f = LayerNorm(bias)
        with torch.no_grad():  # nanoGPT's _init_weights, then its c_proj rule
            for n, p in self.named_parameters():
                if n.endswith("c_proj.weight"):
                    p.copy_(torch.randn(p.shape, generator=g) * (0.02 / math.sqrt(2 * L)))
                elif p.dim() == 2:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                elif "ln" in n:  # norms: random too, so that a swapped name shows
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


CHARS = sorted(set("\n !,.?abcdefghijklmnopqrstuvw"))  # V of them, as prepare.py's


def save_nanogpt(out, name, m, bias, compiled):
    """m as nanoGPT's ckpt.pt and meta.pkl"""
    sd = {"transformer." + k: v.float() for k, v in m.state_dict().items()}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied
    if not compiled:  # torch < 2.0's nanoGPT registers its causal masks
        for i in range(L):
            sd[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(BS, BS)).view(1, 1, BS, BS)
    if compiled:
        sd = {"_orig_mod." + k: v for k, v in sd.items()}
    args = dict(n_layer=L, n_head=NH, n_embd=D, block_size=BS, bias=bias, vocab_size=V,
                dropout=0.0)
    torch.save({"model": sd, "model_args": args, "iter_num": 100, "best_val_loss": 1.5,
                "config": {}}, f"{out}/{name}.ckpt.pt")
    with open(f"{out}/{name}.meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": V, "itos": dict(enumerate(CHARS)),
                     "stoi": {c: i for i, c in enumerate(CHARS)}}, f)
    subprocess.run([sys.executable, IMPORTER, f"{out}/{name}.ckpt.pt", f"{out}/{name}.meta.pkl",
                    f"{out}/{name}.safetensors", "--force"], check=True)


def case(out, name, bias, seed, compiled):
    g = torch.Generator().manual_seed(seed)
    m = GPT(bias, g).double()
    x = torch.randint(0, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)
    logits = m(x)
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    save_nanogpt(out, name, m, bias, compiled)
    io = {"x": x.float(), "y": y.float(), "logits": logits.detach().float(),
          "loss": loss.detach().float().reshape(1)}
    grads = cgrad_tensors({k: p.grad for k, p in m.named_parameters()}, D)
    for k, v in grads.items():
        io["grad." + k] = v.float().contiguous()
    save(f"{out}/{name}.io.safetensors", io)


def main():
    out = sys.argv[1]
    assert len(CHARS) == V
    case(out, "gpt", True, 1, False)
    case(out, "gpt_nb", False, 2, True)


if __name__ == "__main__":
    main()
