#!/usr/bin/env bash
# scripts/nanogpt_import.py as a nanoGPT user runs it (its numbers:
# torch_nanogpt, whose cases this test makes again with nanogpt.py):
#   1. a character-level ckpt.pt and meta.pkl become a charlm checkpoint
#      that `charlm sample` reads (greedy, cached and recomputed alike,
#      only the vocabulary's characters), `charlm eval` scores and `charlm
#      train --init-from` fine-tunes
#   2. refusals, one line on stderr, exit 1, OUT not written: an existing
#      OUT (kept as it was; --force overwrites it), a missing file, a
#      meta.pkl without itos or with unsorted characters, a GPT-2 sized
#      vocab_size, a .pt that is not nanoGPT's, a state dict of another
#      shape, a file torch.load cannot read; no arguments or an unknown
#      flag: exit 2, one line
# Exit 77 (skipped) when /usr/bin/python3 has no torch or numpy.
#   test_nanogpt_import.sh CHARLM
set -uo pipefail
charlm=$1
src=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/shell_lib.sh" nanogpt_import
py=/usr/bin/python3
imp=$src/scripts/nanogpt_import.py
"$py" -c 'import torch, numpy' 2>/dev/null || { echo "no torch or numpy: skipped"; exit 77; }
"$py" "$src/tests/interop/nanogpt.py" . >gen.out 2>gen.err || fail "nanogpt.py: $(tail -1 gen.err)"

# ---- 1.
rm -f g.st
"$py" "$imp" gpt.ckpt.pt gpt.meta.pkl g.st >imp.out 2>imp.err &&
  grep -q "g.st: 36 tensors, 2 layers, d 32, 4 heads, 29 characters, block 16" imp.out &&
  [ "$(cfg_key g.st pos_enc) $(cfg_key g.st emb_scale) $(cfg_key g.st act)" = "learned none gelu_erf" ] &&
  echo "ok: imported: $(cat imp.out)" || fail "import: $(cat imp.out imp.err)"
chars=$(st_py g.st <<'PY'
import json
print(json.loads(load(sys.argv[1])[1]['vocab']), end='')
PY
)
"$charlm" sample --ckpt g.st --prompt "abc" --length 40 --temperature 0 >c.out 2>c.err &&
  "$charlm" sample --ckpt g.st --prompt "abc" --length 40 --temperature 0 --no-cache >n.out 2>/dev/null &&
  cmp -s c.out n.out && [ "$(wc -m <c.out)" -ge 40 ] &&
  [ -z "$(tr -d "$chars" <c.out)" ] &&
  echo "ok: charlm sample reads it: the vocabulary's characters, cached as recomputed" ||
  fail "sample: $(cat c.err) $(head -c 80 c.out)"
# a text of the vocabulary's characters: 3 KB of its lower-case words
"$py" -c 'import random; r = random.Random(1); print(" ".join("".join(r.choice("abcdefghijklmnopqrstuvw") for _ in range(r.randint(1, 8))) + r.choice([".", ",", "!", "?", ""]) for _ in range(600)))' >t.txt
"$charlm" eval --ckpt g.st --data t.txt >e.out 2>e.err && json_ok "charlm eval" e.out ||
  fail "eval: $(tail -1 e.err)"
"$charlm" train --init-from g.st --data t.txt --steps 4 --T 16 --batch-size 2 --threads 1 \
  --out ft.st >ft.out 2>ft.err &&
  [ "$(cfg_key ft.st pos_enc) $(cfg_key ft.st layers)" = "learned 2" ] &&
  echo "ok: charlm train --init-from fine-tunes it" || fail "--init-from: $(tail -1 ft.err)"

# ---- 2.
cp g.st keep.st
expect "an existing OUT" 1 "g.st exists; pass --force to overwrite it" \
  "$py" "$imp" gpt_nb.ckpt.pt gpt_nb.meta.pkl g.st
intact "an existing OUT" g.st keep.st
"$py" "$imp" gpt_nb.ckpt.pt gpt_nb.meta.pkl g.st --force >/dev/null 2>&1 &&
  [ "$(cfg_key g.st bias)" = False ] && echo "ok: --force overwrites it" || fail "--force"
refused_quietly "a missing meta.pkl" "nope.pkl: no such file" x.st "$py" "$imp" gpt.ckpt.pt nope.pkl x.st
"$py" -c 'import pickle; pickle.dump({"stoi": {}}, open("noitos.pkl", "wb"))'
refused_quietly "meta.pkl without itos" "no 'itos' dictionary" x.st \
  "$py" "$imp" gpt.ckpt.pt noitos.pkl x.st
"$py" -c 'import pickle; c = sorted(set("\n !,.?abcdefghijklmnopqrstuvw")); c[3], c[4] = c[4], c[3]; pickle.dump({"itos": dict(enumerate(c))}, open("unsorted.pkl", "wb"))'
refused_quietly "unsorted characters" "not in increasing order" x.st \
  "$py" "$imp" gpt.ckpt.pt unsorted.pkl x.st
"$py" -c '
import torch
c = torch.load("gpt.ckpt.pt")
c["model_args"]["vocab_size"] = 50304
torch.save(c, "bpe.pt")
torch.save({"weights": {}}, "other.pt")
c = torch.load("gpt.ckpt.pt")
del c["model"]["transformer.ln_f.bias"]
torch.save(c, "short.pt")'
refused_quietly "a GPT-2 BPE vocab_size" "vocab_size is 50304 but META has 29 characters" x.st \
  "$py" "$imp" bpe.pt gpt.meta.pkl x.st
refused_quietly "a .pt that is not nanoGPT's" "no 'model' and 'model_args'" x.st \
  "$py" "$imp" other.pt gpt.meta.pkl x.st
refused_quietly "a state dict of another shape" "missing ln_f.bias" x.st \
  "$py" "$imp" short.pt gpt.meta.pkl x.st
expect "no arguments" 2 "nanogpt_import: the following arguments are required: ckpt, meta, out" "$py" "$imp"
expect "an unknown flag" 2 "unrecognized arguments: --bogus" "$py" "$imp" a b c --bogus
head -c 100 gpt.ckpt.pt >cut.pt
refused_quietly "a truncated file" "cut.pt: not readable by torch.load" x.st \
  "$py" "$imp" cut.pt gpt.meta.pkl x.st
finish
