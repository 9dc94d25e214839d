"""A ChainerMN MNIST script written for GPU clusters, as users have them: it knows nothing of
chainermn_torus and, without ``--gpu-to-cpu``, cannot run on a CPU node.

Written for these tests in the shape of ChainerMN v7.8.1's examples/mnist/train_mnist.py with
``--gpu``: the GPU communicator ``pure_nccl`` by default, each rank's GPU from its intra-node
rank (``chainer.get_device``), the model moved there with ``to_device``, and the device's
array module (``device.xp``) used for the arrays the script makes itself.
"""
import argparse
import json

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import training
from chainer.training import extensions

import chainermn


class MLP(chainer.Chain):

    def __init__(self, n_units, n_out):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, n_units)
            self.l2 = L.Linear(n_units, n_units)
            self.l3 = L.Linear(n_units, n_out)

    def forward(self, x):
        h1 = F.relu(self.l1(x))
        h2 = F.relu(self.l2(h1))
        return self.l3(h2)


def main():
    parser = argparse.ArgumentParser(description='ChainerMN example: MNIST')
    parser.add_argument('--batchsize', '-b', type=int, default=100)
    parser.add_argument('--communicator', type=str, default='pure_nccl')
    parser.add_argument('--epoch', '-e', type=int, default=20)
    parser.add_argument('--gpu', '-g', action='store_true', help='Use GPU')
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--unit', '-u', type=int, default=1000)
    parser.add_argument('--limit', type=int, default=None)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--summary', default=None)
    args = parser.parse_args()

    if args.gpu:
        comm = chainermn.create_communicator(args.communicator)
        device = chainer.get_device(comm.intra_rank)
    else:
        comm = chainermn.create_communicator('naive')
        device = chainer.get_device('@numpy')
    if comm.rank == 0:
        print(f'Num process (COMM_WORLD): {comm.size}')
        print(f'Using {args.communicator} communicator on {device}')

    device.use()
    xp = device.xp
    xp.random.seed(args.seed)  # the initial weights; rank 0's are broadcast
    model = L.Classifier(MLP(args.unit, 10))
    model.to_device(device)
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)

    if comm.rank == 0:
        train, test = chainer.datasets.get_mnist()
        if args.limit:
            train, test = train[:args.limit], test[:args.limit]
    else:
        train, test = None, None
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    test = chainermn.scatter_dataset(test, comm, shuffle=True, seed=args.seed)

    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False,
                                                 shuffle=False)
    updater = training.StandardUpdater(train_iter, optimizer, device=device)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
    evaluator = extensions.Evaluator(test_iter, model, device=device)
    evaluator = chainermn.create_multi_node_evaluator(evaluator, comm)
    trainer.extend(evaluator)
    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=(10, 'iteration')))
        trainer.extend(extensions.PrintReport(
            ['epoch', 'iteration', 'main/loss', 'validation/main/loss', 'main/accuracy',
             'validation/main/accuracy', 'elapsed_time']), trigger=(1, 'epoch'))
    trainer.run()

    if comm.rank == 0:
        chainer.serializers.save_npz(f'{args.out}/model_final.npz', model)
        if args.summary:
            log = trainer.get_extension('LogReport').log
            with open(args.summary, 'w') as f:
                json.dump({'log': log, 'weights_on': str(model.device),
                           'weights_module': xp.__name__}, f)


if __name__ == '__main__':
    main()
