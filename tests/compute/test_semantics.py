"""Chainer's semantics on the oneDNN path, case by case (issue 48), each case run through
Chainer's own functions twice, on Chainer's numpy and with the oneDNN path on, and compared:

* NaN and infinities propagate as in Chainer, forward and in every gradient (a finite loss
  where Chainer's is NaN hid a diverging run);
* every rank of input Chainer accepts keeps its shape (a 0-d ReLU came back (1,));
* geometries Chainer refuses are refused with Chainer's exception and message (an empty
  convolution came back as a (1, C, 0, 0) array);
* a max-pooling window of padding alone is -inf (not -FLT_MAX);
* a function's backward runs in the mode its forward ran in, whatever was switched between;
* the primitives kept per geometry stay within their bound.

Every class of case in Chainer v7.8.1's own tests of the replaced functions and links is
here too (`CLASSES`): dtypes and mixed dtypes, non-contiguous arrays, `cover_all`, groups,
dilation, `outsize`, no bias, double backward, a backward called twice, `return_indices`,
batch normalization over other axes and parameter shapes, running statistics, `finetune`,
no gamma or beta, channel inference, the refusals.
"""
import warnings

import numpy
import pytest

import chainer
import chainer.functions as F
import chainer.links as L
from chainer.functions.pooling import max_pooling_nd
from chainer.utils import type_check

from chainermn_torus.compute import modes, replacements
from chainermn_torus.compute.functions import pooling as pooling_functions
from chainermn_torus.compute.kernels import eltwise
from chainermn_torus.compute.onednn import binding, geometries
from compute_support import as_it_was, both  # noqa: F401 a fixture
import package_probes

pytestmark = pytest.mark.skipif(
    not binding.available(), reason='oneDNN is not installed for this Python (make setup '
    f'installs onednn-cpu-gomp on x86-64): {binding.why_unavailable()}')

NAN, INF = numpy.float32('nan'), numpy.float32('inf')


def same(theirs, mine, what='', rtol=2e-5):
    """Equal as Chainer's results are to each other: the shape and dtype, NaN where NaN,
    the same infinities, the finite values within float32 rounding of a sum's order."""
    if theirs is None or mine is None:
        assert theirs is None and mine is None, what
        return
    theirs, mine = numpy.asarray(theirs), numpy.asarray(mine)
    assert mine.shape == theirs.shape, (what, mine.shape, theirs.shape)
    assert mine.dtype == theirs.dtype, (what, mine.dtype, theirs.dtype)
    assert numpy.array_equal(numpy.isnan(mine), numpy.isnan(theirs)), \
        (what, 'NaN at', numpy.argwhere(numpy.isnan(mine) != numpy.isnan(theirs))[:5])
    inf = numpy.isinf(theirs)
    assert numpy.array_equal(numpy.isinf(mine), inf) and numpy.array_equal(
        mine[inf], theirs[inf]), (what, 'infinities differ')
    ok = numpy.isfinite(theirs)
    scale = max(1.0, float(numpy.abs(theirs[ok]).max())) if ok.any() else 1.0
    numpy.testing.assert_allclose(mine[ok], theirs[ok], rtol=rtol, atol=rtol * scale,
                                  err_msg=what)


def run_both(fn, inputs, gys=None, double=None):
    """Outputs, the gradients of every input for ``gys`` and, with ``double`` (the grads'
    own upstream gradients), the second-order gradients: numpy's, then oneDNN's."""
    def run():
        xs = [None if a is None else chainer.Variable(a.copy()) for a in inputs]
        ys = fn(*[x for x in xs if x is not None])
        ys = ys if isinstance(ys, tuple) else (ys,)
        out = [y.array for y in ys]
        if gys is not None:
            grads = chainer.grad(list(ys), [x for x in xs if x is not None],
                                 [chainer.Variable(g) for g in gys],
                                 enable_double_backprop=double is not None)
            out += [None if g is None else g.array for g in grads]
            if double is not None:
                used = [(g, d) for g, d in zip(grads, double) if g is not None]
                second = chainer.grad([g for g, _ in used], [x for x in xs if x is not None],
                                      [chainer.Variable(d) for _, d in used])
                out += [None if g is None else g.array for g in second]
        return out
    return both(run)


def check(fn, inputs, gys=None, double=None, rtol=2e-5):
    """``run_both`` compared; where Chainer's own code raises (its double backward through
    ``deconvolution_2d`` with respect to W unpacks a Variable as a shape: a ValueError
    unless W has four rows), the oneDNN path raises the same."""
    try:
        theirs, mine = run_both(fn, inputs, gys, double)
    except Exception as e:  # Chainer's, on numpy: ours must fail alike
        replacements.enable()
        with pytest.raises(type(e)) as raised:
            run_both(fn, inputs, gys, double)
        assert str(raised.value).splitlines()[0] == str(e).splitlines()[0]
        return None
    assert len(theirs) == len(mine)
    for i, (a, b) in enumerate(zip(theirs, mine)):
        same(a, b, f'result {i}', rtol)
    return theirs, mine


