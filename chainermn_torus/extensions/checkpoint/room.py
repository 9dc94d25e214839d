"""Room for a checkpoint before it is written: what its files will take on this host's
device, and which older checkpoints may go first when that is short."""
import os
import socket

import numpy

from chainermn_torus.extensions.checkpoint import files
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime import agree, report

__all__ = ['npz_bytes', 'host_need', 'removable_first', 'make_room']

RANK0_EXTRA = 64 << 10  # rank 0 also writes the manifests


def npz_bytes(arrays):
    """What numpy.savez will write for ``arrays``, from above: per array its data, the .npy
    header (128 bytes, more for long shapes) and the zip entry's local and central records
    with ZIP64 extras, both naming the file."""
    total = 22 + 56  # end of central directory (+ ZIP64 end records)
    for name, a in arrays.items():
        total += numpy.asarray(a).nbytes + 256 + 2 * (len(name) + 4) + 30 + 46 + 40
    return total


def _rounded(n, block):
    return -(-n // block) * block


def host_need(peers, host, device, block):
    """Bytes this host's device needs for the ranks' files ``peers`` [(host, device,
    bytes)] put on it, with the file system's own metadata (1%, at least a block)."""
    need = sum(n for h, d, n in peers if (h, d) == (host, device))
    return need + max(need // 100, block)


def removable_first(complete, keep):
    """Of the complete checkpoints ``complete`` (iterations, newest first), those that the
    new one would push out of ``keep`` anyway; the newest complete one always stays."""
    return sorted(complete[max(keep - 1, 1):])


def _device(place):
    """(device, block, free bytes) of the held directory; free None where unknown."""
    try:
        st = os.fstatvfs(place.fd)
        return os.fstat(place.fd).st_dev, st.f_frsize, st.f_bavail * st.f_frsize
    except OSError:  # unknown: let the write say what is wrong (still collective)
        return None, 4096, None


def make_room(comm, place, arrays, iteration, keep, drop):
    """Check free space in the held directory ``place`` before writing (collective); when it is
    short and an older checkpoint would be removed after this one anyway, remove it first
    (``drop(it)``, said), so that a job requeued after a full disk can always go on. Returns (need,
    free) for messages.

    The need is this host's ranks' files on the same device, in whole blocks: ranks on
    other hosts may share the file system (then a write can still fail: caught, said).
    """
    mpi = comm.mpi_comm
    host = socket.gethostname()
    device, block, free = _device(place)
    mine = _rounded(npz_bytes(arrays), block) + (RANK0_EXTRA if comm.rank == 0 else 0)
    need = host_need(mpi.allgather((host, device, mine)), host, device, block)
    short = free is not None and free < need
    if free is None:
        need, free = 0, 0
    if not any(mpi.allgather(short)):
        return need, free
    # Rank 0 sees every manifest.
    complete = mpi.bcast([it for it, _ in files.manifests(place) if it < iteration]
                         if comm.rank == 0 else None)
    removable = removable_first(complete, keep)
    for it in removable:
        drop(it)
    mpi.Barrier()
    before = free
    free = _device(place)[2]
    free = need if free is None else free  # as above: the write will say
    if removable:
        report.say('checkpoint {}: {} free in {} on {} and {} needed there (this host\'s rank '
                   'files); removed the oldest checkpoint(s) first ({}), as keep={} would '
                   'after writing'.format(iteration, report.format_bytes(before), place.path,
                                          host, report.format_bytes(need),
                                          ', '.join(f'iteration {i}'
                                                    for i in removable), keep), comm.rank)
    bad = agree.problems(mpi, None if free >= need else (host, need, free))
    if bad:
        r, (where, n, f) = bad[0]
        raise CheckpointError(
            'chainermn_torus: checkpoint {} not written: {} needs {} for the rank files of '
            'host {} and has {} free (rank {}{}); {}. Free space there, choose another '
            '--checkpoint-dir, or keep fewer checkpoints: writing one needs room for '
            'keep + 1 = {} until the oldest is removed.'.format(
                iteration, place.path, report.format_bytes(n), where, report.format_bytes(f),
                r, f', after removing {len(removable)} older checkpoint(s)'
                if removable else '', files.what_is_kept(place), keep + 1))
    return need, free
