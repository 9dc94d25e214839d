"""``bench compute-memory``: what the oneDNN path keeps resident as input shapes change, against
Chainer's numpy, and how many layer geometries a network keeps (the bound's default).

    python -m chainermn_torus.bench.compute_memory [--sizes 21] [--batch 8] [--channels 64]
        [--resnet-batches 8 2] [--json OUT]

The sweep: one convolution (3 -> ``channels``, 3 x 3, padding 1) + ReLU + 2 x 2 max pooling,
forward and backward, over ``sizes`` square images of 40, 48, ... pixels after a warm-up at
32; each mode in a fresh process (its own baseline), the resident set (RSS) after the last
size and a garbage collection, minus the one after the warm-up. For the oneDNN side also the
geometries kept (``compute.onednn.geometries``) and the scratch buffer (``primitives.scratch``).

The count: ResNet-50 (224 px) trained one step at each of ``resnet-batches`` and evaluated
at each, the geometries made after each (training and evaluation at a new batch size add
theirs; the bound ``CHAINERMN_TORUS_ONEDNN_CACHE`` should hold several such sets).
"""
import argparse
import gc
import json
import os
import subprocess
import sys

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
import psutil

from chainermn_torus import compute
from chainermn_torus.compute.onednn import binding, geometries, primitives
from chainermn_torus.models import ResNet50
from chainermn_torus.runtime.cpu import allocation, threads

__all__ = ['main', 'sweep', 'count']

_CHILD = '--child'


def _as_a_job(mode):
    """This process as process_setup.init leaves a rank's: malloc, compute, then threads."""
    allocation.keep()
    compute.use(mode)
    threads.ensure(None, 2)


def sweep(mode, sizes, batch, channels):
    """In this process: the resident growth over ``sizes`` image sizes in ``mode``."""
    _as_a_job(mode)
    conv = L.Convolution2D(3, channels, 3, pad=1)
    rng = numpy.random.RandomState(0)

    def step(size):
        x = chainer.Variable(rng.uniform(-1, 1, (batch, 3, size, size)).astype(numpy.float32))
        y = F.max_pooling_2d(F.relu(conv(x)), 2)
        F.sum(y).backward()
        conv.cleargrads()

    def rss():
        gc.collect()
        return psutil.Process().memory_info().rss / 2 ** 20
    step(32)
    base = rss()
    last = 40 + 8 * (sizes - 1)
    for size in range(40, last + 1, 8):
        step(size)
    out = {'mode': mode, 'growth_mib': round(rss() - base, 1), 'sizes': [40, last],
           'batch': batch, 'channels': channels}
    if mode == 'onednn':
        out['geometries'] = geometries.stats()
        out['scratch_mib'] = round(primitives.scratch_bytes() / 2 ** 20, 1)
    return out


def count(batches):
    """ResNet-50's geometries after a training step and an evaluation at each batch size."""
    _as_a_job('onednn')
    model = ResNet50(1000)
    rows = []
    for batch in batches:
        x = numpy.zeros((batch, 3, 224, 224), numpy.float32)
        t = numpy.zeros(batch, numpy.int32)
        F.softmax_cross_entropy(model(x), t).backward()
        model.cleargrads()
        trained = geometries.stats()['made']
        with chainer.using_config('train', False), chainer.no_backprop_mode():
            model(x)
        rows.append({'batch': batch, 'made after training': trained,
                     'made after evaluation': geometries.stats()['made']})
    return rows


def _child(args):
    kind = args[0]
    if kind == 'sweep':
        result = sweep(args[1], int(args[2]), int(args[3]), int(args[4]))
    else:
        result = count([int(b) for b in args[1:]])
    print(json.dumps(result))


def _run_child(*args):
    env = dict(os.environ, CHAINERMN_TORUS_QUIET='1')
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.bench.compute_memory', _CHILD]
                          + [str(a) for a in args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f'bench compute-memory: the {args[0]} child '
                         f'failed:\n{proc.stderr[-2000:]}')
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    """Resident memory over many input shapes, numpy against oneDNN; geometries per network."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == _CHILD:
        return _child(argv[1:])
    p = argparse.ArgumentParser(prog='bench compute-memory', description=main.__doc__)
    p.add_argument('--sizes', type=int, default=21, help='image sizes in the sweep (21)')
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--channels', type=int, default=64)
    p.add_argument('--resnet-batches', type=int, nargs='*', default=[8, 2],
                   help='ResNet-50 batch sizes for the geometry count (none: skip it)')
    p.add_argument('--json', metavar='OUT')
    args = p.parse_args(argv)
    for name in ('sizes', 'batch', 'channels'):
        if getattr(args, name) < 1:
            p.error(f'--{name} must be 1 or more, got {getattr(args, name)}')
    modes = ['numpy'] + (['onednn'] if binding.available() else [])
    rows = [_run_child('sweep', mode, args.sizes, args.batch, args.channels) for mode in modes]
    for row in rows:
        extra = '' if row['mode'] == 'numpy' else ', {} geometries kept ({} made), scratch ' \
            '{} MiB'.format(row['geometries']['kept'], row['geometries']['made'],
                            row['scratch_mib'])
        print('{:7s} +{:7.1f} MiB resident after {} sizes ({}-{} px, batch {}){}'.format(
            row['mode'], row['growth_mib'], args.sizes, row['sizes'][0], row['sizes'][1],
            row['batch'], extra))
    result = {'sweep': rows}
    if len(rows) == 2:
        result['onednn_minus_numpy_mib'] = round(rows[1]['growth_mib'] - rows[0]['growth_mib'],
                                                 1)
        print('oneDNN - numpy: {:+.1f} MiB'.format(result['onednn_minus_numpy_mib']))
    if args.resnet_batches and 'onednn' in modes:
        result['resnet50'] = _run_child('count', *args.resnet_batches)
        for row in result['resnet50']:
            print('ResNet-50, batch {}: {} geometries made after training, {} after '
                  'evaluation'.format(row['batch'], row['made after training'],
                                      row['made after evaluation']))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
