"""max_pooling_2d and average_pooling_2d (forward, gradient) on oneDNN's pooling
(``compute.onednn.pooling``): the replaced forwards and their rows of ``REPLACEMENTS``."""
from chainer.functions.pooling import average_pooling_2d as _avg2d
from chainer.functions.pooling import max_pooling_nd as _maxnd

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions.common import LAYOUT, Replaced
from chainermn_torus.compute.onednn import binding, pooling

__all__ = ['ROWS', 'WORKSPACE']


WORKSPACE = '_chainermn_torus_workspace'  # where a max pooling keeps oneDNN's choices


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
        except binding.DnnlError as e:
            modes.refused('max_pooling_2d', e)
            return original(self, inputs)
        # Chainer's CPU forward keeps no input: its indexes are all its gradients read, and
        # here the workspace is (window_indexes makes Chainer's from it where asked)
        self._in_shape, self._in_dtype, self._out_shape = x.shape, x.dtype, y.shape
        setattr(self, WORKSPACE, workspace)
        self.indexes = None  # Chainer's, made when asked (_chainer_indexes)
        return y,
    return forward_cpu


def _chainer_indexes(func):
    """Chainer's ``indexes`` of a max pooling computed here, from oneDNN's workspace: the
    choices the forward made, whatever happened to its input since (an array changed in
    place between the forward and the gradient's gradient)."""
    if func.indexes is None:
        func.indexes = pooling.window_indexes(getattr(func, WORKSPACE), func._out_shape)
    return func.indexes


def _max_pool_grad_forward(original):
    def forward_cpu(self, inputs):
        modes.start(self)
        func = self.func
        workspace = getattr(func, WORKSPACE, None)
        if workspace is None:
            return original(self, inputs)
        if not modes.standard(self, inputs):
            _chainer_indexes(func)
            return original(self, inputs)
        gy, = inputs
        try:
            return pooling.max_backward(gy, workspace, func._in_shape, *_pool_args(func)),
        except binding.DnnlError as e:
            modes.refused('max_pooling_2d gradient', e)
            _chainer_indexes(func)
            return original(self, inputs)
    return forward_cpu


def _max_pool_with_indexes_forward(original):
    def forward_cpu(self, inputs):
        modes.start(self)
        if getattr(self.func, WORKSPACE, None) is not None:
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
        except binding.DnnlError as e:
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
        except binding.DnnlError as e:
            modes.refused('average_pooling_2d gradient', e)
            return original(self, inputs)
    return forward_cpu


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('max_pooling_2d', 'forward, gradient',
             ((_maxnd.MaxPoolingND, 'forward_cpu', _max_pool_forward),
              (_maxnd.MaxPoolingNDGrad, 'forward_cpu', _max_pool_grad_forward),
              (_maxnd.MaxPoolingNDWithIndexes, 'forward_cpu', _max_pool_with_indexes_forward)),
             "oneDNN's max pooling forward (training: its workspace records each window's "
             "choice, where Chainer keeps `indexes`) and backward; Chainer's `indexes` made "
             "from that workspace where asked (the gradient's own gradient)",
             'float32 (n, c, h, w): window, stride, pad, `cover_all`',
             LAYOUT + '; `return_indices=True`; 3-D pooling; NaN/inf inputs (oneDNN\'s '
             'maximum skips NaN); windows that read only padding (-inf in Chainer\'s, '
             "-FLT_MAX in oneDNN's)"),
    Replaced('average_pooling_2d', 'forward, gradient',
             ((_avg2d.AveragePooling2D, 'forward_cpu', _avg_pool_forward),
              (_avg2d.AveragePooling2DGrad, 'forward_cpu', _avg_pool_grad_forward)),
             "oneDNN's average pooling, padding included (Chainer divides by the whole "
             'window)', 'float32 (n, c, h, w): window, stride, pad',
             LAYOUT + "; an empty output (Chainer's error)"),
]
