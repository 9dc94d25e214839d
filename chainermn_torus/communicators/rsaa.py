"""rsaa: 2D-torus all-reduce = Reduce-Scatter, All-reduce, All-gather (Tamura & Hanawa;
Mikami et al.).

On a grid of P = M x N ranks, for each segment of the packed buffer:
  1. reduce-scatter in the row: rank at position j gets the row sum of chunk j (1/M of it);
  2. all-reduce of that chunk in the column, so it becomes the sum over all P ranks;
  3. divide the chunk by P (on 1/M of the buffer, not all of it);
  4. all-gather in the row: every rank gets every chunk.
Bytes per rank: the row phases move (M-1)/M of the segment each, the column phase 1/M of it.
The shared steps live in ``_torus``; this module is phase 4.

``shm`` (default: on where every row lies inside one node) replaces phases 1 and 4 by reads
of the peers' buffers in a node-shared window (``_shm``); rsaa and rsap are then the same
algorithm.
"""
from mpi4py import MPI

from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._torus import TorusPhases


class RsaaCommunicator(TorusPhases, TorusCommunicatorBase):

    name = 'rsaa'

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None,
                 shm=None):
        super(RsaaCommunicator, self).__init__(mpi_comm, grid=grid, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype)
        self._setup_shm(shm)

    def _new_buffer(self, layout, segment_elems):
        buf = self._shm_buffer(layout, segment_elems)
        if buf is None:
            buf = super(RsaaCommunicator, self)._new_buffer(layout, segment_elems)
        return buf

    def _row_gather(self, buf, lo, c):
        if self.grid.M > 1:
            # In place: this position's chunk already sits at its offset.
            self.progress(self.grid.row_comm, 'Allgather', MPI.IN_PLACE,
                          [buf.array[lo:lo + self.grid.M * c], buf.mpi_type])
