"""Tables, target ratios and plots from ``scripts/bench_overlap.sh``'s JSON files.

    python -m chainermn_torus.bench.overlap_report results/overlap [--plots DIR]

Writes OUTDIR/report.md (and prints it): per run, the per-iteration breakdown of every
configuration, the total time and the test accuracy; the target ratios:
* overlap: iteration / max(compute, wire), where compute = data + forward/backward + update
  of synchronous rsap and wire = its all-reduce (float16: of rsap+fp16), and against the
  same configuration without overlap;
* float16: all-reduce of rsap+fp16 / rsap;
* the best configuration's iteration against naive+stock;
and plots: iteration time against link rate (sweep files), the breakdown as stacked bars.
"""
import argparse
import glob
import json
import os
import re

CONFIG_ORDER = ('naive+stock', 'rsap', 'rsap+fp16', 'rsap+db', 'rsap+overlap',
                'rsap+fp16+overlap')
PHASES = ('data', 'forward_backward', 'allreduce', 'update')


def rate_mbit(label):
    m = re.match(r'^([0-9.]+)([kmg]?)bit$', label or '')
    if not m:
        return None
    return float(m.group(1)) * {'k': 1e-3, 'm': 1.0, 'g': 1e3, '': 1e-6}[m.group(2)]


def load(directory):
    runs = []
    # The script's runs (sweep-, accuracy-) and the CPU-free wire ones (sleep-); other
    # JSON there (the polling comparison) repeats configurations and is read by hand.
    paths = [p for p in sorted(glob.glob(os.path.join(directory, '*.json')))
             if os.path.basename(p).startswith(('sweep-', 'accuracy-', 'sleep-'))]
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if 'results' not in data:
            continue
        data['file'] = os.path.basename(path)
        data['by'] = {r['config']: r for r in data['results']}
        runs.append(data)
    return runs


def ratios(run):
    """The three target ratios for one run (None where a configuration is missing)."""
    by = run['by']
    out = {}
    sync = by.get('rsap')
    if sync:
        m = sync['median_ms']
        compute = m['data'] + m['forward_backward'] + m['update']
        wire = m['allreduce']
        out['compute_ms'], out['wire_ms'] = compute, wire
        if 'rsap+overlap' in by:
            out['rsap+overlap / max(compute, wire)'] = \
                by['rsap+overlap']['median_ms']['iteration'] / max(compute, wire)
            out['rsap+overlap / rsap'] = \
                by['rsap+overlap']['median_ms']['iteration'] / m['iteration']
        if 'rsap+fp16+overlap' in by and 'rsap+fp16' in by:
            half = by['rsap+fp16']['median_ms']
            out['rsap+fp16+overlap / max(compute, float16 wire)'] = \
                by['rsap+fp16+overlap']['median_ms']['iteration'] / max(
                    half['data'] + half['forward_backward'] + half['update'],
                    half['allreduce'])
            out['rsap+fp16+overlap / rsap+fp16'] = \
                by['rsap+fp16+overlap']['median_ms']['iteration'] / half['iteration']
        if 'rsap+fp16' in by:
            out['fp16 allreduce / fp32'] = by['rsap+fp16']['median_ms']['allreduce'] / wire
            if sync.get('test_accuracy') is not None:
                out['fp16 accuracy - fp32 (points)'] = 100 * (
                    by['rsap+fp16']['test_accuracy'] - sync['test_accuracy'])
        for name in ('rsap+overlap', 'rsap+fp16+overlap', 'rsap+db'):
            if name in by and sync.get('test_accuracy') is not None \
                    and by[name].get('test_accuracy') is not None:
                out[name + ' accuracy - rsap (points)'] = 100 * (
                    by[name]['test_accuracy'] - sync['test_accuracy'])
    if 'naive+stock' in by:
        base = by['naive+stock']['median_ms']['iteration']
        best = min((r for c, r in by.items() if c != 'naive+stock'),
                   key=lambda r: r['median_ms']['iteration'], default=None)
        if best is not None:
            out['best'] = best['config']
            out['naive+stock / best'] = base / best['median_ms']['iteration']
    return out


