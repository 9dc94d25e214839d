"""local_response_normalization (forward, gradient) on oneDNN's LRN (``compute.onednn.lrn``):
the replaced forwards and their row of ``REPLACEMENTS``."""
from chainer.functions.normalization import local_response_normalization as _lrn

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions.common import LAYOUT, Replaced
from chainermn_torus.compute.onednn import binding, lrn

__all__ = ['ROWS']


class _LrnWorkspace:
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
        except binding.DnnlError as e:
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


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('local_response_normalization', 'forward, gradient',
             ((_lrn.LocalResponseNormalization, 'forward_cpu', _lrn_forward),
              (_lrn.LocalResponseNormalizationGrad, 'forward_cpu', _lrn_grad_forward)),
             "oneDNN's LRN across channels; its workspace reaches the gradient as Chainer's "
             '`indexes`', 'float32 (n, c, h, w): any `n` (an even `n` is Chainer\'s window of '
             '`n + 1` channels, oneDNN\'s too), `k`, `alpha`, `beta`',
             LAYOUT + '; other ranks of arrays; `n < 1` (oneDNN refuses it, Chainer computes '
             'the middle channel alone)'),
]
