"""Load checkpoints written by cgrad (export_ckpt) into the PyTorch reference
and check that its logits equal the ones cgrad computed.

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


def check(path):
    tensors, meta = safetensors_io.load(path)
    cfg = json.loads(meta["config"])
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
    model.load_state_dict(state, strict=True)  # every parameter, names and shapes
    model.eval()
    with torch.no_grad():
        logits, _ = model(*inputs)
    ours = torch.from_numpy(tensors["expect.logits"])
    err = (logits - ours).abs().max().item()
    ok = torch.allclose(logits, ours, rtol=1e-4, atol=1e-5)
    print(f"{os.path.basename(path)}: {meta['model']}, {len(state)} parameter tensors loaded "
          f"by PyTorch, max |logit difference| {err:.3g}: {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    d = sys.argv[1]
    ok = all([check(os.path.join(d, f)) for f in ("charlm.safetensors", "seq2seq.safetensors")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
