"""Removing what dead processes left: the one sweep /dev/shm's and the checkpoint
directories' cleaners share.

Each owner decides which of its files are leftovers (its own naming says whose a file was);
this module says whether that writer is gone and removes the doomed files, counting their
bytes, never failing on a file another cleaner removed first.
"""
import os
import socket

from chainermn_torus.watchers import processes

__all__ = ['writer_gone', 'remove']


def writer_gone(host, pid, mtime, now, stale_s, here=None):
    """Why the writer ``pid`` on ``host`` of a file last changed at ``mtime`` is dead, or
    None while it may be alive: on this host its process is asked; another host's counts as
    dead once its file is untouched for ``stale_s`` (its processes cannot be seen)."""
    here = socket.gethostname() if here is None else here
    if host == here:
        return None if processes.alive(pid) else f'writer {pid} on this host is gone'
    if now - mtime >= stale_s:
        return f'writer on {host} silent for {now - mtime:.0f} s'
    return None


def remove(place, doomed, dry_run=False):
    """Remove ``doomed`` [(name, why)] from the directory ``place`` holds
    (``runtime.files.held.Held``: by name inside it, never by a path) (only list them with
    ``dry_run``); returns [(name, bytes, why)] of those that were there."""
    removed = []
    for name, why in doomed:
        try:
            size = place.lstat(name).st_size
            if not dry_run:
                os.unlink(name, dir_fd=place.fd)
        except FileNotFoundError:  # another cleaner (or its owner) was first
            continue
        except PermissionError:  # not ours to remove (a sticky directory): left as it is
            continue
        removed.append((name, size, why))
    return removed
