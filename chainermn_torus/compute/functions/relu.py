"""relu (forward, gradient) on numba's kernels (``compute.kernels.eltwise``): the replaced
forwards and their row of ``REPLACEMENTS``."""
import numpy
from chainer.functions.activation import relu as _relu

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions import common
from chainermn_torus.compute.functions.common import LAYOUT, Replaced
from chainermn_torus.compute.kernels import eltwise

__all__ = ['ROWS']


def _relu_forward(original):
    def forward_cpu(self, inputs):
        if not modes.start(self) or not modes.standard(self, inputs) or common.small(inputs[0]):
            return original(self, inputs)
        if not eltwise.available():
            modes.not_taken('relu (numba is not installed)')
            return original(self, inputs)
        self.retain_outputs((0,))
        return eltwise.relu(inputs[0]),
    return forward_cpu


def _relu_grad_forward(original):
    def forward_cpu(self, inputs):
        if (not modes.start(self) or not modes.standard(self, inputs) or common.small(inputs[0])
                or self.b.dtype != numpy.float32 or self.b.shape != inputs[0].shape
                or not eltwise.available()):
            return original(self, inputs)
        gx, finite = eltwise.relu_grad(self.b, inputs[0])
        if not finite and modes.numpy_reports():
            return original(self, inputs)  # numpy says what it says (modes.numpy_reports)
        return gx,
    return forward_cpu


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('relu', "forward, gradient; on numba's kernels",
             ((_relu.ReLU, 'forward_cpu', _relu_forward),
              (_relu.ReLUGrad2, 'forward_cpu', _relu_grad_forward)),
             "numba's kernels with numpy's arithmetic (not oneDNN's eltwise: it turns NaN "
             'into 0)', 'float32, any shape, 0-d included',
             LAYOUT + "; arrays under 4,096 elements (Chainer's numpy is as fast there); "
             'machines without numba'),
]
