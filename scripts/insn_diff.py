#!/usr/bin/env python3
"""Which functions' machine code differs between two builds of a library.

For a change to the 16-lane kernels made on a CPU that cannot run some of
their clones (the AVX-512 ones, on Zen 2 and 3): whether those clones were
left as they were. Each function's signature is the multiset of its
instructions with register numbers, addresses, jump targets and alignment
padding taken out (a move of code elsewhere in the file changes those and
nothing else); two builds of the same source give the same signatures.

  scripts/insn_diff.py A.so B.so [--match REGEX]

e.g. scripts/insn_diff.py old/libcgrad.so.0.1.0 build/libcgrad.so.0.1.0
--match 'avx512f$'. Prints how many functions are the same and each one
that differs (or is only in one build) with both instruction counts.
Exits 0 when none differs, 1 when some do, 2 on a bad argument or an
unreadable file. Needs objdump (binutils). docs/performance.md, Zen 3,
2026-12-03 16:28.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

FUNC = re.compile(r'^[0-9a-f]+ <(.+)>:$')
INSN = re.compile(r'^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$')
GPR = re.compile(r'%(r[a-z0-9]+|e[a-z]+|[a-d][lhx]|[sd]il|[sb]pl|[sd]i|[sb]p)\b')


def fail(msg):
    print(f'insn_diff: {msg}', file=sys.stderr)
    sys.exit(2)


def signatures(path, pat):
    """{function: Counter of normalized instructions} of one object file,
    the functions whose name pat matches (all when None)"""
    run = subprocess.run(['objdump', '-d', '--no-show-raw-insn', path],
                         capture_output=True, text=True, errors='replace')
    if run.returncode != 0:
        why = (run.stderr.strip().splitlines() or ['exit status %d' % run.returncode])[-1]
        fail(f"objdump cannot read '{path}': {why}")
    funcs, cur = {}, None
    for line in run.stdout.splitlines():
        m = FUNC.match(line)
        if m:
            name = m.group(1)
            keep = '@plt' not in name and (pat is None or pat.search(name))
            cur = funcs.setdefault(name, collections.Counter()) if keep else None
            continue
        m = INSN.match(line)
        if not m or cur is None:
            continue
        mn, ops = m.group(1), re.sub(r'#.*', '', m.group(2))
        if 'nop' in mn or 'nop' in ops or (mn == 'xchg' and ops == '%ax,%ax'):
            continue  # alignment padding
        if mn.startswith(('j', 'call')):
            ops = '*' if ops.startswith('*') else ''  # targets move with the code
        ops = GPR.sub('%g', ops)  # register numbers out, classes kept
        ops = re.sub(r'%([xyz]mm)\d+', r'%\1', ops)
        ops = re.sub(r'%k\d', '%k', ops)
        ops = re.sub(r'<[^>]*>', '', ops)
        ops = re.sub(r'-?0x[0-9a-f]+|\b\d+\b', 'N', ops)
        cur[mn + ' ' + ops.strip()] += 1
    return funcs


def main():
    ap = argparse.ArgumentParser(
        prog='scripts/insn_diff.py',
        description='Which functions differ in their instructions between two builds (exit 0: none, 1: some, 2: error).')
    ap.add_argument('a', metavar='A', help='the first build of the library or object (the baseline)')
    ap.add_argument('b', metavar='B', help='the second build')
    ap.add_argument('--match', metavar='REGEX', help="only functions whose name matches, e.g. 'avx512f$'")
    args = ap.parse_args()
    try:
        pat = re.compile(args.match) if args.match else None
    except re.error as e:
        fail(f"--match '{args.match}' is not a regular expression: {e}")
    if not shutil.which('objdump'):
        fail('needs objdump (apt-get install binutils)')
    for p in (args.a, args.b):
        try:
            with open(p, 'rb'):
                pass
        except OSError as e:
            fail(f"cannot open '{p}': {e.strerror}")
    a, b = signatures(args.a, pat), signatures(args.b, pat)
    names = sorted(set(a) | set(b))
    if not names:
        fail(f"no function of either build matches --match '{args.match}'" if pat else
             'neither file has a function objdump can disassemble')
    differ = [n for n in names if a.get(n) != b.get(n)]
    print(f'{len(names) - len(differ)} functions the same, {len(differ)} differ')
    for n in differ:
        if n not in b:
            print(f'  {n}: only in A')
        elif n not in a:
            print(f'  {n}: only in B')
        else:
            print(f'  {n}: {sum(a[n].values())} and {sum(b[n].values())} instructions')
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main())
