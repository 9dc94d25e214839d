"""The watch before a rank's communicator exists: from the process's first instruction that
runs the package to the start of the job's watchdog (``runtime.watchdog``).

The watchdog needs MPI to start (its node board and its watchers' addresses are agreed over
the job's communicator), so a rank stopped before its communicator exists (stopped as soon
as its process existed, stuck in an import or a file system) left the others waiting in
MPI_Init or in the first collective with nothing to see it: no line, the job held until the
batch limit, MPICH's shared-memory file left in /dev/shm.

With a watchdog set (``CHAINERMN_TORUS_WATCHDOG``, or the launcher's ``--watchdog``),
``import chainermn_torus`` in a process an MPI launcher started (and the launcher, when it
reads ``--watchdog``) starts this small process beside the rank: ``python -I -S`` on this
file, importing nothing (it starts in milliseconds and needs no MPI). It ends when the rank
says its watchdog has started (``arrived()``: the node's watcher takes over from there) or
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

    python -I -S startup_watch.py PID STEP_S STARTUP_S READ_FD   (started by ``start``)
"""
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time

__all__ = ['start', 'arrived', 'key_of', 'rank_of', 'ending', 'being_ended', 'canaries',
           'end_ranks', 'holders']

# Where each launcher tells a process its rank (runtime.world.RANK_VARIABLES: read here by
# name, this file imports nothing of the package).
RANK_VARIABLES = ('PMI_RANK', 'OMPI_COMM_WORLD_RANK', 'PMIX_RANK', 'SLURM_PROCID')
POLL_S = 0.25
_STATE = {}  # in the rank: 'write' (the pipe to its watcher), 'arrived' (the socket held)


def _fields(pid):
    """The fields of /proc/PID/stat after the command's name (state first), or None."""
    try:
        with open('/proc/{}/stat'.format(pid)) as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(')') + 2:].split()


def _stat(pid):
    """(state letter, parent pid, start time in clock ticks) of ``pid``, or None."""
    fields = _fields(pid)
    return None if fields is None else (fields[0], int(fields[1]), int(fields[19]))


def key_of(pid):
    """The job's key on this node, as ``pid`` sees it: its parent (the launcher's process
    that started the node's ranks) and that parent's start time."""
    mine = _stat(pid)
    if mine is None:
        return None
    parent = _stat(mine[1])
    return '{}_{}'.format(mine[1], parent[2] if parent else 0)


def rank_of(pid):
    """The rank the launcher gave process ``pid``, from its environment, or None."""
    try:
        with open('/proc/{}/environ'.format(pid), 'rb') as f:
            env = dict(item.split(b'=', 1) for item in f.read().split(b'\0') if b'=' in item)
    except OSError:
        return None
    for name in RANK_VARIABLES:
        value = env.get(name.encode(), b'')
        if value.isdigit():
            return int(value)
    return None


# --- names in the abstract socket namespace ---------------------------------------------------
# Anyone on the node can bind a name there, so a name is never trusted for being bound: each
# carries a random token (it cannot be taken first), and what counts is who holds it, read
# from /proc (the socket's inode in /proc/net/unix, in the holder's open files), of this
# user only.
def _names(prefix):
    """{inode: name} of the abstract Unix sockets named ``prefix``... (/proc/net/unix)."""
    found = {}
    try:
        with open('/proc/net/unix') as f:
            next(f)
            for line in f:
                fields = line.split(None, 7)
                if len(fields) == 8 and fields[7].startswith('@' + prefix):
                    found[int(fields[6])] = fields[7].rstrip('\n')
    except (OSError, StopIteration, ValueError):
        pass
    return found


def _socket_inodes(pid):
    """The inodes of the sockets process ``pid`` has open (readable for this user's
    processes only: another user's are never counted)."""
    inodes = set()
    try:
        fds = os.listdir('/proc/{}/fd'.format(pid))
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink('/proc/{}/fd/{}'.format(pid, fd))
        except OSError:
            continue
        if link.startswith('socket:['):
            inodes.add(int(link[8:-1]))
    return inodes


