"""Batch normalization with Chainer's arithmetic: training forward (the batch's mean and
biased variance, y = gamma (x - mean) / sqrt(var + eps) + beta), inference with given
statistics, and backward (gx, ggamma, gbeta), for float32 arrays (n, c, h, w), or (n, c)
as (n, c, 1, 1), on as many threads as the rank's budget (Chainer's numpy: several passes
on one).

Two implementations, one chosen per process: numba's kernels (``bn_kernels``) where numba
is installed, oneDNN's primitives (``BatchNorm`` below) where it is not. On Chainer's NCHW
arrays oneDNN has only its generic batch normalization (its fast ones need its blocked or
channels-last layouts, and a reorder there and back costs more than they save), which the
kernels beat about 2x in both directions (measured: ``docs/compute.md``). The running
statistics are Chainer's to update (``onednn``'s implementation class does it as Chainer
does, from the mean and variance returned here). NCHW in and out, no reorder.
"""
import numpy

from chainermn_torus.compute import dnnl, geometries
from chainermn_torus.runtime import jit

__all__ = ['BatchNorm', 'batch_norm', 'forward', 'backward', 'inference', 'implementation',
           'IMPLEMENTATIONS']

_FLAGS = dnnl.BN_FLAGS['use_scale'] | dnnl.BN_FLAGS['use_shift']


class BatchNorm(object):
    """One shape and epsilon: the forward and backward primitives, made at first use."""

    def __init__(self, shape, eps):
        self.shape, self.eps = tuple(shape), float(eps)
        c = self.shape[1]
        self.data = dnnl.plain_md(self.shape)
        self.channel = dnnl.plain_md((c,))
        self._fwd = self._bwd = self._inf = None
        self._hint = None

    def _forward_pd(self):
        pd = dnnl.P()
        dnnl.check(dnnl.lib().dnnl_batch_normalization_forward_primitive_desc_create(
            dnnl.ctypes.byref(pd), dnnl.engine(), dnnl.PROP['forward_training'],
            self.data.handle, self.data.handle, self.eps, _FLAGS, dnnl.attr()),
            'batch normalization forward')
        return pd

    def forward(self, x, gamma, beta):
        """(y, mean, var): var is the biased variance, as numpy's ``x.var()``."""
        if self._fwd is None:
            self._fwd = dnnl.Bound(self._forward_pd(), 'batch normalization forward',
                                   ['src'], ['dst'], {'src': self.data, 'dst': self.data},
                                   {'mean': self.channel, 'variance': self.channel,
                                    'scale': self.channel, 'shift': self.channel})
        c = self.shape[1]
        y = numpy.empty(self.shape, numpy.float32)
        mean = numpy.empty(c, numpy.float32)
        var = numpy.empty(c, numpy.float32)
        self._fwd(src=x, dst=y, mean=mean, variance=var, scale=gamma, shift=beta)
        return y, mean, var

    def inference(self, x, gamma, beta, mean, var):
        """y with given statistics (Chainer's fixed_batch_normalization)."""
        if self._inf is None:
            pd = dnnl.P()
            dnnl.check(dnnl.lib().dnnl_batch_normalization_forward_primitive_desc_create(
                dnnl.ctypes.byref(pd), dnnl.engine(), dnnl.PROP['forward_inference'],
                self.data.handle, self.data.handle, self.eps,
                _FLAGS | dnnl.BN_FLAGS['use_global_stats'], dnnl.attr()),
                'batch normalization inference')
            self._inf = dnnl.Bound(pd, 'batch normalization inference', ['src'], ['dst'],
                                   {'src': self.data, 'dst': self.data},
                                   {'mean': self.channel, 'variance': self.channel,
                                    'scale': self.channel, 'shift': self.channel})
        y = numpy.empty(self.shape, numpy.float32)
        self._inf(src=x, dst=y, mean=mean, variance=var, scale=gamma, shift=beta)
        return y

    def backward(self, x, gy, mean, var, gamma):
        """(gx, ggamma, gbeta) for the statistics the forward used."""
        if self._bwd is None:
            if self._hint is None:
                self._hint = dnnl.Hint(self._forward_pd())
            pd = dnnl.P()
            dnnl.check(dnnl.lib().dnnl_batch_normalization_backward_primitive_desc_create(
                dnnl.ctypes.byref(pd), dnnl.engine(), dnnl.PROP['backward'],
                self.data.handle, self.data.handle, self.data.handle, self.eps, _FLAGS,
                self._hint.pd, dnnl.attr()), 'batch normalization backward')
            plain = {'src': self.data, 'diff_dst': self.data, 'diff_src': self.data}
            self._bwd = dnnl.Bound(pd, 'batch normalization backward',
                                   ['src', 'diff_dst'], ['diff_src'], plain,
                                   {'mean': self.channel, 'variance': self.channel,
                                    'scale': self.channel, 'diff_scale': self.channel,
                                    'diff_shift': self.channel})
        c = self.shape[1]
        gx = numpy.empty(self.shape, numpy.float32)
        ggamma = numpy.empty(c, numpy.float32)
        gbeta = numpy.empty(c, numpy.float32)
        self._bwd(src=x, diff_dst=gy, diff_src=gx, mean=mean, variance=var, scale=gamma,
                  diff_scale=ggamma, diff_shift=gbeta)
        return gx, ggamma, gbeta



def batch_norm(shape, eps):
    return geometries.cached('batchnorm', (tuple(shape), float(eps)), BatchNorm)


def _four(a):
    a = numpy.ascontiguousarray(a, dtype=numpy.float32)
    return a.reshape(a.shape + (1, 1)) if a.ndim == 2 else a


IMPLEMENTATIONS = ('numba', 'onednn')


def implementation():
    """'numba' where numba is installed, else 'onednn'."""
    return 'numba' if jit.available() else 'onednn'


def _via(via):
    if (via or implementation()) == 'numba':
        from chainermn_torus.compute import bn_kernels  # numba is optional
        return bn_kernels
    return None


def forward(x, gamma, beta, eps, via=None):
    """(y, mean, var) of Chainer's batch_normalization in training (axis: all but 1);
    ``via`` one of IMPLEMENTATIONS (default: ``implementation()``)."""
    x4 = _four(x)
    kernels = _via(via)
    if kernels is not None:
        y, mean, var = kernels.forward(x4, _c(gamma), _c(beta), eps)
    else:
        y, mean, var = batch_norm(x4.shape, eps).forward(x4, _c(gamma), _c(beta))
    return y.reshape(x.shape), mean, var


def inference(x, gamma, beta, mean, var, eps, via=None):
    """Chainer's fixed_batch_normalization forward (axis: all but 1)."""
    x4 = _four(x)
    kernels = _via(via)
    if kernels is not None:
        y = kernels.inference(x4, _c(gamma), _c(beta), _c(mean), _c(var), eps)
    else:
        y = batch_norm(x4.shape, eps).inference(x4, _c(gamma), _c(beta), _c(mean), _c(var))
    return y.reshape(x.shape)


def backward(x, gy, mean, var, gamma, eps, via=None):
    x4, gy4 = _four(x), _four(gy)
    kernels = _via(via)
    if kernels is not None:
        gx, ggamma, gbeta = kernels.backward(x4, gy4, _c(mean), _c(var), _c(gamma), eps)
    else:
        gx, ggamma, gbeta = batch_norm(x4.shape, eps).backward(x4, gy4, mean, var,
                                                               _c(gamma))
    return gx.reshape(x.shape), ggamma, gbeta


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)
