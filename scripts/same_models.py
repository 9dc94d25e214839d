"""Whether two checkouts of the package train the same models, bit for bit:

    python scripts/same_models.py OLD_TREE NEW_TREE [--json FILE]

(a tree: ``git worktree add /tmp/old COMMIT``). Each tree runs, through scripts/with_tree.py,
one thread a rank:

* the MNIST example, 1 epoch of 2,000 images, 100 units, with naive, rsap, rsaa and
  pure_allreduce on 2 and 3 ranks: its ``model_final.npz`` compared array by array, every
  bit;
* the ImageNet example, the tiny network (BatchNormalization) on real JPEGs (the Fashion-MNIST
  subset of scripts/make_imagenet_subset.py), 2 ranks, 1 epoch, the serial loader and rsap:
  it saves no model, so its logged losses and accuracies and its final test loss and
  accuracy are compared, every digit.

Prints one line per case and exits 1 if any differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(HERE, '.venv', 'bin', 'python')
MPIEXEC = os.path.join(HERE, '.venv', 'bin', 'mpiexec')
WITH_TREE = os.path.join(HERE, 'scripts', 'with_tree.py')
DATA = os.environ.get('DATA_DIR', '/usr/share/datasets/fashion-mnist')
MNIST_CASES = [(c, p) for c in ('naive', 'rsap', 'rsaa', 'pure_allreduce') for p in (2, 3)]


def _run(tree, nprocs, argv):
    env = dict(os.environ, CHAINERMN_TORUS_THREADS='1', CHAINERMN_TORUS_QUIET='1')
    proc = subprocess.run([MPIEXEC, '-n', str(nprocs), PY, WITH_TREE, tree] + argv,
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit('{} failed in {}:\n{}'.format(argv[0], tree, proc.stdout[-2000:] +
                                                       proc.stderr[-2000:]))


def mnist(tree, out, communicator, nprocs):
    _run(tree, nprocs, [os.path.join(tree, 'examples', 'mnist', 'train_mnist.py'),
                        '--communicator', communicator, '--epoch', '1', '--limit', '2000',
                        '--unit', '100', '--data-dir', DATA, '--out', out])
    with numpy.load(os.path.join(out, 'model_final.npz')) as f:
        return {k: f[k].copy() for k in f.files}


def imagenet(tree, out, lists):
    _run(tree, 2, [os.path.join(tree, 'examples', 'imagenet', 'train_imagenet.py')] + lists + [
        '--arch', 'tiny', '--loader', 'serial', '--epoch', '1', '--crop-size', '32',
        '--batchsize', '5', '--communicator', 'rsap', '--out', out])
    with open(os.path.join(out, 'summary.json')) as f:
        summary = json.load(f)
    with open(os.path.join(out, 'log')) as f:
        log = json.load(f)
    keys = [k for k in log[-1] if 'loss' in k or 'accuracy' in k]
    return {'test_loss': summary['test_loss'], 'test_accuracy': summary['test_accuracy'],
            'log': [{k: e.get(k) for k in keys} for e in log]}


def same_arrays(a, b):
    if sorted(a) != sorted(b):
        return False, 'different arrays'
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or \
                a[k].tobytes() != b[k].tobytes():
            worst = float(numpy.abs(a[k].astype(numpy.float64) - b[k]).max())
            return False, f'array {k} differs (max |d| {worst:.3g})'
    return True, f'{len(a)} arrays, every bit'


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('old')
    p.add_argument('new')
    p.add_argument('--json', default=None)
    args = p.parse_args()
    trees = {'old': os.path.abspath(args.old), 'new': os.path.abspath(args.new)}
    results, ok = {}, True
    with tempfile.TemporaryDirectory() as tmp:
        for communicator, nprocs in MNIST_CASES:
            got = {side: mnist(tree, os.path.join(tmp, f'mnist-{communicator}-{nprocs}-{side}'),
                               communicator, nprocs) for side, tree in trees.items()}
            same, why = same_arrays(got['old'], got['new'])
            results[f'mnist {communicator} P={nprocs}'] = {'same': same, 'detail': why}
            ok &= same
            print(f'mnist {communicator} P={nprocs}: {"same" if same else "DIFFERENT"} ({why})',
                  flush=True)
        subset = os.path.join(tmp, 'subset')
        subprocess.run([PY, os.path.join(HERE, 'scripts', 'make_imagenet_subset.py'), '--out',
                        subset, '--per-class', '4', '--val-per-class', '2', '--size', '40'],
                       check=True, capture_output=True, timeout=300)
        lists = [os.path.join(subset, 'train.txt'), os.path.join(subset, 'val.txt')]
        got = {side: imagenet(tree, os.path.join(tmp, f'imagenet-{side}'), lists)
               for side, tree in trees.items()}
        same = got['old'] == got['new']
        results['imagenet tiny rsap P=2'] = {'same': same, 'old': got['old'], 'new': got['new']}
        ok &= same
        print(f'imagenet tiny rsap P=2: {"same" if same else "DIFFERENT"} (test loss '
              f'{got["old"]["test_loss"]!r} / {got["new"]["test_loss"]!r}, '
              f'{len(got["new"]["log"])} log entries)', flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'trees': trees, 'results': results}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
