# langid.py: the PyTorch twin of langid.c
# (run: python3 langid.py [--steps N] [--data FILE] [--predict TEXT]...).
# English or German? A bidirectional nn.GRU reads a sentence's bytes, its
# last states (forward and reverse) go to a linear head; cross-entropy,
# AdamW and gradient clipping on the pairs of data/en_de_ding.tsv, every
# tenth line held out. The batches are padded and packed
# (pack_padded_sequence, enforce_sorted=False). langid.c draws the same
# initial weights from the same seed and takes the same batches, so both
# print the same losses.
import argparse
import os
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

B, E, H, MAXLEN, EVAL_B, STRIDE = 32, 32, 64, 64, 256, 9973
language = ["English", "German"]
mine = ["Where is the station?", "Wo ist der Bahnhof?", "I would like a cup of coffee.",
        "Ich hätte gern eine Tasse Kaffee."]
ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--data", default="data/en_de_ding.tsv")
ap.add_argument("--predict", action="append", metavar="TEXT")
args = ap.parse_args()

train, valid = [], []  # (bytes, label): line i's English (0) and German (1)
with open(args.data, "rb") as f:
    pairs = [line.split(b"\t", 1) for line in f.read().split(b"\n") if line]
for i, (en, de) in enumerate(pairs):
    (valid if i % 10 == 9 else train).extend([(en[:MAXLEN], 0), (de[:MAXLEN], 1)])


def batch(sentences):  # ids [n, T] padded with 0, lengths [n], labels [n]
    ids = pad_sequence([torch.tensor(list(s)) for s, _ in sentences], batch_first=True)
    lengths = torch.tensor([len(s) for s, _ in sentences])
    return ids, lengths, torch.tensor([c for _, c in sentences])


class LangID(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, E)
        self.gru = nn.GRU(E, H, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * H, 2)

    def forward(self, ids, lengths):
        x = pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(x)  # [2, n, H]: forward, reverse
        return self.head(torch.cat([h_n[0], h_n[1]], 1))


torch.manual_seed(1)
model = LangID()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(args.steps):
    ids, lengths, labels = batch([train[(step * B + i) * STRIDE % len(train)] for i in range(B)])
    loss = F.cross_entropy(model(ids, lengths), labels)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    if step < 20 or step % 50 == 0 or step == args.steps - 1:
        print(f"step {step:3d} loss {loss.item():.6f}")

with torch.no_grad():
    right = 0
    for at in range(0, len(valid), EVAL_B):
        ids, lengths, labels = batch(valid[at:at + EVAL_B])
        right += (model(ids, lengths).argmax(1) == labels).sum().item()
    print(f"validation accuracy {right / len(valid):.4f} ({right} of {len(valid)} sentences)")
    assert args.steps < 300 or right / len(valid) > 0.9  # 0.994 after the default 400 steps
    for text in args.predict or mine:
        ids, lengths, _ = batch([(os.fsencode(text)[:MAXLEN], 0)])
        p = F.softmax(model(ids, lengths), 1)[0]
        c = int(p[1] > p[0])
        print(f"{language[c]:<7s} {p[c].item():.3f}  {text}")
