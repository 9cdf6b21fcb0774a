"""Load checkpoints written by cgrad (export_ckpt) into the PyTorch reference
and check that its logits equal the ones cgrad computed, and that the
weights (freshly initialised by cgrad with seed 5 for the char LM and 6 for
the translator) are the ones PyTorch draws after torch.manual_seed(seed).
decode.safetensors: cgrad's greedy decoding and beam search (several beams
and length penalties) of a translator with decisive logits equal the
reference's greedy_decode and train_seq2seq.beam_search, token for token.

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


def build(kind, cfg):
    """The reference model of a cgrad config; "bias": false (--bias false) as
    PyTorch makes it with bias=False: every nn.Linear built without a bias
    (its constructor then draws the weight alone) and every LayerNorm's bias
    unregistered (it draws nothing)."""
    cls, conf = (models.CharLM, models.CharLMConfig) if kind == "charlm" else \
        (models.Seq2Seq, models.Seq2SeqConfig)
    fields = {f: cfg[f] for f in conf.__dataclass_fields__ if f in cfg}
    if cfg.get("bias", True):
        return cls(conf(**fields))
    linear_init = torch.nn.Linear.__init__
    torch.nn.Linear.__init__ = lambda self, i, o, bias=True, **kw: linear_init(self, i, o, False, **kw)
    try:
        model = cls(conf(**fields))
    finally:
        torch.nn.Linear.__init__ = linear_init
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.register_parameter("bias", None)
    return model


def check(path):
    tensors, meta = safetensors_io.load(path)
    cfg = json.loads(meta["config"])
    torch.manual_seed(INIT_SEED[meta["model"]])
    model = build(meta["model"], cfg)
    if meta["model"] == "charlm":
        inputs = [torch.from_numpy(tensors["input.x"])]
    else:
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


def check_decode(path):
    import train_seq2seq  # noqa: E402 (the reference's beam search)
    tensors, meta = safetensors_io.load(path)
    cfg = json.loads(meta["config"])
    fields = {f: cfg[f] for f in models.Seq2SeqConfig.__dataclass_fields__ if f in cfg}
    model = models.Seq2Seq(models.Seq2SeqConfig(**fields))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()
                           if not k.startswith(("input.", "expect."))}, strict=True)
    model.eval()
    src = torch.from_numpy(tensors["input.src"])
    ours = tensors["expect.greedy"]
    steps = ours.shape[1]
    ref = model.greedy_decode(src, steps)
    bad = []
    for b in range(src.shape[0]):
        want = ref[b].tolist() + [models.PAD] * (steps - ref.shape[1])
        if want != ours[b].tolist():
            bad.append(f"greedy {b}: ours {ours[b].tolist()}, reference {want}")
    n_beam = 0
    for name in sorted(k for k in tensors if k.startswith("expect.beam.")):
        _, _, b, beam, alpha = name.split(".", 4)
        got = tensors[name].tolist()[:-1]  # ends in -1
        row = src[int(b)].tolist()
        s = torch.tensor([row[:row.index(models.EOS) + 1]])
        want = train_seq2seq.beam_search(model, s, steps, beam=int(beam), alpha=float(alpha))
        n_beam += 1
        if got != want:
            bad.append(f"beam {beam} alpha {alpha} source {b}: ours {got}, reference {want}")
    for line in bad:
        print(f"{os.path.basename(path)}: MISMATCH {line}")
    print(f"{os.path.basename(path)}: greedy of {src.shape[0]} sources and {n_beam} beam searches "
          f"vs the reference's: {'ok' if not bad else 'MISMATCH'}")
    return not bad and n_beam > 0


def main():
    d = sys.argv[1]
    ok = all([check(os.path.join(d, f)) for f in ("charlm.safetensors", "seq2seq.safetensors",
                                                  "charlm_nobias.safetensors",
                                                  "seq2seq_nobias.safetensors")])
    ok = check_decode(os.path.join(d, "decode.safetensors")) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
