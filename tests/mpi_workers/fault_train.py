"""Run by tests/runtime/watch/test_faults.py: real training on Fashion-MNIST, one rank faults at a
step.

    fault_train.py MODE RANK STEP      MODE: raise | kill | kill-forked | hang | term | none |
                                             pause | loop | exit
                                             | raise-backward

``raise-backward``: the exception comes from inside backward, after the last layer's
gradients are final (with OVERLAP=1 in the environment, the other ranks' communication
threads are then inside that bucket's collectives, waiting for this rank).

``pause``: every rank spends PAUSE_S between two steps at STEP (an evaluation, a
checkpoint), then trains to step 20 and reports OK: a watchdog must not count that pause.

Prints "FAULT <time.time()>" (flushed) just before the fault, so the test can measure the
time from the fault to the last rank's exit.
"""
import os
import signal
import sys
import time

import chainermn_torus  # noqa: F401 first: then Chainer's import scans no packages

import chainer
import chainer.functions as F
import chainer.links as L
import numpy

import chainermn
from chainermn_torus.datasets.mnist import load_mnist_idx

MODE, FAULT_RANK, FAULT_STEP = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PAUSE_S = float(os.environ.get('PAUSE_S', '0'))
OVERLAP = os.environ.get('OVERLAP') == '1'
TRIP = [False]


class Tripwire(chainer.FunctionNode):
    """The identity, whose backward raises once TRIP is set."""

    def forward(self, inputs):
        return inputs

    def backward(self, indexes, grads):
        if TRIP[0]:
            raise RuntimeError(f'injected fault in backward on rank {FAULT_RANK}')
        return grads


class MLP(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, 100)
            self.l2 = L.Linear(100, 10)

    def forward(self, x):
        h, = Tripwire().apply((F.relu(self.l1(x)),))
        return self.l2(h)


def say(line):
    # One write per line: the launcher forwards each write as it comes, and a line printed
    # in two (text, then its newline, unbuffered) was cut by another rank's.
    sys.stdout.write(line + '\n')
    sys.stdout.flush()


def main():
    comm = chainermn.create_communicator('rsap')
    train, _ = load_mnist_idx()
    x = numpy.stack([train[i][0] for i in range(800)]).astype(numpy.float32)
    t = numpy.array([train[i][1] for i in range(800)], numpy.int32)
    model = L.Classifier(MLP())
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm,
                                                overlap=OVERLAP)
    opt.setup(model)
    rng = numpy.random.RandomState(comm.rank)
    for step in range(1, 10 ** 6):
        if MODE == 'pause' and step == FAULT_STEP:
            time.sleep(PAUSE_S)
        if MODE == 'loop' and step == FAULT_STEP and comm.rank == 0:
            say(f'TRAINING {time.time()!r}')  # signal mpiexec now
        if comm.rank == FAULT_RANK and step == FAULT_STEP and MODE not in ('none', 'pause',
                                                                            'loop'):
            say(f'FAULT {time.time()!r}')
            if MODE == 'raise-backward':
                TRIP[0] = True
            if MODE == 'raise':
                raise RuntimeError(f'injected fault on rank {comm.rank} at step {step}')
            if MODE == 'kill-forked':  # a forked child (a fork-based iterator's worker) lives on
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
            if MODE in ('kill', 'kill-forked'):
                os.kill(os.getpid(), signal.SIGKILL)
            if MODE == 'term':  # what a batch system sends at the time limit
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)
            if MODE == 'hang':
                time.sleep(3600)  # alive but stopped: only the watchdog ends this
            if MODE == 'exit':  # a script's own early exit on one rank
                sys.exit(3)
        idx = rng.randint(0, len(x), 50)
        opt.update(model, x[idx], t[idx])
        if MODE in ('none', 'pause') and step == 20:
            break
    print(f'OK rank {comm.rank}', flush=True)


if __name__ == '__main__':
    main()
