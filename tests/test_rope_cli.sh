#!/usr/bin/env bash
# --pos-enc rope and --rope-theta N in both programs (the op and the
# attention: test_rope; PyTorch's: torch_rope):
#   1. charlm: the config records pos_enc and rope_theta; sampling with
#      the key/value cache gives the text
#      of recomputing every prefix, greedy and drawn; --stop-at then
#      --resume writes the bytes of the run uninterrupted; --init-from
#      keeps the base's positions, and refuses other ones (exit 1, as
#      its other contradictions)
#   2. seq2seq: recorded; translate's greedy and beam outputs are the same
#      with and without the cache
#   3. refusals, one line, exit 2: an unknown --pos-enc, --rope-theta
#      without rope, --rope-theta 1, --pos-enc with --resume
#   4. --kv-heads N (grouped-query attention; test_gqa): charlm with 1
#      key/value head and rope: recorded, k_proj has d/H rows, cached
#      sampling and resume as above; seq2seq with 2 of 4: cached and beam
#      translations as above; --init-from refuses another count; a count
#      not dividing --H is refused (exit 2)
#   5. --pos-enc learned --emb-scale none (charlm: nanoGPT's wpe, and its
#      embeddings unscaled): both recorded; pos_emb.weight [T, d] in the
#      checkpoint, trained (it differs from the step-0 checkpoint's);
#      cached sampling and resume as above; seq2seq learned (a table a
#      side, fairseq's): enc_pos_emb.weight and dec_pos_emb.weight [max_len,
#      d] in the checkpoint, both trained, the greedy and beam translations
#      the same with and without the cache, resume bit-identical;
#      --emb-scale half refused (exit 2), another scale than the base's by
#      --init-from (exit 1)
#   6. charlm --init gpt2 (nanoGPT's): at step 0 every block's o_proj and
#      fc2 weights are those --init normal draws times 1/sqrt(2 layers)
#      (float32), every other tensor the same; --init xavier and --init
#      with --init-from refused (exit 2)
#   test_rope_cli.sh CHARLM SEQ2SEQ
set -uo pipefail
charlm=$1
seq2seq=$2
. "$(dirname "$0")/shell_lib.sh" rope_cli
zoo_data

# translate_cached CKPT LABEL: greedy and beam 3 translations of src.txt are
# the same with and without the key/value cache, 12 lines each
translate_cached() {
  for b in 1 3; do
    "$seq2seq" translate --ckpt "$1" --beam $b --threads 1 <src.txt >c.out 2>/dev/null &&
      "$seq2seq" translate --ckpt "$1" --beam $b --threads 1 --no-cache <src.txt >n.out 2>/dev/null &&
      cmp -s c.out n.out && [ "$(wc -l <c.out)" = 12 ] &&
      echo "ok: $2 --beam $b: the cached translations are the recomputed ones" ||
      fail "$2 --beam $b: cached and recomputed differ"
  done
}

# learned_tables PROG NAME HALF ARGS...: NAME.st after the whole run,
# NAME0.st at step 0, NAME1.st stopped at step HALF then resumed
learned_tables() {
  local prog=$1 name=$2 half=$3
  shift 3
  "$prog" train "$@" --out "$name.st" >/dev/null 2>"$name.err" || fail "$name: $(tail -1 "$name.err")"
  "$prog" train "$@" --stop-at 0 --out "${name}0.st" >/dev/null 2>&1 || fail "$name: --stop-at 0"
  "$prog" train "$@" --stop-at "$half" --out "${name}1.st" >/dev/null 2>&1 &&
    "$prog" train --resume "${name}1.st" --threads 1 >/dev/null 2>&1 || fail "$name: resume"
}
# tables A B NAME...: each tensor's dtype and shape in A, and whether A's
# differs from B's (trained)
tables() {
  st_py "$@" <<'PY'
a, b = load(sys.argv[1])[0], load(sys.argv[2])[0]
for n in sys.argv[3:]:
    print(a[n][0], a[n][1], a[n][2] != b[n][2], end=' ')
PY
}

# ---- 1.
LM=(--data c.txt --d 16 --H 2 --layers 2 --d-ff 32 --T 32 --batch-size 4 --threads 1 --eval-every 10
  --steps 30 --pos-enc rope --rope-theta 5000)
"$charlm" train "${LM[@]}" --out r.st >r.out 2>r.err || fail "charlm train --pos-enc rope: $(tail -1 r.err)"
[ "$(cfg_key r.st pos_enc) $(cfg_key r.st rope_theta)" = "rope 5000" ] &&
  echo "ok: the config records pos_enc rope and rope_theta 5000" ||
  fail "config: $(cfg_key r.st pos_enc) $(cfg_key r.st rope_theta)"
