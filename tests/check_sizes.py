#!/usr/bin/env python3
"""Functions and files of a readable size, checked (meson test 'sizes', suite 'layers').

Every function body in the tree's C and C++ sources (.c, .h, .cc; build
folders skipped) is measured in lines, from the first line of its signature
to its closing brace. Two limits (issue 23):

  - a function in models/ may have at most 80 lines (120 until issue 35);
  - a function anywhere may have at most 150 lines, unless the comment just
    above it gives the reason, on a line of its own that starts with the
    marker "size:", e.g.

        /* Applies one option of the table to the state.
         * size: one case per op, read as a table; a split would scatter it. */

The marker does not lift the 80-line limit of models/.

And a file: no .c file of the library or the zoo (core/, autograd/, nn/,
optim/, models/) may have more than 800 lines (issue 35), except the GEMM
kernels (core/gemm*.c), which stay whole. Split a longer one along a real
seam, with a private header (name_impl.h) for what the halves share. The
test suites, tools and examples are outside this rule.

And a program: a zoo program's main file (models/*/*_main.c) may have at
most 450 lines (issue 35). It keeps what a reader needs to see the
program: its flag tables, help texts, commands and main; the model's
training glue and the commands' work live beside it (models/charlm/
charlm_train.c and charlm_cmds.c, each with a private header).

usage: check_sizes.py SOURCE_ROOT [--list N]
  exit 0: clean; 1: each offender printed (file:line: name: N lines, limit L).
  --list N prints every function of N lines or more, longest first, and exits 0.
"""
import bisect
import os
import re
import sys

MODELS_LIMIT = 80
TREE_LIMIT = 150
FILE_LIMIT = 800
FILE_DIRS = ("core/", "autograd/", "nn/", "optim/", "dist/", "models/")
FILE_EXEMPT = re.compile(r"^core/gemm[^/]*\.c$")
MAIN_LIMIT = 450
MAIN_FILE = re.compile(r"^models/[^/]+/[^/]+_main\.c$")
SOURCE = (".c", ".h", ".cc")
MARKER = re.compile(r"^\s*(?:/\*+|\*+|//)?\s*size:\s*\S", re.M)

def strip(text):
    """Comments, strings, character literals and preprocessor lines become
    spaces (newlines kept, so offsets and line numbers stay). Returns the
    stripped text and the (start, end) spans of the comments."""
    out = list(text)
    comments = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuations
            j = i
            while j < n and text[j] != "\n":
                if text.startswith("/*", j):  # a comment inside a directive
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            comments.append((i, j))
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((i, j))
        elif c in "\"'":  # keep the quotes, blank what is inside
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
            continue
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out), comments


NAME_BEFORE = re.compile(r"([A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*)\s*$")


QUALIFIERS = ("const", "noexcept", "override", "final")


def strip_qualifiers(head):
    """head without its trailing whitespace and the qualifiers that may end
    a C++ signature (`) const noexcept`). By hand: a regular expression
    anchored at the end backtracked over every run of whitespace a blanked
    comment leaves, and took most of this check's 7-16 s."""
    h = head.rstrip()
    while True:
        for q in QUALIFIERS:
            k = len(h) - len(q)
            if h.endswith(q) and (k == 0 or not (h[k - 1].isalnum() or h[k - 1] == "_")):
                h = h[:k].rstrip()
                break
        else:
            return h


def function_name(head):
    """The name of the function whose signature ends `head`, or None when
    the block is not a function (an initializer, a struct, an enum)."""
    h = strip_qualifiers(head)
    if not h.endswith(")"):
        return None
    depth = 0
    for k in range(len(h) - 1, -1, -1):
        if h[k] == ")":
            depth += 1
        elif h[k] == "(":
            depth -= 1
            if depth == 0:
                m = NAME_BEFORE.search(h[:k])
                if not m:
                    return None
                name = m.group(1)
                if name in ("if", "while", "for", "switch", "sizeof"):
                    return None
                if name == "START_TEST":  # Check's test functions
                    return h[k + 1:-1].strip()
                return name
    return None


