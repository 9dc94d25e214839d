"""Chainer's functions on oneDNN: the seam.

Chainer's iDeep path (``chainer.config.use_ideep``) needs ``ideep4py``, which has no build
for Python 3.8 or later, and a stand-in would have to reproduce its array type and API for
every function Chainer gates with it. So the seam is the functions themselves: ``enable()``
replaces the CPU forward of the classes in ``REPLACEMENTS`` (one row per Chainer function:
the classes and methods patched, what computes them, the cases left to Chainer and why;
the start-up line, docs/compute.md's table via ``table()``, the patches and their tests read
it); each replacement hands back to Chainer's own code through ``modes`` where oneDNN would
not compute alike, said once. ``disable()`` puts Chainer's back. Adding a function:
docs/compute.md, "Adding a function"."""
import collections

import chainer
import numpy
from chainer.functions.activation import relu as _relu
from chainer.functions.connection import convolution_2d as _conv2d
from chainer.functions.connection import linear as _linear
from chainer.functions.math import basic_math as _basic_math
from chainer.functions.connection import deconvolution_2d as _deconv2d
from chainer.functions.normalization import local_response_normalization as _lrn
from chainer.functions.pooling import average_pooling_2d as _avg2d
from chainer.functions.pooling import max_pooling_nd as _maxnd

from chainermn_torus.compute import batchnorm, conv, copies, dnnl, eltwise, linear, lrn, \
    modes, pooling
from chainermn_torus.runtime.chainer_glue import chainer_private, patches

__all__ = ['enable', 'disable', 'enabled', 'uninstall', 'REPLACED', 'REPLACEMENTS', 'table',
           'LOW_PRECISION']

# Chainer's implementation seam for batch normalization (private: runtime.chainer_glue.chainer_private).
_bn = chainer_private.batch_normalization_internals()

def enabled():
    return modes.enabled()


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
        kept = _keep_copies(self) if precision == 'bf16' else None
        try:
            y = conv.forward(x, W, b, stride, pad, self.cover_all, (self.dy, self.dx),
                             self.groups, precision, kept)
        except dnnl.DnnlError as e:
            modes.refused('convolution_2d', e)
            return original(self, inputs)
        self.retain_inputs((0, 1))
        return y,
    return forward_cpu


_COPIES = '_chainermn_torus_copies'  # a bf16 convolution's or linear's copies of x and W


def _keep_copies(node):
    """The copies a bf16 forward keeps for its backward (none where nothing will be
    differentiated)."""
    if not chainer.config.enable_backprop:
        return None
    kept = node.__dict__[_COPIES] = copies.Copies(keep=('src', 'weights'))
    return kept


def _with_copies(original):
    # The two gradients find the forward's bfloat16 copies of x and W, the first keeps
    # its copy of gy for the second (compute.copies); all dropped when the backward ends.
    def backward(self, indexes, grad_outputs):
        kept = self.__dict__.pop(_COPIES, None)
        if kept is None:
            return original(self, indexes, grad_outputs)
        kept.keep = frozenset(('diff_dst',))
        return copies.during(lambda: original(self, indexes, grad_outputs), kept)
    return backward


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
        except dnnl.DnnlError as e:
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
        except dnnl.DnnlError as e:
            modes.refused('deconvolution_2d', e)
            return original(self, inputs)
        self.retain_inputs((0, 1))
        return y,
    return forward_cpu


class _OneDnnBatchNormalizationImpl(_bn._BatchNormalizationImpl):
    """Chainer's batch normalization in training, computed by oneDNN (``compute.batchnorm``).
    The variance reaches the backward through ``forward_data``: Chainer passes its own
    ``var`` only to iDeep's class."""

    def forward(self, axis, gamma, x, x_layout, xp, expander, beta, eps, decay, running_mean,
                running_var):
        y, mean, var = batchnorm.forward(x, gamma, beta, eps,
                                         any_order=modes.precision() == 'bf16')
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
        gx, ggamma, gbeta = batchnorm.backward(x, gy, mean, forward_data, gamma, eps,
                                               any_order=modes.precision() == 'bf16')
        return gx, None, ggamma, gbeta