def _rng(seed=0):
    return numpy.random.RandomState(seed)


def _u(shape, seed=0, dtype=numpy.float32):
    return _rng(seed).uniform(-1, 1, shape).astype(dtype)


# --- 1. NaN and infinities ---------------------------------------------------------------

def _relu_inputs():
    # large enough for the kernels (eltwise.SMALL): the special values among them
    x = _u((2, 3, 40, 40), 1)
    flat = x.reshape(-1)
    flat[:8] = [NAN, INF, -INF, -0.0, 0.0, 1e-45, -1e-45, 3]
    gy = _u(x.shape, 2)
    g = gy.reshape(-1)
    g[:8] = [1, NAN, INF, -INF, NAN, 2, -2, -1]
    g[8:12] = [INF, -INF, NAN, -5]  # at units dead or alive, whichever x[8:12] is
    return x, gy


def test_relu_propagates_nan_and_infinities_bit_for_bit():
    x, gy = _relu_inputs()
    theirs, mine = run_both(F.relu, [x], [gy])
    for a, b in zip(theirs, mine):
        assert numpy.array_equal(a, b, equal_nan=True)
        assert numpy.array_equal(numpy.signbit(a), numpy.signbit(b))  # -0.0 where Chainer's
    assert numpy.isnan(mine[0].reshape(-1)[0])  # NaN stays NaN (oneDNN's eltwise gave 0)
    assert numpy.isnan(mine[1].reshape(-1)[2])  # inf gy at a dead unit: inf * 0
    assert eltwise.available()


def _taken(fn):
    """How many times ``eltwise.add`` (the numba path of the sums) ran during ``fn()``."""
    calls = []
    original = eltwise.add
    eltwise.add = lambda xs: calls.append(len(xs)) or original(xs)
    try:
        fn()
    finally:
        eltwise.add = original
    return calls


def test_sums_are_chainers_bit_for_bit_with_nan_and_infinities():
    # The residual sums (Add) and the backward pass's gradient sums (MultiAdd) on the
    # rank's threads: the same float32 additions in Chainer's order, so the same bits.
    a, b, c = _u((2, 3, 40, 40), 40), _u((2, 3, 40, 40), 41), _u((2, 3, 40, 40), 42)
    a.reshape(-1)[:4] = [NAN, INF, -INF, INF]
    b.reshape(-1)[:4] = [1, -INF, -INF, 3]
    for fn, inputs in ((lambda x, y: x + y, [a, b]), (lambda x, y, z: F.add(x, y, z), [a, b, c]),
                       (lambda x, y, z, w: F.add(x, y, z, w), [a, b, c, a])):
        theirs, mine = run_both(fn, inputs, [_u(a.shape, 43)])
        for t, m in zip(theirs, mine):
            assert t.dtype == m.dtype and numpy.array_equal(t.view(numpy.int32),
                                                            m.view(numpy.int32))
        replacements.enable()
        assert _taken(lambda: fn(*[chainer.Variable(x) for x in inputs])) == [len(inputs)]


def test_a_variable_used_twice_gets_its_gradients_summed_as_chainer_does():
    # Chainer sums the gradients that reach one variable with F.add (MultiAdd).
    x = _u((2, 8, 32, 32), 44)

    def run():
        v = chainer.Variable(x.copy())
        y = F.relu(v) * 2 + F.sigmoid(v) + v
        y.grad = _u(x.shape, 45)
        y.backward()
        return [y.array, v.grad]
    (y0, g0), (y1, g1) = both(run)
    assert numpy.array_equal(y0.view(numpy.int32), y1.view(numpy.int32))
    assert numpy.array_equal(g0.view(numpy.int32), g1.view(numpy.int32))


@pytest.mark.parametrize('case', ['broadcast', 'float64', 'float16', 'small', 'numpy mode'])
def test_sums_the_kernels_do_not_take_are_chainers(case):
    shape = (2, 3, 40, 40)
    a, b = _u(shape, 46), _u(shape, 47)
    if case == 'broadcast':
        b = _u((1, 3, 1, 40), 47)
    elif case in ('float64', 'float16'):
        a, b = a.astype(case), b.astype(case)
    elif case == 'small':
        a, b = _u((4, 4), 46), _u((4, 4), 47)
    theirs, mine = run_both(lambda x, y: x + y, [a, b], [_u(numpy.broadcast(a, b).shape, 48)
                                                        .astype(a.dtype)])
    for t, m in zip(theirs, mine):
        assert t.shape == m.shape and t.dtype == m.dtype and numpy.array_equal(t, m)
    (replacements.disable if case == 'numpy mode' else replacements.enable)()
    assert _taken(lambda: chainer.Variable(a) + chainer.Variable(b)) == []


