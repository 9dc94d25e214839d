"""A Chainer iterator whose examples are read and preprocessed in pinned loader processes.

``LoaderIterator(dataset, batch_size, ...)`` has SerialIterator's protocol and semantics
(``next``, ``epoch``, ``epoch_detail``, ``previous_epoch_detail``, ``is_new_epoch``,
``current_position``, ``reset``, ``serialize`` with the same keys, so snapshots move between
the two). The order of examples is decided in the training process by a real
``SerialIterator`` over indices; loader processes only run ``dataset[i]`` for the indices they
are given and write the examples into shared memory.

Shared memory: ``n_prefetch + 2`` batch slots, one ``/dev/shm`` segment per field (image,
label, ...), sized from the first example; examples must all have the shapes and dtypes of the
first. A returned batch is a list of tuples of *views* into its slot, valid until the next call
of ``next()`` (Chainer's converters copy them into one array at once); nothing big is pickled.

Shutdown: ``finalize()`` (also at interpreter exit and when the iterator is collected) stops
the processes; used again, the iterator starts them anew (Chainer's Trainer finalizes the
evaluator's iterators when training ends, and the examples evaluate once more after it).
If the training process is killed, its loaders notice within a second and exit. An
exception in a loader is raised in the training process as ``LoaderError`` with the
loader's traceback; a loader that dies is reported with its exit code.

Why it is built so: docs/internals.md (loader/iterator.py). A loader process's side is
``worker``, the shared slots ``slots``.
"""
import collections
import itertools
import multiprocessing
import os
import socket
import time
import weakref
from multiprocessing import connection

import chainer
import numpy

from chainermn_torus.errors import ConfigError, DataError, Refusal
from chainermn_torus.loader import slots, spawning, worker
from chainermn_torus.runtime import world
from chainermn_torus.watchers import processes
from chainermn_torus.runtime.files import devshm
from chainermn_torus.watchers.processes import state as process_state
from chainermn_torus.runtime.watch import watchdog

__all__ = ['LoaderIterator', 'LoaderError', 'SHM_PREFIX']

SHM_PREFIX = devshm.PREFIX
_POLL_S = 0.2      # how often a waiting side checks that the other is alive
_COUNTER = itertools.count()


_Limit = collections.namedtuple('_Limit', 'seconds what')


def _where():
    """'rank R (host)' of this process, as the launcher numbered it ('this process (host)'
    outside a job)."""
    rank = world.launcher_rank()
    return '{} ({})'.format('this process' if rank is None else f'rank {rank}',
                            socket.gethostname())


class LoaderError(Refusal, RuntimeError):
    """An exception raised in a loader process, with its traceback."""


