"""Overlap of the gradient all-reduce with backward, without stale gradients.

``create_multi_node_optimizer(..., overlap=True)``: gradients are grouped into *buckets* in
the order backward produces them (the reverse of the forward pass); as soon as backward has
finished every gradient of a bucket, a communication thread averages that bucket with the
communicator's own algorithm (rsap, rsaa or pure_allreduce, float32 or float16) while the
main thread goes on with the rest of backward. The update waits for the last bucket and then
uses this step's averaged gradients, as the synchronous wrapper does: unlike double
buffering, nothing is one step stale.

Order and matching collectives
------------------------------
The layout (which array goes where in the packed buffer) is the order in which gradients
became final in the first step, rank 0's, broadcast with the parameters; parameters no
function used come last. The thread averages buckets strictly in that order on every rank,
so the collectives of all ranks match even when backward finishes them in another order on
some step or rank; it then only waits longer.

Not supported (each raises ValueError when asked for): ChainerMN's own communicators (the
thread needs ours, which average part of a buffer); ``zero_fill=False`` (the layout must be
known before backward, so an unused parameter travels as zeros; ChainerMN without zero_fill
would instead skip it, which needs every rank's choice first); ``double_buffering=True`` (an
alternative to this, with stale gradients). An ``update()`` called without a loss function
(the script ran backward itself) averages synchronously, said once.

Why it is built so: docs/internals.md (optimizers/overlap.py).
"""
import concurrent.futures
import sys
import threading

import chainer
import numpy

from chainermn_torus.communicators import _packing
from chainermn_torus.optimizers import fpenv
from chainermn_torus.runtime import report, timeline as _timeline
from chainermn_torus.runtime.cpu import jit
from chainermn_torus.runtime.watch import watchdog
from chainermn_torus.watchers import board_layout

WAIT_CALL = board_layout.THREAD_WAIT  # its name on the watchdog's board

__all__ = ['GradientTracker', 'make_buckets', 'OverlapState']


class _Slot:
    """What the packing reads for one parameter: its array (for the layout) and the final
    gradient once backward has produced it."""
    __slots__ = ('data', 'grad')

    def __init__(self, data):
        self.data = data
        self.grad = None


def make_buckets(sizes, itemsize, bucket_bytes):
    """Element offsets [0, ..., sum(sizes)] cutting consecutive arrays into buckets of about
    ``bucket_bytes`` (an array larger than that is a bucket of its own)."""
    bounds, total, start = [0], 0, 0
    for n in sizes:
        if total > start and (total - start + n) * itemsize > bucket_bytes:
            bounds.append(total)
            start = total
        total += n
    if total > start or len(bounds) == 1:
        bounds.append(total)
    return bounds


def _uses(loss, index):
    """For each parameter (index: node -> position), how many functions of the graph under
    ``loss`` take it as an input."""
    counts = [0] * len(index)  # index: the nodes numbered 0 .. n - 1
    func = loss.creator_node
    if func is None:
        return counts
    stack, seen = [func], {func}
    while stack:
        func = stack.pop()
        counted = set()
        for x in func.inputs:
            i = index.get(x)
            if i is not None:
                if i not in counted:
                    counts[i] += 1
                    counted.add(i)
            else:
                creator = x.creator_node
                if creator is not None and creator not in seen:
                    seen.add(creator)
                    stack.append(creator)
    return counts


