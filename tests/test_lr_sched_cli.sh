#!/usr/bin/env bash
# --lr-schedule in both train commands (models/train/lr_sched.c; meson
# suite 'models'):
#   1. plateau: after the warmup the rate is --lr, cut by --gamma when
#      the validation loss has not improved for --lr-patience evaluations:
#      each step's rate in the metrics log is PyTorch 1.13's
#      ReduceLROnPlateau (its rule, replayed here on the checkpoint's
#      exact history), a cut happens, and a run stopped after a cut and
#      resumed is the uninterrupted run, byte for byte (charlm, seq2seq)
#   2. onecycle --cycle-momentum: Adam's beta1 follows OneCycleLR's
#      momentum (0.95 down to 0.85 while the rate rises, and back), as
#      the checkpoint stopped mid-run records it; resumed == uninterrupted
#   3. seq2seq takes the kinds: noam is the default's rates (the formula),
#      cosine with --lr and --warmup gives the warmup + cosine rates, and
#      charlm takes noam (peak --lr at --warmup)
#   4. refusals in one line, exit 2, nothing written: --factor with
#      another kind, --cycle-momentum without onecycle or with an optimizer
#      without momentum, --lr-patience without plateau, noam's --warmup 0,
#      plateau's --gamma 1, --min-lr above the peak
#   test_lr_sched_cli.sh CHARLM SEQ2SEQ FIXTURES
set -uo pipefail
charlm=$1
seq2seq=$2
fx=$3
. "$(dirname "$0")/shell_lib.sh" lr_sched_cli
cp "$fx"/c.txt "$fx"/p.tsv .
TINY=(--data c.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1
      --log-every 1 --precision fp32)
S2S=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32
     --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --log-every 1
     --precision fp32)

# The metrics log's rates (NAME.metrics.jsonl beside CKPT) against the
# warmup ramp then ReduceLROnPlateau's cuts, replayed on CKPT's history.
# plateau_rates NAME CKPT LR WARMUP GAMMA PATIENCE
plateau_rates() {
  local name=$1
  shift
  if st_py "$@" <<'EOF2'; then
import json, math
path, lr, warmup, gamma, patience = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5])
h = json.loads(load(path)[1]['train'])['history']
evals = [(s, v) for s, v in zip(h['step'], h['val']) if s > 0 and s >= warmup]
# torch.optim.lr_scheduler.ReduceLROnPlateau (1.13): mode min, threshold 1e-4
# rel, cooldown 0, min_lr 0, eps 1e-8
best, bad, rate, cuts = math.inf, 0, lr, {}
for s, v in evals:
    if v < best * (1 - 1e-4):
        best, bad = v, 0
    else:
        bad += 1
    if bad > patience:
        new = max(rate * gamma, 0.0)
        if rate - new > 1e-8:
            rate = new
        bad = 0
    cuts[s] = rate
rows = [json.loads(l) for l in open(path + '.metrics.jsonl')]
rows = [r for r in rows if 'lr' in r]
assert rows, 'no rates logged'
ncut = 0
for r in rows:
    s = r['step']
    want = lr * s / warmup if s <= warmup else lr
    for e, c in cuts.items():
        if e < s:
            want = c
    assert abs(r['lr'] - want) <= 1e-6 * lr, (s, r['lr'], want)
    ncut += want < lr and s > warmup
assert ncut > 0, 'no cut: the case tests nothing'
EOF2
    echo "ok: $name: the rates are the warmup, then ReduceLROnPlateau's cuts"
  else
    fail "$name: rates of $2"
  fi
}

