"""The one rule for every path a job reads, or enters, where another user can reach.

A tune file in a shared folder, a checkpoint directory and its files, a network file, the
names a job makes in /dev/shm and /tmp: each may be something another user of the node put
there. The probe of 2026-11 found a link to /dev/zero read whole until the OOM killer came,
a FIFO that blocked a rank at ``open`` forever, another user's well-formed tune file used
as if measured (each all-reduce 97 times slower), a checkpoint directory that was a link to
the user's other experiment, and a /dev/shm name created first by someone else that stopped
every job with a watchdog. So every such path is taken here, and only here, as:

* **not followed**: opened with ``O_NOFOLLOW`` (a directory with ``O_DIRECTORY`` too), so a
  link is refused, never read through;
* **of its kind**: a file must be a regular file (a FIFO, a device or a socket is refused
  before anything waits on it: opened ``O_NONBLOCK``), a directory a directory;
* **yours**: owned by this user or root, with one link (a hard link to a file of yours
  elsewhere is refused too), and writable by nobody else, unless the user said the place
  is trusted (``trusted=True``: the owner and the mode are not judged, a link still is);
* **sized before it is read**: a file larger than its bound is refused from ``fstat``, and
  no more than the bound is ever read (it may grow meanwhile).

A refusal is one line (``errors.UnsafePath``) that names the path, what is there and whose
it is, and what to do. Names a job makes in a shared directory come from ``create_unique``:
an unpredictable token and ``O_EXCL``, and a name that is taken is passed over for another,
never a reason to stop. Creating a file under a name that is predictable is
``runtime.files.held``'s (``Held.create``); it says what it found with ``what_is_there`` too.
"""
import errno
import json
import os
import pwd
import secrets
import stat

from chainermn_torus.errors import UnsafePath

__all__ = ['owner_name', 'what_is_there', 'yours', 'problem', 'refusal', 'open_file', 'read_bytes',
           'read_opened', 'read_json', 'create_unique', 'token']

_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | _CLOEXEC
_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
TRIES = 16  # names tried by create_unique: 16 taken 48-bit tokens in a row is an attack