def table(run):
    lines = ['| configuration | iteration | data | forward+backward | all-reduce (exposed) '
             '| all-reduce thread | update | total (s) | test accuracy |',
             '|---|---|---|---|---|---|---|---|---|']
    for config in CONFIG_ORDER:
        r = run['by'].get(config)
        if r is None:
            continue
        m = r['median_ms']
        acc = r.get('test_accuracy')
        lines.append('| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {} | {:.1f} | {:.1f} | {} |'
                     .format(config, m['iteration'], m['data'], m['forward_backward'],
                             m['allreduce'], '{:.1f}'.format(m['allreduce_thread'])
                             if m['allreduce_thread'] else '-', m['update'],
                             r['train_seconds'], '-' if acc is None else f'{acc:.4f}'))
    return '\n'.join(lines)


def describe(run):
    shape = '{} nodes x {} ranks'.format(run['nodes'], run['ranks'] // max(run['nodes'], 1))
    what = '{} iterations'.format(run['iterations']) if run.get('iterations') else \
        '{} epochs'.format(run['epochs'])
    crop = ', {}-pixel crops'.format(run['crop']) if run.get('crop') else ''
    return '{} ({}{}), {}, links {}, {}'.format(run['file'], run['model'], crop, shape,
                                               run['label'], what)


def report(runs):
    out = ['# Overlap benchmark (scripts/bench_overlap.sh)', '',
           'Medians in ms per iteration (the median over ranks of each rank\'s median).', '']
    for run in runs:
        out += ['## ' + describe(run), '', table(run), '']
        for k, v in ratios(run).items():
            out.append('- {}: {}'.format(k, f'{v:.3f}' if isinstance(v, float) else v))
        out.append('')
    return '\n'.join(out)


def plot(runs, directory):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    written = []
    sweeps = {}
    for run in runs:
        if run['file'].startswith('sweep-') and rate_mbit(run['label']):
            sweeps.setdefault((run['model'], run['nodes'], run['ranks']), []).append(run)
    for (model, nodes, ranks), group in sorted(sweeps.items()):
        group.sort(key=lambda r: rate_mbit(r['label']))
        fig, ax = plt.subplots(figsize=(6.5, 4))
        rates = [rate_mbit(r['label']) for r in group]
        for config in CONFIG_ORDER:
            ys = [r['by'][config]['median_ms']['iteration'] if config in r['by'] else None
                  for r in group]
            if any(y is not None for y in ys):
                ax.plot(rates, ys, marker='o', label=config)
        ax.set_xscale('log')
        ax.set_xlabel('link rate (Mbit/s, each way)')
        ax.set_ylabel('iteration (ms, median)')
        ax.set_title(f'{model}: {nodes} nodes x {ranks // max(nodes, 1)} ranks, emulated links')
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
        per_node = ranks // max(nodes, 1)
        path = os.path.join(directory, f'iteration-vs-rate-{model}-{nodes}x{per_node}.png')
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for run in runs:
        if not run['file'].startswith('accuracy-'):
            continue
        configs = [c for c in CONFIG_ORDER if c in run['by']]
        fig, ax = plt.subplots(figsize=(7, 4))
        bottom = [0.0] * len(configs)
        for phase in PHASES:
            vals = [run['by'][c]['median_ms'][phase] for c in configs]
            ax.bar(configs, vals, bottom=bottom,
                   label='all-reduce (exposed)' if phase == 'allreduce' else phase)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_ylabel('ms per iteration (median)')
        ax.set_title('{}: {}'.format(run['model'], describe(run).split('), ', 1)[1]),
                     fontsize=9)
        ax.legend(fontsize=8)
        plt.setp(ax.get_xticklabels(), rotation=20, ha='right', fontsize=8)
        fig.tight_layout()
        path = os.path.join(directory, 'breakdown-' + run['file'].replace('.json', '.png'))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('directory')
    parser.add_argument('--plots', default=None, help='directory for the PNGs (default: the '
                                                      'results directory)')
    args = parser.parse_args(argv)
    runs = load(args.directory)
    if not runs:
        parser.error(f'no benchmark JSON in {args.directory}')
    text = report(runs)
    with open(os.path.join(args.directory, 'report.md'), 'w') as f:
        f.write(text + '\n')
    print(text)
    for path in plot(runs, args.plots or args.directory):
        print('wrote', path)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
