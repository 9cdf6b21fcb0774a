# gpt.py: the PyTorch twin of gpt.c (run: python3 gpt.py).
# A GPT-2-style model (learned positions, pre-LayerNorm blocks, causal
# attention, GELU MLP, tied head), AdamW with warmup + cosine, clipping and
# gradient accumulation on a small text, sampled, saved and reloaded.
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, D, H, L, STEPS, ACCUM, WARMUP = 8, 32, 64, 4, 2, 150, 2, 15
text = "the quick brown fox jumps over the lazy dog. " * 40
chars = sorted(set(text))
V = len(chars)
data = torch.tensor([chars.index(c) for c in text])
torch.manual_seed(1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.tok.weight.T  # tied head


def get_batch():
    ix = torch.randint(len(data) - T, (B,))
    return torch.stack([data[i:i + T] for i in ix]), torch.stack([data[i + 1:i + T + 1] for i in ix])


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(STEPS):
    r = (step - WARMUP) / (STEPS - WARMUP)
    lr = 3e-3 * (step + 1) / WARMUP if step < WARMUP else 3e-4 + 0.5 * (1 + math.cos(math.pi * r)) * 2.7e-3
    for g in opt.param_groups:
        g["lr"] = lr
    for _ in range(ACCUM):
        x, y = get_batch()
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1)) / ACCUM
        loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
print(f"loss {loss.item() * ACCUM:.3f}")

idx = torch.tensor([[chars.index("t")]])
with torch.no_grad():
    while idx.shape[1] < T:
        logits = model(idx)[:, -1] / 0.8
        kth = torch.topk(logits, 10).values[:, -1:]
        logits[logits < kth] = -float("inf")
        idx = torch.cat([idx, torch.multinomial(F.softmax(logits, -1), 1)], 1)
    print("sample:", "".join(chars[i] for i in idx[0]))
    torch.save(model.state_dict(), "gpt.pt")
    again = GPT()
    again.load_state_dict(torch.load("gpt.pt"))  # (no dropout: train and eval mode are the same)
    same = torch.equal(again(idx), model(idx))
print("reloaded logits identical:", same)
assert same and loss.item() * ACCUM < 1.0