def _pool_x():
    x = _u((2, 3, 7, 7), 3)
    x[0, 0, 3, 3] = NAN       # inside
    x[0, 1, 0, 0] = NAN       # a corner, in the padding's windows
    x[1, 2, 6, 5] = INF
    x[1, 0, 2, 2:5] = -INF    # a window of -inf
    x[1, 1, 4:7, 4:7] = -INF
    return x


@pytest.mark.parametrize('ksize, stride, pad, cover_all', [
    (3, 2, 1, True), (3, 2, 1, False), (2, 2, 0, True), (3, 1, 0, False)])
def test_max_pooling_propagates_nan_and_infinities(ksize, stride, pad, cover_all):
    x = _pool_x()
    y_shape = F.max_pooling_2d(x, ksize, stride, pad, cover_all).shape
    gy = _u(y_shape, 4)
    gy[0, 2, 0, 0] = NAN
    check(lambda v: F.max_pooling_2d(v, ksize, stride, pad, cover_all), [x], [gy])


def test_average_pooling_propagates_nan_and_infinities():
    x = _pool_x()
    gy = _u(F.average_pooling_2d(x, 3, 2, 1).shape, 5)
    gy[1, 1, 1, 1] = INF
    check(lambda v: F.average_pooling_2d(v, 3, 2, 1), [x], [gy])


@pytest.mark.parametrize('where', ['x inside', 'x at the border', 'W', 'b', 'gy at the border',
                                   'gy inf', 'W with no padding'])
def test_convolution_propagates_nan_and_infinities(where):
    x, W, b = _u((2, 4, 6, 5), 6), _u((3, 4, 3, 3), 7), _u(3, 8)
    pad = 0 if where == 'W with no padding' else 1
    gy = _u((2, 3, 6 - 2 + 2 * pad, 5 - 2 + 2 * pad), 9)
    if where == 'x inside':
        x[0, 1, 3, 2] = NAN
    elif where == 'x at the border':
        x[1, 0, 0, 4] = INF
    elif where in ('W', 'W with no padding'):
        W[1, 2, 0, 0] = NAN  # Chainer: the padding's zeros times NaN, a whole channel NaN
    elif where == 'b':
        b[2] = -INF
    elif where == 'gy at the border':
        gy[0, 1, 0, 0] = NAN  # Chainer's gW: NaN through the padding's zeros too
    else:
        gy[1, 2, -1, -1] = INF
    check(lambda *a: F.convolution_2d(*a, pad=pad), [x, W, b], [gy])


def test_deconvolution_propagates_nan_and_infinities():
    x, W, b = _u((2, 4, 3, 3), 10), _u((4, 2, 3, 3), 11), _u(2, 12)
    x[0, 0, 0, 0] = NAN
    W[3, 1, 2, 2] = INF
    gy = _u((2, 2, 5, 5), 13)
    gy[1, 0, 4, 4] = NAN
    check(lambda *a: F.deconvolution_2d(*a, stride=2, pad=1), [x, W, b], [gy])


def test_local_response_normalization_propagates_nan_and_infinities():
    x = _u((2, 7, 4, 3), 14)
    x[0, 3, 1, 1] = NAN
    x[1, 0, 2, 2] = INF
    gy = _u(x.shape, 15)
    gy[1, 6, 0, 0] = NAN
    check(F.local_response_normalization, [x], [gy])


def test_batch_normalization_propagates_nan_and_infinities_to_its_running_statistics():
    x = _u((4, 3, 5, 5), 16)
    x[2, 1, 3, 3] = NAN
    x[0, 2, 0, 0] = INF
    gamma, beta = _u(3, 17) + 2, _u(3, 18)
    gy = _u(x.shape, 19)

    def run():
        link = L.BatchNormalization(3, initial_gamma=gamma, initial_beta=beta)
        xv = chainer.Variable(x)
        with chainer.using_config('train', True):
            y = link(xv)
        y.grad = gy
        y.backward()
        return y.array, xv.grad, link.gamma.grad, link.beta.grad, link.avg_mean, link.avg_var
    for i, (a, b) in enumerate(zip(*both(run))):
        same(a, b, f'result {i}')


def test_fixed_batch_normalization_propagates_nan_and_infinities():
    x = _u((4, 3, 5, 5), 20)
    x[1, 0, 1, 1] = NAN
    mean, var = _u(3, 21), _u(3, 22) + 2
    var[2] = INF
    gamma, beta = _u(3, 23), _u(3, 24)
    gy = _u(x.shape, 25)
    check(lambda *a: F.fixed_batch_normalization(*a), [x, gamma, beta, mean, var], [gy])


