"""2-D max and average pooling on oneDNN, with Chainer's geometry, for float32 NCHW arrays.

Chainer's ``max_pooling_2d`` pads with -inf and, with ``cover_all`` (its default), adds
output rows until the window has covered every input row; its gradient goes to the first
largest element of each window (numpy's ``argmax`` in window order). oneDNN's max pooling
never takes a padded element, takes the first largest too, and records which in a
workspace that its backward reads: the forward returns that workspace, and the caller
keeps it for the gradient (as Chainer keeps its ``indexes``).

``average_pooling_2d`` pads with zeros and divides by the whole window, padding included
(oneDNN's ``pooling_avg_include_padding``), with no ``cover_all`` (Chainer's CPU path
ignores it).

The padding after the data is the one that gives Chainer's output size, as for the
convolution (``conv.pad_after``); where the stride leaves the last rows out it is negative,
which oneDNN does not take for pooling: the array is then given to oneDNN as a strided view
without those rows (they are in no window, so their gradient is zero), not copied.
Pooling runs on the plain layout, with no reorder.
"""
import ctypes
import functools

import numpy

from chainermn_torus.compute.onednn import binding, conv, geometries, layer

# The C functions this primitive calls (binding.declare: every call goes through their
# types), and its algorithm kinds.
_C, _P, _DIMS = ctypes, binding.P, binding.DIMS
binding.declare({
    'dnnl_pooling_forward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _C.c_int, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS,
         _DIMS, _P], _C.c_int),
    'dnnl_pooling_backward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P],
        _C.c_int),
}, algorithms={'pooling_max': 511, 'pooling_avg_include_padding': 767,
                                'pooling_avg_exclude_padding': 1023})


__all__ = ['plan', 'Pooling', 'pooling', 'max_forward', 'max_backward', 'average_forward',
           'average_backward', 'out_shape']


def out_shape(x_shape, ksize, stride, pad, cover_all):
    n, c, h, w = x_shape
    return (n, c, conv.out_size(h, ksize[0], stride[0], pad[0], cover_all),
            conv.out_size(w, ksize[1], stride[1], pad[1], cover_all))


@functools.lru_cache(maxsize=1024)
def plan(kind, x_shape, ksize, stride, pad, cover_all):
    """(why not, y shape) of Chainer's 2-D ``kind`` pooling of ``x_shape``: ``why not`` None
    where oneDNN computes it as Chainer does, else the reason (Chainer's own code then
    runs, and refuses what Chainer refuses with Chainer's error)."""
    if len(x_shape) != 4:
        return 'arrays that are not (n, c, h, w)', None
    if min(ksize + stride) < 1 or min(pad) < 0:
        return 'a window or stride below 1 or a negative padding', None
    y = out_shape(x_shape, ksize, stride, pad, cover_all)
    if min(y) < 1:
        return 'an empty output or input', None
    if kind == 'max' and any(conv.empty_window(size, out, k, s, p) for size, out, k, s, p
                             in zip(x_shape[2:], y[2:], ksize, stride, pad)):
        # Chainer's window of padding alone is -inf; oneDNN's would be -FLT_MAX
        return 'windows that read only padding', None
    return None, y


