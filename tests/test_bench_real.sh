#!/usr/bin/env bash
# bench --preset real (issue 37): the translator's default recipe on real
# pairs, every step a new batch shape.
#   - its JSON line parses; tokens_per_step is the mean of the timed batches'
#     non-pad target tokens (counted again here from the --dump-batches file:
#     one meaning of tokens); the batches change shape and are the recipe's
#     (tgt_in is BOS then tgt_out shifted; sources end in EOS); flops_per_step
#     counts the sources' B x S and the targets' B x T tokens each on its side;
#   - the file has warmup + steps batches and the model's shape; the PyTorch
#     twin (tools/real_peer.py) reads it and counts the same tokens when
#     python3-torch and shared/reference are there (else that part is skipped);
#   - the gpt2 and paper presets (at a small width) have their batch, layers
#     and vocabulary;
#   - --arch llama (charlm): LLaMA's block, its parameters and FLOPs (three
#     feed-forward matrices of 2/3 the width, no biases, RMSNorm weights
#     only); tools/llama_peer.py builds as many parameters (with
#     python3-torch); --arch refused for another name or the translator;
#   - the refusals: another model, --T with it, --dump-batches, --data or
#     --vocab-size without it;
#     --dump-batches refused before any work when it is --data, exists
#     (bench has no --force) or cannot be created; standard output into
#     --data or into --dump-batches.
#   test_bench_real.sh BENCH PAIRS SOURCE_ROOT
set -uo pipefail
bench=$1
pairs=$2
root=$3
. "$(dirname "$0")/shell_lib.sh" bench_real

# 3,200 pairs (8 numbered copies of the sample): room for the recipe's 500
# validation and 1,000 test pairs
for k in 1 2 3 4 5 6 7 8; do
  awk -F'\t' -v k="$k" '{ printf "%s %d\t%s %d\n", $1, k * NR, $2, k * NR }' "$pairs"
done >p.tsv

rc=0
"$bench" --model seq2seq --preset real --data p.tsv --vocab-size 500 --steps 6 --warmup 2 \
  --threads 2 --dump-batches b.st >r.out 2>r.err || rc=$?
skip_if_no_bpe "$rc" r.err
if [ "$rc" -ne 0 ]; then
  fail "bench --preset real: exit $rc: $(tail -c 300 r.err)"
  finish
fi
json_ok "bench --preset real" r.out
python3 - "$(tail -1 r.out)" b.st <<'PY' || fail "bench --preset real: the checks above"
import json, struct, sys
r = json.loads(sys.argv[1])
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__")
data = raw[8 + n:]
def ids(name):
    h = head[name]
    assert h["dtype"] == "I64", h
    b, e = h["data_offsets"]
    v = struct.unpack(f"<{(e - b) // 8}q", data[b:e])
    rows, cols = h["shape"]
    return [list(v[i * cols:(i + 1) * cols]) for i in range(rows)]
warmup, steps = int(float(meta["warmup"])), int(float(meta["steps"]))
assert (warmup, steps) == (2, 6), meta
assert int(float(meta["vocab"])) == 500 and float(meta["dropout"]) == 0.3, meta
assert len(head) == 3 * (warmup + steps), sorted(head)
counts, shapes = [], set()
for i in range(warmup + steps):
    src, tin, tout = (ids(f"{s}.{i:06d}") for s in ("src", "tgt_in", "tgt_out"))
    shapes.add((len(src), len(src[0]), len(tout[0])))
    for s, a, b in zip(src, tin, tout):
        assert a[0] == 1 and a[1:] == [x if x != 2 else 0 for x in b[:-1]] or a[1:] == b[:-1], (a, b)
        assert 2 in b and 2 in s, (s, b)           # EOS ends both sides
        assert all(0 <= x < 500 for x in s + a + b)
    if i >= warmup:
        counts.append(sum(x != 0 for row in tout for x in row))
