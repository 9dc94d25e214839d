"""The tuned choice, kept per job shape so that only the first job of that shape measures.

One JSON file per (nodes x ranks per node, buffer signature) in the tuning folder
(``tune_dir``: ``$CHAINERMN_TORUS_TUNE_DIR``, else ``$XDG_CACHE_HOME/chainermn-torus/tuned``
or ``~/.cache/chainermn-torus/tuned``, on a cluster usually the shared home). The file
names the whole key inside it: ranks per node, nodes, the MPI library's version line and
the buffer signature. A file is read only when all of it matches and its choice can still
be made here; otherwise it is named with the reason and ignored, and the job measures
again and replaces it:

* foreign: written for another key (another MPI under the same name, a file copied from
  elsewhere);
* stale: another file format (``FORMAT`` changes whenever what the tuner measures or how
  does), a field of another type than this version writes (checked field by field), or a
  choice this version cannot make (a variant gone, a grid that does not fit, a segment
  size out of range);
* partial: a job of this shape ended before its tuning decided (``save_partial``); the
  next job says so and measures afresh.

The buffer signature is a digest of the gradient arrays' names, shapes and dtypes and the
dtype they travel in: another model, or the same with float16 on the wire, is another file.

A tuning folder may be shared by several users (a project's directory): each user's files
are theirs. The folder is walked component by component for each load and save (``_held``:
nothing on the way another user's, no link but this user's own) and used by descriptor. A file's
name holds its user's uid, and a file is read only under the rule for shared paths
(``runtime.files.shared_paths``): a regular file of this user, not a link, at most
``settings_table.BOUNDS['tune_file']`` bytes. Anything else under the name (another user's
file, a link, a FIFO) is ignored in one line that names its owner, and the choice is kept
under a name of this user's own (``<name>.<token>.json``), which later jobs read.
"""
import collections
import datetime
import hashlib
import json
import os
import re
import stat

from chainermn_torus import settings_table
from chainermn_torus.algorithms import variants
from chainermn_torus.errors import ConfigError, UnsafePath
from chainermn_torus.runtime.files import held, shared_paths
from chainermn_torus.tuning import candidates

__all__ = ['FORMAT', 'signature', 'Key', 'folder', 'path', 'load', 'save', 'save_partial',
           'Loaded']

Loaded = collections.namedtuple('Loaded', 'choice figures written message path')
_NOTHING = Loaded(None, None, None, None, None)
_ELSEWHERE = 'This job measures afresh and keeps its choice under a name of its own.'

FORMAT = 1


def signature(arrays, dtype):
    """Digest of [(name, shape, dtype)] and the transfer dtype (12 hex digits)."""
    text = repr([(n, tuple(shape), str(d)) for n, shape, d in arrays]) + '|' + str(dtype)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class Key(dict):
    """ranks_per_node, nodes, mpi (the library's first version line), signature, bytes."""

    def __init__(self, ranks_per_node, nodes, mpi, signature, nbytes):
        super().__init__(ranks_per_node=int(ranks_per_node), nodes=int(nodes),
                                  mpi=mpi.strip().splitlines()[0].strip() if mpi else '',
                                  signature=signature, bytes=int(nbytes))

    def file_name(self, uid=None):
        """``<nodes>x<ranks per node>-<signature>.u<uid>.json``: this user's name."""
        return '{}x{}-{}.u{}.json'.format(self['nodes'], self['ranks_per_node'],
                                          self['signature'],
                                          os.getuid() if uid is None else uid)


def folder(given=None, cache_home=None):
    """``given`` (the settings' tune_dir, resolved by the caller), else
    ``cache_home``/chainermn-torus/tuned (``$XDG_CACHE_HOME``, read by the entry point, else
    ~/.cache)."""
    if given:
        return given
    cache = cache_home or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(cache, 'chainermn-torus', 'tuned')


def _held(where, create=False):
    """The tuning folder as a ``runtime.files.held.Held``: walked component by component,
    every directory on the way this user's or root's and writable by nobody else (sticky,
    as /tmp, allowed), a link followed only where it and its directory are; the folder itself
    may be any user's (a project's shared folder: each file in it is judged as it is read)
    but not a link. Every read and write of one ``load`` or ``save`` is a name inside it.
    ``create``: missing folders are made."""
    parent, name = os.path.split(os.path.abspath(where))
    with held.walk(parent or '/', 'the tune folder', create=create, shared=True) as up:
        return up.subdirectory(name, 'the tune folder', trusted=True, create=create,
                               mode=0o777)


