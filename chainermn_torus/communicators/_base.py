"""What the three communicators share: options, packing, the layout check, timings.

A subclass implements one method, ``_mean_segment(array, lo, hi, mpi_type)``: replace
``array[lo:hi]`` on every rank by the mean over ranks of everyone's ``array[lo:hi]``,
bitwise identical on all ranks.
"""
import collections
import os
import time

from chainermn.communicators import mpi_communicator_base
from mpi4py import MPI

from chainermn_torus.communicators import _packing
from chainermn_torus.communicators._grid import Grid, default_grid, parse_grid

__all__ = ['TorusCommunicatorBase', 'SEGMENT_ENV', 'DEFAULT_SEGMENT_BYTES']

SEGMENT_ENV = 'CHAINERMN_TORUS_SEGMENT_BYTES'
# Chosen by `python -m chainermn_torus.bench.segments` (see README): on shared memory a
# single 100 MB MPI_Allreduce was slower than the same bytes in pieces, and pieces of a few
# MiB were as fast as any; larger pieces stop paying once the per-call latency is amortised.
DEFAULT_SEGMENT_BYTES = 4 * 1024 * 1024


def _segment_bytes(value):
    if value is None:
        env = os.environ.get(SEGMENT_ENV)
        value = DEFAULT_SEGMENT_BYTES if env is None else env
        source = SEGMENT_ENV if env is not None else 'segment_size'
    else:
        source = 'segment_size'
    try:
        value = int(value)
        if value < 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError('chainermn_torus: {} must be a byte count >= 0 (0 = one message for the '
                         'whole buffer), got {!r}'.format(source, value))
    return value


class TorusCommunicatorBase(mpi_communicator_base.MpiCommunicatorBase):
    """Packed-buffer gradient averaging on top of ChainerMN's MPI communicator base.

    Args:
        mpi_comm: mpi4py communicator (default COMM_WORLD).
        grid: (M, N) or "MxN"; see ``chainermn_torus.communicators._grid``. Ignored by
            ``pure_allreduce``, which has no grid.
        segment_size: bytes per communication segment; 0 sends the whole buffer at once.
            Default from ``CHAINERMN_TORUS_SEGMENT_BYTES`` or 4 MiB.
    """

    name = None
    uses_grid = True

    def __init__(self, mpi_comm=None, grid=None, segment_size=None):
        if mpi_comm is None:
            mpi_comm = MPI.COMM_WORLD
        super(TorusCommunicatorBase, self).__init__(mpi_comm)
        self._options = {'segment_size': segment_size}
        self.segment_bytes = _segment_bytes(segment_size)
        self.grid = None
        if self.uses_grid:
            self.grid = self._make_grid(grid)
            self._options['grid'] = grid
        self._grad_buffer = None
        self.timings = collections.defaultdict(float)
        self.calls = 0

    # --- grid -----------------------------------------------------------------------------
    def _make_grid(self, grid):
        names = self.mpi_comm.allgather(MPI.Get_processor_name())
        counts = collections.Counter(names)
        uniform = len(set(counts.values())) == 1
        if grid is not None:
            shape, reason = parse_grid(grid, self.size), 'grid keyword'
        else:
            shape, reason = default_grid(self.size, self.intra_size, self.inter_size, uniform)
        self.grid_reason = reason
        node_aligned = (uniform and shape[0] == self.intra_size and shape[1] == self.inter_size
                        and self.inter_size > 1)
        node_ranks = (self.inter_rank, self.intra_rank) if node_aligned else None
        return Grid(self.mpi_comm, shape, node_ranks)

    # --- ChainerMN API ----------------------------------------------------------------------
    def multi_node_mean_grad(self, model, zero_fill=False):
        t0 = time.perf_counter()
        named = _packing.grad_params(model, zero_fill)
        layout = _packing.Layout.of_grads(named)
        _packing.check_same_layout(self.mpi_comm, layout)
        buf = self._buffer_for(layout)
        t1 = time.perf_counter()
        buf.pack_grads(named)
        t2 = time.perf_counter()
        self._mean_array(buf.array, buf.mpi_type)
        t3 = time.perf_counter()
        buf.unpack_grads(named)
        t4 = time.perf_counter()
        tm = self.timings
        tm['check'] += t1 - t0
        tm['pack'] += t2 - t1
        tm['unpack'] += t4 - t3
        tm['total'] += t4 - t0
        self.calls += 1

    def bcast_data(self, model):
        """Broadcast all parameters from rank 0 in one message (raw bytes, exact for any dtype)."""
        named = _packing.data_params(model)
        layout = _packing.Layout.of_data_bytes(named)
        _packing.check_same_layout(self.mpi_comm, layout, what='parameters')
        if layout.size == 0:
            return
        buf = _packing.PackedBuffer(layout)  # used once per training run: not kept
        if self.rank == 0:
            buf.pack_data_bytes(named)
        self.mpi_comm.Bcast([buf.array, MPI.BYTE], root=0)
        if self.rank != 0:
            buf.unpack_data_bytes(named)

    def split(self, color, key):
        opts = dict(self._options)
        opts.pop('grid', None)  # the new communicator has another size: default grid
        return self.__class__(mpi_comm=self.mpi_comm.Split(color, key), **opts)

    def finalize(self):
        self._release_buffer()
        if self.grid is not None:
            self.grid.free()
            self.grid = None
        super(TorusCommunicatorBase, self).finalize()

    # --- the algorithm --------------------------------------------------------------------
    def mean_array(self, array):
        """Average a flat float32/float64 numpy array across ranks in place (benchmarks, tests)."""
        self._mean_array(array, _packing.MPI_TYPES[array.dtype])
        return array

    def _mean_array(self, array, mpi_type):
        t0 = time.perf_counter()
        seg = self.segment_bytes // array.itemsize if self.segment_bytes else 0
        for lo, hi in _packing.segments(array.size, seg):
            self._mean_segment(array, lo, hi, mpi_type)
        self.timings['communicate'] += time.perf_counter() - t0

    def _mean_segment(self, array, lo, hi, mpi_type):
        raise NotImplementedError

    # --- buffer lifetime ------------------------------------------------------------------
    def _buffer_for(self, layout):
        if self._grad_buffer is None or self._grad_buffer.layout != layout:
            # The layout changed on every rank alike (check_same_layout passed), so collective
            # re-allocation work in the hook (rsap's window) is entered by all ranks.
            self._release_buffer()
            self._grad_buffer = _packing.PackedBuffer(layout)
            self._on_new_buffer(self._grad_buffer)
        return self._grad_buffer

    def _on_new_buffer(self, buf):
        pass

    def _release_buffer(self):
        self._grad_buffer = None

    def describe(self):
        grid = '' if self.grid is None else ', grid (M, N) = {} [{}]'.format(
            self.grid.shape, self.grid_reason)
        return '{} on P = {}{}, segment {} bytes'.format(self.name, self.size, grid,
                                                         self.segment_bytes or 'whole buffer')
