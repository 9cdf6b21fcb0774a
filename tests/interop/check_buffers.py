"""Buffers: a cgrad file loads into the PyTorch module strictly, and back.

    /usr/bin/python3 check_buffers.py DIR   (exit 0: equal; 1: not; 77: no torch)

Reads DIR/cgrad_buffers.safetensors (tests/interop/check_buffers.c write),
checks that its keys are the module's state_dict() keys in their order and
dtypes, loads it with load_state_dict(strict=True), compares the values,
then writes DIR/torch_buffers.safetensors: the state dict after changing
each value as the C side's `read` expects (k = 1).

Tied weights (TiedLM: lm_head.weight = tok_emb.weight): cgrad writes the
tensor once (DIR/cgrad_tied.safetensors), which loads with strict=False,
lm_head.weight the one missing key; after adding 1 to it, PyTorch's
state_dict (both names) goes to DIR/torch_tied_both.safetensors, the head's
name alone (what safetensors' save_model may keep) to
torch_tied_head.safetensors, and both names with different values to
torch_tied_bad.safetensors, which the C side must refuse.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from torch import nn
except ImportError:
    print("check_buffers: torch not available, skipped")
    sys.exit(77)
from make_dtype_files import load, save  # noqa: E402  the safetensors format


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.zeros(3, dtype=torch.bool))
        self.fc = nn.Linear(3, 2)
        self.bn = nn.BatchNorm1d(2)
        self.register_buffer("cache", torch.zeros(2), persistent=False)


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(4, 3)
        self.lm_head = nn.Linear(3, 4, bias=False)
        self.lm_head.weight = self.tok_emb.weight


def check_tied(out):
    got = load(f"{out}/cgrad_tied.safetensors")
    model = TiedLM()
    ok = list(got) == ["tok_emb.weight"]
    res = model.load_state_dict(got, strict=False)
    ok = ok and res.missing_keys == ["lm_head.weight"] and not res.unexpected_keys
    ok = ok and model.lm_head.weight is model.tok_emb.weight
    ok = ok and torch.equal(model.lm_head.weight, got["tok_emb.weight"])
    print("tied: cgrad's one entry loads (strict=False, missing lm_head.weight):", ok)
    with torch.no_grad():
        model.tok_emb.weight.add_(1)
    sd = dict(model.state_dict())
    ok = ok and list(sd) == ["tok_emb.weight", "lm_head.weight"]
    save(f"{out}/torch_tied_both.safetensors", sd)
    save(f"{out}/torch_tied_head.safetensors", {"lm_head.weight": sd["lm_head.weight"]})
    bad = {"tok_emb.weight": sd["tok_emb.weight"], "lm_head.weight": sd["lm_head.weight"] + 1}
    save(f"{out}/torch_tied_bad.safetensors", bad)
    return ok


def main(out):
    got = load(f"{out}/cgrad_buffers.safetensors")
    model = Net()
    keys = list(model.state_dict().keys())
    with open(f"{out}/cgrad_buffers.safetensors", "rb") as f:  # the file's own order
        n = struct.unpack("<Q", f.read(8))[0]
        order = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
    ok = order == keys
    print("keys in state_dict order:", ok, order)
    model.load_state_dict(got, strict=True)
    sd = model.state_dict()
    want = {"mask": torch.tensor([True, False, True]), "bn.weight": torch.full((2,), 1.5),
            "bn.bias": torch.full((2,), -0.25), "bn.running_mean": torch.full((2,), 0.5),
            "bn.running_var": torch.full((2,), 2.0),
            "bn.num_batches_tracked": torch.tensor(7)}
    for k, v in want.items():
        same = sd[k].dtype == v.dtype and torch.equal(sd[k], v)
        print(f"{k:24s} {str(sd[k].dtype):14s} {'equal' if same else 'DIFFERENT'}")
        ok = ok and same
    with torch.no_grad():
        model.mask.copy_(torch.tensor([False, False, False]))
        model.bn.weight.add_(1)
        model.bn.bias.sub_(1)
        model.bn.running_mean.add_(1)
        model.bn.running_var.add_(1)
        model.bn.num_batches_tracked.add_(1)
    save(f"{out}/torch_buffers.safetensors", dict(model.state_dict()))
    ok = check_tied(out) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
