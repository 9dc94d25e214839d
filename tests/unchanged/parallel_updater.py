"""A plain Chainer script written for several GPUs of one process (ParallelUpdater): the
launcher's --data-parallel must refuse it, not nest one data parallelism in the other."""
import chainer
import chainer.links as L
import numpy
from chainer import training

model = L.Classifier(L.Linear(4, 3))
optimizer = chainer.optimizers.SGD().setup(model)
x = numpy.ones((8, 4), numpy.float32)
t = numpy.zeros(8, numpy.int32)
train_iter = chainer.iterators.SerialIterator(chainer.datasets.TupleDataset(x, t), 4)
updater = training.updaters.ParallelUpdater(train_iter, optimizer,
                                            devices={'main': '@numpy', 'second': '@numpy'})
training.Trainer(updater, (1, 'epoch')).run()
print('OK')
