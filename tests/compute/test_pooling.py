"""Max and average pooling on oneDNN against Chainer's numpy, through Chainer's functions:
outputs, gradients (ties included: the gradient goes to the first largest element, as
Chainer's), the gradient's own gradient, Chainer's gradient check, and what stays on
numpy."""
import numpy
import pytest

import chainer
import chainer.functions as F
from chainer import gradient_check

from chainermn_torus.compute import replacements
from chainermn_torus.compute.functions import pooling as pooling_functions
from chainermn_torus.compute.onednn import binding, pooling
from compute_support import as_it_was, both  # noqa: F401 a fixture

pytestmark = pytest.mark.skipif(
    not binding.available(), reason='oneDNN is not installed for this Python (make setup '
    f'installs onednn-cpu-gomp on x86-64): {binding.why_unavailable()}')

# (shape, ksize, stride, pad): Chainer's own tests' geometry, ResNet's stem, strides that
# leave the last rows in no window (oneDNN gets a view), non-square windows
GEOMETRIES = [((2, 3, 4, 3), 3, 2, 1), ((2, 3, 7, 9), 3, 2, 0), ((2, 3, 7, 9), 2, 2, 0),
              ((1, 4, 8, 8), (3, 2), (1, 2), (1, 0)), ((2, 2, 5, 6), (2, 3), (3, 2), (0, 1)),
              ((2, 8, 16, 16), 3, 2, 1), ((3, 5, 7, 7), 7, 1, 0)]


def _data(shape, seed, ties):
    rng = numpy.random.RandomState(seed)
    x = rng.normal(0, 1, shape).astype(numpy.float32)
    if ties:  # as after a ReLU: whole windows of zeros, equal maxima
        x[x < 0.3] = 0
    return x


