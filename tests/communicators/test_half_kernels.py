"""float16 and bfloat16 conversion and block-sum kernels against numpy and ml_dtypes (one
process)."""
import numpy

from chainermn_torus.communicators import _dtypes, _half_kernels as hk


def test_every_float16_bit_pattern_widens_exactly():
    bits = numpy.arange(65536, dtype=numpy.uint16)
    got = numpy.empty(65536, numpy.float32)
    hk.unpack(got, bits)
    want = bits.view(numpy.float16).astype(numpy.float32)
    nan = numpy.isnan(want)
    assert numpy.array_equal(numpy.isnan(got), nan)
    assert numpy.array_equal(got[~nan].view(numpy.uint32), want[~nan].view(numpy.uint32))


def test_rounding_to_float16_matches_numpy_including_ties_subnormals_and_overflow():
    finite = numpy.arange(65536, dtype=numpy.uint16).view(numpy.float16)
    finite = finite[numpy.isfinite(finite)].astype(numpy.float64)
    rng = numpy.random.RandomState(0)
    values = numpy.concatenate([
        finite,                                      # exactly representable
        finite * (1 + 2.0 ** -11),                   # ties between neighbours
        finite * (1 + 2.0 ** -12), finite * (1 - 2.0 ** -12),
        rng.standard_normal(200000) * 10.0 ** rng.uniform(-9, 5, 200000),
        [65504, 65519.99, 65520, 65536, 1e30, -1e30, numpy.inf, -numpy.inf, 0.0, -0.0,
         2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -26, 1e-45],
    ]).astype(numpy.float32)
    got = numpy.empty(values.size, numpy.uint16)
    hk.pack(got, values, numpy.float32(1.0))
    with numpy.errstate(over='ignore'):
        want = values.astype(numpy.float16).view(numpy.uint16)
    assert numpy.array_equal(got, want)
    nan = numpy.empty(1, numpy.uint16)
    hk.pack(nan, numpy.array([numpy.nan], numpy.float32), numpy.float32(1.0))
    assert numpy.isnan(nan.view(numpy.float16)[0])


def test_pack_scales_in_float32_before_rounding():
    x = numpy.array([3e-5, 70000.0, 1.0], numpy.float32)
    got = numpy.empty(3, numpy.uint16)
    hk.pack(got, x, numpy.float32(0.25))
    want = (x * numpy.float32(0.25)).astype(numpy.float16)
    assert numpy.array_equal(got.view(numpy.float16), want)  # 70000/4 is finite


def test_sum_of_blocks_adds_in_float32_and_rounds_once():
    rng = numpy.random.RandomState(1)
    n, blocks = 100003, 3
    data = (rng.standard_normal(blocks * n) * 10).astype(numpy.float16)
    out = numpy.empty(n, numpy.uint16)
    hk.sum_blocks(out, data.view(numpy.uint16), blocks)
    wide = data.astype(numpy.float32).reshape(blocks, n)
    want = ((wide[0] + wide[1]) + wide[2]).astype(numpy.float16)
    assert numpy.array_equal(out.view(numpy.float16), want)


def test_every_bfloat16_bit_pattern_widens_exactly():
    bits = numpy.arange(65536, dtype=numpy.uint32).astype(numpy.uint16)
    got = numpy.empty(65536, numpy.float32)
    hk.unpack_bf16(got, bits)
    want = bits.view(_dtypes.bfloat16()).astype(numpy.float32)
    assert numpy.array_equal(got.view(numpy.uint32), want.view(numpy.uint32))  # NaNs too
    assert numpy.array_equal(got.view(numpy.uint32), bits.astype(numpy.uint32) << 16)


def test_rounding_to_bfloat16_matches_ml_dtypes_including_ties_and_overflow():
    rng = numpy.random.RandomState(1)
    exact = (numpy.arange(65536, dtype=numpy.uint32) << 16).view(numpy.float32)
    exact = exact[numpy.isfinite(exact)]
    ties = (exact.view(numpy.uint32) | 0x8000).view(numpy.float32)  # halfway: to even
    values = numpy.concatenate([
        exact, ties[numpy.isfinite(ties)],
        rng.randint(0, 2 ** 32, 300000, dtype=numpy.uint64).astype(numpy.uint32).view(
            numpy.float32),                                   # every kind of bit pattern
        numpy.array([3.3895314e38, 3.39e38, 3.4e38, -3.4e38, numpy.inf, -numpy.inf, 0.0,
                     -0.0, 1e-45, 1e-40], numpy.float32)])
    nan = numpy.isnan(values)
    got = numpy.empty(values.size, numpy.uint16)
    hk.pack_bf16(got, values, numpy.float32(1.0))
    with numpy.errstate(invalid='ignore', over='ignore'):
        want = values.astype(_dtypes.bfloat16()).view(numpy.uint16)
    assert numpy.array_equal(got[~nan], want[~nan])
    widened = got.view(_dtypes.bfloat16()).astype(numpy.float32)
    assert numpy.isnan(widened[nan]).all()  # a NaN stays NaN, never an infinity
    assert numpy.isinf(widened[values == numpy.float32(3.4e38)]).all()  # past the range


def test_bfloat16_block_sums_add_in_float32_and_round_once():
    blocks = numpy.array([1.0, 2.0 ** -8, 2.0 ** -8, 0.0], numpy.float32)
    bits = numpy.empty(4, numpy.uint16)
    hk.pack_bf16(bits, blocks, numpy.float32(1.0))
    out = numpy.empty(1, numpy.uint16)
    hk.sum_blocks(out, bits, 4, kind='bfloat16')
    # 1 + 2**-8 + 2**-8 = 1 + 2**-7 (a bfloat16 value) in float32; summed in bfloat16 at
    # each step, 1 + 2**-8 (a tie) would round back to 1 twice
    assert out.view(_dtypes.bfloat16()).astype(numpy.float32)[0] == 1.0 + 2 ** -7
