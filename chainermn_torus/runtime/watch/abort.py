"""Abort the whole MPI job when one rank raises, naming the rank and the error.

An uncaught exception on one rank would leave the others waiting in their next collective
until the batch job's time runs out. ChainerMN has a hook for this
(``chainermn.global_except_hook``); ours does the same and two things more: the summary line
names the host and the error itself (not only the rank), and it waits a moment before
``MPI_Abort``, because the abort tears the job down at once and output still in the
launcher's pipes could be lost (seen when several ranks failed together). Installed when the
first communicator or multi-node optimizer of ours is made (``process_setup``), under MPI
with more than one rank; a hook installed before it (a framework's, a debugger's) still runs
first.
Installed by ``process_setup.init`` for this package's communicators, optimizer and
launcher; ``CHAINERMN_TORUS_ABORT_HOOK`` says otherwise: ``off`` leaves Python's default
behaviour, ``on`` installs it for ChainerMN's own communicators too (as ChainerMN's
``CHAINERMN_FORCE_ABORT_ON_EXCEPTION`` does its own). ``uninstall`` puts everything back.

SIGTERM (what batch systems send at the time limit, and scancel) would kill the rank where
it stands: in the middle of a checkpoint write (leaving a temporary file), before the
timeline is written, with no word of why. Where the script has not set its own SIGTERM
handler, ``install`` turns it into a ``Terminated`` exception in the main thread, so
clean-up code runs and the hook above names the signal and ends the job. A main thread
blocked in a long MPI call cannot run Python handlers, and a thread cannot help either:
mpi4py's object collectives (``comm.allreduce(obj)``, ChainerMN's ``allreduce_obj`` in every
multi-node evaluator) hold the GIL while they wait, so no other thread of the rank runs. The
watcher is therefore a small process of its own (``watchers.rank_watch``): the C-level
signal handler writes the signal's number into a pipe (``signal.set_wakeup_fd``) whose
other end the watcher reads, and if the rank is still alive ``TERM_GRACE_S`` later (longer
while the hook is already aborting) the watcher says so and kills it, so the job ends
instead of hanging. The same watcher says the rank's death by a signal, and leaves when the
rank does.
"""
import atexit
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import chainer
import psutil

from chainermn_torus import config
from chainermn_torus.errors import Refusal
from chainermn_torus.process import STATE
from chainermn_torus.runtime import report
from chainermn_torus.watchers import processes
from chainermn_torus.runtime import timeline
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.files import devshm
from chainermn_torus.watchers import command, rank_watch, ranks

__all__ = ['install', 'ABORT_DELAY_S', 'Terminated', 'TERM_GRACE_S', 'say_on_signal']

ABORT_DELAY_S = 1.0
REFUSAL_WAIT_S = 2.0  # > ABORT_DELAY_S: a rank other than 0 lets rank 0's refusal end the job
REFUSAL_TAG = 32_001  # other ranks' refusals to rank 0 (MPI guarantees tags up to 32767)
TERM_GRACE_S = 3.0  # > ABORT_DELAY_S: the exception path gets its chance first


# What the installed hook holds (process.STATE.abort; one per process, as sys.excepthook
# is): ``previous``, the hook in place before ours, once ours is; ``channel``, a duplicate of
# the world made at install (collective: the first communicator or optimizer), so that a
# script's receive from any tag on the world cannot take a refusal's message; ``wakeup``, the
# write end of the SIGTERM watcher's pipe, once it runs; ``said``, the sockets that say
# "said on this node", held until exit; ``refusing``, waiting for rank 0's abort after
# sending it a refusal; ``exit``, what the process passed to sys.exit ('code', the runtime
# patch in ``install``); ``on_disk``, what a checkpointer says is on disk (say_on_signal).


class Terminated(BaseException):
    """SIGTERM arrived (a batch time limit, scancel, mpiexec forwarding a kill)."""


_ABORTING = bytes([rank_watch.ABORTING])  # by the hook, to the watcher: not a signal


