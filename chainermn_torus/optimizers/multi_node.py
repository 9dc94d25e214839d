"""Multi-node optimizer wrapper for CPU: ChainerMN's semantics, plus double buffering,
fused updates, flush-to-zero and a NaN/Inf check.

``create_multi_node_optimizer(actual_optimizer, communicator)`` behaves like ChainerMN's: the
first ``update`` (and any update after the set of parameters changed) broadcasts rank 0's
parameters instead of updating; later updates average the gradients with the communicator and
then run the wrapped optimizer; attributes are read from and written to the wrapped optimizer.

Double buffering (``double_buffering=True``) on CPU
---------------------------------------------------
ChainerMN does it with a CUDA stream and NCCL only. Here the all-reduce of step t runs in a
**background thread** while the main thread computes step t + 1, and step t + 1 updates with
the averaged gradients of step t (1-step stale, as ChainerMN; the first update after the
broadcast only starts the all-reduce). The thread owns a *clone* of the communicator (a
duplicate MPI communicator, same algorithm, grid and options), so its collectives never
interleave with collectives the main thread makes (evaluators, reporters); MPI must provide
MPI_THREAD_MULTIPLE, which mpi4py requests by default.

Why a thread and not MPI-3 non-blocking collectives on the main thread: a non-blocking
collective only advances when some thread calls into MPI (MPICH, Intel MPI and Open MPI have no
progress thread unless asked to, and then it needs THREAD_MULTIPLE as well), and the main thread
spends the overlap window inside numpy/BLAS. Measured with the mpich wheel, 2 ranks, 25 MB:
MPI_Allreduce alone 5.7 ms; MPI_Iallreduce, then 34.5 ms of matrix products, then MPI_Wait:
the wait still took 3.7 ms, two thirds of the all-reduce was left for it. Packing, rsap's Put
rounds and the float16 sums are also steps no request could carry. A thread running the same
blocking algorithms overlaps as long as it has a core to run on (mpi4py and numpy release the
GIL in MPI calls and large copies); figures in docs/optimizer.md, "Double buffering".

No deadlock when ranks differ in speed: every rank starts the all-reduce of step t before it
waits for it at step t + 1, and a thread only waits for collectives that every rank's thread
enters in the same order. An exception in the thread is re-raised in the main thread at the
next wait, with its traceback.

Parameters that change (a link added, a parameter initialised lazily) are detected at every
update, as ChainerMN does: the wrapper waits for the all-reduce in flight, drops it, broadcasts
the parameters again and starts over.
"""
import concurrent.futures
import copy
import sys
import time

import chainer
import numpy
from mpi4py import MPI

from chainermn_torus import config
from chainermn_torus.communicators import _packing
from chainermn_torus.extensions.replicas import check_replicas as _check_replicas
from chainermn_torus.optimizers import fpenv, fused as fused_mod, overlap as _overlap
from chainermn_torus.runtime import agree, finite, jit, report, timeline as _timeline, \
    watchdog as watchdog_mod
from chainermn_torus.errors import ConfigError, Refusal, Unsupported

__all__ = ['create_multi_node_optimizer', 'NonFiniteGradientError', 'check_finite_grads',
           'check_finite_means']


class NonFiniteGradientError(Refusal, FloatingPointError):
    pass


# The double-buffering thread blocks in MPI by default. Polling instead (test every N seconds,
# sleep between, see communicators._progress) was measured slower: 2 ranks on 2 cores, MLP
# compute, all-reduce with 11.6 ms of emulated wire time, iteration / max(compute, comm):
# blocking 1.21, polling every 50 us 1.37, every 200 us 1.50. Each step of a collective then
# waits for the thread to be woken and to get the GIL back from the training thread.
BACKGROUND_POLL_S = None