def test_one_nan_weight_makes_the_loss_nan_as_in_chainer():
    # the network: conv -> BN -> ReLU -> pool -> linear, one NaN weight
    def loss():
        rng = _rng(26)
        conv = L.Convolution2D(3, 8, 3, pad=1, initialW=rng.normal(0, .3, (8, 3, 3, 3)))
        conv.W.array[5, 1, 1, 1] = NAN
        bn = L.BatchNormalization(8)
        fc = L.Linear(8 * 8 * 8, 10)
        x = rng.uniform(-1, 1, (4, 3, 16, 16)).astype(numpy.float32)
        h = F.max_pooling_2d(F.relu(bn(conv(x))), 2)
        out = F.softmax_cross_entropy(fc(h), numpy.arange(4, dtype=numpy.int32))
        out.backward()
        return out.array, conv.W.grad
    (l0, g0), (l1, g1) = both(loss)
    assert numpy.isnan(l0) and numpy.isnan(l1)
    same(g0, g1, 'the weights\' gradient')


# --- 1b. numpy's floating-point errors: raised or warned as numpy would ---------------------

def _bn_gradient(x, gamma, beta, gy):
    xv, gv = chainer.Variable(x), chainer.Variable(gamma.copy())
    return chainer.grad([F.batch_normalization(xv, gv, beta)], [xv, gv],
                        [chainer.Variable(gy)])


def _fp_cases():
    big = (2, 3, 40, 40)  # past eltwise.SMALL: the kernels' size
    gy = _u(big, 2)
    gy.reshape(-1)[0] = INF
    y = numpy.abs(_u(big, 3))
    y.reshape(-1)[0] = 0.0  # inf * (y > 0) = inf * 0: invalid
    a, b = _u(big, 4), _u(big, 5)
    a.reshape(-1)[1], b.reshape(-1)[1] = INF, -INF  # inf + -inf: invalid
    c, d = _u(big, 6), _u(big, 7)
    c.reshape(-1)[2] = d.reshape(-1)[2] = 3e38  # overflow
    x = _u(big, 8)
    x.reshape(-1)[3] = INF  # batch normalization's x - mean: inf - inf
    gamma, beta = _u((3,), 9), _u((3,), 10)
    return [
        ('relu gradient', lambda: F.relu(chainer.Variable(y)).creator.backward(
            (0,), (chainer.Variable(gy),))),
        ('add', lambda: F.add(a, b)), ('a + b', lambda: chainer.Variable(a) + b),
        ('multi-add', lambda: F.add(a, b, a)), ('add overflow', lambda: F.add(c, d)),
        ('batch normalization', lambda: F.batch_normalization(x, gamma, beta)),
        ('batch normalization gradient', lambda: _bn_gradient(_u(big, 11), gamma, beta, gy)),
    ]


@pytest.mark.parametrize('case', range(7))
def test_numpy_errstate_raise_fires_where_chainers_numpy_does(case, as_it_was):
    what, run = _fp_cases()[case]
    for enable in (replacements.disable, replacements.enable):
        enable()
        with numpy.errstate(all='raise'), pytest.raises(FloatingPointError):
            run()


@pytest.mark.parametrize('case', range(7))
def test_warnings_as_errors_fire_and_plain_warnings_are_said_where_chainers_numpy_does(
        case, as_it_was):
    what, run = _fp_cases()[case]
    for enable in (replacements.disable, replacements.enable):
        enable()
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            with pytest.raises(RuntimeWarning):
                run()
        with pytest.warns(RuntimeWarning):
            run()


def test_ignored_floating_point_errors_stay_on_the_kernels(as_it_was):
    from chainermn_torus.compute.kernels import eltwise
    if not eltwise.available():
        pytest.skip('numba is not installed: the sums are Chainer\'s anyway')
    a = _u((2, 3, 40, 40), 4)
    a.reshape(-1)[1] = INF
    b = -a
    replacements.enable()
    with numpy.errstate(all='ignore'):
        y = F.add(a, b)
    assert numpy.isnan(y.array.reshape(-1)[1]) and eltwise.add([a, b])[1] is False


# --- 2. every rank keeps its shape -----------------------------------------------------

@pytest.mark.parametrize('shape', [(), (1,), (7,), (3, 2), (70, 80), (2, 3, 4, 5, 6),
                                   (5000,), (1, 1, 1, 1, 1, 1)])
def test_relu_keeps_every_shape(shape):
    x = _u(shape, 27)
    check(F.relu, [x], [_u(shape, 28)], double=[_u(shape, 29)])


def test_a_hinge_loss_of_a_0d_relu_has_its_gradient():
    def run():
        v = chainer.Variable(numpy.array(0.5, numpy.float32))
        y = F.relu(1 - F.sum(v))
        y.backward()
        return y.array, v.grad
    (y0, g0), (y1, g1) = both(run)
    assert y1.shape == () and g1.shape == ()
    assert y0 == y1 and g0 == g1


# --- 3. refusals are Chainer's -----------------------------------------------------------

def _raised(call):
    try:
        call()
    except Exception as e:  # the type and the words are what is compared
        return type(e), str(e)
    return None


