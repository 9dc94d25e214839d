"""What the packed-buffer communicators share (pure_allreduce, rsaa, rsap): the buffers,
the grid, the segment plan, the timings; what every communicator of ours shares is
``interface.Communicator``.

A subclass implements one method, ``_mean_segment(buf, lo, hi, src)``: replace
``buf.array[lo:hi]`` on every rank by the mean over ranks of everyone's ``array[lo:hi]``,
bitwise identical on all ranks.
"""
import collections
import time

import chainer
import numpy

from chainermn_torus.algorithms.segments import split_plan
from chainermn_torus.process import STATE
from chainermn_torus.communicators import _dtypes, _packing, interface
from chainermn_torus.communicators._reduction import prescale, reducer_for
from chainermn_torus.communicators._debug import check_means_finite
from chainermn_torus.communicators._grid import Grid, default_grid, parse_grid
from chainermn_torus.communicators._progress import Progress


__all__ = ['TorusCommunicatorBase']


# A clone's node-shared buffers come on top of the main communicator's: a refusal has to
# say so, or the need looks like what the job already allocated once.
CLONE_PURPOSE = (' of the background thread\'s copy of the communicator (double buffering or '
                 'overlap: a second set beside the main communicator\'s, and double buffering '
                 'keeps two, one per step in flight, so the job needs up to three times one '
                 'set)')