def _hook(exctype, value, tb):
    if STATE.abort.wakeup is not None:  # the hook is ending the job: the SIGTERM watcher waits
        try:
            os.write(STATE.abort.wakeup, _ABORTING)
        except OSError:
            pass
    if isinstance(value, Refusal) and not _setting('debug'):
        return _refuse(value)
    if isinstance(value, (Terminated, KeyboardInterrupt)) and not _setting('debug'):
        return _ended_by_signal(value)
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_size() < 2:  # one process: Python's own report, nothing to end
        return STATE.abort.previous(exctype, value, tb)
    try:
        STATE.abort.previous(exctype, value, tb)
    finally:
        rank = MPI.COMM_WORLD.Get_rank()
        # One write: the banners of ranks that fail together stay apart on the shared pipe.
        report.line(
            '\n******************************************\n'
            f'chainermn_torus: Uncaught exception on rank {rank} '
            f'({socket.gethostname()}): {exctype.__name__}: {_said(value)}\n'
            '   Calling MPI_Abort() to end every rank of the job.\n'
            '******************************************')
        sys.stdout.flush()
        timeline.emergency_flush()  # MPI_Abort skips atexit, where it is written otherwise
        _unlink_mpi_segments()  # MPI_Abort skips MPI_Finalize, which would remove it
        time.sleep(ABORT_DELAY_S)
        MPI.COMM_WORLD.Abort(1)


def _said(value):
    """An exception's message for the banner; one that has none says what it means (a
    MemoryError of Python's own allocator carries no message: the banner ended in ': ')."""
    text = str(value)
    if text:
        return text
    if isinstance(value, MemoryError):
        memory = psutil.virtual_memory()
        return (f'this process could not get more memory ({report.format_bytes(memory.available)} '
                f'of {report.format_bytes(memory.total)} free on {socket.gethostname()}; a limit '
                'of '
                'the job, ulimit -v or its cgroup, may be lower)')
    return '(no message)'


def _recording_exit(original):
    def exit(status=None):
        STATE.abort.exit['code'] = status
        return original(status)
    exit.__doc__ = original.__doc__
    return exit


def _exit_code(status):
    """The process's exit status for ``sys.exit(status)``, as Python computes it."""
    if status is None:
        return 0
    return status if isinstance(status, int) else 1


def _left_early():
    """At exit, before MPI_Finalize (registered after mpi4py's hook, so run before it): a
    rank that called ``sys.exit(N)`` with N other than 0 while the others go on left them
    waiting in their next collective, and itself in MPI_Finalize, with no line (with a
    watchdog, blamed on "a deadlock"). The job ends now, naming the rank and N."""
    from mpi4py import MPI
    exited = STATE.abort.exit
    if 'code' not in exited or _exit_code(exited['code']) == 0 or MPI.Is_finalized() or \
            MPI.COMM_WORLD.Get_size() < 2:
        return
    status = exited['code']
    code = _exit_code(status)
    text = (f'rank {MPI.COMM_WORLD.Get_rank()} ({socket.gethostname()}, pid {os.getpid()}) called '
            f'sys.exit({status!r}); the job ends with exit code {code}')
    if said_once('sys.exit'):  # one line per node where every rank exits so
        report.line(report.PREFIX + text)
    sys.stdout.flush()
    timeline.emergency_flush()
    _unlink_mpi_segments()
    time.sleep(ABORT_DELAY_S)  # the other ranks that exit alike reach their exit too
    MPI.COMM_WORLD.Abort(code)


def say_on_signal(describe):
    """``describe()``: a text of what is on disk (the newest complete checkpoint), which
    the line a signal ends the job with says instead of a guess."""
    STATE.abort.on_disk[:] = [describe]


def _on_disk():
    try:
        return '; '.join(describe() for describe in STATE.abort.on_disk) or \
            'no checkpoint is written by this job'
    except Exception:  # noqa: BLE001 -- a line must still be said
        return 'what is on disk could not be read'


