"""Checks for tests/test_mpi_world.py: the harness's own behaviour on success, a raise on
one rank (the others then wait in a collective) and a hang."""
import os
import time


def ranks(comm):
    return comm.rank, comm.size, os.getpid()


def raise_on(comm, rank):
    if comm.rank == rank:
        raise ValueError(f'rank {rank} fails on purpose')
    comm.Barrier()  # the others wait for it: the harness must not


def sleep(comm, seconds):
    print(f'rank {comm.rank} sleeps')
    time.sleep(seconds)


def environment(comm, key):
    return os.environ.get(key)
