"""Convolutions on oneDNN (chainermn_torus.compute) against Chainer's numpy: the forward,
both gradients and the bias gradient on the parameter sets of Chainer's own convolution
tests (cover_all, groups, bias, dilation, strides, paddings, non-square shapes),
Chainer's gradient check through the patched functions, deconvolution, the fallbacks, and
that enable / disable leave Chainer's functions as they were."""
import itertools

import numpy
import pytest

import chainer
import chainer.functions as F
from chainer import gradient_check
from chainer.functions.connection import convolution_2d as chainer_conv

from chainermn_torus.compute import replacements
from chainermn_torus.compute.onednn import binding, conv
from compute_support import as_it_was  # noqa: F401 a fixture

pytestmark = pytest.mark.skipif(
    not binding.available(), reason='oneDNN is not installed for this Python (make setup '
    f'installs onednn-cpu-gomp on x86-64): {binding.why_unavailable()}')

CASES = list(itertools.product(
    [False, True],                      # cover_all
    [1, 2],                             # groups
    [True, False],                      # nobias
    [1, 2],                             # dilate
    [((1, 1), (0, 0)), ((2, 2), (1, 1)), ((2, 1), (1, 0))]))   # stride, pad


@pytest.fixture
def numpy_path():
    """Chainer's own functions for the reference, oneDNN's back afterwards as it was."""
    was = replacements.enabled()
    replacements.disable()
    yield
    if was:
        replacements.enable()


def _chainer(x, W, b, stride, pad, cover_all, dilate, groups, gy=None):
    xv, Wv = chainer.Variable(x), chainer.Variable(W)
    bv = None if b is None else chainer.Variable(b)
    y = F.convolution_2d(xv, Wv, bv, stride=stride, pad=pad, cover_all=cover_all,
                         dilate=dilate, groups=groups)
    y.grad = numpy.ones_like(y.array) if gy is None else gy
    y.backward()
    return y.array, xv.grad, Wv.grad, None if bv is None else bv.grad


