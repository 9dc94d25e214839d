"""How the multi-node optimizer averages, one strategy a mode, each filling in the same
step (``multi_node.MultiNodeOptimizer._step``):

    forward/backward (``backward``)  ->  count the step  ->  broadcast where the parameters
    changed (``must_broadcast``, ``broadcast``: whether to go on to an update this step)
    ->  ``average`` (whether the gradients now hold means to apply)  ->  the update

* ``Synchronous``: average this step's gradients, then update (ChainerMN's wrapper).
* ``DoubleBuffering``: a thread averages step t's gradients during step t + 1, which
  updates with them (1-step stale; see multi_node's doc).
* ``Overlap``: a thread averages buckets while backward still runs (``optimizers.overlap``).

A mode holds its own state (thread, buffers, the snapshot's extra arrays) and its part of
``serialize`` and ``finalize``; the order of a step is written once, in the template.
"""
import concurrent.futures
import copy
import time

import chainer
import numpy
from mpi4py import MPI

from chainermn_torus import communicators
from chainermn_torus.communicators import _packing, capabilities, interface
from chainermn_torus.errors import ConfigError, Unsupported
from chainermn_torus.optimizers import fpenv, overlap as _overlap
from chainermn_torus.optimizers.finite_checks import (check_bucket_means, check_finite_grads,
                                                      check_finite_means)
from chainermn_torus.runtime import timeline as _timeline
from chainermn_torus.runtime.chainer_glue import chainer_private
from chainermn_torus.runtime.cpu import jit
from chainermn_torus.runtime.watch import watchdog

__all__ = ['Synchronous', 'DoubleBuffering', 'Overlap', 'BACKGROUND_POLL_S']

# The double-buffering thread blocks in MPI by default. Polling instead (test every N seconds,
# sleep between, see communicators._progress) was measured slower: 2 ranks on 2 cores, MLP
# compute, all-reduce with 11.6 ms of emulated wire time, iteration / max(compute, comm):
# blocking 1.21, polling every 50 us 1.37, every 200 us 1.50. Each step of a collective then
# waits for the thread to be woken and to get the GIL back from the training thread.
BACKGROUND_POLL_S = None


class Synchronous:
    """Average this step's gradients, then update.

    ``direct``: the communicator is ours, with an engine, its class's
    ``multi_node_mean_grad`` the interface's (``direct_engine``): the step calls the engine
    (``communicators.engine``) itself, one hop less on every step's path, as long as no one
    has put a method of their own on the object (a script timing the call, as the examples
    do; the watchdog's marks are a wrapper with no engine). Otherwise, its ChainerMN API.
    """

    name = 'synchronous'
    direct = False

    def __init__(self, direct=False):
        self.direct = direct

    def backward(self, opt, loss):
        loss.backward(loss_scale=chainer_private.loss_scale(opt.actual_optimizer))

    def without_lossfun(self, opt):
        """update() was called without a loss function: the script ran backward itself."""

    def must_broadcast(self, opt):
        """Whether this mode needs a broadcast although the parameters did not change."""
        return False

    def broadcast(self, opt):
        """Make the replicas equal; whether this step goes on to average and update (only a
        resumed run's first step does: the broadcast is then a check)."""
        opt.communicator.bcast_data(opt.target)
        return opt.take_resumed()

    def average(self, opt):
        """Average; whether the gradients now hold the means to update with."""
        comm, target = opt.communicator, opt.actual_optimizer.target
        if opt.check_finite:
            check_finite_grads(comm, target)
        # Timed as runtime.timeline.timed(None, ...) times, written out: no span of its own
        # (the engine records its phases), and no call on the step's path.
        t0 = time.perf_counter()
        try:
            if opt.more_grads is not None:   # the other virtual ranks this process holds
                more, opt.more_grads = opt.more_grads, None
                named = _packing.grad_params(target, opt.zero_fill)
                comm.mean_grad_sets(target, [[s.get(n) for n, _ in named] for s in more],
                                   opt.zero_fill)
            elif self.direct and 'multi_node_mean_grad' not in comm.__dict__:
                comm.engine.mean_grad_in_slot(target, opt.zero_fill, 0)
            else:
                comm.multi_node_mean_grad(target, opt.zero_fill)
            if opt.check_finite:
                check_finite_means(comm, target)
        finally:
            opt.timings['communicate'] += time.perf_counter() - t0
        return True

    def wait(self, opt):
        """Block until averaging in flight is done (none here)."""

    def before_serialize(self, opt, serializer):
        """Called before the wrapped optimizer's state is saved or loaded."""

    def serialize_own(self, opt, s, saving):
        """This mode's arrays in the snapshot's ``chainermn_torus`` group."""

    def finalize(self, opt):
        """Stop this mode's thread and free its resources (collective)."""

    def close(self):
        """Garbage collection's last word: stop a thread without waiting (not collective)."""


