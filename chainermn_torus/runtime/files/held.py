"""A shared directory judged component by component, then held: every later operation is
relative to the descriptor that was judged, never by the path's name again.

Judging a path once, by its last component, and then using it by name lets two attacks
through: a link one level up (``/tmp/shared/pl -> /tmp/v``, planted by another
user) sends the job's checkpoints into the user's other experiment, and a directory renamed
and replaced by a link after the check does the same later. The trusted tools judge the
object instead (OpenSSH's ``safe_path``, systemd's ``chase``, ``openat2``, coreutils'
``rm`` relative to the descriptors it holds), and so does ``walk``:

* from ``/``, each component is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the
  one before (by ``openat2`` with ``RESOLVE_NO_SYMLINKS`` where the kernel has it, so the
  kernel refuses any link on the way; ``os.open(..., dir_fd=)`` elsewhere);
* a symbolic link is followed only where the link itself and the directory holding it are
  owned by this user or root and writable by nobody else: a user's own
  ``~/scratch -> /lustre/$USER`` still works, a link in /tmp or in another user's
  directory never does;
* each directory on the way must be owned by this user or root and writable by nobody else,
  but where the sticky bit is set (``/tmp``: nobody can rename or replace another's
  entries there). The last one must be writable by nobody else, sticky or not, unless
  ``shared``. Where any of this fails the path is untrusted and refused in one line
  (``errors.UnsafePath``, ``trust_helps`` set) unless the user trusts it (``trusted``: the
  owner and the mode are not judged; a link is then followed where it lies in a place so
  trusted).

``walk`` returns a ``Held`` directory: its file operations (a new file, a unique name, an
atomic replace, a removal of this user's file, a bounded read, a bounded listing, a
sub-directory) take names inside it, never paths. ``Held.moved()`` says, once, when the path
no longer names the directory that was judged (it was renamed or replaced); the job goes on
in the directory it holds.
"""
import ctypes
import errno
import functools
import os
import platform
import stat
import time

from chainermn_torus.errors import UnsafePath
from chainermn_torus.runtime.files import shared_paths

__all__ = ['walk', 'Held', 'as_named', 'parent_of', 'write_refusal', 'bounded_scandir',
           'openat2_available', 'MAX_LINKS']

MAX_LINKS = 40  # links followed in one walk, as the kernel's own limit (ELOOP past it)
_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC

# openat2(2), Linux 5.6: one component at a time, the kernel refusing links and magic links
# (/proc/self/fd/N) on the way. The syscall's number is the generic table's on both
# architectures the project runs on.
_OPENAT2 = {'x86_64': 437, 'aarch64': 437}.get(platform.machine())
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS = 0x02, 0x04


class _OpenHow(ctypes.Structure):
    _fields_ = [('flags', ctypes.c_uint64), ('mode', ctypes.c_uint64),
                ('resolve', ctypes.c_uint64)]


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def openat2_available():
    """Whether this kernel has openat2 (probed once, on the working directory)."""
    if _OPENAT2 is None:
        return False
    try:
        os.close(_openat2_call(-100, '.', os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC))  # AT_FDCWD
    except (OSError, AttributeError):
        return False
    return True


def _openat2_call(dir_fd, name, flags):
    how = _OpenHow(flags, 0, _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = _libc().syscall(ctypes.c_long(_OPENAT2), ctypes.c_int(dir_fd),
                         ctypes.c_char_p(os.fsencode(name)), ctypes.byref(how),
                         ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), name)
    return fd


def _open_component(dir_fd, name, use_openat2):
    """The directory ``name`` inside ``dir_fd``, not following a link (ELOOP, or ENOTDIR
    from O_NOFOLLOW on a link, where the name is one)."""
    if use_openat2:
        return _openat2_call(dir_fd, name, _DIRECTORY)
    return os.open(name, _DIRECTORY, dir_fd=dir_fd)


def _component_problem(st, last, shared):
    """Why a directory on the way (or the last, ``last``) makes the path untrusted, or None:
    the rule of ``shared_paths.problem``, with the sticky bit enough on the way (``/tmp``:
    nobody can rename or replace another's entries there)."""
    return shared_paths.problem(st, directory=True, shared=shared or not last)


