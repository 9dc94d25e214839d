"""ReLU and its gradient as numba kernels, with numpy's arithmetic element for element.

Why not oneDNN's eltwise ReLU: it returns 0 for NaN (its ``max(x, 0)`` drops a NaN
operand), and its gradient returns 0 where the output is not positive whatever ``gy`` is,
where Chainer computes ``numpy.maximum(x, 0)`` (NaN stays NaN) and ``gy * (y > 0)`` (an
infinite or NaN ``gy`` gives NaN there, ``-1 * 0`` gives ``-0``). A diverging run must stay
visible: with oneDNN's, one NaN weight in a conv -> BN -> ReLU -> pool -> linear net gave a
finite loss where Chainer's is NaN. The same passes over memory, on the rank's threads.
"""
import numpy
from numba import prange

from chainermn_torus.runtime.cpu import jit

__all__ = ['relu', 'relu_grad']

_ZERO = numpy.float32(0.0)
_ONE = numpy.float32(1.0)


@jit.kernel(jit.arguments('float32', 2))
def relu(x, y):
    # numpy.maximum(x, 0): NaN stays NaN (NaN <= 0 is false), -0.0 becomes +0.0.
    for i in prange(x.size):
        v = x[i]
        y[i] = _ZERO if v <= _ZERO else v


@jit.kernel(jit.arguments('float32', 3))
def relu_grad(y, gy, gx):
    # gy * (y > 0) in float32, as Chainer's ReLUGrad2: a multiplication by 0, not a 0.
    # Returns how many results are not finite (numpy would have said so: eltwise).
    bad = 0
    for i in prange(gy.size):
        v = gy[i] * (_ONE if y[i] > _ZERO else _ZERO)
        gx[i] = v
        if not v - v == _ZERO:  # NaN or an infinity
            bad += 1
    return bad
