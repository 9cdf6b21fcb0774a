"""PyTorch's peer of tools/conv_bench.c: one F.conv1d / F.conv2d / F.conv3d /
F.conv_transpose2d / F.conv_transpose3d forward
(x, w and b requiring grad), sum, backward, the gradients dropped; one JSON
line with conv_bench's fields.

  OMP_NUM_THREADS=1 /usr/bin/python3 tools/conv_peer.py [CASE [STEPS [N C O S K]]]

CASE: conv1d (N 32, C 256 -> 256, L 128, K 3), conv2d (N 16, C 64 -> 64,
32x32, 3x3), depthwise (groups C: N 16, C 128 -> 128, 32x32, 3x3) or 1x1
(N 16, C 128 -> 128, 32x32); padding K // 2, stride 1; or convt2d
(F.conv_transpose2d, N 16, C 64 -> 64, 16x16 -> 32x32, 4x4, stride 2,
padding max(0, (K - 2) // 2)); conv3d (N 4, C 32 -> 32, 16x16x16, 3x3x3)
or convt3d (F.conv_transpose3d, N 4, C 32 -> 32, 8^3 -> 16^3, 4x4x4,
stride 2).
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

CASES = {
    "conv1d": (1, False, 32, 256, 256, 128, 3),
    "conv2d": (2, False, 16, 64, 64, 32, 3),
    "depthwise": (2, True, 16, 128, 128, 32, 3),
    "1x1": (2, False, 16, 128, 128, 32, 1),
    "convt2d": (2, False, 16, 64, 64, 16, 4),
    "conv3d": (3, False, 4, 32, 32, 16, 3),
    "convt3d": (3, False, 4, 32, 32, 8, 4),
}
USAGE = ("usage: conv_peer.py [conv1d|conv2d|depthwise|1x1|convt2d|conv3d|convt3d "
         "[STEPS [N C O S K]]]")


def parse(args):
    """(case name, nd, depthwise, steps, N, C, O, S, K) or None"""
    if len(args) not in (0, 1, 2, 7):
        return None
    name = args[0] if args else "conv1d"
    if name not in CASES:
        return None
    nd, depthwise, *sizes = CASES[name]
    try:
        steps = int(args[1]) if len(args) > 1 else 20
        if len(args) == 7:
            sizes = [int(a) for a in args[2:]]
    except ValueError:
        return None
    if not 1 <= steps <= 1000 or any(not 1 <= v <= 4096 for v in sizes):
        return None
    if depthwise and sizes[2] % sizes[1]:
        return None
    return (name, nd, depthwise, steps, *sizes)


def main():
    parsed = parse(sys.argv[1:])
    if parsed is None:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    name, nd, depthwise, steps, n, c, o, s, k = parsed
    groups = c if depthwise else 1
    torch.manual_seed(1)
    x = torch.randn(n, c, *([s] * nd), requires_grad=True)
    t = name in ("convt2d", "convt3d")
    w = torch.randn(*((c, o // groups) if t else (o, c // groups)), *([k] * nd),
                    requires_grad=True)
    b = torch.randn(o, requires_grad=True)
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    if t:
        convt = F.conv_transpose2d if nd == 2 else F.conv_transpose3d
        conv = lambda x, w, b, padding, groups: convt(  # noqa: E731
            x, w, b, stride=2, padding=max(0, (k - 2) // 2), groups=groups)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        conv(x, w, b, padding=k // 2, groups=groups).sum().backward()
        x.grad = w.grad = b.grad = None
        if i >= 2:
            times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"bench": "conv", "impl": "torch", "case": name, "nd": nd, "n": n, "c": c,
                      "o": o, "size": s, "k": k, "groups": groups,
                      "threads": torch.get_num_threads(), "steps": steps,
                      "step_ms_median": round(times[steps // 2] * 1e3, 3),
                      "step_ms_best": round(times[0] * 1e3, 3)}))


if __name__ == "__main__":
    main()
