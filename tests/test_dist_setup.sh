#!/usr/bin/env bash
# Data-parallel runs checked at setup (issue 25, cases 5, 9, 13 and their
# neighbours; meson suite 'reliability'), 2 ranks under mpirun:
#  - every batch of every epoch can be split over the ranks, or the run is
#    refused before step 1 with advice that can be followed;
#  - every rank trains on the same data with the same recipe and precision
#    (issue 32: what --precision auto chose on its CPU; on --resume, a
#    --precision given to one rank alone), and fine-tunes the
#    same base (issue 34, finding 11: --init-from's content);
#  - the rank logs go to $TMPDIR when /tmp is read-only, and an error names
#    the path and the reason.
#   test_dist_setup.sh CHARLM SEQ2SEQ MPIRUN   (skipped without MPIRUN)
set -uo pipefail
charlm=$1
seq2seq=$2
mpirun=${3:-}
if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null; then
  echo "skip: no mpirun"
  exit 77
fi
. "$(dirname "$0")/shell_lib.sh" dist
export OMP_NUM_THREADS=1 CG_DIST_TIMEOUT=60
# Open MPI 4's mpirun itself crashes (SIGSEGV in its help-message
# aggregation) about one time in two when ranks call MPI_Abort together
# under meson's MALLOC_PERTURB_; the programs are not involved.
unset MALLOC_PERTURB_
mpi=("$mpirun" --allow-run-as-root --oversubscribe)
zoo_data
sed 's/whale/elahw/g' c.txt >c2.txt # same size, same characters, other text
TINY=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4)
# no_steps NAME: the failed run took no step and wrote no checkpoint
no_steps() {
  if grep -q "step 1/" err.txt || [ -e "$2" ]; then fail "$1: failed after training started"
  else echo "ok: $1: refused before step 1"; fi
}

# ---- 9. ranks with other data or another recipe are refused at start
refused "ranks given different --data" "data" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d1.st : \
  -np 1 "$charlm" train --data c2.txt "${TINY[@]}" --steps 4 --out d1.st
no_steps "ranks given different --data" d1.st
refused "ranks given different --lr" "\-\-lr" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d2.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --lr 2e-3 --steps 4 --out d2.st
no_steps "ranks given different --lr" d2.st
refused "ranks given different --batch-size" "batch" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d3.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --batch-size 8 --steps 4 --out d3.st
no_steps "ranks given different --batch-size" d3.st
refused "ranks given different --steps" "steps" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d4.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 6 --out d4.st
# the flags that decide when and how the ranks step together: a rank that
# stops at another --stop-at, shards its optimizer alone (--zero) or skips
# a non-finite step the others stop at would wait in a collective the
# others never reach
refused "ranks given different --stop-at" "\-\-stop-at differs between ranks" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 8 --out d10.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 8 --stop-at 4 --out d10.st
no_steps "ranks given different --stop-at" d10.st
refused "ranks given different --zero" "\-\-zero differs between ranks" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d11.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --zero 1 --out d11.st
no_steps "ranks given different --zero" d11.st
refused "ranks given different --skip-nonfinite" "\-\-skip-nonfinite differs between ranks" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d12.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --skip-nonfinite --out d12.st
no_steps "ranks given different --skip-nonfinite" d12.st
# a setting only rank 1 was given (rank 0's state has no such entry)
refused "--keep-best given to rank 1 alone" "a rank was given a setting rank 0 was not" \
  "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d13.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --keep-best --out d13.st
no_steps "--keep-best given to rank 1 alone" d13.st
# the same data under another path on each rank (paths are per machine):
# compared by content, it trains
cp c.txt c_copy.txt
timeout 300 "${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d14.st : \
  -np 1 "$charlm" train --data c_copy.txt "${TINY[@]}" --steps 4 --out d14.st >/dev/null 2>err.txt &&
  echo "ok: the same --data under another path on each rank trains" ||
  fail "the same --data under another path: $(grep -m1 error err.txt)"
