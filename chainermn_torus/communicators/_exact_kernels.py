"""numba kernels of the exact sum (``algorithms.fixed_point``): an array's largest
magnitude, its values as 64-bit integers on its grid, and the mean back from their sum.

The same arithmetic as ``fixed_point``'s numpy functions, element by element, so the bits
are the same (``tests/communicators/test_exact_kernels.py`` compares them): a float32 value
widened to float64 and multiplied by 2^s is exact (a power of two, far from overflow), rounded
to the nearest integer with ties to even (``rint``, the CPU's rounding) and converted; the
mean is the integer converted to float64 (rounded to nearest), multiplied by 2^-s (exact),
divided by the number of terms and rounded to the array's float type once. numpy needs four
passes and a float64 temporary for each; these are one pass each, on the rank's threads.
"""
import numpy
from numba import prange

from chainermn_torus.runtime.cpu import jit

__all__ = ['largest', 'encode', 'encode_add', 'encode2', 'decode', 'decode_add', 'mean2']

# An array's largest magnitude from its bits: with the sign bit cleared, non-negative floats
# order as their bit patterns do as unsigned integers, and every NaN's pattern lies above
# infinity's. So an integer max (which vectorises, where a float max with a NaN test does not:
# 19 ms against 5 ms for 25.6M float32 here) gives max |x| exactly, or a NaN where there is
# one.
_ABS32 = numpy.uint32(0x7FFFFFFF)
_ABS64 = numpy.uint64(0x7FFFFFFFFFFFFFFF)


@jit.kernel('(uint32[::1], uint32)', '(uint64[::1], uint64)')
def _top_bits(bits, mask):
    top = mask ^ mask   # zero, of the bits' type
    for i in prange(bits.size):
        top = max(top, bits[i] & mask)
    return top


def largest(x):
    """max |x| of a float32 or float64 array, as a float; NaN where x holds a NaN; 0.0 for
    an empty array."""
    if x.dtype == numpy.float32:
        top = numpy.array([_top_bits(x.view(numpy.uint32), _ABS32)], numpy.uint32)
        return float(top.view(numpy.float32)[0])
    top = numpy.array([_top_bits(x.view(numpy.uint64), _ABS64)], numpy.uint64)
    return float(top.view(numpy.float64)[0])


@jit.kernel('(float32[::1], float64, int64[::1])', '(float64[::1], float64, int64[::1])')
def encode(x, factor, out):
    """out = rint(x * factor) as int64; ``factor`` = 2^s."""
    for i in prange(x.size):
        out[i] = numpy.int64(numpy.rint(numpy.float64(x[i]) * factor))


@jit.kernel('(float32[::1], float64, int64[::1])', '(float64[::1], float64, int64[::1])')
def encode_add(x, factor, out):
    """out += rint(x * factor) as int64: another virtual rank's term, added exactly."""
    for i in prange(x.size):
        out[i] += numpy.int64(numpy.rint(numpy.float64(x[i]) * factor))


@jit.kernel('(float32[::1], float32[::1], float64, int64[::1])',
            '(float64[::1], float64[::1], float64, int64[::1])')
def encode2(x, y, factor, out):
    """out = rint(x * factor) + rint(y * factor): two terms, one pass (the exact sum's
    chunk from its own values and a peer's)."""
    for i in prange(x.size):
        out[i] = numpy.int64(numpy.rint(numpy.float64(x[i]) * factor)) \
            + numpy.int64(numpy.rint(numpy.float64(y[i]) * factor))


@jit.kernel('(int64[::1], float64, float64, float32[::1])',
            '(int64[::1], float64, float64, float64[::1])')
def decode(total, factor, terms, out):
    """out = (float64(total) * factor) / terms, rounded once to out's type; ``factor`` =
    2^-s."""
    for i in prange(total.size):
        out[i] = (numpy.float64(total[i]) * factor) / terms


@jit.kernel('(float32[::1], float64, int64[::1], float64, float64, float32[::1])',
            '(float64[::1], float64, int64[::1], float64, float64, float64[::1])')
def decode_add(x, factor, total, back, terms, out):
    """out = the mean of ``total`` + rint(x * factor): the last term added on the way to
    the mean (``back`` = 2^-s, as ``decode``'s factor)."""
    for i in prange(x.size):
        t = total[i] + numpy.int64(numpy.rint(numpy.float64(x[i]) * factor))
        out[i] = (numpy.float64(t) * back) / terms


@jit.kernel('(float32[::1], float32[::1], float64, float64, float64, float32[::1])',
            '(float64[::1], float64[::1], float64, float64, float64, float64[::1])')
def mean2(x, y, factor, back, terms, out):
    """out = the mean of two terms on the grid, one pass: the exact sum's chunk on a row
    of two with no column (reads what a float sum reads)."""
    for i in prange(x.size):
        t = numpy.int64(numpy.rint(numpy.float64(x[i]) * factor)) \
            + numpy.int64(numpy.rint(numpy.float64(y[i]) * factor))
        out[i] = (numpy.float64(t) * back) / terms