for s in "--temperature 0" "--seed 4 --top-k 5"; do
  # shellcheck disable=SC2086
  "$charlm" sample --ckpt r.st --length 60 --prompt "the whale" $s >c.txt.out 2>/dev/null &&
    "$charlm" sample --ckpt r.st --length 60 --prompt "the whale" $s --no-cache >n.txt.out 2>/dev/null &&
    cmp -s c.txt.out n.txt.out && [ "$(wc -c <c.txt.out)" -gt 60 ] &&
    echo "ok: sample $s: the cached text is the recomputed one" ||
    fail "sample $s: cached and recomputed differ: $(head -c 80 c.txt.out) / $(head -c 80 n.txt.out)"
done
"$charlm" train "${LM[@]}" --stop-at 10 --out h.st >/dev/null 2>h.err || fail "--stop-at 10: $(tail -1 h.err)"
"$charlm" train --resume h.st --threads 1 >/dev/null 2>h2.err || fail "--resume: $(tail -1 h2.err)"
cmp -s r.st h.st && echo "ok: --stop-at 10 then --resume: the bytes of the uninterrupted run" ||
  fail "--resume with rope differs from the run uninterrupted"
"$charlm" train --data c.txt --init-from r.st --steps 5 --threads 1 --out ft.st >/dev/null 2>ft.err ||
  fail "--init-from: $(tail -1 ft.err)"
[ "$(cfg_key ft.st pos_enc) $(cfg_key ft.st rope_theta)" = "rope 5000" ] &&
  echo "ok: --init-from keeps the base's rotary positions" || fail "--init-from: $(cfg_key ft.st pos_enc)"
expect "--init-from --pos-enc sinusoidal" 1 "--pos-enc sinusoidal contradicts it" \
  "$charlm" train --data c.txt --init-from r.st --pos-enc sinusoidal --out x.st
expect "--init-from --rope-theta 10000" 1 "--rope-theta 10000 contradicts it" \
  "$charlm" train --data c.txt --init-from r.st --rope-theta 10000 --out x.st

# ---- 2.
"$seq2seq" train --data p.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 \
  --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --steps 40 \
  --pos-enc rope --out s.st >/dev/null 2>s.err || fail "seq2seq train --pos-enc rope: $(tail -1 s.err)"
sed -n '1,12p' p.tsv | cut -f1 >src.txt
translate_cached s.st "seq2seq"
[ "$(cfg_key s.st pos_enc) $(cfg_key s.st rope_theta)" = "rope 10000" ] &&
  echo "ok: seq2seq records pos_enc rope, rope_theta 10000" || fail "seq2seq config: $(cfg_key s.st pos_enc)"

# ---- 3.
expect "--pos-enc alibi" 2 "--pos-enc: 'alibi' is not one of sinusoidal, rope" \
  "$charlm" train --data c.txt --pos-enc alibi
expect "--rope-theta without rope" 2 "--rope-theta is rope's: give --pos-enc rope" \
  "$seq2seq" train --data p.tsv --rope-theta 500000
expect "--rope-theta 10000 (the default) without rope" 2 "--rope-theta is rope's" \
  "$charlm" train --data c.txt --rope-theta 10000 --pos-enc sinusoidal
expect "--rope-theta 1" 2 "--rope-theta: 1 is out of range" \
  "$charlm" train --data c.txt --pos-enc rope --rope-theta 1
expect "--resume --pos-enc" 2 "drop --pos-enc" "$charlm" train --resume h.st --pos-enc rope

# ---- 4.
"$charlm" train "${LM[@]}" --kv-heads 1 --out q.st >/dev/null 2>q.err || fail "--kv-heads 1: $(tail -1 q.err)"
rows=$(st_py q.st <<'PY'
t, meta = load(sys.argv[1])
print(t['blocks.0.attn.k_proj.weight'][1][0], t['blocks.0.attn.v_proj.weight'][1][0],
      t['blocks.0.attn.q_proj.weight'][1][0])
PY
)
[ "$(cfg_key q.st kv_heads)" = 1 ] && [ "$rows" = "8 8 16" ] &&
  echo "ok: --kv-heads 1: recorded; k_proj and v_proj have d/H = 8 rows, q_proj 16" ||
  fail "--kv-heads 1: kv_heads $(cfg_key q.st kv_heads), rows $rows"
"$charlm" sample --ckpt q.st --length 60 --prompt "the whale" >c.txt.out 2>/dev/null &&
  "$charlm" sample --ckpt q.st --length 60 --prompt "the whale" --no-cache >n.txt.out 2>/dev/null &&
  cmp -s c.txt.out n.txt.out && echo "ok: --kv-heads 1: the cached sample is the recomputed one" ||
  fail "--kv-heads 1: cached and recomputed samples differ"
"$charlm" train "${LM[@]}" --kv-heads 1 --stop-at 10 --out q2.st >/dev/null 2>&1 &&
  "$charlm" train --resume q2.st --threads 1 >/dev/null 2>&1 && cmp -s q.st q2.st &&
  echo "ok: --kv-heads 1: --resume is bit-identical" || fail "--kv-heads 1: --resume differs"
