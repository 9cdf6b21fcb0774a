"""Load checkpoints written by cgrad (export_ckpt) into the PyTorch reference
and check that its logits equal the ones cgrad computed, and that the
weights (freshly initialised by cgrad with seed 5 for the char LM and 6 for
the translator) are the ones PyTorch draws after torch.manual_seed(seed).

    /usr/bin/python3 check_torch_load.py DIR    (exit 0: equal; 77: no torch)
"""
import json
import os
import sys

try:
    import torch
except ImportError:
    print("check_torch_load: torch not available, skipped")
    sys.exit(77)

REF = os.environ.get("CG_REFERENCE_DIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                  "..", "..", "..", "shared", "reference"))
if not os.path.isdir(REF):
    print(f"check_torch_load: reference models not found at {REF}, skipped")
    sys.exit(77)
sys.path.insert(0, REF)
import models  # noqa: E402
import safetensors_io  # noqa: E402


INIT_SEED = {"charlm": 5, "seq2seq": 6}  # the seeds export_ckpt.c builds with


def check(path):
    tensors, meta = safetensors_io.load(path)
    cfg = json.loads(meta["config"])
    torch.manual_seed(INIT_SEED[meta["model"]])
    if meta["model"] == "charlm":
        fields = {f: cfg[f] for f in models.CharLMConfig.__dataclass_fields__ if f in cfg}
        model = models.CharLM(models.CharLMConfig(**fields))
        inputs = [torch.from_numpy(tensors["input.x"])]
    else:
        fields = {f: cfg[f] for f in models.Seq2SeqConfig.__dataclass_fields__ if f in cfg}
        model = models.Seq2Seq(models.Seq2SeqConfig(**fields))
        inputs = [torch.from_numpy(tensors["input.src"]), torch.from_numpy(tensors["input.tgt_in"])]
    state = {k: torch.from_numpy(v) for k, v in tensors.items()
             if not k.startswith(("input.", "expect."))}
    fresh = model.state_dict()
    init_err = max((fresh[k] - state[k]).abs().max().item() for k in fresh)
    init_ok = init_err < 1e-6
    print(f"{os.path.basename(path)}: initial weights vs PyTorch's with the same seed: "
          f"max |difference| {init_err:.3g}: {'ok' if init_ok else 'MISMATCH'}")
    model.load_state_dict(state, strict=True)  # every parameter, names and shapes
    model.eval()
    with torch.no_grad():
        logits, _ = model(*inputs)
    ours = torch.from_numpy(tensors["expect.logits"])
    err = (logits - ours).abs().max().item()
    ok = torch.allclose(logits, ours, rtol=1e-4, atol=1e-5)
    print(f"{os.path.basename(path)}: {meta['model']}, {len(state)} parameter tensors loaded "
          f"by PyTorch, max |logit difference| {err:.3g}: {'ok' if ok else 'MISMATCH'}")
    return ok and init_ok


def main():
    d = sys.argv[1]
    ok = all([check(os.path.join(d, f)) for f in ("charlm.safetensors", "seq2seq.safetensors")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
