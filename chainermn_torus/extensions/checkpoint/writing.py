"""Writing a checkpoint's files so that a name always means a complete file.

Every file goes through ``runtime.files.atomic.atomic_write`` (temporary file, fsync, rename), read
from this module at each call, so a test can put a failing or stopping write in its place.
"""
import json
import os
import socket
import tempfile

import numpy

from chainermn_torus.extensions.checkpoint import files
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime import agree, report
from chainermn_torus.runtime.cpu import finite
from chainermn_torus.runtime.files import own_files
from chainermn_torus.runtime.files.atomic import atomic_write

__all__ = ['check_writable', 'write_rank_file', 'write_manifest', 'refuse_nonfinite',
           'STALE_GRADS']

STALE_GRADS = '/chainermn_torus/grads/'  # double buffering's averaged, not yet applied grads


def check_writable(comm, directory, what='results', error=OSError, private=False):
    """Create ``directory`` (``private``: only its owner may enter it, as checkpoints are
    made) and write a probe file on every rank; raise on every rank if any rank cannot
    (collective). For a job's output, so it fails at start, not at the end."""
    problem = None
    try:
        os.makedirs(directory, mode=0o700 if private else 0o777, exist_ok=True)
        # A name nobody can guess, made new: a link planted under a predictable probe name
        # once had the probe truncate the file it pointed to.
        fd, probe = tempfile.mkstemp(prefix='.write-test.rank{}.'.format(comm.rank),
                                     dir=directory)
        with os.fdopen(fd, 'w') as f:
            f.write('ok')
        os.remove(probe)
    except OSError as e:
        problem = '{}: {}'.format(type(e).__name__, e)
    agree.raise_everywhere(comm.mpi_comm, problem, lambda bad: error(
        'chainermn_torus: cannot write {} to {!r} on rank(s) {}: {}. Choose a directory '
        'every rank can write (a shared file system, or a local disk per node).'.format(
            what, directory, agree.ranks_text(bad), bad[0][1])))


def write_rank_file(directory, iteration, rank, arrays, room):
    """Write this rank's file of checkpoint ``iteration`` (with its in-progress marker,
    which the caller removes once the manifest names the file); returns (marker, its
    manifest record). ``room``: (needed, free) bytes as the room check saw them, for the
    message when the write fails anyway."""
    path = files.rank_file(directory, iteration, rank)
    marker = files.marker_file(directory, iteration, rank, socket.gethostname(), os.getpid())
    try:
        with own_files.open_new(marker, 'w') as f:
            f.write('{}\n'.format(os.getpid()))
        atomic_write(path, lambda f: numpy.savez(f, **arrays))
        return marker, {'bytes': os.path.getsize(path), 'crc32': files.crc32(path)}
    except OSError as e:
        # Other ranks learn of it by the abort; what was there before is untouched.
        files.remove(marker)
        sizes = '' if not room[0] else '; about {} needed for the rank files of this ' \
            'host, {} was free before writing'.format(report.format_bytes(room[0]),
                                                     report.format_bytes(room[1]))
        raise CheckpointError(
            'chainermn_torus: rank {} cannot write checkpoint {} ({}: {}{}); {}. Free '
            'space there or choose another --checkpoint-dir.'.format(
                rank, path, type(e).__name__, e, sizes, files.what_is_kept(directory))) from e


def write_manifest(directory, iteration, manifest):
    """Rank 0: this checkpoint's manifest, then latest.json naming it. A failed write
    leaves latest.json naming the checkpoint before (both are written atomically); this
    one's own manifest is removed, so that its rank files are swept as those of an
    unfinished checkpoint."""
    text = json.dumps(manifest, indent=1).encode()
    own = files.manifest_file(directory, iteration)
    for path in (own, os.path.join(directory, files.MANIFEST)):
        try:
            atomic_write(path, lambda f: f.write(text))
        except OSError as e:
            files.remove(own)
            raise CheckpointError(
                'chainermn_torus: checkpoint {} not completed: rank 0 cannot write its '
                'manifest {} ({}: {}); every rank file of it was written, but without the '
                'manifest it does not count: {}. Free space there or choose another '
                '--checkpoint-dir.'.format(iteration, path, type(e).__name__,
                                           e.strerror or e, files.what_is_kept(directory))
            ) from e


def refuse_nonfinite(comm, arrays, iteration, directory):
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
            '; '.join('rank {}: {} value(s), the first in {}'.format(r, c, f)
                      for r, (c, f) in bad),
            ' (in the averaged gradients double buffering applies at the next step: the '
            'averaging overflowed, with float16 communication beyond 65504)' if stale else '',
            files.what_is_kept(directory)))
