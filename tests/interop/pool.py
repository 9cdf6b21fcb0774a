"""Pooling and batch normalisation against PyTorch: cases for
tests/interop/check_pool.c (run by tests/interop/run_swiglu.sh, the meson
test torch_pool):

    /usr/bin/python3 pool.py DIR    (exit 77: no torch)

DIR/pools.safetensors: case I's "I.cfg" (int64: op 0 max, 1 avg, 2
adaptive max, 3 adaptive avg, 4 max unpool; spatial dims; kernel_size,
stride (0: None), padding, dilation, three each; ceil_mode,
count_include_pad, divisor_override (0: None), the adaptive output sizes
or the unpool's output_size (0: None), three), its input "I.x", the
weights "I.r" of the loss sum(y * r), and PyTorch's output "I.y",
indices "I.idx" (max) and gradient "I.gx", computed in float64 from the
float32 inputs; an unpool's indices "I.uidx" (of a max pool of the same
options). Random options over every argument (the ones PyTorch refuses
left out), 1d, 2d and 3d, batched and unbatched, and inputs of small
integers (ties: the indices must be PyTorch's; an unpool's repeated
indices: the last value stays, PyTorch's at one thread).

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
torch.set_num_threads(1)  # max_unpool's repeated indices: the last write stays
rng = random.Random(0)
rng3 = random.Random(3)  # the 3d pools and the unpools (the 1d/2d cases keep rng's draws)
MAX = [None, F.max_pool1d, F.max_pool2d, F.max_pool3d]
AVG = [None, F.avg_pool1d, F.avg_pool2d, F.avg_pool3d]
AMAX = [None, F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d]
AAVG = [None, F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d]
UNPOOL = [None, F.max_unpool1d, F.max_unpool2d, F.max_unpool3d]


def f32(*shape, ints=False):
    if ints:
        return torch.randint(0, 3, shape).double()
    return torch.randn(*shape).float().double()


def run_pool(op, nd, o, x):
    k, s, p, d = o["k"][:nd], o["s"][:nd], o["p"][:nd], o["d"][:nd]
    stride = None if s[0] == 0 else s
    if op == 0:
        return MAX[nd](x, k, stride, p, d, o["ceil"], return_indices=True)
    if op == 1:
        if nd == 1:
            return F.avg_pool1d(x, k, stride, p, o["ceil"], o["cip"]), None
        return AVG[nd](x, k, stride, p, o["ceil"], o["cip"], o["div"] or None), None
    out = o["out"][:nd]
    if op == 2:
        return AMAX[nd](x, out, return_indices=True)
    return AAVG[nd](x, out), None


def pad3(v):
    return list(v) + [0] * (3 - len(v))


def record(t, n, op, nd, o, x, xg, y, idx):
    """case n: its cfg, input, weights r, PyTorch's output and gradient of
    sum(y * r) (y computed from xg, a leaf copy of x)"""
    r = f32(*y.shape)
    (y * r).sum().backward()
    cfg = [op, nd] + pad3(o["k"]) + pad3(o["s"]) + pad3(o["p"]) + pad3(o["d"])
    cfg += [int(o["ceil"]), int(o["cip"]), o["div"]] + pad3(o["out"])
    t[f"{n}.cfg"] = torch.tensor(cfg, dtype=torch.int64)
    t[f"{n}.x"], t[f"{n}.r"] = x.float(), r.float()
    t[f"{n}.y"], t[f"{n}.gx"] = y.detach().float(), xg.grad.float()
    if idx is not None:
        t[f"{n}.idx"] = idx


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
        record(t, n, op, nd, o, x, xg, y, idx)
        n += 1
    n = pools3d(t, n)
    n = unpools(t, n)
    save(f"{out}/pools.safetensors", t)
    print(f"pool: {n} pooling cases")


def options3(op, nd):
    k = [rng3.randint(1, 3) for _ in range(nd)]
    s0 = rng3.choice([0, 1, 2, 3])
    return {"k": k, "s": [0] * nd if s0 == 0 else [s0] + [rng3.randint(1, 3) for _ in range(nd - 1)],
            "p": [rng3.randint(0, ki // 2) for ki in k],
            "d": [rng3.randint(1, 2) if op == 0 else 1 for _ in k], "ceil": rng3.random() < 0.5,
            "cip": rng3.random() < 0.5, "div": rng3.choice([0, 0, 2, 5]) if op == 1 else 0,
            "out": [rng3.randint(1, 5) for _ in range(nd)]}


def pools3d(t, n):
    """the 3d pools: 60 cases from n"""
    end = n + 60
    while n < end:
        op = n % 4
        batched, ints = rng3.random() < 0.6, op in (0, 2) and rng3.random() < 0.3
        o = options3(op, 3)
        shape = ([2] if batched else []) + [2] + [rng3.randint(2, 7) for _ in range(3)]
        x = f32(*shape, ints=ints)
        xg = x.clone().requires_grad_(True)
        try:
            y, idx = run_pool(op, 3, o, xg)
        except RuntimeError:
            continue
        record(t, n, op, 3, o, x, xg, y, idx)
        n += 1
    return n


def unpools(t, n):
    """F.max_unpool1d/2d/3d: 36 cases from n, the indices of a max pool of
    the same kernel_size, stride and padding, output_size None or the
    pool's input size (PyTorch's refusals left out)"""
    end = n + 36
    while n < end:
        nd = 1 + n % 3
        batched = rng3.random() < 0.6
        o = options3(0, nd)
        o["d"], o["ceil"], o["cip"] = [1] * nd, False, True
        spatial = [rng3.randint(2, 7) for _ in range(nd)]
        shape = ([2] if batched else []) + [3] + spatial
        try:
            _, uidx = MAX[nd](f32(*shape), o["k"], o["s"] if o["s"][0] else None, o["p"],
                              return_indices=True)
            o["out"] = spatial if rng3.random() < 0.5 else [0] * nd
            x = f32(*uidx.shape)
            xg = x.clone().requires_grad_(True)
            y = UNPOOL[nd](xg, uidx, o["k"], o["s"] if o["s"][0] else None, o["p"],
                           spatial if o["out"][0] else None)
        except (RuntimeError, ValueError):
            continue
        t[f"{n}.uidx"] = uidx
        record(t, n, 4, nd, o, x, xg, y, None)
        n += 1
    return n


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
