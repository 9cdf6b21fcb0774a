# bert_classifier.py: the PyTorch twin of bert_classifier.c (run: python3 bert_classifier.py).
# A BERT-style classifier on sentences of varying length: a [CLS] token in
# front, each batch padded to its longest with a padding mask (pad_sequence
# in the DataLoader's collate_fn), a Transformer encoder, and the [CLS]
# position's output classified. The task: does token 2 occur more often
# than token 3?
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

CLS, PAD, V, D, H, N, NT, BATCH, EPOCHS = 0, 1, 8, 32, 4, 600, 200, 32, 20
torch.manual_seed(1)


def sentences(n):
    xs, ys = [], []
    while len(xs) < n:
        s = torch.randint(2, V, (int(torch.randint(3, 16, ())),))
        a, b = (s == 2).sum(), (s == 3).sum()
        if a != b:
            xs.append(torch.cat([torch.tensor([CLS]), s]))
            ys.append(int(a > b))
    return list(zip(xs, ys))


def collate(batch):
    x = pad_sequence([s for s, _ in batch], batch_first=True, padding_value=PAD)
    return x, x == PAD, torch.tensor([y for _, y in batch])


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(16, D)
        layer = nn.TransformerEncoderLayer(D, H, 4 * D, 0.0, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.head = nn.Linear(D, 2)

    def forward(self, x, pad):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.enc(h, src_key_padding_mask=pad)[:, 0])  # the [CLS] position


train, test = sentences(N), sentences(NT)
model = Classifier()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(EPOCHS):
    for x, pad, y in DataLoader(train, batch_size=BATCH, shuffle=True, collate_fn=collate):
        loss = F.cross_entropy(model(x, pad), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    x, pad, y = collate(test)
    acc = (model(x, pad).argmax(1) == y).float().mean().item()
print(f"held-out accuracy {acc:.3f}")
assert acc > 0.9
