"""``bench compute_numerics``: each function oneDNN (or numba) computes here against
Chainer's numpy on the same inputs, through Chainer's own functions: the largest difference
of every output and gradient, beside the largest value, per parameter set.

    python -m chainermn_torus.bench.compute_numerics [--precision bf16] [--json OUT]

The parameter sets are those of Chainer's own tests of each function (its shapes, strides,
paddings, ``cover_all``, groups, dilation, window sizes), plus ResNet-50's shapes at batch
2. Each case runs the function forward and backward (gy drawn with a fixed seed) once on
Chainer's numpy and once with ``chainermn_torus.compute`` enabled. With ``--precision bf16``
the functions bfloat16 changes (convolution, deconvolution, linear: the MNIST MLP's and
ResNet-50's last layer too) run on oneDNN in float32, then in bfloat16: the table is what
bfloat16 costs in accuracy, function by function.
"""
import argparse
import json

import chainer
import chainer.functions as F
import numpy

from chainermn_torus import command_line, compute
from chainermn_torus.compute import replacements

__all__ = ['CASES', 'run_case', 'main']


def _conv(x_shape, w_shape, stride=1, pad=0, cover_all=False, dilate=1, groups=1,
          bias=True):
    def make(rng):
        x = rng.uniform(-1, 1, x_shape).astype(numpy.float32)
        W = rng.normal(0, 1 / numpy.sqrt(numpy.prod(w_shape[1:])), w_shape).astype(
            numpy.float32)
        b = rng.uniform(-1, 1, w_shape[0]).astype(numpy.float32) if bias else None
        inputs = [x, W] + ([b] if bias else [])
        names = ['x', 'W'] + (['b'] if bias else [])
        return inputs, names, lambda *v: F.convolution_2d(
            v[0], v[1], v[2] if bias else None, stride, pad, cover_all=cover_all,
            dilate=dilate, groups=groups)
    text = 'x {} W {} stride {} pad {}{}{}{}{}'.format(
        x_shape, w_shape, stride, pad, ' cover_all' if cover_all else '',
        f' dilate {dilate}' if dilate != 1 else '',
        f' groups {groups}' if groups != 1 else '', '' if bias else ' nobias')
    return 'convolution_2d', text, make


def _deconv(x_shape, w_shape, stride=1, pad=0, outsize=None):
    def make(rng):
        x = rng.uniform(-1, 1, x_shape).astype(numpy.float32)
        W = rng.normal(0, 0.3, w_shape).astype(numpy.float32)
        b = rng.uniform(-1, 1, w_shape[1]).astype(numpy.float32)
        return [x, W, b], ['x', 'W', 'b'], lambda x, W, b: F.deconvolution_2d(
            x, W, b, stride, pad, outsize)
    return 'deconvolution_2d', (f'x {x_shape} W {w_shape} stride {stride} pad {pad} '
                                f'outsize {outsize}'), make


def _linear(x_shape, w_shape, bias=True):
    def make(rng):
        x = rng.uniform(-1, 1, x_shape).astype(numpy.float32)
        W = rng.normal(0, 1 / numpy.sqrt(w_shape[1]), w_shape).astype(numpy.float32)
        b = rng.uniform(-1, 1, w_shape[0]).astype(numpy.float32)
        inputs, names = ([x, W, b], ['x', 'W', 'b']) if bias else ([x, W], ['x', 'W'])
        return inputs, names, lambda *v: F.linear(*v)
    return 'linear', 'x {} W {}{}'.format(x_shape, w_shape, '' if bias else ' nobias'), make


