#!/usr/bin/env python3
"""Line and branch coverage of the library (core/, autograd/, nn/, optim/,
models/) per top-level directory, per file or per function, from gcovr's
JSON (docs/robustness.md, round nineteen: coverage). Not run by CI.

    meson setup build-cov --buildtype=debug -Db_coverage=true -Dmpi=disabled
    ninja -C build-cov && meson test -C build-cov --num-processes 1 --timeout-multiplier 4
    gcovr -r . build-cov --filter core/ --filter autograd/ --filter nn/ --filter optim/ \\
        --filter models/ --json cov.json
    scripts/coverage_summary.py cov.json [dirs|files|funcs] [--cpu-runnable]

--cpu-runnable leaves out the code a CPU without AVX512_BF16 and AMX cannot
run: every function compiled for avx512bf16 or AMX (from its definition to
the closing brace at column 0) and the files that are AMX's alone. A
function's lines are those from its first line to the next function's
(gcov's functions; an always_inline helper counts with the one above it)."""
import collections
import json
import os
import re
import sys

TOPS = ('core', 'autograd', 'nn', 'optim', 'models')
AMX_FILES = ('core/attention_amx.c', 'core/amx_emulate.c', 'core/amx_tiles.h')
TARGET = re.compile(r'^(BF16_TARGET|AMX_TARGET|ROWS_BF16_TARGET|CG_AMX_TARGET)\b')


def unrunnable(root):
    """{file: [(first, last)]}: code this CPU cannot run (see above)."""
    out = collections.defaultdict(list)
    for f in AMX_FILES:
        out[f].append((1, 1 << 30))
    core = os.path.join(root, 'core')
    for name in sorted(os.listdir(core)):
        f = 'core/' + name
        if not name.endswith(('.c', '.h')) or f in AMX_FILES:
            continue
        lines = open(os.path.join(core, name)).read().split('\n')
        i = 0
        while i < len(lines):
            if TARGET.match(lines[i]):
                j = i
                while j < len(lines) and lines[j] != '}':
                    j += 1
                out[f].append((i + 1, j + 1))
                i = j
            i += 1
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    mode = args[1] if len(args) > 1 else 'dirs'
    skip = unrunnable('.') if '--cpu-runnable' in sys.argv else {}
    data = json.load(open(args[0]))
    dirs = collections.defaultdict(lambda: [0, 0, 0, 0])
    files, funcs = [], []
    for fe in data['files']:
        f = fe['file']
        if f.split('/')[0] not in TOPS:
            continue
        starts = sorted((fn['lineno'], fn['name']) for fn in fe.get('functions', []))
        per = {s: [name, 0, 0, 0, 0] for s, name in starts}
        tot = [0, 0, 0, 0]  # lines, lines run, branches, branches taken
        for ln in fe['lines']:
            n = ln['line_number']
            if ln.get('gcovr/noncode') or any(a <= n <= b for a, b in skip.get(f, [])):
                continue
            c = [1, ln['count'] > 0, len(ln['branches']),
                 sum(1 for b in ln['branches'] if b['count'] > 0)]
            tot = [x + y for x, y in zip(tot, c)]
            owner = None
            for s, _ in starts:
                if s > n:
                    break
                owner = s
            if owner is not None:
                per[owner][1:] = [x + y for x, y in zip(per[owner][1:], c)]
        files.append((f, tot))
        top = f.split('/')[0]
        dirs[top] = [x + y for x, y in zip(dirs[top], tot)]
        funcs += [(f, s, p) for s, p in per.items()]

    def pc(a, b):
        return 100.0 * a / b if b else 100.0

    def row(name, v):
        return '%-40s %6d/%-6d %5.1f%%  branches %6d/%-6d %5.1f%%' % (
            name, v[1], v[0], pc(v[1], v[0]), v[3], v[2], pc(v[3], v[2]))
    if mode == 'dirs':
        total = [0, 0, 0, 0]
        for top in TOPS:
            total = [x + y for x, y in zip(total, dirs[top])]
            print(row(top, dirs[top]))
        print(row('total', total))
    elif mode == 'files':
        for f, v in sorted(files, key=lambda x: x[1][1] - x[1][0]):
            print(row(f, v))
    else:  # functions with a line never run, the most unrun lines first
        for f, s, p in sorted(funcs, key=lambda x: x[2][2] - x[2][1]):
            if p[2] < p[1]:
                print(row('%s:%d %s' % (f, s, p[0]), p[1:]))


if __name__ == '__main__':
    main()
