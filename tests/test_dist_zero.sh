#!/usr/bin/env bash
# ZeRO-1 end to end (`charlm train --zero 1`, models/train/dist.h), under
# mpirun on this machine (--oversubscribe):
#   1. 2 and 4 ranks with --zero 1 equal one process without it, parameters
#      and optimizer state within 1e-5 (test_dist's bound); the checkpoint
#      has the unsharded layout (the same tensors as the 1-process one);
#      2 ranks with --zero 1 equal 2 ranks without it
#   2. resume with another number of ranks: saved at step 10 by 2 ranks with
#      --zero 1, resumed to 20 by 4 ranks with --zero 1, and by 1 process
#      without it: both equal the uninterrupted run within 1e-5
#   3. one process with --zero 1 is the plain run, bit for bit; --zero 2 is
#      refused (exit 2)
#   test_dist_zero.sh MPIRUN CHARLM CKPT_WRITER
set -euo pipefail
mpirun=$1
charlm=$2
tool=$3
TOL=1e-5
dir=$(mktemp -d "${TMPDIR:-/tmp}/cg_dist_zero.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "test_dist_zero: $*" >&2; exit 1; }
words=(the a whale sea ship captain ahab white call me ishmael some years ago never mind how long)
for ((i = 0; i < 300; i++)); do
  printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}" "${words[$(((i * 5 + 3) % ${#words[@]}))]}"
  ((i % 6 == 5)) && printf '\n'
done >tiny.txt
model=(--data tiny.txt --d 16 --H 2 --layers 2 --d-ff 32 --T 16 --batch-size 8 --threads 1
       --eval-every 10 --seed 3 --steps 20)
mpi() { # mpi NP ARGS...: charlm under mpirun with NP ranks
  local np=$1
  shift
  "$mpirun" --allow-run-as-root --oversubscribe -np "$np" -x OMP_NUM_THREADS=1 \
    -x CG_DIST_TIMEOUT=120 "$charlm" "$@"
}
close() { # close A B WHAT
  local r
  r=$("$tool" close "$1" "$2" $TOL) || fail "$3: $1 and $2 differ ($r)"
  echo "$3: $r"
}

# 1. equivalence
"$charlm" train "${model[@]}" --out ref.st >/dev/null 2>ref.log || fail "1 process: $(tail -1 ref.log)"
mpi 2 train "${model[@]}" --zero 1 --out z2.st >/dev/null 2>z2.log || fail "2 ranks: $(tail -3 z2.log)"
grep -q "ZeRO-1" z2.log || fail "2 ranks: no ZeRO-1 line in the log: $(cat z2.log)"
close z2.st ref.st "2 ranks --zero 1 vs 1 process"
mpi 4 train "${model[@]}" --zero 1 --out z4.st >/dev/null 2>z4.log || fail "4 ranks: $(tail -3 z4.log)"
close z4.st ref.st "4 ranks --zero 1 vs 1 process"
mpi 2 train "${model[@]}" --out d2.st >/dev/null 2>d2.log || fail "2 ranks plain: $(tail -3 d2.log)"
close z2.st d2.st "2 ranks --zero 1 vs 2 ranks all-reduce"

# 2. resume with another rank count
mpi 2 train "${model[@]}" --zero 1 --stop-at 10 --out h.st >/dev/null 2>h.log ||
  fail "2 ranks to step 10: $(tail -3 h.log)"
cp h.st h1.st
mpi 4 train --resume h.st --zero 1 --threads 1 >/dev/null 2>h4.log ||
  fail "resume on 4 ranks: $(tail -3 h4.log)"
close h.st ref.st "saved by 2 ranks --zero 1 at 10, resumed by 4 ranks --zero 1 to 20"
"$charlm" train --resume h1.st --threads 1 >/dev/null 2>h1.log ||
  fail "resume in 1 process: $(tail -3 h1.log)"
close h1.st ref.st "saved by 2 ranks --zero 1 at 10, resumed by 1 process to 20"

# 3. one process, bad values
"$charlm" train "${model[@]}" --zero 1 --out one.st >/dev/null 2>one.log || fail "1 process --zero 1: $(tail -1 one.log)"
"$tool" same one.st ref.st || fail "1 process: --zero 1 differs from the plain run"
echo "1 process: --zero 1 == plain, bit for bit"
rc=0
"$charlm" train "${model[@]}" --zero 2 --out bad.st >/dev/null 2>bad.log || rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--zero" bad.log || fail "--zero 2: exit $rc, $(cat bad.log)"
echo "--zero 2: refused ($(tail -1 bad.log))"
