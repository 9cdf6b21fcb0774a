"""Random cases of cgrad's torch.linalg ops (autograd/ops_linalg.c) with
PyTorch 1.13's answers, for tests/interop/check_ops.c (the torch_linalg
test):

    /usr/bin/python3 make_linalg_cases.py DIR   (exit 0: written; 77: no torch)

DIR/linalg_cases.safetensors has make_op_cases.py's layout (its docstring):
each case's inputs are bases seen through views (a transpose of the two
matrix dims, a slice with step 2 and an expand of a batch dim), so the ops
read strided and broadcast matrices; the values are well-conditioned
(singular values or eigenvalues in [0.5, 3], apart from each other), so
PyTorch's float32 and cgrad's double agree within tolerances made from
PyTorch's own float32 error (its distance from float64). The
decompositions are compared through what their sign choices leave alone,
as PyTorch's OpInfo tests do: eigh's (L, |V|), svd's (|U|, S, |Vh|) over
the first k columns and rows. Refusals (singular, not positive-definite,
NaN in an SVD, shapes, dtypes) must be refusals in cgrad too.
"""
import math
import random
import sys

try:
    import torch
except ImportError:
    print("make_linalg_cases: torch not available, skipped")
    sys.exit(77)

import json  # noqa: E402

from make_dtype_files import save  # noqa: E402
import make_op_cases as moc  # noqa: E402

R = random.Random(20261208)
torch.manual_seed(20261208)
LA = torch.linalg

# Differences from PyTorch 1.13 that cgrad keeps on purpose
KNOWN = {
    "det_singular": "det's gradient at an exactly singular matrix: PyTorch 1.13's first-order "
                    "backward gives 0 (its LU solve of det * I = 0), cgrad the adjugate's "
                    "transpose through the SVD (PyTorch's own formula for singular inputs, "
                    "used by its create_graph backward)",
    "slogdet_singular": "slogdet's gradient at a singular matrix: not finite in both, but where "
                        "the solve with a zero pivot gives inf and where NaN differs (a 3 x 3 "
                        "of rank 2: PyTorch +-inf and finite, cgrad +-inf and NaN)",
    "norm_overflow": "vector_norm of float32 values whose powers overflow float32: PyTorch inf "
                     "(or 0 where they underflow), cgrad the norm (sums in double)",
    "cholesky_nan": "cholesky of a matrix with NaN in the triangle read: PyTorch (OpenBLAS) NaN "
                    "where the factorisation spreads it, cgrad NaN over the whole triangle",
}


def orth(n):
    q, r = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0) if n else q


def spread(k, lo, hi):
    """k values in [lo, hi], at least (hi - lo) / (2 k) apart, shuffled"""
    if k == 0:
        return torch.zeros(0, dtype=torch.float64)
    v = torch.linspace(lo, hi, k, dtype=torch.float64) if k > 1 else torch.tensor([lo + hi]) / 2
    v = v + (torch.rand(k, dtype=torch.float64) - 0.5) * (hi - lo) / (4 * k)
    return v[torch.randperm(k)]


def gen(shape, kind):
    """float64 matrices [*, m, n]: 'gen' U diag(s) V^T, 'spd' U diag(s) U^T,
    'sym' the same with signs mixed"""
    *batch, m, n = shape
    out = torch.empty(shape, dtype=torch.float64)
    flat = out.view(-1, m, n) if math.prod(batch) else out.view(0, m, n)
    for i in range(flat.shape[0]):
        k = min(m, n)
        if kind == "gen":
            s = spread(k, 0.5, 3.0)
            flat[i] = orth(m)[:, :k] @ torch.diag(s) @ orth(n)[:k, :]
        else:
            s = spread(n, 0.5, 3.0) * (torch.randint(0, 2, (n,)) * 2 - 1 if kind == "sym" else 1)
            u = orth(n)
            flat[i] = u @ torch.diag(s) @ u.T
    return out


