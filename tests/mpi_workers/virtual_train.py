"""Run by tests/optimizers/test_virtual_updater.py under mpiexec -n P: a model with
BatchNormalization and dropout trained as V virtual ranks (argv[1]) for one epoch on real
Fashion-MNIST images (VirtualRanksUpdater, the multi-node optimizer, rsap), evaluated over
the virtual ranks (each with its own running statistics), then rank 0 saves the model
(parameters and running statistics: virtual rank 0's) to argv[2] and the evaluation's means
to argv[2] + '.json' (repr: every bit)."""
import json
import sys

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy
from chainer import training
from chainer.training import extensions

from chainermn_torus.datasets.mnist import DEFAULT_MNIST_DIR, load_mnist_idx
from chainermn_torus.datasets.shards import KeyedOrder, virtual_shards
from chainermn_torus.extensions.virtual_evaluation import evaluate_over_virtual_ranks
from chainermn_torus.optimizers.virtual_updater import VirtualRanksUpdater


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, 64)
            self.bn = L.BatchNormalization(64)
            self.l2 = L.Linear(64, 10)

    def forward(self, x):
        return self.l2(F.dropout(F.relu(self.bn(self.l1(x))), 0.3))


def main():
    virtual, out = int(sys.argv[1]), sys.argv[2]
    chainermn_torus.init()
    comm = chainermn.create_communicator('rsap', virtual_ranks=virtual)
    numpy.random.seed(0)   # every process builds the same model, as every rank of a job
    model = L.Classifier(Net())
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)
    train, test = load_mnist_idx(DEFAULT_MNIST_DIR, n_classes=10, limit=800)
    shards = virtual_shards(train, virtual, comm.held, seed=1)
    iterators = [chainer.iterators.SerialIterator(
        shard, 20, order_sampler=KeyedOrder(1, v)) for shard, v in zip(shards, comm.held)]
    updater = VirtualRanksUpdater(iterators, optimizer, device=-1)
    trainer = training.Trainer(updater, (1, 'epoch'), out='/tmp')
    trainer.run()
    tests = [chainer.iterators.SerialIterator(shard, 50, repeat=False, shuffle=False)
             for shard in virtual_shards(test, virtual, comm.held, shuffle=False)]
    evaluator = evaluate_over_virtual_ranks(extensions.Evaluator(tests[0], model, device=-1),
                                            comm, tests, lambda: updater.held_states)
    means = {k: repr(float(v)) for k, v in evaluator().items()}
    if comm.rank == 0:
        chainer.serializers.save_npz(out, model)
        with open(out + '.json', 'w') as f:
            json.dump(means, f)
    comm.finalize()


if __name__ == '__main__':
    main()