_SIGNAL_WHY = {'SIGINT': 'Ctrl-C at mpiexec, or the launcher ending the job',
               'SIGTERM': 'a batch time limit, scancel, or the launcher ending the job'}


def signal_text(name, on_disk):
    """What a node's first rank says after ``rank R (host): `` when signal ``name`` (SIGTERM,
    SIGINT) from outside ends the job; ``chainermn-torus elastic`` reads it (the node is
    then lost, not the training complete)."""
    return f'{name} ({_SIGNAL_WHY[name]}) received; the job ends; {on_disk}'


def _ended_by_signal(value):
    """The job ends by a signal from outside (a batch system's cancel or time limit, Ctrl-C
    at mpiexec): that is said in one line per node, by its first rank to get the signal,
    which then ends the job; the node's other ranks wait quietly to be ended with it. It
    was a traceback and a banner per rank: 101-129 lines for 2 ranks."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    rank, host = world.Get_rank(), socket.gethostname()
    text = signal_text('SIGINT' if isinstance(value, KeyboardInterrupt) else 'SIGTERM',
                       _on_disk())
    first = said_once(text)
    if first:
        report.line(f'{report.PREFIX}rank {rank} ({host}): {text}')
    sys.stdout.flush()
    timeline.emergency_flush()
    _unlink_mpi_segments()
    if world.Get_size() < 2:
        return  # one process: Python exits with status 1 once the hook returns
    if not first:  # this node said it: its first rank ends the job, this one with it
        STATE.abort.refusing = True  # a SIGTERM now is that end reaching this rank
        time.sleep(REFUSAL_WAIT_S)
        sys.stdout.flush()
        os._exit(128 + signal.SIGTERM)
    time.sleep(ABORT_DELAY_S)
    world.Abort(128 + (signal.SIGINT if isinstance(value, KeyboardInterrupt)
                       else signal.SIGTERM))


def _setting(key):
    """A flag read while ending the job: a bad value is the default here (the refusal of it
    is what is being said, or is said where the setting is used)."""
    return config.alone(key)


def _unlink_mpi_segments():
    """The job is ending: the names of the MPI libraries' segments this process maps go
    (devshm.unlink_at_end; MPI_Abort skips MPI_Finalize, which would remove MPICH's), unless
    CHAINERMN_TORUS_KEEP_MPI_SHM asks to keep them (a bad value: removed); and the topology
    file an aborted mpiexec leaves in /tmp."""
    if not _setting('keep_mpi_shm'):
        devshm.unlink_at_end()
    devshm.remove_launcher_topology()


def said_once(text):
    """Whether this process is the first of its node to say ``text`` in this job: it binds
    an abstract Unix socket named after the job, the launcher's process on the node (the
    ranks' common parent) and the text. No file: the name goes with the process."""
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    key = f'{devshm.PREFIX}said_{devshm.job_tag()}_{os.getppid()}_{digest}'
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind('\0' + key)
    except OSError:
        sock.close()
        # Taken: by a rank of this job (this user's), or by another user who bound the
        # predictable name first to hide the line, which is then said all the same.
        return not ranks.holders(key)
    STATE.abort.said.append(sock)  # held until the process ends
    return True


def refusal_line(text, rank, host):
    """The line a refusal is said in: its message, and where unless it is rank 0's."""
    if text.startswith(report.PREFIX):
        text = text[len(report.PREFIX):]
    where = '' if rank == 0 or f'rank {rank} ({host})' in text else \
        f'rank {rank} ({host}): '
    return report.PREFIX + where + text


def _refuse(value):
    """End the job with a refusal's message, said once.

    Rank 0 says its own at once, and for ``ABORT_DELAY_S`` the messages other ranks send it
    (a nonblocking send each, on ``REFUSAL_TAG``) that differ from every one said, then
    ends the job. Any other rank sends its message to rank 0 and waits ``REFUSAL_WAIT_S`` to
    be ended with the job; still alive then (rank 0 did not refuse), it says its own, unless
    a rank of its node said the same, and ends the job itself ``ABORT_DELAY_S`` later.
    Every rank refusing the same value: one line."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    rank, host = world.Get_rank(), socket.gethostname()
    message = str(value)
    if rank != 0 and world.Get_size() > 1:
        data = bytearray(json.dumps([host, message]).encode())
        STATE.abort.channel.Isend([data, MPI.BYTE], dest=0, tag=REFUSAL_TAG)  # ended with the job
        STATE.abort.refusing = True  # a SIGTERM now is rank 0's abort reaching this rank
        time.sleep(REFUSAL_WAIT_S)
        STATE.abort.refusing = False
    said = said_once(message)
    if said:
        report.line(refusal_line(message, rank, host))
    if rank == 0 and STATE.abort.channel is not None:  # several ranks: theirs, that differ
        _say_others(STATE.abort.channel, {message}, time.monotonic() + ABORT_DELAY_S)
    elif said and rank != 0:
        # The launcher forwards the line meanwhile: MPICH's proxy, told to abort, ends the
        # ranks and stops reading their pipes (a loaded `make test` lost the line).
        time.sleep(ABORT_DELAY_S)
    sys.stdout.flush()
    timeline.emergency_flush()
    _unlink_mpi_segments()
    if world.Get_size() < 2:
        return  # one process: Python exits with status 1 once the hook returns
    world.Abort(1)


def _say_others(channel, said, deadline):
    """Rank 0: say the other ranks' refusals that differ from those said, until
    ``deadline`` (the launcher forwards the lines meanwhile)."""
    from mpi4py import MPI
    status = MPI.Status()
    while time.monotonic() < deadline:
        if not channel.Iprobe(source=MPI.ANY_SOURCE, tag=REFUSAL_TAG, status=status):
            time.sleep(0.02)
            continue
        data = bytearray(status.Get_count(MPI.BYTE))
        channel.Recv([data, MPI.BYTE], source=status.Get_source(), tag=REFUSAL_TAG)
        try:
            host, message = json.loads(data.decode())
        except ValueError:
            continue
        if message not in said:
            said.add(message)
            report.line(refusal_line(message, status.Get_source(), host))


def _trainer_says_no_refusal():
    """Chainer's Trainer.run prints every exception of the loop with its traceback on every
    rank before re-raising it; the hook then said it again (a traceback printed twice), and
    a refusal's traceback says nothing its message does not. The loop runs with that print
    off: the hook says each exception once, a refusal in its line, any other with its
    traceback and the rank."""
    if patches.applied('abort'):
        return
    trainer = chainer.training.Trainer
    original = trainer.run

    def run(self, show_loop_exception_msg=True):
        return original(self, show_loop_exception_msg=False)
    run.__doc__ = original.__doc__
    patches.apply(trainer, 'run', run, 'abort', 'an exception of the loop is said once, by '
                  'the abort hook (a refusal without the loop\'s traceback)')


def install():
    """Install the hook (idempotent). With one rank it only says refusals in their line:
    there is no job to end and SIGTERM ends the process as usual."""
    from mpi4py import MPI
    if STATE.abort.previous is not None or not MPI.Is_initialized():
        return  # e.g. a loader process (MPI4PY_RC_INITIALIZE=false): no MPI there
    STATE.abort.previous = sys.excepthook
    sys.excepthook = _hook
    devshm.mpi_started()  # what an aborted launcher's proxy left is found by this time
    _trainer_says_no_refusal()
    if MPI.COMM_WORLD.size > 1:
        patches.apply(sys, 'exit', _recording_exit(sys.exit), 'abort',
                      "a rank's sys.exit(N) ends the job naming the rank and N, instead of "
                      'leaving the other ranks waiting for it')
        atexit.register(_left_early)
    if MPI.COMM_WORLD.size > 1:
        STATE.abort.channel = MPI.COMM_WORLD.Dup()
    if MPI.COMM_WORLD.size > 1:
        _catch_sigterm()


def uninstall():
    """Undo ``install``: the hook before it, ``sys.exit`` and ``Trainer.run`` as they were,
    SIGTERM's default, and the rank's watcher told of a normal end (it leaves). The
    duplicate of COMM_WORLD the refusals travel on is kept: freeing it is collective."""
    if STATE.abort.previous is None:
        return False
    sys.excepthook, STATE.abort.previous = STATE.abort.previous, None
    patches.uninstall('abort')
    atexit.unregister(_left_early)
    if STATE.abort.wakeup is not None:
        _tell_watcher(_BYE)
        atexit.unregister(_tell_watcher)
        signal.set_wakeup_fd(-1)
        os.close(STATE.abort.wakeup)
        STATE.abort.wakeup = None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return True


def _on_sigterm(signum, frame):
    if STATE.abort.refusing:
        # Waiting to be ended with the job after sending rank 0 its refusal: this is that
        # end (Open MPI's MPI_Abort signals the other ranks; MPICH's kills them), said by
        # rank 0. Quietly, without a traceback from inside the hook.
        sys.stdout.flush()
        os._exit(1)
    raise Terminated('SIGTERM received (a batch time limit, scancel, or the launcher ending '
                     f'the job); {_on_disk()}')


def _catch_sigterm():
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return  # the script (or a framework) handles SIGTERM itself
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        os.close(read_fd)
        os.close(write_fd)
        return
    if previous != -1:  # someone else's wakeup fd (an event loop): leave SIGTERM alone
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    try:
        from mpi4py import MPI
        who = f'rank {MPI.COMM_WORLD.rank} ({socket.gethostname()}, pid {os.getpid()})'
        # -I -S: no site packages, no environment: the watcher starts in milliseconds and
        # imports nothing of the job's (no MPI: it must not count as a process of the job).
        subprocess.Popen(command.argv('rank', read_fd, os.getpid(), TERM_GRACE_S, who,
                                      _oom_kills()),
                         pass_fds=(read_fd,), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL)
    except OSError:
        signal.set_wakeup_fd(-1)
        os.close(write_fd)
        return
    finally:
        os.close(read_fd)  # the watcher's end: EOF there means this process is gone
    STATE.abort.wakeup = write_fd
    signal.signal(signal.SIGTERM, _on_sigterm)
    atexit.register(_tell_watcher, _BYE)  # a normal end, not a death to explain
    os.register_at_fork(after_in_child=_forget_watcher)


def _forget_watcher():
    """In a child forked by the rank (a fork-based iterator's workers): the watcher's pipe
    is the rank's. Held open there, its end of file would wait for the children, and the
    watcher would see the rank's death late (``watchers.rank_watch``)."""
    if STATE.abort.wakeup is None:
        return
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        return  # not the main thread: kept (closed, its number could name another file)
    try:
        os.close(STATE.abort.wakeup)
    except OSError:
        pass
    STATE.abort.wakeup = None


_BYE = bytes([rank_watch.BYE])    # written to the watcher's pipe at a normal exit
_NEWS = bytes([rank_watch.NEWS])  # then a JSON object on one line: what the watchdog says


def _tell_watcher(data):
    if STATE.abort.wakeup is not None:
        try:
            os.write(STATE.abort.wakeup, data)  # one write: never cut by a signal's byte
        except OSError:
            pass


def tell_watcher(board=None, node_watcher=None):
    """What the watchdog tells this rank's watcher: ``board``, the node's progress board
    (where it reads the phase the rank died in); ``node_watcher``, the pid of the node's
    watcher process this rank started (0: stopped on purpose), which it then watches: a
    watcher that dies is a stall too, said, and the node's ranks ended."""
    news = {k: v for k, v in (('board', board), ('node_watcher', node_watcher))
            if v is not None}
    _tell_watcher(_NEWS + json.dumps(news).encode() + b'\n')


def _oom_kills():
    """The node's OOM kills so far, -1 where not known (the rank's watcher's argument)."""
    count = processes.oom_kills()
    return -1 if count is None else count
