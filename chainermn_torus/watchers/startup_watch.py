"""The watch before a rank's communicator exists: from the process's first instruction that
runs the package to the start of the job's watchdog (``runtime.watch.watchdog``).

The watchdog needs MPI to start (its node board and its watchers' addresses are agreed over
the job's communicator), so a rank stopped before its communicator exists (stopped as soon
as its process existed, stuck in an import or a file system) left the others waiting in
MPI_Init or in the first collective with nothing to see it: no line, the job held until the
batch limit, MPICH's shared-memory file left in /dev/shm.

With a watchdog set (``CHAINERMN_TORUS_WATCHDOG``, or the launcher's ``--watchdog``),
``import chainermn_torus`` in a process an MPI launcher started (and the launcher, when it
reads ``--watchdog``) starts this small process beside the rank (``command.argv``): it
imports nothing beyond this package (it starts in milliseconds and needs no MPI). It ends when the
rank says its watchdog has started (``arrived()``: the node's watcher takes over from there) or
when the rank ends. Until then it looks at the ranks of its node, the launcher's other
children on the node, through /proc (their rank from the launcher's variables in their
environment, their process state; whether each arrived, from a name in the abstract socket
namespace the rank holds once it has):

* a rank of the node stopped (process state T) or a zombie for the step limit, not arrived;
* or the start-up limit passed (``CHAINERMN_TORUS_WATCHDOG_STARTUP``, default the larger of
  900 s and the step limit, as the watchdog's own start-up).

Then one watcher of the node (the first to claim its line) says who the node's ranks wait
for, removes the names of MPICH's shared-memory segments its ranks map (nothing stays in
/dev/shm), and ends the node's ranks (SIGKILL: a stopped process can do nothing else), so
the launcher ends the job. Ranks of other nodes waiting for it are ended by their own
watchers, each saying that no rank of its node is behind.

    watchers startup PID STEP_S STARTUP_S READ_FD   (started by ``start``)
"""
import os
import select
import signal
import socket
import subprocess
import time

from . import command, processes, ranks as node_ranks

__all__ = ['start', 'arrived', 'watch']

POLL_S = 0.25
_STATE = {}  # in the rank: 'write' (the pipe to its watcher), 'arrived' (the socket held)


def _arrival_name(key, rank):
    return f'cmtorus_arrived_{key}_{rank}'


def _has_arrived(key, rank, pid):
    """Whether rank ``rank`` of the job (process ``pid``) holds its arrival name."""
    return bool(node_ranks.holders(_arrival_name(key, rank) + '_', [pid]))


