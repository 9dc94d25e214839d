"""A ChainerMN DCGAN script written for GPU clusters, as users have them: two models, two
multi-node optimizers and a custom updater; it knows nothing of chainermn_torus.

Written for these tests in the shape of ChainerMN v7.8.1's examples/dcgan (train_dcgan.py,
net.py, updater.py in one file): ``--gpu`` selects ``pure_nccl`` and the rank's GPU
(``cuda.get_device_from_id(device).use()``), both networks are moved with ``to_gpu()``, the
updater draws its noise with the generator's ``xp`` and receives ``device=``, and the sample
written at the end comes back with ``chainer.backends.cuda.to_cpu``. The images are
Fashion-MNIST's, 28 x 28, one channel.
"""
import argparse
import json

import numpy

import chainer
from chainer import cuda
import chainer.functions as F
import chainer.links as L
from chainer import training
from chainer.training import extensions

import chainermn


class Generator(chainer.Chain):

    def __init__(self, n_hidden, ch=64):
        super().__init__()
        self.n_hidden = n_hidden
        w = chainer.initializers.Normal(0.02)
        with self.init_scope():
            self.l0 = L.Linear(n_hidden, 7 * 7 * ch, initialW=w)
            self.dc1 = L.Deconvolution2D(ch, ch // 2, 4, 2, 1, initialW=w)
            self.dc2 = L.Deconvolution2D(ch // 2, 1, 4, 2, 1, initialW=w)
            self.bn0 = L.BatchNormalization(7 * 7 * ch)
            self.bn1 = L.BatchNormalization(ch // 2)
        self.ch = ch

    def make_hidden(self, batchsize):
        return self.xp.random.uniform(-1, 1, (batchsize, self.n_hidden, 1, 1)).astype(
            numpy.float32)

    def forward(self, z):
        h = F.reshape(F.relu(self.bn0(self.l0(z))), (len(z), self.ch, 7, 7))
        h = F.relu(self.bn1(self.dc1(h)))
        return F.sigmoid(self.dc2(h))


class Discriminator(chainer.Chain):

    def __init__(self, ch=64):
        super().__init__()
        w = chainer.initializers.Normal(0.02)
        with self.init_scope():
            self.c0 = L.Convolution2D(1, ch // 2, 4, 2, 1, initialW=w)
            self.c1 = L.Convolution2D(ch // 2, ch, 4, 2, 1, initialW=w)
            self.bn1 = L.BatchNormalization(ch, use_gamma=False)
            self.l2 = L.Linear(7 * 7 * ch, 1, initialW=w)

    def forward(self, x):
        h = F.leaky_relu(self.c0(x))
        h = F.leaky_relu(self.bn1(self.c1(h)))
        return self.l2(h)


class DCGANUpdater(training.updaters.StandardUpdater):

    def __init__(self, *args, **kwargs):
        self.gen, self.dis = kwargs.pop('models')
        super().__init__(*args, **kwargs)

    def loss_dis(self, dis, y_fake, y_real):
        batchsize = len(y_fake)
        loss = (F.sum(F.softplus(-y_real)) + F.sum(F.softplus(y_fake))) / batchsize
        chainer.report({'loss': loss}, dis)
        return loss

    def loss_gen(self, gen, y_fake):
        loss = F.sum(F.softplus(-y_fake)) / len(y_fake)
        chainer.report({'loss': loss}, gen)
        return loss

    def update_core(self):
        gen_optimizer = self.get_optimizer('gen')
        dis_optimizer = self.get_optimizer('dis')
        batch = self.get_iterator('main').next()
        x_real = chainer.Variable(self.converter(batch, self.device))
        gen, dis = self.gen, self.dis
        y_real = dis(x_real)
        z = chainer.Variable(gen.make_hidden(len(batch)))
        x_fake = gen(z)
        y_fake = dis(x_fake)
        dis_optimizer.update(self.loss_dis, dis, y_fake, y_real)
        gen_optimizer.update(self.loss_gen, gen, y_fake)


def main():
    parser = argparse.ArgumentParser(description='ChainerMN example: DCGAN')
    parser.add_argument('--batchsize', '-b', type=int, default=50)
    parser.add_argument('--communicator', type=str, default='pure_nccl')
    parser.add_argument('--epoch', '-e', type=int, default=1000)
    parser.add_argument('--gpu', '-g', action='store_true', help='Use GPU')
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--n_hidden', '-n', type=int, default=100)
    parser.add_argument('--limit', type=int, default=None)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--summary', default=None)
    args = parser.parse_args()

    if args.gpu:
        comm = chainermn.create_communicator(args.communicator)
        device = comm.intra_rank
    else:
        comm = chainermn.create_communicator('naive')
        device = -1
    if comm.rank == 0:
        print(f'Num process (COMM_WORLD): {comm.size}')
        print(f'Using {args.communicator} communicator, device {device}')

    numpy.random.seed(args.seed)
    gen = Generator(n_hidden=args.n_hidden)
    dis = Discriminator()
    if device >= 0:
        cuda.get_device_from_id(device).use()  # Make a specified GPU current
        gen.to_gpu()  # Copy the model to the GPU
        dis.to_gpu()

    def make_optimizer(model, comm, alpha=0.0002, beta1=0.5):
        optimizer = chainermn.create_multi_node_optimizer(
            chainer.optimizers.Adam(alpha=alpha, beta1=beta1), comm)
        optimizer.setup(model)
        optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(0.0001), 'hook_dec')
        return optimizer

    opt_gen = make_optimizer(gen, comm)
    opt_dis = make_optimizer(dis, comm)

    if comm.rank == 0:
        train, _ = chainer.datasets.get_mnist(withlabel=False, ndim=3, scale=1.)
        if args.limit:
            train = train[:args.limit]
    else:
        train = None
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)

    updater = DCGANUpdater(models=(gen, dis), iterator=train_iter,
                           optimizer={'gen': opt_gen, 'dis': opt_dis}, device=device)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), out=args.out)
    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=(5, 'iteration')))
        trainer.extend(extensions.PrintReport(
            ['epoch', 'iteration', 'gen/loss', 'dis/loss']), trigger=(1, 'epoch'))
    trainer.run()

    if comm.rank == 0:
        numpy.random.seed(args.seed)
        with chainer.using_config('train', False):
            sample = gen(gen.make_hidden(4))
        sample = cuda.to_cpu(sample.array)
        chainer.serializers.save_npz(f'{args.out}/gen_final.npz', gen)
        chainer.serializers.save_npz(f'{args.out}/dis_final.npz', dis)
        if args.summary:
            with open(args.summary, 'w') as f:
                json.dump({'log': trainer.get_extension('LogReport').log,
                           'sample_mean': float(sample.mean()),
                           'sample_module': type(sample).__module__}, f)


if __name__ == '__main__':
    main()
