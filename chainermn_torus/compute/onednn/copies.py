"""The bfloat16 copies a convolution's steps share, so that each array is converted once.

In bf16 each step converts what it reads (its reorder from float32 into oneDNN's bfloat16
layout). A convolution reads its input x in the forward and again in the weights' gradient,
its weights W in the forward and again in the input's gradient, and gy in both gradients:
six conversions, where three are enough. The forward keeps its copies of x and W on its
node (``Copies(keep=...)``); while that node's backward runs, its two steps find them, and
the first keeps its copy of gy for the second. A copy is found by the array it was made
from (the same object, which a backward's retained inputs are) and used only where the
step asks for the very layout it was made in; the node drops them when its backward ends.
One forward's copy of W serves that call's input gradient where oneDNN asks for the same
layout there; its bfloat16 kernels often want the transposed blocking for that step, and W
is then converted again (weights are a small part of the bytes: ResNet-50's 25.6 M against
the activations of every layer, docs/compute.md, "bfloat16"). A cache across calls would
have to know of every write to the weights (an optimizer's, a snapshot's, a user's), which
nothing in Chainer announces: a copy lives from its forward to the end of its backward.
"""
import threading

import numpy

from chainermn_torus.compute.onednn import binding

__all__ = ['Copies', 'current', 'during']

_SCOPE = threading.local()


class Copies:
    """The copies one node's steps share: ``keep`` names the inputs a step keeps."""

    def __init__(self, keep=()):
        self.keep = frozenset(keep)
        self._made = {}  # id(array) -> (array, owner, md, buffer)
        self.reused = 0  # conversions saved (the tests read it)

    def find(self, array, md):
        """The buffer of ``array``'s copy in layout ``md``, or None."""
        entry = self._made.get(id(array))
        if entry is None or entry[0] is not array or not binding.md_equal(entry[2], md):
            return None
        self.reused += 1
        return entry[3]

    def make(self, name, array, owner, md):
        """A new buffer for the copy of input ``name`` (``array``) in layout ``md``, kept
        where ``name`` is kept (``owner``, the step's primitive, keeps ``md`` alive), else
        None (the step converts into its scratch buffer)."""
        if name not in self.keep:
            return None
        buffer = numpy.empty(binding.md_size(md), numpy.uint8)
        self._made[id(array)] = (array, owner, md, buffer)
        return buffer

    def bytes(self):
        return sum(entry[3].nbytes for entry in self._made.values())


def current():
    """The copies of the node whose backward runs on this thread, or None."""
    return getattr(_SCOPE, 'copies', None)


def during(backward, copies):
    """Run ``backward()`` with ``copies`` current on this thread."""
    outer = current()
    _SCOPE.copies = copies
    try:
        return backward()
    finally:
        _SCOPE.copies = outer
