"""Multi-node checkpoints: every rank's trainer state, written atomically, resumable.

    checkpointer = chainermn_torus.extensions.checkpoint.MultiNodeCheckpointer(comm, 'results/ckpt')
    checkpointer.maybe_resume(trainer)          # or resume(trainer) to insist
    trainer.extend(checkpointer, trigger=(1000, 'iteration'))

At each trigger every rank writes its whole trainer (model, optimizer state including the
multi-node wrapper's double-buffering gradients, updater and iterator position, and its
numpy random state, which Chainer's shuffling and dropout draw from) to
``snapshot_iter_<I>.rank<R>.npz``: into a temporary file, flushed to disk, then renamed, so a
file with that name is always complete. After every rank has finished, rank 0 writes
``latest.json`` the same way; it names the iteration, the rank count and the model's arrays.
A crash at any moment therefore leaves either the previous checkpoint or the new one as
``latest``, never a half-written one. Older checkpoints beyond ``keep`` are removed after
the new ``latest`` is in place.

Resuming checks, on every rank and with the same message everywhere: the directory and the
manifest exist, the rank count matches, every file is there, and the model has the same
arrays (the first difference is named). With the same seed and deterministic communicators
a killed-and-resumed run ends with the same parameters, bit for bit, as an uninterrupted one
(tested).
"""
import json
import os
import time

import chainer
import numpy

from chainermn_torus import config

__all__ = ['MultiNodeCheckpointer', 'CheckpointError', 'check_writable', 'add_arguments',
           'check_arguments', 'attach', 'check_output']

MANIFEST = 'latest.json'


class CheckpointError(RuntimeError):
    pass


def check_writable(comm, directory, what='results', error=OSError):
    """Create ``directory`` and write a probe file on every rank; raise on every rank if any
    rank cannot (collective). For a job's output, so it fails at start, not at the end."""
    problem = None
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, '.write-test.rank{}'.format(comm.rank))
        with open(probe, 'w') as f:
            f.write('ok')
        os.remove(probe)
    except OSError as e:
        problem = '{}: {}'.format(type(e).__name__, e)
    problems = comm.mpi_comm.allgather(problem)
    bad = [(r, p) for r, p in enumerate(problems) if p]
    if bad:
        raise error(
            'chainermn_torus: cannot write {} to {!r} on rank(s) {}: {}. Choose a directory '
            'every rank can write (a shared file system, or a local disk per node).'.format(
                what, directory, ', '.join(str(r) for r, _ in bad), bad[0][1]))


def _layout(model):
    return [[name, list(p.data.shape), p.data.dtype.str]
            for name, p in sorted(model.namedparams()) if p.data is not None]


# Fault injection for the resume tests (and for trying a site's file system):
# CHAINERMN_TORUS_CHECKPOINT_FAULT="during:I" kills rank 0 (SIGKILL) after its file for
# iteration I is written but before it is renamed; "after:I" once checkpoint I is complete.
def _fault(when, iteration, rank):
    spec = config.env('checkpoint_fault')[0]
    if rank == 0 and spec == '{}:{}'.format(when, iteration):
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def _atomic_write(path, write, before_rename=None):
    tmp = '{}.tmp{}'.format(path, os.getpid())
    with open(tmp, 'wb') as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    if before_rename is not None:
        before_rename()
    os.replace(tmp, path)


