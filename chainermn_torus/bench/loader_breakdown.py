"""Collect the ImageNet example's per-iteration breakdowns into a table and a plot.

    python -m chainermn_torus.bench.loader_breakdown results/imagenet/* --png breakdown.png

Each argument is an ``--out`` directory of ``examples/imagenet/train_imagenet.py`` (holding
``breakdown.json`` and ``summary.json``). Prints a Markdown table (ranks, loader, placement,
iterations/s, and per iteration: data wait, forward+backward, all-reduce, update, the data
wait's share) and draws the phases as stacked bars, one per run, like Hanawa & Tamura's Figure 4.
"""
import argparse
import json
import os

__all__ = ['load_runs', 'format_table', 'plot']

PHASES = ('data', 'forward_backward', 'allreduce', 'update')
LABELS = {'data': 'data wait', 'forward_backward': 'forward+backward',
          'allreduce': 'all-reduce', 'update': 'update'}


def load_runs(dirs):
    runs = []
    for d in dirs:
        with open(os.path.join(d, 'breakdown.json')) as f:
            breakdown = json.load(f)
        with open(os.path.join(d, 'summary.json')) as f:
            summary = json.load(f)
        med = breakdown['median_ms']
        label = '{} rank{} {}{}'.format(
            summary['ranks'], '' if summary['ranks'] == 1 else 's', summary['loader'],
            ' ({})'.format(summary['affinity']) if summary.get('affinity') else '')
        runs.append({'dir': d, 'label': label, 'summary': summary, 'median_ms': med,
                     'data_share': (med['data'] / med['iteration']) if med.get('iteration')
                     else None})
    return runs


def format_table(runs):
    lines = ['| run | arch | iterations/s | data wait | forward+backward | all-reduce | update | '
             'iteration | data wait share |', '|---|---|---|---|---|---|---|---|---|']
    for r in runs:
        m, s = r['median_ms'], r['summary']
        lines.append('| {} | {} | {} | {} | {} | {} | {} | {} | {} |'.format(
            r['label'], s['arch'],
            '{:.2f}'.format(s['iterations_per_second']) if s['iterations_per_second'] else '-',
            *[f'{m[p]:.1f}' if m.get(p) is not None else '-'
              for p in PHASES + ('iteration',)],
            '{:.1%}'.format(r['data_share']) if r['data_share'] is not None else '-'))
    return '\n'.join(lines)


def plot(runs, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(runs), 4.2))
    bottom = [0.0] * len(runs)
    for phase in PHASES:
        values = [r['median_ms'].get(phase) or 0.0 for r in runs]
        ax.bar(range(len(runs)), values, bottom=bottom, label=LABELS[phase])
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([r['label'] for r in runs], rotation=30, ha='right', fontsize=8)
    ax.set_ylabel('ms per iteration (median)')
    ax.set_title('Where an iteration goes ({})'.format(runs[0]['summary']['arch']))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('dirs', nargs='+')
    p.add_argument('--png', default=None)
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    runs = load_runs(args.dirs)
    print(format_table(runs))
    if args.png:
        plot(runs, args.png)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(runs, f, indent=1)


if __name__ == '__main__':
    main()