def mat_inp(rng, batch, m, n, kind="gen", dt="float32", grad=True):
    """(base, views, grad): matrices of gen(kind) seen through a transpose
    of the matrix dims, a step-2 slice and an expand of batch dims"""
    shape = batch + [m, n]
    small = list(shape)
    exp = [d for d in range(len(batch)) if batch[d] > 1 and rng.random() < 0.3]
    for d in exp:
        small[d] = 1
    base = gen(small, kind)
    views = [["expand", shape]] if exp else []
    cur = list(small)
    if batch and rng.random() < 0.4:
        d = rng.randrange(len(batch))
        big = list(cur)
        big[d] = 2 * cur[d] + 1
        filler = gen(big, kind)
        idx = [slice(None)] * len(big)
        idx[d] = slice(1, 1 + 2 * cur[d], 2)
        filler[tuple(idx)] = base
        base, cur = filler, big
        views.insert(0, ["slice", d, 1, 1 + 2 * small[d], 2])
    if rng.random() < 0.5:
        nd = len(shape)
        base = base.transpose(-1, -2).contiguous()
        views.insert(0, ["T", nd - 2, nd - 1])
    return (base.to(moc.DT[dt]), views, grad)


def rbatch(rng):
    return rng.choice([[], [], [2], [3], [2, 2], [0], [1, 2]])


SKIPPED = []


def add(op, ins, args, fn, known="", tol=(4.0, 16.0)):
    """make_op_cases.add_case; a case whose gradient PyTorch 1.13 itself
    cannot make (solve's and lstsq's backwards of some vector right-hand
    sides: a gradient of the wrong shape, a dim out of range) is left out
    and counted"""
    i = len(moc.CASES)
    try:
        moc.add_case(op, ins, args, fn, tol=tol, known=known)
    except (RuntimeError, IndexError) as e:
        for k in [k for k in moc.TENSORS if k.startswith(f"{i}.")]:
            del moc.TENSORS[k]
        SKIPPED.append(f"{op}: {str(e).splitlines()[0][:120]}")


def bad_inputs(rng, op, fn, args, square=True, n_in=1):
    """PyTorch's refusals: 1-d, int64, bfloat16, not square"""
    other = [mat_inp(rng, [], 3, 2)] if n_in == 2 else []
    add(op, [moc.inp(rng, [3], "float32")] + other, args, fn)
    add(op, [moc.inp(rng, [3, 3], "int64")] + other, args, fn)
    add(op, [moc.inp(rng, [3, 3], "bfloat16")] + other, args, fn)
    if square:
        add(op, [moc.inp(rng, [2, 3], "float32")] + other, args, fn)


def as_matrix(f, x):
    """f(A, B) with a vector B (PyTorch's rule) made a column and the
    result made a vector again: the same values, and a gradient PyTorch
    1.13 can make (its solve's and lstsq's backwards of some vector cases
    fail: a gradient of the wrong shape, a dim out of range)"""
    A, B = x
    vec = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    out = f(A, B.unsqueeze(-1) if vec else B)
    return out.squeeze(-1) if vec else out


def solve_vec(x, a):
    return as_matrix(LA.solve, x)


def lstsq_vec(x, a):
    return as_matrix(lambda A, B: LA.lstsq(A, B).solution, x)


