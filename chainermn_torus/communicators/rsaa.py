"""rsaa: the 2D-torus all-reduce, Reduce-Scatter, All-reduce, All-gather (Tamura & Hanawa;
Mikami et al.): the torus engine (``engine``, where the phases are described) on a grid
(``_grid``), its row phases by messages (``engine.MessageRows``: MPI_Reduce_scatter_block,
MPI_Allgather) or, where every row lies inside one node, in a node-shared window (the
``shm`` variant, ``_shm``). float16 and bfloat16 keep the message phases: the node-shared
ones sum with MPI's types.
"""
from typing import Any, Optional

from chainermn_torus import config
from chainermn_torus.communicators import interface
from chainermn_torus.communicators._grid import Grid, make_grid
from chainermn_torus.communicators.engine import MessageRows
from chainermn_torus.communicators._shm import node_rows, resolve_shm

__all__ = ['RsaaCommunicator']


class RsaaCommunicator(interface.Communicator):
    """rsaa; ``grid`` (M, N) or "MxN" (``_grid``); ``shm`` None (default: the ``shm`` variant
    where every grid row lies inside one node), True (required: refused where a row spans
    nodes) or False (the messages)."""

    name: Optional[str] = 'rsaa'
    grid: Grid  # made in the constructor, never None here

    def __init__(self, mpi_comm: Any = None, grid: Any = None,
                 segment_size: Optional[int] = None, allreduce_grad_dtype: Any = None,
                 shm: Optional[bool] = None, settings: Optional[config.Settings] = None,
                 exact_sum: Any = None, virtual_ranks: Any = None,
                 **made_by: Any) -> None:
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, settings,
                         exact_sum=exact_sum, virtual_ranks=virtual_ranks, **made_by)
        made, self.grid_reason = make_grid(self, grid, self.settings['grid'])
        self.grid = made
        self.shm = resolve_shm(shm, made, self.mpi_comm, self.intra_size)
        self.variant = 'shm' if self.shm else 'rsaa'  # as algorithms.variants names it
        self._options.update(grid=grid, shm=shm)
        self._start_engine(self._rows)

    def _rows(self, layout: Any) -> Any:
        """The row phases of a buffer of ``layout`` (the engine's strategy)."""
        row_comm = self.grid.row_comm
        return node_rows(self.shm, row_comm, layout, self.progress, self.shm_purpose) or \
            MessageRows(row_comm, self.progress)

    def _describe_variant(self) -> str:
        return ', row phases in node shared memory (variant shm)' if self.shm else ''
