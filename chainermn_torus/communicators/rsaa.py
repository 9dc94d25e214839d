"""rsaa: 2D-torus all-reduce = Reduce-Scatter, All-reduce, All-gather (seed 003, Mikami et al.).

On a grid of P = M x N ranks, for each segment of the packed buffer:
  1. reduce-scatter in the row: rank at position j gets the row sum of chunk j (1/M of it);
  2. all-reduce of that chunk in the column, so it becomes the sum over all P ranks;
  3. divide the chunk by P (on 1/M of the buffer, not all of it);
  4. all-gather in the row: every rank gets every chunk.
Bytes per rank: the row phases move (M-1)/M of the segment each, the column phase 1/M of it.
"""
from chainermn_torus.communicators._averaging import divide_by_size
from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._torus import TorusPhases


class RsaaCommunicator(TorusPhases, TorusCommunicatorBase):

    name = 'rsaa'

    def _mean_segment(self, buf, lo, hi, src):
        seg, mpi_type = buf.array[lo:hi], buf.mpi_type
        counts, displs, chunk = self.reduce_scatter(seg, src, mpi_type)
        self.column_allreduce(chunk, mpi_type)
        divide_by_size(chunk, self.size)
        self.row_allgather(chunk, seg, counts, displs, mpi_type)

    def row_allgather(self, chunk, seg, counts, displs, mpi_type):
        if self.grid.M == 1:
            return  # chunk is seg itself
        self.grid.row_comm.Allgatherv([chunk, mpi_type], [seg, (counts, displs[:-1]), mpi_type])
