#!/usr/bin/env bash
# Resource limits, optional outputs, the environment and translate's stdin
# (issue 34, findings 4-7 and 10; meson suite 'reliability'):
#  - a file-size limit (ulimit -f) is a failed write, as a full disk is: one
#    line, exit 1, no temporary file, the old checkpoint kept; the metrics
#    log crossing it stops the run with a checkpoint saved;
#  - a disk filled by the metrics log: every line parses, the run saves while
#    it can and says so (a 200 KB tmpfs; skipped where mount is refused);
#    too full before the first step, a --force run keeps the old checkpoint
#    (the room kept back: --out's size and 64 KiB, times the copies
#    --keep-last and --keep-best write);
#  - an address-space limit (ulimit -v) that breaks the loss curve's drawing
#    (pango, fontconfig) is a warning, the run ends well (skipped under ASan,
#    which cannot run under ulimit -v);
#  - the soft CPU-time limit (ulimit -S -t): training saves and stops (an
#    evaluation under way is cut short), the other commands end with one
#    line; SIGHUP stops training with a
#    checkpoint, a closed pipe (SIGPIPE) does not end it;
#  - every CG_ environment variable is parsed as strictly as the flags;
#  - translate reads each stdin line on its own: a NUL byte or a line over
#    1 MiB is an empty output line and a warning.
#  - decode_bench out of memory: one line, exit 1, nothing left allocated;
#    bench's random batches too large for memory: one line, exit 1.
#   test_limits.sh CHARLM SEQ2SEQ DECODE_BENCH BENCH
set -uo pipefail
charlm=$1
seq2seq=$2
decode_bench=$3
bench=$4
. "$(dirname "$0")/shell_lib.sh" limits
trap 'end_children; umount "$dir/full" 2>/dev/null; rm -rf "$dir"' EXIT

