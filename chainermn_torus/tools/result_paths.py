"""Where a command writes its result, checked before the work: a ``--json`` or ``-o`` path
whose directory is missing or not writable was found only after minutes of planning or
simulating (a FileNotFoundError traceback, the result lost)."""
import os

__all__ = ['check_writable']


def check_writable(path, option):
    """ValueError naming ``option`` and ``path`` unless a file can be written there (its
    directory exists and is writable; an existing file, writable too). None passes."""
    if path is None:
        return
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise ValueError(f'cannot write {option} {path}: it is a directory')
    if not os.path.isdir(directory):
        raise ValueError(f'cannot write {option} {path}: directory {directory} does not exist')
    # Tried, not asked (os.access says yes to root on a read-only file system, and the
    # write failed after the work): an existing file opened for appending, untouched; a new
    # one created and removed.
    try:
        if os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_APPEND))
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.remove(target)
    except OSError as e:
        raise ValueError(f'cannot write {option} {path}: {e.strerror or e}') from e
