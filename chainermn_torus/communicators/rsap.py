"""rsap: rsaa's phases 1 and 2 (row reduce-scatter, column all-reduce of the 1/M chunk,
divided into place), then phase 3 as MPI-3 one-sided Put rounds (Tamura & Hanawa): each
round puts the chunks a position holds into a row partner's window at the same offset, so
nothing is copied on the receiving side. The rounds are ``algorithms.rsap.put_rounds``
(described once there, with their cost); the segment's phases are rsaa's
(``rsaa.RsaaCommunicator._mean_segment``); what differs is the buffer's row phases,
``_rsap_modes.PutRows``.

One window covers the packed buffer, whose memory MPI allocates (MPI_Win_allocate); it is
created with the buffer (creation is collective and costly) and reused on every call until
the model's layout changes. The options choose the strategies of ``_rsap_modes``; ``shm``
(the default where rows lie inside nodes) is the ``shm`` variant, as rsaa's.
"""
from chainermn_torus.algorithms.rsap import put_rounds
from chainermn_torus.communicators import _dtypes, _packing
from chainermn_torus.communicators._rsap_modes import (
    NEEDS_MPI_SUM, REDUCE_SCATTERS, SYNCS, PutRows)
from chainermn_torus.communicators._window import PutWindow
from chainermn_torus.communicators.rsaa import RsaaCommunicator
from chainermn_torus.errors import ConfigError

__all__ = ['RsapCommunicator']

DEFAULT_SYNC = 'fence'
DEFAULT_REDUCE_SCATTER = 'collective'
_SAID = {'collective': 'MPI_Reduce_scatter_block', 'accumulate': 'MPI_Accumulate'}


def _choice(name, value, choices, default):
    if value is None:
        return default
    if value not in choices:
        raise ConfigError('chainermn_torus: rsap {} must be one of {}, got {!r}'.format(
            name, ', '.join(repr(c) for c in choices), value))
    return value


class RsapCommunicator(RsaaCommunicator):
    """rsap; options beyond rsaa's: ``sync`` 'fence' (default), 'notify' or 'pscw';
    ``reduce_scatter`` 'collective' (default) or 'accumulate' (``_rsap_modes``: strategies
    made with each buffer, owning their MPI state until it is freed); ``shm`` as rsaa's,
    kept off by default where ``sync`` or ``reduce_scatter`` is given (shm has no puts).
    """

    name = 'rsap'
    base_variant = 'rsap'

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None,
                 shm=None, sync=None, reduce_scatter=None, settings=None):
        # Not rsaa's __init__: its shm default is resolved below, knowing the modes.
        super(RsaaCommunicator, self).__init__(mpi_comm, grid=grid, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype,
                                               settings=settings)
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
        if self.reduce_scatter_mode in NEEDS_MPI_SUM \
                and _dtypes.is_half(self.allreduce_grad_dtype):
            raise ConfigError('chainermn_torus: rsap reduce_scatter=\'accumulate\' needs an MPI '
                              'sum, which {} has not; use allreduce_grad_dtype float32 or '
                              .format(self.allreduce_grad_dtype.name) +
                              'reduce_scatter=\'collective\'')
        self._rounds = put_rounds(self.grid.M)
        if self.sync == 'pscw':
            SYNCS['pscw'].warn()  # said once, when it is chosen

    def _describe_variant(self):
        if self.shm:
            return super()._describe_variant()
        return ', puts synchronised by {}, reduce-scatter by {}'.format(
            SYNCS[self.sync].describe, _SAID[self.reduce_scatter_mode])

    def _message_buffer(self, layout, segment_elems, **strategies):
        if self.grid.M == 1 or layout.size == 0:
            return super()._message_buffer(layout, segment_elems, **strategies)
        # The buffer's memory is the window's (see _window: a Put to the same node is then
        # one memcpy); 'notify' holds one passive epoch for the window's life.
        window = PutWindow(self.grid.row_comm, layout.size, layout.dtype,
                           passive=SYNCS[self.sync].passive, purpose=self.shm_purpose)
        buf = _packing.PackedBuffer(
            layout, segment_elems, array=window.array, memory=window,
            rows=PutRows(self.grid.row_comm, self.progress, window.win, self._rounds,
                         self.sync, self.reduce_scatter_mode), **strategies)
        # Freed only by finalize() or buffer eviction, which every rank reaches at the same
        # point. Never from a garbage-collection finalizer: MPI_Win_free is collective, and
        # the collector runs at different moments on different ranks, so a free called from
        # it met other collectives on the other ranks and deadlocked (seen, 2 runs in 12 at
        # P=3). A communicator dropped without finalize() keeps its window until exit.
        return buf
