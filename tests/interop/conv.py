"""F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
F.conv_transpose3d and nn.Conv1d / nn.Conv2d / nn.Conv3d /
nn.ConvTranspose1d / nn.ConvTranspose2d / nn.ConvTranspose3d: cases for
tests/interop/check_conv.c (run by tests/interop/run_swiglu.sh):

    /usr/bin/python3 conv.py DIR    (exit 77: no torch)

Each case DIR/NAME.safetensors holds x, w (and b), the config as int64
"cfg" = [nd, stride0, stride1, pad0, pad1, dilation0, dilation1, groups,
mode] (mode 0 numbers, 1 'same', 2 'valid'; a 1-d case's second entries
unused), a transposed case's with 1 and output_padding0, output_padding1
after them (its w [C, O / groups, ...]), a padding_mode case's with 0, 0,
0 and the mode (1 reflect, 2 replicate, 3 circular: F.pad in that mode,
then the convolution without padding, as nn.Conv's forward), the output y of F.convNd in float64 (inputs drawn in float32),
the weights r of the loss sum(y * r) and its gradients "grad.x",
"grad.w", "grad.b". DIR/cases.txt lists the names. And the modules: DIR/
module1d.safetensors and module2d.safetensors, the state dicts of an
nn.Conv1d and an nn.Conv2d (torch.manual_seed(5), PyTorch's default
initialisation), with DIR/module*.io.safetensors: x, r, y, "grad.x" and
"grad.weight", "grad.bias"; DIR/tmodule1d.* and tmodule2d.* the same for
an nn.ConvTranspose1d and an nn.ConvTranspose2d; DIR/osize1d.* and
osize2d.* the same for such a module called as m(x, output_size=size),
the size an int64 "size" in the io file.

The 3-d ones (drawn after all the above, which keep their values):
DIR/cases3d.txt lists them, each "cfg" = [3, stride (3), padding (3),
dilation (3), groups, mode, transposed (0 or 1), output_padding (3),
padding_mode (0 zeros, else as above)], 17 numbers; DIR/module3d.*,
tmodule3d.* and osize3d.* as the 1-d and 2-d ones (an nn.Conv3d, an
nn.ConvTranspose3d, one called with output_size).

F.unfold and F.fold: DIR/folds.txt lists the cases, each DIR/NAME.
safetensors with x, "cfg" = [op (0 unfold, 1 fold), kernel_size (2),
dilation (2), padding (2), stride (2), output_size (2, fold's)], r, y and
"grad.x" of the loss sum(y * r).
"""
import sys

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    print(f"conv: {e.name} not available, skipped")
    sys.exit(77)
from make_dtype_files import save  # noqa: E402

MODES = {"same": 1, "valid": 2}

