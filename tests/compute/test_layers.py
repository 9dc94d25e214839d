"""Batch normalization and ReLU on oneDNN against Chainer's numpy, through Chainer's own
functions and links: outputs, gradients, the running statistics the link updates, and
Chainer's gradient check."""
import numpy
import pytest

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import gradient_check

from chainermn_torus.compute import dnnl, onednn

pytestmark = pytest.mark.skipif(
    not dnnl.available(), reason='oneDNN is not installed for this Python (make setup '
    'installs onednn-cpu-gomp on x86-64): {}'.format(dnnl.why_unavailable()))


@pytest.fixture(autouse=True)
def as_it_was():
    was = onednn.enabled()
    yield
    (onednn.enable if was else onednn.disable)()


def _both(run):
    """``run()`` on Chainer's numpy, then on oneDNN."""
    onednn.disable()
    theirs = run()
    onednn.enable()
    mine = run()
    return theirs, mine


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
    onednn.disable()
    theirs = run()
    rng.set_state(rng_state)
    onednn.enable()
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
    for a, b in zip(*_both(run)):
        numpy.testing.assert_allclose(a, b, atol=2e-5, rtol=2e-5)


def test_batch_normalization_passes_chainers_gradient_check():
    onednn.enable()
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
    x = rng.normal(0, 1, (4, 3, 5, 6)).astype(numpy.float32)
    gy = rng.normal(0, 1, x.shape).astype(numpy.float32)

    def run():
        xv = chainer.Variable(x)
        y = F.relu(xv)
        y.grad = gy
        y.backward()
        return y.array, xv.grad
    (y0, g0), (y1, g1) = _both(run)
    assert numpy.array_equal(y0, y1) and numpy.array_equal(g0, g1)


def test_other_cases_stay_on_chainers_numpy():
    onednn.enable()
    x = numpy.random.RandomState(3).normal(0, 1, (4, 3, 5)).astype(numpy.float32)
    # three dimensions: Chainer's own implementation, and its own result
    ours = F.batch_normalization(x, numpy.ones(3, numpy.float32),
                                 numpy.zeros(3, numpy.float32)).array
    onednn.disable()
    theirs = F.batch_normalization(x, numpy.ones(3, numpy.float32),
                                   numpy.zeros(3, numpy.float32)).array
    assert numpy.array_equal(ours, theirs)
    x64 = x.astype(numpy.float64)
    onednn.enable()
    assert F.relu(x64).array.dtype == numpy.float64
