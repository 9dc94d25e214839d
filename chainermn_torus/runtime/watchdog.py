"""A watchdog for ranks stuck in a collective whose peer is gone or hangs.

MPI launchers end the job when a rank exits abnormally (MPICH's hydra, srun with
--kill-on-bad-exit), and an uncaught exception calls MPI_Abort through our abort hook
(``chainermn_torus.runtime.abort``). What neither catches is a rank that stays alive but stops:
stuck in I/O, in a deadlock, or waiting in a collective for a peer on a node that froze.
Every rank then waits until the batch job's time limit.

With a watchdog (``CHAINERMN_TORUS_WATCHDOG=SECONDS``, or ``watchdog=SECONDS`` in
``create_multi_node_optimizer``), a daemon thread keeps two clocks, armed from the first
finished step on (compiling and the first broadcast do not count):

* inside a training step (from ``update()`` to its end: forward, backward, the all-reduce,
  the update), the limit is SECONDS: a step that long means the rank waits for a peer;
* between steps (loading data, evaluation, checkpoints, other extensions: the work a
  healthy job does for a while on its own), the limit is ``OUTSIDE_FACTOR`` x SECONDS, so an
  end-of-epoch evaluation or a checkpoint does not count as a stalled step.

When a limit passes, the thread reads the progress of the node's ranks from a node-shared
window (each rank's last started and finished step, readable without that rank's help),
prints which rank waits, for how long, and which ranks have not reached its step, and calls
MPI_Abort on COMM_WORLD so the launcher ends every rank. A rank that stopped outside a step is found by
its peers: they enter the next step and wait there.
"""
import atexit
import os
import socket
import sys
import threading
import time

import numpy

from chainermn_torus import config
from chainermn_torus.runtime import devshm, timeline
from chainermn_torus.runtime.abort import ABORT_DELAY_S

__all__ = ['Watchdog', 'from_env', 'WATCHDOG_ENV', 'OUTSIDE_FACTOR']

WATCHDOG_ENV = config.SETTINGS['watchdog'].env
OUTSIDE_FACTOR = 10  # the limit between steps, in multiples of the limit inside one


class _Board(object):
    """The (last started step, last finished step) of every rank of this node, in a
    node-shared window: each rank stores its own pair, and the watchdog thread reads the
    others' with plain loads, which needs nothing from them, not even that they run (a
    one-sided Get to a stopped rank would wait for it). Ranks on other nodes are reported
    by their own node's watchdogs, which fire at the same time.
    """

    def __init__(self, comm):
        from mpi4py import MPI
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # creation is collective
        self.ranks = node.allgather(comm.rank)        # node position -> rank in comm
        self.win = MPI.Win.Allocate_shared(16, 8, comm=node)
        self.views = []
        for i in range(node.size):
            mem, _ = self.win.Shared_query(i)
            self.views.append(numpy.frombuffer(mem, dtype=numpy.int64, count=2))
        self.mine = self.views[node.rank]
        self.mine[:] = 0
        node.Barrier()
        self.size = comm.size

    def publish(self, started, finished):
        self.mine[0], self.mine[1] = started, finished

    def read(self):
        """{rank: (started, finished)} for the ranks of this node."""
        return {r: (int(v[0]), int(v[1])) for r, v in zip(self.ranks, self.views)}


