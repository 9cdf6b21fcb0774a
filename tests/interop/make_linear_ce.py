"""PyTorch's F.cross_entropy(h @ w.T + b, targets, ignore_index=,
label_smoothing=, reduction=) and its gradients, for tests/interop/check_linear_ce.c
(cgrad's fused linear cross-entropy, cg_linear_cross_entropy):

    /usr/bin/python3 make_linear_ce.py DIR   (exit 0: written; 77: no torch)

DIR/linear_ce.safetensors holds, for each case K: the inputs K.h, K.w, K.b
(absent: no bias), K.t (int64 targets), K.ls and K.ignore (one element
each), K.red (int64, one element: cg_reduction's 0 mean, 1 sum, 2 none)
and K.gw (the targets' shape: reduction none's upstream gradient, the
backward's of (loss * gw).sum()); PyTorch's float32 loss (none: one a
target, flat) and gradients K.loss32, K.dh32, K.dw32,
K.db32; and the same in float64, rounded to float32 once (K.loss64, ...),
the reference the bf16 products are bounded against. The loss alone:
K.x, the float32 logits [N, V] (h @ w.T + b), and F.cross_entropy of
them, K.ce32 and its gradient K.dx32 in float32, K.ce64 and K.dx64 in
float64. Written with make_dtype_files.save (the safetensors format
itself).
"""
import os
import sys

try:
    import torch
except ImportError:
    print("make_linear_ce: torch not available, skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dtype_files import save  # noqa: E402

# name: h's shape (d last), V, bias, label smoothing, ignore_index, ignored
# rows, reduction
CASES = {
    "plain": ((29, 24), 203, True, 0.0, -100, False, "mean"),
    "smooth_ignored": ((29, 24), 203, True, 0.1, 0, True, "mean"),
    "nobias_3d": ((3, 11, 40), 517, False, 0.1, -100, True, "mean"),
    "smooth_only": ((16, 32), 64, True, 0.2, -100, False, "mean"),
    "sum_smooth_ignored": ((29, 24), 203, True, 0.1, 0, True, "sum"),
    "sum_nobias": ((16, 32), 64, False, 0.0, -100, False, "sum"),
    "none_plain": ((29, 24), 203, True, 0.0, -100, False, "none"),
    "none_nobias_3d": ((3, 11, 40), 517, False, 0.1, -100, True, "none"),
    "none_smooth_ignored": ((2, 9, 16), 97, True, 0.2, 3, True, "none"),
}
REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def run(h, w, b, t, ls, ignore, red, gw, dtype):
    h, w = (x.detach().to(dtype).clone().requires_grad_() for x in (h, w))
    b = b.detach().to(dtype).clone().requires_grad_() if b is not None else None
    logits = h @ w.T + (b if b is not None else 0)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, w.shape[0]), t.reshape(-1),
                                             ignore_index=ignore, label_smoothing=ls,
                                             reduction=red)
    (loss * gw.to(dtype).reshape(-1)).sum().backward() if red == "none" else loss.backward()
    out = {"loss": loss.detach().reshape(-1), "dh": h.grad, "dw": w.grad}
    if b is not None:
        out["db"] = b.grad
    return out


def run_ce(x, t, ls, ignore, dtype):
    x = x.detach().to(dtype).clone().requires_grad_()
    loss = torch.nn.functional.cross_entropy(x, t.reshape(-1), ignore_index=ignore,
                                             label_smoothing=ls)
    loss.backward()
    return {"ce": loss.detach().reshape(1), "dx": x.grad}


def main(out):
    torch.manual_seed(0)
    tensors = {}
    for name, (hs, V, bias, ls, ignore, ignored, red) in CASES.items():
        h = torch.randn(hs)
        w = torch.randn(V, hs[-1]) * 0.3
        b = torch.randn(V) * 0.5 if bias else None
        t = torch.randint(0, V, hs[:-1], dtype=torch.int64)
        if ignored:
            t.view(-1)[::4] = ignore
        tensors.update({f"{name}.h": h, f"{name}.w": w, f"{name}.t": t,
                        f"{name}.ls": torch.tensor([ls]), f"{name}.ignore":
                        torch.tensor([ignore], dtype=torch.int64),
                        f"{name}.red": torch.tensor([REDUCTIONS[red]], dtype=torch.int64)})
        gw = torch.randn(hs[:-1])
        tensors[f"{name}.gw"] = gw
        if b is not None:
            tensors[f"{name}.b"] = b
        x = (h @ w.T + (b if b is not None else 0)).reshape(-1, V)
        tensors[f"{name}.x"] = x
        for bits, dtype in (("32", torch.float32), ("64", torch.float64)):
            outs = run(h, w, b, t, ls, ignore, red, gw, dtype)
            outs.update(run_ce(x, t, ls, ignore, dtype))
            for k, v in outs.items():
                tensors[f"{name}.{k}{bits}"] = v.detach().float().contiguous()
    save(f"{out}/linear_ce.safetensors", tensors)
    print(f"make_linear_ce: {len(CASES)} cases")


if __name__ == "__main__":
    main(sys.argv[1])
