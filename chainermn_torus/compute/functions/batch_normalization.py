"""batch_normalization (training) and fixed_batch_normalization on numba's kernels or oneDNN
(``compute.onednn.batchnorm``): the replaced forwards and their rows of ``REPLACEMENTS``."""
import numpy

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions.common import LAYOUT, Replaced
from chainermn_torus.compute.onednn import batchnorm
from chainermn_torus.runtime.chainer_glue import chainer_private

# Chainer's implementation seam for batch normalization (private:
# runtime.chainer_glue.chainer_private).
_bn = chainer_private.batch_normalization_internals()

__all__ = ['ROWS']


class _OneDnnBatchNormalizationImpl(_bn._BatchNormalizationImpl):
    """Chainer's batch normalization in training, computed by oneDNN
    (``compute.onednn.batchnorm``).
    The variance reaches the backward through ``forward_data``: Chainer passes its own
    ``var`` only to iDeep's class."""

    chainers = None  # Chainer's own, where a statistic came out not finite

    def forward(self, axis, gamma, x, x_layout, xp, expander, beta, eps, decay, running_mean,
                running_var):
        y, mean, var = batchnorm.forward(x, gamma, beta, eps,
                                         any_order=modes.precision() == 'bf16')
        if not (modes.finite(mean) and modes.finite(var)) and modes.numpy_reports():
            # an infinity or NaN in x (or squares past float32): numpy says it in Chainer's
            # (modes.numpy_reports); checked on the per-channel statistics, not on y
            self.chainers = _bn.GeneralBatchNormalizationImpl()
            return self.chainers.forward(axis, gamma, x, x_layout, xp, expander, beta, eps,
                                         decay, running_mean, running_var)
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
        chainers = self.chainers
        if chainers is None:
            gx, ggamma, gbeta = batchnorm.backward(x, gy, mean, forward_data, gamma, eps,
                                                   any_order=modes.precision() == 'bf16')
            if (modes.finite(ggamma) and modes.finite(gbeta)) or not modes.numpy_reports():
                return gx, None, ggamma, gbeta
            chainers, forward_data = _bn.GeneralBatchNormalizationImpl(), None
        return chainers.backward(axis, gamma, gy, x, x_layout, xp, expander, mean, inv_std, eps,
                                 var, forward_data)


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


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('batch_normalization', "training: forward, gradients; on numba's kernels where "
             'numba is installed',
             ((_bn.BatchNormalization, 'forward', _bn_forward),),
             "numba's kernels (statistics, normalization, gradients), or oneDNN's batch "
             'normalization where numba is not installed: one more implementation class of '
             "Chainer's, chosen per call",
             'float32 (n, c, h, w) and (n, c) normalised over every axis but 1; the running '
             'statistics updated as Chainer does (decay, the unbiased variance)',
             LAYOUT + "; other axes or shapes; an `axis` given as a list (Chainer's "
             "TypeError); a caller's own implementation selector"),
    Replaced('fixed_batch_normalization', 'forward',
             ((_bn.FixedBatchNormalization, 'forward', _fixed_bn_forward),),
             "numba's kernel, or oneDNN's batch normalization inference",
             'the same shapes, with given statistics (evaluation)',
             LAYOUT + "; its gradient (recomputed as after Chainer's iDeep forward)"),
]
