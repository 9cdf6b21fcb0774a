#!/usr/bin/env bash
# Data-parallel training combined with the options reviewed on one process
# (round fourteen; meson suite 'dist'), under mpirun on this machine:
#   1. seq2seq --max-tokens batches with --grad-accum 3 on 2 and 3 ranks
#      equal one process (parameters and their --ema-decay averages within
#      1e-5, the loss line alike);
#      --zero 1 equals the all-reduce run bit for bit; on 2 ranks the
#      blocking reduction in small buckets equals the one during backward;
#      LoRA adapters on the translator, 2 ranks (--zero 1 too) == 1 process
#   2. --keep-best --keep-last --ema-decay with --grad-accum and dropout on 2 ranks:
#      stopped at --stop-at and resumed equals the uninterrupted run bit for
#      bit, with the same files kept
#   3. --skip-nonfinite under --zero 1: every rank skips the poisoned steps
#      and the parameters stay as they were
#   4. the commands that are not data-parallel (average, sample, eval,
#      translate, attention, score) are refused under mpirun on every rank (exit 2)
#      before any file is written (each rank wrote the same --out: a race that
#      failed, left temporaries or crashed mpirun); their --help still works
#   5. a checkpoint whose batch is smaller than the ranks, resumed: the
#      advice names the ranks, not a --batch-size --resume refuses
#   6. --keep-last, a save cut short after the checkpoint and before the old
#      evaluation checkpoint was removed (rank 0's disk full on the kept
#      copy; or rank 0 killed there by mpirun when another rank dies): exit
#      1, and the resume neither refuses the old one as another run's nor
#      leaves it: the files kept are the uninterrupted run's
#   7. a save that takes rank 0 longer than CG_DIST_TIMEOUT (a slow disk:
#      strace delays each fsync of rank 0; skipped without strace): the
#      other ranks wait for it, not abort the job as if rank 0 had died
#   test_dist_combos.sh CHARLM SEQ2SEQ CKPT_WRITER MPIRUN   (skipped without MPIRUN)
set -uo pipefail
charlm=$(realpath "$1")
seq2seq=$(realpath "$2")
tool=$(realpath "$3")
mpirun=${4:-}
if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null; then
  echo "skip: no mpirun"
  exit 77
fi
. "$(dirname "$0")/shell_lib.sh" dist_combos
unset MALLOC_PERTURB_ # Open MPI 4's mpirun crashes on it when ranks abort (test_dist_setup.sh)
MPI=("$mpirun" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x CG_DIST_TIMEOUT=60)
mpi() { # mpi NP PROGRAM ARGS...
  local np=$1
  shift
  timeout 300 "${MPI[@]}" -np "$np" "$@"
}
run() { # run NAME CMD...: a run that must succeed (stdout NAME.json, stderr NAME.log)
  local name=$1
  shift
  "$@" >"$name.json" 2>"$name.log" || fail "$name: $(grep -m1 error "$name.log" || tail -2 "$name.log")"
}
zoo_data

# 1. token-budget batches split over the ranks, accumulated
S2S=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --valid-size 20
     --test-size 20 --test-limit 1 --threads 1 --eval-every 5 --precision fp32 --seed 3
     --dropout 0 --max-tokens 300 --steps 10 --grad-accum 3 --ema-decay 0.5 --data p.tsv)
run s1 "$seq2seq" train "${S2S[@]}" --out s1.st
run s2 mpi 2 "$seq2seq" train "${S2S[@]}" --out s2.st
run s3 mpi 3 "$seq2seq" train "${S2S[@]}" --out s3.st
run s3z mpi 3 "$seq2seq" train "${S2S[@]}" --zero 1 --out s3z.st
for n in 2 3; do
  r=$("$tool" close s1.st s$n.st 1e-5 2>&1) && echo "ok: seq2seq --max-tokens --grad-accum 3, $n ranks == 1 process: $r" ||
    fail "seq2seq --max-tokens --grad-accum 3, $n ranks: $r"
  [ "$(grep 'step 10/10' s1.log | cut -d' ' -f3-5)" = "$(grep 'step 10/10' s$n.log | cut -d' ' -f3-5)" ] ||
    fail "$n ranks report another loss: $(grep 'step 10/10' s$n.log), one process: $(grep 'step 10/10' s1.log)"
done
"$tool" same s3.st s3z.st && echo "ok: 3 ranks: --zero 1 == all-reduce, bit for bit" ||
  fail "3 ranks: --zero 1 differs from the all-reduce run"
# the blocking reduction after backward (CG_DIST_OVERLAP=0) in buckets of
# 1024 floats (CG_DIST_BUCKET_MB=0.001: tensors cut between buckets): with
# 2 ranks the same floats as the reduction during backward
run s2b timeout 300 "${MPI[@]}" -x CG_DIST_OVERLAP=0 -x CG_DIST_BUCKET_MB=0.001 -np 2 "$seq2seq" train \
  "${S2S[@]}" --out s2b.st
