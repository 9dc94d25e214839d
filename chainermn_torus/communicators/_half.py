"""Sums of float16 and bfloat16 buffers without an MPI sum of either.

MPI has no float16 type or sum (MPICH's MPIX_C_FLOAT16 is not in Intel or Fujitsu MPI), and a
user-defined MPI op runs Python inside MPI's progress engine for every pairwise combine (it
needs the GIL, which the training thread holds; measured on the MNIST MLP's 7.2 MB at 2 ranks
under double buffering: 44-56 ms per all-reduce against 1.6 ms in float32). So float16 is
only *moved* by MPI and summed by numpy:

* reduce-scatter = MPI_Alltoall of the P blocks, then each rank adds the P blocks it
  received in float32 and rounds the sum to float16 once (``_half_kernels.sum_blocks``, or
  ``sum_blocks_numpy`` below where numba is not installed: the same bits, slower);
* all-reduce = that reduce-scatter, then an in-place MPI_Allgather of the summed blocks.

Bytes per rank are those of a ring or Rabenseifner all-reduce ((P-1)/P of the buffer in each
phase), every element is rounded to float16 once per reduce-scatter, and every rank adds the
blocks in the same order, so all ranks end with the same bits. Elements that do not divide
evenly into P blocks (fewer than P) are summed in float32 with MPI_Allreduce. bfloat16
(``_dtypes``) takes the same steps with its own conversions.
"""
import numpy
from mpi4py import MPI

from chainermn_torus.communicators._progress import BLOCKING
from chainermn_torus.runtime.cpu import jit

__all__ = ['HalfReducer', 'sum_blocks_numpy']


def sum_blocks_numpy(out, blocks, nblocks, acc, dtype=numpy.float16):
    """``_half_kernels.sum_blocks`` in numpy: float32 sums in block order, one rounding."""
    n = out.size
    acc = acc[:n]
    # numpy widens float16 (ml_dtypes bfloat16) exactly and rounds float32 to nearest even,
    # as the kernels do: the bits are the kernels' (tests/communicators).
    acc[...] = blocks[:n].view(dtype).astype(numpy.float32)
    # infinity beyond the range, as in the kernel (check_finite is where it is reported)
    with numpy.errstate(over='ignore', invalid='ignore'):
        for b in range(1, nblocks):
            acc += blocks[b * n:(b + 1) * n].view(dtype).astype(numpy.float32)
        out.view(dtype)[...] = acc.astype(dtype)


class HalfReducer:
    """float16 (or bfloat16) reduce-scatter and all-reduce, with a reused scratch (see
    ``engine``)."""

    op = None  # no MPI operation sums float16 or bfloat16
    own_chunk = False   # reduce_scatter sums into the ``out`` it is given

    def __init__(self, mpi_type, progress=None, dtype=numpy.dtype(numpy.float16)):
        self.mpi_type = mpi_type
        self.dtype = numpy.dtype(dtype)
        self.progress = progress or BLOCKING
        self._scratch = None
        self._acc = None  # float32 accumulator of the block sums

    def _recv(self, n):
        if self._scratch is None or self._scratch.size < n:
            self._scratch = numpy.empty(n, dtype=self.dtype)
        return self._scratch[:n]

    def reduce_scatter(self, comm, src, out):
        """out (c elements) = float16(sum over ranks, in float32, of block ``comm.rank`` of src)."""
        size, c = comm.size, out.size
        if size == 1:
            out[...] = src[:c]
            return out
        recv = self._recv(size * c)
        self.progress(comm, 'Alltoall', [src[:size * c], self.mpi_type], [recv, self.mpi_type])
        if self._acc is None or self._acc.size < c:
            self._acc = numpy.empty(c, numpy.float32)
        if jit.available():
            from chainermn_torus.communicators import _half_kernels  # numba: when first used
            _half_kernels.sum_blocks(out.view(numpy.uint16), recv.view(numpy.uint16), size,
                                     self._acc, self.dtype.name)
        else:
            sum_blocks_numpy(out.view(numpy.uint16), recv.view(numpy.uint16), size, self._acc,
                             self.dtype)
        return out

    def allreduce(self, comm, array, src=None):
        """array = the float16 sum over ranks of ``src`` (default: of ``array``), in place."""
        size = comm.size
        src = array if src is None else src
        if size == 1:
            if src is not array:
                array[...] = src
            return array
        n = array.size
        main = n - n % size
        c = main // size
        if c:
            # Safe in place: the all-to-all receives into scratch; the sum is written after.
            self.reduce_scatter(comm, src[:main], array[comm.rank * c:(comm.rank + 1) * c])
            self.progress(comm, 'Allgather', MPI.IN_PLACE, [array[:main], self.mpi_type])
        if main < n:
            self.sum_small(comm, array[main:], src[main:])
        return array

    def sum_small(self, comm, array, src=None):
        """A few elements: widened to float32 and summed by MPI_Allreduce."""
        wide = (array if src is None else src).astype(numpy.float32)
        self.progress(comm, 'Allreduce', MPI.IN_PLACE, [wide, MPI.FLOAT], op=MPI.SUM)
        with numpy.errstate(over='ignore', invalid='ignore'):
            array[...] = wide.astype(array.dtype)
        return array
