"""How close the exact sum's mean is to a float64 mean, against the plain float32 mean, on
ResNet-50's real gradients (no MPI: the sums are the same arithmetic the ranks do).

    python -m chainermn_torus.bench.exact_accuracy TRAIN_LIST [--ranks 2 4 6] [--json F]

TRAIN_LIST is an ImageNet-format list (``scripts/make_imagenet_subset.py`` builds one of real
JPEGs from Fashion-MNIST). ResNet-50 (random initial weights, the examples' model) runs
forward and backward on one batch of those images per rank; for P ranks the mean of the P
gradients is taken three ways:

  float64   the reference: float64 sums of the float32 gradients;
  plain     float32 sums in rank order, divided by P in float32: what a float32 all-reduce
            computes, in one of its orders (MPI's and the grid's orders round the same way,
            elsewhere);
  exact     ``algorithms.fixed_point`` with P terms: what ``exact_sum=True`` gives on any P,
            grid and algorithm.

Per array it reports both means' largest distance to the reference relative to the array's
largest magnitude, how many elements of at least 2^-24 of that largest are farther from the
reference in the exact mean than in the plain one (the claim is none), and the exact mean's
largest distance below that threshold (the grid's unit: the bound docs/communicators.md states).
"""
import argparse
import json
import os
import platform
import sys
import time

import chainermn_torus  # noqa: F401 first: Chainer imports after it on Python 3.12

import chainer
import chainer.functions as F
import numpy

from chainermn_torus.algorithms import fixed_point
from chainermn_torus.models import ResNet50

__all__ = ['gradients', 'compare', 'main']

THRESHOLD = 2.0 ** -24   # relative to the array's largest: where the claim applies


def gradients(list_path, ranks, batch, crop, seed=0):
    """ResNet-50's gradients on ``ranks`` batches of ``batch`` images each (one per rank):
    a list over ranks of {parameter name: float32 gradient}."""
    root = os.path.dirname(os.path.abspath(list_path))
    data = chainer.datasets.LabeledImageDataset(list_path, root)
    numpy.random.seed(seed)
    model = ResNet50(int(max(data[i][1] for i in range(len(data)))) + 1)
    out = []
    for r in range(ranks):
        images, labels = [], []
        for i in range(batch):
            image, label = data[(r * batch + i) % len(data)]
            images.append(image[:, :crop, :crop] / 255.0)
            labels.append(label)
        x = numpy.asarray(images, numpy.float32)
        model.cleargrads()
        with chainer.using_config('train', True):
            loss = F.softmax_cross_entropy(model(x), numpy.asarray(labels, numpy.int32))
        loss.backward()
        out.append({n: p.grad.copy() for n, p in sorted(model.namedparams())
                    if p.grad is not None})
    return out


def compare(grads):
    """Per array, the three means' distances (module docstring); ``grads``: one dict of
    float32 arrays per rank."""
    P = len(grads)
    rows = []
    for name in grads[0]:
        xs = [g[name].reshape(-1) for g in grads]
        ref = numpy.sum([x.astype(numpy.float64) for x in xs], axis=0) / P
        plain = xs[0].copy()
        for x in xs[1:]:
            plain += x
        plain /= numpy.float32(P)
        top = max(float(numpy.abs(x).max()) for x in xs)
        s = int(fixed_point.scales([top], P)[0])
        total = numpy.sum([fixed_point.encode(x, s) for x in xs], axis=0)
        exact = fixed_point.decode(total, s, P)
        largest = float(numpy.abs(ref).max()) or 1.0
        err_plain = numpy.abs(plain - ref)
        err_exact = numpy.abs(exact - ref)
        big = numpy.abs(ref) >= THRESHOLD * largest
        rows.append({
            'array': name, 'size': int(ref.size),
            'plain_max_rel': float(err_plain.max() / largest),
            'exact_max_rel': float(err_exact.max() / largest),
            'exact_farther': int(numpy.count_nonzero(big & (err_exact > err_plain))),
            'exact_closer': int(numpy.count_nonzero(big & (err_exact < err_plain))),
            'elements_above_threshold': int(numpy.count_nonzero(big)),
            'exact_below_threshold_max_rel': float(
                err_exact[~big].max() / largest) if (~big).any() else 0.0,
        })
    return rows


def summary(rows):
    return {
        'arrays': len(rows),
        'elements': sum(r['size'] for r in rows),
        'elements_above_threshold': sum(r['elements_above_threshold'] for r in rows),
        'exact_farther': sum(r['exact_farther'] for r in rows),
        'exact_closer': sum(r['exact_closer'] for r in rows),
        'arrays_exact_max_rel_above_plain': sum(
            r['exact_max_rel'] > r['plain_max_rel'] for r in rows),
        'plain_max_rel_median': float(numpy.median([r['plain_max_rel'] for r in rows])),
        'exact_max_rel_median': float(numpy.median([r['exact_max_rel'] for r in rows])),
        'exact_below_threshold_max_rel': max(r['exact_below_threshold_max_rel'] for r in rows),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('train_list')
    ap.add_argument('--ranks', type=int, nargs='+', default=[2, 4, 6])
    ap.add_argument('--batch', type=int, default=4)
    ap.add_argument('--crop', type=int, default=64)
    ap.add_argument('--json', metavar='FILE')
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    grads = gradients(args.train_list, max(args.ranks), args.batch, args.crop)
    report = {'model': 'resnet50', 'batch': args.batch, 'crop': args.crop,
              'host': platform.node(), 'seconds_for_gradients': time.perf_counter() - t0,
              'by_ranks': {}}
    for P in args.ranks:
        rows = compare(grads[:P])
        report['by_ranks'][str(P)] = {'summary': summary(rows), 'arrays': rows}
        s = report['by_ranks'][str(P)]['summary']
        print(f'P = {P}: {s["arrays"]} arrays, {s["elements"]:,} elements; at least 2^-24 of '
              f'their array\'s largest: {s["elements_above_threshold"]:,}, the exact mean '
              f'farther from float64 than the plain one at {s["exact_farther"]}, closer at '
              f'{s["exact_closer"]:,}; median over arrays of the largest distance / largest: '
              f'plain {s["plain_max_rel_median"]:.3g}, exact {s["exact_max_rel_median"]:.3g}; '
              f'below the threshold the exact mean is within '
              f'{s["exact_below_threshold_max_rel"]:.3g} of the largest')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(report, f, indent=1)
    return 0 if all(v['summary']['exact_farther'] == 0
                    for v in report['by_ranks'].values()) else 1


if __name__ == '__main__':
    sys.exit(main())
