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

__all__ = ['compare', 'summary', 'main']


def compare(folder, library='halving'):
    from chainermn_torus.bench import plan_check
    from chainermn_torus.planning import planner
    from chainermn_torus.simulation import platforms, simulate
    rows = []
    for model, K, R, name, algo, grid, nbytes, meas, net in plan_check.measured_rows(folder):
        machine = platforms.emulated(K, R, net)
        simulated = ('pure_allreduce' if algo.startswith('pure') else
                     'rsap_notify' if name.startswith('rsap_notify') else algo)
        t0 = time.time()
        res = simulate.simulate(machine, simulated, model, M=grid[0] if grid else 1,
                                library=library)
        pred, _ = planner.predict(algo, K, R, nbytes, net, grid)
        rows.append({'model': model, 'nodes': K, 'ranks_per_node': R, 'row': name,
                     'measured_ms': meas * 1e3, 'simulated_ms': res['seconds'] * 1e3,
                     'planner_ms': pred * 1e3,
                     'sim_error': abs(res['seconds'] - meas) / meas,
                     'planner_error': abs(pred - meas) / meas,
                     'messages': res['messages'], 'wall_s': time.time() - t0})
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


def main(argv=None):
    from chainermn_torus.simulation import simulate
    p = argparse.ArgumentParser(prog='chainermn-torus simulate validate',
                                description=__doc__.split('\n')[0])
    p.add_argument('folder')
    p.add_argument('--out', default=None, help='write validation.json and validation.md here')
    p.add_argument('--library', default='halving')
    args = p.parse_args(argv)
    if not simulate.available():
        sys.stderr.write('chainermn-torus simulate: {}\n'.format(simulate.why_unavailable()))
        return 2
    t0 = time.time()
    rows = compare(args.folder, args.library)
    if not rows:
        p.error('no allreduce-<model>-<K>x<R>.json files in {}'.format(args.folder))
    text = markdown(rows)
    print(text)
    print('({} rows simulated in {:.0f} s)'.format(len(rows), time.time() - t0))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, 'validation.json'), 'w') as f:
            json.dump({'folder': args.folder, 'library': args.library, 'rows': rows,
                       'simulator': summary(rows, 'sim_error'),
                       'planner': summary(rows, 'planner_error')}, f, indent=2)
        with open(os.path.join(args.out, 'validation.md'), 'w') as f:
            f.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