REFUSED = {
    'convolution with no output': lambda: F.convolution_2d(_u((1, 3, 2, 2)), _u((4, 3, 3, 3))),
    'convolution of a 1 x 1 input': lambda: F.convolution_2d(_u((1, 3, 1, 1)), _u((4, 3, 3, 3))),
    'convolution with groups that do not divide':
        lambda: F.convolution_2d(_u((1, 4, 5, 5)), _u((3, 2, 3, 3)), groups=2),
    'max pooling with no output': lambda: F.max_pooling_2d(_u((1, 3, 2, 2)), 3, cover_all=False),
    'max pooling of Chainer\'s own test': lambda: F.max_pooling_2d(_u((4, 4, 1, 4)), 3, stride=2),
    'average pooling with no output': lambda: F.average_pooling_2d(_u((1, 3, 2, 2)), 3),
    'deconvolution with no output': lambda: F.deconvolution_2d(_u((1, 3, 2, 2)),
                                                               _u((3, 4, 3, 3)), pad=3),
    'batch normalization over a list of axes':
        lambda: F.batch_normalization(_u((4, 3, 2, 2)), _u(3), _u(3), axis=[0, 2, 3]),
}


@pytest.mark.parametrize('case', sorted(REFUSED))
def test_a_geometry_chainer_refuses_is_refused_with_chainers_error(case):
    replacements.disable()
    theirs = _raised(REFUSED[case])
    replacements.enable()
    mine = _raised(REFUSED[case])
    assert theirs is not None, 'Chainer accepts it'
    assert mine == theirs


@pytest.mark.parametrize('n', [-1, 0])
def test_lrn_with_a_window_chainer_takes_and_onednn_refuses_is_chainers(n):
    x = _u((2, 5, 3, 3), 30)
    check(lambda v: F.local_response_normalization(v, n=n), [x], [_u(x.shape, 31)])


# --- 4. windows of padding alone --------------------------------------------------------

@pytest.mark.parametrize('shape, ksize, stride, pad, cover_all', [
    ((1, 2, 3, 3), 2, 4, 0, True),     # cover_all with the stride beyond the window
    ((1, 2, 5, 7), 2, 2, 1, True),     # k2 s2 p1 on odd sizes
    ((1, 2, 3, 3), 2, 1, 2, False),    # a padding of the window's size
    ((2, 3, 6, 6), (2, 3), (3, 2), (1, 2), True)])
def test_a_window_of_padding_alone_is_minus_infinity(shape, ksize, stride, pad, cover_all):
    x = _u(shape, 32)
    y = F.max_pooling_2d(x, ksize, stride, pad, cover_all)
    replacements.enable()
    assert numpy.isneginf(F.max_pooling_2d(x, ksize, stride, pad, cover_all).array).any()
    check(lambda v: F.max_pooling_2d(v, ksize, stride, pad, cover_all), [x],
          [_u(y.shape, 33)])


# --- 5. the backward runs in the mode of its forward -------------------------------------

SWITCHED = {
    'max_pooling_2d': (lambda v: F.max_pooling_2d(v, 3, 2, 1), (2, 3, 9, 9)),
    'average_pooling_2d': (lambda v: F.average_pooling_2d(v, 3, 2, 1), (2, 3, 9, 9)),
    'local_response_normalization': (F.local_response_normalization, (2, 7, 5, 5)),
    'relu': (F.relu, (4, 8, 16, 16)),
    'convolution_2d': (lambda v: F.convolution_2d(v, _u((5, 3, 3, 3), 34), pad=1),
                       (2, 3, 8, 8)),
}


@pytest.mark.parametrize('name', sorted(SWITCHED))
@pytest.mark.parametrize('forward_on', [True, False])
def test_switching_between_a_forward_and_its_backward_changes_nothing(name, forward_on):
    fn, shape = SWITCHED[name]
    x = _u(shape, 35)

    def run(switch):
        (replacements.enable if forward_on else replacements.disable)()
        xv = chainer.Variable(x)
        y = fn(xv)
        y.grad = _u(y.shape, 36)
        if switch:
            (replacements.disable if forward_on else replacements.enable)()
        y.backward(enable_double_backprop=True)
        # the gradient's own node ran in the forward's mode
        assert xv.grad_var.creator.__dict__.get(modes._STARTED) == (forward_on, 'fp32')
        return y.array, xv.grad
    for a, b in zip(run(False), run(True)):
        assert numpy.array_equal(a, b)


def test_a_backward_runs_in_the_precision_of_its_forward():
    # Before: the precision was only the global one, so a convolution's backward read
    # whatever was in force at backward time (bf16 gradients for an fp32 forward).
    class Node:
        pass

    seen = []
    backward = modes.in_mode_of_forward(lambda node: seen.append((modes.on(),
                                                                  modes.precision())))
    was = modes.enabled(), modes.precision()
    try:
        for forward, switched in (('bf16', 'fp32'), ('fp32', 'bf16')):
            modes.set_on(True)
            modes.set_precision(forward)
            node = Node()
            assert modes.start(node) is True
            modes.set_on(False)
            modes.set_precision(switched)
            backward(node)
            assert seen[-1] == (True, forward) and modes.precision() == switched
    finally:
        modes.set_on(was[0])
        modes.set_precision(was[1])