class TorusCommunicatorBase(interface.Communicator):
    """Packed-buffer gradient averaging: the gradients packed into one buffer per layout,
    averaged segment by segment by the subclass's ``_mean_segment``.

    Args (beside ``interface.Communicator``'s):
        grid: (M, N) or "MxN"; see ``chainermn_torus.communicators._grid``. Ignored by
            ``pure_allreduce``, which has no grid.
        allreduce_grad_dtype: numpy.float16 is scaled by 1/P before the sum so it cannot
            overflow, moved by MPI and summed in float32 by numpy with one float16 rounding
            per phase (see ``_half``).
    """

    prescaled = False  # True: the packing step multiplies by 1/P (see _reduction)
    shm_purpose = ''   # said in /dev/shm refusals; clone() sets CLONE_PURPOSE

    def __init__(self, mpi_comm=None, grid=None, segment_size=None, allreduce_grad_dtype=None,
                 settings=None):
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, settings)
        self.grid = None
        if self.uses_grid:
            self.grid = self._make_grid(grid)
            self._options['grid'] = grid
        self._layouts = {}
        self._buffers = collections.OrderedDict()
        self._timings = collections.defaultdict(float)

    # --- grid -----------------------------------------------------------------------------
    def _make_grid(self, grid):
        # ChainerMN's init_ranks already grouped ranks by host name; every rank must agree on
        # whether nodes are uniform, so the node sizes are compared across all ranks.
        uniform = len(set(self.mpi_comm.allgather(self.intra_size))) == 1
        if grid is not None:
            shape, reason = parse_grid(grid, self.size), 'grid keyword'
        else:
            shape, reason = default_grid(self.size, self.intra_size, self.inter_size, uniform,
                                         self.settings['grid'])
        self.grid_reason = reason
        node_aligned = (uniform and shape[0] == self.intra_size and shape[1] == self.inter_size
                        and self.inter_size > 1)
        node_ranks = (self.inter_rank, self.intra_rank) if node_aligned else None
        return Grid(self.mpi_comm, shape, node_ranks)

    @property
    def timings(self):
        """Seconds spent so far in each part of the gradient calls: check, pack, communicate,
        unpack, total."""
        return self._timings

    # --- the gradient calls -----------------------------------------------------------
    def _grad_dtype_changed(self):
        # Layouts carry the transfer dtype: forget them so the next call builds new ones.
        # Buffers of the old dtype are evicted in turn (collectively, see _buffer_for).
        self._layouts.clear()

    def mean_grad_in_slot(self, model, zero_fill=False, slot=0):
        """``multi_node_mean_grad`` using buffer ``slot`` (double buffering uses 0 and 1).

        Gradients left as views of one slot stay valid while the other slot is in use.
        """
        t0 = time.perf_counter()
        named = _packing.grad_params(model, zero_fill)
        layout = self._layout_of(named)
        _packing.check_same_layout(self.mpi_comm, layout, progress=self.progress)
        buf = self._buffer_for(layout, slot)
        t1 = time.perf_counter()
        pack = 0.0
        scale = prescale(self._size) if buf.prescaled else None
        for lo, hi, index in buf.plan:
            tp = time.perf_counter()
            src = buf.send_source(named, (lo, hi, index), scale)
            tq = time.perf_counter()
            pack += tq - tp
            tl = STATE.timeline  # --timeline's (runtime.timeline), else None
            if tl is not None and src is None:
                tl.add('pack', tp, tq)
            self._mean_segment(buf, lo, hi, src)
        self._end_call(buf)
        if chainer.is_debug():  # chainer.set_debug(True): checked as ChainerMN checks
            check_means_finite(buf, self.name)
        t2 = time.perf_counter()
        buf.unpack_grads(named)
        t3 = time.perf_counter()
        tm = self.timings
        tm['check'] += t1 - t0
        tm['pack'] += pack
        tm['communicate'] += t2 - t1 - pack
        tm['unpack'] += t3 - t2
        tm['total'] += t3 - t0
        self._count['calls'] += 1

    # ChainerMN's call is slot 0's (interface.Communicator says the same for every one of
    # ours); named again here so that it is this call, not one more hop to it.
    multi_node_mean_grad = mean_grad_in_slot

    def mean_grads_by_bucket(self, named, bounds, ready):
        """Average gradients bucket by bucket as backward finishes them (``overlap=True``).

        ``named``: (name, holder) pairs in the order backward produces them; a holder has
        ``data`` (the parameter's array) and ``grad`` (None until ready, None for an unused
        parameter, which counts as zeros). ``bounds``: element offsets [0, b1, ..., size]
        of the buckets, at array boundaries. ``ready(b)`` blocks until bucket b's gradients
        are set. Buckets are averaged in index order on every rank, so the collectives
        match whatever order backward finishes them in. Returns the buffer: the means, in
        this layout, are in ``buf.array`` (``buf.unpack_grads`` gives them to parameters).
        """
        t0 = time.perf_counter()
        layout = self._layout_of(named)
        _packing.check_same_layout(self.mpi_comm, layout, progress=self.progress)
        buf = self._buffer_for(layout, slot=0)
        if int(bounds[-1]) != layout.size:
            raise ValueError('chainermn_torus: bucket bounds end at {}, the gradients have {} '
                             'elements'.format(bounds[-1], layout.size))
        scale = prescale(self.size) if buf.prescaled else None
        tm = self.timings
        waited = pack = 0.0
        # The cut is the same every step while the layout and the buckets are: kept.
        key = tuple(bounds)
        if buf.bucket_plan[0] != key:
            buf.bucket_plan = (key, split_plan(buf.plan, bounds))
        for b, segments in enumerate(buf.bucket_plan[1]):
            tw = time.perf_counter()
            ready(b)
            tp = time.perf_counter()
            waited += tp - tw
            for lo, hi, index in segments:
                tp = time.perf_counter()
                src = buf.send_source(named, (lo, hi, index), scale)
                pack += time.perf_counter() - tp
                self._mean_segment(buf, lo, hi, src)
        self._end_call(buf)
        if chainer.is_debug():
            check_means_finite(buf, self.name)
        t1 = time.perf_counter()
        tm['pack'] += pack
        tm['communicate'] += t1 - t0 - pack - waited
        tm['total'] += t1 - t0 - waited
        self._count['calls'] += 1
        return buf

    def clone(self, poll_interval=None):
        """The same communicator (grid and options) on a duplicate of its MPI communicator.

        Collectives on the clone never match the original's, so a background thread can
        average gradients on it while the main thread uses the original. With
        ``poll_interval`` (seconds) the clone waits for its collectives by polling instead of
        spinning (see ``_progress``).
        """
        opts = self.remade_options()
        if self.grid is not None:
            opts['grid'] = self.grid.shape
        twin = self.__class__(mpi_comm=self.mpi_comm.Dup(), **opts)
        twin.progress = Progress(poll_interval)
        twin.shm_purpose = CLONE_PURPOSE
        return twin

    def finalize(self):
        self._release_buffers()
        if self.grid is not None:
            self.grid.free()
            self.grid = None
        super().finalize()

    # --- the algorithm --------------------------------------------------------------------
    def mean_array(self, array):
        """Average a flat float32/float64 numpy array across ranks in place (benchmarks, tests)."""
        layout = _packing.Layout([('array', (array.size,), array.dtype)], dtype=array.dtype)
        _packing.check_same_layout(self.mpi_comm, layout, what='arrays')
        buf = self._buffer_for(layout)
        if buf.prescaled:
            numpy.multiply(array.reshape(-1), prescale(self.size), out=buf.array)
        else:
            buf.array[...] = array.reshape(-1)
        for lo, hi, _ in buf.plan:
            self._mean_segment(buf, lo, hi, None)
        array.reshape(-1)[...] = buf.array
        self._end_call(buf)
        if chainer.is_debug():
            check_means_finite(buf, self.name)
        return array

    def _end_call(self, buf):
        """Called on every rank after the last segment of a call (the torus: the row
        phases' end, a node barrier for shm)."""

    def _mean_segment(self, buf, lo, hi, src):
        """Replace buf.array[lo:hi] by the mean over ranks of every rank's segment.

        ``src`` is the send buffer (a slice of a gradient) or None when the segment's input
        already is in buf.array[lo:hi].
        """
        raise NotImplementedError

    # --- buffer lifetime ------------------------------------------------------------------
    # A few layouts keep their buffers, so that alternating models (a GAN's generator and
    # discriminator) do not reallocate, nor recreate rsap's window, on every call.
    MAX_BUFFERS = 4

    def _layout_of(self, named):
        # Layouts are cached by their (name, shape, dtype) tuple: building one hashes it.
        key = tuple((n, p.data.shape, p.data.dtype) for n, p in named)
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= 4 * self.MAX_BUFFERS:
                self._layouts.clear()
            layout = self._layouts[key] = _packing.Layout(key, dtype=self.allreduce_grad_dtype)
        return layout

    def _buffer_for(self, layout, slot=0):
        key = (layout, slot)
        buf = self._buffers.pop(key, None)
        if buf is None:
            # The layout is the same on every rank (check_same_layout passed), so collective
            # work in the hooks (rsap's window creation and freeing) is entered by all ranks.
            if len(self._buffers) >= self.MAX_BUFFERS:
                oldest = next(iter(self._buffers))
                self._release_buffer(self._buffers.pop(oldest))
            seg = self.segment_bytes // layout.dtype.itemsize if self.segment_bytes else 0
            # The buffer is made with its strategies: MPI's sum or float16's, decided here
            # once (the phases just call it); float16 and bfloat16 always scaled first
            # (_dtypes.scaled_first).
            buf = self._new_buffer(layout, seg, reducer=reducer_for(
                layout.dtype, _packing.mpi_type_of(layout.dtype), self.progress),
                prescaled=self.prescaled or _dtypes.scaled_first(layout.dtype))
        self._buffers[key] = buf  # most recently used last
        return buf

    def _new_buffer(self, layout, segment_elems, **strategies):
        return _packing.PackedBuffer(layout, segment_elems, **strategies)

    def _release_buffer(self, buf):
        if buf.rows is not None:  # the torus's row phases own MPI state (rsaa.py)
            buf.rows.free()
        buf.release()

    def _release_buffers(self):
        while self._buffers:
            self._release_buffer(self._buffers.pop(next(iter(self._buffers))))

    def describe(self):
        grid = '' if self.grid is None else ', grid (M, N) = {} [{}]'.format(
            self.grid.shape, self.grid_reason)
        dtype = '' if self.allreduce_grad_dtype is None else ', gradients sent as {}'.format(
            self.allreduce_grad_dtype.name)
        return '{} on P = {}{}, segment {} bytes{}{}'.format(
            self.name, self.size, grid, self.segment_bytes or 'whole buffer', dtype,
            self._describe_variant())

    def _describe_variant(self):
        return ''

