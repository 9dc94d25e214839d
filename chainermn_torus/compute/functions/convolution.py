"""convolution_2d (forward, both gradients) and deconvolution_2d on oneDNN's convolutions
(``compute.onednn.conv``): the replaced forwards and their rows of ``REPLACEMENTS``."""
import numpy
from chainer.functions.connection import convolution_2d as _conv2d
from chainer.functions.connection import deconvolution_2d as _deconv2d

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions import common
from chainermn_torus.compute.functions.common import LAYOUT, Replaced
from chainermn_torus.compute.onednn import binding, conv, copies

__all__ = ['ROWS', 'SHARE_COPIES']


def _conv_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or self.cudnn_fast or not modes.standard(self, inputs):
            return original(self, inputs)
        x, W = inputs[:2]
        b = inputs[2] if len(inputs) == 3 else None
        stride, pad = (self.sy, self.sx), (self.ph, self.pw)
        why, _, padded = conv.plan(x.shape, W.shape, stride, pad, self.cover_all,
                                   (self.dy, self.dx), self.groups)
        if why is not None:
            modes.not_taken('convolution_2d of ' + why)
            return original(self, inputs)
        if padded and not modes.finite(W):
            # Chainer's im2col multiplies the padding's zeros by every weight: NaN there
            modes.not_taken('convolution_2d with NaN/inf weights and padding')
            return original(self, inputs)
        self._check_input_layouts_all_standard()
        precision = modes.precision()
        kept = common.keep_copies(self) if precision == 'bf16' else None
        try:
            y = conv.forward(x, W, b, stride, pad, self.cover_all, (self.dy, self.dx),
                             self.groups, precision, kept)
        except binding.DnnlError as e:
            modes.refused('convolution_2d', e)
            return original(self, inputs)
        self.retain_inputs((0, 1))
        return y,
    return forward_cpu


def _grad_w_forward(original):
    def forward_cpu(self, inputs):
        if (not modes.start(self) or not modes.standard(self, inputs)
                or numpy.dtype(self.W_dtype) != numpy.float32):
            return original(self, inputs)
        x, gy = inputs
        stride, pad, dilate = (self.sy, self.sx), (self.ph, self.pw), (self.dy, self.dx)
        why, y_shape, padded = conv.plan(x.shape, self.W_shape, stride, pad, self.cover_all,
                                         dilate, self.groups)
        if why is not None or y_shape != gy.shape:
            return original(self, inputs)
        try:
            gW, _ = conv.backward_weights(x, gy, self.W_shape, stride, pad, dilate,
                                          self.groups, precision=modes.precision(),
                                          copies=copies.current())
        except binding.DnnlError as e:
            modes.refused('convolution_2d gradient', e)
            return original(self, inputs)
        if padded and not modes.finite(gW):
            # a NaN or infinite gy reaches Chainer's gW through the padding's zeros too
            modes.not_taken('convolution_2d gradients with NaN/inf and padding')
            return original(self, inputs)
        self.retain_inputs((0, 1))
        return gW,
    return forward_cpu


def _deconv_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or not modes.standard(self, inputs):
            return original(self, inputs)
        x, W = inputs[:2]
        b = inputs[2] if len(inputs) == 3 else None
        if x.ndim != 4 or W.ndim != 4:
            return original(self, inputs)
        self._calc_out_size(x.shape, W.shape)  # Chainer's, with its errors
        # the convolution this deconvolution runs backwards, from its output to x
        y_shape = (x.shape[0], W.shape[1] * self.groups, self.outh, self.outw)
        why = conv.plan(y_shape, (W.shape[0],) + W.shape[1:], (self.sy, self.sx),
                        (self.ph, self.pw), False, (self.dy, self.dx), self.groups)[0]
        if why == 'channels that do not divide into the groups' or min(y_shape) < 1:
            modes.not_taken('deconvolution_2d of ' + why if why else 'an empty output')
            return original(self, inputs)
        try:
            y = conv.deconvolution(x, W, b, (self.outh, self.outw), (self.sy, self.sx),
                                   (self.ph, self.pw), (self.dy, self.dx), self.groups,
                                   modes.precision(), copies.current())
        except binding.DnnlError as e:
            modes.refused('deconvolution_2d', e)
            return original(self, inputs)
        self.retain_inputs((0, 1))
        return y,
    return forward_cpu


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('convolution_2d', 'forward, gradient of the input and of the weights',
             ((_conv2d.Convolution2DFunction, 'forward_cpu', _conv_forward),
              (_conv2d.Convolution2DGradW, 'forward_cpu', _grad_w_forward)),
             "oneDNN's convolution forward and backward weights; the gradient of the input "
             "is `deconvolution_2d`'s forward (below); 1x1 kernels and outputs of at most 64 "
             "pixels take the weights in Chainer's layout (no reorder)",
             'float32 (n, c, h, w): stride, pad, `cover_all`, dilation, groups, bias',
             LAYOUT + '; `cudnn_fast`; what Chainer refuses (an empty output, channels that '
             "do not divide into the groups: Chainer's error); NaN/inf weights or gradients "
             "with padding (Chainer's im2col multiplies the padding's zeros: NaN there); the "
             'bias gradient (a sum)'),
    Replaced('deconvolution_2d', 'forward',
             ((_deconv2d.Deconvolution2DFunction, 'forward_cpu', _deconv_forward),),
             "oneDNN's convolution backward data",
             'float32 (n, c, h, w): `outsize`, stride, pad, dilation, groups, bias',
             LAYOUT + "; what Chainer refuses (Chainer's error)"),
]
# Its backward finds the bfloat16 copies its forward kept (compute.onednn.copies).
SHARE_COPIES = (_conv2d.Convolution2DFunction,)
