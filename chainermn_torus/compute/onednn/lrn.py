"""Local response normalization across channels on oneDNN, with Chainer's arithmetic:
y = x (k + alpha s)^-beta, s the sum of x^2 over the channels c - n//2 .. c + n//2, for
float32 (n, c, h, w) arrays; and its gradient.

oneDNN divides alpha by its window's size, so it is given alpha times that size (as
Chainer's iDeep path did); its window is centred and odd, ``2 (n // 2) + 1`` channels,
which is Chainer's window for an even ``n`` too. The forward keeps oneDNN's workspace (the
scale it computed) for the gradient, where one is made. Plain layout, no reorder.
"""
import ctypes

import numpy

from chainermn_torus.compute.onednn import binding, geometries, layer

# The C functions this primitive calls (binding.declare: every call goes through their
# types), and its algorithm kinds.
_C, _P, _DIMS = ctypes, binding.P, binding.DIMS
binding.declare({
    'dnnl_lrn_forward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _C.c_int, _P, _P, _C.c_int64,
         _C.c_float, _C.c_float, _C.c_float, _P], _C.c_int),
    'dnnl_lrn_backward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _P, _C.c_int64, _C.c_float,
         _C.c_float, _C.c_float, _P, _P], _C.c_int),
}, algorithms={'lrn_across_channels': 2815})


__all__ = ['Lrn', 'lrn', 'forward', 'backward', 'window']


def window(n):
    """The channels Chainer sums over for its ``n``."""
    return 2 * (n // 2) + 1


class Lrn(layer.Layer):
    what = 'local response normalization'
    STEPS = {'forward': (['src'], ['dst']), 'backward': (['src', 'diff_dst'], ['diff_src'])}

    def __init__(self, shape, n, k, alpha, beta):
        super().__init__()
        self.shape = tuple(shape)
        self.md = binding.plain_md(self.shape)
        size = window(n)
        self.params = (size, float(alpha) * size, float(beta), float(k))

    def describe(self, step, hint):
        pd, lib, alg = binding.P(), binding.lib(), binding.ALG['lrn_across_channels']
        if step == 'forward':
            status = lib.dnnl_lrn_forward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), binding.PROP['forward_training'], alg,
                self.md.handle, self.md.handle, *self.params, binding.attr())
        else:
            status = lib.dnnl_lrn_backward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), alg, self.md.handle, self.md.handle,
                self.md.handle, *self.params, hint, binding.attr())
        binding.check(status, f'{self.what} {step}')
        return pd

    def plain(self, step):
        return dict.fromkeys(('src', 'dst', 'diff_src', 'diff_dst'), self.md)

    def forward(self, x):
        """(y, workspace or None)."""
        y = numpy.empty(self.shape, numpy.float32)
        ws = self.workspace('forward')
        self.run('forward', src=x, dst=y, workspace=ws)
        return y, ws

    def backward(self, x, gy, workspace):
        gx = numpy.empty(self.shape, numpy.float32)
        self.run('backward', src=x, diff_dst=gy, diff_src=gx, workspace=workspace)
        return gx


def lrn(shape, n, k, alpha, beta):
    return geometries.cached('lrn', (tuple(shape), int(n), float(k), float(alpha), float(beta)),
                       Lrn)


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)


def forward(x, n=5, k=2, alpha=1e-4, beta=.75):
    """(y, workspace) of Chainer's local_response_normalization."""
    return lrn(x.shape, n, k, alpha, beta).forward(_c(x))


def backward(x, gy, workspace, n=5, k=2, alpha=1e-4, beta=.75):
    return lrn(x.shape, n, k, alpha, beta).backward(_c(x), _c(gy), workspace)
