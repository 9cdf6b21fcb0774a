"""F.interpolate and nn.Upsample against PyTorch: cases for
tests/interop/check_interp.c (run by tests/interop/run_swiglu.sh, the
meson test torch_interp):

    /usr/bin/python3 interp.py DIR    (exit 77: no torch)

DIR/interp.safetensors: case I's "I.cfg" (int64: mode 0 nearest, 1
nearest-exact, 2 linear, 3 bilinear, 4 bicubic; spatial dims; size, two (0: None;
index 1 0: one number); scale_factor * 1e6, two (the same); align_corners
(-1: None), recompute_scale_factor (-1: None)), its input "I.x", the
weights "I.r" of the loss sum(y * r), and PyTorch's output "I.y" and
gradient "I.gx", all float32 (the index rules are float32's). Random
options over every argument (the ones PyTorch refuses left out),
upsampling and downsampling, scales passed to the kernel or recomputed;
then the bicubic cases (BICUBIC), up and down, align_corners each way.

PyTorch 1.13's nearest backward copies the gradient straight through when
an output size equals the input's (UpSample.h nearest_idx), even when its
forward, given a scale other than 1, does not copy (size 5, scale 1.1:
the forward reads sources 0 0 1 2 3): its gradient is then not the
forward's. Those cases carry no "I.gx" (cgrad's gradient is the forward's,
which its gradchecks prove); they are counted. Its bicubic backward
(UpSampleBicubic2d.cpp) copies likewise when both sizes are the input's,
its forward never: size 5 x 5 at scale 1.1 is one such case. And a 4-d input of one
channel takes PyTorch's channels-last kernel, whose nearest forward has
that same-size copy too (and the 2x shortcut), where the channels-first
one, cgrad's rule, does not: [2, 1, 8, 2] at scale (3, 1.3) copies W,
[2, 2, 8, 2] does not. Such draws are left out, and counted.
"""
import random
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("interp: torch not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

torch.manual_seed(0)
rng = random.Random(0)
MODES = ["nearest", "nearest-exact", "linear", "bilinear", "bicubic"]
SCALES = [0.3, 0.5, 0.6, 0.75, 1.1, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0]


def adjoint_ok(mode, nd, kw, x):
    """PyTorch's backward the adjoint of its forward: <F x, r> = <x, F^T r>"""
    xd = x.double()
    y = F.interpolate(xd, mode=mode, **kw)
    xg = xd.clone().requires_grad_(True)
    r = torch.randn(y.shape, dtype=torch.float64)
    (F.interpolate(xg, mode=mode, **kw) * r).sum().backward()
    return abs((y * r).sum() - (xd * xg.grad).sum()) < 1e-9 * (1 + abs((y * r).sum()))


# fixed cases first: a scale of 1.7 and 0.6 each way, same-size outputs
FIXED = [  # mode, input shape, size, scale_factor, align_corners, recompute
    (m, shp, None, sc, ac, rec)
    for m, shp in ((0, (2, 3, 7)), (1, (2, 3, 7)), (2, (2, 3, 7)), (3, (2, 2, 5, 7)), (0, (1, 2, 5, 7)))
    for sc in (1.7, 0.6) for rec in (None, True) for ac in ((None,) if m < 2 else (False, True))
] + [(0, (1, 2, 5), None, 1.1, None, None), (0, (1, 2, 5, 6), None, (1.1, 1.7), None, None),
     (2, (1, 2, 5), None, 1.1, False, None), (1, (1, 2, 5), None, 1.1, None, None)]
RANDOM = 72  # cases 0 ... 71: FIXED, then random draws; then BICUBIC's
BICUBIC = [  # input shape, size, scale_factor, align_corners, recompute
    (shp, None, sc, ac, rec)
    for shp, sc in (((2, 2, 5, 7), 1.7), ((2, 3, 6, 4), 0.6), ((1, 2, 4, 6), (2.5, 0.5)))
    for ac in (None, True) for rec in (None, True)
] + [((2, 2, 5, 7), (9, 4), None, ac, None) for ac in (False, True)] + [
    ((1, 2, 9, 8), (3, 2), None, ac, None) for ac in (None, True)
] + [((1, 2, 5, 5), None, 1.1, None, None), ((1, 2, 5, 6), None, (1.1, 1.5), False, None),
     ((1, 2, 1, 4), (1, 7), None, True, None), ((2, 2, 3, 3), 5, None, False, None),
     ((1, 2, 4, 5), None, 0.75, True, False)]


def draw(n):
    """case n's mode, input shape and F.interpolate's keyword arguments"""
    if n < len(FIXED) or n >= RANDOM:
        m, shape, size, sf, ac, rec = FIXED[n] if n < RANDOM else (4,) + BICUBIC[n - RANDOM]
        nd = len(shape) - 2
        kw = {"scale_factor": sf} if size is None else {"size": size}
        if ac is not None:
            kw["align_corners"] = ac
        if rec is not None:
            kw["recompute_scale_factor"] = rec
        return m, nd, list(shape), kw
    m = n % 4
    nd = 2 if m == 3 else 1 if m == 2 else 1 + (n // 4) % 2
    spatial = [rng.randint(1, 9) for _ in range(nd)]
    shape = [rng.randint(1, 2), rng.randint(1, 3)] + spatial
    one = nd == 1 or rng.random() < 0.3
    kw = {}
    if rng.random() < 0.4:
        size = [rng.randint(1, 12) for _ in range(nd)]
        kw["size"] = size[0] if one else size
    else:
        sf = [rng.choice(SCALES) for _ in range(nd)]
        kw["scale_factor"] = sf[0] if one else tuple(sf)
    ac = rng.choice([None, False, True]) if m >= 2 else None
    if ac is not None:
        kw["align_corners"] = ac
    rec = rng.choice([None, False, True]) if "scale_factor" in kw else None
    if rec is not None:
        kw["recompute_scale_factor"] = rec
    return m, nd, shape, kw


def two(v):
    """size or scale_factor as cfg's two numbers (index 1 0: one number)"""
    if v is None:
        return [0, 0]
    return list(v) + [0] * (2 - len(v)) if isinstance(v, (tuple, list)) else [v, 0]


def cases(out):
    t, n, quirks, layout = {}, 0, 0, 0
    while n < RANDOM + len(BICUBIC):
        m, nd, shape, kw = draw(n)
        mode = MODES[m]
        x = torch.randn(*shape)
        xg = x.clone().requires_grad_(True)
        try:
            y = F.interpolate(xg, mode=mode, **kw)
        except (RuntimeError, ValueError):
            continue
        if m < 2 and nd == 2 and shape[1] == 1:  # the channels-last kernel's copy
            two_c = F.interpolate(x.repeat(1, 2, 1, 1), mode=mode, **kw)[:, :1]
            if not torch.equal(two_c, y.detach()):
                layout += 1
                continue
        r = torch.randn(y.shape)
        (y * r).sum().backward()
        ac, rec = kw.get("align_corners"), kw.get("recompute_scale_factor")
        cfg = [m, nd] + two(kw.get("size")) + [round(s * 1e6) for s in two(kw.get("scale_factor"))]
        cfg += [-1 if ac is None else int(ac), -1 if rec is None else int(rec)]
        t[f"{n}.cfg"] = torch.tensor(cfg, dtype=torch.int64)
        t[f"{n}.x"], t[f"{n}.r"], t[f"{n}.y"] = x, r, y.detach()
        if m in (2, 3) or adjoint_ok(mode, nd, kw, x):
            t[f"{n}.gx"] = xg.grad
        else:
            quirks += 1
        n += 1
    save(f"{out}/interp.safetensors", t)
    print(f"interp: {n} cases, {quirks} without PyTorch's gradient (the same-size copies), "
          f"{layout} draws left out (one channel: the channels-last kernel's copy)")


if __name__ == "__main__":
    cases(sys.argv[1])
