"""Batch normalization over the plain (n, c, h, w) layout as numba kernels: one pass for
the statistics and one for the output, two for the gradients, one channel per thread.

Why not oneDNN here: oneDNN's fast batch normalization works on its blocked and
channels-last layouts; on NCHW it has only its generic implementation (``ncsp_bnorm``),
measured at 29 ms for (8, 256, 56, 56) on one core against 16 ms for these kernels
(``docs/compute.md``). Chainer's arrays are NCHW, and a reorder there and back costs more
than the difference. oneDNN's primitives remain the path where numba is missing
(``compute.onednn.batchnorm``).

Arithmetic: the sums of the statistics and of the gradients are float64 (Chainer sums
float32 pairwise: both within float32 rounding of the exact value); the variance is the
biased one; each element is computed as Chainer writes it, ``gamma * ((x - mean) *
inv_std) + beta``, in float32.
"""
import numpy
from numba import prange

from chainermn_torus.runtime.cpu import jit

__all__ = ['forward', 'inference', 'backward']


# The types compiled ahead (runtime.cpu.jit.kernel): float32 (n, c, h*w) arrays and per-channel
# vectors, the only ones batchnorm.py passes (other dtypes stay on Chainer's code).
_X, _C = 'float32[:, :, ::1]', 'float32[::1]'


@jit.kernel(f'({_X}, {_C}, {_C})')
def _statistics(x, mean, var):
    # One pass: the sum and the sum of squares in float64, whose cancellation in
    # E[x^2] - E[x]^2 costs about 1e-16 (mean / std)^2 relative: far below float32's 6e-8
    # for any mean under 10^4 standard deviations.
    n, c, hw = x.shape
    m = n * hw
    for ci in prange(c):
        s = 0.0
        q = 0.0
        for i in range(n):
            for j in range(hw):
                v = numpy.float64(x[i, ci, j])
                s += v
                q += v * v
        mu = s / m
        mean[ci] = numpy.float32(mu)
        v = q / m - mu * mu
        if v < 0.0:  # rounding below zero; a NaN stays NaN, as Chainer's (max() would drop it)
            v = 0.0
        var[ci] = numpy.float32(v)


@jit.kernel(f'({_X}, {_C}, {_C}, {_C}, {_C}, {_X})')
def _normalize(x, mean, inv_std, gamma, beta, y):
    n, c, hw = x.shape
    for ci in prange(c):
        mu, s, g, b = mean[ci], inv_std[ci], gamma[ci], beta[ci]
        for i in range(n):
            for j in range(hw):
                y[i, ci, j] = g * ((x[i, ci, j] - mu) * s) + b


@jit.kernel(f'({_X}, {_X}, {_C}, {_C}, {_C}, {_X}, {_C}, {_C})')
def _gradients(x, gy, mean, inv_std, gamma, gx, ggamma, gbeta):
    n, c, hw = x.shape
    inv_m = numpy.float32(1.0 / (n * hw))
    for ci in prange(c):
        mu, s = mean[ci], inv_std[ci]
        sg = 0.0
        sgx = 0.0
        for i in range(n):
            for j in range(hw):
                g = gy[i, ci, j]
                sg += g
                sgx += numpy.float64(g * ((x[i, ci, j] - mu) * s))
        gb = numpy.float32(sg)
        gg = numpy.float32(sgx)
        gbeta[ci] = gb
        ggamma[ci] = gg
        a = gamma[ci] * s
        for i in range(n):
            for j in range(hw):
                x_hat = (x[i, ci, j] - mu) * s
                gx[i, ci, j] = a * (gy[i, ci, j] - (x_hat * gg + gb) * inv_m)


# The same kernels with their sums added in any order (LLVM's ``reassoc``: the float64
# sums vectorise; NaN and infinities as before). For precision bf16 only, where results
# are not float32's bit for bit anyway: measured here (2 threads), the statistics of
# (8, 256, 56, 56) 2.9 -> 0.5 ms and the gradients 4.4 -> 3.8 ms (docs/compute.md,
# "bfloat16"). float32 keeps the kernels above and their bits.
_statistics_any_order = jit.variant(_statistics, '_statistics_any_order',
                                    fastmath={'reassoc'})
_gradients_any_order = jit.variant(_gradients, '_gradients_any_order', fastmath={'reassoc'})


def _three(a):
    return a.reshape(a.shape[0], a.shape[1], -1)


def _inv_std(var, eps):
    return numpy.reciprocal(numpy.sqrt(var + numpy.float32(eps), dtype=numpy.float32))


def forward(x, gamma, beta, eps, any_order=False):
    """(y, mean, var) for C-contiguous float32 x of (n, c, h, w): var is the biased one;
    ``any_order``: the sums in any order (precision bf16)."""
    c = x.shape[1]
    mean = numpy.empty(c, numpy.float32)
    var = numpy.empty(c, numpy.float32)
    y = numpy.empty_like(x)
    with jit.grain(x.size):
        (_statistics_any_order if any_order else _statistics)(_three(x), mean, var)
        _normalize(_three(x), mean, _inv_std(var, eps), gamma, beta, _three(y))
    return y, mean, var


def inference(x, gamma, beta, mean, var, eps):
    y = numpy.empty_like(x)
    with jit.grain(x.size):
        _normalize(_three(x), mean, _inv_std(var, eps), gamma, beta, _three(y))
    return y


def backward(x, gy, mean, var, gamma, eps, any_order=False):
    """(gx, ggamma, gbeta) for the statistics the forward used."""
    c = x.shape[1]
    gx = numpy.empty_like(x)
    ggamma = numpy.empty(c, numpy.float32)
    gbeta = numpy.empty(c, numpy.float32)
    with jit.grain(x.size):
        (_gradients_any_order if any_order else _gradients)(
            _three(x), _three(gy), mean, _inv_std(var, eps), gamma, _three(gx), ggamma, gbeta)
    return gx, ggamma, gbeta
