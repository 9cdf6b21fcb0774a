#!/usr/bin/env python3
"""The translator's recipe ablation as a markdown table (issue 38).

    python3 scripts/recipe_table.py OUTDIR

reads OUTDIR/results.jsonl, written by scripts/recipe_run.sh (one JSON line per
checkpoint and split), and each run's final training line OUTDIR/NAME.log (for
val_bpc), and prints one row per recipe (its train flags) and checkpoint kind
(the last checkpoint, or the average of the last 5): the mean over the seeds
run of validation and test BLEU and chrF, with each seed's value in brackets.
Rows follow the order in which recipes first appear in results.jsonl.
"""
import argparse
import json
import os
import statistics
import sys


def load(outdir):
    path = os.path.join(outdir, 'results.jsonl')
    rows = []
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                rows.append((r['run'], r['seed'], r['flags'], r['ckpt'].endswith('.avg'),
                             r['split'], float(r['eval']['bleu']), float(r['eval']['chrf'])))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit('recipe_table: %s:%d: not a recipe_run.sh line (%s)' % (path, n, e))
    return rows


def val_bpc(outdir, run):
    """The last val_bpc the run's training log printed, or None."""
    try:
        with open(os.path.join(outdir, run + '.log'), encoding='utf-8') as f:
            found = None
            for line in f:
                try:
                    found = json.loads(line).get('val_bpc', found)
                except ValueError:
                    pass
            return found
    except OSError:
        return None


def cell(values, digits=2):
    if not values:
        return ''
    mean = statistics.fmean(values)
    if len(values) == 1:
        return '%.*f' % (digits, mean)
    return '%.*f (%s)' % (digits, mean, ', '.join('%.*f' % (digits, v) for v in values))


def table(rows, outdir):
    groups = {}
    for run, seed, flags, avg, split, bleu, chrf in rows:
        g = groups.setdefault((flags, avg), {})
        g.setdefault(seed, {'run': run})[split] = (bleu, chrf)
    out = ['| recipe (train flags) | checkpoint | seeds | val_bpc | valid BLEU | valid chrF '
           '| test BLEU | test chrF |',
           '| --- | --- | --- | --- | --- | --- | --- | --- |']
    for (flags, avg), seeds in groups.items():
        order = sorted(seeds)
        get = lambda split, i: [seeds[s][split][i] for s in order if split in seeds[s]]
        bpc = [] if avg else [b for b in (val_bpc(outdir, seeds[s]['run']) for s in order)
                              if b is not None]
        out.append('| %s | %s | %s | %s | %s | %s | %s | %s |' % (
            '`%s`' % flags if flags else 'the default', 'average of last 5' if avg else 'last',
            ', '.join(str(s) for s in order), cell(bpc, 3), cell(get('valid', 0)),
            cell(get('valid', 1)), cell(get('test', 0)), cell(get('test', 1))))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('outdir')
    a = ap.parse_args()
    print(table(load(a.outdir), a.outdir))


if __name__ == '__main__':
    main()
