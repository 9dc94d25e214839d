"""A small ChainerMN training script, run unchanged by tests/test_refusals.py under the
launcher (``python -m chainermn_torus.run [options] refusal_script.py [communicator]``): it
makes a communicator, a multi-node optimizer, a training iterator, an Evaluator and a
Trainer (and, where a checkpoint or output setting is given, this package's checkpointer or
its output directory), so that
every setting of the configuration table is read somewhere, and trains three steps on random
data. Prints "OK rank R" at the end."""
import os
import shutil
import sys
import tempfile

import chainer
import chainer.links as L
import numpy

import chainermn


def main():
    comm = chainermn.create_communicator(sys.argv[1] if len(sys.argv) > 1 else 'rsap')
    rng = numpy.random.RandomState(0)
    x = rng.rand(64, 20).astype(numpy.float32)
    t = rng.randint(0, 4, 64).astype(numpy.int32)
    data = chainer.datasets.TupleDataset(x, t)
    model = L.Classifier(L.Linear(20, 4))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)
    train = chainer.iterators.SerialIterator(data, 8)
    updater = chainer.training.StandardUpdater(train, optimizer)
    trainer = chainer.training.Trainer(updater, (3, 'iteration'))
    evaluator = chainer.training.extensions.Evaluator(
        chainer.iterators.SerialIterator(data, 16, repeat=False, shuffle=False), model)
    trainer.extend(chainermn.create_multi_node_evaluator(evaluator, comm),
                   trigger=(3, 'iteration'))
    if 'CHAINERMN_TORUS_TRUST_OUT_DIR' in os.environ:
        from chainermn_torus.extensions import outputs  # it reads the output settings
        outputs.hold(tempfile.gettempdir()).close()
    if 'CHAINERMN_TORUS_TRUST_CHECKPOINTS' in os.environ:
        checkpointed(comm, trainer)  # the checkpoint settings are read by its checkpointer
    else:
        trainer.run()
    print(f'OK rank {comm.rank}', flush=True)


def checkpointed(comm, trainer):
    """Train with this package's checkpointer, in a folder of its own, removed after."""
    from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer
    directory = comm.mpi_comm.bcast(
        tempfile.mkdtemp(prefix='cmtorus-refusal-') if comm.rank == 0 else None)
    try:
        trainer.extend(MultiNodeCheckpointer(comm, directory), trigger=(3, 'iteration'))
        trainer.run()
        comm.mpi_comm.Barrier()
    finally:
        if comm.rank == 0:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == '__main__':
    main()