echo "== 1. plateau"
# (evaluations at 2, 4 and 6 fall in the warmup and are not judged: the one
# at 6 is better than the one at 8, which is not cut for it)
P=(--lr-schedule plateau --lr 0.03 --gamma 0.5 --lr-patience 0 --warmup 8 --eval-every 2)
train_ok "charlm plateau" '"step": 24' "$charlm" train "${TINY[@]}" "${P[@]}" --steps 24 --out p.st
plateau_rates "charlm plateau" p.st 0.03 8 0.5 0
"$charlm" train "${TINY[@]}" "${P[@]}" --steps 24 --stop-at 14 --out p2.st >/dev/null 2>p.err ||
  fail "charlm plateau --stop-at 14: $(tail -c 300 p.err)"
train_ok "charlm plateau resumed" '"step": 24' "$charlm" train --resume p2.st
same_file "charlm plateau: stopped at 14 and resumed = uninterrupted" p.st p2.st
SP=(--lr-schedule plateau --lr 0.1 --gamma 0.5 --lr-patience 0 --warmup 2 --eval-every 2)
"$seq2seq" train "${S2S[@]}" "${SP[@]}" --steps 16 --out sp.st >/dev/null 2>sp.err ||
  fail "seq2seq plateau: $(tail -c 300 sp.err)"
plateau_rates "seq2seq plateau" sp.st 0.1 2 0.5 0
"$seq2seq" train "${S2S[@]}" "${SP[@]}" --steps 16 --stop-at 9 --out sp2.st >/dev/null 2>sp.err ||
  fail "seq2seq plateau --stop-at 9: $(tail -c 300 sp.err)"
"$seq2seq" train --resume sp2.st >/dev/null 2>sp.err || fail "seq2seq plateau resumed: $(tail -c 300 sp.err)"
same_file "seq2seq plateau: stopped at 9 and resumed = uninterrupted" sp.st sp2.st

echo "== 2. onecycle --cycle-momentum"
O=(--lr-schedule onecycle --cycle-momentum --steps 10 --eval-every 5)
train_ok "charlm onecycle --cycle-momentum" '"step": 10' "$charlm" train "${TINY[@]}" "${O[@]}" --out o.st
"$charlm" train "${TINY[@]}" "${O[@]}" --stop-at 4 --out o2.st >/dev/null 2>o.err ||
  fail "onecycle --stop-at 4: $(tail -c 300 o.err)"
# OneCycleLR's momentum after 4 steps (the one step 4 took: its step 3):
# phase 1 ends at step 0.3 * 10 - 1 = 2, so 1/7 of the way from 0.85 up
# to 0.95 by the cosine; at the end 0.95
if st_py o2.st o.st <<'EOF2'; then
import math
def cos_anneal(a, b, pct):
    return b + (a - b) / 2.0 * (math.cos(math.pi * pct) + 1)
for path, want in ((sys.argv[1], cos_anneal(0.85, 0.95, 1 / 7)), (sys.argv[2], 0.95)):
    got = float(load(path)[1]['optim.beta1'])
    assert abs(got - want) < 1e-12, (path, got, want)
EOF2
  echo "ok: onecycle --cycle-momentum: beta1 is OneCycleLR's momentum at step 4 and at the end"
else
  fail "onecycle --cycle-momentum: beta1"
fi
train_ok "onecycle resumed" '"step": 10' "$charlm" train --resume o2.st
same_file "onecycle --cycle-momentum: stopped at 4 and resumed = uninterrupted" o.st o2.st
train_ok "onecycle --cycle-momentum with sgd --momentum" '"step": 3' "$charlm" train "${TINY[@]}" \
  --lr-schedule onecycle --cycle-momentum --optimizer sgd --momentum 0.9 --steps 3 --out os.st

echo "== 3. seq2seq's kinds"
# rates: noam (the default, --factor 0.5), cosine after a linear warmup
"$seq2seq" train "${S2S[@]}" --steps 6 --warmup 3 --eval-every 3 --out n.st >/dev/null 2>n.err ||
  fail "seq2seq noam: $(tail -c 300 n.err)"
"$seq2seq" train "${S2S[@]}" --steps 6 --warmup 3 --eval-every 3 --lr-schedule noam --out n2.st \
  >/dev/null 2>n.err || fail "seq2seq --lr-schedule noam: $(tail -c 300 n.err)"