def _select_bn(batch_norm_func, inputs):
    """Ours where oneDNN computes it alike, else Chainer's own choice (which refuses what
    Chainer refuses: an ``axis`` given as a list fails in numpy's ``mean``)."""
    x, gamma, beta = inputs
    if (modes.on() and isinstance(x, numpy.ndarray) and x.ndim in (2, 4) and gamma.ndim == 1
            and isinstance(batch_norm_func.axis, tuple)
            and tuple(batch_norm_func.key_axis) == (1,)
            and modes.standard(batch_norm_func, inputs)):
        return _OneDnnBatchNormalizationImpl()
    return _bn._impl_selector(batch_norm_func, inputs)


def _bn_forward(original):
    def forward(self, inputs):
        modes.start(self)
        if self._impl_selector is _bn._impl_selector:  # a caller's own selector stays
            self._impl_selector = _select_bn
        return original(self, inputs)
    return forward


def _fixed_bn_forward(original):
    def forward(self, inputs):
        x, gamma, beta, mean, var = inputs
        if not (modes.start(self) and isinstance(x, numpy.ndarray) and x.ndim in (2, 4)
                and gamma.ndim == 1
                and (self.axis is None or (isinstance(self.axis, tuple)
                                           and self.axis == (0,) + tuple(range(2, x.ndim))))
                and modes.standard(self, inputs)):
            return original(self, inputs)
        self.retain_inputs((0, 1, 3, 4))
        self.axis = _bn._compute_axis(x.ndim, gamma.ndim, self.axis)
        self.key_axis = _bn._compute_key_axis(x.ndim, gamma.ndim, self.axis)
        self.expander = tuple(slice(None) if i in self.key_axis else None
                              for i in range(x.ndim))
        self.inv_var = self.inv_std = None  # computed by the gradient when asked (iDeep's)
        return batchnorm.inference(x, gamma, beta, mean, var, self.eps),
    return forward


def _small(array):
    return array.size < eltwise.SMALL


def _relu_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or not modes.standard(self, inputs) or _small(inputs[0]):
            return original(self, inputs)
        if not eltwise.available():
            modes.not_taken('relu (numba is not installed)')
            return original(self, inputs)
        self.retain_outputs((0,))
        return eltwise.relu(inputs[0]),
    return forward_cpu


def _relu_grad_forward(original):
    def forward_cpu(self, inputs):
        if (not modes.start(self) or not modes.standard(self, inputs) or _small(inputs[0])
                or self.b.dtype != numpy.float32 or self.b.shape != inputs[0].shape
                or not eltwise.available()):
            return original(self, inputs)
        return eltwise.relu_grad(self.b, inputs[0]),
    return forward_cpu


_WORKSPACE = '_chainermn_torus_workspace'  # where a max pooling keeps oneDNN's choices


def _pool_args(fn):
    return tuple(fn.ksize), tuple(fn.stride), tuple(fn.pad)


def _avg_pool_args(fn):
    """AveragePooling2D's and its gradient's (ksize, stride, pad)."""
    return (fn.kh, fn.kw), (fn.sy, fn.sx), (fn.ph, fn.pw)


def _max_pool_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or self.ndim != 2 or not modes.standard(self, inputs):
            return original(self, inputs)
        if self.return_indices:
            modes.not_taken('max_pooling_2d with return_indices (Chainer\'s indexes asked for)')
            return original(self, inputs)
        x, = inputs
        why, _ = pooling.plan('max', x.shape, *_pool_args(self), self.cover_all)
        if why is not None:
            modes.not_taken('max_pooling_2d of ' + why)
            return original(self, inputs)
        if not modes.finite(x):
            # oneDNN's maximum skips NaN (Chainer's is NaN) and starts at -FLT_MAX (a
            # window of -inf is -inf in Chainer's)
            modes.not_taken('max_pooling_2d of NaN/inf inputs')
            return original(self, inputs)
        try:
            y, workspace = pooling.max_forward(x, *_pool_args(self), cover_all=self.cover_all)
        except dnnl.DnnlError as e:
            modes.refused('max_pooling_2d', e)
            return original(self, inputs)
        self._in_shape, self._in_dtype = x.shape, x.dtype
        self.retain_inputs((0,))
        setattr(self, _WORKSPACE, workspace)
        self.indexes = None  # Chainer's, made when asked (_chainer_indexes)
        return y,
    return forward_cpu


