"""Writing a file by its path so that no reader ever sees half of it, and nothing is left
when it fails: ``runtime.files.held``'s ``write_atomic`` in the file's directory, as the path
names it (temporary file beside the target, fsync, rename, the rename flushed; on any failure
the temporary removed and the error raised). Temporary files a killed process left carry
its host and pid (``watchers.temporaries``), so ``chainermn-torus clean`` can tell dead
jobs' leftovers from live ones. The temporary is created new, never through a link another
user planted under its predictable name; the rename replaces a link at the target itself,
it does not follow it.
"""
import os

from chainermn_torus.runtime.files import held
from chainermn_torus.watchers.temporaries import tmp_name

__all__ = ['atomic_write']


def atomic_write(path, write, before_rename=None, *, mode='wb', tmp=None):
    """``write(f)`` into ``path`` atomically; ``before_rename()`` runs once the data is on
    disk (a fault-injection point); ``tmp``: the temporary file's name, beside ``path``
    (default ``tmp_name(path)``)."""
    tmp = tmp or tmp_name(path)
    if os.path.dirname(os.path.abspath(tmp)) != os.path.dirname(os.path.abspath(path)):
        raise ValueError(f'the temporary {tmp} must be beside {path}')
    with held.parent_of(path) as place:
        place.write_atomic(os.path.basename(path), write, mode=mode, perm=0o644,
                           before_rename=before_rename, tmp=os.path.basename(tmp))
