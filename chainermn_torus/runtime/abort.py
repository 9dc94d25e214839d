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

SIGTERM (what batch systems send at the time limit, and scancel) would kill the rank where
it stands: in the middle of a checkpoint write (leaving a temporary file), before the
timeline is written, with no word of why. Where the script has not set its own SIGTERM
handler, ``install`` turns it into a ``Terminated`` exception in the main thread, so
clean-up code runs and the hook above names the signal and ends the job. A main thread
blocked in a long MPI call cannot run Python handlers, so a watcher thread, woken through
``signal.set_wakeup_fd``, ends the process as SIGTERM would after ``TERM_GRACE_S`` if the
exception has not done so by then.
"""
import os
import signal
import socket
import sys
import threading
import time

__all__ = ['install', 'ABORT_DELAY_S', 'Terminated', 'TERM_GRACE_S']

ABORT_DELAY_S = 1.0
TERM_GRACE_S = 3.0  # > ABORT_DELAY_S: the exception path gets its chance first
_installed = []  # the hook that was in place before ours, once ours is installed


class Terminated(BaseException):
    """SIGTERM arrived (a batch time limit, scancel, mpiexec forwarding a kill)."""


_aborting = threading.Event()  # the hook is ending the job: the SIGTERM watcher waits


def _hook(exctype, value, tb):
    _aborting.set()
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
        from chainermn_torus.runtime import devshm, timeline
        timeline.emergency_flush()  # MPI_Abort skips atexit, where it is written otherwise
        devshm.unlink_mpi_segments()  # MPI_Abort skips MPI_Finalize, which would remove it
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
    _catch_sigterm()


def _on_sigterm(signum, frame):
    raise Terminated('SIGTERM received (a batch time limit, scancel, or the launcher ending '
                     'the job); the latest complete checkpoint, if any, is intact')


def _catch_sigterm():
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return  # the script (or a framework) handles SIGTERM itself
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd)
    except ValueError:
        os.close(read_fd)
        os.close(write_fd)
        return
    if previous != -1:  # someone else's wakeup fd (an event loop): leave SIGTERM alone
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    threading.Thread(target=_watch_sigterm, args=(read_fd,), daemon=True,
                     name='chainermn_torus-sigterm').start()


def _watch_sigterm(read_fd):
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data:
            time.sleep(TERM_GRACE_S)
            if _aborting.is_set():  # the handler ran and the hook is ending the job
                time.sleep(4 * TERM_GRACE_S)
            # Still here: the main thread is blocked in C and never ran the handler.
            from chainermn_torus.runtime import timeline
            timeline.emergency_flush()
            sys.stderr.write('chainermn_torus: SIGTERM; the main thread is blocked (in MPI?): '
                             'ending this rank\n')
            sys.stderr.flush()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
