"""The exact sum's numba kernels against fixed_point's numpy functions (one process): the same
bits for the largest magnitude, the encoding (ties, subnormals, signs, both float types) and
the decoded mean; and ExactBuffer's numpy path against its kernels."""
import numpy
import pytest

from chainermn_torus.algorithms import fixed_point as fp
from chainermn_torus.runtime.cpu import jit

pytestmark = pytest.mark.skipif(not jit.available(), reason='numba is not installed: the '
                                'kernels do not exist (the numpy path is the one tested)')


def _values(rng, dtype):
    n = 50001
    x = rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)
    x[:8] = [0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38, 0.5, -1.5]
    return x.astype(dtype)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_the_largest_magnitude_is_numpys_and_a_nan_anywhere_makes_it_nan(dtype):
    from chainermn_torus.communicators import _exact_kernels as k
    rng = numpy.random.default_rng(1)
    x = _values(rng, dtype)
    assert k.largest(x) == float(numpy.abs(x).max())
    assert k.largest(x[:0]) == 0.0 and k.largest(x[8:9]) == abs(float(x[8]))
    for where in (0, 17, x.size - 1):     # first, inside a block, the last block's last
        y = x.copy()
        y[where] = numpy.nan
        assert numpy.isnan(k.largest(y))
    y = x.copy()
    y[123] = -numpy.inf
    assert k.largest(y) == numpy.inf


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('terms', [1, 3, 4, 1000])
def test_encoding_and_decoding_give_numpys_bits(dtype, terms):
    from chainermn_torus.communicators import _exact_kernels as k
    rng = numpy.random.default_rng(terms)
    x = _values(rng, dtype)
    s = int(fp.scales([numpy.abs(x).max()], terms)[0])
    want = fp.encode(x, s)
    got = numpy.empty(x.size, numpy.int64)
    k.encode(x, numpy.ldexp(1.0, s), got)
    assert numpy.array_equal(got, want)
    # ties: half a grid unit rounds to even, as rint does
    unit = numpy.ldexp(1.0, -s)
    ties = (numpy.arange(-6, 7) * unit + unit / 2).astype(dtype)
    k.encode(ties, numpy.ldexp(1.0, s), got[:ties.size])
    assert numpy.array_equal(got[:ties.size], fp.encode(ties, s))
    assert (got[:ties.size] % 2 == 0).all()
    total = sum(fp.encode(x[::-1] if t % 2 else x, s) for t in range(terms))
    out = numpy.empty(x.size, dtype)
    k.decode(total, numpy.ldexp(1.0, -s), float(terms), out)
    want = fp.decode(total, s, terms, out=numpy.empty(x.size, dtype))
    assert numpy.array_equal(out.view(numpy.uint8), want.view(numpy.uint8))


def test_the_buffer_gives_the_same_bits_with_and_without_its_kernels():
    from chainermn_torus.communicators import _exact, _packing

    class P:
        def __init__(self, g):
            self.grad, self.data = g, g

    rng = numpy.random.default_rng(5)
    arrays = [_values(rng, numpy.float32)[:n] for n in (7, 50001, 1, 333)]
    arrays.append(numpy.zeros(9, numpy.float32))
    named = [(f'a{i}', P(a)) for i, a in enumerate(arrays)]
    layout = _packing.Layout([(n, p.grad.shape, p.grad.dtype) for n, p in named],
                             dtype=_exact.WIRE)
    results = []
    for kernels in (True, False):
        buf = _exact.ExactBuffer(layout, 4096, terms=3)
        if not kernels:
            buf._kernels = None

        def allreduce(send, recv, op):
            recv[0][...] = send[0]
        buf.find_scales(named, 0, len(named), allreduce)
        for segment in buf.plan:
            buf.send_source(named, segment)
        buf.array *= 3            # three equal terms
        buf.decode(0, layout.size)
        results.append((buf.array.copy(), buf.means.copy()))
    assert numpy.array_equal(results[0][0], results[1][0])
    assert numpy.array_equal(results[0][1].view(numpy.uint32), results[1][1].view(numpy.uint32))
    # three equal terms: the mean is the value wherever it is on the grid
    means = results[0][1]
    assert numpy.array_equal(means[-9:], numpy.zeros(9, numpy.float32))
    assert means[7] == arrays[1][0] or abs(arrays[1][0]) < abs(arrays[1]).max() * 2.0 ** -24
