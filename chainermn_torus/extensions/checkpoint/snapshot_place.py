"""Where one run keeps its snapshots in node memory, and how the run's later steps find them.
No other run, of another user or of the same user, job id and host, can name, list, take or
remove them (two runs of one user once shared a directory, and the first to end removed the
other's recovery point).

On each node the run's snapshots live in

    <parent>/run-<token>-<host>

* ``token``: 128 random bits that only the run knows. Under ``chainermn-torus elastic`` it
  is derived from the supervisor's run id (``from_run``). That id reaches the steps and the
  node probes only through their environment, which only the user and root can read. It is
  never on a command line, which every user sees in ``ps``. Without a supervisor, rank 0
  makes a new token at a run's first start and writes it to ``TOKEN_FILE`` in the job's
  output directory (0600, replaced atomically). A restart with ``--restore-from-memory``
  reads it from there.
* ``parent``: ``--memory-dir`` where the user gives one (``{host}`` and ``{node}`` filled
  in), judged as a checkpoint directory is and made 0700. Otherwise it is the per-user
  ``/dev/shm/cmtorus-snapshots-<uid>``, made 0700, so that no other user can list the runs'
  names in it. That name can be taken first by another user (a directory, a link or a FIFO
  of theirs). Then the parent is ``/dev/shm/cmtorus-snapshots-<uid>-<tag>`` instead, with
  ``tag`` derived from the token: nobody can make it before the run exists, and every node
  and every later step finds the same one. This is said in one line.
* The run's directory is made with ``mkdir``, which never takes a name that exists. At a
  run's first step, a name that exists is refused, whoever owns it. A later step uses the
  one that is there when it is this user's and writable by nobody else.

``rotation``, ``sweep`` and removal work only inside the run's own directory, so what a run
removes is never another run's.
"""
import hashlib
import os
import re
import secrets
import stat

from chainermn_torus.errors import UnsafePath
from chainermn_torus.extensions import outputs
from chainermn_torus.extensions.checkpoint import files
from chainermn_torus.runtime.files import devshm, held

__all__ = ['TOKEN_FILE', 'new_token', 'from_run', 'default_parent', 'fallback_parent',
           'run_name', 'RUN_DIR', 'open_run', 'read_token', 'write_token', 'candidates',
           'is_token', 'kept', 'remove_run']

TOKEN_FILE = '.chainermn-torus-snapshots'
RUN_DIR = re.compile(r'^run-(?P<token>[0-9a-f]{32})-(?P<host>[A-Za-z0-9._-]+)$')
_TOKEN = re.compile(r'^[0-9a-f]{32}$')
_FILE_LIMIT = 256  # the token file holds one line: the token


def new_token():
    return secrets.token_hex(16)


def is_token(text):
    return bool(_TOKEN.match(text or ''))


def from_run(run_id):
    """The token of the supervisor's run ``run_id``. It is derived rather than the id
    itself: the directory's name then shows nothing that would pick out the run's processes,
    which carry the id."""
    return hashlib.sha256(b'chainermn-torus snapshots\0' + run_id.encode()).hexdigest()[:32]


def default_parent(uid=None):
    return os.path.join(devshm.SHM_DIR, f'cmtorus-snapshots-{os.getuid() if uid is None else uid}')


def fallback_parent(parent, token):
    """The parent where ``parent`` is taken by someone else: named from the token."""
    tag = hashlib.sha256(b'chainermn-torus parent\0' + token.encode()).hexdigest()[:16]
    return f'{os.path.normpath(parent)}-{tag}'


def run_name(token, host):
    return f'run-{token}-{host}'


def candidates(pattern, token, host, node=None):
    """The run directories a node may hold for ``token``: in the parent, and, for the
    default parent, in its fallback. ``pattern``: ``--memory-dir`` or None (the default)."""
    parent = (pattern or default_parent()).format(host=host, node=node)
    name = run_name(token, host)
    out = [os.path.join(parent, name)]
    if pattern is None:
        out.append(os.path.join(fallback_parent(parent, token), name))
    return out


def _hold_parent(parent, fallback):
    """(Held parent, the line that says a fallback was taken or None)."""
    try:
        return files.hold(parent, create=True), None
    except (UnsafePath, NotADirectoryError) as e:
        if fallback is None:
            raise
        why = str(e).replace('chainermn_torus: ', '', 1)
    # The fallback's name is new with the run: made here, or (a later step, another node
    # sharing this /dev/shm) used where it is this user's own.
    up, name = os.path.split(fallback)
    with held.walk(up, 'the shared-memory directory', shared=True) as shm:
        try:
            os.mkdir(name, 0o700, dir_fd=shm.fd)
        except FileExistsError:
            pass
        place = shm.subdirectory(name, 'the snapshots\' directory')
    return place, (f'{parent} cannot hold the snapshots ({why}); this run keeps them in {fallback} '
                   'instead')


