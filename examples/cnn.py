# cnn.py: the PyTorch twin of cnn.c (run: python3 cnn.py [--steps N]).
# A small convolutional classifier (LeNet's shape): nn.Conv2d, nn.BatchNorm2d,
# ReLU and nn.MaxPool2d twice, nn.AdaptiveAvgPool2d to one value a channel,
# a linear head; cross-entropy and AdamW on 16 x 16 images of four shapes
# (a horizontal bar, a vertical bar, a square's outline, a diagonal) drawn
# at random places over noise, then evaluated in eval mode on images it has
# not seen. The images come from an integer hash that cnn.c computes too,
# and cnn.c draws the same initial weights from the same seed, so both
# print the same losses.
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F

S, B, CLASSES, EVAL = 16, 32, ("horizontal bar", "vertical bar", "square", "diagonal"), 512
steps = int(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == "--steps" else 200


def mix(x):  # a 32-bit integer hash (a xorshift-multiply mix)
    x = (x ^ (x >> 16)) * 0x45D9F3B & 0xFFFFFFFF
    x = (x ^ (x >> 16)) * 0x45D9F3B & 0xFFFFFFFF
    return x ^ (x >> 16)


def image(i):  # image i: its class i % 4, a shape of side 4..9 at a place from the hash
    c, h = i % 4, mix(i + 1)
    n = 4 + h % 6
    r, q = (h >> 8) % (S - n + 1), (h >> 16) % (S - n + 1)
    px = [[(mix(i * S * S + y * S + x + 7) & 0xFF) / 1024.0 for x in range(S)] for y in range(S)]
    for k in range(n):
        for y, x in ((r + n // 2, q + k), (r + k, q + n // 2), (r, q + k), (r + k, q + k))[c:c + 1]:
            px[y][x] += 1.0
        if c == 2:  # the square's other three sides
            for y, x in ((r + n - 1, q + k), (r + k, q), (r + k, q + n - 1)):
                px[y][x] += 1.0
    return [[min(v, 1.0) for v in row] for row in px], c


def batch(ids):  # [n, 1, S, S] images and [n] labels
    xs, ys = zip(*(image(i) for i in ids))
    return torch.tensor(xs).unsqueeze(1), torch.tensor(ys)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.head = nn.Linear(16, len(CLASSES))

    def forward(self, x):  # [n, 1, S, S] -> logits [n, 4]
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))


torch.manual_seed(1)
model = CNN()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
first = None
for step in range(steps):
    x, y = batch(range(step * B, (step + 1) * B))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    first = first or loss.item()
    if step < 20 or step % 50 == 0 or step == steps - 1:
        print(f"step {step:3d} loss {loss.item():.6f}")

model.eval()  # BatchNorm normalises with its running statistics
with torch.no_grad():
    x, y = batch(range(1 << 20, (1 << 20) + EVAL))  # images no step has seen
    right = (model(x).argmax(1) == y).sum().item()
print(f"held-out accuracy {right / EVAL:.4f} ({right} of {EVAL} images)")
assert loss.item() < first and (steps < 200 or right / EVAL > 0.9)
