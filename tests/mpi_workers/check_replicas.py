"""Run by tests/extensions/test_replicas.py: replicas compared every K steps.

    check_replicas.py MODE     MODE: healthy | healthy-db | diverge
"""
import sys

import chainer
import chainer.links as L
import numpy

import chainermn
import chainermn_torus  # NOQA
from chainermn_torus.extensions.replicas import ReplicaMismatchError


def check_mode(mpi_comm, mode):
    """Returns the message a 'diverge' run caught (None when healthy)."""
    comm = chainermn.create_communicator('rsaa', mpi_comm=mpi_comm)
    model = chainer.Sequential(L.Linear(20, 30), L.Linear(30, 5))
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(0.05), comm, double_buffering=mode == 'healthy-db',
        check_replicas=3)
    opt.setup(model)
    rng = numpy.random.RandomState(comm.rank)

    def loss():
        x = rng.standard_normal((8, 20)).astype(numpy.float32)
        return chainer.functions.sum(model(x) ** 2) / 8

    try:
        for step in range(1, 13):
            if mode == 'diverge' and step == 5 and comm.rank == comm.size - 1:
                model[1].b.array[0] += 1e-3  # a silent one-rank change, as a bit flip would
            opt.update(loss)
    except ReplicaMismatchError as e:
        assert mode == 'diverge' and opt.iterations == 6, (mode, opt.iterations)
        msg = str(e)
        assert 'after iteration 6' in msg and '/1/b' in msg, msg
        assert f'ranks {comm.size - 1}' in msg, msg
        return msg
    finally:
        comm.finalize()
    assert mode != 'diverge', 'the mismatch went unnoticed'
    return None


def main():
    from mpi4py import MPI
    msg = check_mode(MPI.COMM_WORLD, sys.argv[1])
    print('OK rank {}{}'.format(MPI.COMM_WORLD.rank, ' caught: ' + msg if msg else ''),
          flush=True)


if __name__ == '__main__':
    main()
