"""Run by tests/test_light_import.py: a hook of the script's own, then ours; rank 1 raises."""
import sys

import chainermn
import chainermn_torus  # NOQA

previous = sys.excepthook


def earlier(exctype, value, tb):
    from mpi4py import MPI
    sys.stderr.write(f'EARLIER HOOK rank {MPI.COMM_WORLD.rank}: {exctype.__name__}\n')
    previous(exctype, value, tb)


sys.excepthook = earlier
comm = chainermn.create_communicator('rsap')  # installs ours, after the script's
if comm.rank == 1:
    raise ValueError('boom')
comm.mpi_comm.Barrier()  # rank 0 would wait here for ever without the abort