class _Indices:
    """A dataset of its own indices: what the planning SerialIterator walks over."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class LoaderIterator(chainer.dataset.Iterator):
    """SerialIterator's protocol, with examples loaded in pinned processes (module doc)."""

    def __init__(self, dataset, batch_size, repeat=True, shuffle=None, n_processes=1,
                 n_prefetch=2, cpus=None, order_sampler=None, seed=0, timeout=None):
        if batch_size < 1 or n_processes < 1 or n_prefetch < 1:
            raise ConfigError('chainermn_torus: batch_size, n_processes and n_prefetch must be '
                              f'>= 1, got {batch_size}, {n_processes}, {n_prefetch}')
        if len(dataset) == 0:
            raise DataError('chainermn_torus: the dataset is empty')
        self.dataset = dataset
        self.batch_size = batch_size
        self.n_processes = n_processes
        self.n_prefetch = n_prefetch
        self.timeout = timeout
        self._planner = chainer.iterators.SerialIterator(
            _Indices(len(dataset)), batch_size, repeat=repeat, shuffle=shuffle,
            order_sampler=order_sampler)
        self._public = self._planner_state()
        self._cpus, self._seed = cpus, seed
        self._launch(first=True)

    def _launch(self, first=False):
        """Loader processes and batch slots, from nothing: at construction, and when an
        iterator that was finalized is used again (Chainer's Trainer finalizes every
        extension's iterators when training ends; an evaluation after it, as the examples'
        final one, then restarts them, as Chainer's MultiprocessIterator does)."""
        self._res = slots.Resources()
        self._finalizer = weakref.finalize(self, self._res.release)
        self._start(self._cpus, self._seed)
        self._pending = collections.deque()   # (task_id, slot, n, state after this batch)
        self._done = {}                        # task_id -> error text or None
        self._owner = {}                       # task_id -> loader it was sent to
        self._stopped = {}                     # pid -> when first seen stopped (monotonic)
        self._held = None                      # slot of the batch last returned
        if first:
            self._fill()
        self._await_ready()

    @property
    def finalized(self):
        return not self._res.tasks

    def _alive(self):
        """Loader processes again if finalize() stopped them; False if it did."""
        if not self.finalized:
            return True
        self._launch()
        # What was planned ahead went with the old processes: plan again from the batch
        # last returned.
        self._planner._state, self._planner._previous_epoch_detail = self._public
        return False

    # --- processes and memory --------------------------------------------------------------
    def _start(self, cpus, seed):
        first = [numpy.asarray(v) for v in worker.fields(self.dataset[0])]
        fields = [(v.shape, v.dtype) for v in first]
        self._n_slots = self.n_prefetch + 2
        sizes = [max(1, self.batch_size * int(numpy.prod(shape)) * dtype.itemsize)
                 for shape, dtype in fields]
        devshm.sweep()  # what dead processes of ours left on this node (never a live one's)
        what = f'the loader\'s {self._n_slots} batch slots of {self.batch_size} examples'
        devshm.check_room(self._n_slots * sum(sizes), what)
        tag = f'{devshm.segment_prefix()}{next(_COUNTER)}'
        names, self._arrays = [], []
        for s in range(self._n_slots):
            slot_names, slot_arrays = [], []
            for f, (shape, dtype) in enumerate(fields):
                seg = slots.new(f'{tag}_{s}_{f}_', sizes[f])
                self._res.segments.append(seg)
                self._res.linked.append(seg)
                array = numpy.ndarray((self.batch_size,) + shape, dtype, buffer=seg.buf)
                # Backed now, as the communicators' windows are: on a full /dev/shm this
                # fails here, not with a SIGBUS at the first write (other ranks of the node
                # allocate at the same time, so the check above cannot promise it).
                devshm.populate(array, what, self._n_slots * sum(sizes))
                slot_names.append(seg.name)
                slot_arrays.append(array)
            names.append(slot_names)
            self._arrays.append(slot_arrays)
        self._shm_names = [n for slot in names for n in slot]
        self._free = collections.deque(range(self._n_slots))
        layout = {'names': names, 'fields': fields, 'batch_size': self.batch_size}
        ctx = multiprocessing.get_context('spawn')
        self._decoding = ctx.RawArray('q', self.n_processes)  # each loader's example + 1
        self._oom_before = processes.oom_kills()
        saved = {k: os.environ.get(k) for k in ('MPI4PY_RC_INITIALIZE',)}
        os.environ['MPI4PY_RC_INITIALIZE'] = 'false'  # children only: restored below
        try:
            needed = spawning.needs_script(self.dataset)
            for w in range(self.n_processes):
                task_r, task_w = ctx.Pipe(duplex=False)
                result_r, result_w = ctx.Pipe(duplex=False)
                p = ctx.Process(target=worker.run, name=f'chainermn_torus-loader-{w}',
                                args=(self.dataset, layout, task_r, result_w,
                                      list(cpus) if cpus else None, os.getpid(), seed + w,
                                      self._decoding, w),
                                daemon=True)
                with spawning.script_left_out(needed):
                    p.start()
                task_r.close()  # the child's ends: closed here, so EOF means the child is gone
                result_w.close()
                self._res.procs.append(p)
                self._res.tasks.append(task_w)
                self._res.results.append(result_r)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._in_flight = [0] * self.n_processes
        self._ready = set()

    def _await_ready(self):
        """Wait until every loader has mapped the segments, then unlink their names."""
        while len(self._ready) < self.n_processes:
            self._receive()
        self._res.unlink()

    @property
    def processes(self):
        return list(self._res.procs)

    @property
    def shm_names(self):
        """The segments' names (removed from /dev/shm once every loader has mapped them)."""
        return list(self._shm_names)

    def finalize(self):
        """Stop the loader processes and free the shared memory (idempotent)."""
        finalizer = self.__dict__.get('_finalizer')  # absent if __init__ failed early
        if finalizer is not None:
            finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finalize()
        return False

    # --- order and state (SerialIterator's, through the planner) ---------------------------
    # A state is SerialIterator's: (IteratorState(current_position, epoch, is_new_epoch,
    # order), previous_epoch_detail). The planner runs ahead by the batches in flight; the
    # public state is the one after the batch last returned.
    def _planner_state(self):
        return self._planner._state, self._planner._previous_epoch_detail

    def _fill(self):
        while self._free and len(self._pending) < self.n_prefetch:
            epoch = self._planner.epoch  # the pass this batch starts in (datasets.draws)
            try:
                indices = self._planner.next()
            except StopIteration:
                return
            slot = self._free.popleft()
            task_id = next(_COUNTER)
            w = min(range(self.n_processes), key=self._in_flight.__getitem__)
            try:
                self._res.tasks[w].send((task_id, slot, indices, epoch))
            except OSError:  # its end closed: it died since the last look (said as such)
                self._res.procs[w].join(timeout=2)
                self._check_processes()
                raise
            self._in_flight[w] += 1
            self._owner[task_id] = w
            self._pending.append((task_id, slot, len(indices), self._planner_state()))

    def _receive(self):
        """Read what the loaders sent within _POLL_S; raise if one of them died."""
        ready = connection.wait(self._res.results, timeout=_POLL_S)
        for conn in ready:
            w = self._res.results.index(conn)
            try:
                message = conn.recv()
            except (EOFError, OSError):  # its end closed: it died (reported below)
                self._res.procs[w].join(timeout=2)
                continue
            kind, value = message
            if kind == 'ready':
                self._ready.add(w)
            elif kind == 'failed':
                self.finalize()
                raise LoaderError(f'chainermn_torus: loader process {w} could not map the '
                                  f'batch slots:\n{value}')
            else:
                self._in_flight[self._owner.pop(kind)] -= 1
                self._done[kind] = value
        self._check_processes()
        return bool(ready)

    def _check_processes(self):
        """Raise the one line of a loader process that died, or that has been stopped
        (process state T) for the limit (the job ends with it)."""
        now, limit = time.monotonic(), self._stop_limit()
        for w, p in enumerate(self._res.procs):
            if not p.is_alive():
                doing = worker.doing(self.dataset, self._decoding, w)
                self.finalize()
                raise LoaderError('chainermn_torus: loader process {} (pid {}) of {} {}{}; '
                                  'the job ends'.format(p.name, p.pid, _where(),
                                                        worker.how_it_ended(p.exitcode,
                                                                      self._oom_before),
                                                        doing))
            if limit is None or process_state(p.pid) != 'T':  # no /proc read per batch
                self._stopped.pop(p.pid, None)                # where nothing would use it
                continue
            since = self._stopped.setdefault(p.pid, now)
            if now - since >= limit[0]:
                self.finalize()
                raise LoaderError(
                    f'chainermn_torus: loader process {p.name} (pid {p.pid}) of {_where()} has '
                    'been stopped '
                    '(process state T: SIGSTOP, a debugger, or a suspension) '
                    f'for {now - since:.1f} s, {limit[1]}; '
                    'the job ends')

    def _stop_limit(self):
        """(seconds, what sets them) a loader process may stay stopped: this iterator's
        timeout, else None (no limit). With a watchdog, None: its node watcher names a rank
        waiting for a stopped process it started (with the pid) within its step limit, and
        ends the job; a second clock here raced it, and the line of the loser was lost."""
        if watchdog.active() is not None:
            return None
        if self.timeout is not None:
            return _Limit(self.timeout, "the loader's timeout")
        return None

    def _wait(self, task_id):
        waited = 0.0
        while task_id not in self._done:
            if not self._receive():
                waited += _POLL_S
                if self.timeout is not None and waited > self.timeout:
                    self.finalize()
                    raise LoaderError('chainermn_torus: no batch from the loader processes in '
                                      f'{self.timeout} s')
        return self._done.pop(task_id)

    def __next__(self):
        self._alive()
        if not self.finalized:
            self._check_processes()  # a loader stopped while its batches were ahead counts
        if self._held is not None:
            self._free.append(self._held)  # the caller has converted the last batch by now
            self._held = None
        self._fill()
        if not self._pending:
            raise StopIteration
        task_id, slot, n, state = self._pending.popleft()
        error = self._wait(task_id)
        if error is not None:
            self.finalize()
            kind, text = error
            if kind == 'refusal':  # the dataset's own words: the job ends with that line
                raise LoaderError(f'chainermn_torus: {text}')
            raise LoaderError('chainermn_torus: a loader process raised:\n' + text)
        self._public = state
        self._held = slot
        self._fill()
        arrays = self._arrays[slot]
        if len(arrays) == 1:
            return [arrays[0][j] for j in range(n)]
        return [tuple(a[j] for a in arrays) for j in range(n)]

    next = __next__

    @property
    def epoch(self):
        return self._public[0].epoch

    @property
    def is_new_epoch(self):
        return self._public[0].is_new_epoch

    @property
    def current_position(self):
        return self._public[0].current_position

    @property
    def epoch_detail(self):
        order = self._public[0].order
        return self.epoch + self.current_position / (len(self.dataset) if order is None
                                                     else len(order))

    @property
    def previous_epoch_detail(self):
        detail = self._public[1]
        return None if detail < 0 else detail

    @property
    def repeat(self):
        return self._planner._repeat

    def _restart_from(self, state):
        # Batches in flight belong to the old position: let them land, then plan anew. A
        # finalized iterator has none: its loaders start again.
        if self._alive():
            for task_id, slot, _, _ in self._pending:
                self._wait(task_id)
                self._free.append(slot)
        self._pending.clear()
        self._planner._state, self._planner._previous_epoch_detail = state
        self._public = state
        self._fill()

    def reset(self):
        self._planner.reset()
        self._restart_from(self._planner_state())

    def serialize(self, serializer):
        """SerialIterator.serialize itself, on the public state: snapshots are interchangeable."""
        ahead = self._planner_state()
        state, previous = self._public
        order = None if state.order is None else state.order.copy()  # loads write into it
        self._planner._state = state._replace(order=order)
        self._planner._previous_epoch_detail = previous
        self._planner.serialize(serializer)
        if isinstance(serializer, chainer.serializer.Deserializer):
            self._restart_from(self._planner_state())
        else:
            self._planner._state, self._planner._previous_epoch_detail = ahead