def functions(text):
    """(name, first line, last line, signature offset) of every function."""
    code, comments = strip(text)
    found = []
    newlines = [k for k, ch in enumerate(code) if ch == "\n"]
    stack = []  # per open brace: True when it is transparent (extern "C", namespace)
    last_end = 0  # offset after the last top-level terminator
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        top = all(stack)  # outside any function, struct or initializer
        if c == "}" and stack:
            stack.pop()
            last_end = i + 1
        elif c == ";" and top:
            last_end = i + 1
        elif c == "{" and not top:
            stack.append(False)
        elif c == "{":
            head = code[last_end:i]
            if re.search(r'(\bextern\s*"\s*"|\bnamespace\b[^;]*)\s*$', head):
                stack.append(True)
                last_end = i + 1
                i += 1
                continue
            name = function_name(head)
            lead = re.match(r"(\s*END_TEST\b)?\s*", head)  # Check's closing macro
            start = last_end + lead.end()
            depth, j = 1, i + 1
            while j < n and depth:
                if code[j] == "{":
                    depth += 1
                elif code[j] == "}":
                    depth -= 1
                j += 1
            if name:
                first = bisect.bisect_left(newlines, start) + 1
                last = bisect.bisect_left(newlines, j - 1) + 1
                found.append((name, first, last, start))
            i = j
            last_end = j
            continue
        i += 1
    return found, comments


def leading_comment(text, comments, start):
    """The comment(s) right above offset start (only blank space between)."""
    parts = []
    pos = start
    for a, b in reversed(comments):
        if b > pos:
            continue
        if text[b:pos].strip():
            break
        parts.append(text[a:b])
        pos = a
    return "\n".join(reversed(parts))


def sources(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith((".", "build", "subprojects"))
                             and not os.path.exists(os.path.join(dirpath, d, "meson-private")))
        for f in sorted(filenames):
            if f.endswith(SOURCE):
                yield os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/")


def long_files(root):
    """(path, lines, limit) of every .c file in FILE_DIRS over its limit:
    MAIN_LIMIT for a program's main file (MAIN_FILE), else FILE_LIMIT
    outside FILE_EXEMPT."""
    out = []
    for rel in sources(root):
        if not rel.endswith(".c") or not rel.startswith(FILE_DIRS) or FILE_EXEMPT.match(rel):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = sum(1 for _ in f)
        limit = MAIN_LIMIT if MAIN_FILE.match(rel) else FILE_LIMIT
        if lines > limit:
            out.append((rel, lines, limit))
    return out


def measure(root):
    """(path, name, first line, lines, justified) of every function."""
    out = []
    for rel in sources(root):
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        found, comments = functions(text)
        for name, first, last, start in found:
            reason = bool(MARKER.search(leading_comment(text, comments, start)))
            out.append((rel, name, first, last - first + 1, reason))
    return out


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--list"):
        print(__doc__)
        return 2
    root = argv[1]
    funcs = measure(root)
    if len(argv) == 4:
        floor = int(argv[3])
        for rel, name, first, lines, reason in sorted(funcs, key=lambda f: -f[3]):
            if lines >= floor:
                print("%5d  %s:%d: %s%s" % (lines, rel, first, name,
                                            "  (size: justified)" if reason else ""))
        return 0
    errors = []
    for rel, name, first, lines, reason in funcs:
        in_models = rel.startswith("models/")
        limit = MODELS_LIMIT if in_models else TREE_LIMIT
        if lines <= limit or (not in_models and reason):
            continue
        why = "" if in_models else " (or a 'size: <reason>' line in its leading comment)"
        errors.append("%s:%d: %s: %d lines, limit %d%s" % (rel, first, name, lines, limit, why))
    n_func_errors = len(errors)
    for rel, lines, limit in long_files(root):
        if limit == MAIN_LIMIT:
            errors.append("%s: %d lines, limit %d for a program's main file (move the "
                          "model's glue or the commands' work beside it)" % (rel, lines, limit))
        else:
            errors.append("%s: %d lines, limit %d for a .c file (split it along a seam)"
                          % (rel, lines, limit))
    for e in errors:
        print(e)
    print("%d functions measured, %d over the limits; %d .c files over theirs (%d lines, "
          "%d for a program's main)" % (len(funcs), n_func_errors, len(errors) - n_func_errors,
                                        FILE_LIMIT, MAIN_LIMIT))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
