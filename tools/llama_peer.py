"""PyTorch's training step on a LLaMA-style char LM: the peer of `bench --arch llama`.

  build/tools/bench --model charlm --preset base --arch llama --threads 2 --steps 20 --warmup 5
  /usr/bin/python3 tools/llama_peer.py --preset base --threads 2 --steps 20 --warmup 5 [--amp bf16]

shared/bench/torch_peer.py times the GPT-2 block of ../shared/reference/models.py;
this times LLaMA's, as bench --arch llama builds it in cgrad: pre-norm RMSNorm
(eps 1e-5, a weight, no bias), rotary positions on q and k (theta 10000, the
rotate-half pairing of GPT-NeoX and LLaMA), a SwiGLU feed-forward fc2(silu(fc1 x)
* fc3 x) of 2/3 the preset's d_ff rounded to 64 (the same parameter count), no
biases, a final RMSNorm and the output head tied to the embedding. Attention is
written out as models.py's is (scores, causal mask, softmax, weighted sum: the
PyTorch of Debian bookworm, 1.13, has no scaled_dot_product_attention). The step,
the optimizer and the JSON line are torch_peer.py's: zero_grad + forward + loss +
backward + AdamW (lr 1e-3, betas 0.9/0.98, eps 1e-9, weight decay 0.01) on random
tokens, --amp bf16 under torch.autocast("cpu", dtype=torch.bfloat16).
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# torch_peer.py's charlm presets (B, T, vocab, d, H, layers, the GPT block's d_ff)
PRESETS = {
    "tiny": dict(B=12, T=64, vocab=65, d=128, H=4, layers=4, d_ff=512),
    "base": dict(B=16, T=256, vocab=65, d=384, H=6, layers=6, d_ff=1536),
    "gpt2": dict(B=4, T=256, vocab=50257, d=768, H=12, layers=12, d_ff=3072),
}


def swiglu_width(d_ff):
    """bench's: 2/3 of the GPT block's width, to the nearest multiple of 64."""
    return (d_ff * 2 // 3 + 32) // 64 * 64


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(T, dh, theta=10000.0):
    inv = theta ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, d, H, d_ff):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.fc1 = nn.Linear(d, d_ff, bias=False)  # the gate
        self.fc3 = nn.Linear(d, d_ff, bias=False)  # the up projection
        self.fc2 = nn.Linear(d_ff, d, bias=False)

    def forward(self, x, mask, cos, sin):
        B, T, d = x.shape
        dh = d // self.H
        h = self.ln1(x)

        def heads(t):
            return t.view(B, T, self.H, dh).transpose(1, 2)

        q = rotate(heads(self.q_proj(h)), cos, sin)
        k = rotate(heads(self.k_proj(h)), cos, sin)
        v = heads(self.v_proj(h))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        w = F.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        x = x + self.o_proj((w @ v).transpose(1, 2).reshape(B, T, d))
        h = self.ln2(x)
        return x + self.fc2(F.silu(self.fc1(h)) * self.fc3(h))


class LlamaCharLM(nn.Module):
    def __init__(self, vocab, d, H, layers, d_ff, T):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, H, d_ff) for _ in range(layers)])
        self.ln_f = RMSNorm(d)
        cos, sin = rope_tables(T, d // H)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1),
                             persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, x, targets):
        T = x.shape[1]
        h = self.tok_emb(x)
        for b in self.blocks:
            h = b(h, self.mask[:T, :T], self.cos[:T], self.sin[:T])
        logits = F.linear(self.ln_f(h), self.tok_emb.weight)  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=PRESETS, default="tiny")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--amp", choices=["off", "bf16"], default="off",
                    help="bf16: autocast forward and loss to bfloat16 (fp32 weights)")
    args = ap.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("need --threads >= 1, --steps >= 1, --warmup >= 0")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    p = PRESETS[args.preset]
    B, T = p["B"], p["T"]
    model = LlamaCharLM(p["vocab"], p["d"], p["H"], p["layers"], swiglu_width(p["d_ff"]), T)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=0.01)
    batches = [(torch.randint(0, p["vocab"], (B, T)), torch.randint(0, p["vocab"], (B, T)))
               for _ in range(4)]
    times = []
    for i in range(args.warmup + args.steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            loss = model(x, y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(dt)
    if not torch.isfinite(loss):
        sys.exit(f"llama_peer: non-finite loss {loss.item()}")
    med = statistics.median(times)
    print(json.dumps({
        "model": "charlm", "preset": args.preset, "arch": "llama", "threads": args.threads,
        "tokens_per_step": B * T, "step_ms_median": round(med * 1e3, 3),
        "tokens_per_s": round(B * T / med, 1),
        "params": sum(q.numel() for q in model.parameters()),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "precision": "fp32" if args.amp == "off" else args.amp,
        "final_loss": round(float(loss), 6),
    }))


if __name__ == "__main__":
    main()
