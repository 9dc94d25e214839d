"""A checkpoint directory's files: their names, the manifest, and their integrity checks.

No MPI here: what one process can say about the files it sees in the checkpoint directory
it holds (``place``: a ``runtime.files.held.Held``, judged component by component when the
job started and used by descriptor after, never by its path again: a directory renamed and
replaced by a link meanwhile is not followed). Every file is read under the rule for shared
paths (``runtime.files.shared_paths``: no link followed, a regular file of this user, sized
first) and nothing is decompressed before it is bounded: a manifest by
``settings_table.BOUNDS['manifest']`` and a schema (``manifest_problem``), a rank file's arrays by
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

from chainermn_torus import settings_table
from chainermn_torus.errors import UnsafePath
from chainermn_torus.extensions.checkpoint.arrays import CheckpointError, RankFile
from chainermn_torus.runtime.cpu import finite
from chainermn_torus.runtime.files import held, shared_paths

__all__ = ['CheckpointError', 'MANIFEST', 'rank_name', 'manifest_name', 'marker_name',
           'MARKER', 'RANK_FILE', 'MANIFEST_FILE', 'crc32', 'layout', 'manifests',
           'read_manifest', 'verify_file', 'what_is_kept', 'replica_digest', 'remove',
           'hold', 'UNTRUSTED', 'newest_complete', 'manifest_problem', 'expected_arrays',
           'array_headers', 'OTHER_SLACK', 'open_rank_file', 'names', 'remove_tree',
           'REPLICA_PREFIXES']

MANIFEST = 'latest.json'  # the newest complete checkpoint's manifest
_MANIFEST_OF = 'manifest_iter_{}.json'
MARKER = re.compile(r'^\.writing_iter_(?P<iteration>\d+)\.rank(?P<rank>\d+)\.'
                    r'(?P<host>[^.]+(?:\.[^.]+)*)\.(?P<pid>\d+)$')
RANK_FILE = re.compile(r'^snapshot_iter_(?P<iteration>\d+)\.rank(?P<rank>\d+)\.npz$')
MANIFEST_FILE = re.compile(r'^manifest_iter_(\d+)\.json$')
# What a refusal of another user's directory or file adds.
UNTRUSTED = ('a checkpoint there could have been written by someone else: keep '
             'checkpoints in a directory whose every component only you or root can write '
             '(chmod go-w), or, if you trust whoever else can, say so with '
             '--trust-checkpoint-dir (CHAINERMN_TORUS_TRUST_CHECKPOINTS=1)')
# Arrays every data-parallel replica holds alike (compared before loading at another P).
REPLICA_PREFIXES = ('updater/model:', 'updater/optimizer:')
# Where a rank file holds the trainer's iteration (StandardUpdater.serialize's 'iteration',
# under the 'updater' the state is saved as): it must be the manifest's.
ITERATION_KEY = 'updater/iteration'
# Beyond this job's own state, what a rank file's other arrays (an iterator's order, the
# random state) may add: their sizes depend on the shard, so on the rank count.
OTHER_SLACK = 64 << 20
_NPY_HEADER = 1 << 16  # the most bytes an .npy header may take (numpy reads up to 10,000)
WHAT = 'the checkpoint directory'


def rank_name(iteration, rank):
    return f'snapshot_iter_{iteration}.rank{rank}.npz'


def manifest_name(iteration):
    return _MANIFEST_OF.format(iteration)


def marker_name(iteration, rank, host, pid):
    """Says "rank R of a live job is writing checkpoint I" until the manifest names it, so
    that a sweep can tell a dead job's rank file without a manifest from one in progress."""
    return f'.writing_iter_{iteration}.rank{rank}.{host}.{pid}'


def hold(directory, trusted=False, create=False):
    """The checkpoint ``directory`` walked and judged (``held.walk``: every component this
    user's or root's and writable by nobody else, a link followed only where it and its
    directory are; the directory itself only this user's to write), as a ``Held``; made
    (0700) where ``create``. ``trusted`` (``--trust-checkpoint-dir``): owners and modes are
    not judged. UnsafePath (one line, naming the component) or OSError otherwise."""
    return held.walk(directory, WHAT, trusted=trusted, create=create, mode=0o700,
                     fix=UNTRUSTED[0].upper() + UNTRUSTED[1:] + '.')


def names(place):
    """Every name in the held checkpoint directory (this user's own: not bounded)."""
    return os.listdir(place.fd)


def remove_tree(place, name):
    """Remove the directory ``name`` of the held directory with this user's files in it
    (a generation of in-memory snapshots); nothing where it is not there."""
    try:
        place.remove_own_directory(name)
    except FileNotFoundError:
        pass


