#!/usr/bin/env python3
"""What the same bits on any number of nodes cost a whole iteration, and what the exact sum
does to accuracy (issue 85): the examples run as users run them, in turns, same machine.

    .venv/bin/python scripts/bench_virtual_ranks.py [--rounds 3] [--ranks 2] [--json FILE]

Iterations: the tiny ImageNet example (``--arch tiny``, BatchNormalization, the loader) and
the MNIST example (communication-heavy), each on P ranks:

* ``plain``: the sum in float32; ``exact``: ``--exact-sum``; ``virtual P``: ``--virtual-ranks
  P`` (one virtual rank a process: the exact sum and the virtual-rank updater);
* ``virtual 2P``: ``--virtual-ranks 2P`` on the same P processes, against twice ``virtual
  P``: what holding two virtual ranks costs beyond their compute.

The ImageNet example's iteration is its median step (``breakdown.json``: the first two steps
left out); MNIST's is its training time over its gradient calls. Each round runs every
configuration once, in a rotated order; the figures are medians over rounds, and each ratio
the median of the per-round ratios (paired: the same round's runs).

Accuracy (``--accuracy``; ``--rounds 0`` for it alone): the MNIST example's test accuracy
after 3 epochs, plain and ``--exact-sum``, for seeds 0, 1, 2 (at P = 2 both means are
correctly rounded, so the same: P = 4 tells them apart).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, '.venv', 'bin', 'python')
MPIEXEC = os.path.join(ROOT, '.venv', 'bin', 'mpiexec')
MNIST = os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py')
IMAGENET = os.path.join(ROOT, 'examples', 'imagenet', 'train_imagenet.py')
SUBSET = os.path.join(ROOT, 'scripts', 'make_imagenet_subset.py')


def configs(P):
    return {'plain': [], 'exact': ['--exact-sum'], f'virtual {P}': ['--virtual-ranks', str(P)],
            f'virtual {2 * P}': ['--virtual-ranks', str(2 * P)]}


def run(P, argv, out):
    env = dict(os.environ, CHAINERMN_TORUS_THREADS='1')
    proc = subprocess.run([MPIEXEC, '-n', str(P), PY] + argv + ['--out', out],
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f'{" ".join(argv)}: exit {proc.returncode}\n{proc.stdout[-2000:]}'
                         f'{proc.stderr[-2000:]}')
    with open(os.path.join(out, 'summary.json')) as f:
        summary = json.load(f)
    if os.path.exists(os.path.join(out, 'breakdown.json')):
        with open(os.path.join(out, 'breakdown.json')) as f:
            return summary, json.load(f)['median_ms']['iteration']
    return summary, 1e3 * summary['train_seconds'] / summary['gradient_communication_calls']


def iterations(P, rounds, work):
    lists = os.path.join(work, 'imagenet')
    subprocess.run([PY, SUBSET, '--out', lists, '--per-class', '40', '--val-per-class', '4',
                    '--size', '72'], check=True, capture_output=True)
    jobs = {
        'imagenet-tiny': [IMAGENET, os.path.join(lists, 'train.txt'),
                          os.path.join(lists, 'val.txt'), '--arch', 'tiny', '--loader', 'ours',
                          '--epoch', '1', '--batchsize', '16'],
        'mnist': [MNIST, '--communicator', 'rsap', '--epoch', '1', '--limit', '12000',
                  '--batchsize', '50'],
    }
    names = list(configs(P))
    out = {}
    for job, argv in jobs.items():
        ms = {n: [] for n in names}
        for r in range(rounds):
            for k in range(len(names)):
                name = names[(k + r) % len(names)]
                _, t = run(P, argv + configs(P)[name], os.path.join(work, f'{job}-{r}-{k}'))
                ms[name].append(t)
            print(job, r, {n: round(v[-1], 2) for n, v in ms.items()}, flush=True)
        half = f'virtual {2 * P}'

        def paired(a, b, times=1.0):
            return statistics.median(x / (times * y) for x, y in zip(ms[a], ms[b]))
        out[job] = {'ms': ms, 'median_ms': {n: statistics.median(v) for n, v in ms.items()},
                    'exact_over_plain': paired('exact', 'plain'),
                    f'virtual_{P}_over_plain': paired(f'virtual {P}', 'plain'),
                    f'virtual_{2 * P}_over_twice_virtual_{P}': paired(half, f'virtual {P}',
                                                                      2.0)}
    return out


def accuracy(P, work):
    out = {}
    for seed in (0, 1, 2):
        for name, extra in (('plain', []), ('exact', ['--exact-sum'])):
            summary, _ = run(P, [MNIST, '--communicator', 'rsap', '--epoch', '3', '--seed',
                                 str(seed)] + extra, os.path.join(work, f'acc-{seed}-{name}'))
            out.setdefault(name, []).append(summary['test_accuracy'])
            print('accuracy', seed, name, summary['test_accuracy'], flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--accuracy', action='store_true', help='the 3 seeds of MNIST too')
    p.add_argument('--json', default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix='bench-virtual-') as work:
        data = {'ranks': args.ranks, 'rounds': args.rounds, 'threads_per_rank': 1}
        if args.rounds:   # --rounds 0: the accuracy alone
            data['iterations'] = iterations(args.ranks, args.rounds, work)
        if args.accuracy:
            data['accuracy'] = accuracy(args.ranks, work)
    text = json.dumps(data, indent=1)
    print(text)
    if args.json:
        with open(args.json, 'w') as f:
            f.write(text + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
