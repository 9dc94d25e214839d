"""precision bf16: the CPU check and its refusals, each bfloat16 function against float32,
the copies its steps share, float32 unchanged, and what Chainer sees."""
import chainer
import chainer.functions as F
import numpy
import pytest

from chainermn_torus import compute
from chainermn_torus.compute import modes, precision, replacements
from chainermn_torus.compute.functions import common
from chainermn_torus.compute.onednn import binding, conv, copies, linear
from chainermn_torus.errors import ConfigError, Unsupported
from compute_support import as_it_was  # noqa: F401 autouse

HAS_BF16, WHAT = precision.cpu_bf16()
needs_bf16 = pytest.mark.skipif(
    not (binding.available() and HAS_BF16),
    reason='bfloat16 needs oneDNN and a CPU with bfloat16 '
           f'instructions: {WHAT if binding.available() else binding.why_unavailable()}')

# bfloat16 keeps 8 bits of the mantissa: each product's operands are rounded by up to 2**-9
# relative, the sums are float32. Largest relative difference from float32, over the output
# (|difference| / max |float32|), allowed here: several roundings' worth, far below what a
# wrong computation gives (order 1).
BOUND = 2 ** -6


@pytest.fixture
def in_precision():
    was = modes.precision()
    yield lambda name: compute.set_precision(name)
    modes.set_precision(was)


def _cpuinfo(tmp_path, text):
    path = tmp_path / 'cpuinfo'
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize('text, found', [
    ('processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_vnni\n', 'AVX512-BF16'),
    ('processor\t: 0\nflags\t\t: fpu avx512f amx_tile amx_bf16 amx_int8\n', 'AMX-BF16'),
    ('processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n', "Arm's BF16"),
])
def test_the_cpu_check_finds_each_kind_of_bfloat16(tmp_path, text, found):
    ok, what = precision.cpu_bf16(_cpuinfo(tmp_path, text))
    assert ok and found in what


def test_bf16_is_refused_in_one_line_where_the_cpu_lacks_it(tmp_path):
    path = _cpuinfo(tmp_path, 'processor\t: 0\nflags\t\t: fpu sse avx2 fma avx512f\n')
    assert precision.cpu_bf16(path)[0] is False
    with pytest.raises(Unsupported) as e:
        precision.check('bf16', 'onednn', '--precision', path)
    text = str(e.value)
    assert '--precision=bf16 refused' in text and 'AVX512-BF16, AMX-BF16' in text
    assert '5 flags read from' in text and 'slower than float32' in text
    assert '\n' not in text
    precision.check('fp32', 'onednn', '--precision', path)  # fp32 needs nothing
    assert precision.cpu_bf16(str(tmp_path / 'absent'))[0] is False


def test_bf16_without_onednn_is_refused_naming_both_settings():
    with pytest.raises(ConfigError) as e:
        compute.use('numpy', precision='bf16', precision_source='CHAINERMN_TORUS_PRECISION')
    assert 'CHAINERMN_TORUS_PRECISION=bf16 needs oneDNN, and compute is numpy' in str(e.value)
    with pytest.raises(ConfigError) as e:
        compute.set_precision('bf8')
    assert "must be fp32 or bf16, got 'bf8'" in str(e.value)


def _rel(a, b):
    return float(numpy.abs(a - b).max() / numpy.abs(a).max())


CONVS = [((2, 16, 9, 7), (24, 16, 3, 3), 1, 1, 1), ((3, 32, 8, 8), (16, 32, 1, 1), 2, 0, 1),
         ((2, 12, 10, 10), (12, 3, 3, 3), 1, 1, 4), ((1, 3, 17, 17), (8, 3, 7, 7), 2, 3, 1)]


