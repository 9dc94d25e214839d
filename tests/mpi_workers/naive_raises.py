"""Run by tests/test_light_import.py under `python -m chainermn_torus.run`: an unchanged
ChainerMN script with the naive communicator, whose rank 1 raises."""
import chainermn

comm = chainermn.create_communicator('naive')
if comm.rank == 1:
    raise ValueError('boom')
comm.mpi_comm.Barrier()
print('OK rank 0 reached the barrier')
