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

DIR/torch_random.safetensors (tests/interop/check_torch_random.c): after
torch.manual_seed(RSEED), the calls of random_calls() in their order, each
result under its name, the inputs they take (drawn from a generator of
their own) under "in.<name>", 5 uniforms then as "after": torch.rand_like,
randn_like, bernoulli, bernoulli_, randint, randint_like, normal, poisson,
multinomial, randperm and torch.nn.init's kaiming, xavier, trunc_normal_,
sparse_, eye_ and dirac_; calculate_gain's values; clip_grad_norm_ of
several norm types and clip_grad_value_ (no draws); and F.dropout2d,
alpha_dropout and feature_alpha_dropout of an input (their masks are
PyTorch's: the C side compares the values where its own mask agrees).
5 draws as "after". DIR/torch_orth.safetensors: nn.init.orthogonal_ of the
shapes and gains of ORTH, one after the other after torch.manual_seed(SEED
+ 1), as "orth.<i>".
"""
import sys

try:
    import torch
except ImportError:
    print("make_torch_init: torch not available, skipped")
    sys.exit(77)

from make_dtype_files import save

SEED = 1234
RSEED = 4321
GAINS = [("linear", None), ("conv1d", None), ("conv2d", None), ("conv3d", None),
         ("conv_transpose1d", None), ("conv_transpose2d", None), ("conv_transpose3d", None),
         ("sigmoid", None), ("tanh", None), ("relu", None), ("leaky_relu", None),
         ("leaky_relu", 0.2), ("leaky_relu", 3.0), ("selu", None)]
# nn.init.orthogonal_'s cases: shape, gain (check_torch_init.c has them too)
ORTH = [((3, 5), 1.0), ((5, 3), 2.0), ((4, 2, 3), 0.5), ((6, 6), 1.0), ((2, 8), 1.5),
        ((40, 24), 1.0)]
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
    # nn.init.orthogonal_ (cgrad's cg_init_orthogonal_torch_) after
    # torch.manual_seed(SEED + 1), one tensor after the other
    torch.manual_seed(SEED + 1)
    orth = {}
    for i, (shape, gain) in enumerate(ORTH):
        orth[f"orth.{i}"] = nn.init.orthogonal_(torch.empty(shape), gain)
    save(f"{out}/torch_orth.safetensors", orth)
    print(f"make_torch_init: {len(tensors)} tensors, {len(orth)} orthogonal ones")


def random_calls(inp):
    """The calls, in order, on the default generator: {name: result}."""
    F, init = torch.nn.functional, torch.nn.init
    r = {"rand_like": torch.rand_like(torch.empty(3, 7)),
         "randn_like": torch.randn_like(torch.empty(5, 7)),
         "randn_like_small": torch.randn_like(torch.empty(2, 3)),
         "bernoulli": torch.bernoulli(inp["bernoulli"]),
         "bernoulli_": torch.empty(300).bernoulli_(0.375),
         "bernoulli_i64": torch.empty(40, dtype=torch.int64).bernoulli_(0.5),
         "randint": torch.randint(-5, 12, (4, 25)),
         "randint_2_33": torch.randint(0, 2 ** 33, (20,)),
         "randint_wide": torch.randint(-2 ** 62, 2 ** 62, (10,)),
         "randint_like_i32": torch.randint_like(torch.empty(3, 4, dtype=torch.int32), 3, 9),
         "randint_like_f32": torch.randint_like(torch.empty(10), -7, 7),
         "normal": torch.normal(inp["normal.mean"], inp["normal.std"]),
         "normal_big": torch.normal(inp["normal_big.mean"], inp["normal_big.std"]),
         "poisson": torch.poisson(inp["poisson"]),
         "multinomial_repl": torch.multinomial(inp["multinomial"], 30, True),
         "multinomial_rows": torch.multinomial(inp["multinomial_rows"], 5, False),
         "multinomial_one": torch.multinomial(inp["multinomial_rows"], 1, True),
         "multinomial_1d": torch.multinomial(inp["multinomial"], 4, False),
         "multinomial_zeros": torch.multinomial(inp["multinomial_zeros"], 50, True)}
    for n in (1, 2, 10, 1000, 100000):
        r[f"randperm_{n}"] = torch.randperm(n)
    r["kaiming_uniform"] = init.kaiming_uniform_(torch.empty(6, 4, 3), a=0.1, mode="fan_out")
    r["kaiming_normal"] = init.kaiming_normal_(torch.empty(8, 5), mode="fan_in",
                                               nonlinearity="relu")
    r["kaiming_normal_small"] = init.kaiming_normal_(torch.empty(3, 2, 2), mode="FAN_OUT",
                                                     nonlinearity="tanh")
    r["xavier_uniform"] = init.xavier_uniform_(torch.empty(5, 7), gain=init.calculate_gain("tanh"))
    r["xavier_normal"] = init.xavier_normal_(torch.empty(6, 4, 2), gain=1.5)
    r["trunc_normal"] = init.trunc_normal_(torch.empty(50, 3), mean=0.5, std=2.0, a=-1.0, b=3.0)
    r["trunc_normal_default"] = init.trunc_normal_(torch.empty(1000))
    r["trunc_normal_tight"] = init.trunc_normal_(torch.empty(200), mean=0.0, std=1.0, a=-0.1, b=0.2)
    r["sparse"] = init.sparse_(torch.empty(10, 6), sparsity=0.3, std=0.05)
    r["eye"] = init.eye_(torch.empty(3, 5))
    r["dirac"] = init.dirac_(torch.empty(6, 2, 3, 3), groups=2)
    r["dirac_3d"] = init.dirac_(torch.empty(4, 6, 5))
    r["dirac_5d"] = init.dirac_(torch.empty(2, 2, 3, 2, 4))
    r["gains"] = torch.tensor([init.calculate_gain(n, p) for n, p in GAINS], dtype=torch.float32)
    r["after"] = torch.empty(5).uniform_(0, 1)
    x = inp["dropout"]  # the dropouts last: their masks are not compared
    r["dropout2d"] = F.dropout2d(x, 0.25, True)
    r["alpha_dropout"] = F.alpha_dropout(x, 0.25, True)
    r["feature_alpha_dropout"] = F.feature_alpha_dropout(x, 0.375, True)
    return r


CLIP_NORMS = [("inf", float("inf")), ("1", 1.0), ("3", 3.0), ("2", 2.0), ("0_5", 0.5)]


def clip_calls(inp):
    """torch.nn.utils.clip_grad_norm_ (each norm_type, max_norm 1) and
    clip_grad_value_(0.3) of two gradients: totals and clipped gradients."""
    r = {}
    for name, q in CLIP_NORMS + [("value", None)]:
        ps = [torch.zeros(3, 4, requires_grad=True), torch.zeros(5, requires_grad=True)]
        ps[0].grad, ps[1].grad = inp["clip.g0"].clone(), inp["clip.g1"].clone()
        if q is None:
            torch.nn.utils.clip_grad_value_(ps, 0.3)
        else:
            r[f"clip.{name}.total"] = torch.nn.utils.clip_grad_norm_(ps, 1.0, q).reshape(1)
        r[f"clip.{name}.g0"], r[f"clip.{name}.g1"] = ps[0].grad, ps[1].grad
    return r


def random_inputs():
    """The inputs of random_calls, from a generator of their own."""
    g = torch.Generator().manual_seed(7)
    p = torch.rand(6, 50, generator=g)
    p[0, :5], p[1, :5] = 0.0, 1.0
    rates = torch.tensor([0.0, 0.5, 3.0, 9.99, 10.0, 25.0, 100.0, 1e4] * 12).reshape(8, 12)
    multi = torch.rand(12, generator=g)
    rows = torch.rand(3, 9, generator=g) ** 2
    rows[1, 2] = 0.0
    zeros = torch.tensor([0.0, 2.0, 0.0, 1.0, 0.0, 0.5, 0.0])
    return {"bernoulli": p, "normal.mean": torch.rand(4, 1, generator=g) * 10,
            "normal.std": torch.rand(5, generator=g) * 3,
            "normal_big.mean": torch.randn(40, generator=g),
            "normal_big.std": torch.rand(40, generator=g) + 0.5, "poisson": rates,
            "multinomial": multi, "multinomial_rows": rows, "multinomial_zeros": zeros,
            "dropout": torch.randn(4, 6, 3, 5, generator=g),
            "clip.g0": torch.randn(3, 4, generator=g), "clip.g1": torch.randn(5, generator=g) * 3}


def main_random(out):
    inp = random_inputs()
    torch.manual_seed(RSEED)
    tensors = random_calls(inp)
    tensors.update(clip_calls(inp))
    tensors.update({f"in.{k}": v for k, v in inp.items()})
    save(f"{out}/torch_random.safetensors", tensors)
    print(f"make_torch_init: {len(tensors)} random tensors")


if __name__ == "__main__":
    main(sys.argv[1])
    main_random(sys.argv[1])
