#!/usr/bin/env python
"""What ``--gpu-to-cpu``'s patches cost Chainer's own code, in one process: the time of
``chainer.backend.get_array_module`` (Chainer's hot path reads ``cuda.available`` there)
and of one MNIST training step through a StandardUpdater (median of ``--steps``), before,
with and after the patches; and, with them, how many frame inspections (``sys._getframe``
calls) and ``get_device`` calls one step makes.

    python scripts/gpu_to_cpu_overhead.py --json docs/measurements/gpu-to-cpu-overhead.json
"""
import argparse
import json
import os
import sys
import statistics
import time
import timeit

import chainermn_torus  # noqa: F401 before Chainer
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
    """Frame inspections and get_device calls in one updater step (patches in force)."""
    counts = {'frame_inspections': 0, 'get_device': 0}
    getframe, get_device = sys._getframe, backend.get_device

    def profile(frame, event, arg):
        if event == 'c_call' and arg is getframe:
            counts['frame_inspections'] += 1

    def counting_get_device(spec):
        counts['get_device'] += 1
        return get_device(spec)

    backend.get_device = counting_get_device
    sys.setprofile(profile)
    try:
        updater.update()
    finally:
        sys.setprofile(None)
        backend.get_device = get_device
    return counts


def _step_ms(updater, steps):
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        updater.update()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--json', default=None)
    parser.add_argument('--steps', type=int, default=200)
    opts = parser.parse_args()
    x = numpy.zeros(3, numpy.float32)
    numpy.random.seed(0)
    model = L.Classifier(MLP(100, 10))
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)
    data = chainer.datasets.TupleDataset(numpy.random.rand(2000, 784).astype(numpy.float32),
                                         numpy.random.randint(0, 10, 2000).astype(numpy.int32))
    updater = chainer.training.updaters.StandardUpdater(
        chainer.iterators.SerialIterator(data, 100), optimizer,
        device=chainer.get_device('@numpy'))
    updater.update()  # the first step sets up the optimizer's state
    before = _ns_per_call(x), _step_ms(updater, opts.steps)
    gpu_to_cpu.install(os.path.join(os.getcwd(), 'not-a-script', 'train.py'), True, rank=0)
    mapped = _ns_per_call(x), _step_ms(updater, opts.steps)
    counts = _counted_step(updater)
    gpu_to_cpu.uninstall()
    after = _ns_per_call(x), _step_ms(updater, opts.steps)
    result = {'get_array_module_ns': {'before': before[0], 'mapped': mapped[0],
                                      'after': after[0]},
              'step_ms': {'before': before[1], 'mapped': mapped[1], 'after': after[1]},
              'per_step': counts}
    print(json.dumps(result, indent=1))
    if opts.json:
        with open(opts.json, 'w') as f:
            json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
