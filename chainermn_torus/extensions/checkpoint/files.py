"""A checkpoint directory's files: their names, the manifest, and their integrity checks.

No MPI here: what one process can say about the files it sees. Every file is read under
the rule for shared paths (``runtime.files.shared_paths``: no link followed, a regular file
of this user, sized first) and nothing is decompressed before it is bounded: a manifest by
``config.BOUNDS['manifest']`` and a schema (``manifest_problem``), a rank file's arrays by
their headers, checked against this job's own state (``expected_arrays``) before any data
is read (a 14 MB file holding a 6 GiB array, with a size and CRC to match in its manifest,
was once decompressed whole and OOM-killed the job).
"""
import json
import math
import os
import re
import zipfile
import zlib

import numpy

from chainermn_torus import config
from chainermn_torus.errors import UnsafePath
from chainermn_torus.extensions.checkpoint.arrays import CheckpointError, RankFile
from chainermn_torus.runtime.cpu import finite
from chainermn_torus.runtime.files import shared_paths

__all__ = ['CheckpointError', 'MANIFEST', 'rank_file', 'manifest_file', 'marker_file',
           'MARKER', 'RANK_FILE', 'MANIFEST_FILE', 'crc32', 'layout', 'manifests',
           'read_manifest', 'verify_file', 'what_is_kept', 'replica_digest', 'remove',
           'foreign', 'UNTRUSTED', 'newest_complete', 'manifest_problem', 'expected_arrays',
           'array_headers', 'OTHER_SLACK']

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
# Beyond this job's own state, what a rank file's other arrays (an iterator's order, the
# random state) may add: their sizes depend on the shard, so on the rank count.
OTHER_SLACK = 64 << 20
_NPY_HEADER = 1 << 16  # the most bytes an .npy header may take (numpy reads up to 10,000)


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
    """The CRC-32 of the file ``path``, or of the open binary file ``path`` from its
    start."""
    if not isinstance(path, str):
        return _crc32_of(path, chunk)
    with open(path, 'rb') as f:
        return _crc32_of(f, chunk)


def _crc32_of(f, chunk):
    f.seek(0)
    crc = 0
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


def _load_json(path, trusted):
    """A manifest's JSON, read under the rule; (data, None) or (None, what is wrong)."""
    try:
        return shared_paths.read_json(path, 'the manifest', config.BOUNDS['manifest'],
                                      trusted), None
    except UnsafePath as e:
        return None, _unsafe(e)
    except (OSError, ValueError) as e:
        return None, '{} is not a chainermn-torus manifest ({})'.format(path, e)


def read_manifest(directory, name, layout_here, trusted=False):
    """(problem, manifest, fatal) for manifest ``name``: ``fatal`` when no other checkpoint
    in the directory can help (none there, another model, another user's directory)."""
    path = os.path.join(directory, name)
    if not os.path.lexists(directory):
        return 'the directory does not exist', None, True
    unsafe = foreign(directory, trusted)
    if unsafe:
        return unsafe, None, True
    if not os.path.lexists(path):
        return 'no {} in it (no checkpoint was completed there)'.format(name), None, True
    data, wrong = _load_json(path, trusted)
    if wrong:
        return wrong, None, False
    wrong = manifest_problem(data)
    if wrong:
        return '{} is not a chainermn-torus manifest ({})'.format(path, wrong), None, False
    wrong = _inconsistent(directory, name, data, trusted)
    if wrong:  # a flipped bit in the iteration once named a resume point it was not
        return '{} is damaged: {}'.format(path, wrong), None, False
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


def _count(v, low=0):
    return type(v) is int and v >= low


