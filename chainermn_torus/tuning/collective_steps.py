"""The collective steps ``auto``'s choices need, and who they are taken among.

The lifecycle (``lifecycle.Choices``) decides alike on every rank from the same numbers; the
few places where ranks must agree go through a ``Job``: rank 0's answer to everyone
(``share``), a common start for a timed call (``barrier``), the slowest rank's seconds
(``agree``), every rank waiting asleep while rank 0 computes (``wait_for_root``), and, at
exit, whether every rank came within a limit (``all_here``). ``MpiJob`` takes them on an MPI
communicator; ``OneRank`` is a job of one rank, where each is a no-op, which is what the
lifecycle's tests without MPI run on.
"""
import collections
import time

import numpy

__all__ = ['Shape', 'MpiJob', 'OneRank', 'WAIT_POLL_S']

WAIT_POLL_S = 0.005  # how often a rank waiting for the others looks


class Shape(collections.namedtuple('Shape', 'size rank ranks_per_node nodes uniform')):
    """The job as the choices see it: P, this rank, ranks per node, nodes, and whether
    every node holds the same number of ranks."""


class MpiJob:
    """The steps on ``mpi_comm`` (every rank calls each one at the same point)."""

    def __init__(self, mpi_comm):
        self.mpi_comm = mpi_comm

    def share(self, value):
        return self.mpi_comm.bcast(value, root=0)

    def barrier(self):
        self.mpi_comm.Barrier()

    def agree(self, seconds):
        """The slowest rank's seconds per candidate (NaN where none ran), on every rank."""
        from mpi4py import MPI  # started already: the communicator exists
        mine = numpy.where(numpy.isnan(seconds), -1.0, seconds)
        out = numpy.empty_like(mine)
        self.mpi_comm.Allreduce(mine, out, op=MPI.MAX)
        return numpy.where(out < 0, numpy.nan, out)

    def wait_for_root(self):
        # The others wait asleep: spinning in a broadcast, they took the cores from rank
        # 0's simulation (on this 2-core machine with 4 ranks the first call took 6-7 s).
        waiting = self.mpi_comm.Ibarrier()
        while not waiting.Test():
            time.sleep(WAIT_POLL_S)

    def all_here(self, limit_s):
        """Whether every rank reaches this point within ``limit_s`` seconds."""
        everyone = self.mpi_comm.Ibarrier()
        deadline = time.monotonic() + limit_s
        while not everyone.Test():
            if time.monotonic() > deadline:
                return False
            time.sleep(WAIT_POLL_S)
        return True


class OneRank:
    """A job of one rank: nothing to wait for, its own numbers are everyone's."""

    def share(self, value):
        return value

    def barrier(self):
        pass

    def agree(self, seconds):
        return numpy.asarray(seconds, dtype=float)

    def wait_for_root(self):
        pass

    def all_here(self, limit_s):
        return True
