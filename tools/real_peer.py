"""PyTorch's training step on the batches `bench --preset real` took: the peer of the real recipe.

  build/tools/bench --model seq2seq --preset real --steps 40 --warmup 5 --dump-batches b.st
  /usr/bin/python3 tools/real_peer.py b.st --threads 2 [--amp bf16]

The batches (the translator's default recipe: BPE 4,000 ids, length-sorted
batches of at most 3,000 padded tokens, every step a new shape) and the model's
shape come from the file; the model is ../shared/reference/models.py's Seq2Seq
(post-norm, ReLU, dropout and label smoothing as the file says), the step
zero_grad + forward + loss + backward + AdamW (lr 1e-3, betas 0.9/0.98, eps 1e-9,
weight decay 0.01), as shared/bench/torch_peer.py and bench take it. The first
`warmup` batches are untimed, as in bench. Prints one JSON line with bench's
meaning of the fields:
  tokens_per_step  the mean of the timed steps' target tokens (non-pad: the
                   tokens the loss is taken over);
  tokens_per_s     all those tokens over all the timed steps' time;
  step_ms_median, params, peak_rss_mb (MiB), precision, final_loss.
--reference DIR names the directory of models.py and safetensors_io.py
(default: ../shared/reference beside the project, where the repository is
checked out next to shared/).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batches", help="the file of bench --preset real --dump-batches")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--amp", choices=["off", "bf16"], default="off",
                    help="bf16: autocast forward and loss to bfloat16 (fp32 weights)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", default=os.path.join(here, "..", "..", "shared", "reference"))
    args = ap.parse_args()
    if args.threads < 1:
        ap.error("--threads must be at least 1")
    if not os.path.isfile(os.path.join(args.reference, "models.py")):
        ap.error(f"no models.py in {args.reference} (give --reference DIR)")
    return args


def read_batches(path, safetensors_io):
    """-> ([(src, tgt_in, tgt_out) numpy int64], metadata with numbers)."""
    try:
        tensors, meta = safetensors_io.load(path)
    except (OSError, ValueError) as e:
        sys.exit(f"real_peer: {e}")
    need = ["vocab", "d", "H", "enc_layers", "dec_layers", "d_ff", "max_len", "dropout",
            "label_smoothing", "warmup", "steps"]
    missing = [k for k in need if k not in meta]
    if missing:
        sys.exit(f"real_peer: {path}: not a bench --dump-batches file (no {', '.join(missing)})")
    meta = {k: float(meta[k]) for k in need}
    n = int(meta["warmup"] + meta["steps"])
    batches = []
    for i in range(n):
        names = [f"{side}.{i:06d}" for side in ("src", "tgt_in", "tgt_out")]
        if any(k not in tensors for k in names):
            sys.exit(f"real_peer: {path}: batch {i} of {n} is missing")
        batches.append(tuple(tensors[k] for k in names))
    return batches, meta


def main():
    args = parse_args()
    sys.path.insert(0, os.path.abspath(args.reference))
    import torch
    import models
    import safetensors_io

    batches, m = read_batches(args.batches, safetensors_io)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = models.Seq2SeqConfig(vocab=int(m["vocab"]), d=int(m["d"]), H=int(m["H"]),
                               enc_layers=int(m["enc_layers"]), dec_layers=int(m["dec_layers"]),
                               d_ff=int(m["d_ff"]), max_len=int(m["max_len"]), norm="layernorm",
                               act="relu", norm_first=False, dropout=m["dropout"],
                               label_smoothing=m["label_smoothing"])
    model = models.Seq2Seq(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=0.01)
    warmup = int(m["warmup"])
    times, tokens = [], 0
    for i, (src, tin, tout) in enumerate(batches):
        src, tin, tout = (torch.from_numpy(a.copy()) for a in (src, tin, tout))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            _, loss = model(src, tin, tout)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
            tokens += int((tout != models.PAD).sum())
    if not times:
        sys.exit("real_peer: the file has no timed steps")
    if not torch.isfinite(loss):
        sys.exit(f"real_peer: non-finite loss {loss.item()}")
    print(json.dumps({
        "model": "seq2seq", "preset": "real", "threads": args.threads,
        "tokens_per_step": round(tokens / len(times), 1),
        "step_ms_median": round(statistics.median(times) * 1e3, 3),
        "tokens_per_s": round(tokens / sum(times), 1),
        "params": sum(p.numel() for p in model.parameters()),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "precision": "fp32" if args.amp == "off" else args.amp,
        "final_loss": round(float(loss), 6),
    }))


if __name__ == "__main__":
    main()
