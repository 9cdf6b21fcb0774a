# gru.py: the PyTorch twin of gru.c (run: python3 gru.py [--steps N]).
# A character-level language model: an embedding, a two-layer nn.GRU, a
# linear head and cross-entropy, trained with AdamW and gradient clipping
# on a paragraph of Moby-Dick, then sampled. gru.c draws the same initial
# weights from the same seed, so both print the same losses.
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, E, H, L = 16, 32, 32, 64, 2
steps = int(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == "--steps" else 300
text = (
    "Call me Ishmael. Some years ago--never mind how long precisely--having little or no "
    "money in my purse, and nothing particular to interest me on shore, I thought I would "
    "sail about a little and see the watery part of the world. It is a way I have of driving "
    "off the spleen and regulating the circulation. Whenever I find myself growing grim about "
    "the mouth; whenever it is a damp, drizzly November in my soul; whenever I find myself "
    "involuntarily pausing before coffin warehouses, and bringing up the rear of every "
    "funeral I meet; and especially whenever my hypos get such an upper hand of me, that it "
    "requires a strong moral principle to prevent me from deliberately stepping into the "
    "street, and methodically knocking people's hats off--then, I account it high time to "
    "get to sea as soon as I can. This is my substitute for pistol and ball. ")
chars = sorted(set(text))
V, n = len(chars), len(text)
data = torch.tensor([chars.index(c) for c in text])
torch.manual_seed(1)


class CharGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.gru = nn.GRU(E, H, L, batch_first=True)
        self.head = nn.Linear(H, V)

    def forward(self, ids, h=None):
        out, h = self.gru(self.emb(ids), h)
        return self.head(out), h


model = CharGRU()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
first = None
for step in range(steps):
    at = [(step * B + i) * 97 % (n - T) for i in range(B)]  # a fixed walk through the text
    x = torch.stack([data[a:a + T] for a in at])
    y = torch.stack([data[a + 1:a + T + 1] for a in at])
    loss = F.cross_entropy(model(x)[0].reshape(-1, V), y.reshape(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    first = first or loss.item()
    if step < 20 or step % 50 == 0 or step == steps - 1:
        print(f"step {step:3d} loss {loss.item():.6f}")

with torch.no_grad():
    out, h = "C", None
    idx = torch.tensor([[chars.index("C")]])
    for _ in range(80):
        logits, h = model(idx, h)
        idx = torch.multinomial(F.softmax(logits[0, -1] / 0.8, -1), 1).view(1, 1)
        out += chars[idx.item()]
print("sample:", out)
assert loss.item() < first and (steps < 300 or loss.item() < 1.0)
