"""The files a job writes itself into its output directory (``--out``, a trainer's ``out``):
the directory walked and held, its predictable names judged at start, and every file made
new and renamed over its name.

In a shared ``--out`` another user could put, before the job ends, a FIFO at
``summary.json`` (the finished example then waited on it, with no line, until killed), a
link at ``summary.json`` or at Chainer's ``log`` (the job wrote the user's results through
it), or a FIFO at ``log`` (Chainer's ``SpecialFileError`` traceback). So:

* the directory is walked component by component and held (``runtime.files.held``: a link
  one level up planted by another user is refused, a directory swapped later is not
  followed); it may be sticky and writable by all, as /tmp is, but no component on the way
  may be another user's or writable by others without the sticky bit, unless the user
  trusts it (``--trust-out-dir``);
* ``refuse_foreign``: at start, on every rank, a name the job will write that holds
  anything but this user's own regular file (another user's file, a link, a FIFO, a
  directory) is refused in one line naming what is there and whose it is, before training;
* ``write``: each file is made by ``O_CREAT | O_EXCL`` as a temporary of an unguessable name
  in the held directory, flushed, and renamed over its name (a link or FIFO there is
  replaced, never followed or opened); no file's mode is changed;
* ``hold_reports``: Chainer's ``LogReport`` and snapshot extensions write the same way
  (their class or writer patched, listed in ``patches.applied('outputs')``), for the
  examples and for any script under the launcher.
"""
import json
import os
import stat

from chainer.training import extensions

from chainermn_torus.errors import UnsafePath
from chainermn_torus.runtime import agree
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.files import held, shared_paths

__all__ = ['WHAT', 'hold', 'hold_everywhere', 'refuse_foreign', 'write', 'hold_reports']

WHAT = 'the output directory'
_TRUST = ('Choose an output directory whose every component only you or root can write '
          '(a sticky one such as /tmp may be the last), or, if you trust whoever else can, '
          'say so with --trust-out-dir (CHAINERMN_TORUS_TRUST_OUT_DIR=1).')


def hold(directory, trusted=False, create=True):
    """The output ``directory`` walked, judged and held (made, under the umask, where
    missing); ``trusted``: the entry point's ``trust_out_dir`` setting, handed down."""
    return held.walk(directory, WHAT, trusted=bool(trusted), create=create, mode=0o777,
                     shared=True, fix=_TRUST)


def refuse_foreign(place, names):
    """UnsafePath, one line, for the first of ``names`` that holds anything but this
    user's own regular file with one link (which ``write`` replaces); nothing opened."""
    for name in names:
        try:
            st = place.lstat(name)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_nlink == 1:
            continue
        raise held.write_refusal(os.path.join(place.path, name),
                                 f'{shared_paths.what_is_there(st)} is already there')


def hold_everywhere(comm, directory, names=(), trusted=False):
    """Collective: ``hold`` and ``refuse_foreign`` on every rank (a node-local ``--out`` is
    each node's), the Held returned; every rank raises the first rank's refusal
    (UnsafePath) or OSError where any rank cannot."""
    place, problem = None, None
    try:
        place = hold(directory, trusted)
        refuse_foreign(place, names)
        place.probe(f'.write-test.rank{comm.rank}.')
    except OSError as e:  # UnsafePath is one too
        problem = (isinstance(e, UnsafePath), str(e).replace('chainermn_torus: ', '', 1)
                   if isinstance(e, UnsafePath) else f'{type(e).__name__}: {e}')
    bad = agree.problems(comm.mpi_comm, problem)
    if not bad:
        return place
    if place is not None:
        place.close()
    (_, (unsafe, text)), ranks = bad[0], agree.ranks_text(bad)
    if unsafe:
        raise UnsafePath(f'chainermn_torus: {text} (rank(s) {ranks})')
    raise OSError(f'chainermn_torus: cannot write results to {directory!r} on '
                  f'rank(s) {ranks}: {text}. Choose a '
                  'directory every rank can write (a shared file system, or a local disk per '
                  'node).')


def write(place, name, writer, mode='wb'):
    """``writer(f)`` into ``name`` of the held output directory: a new temporary, renamed
    over the name (module doc)."""
    place.write_atomic(name, writer, mode=mode, perm=0o666)


def _held_log_report(cls):
    """``cls`` (a LogReport class) writing its log through ``write``."""

    class HeldLogReport(cls):
        def __call__(self, trainer):
            name, before = self._log_name, len(self._log)
            self._log_name = None  # Chainer's own write (a temporary directory, a move)
            try:
                cls.__call__(self, trainer)
            finally:
                self._log_name = name
            if name is not None and len(self._log) > before:
                log = list(self._log)
                write(self.chainermn_torus_out, name.format(**log[-1]),
                      lambda f: json.dump(log, f, indent=4), mode='w')

    HeldLogReport.__name__ = HeldLogReport.__qualname__ = cls.__name__
    return HeldLogReport


def _held_save(writer, place):
    """A snapshot writer's ``save`` through ``write`` into ``place`` (trainer.out)."""
    def save(filename, outdir, target, savefun, **kwds):
        if os.path.abspath(outdir) != place.path:  # not the trainer's: as the writer does
            return type(writer).save(writer, filename, outdir, target, savefun, **kwds)
        write(place, filename, lambda f: savefun(f, target))
        writer._post_save()
    return save


def hold_reports(extension, place):
    """``extension`` (as given to ``Trainer.extend``) writing through ``write`` into the
    held ``place``, where it is a LogReport or a snapshot whose writer is one of Chainer's;
    the extension is returned."""
    if isinstance(extension, extensions.LogReport) and \
            not hasattr(extension, 'chainermn_torus_out'):
        extension.chainermn_torus_out = place
        patches.apply(extension, '__class__', _held_log_report(type(extension)), 'outputs',
                      'LogReport writes its log as a new file renamed over the name '
                      '(extensions.outputs)')
    writer = getattr(extension, 'writer', None)
    if type(extension).__name__ == '_Snapshot' and \
            isinstance(writer, extensions.snapshot_writers.Writer) and \
            'save' not in vars(writer):
        patches.apply(writer, 'save', _held_save(writer, place), 'outputs',
                      'a snapshot is written as a new file renamed over its name '
                      '(extensions.outputs)')
    return extension
