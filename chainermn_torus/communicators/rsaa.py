"""rsaa: the 2D-torus all-reduce, Reduce-Scatter, All-reduce, All-gather (Tamura & Hanawa;
Mikami et al.): the torus engine (``engine``, where the phases are described) on a grid
(``_grid``), its row phases by messages (``engine.MessageRows``: MPI_Reduce_scatter_block,
MPI_Allgather) or, where every row lies inside one node, in a node-shared window (the
``shm`` variant, ``_shm``). float16 and bfloat16 keep the message phases: the node-shared
ones sum with MPI's types.
"""
from typing import Any, Optional

from chainermn_torus import config
from chainermn_torus.communicators import _dtypes, interface
from chainermn_torus.communicators._grid import make_grid
from chainermn_torus.communicators.engine import MessageRows
from chainermn_torus.communicators._shm import ShmRows, resolve_shm

__all__ = ['RsaaCommunicator']


class RsaaCommunicator(interface.Communicator):
    """rsaa; ``grid`` (M, N) or "MxN" (``_grid``); ``shm`` None (default: the ``shm`` variant
    where every grid row lies inside one node), True (required: refused where a row spans
    nodes) or False (the messages)."""

    name: Optional[str] = 'rsaa'

    def __init__(self, mpi_comm: Any = None, grid: Any = None,
                 segment_size: Optional[int] = None, allreduce_grad_dtype: Any = None,
                 shm: Optional[bool] = None, settings: Optional[config.Settings] = None,
                 **made_by: Any) -> None:
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, settings, **made_by)
        made, self.grid_reason = make_grid(self, grid, self.settings['grid'])
        self.grid, self._row_comm = made, made.row_comm  # the row phases' (_rows)
        self.shm = resolve_shm(shm, made, self.mpi_comm, self.intra_size)
        self.variant = 'shm' if self.shm else 'rsaa'  # as algorithms.variants names it
        self._options.update(grid=grid, shm=shm)
        self._start_engine(self._rows)

    def _rows(self, layout: Any) -> Any:
        """The row phases of a buffer of ``layout`` (the engine's strategy)."""
        row_comm = self._row_comm
        if self.shm and layout.size and not _dtypes.is_half(layout.dtype):
            return ShmRows(row_comm, layout.size, layout.dtype, self.progress,
                           purpose=self.shm_purpose)
        return MessageRows(row_comm, self.progress)

    def _describe_variant(self) -> str:
        return ', row phases in node shared memory (variant shm)' if self.shm else ''