class MultiNodeCheckpointer(chainer.training.Extension):

    trigger = (1, 'epoch')
    priority = chainer.training.PRIORITY_READER - 1  # after the reporters, like snapshot
    name = 'chainermn_torus_checkpoint'

    def __init__(self, comm, directory, keep=2):
        if int(keep) != keep or keep < 1:
            raise ValueError('chainermn_torus: keep must be a count >= 1, got {!r}'.format(
                keep))
        self.comm, self.directory, self.keep = comm, directory, int(keep)
        self.rank, self.size = comm.rank, comm.size
        self._check_writable()

    # --- start-up checks: fail now, not after an hour of training ---------------------------
    def _check_writable(self):
        check_writable(self.comm, self.directory, 'checkpoints', CheckpointError)

    def _file(self, iteration, rank):
        return os.path.join(self.directory,
                            'snapshot_iter_{}.rank{}.npz'.format(iteration, rank))

    # --- saving -----------------------------------------------------------------------------
    def __call__(self, trainer):
        self.save(trainer)

    def save(self, trainer):
        iteration = trainer.updater.iteration
        target = trainer.updater.get_optimizer('main').target
        ser = chainer.serializers.DictionarySerializer()
        ser.save(trainer)
        state = numpy.random.get_state()
        extra = {'chainermn_torus/numpy_rng/keys': state[1],
                 'chainermn_torus/numpy_rng/pos': numpy.asarray(state[2]),
                 'chainermn_torus/numpy_rng/has_gauss': numpy.asarray(state[3]),
                 'chainermn_torus/numpy_rng/gauss': numpy.asarray(state[4])}
        arrays = dict(ser.target, **extra)
        _atomic_write(self._file(iteration, self.rank), lambda f: numpy.savez(f, **arrays),
                      lambda: _fault('during', iteration, self.rank))
        self.comm.mpi_comm.Barrier()  # every rank's file is complete
        if self.rank == 0:
            manifest = {'iteration': iteration, 'ranks': self.size,
                        'files': [os.path.basename(self._file(iteration, r))
                                  for r in range(self.size)],
                        'model': _layout(target), 'written': time.strftime('%Y-%m-%d %H:%M:%S')}
            _atomic_write(os.path.join(self.directory, MANIFEST),
                          lambda f: f.write(json.dumps(manifest, indent=1).encode()))
        self.comm.mpi_comm.Barrier()  # latest.json names this checkpoint
        self._remove_old(iteration)
        _fault('after', iteration, self.rank)

    def _remove_old(self, newest):
        suffix = '.rank{}.npz'.format(self.rank)
        iterations = []
        for name in os.listdir(self.directory):
            if name.startswith('snapshot_iter_') and name.endswith(suffix):
                try:
                    iterations.append(int(name[len('snapshot_iter_'):-len(suffix)]))
                except ValueError:
                    continue
        for it in sorted(iterations)[:-self.keep]:
            if it != newest:
                try:
                    os.remove(self._file(it, self.rank))
                except OSError:
                    pass

    # --- resuming ---------------------------------------------------------------------------
    def maybe_resume(self, trainer):
        """Resume if the directory holds a checkpoint; returns the iteration or None."""
        manifest = os.path.join(self.directory, MANIFEST)
        exists = self.comm.mpi_comm.bcast(os.path.isfile(manifest) if self.rank == 0 else None)
        return self.resume(trainer) if exists else None

    def resume(self, trainer):
        """Load the checkpoint ``latest.json`` names (every rank its own file)."""
        target = trainer.updater.get_optimizer('main').target
        problem, manifest = None, None
        if self.rank == 0:
            problem, manifest = self._read_manifest(target)
        problem, manifest = self.comm.mpi_comm.bcast((problem, manifest))
        if problem is None:
            path = os.path.join(self.directory, manifest['files'][self.rank])
            problem = None if os.path.isfile(path) else 'rank {} cannot see {}'.format(
                self.rank, path)
            problems = [p for p in self.comm.mpi_comm.allgather(problem) if p]
            problem = problems[0] if problems else None
        if problem is not None:
            raise CheckpointError('chainermn_torus: cannot resume from {!r}: {}'.format(
                self.directory, problem))
        path = os.path.join(self.directory, manifest['files'][self.rank])
        chainer.serializers.load_npz(path, trainer)
        with numpy.load(path) as z:
            numpy.random.set_state(('MT19937', z['chainermn_torus/numpy_rng/keys'],
                                    int(z['chainermn_torus/numpy_rng/pos']),
                                    int(z['chainermn_torus/numpy_rng/has_gauss']),
                                    float(z['chainermn_torus/numpy_rng/gauss'])))
        if self.rank == 0:
            print('chainermn_torus: resumed from {} at iteration {}'.format(
                self.directory, manifest['iteration']), flush=True)
        return manifest['iteration']

    def _read_manifest(self, target):
        manifest = os.path.join(self.directory, MANIFEST)
        if not os.path.isdir(self.directory):
            return 'the directory does not exist', None
        if not os.path.isfile(manifest):
            return 'no {} in it (no checkpoint was completed there)'.format(MANIFEST), None
        try:
            with open(manifest) as f:
                data = json.load(f)
            data['iteration'], data['ranks'], data['files'], data['model']
        except (ValueError, KeyError) as e:
            return '{} is not a chainermn-torus manifest ({})'.format(manifest, e), None
        if data['ranks'] != self.size:
            return ('it was written by {} ranks and this job has {}; resume with the same '
                    'rank count'.format(data['ranks'], self.size)), None
        here = _layout(target)
        there = data['model']
        if here != there:
            for a, b in zip(there, here):
                if a != b:
                    return ('it belongs to another model: array {} has shape {} dtype {} '
                            'there, {} shape {} dtype {} here'.format(
                                a[0], tuple(a[1]), a[2], b[0], tuple(b[1]), b[2])), None
            return ('it belongs to another model: {} arrays there, {} here'.format(
                len(there), len(here))), None
        return None, data


