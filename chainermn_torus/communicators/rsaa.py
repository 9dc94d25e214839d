"""rsaa: the 2D-torus all-reduce, Reduce-Scatter, All-reduce, All-gather (Tamura & Hanawa;
Mikami et al.), and the shape rsap shares with it.

On a grid of P = M x N ranks in rows of M (``_grid``), each segment of n elements is split
into a main part of M equal chunks of c = n // M elements and a tail of fewer than M:

  phase 1  reduce-scatter in the row: position j gets the row sum of chunk j;
  phase 2  all-reduce of that chunk in the column (N ranks), so it is the sum over all P
           ranks; then divide it by P, into its place (1/M of the segment, not all of it);
  phase 3  all-gather in the row: every position gets every chunk.

The tail, at most M - 1 elements, is summed with one small MPI_Allreduce over all ranks. A
row of one (M = 1) skips phases 1 and 3. Bytes per rank: phases 1 and 3 move (M-1)/M of the
segment each, phase 2 1/M of it. ``algorithms.torus`` describes the same schedule without
MPI (the planner and the simulator read it; tests/simulation checks them call for call).

Equal chunks let MPI use its block collectives (MPI_Reduce_scatter_block, in-place
MPI_Allgather), which MPICH runs far faster than the v-variants on shared memory (measured,
102 MB in 4 MiB segments: Allgatherv 12.1 ms at P=2 and 57.8 ms at P=4 against 2.7 ms and
10.8 ms for in-place Allgather).

Phases 1 and 3 are the buffer's *row phases* (``buf.rows``), made with the buffer and owning
the MPI state they need: here ``MessageRows`` (MPI_Reduce_scatter_block, MPI_Allgather),
rsap's put rounds (``rsap``, ``_rsap_modes``), or the ``shm`` variant, where every row lies
inside one node: reads of the peers' buffers in a node-shared window (``_shm.ShmRows``).
Phase 2 and the tail go through the buffer's reducer (``_reduction``): MPI's sum, or for a
float16 buffer the all-to-all based one of ``_half``.
"""
import contextlib

import numpy
from mpi4py import MPI

from chainermn_torus.communicators import _dtypes, _packing
from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._reduction import divide_by_size
from chainermn_torus.communicators._shm import ShmRows, rows_within_nodes
from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE

__all__ = ['RsaaCommunicator', 'MessageRows']

_SHM_CHOICES = (None, True, False)
_NO_SPAN = contextlib.nullcontext()


def _phase(timeline, name):
    """The phase as a span of --timeline's trace (runtime.timeline), else nothing."""
    return _NO_SPAN if timeline is None else timeline.span(name)


class MessageRows:
    """Phases 1 and 3 by messages in the row: MPI_Reduce_scatter_block into a scratch chunk
    (reused across calls), then the divided chunk, already at its offset, gathered by
    in-place MPI_Allgather. Made per buffer, as every row phases' object is; owns nothing
    MPI must free."""

    scatter_name, gather_name = 'reduce_scatter', 'allgather'

    def __init__(self, row_comm, progress):
        self.row_comm, self.progress = row_comm, progress
        self.scratch = None

    def reduce_scatter(self, part, src, buf, lo):
        """Phase 1: the row sum of this position's chunk of ``src`` (or ``part``)."""
        c = part.size // self.row_comm.size
        if self.scratch is None or self.scratch.size < c:
            self.scratch = numpy.empty(c, dtype=part.dtype)
        return buf.reducer.reduce_scatter(self.row_comm, part if src is None else src,
                                          self.scratch[:c])

    def gather(self, buf, lo, c):
        """Phase 3: every position gets every chunk of buf.array[lo:lo + M*c]."""
        self.progress(self.row_comm, 'Allgather', MPI.IN_PLACE,
                      [buf.array[lo:lo + self.row_comm.size * c], buf.mpi_type])

    def end_call(self):
        pass

    def free(self):
        pass


