"""One module's case for cgrad's PyTorch checkers (swiglu.py, rope.py; read
by check_swiglu.c, check_rope.c): the module's parameters drawn N(0, 0.3^2)
from a generator seeded `seed` (biases and norms too), run in float64 on an
input x of `shape`, the loss sum(y * r) taken back. Written, as float32:
DIR/NAME.safetensors, the state dict under the module's own names, and
DIR/NAME.io.safetensors: x, y, r, "grad.x" and every parameter's
"grad.NAME"."""
import torch

from make_dtype_files import save


def write_case(out, name, m, seed, shape):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    m = m.double()
    x = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randn(*shape, generator=g, dtype=torch.float64)
    y = m(x)
    (y * r).sum().backward()
    save(f"{out}/{name}.safetensors",
         {k: v.detach().float().contiguous() for k, v in m.state_dict().items()})
    io = {"x": x.detach().float(), "y": y.detach().float(), "r": r.float(),
          "grad.x": x.grad.float()}
    for k, p in m.named_parameters():
        io["grad." + k] = p.grad.float().contiguous()
    save(f"{out}/{name}.io.safetensors", io)