expect "--init-from --kv-heads 2" 1 "--kv-heads 2 contradicts it" \
  "$charlm" train --data c.txt --init-from q.st --kv-heads 2 --out x.st
expect "--kv-heads 3 of 2" 2 "H=2 is not divisible by kv_heads=3" \
  "$charlm" train --data c.txt --H 2 --d 16 --kv-heads 3
"$seq2seq" train --data p.tsv --tokenizer char --d 16 --H 4 --kv-heads 2 --enc-layers 1 --dec-layers 1 \
  --d-ff 32 --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --steps 40 \
  --out sq.st >/dev/null 2>sq.err || fail "seq2seq --kv-heads 2: $(tail -1 sq.err)"
translate_cached sq.st "seq2seq --kv-heads 2"

# ---- 5.
LE=(--data c.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 32 --batch-size 4 --threads 1 --eval-every 10
  --steps 20 --pos-enc learned --emb-scale none)
learned_tables "$charlm" le 10 "${LE[@]}"
[ "$(cfg_key le.st pos_enc) $(cfg_key le.st emb_scale)" = "learned none" ] &&
  [ "$(tables le.st le0.st pos_emb.weight)" = "F32 [32, 16] True " ] && cmp -s le.st le1.st &&
  echo "ok: --pos-enc learned: pos_emb.weight F32 [32, 16], trained; --resume bit-identical" ||
  fail "--pos-enc learned: $(cfg_key le.st pos_enc), $(tables le.st le0.st pos_emb.weight), resume $(cmp le.st le1.st)"
"$charlm" sample --ckpt le.st --length 40 --prompt "the whale" >c.txt.out 2>/dev/null &&
  "$charlm" sample --ckpt le.st --length 40 --prompt "the whale" --no-cache >n.txt.out 2>/dev/null &&
  cmp -s c.txt.out n.txt.out && echo "ok: --pos-enc learned: the cached sample is the recomputed one" ||
  fail "--pos-enc learned: cached and recomputed samples differ"
SL=(--data p.tsv --tokenizer char --d 16 --H 4 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
  --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --steps 40 --max-len 64 --pos-enc learned)
learned_tables "$seq2seq" sl 20 "${SL[@]}"
pe=$(tables sl.st sl0.st enc_pos_emb.weight dec_pos_emb.weight)
[ "$(cfg_key sl.st pos_enc)" = learned ] && cmp -s sl.st sl1.st &&
  [ "$pe" = "F32 [64, 16] True F32 [64, 16] True " ] &&
  echo "ok: seq2seq --pos-enc learned: enc_pos_emb and dec_pos_emb F32 [64, 16], trained; --resume bit-identical" ||
  fail "seq2seq --pos-enc learned: $(cfg_key sl.st pos_enc), '$pe', resume $(cmp sl.st sl1.st)"
translate_cached sl.st "seq2seq --pos-enc learned"
expect "--emb-scale half" 2 "--emb-scale: 'half' is not one of sqrt_d, none" \
  "$seq2seq" train --data p.tsv --emb-scale half
expect "--init-from --emb-scale sqrt_d" 1 "--emb-scale sqrt_d contradicts it" \
  "$charlm" train --data c.txt --init-from le.st --emb-scale sqrt_d --out x.st

# ---- 6.
G=(--data c.txt --d 16 --H 2 --layers 3 --d-ff 32 --T 16 --batch-size 4 --threads 1 --steps 5 --stop-at 0)
"$charlm" train "${G[@]}" --out gn.st >/dev/null 2>&1 && "$charlm" train "${G[@]}" --init gpt2 --out g2.st \
  >/dev/null 2>&1 || fail "--init gpt2 --stop-at 0"
if st_py gn.st g2.st <<'PY'; then
import array, math
a, b = load(sys.argv[1])[0], load(sys.argv[2])[0]
s = 1.0 / math.sqrt(2.0 * 3)
f32 = lambda x: array.array('f', [x])[0]
scaled = 0
for k in a:
    if not k.startswith('blocks.'):
        assert a[k] == b[k], k
        continue
    x, y = array.array('f', a[k][2]), array.array('f', b[k][2])
    if k.endswith('o_proj.weight') or k.endswith('fc2.weight'):
        assert all(f32(u * f32(s)) == v for u, v in zip(x, y)), k
        scaled += 1
    else:
        assert x == y, k
assert scaled == 6, scaled
PY
  echo "ok: --init gpt2: o_proj and fc2 of the 3 blocks scaled by 1/sqrt(6), the rest --init normal's"
else
  fail "--init gpt2: not --init normal's weights with the residual projections scaled"
fi
expect "--init xavier" 2 "--init: 'xavier' is not one of normal, gpt2" "$charlm" train --data c.txt --init xavier
expect "--init-from --init gpt2" 2 "drop --init" "$charlm" train --data c.txt --init-from le.st --init gpt2
finish
