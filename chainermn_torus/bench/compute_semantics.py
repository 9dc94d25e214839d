"""``bench compute-semantics``: the cases where the oneDNN path once behaved otherwise than
Chainer's numpy, each run in both modes, one line per case: the table in docs/compute.md
("Chainer's semantics").

    python -m chainermn_torus.bench.compute_semantics [--json OUT]

Only public calls (``compute.use`` and Chainer's functions), so that the same file runs
against an older checkout (``scripts/with_tree.py TREE -m chainermn_torus.bench.
compute_semantics``) for the "before" column. ``tests/compute/test_semantics.py`` asserts
each case; this prints what each mode gives.
"""
import argparse
import json
import sys
import warnings

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

from chainermn_torus import compute
from chainermn_torus.compute.onednn import binding

__all__ = ['CASES', 'outcome', 'main']


def _u(shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(numpy.float32)


def _values(a):
    a = numpy.asarray(a)
    flat = ', '.join(f'{v:.4g}' for v in a.reshape(-1)[:3])
    return f'{flat} shape {a.shape}'


def _relu_nan():
    return _values(F.relu(numpy.array([numpy.nan, -1, 2], numpy.float32)).array)


def _relu_inf_gradient():
    x = chainer.Variable(numpy.full(5000, -1, numpy.float32))
    y = F.relu(x)
    y.grad = numpy.full(5000, numpy.inf, numpy.float32)
    y.backward()
    return _values(x.grad)


def _max_pooling_nan():
    x = numpy.array([[[[numpy.nan, 1], [2, 3]]]], numpy.float32)
    return _values(F.max_pooling_2d(x, 2).array)


def _nan_weight_loss():
    rng = numpy.random.RandomState(0)
    conv = L.Convolution2D(3, 8, 3, pad=1, initialW=rng.normal(0, .3, (8, 3, 3, 3)))
    conv.W.array[5, 1, 1, 1] = numpy.nan
    bn, fc = L.BatchNormalization(8), L.Linear(8 * 8 * 8, 10)
    x = rng.uniform(-1, 1, (4, 3, 16, 16)).astype(numpy.float32)
    with chainer.using_config('train', True):
        h = F.max_pooling_2d(F.relu(bn(conv(x))), 2)
    return '{:.4g}'.format(float(F.softmax_cross_entropy(
        fc(h), numpy.arange(4, dtype=numpy.int32)).array))


def _relu_0d():
    return f'shape {F.relu(numpy.array(1.5, numpy.float32)).shape}'


def _hinge():
    v = chainer.Variable(numpy.array(0.5, numpy.float32))
    F.relu(1 - F.sum(v)).backward()
    return f'gradient {float(v.grad):.4g}'


def _conv_no_output():
    return f'shape {F.convolution_2d(_u((1, 3, 2, 2)), _u((4, 3, 3, 3))).shape}'


def _pool_no_output():
    return f'shape {F.max_pooling_2d(_u((1, 3, 2, 2)), 3, cover_all=False).shape}'


def _conv_1x1_input():
    return f'shape {F.convolution_2d(_u((1, 3, 1, 1)), _u((4, 3, 3, 3))).shape}'


def _empty_window():
    y = F.max_pooling_2d(_u((1, 1, 3, 3)), 2, stride=2, pad=1).array
    return f'corner {float(y[0, 0, -1, -1]):.5g}'


def _switched(make):
    """On the oneDNN side the forward in oneDNN mode and the backward after switching to
    numpy; on the numpy side both on numpy (the reference)."""
    def run():
        x = chainer.Variable(_u((2, 7, 6, 6)))
        y = make(x)
        y.grad = numpy.ones_like(y.array)
        compute.use('numpy')
        y.backward()
        return f'gradient sum {float(x.grad.sum()):.4g}'
    return run


def _max_pool(x):
    return F.max_pooling_2d(x, 3, 2, 1)


def _lrn(x):
    return F.local_response_normalization(x)


def _lrn_minus_one():
    return _values(F.local_response_normalization(_u((1, 3, 2, 2)), n=-1).array)


def _groups():
    return 'shape {}'.format(F.convolution_2d(_u((1, 4, 5, 5)), _u((3, 2, 3, 3)),
                                              groups=2).shape)


def _bn_axis_list():
    return 'shape {}'.format(F.batch_normalization(_u((4, 3, 2, 2)), _u(3), _u(3),
                                                   axis=[0, 2, 3]).shape)


# (kind of difference, case, function): each run in a mode; its outcome or the exception it raised
CASES = [
    (1, 'relu of [NaN, -1, 2]', _relu_nan),
    (1, 'relu gradient, gy = inf at x = -1', _relu_inf_gradient),
    (1, 'max_pooling_2d of [[NaN, 1], [2, 3]]', _max_pooling_nan),
    (1, 'conv -> BN -> ReLU -> pool -> linear, one NaN weight: the loss', _nan_weight_loss),
    (2, 'relu of a 0-d array', _relu_0d),
    (2, 'relu(1 - sum(v)).backward() (a hinge loss)', _hinge),
    (3, 'convolution_2d, 3 x 3 kernel on a 2 x 2 input', _conv_no_output),
    (3, 'convolution_2d, 3 x 3 kernel on a 1 x 1 input', _conv_1x1_input),
    (3, 'max_pooling_2d, window 3 on 2 x 2, cover_all=False', _pool_no_output),
    (4, 'max_pooling_2d k2 s2 p1 on 3 x 3: the corner window', _empty_window),
    (6, 'max_pooling_2d forward on oneDNN, backward after use(numpy)', _switched(_max_pool)),
    (6, 'LRN forward on oneDNN, backward after use(numpy)', _switched(_lrn)),
    (6, 'local_response_normalization with n=-1', _lrn_minus_one),
    (6, 'convolution_2d, 4 channels into groups=2 with W (3, 2, 3, 3)', _groups),
    (6, 'batch_normalization with axis=[0, 2, 3] (a list)', _bn_axis_list),
]


def outcome(mode, case):
    """What ``case`` gives in ``mode`` ('numpy' or 'onednn'): its result, or the exception's
    type and first line."""
    compute.use(mode)
    try:
        with warnings.catch_warnings(), numpy.errstate(all='ignore'):
            warnings.simplefilter('ignore')
            return case()
    except Exception as e:  # the outcome to compare, whatever it is
        return f'{type(e).__name__}: {str(e).splitlines()[0][:70]}'
    finally:
        compute.use('numpy')


def main(argv=None):
    """Each case of semantics on Chainer's numpy and on the oneDNN path."""
    p = argparse.ArgumentParser(prog='bench compute-semantics', description=main.__doc__)
    p.add_argument('--json', metavar='OUT')
    args = p.parse_args(argv)
    if not binding.available():
        p.exit(2, 'bench compute-semantics: oneDNN is not installed '
                  f'here: {binding.why_unavailable()}\n')
    rows = []
    for item, name, case in CASES:
        numpy_side, onednn_side = outcome('numpy', case), outcome('onednn', case)
        rows.append({'item': item, 'case': name, 'numpy': numpy_side, 'onednn': onednn_side,
                     'same': numpy_side == onednn_side})
        print('{} | {} | {} | {} | {}'.format(item, name, numpy_side, onednn_side,
                                              'same' if rows[-1]['same'] else 'DIFFERS'))
    print('{} of {} cases the same'.format(sum(r['same'] for r in rows), len(rows)))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r['same'] for r in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
