#!/usr/bin/env python
"""What ``--gpu-to-cpu``'s patches cost Chainer's own code, in one process: the time of
``chainer.backend.get_array_module`` (which reads ``cuda.available`` through the mapped
module's property) before, with and after the patches, and how many such reads and how many
``get_device`` calls one MNIST training step through a StandardUpdater makes.

    python scripts/gpu_to_cpu_overhead.py --json docs/measurements/gpu-to-cpu-overhead.json
"""
import argparse
import json
import os
import sys
import timeit

import chainermn_torus  # noqa: F401 (before Chainer)
import chainer
import chainer.links as L
import numpy
from chainer import backend

from chainermn_torus.launch import gpu_to_cpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'tests', 'unchanged', 'gpu'))
from chainermn_mnist import MLP  # noqa: E402 (the GPU-written MNIST script's model)


def _ns_per_call(x):
    return min(timeit.repeat(lambda: backend.get_array_module(x), number=200000,
                             repeat=5)) / 200000 * 1e9


def _counted_step(updater):
    """Reads of cuda.available and get_device calls in one updater step (patches in force)."""
    cls, counts = type(chainer.backends.cuda), {'available': 0, 'get_device': 0}
    read, get_device = cls.available, backend.get_device

    def counting_read(module):
        counts['available'] += 1
        return read.fget(module)

    def counting_get_device(spec):
        counts['get_device'] += 1
        return get_device(spec)

    cls.available, backend.get_device = property(counting_read, read.fset), counting_get_device
    try:
        updater.update()
    finally:
        cls.available, backend.get_device = read, get_device
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--json', default=None)
    opts = parser.parse_args()
    x = numpy.zeros(3, numpy.float32)
    before = _ns_per_call(x)
    gpu_to_cpu.install(os.path.join(os.getcwd(), 'not-a-script', 'train.py'), True, rank=0)
    mapped = _ns_per_call(x)
    numpy.random.seed(0)
    model = L.Classifier(MLP(100, 10))
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)
    data = chainer.datasets.TupleDataset(numpy.random.rand(200, 784).astype(numpy.float32),
                                         numpy.random.randint(0, 10, 200).astype(numpy.int32))
    updater = chainer.training.updaters.StandardUpdater(
        chainer.iterators.SerialIterator(data, 100), optimizer,
        device=chainer.get_device('@numpy'))
    updater.update()  # the first step sets up the optimizer's state
    counts = _counted_step(updater)
    gpu_to_cpu.uninstall()
    after = _ns_per_call(x)
    result = {'get_array_module_ns': {'before': before, 'mapped': mapped, 'after': after},
              'per_step': counts}
    print(json.dumps(result, indent=1))
    if opts.json:
        with open(opts.json, 'w') as f:
            json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
