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
manifest exist, every file is there with the size and CRC-32 the manifest recorded and holds
no NaN/Inf, and the model has the same arrays (the first difference is named).

**On another rank count** (a job that lost a node, requeued on fewer; or on more): the
stored ranks' parameters and optimizer state must be identical (data-parallel replicas;
checked, the first difference named); new rank r loads stored rank r mod P (rank 0 keeps
rank 0's reports). The iteration, the epoch and each rank's place in it (as a fraction of
its shard) are kept; the data is re-sharded by the new job's ``scatter_dataset`` and each
iterator keeps its new shard and order. By default (``batch='keep'``) the global batch is
kept: the per-rank batch becomes global / P' (a SerialIterator is resized, said; other
iterators must be started with that batch), so the learning rate and its schedule stay
right; a global batch that does not split evenly is refused with the rank counts that
work. With ``batch='scale'`` (``--resume-batch scale``) each rank keeps the batch it was
started with, the global batch changes with P', and the stored learning rate is scaled by
the large-batch rule the caller gives (``lr_rule``: the examples give Goyal et al.'s
``linear_scaling``), said with both figures. A checkpoint of another model or another
optimizer is refused, naming both. The
decision is collective: no rank loads anything, and nothing says "resumed", until every
rank's file has passed. Each checkpoint keeps its own manifest
(``manifest_iter_<I>.json``, ``latest.json`` is the newest), so when the latest is damaged
(a truncated file after a disk filled up, a lost rank file) ``maybe_resume`` - what
``--auto-resume`` calls - falls back to the newest older checkpoint that passes, and says
so; ``resume`` (``--resume``) stops and names the damage.