class Pooling(layer.Layer):
    """One geometry: ``kind`` 'max' or 'average', x (n, c, h, w) and y (n, c, oh, ow)."""

    STEPS = {'forward': (['src'], ['dst']), 'backward': (['diff_dst'], ['diff_src'])}

    def __init__(self, kind, x_shape, y_shape, ksize, stride, pad):
        super().__init__()
        self.kind, self.what = kind, f'{kind} pooling'
        self.x_shape, self.y_shape = tuple(x_shape), tuple(y_shape)
        n, c, h, w = self.x_shape
        after = [conv.pad_after(size, out, k, s, p) for size, out, k, s, p in
                 zip((h, w), self.y_shape[2:], ksize, stride, pad)]
        # the rows no window reaches are left out of what oneDNN sees (a view, same memory)
        self.used = (n, c, h + min(after[0], 0), w + min(after[1], 0))
        self.x_md = binding.plain_md(self.used, [c * h * w, h * w, w, 1])
        self.y_md = binding.plain_md(self.y_shape)
        self.geometry = (binding.dims(stride), binding.dims(ksize), binding.dims((0, 0)),
                         binding.dims(pad), binding.dims([max(a, 0) for a in after]))
        self.alg = binding.ALG['pooling_max' if kind == 'max' else
                            'pooling_avg_include_padding']

    def describe(self, step, hint):
        pd, lib = binding.P(), binding.lib()
        if step == 'forward':
            status = lib.dnnl_pooling_forward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), binding.PROP['forward_training'],
                self.alg, self.x_md.handle, self.y_md.handle, *self.geometry, binding.attr())
        else:
            status = lib.dnnl_pooling_backward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), self.alg, self.x_md.handle,
                self.y_md.handle, *self.geometry, hint, binding.attr())
        binding.check(status, f'{self.what} {step}')
        return pd

    def plain(self, step):
        return {'src': self.x_md, 'diff_src': self.x_md, 'dst': self.y_md,
                'diff_dst': self.y_md}

    def forward(self, x):
        """(y, workspace): the workspace (max pooling's choice per window) or None."""
        y = numpy.empty(self.y_shape, numpy.float32)
        ws = self.workspace('forward')
        self.run('forward', src=x, dst=y, workspace=ws)
        return y, ws

    def backward(self, gy, workspace=None):
        cut = self.used != self.x_shape
        # where oneDNN sees a view, the rows it leaves out get no gradient: zeros
        gx = (numpy.zeros if cut else numpy.empty)(self.x_shape, numpy.float32)
        self.run('backward', diff_dst=gy, diff_src=gx, workspace=workspace)
        return gx


def pooling(kind, x_shape, y_shape, ksize, stride, pad):
    key = (kind, tuple(x_shape), tuple(y_shape), tuple(ksize), tuple(stride), tuple(pad))
    return geometries.cached('pooling', key, Pooling)


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)


def max_forward(x, ksize, stride, pad, cover_all=True):
    """(y, workspace) of Chainer's max_pooling_2d."""
    y_shape = out_shape(x.shape, ksize, stride, pad, cover_all)
    return pooling('max', x.shape, y_shape, ksize, stride, pad).forward(_c(x))


def max_backward(gy, workspace, x_shape, ksize, stride, pad):
    """The gradient of the max pooling whose forward gave ``workspace``."""
    return pooling('max', x_shape, gy.shape, ksize, stride, pad).backward(_c(gy), workspace)


def window_indexes(workspace, y_shape):
    """Chainer's ``indexes`` of a max pooling (each output's place in its window, ``ky * kw +
    kx``, padding counted), read from the forward's oneDNN workspace: one uint8 per output
    for windows under 256 cells, one int32 for larger ones, in the output's plain layout.
    oneDNN keeps the first of equal maxima in that order, as numpy's ``argmax`` does."""
    n = int(numpy.prod(y_shape))
    if workspace.size == n:
        dtype = numpy.uint8
    elif workspace.size == 4 * n:
        dtype = numpy.int32
    else:
        raise ValueError(f'a max pooling workspace of {workspace.size} bytes for {n} outputs')
    return workspace.view(dtype).reshape(y_shape).astype(numpy.intp)


def average_forward(x, ksize, stride, pad):
    """Chainer's average_pooling_2d (no cover_all)."""
    y_shape = out_shape(x.shape, ksize, stride, pad, False)
    return pooling('average', x.shape, y_shape, ksize, stride, pad).forward(_c(x))[0]


def average_backward(gy, x_shape, ksize, stride, pad):
    return pooling('average', x_shape, gy.shape, ksize, stride, pad).backward(_c(gy))