def create_multi_node_optimizer(actual_optimizer, communicator, double_buffering=False,
                                zero_fill=True, fused=False, flush_denormals=False,
                                check_finite=False, background_poll=BACKGROUND_POLL_S,
                                watchdog=None, check_replicas=None, overlap=False,
                                bucket_bytes=None):
    """Wrap a Chainer optimizer for data-parallel training (drop-in for ChainerMN's).

    Args:
        actual_optimizer: a Chainer optimizer (``chainer.optimizers.Adam()``, ...).
        communicator: any ChainerMN communicator: ``rsap``, ``rsaa``, ``pure_allreduce``,
            ChainerMN's ``naive`` (or ``flat``/...).
        double_buffering: overlap the all-reduce with the next step's compute (see module).
        zero_fill: as ChainerMN: gradients of unused parameters count as zeros.
        fused: True: run Adam / MomentumSGD / RMSprop with the fused kernels (other
            optimizers raise ValueError); 'auto': fuse when possible, else keep the stock
            update and say so on rank 0; False: stock update.
        flush_denormals: set flush-to-zero / denormals-are-zero for this process's main thread
            and the fused kernels' threads.
        check_finite: before averaging, check that this rank's gradients are finite; if any
            rank has NaN/Inf, every rank raises NonFiniteGradientError naming the ranks and
            the first parameter concerned; after averaging, check the means too (float16's
            range can be exceeded by the mean alone), before the update (two extra 8-byte
            all-reduces per step).
        background_poll: with double buffering and our communicators, None (default): the
            thread waits for its collectives in MPI's blocking calls; a number of seconds:
            it tests them that often and sleeps in between (slower where measured, see
            BACKGROUND_POLL_S; an option for MPIs whose blocking waits burn a core the
            compute needs). ChainerMN's communicators always block.
        watchdog: seconds a training step may take before this rank aborts the whole job,
            naming the ranks it waits for (a peer died or hangs); between steps
            (evaluation, checkpoints) ten times as long. See
            ``chainermn_torus.runtime.watchdog``; default ``$CHAINERMN_TORUS_WATCHDOG`` or off.
        check_replicas: every this many steps, compare a hash of the parameters across ranks
            and raise ReplicaMismatchError on every rank if they differ (see
            ``chainermn_torus.extensions.replicas``); None: never.
        overlap: average gradients in buckets while backward still runs, with this step's
            gradients (not stale); needs one of our communicators and ``update(lossfun,
            ...)`` (as Chainer's updaters call it). See ``chainermn_torus.optimizers.overlap``.
        bucket_bytes: bucket size for ``overlap`` in bytes of the transfer dtype; default
            ``$CHAINERMN_TORUS_BUCKET_BYTES`` or the configuration table's.
    """
    if check_replicas is not None and (int(check_replicas) != check_replicas
                                       or check_replicas < 1):
        raise ConfigError('chainermn_torus: check_replicas must be a step count >= 1 (or None), '
                          'got {!r}'.format(check_replicas))
    if fused not in (True, False, 'auto'):
        raise ConfigError("chainermn_torus: fused must be True, False or 'auto', got {!r}".format(
            fused))
    if fused is True:
        fused_mod.fuse(actual_optimizer, flush_denormals)
    elif fused == 'auto' and jit.available():  # without numba: Chainer's (said at start-up)
        try:
            fused_mod.fuse(actual_optimizer, flush_denormals)
        except ValueError:
            report.say('{} has no fused update (fused versions: {}); using Chainer\'s.'.format(
                type(actual_optimizer).__name__, ', '.join(fused_mod.fusable_names())),
                communicator.rank, stream=sys.stderr)
    if flush_denormals:
        fpenv.set_flush_denormals(True)
    dog = watchdog_mod.attach(communicator, watchdog)
    if overlap:
        opt = _OverlapOptimizer(actual_optimizer, communicator, zero_fill, check_finite,
                                double_buffering, bucket_bytes, background_poll)
    elif double_buffering:
        opt = _DoubleBufferingOptimizer(actual_optimizer, communicator, zero_fill, check_finite,
                                        background_poll)
    else:
        opt = _MultiNodeOptimizer(actual_optimizer, communicator, zero_fill, check_finite)
    opt._set('watchdog', dog)
    opt._set('check_replicas', check_replicas)
    return opt


