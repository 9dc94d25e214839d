"""A plain Chainer script (no communicator): a convolution, batch normalization and ReLU
forward and backward (oneDNN, numba, OpenBLAS), then the thread pools in force as
``POOLS {json}`` (tests/launch/test_run.py)."""
import json
import chainer.functions as F
import chainer.links as L
import numpy
from chainermn_torus.runtime.cpu import threads
x = numpy.ones((2, 3, 16, 16), 'f')
h = L.Convolution2D(3, 8, 3)(x)
h = L.BatchNormalization(8)(h)
F.sum(F.relu(h)).backward()
print('POOLS ' + json.dumps(threads.pools_in_force()))