# --- the examples' command-line options, in one place -----------------------------------------
def add_arguments(parser):
    """--checkpoint-dir, --checkpoint-interval, --resume, --auto-resume."""
    parser.add_argument('--checkpoint-dir', default=None, metavar='DIR',
                        help='write multi-node checkpoints here (atomically; see '
                             'chainermn_torus.extensions.checkpoint)')
    parser.add_argument('--checkpoint-interval', type=int, default=None, metavar='ITERATIONS',
                        help='checkpoint every this many iterations (default: every epoch)')
    parser.add_argument('--resume', action='store_true',
                        help='continue from the latest checkpoint in --checkpoint-dir')
    parser.add_argument('--auto-resume', action='store_true',
                        help='continue from it if there is one (batch jobs that are requeued)')


def check_arguments(parser, args):
    if (args.resume or args.auto_resume) and not args.checkpoint_dir:
        parser.error('--resume needs --checkpoint-dir DIR (where the checkpoints are)')
    if args.checkpoint_interval is not None and args.checkpoint_interval < 1:
        parser.error('--checkpoint-interval must be >= 1, got {}'.format(
            args.checkpoint_interval))


def attach(comm, trainer, args):
    """Extend ``trainer`` with a checkpointer and resume as the options say (collective).

    Returns the checkpointer, or None without --checkpoint-dir. Errors end every rank with a
    plain exit: every rank raises the same one, and MPI_Abort could lose the message when
    the launcher tears the job down.
    """
    if not args.checkpoint_dir:
        return None
    try:
        # Made before training so that an unwritable directory fails now, on every rank.
        checkpointer = MultiNodeCheckpointer(comm, args.checkpoint_dir)
        trainer.extend(checkpointer, trigger=(args.checkpoint_interval, 'iteration')
                       if args.checkpoint_interval else (1, 'epoch'))
        if args.resume:
            checkpointer.resume(trainer)
        elif args.auto_resume:
            checkpointer.maybe_resume(trainer)
    except CheckpointError as e:
        raise SystemExit('rank {}: {}'.format(comm.rank, e))
    return checkpointer


def check_output(comm, directory):
    """The job's output directory, checked for writing on every rank at start."""
    try:
        check_writable(comm, directory, 'results')
    except OSError as e:
        raise SystemExit('rank {}: {}'.format(comm.rank, e))