def _chainer_indexes(func):
    """Chainer's ``indexes`` of a max pooling computed here, from its kept input."""
    if func.indexes is None:
        x = func.get_retained_inputs()[0].array
        chainers = patches.original_of(_maxnd.MaxPoolingND, 'forward_cpu')
        chainers(func, (x,))  # sets them, y unused
    return func.indexes


def _max_pool_grad_forward(original):
    def forward_cpu(self, inputs):
        modes.start(self)
        func = self.func
        workspace = getattr(func, _WORKSPACE, None)
        if workspace is None:
            return original(self, inputs)
        if not modes.standard(self, inputs):
            _chainer_indexes(func)
            return original(self, inputs)
        gy, = inputs
        try:
            return pooling.max_backward(gy, workspace, func._in_shape, *_pool_args(func)),
        except dnnl.DnnlError as e:
            modes.refused('max_pooling_2d gradient', e)
            _chainer_indexes(func)
            return original(self, inputs)
    return forward_cpu


def _max_pool_with_indexes_forward(original):
    def forward_cpu(self, inputs):
        modes.start(self)
        if getattr(self.func, _WORKSPACE, None) is not None:
            _chainer_indexes(self.func)
        return original(self, inputs)
    return forward_cpu


def _avg_pool_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or not modes.standard(self, inputs):
            return original(self, inputs)
        x, = inputs
        args = _avg_pool_args(self)
        why, _ = pooling.plan('average', x.shape, *args, False)
        if why is not None:
            modes.not_taken('average_pooling_2d of ' + why)
            return original(self, inputs)
        try:
            y = pooling.average_forward(x, *args)
        except dnnl.DnnlError as e:
            modes.refused('average_pooling_2d', e)
            return original(self, inputs)
        self._in_shape, self._in_dtype = x.shape, x.dtype
        return y,
    return forward_cpu


def _avg_pool_grad_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or not modes.standard(self, inputs):
            return original(self, inputs)
        gy, = inputs
        args = _avg_pool_args(self)
        why, y_shape = pooling.plan('average', self._in_shape, *args, False)
        if why is not None or y_shape != gy.shape:
            return original(self, inputs)
        try:
            return pooling.average_backward(gy, self._in_shape, *args),
        except dnnl.DnnlError as e:
            modes.refused('average_pooling_2d gradient', e)
            return original(self, inputs)
    return forward_cpu


class _LrnWorkspace(object):
    """What a local response normalization computed here leaves for its gradient."""

    def __init__(self, workspace):
        self.workspace = workspace


def _lrn_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or inputs[0].ndim != 4 or not modes.standard(self, inputs):
            return original(self, inputs)
        if self.n < 1:  # Chainer's window is then its middle channel alone; oneDNN refuses
            modes.not_taken('local_response_normalization with n < 1')
            return original(self, inputs)
        try:
            y, workspace = lrn.forward(inputs[0], self.n, self.k, self.alpha, self.beta)
        except dnnl.DnnlError as e:
            modes.refused('local_response_normalization', e)
            return original(self, inputs)
        self.retain_inputs((0,))
        self.retain_outputs((0,))
        self.indexes = _LrnWorkspace(workspace)
        return y,
    return forward_cpu


def _lrn_grad_forward(original):
    def forward_cpu(self, inputs):
        modes.start(self)
        if not isinstance(self.indexes, _LrnWorkspace):
            return original(self, inputs)
        x, _, gy = inputs
        return lrn.backward(x, gy, self.indexes.workspace, self.n, self.k, self.alpha,
                            self.beta),
    return forward_cpu


