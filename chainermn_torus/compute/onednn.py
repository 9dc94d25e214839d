"""Chainer's functions on oneDNN: the seam.

The iDeep path in Chainer's functions (``chainer.config.use_ideep``) calls ``ideep4py``,
Intel's Python module, which has no build for Python 3.8 or later; giving Chainer an
``ideep4py``-shaped module instead would mean reproducing its ``mdarray`` type and an API
per function that Chainer reaches through ``intel64.inputs_all_ready`` for every function,
including the ones we leave on numpy (concat, dropout, ...). So the seam is the functions
themselves: ``enable()`` replaces the CPU forward of the function classes this package
computes on oneDNN, and each replacement hands back to Chainer's own where the arrays are
not float32, not in the standard layout, or the case is not one oneDNN computes alike
(said once per case on rank 0). ``disable()`` puts Chainer's back. The classes replaced,
and why each:

* ``Convolution2DFunction``: convolution_2d's forward (im2col and a tensordot in Chainer);
* ``Deconvolution2DFunction``: deconvolution_2d's forward, which is also how Chainer
  computes a convolution's gradient with respect to its input;
* ``Convolution2DGradW``: a convolution's gradient with respect to its weights;
* ``BatchNormalization`` in training: Chainer chooses an implementation class per call
  (its ``impl_selector``; iDeep's and cuDNN's are such classes), and ours is one more,
  chosen for float32 (n, c, h, w) and (n, c) arrays normalised over all axes but 1; the
  running statistics are updated as Chainer does;
* ``FixedBatchNormalization``'s forward (inference, with given statistics: evaluation); its
  gradient recomputes what it needs, as it does after Chainer's iDeep forward;
* ``ReLU`` and its gradient ``ReLUGrad2``.

Chainer's bias gradient (a sum over gy) stays Chainer's.
"""
import numpy
from chainer.functions.activation import relu as _relu
from chainer.functions.connection import convolution_2d as _conv2d
from chainer.functions.connection import deconvolution_2d as _deconv2d
from chainer.functions.normalization import batch_normalization as _bn

from chainermn_torus.compute import batchnorm, conv, dnnl, eltwise
from chainermn_torus.runtime import report

__all__ = ['enable', 'disable', 'enabled', 'REPLACED']

REPLACED = ('convolution_2d (forward, gradient of the input and of the weights), '
            'deconvolution_2d (forward), batch_normalization (training: forward, '
            'gradients; inference: fixed_batch_normalization forward), relu (forward, '
            'gradient)')
_PATCHES = []  # (class, attribute, Chainer's function)


def enabled():
    return bool(_PATCHES)


def _standard(fn, inputs):
    """float32 arrays of the standard layout: what the oneDNN path takes."""
    layouts = getattr(fn, 'input_layouts', None)
    if layouts is not None and any(layout is not None for layout in layouts):
        return _not_taken('a memory layout other than the standard one')
    if any(a is not None and a.dtype != numpy.float32 for a in inputs):
        return _not_taken('{} arrays (oneDNN is used for float32)'.format(
            '/'.join(sorted({a.dtype.name for a in inputs if a is not None}))))
    return True


def _not_taken(why):
    report.say('compute: oneDNN not used for {}: Chainer\'s numpy instead'.format(why),
               key='onednn-not-taken ' + why)
    return False


def _conv_forward(original):
    def forward_cpu(self, inputs):
        if self.cudnn_fast or not _standard(self, inputs):
            return original(self, inputs)
        self._check_input_layouts_all_standard()
        self.retain_inputs((0, 1))
        x, W = inputs[:2]
        b = inputs[2] if len(inputs) == 3 else None
        return conv.forward(x, W, b, (self.sy, self.sx), (self.ph, self.pw),
                            self.cover_all, (self.dy, self.dx), self.groups),
    return forward_cpu


def _grad_w_forward(original):
    def forward_cpu(self, inputs):
        if not _standard(self, inputs) or numpy.dtype(self.W_dtype) != numpy.float32:
            return original(self, inputs)
        self.retain_inputs((0, 1))
        x, gy = inputs
        gW, _ = conv.backward_weights(x, gy, self.W_shape, (self.sy, self.sx),
                                      (self.ph, self.pw), (self.dy, self.dx), self.groups)
        return gW,
    return forward_cpu


def _deconv_forward(original):
    def forward_cpu(self, inputs):
        if not _standard(self, inputs):
            return original(self, inputs)
        self.retain_inputs((0, 1))
        x, W = inputs[:2]
        b = inputs[2] if len(inputs) == 3 else None
        self._calc_out_size(x.shape, W.shape)
        return conv.deconvolution(x, W, b, (self.outh, self.outw), (self.sy, self.sx),
                                  (self.ph, self.pw), (self.dy, self.dx), self.groups),
    return forward_cpu


