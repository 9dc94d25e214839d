"""numba's side of ``runtime.cpu.finite`` (numba is optional: imported only where it exists)."""
import numpy
from numba import prange

from chainermn_torus.runtime.cpu import jit

__all__ = ['count_nonfinite']


# The limit is always passed (runtime.cpu.finite): a float64 scalar.
@jit.kernel('(float32[::1], float64)', '(float64[::1], float64)')
def count_nonfinite(a, limit=numpy.inf):
    """How many elements of a 1-D float array are NaN, infinite, or beyond +-limit (no
    temporaries; the limit is what float16 communication can carry)."""
    total = 0
    for i in prange(a.size):
        if not numpy.isfinite(a[i]) or abs(a[i]) > limit:
            total += 1
    return total
