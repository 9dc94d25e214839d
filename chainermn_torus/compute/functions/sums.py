"""The sums of arrays (Add, MultiAdd: residual additions, the backward's gradient sums) on
numba's kernels (``compute.kernels.eltwise``): the replaced forward and its row of
``REPLACEMENTS``."""
import numpy
from chainer.functions.math import basic_math as _basic_math

from chainermn_torus.compute import modes
from chainermn_torus.compute.functions import common
from chainermn_torus.compute.functions.common import Replaced
from chainermn_torus.compute.kernels import eltwise

__all__ = ['ROWS']


def _add_forward(original):
    # Add (``a + b``) and MultiAdd (``F.add``, the gradient sums): same-shape float32 arrays
    # summed on the rank's threads; broadcasting, other types and small arrays Chainer's.
    def forward(self, inputs):
        if (not modes.start(self) or len(inputs) < 2 or not eltwise.available()
                or common.small(inputs[0])
                or any(not isinstance(a, numpy.ndarray) or a.dtype != numpy.float32
                       or a.shape != inputs[0].shape for a in inputs)):
            return original(self, inputs)
        if type(self) is _basic_math.MultiAdd:
            self.len = len(inputs)  # what Chainer's forward records
        y, finite = eltwise.add(inputs)
        if not finite and modes.numpy_reports():
            return original(self, inputs)  # numpy says what it says (modes.numpy_reports)
        return y,
    return forward


# The rows of ``REPLACEMENTS`` (compute/replacements.py says what each field holds).
ROWS = [
    Replaced('the sums of arrays', "Add and MultiAdd: the residual additions and the "
             "backward pass's gradient sums; on numba's kernels",
             ((_basic_math.Add, 'forward', _add_forward),
              (_basic_math.MultiAdd, 'forward', _add_forward)),
             "numba's kernels on the rank's threads, the additions in Chainer's order (equal "
             "bit for bit; Chainer's numpy is one thread)", 'float32 arrays of one shape',
             "broadcasting; other dtypes; arrays under 4,096 elements; machines without numba"),
]
