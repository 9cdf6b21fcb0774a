#!/usr/bin/env bash
# A fine-tuned run's files (issue 34, findings 1 and 2, and the same class
# elsewhere; meson suite 'reliability'):
#   1. no file a run writes (checkpoint, loss curve, metrics log, lock,
#      attention picture) is a file it reads: the base a LoRA resume loads
#      (recorded or --base), the default --data, the base sample loads;
#   2. an adapter whose base is itself, two adapters naming each other, a
#      base overwritten by its adapter: every command refuses in one line
#      naming the files (was a stack overflow, SIGSEGV, exit 139).
#   Nothing here may change a base.
#   test_finetune_files.sh CHARLM
set -uo pipefail
charlm=$1
. "$(dirname "$0")/shell_lib.sh" finetune_files
zoo_data
T=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4)
L=(--data c.txt --lora-rank 2 --threads 1 --eval-every 4)
"$charlm" train --data c.txt "${T[@]}" --steps 4 --out b.st >/dev/null 2>b.log || fail "base: $(tail -1 b.log)"
"$charlm" train --init-from b.st "${L[@]}" --steps 4 --out a.st >/dev/null 2>a.log ||
  fail "adapter: $(tail -1 a.log)"
cp b.st b.orig
cp a.st a.orig

# ---- 1. the base a LoRA resume loads is never written
refused "--resume an adapter --out its base" "base of --resume '.*b.st' is the same file" \
  "$charlm" train --resume a.st --steps 8 --out b.st --force
intact "--resume an adapter --out its base" b.st b.orig
cp b.st moved.st
cp moved.st moved.orig
refused "--resume --base B --out B" "base '.*moved.st' is the same file" \
  "$charlm" train --resume a.st --base moved.st --steps 8 --out moved.st --force
intact "--resume --base B --out B" moved.st moved.orig
cp b.st o.loss.png
cp b.st o.orig
refused "--resume an adapter whose base is the loss curve" "its loss curve" \
  "$charlm" train --resume a.st --base o.loss.png --steps 8 --out o.safetensors
intact "--resume an adapter whose base is the loss curve" o.loss.png o.orig
"$charlm" train --resume a.st --steps 8 --out a2.st >/dev/null 2>r.log &&
  echo "ok: --resume an adapter into another file trains" || fail "resume into a2.st: $(tail -1 r.log)"
intact "--resume into another file" b.st b.orig
# sample --attention over the base it loads
cp b.st pb.png
cp b.st pb.orig
"$charlm" train --init-from pb.png "${L[@]}" --steps 4 --out pa.st >/dev/null 2>pa.log ||
  fail "adapter of pb.png: $(tail -1 pa.log)"
refused "sample --attention over the adapter's base" "pb.png" \
  "$charlm" sample --ckpt pa.st --attention pb.png --force --length 5
intact "sample --attention over the adapter's base" pb.png pb.orig
cp b.st m.png
refused "sample --attention over --base" "m.png" \
  "$charlm" sample --ckpt a.st --base m.png --attention m.png --force --length 5
intact "sample --attention over --base" m.png b.orig
# the default --data (charlm's data/moby_dick.txt) is a file read too
mkdir -p data && cp c.txt data/moby_dick.txt && cp c.txt moby.orig
refused "--out the default --data" "moby_dick.txt" \
  "$charlm" train "${T[@]}" --steps 4 --out data/moby_dick.txt --force
intact "--out the default --data" data/moby_dick.txt moby.orig

# ---- 2. a base that is an adapter: one line, never a signal
cp a.st self.st && mv a.st b.st # mv x.st b.st after a LoRA fine-tune of b.st
refused "sample: an adapter whose base is itself" "b.st.*itself\|itself.*b.st" \
  "$charlm" sample --ckpt b.st --length 5
refused "eval: an adapter whose base is itself" "b.st.*itself\|itself.*b.st" \
  "$charlm" eval --ckpt b.st --data c.txt
refused "train --resume: an adapter whose base is itself" "b.st.*itself\|itself.*b.st" \
  "$charlm" train --resume b.st --steps 8
refused "sample --base: an adapter whose base is itself" "b.st.*itself\|itself.*b.st" \
  "$charlm" sample --ckpt self.st --base b.st --length 5
refused "sample: the base overwritten by its adapter" "b.st.*itself\|itself.*b.st" \
  "$charlm" sample --ckpt self.st --length 5
cp b.orig b.st
# two adapters naming each other: x.st (base b.st) and y.st (base b2.st),
# then x.st moved onto b2.st and y.st onto b.st
cp b.st b2.st
"$charlm" train --init-from b2.st "${L[@]}" --steps 4 --out y.st >/dev/null 2>y.log ||
  fail "adapter of b2.st: $(tail -1 y.log)"
mv a.orig b2.st && mv y.st b.st
refused "sample: two adapters naming each other" "b.st.*b2.st\|b2.st.*b.st" \
  "$charlm" sample --ckpt b.st --length 5
refused "eval: two adapters naming each other" "b.st.*b2.st\|b2.st.*b.st" \
  "$charlm" eval --ckpt b2.st --data c.txt
refused "train --resume: two adapters naming each other" "b.st.*b2.st\|b2.st.*b.st" \
  "$charlm" train --resume b2.st --steps 8 --out z.st
[ -e z.st ] && fail "a refused resume wrote z.st"
finish
