"""Agreeing on a problem across ranks before anyone acts on it.

Each rank finds its own problem (or None); one collective tells every rank all of them; then
every rank raises the same error, naming every rank at fault. A rank that raised alone would
leave the others waiting in the next collective (a hang, or the watchdog's verdict instead
of the cause), and a message from one rank would hide the others'. Used wherever a job checks
something rank by rank: writable directories, free space, shared memory, checkpoint files,
finite gradients and states, the node watch's start.
"""

__all__ = ['problems', 'raise_everywhere', 'ranks_text']


def problems(mpi_comm, problem):
    """Collective over ``mpi_comm`` (an mpi4py communicator; None: this process alone):
    ``[(rank, problem)]`` of the ranks whose ``problem`` is not None, in rank order, the same
    list on every rank."""
    gathered = [problem] if mpi_comm is None else mpi_comm.allgather(problem)
    return [(rank, p) for rank, p in enumerate(gathered) if p is not None]


def raise_everywhere(mpi_comm, problem, error):
    """Collective: where any rank has a problem, raise ``error(bad)`` on every rank, ``bad``
    being ``problems()``'s list; nothing otherwise."""
    bad = problems(mpi_comm, problem)
    if bad:
        raise error(bad)


def ranks_text(bad):
    """'0, 3' for the ranks of a ``problems()`` list."""
    return ', '.join(str(rank) for rank, _ in bad)