"$tool" same s2.st s2b.st && echo "ok: 2 ranks: the blocking reduction in small buckets == during backward" ||
  fail "2 ranks: the blocking reduction in small buckets differs from the one during backward"
# LoRA adapters on the translator (only they reduced and stepped): 2 ranks,
# with and without --zero 1, equal one process
L=("${S2S[@]}" --init-from s1.st --lora-rank 2 --lr 1e-2)
run l1 "$seq2seq" train "${L[@]}" --out l1.st
run l2 mpi 2 "$seq2seq" train "${L[@]}" --out l2.st
run l2z mpi 2 "$seq2seq" train "${L[@]}" --zero 1 --out l2z.st
for f in l2 l2z; do
  r=$("$tool" close l1.st $f.st 1e-5 2>&1) && echo "ok: seq2seq LoRA, 2 ranks ($f) == 1 process: $r" ||
    fail "seq2seq LoRA, 2 ranks ($f): $r"
done

# 2. stop and resume with --keep-best, --keep-last, dropout and accumulation
K=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --valid-size 20
   --test-size 20 --test-limit 1 --threads 1 --eval-every 3 --precision fp32 --seed 3
   --dropout 0.1 --max-tokens 250 --steps 10 --grad-accum 2 --keep-best --keep-last 2 --data p.tsv
   --ema-decay 0.8)
run ku mpi 2 "$seq2seq" train "${K[@]}" --out u.st
run kh mpi 2 "$seq2seq" train "${K[@]}" --stop-at 5 --out h.st
run kr mpi 2 "$seq2seq" train --resume h.st
"$tool" same u.st h.st && echo "ok: 2 ranks, stopped at 5 and resumed == uninterrupted, bit for bit" ||
  fail "2 ranks: the resumed run differs from the uninterrupted one"
[ "$(ls u.st.* | sed 's/^u/X/' | grep -v lock)" = "$(ls h.st.* | sed 's/^h/X/' | grep -v lock)" ] &&
  "$tool" same u.st.best.safetensors h.st.best.safetensors &&
  echo "ok: the same kept and best checkpoints" ||
  fail "kept files: $(ls u.st.* | tr '\n' ' ') against $(ls h.st.* | tr '\n' ' ')"

# 3. --skip-nonfinite under ZeRO-1: a weight of 3e38 makes every loss NaN
TINY=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4
      --precision fp32 --data c.txt)
run p "$charlm" train "${TINY[@]}" --steps 12 --stop-at 4 --out p.st
"$tool" setval p.st ln_f.weight 3e38
cp p.st p0.st
run pz mpi 2 "$charlm" train --resume p.st --zero 1 --skip-nonfinite --stop-at 6
[ "$(grep -c 'warning: skipping step' pz.log)" = 2 ] && "$tool" close p0.st p.st 0 >/dev/null &&
  echo "ok: --skip-nonfinite --zero 1 on 2 ranks: both steps skipped, parameters unchanged" ||
  fail "--skip-nonfinite --zero 1: $(grep -c 'skipping step' pz.log) skipped; $("$tool" close p0.st p.st 0 2>&1)"
# the reduced loss is NaN with its sign bit set: "nan" all the same
grep -q 'skipping step 5: loss nan,' pz.log && ! grep -q -- '-nan' pz.log &&
  echo "ok: the skip warning says 'loss nan'" || fail "the skip warning: $(grep -m1 'skipping step' pz.log)"

# 4. commands that run as one process
rc=0
run a1 "$charlm" train "${TINY[@]}" --steps 4 --out a.st
printf 'ein Satz\n' >sc.txt
for cmd in "$charlm average --out avg.st a.st a.st" "$charlm sample --ckpt a.st --length 5" \
  "$charlm eval --ckpt a.st" "$charlm sample --ckpt a.st --length 5 --attention att.png" \
  "$seq2seq translate --ckpt s1.st hallo" "$seq2seq attention --ckpt s1.st --text hallo --out attdir" \
  "$seq2seq score --ref sc.txt --hyp sc.txt"; do
  rc=0
  # shellcheck disable=SC2086 # the words of cmd
  mpi 2 $cmd >out.txt 2>err.txt || rc=$?
  name=$(echo "$cmd" | cut -d' ' -f2)
  # exit 2 (a usage error), the code every rank gave MPI_Abort
  if [ "$rc" -eq 2 ] && grep -q "$name runs as one process: start it without mpirun" err.txt &&
    [ ! -e avg.st ] && [ ! -e att.png ] && [ ! -e attdir ] && ! ls avg.st.* att.png.* >/dev/null 2>&1; then
    echo "ok: $name under mpirun: $(grep -m1 'one process' err.txt)"
  else
    fail "$name under mpirun: exit $rc, $(ls avg.st* att.png* attdir 2>/dev/null | tr '\n' ' ')$(grep -m1 error err.txt)"
  fi
  rm -rf avg.st* att.png* attdir
done
mpi 2 "$charlm" average --help >out.txt 2>err.txt && grep -q "usage" out.txt &&
  echo "ok: average --help under mpirun" || fail "average --help under mpirun: $(tail -1 err.txt)"