mean = sum(counts) / len(counts)
assert abs(r["tokens_per_step"] - mean) < 0.06, (r["tokens_per_step"], mean)
# the model FLOPs (bench's top comment) of the timed batches, each side on
# its own tokens: the encoder and cross-attention's k, v on B x S sources,
# the rest on B x T targets (they were all counted on B x T)
V, d, ff = (int(float(meta[k])) for k in ("vocab", "d", "d_ff"))
enc, dec = (int(float(meta[k])) for k in ("enc_layers", "dec_layers"))
flops, srcs = 0.0, []
for i in range(warmup, warmup + steps):
    B, S = len(ids(f"src.{i:06d}")), len(ids(f"src.{i:06d}")[0])
    T = len(ids(f"tgt_out.{i:06d}")[0])
    srcs.append(S)
    n_src = enc * (4 * d * d + 2 * d * ff) + dec * 2 * d * d
    n_tgt = dec * (6 * d * d + 2 * d * ff) + V * d
    flops += 6 * (n_src * B * S + n_tgt * B * T) + 12 * d * (enc * S * B * S + dec * T * B * T
                                                              + dec * S * B * T)
flops /= steps
assert abs(r["flops_per_step"] - flops) <= 1e-3 * flops, (r["flops_per_step"], flops)
assert abs(r["S"] - sum(srcs) / steps) < 0.06, (r["S"], srcs)
assert r["preset"] == "real" and r["tokens_per_s"] > 0 and r["final_loss"] > 0, r
assert len(shapes) > 1, shapes                     # the shapes change
print(f"ok: bench --preset real: {len(shapes)} batch shapes, {mean:.1f} target tokens a step")
PY

# the PyTorch twin on the same batches (needs python3-torch and shared/)
ref="$root/../shared/reference"
if /usr/bin/python3 -c "import torch, numpy" 2>/dev/null && [ -f "$ref/models.py" ]; then
  if /usr/bin/python3 "$root/tools/real_peer.py" b.st --threads 2 --reference "$ref" >t.out 2>t.err; then
    json_ok "real_peer.py" t.out
    python3 - "$(tail -1 r.out)" "$(tail -1 t.out)" <<'PY' || fail "real_peer.py: not the same batches"
import json, sys
c, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert c["tokens_per_step"] == t["tokens_per_step"], (c, t)
assert c["params"] == t["params"], (c["params"], t["params"])
print(f"ok: real_peer.py: the same {t['tokens_per_step']} tokens a step, {t['params']} parameters")
PY
  else
    fail "real_peer.py: $(tail -c 300 t.err)"
  fi
  expect "real_peer.py on a JSON line" 1 "real_peer: r.out: " \
    /usr/bin/python3 "$root/tools/real_peer.py" r.out --reference "$ref"
else
  echo "skip: real_peer.py (no python3-torch or no $ref)"
fi

# the bf16 issue's presets at a small width (--d 64): their batch, layers
# and vocabulary (GPT-2's 50,257, the paper's 37,000) reach the model
for spec in "charlm gpt2 4 256 50257 12" "seq2seq paper 16 64 37000 12"; do
  set -- $spec
  if "$bench" --model "$1" --preset "$2" --d 64 --steps 1 --warmup 0 --threads 2 >p.out 2>p.err; then
    python3 - "$(tail -1 p.out)" "$3" "$4" "$5" "$6" <<'PY' || fail "bench --preset $2: $(tail -1 p.out)"
import json, sys
r = json.loads(sys.argv[1])
B, T, V, layers = (int(x) for x in sys.argv[2:])
d, ff = 64, 256
# every layer holds at least its attention (4 d x d) and feed-forward (2 d x ff)
assert (r["B"], r["T"], r["tokens_per_step"]) == (B, T, B * T), r
assert r["params"] >= V * d + layers * (4 * d * d + 2 * d * ff), r["params"]
assert r["params"] < V * d + 2 * layers * (4 * d * d + 2 * d * ff), r["params"]
print(f"ok: bench --preset {r['preset']}: B {B}, T {T}, {r['params']} parameters")
PY
  else
    fail "bench --model $1 --preset $2: $(tail -c 300 p.err)"
  fi
done

# LLaMA's block at charlm tiny (d 128, 4 layers, d_ff 512 -> 320)
if "$bench" --model charlm --preset tiny --arch llama --steps 1 --warmup 0 --threads 2 >l.out 2>l.err; then
  python3 - "$(tail -1 l.out)" <<'PY' || fail "bench --arch llama: $(tail -1 l.out)"
