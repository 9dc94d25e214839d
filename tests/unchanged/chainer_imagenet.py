"""A plain, single-process Chainer ImageNet script: no ChainerMN, no chainermn_torus.
tests/launch/test_unchanged_scripts.py runs it with `python -m chainermn_torus.run --data-parallel`.

Written for these tests in the shape of Chainer v7.8.1's examples/imagenet/train_imagenet.py:
"path label" list files, a mean image, random crops and flips for training and centre
crops for validation (here through TransformDataset), MomentumSGD, MultiprocessIterators
with --loaderjob processes, an Evaluator, snapshots of the trainer and the model, a log
with the learning rate, a printed report and a progress bar.
"""
import argparse
import random

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from chainer import training
from chainer.training import extensions


class Crop:
    """Random (training) or centre crop, mean subtracted, scaled to [0, 1]."""

    def __init__(self, mean, size, train):
        self.mean, self.size, self.train = mean, size, train

    def __call__(self, example):
        image, label = example
        h, w = image.shape[1:]
        size = self.size
        if self.train:
            y, x = random.randint(0, h - size), random.randint(0, w - size)
        else:
            y, x = (h - size) // 2, (w - size) // 2
        crop = image[:, y:y + size, x:x + size] - self.mean[:, y:y + size, x:x + size]
        if self.train and random.random() < 0.5:
            crop = crop[:, :, ::-1]
        return (crop / 255.0).astype(numpy.float32), label


class Net(chainer.Chain):
    """A small all-convolutional classifier (the example's archs are too big for CPU tests)."""

    insize = 32

    def __init__(self, classes):
        super().__init__()
        with self.init_scope():
            self.a = L.Convolution2D(None, 8, ksize=5, stride=2, pad=2)
            self.b = L.Convolution2D(None, 16, ksize=3, stride=2, pad=1)
            self.out = L.Convolution2D(None, classes, ksize=1)

    def forward(self, x, t):
        h = F.relu(self.b(F.relu(self.a(x))))
        y = F.average(self.out(h), axis=(2, 3))
        loss = F.softmax_cross_entropy(y, t)
        chainer.report({'loss': loss, 'accuracy': F.accuracy(y, t)}, self)
        return loss


def main():
    parser = argparse.ArgumentParser(description='Learning convnet from ILSVRC2012 dataset')
    parser.add_argument('train')
    parser.add_argument('val')
    parser.add_argument('--batchsize', '-B', type=int, default=16)
    parser.add_argument('--epoch', '-E', type=int, default=1)
    parser.add_argument('--loaderjob', '-j', type=int, default=2)
    parser.add_argument('--mean', '-m', required=True)
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--root', '-R', default='.')
    parser.add_argument('--val_batchsize', '-b', type=int, default=16)
    args = parser.parse_args()

    labels = [int(line.split()[1]) for line in open(args.train) if line.strip()]
    model = Net(max(labels) + 1)
    mean = numpy.load(args.mean)
    train = chainer.datasets.TransformDataset(
        chainer.datasets.LabeledImageDataset(args.train, args.root),
        Crop(mean, model.insize, True))
    val = chainer.datasets.TransformDataset(
        chainer.datasets.LabeledImageDataset(args.val, args.root),
        Crop(mean, model.insize, False))
    train_iter = chainer.iterators.MultiprocessIterator(train, args.batchsize,
                                                        n_processes=args.loaderjob)
    val_iter = chainer.iterators.MultiprocessIterator(val, args.val_batchsize, repeat=False,
                                                      n_processes=args.loaderjob)

    optimizer = chainer.optimizers.MomentumSGD(lr=0.05, momentum=0.9)
    optimizer.setup(model)
    updater = training.updaters.StandardUpdater(train_iter, optimizer, device=-1)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), args.out)
    trainer.extend(extensions.Evaluator(val_iter, model, device=-1), trigger=(1, 'epoch'))
    trainer.extend(extensions.DumpGraph('main/loss'))
    trainer.extend(extensions.snapshot(), trigger=(1, 'epoch'))
    trainer.extend(extensions.snapshot_object(model, 'model_iter_{.updater.iteration}'),
                   trigger=(1, 'epoch'))
    trainer.extend(extensions.LogReport(trigger=(1, 'epoch')))
    trainer.extend(extensions.observe_lr(), trigger=(1, 'epoch'))
    trainer.extend(extensions.PrintReport(['epoch', 'iteration', 'main/loss',
                                           'validation/main/loss', 'main/accuracy',
                                           'validation/main/accuracy', 'lr']))
    trainer.extend(extensions.ProgressBar(update_interval=10))
    trainer.run()


if __name__ == '__main__':
    main()
