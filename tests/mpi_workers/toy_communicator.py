"""The MPI class of the toy variant ``rs_ag`` (toy_variant.py): the package's torus engine
on a grid of one row holding every rank (M = P, N = 1), its row phases by messages. The
constructor is all it writes, as pure_allreduce's is."""
from chainermn_torus.communicators import interface
from chainermn_torus.communicators._grid import Grid
from chainermn_torus.communicators.engine import MessageRows


class RsAgCommunicator(interface.Communicator):

    name = 'rs_ag'

    def __init__(self, mpi_comm=None, segment_size=None, allreduce_grad_dtype=None,
                 **made_by):
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, **made_by)
        # One row of all P ranks: phase 1 is MPI_Reduce_scatter_block over everyone, the
        # column of one rank sums nothing, phase 3 is an in-place MPI_Allgather.
        self.grid, self.grid_reason = Grid(self.mpi_comm, (self.size, 1)), 'one row'
        self._start_engine(lambda layout: MessageRows(self.grid.row_comm, self.progress))