def _link_problem(link_st, holder_st):
    """Why a link may not be followed, or None: it and the directory holding it must be
    this user's or root's, and the directory writable by nobody else (a sticky /tmp is
    not enough: anyone may make a link there)."""
    if not shared_paths.yours(link_st.st_uid):
        return f'it is {shared_paths.what_is_there(link_st)}'
    if not shared_paths.yours(holder_st.st_uid):
        return f'it lies in {shared_paths.what_is_there(holder_st)}'
    if holder_st.st_mode & 0o022:
        return 'it lies in a directory {} can write (mode {:o})'.format(
            'everyone' if holder_st.st_mode & 0o002 else 'its group', holder_st.st_mode & 0o7777)
    return None


def bounded_scandir(where, max_entries, max_seconds):
    """(entries, complete): the ``os.DirEntry`` of a directory (a path, or a descriptor),
    at most ``max_entries`` of them and no longer than ``max_seconds`` spent reading;
    ``complete`` is False where a bound stopped the reading. A shared directory's listing
    costs no more than that, whatever others put there."""
    entries, deadline = [], time.monotonic() + max_seconds
    with os.scandir(where) as it:
        for entry in it:
            if len(entries) >= max_entries or time.monotonic() > deadline:
                return entries, False
            entries.append(entry)
    return entries, True


def write_refusal(path, what):
    """The one line for a file not written at ``path``, where ``what`` was found."""
    return UnsafePath(
        f'chainermn_torus: refusing to write {path}: {what}; nothing was written through it. '
        'Remove '
        'it, or choose a directory only you can write.')


def as_named(directory, what='the directory'):
    """A ``Held`` of ``directory`` opened as the name shows it (not judged: for places the
    user names, written where the user says, as a shell's ``>`` would, and for /dev/shm)."""
    return Held(os.open(directory or '.', os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC), directory,
                what)


def parent_of(path):
    """``as_named`` of the directory ``path`` names a file in."""
    return as_named(os.path.dirname(path))  # '' for a bare name: its refusals name it alone


def _refused(path, what, where, why, fix, trust_helps):
    """The one line: ``why`` ('it is ...') said of ``where``, the path itself or a
    component on its way."""
    if where != path:
        why = 'its component {} {}'.format(where, why[3:] if why.startswith('it ') else why)
    return shared_paths.refusal(
        path, what, why,
        fix or ('Choose a directory whose every component only you or root can write, or '
                'trust the place with the matching --trust option.' if trust_helps else None),
        trust_helps, 'nothing was read or written there')


