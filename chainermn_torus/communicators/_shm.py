"""Intra-node phases through an MPI-3 shared-memory window (rsaa/rsap with ``shm=True``).

The M ranks of a grid row that share a node allocate their packed buffers together with
``MPI_Win_allocate_shared`` on the row communicator, and every rank maps every peer's buffer.
The row phases then need no messages:

  reduce-scatter  position j reads chunk j of all M buffers and writes their sum into its own
                  buffer (one pass: M reads and one write per element, no MPI copies through
                  bounce cells as MPI's shared-memory transport makes);
  all-gather      every position copies chunk k straight from position k's buffer.

Only the column all-reduce (between nodes) goes through MPI. Chunk j is summed by position j
alone, always in the order 0, 1, ..., M-1, so all ranks end with the same bits.

Ordering between ranks is a node barrier (``MPI_Win_sync`` + ``MPI_Barrier`` +
``MPI_Win_sync``, the unified-memory idiom): after packing, before the gather, and at the end
of a call (so no rank overwrites its buffer, or lets the optimizer write into gradients that
view it, while a peer still copies from it).
"""
import ctypes

import numba
import numpy
from mpi4py import MPI
from numba import prange

__all__ = ['NodeBuffers', 'rows_within_nodes']


def rows_within_nodes(row_comm, mpi_comm):
    """True on every rank iff every grid row lies inside one shared-memory node."""
    node = row_comm.Split_type(MPI.COMM_TYPE_SHARED)
    inside = node.size == row_comm.size
    node.Free()
    return bool(mpi_comm.allreduce(1 if inside else 0, op=MPI.MIN))


@numba.njit(parallel=True, cache=True)
def _sum_rows(stack, lo, hi, out):
    # out[i] = ((stack[0, lo+i] + stack[1, lo+i]) + ...) in this order on every rank;
    # out may be one of the rows: element i is read from every row before it is written.
    rows = stack.shape[0]
    for i in prange(hi - lo):
        s = stack[0, lo + i]
        for r in range(1, rows):
            s += stack[r, lo + i]
        out[i] = s


@numba.njit(parallel=True, cache=True)
def _gather_rows(stack, me, lo, c):
    # Row `me` gets chunk k (elements lo + k*c ... lo + (k+1)*c) of row k, for every k != me.
    rows = stack.shape[0]
    for i in prange((rows - 1) * c):
        k = i // c
        if k >= me:
            k += 1
        j = lo + k * c + i % c
        stack[me, j] = stack[k, j]


class NodeBuffers(object):
    """The packed buffers of a row's M ranks in one shared window, mapped on every rank.

    ``array`` is this rank's buffer (a PackedBuffer's memory); ``stack`` is an (M, size) view
    of all of them when MPI placed them at a constant stride (MPICH does, with the default
    contiguous allocation), else None and the kernels fall back to numpy on ``peers``.
    """

    def __init__(self, row_comm, size, dtype, progress):
        self.comm, self.progress = row_comm, progress
        dtype = numpy.dtype(dtype)
        self.win = MPI.Win.Allocate_shared(size * dtype.itemsize, dtype.itemsize,
                                           comm=row_comm)
        self.peers = []
        for r in range(row_comm.size):
            mem, _ = self.win.Shared_query(r)
            self.peers.append(numpy.frombuffer(mem, dtype=dtype, count=size))
        self.me = row_comm.rank
        self.array = self.peers[self.me]
        self.stack = self._stacked(size, dtype)
        # A passive epoch over the whole window for its lifetime: Win_sync needs one.
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def _stacked(self, size, dtype):
        addrs = [p.__array_interface__['data'][0] for p in self.peers]
        if len(addrs) < 2:
            return None
        stride = addrs[1] - addrs[0]
        if stride <= 0 or stride % dtype.itemsize or any(
                b - a != stride for a, b in zip(addrs, addrs[1:])):
            return None
        nbytes = stride * (len(addrs) - 1) + size * dtype.itemsize
        raw = (ctypes.c_char * nbytes).from_address(addrs[0])
        return numpy.ndarray((len(addrs), size), dtype=dtype, buffer=raw,
                             strides=(stride, dtype.itemsize))

    def barrier(self):
        self.win.Sync()
        self.progress(self.comm, 'Barrier')
        self.win.Sync()

    def reduce_chunk(self, start, c):
        """Own buffer[start:start+c] = sum over positions of their buffer[start:start+c]."""
        out = self.array[start:start + c]
        if self.stack is not None:
            _sum_rows(self.stack, start, start + c, out)
            return out
        total = self.peers[0][start:start + c].copy()
        for p in self.peers[1:]:
            total += p[start:start + c]
        out[...] = total
        return out

    def gather(self, lo, c):
        """Copy chunk k of segment ``lo`` from position k, for every other position k."""
        if self.stack is not None:
            _gather_rows(self.stack, self.me, lo, c)
            return
        for k, p in enumerate(self.peers):
            if k != self.me:
                self.array[lo + k * c:lo + (k + 1) * c] = p[lo + k * c:lo + (k + 1) * c]

    def free(self):
        if self.win != MPI.WIN_NULL and not MPI.Is_finalized():
            self.win.Unlock_all()
            self.win.Free()
        self.stack = self.peers = self.array = None
