"""A checkpoint directory's files: their names, the manifest, and their integrity checks.

No MPI here: what one process can say about the files it sees.
"""
import json
import os
import re
import stat
import zlib

import numpy

from chainermn_torus.extensions.checkpoint.arrays import CheckpointError, RankFile
from chainermn_torus.runtime.cpu import finite
from chainermn_torus.runtime.files import own_files

__all__ = ['CheckpointError', 'MANIFEST', 'rank_file', 'manifest_file', 'marker_file',
           'MARKER', 'RANK_FILE', 'MANIFEST_FILE', 'crc32', 'layout', 'manifests',
           'read_manifest', 'verify_file', 'what_is_kept', 'replica_digest', 'remove',
           'foreign', 'UNTRUSTED', 'newest_complete']

MANIFEST = 'latest.json'  # the newest complete checkpoint's manifest
_MANIFEST_OF = 'manifest_iter_{}.json'
MARKER = re.compile(r'^\.writing_iter_(?P<iteration>\d+)\.rank(?P<rank>\d+)\.'
                    r'(?P<host>[^.]+(?:\.[^.]+)*)\.(?P<pid>\d+)$')
RANK_FILE = re.compile(r'^snapshot_iter_(?P<iteration>\d+)\.rank(?P<rank>\d+)\.npz$')
MANIFEST_FILE = re.compile(r'^manifest_iter_(\d+)\.json$')
# What a refusal of another user's file adds.
UNTRUSTED = ('; a checkpoint there could have been written by someone else: keep '
             'checkpoints in a directory only you can write (chmod go-w), or, if you trust '
             'whoever else can, say so with --trust-checkpoint-dir '
             '(CHAINERMN_TORUS_TRUST_CHECKPOINTS=1)')
# Arrays every data-parallel replica holds alike (compared before loading at another P).
_REPLICA = ('updater/model:', 'updater/optimizer:')


def rank_file(directory, iteration, rank):
    return os.path.join(directory, 'snapshot_iter_{}.rank{}.npz'.format(iteration, rank))


def manifest_file(directory, iteration):
    return os.path.join(directory, _MANIFEST_OF.format(iteration))


def marker_file(directory, iteration, rank, host, pid):
    """Says "rank R of a live job is writing checkpoint I" until the manifest names it, so
    that a sweep can tell a dead job's rank file without a manifest from one in progress."""
    return os.path.join(directory, '.writing_iter_{}.rank{}.{}.{}'.format(
        iteration, rank, host, pid))


def remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def crc32(path, chunk=1 << 22):
    crc = 0
    with open(path, 'rb') as f:
        while True:
            block = f.read(chunk)
            if not block:
                return crc
            crc = zlib.crc32(block, crc)


def layout(model):
    """[name, shape, dtype] of every parameter: what a checkpoint must match to load."""
    return [[name, list(p.data.shape), p.data.dtype.str]
            for name, p in sorted(model.namedparams()) if p.data is not None]


