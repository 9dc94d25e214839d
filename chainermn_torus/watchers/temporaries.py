"""The names of the temporary files atomic writes make, and the removal of a dead writer's.

``path.tmp.<host>.<pid>``: whose a leftover was (``chainermn-torus clean``, the checkpoint
sweep, the watchers that end a writer). Standard library only (``watchers``): the rank's own
watcher imports it.
"""
import os
import re
import socket

__all__ = ['tmp_name', 'TMP_PATTERN', 'remove_temporary']

TMP_PATTERN = re.compile(r'^(?P<final>.+)\.tmp\.(?P<host>[^.]+(?:\.[^.]+)*)\.(?P<pid>\d+)$')


def tmp_name(path):
    return '{}.tmp.{}.{}'.format(path, socket.gethostname(), os.getpid())


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