class _MultiNodeOptimizer(object):
    """Averaging, then the wrapped optimizer's update (ChainerMN's _MultiNodeOptimizer)."""

    _own = ('communicator', 'actual_optimizer', 'zero_fill', 'check_finite', 'timings',
            '_signature', '_resumed', 'iterations', 'watchdog', 'check_replicas',
            'on_first_update')
    watchdog = None
    check_replicas = None
    on_first_update = None  # a launcher's check at the first update (optimizers.factory)

    def __init__(self, actual_optimizer, communicator, zero_fill, check_finite):
        self._set('communicator', communicator)
        self._set('actual_optimizer', actual_optimizer)
        self._set('zero_fill', zero_fill)
        self._set('check_finite', check_finite)
        self._set('timings', {'forward_backward': 0.0, 'communicate': 0.0, 'update': 0.0,
                              'wait': 0.0})
        self._set('iterations', 0)
        self._set('_signature', None)
        self._set('_resumed', False)

    def _set(self, name, value):
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        return getattr(self.actual_optimizer, name)

    def __setattr__(self, name, value):
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.actual_optimizer, name, value)

    def setup(self, link):
        self.actual_optimizer.setup(link)
        return self

    # --- one step ---------------------------------------------------------------------------
    def _forward_backward(self, lossfun, args, kwds):
        _timeline.next_iteration()
        t0 = time.perf_counter()
        target = self.target
        loss = lossfun(*args, **kwds)
        if getattr(self.actual_optimizer, '_use_cleargrads', True):
            target.cleargrads()
        else:
            target.zerograds()
        self._backward(loss)
        del loss
        t1 = time.perf_counter()
        self.timings['forward_backward'] += t1 - t0
        if _timeline.ACTIVE is not None:
            _timeline.ACTIVE.add('forward_backward', t0, t1)

    def _backward(self, loss):
        loss.backward(loss_scale=self.actual_optimizer._loss_scale)

    def _changed(self):
        """ChainerMN's is_changed: names or initialisation of parameters differ from last time."""
        sig = _packing.param_signature(self.target)
        changed = sig != self._signature
        self._set('_signature', sig)
        return changed

    def update(self, lossfun=None, *args, **kwds):
        if self.iterations == 0 and self.on_first_update is not None:
            self.on_first_update()  # the launcher's check (optimizers.factory)
        if self.watchdog is not None:
            self.watchdog.step_started()
        self._update(lossfun, *args, **kwds)
        if self.check_replicas and self.iterations % self.check_replicas == 0:
            _check_replicas(self.communicator, self.target, self.iterations)
        if self.watchdog is not None:
            self.watchdog.beat()

    def _update(self, lossfun=None, *args, **kwds):
        if lossfun is not None:
            self._forward_backward(lossfun, args, kwds)
        self.iterations += 1
        if self._changed():
            self.communicator.bcast_data(self.target)
            if not self._resumed:
                return  # as ChainerMN: the first step only makes the replicas equal
            self._set('_resumed', False)  # resumed: the broadcast is a check, then update
        if self.check_finite:
            check_finite_grads(self.communicator, self.target)
        t0 = time.perf_counter()
        self.communicator.multi_node_mean_grad(self.target, self.zero_fill)
        if self.check_finite:
            check_finite_means(self.communicator, self.target)
        t1 = time.perf_counter()
        with _timeline.phase('update'):
            self.actual_optimizer.update(None, *args, **kwds)
        t2 = time.perf_counter()
        self.timings['communicate'] += t1 - t0
        self.timings['update'] += t2 - t1

    # --- snapshots --------------------------------------------------------------------------
    def serialize(self, serializer):
        """The wrapped optimizer's state (same keys as ChainerMN's wrapper) plus ours."""
        self.actual_optimizer.serialize(serializer)
        own = serializer['chainermn_torus']
        self._serialize_own(own)

    def _serialize_own(self, s):
        if isinstance(s, chainer.serializer.Serializer):
            s('started', numpy.asarray(self._signature is not None))
            return
        try:
            started = bool(s('started', numpy.asarray(False)))
        except KeyError:  # a snapshot written by ChainerMN's wrapper or the stock optimizer
            started = True
        # The next update broadcasts (the parameters were loaded, maybe only on some ranks)
        # and, if the saved run had started, goes on to update in the same step.
        self._set('_signature', None)
        self._set('_resumed', started)