# name, nd, N (0: unbatched), C, O, input sizes, kernel, stride, padding
# (numbers or 'same'/'valid'), dilation, groups, bias
CASES = [
    ("c1_plain", 1, 2, 3, 4, (11,), (3,), (1,), (0,), (1,), 1, True),
    ("c1_stride2_pad1", 1, 3, 4, 5, (12,), (3,), (2,), (1,), (1,), 1, True),
    ("c1_dil2_pad3", 1, 2, 3, 2, (13,), (4,), (1,), (3,), (2,), 1, True),
    ("c1_groups2", 1, 2, 4, 6, (9,), (3,), (1,), (1,), (1,), 2, True),
    ("c1_depthwise", 1, 2, 6, 6, (10,), (5,), (1,), (2,), (1,), 6, False),
    ("c1_same_even", 1, 2, 3, 4, (9,), (4,), (1,), "same", (1,), 1, True),
    ("c1_same_dil3", 1, 1, 2, 3, (10,), (3,), (1,), "same", (3,), 1, True),
    ("c1_valid", 1, 2, 3, 3, (8,), (3,), (1,), "valid", (1,), 1, True),
    ("c1_1x1_nobias", 1, 2, 5, 3, (7,), (1,), (1,), (0,), (1,), 1, False),
    ("c1_unbatched", 1, 0, 3, 4, (10,), (3,), (3,), (2,), (1,), 1, True),
    ("c1_all", 1, 3, 6, 4, (17,), (3,), (2,), (2,), (2,), 2, True),
    ("c2_plain", 2, 2, 3, 4, (7, 6), (3, 3), (1, 1), (0, 0), (1, 1), 1, True),
    ("c2_stride2_pad1", 2, 2, 3, 5, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1), 1, True),
    ("c2_rect", 2, 2, 2, 3, (8, 7), (2, 4), (2, 1), (0, 2), (1, 1), 1, True),
    ("c2_dil2", 2, 1, 3, 2, (9, 9), (3, 3), (1, 1), (2, 2), (2, 2), 1, True),
    ("c2_dil_rect", 2, 2, 2, 2, (10, 8), (3, 2), (1, 2), (1, 0), (3, 1), 1, False),
    ("c2_groups2", 2, 2, 4, 6, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1), 2, True),
    ("c2_groups3_stride", 2, 2, 6, 3, (7, 8), (3, 2), (2, 3), (1, 1), (1, 1), 3, True),
    ("c2_depthwise", 2, 2, 4, 8, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1), 4, True),
    ("c2_1x1", 2, 2, 5, 3, (4, 6), (1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    ("c2_same", 2, 2, 3, 2, (7, 6), (4, 3), (1, 1), "same", (1, 2), 1, True),
    ("c2_valid", 2, 1, 3, 2, (6, 7), (3, 2), (1, 1), "valid", (1, 1), 1, True),
    ("c2_unbatched", 2, 0, 3, 4, (6, 5), (3, 3), (2, 1), (1, 1), (1, 1), 1, True),
    ("c2_kernel_eq_input", 2, 2, 2, 3, (3, 4), (3, 4), (1, 1), (0, 0), (1, 1), 1, True),
]

# transposed: the same fields, then output_padding
TCASES = [
    ("t1_plain", 1, 2, 3, 4, (6,), (3,), (1,), (0,), (1,), 1, True, (0,)),
    ("t1_stride2_pad1_out1", 1, 3, 4, 5, (7,), (4,), (2,), (1,), (1,), 1, True, (1,)),
    ("t1_stride3_dil2", 1, 2, 3, 2, (5,), (3,), (3,), (2,), (2,), 1, True, (2,)),
    ("t1_groups2_nobias", 1, 2, 4, 6, (6,), (3,), (2,), (1,), (1,), 2, False, (0,)),
    ("t1_depthwise", 1, 2, 6, 6, (5,), (5,), (1,), (2,), (1,), 6, True, (0,)),
    ("t1_unbatched", 1, 0, 3, 4, (5,), (3,), (2,), (0,), (1,), 1, True, (1,)),
    ("t2_plain", 2, 2, 3, 4, (4, 5), (3, 3), (1, 1), (0, 0), (1, 1), 1, True, (0, 0)),
    ("t2_k4_s2_p1", 2, 2, 4, 3, (5, 4), (4, 4), (2, 2), (1, 1), (1, 1), 1, True, (0, 0)),
    ("t2_rect_out", 2, 2, 2, 3, (4, 3), (2, 3), (2, 3), (0, 1), (1, 1), 1, True, (1, 2)),
    ("t2_dil2_out_by_dil", 2, 1, 3, 2, (4, 4), (3, 3), (1, 1), (2, 1), (2, 2), 1, True, (1, 1)),
    ("t2_groups3", 2, 2, 6, 3, (4, 5), (3, 2), (2, 1), (1, 0), (1, 2), 3, True, (1, 0)),
    ("t2_depthwise", 2, 2, 4, 8, (4, 4), (3, 3), (2, 2), (1, 1), (1, 1), 4, False, (1, 1)),
    ("t2_1x1", 2, 2, 5, 3, (4, 3), (1, 1), (1, 1), (0, 0), (1, 1), 1, True, (0, 0)),
    ("t2_unbatched", 2, 0, 3, 4, (3, 4), (3, 3), (2, 1), (1, 1), (1, 1), 1, True, (0, 0)),
]


# nn.Conv's padding_mode (PyTorch pads x in that mode, then convolves
# without padding): the same fields, then the mode
PM = {"reflect": 1, "replicate": 2, "circular": 3}
PCASES = [
    ("p1_reflect", 1, 2, 3, 4, (9,), (3,), (1,), (2,), (1,), 1, True, "reflect"),
    ("p1_circular_same_even", 1, 2, 3, 4, (9,), (4,), (1,), "same", (1,), 1, True, "circular"),
    ("p1_replicate_dil2_stride2", 1, 3, 2, 2, (11,), (3,), (2,), (3,), (2,), 1, True, "replicate"),
    ("p2_replicate_stride", 2, 2, 3, 4, (7, 6), (3, 3), (2, 1), (1, 2), (1, 1), 1, True,
     "replicate"),
    ("p2_reflect_same_dil", 2, 1, 2, 3, (8, 7), (3, 2), (1, 1), "same", (2, 1), 1, True, "reflect"),
    ("p2_circular_groups", 2, 2, 4, 6, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1), 2, False,
     "circular"),
    ("p2_reflect_unbatched", 2, 0, 3, 2, (5, 6), (3, 3), (1, 1), (2, 1), (1, 1), 1, True, "reflect"),
]

