"""The progress board of one node: where each rank of the node is, readable without it.

A small file in /dev/shm (``cmtorus_<job>_<pid>_watch_<host>_<token>``, swept like our other
segments once its creator is gone) that every rank of the node maps and writes its own row
of, with plain stores, and that the node's watcher process (``runtime.watch.node_watch``) reads.
Reading needs nothing from the ranks, not even that they run: a rank stopped by a signal,
stuck in a system call or waiting in MPI with the GIL held leaves its last row there.

After the rows, each rank has ``PATH_BYTES`` for the directory it writes a checkpoint to
while it does: the watcher removes a killed writer's temporary files there.

A row (int64): world rank, pid, steps finished, phase, progress count within the phase
(evaluation batches), the time of the last progress (CLOCK_MONOTONIC ns, one clock for every
process of the node), and the rank's communication: for the main thread, the calls entered
since the last phase mark, whether it is inside one now, which (a code of ``CALLS``) and
since when; for the communication thread of double buffering and overlap, its calls,
whether it is inside one, and which. The calls tell the rank the others wait for (one
outside every call) from the ranks waiting in a call for it.
"""
import mmap
import os
import socket
import time

import numpy

from chainermn_torus.runtime.files import devshm, shared_paths
from chainermn_torus.watchers import board_layout

__all__ = ['Board', 'now_ns', 'position', 'call_code', 'call_name']

_CODES = {name: i + 1 for i, name in enumerate(board_layout.CALLS)}


def call_code(name):
    return _CODES.get(name, 0)


def call_name(code):
    code = int(code)
    if 0 < code <= len(board_layout.CALLS):
        return board_layout.CALLS[code - 1]
    return 'a communication call'


def now_ns():
    return time.monotonic_ns()


def position(row):
    """How far a rank has come, comparable across ranks: (steps finished, where in the
    stretch after it, progress count there)."""
    phase = int(row[board_layout.PHASE])
    if phase == board_layout.FINISHED:
        return (float('inf'), 0, 0)
    if phase == board_layout.STARTUP:
        return (-1, 0, 0)
    order = board_layout.PHASE_OF[phase].order if phase in board_layout.PHASE_OF else 0
    return (int(row[board_layout.FINISHED_STEPS]), order, int(row[board_layout.COUNT]))


class Board:
    """The node's board: ``Board.create`` on one rank (before the others attach), then
    ``Board(path)``; ``row(i)`` is position i's row, a numpy view of the shared file."""

    def __init__(self, path):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.array = numpy.frombuffer(self._map, dtype=numpy.int64)
        if int(self.array[0]) != board_layout.MAGIC:
            raise ValueError(f'chainermn_torus: {path} is not a progress board')
        self.slots = int(self.array[1])
        self.outside = int(self.array[3])
        self._paths = board_layout.paths_at(self.slots)  # byte offset of the path area

    # The limits are read at every look: a multi-node optimizer made with watchdog=S after
    # the job's watchdog started sets its own (``set_limits``).
    @property
    def limit_s(self):
        return self.array[2] / 1e3

    @property
    def startup_s(self):
        return self.array[4] / 1e3

    def set_limits(self, limit_s, startup_s, sources=(0, 0)):
        """The limits in seconds, and where they came from (indices of
        ``board_layout.STEP_SOURCES`` and ``STARTUP_SOURCES``)."""
        self.array[2] = int(round(limit_s * 1e3))
        self.array[4] = int(round(startup_s * 1e3))
        self.array[5], self.array[6] = sources

    @staticmethod
    def name():
        """The start of the board's name; a token nobody can guess follows it."""
        return f'{devshm.segment_prefix()}watch_{socket.gethostname()[:40]}_'

    @classmethod
    def create(cls, slots, limit_s, outside, startup_s=None, sources=(0, 0)):
        nbytes = (8 * (board_layout.HEADER + board_layout.ROW * slots) +
                  board_layout.PATH_BYTES * slots)
        devshm.check_room(devshm.pages(nbytes), 'the watchdog\'s progress board')
        # A name another user could guess they could also make first (/dev/shm is sticky:
        # the job cannot remove it): a user who pre-created the predictable name of the
        # node's first rank stopped every job with a watchdog at start. A taken name is
        # passed over; the other ranks learn the name over MPI.
        fd, path = shared_paths.create_unique(devshm.SHM_DIR, cls.name())
        try:
            os.posix_fallocate(fd, 0, nbytes)
            head = numpy.zeros(board_layout.HEADER, numpy.int64)
            startup_s = limit_s if startup_s is None else startup_s
            head[:7] = (board_layout.MAGIC, slots, int(round(limit_s * 1e3)), outside,
                        int(round(startup_s * 1e3))) + tuple(sources)
            os.pwrite(fd, head.tobytes(), 0)
        finally:
            os.close(fd)
        return cls(path)

    def row(self, i):
        start = board_layout.HEADER + board_layout.ROW * i
        return self.array[start:start + board_layout.ROW]

    def rows(self):
        return [self.row(i).copy() for i in range(self.slots)]

    def set_writing_to(self, i, path):
        """Position i's directory being written to ('' once done; too long: not kept)."""
        data = os.fsencode(path or '')
        if len(data) >= board_layout.PATH_BYTES:
            data = b''
        at = self._paths + i * board_layout.PATH_BYTES
        self._map[at:at + board_layout.PATH_BYTES] = data.ljust(board_layout.PATH_BYTES, b'\0')

    def writing_to(self, i):
        at = self._paths + i * board_layout.PATH_BYTES
        return os.fsdecode(bytes(self._map[at:at + board_layout.PATH_BYTES]).split(b'\0', 1)[0])

    def limits(self):
        """The limits in force (``board_layout.Limits``), read now."""
        step, startup = (int(v) for v in self.array[5:7])
        return board_layout.Limits(
            self.limit_s, self.startup_s, self.outside,
            board_layout.STEP_SOURCES[min(step, len(board_layout.STEP_SOURCES) - 1)],
            board_layout.STARTUP_SOURCES[min(startup, len(board_layout.STARTUP_SOURCES) - 1)])

    def close(self, remove=False):
        self.array = None
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass  # a view is still alive: the mapping goes with the process
        if remove:
            try:
                os.remove(self.path)
            except OSError:
                pass
