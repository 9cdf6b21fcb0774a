"""A gated feed-forward and a pre-norm block with one, in PyTorch, for
tests/interop/check_swiglu.c (run by tests/interop/run_swiglu.sh):

    /usr/bin/python3 swiglu.py DIR    (exit 77: no torch)

Each case: DIR/CASE.safetensors, the module's state dict under its own
names; DIR/CASE.io.safetensors, an input x, the output y, weights r of the
loss sum(y * r), and the gradients of that loss: x's ("grad.x") and every
parameter's ("grad.NAME"). Float64 in PyTorch, saved as float32.

  ff_swiglu  fc2(F.silu(fc1(x)) * fc3(x)), LLaMA's w2(F.silu(w1(x)) * w3(x))
             with w1 = fc1, w2 = fc2, w3 = fc3 (cgrad's FeedForward names)
  ff_geglu   the same with F.gelu(approximate="tanh"), bias=False
  block      x + self_attn(norm1(x)) (causal), then
             x + linear2(F.silu(linear1(h)) * linear3(h)), h = norm2(x):
             cgrad's LMBlock under PyTorch's layer names (nn/torch_names.h)
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    print(f"swiglu: {e.name} not available, skipped")
    sys.exit(77)
from torch_case import write_case  # noqa: E402

D, FF, H, B, T = 16, 40, 4, 2, 5


class Gated(nn.Module):
    def __init__(self, gelu, bias):
        super().__init__()
        self.gelu = gelu
        self.fc1 = nn.Linear(D, FF, bias=bias)
        self.fc2 = nn.Linear(FF, D, bias=bias)
        self.fc3 = nn.Linear(D, FF, bias=bias)

    def forward(self, x):
        a = F.gelu(self.fc1(x), approximate="tanh") if self.gelu else F.silu(self.fc1(x))
        return self.fc2(a * self.fc3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.self_attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.norm2 = nn.LayerNorm(D)
        self.linear1 = nn.Linear(D, FF)
        self.linear2 = nn.Linear(FF, D)
        self.linear3 = nn.Linear(D, FF)

    def forward(self, x):
        h = self.norm1(x)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        x = x + self.self_attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        h = self.norm2(x)
        return x + self.linear2(F.silu(self.linear1(h)) * self.linear3(h))


def case(out, name, m, seed):
    write_case(out, name, m, seed, (B, T, D))


def main():
    out = sys.argv[1]
    case(out, "ff_swiglu", Gated(False, True), 1)
    case(out, "ff_geglu", Gated(True, False), 2)
    case(out, "block", Block(), 3)


if __name__ == "__main__":
    main()
