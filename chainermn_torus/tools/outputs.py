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
        raise ValueError('cannot write {} {}: it is a directory'.format(option, path))
    if not os.path.isdir(directory):
        raise ValueError('cannot write {} {}: directory {} does not exist'.format(
            option, path, directory))
    if not os.access(directory, os.W_OK) or (os.path.exists(target) and
                                             not os.access(target, os.W_OK)):
        raise ValueError('cannot write {} {}: not writable by this user'.format(option, path))
