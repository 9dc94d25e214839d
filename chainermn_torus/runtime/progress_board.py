"""The progress board of one node: where each rank of the node is, readable without it.

A small file in /dev/shm (``cmtorus_<job>_<pid>_watch_<host>``, swept like our other
segments once its creator is gone) that every rank of the node maps and writes its own row
of, with plain stores, and that the node's watcher process (``runtime.node_watch``) reads.
Reading needs nothing from the ranks, not even that they run: a rank stopped by a signal,
stuck in a system call or waiting in MPI with the GIL held leaves its last row there.

A row (int64): world rank, pid, steps finished, phase, progress count within the phase
(evaluation batches) and the time of the last progress (CLOCK_MONOTONIC ns, one clock for
every process of the node).
"""
import mmap
import os
import socket
import time

import numpy

from chainermn_torus.runtime import devshm

__all__ = ['Board', 'PHASES', 'NOT_ARMED', 'STEP', 'BETWEEN', 'EVALUATION', 'CHECKPOINT',
           'FINISHED', 'now_ns', 'position']

MAGIC = 0x63_6d_74_77_61_74_63_68  # "cmtwatch"
HEADER = 8
ROW = 6
RANK, PID, FINISHED_STEPS, PHASE, COUNT, PROGRESS_NS = range(ROW)

NOT_ARMED, STEP, BETWEEN, EVALUATION, CHECKPOINT, FINISHED = range(6)
PHASES = {NOT_ARMED: 'before the first step', STEP: 'a training step',
          BETWEEN: 'between steps', EVALUATION: 'evaluation', CHECKPOINT: 'a checkpoint',
          FINISHED: 'done'}
# Within the stretch after step N, the order a rank goes through: a rank further on in it
# has done more (a stopped rank is the one furthest behind).
_ORDER = {BETWEEN: 0, EVALUATION: 1, CHECKPOINT: 2, STEP: 3}


def now_ns():
    return time.monotonic_ns()


def position(row):
    """How far a rank has come, comparable across ranks: (steps finished, where in the
    stretch after it, progress count there)."""
    phase = int(row[PHASE])
    if phase == FINISHED:
        return (float('inf'), 0, 0)
    if phase == NOT_ARMED:
        return (-1, 0, 0)
    return (int(row[FINISHED_STEPS]), _ORDER.get(phase, 0), int(row[COUNT]))


class Board(object):
    """The node's board: ``Board.create`` on one rank (before the others attach), then
    ``Board(path)``; ``row(i)`` is position i's row, a numpy view of the shared file."""

    def __init__(self, path):
        self.path = path
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.array = numpy.frombuffer(self._map, dtype=numpy.int64)
        if int(self.array[0]) != MAGIC:
            raise ValueError('chainermn_torus: {} is not a progress board'.format(path))
        self.slots = int(self.array[1])
        self.limit_s = self.array[2] / 1e3
        self.outside = int(self.array[3])

    @staticmethod
    def name():
        return '{}watch_{}'.format(devshm.segment_prefix(), socket.gethostname()[:40])

    @classmethod
    def create(cls, slots, limit_s, outside):
        path = os.path.join(devshm.SHM_DIR, cls.name())
        nbytes = 8 * (HEADER + ROW * slots)
        devshm.check_room(devshm.pages(nbytes), 'the watchdog\'s progress board')
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.posix_fallocate(fd, 0, nbytes)
            head = numpy.zeros(HEADER, numpy.int64)
            head[:4] = (MAGIC, slots, int(round(limit_s * 1e3)), outside)
            os.pwrite(fd, head.tobytes(), 0)
        finally:
            os.close(fd)
        return cls(path)

    def row(self, i):
        return self.array[HEADER + ROW * i:HEADER + ROW * (i + 1)]

    def rows(self):
        return [self.row(i).copy() for i in range(self.slots)]

    def limit(self, phase):
        """Seconds without progress a phase may take: a step, or an evaluation batch, the
        limit; between steps and in a checkpoint, ``outside`` times it."""
        if phase in (STEP, EVALUATION):
            return self.limit_s
        if phase in (BETWEEN, CHECKPOINT):
            return self.limit_s * self.outside
        return None

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
