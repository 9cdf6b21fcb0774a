#!/usr/bin/env bash
# --precision auto, the default of the zoo's train commands (issue 32;
# meson suite 'models'):
#   1. auto resolves to bf16 on a CPU with native bf16 (AVX512_BF16 or AMX;
#      skipped, with the reason, on a CPU without) and to fp32 under
#      CG_BF16_EMULATE=1 (emulated bf16 is never chosen): charlm train,
#      charlm train --init-from (fine-tuning) and seq2seq train;
#   2. the start-up line and the JSON line say what auto chose and why; an
#      explicit --precision adds nothing;
#   3. the checkpoint records the resolved precision, never "auto";
#   4. --resume of an fp32 checkpoint with the default (or --precision
#      auto) stays fp32, bit for bit, on any CPU; a checkpoint that records
#      no precision (written before options) resumes in fp32; a bf16 one
#      given --precision auto stays bf16 where auto would choose fp32;
#   5. a bad value (--precision fp16) is one line naming auto, fp32, bf16.
#   test_precision_auto.sh CHARLM SEQ2SEQ
set -uo pipefail
charlm=$1
seq2seq=$2
. "$(dirname "$0")/shell_lib.sh" precision_auto
unset CG_BF16_EMULATE CG_BF16_AMX CG_AMX_EMULATE # this test sets them itself
zoo_data
TINY=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4)
S2S=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
     --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 4)
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p" "$2"; }
# the CPU's bf16 as core/gemm.c asks for it (AVX-512 F and BW with
# AVX512_BF16; AMX-BF16 comes with them)
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
native=0
for f in avx512f avx512bw avx512_bf16; do
  grep -qw "$f" <<<"$flags" || { native=""; why_not="no $f in /proc/cpuinfo"; break; }
done
[ -n "$native" ] && native=1
# saved_precision CKPT: the precision its "train" metadata's options record
saved_precision() {
  st_py "$1" <<'EOF'
print(json.loads(load(sys.argv[1])[1]['train'])['options'].get('precision', '(none)'))
EOF
}
# auto_run NAME WANT REASON OUT.st CMD...: CMD (a train run writing OUT.st)
# succeeds; its start-up line says "precision WANT (auto: REASON...)",
# its JSON line "precision": WANT and "precision_auto": REASON, and the
# checkpoint records WANT
auto_run() {
  local name=$1 want=$2 reason=$3 out=$4 rc=0
  shift 4
  "$@" --out "$out" >"$out.json" 2>"$out.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "$name: exit $rc: $(tail -c 300 "$out.err")"
  elif ! grep -q "precision $want (auto: $reason" "$out.err"; then
    fail "$name: the start-up line does not say 'precision $want (auto: $reason': $(grep -m1 precision "$out.err")"
  elif [ "$(field precision "$out.json")" != "$want" ] ||
       [ "$(field precision_auto "$out.json")" != "$reason" ]; then
    fail "$name: JSON line: $(tail -1 "$out.json")"
  elif [ "$(saved_precision "$out")" != "$want" ]; then
    fail "$name: the checkpoint records precision '$(saved_precision "$out")', not $want"
  else
    echo "ok: $name: $(grep -m1 -o "precision $want (auto[^)]*)" "$out.err")"
  fi
}

# ---- 1-3. what auto chooses, and says
if [ "$native" = 1 ]; then
  amx=$(grep -qw amx_bf16 <<<"$flags" && echo "AMX" || echo "AVX512_BF16")
  auto_run "charlm train: auto on native bf16" bf16 "the CPU has $amx" n.st \
    "$charlm" train --data c.txt "${TINY[@]}" --steps 4
  grep -q "precision bf16 (auto: the CPU has $amx; --precision fp32 to opt out)" n.st.err ||
    fail "the bf16 start-up line does not say how to opt out: $(grep -m1 precision n.st.err)"
  auto_run "seq2seq train: auto on native bf16" bf16 "the CPU has $amx" sn.st \
    "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 4
else
  echo "skip: auto resolving to bf16: this CPU has no native bf16 ($why_not)"
fi
auto_run "charlm train: auto with CG_BF16_EMULATE=1" fp32 "no native bf16 on this CPU" e.st \
  env CG_BF16_EMULATE=1 "$charlm" train --data c.txt "${TINY[@]}" --steps 4
auto_run "seq2seq train: auto with CG_BF16_EMULATE=1" fp32 "no native bf16 on this CPU" se.st \
  env CG_BF16_EMULATE=1 "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 4
auto_run "charlm train --init-from: auto with CG_BF16_EMULATE=1" fp32 "no native bf16 on this CPU" \
  fe.st env CG_BF16_EMULATE=1 "$charlm" train --init-from e.st --data c.txt --threads 1 \
  --eval-every 4 --steps 4
if [ "$native" = 1 ]; then
  auto_run "charlm train --init-from: auto on native bf16" bf16 "the CPU has $amx" fn.st \
    "$charlm" train --init-from e.st --data c.txt --threads 1 --eval-every 4 --steps 4
fi
# an explicit --precision: nothing more is said
for p in fp32 bf16; do
  rc=0
  "$charlm" train --data c.txt "${TINY[@]}" --steps 4 --precision $p --out x$p.st >x$p.json 2>x$p.err ||
    rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "charlm train --precision $p: exit $rc: $(tail -1 x$p.err)"
  elif grep -q "auto" x$p.err || grep -q precision_auto x$p.json || ! grep -q "precision $p$" x$p.err ||
       [ "$(field precision x$p.json)" != $p ] || [ "$(saved_precision x$p.st)" != $p ]; then
    fail "charlm train --precision $p: $(grep -m1 precision x$p.err) / $(tail -1 x$p.json)"
  else
    echo "ok: charlm train --precision $p: $(grep -m1 -o "precision $p$" x$p.err), recorded"
  fi
