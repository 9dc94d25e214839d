"""Reproducer: MPI post/start/complete/wait between recursive-doubling partners hangs now and
then with the MPICH 5.0.2 wheel (4+ ranks, one node). Why rsap's default partner-only
synchronisation is sync='notify' (flush + zero-byte message) and not 'pscw'.

    timeout 60 .venv/bin/mpiexec -n 4 .venv/bin/python scripts/repro_pscw_hang.py

Prints "ok RANK" on every rank when it finishes; on a hang, the timeout ends it and fewer
than P lines appear (seen: 3 of 4 lines in 2 runs of 4; one window per round does not help).
"""
import numpy
from mpi4py import MPI

comm = MPI.COMM_WORLD
P, rank = comm.size, comm.rank
win = MPI.Win.Allocate(4096 * 4, 4, comm=comm)
world = comm.Get_group()
src = numpy.ones(16, numpy.float32)
for _ in range(200):
    width = 1
    while width < P:
        partner = rank ^ width
        if partner < P:
            group = world.Incl([partner])
            win.Post(group)
            win.Start(group)
            win.Put([src, MPI.FLOAT], partner, target=(0, 16, MPI.FLOAT))
            win.Complete()
            win.Wait()
            group.Free()
        width *= 2
print('ok', rank, flush=True)
win.Free()
