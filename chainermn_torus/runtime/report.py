"""The one way this package tells the user something: a line from the job's first rank.

``say(text)`` prints ``prefix + text`` on rank 0 (``rank``: the caller's rank in the job,
default MPI_COMM_WORLD's; ``rank=comm.intra_rank`` for a line per node, ``rank=0`` where
every rank says its own line); with ``key``, only
the first time this process says it. Information goes to stdout; ``stream=sys.stderr`` for
what was asked and not applied, or fell back. ``CHAINERMN_TORUS_QUIET=1`` silences every
line. Errors are exceptions, not reports (``runtime.watch.abort`` ends the job with them).

``stop(text, rank)`` ends this rank with exit code 1 where every rank stops with the same
message (a bad option, an unreadable list, a check every rank agreed on): rank 0 writes it,
once for the job, in one write (``SystemExit(text)`` writes the text and its newline
separately, and two ranks' messages ran together on one line).
"""
import os
import sys

from chainermn_torus import config
from chainermn_torus.process import STATE

__all__ = ['say', 'stop', 'line', 'RankStop', 'PREFIX', 'format_bytes']

PREFIX = 'chainermn_torus: '


def say(text, rank=None, key=None, stream=None, prefix=PREFIX):
    if key is not None:
        if key in STATE.said:
            return
        STATE.said.add(key)
    if config.quiet():
        return
    if rank is None:
        from mpi4py import MPI  # only when asked: importing this module starts no MPI
        rank = MPI.COMM_WORLD.rank
    if rank == 0:
        print(prefix + text, file=stream or sys.stdout, flush=True)


class RankStop(SystemExit):
    """SystemExit(1) whose message was already written; ``str()`` gives the message."""

    def __init__(self, text):
        super().__init__(1)
        self.text = text

    def __str__(self):
        return self.text


def line(text, stream=None):
    """Write ``text`` and its newline to ``stream`` (default stderr) in one write call."""
    stream = stream or sys.stderr
    data = (text.rstrip('\n') + '\n')
    try:
        stream.flush()
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # captured (pytest, a StringIO)
        stream.write(data)
        stream.flush()
        return
    encoded = data.encode('utf-8', 'replace')
    while encoded:
        encoded = encoded[os.write(fd, encoded):]


def stop(text, rank):
    """End this rank with exit code 1; rank 0 writes ``text``, the same on every rank, on
    stderr as one line (see module)."""
    if rank == 0:
        line(text)
    raise RankStop(text)


def format_bytes(n, exact=False):
    """A byte count for people: '102.2 MB' (decimal units, one decimal: sizes to compare
    with what ``df`` and job limits say), or with ``exact`` the binary unit that divides it
    ('4 MiB', '512 KiB', '1000 B': buffer and segment sizes, which are set in those)."""
    n = int(n)
    if exact:
        for unit, size in (('GiB', 1 << 30), ('MiB', 1 << 20), ('KiB', 1 << 10)):
            if n >= size and n % size == 0:
                return f'{n // size} {unit}'
        return f'{n} B'
    for unit, size in (('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
        if n >= size:
            return f'{n / size:.1f} {unit}'
    return f'{n} B'