import json, sys
r = json.loads(sys.argv[1])
V, d, L, ff, T, B = 65, 128, 4, 320, 64, 12
mm = L * (4 * d * d + 3 * d * ff)                # q, k, v, o; fc1, fc3, fc2; no biases
assert r["arch"] == "llama" and r["params"] == V * d + mm + (2 * L + 1) * d, r
flops = 6 * (mm + V * d) * B * T + 12 * L * T * d * B * T
assert abs(r["flops_per_step"] - flops) <= 1e-3 * flops, (r["flops_per_step"], flops)
print(f"ok: bench --arch llama: {r['params']} parameters, the FLOPs of three FF matrices")
PY
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    /usr/bin/python3 "$root/tools/llama_peer.py" --preset tiny --threads 2 --steps 1 --warmup 0 >lp.out 2>lp.err &&
      python3 - "$(tail -1 l.out)" "$(tail -1 lp.out)" <<'PY' || fail "llama_peer.py: $(tail -c 300 lp.err) $(tail -1 lp.out)"
import json, sys
c, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert c["params"] == t["params"] and c["tokens_per_step"] == t["tokens_per_step"], (c, t)
print(f"ok: llama_peer.py: the same {t['params']} parameters and {t['tokens_per_step']} tokens a step")
PY
  else
    echo "skip: llama_peer.py (no python3-torch)"
  fi
else
  fail "bench --arch llama: $(tail -c 300 l.err)"
fi
expect "--arch unknown" 2 "^bench: error: --arch: unknown architecture 'x' (choices: gpt, llama)" \
  "$bench" --arch x
expect "--arch llama with seq2seq" 2 "^bench: error: --arch llama is charlm's" \
  "$bench" --model seq2seq --arch llama

expect "--preset paper with charlm" 2 "unknown preset 'paper' for charlm" \
  "$bench" --model charlm --preset paper
expect "--preset real with charlm" 2 "use it with --model seq2seq" \
  "$bench" --model charlm --preset real --data p.tsv
expect "--dump-batches without real" 2 "needs --preset real" \
  "$bench" --model seq2seq --preset tiny --dump-batches x.st
# --data and --vocab-size are real's too (they were ignored: a random run timed)
expect "--data without real" 2 "^bench: error: --data needs --preset real" \
  "$bench" --model seq2seq --data /nonexistent --steps 1 --warmup 0 --threads 1
expect "--vocab-size without real" 2 "^bench: error: --vocab-size needs --preset real" \
  "$bench" --steps 1 --warmup 0 --threads 1 --vocab-size 500
expect "--T with real" 2 "takes its shapes from the data" \
  "$bench" --model seq2seq --preset real --T 8 --data p.tsv
expect "--preset real, missing data" 1 "no-such.tsv" \
  "$bench" --model seq2seq --preset real --data no-such.tsv
[ -e x.st ] && fail "--dump-batches without real wrote x.st"
# --dump-batches is checked before any work (the first line is the refusal)
R=(--model seq2seq --preset real --data p.tsv --vocab-size 500 --steps 1 --warmup 0 --threads 1)
cp p.tsv p.orig && cp b.st b.orig
expect "--dump-batches = --data" 1 \
  "^bench: error: --dump-batches 'p.tsv' is the same file as --data 'p.tsv', which this command reads" \
  "$bench" "${R[@]}" --dump-batches p.tsv
intact "--dump-batches = --data" p.tsv p.orig
expect "--dump-batches over an existing file" 1 "^bench: error: --dump-batches 'b.st' exists" \
  "$bench" "${R[@]}" --dump-batches b.st
intact "--dump-batches over an existing file" b.st b.orig
expect "--dump-batches in a missing directory" 1 "^bench: error: cannot write 'nodir/x.st': directory 'nodir'" \
  "$bench" "${R[@]}" --dump-batches nodir/x.st
expect "standard output appended to --data" 1 \
  "^bench: error: standard output is --data 'p.tsv', which this command reads" \
  sh -c 'exec "$@" >>p.tsv' sh "$bench" "${R[@]}"
intact "standard output appended to --data" p.tsv p.orig
# nor into --dump-batches (`>>` makes it: named as standard output, round six)
expect "standard output appended to --dump-batches" 1 \
  "^bench: error: standard output is 'd.st', the --dump-batches file this command writes" \
  sh -c 'exec "$@" >>d.st' sh "$bench" "${R[@]}" --dump-batches d.st
[ -s d.st ] && fail "--dump-batches into standard output: d.st was written"
finish
