"""A ChainerMN-style ImageNet training script for CPU, as users write them: it knows nothing of
chainermn_torus (tests/launch/test_unchanged_scripts.py runs it through the launcher).

In the shape of ChainerMN v7.8.1's examples/imagenet/train_imagenet.py (which itself needs a
GPU): list files read by chainer.datasets.LabeledImageDataset, random crops and flips with
the mean subtracted, rank 0 reads the lists and scatters them, MultiprocessIterator for
training and validation, a multi-node optimizer over MomentumSGD, a multi-node evaluator.
"""
import argparse
import json
import random
import time

import chainer
import chainer.functions as F
import chainer.links as L
import numpy
from chainer import training
from chainer.training import extensions

import chainermn


class PreprocessedDataset(chainer.dataset.DatasetMixin):

    def __init__(self, path, root, mean, crop_size, random_crop=True):
        self.base = chainer.datasets.LabeledImageDataset(path, root)
        self.mean = mean.astype(numpy.float32)
        self.crop_size = crop_size
        self.random = random_crop

    def __len__(self):
        return len(self.base)

    def get_example(self, i):
        image, label = self.base[i]
        _, h, w = image.shape
        size = self.crop_size
        if self.random:
            top, left = random.randint(0, h - size), random.randint(0, w - size)
            if random.randint(0, 1):
                image = image[:, :, ::-1]
        else:
            top, left = (h - size) // 2, (w - size) // 2
        image = image[:, top:top + size, left:left + size] - \
            self.mean[:, top:top + size, left:left + size]
        return image * (1.0 / 255.0), label


class SmallNet(chainer.Chain):

    def __init__(self, n_classes):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 16, 3, stride=2, pad=1)
            self.conv2 = L.Convolution2D(16, 32, 3, stride=2, pad=1)
            self.fc = L.Linear(32, n_classes)

    def forward(self, x):
        h = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(F.mean(h, axis=(2, 3)))


class DataWait(training.Extension):
    """Wall time of each iteration and the part spent waiting for the next batch."""
    trigger = (1, 'iteration')

    def __init__(self, iterator):
        self.iterator, self.waits, self.steps, self.last = iterator, [], [], None
        original = iterator.__next__

        def timed_next():
            t0 = time.perf_counter()
            batch = original()
            self.waits.append(time.perf_counter() - t0)
            return batch

        iterator.__next__ = iterator.next = timed_next

    def __call__(self, trainer):
        now = time.perf_counter()
        if self.last is not None:
            self.steps.append(now - self.last)
        self.last = now


def main():
    parser = argparse.ArgumentParser(description='ChainerMN-style ImageNet on CPU')
    parser.add_argument('train')
    parser.add_argument('val')
    parser.add_argument('--root', default='.')
    parser.add_argument('--mean', required=True)
    parser.add_argument('--batchsize', '-B', type=int, default=16)
    parser.add_argument('--epoch', '-E', type=int, default=1)
    parser.add_argument('--loaderjob', '-j', type=int, default=2)
    parser.add_argument('--crop-size', type=int, default=32)
    parser.add_argument('--communicator', default='naive')
    parser.add_argument('--out', default='result')
    parser.add_argument('--summary', default=None)
    args = parser.parse_args()

    comm = chainermn.create_communicator(args.communicator)
    if comm.rank == 0:
        n_classes = 1 + max(int(line.split()[1]) for line in open(args.train) if line.strip())
    else:
        n_classes = None
    n_classes = comm.bcast_obj(n_classes)
    model = L.Classifier(SmallNet(n_classes))
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.05), comm)
    optimizer.setup(model)

    mean = numpy.load(args.mean)
    if comm.rank == 0:
        train = PreprocessedDataset(args.train, args.root, mean, args.crop_size)
        val = PreprocessedDataset(args.val, args.root, mean, args.crop_size, False)
    else:
        train, val = None, None
    train = chainermn.scatter_dataset(train, comm, shuffle=True)
    val = chainermn.scatter_dataset(val, comm)

    train_iter = chainer.iterators.MultiprocessIterator(train, args.batchsize,
                                                        n_processes=args.loaderjob)
    val_iter = chainer.iterators.MultiprocessIterator(val, args.batchsize, repeat=False,
                                                      n_processes=args.loaderjob)
    updater = training.StandardUpdater(train_iter, optimizer, device=-1)
    trainer = training.Trainer(updater, (args.epoch, 'epoch'), args.out)
    evaluator = extensions.Evaluator(val_iter, model, device=-1)
    trainer.extend(chainermn.create_multi_node_evaluator(evaluator, comm))
    wait = DataWait(updater.get_iterator('main'))
    trainer.extend(wait)
    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=(1, 'epoch')))
        trainer.extend(extensions.PrintReport(['epoch', 'main/loss', 'validation/main/loss',
                                               'main/accuracy', 'validation/main/accuracy']))
    trainer.run()
    if comm.rank == 0 and args.summary:
        log = trainer.get_extension('LogReport').log
        steps = sorted(wait.steps)
        with open(args.summary, 'w') as f:
            json.dump({'accuracy': log[-1]['validation/main/accuracy'],
                       'iterator': type(updater.get_iterator('main')).__name__,
                       'median_iteration_s': steps[len(steps) // 2],
                       'data_wait_share': sum(wait.waits[1:]) / sum(wait.steps)}, f)


if __name__ == '__main__':
    main()
