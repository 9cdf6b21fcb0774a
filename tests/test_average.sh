#!/usr/bin/env bash
# Checkpoint averaging (issue 38; meson suite 'models'): `charlm average`
# and `seq2seq average` (models/train/average.h).
#   1. the mean of known weights: 3 charlm checkpoints (seeds 1-3) averaged
#      equal, tensor by tensor, the mean of their values rounded once to
#      float32; the metadata keeps the first's config and tokenizer and
#      names the files; "params" counts the values; no optimizer state;
#      sample, eval and train --init-from read it; --resume refuses it in
#      one line
#   2. bf16-stored checkpoints stay bf16, each value the mean rounded once
#      (a value just above a bf16 tie, which rounding through float32 would
#      get wrong; one just below a tie, which float32 rounds onto it; one on
#      a tie)
#   3. seq2seq: the mean of 2 checkpoints translates and evaluates
#   4. refusals, one line each, exit 2 (command line) or 1, nothing written:
#      fewer than 2 inputs, no --out, another model's checkpoint, another
#      architecture (width, activation, layers), another tokenizer (a char
#      vocabulary, a BPE model of the same length, a char and a BPE model
#      of as many ids), other tensors, a LoRA adapter, --out naming an
#      input (also through a hard or symbolic link), standard output
#      appended to an input, an existing --out without --force, an --out
#      whose lock another run holds; a BPE average keeps the first's BPE
#      model
#   5. train --keep-last N (both programs): exactly the last N evaluation
#      checkpoints beside --out (full training checkpoints), continued by
#      --resume (also when the file its last save dropped was left by a
#      kill: it is the run's own, removed); a resume into another --out
#      leaves the first run's files;
#      a file of that name the run did not write is refused (kept with
#      --force), and the run never writes over a file it reads
#   6. scripts/recipe_run.sh (2 seeds of a small seq2seq: 8 JSON lines, the
#      last 5 checkpoints kept and averaged) and scripts/recipe_table.py's
#      mean of the 2 seeds
#   test_average.sh CHARLM SEQ2SEQ CKPT_WRITER
set -uo pipefail
charlm=$1
seq2seq=$2
tool=$3
root=$(cd "$(dirname "$0")/.." && pwd) # scripts/recipe_run.sh (section 6)
. "$(dirname "$0")/shell_lib.sh" average

