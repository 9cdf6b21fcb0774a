"""Random cases of cgrad's public ops with PyTorch's answers, for the
differential test tests/interop/check_ops.c:

    /usr/bin/python3 make_op_cases.py DIR   (exit 0: written; 77: no torch)

DIR/op_cases.safetensors holds, for case i (fixed seeds, so the same file
every run):
  i.b<j>  the base of input j, contiguous; the input is the base seen
          through the views of the case's "in"[j]["v"] (transposes, slices
          with steps, expands with stride 0), so the op reads strided data
  i.o<k>  PyTorch's output k (its dtype and shape are checked exactly)
  i.t<k>  the tolerance of each element of a float output k (float32): four
          units in the last place of the dtype at the value, plus four times
          PyTorch's own distance from the same op in float64, plus a small
          absolute term scaled by the output's largest magnitude; absent for
          exact ops (bit for bit) and integer or bool outputs (equal)
  i.u<k>  the upstream gradient of float output k (random normal)
  i.g<j>  PyTorch's gradient of base j (autograd through the views and the
          op; absent when the base needs no gradient or none reaches it)
  i.h<j>  its tolerance, made as for the outputs
The metadata key "cases" is a JSON list, one object per case:
  {"op": name, "a": {op arguments}, "in": [{"dt", "v", "g"}...],
   "n": outputs, "exact": bool, "err": PyTorch's refusal or "",
   "doc": why cgrad's documentation says it refuses the case, or "",
   "known": which of KNOWN's deliberate differences the case meets, or ""}.
"""
import json
import math
import random
import sys

try:
    import torch
    import torch.nn.functional as F
    import warnings
    warnings.filterwarnings("ignore")
except ImportError:
    print("make_op_cases: torch not available, skipped")
    sys.exit(77)

# the safetensors writer of the dtype interop test, beside this file
from make_dtype_files import CODES, raw_bytes, save  # noqa: E402

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
      "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}
NAME = {v: k for k, v in DT.items()}
FLOATS = ("float32", "bfloat16", "float16")
ALL = FLOATS + ("int64", "int32", "bool")
# Differences from PyTorch 1.13 that cgrad keeps on purpose: a case that
# meets one is marked, and check_ops counts a difference there apart.
KNOWN = {
    "gelu_overflow": "tanh-GELU's gradient where x^3 overflows or x is not finite: "
                     "PyTorch NaN, cgrad the limit (1 or 0)",
    "scalar_cast": "a 0-d operand beyond the result dtype's range: PyTorch casts it to that "
                   "dtype first (inf), cgrad computes in float32 and rounds the result",
    "var_0_over_0": "var with no more elements than the correction: the gradient 0/0, PyTorch "
                    "inf, cgrad NaN (the output is NaN in both)",
    "topk_k0_scalar": "topk(k=0) of a 0-d tensor: PyTorch returns the element (0-d), cgrad [0]",
    "ce_ignored_nonfinite": "cross-entropy rows that are ignored get a zero gradient in cgrad; "
                            "PyTorch's is NaN when such a row has a non-finite logit",
    "bce_limit": "bce_with_logits at x = -inf, or +inf with y = 1: PyTorch NaN, cgrad the "
                 "limit (0 or inf)",
    "relu_neg_zero": "relu(-0.0): PyTorch -0.0, cgrad +0.0",
    "lse_neginf_row": "logsumexp of a row of -inf (or of no elements) is -inf in both; its "
                      "gradient is 0 in cgrad, NaN in PyTorch (exp(-inf - -inf))",
    "attn_nan_row": "fused attention, a query whose row of scores is NaN (every key masked, or "
                    "a NaN or inf score among the keys it sees): its output NaN in both; its "
                    "weights NaN at its padded keys and 0 at its causal ones (PyTorch: NaN at "
                    "all); the backward's NaN reaches that query's dq and the dk and dv of keys "
                    "it masks, where PyTorch's masked_fill zeroes the masked scores' gradient "
                    "(dq 0 for a query with every key masked, dk 0 at masked keys)",
    "nan_grad_paths": "the gradient at a NaN input of hardswish, relu6, hardtanh, selu, celu, "
                      "softshrink and hardshrink: PyTorch 1.13's scalar loop (short tensors, a "
                      "tensor's last elements) gives g (or g times the scale) and its vectorised "
                      "loop NaN or 0; cgrad gives the scalar loop's everywhere, as its elu",
    "norm_mixed": "layer_norm and RMSNorm of a bfloat16 x with float32 weights: PyTorch's "
                  "layer_norm refuses the mix and its composed RMSNorm promotes to float32; "
                  "cgrad computes in float32 and returns x's dtype (its parameters are "
                  "float32), as PyTorch's batch_norm does; the reference is PyTorch's float32 "
                  "norm rounded",
    "prod_nonfinite_grad": "prod and cumprod's gradient on a line holding inf or NaN: cgrad's "
                           "is the product of the other elements (finite where they are), "
                           "PyTorch's divides the product by the element (NaN)",
    "lcse_neginf_run": "logcumsumexp's gradient where the output is still -inf (a leading run "
                       "of -inf): 0 in cgrad (the limit), NaN in PyTorch (exp(-inf - -inf))",
    "trace_tall": "trace of a matrix of more rows than columns: PyTorch 1.13's gradient also "
                  "puts g at flat indices of step n + 1 past the diagonal (trace_backward's "
                  "arange: (3, 0) of a [4, 2]), cgrad's is g on the diagonal alone",
    "histc_nan": "histc over a given range of an input holding NaN: PyTorch 1.13 counts each NaN "
                 "in the first bin (its bin index of NaN, cast, wraps to 0), cgrad leaves NaN out "
                 "as later PyTorch does",
    "isclose_nan_broadcast": "isclose(equal_nan=True) where a's shape is not the broadcast one: "
                             "PyTorch 1.13's in-place __iand__ refuses ('output with shape ... "
                             "doesn't match the broadcast shape'), cgrad computes it",
    "attn_masked_v_nonfinite": "fused attention, NaN or inf in v at a masked key: the output NaN "
                               "in both (0 * NaN in P v); the fused backward's dk is NaN at the "
                               "masked keys too, where PyTorch's masked_fill gives 0",
}
EPS = {torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -10}


R = random.Random(20261129)
torch.manual_seed(20261129)


# ------------------------------------------------------------ inputs
def values(shape, dt, kind="normal", special=0.0):
    """A base tensor of dtype dt; special: the share of special values."""
    n = math.prod(shape)
    if dt == "bool":
        return torch.rand(shape) < 0.5
    if dt in ("int64", "int32"):
        return torch.randint(-5, 6, shape, dtype=DT[dt])
    if kind == "pos":
        t = torch.rand(shape, dtype=torch.float64) * 3 + 0.05
    elif kind == "unit":
        t = torch.rand(shape, dtype=torch.float64)
    else:
        t = torch.randn(shape, dtype=torch.float64) * 2
    if special and n:
        flat = t.view(-1)
        for i in range(n):
            if R.random() < special:
                flat[i] = R.choice([math.inf, -math.inf, math.nan, -0.0, 0.0, 1e30, -3e38, 1e-30])
    return t.to(DT[dt])


def layout(shape, rng, allow=True):
    """A base shape and the views that turn a base of it into `shape`:
    a transpose, then a slice with step 2, then an expand (each optional)."""
    shape = list(shape)
    if not allow or not shape or rng.random() < 0.3:
        return shape, []
    views, cur = [], list(shape)
    if rng.random() < 0.35:  # stride 0: expand from size-1 dims
        dims = [d for d in range(len(cur)) if rng.random() < 0.5]
        if dims:
            views.insert(0, ["expand", list(cur)])
            for d in dims:
                cur[d] = 1
    if rng.random() < 0.5:  # a slice with step 2
        d = rng.randrange(len(cur))
        views.insert(0, ["slice", d, 1, 1 + 2 * cur[d], 2])
        cur[d] = 2 * cur[d] + 1
    if len(cur) >= 2 and (rng.random() < 0.6 or not views):
        d0, d1 = rng.sample(range(len(cur)), 2)
        views.insert(0, ["T", d0, d1])
        cur[d0], cur[d1] = cur[d1], cur[d0]
    return cur, views


def apply_views(t, views):
    for v in views:
        if v[0] == "T":
            t = t.transpose(v[1], v[2])
        elif v[0] == "slice":
            idx = [slice(None)] * t.dim()
            idx[v[1]] = slice(v[2], v[3], v[4])
            t = t[tuple(idx)]
        elif v[0] == "expand":
            t = t.expand(*v[1])
    return t


def rshape(rng, lo=0, hi=3, zero=0.08, sizes=(1, 2, 3, 4, 5)):
    nd = rng.randint(lo, hi)
    return [0 if rng.random() < zero else rng.choice(sizes) for _ in range(nd)]


def bcast_shapes(rng, n=2):
    out = rshape(rng, 0, 4)
    shapes = []
    for _ in range(n):
        drop = rng.randint(0, len(out))
        s = [1 if rng.random() < 0.3 else d for d in out[drop:]]
        shapes.append(s)
    return shapes


# ------------------------------------------------------------ the cases
CASES, TENSORS = [], {}


def run(fn, ins, args):
    try:
        out = fn(ins, args)
    except RuntimeError as e:
        # PyTorch 1.13's CPU kernels lack many float16 ops; cgrad computes
        # them in float32 and rounds (docs/api.md, Dtypes), as later
        # PyTorch does: the same here, through differentiable casts.
        if "'Half'" not in str(e):
            raise
        up = [x.float() if x.dtype == torch.float16 else x for x in ins]
        out = fn(up, args)
        out = tuple(o.half() if o.dtype == torch.float32 else o for o in out) \
            if isinstance(out, (tuple, list)) else (out.half() if out.dtype == torch.float32 else out)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def tol_of(exp, ref, dt, rel=4.0, absk=16.0):
    """Per-element tolerance of a float result exp, given the float64 ref."""
    eps = EPS[dt]
    e, r = exp.double(), ref.double()
    fin = torch.isfinite(r) & torch.isfinite(e)
    scale = r[fin].abs().max().item() if fin.any() else 1.0
    scale = max(scale, 1.0)
    dist = torch.where(fin, (e - r).abs(), torch.zeros_like(r))
    t = rel * eps * torch.where(fin, r.abs(), torch.zeros_like(r)) + 4 * dist + absk * eps * scale
    return t.float()


def json_safe(v):
    """Infinities and NaN as strings ("inf", "-inf", "nan"): JSON has none."""
    return str(v) if isinstance(v, float) and not math.isfinite(v) else v


def add_case(op, ins, args, fn, exact=False, doc="", ref=True, tol=(4.0, 16.0), known=""):
    """ins: [(values, views, needs_grad)]; fn(list of inputs, args) -> output(s).
    known: a difference from PyTorch that cgrad keeps on purpose (KNOWN
    below), which a difference in this case is counted as."""
    i = len(CASES)
    case = {"op": op, "a": {k: json_safe(v) for k, v in args.items()}, "in": [], "exact": exact,
            "doc": doc, "err": "", "n": 0, "known": known}
    bases = []
    for j, (b, views, g) in enumerate(ins):
        g = bool(g and b.is_floating_point())
        TENSORS[f"{i}.b{j}"] = b
        case["in"].append({"dt": NAME[b.dtype], "v": views, "g": g})
        bases.append(b.clone().requires_grad_(g))
    try:
        outs = run(fn, [apply_views(b, c["v"]) for b, c in zip(bases, case["in"])], args)
    except Exception as e:  # PyTorch refuses: cgrad must refuse cleanly
        case["err"] = str(e).splitlines()[0][:200] or type(e).__name__
        CASES.append(case)
        return
    case["n"] = len(outs)
    gins, gouts = [], []
    for k, o in enumerate(outs):
        TENSORS[f"{i}.o{k}"] = o.detach().clone()
        if o.is_floating_point():
            u = torch.randn(o.shape, dtype=torch.float64).to(o.dtype)
            TENSORS[f"{i}.u{k}"] = u
            if o.requires_grad:
                gins.append(o)
                gouts.append(u)
    need = [b for b in bases if b.requires_grad]
    grads = torch.autograd.grad(gins, need, gouts, allow_unused=True) if gins and need else []
    grads = dict(zip([id(b) for b in need], grads))
    # the same op in float64, for the tolerances
    rbases = [(b.detach().double() if b.is_floating_point() else b.detach()).requires_grad_(
        b.requires_grad) for b in bases]
    rgrads = {}
    routs = None
    if ref:
        try:
            routs = run(fn, [apply_views(b, c["v"]) for b, c in zip(rbases, case["in"])], args)
            rg_in = [ro for ro, o in zip(routs, outs) if o.is_floating_point() and o.requires_grad]
            rg_out = [TENSORS[f"{i}.u{k}"].double() for k, o in enumerate(outs)
                      if o.is_floating_point() and o.requires_grad]
            rneed = [b for b in rbases if b.requires_grad]
            if rg_in and rneed:
                rg = torch.autograd.grad(rg_in, rneed, rg_out, allow_unused=True)
                rgrads = {j: g for j, g in zip([j for j, b in enumerate(rbases) if b.requires_grad], rg)}
        except Exception:
            routs = None
    for k, o in enumerate(outs):
        if o.is_floating_point() and not exact:
            r = routs[k] if routs is not None and routs[k].shape == o.shape else o
            TENSORS[f"{i}.t{k}"] = tol_of(o.detach(), r.detach(), o.dtype, *tol)
    for j, b in enumerate(bases):
        g = grads.get(id(b)) if b.requires_grad else None
        if g is None:
            continue
        TENSORS[f"{i}.g{j}"] = g
        r = rgrads.get(j)  # sums (broadcasts, expands) round: never bit for bit
        TENSORS[f"{i}.h{j}"] = tol_of(g, r if r is not None else g, g.dtype, *tol)
    CASES.append(case)


def inp(rng, shape, dt, kind="normal", special=0.0, grad=True, views=True):
    base, v = layout(shape, rng, views)
    return (values(base, dt, kind, special), v, grad)


def float_doc(dts):
    bad = [d for d in dts if d not in FLOATS]
    return f"float op given {bad[0]} (docs/api.md: elementwise math refuses int and bool)" if bad else ""


# ----------------------------------------------------------- unary
UNARY = {
    "neg": (lambda x, a: -x[0], "normal", True),
    "abs": (lambda x, a: x[0].abs(), "normal", True),
    "relu": (lambda x, a: F.relu(x[0]), "normal", True),
    "exp": (lambda x, a: x[0].exp(), "normal", False),
    "log": (lambda x, a: x[0].log(), "pos", False),
    "sqrt": (lambda x, a: x[0].sqrt(), "pos", False),
    "rsqrt": (lambda x, a: x[0].rsqrt(), "pos", False),
    "tanh": (lambda x, a: x[0].tanh(), "normal", False),
    "sigmoid": (lambda x, a: x[0].sigmoid(), "normal", False),
    "gelu": (lambda x, a: F.gelu(x[0], approximate="tanh"), "normal", False),
    "gelu_erf": (lambda x, a: F.gelu(x[0]), "normal", False),
    "silu": (lambda x, a: F.silu(x[0]), "normal", False),
    "sin": (lambda x, a: x[0].sin(), "normal", False),
    "cos": (lambda x, a: x[0].cos(), "normal", False),
    "softplus": (lambda x, a: F.softplus(x[0]), "normal", False),
    "pow": (lambda x, a: x[0].pow(a["p"]), "pos", False),
    "clamp": (lambda x, a: x[0].clamp(a["lo"], a["hi"]), "normal", True),
    "adds": (lambda x, a: x[0] + a["s"], "normal", False),
    "muls": (lambda x, a: x[0] * a["s"], "normal", False),
}


