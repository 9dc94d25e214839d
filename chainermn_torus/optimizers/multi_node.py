"""Multi-node optimizer wrapper for CPU: ChainerMN's semantics, plus double buffering,
overlap, fused updates, flush-to-zero and a NaN/Inf check.

One wrapper class, ``MultiNodeOptimizer``, writes the order of a step once; how gradients
are averaged is its mode (``update_modes``: synchronous, double buffering, overlap); the
NaN/Inf checks are ``finite_checks``'. Scripts make it with
``chainermn_torus.create_multi_node_optimizer`` (ChainerMN's name and arguments).

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

Why it is built so: docs/internals.md (optimizers/multi_node.py).
"""
import sys
import time
from typing import Any, Callable, Optional, Union

import chainer
import numpy

from chainermn_torus import config
from chainermn_torus.communicators import _packing, capabilities
from chainermn_torus.errors import ConfigError
from chainermn_torus.process import STATE
from chainermn_torus.extensions.replicas import check_replicas as _check_replicas
from chainermn_torus.optimizers import fused as fused_mod, update_modes
from chainermn_torus.optimizers import type_checks as type_checks_mod
from chainermn_torus.runtime import report, timeline as _timeline
from chainermn_torus.runtime.chainer_glue import chainer_private
from chainermn_torus.runtime.cpu import jit
from chainermn_torus.runtime.watch import watchdog as watchdog_mod

__all__ = ['make', 'MultiNodeOptimizer', 'is_multi_node']


def make(actual_optimizer: Any, communicator: Any, double_buffering: bool = False,
         zero_fill: bool = True, fused: Union[bool, str] = False,
         flush_denormals: bool = False, check_finite: bool = False,
         background_poll: Optional[float] = update_modes.BACKGROUND_POLL_S,
         check_replicas: Optional[int] = None, overlap: bool = False,
         bucket_bytes: Optional[int] = None,
         on_first_update: Optional[Callable[[], None]] = None,
         type_check: Union[None, str, int] = None,
         settings: Optional[config.Settings] = None,
         chainer_type_check: Optional[str] = None) -> 'MultiNodeOptimizer':
    """Wrap a Chainer optimizer for data-parallel training (what
    ``chainermn_torus.create_multi_node_optimizer`` makes; its options checked here).

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
            update_modes.BACKGROUND_POLL_S; an option for MPIs whose blocking waits burn a
            core the compute needs). ChainerMN's communicators always block.
        watchdog (the factory's, ``create_multi_node_optimizer``, whose ``process_setup.init``
            starts it): seconds a training step may take before this rank aborts the whole job,
            naming the ranks it waits for (a peer died or hangs); between steps
            (evaluation, checkpoints) ten times as long. See
            ``chainermn_torus.runtime.watch.watchdog``; default
            ``$CHAINERMN_TORUS_WATCHDOG`` or off.
        check_replicas: every this many steps, compare a hash of the parameters across ranks
            and raise ReplicaMismatchError on every rank if they differ (see
            ``chainermn_torus.extensions.replicas``); None: never.
        overlap: average gradients in buckets while backward still runs, with this step's
            gradients (not stale); needs one of our communicators and ``update(lossfun,
            ...)`` (as Chainer's updaters call it). See ``chainermn_torus.optimizers.overlap``.
        bucket_bytes: bucket size for ``overlap`` in bytes of the transfer dtype; default
            ``$CHAINERMN_TORUS_BUCKET_BYTES`` or the configuration table's.
        on_first_update: called at the first update (a launcher's check:
            ``_registry.Policy.first_update``).
        type_check: Chainer's type checks in what ``update(lossfun, ...)`` runs: 'on', 'off'
            or N steps, then off (default ``$CHAINERMN_TORUS_TYPE_CHECK`` or 1; type_checks).
    """
    _check_options(check_replicas, fused, overlap, double_buffering)
    if capabilities.virtual_ranks(communicator) is not None and (overlap or double_buffering):
        raise ConfigError('chainermn_torus: virtual ranks average every held rank\'s gradients '
                          'after all their backward passes, in this step: overlap and double '
                          'buffering do not apply; leave them out')
    settings = config.defaults() if settings is None else settings
    checks = type_checks_mod.TypeChecks(type_check, communicator.rank, settings,
                                        chainer_type_check)
    # The fused class is chosen here: the wrapper holds the fused optimizer made on the
    # given one's attributes (optimizers.fused), whose own class never changes.
    actual_optimizer = _fuse(actual_optimizer, fused, flush_denormals, communicator.rank)
    # The process's flush-to-zero and the watchdog are process_setup.init's, by the factory
    # (create_multi_node_optimizer); where a watchdog runs, the optimizer's communicator
    # calls are marked (a wrapper, where the factory's did not mark them already).
    communicator = watchdog_mod.marked(communicator)
    dog = watchdog_mod.active()
    if overlap:
        mode = update_modes.Overlap(communicator, zero_fill, settings.pick(
            'bucket_bytes', bucket_bytes, 'bucket_bytes')[0], background_poll)
    elif double_buffering:
        mode = update_modes.DoubleBuffering(communicator, background_poll)
    else:
        # Ours, unmarked: the step calls the engine (update_modes.Synchronous).
        mode = update_modes.Synchronous(direct=update_modes.direct_engine(communicator))
    return MultiNodeOptimizer(actual_optimizer, communicator, mode, zero_fill, check_finite,
                              dog, check_replicas, on_first_update, checks)


