#!/usr/bin/env bash
# seq2seq train --extra-data (issue 38; meson suite 'models'): more training
# pairs that never touch the validation and test splits.
#   1. p.tsv: 10 pairs split 5/2/3 (RandomState(0).permutation(10) =
#      [2 8 4 9 1 | 6 7 | 3 0 5]: lines 7, 8 validation, 4, 1, 6 test);
#      e.tsv's pairs that share a sentence with a held-out pair (a test
#      pair's source, a validation pair's target, a test pair's target as
#      a source) are dropped, as are repeated sources (of a training pair,
#      of an earlier extra pair); the startup line counts them
#   2. the test split is the same pairs in the same order with and without
#      the flag; an extra file whose pairs are all dropped trains exactly
#      (bit for bit) what the run without the flag trains
#   3. --resume with the same file continues bit-exactly; with another
#      file, without it, or given to a run trained without one: refused
#   4. eval, translate and average read such a checkpoint
#   5. a missing, empty or malformed extra file: one line, exit 1
#   6. the extra file is a file the run reads: never one it writes (the
#      checkpoint with --force, its metrics log) nor standard output
#   and, beside them, the Noam rate of every step in the metrics log (from
#   step 1, as the reference trainer counts), and --lr X's peak of X at
#   step --warmup
#   test_seq2seq_extra.sh SEQ2SEQ CKPT_WRITER
set -uo pipefail
seq2seq=$1
tool=$2
. "$(dirname "$0")/shell_lib.sh" seq2seq_extra

for ((i = 0; i < 10; i++)); do printf 'the cat %d sat\tdie katze %d sass\n' $i $i; done >p.tsv
printf '%s\n' $'the cat 3 sat\tneu eins' $'a new one\tdie katze 6 sass' \
  $'die katze 0 sass\tirgendwas' $'the cat 2 sat\tandere' $'a dog 1 ran\tein hund 1 lief' \
  $'a dog 1 ran\tnoch ein hund' $'a dog 2 ran\tein hund 2 lief' >e.tsv
S2S=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32
     --max-tokens 200 --valid-size 2 --test-size 3 --test-limit 3 --examples 3 --threads 1
     --eval-every 4)

# 1. the drops, counted on the startup line
train_ok "without --extra-data" . "$seq2seq" train "${S2S[@]}" --steps 4 --out a.st
mv b.out a.out
grep -q '^train 5 pairs in ' b.err || fail "startup line without the flag: $(grep '^train' b.err)"
# the recipe's optimizer (train_seq2seq.py's, the paper's): Adam (0.9, 0.98), eps 1e-9
st_py a.st <<'EOF' && echo "ok: Adam (0.9, 0.98), eps 1e-9" || fail "a.st's optimizer is not the recipe's"
m = load(sys.argv[1])[1]
assert m['optim.type'] == 'adam' and [float(m['optim.' + k]) for k in ('beta1', 'beta2', 'eps')] == [0.9, 0.98, 1e-9], m
EOF
# the Noam rate of each step, counted from 1 as train_seq2seq.py's loop
# counts it (its lambda at step 0 would divide by zero): every step's
# "lr" in the metrics log (logged with 10 digits)
"$seq2seq" train "${S2S[@]}" --steps 3 --log-every 1 --factor 0.5 --warmup 10 --out lr.st \
  >/dev/null 2>lr.err || fail "training for the Noam rates failed: $(tail -1 lr.err)"
python3 -c '
import json, sys
got = [(j["step"], j["lr"]) for j in map(json.loads, open(sys.argv[1])) if "lr" in j]
want = [(s, 0.5 * 16 ** -0.5 * min(s ** -0.5, s * 10 ** -1.5)) for s in (1, 2, 3)]
sys.exit(not (len(got) == 3 and all(a == c and abs(b / d - 1) < 1e-9 for (a, b), (c, d) in zip(got, want))))' \
  lr.st.metrics.jsonl && echo "ok: the Noam rate of steps 1 to 3" ||
  fail "the metrics log's Noam rates: $(grep '"lr"' lr.st.metrics.jsonl)"
# --lr X instead of --factor: the Noam peak, at step --warmup, is X
"$seq2seq" train "${S2S[@]}" --steps 3 --log-every 1 --lr 0.002 --warmup 3 --out lrp.st \
  >/dev/null 2>lrp.err || fail "training with --lr for the Noam peak failed: $(tail -1 lrp.err)"
python3 -c '
import json, sys
got = [j["lr"] for j in map(json.loads, open(sys.argv[1])) if "lr" in j]
sys.exit(not (len(got) == 3 and abs(got[2] / 0.002 - 1) < 1e-9))' lrp.st.metrics.jsonl &&
  echo "ok: --lr 0.002 --warmup 3: the rate of step 3 is 0.002" ||
  fail "--lr 0.002 --warmup 3: the metrics log's rates: $(grep '"lr"' lrp.st.metrics.jsonl)"
train_ok "with --extra-data" . "$seq2seq" train "${S2S[@]}" --extra-data e.tsv --steps 4 --out x.st
want='^train 7 pairs (extra pairs: 7 read, 3 dropped as held-out, 2 dropped as duplicates, 2 used) in '
if grep -q "$want" b.err; then
  echo "ok: counts: $(grep '^train' b.err)"
else
  fail "counts: $(grep '^train' b.err)"
fi

# 2. the test split is unchanged; nothing else changes when nothing joins
if [ "$(grep -E '^(SRC|REF) ' a.out)" = "$(grep -E '^(SRC|REF) ' b.out)" ] &&
   [ "$(grep -c '^SRC ' a.out)" -eq 3 ]; then
  echo "ok: the test split is the same 3 pairs in the same order"
