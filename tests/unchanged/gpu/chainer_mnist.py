"""A plain, single-process Chainer MNIST script written for a GPU: no ChainerMN, no
chainermn_torus. Run with ``python -m chainermn_torus.run --data-parallel --gpu-to-cpu``.

Written for these tests in the shape of Chainer v7.8.1's examples/mnist/train_mnist.py:
``--device 0`` (and the older ``--gpu 0``) through ``chainer.get_device``, ``device.use()``,
``model.to_device(device)``, ``device=`` to the updater and the evaluator, a log and a final
model file; results are read back with ``chainer.backends.cuda.to_cpu``.
"""
import argparse
import json

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
        h1 = F.relu(self.l1(x))
        h2 = F.relu(self.l2(h1))
        return self.l3(h2)


def main():
    parser = argparse.ArgumentParser(description='Chainer example: MNIST')
    parser.add_argument('--batchsize', '-b', type=int, default=100)
    parser.add_argument('--epoch', '-e', type=int, default=20)
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--unit', '-u', type=int, default=1000)
    parser.add_argument('--device', '-d', type=str, default='-1',
                        help='Device specifier: a non-negative integer for a GPU')
    group = parser.add_argument_group('deprecated arguments')
    group.add_argument('--gpu', '-g', dest='device', type=int, nargs='?', const=0,
                       help='GPU ID (negative value indicates CPU)')
    parser.add_argument('--limit', type=int, default=None)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--summary', default=None)
    args = parser.parse_args()

    device = chainer.get_device(args.device)
    print(f'Device: {device}')
    numpy.random.seed(args.seed)

    model = L.Classifier(MLP(args.unit, 10))
    model.to_device(device)
    device.use()

    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    train, test = chainer.datasets.get_mnist()
    if args.limit:
        train, test = train[:args.limit], test[:args.limit]
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False,
                                                 shuffle=False)
    updater = training.updaters.StandardUpdater(train_iter, optimizer, device=device)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
    trainer.extend(extensions.Evaluator(test_iter, model, device=device))
    trainer.extend(extensions.LogReport(trigger=(10, 'iteration')))
    trainer.extend(extensions.PrintReport(
        ['epoch', 'main/loss', 'validation/main/loss', 'main/accuracy',
         'validation/main/accuracy', 'elapsed_time']), trigger=(1, 'epoch'))
    trainer.run()

    chainer.serializers.save_npz(f'{args.out}/model_final.npz', model)
    if args.summary:
        first = chainer.backends.cuda.to_cpu(model.predictor.l1.W.array)
        with open(args.summary, 'w') as f:
            json.dump({'weights_module': type(first).__module__}, f)


if __name__ == '__main__':
    main()
