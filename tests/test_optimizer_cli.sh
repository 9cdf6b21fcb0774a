#!/usr/bin/env bash
# --optimizer and torch.optim.lr_scheduler's kinds in the zoo (meson suite
# 'models'):
#   1. each --optimizer (adamw, adam, sgd with momentum and nesterov,
#      rmsprop centered with momentum, adagrad, adadelta --rho, adamax
#      --beta2, nadam, radam --adam-eps, asgd --lambd, rprop without the
#      recipe's weight decay) trains charlm 3 steps: a
#      finite loss, and the checkpoint's optimizer is that type with the
#      flags' hyper-parameters; seq2seq takes the flags too (sgd)
#   2. the default (no --optimizer) keeps its steps: Adam at --weight-decay
#      0 (recorded "adam", as ever), AdamW above; --optimizer adamw's steps
#      at 0 are Adam's, bit for bit
#   3. refusals in one line, exit 2: an unknown name, a flag of another
#      optimizer, --nesterov without momentum, --resume with --optimizer,
#      an --lr-schedule missing its parameter or given another's
#   4. --resume continues bit for bit: 4 steps then 2 are the 6 of one run,
#      for rmsprop, the six of torch.optim's others (adadelta ... rprop:
#      their buffers and scalars resumed) and for --lr-schedule multistep
#      and cosine_restarts
#      (warmup, then PyTorch's kind)
#   5. --zero 1's line on one process: the state rank 0 holds is the
#      unsharded state, for every optimizer's buffers (it counted 1 buffer
#      for SGD and 2 for the rest: wrong for plain SGD, RMSprop, Adagrad
#      and amsgrad)
#   test_optimizer_cli.sh CHARLM SEQ2SEQ FIXTURES
set -uo pipefail
charlm=$1
seq2seq=$2
fx=$3
. "$(dirname "$0")/shell_lib.sh" optimizer_cli
cp "$fx"/c.txt "$fx"/p.tsv .
TINY=(--data c.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1
      --eval-every 2 --precision fp32)
S2S=(--data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32
     --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 3
     --precision fp32)

# The checkpoint's optimizer metadata has KEY=VALUE for each argument.
optim_has() {
  local name=$1 file=$2
  shift 2
  if st_py "$file" "$@" <<'EOF2'; then
m = load(sys.argv[1])[1]
for kv in sys.argv[2:]:
    k, v = kv.split('=', 1)
    got = m.get('optim.' + k)
    try:
        same = float(got) == float(v)
    except (TypeError, ValueError):
        same = got == v
    assert same, '%s is %r, not %s' % (k, got, v)
EOF2
    echo "ok: $name: optim has $*"
  else
    fail "$name: optimizer metadata of $file"
  fi
}
# The last JSON line's train_loss is a finite number.
loss_finite() {
  if python3 -c 'import json, math, sys; j = json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert math.isfinite(j["train_loss"]), j' b.out; then
    echo "ok: $1: finite loss"
  else
    fail "$1: loss not finite: $(tail -1 b.out)"
  fi
}

echo "== 1. each optimizer trains"
declare -A FLAGS=([adamw]="--amsgrad" [adam]="--beta2 0.98" [sgd]="--momentum 0.9 --nesterov"
                  [rmsprop]="--momentum 0.5 --centered --alpha 0.9" [adagrad]=""
                  [adadelta]="--rho 0.8" [adamax]="--beta2 0.99" [nadam]="--beta1 0.8"
                  [radam]="--adam-eps 1e-6" [asgd]="--lambd 0.001" [rprop]="")
declare -A META=([adamw]="amsgrad=true" [adam]="beta2=0.98" [sgd]="momentum=0.9 nesterov=true"
                 [rmsprop]="momentum=0.5 centered=true alpha=0.9" [adagrad]="eps=1e-10"
                 [adadelta]="rho=0.8 eps=1e-6" [adamax]="beta2=0.99"
                 [nadam]="beta1=0.8 momentum_decay=0.004" [radam]="eps=1e-6"
                 [asgd]="lambd=0.001 alpha=0.75 t0=1000000" [rprop]="etaminus=0.5 etaplus=1.2")
for opt in adamw adam sgd rmsprop adagrad adadelta adamax nadam radam asgd rprop; do
  # shellcheck disable=SC2086
  train_ok "charlm --optimizer $opt" '"step": 3' \
    "$charlm" train "${TINY[@]}" --steps 3 --lr 0.01 --optimizer $opt ${FLAGS[$opt]} --out $opt.st
  loss_finite "charlm --optimizer $opt"
  # shellcheck disable=SC2086
  optim_has "charlm --optimizer $opt" $opt.st type=$opt ${META[$opt]}
