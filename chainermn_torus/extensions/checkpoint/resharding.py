"""Loading a rank's file into the trainer: as stored at the same rank count; at another,
from a replica every stored rank agrees on, with each iterator keeping its new shard and
the same place in the epoch; in a job of virtual ranks, each virtual rank's iterator and
state taken over, as stored, from the rank that held it (``load_virtual``)."""
import io
import os
import re

import chainer
import numpy

from chainermn_torus.algorithms import virtual_ranks
from chainermn_torus.extensions.checkpoint import arrays, files
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['RNG_KEYS', 'rng_arrays', 'load_same', 'load_resharded', 'place_in_epoch',
           'replica_groups', 'check_replicas', 'virtual_sources', 'load_virtual',
           'check_virtual', 'persistent_keys']

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


# What a virtual rank owns in a rank file, by its slot among the ones the rank held:
# VirtualRanksUpdater's iterators ('main' is slot 0) and held states.
_SLOT = re.compile(r'^updater/(?:iterator:(?:main|virtual_rank_(\d+))|held_state_(\d+))/')


def _slot(key):
    m = _SLOT.match(key)
    if m is None:
        return None
    return int(m.group(1) or m.group(2) or 0)


def _in_slot(key, slot):
    rest = key[_SLOT.match(key).end():]
    if key.startswith('updater/held_state_'):
        return f'updater/held_state_{slot}/{rest}'
    return 'updater/iterator:{}/{}'.format('main' if slot == 0 else f'virtual_rank_{slot}',
                                           rest)


def virtual_sources(virtual, stored_ranks, size, rank):
    """[(stored rank, its slot, this rank's slot)] for each virtual rank that ``rank`` of
    ``size`` holds, from a job of the same V stored by ``stored_ranks`` processes."""
    before = virtual_ranks.spread(virtual, stored_ranks)
    out = []
    for slot, v in enumerate(virtual_ranks.held(virtual, size, rank)):
        q = next(q for q, held in enumerate(before) if v in held)
        out.append((q, v - before[q][0], slot))
    return out


def load_virtual(stored, trainer, sources):
    """Each virtual rank of ``sources`` (``virtual_sources``) taken over as stored: its
    iterator (place, order) and its state (random state, running statistics) from the rank
    file of the rank that held it; everything else from the first source's (``stored``:
    {stored rank: {name: array}}, each rank's whole state). The model then holds this rank's
    first virtual rank's running statistics, as between steps."""
    merged = {k: v for k, v in stored[sources[0][0]].items() if _slot(k) is None}
    for q, before, now in sources:
        merged.update({_in_slot(k, now): v for k, v in stored[q].items()
                       if _slot(k) == before})
    out = io.BytesIO()
    numpy.savez(out, **merged)
    load_same(out, trainer)
    held = getattr(trainer.updater, 'held_states', None)
    if held:
        held[0].load()


def check_virtual(manifest, virtual, where):
    """A checkpoint of V virtual ranks resumes only as V virtual ranks (each takes its own
    over), and one without them only without."""
    stored = manifest.get('virtual_ranks')
    if stored == virtual:
        return
    said = {None: 'without virtual ranks'}
    raise CheckpointError(
        'chainermn_torus: cannot resume from {!r}: it was written {} and this job computes {}; '
        'resume {}'.format(where, said.get(stored, f'as {stored} virtual ranks'),
                           said.get(virtual, f'as {virtual} virtual ranks'),
                           said.get(stored, f'with --virtual-ranks {stored}')))


def persistent_keys(trainer):
    """The names a rank file gives the model's persistent values: in a job of virtual ranks
    each process's model holds its own first virtual rank's running statistics between
    steps, so the replica check leaves them out (each virtual rank's are in its state)."""
    model = trainer.updater.get_optimizer('main').target
    return frozenset('updater/model:main' + path
                     for path, _, _ in chainer_private.persistents(model))


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


def _digest(place, name, trusted, skip):
    with os.fdopen(files.open_rank_file(place, name, trusted), 'rb') as f:
        return files.replica_digest(f, skip)


def check_replicas(comm, place, manifest, trusted=False, skip=frozenset()):
    """The stored ranks hold the same parameters and optimizer state (data-parallel
    replicas); any of them can then seed any rank count. Collective: each rank digests
    every size-th stored file of the held directory ``place`` (but the names in
    ``skip``: ``persistent_keys``)."""
    mine = {r: _digest(place, manifest['files'][r], trusted, skip)
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
