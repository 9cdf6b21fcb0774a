"""F.ctc_loss: cases for tests/interop/check_ctc.c (run by
tests/interop/run_swiglu.sh):

    /usr/bin/python3 ctc.py DIR    (exit 77: no torch)

Each case DIR/NAME.safetensors holds log_probs "lp" (float32 log_softmax
of N(0, 1) draws, [T, N, C] or [T, C] unbatched), "targets" (int64,
padded [N, S] or concatenated 1-d), "il" and "tl" (int64 lengths), "cfg"
= [blank, reduction (0 mean, 1 sum, 2 none), zero_infinity], the loss
"y" PyTorch computes in float32, the weights "r" of sum(y * r) and its
gradient "grad.lp". The targets repeat labels, some are empty, some
samples have too few frames for their target (no alignment: inf, or 0
with zero_infinity). DIR/cases.txt lists the names.
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"ctc: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

REDUCTIONS = ["mean", "sum", "none"]


def draw_case(g, T, N, C, S, blank, impossible):
    """lengths and targets for N samples: labels avoid the blank, runs of
    a repeated label, target lengths 0 to S, input lengths up to T (too
    short for the target where impossible)"""
    labels = [c for c in range(C) if c != blank]
    tl = torch.randint(0, S + 1, (N,), generator=g)
    tl[0] = S
    if N > 1:
        tl[1] = 0
    tg = torch.zeros(N, S, dtype=torch.int64)
    for b in range(N):
        for k in range(S):
            if k > 0 and torch.rand(1, generator=g).item() < 0.35:
                tg[b, k] = tg[b, k - 1]  # a repeated label: a blank between
            else:
                tg[b, k] = labels[torch.randint(0, len(labels), (1,), generator=g).item()]
    il = torch.randint(max(1, T // 2), T + 1, (N,), generator=g)
    il[0] = T
    for b in range(N):
        need = int(tl[b]) + sum(int(tg[b, k] == tg[b, k - 1]) for k in range(1, int(tl[b])))
        if impossible and b == N - 1 and need > 1:
            il[b] = need - 1
        elif il[b] < need:
            il[b] = min(T, need)
    return tg, il, tl


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(13)
    names = []
    shapes = [(6, 3, 4, 3), (12, 5, 6, 5), (30, 4, 10, 12), (1, 2, 3, 1), (50, 8, 20, 20)]
    i = 0
    for T, N, C, S in shapes:
        for blank in (0, C - 1):
            for red in range(3):
                for zi in (False, True):
                    concat = i % 2 == 1
                    unbatched = i % 7 == 3
                    n = 1 if unbatched else N
                    tg, il, tl = draw_case(g, T, n, C, S, blank, impossible=i % 3 != 0)
                    lp = torch.randn(T, n, C, generator=g).log_softmax(2)
                    targets = (torch.cat([tg[b, : tl[b]] for b in range(n)]) if concat else tg)
                    args = [lp, targets, il, tl]
                    if unbatched:
                        args = [lp[:, 0], targets if concat else tg[0, : S], il[0], tl[0]]
                        if not concat:
                            args[1] = tg[0]
                    x = args[0].clone().requires_grad_(True)
                    y = F.ctc_loss(x, args[1], args[2], args[3], blank=blank,
                                   reduction=REDUCTIONS[red], zero_infinity=zi)
                    r = torch.randn(y.shape, generator=g)
                    (y * r).sum().backward()
                    name = f"ctc{i}_T{T}_N{n}_C{C}_b{blank}_{REDUCTIONS[red]}" + (
                        "_zi" if zi else "") + ("_cat" if concat else "") + (
                        "_unb" if unbatched else "")
                    t = {"lp": args[0].contiguous(), "targets": args[1].contiguous(),
                         "il": args[2].contiguous(), "tl": args[3].contiguous(),
                         "cfg": torch.tensor([blank, red, int(zi)], dtype=torch.int64),
                         "y": y.detach().contiguous(), "r": r.contiguous(),
                         "grad.lp": x.grad.contiguous()}
                    save(f"{out}/{name}.safetensors", t)
                    names.append(name)
                    i += 1
    with open(f"{out}/cases.txt", "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
