"""The dtypes gradients travel in (``allreduce_grad_dtype``), and what each needs.

float32 and float64 are summed by MPI. float16 and bfloat16 ("half" here: two bytes, no MPI
type or sum) are moved by MPI as two-byte units and summed by kernels in float32
(``_half``). Both are scaled by 1/P while they are packed, before they travel: float16 so
that a sum of P values cannot pass its largest value, 65504; bfloat16, which has float32's
exponent and overflows only where float32 would, because the packing pass multiplies for
free and the mean is then rounded to bfloat16 once, where dividing after the sum would
round it twice (and take one more pass). numpy has no bfloat16: ``ml_dtypes`` (the
bfloat16 dtype of JAX and TensorFlow) gives it one, so buffers, views and the numpy fallbacks
treat it as any dtype; it is needed only for bfloat16 communication.
"""
import functools

import numpy

from chainermn_torus.errors import ConfigError, Unsupported

__all__ = ['bfloat16', 'is_half', 'scaled_first', 'checked', 'NAMES']

NAMES = ('float16', 'bfloat16', 'float32', 'float64')
_INSTALL = 'pip install "ml_dtypes<0.6" (0.6 needs numpy 2)'


@functools.lru_cache(maxsize=None)
def _ml_dtypes():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def bfloat16():
    """numpy's bfloat16 dtype (ml_dtypes'); refused, naming the install, where it is absent."""
    module = _ml_dtypes()
    if module is None:
        raise Unsupported('chainermn_torus: bfloat16 communication needs the ml_dtypes '
                          'package (numpy\'s bfloat16 dtype), which this Python lacks: '
                          + _INSTALL)
    return numpy.dtype(module.bfloat16)


def is_half(dtype):
    """float16 or bfloat16: moved by MPI, summed by the kernels."""
    if dtype is None:
        return False
    dtype = numpy.dtype(dtype)
    return dtype == numpy.float16 or dtype.name == 'bfloat16'


def scaled_first(dtype):
    """Whether packing always multiplies by 1/P: float16's and bfloat16's."""
    return is_half(dtype)


def checked(value):
    """``allreduce_grad_dtype`` checked: None, or float16, bfloat16 (a name or ml_dtypes'
    dtype), float32, float64."""
    if value is None:
        return None
    if isinstance(value, str) and value == 'bfloat16':
        return bfloat16()
    try:
        dtype = numpy.dtype(value)
    except TypeError:
        dtype = None
    if dtype is not None and dtype.name == 'bfloat16':
        return dtype
    if dtype is None or dtype.type not in (numpy.float16, numpy.float32, numpy.float64):
        raise ConfigError('chainermn_torus: allreduce_grad_dtype must be None, numpy.float16, '
                          '\'bfloat16\' (or ml_dtypes.bfloat16), numpy.float32 or '
                          f'numpy.float64, got {value!r}')
    return dtype