@needs_bf16
@pytest.mark.parametrize('x_shape, w_shape, stride, pad, groups', CONVS)
def test_each_bf16_convolution_step_is_float32_within_bfloat16_rounding(
        x_shape, w_shape, stride, pad, groups):
    rng = numpy.random.RandomState(0)
    x = rng.randn(*x_shape).astype(numpy.float32)
    W = rng.randn(*w_shape).astype(numpy.float32)
    args = ((stride, stride), (pad, pad), False, (1, 1), groups)
    y32 = conv.forward(x, W, None, *args)
    y16 = conv.forward(x, W, None, *args, precision='bf16')
    gy = rng.randn(*y32.shape).astype(numpy.float32)
    gx = [conv.backward_data(gy, W, x.shape, (stride,) * 2, (pad,) * 2, (1, 1), groups, p)
          for p in ('fp32', 'bf16')]
    gw = [conv.backward_weights(x, gy, W.shape, (stride,) * 2, (pad,) * 2, (1, 1), groups,
                                precision=p)[0] for p in ('fp32', 'bf16')]
    for a, b in ((y32, y16), gx, gw):
        assert b.dtype == numpy.float32 and b.shape == a.shape
        assert 0 < _rel(a, b) < BOUND  # rounded (so bf16 ran), and only rounded


@needs_bf16
def test_bf16_linear_and_its_gradients_are_float32_within_bfloat16_rounding():
    rng = numpy.random.RandomState(1)
    x = rng.randn(37, 300).astype(numpy.float32)
    W = rng.randn(130, 300).astype(numpy.float32)
    b = rng.randn(130).astype(numpy.float32)
    gy = rng.randn(37, 130).astype(numpy.float32)
    for want, got in ((x.dot(W.T) + b, linear.forward(x, W, b)),
                      (gy.dot(W), linear.backward_data(W, gy)),
                      (gy.T.dot(x), linear.backward_weights(x, gy))):
        assert got.dtype == numpy.float32 and 0 < _rel(want, got) < BOUND


def _net_grads(precision_name, x, W1, W2, b3):
    h1 = chainer.Parameter(W1.copy())
    h2 = chainer.Parameter(W2.copy())
    xv = chainer.Variable(x)
    y = F.relu(F.convolution_2d(xv, h1, pad=1))
    y = F.convolution_2d(y, h2, stride=2)
    y = F.deconvolution_2d(y, h2, stride=2, outsize=(8, 8))
    loss = F.sum(F.linear(F.reshape(y, (y.shape[0], -1)), b3) ** 2)
    loss.backward()
    return loss.array, xv.grad, h1.grad, h2.grad


@needs_bf16
def test_a_network_in_bf16_is_float32_to_chainer_and_close_to_float32(in_precision):
    rng = numpy.random.RandomState(2)
    x = rng.randn(2, 4, 8, 8).astype(numpy.float32)
    W1 = rng.randn(6, 4, 3, 3).astype(numpy.float32) * 0.3
    W2 = rng.randn(6, 6, 1, 1).astype(numpy.float32) * 0.3
    b3 = rng.randn(5, 6 * 8 * 8).astype(numpy.float32) * 0.1
    replacements.enable()
    in_precision('fp32')
    want = _net_grads('fp32', x, W1, W2, b3)
    in_precision('bf16')
    got = _net_grads('bf16', x, W1, W2, b3)
    for a, b in zip(want, got):
        assert b.dtype == numpy.float32
        assert 0 < _rel(a, b) < 4 * BOUND  # a few layers: their roundings add up


@needs_bf16
def test_float32_is_unchanged_bit_for_bit_by_the_bf16_code(in_precision):
    # fp32's convolutions are the same primitives as before; its linear layers stay
    # Chainer's own (numpy's BLAS): the same bits as with the replacements off.
    rng = numpy.random.RandomState(3)
    x = rng.randn(4, 50).astype(numpy.float32)
    W = rng.randn(7, 50).astype(numpy.float32)
    replacements.disable()
    theirs = F.linear(x, W).array
    replacements.enable()
    in_precision('fp32')
    assert numpy.array_equal(F.linear(x, W).array, theirs)
    in_precision('bf16')
    assert not numpy.array_equal(F.linear(x, W).array, theirs)


