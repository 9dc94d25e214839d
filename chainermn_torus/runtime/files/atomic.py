"""Writing a file so that no reader ever sees half of it, and nothing is left when it fails.

The data goes to a temporary file beside the target, is flushed to disk, and is renamed
over the target (a rename within one directory is atomic on POSIX file systems). On any
failure (ENOSPC, an exception in ``write``, a signal) the temporary file is removed and the
error raised. Temporary files a killed process left carry its host and pid
(``watchers.temporaries``), so ``chainermn-torus clean`` can tell dead jobs' leftovers from
live ones.
The temporary file is created new, never through a link another user planted under its
predictable name (``runtime.files.own_files``); the rename replaces a link at the target itself,
it does not follow it.
"""
import os

from chainermn_torus.errors import UnsafePath
from chainermn_torus.runtime.files import own_files
from chainermn_torus.watchers.temporaries import tmp_name

__all__ = ['atomic_write']


def atomic_write(path, write, before_rename=None, *, mode='wb', tmp=None):
    """``write(f)`` into ``path`` atomically; ``before_rename()`` runs once the data is on
    disk (a fault-injection point); ``tmp``: the temporary file's name (default
    ``tmp_name(path)``)."""
    tmp = tmp or tmp_name(path)
    try:
        # Opened inside the try: a signal (SIGINT, SIGTERM) right after the file is made
        # left it behind (the fault matrix's sigint row, once).
        with own_files.open_new(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except UnsafePath:
        raise  # not ours: nothing to remove
    except BaseException:
        own_files.remove_own(tmp)
        raise
