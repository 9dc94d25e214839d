"""rsap: rsaa's phases 1 and 2 (row reduce-scatter, column all-reduce of the 1/M chunk,
divided into place), then phase 3 as MPI-3 one-sided Put rounds (Tamura & Hanawa): each
round puts the chunks a position holds into a row partner's window at the same offset, so
nothing is copied on the receiving side. The rounds are ``algorithms.rsap.put_rounds``
(described once there, with their cost); the segment's phases are the torus engine's
(``engine``); what differs from rsaa is the buffer's row phases, ``_rsap_modes.PutRows``.

One window covers the packed buffer, whose memory MPI allocates (MPI_Win_allocate); it is
created with the buffer (creation is collective and costly) and reused on every call until
the model's layout changes. The options choose the strategies of ``_rsap_modes``; ``shm``
(the default where rows lie inside nodes) is the ``shm`` variant, as rsaa's.
"""
from chainermn_torus.algorithms.rsap import put_rounds
from typing import Any, Optional

from chainermn_torus import config
from chainermn_torus.communicators import _dtypes, _exact, interface
from chainermn_torus.communicators._grid import Grid, make_grid
from chainermn_torus.communicators.engine import MessageRows
from chainermn_torus.communicators._rsap_modes import (
    NEEDS_MPI_SUM, REDUCE_SCATTERS, SYNCS, PutRows)
from chainermn_torus.communicators._shm import node_rows, resolve_shm
from chainermn_torus.errors import ConfigError

__all__ = ['RsapCommunicator']

DEFAULT_SYNC = 'fence'
DEFAULT_REDUCE_SCATTER = 'collective'
_SAID = {'collective': 'MPI_Reduce_scatter_block', 'accumulate': 'MPI_Accumulate'}


def _choice(name: str, value: Optional[str], choices: tuple, default: str) -> str:
    if value is None:
        return default
    if value not in choices:
        raise ConfigError('chainermn_torus: rsap {} must be one of {}, got {!r}'.format(
            name, ', '.join(repr(c) for c in choices), value))
    return value


class RsapCommunicator(interface.Communicator):
    """rsap; ``grid`` and ``shm`` as rsaa's; ``sync`` 'fence' (default), 'notify' or 'pscw';
    ``reduce_scatter`` 'collective' (default) or 'accumulate' (``_rsap_modes``: strategies
    made with each buffer, owning their MPI state until it is freed); ``shm`` is kept off by
    default where ``sync`` or ``reduce_scatter`` is given (shm has no puts).
    """

    name: Optional[str] = 'rsap'
    grid: Grid  # made in the constructor, never None here

    def __init__(self, mpi_comm: Any = None, grid: Any = None,
                 segment_size: Optional[int] = None, allreduce_grad_dtype: Any = None,
                 shm: Optional[bool] = None, sync: Optional[str] = None,
                 reduce_scatter: Optional[str] = None,
                 settings: Optional[config.Settings] = None, exact_sum: Any = None,
                 virtual_ranks: Any = None, **made_by: Any) -> None:
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, settings,
                         exact_sum=exact_sum, virtual_ranks=virtual_ranks, **made_by)
        made, self.grid_reason = make_grid(self, grid, self.settings['grid'])
        self.grid = made
        self.sync = _choice('sync', sync, tuple(SYNCS), DEFAULT_SYNC)
        self.reduce_scatter_mode = _choice('reduce_scatter', reduce_scatter,
                                           tuple(REDUCE_SCATTERS), DEFAULT_REDUCE_SCATTER)
        explicit = sync is not None or reduce_scatter is not None
        if shm and explicit:
            raise ConfigError(
                'chainermn_torus: rsap shm=True has no put or reduce-scatter messages, so '
                f'sync={sync!r} / reduce_scatter={reduce_scatter!r} do not apply; leave them out '
                'or set '
                'shm=False')
        self.shm = resolve_shm(shm, made, self.mpi_comm, self.intra_size,
                               wanted_by_default=not explicit)
        self.variant = 'shm' if self.shm else 'rsap'  # as algorithms.variants names it
        if self.reduce_scatter_mode in NEEDS_MPI_SUM \
                and _dtypes.is_half(self.allreduce_grad_dtype):
            raise ConfigError('chainermn_torus: rsap reduce_scatter=\'accumulate\' needs an MPI '
                              f'sum, which {self.allreduce_grad_dtype.name} has not; use '
                              'allreduce_grad_dtype float32 or '
                               +
                              'reduce_scatter=\'collective\'')
        self._options.update(grid=grid, shm=shm, sync=sync, reduce_scatter=reduce_scatter)
        self._rounds = put_rounds(made.M)
        if self.sync == 'pscw':
            SYNCS['pscw'].warn()  # said once, when it is chosen
        self._start_engine(self._rows)

    def _rows(self, layout: Any) -> Any:
        """The row phases of a buffer of ``layout`` (the engine's strategy): node-shared
        where ``shm`` (float16 and bfloat16 excepted), else the put rounds."""
        row_comm = self.grid.row_comm
        shared = node_rows(self.shm, row_comm, layout, self.progress, self.shm_purpose)
        if shared is not None:
            return shared
        if layout.size == 0:  # no window of zero bytes
            return MessageRows(row_comm, self.progress)
        # The exact sum with phase 1 by messages: the window holds what phase 3 puts, the
        # decoded float means (accumulate sums the integers in the window itself).
        means = layout.dtype == _exact.WIRE and self.reduce_scatter_mode == 'collective'
        return PutRows(row_comm, self.progress, layout.size,
                       _exact.means_dtype(layout) if means else layout.dtype, self._rounds,
                       self.sync, self.reduce_scatter_mode, purpose=self.shm_purpose,
                       means=means)

    def _describe_variant(self) -> str:
        if self.shm:
            return ', row phases in node shared memory (variant shm)'
        return (f', puts synchronised by {SYNCS[self.sync].describe}, reduce-scatter '
                f'by {_SAID[self.reduce_scatter_mode]}')