def check_folder(where, source='CHAINERMN_TORUS_TUNE_DIR'):
    """``where``, made if missing; a ConfigError naming ``source`` unless this user can
    write a file there (``_held``'s rule). At start: a folder that cannot hold the choices
    was found only at the job's end, after the tuning."""
    try:
        with _held(where, create=True) as place:
            place.probe()
    except OSError as e:
        raise ConfigError(
            "chainermn_torus: {} must be a folder this user can write, where the tuning's "
            "choices are remembered, got {!r} ({}); choose another, or tune='off'".format(
                source, where, str(e).replace('chainermn_torus: ', '', 1)
                if isinstance(e, UnsafePath) else e.strerror or e)) from e
    return where


def path(key, where=None):
    return os.path.join(folder(where), key.file_name())


def _fields(data):
    """Why the file's fields do not have the types this version writes, or None: checked
    one by one, so that a hand-edited or corrupted file is named, not a crash later."""
    if not isinstance(data, dict):
        return f'the file holds a {type(data).__name__}, not an object'
    want = (('key', dict), ('choice', dict), ('figures', (dict, type(None))),
            ('written', (str, type(None))))
    for name, kind in want:
        if not isinstance(data.get(name), kind):
            return f'field {name!r} is {data.get(name)!r}'
    choice = data['choice']
    if not isinstance(choice.get('algorithm'), str):
        return 'choice.algorithm is {!r}, not a name'.format(choice.get('algorithm'))
    grid = choice.get('grid')
    if grid is not None and not (isinstance(grid, list) and len(grid) == 2 and
                                 all(type(v) is int and v > 0 for v in grid)):
        return f'choice.grid is {grid!r}, not two positive integers or null'
    if type(choice.get('segment_bytes')) is not int:
        return 'choice.segment_bytes is {!r}, not an integer'.format(
            choice.get('segment_bytes'))
    figures = data['figures']
    if figures is not None and not isinstance(figures.get('chosen_ms'), (int, float)):
        return 'figures.chosen_ms is {!r}, not a number'.format(figures.get('chosen_ms'))
    return None


def _problem(data, key, size, segment_bytes=None):
    """Why a file's content cannot be used here, or None."""
    if not isinstance(data, dict) or data.get('format') != FORMAT:
        return 'stale: file format {!r}, this version reads {}'.format(
            data.get('format') if isinstance(data, dict) else None, FORMAT)
    if 'partial' in data:
        partial = data['partial'] if isinstance(data['partial'], dict) else {}
        return ('a job of this shape ended on {} after {} gradient call(s), before the '
                'tuning decided: measuring afresh'.format(partial.get('ended', '?'),
                                                         partial.get('calls', '?')))
    wrong = _fields(data)
    if wrong:
        return f'stale: {wrong}'
    theirs = data['key']
    differ = [k for k in key if theirs.get(k) != key[k]]
    if differ:
        return 'foreign: written for {}; {} differ{} from this job\'s ({})'.format(
            ', '.join(f'{k}={theirs.get(k)!r}' for k in differ),
            ', '.join(differ), '' if len(differ) > 1 else 's',
            ', '.join(f'{k}={key[k]!r}' for k in differ))
    choice = data['choice']
    name = choice['algorithm']
    if name not in variants.planned():
        return 'stale: its choice {!r} is not a variant auto chooses among now ({})'.format(
            name, ', '.join(variants.planned()))
    grid = choice.get('grid')
    if variants.get(name).grid:
        if not (grid is not None and grid[0] * grid[1] == size):
            return f'stale: grid {grid!r} does not fit {size} ranks'
    try:
        settings_table.parse('segment', choice.get('segment_bytes'), 'its segment size')
    except ValueError as e:
        return 'stale: {}'.format(str(e).replace('chainermn_torus: ', ''))
    # Sizes the tuning tries, and the job's own: a file that names another was not written
    # by a tuning (a forged 1 KiB made each all-reduce 97 times slower).
    tried = candidates.SEGMENT_CHOICES + (settings_table.SETTINGS['segment_bytes'].default,
                                          segment_bytes)
    if choice['segment_bytes'] not in tried:
        return 'stale: its segment size {} is none the tuning tries ({})'.format(
            choice['segment_bytes'], ', '.join(str(t) for t in tried if t is not None))
    return None