else
  fail "test split changed: $(grep -E '^(SRC|REF) ' b.out)"
fi
printf '%s\n' $'the cat 3 sat\tx' $'the cat 2 sat\ty' >none.tsv # a test source, a training source
train_ok "all extra pairs dropped" . "$seq2seq" train "${S2S[@]}" --extra-data none.tsv --steps 4 \
  --out n.st
grep -q '2 read, 1 dropped as held-out, 1 dropped as duplicates, 0 used' b.err ||
  fail "counts, none used: $(grep '^train' b.err)"
if "$tool" same a.st n.st >/dev/null 2>&1; then
  echo "ok: no extra pair used: bit-identical to the run without --extra-data"
else
  fail "an extra file of dropped pairs changed the run"
fi

# 3. resume
"$seq2seq" train "${S2S[@]}" --extra-data e.tsv --steps 6 --out s6.st >/dev/null 2>s6.err ||
  fail "6 steps: $(tail -1 s6.err)"
"$seq2seq" train "${S2S[@]}" --extra-data e.tsv --steps 6 --stop-at 3 --out r.st >/dev/null \
  2>r.err || fail "--stop-at 3: $(tail -1 r.err)"
cp r.st r0.st
refused "resume without --extra-data" "'r.st' was trained with --extra-data '.*e.tsv'" \
  "$seq2seq" train --resume r.st
sed 's/ran/walked/' e.tsv >e2.tsv
refused "resume with another extra file" "--extra-data: '.*e2.tsv' is not the data" \
  "$seq2seq" train --resume r.st --extra-data e2.tsv
sed 's/ein hund 2/ein Hund 2/' e.tsv >e3.tsv # same size, other bytes
refused "resume with an edited extra file" "same size .* different checksum" \
  "$seq2seq" train --resume r.st --extra-data e3.tsv
intact "refused resumes" r.st r0.st
refused "--extra-data for a run trained without" "'a.st' was trained without --extra-data" \
  "$seq2seq" train --resume a.st --steps 8 --extra-data e.tsv
if "$seq2seq" train --resume r.st --extra-data e.tsv >/dev/null 2>r.err &&
   "$tool" same s6.st r.st >/dev/null 2>&1; then
  echo "ok: resume with the same extra file is bit-exact"
else
  fail "resume with --extra-data differs from the straight run: $(tail -c 300 r.err)"
fi

# 4. the commands that read a checkpoint
if "$seq2seq" eval --ckpt x.st --data p.tsv >v.out 2>v.err && grep -q '"test_pairs": 3' v.out; then
  echo "ok: eval scores --data's test split: $(cat v.out)"
else
  fail "eval: $(cat v.out) $(tail -c 300 v.err)"
fi
expect "translate" 0 "" "$seq2seq" translate --ckpt x.st "a dog 1 ran"
[ "$(wc -l <out.txt)" -eq 1 ] || fail "translate: $(cat out.txt)"
expect "average" 0 "" "$seq2seq" average --out avg.st x.st s6.st
expect "eval of the average" 0 "" "$seq2seq" eval --ckpt avg.st --data p.tsv

# 5. bad extra files: one line, exit 1, nothing written
printf 'ok\tgut\nno tab here\n' >m.tsv
: >z.tsv
one_line() { [ "$(wc -l <err.txt)" -eq 1 ] || fail "$1: more than one line: $(cat err.txt)"; }
expect "malformed extra file" 1 "^seq2seq: error: --extra-data: m.tsv:2: missing tab" \
  "$seq2seq" train "${S2S[@]}" --extra-data m.tsv --steps 4 --out bad.st
one_line "malformed extra file"
expect "missing extra file" 1 "^seq2seq: error: --extra-data: cannot open 'nope.tsv'" \
  "$seq2seq" train "${S2S[@]}" --extra-data nope.tsv --steps 4 --out bad.st
one_line "missing extra file"
expect "empty extra file" 1 "^seq2seq: error: --extra-data: 'z.tsv' is empty" \
  "$seq2seq" train "${S2S[@]}" --extra-data z.tsv --steps 4 --out bad.st
one_line "empty extra file"
[ ! -e bad.st ] || fail "a refused run wrote bad.st"

# 6. a file read is never a file written, --force or not
cp e.tsv e.orig
expect "--out = --extra-data (--force)" 1 \
  "^seq2seq: error: --extra-data 'e.tsv' is the same file as 'e.tsv', the checkpoint this run writes" \
  "$seq2seq" train "${S2S[@]}" --extra-data e.tsv --steps 4 --out e.tsv --force
intact "--out = --extra-data" e.tsv e.orig
cp e.tsv w.st.metrics.jsonl
expect "--extra-data = the run's own metrics log" 1 \
  "^seq2seq: error: --extra-data 'w.st.metrics.jsonl' is the same file as .*its metrics log" \
  "$seq2seq" train "${S2S[@]}" --extra-data w.st.metrics.jsonl --steps 4 --out w.st
intact "--extra-data = the run's own metrics log" w.st.metrics.jsonl e.orig
expect "standard output appended to --extra-data" 1 \
  "^seq2seq: error: standard output is --extra-data 'e.tsv', which this command reads" \
  sh -c 'exec "$@" >>e.tsv' sh "$seq2seq" train "${S2S[@]}" --extra-data e.tsv --steps 4 --out o.st
intact "standard output appended to --extra-data" e.tsv e.orig
[ ! -e w.st ] && [ ! -e o.st ] || fail "a refused run wrote a checkpoint"
finish