@pytest.mark.skipif(not __import__('chainermn_torus.compute.precision', fromlist=['x'])
                    .cpu_bf16()[0], reason='this CPU has no bfloat16 instructions (the '
                    'in-process test above checks the recording)')
@pytest.mark.parametrize('name', ['convolution_2d', 'linear'])
def test_switching_the_precision_between_a_forward_and_its_backward_changes_nothing(name):
    x = _u((2, 3, 8, 8) if name == 'convolution_2d' else (4, 24), 40)
    W = _u((5, 3, 3, 3) if name == 'convolution_2d' else (6, 24), 41)
    fn = (lambda v: F.convolution_2d(v, W, pad=1)) if name == 'convolution_2d' else \
        (lambda v: F.linear(v, W))
    was = modes.precision()

    def run(switch):
        replacements.enable()
        modes.set_precision('bf16')
        xv = chainer.Variable(x)
        y = fn(xv)
        y.grad = _u(y.shape, 42)
        if switch:
            modes.set_precision('fp32')
        y.backward()
        return y.array, xv.grad
    try:
        kept, switched = run(False), run(True)
    finally:
        modes.set_precision(was)
    for a, b in zip(kept, switched):
        assert numpy.array_equal(a, b)


def test_max_pooling_backward_twice_on_one_node():
    # Chainer's own test calls the node's backward twice (its workspace is kept)
    replacements.enable()
    x = _u((2, 3, 4, 3), 37)
    func = max_pooling_nd.MaxPoolingND(2, 3, stride=2, pad=1)
    y, = func.apply((x,))
    gy = _u(y.shape, 38)
    first = func.backward((0,), (chainer.Variable(gy),))[0].array
    second = func.backward((0,), (chainer.Variable(gy),))[0].array
    assert getattr(func, pooling_functions.WORKSPACE) is not None
    assert numpy.array_equal(first, second)


# --- 6. the primitives kept stay within their bound -----------------------------------------

def test_geometries_beyond_the_bound_are_dropped_and_made_again():
    replacements.enable()
    was = geometries.bound()
    package_probes.set_onednn_bound(3)
    try:
        first = _u((2, 3, 9, 9), 39)
        y = F.max_pooling_2d(chainer.Variable(first), 3, 2, 1)
        made = geometries.stats()['made']
        for size in range(10, 16):  # six other shapes push the first one out
            F.max_pooling_2d(_u((2, 3, size, size), size), 3, 2, 1)
        stats = geometries.stats()
        assert stats['kept'] <= 3 and stats['dropped'] >= 4
        y.grad = _u(y.shape, 40)
        y.backward()  # the first geometry again: made anew for the gradient
        assert geometries.stats()['made'] > made + 6
    finally:
        package_probes.set_onednn_bound(was)
    same(y.array, F.max_pooling_2d(first, 3, 2, 1).array)


def test_the_bound_is_the_configuration_tables():
    from chainermn_torus import settings_table
    assert settings_table.SETTINGS['onednn_cache'].default == geometries.bound() or \
        'CHAINERMN_TORUS_ONEDNN_CACHE' in __import__('os').environ
    with pytest.raises(Exception, match='integer >= 1'):
        package_probes.set_onednn_bound(0)


# --- Chainer v7.8.1's own classes of cases ---------------------------------------------

def _nc(a):
    """A non-contiguous copy (Chainer's tests' Fortran order)."""
    return None if a is None else numpy.asfortranarray(a)


def _conv_case(dtype_x, dtype_w, cover_all, groups, nobias, dilate, contiguous, double):
    x = _u((2, 3 * groups, 4, 3), 41, dtype_x)
    W = _rng(42).normal(0, 0.3, (2 * groups, 3, 3, 3)).astype(dtype_w)
    b = None if nobias else _u(2 * groups, 43, dtype_x)
    pad = (dilate, dilate)
    def fn(*a):
        return F.convolution_2d(*a, stride=2, pad=pad, cover_all=cover_all, dilate=dilate,
                                groups=groups)
    y = fn(*[a for a in (x, W, b) if a is not None])
    gy = _u(y.shape, 44, dtype_x)
    inputs = [a if contiguous else _nc(a) for a in (x, W, b)]
    dd = [_u(a.shape, 45, a.dtype) for a in (x, W, b) if a is not None] if double else None
    return fn, [a for a in inputs if a is not None], [gy if contiguous else _nc(gy)], dd


CONV_CLASSES = [
    # (x dtype, W dtype, cover_all, groups, nobias, dilate, contiguous, double backward)
    ('f', 'f', True, 1, False, 1, True, True), ('f', 'f', False, 2, True, 1, False, True),
    ('f', 'f', True, 2, False, 2, True, False), ('e', 'f', False, 1, False, 1, False, False),
    ('f', 'd', False, 2, True, 1, False, False), ('d', 'd', False, 1, False, 1, True, True),
    ('f', 'e', False, 1, False, 1, True, False)]