def gen_lu(rng):
    for _ in range(40):
        batch, n = rbatch(rng), rng.choice([1, 2, 3, 4, 5])
        a = mat_inp(rng, batch, n, n)
        vec = rng.random() < 0.3
        if vec:  # B [*, n]: a vector
            b = moc.inp(rng, batch + [n] if rng.random() < 0.5 else [n], "float32")
        else:
            bb = batch[rng.randint(0, len(batch)):] if batch and rng.random() < 0.3 else batch
            b = moc.inp(rng, bb + [n, rng.choice([1, 2, 3])], "float32")
        add("la_solve", [a, b], {}, solve_vec)
        add("la_inv", [mat_inp(rng, batch, n, n)], {}, lambda x, a: LA.inv(x[0]))
        add("la_det", [mat_inp(rng, batch, n, n)], {}, lambda x, a: LA.det(x[0]))
        add("la_slogdet", [mat_inp(rng, batch, n, n, rng.choice(["gen", "sym"]))], {},
            lambda x, a: LA.slogdet(x[0]))
        up = rng.random() < 0.5
        add("la_cholesky", [mat_inp(rng, batch, n, n, "spd")], {"upper": up},
            lambda x, a: LA.cholesky(x[0], upper=a["upper"]))
    for n in (0,):  # 0 x 0 and an empty batch
        add("la_det", [(torch.zeros(2, 0, 0), [], True)], {}, lambda x, a: LA.det(x[0]))
        add("la_slogdet", [(torch.zeros(0, 0), [], True)], {}, lambda x, a: LA.slogdet(x[0]))
        add("la_inv", [(torch.zeros(0, 3, 3), [], True)], {}, lambda x, a: LA.inv(x[0]))
        add("la_solve", [(torch.zeros(0, 0), [], True), (torch.zeros(0), [], True)], {},
            lambda x, a: LA.solve(x[0], x[1]))
        add("la_cholesky", [(torch.zeros(0, 0), [], True)], {"upper": False},
            lambda x, a: LA.cholesky(x[0]))
    # refusals: singular, not positive-definite, shapes and dtypes
    sing = torch.tensor([[1., 2.], [2., 4.]])
    add("la_solve", [(sing, [], True), (torch.ones(2), [], True)], {},
        lambda x, a: LA.solve(x[0], x[1]))
    add("la_inv", [(torch.stack([torch.eye(2), sing]), [], True)], {}, lambda x, a: LA.inv(x[0]))
    add("la_cholesky", [(torch.tensor([[1., 2.], [2., 1.]]), [], True)], {"upper": False},
        lambda x, a: LA.cholesky(x[0]))
    add("la_solve", [mat_inp(rng, [], 3, 3), moc.inp(rng, [2], "float32")], {},
        lambda x, a: LA.solve(x[0], x[1]))
    add("la_solve", [mat_inp(rng, [2], 3, 3), moc.inp(rng, [4, 3, 1], "float32")], {},
        lambda x, a: LA.solve(x[0], x[1]))
    for op, f in (("la_inv", LA.inv), ("la_det", LA.det), ("la_cholesky", LA.cholesky)):
        bad_inputs(rng, op, lambda x, a, f=f: f(x[0]), {"upper": False})
    # the special gradients
    add("la_det", [(sing.clone(), [], True)], {}, lambda x, a: LA.det(x[0]),
        known=KNOWN["det_singular"])
    add("la_slogdet", [(sing.clone(), [], True)], {}, lambda x, a: LA.slogdet(x[0]))  # +-inf in both
    sing3 = torch.tensor([[1., 2., 3.], [2., 4., 6.], [1., 0., 1.]])
    add("la_slogdet", [(sing3, [], True)], {}, lambda x, a: LA.slogdet(x[0]),
        known=KNOWN["slogdet_singular"])
    nan = torch.tensor([[1., math.nan], [0., 1.]])
    add("la_solve", [(nan, [], True), (torch.ones(2), [], True)], {},
        lambda x, a: LA.solve(x[0], x[1]))
    add("la_det", [(nan.clone(), [], False)], {}, lambda x, a: LA.det(x[0]))
    add("la_slogdet", [(nan.clone(), [], False)], {}, lambda x, a: LA.slogdet(x[0]))
    add("la_cholesky", [(torch.tensor([[math.nan, 0.], [0., 1.]]), [], False)], {"upper": False},
        lambda x, a: LA.cholesky(x[0]), known=KNOWN["cholesky_nan"])


def svd_out(x, a):
    u, s, vh = LA.svd(x[0], full_matrices=a["full"])
    k = s.shape[-1]
    return u[..., :k].abs(), s, vh[..., :k, :].abs()