class _DoubleBufferingOptimizer(_MultiNodeOptimizer):
    """Averaging of step t in a background thread while step t + 1 computes."""

    _own = _MultiNodeOptimizer._own + (
        'background', '_executor', '_future', '_shadow', '_needs_update', '_launches',
        '_pending')

    def __init__(self, actual_optimizer, communicator, zero_fill, check_finite,
                 background_poll=BACKGROUND_POLL_S):
        super(_DoubleBufferingOptimizer, self).__init__(
            actual_optimizer, communicator, zero_fill, check_finite)
        _require_thread_multiple('double buffering')
        self._set('background', _background_communicator(communicator, background_poll))
        self._set('_executor', concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix='chainermn_torus-allreduce'))
        self._set('_future', None)
        self._set('_shadow', None)     # a copy of the model whose grads are being averaged
        self._set('_needs_update', False)
        self._set('_launches', 0)
        self._set('_pending', None)    # averaged grads restored from a snapshot

    def _update(self, lossfun=None, *args, **kwds):
        if lossfun is not None:
            self._forward_backward(lossfun, args, kwds)
        self.iterations += 1
        target = self.target
        if self._changed() or self._shadow is None:
            self.wait()
            self.communicator.bcast_data(target)
            self._set('_shadow', copy.deepcopy(target))
            if self._pending is not None:  # resumed: the saved averaged grads are next
                for (_, p), g in zip(sorted(self._shadow.namedparams()), self._pending):
                    p.grad = g
                self._set('_needs_update', True)
                self._set('_pending', None)
            else:
                self._set('_needs_update', False)
                return
        if self.check_finite:
            check_finite_grads(self.communicator, target)
        self.wait()
        # target takes the averaged grads of the previous step; the shadow takes this step's
        # fresh grads and sends them off.
        for (_, p), (_, q) in zip(sorted(target.namedparams()), sorted(self._shadow.namedparams())):
            p.grad, q.grad = q.grad, p.grad
        self._launch()
        if self._needs_update:
            if self.check_finite:  # the previous step's means, now in target's grads
                check_finite_means(self.communicator, target, stale=True)
            t0 = time.perf_counter()
            with _timeline.phase('update'):
                self.actual_optimizer.update(None, *args, **kwds)
            self.timings['update'] += time.perf_counter() - t0
        else:
            self._set('_needs_update', True)

    def _launch(self):
        slot = self._launches % 2  # the other slot is what target's grads are views of
        self._set('_launches', self._launches + 1)
        shadow, zero_fill, comm = self._shadow, self.zero_fill, self.background
        timings = self.timings
        ftz = fpenv.flush_denormals_enabled()

        def run():
            # numba's thread count is per calling thread and starts at the machine's: the
            # thread's own kernels (float16 packing) get one thread, so that an OpenMP team
            # does not spin on the cores the training thread computes on (measured: 100x
            # slower communication and 2x slower forward/backward with the default).
            numba = jit.numba()
            if numba is not None:
                numba.set_num_threads(1)
            if ftz:
                fpenv.set_flush_denormals(True)  # MXCSR is per thread
            t0 = time.perf_counter()
            if hasattr(comm, 'mean_grad_in_slot'):
                comm.mean_grad_in_slot(shadow, zero_fill, slot)
            else:
                comm.multi_node_mean_grad(shadow, zero_fill)
            timings['communicate'] += time.perf_counter() - t0

        self._set('_future', self._executor.submit(run))

    def wait(self):
        """Block until the all-reduce in flight (if any) is done; re-raise its error."""
        future = self._future
        if future is None:
            return
        t0 = time.perf_counter()
        self._set('_future', None)
        with _timeline.phase('wait'), watchdog_mod.in_call(_overlap.WAIT_CALL):
            future.result()  # raises the thread's exception, with its traceback
        self.timings['wait'] += time.perf_counter() - t0

    def serialize(self, serializer):
        self.wait()  # a snapshot holds the averaged grads the next update will apply
        if self.check_finite and self._needs_update and self._shadow is not None and \
                isinstance(serializer, chainer.serializer.Serializer):
            # The check the next update would make, made now: a checkpoint must not stop
            # on means the finite check was there to catch (collective: every rank saves).
            check_finite_means(self.communicator, self._shadow, stale=True)
        super(_DoubleBufferingOptimizer, self).serialize(serializer)

    def _serialize_own(self, s):
        saving = isinstance(s, chainer.serializer.Serializer)
        if saving:
            has = self._shadow is not None and self._needs_update
            s('stale_grads', numpy.asarray(has))
            if has:
                for name, p in sorted(self._shadow.namedparams()):
                    if p.grad is not None:
                        s['grads'](name, p.grad)
            super(_DoubleBufferingOptimizer, self)._serialize_own(s)
            return
        super(_DoubleBufferingOptimizer, self)._serialize_own(s)
        self._set('_shadow', None)
        self._set('_pending', None)
        try:
            has = bool(s('stale_grads', numpy.asarray(False)))
        except KeyError:
            has = False
        if has:
            grads = []
            for name, p in sorted(self.target.namedparams()):
                try:
                    grads.append(numpy.array(s['grads'](name, None)))
                except KeyError:
                    grads.append(None)
            self._set('_pending', grads)

    def finalize(self):
        """Wait for the last all-reduce, stop the thread, free the clone's MPI resources.

        Collective (like a communicator's finalize): call it on every rank, at the same
        point, when training ends. Without it the clone's windows stay allocated until exit;
        nothing is freed from garbage collection, where ranks would free at different times.
        """
        self.wait()
        self._executor.shutdown(wait=True)
        if self.background is not None:
            self.background.finalize()
            self._set('background', None)

    def __del__(self):
        executor = self.__dict__.get('_executor')
        if executor is not None:
            executor.shutdown(wait=False)


