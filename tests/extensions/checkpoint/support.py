"""A real trainer in this process, checkpointed on MPI_COMM_SELF (one rank, no MPI job):
what the checkpoint's pieces are tested on."""
import chainer
import numpy
from mpi4py import MPI

import chainermn
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer

N = 60  # examples; batch 10: 6 iterations an epoch


class Net(chainer.Chain):
    def __init__(self, units=4):
        super().__init__()
        with self.init_scope():
            self.l1 = chainer.links.Linear(3, units)
            self.l2 = chainer.links.Linear(units, 2)

    def forward(self, x):
        return self.l2(chainer.functions.relu(self.l1(x)))


def comm():
    return chainermn.create_communicator('naive', mpi_comm=MPI.COMM_SELF)


def dataset(n=N, seed=0):
    rng = numpy.random.RandomState(seed)
    x = rng.randn(n, 3).astype(numpy.float32)
    t = (x.sum(axis=1) > 0).astype(numpy.int32)
    return chainer.datasets.TupleDataset(x, t)


def trainer(out, units=4, batch=10, optimizer=None, data=None, seed=0, shard=True):
    """A trainer of ``Net`` on ``dataset()``, as scatter_dataset's shard of one rank."""
    numpy.random.seed(seed)
    model = chainer.links.Classifier(Net(units))
    opt = optimizer or chainer.optimizers.MomentumSGD(lr=0.1)
    opt.setup(model)
    data = dataset() if data is None else data
    if shard:
        data = chainermn.scatter_dataset(data, comm(), shuffle=True, seed=seed)
    it = chainer.iterators.SerialIterator(data, batch)
    updater = chainer.training.StandardUpdater(it, opt)
    return chainer.training.Trainer(updater, (2, 'epoch'), out=str(out))


def checkpointed(tmp_path, name='ck', keep=2, **kwargs):
    """(trainer, checkpointer) with the checkpointer extended every 3 iterations."""
    tr = trainer(tmp_path / 'out', **kwargs)
    ck = MultiNodeCheckpointer(comm(), str(tmp_path / name), keep=keep)
    tr.extend(ck, trigger=(3, 'iteration'))
    return tr, ck


def params(trainer):
    model = trainer.updater.get_optimizer('main').target
    return {name: p.array.copy() for name, p in model.namedparams()}


class LostAt(chainer.training.Extension):
    """A node lost at ``iteration`` (emulated: an error ends the trainer's run, as a job
    that loses one ends; the snapshots and checkpoints written before stay)."""
    priority = chainer.training.PRIORITY_READER - 10  # after the snapshot and checkpoint

    def __init__(self, iteration):
        self.iteration = iteration

    def __call__(self, trainer):
        if trainer.updater.iteration == self.iteration:
            raise RuntimeError('node lost (emulated)')


def lose_node(trainer, world, nodes, lost, memory):
    """Run ``trainer`` to its emulated loss (``LostAt``), then the survivors' communicator
    (None on the lost node's ranks); the lost node's memory (``memory`` with its number
    for ``{node}``) is removed, gone with it."""
    import os
    import shutil
    try:
        trainer.run()
    except RuntimeError as e:
        assert 'lost' in str(e)
    world.Barrier()
    survivor = nodes[world.rank] != lost
    sub = world.Split(0 if survivor else MPI.UNDEFINED, world.rank)
    if not survivor:
        return None
    if sub.rank == 0:
        shutil.rmtree(memory.format(node=lost))
    sub.Barrier()
    assert os.path.isdir(memory.format(node=nodes[world.rank]))
    return sub
