"""rsap: Reduce-Scatter, All-reduce, Put (seed 003): rsaa with the last phase as MPI-3 RMA.

For each segment of the packed buffer (the shared steps 1-3 live in ``_torus``):
  1. reduce-scatter in the row, 2. all-reduce of the 1/M chunk in the column, 3. divide the
  chunk by P and store it at its place in the result buffer (the packed buffer itself), then
  4. put rounds: recursive doubling in the row. In round i, position q puts every chunk it
     holds into position q XOR 2^i's window at the same offset, so nothing is copied on the
     receiving side. MPI_Win_fence closes each round.

One window covers the packed buffer, whose memory MPI allocates (MPI_Win_allocate); it is
created with the buffer (creation is collective and costly) and reused on every call until
the model's layout changes.

M need not be a power of two: the schedule (``algorithms.rsap.put_rounds``, which the
planner and the simulator read too) adds two rounds for the positions beyond the largest
power of two.

Variants (options, see the class; each a strategy of ``_rsap_modes``): ``sync='notify'`` or
``'pscw'`` synchronises each round with its partners only; ``reduce_scatter='accumulate'``
does phase 1 one-sided too; ``shm`` (the default where rows lie inside nodes) replaces
phases 1 and 4 by shared-memory reads (``_shm``).
"""

import numpy

from chainermn_torus.algorithms.rsap import put_rounds
from chainermn_torus.communicators import _packing
from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._rsap_modes import REDUCE_SCATTERS, SYNCS
from chainermn_torus.communicators._torus import TorusPhases
from chainermn_torus.communicators._window import PutWindow

__all__ = ['RsapCommunicator']


def _window_of(buf):
    """The MPI window of a buffer whose memory is a PutWindow's, else None."""
    return buf.memory.win if isinstance(buf.memory, PutWindow) else None


DEFAULT_SYNC = 'fence'
DEFAULT_REDUCE_SCATTER = 'collective'


def _choice(name, value, choices, default):
    if value is None:
        return default
    if value not in choices:
        raise ValueError('chainermn_torus: rsap {} must be one of {}, got {!r}'.format(
            name, ', '.join(repr(c) for c in choices), value))
    return value


class RsapCommunicator(TorusPhases, TorusCommunicatorBase):
    """rsap; options beyond rsaa's (``_rsap_modes`` says what each does):

    sync: how the put rounds are separated: 'fence' (seed 003), 'notify' (partners only:
        flush and a zero-byte message) or 'pscw' (post/start/complete/wait, experimental).
    reduce_scatter: phase 1 as 'collective' (MPI_Reduce_scatter_block) or 'accumulate'
        (MPI_Accumulate into the row partners' windows).
    shm: as rsaa's; giving ``sync`` or ``reduce_scatter`` keeps the default (None) off,
        since with shm there are no puts.

    Each mode is a strategy object made once here; it owns its MPI state and frees it in
    ``finalize``.
    """

    name = 'rsap'
    gather_phase = 'put'
    _sync = _reduce_scatter = None  # the modes' strategies, made in __init__

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None,
                 shm=None, sync=None, reduce_scatter=None):
        super(RsapCommunicator, self).__init__(mpi_comm, grid=grid, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype)
        self.sync = _choice('sync', sync, tuple(SYNCS), DEFAULT_SYNC)
        self.reduce_scatter_mode = _choice('reduce_scatter', reduce_scatter,
                                           tuple(REDUCE_SCATTERS), DEFAULT_REDUCE_SCATTER)
        self._options.update(sync=sync, reduce_scatter=reduce_scatter)
        explicit = sync is not None or reduce_scatter is not None
        if shm and explicit:
            raise ValueError(
                'chainermn_torus: rsap shm=True has no put or reduce-scatter messages, so '
                'sync={!r} / reduce_scatter={!r} do not apply; leave them out or set '
                'shm=False'.format(sync, reduce_scatter))
        self._setup_shm(shm, wanted_by_default=not explicit)
        if REDUCE_SCATTERS[self.reduce_scatter_mode].needs_mpi_sum \
                and self.allreduce_grad_dtype is not None \
                and self.allreduce_grad_dtype == numpy.float16:
            raise ValueError('chainermn_torus: rsap reduce_scatter=\'accumulate\' needs an MPI '
                             'sum, which float16 has not; use allreduce_grad_dtype float32 or '
                             'reduce_scatter=\'collective\'')
        self._sync = SYNCS[self.sync](self, put_rounds(self.grid.M))
        self._reduce_scatter = REDUCE_SCATTERS[self.reduce_scatter_mode](self, self._sync)

    def _describe_variant(self):
        if self.shm:
            return super(RsapCommunicator, self)._describe_variant()
        return ', puts synchronised by {}, reduce-scatter by {}'.format(
            self._sync.describe, self._reduce_scatter.describe)

    def _row_reduce_scatter(self, part, src, buf, lo):
        return self._reduce_scatter(part, src, buf, lo, _window_of(buf))

    def _collective_reduce_scatter(self, part, src, buf, lo):
        return super(RsapCommunicator, self)._row_reduce_scatter(part, src, buf, lo)

    def _row_gather(self, buf, lo, c):
        """Phase 4 as put rounds: chunks go straight into the partners' windows."""
        if self.grid.M > 1:
            self._sync.put_rounds(_window_of(buf), buf.array, lo, c, buf.mpi_type)

    def finalize(self):
        for mode in (self._reduce_scatter, self._sync):
            if mode is not None:
                mode.free()
        super(RsapCommunicator, self).finalize()

    def _new_buffer(self, layout, segment_elems):
        buf = self._shm_buffer(layout, segment_elems)
        if buf is not None:
            return buf
        if self.grid.M == 1 or layout.size == 0:
            return super(RsapCommunicator, self)._new_buffer(layout, segment_elems)
        # The buffer's memory is the window's (see _window: a Put to the same node is then
        # one memcpy); 'notify' holds one passive epoch for the window's life.
        window = PutWindow(self.grid.row_comm, layout.size, layout.dtype,
                           passive=self._sync.passive)
        buf = _packing.PackedBuffer(layout, segment_elems, array=window.array, memory=window)
        # Freed only by finalize() or buffer eviction, which every rank reaches at the same
        # point. Never from a garbage-collection finalizer: MPI_Win_free is collective, and
        # the collector runs at different moments on different ranks, so a free called from
        # it met other collectives on the other ranks and deadlocked (seen, 2 runs in 12 at
        # P=3). A communicator dropped without finalize() keeps its window until exit.
        return buf
