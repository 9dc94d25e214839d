"""Refusals raised on several ranks (tests/test_refusals.py): MODE same (every rank the same
message), differ (two messages), one (rank 2 alone; the others wait in a barrier),
unexpected (a KeyError on rank 1: a surprise keeps its traceback), in-trainer (the same from
an extension of a Trainer), memory (Python's own MemoryError, without a message, on rank 1)."""
import sys
import tempfile

from mpi4py import MPI

import chainermn
import chainermn_torus
from chainermn_torus.errors import ConfigError

MODE = sys.argv[1]


def main():
    chainermn_torus.init()  # a job's start: the hook is in place
    chainermn.create_communicator('naive')
    rank = MPI.COMM_WORLD.rank
    if MODE == 'same':
        raise ConfigError('chainermn_torus: X must be 1, got 2')
    if MODE == 'differ':
        raise ConfigError(f'chainermn_torus: rank-specific {rank % 2}')
    if MODE == 'one' and rank == 2:
        raise ConfigError('chainermn_torus: only rank 2')
    if MODE == 'unexpected' and rank == 1:
        raise KeyError('not a refusal')
    if MODE == 'memory' and rank == 1:
        bytearray(1 << 62)
    if MODE == 'in-trainer':
        _trainer(rank)
    MPI.COMM_WORLD.Barrier()


def _trainer(rank):
    import chainer
    import numpy
    data = chainer.datasets.TupleDataset(numpy.zeros((8, 2), 'f'), numpy.zeros(8, 'i'))
    model = chainer.links.Classifier(chainer.links.Linear(2, 2))
    opt = chainer.optimizers.SGD()
    opt.setup(model)
    trainer = chainer.training.Trainer(chainer.training.StandardUpdater(
        chainer.iterators.SerialIterator(data, 4), opt), (3, 'iteration'),
        out=tempfile.gettempdir())  # it writes nothing; not the checkout's result/

    def fail(trainer):
        if rank == 1 and trainer.updater.iteration == 2:
            raise KeyError('not a refusal')
    trainer.extend(fail, trigger=(1, 'iteration'))
    trainer.run()


if __name__ == '__main__':
    main()
