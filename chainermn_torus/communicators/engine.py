"""The torus engine: the one all-reduce of pure_allreduce, rsaa, rsap (every sync and
reduce-scatter mode) and the node-shared variant, made with its strategies.

The gradients are packed into one persistent buffer per layout (``_packing``), cut into
segments (``algorithms.segments``), and each segment of n elements is averaged on a grid of
P = M x N ranks in rows of M (``_grid``; Tamura & Hanawa, Mikami et al.). It is split into a
main part of M equal chunks of c = n // M elements and a tail of fewer than M:

  phase 1  reduce-scatter in the row: position j gets the row sum of chunk j;
  phase 2  all-reduce of that chunk in the column (N ranks), so it is the sum over all P
           ranks; then divide it by P, into its place (1/M of the segment, not all of it);
  phase 3  all-gather in the row: every position gets every chunk.

The tail (under M elements) is summed with one small all-reduce over all ranks. With M = 1
there are no row phases and the column is every rank: pure_allreduce. ``algorithms.torus``
describes the same schedule without MPI (the planner and the simulator read it).

The strategies, handed to the constructor and never changed:

* ``rows``: makes a buffer's *row phases* (phases 1 and 3) with the buffer, owning the MPI
  state they need: messages (``MessageRows``), rsap's put rounds (``_rsap_modes``) or reads
  of the peers' buffers in a node-shared window (``_shm``); None where M = 1;
* a buffer's *reducer*, by its dtype (``reducer_for``): MPI's sum (``MpiSum``) or, for
  float16 and bfloat16, which MPI cannot sum, the one of ``_half``;
* the *segment plan*: ``segment_bytes``, and ``prescaled`` (the packing multiplies by 1/P;
  else the 1/M chunk is divided after the sum). Every rank ends with the same bits;
* ``exact``: the buffers are ``_exact``'s, 64-bit integers on a grid per array (one small
  MAX all-reduce first; each position decodes its chunk once phase 2 made it final, and
  phase 3 moves the float means where the rows allow): the means' bits then do not depend
  on P, the grid or the strategies either, only on the gradients and ``terms``.
Why it is built so: docs/internals.md (communicators/engine.py).
"""
import collections
import contextlib
import time
from typing import Any, Callable, ContextManager, Optional, Sequence

import chainer
import numpy
from mpi4py import MPI

from chainermn_torus.algorithms.segments import split_plan
from chainermn_torus.communicators import _dtypes, _exact, _packing
from chainermn_torus.communicators._debug import check_means_finite
from chainermn_torus.communicators._half import HalfReducer
from chainermn_torus.communicators._grid import Grid
from chainermn_torus.communicators._progress import BLOCKING, Progress
from chainermn_torus.process import STATE

__all__ = ['TorusEngine', 'MessageRows', 'MpiSum', 'reducer_for', 'divide_by_size', 'prescale']

_NO_SPAN = contextlib.nullcontext()


class MpiSum:
    """A buffer's sums by MPI's own reductions (float32, float64), in three steps that every
    reducer offers (``_half.HalfReducer`` the same):

      reduce_scatter(comm, src, out)   out = the sum over ranks of block ``comm.rank`` of src;
      allreduce(comm, array, src=None) array = the sum over ranks of src (default: array);
      sum_small(comm, array, src=None) the same, for a few elements (a segment's tail).

    ``op`` is the MPI operation (one-sided MPI_Accumulate needs it; None where there is none).
    Blocking waits call mpi4py directly; another wait (polling, a test's recorder) goes
    through the ``progress`` it was made with.
    """

    op = MPI.SUM
    own_chunk = False   # reduce_scatter sums into the ``out`` it is given

    def __init__(self, mpi_type: Any, progress: Optional[Progress] = None) -> None:
        self.mpi_type = mpi_type
        self.progress = progress or BLOCKING
        self.direct = self.progress.direct

    def reduce_scatter(self, comm: Any, src: Any, out: Any) -> Any:
        t = self.mpi_type
        send, recv = [src[:comm.size * out.size], t], [out, t]
        if self.direct:
            comm.Reduce_scatter_block(send, recv, op=self.op)
        else:
            self.progress(comm, 'Reduce_scatter_block', send, recv, op=self.op)
        return out

    def allreduce(self, comm: Any, array: Any, src: Any = None) -> Any:
        if comm.size == 1:
            if src is not None:
                array[...] = src
            return array
        t = self.mpi_type
        send = MPI.IN_PLACE if src is None else [src, t]
        if self.direct:
            comm.Allreduce(send, [array, t], op=self.op)
        else:
            self.progress(comm, 'Allreduce', send, [array, t], op=self.op)
        return array

    sum_small = allreduce


