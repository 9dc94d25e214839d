"""A data set split among ranks: what a batch size needs of it (each rank's shard must hold
a batch: a larger batch makes Chainer's iterators repeat the shard within one batch;
``--batchsize 100000000`` on MNIST built a batch of 10^8 images from 30,000 and ran until the
machine ran out of memory), and the shards of virtual ranks, cut as for V ranks on any
number of processes; a shuffle that keeps no state of its own."""
import zlib

import chainer
import numpy

__all__ = ['batch_too_large', 'virtual_shards', 'KeyedOrder']


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


class KeyedOrder:
    """A Chainer order sampler whose every permutation is drawn from ``key`` (the run's seed
    and a virtual rank) and the order it follows, with no state of its own: Chainer's
    iterators store their order in a snapshot but not their sampler's generator, so an
    iterator restored on another process goes on with the orders the uninterrupted one
    draws."""

    def __init__(self, *key):
        self.key = [int(k) for k in key]

    def __call__(self, current_order, current_position):
        order = numpy.ascontiguousarray(current_order, dtype=numpy.int64)
        state = numpy.random.RandomState(self.key + [zlib.crc32(order.tobytes())])
        return state.permutation(len(order))
