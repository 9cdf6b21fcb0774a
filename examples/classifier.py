# classifier.py: the PyTorch twin of classifier.c (run: python3 classifier.py).
# An MLP on three interleaved spirals, trained with SGD + momentum, then
# Adam, on shuffled mini-batches; accuracy on a held-out set without a graph.
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

N, K, BATCH = 100, 3, 32  # points per class, classes
torch.manual_seed(1)


def spirals():
    r = torch.arange(N * K) % N / N
    k = torch.arange(N * K) // N
    t = k * 2 * math.pi / K + r * 4 + torch.randn(N * K) * 0.2
    return torch.stack([r * torch.sin(t), r * torch.cos(t)], 1), k


x, y = spirals()
xt, yt = spirals()
model = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, K))


def train(opt, epochs):
    for _ in range(epochs):
        for idx in torch.randperm(N * K).split(BATCH):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()


def accuracy():
    with torch.no_grad():
        return (model(xt).argmax(1) == yt).float().mean().item()


train(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), 100)
print(f"SGD + momentum: held-out accuracy {accuracy():.3f}")
train(torch.optim.Adam(model.parameters(), lr=1e-3), 100)
print(f"then Adam:      held-out accuracy {accuracy():.3f}")
assert accuracy() > 0.9
