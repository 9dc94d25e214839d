"""2-D convolution on oneDNN, with Chainer's geometry: forward, backward data, backward
weights, for numpy float32 arrays in NCHW.

Chainer's ``convolution_2d`` pads ``pad`` on both sides and, with ``cover_all``, adds
output rows until the filter has covered every input row; oneDNN takes a padding before
and after, so the padding after is what makes the output sizes equal (``pad_after``), as
Chainer's own iDeep path computed it. Dilation ``d`` is oneDNN's ``d - 1``. Groups are
oneDNN's grouped weights (G, O/G, I/G, kh, kw): Chainer's (O, I/G, kh, kw) array viewed in
that shape, not copied.

``deconvolution_2d`` is the same arithmetic run backwards (its forward is a convolution's
backward data), so Chainer's transposed convolution and the gradient of a convolution
with respect to its input are one path here.

Each geometry (shapes, strides, paddings, dilation, groups, bias) is one ``Convolution``,
made at its first call and kept (``geometries``: within a bound): its primitives, the
blocked layouts oneDNN chose and the reorders between those and NCHW (the blocked copies
themselves in the thread's scratch buffer, ``primitives.scratch``). The arrays come in and go out
in NCHW; what a layer's output would be in oneDNN's layout is reordered back at once, so
the numbers are those of one convolution on the plain arrays.

Why it is built so: docs/internals.md (compute/onednn/conv.py).
"""
import ctypes
import functools

import numpy

from chainermn_torus.compute.onednn import binding, geometries, layer

# The C functions this primitive calls (binding.declare: every call goes through their
# types), and its algorithm kinds.
_C, _P, _DIMS = ctypes, binding.P, binding.DIMS
binding.declare({
    'dnnl_convolution_forward_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _C.c_int, _P, _P, _P, _P, _DIMS, _DIMS, _DIMS,
         _DIMS, _P], _C.c_int),
    'dnnl_convolution_backward_data_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P],
        _C.c_int),
    'dnnl_convolution_backward_weights_primitive_desc_create': (
        [_C.POINTER(_P), _P, _C.c_int, _P, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P],
        _C.c_int),
}, algorithms={'convolution_direct': 1})


__all__ = ['Convolution', 'convolution', 'out_size', 'pad_after', 'empty_window', 'plan',
           'forward', 'backward_data', 'backward_weights', 'deconvolution', 'plain_weights',
           'PLAIN_WEIGHTS_PIXELS']


# A convolution whose output has at most this many pixels in all (n x oh x ow) takes its
# weights plain whatever its kernel (module doc).
PLAIN_WEIGHTS_PIXELS = 64


def plain_weights(w_shape, y_shape):
    """Whether a geometry's primitives take the weights in Chainer's layout (module doc):
    a 1 x 1 kernel, or an output of at most ``PLAIN_WEIGHTS_PIXELS`` pixels."""
    n, _, oh, ow = y_shape
    return tuple(w_shape[-2:]) == (1, 1) or n * oh * ow <= PLAIN_WEIGHTS_PIXELS


def out_size(size, k, s, p, cover_all=False, d=1):
    """Chainer's output size (chainer.utils.conv.get_conv_outsize)."""
    dk = k + (k - 1) * (d - 1)
    if cover_all:
        return (size + p * 2 - dk + s - 1) // s + 1
    return (size + p * 2 - dk) // s + 1


def pad_after(size, out, k, s, p, d=1):
    """The padding after the data that gives oneDNN ``out`` outputs."""
    dk = k + (k - 1) * (d - 1)
    return s * (out - 1) + dk - size - p


def empty_window(size, out, k, s, p, d=1):
    """Whether one of the ``out`` windows along an axis of ``size`` reads no element of the
    data, only padding (a padding of at least the window, strides beyond it with
    ``cover_all``, taps of a dilated window that straddle the data). oneDNN computes no tap
    there: for a max pooling -FLT_MAX where Chainer's is -inf, for a convolution's weight
    gradient nothing where Chainer multiplies the padding's zeros by ``gy`` (NaN for an
    infinite one)."""
    def reads(i):
        start = i * s - p
        return any(0 <= start + t * d < size for t in range(k))
    if d == 1:  # contiguous windows: the first and the last are the ones that can miss
        return not (reads(0) and reads(out - 1))
    return not all(reads(i) for i in range(out))