def gen_decomp(rng):
    for _ in range(40):
        batch = rbatch(rng)
        m, n = rng.choice([1, 2, 3, 4, 5]), rng.choice([1, 2, 3, 4, 5])
        mode = rng.choice(["reduced", "reduced", "complete", "r"])
        g = mode == "reduced" or (mode == "complete" and m <= n)
        add("la_qr", [mat_inp(rng, batch, m, n, grad=g)], {"mode": mode},
            lambda x, a: LA.qr(x[0], mode=a["mode"]))
        uplo = rng.choice(["L", "U"])
        add("la_eigh", [mat_inp(rng, batch, n, n, "sym")], {"uplo": uplo},
            lambda x, a: (lambda lv: (lv[0], lv[1].abs()))(LA.eigh(x[0], UPLO=a["uplo"])))
        add("la_eigvalsh", [mat_inp(rng, batch, n, n, "sym")], {"uplo": uplo},
            lambda x, a: LA.eigvalsh(x[0], UPLO=a["uplo"]))
        add("la_svd", [mat_inp(rng, batch, m, n)], {"full": rng.random() < 0.4}, svd_out)
        add("la_svdvals", [mat_inp(rng, batch, m, n)], {}, lambda x, a: LA.svdvals(x[0]))
        add("la_pinv", [mat_inp(rng, batch, m, n)], {"atol": -1.0, "rtol": -1.0},
            lambda x, a: LA.pinv(x[0]))
        mm = max(m, n)  # lstsq: A [*, mm, n] (tall or square), B a matrix or a vector
        b = moc.inp(rng, batch + [mm] if rng.random() < 0.3 else batch + [mm, rng.choice([1, 2])],
                    "float32")
        add("la_lstsq", [mat_inp(rng, batch, mm, n), b], {"rcond": -1.0}, lstsq_vec)
    for shape in ([0, 0], [3, 0], [0, 3], [2, 0, 0]):
        z = (torch.zeros(shape), [], True)
        zq = (torch.zeros(shape), [], shape[-2] <= shape[-1])  # complete, m > n: no gradient
        add("la_qr", [zq], {"mode": "complete"}, lambda x, a: LA.qr(x[0], mode="complete"))
        add("la_svd", [z], {"full": False}, svd_out)
        add("la_svdvals", [z], {}, lambda x, a: LA.svdvals(x[0]))
        add("la_pinv", [z], {"atol": -1.0, "rtol": -1.0}, lambda x, a: LA.pinv(x[0]))
        if shape[-1] == shape[-2]:
            add("la_eigh", [z], {"uplo": "L"}, lambda x, a: (lambda lv: (lv[0], lv[1].abs()))(
                LA.eigh(x[0])))
    rank1 = torch.tensor([[1., 2.], [2., 4.]])  # pinv's cutoff, lstsq's rank
    add("la_pinv", [(rank1, [], True)], {"atol": -1.0, "rtol": -1.0}, lambda x, a: LA.pinv(x[0]))
    add("la_lstsq", [(torch.tensor([[1., 2.], [2., 4.], [3., 6.]]), [], False),
                     (torch.tensor([[1.], [2.], [3.]]), [], True)], {"rcond": -1.0}, lstsq_vec)
    nan = torch.tensor([[1., math.nan], [0., 1.]])
    add("la_svd", [(nan, [], True)], {"full": False}, svd_out)
    add("la_svdvals", [(nan, [], True)], {}, lambda x, a: LA.svdvals(x[0]))
    inf = torch.tensor([[1., math.inf], [math.inf, 1.]])
    add("la_eigh", [(inf, [], False)], {"uplo": "L"},
        lambda x, a: (lambda lv: (lv[0], lv[1].abs()))(LA.eigh(x[0])))
    add("la_svd", [(inf.clone(), [], False)], {"full": False}, svd_out)
    add("la_qr", [(torch.ones(3, 2), [], True)], {"mode": "x"}, lambda x, a: LA.qr(x[0], mode="x"))
    add("la_eigh", [(torch.eye(2), [], True)], {"uplo": "X"},
        lambda x, a: LA.eigh(x[0], UPLO=a["uplo"]))
    for op, f in (("la_eigh", lambda x, a: LA.eigh(x[0])), ("la_svdvals", lambda x, a: LA.svdvals(x[0])),
                  ("la_qr", lambda x, a: LA.qr(x[0]))):
        bad_inputs(rng, op, f, {"uplo": "L", "mode": "reduced"}, square=op == "la_eigh")
    add("la_lstsq", [mat_inp(rng, [], 3, 2), moc.inp(rng, [2], "float32")], {"rcond": -1.0},
        lambda x, a: LA.lstsq(x[0], x[1]).solution)


def dims_of(rng, nd):
    if nd == 0 or rng.random() < 0.25:
        return []
    return rng.sample(range(nd), rng.randint(1, nd))


