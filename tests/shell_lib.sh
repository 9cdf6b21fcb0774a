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
#   finish                     exit 1 after failures, else 0
dir=$(mktemp -d "${TMPDIR:-/tmp}/cg_$1.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
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
finish() {
  [ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
  echo "all ok"
  exit 0
}