# the variables that shape the gradient reduction: mpirun does not pass a
# variable to another host without -x, so ranks may see different values;
# the buckets then no longer match (an MPI error, or a wait until
# CG_DIST_TIMEOUT blamed on a dead rank); refused at start, naming it
refused "ranks given different CG_DIST_BUCKET_MB" \
  "CG_DIST_BUCKET_MB differs between ranks.*mpirun -x CG_DIST_BUCKET_MB" \
  "${mpi[@]}" -np 1 env CG_DIST_BUCKET_MB=0.001 "$charlm" train --data c.txt "${TINY[@]}" \
  --steps 4 --out d8.st : -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d8.st
no_steps "ranks given different CG_DIST_BUCKET_MB" d8.st
refused "ranks given different CG_DIST_OVERLAP" "CG_DIST_OVERLAP differs between ranks" \
  "${mpi[@]}" -np 1 env CG_DIST_OVERLAP=0 "$charlm" train --data c.txt "${TINY[@]}" \
  --steps 4 --out d9.st : -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d9.st
no_steps "ranks given different CG_DIST_OVERLAP" d9.st
# --keep-last and --keep-best given to every rank (rank 0 alone keeps the
# files, and alone has their list in its training state): the run trains
# and rank 0 keeps the last 2 evaluation checkpoints and the best one
rm -f kl.*
if timeout 300 "${mpi[@]}" -np 2 "$charlm" train --data c.txt "${TINY[@]}" --steps 12 --keep-last 2 \
  --keep-best --out kl.safetensors >/dev/null 2>err.txt; then
  [ -e kl.step00000008.safetensors ] && [ -e kl.step00000012.safetensors ] &&
    [ ! -e kl.step00000004.safetensors ] && [ -e kl.best.safetensors ] &&
    echo "ok: --keep-last 2 --keep-best on 2 ranks keeps its checkpoints" ||
    fail "--keep-last 2 --keep-best on 2 ranks: kept $(ls kl.* | tr '\n' ' ')"
else
  fail "--keep-last 2 --keep-best on 2 ranks: $(grep -m1 error err.txt)"
fi
# issue 32: --precision auto chooses by each rank's CPU; ranks that chose
# differently (here CG_BF16_EMULATE=1 on rank 0, a CPU without native bf16
# as far as auto knows) are refused, and told how to agree
if grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512_bf16; then
  refused "ranks whose auto chose other precisions" \
    "\-\-precision differs between ranks.*give every rank --precision fp32 or bf16" \
    "${mpi[@]}" -np 1 env CG_BF16_EMULATE=1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 \
    --out d6.st : -np 1 env -u CG_BF16_EMULATE "$charlm" train --data c.txt "${TINY[@]}" --steps 4 \
    --out d6.st
  no_steps "ranks whose auto chose other precisions" d6.st
  timeout 300 "${mpi[@]}" -np 1 env CG_BF16_EMULATE=1 "$charlm" train --data c.txt "${TINY[@]}" \
    --steps 4 --precision fp32 --out d7.st : -np 1 env -u CG_BF16_EMULATE "$charlm" train \
    --data c.txt "${TINY[@]}" --steps 4 --precision fp32 --out d7.st >/dev/null 2>err.txt &&
    echo "ok: the same ranks given --precision fp32 train" ||
    fail "the same ranks given --precision fp32: $(grep -m1 error err.txt)"
else
  echo "skip: ranks whose auto chose other precisions: this CPU has no AVX512_BF16"
fi
# --precision given to --resume on one rank alone (it switches that rank's
# run; the others keep the checkpoint's): refused, and the advice is about
# the switch, not about what auto chose (a resume keeps the checkpoint's)
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --stop-at 4 --precision bf16 --out sw.st \
  >/dev/null 2>err.txt || fail "a bf16 run to resume: $(tail -1 err.txt)"
cp sw.st sw.orig
refused "--precision fp32 given to --resume on rank 0 alone" \
  "\-\-precision differs between ranks (rank 0: options.precision = \"fp32\"); --precision given to --resume switches the run: give every rank the same --precision, or none" \
  "${mpi[@]}" -np 1 "$charlm" train --resume sw.st --precision fp32 : -np 1 "$charlm" train --resume sw.st
cmp -s sw.st sw.orig || fail "a refused resume changed the checkpoint"
timeout 300 "${mpi[@]}" -np 2 "$charlm" train --resume sw.st --precision fp32 >/dev/null 2>err.txt &&
  grep -q "precision fp32 (switched from the checkpoint's bf16)" err.txt &&
  echo "ok: --precision fp32 given to --resume on every rank switches the run" ||
  fail "--precision fp32 given to --resume on every rank: $(grep -m1 'error\|precision' err.txt)"
