"""What snapshots in node memory cost a job that loses nothing (issue 73): the MNIST example
on 2 ranks, 1 epoch of Fashion-MNIST (300 steps), its training time without snapshots and
with ``--memory-snapshots K`` for each K, in turns (the order rotating each round), medians
and ratios to none.

    python scripts/snapshot_cost.py --ks 50 100 200 --rounds 5 --json FILE
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
_TIME = re.compile(r'training time: ([0-9.]+) s')


def run_once(k, where):
    mpiexec = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    cmd = [mpiexec, '-n', '2', sys.executable, EXAMPLE, '--epoch', '1', '--out',
           os.path.join(where, 'out')]
    if k:
        cmd += ['--memory-snapshots', str(k), '--memory-dir', os.path.join(where, 'mem')]
    env = dict(os.environ, OMP_NUM_THREADS='1')
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                         check=True).stdout
    return float(_TIME.search(out).group(1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--ks', type=int, nargs='+', default=[50, 100, 200])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    configs = [0] + args.ks
    times = {k: [] for k in configs}
    where = tempfile.mkdtemp(prefix='snapshot-cost-', dir='/dev/shm')
    try:
        for i in range(args.rounds):
            for k in configs[i % len(configs):] + configs[:i % len(configs)]:
                times[k].append(run_once(k, where))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    none = statistics.median(times[0])
    rows = {}
    for k in configs:
        med = statistics.median(times[k])
        rows[str(k)] = {'seconds': times[k], 'median_s': med, 'ratio_to_none': med / none}
        print('{:>12s}: training time median of {} {:.2f} s, {:.3f} x none'.format(
            'none' if not k else 'K = {}'.format(k), args.rounds, med, med / none),
            flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump({'example': 'mnist', 'ranks': 2, 'epochs': 1, 'rounds': args.rounds,
                       'rows': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
