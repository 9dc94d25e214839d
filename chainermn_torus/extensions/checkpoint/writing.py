"""Writing a checkpoint's files so that a name always means a complete file.

Every file is written inside the held checkpoint directory (``runtime.files.held.Held``:
judged at start, used by descriptor after) by ``atomic_write`` (a new temporary, fsync,
rename, the rename flushed), read from this module at each call, so a test can put a
failing or stopping write in its place.
"""
import json
import os
import socket

import numpy

from chainermn_torus.extensions.checkpoint import files
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime import agree, report
from chainermn_torus.runtime.cpu import finite
from chainermn_torus.watchers.temporaries import tmp_name

__all__ = ['atomic_write', 'write_rank_file', 'write_manifest',
           'refuse_nonfinite', 'STALE_GRADS']

STALE_GRADS = '/chainermn_torus/grads/'  # double buffering's averaged, not yet applied grads


def atomic_write(place, name, write, before_rename=None):
    """``write(f)`` into ``name`` of the held directory ``place``, atomically, through a
    temporary named for this host and process (``watchers.temporaries.tmp_name``: the
    sweep tells a dead writer's)."""
    place.write_atomic(name, write, before_rename=before_rename, tmp=tmp_name(name))


def write_rank_file(place, iteration, rank, arrays, room):
    """Write this rank's file of checkpoint ``iteration`` into the held directory (with
    its in-progress marker, which the caller removes once the manifest names the file);
    returns (marker's name, its manifest record). ``room``: (needed, free) bytes as the
    room check saw them, for the message when the write fails anyway."""
    name = files.rank_name(iteration, rank)
    marker = files.marker_name(iteration, rank, socket.gethostname(), os.getpid())
    try:
        with os.fdopen(place.create(marker, replace_own=True), 'w') as f:
            f.write(f'{os.getpid()}\n')
        atomic_write(place, name, lambda f: numpy.savez(f, **arrays))
        with os.fdopen(files.open_rank_file(place, name), 'rb') as f:
            return marker, {'bytes': os.fstat(f.fileno()).st_size, 'crc32': files.crc32(f)}
    except OSError as e:
        # Other ranks learn of it by the abort; what was there before is untouched.
        files.remove(place, marker)
        sizes = '' if not room[0] else (
            f'; about {report.format_bytes(room[0])} needed for the rank files of this '
            f'host, {report.format_bytes(room[1])} was free before writing')
        raise CheckpointError(
            'chainermn_torus: rank {} cannot write checkpoint {} ({}: {}{}); {}. {}'.format(
                rank, os.path.join(place.path, name), type(e).__name__, e,
                '' if files.removed(place) else sizes, files.what_is_kept(place),
                files.advice(place))) from e


def write_manifest(place, iteration, manifest):
    """Rank 0: this checkpoint's manifest, then latest.json naming it. A failed write
    leaves latest.json naming the checkpoint before (both are written atomically); this
    one's own manifest is removed, so that its rank files are swept as those of an
    unfinished checkpoint."""
    text = json.dumps(manifest, indent=1).encode()
    own = files.manifest_name(iteration)
    for name in (own, files.MANIFEST):
        try:
            atomic_write(place, name, lambda f: f.write(text))
        except OSError as e:
            files.remove(place, own)
            raise CheckpointError(
                f'chainermn_torus: checkpoint {iteration} not completed: rank 0 cannot write its '
                f'manifest {os.path.join(place.path, name)} '
                f'({type(e).__name__}: {e.strerror or e}); every rank file of it was written, but '
                'without the '
                f'manifest it does not count: {files.what_is_kept(place)}. {files.advice(place)}'
            ) from e


def refuse_nonfinite(comm, arrays, iteration, place):
    """A diverged state is never written: it would become what --auto-resume loads
    (collective)."""
    count, first = finite.count_in(arrays)
    bad = agree.problems(comm.mpi_comm, (count, first) if count else None)
    if not bad:
        return
    stale = any(STALE_GRADS in f for _, (_, f) in bad)
    raise CheckpointError(
        'chainermn_torus: checkpoint {} not written: the trainer state holds NaN/Inf on '
        'rank(s) {} ({}){}; {}. Training has diverged: lower the learning rate, or run with '
        '--check-finite to stop at the step where it happens.'.format(
            iteration, agree.ranks_text(bad),
            '; '.join(f'rank {r}: {c} value(s), the first in {f}'
                      for r, (c, f) in bad),
            ' (in the averaged gradients double buffering applies at the next step: the '
            'averaging overflowed, with float16 communication beyond 65504)' if stale else '',
            files.what_is_kept(place)))
