#!/bin/bash
# The checked mode (CG_DEBUG=1, issue 33 finding 6): each lifetime mistake
# of tests/lifetime_mistake.c is named by the call that makes it, in one
# line on stderr (exactly the line below), and refused, so the program runs
# on and frees everything once (exit 0; under ASan, no report). Without the
# mode these are heap corruption. Then `correct` prints the same losses,
# and nothing on stderr, with the mode off and on; off, nothing is kept.
# usage: test_lifetime.sh PATH/TO/lifetime_mistake
prog=$(realpath "$1")
. "$(dirname "$0")/shell_lib.sh" lifetime
P="cgrad: CG_DEBUG:"
HELD="held by a module, an optimizer, a gradient or a graph node (released twice, or ->weight, cg_grad, a parameter lookup); release only references you own"
cases=(
  scope_then_release "$P cg_release: tensor [2, 3] float32 was already freed (by cg_scope_end)"
  release_twice "$P cg_release: tensor [4] float32 was already freed (by cg_release)"
  release_twice_graph "$P cg_release: tensor [3] float32 is borrowed: its 1 reference is $HELD"
  release_weight "$P cg_release: tensor 'fc1.weight' [3, 2] float32 is borrowed: its 1 reference is $HELD"
  release_grad "$P cg_release: tensor 'fc1.weight.grad' [3, 2] float32 is borrowed: its 1 reference is $HELD"
  release_grad_unnamed "$P cg_release: tensor [5] float32 (from cg_grad) is borrowed: its 1 reference is $HELD"
  release_tied "$P cg_release: tensor 'first' [2] float32 is borrowed: its 2 references are $HELD"
  module_twice "$P cg_module_free: module MLP was already freed (by cg_module_free)"
  optim_twice "$P cg_optim_free: optimizer adamw over 2 parameters was already freed (by cg_optim_free)"
  child_of_parent "$P cg_module_free: module Linear is child 'fc1' of module MLP, which owns it and frees it with itself; free the parent only"
  forward_after_free "$P forward: module Linear was already freed (by cg_module_free)"
  residual_after_free "$P forward: module Linear was already freed (by cg_module_free)"
  optim_step_after_free "$P cg_optim_step: optimizer adamw over 2 parameters was already freed (by cg_optim_free)"
  item_after_scope "$P cg_item: tensor [] float32 was already freed (by cg_scope_end)"
  op_after_release "$P add: tensor [4] float32 was already freed (by cg_release)"
  forward_of_freed_input "$P linear: tensor [4, 2] float32 was already freed (by cg_scope_end)"
  weight_after_module_free "$P sum: tensor 'fc1.weight' [3, 2] float32 was already freed (by cg_module_free)"
  bias_after_module_free "$P sum: tensor 'fc1.bias' [3] float32 was already freed (by cg_module_free)"
  backward_after_release "$P cg_backward: tensor [] float32 was already freed (by cg_release)"
  grad_after_release "$P cg_grad: tensor [3] float32 was already freed (by cg_release)"
  save_after_module_free "$P cg_module_save: module MLP was already freed (by cg_module_free)"
  optim_of_freed_module "$P cg_optim_from_module: module MLP was already freed (by cg_module_free)"
)
for ((i = 0; i < ${#cases[@]}; i += 2)); do
  name=${cases[i]} want=${cases[i + 1]} rc=0
  CG_DEBUG=1 timeout 120 "$prog" "$name" >out.txt 2>err.txt || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "$name: exit status $rc (expected 0): $(cat out.txt) $(tail -c 400 err.txt)"
  elif [ "$(cat err.txt)" != "$want" ]; then
    fail "$name: stderr is not the one expected line: $(tail -c 400 err.txt)"
  else
    echo "ok: $name: $want"
  fi
done
# The mode off: the same results as on, no message, no quarantine.
rc=0
env -u CG_DEBUG "$prog" correct >off.txt 2>off.err || rc=$?
CG_DEBUG=1 "$prog" correct >on.txt 2>on.err || rc=$?
if [ "$rc" -ne 0 ] || [ -s off.err ] || [ -s on.err ]; then
  fail "correct: exit $rc, stderr: $(cat off.err on.err | tail -c 400)"
elif [ "$(sed '$d' off.txt)" != "$(sed '$d' on.txt)" ] || [ "$(wc -l <off.txt)" -ne 11 ]; then
  fail "correct: losses differ between the mode off and on: $(paste off.txt on.txt | tr '\n' ' ')"
elif [ "$(tail -1 off.txt)" != "checked 0, quarantined none" ] ||
  [ "$(tail -1 on.txt)" != "checked 1, quarantined some" ]; then
  fail "correct: $(tail -1 off.txt) / $(tail -1 on.txt)"
else
  echo "ok: correct: the same $(sed '$d' off.txt | wc -l) losses off and on; off: $(tail -1 off.txt)"
fi
finish
