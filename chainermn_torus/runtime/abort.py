"""Abort the whole MPI job when one rank raises, naming the rank and the error.

An uncaught exception on one rank would leave the others waiting in their next collective
until the batch job's time runs out. ChainerMN has a hook for this
(``chainermn.global_except_hook``); ours does the same and two things more: the summary line
names the host and the error itself (not only the rank), and it waits a moment before
``MPI_Abort``, because the abort tears the job down at once and output still in the
launcher's pipes could be lost (seen when several ranks failed together). Installed when the
first communicator or multi-node optimizer of ours is made (``runtime.startup``), under MPI
with more than one rank; a hook installed before it (a framework's, a debugger's) still runs
first.
``CHAINERMN_TORUS_NO_ABORT=1`` leaves Python's default behaviour.
"""
import socket
import sys
import time

__all__ = ['install', 'ABORT_DELAY_S']

ABORT_DELAY_S = 1.0
_installed = []  # the hook that was in place before ours, once ours is installed


def _hook(exctype, value, tb):
    try:
        _installed[0](exctype, value, tb)
    finally:
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
        sys.stderr.write(
            '\n******************************************\n'
            'chainermn_torus: Uncaught exception on rank {} ({}): {}: {}\n'
            '   Calling MPI_Abort() to end every rank of the job.\n'
            '******************************************\n'.format(
                rank, socket.gethostname(), exctype.__name__, value))
        sys.stderr.flush()
        sys.stdout.flush()
        time.sleep(ABORT_DELAY_S)
        MPI.COMM_WORLD.Abort(1)


def install():
    """Install the hook when MPI runs with more than one rank (idempotent)."""
    from mpi4py import MPI
    if _installed or not MPI.Is_initialized() or MPI.COMM_WORLD.size < 2:
        return  # e.g. a loader process (MPI4PY_RC_INITIALIZE=false): no MPI there
    from chainermn_torus import config
    if config.env('no_abort')[0]:
        return
    _installed.append(sys.excepthook)
    sys.excepthook = _hook
