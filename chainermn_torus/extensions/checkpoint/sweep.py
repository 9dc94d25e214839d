"""What killed checkpoint writers left in a directory, and which of it can go.

Each name says whose it was: a temporary file (``*.tmp.<host>.<pid>``, watchers.temporaries), an
in-progress marker (``.writing_iter_<I>.rank<R>.<host>.<pid>``), a rank file of a
checkpoint no manifest names. The removal itself is runtime.files.sweep's, shared with /dev/shm's.
"""
import socket
import time

from chainermn_torus.extensions.checkpoint import files
from chainermn_torus.runtime.files import shared_paths
from chainermn_torus.runtime.files import sweep as sweep_files
from chainermn_torus.watchers.temporaries import TMP_PATTERN

__all__ = ['sweep_temporary', 'leftovers', 'others', 'STALE_S']

STALE_S = 600.0  # another host's temporary file untouched this long belongs to a dead job


def _by_writer(place, names, pattern, now, here):
    """(name, match, why its writer is gone or None) for the names ``pattern`` matches."""
    for name in names:
        m = pattern.match(name)
        if not m:
            continue
        try:
            mtime = place.lstat(name).st_mtime
        except FileNotFoundError:
            continue
        yield name, m, sweep_files.writer_gone(m.group('host'), int(m.group('pid')), mtime,
                                               now, STALE_S, here)


def others(place, names):
    """[(name, owner)] of ``names`` that look like a checkpoint's files or leftovers and
    another user owns (a trusted, shared directory): never read, never removed."""
    found = []
    for name in names:
        if not any(p.match(name) for p in (files.MARKER, files.RANK_FILE, files.MANIFEST_FILE,
                                           TMP_PATTERN)) and name != files.MANIFEST:
            continue
        try:
            st = place.lstat(name)
        except FileNotFoundError:
            continue
        if not shared_paths.yours(st.st_uid):
            found.append((name, shared_paths.owner_name(st.st_uid)))
    return found


def leftovers(place, names, now, here, complete=None):
    """[(name, why)] of ``names`` (a listing of the held directory ``place``) that killed writers
    of this user's left (another user's names are ``others``, passed over): temporary files and
    in-progress markers of writers that are gone, and rank files of a
    checkpoint that has no manifest unless their writer may still be at work. ``complete``:
    the iterations whose manifest exists as rank 0 sees them (a node-local directory holds
    none); None: this listing's, and rank files are left alone where there are none."""
    writing = set()  # (iteration, rank) whose in-progress marker's writer may be alive
    doomed = []
    theirs = {name for name, _ in others(place, names)}
    names = [n for n in names if n not in theirs]
    for name, m, why in _by_writer(place, names, files.MARKER, now, here):
        if why is None:
            writing.add((m.group('iteration'), m.group('rank')))
        else:
            doomed.append((name, why))
    known = complete is not None
    if complete is None:
        complete = [int(m.group(1)) for m in map(files.MANIFEST_FILE.match, names) if m]
        known = bool(complete)
    for name in names:
        m = files.RANK_FILE.match(name)
        if not known or not m or (m.group('iteration'), m.group('rank')) in writing:
            continue
        if int(m.group('iteration')) not in complete:
            doomed.append((name, 'rank file of checkpoint {} which has no manifest (its job '
                                 'ended before finishing it)'.format(m.group('iteration'))))
    doomed += [(name, why) for name, _, why in _by_writer(place, names, TMP_PATTERN, now,
                                                           here) if why is not None]
    return doomed


def sweep_temporary(place, dry_run=False, now=None, complete=None):
    """Remove what killed writers left in the held directory ``place`` (``leftovers``);
    returns [(name, bytes, why)]."""
    now = time.time() if now is None else now
    doomed = leftovers(place, sorted(files.names(place)), now, socket.gethostname(),
                       complete)
    return sweep_files.remove(place, doomed, dry_run)
