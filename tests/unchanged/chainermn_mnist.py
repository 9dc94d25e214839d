"""A ChainerMN-style MNIST training script, as users have them: it knows nothing of
chainermn_torus (tests/launch/test_unchanged_scripts.py runs it through the launcher).

Written for these tests in the shape of ChainerMN v7.8.1's examples/mnist/train_mnist.py:
rank 0 loads MNIST with chainer.datasets.get_mnist() and scatters it, a multi-node optimizer
wraps Adam, a multi-node evaluator averages the test accuracy, and only rank 0 reports.
"""
import argparse
import json
import time

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from chainer import training
from chainer.training import extensions

import chainermn


class MLP(chainer.Chain):

    def __init__(self, n_units, n_out):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class StepTimer(training.Extension):
    """Median wall time per iteration, on rank 0 (what the tests compare)."""
    trigger = (1, 'iteration')

    def __init__(self):
        self.last, self.times = None, []

    def __call__(self, trainer):
        now = time.perf_counter()
        if self.last is not None:
            self.times.append(now - self.last)
        self.last = now


def main():
    parser = argparse.ArgumentParser(description='ChainerMN example: MNIST')
    parser.add_argument('--batchsize', '-b', type=int, default=100)
    parser.add_argument('--communicator', type=str, default='naive')
    parser.add_argument('--epoch', '-e', type=int, default=20)
    parser.add_argument('--unit', '-u', type=int, default=1000)
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--limit', type=int, default=None)
    parser.add_argument('--summary', default=None)
    parser.add_argument('--seed', type=int, default=None)
    parser.add_argument('--no-shuffle', action='store_true')
    args = parser.parse_args()
    if args.seed is not None:
        numpy.random.seed(args.seed)

    comm = chainermn.create_communicator(args.communicator)
    model = L.Classifier(MLP(args.unit, 10))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)

    if comm.rank == 0:
        train, test = chainer.datasets.get_mnist()
        if args.limit:
            train, test = train[:args.limit], test[:args.limit]
    else:
        train, test = None, None
    train = chainermn.scatter_dataset(train, comm, shuffle=True)
    test = chainermn.scatter_dataset(test, comm, shuffle=True)

    train_iter = chainer.iterators.SerialIterator(train, args.batchsize,
                                                  shuffle=not args.no_shuffle)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False,
                                                 shuffle=False)
    updater = training.StandardUpdater(train_iter, optimizer, device=-1)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
    evaluator = extensions.Evaluator(test_iter, model, device=-1)
    evaluator = chainermn.create_multi_node_evaluator(evaluator, comm)
    trainer.extend(evaluator)
    timer = StepTimer()
    trainer.extend(timer)
    if comm.rank == 0:
        trainer.extend(extensions.LogReport())
        trainer.extend(extensions.PrintReport(
            ['epoch', 'main/loss', 'validation/main/loss', 'main/accuracy',
             'validation/main/accuracy', 'elapsed_time']))
    trainer.run()
    if comm.rank == 0:
        chainer.serializers.save_npz(f'{args.out}/model_final.npz', model)
    if comm.rank == 0 and args.summary:
        log = trainer.get_extension('LogReport').log
        times = sorted(timer.times)
        with open(args.summary, 'w') as f:
            json.dump({'accuracy': log[-1]['validation/main/accuracy'],
                       'median_iteration_s': times[len(times) // 2],
                       'optimizer': type(optimizer).__name__,
                       # the harness's record of how the launcher's optimizer averages
                       'mode': getattr(getattr(optimizer, 'mode', None), 'name', None),
                       'iterator': type(updater.get_iterator('main')).__name__}, f)


if __name__ == '__main__':
    main()
