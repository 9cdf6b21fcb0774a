"""F.embedding_bag, F.local_response_norm, F.channel_shuffle and the
modules nn.EmbeddingBag, weight_norm'd and spectral_norm'd Linear / Conv2d
/ ConvTranspose2d (torch.nn.utils): cases for tests/interop/check_param.c
(run by tests/interop/run_swiglu.sh):

    /usr/bin/python3 param.py DIR    (exit 77: no torch)

Ops: DIR/NAME.safetensors with int64 "cfg" = [kind, ...] (kind 0
embedding_bag: [0, mode (0 mean, 1 sum, 2 max), include_last_offset,
has_padding_idx, padding_idx]; 1 local_response_norm: [1, size] and float32
"lrn" = [alpha, beta, k]; 2 channel_shuffle: [2, groups]), the inputs (w,
ids, offsets, psw; or x), the output y computed in float64 from the float32
inputs, the weights r of the loss sum(y * r) and its gradients "grad.*".
DIR/cases.txt lists them. Modules: DIR/NAME.safetensors, the module's
state dict as PyTorch writes it (weight_g/weight_v, weight_orig/weight_u/
weight_v, weight) BEFORE the forward, and DIR/NAME.io.safetensors: x (or
ids, offsets), y, r, "grad.x", "grad.<param>" for every named parameter and,
for spectral norm, "after.weight_u" / "after.weight_v" (the buffers after
the forward's power iterations). DIR/modules.txt lists them; check_param.c
builds each by its name.
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    print(f"param: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

MODES = ["mean", "sum", "max"]
# name, mode, ids, offsets (None: 2-d ids), include_last_offset, psw,
# padding_idx
BAGS = [
    ("bag_sum", 1, [0, 2, 4, 5, 4, 3, 2], [0, 2, 2], False, False, None),
    ("bag_mean_empty", 0, [0, 2, 4, 5, 4, 3, 2], [0, 3, 3, 5], False, False, None),
    ("bag_max", 2, [0, 2, 4, 5, 4, 3, 2], [0, 1, 4], False, False, None),
    ("bag_sum_psw_last", 1, [1, 2, 4, 5, 4, 3, 2, 0], [0, 2, 5, 8], True, True, None),
    ("bag_mean_pad", 0, [1, 2, 1, 5, 1, 1, 2, 0], [0, 2, 4, 6], False, False, 1),
    ("bag_max_pad_neg", 2, [1, 2, 1, 5, 1, 1, 2, 0], [0, 2, 4, 6], False, False, -5),
    ("bag_sum_2d_psw_pad", 1, [[0, 1, 2], [3, 4, 5], [5, 4, 3], [2, 3, 3]], None, False, True, 3),
    ("bag_mean_2d", 0, [[0, 1, 2, 3], [4, 5, 5, 4]], None, False, False, None),
]
# name, x's shape, size, alpha, beta, k
LRNS = [
    ("lrn_3d", (2, 5, 4), 3, 1e-2, 0.75, 1.0),
    ("lrn_4d", (2, 6, 3, 2), 2, 0.5, 0.6, 2.0),
    ("lrn_5d", (1, 4, 2, 2, 3), 5, 0.3, 0.75, 1.0),
    ("lrn_default", (2, 7, 3, 3), 4, 1e-4, 0.75, 1.0),
]
SHUFFLES = [("shuffle_4d", (2, 6, 3, 2), 3), ("shuffle_3d", (1, 8, 5), 2),
            ("shuffle_5d", (2, 4, 2, 1, 3), 4)]


def finish(out, name, t, y, r, grads):
    (y * r.double()).sum().backward()
    t.update({"y": y.detach().float(), "r": r})
    for k, v in grads.items():
        t["grad." + k] = v.grad.float()
    save(f"{out}/{name}.safetensors", {k: v.contiguous() for k, v in t.items()})


def ops(out, g):
    names = []
    for name, mode, ids, offsets, last, psw, pad in BAGS:
        w = torch.randn(6, 5, generator=g)
        ids_t = torch.tensor(ids, dtype=torch.int64)
        t = {"w": w, "ids": ids_t, "cfg": torch.tensor(
            [0, mode, int(last), int(pad is not None), pad or 0], dtype=torch.int64)}
        wd = w.double().requires_grad_(True)
        grads = {"w": wd}
        pd = None
        if psw:
            p = torch.randn(ids_t.shape, generator=g)
            t["psw"] = p
            pd = p.double().requires_grad_(True)
            grads["psw"] = pd
        off = None
        if offsets is not None:
            off = torch.tensor(offsets, dtype=torch.int64)
            t["offsets"] = off
        y = F.embedding_bag(ids_t, wd, off, mode=MODES[mode], per_sample_weights=pd,
                            include_last_offset=last, padding_idx=pad)
        finish(out, name, t, y, torch.randn(y.shape, generator=g), grads)
        names.append(name)
    for name, shape, size, alpha, beta, k in LRNS:
        x = torch.randn(shape, generator=g)
        xd = x.double().requires_grad_(True)
        y = F.local_response_norm(xd, size, alpha, beta, k)
        t = {"x": x, "cfg": torch.tensor([1, size], dtype=torch.int64),
             "lrn": torch.tensor([alpha, beta, k], dtype=torch.float32)}
        finish(out, name, t, y, torch.randn(y.shape, generator=g), {"x": xd})
        names.append(name)
    for name, shape, groups in SHUFFLES:
        x = torch.randn(shape, generator=g)
        xd = x.double().requires_grad_(True)
        # PyTorch 1.13 has no derivative for channel_shuffle: its values,
        # the gradient of the reshape / transpose / reshape it computes
        y = xd.reshape(shape[0], groups, shape[1] // groups, *shape[2:]).transpose(1, 2)
        y = y.reshape(shape)
        assert torch.equal(y.detach(), nn.ChannelShuffle(groups)(xd.detach()))
        t = {"x": x, "cfg": torch.tensor([2, groups], dtype=torch.int64)}
        finish(out, name, t, y, torch.randn(y.shape, generator=g), {"x": xd})
        names.append(name)
    with open(f"{out}/cases.txt", "w") as f:
        f.write("\n".join(names) + "\n")


def module_case(out, name, m, x_shape, train, g):
    """m's state dict before the forward (float32), then the forward in
    float64 in train or eval mode, the loss sum(y * r) taken back."""
    with torch.no_grad():  # weights away from PyTorch's init, both signs
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    save(f"{out}/{name}.safetensors",
         {k: v.detach().float().contiguous() for k, v in m.state_dict().items()})
    m = m.double().train(train)
    x = torch.randn(*x_shape, generator=g, dtype=torch.float64, requires_grad=True)
    y = m(x)
    r = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (y * r).sum().backward()
    io = {"x": x.detach().float(), "y": y.detach().float(), "r": r.float(),
          "grad.x": x.grad.float()}
    for k, p in m.named_parameters():
        io["grad." + k] = p.grad.float().contiguous()
    for k, b in m.named_buffers():
        io["after." + k] = b.float().contiguous()
    save(f"{out}/{name}.io.safetensors", io)


def modules(out, g):
    U = nn.utils
    cases = [
        ("wn_linear", U.weight_norm(nn.Linear(5, 4), "weight", 0), (3, 5), True),
        ("wn_linear_dim1", U.weight_norm(nn.Linear(5, 4), "weight", 1), (3, 5), True),
        ("wn_conv_whole", U.weight_norm(nn.Conv2d(2, 3, (2, 2)), "weight", None), (2, 2, 4, 3),
         True),
        ("sn_linear", U.spectral_norm(nn.Linear(5, 4)), (3, 5), True),
        ("sn_linear_eval", U.spectral_norm(nn.Linear(5, 4)), (3, 5), False),
        ("sn_convt", U.spectral_norm(nn.ConvTranspose2d(2, 3, (2, 2)), n_power_iterations=2),
         (1, 2, 3, 3), True),
    ]
    names = []
    for name, m, shape, train in cases:
        module_case(out, name, m, shape, train, g)
        names.append(name)
    # nn.EmbeddingBag(6, 3, mode="max", padding_idx=2): its weight drawn
    # N(0, 1) by PyTorch with row 2 zeroed, as written
    m = nn.EmbeddingBag(6, 3, mode="max", padding_idx=2)
    save(f"{out}/bag_module.safetensors", {"weight": m.weight.detach().contiguous()})
    ids = torch.tensor([1, 2, 5, 0, 2, 2, 4, 3], dtype=torch.int64)
    offsets = torch.tensor([0, 3, 4, 6], dtype=torch.int64)
    m = m.double()
    y = m(ids, offsets)
    r = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (y * r).sum().backward()
    save(f"{out}/bag_module.io.safetensors",
         {"ids": ids, "offsets": offsets, "y": y.detach().float(), "r": r.float(),
          "grad.weight": m.weight.grad.float()})
    names.append("bag_module")
    with open(f"{out}/modules.txt", "w") as f:
        f.write("\n".join(names) + "\n")


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(13)
    torch.manual_seed(13)  # spectral_norm's u, v and EmbeddingBag's weight
    ops(out, g)
    modules(out, g)


if __name__ == "__main__":
    main()
