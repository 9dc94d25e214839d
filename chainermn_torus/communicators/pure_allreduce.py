"""pure_allreduce: the packed gradient buffer through MPI_Allreduce, divided by P.

"All-Reduce only" of Tamura & Hanawa, but with one persistent contiguous buffer, sent in segments
(one 100 MB MPI_Allreduce was 3x slower than the same bytes in 1-4 MiB pieces on shared
memory), instead of ChainerMN ``naive``'s one message per parameter array. It is the torus
engine with no row (M = 1, the column every rank); the division by P is folded into the
packing copy (``engine``: ``prescaled``), so the all-reduce is in place and no pass over the
buffer is spent on dividing.
"""
from typing import Any, Optional

from chainermn_torus import config
from chainermn_torus.communicators import interface

__all__ = ['PureAllreduceCommunicator']


class PureAllreduceCommunicator(interface.Communicator):
    """pure_allreduce: ``interface.Communicator``'s options, no grid."""

    name: Optional[str] = 'pure_allreduce'

    def __init__(self, mpi_comm: Any = None, segment_size: Optional[int] = None,
                 allreduce_grad_dtype: Any = None, settings: Optional[config.Settings] = None,
                 exact_sum: Any = None, virtual_ranks: Any = None,
                 **made_by: Any) -> None:
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, settings,
                         exact_sum=exact_sum, virtual_ranks=virtual_ranks, **made_by)
        self._start_engine(rows=None, prescaled=True)
