"""rsap: Reduce-Scatter, All-reduce, Put (seed 003): rsaa with the last phase as MPI-3 RMA.

For each segment of the packed buffer (the shared steps 1-3 live in ``_torus``):
  1. reduce-scatter in the row, 2. all-reduce of the 1/M chunk in the column, 3. divide the
  chunk by P and store it at its place in the result buffer (the packed buffer itself), then
  4. put rounds: recursive doubling in the row. In round i, position q puts every chunk it
     holds into position q XOR 2^i's window at the same offset, so nothing is copied on the
     receiving side. MPI_Win_fence closes each round.

One window covers the packed buffer, whose memory MPI allocates (MPI_Win_allocate); it is
created with the buffer (creation is collective and costly) and reused on every call until
the model's layout changes.

M need not be a power of two. With M' the largest power of two <= M, the positions q >= M'
("extras") first put their chunk to q - M'; the first M' positions then run the doubling
rounds carrying two chunk ranges each (their own group, and the group shifted by M'); a last
round puts the full result to each extra. That costs two fences more than a power of two.
"""

import numpy
from mpi4py import MPI

from chainermn_torus.communicators import _packing

from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._torus import TorusPhases

__all__ = ['RsapCommunicator', 'put_rounds']


def _free_window(win):
    if not MPI.Is_finalized() and win != MPI.WIN_NULL:
        win.Free()


def put_rounds(M):
    """The put schedule for a row of M positions.

    Returns a list of rounds; each round is a list of (origin, target, first_chunk, end_chunk)
    meaning: origin puts chunks [first_chunk, end_chunk) into target's window.
    """
    low = 1 << (M.bit_length() - 1)  # M' = largest power of two <= M
    rounds = []
    if M > low:
        rounds.append([(e, e - low, e, e + 1) for e in range(low, M)])

    def held(q, width):
        # After doubling up to `width`, q holds its aligned group and the group's extras.
        g = q & ~(width - 1)
        ranges = [(g, g + width)]
        if g + low < M:
            ranges.append((g + low, min(g + width + low, M)))
        return ranges

    width = 1
    while width < low:
        rounds.append([(q, q ^ width, a, b) for q in range(low) for a, b in held(q, width)])
        width *= 2
    if M > low:
        last = []
        for e in range(low, M):
            last.append((e - low, e, 0, e))
            if e + 1 < M:
                last.append((e - low, e, e + 1, M))
        rounds.append(last)
    return rounds


class RsapCommunicator(TorusPhases, TorusCommunicatorBase):

    name = 'rsap'

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None):
        super(RsapCommunicator, self).__init__(mpi_comm, grid=grid, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype)
        pos = self.grid.pos
        # Only this position's puts, per round: the schedule is fixed by M.
        self._my_rounds = [[(t, a, b) for (o, t, a, b) in rnd if o == pos]
                           for rnd in put_rounds(self.grid.M)]

    def gather(self, buf, lo, c, mpi_type):
        """Phase 3 as put rounds: chunks go straight into the partners' windows."""
        if self.grid.M == 1:
            return
        win, array = buf.window, buf.array
        # A fence has no non-blocking form: when polling, everyone meets first in a polled
        # barrier, so that the fence itself does not spin waiting for late ranks.
        if self.progress.polling:
            self.progress(self.grid.row_comm, 'Barrier')
        win.Fence(MPI.MODE_NOPRECEDE)
        last = len(self._my_rounds) - 1
        for i, puts in enumerate(self._my_rounds):
            for target, a, b in puts:
                start, n = lo + a * c, (b - a) * c
                win.Put([array[start:start + n], mpi_type], target,
                        target=(start, n, mpi_type))
            win.Fence(MPI.MODE_NOSUCCEED if i == last else 0)

    def _new_buffer(self, layout, segment_elems):
        if self.grid.M == 1 or layout.size == 0:
            buf = super(RsapCommunicator, self)._new_buffer(layout, segment_elems)
            buf.window = None
            return buf
        # The buffer's memory comes from MPI_Win_allocate, not from numpy: MPICH can then
        # place it in shared memory, and a Put to a rank of the same node becomes one
        # memcpy (measured at P=2, 102 MB: 3.1 ms against 10.4 ms for a window created over
        # numpy memory, and 5.0 ms for MPI_Allgather).
        itemsize = layout.dtype.itemsize
        win = MPI.Win.Allocate(layout.size * itemsize, disp_unit=itemsize,
                               info=MPI.INFO_NULL, comm=self.grid.row_comm)
        array = numpy.frombuffer(win.tomemory(), dtype=layout.dtype, count=layout.size)
        buf = _packing.PackedBuffer(layout, segment_elems, array=array)
        buf.window = win
        # Freed only by finalize() or buffer eviction, which every rank reaches at the same
        # point. Never from a garbage-collection finalizer: MPI_Win_free is collective, and
        # the collector runs at different moments on different ranks, so a free called from
        # it met other collectives on the other ranks and deadlocked (seen, 2 runs in 12 at
        # P=3). A communicator dropped without finalize() keeps its window until exit.
        return buf

    def _release_buffer(self, buf):
        super(RsapCommunicator, self)._release_buffer(buf)  # grads stop viewing the memory
        if buf.window is not None:
            buf.array = None
            _free_window(buf.window)
            buf.window = None
