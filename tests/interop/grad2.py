"""Gradients of gradients (torch.autograd.grad with create_graph): cases
for tests/interop/check_grad2.c (run by tests/interop/run_swiglu.sh):

    /usr/bin/python3 grad2.py DIR    (exit 77: no torch)

Each case DIR/NAME.safetensors holds its inputs and what PyTorch 1.13
computes from them in float32; DIR/cases.txt lists the names:
  hvp_mlp     a Hessian-vector product of a tanh network's cross-entropy
              (label smoothing, class weights), every parameter;
  penalty     WGAN-GP's gradient penalty of a leaky-ReLU critic, its
              gradient in every parameter;
  pinn        a physics-informed loss, mean((u'' + sin x)^2) for a tanh
              network u, with u'' by two create_graph gradients;
  maml        one inner SGD step taken with create_graph (ReLU network, MSE),
              the outer loss's gradient in the initial weights;
  attention   causal attention's Hessian-vector product in q, k and v;
  block       layer norm, exact GELU and a linear layer into log-softmax:
              the gradient of the input's gradient norm in every weight;
  conv_gp     WGAN-GP's penalty of a convolutional critic (a strided,
              padded convolution, leaky ReLU, a grouped one with a max
              pool, flattened into a linear layer).
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"grad2: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

grad = torch.autograd.grad


def leaves(d):
    return {k: v.clone().requires_grad_(True) for k, v in d.items()}


def hvp_mlp(g):
    d = {"x": torch.randn(4, 5, generator=g), "w1": torch.randn(6, 5, generator=g),
         "b1": torch.randn(6, generator=g), "w2": torch.randn(3, 6, generator=g),
         "cw": torch.rand(3, generator=g) + 0.5}
    p = leaves({k: d[k] for k in ("w1", "b1", "w2")})
    t = torch.tensor([0, 2, 1, 2])
    vs = {k: torch.randn(v.shape, generator=g) for k, v in p.items()}
    h = torch.tanh(F.linear(d["x"], p["w1"], p["b1"]))
    loss = F.cross_entropy(F.linear(h, p["w2"]), t, weight=d["cw"], label_smoothing=0.1)
    gs = grad(loss, list(p.values()), create_graph=True)
    gv = sum((gi * vs[k]).sum() for gi, k in zip(gs, p))
    hv = grad(gv, list(p.values()))
    out = dict(d, t=t)
    out.update({"v." + k: v for k, v in vs.items()})
    out.update({"g." + k: gi.detach() for gi, k in zip(gs, p)})
    out.update({"hv." + k: hi for hi, k in zip(hv, p)})
    return out


def penalty(g):
    d = {"x": torch.randn(5, 4, generator=g), "w1": torch.randn(8, 4, generator=g),
         "b1": torch.randn(8, generator=g), "w2": torch.randn(1, 8, generator=g)}
    p = leaves({k: d[k] for k in ("w1", "b1", "w2")})
    x = d["x"].clone().requires_grad_(True)
    out = F.linear(F.leaky_relu(F.linear(x, p["w1"], p["b1"]), 0.2), p["w2"])
    (gx,) = grad(out.sum(), x, create_graph=True)
    gp = ((gx.norm(2, dim=1) - 1) ** 2).mean()
    gs = grad(gp, list(p.values()), allow_unused=True)
    r = dict(d, gp=gp.detach())
    r.update({"grad." + k: (gi if gi is not None else torch.zeros_like(p[k]))
              for gi, k in zip(gs, p)})
    return r


def pinn(g):
    d = {"x": torch.rand(6, 1, generator=g) * 3, "w1": torch.randn(8, 1, generator=g),
         "b1": torch.randn(8, generator=g), "w2": torch.randn(1, 8, generator=g),
         "b2": torch.randn(1, generator=g)}
    p = leaves({k: d[k] for k in ("w1", "b1", "w2", "b2")})
    x = d["x"].clone().requires_grad_(True)
    u = F.linear(torch.tanh(F.linear(x, p["w1"], p["b1"])), p["w2"], p["b2"])
    (ux,) = grad(u.sum(), x, create_graph=True)
    (uxx,) = grad(ux.sum(), x, create_graph=True)
    loss = ((uxx + torch.sin(x)) ** 2).mean()
    gs = grad(loss, list(p.values()), allow_unused=True)  # b2: u'' does not depend on it
    r = dict(d, loss=loss.detach(), uxx=uxx.detach())
    r.update({"grad." + k: gi for gi, k in zip(gs, p) if gi is not None})
    return r


def maml(g):
    d = {"xa": torch.randn(4, 3, generator=g), "ya": torch.randn(4, 2, generator=g),
         "xb": torch.randn(4, 3, generator=g), "yb": torch.randn(4, 2, generator=g),
         "w1": torch.randn(5, 3, generator=g), "w2": torch.randn(2, 5, generator=g)}
    p = leaves({k: d[k] for k in ("w1", "w2")})

    def net(w1, w2, x):
        return F.linear(F.relu(F.linear(x, w1)), w2)

    la = F.mse_loss(net(p["w1"], p["w2"], d["xa"]), d["ya"])
    ga = grad(la, [p["w1"], p["w2"]], create_graph=True)
    w1, w2 = p["w1"] - 0.1 * ga[0], p["w2"] - 0.1 * ga[1]
    lb = F.mse_loss(net(w1, w2, d["xb"]), d["yb"])
    gs = grad(lb, [p["w1"], p["w2"]])
    r = dict(d, loss=lb.detach())
    r.update({"grad.w1": gs[0], "grad.w2": gs[1]})
    return r


def attention(g):
    d = {k: torch.randn(1, 2, 3, 4, generator=g) for k in ("q", "k", "v", "r", "vq", "vk", "vv")}
    p = leaves({k: d[k] for k in ("q", "k", "v")})
    s = p["q"] @ p["k"].transpose(-1, -2) / 2.0
    s = s.masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.softmax(s, -1) @ p["v"]
    gs = grad((y * d["r"]).sum(), list(p.values()), create_graph=True)
    gv = (gs[0] * d["vq"]).sum() + (gs[1] * d["vk"]).sum() + (gs[2] * d["vv"]).sum()
    hv = grad(gv, list(p.values()))
    r = dict(d, y=y.detach())
    r.update({"hv." + k: hi for hi, k in zip(hv, p)})
    return r


def block(g):
    d = {"x": torch.randn(3, 4, generator=g), "lw": torch.randn(4, generator=g),
         "lb": torch.randn(4, generator=g), "w": torch.randn(5, 4, generator=g),
         "b": torch.randn(5, generator=g)}
    p = leaves({k: d[k] for k in ("lw", "lb", "w", "b")})
    x = d["x"].clone().requires_grad_(True)
    h = F.gelu(F.layer_norm(x, (4,), p["lw"], p["lb"], 1e-5))
    y = F.log_softmax(F.linear(h, p["w"], p["b"]), -1)
    (gx,) = grad(y[:, 0].sum(), x, create_graph=True)
    n = (gx * gx).sum()
    gs = grad(n, list(p.values()))
    r = dict(d, n=n.detach())
    r.update({"grad." + k: gi for gi, k in zip(gs, p)})
    return r


def conv_gp(g):
    d = {"x": torch.randn(2, 2, 8, 8, generator=g), "c1": torch.randn(4, 2, 3, 3, generator=g) * 0.3,
         "b1": torch.randn(4, generator=g), "c2": torch.randn(4, 2, 3, 3, generator=g) * 0.3,
         "w": torch.randn(1, 16, generator=g) * 0.3}
    p = leaves({k: d[k] for k in ("c1", "b1", "c2", "w")})
    x = d["x"].clone().requires_grad_(True)
    h = F.leaky_relu(F.conv2d(x, p["c1"], p["b1"], stride=2, padding=1), 0.2)
    h = F.max_pool2d(torch.tanh(F.conv2d(h, p["c2"], padding=1, groups=2)), 2)
    out = F.linear(h.flatten(1), p["w"])
    (gx,) = grad(out.sum(), x, create_graph=True)
    gp = ((gx.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
    gs = grad(gp, list(p.values()))
    r = dict(d, gp=gp.detach())
    r.update({"grad." + k: gi for gi, k in zip(gs, p)})
    return r


CASES = {"hvp_mlp": hvp_mlp, "penalty": penalty, "pinn": pinn, "maml": maml,
         "attention": attention, "block": block, "conv_gp": conv_gp}


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(1213)
    for name, f in CASES.items():
        save(f"{out}/{name}.safetensors", {k: v.contiguous() for k, v in f(g).items()})
    with open(f"{out}/cases.txt", "w") as f:
        f.write("\n".join(CASES) + "\n")


if __name__ == "__main__":
    main()
