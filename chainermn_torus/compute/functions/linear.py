"""linear (forward, both gradients) on oneDNN's inner product, with precision bf16 only
(``compute.onednn.linear``): the replaced forwards and their row of ``REPLACEMENTS``."""
import chainer
import numpy
from chainer.functions.connection import linear as _linear

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions import common
from chainermn_torus.compute.functions.common import LAYOUT, Replaced
from chainermn_torus.compute.onednn import binding, copies, linear

__all__ = ['ROWS', 'SHARE_COPIES']


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
            kept = common.keep_copies(self) if keeps else copies.current()
            try:
                out = compute(inputs, kept)
            except binding.DnnlError as e:
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


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('linear', 'forward, gradients; with precision bf16 only',
             ((_linear.LinearFunction, 'forward', _linear_forward),
              (_linear.LinearGradData, 'forward', _linear_grad_data_forward),
              (_linear.LinearGradWeight, 'forward', _linear_grad_weight_forward)),
             "oneDNN's inner product in bfloat16 (float32 sums, float32 arrays in and out)",
             'precision bf16: float32 2-D `x` and `W`, bias',
             "precision fp32 (Chainer's numpy and its BLAS: results as before); " + LAYOUT +
             "; the bias gradient (Chainer's sum)"),
]
# Its backward finds the bfloat16 copies its forward kept (compute.onednn.copies).
SHARE_COPIES = (_linear.LinearFunction,)
