"""A watchdog for jobs where a rank, or a whole node, stops while the others wait for it.

With a watchdog (``CHAINERMN_TORUS_WATCHDOG=SECONDS``, the launcher's ``--watchdog``, or
``watchdog=SECONDS`` in ``create_multi_node_optimizer``), every rank marks its progress on
its node's progress board (``runtime.watch.progress_board``: plain stores to a /dev/shm file, no
MPI, no thread) and one small process per node (``runtime.watch.node_watch``, started by the
node's first rank) watches the board and the other nodes. It starts with the job's first
communicator (``create_communicator``; from the environment or the launcher) or, given only
to the optimizer, with the multi-node optimizer, and watches until the rank exits, each
phase with its limit (``board_layout``'s phase table; the list: docs/internals.md).

Every communication call of the job's communicators is marked too (``runtime.watch.call_marks``:
which call a rank entered and whether it left it), so the watcher tells the rank the others
wait for (outside every call: computing, or blocked elsewhere) from the ranks waiting in the
call; and it reads each rank's process state, so a rank stopped by a signal or gone is
named as such, within SECONDS whatever the phase. When a rank of a node passes its limit,
that node's watcher names who the job waits for, with host and phase, and ends the job:
see ``runtime.watch.node_watch``.

Why it is built so: docs/internals.md (runtime/watch/watchdog.py).
"""
import atexit
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading

from chainer.training.extensions import Evaluator

from chainermn_torus.process import STATE
from chainermn_torus import config, settings_table
from chainermn_torus.errors import ConfigError, Unsupported
from chainermn_torus.runtime import agree
from chainermn_torus.runtime import world
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.watch import abort, call_marks, progress_board as pb
from chainermn_torus.watchers import board_layout, startup_watch, temporaries

__all__ = ['Watchdog', 'marked', 'start', 'watch_from_start', 'WATCHDOG_ENV',
           'STARTUP_ENV', 'OUTSIDE_FACTOR', 'STARTUP_S', 'active', 'startup_limit', 'in_call']

WATCHDOG_ENV = settings_table.SETTINGS['watchdog'].env
STARTUP_ENV = settings_table.SETTINGS['watchdog_startup'].env
OUTSIDE_FACTOR = 10  # the limit between steps and in checkpoints, in multiples of the limit
# Start-up's default: reading a data set on rank 0 while the others wait in
# scatter_dataset, starting loader processes and compiling the kernels take minutes on a
# cluster's shared file system, not seconds; the step limit where that is longer.
STARTUP_S = 900.0


def active():
    """The process's watchdog, or None: for the marks of evaluations and checkpoints."""
    return STATE.watchdogs[-1] if STATE.watchdogs else None


@contextlib.contextmanager
def in_call(name):
    """Mark a wait for other ranks that is not a communicator's call (the optimizer waiting
    for its communication thread) as a call named ``name``."""
    dog = active()
    if dog is None:
        yield
        return
    dog.enter(name)
    try:
        yield
    finally:
        dog.leave()


def _setting(key, given=None, option=None, settings=None):
    """``given`` (the code's), else the settings' (the launcher's flag, else the variable,
    else the default: config's one precedence)."""
    return (settings or config.current()).pick(key, given, option)[0]


def watch_from_start():
    """Start the watch before the communicator (``watchers.startup_watch``) where a
    watchdog is set and a launcher started this process: the launcher (``python -m
    chainermn_torus.run``) calls it first, with its settings installed, before anything
    starts MPI. A bad value is refused later, where the watchdog starts."""
    if world.launcher_rank() is None:
        return False
    try:
        settings = config.current()
        timeout = _setting('watchdog', settings=settings)
        if timeout is None:
            return False
        return startup_watch.start(timeout, startup_limit(timeout, settings))
    except ConfigError:
        return False


def startup_limit(timeout, settings=None):
    """Start-up's limit for a step limit of ``timeout`` seconds."""
    return _startup(timeout, settings)[0]


def _startup(timeout, settings):
    """(start-up's limit, where it came from: the flag, the variable or None for the
    default)."""
    given, source = (settings or config.current()).pick('watchdog_startup')
    return (given, source) if given is not None else (max(STARTUP_S, timeout), None)


def _sources(limit_from, startup_from):
    """The board's indices of where the step and start-up limits came from."""
    return (board_layout.source_index(board_layout.STEP_SOURCES, limit_from),
            board_layout.source_index(board_layout.STARTUP_SOURCES, startup_from or
                                      board_layout.STARTUP_SOURCES[2]))


def start(mpi_comm, timeout=None, settings=None, option='watchdog'):
    """The job's watchdog where a limit is set (``timeout``: the code's, e.g. a multi-node
    optimizer's ``watchdog=``; else ``settings``', handed down by ``process_setup.init``:
    the launcher's ``--watchdog``, else the variable), started at the first communicator or
    optimizer, collective over ``mpi_comm``; None where none is. One already started gets
    a ``timeout`` given as its step limit."""
    dog = active()
    if dog is not None:
        if timeout is not None:
            dog.set_limit(_setting('watchdog', timeout, option, settings))
        return dog
    if _setting('watchdog', timeout, option, settings) is None:
        return None
    # The code's limit, or None: the settings' (the watchdog says which gave it).
    return Watchdog(timeout, comm=mpi_comm, settings=settings)


