"""A ChainerMN-style script with its own training loop (no Trainer, no updater)."""
import chainer
import chainer.links as L
import numpy

import chainermn

comm = chainermn.create_communicator('naive')
model = L.Classifier(L.Linear(4, 3))
optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm).setup(model)
x = numpy.ones((5, 4), numpy.float32)
t = numpy.zeros(5, numpy.int32)
for step in range(3):
    optimizer.update(model, x, t)
print(f'OK rank {comm.rank}', flush=True)