@pytest.mark.parametrize('cover_all, groups, nobias, dilate, geometry', CASES)
def test_every_direction_equals_chainers_numpy(cover_all, groups, nobias, dilate, geometry,
                                               numpy_path):
    rng = numpy.random.RandomState(0)
    stride, pad = geometry
    x = rng.uniform(-1, 1, (2, 4, 9, 7)).astype(numpy.float32)
    W = rng.normal(0, 0.3, (6, 4 // groups, 3, 2)).astype(numpy.float32)
    b = None if nobias else rng.uniform(-1, 1, 6).astype(numpy.float32)
    y_shape = conv._geometry(x.shape, W.shape, stride, pad, cover_all, (dilate, dilate))
    gy = rng.uniform(-1, 1, y_shape).astype(numpy.float32)
    y, gx, gW, gb = _chainer(x, W, b, stride, pad, cover_all, dilate, groups, gy)
    d = (dilate, dilate)
    ours = conv.forward(x, W, b, stride, pad, cover_all, d, groups)
    ours_gx = conv.backward_data(gy, W, x.shape, stride, pad, d, groups)
    ours_gW, ours_gb = conv.backward_weights(x, gy, W.shape, stride, pad, d, groups,
                                             bias=b is not None)
    # float32 sums in another order: a few ulps of the largest value
    for mine, theirs in ((ours, y), (ours_gx, gx), (ours_gW, gW)) + (
            ((ours_gb, gb),) if b is not None else ()):
        assert mine.shape == theirs.shape
        numpy.testing.assert_allclose(mine, theirs, atol=2e-5 * max(1, abs(theirs).max()),
                                      rtol=1e-5)


def test_the_patched_functions_pass_chainers_gradient_check():
    replacements.enable()
    rng = numpy.random.RandomState(1)
    x = rng.uniform(-1, 1, (2, 4, 6, 5)).astype(numpy.float32)
    W = rng.normal(0, 0.5, (4, 2, 3, 3)).astype(numpy.float32)
    b = rng.uniform(-1, 1, 4).astype(numpy.float32)
    gy = rng.uniform(-1, 1, (2, 4, 3, 3)).astype(numpy.float32)

    def f(x, W, b):
        return F.convolution_2d(x, W, b, stride=2, pad=1, groups=2, dilate=1)
    # Chainer's own float32 tolerances for convolution_2d's gradient check
    gradient_check.check_backward(f, (x, W, b), gy, atol=5e-4, rtol=5e-3)


def test_deconvolution_equals_chainers_numpy(numpy_path):
    rng = numpy.random.RandomState(2)
    x = rng.uniform(-1, 1, (2, 4, 5, 4)).astype(numpy.float32)
    W = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(numpy.float32)
    b = rng.uniform(-1, 1, 6).astype(numpy.float32)
    # outsize (10, 8): the larger of the two sizes a stride of 2 maps back to (5, 4)
    for outsize, groups, bias in (((10, 8), 2, b), (None, 1, None)):
        WW = W if groups == 2 else rng.normal(0, 0.3, (4, 6, 3, 3)).astype(numpy.float32)
        theirs = F.deconvolution_2d(x, WW, bias, stride=2, pad=1, outsize=outsize,
                                    groups=groups).array
        replacements.enable()
        try:
            mine = F.deconvolution_2d(x, WW, bias, stride=2, pad=1, outsize=outsize,
                                      groups=groups).array
        finally:
            replacements.disable()
        numpy.testing.assert_allclose(mine, theirs, atol=2e-5, rtol=1e-5)


def test_other_dtypes_stay_on_chainers_numpy_and_uninstall_restores_chainers():
    replacements.uninstall()
    original = chainer_conv.Convolution2DFunction.__dict__['forward_cpu']
    replacements.enable()
    replacements.enable()  # idempotent
    assert chainer_conv.Convolution2DFunction.__dict__['forward_cpu'] is not original
    x = numpy.random.RandomState(3).uniform(-1, 1, (1, 2, 5, 5))
    W = numpy.ones((3, 2, 3, 3))
    y = F.convolution_2d(x, W).array  # float64: Chainer's own, the same result
    replacements.disable()  # Chainer's forwards from now on; the wrappers stay for the backwards
    assert not replacements.enabled()
    replacements.uninstall()
    assert chainer_conv.Convolution2DFunction.__dict__['forward_cpu'] is original
    assert numpy.array_equal(y, F.convolution_2d(x, W).array)


def test_runs_are_bit_identical_with_the_same_inputs():
    replacements.enable()
    rng = numpy.random.RandomState(4)
    x = rng.uniform(-1, 1, (4, 16, 14, 14)).astype(numpy.float32)
    W = rng.normal(0, 0.2, (32, 16, 3, 3)).astype(numpy.float32)
    first = _chainer(x, W, None, 1, 1, False, 1, 1)
    second = _chainer(x, W, None, 1, 1, False, 1, 1)
    assert all(numpy.array_equal(a, b) for a, b in zip(first[:3], second[:3]))


@pytest.mark.parametrize('w_shape, y_shape, plain', [
    ((64, 256, 1, 1), (8, 64, 56, 56), True),     # a 1 x 1 kernel: plain at any size
    ((64, 64, 3, 3), (8, 64, 56, 56), False),     # a 3 x 3 one on a large output: blocked
    ((512, 512, 3, 3), (1, 512, 2, 2), True),     # at most 64 output pixels: plain
    ((512, 512, 3, 3), (1, 512, 8, 9), False)])
def test_weights_stay_in_chainers_layout_where_that_is_faster(w_shape, y_shape, plain):
    assert conv.plain_weights(w_shape, y_shape) is plain


@pytest.mark.parametrize('x_shape, w_shape, pad', [
    ((2, 32, 9, 9), (16, 32, 1, 1), 0), ((1, 8, 6, 6), (8, 8, 3, 3), 1)])
def test_plain_weights_geometries_reorder_no_weights_and_give_chainers_numbers(
        x_shape, w_shape, pad):
    rng = numpy.random.RandomState(5)
    x = rng.uniform(-1, 1, x_shape).astype(numpy.float32)
    W = rng.uniform(-1, 1, w_shape).astype(numpy.float32)
    y = conv.forward(x, W, None, (1, 1), (pad, pad))
    gy = rng.uniform(-1, 1, y.shape).astype(numpy.float32)
    geometry = conv.convolution(x.shape, W.shape, y.shape, (1, 1), (pad, pad), (1, 1), 1,
                                False)
    assert geometry.plain_weights
    gx = conv.backward_data(gy, W, x.shape, (1, 1), (pad, pad))
    gW, _ = conv.backward_weights(x, gy, W.shape, (1, 1), (pad, pad))
    for step in ('forward', 'backward_data', 'backward_weights'):
        bound = geometry.step(step)
        assert 'weights' not in bound.inner and 'diff_weights' not in bound.inner, step
    xv, Wv = chainer.Variable(x), chainer.Variable(W)
    replacements.disable()
    yc = F.convolution_2d(xv, Wv, pad=pad)
    yc.grad = gy
    yc.backward()
    numpy.testing.assert_allclose(y, yc.array, rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(gx, xv.grad, rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(gW, Wv.grad, rtol=1e-5, atol=1e-5)
