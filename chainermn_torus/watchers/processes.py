"""What the kernel says of a process of this node, read from /proc: the one reader the package
and its watcher processes share.

No dependency beyond the standard library: the rank's and the start-up watchers
(``runtime.watch``) load this file alone, in processes that import nothing of the package
and must answer within milliseconds.
"""
import collections
import os

__all__ = ['Stat', 'stat', 'state', 'alive', 'families', 'rank_of', 'ours', 'socket_inodes',
           'started_at', 'name', 'RANK_VARIABLES', 'oom_kills']

# Where each launcher tells a process its rank (runtime.world reads the same).
RANK_VARIABLES = ('PMI_RANK', 'OMPI_COMM_WORLD_RANK', 'PMIX_RANK', 'SLURM_PROCID')

# /proc/PID/stat, after the command's name: its fields by index (proc(5)).
Stat = collections.namedtuple('Stat', 'state ppid pgrp start exit_status')
_STATE, _PPID, _PGRP, _START, _EXIT = 0, 1, 2, 19, 49
# The kernel's letters -> the ones the watchers speak of: stopped (T, also a debugger's t),
# a zombie (Z, also X: dead), running (R), sleeping (S, also an idle I and the old W, K, P),
# in an uninterruptible wait (D).
_LETTERS = {'t': 'T', 'X': 'Z', 'I': 'S', 'W': 'S', 'K': 'S', 'P': 'S'}


def stat(pid):
    """``Stat`` of process ``pid`` (its kernel letter as it is), or None where it is gone or
    unreadable."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            text = f.read()
        fields = text[text.rindex(')') + 2:].split()
        return Stat(fields[_STATE], int(fields[_PPID]), int(fields[_PGRP]),
                    int(fields[_START]), int(fields[_EXIT]) if len(fields) > _EXIT else None)
    except (OSError, ValueError, IndexError):
        return None


def state(pid):
    """R, S, D, T (stopped), Z (a zombie) or X (no such process), as /proc shows ``pid``."""
    seen = stat(pid)
    if seen is None:
        return 'X'
    return _LETTERS.get(seen.state, seen.state)


def alive(pid):
    """Whether process ``pid`` runs: there and not a zombie (one killed, not yet reaped,
    holds no file and maps nothing). Another user's process counts as running."""
    return state(pid) not in 'ZX'


def started_at(pid):
    """When process ``pid`` started, in seconds since the epoch (to the clock tick), or
    None."""
    seen = stat(pid)
    try:
        with open('/proc/stat') as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith('btime '))
    except (OSError, StopIteration, ValueError):
        return None
    return None if seen is None else boot + seen.start / os.sysconf('SC_CLK_TCK')


def name(pid):
    """The command name of process ``pid`` (``comm``), or ''."""
    try:
        with open(f'/proc/{pid}/comm') as f:
            return f.read().strip()
    except OSError:
        return ''


def families():
    """{pid: (parent pid, process group)} of every process of the node."""
    out = {}
    for name in os.listdir('/proc'):
        seen = stat(name) if name.isdigit() else None
        if seen is not None:
            out[int(name)] = seen.ppid, seen.pgrp
    return out


def rank_of(pid):
    """The rank the launcher gave process ``pid``, from its environment, or None."""
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            env = dict(item.split(b'=', 1) for item in f.read().split(b'\0') if b'=' in item)
    except OSError:
        return None
    for name in RANK_VARIABLES:
        value = env.get(name.encode(), b'')
        if value.isdigit():
            return int(value)
    return None


def ours(pid):
    """Whether ``pid`` runs as this process's user."""
    try:
        return os.stat(f'/proc/{pid}').st_uid == os.getuid()
    except OSError:
        return False


def socket_inodes(pid):
    """The inodes of the sockets process ``pid`` has open (readable for this user's
    processes only: another user's are never counted)."""
    inodes = set()
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f'/proc/{pid}/fd/{fd}')
        except OSError:
            continue
        if link.startswith('socket:['):
            inodes.add(int(link[8:-1]))
    return inodes


def oom_kills():
    """How many processes the kernel's OOM killer has ended on this node since boot
    (``oom_kill`` of /proc/vmstat, Linux 4.13+), or None where it does not say: compared
    before and after a process died of SIGKILL, it tells the OOM killer from a user's kill."""
    try:
        with open('/proc/vmstat') as f:
            for line in f:
                if line.startswith('oom_kill '):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
