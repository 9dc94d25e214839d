"""The table of ``scripts/bench_tuning.sh``: one row per ``bench.tuning`` report in a folder.

    python -m chainermn_torus.bench.tuning_table results/tuning > table.md
"""
import glob
import json
import os
import sys

__all__ = ['table', 'main']

TARGET = 1.05  # tuned within 5 % of the sweep's best


def _where(path):
    name = os.path.basename(path)[:-len('.json')].split('-', 2)[2]
    return name.replace('emulated-', 'emulated 2 x 2, ').replace('-p', ', P = ')


def table(folder):
    lines = ['| where | sweep best (ms) | predicted | x best | tuned | x best | sweep\'s own '
             'noise | tuning calls | tuning cost (s) |', '|---|---|---|---|---|---|---|---|---|']
    misses = []
    for path in sorted(glob.glob(os.path.join(folder, 'tuning-*.json'))):
        with open(path) as f:
            r = json.load(f)
        where = _where(path)
        lines.append('| {} | {} {:.2f} | {} | {:.2f} | {} | {:.2f}{} | {:.2f} | {} | {:.3f} |'
                     .format(where, r['best'], r['best_ms'], r['predicted'],
                             r['predicted_ratio'], r['tuned'], r['tuned_ratio'],
                             '' if r['tuned_ratio'] <= TARGET else ' (over 5 %)',
                             r.get('sweep_self_ratio', float('nan')), r['tuning']['calls'],
                             r['tuning']['cost_s']))
        if r['predicted_ratio'] > TARGET:
            misses.append('{}: predicted {} ({}) is {:.2f}x the best ({})'.format(
                where, r['predicted'], r['predicted_by'], r['predicted_ratio'], r['best']))
    lines += ['', "The sweep's own noise: the configuration that is best by the even-numbered "
              'calls, timed by the odd-numbered ones, against the best there (1.00: the '
              'sweep agrees with itself).']
    if misses:
        lines += ['', "Predicted auto's misses (over 5 %):", '']
        lines += ['- ' + m for m in misses]
    return '\n'.join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    print(table(argv[0] if argv else '.'))


if __name__ == '__main__':
    main()
