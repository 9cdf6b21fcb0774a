#!/usr/bin/env python3
"""The layer rule, checked (meson test 'layers', suite 'layers').

Every folder of the library and of the zoo is a layer; a file's
`#include "..."` lines may name only its own layer and the layers below it:

    core < autograd < nn, optim          (optim may use nn; nn not optim)
    nn, optim < dist                     (data parallelism: libcgrad-dist)
    models/util < models/text < models/data
    models/util < models/report
    models/data, models/report < models/train < models/charlm, models/seq2seq
    models/charlm, models/seq2seq < models/zoo    (the models as a library)

Every zoo layer may use the whole library (core, autograd, nn, optim, dist).
charlm and seq2seq never include each other. A file directly in models/
(outside a layer) or a zoo folder missing from the table fails too.
A module is a source and its header (pairs.c + pairs.h); no module uses
itself round a circle of other modules, inside a layer too.

usage: check_layers.py SOURCE_ROOT   (exit 0: clean; 1: each violation printed)
"""
import os
import re
import sys

LIB = ["core", "autograd", "nn", "optim", "dist"]
ALLOWED = {
    "core": ["core"],
    "autograd": ["core", "autograd"],
    "nn": ["core", "autograd", "nn"],
    "optim": ["core", "autograd", "nn", "optim"],
    "dist": ["core", "autograd", "nn", "optim", "dist"],
    "models/util": LIB + ["models/util"],
    "models/text": LIB + ["models/util", "models/text"],
    "models/data": LIB + ["models/util", "models/text", "models/data"],
    "models/report": LIB + ["models/util", "models/report"],
    "models/train": LIB + ["models/util", "models/text", "models/data", "models/report",
                           "models/train"],
    "models/charlm": LIB + ["models/util", "models/text", "models/data", "models/report",
                            "models/train", "models/charlm"],
    "models/seq2seq": LIB + ["models/util", "models/text", "models/data", "models/report",
                             "models/train", "models/seq2seq"],
    "models/zoo": LIB + ["models/util", "models/text", "models/data", "models/report",
                         "models/train", "models/charlm", "models/seq2seq", "models/zoo"],
}
SOURCE = (".c", ".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a header path ("models/data/pairs.h" -> "models/data")."""
    d = os.path.dirname(path)
    return d if d in ALLOWED else None


def module(path):
    """A module is a .c/.cc file and its header: "models/data/pairs"."""
    return os.path.splitext(path)[0]


def main(root):
    errors = []
    graph = {}
    for layer in ALLOWED:
        folder = os.path.join(root, layer)
        if not os.path.isdir(folder):
            errors.append("%s: the layer's folder is missing" % layer)
            continue
        for name in sorted(os.listdir(folder)):
            full = os.path.join(folder, name)
            if os.path.isdir(full) and layer.startswith("models"):
                errors.append("%s/%s: a folder inside a zoo layer" % (layer, name))
            if not name.endswith(SOURCE):
                continue
            rel = layer + "/" + name
            text = open(full, encoding="utf-8", errors="replace").read()
            mod = module(rel)
            graph.setdefault(mod, [])
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                if "/" not in inc or inc.startswith("../"):
                    # beside the file (the installed headers include each
                    # other so: "../core/tensor.h")
                    inc = os.path.normpath(os.path.join(layer, inc))
                target = layer_of(inc)
                line = text.count("\n", 0, m.start()) + 1
                if target is None:
                    errors.append('%s:%d: #include "%s" is in no layer' % (rel, line, m.group(1)))
                elif target not in ALLOWED[layer]:
                    errors.append('%s:%d: #include "%s": layer %s may not include %s '
                                  '(allowed: %s)' % (rel, line, m.group(1), layer, target,
                                                     ", ".join(ALLOWED[layer])))
                if module(inc) != mod:
                    graph[mod].append(module(inc))
    models = os.path.join(root, "models")
    for name in sorted(os.listdir(models)):
        full = os.path.join(models, name)
        if os.path.isdir(full) and "models/" + name not in ALLOWED:
            errors.append("models/%s: a zoo folder that is not a layer of the table" % name)
        elif name.endswith(SOURCE):
            errors.append("models/%s: a source outside the zoo's layers" % name)
    # circles between modules (x.c or x.h includes y.h, y.c or y.h includes
    # z.h, ... back to x): the six-file circle of issue 23 was one
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                errors.append("include circle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt in graph and not state.get(nxt):
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if not state.get(node):
            visit(node, [])
    for e in errors:
        print(e)
    print("%d modules in %d layers, %d violation(s)" % (len(graph), len(ALLOWED), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