class GradientTracker(chainer.FunctionHook):
    """Calls ``on_final(i, grad)`` as soon as parameter i's gradient is final in backward.

    Use: ``arm(loss, nodes, on_final)`` after the forward pass (``nodes``: the parameters'
    variable nodes, in the order ``i`` counts), then ``with tracker: loss.backward()``,
    then ``finish(params)``, which reports every parameter not reported yet (unused ones,
    or all of them if the backward frame could not be read) with its final gradient.
    """

    name = 'chainermn_torus_overlap'
    broken = None  # why the gradients could not be followed (then: all at the end)

    def __init__(self):
        self._index = {}
        self._remaining = []
        self._done = []
        self._table = None
        self.on_final = None
        self.order = []  # positions in the order they became final, this step

    def arm(self, loss, nodes, on_final):
        self._index = {node: i for i, node in enumerate(nodes)}
        self._remaining = _uses(loss, self._index)
        self._done = [False] * len(nodes)
        self._table = None
        self.on_final = on_final
        self.order = []

    def backward_postprocess(self, function, in_data, out_grad):
        index = self._index
        if not index or self.broken:
            return
        table = self._table
        if table is None:
            table = self._table = self._find_table()
            if table is None:
                return
        remaining = self._remaining
        counted = ()
        for x in function.inputs:
            i = index.get(x)
            if i is None or i in counted or self._done[i]:
                continue
            counted += (i,)
            remaining[i] -= 1
            if remaining[i] <= 0:
                contributions = table.get(x)
                # Sums the contributions in place, exactly as Chainer will (see module).
                var = chainer._backprop_utils._reduce(contributions) if contributions else None
                self._final(i, None if var is None else var.array)

    def _find_table(self):
        # The caller of the hook (a few frames up, if the hook is wrapped or subclassed) is
        # chainer/_backprop.py's _backprop_to_all, whose local 'grads' is the GradTable.
        frame = sys._getframe(1)
        for _ in range(8):
            if frame is None:
                break
            code = frame.f_code
            if code.co_name == '_backprop_to_all' and \
                    code.co_filename.endswith(('_backprop.py', '_backprop.pyc')):
                table = getattr(frame.f_locals.get('grads'), 'grads', None)
                if isinstance(table, dict):
                    return table
                break
            frame = frame.f_back
        self.broken = (
            f"overlap: this Chainer's backward ({chainer.__version__}) does not keep gradients "
            "where chainer "
            '7.8.1 does; buckets start after backward instead')
        return None

    def _final(self, i, grad):
        self._done[i] = True
        self.order.append(i)
        self.on_final(i, grad)

    def finish(self, params):
        """Report what backward did not (unused parameters), from their final ``grad``."""
        for i, p in enumerate(params):
            if not self._done[i]:
                self._final(i, p.grad)
        self._index = {}
        self._table = None


class _Step:
    """One step's buckets: the slots the thread packs from, and which buckets are ready."""

    def __init__(self, plan):
        self.slots = [(name, _Slot(p.data)) for name, p in plan.named]
        self.missing = list(plan.bucket_counts)
        self.events = [threading.Event() for _ in plan.bucket_counts]
        self.bucket_of = plan.bucket_of
        self.cancelled = False
        self.future = None

    def final(self, i, grad):
        self.slots[i][1].grad = grad
        b = self.bucket_of[i]
        self.missing[b] -= 1
        if self.missing[b] == 0:
            self.events[b].set()

    def wait_ready(self, b):
        self.events[b].wait()
        if self.cancelled:
            raise _Cancelled()

    def cancel(self):
        self.cancelled = True
        for e in self.events:
            e.set()


class _Cancelled(Exception):
    """The main thread failed during backward: the thread stops before its next bucket."""


class _Plan:
    """The layout (parameter order) and bucket bounds every rank uses."""

    def __init__(self, target, order, itemsize, bucket_bytes):
        params = dict(target.namedparams())
        self.names = order
        self.named = [(n, params[n]) for n in order]
        sizes = [params[n].data.size for n in order]
        self.bounds = make_buckets(sizes, itemsize, bucket_bytes)
        offsets = numpy.concatenate([[0], numpy.cumsum(sizes, dtype=numpy.int64)])
        # Bucket of each array: bounds fall on array starts.
        self.bucket_of = [int(numpy.searchsorted(self.bounds, o, side='right')) - 1
                          for o in offsets[:-1]]
        self.bucket_counts = [self.bucket_of.count(b) for b in range(len(self.bounds) - 1)]
        self.signature = _packing.param_signature(target)

    def matches(self, target):
        return _packing.param_signature(target) == self.signature