done

# ---- 4. --resume keeps the checkpoint's precision, whatever auto says here
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --precision fp32 --out full.st >full.json 2>/dev/null ||
  fail "charlm train --steps 8 --precision fp32"
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --stop-at 4 --precision fp32 --out half.st \
  >/dev/null 2>&1 || fail "charlm train --stop-at 4 --precision fp32"
cp half.st half2.st
for how in default auto; do
  extra=()
  [ $how = auto ] && extra=(--precision auto)
  ck=half.st
  [ $how = auto ] && ck=half2.st
  rc=0
  "$charlm" train --resume $ck "${extra[@]}" >r$how.json 2>r$how.err || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "resume of an fp32 checkpoint ($how): exit $rc: $(tail -1 r$how.err)"
  elif [ "$(field precision r$how.json)" != fp32 ] || grep -q precision_auto r$how.json ||
       grep -q "(auto" r$how.err || [ "$(saved_precision $ck)" != fp32 ]; then
    fail "resume of an fp32 checkpoint ($how): $(grep -m1 precision r$how.err) / $(tail -1 r$how.json)"
  elif [ "$(field val_loss r$how.json)" != "$(field val_loss full.json)" ] ||
       [ "$(field train_loss r$how.json)" != "$(field train_loss full.json)" ]; then
    fail "resume of an fp32 checkpoint ($how): losses $(field val_loss r$how.json) $(field train_loss r$how.json), the whole run's $(field val_loss full.json) $(field train_loss full.json)"
  else
    echo "ok: resume of an fp32 checkpoint ($how): fp32, the whole run's val_loss $(field val_loss full.json)"
  fi
done
# a checkpoint whose options record no precision (written before them)
# was trained in fp32 and resumes in fp32
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --stop-at 4 --precision fp32 --out old.st \
  >/dev/null 2>&1 || fail "charlm train --stop-at 4 (old)"
st_meta old.st "del t['options']['precision']" || fail "could not strip the precision from old.st"
rc=0
"$charlm" train --resume old.st >old.json 2>old.err || rc=$?
if [ "$rc" -eq 0 ] && [ "$(field precision old.json)" = fp32 ] &&
   [ "$(field val_loss old.json)" = "$(field val_loss full.json)" ]; then
  echo "ok: a checkpoint without a recorded precision resumes in fp32"
else
  fail "resume of a checkpoint without precision: exit $rc: $(tail -1 old.err) / $(tail -1 old.json)"
fi
if [ "$native" = 1 ]; then # and a bf16 one stays bf16 under CG_BF16_EMULATE=1
  rc=0
  env CG_BF16_EMULATE=1 "$charlm" train --resume n.st --steps 6 >rb.json 2>rb.err || rc=$?
  [ "$rc" -eq 0 ] && [ "$(field precision rb.json)" = bf16 ] && ! grep -q precision_auto rb.json &&
    echo "ok: a bf16 checkpoint resumes in bf16 where auto would choose fp32" ||
    fail "resume of a bf16 checkpoint under CG_BF16_EMULATE=1: exit $rc: $(tail -1 rb.err) / $(tail -1 rb.json)"
fi
# --precision auto given to --resume chooses nothing: a bf16 checkpoint
# stays bf16 where auto would choose fp32 (CG_BF16_EMULATE=1: on any CPU
# with AVX2 and FMA, which emulated bf16 needs)
if grep -qw avx2 <<<"$flags" && grep -qw fma <<<"$flags"; then
  env CG_BF16_EMULATE=1 "$charlm" train --data c.txt "${TINY[@]}" --steps 8 --stop-at 4 --precision bf16 \
    --out hb.st >/dev/null 2>hb.err || fail "charlm train --precision bf16 (emulated): $(tail -1 hb.err)"
  rc=0
  env CG_BF16_EMULATE=1 "$charlm" train --resume hb.st --precision auto >rab.json 2>rab.err || rc=$?
  [ "$rc" -eq 0 ] && [ "$(field precision rab.json)" = bf16 ] && [ "$(saved_precision hb.st)" = bf16 ] &&
    ! grep -q "switched from" rab.err && echo "ok: --resume --precision auto of a bf16 checkpoint stays bf16" ||
    fail "--resume --precision auto of a bf16 checkpoint: exit $rc: $(tail -1 rab.err) / $(tail -1 rab.json)"
else
  echo "note: no AVX2 and FMA: --resume --precision auto of a bf16 checkpoint not asked"
fi

# ---- 5. a bad value: one line naming the values allowed
for prog in "$charlm" "$seq2seq"; do
  rc=0
  "$prog" train --precision fp16 --out y.st >/dev/null 2>bad.err || rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <bad.err)" -eq 1 ] &&
     grep -q -- "--precision: 'fp16' is not one of auto, fp32, bf16" bad.err; then
    echo "ok: $(cat bad.err)"
  else
    fail "$prog train --precision fp16: exit $rc: $(cat bad.err)"
  fi
done
# --help says it
for prog in "$charlm" "$seq2seq"; do
  "$prog" train --help >help.txt 2>&1 || fail "$prog train --help"
  grep -q -- "--precision P .*auto (default" help.txt && echo "ok: $(grep -m1 -- "--precision P" help.txt)" ||
    fail "$prog train --help does not name auto as --precision's default"
done
finish