def gen_unary(rng):
    for name, (fn, kind, exact) in UNARY.items():
        for _ in range(14):
            dt = rng.choice(FLOATS + FLOATS + ("int64", "bool"))
            special = 0.15 if rng.random() < 0.3 else 0.0
            args = {}
            if name == "pow":
                args["p"] = rng.choice([2.0, 3.0, 0.5, -1.0, 1.5, 0.0, 1.0])
                kind = rng.choice(["pos", "normal"])
            if name == "clamp":
                lo = rng.uniform(-1, 0.2)
                args = {"lo": lo, "hi": lo + rng.choice([0.0, 0.5, 2.0])}
            if name in ("adds", "muls"):
                args["s"] = rng.choice([0.5, -2.0, 3.0, 0.0, 1e-3])
            if name == "softplus":  # cg_softplus takes them (F.softplus's defaults)
                args = {"beta": 1.0, "threshold": 20.0}
            x = inp(rng, rshape(rng, 0, 4), dt, kind, special)
            known = ""
            if x[0].is_floating_point():
                b = x[0].double()
                if name == "gelu" and (~torch.isfinite(b) | (b.abs() > 1e13)).any():
                    known = KNOWN["gelu_overflow"]
                if name == "relu" and ((b == 0) & torch.signbit(b)).any():
                    known = KNOWN["relu_neg_zero"]
            add_case(name, [x], args, fn, exact=exact, doc=float_doc([dt]), known=known)


# ----------------------------------------------------------- binary
def scalar_cast(xs):
    """KNOWN["scalar_cast"] when a 0-d float operand overflows the dtype of
    a float operand with dims."""
    (a, va, _), (b, vb, _) = xs
    ta, tb = apply_views(a, va), apply_views(b, vb)
    if not (a.is_floating_point() and b.is_floating_point()):
        return ""
    for s, o in ((ta, tb), (tb, ta)):
        if s.dim() == 0 and o.dim() > 0 and s.double().abs().item() > torch.finfo(o.dtype).max:
            return KNOWN["scalar_cast"]
    return ""


BINARY = {"add": lambda x, a: x[0] + x[1], "sub": lambda x, a: x[0] - x[1],
          "mul": lambda x, a: x[0] * x[1], "div": lambda x, a: x[0] / x[1]}


def gen_binary(rng):
    for name, fn in BINARY.items():
        for _ in range(45):
            sa, sb = bcast_shapes(rng)
            pair = rng.choice([("float32", "float32")] * 4 + [(rng.choice(ALL), rng.choice(ALL))])
            special = 0.15 if rng.random() < 0.3 else 0.0
            xs = [inp(rng, s, d, "normal", special) for s, d in zip((sa, sb), pair)]
            add_case(name, xs, {}, fn, doc=float_doc(pair), known=scalar_cast(xs))


# -------------------------------------------------- comparisons, logic
CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


def gen_compare(rng):
    for name, f in CMP.items():
        for _ in range(12):
            sa, sb = bcast_shapes(rng)
            pair = (rng.choice(ALL), rng.choice(ALL))
            xs = [inp(rng, s, d, "normal", 0.2, grad=False) for s, d in zip((sa, sb), pair)]
            if rng.random() < 0.3:  # equal values somewhere
                xs[1] = (xs[0][0].to(DT[pair[1]]), xs[0][1], False)
            add_case(name, xs, {}, lambda x, a, f=f: f(x[0], x[1]), exact=True)
            v = rng.choice([0.0, 1.0, -0.5, 2.0, math.inf, 3.0])
            x = inp(rng, rshape(rng), rng.choice(ALL), "normal", 0.2, grad=False)
            add_case(name + "_scalar", [x], {"v": v}, lambda x, a, f=f: f(x[0], a["v"]), exact=True)
    for name, f in {"logical_and": torch.logical_and, "logical_or": torch.logical_or}.items():
        for _ in range(10):
            sa, sb = bcast_shapes(rng)
            pair = rng.choice([("bool", "bool")] * 3 + [(rng.choice(ALL), rng.choice(ALL))])
            xs = [inp(rng, s, d, "normal", 0.2, grad=False) for s, d in zip((sa, sb), pair)]
            doc = "" if pair == ("bool", "bool") else "logical ops take bool (docs/api.md table)"
            add_case(name, xs, {}, lambda x, a, f=f: f(x[0], x[1]), exact=True, doc=doc)
    for _ in range(10):
        dt = rng.choice(["bool", "bool", rng.choice(ALL)])
        x = inp(rng, rshape(rng), dt, "normal", 0.2, grad=False)
        add_case("logical_not", [x], {}, lambda x, a: torch.logical_not(x[0]), exact=True,
                 doc="" if dt == "bool" else "logical ops take bool (docs/api.md table)")


# ------------------------------------------------------ where, masked_fill
def gen_select_ops(rng):
    for _ in range(30):
        sc, sa, sb = bcast_shapes(rng, 3)
        da, db = rng.choice([("float32", "float32")] * 3 + [(rng.choice(ALL), rng.choice(ALL))])
        c = inp(rng, sc, "bool", grad=False)
        xs = [c, inp(rng, sa, da, special=0.1), inp(rng, sb, db, special=0.1)]
        add_case("where", xs, {}, lambda x, a: torch.where(x[0], x[1], x[2]), exact=True)
    for _ in range(25):
        out = rshape(rng, 0, 4)
        ms = [1 if rng.random() < 0.3 else d for d in out[rng.randint(0, len(out)):]]
        dt = rng.choice(["float32", "float32", rng.choice(ALL)])
        v = rng.choice([0.0, -1e9, -math.inf, 2.5, 1.0])
        if dt in ("int64", "int32", "bool"):
            v = rng.choice([0.0, 1.0, -3.0])
        xs = [inp(rng, out, dt, special=0.1), inp(rng, ms, "bool", grad=False)]
        add_case("masked_fill", xs, {"v": v}, lambda x, a: x[0].masked_fill(x[1], a["v"]),
                 exact=True)


# -------------------------------------------------------------- reductions
def dims_of(rng, nd):
    if nd == 0 or rng.random() < 0.2:
        return []
    k = rng.randint(1, nd)
    ds = rng.sample(range(nd), k)
    return [d - nd if rng.random() < 0.3 else d for d in ds]


def gen_reduce(rng):
    for name in ("sum", "mean", "var"):
        for _ in range(35):
            shape = rshape(rng, 0, 4)
            dt = rng.choice(["float32", "float32", "bfloat16", "float16", rng.choice(ALL)])
            dims, keep = dims_of(rng, len(shape)), rng.random() < 0.5
            args = {"dims": dims, "keep": keep}
            if name == "var":
                args["corr"] = rng.choice([0, 1])
            x = inp(rng, shape, dt, special=0.05 if rng.random() < 0.2 else 0.0)

            def f(x, a, name=name):
                d = a["dims"] if a["dims"] else list(range(x[0].dim()))
                if name == "sum":
                    return x[0].sum(d, keepdim=a["keep"]) if d else x[0].sum()
                if name == "mean":
                    return x[0].mean(d, keepdim=a["keep"]) if d else x[0].mean()
                return torch.var(x[0], d if d else None, correction=a["corr"], keepdim=a["keep"])
            red = [shape[d] for d in (dims if dims else range(len(shape)))]
            known = KNOWN["var_0_over_0"] if name == "var" and math.prod(red) <= args.get(
                "corr", 0) else ""
            add_case(name, [x], args, f, doc=float_doc([dt]), tol=(4.0, 64.0), known=known)
    for name in ("sum_all", "mean_all"):
        for _ in range(10):
            dt = rng.choice(["float32", "bfloat16", "float16"])
            x = inp(rng, rshape(rng, 0, 4), dt)
            f = (lambda x, a: x[0].sum()) if name == "sum_all" else (lambda x, a: x[0].mean())
            add_case(name, [x], {}, f, tol=(4.0, 64.0))
    gen_extreme(rng, "max", torch.max, torch.argmax)
    for _ in range(30):
        shape = rshape(rng, 0, 3)
        nd = len(shape)
        dim = rng.randrange(-max(nd, 1), max(nd, 1))
        size = shape[dim] if nd else 1
        k = rng.randint(0, size + (1 if rng.random() < 0.1 else 0))
        dt = rng.choice(["float32", "float32", "bfloat16", rng.choice(ALL)])
        x = inp(rng, shape, dt)  # no ties: PyTorch orders tied indices as it likes
        if any(v[0] == "expand" for v in x[1]) or dt not in ("float32", "float16"):
            x = (values(shape, dt), [], True)
            if dt == "bfloat16":  # distinct values along every dim
                x = (torch.randperm(max(math.prod(shape), 1))[:math.prod(shape)]
                     .reshape(shape).to(torch.bfloat16), [], True)
        largest = rng.random() < 0.7
        add_case("topk", [x], {"k": k, "dim": dim, "largest": largest},
                 lambda x, a: tuple(torch.topk(x[0], a["k"], a["dim"], a["largest"], True)),
                 exact=True,  # integers since 2026-12-08 (bool: PyTorch refuses it too)
                 known=KNOWN["topk_k0_scalar"] if k == 0 and not shape else "")
    for _ in range(25):
        shape = rshape(rng, 0, 3)
        nd = len(shape)
        dim = rng.randrange(-max(nd, 1), max(nd, 1))
        dt = rng.choice(["float32", "float32", "bfloat16", rng.choice(ALL)])
        x = inp(rng, shape, dt)
        add_case("cumsum", [x], {"dim": dim}, lambda x, a: torch.cumsum(x[0], a["dim"]),
                 doc=float_doc([dt]), tol=(4.0, 64.0))


def gen_extreme(rng, name, f, argf):
    """torch.max / torch.min (values and indices) along a dim, and argmax /
    argmin, with ties and special values."""
    for _ in range(40):
        shape = rshape(rng, 0, 4)
        nd = len(shape)
        dim = rng.randrange(-max(nd, 1), max(nd, 1))
        dt = rng.choice(["float32", "float32", "bfloat16", "float16", rng.choice(ALL)])
        keep = rng.random() < 0.5
        x = inp(rng, shape, dt, special=0.1 if rng.random() < 0.3 else 0.0)
        if rng.random() < 0.3:  # ties
            x = (x[0].double().round().to(x[0].dtype), x[1], x[2]) if x[0].is_floating_point() else x
        add_case(name, [x], {"dim": dim, "keep": keep},
                 lambda x, a: tuple(f(x[0], a["dim"], keepdim=a["keep"])),
                 exact=True, doc="" if dt in FLOATS else float_doc([dt]))
        add_case("arg" + name, [x], {"dim": dim, "keep": keep},
                 lambda x, a: argf(x[0], a["dim"], keepdim=a["keep"]), exact=True,
                 doc="" if dt in FLOATS else f"arg{name} takes floats (docs/api.md table)")