@pytest.mark.parametrize('shape, ksize, stride, pad', GEOMETRIES)
@pytest.mark.parametrize('cover_all', [True, False])
@pytest.mark.parametrize('ties', [False, True])
def test_max_pooling_equals_chainers(shape, ksize, stride, pad, cover_all, ties):
    x = _data(shape, 0, ties)

    def run():
        xv = chainer.Variable(x)
        y = F.max_pooling_2d(xv, ksize, stride, pad, cover_all)
        y.grad = numpy.random.RandomState(1).normal(0, 1, y.shape).astype(numpy.float32)
        y.backward()
        run.kept = getattr(y.creator, pooling_functions.WORKSPACE, None)
        return y.array, xv.grad
    (y0, g0), (y1, g1) = both(run)
    assert run.kept is not None  # the call took oneDNN's path
    assert numpy.array_equal(y0, y1)
    # each input's gradient is a sum over the windows it leads: the order may differ
    numpy.testing.assert_allclose(g1, g0, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize('shape, ksize, stride, pad', GEOMETRIES)
def test_average_pooling_equals_chainers(shape, ksize, stride, pad):
    x = _data(shape, 2, False)

    def run():
        xv = chainer.Variable(x)
        y = F.average_pooling_2d(xv, ksize, stride, pad)
        y.grad = numpy.random.RandomState(3).normal(0, 1, y.shape).astype(numpy.float32)
        y.backward()
        return y.array, xv.grad
    (y0, g0), (y1, g1) = both(run)
    numpy.testing.assert_allclose(y1, y0, atol=1e-6, rtol=1e-5)
    numpy.testing.assert_allclose(g1, g0, atol=1e-6, rtol=1e-5)


def test_rows_in_no_window_are_left_to_a_view_and_get_no_gradient():
    # 7 rows, window 2, stride 2: row 6 is in no window; oneDNN sees a view of 6 rows
    p = pooling.pooling('max', (1, 1, 7, 7), (1, 1, 3, 3), (2, 2), (2, 2), (0, 0))
    assert p.used == (1, 1, 6, 6)
    x = _data((1, 1, 7, 7), 4, False)
    x[..., 6, :] = x[..., :, 6] = 100  # larger than all: a window reaching them would say so
    y, ws = p.forward(x)
    assert y.max() < 100
    gx = p.backward(numpy.ones(y.shape, numpy.float32), ws)
    assert not gx[..., 6, :].any() and not gx[..., :, 6].any()
    assert gx.sum() == y.size


@pytest.mark.parametrize('function', ['max', 'average'])
def test_pooling_passes_chainers_gradient_checks(function):
    replacements.enable()
    x = _data((2, 3, 6, 5), 5, False)
    if function == 'max':  # distinct values in [-1, 1), 0.011 apart (as Chainer's tests):
        # differentiable at eps 1e-3, and small enough for float32's numerical gradient
        x = (numpy.random.RandomState(6).permutation(x.size).reshape(x.shape).astype(
            numpy.float32) * 2 / x.size - 1).astype(numpy.float32)

        def f(x):
            return F.max_pooling_2d(x, 3, 2, 1)
    else:
        def f(x):
            return F.average_pooling_2d(x, 3, 2, 1)
    y = f(x)
    rng = numpy.random.RandomState(7)
    gy = rng.normal(0, 1, y.shape).astype(numpy.float32)
    ggx = rng.normal(0, 1, x.shape).astype(numpy.float32)
    assert y.dtype == numpy.float32  # float32 throughout: oneDNN's path is checked
    gradient_check.check_backward(f, x, gy, atol=1e-3, rtol=1e-2)
    # the gradient's gradient: Chainer's indexes made from the workspace (max)
    gradient_check.check_double_backward(f, x, gy, ggx, atol=1e-3, rtol=1e-2)


def test_double_backward_of_max_pooling_equals_chainers():
    x = numpy.random.RandomState(8).permutation(2 * 3 * 6 * 5).reshape(
        2, 3, 6, 5).astype(numpy.float32)
    ggx = numpy.random.RandomState(9).normal(0, 1, x.shape).astype(numpy.float32)

    def run():
        xv = chainer.Variable(x)
        y = F.max_pooling_2d(xv, 3, 2, 1)
        gx, = chainer.grad([y], [xv], grad_outputs=[chainer.Variable(
            numpy.ones(y.shape, numpy.float32))], enable_double_backprop=True)
        ggy, = chainer.grad([gx], [gx.creator.inputs[0].get_variable()], grad_outputs=[
            chainer.Variable(ggx)])
        return gx.array, ggy.array
    for a, b in zip(*both(run)):
        assert numpy.array_equal(a, b)


def test_return_indices_and_other_dtypes_stay_on_chainers_numpy():
    replacements.enable()
    x = _data((2, 3, 6, 6), 10, False)
    y, indexes = F.max_pooling_2d(x, 2, return_indices=True)
    assert indexes is not None and indexes.dtype.kind == 'i'
    assert getattr(y.creator, pooling_functions.WORKSPACE, None) is None
    y64 = F.max_pooling_2d(x.astype(numpy.float64), 2)
    assert y64.dtype == numpy.float64
    assert getattr(y64.creator, pooling_functions.WORKSPACE, None) is None


@pytest.mark.parametrize('ksize, stride, pad, cover_all', [
    (2, 2, 0, False), (3, 2, 1, True), (3, 1, 1, False), (2, 3, 0, True), (5, 2, 2, True),
    (17, 1, 0, False)])  # 289 cells: the workspace's int32 indexes
@pytest.mark.parametrize('values', ['distinct', 'ties'])
def test_indexes_read_from_the_workspace_are_chainers(ksize, stride, pad, cover_all, values,
                                                      as_it_was):
    rng = numpy.random.RandomState(ksize + stride)
    shape = (2, 3, 19, 18)
    x = rng.permutation(numpy.prod(shape)) if values == 'distinct' else rng.randint(0, 3, shape)
    x = x.reshape(shape).astype(numpy.float32)
    y, workspace = pooling.max_forward(x, (ksize, ksize), (stride, stride), (pad, pad),
                                       cover_all=cover_all)
    ours = pooling.window_indexes(workspace, y.shape)
    replacements.disable()
    _, chainers = F.max_pooling_2d(x, ksize, stride, pad, cover_all=cover_all,
                                   return_indices=True)
    numpy.testing.assert_array_equal(ours, chainers)


def test_double_backward_after_the_input_changed_in_place_equals_chainers(as_it_was):
    # Chainer's indexes are its forward's choices; rebuilt later from the kept input they
    # were the changed input's (92 elements differed in an outside run of Chainer's tests)
    rng = numpy.random.RandomState(3)
    x0 = rng.permutation(2 * 3 * 8 * 8).reshape(2, 3, 8, 8).astype(numpy.float32)
    gy = rng.normal(0, 1, (2, 3, 5, 5)).astype(numpy.float32)  # cover_all: 5 x 5
    ggx = rng.normal(0, 1, x0.shape).astype(numpy.float32)

    def run():
        x = chainer.Variable(x0.copy())
        g = chainer.Variable(gy)
        y = F.max_pooling_2d(x, 3, 2, 1)
        gx, = chainer.grad([y], [x], grad_outputs=[g], enable_double_backprop=True)
        x.array[...] = x.array[:, :, ::-1, ::-1]  # the input changed in place
        ggy, = chainer.grad([gx], [g], grad_outputs=[chainer.Variable(ggx)])
        return ggy.array, y.creator

    (chainers, _), (ours, node) = both(run)
    assert getattr(node, pooling_functions.WORKSPACE) is not None  # oneDNN's forward ran
    numpy.testing.assert_array_equal(ours, chainers)