def _bn(shape, eps=2e-5, fixed=False):
    """batch_normalization in training, or with ``fixed`` given statistics (inference)."""
    def make(rng):
        c = shape[1]
        x = rng.normal(2, 3, shape).astype(numpy.float32)
        g = rng.uniform(0.5, 1.5, c).astype(numpy.float32)
        b = rng.uniform(-1, 1, c).astype(numpy.float32)
        if not fixed:
            return [x, g, b], ['x', 'gamma', 'beta'], lambda x, g, b: F.batch_normalization(
                x, g, b, eps=eps)
        m = rng.uniform(-1, 1, c).astype(numpy.float32)
        v = rng.uniform(0.5, 2, c).astype(numpy.float32)
        return [x, g, b], ['x', 'gamma', 'beta'], lambda x, g, b: \
            F.fixed_batch_normalization(x, g, b, m, v, eps=eps)
    name = 'fixed_batch_normalization' if fixed else 'batch_normalization'
    return name, f'x {shape} eps {eps}', make


def _relu(shape):
    def make(rng):
        return [rng.normal(0, 1, shape).astype(numpy.float32)], ['x'], F.relu
    return 'relu', f'x {shape}', make


def _pool(kind, shape, ksize, stride, pad, cover_all=True):
    def make(rng):
        # distinct values: a maximum with ties has more than one right gradient
        x = (rng.permutation(int(numpy.prod(shape))).reshape(shape) * 2.0 /
             numpy.prod(shape) - 1).astype(numpy.float32)
        if kind == 'max':
            return [x], ['x'], lambda x: F.max_pooling_2d(x, ksize, stride, pad, cover_all)
        return [x], ['x'], lambda x: F.average_pooling_2d(x, ksize, stride, pad)
    text = 'x {} ksize {} stride {} pad {}{}'.format(
        shape, ksize, stride, pad, ' cover_all' if kind == 'max' and cover_all else '')
    return f'{kind}_pooling_2d', text, make


def _lrn(shape, n=5, k=2, alpha=1e-4, beta=.75):
    def make(rng):
        x = rng.normal(0, 3, shape).astype(numpy.float32)
        return [x], ['x'], lambda x: F.local_response_normalization(x, n, k, alpha, beta)
    return 'local_response_normalization', f'x {shape} n {n} k {k} alpha {alpha} beta {beta}', make


CASES = [
    # Chainer's tests/chainer_tests/functions_tests/connection_tests/test_convolution_2d.py
    _conv((2, 3, 4, 3), (2, 3, 3, 3), 2, 1), _conv((2, 3, 4, 3), (2, 3, 3, 3), 2, 1, True),
    _conv((2, 3, 4, 3), (2, 3, 3, 3), 2, 1, bias=False),
    _conv((2, 4, 4, 3), (2, 2, 3, 3), 2, 1, groups=2),
    _conv((2, 3, 4, 3), (2, 3, 3, 3), 2, 1, dilate=2),
    _conv((2, 3, 9, 8), (4, 3, 3, 2), (1, 2), (1, 0), True, 2, 1),
    # ResNet-50's stem, a 3x3 and the 1x1s, batch 2
    _conv((2, 3, 224, 224), (64, 3, 7, 7), 2, 3), _conv((2, 64, 56, 56), (64, 64, 3, 3), 1, 1,
                                                        bias=False),
    _conv((2, 256, 56, 56), (128, 256, 1, 1), 2, 0, bias=False),
    _conv((2, 1024, 14, 14), (256, 1024, 1, 1), 1, 0, bias=False),
    _deconv((2, 3, 4, 3), (3, 2, 3, 3), 2, 1), _deconv((2, 3, 4, 3), (3, 2, 3, 3), 2, 1, (8, 6)),
    _bn((5, 3, 4, 2)), _bn((10, 6), 1e-3), _bn((2, 64, 56, 56)), _bn((2, 2048, 7, 7)),
    _bn((5, 3, 4, 2), fixed=True), _bn((2, 256, 14, 14), fixed=True),
    _relu((3, 2, 4, 5)), _relu((2, 64, 112, 112)),
    # Chainer's test_max_pooling_2d / test_average_pooling_2d
    _pool('max', (2, 3, 4, 3), 3, 2, 1, True), _pool('max', (2, 3, 4, 3), 3, 2, 1, False),
    _pool('max', (2, 64, 112, 112), 3, 2, 0, True),
    _pool('average', (2, 3, 4, 3), 3, 2, 1), _pool('average', (2, 2048, 7, 7), 7, 1, 0),
    # Chainer's test_local_response_normalization, and AlexNet's
    _lrn((2, 7, 3, 2)), _lrn((2, 96, 27, 27)),
]
# What bfloat16 changes (compute.replacements's bf16 rows): their cases above, and the linear
# layers: Chainer's test shapes, the MNIST MLP (batch 100 over 2 ranks), ResNet-50's last.
BF16_FUNCTIONS = ('convolution_2d', 'deconvolution_2d', 'linear')
BF16_CASES = [c for c in CASES if c[0] in BF16_FUNCTIONS] + [
    _linear((4, 3), (2, 3)), _linear((4, 3), (2, 3), bias=False),
    _linear((50, 784), (1000, 784)), _linear((50, 1000), (10, 1000)),
    _linear((8, 2048), (1000, 2048))]
