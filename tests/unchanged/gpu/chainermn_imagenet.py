#!/usr/bin/env python
"""A ChainerMN ImageNet script written for GPU clusters, as users have them: it knows nothing of
chainermn_torus, checks for CUDA first and, without ``--gpu-to-cpu``, stops on a CPU node.

Written for these tests in the shape of ChainerMN v7.8.1's examples/imagenet/train_imagenet.py:
the CUDA check, ``pure_nccl`` by default, the rank's GPU chosen with
``cuda.get_device_from_id(comm.intra_rank).use()``, ``model.to_gpu()``, rank 0 reading the
lists and scattering them, random crops and flips with the mean image subtracted,
MultiprocessIterator for training and validation (workers forked from a forkserver started
before MPI), ``device=`` to the updater and to a test-mode evaluator, the networks of
models.py. ``--seed`` keys each example's crop by its index, so runs can be compared.
"""
import argparse
import json
import multiprocessing
import random

import numpy

import chainer
import chainer.cuda
from chainer import training
from chainer.training import extensions

import chainermn

import models


class PreprocessedDataset(chainer.dataset.DatasetMixin):

    def __init__(self, path, root, mean, crop_size, random=True, seed=None):
        self.base = chainer.datasets.LabeledImageDataset(path, root)
        self.mean = mean.astype(numpy.float32)
        self.crop_size = crop_size
        self.random = random
        self.seed = seed

    def __len__(self):
        return len(self.base)

    def get_example(self, i):
        crop_size = self.crop_size
        image, label = self.base[i]
        _, h, w = image.shape
        if self.random:
            draw = random if self.seed is None else random.Random(self.seed * 100003 + int(i))
            top = draw.randint(0, h - crop_size)
            left = draw.randint(0, w - crop_size)
            if draw.randint(0, 1):
                image = image[:, :, ::-1]
        else:
            top = (h - crop_size) // 2
            left = (w - crop_size) // 2
        bottom = top + crop_size
        right = left + crop_size
        image = image[:, top:bottom, left:right]
        image -= self.mean[:, top:bottom, left:right]
        image *= (1.0 / 255.0)
        return image, label


class TestModeEvaluator(extensions.Evaluator):

    def evaluate(self):
        model = self.get_target('main')
        model.train = False
        ret = super().evaluate()
        model.train = True
        return ret


def main():
    # Check if GPU is available
    if not chainer.cuda.available:
        raise RuntimeError('ImageNet requires GPU support.')

    parser = argparse.ArgumentParser(description='Learning convnet from ILSVRC2012 dataset')
    parser.add_argument('train', help='Path to training image-label list file')
    parser.add_argument('val', help='Path to validation image-label list file')
    parser.add_argument('--arch', '-a', choices=sorted(models.ARCHS), default='nin')
    parser.add_argument('--batchsize', '-B', type=int, default=32)
    parser.add_argument('--epoch', '-E', type=int, default=10)
    parser.add_argument('--iterations', type=int, default=None)
    parser.add_argument('--loaderjob', '-j', type=int, default=2)
    parser.add_argument('--mean', '-m', default='mean.npy')
    parser.add_argument('--out', '-o', default='result')
    parser.add_argument('--root', '-R', default='.')
    parser.add_argument('--val_batchsize', '-b', type=int, default=25)
    parser.add_argument('--communicator', default='pure_nccl')
    parser.add_argument('--seed', type=int, default=None)
    parser.add_argument('--summary', default=None)
    parser.set_defaults(test=False)
    args = parser.parse_args()

    # ChainerMN's FAQ: fork after MPI_Init is unsafe; the loader workers come from a
    # forkserver started now, before the communicator initialises MPI.
    multiprocessing.set_start_method('forkserver')
    p = multiprocessing.Process()
    p.start()
    p.join()

    comm = chainermn.create_communicator(args.communicator)
    device = comm.intra_rank

    if comm.rank == 0:
        print(f'Num process (COMM_WORLD): {comm.size}')
        print(f'Using {args.communicator} communicator')
        print(f'Using {args.arch} arch')

    if args.seed is not None:
        numpy.random.seed(args.seed)
    if comm.rank == 0:
        classes = 1 + max(int(line.split()[1]) for line in open(args.train) if line.strip())
    else:
        classes = None
    model = models.ARCHS[args.arch](comm.bcast_obj(classes))

    chainer.cuda.get_device_from_id(device).use()  # Make the GPU current
    model.to_gpu()

    mean = numpy.load(args.mean)
    if comm.rank == 0:
        train = PreprocessedDataset(args.train, args.root, mean, model.insize,
                                    seed=args.seed)
        val = PreprocessedDataset(args.val, args.root, mean, model.insize, False)
    else:
        train = None
        val = None
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    val = chainermn.scatter_dataset(val, comm)

    train_iter = chainer.iterators.MultiprocessIterator(
        train, args.batchsize, n_processes=args.loaderjob)
    val_iter = chainer.iterators.MultiprocessIterator(
        val, args.val_batchsize, repeat=False, n_processes=args.loaderjob)

    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9), comm)
    optimizer.setup(model)

    updater = training.StandardUpdater(train_iter, optimizer, device=device)
    stop = (args.iterations, 'iteration') if args.iterations else (args.epoch, 'epoch')
    trainer = training.Trainer(updater, stop, args.out)

    evaluator = TestModeEvaluator(val_iter, model, device=device)
    evaluator = chainermn.create_multi_node_evaluator(evaluator, comm)
    trainer.extend(evaluator, trigger=stop)

    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=(1, 'iteration')))
        trainer.extend(extensions.PrintReport([
            'epoch', 'iteration', 'main/loss', 'validation/main/loss',
            'main/accuracy', 'validation/main/accuracy', 'lr']), trigger=stop)
    trainer.run()

    if comm.rank == 0:
        chainer.serializers.save_npz(f'{args.out}/model_final.npz', model)
        if args.summary:
            with open(args.summary, 'w') as f:
                json.dump({'log': trainer.get_extension('LogReport').log,
                           'iterator': type(updater.get_iterator('main')).__name__,
                           'weights_on': str(model.device)}, f)


if __name__ == '__main__':
    main()
