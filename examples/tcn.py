# tcn.py: the PyTorch twin of tcn.c (run: python3 tcn.py [--steps N]).
# A character-level language model made of convolutions (a temporal
# convolutional network, as WaveNet's and Bai et al.'s): an embedding, a
# 1x1 nn.Conv1d, four residual blocks of a causal nn.Conv1d (kernel 3,
# dilation 1, 2, 4, 8: each character sees the 31 before it), nn.BatchNorm1d
# and ReLU, and a 1x1 convolution to the logits; cross-entropy, AdamW and
# gradient clipping on a paragraph of Moby-Dick (gru.py's), then sampled in eval mode
# (BatchNorm's running statistics). tcn.c draws the same initial weights
# from the same seed, so both print the same losses.
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, E, C, K, DILATIONS = 16, 64, 32, 64, 3, (1, 2, 4, 8)
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


class Block(nn.Module):  # h + relu(bn(conv(h padded on the left)))
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.conv = nn.Conv1d(C, C, K, dilation=d)
        self.bn = nn.BatchNorm1d(C)

    def forward(self, h):
        return h + F.relu(self.bn(self.conv(F.pad(h, ((K - 1) * self.d, 0)))))


class CharTCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.inp = nn.Conv1d(E, C, 1)
        self.blocks = nn.ModuleList([Block(d) for d in DILATIONS])
        self.head = nn.Conv1d(C, V, 1)

    def forward(self, ids):  # [b, t] -> logits [b, V, t]
        h = self.inp(self.emb(ids).transpose(1, 2))
        for block in self.blocks:
            h = block(h)
        return self.head(h)


model = CharTCN()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
first = None
for step in range(steps):
    at = [(step * B + i) * 97 % (n - T) for i in range(B)]  # a fixed walk through the text
    x = torch.stack([data[a:a + T] for a in at])
    y = torch.stack([data[a + 1:a + T + 1] for a in at])
    loss = F.cross_entropy(model(x), y)  # the class dim is 1 here
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    first = first or loss.item()
    if step < 20 or step % 50 == 0 or step == steps - 1:
        print(f"step {step:3d} loss {loss.item():.6f}")

model.eval()  # BatchNorm normalises with its running statistics
with torch.no_grad():
    out = "Call me"
    for _ in range(80):
        ids = torch.tensor([[chars.index(c) for c in out[-T:]]])
        p = F.softmax(model(ids)[0, :, -1] / 0.8, -1)
        out += chars[torch.multinomial(p, 1).item()]
print("sample:", out)
assert loss.item() < first and (steps < 300 or loss.item() < 1.0)