def _in_bf16(fn, inputs):
    """Whether a linear layer's node computes here: bf16 in force, float32 2-D arrays."""
    return (modes.start(fn) and modes.precision() == 'bf16' and modes.standard(fn, inputs)
            and all(a.ndim == 2 for a in inputs[:2]))


def _on_inner_product(fits, compute, what, keeps=False):
    """The maker of a linear node's forward on oneDNN's inner product in bf16: ``fits(node,
    inputs)`` the shapes Chainer's own code would take (else Chainer's runs, with its
    errors), ``compute(inputs, copies)`` the result; ``keeps``: the forward, which keeps its
    bfloat16 copies for the backward (the gradients find them: ``copies.current()``)."""
    def make(original):
        def forward(self, inputs):
            if not _in_bf16(self, inputs) or not fits(self, inputs):
                return original(self, inputs)
            self._config_use_ideep = chainer.config.use_ideep  # what Chainer's backward reads
            kept = _keep_copies(self) if keeps else copies.current()
            try:
                out = compute(inputs, kept)
            except dnnl.DnnlError as e:
                modes.refused(what, e)
                return original(self, inputs)
            self.retain_inputs((0, 1))
            return out,
        return forward
    return make


# LinearFunction (x, W[, b]), LinearGradData (W, gy), LinearGradWeight (x, gy)
_linear_forward = _on_inner_product(
    lambda node, inputs: inputs[0].shape[1] == inputs[1].shape[1],
    lambda inputs, kept: linear.forward(*inputs, copies=kept), 'linear', keeps=True)
_linear_grad_data_forward = _on_inner_product(
    lambda node, inputs: inputs[1].shape[1] == inputs[0].shape[0],
    lambda inputs, kept: linear.backward_data(*inputs, kept), 'linear gradient')
_linear_grad_weight_forward = _on_inner_product(
    lambda node, inputs: (numpy.dtype(node._w_dtype) == numpy.float32
                          and inputs[0].shape[0] == inputs[1].shape[0]),
    lambda inputs, kept: linear.backward_weights(*inputs, kept), 'linear gradient')


def _add_forward(original):
    # Add (``a + b``) and MultiAdd (``F.add``, the gradient sums): same-shape float32 arrays
    # summed on the rank's threads; broadcasting, other types and small arrays Chainer's.
    def forward(self, inputs):
        if (not modes.start(self) or len(inputs) < 2 or not eltwise.available()
                or _small(inputs[0])
                or any(not isinstance(a, numpy.ndarray) or a.dtype != numpy.float32
                       or a.shape != inputs[0].shape for a in inputs)):
            return original(self, inputs)
        if type(self) is _basic_math.MultiAdd:
            self.len = len(inputs)  # what Chainer's forward records
        return eltwise.add(inputs),
    return forward


# One row per Chainer function replaced (``table()`` is docs/compute.md's table):
# function: as Chainer's users call it; said: its words in the start-up line; patches:
# (Chainer's class, the method replaced, the maker of the replacement); by: what computes
# it; takes: the cases computed here; left: the cases left to Chainer's code, and why.
Replaced = collections.namedtuple('Replaced', 'function said patches by takes left')