# 3-d: the same fields; a transposed case's output_padding (a tuple), a
# padding_mode case's mode (a string) after them
CASES3 = [
    ("c3_plain", 3, 2, 3, 4, (5, 6, 4), (3, 2, 2), (1, 1, 1), (0, 0, 0), (1, 1, 1), 1, True),
    ("c3_stride_pad", 3, 2, 2, 3, (7, 6, 8), (3, 3, 2), (2, 1, 3), (1, 0, 1), (1, 1, 1), 1, True),
    ("c3_dil_rect", 3, 1, 3, 2, (6, 8, 7), (2, 3, 2), (1, 2, 1), (1, 2, 0), (2, 1, 3), 1, False),
    ("c3_groups2", 3, 2, 4, 6, (4, 5, 5), (2, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 2, True),
    ("c3_depthwise", 3, 2, 3, 6, (5, 4, 6), (3, 1, 3), (1, 1, 2), (1, 0, 1), (1, 1, 1), 3, True),
    ("c3_1x1x1", 3, 2, 5, 3, (3, 4, 5), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1), 1, True),
    ("c3_same", 3, 2, 3, 2, (5, 6, 5), (2, 3, 4), (1, 1, 1), "same", (2, 1, 1), 1, True),
    ("c3_valid", 3, 1, 3, 2, (5, 4, 6), (3, 2, 2), (1, 1, 1), "valid", (1, 1, 1), 1, True),
    ("c3_unbatched", 3, 0, 3, 4, (6, 5, 4), (3, 3, 2), (2, 1, 1), (1, 1, 0), (1, 1, 1), 1, True),
    ("t3_plain", 3, 2, 3, 4, (3, 4, 3), (3, 2, 2), (1, 1, 1), (0, 0, 0), (1, 1, 1), 1, True,
     (0, 0, 0)),
    ("t3_stride_out", 3, 2, 2, 3, (3, 4, 3), (3, 2, 4), (2, 1, 3), (1, 0, 1), (1, 1, 1), 1, True,
     (1, 0, 2)),
    ("t3_dil_out_by_dil", 3, 1, 3, 2, (3, 3, 4), (2, 3, 2), (1, 1, 1), (1, 2, 0), (2, 2, 3), 1,
     True, (1, 1, 2)),
    ("t3_groups2_nobias", 3, 2, 4, 6, (3, 3, 2), (2, 2, 3), (2, 2, 1), (1, 0, 1), (1, 1, 1), 2,
     False, (0, 1, 0)),
    ("t3_unbatched", 3, 0, 3, 2, (2, 3, 4), (2, 2, 3), (2, 1, 2), (0, 1, 1), (1, 1, 1), 1, True,
     (1, 0, 1)),
    ("p3_reflect_same", 3, 2, 2, 3, (4, 5, 6), (2, 3, 4), (1, 1, 1), "same", (1, 1, 1), 1, True,
     "reflect"),
    ("p3_circular_stride", 3, 2, 3, 2, (5, 4, 6), (3, 2, 3), (2, 1, 2), (1, 0, 2), (1, 1, 1), 1,
     True, "circular"),
    ("p3_replicate_groups", 3, 1, 4, 4, (4, 4, 5), (2, 2, 3), (1, 1, 1), (1, 1, 1), (1, 2, 1), 2,
     False, "replicate"),
]