Temporary files (``*.tmp.<host>.<pid>``) are removed when a write fails, and those a killed
job left are swept when the next checkpointer starts on the directory (this host's whose
process is gone; other hosts' untouched for ten minutes); ``chainermn-torus clean
--checkpoint-dir DIR`` does the same by hand.

With the same seed and deterministic communicators a killed-and-resumed run ends with the
same parameters, bit for bit, as an uninterrupted one (tested).
"""
import errno
import json
import os
import re
import signal
import socket
import time
import zlib

import chainer
import numpy
from mpi4py import MPI

from chainermn_torus import config
from chainermn_torus.runtime import agree, devshm, finite, report, watchdog
from chainermn_torus.runtime.atomic import TMP_PATTERN, atomic_write
from chainermn_torus.errors import ConfigError, Refusal

__all__ = ['MultiNodeCheckpointer', 'CheckpointError', 'check_writable', 'add_arguments',
           'check_arguments', 'attach', 'check_output', 'sweep_temporary']

MANIFEST = 'latest.json'
# On another rank count: keep the global batch, or keep the per-rank batch and scale the
# learning rate (the large-batch rule the caller gives).
BATCH_CHOICES = ('keep', 'scale')
_MANIFEST_OF = 'manifest_iter_{}.json'
STALE_GRADS = '/chainermn_torus/grads/'  # double buffering's averaged, not yet applied grads
STALE_S = 600.0  # another host's temporary file untouched this long belongs to a dead job


class CheckpointError(Refusal, RuntimeError):
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
    agree.raise_everywhere(comm.mpi_comm, problem, lambda bad: error(
        'chainermn_torus: cannot write {} to {!r} on rank(s) {}: {}. Choose a directory '
        'every rank can write (a shared file system, or a local disk per node).'.format(
            what, directory, agree.ranks_text(bad), bad[0][1])))


def _layout(model):
    return [[name, list(p.data.shape), p.data.dtype.str]
            for name, p in sorted(model.namedparams()) if p.data is not None]


# Fault injection for the resume tests (and for trying a site's file system):
# CHAINERMN_TORUS_CHECKPOINT_FAULT="during:I" kills rank 0 (SIGKILL) after its file for
# iteration I is written but before it is renamed; "after:I" once checkpoint I is complete;
# "full:I" makes rank 0's write of checkpoint I fail as a full disk does, halfway through.
def _fault(when, iteration, rank):
    spec = config.env('checkpoint_fault')[0]
    if rank == 0 and spec == '{}:{}'.format(when, iteration):
        if when == 'full':
            raise OSError(errno.ENOSPC, 'No space left on device (injected: {})'.format(spec))
        os.kill(os.getpid(), signal.SIGKILL)


def _savez(arrays, iteration, rank):
    def write(f):
        if config.env('checkpoint_fault')[0] == 'full:{}'.format(iteration) and rank == 0:
            f.write(b'\0' * 4096)  # a partial file, as a disk that fills up leaves
            _fault('full', iteration, rank)
        numpy.savez(f, **arrays)
    return write


def _npz_bytes(arrays):
    """What numpy.savez will write for ``arrays``, from above: per array its data, the .npy
    header (128 bytes, more for long shapes) and the zip entry's local and central records
    with ZIP64 extras, both naming the file."""
    total = 22 + 56  # end of central directory (+ ZIP64 end records)
    for name, a in arrays.items():
        a = numpy.asarray(a)
        total += a.nbytes + 256 + 2 * (len(name) + 4) + 30 + 46 + 40
    return total


def _rounded(n, block):
    return -(-n // block) * block


def _crc32(path, chunk=1 << 22):
    crc = 0
    with open(path, 'rb') as f:
        while True:
            block = f.read(chunk)
            if not block:
                return crc
            crc = zlib.crc32(block, crc)


_MARKER = re.compile(r'^\.writing_iter_(?P<iteration>\d+)\.rank(?P<rank>\d+)\.'
                     r'(?P<host>[^.]+(?:\.[^.]+)*)\.(?P<pid>\d+)$')
_RANK_FILE = re.compile(r'^snapshot_iter_(?P<iteration>\d+)\.rank(?P<rank>\d+)\.npz$')
_MANIFEST_FILE = re.compile(r'^manifest_iter_(\d+)\.json$')


def _writer_gone(host, pid, mtime, now, here):
    """Why a writer (host, pid) is dead, or None while it may be alive."""
    if host == here:
        return None if devshm.pid_alive(pid) else 'writer {} on this host is gone'.format(pid)
    if now - mtime >= STALE_S:
        return 'writer on {} silent for {:.0f} s'.format(host, now - mtime)
    return None


def _by_writer(directory, names, pattern, now, here):
    """(name, match, why its writer is gone or None) for the names ``pattern`` matches."""
    for name in names:
        m = pattern.match(name)
        if not m:
            continue
        try:
            mtime = os.stat(os.path.join(directory, name)).st_mtime
        except FileNotFoundError:
            continue
        yield name, m, _writer_gone(m.group('host'), int(m.group('pid')), mtime, now, here)


def sweep_temporary(directory, dry_run=False, now=None, complete=None):
    """Remove what killed writers left in ``directory``: temporary files and in-progress
    markers of this host's processes that are gone, or other hosts' untouched for STALE_S;
    and complete rank files of a checkpoint that has no manifest (killed before it was
    finished: nothing can resume from them) unless their writer may still be at work.
    ``complete``: the iterations whose manifest exists, as rank 0 of a job sees them (a
    node-local directory holds no manifests); None: this directory's manifests, and rank
    files are left alone where there are none. Returns [(name, bytes, why)]."""
    if not os.path.isdir(directory):
        return []
    now = time.time() if now is None else now
    here = socket.gethostname()
    removed = []
    names = sorted(os.listdir(directory))
    writing = set()  # (iteration, rank) whose in-progress marker's writer may be alive
    doomed = []
    for name, m, why in _by_writer(directory, names, _MARKER, now, here):
        if why is None:
            writing.add((m.group('iteration'), m.group('rank')))
        else:
            doomed.append((name, why))
    if complete is None:
        complete = [int(m.group(1)) for m in map(_MANIFEST_FILE.match, names) if m]
        known = bool(complete)
    else:
        known = True
    for name in names:
        m = _RANK_FILE.match(name)
        if not known or not m or (m.group('iteration'), m.group('rank')) in writing:
            continue
        if int(m.group('iteration')) in complete:
            continue
        doomed.append((name, 'rank file of checkpoint {} which has no manifest (its job '
                             'ended before finishing it)'.format(m.group('iteration'))))
    doomed += [(name, why) for name, _, why in _by_writer(directory, names, TMP_PATTERN, now,
                                                           here) if why is not None]
    for name, why in doomed:
        full = os.path.join(directory, name)
        try:
            st = os.stat(full)
        except FileNotFoundError:
            continue
        if not dry_run:
            try:
                os.remove(full)
            except FileNotFoundError:
                continue
        removed.append((name, st.st_size, why))
    return removed


_REPLICA = ('updater/model:', 'updater/optimizer:')
_ITERATORS = 'updater/iterator:'


def _replica_digest(path):
    """(digest of every replica array, {name: crc}) of one stored rank file."""
    crcs = {}
    with numpy.load(path) as z:
        for k in sorted(z.files):
            if k.startswith(_REPLICA):
                a = numpy.ascontiguousarray(z[k])
                crcs[k] = zlib.crc32(a.tobytes(), zlib.crc32(str((a.dtype.str, a.shape)).encode()))
    return zlib.crc32(json.dumps(crcs, sort_keys=True).encode()), crcs


class _Given(chainer.serializer.Deserializer):
    """A deserializer that gives the values it holds and leaves the rest as they are."""

    def __init__(self, values):
        self.values = values

    def __getitem__(self, key):
        return _Given(self.values.get(key, {}))

    def __call__(self, key, value):
        return self.values.get(key, value)


def _load_resharded(path, trainer, old_size, new_size, rank):
    """Load a rank file written at another rank count: everything but the iterators as
    stored; each iterator keeps its new shard and order and takes the epoch and the same
    fraction of it; the numpy random state is the source rank's, mixed with this rank."""
    chainer.serializers.load_npz(path, trainer,
                                 ignore_names=lambda k: k.startswith(_ITERATORS))
    with numpy.load(path) as z:
        stored = {k[len(_ITERATORS):]: z[k] for k in z.files if k.startswith(_ITERATORS)}
        keys = z['chainermn_torus/numpy_rng/keys']
    for name, it in trainer.updater._iterators.items():
        prefix = name + '/'
        mine = {k[len(prefix):]: v for k, v in stored.items() if k.startswith(prefix)}
        if 'epoch' not in mine:
            continue
        new_len = len(it.dataset)
        old_len = len(mine['order']) if 'order' in mine else \
            max(1, int(round(new_len * new_size / old_size)))
        fraction = float(mine['current_position']) / old_len
        position = min(int(round(fraction * new_len)), new_len - 1)
        batch = getattr(it, 'batch_size', 1)
        epoch = int(mine['epoch'])
        previous = epoch + (position - batch) / new_len
        it.serialize(_Given({'current_position': position, 'epoch': epoch,
                             'is_new_epoch': bool(mine.get('is_new_epoch', False)),
                             'previous_epoch_detail': max(previous, 0.0) if epoch or position
                             else -1.0}))
    numpy.random.seed([int(x) for x in keys[:4]] + [rank, new_size])


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


class MultiNodeCheckpointer(chainer.training.Extension):

    trigger = (1, 'epoch')
    priority = chainer.training.PRIORITY_READER - 1  # after the reporters, like snapshot
    name = 'chainermn_torus_checkpoint'

    def __init__(self, comm, directory, keep=2, batch='keep', lr_rule=None):
        if int(keep) != keep or keep < 1:
            raise ConfigError('chainermn_torus: keep must be a count >= 1, got {!r}'.format(
                keep))
        if batch not in BATCH_CHOICES:
            raise ConfigError('chainermn_torus: batch must be one of {}, got {!r}'.format(
                ', '.join(BATCH_CHOICES), batch))
        if batch == 'scale' and lr_rule is None:
            raise ConfigError("chainermn_torus: batch='scale' needs lr_rule, the large-batch "
                              'rule that scales the learning rate with the global batch '
                              '(chainermn_torus.optimizers.large_batch.linear_scaling)')
        self.comm, self.directory, self.keep = comm, directory, int(keep)
        self.batch, self.lr_rule = batch, lr_rule
        self.rank, self.size = comm.rank, comm.size
        self._check_writable()
        # Each rank its host's leftovers (a shared file system shows every host's files);
        # rank files are judged against the manifests rank 0 sees.
        complete = comm.mpi_comm.bcast(
            [it for it, _ in self._manifests()] if self.rank == 0 else None)
        for name, size, why in sweep_temporary(directory, complete=complete):  # every rank
            report.say('rank {} removed {} ({} bytes; {})'.format(
                self.rank, os.path.join(directory, name), size, why), rank=0)

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
        dog = watchdog.active()  # a checkpoint has its own clock (runtime.watchdog)
        if dog is not None:
            dog.checkpoint(self.directory)
        try:
            self._save(trainer)
        finally:
            if dog is not None:
                dog.between()

    def _save(self, trainer):
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
        self._refuse_nonfinite(arrays, iteration)
        need = self._make_room(arrays, iteration)
        path = self._file(iteration, self.rank)
        marker = self._marker(iteration)
        try:
            with open(marker, 'w') as f:
                f.write('{}\n'.format(os.getpid()))
            atomic_write(path, _savez(arrays, iteration, self.rank),
                         lambda: _fault('during', iteration, self.rank))
            record = {'bytes': os.path.getsize(path), 'crc32': _crc32(path)}
        except OSError as e:
            # Other ranks learn of it by the abort; what was there before is untouched.
            _remove(marker)
            sizes = '' if not need[0] else '; about {} needed for the rank files of this ' \
                'host, {} was free before writing'.format(report.format_bytes(need[0]),
                                                         report.format_bytes(need[1]))
            raise CheckpointError(
                'chainermn_torus: rank {} cannot write checkpoint {} ({}: {}{}); {}. Free '
                'space there or choose another --checkpoint-dir.'.format(
                    self.rank, path, type(e).__name__, e, sizes, self._what_is_kept())) from e
        records = self.comm.mpi_comm.gather(record, root=0)  # every rank's file is complete
        data = _data_identity(trainer, self.comm)
        if self.rank == 0:
            files = [os.path.basename(self._file(iteration, r)) for r in range(self.size)]
            main = trainer.updater.get_iterator('main')
            actual = _actual_optimizer(trainer)
            attr = _lr_attr(actual)
            manifest = {'iteration': iteration, 'ranks': self.size, 'files': files,
                        'batch_per_rank': getattr(main, 'batch_size', None), 'data': data,
                        'optimizer': _optimizer_kind(actual),
                        'learning_rate': None if attr is None else
                        [attr, float(getattr(actual, attr))],
                        'checks': dict(zip(files, records)),
                        'model': _layout(target), 'written': time.strftime('%Y-%m-%d %H:%M:%S')}
            self._write_manifest(iteration, json.dumps(manifest, indent=1).encode())
        self.comm.mpi_comm.Barrier()  # latest.json names this checkpoint
        _remove(marker)
        self._remove_old(iteration)
        _fault('after', iteration, self.rank)

    def _write_manifest(self, iteration, text):
        """Rank 0: this checkpoint's manifest, then latest.json naming it. A failed write
        leaves latest.json naming the checkpoint before (both are written atomically);
        this one's own manifest is removed, so that its rank files are swept as those of
        an unfinished checkpoint."""
        own = os.path.join(self.directory, _MANIFEST_OF.format(iteration))
        for path in (own, os.path.join(self.directory, MANIFEST)):
            try:
                atomic_write(path, lambda f: f.write(text))
            except OSError as e:
                _remove(own)
                kept = self._what_is_kept()  # this one's manifest is gone again
                raise CheckpointError(
                    'chainermn_torus: checkpoint {} not completed: rank 0 cannot write its '
                    'manifest {} ({}: {}); every rank file of it was written, but without '
                    'the manifest it does not count: {}. Free space there or choose '
                    'another --checkpoint-dir.'.format(iteration, path, type(e).__name__,
                                                       e.strerror or e, kept)) from e

    def _marker(self, iteration):
        # Says "rank R of a live job is writing checkpoint I" until the manifest names it,
        # so that clean can tell a dead job's rank file without a manifest from one in
        # progress (sweep_temporary).
        return os.path.join(self.directory, '.writing_iter_{}.rank{}.{}.{}'.format(
            iteration, self.rank, socket.gethostname(), os.getpid()))

    def _own_iterations(self):
        suffix = '.rank{}.npz'.format(self.rank)
        iterations = []
        for name in os.listdir(self.directory):
            if name.startswith('snapshot_iter_') and name.endswith(suffix):
                try:
                    iterations.append(int(name[len('snapshot_iter_'):-len(suffix)]))
                except ValueError:
                    continue
        return sorted(iterations)

    def _drop(self, iteration):
        old = [self._file(iteration, self.rank)]
        if self.rank == 0:
            old.append(os.path.join(self.directory, _MANIFEST_OF.format(iteration)))
        for path in old:
            _remove(path)

    def _remove_old(self, newest):
        for it in self._own_iterations()[:-self.keep]:
            if it != newest:
                self._drop(it)

    def _what_is_kept(self):
        complete = [it for it, _ in self._manifests()]
        if not complete:
            return 'no earlier checkpoint was completed in {!r}'.format(self.directory)
        return 'checkpoint {} in {!r} stays the latest (complete and intact)'.format(
            complete[0], self.directory)

    def _refuse_nonfinite(self, arrays, iteration):
        """A diverged state is never written: it would become what --auto-resume loads."""
        count, first = finite.count_in(arrays)
        bad = agree.problems(self.comm.mpi_comm, (count, first) if count else None)
        if bad:
            stale = any(STALE_GRADS in f for _, (_, f) in bad)
            raise CheckpointError(
                'chainermn_torus: checkpoint {} not written: the trainer state holds NaN/Inf '
                'on rank(s) {} ({}){}; {}. Training has diverged: lower the learning rate, or '
                'run with --check-finite to stop at the step where it happens.'.format(
                    iteration, agree.ranks_text(bad),
                    '; '.join('rank {}: {} value(s), the first in {}'.format(r, c, f)
                              for r, (c, f) in bad),
                    ' (in the averaged gradients double buffering applies at the next step: '
                    'the averaging overflowed, with float16 communication beyond 65504)'
                    if stale else '', self._what_is_kept()))

    def _make_room(self, arrays, iteration):
        """Check free space before writing (collective); when it is short and an older
        checkpoint would be removed after this one anyway, remove it first (said), so that a
        job requeued after a full disk can always go on. Returns (need, free) for messages.

        The need is this host's ranks' files on the same device, in whole blocks: ranks on
        other hosts may share the file system (then a write can still fail: caught, said).
        """
        try:
            st = os.statvfs(self.directory)
            device, block = os.stat(self.directory).st_dev, st.f_frsize
            free = st.f_bavail * st.f_frsize
        except OSError:  # unknown: let the write say what is wrong (still collective)
            device, block, free = None, 4096, None
        mine = _rounded(_npz_bytes(arrays), block) + (64 << 10 if self.rank == 0 else 0)
        peers = self.comm.mpi_comm.allgather((socket.gethostname(), device, mine))
        need = sum(n for h, d, n in peers if (h, d) == (socket.gethostname(), device))
        need += max(need // 100, block)  # the file system's own metadata
        short = free is not None and free < need
        if free is None:
            need, free = 0, 0
        if not self.comm.mpi_comm.allreduce(short, op=MPI.LOR):
            return need, free
        # Rank 0 sees every manifest. The checkpoints this write will push out of keep can
        # go now; the newest complete one stays whatever keep is.
        complete = self.comm.mpi_comm.bcast(
            [it for it, _ in self._manifests() if it < iteration] if self.rank == 0 else None)
        removable = sorted(complete[max(self.keep - 1, 1):])
        for it in removable:
            self._drop(it)
        self.comm.mpi_comm.Barrier()
        before = free
        try:
            free = os.statvfs(self.directory).f_bavail * block
        except OSError:
            free = need  # as above: the write will say
        if removable:
            report.say('checkpoint {}: {} free in {} on {} and {} needed there (this host\'s '
                       'rank files); removed the oldest checkpoint(s) first ({}), as keep={} '
                       'would after writing'.format(iteration, report.format_bytes(before),
                                                    self.directory, socket.gethostname(),
                                                    report.format_bytes(need),
                                        ', '.join('iteration {}'.format(i) for i in removable),
                                        self.keep), self.rank)
        bad = agree.problems(self.comm.mpi_comm,
                             None if free >= need else (socket.gethostname(), need, free))
        if bad:
            r, (host, n, f) = bad[0]
            raise CheckpointError(
                'chainermn_torus: checkpoint {} not written: {} needs {} for the rank files of '
                'host {} and has {} free (rank {}{}); {}. Free space there, choose another '
                '--checkpoint-dir, or keep fewer checkpoints: writing one needs room for '
                'keep + 1 = {} until the oldest is removed.'.format(
                    iteration, self.directory, report.format_bytes(n), host,
                    report.format_bytes(f), r,
                    ', after removing {} older checkpoint(s)'.format(len(removable))
                    if removable else '', self._what_is_kept(), self.keep + 1))
        return need, free

    # --- resuming ---------------------------------------------------------------------------
    def maybe_resume(self, trainer):
        """Resume if the directory holds a checkpoint; returns the iteration or None.

        A damaged latest checkpoint falls back to the newest older one that passes every
        check (said on rank 0); if none does, the error names what is wrong with each.
        """
        manifest = os.path.join(self.directory, MANIFEST)
        exists = self.comm.mpi_comm.bcast(os.path.isfile(manifest) if self.rank == 0 else None)
        return self.resume(trainer, fallback=True) if exists else None

    def resume(self, trainer, fallback=False):
        """Load the checkpoint ``latest.json`` names (every rank its own file), after every
        rank has verified its file; with ``fallback``, an older complete one if it is not."""
        target = trainer.updater.get_optimizer('main').target
        failures, tried, manifest = [], set(), None
        pending = [MANIFEST]
        while pending:
            name = pending.pop(0)
            problem, manifest, fatal = self._agree_on(name, target)
            if problem is None:
                break
            failures.append(problem)
            if manifest is not None:
                tried.add(manifest['iteration'])
            if fatal:  # the rank count or the model: no older checkpoint can help
                break
            if name == MANIFEST:
                older = [n for it, n in self._manifests() if it not in tried]
                if not fallback:
                    raise CheckpointError(
                        'chainermn_torus: cannot resume from {!r}: {}{}'.format(
                            self.directory, problem, '' if not older else
                            ' ({} older checkpoint(s) kept there: --auto-resume falls back '
                            'to the newest that is complete)'.format(len(older))))
                pending = older
        if problem is not None:
            raise CheckpointError('chainermn_torus: cannot resume from {!r}: {}'.format(
                self.directory, '; then '.join(failures)))
        self._check_optimizer(trainer, manifest)
        self._check_data(trainer, manifest)
        resized = manifest['ranks'] != self.size
        batch_note = ''
        if resized:
            self._check_replicas(manifest)
            if self.batch == 'keep':
                batch_note = self._keep_global_batch(trainer, manifest)
            else:
                batch_note = self._scale_learning_rate(trainer, manifest)
        source = self.rank % manifest['ranks']  # new rank 0 reads old rank 0 (its reports)
        path = os.path.join(self.directory, manifest['files'][source])
        try:
            if resized:
                _load_resharded(path, trainer, manifest['ranks'], self.size, self.rank)
            else:
                chainer.serializers.load_npz(path, trainer)
                with numpy.load(path) as z:
                    numpy.random.set_state(('MT19937', z['chainermn_torus/numpy_rng/keys'],
                                            int(z['chainermn_torus/numpy_rng/pos']),
                                            int(z['chainermn_torus/numpy_rng/has_gauss']),
                                            float(z['chainermn_torus/numpy_rng/gauss'])))
            problem = None
        except Exception as e:  # verified, yet it does not load: say which file and why
            problem = 'rank {}: {}: {}: {}'.format(self.rank, path, type(e).__name__, e)
            if 'broadcast' in str(e) or 'shape' in str(e):
                problem += (' (an array in the checkpoint has another shape than in this job: '
                            'it was written with other data or options, such as --limit or '
                            'the training set, than this job uses)')
        agree.raise_everywhere(self.comm.mpi_comm, problem, lambda bad: CheckpointError(
            'chainermn_torus: cannot resume from {!r}: {}'.format(self.directory, bad[0][1])))
        if failures:
            report.say('the latest checkpoint in {} is damaged ({}); falling back to the '
                       'newest complete one'.format(self.directory, '; then '.join(failures)),
                       self.rank)
        report.say('resumed from {} at iteration {}{}'.format(
            self.directory, manifest['iteration'], '' if not resized else
            ', written by {} ranks, on {}: parameters and optimizer state from rank 0\'s '
            'replica (all {} identical), the data re-sharded, each rank\'s place in the '
            'epoch kept as a fraction{}'.format(manifest['ranks'], self.size,
                                                manifest['ranks'], batch_note)), self.rank)
        return manifest['iteration']

    def _keep_global_batch(self, trainer, manifest):
        """The global batch of the stored job, split over this job's ranks: the same
        optimisation (learning rate, warm-up) continues. Returns what to say."""
        old = manifest.get('batch_per_rank')
        it = trainer.updater.get_iterator('main')
        if not old or not hasattr(it, 'batch_size'):
            return ''
        total = old * manifest['ranks']
        if total % self.size:
            raise CheckpointError(
                'chainermn_torus: cannot resume from {!r} on {} ranks: its global batch of {} '
                '({} ranks x {}) does not split evenly over {} ranks; resume on a rank count '
                'that divides {}, or keep each rank\'s batch of {} and scale the learning '
                'rate with the global batch ({} x {} = {}): batch=\'scale\' (the examples\' '
                '--resume-batch scale)'.format(
                    self.directory, self.size, total, manifest['ranks'], old, self.size,
                    total, it.batch_size, self.size, it.batch_size, it.batch_size * self.size))
        needed = total // self.size
        if it.batch_size == needed:
            return '; the global batch of {} kept ({} per rank, as started)'.format(total, needed)
        if type(it) is not chainer.iterators.SerialIterator:
            # Loader processes and their shared slots are sized for the batch at creation.
            raise CheckpointError(
                'chainermn_torus: cannot resume from {!r} on {} ranks with {} per rank: its '
                'global batch of {} needs {} per rank here, and a {} cannot change its batch '
                'once started; start the job with --batchsize {}'.format(
                    self.directory, self.size, it.batch_size, total, needed,
                    type(it).__name__, needed))
        it.batch_size = needed
        return '; the global batch of {} kept: {} per rank instead of {}'.format(
            total, needed, old)

    def _check_data(self, trainer, manifest):
        """A checkpoint of other data (another training set, --limit, shuffle seed) is
        refused at any rank count, naming both (collective; checkpoints written before the
        data was recorded are not checked)."""
        stored = manifest.get('data')
        mine = _data_identity(trainer, self.comm)
        if not stored or stored == mine:
            return
        raise CheckpointError(
            'chainermn_torus: cannot resume from {!r}: it was written training on {} and '
            'this job trains on {}; resume with the data it was written with (the same '
            'training set, --limit and shuffle seed), or start afresh in another '
            '--checkpoint-dir'.format(self.directory, _describe_data(stored),
                                      _describe_data(mine)))

    def _check_optimizer(self, trainer, manifest):
        """Another optimizer's state would load in part and silently (Chainer reads the
        keys the target asks for): refused, naming both."""
        stored = manifest.get('optimizer')
        mine = _optimizer_kind(_actual_optimizer(trainer))
        if stored is not None and stored != mine:
            raise CheckpointError(
                'chainermn_torus: cannot resume from {!r}: it holds the state of the optimizer '
                '{} and this job trains with {}; resume with the optimizer it was '
                'written with, or start afresh in another --checkpoint-dir'.format(
                    self.directory, stored, mine))

    def _scale_learning_rate(self, trainer, manifest):
        """``batch='scale'``: each rank keeps the batch this job was started with, so the
        global batch changes with the rank count, and the stored learning rate is scaled by
        ``lr_rule`` (new global, old global). Returns what to say."""
        old = manifest.get('batch_per_rank')
        it = trainer.updater.get_iterator('main')
        stored = manifest.get('learning_rate')
        no_batch = not old or not hasattr(it, 'batch_size')
        if no_batch or not stored:
            raise CheckpointError(
                "chainermn_torus: cannot resume from {!r} with batch='scale': the checkpoint "
                'does not record {} (written by an older version, or the iterator has no '
                "batch_size); resume with batch='keep' (--resume-batch keep)".format(
                    self.directory, 'its batch per rank' if no_batch else
                    'its learning rate'))
        attr, value = stored
        before, after = old * manifest['ranks'], it.batch_size * self.size
        new = self.lr_rule(value, after, before)
        setattr(_actual_optimizer(trainer), attr, new)
        rule = getattr(self.lr_rule, '__name__', repr(self.lr_rule))
        return ('; the global batch changed from {} ({} x {}) to {} ({} x {}, the batch this '
                'job was started with): {} {:g} -> {:g} by the large-batch rule {} ({}); a '
                'schedule extension that sets {} itself (a warm-up) takes over from it'.format(
                    before, manifest['ranks'], old, after, self.size, it.batch_size, attr,
                    value, new, rule,
                    (self.lr_rule.__doc__ or '').strip().split('\n')[0].rstrip('.'), attr))

    def _check_replicas(self, manifest):
        """The stored ranks hold the same parameters and optimizer state (data-parallel
        replicas); any of them can then seed any rank count. Collective."""
        mine = {r: _replica_digest(os.path.join(self.directory, manifest['files'][r]))
                for r in range(self.rank, manifest['ranks'], self.size)}
        digests = {}
        for part in self.comm.mpi_comm.allgather(mine):
            digests.update(part)
        groups = {}
        for r, d in sorted(digests.items()):
            groups.setdefault(d[0], []).append(r)
        if len(groups) > 1:
            first = digests[0][1]
            other = next(d for d in digests.values() if d[0] != digests[0][0])[1]
            array = next((k for k in sorted(first) if first.get(k) != other.get(k)), '?')
            raise CheckpointError(
                'chainermn_torus: cannot resume from {!r} on {} ranks: its {} stored ranks do '
                'not hold the same parameters and optimizer state (ranks {} agree; the first '
                'array that differs: {}), so no replica can stand for the others'.format(
                    self.directory, self.size, manifest['ranks'],
                    ' / '.join(', '.join(map(str, g)) for g in groups.values()), array))

    def _manifests(self):
        """[(iteration, per-checkpoint manifest name)], newest first."""
        if not os.path.isdir(self.directory):
            return []
        found = []
        for name in os.listdir(self.directory):
            m = _MANIFEST_FILE.match(name)
            if m:
                found.append((int(m.group(1)), name))
        return sorted(found, reverse=True)

    def _agree_on(self, name, target):
        """(problem, manifest, fatal), the same on every rank: rank 0 reads the manifest,
        every rank verifies its own file. ``fatal``: no other checkpoint can help."""
        problem, manifest, fatal = None, None, False
        if self.rank == 0:
            problem, manifest, fatal = self._read_manifest(target, name)
        problem, manifest, fatal = self.comm.mpi_comm.bcast((problem, manifest, fatal))
        if problem is not None:
            return problem, manifest, fatal
        problem = self._verify(manifest)
        bad = agree.problems(self.comm.mpi_comm, problem)
        if bad:
            return ('checkpoint at iteration {}: {} rank file(s) damaged, the first: {}'.format(
                manifest['iteration'], len(bad), bad[0][1]), manifest, False)
        return None, manifest, False

    def _verify(self, manifest):
        """This rank's share of the stored files: its own at the same rank count; at
        another, stored ranks r with r % size == rank (every file checked once)."""
        for r in range(self.rank, manifest['ranks'], self.size):
            problem = self._verify_file(manifest, manifest['files'][r])
            if problem:
                return problem
        return None

    def _verify_file(self, manifest, name):
        path = os.path.join(self.directory, name)
        if not os.path.isfile(path):
            return 'rank {} cannot see {}'.format(self.rank, path)
        check = manifest.get('checks', {}).get(name)
        if check is None:  # a manifest written before checks were recorded
            return None
        size = os.path.getsize(path)
        if size != check['bytes']:
            return '{} has {} bytes, the manifest says {} (truncated or replaced)'.format(
                path, size, check['bytes'])
        if _crc32(path) != check['crc32']:
            return '{} does not match its CRC-32 in the manifest (corrupted)'.format(path)
        # Written before checkpoints refused diverged states: loading NaN/Inf would only
        # fail again one step later.
        try:
            with numpy.load(path) as z:
                count, first = finite.count_in({k: z[k] for k in z.files})
        except Exception as e:  # CRC matched, so unreadable means not an npz at all
            return '{} cannot be read as a checkpoint ({}: {})'.format(path, type(e).__name__, e)
        if count:
            return '{} holds {} NaN/Inf value(s), the first in {} (a diverged state)'.format(
                path, count, first)
        return None

    def _read_manifest(self, target, name=MANIFEST):
        manifest = os.path.join(self.directory, name)
        if not os.path.isdir(self.directory):
            return 'the directory does not exist', None, True
        if not os.path.isfile(manifest):
            return 'no {} in it (no checkpoint was completed there)'.format(name), None, True
        try:
            with open(manifest) as f:
                data = json.load(f)
            data['iteration'], data['ranks'], data['files'], data['model']
        except (ValueError, KeyError) as e:
            return '{} is not a chainermn-torus manifest ({})'.format(manifest, e), None, False
        here = _layout(target)
        there = data['model']
        if here != there:
            for a, b in zip(there, here):
                if a != b:
                    return ('it belongs to another model: array {} has shape {} dtype {} '
                            'there, {} shape {} dtype {} here'.format(
                                a[0], tuple(a[1]), a[2], b[0], tuple(b[1]), b[2])), None, True
            return ('it belongs to another model: {} arrays there, {} here'.format(
                len(there), len(here))), None, True
        return None, data, False


def _data_identity(trainer, comm):
    """What the training data is, the same at any rank count (collective): the number of
    examples the shards are cut from and a CRC-32 of the order they are cut in
    (``scatter_dataset``'s permutation, which its seed and the size decide). None where
    the training iterator's dataset is not such a shard on every rank (nothing to tell)."""
    dataset = getattr(trainer.updater.get_iterator('main'), 'dataset', None)
    whole = getattr(dataset, '_dataset', None)
    mine = None
    if isinstance(dataset, chainer.datasets.SubDataset) and whole is not None:
        order = dataset._order
        mine = (len(whole), None if order is None else
                zlib.crc32(numpy.ascontiguousarray(order, dtype=numpy.int64).tobytes()))
    everyone = comm.mpi_comm.allgather(mine)
    if mine is None or any(e != mine for e in everyone):
        return None
    return {'examples': mine[0], 'order_crc32': mine[1]}


def _describe_data(data):
    return '{} examples{}'.format(data.get('examples'), '' if data.get('order_crc32') is None
                                  else ' in shard order {:08x}'.format(data['order_crc32']))


# --- the examples' command-line options, in one place -----------------------------------------
def _actual_optimizer(trainer):
    opt = trainer.updater.get_optimizer('main')
    return getattr(opt, 'actual_optimizer', opt)


def _optimizer_kind(optimizer):
    """The optimizer's Chainer class name: a fused kernel (FusedAdam) keeps the state of
    the rule it fuses (Adam), so the two resume each other's checkpoints."""
    for cls in type(optimizer).__mro__:
        if cls.__module__.startswith('chainer.'):
            return cls.__name__
    return type(optimizer).__name__


def _lr_attr(optimizer):
    """The learning-rate hyperparameter's name ('alpha' for Adam, whose ``lr`` is a value
    computed from it; 'lr' for the SGD family), or None."""
    for attr in ('alpha', 'lr'):
        if isinstance(getattr(optimizer, attr, None), (int, float)):
            return attr
    return None


def add_arguments(parser):
    """--checkpoint-dir, --checkpoint-interval, --resume, --auto-resume, --resume-batch."""
    parser.add_argument('--checkpoint-dir', default=None, metavar='DIR',
                        help='write multi-node checkpoints here (atomically; see '
                             'chainermn_torus.extensions.checkpoint)')
    parser.add_argument('--checkpoint-interval', type=int, default=None, metavar='ITERATIONS',
                        help='checkpoint every this many iterations (default: every epoch)')
    parser.add_argument('--resume', action='store_true',
                        help='continue from the latest checkpoint in --checkpoint-dir')
    parser.add_argument('--auto-resume', action='store_true',
                        help='continue from it if there is one (batch jobs that are requeued)')
    parser.add_argument('--resume-batch', choices=BATCH_CHOICES, default='keep',
                        help='resuming on another rank count: keep the global batch (the '
                             'batch per rank adjusted; default), or scale: keep the batch '
                             'per rank and scale the learning rate with the global batch by '
                             'the linear scaling rule')


def check_arguments(parser, args):
    if (args.resume or args.auto_resume) and not args.checkpoint_dir:
        parser.error('--resume needs --checkpoint-dir DIR (where the checkpoints are)')
    if args.checkpoint_interval is not None and args.checkpoint_interval < 1:
        parser.error('--checkpoint-interval must be >= 1, got {}'.format(
            args.checkpoint_interval))


def attach(comm, trainer, args, lr_rule=None):
    """Extend ``trainer`` with a checkpointer and resume as the options say (collective).

    Returns the checkpointer, or None without --checkpoint-dir. Errors end every rank with a
    plain exit: every rank raises the same one, and MPI_Abort could lose the message when
    the launcher tears the job down.
    """
    if not args.checkpoint_dir:
        return None
    try:
        # Made before training so that an unwritable directory fails now, on every rank.
        checkpointer = MultiNodeCheckpointer(
            comm, args.checkpoint_dir, batch=getattr(args, 'resume_batch', 'keep'),
            lr_rule=lr_rule)
        trainer.extend(checkpointer, trigger=(args.checkpoint_interval, 'iteration')
                       if args.checkpoint_interval else (1, 'epoch'))
        if args.resume:
            checkpointer.resume(trainer)
        elif args.auto_resume:
            checkpointer.maybe_resume(trainer)
    except CheckpointError as e:  # raised alike on every rank (the checks are collective)
        report.stop(str(e), comm.rank)
    return checkpointer


def check_output(comm, directory):
    """The job's output directory, checked for writing on every rank at start."""
    try:
        check_writable(comm, directory, 'results')
    except OSError as e:  # raised alike on every rank (check_writable is collective)
        report.stop(str(e), comm.rank)
