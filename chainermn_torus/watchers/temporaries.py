"""The names of the temporary files atomic writes make, and the removal of a dead writer's.

``path.tmp.<host>.<pid>``: whose a leftover was (``chainermn-torus clean``, the checkpoint
sweep, the watchers that end a writer). Standard library only (``watchers``): the rank's own
watcher imports it.
"""
import os
import re
import socket

__all__ = ['tmp_name', 'TMP_PATTERN', 'remove_temporary', 'writing_record']

_RECORD = re.compile(r'^(?P<dev>\d+):(?P<ino>\d+):(?P<path>/.*)$', re.DOTALL)
TMP_PATTERN = re.compile(r'^(?P<final>.+)\.tmp\.(?P<host>[^.]+(?:\.[^.]+)*)\.(?P<pid>\d+)$')


def tmp_name(path):
    return f'{path}.tmp.{socket.gethostname()}.{os.getpid()}'


def writing_record(path, identity):
    """What the progress board keeps of the directory a rank writes a checkpoint to: its
    path and the (device, inode) the rank judged and holds (``runtime.files.held``)."""
    return f'{identity[0]}:{identity[1]}:{path}'


def _from_record(record):
    m = _RECORD.match(record or '')
    return (m.group('path'), (int(m.group('dev')), int(m.group('ino')))) if m else \
        (None, None)


def remove_temporary(record, pid, host=None):
    """Remove the temporary files process ``pid`` of ``host`` (default this one) left in
    the directory of ``record`` (``writing_record``): for one that ended it (the
    watchdog's kill of a stalled writer). Only where the path still names the directory
    the writer held (its device and inode): a directory renamed and replaced meanwhile is
    not touched. Every removal is by name inside it. Returns the names removed."""
    path, identity = _from_record(record)
    host = host or socket.gethostname()
    removed = []
    if path is None:
        return removed
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
    except OSError:
        return removed
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != identity:
            return removed
        for name in os.listdir(fd):
            m = TMP_PATTERN.match(name)
            if m and m.group('host') == host and int(m.group('pid')) == pid:
                try:
                    os.unlink(name, dir_fd=fd)
                    removed.append(name)
                except OSError:
                    pass
    finally:
        os.close(fd)
    return removed
