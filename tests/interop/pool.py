"""Pooling and batch normalisation against PyTorch: cases for
tests/interop/check_pool.c (run by tests/interop/run_swiglu.sh, the meson
test torch_pool):

    /usr/bin/python3 pool.py DIR    (exit 77: no torch)

DIR/pools.safetensors: case I's "I.cfg" (int64: op 0 max, 1 avg, 2
adaptive max, 3 adaptive avg; spatial dims; kernel_size, stride (0: None),
padding, dilation, two each; ceil_mode, count_include_pad,
divisor_override (0: None), the adaptive output sizes), its input "I.x",
the weights "I.r" of the loss sum(y * r), and PyTorch's output "I.y",
indices "I.idx" (max) and gradient "I.gx", computed in float64 from the
float32 inputs. Random options over every argument (the ones PyTorch
refuses left out), batched and unbatched, and inputs of small integers
(ties: the indices must be PyTorch's).

DIR/bn_NAME.safetensors (a module's state dict, float32 values and int64
num_batches_tracked, as PyTorch names them) and DIR/bn_NAME.io.safetensors:
"cfg" (spatial dims, C, affine, track_running_stats, momentum * 1000 (-1:
None)), three training steps' "xK", "rK", "yK", "gxK", "gwK", "gbK", then
eval's "xe", "ye", and the buffers after it all, "final.NAME".
"""
import random
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("pool: torch not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

torch.manual_seed(0)
rng = random.Random(0)


def f32(*shape, ints=False):
    if ints:
        return torch.randint(0, 3, shape).double()
    return torch.randn(*shape).float().double()


def run_pool(op, nd, o, x):
    k, s, p, d = o["k"][:nd], o["s"][:nd], o["p"][:nd], o["d"][:nd]
    stride = None if s[0] == 0 else s
    if op == 0:
        fn = F.max_pool1d if nd == 1 else F.max_pool2d
        return fn(x, k, stride, p, d, o["ceil"], return_indices=True)
    if op == 1:
        if nd == 1:
            return F.avg_pool1d(x, k, stride, p, o["ceil"], o["cip"]), None
        return F.avg_pool2d(x, k, stride, p, o["ceil"], o["cip"], o["div"] or None), None
    out = o["out"][:nd]
    if op == 2:
        fn = F.adaptive_max_pool1d if nd == 1 else F.adaptive_max_pool2d
        return fn(x, out, return_indices=True)
    fn = F.adaptive_avg_pool1d if nd == 1 else F.adaptive_avg_pool2d
    return fn(x, out), None


def pools(out):
    t, n = {}, 0
    while n < 120:
        op, nd = n % 4, 1 + (n // 4) % 2
        batched, ints = rng.random() < 0.6, op in (0, 2) and rng.random() < 0.3
        k = [rng.randint(1, 4), rng.randint(1, 4)]
        o = {"k": k, "s": [rng.choice([0, 1, 2, 3]), 0], "p": [rng.randint(0, ki // 2) for ki in k],
             "d": [rng.randint(1, 2) if op == 0 else 1 for _ in k], "ceil": rng.random() < 0.5,
             "cip": rng.random() < 0.5, "div": rng.choice([0, 0, 2, 5]) if op == 1 and nd == 2 else 0,
             "out": [rng.randint(1, 7), rng.randint(1, 7)]}
        o["s"][1] = 0 if o["s"][0] == 0 else rng.randint(1, 3)
        spatial = [rng.randint(3, 9) for _ in range(nd)]
        shape = ([2] if batched else []) + [3] + spatial
        x = f32(*shape, ints=ints)
        xg = x.clone().requires_grad_(True)
        try:
            y, idx = run_pool(op, nd, o, xg)
        except RuntimeError:
            continue
        r = f32(*y.shape)
        (y * r).sum().backward()
        cfg = [op, nd] + o["k"] + o["s"] + o["p"] + o["d"] + [int(o["ceil"]), int(o["cip"]), o["div"]] + o["out"]
        t[f"{n}.cfg"] = torch.tensor(cfg, dtype=torch.int64)
        t[f"{n}.x"], t[f"{n}.r"] = x.float(), r.float()
        t[f"{n}.y"], t[f"{n}.gx"] = y.detach().float(), xg.grad.float()
        if idx is not None:
            t[f"{n}.idx"] = idx
        n += 1
    save(f"{out}/pools.safetensors", t)
    print(f"pool: {n} pooling cases")


def module_steps(m, shape, affine, io):
    """Three training steps of m on random x of shape, each's x, r (the
    loss sum(y * r)), y and gradients into io, then eval's xe and ye and
    the state dict after it all as "final.NAME" (the norm twins' modules)."""
    for step in range(3):
        x = f32(*shape).requires_grad_(True)
        y = m(x)
        r = f32(*shape)
        (y * r).sum().backward()
        io.update({f"x{step}": x.detach().float(), f"r{step}": r.float(), f"y{step}": y.detach().float(),
                   f"gx{step}": x.grad.float()})
        if affine:
            io[f"gw{step}"], io[f"gb{step}"] = m.weight.grad.float(), m.bias.grad.float()
            m.weight.grad, m.bias.grad = None, None
    m.eval()
    xe = f32(*shape)
    io["xe"], io["ye"] = xe.float(), m(xe).detach().float()
    for k, v in m.state_dict().items():
        io[f"final.{k}"] = v.float() if v.is_floating_point() else v


BN = [  # name, spatial, C, shape, affine, track, momentum (None: cumulative)
    ("bn1d", 1, 4, (5, 4, 3), True, True, 0.1),
    ("bn1d_2d", 1, 3, (6, 3), True, True, None),
    ("bn2d", 2, 3, (2, 3, 4, 5), True, True, 0.1),
    ("bn2d_plain", 2, 2, (3, 2, 2, 3), False, True, 0.3),
    ("bn1d_notrack", 1, 3, (4, 3, 2), True, False, 0.1),
]


def batchnorms(out):
    for name, sp, C, shape, affine, track, mom in BN:
        cls = torch.nn.BatchNorm1d if sp == 1 else torch.nn.BatchNorm2d
        m = cls(C, momentum=mom, affine=affine, track_running_stats=track).double()
        with torch.no_grad():
            if affine:
                m.weight.copy_(f32(C)), m.bias.copy_(f32(C))
            if track:
                m.running_mean.copy_(f32(C)), m.running_var.copy_(torch.rand(C).float().double() + 0.5)
                m.num_batches_tracked.fill_(2)
        sd = {k: (v.float() if v.is_floating_point() else v) for k, v in m.state_dict().items()}
        save(f"{out}/bn_{name}.safetensors", sd)
        io = {"cfg": torch.tensor([sp, C, int(affine), int(track), -1 if mom is None else round(mom * 1000)])}
        module_steps(m, shape, affine, io)
        save(f"{out}/bn_{name}.io.safetensors", io)
    print(f"pool: {len(BN)} batch norm cases")


if __name__ == "__main__":
    pools(sys.argv[1])
    batchnorms(sys.argv[1])