@functools.lru_cache(maxsize=1024)
def plan(x_shape, w_shape, stride, pad, cover_all, dilate, groups):
    """(why not, y shape, padded) of Chainer's convolution_2d of these shapes: ``why not``
    None where oneDNN computes it as Chainer does, else the reason (Chainer's own code then
    runs, and refuses what Chainer refuses with Chainer's error); ``padded`` where a window
    reads padding (the padding's zeros times a NaN or infinite weight are NaN in Chainer's
    im2col, and are not computed by oneDNN)."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        return 'arrays that are not (n, c, h, w)', None, False
    if min(stride + dilate) < 1 or min(pad) < 0 or groups < 1:
        return 'a stride, dilation or group count below 1 or a negative padding', None, False
    n, c, h, w = x_shape
    o, cg, kh, kw = w_shape
    if min(kh, kw) < 1 or c != cg * groups or o % groups:
        return 'channels that do not divide into the groups', None, False
    y = _geometry(x_shape, w_shape, stride, pad, cover_all, dilate)
    if min(y) < 1:
        return 'an empty output or input', None, False
    axes = list(zip((h, w), y[2:], (kh, kw), stride, pad, dilate))
    if any(empty_window(*axis) for axis in axes):
        return 'windows that read only padding', None, False
    padded = any(p > 0 or pad_after(size, out, k, st, p, d) > 0
                 for size, out, k, st, p, d in axes)
    return None, y, padded


class Convolution(layer.Layer):
    """One geometry: x (n, c, h, w), W (o, c/G, kh, kw), y (n, o, oh, ow)."""

    what = 'convolution'
    STEPS = {'forward': (['src', 'weights'], ['dst']),
             'backward_data': (['diff_dst', 'weights'], ['diff_src']),
             'backward_weights': (['src', 'diff_dst'], ['diff_weights'])}
    BACKWARD = ('backward_data', 'backward_weights')
    # in bf16: what each step reads in bfloat16 (x, w, y: src, weights, dst or their diffs)
    LOW = {'forward': 'xw', 'backward_data': 'wy', 'backward_weights': 'xy'}

    def __init__(self, x_shape, w_shape, y_shape, stride, pad, dilate, groups, bias,
                 precision='fp32'):
        super().__init__()
        self.precision = precision
        n, c, h, w = x_shape
        o, cg, kh, kw = w_shape
        self.x_shape, self.w_shape, self.y_shape = tuple(x_shape), tuple(w_shape), \
            tuple(y_shape)
        self.groups, self.bias = groups, bias
        sy, sx = stride
        ph, pw = pad
        dy, dx = dilate
        oh, ow = y_shape[2:]
        self.strides = binding.dims((sy, sx))
        self.dilates = binding.dims((dy - 1, dx - 1))
        self.pad_l = binding.dims((ph, pw))
        self.pad_r = binding.dims((pad_after(h, oh, kh, sy, ph, dy),
                                pad_after(w, ow, kw, sx, pw, dx)))
        # oneDNN's grouped weights: the same memory as Chainer's W
        self.w_view = (groups, o // groups, cg, kh, kw) if groups > 1 else self.w_shape
        self._plain = {'src': binding.plain_md(self.x_shape),
                       'weights': binding.plain_md(self.w_view),
                       'dst': binding.plain_md(self.y_shape)}
        self._plain['diff_src'] = self._plain['src']
        self._plain['diff_weights'] = self._plain['weights']
        self._plain['diff_dst'] = self._plain['dst']
        self.bias_md = binding.plain_md((o,)) if bias else None
        if precision == 'bf16':
            # each step reads bfloat16 (its reorders convert) and writes float32, in the
            # layouts oneDNN chooses: its bfloat16 kernels take no plain layout
            shapes = {'x': self.x_shape, 'w': self.w_view, 'y': self.y_shape}
            self.plain_weights = False
            self._any_mds = {step: tuple(binding.any_md(shapes[k], binding.BF16 if k in read else
                                                     binding.F32) for k in 'xwy')
                             for step, read in self.LOW.items()}
            if stride != (1, 1) and (kh, kw) == (1, 1):
                # Left to choose, a strided 1 x 1 gradient of the input takes brgemm's
                # channels-last kernel, whose output's reorder back to NCHW is a transpose;
                # asked for channels in blocks of 16, oneDNN takes its 1 x 1 kernel: the
                # same numbers, 1.3-2.3x faster with the reorder (ResNet-50's projections,
                # batch 8, docs/compute.md "bfloat16").
                _, w, y = self._any_mds['backward_data']
                self._any_mds['backward_data'] = (
                    binding.any_md(self.x_shape, binding.F32, 'aBcd16b'), w, y)
        else:
            self.plain_weights = plain_weights(self.w_shape, self.y_shape)
            mds = (binding.any_md(self.x_shape), self._plain['weights']
                   if self.plain_weights else binding.any_md(self.w_view),
                   binding.any_md(self.y_shape))
            self._any_mds = dict.fromkeys(self.STEPS, mds)

    def describe(self, step, hint):
        lib = binding.lib()
        x, w, y = self._any_mds[step]
        bias = self.bias_md.handle if self.bias else None
        geometry = (self.strides, self.dilates, self.pad_l, self.pad_r)
        pd, alg = binding.P(), binding.ALG['convolution_direct']
        if step == 'forward':
            status = lib.dnnl_convolution_forward_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), binding.PROP['forward_training'], alg,
                x.handle, w.handle, bias, y.handle, *geometry, binding.attr())
        elif step == 'backward_data':
            status = lib.dnnl_convolution_backward_data_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), alg, x.handle, w.handle, y.handle,
                *geometry, hint, binding.attr())
        else:
            status = lib.dnnl_convolution_backward_weights_primitive_desc_create(
                binding.ctypes.byref(pd), binding.engine(), alg, x.handle, w.handle, bias,
                y.handle, *geometry, hint, binding.attr())
        binding.check(status, 'convolution ' + step.replace('_', ' '))
        return pd

    def plain(self, step):
        return self._plain

    def extra(self, step):
        name = {'forward': 'bias', 'backward_weights': 'diff_bias'}.get(step)
        return {name: self.bias_md} if self.bias and name else {}

    def forward(self, x, W, b=None, copies=None):
        y = numpy.empty(self.y_shape, numpy.float32)
        self.run('forward', src=x, weights=W, dst=y, bias=b if self.bias else None,
                 copies=copies)
        return y

    def backward_data(self, gy, W, copies=None):
        gx = numpy.empty(self.x_shape, numpy.float32)
        self.run('backward_data', diff_dst=gy, weights=W, diff_src=gx, copies=copies)
        return gx

    def backward_weights(self, x, gy, copies=None):
        """gW, and gb where the geometry has a bias."""
        gW = numpy.empty(self.w_shape, numpy.float32)
        gb = numpy.empty(self.w_shape[0], numpy.float32) if self.bias else None
        self.run('backward_weights', src=x, diff_dst=gy, diff_weights=gW, diff_bias=gb,
                 copies=copies)
        return gW, gb


def convolution(x_shape, w_shape, y_shape, stride, pad, dilate, groups, bias,
                precision='fp32'):
    key = (tuple(x_shape), tuple(w_shape), tuple(y_shape), tuple(stride), tuple(pad),
           tuple(dilate), groups, bool(bias), precision)
    return geometries.cached('conv', key, Convolution)


def _c(a):
    return numpy.ascontiguousarray(a, dtype=numpy.float32)


def _geometry(x_shape, w_shape, stride, pad, cover_all, dilate):
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    oh = out_size(h, kh, stride[0], pad[0], cover_all, dilate[0])
    ow = out_size(w, kw, stride[1], pad[1], cover_all, dilate[1])
    return (n, o, oh, ow)


def forward(x, W, b=None, stride=(1, 1), pad=(0, 0), cover_all=False, dilate=(1, 1),
            groups=1, precision='fp32', copies=None):
    """Chainer's convolution_2d forward (``precision``: 'fp32' or 'bf16'; ``copies``: the
    bfloat16 copies of the inputs to make or reuse, ``compute.onednn.copies``)."""
    y_shape = _geometry(x.shape, W.shape, stride, pad, cover_all, dilate)
    conv = convolution(x.shape, W.shape, y_shape, stride, pad, dilate, groups, b is not None,
                       precision)
    return conv.forward(_c(x), _c(W), None if b is None else _c(b), copies)


def backward_data(gy, W, x_shape, stride=(1, 1), pad=(0, 0), dilate=(1, 1), groups=1,
                  precision='fp32', copies=None):
    """The gradient with respect to x of a convolution whose input had ``x_shape``."""
    conv = convolution(x_shape, W.shape, gy.shape, stride, pad, dilate, groups, False,
                       precision)
    return conv.backward_data(_c(gy), _c(W), copies)


def backward_weights(x, gy, w_shape, stride=(1, 1), pad=(0, 0), dilate=(1, 1), groups=1,
                     bias=False, precision='fp32', copies=None):
    """(gW, gb or None) of a convolution with weights of ``w_shape``."""
    conv = convolution(x.shape, w_shape, gy.shape, stride, pad, dilate, groups, bias,
                       precision)
    return conv.backward_weights(_c(x), _c(gy), copies)


def deconvolution(x, W, b, out_hw, stride=(1, 1), pad=(0, 0), dilate=(1, 1), groups=1,
                  precision='fp32', copies=None):
    """Chainer's deconvolution_2d forward: x (n, c, h, w), W (c, o/G, kh, kw), the output
    (n, o, out_h, out_w): the backward data of the convolution from that output to x."""
    n = x.shape[0]
    c, og, kh, kw = W.shape
    y_shape = (n, og * groups) + tuple(out_hw)
    y = backward_data(x, W, y_shape, stride, pad, dilate, groups, precision, copies)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y