def marked(communicator):
    """``communicator`` with its calls marked on the job's watchdog (started by ``start``):
    a ``call_marks.MarkedCommunicator``; itself where no watchdog runs. Starts nothing."""
    dog = active()
    if dog is None or communicator is None:
        return communicator
    return dog.mark_calls(communicator)


class Watchdog:
    """Collective over ``comm`` (an mpi4py communicator; default COMM_WORLD): every rank
    creates it at the same point."""

    def __init__(self, timeout, comm=None, outside=OUTSIDE_FACTOR, startup=None,
                 settings=None):
        # ``settings``: the process's, handed down (the start-up limit's); None: the
        # process's (a watchdog made directly, by a test).
        self.settings = settings
        # Where each limit came from, said by the verdicts: a keyword given in code is the
        # optimizer's watchdog=, else the settings' source (the flag or the variable).
        self.timeout, source = (settings or config.current()).pick(
            'watchdog', timeout, "the optimizer's watchdog=")
        self.limit_from = source
        if startup is None:
            self.startup, self.startup_from = _startup(self.timeout, settings)
        else:
            self.startup, self.startup_from = _setting(
                'watchdog_startup', startup, 'startup', settings), '--watchdog-startup'
        from mpi4py import MPI
        comm = MPI.COMM_WORLD if comm is None else comm
        self._steps = 0
        self._over = False  # training_over() was called
        self._watcher = None
        self._row = None
        self._local = threading.local()  # the depth of nested marked calls, per thread
        self._main = threading.main_thread().ident
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            self._start(comm, node, outside)
        finally:
            node.Free()
        STATE.watchdogs.append(self)
        _mark_evaluations()
        atexit.register(self.stop)
        startup_watch.arrived()  # the node's watcher watches this rank from here

    def _start(self, comm, node, outside):
        problem, path, addrs = None, None, None
        if node.rank == 0:
            try:
                board = pb.Board.create(node.size, self.timeout, outside, self.startup,
                                        _sources(self.limit_from, self.startup_from))
                path = board.path
                board.close()
                self._watcher = subprocess.Popen(
                    [sys.executable, '-m', 'chainermn_torus.runtime.watch.node_watch', path,
                     str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    text=True, close_fds=True,
                    # No MPI there, and no start-up watch of its own: one would hold the
                    # rank's stderr after the job ended, keeping the launcher waiting until
                    # the start-up limit (up to 900 s), and then say a stall of its own.
                    env=dict(os.environ, MPI4PY_RC_INITIALIZE='false'),
                    # Its own session: a launcher that kills the ranks' process groups
                    # leaves it the moment it needs to clean up after them. It ends by
                    # itself when this rank is gone.
                    start_new_session=True)
                addrs = json.loads(self._watcher.stdout.readline())
            except (OSError, ValueError) as e:
                problem = f'cannot start the watchdog on {_host()}: {type(e).__name__}: {e}'
        problem, path = node.bcast((problem, path))
        if problem is None:
            self._board = pb.Board(path)
            # The rank's own watcher (runtime.watch.abort) says the phase of a death, and, on
            # the node's first rank, watches the node's watcher process.
            abort.tell_watcher(board=path, node_watcher=self._watcher.pid
                               if self._watcher is not None else None)
            self._slot = node.rank
            row = self._board.row(node.rank)
            row[board_layout.RANK], row[board_layout.PID] = comm.rank, os.getpid()
            row[board_layout.PROGRESS_NS] = pb.now_ns()
            row[board_layout.PHASE] = board_layout.STARTUP
            self._row = row
        agree.raise_everywhere(comm, problem,
                               lambda bad: Unsupported('chainermn_torus: ' + bad[0][1]))
        mine = {'host': _host(), 'addrs': addrs} if node.rank == 0 else None
        table = [t for t in comm.allgather(mine) if t is not None]
        # The key of the watchers' messages (runtime.watch.heartbeat): made here, sent over MPI and
        # the watcher's stdin, never on a command line or in a file.
        key = comm.bcast(secrets.token_hex(32) if comm.rank == 0 else None)
        if self._watcher is not None:
            me = table.index(mine)  # host and ports tell the nodes apart
            self._watcher.stdin.write(json.dumps({'nodes': table, 'me': me, 'key': key}) +
                                      '\n')
            self._watcher.stdin.flush()

    def set_limit(self, timeout):
        """A new step limit (a multi-node optimizer made with its own ``watchdog=``)."""
        self.timeout, self.limit_from = timeout, "the optimizer's watchdog="
        self.startup, self.startup_from = _startup(timeout, self.settings)
        if self._row is not None:
            self._board.set_limits(timeout, self.startup,
                                   _sources(self.limit_from, self.startup_from))

    def mark_calls(self, communicator):
        """``communicator`` with its communication calls marked on this rank's row (a
        wrapper, ``call_marks.MarkedCommunicator``)."""
        return call_marks.mark_communicator(communicator, self)

    # --- the marks (plain stores: cheap enough for every call, step and batch) --------------
    def enter(self, name):
        """A communication call begins (``runtime.watch.call_marks``); nested calls count once."""
        local = self._local
        depth = getattr(local, 'depth', 0)
        local.depth = depth + 1
        row = self._row
        if depth or row is None:
            return
        if threading.get_ident() == self._main:
            row[board_layout.CALL] = pb.call_code(name)
            row[board_layout.CALL_NS] = pb.now_ns()
            row[board_layout.CALLS_MADE] += 1
            row[board_layout.INSIDE] = 1
        else:  # the communication thread of double buffering or overlap
            row[board_layout.BG_CALL] = pb.call_code(name)
            row[board_layout.BG_CALLS] += 1
            row[board_layout.BG_INSIDE] = 1

    def leave(self):
        local = self._local
        local.depth = depth = getattr(local, 'depth', 1) - 1
        row = self._row
        if depth or row is None:
            return
        if threading.get_ident() == self._main:
            row[board_layout.CALL_NS] = pb.now_ns()
            row[board_layout.INSIDE] = 0
        else:
            row[board_layout.BG_INSIDE] = 0

    def _base(self):
        """The phase a rank is in when it is in no step, evaluation or checkpoint."""
        if self._over:
            return board_layout.AFTER
        return board_layout.BETWEEN if self._steps else board_layout.STARTUP

    def _mark(self, phase, count=0):
        row = self._row
        if row is None:
            return
        row[board_layout.COUNT] = count
        row[board_layout.PROGRESS_NS] = pb.now_ns()
        if not row[board_layout.INSIDE]:
            row[board_layout.CALLS_MADE] = 0  # calls are counted from the phase's start
        row[board_layout.PHASE] = phase

    def step_started(self):
        """A training step begins (``update()`` was called)."""
        self._mark(board_layout.STEP)

    def beat(self):
        """A training step finished."""
        self._steps += 1
        if self._row is not None:
            self._row[board_layout.FINISHED_STEPS] = self._steps
        self._mark(self._base())

    def evaluation(self, batch):
        """Evaluation batch ``batch`` (0: the evaluation starts)."""
        self._mark(board_layout.FINAL_EVALUATION if self._over else board_layout.EVALUATION, batch)

    def checkpoint(self, place=None):
        """A checkpoint begins, written to the held directory ``place``
        (``runtime.files.held.Held``: where the watcher removes this rank's temporary files
        if it has to end the job meanwhile, and only while its path still names it)."""
        if place is not None and self._row is not None:
            self._board.set_writing_to(self._slot, temporaries.writing_record(
                place.path, place.identity))
        self._mark(board_layout.CHECKPOINT)

    def between(self):
        """Back to the work between steps (an evaluation or a checkpoint ended)."""
        if self._row is not None and self._row[board_layout.PHASE] == board_layout.CHECKPOINT:
            self._board.set_writing_to(self._slot, '')
        self._mark(self._base())

    def training_over(self):
        """Training ended: what follows (a final evaluation, reductions, writing results) is
        watched with the limits of between steps, and a rank working alone is no stall."""
        self._over = True
        self._mark(board_layout.AFTER)

    def stop(self):
        """This rank is done (at exit; every rank; idempotent): the watcher stops when every
        rank of its node is."""
        if self._row is None:
            return
        self._mark(board_layout.FINISHED)
        self._row = None
        if self._watcher is not None:
            abort.tell_watcher(node_watcher=0)  # stopped on purpose: no longer watched
            try:
                self._watcher.stdin.write('stop\n')
                self._watcher.stdin.flush()
                if all(r[board_layout.PHASE] == board_layout.FINISHED or not r[board_layout.PID]
                       for r in self._board.rows()):
                    self._watcher.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            self._watcher = None
        if self in STATE.watchdogs:
            STATE.watchdogs.remove(self)


def _host():
    return socket.gethostname()


def _mark_evaluations():
    """Chainer's Evaluator marks each batch on the active watchdog (once per process): a
    long evaluation is progress, not a stall, while its batches move."""
    if patches.applied('watchdog'):
        return
    original = Evaluator.__call__

    def __call__(self, trainer=None):
        dog = active()
        if dog is None:
            return original(self, trainer)
        converter = self.converter
        batches = [0]

        def marked(*args, **kwargs):
            batches[0] += 1
            dog.evaluation(batches[0])
            return converter(*args, **kwargs)
        dog.evaluation(0)
        self.converter = marked
        try:
            return original(self, trainer)
        finally:
            self.converter = converter
            dog.between()
    patches.apply(Evaluator, '__call__', __call__, 'watchdog',
                  'each evaluation batch is progress, not a stall')