class _OverlapOptimizer(_MultiNodeOptimizer):
    """Buckets averaged during backward, by a thread, with this step's gradients."""

    _own = _MultiNodeOptimizer._own + ('overlap', '_order')

    def __init__(self, actual_optimizer, communicator, zero_fill, check_finite,
                 double_buffering, bucket_bytes, background_poll):
        if double_buffering:
            raise ConfigError('chainermn_torus: overlap=True and double_buffering=True are two '
                              'ways to hide the all-reduce (this step\'s gradients during '
                              'backward, or the last step\'s during this step); choose one')
        if not hasattr(communicator, 'mean_grads_by_bucket'):
            raise ConfigError('chainermn_torus: overlap=True needs one of our communicators '
                              '(rsap, rsaa, pure_allreduce, auto), got {}: ChainerMN\'s '
                              'average whole models, not buckets'.format(
                                 type(communicator).__name__))
        if not zero_fill:
            raise ConfigError('chainermn_torus: overlap=True needs zero_fill=True: buckets are '
                              'laid out before backward, so a parameter without a gradient '
                              'travels as zeros')
        _require_thread_multiple('overlap')
        size = config.value('bucket_bytes', bucket_bytes, 'bucket_bytes')[0]
        super(_OverlapOptimizer, self).__init__(
            actual_optimizer, communicator, zero_fill, check_finite)
        self._set('overlap', _overlap.OverlapState(
            communicator, _background_communicator(communicator, background_poll), size))

    def _backward(self, loss):
        # Buckets start as backward finishes them; the order is kept for the next plan.
        self._set('_order', self.overlap.backward(
            self.target, loss, self.actual_optimizer._loss_scale, self.timings))

    def _update(self, lossfun=None, *args, **kwds):
        state = self.overlap
        self._set('_order', None)
        if lossfun is not None:
            self._forward_backward(lossfun, args, kwds)
        else:
            state.say_once('no lossfun', 'overlap: update() was called without a loss '
                           'function (the script ran backward itself), so gradients are '
                           'averaged after backward, without overlap')
        self.iterations += 1
        target = self.target
        if self._changed() or (state.plan is None and self._order is not None):
            state.drop()
            self.communicator.bcast_data(target)
            order = self._order
            if order is None:  # no backward seen: the plan follows the parameters' order
                order = [n for n, _ in _packing.data_params(target)]
            state.new_plan(target, order, self._itemsize(target))
            if not self._resumed:
                return
            self._set('_resumed', False)
        t0 = time.perf_counter()
        if state.step is not None:
            buf = state.wait(target)
            self.timings['wait'] += time.perf_counter() - t0
            if self.check_finite:
                bad = finite.count_nonfinite(buf.array, numpy.inf)  # the same on every rank
                if bad:
                    raise NonFiniteGradientError(
                        'chainermn_torus: NaN/Inf in the averaged gradients ({} value(s); with '
                        'overlap=True the ranks send before the check, so the rank it came '
                        'from is not known: run without overlap to name it{}). Nothing was '
                        'updated. Lower the learning rate or check the data.'.format(
                            bad, _MEAN_RANGE.get(_transfer_kind(self.communicator), '')))
        else:
            if self.check_finite:
                check_finite_grads(self.communicator, target)
            if state.plan is not None and state.plan.matches(target):
                state.mean_now(target)  # the layout overlapped steps use: the same sums
            else:
                self.communicator.multi_node_mean_grad(target, self.zero_fill)
            if self.check_finite:
                check_finite_means(self.communicator, target)
            self.timings['communicate'] += time.perf_counter() - t0
        t1 = time.perf_counter()
        with _timeline.phase('update'):
            self.actual_optimizer.update(None, *args, **kwds)
        self.timings['update'] += time.perf_counter() - t1

    def _itemsize(self, target):
        comm = self.communicator
        dtype = getattr(comm, 'allreduce_grad_dtype', None)
        if dtype is None:
            dtype = _packing.transfer_dtype(
                [p.data.dtype for _, p in target.namedparams() if p.data is not None])
        return numpy.dtype(dtype).itemsize

    def finalize(self):
        """Stop the thread and free the clone's MPI resources (collective, as the
        double-buffering wrapper's)."""
        if self.overlap is not None:
            self.overlap.finalize()
            self._set('overlap', None)

    def __del__(self):
        state = self.__dict__.get('overlap')
        if state is not None:
            state.executor.shutdown(wait=False)