class RsaaCommunicator(TorusCommunicatorBase):
    """rsaa; ``shm`` None (default: the ``shm`` variant where every grid row lies inside one
    node), True (required: refused where a row spans nodes) or False (the messages)."""

    name = 'rsaa'
    base_variant = 'rsaa'  # the variant it runs (algorithms.variants) without shm

    @property
    def variant(self):
        """The variant it runs, fixed when it is made: shm where its rows lie in node shared
        memory (``shm``), else its own."""
        return 'shm' if self.shm else self.base_variant

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None,
                 shm=None, settings=None):
        super().__init__(mpi_comm, grid=grid, segment_size=segment_size,
                         allreduce_grad_dtype=allreduce_grad_dtype, settings=settings)
        self._setup_shm(shm)

    # --- the algorithm: phases 1-3 of one segment ----------------------------------------
    def _mean_segment(self, buf, lo, hi, src):
        seg, rows, reducer, tl = buf.array[lo:hi], buf.rows, buf.reducer, STATE.timeline
        M, pos = self.grid.M, self.grid.pos
        divisor = 1 if buf.prescaled else self._size  # 1: the packing already scaled
        main = (hi - lo) - (hi - lo) % M
        c = main // M
        if c:
            part, part_src = seg[:main], None if src is None else src[:main]
            if M > 1:
                with _phase(tl, rows.scatter_name):
                    chunk, chunk_src = rows.reduce_scatter(part, part_src, buf, lo), None
            else:
                chunk, chunk_src = part, part_src  # a row of one: nothing to scatter
            with _phase(tl, 'allreduce'):
                reducer.allreduce(self.grid.col_comm, chunk, chunk_src)
                divide_by_size(chunk, divisor, out=seg[pos * c:(pos + 1) * c])
            if M > 1:
                with _phase(tl, rows.gather_name):
                    rows.gather(buf, lo, c)
        if main < hi - lo:
            with _phase(tl, 'tail'):
                tail = seg[main:]
                reducer.sum_small(self.mpi_comm, tail, None if src is None else src[main:])
                divide_by_size(tail, divisor)

    def _end_call(self, buf):
        buf.rows.end_call()

    # --- the row phases each buffer gets --------------------------------------------------
    def _new_buffer(self, layout, segment_elems, **strategies):
        if self.shm and layout.size and not _dtypes.is_half(layout.dtype):
            # float16 and bfloat16 have no MPI sum: they keep the message phases.
            rows = ShmRows(self.grid.row_comm, layout.size, layout.dtype, self.progress,
                           purpose=self.shm_purpose)
            return _packing.PackedBuffer(layout, segment_elems, array=rows.node.array,
                                         memory=rows.node, rows=rows, **strategies)
        return self._message_buffer(layout, segment_elems, **strategies)

    def _message_buffer(self, layout, segment_elems, **strategies):
        """A buffer with the message phases (rsap: its window and put rounds)."""
        return super()._new_buffer(layout, segment_elems,
                                   rows=MessageRows(self.grid.row_comm, self.progress),
                                   **strategies)

    def _setup_shm(self, shm, wanted_by_default=True):
        """Resolve the ``shm`` option: None = on when every row lies inside one node.

        ``wanted_by_default`` False (an option that needs the message phases was given)
        keeps the default off.
        """
        if shm not in _SHM_CHOICES:
            raise ConfigError('chainermn_torus: shm must be None (on where the grid rows lie '
                              'inside nodes), True or False, got {!r}'.format(shm))
        self._options['shm'] = shm
        self.shm = False
        if shm is False or self.grid.M == 1 or (shm is None and not wanted_by_default):
            return
        inside = rows_within_nodes(self.grid.row_comm, self.mpi_comm)
        if shm and not inside:
            raise ConfigError(
                'chainermn_torus: shm=True needs every grid row inside one node, but grid '
                '(M, N) = {} puts ranks of different nodes in one row ({} ranks per node on '
                'this rank\'s node); use M = ranks per node or shm=False'.format(
                    self.grid.shape, self.intra_size))
        self.shm = inside

    def _describe_variant(self):
        return ', row phases in node shared memory (variant shm)' if self.shm else ''
