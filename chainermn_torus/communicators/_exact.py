"""The exact sum's packed buffer (``exact_sum=True``): gradients are summed as 64-bit integers
on a grid per array (``algorithms.fixed_point``), so the sum is exact and its bits do not
depend on the rank count, the grid, the algorithm or the order in which MPI adds.

The torus engine runs its phases on this buffer as on any other: its dtype is int64 (MPI's
``MPI_INT64_T`` sum, rsap's accumulate mode, the node-shared rows), and nothing divides
after the sum. What differs:

* before packing, the scales: each array's largest magnitude on this rank, then one
  all-reduce (MAX) of one float64 per array over every rank (``find_scales``): for the whole
  model, or a bucket's arrays as overlap averages them;
* the packing encodes (``send_source``); where phase 1 goes by messages (``position``), it
  leaves this position's own chunk to the reduce-scatter (``_exact_scatter``), and where each
  process holds one term the other blocks go as their float values (straight from the
  gradient a segment lies in, else packed): a block's receiver encodes it on the shared grid,
  as its sender would have (``encode_chunk``), so phase 1 moves the plain sum's bytes;
* the integers are decoded into ``means`` (the model's float type) as soon as they are final
  (``decode``): with rows, each position's own chunk; with a column too, each member's part
  of it after a reduce-scatter of the integers over the column, whose means are then
  all-gathered (``column_means``). Phase 3 moves the float means (``gathered``: messages,
  rsap's put window, the node-shared rows' second window); rsap's accumulate mode sums into
  its int64 window and gathers that, then decodes all. The gradients then view ``means``, as
  they view an ordinary buffer.

``terms`` is the number of gradients summed (the mean divides by it; the headroom is sized
for it): the rank count, or the job's virtual ranks (``algorithms.virtual_ranks``), where a
process adds the terms of the virtual ranks it holds (``more``: their gradient sets) into its
integers before the sum over processes. numba's kernels (``_exact_kernels``), else
``fixed_point``'s numpy functions: the same bits.
"""
import numpy
from mpi4py import MPI

