"""ReLU on oneDNN: y = max(x, 0) and its gradient gx = gy where y > 0, else 0, for float32
arrays of any shape (one flat vector to oneDNN: the operation is element by element).

Chainer's numpy is one thread and, for the gradient, two passes and a temporary (the mask,
then the product); oneDNN is one pass on the rank's threads. The same values: the gradient
is taken at the output, as Chainer's ``ReLUGrad2`` does (y > 0 exactly where x > 0).
"""
import numpy

from chainermn_torus.compute import dnnl

__all__ = ['relu', 'relu_grad']

_CACHE = {}


class _Relu(object):
    def __init__(self, size):
        self.md = dnnl.plain_md((size,))
        plain = {'src': self.md, 'dst': self.md, 'diff_src': self.md, 'diff_dst': self.md}
        lib = dnnl.lib()
        self.forward = dnnl.Bound(self._forward_pd(), 'relu forward', ['src'], ['dst'], plain)
        self._hint = dnnl.Hint(self._forward_pd())
        bwd = dnnl.P()
        dnnl.check(lib.dnnl_eltwise_backward_primitive_desc_create(
            dnnl.ctypes.byref(bwd), dnnl.engine(), dnnl.ALG['eltwise_relu'], self.md.handle,
            self.md.handle, self.md.handle, 0.0, 0.0, self._hint.pd, None), 'relu backward')
        self.backward = dnnl.Bound(bwd, 'relu backward', ['src', 'diff_dst'], ['diff_src'],
                                   plain)

    def _forward_pd(self):
        pd = dnnl.P()
        dnnl.check(dnnl.lib().dnnl_eltwise_forward_primitive_desc_create(
            dnnl.ctypes.byref(pd), dnnl.engine(), dnnl.PROP['forward_training'],
            dnnl.ALG['eltwise_relu'], self.md.handle, self.md.handle, 0.0, 0.0, None),
            'relu forward')
        return pd


def _op(size):
    return dnnl.cached(_CACHE, (size,), _Relu)


def relu(x):
    x = numpy.ascontiguousarray(x, dtype=numpy.float32)
    y = numpy.empty_like(x)
    _op(x.size).forward(src=x.reshape(-1), dst=y.reshape(-1))
    return y


def relu_grad(y, gy):
    """The gradient of ReLU at output ``y`` for ``gy``."""
    y = numpy.ascontiguousarray(y, dtype=numpy.float32)
    gy = numpy.ascontiguousarray(gy, dtype=numpy.float32)
    gx = numpy.empty_like(gy)
    _op(gy.size).backward(src=y.reshape(-1), diff_dst=gy.reshape(-1), diff_src=gx.reshape(-1))
    return gx
