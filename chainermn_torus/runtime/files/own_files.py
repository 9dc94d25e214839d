"""Creating files whose names are predictable without ever writing through another user's.

A job writes beside its outputs names anyone can guess (``PREFIX.rank0.events``, a rank
file's temporary, a probe file). In a directory other users can write (``/tmp``, a shared
project directory) one of them can plant a symbolic link under such a name first, and an
``open(name, 'w')`` would then truncate and overwrite whatever it points to, with the job's
permissions. Every such file is made here with ``O_CREAT | O_EXCL | O_NOFOLLOW``: created
new, never through a link. A name already there is removed first when it is a plain file of
this user (a leftover of an earlier process with the same pid); anything else (a link, a
file of another user) is refused in one line (``errors.UnsafePath``), and nothing is written.
"""
import os
import stat

from chainermn_torus.runtime.files import held
from chainermn_torus.runtime.files.shared_paths import what_is_there

__all__ = ['create', 'open_new', 'append', 'remove_own', 'refusal']

refusal = held.write_refusal


def _what_is_there(st):
    return '{} is already there'.format(what_is_there(st))


def create(path, mode=0o644):
    """A new file at ``path`` (a descriptor open for writing); see the module doc."""
    with held.parent_of(path) as place:
        return place.create(os.path.basename(path), mode, replace_own=True)


def open_new(path, mode='wb', perm=0o644):
    """``create`` as a Python file object (``mode``: 'w' or 'wb')."""
    return os.fdopen(create(path, perm), mode)


def remove_own(path):
    """Remove ``path`` where it is this user's plain file (a temporary this process made);
    a link or another user's file is left alone."""
    try:
        with held.parent_of(path) as place:
            place.remove_own(os.path.basename(path))
    except OSError:
        pass


def append(path, perm=0o644):
    """A file object appending to ``path``: made by ``create`` if missing, else opened
    without following a link and only if it is this user's plain file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW |
                     getattr(os, 'O_CLOEXEC', 0))
    except FileNotFoundError:
        return open_new(path, 'a', perm)
    except OSError as e:
        if os.path.islink(path):
            raise refusal(path, _what_is_there(os.lstat(path))) from e
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise refusal(path, _what_is_there(st))
    return os.fdopen(fd, 'a')
