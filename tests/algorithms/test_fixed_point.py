"""The exact sum's arithmetic (algorithms/fixed_point.py), without MPI: the same bits for
any order and grouping of the terms, exact encoding of every value the docstring promises,
the mean no farther from a float64 mean than float32 sums in rank order, the limits."""
import numpy
import pytest

from chainermn_torus.algorithms import fixed_point as fp


def _gradients(rng, terms, n):
    # gradient-like: a few large values, most small, spanning many binades, both signs
    scale = numpy.exp(rng.normal(0.0, 3.0, size=n)).astype(numpy.float32)
    return [(rng.standard_t(3, size=n) * scale * 1e-3).astype(numpy.float32)
            for _ in range(terms)]


def _exact_mean(xs, terms):
    s = fp.scales([max(float(numpy.abs(x).max()) for x in xs)], terms)[0]
    total = numpy.zeros(xs[0].shape, numpy.int64)
    for x in xs:
        total += fp.encode(x, s)
    return fp.decode(total, s, terms), s


@pytest.mark.parametrize('terms', [1, 2, 3, 6, 16, 37])
def test_the_mean_is_the_same_for_every_order_and_grouping(terms):
    rng = numpy.random.default_rng(terms)
    xs = _gradients(rng, terms, 4099)
    want, s = _exact_mean(xs, terms)
    for trial in range(4):
        order = rng.permutation(terms)
        groups = numpy.array_split(order, 1 + trial)   # partial sums, as ranks hold them
        partial = [sum((fp.encode(xs[i], s) for i in g), numpy.zeros(4099, numpy.int64))
                   for g in groups if len(g)]
        got = fp.decode(sum(partial[::-1]), s, terms)
        assert numpy.array_equal(got.view(numpy.uint32), want.view(numpy.uint32))


@pytest.mark.parametrize('terms', [2, 4, 6, 1000, 16384])
def test_every_value_from_2_to_the_minus_24_of_the_largest_is_encoded_exactly(terms):
    rng = numpy.random.default_rng(7)
    x = _gradients(rng, 1, 20000)[0]
    largest = float(numpy.abs(x).max())
    s = fp.scales([largest], terms)[0]
    big = x[numpy.abs(x) >= largest * 2.0 ** -24]
    assert big.size > 1000
    back = numpy.ldexp(fp.encode(big, s).astype(numpy.float64), -int(s))
    assert numpy.array_equal(back, big.astype(numpy.float64))
    assert all(fp.on_grid(v, s) for v in big[:200])


def test_the_sum_of_the_largest_terms_fits():
    for terms in (1, 2, 3, 1000, fp.MAX_TERMS):
        s = fp.scales([numpy.float32(3.0e38)], terms)[0]
        q = fp.encode(numpy.array([-3.0e38, 3.0e38], numpy.float32), s)
        assert abs(int(q[1])) * terms < 2 ** 63
        assert int(q[1]) == -int(q[0])


@pytest.mark.parametrize('terms', [2, 4, 6])
def test_the_mean_is_no_farther_from_float64_than_float32_sums_in_rank_order(terms):
    rng = numpy.random.default_rng(100 + terms)
    xs = _gradients(rng, terms, 50000)
    exact, _ = _exact_mean(xs, terms)
    ref = sum(x.astype(numpy.float64) for x in xs) / terms
    plain = xs[0].copy()
    for x in xs[1:]:
        plain += x
    plain /= numpy.float32(terms)
    largest = numpy.abs(ref).max()
    keep = numpy.abs(ref) >= largest * 2.0 ** -24
    d_exact = numpy.abs(exact.astype(numpy.float64) - ref)[keep]
    d_plain = numpy.abs(plain.astype(numpy.float64) - ref)[keep]
    assert numpy.all(d_exact <= d_plain), int(numpy.sum(d_exact > d_plain))
    if terms == 2:   # (a + b) rounded once, halved exactly: float32's mean is the nearest too
        assert numpy.array_equal(exact[keep], plain[keep])
    else:
        assert d_exact.sum() < d_plain.sum()


def test_a_non_finite_array_averages_to_nan_and_zeros_to_zeros():
    s_inf, s_nan, s_zero = fp.scales([numpy.inf, numpy.nan, 0.0], 4)
    assert s_inf == s_nan == fp.NOT_FINITE
    assert numpy.isnan(fp.decode(numpy.zeros(3, numpy.int64), s_inf, 4)).all()
    zeros = fp.decode(fp.encode(numpy.zeros(5, numpy.float32), s_zero) * 4, s_zero, 4)
    assert not zeros.any()


@pytest.mark.parametrize('terms', [0, -1, fp.MAX_TERMS + 1])
def test_a_sum_of_an_impossible_number_of_terms_is_refused_naming_it(terms):
    with pytest.raises(ValueError, match=f'exact sum of {terms} terms: from 1 to'):
        fp.headroom_bits(terms)