def _ours(pid):
    """Whether ``pid`` runs as this process's user."""
    try:
        return os.stat('/proc/{}'.format(pid)).st_uid == os.getuid()
    except OSError:
        return False


def holders(prefix, pids=None):
    """The processes of this user (among ``pids``, default all) that hold a socket named
    ``prefix``..."""
    inodes = set(_names(prefix))
    if not inodes:
        return []
    if pids is None:
        pids = [int(n) for n in os.listdir('/proc') if n.isdigit()]
    return [pid for pid in pids if _ours(pid) and _socket_inodes(pid) & inodes]


def _hold(name, token=True):
    """Bind abstract name ``name`` (with a random token after it by default): the socket,
    held while it lives, or None where the name is taken."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind('\0' + name + ('_' + secrets.token_hex(8) if token else ''))
    except OSError:
        sock.close()
        return None
    return sock


def _arrival_name(key, rank):
    return 'cmtorus_arrived_{}_{}'.format(key, rank)


def _has_arrived(key, rank, pid):
    """Whether rank ``rank`` of the job (process ``pid``) holds its arrival name."""
    return bool(holders(_arrival_name(key, rank) + '_', [pid]))


def ending(*pids):
    """Say, for the node's rank watchers (``runtime.abort``), that the job's ranks of this
    node (the siblings of ``pids``, the first still there) are being ended on purpose: their
    deaths are not to be explained as their own. The name is held while the returned
    socket lives (keep it until the ranks are gone); None where none of ``pids`` is there."""
    key = next(filter(None, map(key_of, pids)), None)
    return None if key is None else _hold('cmtorus_ending_{}'.format(key))


def being_ended(key):
    """Whether a watcher of this user is ending the job's ranks of the node ``key``
    (``key_of``, read while the rank was there) on purpose (``ending``)."""
    return key is not None and bool(holders('cmtorus_ending_{}_'.format(key)))


def _families():
    """{pid: (parent pid, process group)} of every process of the node."""
    out = {}
    for name in os.listdir('/proc'):
        fields = _fields(name) if name.isdigit() else None
        if fields is not None:
            out[int(name)] = int(fields[1]), int(fields[2])
    return out


def canaries(pids):
    """The canaries of ranks ``pids``: the processes each rank's watcher (a child of the
    rank, in a group of its own) forked into the rank's process group (``runtime.rank_watch``)."""
    family = _families()
    found = []
    for pid in pids:
        if pid not in family:
            continue
        group = family[pid][1]
        for child, (parent, child_group) in family.items():
            if child_group != group or child == pid or parent not in family:
                continue
            grandparent, parent_group = family[parent]
            if grandparent == pid and parent_group != group:
                found.append(child)
    return found


def end_ranks(pids):
    """SIGKILL the ranks ``pids`` of this node, each after its canary is gone: the ranks'
    own watchers then read the order the kernel kept (the canary first: the rank was ended
    with its group, as the launcher ends a job) and say nothing of their own.

    A stopped rank goes first: a canary's death can leave the rank's group without a member
    whose parent is outside it (an orphaned group), and the kernel then continues the
    group's stopped processes (SIGHUP, SIGCONT), so a rank stopped halfway through writing a
    checkpoint would finish and rename it while the others are being ended."""
    for pid in pids:
        if (_stat(pid) or 'Z')[0] in 'Tt':
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    found = canaries(pids)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(
            (_stat(pid) or 'Z')[0] not in 'ZX' for pid in found):
        time.sleep(0.002)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# --- in the rank ----------------------------------------------------------------------------
