"""A plain, single-process Chainer MNIST script: no ChainerMN, no chainermn_torus.
tests/launch/test_unchanged_scripts.py runs it with `python -m chainermn_torus.run --data-parallel`.

Written for these tests in the shape of Chainer v7.8.1's examples/mnist/train_mnist.py: an
MLP classifier, Adam, SerialIterators, a Trainer with an Evaluator, a computational graph
dump, snapshots, a log, a printed report and a final model file.
"""
import argparse

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from chainer import training
from chainer.training import extensions


class MLP(chainer.Chain):

    def __init__(self, n_units, n_out):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


def main():
    parser = argparse.ArgumentParser(description='Chainer example: MNIST')
    parser.add_argument('--batchsize', '-b', type=int, default=100)
    parser.add_argument('--epoch', '-e', type=int, default=20)
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--unit', '-u', type=int, default=1000)
    parser.add_argument('--limit', type=int, default=None)
    parser.add_argument('--seed', type=int, default=None)
    parser.add_argument('--no-shuffle', action='store_true')
    parser.add_argument('--autoload', action='store_true')
    args = parser.parse_args()
    if args.seed is not None:
        numpy.random.seed(args.seed)

    model = L.Classifier(MLP(args.unit, 10))
    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    train, test = chainer.datasets.get_mnist()
    if args.limit:
        train, test = train[:args.limit], test[:args.limit]
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize,
                                                  shuffle=not args.no_shuffle)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False,
                                                 shuffle=False)
    updater = training.updaters.StandardUpdater(train_iter, optimizer, device=-1)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
    trainer.extend(extensions.Evaluator(test_iter, model, device=-1))
    trainer.extend(extensions.DumpGraph('main/loss'))
    trainer.extend(extensions.snapshot(n_retains=1, autoload=args.autoload),
                   trigger=(1, 'epoch'))
    trainer.extend(extensions.LogReport())
    trainer.extend(extensions.PrintReport(
        ['epoch', 'main/loss', 'validation/main/loss', 'main/accuracy',
         'validation/main/accuracy', 'elapsed_time']))
    trainer.run()
    chainer.serializers.save_npz(f'{args.out}/model_final.npz', model)


if __name__ == '__main__':
    main()
