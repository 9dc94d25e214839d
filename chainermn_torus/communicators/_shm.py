"""The ``shm`` variant's row phases: through an MPI-3 shared-memory window, rows inside nodes.

The M ranks of a grid row that share a node allocate their packed buffers together with
``MPI_Win_allocate_shared`` on the row communicator, and every rank maps every peer's buffer.
The row phases then need no messages:

  reduce-scatter  in M steps, position q adds its chunk (q + s) % M, read straight from its
                  gradient, into the owner's buffer (``reduce_in_turns``): no packing copy;
  all-gather      every position copies chunk k straight from position k's buffer.

Only the column all-reduce (between nodes) goes through MPI. Each chunk is summed once, in a
fixed order, and copied: all ranks end with the same bits.

Ordering between ranks is a node barrier (``MPI_Win_sync`` + ``MPI_Barrier`` +
``MPI_Win_sync``, the unified-memory idiom): after each reduce step, before the gather, and
at the end of a call (so no rank overwrites its buffer, or lets the optimizer write into
gradients that view it, while a peer still copies from it).
"""
import numpy
from mpi4py import MPI

from chainermn_torus.communicators import _exact
from chainermn_torus.communicators._dtypes import is_half as _is_half
from chainermn_torus.communicators._window import check_node_room, populate_or_free
from chainermn_torus.errors import ConfigError
from chainermn_torus.runtime.cpu import jit

__all__ = ['ShmRows', 'NodeBuffers', 'rows_within_nodes', 'resolve_shm', 'node_rows']

_SHM_CHOICES = (None, True, False)


def rows_within_nodes(row_comm, mpi_comm):
    """True on every rank iff every grid row lies inside one shared-memory node."""
    node = row_comm.Split_type(MPI.COMM_TYPE_SHARED)
    inside = node.size == row_comm.size
    node.Free()
    return bool(mpi_comm.allreduce(1 if inside else 0, op=MPI.MIN))


def resolve_shm(shm, grid, mpi_comm, intra_size, wanted_by_default=True):
    """The ``shm`` option of rsaa and rsap: None = on when every grid row lies inside one
    node, True = required (refused where a row spans nodes), False = off.
    ``wanted_by_default`` False (an option that needs the message phases was given) keeps
    the default off. Collective over ``mpi_comm`` where it has to look."""
    if shm not in _SHM_CHOICES:
        raise ConfigError('chainermn_torus: shm must be None (on where the grid rows lie '
                          f'inside nodes), True or False, got {shm!r}')
    if shm is False or grid.M == 1 or (shm is None and not wanted_by_default):
        return False
    inside = rows_within_nodes(grid.row_comm, mpi_comm)
    if shm and not inside:
        raise ConfigError(
            'chainermn_torus: shm=True needs every grid row inside one node, but grid '
            f'(M, N) = {grid.shape} puts ranks of different nodes in one row ({intra_size} ranks '
            'per node on '
            'this rank\'s node); use M = ranks per node or shm=False')
    return inside


def node_rows(shm, row_comm, layout, progress, purpose=''):
    """ShmRows for a buffer of ``layout`` where ``shm`` (resolved) holds for it, else None:
    float16 and bfloat16 keep the message phases (the node-shared ones sum with MPI's
    types), and an empty buffer has no window."""
    if shm and layout.size and not _is_half(layout.dtype):
        # the exact sum's integers, and a second window for the means phase 3 copies
        means = _exact.means_dtype(layout) if layout.dtype == _exact.WIRE else None
        return ShmRows(row_comm, layout.size, layout.dtype, progress, purpose=purpose,
                       means_dtype=means)
    return None


numba = jit.numba()
if numba is not None:
    # The packed buffers' dtypes: float32, float64 where a model's gradients are; the exact
    # sum (``_exact``) adds int64 and copies its float means (its integers are packed into
    # the window first, so step 0 of the reduction copies nothing).
    @jit.kernel('(float32[::1], float32[::1])', '(float64[::1], float64[::1])',
                '(int64[::1], int64[::1])')
    def _add_into(acc, src):
        for i in numba.prange(src.size):
            acc[i] += src[i]

    @jit.kernel('(float32[::1], float32[::1])', '(float64[::1], float64[::1])')
    def _copy_chunk(src, dst):
        # One flat loop per chunk: it vectorises (an index split by // per element measured
        # 34 ms for 51 MB, against 4 ms for this).
        for i in numba.prange(src.size):
            dst[i] = src[i]
else:
    # The same element-wise float adds and copies on one thread (numba's run on the rank's
    # thread budget): same bits, slower where the budget is more than one thread.
    def _add_into(acc, src):
        numpy.add(acc, src, out=acc)

    def _copy_chunk(src, dst):
        numpy.copyto(dst, src)