@needs_bf16
def test_a_convolutions_backward_reuses_its_forwards_bfloat16_copies(in_precision):
    # x converted by the forward and gy by the first gradient are found by the weights'
    # gradient; W's copy serves the input's gradient where oneDNN asks for the forward's
    # layout (for this geometry it wants another): the gradients are the bits of
    # converting again.
    replacements.enable()
    in_precision('bf16')
    rng = numpy.random.RandomState(4)
    x = chainer.Variable(rng.randn(2, 16, 12, 12).astype(numpy.float32))
    W = chainer.Parameter(rng.randn(32, 16, 3, 3).astype(numpy.float32))
    y = F.convolution_2d(x, W, pad=1)
    node = y.creator
    kept = node.__dict__[common.COPIES]
    assert kept.bytes() > 0
    gy = rng.randn(*y.shape).astype(numpy.float32)
    y.grad = gy
    y.backward()
    assert kept.reused in (2, 3) and common.COPIES not in node.__dict__
    args = ((1, 1), (1, 1), (1, 1), 1, 'bf16')
    assert numpy.array_equal(x.grad, conv.backward_data(gy, W.array, x.shape, *args))
    assert numpy.array_equal(W.grad, conv.backward_weights(x.array, gy, W.shape, *args[:4],
                                                           precision='bf16')[0])


@needs_bf16
def test_evaluation_keeps_no_copies(in_precision):
    replacements.enable()
    in_precision('bf16')
    x = numpy.ones((1, 3, 8, 8), numpy.float32)
    W = numpy.ones((4, 3, 3, 3), numpy.float32)
    with chainer.using_config('enable_backprop', False):
        y = F.convolution_2d(x, W)
    assert y.creator is None  # no graph, and nothing kept for a backward that never comes
    assert copies.current() is None


@needs_bf16
@pytest.mark.slow  # two jobs of two ranks
@pytest.mark.parametrize('options, env', [(['--precision', 'bf16'], None),
                                          ([], {'CHAINERMN_TORUS_PRECISION': 'bf16'})])
def test_the_launcher_and_the_variable_turn_bf16_on_said_once(options, env):
    from conftest import assert_ok, run_mpi, worker
    proc = run_mpi(2, ['-m', 'chainermn_torus.run'] + options + [worker('compute_mode.py')],
                   env=env)
    lines = assert_ok(proc, 2)
    said = [line for line in proc.stdout.splitlines() if '; bfloat16 (' in line]
    assert len(said) == 1 and 'parameters, gradients and the update stay float32' in said[0]
    assert all('conv chainermn_torus.compute.functions.convolution' in ln for ln in lines), lines


def test_float32s_batch_normalization_keeps_its_order_beside_the_any_order_kernels():
    # Sums whose order shows: 2**60, then 1s, then -2**60. Added in order (float64), each 1
    # is lost against 2**60 and the mean is 0; added in any order (bf16's kernels), lanes
    # that never see 2**60 keep their 1s. The two kernels share numba's cache folder, and a
    # variant cached under the float32 kernel's name once replaced its code (a ResNet's
    # float32 loss changed in its 8th digit): they must stay apart.
    bn_kernels = pytest.importorskip('chainermn_torus.compute.kernels.batchnorm',
                                     reason='numba is not installed (make setup installs it)')
    x = numpy.ones((1, 1, 4096), numpy.float32)  # long enough for the vectorised loop
    x[0, 0, 0], x[0, 0, -1] = 2.0 ** 60, -2.0 ** 60
    mean, var = numpy.empty(1, numpy.float32), numpy.empty(1, numpy.float32)
    bn_kernels._statistics_any_order(x, mean, var)
    assert mean[0] != 0.0  # the any-order kernel really reorders
    bn_kernels._statistics(x, mean, var)
    assert mean[0] == 0.0  # float32's keeps Chainer's order
    assert bn_kernels._statistics.py_func.__qualname__ != \
        bn_kernels._statistics_any_order.py_func.__qualname__  # its own cache files