def _names(key, place):
    """(names, notes): this user's files for ``key``, its own name first, then those kept
    under a name of their own (``save``), the newest first; and what to say, once, of the
    rest. The listing is bounded (``settings_table.BOUNDS``: entries read, seconds spent) and a name
    that is not this user's regular file is passed over from its ``lstat``, never opened:
    20,000 planted names once took rank 0 24 s to open and refuse, and one line of 4.6
    million characters to say. Past the bound only the own name is
    read."""
    base = key.file_name()
    stem = base[:-len('.json')]
    ours = re.compile(re.escape(stem) + r'\.[0-9a-f]{12}\.json$')
    kept, passed = [], []
    entries = settings_table.BOUNDS['listing_entries']
    try:
        listing, complete = held.bounded_scandir(place.fd, entries,
                                                 settings_table.BOUNDS['listing_seconds'])
    except OSError:
        listing, complete = [], True
    for entry in listing:
        if not ours.match(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
            passed.append(entry.name)
        else:
            kept.append((-st.st_mtime, entry.name))
    notes = []
    if passed:
        notes.append('{:,} file(s) in {} named as this user\'s kept choices are not this '
                     'user\'s regular files and were passed over unread ({}{})'.format(
                         len(passed), place.path, ', '.join(sorted(passed)[:3]),
                         ', ...' if len(passed) > 3 else ''))
    if not complete:
        notes.append('{} holds more entries than the {:,} (or {:g} s) a job reads: only this '
                     'user\'s own name {} was looked at beyond them'.format(
                         place.path, entries, settings_table.BOUNDS['listing_seconds'], base))
    return [base] + [name for _, name in sorted(kept)], notes


def _read(place, name):
    """(data, None) or (None, why it is ignored); FileNotFoundError where nothing is."""
    try:
        return json.loads(place.read_bytes(
            name, 'the tune file', settings_table.BOUNDS['tune_file'],
            fix=_ELSEWHERE).decode('utf-8')), None
    except UnsafePath as e:
        return None, str(e).replace('chainermn_torus: ', '', 1)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        return None, f'{os.path.join(place.path, name)} ignored: unreadable ({e})'


def load(key, size, where=None, segment_bytes=None):
    """``Loaded``: the remembered choice, its figures, when it was written and the file;
    or choice None with the reason each file there was ignored (message None: there is no
    file). ``segment_bytes``: this job's segment size, a choice it may remember too."""
    where = folder(where)
    try:
        place = _held(where)
    except FileNotFoundError:
        return _NOTHING
    except OSError as e:  # a link on the way, not a directory: measured afresh, said
        return _NOTHING._replace(message='the tune folder {} ignored: {}'.format(
            where, str(e).replace('chainermn_torus: ', '', 1)))
    with place:
        names, listed = _names(key, place)
        notes = []
        for name in names:
            p = os.path.join(place.path, name)
            try:
                data, why = _read(place, name)
            except FileNotFoundError:
                continue
            if why is None:
                problem = _problem(data, key, size, segment_bytes)
                why = f'{p} ignored, {problem}' if problem else None
            if why:
                notes.append(why)
                continue
            choice = data['choice']
            if choice.get('grid') is not None:
                choice['grid'] = tuple(choice['grid'])
            return Loaded(choice, data.get('figures'), data.get('written'),
                          '; '.join(notes + listed) or None, p)
    return _NOTHING._replace(message='; '.join(notes + listed) or None)


def _write(key, data, where):
    """Write ``data`` (atomically) under this user's name for ``key``; where another user
    holds that name (or a link, or a FIFO sits there) and it cannot be replaced, under a
    name of this user's own beside it. Returns the path; raises OSError."""
    text = json.dumps(data, indent=1, sort_keys=True).encode()
    with _held(folder(where), create=True) as place:
        name = key.file_name()
        try:
            st = place.lstat(name)
        except FileNotFoundError:
            st = None
        if st is None or not shared_paths.problem(st, settings_table.BOUNDS['tune_file']):
            try:
                place.write_atomic(name, lambda f: f.write(text), perm=0o644)
                return os.path.join(place.path, name)
            except (PermissionError, IsADirectoryError, UnsafePath):
                pass  # a name taken meanwhile: as below
        name = '{}.{}.json'.format(name[:-len('.json')], shared_paths.token())
        place.write_atomic(name, lambda f: f.write(text), perm=0o644)
        return os.path.join(place.path, name)


def save(key, choice, figures, where=None):
    """Write the choice; returns the path, or raises OSError."""
    data = {'format': FORMAT, 'key': dict(key),
            'choice': dict(choice, grid=None if choice.get('grid') is None
                           else list(choice['grid'])),
            'figures': figures,
            'written': datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec='seconds')}
    return _write(key, data, where)


def save_partial(key, size, calls, needed, where=None):
    """Record that a job of this shape ended before its tuning decided (``calls`` made of
    about ``needed``): the next job says so and measures afresh. Never over a choice this
    job could have used (tune='again' measures beside one). Returns the path, or None
    where a usable choice stays; raises OSError."""
    if load(key, size, where).choice is not None:
        return None
    data = {'format': FORMAT, 'key': dict(key),
            'partial': {'calls': int(calls), 'needed': needed,
                        'ended': datetime.datetime.now(datetime.timezone.utc).isoformat(
                            timespec='seconds')}}
    return _write(key, data, where)