# F.unfold / F.fold: name, op, input shape, kernel_size, dilation,
# padding, stride, output_size (fold's)
FCASES = [
    ("u_plain", "unfold", (2, 3, 5, 6), (2, 2), (1, 1), (0, 0), (1, 1), None),
    ("u_stride2_pad1", "unfold", (2, 2, 7, 6), (3, 3), (1, 1), (1, 1), (2, 2), None),
    ("u_rect_dil", "unfold", (1, 2, 7, 8), (2, 3), (2, 1), (1, 2), (1, 1), None),
    ("u_stride_dil_rect", "unfold", (2, 3, 6, 7), (3, 2), (1, 2), (0, 1), (2, 1), None),
    ("u_unbatched", "unfold", (3, 5, 4), (2, 3), (1, 1), (1, 0), (1, 2), None),
    ("f_plain", "fold", (2, 12, 20), (2, 2), (1, 1), (0, 0), (1, 1), (5, 6)),
    ("f_stride2_pad1", "fold", (2, 18, 12), (3, 3), (1, 1), (1, 1), (2, 2), (7, 6)),
    ("f_rect_dil", "fold", (1, 12, 70), (2, 3), (2, 1), (1, 2), (1, 1), (7, 8)),
    ("f_stride_dil_rect", "fold", (2, 18, 14), (3, 2), (1, 2), (0, 1), (2, 1), (6, 7)),
    ("f_unbatched", "fold", (18, 6), (2, 3), (1, 1), (1, 0), (1, 2), (5, 4)),
]


def f32(*shape):
    return torch.randn(*shape).float().double()


def write_case(d, c):
    name, nd, n, cin, cout, size, k, stride, pad, dil, groups, bias = c[:12]
    pm = c[12] if len(c) > 12 and isinstance(c[12], str) else None
    t = len(c) > 12 and not pm
    x = f32(*(((n,) if n else ()) + (cin,) + size)).requires_grad_()
    w = (f32(cin, cout // groups, *k) if t else f32(cout, cin // groups, *k)).requires_grad_()
    b = f32(cout).requires_grad_() if bias else None
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    if t:
        convt = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
        y = convt(x, w, b, stride, pad, c[12], groups, dil)
    elif pm:  # as nn.Conv's forward: _reversed_padding_repeated_twice
        rev = []
        for i in reversed(range(nd)):
            tot = dil[i] * (k[i] - 1)
            rev += [tot // 2, tot - tot // 2] if pad == "same" else [pad[i], pad[i]]
        y = conv(F.pad(x, rev, mode=pm), w, b, stride, 0, dil, groups)
    else:
        y = conv(x, w, b, stride, pad, dil, groups)
    r = f32(*y.shape)
    (y * r).sum().backward()
    two = lambda t: list(t) + [0] * (2 - len(t))  # noqa: E731
    mode = MODES.get(pad, 0) if isinstance(pad, str) else 0
    pads = [0, 0] if isinstance(pad, str) else two(pad)
    q = [nd] + two(stride) + pads + two(dil) + [groups, mode] + ([1] + two(c[12]) if t else [])
    q += [0, 0, 0, PM[pm]] if pm else []
    if nd == 3:
        pads = [0] * 3 if isinstance(pad, str) else list(pad)
        q = [3] + list(stride) + pads + list(dil) + [groups, mode, int(t)]
        q += list(c[12] if t else (0, 0, 0)) + [PM[pm] if pm else 0]
    cfg = torch.tensor(q, dtype=torch.int64)
    t = {"x": x.detach().float(), "w": w.detach().float(), "cfg": cfg, "r": r.float(),
         "y": y.detach().float(), "grad.x": x.grad.float(), "grad.w": w.grad.float()}
    if bias:
        t["b"] = b.detach().float()
        t["grad.b"] = b.grad.float()
    save(f"{d}/{name}.safetensors", t)


def write_module(d, nd, t=False):
    torch.manual_seed(5)
    if nd == 3:  # the 2-d ones' numbers, depth first, padding 1 in the width
        args = dict(stride=(2, 1, 1), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2)
        if t:
            m, x = nn.ConvTranspose3d(4, 6, (3, 2, 2), output_padding=(1, 0, 0), **args), f32(
                2, 4, 4, 3, 4)
        else:
            m, x = nn.Conv3d(4, 6, (3, 2, 2), **args), f32(2, 4, 7, 6, 5)
        m = m.double()
    elif t and nd == 1:
        m = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2).double()
        x = f32(2, 4, 7)
    elif t:
        m = nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
                               dilation=(1, 2), groups=2)
        m = m.double()
        x = f32(2, 4, 5, 4)
    elif nd == 1:
        m = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2).double()
        x = f32(2, 4, 15)
    else:
        m = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
        m = m.double()
        x = f32(2, 4, 9, 8)
    # the parameters as float32 values: what the file holds
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.float().double())
    x.requires_grad_()
    y = m(x)
    r = f32(*y.shape)
    (y * r).sum().backward()
    pre = "tmodule" if t else "module"
    save(f"{d}/{pre}{nd}d.safetensors", {k: v.float() for k, v in m.state_dict().items()})
    save(f"{d}/{pre}{nd}d.io.safetensors",
         {"x": x.detach().float(), "r": r.float(), "y": y.detach().float(),
          "grad.x": x.grad.float(), "grad.weight": m.weight.grad.float(),
          "grad.bias": m.bias.grad.float()})


