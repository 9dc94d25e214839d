"""A job shorter than auto's tuning (tests/tuning/test_tune.py): six updates where
the tuning of its 0.6 MB needs more calls. Prints how many candidate communicators the job
made, and, from an exit handler that runs after auto's, how many were left unfreed."""
import atexit

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import chainer.links as L
import numpy

import chainermn

comm = chainermn.create_communicator('auto', tune='on')
# Registered before auto's own (at its first gradient call): runs after it.
atexit.register(lambda: print(f'rank {comm.rank} left unfreed at '
                              f'exit: {len(comm.tuning.made)}', flush=True))
model = L.Classifier(L.Linear(784, 200))
opt = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm).setup(model)
rng = numpy.random.RandomState(0)
x = rng.rand(32, 784).astype(numpy.float32)
t = rng.randint(0, 10, 32).astype(numpy.int32)
for _ in range(6):
    opt.update(model, x, t)
print(f'rank {comm.rank} candidates made: {len(comm.tuning.made)}', flush=True)