def remove(place, name):
    """Remove ``name`` from the held directory where it is this user's file."""
    try:
        place.remove_own(name)
    except OSError:
        pass


def crc32(f, chunk=1 << 22):
    """The CRC-32 of the open binary file ``f`` from its start (or of the file at the path
    ``f``, for tests and tools)."""
    if isinstance(f, str):
        with open(f, 'rb') as opened:
            return crc32(opened, chunk)
    f.seek(0)
    crc = 0
    while True:
        block = f.read(chunk)
        if not block:
            return crc
        crc = zlib.crc32(block, crc)


def layout(model):
    """[name, shape, dtype] of every parameter: what a checkpoint must match to load. A
    parameter not yet initialized (``L.Linear(None, n)`` before its first forward: a resume
    comes before it) has shape and dtype None, and takes the stored ones."""
    return [[name, None, None] if p.data is None else
            [name, list(p.data.shape), p.data.dtype.str]
            for name, p in sorted(model.namedparams())]


def same_layout(there, here):
    """The first pair of arrays that differ as (there, here), None where ``there`` fits
    ``here`` (an uninitialized one fits any shape of its name), or ((), ()) where only the
    counts differ."""
    for a, b in zip(there, here):
        if a != b and not (b[1] is None and a[0] == b[0]):
            return a, b
    return None if len(there) == len(here) else ((), ())


def manifests(place):
    """[(iteration, per-checkpoint manifest name)] in the held directory, newest first:
    this user's (another's, in a trusted shared directory, is never a checkpoint of this
    job's: passed over, said at start by the sweep's ``others``)."""
    found = []
    for m in map(MANIFEST_FILE.match, names(place)):
        if not m:
            continue
        try:
            if not shared_paths.yours(place.lstat(m.group(0)).st_uid):
                continue
        except FileNotFoundError:
            continue
        found.append((int(m.group(1)), m.group(0)))
    return sorted(found, reverse=True)


def newest_complete(place):
    """What is on disk, for the line a signal ends the job with: the newest checkpoint
    whose manifest was written (complete: its manifest is written after every rank file)."""
    try:
        complete = manifests(place)
    except OSError:
        complete = []
    if not complete:
        return f'no complete checkpoint in {place.path!r} yet'
    return f'the newest complete checkpoint on disk is iteration {complete[0][0]} in {place.path!r}'


def advice(place):
    """What to do after a failed write, for its message."""
    if removed(place):
        return 'Make it again, or choose another --checkpoint-dir.'
    return 'Free space there or choose another --checkpoint-dir.'


def what_is_kept(place):
    """What a failed write leaves to resume from, for its message."""
    if removed(place):
        return f'{place.path!r} was removed while the job ran, its checkpoints with it'
    complete = manifests(place)
    if not complete:
        return f'no earlier checkpoint was completed in {place.path!r}'
    return f'checkpoint {complete[0][0]} in {place.path!r} stays the latest (complete and intact)'


def not_yours(place, name, st):
    """Why a checkpoint's file is not loaded where another user owns it, or None: a
    trusted directory (``--trust-checkpoint-dir``: a shared project directory) lets its
    components and modes be others', never the files a checkpoint is made of (a planted
    manifest and rank files once became the newest checkpoint at every resume)."""
    if shared_paths.yours(st.st_uid):
        return None
    return (f'{os.path.join(place.path, name)} is {shared_paths.what_is_there(st)}: a '
            'checkpoint is loaded only from your own files, even in a directory you trust')


def removed(place):
    """Whether the held directory was removed while the job held it (its files with it)."""
    try:
        return os.fstat(place.fd).st_nlink == 0
    except OSError:
        return False


def _load_json(place, name, trusted):
    """A manifest's JSON, read under the rule; (data, None) or (None, what is wrong)."""
    limit = settings_table.BOUNDS['manifest']
    try:
        fd = open_own(place, name, 'the manifest', limit, trusted)
        return json.loads(shared_paths.read_opened(
            fd, os.path.join(place.path, name), 'the manifest', limit).decode('utf-8')), None
    except UnsafePath as e:
        return None, _unsafe(e)
    except (OSError, ValueError) as e:
        return None, f'{os.path.join(place.path, name)} is not a chainermn-torus manifest ({e})'


