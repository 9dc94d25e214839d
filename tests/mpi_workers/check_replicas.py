"""Run by tests/optimizers/test_replicas.py: replicas compared every K steps.

    check_replicas.py MODE     MODE: healthy | healthy-db | diverge
"""
import sys

import chainer
import chainer.links as L
import numpy

import chainermn
import chainermn_torus  # NOQA
from chainermn_torus.extensions.replicas import ReplicaMismatchError

MODE = sys.argv[1]


def main():
    comm = chainermn.create_communicator('rsaa')
    model = chainer.Sequential(L.Linear(20, 30), L.Linear(30, 5))
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(0.05), comm, double_buffering=MODE == 'healthy-db',
        check_replicas=3)
    opt.setup(model)
    rng = numpy.random.RandomState(comm.rank)

    def loss():
        x = rng.standard_normal((8, 20)).astype(numpy.float32)
        return chainer.functions.sum(model(x) ** 2) / 8

    try:
        for step in range(1, 13):
            if MODE == 'diverge' and step == 5 and comm.rank == comm.size - 1:
                model[1].b.array[0] += 1e-3  # a silent one-rank change, as a bit flip would
            opt.update(loss)
    except ReplicaMismatchError as e:
        assert MODE == 'diverge' and opt.iterations == 6, (MODE, opt.iterations)
        msg = str(e)
        assert 'after iteration 6' in msg and '/1/b' in msg, msg
        assert 'ranks {}'.format(comm.size - 1) in msg, msg
        print('OK rank {} caught: {}'.format(comm.rank, msg), flush=True)
        return
    assert MODE != 'diverge', 'the mismatch went unnoticed'
    print('OK rank {}'.format(comm.rank), flush=True)


if __name__ == '__main__':
    main()