# 5. resumed on more ranks than its batch has windows
run b "$charlm" train "${TINY[@]}" --batch-size 2 --steps 8 --stop-at 4 --out b.st
refused "a batch of 2 windows resumed on 3 ranks" "'b.st' trains batches of 2 windows.*resume on at most 2 ranks" \
  "${MPI[@]}" -np 3 "$charlm" train --resume b.st

# 6. a directory where the step-12 evaluation checkpoint goes: its save
# fails after kl.st (whose list drops step 4) was written
KL=("${TINY[@]}" --steps 20 --keep-last 2)
run klu mpi 2 "$charlm" train "${KL[@]}" --out klu.st
mkdir kl.st.step00000012.safetensors
rc=0
mpi 2 "$charlm" train "${KL[@]}" --force --out kl.st >klc.json 2>klc.log || rc=$?
[ "$rc" = 1 ] && grep -q "could not save the checkpoint at step 12" klc.log &&
  echo "ok: --keep-last, the kept copy of step 12 not writable: exit 1" ||
  fail "--keep-last, the kept copy not writable: exit $rc, $(grep -m1 error klc.log)"
rmdir kl.st.step00000012.safetensors
run klr mpi 2 "$charlm" train --resume kl.st
[ "$(ls kl.st.step* | sed 's/^kl\./X./')" = "$(ls klu.st.step* | sed 's/^klu\./X./')" ] &&
  echo "ok: resumed after the cut save: the kept files of the uninterrupted run" ||
  fail "resumed after the cut save: $(ls kl.st.step* | tr '\n' ' ') against $(ls klu.st.step* | tr '\n' ' ')"

# 8. --eval-bleu N: each rank decodes its share of the N pairs and the
# counts are summed, so the logged BLEU and chrF are those of all N pairs
# (eval's of the checkpoint of that step): 9 pairs in shares of 4 and 5 on
# 2 ranks, 3 each on 3; 3 pairs on 4 ranks leave rank 0 none
EB=(--tokenizer char --d 32 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 64 --valid-size 20
    --test-size 20 --test-limit 1 --threads 1 --eval-every 150 --precision fp32 --seed 5
    --max-tokens 300 --steps 150 --factor 2 --warmup 30 --data p.tsv)
for case in "2 9" "3 9" "4 3"; do
  read -r np nb <<<"$case"
  run "eb$np" mpi "$np" "$seq2seq" train "${EB[@]}" --eval-bleu "$nb" --out "eb$np.st"
  "$seq2seq" eval --ckpt "eb$np.st" --split valid --test-limit "$nb" >"ebe$np.json" 2>"ebe$np.log" ||
    fail "eval of eb$np.st: $(tail -1 "ebe$np.log")"
  python3 - "ebe$np.json" "eb$np.st.metrics.jsonl" <<'EOF' &&
import json, sys
e = json.loads(open(sys.argv[1]).read().splitlines()[-1])
at = [x for x in map(json.loads, open(sys.argv[2])) if 'val_chrf' in x][-1]
assert at['step'] == 150, at
assert abs(e['chrf'] - at['val_chrf']) < 0.006 and abs(e['bleu'] - at['val_bleu']) < 0.006, (e, at)
assert 20 < at['val_chrf'] < 100, at  # a model that translates some
EOF
    echo "ok: --eval-bleu $nb on $np ranks: the logged BLEU and chrF are eval's of those $nb pairs" ||
    fail "--eval-bleu $nb on $np ranks: $(tail -1 "ebe$np.json") against $(tail -1 "eb$np.st.metrics.jsonl")"
done

# 7. each save of rank 0 takes 3 s or more (two fsyncs of 1.5 s), the
# watchdog's limit is 2 s (exported: mpirun's -x reaches the first program
# of a colon-separated command line only); LeakSanitizer cannot stop a
# process strace traces (an ASan build), so it is off for that rank
if command -v strace >/dev/null && strace -f -o /dev/null -e trace=fsync \
  -e inject=fsync:delay_enter=1000 true 2>/dev/null; then
  rc=0
  asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  CG_DIST_TIMEOUT=2 timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 \
    -np 1 env ASAN_OPTIONS="$asan" strace -f -o /dev/null -e trace=fsync \
    -e inject=fsync:delay_enter=1500000 \
    "$charlm" train "${TINY[@]}" --steps 8 --out slow.st : \
    -np 1 "$charlm" train "${TINY[@]}" --steps 8 --out slow.st >slow.json 2>slow.log || rc=$?
  [ "$rc" = 0 ] && grep -q '"step": 8' slow.json &&
    echo "ok: saves of rank 0 longer than CG_DIST_TIMEOUT: the ranks wait for them" ||
    fail "saves of rank 0 longer than CG_DIST_TIMEOUT: exit $rc, $(grep -m1 'cgrad dist\|error' slow.log)"
else
  echo "skip: a slow save (no strace, or it cannot delay a system call)"
fi
finish
