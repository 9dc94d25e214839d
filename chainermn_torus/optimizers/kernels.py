"""Fused CPU update kernels (numba): one pass over parameter, gradient and state.

Chainer's CPU rules are written as numpy expressions; Adam's ``update_core_cpu`` makes about
ten passes over the parameter with a temporary array for each (Kuroda et al. measured Adam at 84%
of a K computer step). Each kernel here reads every element of the parameter, gradient and
state once and writes parameter and state once, in parallel chunks.

Arithmetic: every kernel repeats Chainer's expression in the same order and in the array's
dtype (scalars are passed already cast to it, as numpy casts a Python float against a float32
array), with fastmath off, so results are the same as Chainer's to the last bit in the cases
the tests check (IEEE +, -, *, / and sqrt are correctly rounded whatever the vector width).

Floating-point environment: ``ftz`` sets flush-to-zero and denormals-are-zero in the MXCSR
of numba's worker threads too (each thread has its own MXCSR), so the option reaches the
kernel's threads and not only the thread that asked for it (``set_worker_mode``).
"""
import numba
import numpy
from numba import prange

from chainermn_torus.optimizers import fpenv
from chainermn_torus.process import STATE
from chainermn_torus.runtime.cpu import jit

__all__ = ['adam', 'momentum_sgd', 'rmsprop', 'copy', 'set_worker_mode']

_set_mode = fpenv.kernel_set_mode  # numba-callable: (ftz: bool) -> None

# Each kernel is one flat ``prange`` loop over whole arrays. numba lowers it to a function
# whose array arguments are marked as not aliasing each other, and so it vectorises; the same
# loop as a plain serial function, or a prange over chunks calling one, did not (measured,
# Adam on ResNet-50's 25.6M parameters, one thread: 11.6 ms against 49 ms).
#
# The FP mode (flush-to-zero) of numba's worker threads is set by a separate parallel pass
# before a kernel whenever the wanted mode differs from the last one set: MXCSR is per thread
# and keeps its value, and the pass runs several iterations per thread so that every worker
# runs at least one (the threading layers numba uses keep a fixed pool of workers). The last
# mode set, and for how many workers: process.STATE.kernel_fpenv.


@jit.kernel('(boolean, int64)')
def _set_mode_everywhere(ftz, iterations):
    for _ in prange(iterations):
        _set_mode(ftz)


def set_worker_mode(ftz):
    """Set flush-to-zero on or off in numba's worker threads (not in the calling thread)."""
    ftz = bool(ftz)
    threads = numba.get_num_threads()
    held = STATE.kernel_fpenv
    if held['ftz'] is not ftz or held['threads'] != threads:
        caller = fpenv.flush_denormals_enabled()
        _set_mode_everywhere(ftz, 16 * threads)
        fpenv.kernel_set_mode(caller)  # the caller also ran iterations of the pass
        held['ftz'], held['threads'] = ftz, threads


class _kernel_mode:
    """Context: the kernel's FP mode in its workers and, for its duration, in the caller.

    The calling thread executes part of every parallel loop, so it needs the kernel's mode
    too; afterwards it gets its own back, so a kernel with ftz=False does not undo a
    process-wide ``fpenv.set_flush_denormals(True)`` (nor the other way round).
    """

    def __init__(self, ftz):
        self.ftz = bool(ftz)

    def __enter__(self):
        set_worker_mode(self.ftz)
        self.caller = fpenv.flush_denormals_enabled()
        if self.caller != self.ftz:
            fpenv.kernel_set_mode(self.ftz)

    def __exit__(self, *exc):
        if self.caller != self.ftz:
            fpenv.kernel_set_mode(self.caller)
        return False


@numba.njit(inline='always')
def _moments(gi, mi, vi, one_minus_beta1, one_minus_beta2):
    """Adam's first and second moments, in Chainer's order of operations."""
    return mi + one_minus_beta1 * (gi - mi), vi + one_minus_beta2 * (gi * gi - vi)


