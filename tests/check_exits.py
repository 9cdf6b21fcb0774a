#!/usr/bin/env python3
"""No exit below main in models/ and dist/, checked (meson test 'exits', suite 'layers').

A zoo program has one error style (issue 35): a function below main()
returns a code, or false with the library's error set, up to main(), which
returns it. A call that ends the process from anywhere else (exit, _exit,
_Exit, quick_exit, abort, assert, MPI_Abort, cg_dist_abort) fails this
check, in models/ and dist/ (.c, .cc and .h files, #define bodies
included), unless a comment says why it must stay, with the marker "exit:"
at the start of one of its lines, e.g.

    /* exit: a forked child must not run the parent's atexit handlers */
    _exit(1);

The comment may be on the call's line, just above the call's statement (only
blank space between), or the leading comment of the function that makes the
call (a function whose purpose is to end the process: a signal handler, an
MPI abort). Calls inside main() itself are fine. cg_prog_die and its kin
(removed in issue 35) count as exits too.

usage: check_exits.py SOURCE_ROOT     exit 0: clean; 1: each offender printed
       check_exits.py --self-test     the checker on samples of its own
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_sizes  # noqa: E402  (its comment stripper and function finder)

DIRS = ("models/", "dist/")
SOURCE = (".c", ".h", ".cc")
EXITS = ("exit", "_exit", "_Exit", "quick_exit", "abort", "assert", "MPI_Abort", "cg_dist_abort",
         r"cg_prog_die\w*")
CALL = re.compile(r"(?<![\w.>])(" + "|".join(EXITS) + r")\s*\(")
MARKER = re.compile(r"^\s*(?:/\*+|\*+|//)?\s*exit:\s*\S", re.M)
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:[^\n]*\\\n)*[^\n]*)", re.M)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def comment_on_line(text, comments, line):
    """The comments that touch line `line` (1-based)."""
    out = []
    for a, b in comments:
        if line_of(text, a) <= line <= line_of(text, b):
            out.append(text[a:b])
    return "\n".join(out)


def statement_start(code, offset):
    """The offset where the statement holding `offset` begins: after the last
    ';', '{' or '}' before it."""
    k = max(code.rfind(";", 0, offset), code.rfind("{", 0, offset), code.rfind("}", 0, offset))
    k += 1
    while k < offset and code[k].isspace():
        k += 1
    return k


def offenders(text):
    """(line, call, function) of every exit call not justified in text."""
    code, comments = check_sizes.strip(text)
    funcs, _ = check_sizes.functions(text)
    found = []
    for m in CALL.finditer(code):
        at = m.start()
        owner = None
        for name, first, last, start in funcs:
            if code.find("{", start) < at and line_of(text, at) <= last:
                owner = (name, start)
        if owner is None:  # a declaration or a prototype, not a call
            continue
        name, start = owner
        if name == "main":
            continue
        line = line_of(text, at)
        above = check_sizes.leading_comment(text, comments, statement_start(code, at))
        lead = check_sizes.leading_comment(text, comments, start)
        if any(MARKER.search(c) for c in (comment_on_line(text, comments, line), above, lead)):
            continue
        found.append((line, m.group(1), name))
    for m in DEFINE.finditer(text):  # macros (stripped from code above)
        body = re.sub(r"/\*.*?\*/|//[^\n]*", "", m.group(2), flags=re.S)
        c = CALL.search(body)
        if c and not MARKER.search(m.group(0)):
            above = check_sizes.leading_comment(text, comments, m.start())
            if not MARKER.search(above):
                found.append((line_of(text, m.start()), c.group(1), "#define " + m.group(1)))
    return found


def check(root):
    errors = []
    for rel in check_sizes.sources(root):
        if not rel.startswith(DIRS) or not rel.endswith(SOURCE):
            continue
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for line, call, name in offenders(text):
            errors.append("%s:%d: %s() ends the process below main (in %s): return a code up "
                          "to main, or say why it must stay in an 'exit:' comment"
                          % (rel, line, call, name))
    return errors


SAMPLES = [  # (source, the calls it must report)
    ("static void f(void) { exit(1); }\n", ["exit"]),
    ("static void f(void)\n{\n    if (x)\n        abort();\n}\n", ["abort"]),
    ("static void f(void) { cg_dist_abort(1, \"x\"); MPI_Abort(w, 1); }\n",
     ["cg_dist_abort", "MPI_Abort"]),
    ("#define die(...) exit(1)\n", ["exit"]),
    ("static void f(void) { assert(x); }\n", ["assert"]),
    ("int main(void) { exit(0); }\n", []),
    ("static void f(void)\n{\n    /* exit: a forked child */\n    _exit(1);\n}\n", []),
    ("static void f(void)\n{\n    _exit(1); /* exit: a signal handler */\n}\n", []),
    ("/* Ends the job.\n * exit: every rank must stop */\nvoid g(void) { exit(2); }\n", []),
    ("_Noreturn void cg_dist_abort(int code, const char *msg);\n", []),
    ("_Noreturn void cg_dist_abort(int code)\n{\n    stop();\n}\n", []),
    ("static int f(void) { cg_prog_die_lib(NULL); }\n", ["cg_prog_die_lib"]),
    ("static void f(void) { static_assert(1, \"\"); s.exit(1); p->abort(); my_exit(1); }\n", []),
    ("static void f(void) { puts(\"exit(1)\"); /* exit(1) */ }\n", []),
    ("static void f(void)\n{\n    /* why: none */\n    exit(3);\n}\n", ["exit"]),
]


def self_test():
    bad = 0
    for src, want in SAMPLES:
        got = [call for _, call, _ in offenders(src)]
        if sorted(got) != sorted(want):
            print("self-test: %r: found %s, expected %s" % (src, got, want))
            bad += 1
    print("%d samples, %d wrong" % (len(SAMPLES), bad))
    return 1 if bad else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    print("%d exit call(s) below main without an 'exit:' reason" % len(errors))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