def manifest_problem(data):
    """What in ``data`` is not what a manifest holds, or None: each field's type and range
    (a ``ranks`` of 0, 3 or "2" once ended every rank with a traceback, and 1, beside two
    rank files, resharded as if the job had run on one rank)."""
    if not isinstance(data, dict):
        return 'it holds a {}, not an object'.format(type(data).__name__)
    for field in ('iteration', 'ranks', 'files', 'model'):
        if field not in data:
            return 'no {!r}'.format(field)
    if not _count(data['iteration']):
        return "'iteration' is {!r}, not a count >= 0".format(data['iteration'])
    if not _count(data['ranks'], 1):
        return "'ranks' is {!r}, not a rank count >= 1".format(data['ranks'])
    names = data['files']
    want = [os.path.basename(rank_file('', data['iteration'], r))
            for r in range(data['ranks'])]
    if names != want:
        return "'files' is not the {} rank files of iteration {} in rank order ({}{})".format(
            data['ranks'], data['iteration'], repr(names)[:120],
            '...' if len(repr(names)) > 120 else '')
    checks = data.get('checks')
    if not isinstance(checks, dict) or set(checks) != set(names):
        return ('it does not record every rank file\'s size and CRC-32 ("checks"), so its '
                'files cannot be checked before they are loaded')
    for name, check in checks.items():
        if not (isinstance(check, dict) and _count(check.get('bytes')) and
                _count(check.get('crc32')) and check['crc32'] < 1 << 32):
            return 'the check of {} is {!r}, not a byte count and a CRC-32'.format(
                name, check)
    model = data['model']
    if not isinstance(model, list) or not all(
            isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and
            isinstance(m[1], list) and all(_count(d) for d in m[1]) and isinstance(m[2], str)
            for m in model):
        return "'model' is not a list of [name, shape, dtype]"
    batch = data.get('batch_per_rank')
    if batch is not None and not _count(batch, 1):
        return "'batch_per_rank' is {!r}, not a count >= 1".format(batch)
    rate = data.get('learning_rate')
    if rate is not None and not (
            isinstance(rate, list) and len(rate) == 2 and isinstance(rate[0], str) and
            type(rate[1]) in (int, float) and math.isfinite(rate[1])):
        return "'learning_rate' is {!r}, not [attribute, number]".format(rate)
    return None


def _inconsistent(directory, name, data, trusted=False):
    """What does not agree between a manifest and its directory, or None: no rank file of
    its iteration beyond its ranks, and ``latest.json`` the same as its checkpoint's own
    manifest (written beside it, atomically, just before)."""
    iteration, ranks = data['iteration'], data['ranks']
    try:
        extra = sorted(int(m.group('rank')) for m in map(RANK_FILE.match, os.listdir(directory))
                       if m and int(m.group('iteration')) == iteration and
                       int(m.group('rank')) >= ranks)
    except OSError:
        extra = []
    if extra:
        return 'it says {} rank(s) but {} is there too'.format(
            ranks, os.path.basename(rank_file(directory, iteration, extra[0])))
    if name == MANIFEST:
        own = manifest_file(directory, iteration)
        theirs, wrong = _load_json(own, trusted)
        if wrong:
            return 'it says iteration {} but {} is missing or unreadable'.format(
                iteration, os.path.basename(own))
        if theirs != data:
            return 'it differs from {}, the manifest of iteration {}'.format(
                os.path.basename(own), iteration)
    return None


def _unsafe(error):
    """An ``UnsafePath`` of the rule as a problem here, with ``UNTRUSTED`` where trusting
    the directory would allow the file (its owner or mode all that was wrong)."""
    return str(error).replace('chainermn_torus: ', '', 1) + \
        (UNTRUSTED if getattr(error, 'trust_helps', False) else '')


def foreign(directory, trusted=False):
    """Why the checkpoint ``directory`` may hold what another user put there, or None (the
    rule of ``runtime.files.shared_paths``): a link, not a directory, owned by another user
    than this one or root, or writable by its group or everyone. ``trusted``: the user said
    it is theirs to trust (``--trust-checkpoint-dir``): owner and mode are not judged; a
    link still is. The problem ends with what to do: ``UNTRUSTED`` where trusting it would
    allow it, else, for a link, to give the directory it points to. (Its files are judged
    where they are opened: ``shared_paths.open_file``.)"""
    try:
        why = shared_paths.directory_problem(directory, trusted)
        helps = why is not None and not trusted and \
            shared_paths.directory_problem(directory, True) is None
    except OSError:
        return None  # what is missing is said where it is read
    if why is None:
        return None
    return 'the checkpoint directory {}: {}{}'.format(
        directory, why, UNTRUSTED if helps else '; give the directory it points to, if it is '
        'yours' if os.path.islink(directory) else '')


def expected_arrays(state):
    """{name: (shape, dtype)} of a trainer's serialized state (``state``: the target of a
    ``DictionarySerializer`` that saved it): what a rank file's arrays are held against."""
    out = {}
    for key, value in state.items():
        a = numpy.asarray(value)
        if a.dtype != object:
            out[key] = (tuple(a.shape), a.dtype.str)
    return out