done
train_ok "seq2seq --optimizer sgd" '"step": 3' \
  "$seq2seq" train "${S2S[@]}" --steps 3 --optimizer sgd --momentum 0.9 --out s.st
loss_finite "seq2seq --optimizer sgd"
optim_has "seq2seq --optimizer sgd" s.st type=sgd momentum=0.9
train_ok "seq2seq --optimizer adadelta" '"step": 3' \
  "$seq2seq" train "${S2S[@]}" --steps 3 --optimizer adadelta --rho 0.85 --out s2.st
loss_finite "seq2seq --optimizer adadelta"
optim_has "seq2seq --optimizer adadelta" s2.st type=adadelta rho=0.85

echo "== 2. the default"
"$charlm" train "${TINY[@]}" --steps 3 --weight-decay 0 --out d0.st >/dev/null 2>&1 ||
  fail "charlm default at weight decay 0"
optim_has "charlm default, --weight-decay 0" d0.st type=adam
optim_has "charlm default" adamw.st type=adamw
"$charlm" train "${TINY[@]}" --steps 3 --weight-decay 0 --optimizer adamw --out w0.st \
  >/dev/null 2>&1 || fail "charlm --optimizer adamw --weight-decay 0"
optim_has "charlm --optimizer adamw at 0" w0.st type=adamw
if st_py d0.st w0.st <<'EOF2'; then
a, b = load(sys.argv[1])[0], load(sys.argv[2])[0]
ks = [k for k in a if not k.startswith('optim.')]
assert ks and all(a[k] == b[k] for k in ks), 'weights differ'
EOF2
  echo "ok: adamw at weight decay 0 steps as adam (the default's bits)"
else
  fail "adamw at weight decay 0 does not step as adam"
fi

echo "== 3. refusals"
# charlm train of 3 steps with these flags: exit 2, the message PATTERN
lm_refused() {
  local name=$1 pat=$2
  shift 2
  expect "$name" 2 "$pat" "$charlm" train "${TINY[@]}" --steps 3 "$@" --out x.st
}
lm_refused "unknown optimizer" "\-\-optimizer: 'lamb' is not one of adamw, adam, sgd, rmsprop, adagrad, adadelta, adamax, nadam, radam, asgd, rprop" \
  --optimizer lamb
lm_refused "--momentum for adamw" "\-\-momentum is sgd's and rmsprop's: not for --optimizer adamw (the default)" \
  --momentum 0.9
lm_refused "--beta1 for sgd" "\-\-beta1 is the adam family's (adam, adamw, adamax, nadam, radam): not for --optimizer sgd" \
  --optimizer sgd --beta1 0.8
lm_refused "--adam-eps for asgd" "\-\-adam-eps is the adam family's .*: not for --optimizer asgd" \
  --optimizer asgd --adam-eps 1e-6
lm_refused "--rho for adam" "\-\-rho is adadelta's: not for --optimizer adam" \
  --optimizer adam --rho 0.5
lm_refused "--lambd for adadelta" "\-\-lambd is asgd's: not for --optimizer adadelta" \
  --optimizer adadelta --lambd 0.01
lm_refused "--amsgrad for nadam" "\-\-amsgrad is adam's and adamw's: not for --optimizer nadam" \
  --optimizer nadam --amsgrad
lm_refused "rprop with --weight-decay" "\-\-weight-decay 0.1: rprop takes none" \
  --optimizer rprop --weight-decay 0.1
lm_refused "--rho past 1" "\-\-rho" --optimizer adadelta --rho 1.5
expect "--amsgrad for rmsprop" 2 "\-\-amsgrad is adam's and adamw's: not for --optimizer rmsprop" \
  "$seq2seq" train "${S2S[@]}" --steps 3 --optimizer rmsprop --amsgrad --out x.st
lm_refused "--centered for sgd" "\-\-centered is rmsprop's: not for --optimizer sgd" \
  --optimizer sgd --centered
lm_refused "--alpha for adagrad" "\-\-alpha is rmsprop's: not for --optimizer adagrad" \
  --optimizer adagrad --alpha 0.9
lm_refused "--nesterov for rmsprop" "\-\-nesterov is sgd's: not for --optimizer rmsprop" \
  --optimizer rmsprop --nesterov
lm_refused "--nesterov without momentum" "\-\-nesterov needs --momentum > 0" \
  --optimizer sgd --nesterov