# --- in the rank ----------------------------------------------------------------------------
def start(step_s, startup_s):
    """Start the watcher of this process (not in a loader process, whose environment tells
    MPI not to start). Returns whether one runs. One that runs with other limits is
    replaced: the import starts one from the environment's limit before the launcher has
    read its flags, and a flag wins over a variable."""
    limits = (float(step_s), float(startup_s))
    if 'write' in _STATE and _STATE.get('limits') != limits:
        _replace()
    if 'write' in _STATE or os.environ.get('MPI4PY_RC_INITIALIZE', '').lower() in (
            '0', 'false', 'no', 'off'):
        return 'write' in _STATE
    read_fd, write_fd = os.pipe()
    try:
        _STATE['process'] = subprocess.Popen(
            command.argv('startup', os.getpid(), repr(float(step_s)),
                             repr(float(startup_s)), read_fd), pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except OSError:
        os.close(write_fd)
        return False
    finally:
        os.close(read_fd)
    _STATE['write'], _STATE['limits'] = write_fd, limits
    return True


def _replace():
    """End this process's watcher before it is started again: the end of its pipe is the
    end of its watch (as when the rank is gone), and it is reaped."""
    os.close(_STATE.pop('write'))
    _STATE.pop('limits', None)
    try:
        _STATE.pop('process').wait(timeout=5)
    except (KeyError, subprocess.TimeoutExpired):
        pass


def arrived():
    """The job's watchdog started on this rank: hold the arrival name (the node's other
    watchers see it) and let this rank's watcher go."""
    if 'arrived' not in _STATE:
        sock = node_ranks.hold(_arrival_name(node_ranks.key_of(os.getpid()), _own_rank()))
        if sock is not None:
            _STATE['arrived'] = sock  # held until the process ends
    write = _STATE.pop('write', None)
    if write is not None:
        try:
            os.write(write, b'a')
        except OSError:
            pass
        os.close(write)
        try:
            _STATE.pop('process').wait(timeout=5)  # it leaves at once: reaped, no zombie
        except (KeyError, subprocess.TimeoutExpired):
            pass


def _own_rank():
    for name in processes.RANK_VARIABLES:
        value = os.environ.get(name, '')
        if value.isdigit():
            return int(value)
    return -1


# --- the watcher ----------------------------------------------------------------------------
_SAID = {'T': 'stopped (process state T: SIGSTOP, a debugger, or a suspension of part of '
              'the job)',
         'Z': 'gone (a zombie: its process exited without ending the job)',
         't': 'stopped by a debugger (process state t)'}


def _node_ranks(key, me):
    """[(pid, rank, state, arrived)] of the launcher's children on this node (the job's
    ranks here), ``me`` included."""
    parent = int(key.split('_')[0])
    out = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        pid = int(name)
        st = processes.stat(pid)
        if st is None or st.ppid != parent:
            continue
        rank = processes.rank_of(pid)
        if rank is None and pid != me:
            continue  # not a rank (another child of the launcher's process)
        out.append((pid, rank, st.state, rank is not None and _has_arrived(key, rank, pid)))
    return sorted(out, key=lambda r: (r[1] is None, r[1] or 0))


def _mpich_segments(pids):
    """The /dev/shm/mpich_shm_* files the processes map (MPI_Init's, named until every rank
    of the node has mapped them: with one stopped before MPI_Init, never removed)."""
    found = set()
    for pid in pids:
        try:
            with open(f'/proc/{pid}/maps') as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(None, 5)  # an anonymous mapping has no sixth field
            if len(fields) == 6 and fields[5].strip().startswith('/dev/shm/mpich_shm_'):
                found.add(fields[5].strip())
    return sorted(found)


def _maps_shm(pid):
    """Whether process ``pid`` maps a file of /dev/shm (MPI_Init's shared memory)."""
    try:
        with open(f'/proc/{pid}/maps') as f:
            return any(' /dev/shm/' in line for line in f)
    except OSError:
        return False


def _claim(key):
    """Whether this is the node's first watcher to end the job: the socket of a name only
    one can hold, or None where a watcher of this user holds it. A name another user took
    first claims nothing: the watcher goes on (the line may then be said twice)."""
    name = f'cmtorus_startup_said_{key}'
    sock = node_ranks.hold(name, token=False)
    if sock is not None or node_ranks.holders(name):
        return sock
    return node_ranks.hold(name, token=True)


def _verdict(ranks, me, waited, host, reason):
    """The line: who the node's ranks wait for, or that none of them is behind."""
    def who(r):
        return 'rank {} ({}, pid {})'.format('?' if r[1] is None else r[1], host, r[0])
    broken = [r for r in ranks if r[2] in _SAID and not r[3]]
    # Without a broken rank, the ones behind are those not in MPI yet (no MPI shared memory
    # mapped: still importing, reading data); the others wait in MPI_Init or a collective.
    behind = [] if broken else [r for r in ranks if not r[3] and r[0] != me and
                                not _maps_shm(r[0])]
    waiting = [r for r in ranks if r not in broken and r not in behind]
    wait_text = '{} of {} {} waited {:.1f} s at start-up (in MPI_Init, or in the first ' \
        'collective)'.format(', '.join(f'rank {r[1]}' for r in waiting) or 'no rank',
                             host, 'has' if len(waiting) == 1 else 'have', waited)
    if broken:
        return 'chainermn_torus watchdog: {} is {} at start-up, before its communicator ' \
            'was made; {} for it; ending the job'.format(
                ', '.join(who(r) for r in broken), _SAID[broken[0][2]], wait_text)
    if behind:
        return 'chainermn_torus watchdog: {} has not made its communicator in {:.1f} s, the ' \
            'start-up limit (running: importing, reading data?); {} for it; ending the ' \
            'job'.format(', '.join(who(r) for r in behind), waited, wait_text)
    return (f'chainermn_torus watchdog: {wait_text} ({reason}): no rank of this node is '
            'behind, so the job waits for a rank of another node (or the launcher started '
            'fewer ranks than MPI expects); ending the job')


def _end(ranks, me):
    """Remove MPICH's segment names, then end the node's ranks."""
    pids = [r[0] for r in ranks] or [me]
    _STATE['ending'] = node_ranks.ending(*pids)  # held until this watcher exits
    for path in _mpich_segments(pids):
        try:
            os.unlink(path)
        except OSError:
            pass
    node_ranks.end_ranks(pids)


def watch(me, step_s, startup_s, fd):
    """The watcher's loop (module doc)."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # the job's process group is signalled too: stay
    start = time.monotonic()
    key = node_ranks.key_of(me)
    host = socket.gethostname()
    stopped = {}  # pid -> when first seen stopped
    while True:
        if select.select([fd], [], [], POLL_S)[0]:
            return  # 'a': the watchdog took over; or end of file: the rank is gone
        if key is None or processes.stat(me) is None:
            return
        now = time.monotonic()
        ranks = _node_ranks(key, me)
        for pid, rank, state, arrived_ in ranks:
            if state in _SAID and not arrived_:
                stopped.setdefault(pid, now)
            else:
                stopped.pop(pid, None)
        held = [pid for pid, since in stopped.items() if now - since >= step_s]
        if held:
            reason = f'a rank stopped for {step_s:g} s, the step limit'
        elif now - start >= startup_s:
            reason = f'the start-up limit, {startup_s:g} s'
        else:
            continue
        if node_ranks.being_ended(key):
            return  # another watcher of the node has said it and is ending the job
        claim = _claim(key)
        # The claim lives as long as the watcher that made it: one delayed past its exit
        # (a loaded node) could claim anew and say the line twice (seen once in a fresh
        # run), but that watcher ended this rank before it left.
        if claim is None or not processes.alive(me):
            return  # another watcher of the node says it and ends the job
        os.write(2, (_verdict(ranks, me, now - start, host, reason) + '\n').encode())
        _end(ranks, me)
        return



def main(argv):
    """The watcher process: ``PID STEP_S STARTUP_S READ_FD``."""
    watch(int(argv[0]), float(argv[1]), float(argv[2]), int(argv[3]))
