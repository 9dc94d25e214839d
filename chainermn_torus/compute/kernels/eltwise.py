"""ReLU, y = max(x, 0), and its gradient gx = gy * (y > 0), for float32 arrays of any shape
(0-d included: the shape comes back as it came), and the sum of float32 arrays of one
shape, on numba's kernels (``relu_kernels``, ``add_kernels``) where numba is installed.

Chainer's numpy is one thread and, for the gradient, two passes and a temporary (the mask,
then the product); the kernels are one pass on the rank's threads, with numpy's arithmetic
(NaN and infinities as Chainer's: ``relu_kernels`` says why not oneDNN's). Small arrays
stay Chainer's: waking the thread pool costs more than the pass (``SMALL``). The gradient
and the sums also say whether a result is not finite: numpy would have warned or raised
there (``numpy.errstate``), and the caller has Chainer's numpy compute it again to do so.
"""
import numpy

from chainermn_torus.runtime.cpu import jit

__all__ = ['available', 'SMALL', 'relu', 'relu_grad', 'add']

# Below this many elements Chainer's own numpy is as fast: one pass over a few KiB takes
# about a microsecond, waking numba's threads about ten (measured: docs/compute.md).
SMALL = 4096


def available():
    """Whether the kernels exist here (numba installed)."""
    return jit.available()


def _kernels():
    from chainermn_torus.compute.kernels import relu as relu_kernels  # numba is optional
    return relu_kernels


def _adds():
    from chainermn_torus.compute.kernels import add as add_kernels  # numba is optional
    return add_kernels


def _flat(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32).reshape(-1)


def relu(x):
    y = numpy.empty(x.shape, numpy.float32)
    with jit.grain(y.size):
        _kernels().relu(_flat(x), y.reshape(-1))
    return y


def relu_grad(y, gy):
    """(the gradient of ReLU at output ``y`` for ``gy``, whether every element is finite)."""
    gx = numpy.empty(gy.shape, numpy.float32)
    with jit.grain(gx.size):
        bad = _kernels().relu_grad(_flat(y), _flat(gy), gx.reshape(-1))
    return gx, bad == 0


def add(xs):
    """(``xs[0] + xs[1] + ...`` (float32 arrays of one shape), a new array: Chainer's order,
    so the same bits; whether every element of it is finite)."""
    kernels = _adds()
    y = numpy.empty(xs[0].shape, numpy.float32)
    flat = y.reshape(-1)
    with jit.grain(flat.size):
        bad = kernels.add(_flat(xs[0]), _flat(xs[1]), flat)
        for x in xs[2:]:
            bad = kernels.add_into(flat, _flat(x))  # the last pass holds the sum
    return y, bad == 0
