"""Batch normalization, ReLU and local response normalization on oneDNN (batch
normalization also on numba) against Chainer's numpy, through Chainer's own functions and
links: outputs, gradients, the running statistics the link updates, and Chainer's gradient
check."""
import numpy
import pytest

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import gradient_check

from chainermn_torus.compute import replacements
from chainermn_torus.compute.kernels import eltwise
from chainermn_torus.compute.onednn import batchnorm, binding, geometries
from chainermn_torus.runtime.cpu import jit
from compute_support import as_it_was, both  # noqa: F401 a fixture

pytestmark = pytest.mark.skipif(
    not binding.available(), reason='oneDNN is not installed for this Python (make setup '
    f'installs onednn-cpu-gomp on x86-64): {binding.why_unavailable()}')


@pytest.mark.parametrize('shape', [(5, 3, 4, 2), (8, 16, 7, 5), (10, 6), (2, 64, 28, 28)])
@pytest.mark.parametrize('eps, decay', [(2e-5, 0.9), (1e-3, 0.5)])
def test_batch_normalization_link_in_training_equals_chainers(shape, eps, decay):
    rng = numpy.random.RandomState(0)
    x = rng.normal(2, 3, shape).astype(numpy.float32)
    gy = rng.uniform(-1, 1, shape).astype(numpy.float32)

    def run():
        link = L.BatchNormalization(shape[1], eps=eps, decay=decay)
        link.gamma.array[:] = rng.uniform(0.5, 1.5, shape[1])
        link.beta.array[:] = rng.uniform(-1, 1, shape[1])
        xv = chainer.Variable(x)
        with chainer.using_config('train', True):
            y = link(xv)
            y.grad = gy
            y.backward()
            link(xv)  # a second step: the running statistics move twice
        run.impl = type(y.creator._impl).__name__
        return [y.array, xv.grad, link.gamma.grad, link.beta.grad, link.avg_mean,
                link.avg_var]
    rng_state = rng.get_state()
    replacements.disable()
    theirs = run()
    rng.set_state(rng_state)
    replacements.enable()
    mine = run()
    assert run.impl == '_OneDnnBatchNormalizationImpl'  # the link's call took oneDNN's
    scale = max(1.0, float(numpy.prod(shape)) / shape[1] / 100)  # sums over n x h x w
    for name, a, b in zip(['y', 'gx', 'ggamma', 'gbeta', 'avg_mean', 'avg_var'], mine,
                          theirs):
        numpy.testing.assert_allclose(a, b, atol=2e-5 * scale, rtol=2e-5, err_msg=name)


@pytest.mark.parametrize('shape', [(5, 3, 4, 2), (10, 6)])
def test_fixed_batch_normalization_equals_chainers_and_differentiates(shape):
    rng = numpy.random.RandomState(5)
    x = rng.normal(2, 3, shape).astype(numpy.float32)
    c = shape[1]
    gamma, beta = (rng.uniform(0.5, 1.5, c).astype(numpy.float32),
                   rng.uniform(-1, 1, c).astype(numpy.float32))
    mean, var = (rng.uniform(-1, 1, c).astype(numpy.float32),
                 rng.uniform(0.5, 2, c).astype(numpy.float32))
    gy = rng.uniform(-1, 1, shape).astype(numpy.float32)

    def run():
        xv, gv = chainer.Variable(x), chainer.Variable(gamma)
        y = F.fixed_batch_normalization(xv, gv, beta, mean, var, eps=2e-5)
        y.grad = gy
        y.backward()
        return y.array, xv.grad, gv.grad
    for a, b in zip(*both(run)):
        numpy.testing.assert_allclose(a, b, atol=2e-5, rtol=2e-5)


def test_batch_normalization_passes_chainers_gradient_check():
    replacements.enable()
    rng = numpy.random.RandomState(1)
    x = rng.normal(0, 1, (6, 3, 4, 3)).astype(numpy.float32)
    gamma = rng.uniform(0.5, 1.5, 3).astype(numpy.float32)
    beta = rng.uniform(-1, 1, 3).astype(numpy.float32)
    gy = rng.uniform(-1, 1, x.shape).astype(numpy.float32)
    gradient_check.check_backward(
        lambda x, g, b: F.batch_normalization(x, g, b), (x, gamma, beta), gy,
        atol=1e-2, rtol=1e-2)  # Chainer's own float32 tolerances for it


def test_relu_and_its_gradient_are_chainers_exactly():
    rng = numpy.random.RandomState(2)
    x = rng.normal(0, 1, (4, 8, 16, 16)).astype(numpy.float32)  # the kernels' size
    assert x.size >= eltwise.SMALL
    gy = rng.normal(0, 1, x.shape).astype(numpy.float32)

    def run():
        xv = chainer.Variable(x)
        y = F.relu(xv)
        y.grad = gy
        y.backward()
        return y.array, xv.grad
    (y0, g0), (y1, g1) = both(run)
    assert numpy.array_equal(y0, y1) and numpy.array_equal(g0, g1)


