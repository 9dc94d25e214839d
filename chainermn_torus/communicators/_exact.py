"""The exact sum's packed buffer (``exact_sum=True``): gradients travel as 64-bit integers on
a grid per array (``algorithms.fixed_point``), so the sum is exact and its bits do not
depend on the rank count, the grid, the algorithm or the order in which MPI adds.

The torus engine runs its phases on this buffer as on any other: its dtype is int64 (MPI's
``MPI_INT64_T`` sum, in messages, in rsap's accumulate mode and in the node-shared rows),
and nothing divides after the sum. What differs is at both ends of a call:

* before packing, the scales: each array's largest magnitude on this rank, then one
  all-reduce (MAX) of one float64 per array over every rank (``find_scales``): for the whole
  model, or a bucket's arrays as overlap averages them;
* the packing encodes instead of copying (``send_source``: always packed, never sent from a
  gradient);
* after the sum, ``finish`` decodes the integers into ``means`` (the model's float type),
  which the gradients then view, as they view an ordinary buffer.

``terms`` is the number of gradients summed (the mean divides by it; the headroom is sized
for it): the rank count, or the job's virtual ranks (``algorithms.virtual_ranks``), where a
process adds the terms of the virtual ranks it holds (``more``: their gradient sets) into its
integers before the sum over processes. numba's kernels (``_exact_kernels``) where numba is
installed, else ``fixed_point``'s numpy functions: the same bits.
"""
import numpy
from mpi4py import MPI

from chainermn_torus.algorithms import fixed_point
from chainermn_torus.communicators._packing import PackedBuffer, transfer_dtype
from chainermn_torus.runtime.cpu import jit

__all__ = ['ExactBuffer', 'WIRE']

WIRE = numpy.dtype(numpy.int64)   # what the exact sum travels and is summed in
# A grid scale beyond this is out of float64's range as a factor 2^s (a float64 model's
# gradients of 1e-300): such arrays take numpy's ldexp, which scales without the factor.
_FACTOR_LIMIT = 1000


def _kernels():
    if not jit.available():
        return None
    from chainermn_torus.communicators import _exact_kernels
    return _exact_kernels


class ExactBuffer(PackedBuffer):
    """A PackedBuffer of int64 (``layout.dtype``) with the float ``means`` it decodes into.

    Args (beyond PackedBuffer's, whose ``prescaled`` is always False here):
        terms: the number of gradients in the sum.
    """

    def __init__(self, layout, segment_elems=0, *, terms, **strategies):
        super().__init__(layout, segment_elems, direct_min_elems=None, **strategies)
        self.terms = int(terms)
        fixed_point.headroom_bits(self.terms)   # a count out of range is refused here
        self._means = numpy.empty(layout.size, transfer_dtype([e[2] for e in layout.entries]))
        n = len(layout.entries)
        self.scales = numpy.zeros(n, numpy.int32)
        self._largest = numpy.zeros(n, numpy.float64)
        self._found = numpy.zeros(n, numpy.float64)
        self._kernels = _kernels()
        # The gradient sets of the other virtual ranks this process holds, for one call:
        # each a sequence of arrays (None: zeros) in the layout's order (the engine sets it).
        self.more = ()

    @property
    def means(self):
        """The decoded means, in the model's float type (the gradients view them)."""
        return self._means

    def sum_divisor(self, size):
        return 1   # ``finish`` divides, by ``terms``

    # --- before packing --------------------------------------------------------------------------
    def find_scales(self, named_params, first, last, allreduce):
        """The scales of arrays [first, last): the largest magnitude over every rank, by one
        ``allreduce`` (mpi4py's Allreduce signature) of MAX."""
        mine, found = self._largest[first:last], self._found[first:last]
        for i in range(first, last):
            grads = [named_params[i][1].grad] + [more[i] for more in self.more]
            mine[i - first] = max((self._top(g) for g in grads if g is not None and g.size),
                                  default=0.0)
        if last > first:
            # MPI's MAX of a NaN and a number depends on the order of its operands (a
            # NaN on one rank was dropped by a non-blocking all-reduce): sent as infinity,
            # which every MAX keeps, and which makes the array's scale NOT_FINITE anyway.
            mine[numpy.isnan(mine)] = numpy.inf
            allreduce([mine, MPI.DOUBLE], [found, MPI.DOUBLE], op=MPI.MAX)
            self.scales[first:last] = fixed_point.scales(found, self.terms)

    def _top(self, grad):
        flat = grad.reshape(-1)
        if self._kernels is not None and flat.flags.c_contiguous \
                and flat.dtype in (numpy.float32, numpy.float64):
            return self._kernels.largest(flat)
        top = numpy.max(numpy.abs(flat))
        return float(top)   # NaN where a value is NaN: numpy's max keeps it

    # --- packing ---------------------------------------------------------------------------------
    def send_source(self, named_params, segment, scale=None):
        """Encode the segment's values into the buffer (always packed: None)."""
        lo, hi, _ = segment
        offs = self.layout.offsets
        first = int(numpy.searchsorted(offs, lo, side='right')) - 1
        last = int(numpy.searchsorted(offs, hi, side='left'))
        for i in range(first, last):
            a, b = max(lo, int(offs[i])), min(hi, int(offs[i + 1]))
            if a >= b:
                continue
            dst, s = self.array[a:b], int(self.scales[i])
            grads = [named_params[i][1].grad] + [more[i] for more in self.more]
            added = False   # the first term is written, the others added
            for grad in grads:
                if grad is not None:
                    self._encode(grad.reshape(-1)[a - offs[i]:b - offs[i]], s, dst, added)
                    added = True
            if not added:
                dst[...] = 0   # zero_fill: an unused parameter contributes zeros
        return None

    def _encode(self, src, s, dst, add):
        """dst = src on the grid, or dst += it."""
        k = self._kernels
        if k is not None and s != fixed_point.NOT_FINITE and abs(s) < _FACTOR_LIMIT \
                and src.flags.c_contiguous and src.dtype in (numpy.float32, numpy.float64):
            (k.encode_add if add else k.encode)(src, numpy.ldexp(1.0, s), dst)
        elif add:
            dst += fixed_point.encode(src, s)
        else:
            fixed_point.encode(src, s, out=dst)

    # --- after the sum ---------------------------------------------------------------------------
    def finish(self):
        """Decode every array's integer sum into ``means``: its mean over ``terms``."""
        offs, k = self.layout.offsets, self._kernels
        terms = float(self.terms)
        for i in range(len(self.layout.entries)):
            lo, hi = int(offs[i]), int(offs[i + 1])
            if lo == hi:
                continue
            s, total, out = int(self.scales[i]), self.array[lo:hi], self._means[lo:hi]
            if k is not None and s != fixed_point.NOT_FINITE and abs(s) < _FACTOR_LIMIT:
                k.decode(total, numpy.ldexp(1.0, -s), terms, out)
            else:
                fixed_point.decode(total, s, self.terms, out=out)