# The argument types compiled ahead (runtime.cpu.jit.kernel): float32 parameters, the scalars
# cast to them; float64 parameters compile on first use.
@jit.kernel(jit.arguments('float32', 4, 6))
def _adam(p, g, m, v, alpha_t, one_minus_beta1, one_minus_beta2, eps, a, b):
    # Plain Adam/AdamW, branch-free. With a == 1, a * p is exactly p, so this is Chainer's
    # ``p += b * (step * m)`` to the bit as well.
    for i in prange(p.size):
        mi, vi = _moments(g[i], m[i], v[i], one_minus_beta1, one_minus_beta2)
        m[i] = mi
        v[i] = vi
        p[i] = a * p[i] + b * ((alpha_t / (numpy.sqrt(vi) + eps)) * mi)


@jit.kernel(jit.arguments('float32', 5, 8, 'boolean', 'boolean'))
def _adam_variants(p, g, m, v, vhat, alpha_t, one_minus_beta1, one_minus_beta2, eps, a, b,
                   lower, upper, amsgrad, adabound):
    # AMSGrad / AdaBound / AMSBound: rarer, so one loop with branches.
    for i in prange(p.size):
        mi, vi = _moments(g[i], m[i], v[i], one_minus_beta1, one_minus_beta2)
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
        p[i] = a * p[i] + b * (step * mi)


def adam(p, g, m, v, vhat, alpha_t, one_minus_beta1, one_minus_beta2, eps, a, b,
         lower, upper, amsgrad, adabound, ftz):
    """Chainer's AdamRule.update_core_cpu (a = 1 - eta*wd, b = -eta), fused."""
    with _kernel_mode(ftz):
        if amsgrad or adabound:
            _adam_variants(p, g, m, v, vhat, alpha_t, one_minus_beta1, one_minus_beta2, eps,
                           a, b, lower, upper, amsgrad, adabound)
        else:
            _adam(p, g, m, v, alpha_t, one_minus_beta1, one_minus_beta2, eps, a, b)


@jit.kernel(jit.arguments('float32', 3, 2))
def _momentum_sgd(p, g, v, lr, momentum):
    for i in prange(p.size):
        vi = v[i] * momentum
        vi = vi - lr * g[i]
        v[i] = vi
        p[i] = p[i] + vi


def momentum_sgd(p, g, v, lr, momentum, ftz):
    """Chainer's MomentumSGDRule.update_core_cpu, fused."""
    with _kernel_mode(ftz):
        _momentum_sgd(p, g, v, lr, momentum)


@numba.njit(inline='always')
def _mean_square(gi, msi, alpha, one_minus_alpha):
    """RMSprop's running mean of g^2, in Chainer's order of operations."""
    msi = msi * alpha
    return msi + (one_minus_alpha * gi) * gi


# Two kernels, one per place of eps, rather than a branch in the loop (which did not vectorise).
@jit.kernel(jit.arguments('float32', 3, 4))
def _rmsprop(p, g, ms, lr, alpha, one_minus_alpha, eps):
    for i in prange(p.size):
        gi = g[i]
        msi = _mean_square(gi, ms[i], alpha, one_minus_alpha)
        ms[i] = msi
        p[i] = p[i] - (lr * gi) / (numpy.sqrt(msi) + eps)


@jit.kernel(jit.arguments('float32', 3, 4))
def _rmsprop_eps_inside(p, g, ms, lr, alpha, one_minus_alpha, eps):
    for i in prange(p.size):
        gi = g[i]
        msi = _mean_square(gi, ms[i], alpha, one_minus_alpha)
        ms[i] = msi
        p[i] = p[i] - (lr * gi) / numpy.sqrt(msi + eps)


def rmsprop(p, g, ms, lr, alpha, one_minus_alpha, eps, eps_inside_sqrt, ftz):
    """Chainer's RMSpropRule.update_core_cpu, fused."""
    kernel = _rmsprop_eps_inside if eps_inside_sqrt else _rmsprop
    with _kernel_mode(ftz):
        kernel(p, g, ms, lr, alpha, one_minus_alpha, eps)


@jit.kernel(jit.arguments('float32', 2))
def copy(dst, src):
    """dst[:] = src in parallel: the reference bandwidth of the benchmark."""
    for i in prange(dst.size):
        dst[i] = src[i]