zoo_ckpts
cp a.st a.copy
# no_temps NAME: no temporary file left in the directory
no_temps() {
  if ls ./*.tmp.* >/dev/null 2>&1; then fail "$1: left $(ls ./*.tmp.*)"; rm -f ./*.tmp.*
  else echo "ok: $1: no temporary file"; fi
}
# loads NAME CKPT STEP: eval reads CKPT, at STEP
loads() {
  if "$charlm" eval --ckpt "$2" 2>/dev/null | grep -q "\"step\": $3"; then echo "ok: $1: '$2' loads at step $3"
  else fail "$1: '$2' does not load at step $3"; fi
}
# stepped FILE: the step of the checkpoint named in the last error line
stepped() { sed -n 's/.*stopped at step \([0-9]*\).*/\1/p' "$1" | tail -1; }

# ---- 10. environment variables: strict, as the flags
for v in 10abc 0x10 1e20 -1 nan ' 5' inf; do
  expect "CG_DIST_TIMEOUT='$v'" 2 "environment variable CG_DIST_TIMEOUT: " \
    env CG_DIST_TIMEOUT="$v" "$charlm" eval --ckpt a.st
done
for kv in CG_MAX_INPUT_MB=12x CG_MAX_INPUT_MB=0 CG_DIST_BUCKET_MB=0x4 CG_DIST_BUCKET_MB=4096 \
          CG_ALLOC_CACHE_MB=-5 CG_BF16_EMULATE=maybe CG_BF16_AMX=2 CG_DIST_OVERLAP=01 \
          CG_DIST_MPI=yes1 CG_DIST_VERBOSE=x CG_MALLOC_DEFAULT=y CG_BLIS_DRIVER=no! \
          CG_BLIS_DEFAULT=1.0; do
  expect "$kv (charlm)" 2 "environment variable ${kv%%=*}: " env "$kv" "$charlm" eval --ckpt a.st
done
expect "CG_DIST_TIMEOUT=abc (seq2seq)" 2 "environment variable CG_DIST_TIMEOUT: 'abc' is not a number" \
  env CG_DIST_TIMEOUT=abc "$seq2seq" translate --ckpt s.st "the cat"
for kv in CG_DIST_TIMEOUT=10 CG_DIST_TIMEOUT=0.5 CG_MAX_INPUT_MB=1 CG_DIST_MPI=0 CG_BF16_EMULATE=1 \
          CG_DIST_BUCKET_MB=2.5 CG_MALLOC_DEFAULT=true CG_DIST_TIMEOUT=; do
  env "$kv" "$charlm" eval --ckpt a.st >out.txt 2>err.txt && grep -q '"step": 4' out.txt &&
    echo "ok: $kv is taken" || fail "$kv refused: $(tail -1 err.txt)"
done
expect "--lr 0x10 (a flag: decimal only)" 2 "--lr: '0x10' is not a decimal number" \
  "$charlm" train --data c.txt "${TINY[@]}" --steps 1 --lr 0x10 --out x.st

# ---- 4. a file-size limit (ulimit -f, SIGXFSZ)
rc=0
(ulimit -f 20; exec "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out k.st) >out.txt 2>err.txt || rc=$?
if [ $rc -eq 1 ] && grep -q "^charlm: error: could not save the checkpoint at step 4: .*File too large" err.txt; then
  echo "ok: ulimit -f 20: $(tail -1 err.txt)"
else fail "ulimit -f 20: exit $rc: $(tail -c 300 err.txt)"; fi
[ ! -e k.st ] && echo "ok: ulimit -f: no k.st" || fail "ulimit -f: k.st written"
no_temps "ulimit -f"
cp a.st r.st
rc=0
(ulimit -f 20; exec "$charlm" train --resume r.st --steps 8) >out.txt 2>err.txt || rc=$?
[ $rc -eq 1 ] && grep -q "File too large" err.txt && echo "ok: ulimit -f, resume: $(tail -1 err.txt)" ||
  fail "ulimit -f, resume: exit $rc: $(tail -c 300 err.txt)"
intact "ulimit -f, resume" r.st a.copy
no_temps "ulimit -f, resume"
# the metrics log crosses the limit (the checkpoint, 45 KB, stays under it)
rc=0
(ulimit -f 56; exec "$charlm" train --data c.txt "${TINY[@]}" --eval-every 100000 --steps 3000 \
  --log-every 1 --out m.st) >out.txt 2>err.txt || rc=$?
if [ $rc -eq 1 ] && grep -q "^charlm: error: cannot write the metrics log: File too large.*stopped at step [0-9]* and saved" err.txt; then
  echo "ok: the metrics log over ulimit -f: $(tail -1 err.txt)"
  loads "the metrics log over ulimit -f" m.st "$(stepped err.txt)"
else fail "the metrics log over ulimit -f: exit $rc: $(tail -c 300 err.txt)"; fi
jsonl_ok "the metrics log over ulimit -f" m.st.metrics.jsonl
no_temps "the metrics log over ulimit -f"

# ---- the soft CPU-time limit (ulimit -S -t, SIGXCPU): training saves and
# stops; another command says so in one line
rc=0
(ulimit -S -t 2; exec "$charlm" train --data c.txt "${TINY[@]}" --eval-every 100000 --steps 100000000 \
  --out t.st) >out.txt 2>err.txt || rc=$?
if [ $rc -eq 0 ] && grep -q "^charlm: stopped at step [0-9]*; checkpoint saved to 't.st'" err.txt; then
  echo "ok: ulimit -S -t 2: $(tail -1 err.txt)"
  loads "ulimit -S -t 2" t.st "$(sed -n 's/.*stopped at step \([0-9]*\);.*/\1/p' err.txt)"
else fail "ulimit -S -t 2: exit $rc: $(tail -c 300 err.txt)"; fi
# during an evaluation, which is cut short (its loop asks between
# batches): a seq2seq whose validation split (5,000 pairs, d 128) takes
# seconds, evaluated after every step; the limit comes in the first
for ((i = 0; i < 6000; i++)); do
  printf 'the cat %d sat on the mat\tdie katze %d sass auf der matte\n' $i $i
done >p6.tsv
rc=0
(ulimit -S -t 1; exec "$seq2seq" train --data p6.tsv --tokenizer char --d 128 --H 4 --enc-layers 2 \
  --dec-layers 2 --d-ff 256 --max-tokens 200 --valid-size 5000 --test-size 20 --threads 1 \
  --eval-every 1 --steps 100 --out e.st) >out.txt 2>err.txt || rc=$?
# (the limit lands in the evaluation at step 1, or on a fast CPU at step 2:
# the evaluations are nearly all of the time; the same step both times)
cut=$(sed -n 's/^seq2seq: the evaluation at step \([0-9]*\) was cut short by a signal$/\1/p' err.txt)
if [ $rc -eq 0 ] && [ -n "$cut" ] &&
   grep -q "^seq2seq: stopped at step $cut; checkpoint saved to 'e.st'" err.txt &&
   grep -q '"interrupted": true' out.txt; then
  echo "ok: ulimit -S -t 1 during an evaluation: $(grep -m1 'cut short' err.txt)"
  "$seq2seq" translate --ckpt e.st "the cat 3 sat" >/dev/null 2>tr.txt ||
    fail "ulimit -S -t 1 during an evaluation: 'e.st' does not load: $(tail -1 tr.txt)"
else fail "ulimit -S -t 1 during an evaluation: exit $rc: $(tail -c 300 err.txt)"; fi
rc=0
(ulimit -S -t 1; exec "$charlm" sample --ckpt a.st --length 10000000) >/dev/null 2>err.txt || rc=$?
[ $rc -eq 1 ] && grep -q "^charlm: error: the CPU time limit (ulimit -t) was reached" err.txt &&
  echo "ok: ulimit -S -t 1, sample: $(tail -1 err.txt)" || fail "ulimit -S -t 1, sample: exit $rc: $(tail -c 300 err.txt)"

# ---- a reader that goes away (SIGPIPE) does not end a run; a hangup
# (SIGHUP) stops it with a checkpoint
rm -f p.st p.st.*
"$charlm" train --data c.txt "${TINY[@]}" --eval-every 1000 --steps 1500 --log-every 1 \
  --out p.st 2>&1 | head -c 100 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 1 ] && echo "ok: train | head: exit 1 (the result line is lost), not SIGPIPE" ||
  fail "train | head: exit $rc"
loads "train | head" p.st 1500
"$charlm" train --data c.txt "${TINY[@]}" --eval-every 100000 --steps 100000000 --out h.st \
  >out.txt 2>err.txt &
pid=$!
for ((w = 0; w < 100; w++)); do grep -q "step 0:" err.txt && break; sleep 0.1; done
sleep 0.5
kill -HUP $pid
rc=0
wait $pid || rc=$?
if [ $rc -eq 0 ] && grep -q "^charlm: stopped at step [0-9]*; checkpoint saved to 'h.st'" err.txt; then
  echo "ok: SIGHUP: $(tail -1 err.txt)"
  loads "SIGHUP" h.st "$(sed -n 's/.*stopped at step \([0-9]*\);.*/\1/p' err.txt)"
else fail "SIGHUP: exit $rc: $(tail -c 300 err.txt)"; fi

# ---- 6. a disk filled by the metrics log
mkdir full
if mount -t tmpfs -o size=200k tmpfs full 2>/dev/null; then
  cp c.txt full/
  rc=0
  "$charlm" train --data full/c.txt "${TINY[@]}" --eval-every 100000 --steps 3000 --log-every 1 \
    --out full/k.st >out.txt 2>err.txt || rc=$?
  if [ $rc -eq 1 ] && grep -q "^charlm: error: cannot write the metrics log: No space left on device.*stopped at step [0-9]* and saved the checkpoint 'full/k.st'" err.txt; then
    echo "ok: a full disk: $(tail -1 err.txt)"
    loads "a full disk" full/k.st "$(stepped err.txt)"
  else fail "a full disk: exit $rc: $(tail -c 300 err.txt)"; fi
  jsonl_ok "a full disk" full/k.st.metrics.jsonl
  ls full/*.tmp.* >/dev/null 2>&1 && fail "a full disk: left $(ls full/*.tmp.*)" || echo "ok: a full disk: no temporary file"
  umount full
else
  echo "skip: a full disk (cannot mount a tmpfs here)"
fi
# a disk too full for the metrics log before the first step (room for the
# checkpoint, and for 64 KiB, not for both, what the log keeps back for the
# next save of --out, which exists): a --force run trained nothing and saves
# nothing, the earlier run's checkpoint kept
if mount -t tmpfs -o size=200k tmpfs full 2>/dev/null; then
  cp a.st full/o.st
  avail=$(df -B1 --output=avail full | tail -1)
  head -c $((avail - 65536 - $(wc -c <a.st) / 2)) /dev/zero >full/filler
  rc=0
  "$charlm" train --data c.txt "${TINY[@]}" --steps 8 --out full/o.st --force >out.txt 2>err.txt || rc=$?
  if [ $rc -eq 1 ] && grep -q "^charlm: error: cannot write the metrics log: No space left on device.*stopped before the first step; nothing saved" err.txt; then
    echo "ok: a full disk before the first step: $(tail -1 err.txt)"
  else fail "a full disk before the first step: exit $rc: $(tail -c 300 err.txt)"; fi
  cmp -s full/o.st a.st && echo "ok: a full disk before the first step: the old checkpoint kept" ||
    fail "a full disk before the first step: the old checkpoint was replaced"
  ls full/*.tmp.* >/dev/null 2>&1 && fail "a full disk before the first step: left $(ls full/*.tmp.*)"
  umount full
fi
# --keep-last and --keep-best write two more copies at a save: the room
# kept back counts them (150 KB for three ~50 KB checkpoints and the curve)
if mount -t tmpfs -o size=200k tmpfs full 2>/dev/null; then
  avail=$(df -B1 --output=avail full | tail -1)
  head -c $((avail - 153600)) /dev/zero >full/filler
  rc=0
  "$charlm" train --data c.txt "${TINY[@]}" --steps 8 --keep-last 1 --keep-best --out full/c.st >out.txt 2>err.txt || rc=$?
  if [ $rc -eq 1 ] && grep -q "^charlm: error: cannot write the metrics log: No space left on device.*stopped before the first step; nothing saved" err.txt &&
    [ ! -e full/c.st ]; then
    echo "ok: room for one checkpoint, not its copies: $(tail -1 err.txt)"
  else fail "room for one checkpoint, not its copies: exit $rc: $(tail -c 300 err.txt)"; fi
  ls full/*.tmp.* >/dev/null 2>&1 && fail "room for one checkpoint, not its copies: left $(ls full/*.tmp.*)"
  umount full
fi

# ---- 5. an address-space limit breaks the drawing: a warning, never the end
if (ulimit -v 200000; "$charlm" --help) >/dev/null 2>&1; then
  warned=0
  for v in 60000 80000 100000; do
    rm -f v.st v.st.*
    rc=0
    (ulimit -v $v; exec "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --out v.st) >out.txt 2>err.txt || rc=$?
    if [ $rc -eq 0 ] && json_ok "ulimit -v $v" out.txt >/dev/null; then
      echo "ok: charlm under ulimit -v $v: exit 0"
      loads "ulimit -v $v" v.st 4
      if [ ! -e v.st.loss.png ]; then
        grep -q "^charlm: warning: could not write the loss curve: " err.txt && warned=$((warned + 1)) ||
          fail "ulimit -v $v: no loss curve and no warning"
      fi
    else fail "charlm under ulimit -v $v: exit $rc: $(tail -c 300 err.txt)"; fi
    no_temps "ulimit -v $v"
  done
  rc=0
  (ulimit -v 80000; exec "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 4 --out w.st) >out.txt 2>err.txt || rc=$?
  [ $rc -eq 0 ] && echo "ok: seq2seq under ulimit -v 80000: exit 0" ||
    fail "seq2seq under ulimit -v 80000: exit $rc: $(tail -c 300 err.txt)"
  # a picture asked for (--attention) that cannot be drawn: an error, not a crash
  rc=0
  (ulimit -v 80000; exec "$charlm" sample --ckpt a.st --length 5 --attention at.png) >out.txt 2>err.txt || rc=$?
  if [ $rc -eq 0 ] && [ -s at.png ]; then echo "ok: --attention under ulimit -v 80000 drawn"
  elif [ $rc -eq 1 ] && grep -q "^charlm: error: --attention: .*drawing at.png" err.txt && [ ! -e at.png ]; then
    echo "ok: --attention under ulimit -v 80000: $(tail -1 err.txt | cut -c1-160)"
  else fail "--attention under ulimit -v 80000: exit $rc: $(tail -c 300 err.txt)"; fi
  no_temps "--attention under ulimit -v"
  echo "note: the drawing failed (a warning) at $warned of 3 limits"
else
  echo "skip: ulimit -v (this build, ASan's, cannot run under an address-space limit)"
fi

# ---- 7. translate: each stdin line on its own
"$seq2seq" translate --ckpt s.st "the cat 1 sat" "the cat 2 sat" >good.txt 2>err.txt || fail "translate: $(tail -1 err.txt)"
{ echo "the cat 1 sat"; printf 'the \0cat\n'; head -c 1100000 /dev/zero | tr '\0' a; echo; echo "the cat 2 sat"; } >in.txt
rc=0
"$seq2seq" translate --ckpt s.st <in.txt >out.txt 2>err.txt || rc=$?
{ sed -n 1p good.txt; echo; echo; sed -n 2p good.txt; } >want.txt
if [ $rc -eq 0 ] && cmp -s out.txt want.txt && grep -q "line 2: a NUL byte at byte 5" err.txt &&
   grep -q "line 3: longer than 1048576 bytes" err.txt; then
  echo "ok: translate: a NUL line and a 1.1 MB line are empty lines, the others translated"
else fail "translate stdin: exit $rc: $(head -c 300 err.txt)"; fi
rc=0
head -c 100000000 /dev/zero | timeout 60 "$seq2seq" translate --ckpt s.st >out.txt 2>err.txt || rc=$?
[ $rc -eq 1 ] && grep -q "no end of line" err.txt && echo "ok: translate </dev/zero: $(tail -1 err.txt)" ||
  fail "translate </dev/zero: exit $rc: $(tail -c 300 err.txt)"

# ---- decode_bench's 4 GB weights out of memory: one line, exit 1, and
# under AddressSanitizer (whose shadow memory ulimit -v forbids: its
# allocator refuses what is over 1000 MB instead) nothing leaked
rc=0
if (ulimit -v 200000; "$charlm" --help) >/dev/null 2>&1; then
  (ulimit -v 2000000; exec "$decode_bench" --d 65536 --d-ff 65536 --layers 1 --vocab 16 \
    --runs 1) >out.txt 2>err.txt || rc=$?
else
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1:max_allocation_size_mb=1000" \
    "$decode_bench" --d 65536 --d-ff 65536 --layers 1 --vocab 16 --runs 1 >out.txt 2>err.txt ||
    rc=$?
fi
[ $rc -eq 1 ] && [ "$(grep -c 'error' err.txt)" -eq 1 ] &&
  grep -q "^decode_bench: error: out of memory" err.txt &&
  echo "ok: decode_bench out of memory: $(grep error err.txt)" ||
  fail "decode_bench out of memory: exit $rc: $(grep -v WARNING err.txt | head -c 300)"

# ---- bench's four random batches of 65536 x 65536 tokens (34 GB each
# array) out of memory: one line, exit 1 (they were written through NULL:
# SIGSEGV)
rc=0
if (ulimit -v 200000; "$charlm" --help) >/dev/null 2>&1; then
  (ulimit -v 2000000; exec "$bench" --T 65536 --batch-size 65536 --d 16 --steps 1 --warmup 0 \
    --threads 1) >out.txt 2>err.txt || rc=$?
else
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1:max_allocation_size_mb=1000" \
    "$bench" --T 65536 --batch-size 65536 --d 16 --steps 1 --warmup 0 --threads 1 >out.txt \
    2>err.txt || rc=$?
fi
[ $rc -eq 1 ] && [ "$(grep -c 'error' err.txt)" -eq 1 ] && [ ! -s out.txt ] &&
  grep -q "^bench: error: out of memory for the random batches" err.txt &&
  echo "ok: bench out of memory: $(grep error err.txt)" ||
  fail "bench out of memory: exit $rc: $(grep -v WARNING err.txt | head -c 300)"
finish