def reducer_for(dtype: Any, mpi_type: Any, progress: Progress) -> Any:
    """The reducer for a buffer of ``dtype`` whose collectives wait by ``progress``."""
    if _dtypes.is_half(dtype):
        return HalfReducer(mpi_type, progress, numpy.dtype(dtype))
    return MpiSum(mpi_type, progress)


def divide_by_size(src: Any, size: int, out: Any = None) -> Any:
    """out = src / size, in place when ``out`` is None."""
    if out is None:
        out = src
    if size == 1:
        if out is not src:
            out[...] = src
        return out
    return numpy.divide(src, src.dtype.type(size), out=out)


def prescale(size: int) -> float:
    """The factor gradients are multiplied by while packed, when the division comes first."""
    return 1.0 / size


class MessageRows:
    """The torus's row phases by messages (rsaa's; rsap's where its puts do not apply), for
    one buffer (numpy's memory): phase 1 by MPI_Reduce_scatter_block into a scratch chunk
    (reused across calls), phase 3 by in-place MPI_Allgather of the divided chunk, already
    at its offset. Owns nothing MPI must free."""

    scatter_name, gather_name = 'reduce_scatter', 'allgather'
    array = means = memory = None  # the buffer's memory is numpy's
    phase1_by_reducer = True   # phase 1 is the buffer's reducer's reduce_scatter
    reads_peer_floats = False  # (the node-shared rows' exact sum: ``_shm``)

    def __init__(self, row_comm: Any, progress: Progress) -> None:
        self.row_comm = row_comm
        self._allgather = progress.bind(row_comm, 'Allgather')
        self.scratch: Any = None

    def reduce_scatter(self, part: Any, src: Any, buf: Any, lo: int) -> Any:
        """Phase 1: the row sum of this position's chunk of ``src`` (or ``part``)."""
        if buf.reducer.own_chunk:   # the exact sum's: its chunk is its own
            return buf.reducer.reduce_scatter(self.row_comm, part if src is None else src)
            # (None: the exact sum's chunk, already decoded into its means)
        c = part.size // self.row_comm.size
        if self.scratch is None or self.scratch.size < c:
            self.scratch = numpy.empty(c, dtype=part.dtype)
        return buf.reducer.reduce_scatter(self.row_comm, part if src is None else src,
                                          self.scratch[:c])

    def gather(self, buf: Any, lo: int, c: int) -> None:
        """Phase 3: every position gets every chunk of [lo, lo + M*c) of ``buf.gathered``
        (the buffer, or the exact sum's decoded means)."""
        array, mpi_type = buf.gathered
        self._allgather(MPI.IN_PLACE, [array[lo:lo + self.row_comm.size * c], mpi_type])

    def end_call(self) -> None:
        pass

    def free(self) -> None:
        pass


