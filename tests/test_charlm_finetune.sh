#!/usr/bin/env bash
# Fine-tuning in the zoo (issue 22; meson suite 'models'): `charlm train
# --init-from BASE` on a new text, in full or with LoRA adapters.
#   1. full: --stop-at 0 saves BASE's weights unchanged with a fresh
#      optimizer at step 0; a run has its own history and records BASE
#      (size, checksum, step); sample works; resume is bit-identical
#   2. LoRA: the checkpoint holds only lora_A/lora_B tensors (PEFT's names
#      and their optimizer state), is small, names BASE; sample and eval
#      load BASE + adapters (eval gives the run's final val_loss; cached and
#      uncached decoding agree), differ from BASE alone; resume (with
#      dropout in the adapters) is bit-identical; a moved BASE is found
#      with --base, a missing, different or other-shaped one is refused
#      merge writes base + adapters as one full checkpoint with their eval;
#      a SwiGLU model's default targets take fc3 too
#   3. bad combinations: one line, exit 2 (command line) or 1 (a file)
#   4. issue 34, findings 1 and 2: no run writes the base an adapter reads
#      (--resume of a LoRA run with --out BASE, --force or not), and an
#      adapter whose base is itself, or two that name each other, are one
#      line and exit 1 for sample, eval and train --resume (was SIGSEGV)
#   BASE is never modified.
#   test_charlm_finetune.sh CHARLM CKPT_WRITER
set -uo pipefail
charlm=$1
tool=$2
. "$(dirname "$0")/shell_lib.sh" charlm_finetune

# safetensors files read with the standard library only
st() {
  st_py "$@" <<'EOF'
cmd, a = sys.argv[1], sys.argv[2]
t, meta = load(a)
if cmd == 'names':  # the tensor names, one a line
    print('\n'.join(sorted(t)))
elif cmd == 'params-same':  # the parameters (not optim.*) of a and b are the same bytes
    u, _ = load(sys.argv[3])
    pa = {k: v for k, v in t.items() if not k.startswith('optim.')}
    pb = {k: v for k, v in u.items() if not k.startswith('optim.')}
    sys.exit(0 if pa == pb else 1)
elif cmd == 'optim-zero':  # every optimizer tensor is zero (a fresh optimizer after 0 steps)
    sys.exit(0 if all(not any(v[2]) for k, v in t.items() if k.startswith('optim.')) else 1)
elif cmd == 'meta':  # a field of a JSON metadata value: meta FILE KEY FIELD
    print(json.loads(meta[sys.argv[3]])[sys.argv[4]])
elif cmd == 'history-steps':  # the evaluation steps of the training state's history
    print(' '.join(str(int(s)) for s in json.loads(meta['train'])['history']['step']))
EOF
}

