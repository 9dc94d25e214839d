"""``bench compute_accuracy``: the examples' test accuracy on Chainer's numpy and on oneDNN,
for several seeds, so that a difference between the two can be read against the spread
between seeds.

    python -m chainermn_torus.bench.compute_accuracy [--ranks 2] [--seeds 0,1]
        [--mnist-epochs 2] [--imagenet-epochs 4] [--imagenet DIR] [--json OUT]

Runs, one after the other, ``examples/mnist/train_mnist.py`` (the MLP on Debian's
Fashion-MNIST) and ``examples/imagenet/train_imagenet.py --arch tiny`` (the JPEG subset
``scripts/make_imagenet_subset.py`` builds, the docs' one) on ``--ranks`` ranks with
``CHAINERMN_TORUS_COMPUTE`` numpy and onednn for each seed, and reads each run's
``summary.json``. Prints per example the accuracy per seed and mode, the largest difference
between the modes at one seed, and the spread between seeds in one mode; and says which
runs were bit for bit the same (the final test loss equal to the last digit).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from chainermn_torus import bench

__all__ = ['main']

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ('numpy', 'onednn')


def _run(ranks, argv, mode, out):
    env = dict(os.environ, CHAINERMN_TORUS_COMPUTE=mode)
    cmd = [bench.mpiexec(), '-n', str(ranks), sys.executable] + argv
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    path = os.path.join(out, 'summary.json')
    if proc.returncode != 0 or not os.path.exists(path):
        raise SystemExit('bench compute_accuracy: {} failed (exit {}):\n{}'.format(
            ' '.join(argv[:1]), proc.returncode, proc.stdout[-3000:]))
    with open(path) as f:
        return json.load(f)


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench compute_accuracy',
                                description=__doc__.split('\n')[0])
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--seeds', default='0,1')
    p.add_argument('--mnist-epochs', type=int, default=2)
    p.add_argument('--imagenet-epochs', type=int, default=4)
    p.add_argument('--imagenet', default=os.path.join(ROOT, 'data', 'imagenet-fmnist'),
                   help='the subset scripts/make_imagenet_subset.py builds')
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(',')]
    lists = [os.path.join(args.imagenet, n) for n in ('train.txt', 'val.txt')]
    if not all(os.path.exists(l) for l in lists):
        p.error('--imagenet {}: no train.txt/val.txt; build it with python '
                'scripts/make_imagenet_subset.py --out {}'.format(args.imagenet, args.imagenet))
    examples = {
        'mnist': lambda out, seed: [os.path.join(ROOT, 'examples', 'mnist', 'train_mnist.py'),
                                    '--epoch', str(args.mnist_epochs), '--seed', str(seed),
                                    '--out', out],
        'imagenet-tiny': lambda out, seed: [
            os.path.join(ROOT, 'examples', 'imagenet', 'train_imagenet.py')] + lists + [
            '--arch', 'tiny', '--epoch', str(args.imagenet_epochs), '--loader', 'serial',
            '--seed', str(seed), '--out', out],
    }
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in examples.items():
            for seed in seeds:
                for mode in MODES:
                    out = os.path.join(tmp, '{}-{}-{}'.format(name, seed, mode))
                    s = _run(args.ranks, make(out, seed), mode, out)
                    results.setdefault(name, {}).setdefault(str(seed), {})[mode] = {
                        'accuracy': s['test_accuracy'], 'loss': s.get('test_loss')}
                    print('{:<14} seed {} {:<7} accuracy {:.4f} loss {}'.format(
                        name, seed, mode, s['test_accuracy'], s.get('test_loss')), flush=True)
    table = {}
    for name, by_seed in results.items():
        between_modes = max(abs(r['numpy']['accuracy'] - r['onednn']['accuracy'])
                            for r in by_seed.values())
        spread = {m: max(r[m]['accuracy'] for r in by_seed.values()) -
                  min(r[m]['accuracy'] for r in by_seed.values()) for m in MODES}
        same = [seed for seed, r in by_seed.items()
                if r['numpy']['loss'] is not None and r['numpy']['loss'] == r['onednn']['loss']]
        table[name] = {'by_seed': by_seed, 'largest_difference_between_modes': between_modes,
                       'spread_between_seeds': spread, 'identical_seeds': same}
        print('{}: numpy vs oneDNN at one seed differ by at most {:.4f}; seeds spread {:.4f} '
              '(numpy), {:.4f} (oneDNN); identical runs at seeds {}'.format(
                  name, between_modes, spread['numpy'], spread['onednn'], same or 'none'))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'ranks': args.ranks, 'seeds': seeds, 'mnist_epochs': args.mnist_epochs,
                       'imagenet_epochs': args.imagenet_epochs, 'results': table}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
