"""A plain Chainer script with its own training loop: nothing the launcher can parallelise."""
import chainer
import chainer.links as L
import numpy

model = L.Classifier(L.Linear(4, 3))
optimizer = chainer.optimizers.SGD().setup(model)
x, t = numpy.ones((5, 4), numpy.float32), numpy.zeros(5, numpy.int32)
for step in range(3):
    optimizer.update(model, x, t)
print('OK')