# the two sides compared: (reference, measured) -> how each runs
SIDES = {'fp32': (('numpy', 'fp32'), ('onednn', 'fp32')),
         'bf16': (('onednn', 'fp32'), ('onednn', 'bf16'))}


def run_case(make, seed=0, precision='fp32'):
    """{name: (largest |difference|, largest |value|)} for the outputs and gradients: of
    oneDNN against numpy (precision fp32), of bfloat16 against float32 (bf16)."""
    results = []
    for mode, side in SIDES[precision]:
        (replacements.enable if mode == 'onednn' else replacements.disable)()
        compute.set_precision(side)
        rng = numpy.random.RandomState(seed)
        inputs, names, fn = make(rng)
        variables = [chainer.Variable(a.copy()) for a in inputs]
        with chainer.using_config('train', True):
            y = fn(*variables)
        y.grad = numpy.random.RandomState(seed + 1).normal(0, 1, y.shape).astype(
            numpy.float32)
        y.backward()
        results.append([('y', y.array)] + [('g' + n, v.grad) for n, v in
                                           zip(names, variables)])
    return {name: (float(abs(a - b).max()), float(abs(a).max()))
            for (name, a), (_, b) in zip(*results)}


def main(argv=None):
    p = argparse.ArgumentParser(prog='chainermn-torus bench compute_numerics',
                                description=__doc__.split('\n')[0])
    command_line.add_option(p, 'precision', default='fp32',
                      help='bf16: bfloat16 against float32, both on oneDNN')
    p.add_argument('--json', default=None)
    args = command_line.parse_args(p, argv)
    if compute.use('auto', rank=0) != 'onednn':
        raise SystemExit('bench compute_numerics: oneDNN is not available here: ' +
                         (compute.onednn.binding.why_unavailable() or '?'))
    rows = []
    print('{:<30} {:<58} {}'.format('function', 'parameters', 'largest |difference| / '
                                    'largest |value|, per output'))
    cases = BF16_CASES if args.precision == 'bf16' else CASES
    if args.precision == 'bf16':
        compute.set_precision('bf16', '--precision')  # refused where the CPU lacks it
    for function, text, make in cases:
        diffs = run_case(make, precision=args.precision)
        rows.append({'function': function, 'parameters': text, 'outputs': diffs})
        print('{:<30} {:<58} {}'.format(function, text, '  '.join(
            f'{n} {d:.1e}/{v:.2g}' for n, (d, v) in diffs.items())), flush=True)
    worst = {}
    for r in rows:
        for n, (d, v) in r['outputs'].items():
            w = worst.setdefault(r['function'], [0.0, 0.0])
            w[0] = max(w[0], d)
            w[1] = max(w[1], d / max(v, 1e-30))
    print('per function, the largest difference (absolute; relative to the largest value):')
    for f, (d, rel) in worst.items():
        print(f'  {f:<30} {d:.2e}  {rel:.2e}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'precision': args.precision, 'compared': SIDES[args.precision],
                       'cases': rows, 'worst': worst}, f, indent=1)
    replacements.disable()
    compute.set_precision('fp32')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
