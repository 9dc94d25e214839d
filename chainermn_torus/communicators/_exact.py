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
* the engine decodes the integers into ``means`` (the model's float type) as soon as they are
  final (``decode``): with rows, each position decodes only its own chunk and phase 3 moves
  the float means (``gathered``: messages, rsap's put window, the node-shared rows' second
  window), so the exact sum moves 1.5x the bytes of the plain one, not 2x; rsap's accumulate
  mode sums into its int64 window and gathers that, then decodes all. The gradients then
  view ``means``, as they view an ordinary buffer.

``terms`` is the number of gradients summed (the mean divides by it; the headroom is sized
for it): the rank count, or the job's virtual ranks (``algorithms.virtual_ranks``), where a
process adds the terms of the virtual ranks it holds (``more``: their gradient sets) into its
integers before the sum over processes. numba's kernels (``_exact_kernels``) where numba is
installed, else ``fixed_point``'s numpy functions: the same bits.
"""
import numpy
from mpi4py import MPI

from chainermn_torus.algorithms import fixed_point
from chainermn_torus.communicators._packing import MPI_TYPES, PackedBuffer, transfer_dtype
from chainermn_torus.runtime.cpu import jit

__all__ = ['ExactBuffer', 'WIRE', 'means_dtype']

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

    def __init__(self, layout, segment_elems=0, *, terms, means=None, **strategies):
        super().__init__(layout, segment_elems, direct_min_elems=None, **strategies)
        self.terms = int(terms)
        fixed_point.headroom_bits(self.terms)   # a count out of range is refused here
        self._means = numpy.empty(layout.size, means_dtype(layout)) if means is None else means
        self._means_type = MPI_TYPES[self._means.dtype]
        # Phase 3 moves the means (the engine) where the rows have memory for them or need
        # none (messages); where their only memory is the integers', it moves those.
        rows = strategies.get('rows')
        self.gathers_means = rows is not None and (rows.means is not None or rows.array is None)
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

    @property
    def gathered(self):
        """What phase 3 moves: the means where ``gathers_means``, else the integers."""
        if self.gathers_means:
            return self._means, self._means_type
        return self.array, self.mpi_type

    def release(self):
        """PackedBuffer's; the means are forgotten too where they were the rows' window."""
        in_window = self.memory is not None and self.rows.means is not None
        super().release()
        if in_window:
            self._means = None

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
    def decode(self, lo, hi, source=None):
        """means[lo:hi] from the integer sums of elements [lo, hi): ``source`` (a chunk that
        holds them), else the buffer's."""
        source = self.array[lo:hi] if source is None else source
        offs, k = self.layout.offsets, self._kernels
        terms = float(self.terms)
        first = int(numpy.searchsorted(offs, lo, side='right')) - 1
        last = int(numpy.searchsorted(offs, hi, side='left'))
        for i in range(first, last):
            a, b = max(lo, int(offs[i])), min(hi, int(offs[i + 1]))
            if a >= b:
                continue
            s, total, out = int(self.scales[i]), source[a - lo:b - lo], self._means[a:b]
            if k is not None and s != fixed_point.NOT_FINITE and abs(s) < _FACTOR_LIMIT:
                k.decode(total, numpy.ldexp(1.0, -s), terms, out)
            else:
                fixed_point.decode(total, s, self.terms, out=out)


def means_dtype(layout):
    """The float type an exact buffer of ``layout`` decodes into: float64 if any array is."""
    return transfer_dtype([e[2] for e in layout.entries])

