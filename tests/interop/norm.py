"""Group and instance normalisation against PyTorch: cases for
tests/interop/check_norm.c (run by tests/interop/run_swiglu.sh, the meson
test torch_norm):

    /usr/bin/python3 norm.py DIR    (exit 77: no torch)

DIR/norms.safetensors: case I's "I.cfg" (int64: op 0 F.group_norm, 1
F.instance_norm; num_groups; has weight, has bias; eps * 1e6; instance
norm: has running stats, use_input_stats, momentum * 1000), its input
"I.x", "I.w", "I.b", "I.rm", "I.rv" where present, the weights "I.r" of
the loss sum(y * r), and PyTorch's output "I.y", gradients "I.gx", "I.gw",
"I.gb" and running statistics after the call "I.rm1", "I.rv1", computed in
float64 from float32 inputs (a bias without a weight: PyTorch 1.13's
group_norm backward fails on it, so it is given a weight of ones). Random shapes [N, C, *] with 0 to 3 spatial
dims, every divisor of C as num_groups.

DIR/mod_NAME.safetensors (a module's state dict as PyTorch names it) and
DIR/mod_NAME.io.safetensors: "cfg" (kind 0 GroupNorm, 1 InstanceNorm1d, 2
InstanceNorm2d; C; num_groups; affine; track_running_stats; momentum *
1000), three training steps' "xK", "rK", "yK", "gxK", "gwK", "gbK", then
eval's "xe", "ye", and the state dict after it all, "final.NAME".
"""
import math
import random
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("norm: torch not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402
from pool import module_steps  # noqa: E402

torch.manual_seed(0)
rng = random.Random(0)


def f32(*shape):
    return torch.randn(*shape).float().double()


def functional(out):
    t, n = {}, 0
    while n < 80:
        op = 0 if n < 50 else 1
        C = rng.choice([1, 2, 3, 4, 6, 8])
        G = rng.choice([d for d in range(1, C + 1) if C % d == 0])
        nsp = rng.randint(1 if op else 0, 3)
        shape = [rng.randint(1, 3), C] + [rng.randint(2 if op else 1, 5) for _ in range(nsp)]
        if op == 0 and nsp == 0 and shape[0] == 1 and rng.random() < 0.5:
            shape[0] = 2
        has_w, has_b = rng.random() < 0.6, rng.random() < 0.6
        eps = rng.choice([1e-5, 1e-3, 0.1])
        x = f32(*shape).requires_grad_(True)
        w = f32(C).requires_grad_(True) if has_w else None
        b = f32(C).requires_grad_(True) if has_b else None
        cfg = [op, G, int(has_w), int(has_b), round(eps * 1e6)]
        rm = rv = None
        if op == 0 and shape[0] * C // G * math.prod(shape[2:]) == 1:
            continue  # refused by both
        if op == 0:  # 1.13's backward fails on a bias without a weight: ones, the same
            y = F.group_norm(x, G, w if w is not None or b is None else torch.ones(C).double(), b, eps)
        else:
            track, use_input = rng.random() < 0.7, rng.random() < 0.7
            if not track:
                use_input = True
            mom = rng.choice([0.1, 0.3, 1.0])
            if track:
                rm, rv = f32(C), torch.rand(C).float().double() + 0.5
                t[f"{n}.rm"], t[f"{n}.rv"] = rm.float(), rv.float()
            y = F.instance_norm(x, rm, rv, w, b, use_input, mom, eps)
            cfg += [int(track), int(use_input), round(mom * 1000)]
            if track:
                t[f"{n}.rm1"], t[f"{n}.rv1"] = rm.float(), rv.float()
        r = f32(*y.shape)
        (y * r).sum().backward()
        t[f"{n}.cfg"] = torch.tensor(cfg, dtype=torch.int64)
        t[f"{n}.x"], t[f"{n}.r"] = x.detach().float(), r.float()
        t[f"{n}.y"], t[f"{n}.gx"] = y.detach().float(), x.grad.float()
        for k, p in (("w", w), ("b", b)):
            if p is not None:
                t[f"{n}.{k}"], t[f"{n}.g{k}"] = p.detach().float(), p.grad.float()
        n += 1
    save(f"{out}/norms.safetensors", t)
    print(f"norm: {n} functional cases")


MODS = [  # name, kind, C, groups, shape, affine, track, momentum
    ("gn", 0, 6, 3, (2, 6, 4, 3), True, False, 0.1),
    ("gn_plain", 0, 4, 1, (3, 4, 5), False, False, 0.1),
    ("in1d", 1, 3, 0, (4, 3, 5), False, False, 0.1),
    ("in1d_track", 1, 3, 0, (4, 3, 5), True, True, 0.1),
    ("in1d_unbatched", 1, 4, 0, (4, 6), True, True, 0.2),
    ("in2d_track", 2, 2, 0, (3, 2, 4, 3), False, True, 0.3),
    ("in2d_affine", 2, 3, 0, (2, 3, 3, 3), True, False, 0.1),
]


def module(kind, C, G, affine, track, mom):
    if kind == 0:
        return torch.nn.GroupNorm(G, C, affine=affine)
    cls = torch.nn.InstanceNorm1d if kind == 1 else torch.nn.InstanceNorm2d
    return cls(C, momentum=mom, affine=affine, track_running_stats=track)


def modules(out):
    for name, kind, C, G, shape, affine, track, mom in MODS:
        m = module(kind, C, G, affine, track, mom).double()
        with torch.no_grad():
            if affine:
                m.weight.copy_(f32(C)), m.bias.copy_(f32(C))
            if track:
                m.running_mean.copy_(f32(C)), m.running_var.copy_(torch.rand(C).float().double() + 0.5)
        sd = {k: (v.float() if v.is_floating_point() else v) for k, v in m.state_dict().items()}
        save(f"{out}/mod_{name}.safetensors", sd)
        io = {"cfg": torch.tensor([kind, C, G, int(affine), int(track), round(mom * 1000)])}
        module_steps(m, shape, affine, io)
        save(f"{out}/mod_{name}.io.safetensors", io)
    print(f"norm: {len(MODS)} module cases")


if __name__ == "__main__":
    functional(sys.argv[1])
    modules(sys.argv[1])