# issue 34, finding 11: the same base on every rank (its content; the path
# may differ between machines), full fine-tuning and LoRA
"$charlm" train --data c.txt "${TINY[@]}" --steps 4 --seed 1 --out base1.st >/dev/null 2>&1 &&
  "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --seed 2 --out base2.st >/dev/null 2>&1 &&
  cp base1.st base1copy.st || fail "the bases: $(tail -1 err.txt)"
FT=(--data c.txt --threads 1 --eval-every 4 --steps 4)
refused "ranks given different --init-from bases" "the ranks were not started with the same run: --init-from (the base checkpoint's content) differs" \
  "${mpi[@]}" -np 1 "$charlm" train --init-from base1.st "${FT[@]}" --out i1.st : \
  -np 1 "$charlm" train --init-from base2.st "${FT[@]}" --out i1.st
no_steps "ranks given different --init-from bases" i1.st
refused "ranks given different --init-from bases (LoRA)" "--init-from (the base checkpoint's content) differs" \
  "${mpi[@]}" -np 1 "$charlm" train --init-from base1.st --lora-rank 2 "${FT[@]}" --out i2.st : \
  -np 1 "$charlm" train --init-from base2.st --lora-rank 2 "${FT[@]}" --out i2.st
no_steps "ranks given different --init-from bases (LoRA)" i2.st
refused "rank 0 from scratch, rank 1 from a base" "--init-from (the base checkpoint's content) differs between ranks (rank 0: init_from = \"none\")" \
  "${mpi[@]}" -np 1 "$charlm" train "${TINY[@]}" --data c.txt --steps 4 --out i4.st : \
  -np 1 "$charlm" train --init-from base1.st "${FT[@]}" --batch-size 4 --out i4.st
timeout 300 "${mpi[@]}" -np 1 "$charlm" train --init-from base1.st --lora-rank 2 "${FT[@]}" --out i3.st : \
  -np 1 "$charlm" train --init-from base1copy.st --lora-rank 2 "${FT[@]}" --out i3.st >/dev/null 2>err.txt &&
  echo "ok: the same base under another path on each rank trains" ||
  fail "the same base under another path: $(grep -m1 error err.txt)"
# the shape message names both ranks once each
"${mpi[@]}" -np 1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out d5.st : \
  -np 1 "$charlm" train --data c.txt "${TINY[@]}" --d 32 --steps 4 --out d5.st >/dev/null 2>err.txt
if grep -q "rank 0: [^;]*; rank 0:" err.txt; then fail "the shape message repeats rank 0: $(grep 'rank 0' err.txt | head -1)"
else echo "ok: the shape message: $(grep -m1 'differ' err.txt)"; fi
sed 's/katze 1 /katze 7 /' p.tsv >p2.tsv
S2S=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --valid-size 20
     --test-size 20 --test-limit 2 --threads 1 --eval-every 4)
refused "seq2seq ranks given different --data" "data" \
  "${mpi[@]}" -np 1 "$seq2seq" train --data p.tsv "${S2S[@]}" --max-tokens 200 --steps 4 --out s1.st : \
  -np 1 "$seq2seq" train --data p2.tsv "${S2S[@]}" --max-tokens 200 --steps 4 --out s1.st
no_steps "seq2seq ranks given different --data" s1.st
# a batch smaller than the ranks: charlm --batch-size 1 on 2 ranks
refused "charlm --batch-size 1 on 2 ranks" "batch" \
  "${mpi[@]}" -np 2 "$charlm" train --data c.txt "${TINY[@]}" --batch-size 1 --steps 4 --out b1.st
no_steps "charlm --batch-size 1 on 2 ranks" b1.st

# ---- 5. every batch is checked at setup: pairs so long that a batch of
# --max-tokens 350 holds one of them
long=$(printf 'word%.0s ' {1..36})
{ cat p.tsv; for ((i = 0; i < 8; i++)); do printf '%s%d\t%s%d\n' "$long" $i "$long" $i; done; } >pl.tsv
rc=0
timeout 300 "${mpi[@]}" -np 2 "$seq2seq" train --data pl.tsv "${S2S[@]}" --max-tokens 350 --steps 40 \
  --out m.st >out.txt 2>err.txt || rc=$?