expect "--resume --optimizer" 2 "drop --optimizer" \
  "$charlm" train --resume sgd.st --steps 6 --optimizer adam
expect "--resume --optimizer (the same)" 2 "drop --optimizer" \
  "$seq2seq" train --resume s.st --steps 6 --optimizer sgd
lm_refused "exponential without --gamma" "\-\-lr-schedule exponential needs --gamma" \
  --lr-schedule exponential
lm_refused "multistep without --milestones" "\-\-lr-schedule multistep needs --milestones" \
  --lr-schedule multistep
lm_refused "cosine_restarts without --t0" "\-\-lr-schedule cosine_restarts needs --t0" \
  --lr-schedule cosine_restarts
lm_refused "--gamma for cosine" "\-\-gamma is exponential's, multistep's and plateau's decay" \
  --gamma 0.5
lm_refused "--power for multistep" "\-\-power is polynomial's" \
  --lr-schedule multistep --milestones 2 --power 2
lm_refused "bad --milestones" "\-\-milestones '3,2': need 1 to 16 steps >= 1, increasing" \
  --lr-schedule multistep --milestones 3,2
lm_refused "--min-lr for exponential" "\-\-min-lr is not read by this --lr-schedule" \
  --lr-schedule exponential --gamma 0.9 --min-lr 1e-4
lm_refused "onecycle with --warmup" "\-\-lr-schedule onecycle warms up by itself" \
  --lr-schedule onecycle --warmup 2
lm_refused "unknown schedule" "\-\-lr-schedule: 'step' is not one of" \
  --lr-schedule step
[ ! -e x.st ] || fail "a refused run wrote x.st"

echo "== 4. --resume: 4 + 2 steps are the 6 of one run"
resumes() {
  local name=$1
  shift
  rm -f r4.st* r6.st*
  "$charlm" train "${TINY[@]}" "$@" --steps 6 --out r6.st >/dev/null 2>r.err ||
    fail "$name: 6 steps: $(tail -c 300 r.err)"
  "$charlm" train "${TINY[@]}" "$@" --steps 4 --out r4.st >/dev/null 2>r.err ||
    fail "$name: 4 steps: $(tail -c 300 r.err)"
  train_ok "$name: resumed" '"step": 6' "$charlm" train --resume r4.st --steps 6
  same_file "$name: resumed = uninterrupted" r4.st r6.st
}
resumes "rmsprop" --optimizer rmsprop --momentum 0.5 --centered --lr 0.01
for opt in "adadelta --rho 0.8 --lr 1" "adamax" "nadam" "radam" "asgd --lambd 0.01" "rprop"; do
  # shellcheck disable=SC2086
  resumes "${opt%% *}" --optimizer $opt
done
resumes "multistep" --lr-schedule multistep --milestones 1,2 --gamma 0.5 --warmup 2
resumes "cosine_restarts" --lr-schedule cosine_restarts --t0 2 --t-mult 2 --warmup 1 --optimizer sgd --momentum 0.9
for k in "exponential --gamma 0.9 --warmup 0" "polynomial --power 2 --warmup 2" onecycle; do
  # shellcheck disable=SC2086
  train_ok "charlm --lr-schedule $k" '"step": 4' "$charlm" train "${TINY[@]}" --steps 4 \
    --lr-schedule $k --out k.st --force
done

echo "== 5. --zero 1 on one process: rank 0's state is the unsharded state"
for o in adamw sgd "sgd --momentum 0.9" "rmsprop --momentum 0.9 --centered" adagrad \
  "adam --amsgrad" adadelta adamax nadam radam asgd rprop; do
  # shellcheck disable=SC2086
  "$charlm" train "${TINY[@]}" --d 64 --d-ff 256 --layers 2 --steps 1 --zero 1 \
    --optimizer $o --out z.st --force >/dev/null 2>z.err || fail "--zero 1 $o: $(tail -c 300 z.err)"
  pair=$(sed -nE 's/.*optimizer state ([0-9.]+) MB on rank 0 \(([0-9.]+) MB unsharded\).*/\1 \2/p' z.err)
  read -r held whole <<<"$pair"
  if [ -n "$pair" ] && [ "$held" = "$whole" ] && [ "$held" != "0.00" -o "${o%% *}" = sgd ]; then
    echo "ok: --zero 1 --optimizer $o: $held MB held, $whole MB unsharded"
  else
    fail "--zero 1 --optimizer $o: '$pair' in: $(grep ZeRO z.err)"
  fi
done
finish
