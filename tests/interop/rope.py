"""Multi-head self-attention with rotary position embeddings in PyTorch,
written as Hugging Face's LLaMA computes them (rotate_half, cos/sin of
position * theta ** (-2i/dh), the frequencies repeated over both halves),
for tests/interop/check_rope.c (run by tests/interop/run_swiglu.sh):

    /usr/bin/python3 rope.py DIR    (exit 77: no torch)

Each case: DIR/CASE.safetensors, the module's state dict under cgrad's
MultiHeadAttention names (q_proj, k_proj, v_proj, o_proj); DIR/CASE.io.
safetensors, an input x, the causal self-attention's output y, weights r
of the loss sum(y * r) and the gradients of that loss: x's ("grad.x") and
every parameter's ("grad.NAME"). Float64 in PyTorch, saved as float32.

  rope        theta 10000 (RoFormer, LLaMA 1 and 2)
  rope_theta  theta 500000 (LLaMA 3), no biases
  gqa         grouped-query attention: 2 key/value heads for 4, no rotation
              (k and v heads repeated with repeat_interleave, as Hugging
              Face's repeat_kv)
  gqa_rope    multi-query (1 key/value head) with theta 10000
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    from torch import nn
except ImportError as e:
    print(f"rope: {e.name} not available, skipped")
    sys.exit(77)
from torch_case import write_case  # noqa: E402

D, H, B, T = 16, 4, 2, 7
DH = D // H


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class RopeAttention(nn.Module):
    def __init__(self, theta, bias, kv=H):
        super().__init__()
        self.theta, self.kv = theta, kv
        self.q_proj = nn.Linear(D, D, bias=bias)
        self.k_proj = nn.Linear(D, kv * DH, bias=bias)
        self.v_proj = nn.Linear(D, kv * DH, bias=bias)
        self.o_proj = nn.Linear(D, D, bias=bias)

    def forward(self, x):
        heads = lambda t, n: t.view(B, T, n, DH).transpose(1, 2)  # noqa: E731
        q = heads(self.q_proj(x), H)
        k, v = heads(self.k_proj(x), self.kv), heads(self.v_proj(x), self.kv)
        if self.theta:
            inv_freq = 1.0 / (self.theta ** (torch.arange(0, DH, 2, dtype=torch.float64) / DH))
            freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // self.kv, dim=1)
        v = v.repeat_interleave(H // self.kv, dim=1)
        s = q @ k.transpose(-1, -2) / DH ** 0.5
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        a = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
        return self.o_proj((a @ v).transpose(1, 2).reshape(B, T, D))


def case(out, name, m, seed):
    write_case(out, name, m, seed, (B, T, D))


def main():
    out = sys.argv[1]
    case(out, "rope", RopeAttention(10000.0, True), 1)
    case(out, "rope_theta", RopeAttention(500000.0, False), 2)
    case(out, "gqa", RopeAttention(0.0, True, 2), 3)
    case(out, "gqa_rope", RopeAttention(10000.0, True, 1), 4)


if __name__ == "__main__":
    main()
