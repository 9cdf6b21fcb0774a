#!/usr/bin/env python3
"""scripts/recipe_table.py: the ablation table's means over seeds, its rows and
its refusal of a line recipe_run.sh did not write (issue 38)."""
import json
import os
import subprocess
import sys
import tempfile

script = os.path.join(sys.argv[1], 'scripts', 'recipe_table.py')


def run(d):
    return subprocess.run([sys.executable, script, d], capture_output=True, text=True)


def line(ckpt, seed, flags, split, bleu, chrf):
    run_name = ckpt.replace('.avg', '')
    return json.dumps({'ckpt': ckpt, 'run': run_name, 'seed': seed, 'flags': flags,
                       'split': split, 'eval': {'bleu': bleu, 'chrf': chrf, 'beam': 4}})


with tempfile.TemporaryDirectory() as d:
    rows = [line('a_s1', 1, '', 'valid', 4.0, 26.0), line('a_s1', 1, '', 'test', 5.0, 27.0),
            line('a_s1.avg', 1, '', 'test', 6.0, 28.0),
            line('a_s2', 2, '', 'valid', 5.0, 25.0), line('a_s2', 2, '', 'test', 6.0, 26.0),
            line('b_s1', 1, '--dropout 0.1', 'test', 3.25, 20.5)]
    with open(os.path.join(d, 'results.jsonl'), 'w') as f:
        f.write('\n'.join(rows) + '\n')
    with open(os.path.join(d, 'a_s1.log'), 'w') as f:
        f.write('{"step": 10, "val_bpc": 1.5}\nnot json\n')
    with open(os.path.join(d, 'a_s2.log'), 'w') as f:
        f.write('{"step": 10, "val_bpc": 1.7}\n')
    r = run(d)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith('| recipe (train flags) |') and out[1].startswith('| --- |'), out
    want = ['| the default | last | 1, 2 | 1.600 (1.500, 1.700) | 4.50 (4.00, 5.00) '
            '| 25.50 (26.00, 25.00) | 5.50 (5.00, 6.00) | 26.50 (27.00, 26.00) |',
            '| the default | average of last 5 | 1 |  |  |  | 6.00 | 28.00 |',
            '| `--dropout 0.1` | last | 1 |  |  |  | 3.25 | 20.50 |']
    assert out[2:] == want, '\n'.join(out[2:])
    with open(os.path.join(d, 'results.jsonl'), 'a') as f:
        f.write('{"ckpt": "x"}\n')
    r = run(d)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and \
        'results.jsonl:7: not a recipe_run.sh line' in r.stderr, r.stderr
print('ok: recipe_table means, rows and refusal')