_KINDS = ((stat.S_ISLNK, 'a symbolic link'), (stat.S_ISREG, 'a file'),
          (stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'),
          (stat.S_ISSOCK, 'a socket'), (stat.S_ISCHR, 'a character device'),
          (stat.S_ISBLK, 'a block device'))


def owner_name(uid):
    """``uid`` as a user name where the system knows it."""
    try:
        return f'{pwd.getpwuid(uid).pw_name} (uid {uid})'
    except KeyError:
        return f'uid {uid}'


def kind_of(st):
    return next((name for test, name in _KINDS if test(st.st_mode)), 'something else')


def what_is_there(st):
    """'a FIFO owned by alice (uid 1001)': what a refusal says was found."""
    return f'{kind_of(st)} owned by {owner_name(st.st_uid)}'


def yours(uid):
    """Whether ``uid`` is this user's or root's: the owners a path may have."""
    return uid in (os.getuid(), 0)


def problem(st, limit=None, trusted=False, directory=False, shared=False):
    """Why what ``st`` (an ``lstat`` or ``fstat``) describes may not be used, or None.

    ``directory``: it must be a directory, else a regular file with one link. ``shared``
    (directories only): group or world write is allowed where the sticky bit is set (a
    shared folder such as /tmp, where nobody can remove or replace another's files).
    ``trusted``: owner and mode are not judged. ``limit``: the most bytes a file may hold.
    """
    want = stat.S_ISDIR if directory else stat.S_ISREG
    if not want(st.st_mode):
        return 'it is {}, not {}'.format(what_is_there(st),
                                         'a directory' if directory else 'a regular file')
    if not trusted:
        if not yours(st.st_uid):
            return f'it is {what_is_there(st)}'
        sticky = directory and shared and st.st_mode & stat.S_ISVTX
        if st.st_mode & 0o022 and not sticky:
            return 'it can be written by {} (mode {:o}, {})'.format(
                'everyone' if st.st_mode & 0o002 else 'its group', st.st_mode & 0o7777,
                what_is_there(st))
    if not directory and st.st_nlink != 1:
        return f'it has {st.st_nlink} hard links (another name of one of your files)'
    if limit is not None and not directory and st.st_size > limit:
        return f'it holds {st.st_size:,} bytes, more than the {limit:,} such a file may'
    return None


def refusal(path, what, why, fix=None, trust_helps=False, done='nothing was read from it'):
    """The one line for ``path`` (``what`` it was to be) and ``why``; ``trust_helps`` (an
    attribute of the error too): only its owner or mode was refused, which a place the user
    trusts allows; ``done``: what the refusal spared."""
    error = UnsafePath('chainermn_torus: refusing {} {}: {}; {}. '
                       '{}'.format(what, path, why, done,
                                   fix or 'Remove it, or choose a directory only you can write.'))
    error.trust_helps = trust_helps
    return error


def _opened(path, flags, dir_fd=None):
    """``os.open`` (relative to ``dir_fd`` where given) with a link named as such (ELOOP
    from O_NOFOLLOW)."""
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                st = os.lstat(path, dir_fd=dir_fd)
                target = os.readlink(path, dir_fd=dir_fd) if stat.S_ISLNK(st.st_mode) else None
            except OSError:
                raise e from None
            if target is not None:
                raise UnsafePath(f'{what_is_there(st)} to {target!r}') from None
        raise


def open_file(path, what, limit=None, trusted=False, fix=None, dir_fd=None, label=None):
    """A descriptor open for reading on ``path``, a regular file of yours of at most
    ``limit`` bytes (None: the caller sizes it from ``os.fstat``) (module doc);
    ``UnsafePath`` naming ``what`` otherwise; OSError (it is missing, unreadable) as it
    is. ``dir_fd``: ``path`` is a name inside that directory (``held.Held``), said as
    ``label``."""
    label = label or path
    try:
        fd = _opened(path, _READ, dir_fd)
    except UnsafePath as e:
        raise refusal(label, what, 'it is ' + str(e), fix) from None
    try:
        st = os.fstat(fd)
        why = problem(st, limit, trusted)
        if why:
            # Its owner or mode all that was wrong: a trusted place would allow it.
            raise refusal(label, what, why, fix,
                          not trusted and problem(st, limit, trusted=True) is None)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path, what, limit, trusted=False, fix=None, dir_fd=None, label=None):
    """The contents of ``path`` under the rule (``open_file``), never more than ``limit``
    bytes read."""
    return read_opened(open_file(path, what, limit, trusted, fix, dir_fd, label),
                       label or path, what, limit, fix)


def read_opened(fd, label, what, limit, fix=None):
    """The contents of ``fd`` (from ``open_file``, which it closes), never more than
    ``limit`` bytes read: for a caller that judges the open file further first."""
    with os.fdopen(fd, 'rb') as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise refusal(label, what, f'it grew past {limit:,} bytes while it was read',
                      fix)
    return data


def read_json(path, what, limit, trusted=False, fix=None):
    """``read_bytes`` parsed as JSON; ValueError (a ``json.JSONDecodeError`` or a
    UnicodeDecodeError) where it is not."""
    return json.loads(read_bytes(path, what, limit, trusted, fix).decode('utf-8'))


def token():
    """12 hex digits nobody can guess."""
    return secrets.token_hex(6)


def create_unique(directory, prefix, suffix='', mode=0o600):
    """(descriptor, path) of a new file ``<prefix><token><suffix>`` in ``directory``,
    open for reading and writing; a name another process holds is passed over for the next
    token. OSError when ``TRIES`` names in a row are taken."""
    for _ in range(TRIES):
        path = os.path.join(directory, f'{prefix}{token()}{suffix}')
        try:
            return os.open(path, _NEW, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f'{TRIES} names in a row of the '
                                        f'form {prefix}<token>{suffix} were '
                          f'taken in {directory}')
