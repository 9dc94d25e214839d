"""Rank 1 waits in an object collective (mpi4py holds the GIL there) that rank 0 never
joins; the test sends SIGTERM to rank 1 alone, as a batch system's kill would reach it."""
import os
import sys
import time

from mpi4py import MPI

import chainermn_torus  # noqa: F401  (registers; the hook comes with a communicator)
import chainermn

comm = chainermn.create_communicator('rsap')
print(f'PID {comm.rank} {os.getpid()}', flush=True)
if comm.rank == 0:
    time.sleep(300)  # never joins: only the watcher can end rank 1
else:
    MPI.COMM_WORLD.allreduce(1)
print('OK rank', comm.rank, flush=True)
sys.exit(0)
