"""A loader process's start, in CPU seconds, with and without the training script imported
again in it (chainermn_torus/loader/spawning.py), interleaved in one run.

    .venv/bin/python scripts/loader_start_cost.py [--rounds N] [--json FILE]

This file plays the training script: it imports Chainer before the package, as a script
does. Each round starts one LoaderIterator of one loader over a TupleDataset, takes a batch
and finalizes it; the loader's CPU is what the round adds to RUSAGE_CHILDREN. "script" is
the way before spawning.py (the child imports this file first), "package" the way now.
"""
import argparse
import json
import platform
import resource
import statistics

import chainer  # first, as a training script imports it
import numpy

from chainermn_torus.loader import LoaderIterator, iterator


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_start(with_script):
    dataset = chainer.datasets.TupleDataset(numpy.zeros((100, 3, 4, 4), numpy.float32),
                                            numpy.zeros(100, numpy.int32))
    walk = iterator.spawning.needs_script
    if with_script:  # the child imports this file again, as every loader did before
        iterator.spawning.needs_script = lambda args: True
    before = _children_cpu()
    try:
        it = LoaderIterator(dataset, 10, n_processes=1)
        it.next()
        it.finalize()
    finally:
        iterator.spawning.needs_script = walk
    return _children_cpu() - before


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--json', default=None)
    args = p.parse_args(argv)
    seconds = {'script': [], 'package': []}
    for _ in range(args.rounds):
        for way in ('script', 'package'):
            seconds[way].append(one_start(way == 'script'))
    medians = {k: statistics.median(v) for k, v in seconds.items()}
    result = {'machine': platform.processor() or platform.machine(), 'rounds': args.rounds,
              'cpu_s': seconds, 'median_cpu_s': medians,
              'package_over_script': medians['package'] / medians['script']}
    print('loader start, median of {} (CPU-s): with the script {:.3f}, without {:.3f} '
          '({:.2f}x)'.format(args.rounds, medians['script'], medians['package'],
                             result['package_over_script']))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
