"""Fused CPU update kernels (numba): one pass over parameter, gradient and state.

Chainer's CPU rules are written as numpy expressions; Adam's ``update_core_cpu`` makes about
ten passes over the parameter with a temporary array for each (seed 002 measured Adam at 84%
of a K computer step). Each kernel here reads every element of the parameter, gradient and
state once and writes parameter and state once, in parallel chunks.

Arithmetic: every kernel repeats Chainer's expression in the same order and in the array's
dtype (scalars are passed already cast to it, as numpy casts a Python float against a float32
array), with fastmath off, so results are the same as Chainer's to the last bit in the cases
the tests check (IEEE +, -, *, / and sqrt are correctly rounded whatever the vector width).

Floating-point environment: ``ftz`` sets flush-to-zero and denormals-are-zero in the MXCSR
of every thread that runs a chunk (numba's worker threads have their own MXCSR), so the
option reaches the kernel's threads and not only the thread that asked for it.
"""
import numba
import numpy
from numba import prange

from chainermn_torus.optimizers import fpenv

__all__ = ['adam', 'momentum_sgd', 'rmsprop', 'copy', 'count_nonfinite', 'CHUNK']

# Elements per parallel chunk: large enough that setting MXCSR and scheduling cost nothing,
# small enough (256 KiB of float32 per array) that a parameter of a few MB still spreads over
# all threads.
CHUNK = 65536

_set_mode = fpenv.kernel_set_mode  # numba-callable: (ftz: bool) -> None


@numba.njit(parallel=True, cache=True)
def adam(p, g, m, v, vhat, alpha_t, one_minus_beta1, one_minus_beta2, eps, a, b,
         lower, upper, amsgrad, adabound, ftz):
    """Chainer's AdamRule.update_core_cpu (a = 1 - eta*wd, b = -eta), fused."""
    n = p.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        _set_mode(ftz)
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            gi = g[i]
            mi = m[i]
            mi = mi + one_minus_beta1 * (gi - mi)
            vi = v[i]
            vi = vi + one_minus_beta2 * (gi * gi - vi)
            m[i] = mi
            v[i] = vi
            if amsgrad:
                vh = max(vhat[i], vi)
                vhat[i] = vh
            else:
                vh = vi
            step = alpha_t / (numpy.sqrt(vh) + eps)
            if adabound:
                step = min(max(step, lower), upper)
            if a == 1:
                p[i] = p[i] + b * (step * mi)
            else:
                p[i] = a * p[i] + b * (step * mi)


@numba.njit(parallel=True, cache=True)
def momentum_sgd(p, g, v, lr, momentum, ftz):
    """Chainer's MomentumSGDRule.update_core_cpu, fused."""
    n = p.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        _set_mode(ftz)
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            vi = v[i] * momentum
            vi = vi - lr * g[i]
            v[i] = vi
            p[i] = p[i] + vi


@numba.njit(parallel=True, cache=True)
def rmsprop(p, g, ms, lr, alpha, one_minus_alpha, eps, eps_inside_sqrt, ftz):
    """Chainer's RMSpropRule.update_core_cpu, fused."""
    n = p.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        _set_mode(ftz)
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            gi = g[i]
            msi = ms[i] * alpha
            msi = msi + (one_minus_alpha * gi) * gi
            ms[i] = msi
            if eps_inside_sqrt:
                denom = numpy.sqrt(msi + eps)
            else:
                denom = numpy.sqrt(msi) + eps
            p[i] = p[i] - (lr * gi) / denom


@numba.njit(parallel=True, cache=True)
def copy(dst, src):
    """dst[:] = src in parallel chunks: the reference bandwidth of the benchmark."""
    n = dst.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            dst[i] = src[i]


@numba.njit(parallel=True, cache=True)
def count_nonfinite(a):
    """How many elements of a 1-D float array are NaN or infinite (no temporaries)."""
    n = 0
    for i in prange(a.size):
        if not numpy.isfinite(a[i]):
            n += 1
    return n