def _require_thread_multiple(what):
    provided = MPI.Query_thread()
    if provided != MPI.THREAD_MULTIPLE:
        raise Unsupported(
            'chainermn_torus: {} averages gradients in a background thread and needs '
            'MPI_THREAD_MULTIPLE, but MPI was initialised with thread level {} '
            '(mpi4py.rc.thread_level; mpi4py asks for "multiple" unless told otherwise).'
            .format(what, provided))


def _background_communicator(communicator, poll):
    """A communicator of the same kind on its own MPI communicator, for the thread."""
    if hasattr(communicator, 'clone'):
        clone = communicator.clone(poll_interval=poll)
    else:  # ChainerMN's: split() builds the same class on MPI_Comm_split's result
        clone = communicator.split(0, communicator.rank)
    dog = watchdog_mod.active()
    if dog is not None:  # its calls, made by the thread, are the thread's on the board
        dog.mark_calls(clone)
    return clone


FLOAT16_MAX = float(numpy.finfo(numpy.float16).max)  # 65504


def _sent_limit(communicator):
    """The largest |gradient| the communicator can send, or inf: float16 communication
    scales by 1/P and converts, so beyond 65504 x P a value would travel as inf."""
    dtype = getattr(communicator, 'allreduce_grad_dtype', None)
    if dtype is not None and numpy.dtype(dtype) == numpy.float16:
        return FLOAT16_MAX * communicator.size
    return numpy.inf


def _scan_grads(target, limit, describe):
    """(values that are NaN, infinite or beyond +-limit in the float gradients of
    ``target``, ``describe(name, flat, bad)`` of the first array holding any, or '')."""
    first, count = '', 0
    for name, p in sorted(target.namedparams()):
        g = p.grad
        if g is None or g.dtype.kind != 'f':
            continue
        flat = g.reshape(-1) if g.flags.c_contiguous else g.ravel()
        bad = finite.count_nonfinite(flat, limit)
        if bad and not first:
            first = describe(name, flat, bad)
        count += bad
    return count, first


