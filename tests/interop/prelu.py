"""F.prelu, F.glu, F.pixel_shuffle, F.pixel_unshuffle, F.rrelu in
evaluation, nn.Softmin, nn.Softmax2d, nn.LogSoftmax and nn.PReLU: cases for
tests/interop/check_prelu.c (run by tests/interop/run_swiglu.sh):

    /usr/bin/python3 prelu.py DIR    (exit 77: no torch)

Each case DIR/NAME.safetensors holds x (and w for prelu), the op as int64
"cfg" = [kind, arg] (kind 0 prelu, 1 glu (arg the dim), 2 pixel_shuffle,
3 pixel_unshuffle (arg the factor), 4 rrelu in evaluation (its float32
"bounds" [lower, upper]), 5 nn.Softmin(arg), 6 nn.Softmax2d(), 7
nn.LogSoftmax(arg)), the output y of the op in float64 (inputs drawn in
float32), the weights r of the loss sum(y * r) and its gradients "grad.x"
(and "grad.w"). DIR/cases.txt lists the names. And DIR/module.safetensors,
the state dict of an nn.PReLU(3) (weight drawn N(0, 0.3^2)), with
DIR/module.io.safetensors: x, y, r, "grad.x" and "grad.weight"
(tests/interop/torch_case.py).
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    print(f"prelu: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402
from torch_case import write_case  # noqa: E402

# name, kind, arg, x's shape, the weight's elements (prelu; 0: 0-d)
CASES = [
    ("prelu_1d", 0, 0, (7,), 1),
    ("prelu_0d", 0, 0, (), 1),
    ("prelu_2d_c", 0, 0, (5, 3), 3),
    ("prelu_2d_one", 0, 0, (5, 3), 1),
    ("prelu_3d_w0d", 0, 0, (2, 4, 5), 0),
    ("prelu_4d_c", 0, 0, (2, 3, 4, 5), 3),
    ("prelu_4d_one", 0, 0, (3, 2, 3, 3), 1),
    ("glu_last", 1, -1, (4, 6), 0),
    ("glu_0", 1, 0, (4, 6), 0),
    ("glu_mid", 1, 1, (2, 8, 3), 0),
    ("glu_1d", 1, 0, (10,), 0),
    ("shuffle_2", 2, 2, (2, 8, 3, 4), 0),
    ("shuffle_3_unbatched", 2, 3, (9, 2, 3), 0),
    ("shuffle_2_5d", 2, 2, (2, 2, 4, 3, 2), 0),
    ("unshuffle_2", 3, 2, (2, 2, 4, 6), 0),
    ("unshuffle_3_unbatched", 3, 3, (1, 6, 3), 0),
    ("rrelu_eval", 4, 0, (4, 5, 3), 0),
    ("rrelu_eval_wide", 4, 1, (6, 7), 0),
    ("softmin_1", 5, 1, (3, 4, 5), 0),
    ("softmax2d_4d", 6, 0, (2, 3, 4, 5), 0),
    ("softmax2d_3d", 6, 0, (3, 4, 5), 0),
    ("log_softmax_last", 7, -1, (4, 6), 0),
]
BOUNDS = {0: (0.125, 1 / 3), 1: (-0.5, 0.75)}


def op(kind, arg, x, w, bounds):
    if kind == 0:
        return F.prelu(x, w)
    if kind == 1:
        return F.glu(x, arg)
    if kind == 2:
        return F.pixel_shuffle(x, arg)
    if kind == 3:
        return F.pixel_unshuffle(x, arg)
    if kind == 4:
        return F.rrelu(x, float(bounds[0]), float(bounds[1]), training=False)
    if kind == 5:
        return nn.Softmin(arg)(x)
    if kind == 6:
        return nn.Softmax2d()(x)
    return nn.LogSoftmax(arg)(x)


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(7)
    names = []
    for i, (name, kind, arg, shape, nw) in enumerate(CASES):
        x = torch.randn(shape, generator=g)
        if kind in (0, 4):  # away from the kink
            x = x + torch.where(x > 0, 0.2, -0.2)
        t = {"x": x, "cfg": torch.tensor([kind, arg], dtype=torch.int64)}
        xd = x.double().requires_grad_(True)
        wd = None
        if kind == 0:
            w = (torch.rand(max(nw, 1), generator=g) - 0.3).reshape(() if nw == 0 else (nw,))
            t["w"] = w
            wd = w.double().requires_grad_(True)
        bounds = None
        if kind == 4:
            bounds = torch.tensor(BOUNDS[arg], dtype=torch.float32)
            t["bounds"] = bounds
        y = op(kind, arg, xd, wd, None if bounds is None else bounds.double())
        r = torch.randn(y.shape, generator=g)
        (y * r.double()).sum().backward()
        t.update({"y": y.detach().float(), "r": r, "grad.x": xd.grad.float()})
        if wd is not None:
            t["grad.w"] = wd.grad.float()
        save(f"{out}/{name}.safetensors", {k: v.contiguous() for k, v in t.items()})
        names.append(name)
    with open(f"{out}/cases.txt", "w") as f:
        f.write("\n".join(names) + "\n")
    write_case(out, "module", nn.PReLU(3), 11, (2, 3, 4))


if __name__ == "__main__":
    main()
