"""Planner predictions against measured all-reduce times (``scripts/bench_emulated.sh``).

    python -m chainermn_torus.bench.plan_check results/emulated [--json out.json]

For every ``allreduce-<model>-<K>x<R>.json`` in the folder, each row the model covers is
predicted with the network calibrated for that cluster (``network-<K>x<R>.json``), and the
relative error |predicted - measured| / measured is reported. ChainerMN's ``naive`` (one
all-reduce per array) and ``allreduce_1msg`` are not modelled. MPICH's pure all-reduce is
node-aware by default, so ``pure_allreduce`` is compared with that composition's model.
Then the planner's predictions for Oakforest-PACS at 256 ranks, Tamura & Hanawa's shapes.
"""
import argparse
import json
import statistics

from chainermn_torus.algorithms.gradient_sets import MODEL_BYTES
from chainermn_torus.planning import planner
from chainermn_torus.planning.measured import measured_rows


def compare(folder):
    rows = []
    for model, K, R, name, algo, grid, nbytes, meas, net in measured_rows(folder):
        pred, _ = planner.predict(algo, K, R, nbytes, net, grid)
        rows.append({'model': model, 'nodes': K, 'ranks_per_node': R, 'row': name,
                     'measured_ms': meas * 1e3, 'predicted_ms': pred * 1e3,
                     'rel_error': abs(pred - meas) / meas})
    return rows


def ofp_tamura_hanawa():
    net = planner.PRESETS['ofp']
    shapes = [(64, 4), (16, 16), (2, 128)]
    out = []
    for algo in ('rsap', 'rsaa'):
        for g in shapes:
            t, parts = planner.predict(algo, 256, 1, MODEL_BYTES['resnet50'], net, g)
            out.append({'algorithm': algo, 'grid': g, 'predicted_ms': t * 1e3,
                        'phases_ms': {k: v * 1e3 for k, v in parts.items()}})
    t, _ = planner.predict('pure_allreduce', 256, 1, MODEL_BYTES['resnet50'], net)
    out.append({'algorithm': 'pure_allreduce', 'grid': None, 'predicted_ms': t * 1e3})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('folder')
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    rows = compare(args.folder)
    if not rows:
        p.error(f'no allreduce-<model>-<K>x<R>.json files in {args.folder}')
    print('{:<9} {:>6} {:<18} {:>12} {:>13} {:>9}'.format(
        'model', 'KxR', 'row', 'measured ms', 'predicted ms', 'error'))
    for r in rows:
        print('{:<9} {:>6} {:<18} {:>12.2f} {:>13.2f} {:>8.0f}%'.format(
            r['model'], '{}x{}'.format(r['nodes'], r['ranks_per_node']), r['row'],
            r['measured_ms'], r['predicted_ms'], 100 * r['rel_error']))
    errs = [r['rel_error'] for r in rows]
    within = sum(e <= 0.3 for e in errs)
    print(f'relative error: median {100 * statistics.median(errs):.0f}%, '
          f'max {100 * max(errs):.0f}%; {within} of {len(errs)} rows within 30%')
    ofp = ofp_tamura_hanawa()
    print('\nOakforest-PACS preset, 256 nodes x 1 rank, ResNet-50 (Tamura & Hanawa found RSAP '
          '(2, 128) fastest, larger M slower):')
    for r in ofp:
        print('  {:<15} {:>9} {:>9.2f} ms'.format(
            r['algorithm'], '' if r['grid'] is None else '({}, {})'.format(*r['grid']),
            r['predicted_ms']))
    rsap = sorted((r for r in ofp if r['algorithm'] == 'rsap'), key=lambda r: r['predicted_ms'])
    order = [tuple(r['grid']) for r in rsap]
    print('  predicted RSAP order: {} -> {}'.format(
        ' < '.join('({}, {})'.format(*g) for g in order),
        'same ranking as the paper' if order == [(2, 128), (16, 16), (64, 4)]
        else 'differs from the paper'))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'rows': rows, 'ofp_paper_grids': ofp}, f, indent=2)


if __name__ == '__main__':
    main()
