"""A data set split among ranks: what a batch size needs of it (each rank's shard must hold
a batch: a larger batch makes Chainer's iterators repeat the shard within one batch;
``--batchsize 100000000`` on MNIST built a batch of 10^8 images from 30,000 and ran until the
machine ran out of memory), and the shards of virtual ranks, cut as for V ranks on any
number of processes."""

import chainer
import numpy

__all__ = ['batch_too_large', 'virtual_shards']


def batch_too_large(total, batch, ranks, what='training images', option='--batchsize',
                    limit=None):
    """The refusal for a per-rank ``batch`` of ``total`` examples over ``ranks`` ranks (each
    gets ``total // ranks``), or None where it fits."""
    shard = total // ranks
    if batch <= shard:
        return None
    return '{} {} is more than the {} {} each of the {} rank(s) gets ({} in all{}): at most ' \
        '{}'.format(option, batch, shard, what, ranks, total,
                    f', --limit {limit}' if limit else '', shard)


def virtual_shards(dataset, virtual, held, shuffle=True, seed=None):
    """The shards of virtual ranks ``held`` (of ``virtual``): for each, the SubDataset that
    ChainerMN's ``scatter_dataset(dataset, comm, shuffle, seed)`` gives the rank of that
    number in a job of ``virtual`` ranks (equal lengths, the same permutation), whatever the
    number of processes. Every process needs the whole ``dataset``."""
    n = len(dataset)
    order = numpy.random.RandomState(seed).permutation(n) if shuffle else None
    length = (n + virtual - 1) // virtual
    return [chainer.datasets.SubDataset(dataset, n * v // virtual, n * v // virtual + length,
                                        order) for v in held]
