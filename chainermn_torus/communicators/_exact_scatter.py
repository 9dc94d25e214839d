"""The exact sum's phase 1 where it goes by messages (``_exact.ExactBuffer.position``): the
row's reduce-scatter as an exchange of blocks (MPI_Alltoallv, nothing to itself) and the
sum done here, instead of MPI's reduce-scatter of a fully encoded buffer.

Encoding is a function of a value and its array's scale alone, and integers add exactly in
any order, so who encodes a value and where it is added do not change a bit of the sum:

* one term a process (no virtual ranks, or one each): the blocks travel as the gradients'
  float values, the plain sum's bytes; the receiver encodes each peer's block and its own
  values from its gradients on the grid as it adds them (``ExactBuffer.encode_chunk``), and
  where the grid has no column to sum over, goes on to the mean in the same pass: on a row
  of two, one pass that reads what a float sum reads (``_exact_kernels.mean2``);
* several terms on some process (virtual ranks: V > P): a float cannot carry a process's
  sum of terms exactly, so the blocks travel encoded, as 64-bit integers; the receiver adds
  the peers' blocks and encodes its own terms into them (``ExactBuffer.add_own``).

Either way the own chunk is never written as integers by the packing, nor copied.
"""
import numpy

from chainermn_torus.communicators._packing import address

__all__ = ['RowScatter']


class RowScatter:
    """The reducer of an exact buffer whose phase 1 is by messages: this reduce-scatter,
    and MPI's integer sum (``inner``, an ``engine.MpiSum``) for the column and the tails."""

    own_chunk = True   # reduce_scatter returns a chunk of its own (engine.MessageRows)

    def __init__(self, buffer, inner):
        self.buffer, self.inner = buffer, inner
        self.op, self.mpi_type, self.progress = inner.op, inner.mpi_type, inner.progress
        self.allreduce, self.sum_small = inner.allreduce, inner.sum_small
        self._received = None   # the peers' blocks, reused across calls
        self._chunk = None      # the integer sums of the own chunk (one term a process)

    def reduce_scatter(self, comm, src):
        """The row sum of this position's block of ``src`` (a part of the buffer, whose own
        block the packing left to this), in a chunk of this reducer's; None where it is
        decoded already into the buffer's means (no column: ``position``'s N = 1)."""
        buf, M, pos = self.buffer, comm.size, comm.rank
        c = src.size // M
        start = (address(src) - address(buf.array)) // src.itemsize
        if buf.sends_floats:
            sent, kind = buf.sent_floats(start), buf.means_type
            dtype = buf.means.dtype
        else:
            sent, kind, dtype = src[:M * c], self.mpi_type, src.dtype
        blocks = self._scratch('_received', (M - 1) * c, dtype).reshape(M - 1, c)
        counts = [0 if k == pos else c for k in range(M)]
        self.progress(comm, 'Alltoallv', [sent, (counts, [k * c for k in range(M)]), kind],
                      [blocks, (counts, [(k - (k > pos)) * c for k in range(M)]), kind])
        if not buf.sends_floats:
            chunk = blocks[0]
            for k in range(1, M - 1):
                numpy.add(chunk, blocks[k], out=chunk)
            buf.add_own(start + pos * c, chunk)
            return chunk
        chunk = self._scratch('_chunk', c, src.dtype)
        decode = buf.position[2] == 1
        buf.encode_chunk(start + pos * c, blocks, chunk, decode)
        return None if decode else chunk

    def _scratch(self, name, n, dtype):
        array = getattr(self, name)
        if array is None or array.size < n or array.dtype != dtype:
            array = numpy.empty(n, dtype)
            setattr(self, name, array)
        return array[:n]