# safetensors files read and written (shell_lib.sh st_py's load and save)
st() {
  st_py "$@" <<'EOF'
def values(dt, raw):  # as Python floats (exact)
    if dt == 'F32':
        return list(struct.unpack('<%df' % (len(raw) // 4), raw))
    assert dt == 'BF16', dt
    h = struct.unpack('<%dH' % (len(raw) // 2), raw)
    return [struct.unpack('<f', struct.pack('<I', x << 16))[0] for x in h]
def to_f32(x):  # the double x rounded once to float32 (nearest even)
    return struct.unpack('<f', struct.pack('<f', x))[0]
def to_bf16(x):  # the double x rounded once to bfloat16 (nearest even)
    from fractions import Fraction
    import math
    if x == 0:
        return 0.0
    e = math.frexp(abs(x))[1] - 1           # 2^e <= |x| < 2^(e+1)
    ulp = Fraction(2) ** (max(e, -126) - 7)  # 8 significant bits
    return float(round(Fraction(x) / ulp) * ulp)
params = lambda t: {k: v for k, v in t.items() if not k.startswith('optim.') and k != 'tokenizer.spm'}
cmd = sys.argv[1]
if cmd == 'mean':  # mean OUT IN...: every parameter of OUT is the mean of the INs, rounded once
    out, _ = load(sys.argv[2])
    ins = [params(load(p)[0]) for p in sys.argv[3:]]
    assert set(params(out)) == set(ins[0]), 'another tensor set'
    n, bad = 0, []
    for k, (dt, shape, raw) in params(out).items():
        assert dt == ins[0][k][0], '%s: %s, not %s' % (k, dt, ins[0][k][0])
        got = values(dt, raw)
        src = [values(*t[k][::2]) for t in ins]
        for i, g in enumerate(got):
            s = 0.0
            for v in src:
                s += v[i]
            want = (to_f32 if dt == 'F32' else to_bf16)(s / len(src))
            n += 1
            if g != want:
                bad.append('%s[%d] = %r, not %r' % (k, i, g, want))
    if bad:
        sys.exit('%d of %d values differ: %s' % (len(bad), n, '; '.join(bad[:3])))
    print('%d values of %d tensors' % (n, len(params(out))))
elif cmd == 'bf16':  # bf16 IN OUT [X]: IN's parameters stored as bf16 (truncated), element 0 of tok_emb X
    t, meta = load(sys.argv[2])
    for k, (dt, shape, raw) in list(t.items()):
        if k in params(t):
            h = struct.unpack('<%dI' % (len(raw) // 4), raw)
            h = [x >> 16 for x in h]
            if k == 'tok_emb.weight' and len(sys.argv) > 4:
                h[0] = struct.unpack('<I', struct.pack('<f', float(sys.argv[4])))[0] >> 16
            t[k] = ('BF16', shape, struct.pack('<%dH' % len(h), *h))
        elif k.startswith('optim.'):
            del t[k]
    save(sys.argv[3], t, meta)
elif cmd == 'f16':  # f16 IN OUT: IN's parameters stored as float16
    t, meta = load(sys.argv[2])
    for k, (dt, shape, raw) in list(t.items()):
        if k in params(t):
            v = struct.unpack('<%df' % (len(raw) // 4), raw)
            t[k] = ('F16', shape, struct.pack('<%de' % len(v), *v))
        elif k.startswith('optim.'):
            del t[k]
    save(sys.argv[3], t, meta)
elif cmd == 'dropped':  # dropped IN: the steps IN's training state names as dropped by its save
    print(json.loads(load(sys.argv[2])[1]['train']).get('kept_dropped'))
elif cmd == 'set':  # set IN OUT NAME I X: element I of F32 tensor NAME set to X
    t, meta = load(sys.argv[2])
    dt, shape, raw = t[sys.argv[4]]
    v = list(struct.unpack('<%df' % (len(raw) // 4), raw))
    v[int(sys.argv[5])] = float(sys.argv[6])
    t[sys.argv[4]] = (dt, shape, struct.pack('<%df' % len(v), *v))
    save(sys.argv[3], t, meta)
elif cmd == 'value':  # value FILE NAME I: element I of tensor NAME
    t, _ = load(sys.argv[2])
    print(repr(values(t[sys.argv[3]][0], t[sys.argv[3]][2])[int(sys.argv[4])]))
elif cmd == 'dtype':
    print(load(sys.argv[2])[0][sys.argv[3]][0])
elif cmd == 'raw':  # raw FILE NAME: a tensor's length in bytes and their SHA-256, or 'none'
    import hashlib
    t = load(sys.argv[2])[0].get(sys.argv[3])
    print('%d %s' % (len(t[2]), hashlib.sha256(t[2]).hexdigest()) if t else 'none')
elif cmd == 'optim':  # the number of optimizer tensors
    print(sum(k.startswith('optim.') for k in load(sys.argv[2])[0]))
elif cmd == 'meta':  # meta FILE KEY: a metadata value
    print(load(sys.argv[2])[1].get(sys.argv[3], ''))
elif cmd == 'averaged':  # the paths and steps the "averaged" metadata names
    a = json.loads(load(sys.argv[2])[1]['averaged'])
    print(' '.join('%s@%d' % (f['path'], f['step']) for f in a['files']))
EOF
}

zoo_data
TINY=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4)
S2S=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
  --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 4)
for s in 1 2 3; do
  "$charlm" train --data c.txt "${TINY[@]}" --steps $((2 + s)) --seed $s --out a$s.st >/dev/null 2>a.log ||
    fail "charlm seed $s: $(tail -1 a.log)"
done

# ---------------------------------------------------------------- 1. charlm
"$charlm" average --out avg.st a1.st a2.st a3.st >avg.json 2>avg.log || fail "average: $(tail -1 avg.log)"
json_ok "average: JSON line" avg.json
grep -q '"averaged": 3' avg.json || fail "average: $(tail -1 avg.json)"
m=$(st mean avg.st a1.st a2.st a3.st) && echo "ok: charlm: the mean of 3 checkpoints ($m)" ||
  fail "charlm: not the mean: $m"
grep -q "\"params\": ${m%% *}}" avg.json && echo "ok: charlm: \"params\" counts the values averaged" ||
  fail "charlm: \"params\" is not ${m%% *}: $(cat avg.json)"
[ "$(st meta avg.st config)" = "$(st meta a1.st config)" ] && [ "$(st meta avg.st vocab)" = "$(st meta a1.st vocab)" ] &&
  [ "$(st meta avg.st step)" = 3 ] && echo "ok: charlm: the first's config, vocabulary and step" ||
  fail "charlm: config/vocab/step not the first's"
[ "$(st averaged avg.st)" = "$PWD/a1.st@3 $PWD/a2.st@4 $PWD/a3.st@5" ] &&
  echo "ok: charlm: \"averaged\" names the files: $(st averaged avg.st)" ||
  fail "charlm: averaged metadata: $(st averaged avg.st)"
[ "$(st optim avg.st)" = 0 ] && echo "ok: charlm: no optimizer state" || fail "charlm: optimizer state in the average"
"$charlm" sample --ckpt avg.st --length 20 --seed 1 >sample.txt 2>sample.log && [ -s sample.txt ] &&
  echo "ok: charlm: sample reads the average" || fail "sample: $(tail -1 sample.log)"
"$charlm" eval --ckpt avg.st >eval.json 2>eval.log || fail "eval: $(tail -1 eval.log)"
json_ok "charlm: eval of the average" eval.json
"$charlm" train --init-from avg.st --data c.txt --threads 1 --steps 2 --out ft.st >ft.json 2>ft.log ||
  fail "--init-from the average: $(tail -1 ft.log)"
json_ok "charlm: train --init-from the average" ft.json
"$charlm" average --help | grep -q 'train --init-from starts a new run' &&
  ! "$seq2seq" average --help | grep -q -- '--init-from' &&
  echo "ok: average --help names --init-from for charlm only (seq2seq train has none)" ||
  fail "average --help: a new run from the weights named for the wrong model"
cp avg.st avg.orig
refused "charlm: --resume of an average" "is an average of checkpoints: weights only, no optimizer state" \
  "$charlm" train --resume avg.st --steps 9
refused "charlm: --resume of an average, into another --out" "cannot continue it" \
  "$charlm" train --resume avg.st --steps 9 --out r.st
[ ! -e r.st ] || fail "--resume of an average wrote r.st"
intact "charlm: the refused resume" avg.st avg.orig

# ---------------------------------------------------------------- 2. bf16
# element 0 of tok_emb: 1, 1, 2^-7, 2^-30 (each exact in bf16); the mean
# 0.5 + 2^-9 + 2^-32 is just above a tie of bf16: once rounded it is
# 0.50390625, rounded through float32 (where it is the tie) 0.5
st bf16 a1.st b1.st 1 && st bf16 a2.st b2.st 1 && st bf16 a3.st b3.st 0.0078125 &&
  st bf16 a1.st b4.st 9.313225746154785e-10 || fail "bf16 inputs"
"$charlm" average --out bavg.st b1.st b2.st b3.st b4.st >/dev/null 2>bavg.log || fail "bf16 average: $(tail -1 bavg.log)"
[ "$(st dtype bavg.st tok_emb.weight)" = BF16 ] && echo "ok: bf16: stays bf16" || fail "bf16: stored as $(st dtype bavg.st tok_emb.weight)"
m=$(st mean bavg.st b1.st b2.st b3.st b4.st) && echo "ok: bf16: the mean rounded once ($m)" || fail "bf16: $m"
[ "$(st value bavg.st tok_emb.weight 0)" = 0.50390625 ] && echo "ok: bf16: rounded once above a tie" ||
  fail "bf16: element 0 is $(st value bavg.st tok_emb.weight 0), not 0.50390625"
"$charlm" sample --ckpt bavg.st --length 10 >/dev/null 2>bs.log && echo "ok: bf16: sample reads it" ||
  fail "bf16 sample: $(tail -1 bs.log)"
# round to odd, then to bf16, at the ties: a mean just below a tie that
# float32 rounds up onto it (1 + 2^-8 - 2^-30, of 1, 1, 2 + 2^-6 and -2^-28)
# stays below it: 1; a mean on the tie itself (1 + 2^-8, of 1 and 1 + 2^-7)
# goes to the even neighbour: 1
st bf16 a1.st rt1.st 1 && st bf16 a2.st rt2.st 1 && st bf16 a3.st rt3.st 2.015625 &&
  st bf16 a1.st rt4.st -3.725290298461914e-09 && st bf16 a2.st rt5.st 1.0078125 || fail "bf16 inputs at ties"
"$charlm" average --out rtb.st rt1.st rt2.st rt3.st rt4.st >/dev/null 2>rt.log &&
  "$charlm" average --out rtt.st rt1.st rt5.st >/dev/null 2>rt.log || fail "bf16 averages at ties: $(tail -1 rt.log)"
[ "$(st value rtb.st tok_emb.weight 0)" = 1.0 ] && [ "$(st value rtt.st tok_emb.weight 0)" = 1.0 ] &&
  st mean rtb.st rt1.st rt2.st rt3.st rt4.st >/dev/null && st mean rtt.st rt1.st rt5.st >/dev/null &&
  echo "ok: bf16: just below a tie and on a tie, rounded once" ||
  fail "bf16 at ties: $(st value rtb.st tok_emb.weight 0) and $(st value rtt.st tok_emb.weight 0), not 1.0"
# the first file's dtype must hold the mean: float16 first, a mean of
# 1.5e5 (over float16's 65504) refused, nothing written; float32 first, kept
st f16 a1.st h1.st && st set a2.st big.st tok_emb.weight 0 3e5 || fail "f16 inputs"
refused "f16: a mean float16 cannot hold" \
  "the mean of tensor 'tok_emb.weight' at element 0 (.*) overflows F16, the dtype of 'h1.st'" \
  "$charlm" average --out havg.st h1.st big.st
[ ! -e havg.st ] || fail "f16: the refused average wrote havg.st"
"$charlm" average --out havg.st big.st h1.st >/dev/null 2>havg.log &&
  [ "$(st dtype havg.st tok_emb.weight)" = F32 ] && echo "ok: f16: averaged in float32 when it is first" ||
  fail "f16 after f32: $(tail -1 havg.log)"

# ---------------------------------------------------------------- 3. seq2seq
for s in 1 2; do
  "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 4 --seed $s --out s$s.st >/dev/null 2>s.log ||
    fail "seq2seq seed $s: $(tail -1 s.log)"
done
"$seq2seq" average --out savg.st s1.st s2.st >savg.json 2>savg.log || fail "seq2seq average: $(tail -1 savg.log)"
json_ok "seq2seq: average JSON line" savg.json
m=$(st mean savg.st s1.st s2.st) && echo "ok: seq2seq: the mean of 2 checkpoints ($m)" || fail "seq2seq: $m"
"$seq2seq" translate --ckpt savg.st "the cat 3 sat" >tr.txt 2>tr.log && [ "$(wc -l <tr.txt)" = 1 ] &&
  echo "ok: seq2seq: translate reads the average: $(cat tr.txt)" || fail "translate: $(tail -1 tr.log)"
"$seq2seq" eval --ckpt savg.st --test-limit 2 >se.json 2>se.log || fail "seq2seq eval: $(tail -1 se.log)"
json_ok "seq2seq: eval of the average" se.json
refused "seq2seq: --resume of an average" "start a new run from its weights with --init-from" \
  "$seq2seq" train --resume savg.st --steps 9

# ---------------------------------------------------------------- 4. refusals
# (each: nothing written)
refused_avg() {
  local name=$1 want=$2 pat=$3
  shift 3
  rm -f o.st
  if [ "$want" = 1 ]; then refused "$name" "$pat" "$@"; else expect "$name" "$want" "$pat" "$@"; fi
  [ "$(grep -c . err.txt)" = 1 ] || fail "$name: not one line: $(cat err.txt)"
  [ ! -e o.st ] && [ ! -e o.st.cgrad-lock ] || fail "$name: o.st written"
}
refused_avg "one checkpoint" 2 "at least 2 checkpoints (got 1" "$charlm" average --out o.st a1.st
refused_avg "no --out" 2 "average needs --out" "$charlm" average a1.st a2.st
refused_avg "a seq2seq checkpoint to charlm" 1 "'s1.st' is not a charlm checkpoint (its model is 'seq2seq')" \
  "$charlm" average --out o.st a1.st s1.st
refused_avg "a charlm checkpoint to seq2seq" 1 "'a1.st' is not a seq2seq checkpoint" \
  "$seq2seq" average --out o.st s1.st a1.st
"$charlm" train --data c.txt "${TINY[@]}" --d 32 --steps 2 --out w.st >/dev/null 2>&1 || fail "w.st"
refused_avg "another width" 1 "'a1.st' and 'w.st' are not one architecture: d is 16 in one and 32 in the other" \
  "$charlm" average --out o.st a1.st a2.st w.st
"$charlm" train --data c.txt "${TINY[@]}" --act relu --steps 2 --out r.st >/dev/null 2>&1 || fail "r.st"
refused_avg "another activation" 1 "not one architecture: act is gelu in one and relu in the other" \
  "$charlm" average --out o.st a1.st r.st
"$seq2seq" train --data p.tsv "${S2S[@]}" --enc-layers 2 --steps 2 --out s3.st >/dev/null 2>&1 || fail "s3.st"
refused_avg "seq2seq: another depth" 1 "not one architecture: enc_layers is 1 in one and 2 in the other" \
  "$seq2seq" average --out o.st s1.st s3.st
tr w z <c.txt >z.txt # the same number of characters, one of them another
"$charlm" train --data z.txt "${TINY[@]}" --steps 2 --out z.st >/dev/null 2>&1 || fail "z.st"
refused_avg "another vocabulary" 1 "'a1.st' and 'z.st' have different tokenizers (their vocabularies differ)" \
  "$charlm" average --out o.st a1.st z.st
# BPE: the tokenizer's tensor (U8, no parameter) is the first's, copied; a
# BPE model of z.txt has the same length and other bytes: another tokenizer
bpe() { # bpe DATA SEED OUT [VOCAB]
  "$charlm" train --data "$1" "${TINY[@]}" --tokenizer bpe --vocab-size "${4:-280}" --steps 2 --seed "$2" \
    --out "$3" >/dev/null 2>p.log
}
if ! bpe c.txt 1 p1.st && grep -q unavailable p.log; then
  echo "skip: bpe averages: $(tail -1 p.log)"
else
  [ -e p1.st ] && bpe c.txt 2 p2.st && bpe z.txt 3 pz.st || fail "bpe checkpoints: $(tail -1 p.log)"
  "$charlm" average --out pavg.st p1.st p2.st >/dev/null 2>pavg.log || fail "bpe average: $(tail -1 pavg.log)"
  m=$(st mean pavg.st p1.st p2.st) && [ "$(st raw pavg.st tokenizer.spm)" = "$(st raw p1.st tokenizer.spm)" ] &&
    [ "$(st meta pavg.st tokenizer)" = bpe ] && echo "ok: bpe: the mean ($m), the first's BPE model" ||
    fail "bpe: $m; tokenizer.spm $(st raw pavg.st tokenizer.spm), not $(st raw p1.st tokenizer.spm)"
  "$charlm" sample --ckpt pavg.st --length 10 --seed 1 >/dev/null 2>ps.log && echo "ok: bpe: sample reads the average" ||
    fail "bpe sample: $(tail -1 ps.log)"
  read -r l1 h1 <<<"$(st raw p1.st tokenizer.spm)"
  read -r lz hz <<<"$(st raw pz.st tokenizer.spm)"
  [ "$lz" = "$l1" ] && [ "$hz" != "$h1" ] || fail "pz.st's BPE model is not another of p1.st's length ($lz, $l1)"
  refused_avg "another BPE model of the same length" 1 \
    "'p1.st' and 'pz.st' have different tokenizers (their BPE models differ)" "$charlm" average --out o.st p1.st pz.st
  # a char checkpoint (of c.txt and 260 more characters) and a BPE one of
  # as many ids: one architecture, one char tokenizer and one bpe
  python3 -c 'import sys; sys.stdout.write(open("c.txt").read() + "".join(map(chr, range(256, 516))))' >u.txt
  "$charlm" train --data u.txt "${TINY[@]}" --steps 2 --out uc.st >/dev/null 2>p.log &&
    v=$(st meta uc.st config | python3 -c 'import json, sys; print(json.load(sys.stdin)["vocab"])') &&
    bpe c.txt 1 "ub.st" "$v" || fail "a char and a bpe checkpoint of one size: $(tail -1 p.log)"
  refused_avg "a char and a bpe checkpoint" 1 "'uc.st' and 'ub.st' have different tokenizers (one char, one bpe)" \
    "$charlm" average --out o.st uc.st ub.st
  refused_avg "a bpe and a char checkpoint" 1 "'ub.st' and 'uc.st' have different tokenizers (one char, one bpe)" \
    "$charlm" average --out o.st ub.st uc.st
fi
cp a2.st x.st && "$tool" addtensor x.st extra.weight >/dev/null || fail "addtensor"
refused_avg "another tensor set" 1 "tensor 'extra.weight' is not a parameter" "$charlm" average --out o.st a1.st x.st
"$charlm" train --init-from a1.st --data c.txt --threads 1 --steps 2 --lora-rank 2 --out l.st >/dev/null 2>&1 ||
  fail "l.st"
refused_avg "a LoRA adapter" 1 "'l.st' is a LoRA adapter checkpoint" "$charlm" average --out o.st a1.st l.st
cp a1.st a1.orig
refused_avg "--out naming an input" 1 "--out 'a1.st' is the same file as the checkpoint 'a1.st'" \
  "$charlm" average --out a1.st a1.st a2.st
ln a1.st hard.st && ln -s a1.st soft.st
refused_avg "--out a hard link of an input" 1 "is the same file as the checkpoint" \
  "$charlm" average --out hard.st a1.st a2.st
refused_avg "--out a symbolic link to an input" 1 "is the same file as the checkpoint" \
  "$charlm" average --out soft.st a2.st a1.st
refused_avg "--out the input's path spelled otherwise" 1 "is the same file as the checkpoint" \
  "$charlm" average --out ./a1.st a2.st "$PWD/a1.st"
# standard output is a file written: never an input (`>> a1.st` damaged it)
refused_avg "standard output appended to an input" 1 \
  "standard output is the checkpoint 'a1.st', which this command reads" \
  sh -c 'exec "$@" >>a1.st' sh "$charlm" average --out o.st a2.st a1.st
cp s1.st s1.orig
refused_avg "seq2seq: standard output appended to an input" 1 \
  "standard output is the checkpoint 's1.st', which this command reads" \
  sh -c 'exec "$@" >>s1.st' sh "$seq2seq" average --out o.st s1.st s2.st
intact "seq2seq: standard output appended to an input" s1.st s1.orig
intact "the refusals" a1.st a1.orig
cp avg.st avg.orig
refused_avg "an existing --out" 1 "'avg.st' exists; pass --force to overwrite it" \
  "$charlm" average --out avg.st a1.st a2.st
intact "an existing --out" avg.st avg.orig
"$charlm" average --out avg.st --force a1.st a2.st >/dev/null 2>f.log && st mean avg.st a1.st a2.st >/dev/null &&
  echo "ok: --force replaces --out with the new mean" || fail "--force: $(tail -1 f.log)"
# the output is written under its lock: held by another run, refused
if command -v flock >/dev/null; then
  cp avg.st avg.orig
  refused "--out locked by another run" "'avg.st' is being written by another run" \
    flock avg.st.cgrad-lock "$charlm" average --out avg.st --force a1.st a2.st a3.st
  intact "--out locked by another run" avg.st avg.orig
fi
# ---------------------------------------------------------------- 5. --keep-last
kept() { (shopt -s nullglob; f=("$1".step*.safetensors); echo "${f[*]}"); }
"$charlm" train --data c.txt "${TINY[@]}" --steps 20 --keep-last 3 --out k.st >k.json 2>k.log ||
  fail "--keep-last: $(tail -1 k.log)"
json_ok "--keep-last: JSON line" k.json
[ "$(kept k.st)" = "k.st.step00000012.safetensors k.st.step00000016.safetensors k.st.step00000020.safetensors" ] &&
  echo "ok: --keep-last 3: $(kept k.st)" || fail "--keep-last 3 left: $(kept k.st)"
"$tool" same k.st k.st.step00000020.safetensors >/dev/null && [ "$(st optim k.st.step00000016.safetensors)" -gt 0 ] &&
  echo "ok: --keep-last: the last one is the final checkpoint, each a training checkpoint" ||
  fail "--keep-last: the kept checkpoints are not the run's"
"$charlm" average --out kavg.st k.st.step*.safetensors >/dev/null 2>ka.log &&
  st mean kavg.st k.st.step00000012.safetensors k.st.step00000016.safetensors k.st.step00000020.safetensors >/dev/null &&
  echo "ok: --keep-last: the kept checkpoints average" || fail "average of the kept: $(tail -1 ka.log)"
# a run killed between its last save and the removal of the kept checkpoint
# that save dropped: k.st names step 8 as dropped, and its file is still
# there. --resume counts it as the run's own (not "exists; pass --force")
# and removes it at its first save.
[ "$(st dropped k.st)" = "[8]" ] || fail "k.st names $(st dropped k.st) as dropped, not [8]"
cp k.st.step00000012.safetensors k.st.step00000008.safetensors
"$charlm" train --resume k.st --steps 32 >/dev/null 2>k2.log ||
  fail "--keep-last resume with the dropped step 8 left on disk: $(tail -1 k2.log)"
[ "$(kept k.st)" = "k.st.step00000024.safetensors k.st.step00000028.safetensors k.st.step00000032.safetensors" ] &&
  echo "ok: --keep-last: --resume continues: $(kept k.st)" || fail "--keep-last resume left: $(kept k.st)"
"$charlm" train --resume k.st --steps 44 --keep-last 1 --out j.st >/dev/null 2>k3.log || fail "resume --out: $(tail -1 k3.log)"
[ "$(kept j.st)" = "j.st.step00000044.safetensors" ] && [ "$(kept k.st | wc -w)" = 3 ] &&
  echo "ok: --keep-last: a resume into another --out keeps its own, leaves the first run's" ||
  fail "resume into another --out: $(kept j.st) / $(kept k.st)"
"$charlm" train --data c.txt "${TINY[@]}" --steps 8 --out n.st >/dev/null 2>&1 && [ -z "$(kept n.st)" ] &&
  echo "ok: no --keep-last: no kept checkpoints" || fail "without --keep-last: $(kept n.st)"
# a run stopped (--stop-at) at an evaluation saves that step twice, the
# evaluation's save and the stop's: kept once, so that a resume stopped at
# the next evaluation still keeps both
"$charlm" train --data c.txt "${TINY[@]}" --steps 20 --keep-last 2 --stop-at 4 --out s.st >/dev/null 2>s.log &&
  "$charlm" train --resume s.st --stop-at 8 >/dev/null 2>>s.log &&
  [ "$(kept s.st)" = "s.st.step00000004.safetensors s.st.step00000008.safetensors" ] &&
  echo "ok: --keep-last: a step saved twice (--stop-at at an evaluation) is kept once" ||
  fail "--keep-last with --stop-at at evaluations: $(tail -1 s.log) $(kept s.st)"
echo mine >m.st.step00000008.safetensors
echo mine >m.st.step00000006.safetensors
refused_quietly "--keep-last: a file it did not write" \
  "'m.st.step00000008.safetensors' exists: an evaluation checkpoint this run did not write" \
  m.st "$charlm" train --data c.txt "${TINY[@]}" --steps 8 --keep-last 2 --out m.st
[ "$(cat m.st.step00000008.safetensors)" = mine ] || fail "--keep-last: the file was changed"
refused_quietly "--keep-last: --init-from a name it would write" "--init-from 'm.st.step00000008.safetensors' is the evaluation checkpoint" \
  m.st "$charlm" train --init-from m.st.step00000008.safetensors --data c.txt --steps 8 --keep-last 2 --out m.st --force
"$charlm" train --data c.txt "${TINY[@]}" --steps 12 --keep-last 1 --out m.st --force >/dev/null 2>m.log &&
  [ "$(cat m.st.step00000006.safetensors)" = mine ] && [ ! -e m.st.step00000008.safetensors ] &&
  [ -e m.st.step00000012.safetensors ] && echo "ok: --keep-last --force: overwrites its names, keeps other files" ||
  fail "--keep-last --force: $(tail -1 m.log) $(kept m.st)"
"$seq2seq" train --data p.tsv "${S2S[@]}" --steps 12 --keep-last 2 --out q.st >/dev/null 2>q.log ||
  fail "seq2seq --keep-last: $(tail -1 q.log)"
[ "$(kept q.st)" = "q.st.step00000008.safetensors q.st.step00000012.safetensors" ] &&
  echo "ok: seq2seq --keep-last 2: $(kept q.st)" || fail "seq2seq --keep-last left: $(kept q.st)"

# ------------------------------------- 6. scripts/recipe_run.sh and its table
RR=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
  --valid-size 20 --test-size 20 --test-limit 2)
for s in 1 2; do
  SEQ2SEQ=$seq2seq DATA=p.tsv EVAL_EVERY=2 "$root/scripts/recipe_run.sh" rr r_s$s $s 10 "${RR[@]}" \
    >rr.out 2>&1 || fail "recipe_run.sh seed $s: $(tail -1 rr.out)"
done
jsonl_ok "recipe_run.sh: results.jsonl" rr/results.jsonl
[ "$(wc -l <rr/results.jsonl)" = 8 ] && [ -e rr/r_s2.avg.safetensors ] &&
  [ "$(ls rr/r_s1.step*.safetensors | wc -l)" = 5 ] &&
  echo "ok: recipe_run.sh: 2 seeds, last and averaged, valid and test" ||
  fail "recipe_run.sh: $(wc -l <rr/results.jsonl) lines, $(ls rr)"
python3 "$root/scripts/recipe_table.py" rr >rr.md 2>rr.err &&
  grep -q '^| `--tokenizer char .*` | last | 1, 2 | [0-9.]* (' rr.md &&
  grep -q '| average of last 5 | 1, 2 |' rr.md && echo "ok: recipe_table.py: the mean of 2 seeds" ||
  fail "recipe_table.py: $(cat rr.err rr.md)"
finish