def array_headers(f, expected=None, size=1):
    """What is wrong with the arrays of the open rank file ``f``, read from their .npy
    headers alone (no array's data is decompressed), or None. Each member must be an array
    whose stored size its header accounts for; against ``expected`` (``expected_arrays`` of
    this job's trainer), the parameters' and optimizer state's shapes and dtypes must be
    this job's, and the other arrays together at most this job's other arrays times
    ``size`` (the ranks: a shard grows when fewer ranks wrote it) plus ``OTHER_SLACK``."""
    try:
        z = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return 'it is not an npz archive ({})'.format(e)
    other, mine = 0, 0
    if expected:
        mine = sum(math.prod(s) * numpy.dtype(d).itemsize for k, (s, d) in expected.items()
                   if not k.startswith(_REPLICA))
    with z:
        for info in z.infolist():
            if not info.filename.endswith('.npy'):
                return 'it holds {!r}, which is not an array'.format(info.filename)
            key = info.filename[:-4]
            try:
                with z.open(info) as m:
                    version = numpy.lib.format.read_magic(m)
                    shape, _, dtype = (numpy.lib.format.read_array_header_1_0 if version ==
                                       (1, 0) else numpy.lib.format.read_array_header_2_0)(m)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as e:
                return 'array {} has no readable header ({})'.format(key, e)
            if dtype.hasobject:
                continue  # refused by name when read (arrays.RankFile), never unpickled
            nbytes = math.prod(shape) * dtype.itemsize
            if not nbytes <= info.file_size <= nbytes + _NPY_HEADER:
                return 'array {} says {} {} ({:,} bytes) but stores {:,}'.format(
                    key, shape, dtype, nbytes, info.file_size)
            want = (expected or {}).get(key)
            if want is not None and key.startswith(_REPLICA):
                if (tuple(shape), dtype.str) != want:
                    return 'array {} is {} {} there, {} {} in this job'.format(
                        key, tuple(shape), dtype.str, want[0], want[1])
            else:
                other += nbytes
    if expected is not None and other > mine * max(size, 1) + OTHER_SLACK:
        return ('its arrays beside the parameters and optimizer state hold {:,} bytes, more '
                'than this job\'s {:,} times {} ranks and {:,} to spare'.format(
                    other, mine, size, OTHER_SLACK))
    return None


def verify_file(directory, manifest, name, rank, trusted=False, expected=None, size=1):
    """What is wrong with rank file ``name`` as ``rank`` sees it, or None: present, this
    user's regular file (``shared_paths.open_file``; a link even in a trusted directory), of
    the size and CRC-32 the manifest recorded, its arrays within bounds (``array_headers``:
    ``expected`` and ``size`` this job's state and rank count), readable without pickle
    and holding no NaN/Inf."""
    path = os.path.join(directory, name)
    check = manifest.get('checks', {}).get(name)
    if check is None:
        return '{} has no size and CRC-32 in the manifest, so it cannot be checked'.format(
            path)
    try:
        fd = shared_paths.open_file(path, 'the rank file', None, trusted)
    except FileNotFoundError:
        return 'rank {} cannot see {}'.format(rank, path)
    except UnsafePath as e:
        return _unsafe(e)
    except OSError as e:
        return 'rank {} cannot read {} ({})'.format(rank, path, e.strerror or e)
    with os.fdopen(fd, 'rb') as f:
        size_there = os.fstat(fd).st_size
        if size_there != check['bytes']:
            return '{} has {} bytes, the manifest says {} (truncated or replaced)'.format(
                path, size_there, check['bytes'])
        if crc32(f) != check['crc32']:
            return '{} does not match its CRC-32 in the manifest (corrupted)'.format(path)
        f.seek(0)
        wrong = array_headers(f, expected, size)
        if wrong:
            return '{}: {}'.format(path, wrong)
        # Written before checkpoints refused diverged states: loading NaN/Inf would only
        # fail again one step later.
        f.seek(0)
        try:
            with RankFile(f, path) as z:
                stored = {k: z[k] for k in z.files}  # each read (decompressed) once
            count, first = finite.count_in({k: a for k, a in stored.items()
                                            if a.dtype != object})
        except CheckpointError as e:  # an object array: never unpickled
            return str(e).replace('chainermn_torus: ', '', 1)
        except Exception as e:  # CRC matched, so unreadable means not an npz at all
            return '{} cannot be read as a checkpoint ({}: {})'.format(
                path, type(e).__name__, e)
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