_LAYOUT = 'other dtypes and memory layouts (oneDNN is used for float32, standard layout)'
REPLACEMENTS = [
    Replaced('convolution_2d', 'forward, gradient of the input and of the weights',
             ((_conv2d.Convolution2DFunction, 'forward_cpu', _conv_forward),
              (_conv2d.Convolution2DGradW, 'forward_cpu', _grad_w_forward)),
             "oneDNN's convolution forward and backward weights; the gradient of the input "
             "is `deconvolution_2d`'s forward (below); 1x1 kernels and outputs of at most 64 "
             "pixels take the weights in Chainer's layout (no reorder)",
             'float32 (n, c, h, w): stride, pad, `cover_all`, dilation, groups, bias',
             _LAYOUT + '; `cudnn_fast`; what Chainer refuses (an empty output, channels that '
             "do not divide into the groups: Chainer's error); NaN/inf weights or gradients "
             "with padding (Chainer's im2col multiplies the padding's zeros: NaN there); the "
             'bias gradient (a sum)'),
    Replaced('deconvolution_2d', 'forward',
             ((_deconv2d.Deconvolution2DFunction, 'forward_cpu', _deconv_forward),),
             "oneDNN's convolution backward data",
             'float32 (n, c, h, w): `outsize`, stride, pad, dilation, groups, bias',
             _LAYOUT + "; what Chainer refuses (Chainer's error)"),
    Replaced('batch_normalization', "training: forward, gradients; on numba's kernels where "
             'numba is installed',
             ((_bn.BatchNormalization, 'forward', _bn_forward),),
             "numba's kernels (statistics, normalization, gradients), or oneDNN's batch "
             'normalization where numba is not installed: one more implementation class of '
             "Chainer's, chosen per call",
             'float32 (n, c, h, w) and (n, c) normalised over every axis but 1; the running '
             'statistics updated as Chainer does (decay, the unbiased variance)',
             _LAYOUT + "; other axes or shapes; an `axis` given as a list (Chainer's "
             "TypeError); a caller's own implementation selector"),
    Replaced('fixed_batch_normalization', 'forward',
             ((_bn.FixedBatchNormalization, 'forward', _fixed_bn_forward),),
             "numba's kernel, or oneDNN's batch normalization inference",
             'the same shapes, with given statistics (evaluation)',
             _LAYOUT + "; its gradient (recomputed as after Chainer's iDeep forward)"),
    Replaced('relu', "forward, gradient; on numba's kernels",
             ((_relu.ReLU, 'forward_cpu', _relu_forward),
              (_relu.ReLUGrad2, 'forward_cpu', _relu_grad_forward)),
             "numba's kernels with numpy's arithmetic (not oneDNN's eltwise: it turns NaN "
             'into 0)', 'float32, any shape, 0-d included',
             _LAYOUT + "; arrays under 4,096 elements (Chainer's numpy is as fast there); "
             'machines without numba'),
    Replaced('max_pooling_2d', 'forward, gradient',
             ((_maxnd.MaxPoolingND, 'forward_cpu', _max_pool_forward),
              (_maxnd.MaxPoolingNDGrad, 'forward_cpu', _max_pool_grad_forward),
              (_maxnd.MaxPoolingNDWithIndexes, 'forward_cpu', _max_pool_with_indexes_forward)),
             "oneDNN's max pooling forward (training: its workspace records each window's "
             "choice, where Chainer keeps `indexes`) and backward; Chainer's `indexes` made "
             "from the kept input where asked (the gradient's own gradient)",
             'float32 (n, c, h, w): window, stride, pad, `cover_all`',
             _LAYOUT + '; `return_indices=True`; 3-D pooling; NaN/inf inputs (oneDNN\'s '
             'maximum skips NaN); windows that read only padding (-inf in Chainer\'s, '
             "-FLT_MAX in oneDNN's)"),
    Replaced('average_pooling_2d', 'forward, gradient',
             ((_avg2d.AveragePooling2D, 'forward_cpu', _avg_pool_forward),
              (_avg2d.AveragePooling2DGrad, 'forward_cpu', _avg_pool_grad_forward)),
             "oneDNN's average pooling, padding included (Chainer divides by the whole "
             'window)', 'float32 (n, c, h, w): window, stride, pad',
             _LAYOUT + "; an empty output (Chainer's error)"),
    Replaced('local_response_normalization', 'forward, gradient',
             ((_lrn.LocalResponseNormalization, 'forward_cpu', _lrn_forward),
              (_lrn.LocalResponseNormalizationGrad, 'forward_cpu', _lrn_grad_forward)),
             "oneDNN's LRN across channels; its workspace reaches the gradient as Chainer's "
             '`indexes`', 'float32 (n, c, h, w): any `n` (an even `n` is Chainer\'s window of '
             '`n + 1` channels, oneDNN\'s too), `k`, `alpha`, `beta`',
             _LAYOUT + '; other ranks of arrays; `n < 1` (oneDNN refuses it, Chainer computes '
             'the middle channel alone)'),
    Replaced('the sums of arrays', "Add and MultiAdd: the residual additions and the "
             "backward pass's gradient sums; on numba's kernels",
             ((_basic_math.Add, 'forward', _add_forward),
              (_basic_math.MultiAdd, 'forward', _add_forward)),
             "numba's kernels on the rank's threads, the additions in Chainer's order (equal "
             "bit for bit; Chainer's numpy is one thread)", 'float32 arrays of one shape',
             "broadcasting; other dtypes; arrays under 4,096 elements; machines without numba"),
    Replaced('linear', 'forward, gradients; with precision bf16 only',
             ((_linear.LinearFunction, 'forward', _linear_forward),
              (_linear.LinearGradData, 'forward', _linear_grad_data_forward),
              (_linear.LinearGradWeight, 'forward', _linear_grad_weight_forward)),
             "oneDNN's inner product in bfloat16 (float32 sums, float32 arrays in and out)",
             'precision bf16: float32 2-D `x` and `W`, bias',
             "precision fp32 (Chainer's numpy and its BLAS: results as before); " + _LAYOUT +
             "; the bias gradient (Chainer's sum)"),
]
# What precision bf16 changes (the start-up line; docs/compute.md, "bfloat16").
LOW_PRECISION = ('convolution_2d, deconvolution_2d and linear read bfloat16, sum in float32; '
                 'parameters, gradients and the update stay float32')
