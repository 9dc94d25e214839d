"""Chainer's ``linear`` (y = x W^T + b) in bfloat16 on oneDNN's inner product: x (n, i),
W (o, i), y (n, o), the gradients of x and of W; float32 arrays in and out, bfloat16 read
by the primitives (their reorders convert), float32 sums.

Only for ``precision`` bf16: in float32 the linear layers stay Chainer's (numpy's BLAS), so
that fp32 results stay those of every earlier release bit for bit. The bias's gradient is
Chainer's sum in either case.
"""
import ctypes

import numpy

from chainermn_torus.compute.onednn import binding, geometries, layer

# The C functions this primitive calls (binding.declare: every call goes through their
# types), and its algorithm kinds.
_C, _P, _DIMS = ctypes, binding.P, binding.DIMS
binding.declare({
    'dnnl_inner_product_forward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _P, _P, _P], _C.c_int),
    'dnnl_inner_product_backward_data_primitive_desc_create': (
        [_C.POINTER(_P), _P, _P, _P, _P, _P, _P], _C.c_int),
    'dnnl_inner_product_backward_weights_primitive_desc_create': (
        [_C.POINTER(_P), _P, _P, _P, _P, _P, _P, _P], _C.c_int),
})


__all__ = ['InnerProduct', 'inner_product', 'forward', 'backward_data', 'backward_weights']


class InnerProduct(layer.Layer):
    """One geometry: x (n, i), W (o, i), y (n, o), with or without a bias."""

    what = 'inner product'
    STEPS = {'forward': (['src', 'weights'], ['dst']),
             'backward_data': (['diff_dst', 'weights'], ['diff_src']),
             'backward_weights': (['src', 'diff_dst'], ['diff_weights'])}
    BACKWARD = ('backward_data', 'backward_weights')
    # what each step reads in bfloat16; it writes float32
    LOW = {'forward': ('x', 'w'), 'backward_data': ('w', 'y'), 'backward_weights': ('x', 'y')}

    def __init__(self, x_shape, w_shape, bias):
        super().__init__()
        self.x_shape, self.w_shape = tuple(x_shape), tuple(w_shape)
        self.y_shape = (x_shape[0], w_shape[0])
        self.bias = bias
        plain = {'x': binding.plain_md(self.x_shape), 'w': binding.plain_md(self.w_shape),
                 'y': binding.plain_md(self.y_shape)}
        self._plain = {'src': plain['x'], 'diff_src': plain['x'], 'weights': plain['w'],
                       'diff_weights': plain['w'], 'dst': plain['y'], 'diff_dst': plain['y']}
        self.bias_md = binding.plain_md((w_shape[0],)) if bias else None
        shapes = {'x': self.x_shape, 'w': self.w_shape, 'y': self.y_shape}
        self._mds = {step: {k: binding.any_md(shapes[k],
                                              binding.BF16 if k in read else binding.F32)
                            for k in 'xwy'} for step, read in self.LOW.items()}

    def describe(self, step, hint):
        lib, pd, md = binding.lib(), binding.P(), self._mds[step]
        if step == 'forward':
            status = lib.dnnl_inner_product_forward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), binding.PROP['forward_training'],
                md['x'].handle, md['w'].handle, self.bias_md.handle if self.bias else None,
                md['y'].handle, binding.attr())
        elif step == 'backward_data':
            status = lib.dnnl_inner_product_backward_data_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), md['x'].handle, md['w'].handle,
                md['y'].handle, hint, binding.attr())
        else:
            status = lib.dnnl_inner_product_backward_weights_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), md['x'].handle, md['w'].handle, None,
                md['y'].handle, hint, binding.attr())
        binding.check(status, 'inner product ' + step.replace('_', ' '))
        return pd

    def plain(self, step):
        return self._plain

    def extra(self, step):
        return {'bias': self.bias_md} if self.bias and step == 'forward' else {}


def inner_product(x_shape, w_shape, bias):
    key = (tuple(x_shape), tuple(w_shape), bool(bias))
    return geometries.cached('inner product', key, InnerProduct)


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)


def forward(x, W, b=None, copies=None):
    """y = x W^T + b; ``copies``: the bfloat16 copies to make or reuse
    (``compute.onednn.copies``)."""
    layer_ = inner_product(x.shape, W.shape, b is not None)
    y = numpy.empty(layer_.y_shape, numpy.float32)
    layer_.run('forward', src=_c(x), weights=_c(W), dst=y, bias=None if b is None else _c(b),
               copies=copies)
    return y


def backward_data(W, gy, copies=None):
    """gx = gy W, in bfloat16 with float32 sums."""
    layer_ = inner_product((gy.shape[0], W.shape[1]), W.shape, False)
    gx = numpy.empty(layer_.x_shape, numpy.float32)
    layer_.run('backward_data', diff_dst=_c(gy), weights=_c(W), diff_src=gx, copies=copies)
    return gx


def backward_weights(x, gy, copies=None):
    """gW = gy^T x, in bfloat16 with float32 sums."""
    layer_ = inner_product(x.shape, (gy.shape[1], x.shape[1]), False)
    gW = numpy.empty(layer_.w_shape, numpy.float32)
    layer_.run('backward_weights', src=_c(x), diff_dst=_c(gy), diff_weights=gW,
               copies=copies)
    return gW
