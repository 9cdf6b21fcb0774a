#!/usr/bin/python3
"""Write the metric test data used by tests/test_metrics.c.

    /usr/bin/python3 scripts/make_metrics_cases.py [DING_TSV] [METRICS_PY]

DING_TSV   defaults to data/en_de_ding.tsv (scripts/prepare_data.sh writes it)
METRICS_PY defaults to /work/shared/reference/metrics.py (the reference)

tests/data/metrics_cases.tsv     hyp<TAB>ref, one pair a line: 300 German
                                 sentences with perturbed hypotheses plus a few
                                 hand-made lines that exercise the 13a rules
                                 and Unicode whitespace
tests/data/metrics_expected.txt  "START COUNT BLEU CHRF": the reference's corpus
                                 scores of lines [START, START+COUNT), for every
                                 single line and for some larger ranges
tests/data/metrics_tokens.txt    the 13a tokens of each hypothesis, joined by
                                 single spaces, one line per case
"""
import importlib.util
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ding = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "en_de_ding.tsv")
mpy = sys.argv[2] if len(sys.argv) > 2 else "/work/shared/reference/metrics.py"

spec = importlib.util.spec_from_file_location("metrics", mpy)
metrics = importlib.util.module_from_spec(spec)
spec.loader.exec_module(metrics)

with open(ding, encoding="utf-8") as f:
    german = [line.rstrip("\n").split("\t")[1] for line in f]

rng = random.Random(20240611)
refs = rng.sample(german, 300)
others = rng.sample(german, 300)


def perturb(ref, i):
    w = ref.split()
    kind = i % 12
    if kind == 0:
        return ref
    if kind == 1 and len(w) > 1:  # drop a word
        del w[rng.randrange(len(w))]
    elif kind == 2 and len(w) > 1:  # swap two neighbours
        j = rng.randrange(len(w) - 1)
        w[j], w[j + 1] = w[j + 1], w[j]
    elif kind == 3:  # change a few characters
        s = list(ref)
        for _ in range(rng.randint(1, 3)):
            s[rng.randrange(len(s))] = rng.choice("aeiouäöüßxyz ,.")
        return "".join(s)
    elif kind == 4:  # truncate
        return " ".join(w[: rng.randint(0, len(w))])
    elif kind == 5:  # unrelated sentence
        return others[i]
    elif kind == 6:  # empty
        return ""
    elif kind == 7:  # extra words
        w.insert(rng.randrange(len(w) + 1), rng.choice(["nicht", "sehr", "ja", "doch", "auch"]))
        w.append(rng.choice(w))
    elif kind == 8:  # lower case, no final punctuation
        return ref.lower().rstrip(".!?")
    elif kind == 9:  # odd whitespace: no-break space, tab, doubled spaces
        return rng.choice(["\u00a0", "  ", "\u3000", " \u2009"]).join(w)
    elif kind == 10:  # half of the other sentence mixed in
        o = others[i].split()
        return " ".join(w[: len(w) // 2] + o[len(o) // 2:])
    else:  # duplicate the sentence
        return ref + " " + ref
    return " ".join(w)


cases = [(perturb(r, i), r) for i, r in enumerate(refs)]
# hand-made lines for the tokeniser's rules
cases += [
    ("Hello, world. 3.5 - 4-5", "Hello, world. 3.5 - 4-5"),
    ("Es kostet 3,50 Euro, d.h. viel.", "Es kostet 3,50 Euro, also viel."),
    ("A &amp; B &quot;zitiert&quot; &lt;x&gt; <skipped>", "A & B \"zitiert\" <x>"),
    ("1-2-3, a-b-c... ok!?", "1-2-3, a-b-c... ok?!"),
    ("Zahlen: 10.000,5 und 7-9 und x.5", "Zahlen: 10.000,5 und 7 - 9 und x .5"),
    ("(Klammern) [eckig] {geschweift} 'Apostroph' `tick` ~tilde~ #@$%^*_+=|\\/",
     "(Klammern) [eckig] {geschweift} 'Apostroph'"),
    ("Größe ändern: Äpfel, Öl, Übel; Straße.", "Größe ändern: Äpfel, Öl und Übel; Straße."),
    ("„Anführungszeichen“ – Gedankenstrich — und …", "„Anführungszeichen“ - Gedankenstrich"),
    ("", ""),
    ("nur Hypothese", ""),
]

tests = os.path.join(root, "tests", "data")
os.makedirs(tests, exist_ok=True)
for h, r in cases:
    assert "\t" not in h + r and "\n" not in h + r
with open(os.path.join(tests, "metrics_cases.tsv"), "w", encoding="utf-8", newline="\n") as f:
    for h, r in cases:
        f.write(f"{h}\t{r}\n")
with open(os.path.join(tests, "metrics_tokens.txt"), "w", encoding="utf-8", newline="\n") as f:
    for h, _ in cases:
        f.write(" ".join(metrics.tokenize_13a(h)) + "\n")

ranges = [(i, 1) for i in range(len(cases))]
ranges += [(0, len(cases)), (0, 300), (0, 12), (12, 100), (150, 150), (300, len(cases) - 300), (7, 1)]
with open(os.path.join(tests, "metrics_expected.txt"), "w", encoding="utf-8", newline="\n") as f:
    for s, c in ranges:
        h = [x for x, _ in cases[s:s + c]]
        r = [y for _, y in cases[s:s + c]]
        f.write(f"{s} {c} {metrics.corpus_bleu(h, r)!r} {metrics.corpus_chrf(h, r)!r}\n")
print(f"wrote {len(cases)} cases and {len(ranges)} expected scores to {tests}")
