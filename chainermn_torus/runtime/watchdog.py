"""A watchdog for jobs where a rank, or a whole node, stops while the others wait for it.

MPI launchers end the job when a rank exits abnormally (MPICH's hydra, srun with
--kill-on-bad-exit), and an uncaught exception calls MPI_Abort through our abort hook
(``chainermn_torus.runtime.abort``). What neither catches is a rank that stays alive but stops:
stuck in I/O, in a deadlock, stopped by a signal, or a node that froze whole. Every rank then
waits until the batch job's time limit.

With a watchdog (``CHAINERMN_TORUS_WATCHDOG=SECONDS``, or ``watchdog=SECONDS`` in
``create_multi_node_optimizer``), every rank marks its progress on its node's progress
board (``runtime.progress_board``: plain stores to a /dev/shm file, no MPI, no thread) and
one small process per node (``runtime.node_watch``, started by the node's first rank)
watches the board and the other nodes. The marks:

* a training step: from ``update()`` to its end (forward, backward, the all-reduce, the
  update); limit SECONDS, armed from the first finished step on (compiling and the first
  broadcast do not count);
* between steps (loading data, other extensions): ``OUTSIDE_FACTOR`` x SECONDS;
* an evaluation: each batch is progress (Chainer's ``Evaluator``, also ChainerMN's
  multi-node one), so a long evaluation is fine as long as its batches move; a batch may
  take SECONDS;
* a checkpoint (``extensions.checkpoint``): ``OUTSIDE_FACTOR`` x SECONDS from its start.

When a rank of a node passes its limit, that node's watcher names who the job waits for (a
node whose watcher went silent, or the ranks furthest behind, with their hosts and phases),
and ends the job: see ``runtime.node_watch``.
"""
import atexit
import json
import os
import socket
import subprocess
import sys

from chainer.training.extensions import Evaluator

from chainermn_torus import config
from chainermn_torus.runtime import progress_board as pb
from chainermn_torus.runtime.node_watch import addresses

__all__ = ['Watchdog', 'from_env', 'WATCHDOG_ENV', 'OUTSIDE_FACTOR', 'active']

WATCHDOG_ENV = config.SETTINGS['watchdog'].env
OUTSIDE_FACTOR = 10  # the limit between steps and in checkpoints, in multiples of the limit
_ACTIVE = []


def active():
    """The process's watchdog, or None: for the marks of evaluations and checkpoints."""
    return _ACTIVE[-1] if _ACTIVE else None


class Watchdog(object):
    """Collective over ``comm`` (an mpi4py communicator; default COMM_WORLD): every rank
    creates it at the same point."""

    def __init__(self, timeout, comm=None, outside=OUTSIDE_FACTOR):
        self.timeout = config.value('watchdog', timeout, 'watchdog')[0]
        from mpi4py import MPI
        comm = MPI.COMM_WORLD if comm is None else comm
        self._steps = 0
        self._armed = False
        self._watcher = None
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            self._start(comm, node, outside)
        finally:
            node.Free()
        _ACTIVE.append(self)
        _mark_evaluations()
        atexit.register(self.stop)

    def _start(self, comm, node, outside):
        problem, path, port = None, None, None
        if node.rank == 0:
            try:
                board = pb.Board.create(node.size, self.timeout, outside)
                path = board.path
                board.close()
                self._watcher = subprocess.Popen(
                    [sys.executable, '-m', 'chainermn_torus.runtime.node_watch', path,
                     str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    text=True, close_fds=True,
                    # Its own session: a launcher that kills the ranks' process groups
                    # leaves it the moment it needs to clean up after them. It ends by
                    # itself when this rank is gone.
                    start_new_session=True)
                port = int(self._watcher.stdout.readline())
            except (OSError, ValueError) as e:
                problem = 'cannot start the watchdog on {}: {}: {}'.format(
                    _host(), type(e).__name__, e)
        problem, path = node.bcast((problem, path))
        if problem is None:
            self._board = pb.Board(path)
            self._row = self._board.row(node.rank)
            self._row[pb.RANK], self._row[pb.PID] = comm.rank, os.getpid()
            self._row[pb.PHASE] = pb.NOT_ARMED
        problems = [p for p in comm.allgather(problem) if p]
        if problems:
            raise RuntimeError('chainermn_torus: ' + problems[0])
        mine = {'host': _host(), 'addrs': addresses(), 'port': port} if node.rank == 0 else None
        table = [t for t in comm.allgather(mine) if t is not None]
        if self._watcher is not None:
            me = table.index(mine)  # host and port tell the nodes apart
            self._watcher.stdin.write(json.dumps({'nodes': table, 'me': me}) + '\n')
            self._watcher.stdin.flush()

    # --- the marks (plain stores: cheap enough for every step and batch) --------------------
    def _mark(self, phase, count=0):
        row = self._row
        row[pb.COUNT] = count
        row[pb.PROGRESS_NS] = pb.now_ns()
        row[pb.PHASE] = phase if self._armed or phase == pb.FINISHED else pb.NOT_ARMED

    def step_started(self):
        """A training step begins (``update()`` was called)."""
        self._mark(pb.STEP)

    def beat(self, where=None):
        """A training step finished."""
        self._steps += 1
        self._armed = True
        self._row[pb.FINISHED_STEPS] = self._steps
        self._mark(pb.BETWEEN)

    def evaluation(self, batch):
        """Evaluation batch ``batch`` (0: the evaluation starts)."""
        self._mark(pb.EVALUATION, batch)

    def checkpoint(self):
        self._mark(pb.CHECKPOINT)

    def between(self):
        """Back to the work between steps (an evaluation or a checkpoint ended)."""
        self._mark(pb.BETWEEN)

    def stop(self):
        """Training is over: later work may take its time (every rank; idempotent)."""
        if getattr(self, '_row', None) is None:
            return
        self._mark(pb.FINISHED)
        if self._watcher is not None:
            try:
                self._watcher.stdin.write('stop\n')
                self._watcher.stdin.flush()
                self._watcher.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            self._watcher = None
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def _host():
    return socket.gethostname()


_EVALUATOR_MARKED = []


def _mark_evaluations():
    """Chainer's Evaluator marks each batch on the active watchdog (once per process): a
    long evaluation is progress, not a stall, while its batches move."""
    if _EVALUATOR_MARKED:
        return
    _EVALUATOR_MARKED.append(True)
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
    Evaluator.__call__ = __call__


def from_env(timeout=None, comm=None):
    """A Watchdog for ``timeout`` seconds, else ``$CHAINERMN_TORUS_WATCHDOG``, else None
    (collective over ``comm`` when there is one)."""
    timeout = config.value('watchdog', timeout, 'watchdog')[0]
    return None if timeout is None else Watchdog(timeout, comm=comm)
