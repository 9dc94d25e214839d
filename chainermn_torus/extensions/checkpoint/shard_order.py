"""What a script draws at start that a restart must draw the same.

ChainerMN's ``scatter_dataset(dataset, comm, shuffle=True)`` without a seed, as its own
examples call it, draws its permutation from the operating system's entropy: a new shard
order at every start. A checkpoint or snapshot is refused by one of another order
(``identity.check_data``), so such a script could never be restored. The launcher gives
every such call the run's seed instead, as if the script had passed ``seed=``; the run's
seed is, first found first:

* ``--shuffle-seed N`` (the ``shuffle_seed`` setting): the user's;
* the one kept in the checkpoint directory (``DRAWS_FILE``, 0600, beside the checkpoints
  whose order it made): a requeue with ``--auto-resume`` reads it back;
* derived from the run of ``chainermn-torus elastic``: every step of the run draws alike;
* otherwise a new one (a restart outside these cannot repeat it, and its resume is refused
  naming the order, as before).

Only the scatter's root draws, so only rank 0 reads or writes the file.
"""
import hashlib
import os
import secrets

from chainermn_torus.extensions import outputs
from chainermn_torus.extensions.checkpoint import files

__all__ = ['DRAWS_FILE', 'run_seed']

DRAWS_FILE = '.chainermn-torus-draws'
_FILE_LIMIT = 64  # one decimal number
_SEEDS = 2 ** 32  # numpy's RandomState takes 32-bit seeds


def _derived(*parts):
    text = ':'.join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], 'little')


def run_seed(given=None, checkpoint_dir=None, trusted=None, elastic_step=None):
    """(seed, where it came from, said as a phrase); see the module doc. A file in the
    checkpoint directory that is not this user's own regular file, or holds no seed, is
    refused (UnsafePath, ValueError). ``elastic_step``: the settings' (run, step) of
    ``chainermn-torus elastic``, handed down, or None."""
    if given is not None:
        return int(given), '--shuffle-seed'
    if checkpoint_dir:
        # Judged as the checkpoint directory is (files.hold), made as it would be.
        with files.hold(checkpoint_dir, bool(trusted), create=True) as place:
            kept = os.path.join(place.path, DRAWS_FILE)
            try:
                data = place.read_bytes(DRAWS_FILE, "the run's draws file", _FILE_LIMIT)
            except FileNotFoundError:
                seed = secrets.randbelow(_SEEDS)
                outputs.refuse_foreign(place, [DRAWS_FILE])
                place.write_atomic(DRAWS_FILE, lambda f: f.write(f'{seed}\n'.encode()))
                return seed, f'new, kept in {kept} for a restart'
        text = data.decode('ascii', 'replace').strip()
        if not text.isdigit() or int(text) >= _SEEDS:
            raise ValueError(f'{kept} holds no seed (an integer below 2**32), got {text[:40]!r}; '
                             'remove it '
                             'to draw a new one')
        return int(text), f'kept in {kept}'
    if elastic_step is not None:
        return _derived('chainermn-torus elastic run', elastic_step[0]), \
            'the run of chainermn-torus elastic\'s'
    return secrets.randbelow(_SEEDS), 'new at this start (--checkpoint-dir or --shuffle-seed ' \
        'keeps it for a restart)'