if [ "$rc" -eq 0 ]; then
  echo "ok: a batch of one pair on 2 ranks trains"
elif [ "$rc" -eq 1 ] && grep -q -- "--max-tokens" err.txt; then
  no_steps "a batch of one pair on 2 ranks" m.st
  # the advice can be followed: the value it names works
  v=$(grep -o -- "--max-tokens [0-9]*" err.txt | tail -1 | grep -o "[0-9]*$")
  [ -n "$v" ] || fail "a batch of one pair on 2 ranks: no --max-tokens value advised: $(grep -m1 error err.txt)"
  [ -n "$v" ] && timeout 300 "${mpi[@]}" -np 2 "$seq2seq" train --data pl.tsv "${S2S[@]}" --max-tokens "$v" --steps 40 \
    --out m2.st >/dev/null 2>err2.txt && echo "ok: the advised --max-tokens $v trains" ||
    fail "the advised --max-tokens $v: $(grep error err2.txt | head -1)"
else
  fail "a batch of one pair on 2 ranks: exit $rc: $(grep error err.txt | head -1)"
fi
# the same data trained on 1 rank, resumed on 2
"$seq2seq" train --data pl.tsv "${S2S[@]}" --max-tokens 350 --steps 40 --stop-at 4 --out r.st >/dev/null 2>err.txt ||
  fail "1 rank, --max-tokens 350: $(tail -1 err.txt)"
rc=0
timeout 300 "${mpi[@]}" -np 2 "$seq2seq" train --resume r.st >/dev/null 2>err.txt || rc=$?
if [ "$rc" -eq 0 ]; then echo "ok: resumed on 2 ranks"
elif grep -q "step [0-9]*/" err.txt; then fail "resume on 2 ranks failed after training: $(grep error err.txt | head -1)"
else echo "ok: resume on 2 ranks refused at setup: $(grep -m1 error err.txt)"; fi

# ---- 13. rank logs: $TMPDIR when /tmp is read-only
if unshare -m true 2>/dev/null; then
  mkdir -p tmpdir
  rc=0
  timeout 300 unshare -m sh -c '
    mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp || exit 77
    mount --bind "$1" "$1" && mount -o remount,bind,rw "$1" || exit 77
    shift
    exec env TMPDIR="$PWD/tmpdir" "$@"' sh "$PWD" "${mpi[@]}" -np 2 "$charlm" train --data c.txt \
    "${TINY[@]}" --steps 4 --out t.st >out.txt 2>err.txt || rc=$?
  if [ "$rc" -eq 77 ]; then echo "skip: cannot mount /tmp read-only"
  elif [ "$rc" -eq 0 ]; then echo "ok: /tmp read-only, TMPDIR writable: trains"
  else fail "/tmp read-only, TMPDIR writable: exit $rc: $(grep -m1 error err.txt)"; fi
  # TMPDIR not writable either (Open MPI's own files elsewhere): the message
  # names the path and the reason
  rc=0
  timeout 300 unshare -m sh -c '
    mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp || exit 77
    mount --bind "$1" "$1" && mount -o remount,bind,rw "$1" || exit 77
    mkdir -p "$1/ro" "$1/mpitmp" && mount --bind "$1/ro" "$1/ro" && mount -o remount,bind,ro "$1/ro" || exit 77
    shift
    exec env TMPDIR="$PWD/ro" "$@"' sh "$PWD" "${mpi[@]}" --mca orte_tmpdir_base "$PWD/mpitmp" -np 2 \
    "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out t3.st >out.txt 2>err.txt || rc=$?
  if [ "$rc" -eq 77 ]; then echo "skip: cannot mount read-only"
  elif [ "$rc" -eq 0 ]; then echo "ok: rank logs found a writable place"
  elif grep -q "ro.*Read-only file system\|ro.*Permission denied" err.txt; then
    echo "ok: an unwritable log directory is named with the reason: $(grep -m1 'Read-only\|Permission' err.txt)"
  else fail "an unwritable log directory: exit $rc: $(grep -m1 error err.txt)"; fi
else
  echo "skip: unshare -m unavailable (the read-only /tmp case)"
fi
finish
