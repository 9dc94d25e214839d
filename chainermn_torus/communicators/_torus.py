"""The shape shared by rsaa and rsap: reduce-scatter, column all-reduce, divide, gather.

Each segment of n elements is split into a main part of M equal chunks (n - n % M elements)
and a tail of fewer than M elements. Equal chunks let MPI use its block collectives
(MPI_Reduce_scatter_block, in-place MPI_Allgather), which MPICH runs far faster than the
v-variants on shared memory (measured, 102 MB in 4 MiB segments: Allgatherv 12.1 ms at P=2
and 57.8 ms at P=4 against 2.7 ms and 10.8 ms for in-place Allgather). The tail, at most
M - 1 elements, is summed with one small MPI_Allreduce over all ranks.

The sums go through the buffer's reducer (``_reduction``), chosen when the buffer is made:
MPI's sum, or for a float16 buffer (``allreduce_grad_dtype=numpy.float16``) the all-to-all
based one of ``_half``. The gather phase only moves bytes and is the same for both.

With ``shm`` (rows inside nodes, float32/float64) the row phases read the peers' buffers in a
shared-memory window instead (``_shm``); only the column all-reduce sends messages.
"""
import numpy

from chainermn_torus.runtime import timeline as _timeline
from chainermn_torus.communicators import _dtypes, _packing
from chainermn_torus.communicators._averaging import divide_by_size
from chainermn_torus.communicators._shm import NodeBuffers, rows_within_nodes
from chainermn_torus.errors import ConfigError

_SHM_CHOICES = (None, True, False)


class TorusPhases(object):
    """Mixin for a TorusCommunicatorBase with a grid. Subclasses define ``_row_gather``.

    The phase steps are private and prefixed by the grid direction they run in: ChainerMN's
    public ``gather(x, root)``, ``allreduce(x)`` and friends live on the same object, and a
    phase named ``gather`` once hid ChainerMN's and broke ``chainermn.functions``
    (tests/communicators/test_chainermn_api.py guards against it).
    """

    _chunk_scratch = None
    shm = False
    gather_phase = 'allgather'  # the timeline's name for phase 3

    def _setup_shm(self, shm, wanted_by_default=True):
        """Resolve the ``shm`` option: None = on when every row lies inside one node.

        ``wanted_by_default`` False (an option that needs the message phases was given)
        keeps the default off.
        """
        if shm not in _SHM_CHOICES:
            raise ConfigError('chainermn_torus: shm must be None (on where the grid rows lie '
                              'inside nodes), True or False, got {!r}'.format(shm))
        self._options['shm'] = shm
        if shm is False or self.grid.M == 1 or (shm is None and not wanted_by_default):
            self.shm = False
            return
        inside = rows_within_nodes(self.grid.row_comm, self.mpi_comm)
        if shm and not inside:
            raise ConfigError(
                'chainermn_torus: shm=True needs every grid row inside one node, but grid '
                '(M, N) = {} puts ranks of different nodes in one row ({} ranks per node on '
                'this rank\'s node); use M = ranks per node or shm=False'.format(
                    self.grid.shape, self.intra_size))
        self.shm = inside

    def _shm_buffer(self, layout, segment_elems):
        """A PackedBuffer in a node-shared window, or None where shm does not apply."""
        if not self.shm or layout.size == 0 or _dtypes.is_half(layout.dtype):
            return None  # float16 and bfloat16 have no MPI sum: they keep the message phases
        node = NodeBuffers(self.grid.row_comm, layout.size, layout.dtype, self.progress,
                           purpose=self.shm_purpose)
        return _packing.PackedBuffer(layout, segment_elems, array=node.array, memory=node)

    def _end_call(self, buf):
        if isinstance(buf.memory, NodeBuffers):
            buf.memory.barrier()

    def _split(self, buf, lo, hi):
        """(divisor, main, c): main = the segment's M equal chunks of c elements; the rest,
        fewer than M elements, is the tail. The divisor is 1 when packing already scaled."""
        M = self.grid.M
        main = (hi - lo) - (hi - lo) % M
        return (1 if buf.prescaled else self.size), main, main // M

    def _mean_segment_shm(self, buf, lo, hi, src):
        seg, node = buf.array[lo:hi], buf.memory
        divisor, main, c = self._split(buf, lo, hi)
        if c:
            with _timeline.phase('reduce (shm)'):
                chunk = node.reduce_in_turns(seg if src is None else src, lo, c)
            with _timeline.phase('allreduce'):
                self._column_allreduce(chunk, None, buf.reducer)
                divide_by_size(chunk, divisor)
            with _timeline.phase('gather (shm)'):
                node.barrier()  # every chunk is final
                node.gather(lo, c)
        if main < hi - lo:
            with _timeline.phase('tail'):
                self._tail_allreduce(seg[main:], None if src is None else src[main:],
                                     buf.reducer, divisor)

    def _mean_segment(self, buf, lo, hi, src):
        if isinstance(buf.memory, NodeBuffers):
            return self._mean_segment_shm(buf, lo, hi, src)
        seg, reducer = buf.array[lo:hi], buf.reducer
        divisor, main, c = self._split(buf, lo, hi)
        M, pos = self.grid.M, self.grid.pos
        if c:
            part, part_src = seg[:main], None if src is None else src[:main]
            if M > 1:
                with _timeline.phase('reduce_scatter'):
                    chunk, chunk_src = self._row_reduce_scatter(part, part_src, buf, lo), None
            else:
                chunk, chunk_src = part, part_src  # a row of one: nothing to scatter
            with _timeline.phase('allreduce'):
                self._column_allreduce(chunk, chunk_src, reducer)
                # Divide on 1/M of the segment, writing the mean straight to its place.
                divide_by_size(chunk, divisor, out=seg[pos * c:(pos + 1) * c])
            with _timeline.phase(self.gather_phase):
                self._row_gather(buf, lo, c)
        if main < hi - lo:
            with _timeline.phase('tail'):
                self._tail_allreduce(seg[main:], None if src is None else src[main:],
                                     reducer, divisor)

    def _row_reduce_scatter(self, part, src, buf, lo):
        """Phase 1: the row sum of this position's chunk of ``src`` (or ``part``).

        Returns the chunk, in a scratch array reused across calls (rsap's Accumulate variant
        returns it in place in ``buf``, at segment offset ``lo``).
        """
        c = part.size // self.grid.M
        scratch = self._chunk_scratch
        if scratch is None or scratch.dtype != part.dtype or scratch.size < c:
            scratch = self._chunk_scratch = numpy.empty(c, dtype=part.dtype)
        chunk = scratch[:c]
        return buf.reducer.reduce_scatter(self.grid.row_comm, part if src is None else src,
                                          chunk)

    def _column_allreduce(self, chunk, src, reducer):
        """Phase 2: sum the chunk (read from ``src`` if given) over the column (N ranks)."""
        reducer.allreduce(self.grid.col_comm, chunk, src)

    def _tail_allreduce(self, tail, src, reducer, divisor):
        reducer.sum_small(self.mpi_comm, tail, src)
        divide_by_size(tail, divisor)

    def _row_gather(self, buf, lo, c):
        """Phase 3: every position gets every chunk of buf.array[lo:lo + M*c]."""
        raise NotImplementedError