def write_fold(d, c):
    name, op, shape, k, dil, pad, stride, size = c
    x = f32(*shape).requires_grad_()
    if op == "unfold":
        y = F.unfold(x, k, dil, pad, stride)
    else:
        y = F.fold(x, size, k, dil, pad, stride)
    r = f32(*y.shape)
    (y * r).sum().backward()
    q = [op == "fold"] + list(k) + list(dil) + list(pad) + list(stride) + list(size or (0, 0))
    save(f"{d}/{name}.safetensors",
         {"x": x.detach().float(), "cfg": torch.tensor(q, dtype=torch.int64), "r": r.float(),
          "y": y.detach().float(), "grad.x": x.grad.float()})


def write_osize(d, nd):
    """nn.ConvTranspose1d(3, 4, 3, stride=3, padding=1) called with
    output_size (2, 4, 11) of x [2, 3, 4]; nn.ConvTranspose2d(3, 4, (3, 2),
    stride=(3, 2), padding=(1, 0), dilation=(1, 2)) with (12, 12) of x
    [2, 3, 4, 5]"""
    torch.manual_seed(6)
    if nd == 1:
        m, x, size = nn.ConvTranspose1d(3, 4, 3, stride=3, padding=1), f32(2, 3, 4), (2, 4, 11)
    elif nd == 3:  # the 2-d one's numbers, depth first; sizes from (7, 9, 6) to (9, 10, 6)
        m = nn.ConvTranspose3d(3, 4, (3, 2, 2), stride=(3, 2, 1), padding=(1, 0, 0),
                               dilation=(1, 2, 1))
        x, size = f32(2, 3, 3, 4, 5), (8, 10, 6)
    else:
        m = nn.ConvTranspose2d(3, 4, (3, 2), stride=(3, 2), padding=(1, 0), dilation=(1, 2))
        x, size = f32(2, 3, 4, 5), (12, 12)
    m = m.double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.float().double())
    x.requires_grad_()
    y = m(x, output_size=size)
    r = f32(*y.shape)
    (y * r).sum().backward()
    save(f"{d}/osize{nd}d.safetensors", {k: v.float() for k, v in m.state_dict().items()})
    save(f"{d}/osize{nd}d.io.safetensors",
         {"x": x.detach().float(), "r": r.float(), "y": y.detach().float(),
          "grad.x": x.grad.float(), "grad.weight": m.weight.grad.float(),
          "grad.bias": m.bias.grad.float(), "size": torch.tensor(size, dtype=torch.int64)})


def main():
    d = sys.argv[1]
    torch.manual_seed(0)
    for c in CASES:
        write_case(d, c)
    for c in TCASES + PCASES:
        write_case(d, c)
    with open(f"{d}/cases.txt", "w") as f:
        f.write("\n".join(c[0] for c in CASES + TCASES + PCASES) + "\n")
    for t in (False, True):
        write_module(d, 1, t)
        write_module(d, 2, t)
    for c in FCASES:
        write_fold(d, c)
    with open(f"{d}/folds.txt", "w") as f:
        f.write("\n".join(c[0] for c in FCASES) + "\n")
    write_osize(d, 1)
    write_osize(d, 2)
    for c in CASES3:  # drawn last: the cases above keep their values
        write_case(d, c)
    with open(f"{d}/cases3d.txt", "w") as f:
        f.write("\n".join(c[0] for c in CASES3) + "\n")
    write_module(d, 3)
    write_module(d, 3, True)
    write_osize(d, 3)
    print(f"conv: {len(CASES) + len(TCASES) + len(PCASES) + len(CASES3)} cases, 9 modules and "
          f"{len(FCASES)} unfold/fold cases written to {d}")


if __name__ == "__main__":
    main()