# ------------------------------------------------------------------ matmul
def promoted(x):
    if not all(t.is_floating_point() for t in x):
        return x
    dt = x[0].dtype
    for t in x[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return [t.to(dt) for t in x]


def gen_matmul(rng):
    for _ in range(60):
        n, k, m = (rng.choice([0, 1, 2, 3, 5, 8]) for _ in range(3))
        batch = rshape(rng, 0, 2, 0.05, (1, 2, 3))
        kind = rng.choice(["1x1", "1x2", "2x1", "2x2", "bb", "bb", "b2", "2b", "b1", "1b"])
        ba = [1 if rng.random() < 0.3 else d for d in batch][rng.randint(0, len(batch)):]
        bb = [1 if rng.random() < 0.3 else d for d in batch][rng.randint(0, len(batch)):]
        sa = {"1x1": [k], "1x2": [k], "2x1": [n, k], "2x2": [n, k], "bb": ba + [n, k],
              "b2": ba + [n, k], "2b": [n, k], "b1": ba + [n, k], "1b": [k]}[kind]
        sb = {"1x1": [k], "1x2": [k, m], "2x1": [k], "2x2": [k, m], "bb": bb + [k, m],
              "b2": [k, m], "2b": bb + [k, m], "b1": [k], "1b": bb + [k, m]}[kind]
        if rng.random() < 0.05:
            sb = list(sb)
            sb[-2 if len(sb) > 1 else -1] += 1  # k mismatch: refused by both
        pair = rng.choice([("float32", "float32")] * 5 + [("bfloat16", "bfloat16"),
                                                          ("float32", "bfloat16"),
                                                          ("int64", "int64")])
        xs = [inp(rng, sa, pair[0]), inp(rng, sb, pair[1])]
        # PyTorch refuses mixed float dtypes; cgrad promotes (docs/api.md, Dtypes)
        add_case("matmul", xs, {}, lambda x, a: torch.matmul(*promoted(x)),
                 doc=float_doc(pair), tol=(8.0, 64.0))


# -------------------------------------------------------------- softmax
def gen_softmax(rng):
    for name in ("softmax", "log_softmax"):
        for _ in range(30):
            shape = rshape(rng, 0, 3)
            nd = len(shape)
            dim = rng.randrange(-max(nd, 1), max(nd, 1))
            dt = rng.choice(["float32", "float32", "bfloat16", "float16"])
            sp = 0.1 if rng.random() < 0.3 else 0.0
            x = inp(rng, shape, dt, special=sp)
            f = getattr(torch, name)
            add_case(name, [x], {"dim": dim}, lambda x, a, f=f: f(x[0], a["dim"]), tol=(8.0, 32.0))


# ----------------------------------------------------------------- views
def gen_views(rng):
    for _ in range(25):
        shape = rshape(rng, 1, 4)
        perm = list(range(len(shape)))
        rng.shuffle(perm)
        dt = rng.choice(ALL)
        add_case("permute", [inp(rng, shape, dt)], {"perm": perm},
                 lambda x, a: x[0].permute(*a["perm"]), exact=True)
        d0, d1 = rng.randrange(len(shape)), rng.randrange(len(shape))
        add_case("transpose", [inp(rng, shape, dt)], {"d0": d0, "d1": d1},
                 lambda x, a: x[0].transpose(a["d0"], a["d1"]), exact=True)
    for _ in range(40):
        shape = rshape(rng, 1, 3)
        dim = rng.randrange(len(shape))
        size = shape[dim]
        start = rng.randint(-size - 2, size + 2)
        stop = rng.randint(-size - 2, size + 2)
        step = rng.choice([1, 1, 2, 3])
        dt = rng.choice(ALL)

        def sl(x, a):
            idx = [slice(None)] * x[0].dim()
            idx[a["dim"]] = slice(a["start"], a["stop"], a["step"])
            return x[0][tuple(idx)]
        add_case("slice", [inp(rng, shape, dt)],
                 {"dim": dim, "start": start, "stop": stop, "step": step}, sl, exact=True)
        st, ln = rng.randint(-size, size), rng.randint(0, size)
        add_case("narrow", [inp(rng, shape, dt)], {"dim": dim, "start": st, "len": ln},
                 lambda x, a: x[0].narrow(a["dim"], a["start"], a["len"]), exact=True)
        ix = rng.randint(-size - 1, size)
        add_case("select", [inp(rng, shape, dt)], {"dim": dim, "index": ix},
                 lambda x, a: x[0].select(a["dim"], a["index"]), exact=True)
    for _ in range(25):
        shape = rshape(rng, 0, 4, 0.05, (1, 1, 2, 3))
        nd = len(shape)
        dt = rng.choice(ALL)
        d = rng.randrange(-max(nd, 1), max(nd, 1))
        add_case("squeeze", [inp(rng, shape, dt)], {"dim": d},
                 lambda x, a: x[0].squeeze(a["dim"]), exact=True,
                 doc="" if nd == 0 or shape[d] == 1 else
                 "core/tensor.h: squeeze's dim must have size 1")
        d = rng.randrange(-nd - 1, nd + 1)
        add_case("unsqueeze", [inp(rng, shape, dt)], {"dim": d},
                 lambda x, a: x[0].unsqueeze(a["dim"]), exact=True)
        small = [1 if rng.random() < 0.5 else s for s in shape]
        target = [rng.choice([2, 3]) if s == 1 and rng.random() < 0.6 else s for s in small]
        if rng.random() < 0.3:
            target = [rng.choice([1, 2])] + target
        if rng.random() < 0.2 and target:
            target[-1] = -1
        add_case("expand", [inp(rng, small, dt, views=False)], {"shape": target},
                 lambda x, a: x[0].expand(a["shape"]), exact=True)
    for _ in range(40):
        shape = rshape(rng, 0, 4, 0.05)
        n = math.prod(shape)
        dt = rng.choice(ALL)
        # a new shape of n elements
        facs = [f for f in (1, 2, 3, 4, 5, 6) if f and n % f == 0] if n else [0, 1, 2]
        new, left = [], n
        for _ in range(rng.randint(0, 3)):
            f = rng.choice(facs) if n else rng.choice([1, 2])
            if n and left % f == 0:
                new.append(f)
                left //= f
        if n:
            new.append(left)
        elif not new or 0 not in new:
            new.append(0)
        rng.shuffle(new)
        if rng.random() < 0.3 and new:
            new[rng.randrange(len(new))] = -1 if n else new[0]
        if rng.random() < 0.05:
            new = new + [7]  # wrong size: refused by both
        for name in ("reshape", "view"):
            f = (lambda x, a: x[0].reshape(a["shape"])) if name == "reshape" else \
                (lambda x, a: x[0].view(a["shape"]))
            add_case(name, [inp(rng, shape, dt)], {"shape": new}, f, exact=True)
    for _ in range(20):
        shape = rshape(rng, 0, 4)
        dt = rng.choice(ALL)
        add_case("contiguous", [inp(rng, shape, dt)], {}, lambda x, a: x[0].contiguous(),
                 exact=True)
        add_case("clone", [inp(rng, shape, dt)], {}, lambda x, a: x[0].clone(), exact=True)
    for _ in range(50):
        shape = rshape(rng, 0, 3)
        src, dst = rng.choice(ALL), rng.choice(ALL)
        sp = 0.15 if src in FLOATS and dst in FLOATS + ("bool",) else 0.0
        kind = "normal"
        x = inp(rng, shape, src, kind, sp)
        if src in FLOATS and dst in ("int64", "int32"):
            x = ((x[0].double() * 1e3).to(DT[src]), x[1], x[2])
        add_case("to", [x], {"dt": dst}, lambda x, a: x[0].to(DT[a["dt"]]), exact=True)


# ------------------------------------------------------ concat, stack, split
def gen_join(rng):
    for name in ("concat", "stack"):
        for _ in range(30):
            shape = rshape(rng, 1, 3)
            nd = len(shape)
            n = rng.randint(1, 4)
            dim = rng.randrange(-nd - (name == "stack"), nd + (name == "stack"))
            mixed = rng.random() < 0.3
            dts = [rng.choice(ALL) if mixed else "float32" for _ in range(n)]
            xs = []
            for j in range(n):
                s = list(shape)
                if name == "concat":
                    s[dim] = rng.choice([0, 1, 2, 3])
                xs.append(inp(rng, s, dts[j]))
            f = (lambda x, a: torch.cat(x, a["dim"])) if name == "concat" else \
                (lambda x, a: torch.stack(x, a["dim"]))
            add_case(name, xs, {"dim": dim}, f, exact=True)
    for _ in range(20):
        shape = rshape(rng, 1, 3)
        dim = rng.randrange(len(shape))
        size, sizes = shape[dim], []
        while sum(sizes) < size:
            sizes.append(rng.randint(0, size - sum(sizes)))
        if not sizes:
            sizes = [0]
        dt = rng.choice(ALL)
        add_case("split", [inp(rng, shape, dt)], {"dim": dim, "sizes": sizes},
                 lambda x, a: tuple(torch.split(x[0], a["sizes"], a["dim"])), exact=True)


# ------------------------------------------------------------ index ops
def ids(rng, shape, hi, bad=0.0):
    t = torch.randint(0, max(hi, 1), shape, dtype=torch.int64) if hi else \
        torch.zeros(shape, dtype=torch.int64)
    if bad and t.numel() and rng.random() < bad:
        t.view(-1)[0] = rng.choice([hi, -1, hi + 5])
    return t


def gather_shapes(rng):
    """An input's shape, a dim and an index's shape for gather and
    scatter_add: the index no larger than the input but along dim."""
    shape = rshape(rng, 1, 3, 0.05)
    nd = len(shape)
    dim = rng.randrange(-nd, nd)
    ishape = [rng.randint(0, s) for s in shape]
    ishape[dim] = rng.choice([0, 1, 2, 4])
    return shape, dim, ishape


def gen_index(rng):
    for _ in range(35):
        shape = rshape(rng, 1, 3, 0.05)
        dim = rng.randrange(-len(shape), len(shape))
        size = shape[dim]
        n = rng.choice([0, 1, 2, 4, 7])
        dt = rng.choice(["float32", "float32", rng.choice(ALL)])
        ishape = [] if rng.random() < 0.15 else [n]
        idx = ids(rng, ishape, size, 0.08)
        xs = [inp(rng, shape, dt), (idx, [], False)]
        add_case("index_select", xs, {"dim": dim},
                 lambda x, a: torch.index_select(x[0], a["dim"], x[1]), exact=True)
    for _ in range(30):
        v, d = rng.choice([1, 3, 7]), rng.choice([0, 1, 4])
        dt = rng.choice(["float32", "float32", "bfloat16"])
        table = inp(rng, [v, d], dt)
        idx = ids(rng, rshape(rng, 0, 3), v, 0.08)
        add_case("embedding", [table, (idx, [], False)], {}, lambda x, a: F.embedding(x[1], x[0]),
                 exact=True)
    for _ in range(35):
        shape, dim, ishape = gather_shapes(rng)
        dt = rng.choice(["float32", "float32", rng.choice(ALL)])
        idx = ids(rng, ishape, shape[dim], 0.08)
        base, v = layout(ishape, rng)
        ib = torch.zeros(base, dtype=torch.int64)
        apply_views(ib, v).copy_(idx) if not any(x[0] == "expand" for x in v) else None
        if any(x[0] == "expand" for x in v):
            ib, v = idx, []
        add_case("gather", [inp(rng, shape, dt), (ib, v, False)], {"dim": dim},
                 lambda x, a: torch.gather(x[0], a["dim"], x[1]), exact=True,
                 doc="" if dt == "float32" else "gather takes float32 (docs/api.md table)")


def gen_index_add(rng):
    """index_add and scatter_add (out of place, differentiable in the input
    and the source), and nonzero; after the others so that their cases stay
    as they were."""
    for _ in range(30):
        shape = rshape(rng, 1, 3, 0.05)
        dim = rng.randrange(-len(shape), len(shape))
        n = rng.choice([0, 1, 3, 6])
        sshape = list(shape)
        sshape[dim] = n
        dt = rng.choice(["float32", "float32", "float32", rng.choice(ALL)])
        idx = ids(rng, [] if n == 1 and rng.random() < 0.2 else [n], shape[dim], 0.08)
        if idx.dim() == 0:
            sshape[dim] = 1
        if rng.random() < 0.1:  # a source of the wrong size
            sshape[dim] += 1
        xs = [inp(rng, shape, dt), (idx, [], False), inp(rng, sshape, dt)]
        add_case("index_add", xs, {"dim": dim},
                 lambda x, a: torch.index_add(x[0], a["dim"], x[1], x[2]),
                 doc="" if dt == "float32" else "index_add takes float32 (docs/api.md table)")
    for _ in range(30):
        shape, dim, ishape = gather_shapes(rng)
        dt = rng.choice(["float32", "float32", "float32", rng.choice(ALL)])
        idx = ids(rng, ishape, shape[dim], 0.08)
        xs = [inp(rng, shape, dt), (idx, [], False), inp(rng, ishape, dt)]
        add_case("scatter_add", xs, {"dim": dim},
                 lambda x, a: torch.scatter_add(x[0], a["dim"], x[1], x[2]),
                 doc="" if dt == "float32" else "scatter_add takes float32 (docs/api.md table)")
    for _ in range(20):
        x = inp(rng, rshape(rng, 0, 4), rng.choice(ALL), "normal", 0.3, grad=False)
        if x[0].is_floating_point() and rng.random() < 0.5:  # many zeros
            x = (x[0] * (torch.rand(x[0].shape) < 0.5), x[1], False)
        add_case("nonzero", [x], {}, lambda x, a: torch.nonzero(x[0]), exact=True)


# -------------------------------------------------------------- tril/triu
def gen_tri(rng):
    for name in ("tril", "triu"):
        for _ in range(15):
            shape = rshape(rng, 2, 4)
            diag = rng.randint(-3, 3)
            dt = rng.choice(["float32", "float32", rng.choice(ALL)])
            f = getattr(torch, name)
            add_case(name, [inp(rng, shape, dt, special=0.1)], {"diag": diag},
                     lambda x, a, f=f: f(x[0], a["diag"]), exact=True)


# -------------------------------------------------------------- nn ops
FUSED = "fused nn kernel takes float32 (docs/api.md table)"


def nn_doc(dts):
    return "" if all(d == "float32" for d in dts) else FUSED


def class_red(a):
    """The class losses' reduction (cg_reduction's order; mean when absent)."""
    return ("mean", "sum", "none")[a.get("red", 0)]


def ce_torch(x, a, weight=None):
    c = x[0].shape[-1]
    out = F.cross_entropy(x[0].reshape(-1, c), x[1].reshape(-1), weight=weight,
                          ignore_index=a["ignore"], label_smoothing=a["ls"],
                          reduction=class_red(a))
    return out.reshape(x[1].shape) if out.dim() else out


def nll_torch(x, a, weight=None):
    c = x[0].shape[-1]
    out = F.nll_loss(x[0].reshape(-1, c), x[1].reshape(-1), weight=weight,
                     ignore_index=a["ignore"], reduction=class_red(a))
    return out.reshape(x[1].shape) if out.dim() else out


def rms_torch(x, a):
    y = x[0] * torch.rsqrt((x[0] * x[0]).mean(-1, keepdim=True) + a["eps"])
    return y * x[1] if len(x) > 1 and x[1] is not None else y


def attn_weights(x, a):
    """softmax(q k^T / sqrt(d)) with cg_attention's masks: causal, and a
    [B, Tk] key-padding mask as x[3] (True = masked)."""
    q, k = x[0], x[1]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    tq, tk = s.shape[-2], s.shape[-1]
    mask = torch.zeros(s.shape, dtype=torch.bool)
    if a["causal"]:
        mask = mask | torch.ones(tq, tk, dtype=torch.bool).triu(1)
    if len(x) > 3:
        mask = mask | x[3][:, None, None, :]
    return torch.softmax(s.masked_fill(mask, -math.inf), -1)


def attn_torch(x, a):
    return attn_weights(x, a) @ x[2]


def sdpa_torch(x, a):
    """cg_scaled_dot_product_attention's meaning in PyTorch 1.13 terms: the
    math of nn.MultiheadAttention's attn_mask on split heads (bool: True =
    masked, masked_fill -inf; float: added); a 3-d mask is [B, Tq, Tk]
    (cgrad's, where MultiheadAttention's is [B*H, Tq, Tk]); bfloat16 q, k, v
    read as their float32 values."""
    q, k, v, m = x[0].float(), x[1].float(), x[2].float(), x[3]
    if m.dim() not in (2, 3, 4):
        raise RuntimeError(f"attn_mask's dimension {m.dim()} is not supported")
    if m.dtype != torch.bool and not m.is_floating_point():
        raise RuntimeError("only bool and floating types of attn_mask are supported")
    if m.dim() == 3:
        m = m.unsqueeze(1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(m, -math.inf) if m.dtype == torch.bool else s + m
    w = torch.softmax(s, -1)
    return w @ v, w.detach()


def attn_w_torch(x, a):
    """attn_torch and its weights (cg_attention's weights_out: detached)."""
    w = attn_weights(x, a)
    return w @ x[2], w.detach()


def gen_attention_edges(rng):
    """Attention at its edges against PyTorch's math (robustness round
    twenty-two): fully masked queries, NaN and inf at masked keys, Tq != Tk
    with causal, one query or key, head dims off the vector width, and the
    weights; then cg_scaled_dot_product_attention's masks of every dtype and
    shape (bool, float -inf, large negative, rows all masked, bfloat16 and
    float16 masks, a learnable bias) and the ones it refuses."""
    def qkv(b, h, tq, tk, dh, dt="float32", views=True):
        return [inp(rng, [b, h, t, dh], dt, views=views) for t in (tq, tk, tk)]
    shapes = [(2, 2, 5, 5, 3), (1, 2, 7, 3, 17), (1, 1, 3, 7, 33), (2, 1, 1, 6, 5), (1, 2, 4, 1, 8)]
    for b, h, tq, tk, dh in shapes:  # Tq != Tk, causal or not, odd head dims, with the weights
        for causal in (False, True):
            xs = qkv(b, h, tq, tk, dh)
            if tk > 1 and rng.random() < 0.7:
                kp = torch.rand(b, tk) < 0.4
                kp[:, 0] = False
                xs.append((kp, [], False))
            add_case("attention_w", xs, {"causal": causal}, attn_w_torch, tol=(16.0, 64.0))
    for causal in (False, True):  # every key of a query masked
        xs = qkv(2, 2, 4, 5, 4)
        kp = torch.zeros(2, 5, dtype=torch.bool)
        kp[1] = True  # the second sequence all padding
        if causal:
            kp[0, 0] = True  # the first sequence's query 0 sees only key 0
        xs.append((kp, [], False))
        add_case("attention_w", xs, {"causal": causal}, attn_w_torch, tol=(16.0, 64.0),
                 known="attn_nan_row")
    for which in (1, 2):  # NaN and inf at a masked key, in k then in v
        for bad in (math.nan, math.inf, -math.inf):
            for causal in (False, True):
                xs = qkv(1, 2, 6, 6, 4, views=False)
                kp = torch.zeros(1, 6, dtype=torch.bool)
                kp[0, 3] = True
                xs[which][0][0, :, 3, 1] = bad
                if causal:  # and at a key only the causal mask hides from queries 0-4
                    xs[which][0][0, 0, 5, 2] = bad
                xs.append((kp, [], False))
                add_case("attention_w", xs, {"causal": causal}, attn_w_torch, tol=(16.0, 64.0),
                         known="attn_masked_v_nonfinite" if which == 2 else
                         "attn_nan_row" if causal else "")
    B, H, TQ, TK, DH = 2, 2, 3, 5, 4
    ninf = -math.inf
    masks = []
    kp = torch.rand(B, TK) < 0.4
    kp[:, 0] = False
    masks.append(("bool", kp[:, None, None, :]))
    masks.append(("bool", torch.rand(TQ, TK) < 0.3))
    masks.append(("bool", torch.rand(B, TQ, TK) < 0.3))
    masks.append(("bool", torch.rand(1, H, TQ, TK) < 0.3))
    masks.append(("bool", torch.ones(TQ, TK).triu(1) > 0))
    bias = torch.randn(TQ, TK)
    masks.append(("float32", bias))
    masks.append(("float32", torch.zeros(TQ, TK).masked_fill(torch.rand(TQ, TK) < 0.3, ninf)))
    masks.append(("float32", torch.zeros(B, TQ, TK).masked_fill(torch.rand(B, TQ, TK) < 0.3, -1e9)))
    allrow = torch.zeros(B, H, TQ, TK)
    allrow[0, 1, 2, :] = ninf  # a query with every key masked: NaN, as PyTorch
    allrow[1, 0, 1, :] = -1e9  # every key "masked" by a large negative: the plain average
    masks.append(("float32", allrow))
    masks.append(("float32", torch.full((TQ, TK), -3e38)))
    masks.append(("bfloat16", bias.to(torch.bfloat16)))
    masks.append(("float16", bias.masked_fill(torch.rand(TQ, TK) < 0.3, ninf).half()))
    for dt, m in masks:
        xs = qkv(B, H, TQ, TK, DH)
        grad = dt != "bool" and rng.random() < 0.5  # a learnable bias gets its gradient
        xs.append((m, [], grad))
        add_case("sdpa_w", xs, {}, sdpa_torch, tol=(16.0, 64.0))
    for dt in ("float32", "bfloat16"):  # NaN in k and v at a masked key
        for mk in ("bool", "float32"):
            xs = qkv(1, 1, 3, 4, 4, dt, views=False)
            xs[1][0][0, 0, 2, 0] = math.nan
            xs[2][0][0, 0, 3, 1] = math.inf
            m = torch.zeros(3, 4, dtype=torch.bool)
            m[:, 2] = True
            if mk == "float32":
                m = torch.zeros(3, 4).masked_fill(m, ninf)
            xs.append((m, [], False))
            add_case("sdpa_w", xs, {}, sdpa_torch, tol=(16.0, 64.0))
    for m in (torch.zeros(TQ, TK, dtype=torch.int64), torch.zeros(TQ, TK, dtype=torch.int32),
              torch.zeros(TK, dtype=torch.bool), torch.zeros(TQ, TK + 1, dtype=torch.bool),
              torch.zeros(B, 1, H, TQ, TK, dtype=torch.bool)):
        add_case("sdpa_w", qkv(B, H, TQ, TK, DH) + [(m, [], False)], {}, sdpa_torch)


def gen_losses(rng):
    for _ in range(40):
        lead = rshape(rng, 1, 2, 0.05)
        c = rng.choice([1, 2, 5])
        ignore = rng.choice([-100, 0, 1])
        ls = rng.choice([0.0, 0.0, 0.1, 0.5, 1.0])
        dt = rng.choice(["float32"] * 4 + ["bfloat16"])
        t = ids(rng, lead, c, 0.05)
        if rng.random() < 0.3 and t.numel():
            t.view(-1)[rng.randrange(t.numel())] = ignore
        if rng.random() < 0.1:
            t.fill_(ignore)
        x = inp(rng, lead + [c], dt, special=0.05 if rng.random() < 0.2 else 0.0)
        rows = apply_views(x[0], x[1]).reshape(-1, c)
        bad = (~torch.isfinite(rows.double())).any(-1) & (t.reshape(-1) == ignore)
        add_case("cross_entropy", [x, (t, [], False)], {"ignore": ignore, "ls": ls}, ce_torch,
                 doc=nn_doc([dt]), tol=(8.0, 32.0),
                 known=KNOWN["ce_ignored_nonfinite"] if bad.any() else "")
        lp = inp(rng, lead + [c], dt)
        lp = (torch.log_softmax(lp[0].float(), -1).to(lp[0].dtype), lp[1], lp[2])
        add_case("nll_loss", [lp, (t, [], False)], {"ignore": ignore}, nll_torch,
                 doc=nn_doc([dt]), tol=(8.0, 32.0))
    for _ in range(20):
        sa, sb = bcast_shapes(rng)
        same = rng.random() < 0.8
        if same:
            sb = sa
        add_case("mse_loss", [inp(rng, sa, "float32"), inp(rng, sb, "float32")], {},
                 lambda x, a: F.mse_loss(x[0], x[1]), tol=(8.0, 32.0),
                 doc="" if same else "cgrad_check: mse_loss takes one shape (autograd/ops.h)")
        s = rshape(rng, 0, 3)
        ydt = rng.choice(["float32", "float32", "float32", "int64"])
        y = inp(rng, s, "float32", "unit") if ydt == "float32" else \
            (torch.randint(0, 2, s), [], False)
        xb = inp(rng, s, "float32", special=0.05)
        lx, ly = apply_views(xb[0], xb[1]), apply_views(y[0], y[1]).double()
        lim = ((lx == -math.inf) | ((lx == math.inf) & (ly == 1))).any()
        add_case("bce_with_logits", [xb, y], {}, known=KNOWN["bce_limit"] if lim else "",
                 fn=
                 lambda x, a: F.binary_cross_entropy_with_logits(x[0], x[1]),
                 tol=(8.0, 32.0), doc="" if ydt == "float32" else
                 "bce_with_logits: int labels refused (autograd/ops.h)")


def gen_norms(rng):
    for name in ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"):
        for _ in range(18):
            lead = rshape(rng, 0, 2, 0.05)
            d = rng.choice([1, 2, 5, 8])
            dt = rng.choice(["float32"] * 5 + ["bfloat16"])
            eps = rng.choice([1e-5, 1e-3])
            x = inp(rng, lead + [d], dt)
            xs = [x]
            if name.startswith("add"):
                xs.append(inp(rng, lead + [d], "float32"))
            hw, hb = rng.random() < 0.7, rng.random() < 0.7 and "layer" in name
            xs.append(inp(rng, [d], "float32") if hw else None)
            if "layer" in name:
                xs.append(inp(rng, [d], "float32") if hb else None)
            args = {"eps": eps, "w": hw, "b": hb}
            present = [t for t in xs if t is not None]
            # a bfloat16 x alone: computed in float32, x's dtype out (an
            # addend's float32 promotes the sum, as in PyTorch)
            mixed = dt != "float32" and not name.startswith("add")

            def f(x, a, name=name, mixed=mixed):
                it = iter(x)
                h = next(it)
                if mixed:
                    h = h.float()
                if name.startswith("add"):
                    h = h + next(it)
                w = next(it) if a["w"] else None
                if "layer" in name:
                    b = next(it) if a["b"] else None
                    y = F.layer_norm(h, h.shape[-1:], w, b, a["eps"])
                else:
                    y = rms_torch([h, w], a)
                return y.to(DT[dt]) if mixed else y
            add_case(name, present, args, f, tol=(16.0, 64.0),
                     known=KNOWN["norm_mixed"] if mixed else "")


def gen_nn(rng):
    for _ in range(15):
        shape = rshape(rng, 0, 3)
        dt = rng.choice(["float32"] * 3 + ["bfloat16"])
        tr = rng.random() < 0.5
        add_case("dropout", [inp(rng, shape, dt)], {"p": 0.0 if tr else 0.3, "train": tr},
                 lambda x, a: F.dropout(x[0], a["p"], a["train"]), exact=True,
                 doc="" if dt == "float32" or not tr else FUSED)
    for name in ("affine", "affine_relu", "affine_gelu", "affine_gelu_erf"):
        for _ in range(15):
            lead = rshape(rng, 1, 2, 0.05)
            din, dout = rng.choice([1, 3, 8]), rng.choice([1, 4, 6])
            dx = rng.choice(["float32"] * 4 + ["bfloat16"])
            xs = [inp(rng, lead + [din], dx), inp(rng, [dout, din], "float32")]
            hb = rng.random() < 0.7
            if hb:
                xs.append(inp(rng, [dout], "float32"))
            act = name[7:]

            def f(x, a, act=act):
                y = F.linear(x[0].float(), x[1], x[2] if len(x) > 2 else None)
                if act == "relu":
                    return F.relu(y)
                if act == "gelu":
                    return F.gelu(y, approximate="tanh")
                return F.gelu(y) if act == "gelu_erf" else y
            add_case(name, xs, {"b": hb}, f, tol=(16.0, 64.0))
    for _ in range(20):
        b, h = rng.choice([1, 2]), rng.choice([1, 2])
        tq, tk, dh = rng.choice([1, 3, 5]), rng.choice([1, 3, 6]), rng.choice([1, 4, 8])
        causal = rng.random() < 0.4
        xs = [inp(rng, [b, h, tq, dh], "float32"), inp(rng, [b, h, tk, dh], "float32"),
              inp(rng, [b, h, tk, dh], "float32")]
        if rng.random() < 0.5:
            kp = torch.rand(b, tk) < 0.3
            kp[:, 0] = False
            xs.append((kp, [], False))
        add_case("attention", xs, {"causal": causal}, attn_torch, tol=(16.0, 64.0))
    for _ in range(20):
        n, d, v = rng.choice([1, 3, 6]), rng.choice([1, 2, 4]), rng.choice([2, 5])
        ignore = rng.choice([-100, 0])
        ls = rng.choice([0.0, 0.1])
        t = ids(rng, [n], v)
        if rng.random() < 0.3:
            t[0] = ignore
        hb = rng.random() < 0.6
        xs = [inp(rng, [n, d], "float32"), inp(rng, [v, d], "float32")]
        if hb:
            xs.append(inp(rng, [v], "float32"))
        xs.append((t, [], False))

        def lce(x, a):
            logits = F.linear(x[0], x[1], x[2] if a["b"] else None)
            return F.cross_entropy(logits, x[-1], ignore_index=a["ignore"],
                                   label_smoothing=a["ls"])
        add_case("linear_cross_entropy", xs, {"ignore": ignore, "ls": ls, "b": hb}, lce,
                 tol=(16.0, 64.0))


# ------------------------------------------- the ops added on 2026-12 (branch ops)
def gen_min(rng):
    """torch.min(x, dim) and torch.argmin, as max and argmax."""
    gen_extreme(rng, "min", torch.min, torch.argmin)


def gen_maximum(rng):
    """torch.maximum / torch.minimum: broadcast, every dtype pair, special
    values, ties (half the gradient each)."""
    for name in ("maximum", "minimum"):
        f = getattr(torch, name)
        for _ in range(40):
            sa, sb = bcast_shapes(rng)
            pair = rng.choice([("float32", "float32")] * 4 + [(rng.choice(ALL), rng.choice(ALL))])
            special = 0.15 if rng.random() < 0.3 else 0.0
            xs = [inp(rng, s, d, "normal", special) for s, d in zip((sa, sb), pair)]
            if rng.random() < 0.4:  # ties: both on a coarse grid
                xs = [(x[0].double().round().to(x[0].dtype), x[1], x[2])
                      if x[0].is_floating_point() else x for x in xs]
            add_case(name, xs, {}, lambda x, a, f=f: f(x[0], x[1]), doc=float_doc(pair),
                     known=scalar_cast(xs))


def gen_logsumexp(rng):
    """torch.logsumexp over random dims, keepdim, special values and rows
    of -inf (-inf in both; the gradient there KNOWN's lse_neginf_row)."""
    for _ in range(50):
        shape = rshape(rng, 0, 4)
        nd = len(shape)
        dims = dims_of(rng, nd) or ([rng.choice([0, -1])] if nd == 0 else list(range(nd)))
        dt = rng.choice(["float32", "float32", "bfloat16", "float16", rng.choice(ALL)])
        keep = rng.random() < 0.5
        x = inp(rng, shape, dt, special=0.1 if rng.random() < 0.3 else 0.0)
        if dt in FLOATS and nd and shape[0] and rng.random() < 0.3:  # a slice of -inf
            x[0].view(-1)[: max(1, x[0].numel() // 2)] = -math.inf
        f = (lambda x, a: torch.logsumexp(x[0], a["dims"], keepdim=a["keep"]))
        known = ""
        if dt in FLOATS:
            out = f([apply_views(x[0], x[1]).double()], {"dims": dims, "keep": keep})
            known = KNOWN["lse_neginf_row"] if (out == -math.inf).any() else ""
        add_case("logsumexp", [x], {"dims": dims, "keep": keep}, f, doc=float_doc([dt]),
                 tol=(8.0, 32.0), known=known)
    for dims, keep in (([1], False), ([-1], True), ([0, 2], False)):  # rows of -inf
        b = values([2, 3, 4], rng.choice(["float32", "bfloat16"]))
        b[1] = -math.inf
        b[:, 1, :] = -math.inf
        add_case("logsumexp", [(b, [], True)], {"dims": dims, "keep": keep},
                 lambda x, a: torch.logsumexp(x[0], a["dims"], keepdim=a["keep"]),
                 tol=(8.0, 32.0), known=KNOWN["lse_neginf_row"])


def gen_unary_params(rng):
    """F.leaky_relu, F.elu and F.softplus at random parameters (softplus's
    beta x around its threshold), every dtype, special values, their kinks
    (zeros)."""
    ops = {"leaky_relu": (lambda x, a: F.leaky_relu(x[0], a["slope"]), True),
           "elu": (lambda x, a: F.elu(x[0], a["alpha"]), False),
           "softplus": (lambda x, a: F.softplus(x[0], a["beta"], a["threshold"]), False)}
    for name, (fn, exact) in ops.items():
        for _ in range(30):
            dt = rng.choice(FLOATS + FLOATS + ("int64", "bool"))
            special = 0.15 if rng.random() < 0.3 else 0.0
            args = {"leaky_relu": lambda: {"slope": rng.choice([0.01, 0.2, -0.5, 0.0, 1.5])},
                    "elu": lambda: {"alpha": rng.choice([1.0, 0.5, 2.0, -1.0])},
                    "softplus": lambda: {"beta": rng.choice([1.0, 2.0, 0.5, 5.0]),
                                         "threshold": rng.choice([20.0, 1.0, 3.0, 0.0])}}[name]()
            x = inp(rng, rshape(rng, 0, 4), dt, "normal", special)
            if x[0].is_floating_point() and rng.random() < 0.3:  # zeros: the kinks
                x = (x[0] * (torch.rand(x[0].shape) < 0.5), x[1], x[2])
            add_case(name, [x], args, fn, exact=exact, doc=float_doc([dt]))


def gen_rearrange(rng):
    """F.pad (constant; negative sizes crop, some too far: refused by both),
    torch.flip, torch.roll (with and without dims, a dim twice) and
    Tensor.repeat (new leading dims, 0 times), every dtype, strided."""
    for _ in range(40):
        shape = rshape(rng, 0, 4)
        nd = len(shape)
        dt = rng.choice(["float32", "float32", rng.choice(ALL)])
        k = rng.randint(0, nd) if nd else 0
        v = [rng.choice([0, 1, 2, -1, -2, 3]) for _ in range(2 * k)]
        if rng.random() < 0.05:
            v.append(1)  # odd: refused by both
        value = rng.choice([0.0, 1.5, -2.0, 7.0])
        add_case("pad", [inp(rng, shape, dt, special=0.05)], {"v": v, "value": value},
                 lambda x, a: F.pad(x[0], a["v"], value=a["value"]), exact=True)
    # the other modes, where PyTorch 1.13 has kernels: float32, k padded
    # dims under one or two (circular: two) leading dims; sizes inside the
    # mode's limits but for a few (refused by both), negative ones among them
    for _ in range(60):
        mode = rng.choice([1, 2, 3])
        k = rng.randint(1, 3)
        lead = 2 if mode == 3 else rng.randint(1, 2)
        shape = [rng.randint(1, 3) for _ in range(lead)] + [rng.randint(1, 5) for _ in range(k)]
        v = []
        for n in reversed(shape[lead:]):
            for _ in range(2):
                hi = n - 1 if mode == 1 else n if mode == 3 else 4
                v.append(rng.randint(-1 if n > 2 else 0, max(hi, 0)))
        if mode == 3 and any(s < 0 for s in v):
            v = [max(s, 0) for s in v]  # PyTorch's circular crop then wrap can read past the data
        if rng.random() < 0.08:
            v[0] = shape[-1] + (0 if mode == 1 else 1)  # too far: refused by both
            if mode == 2:
                v[0] = v[1] = -shape[-1]  # a negative length
        name = ["constant", "reflect", "replicate", "circular"][mode]
        add_case("pad", [inp(rng, shape, "float32", special=0.05)], {"v": v, "mode": mode},
                 lambda x, a: F.pad(x[0], a["v"], mode=["constant", "reflect", "replicate",
                                                        "circular"][a["mode"]]),
                 exact=True)
    for _ in range(30):
        shape = rshape(rng, 0, 4)
        nd = len(shape)
        dt = rng.choice(["float32", "float32", rng.choice(ALL)])
        dims = [d - nd if rng.random() < 0.3 else d for d in rng.sample(range(nd), rng.randint(0, nd))] \
            if nd else rng.choice([[], [0], [-1]])
        if rng.random() < 0.05 and dims:
            dims.append(dims[0])  # twice: refused by both
        add_case("flip", [inp(rng, shape, dt)], {"dims": dims},
                 lambda x, a: torch.flip(x[0], a["dims"]), exact=True)
    for _ in range(30):
        shape = rshape(rng, 0, 4)
        nd = len(shape)
        dt = rng.choice(["float32", "float32", rng.choice(ALL)])
        if nd == 0 or rng.random() < 0.25:
            args = {"v": [rng.randint(-7, 7)], "dims": []}
        else:
            n = rng.randint(1, 3)
            args = {"v": [rng.randint(-7, 7) for _ in range(n)],
                    "dims": [rng.randrange(-nd, nd) for _ in range(n)]}
        add_case("roll", [inp(rng, shape, dt)], args,
                 lambda x, a: torch.roll(x[0], a["v"], a["dims"]) if a["dims"]
                 else torch.roll(x[0], a["v"][0]), exact=True)
    for _ in range(30):
        shape = rshape(rng, 0, 3)
        nd = len(shape)
        dt = rng.choice(["float32", "float32", "bfloat16", rng.choice(ALL)])
        sizes = [rng.choice([1, 2, 3, 1, 0]) for _ in range(nd + rng.choice([0, 0, 1, 2]))]
        if rng.random() < 0.05 and nd:
            sizes = sizes[1:]  # fewer than the dims: refused by both
        add_case("repeat", [inp(rng, shape, dt)], {"v": sizes},
                 lambda x, a: x[0].repeat(*a["v"]) if a["v"] else x[0].repeat(()), tol=(4.0, 16.0))


REDUCTIONS = ("mean", "sum", "none", "batchmean")  # cg_reduction's order


def gen_losses_more(rng):
    """F.l1_loss, F.smooth_l1_loss (beta 0 too), F.huber_loss and F.kl_div
    (log_target or not, batchmean) at every reduction: float dtypes, ties
    (the kinks), special values, targets 0 (kl_div's target gradient NaN
    there), shapes that differ (cgrad refuses them, as mse_loss)."""
    for name in ("l1_loss", "smooth_l1_loss", "huber_loss", "kl_div"):
        for _ in range(30):
            sa = rshape(rng, 0, 3)
            sb = sa if rng.random() < 0.9 else bcast_shapes(rng)[0]
            dt = rng.choice(["float32", "float32", "float32", "bfloat16"])  # 1.13: no Half backward
            red = rng.randrange(4 if name == "kl_div" else 3)
            args = {"red": red}
            special = 0.1 if rng.random() < 0.2 else 0.0
            if name == "kl_div":
                args["log_target"] = rng.random() < 0.4
                x = inp(rng, sa, dt, "normal", special)
                y = inp(rng, sb, dt, "normal" if args["log_target"] else "unit", special)
                if not args["log_target"] and rng.random() < 0.4:  # zeros in the target
                    y = (y[0] * (torch.rand(y[0].shape) < 0.7), y[1], y[2])
                f = (lambda x, a: F.kl_div(x[0], x[1], reduction=REDUCTIONS[a["red"]],
                                           log_target=a["log_target"]))
            else:
                if name == "smooth_l1_loss":
                    args["beta"] = rng.choice([1.0, 0.5, 0.0, 2.0])
                if name == "huber_loss":
                    args["delta"] = rng.choice([1.0, 0.5, 2.0])
                x, y = inp(rng, sa, dt, "normal", special), inp(rng, sb, dt, "normal", special)
                if rng.random() < 0.3 and sa == sb:  # ties: the kinks
                    y = (apply_views(x[0], x[1]).detach().clone(), [], True)
                kw = {k: v for k, v in args.items() if k in ("beta", "delta")}
                f = (lambda x, a, fn=getattr(F, name), kw=kw:
                     fn(x[0], x[1], reduction=REDUCTIONS[a["red"]], **kw))
            doc = "" if sa == sb else f"cgrad_check: {name} takes one shape (autograd/ops.h)"
            add_case(name, [x, y], args, f, doc=doc, tol=(8.0, 32.0))


def class_case(rng, classes):
    """A class loss's case: leading shape, classes, ignore_index, label
    smoothing, reduction and targets (some ignored, sometimes all)."""
    lead = rshape(rng, 1, 2, 0.05)
    c = rng.choice(classes)
    ignore = rng.choice([-100, 0, 1])
    ls = rng.choice([0.0, 0.1, 0.5])
    red = rng.randrange(3)
    t = ids(rng, lead, c, 0.05)
    if rng.random() < 0.4 and t.numel():
        t.view(-1)[rng.randrange(t.numel())] = ignore
    if rng.random() < 0.1:
        t.fill_(ignore)
    return lead, c, ignore, ls, red, t


def gen_loss_reductions(rng):
    """reduction= of the class losses (cross_entropy, nll_loss: sum and
    none, ignored targets 0 in none's) and of mse_loss and
    binary_cross_entropy_with_logits (mean, sum, none; bf16 too)."""
    for _ in range(40):
        lead, c, ignore, ls, red, t = class_case(rng, [1, 2, 5])
        add_case("cross_entropy", [inp(rng, lead + [c], "float32"), (t, [], False)],
                 {"ignore": ignore, "ls": ls, "red": red}, ce_torch, tol=(8.0, 32.0))
        lp = inp(rng, lead + [c], "float32")
        lp = (torch.log_softmax(lp[0].float(), -1), lp[1], lp[2])
        add_case("nll_loss", [lp, (t, [], False)], {"ignore": ignore, "red": red}, nll_torch,
                 tol=(8.0, 32.0))
    for name, fn in (("mse_loss", F.mse_loss), ("bce_with_logits",
                                                F.binary_cross_entropy_with_logits)):
        for _ in range(30):
            s = rshape(rng, 0, 3)
            dt = rng.choice(["float32", "float32", "float32", "bfloat16"])
            red = rng.randrange(3)
            x = inp(rng, s, dt, "normal", 0.05 if name == "mse_loss" else 0.0)
            y = inp(rng, s, dt, "unit" if name == "bce_with_logits" else "normal")
            # PyTorch 1.13 has no bf16 mse_loss on the CPU (later versions
            # have): there it is computed in float32 and rounded once, as cgrad does
            add_case(name, [x, y], {"red": red},
                     lambda x, a, fn=fn, name=name: fn(x[0].float(), x[1].float(),
                                            reduction=REDUCTIONS[a["red"]]).to(x[0].dtype)
                     if name == "mse_loss" else fn(x[0], x[1], reduction=REDUCTIONS[a["red"]]),
                     tol=(8.0, 32.0))


def gen_row_norms(rng):
    """F.normalize (p 2, 1, 3, 0.5, inf with ties; eps small and large: rows
    clamped, zero rows) and F.cosine_similarity (broadcast, zero rows, eps
    large), float32 and bfloat16 (1.13 has no float16 norm backward)."""
    for _ in range(40):
        shape = rshape(rng, 0, 4)
        nd = len(shape)
        dim = rng.randrange(-max(nd, 1), max(nd, 1))
        dt = rng.choice(["float32", "float32", "bfloat16", rng.choice(ALL)])
        p = rng.choice([2.0, 2.0, 1.0, 3.0, 0.5, math.inf])
        eps = rng.choice([1e-12, 1e-12, 1e-3, 5.0])
        x = inp(rng, shape, dt, special=0.05 if rng.random() < 0.2 else 0.0)
        if dt in FLOATS and rng.random() < 0.3:  # zero rows, ties
            x = (x[0].double().round().to(x[0].dtype) * (torch.rand(x[0].shape) < 0.6), x[1], x[2])
        add_case("normalize", [x], {"p": json_safe(p), "dim": dim, "eps": eps},
                 lambda x, a: F.normalize(x[0], float(a["p"]), a["dim"], a["eps"]),
                 doc=float_doc([dt]), tol=(8.0, 32.0))
    for _ in range(40):
        sa, sb = bcast_shapes(rng)
        nd = max(len(sa), len(sb))
        dim = rng.randrange(-max(nd, 1), max(nd, 1))
        pair = rng.choice([("float32", "float32")] * 4 + [("bfloat16", "bfloat16"),
                                                          ("float32", "bfloat16")])
        eps = rng.choice([1e-8, 1e-8, 0.5])
        xs = [inp(rng, sa, pair[0]), inp(rng, sb, pair[1])]
        if rng.random() < 0.3:  # zeros: rows of zeros somewhere
            xs[0] = (xs[0][0] * (torch.rand(xs[0][0].shape) < 0.3), xs[0][1], xs[0][2])
        add_case("cosine_similarity", xs, {"dim": dim, "eps": eps},
                 lambda x, a: F.cosine_similarity(x[0], x[1], a["dim"], a["eps"]), tol=(8.0, 32.0))


def gen_loss_weights(rng):
    """weight= of the class losses (cross_entropy with ignore_index and
    label_smoothing, nll_loss; every reduction, all-ignored rows, negative
    and zero weights) and weight= / pos_weight= of
    binary_cross_entropy_with_logits (broadcast: [C], [1], the full shape)."""
    for _ in range(60):
        lead, c, ignore, ls, red, t = class_case(rng, [1, 2, 5, 7])
        w = torch.rand(c) * 2.0 + 0.1
        if rng.random() < 0.2:  # any values: negative and zero weights too
            w = torch.randn(c)
            w[0] = 0.0
        wi = (w, [], False)
        add_case("cross_entropy_w", [inp(rng, lead + [c], "float32"), (t, [], False), wi],
                 {"ignore": ignore, "ls": ls, "red": red},
                 lambda x, a: ce_torch(x[:2], a, weight=x[2]), tol=(8.0, 32.0))
        lp = inp(rng, lead + [c], "float32")
        lp = (torch.log_softmax(lp[0].float(), -1), lp[1], lp[2])
        add_case("nll_loss_w", [lp, (t, [], False), wi], {"ignore": ignore, "red": red},
                 lambda x, a: nll_torch(x[:2], a, weight=x[2]), tol=(8.0, 32.0))
    for _ in range(50):
        s = rshape(rng, 1, 3)
        dt = rng.choice(["float32", "float32", "float32", "bfloat16"])
        red = rng.randrange(3)
        x = inp(rng, s, dt, "normal")
        y = inp(rng, s, dt, "unit")
        ins, args = [x, y], {"red": red, "w": 0, "pw": 0}
        for k in ("w", "pw"):
            if rng.random() < 0.6:
                ws = rng.choice([s, s[-1:], [1]])
                v = torch.rand(ws) * 3.0 if k == "pw" else torch.randn(ws)
                ins.append((v, [], False))
                args[k] = 1
        if not args["w"] and not args["pw"]:
            ins.append((torch.rand(s[-1:]) * 3.0, [], False))
            args["pw"] = 1

        def bce(x, a):
            w = x[2] if a["w"] else None
            pw = x[2 + a["w"]] if a["pw"] else None
            return F.binary_cross_entropy_with_logits(x[0], x[1], weight=w, pos_weight=pw,
                                                      reduction=REDUCTIONS[a["red"]])
        add_case("bce_with_logits_ex", ins, args, bce, tol=(8.0, 32.0))


def gen_activations(rng):
    """The rest of torch.nn's activations (2026-12-07): without parameters,
    and with them at random values, every dtype, special values, and inputs
    exactly at their kinks (each op's own points)."""
    def via_f32(f, t, *a):  # 1.13 lacks these bfloat16 kernels: float32, rounded
        return f(t.float(), *a).to(t.dtype) if t.dtype == torch.bfloat16 else f(t, *a)

    ops = {"mish": (lambda x, a: via_f32(F.mish, x[0]), [0.0]),
           "hardswish": (lambda x, a: F.hardswish(x[0]), [-3.0, 3.0, 0.0]),
           "hardsigmoid": (lambda x, a: F.hardsigmoid(x[0]), [-3.0, 3.0]),
           "relu6": (lambda x, a: via_f32(F.relu6, x[0]), [0.0, 6.0, -0.0]),
           "selu": (lambda x, a: F.selu(x[0]), [0.0, -0.0]),
           "softsign": (lambda x, a: F.softsign(x[0]), [0.0]),
           "logsigmoid": (lambda x, a: F.logsigmoid(x[0]), [0.0]),
           "tanhshrink": (lambda x, a: F.tanhshrink(x[0]), [0.0]),
           "hardtanh": (lambda x, a: via_f32(F.hardtanh, x[0], a["lo"], a["hi"]), None),
           "celu": (lambda x, a: F.celu(x[0], a["alpha"]), [0.0]),
           "softshrink": (lambda x, a: F.softshrink(x[0], a["l"]), None),
           "hardshrink": (lambda x, a: F.hardshrink(x[0], a["l"]), None),
           "threshold": (lambda x, a: F.threshold(x[0], a["th"], a["v"]), None)}
    for name, (fn, kinks) in ops.items():
        for _ in range(20):
            dt = rng.choice(FLOATS + FLOATS + ("int64", "bool"))
            special = 0.15 if rng.random() < 0.3 else 0.0
            args = {}
            if name == "hardtanh":
                lo = rng.choice([-1.0, -0.5, 0.0, 0.25])
                args = {"lo": lo, "hi": lo + rng.choice([0.0, 0.5, 2.0])}
                kinks = [args["lo"], args["hi"]]
            if name == "celu":
                args = {"alpha": rng.choice([1.0, 0.5, 2.0, -1.0])}
            if name in ("softshrink", "hardshrink"):
                args = {"l": rng.choice([0.5, 0.0, 1.5] + ([-0.5] if name == "hardshrink" else []))}
                kinks = [args["l"], -args["l"]]
            if name == "threshold":
                args = {"th": rng.choice([0.0, 0.1, -0.5, 1.0]), "v": rng.choice([0.0, 20.0, -2.0])}
                kinks = [args["th"]]
            x = inp(rng, rshape(rng, 0, 4), dt, "normal", special)
            if x[0].is_floating_point() and x[0].numel() and rng.random() < 0.4:
                b = x[0].clone().view(-1)
                for i in range(b.numel()):
                    if rng.random() < 0.4:
                        b[i] = rng.choice(kinks)
                x = (b.view(x[0].shape), x[1], x[2])
            known = ""
            if name in NAN_PATHS and x[0].is_floating_point() and x[0].isnan().any():
                known = KNOWN["nan_grad_paths"]
            add_case(name, [x], args, fn, doc=float_doc([dt]), known=known)


def gen_losses_rest(rng):
    """The rest of torch.nn's losses (2026-12): binary_cross_entropy (p at 0
    and 1: the log clamp; out of [0, 1]: refused), poisson_nll_loss,
    gaussian_nll_loss (var's three shapes, var below eps, a wrong shape and
    a negative entry: refused), soft_margin_loss, margin_ranking_loss,
    hinge_embedding_loss, cosine_embedding_loss, triplet_margin_loss
    (p, swap, eps), multi_margin_loss (p 1, 2 and 3, weight, targets out of
    range), multilabel_soft_margin_loss (weight, differentiated) and
    multilabel_margin_loss (-1 ends a row; out of range): every reduction,
    broadcast and strided inputs, dims that differ (refused by both)."""
    R3 = lambda a: REDUCTIONS[a["red"]]  # noqa: E731
    for _ in range(40):
        s = rshape(rng, 0, 3)
        red = rng.randrange(3)
        p, y = inp(rng, s, "float32", "unit"), inp(rng, s, "float32", "unit")
        if p[0].numel() and rng.random() < 0.3:  # the clamp at 0 and 1
            p[0].view(-1)[0] = rng.choice([0.0, 1.0])
        if p[0].numel() and rng.random() < 0.08:
            p[0].view(-1)[-1] = rng.choice([1.5, -0.1, math.nan])
        ins, args = [p, y], {"red": red, "w": 0}
        if rng.random() < 0.5:
            ins.append((torch.rand(rng.choice([s, s[-1:], [1]])) * 2, [], False))
            args["w"] = 1
        add_case("binary_cross_entropy", ins, args,
                 lambda x, a: F.binary_cross_entropy(x[0], x[1], weight=x[2] if a["w"] else None,
                                                     reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(40):
        sa, sb = bcast_shapes(rng)
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        args = {"red": rng.randrange(3), "log": rng.random() < 0.5, "full": rng.random() < 0.5,
                "eps": rng.choice([1e-8, 0.5])}
        x = inp(rng, sa, dt, "normal" if args["log"] else "pos")
        y = inp(rng, sb, dt, "pos", grad=rng.random() < 0.5)
        add_case("poisson_nll_loss", [x, y], args,
                 lambda x, a: F.poisson_nll_loss(x[0], x[1], log_input=a["log"], full=a["full"],
                                                 eps=a["eps"], reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(50):
        s = rshape(rng, 1, 3)
        vs = rng.choice([s, s[:-1], s[:-1] + [1], s[:-1] + [s[-1] + 1]])
        ts = rng.choice([s, s, s[1:]])
        args = {"red": rng.randrange(3), "full": rng.random() < 0.5,
                "eps": rng.choice([1e-6, 0.3])}
        v = inp(rng, vs, "float32", "pos")
        if v[0].numel() and rng.random() < 0.3:  # below eps: clamped
            v[0].view(-1)[0] = rng.choice([0.0, 1e-9, 0.1])
        if v[0].numel() and rng.random() < 0.08:
            v[0].view(-1)[-1] = -0.5
        add_case("gaussian_nll_loss", [inp(rng, s, "float32"), inp(rng, ts, "float32"), v], args,
                 lambda x, a: F.gaussian_nll_loss(x[0], x[1], x[2], full=a["full"], eps=a["eps"],
                                                  reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(30):
        s = rshape(rng, 0, 3)
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        y = inp(rng, rng.choice([s, s, s[-1:]]), dt, grad=False)  # not differentiable in 1.13
        if rng.random() < 0.5:
            y = (torch.sign(y[0]) + (y[0] == 0).to(y[0].dtype), y[1], y[2])
        add_case("soft_margin_loss", [inp(rng, s, dt), y], {"red": rng.randrange(3)},
                 lambda x, a: F.soft_margin_loss(x[0], x[1], reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(40):
        shapes = bcast_shapes(rng, 3)
        if rng.random() < 0.6:  # one number of dims
            nd = max(len(q) for q in shapes)
            shapes = [[1] * (nd - len(q)) + q for q in shapes]
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        y = inp(rng, shapes[2], dt)
        y = (torch.sign(y[0]), y[1], False)
        add_case("margin_ranking_loss", [inp(rng, shapes[0], dt), inp(rng, shapes[1], dt), y],
                 {"red": rng.randrange(3), "margin": rng.choice([0.0, 0.5, -0.2])},
                 lambda x, a: F.margin_ranking_loss(x[0], x[1], x[2], margin=a["margin"],
                                                    reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(30):
        sa, sb = bcast_shapes(rng)
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        y = inp(rng, sb, dt)
        y = (torch.where(y[0] > 0.3, 1.0, torch.where(y[0] < -1.5, 0.5, -1.0)).to(y[0].dtype),
             y[1], False)
        add_case("hinge_embedding_loss", [inp(rng, sa, dt), y],
                 {"red": rng.randrange(3), "margin": rng.choice([1.0, 0.5, 2.0])},
                 lambda x, a: F.hinge_embedding_loss(x[0], x[1], margin=a["margin"],
                                                     reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(40):
        n, d = rng.choice([1, 2, 5]), rng.choice([1, 3, 4])
        td = rng.randrange(2)
        s1 = [n, d] if td else [d]
        s2 = rng.choice([s1, s1, [1, d] if td else [d]])
        ts = [n] if td else []
        if rng.random() < 0.1:  # dims PyTorch refuses
            ts = rng.choice([[n, 1], [n] if not td else []])
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        y = torch.tensor([rng.choice([1.0, -1.0, -1.0, 0.0]) for _ in range(math.prod(ts))])
        add_case("cosine_embedding_loss",
                 [inp(rng, s1, dt), inp(rng, s2, dt), (y.reshape(ts).to(DT[dt]), [], False)],
                 {"red": rng.randrange(3), "margin": rng.choice([0.0, 0.3, -0.2])},
                 lambda x, a: F.cosine_embedding_loss(x[0], x[1], x[2], margin=a["margin"],
                                                      reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(40):
        shapes = bcast_shapes(rng, 3)
        if rng.random() < 0.7:
            nd = max(len(q) for q in shapes)
            shapes = [[1] * (nd - len(q)) + q for q in shapes]
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        args = {"red": rng.randrange(3), "margin": rng.choice([1.0, 0.5, 0.0]),
                "p": rng.choice([2.0, 2.0, 1.0, 3.0, 1.5]), "eps": rng.choice([1e-6, 0.1]),
                "swap": rng.random() < 0.4}
        add_case("triplet_margin_loss", [inp(rng, q, dt) for q in shapes], args,
                 lambda x, a: F.triplet_margin_loss(x[0], x[1], x[2], margin=a["margin"],
                                                    p=a["p"], eps=a["eps"], swap=a["swap"],
                                                    reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(50):
        n, c = rng.choice([1, 3, 6]), rng.choice([1, 2, 5])
        one = rng.random() < 0.2
        s = [c] if one else [n, c]
        t = ids(rng, [] if one and rng.random() < 0.5 else [1 if one else n], c, 0.1)
        dt = rng.choice(["float32"] * 9 + ["bfloat16"])
        args = {"red": rng.randrange(3), "p": rng.choice([1, 1, 2, 2, 3]),
                "margin": rng.choice([1.0, 0.5, -0.5]), "w": rng.random() < 0.4}
        ins = [inp(rng, s, dt), (t, [], False)]
        if args["w"]:
            ins.append((torch.rand(c) * 2, [], False))
        add_case("multi_margin_loss", ins, args,
                 lambda x, a: F.multi_margin_loss(x[0], x[1], p=a["p"], margin=a["margin"],
                                                  weight=x[2] if a["w"] else None,
                                                  reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(30):
        s = rshape(rng, 1, 3, 0.0)
        dt = rng.choice(["float32"] * 5 + ["bfloat16"])
        ins, args = [inp(rng, s, dt), inp(rng, s, dt, "unit")], {"red": rng.randrange(3), "w": 0}
        if rng.random() < 0.5:
            ins.append(inp(rng, rng.choice([s[-1:], s]), dt, "unit"))
            args["w"] = 1
        add_case("multilabel_soft_margin_loss", ins, args,
                 lambda x, a: F.multilabel_soft_margin_loss(x[0], x[1],
                                                            weight=x[2] if a["w"] else None,
                                                            reduction=R3(a)), tol=(8.0, 32.0))
    for _ in range(40):
        n, c = rng.choice([1, 3, 6]), rng.choice([1, 2, 5])
        s = [c] if rng.random() < 0.2 else [n, c]
        t = torch.randint(-1, c, s, dtype=torch.int64)
        for row in t.view(-1, c):
            k = rng.randint(0, c)
            row[:k] = torch.randint(0, c, (k,))
            if k < c:
                row[k] = -1
        if rng.random() < 0.1:
            t.view(-1)[-1] = rng.choice([c, -2])
        dt = rng.choice(["float32"] * 9 + ["bfloat16"])
        add_case("multilabel_margin_loss", [inp(rng, s, dt), (t, [], False)],
                 {"red": rng.randrange(3)},
                 lambda x, a: F.multilabel_margin_loss(x[0], x[1], reduction=R3(a)),
                 tol=(8.0, 32.0))


# ------------------------------------------------ sorting, products, scans
def line_dim(rng, lo=0, hi=3):
    shape = rshape(rng, lo, hi)
    nd = len(shape)
    return shape, rng.randrange(-max(nd, 1), max(nd, 1))


def with_zeros(x, rng):
    """Some elements of a float input's base set to 0 (one or more a line)."""
    b = x[0]
    if b.is_floating_point() and b.numel() and rng.random() < 0.6:
        flat = b.view(-1)
        for _ in range(rng.choice([1, 1, 2, 3])):
            flat[rng.randrange(b.numel())] = 0
    return x


def picked_inp(rng, shape, dt, special):
    """An input of an op that picks elements (sort, cummax): ties made by
    rounding, special values; no expand (its gradient is a sum, and these
    cases are bit for bit)."""
    x = inp(rng, shape, dt, special=special)
    if any(v[0] == "expand" for v in x[1]):
        x = (x[0], [v for v in x[1] if v[0] != "expand"], x[2])
        x = (values(shape, dt, special=special), [], True) if x[1] and x[1][0][0] == "slice" \
            else x
    if x[0].is_floating_point() and rng.random() < 0.5:  # ties
        x = (x[0].double().round().to(x[0].dtype), x[1], x[2])
    return x


def fixed_views(x):
    """x when its views still give the shape the base had before; the views
    above were made for the base's shape."""
    try:
        apply_views(x[0], x[1])
        return x
    except Exception:
        return (x[0], [], x[2])


def bf16_up(x, f):
    """f(x), a bfloat16 x through float32 (PyTorch 1.13's CPU prod lacks
    bfloat16; later PyTorch and cgrad compute it in float32 and round)."""
    return f(x.float()).to(x.dtype) if x.dtype == torch.bfloat16 else f(x)


def gen_scan(rng):
    for _ in range(40):
        shape, dim = line_dim(rng)
        dt = rng.choice(["float32", "float32", "bfloat16", "float16", rng.choice(ALL)])
        x = fixed_views(picked_inp(rng, shape, dt, 0.1 if rng.random() < 0.4 else 0.0))
        desc, stable = rng.random() < 0.5, rng.random() < 0.7
        doc = ""  # every dtype since 2026-12-08 (integers and bool exactly)
        # PyTorch's unstable sort orders ties as it likes: cgrad's is stable
        args = {"dim": dim, "desc": desc, "stable": True}
        add_case("sort", [x], args, lambda x, a: tuple(torch.sort(
            x[0], dim=a["dim"], descending=a["desc"], stable=True)), exact=True, doc=doc)
        add_case("argsort", [x], {"dim": dim, "desc": desc, "stable": stable},
                 lambda x, a: torch.sort(x[0], dim=a["dim"], descending=a["desc"], stable=True)[1],
                 exact=True, doc=doc)
        for name, f in (("cummax", torch.cummax), ("cummin", torch.cummin)):
            add_case(name, [x], {"dim": dim}, lambda x, a, f=f: tuple(f(x[0], a["dim"])),
                     exact=True, doc=doc)
    for _ in range(40):
        shape, dim = line_dim(rng, 0, 4)
        dt = rng.choice(["float32", "float32", "bfloat16", "float16", "int64", "bool"])
        x = with_zeros(inp(rng, shape, dt, special=0.05 if rng.random() < 0.2 else 0.0), rng)
        keep = rng.random() < 0.5
        known = KNOWN["prod_nonfinite_grad"] if x[0].is_floating_point() and not torch.isfinite(
            x[0]).all() else ""
        add_case("prod", [x], {"dim": dim, "keep": keep},
                 lambda x, a: bf16_up(x[0], lambda t: torch.prod(t, a["dim"], keepdim=a["keep"])),
                 tol=(8.0, 64.0), known=known)
        add_case("cumprod", [x], {"dim": dim}, lambda x, a: torch.cumprod(x[0], a["dim"]),
                 tol=(8.0, 64.0), known=known)
    for _ in range(12):
        dt = rng.choice(["float32", "bfloat16", "int64"])
        x = with_zeros(inp(rng, rshape(rng, 0, 3), dt), rng)
        add_case("prod_all", [x], {}, lambda x, a: bf16_up(x[0], torch.prod), tol=(8.0, 64.0))
    for _ in range(40):
        shape, dim = line_dim(rng, 0, 4)
        dt = rng.choice(["float32", "float32", "bfloat16", "float16", rng.choice(ALL)])
        x = inp(rng, shape, dt)
        if x[0].is_floating_point() and x[0].numel() and rng.random() < 0.5:
            flat = x[0].view(-1)  # runs of -inf, a +inf
            for i in range(x[0].numel()):
                if rng.random() < 0.3:
                    flat[i] = -math.inf
            if rng.random() < 0.3:
                flat[rng.randrange(x[0].numel())] = math.inf
        known = ""
        if x[0].is_floating_point() and apply_views(x[0], x[1]).dim():
            y = torch.logcumsumexp(apply_views(x[0], x[1]).double(), dim)
            known = KNOWN["lcse_neginf_run"] if (y == -math.inf).any() else ""
        add_case("logcumsumexp", [x], {"dim": dim},
                 lambda x, a: torch.logcumsumexp(x[0], a["dim"]), doc=float_doc([dt]), known=known)
    for name in ("std", "var_mean", "std_mean"):
        for _ in range(25):
            shape = rshape(rng, 0, 4)
            dt = rng.choice(["float32", "float32", "bfloat16", "float16", rng.choice(ALL)])
            dims, keep = dims_of(rng, len(shape)), rng.random() < 0.5
            args = {"dims": dims, "keep": keep, "corr": rng.choice([0, 1])}
            x = inp(rng, shape, dt)
            if x[0].is_floating_point() and rng.random() < 0.15:
                x = (torch.full_like(x[0], 1.5), x[1], x[2])  # std 0: PyTorch's gradient 0

            def f(x, a, name=name):
                d = a["dims"] if a["dims"] else None
                fn = {"std": torch.std, "var_mean": torch.var_mean, "std_mean": torch.std_mean}
                return fn[name](x[0], d, correction=a["corr"], keepdim=a["keep"])
            red = [shape[d] for d in (dims if dims else range(len(shape)))]
            known = KNOWN["var_0_over_0"] if math.prod(red) <= args["corr"] else ""
            add_case(name, [x], args, f, doc=float_doc([dt]), tol=(4.0, 64.0), known=known)
    for _ in range(25):
        shape = rshape(rng, 0, 3)
        k = rng.choice([-1, -1, 5, 6, 0, 3])
        ids = torch.randint(0, 5, shape, dtype=torch.int64)
        if ids.numel() and rng.random() < 0.15:
            ids.view(-1)[0] = rng.choice([-1, 7])
        dt = rng.choice(["int64"] * 5 + ["int32", "float32"])
        add_case("one_hot", [(ids.to(DT[dt]), [], False)], {"k": k},
                 lambda x, a: F.one_hot(x[0], a["k"]), exact=True,
                 doc="" if dt == "int64" else "one_hot takes int64 ids (docs/api.md)")
EINSUM = [  # equation, shapes (ellipses broadcast, repeated and size-1 subscripts)
    ("ij,jk->ik", [[3, 4], [4, 5]]), ("ij,jk", [[2, 3], [3, 2]]), ("bij,bjk->bik", [[2, 3, 4], [2, 4, 2]]),
    ("...ij,...jk->...ik", [[2, 1, 3, 4], [3, 4, 5]]), ("...ij,...jk", [[3, 4], [2, 4, 3]]),
    ("ii->i", [[4, 4]]), ("ii", [[3, 3]]), ("iij->j", [[3, 3, 2]]), ("ijj,kj->ik", [[2, 3, 3], [4, 3]]),
    ("i,j->ij", [[3], [4]]), ("i,i->", [[5], [5]]), ("ij->ji", [[3, 4]]), ("ij->", [[3, 4]]),
    ("ba", [[2, 3]]), ("Ba,aB", [[2, 3], [3, 2]]), ("i j , j k -> k i", [[2, 3], [3, 4]]),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 2]]), ("bn,anm,bm->ba", [[3, 4], [2, 4, 5], [3, 5]]),
    ("ij,j->ij", [[3, 1], [4]]), ("ij,jk->ik", [[2, 1], [3, 4]]), ("...i,...i->...", [[2, 1, 4], [3, 4]]),
    ("i...->...", [[3, 2, 2]]), ("...ii->...i", [[2, 3, 3]]), ("abc,cd,de->abe", [[2, 2, 3], [3, 4], [4, 2]]),
    ("ij,ij->ij", [[3, 4], [3, 4]]), ("i,i,i->i", [[3], [3], [3]]), ("ijk,ikl->jl", [[2, 3, 4], [2, 4, 3]]),
    ("...,...->...", [[2, 3], [3]]), ("ij,kl->ijkl", [[2, 2], [1, 3]]), ("ij,jk->ik", [[2, 0], [0, 3]]),
    ("ij,jk->ik", [[2, 3], [4, 5]]), ("ij,jk->ik", [[2, 3]]), ("i$", [[2]]), ("ijk", [[2, 3]]),
    ("ii", [[2, 3]]), ("ij->ii", [[2, 2]]), ("ij->k", [[2, 2]]), ("i..j", [[2, 2]]), ("i,j", [[2], [3], [4]]),
]


def gen_einsum(rng):
    """torch.einsum (ellipsis broadcasting, diagonals, implicit outputs, three
    operands, size-1 and size-0 dims, refusals), the diagonal view and what
    is made of einsum (trace, diag, outer, kron, tensordot), strided inputs."""
    for eq, shapes in EINSUM:
        for _ in range(2):
            dt = rng.choice(["float32"] * 4 + ["bfloat16"])
            add_case("einsum", [inp(rng, q, dt) for q in shapes], {"eq": eq},
                     lambda x, a: torch.einsum(a["eq"], *x), tol=(8.0, 32.0))
    for _ in range(20):
        shape = rshape(rng, 2, 4, 0.05)
        nd = len(shape)
        d1, d2 = rng.sample(range(-nd, nd), 2) if rng.random() < 0.9 else (0, -nd)
        add_case("diagonal", [inp(rng, shape, "float32")],
                 {"offset": rng.randint(-3, 3), "d1": d1, "d2": d2},
                 lambda x, a: torch.diagonal(x[0], a["offset"], a["d1"], a["d2"]))
    for _ in range(8):
        shape = rng.choice([[3, 3], [2, 4], [4, 2], [3], [3, 2, 2]])
        add_case("trace", [inp(rng, shape, "float32")], {}, lambda x, a: torch.trace(x[0]),
                 tol=(8.0, 32.0), known="trace_tall" if shape == [4, 2] else "")
        add_case("diag", [inp(rng, rng.choice([[4], [3, 5], [1], [2, 2, 2]]), "float32")],
                 {"offset": rng.randint(-2, 2)}, lambda x, a: torch.diag(x[0], a["offset"]))
        add_case("outer", [inp(rng, [rng.randint(1, 4)], "float32"),
                           inp(rng, rng.choice([[3], [2], [2, 2]]), "float32")], {},
                 lambda x, a: torch.outer(x[0], x[1]))
        add_case("kron", [inp(rng, rshape(rng, 0, 3, 0.0), "float32"),
                          inp(rng, rshape(rng, 0, 3, 0.0), "float32")], {},
                 lambda x, a: torch.kron(x[0].contiguous(), x[1].contiguous()))  # 1.13's view
    for da, db, sa, sb in [(2, None, [2, 3, 4], [3, 4, 5]), (1, None, [3, 4], [4, 2]),
                           (0, None, [2], [3]), ([1, 0], [0, 1], [3, 4, 5], [4, 3, 2]),
                           ([2], [0], [2, 3, 4], [4, 5]), ([-1], [-2], [2, 3], [1, 3, 2]),
                           ([0], [0], [2, 3], [3, 2])]:
        two = db is not None
        add_case("tensordot", [inp(rng, sa, "float32"), inp(rng, sb, "float32")],
                 {"n": len(da) if two else da, "da": da if two else [], "db": db if two else []},
                 lambda x, a: torch.tensordot(x[0], x[1], dims=(a["da"], a["db"]) if a["da"] or
                                              a["db"] else a["n"]), tol=(8.0, 32.0))


def dupe_rows(t, rng):
    """Small integers, with some rows of the second half copies of the first's"""
    t = (t.double() * 2).round().to(t.dtype)
    n = t.shape[-2]
    for i in range(n // 2, n):
        if rng.random() < 0.4:
            t[..., i, :] = t[..., rng.randrange(n // 2 + 1), :]
    return t


def gen_distances(rng):
    """torch.cdist (p 0, 1, 2, 3, 0.5, inf; the direct kernel and, past 25
    rows, the Euclidean matrix form; zero distances; batch broadcasting),
    torch.pdist and F.pairwise_distance (eps, keepdim, broadcast)."""
    for k in range(40):
        p = rng.choice([2.0, 2.0, 1.0, 0.0, 3.0, 0.5, 1.5, math.inf])
        big = rng.random() < 0.3
        P, R_ = (rng.choice([26, 30]), rng.choice([3, 27])) if big else (rng.randint(1, 5), rng.randint(1, 5))
        M = rng.randint(1, 4)
        b1, b2 = rng.choice([([], []), ([2], [2]), ([2, 1], [3]), ([1], [])])
        x1, x2 = inp(rng, b1 + [P, M], "float32"), inp(rng, b2 + [R_, M], "float32")
        if k % 3 == 0 and not x1[1] and not x2[1]:  # zero distances: shared rows
            both = dupe_rows(torch.cat([x1[0].expand(*(torch.broadcast_shapes(
                tuple(b1), tuple(b2)) + (P, M))), x2[0].expand(*(torch.broadcast_shapes(
                    tuple(b1), tuple(b2)) + (R_, M)))], -2), rng) if b1 == b2 else None
            if both is not None:
                x1, x2 = (both[..., :P, :].clone(), [], True), (both[..., P:, :].clone(), [], True)
        add_case("cdist", [x1, x2], {"p": json_safe(p)},
                 lambda x, a: torch.cdist(x[0], x[1], float(a["p"])), tol=(16.0, 64.0))
    for bad in ([[3], [2, 3]], [[2, 3], [2, 4]]):
        add_case("cdist", [inp(rng, bad[0], "float32"), inp(rng, bad[1], "float32")], {"p": 2.0},
                 lambda x, a: torch.cdist(x[0], x[1], a["p"]))
    add_case("cdist", [inp(rng, [2, 3], "float32"), inp(rng, [2, 3], "float32")], {"p": -1.0},
             lambda x, a: torch.cdist(x[0], x[1], a["p"]))
    for k in range(15):
        p = rng.choice([2.0, 1.0, 0.0, 3.0, 0.5, math.inf])
        x = inp(rng, [rng.randint(1, 6), rng.randint(1, 4)], "float32", views=k % 2 == 0)
        if k % 3 == 0 and not x[1] and x[0].shape[0] > 1:
            x = (dupe_rows(x[0], rng), [], True)
        add_case("pdist", [x], {"p": json_safe(p)}, lambda x, a: F.pdist(x[0], float(a["p"])),
                 tol=(16.0, 64.0))
    add_case("pdist", [inp(rng, [2, 3, 2], "float32")], {"p": 2.0}, lambda x, a: F.pdist(x[0], 2.0))
    for k in range(25):
        sa, sb = bcast_shapes(rng)
        sa, sb = (sa or [3]), (sb or [3])
        sb[-1] = sa[-1] if rng.random() < 0.8 else 1
        p = rng.choice([2.0, 1.0, 3.0, 0.5, math.inf])
        args = {"p": json_safe(p), "eps": rng.choice([1e-6, 0.0, 0.1]), "keep": rng.random() < 0.3}
        add_case("pairwise_distance", [inp(rng, sa, "float32"), inp(rng, sb, "float32")], args,
                 lambda x, a: F.pairwise_distance(x[0], x[1], float(a["p"]), a["eps"], a["keep"]),
                 tol=(16.0, 64.0))
    for k in range(10):
        batch = rng.choice([[3], [2, 2], []])
        i1, i2, o = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 3)
        ins = [inp(rng, batch + [i1], "float32"), inp(rng, batch + [i2], "float32"),
               inp(rng, [o, i1, i2], "float32")]
        if k % 2:
            ins.append(inp(rng, [o], "float32"))
        add_case("bilinear", ins, {"b": k % 2},
                 lambda x, a: F.bilinear(x[0], x[1], x[2], x[3] if a["b"] else None),
                 tol=(8.0, 32.0))


# ------------------------------------------ masks, search, counts, uniques
def bcast_count(m, shape):
    """How many true elements a mask m (its views applied) has once broadcast to shape."""
    return int(torch.broadcast_to(apply_views(m[0], m[1]), shape).sum())


def gen_masked(rng):
    """masked_select and masked_scatter: broadcast x and mask, every dtype,
    special values, a source just large enough or larger (fewer: refused)."""
    for _ in range(30):
        sx, sm = bcast_shapes(rng)
        dt = rng.choice(["float32", "float32", "bfloat16", rng.choice(ALL)])
        x, m = inp(rng, sx, dt, special=0.1), inp(rng, sm, "bool", grad=False)
        add_case("masked_select", [x, m], {}, lambda x, a: torch.masked_select(x[0], x[1]),
                 exact=True)
    x = inp(rng, [2, 3], "float32")
    add_case("masked_select", [x, (torch.tensor([1, 0, 1]), [], False)], {},
             lambda x, a: torch.masked_select(x[0], x[1]))  # an int64 mask: refused by both
    for _ in range(30):
        sx, sm = bcast_shapes(rng)
        dt = rng.choice(["float32", "float32", "bfloat16", rng.choice(ALL)])
        x, m = inp(rng, sx, dt, special=0.1), inp(rng, sm, "bool", grad=False)
        shape = torch.broadcast_shapes(tuple(apply_views(x[0], x[1]).shape),
                                       tuple(apply_views(m[0], m[1]).shape))
        n = bcast_count(m, shape) + rng.choice([0, 0, 1, 4, -1])
        sdt = dt if rng.random() < 0.9 else rng.choice(ALL)
        s = inp(rng, rng.choice([[max(n, 0)], [1, max(n, 0)]]), sdt, special=0.1)
        add_case("masked_scatter", [x, m, s], {},
                 lambda x, a: x[0].masked_scatter(x[1], x[2]), exact=True)


def sorted_base(shape, dt, rng):
    """Values sorted along the last dim, ties and (floats) a NaN at the end."""
    t = values(shape, "float32" if dt in FLOATS else dt)
    if t.is_floating_point():
        t = (t.double() * 2).round() / 2 + 0.0
        if t.numel() and rng.random() < 0.3:
            t[..., -1] = math.nan
    return t.sort(dim=-1).values.to(DT[dt])


def gen_search(rng):
    """searchsorted (1-d and N-d sequences, right and side, sorter,
    out_int32, mixed dtypes, NaN) and bucketize."""
    for _ in range(45):
        dts = rng.choice(["float32", "float32", "int64", "bfloat16", "int32"])
        dtv = dts if rng.random() < 0.7 else rng.choice(["float32", "int64", "bfloat16"])
        lead = [rng.randint(1, 3) for _ in range(rng.choice([0, 0, 0, 1, 2]))]
        n = rng.randint(0, 6)
        seq = sorted_base(lead + [n], dts, rng)
        vshape = rshape(rng, 0, 3) if not lead else lead + [rng.randint(0, 4)]
        v = values(vshape, "float32" if dtv in FLOATS else dtv)
        if v.is_floating_point() and v.numel():
            v = ((v.double() * 2).round() / 2 + 0.0).to(DT[dtv])  # ties with the sequence
            if rng.random() < 0.3:
                v.view(-1)[0] = rng.choice([math.nan, math.inf, -math.inf])
        args = {"right": rng.random() < 0.4, "int32": rng.random() < 0.2,
                "side": rng.choice([None, None, "left", "right"])}
        ins = [(seq, [], False), (v, layout(vshape, rng)[1] if False else [], False)]
        if n and rng.random() < 0.3:  # the sequence shuffled, sorter its order
            perm = torch.randperm(n)
            seq = seq[..., perm].contiguous()
            srt = torch.argsort(seq.double().nan_to_num(math.inf), dim=-1, stable=True)
            ins = [(seq, [], False), ins[1], (srt, [], False)]

        def f(x, a):
            return torch.searchsorted(x[0], x[1], out_int32=a["int32"], right=a["right"],
                                      side=a["side"], sorter=x[2] if len(x) > 2 else None)
        add_case("searchsorted", ins, args, f, exact=True,
                 doc="" if "bool" not in (dts, dtv) else "bool refused")
    add_case("searchsorted", [(torch.tensor(2.0), [], False), (torch.tensor([1.0]), [], False)],
             {}, lambda x, a: torch.searchsorted(x[0], x[1]))  # a 0-d sequence: refused
    for _ in range(20):
        dt = rng.choice(["float32", "float32", "int64", "bfloat16"])
        bd = sorted_base([rng.randint(0, 5)], dt, rng)
        x = inp(rng, rshape(rng, 0, 3), dt, special=0.1, grad=False)
        args = {"right": rng.random() < 0.5, "int32": rng.random() < 0.2}
        add_case("bucketize", [x, (bd, [], False)], args,
                 lambda x, a: torch.bucketize(x[0], x[1], out_int32=a["int32"], right=a["right"]),
                 exact=True)
    add_case("bucketize", [inp(rng, [3], "float32"), (torch.zeros(2, 2), [], False)], {},
             lambda x, a: torch.bucketize(x[0], x[1]))  # 2-d boundaries: refused


def gen_counts(rng):
    """bincount (counts, float32 weights, minlength, refusals) and histc
    (given and data ranges, edges, specials, bfloat16)."""
    for _ in range(25):
        n = rng.randint(0, 8)
        dt = rng.choice(["int64", "int64", "int32"])
        ids = torch.randint(0, 6, (n,)).to(DT[dt])
        if n and rng.random() < 0.1:
            ids[0] = -1  # refused
        ins = [(ids, [], False)]
        w = rng.random() < 0.5
        if w:
            ins.append((values([n], "float32"), [], False))
        args = {"min": rng.choice([0, 0, 3, 8]), "w": w}
        add_case("bincount", ins, args,
                 lambda x, a: torch.bincount(x[0], x[1] if a["w"] else None, a["min"]), exact=True)
    for _ in range(30):
        dt = rng.choice(["float32", "float32", "bfloat16", "float16"])
        x = inp(rng, rshape(rng, 0, 3), dt, special=0.1 if rng.random() < 0.3 else 0.0,
                grad=False)
        if rng.random() < 0.4:  # on the edges
            x = (((x[0].double() * 4).round() / 4).to(x[0].dtype), x[1], False)
        lo, hi = rng.choice([(0, 0), (0, 0), (-1, 1), (-2, 0.5), (0.3, 0.3), (1, -1), (-1.5, 2)])
        args = {"bins": rng.choice([1, 3, 4, 7, 10]), "min": lo, "max": hi}
        b = apply_views(x[0], x[1]).double()
        known = KNOWN["histc_nan"] if lo != hi and b.isnan().any() else ""
        add_case("histc", [x], args,
                 lambda x, a: torch.histc(x[0], a["bins"], a["min"], a["max"]), exact=True,
                 known=known)


def small_ints(shape, dt, hi=3):
    t = torch.randint(-1 if dt != "bool" else 0, hi if dt != "bool" else 2, shape)
    return t.to(DT[dt]) + (0.0 if dt in FLOATS else 0)


def gen_unique(rng):
    """unique and unique_consecutive, whole and along a dim, with inverse
    and counts: duplicates, runs, every dtype, empty dims (no NaN: PyTorch
    1.13's CPU unique orders it wrongly)."""
    for name in ("unique", "unique_consecutive"):
        for _ in range(20):
            dt = rng.choice(["float32", "float32", "bfloat16", "float16", "int64", "int32", "bool"])
            shape = rshape(rng, 0, 3)
            base, v = layout(shape, rng)
            x = (small_ints(base, dt), v, False)
            f = (lambda x, a: torch.unique(x[0], sorted=True, return_inverse=True,
                                           return_counts=True)) if name == "unique" else \
                (lambda x, a: torch.unique_consecutive(x[0], return_inverse=True,
                                                       return_counts=True))
            add_case(name, [x], {}, f, exact=True)
        for _ in range(20):
            dt = rng.choice(["float32", "int64", "int64", "bfloat16", "bool"])
            shape = rshape(rng, 0, 3, zero=0.1, sizes=(1, 2, 3, 4))
            nd = len(shape)
            dim = rng.randrange(-max(nd, 1), max(nd, 1))
            base, v = layout(shape, rng)
            x = (small_ints(base, dt, 2), v, False)

            def f(x, a, name=name):
                fn = torch.unique if name == "unique" else torch.unique_consecutive
                return fn(x[0], dim=a["dim"], return_inverse=True, return_counts=True)
            add_case(name + "_dim", [x], {"dim": dim}, f, exact=True)


# ------------------------------------------------- more pointwise ops
def no_neg_zero(t):
    return t + 0.0 if t.is_floating_point() else t


def gen_pointwise_more(rng):
    """nan_to_num, fmod and remainder (tensors and numbers), lerp, clamp with
    tensor bounds (ties at the bounds), cross: broadcast, promoted, special
    values, integers; forward and gradients."""
    for _ in range(25):
        dt = rng.choice(FLOATS + FLOATS + ("int64", "bool"))
        x = inp(rng, rshape(rng, 0, 3), dt, special=0.3)
        args = {"nan": rng.choice([0.0, 1.5, -2.0]), "posinf": rng.choice([None, 3.0, 1e39]),
                "neginf": rng.choice([None, -3.0])}
        add_case("nan_to_num", [x], args,
                 lambda x, a: torch.nan_to_num(x[0], a["nan"], a["posinf"], a["neginf"]),
                 exact=True)
    for name, f in (("fmod", torch.fmod), ("remainder", torch.remainder)):
        for _ in range(35):
            sa, sb = bcast_shapes(rng)
            pair = rng.choice([("float32", "float32")] * 3 + [("bfloat16", "bfloat16"),
                              ("int64", "int64"), (rng.choice(ALL), rng.choice(ALL))])
            a = inp(rng, sa, pair[0], special=0.1 if rng.random() < 0.3 else 0.0)
            b = inp(rng, sb, pair[1], special=0.1 if rng.random() < 0.3 else 0.0)
            if not b[0].is_floating_point() and rng.random() < 0.8:  # mostly no zero divisor
                b = (torch.where(b[0] == 0, torch.ones_like(b[0]), b[0]), b[1], b[2])
            add_case(name, [a, b], {}, lambda x, a, f=f: f(x[0], x[1]), tol=(8.0, 32.0))
        for _ in range(15):
            dt = rng.choice(["float32", "bfloat16", "int64", "int32", "bool"])
            s = rng.choice([2, -3, 5, 2.5, -0.75, 0])
            x = inp(rng, rshape(rng, 0, 3), dt)
            add_case(name + "_scalar", [x], {"s": s}, lambda x, a, f=f: f(x[0], a["s"]),
                     tol=(8.0, 32.0))
    for _ in range(25):
        s1, s2, s3 = bcast_shapes(rng, 3)
        dt = rng.choice(["float32", "float32", "bfloat16", "float16"])
        dts = [dt] * 3 if rng.random() < 0.9 else [dt, rng.choice(FLOATS), dt]
        ins = [inp(rng, s1, dts[0]), inp(rng, s2, dts[1]), inp(rng, s3, dts[2], "unit")]
        add_case("lerp", ins, {}, lambda x, a: torch.lerp(x[0], x[1], x[2]), tol=(8.0, 32.0))
        w = rng.choice([0.0, 0.3, 0.5, 0.7, 1.0, -0.5, 1.5])
        add_case("lerp_scalar", ins[:2], {"w": w}, lambda x, a: torch.lerp(x[0], x[1], a["w"]),
                 tol=(8.0, 32.0))
    for _ in range(35):
        sx, slo, shi = bcast_shapes(rng, 3)
        which = rng.choice(["both", "both", "min", "max"])
        dts = rng.choice([("float32",) * 3] * 4 + [("int64",) * 3, ("bfloat16",) * 3,
                                                   tuple(rng.choice(ALL) for _ in range(3))])
        ins = []
        for s, d in zip((sx, slo, shi), dts):
            t = inp(rng, s, d)
            if t[0].is_floating_point():  # a grid: ties with x; no -0; some NaN and inf
                b = no_neg_zero((t[0].double() * 2).round() / 2)
                if b.numel() and rng.random() < 0.3:
                    b.view(-1)[rng.randrange(b.numel())] = rng.choice([math.nan, math.inf,
                                                                       -math.inf])
                t = (b.to(t[0].dtype), t[1], t[2])
            ins.append(t)
        ins = [ins[0]] + ([ins[1]] if which != "max" else []) + ([ins[2]] if which != "min" else [])
        args = {"lo": which != "max", "hi": which != "min"}

        def f(x, a):
            return torch.clamp(x[0], x[1] if a["lo"] else None,
                               x[1 + a["lo"]] if a["hi"] else None)
        try:  # PyTorch 1.13's backward fails where the bounds broadcast x and each other
            # differently (an in-place logical_and_): then no gradients are compared
            ts = [apply_views(t[0], t[1]).double().requires_grad_(t[0].is_floating_point())
                  for t in ins]
            if any(t.requires_grad for t in ts):
                f(ts, args).sum().backward()
        except RuntimeError as e:
            if "doesn't match the broadcast shape" not in str(e):
                raise
            ins = [(t[0], t[1], False) for t in ins]
        add_case("clamp_tensor", ins, args, f, exact=True)
    for _ in range(25):
        nd = rng.randint(1, 3)
        dim = rng.randrange(-nd, nd)
        out = [rng.choice([1, 2, 3]) for _ in range(nd)]
        out[dim] = 3
        sa = [1 if rng.random() < 0.3 and i != dim % nd else d for i, d in enumerate(out)]
        sb = [1 if rng.random() < 0.3 and i != dim % nd else d for i, d in enumerate(out)]
        dt = rng.choice(["float32", "float32", "bfloat16", "int64"])
        dtb = dt if rng.random() < 0.9 else rng.choice(ALL)
        if rng.random() < 0.1:
            sb = sb[1:] if len(sb) > 1 else sb + [3]  # other dims: refused
        add_case("cross", [inp(rng, sa, dt), inp(rng, sb, dtb)], {"dim": dim},
                 lambda x, a: torch.linalg.cross(x[0], x[1], dim=a["dim"]), tol=(8.0, 32.0))


# ------------------------------------------------------------ predicates
def gen_predicates(rng):
    """isnan ... isneginf, isclose, allclose, equal, count_nonzero, any, all."""
    fns = {"isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
           "isposinf": torch.isposinf, "isneginf": torch.isneginf}
    for name, f in fns.items():
        for _ in range(8):
            x = inp(rng, rshape(rng, 0, 3), rng.choice(ALL), special=0.4, grad=False)
            add_case(name, [x], {}, lambda x, a, f=f: f(x[0]), exact=True)
    for _ in range(40):
        sa, sb = bcast_shapes(rng)
        dt = rng.choice(["float32", "float32", "bfloat16", "float16", "int64", "int32", "bool"])
        a = inp(rng, sa, dt, special=0.15, grad=False)
        b = inp(rng, sb, dt if rng.random() < 0.95 else rng.choice(ALL), special=0.15, grad=False)
        if b[0].is_floating_point() and rng.random() < 0.6:  # near a's values
            try:
                near = torch.broadcast_to(apply_views(a[0], a[1]), apply_views(b[0], b[1]).shape)
                b = ((near.double() * (1 + torch.randn(near.shape).double() * 1e-5)).to(
                    b[0].dtype).contiguous(), [], False)
            except RuntimeError:
                pass
        rtol, atol = rng.choice([(1e-5, 1e-8), (1e-5, 1e-8), (0.0, 0.0), (1e-3, 0.0),
                                 (0.0, 0.1), (-1.0, 0.0)])
        args = {"rtol": rtol, "atol": atol, "nan": rng.random() < 0.4}
        known = ""
        try:  # equal_nan in place over a's shape: PyTorch 1.13 refuses a smaller a
            sa_, sb_ = apply_views(a[0], a[1]).shape, apply_views(b[0], b[1]).shape
            if args["nan"] and a[0].is_floating_point() and \
                    torch.broadcast_shapes(sa_, sb_) != sa_:
                known = KNOWN["isclose_nan_broadcast"]
        except RuntimeError:
            pass
        add_case("isclose", [a, b], args, lambda x, a: torch.isclose(
            x[0], x[1], a["rtol"], a["atol"], a["nan"]), exact=True, known=known)
        add_case("allclose", [a, b], args, lambda x, a: torch.tensor(torch.allclose(
            x[0], x[1], a["rtol"], a["atol"], a["nan"])), exact=True, known=known)
    for _ in range(20):
        sa = rshape(rng, 0, 3)
        dt = rng.choice(ALL)
        a = inp(rng, sa, dt, special=0.1, grad=False)
        b = (apply_views(a[0], a[1]).clone(), [], False) if rng.random() < 0.6 else \
            inp(rng, rng.choice([sa, rshape(rng, 0, 3)]), dt, grad=False)
        if rng.random() < 0.3:
            b = (b[0].to(DT[rng.choice(ALL)]), b[1], False)
        add_case("equal", [a, b], {}, lambda x, a: torch.tensor(torch.equal(x[0], x[1])),
                 exact=True)
    for _ in range(20):
        shape = rshape(rng, 0, 4)
        x = inp(rng, shape, rng.choice(ALL), special=0.2, grad=False)
        if x[0].is_floating_point() and rng.random() < 0.5:
            x = ((x[0] * (torch.rand(x[0].shape) < 0.5)).to(x[0].dtype), x[1], False)
        dims = dims_of(rng, len(shape))
        if dims and rng.random() < 0.1:
            dims = dims + dims[:1]  # a dim twice: refused
        add_case("count_nonzero", [x], {"dims": dims},
                 lambda x, a: torch.count_nonzero(x[0], dim=tuple(a["dims"]) if a["dims"]
                                                  else None), exact=True)
        nd = len(shape)
        for name, f in (("any", torch.any), ("all", torch.all)):
            d = rng.choice([None, rng.randrange(-max(nd, 1), max(nd, 1))])
            keep = rng.random() < 0.5 and d is not None  # torch.any(x) has no keepdim
            args = {"dims": [] if d is None else [d], "keep": keep}
            add_case(name, [x], args,
                     lambda x, a, f=f: f(x[0]) if not a["dims"] else
                     f(x[0], a["dims"][0], keepdim=a["keep"]), exact=True)


# -------------------------------------------- diff, trapezoid, grids, sorts
def gen_sequences(rng):
    """diff (orders, ends joined and promoted, bool, integers) and
    trapezoid (dx; x 1-d, full or broadcast; integers; no samples)."""
    for _ in range(35):
        shape = rshape(rng, 1, 3)
        nd = len(shape)
        dim = rng.randrange(-nd, nd)
        dt = rng.choice(["float32", "float32", "bfloat16", "int64", "bool"])
        ins = [inp(rng, shape, dt)]
        args = {"n": rng.choice([0, 1, 1, 2, 3, 5]), "dim": dim, "pre": False, "app": False}
        for end in ("pre", "app"):
            if rng.random() < 0.35:
                s = list(shape)
                s[dim] = rng.randint(0, 2)
                if rng.random() < 0.1:
                    s = s[1:]  # another number of dims: refused
                ins.append(inp(rng, s, dt if rng.random() < 0.8 else rng.choice(
                    ["float32", "int64"])))
                args[end] = True

        def f(x, a):
            k = 1
            pre = x[k] if a["pre"] else None
            k += a["pre"]
            return torch.diff(x[0], a["n"], a["dim"], pre, x[k] if a["app"] else None)
        add_case("diff", ins, args, f, tol=(8.0, 32.0))
    for _ in range(20):
        shape = rshape(rng, 1, 3)
        dim = rng.randrange(-len(shape), len(shape))
        dt = rng.choice(["float32", "float32", "bfloat16", "int64"])
        dx = rng.choice([1.0, 0.5, -2.0, 3.0])
        add_case("trapezoid", [inp(rng, shape, dt)], {"dx": dx, "dim": dim},
                 lambda x, a: torch.trapezoid(x[0], dx=a["dx"], dim=a["dim"]), tol=(8.0, 64.0))
        xs = rng.choice([[shape[dim]], list(shape), [1] + list(shape[1:]) if len(shape) > 1
                         else [shape[dim]]])
        dtx = rng.choice(["float32", "float32", "int64", dt])
        add_case("trapezoid_x", [inp(rng, shape, dt), inp(rng, xs, dtx)], {"dim": dim},
                 lambda x, a: torch.trapezoid(x[0], x[1], dim=a["dim"]), tol=(8.0, 64.0))


def gen_grids(rng):
    """meshgrid ('ij', 'xy'; 0-d and 1-d), cartesian_prod, rot90 (k any,
    dims both ways), msort, integer topk."""
    for _ in range(20):
        k = rng.randint(1, 3)
        dt = rng.choice(["float32", "float32", "int64", "bfloat16"])
        ins = [inp(rng, rng.choice([[], [rng.randint(0, 4)]]), dt) for _ in range(k)]
        if rng.random() < 0.1:
            ins[-1] = inp(rng, [2], rng.choice(ALL))  # another dtype: refused unless equal
        xy = rng.random() < 0.5
        add_case("meshgrid", ins, {"xy": xy}, lambda x, a: tuple(torch.meshgrid(
            *x, indexing="xy" if a["xy"] else "ij")), exact=True)
    for _ in range(12):
        k = rng.randint(1, 3)
        dt = rng.choice(["float32", "int64", "bfloat16"])
        ins = [inp(rng, [rng.randint(0, 4)], dt) for _ in range(k)]
        add_case("cartesian_prod", ins, {}, lambda x, a: torch.cartesian_prod(*x), exact=True)
    for _ in range(25):
        shape = rshape(rng, 1, 4)
        nd = len(shape)
        d0, d1 = rng.randrange(-nd, nd), rng.randrange(-nd, nd)
        args = {"k": rng.randint(-5, 6), "d0": d0, "d1": d1}
        x = inp(rng, shape, rng.choice(["float32", "float32", "bool", "int64", "bfloat16"]))
        add_case("rot90", [x], args,
                 lambda x, a: torch.rot90(x[0], a["k"], [a["d0"], a["d1"]]), exact=True)
    for _ in range(15):
        dt = rng.choice(["float32", "int64", "int32", "bool", "bfloat16"])
        x = fixed_views(picked_inp(rng, rshape(rng, 0, 3), dt, 0.1))
        add_case("msort", [x], {}, lambda x, a: torch.msort(x[0]), exact=True)
    for _ in range(15):
        shape = rshape(rng, 1, 3)
        nd = len(shape)
        dim = rng.randrange(-nd, nd)
        n = math.prod(shape)
        dt = rng.choice(["int64", "int32"])
        x = (torch.randperm(max(n, 1))[:n].reshape(shape).to(DT[dt]) - 3, [], False)  # distinct
        k = rng.randint(0, shape[dim])
        add_case("topk", [x], {"k": k, "dim": dim, "largest": rng.random() < 0.6},
                 lambda x, a: tuple(torch.topk(x[0], a["k"], a["dim"], a["largest"], True)),
                 exact=True)


def gen_misc(rng):
    for gen in (gen_masked, gen_search, gen_counts, gen_unique, gen_pointwise_more,
                gen_predicates, gen_sequences, gen_grids):
        gen(rng)


NAN_PATHS = ("hardswish", "relu6", "hardtanh", "selu", "celu", "softshrink", "hardshrink")
MORE = (gen_min, gen_maximum, gen_logsumexp, gen_unary_params, gen_rearrange, gen_losses_more,
        gen_row_norms, gen_loss_reductions, gen_loss_weights, gen_activations, gen_losses_rest, gen_scan,
        gen_einsum, gen_distances, gen_misc)


def main(out):
    rng = R
    for gen in (gen_unary, gen_binary, gen_compare, gen_select_ops, gen_reduce, gen_matmul,
                gen_softmax, gen_views, gen_join, gen_index, gen_tri, gen_losses, gen_norms,
                gen_nn, gen_index_add, gen_attention_edges) + MORE:
        gen(rng)
    save(f"{out}/op_cases.safetensors", TENSORS,
         {"cases": json.dumps(CASES, separators=(",", ":"))})
    ops = sorted(set(c["op"] for c in CASES))
    print(f"make_op_cases: {len(CASES)} cases of {len(ops)} ops, "
          f"{sum(1 for c in CASES if c['err'])} refused by PyTorch")


if __name__ == "__main__":
    main(sys.argv[1])
