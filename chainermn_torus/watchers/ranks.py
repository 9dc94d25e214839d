"""The job's ranks of a node as its watchers see them: the job's key on the node, the names
the ranks and watchers hold, and the one way to end the node's ranks on purpose.

Standard library only (``watchers``): the start-up watcher and the rank's watcher import it
in processes that import nothing else of the package.
"""
import os
import secrets
import signal
import socket
import time

__all__ = ['key_of', 'holders', 'hold', 'ending', 'being_ended', 'canaries', 'end_ranks']


from . import processes


def key_of(pid):
    """The job's key on this node, as ``pid`` sees it: its parent (the launcher's process
    that started the node's ranks) and that parent's start time."""
    mine = processes.stat(pid)
    if mine is None:
        return None
    parent = processes.stat(mine.ppid)
    return f'{mine.ppid}_{parent.start if parent else 0}'


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


def holders(prefix, pids=None):
    """The processes of this user (among ``pids``, default all) that hold a socket named
    ``prefix``..."""
    inodes = set(_names(prefix))
    if not inodes:
        return []
    if pids is None:
        pids = [int(n) for n in os.listdir('/proc') if n.isdigit()]
    return [pid for pid in pids if processes.ours(pid) and processes.socket_inodes(pid) & inodes]


def hold(name, token=True):
    """Bind abstract name ``name`` (with a random token after it by default): the socket,
    held while it lives, or None where the name is taken."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind('\0' + name + ('_' + secrets.token_hex(8) if token else ''))
    except OSError:
        sock.close()
        return None
    return sock


def ending(*pids):
    """Say, for the node's rank watchers (``rank_watch``), that the job's ranks of this node
    (the siblings of ``pids``, the first still there) are being ended on purpose: their
    deaths are not to be explained as their own. The name is held while the returned
    socket lives (keep it until the ranks are gone); None where none of ``pids`` is there."""
    key = next(filter(None, map(key_of, pids)), None)
    return None if key is None else hold(f'cmtorus_ending_{key}')


def being_ended(key):
    """Whether a watcher of this user is ending the job's ranks of the node ``key``
    (``key_of``, read while the rank was there) on purpose (``ending``)."""
    return key is not None and bool(holders(f'cmtorus_ending_{key}_'))


def canaries(pids):
    """The canaries of ranks ``pids``: the processes each rank's watcher (a child of the
    rank, in a group of its own, ``rank_watch``) forked into the rank's process group."""
    family = processes.families()
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
        if processes.state(pid) == 'T':
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
            processes.alive(pid) for pid in found):
        time.sleep(0.002)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