def _check_options(check_replicas: Optional[int], fused: Union[bool, str], overlap: bool,
                   double_buffering: bool) -> None:
    if check_replicas is not None and (int(check_replicas) != check_replicas
                                       or check_replicas < 1):
        raise ConfigError('chainermn_torus: check_replicas must be a step count >= 1 (or '
                          f'None), got {check_replicas!r}')
    if fused not in (True, False, 'auto'):
        raise ConfigError("chainermn_torus: fused must be True, False or 'auto', got "
                          f'{fused!r}')
    if overlap and double_buffering:
        raise ConfigError('chainermn_torus: overlap=True and double_buffering=True are two '
                          'ways to hide the all-reduce (this step\'s gradients during '
                          'backward, or the last step\'s during this step); choose one')


def _fuse(actual_optimizer: Any, fused: Union[bool, str], flush_denormals: bool,
          rank: int) -> Any:
    """The optimizer the wrapper updates with. fused=True: the fused one or an error;
    'auto': where there is one (said where not); without numba, 'auto' keeps Chainer's
    (said at start-up)."""
    if fused is True:
        return fused_mod.fuse(actual_optimizer, flush_denormals)
    if fused == 'auto' and jit.available():
        try:
            return fused_mod.fuse(actual_optimizer, flush_denormals)
        except ValueError:
            report.say('{} has no fused update (fused versions: {}); using Chainer\'s.'.format(
                type(actual_optimizer).__name__, ', '.join(fused_mod.fusable_names())),
                rank, stream=sys.stderr)
    return actual_optimizer


def is_multi_node(optimizer: Any) -> bool:
    """Whether ``optimizer`` already averages over ranks: ours, or one of ChainerMN's own
    wrappers (a script that made one before ``import chainermn_torus``)."""
    return isinstance(optimizer, MultiNodeOptimizer) or \
        type(optimizer).__module__.startswith('chainermn.optimizers')