def gen_norms(rng):
    ords = [2.0, 1.0, 3.0, 0.5, 1.5, -1.0, -2.5, 0.0, math.inf, -math.inf]
    for _ in range(60):
        o = rng.choice(ords)
        dt = rng.choice(["float32"] * 4 + ["bfloat16", "float16"])
        x = moc.inp(rng, moc.rshape(rng, 0, 3), dt, "normal", 0.05 if rng.random() < 0.2 else 0.0)
        nd = len(moc.apply_views(x[0], x[1]).shape)
        dims = dims_of(rng, nd)
        keep = rng.random() < 0.3
        b = moc.apply_views(x[0], x[1]).double()
        known = KNOWN["norm_overflow"] if (b.abs() > 1e18).any() or (
            (b != 0) & (b.abs() < 1e-18)).any() else ""
        add("la_vector_norm", [x], {"ord": moc.json_safe(o), "dims": dims, "keep": keep},
            lambda x, a: LA.vector_norm(x[0], float(a["ord"]), a["dims"] or None, a["keep"]),
            known=known)
    add("la_vector_norm", [moc.inp(rng, [2, 3], "int64")], {"ord": 2.0, "dims": [], "keep": False},
        lambda x, a: LA.vector_norm(x[0], 2.0))
    add("la_vector_norm", [(torch.zeros(2, 0), [], True)], {"ord": "inf", "dims": [1], "keep": False},
        lambda x, a: LA.vector_norm(x[0], math.inf, [1]))
    add("la_vector_norm", [(torch.tensor([1e30, 2e30]), [], True)],
        {"ord": 2.0, "dims": [], "keep": False}, lambda x, a: LA.vector_norm(x[0], 2.0),
        known=KNOWN["norm_overflow"])
    mords = ["fro", "nuc", "1", "-1", "2", "-2", "inf", "-inf"]
    for _ in range(40):
        o = rng.choice(mords)
        batch = rbatch(rng)
        m, n = rng.choice([1, 2, 3, 4]), rng.choice([1, 2, 3, 4])
        svd = o in ("nuc", "2", "-2")
        dt = "float32" if svd or rng.random() < 0.7 else "bfloat16"
        x = mat_inp(rng, batch, m, n, dt=dt)
        nd = len(batch) + 2
        dims = rng.sample(range(nd), 2) if nd > 2 and rng.random() < 0.5 else [-2, -1]
        keep = rng.random() < 0.3
        add("la_matrix_norm", [x], {"ord": o, "dims": dims, "keep": keep},
            lambda x, a: LA.matrix_norm(x[0], a["ord"] if a["ord"] in ("fro", "nuc")
                                        else float(a["ord"]), a["dims"], a["keep"]))
    add("la_matrix_norm", [moc.inp(rng, [3], "float32")], {"ord": "fro", "dims": [-2, -1],
                                                           "keep": False},
        lambda x, a: LA.matrix_norm(x[0]))
    add("la_matrix_norm", [moc.inp(rng, [0, 3], "float32")], {"ord": "2", "dims": [-2, -1],
                                                              "keep": False},
        lambda x, a: LA.matrix_norm(x[0], 2.0))
    add("la_matrix_norm", [moc.inp(rng, [0, 3], "float32")], {"ord": "1", "dims": [-2, -1],
                                                              "keep": False},
        lambda x, a: LA.matrix_norm(x[0], 1.0))


def main(out):
    moc.CASES.clear()
    moc.TENSORS.clear()
    for gen_fn in (gen_lu, gen_decomp, gen_norms):
        gen_fn(R)
    save(f"{out}/linalg_cases.safetensors", moc.TENSORS,
         {"cases": json.dumps(moc.CASES, separators=(",", ":"))})
    ops = sorted(set(c["op"] for c in moc.CASES))
    print(f"make_linalg_cases: {len(moc.CASES)} cases of {len(ops)} ops, "
          f"{sum(1 for c in moc.CASES if c['err'])} refused by PyTorch; "
          f"{len(SKIPPED)} left out (PyTorch's backward failed)")
    for s in SKIPPED:
        print("  left out:", s)


if __name__ == "__main__":
    main(sys.argv[1])
