"""Run by tests/communicators/test_auto.py: the auto communicator plans, picks, averages."""
import contextlib
import hashlib
import io
import os

import numpy

import chainermn_torus  # NOQA
from mpi4py import MPI

import bound  # tests/mpi_workers

world = P = RANK = None  # set by bind (bound.py: a world's Dup, or MPI.COMM_WORLD)
bind, create = bound.binder(globals())


def check(comm, label):
    for n in (5, 1003, 300007):
        a = (numpy.arange(n, dtype=numpy.float32) % 97) * (RANK + 1)
        comm.mean_array(a)
        expect = (numpy.arange(n) % 97) * (P + 1) / 2.0
        assert numpy.allclose(a, expect, rtol=1e-6), (label, n)
        digests = world.allgather(hashlib.md5(a.tobytes()).hexdigest())
        assert len(set(digests)) == 1, (label, n)
    choices = world.allgather(sorted(comm.tuning.chosen.items()))
    assert all(c == choices[0] for c in choices), choices  # the same plan on every rank
    assert len(comm.tuning.log) == 3 and comm.describe().startswith(f'auto on P = {P}')


def check_all(comm, network):
    """network: a network file for the first communicator; the second measures. Returns
    what the rank printed (rank 0: auto's report)."""
    bind(comm)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check_both(network)
    return out.getvalue()


def check_both(network):
    comm = create('auto', network=network)
    assert comm.network_source.startswith('network')
    check(comm, 'file')
    twin = comm.clone(poll_interval=1e-5)  # double buffering's clone: no new measurement
    assert twin.network is comm.network
    check(twin, 'clone')
    twin.finalize()
    comm.finalize()
    measured = create('auto', network=None)
    assert measured.network_source == 'measured at start-up', measured.network_source
    check(measured, 'measured')
    measured.finalize()


def main():
    bind(MPI.COMM_WORLD)
    check_all(world, os.environ['AUTO_NETWORK'])
    print(f'OK rank {RANK}', flush=True)


if __name__ == '__main__':
    main()
