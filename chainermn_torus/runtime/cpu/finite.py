"""Counting NaN/Inf, and values beyond a limit, in float arrays: the one counter behind the
finite-gradient check (``--check-finite``), the double-buffering check of averaged
gradients, and the checkpoint's refusal and detection of a diverged state.

Where numba is installed, float32/float64 arrays are counted by a parallel kernel in one pass
with no temporary (``_finite_kernels``); otherwise, and for float16 (whose own range is the
limit) and complex arrays, numpy: the same counts.
"""
import numpy

from chainermn_torus.runtime.cpu import jit

__all__ = ['count_nonfinite', 'count_in']


def count_nonfinite(array, limit=numpy.inf):
    """Elements of a float or complex ``array`` (any shape) that are NaN, infinite or, for
    real arrays, beyond +-``limit``; 0 for other dtypes."""
    a = numpy.asarray(array)
    if a.dtype.kind not in 'fc' or a.size == 0:
        return 0
    flat = a.reshape(-1) if a.flags.c_contiguous else a.ravel()
    if flat.dtype in (numpy.float32, numpy.float64) and jit.available():
        from chainermn_torus.runtime.cpu import _finite_kernels  # numba is optional
        with jit.grain(flat.size):  # a convolution's weights: a few thousand values
            return int(_finite_kernels.count_nonfinite(flat, float(limit)))  # one type
    bad = ~numpy.isfinite(flat)
    if flat.dtype.kind == 'f' and flat.dtype != numpy.float16 and numpy.isfinite(limit):
        bad |= numpy.abs(flat) > limit
    return int(bad.sum())


def count_in(arrays, limit=numpy.inf):
    """(count, the first array holding any as 'name (n of m values)', or None) over a
    ``{name: array}`` mapping, in name order."""
    count, first = 0, None
    for name in sorted(arrays):
        a = numpy.asarray(arrays[name])
        bad = count_nonfinite(a, limit)
        if bad and first is None:
            first = f'{name} ({bad} of {a.size} values)'
        count += bad
    return count, first