@pytest.mark.parametrize('case', CONV_CLASSES)
def test_convolution_classes_of_chainers_tests(case):
    fn, inputs, gys, double = _conv_case(*case)
    low = 'e' in case[:2]
    check(fn, inputs, gys, double, rtol=5e-3 if low else 2e-5)


@pytest.mark.parametrize('stride, dilate, groups, outsize, nobias, dtype', [
    (1, 1, 1, True, True, 'f'), (2, 1, 2, False, True, 'f'), (2, 2, 2, True, False, 'f'),
    (1, 2, 1, True, False, 'd'), (2, 1, 3, True, False, 'f')])
def test_deconvolution_classes_of_chainers_tests(stride, dilate, groups, outsize, nobias,
                                                 dtype):
    from chainer.utils import conv as chainer_conv
    x = _u((2, 3 * groups, 4, 3), 46, dtype)
    W = _rng(47).normal(0, 0.3, (3 * groups, 2, 3, 3)).astype(dtype)
    b = None if nobias else _u(2 * groups, 48, dtype)
    out = tuple(chainer_conv.get_deconv_outsize(s, 3, stride, 1, d=dilate) for s in (4, 3))

    def fn(*a):
        return F.deconvolution_2d(*a, stride=stride, pad=1, outsize=out if outsize else None,
                                  dilate=dilate, groups=groups)
    inputs = [a for a in (x, W, b) if a is not None]
    gy = _u((2, 2 * groups) + out, 49, dtype)
    check(fn, inputs, [gy], [_u(a.shape, 50, a.dtype) for a in inputs])


@pytest.mark.parametrize('dtype', ['e', 'f', 'd'])
@pytest.mark.parametrize('contiguous', [True, False])
def test_pooling_classes_of_chainers_tests(dtype, contiguous):
    # Chainer's: (2, 3, 4, 3), window 3, stride 2, pad 1, cover_all both ways; the wide one
    x = numpy.arange(2 * 3 * 4 * 3, dtype=dtype).reshape(2, 3, 4, 3)
    _rng(51).shuffle(x)
    x = (2 * x / x.size - 1).astype(dtype)
    x = x if contiguous else _nc(x)
    rtol = 5e-3 if dtype == 'e' else 2e-5
    for cover_all in (True, False):
        y = F.max_pooling_2d(x, 3, 2, 1, cover_all)
        check(lambda v: F.max_pooling_2d(v, 3, 2, 1, cover_all), [x],
              [_u(y.shape, 52, dtype)], [_u(x.shape, 53, dtype)], rtol=rtol)
    check(lambda v: F.average_pooling_2d(v, 3, 2, 1), [x], [_u((2, 3, 2, 2), 54, dtype)],
          [_u(x.shape, 55, dtype)], rtol=rtol)
    wide = _rng(56).rand(2, 3, 15, 15).astype(dtype)
    check(lambda v: F.max_pooling_2d(v, 6, stride=6, pad=0), [wide], rtol=rtol)


def test_max_pooling_with_indices_is_chainers():
    x = numpy.arange(2 * 3 * 4 * 4, dtype=numpy.float32).reshape(2, 3, 4, 4)
    _rng(57).shuffle(x)

    def run():
        y, indices = F.max_pooling_2d(x, 2, cover_all=False, return_indices=True)
        return y.array, indices
    for a, b in zip(*both(run)):
        assert numpy.array_equal(a, b)


@pytest.mark.parametrize('dtype', ['e', 'f', 'd'])
def test_lrn_classes_of_chainers_tests(dtype):
    x = _u((2, 7, 3, 2), 58, dtype)
    check(F.local_response_normalization, [x], [_u(x.shape, 59, dtype)],
          rtol=5e-3 if dtype == 'e' else 2e-5)


@pytest.mark.parametrize('shape, axis', [
    ((5, 3), None), ((5, 3, 2), None), ((5, 3, 2, 2), None), ((5, 3, 2, 2, 2), None),
    ((5, 3, 4, 2), None), ((5, 4, 3, 2), (0, 2, 3)), ((5, 4), 0), ((5, 4, 3), (0, 1))])
@pytest.mark.parametrize('dtype, contiguous', [('f', True), ('f', False), ('e', True),
                                               ('d', False)])
def test_batch_normalization_classes_of_chainers_tests(shape, axis, dtype, contiguous):
    if axis is None:
        param = shape[1:2] if len(shape) != 4 or shape[2] != 4 else shape[1:3]
    else:
        axes = (axis,) if isinstance(axis, int) else axis
        param = tuple(s for i, s in enumerate(shape) if i not in axes)
    x = _u(shape, 60, dtype)
    gamma, beta = _u(param, 61, dtype) + 1, _u(param, 62, dtype)
    opts = {} if axis is None else {'axis': axis}
    inputs = [x, gamma, beta] if contiguous else [_nc(x), gamma, beta]
    rtol = 1e-2 if dtype == 'e' else 2e-4
    check(lambda *a: F.batch_normalization(*a, eps=2e-5, **opts), inputs,
          [_u(shape, 63, dtype)], [_u(a.shape, 64, dtype) for a in inputs], rtol=rtol)
    if axis is None:
        mean, var = _u(param, 65, dtype), _u(param, 66, dtype) + 1.5
        check(lambda *a: F.fixed_batch_normalization(*a, eps=2e-5),
              inputs + [mean, var], [_u(shape, 67, dtype)], rtol=rtol)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float16, chainer.mixed16])