class NodeBuffers:
    """The packed buffers of a row's M ranks in one shared window, mapped on every rank.

    ``array`` is this rank's buffer (a PackedBuffer's memory), ``peers[q]`` position q's.
    """

    def __init__(self, row_comm, size, dtype, progress, purpose=''):
        self.comm = row_comm
        self._barrier = progress.bind(row_comm, 'Barrier')  # mpi4py's own where it blocks
        dtype = numpy.dtype(dtype)
        # The row's buffers are one /dev/shm mapping on this node: check it fits first.
        what, needed = check_node_room(row_comm, size * dtype.itemsize,
                                       'the node-shared row buffers' + purpose)
        self.win = MPI.Win.Allocate_shared(size * dtype.itemsize, dtype.itemsize,
                                           comm=row_comm)
        self.peers = []
        for r in range(row_comm.size):
            mem, _ = self.win.Shared_query(r)
            self.peers.append(numpy.frombuffer(mem, dtype=dtype, count=size))
        self.me = row_comm.rank
        self.array = self.peers[self.me]
        populate_or_free(self.win, self.array, row_comm, what, needed)
        # A passive epoch over the whole window for its lifetime: Win_sync needs one.
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def barrier(self, also=None):
        """The node barrier; ``also``: another NodeBuffers whose window is synced with it."""
        if self.peers is None:
            raise RuntimeError('chainermn_torus: this node-shared window was already freed')
        self.win.Sync()
        if also is not None:
            also.win.Sync()
        self._barrier()
        self.win.Sync()
        if also is not None:
            also.win.Sync()

    def reduce_in_turns(self, src, lo, c):
        """Row sums of segment ``lo`` without packing it first: each position's own chunk.

        ``src`` is this rank's input for the segment (a gradient slice, or its own buffer's
        segment when packed). In step s, position q adds its chunk k = (q + s) % M straight
        from ``src`` into position k's buffer (step 0 copies), so each step touches every
        chunk once and a node barrier separates the steps. Chunk k is summed in the fixed
        order k, k-1, k-2, ... on every run. Per rank this moves about 3n bytes, where
        packing and then reading every peer moved 4.5n (measured 22.3 ms against 18.9 ms for
        MPI's reduce-scatter at P=2 on ResNet-50).
        """
        M, me = len(self.peers), self.me
        for step in range(M):
            k = (me + step) % M
            acc = self.peers[k][lo + k * c:lo + (k + 1) * c]
            mine = src[k * c:(k + 1) * c]
            if step == 0:
                if not numpy.shares_memory(acc, mine):
                    _copy_chunk(mine, acc)
            else:
                _add_into(acc, mine)
            self.barrier()
        return self.array[lo + me * c:lo + (me + 1) * c]

    def gather(self, lo, c):
        """Copy chunk k of segment ``lo`` from position k, for every other position k."""
        for k, p in enumerate(self.peers):
            if k != self.me:
                _copy_chunk(p[lo + k * c:lo + (k + 1) * c], self.array[lo + k * c:lo + (k + 1) * c])

    def free(self):
        if self.win != MPI.WIN_NULL and not MPI.Is_finalized():
            self.win.Unlock_all()
            self.win.Free()
        self.peers = self.array = None


class ShmRows:
    """Phases 1 and 3 of the torus (``engine``) for one buffer in a node-shared window.

    Phase 1 reduces in turns straight from the gradients; the chunk it returns is this
    position's own place in the buffer, so phase 2 divides it in place. Phase 3 waits for
    every chunk to be final (a node barrier) and copies the others from the peers; a call
    ends with one more barrier, so no rank overwrites what a peer still reads.

    ``means_dtype`` (the exact sum, whose buffer holds integers): a second window of that
    float type for the decoded means (``means``), which phase 3 copies instead.
    """

    scatter_name, gather_name = 'reduce (shm)', 'gather (shm)'
    phase1_by_reducer = False   # phase 1 reduces in the node's window
    reads_peer_floats = True    # the exact sum's, one term a process: ``reduce_scatter``

    def __init__(self, row_comm, size, dtype, progress, purpose='', means_dtype=None):
        self.node = NodeBuffers(row_comm, size, dtype, progress, purpose=purpose)
        self.M = row_comm.size
        # The buffer's memory is this rank's part of the window (freed with the buffer).
        self.array, self.memory = self.node.array, self.node
        self.means = self.means_node = None
        self._chunk = None   # the exact sum's integer sums of the own chunk, with a column
        if means_dtype is not None:
            self.means_node = NodeBuffers(row_comm, size, means_dtype, progress,
                                          purpose=purpose + ' (the exact sum\'s means)')
            self.means = self.means_node.array
            self.memory = _BothWindows(self.node, self.means_node)

    def reduce_scatter(self, part, src, buf, lo):
        if getattr(buf, 'sends_floats', False):
            return self._exact_floats(part, buf, lo)
        return self.node.reduce_in_turns(part if src is None else src, lo, part.size // self.M)

    def _exact_floats(self, part, buf, lo):
        """Phase 1 of the exact sum where every process holds one term: each position has
        packed its float values into its buffer (``_exact.ExactBuffer.send_source``); after a
        node barrier each reads its chunk's blocks from its peers' buffers, encodes them and
        its own values as it adds them (one pass, on to the means where there is no column:
        None), as the messages' path does (``_exact_scatter``). The bytes read are the
        floats, not their integers."""
        M, me = self.M, self.node.me
        c = part.size // M
        self.node.barrier()
        blocks = [buf.float_part(lo, M * c, peer)[me * c:(me + 1) * c]
                  for q, peer in enumerate(self.node.peers) if q != me]
        if self._chunk is None or self._chunk.size < c:
            self._chunk = numpy.empty(c, _exact.WIRE)
        chunk = self._chunk[:c]
        decode = buf.position[2] == 1
        buf.encode_chunk(lo + me * c, blocks, chunk, decode)
        return None if decode else chunk

    def gather(self, buf, lo, c):
        if self.means_node is None:
            self.node.barrier()
            self.node.gather(lo, c)
        else:   # each position decoded its own chunk into its means
            self.means_node.barrier()
            self.means_node.gather(lo, c)

    def end_call(self):
        self.node.barrier(also=self.means_node)

    def free(self):
        pass  # the window is the buffer's memory: PackedBuffer.release frees it


class _BothWindows:
    """The exact sum's two node-shared windows as one buffer's memory: freed together, the
    means' (which the gradients view) after the buffer's views are detached."""

    def __init__(self, node, means_node):
        self.node, self.means_node = node, means_node

    def free(self):
        self.means_node.free()
        self.node.free()