def start(step_s, startup_s):
    """Start the watcher of this process (once; not in a loader process, whose environment
    tells MPI not to start). Returns whether one runs."""
    if 'write' in _STATE or os.environ.get('MPI4PY_RC_INITIALIZE', '').lower() in (
            '0', 'false', 'no', 'off'):
        return 'write' in _STATE
    read_fd, write_fd = os.pipe()
    try:
        _STATE['process'] = subprocess.Popen(
            [sys.executable, '-I', '-S', os.path.abspath(__file__), str(os.getpid()),
             repr(float(step_s)), repr(float(startup_s)), str(read_fd)], pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except OSError:
        os.close(write_fd)
        return False
    finally:
        os.close(read_fd)
    _STATE['write'] = write_fd
    return True


def arrived():
    """The job's watchdog started on this rank: hold the arrival name (the node's other
    watchers see it) and let this rank's watcher go."""
    if 'arrived' not in _STATE:
        sock = _hold(_arrival_name(key_of(os.getpid()), _own_rank()))
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
    for name in RANK_VARIABLES:
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
        st = _stat(pid)
        if st is None or st[1] != parent:
            continue
        rank = rank_of(pid)
        if rank is None and pid != me:
            continue  # not a rank (another child of the launcher's process)
        out.append((pid, rank, st[0], rank is not None and _has_arrived(key, rank, pid)))
    return sorted(out, key=lambda r: (r[1] is None, r[1] or 0))


def _mpich_segments(pids):
    """The /dev/shm/mpich_shm_* files the processes map (MPI_Init's, named until every rank
    of the node has mapped them: with one stopped before MPI_Init, never removed)."""
    found = set()
    for pid in pids:
        try:
            with open('/proc/{}/maps'.format(pid)) as f:
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
        with open('/proc/{}/maps'.format(pid)) as f:
            return any(' /dev/shm/' in line for line in f)
    except OSError:
        return False


def _claim(key):
    """Whether this is the node's first watcher to end the job: the socket of a name only
    one can hold, or None where a watcher of this user holds it. A name another user took
    first claims nothing: the watcher goes on (the line may then be said twice)."""
    name = 'cmtorus_startup_said_{}'.format(key)
    sock = _hold(name, token=False)
    if sock is not None or holders(name):
        return sock
    return _hold(name, token=True)


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
        'collective)'.format(', '.join('rank {}'.format(r[1]) for r in waiting) or 'no rank',
                             host, 'has' if len(waiting) == 1 else 'have', waited)
    if broken:
        return 'chainermn_torus watchdog: {} is {} at start-up, before its communicator ' \
            'was made; {} for it; ending the job'.format(
                ', '.join(who(r) for r in broken), _SAID[broken[0][2]], wait_text)
    if behind:
        return 'chainermn_torus watchdog: {} has not made its communicator in {:.1f} s, the ' \
            'start-up limit (running: importing, reading data?); {} for it; ending the ' \
            'job'.format(', '.join(who(r) for r in behind), waited, wait_text)
    return 'chainermn_torus watchdog: {} ({}): no rank of this node is behind, so the job ' \
        'waits for a rank of another node (or the launcher started fewer ranks than MPI ' \
        'expects); ending the job'.format(wait_text, reason)


def _end(ranks, me):
    """Remove MPICH's segment names, then end the node's ranks."""
    pids = [r[0] for r in ranks] or [me]
    _STATE['ending'] = ending(*pids)  # held until this watcher exits, after the kills
    for path in _mpich_segments(pids):
        try:
            os.unlink(path)
        except OSError:
            pass
    end_ranks(pids)


def watch(me, step_s, startup_s, fd):
    """The watcher's loop (module doc)."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # the job's process group is signalled too: stay
    start = time.monotonic()
    key = key_of(me)
    host = socket.gethostname()
    stopped = {}  # pid -> when first seen stopped
    while True:
        if select.select([fd], [], [], POLL_S)[0]:
            return  # 'a': the watchdog took over; or end of file: the rank is gone
        if key is None or _stat(me) is None:
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
            reason = 'a rank stopped for {:g} s, the step limit'.format(step_s)
        elif now - start >= startup_s:
            reason = 'the start-up limit, {:g} s'.format(startup_s)
        else:
            continue
        claim = _claim(key)
        if claim is None:
            return  # another watcher of the node says it and ends the job
        os.write(2, (_verdict(ranks, me, now - start, host, reason) + '\n').encode())
        _end(ranks, me)
        return


if __name__ == '__main__':
    watch(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
