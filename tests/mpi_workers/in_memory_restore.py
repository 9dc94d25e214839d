"""A 4-rank job of two emulated nodes (2 ranks each) snapshots its trainer in node memory
(extensions.checkpoint.in_memory) and on disk at iteration 3, trains on to 4, and loses the
node ``sys.argv[2]`` (0 or 1). The 2 survivors restore one trainer from node memory and one
from the disk checkpoint (--auto-resume's resharding), train both to iteration 9, and check
every parameter and optimizer array is the same bit for bit. Prints "OK rank R" on each
survivor. ``sys.argv[1]``: a directory for both."""
import os
import sys

import chainermn_torus  # noqa: F401 first (Chainer imports after it on 3.12)
import chainer
import numpy
from mpi4py import MPI

import chainermn
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer
from chainermn_torus.extensions.checkpoint.in_memory import MemorySnapshot

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
from tests.extensions.checkpoint.support import Net, dataset, LostAt, lose_node  # noqa: E402


def trainer(comm, stop, out):
    numpy.random.seed(0)
    model = chainer.links.Classifier(Net(8))
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    opt.setup(model)
    data = chainermn.scatter_dataset(dataset(120), comm, shuffle=True, seed=0)
    it = chainer.iterators.SerialIterator(data, 40 // comm.size)  # global batch 40
    tr = chainer.training.Trainer(chainer.training.StandardUpdater(it, opt),
                                  (stop, 'iteration'), out=out)  # not the checkout's
    return tr, model, opt


def state(model, opt):
    ser = chainer.serializers.DictionarySerializer()
    ser.save(opt)
    out = {'opt/' + k: numpy.asarray(v) for k, v in ser.target.items()}
    out.update({'param' + k: p.array for k, p in model.namedparams()})
    return out


def main():
    base, lost = sys.argv[1], int(sys.argv[2])
    world = MPI.COMM_WORLD
    nodes = [r // 2 for r in range(world.size)]
    memory = os.path.join(base, 'node{node}')
    comm = chainermn.create_communicator('naive', mpi_comm=world)
    tr, _, _ = trainer(comm, 5, os.path.join(base, 'out'))
    snapshot = MemorySnapshot(comm, memory, nodes=nodes)
    tr.extend(snapshot, trigger=(3, 'iteration'))
    tr.extend(MultiNodeCheckpointer(comm, os.path.join(base, 'disk')),
              trigger=(3, 'iteration'))
    tr.extend(LostAt(4))
    sub = lose_node(tr, world, nodes, lost, memory)
    if sub is None:
        return
    comm2 = chainermn.create_communicator('naive', mpi_comm=sub)
    survivors = [nodes[r] for r in range(world.size) if nodes[r] != lost]
    # One after the other: both draw from numpy's global random state, which each restore
    # sets as the stored job left it.
    a, model_a, opt_a = trainer(comm2, 9, os.path.join(base, 'out_a'))
    at = MemorySnapshot(comm2, memory, nodes=survivors, token=snapshot.token).restore(a)
    assert at == 3 and a.updater.iteration == 3
    a.run()
    sa = state(model_a, opt_a)
    b, model_b, opt_b = trainer(comm2, 9, os.path.join(base, 'out_b'))
    MultiNodeCheckpointer(comm2, os.path.join(base, 'disk')).resume(b)
    assert b.updater.iteration == 3
    b.run()
    sb = state(model_b, opt_b)
    assert sorted(sa) == sorted(sb)
    differ = [k for k in sa if sa[k].tobytes() != sb[k].tobytes()]
    assert not differ, differ[:5]
    assert a.updater.iteration == 9
    print(f'OK rank {sub.rank} max abs difference 0.0 over {len(sa)} arrays',
          flush=True)


if __name__ == '__main__':
    main()