def manifests(directory):
    """[(iteration, per-checkpoint manifest name)] in ``directory``, newest first."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), m.group(0)) for m in map(MANIFEST_FILE.match,
                                                         os.listdir(directory)) if m]
    return sorted(found, reverse=True)


def newest_complete(directory):
    """What is on disk, for the line a signal ends the job with: the newest checkpoint
    whose manifest was written (complete: its manifest is written after every rank file)."""
    try:
        complete = manifests(directory)
    except OSError:
        complete = []
    if not complete:
        return 'no complete checkpoint in {!r} yet'.format(directory)
    return 'the newest complete checkpoint on disk is iteration {} in {!r}'.format(
        complete[0][0], directory)


def what_is_kept(directory):
    """What a failed write leaves to resume from, for its message."""
    complete = manifests(directory)
    if not complete:
        return 'no earlier checkpoint was completed in {!r}'.format(directory)
    return 'checkpoint {} in {!r} stays the latest (complete and intact)'.format(
        complete[0][0], directory)


def read_manifest(directory, name, layout_here, trusted=False):
    """(problem, manifest, fatal) for manifest ``name``: ``fatal`` when no other checkpoint
    in the directory can help (none there, another model, another user's directory)."""
    path = os.path.join(directory, name)
    if not os.path.isdir(directory):
        return 'the directory does not exist', None, True
    unsafe = foreign(directory, trusted, directory=True)
    if unsafe:
        return unsafe + UNTRUSTED, None, True
    if not os.path.isfile(path):
        return 'no {} in it (no checkpoint was completed there)'.format(name), None, True
    unsafe = foreign(path, trusted)
    if unsafe:
        return unsafe + UNTRUSTED, None, False
    try:
        with open(path) as f:
            data = json.load(f)
        data['iteration'], data['ranks'], data['files'], data['model']
    except (ValueError, KeyError, TypeError) as e:
        return '{} is not a chainermn-torus manifest ({})'.format(path, e), None, False
    wrong = _inconsistent(directory, name, data)
    if wrong:  # a flipped bit in the iteration once named a resume point it was not
        return '{} is damaged: {}'.format(path, wrong), None, False
    if not isinstance(data.get('checks'), dict) or \
            set(data['checks']) != set(map(str, data['files'])):
        return ('{} does not record every rank file\'s size and CRC-32 ("checks"), so its '
                'files cannot be checked before they are loaded'.format(path)), None, False
    there = data['model']
    if layout_here != there:
        for a, b in zip(there, layout_here):
            if a != b:
                return ('it belongs to another model: array {} has shape {} dtype {} '
                        'there, {} shape {} dtype {} here'.format(
                            a[0], tuple(a[1]), a[2], b[0], tuple(b[1]), b[2])), None, True
        return ('it belongs to another model: {} arrays there, {} here'.format(
            len(there), len(layout_here))), None, True
    return None, data, False


def _inconsistent(directory, name, data):
    """What does not agree within a manifest, or None: its iteration is the one its rank
    files are named for, and ``latest.json`` is the same as its checkpoint's own manifest
    (written beside it, atomically, just before)."""
    iteration = data['iteration']
    if not isinstance(iteration, int) or not isinstance(data['files'], list):
        return 'its iteration {!r} or its file list is not what a manifest holds'.format(
            iteration)
    for f in data['files']:
        m = RANK_FILE.match(str(f))
        if m is None or int(m.group('iteration')) != iteration:
            return 'it says iteration {} but names {}'.format(iteration, f)
    if name == MANIFEST:
        own = manifest_file(directory, iteration)
        try:
            with open(own) as f:
                same = json.load(f) == data
        except (OSError, ValueError):
            return 'it says iteration {} but {} is missing or unreadable'.format(
                iteration, os.path.basename(own))
        if not same:
            return 'it differs from {}, the manifest of iteration {}'.format(
                os.path.basename(own), iteration)
    return None


def foreign(path, trusted=False, directory=False):
    """Why ``path`` (a checkpoint's file, or with ``directory`` its directory) may hold what
    another user put there, or None: a link (a file only), owned by another user than this
    one or root, or writable by its group or everyone. ``trusted``: the user said the
    directory is theirs to trust (``--trust-checkpoint-dir``): nothing is said."""
    if trusted:
        return None
    try:
        st = os.stat(path) if directory else os.lstat(path)
    except OSError:
        return None  # what is missing is said where it is read
    what = 'the checkpoint directory {}'.format(path) if directory else path
    if stat.S_ISLNK(st.st_mode):
        return '{} is a symbolic link (to {})'.format(what, os.readlink(path))
    if st.st_uid not in (os.getuid(), 0):
        return '{} is owned by {}'.format(what, own_files.owner_name(st.st_uid))
    if st.st_mode & 0o022:
        return '{} can be written by {} (mode {:o})'.format(
            what, 'everyone' if st.st_mode & 0o002 else 'its group', st.st_mode & 0o777)
    return None


def verify_file(directory, manifest, name, rank, trusted=False):
    """What is wrong with rank file ``name`` as ``rank`` sees it, or None: present, this
    user's (``foreign``), of the size and CRC-32 the manifest recorded, readable without
    pickle and holding no NaN/Inf."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        return 'rank {} cannot see {}'.format(rank, path)
    unsafe = foreign(path, trusted)
    if unsafe:
        return unsafe + UNTRUSTED
    check = manifest.get('checks', {}).get(name)
    if check is None:
        return '{} has no size and CRC-32 in the manifest, so it cannot be checked'.format(
            path)
    size = os.path.getsize(path)
    if size != check['bytes']:
        return '{} has {} bytes, the manifest says {} (truncated or replaced)'.format(
            path, size, check['bytes'])
    if crc32(path) != check['crc32']:
        return '{} does not match its CRC-32 in the manifest (corrupted)'.format(path)
    # Written before checkpoints refused diverged states: loading NaN/Inf would only fail
    # again one step later.
    try:
        with RankFile(path) as z:
            stored = {k: z[k] for k in z.files}  # each read (decompressed) once
        count, first = finite.count_in({k: a for k, a in stored.items() if a.dtype != object})
    except CheckpointError as e:  # an object array: never unpickled
        return str(e).replace('chainermn_torus: ', '', 1)
    except Exception as e:  # CRC matched, so unreadable means not an npz at all
        return '{} cannot be read as a checkpoint ({}: {})'.format(path, type(e).__name__, e)
    if count:
        return '{} holds {} NaN/Inf value(s), the first in {} (a diverged state)'.format(
            path, count, first)
    return None


def replica_digest(path):
    """(digest of every replica array, {name: crc}) of one stored rank file."""
    crcs = {}
    with RankFile(path) as z:
        for k in sorted(z.files):
            if k.startswith(_REPLICA):
                a = numpy.ascontiguousarray(z[k])
                crcs[k] = zlib.crc32(a.tobytes(),
                                     zlib.crc32(str((a.dtype.str, a.shape)).encode()))
    return zlib.crc32(json.dumps(crcs, sort_keys=True).encode()), crcs