# two texts of the same 21 characters: the base's and the new one
words=(the a whale sea ship captain ahab white call me ishmael some years ago never mind how long)
for ((i = 0; i < 300; i++)); do
  printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}" "${words[$(((i * 5 + 3) % ${#words[@]}))]}"
  ((i % 6 == 5)) && printf '\n'
done >a.txt
for ((i = 0; i < 300; i++)); do
  printf '%s ' "${words[$(((i * 3 + 1) % ${#words[@]}))]}" "${words[$(((i * 11 + i / 5) % ${#words[@]}))]}"
  ((i % 4 == 3)) && printf '\n'
done >b.txt
# fp32 on every CPU (train's auto is bf16 on some): "the adapters change
# the sample" holds for these numbers, not for every rounding of them
run=(--threads 1 --eval-every 10 --precision fp32)
"$charlm" train --data a.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --seed 3 \
  --lr 1e-2 --steps 60 "${run[@]}" --out base.st >/dev/null 2>base.log || fail "base: $(tail -1 base.log)"
cp base.st base.orig
base_size=$(stat -c %s base.st)
ft=(--init-from base.st --data b.txt "${run[@]}")

# ---------------------------------------------------------------- 1. full
"$charlm" train "${ft[@]}" --steps 20 --stop-at 0 --out full0.st >full0.json 2>full0.log ||
  fail "full --stop-at 0: $(tail -1 full0.log)"
st params-same full0.st base.st && echo "ok: full: step 0 holds the base's weights, bit for bit" ||
  fail "full: --stop-at 0 does not hold the base's weights"
st optim-zero full0.st && [ "$("$tool" getmeta full0.st step)" = 0 ] &&
  echo "ok: full: a fresh optimizer at step 0" || fail "full: not a fresh optimizer at step 0"
"$charlm" train "${ft[@]}" --steps 20 --out full.st >full.json 2>full.log || fail "full: $(tail -1 full.log)"
json_ok "full: JSON line" full.json
grep -q '"init_from": "[^"]*base.st"' full.json || fail "full: no init_from in $(tail -1 full.json)"
[ "$(st history-steps full.st)" = "0 10 20" ] && echo "ok: full: a new history (0 10 20)" ||
  fail "full: history $(st history-steps full.st)"
[ "$(st meta full.st init_from size)" = "$base_size" ] &&
  [ "$(st meta full.st init_from step)" = 60 ] &&
  [ "$(st meta full.st init_from path)" = "$PWD/base.st" ] &&
  echo "ok: full: init_from records the base: $("$tool" getmeta full.st init_from)" ||
  fail "full: init_from $("$tool" getmeta full.st init_from 2>&1)"
st params-same full.st base.st && fail "full: 20 steps changed nothing"
grep -q '"vocab"' <<<"$("$tool" getmeta full.st vocab)" 2>/dev/null ||
  "$tool" getmeta full.st vocab >/dev/null || fail "full: no vocabulary in the checkpoint"
"$charlm" sample --ckpt full.st --length 40 --seed 1 >full.txt 2>fs.log &&
  [ "$(wc -c <full.txt)" -gt 40 ] && echo "ok: full: sample" || fail "full: sample: $(tail -1 fs.log)"
# resume: 10 + 10 == 20
"$charlm" train "${ft[@]}" --steps 20 --stop-at 10 --out fullr.st >/dev/null 2>fr.log &&
  "$charlm" train --resume fullr.st --threads 1 >fullr.json 2>fr2.log ||
  fail "full resume: $(tail -1 fr.log) $(tail -1 fr2.log)"
"$tool" same full.st fullr.st && echo "ok: full: 10 steps + resume to 20 == 20 steps (bit-identical)" ||
  fail "full: resumed run differs"
[ "$(st meta fullr.st init_from xxh3)" = "$(st meta full.st init_from xxh3)" ] ||
  fail "full: the resumed checkpoint lost init_from"
intact "full" base.st base.orig

# ---------------------------------------------------------------- 2. LoRA
"$charlm" train "${ft[@]}" --lora-rank 2 --lr 1e-2 --steps 20 --out lora.st >lora.json 2>lora.log ||
  fail "lora: $(tail -1 lora.log)"
json_ok "lora: JSON line" lora.json
names=$(st names lora.st)
others=$(grep -v 'lora_[AB]' <<<"$names")
[ -z "$others" ] && grep -qx 'base_model.model.blocks.0.attn.q_proj.lora_A.weight' <<<"$names" &&
  grep -qx 'base_model.model.blocks.0.ff.fc2.lora_B.weight' <<<"$names" &&
  grep -q '^optim\.blocks\.0\.attn\.v_proj\.lora_B\.weight\.' <<<"$names" &&
  echo "ok: lora: $(wc -l <<<"$names") tensors, every one lora_A/lora_B (PEFT's names + optimizer state)" ||
  fail "lora: tensors other than the adapters: $others"
[ "$(grep -c '^base_model' <<<"$names")" = 12 ] || fail "lora: not 6 adapters: $names"
lora_size=$(stat -c %s lora.st)
[ "$lora_size" -lt $((base_size / 3)) ] && echo "ok: lora: $lora_size bytes against the base's $base_size" ||
  fail "lora: $lora_size bytes is not small against the base's $base_size"
[ "$(st meta lora.st adapter_config r)" = 2 ] && [ "$(st meta lora.st adapter_config lora_alpha)" = 4 ] &&
  [ "$(st meta lora.st init_from size)" = "$base_size" ] &&
  echo "ok: lora: adapter_config $("$tool" getmeta lora.st adapter_config)" ||
  fail "lora: metadata $("$tool" getmeta lora.st adapter_config 2>&1)"
grep -q '"trainable_params": 448' lora.json || fail "lora: trainable_params: $(tail -1 lora.json)"
# the tokenizer is the base's: the adapter checkpoint holds none of its own
! "$tool" getmeta lora.st vocab >/dev/null 2>&1 && ! "$tool" getmeta lora.st tokenizer >/dev/null 2>&1 &&
  echo "ok: lora: no tokenizer of its own" || fail "lora: the adapter checkpoint holds a tokenizer"
"$charlm" sample --ckpt lora.st --length 60 --seed 1 >lora.txt 2>ls.log || fail "lora: sample: $(tail -1 ls.log)"
"$charlm" sample --ckpt lora.st --length 60 --seed 1 --no-cache >lora_nc.txt 2>/dev/null || fail "lora: --no-cache"
"$charlm" sample --ckpt base.st --length 60 --seed 1 >base.txt 2>/dev/null || fail "lora: base sample"
[ -s lora.txt ] && cmp -s lora.txt lora_nc.txt && echo "ok: lora: cached and uncached sampling agree" ||
  fail "lora: cached and uncached sampling differ"
cmp -s lora.txt base.txt && fail "lora: sampling with the adapters equals the base alone" ||
  echo "ok: lora: the adapters change the sample"
"$charlm" eval --ckpt lora.st >eval.json 2>eval.log || fail "lora: eval: $(tail -1 eval.log)"
v_train=$(sed -n 's/.*"val_loss": \([0-9.]*\),.*/\1/p' lora.json)
v_eval=$(sed -n 's/.*"val_loss": \([0-9.]*\),.*/\1/p' eval.json)
[ -n "$v_eval" ] && [ "$v_eval" = "$v_train" ] && echo "ok: lora: eval gives the run's val_loss $v_eval" ||
  fail "lora: eval val_loss '$v_eval' != the run's '$v_train'"
# merge (PEFT's merge_and_unload): a full checkpoint whose eval is the adapters'
"$charlm" merge --out merged.st lora.st >merge.json 2>merge.log &&
  "$charlm" eval --ckpt merged.st >meval.json 2>/dev/null ||
  fail "lora: merge: $(tail -1 merge.log)"
v_merged=$(sed -n 's/.*"val_loss": \([0-9.]*\),.*/\1/p' meval.json)
[ -z "$(st names merged.st | grep 'lora\|optim')" ] && grep -q '"adapters": 6,' merge.json &&
  python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 1e-4)' "$v_merged" "$v_eval" &&
  echo "ok: lora: merge: no adapter or optimizer tensor, eval val_loss $v_merged (the adapters': $v_eval)" ||
  fail "lora: merge: val_loss '$v_merged' against '$v_eval', $(cat merge.json)"
# every merged weight is W + (alpha / r) B A (W: the base's average, if it keeps one)
merged_ok=$(st_py merged.st lora.st base.st <<'PY'
import struct
def f32(v):
    assert v[0] == 'F32', v[0]
    return struct.unpack('<%df' % (len(v[2]) // 4), v[2])
t, _ = load(sys.argv[1])
a, am = load(sys.argv[2])
b, _ = load(sys.argv[3])
cfg = json.loads(am['adapter_config'])
s = cfg['lora_alpha'] / cfg['r']
worst, moved, n = 0.0, 0.0, 0
for k in a:
    if not k.endswith('.lora_A.weight'):
        continue
    layer = k[len('base_model.model.'):-len('.lora_A.weight')]
    A, B = a[k], a[k.replace('lora_A', 'lora_B')]
    r, cin = A[1]
    out = B[1][0]
    Av, Bv = f32(A), f32(B)
    W = f32(b.get('ema.' + layer + '.weight', b[layer + '.weight']))
    M = f32(t[layer + '.weight'])
    for o in range(out):
        for i in range(cin):
            d = s * sum(Bv[o * r + j] * Av[j * cin + i] for j in range(r))
            worst = max(worst, abs(M[o * cin + i] - (W[o * cin + i] + d)))
            moved = max(moved, abs(d))
    n += 1
print(n, worst < 1e-6 * max(1.0, moved) + 1e-6, moved > 1e-4)
PY
)
[ "$merged_ok" = "6 True True" ] && echo "ok: lora: merge: each of the 6 weights is W + (alpha/r) B A" ||
  fail "lora: merge: the merged weights: $merged_ok"
# a record the adapter lacks is one the merged checkpoint lacks, not a
# refusal: an adapter without "train" (optional in any checkpoint) merges
st_meta lora.st "del m['train']; t = None" notrain.st || fail "could not write notrain.st"
"$charlm" merge --out notrain_m.st notrain.st >/dev/null 2>nt.log &&
  [ "$(st_py notrain_m.st <<<"m = load(sys.argv[1])[1]; print('train' in m, 'config' in m)")" = "False True" ] &&
  echo "ok: lora: merge: an adapter without \"train\" merges, without it" ||
  fail "lora: merge of an adapter without \"train\": $(tail -1 nt.log)"
# resume, with dropout in the adapters and a model dropout other than the
# base's (the base is loaded with the adapter's: round thirty-one): 10 + 10 == 20
lo=(--lora-rank 2 --lora-alpha 8 --lora-dropout 0.2 --dropout 0.3 --lr 1e-2 --steps 20)
"$charlm" train "${ft[@]}" "${lo[@]}" --out lorad.st >/dev/null 2>ld.log &&
  "$charlm" train "${ft[@]}" "${lo[@]}" --stop-at 10 --out lorar.st >/dev/null 2>lr.log &&
  "$charlm" train --resume lorar.st --threads 1 >/dev/null 2>lr2.log ||
  fail "lora resume: $(tail -1 ld.log) $(tail -1 lr.log) $(tail -1 lr2.log)"
"$tool" same lorad.st lorar.st && echo "ok: lora: 10 steps + resume to 20 == 20 steps (bit-identical)" ||
  fail "lora: resumed run differs"
[ "$(st meta lorar.st adapter_config lora_dropout)" = 0.2 ] || fail "lora: dropout not kept"
intact "lora" base.st base.orig
# the base moved: found with --base, refused without
mkdir -p moved && cp base.st moved/b.st && mv base.st base.away
refused "lora: base missing" "needs its base: .*--base" "$charlm" sample --ckpt lora.st --length 5
"$charlm" sample --ckpt lora.st --base moved/b.st --length 60 --seed 1 >moved.txt 2>mv.log &&
  cmp -s moved.txt lora.txt && echo "ok: lora: --base finds a moved base" || fail "lora: --base: $(tail -1 mv.log)"
"$charlm" eval --ckpt lora.st --base moved/b.st >/dev/null 2>&1 || fail "lora: eval --base"
mv base.away base.st
refused "lora: another base of the same shape" "is not the base checkpoint of adapter" \
  "$charlm" sample --ckpt lora.st --base full.st --length 5
"$charlm" train --data a.txt --d 32 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --steps 2 \
  "${run[@]}" --out wide.st >/dev/null 2>&1 || fail "wide base"
refused "lora: a base of another shape" "its config against the adapter's: d is 32 in one and 16 in the other" "$charlm" sample --ckpt lora.st --base wide.st --length 5
# the same width, another depth (round thirty)
"$charlm" train --data a.txt --d 16 --H 2 --layers 2 --d-ff 32 --T 16 --batch-size 4 --steps 2 \
  "${run[@]}" --out deep.st >/dev/null 2>&1 || fail "deep base"
refused "lora: a base of other layers" "layers is 2 in one and 1 in the other" \
  "$charlm" sample --ckpt lora.st --base deep.st --length 5
refused "lora: an adapter as the base" "is itself an adapter checkpoint; a base must hold every weight" \
  "$charlm" sample --ckpt lora.st --base lorad.st --length 5
# issue 34, finding 9: --base with a full checkpoint is refused, never ignored
refused "full: sample --base" "is a full checkpoint" "$charlm" sample --ckpt full.st --base /nonexistent --length 5
refused "full: eval --base" "is a full checkpoint" "$charlm" eval --ckpt full.st --base wide.st
refused "full: train --resume --base" "is a full checkpoint" "$charlm" train --resume full.st --base wide.st --steps 40
# damaged adapter checkpoints
cp lora.st bad.st && "$tool" setmeta bad.st adapter_config '{"r": 2}' >/dev/null
refused "lora: a damaged adapter_config" "adapter config lacks r" "$charlm" sample --ckpt bad.st --length 5
# an adapter whose "init_from" is gone: refused as such (round thirty)
st_meta lora.st "del m['init_from']" bad.st || fail "could not write bad.st"
refused "lora: no init_from" "adapter checkpoint 'bad.st' does not record its base" \
  "$charlm" sample --ckpt bad.st --length 5
cp lora.st bad.st && "$tool" addtensor bad.st optim.tok_emb.weight.exp_avg >/dev/null
refused "lora: a tensor no adapter has" "is not an adapter parameter" "$charlm" sample --ckpt bad.st --length 5
cp lora.st bad.st && "$tool" poison bad.st base_model.model.blocks.0.attn.q_proj.lora_B.weight >/dev/null
refused "lora: a NaN in an adapter" "lora_B.weight' holds nan" "$charlm" sample --ckpt bad.st --length 5
cp lora.st bad.st && "$tool" setmeta bad.st init_from '{"path": 1}' >/dev/null
refused "lora: a damaged init_from" '"init_from": malformed' "$charlm" eval --ckpt bad.st
# its step a whole number in [0, 1e15]
for step in -1 1.5 1e16; do
  cp lora.st bad.st &&
    "$tool" setmeta bad.st init_from "$("$tool" getmeta lora.st init_from | sed "s/\"step\":[0-9]*/\"step\":$step/")" \
      >/dev/null
  refused "lora: init_from's step $step" '"init_from": malformed' "$charlm" eval --ckpt bad.st
done
intact "lora: loading" base.st base.orig

# a gated feed-forward (SwiGLU): the default targets take its fc3 (up) too,
# as LLaMA recipes adapt gate, up and down; a model without fc3 has none
"$charlm" train --data a.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --act swiglu \
  --steps 2 "${run[@]}" --out glu.st >/dev/null 2>glu.log || fail "swiglu base: $(tail -1 glu.log)"
"$charlm" train --init-from glu.st --data b.txt "${run[@]}" --lora-rank 2 --steps 2 --out glul.st \
  >/dev/null 2>glul.log || fail "swiglu lora: $(tail -1 glul.log)"
glu_names=$(st names glul.st)
[ "$(grep -c '^base_model.*lora_A' <<<"$glu_names")" = 7 ] &&
  grep -qx 'base_model.model.blocks.0.ff.fc3.lora_A.weight' <<<"$glu_names" &&
  [ "$(st meta glul.st adapter_config target_modules)" = "['q_proj', 'k_proj', 'v_proj', 'o_proj', 'fc1', 'fc2', 'fc3']" ] &&
  echo "ok: lora: a SwiGLU model's default adapters include fc3 (7 a block)" ||
  fail "lora: swiglu targets: $(grep lora_A <<<"$glu_names" | tr '\n' ' ')"

# ---------------------------------------------------------------- 3. refused
expect "--init-from with --resume" 2 "--init-from" "$charlm" train --init-from base.st --resume full.st
expect "--lora-rank without --init-from" 2 "--lora-rank needs --init-from" \
  "$charlm" train --data b.txt --lora-rank 2 --steps 2 --out x.st
expect "--lora-alpha without --lora-rank" 2 "--lora-alpha needs --lora-rank" \
  "$charlm" train "${ft[@]}" --lora-alpha 4 --steps 2 --out x.st
expect "--lora-rank 0" 2 "--lora-rank" "$charlm" train "${ft[@]}" --lora-rank 0 --steps 2 --out x.st
expect "--lora-rank -3" 2 "--lora-rank" "$charlm" train "${ft[@]}" --lora-rank -3 --steps 2 --out x.st
expect "--base with --init-from" 2 "--base" "$charlm" train "${ft[@]}" --base base.st --steps 2 --out x.st
expect "--lora-rank 17 > d" 1 "--lora-rank 17 is larger than" \
  "$charlm" train "${ft[@]}" --lora-rank 17 --steps 2 --out x.st
# the smaller side of each target: fc1 is 32 x 16, so 20 > 16 (and < 32)
expect "--lora-rank 20 > fc1's inputs" 1 "(a 32 x 16 layer: at most 16)" \
  "$charlm" train "${ft[@]}" --lora-rank 20 --lora-targets fc1 --steps 2 --out x.st
expect "--lora-targets bogus" 1 "'bogus' names no Linear of the CharLM (its Linears: q_proj, k_proj, v_proj, o_proj, fc1, fc2)$" \
  "$charlm" train "${ft[@]}" --lora-rank 2 --lora-targets q_proj,bogus --steps 2 --out x.st
# the largest rank a layer takes (its smaller side: 16 of q_proj's 16 x 16),
# and a target named by its whole path
train_ok "--lora-rank 16 = q_proj's side" '"trainable_params": 512,' \
  "$charlm" train "${ft[@]}" --lora-rank 16 --lora-targets q_proj --steps 1 --out x.st
rm -f x.st*
train_ok "--lora-targets by path" '"trainable_params": 64,' \
  "$charlm" train "${ft[@]}" --lora-rank 2 --lora-targets blocks.0.attn.q_proj --steps 1 --out x.st
rm -f x.st*
expect "--d against the base" 1 "contradict" "$charlm" train "${ft[@]}" --d 32 --steps 2 --out x.st
expect "--layers, --T against the base" 1 "--layers 2, --T 32 contradict" \
  "$charlm" train "${ft[@]}" --layers 2 --T 32 --steps 2 --out x.st
expect "--preset against the base" 1 "--preset tiny contradicts" \
  "$charlm" train "${ft[@]}" --preset tiny --steps 2 --out x.st
expect "--tokenizer against the base" 1 "--tokenizer bpe contradicts" \
  "$charlm" train "${ft[@]}" --tokenizer bpe --steps 2 --out x.st
expect "--vocab-size against the base" 1 "--vocab-size 300 contradicts" \
  "$charlm" train "${ft[@]}" --vocab-size 300 --steps 2 --out x.st
"$charlm" train "${ft[@]}" --d 16 --layers 1 --tokenizer char --steps 2 --out same.st >/dev/null 2>same.log &&
  echo "ok: flags that agree with the base are accepted" || fail "agreeing flags: $(tail -1 same.log)"
cp base.st s2s.st
"$tool" setmeta s2s.st model seq2seq >/dev/null
expect "a seq2seq base" 1 "is not a charlm checkpoint" "$charlm" train --init-from s2s.st --data b.txt --steps 2 --out x.st
head -c 3000 base.st >damaged.st
expect "a damaged base" 1 "damaged.st" "$charlm" train --init-from damaged.st --data b.txt --steps 2 --out x.st
expect "a missing base" 1 "nothere.st" "$charlm" train --init-from nothere.st --data b.txt --steps 2 --out x.st
expect "an adapter as --init-from" 1 "is a LoRA adapter checkpoint" \
  "$charlm" train --init-from lora.st --data b.txt --steps 2 --out x.st
expect "--out is the base" 1 "base.st" "$charlm" train "${ft[@]}" --steps 2 --out base.st --force
expect "--resume of a LoRA run with --lora-rank" 2 "drop --lora-rank" \
  "$charlm" train --resume lorar.st --lora-rank 4 --steps 30
printf 'the whale? QUEEQUEG!\n%.0s' {1..200} >c.txt
expect "new characters" 1 "outside the checkpoint's vocabulary" \
  "$charlm" train --init-from base.st --data c.txt --steps 2 --out x.st
# one character outside is as many as one too many
{ cat b.txt; printf '\302\247\n'; } >c.txt
expect "one new character" 1 "has 1 character outside the checkpoint's vocabulary (first U+00A7)" \
  "$charlm" train --init-from base.st --data c.txt --steps 2 --out x.st
[ -e x.st ] && fail "a refused run wrote x.st"
intact "refusals" base.st base.orig

# ---------------------------------------------------------------- 4. issue 34
# finding 1: the base a LoRA resume reads is never a file the run writes
expect "resume of a LoRA run --out its base" 1 "the base of --resume '.*base.st' is the same file as 'base.st', the checkpoint" \
  "$charlm" train --resume lorar.st --steps 30 --out base.st --force
intact "resume --out base" base.st base.orig
ln -sf base.st base.link
expect "resume of a LoRA run --out a link to its base" 1 "the base of --resume .* is the same file as 'base.link'" \
  "$charlm" train --resume lorar.st --steps 30 --out base.link --force
intact "resume --out a link to the base" base.st base.orig
cp base.st moved/b.st
expect "resume of a LoRA run --base B --out B" 1 "^charlm: error: --base 'moved/b.st' is the same file as 'moved/./b.st'" \
  "$charlm" train --resume lorar.st --base moved/b.st --steps 30 --out moved/./b.st --force
cmp -s moved/b.st base.orig && echo "ok: --base B --out B: 'moved/b.st' intact" || fail "--base B --out B: moved/b.st changed"
# finding 2: an adapter that is its own base (renamed over it), two that name
# each other, a base overwritten by a copy of its adapter: one line, exit 1
mkdir -p cyc && cp base.st cyc/b.st
"$charlm" train --init-from cyc/b.st --data b.txt "${run[@]}" --lora-rank 2 --steps 10 --stop-at 5 \
  --out cyc/x.st >/dev/null 2>cyc.log || fail "cyc: $(tail -1 cyc.log)"
cp cyc/x.st cyc/x.orig
mv cyc/x.st cyc/b.st # the adapter renamed over its base: it names itself
expect "an adapter renamed over its base: sample" 1 "adapter checkpoint 'cyc/b.st' names itself as its base" \
  "$charlm" sample --ckpt cyc/b.st --length 5
expect "an adapter renamed over its base: eval" 1 "names itself as its base" "$charlm" eval --ckpt cyc/b.st
expect "an adapter renamed over its base: train --resume" 1 "names itself as its base" \
  "$charlm" train --resume cyc/b.st --steps 10
expect "an adapter renamed over its base: --init-from" 1 "names itself as its base" \
  "$charlm" train --init-from cyc/b.st --data b.txt --steps 2 --out cyc/y.st
# --base naming the adapter itself: the flag is wrong, not the file (the
# adapter names its real base, which the message gives)
expect "an adapter as its own --base: sample" 1 "^charlm: error: --base 'lora.st' is the adapter checkpoint 'lora.st' itself; pass --base with the checkpoint it was trained on ('.*/base.st'" \
  "$charlm" sample --ckpt lora.st --base lora.st --length 5
expect "an adapter as its own --base: eval" 1 "^charlm: error: --base './lora.st' is the adapter checkpoint 'lora.st' itself" \
  "$charlm" eval --ckpt lora.st --base ./lora.st
expect "an adapter as its own --base: train --resume" 1 "^charlm: error: --base 'lorar.st' is the adapter checkpoint 'lorar.st' itself" \
  "$charlm" train --resume lorar.st --base lorar.st --steps 30 --out lorax.st
cp cyc/x.orig cyc/x.st # now cyc/x.st's base is an adapter whose base is itself
expect "a base overwritten by a copy of its adapter: sample" 1 "'.*cyc/b.st', the base of adapter checkpoint 'cyc/x.st', is itself an adapter checkpoint that names itself" \
  "$charlm" sample --ckpt cyc/x.st --length 5
expect "a base overwritten by a copy of its adapter: train --resume" 1 "is itself an adapter" \
  "$charlm" train --resume cyc/x.st --steps 10
expect "--base naming such a file" 1 "is itself an adapter" \
  "$charlm" sample --ckpt lora.st --base cyc/b.st --length 5
# two adapters naming each other (by path: a hard link is the same file)
cp lora.st cyc/p.st && cp lora.st cyc/q.st
"$tool" setmeta cyc/p.st init_from "{\"path\": \"$PWD/cyc/q.st\", \"size\": \"1\", \"xxh3\": \"0000000000000001\", \"step\": 1}" >/dev/null
"$tool" setmeta cyc/q.st init_from "{\"path\": \"$PWD/cyc/p.st\", \"size\": \"1\", \"xxh3\": \"0000000000000001\", \"step\": 1}" >/dev/null
expect "two adapters naming each other: sample" 1 "'.*cyc/q.st', the base of adapter checkpoint 'cyc/p.st', is itself an adapter checkpoint whose base is 'cyc/p.st'" \
  "$charlm" sample --ckpt cyc/p.st --length 5
expect "two adapters naming each other: eval" 1 "is itself an adapter" "$charlm" eval --ckpt cyc/q.st
ln cyc/p.st cyc/p.hard
"$tool" setmeta cyc/q.st init_from "{\"path\": \"$PWD/cyc/p.hard\", \"size\": \"1\", \"xxh3\": \"0000000000000001\", \"step\": 1}" >/dev/null
expect "two adapters naming each other through a hard link" 1 "whose base is 'cyc/p.st'" \
  "$charlm" sample --ckpt cyc/p.st --length 5
intact "issue 34" base.st base.orig
finish
