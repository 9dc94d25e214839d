#!/usr/bin/env python
"""The mean training image for the ImageNet example (ChainerMN's compute_mean.py).

    python examples/imagenet/compute_mean.py train.txt --root DIR --output mean.npy

Reads every image of the list (``relative/path label`` per line, paths relative to --root)
and saves their mean as float32 in CHW order, the array train_imagenet.py subtracts.
scripts/make_imagenet_subset.py writes its mean.npy with the same function.
"""
import argparse
import os
import sys

# A single-process tool: without this, importing chainermn_torus (which imports
# mpi4py.MPI) would initialise MPI, as a singleton, for nothing.
os.environ.setdefault('MPI4PY_RC_INITIALIZE', '0')

import numpy  # NOQA: E402

from chainermn_torus.datasets.imagenet import compute_mean, read_list  # NOQA: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description='Compute the mean image of a dataset')
    parser.add_argument('dataset', help='list file: "relative/path label" per line')
    parser.add_argument('--root', '-R', default='.',
                        help='directory the list paths are relative to (default: %(default)s)')
    parser.add_argument('--output', '-o', default='mean.npy',
                        help='where to save the mean (default: %(default)s)')
    args = parser.parse_args(argv)

    try:
        pairs = read_list(args.dataset, args.root)

        def report(done, total):
            print(f'\r{done} / {total}', end='', file=sys.stderr, flush=True)
        mean = compute_mean(pairs, report=report)
    except (OSError, ValueError) as e:
        raise SystemExit(f'error: {e}')
    print(file=sys.stderr)
    numpy.save(args.output, mean)
    print(f'{args.output}: mean of {len(pairs)} images, '
          f'shape {mean.shape}, {float(mean.mean()):.2f} on average')


if __name__ == '__main__':
    main()