def read_manifest(place, name, layout_here, trusted=False):
    """(problem, manifest, fatal) for manifest ``name``: ``fatal`` when no other checkpoint
    in the directory can help (none there, another model)."""
    path = os.path.join(place.path, name)
    try:
        place.lstat(name)
    except FileNotFoundError:
        return f'no {name} in it (no checkpoint was completed there)', None, True
    data, wrong = _load_json(place, name, trusted)
    if wrong:
        return wrong, None, False
    wrong = manifest_problem(data)
    if wrong:
        return f'{path} is not a chainermn-torus manifest ({wrong})', None, False
    wrong = _inconsistent(place, name, data, trusted)
    if wrong:  # a flipped bit in the iteration once named a resume point it was not
        return f'{path} is damaged: {wrong}', None, False
    there = data['model']
    differ = same_layout(there, layout_here)
    if differ == ((), ()):
        return (f'it belongs to another model: {len(there)} arrays there, {len(layout_here)} '
                'here'), None, True
    if differ:
        a, b = differ
        return (f'it belongs to another model: array {a[0]} has shape {tuple(a[1])} dtype {a[2]} '
                f'there, {b[0]} '
                f'shape {b[1] and tuple(b[1])} dtype {b[2]} here'), None, True
    return None, data, False


def _count(v, low=0):
    return type(v) is int and v >= low


def manifest_problem(data):
    """What in ``data`` is not what a manifest holds, or None: each field's type and range
    (a ``ranks`` of 0, 3 or "2" once ended every rank with a traceback, and 1, beside two
    rank files, resharded as if the job had run on one rank)."""
    if not isinstance(data, dict):
        return f'it holds a {type(data).__name__}, not an object'
    for field in ('iteration', 'ranks', 'files', 'model'):
        if field not in data:
            return f'no {field!r}'
    if not _count(data['iteration']):
        return "'iteration' is {!r}, not a count >= 0".format(data['iteration'])
    if not _count(data['ranks'], 1):
        return "'ranks' is {!r}, not a rank count >= 1".format(data['ranks'])
    names = data['files']
    want = [rank_name(data['iteration'], r) for r in range(data['ranks'])]
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
            return f'the check of {name} is {check!r}, not a byte count and a CRC-32'
    model = data['model']
    if not isinstance(model, list) or not all(
            isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and
            isinstance(m[1], list) and all(_count(d) for d in m[1]) and isinstance(m[2], str)
            for m in model):
        return "'model' is not a list of [name, shape, dtype]"
    batch = data.get('batch_per_rank')
    if batch is not None and not _count(batch, 1):
        return f"'batch_per_rank' is {batch!r}, not a count >= 1"
    rate = data.get('learning_rate')
    if rate is not None and not (
            isinstance(rate, list) and len(rate) == 2 and isinstance(rate[0], str) and
            type(rate[1]) in (int, float) and math.isfinite(rate[1])):
        return f"'learning_rate' is {rate!r}, not [attribute, number]"
    return None


def _inconsistent(place, name, data, trusted=False):
    """What does not agree between a manifest and its directory, or None: no rank file of
    its iteration beyond its ranks, and ``latest.json`` the same as its checkpoint's own
    manifest (written beside it, atomically, just before)."""
    iteration, ranks = data['iteration'], data['ranks']
    try:
        extra = sorted(int(m.group('rank')) for m in map(RANK_FILE.match, names(place))
                       if m and int(m.group('iteration')) == iteration and
                       int(m.group('rank')) >= ranks)
    except OSError:
        extra = []
    if extra:
        return f'it says {ranks} rank(s) but {rank_name(iteration, extra[0])} is there too'
    if name == MANIFEST:
        own = manifest_name(iteration)
        theirs, wrong = _load_json(place, own, trusted)
        if wrong:
            return f'it says iteration {iteration} but {own} is missing or unreadable'
        if theirs != data:
            return f'it differs from {own}, the manifest of iteration {iteration}'
    return None


def _unsafe(error):
    """An ``UnsafePath`` of the rule as a problem here, with ``UNTRUSTED`` where trusting
    the directory would allow the file (its owner or mode all that was wrong)."""
    return str(error).replace('chainermn_torus: ', '', 1) + \
        ('; ' + UNTRUSTED if getattr(error, 'trust_helps', False) else '')


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
        return f'it is not an npz archive ({e})'
    other, mine = 0, 0
    if expected:
        mine = sum(math.prod(s) * numpy.dtype(d).itemsize for k, (s, d) in expected.items()
                   if not k.startswith(REPLICA_PREFIXES))
    with z:
        for info in z.infolist():
            if not info.filename.endswith('.npy'):
                return f'it holds {info.filename!r}, which is not an array'
            key = info.filename[:-4]
            try:
                with z.open(info) as m:
                    version = numpy.lib.format.read_magic(m)
                    shape, _, dtype = (numpy.lib.format.read_array_header_1_0 if version ==
                                       (1, 0) else numpy.lib.format.read_array_header_2_0)(m)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as e:
                return f'array {key} has no readable header ({e})'
            if dtype.hasobject:
                continue  # refused by name when read (arrays.RankFile), never unpickled
            nbytes = math.prod(shape) * dtype.itemsize
            if not nbytes <= info.file_size <= nbytes + _NPY_HEADER:
                return (f'array {key} says {shape} {dtype} ({nbytes:,} bytes) but '
                        f'stores {info.file_size:,}')
            want = (expected or {}).get(key)
            if want is not None and key.startswith(REPLICA_PREFIXES):
                if (tuple(shape), dtype.str) != want:
                    return (f'array {key} is {tuple(shape)} {dtype.str} there, {want[0]} {want[1]} '
                            'in this job')
            else:
                other += nbytes
    if expected is not None and other > mine * max(size, 1) + OTHER_SLACK:
        return (f'its arrays beside the parameters and optimizer state hold {other:,} bytes, more '
                f'than this job\'s {mine:,} times {size} ranks and {OTHER_SLACK:,} to spare')
    return None


