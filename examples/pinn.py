# pinn.py: the PyTorch twin of pinn.c (run: python3 pinn.py [--steps N]).
# A tanh network u(x) learns u'' = -sin(x) on [0, pi] with u(0) = u(pi) = 0
# (its solution: sin x) through gradients of gradients.
import argparse
import math
import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=1500)
steps = ap.parse_args().steps
torch.manual_seed(1)
H = 24
net = nn.Sequential(nn.Linear(1, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(), nn.Linear(H, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
x = (math.pi * (torch.arange(64) + 0.5) / 64).unsqueeze(1).requires_grad_(True)
ends = torch.tensor([[0.0], [math.pi]])


def d_dx(f):
    return torch.autograd.grad(f.sum(), x, create_graph=True)[0]


for step in range(1, steps + 1):
    uxx = d_dx(d_dx(net(x)))
    loss = ((uxx + torch.sin(x)) ** 2).mean() + (net(ends) ** 2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if steps <= 100 or step % 250 == 0 or step == steps:
        print(f"step {step} loss {loss.item():.6f}")
grid = torch.linspace(0, math.pi, 101).unsqueeze(1)
with torch.no_grad():
    print(f"largest |u(x) - sin(x)| on [0, pi]: {(net(grid) - torch.sin(grid)).abs().max():.4f}")
