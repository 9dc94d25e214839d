"""``bench compute_accuracy``: the examples' test accuracy and loss curves on Chainer's numpy,
on oneDNN and on oneDNN in bfloat16, for several seeds, so that a difference between two
configurations can be read against the spread between seeds.

    python -m chainermn_torus.bench.compute_accuracy [--ranks 2[,4]] [--seeds 0,1]
        [--configs numpy,onednn[,onednn-bf16]] [--examples mnist,imagenet-tiny[,...]]
        [--mnist-epochs 2] [--imagenet-epochs 4] [--imagenet DIR] [--json OUT]

Runs, one after the other, ``examples/mnist/train_mnist.py`` (the MLP on Debian's
Fashion-MNIST) and ``examples/imagenet/train_imagenet.py`` with ``--arch tiny`` or
``resnet50`` (``imagenet-resnet50``, 64 px crops; the JPEG subset
``scripts/make_imagenet_subset.py`` builds, the docs' one) on each ``--ranks`` count for each seed
and configuration: ``numpy`` and ``onednn`` are ``CHAINERMN_TORUS_COMPUTE``, ``onednn-bf16`` is
oneDNN with ``CHAINERMN_TORUS_PRECISION=bf16``. Reads each run's ``summary.json`` and its LogReport
(the validation loss after each epoch). Prints per example the accuracy per seed and
configuration, the largest difference from the first configuration at one seed, the spread
between seeds, whether each other configuration's training-loss curve (its mean over the
seeds) stays inside the band the first one's seeds draw (at every epoch between their
lowest and highest), how far apart the two curves are at one seed against the seeds'
spread at that epoch, and which runs were bit for bit the same (the final test loss equal
to the last digit).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from chainermn_torus import bench

__all__ = ['main', 'CONFIGS', 'inside_band']

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# configuration -> its environment
CONFIGS = {'numpy': {'CHAINERMN_TORUS_COMPUTE': 'numpy'},
           'onednn': {'CHAINERMN_TORUS_COMPUTE': 'onednn'},
           'onednn-bf16': {'CHAINERMN_TORUS_COMPUTE': 'onednn',
                           'CHAINERMN_TORUS_PRECISION': 'bf16'}}
EXAMPLES = ('mnist', 'imagenet-tiny', 'imagenet-resnet50')


def _curves(out):
    """(training loss, validation loss) after each epoch (the LogReport's ``log``)."""
    path = os.path.join(out, 'log')
    if not os.path.exists(path):
        return [], []
    with open(path) as f:
        rows = json.load(f)
    return ([row['main/loss'] for row in rows if 'main/loss' in row],
            [row['validation/main/loss'] for row in rows if 'validation/main/loss' in row])


def _run(ranks, argv, config, out):
    env = dict(os.environ, **CONFIGS[config])
    cmd = [bench.mpiexec(), '-n', str(ranks), sys.executable] + argv
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    path = os.path.join(out, 'summary.json')
    if proc.returncode != 0 or not os.path.exists(path):
        raise SystemExit('bench compute_accuracy: {} failed (exit {}):\n{}'.format(
            ' '.join(argv[:1]), proc.returncode, proc.stdout[-3000:]))
    with open(path) as f:
        summary = json.load(f)
    train, validation = _curves(out)
    return {'accuracy': summary['test_accuracy'], 'loss': summary.get('test_loss'),
            'curve': train, 'validation_curve': validation}


def mean_curve(curves):
    """The mean over seeds, epoch by epoch (as long as the shortest)."""
    n = min(len(c) for c in curves)
    return [sum(c[e] for c in curves) / len(curves) for e in range(n)]


def inside_band(curve, band_curves):
    """The epochs (from 1) where ``curve`` lies outside [lowest, highest] of
    ``band_curves`` (the reference's seeds); [] where it stays inside."""
    outside = []
    for epoch, value in enumerate(curve):
        column = [c[epoch] for c in band_curves if len(c) > epoch]
        if column and not min(column) <= value <= max(column):
            outside.append(epoch + 1)
    return outside


# ResNet-50 on the subset's 72 px images takes 64 px crops, as the tiny network does: its
# global pooling takes any size, and 224 px crops would need a 256 px subset and 12x the
# arithmetic per run for the same comparison. Its learning rate is 0.005: the example's
# default for 2 x 32 images (0.025) diverges within the subset's 15 iterations, in float32
# as in bfloat16.
RESNET50 = ('--crop-size', '64', '--lr', '0.005')


def _examples(args, lists):
    def imagenet(arch, extra=()):
        return lambda out, seed: [
            os.path.join(ROOT, 'examples', 'imagenet', 'train_imagenet.py')] + lists + [
            '--arch', arch, '--epoch', str(args.imagenet_epochs), '--loader', 'serial',
            '--seed', str(seed), '--out', out] + list(extra)
    return {'mnist': lambda out, seed: [os.path.join(ROOT, 'examples', 'mnist',
                                                     'train_mnist.py'),
                                        '--epoch', str(args.mnist_epochs), '--seed',
                                        str(seed), '--out', out],
            'imagenet-tiny': imagenet('tiny'),
            'imagenet-resnet50': imagenet('resnet50', RESNET50)}


def _summarise(by_seed, configs):
    first = configs[0]
    accuracy = {c: [r[c]['accuracy'] for r in by_seed.values()] for c in configs}
    spread = {c: max(v) - min(v) for c, v in accuracy.items()}
    differences = {c: max(abs(r[c]['accuracy'] - r[first]['accuracy'])
                          for r in by_seed.values()) for c in configs[1:]}
    band = [r[first]['curve'] for r in by_seed.values()]
    # the configuration's mean curve over the same seeds against the reference's band: a
    # single seed lies at the band's edge whenever the reference's own run at that seed is
    # the band's edge, so each seed is compared with its own reference run below instead
    outside = {c: inside_band(mean_curve([r[c]['curve'] for r in by_seed.values()]), band)
               for c in configs[1:]}
    # at one seed, epoch by epoch: |configuration - reference| over the reference's spread
    spread_by_epoch = [max(col) - min(col) for col in zip(*band)]
    against_spread = {c: max(abs(a - b) / max(s, 1e-12)
                             for r in by_seed.values()
                             for a, b, s in zip(r[c]['curve'], r[first]['curve'],
                                                spread_by_epoch)) for c in configs[1:]}
    mean = {c: sum(v) / len(v) for c, v in accuracy.items()}
    same = {c: [seed for seed, r in by_seed.items() if r[first]['loss'] is not None
                and r[first]['loss'] == r[c]['loss']] for c in configs[1:]}
    return {'by_seed': by_seed, 'reference': first,
            'largest_difference_from_reference': differences,
            'curve_difference_over_seed_spread': against_spread,
            'spread_between_seeds': spread, 'mean_accuracy': mean,
            'epochs_outside_reference_band': outside, 'identical_seeds': same}


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench compute_accuracy',
                                description=__doc__.split('\n')[0])
    p.add_argument('--ranks', default='2', help='rank counts, comma-separated')
    p.add_argument('--seeds', default='0,1')
    p.add_argument('--configs', default='numpy,onednn',
                   help='the first is the reference: {}'.format(', '.join(CONFIGS)))
    p.add_argument('--examples', default='mnist,imagenet-tiny',
                   help='of: {}'.format(', '.join(EXAMPLES)))
    p.add_argument('--mnist-epochs', type=int, default=2)
    p.add_argument('--imagenet-epochs', type=int, default=4)
    p.add_argument('--imagenet', default=os.path.join(ROOT, 'data', 'imagenet-fmnist'),
                   help='the subset scripts/make_imagenet_subset.py builds')
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(',')]
    ranks = [int(r) for r in args.ranks.split(',')]
    configs = args.configs.split(',')
    examples = args.examples.split(',')
    for name, allowed, given in (('--configs', CONFIGS, configs),
                                 ('--examples', EXAMPLES, examples)):
        bad = [g for g in given if g not in allowed]
        if bad or len(set(given)) != len(given):
            p.error('{} {}: each once, of {}'.format(name, ','.join(given),
                                                     ', '.join(allowed)))
    if len(configs) < 2:
        p.error('--configs: a reference and at least one configuration to compare')
    lists = [os.path.join(args.imagenet, n) for n in ('train.txt', 'val.txt')]
    if any(e.startswith('imagenet') for e in examples) and \
            not all(os.path.exists(path) for path in lists):
        p.error(f'--imagenet {args.imagenet}: no train.txt/val.txt; build it with python '
                f'scripts/make_imagenet_subset.py --out {args.imagenet}')
    makers = _examples(args, lists)
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in examples:
            for n in ranks:
                by_seed = {}
                for seed in seeds:
                    for config in configs:
                        out = os.path.join(tmp, f'{name}-p{n}-{seed}-{config}')
                        r = by_seed.setdefault(str(seed), {})[config] = _run(
                            n, makers[name](out, seed), config, out)
                        print('{:<17} {} ranks seed {} {:<11} accuracy {:.4f} loss {} curve '
                              '{}'.format(name, n, seed, config, r['accuracy'], r['loss'],
                                          ' '.join(f'{v:.4f}' for v in r['curve'])),
                              flush=True)
                key = f'{name} p{n}'
                row = table[key] = _summarise(by_seed, configs)
                for c in configs[1:]:
                    print('{}: {} against {}: accuracy at one seed differs by at most {:.4f}; '
                          'seeds spread {}; mean training-loss curve outside the {} band at '
                          'epochs {}; at one seed the curves differ by at most {:.2f}x the '
                          "seeds' spread; identical runs at seeds {}".format(
                              key, c, configs[0], row['largest_difference_from_reference'][c],
                              ', '.join(f'{v:.4f} ({k})' for k, v in
                                        row['spread_between_seeds'].items()),
                              configs[0], row['epochs_outside_reference_band'][c] or 'none',
                              row['curve_difference_over_seed_spread'][c],
                              row['identical_seeds'][c] or 'none'), flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'ranks': ranks, 'seeds': seeds, 'configs': configs,
                       'mnist_epochs': args.mnist_epochs,
                       'imagenet_epochs': args.imagenet_epochs, 'results': table}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