def open_run(pattern, token, host, node=None, first=True, create=True):
    """(Held run directory, its path, a note or None): the run's directory on this node.

    ``first``: the run's first step. The directory is then made new, and one that exists is
    refused (``UnsafePath``). ``create=False`` (a node's other ranks, after its first rank
    made it): only opened. Made or opened, it must be this user's, 0700 (``files.hold``'s
    rule for its last component)."""
    paths = candidates(pattern, token, host, node)
    if not create:
        problems = []
        for path in paths:
            try:
                up, name = os.path.split(path)
                with files.hold(up) as place:
                    return place.subdirectory(name), path, None
            except OSError as e:
                problems.append(e)
        raise problems[0]
    parent, name = os.path.split(paths[0])
    place, note = _hold_parent(parent, os.path.dirname(paths[1]) if paths[1:] else None)
    with place:
        try:
            os.mkdir(name, 0o700, dir_fd=place.fd)
        except FileExistsError:
            if first:
                st = place.lstat(name)
                raise UnsafePath(f'chainermn_torus: {os.path.join(place.path, name)} was already '
                                 f'there ({_described(st)}) when this run '
                                 'started: a run\'s snapshot directory is made new and never '
                                 'shared; start again (a new run gets a new token) or give '
                                 'another --memory-dir')
        return place.subdirectory(name), os.path.join(place.path, name), note


def _described(st):
    owner = 'this user\'s' if st.st_uid == os.getuid() else f'uid {st.st_uid}\'s'
    return '{} {}'.format(owner, 'directory' if stat.S_ISDIR(st.st_mode)
                          else 'file or link')


def write_token(out_dir, token, trusted=False):
    """Keep ``token`` in the output directory (0600, atomically): a restart reads it."""
    with outputs.hold(out_dir, trusted) as place:
        outputs.refuse_foreign(place, [TOKEN_FILE])
        place.write_atomic(TOKEN_FILE, lambda f: f.write((token + '\n').encode()))


def read_token(out_dir, trusted=False):
    """The token kept in the output directory, or None where there is none. A file that is
    not this user's own regular file, or holds no token, is refused (UnsafePath, ValueError)."""
    try:
        place = outputs.hold(out_dir, trusted, create=False)
    except FileNotFoundError:
        return None
    with place:
        try:
            data = place.read_bytes(TOKEN_FILE, 'the snapshots\' token file', _FILE_LIMIT)
        except FileNotFoundError:
            return None
    text = data.decode('ascii', 'replace').strip()
    if not is_token(text):
        raise ValueError(f'{os.path.join(out_dir, TOKEN_FILE)} holds no snapshot token (32 hex '
                         f'digits), got {text[:40]!r}')
    return text


def kept(shm_dir=None):
    """[(path, bytes, in use)] of this user's run directories under the default parent and
    its fallbacks in ``shm_dir`` (default /dev/shm): what ended runs left in RAM, and the
    runs still going (a directory a process holds open)."""
    shm_dir = shm_dir or devshm.SHM_DIR
    base = os.path.basename(default_parent())
    found = []
    with held.walk(shm_dir, 'the shared-memory directory', shared=True) as shm:
        for parent in sorted(os.listdir(shm.fd)):
            if parent != base and not re.match(re.escape(base) + r'-[0-9a-f]{16}$', parent):
                continue
            try:
                st = shm.lstat(parent)
                if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                    continue  # another user's name: not ours to look into
                with shm.subdirectory(parent) as up:
                    for name in sorted(os.listdir(up.fd)):
                        if RUN_DIR.match(name):
                            found.append((os.path.join(up.path, name),
                                          _tree_bytes(up, name)))
            except OSError:
                continue
    busy = devshm.in_use([p for p, _ in found])
    return [(p, size, p in busy) for p, size in found]


def _tree_bytes(place, name):
    total = 0
    with place.subdirectory(name) as run:
        for gen in os.listdir(run.fd):
            try:
                with run.subdirectory(gen) as g:
                    total += sum(g.lstat(f).st_size for f in os.listdir(g.fd))
            except OSError:
                continue
    return total


def remove_run(path):
    """Remove the run directory ``path`` (its generations, then it): this user's files
    only; how many generations went. FileNotFoundError where it or its parent is not
    there."""
    up, name = os.path.split(os.path.normpath(path))
    with files.hold(up) as parent:
        with parent.subdirectory(name) as run:
            gens = os.listdir(run.fd)
            for gen in gens:
                files.remove_tree(run, gen)
        os.rmdir(name, dir_fd=parent.fd)
    return len(gens)
