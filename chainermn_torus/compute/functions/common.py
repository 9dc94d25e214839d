"""What the replaced functions share: a row of ``REPLACEMENTS``, the cases every row leaves to
Chainer, the size under which Chainer's numpy is as fast, the bfloat16 copies a forward keeps
for its backward (convolution and linear)."""
import collections

import chainer

from chainermn_torus.compute.kernels import eltwise
from chainermn_torus.compute.onednn import copies

__all__ = ['Replaced', 'LAYOUT', 'small', 'COPIES', 'keep_copies', 'with_copies']

# One row per Chainer function replaced (``replacements.table()`` is docs/compute.md's table):
# function: as Chainer's users call it; said: its words in the start-up line; patches:
# (Chainer's class, the method replaced, the maker of the replacement); by: what computes
# it; takes: the cases computed here; left: the cases left to Chainer's code, and why.
Replaced = collections.namedtuple('Replaced', 'function said patches by takes left')

LAYOUT = 'other dtypes and memory layouts (oneDNN is used for float32, standard layout)'


def small(array):
    return array.size < eltwise.SMALL


COPIES = '_chainermn_torus_copies'  # a bf16 convolution's or linear's copies of x and W


def keep_copies(node):
    """The copies a bf16 forward keeps for its backward (none where nothing will be
    differentiated)."""
    if not chainer.config.enable_backprop:
        return None
    kept = node.__dict__[COPIES] = copies.Copies(keep=('src', 'weights'))
    return kept


def with_copies(original):
    # The two gradients find the forward's bfloat16 copies of x and W, the first keeps
    # its copy of gy for the second (compute.onednn.copies); all dropped when the backward ends.
    def backward(self, indexes, grad_outputs):
        kept = self.__dict__.pop(COPIES, None)
        if kept is None:
            return original(self, indexes, grad_outputs)
        kept.keep = frozenset(('diff_dst',))
        return copies.during(lambda: original(self, indexes, grad_outputs), kept)
    return backward
