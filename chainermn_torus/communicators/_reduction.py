"""How a packed buffer is summed across ranks, chosen once when the buffer is made, and
where the sum becomes a mean.

float32 and float64 are summed by MPI's own reductions (``MpiSum``); float16 and bfloat16
have no MPI sum, so they are moved by MPI and summed by numba (``_half.HalfReducer``). Both
offer the same three steps, and the phases of every communicator call them without asking
which they have:

  reduce_scatter(comm, src, out)   out = the sum over ranks of block ``comm.rank`` of src;
  allreduce(comm, array, src=None) array = the sum over ranks of src (default: array);
  sum_small(comm, array, src=None) the same, for a few elements (a segment's tail).

``op`` is the MPI operation where there is one (one-sided MPI_Accumulate needs it), else None.

The division by P has two placements, both leaving every rank with bitwise identical results:

* after the sum (``divide_by_size``): dividing keeps the mean correctly rounded from the sum.
  The torus algorithms divide their 1/M chunk only, before the gather phase, so it costs
  1/M of a pass over the buffer.
* before the sum (``prescale``, a factor the packing step multiplies by while it copies):
  free when the gradients must be packed anyway, which is what pure_allreduce does, because
  MPICH copies a separate send buffer into the receive buffer before an all-reduce, and a
  division after the sum would be one more full pass (measured on the shared-memory machine:
  3.7 ms per 102 MB pass, a fifth of the whole ResNet-50 all-reduce). Scaling first also
  keeps float sums far from overflow. For P a power of two it is exact (the same bits as
  dividing after); otherwise it differs from it within float rounding. float16 and bfloat16
  are always scaled first (``_dtypes.scaled_first``).
"""
import numpy
from mpi4py import MPI

from chainermn_torus.communicators import _dtypes
from chainermn_torus.communicators._half import HalfReducer
from chainermn_torus.communicators._progress import BLOCKING

__all__ = ['MpiSum', 'HalfReducer', 'reducer_for', 'divide_by_size', 'prescale']


class MpiSum:
    """Sums by MPI_Reduce_scatter_block and MPI_Allreduce with MPI_SUM."""

    op = MPI.SUM

    def __init__(self, mpi_type, progress=None):
        self.mpi_type = mpi_type
        self.progress = progress or BLOCKING

    def reduce_scatter(self, comm, src, out):
        t = self.mpi_type
        self.progress(comm, 'Reduce_scatter_block', [src[:comm.size * out.size], t], [out, t],
                      op=self.op)
        return out

    def allreduce(self, comm, array, src=None):
        if comm.size == 1:
            if src is not None:
                array[...] = src
            return array
        t = self.mpi_type
        self.progress(comm, 'Allreduce', MPI.IN_PLACE if src is None else [src, t], [array, t],
                      op=self.op)
        return array

    sum_small = allreduce


def reducer_for(dtype, mpi_type, progress):
    """The reducer for a buffer of ``dtype`` whose collectives wait by ``progress``."""
    if _dtypes.is_half(dtype):
        return HalfReducer(mpi_type, progress, numpy.dtype(dtype))
    return MpiSum(mpi_type, progress)


def divide_by_size(src, size, out=None):
    """out = src / size, in place when ``out`` is None."""
    if out is None:
        out = src
    if size == 1:
        if out is not src:
            out[...] = src
        return out
    return numpy.divide(src, src.dtype.type(size), out=out)


def prescale(size):
    """The factor gradients are multiplied by while packed, when the division comes first."""
    return 1.0 / size
