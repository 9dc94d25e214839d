"""rsap with MPI: the torus phases of ``_torus`` (row reduce-scatter, column all-reduce of
the 1/M chunk, divide into place), then the put rounds of ``algorithms.rsap`` (the algorithm
and its schedule, described once there) into the row partners' windows at the same offset,
so nothing is copied on the receiving side.

One window covers the packed buffer, whose memory MPI allocates (MPI_Win_allocate); it is
created with the buffer (creation is collective and costly) and reused on every call until
the model's layout changes. The options are strategies of ``_rsap_modes``; ``shm`` (the
default where rows lie inside nodes) replaces phases 1 and 4 by shared-memory reads.
"""


from chainermn_torus.algorithms.rsap import put_rounds
from chainermn_torus.communicators import _dtypes, _packing
from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._rsap_modes import REDUCE_SCATTERS, SYNCS
from chainermn_torus.communicators._torus import TorusPhases
from chainermn_torus.communicators._window import PutWindow
from chainermn_torus.errors import ConfigError

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
        raise ConfigError('chainermn_torus: rsap {} must be one of {}, got {!r}'.format(
            name, ', '.join(repr(c) for c in choices), value))
    return value


class RsapCommunicator(TorusPhases, TorusCommunicatorBase):
    """rsap; options beyond rsaa's: ``sync`` 'fence' (default), 'notify' or 'pscw';
    ``reduce_scatter`` 'collective' (default) or 'accumulate' (``_rsap_modes``: each a
    strategy made once here, owning its MPI state until ``finalize``); ``shm`` as rsaa's,
    kept off by default where ``sync`` or ``reduce_scatter`` is given (shm has no puts).
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
            raise ConfigError(
                'chainermn_torus: rsap shm=True has no put or reduce-scatter messages, so '
                'sync={!r} / reduce_scatter={!r} do not apply; leave them out or set '
                'shm=False'.format(sync, reduce_scatter))
        self._setup_shm(shm, wanted_by_default=not explicit)
        if REDUCE_SCATTERS[self.reduce_scatter_mode].needs_mpi_sum \
                and _dtypes.is_half(self.allreduce_grad_dtype):
            raise ConfigError('chainermn_torus: rsap reduce_scatter=\'accumulate\' needs an MPI '
                              'sum, which {} has not; use allreduce_grad_dtype float32 or '
                              .format(self.allreduce_grad_dtype.name) +
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
                           passive=self._sync.passive, purpose=self.shm_purpose)
        buf = _packing.PackedBuffer(layout, segment_elems, array=window.array, memory=window)
        # Freed only by finalize() or buffer eviction, which every rank reaches at the same
        # point. Never from a garbage-collection finalizer: MPI_Win_free is collective, and
        # the collector runs at different moments on different ranks, so a free called from
        # it met other collectives on the other ranks and deadlocked (seen, 2 runs in 12 at
        # P=3). A communicator dropped without finalize() keeps its window until exit.
        return buf
