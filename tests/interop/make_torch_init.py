"""PyTorch's default initialisation, for tests/interop/check_torch_init.c:

    /usr/bin/python3 make_torch_init.py DIR   (exit 0: written; 77: no torch)

After torch.manual_seed(SEED), builds in this order nn.Linear(5, 7),
nn.Linear(6, 3, bias=False), nn.Embedding(11, 6), nn.Embedding(3, 5) (15
elements: torch's other normal_ path), nn.LayerNorm(6),
nn.MultiheadAttention(8, 2), nn.TransformerEncoderLayer(8, 2, 16),
nn.TransformerDecoderLayer(8, 2, 16), nn.TransformerEncoder of a
pre-norm layer (2 layers, a final LayerNorm), nn.Conv2d(3, 4, (2, 3)),
nn.ConvTranspose2d(4, 6, (3, 2), groups=2), nn.ConvTranspose3d(2, 4,
(2, 1, 2)) and nn.Bilinear(4, 3, 2), then draws 5 uniforms (where the generator stands). DIR/torch_init.safetensors holds every parameter
under cgrad's names (in_proj_weight split into q, k and v; linear1 ->
ff.fc1, norm1 -> ln1, multihead_attn -> cross_attn, norm -> ln_f) and the
5 draws as "after".
"""
import sys

try:
    import torch
except ImportError:
    print("make_torch_init: torch not available, skipped")
    sys.exit(77)

from make_dtype_files import save

SEED = 1234
RENAME = [("multihead_attn.", "cross_attn."), ("out_proj.", "o_proj."),
          ("linear1.", "ff.fc1."), ("linear2.", "ff.fc2."), ("norm1.", "ln1."),
          ("norm2.", "ln2."), ("norm3.", "ln3.")]


def cgrad_names(prefix, sd):
    """A state dict under cgrad's parameter names."""
    out = {}
    for k, v in sd.items():
        for a, b in RENAME:
            k = k.replace(a, b)
        if k == "norm.weight" or k == "norm.bias":
            k = "ln_f." + k.split(".")[1]
        if "in_proj_" in k:  # packed q, k, v
            head, kind = k.split("in_proj_")
            for part, t in zip("qkv", v.chunk(3)):
                out[f"{prefix}.{head}{part}_proj.{kind}"] = t.clone()
            continue
        out[f"{prefix}.{k}"] = v.clone()
    return out


def main(out):
    nn = torch.nn
    torch.manual_seed(SEED)
    mods = [("lin", nn.Linear(5, 7)), ("lin_nobias", nn.Linear(6, 3, bias=False)),
            ("emb", nn.Embedding(11, 6)), ("emb_small", nn.Embedding(3, 5)),
            ("ln", nn.LayerNorm(6)), ("mha", nn.MultiheadAttention(8, 2)),
            ("enc", nn.TransformerEncoderLayer(8, 2, 16)),
            ("dec", nn.TransformerDecoderLayer(8, 2, 16))]
    layer = nn.TransformerEncoderLayer(8, 2, 16, norm_first=True)
    mods.append(("stack", nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))))
    mods += [("conv", nn.Conv2d(3, 4, (2, 3))),
             ("convt", nn.ConvTranspose2d(4, 6, (3, 2), groups=2)),
             ("convt3", nn.ConvTranspose3d(2, 4, (2, 1, 2))), ("bil", nn.Bilinear(4, 3, 2))]
    tensors = {}
    for name, m in mods:
        tensors.update(cgrad_names(name, m.state_dict()))
    tensors["after"] = torch.empty(5).uniform_(0, 1)
    save(f"{out}/torch_init.safetensors", tensors)
    print(f"make_torch_init: {len(tensors)} tensors")


if __name__ == "__main__":
    main(sys.argv[1])