class TorusEngine:
    """Packed-buffer gradient averaging on a grid, with the strategies it is made with.

    Args:
        mpi_comm: the ranks that average (the communicator's).
        grid: a ``_grid.Grid`` (its row and column communicators), or None: M = 1 and the
            column is ``mpi_comm`` (pure_allreduce).
        rows: ``rows(layout)`` makes a buffer's row phases (an object with ``array`` and
            ``memory``, None where numpy allocates the buffer, ``reduce_scatter(part, src,
            buf, lo)``, ``gather(buf, lo, c)``, ``end_call()``, ``free()`` and the names of
            its two phases); unused where M = 1.
        dtype: the transfer dtype (None: float32, float64 for float64 models).
        segment_bytes: bytes per segment; 0 sends the whole buffer at once.
        prescaled: the packing multiplies by 1/P (the sum is the mean).
        progress: how collectives are waited for (``_progress``).
        name: the communicator's name, for messages.
        reducer: ``reducer(dtype, mpi_type, progress)`` makes a buffer's sum
            (``reducer_for``: MPI's, or float16's and bfloat16's).
        exact: the exact, order-independent sum (``_exact``); ``dtype`` must be None.
        terms: the gradients the exact sum adds (None: P, one a rank).
    """

    # A few layouts keep their buffers, so that alternating models (a GAN's generator and
    # discriminator) do not reallocate, nor recreate rsap's window, on every call.
    MAX_BUFFERS = 4

    def __init__(self, mpi_comm: Any, grid: Optional[Grid],
                 rows: Optional[Callable[[Any], Any]], dtype: Any = None,
                 segment_bytes: int = 0, prescaled: bool = False,
                 progress: Progress = BLOCKING, name: str = '',
                 reducer: Callable[[Any, Any, Progress], Any] = reducer_for,
                 exact: bool = False, terms: Optional[int] = None) -> None:
        self.mpi_comm, self.grid, self.rows = mpi_comm, grid, rows
        self.dtype, self.segment_bytes = dtype, segment_bytes
        self.prescaled, self.progress, self.name = prescaled, progress, name
        self.reducer = reducer
        self.size = mpi_comm.size
        if exact and dtype is not None:
            raise ValueError(f'chainermn_torus: the exact sum travels as int64, not {dtype}')
        self.exact = bool(exact)
        self.terms = self.size if terms is None else int(terms)
        if grid is None:
            self.M, self.pos, self.col_comm = 1, 0, mpi_comm
        else:
            self.M, self.pos, self.col_comm = grid.M, grid.pos, grid.col_comm
        # The small all-reduces (the layout check; the exact sum's MAX), waited for as the
        # rest (a bound mpi4py method when blocking: no call of ours in between).
        self._small = progress.bind(mpi_comm, 'Allreduce')
        self.layouts: dict = {}
        # (layout, slot) -> PackedBuffer, the most recently used last
        self.buffers: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.timings: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.calls = 0

    def successor(self, dtype: Any) -> 'TorusEngine':
        """The same engine for another transfer dtype (``set_config``): the buffers made so
        far move to it, to be evicted or freed collectively as its own."""
        other = TorusEngine(self.mpi_comm, self.grid, self.rows, dtype, self.segment_bytes,
                            self.prescaled, self.progress, self.name, self.reducer,
                            self.exact, self.terms)
        other.buffers, self.buffers = self.buffers, collections.OrderedDict()
        other.timings, other.calls = self.timings, self.calls
        return other

    # --- the gradient calls -------------------------------------------------------------------
    def mean_grad_in_slot(self, model: Any, zero_fill: bool = False, slot: int = 0,
                          more: Sequence[Any] = ()) -> None:
        """``multi_node_mean_grad`` using buffer ``slot`` (double buffering uses 0 and 1).

        Gradients left as views of one slot stay valid while the other slot is in use.
        ``more``: the exact sum's other terms on this process (the other virtual ranks it
        holds), each a sequence of arrays (None: zeros) in the order of the model's
        gradients taking part (``_packing.grad_params``).
        """
        t0 = time.perf_counter()
        named = _packing.grad_params(model, zero_fill)
        buf = self._buffer_for(self._layout_of(named), slot)
        if more and not self.exact:
            raise ValueError('chainermn_torus: more than one gradient set a process is summed '
                             'by the exact sum only (exact_sum=True)')
        if self.exact:
            buf.more = more
            buf.find_scales(named, 0, len(named), self._small)
        t1 = time.perf_counter()
        pack = 0.0
        scale = prescale(self.size) if buf.prescaled else None
        timeline = STATE.timeline  # --timeline's (runtime.timeline), else None
        for segment in buf.plan:
            tp = time.perf_counter()
            src = buf.send_source(named, segment, scale)
            tq = time.perf_counter()
            pack += tq - tp
            if timeline is not None and src is None:
                timeline.add('pack', tp, tq)
            self._mean_segment(buf, segment[0], segment[1], src, timeline)
        if self.exact:
            buf.more = ()   # not kept past the call
        self._end_call(buf)
        t2 = time.perf_counter()
        buf.unpack_grads(named)
        t3 = time.perf_counter()
        tm = self.timings
        tm['check'] += t1 - t0
        tm['pack'] += pack
        tm['communicate'] += t2 - t1 - pack
        tm['unpack'] += t3 - t2
        tm['total'] += t3 - t0
        self.calls += 1

    def mean_grads_by_bucket(self, named: Sequence[Any], bounds: Sequence[int],
                             ready: Callable[[int], None]) -> Any:
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
        buf = self._buffer_for(layout, slot=0)
        if int(bounds[-1]) != layout.size:
            raise ValueError(f'chainermn_torus: bucket bounds end at {bounds[-1]}, the gradients '
                             f'have {layout.size} '
                             'elements')
        scale = prescale(self.size) if buf.prescaled else None
        timeline = STATE.timeline
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
            if self.exact:  # the bucket's arrays (its bounds are array bounds)
                buf.find_scales(named, *_arrays_between(layout, bounds[b], bounds[b + 1]),
                                self._small)
            for segment in segments:
                tp = time.perf_counter()
                src = buf.send_source(named, segment, scale)
                pack += time.perf_counter() - tp
                self._mean_segment(buf, segment[0], segment[1], src, timeline)
        self._end_call(buf)
        t1 = time.perf_counter()
        tm = self.timings
        tm['pack'] += pack
        tm['communicate'] += t1 - t0 - pack - waited
        tm['total'] += t1 - t0 - waited
        self.calls += 1
        return buf

    def mean_array(self, array: Any) -> Any:
        """Average a flat float32/float64 numpy array across ranks in place (benchmarks,
        tests)."""
        layout = _packing.Layout([('array', (array.size,), array.dtype)],
                                 dtype=_exact.WIRE if self.exact else array.dtype)
        _packing.check_same_layout(self.mpi_comm, layout, what='arrays')
        buf = self._buffer_for(layout, checked=True)
        flat = array.reshape(-1)
        if self.exact:
            named = [('array', _Holder(flat))]
            buf.find_scales(named, 0, 1, self._small)
            for segment in buf.plan:
                buf.send_source(named, segment)
        elif buf.prescaled:
            numpy.multiply(flat, prescale(self.size), out=buf.array)
        else:
            buf.array[...] = flat
        timeline = STATE.timeline
        for lo, hi, _ in buf.plan:
            self._mean_segment(buf, lo, hi, None, timeline)
        self._end_call(buf)
        flat[...] = buf.means
        return array

    def _end_call(self, buf: Any) -> None:
        """After a call's last segment, on every rank: the row phases' end (a node barrier
        for shm), the means (the exact sum decodes them), then Chainer's debug-mode check of
        the means, as ChainerMN checks."""
        if buf.rows is not None:
            buf.rows.end_call()
        buf.finish()
        if chainer.is_debug():
            check_means_finite(buf, self.name)

    # --- phases 1-3 of one segment --------------------------------------------------------------
    def _mean_segment(self, buf: Any, lo: int, hi: int, src: Any, timeline: Any) -> None:
        """Replace buf.array[lo:hi] by the mean over ranks of every rank's segment; ``src``
        is the send buffer (a slice of a gradient) or None when the segment's input already
        is in buf.array[lo:hi]."""
        seg, rows, reducer, M, pos = buf.array[lo:hi], buf.rows, buf.reducer, self.M, self.pos
        divisor = buf.sum_divisor(self.size)  # 1: the packing scaled, or decoding divides
        # The exact sum decodes its integers as soon as they are final: this position's chunk
        # before phase 3 where phase 3 moves the decoded means, else the segment after it.
        exact, means_gathered = self.exact, self.exact and buf.gathers_means
        main = (hi - lo) - (hi - lo) % M
        c = main // M
        if c:
            part, part_src = seg[:main], None if src is None else src[:main]
            if M == 1:  # no row: the column is every rank, and the chunk is in place
                with _span(timeline, 'allreduce'):
                    reducer.allreduce(self.col_comm, part, part_src)
                    if divisor != 1:
                        numpy.divide(part, part.dtype.type(divisor), out=part)
                    if exact:
                        buf.decode(lo, lo + main)
            else:
                with _span(timeline, rows.scatter_name):
                    chunk = rows.reduce_scatter(part, part_src, buf, lo)
                if chunk is not None:  # None: decoded already (the exact sum, no column)
                    with _span(timeline, 'allreduce'):
                        if means_gathered:   # the exact sum's column: the means it gathers
                            buf.column_means(self.col_comm, chunk, lo + pos * c)
                        else:
                            reducer.allreduce(self.col_comm, chunk, None)
                            divide_by_size(chunk, divisor, out=seg[pos * c:(pos + 1) * c])
                with _span(timeline, rows.gather_name):
                    rows.gather(buf, lo, c)
                if exact and not means_gathered:
                    buf.decode(lo, lo + main)
        if main < hi - lo:
            with _span(timeline, 'tail'):
                tail = seg[main:]
                reducer.sum_small(self.mpi_comm, tail, None if src is None else src[main:])
                divide_by_size(tail, divisor)
                if exact:
                    buf.decode(lo + main, hi)

    # --- buffers ----------------------------------------------------------------------------------
    def _layout_of(self, named: Sequence[Any]) -> Any:
        # Layouts are cached by their (name, shape, dtype) tuple: building one hashes it.
        key = tuple((n, p.data.shape, p.data.dtype) for n, p in named)
        layout = self.layouts.get(key)
        if layout is None:
            if len(self.layouts) >= 4 * self.MAX_BUFFERS:
                self.layouts.clear()
            layout = self.layouts[key] = _packing.Layout(
                key, dtype=_exact.WIRE if self.exact else self.dtype)
        return layout

    def _buffer_for(self, layout: Any, slot: int = 0, checked: bool = False) -> Any:
        """The buffer of ``layout`` and ``slot``, after checking that every rank has the
        same layout (one all-reduce of two int64 values)."""
        if not checked:
            _packing.check_same_layout(self.mpi_comm, layout, allreduce=self._small)
        key = (layout, slot)
        buf = self.buffers.pop(key, None)
        if buf is None:
            # The layout is the same on every rank (checked above), so collective work
            # in the strategies (rsap's window creation and freeing) is entered by all ranks.
            if len(self.buffers) >= self.MAX_BUFFERS:
                self._release(self.buffers.pop(next(iter(self.buffers))))
            buf = self._new_buffer(layout)
        self.buffers[key] = buf  # most recently used last
        return buf

    def _new_buffer(self, layout: Any) -> Any:
        # segment_bytes counts the bytes on the wire: an exact segment has half the elements
        seg = self.segment_bytes // layout.dtype.itemsize if self.segment_bytes else 0
        rows = self.rows(layout) if self.rows is not None and self.M > 1 else None
        mpi_type = _packing.mpi_type_of(layout.dtype)
        strategies = dict(array=None if rows is None else rows.array,
                          memory=None if rows is None else rows.memory, rows=rows,
                          reducer=self.reducer(layout.dtype, mpi_type, self.progress))
        if self.exact:
            # The rows' memory: ``array`` where phase 1 sums into it (int64: the node-shared
            # rows, rsap's accumulate mode), ``means`` where phase 3 moves the decoded means
            # (rsap's put window, the node-shared rows' second window); none for messages.
            # Phase 1 takes this position's own chunk from the gradients: by messages
            # always (_exact_scatter), in the node-shared rows where every process holds one
            # term (the peers' floats read from their buffers).
            own = rows is not None and (rows.phase1_by_reducer or (
                rows.reads_peer_floats and self.terms == self.size))
            return _exact.ExactBuffer(layout, seg, terms=self.terms,
                                      means=None if rows is None else rows.means,
                                      position=((self.M, self.pos, self.col_comm.size)
                                                if own else None),
                                      **strategies)
        return _packing.PackedBuffer(
            layout, seg, prescaled=self.prescaled or _dtypes.scaled_first(layout.dtype),
            **strategies)

    @staticmethod
    def _release(buf: Any) -> None:
        if buf.rows is not None:  # the row phases own MPI state
            buf.rows.free()
        buf.release()

    def free(self) -> None:
        """Free every buffer (collective: windows and their communicators)."""
        while self.buffers:
            self._release(self.buffers.pop(next(iter(self.buffers))))


class _Holder:
    """A flat array as a parameter whose gradient it is (``mean_array``'s exact sum)."""

    def __init__(self, grad: Any) -> None:
        self.grad = self.data = grad


def _arrays_between(layout: Any, lo: int, hi: int) -> tuple:
    """(first, last): the arrays of ``layout`` in elements [lo, hi), at array bounds."""
    offs = layout.offsets
    return (int(numpy.searchsorted(offs, lo, side='left')),
            int(numpy.searchsorted(offs, hi, side='left')))


def _span(timeline: Any, name: str) -> ContextManager[Any]:
    """The phase as a span of --timeline's trace (runtime.timeline), else nothing."""
    return _NO_SPAN if timeline is None else timeline.span(name)