same_file "seq2seq --lr-schedule noam is the default" n.st n2.st
"$seq2seq" train "${S2S[@]}" --steps 6 --warmup 3 --eval-every 3 --lr-schedule cosine --lr 0.002 \
  --min-lr 0.0001 --out cs.st >/dev/null 2>n.err || fail "seq2seq cosine: $(tail -c 300 n.err)"
"$charlm" train "${TINY[@]}" --steps 6 --warmup 3 --eval-every 3 --lr-schedule noam --lr 0.002 \
  --out ln.st >/dev/null 2>n.err || fail "charlm noam: $(tail -c 300 n.err)"
if python3 - <<'EOF2'; then
import json, math
def rates(p):
    return [(j['step'], j['lr']) for j in map(json.loads, open(p)) if 'lr' in j]
def noam(s, d, w, f):
    return f * d ** -0.5 * min(s ** -0.5, s * w ** -1.5)
for s, r in rates('n.st.metrics.jsonl'):
    assert abs(r - noam(s, 16, 3, 0.5)) < 1e-9, ('noam', s, r)
for s, r in rates('cs.st.metrics.jsonl'):
    k = s - 1
    want = 0.002 * (k + 1) / 3 if k < 3 else \
        0.0001 + 0.5 * (1 + math.cos(math.pi * (k - 3) / 3)) * (0.002 - 0.0001)
    assert abs(r - want) < 1e-9, ('cosine', s, r, want)
f = 0.002 * math.sqrt(16 * 3)
for s, r in rates('ln.st.metrics.jsonl'):
    assert abs(r - noam(s, 16, 3, f)) < 1e-9, ('charlm noam', s, r)
assert len(rates('cs.st.metrics.jsonl')) == 6
EOF2
  echo "ok: seq2seq's noam (default) and cosine, charlm's noam: the formulas' rates"
else
  fail "seq2seq's and charlm's kinds: rates"
fi

echo "== 4. refusals"
expect "--factor with cosine" 2 "\-\-factor is noam's" \
  "$seq2seq" train "${S2S[@]}" --steps 2 --lr-schedule cosine --factor 1 --out x.st
expect "--cycle-momentum without onecycle" 2 "\-\-cycle-momentum is onecycle's" \
  "$charlm" train "${TINY[@]}" --steps 2 --cycle-momentum --out x.st
expect "--cycle-momentum with adagrad" 2 "\-\-cycle-momentum: optim set_momentum: adagrad has no momentum" \
  "$charlm" train "${TINY[@]}" --steps 2 --lr-schedule onecycle --cycle-momentum --optimizer adagrad \
  --out x.st
expect "--cycle-momentum with sgd without momentum" 2 "\-\-cycle-momentum: .*built without momentum" \
  "$seq2seq" train "${S2S[@]}" --steps 2 --lr-schedule onecycle --cycle-momentum --optimizer sgd \
  --out x.st
expect "--lr-patience without plateau" 2 "\-\-lr-patience is plateau's" \
  "$seq2seq" train "${S2S[@]}" --steps 2 --lr-patience 3 --out x.st
expect "noam --warmup 0" 2 "\-\-lr-schedule noam peaks at step --warmup" \
  "$seq2seq" train "${S2S[@]}" --steps 2 --warmup 0 --out x.st
expect "plateau --gamma 1" 2 "\-\-lr-schedule plateau cuts the rate" \
  "$charlm" train "${TINY[@]}" --steps 2 --lr-schedule plateau --gamma 1 --out x.st
expect "--min-lr above --lr" 2 "\-\-min-lr 0.1 is above the peak --lr 0.01" \
  "$charlm" train "${TINY[@]}" --steps 2 --lr 0.01 --min-lr 0.1 --out x.st
for f in x.st x.st.metrics.jsonl x.st.loss.png; do
  [ ! -e $f ] || fail "a refused run wrote $f"
done
finish