class DoubleBuffering(Synchronous):
    """Averaging of step t in a background thread while step t + 1 computes."""

    name = 'double buffering'

    def __init__(self, communicator, background_poll=BACKGROUND_POLL_S):
        require_thread_multiple('double buffering')
        self.background = background_communicator(communicator, background_poll)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix='chainermn_torus-allreduce')
        self.future = None
        self.shadow = None         # a copy of the model whose grads are being averaged
        self.needs_update = False  # target's grads hold the means of a previous step
        self.launches = 0
        self.pending = None        # averaged grads restored from a snapshot

    def must_broadcast(self, opt):
        return self.shadow is None

    def broadcast(self, opt):
        self.wait(opt)
        opt.communicator.bcast_data(opt.target)
        opt.take_resumed()  # the snapshot's averaged gradients say whether to update
        self.shadow = copy.deepcopy(opt.target)
        if self.pending is None:
            self.needs_update = False
            return False
        for (_, p), g in zip(sorted(self.shadow.namedparams()), self.pending):
            p.grad = g  # resumed: the saved averaged grads are next
        self.needs_update, self.pending = True, None
        return True

    def average(self, opt):
        target = opt.target
        if opt.check_finite:
            check_finite_grads(opt.communicator, target)
        self.wait(opt)
        # target takes the averaged grads of the previous step; the shadow takes this step's
        # fresh grads and sends them off.
        for (_, p), (_, q) in zip(sorted(target.namedparams()),
                                  sorted(self.shadow.namedparams())):
            p.grad, q.grad = q.grad, p.grad
        self._launch(opt)
        if not self.needs_update:
            self.needs_update = True
            return False
        if opt.check_finite:  # the previous step's means, now in target's grads
            check_finite_means(opt.communicator, target, stale=True)
        return True

    def _launch(self, opt):
        slot = self.launches % 2  # the other slot is what target's grads are views of
        self.launches += 1
        shadow, zero_fill, comm, timings = self.shadow, opt.zero_fill, self.background, \
            opt.timings
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
            with _timeline.timed(None, timings, 'communicate'):
                if capabilities.of(comm).slots:
                    comm.mean_grad_in_slot(shadow, zero_fill, slot)
                else:
                    comm.multi_node_mean_grad(shadow, zero_fill)

        self.future = self.executor.submit(run)

    def wait(self, opt):
        future, self.future = self.future, None
        if future is None:
            return
        with _timeline.timed('wait', opt.timings), watchdog.in_call(_overlap.WAIT_CALL):
            future.result()  # raises the thread's exception, with its traceback

    def before_serialize(self, opt, serializer):
        self.wait(opt)  # a snapshot holds the averaged grads the next update will apply
        if opt.check_finite and self.needs_update and self.shadow is not None and \
                isinstance(serializer, chainer.serializer.Serializer):
            # The check the next update would make, made now: a checkpoint must not stop
            # on means the finite check was there to catch (collective: every rank saves).
            check_finite_means(opt.communicator, self.shadow, stale=True)

    def serialize_own(self, opt, s, saving):
        if saving:
            has = self.shadow is not None and self.needs_update
            s('stale_grads', numpy.asarray(has))
            if has:
                for name, p in sorted(self.shadow.namedparams()):
                    if p.grad is not None:
                        s['grads'](name, p.grad)
            return
        self.shadow = self.pending = None
        try:
            has = bool(s('stale_grads', numpy.asarray(False)))
        except KeyError:
            has = False
        if has:
            grads = []
            for name, p in sorted(opt.target.namedparams()):
                try:
                    grads.append(numpy.array(s['grads'](name, None)))
                except KeyError:
                    grads.append(None)
            self.pending = grads

    def finalize(self, opt):
        self.wait(opt)
        self.executor.shutdown(wait=True)
        if self.background is not None:
            self.background.finalize()
            self.background = None

    def close(self):
        self.executor.shutdown(wait=False)


