"""Phases 1 and 2 of the torus algorithms, shared by rsaa and rsap."""
import numpy
from mpi4py import MPI

from chainermn_torus.communicators._packing import split_counts


class TorusPhases(object):
    """Mixin for a TorusCommunicatorBase with a grid: reduce-scatter and column all-reduce."""

    _chunk_scratch = None

    def reduce_scatter(self, seg, src, mpi_type):
        """Row reduce-scatter of ``src`` (or of ``seg`` if None); returns (counts, displs, chunk).

        ``chunk`` holds the row sum of this rank's 1/M share (a scratch array reused across
        calls). With M = 1 it is ``seg`` itself and nothing moves between ranks.
        """
        M, pos = self.grid.M, self.grid.pos
        counts, displs = split_counts(seg.size, M)
        if M == 1:
            if src is not None:
                seg[...] = src
            return counts, displs, seg
        scratch = self._chunk_scratch
        if scratch is None or scratch.dtype != seg.dtype or scratch.size < counts[0]:
            scratch = self._chunk_scratch = numpy.empty(counts[0], dtype=seg.dtype)
        chunk = scratch[:counts[pos]]
        self.grid.row_comm.Reduce_scatter([seg if src is None else src, mpi_type],
                                          [chunk, mpi_type],
                                          recvcounts=counts, op=MPI.SUM)
        return counts, displs, chunk

    def column_allreduce(self, chunk, mpi_type):
        if self.grid.N > 1:
            self.grid.col_comm.Allreduce(MPI.IN_PLACE, [chunk, mpi_type], op=MPI.SUM)
