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
import ctypes

import numpy

from chainermn_torus.compute.onednn import binding, geometries, layer
from chainermn_torus.runtime.cpu import jit

# The C functions this primitive calls (binding.declare: every call goes through their
# types), and its algorithm kinds.
_C, _P, _DIMS = ctypes, binding.P, binding.DIMS
binding.declare({
    'dnnl_batch_normalization_forward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _C.c_float, _C.c_uint, _P],
        _C.c_int),
    'dnnl_batch_normalization_backward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _P, _C.c_float, _C.c_uint, _P, _P],
        _C.c_int),
})
# Batch normalization's flags: scale (gamma) and shift (beta) given; statistics given.
BN_FLAGS = {'use_global_stats': 1, 'use_scale': 2, 'use_shift': 4}


__all__ = ['BatchNorm', 'batch_norm', 'forward', 'backward', 'inference', 'implementation',
           'IMPLEMENTATIONS']

_FLAGS = BN_FLAGS['use_scale'] | BN_FLAGS['use_shift']


class BatchNorm(layer.Layer):
    """One shape and epsilon: the forward, inference and backward primitives."""

    what = 'batch normalization'
    STEPS = {'forward': (['src'], ['dst']), 'inference': (['src'], ['dst']),
             'backward': (['src', 'diff_dst'], ['diff_src'])}

    def __init__(self, shape, eps):
        super().__init__()
        self.shape, self.eps = tuple(shape), float(eps)
        c = self.shape[1]
        self.data = binding.plain_md(self.shape)
        self.channel = binding.plain_md((c,))

    def describe(self, step, hint):
        pd, lib, data = binding.P(), binding.lib(), self.data.handle
        if step == 'backward':
            status = lib.dnnl_batch_normalization_backward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), binding.PROP['backward'], data, data,
                data, self.eps, _FLAGS, hint, binding.attr())
        else:
            training = step == 'forward'
            status = lib.dnnl_batch_normalization_forward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(),
                binding.PROP['forward_training' if training else 'forward_inference'], data, data,
                self.eps, _FLAGS | (0 if training else BN_FLAGS['use_global_stats']),
                binding.attr())
        binding.check(status, f'{self.what} {step}')
        return pd

    def plain(self, step):
        return dict.fromkeys(('src', 'dst', 'diff_src', 'diff_dst'), self.data)

    def extra(self, step):
        names = ('mean', 'variance', 'scale') + (
            ('diff_scale', 'diff_shift') if step == 'backward' else ('shift',))
        return dict.fromkeys(names, self.channel)

    def forward(self, x, gamma, beta):
        """(y, mean, var): var is the biased variance, as numpy's ``x.var()``."""
        c = self.shape[1]
        y = numpy.empty(self.shape, numpy.float32)
        mean = numpy.empty(c, numpy.float32)
        var = numpy.empty(c, numpy.float32)
        self.run('forward', src=x, dst=y, mean=mean, variance=var, scale=gamma, shift=beta)
        return y, mean, var

    def inference(self, x, gamma, beta, mean, var):
        """y with given statistics (Chainer's fixed_batch_normalization)."""
        y = numpy.empty(self.shape, numpy.float32)
        self.run('inference', src=x, dst=y, mean=mean, variance=var, scale=gamma, shift=beta)
        return y

    def backward(self, x, gy, mean, var, gamma):
        """(gx, ggamma, gbeta) for the statistics the forward used."""
        c = self.shape[1]
        gx = numpy.empty(self.shape, numpy.float32)
        ggamma = numpy.empty(c, numpy.float32)
        gbeta = numpy.empty(c, numpy.float32)
        self.run('backward', src=x, diff_dst=gy, diff_src=gx, mean=mean, variance=var,
                 scale=gamma, diff_scale=ggamma, diff_shift=gbeta)
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
        from chainermn_torus.compute.kernels import batchnorm as bn_kernels  # numba is optional
        return bn_kernels
    return None


def forward(x, gamma, beta, eps, via=None, any_order=False):
    """(y, mean, var) of Chainer's batch_normalization in training (axis: all but 1);
    ``via`` one of IMPLEMENTATIONS (default: ``implementation()``); ``any_order``: numba's
    sums added in any order (precision bf16: ``bn_kernels``)."""
    x4 = _four(x)
    kernels = _via(via)
    if kernels is not None:
        y, mean, var = kernels.forward(x4, _c(gamma), _c(beta), eps, any_order)
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


def backward(x, gy, mean, var, gamma, eps, via=None, any_order=False):
    x4, gy4 = _four(x), _four(gy)
    kernels = _via(via)
    if kernels is not None:
        gx, ggamma, gbeta = kernels.backward(x4, gy4, _c(mean), _c(var), _c(gamma), eps,
                                             any_order)
    else:
        gx, ggamma, gbeta = batch_norm(x4.shape, eps).backward(x4, gy4, mean, var,
                                                               _c(gamma))
    return gx.reshape(x.shape), ggamma, gbeta


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)