class MultiNodeOptimizer:
    """Averaging, then the wrapped optimizer's update (ChainerMN's _MultiNodeOptimizer), in
    the way its ``mode`` averages. Attributes other than its own are the wrapped
    optimizer's."""

    _own = ('communicator', 'actual_optimizer', 'mode', 'zero_fill', 'check_finite',
            'timings', 'iterations', 'watchdog', 'check_replicas', 'on_first_update',
            'type_checks', '_signature', '_resumed', 'more_grads')
    communicator: Any
    actual_optimizer: Any
    mode: Any
    zero_fill: bool
    check_finite: bool
    timings: dict
    iterations: int
    watchdog: Any
    check_replicas: Optional[int]
    on_first_update: Optional[Callable[[], None]]
    type_checks: Any
    _signature: Any
    _resumed: bool
    # The gradient sets of this process's other virtual ranks for the next update ({name:
    # array}), set by optimizers.virtual_updater; the model's are the first one's.
    more_grads: Optional[list]

    def __init__(self, actual_optimizer: Any, communicator: Any, mode: Any,
                 zero_fill: bool = True, check_finite: bool = False, watchdog: Any = None,
                 check_replicas: Optional[int] = None,
                 on_first_update: Optional[Callable[[], None]] = None,
                 type_checks: Any = None) -> None:
        if type_checks is None:  # made directly: Chainer's own way, every step checked
            type_checks = type_checks_mod.TypeChecks('on', communicator.rank)
        own = dict(communicator=communicator, actual_optimizer=actual_optimizer, mode=mode,
                   zero_fill=zero_fill, check_finite=check_finite, watchdog=watchdog,
                   check_replicas=check_replicas, on_first_update=on_first_update,
                   type_checks=type_checks,
                   timings={'forward_backward': 0.0, 'communicate': 0.0, 'update': 0.0,
                            'wait': 0.0},
                   iterations=0, _signature=None, _resumed=False, more_grads=None)
        for name, value in own.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.actual_optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.actual_optimizer, name, value)

    def setup(self, link: Any) -> 'MultiNodeOptimizer':
        self.actual_optimizer.setup(link)
        return self

    # --- one step ---------------------------------------------------------------------------
    def update(self, lossfun: Optional[Callable[..., Any]] = None, *args: Any,
               **kwds: Any) -> None:
        if self.iterations == 0 and self.on_first_update is not None:
            self.on_first_update()  # the launcher's check (the policy's first_update)
        if self.watchdog is not None:
            self.watchdog.step_started()
        self._step(lossfun, args, kwds)
        if self.check_replicas and self.iterations % self.check_replicas == 0:
            _check_replicas(self.communicator, self.target, self.iterations)
        if self.watchdog is not None:
            self.watchdog.beat()

    def _step(self, lossfun: Optional[Callable[..., Any]], args: tuple, kwds: dict) -> None:
        """The order of a step, for every mode."""
        mode = self.mode
        if lossfun is not None:
            self._forward_backward(lossfun, args, kwds)
        else:
            mode.without_lossfun(self)
        self.iterations += 1
        if self._changed() or mode.must_broadcast(self):
            if not mode.broadcast(self):
                return  # as ChainerMN: the first step only makes the replicas equal
        if not mode.average(self):
            return
        # runtime.timeline.timed('update', ...) written out, so that a step whose
        # gradients a script's backward made calls none of the timeline's code.
        t0 = time.perf_counter()
        try:
            self.actual_optimizer.update(None, *args, **kwds)
        finally:
            t1 = time.perf_counter()
            self.timings['update'] += t1 - t0
            if STATE.timeline is not None:  # --timeline's
                STATE.timeline.add('update', t0, t1)

    def _forward_backward(self, lossfun: Callable[..., Any], args: tuple, kwds: dict) -> None:
        _timeline.next_iteration()
        with _timeline.timed('forward_backward', self.timings), \
                self.type_checks.forward(self.iterations):
            target = self.target
            loss = lossfun(*args, **kwds)
            if chainer_private.uses_cleargrads(self.actual_optimizer):
                target.cleargrads()
            else:
                target.zerograds()
            self.mode.backward(self, loss)
            del loss

    def _changed(self) -> bool:
        """ChainerMN's is_changed: names or initialisation of parameters differ from last time."""
        sig = _packing.param_signature(self.target)
        changed = sig != self._signature
        self._signature = sig
        return changed

    def take_resumed(self) -> bool:
        """Whether the parameters were loaded from a snapshot of a run that had started
        (then the first step's broadcast is a check and the step updates); cleared."""
        resumed, self._resumed = self._resumed, False
        return resumed

    def wait(self) -> None:
        """Block until the averaging in flight (if any) is done; re-raise its error."""
        self.mode.wait(self)

    # --- snapshots --------------------------------------------------------------------------
    def serialize(self, serializer: Any) -> None:
        """The wrapped optimizer's state (same keys as ChainerMN's wrapper) plus ours."""
        self.mode.before_serialize(self, serializer)
        self.actual_optimizer.serialize(serializer)
        s = serializer['chainermn_torus']
        saving = isinstance(s, chainer.serializer.Serializer)
        self.mode.serialize_own(self, s, saving)
        if saving:
            s('started', numpy.asarray(self._signature is not None))
            return
        try:
            started = bool(s('started', numpy.asarray(False)))
        except KeyError:  # a snapshot written by ChainerMN's wrapper or the stock optimizer
            started = True
        # The next update broadcasts (the parameters were loaded, maybe only on some ranks)
        # and, if the saved run had started, goes on to update in the same step.
        self._signature, self._resumed = None, started

    def finalize(self) -> None:
        """Wait for the averaging in flight, stop the mode's thread, free its clone's MPI
        resources.

        Collective (like a communicator's finalize): call it on every rank, at the same
        point, when training ends. Without it a clone's windows stay allocated until exit;
        nothing is freed from garbage collection, where ranks would free at different times.
        """
        self.mode.finalize(self)

    def __del__(self) -> None:
        mode = self.__dict__.get('mode')
        if mode is not None:
            mode.close()