_REPLACEMENTS = [patch for row in REPLACEMENTS for patch in row.patches]
REPLACED = ', '.join('{} ({})'.format(row.function, row.said) for row in REPLACEMENTS)
# Every class patched: its backward runs in the mode its forward ran in
# (``modes.in_mode_of_forward``): the functions it applies read what that forward left.
_BACKWARDS = sorted({cls for cls, _, _ in _REPLACEMENTS}, key=lambda c: c.__name__)
# Their backwards find the bfloat16 copies their forwards kept (compute.copies).
_SHARE_COPIES = (_conv2d.Convolution2DFunction, _linear.LinearFunction)


def table():
    """The replaced functions as Markdown rows (docs/compute.md, "What runs on oneDNN")."""
    rows = ["| Chainer function | Chainer's classes | computed by | on oneDNN / numba | "
            'left to Chainer, and why |', '|---|---|---|---|---|']
    for r in REPLACEMENTS:
        classes = ', '.join(dict.fromkeys('`{}`'.format(cls.__name__)
                                          for cls, _, _ in r.patches))
        name = '`{}`'.format(r.function) if r.function.isidentifier() else r.function
        rows.append('| {} | {} | {} | {} | {} |'.format(name, classes, r.by, r.takes, r.left))
    return '\n'.join(rows)


def enable():
    """Chainer's functions above on oneDNN from now on (idempotent); raises where oneDNN
    does not load (``dnnl.DnnlError``, naming the fix)."""
    dnnl.lib()
    if not patches.applied('compute'):
        for cls, name, make in _REPLACEMENTS:
            patches.apply(cls, name, make(cls.__dict__[name]), 'compute',
                          'Chainer\'s {} on oneDNN'.format(cls.__name__))
        for cls in _BACKWARDS:
            backward = modes.in_mode_of_forward(getattr(cls, 'backward'))
            if cls in _SHARE_COPIES:
                backward = _with_copies(backward)
            patches.apply(cls, 'backward', backward, 'compute', 'Chainer\'s {} backward in '
                          'the mode its forward ran in{}'.format(
                              cls.__name__, ', with its forward\'s bfloat16 copies'
                              if cls in _SHARE_COPIES else ''))
    modes.set_on(True)


def disable():
    """Chainer's own functions for every forward from now on. A node whose forward ran on
    oneDNN still takes its gradient there (it reads oneDNN's workspace)."""
    modes.set_on(False)


def uninstall():
    """Chainer's classes exactly as they were (no node computed in oneDNN mode may be
    differentiated after this)."""
    modes.set_on(False)
    patches.uninstall('compute')
