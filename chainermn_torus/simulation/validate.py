"""Simulated against measured all-reduce times on the emulated cluster, and against the planner.

    chainermn-torus simulate validate docs/measurements/emulated [--out DIR]

For every row ``bench.plan_check`` compares with the alpha-beta planner (the folder's
``allreduce-<model>-<K>x<R>.json`` of ``scripts/bench_emulated.sh``, each with its
``network-<K>x<R>.json`` from ``calibrate``), the same cluster is simulated
(``platforms.emulated``) with the same figures, and both errors are reported:
|predicted - measured| / measured. ``pure_allreduce`` is MPICH's node-aware all-reduce;
``rsap_notify`` is simulated as itself (the planner models it as ``rsap``).
"""
import argparse
import json
import os
import statistics
import sys
import time

from chainermn_torus.planning import planner
from chainermn_torus.planning.measured import measured_rows
from chainermn_torus.simulation import platforms, simulate

__all__ = ['compare', 'summary', 'main']


def compare(folder, library='halving'):
    rows = []
    for model, K, R, name, algo, grid, nbytes, meas, net in measured_rows(folder):
        machine = platforms.emulated(K, R, net)
        t0 = time.time()
        res = simulate.simulate(machine, algo, model, M=grid[0] if grid else 1,
                                library=library)
        pred, _ = planner.predict(algo, K, R, nbytes, net, grid)
        rows.append({'model': model, 'nodes': K, 'ranks_per_node': R, 'row': name,
                     'measured_ms': meas * 1e3, 'simulated_ms': res['seconds'] * 1e3,
                     'planner_ms': pred * 1e3,
                     'sim_error': abs(res['seconds'] - meas) / meas,
                     'planner_error': abs(pred - meas) / meas,
                     'messages': res['messages'], 'wall_s': time.time() - t0})
    return rows


RATES = {'250mbit': 0.25, '500mbit': 0.5, '1gbit': 1.0, '2gbit': 2.0}


def compare_training(folder, network_file, library='halving'):
    """float32 and float16 all-reduce times measured inside real training (the overlap
    sweep on 2 x 2 emulated nodes, ``overlap/sweep-<model>-2x2-<rate>.json``: the median
    per-iteration all-reduce of rsap, which is shm in float32 with rows inside nodes, and of
    rsap+fp16, the message phases in float16), against the simulator. Only 1 Gbit/s was
    calibrated, so the other rates scale its bandwidths (the latencies stay)."""
    base = planner.load_network(network_file)
    rows = []
    for model in ('mlp', 'resnet50'):
        for rate, gbit in RATES.items():
            path = os.path.join(folder, f'sweep-{model}-2x2-{rate}.json')
            if not os.path.exists(path):
                continue
            with open(path) as f:
                measured = {r['config']: r['median_ms']['allreduce']
                            for r in json.load(f)['results']}
            d = base.to_dict()
            d.update(beta_inter=base.beta_inter / gbit, beta_put=base.beta_put / gbit)
            machine = platforms.emulated(2, 2, planner.Network.from_dict(d))
            for config, algo, itemsize in (('rsap', 'shm', 4), ('rsap+fp16', 'rsap', 2)):
                t = simulate.simulate(machine, algo, model, M=2, itemsize=itemsize,
                                      library=library)['seconds'] * 1e3
                meas = measured[config]
                rows.append({'model': model, 'rate': rate, 'config': config,
                             'measured_ms': meas, 'simulated_ms': t,
                             'sim_error': abs(t - meas) / meas})
    return rows


def summary(rows, key):
    errs = [r[key] for r in rows]
    return {'median': statistics.median(errs), 'max': max(errs),
            'within_30': sum(e <= 0.3 for e in errs), 'within_15': sum(e <= 0.15 for e in errs),
            'rows': len(errs)}


def markdown(rows):
    lines = ['| model | K x R | row | measured ms | simulated ms | error | planner ms | '
             'planner error |', '|---|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append('| {} | {}x{} | {} | {:.1f} | {:.1f} | {:.0f}% | {:.1f} | {:.0f}% |'.format(
            r['model'], r['nodes'], r['ranks_per_node'], r['row'], r['measured_ms'],
            r['simulated_ms'], 100 * r['sim_error'], r['planner_ms'],
            100 * r['planner_error']))
    for key, who in (('sim_error', 'simulator'), ('planner_error', 'alpha-beta planner')):
        s = summary(rows, key)
        lines.append('')
        lines.append('{}: median error {:.1f}%, max {:.0f}%, {} of {} rows within 30%, {} '
                     'within 15%'.format(who, 100 * s['median'], 100 * s['max'],
                                         s['within_30'], s['rows'], s['within_15']))
    return '\n'.join(lines) + '\n'


def markdown_training(rows):
    lines = ['| model | link | configuration | measured ms | simulated ms | error |',
             '|---|---|---|---|---|---|']
    lines += ['| {} | {} | {} | {:.1f} | {:.1f} | {:.0f}% |'.format(
        r['model'], r['rate'], r['config'], r['measured_ms'], r['simulated_ms'],
        100 * r['sim_error']) for r in rows]
    s = summary(rows, 'sim_error')
    lines += ['', 'simulator, inside training: median error {:.1f}%, max {:.0f}%, {} of {} rows '
              'within 30%'.format(100 * s['median'], 100 * s['max'], s['within_30'], s['rows'])]
    return '\n'.join(lines) + '\n'


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus simulate validate',
                                description=__doc__.split('\n')[0])
    p.add_argument('folder')
    p.add_argument('--out', default=None, help='write validation.json and validation.md here')
    p.add_argument('--library', default='halving')
    p.add_argument('--training', default=None, metavar='DIR',
                   help='also the all-reduce inside training: DIR of bench_overlap.sh\'s '
                        'sweep-*.json (float32 and float16; docs/measurements/overlap)')
    args = p.parse_args(argv)
    if not simulate.available():
        sys.stderr.write(f'chainermn-torus simulate: {simulate.why_unavailable()}\n')
        return 2
    t0 = time.time()
    rows = compare(args.folder, args.library)
    if not rows:
        p.error(f'no allreduce-<model>-<K>x<R>.json files in {args.folder}')
    text = markdown(rows)
    training = []
    if args.training:
        training = compare_training(args.training, os.path.join(args.folder,
                                                                'network-2x2.json'),
                                    args.library)
        text += ('\n## Inside training, float32 and float16 (2 x '
                 f'2, {args.training})\n\n' + markdown_training(training))
    print(text)
    print(f'({len(rows)} rows simulated in {time.time() - t0:.0f} s)')
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, 'validation.json'), 'w') as f:
            json.dump({'folder': args.folder, 'library': args.library, 'rows': rows,
                       'simulator': summary(rows, 'sim_error'),
                       'planner': summary(rows, 'planner_error'),
                       'training_rows': training,
                       'training': summary(training, 'sim_error') if training else None},
                      f, indent=2)
        with open(os.path.join(args.out, 'validation.md'), 'w') as f:
            f.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
