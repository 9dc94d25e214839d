"""Loading a rank's file into the trainer: as stored at the same rank count; at another,
from a replica every stored rank agrees on, with each iterator keeping its new shard and
the same place in the epoch."""
import os

import chainer
import numpy

from chainermn_torus.extensions.checkpoint import arrays, files
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['RNG_KEYS', 'rng_arrays', 'load_same', 'load_resharded', 'place_in_epoch',
           'replica_groups', 'check_replicas']

_ITERATORS = 'updater/iterator:'
RNG_KEYS = 'chainermn_torus/numpy_rng/'


def rng_arrays(state):
    """numpy's global random state (``numpy.random.get_state()``) as arrays to store: the
    shuffling and dropout of Chainer draw from it."""
    return {RNG_KEYS + 'keys': state[1], RNG_KEYS + 'pos': numpy.asarray(state[2]),
            RNG_KEYS + 'has_gauss': numpy.asarray(state[3]),
            RNG_KEYS + 'gauss': numpy.asarray(state[4])}


def load_same(f, trainer):
    """A rank file written at this rank count (``f``: open, binary): everything as
    stored."""
    f.seek(0)
    arrays.load_npz(f, trainer)
    f.seek(0)
    with arrays.RankFile(f) as z:
        numpy.random.set_state(('MT19937', z[RNG_KEYS + 'keys'], int(z[RNG_KEYS + 'pos']),
                                int(z[RNG_KEYS + 'has_gauss']), float(z[RNG_KEYS + 'gauss'])))


class _Given(chainer.serializer.Deserializer):
    """A deserializer that gives the values it holds and leaves the rest as they are."""

    def __init__(self, values):
        self.values = values

    def __getitem__(self, key):
        return _Given(self.values.get(key, {}))

    def __call__(self, key, value):
        return self.values.get(key, value)


def place_in_epoch(stored, new_len, old_size, new_size, batch):
    """An iterator's state at the new rank count, from what it stored: the epoch, and the
    same fraction of it in the new shard (``new_len`` examples; the stored shard's length
    from its order, or from the rank counts where it kept none)."""
    old_len = len(stored['order']) if 'order' in stored else \
        max(1, int(round(new_len * new_size / old_size)))
    fraction = float(stored['current_position']) / old_len
    position = min(int(round(fraction * new_len)), new_len - 1)
    epoch = int(stored['epoch'])
    previous = epoch + (position - batch) / new_len
    return {'current_position': position, 'epoch': epoch,
            'is_new_epoch': bool(stored.get('is_new_epoch', False)),
            'previous_epoch_detail': max(previous, 0.0) if epoch or position else -1.0}


def load_resharded(f, trainer, old_size, new_size, rank):
    """A rank file written at another rank count: everything but the iterators as stored;
    each iterator keeps its new shard and order and takes ``place_in_epoch``; the numpy
    random state is the source rank's, mixed with this rank. ``f``: the file, open,
    binary."""
    f.seek(0)
    arrays.load_npz(f, trainer, ignore_names=lambda k: k.startswith(_ITERATORS))
    f.seek(0)
    with arrays.RankFile(f) as z:
        stored = {k[len(_ITERATORS):]: z[k] for k in z.files if k.startswith(_ITERATORS)}
        keys = z[RNG_KEYS + 'keys']
    for name, it in chainer_private.iterators(trainer.updater).items():
        prefix = name + '/'
        mine = {k[len(prefix):]: v for k, v in stored.items() if k.startswith(prefix)}
        if 'epoch' in mine:
            it.serialize(_Given(place_in_epoch(mine, len(it.dataset), old_size, new_size,
                                               getattr(it, 'batch_size', 1))))
    numpy.random.seed([int(x) for x in keys[:4]] + [rank, new_size])


def replica_groups(digests):
    """({digest: [ranks]}, the first array that differs or None) from ``digests``
    {rank: (digest, {array: crc})}."""
    groups = {}
    for r, d in sorted(digests.items()):
        groups.setdefault(d[0], []).append(r)
    if len(groups) < 2:
        return groups, None
    first = digests[min(digests)][1]
    other = next(d for d in digests.values() if d[0] != digests[min(digests)][0])[1]
    return groups, next((k for k in sorted(set(first) | set(other))
                         if first.get(k) != other.get(k)), '?')


def _digest(place, name, trusted):
    with os.fdopen(files.open_rank_file(place, name, trusted), 'rb') as f:
        return files.replica_digest(f)


def check_replicas(comm, place, manifest, trusted=False):
    """The stored ranks hold the same parameters and optimizer state (data-parallel
    replicas); any of them can then seed any rank count. Collective: each rank digests
    every size-th stored file of the held directory ``place``."""
    mine = {r: _digest(place, manifest['files'][r], trusted)
            for r in range(comm.rank, manifest['ranks'], comm.size)}
    digests = {}
    for part in comm.mpi_comm.allgather(mine):
        digests.update(part)
    groups, array = replica_groups(digests)
    if array is not None:
        raise CheckpointError(
            'chainermn_torus: cannot resume from {!r} on {} ranks: its {} stored ranks do not '
            'hold the same parameters and optimizer state (ranks {} agree; the first array '
            'that differs: {}), so no replica can stand for the others'.format(
                place.path, comm.size, manifest['ranks'],
                ' / '.join(', '.join(map(str, g)) for g in groups.values()), array))