def check_finite_grads(communicator, target):
    """Raise NonFiniteGradientError on every rank if any rank has a NaN/Inf gradient, or,
    with float16 communication, one that would overflow to Inf on the way (before any rank
    sends or updates anything)."""
    limit = _sent_limit(communicator)
    count, first = _scan_grads(target, limit, lambda name, flat, bad: _describe_bad(
        name, flat, bad, limit))
    mpi_comm = communicator.mpi_comm
    counts = numpy.array([count], numpy.int64)
    mpi_comm.Allreduce(MPI.IN_PLACE, [counts, MPI.INT64_T], op=MPI.SUM)
    if counts[0]:  # only now pay for names
        bad_ranks = agree.problems(mpi_comm, (count, first) if count else None)
        overflow = numpy.isfinite(limit)
        raise NonFiniteGradientError(
            'chainermn_torus: {} in gradients before averaging on rank(s) {}: {}. Lower '
            'the learning rate, check the data on those ranks, or use loss scaling{}.'.format(
                'NaN/Inf or float16 overflow' if overflow else 'NaN/Inf',
                agree.ranks_text(bad_ranks),
                '; '.join('rank {}: {} bad value(s), first in {}'.format(r, c, f)
                          for r, (c, f) in bad_ranks),
                '; or send gradients as float32 (allreduce_grad_dtype=None, no '
                '--fp16-allreduce)' if overflow else ''))


def _transfer_kind(communicator):
    dtype = getattr(communicator, 'allreduce_grad_dtype', None)
    return 'float16' if dtype is not None and numpy.dtype(dtype) == numpy.float16 else 'other'


# Why a mean can be non-finite when every rank's gradients were finite and sendable.
_MEAN_RANGE = {
    'float16': '; or the mean itself is beyond float16\'s range: |mean| > 65504 cannot be '
               'carried by float16 communication even when each rank\'s share g / P can',
    'other': '; or the sum over ranks overflowed the transfer dtype',
}


def check_finite_means(communicator, target, stale=False):
    """Raise NonFiniteGradientError on every rank, before the update, if the averaged
    gradients hold NaN/Inf.

    Called after check_finite_grads passed, so a non-finite mean comes from the averaging,
    not the data: with float16 communication each rank's share g / P fits in float16 yet
    their sum, the mean, can pass 65504 and become Inf. The means are the same on every
    rank for our communicators; the count is still agreed on (8 bytes), so that no rank
    updates while another raises, whatever the communicator.
    """
    count, first = _scan_grads(target, numpy.inf, lambda name, flat, bad: '{} ({} of {} '
                               'values)'.format(name, bad, flat.size))
    counts = numpy.array([count], numpy.int64)
    communicator.mpi_comm.Allreduce(MPI.IN_PLACE, [counts, MPI.INT64_T], op=MPI.MAX)
    if not counts[0]:
        return
    if _transfer_kind(communicator) == 'float16':
        why = ('every rank\'s gradients were finite and each share g / P fit in float16, but '
               'the mean over the {} ranks is beyond float16\'s range (|mean| > 65504) and '
               'became Inf in float16 communication: the overflow is in the averaging, not the '
               'data. Send gradients as float32 (allreduce_grad_dtype=None, no '
               '--fp16-allreduce) or scale the loss down'.format(communicator.size))
    else:
        why = ('every rank\'s gradients were finite, but their mean is not: the sum over the '
               '{} ranks overflowed the transfer dtype. Lower the learning rate or scale the '
               'loss down'.format(communicator.size))
    # Our communicators give every rank the same means: then every rank says the same words
    # (and the job says them once); a rank whose count differs says its own.
    where = '' if count == counts[0] else ' on rank {}'.format(communicator.rank)
    raise NonFiniteGradientError(
        'chainermn_torus: NaN/Inf in the averaged gradients{}: {} value(s){}{}; {}. '
        'Nothing was updated.'.format(
            ' of the previous step (double buffering)' if stale else '', count, where,
            ', the first in ' + first if first else
            ' ({} on another rank)'.format(counts[0]), why))


def _describe_bad(name, flat, bad, limit):
    nonfinite = int((~numpy.isfinite(flat)).sum())
    text = '{} ({} of {} values'.format(name, bad, flat.size)
    if bad > nonfinite:
        finite = flat[numpy.isfinite(flat)]
        text += '; {} finite beyond float16\'s range after the 1/P scaling: max |g| = {:.4g} ' \
                '> 65504 x P = {:g}'.format(bad - nonfinite, float(numpy.abs(finite).max()),
                                           limit)
    return text + ')'