class Overlap(Synchronous):
    """Buckets averaged during backward, by a thread, with this step's gradients."""

    name = 'overlap during backward'

    def __init__(self, communicator, zero_fill, bucket_bytes, background_poll):
        if not capabilities.of(communicator).buckets:
            raise ConfigError('chainermn_torus: overlap=True needs one of our communicators '
                              '({}), got {}: ChainerMN\'s average whole models, not '
                              'buckets'.format(', '.join(communicators.names('buckets')),
                                               type(communicator).__name__))
        if not zero_fill:
            raise ConfigError('chainermn_torus: overlap=True needs zero_fill=True: buckets are '
                              'laid out before backward, so a parameter without a gradient '
                              'travels as zeros')
        require_thread_multiple('overlap')
        self.state = _overlap.OverlapState(
            communicator, background_communicator(communicator, background_poll), bucket_bytes)
        self.order = None  # the order backward finished the gradients in, this step

    def backward(self, opt, loss):
        # Buckets start as backward finishes them; the order is kept for the next plan.
        self.order = self.state.backward(opt.target, loss,
                                         chainer_private.loss_scale(opt.actual_optimizer),
                                         opt.timings)

    def without_lossfun(self, opt):
        self.order = None
        self.state.say_once('no lossfun', 'overlap: update() was called without a loss '
                            'function (the script ran backward itself), so gradients are '
                            'averaged after backward, without overlap')

    def must_broadcast(self, opt):
        return self.state.plan is None and self.order is not None

    def broadcast(self, opt):
        target = opt.target
        self.state.drop()
        opt.communicator.bcast_data(target)
        order = self.order
        if order is None:  # no backward seen: the plan follows the parameters' order
            order = [n for n, _ in _packing.data_params(target)]
        self.state.new_plan(target, order, _itemsize(opt.communicator, target))
        return opt.take_resumed()

    def average(self, opt):
        state, target, comm = self.state, opt.target, opt.communicator
        if state.step is not None:
            with _timeline.timed(None, opt.timings, 'wait'):  # the state records its span
                buf = state.wait(target)
            if opt.check_finite:
                check_bucket_means(comm, buf.means)  # the same on every rank
            return True
        with _timeline.timed(None, opt.timings, 'communicate'):
            if opt.check_finite:
                check_finite_grads(comm, target)
            if state.plan is not None and state.plan.matches(target):
                state.mean_now(target)  # the layout overlapped steps use: the same sums
            else:
                comm.multi_node_mean_grad(target, opt.zero_fill)
            if opt.check_finite:
                check_finite_means(comm, target)
        return True

    def finalize(self, opt):
        if self.state is not None:
            self.state.finalize()
            self.state = None

    def close(self):
        if self.state is not None:
            self.state.executor.shutdown(wait=False)


def _itemsize(communicator, target):
    dtype = capabilities.grad_dtype(communicator)
    if dtype is None:
        dtype = _packing.transfer_dtype(
            [p.data.dtype for _, p in target.namedparams() if p.data is not None])
    return numpy.dtype(dtype).itemsize


def direct_engine(communicator):
    """Whether a step may call ``communicator``'s engine itself: ours, with an engine, and
    ``multi_node_mean_grad`` its interface's (a subclass's own is called)."""
    return (capabilities.of(communicator).ours and communicator.engine is not None and
            type(communicator).multi_node_mean_grad is
            interface.Communicator.multi_node_mean_grad)


def require_thread_multiple(what):
    provided = MPI.Query_thread()
    if provided != MPI.THREAD_MULTIPLE:
        raise Unsupported(
            f'chainermn_torus: {what} averages gradients in a background thread and needs '
            f'MPI_THREAD_MULTIPLE, but MPI was initialised with thread level {provided} '
            '(mpi4py.rc.thread_level; mpi4py asks for "multiple" unless told otherwise).'
            )


def background_communicator(communicator, poll):
    """A communicator of the same kind on its own MPI communicator, for the thread."""
    if capabilities.of(communicator).clones:
        clone = communicator.clone(poll_interval=poll)
    else:  # ChainerMN's: split() builds the same class on MPI_Comm_split's result
        clone = communicator.split(0, communicator.rank)
    # Where a watchdog runs, its calls (the thread's) are marked: the thread's on the board.
    return watchdog.marked(clone)
