"""One measurement for scripts/held_cost.py, with whichever chainermn_torus is first on
PYTHONPATH (this checkout's or an earlier one's): a checkpoint of the MNIST example's model
(MLP 784-1000-1000-10, Adam) or of ResNet-50 (MomentumSGD) written once to warm up, then
written and resumed, timed. Prints one JSON line: {"save_s": ..., "resume_s": ...}."""
import json
import sys
import time

import chainermn_torus  # noqa: F401 first, as every script (Chainer imports after it on 3.12)
import chainer
import numpy
from mpi4py import MPI

import chainermn
from chainermn_torus.extensions.checkpoint import MultiNodeCheckpointer
from chainermn_torus.models import MLP, ResNet50


def trainer(model_name):
    numpy.random.seed(0)
    if model_name == 'mnist':
        model, opt = chainer.links.Classifier(MLP(1000, 10)), chainer.optimizers.Adam()
        x = numpy.random.rand(20, 784).astype(numpy.float32)
    else:
        model = chainer.links.Classifier(ResNet50(1000))
        opt = chainer.optimizers.MomentumSGD(0.1)
        x = numpy.random.rand(4, 3, 32, 32).astype(numpy.float32)  # small: one step
    opt.setup(model)
    data = chainer.datasets.TupleDataset(x, numpy.zeros(len(x), numpy.int32))
    updater = chainer.training.StandardUpdater(chainer.iterators.SerialIterator(data, 2), opt)
    tr = chainer.training.Trainer(updater, (1, 'iteration'))
    tr.run()  # one step: the optimizer's state made, the trainer started
    return tr


def main(model_name, directory):
    comm = chainermn.create_communicator('naive', mpi_comm=MPI.COMM_SELF)
    tr = trainer(model_name)
    ck = MultiNodeCheckpointer(comm, directory, keep=2)
    ck.save(tr)  # warm: the page cache, the first file of its kind (iteration 1)
    tr.updater.iteration = 2
    t0 = time.perf_counter()
    ck.save(tr)
    save_s = time.perf_counter() - t0
    again = trainer(model_name)
    t0 = time.perf_counter()
    MultiNodeCheckpointer(comm, directory, keep=2).resume(again)
    resume_s = time.perf_counter() - t0
    print(json.dumps({'save_s': save_s, 'resume_s': resume_s}), flush=True)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
