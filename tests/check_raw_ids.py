#!/usr/bin/env python3
"""No public function takes ids, targets, indices, rows or masks as a bare
pointer without a length (issue 31): they travel as int64 or bool tensors,
whose dtype and shape the callee checks.

Reads the installed headers (the install_headers list of meson.build),
joins each declaration, and for every parameter that points to an integer
or bool type and whose name says it holds ids, targets, indices, rows,
labels, tokens or a mask, requires a length parameter in the same
declaration. Prints each violation and exits 1.
"""
import re
import sys
from pathlib import Path

ROLE = re.compile(r"(^|_)(ids?|idx|targets?|index|indices|rows?|labels?|tokens?|tok|masks?|pad)"
                  r"($|_|s$)", re.I)
INT_PTR = re.compile(r"^(const\s+)?(u?int(8|16|32|64)_t|int|long|bool|unsigned\s+char|signed\s+char)"
                     r"\s*\*+\s*(const\s+)?(?P<name>\w+)$")
LENGTH = re.compile(r"^(n|len|length|count|numel|size|n_\w+|\w+_len|\w+_count)$")
# A multi-index into a tensor (PyTorch's x[i, j]): its length is the
# tensor's ndim, given by the tensor argument itself, as a shape's is.
EXEMPT = {("cg_get", "idx"), ("cg_set", "idx"), ("cg_get_i64", "idx")}


def headers(root):
    text = (root / "meson.build").read_text()
    names = re.findall(r"'((?:core|autograd|nn|optim|models/zoo)/\w+\.h)'", text)
    if not names:
        sys.exit("check_raw_ids: no install_headers list found in meson.build")
    return [root / n for n in names]


def declarations(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    for m in re.finditer(r"\b(cg_\w+)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*[;{]", text):
        yield m.group(1), m.group(2)


def struct_fields(text):
    """(struct name, [field declarations]) of each struct body."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    for m in re.finditer(r"struct\s*(\w*)\s*\{([^{}]*)\}\s*(\w*)", text):
        fields = [" ".join(f.split()) for f in m.group(2).split(";") if f.strip()]
        yield m.group(1) or m.group(3) or "?", fields


def params(arglist):
    depth, cur, out = 0, "", []
    for ch in arglist:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [" ".join(p.split()) for p in out]


def split_fields(field):
    """'const int64_t *a, *b' -> ['const int64_t *a', 'const int64_t *b']."""
    parts = [p.strip() for p in field.split(",")]
    first = parts[0]
    if len(parts) == 1 or len(first.split()) < 2:
        return [field]
    base = first[:first.index("*")].strip() if "*" in first else first.rsplit(None, 1)[0]
    return [first] + [f"{base} {p}" for p in parts[1:]]


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    bad, checked = [], 0
    for h in headers(root):
        for fn, arglist in declarations(h.read_text()):
            ps = params(arglist)
            names = [re.sub(r"\[.*\]$", "", p).split("*")[-1].split()[-1] if p.split() else ""
                     for p in ps]
            has_len = any(LENGTH.match(n) for n in names)
            for p in ps:
                m = INT_PTR.match(re.sub(r"\[.*\]$", "", p))
                if not m:
                    continue
                checked += 1
                name = m.group("name")
                if ROLE.search(name) and not has_len and (fn, name) not in EXEMPT:
                    bad.append(f"{h.relative_to(root)}: {fn}: '{p}' is a bare pointer to "
                               f"{name} without a length: take an int64 or bool tensor")
        for st, fields in struct_fields(h.read_text()):
            decls = [d.strip() for f in fields for d in split_fields(f)]
            has_len = any(LENGTH.match(d.split("*")[-1].split()[-1]) for d in decls if d.split())
            for d in decls:
                m = INT_PTR.match(d)
                if not m:
                    continue
                checked += 1
                if ROLE.search(m.group("name")) and not has_len:
                    bad.append(f"{h.relative_to(root)}: struct {st}: field '{d}' is a bare pointer "
                               f"to {m.group('name')} without a length: hold an int64 or bool tensor")
    for b in bad:
        print(b)
    print(f"check_raw_ids: {checked} integer or bool pointer parameters in the public headers, "
          f"{len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