class Watchdog(object):

    def __init__(self, timeout, rank=None, abort=None, comm=None, outside=None):
        self.timeout = config.value('watchdog', timeout, 'watchdog')[0]
        self.outside = OUTSIDE_FACTOR * self.timeout if outside is None else float(outside)
        self.rank = rank if rank is not None or comm is None else comm.rank
        self._abort = abort or _mpi_abort
        self._board = None if comm is None else _Board(comm)
        self._last = None      # when the last step finished; None: not armed yet
        self._entered = None   # when the current step started; None: between steps
        self._where = 'before the first step'
        self._steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='chainermn_torus-watchdog',
                                        daemon=True)
        self._thread.start()
        atexit.register(self.stop)  # ranks waiting in MPI_Finalize for slower ones are fine

    def step_started(self):
        """A training step begins (``update()`` was called)."""
        self._entered = time.monotonic()
        if self._board is not None:
            self._board.publish(self._steps + 1, self._steps)

    def beat(self, where='step'):
        """A training step finished (``where``: what comes next, for the message)."""
        self._steps += 1
        self._where = where
        self._entered = None
        self._last = time.monotonic()
        if self._board is not None:
            self._board.publish(self._steps, self._steps)

    def stop(self):
        self._stop.set()

    def _state(self, now):
        """(seconds, limit, what this rank is doing), or None while not armed."""
        last, entered = self._last, self._entered
        if last is None:
            return None
        if entered is not None:
            return now - entered, self.timeout, 'in step {}'.format(self._steps + 1)
        return now - last, self.outside, 'between steps {} and {} ({})'.format(
            self._steps, self._steps + 1, self._where)

    def _run(self):
        period = min(1.0, self.timeout / 4)
        while not self._stop.wait(period):
            state = self._state(time.monotonic())
            if state is None or state[0] <= state[1]:
                continue
            idle, limit, doing = state
            rank = self.rank if self.rank is not None else _rank()
            sys.stderr.write(
                'chainermn_torus watchdog: rank {} ({}) has been {} for {:.0f} s (limit {:.0f} '
                's {}, set by {}); {}. Aborting the whole job (MPI_Abort) instead of waiting '
                'for the batch time limit.\n'.format(
                    rank, socket.gethostname(), doing, idle, limit,
                    'inside a step' if limit == self.timeout else 'between steps',
                    WATCHDOG_ENV, self._peers()))
            sys.stderr.flush()
            # Give the launcher a moment to forward the message: MPI_Abort tears the job
            # down at once, and output still in the launcher's pipes can be lost (seen
            # with 4 ranks whose watchdogs all fired together).
            timeline.emergency_flush()
            devshm.unlink_mpi_segments()  # MPI_Abort skips MPI_Finalize, which removes it
            time.sleep(ABORT_DELAY_S)
            self._abort()
            return

    def _peers(self):
        """Which ranks of this node this one is waiting for, from the progress board."""
        if self._board is None:
            return 'a peer has probably died or hangs'
        progress = self._board.read()
        mine = self._steps + (1 if self._entered is not None else 0)
        behind = sorted((r, p) for r, p in progress.items() if p[0] < mine)
        elsewhere = '' if len(progress) == self._board.size else \
            ' (ranks on other nodes: their own watchdogs report them)'
        if behind:
            return 'on this node, rank(s) {} have not started step {} ({}){}'.format(
                ', '.join(str(r) for r, _ in behind), mine, ', '.join(
                    'rank {} finished step {}'.format(r, p[1]) for r, p in behind[:8]),
                elsewhere)
        stuck = sorted(r for r, p in progress.items() if p[0] > p[1])
        return ('every rank of this node has started step {} and rank(s) {} have not '
                'finished it: the rank holding them up is on another node, or all wait in '
                'the same call{}'.format(mine, ', '.join(map(str, stuck)) or 'none', elsewhere))


def _rank():
    try:
        from mpi4py import MPI
        return MPI.COMM_WORLD.rank
    except Exception:  # noqa: BLE001 -- only for the message
        return '?'


def _mpi_abort():
    try:
        from mpi4py import MPI
        MPI.COMM_WORLD.Abort(70)
    finally:
        os._exit(70)  # if Abort returned or MPI was gone, still end this rank


def from_env(timeout=None, comm=None):
    """A Watchdog for ``timeout`` seconds, else ``$CHAINERMN_TORUS_WATCHDOG``, else None.

    ``comm`` (an mpi4py communicator, collective: every rank must pass it) lets the message
    name the ranks that did not arrive."""
    timeout = config.value('watchdog', timeout, 'watchdog')[0]
    return None if timeout is None else Watchdog(timeout, comm=comm)
