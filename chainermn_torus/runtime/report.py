"""The one way this package tells the user something: a line from the job's first rank.

``say(text)`` prints ``prefix + text`` on rank 0 (``rank``: the caller's rank in the job,
default MPI_COMM_WORLD's; ``rank=comm.intra_rank`` for a line per node, ``rank=0`` where
every rank says its own line); with ``key``, only
the first time this process says it. Information goes to stdout; ``stream=sys.stderr`` for
what was asked and not applied, or fell back. ``CHAINERMN_TORUS_QUIET=1`` silences every
line. Errors are exceptions, not reports (``runtime.abort`` ends the job with them).
"""
import sys

from chainermn_torus import config

__all__ = ['say', 'forget', 'PREFIX']

PREFIX = 'chainermn_torus: '
_said = set()  # keys already said by this process


def say(text, rank=None, key=None, stream=None, prefix=PREFIX):
    if key is not None:
        if key in _said:
            return
        _said.add(key)
    if config.quiet():
        return
    if rank is None:
        from mpi4py import MPI  # only when asked: importing this module starts no MPI
        rank = MPI.COMM_WORLD.rank
    if rank == 0:
        print(prefix + text, file=stream or sys.stdout, flush=True)


def forget():
    """Say every keyed line again: for a process that runs one job after another (the test
    harness's ranks, tests/mpi_workers/world_loop.py)."""
    _said.clear()
