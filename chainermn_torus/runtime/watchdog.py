"""A watchdog for ranks stuck in a collective whose peer is gone or hangs.

MPI launchers end the job when a rank exits abnormally (MPICH's hydra, srun with
--kill-on-bad-exit), and an uncaught exception calls MPI_Abort through our abort hook
(``chainermn_torus.runtime.abort``). What neither catches is a rank that stays alive but stops:
stuck in I/O, in a deadlock, or waiting in a collective for a peer on a node that froze.
Every rank then waits until the batch job's time limit.

With a watchdog (``CHAINERMN_TORUS_WATCHDOG=SECONDS``, or ``watchdog=SECONDS`` in
``create_multi_node_optimizer``), a daemon thread checks that training steps keep finishing.
The clock starts at the first step (compiling and the first broadcast do not count); if no
step finishes for SECONDS, the thread prints which rank, how long, and what it was doing last,
and calls MPI_Abort on COMM_WORLD so the launcher ends every rank. Choose SECONDS above the
longest pause between steps (evaluation, snapshots), and call ``optimizer.watchdog.stop()``
when training is over if the script does long work afterwards (the examples do).
"""
import atexit
import os
import socket
import sys
import threading
import time

from chainermn_torus import config

__all__ = ['Watchdog', 'from_env', 'WATCHDOG_ENV']

WATCHDOG_ENV = config.SETTINGS['watchdog'].env


class Watchdog(object):

    def __init__(self, timeout, rank=None, abort=None):
        self.timeout = config.value('watchdog', timeout, 'watchdog')[0]
        self.rank = rank
        self._abort = abort or _mpi_abort
        self._last = None      # time of the last finished step; None: not armed yet
        self._where = 'before the first step'
        self._steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='chainermn_torus-watchdog',
                                        daemon=True)
        self._thread.start()
        atexit.register(self.stop)  # ranks waiting in MPI_Finalize for slower ones are fine

    def beat(self, where='step'):
        """A training step finished (``where``: what comes next, for the message)."""
        self._steps += 1
        self._where = where
        self._last = time.monotonic()

    def stop(self):
        self._stop.set()

    def _run(self):
        period = min(1.0, self.timeout / 4)
        while not self._stop.wait(period):
            last = self._last
            if last is None:
                continue
            idle = time.monotonic() - last
            if idle > self.timeout:
                rank = self.rank if self.rank is not None else _rank()
                sys.stderr.write(
                    'chainermn_torus watchdog: rank {} ({}) finished no training step for '
                    '{:.0f} s (limit {:.0f} s, set by {}); last: {} after step {}. A peer has '
                    'probably died or hangs: aborting the whole job (MPI_Abort) instead of '
                    'waiting for the batch time limit.\n'.format(
                        rank, socket.gethostname(), idle, self.timeout, WATCHDOG_ENV,
                        self._where, self._steps))
                sys.stderr.flush()
                # Give the launcher a moment to forward the message: MPI_Abort tears the job
                # down at once, and output still in the launcher's pipes can be lost (seen
                # with 4 ranks whose watchdogs all fired together).
                from chainermn_torus.runtime.abort import ABORT_DELAY_S
                time.sleep(ABORT_DELAY_S)
                self._abort()
                return


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


def from_env(timeout=None):
    """A Watchdog for ``timeout`` seconds, else ``$CHAINERMN_TORUS_WATCHDOG``, else None."""
    timeout = config.value('watchdog', timeout, 'watchdog')[0]
    return None if timeout is None else Watchdog(timeout)
