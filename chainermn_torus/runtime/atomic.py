"""Writing a file so that no reader ever sees half of it, and nothing is left when it fails.

The data goes to a temporary file beside the target, is flushed to disk, and is renamed
over the target (a rename within one directory is atomic on POSIX file systems). On any
failure (ENOSPC, an exception in ``write``, a signal) the temporary file is removed and the
error raised. Temporary files a killed process left carry its host and pid
(``TMP_PATTERN``), so ``chainermn-torus clean`` can tell dead jobs' leftovers from live ones.
The temporary file is created new, never through a link another user planted under its
predictable name (``runtime.own_files``); the rename replaces a link at the target itself,
it does not follow it.
"""
import os
import re
import socket

from chainermn_torus.runtime import own_files

__all__ = ['atomic_write', 'tmp_name', 'TMP_PATTERN', 'remove_temporary']

TMP_PATTERN = re.compile(r'^(?P<final>.+)\.tmp\.(?P<host>[^.]+(?:\.[^.]+)*)\.(?P<pid>\d+)$')


def tmp_name(path):
    return '{}.tmp.{}.{}'.format(path, socket.gethostname(), os.getpid())


def atomic_write(path, write, before_rename=None, *, mode='wb', tmp=None):
    """``write(f)`` into ``path`` atomically; ``before_rename()`` runs once the data is on
    disk (a fault-injection point); ``tmp``: the temporary file's name (default
    ``tmp_name(path)``)."""
    tmp = tmp or tmp_name(path)
    f = own_files.open_new(tmp, mode)  # refused (nothing to remove) where it is not ours
    try:
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def remove_temporary(directory, pid, host=None):
    """Remove the temporary files process ``pid`` of ``host`` (default this one) left in
    ``directory``: for one that ended it (the watchdog's kill of a stalled writer).
    Returns the names removed."""
    host = host or socket.gethostname()
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = TMP_PATTERN.match(name)
        if m and m.group('host') == host and int(m.group('pid')) == pid:
            try:
                os.remove(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass
    return removed
