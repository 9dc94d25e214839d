"""What a checkpoint was trained on and with: the data (recorded in its manifest and
compared at resume) and the optimizer (its kind and its learning-rate hyperparameter)."""
import zlib

import chainer
import numpy

from chainermn_torus.communicators import capabilities
from chainermn_torus.extensions.checkpoint import files
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['data_identity', 'describe_data', 'check_data', 'actual_optimizer',
           'optimizer_kind', 'lr_attr', 'check_optimizer', 'described']


def data_identity(trainer, comm):
    """What the training data is, the same at any rank count (collective): the number of
    examples the shards are cut from and a CRC-32 of the order they are cut in
    (``scatter_dataset``'s permutation, which its seed and the size decide). None where
    the training iterator's dataset is not such a shard on every rank (nothing to tell)."""
    dataset = getattr(trainer.updater.get_iterator('main'), 'dataset', None)
    mine = None
    if isinstance(dataset, chainer.datasets.SubDataset):
        # SubDataset keeps its whole dataset and order only in private attributes
        # (chainer_private.py lists them).
        whole, order = chainer_private.sub_dataset_parts(dataset)
        if whole is not None:
            mine = (len(whole), None if order is None else
                    zlib.crc32(numpy.ascontiguousarray(order, dtype=numpy.int64).tobytes()))
    everyone = comm.mpi_comm.allgather(mine)
    if mine is None or any(e != mine for e in everyone):
        return None
    return {'examples': mine[0], 'order_crc32': mine[1]}


def describe_data(data):
    return '{} examples{}'.format(data.get('examples'), '' if data.get('order_crc32') is None
                                  else ' in shard order {:08x}'.format(data['order_crc32']))


def check_data(trainer, comm, manifest, directory):
    """A checkpoint of other data (another training set, --limit, shuffle seed) is refused
    at any rank count, naming both (collective; checkpoints written before the data was
    recorded are not checked)."""
    stored = manifest.get('data')
    mine = data_identity(trainer, comm)
    if not stored or stored == mine:
        return
    raise CheckpointError(
        f'chainermn_torus: cannot resume from {directory!r}: it was written training '
        f'on {describe_data(stored)} and this '
        f'job trains on {describe_data(mine)}; resume with the data it was written with (the same '
        'training set, '
        '--limit and shuffle seed), or start afresh in another --checkpoint-dir')


def actual_optimizer(trainer):
    """The trainer's optimizer under the multi-node wrapper, if any."""
    opt = trainer.updater.get_optimizer('main')
    return getattr(opt, 'actual_optimizer', opt)


def optimizer_kind(optimizer):
    """The optimizer's Chainer class name: a fused kernel (FusedAdam) keeps the state of
    the rule it fuses (Adam), so the two resume each other's checkpoints."""
    for cls in type(optimizer).__mro__:
        if cls.__module__.startswith('chainer.'):
            return cls.__name__
    return type(optimizer).__name__


def lr_attr(optimizer):
    """The learning-rate hyperparameter's name ('alpha' for Adam, whose ``lr`` is a value
    computed from it; 'lr' for the SGD family), or None."""
    for attr in ('alpha', 'lr'):
        if isinstance(getattr(optimizer, attr, None), (int, float)):
            return attr
    return None


def check_optimizer(trainer, manifest, directory):
    """Another optimizer's state would load in part and silently (Chainer reads the keys
    the target asks for): refused, naming both."""
    stored = manifest.get('optimizer')
    mine = optimizer_kind(actual_optimizer(trainer))
    if stored is not None and stored != mine:
        raise CheckpointError(
            f'chainermn_torus: cannot resume from {directory!r}: it holds the state of the '
            f'optimizer {stored} '
            f'and this job trains with {mine}; resume with the optimizer it was written with, or '
            'start afresh in another --checkpoint-dir')


def described(trainer, comm):
    """What a manifest records of the trainer beside its files (collective: the data's
    identity): the batch per rank, the data, the optimizer's kind and learning rate, the
    model's arrays and the virtual ranks. The disk checkpoint's manifest and the in-memory
    snapshot's both."""
    actual = actual_optimizer(trainer)
    attr = lr_attr(actual)
    return {'batch_per_rank': getattr(trainer.updater.get_iterator('main'), 'batch_size',
                                      None),
            'data': data_identity(trainer, comm), 'optimizer': optimizer_kind(actual),
            'learning_rate': None if attr is None else [attr, float(getattr(actual, attr))],
            'model': files.layout(trainer.updater.get_optimizer('main').target),
            # V where the job computes as V virtual ranks: what a restore takes over
            'virtual_ranks': capabilities.virtual_ranks(comm)}