def walk(path, what, trusted=False, create=False, mode=0o700, shared=False, fix=None,
         use_openat2=None):
    """The directory ``path`` judged component by component (module doc), as a ``Held``.

    ``what`` names it in a refusal ('the checkpoint directory'); ``create``: missing
    components are made (``mode``, under the umask, each judged as it is opened);
    ``shared``: the last directory may be group- or world-writable where it is sticky;
    ``trusted``: owners and modes are not judged. UnsafePath in one line where it may not be
    used; FileNotFoundError where it is missing and not to be made; NotADirectoryError
    where a component is a file."""
    use_openat2 = openat2_available() if use_openat2 is None else use_openat2
    path = os.path.abspath(path)
    pending = [c for c in path.split('/') if c]
    trail = ['']            # the components opened so far, for the refusal's 'where'
    fd = os.open('/', _DIRECTORY)
    links = 0
    try:
        st = os.fstat(fd)
        why = None if trusted else _component_problem(st, not pending, shared)
        if why:
            raise _refused(path, what, '/', why, fix, True)
        made = None          # the name just made (create): opened again, once
        while pending:
            name = pending.pop(0)
            last = not pending
            where = '/'.join(trail + [name]) or '/'
            if name == '.':
                continue
            if name == '..':     # from a link's target: the parent, judged again
                parent = os.open('..', _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = parent
                trail = trail[:-1] or ['']
                why = None if trusted else _component_problem(os.fstat(fd), last, shared)
                if why:
                    raise _refused(path, what, '/'.join(trail) or '/', why, fix, True)
                continue
            try:
                child = _open_component(fd, name, use_openat2)
            except FileNotFoundError:
                if not create or made == where:
                    raise FileNotFoundError(errno.ENOENT, 'no such directory', where) from None
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile (another rank): opened and judged as any other
                made = where
                pending.insert(0, name)
                continue
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                link_st = os.lstat(name, dir_fd=fd)
                if not stat.S_ISLNK(link_st.st_mode):
                    raise NotADirectoryError(
                        errno.ENOTDIR,
                        f'it is {shared_paths.what_is_there(link_st)}, not a directory',
                        where) from None
                target = os.readlink(name, dir_fd=fd)
                why = None if trusted else _link_problem(link_st, os.fstat(fd))
                if why:
                    raise _refused(path, what, where, 'it is a symbolic link '
                                                      f'to {target!r}: {why}', fix, True) from None
                links += 1
                if links > MAX_LINKS:
                    raise _refused(path, what, where, f'it leads through more than {MAX_LINKS} '
                                                      'symbolic '
                                   'links', fix, False) from None
                pending[:0] = [c for c in target.split('/') if c]
                if target.startswith('/'):
                    os.close(fd)
                    fd = os.open('/', _DIRECTORY)
                    trail = ['']
                continue
            os.close(fd)
            fd = child
            trail.append(name)
            why = None if trusted else _component_problem(os.fstat(fd), last, shared)
            if why:
                raise _refused(path, what, where, why, fix, True)
        return Held(fd, path, what)
    except BaseException:
        os.close(fd)
        raise


class Held:
    """An open, judged directory (``walk``): operations take names inside it."""

    def __init__(self, fd, path, what):
        self.fd, self.path, self.what = fd, path, what
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self._moved_said = False

    def __repr__(self):
        return f'Held({self.path!r}, fd {self.fd})'

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def moved(self):
        """The line to say, once, where ``path`` no longer names this directory (renamed,
        replaced, removed); None otherwise or when it was said."""
        try:
            # Followed, as the name is: what a user's own link (allowed by the walk) shows
            # now is compared, not the link itself. Only compared, never opened.
            st = os.stat(self.path)
            here = (st.st_dev, st.st_ino)
        except OSError:
            here = None
        if here == self.identity or self._moved_said:
            return None
        self._moved_said = True
        return ('chainermn_torus: {} {} was {} after the job judged it; the job goes on '
                'writing into the directory it judged and holds open, not into what the '
                'name shows now.'.format(self.what, self.path,
                                         'removed' if here is None else 'renamed or replaced'))

    # -- files --------------------------------------------------------------------------
    def _check_name(self, name):
        if not name or '/' in name or name in ('.', '..'):
            raise ValueError(f'a name inside {self.path} was expected, got {name!r}')
        return name

    def lstat(self, name):
        return os.lstat(self._check_name(name), dir_fd=self.fd)

    def create(self, name, perm=0o600, replace_own=False):
        """A new file ``name`` (a descriptor open for writing), never through what is there:
        FileExistsError where the name is taken. ``replace_own``: a name this user's plain
        file holds (a leftover of an earlier process with the same pid) is removed first;
        anything else there (a link, a FIFO, another user's file) is refused in one line,
        ``UnsafePath``, and nothing is written."""
        self._check_name(name)
        for _ in range(2):
            try:
                return os.open(name, _NEW, perm, dir_fd=self.fd)
            except FileExistsError:
                if not replace_own:
                    raise
            try:
                st = self.lstat(name)
            except FileNotFoundError:
                continue  # gone meanwhile: try again
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_nlink != 1:
                raise write_refusal(os.path.join(self.path, name),
                                    f'{shared_paths.what_is_there(st)} is already there')
            os.unlink(name, dir_fd=self.fd)  # our own leftover
        raise write_refusal(os.path.join(self.path, name), 'it came back after it was removed '
                            '(another process writes there)')

    def open_append(self, name):
        """A descriptor appending to ``name``, opened without following a link and only
        where it is this user's regular file with one link (``UnsafePath`` otherwise)."""
        try:
            fd = os.open(self._check_name(name), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW |
                         os.O_NONBLOCK | _CLOEXEC, dir_fd=self.fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENXIO):
                raise
            there = shared_paths.what_is_there(self.lstat(name))
            raise write_refusal(os.path.join(self.path, name),
                                f'{there} is already there') from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_nlink != 1:
            os.close(fd)
            raise write_refusal(os.path.join(self.path, name), f'{shared_paths.what_is_there(st)} '
                                                               'is already there')
        os.set_blocking(fd, True)
        return fd

    def create_unique(self, prefix, suffix='', perm=0o600):
        """(descriptor, name) of a new file ``<prefix><token><suffix>``; a taken name is
        passed over (``shared_paths.create_unique``'s rule)."""
        for _ in range(shared_paths.TRIES):
            name = f'{prefix}{shared_paths.token()}{suffix}'
            try:
                return self.create(name, perm), name
            except FileExistsError:
                continue
        raise FileExistsError(errno.EEXIST, f'{shared_paths.TRIES} names in a row of the '
                                            f'form {prefix}<token>{suffix} were '
                              f'taken in {self.path}')

    def replace(self, src, dst):
        """Rename ``src`` over ``dst``, both in this directory (atomic; a link at ``dst``
        is replaced, not followed)."""
        os.replace(self._check_name(src), self._check_name(dst), src_dir_fd=self.fd,
                   dst_dir_fd=self.fd)

    def remove_own(self, name):
        """Remove ``name`` where it is this user's regular file; True where it was. A link,
        a directory or another user's file is left alone."""
        try:
            st = self.lstat(name)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return False
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def probe(self, prefix='.write-test.'):
        """Write and remove a file here: the directory can be written. A name nobody can
        guess, made new (a link planted under a predictable probe name once had the probe
        truncate the file it pointed to)."""
        fd, name = self.create_unique(prefix)
        try:
            os.write(fd, b'ok')
        finally:
            os.close(fd)
            self.remove_own(name)

    def remove_own_directory(self, name):
        """Remove the directory ``name`` (not followed where it is a link) with this user's
        regular files in it; FileNotFoundError where it is not there, OSError where
        anything else is in it (left as it is)."""
        with self.subdirectory(name) as inner:
            for entry in os.listdir(inner.fd):
                if not inner.remove_own(entry):
                    raise OSError(errno.ENOTEMPTY, f'it holds {entry!r}, not a file of this '
                                  "user's", os.path.join(inner.path, entry))
        os.rmdir(name, dir_fd=self.fd)

    def write_atomic(self, name, write, mode='wb', perm=0o600, before_rename=None, tmp=None):
        """``write(f)`` into ``name`` so that no reader ever sees half of it: into a new
        temporary in this directory (``tmp``, where this user's leftover of that name is
        replaced, else a unique name), flushed to disk, renamed over ``name`` (a link there
        is replaced, not followed), the rename flushed too. On any failure (ENOSPC, an
        exception in ``write``, a signal) the temporary is removed and the error raised;
        ``before_rename()`` runs once the data is on disk (a fault-injection point)."""
        self._check_name(name)
        made = tmp
        try:
            # Made inside the try: a signal right after the file is made left it behind
            # (the fault matrix's sigint row, once).
            if tmp is None:
                fd, made = self.create_unique(f'.{name}.', '.tmp', perm)
            else:
                fd = self.create(tmp, perm, replace_own=True)
            with os.fdopen(fd, mode) as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if before_rename is not None:
                before_rename()
            self.replace(made, name)
        except UnsafePath:
            raise  # not ours: nothing to remove
        except BaseException:
            if made is not None:
                self.remove_own(made)
            raise
        try:
            os.fsync(self.fd)  # the rename itself on disk
        except OSError:
            pass

    def open_file(self, name, what, limit=None, trusted=False, fix=None):
        """A descriptor for reading ``name`` under the rule of ``shared_paths.open_file``
        (a regular file of this user's, or any where ``trusted``, of at most ``limit``
        bytes, no link followed, no FIFO waited on), relative to this directory."""
        return shared_paths.open_file(self._check_name(name), what, limit, trusted, fix,
                                      self.fd, os.path.join(self.path, name))

    def read_bytes(self, name, what, limit, trusted=False, fix=None):
        """The contents of ``name`` (``open_file``), never more than ``limit`` bytes read."""
        return shared_paths.read_bytes(self._check_name(name), what, limit, trusted, fix,
                                       self.fd, os.path.join(self.path, name))

    def listing(self, max_entries, max_seconds):
        """(names, complete): ``bounded_scandir`` of this directory, by name."""
        entries, complete = bounded_scandir(self.fd, max_entries, max_seconds)
        return [e.name for e in entries], complete

    def subdirectory(self, name, what=None, trusted=False, create=False, mode=0o700):
        """The directory ``name`` inside this one, not followed where it is a link, judged
        as the last component of a walk is; a ``Held`` of its own."""
        self._check_name(name)
        try:
            fd = os.open(name, _DIRECTORY, dir_fd=self.fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, mode, dir_fd=self.fd)
            except FileExistsError:
                pass
            fd = os.open(name, _DIRECTORY, dir_fd=self.fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            st = self.lstat(name)
            raise _refused(os.path.join(self.path, name), what or self.what,
                           os.path.join(self.path, name),
                           f'it is {shared_paths.what_is_there(st)}', None,
                           False) from None
        try:
            st = os.fstat(fd)
            why = None if trusted else _component_problem(st, True, False)
            if why:
                raise _refused(os.path.join(self.path, name), what or self.what,
                               os.path.join(self.path, name), why, None, True)
        except BaseException:
            os.close(fd)
            raise
        return Held(fd, os.path.join(self.path, name), what or self.what)
