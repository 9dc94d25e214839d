"""runtime.cpu.finite: the one NaN/Inf counter, with numba's kernel and with numpy alone: the
same counts for every dtype and limit."""
import numpy
import pytest

from chainermn_torus.runtime.cpu import finite, jit


def _arrays():
    rng = numpy.random.RandomState(0)
    a = rng.normal(0, 1e5, 100003).astype(numpy.float32)
    a[[5, 70000, 99999]] = [numpy.nan, -numpy.inf, numpy.inf]
    h = a.astype(numpy.float16)  # beyond 65504: inf in float16
    c = (a[:1000] + 1j).astype(numpy.complex64)
    return {'f32': a, 'f64': a[:99995].astype(numpy.float64).reshape(5, -1)[:, ::3],  # strided
            'f16': h, 'c64': c, 'i32': numpy.arange(10, dtype=numpy.int32),
            'empty': numpy.zeros(0, numpy.float32)}


@pytest.mark.parametrize('with_numba', [True, False])
@pytest.mark.parametrize('limit', [numpy.inf, 2e5])
def test_counts_are_the_same_with_numba_and_numpy(monkeypatch, with_numba, limit):
    if with_numba and not jit.available():
        pytest.skip('numba is not installed (make setup installs it)')
    if not with_numba:
        monkeypatch.setattr(jit, 'numba', lambda: None)
    for name, a in _arrays().items():
        expected = 0 if a.dtype.kind not in 'fc' else int(
            (~numpy.isfinite(a)).sum() + (0 if a.dtype.kind == 'c' or a.dtype == numpy.float16
                                          else (numpy.abs(a[numpy.isfinite(a)]) > limit).sum()))
        assert finite.count_nonfinite(a, limit) == expected, name
    assert finite.count_nonfinite(_arrays()['f32']) == 3


def test_count_in_names_the_first_array_in_name_order():
    ok = numpy.ones(4, numpy.float32)
    bad = numpy.array([1, numpy.nan, numpy.inf], numpy.float32)
    assert finite.count_in({'b': bad, 'a': ok, 'c': bad}) == (4, 'b (2 of 3 values)')
    assert finite.count_in({'a': ok}) == (0, None)