class _OneDnnBatchNormalizationImpl(_bn._BatchNormalizationImpl):
    """Chainer's batch normalization in training, computed by oneDNN (``compute.batchnorm``).
    The variance reaches the backward through ``forward_data``: Chainer passes its own
    ``var`` only to iDeep's class."""

    def forward(self, axis, gamma, x, x_layout, xp, expander, beta, eps, decay, running_mean,
                running_var):
        y, mean, var = batchnorm.forward(x, gamma, beta, eps)
        inv_std = numpy.reciprocal(numpy.sqrt(var + eps, dtype=numpy.float32))
        if running_mean is not None:  # as Chainer's: the unbiased variance
            m = x.size // gamma.size
            adjust = m / max(m - 1., 1.)
            running_mean *= decay
            running_mean += (1 - decay) * mean
            running_var *= decay
            running_var += (1 - decay) * adjust * var
        return y, x_layout, running_mean, running_var, mean, var, inv_std, var

    def backward(self, axis, gamma, gy, x, x_layout, xp, expander, mean, inv_std, eps, var,
                 forward_data):
        gx, ggamma, gbeta = batchnorm.backward(x, gy, mean, forward_data, gamma, eps)
        return gx, None, ggamma, gbeta


def _select_bn(batch_norm_func, inputs):
    """Ours where oneDNN computes it alike, else Chainer's own choice."""
    x, gamma, beta = inputs
    if (isinstance(x, numpy.ndarray) and x.ndim in (2, 4) and gamma.ndim == 1
            and tuple(batch_norm_func.key_axis) == (1,)
            and _standard(batch_norm_func, inputs)):
        return _OneDnnBatchNormalizationImpl()
    return _bn._impl_selector(batch_norm_func, inputs)


def _bn_forward(original):
    def forward(self, inputs):
        if self._impl_selector is _bn._impl_selector:  # a caller's own selector stays
            self._impl_selector = _select_bn
        return original(self, inputs)
    return forward


def _fixed_bn_forward(original):
    def forward(self, inputs):
        x, gamma, beta, mean, var = inputs
        if not (isinstance(x, numpy.ndarray) and x.ndim in (2, 4) and gamma.ndim == 1
                and self.axis in (None, (0,) + tuple(range(2, x.ndim)))
                and _standard(self, inputs)):
            return original(self, inputs)
        self.retain_inputs((0, 1, 3, 4))
        self.axis = _bn._compute_axis(x.ndim, gamma.ndim, self.axis)
        self.key_axis = _bn._compute_key_axis(x.ndim, gamma.ndim, self.axis)
        self.expander = tuple(slice(None) if i in self.key_axis else None
                              for i in range(x.ndim))
        self.inv_var = self.inv_std = None  # computed by the gradient when asked (iDeep's)
        return batchnorm.inference(x, gamma, beta, mean, var, self.eps),
    return forward


def _relu_forward(original):
    def forward_cpu(self, inputs):
        if not _standard(self, inputs):
            return original(self, inputs)
        y = eltwise.relu(inputs[0])
        self.retain_outputs((0,))
        return y,
    return forward_cpu


def _relu_grad_forward(original):
    def forward_cpu(self, inputs):
        if not _standard(self, inputs) or self.b.dtype != numpy.float32:
            return original(self, inputs)
        return eltwise.relu_grad(self.b, inputs[0]),
    return forward_cpu


_REPLACEMENTS = [
    (_conv2d.Convolution2DFunction, 'forward_cpu', _conv_forward),
    (_conv2d.Convolution2DGradW, 'forward_cpu', _grad_w_forward),
    (_deconv2d.Deconvolution2DFunction, 'forward_cpu', _deconv_forward),
    (_bn.BatchNormalization, 'forward', _bn_forward),
    (_bn.FixedBatchNormalization, 'forward', _fixed_bn_forward),
    (_relu.ReLU, 'forward_cpu', _relu_forward),
    (_relu.ReLUGrad2, 'forward_cpu', _relu_grad_forward),
]


def enable():
    """Chainer's functions above on oneDNN (idempotent); raises where oneDNN does not
    load (``dnnl.DnnlError``, naming the fix)."""
    if _PATCHES:
        return
    dnnl.lib()
    for cls, name, make in _REPLACEMENTS:
        original = cls.__dict__[name]
        setattr(cls, name, make(original))
        _PATCHES.append((cls, name, original))


def disable():
    """Chainer's own functions again."""
    while _PATCHES:
        cls, name, original = _PATCHES.pop()
        setattr(cls, name, original)