def test_other_cases_stay_on_chainers_numpy():
    replacements.enable()
    x = numpy.random.RandomState(3).normal(0, 1, (4, 3, 5)).astype(numpy.float32)
    # three dimensions: Chainer's own implementation, and its own result
    ours = F.batch_normalization(x, numpy.ones(3, numpy.float32),
                                 numpy.zeros(3, numpy.float32)).array
    replacements.disable()
    theirs = F.batch_normalization(x, numpy.ones(3, numpy.float32),
                                   numpy.zeros(3, numpy.float32)).array
    assert numpy.array_equal(ours, theirs)
    x64 = x.astype(numpy.float64)
    replacements.enable()
    assert F.relu(x64).array.dtype == numpy.float64


@pytest.mark.parametrize('shape', [(2, 7, 4, 5), (3, 16, 8, 8)])
@pytest.mark.parametrize('n, k, alpha, beta', [(5, 2, 1e-4, .75), (3, 1, 1e-2, .5),
                                               (4, 2, 1e-3, .75), (1, 2, 1, .75)])
def test_local_response_normalization_equals_chainers(shape, n, k, alpha, beta):
    rng = numpy.random.RandomState(11)
    x = rng.normal(0, 3, shape).astype(numpy.float32)
    gy = rng.normal(0, 1, shape).astype(numpy.float32)

    def run():
        xv = chainer.Variable(x)
        y = F.local_response_normalization(xv, n, k, alpha, beta)
        y.grad = gy
        y.backward()
        run.ours = type(y.creator.indexes).__name__ == '_LrnWorkspace'
        return y.array, xv.grad
    (y0, g0), (y1, g1) = both(run)
    assert run.ours  # the call took oneDNN's path (an even n too: the same window)
    numpy.testing.assert_allclose(y1, y0, rtol=1e-6, atol=1e-6 * abs(y0).max())
    numpy.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-6 * abs(g0).max())


def test_local_response_normalization_passes_chainers_gradient_check():
    replacements.enable()
    rng = numpy.random.RandomState(12)
    x = rng.normal(0, 1, (2, 7, 3, 2)).astype(numpy.float32)
    gy = rng.normal(0, 1, x.shape).astype(numpy.float32)
    gradient_check.check_backward(
        lambda x: F.local_response_normalization(x, 3, 1, 0.1, 0.75), x, gy, eps=1e-2,
        atol=1e-3, rtol=1e-2)


@pytest.mark.parametrize('via', batchnorm.IMPLEMENTATIONS)
@pytest.mark.parametrize('shape', [(5, 3, 4, 2), (8, 16, 7, 5), (3, 64, 28, 28)])
def test_both_batch_normalizations_equal_chainers(via, shape):
    if via == 'numba' and not jit.available():
        pytest.skip('numba is not installed: oneDNN\'s primitives are the path')
    rng = numpy.random.RandomState(13)
    x = rng.normal(2, 3, shape).astype(numpy.float32)
    gy = rng.uniform(-1, 1, shape).astype(numpy.float32)
    c = shape[1]
    gamma = rng.uniform(0.5, 1.5, c).astype(numpy.float32)
    beta = rng.uniform(-1, 1, c).astype(numpy.float32)
    replacements.disable()
    xv, gv, bv = (chainer.Variable(a) for a in (x, gamma, beta))
    y = F.batch_normalization(xv, gv, bv, eps=2e-5)
    y.grad = gy
    y.backward()
    axes = (0, 2, 3)
    y1, mean, var = batchnorm.forward(x, gamma, beta, 2e-5, via=via)
    gx, ggamma, gbeta = batchnorm.backward(x, gy, mean, var, gamma, 2e-5, via=via)
    yi = batchnorm.inference(x, gamma, beta, mean, var, 2e-5, via=via)
    scale = max(1.0, x.size / c / 100)  # sums over n x h x w
    for name, a, b in [('mean', mean, x.mean(axis=axes)), ('var', var, x.var(axis=axes)),
                       ('y', y1, y.array), ('y inference', yi, y.array), ('gx', gx, xv.grad),
                       ('ggamma', ggamma, gv.grad), ('gbeta', gbeta, bv.grad)]:
        numpy.testing.assert_allclose(a, b, atol=2e-5 * scale, rtol=2e-5, err_msg=name)
    assert batchnorm.implementation() == ('numba' if jit.available() else 'onednn')


def test_without_numba_batch_normalization_is_onednns(monkeypatch):
    monkeypatch.setattr(jit, 'numba', lambda: None)  # as where numba cannot be imported
    geometries.clear()
    assert batchnorm.implementation() == 'onednn'
    replacements.enable()
    rng = numpy.random.RandomState(14)
    x = rng.normal(2, 3, (4, 8, 5, 5)).astype(numpy.float32)
    link = L.BatchNormalization(8)
    with chainer.using_config('train', True):
        y = link(x)
    assert type(y.creator._impl).__name__ == '_OneDnnBatchNormalizationImpl'
    assert geometries.stats()['by kind'].get('batchnorm')  # oneDNN's primitives for the shape
    numpy.testing.assert_allclose(y.array.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    numpy.testing.assert_allclose(y.array.std(axis=(0, 2, 3)), 1, rtol=1e-3)
