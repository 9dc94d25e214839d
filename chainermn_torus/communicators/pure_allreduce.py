"""pure_allreduce: the packed gradient buffer through MPI_Allreduce, then divide by P.

"All-Reduce only" of seed 003, but with one persistent contiguous buffer in segments instead
of ChainerMN ``naive``'s one message per parameter array.
"""
from mpi4py import MPI

from chainermn_torus.communicators._averaging import divide_by_size
from chainermn_torus.communicators._base import TorusCommunicatorBase


class PureAllreduceCommunicator(TorusCommunicatorBase):

    name = 'pure_allreduce'
    uses_grid = False

    def __init__(self, mpi_comm=None, segment_size=None):
        super(PureAllreduceCommunicator, self).__init__(mpi_comm, segment_size=segment_size)

    def _mean_segment(self, array, lo, hi, mpi_type):
        seg = array[lo:hi]
        self.mpi_comm.Allreduce(MPI.IN_PLACE, [seg, mpi_type], op=MPI.SUM)
        divide_by_size(seg, self.size)