from chainermn_torus.algorithms import fixed_point
from chainermn_torus.communicators._exact_scatter import RowScatter
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
        position: (M, pos, N): the row's length, this rank's place in it and the column's
            length, where phase 1 is the reducer's reduce-scatter (messages): the packing
            leaves the own chunk to it. None: every element is encoded by the packing (phase
            1 in a window, or no rows).
    """

    def __init__(self, layout, segment_elems=0, *, terms, means=None, position=None,
                 **strategies):
        super().__init__(layout, segment_elems, direct_min_elems=None, **strategies)
        self.terms = int(terms)
        fixed_point.headroom_bits(self.terms)   # a count out of range is refused here
        self._means = numpy.empty(layout.size, means_dtype(layout)) if means is None else means
        self.means_type = MPI_TYPES[self._means.dtype]
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
        self._column = None   # this member's part of phase 2's sums
        self._sources = {}    # segment start -> what its phase 1 sends (``sent_floats``)
        self.position = position
        self._named = None   # the call's gradients: the own chunk's terms are read from them
        # Phase 1 carries floats where every process holds one term (the receiver encodes
        # a block as its sender would), integers where a process sums several (``more``).
        self.sends_floats = position is not None and self.terms == position[0] * position[2]
        rows = strategies.get('rows')
        # The node-shared rows' peers read the floats from this buffer: always packed.
        self._packs_floats = rows is not None and rows.reads_peer_floats
        if position is not None and rows.phase1_by_reducer:
            self.reducer = RowScatter(self, self.reducer)

    @property
    def means(self):
        """The decoded means, in the model's float type (the gradients view them)."""
        return self._means

    @property
    def gathered(self):
        """What phase 3 moves: the means where ``gathers_means``, else the integers."""
        if self.gathers_means:
            return self._means, self.means_type
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
        """Encode the segment's values into the buffer (always packed: None), but for this
        position's chunk where the reduce-scatter adds it (``position``)."""
        lo, hi, _ = segment
        self._named = named_params
        own = self._own_chunk(lo, hi)
        if own is None:
            self._encode_range(named_params, lo, hi)
        elif self.sends_floats:
            if self.more:
                raise RuntimeError('chainermn_torus: an exact sum of one term a process was '
                                   'given more gradient sets')
            main = lo + self.position[0] * (own[1] - own[0])
            index = segment[2]   # the array the segment lies in, where it is a large one
            grad = None if index is None or self._packs_floats else named_params[index][1].grad
            if grad is not None and grad.dtype == self._means.dtype \
                    and grad.flags.c_contiguous:   # sent straight from the gradient
                start = lo - int(self.layout.offsets[index])
                self._sources[lo] = grad.reshape(-1)[start:start + main - lo]
            else:
                sent = self._sources[lo] = self.float_part(lo, main - lo)
                self._copy_floats(named_params, lo, own[0], sent, lo)
                self._copy_floats(named_params, own[1], main, sent, lo)
            self._encode_range(named_params, main, hi)   # the tail: MPI's integer sum
        else:
            self._encode_range(named_params, lo, own[0])
            self._encode_range(named_params, own[1], hi)
        return None

    def float_part(self, lo, n, array=None):
        """Where the float values of a segment starting at ``lo`` are packed: the segment's
        own bytes of the integer buffer (``array``: a node peer's), from their start (its
        tail's integers lie beyond them), as ``n`` elements of the means' type."""
        floats = (self.array if array is None else array).view(self._means.dtype)
        first = lo * (WIRE.itemsize // self._means.dtype.itemsize)
        return floats[first:first + n]

    def sent_floats(self, lo):
        """The float values of the main part of the segment starting at ``lo``, as the
        packing left them for the reduce-scatter: a slice of the gradient the segment lies
        in, or packed (``float_part``)."""
        return self._sources[lo]

    def _copy_floats(self, named_params, lo, hi, dst, base):
        """dst[lo - base:hi - base] = the gradients' values of elements [lo, hi) (zeros
        for an unused parameter)."""
        offs = self.layout.offsets
        for i, a, b in self.layout.pieces(lo, hi):
            grad = named_params[i][1].grad
            out = dst[a - base:b - base]
            if grad is None:
                out[...] = 0
            else:
                out[...] = grad.reshape(-1)[a - offs[i]:b - offs[i]]   # widening: exact

    def _own_chunk(self, lo, hi):
        """[a, b): this position's chunk of segment [lo, hi), as the engine cuts it; None
        without ``position`` or where the segment is all tail."""
        if self.position is None:
            return None
        M, pos = self.position[:2]
        c = ((hi - lo) - (hi - lo) % M) // M
        return (lo + pos * c, lo + (pos + 1) * c) if c else None

    def _encode_range(self, named_params, lo, hi, dst=None, base=0, add=False):
        """dst[lo - base:hi - base] (default: the buffer's [lo, hi)) = the integers of this
        process's terms of elements [lo, hi): the gradients and ``more`` (zeros for an
        unused parameter); ``add``: added to what is there."""
        offs = self.layout.offsets
        dst = self.array if dst is None else dst
        for i, a, b in self.layout.pieces(lo, hi):
            out, s = dst[a - base:b - base], int(self.scales[i])
            added = add   # the first term is written, the others added
            for grad in [named_params[i][1].grad] + [more[i] for more in self.more]:
                if grad is not None:
                    self._encode(grad.reshape(-1)[a - offs[i]:b - offs[i]], s, out, added)
                    added = True
            if not added:
                out[...] = 0   # zero_fill: an unused parameter contributes zeros

    def add_own(self, start, chunk):
        """chunk += the integers of elements [start, start + chunk.size) of this process's
        terms (the gradients of the call, and ``more``)."""
        self._encode_range(self._named, start, start + chunk.size, chunk, start, add=True)

    def encode_chunk(self, start, blocks, chunk, decode):
        """The sum of elements [start, start + c) from every process's float values: this
        process's own (its gradients) and the peers' ``blocks`` (M - 1 arrays of c, the
        means' type), each encoded on its array's grid and added as integers into ``chunk``;
        with ``decode`` (no column to sum over) straight on into the means."""
        offs, k, named = self.layout.offsets, self._kernels, self._named
        hi = start + len(blocks[0])
        dtype, terms = blocks[0].dtype, float(self.terms)
        for i, a, b in self.layout.pieces(start, hi):
            s, dst, means = int(self.scales[i]), chunk[a - start:b - start], self._means[a:b]
            values = [block[a - start:b - start] for block in blocks]
            grad = named[i][1].grad
            if grad is not None:
                own = grad.reshape(-1)[a - offs[i]:b - offs[i]]
                values.insert(0, own if own.dtype == dtype else own.astype(dtype))  # exact
            if k is None or s == fixed_point.NOT_FINITE or abs(s) >= _FACTOR_LIMIT \
                    or not all(v.flags.c_contiguous for v in values) \
                    or dtype not in (numpy.float32, numpy.float64):
                dst[...] = 0
                for v in values:
                    dst += fixed_point.encode(v, s)
                if decode:
                    fixed_point.decode(dst, s, self.terms, out=means)
                continue
            f, back = numpy.ldexp(1.0, s), numpy.ldexp(1.0, -s)
            if decode and len(values) == 2:
                k.mean2(values[0], values[1], f, back, terms, means)
                continue
            last_added = values.pop() if decode else None
            if not values:
                dst[...] = 0
            elif len(values) == 1:
                k.encode(values[0], f, dst)
            else:
                k.encode2(values[0], values[1], f, dst)
            for v in values[2:]:
                k.encode_add(v, f, dst)
            if decode:
                k.decode_add(last_added, f, dst, back, terms, means)

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
    def column_means(self, comm, chunk, start):
        """Phase 2 where phase 3 moves the means: the means of elements [start, start +
        chunk.size) from the rows' integer sums in ``chunk``, over the column ``comm``.
        Instead of an all-reduce of the integers (twice the plain phase 2's bytes), MPI's
        reduce-scatter of them, each member decoding its part, and an all-gather of the
        float means (1.5x); the last fewer than N elements by an all-reduce."""
        n, progress = chunk.size, self.reducer.progress
        N = comm.size
        sub = n // N if N > 1 else 0
        main = sub * N
        if sub:
            if self._column is None or self._column.size < sub:
                self._column = numpy.empty(sub, WIRE)
            mine, q = self._column[:sub], comm.rank
            progress(comm, 'Reduce_scatter_block', [chunk[:main], self.mpi_type],
                     [mine, self.mpi_type], op=MPI.SUM)
            self.decode(start + q * sub, start + (q + 1) * sub, mine)
            progress(comm, 'Allgather', MPI.IN_PLACE,
                     [self._means[start:start + main], self.means_type])
        if main < n:
            rest = chunk[main:]
            self.reducer.allreduce(comm, rest)
            self.decode(start + main, start + n, rest)

    def decode(self, lo, hi, source=None):
        """means[lo:hi] from the integer sums of elements [lo, hi): ``source`` (a chunk that
        holds them), else the buffer's."""
        source = self.array[lo:hi] if source is None else source
        k, terms = self._kernels, float(self.terms)
        for i, a, b in self.layout.pieces(lo, hi):
            s, total, out = int(self.scales[i]), source[a - lo:b - lo], self._means[a:b]
            if k is not None and s != fixed_point.NOT_FINITE and abs(s) < _FACTOR_LIMIT:
                k.decode(total, numpy.ldexp(1.0, -s), terms, out)
            else:
                fixed_point.decode(total, s, self.terms, out=out)


def means_dtype(layout):
    """The float type an exact buffer of ``layout`` decodes into: float64 if any array is."""
    return transfer_dtype([e[2] for e in layout.entries])

