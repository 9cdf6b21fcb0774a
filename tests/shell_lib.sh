# Shared by the shell tests (sourced: . "$(dirname "$0")/shell_lib.sh" NAME):
# a scratch directory cg_NAME.XXXXXX as the working directory (removed at
# exit), a failure count, and
#   fail MESSAGE               count a failure
#   expect NAME RC PATTERN CMD...
#                              CMD exits RC (within 120 s) and the first line
#                              of its stderr matches PATTERN (first: a
#                              sanitizer build may add its report after it)
#   skip_if_no_bpe RC ERRFILE  a run that failed (RC 1) for want of
#                              SentencePiece ends the test: 77 (skipped)
#                              unless something failed already
#   train_ok NAME PATTERN CMD...  a training run (its output b.out, b.err)
#                              succeeds and its final JSON line has "val_bpc"
#                              and matches PATTERN (skips without BPE)
#   refused NAME PATTERN CMD...
#                              CMD exits 1 (within 120 s) and any line of
#                              its stderr matches PATTERN
#   refused_quietly NAME PATTERN OUT CMD...
#                              refused (above), with one line on stderr, and
#                              neither OUT nor its lock OUT.cgrad-lock written
#   same_file NAME A B         A and B have the same bytes (a resumed run's
#                              checkpoint and an uninterrupted one's)
#   intact NAME FILE COPY      FILE still has the bytes of COPY (else it is
#                              counted and restored, so later cases run on
#                              the same files)
#   json_ok NAME FILE          the last line of FILE is a JSON object
#   jsonl_ok NAME FILE         every line of FILE is a JSON object
#   zoo_data                   c.txt (a 3 KB text of 14 words) and p.tsv (400
#                              pairs), the small data of the zoo's tests
#   zoo_ckpts [FLAGS...]       zoo_data, the flags TINY (a charlm 16 wide, one
#                              layer) and S2S (a seq2seq as small), and a.st
#                              and s.st: 4 steps of each ($charlm, $seq2seq;
#                              FLAGS added to both train commands)
#   st_py ARGS... <<'EOF'      python3 runs the script on stdin (sys.argv[1:]
#                              = ARGS) after load(PATH) -> ({name: (dtype,
#                              shape, bytes)}, metadata): a safetensors file
#                              read with the standard library only, and
#                              save(PATH, tensors, metadata) writing one
#                              (load's form, in the dict's order)
#   cfg_key FILE KEY           the value of KEY in FILE's "config" (floats
#                              rounded to 6 digits: 0.2, not 0.200000003;
#                              "absent" when it has none)
#   st_meta FILE CODE [OUT]    FILE's metadata rewritten (into OUT, if given)
#                              by the Python statements CODE, run with m the
#                              metadata (a dict of strings) and t the
#                              "train" value parsed (None if absent), which
#                              goes back into m after CODE
#   finish                     exit 1 after failures (a command not found
#                              is one), else 0
# and python3 on PATH as the interpreter itself, not a version manager's
# shim (pyenv's python3 is a shell script that starts ~200 processes: most
# of a second a call, three quarters of some tests' time).
if py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$py" ]; then
  PATH=$(dirname "$py"):$PATH
  export PATH
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/cg_$1.XXXXXX")
# The programs this test started that still run end with it: meson's
# timeout sends SIGTERM to the test's process group, which a program under
# timeout(1) (a group of its own) is not in; bash runs the EXIT trap on
# that SIGTERM, and the program ran on for up to its own 120 s, writing
# into a removed directory. (A TERM handler would wait for the program.)
end_children() {
  local s line pid
  for s in /proc/[0-9]*/stat; do
    { read -r line <"$s"; } 2>/dev/null || continue
    pid=${s#/proc/}
    line=${line##*) } # "STATE PPID ...": after the command's name
    line=${line#* }
    [ "${line%% *}" = "$$" ] && kill -TERM "${pid%/stat}" 2>/dev/null
  done
  return 0
}
trap 'end_children; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# A command not found (a helper called before its definition, a typo) is a
# failure, not an exit status 127 the case may never look at. Bash runs the
# handler in the command's own process, so it leaves a line finish counts.
command_not_found_handle() {
  echo "FAIL: command not found: $1" >&2
  echo "$1" >>"$dir/.not_found"
  return 127
}
expect() {
  local name=$1 want=$2 pat=$3
  shift 3
  local rc=0
  timeout 120 "$@" >out.txt 2>err.txt || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit status $rc (expected $want): $(tail -c 300 err.txt)"
  elif ! grep -q -- "$pat" <<<"$(head -1 err.txt)"; then # no pipe: pipefail and grep -q race
    fail "$name: message does not match '$pat': $(tail -c 300 err.txt)"
  else
    echo "ok: $name: $(head -1 err.txt)"
  fi
}
refused() {
  local name=$1 pat=$2
  shift 2
  local rc=0
  timeout 120 "$@" >out.txt 2>err.txt || rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "$name: exit status $rc (expected 1): $(tail -c 300 err.txt)"
  elif ! grep -q -- "$pat" err.txt; then
    fail "$name: message does not match '$pat': $(tail -c 300 err.txt)"
  else
    echo "ok: $name: $(grep -m1 -- "$pat" err.txt)"
  fi
}
refused_quietly() {
  local name=$1 pat=$2 out=$3
  shift 3
  refused "$name" "$pat" "$@"
  [ "$(grep -c . err.txt)" = 1 ] || fail "$name: not one line: $(cat err.txt)"
  [ ! -e "$out" ] && [ ! -e "$out.cgrad-lock" ] || fail "$name: $out written"
}
same_file() {
  if cmp -s "$2" "$3"; then echo "ok: $1"; else fail "$1: $2 and $3 differ"; fi
}
intact() {
  if cmp -s "$2" "$3"; then
    echo "ok: $1: '$2' intact"
  else
    fail "$1: '$2' was changed"
    cp "$3" "$2"
  fi
}
json_ok() {
  if python3 -c 'import json,sys; assert isinstance(json.loads(open(sys.argv[1], "rb").read().splitlines()[-1]), dict)' "$2" 2>/dev/null; then
    echo "ok: $1: $(tail -1 "$2")"
  else
    fail "$1: not valid JSON: $(tail -1 "$2" 2>/dev/null)"
  fi
}
jsonl_ok() {
  if python3 -c '
import json, sys
for l in open(sys.argv[1], "rb").read().split(b"\n")[:-1]:
    assert isinstance(json.loads(l), dict)' "$2" 2>/dev/null; then
    echo "ok: $1: every line of $2 parses"
  else
    fail "$1: $2 does not parse: $(tail -c 200 "$2")"
  fi
}
# The last JSON line of file b (what this build wrote) has the values of
# file a's last line (what a reference wrote), numbers within tol, but for
# the keys named after tol.
same_json() {
  local name=$1 a=$2 b=$3 tol=$4
  shift 4
  if python3 - "$a" "$b" "$tol" "$@" <<'EOF'; then
import json, sys
a = json.loads(open(sys.argv[1]).read().splitlines()[-1])
b = json.loads(open(sys.argv[2]).read().splitlines()[-1])
tol, skip = float(sys.argv[3]), set(sys.argv[4:])
for k, v in a.items():
    if k in skip:
        continue
    w = b.get(k)
    ok = abs(w - v) <= tol if isinstance(v, float) and isinstance(w, (int, float)) else w == v
    assert ok, '%s: %r, the reference (%s) %r' % (k, w, sys.argv[1], v)
EOF
    echo "ok: $name: $(tail -1 "$b")"
  else
    fail "$name: $(tail -1 "$b")"
  fi
}
zoo_data() {
  local words=(the a whale sea ship captain ahab white call me ishmael some years ago) i
  for ((i = 0; i < 600; i++)); do printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}"; done >c.txt
  for ((i = 0; i < 400; i++)); do printf 'the cat %d sat\tdie katze %d sass\n' $i $i; done >p.tsv
}
zoo_ckpts() {
  zoo_data
  TINY=(--d 16 --H 2 --layers 1 --d-ff 32 --T 16 --batch-size 4 --threads 1 --eval-every 4)
  S2S=(--tokenizer char --d 16 --H 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --max-tokens 200
       --valid-size 20 --test-size 20 --test-limit 2 --threads 1 --eval-every 4)
  "$charlm" train --data c.txt "${TINY[@]}" --steps 4 "$@" --out a.st >/dev/null 2>a.log ||
    { echo "charlm training failed: $(tail -1 a.log)" >&2; exit 1; }
  "$seq2seq" train --data p.tsv "${S2S[@]}" --steps 4 "$@" --out s.st >/dev/null 2>s.log ||
    { echo "seq2seq training failed: $(tail -1 s.log)" >&2; exit 1; }
}
skip_if_no_bpe() {
  if [ "$1" -eq 1 ] && grep -q "unavailable" "$2"; then
    echo "skip: $(tail -1 "$2")"
    [ "$failures" -eq 0 ] && exit 77
    exit 1
  fi
}
train_ok() {
  local name=$1 pat=$2 rc=0 line
  shift 2
  "$@" >b.out 2>b.err || rc=$?
  skip_if_no_bpe "$rc" b.err
  line=$(tail -1 b.out)
  if [ "$rc" -eq 0 ] && grep -q '"val_bpc": [0-9]' <<<"$line" && grep -q -- "$pat" <<<"$line"; then
    echo "ok: $name: $line"
  else
    fail "$name: exit $rc: $line $(tail -c 300 b.err)"
  fi
}
st_py() {
  local prelude
  prelude=$(cat <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop('__metadata__', {})
    return {k: (v['dtype'], v['shape'], b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in h.items()}, meta
def save(p, t, meta):
    h, off, blob = {'__metadata__': meta}, 0, b''
    for k, (dt, sh, b) in t.items():
        h[k] = {'dtype': dt, 'shape': sh, 'data_offsets': [off, off + len(b)]}
        off += len(b)
        blob += b
    hb = json.dumps(h).encode()
    hb += b' ' * (-len(hb) % 8)
    open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + blob)
PY
)
  python3 -c "$prelude"$'\n'"$(cat)" "$@"
}
cfg_key() {
  st_py "$1" "$2" <<'PY'
t, meta = load(sys.argv[1])
v = json.loads(meta['config']).get(sys.argv[2], 'absent')
print(round(v, 6) if isinstance(v, float) else v)
PY
}
st_meta() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, code = sys.argv[1], sys.argv[2]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
m = h.setdefault('__metadata__', {})
ns = {'m': m, 't': json.loads(m['train']) if 'train' in m else None, 'json': json}
exec(code, ns)
if ns['t'] is not None:
    m['train'] = json.dumps(ns['t'])
hb = json.dumps(h, separators=(',', ':')).encode()
hb += b' ' * (-len(hb) % 8)
open(sys.argv[3] if len(sys.argv) > 3 else src, 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])
PY
}
finish() {
  [ -s "$dir/.not_found" ] && failures=$((failures + $(wc -l <"$dir/.not_found")))
  [ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
  echo "all ok"
  exit 0
}
