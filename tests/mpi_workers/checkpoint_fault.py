"""A checkpoint fault, injected by the tests (the package has no such hook):

    python checkpoint_fault.py WHEN:I SCRIPT [ARGS...]   # runs SCRIPT with the fault

or ``install('WHEN:I')`` from a worker. On rank 0 (its file is ``*.rank0.npz``):

* ``during:I``: killed (SIGKILL) once its file of checkpoint I is on disk, before the
  rename that gives it its name;
* ``after:I``: killed once checkpoint I is complete (its manifest written);
* ``full:I``: its write of checkpoint I fails as on a full disk, halfway through (4 KB of
  the file written, then ENOSPC).

The writes are replaced where the checkpoint package makes them (``writing.atomic_write``,
``MultiNodeCheckpointer.save``).
"""
import errno
import os
import runpy
import signal
import sys

from chainermn_torus.extensions.checkpoint import extension, writing

WHENS = ('during', 'after', 'full')


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def install(spec):
    when, _, iteration = spec.partition(':')
    if when not in WHENS or not iteration.isdigit():
        raise SystemExit('checkpoint_fault: {!r} is not WHEN:ITERATION with WHEN one of '
                         '{}'.format(spec, ', '.join(WHENS)))
    iteration = int(iteration)
    if when == 'after':
        save = extension.MultiNodeCheckpointer.save

        def save_then_die(self, trainer):
            save(self, trainer)
            if self.rank == 0 and trainer.updater.iteration == iteration:
                _die()
        extension.MultiNodeCheckpointer.save = save_then_die
        return
    own = f'snapshot_iter_{iteration}.rank0.npz'
    write = writing.atomic_write

    def faulty(place, name, writer, before_rename=None, **kwargs):
        if name != own:
            return write(place, name, writer, before_rename, **kwargs)
        if when == 'during':
            return write(place, name, writer, _die, **kwargs)

        def full(f):
            f.write(b'\0' * 4096)  # a partial file, as a disk that fills up leaves
            raise OSError(errno.ENOSPC, f'No space left on device (injected: {spec})')
        return write(place, name, full, before_rename, **kwargs)
    writing.atomic_write = faulty


if __name__ == '__main__':
    install(sys.argv[1])
    script = sys.argv[2]
    sys.argv = sys.argv[2:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name='__main__')
