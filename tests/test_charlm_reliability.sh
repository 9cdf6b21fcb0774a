#!/usr/bin/env bash
# Reliability of `charlm train` (meson suite 'reliability'):
#   1. resume is bit-identical: 40 steps in one run == 20 steps (--stop-at),
#      then --resume to 40 (parameters and optimizer state, byte for byte)
#   2. SIGINT saves a checkpoint and exits 0; that checkpoint equals an
#      uninterrupted run stopped at the same step, and resuming it for 10
#      more steps equals an uninterrupted run to that step
#   1b. --data /dev/stdin and a FIFO work (the corpus is read once); eval
#      and --resume of such a run refuse the pipe it recorded (no hang), also
#      standard input ('-') and from another directory
#   2b. a second writer of the same checkpoint is refused (a lock)
#   2c. a signal before the first step saves nothing (--force keeps the old)
#   2d. a signal during an evaluation cuts it short; the run saves and resumes
#   2e. a signal while the data are read (set-up) stops before the first
#      step, exit 0, nothing saved
#   3. a NaN loss (a parameter set to 3e38) stops training with the step (numbered
#      from 1, as on the progress line) and the
#      tensor named, exit non-zero, and the last checkpoint is not overwritten
#   4. --skip-nonfinite skips those steps instead; --patience counts
#      evaluations without a finite validation loss (a NaN model stops early)
#   5. --precision bf16: bit-identical resume, kept by the checkpoint
#      (resume, eval); --precision fp32 on resume switches the run; a
#      damaged recorded precision is named (resume, with --precision or not; eval)
#   6. sample --attention: the last 32 tokens drawn in their context
#   7. past 2^24 steps (a resumed checkpoint's step set to 16777216): every
#      step evaluated, recorded exactly in the history and best_step
#   test_charlm_reliability.sh CHARLM CKPT_WRITER
set -euo pipefail
charlm=$1
tool=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/cg_charlm_rel.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "test_charlm_reliability: $*" >&2; exit 1; }
# a small corpus (3.6 KB, 21 characters)
words=(the a whale sea ship captain ahab white call me ishmael some years ago never mind how long)
for ((i = 0; i < 300; i++)); do
  printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}" "${words[$(((i * 5 + 3) % ${#words[@]}))]}"
  ((i % 6 == 5)) && printf '\n'
done >tiny.txt
model=(--data tiny.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1
       --eval-every 10 --seed 3)

# 1. resume bit-identity
"$charlm" train "${model[@]}" --steps 40 --out full.st >/dev/null 2>full.log ||
  fail "training failed: $(tail -1 full.log)"
"$charlm" train "${model[@]}" --steps 40 --stop-at 20 --out half.st >/dev/null 2>half.log ||
  fail "training to step 20 failed: $(tail -1 half.log)"
cp half.st half20.st
"$charlm" train --resume half.st --threads 1 >/dev/null 2>resume.log ||
  fail "resume failed: $(tail -1 resume.log)"
"$tool" same full.st half.st || fail "40 steps != 20 steps + resume to 40"
echo "resume: 40 steps == 20 + 20 resumed (bit-identical parameters and optimizer state)"
# 1a. the metrics log of a resumed run is the uninterrupted run's: --log-every
# is kept by the checkpoint (resumed without it, the default steps/20 took over)
"$charlm" train "${model[@]}" --steps 40 --log-every 3 --out lf.st >/dev/null 2>lf.log ||
  fail "training with --log-every 3 failed: $(tail -1 lf.log)"
"$charlm" train "${model[@]}" --steps 40 --log-every 3 --stop-at 20 --out lh.st >/dev/null \
  2>lh.log || fail "training to step 20 failed: $(tail -1 lh.log)"
"$charlm" train --resume lh.st --threads 1 >/dev/null 2>lh.log ||
  fail "resume failed: $(tail -1 lh.log)"
untimed() { sed 's/, "tokens_per_s".*//' "$1"; }
diff <(untimed lf.st.metrics.jsonl) <(untimed lh.st.metrics.jsonl) >lh.diff ||
  fail "the resumed run's metrics log differs from the uninterrupted run's: $(head -4 lh.diff)"
"$charlm" train --resume lh.st --steps 44 --log-every 2 --threads 1 >/dev/null 2>lh.log ||
  fail "resume with --log-every failed: $(tail -1 lh.log)"
[ "$(grep -c '"loss"' lh.st.metrics.jsonl)" -eq 16 ] ||
  fail "--log-every 2 given to --resume was not used: $(tail -3 lh.st.metrics.jsonl)"
echo "resume: the metrics log equals the uninterrupted run's (--log-every kept; given again: used)"
# the learning rate in the metrics log keeps its digits however small (10
# decimals printed 1e-11, the first warmup step of --lr 1e-9, as 0)
"$charlm" train "${model[@]}" --steps 2 --lr 1e-9 --log-every 1 --out lr.st >/dev/null 2>lr.log ||
  fail "training with --lr 1e-9 failed: $(tail -1 lr.log)"
python3 -c 'import json, sys
lr = [json.loads(l)["lr"] for l in open(sys.argv[1]) if "\"lr\"" in l]
sys.exit(not (len(lr) == 2 and abs(lr[0] / 1e-11 - 1) < 1e-6 and abs(lr[1] / 2e-11 - 1) < 1e-6))' \
  lr.st.metrics.jsonl || fail "the metrics log's lr: $(grep '"lr"' lr.st.metrics.jsonl)"
echo "the metrics log: a learning rate of 1e-11 is 1e-11"
# the last line's tokens_per_s is the tokens trained (steps x batch x T) over
# elapsed_s, the time in steps: an account, not a speed (the time it gives
# rounds to elapsed_s's 0.1 s)
"$charlm" train --data tiny.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 64 --batch-size 16 --threads 1 \
  --eval-every 400 --steps 400 --out tps.st >tps.json 2>tps.log || fail "the 400-step run: $(tail -1 tps.log)"
python3 -c 'import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
t = 400 * 16 * 64 / j["tokens_per_s"]
sys.exit(not (j["elapsed_s"] >= 0.1 and abs(t - j["elapsed_s"]) <= 0.051) and "%s: %.3f s" % (j, t))' \
  tps.json 2>tps.bad ||
  fail "tokens_per_s x elapsed_s is not the tokens trained: $(cat tps.bad)"
# 1c. the cosine's length is --steps: a resume given another --steps past the
# warmup (100 steps) changes the schedule, and says so in one warning; within
# the warmup, or with the same --steps, the schedule is the same and it is silent
"$charlm" train "${model[@]}" --steps 130 --stop-at 110 --out cs.st >/dev/null 2>cs.log ||
  fail "training to step 110 failed: $(tail -1 cs.log)"
cp cs.st cs110.st
# the metrics log's rates follow the schedule: warmup over 100 steps, then
# a cosine down to lr/10 at step 130 (--steps)
python3 -c 'import json, math, sys
lr = {j["step"]: j["lr"] for j in map(json.loads, open(sys.argv[1])) if "lr" in j}
s0 = min(lr)
hi = lr[s0] * 100 / s0
want = lambda s: hi * s / 100 if s <= 100 else hi / 10 + 0.45 * hi * (1 + math.cos(math.pi * (s - 101) / 30))
bad = [(s, lr[s], want(s)) for s in sorted(lr) if abs(lr[s] / want(s) - 1) > 1e-8]
if bad or max(lr) <= 101 or min(lr) > 100:  # both parts logged
    sys.exit("%s of %s" % (bad, sorted(lr)))' cs.st.metrics.jsonl 2>cs.bad ||
  fail "the metrics log's rates are not the warmup and cosine to lr/10: $(cat cs.bad)"
"$charlm" train --resume cs.st --steps 200 --threads 1 --out cs2.st >/dev/null 2>cs.log ||
  fail "resume with --steps 200 failed: $(tail -1 cs.log)"
[ "$(grep -c 'warning: --steps 200 reshapes the cosine schedule of .cs.st. (warmup 100, then down to 1.000e-04 at step 130): the learning rate of step 111 is' cs.log)" -eq 1 ] ||
  fail "resume with another --steps past the warmup: no warning: $(grep -v 'step [0-9]*/' cs.log | head -3)"
for args in "--resume cs110.st --steps 130 --out cs3.st" "--resume half20.st --steps 200 --out cs4.st"; do
  "$charlm" train $args --threads 1 >/dev/null 2>cs.log || fail "$args failed: $(tail -1 cs.log)"
  ! grep -q 'reshapes' cs.log || fail "$args: a warning for an unchanged schedule: $(grep reshapes cs.log)"
done
echo "resume: another --steps past the warmup is a warning (the schedule changes); otherwise none"

# 1b. the corpus is read once: a pipe and a FIFO work as --data
cat tiny.txt | "$charlm" train "${model[@]}" --data /dev/stdin --steps 3 --out pipe.st \
  >/dev/null 2>pipe.log || fail "--data /dev/stdin failed: $(tail -1 pipe.log)"
mkfifo corpus.fifo
cat tiny.txt >corpus.fifo &
timeout 60 "$charlm" train "${model[@]}" --data corpus.fifo --steps 3 --out fifo.st \
  >/dev/null 2>fifo.log || fail "--data FIFO failed: $(tail -1 fifo.log)"
wait
echo "--data: a pipe and a FIFO are read once and train"
# the FIFO's name is recorded: read again without --data it would wait
# for a writer for ever
want="corpus.fifo', is not a regular file"
for cmd in "eval --ckpt fifo.st" "train --resume fifo.st --steps 5 --out fifo2.st"; do
  rc=0
  timeout 60 "$charlm" $cmd >/dev/null 2>fifo.log || rc=$?
  [ "$rc" -eq 1 ] && grep -q "$want" fifo.log && [ "$(wc -l <fifo.log)" -eq 1 ] ||
    fail "$cmd with a FIFO recorded: exit $rc: $(cat fifo.log)"
done
[ ! -e fifo2.st ] || fail "the refused resume wrote fifo2.st"
"$charlm" eval --ckpt fifo.st --data tiny.txt >/dev/null 2>fifo.log ||
  fail "eval of the FIFO's run with --data failed: $(tail -1 fifo.log)"
echo "a FIFO recorded as the data: eval and --resume refuse it in one line, --data works"
# ... also from another directory (the relative name 'corpus.fifo' was
# recorded: "cannot open 'corpus.fifo'"), and standard input recorded as
# '-' (eval and --resume read the terminal, or a pipe, without a word)
cat tiny.txt | "$charlm" train "${model[@]}" --data - --steps 3 --out dash.st \
  >/dev/null 2>dash.log || fail "--data - failed: $(tail -1 dash.log)"
mkdir -p elsewhere
mkfifo hold.fifo
exec 4<>hold.fifo # stdin that never ends: a program reading it waits
for c in "fifo.st|corpus.fifo', is not a regular file|." "dash.st|standard input|." \
  "../fifo.st|corpus.fifo', is not a regular file|elsewhere"; do
  IFS='|' read -r ck want where <<<"$c"
  for cmd in "eval --ckpt $ck" "train --resume $ck --steps 5 --out fifo2.st"; do
    rc=0
    (cd "$where" && timeout 20 "$charlm" $cmd) <&4 >/dev/null 2>fifo.log || rc=$?
    [ "$rc" -eq 1 ] && grep -q "$want" fifo.log && [ "$(wc -l <fifo.log)" -eq 1 ] ||
      fail "$cmd (in $where) with a stream recorded: exit $rc: $(cat fifo.log)"
  done
done
exec 4>&-
[ ! -e fifo2.st ] && [ ! -e elsewhere/fifo2.st ] || fail "a refused resume wrote fifo2.st"
echo "standard input or a FIFO recorded as the data: refused in one line, from any directory"

# 2. SIGINT
"$charlm" train "${model[@]}" --steps 50000 --out int.st >int.json 2>int.log &
pid=$!
for ((w = 0; w < 600; w++)); do # wait for the first progress line (up to 30 s)
  grep -q '/50000' int.log 2>/dev/null && break
  sleep 0.05
done
sleep "0.$((RANDOM % 10))"
# a second writer of the same checkpoint is refused while the first runs
# (flock on int.st.cgrad-lock), even with --force, and changes nothing
rc=0
"$charlm" train "${model[@]}" --steps 5 --out int.st --force >/dev/null 2>lock.log || rc=$?
[ "$rc" -eq 1 ] && grep -q 'being written by another run (pid' lock.log ||
  fail "lock: a second writer was not refused (exit $rc): $(cat lock.log)"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "SIGINT: exit status $rc ($(tail -1 int.log))"
grep -q '"interrupted": true' int.json || fail "SIGINT: no interrupted summary: $(cat int.json)"
k=$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' int.json)
[ -n "$k" ] && [ "$k" -gt 0 ] || fail "SIGINT: no step in $(cat int.json)"
"$charlm" train "${model[@]}" --steps 50000 --stop-at "$k" --out ref.st >/dev/null 2>ref.log ||
  fail "reference run failed: $(tail -1 ref.log)"
"$tool" same int.st ref.st || fail "SIGINT checkpoint at step $k != uninterrupted run to $k"
"$charlm" train --resume int.st --stop-at $((k + 10)) --threads 1 >/dev/null 2>r2.log ||
  fail "resume after SIGINT failed: $(tail -1 r2.log)"
"$charlm" train "${model[@]}" --steps 50000 --stop-at $((k + 10)) --out ref2.st >/dev/null 2>&1 ||
  fail "reference run 2 failed"
"$tool" same int.st ref2.st || fail "SIGINT at $k + resume 10 steps != uninterrupted run"
echo "SIGINT: stopped at step $k, exit 0, checkpoint == uninterrupted; +10 resumed steps identical"

# 2c. a signal before the first step, here SIGXCPU (the soft CPU-time
# limit, `ulimit -S -t 1`), which comes during the step-0 evaluation of a
# larger model: nothing was trained, so nothing is saved, and --force
# leaves the earlier run's checkpoint as it was (the initial model
# replaced it)
printf 'call me ishmael some years ago never mind how long precisely %.0s\n' $(seq 19000) >long.txt
cp full.st early.st
rc=0
(ulimit -S -t 1 && exec "$charlm" train --data long.txt --d 256 --H 4 --layers 4 --d-ff 1024 \
  --T 256 --batch-size 16 --steps 50 --threads 1 --out early.st --force) >early.json \
  2>early.log || rc=$?
[ "$rc" -eq 0 ] || fail "a signal before the first step: exit $rc ($(tail -1 early.log))"
grep -q "the evaluation at step 0 was cut short by a signal" early.log &&
  grep -q "stopped before the first step; nothing saved" early.log ||
  fail "a signal before the first step: $(tail -2 early.log)"
grep -q '"interrupted": true' early.json && ! grep -q '"checkpoint"' early.json ||
  fail "a signal before the first step: $(cat early.json)"
cmp -s early.st full.st || fail "a signal before the first step replaced the checkpoint"
echo "a signal before the first step: nothing saved, the earlier checkpoint kept"

# 2d. a signal during an evaluation cuts it short (the evaluation loops
# poll the flag between batches). With --eval-every 1 every step is
# followed by an evaluation (40 batches of B 64 x T 128, some 10 times the
# step), and a signal during a step is seen first by the evaluation after
# it; only a signal during the checkpoint and loss curve written after
# each evaluation (a fifth of the time) is seen between steps instead. So
# a SIGINT at 0 to 0.9 s after the first progress line (which comes out
# with the evaluation's line) cuts one short, in up to 8 tries. The run
# stops at that step, its evaluation left out, and saves; the checkpoint
# equals an uninterrupted run to the step, and the resumed run (which
# evaluates the step first, then saves and keeps it) continues it bit for
# bit, with the same evaluation checkpoints kept (--keep-last 5). A
# signal that lands in step 0's evaluation stops the run before its first
# step with nothing saved (2c's case): that try is taken again.
every1=(--data tiny.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 128 --batch-size 64 --threads 1
        --eval-every 1 --log-every 1 --seed 3 --keep-last 5)
# kept OUT: the steps of OUT's kept evaluation checkpoints
kept() {
  ls "$1".step*.safetensors 2>/dev/null | sed 's/.*\.step0*\([0-9]*\)\.safetensors$/\1/' |
    sort -n | xargs
}
k=
for ((try = 0; try < 8 && ${k:-0} == 0; try++)); do
  rm -f cut.st.step*
  "$charlm" train "${every1[@]}" --steps 50000 --out cut.st --force >cut.json 2>cut.log &
  pid=$!
  for ((w = 0; w < 600; w++)); do
    grep -q '/50000' cut.log 2>/dev/null && break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 10))"
  kill -INT "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] && grep -q '"interrupted": true' cut.json ||
    fail "a signal during an evaluation: exit $rc ($(tail -1 cut.log)): $(cat cut.json)"
  k=$(sed -n 's/.*the evaluation at step \([0-9]*\) was cut short by a signal$/\1/p' cut.log)
done
[ -n "$k" ] && [ "$k" -gt 0 ] && grep -q "stopped at step $k; checkpoint saved" cut.log ||
  fail "a signal during an evaluation: no evaluation cut short in 8 tries: $(tail -3 cut.log)"
"$charlm" train "${every1[@]}" --steps 50000 --stop-at "$k" --out cut_ref.st >/dev/null 2>&1 ||
  fail "reference run to $k failed"
"$tool" same cut.st cut_ref.st || fail "cut evaluation at $k: checkpoint != uninterrupted run to $k"
"$charlm" train --resume cut.st --stop-at $((k + 3)) --threads 1 >/dev/null 2>cut_r.log ||
  fail "resume after a cut evaluation failed: $(tail -1 cut_r.log)"
grep -q "step $k: train loss" cut_r.log || fail "the resumed run did not evaluate step $k first"
"$charlm" train "${every1[@]}" --steps 50000 --stop-at $((k + 3)) --out cut_ref2.st >/dev/null \
  2>&1 || fail "reference run to $((k + 3)) failed"
"$tool" same cut.st cut_ref2.st || fail "cut at $k + resume 3 steps != uninterrupted run"
[ "$(kept cut.st)" = "$(kept cut_ref2.st)" ] ||
  fail "cut at $k + resume: kept steps $(kept cut.st), uninterrupted $(kept cut_ref2.st)"
kk=$(printf '%08d' "$k")
"$tool" same "cut.st.step$kk.safetensors" "cut_ref2.st.step$kk.safetensors" ||
  fail "cut at $k + resume: the kept checkpoint of step $k != the uninterrupted run's"
echo "a signal during the evaluation at step $k (try $try): cut short, saved == uninterrupted," \
  "resumed identically"

# 2e. a signal while the data are read: the handlers are in place from the
# set-up on, so SIGTERM there stops the run before its first step (exit 0,
# nothing saved, --force leaves the earlier checkpoint). The data come
# from a FIFO this script holds open: the program has opened it (it is past
# its flags) and waits in the read when the signal comes.
mkfifo slow.fifo
exec 3<>slow.fifo
cp full.st setup.st
"$charlm" train "${model[@]:2}" --data slow.fifo --steps 3 --out setup.st --force >setup.json \
  2>setup.log 3>&- & # (not the script's end of the FIFO)
pid=$!
head -c 1000 tiny.txt >&3
for ((w = 0; w < 600; w++)); do # the program reading the FIFO (up to 30 s)
  ls -l "/proc/$pid/fd" 2>/dev/null | grep -q slow.fifo && break
  sleep 0.05
done
kill -TERM "$pid"
tail -c +1001 tiny.txt >&3
exec 3>&-
# (bounded: a run that does not end is named with where it waits; once,
# 2026-12-07, this test ran out of its 300 s somewhere after 2d under load)
for ((w = 0; w < 600; w++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$pid" 2>/dev/null; then
  where="$(cat "/proc/$pid/wchan" 2>/dev/null); $(ls -l "/proc/$pid/fd" 2>/dev/null | grep -c fifo) fifo fds"
  kill -KILL "$pid"
  fail "SIGTERM while the data are read: the run had not ended 30 s later (waiting in $where)"
fi
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] && grep -q "stopped before the first step; nothing saved" setup.log &&
  grep -q '"interrupted": true' setup.json ||
  fail "SIGTERM while the data are read: exit $rc: $(tail -2 setup.log)"
cmp -s setup.st full.st || fail "SIGTERM while the data are read replaced the checkpoint"
echo "a signal while the data are read: stopped before the first step, nothing saved"

# 3. NaN: set a parameter of the step-20 checkpoint to 3e38 (finite: a NaN
#    weight is refused at load, but the next loss is NaN) and resume from it
cp half20.st bad.st
"$tool" setval bad.st ln_f.weight 3e38
cp bad.st bad.orig
rc=0
"$charlm" train --resume bad.st --threads 1 >/dev/null 2>nan.log || rc=$?
[ "$rc" -ne 0 ] || fail "NaN: training did not stop"
msg=$(grep -i 'nan' nan.log | tail -1)
[ -n "$msg" ] || fail "NaN: no message naming it: $(tail -1 nan.log)"
echo "$msg" | grep -q 'step 21' || fail "NaN: the message does not name the step: $msg"
echo "$msg" | grep -q "'" || fail "NaN: the message does not name a tensor: $msg"
cmp -s bad.st bad.orig || fail "NaN: the last checkpoint was overwritten"
echo "NaN: exit $rc, '$msg'; checkpoint untouched"

# 4. --skip-nonfinite: the same poisoned run skips every step with a warning
#    instead of stopping, and leaves the parameters as they were
cp bad.orig skip.st
"$charlm" train --resume skip.st --threads 1 --skip-nonfinite --stop-at 25 >/dev/null 2>skip.log ||
  fail "skip: training failed: $(tail -1 skip.log)"
n=$(grep -c 'warning: skipping step' skip.log || true)
[ "$n" -eq 5 ] || fail "skip: expected 5 skipped steps (21..25), saw $n: $(tail -2 skip.log)"
grep -q '5 step(s) skipped' skip.log || fail "skip: no summary of skipped steps"
echo "skip: 5 non-finite steps skipped with a warning each, exit 0"
# --patience counts evaluations without a finite validation loss too: a
# model that evaluates to NaN from its first evaluation stops after 2
"$charlm" train --init-from bad.orig --data tiny.txt --threads 1 --skip-nonfinite --patience 2 \
  --eval-every 2 --steps 20 --out pnan.st >pnan.json 2>pnan.log ||
  fail "--patience with NaN evaluations: $(tail -1 pnan.log)"
grep -q "stopping early at step 2: 2 evaluation(s) without a finite validation loss (--patience 2)" pnan.log &&
  grep -q '"early_stopped": true' pnan.json ||
  fail "--patience with NaN evaluations: $(grep -i 'early\|error' pnan.log) $(tail -1 pnan.json)"
echo "--patience 2 with NaN evaluations: stopped early at step 2"

# the value of a field of the last JSON line of a file
field() { tail -1 "$2" | sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p"; }
# 5. --precision bf16: resume is bit-identical too (40 == 20 + 20 resumed);
#    the checkpoint keeps the precision (resume and eval use it, the JSON
#    lines say so); bf16 != fp32; a bad value is a bad command line (exit 2)
"$charlm" train "${model[@]}" --precision bf16 --steps 40 --out bf_full.st >bf_full.json 2>bf_full.log ||
  fail "bf16 training failed: $(tail -1 bf_full.log)"
grep -q 'precision bf16' bf_full.log || fail "no precision on the start-up line: $(head -3 bf_full.log)"
[ "$(field precision bf_full.json)" = bf16 ] || fail "JSON line without \"precision\": \"bf16\": $(cat bf_full.json)"
"$charlm" train "${model[@]}" --precision bf16 --steps 40 --stop-at 20 --out bf_half.st >/dev/null 2>bf_half.log ||
  fail "bf16 training to step 20 failed: $(tail -1 bf_half.log)"
cp bf_half.st bf_half20.st
"$charlm" train --resume bf_half.st --threads 1 >bf_resume.json 2>bf_resume.log ||
  fail "bf16 resume failed: $(tail -1 bf_resume.log)"
[ "$(field precision bf_resume.json)" = bf16 ] || fail "the resumed run is not bf16: $(cat bf_resume.json)"
"$tool" same bf_full.st bf_half.st || fail "bf16: 40 steps != 20 steps + resume to 40"
echo "bf16 resume: 40 steps == 20 + 20 resumed (bit-identical parameters and optimizer state)"

"$charlm" train "${model[@]}" --precision fp32 --steps 40 --out bf_fp32.st >bf_fp32.json 2>bf_fp32.log ||
  fail "fp32 training failed: $(tail -1 bf_fp32.log)"
[ "$(field precision bf_fp32.json)" = fp32 ] || fail "fp32 run: $(cat bf_fp32.json)"
if "$tool" same bf_full.st bf_fp32.st 2>/dev/null; then fail "a bf16 run equals the fp32 run"; fi
"$charlm" eval --ckpt bf_full.st --threads 1 >bf_eval.json 2>bf_eval.log || fail "eval failed: $(tail -1 bf_eval.log)"
[ "$(field precision bf_eval.json)" = bf16 ] || fail "eval of a bf16 checkpoint is not bf16: $(cat bf_eval.json)"
"$charlm" eval --ckpt bf_fp32.st --threads 1 >bf_eval32.json 2>bf_eval.log || fail "eval failed: $(tail -1 bf_eval.log)"
[ "$(field precision bf_eval32.json)" = fp32 ] || fail "eval of an fp32 checkpoint: $(cat bf_eval32.json)"
[ "$(field val_loss bf_eval.json)" = "$(field val_loss bf_full.json)" ] ||
  fail "eval of the bf16 checkpoint: val_loss $(field val_loss bf_eval.json), training's $(field val_loss bf_full.json)"
echo "bf16 differs from fp32; eval of the bf16 checkpoint gives its training loss $(field val_loss bf_eval.json)"

# --precision on resume: fp32 switches the bf16 run (the start-up line says
# so, the checkpoint then records fp32), exactly as a checkpoint recording
# fp32 with the same state resumes; bf16, the checkpoint's own, changes nothing
"$charlm" train --resume bf_half20.st --precision fp32 --threads 1 --out sw.st >sw.json 2>sw.log ||
  fail "--precision fp32 on resume of a bf16 checkpoint: $(tail -1 sw.log)"
grep -q "precision fp32 (switched from the checkpoint's bf16)" sw.log ||
  fail "the switched run's start-up line: $(grep -m1 precision sw.log)"
[ "$(field precision sw.json)" = fp32 ] || fail "the switched run is not fp32: $(cat sw.json)"
[ "$(field precision_switched_from sw.json)" = bf16 ] ||
  fail "the switched run's JSON line does not say it switched from bf16: $(tail -1 sw.json)"
"$tool" getmeta sw.st train | grep -q '"precision":"fp32"' ||
  fail "the switched run's checkpoint does not record fp32: $("$tool" getmeta sw.st train | head -c 300)"
cp bf_half20.st as32.st
"$tool" setmeta as32.st train "$("$tool" getmeta bf_half20.st train | sed 's/"precision":"bf16"/"precision":"fp32"/')" >/dev/null
"$charlm" train --resume as32.st --threads 1 >as32.json 2>as32.log || fail "resume of as32.st: $(tail -1 as32.log)"
grep -q "precision fp32$" as32.log || fail "as32.st resumed: $(grep -m1 precision as32.log)"
"$tool" same sw.st as32.st || fail "bf16 switched to fp32 on resume != the same state resumed as fp32"
cp bf_half20.st same16.st
"$charlm" train --resume same16.st --precision bf16 --threads 1 >same16.json 2>same16.log ||
  fail "--precision bf16 on resume of a bf16 checkpoint: $(tail -1 same16.log)"
grep -q "switched" same16.log same16.json && fail "--precision bf16 on a bf16 resume says it switched: $(grep -m1 precision same16.log)"
"$tool" same bf_full.st same16.st || fail "bf16: 40 steps != 20 + resume --precision bf16 to 40"
echo "--precision on resume: bf16 -> fp32 switches as a checkpoint recording fp32 resumes; bf16 -> bf16 bit-identical"
# a damaged recorded precision (a number, a name that is no precision) is
# named, whether --precision is given to --resume or not (the run would
# switch from it) and by eval (whose --precision decodes it anyway)
for v in 3 '"fp16"'; do
  cp bf_half20.st dmg.st
  "$tool" setmeta dmg.st train "$("$tool" getmeta bf_half20.st train | sed "s/\"precision\":\"bf16\"/\"precision\":$v/")" >/dev/null
  cp dmg.st dmg.orig
  for p in "" "--precision fp32"; do
    rc=0
    "$charlm" train --resume dmg.st $p --threads 1 >/dev/null 2>dmg.log || rc=$?
    [ "$rc" -eq 1 ] && [ "$(wc -l <dmg.log)" -eq 1 ] &&
      grep -q "'dmg.st': training state: \"options\": \"precision\" is $v, not \"fp32\" or \"bf16\"" dmg.log ||
      fail "a recorded precision $v resumed ${p:-without --precision}: exit $rc: $(cat dmg.log)"
  done
  cmp -s dmg.st dmg.orig || fail "a refused resume changed the checkpoint"
  rc=0
  "$charlm" eval --ckpt dmg.st >/dev/null 2>dmg.log || rc=$?
  [ "$rc" -eq 1 ] && grep -q "\"precision\" is $v, not \"fp32\" or \"bf16\"" dmg.log ||
    fail "eval of a checkpoint recording precision $v: exit $rc: $(cat dmg.log)"
  "$charlm" eval --ckpt dmg.st --precision fp32 >/dev/null 2>dmg.log ||
    fail "eval --precision fp32 of a checkpoint recording precision $v: $(tail -1 dmg.log)"
done
echo "a damaged recorded precision: named on resume (with --precision or not) and by eval"
rc=0
"$charlm" train "${model[@]}" --precision fp16 --steps 2 --out y.st >/dev/null 2>bad.log || rc=$?
[ "$rc" -eq 2 ] && grep -q -- '--precision' bad.log || fail "--precision fp16: exit $rc: $(cat bad.log)"
echo "--precision fp16 refused: $(tail -1 bad.log)"

# 6. sample --attention draws the last (up to 32) tokens as the model sees
# them, in their context (a window of T = 48 here): the first of them
# attends to the tokens before it too. A fresh forward over the 32 alone
# gave that query weight 1 on itself in every head (#FDE725, the top of
# the scale; an untrained model's weights are near uniform).
"$charlm" train "${model[@]}" --T 48 --steps 1 --out at.st >/dev/null 2>at.log ||
  fail "training (T 48) failed: $(tail -1 at.log)"
"$charlm" sample --ckpt at.st --prompt "call me ishmael some years ago never mind how" --length 0 \
  --attention at.svg >/dev/null 2>at.log || fail "sample --attention: $(tail -1 at.log)"
n=$(grep -c 'fill="#FDE725"' at.svg || true)
[ "$n" -eq 0 ] || fail "sample --attention: $n cells of weight 1 (a fresh forward over the last 32 tokens)"
echo "sample --attention: the last 32 tokens in their context"

# 7. a run past 2^24 steps (a checkpoint's step set to 16777216, resumed
# with --eval-every 1): every step is evaluated and recorded as itself.
# The loss history kept its steps as float32, so the trainer took step
# 16777217 (a float's 16777216) for evaluated and skipped its evaluation,
# and recorded step 16777219 as 16777220 (the JSON line's best_step too).
"$charlm" train "${model[@]}" --steps 4 --out far.st >/dev/null 2>far.log ||
  fail "training failed: $(tail -1 far.log)"
"$tool" setmeta far.st step 16777216
"$charlm" train --resume far.st --threads 1 --steps 16777219 --eval-every 1 --keep-best \
  >far.json 2>far.log || fail "resume at step 16777216 failed: $(tail -1 far.log)"
evals=$(sed -n 's/^{"step": \([0-9]*\), "train_loss".*/\1/p' far.st.metrics.jsonl | tr '\n' ' ')
[ "$evals" = "0 4 16777216 16777217 16777218 16777219 " ] ||
  fail "past 2^24 steps: evaluations at steps '$evals', not 0, 4 and 16777216 to 16777219"
hist=$("$tool" getmeta far.st train | sed -n 's/.*"history":{"step":\[\([0-9,]*\)\].*/\1/p')
[ "$hist" = "0,4,16777216,16777217,16777218,16777219" ] ||
  fail "past 2^24 steps: the checkpoint's history records steps '$hist'"
best=$(sed -n 's/.*"best_step": \([0-9]*\).*/\1/p' far.json)
want=$(python3 -c 'import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l]
print(min(e, key=lambda x: x["val_loss"])["step"])' far.st.metrics.jsonl)
[ -n "$best" ] && [ "$best" = "$want" ] || fail "past 2^24 steps: best_step '$best', the log's $want"
bs=$("$tool" getmeta far.st.best.safetensors step)
[ "$bs" = "$best" ] || fail "past 2^24 steps: the best checkpoint holds step $bs, not $best"
echo "past 2^24 steps: every step evaluated and recorded as itself (best_step $best)"

# 8. the recipe (train_charlm.py's): AdamW (0.9, 0.99), eps 1e-8, in the
# checkpoint's optimizer metadata; weight decay 0.1 on the 2-D parameters
# only. Step 1 from one init at --lr 1 and --lr 2 (warmup: rates 0.01 and
# 0.02) gives p0 = 2 p1 - p2, and AdamW's first update is
# lr (wd p0 + u), |u| = |g| / (|g| + eps) <= 1: so |(p0 - p1) / 0.01 -
# wd p0| <= 1 in every element, which without the decay (or with it on a
# vector) fails wherever sign(u) = -sign(p0). The batch stream is not the
# init stream (its seed is not --seed).
for lr in 1 2; do
  "$charlm" train "${model[@]}" --steps 1 --lr $lr --precision fp32 --out wd$lr.st >/dev/null 2>wd.log ||
    fail "the one-step run at --lr $lr: $(tail -1 wd.log)"
done
python3 - wd1.st wd2.st <<'EOF' || fail "the recipe: see above"
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop('__metadata__')
    t = {k: (v['shape'], struct.unpack('<%df' % ((v['data_offsets'][1] - v['data_offsets'][0]) // 4),
                                      b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]))
         for k, v in h.items() if v['dtype'] == 'F32' and not k.startswith('optim.')}
    return t, meta
(t1, m), (t2, _) = load(sys.argv[1]), load(sys.argv[2])
want = {'optim.type': 'adamw', 'optim.beta1': 0.9, 'optim.beta2': 0.99, 'optim.eps': 1e-8}
for k, v in want.items():
    got = m[k] if isinstance(v, str) else float(m[k])
    if got != v:
        sys.exit('the recipe: %s is %s, not %s' % (k, m[k], v))
worst = {}
for k, (shape, p1) in t1.items():
    wd = 0.1 if len(shape) == 2 else 0.0
    p0 = [2 * a - b for a, b in zip(p1, t2[k][1])]
    worst[k] = max(abs((a - b) / 0.01 - wd * a) for a, b in zip(p0, p1))
bad = {k: w for k, w in worst.items() if w > 1 + 1e-4}
if bad or not any(len(t1[k][0]) == 2 for k in worst):
    sys.exit('the recipe: |(p0 - p1) / lr - wd p0| > 1 in %s' % bad)
state = json.loads(m['train'])
if state['model']['batch_rng_seed'] == state['seed']:
    sys.exit('the recipe: the batch stream is seeded with --seed %s, the init stream' % state['seed'])
EOF
echo "the recipe: AdamW (0.9, 0.99, 1e-8), weight decay 0.1 on the matrices only, the batch stream its own"

# 9. eval --split all (any text, whole) and --stride S (sliding windows,
#    each target scored once, after at least T - S of context): the default
#    stride is T (the windows and loss of before), smaller strides score
#    T + (windows - 1) S targets, another text is refused for the
#    validation split but taken whole; bad values exit 2
"$charlm" eval --ckpt bf_fp32.st --threads 1 >ev_def.json 2>ev.log || fail "eval: $(tail -1 ev.log)"
"$charlm" eval --ckpt bf_fp32.st --threads 1 --stride 16 >ev_16.json 2>ev.log || fail "eval --stride 16: $(tail -1 ev.log)"
"$charlm" eval --ckpt bf_fp32.st --threads 1 --stride 5 >ev_5.json 2>ev.log || fail "eval --stride 5: $(tail -1 ev.log)"
"$charlm" eval --ckpt bf_fp32.st --threads 1 --split all >ev_all.json 2>ev.log || fail "eval --split all: $(tail -1 ev.log)"
head -c 400 tiny.txt | tr 'a-m' 'n-z' >other.txt
"$charlm" eval --ckpt bf_fp32.st --threads 1 --split all --data other.txt --stride 4 >ev_o.json 2>ev.log ||
  fail "eval --split all of another text: $(tail -1 ev.log)"
python3 - ev_def.json ev_16.json ev_5.json ev_all.json ev_o.json tiny.txt <<'PY' || fail "eval --split/--stride: see above"
import json, math, sys
d, s16, s5, a, o = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:6])
n = len(open(sys.argv[6], encoding='utf-8').read())
val = n - int(0.9 * n)
assert d == s16 and d['stride'] == 16 and d['split'] == 'valid' and d['loss'] == d['val_loss'], (d, s16)
assert d['windows'] == (val - 1) // 16 and d['scored'] == 16 * d['windows'], d
assert s5['windows'] == (val - 1 - 16) // 5 + 1 and s5['scored'] == 16 + (s5['windows'] - 1) * 5, s5
assert abs(math.exp(s5['loss']) - s5['perplexity']) < 1e-3 * s5['perplexity'], s5
assert a['split'] == 'all' and 'val_loss' not in a and a['windows'] == (n - 1) // 16, a
assert o['windows'] == (400 - 1 - 16) // 4 + 1 and o['scored'] == 16 + (o['windows'] - 1) * 4, o
PY
echo "eval: --stride 16 is the default; --stride 5 scores $(field scored ev_5.json) targets in $(field windows ev_5.json) windows; --split all takes another text"
rc=0
"$charlm" eval --ckpt bf_fp32.st --data other.txt >/dev/null 2>ev.log || rc=$?
[ "$rc" = 1 ] && grep -q "is not the data this checkpoint was trained on" ev.log ||
  fail "the validation split of another text: exit $rc, $(tail -1 ev.log)"
for bad in "--stride 17" "--stride 0" "--split train"; do
  rc=0
  # shellcheck disable=SC2086
  "$charlm" eval --ckpt bf_fp32.st $bad >ev.out 2>ev.log || rc=$?
  [ "$rc" = 2 ] && [ ! -s ev.out ] && [ "$(wc -l <ev.log)" = 1 ] || fail "eval $bad: exit $rc, $(cat ev.log)"
done
printf 'short\n' >short.txt
rc=0
"$charlm" eval --ckpt bf_fp32.st --split all --data short.txt >ev.out 2>ev.log || rc=$?
[ "$rc" = 1 ] && grep -q "shorter than one window of 16+1" ev.log || fail "eval of a short text: exit $rc, $(tail -1 ev.log)"
echo "eval: --stride 17 and 0, --split train exit 2; a text shorter than a window exits 1"

# 10. --lr-schedule cosine|linear|constant|wsd and --cooldown: each step's
#     rate in the metrics log is the formula's (worked out here); wsd
#     stopped in its cooldown and resumed is the uninterrupted run; the
#     schedule is the checkpoint's (a file from before it: the cosine);
#     bad combinations exit 2
S=(--data tiny.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1
   --eval-every 10 --steps 20 --warmup 3 --lr 1e-3 --log-every 1 --seed 3)
for sch in cosine linear constant wsd; do
  extra=(--min-lr 1e-5)
  [ $sch = constant ] && extra=()
  [ $sch = wsd ] && extra+=(--cooldown 6)
  "$charlm" train "${S[@]}" --lr-schedule $sch "${extra[@]}" --out sch_$sch.st >/dev/null 2>sch.log ||
    fail "--lr-schedule $sch: $(tail -1 sch.log)"
done
python3 - <<'PY' || fail "--lr-schedule: see above"
import json, math
def rates(f):
    return [j['lr'] for j in map(json.loads, open(f)) if 'lr' in j and 'val_loss' not in j]
hi, lo, W, N, C = 1e-3, 1e-5, 3, 20, 6
want = {
    'cosine': [hi * (s + 1) / W if s < W else
               lo + 0.5 * (1 + math.cos(math.pi * min(1, (s - W) / max(1, N - W)))) * (hi - lo)
               for s in range(N)],
    'linear': [hi * s / W if s < W else lo + (hi - lo) * max(0, (N - s) / max(1, N - W))
               for s in range(N)],
    'constant': [hi * (s + 1) / W if s < W else hi for s in range(N)],
    'wsd': [hi * (s + 1) / W if s < W else hi if s < N - C else hi + (lo - hi) * (s - (N - C)) / C
            for s in range(N)],
}
for k, w in want.items():
    got = rates('sch_%s.st.metrics.jsonl' % k)
    assert len(got) == N, (k, got)
    bad = [(s, g, e) for s, (g, e) in enumerate(zip(got, w)) if abs(g - e) > 1e-6 * hi]
    assert not bad, (k, bad)
print('ok')
PY
echo "--lr-schedule: cosine, linear, constant and wsd give the formulas' rates, step by step"
"$charlm" train "${S[@]}" --lr-schedule wsd --min-lr 1e-5 --cooldown 6 --stop-at 17 --out sch_h.st >/dev/null 2>sch.log ||
  fail "wsd --stop-at 17: $(tail -1 sch.log)"
cp sch_h.st sch_h17.st
"$charlm" train --resume sch_h.st --threads 1 >/dev/null 2>sch.log || fail "wsd resumed: $(tail -1 sch.log)"
"$tool" same sch_wsd.st sch_h.st || fail "wsd stopped in its cooldown and resumed differs from the run"
echo "--lr-schedule wsd: stopped at 17 (in the cooldown) and resumed == the uninterrupted run"
# a checkpoint from before --lr-schedule (no lr_schedule, no cooldown): the cosine
python3 - sch_h17.st sch_old.st <<'PY' || fail "writing sch_old.st"
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
t = json.loads(h['__metadata__']['train'])
for k in ('lr_schedule', 'cooldown'):
    t['model'].pop(k, None)
h['__metadata__']['train'] = json.dumps(t)
hb = json.dumps(h, separators=(',', ':')).encode()
hb += b' ' * (-len(hb) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])
PY
"$charlm" train --resume sch_old.st --threads 1 >/dev/null 2>sch.log || fail "old resumed: $(tail -1 sch.log)"
python3 - sch_old.st.metrics.jsonl <<'PY' || fail "a checkpoint without lr_schedule: not the cosine"
import json, math, sys
got = [j for j in map(json.loads, open(sys.argv[1])) if 'lr' in j and 'val_loss' not in j]
hi, lo, W, N = 1e-3, 1e-5, 3, 20
for j in got:
    s = j['step'] - 1
    e = lo + 0.5 * (1 + math.cos(math.pi * min(1, (s - W) / (N - W)))) * (hi - lo)
    assert abs(j['lr'] - e) < 1e-6 * hi, (j, e)
assert [j['step'] for j in got] == [18, 19, 20], got
PY
echo "--lr-schedule: a checkpoint from before it resumes with the cosine"
for bad in "--lr-schedule foo" "--lr-schedule step" "--cooldown 5" "--lr-schedule wsd --cooldown 21" \
  "--lr-schedule constant --min-lr 1e-5"; do
  rc=0
  # shellcheck disable=SC2086
  "$charlm" train "${S[@]}" $bad --out sch_bad.st >/dev/null 2>sch.log || rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <sch.log)" = 1 ] && [ ! -e sch_bad.st ] || fail "$bad: exit $rc, $(cat sch.log)"
done
rc=0
"$charlm" train --resume sch_h17.st --lr-schedule cosine >/dev/null 2>sch.log || rc=$?
[ "$rc" = 2 ] && grep -q 'drop --lr-schedule' sch.log || fail "--resume --lr-schedule: exit $rc, $(cat sch.log)"
echo "--lr-schedule: unknown names, step, --cooldown without wsd or past --steps, constant with --min-lr, and with --resume exit 2"
