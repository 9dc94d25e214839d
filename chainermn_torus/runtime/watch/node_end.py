"""Ending a node's part of a stalled job: its ranks, what they left, and a launcher that
waits for a node that cannot answer. The node watcher (``node_watch``) calls it once it has
said its verdict, or heard another node's.

The ranks are killed (SIGKILL: a stopped process cannot act on anything else), so the
launcher ends the job; what they left in /dev/shm and the checkpoint temporaries of those
killed while writing are removed. A launcher (mpiexec, srun) on this node still running
``LAUNCHER_GRACE_S`` later waits for a node that cannot answer (MPICH's hydra waited for a
frozen node's proxy in 4 runs of 8 on the emulated cluster, once until the harness's
limit): it is ended too, so the batch script goes on.
"""
import signal
import time

import psutil

from chainermn_torus.watchers import processes
from chainermn_torus.runtime.files import devshm
from chainermn_torus.watchers.temporaries import remove_temporary
from chainermn_torus.watchers import ranks

__all__ = ['end_ranks', 'remove_writers_temporaries', 'launcher_of', 'end_launcher',
           'LAUNCHERS', 'LAUNCHER_GRACE_S']

# Launchers whose exit ends the job step; the batch script above them is left alone.
LAUNCHERS = ('mpiexec', 'mpiexec.hydra', 'mpirun', 'prterun', 'srun', 'orterun')
LAUNCHER_GRACE_S = 3.0


def end_ranks(pids, held):
    """SIGKILL this node's ranks, wait for them, remove what they left in /dev/shm. Their
    own watchers stay silent (``ranks.end_ranks``: their canaries first; and
    ``ranks.ending``, appended to ``held``, which the caller keeps until it
    exits)."""
    held.append(ranks.ending(*pids))
    ranks.end_ranks(pids)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(processes.alive(p) for p in pids):
        time.sleep(0.05)
    try:
        devshm.sweep()
    except OSError:
        pass


def remove_writers_temporaries(writing):
    """``writing``: (pid, checkpoint directory or '') of the ranks ended, read once they are
    gone (a rank that began a checkpoint while they were being ended is on the board by
    then): a writer killed halfway leaves nothing behind."""
    for pid, directory in writing:
        if directory and not processes.alive(pid):
            remove_temporary(directory, pid)


def launcher_of(pid):
    """The MPI launcher this rank descends from, where it runs on this node, or None."""
    try:
        for parent in psutil.Process(pid).parents():
            if parent.name() in LAUNCHERS:
                return parent
    except psutil.Error:
        pass
    return None


def end_launcher(launcher):
    """A launcher still waiting LAUNCHER_GRACE_S after the ranks were killed is waiting
    for a node that cannot answer: end it. Only on the node it runs on; silently, as the
    job's output streams are closed by then (the verdict line was said)."""
    if launcher is None:
        return
    try:
        launcher.wait(LAUNCHER_GRACE_S)
        return
    except psutil.TimeoutExpired:
        pass
    except psutil.Error:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            launcher.send_signal(sig)
            launcher.wait(3.0)
            return
        except psutil.TimeoutExpired:
            continue
        except psutil.Error:
            return
