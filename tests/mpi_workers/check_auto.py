"""Run by tests/communicators/test_auto.py: the auto communicator plans, picks, averages."""
import hashlib
import os

import numpy

import chainermn
import chainermn_torus  # NOQA
from mpi4py import MPI

world = MPI.COMM_WORLD
P, RANK = world.size, world.rank


def check(comm, label):
    for n in (5, 1003, 300007):
        a = (numpy.arange(n, dtype=numpy.float32) % 97) * (RANK + 1)
        comm.mean_array(a)
        expect = (numpy.arange(n) % 97) * (P + 1) / 2.0
        assert numpy.allclose(a, expect, rtol=1e-6), (label, n)
        digests = world.allgather(hashlib.md5(a.tobytes()).hexdigest())
        assert len(set(digests)) == 1, (label, n)
    choices = world.allgather(sorted(comm._chosen.items()))
    assert all(c == choices[0] for c in choices), choices  # the same plan on every rank
    assert len(comm.choices) == 3 and comm.describe().startswith('auto on P = {}'.format(P))


def main():
    comm = chainermn.create_communicator('auto', network=os.environ['AUTO_NETWORK'])
    assert comm.network_source.startswith('network')
    check(comm, 'file')
    twin = comm.clone(poll_interval=1e-5)  # double buffering's clone: no new measurement
    assert twin.network is comm.network
    check(twin, 'clone')
    twin.finalize()
    comm.finalize()
    measured = chainermn.create_communicator('auto', network=None)
    assert measured.network_source == 'measured at start-up', measured.network_source
    check(measured, 'measured')
    measured.finalize()
    print('OK rank {}'.format(RANK), flush=True)


if __name__ == '__main__':
    main()