class OverlapState:
    """What the overlap wrapper keeps between steps (see update_modes.Overlap)."""

    def __init__(self, communicator, background, bucket_bytes):
        self.communicator = communicator
        self.background = background
        self.bucket_bytes = bucket_bytes
        self.tracker = GradientTracker()
        self.plan = None
        self.step = None
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix='chainermn_torus-overlap')

    def say_once(self, key, text):
        report.say(text, self.communicator.rank, key='overlap ' + key, stream=sys.stderr)

    # --- around backward --------------------------------------------------------------------
    def backward(self, target, loss, loss_scale, timings):
        """Run ``loss.backward`` with buckets averaged as they become final (when a plan for
        this model exists), else just backward, recording the order for the next plan."""
        plan = self.plan if self.plan is not None and self.plan.matches(target) else None
        named = plan.named if plan is not None else _packing.data_params(target)
        params = [p for _, p in named]
        step = None
        if plan is not None:
            step = self.step = _Step(plan)
            step.future = self.executor.submit(self._run, step, plan, timings)
            on_final = step.final
        else:
            def on_final(i, grad):
                pass
        tracker = self.tracker
        tracker.arm(loss, [p.node for p in params], on_final)
        try:
            with tracker:
                loss.backward(loss_scale=loss_scale)
            tracker.finish(params)
        except BaseException:
            if step is not None:
                step.cancel()
                self.step = None
            raise
        if tracker.broken:
            self.say_once('broken', tracker.broken)
        return [named[i][0] for i in tracker.order]

    def _run(self, step, plan, timings):
        # As the double-buffering thread (multi_node): numba kernels in this thread use one
        # thread, so no OpenMP team spins on the cores backward computes on.
        numba = jit.numba()
        if numba is not None:
            numba.set_num_threads(1)
        if fpenv.flush_denormals_enabled():
            fpenv.set_flush_denormals(True)  # per thread
        comm = self.background
        before = comm.timings['total']  # the communicator's time, not the waits for buckets
        buf = comm.mean_grads_by_bucket(step.slots, plan.bounds, step.wait_ready)
        timings['communicate'] += comm.timings['total'] - before
        return buf

    def wait(self, target):
        """The averaged gradients of the step in flight, given to ``target``'s parameters."""
        step, self.step = self.step, None
        with _timeline.phase('wait'), watchdog.in_call(WAIT_CALL):
            buf = step.future.result()  # re-raises the thread's error, with its traceback
        buf.unpack_grads(self.plan.named)
        return buf

    def mean_now(self, target):
        """Average ``target``'s gradients in this plan's layout, on the calling thread, all at
        once (a step whose backward was not followed: the first after a resume, or one the
        script ran backward for itself); the same buckets, so the same sums."""
        plan = self.plan  # the parameters themselves carry data and their final grad
        buf = self.background.mean_grads_by_bucket(plan.named, plan.bounds, lambda b: None)
        buf.unpack_grads(plan.named)

    def drop(self):
        """Forget the step in flight (parameters changed): wait for it, discard the result."""
        step, self.step = self.step, None
        if step is not None:
            with watchdog.in_call(WAIT_CALL):
                step.future.result()

    def new_plan(self, target, order, itemsize):
        """Rank 0's order of this step (all ranks must use one layout), then the rest."""
        order = self.communicator.mpi_comm.bcast(order, root=0)
        seen = set(order)
        rest = [n for n, _ in _packing.data_params(target) if n not in seen]
        self.plan = _Plan(target, list(order) + rest, itemsize, self.bucket_bytes)

    def finalize(self):
        self.drop()
        self.executor.shutdown(wait=True)
        if self.background is not None:
            self.background.finalize()
            self.background = None