def open_own(place, name, what, limit=None, trusted=False):
    """A descriptor for reading a checkpoint's file ``name`` of the held directory: this
    user's regular file (``shared_paths.open_file``; a link even in a trusted directory, and
    another user's file even there: ``not_yours``, an UnsafePath)."""
    fd = place.open_file(name, what, limit, trusted)
    wrong = not_yours(place, name, os.fstat(fd))
    if wrong:
        os.close(fd)
        raise UnsafePath('chainermn_torus: ' + wrong)
    return fd


def open_rank_file(place, name, trusted=False):
    """A descriptor for reading rank file ``name`` of the held directory (``open_own``)."""
    return open_own(place, name, 'the rank file', None, trusted)


def verify_file(place, manifest, name, rank, trusted=False, expected=None, size=1):
    """What is wrong with rank file ``name`` as ``rank`` sees it, or None: present, this
    user's regular file (``open_rank_file``), of the size and CRC-32 the manifest recorded,
    its arrays within bounds (``array_headers``: ``expected`` and ``size`` this job's state
    and rank count), readable without pickle and holding no NaN/Inf."""
    path = os.path.join(place.path, name)
    check = manifest.get('checks', {}).get(name)
    if check is None:
        return f'{path} has no size and CRC-32 in the manifest, so it cannot be checked'
    try:
        fd = open_rank_file(place, name, trusted)
    except FileNotFoundError:
        return f'rank {rank} cannot see {path}'
    except UnsafePath as e:
        return _unsafe(e)
    except OSError as e:
        return f'rank {rank} cannot read {path} ({e.strerror or e})'
    with os.fdopen(fd, 'rb') as f:
        size_there = os.fstat(fd).st_size
        if size_there != check['bytes']:
            return '{} has {} bytes, the manifest says {} (truncated or replaced)'.format(
                path, size_there, check['bytes'])
        if crc32(f) != check['crc32']:
            return f'{path} does not match its CRC-32 in the manifest (corrupted)'
        f.seek(0)
        wrong = array_headers(f, expected, size)
        if wrong:
            return f'{path}: {wrong}'
        # Written before checkpoints refused diverged states: loading NaN/Inf would only
        # fail again one step later.
        f.seek(0)
        try:
            with RankFile(f, path) as z:
                stored = {k: z[k] for k in z.files}  # each read (decompressed) once
            held_at = stored.get(ITERATION_KEY)
            if held_at is not None and held_at.shape == () and \
                    int(held_at) != manifest['iteration']:
                return '{} holds the trainer at iteration {}, and its manifest says {} (a ' \
                    'checkpoint renamed or planted)'.format(path, int(held_at),
                                                            manifest['iteration'])
            count, first = finite.count_in({k: a for k, a in stored.items()
                                            if a.dtype != object})
        except CheckpointError as e:  # an object array: never unpickled
            return str(e).replace('chainermn_torus: ', '', 1)
        except Exception as e:  # CRC matched, so unreadable means not an npz at all
            return f'{path} cannot be read as a checkpoint ({type(e).__name__}: {e})'
    if count:
        return f'{path} holds {count} NaN/Inf value(s), the first in {first} (a diverged state)'
    return None


def replica_digest(f, skip=frozenset()):
    """(digest of every replica array but those named in ``skip``, {name: crc}) of one
    stored rank file (an open binary file, or a path)."""
    crcs = {}
    with RankFile(f) as z:
        for k in sorted(z.files):
            if k.startswith(REPLICA_PREFIXES) and k not in skip:
                a = numpy.ascontiguousarray(z[k])
                crcs[k] = zlib.crc32(a.tobytes(),
                                     zlib.crc32(str((a.dtype.str, a.shape)).encode()))
    return zlib.crc32(json.dumps(crcs, sort_keys=True).encode()), crcs
