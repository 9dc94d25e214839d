"""A lost node leaves no trace (issue 85): a 4-rank job of two emulated nodes (2 ranks
each) trains a model with BatchNormalization and dropout as V = 4 virtual ranks, keeps a
snapshot in node memory and a disk checkpoint at iteration 5, and loses node ``argv[2]``
(0 or 1) at iteration 6. The 2 survivors take over the lost node's virtual ranks, once from
node memory and once from the disk checkpoint, and train to iteration 10. The same job
trained to 10 without the loss is the reference: every parameter, optimizer array and every
virtual rank's random state and running statistics must be its bits. Prints "OK rank R"
on each survivor. ``argv[1]``: a directory for everything."""
import os
import sys

import chainermn_torus  # noqa: F401 first (Chainer imports after it on 3.12)
import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from mpi4py import MPI

import chainermn
from chainermn_torus.datasets.shards import KeyedOrder, virtual_shards
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer
from chainermn_torus.extensions.checkpoint.in_memory import MemorySnapshot
from chainermn_torus.optimizers.virtual_updater import VirtualRanksUpdater

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
from tests.extensions.checkpoint.support import LostAt, lose_node  # noqa: E402

V = 4


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(3, 8)
            self.bn = L.BatchNormalization(8)
            self.l2 = L.Linear(8, 2)

    def forward(self, x):
        return self.l2(F.dropout(F.relu(self.bn(self.l1(x))), 0.3))


def trainer(comm, stop, out):
    numpy.random.seed(0)   # every process builds the same model
    model = L.Classifier(Net())
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    opt.setup(model)
    rng = numpy.random.RandomState(5)
    x = rng.standard_normal((160, 3)).astype(numpy.float32)
    data = chainer.datasets.TupleDataset(x, (x.sum(axis=1) > 0).astype(numpy.int32))
    its = [chainer.iterators.SerialIterator(shard, 10, order_sampler=KeyedOrder(0, v))
           for shard, v in zip(virtual_shards(data, V, comm.held, seed=0), comm.held)]
    updater = VirtualRanksUpdater(its, opt)
    return chainer.training.Trainer(updater, (stop, 'iteration'), out=out), updater


def state(comm, updater):
    """Every array the job's bits are: the replicas' (parameters, optimizer state), and
    each virtual rank's own (random state, running statistics), gathered by virtual rank."""
    ser = chainer.serializers.DictionarySerializer()
    ser.save(updater.get_optimizer('main'))
    out = {'opt/' + k: numpy.asarray(v) for k, v in ser.target.items()}
    model = updater.get_optimizer('main').target
    out.update({'param' + k: p.array.copy() for k, p in model.namedparams()})
    own = {}
    for v, held in zip(comm.held, updater.held_states):
        own[f'virtual{v}/random'] = numpy.asarray(held.random[1])
        own.update({f'virtual{v}/{path}': numpy.asarray(value)
                    for path, value in held.values.items()})
    for part in comm.mpi_comm.allgather(own):
        out.update(part)
    return out


def main():
    base, lost = sys.argv[1], int(sys.argv[2])
    world = MPI.COMM_WORLD
    nodes = [r // 2 for r in range(world.size)]
    comm = chainermn.create_communicator('rsap', mpi_comm=world, virtual_ranks=V)
    # 40 examples a virtual rank, 10 a batch: epochs end at 4 and 8; the snapshot at 5
    # comes after an order was drawn, which the restored iterator must not draw again.
    reference, ref_updater = trainer(comm, 10, os.path.join(base, 'ref'))
    reference.run()
    expected = state(comm, ref_updater)

    tr, _ = trainer(comm, 10, os.path.join(base, 'out'))
    memory = os.path.join(base, 'node{node}')
    snapshot = MemorySnapshot(comm, memory, nodes=nodes)
    tr.extend(snapshot, trigger=(5, 'iteration'))
    tr.extend(MultiNodeCheckpointer(comm, os.path.join(base, 'disk')),
              trigger=(5, 'iteration'))
    tr.extend(LostAt(6))
    sub = lose_node(tr, world, nodes, lost, memory)
    if sub is None:
        return
    comm2 = chainermn.create_communicator('pure_allreduce', mpi_comm=sub, virtual_ranks=V)
    survivors = [nodes[r] for r in range(world.size) if nodes[r] != lost]
    for how in ('memory', 'disk'):
        again, updater = trainer(comm2, 10, os.path.join(base, 'out_' + how))
        if how == 'memory':
            at = MemorySnapshot(comm2, memory, nodes=survivors,
                                token=snapshot.token).restore(again)
        else:
            at = MultiNodeCheckpointer(comm2, os.path.join(base, 'disk')).resume(again)
        assert at == 5 and again.updater.iteration == 5, (how, at)
        again.run()
        got = state(comm2, updater)
        assert sorted(got) == sorted(expected), (how, sorted(set(got) ^ set(expected)))
        differ = [k for k in got if got[k].tobytes() != expected[k].tobytes()]
        assert not differ, (how, differ[:5])
        assert any(k.endswith('bn/avg_mean') for k in got), sorted(got)
    print(f'OK rank {sub.rank} max abs difference 0.0 over {len(expected)} arrays, from '
          'memory and from disk', flush=True)


if __name__ == '__main__':
    main()
