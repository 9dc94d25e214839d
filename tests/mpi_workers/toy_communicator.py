"""The MPI class of the toy variant ``rs_ag`` (toy_variant.py): one method on the package's
communicator base, as pure_allreduce is."""
import numpy
from mpi4py import MPI

from chainermn_torus.communicators._reduction import divide_by_size
from chainermn_torus.communicators._base import TorusCommunicatorBase


class RsAgCommunicator(TorusCommunicatorBase):

    name = 'rs_ag'

    def __init__(self, mpi_comm=None, segment_size=None, allreduce_grad_dtype=None):
        super().__init__(
            mpi_comm, segment_size=segment_size, allreduce_grad_dtype=allreduce_grad_dtype)

    def _mean_segment(self, buf, lo, hi, src):
        seg, P, rank = buf.array[lo:hi], self.size, self.rank
        divisor = 1 if buf.prescaled else P
        main = (hi - lo) - (hi - lo) % P
        c = main // P
        if c and P > 1:
            chunk = buf.reducer.reduce_scatter(
                self.mpi_comm, seg[:main] if src is None else src[:main],
                numpy.empty(c, seg.dtype))
            divide_by_size(chunk, divisor, out=seg[rank * c:(rank + 1) * c])
            self.progress(self.mpi_comm, 'Allgather', MPI.IN_PLACE, [seg[:main], buf.mpi_type])
        elif c:
            if src is not None:
                seg[:main] = src[:main]
            divide_by_size(seg[:main], divisor)
        if main < hi - lo:
            buf.reducer.sum_small(self.mpi_comm, seg[main:], None if src is None else src[main:])
            divide_by_size(seg[main:], divisor)