@pytest.mark.parametrize('train, finetune', [(True, False), (False, False), (True, True)])
def test_batch_normalization_link_classes_of_chainers_tests(dtype, train, finetune):
    shape = (5, 3, 2, 2)

    def run():
        with chainer.using_config('dtype', dtype):
            link = L.BatchNormalization(axis=(0, 2, 3))  # the channels inferred
        x = _u(shape, 68, numpy.float16 if dtype is not numpy.float32 else dtype)
        out = []
        for step in range(2):
            xv = chainer.Variable(x + step)
            with chainer.using_config('train', train):
                y = link(xv, finetune=finetune)
            y.grad = numpy.ones_like(y.array)
            y.backward()
            out += [y.array, xv.grad, link.avg_mean.copy(), link.avg_var.copy()]
        return out
    for i, (a, b) in enumerate(zip(*both(run))):
        same(a, b, f'result {i}', rtol=1e-2)


def test_batch_normalization_link_without_gamma_and_beta_and_its_warnings():
    def run():
        link = L.BatchNormalization(3, use_gamma=False, use_beta=False)
        xv = chainer.Variable(_u((7, 3, 2, 2), 69))
        y = link(xv)
        y.grad = _u(y.shape, 70)
        y.backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            F.batch_normalization(_u((1, 3), 71), _u(3, 72), _u(3, 73))
        return y.array, xv.grad, numpy.array(len(caught))
    (y0, g0, w0), (y1, g1, w1) = both(run)
    same(y0, y1)
    same(g0, g1)
    assert w0 == w1 == 1  # Chainer's warning of a batch of one


def test_batch_normalization_link_refuses_a_wrong_shape_with_chainers_error():
    for on in (False, True):
        (replacements.enable if on else replacements.disable)()
        with pytest.raises(type_check.InvalidType):
            L.BatchNormalization(3)(numpy.zeros((2, 5, 3, 4), numpy.float32))


def test_convolution_link_classes_of_chainers_tests():
    import pickle

    def run():
        numpy.random.seed(75)  # the links' initial weights
        link = L.Convolution2D(None, 2, 3, 2, 1)  # in_channels inferred
        x = _u((2, 3, 4, 3), 74)
        y1 = link(x).array
        link = pickle.loads(pickle.dumps(link, -1))
        y2 = link(x).array
        y3 = F.sum(L.Convolution2D(3, 1, 3)(numpy.ones((2, 3, 10, 10), numpy.float32)))
        y3.backward()  # F.sum's gradient is not contiguous (Chainer's issue 2744)
        return y1, y2
    (a1, a2), (b1, b2) = both(run)
    assert numpy.array_equal(b1, b2)
    same(a1, b1)


def test_a_channels_last_layout_is_refused_as_chainer_refuses_it():
    from chainer import memory_layouts
    for on in (False, True):
        (replacements.enable if on else replacements.disable)()
        with chainer.using_config('compute_mode', 'cudnn_fast'):
            link = L.Convolution2D(5, 7, (5, 4), (3, 2))
        x = chainer.Variable(numpy.ones((2, 13, 11, 5), numpy.float32),
                             layout=memory_layouts.CUDNN_CHANNEL_LAST_X)
        with pytest.raises(RuntimeError):
            link(x)


# Full tier: 21 shapes, in processes of their own. The documented sweep (batch 8, 64
# channels: docs/measurements/compute/memory.json) is `bench compute-memory`'s default run,
# the same code at four times the batch and channels: 10 s here, left to the benchmark.
@pytest.mark.slow
@pytest.mark.parametrize('batch, channels', [(2, 16)])
def test_resident_memory_over_21_shapes_stays_within_100_mib_of_numpys(batch, channels):
    import json
    import subprocess
    import sys
    from conftest import ROOT
    proc = subprocess.run([sys.executable, '-m', 'chainermn_torus.bench.compute_memory',
                           '--batch', str(batch), '--channels', str(channels),
                           '--resnet-batches', '--json', '/dev/stdout'],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout[proc.stdout.index('{'):])
    numpy_row, onednn_row = result['sweep']
    assert onednn_row['geometries']['kept'] == 66  # 21 sizes x 3 (+ the warm-up's), kept
    assert result['onednn_minus_numpy_mib'] < 100, result
    # one scratch buffer: the largest call's blocked copies, not one per geometry
    assert onednn_row['scratch_mib'] < 4 * batch * channels * 200 * 200 * 4 / 2 ** 20
