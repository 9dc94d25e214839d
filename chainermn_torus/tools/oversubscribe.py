"""More ranks than cores: each MPI's own setting that makes a waiting rank give its core up.

MPI libraries wait for messages by polling: right for a cluster node with a core per rank,
ruinous when ranks outnumber cores (a test machine, a laptop, `--system local`), where a
rank that spins in a collective takes the core from the rank it waits for. Each library has
a setting for that case; these are set for training jobs by `chainermn-torus jobscript
--system local` and by the tests' jobs of their own (tests/conftest.py, run_mpi), and never
by the package itself: on a real cluster the ranks have their cores and polling is what
they want. The tests' check worlds leave them off: their checks are many small collectives
between threads, where MPICH's sleep costs more than the spinning it saves.

docs/development.md, "Oversubscribed ranks", has the measured effects.
"""
import os

__all__ = ['SETTINGS', 'environment']

SETTINGS = {
    # MPICH (ch4): a waiting rank sleeps (nanosleep) when it yields instead of calling
    # sched_yield, which under Linux's scheduler still leaves it runnable and spinning.
    'mpich': {'MPIR_CVAR_ENABLE_HEAVY_YIELD': '1'},
    # Intel MPI: its oversubscription mode. (2021.17 already behaves so by default here.)
    'impi': {'I_MPI_WAIT_MODE': '1'},
    # Open MPI: yield in the progress loop while idle (its default when oversubscribed).
    'openmpi': {'OMPI_MCA_mpi_yield_when_idle': '1'},
}


def environment(mpi, ranks, cores=None):
    """The variables to set for ``ranks`` ranks of MPI library ``mpi`` ('mpich', 'impi',
    'openmpi') on this machine (``cores``: default, the CPUs this process may use); empty
    when every rank has a core or the library is not one of these."""
    if cores is None:
        cores = len(os.sched_getaffinity(0))
    if ranks <= cores:
        return {}
    return dict(SETTINGS.get(mpi, {}))
