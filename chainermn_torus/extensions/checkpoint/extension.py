"""The checkpointer as a Chainer trainer extension: it writes (``save``) and resumes
(``resume`` / ``maybe_resume``), every decision collective, with the pieces of this package
doing the work (see the package's doc for the whole)."""
import os
import time

import chainer
import numpy

from chainermn_torus.extensions.checkpoint import arrays as stored
from chainermn_torus.extensions.checkpoint import files, identity, resharding, room, rules
from chainermn_torus.extensions.checkpoint import writing
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.extensions.checkpoint.sweep import sweep_temporary
from chainermn_torus import config
from chainermn_torus.errors import ConfigError
from chainermn_torus.runtime import agree, report
from chainermn_torus.runtime.watch import abort, watchdog

__all__ = ['MultiNodeCheckpointer']


class MultiNodeCheckpointer(chainer.training.Extension):

    trigger = (1, 'epoch')
    priority = chainer.training.PRIORITY_READER - 1  # after the reporters, like snapshot
    name = 'chainermn_torus_checkpoint'

    def __init__(self, comm, directory, keep=2, batch='keep', lr_rule=None, trust=None):
        if int(keep) != keep or keep < 1:
            raise ConfigError('chainermn_torus: keep must be a count >= 1, got {!r}'.format(
                keep))
        # Whether a directory and files another user could have written may be loaded
        # (files.foreign; its files: shared_paths.open_file).
        self.trusted = config.value('trust_checkpoints', trust, '--trust-checkpoint-dir')[0]
        self.resumed_at = None  # the iteration resumed from: nothing newer is removed
        self._written = set()   # the iterations this job wrote
        self.rule = rules.get(batch, lr_rule)
        self.comm, self.directory, self.keep = comm, directory, int(keep)
        self.lr_rule = lr_rule  # the rule's (self.rule) large-batch learning-rate rule
        self.rank, self.size = comm.rank, comm.size
        # Fail now, not after an hour of training: a link (planted by another user, it
        # pointed the job at the user's other experiment, whose checkpoints the rotation
        # then removed) or another user's directory is refused before anything is written
        # in it, and again once it is made.
        self._check_directory()
        writing.check_writable(comm, directory, 'checkpoints', CheckpointError, private=True)
        self._check_directory()
        # Each rank its host's leftovers (a shared file system shows every host's files);
        # rank files are judged against the manifests rank 0 sees.
        complete = comm.mpi_comm.bcast(
            [it for it, _ in files.manifests(directory)] if self.rank == 0 else None)
        for name, size, why in sweep_temporary(directory, complete=complete):  # every rank
            report.say('rank {} removed {} ({} bytes; {})'.format(
                self.rank, os.path.join(directory, name), size, why), rank=0)
        # A signal's last line says what is on disk (runtime.watch.abort).
        abort.say_on_signal(lambda: files.newest_complete(directory))

    def _check_directory(self):
        """Collective: the directory, where it exists, is one this job may write and resume
        from (``files.foreign``), on every rank, or every rank raises."""
        problem = files.foreign(self.directory, self.trusted) \
            if os.path.lexists(self.directory) else None
        agree.raise_everywhere(self.comm.mpi_comm, problem, lambda bad: CheckpointError(
            'chainermn_torus: refusing checkpoints in {!r} (rank(s) {}): {}; nothing was '
            'written there'.format(self.directory, agree.ranks_text(bad), bad[0][1])))

    # --- saving -----------------------------------------------------------------------------
    def __call__(self, trainer):
        self.save(trainer)

    def save(self, trainer):
        dog = watchdog.active()  # a checkpoint has its own clock (runtime.watch.watchdog)
        if dog is not None:
            dog.checkpoint(self.directory)
        try:
            self._save(trainer)
        finally:
            if dog is not None:
                dog.between()

    def _save(self, trainer):
        iteration = trainer.updater.iteration
        ser = chainer.serializers.DictionarySerializer()
        ser.save(trainer)
        arrays = stored.for_saving(dict(ser.target,
                                        **resharding.rng_arrays(numpy.random.get_state())))
        writing.refuse_nonfinite(self.comm, arrays, iteration, self.directory)
        need = room.make_room(self.comm, self.directory, arrays, iteration, self.keep,
                              self._drop)
        marker, record = writing.write_rank_file(self.directory, iteration, self.rank,
                                                 arrays, need)
        records = self.comm.mpi_comm.gather(record, root=0)  # every rank's file is complete
        data = identity.data_identity(trainer, self.comm)
        if self.rank == 0:
            writing.write_manifest(self.directory, iteration,
                                   self._manifest(trainer, iteration, records, data))
        self.comm.mpi_comm.Barrier()  # latest.json names this checkpoint
        files.remove(marker)
        self._written.add(iteration)
        self._remove_old(iteration)

    def _manifest(self, trainer, iteration, records, data):
        names = [os.path.basename(files.rank_file(self.directory, iteration, r))
                 for r in range(self.size)]
        actual = identity.actual_optimizer(trainer)
        attr = identity.lr_attr(actual)
        return {'iteration': iteration, 'ranks': self.size, 'files': names,
                'batch_per_rank': getattr(trainer.updater.get_iterator('main'), 'batch_size',
                                          None),
                'data': data, 'optimizer': identity.optimizer_kind(actual),
                'learning_rate': None if attr is None else [attr, float(getattr(actual, attr))],
                'checks': dict(zip(names, records)),
                'model': files.layout(trainer.updater.get_optimizer('main').target),
                'written': time.strftime('%Y-%m-%d %H:%M:%S')}

    def _own_iterations(self):
        return sorted(int(m.group('iteration')) for m in map(files.RANK_FILE.match,
                                                             os.listdir(self.directory))
                      if m and int(m.group('rank')) == self.rank)

    def _drop(self, iteration):
        files.remove(files.rank_file(self.directory, iteration, self.rank))
        if self.rank == 0:
            files.remove(files.manifest_file(self.directory, iteration))

    def _remove_old(self, newest):
        """Beyond ``keep``, the oldest go; never one newer than the checkpoint this job
        resumed from that it did not write itself (a damaged newer one stays to be looked
        at)."""
        for it in self._own_iterations()[:-self.keep]:
            if it != newest and (self.resumed_at is None or it <= self.resumed_at or
                                 it in self._written):
                self._drop(it)

    # --- resuming ---------------------------------------------------------------------------
    def maybe_resume(self, trainer):
        """Resume if the directory holds a checkpoint; returns the iteration or None.

        A damaged latest checkpoint falls back to the newest older one that passes every
        check (said on rank 0); if none does, the error names what is wrong with each.
        """
        # The manifests are the truth, latest.json a hint: a job ended between a
        # checkpoint's manifest and latest.json (a SIGTERM) left a complete checkpoint.
        exists = self.comm.mpi_comm.bcast(bool(
            files.manifests(self.directory) or
            os.path.isfile(os.path.join(self.directory, files.MANIFEST)))
            if self.rank == 0 else None)
        return self.resume(trainer, fallback=True) if exists else None

    def resume(self, trainer, fallback=False):
        """Load the checkpoint ``latest.json`` names (every rank its own file), after every
        rank has verified its file; with ``fallback``, an older complete one if it is not."""
        manifest, failures = self._choose(trainer, fallback)
        identity.check_optimizer(trainer, manifest, self.directory)
        identity.check_data(trainer, self.comm, manifest, self.directory)
        resized = manifest['ranks'] != self.size
        batch_note = ''
        if resized:
            resharding.check_replicas(self.comm, self.directory, manifest)
            batch_note = self.rule.apply(trainer, manifest, self.size, self.directory,
                                         self.lr_rule)
        self._load(trainer, manifest, resized)
        self.resumed_at = manifest['iteration']
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

    def _choose(self, trainer, fallback):
        """(the manifest of the checkpoint to load, what was wrong with newer ones): the
        latest, or with ``fallback`` the newest complete one that passes. The manifests are
        the truth: the latest is the newest checkpoint with one. ``latest.json`` is checked
        (a damaged one is said); one missing, or naming an older checkpoint (the job ended
        between the two writes), is passed over, said."""
        layout = files.layout(trainer.updater.get_optimizer('main').target)
        ser = chainer.serializers.DictionarySerializer()
        trainer.updater.serialize(ser['updater'])  # the trainer's own: not before it ran
        self._expected = files.expected_arrays(ser.target)  # what a rank file may hold
        hint, complete = self.comm.mpi_comm.bcast(
            (os.path.isfile(os.path.join(self.directory, files.MANIFEST)),
             files.manifests(self.directory)) if self.rank == 0 else None)
        pending = [files.MANIFEST] if hint or not complete else [n for _, n in complete]
        failures, tried = [], set()
        while pending:
            name = pending.pop(0)
            problem, manifest, fatal = self._agree_on(name, layout)
            if problem is None and name == files.MANIFEST:
                newer = [n for it, n in complete if it > manifest['iteration']]
                if newer:
                    self._say_newer(manifest['iteration'], newer[0])
                    pending = newer + [os.path.basename(
                        files.manifest_file(self.directory, manifest['iteration']))]
                    continue
            if problem is None:
                return manifest, failures
            failures.append(problem)
            if manifest is not None:
                tried.add(manifest['iteration'])
            if fatal:  # the rank count, the model or the directory: no other can help
                break
            older = [n for it, n in complete if it not in tried and n not in pending]
            if not fallback:
                raise CheckpointError(
                    'chainermn_torus: cannot resume from {!r}: {}{}'.format(
                        self.directory, problem, '' if not older + pending else
                        ' ({} older checkpoint(s) kept there: --auto-resume falls back '
                        'to the newest that is complete)'.format(len(older + pending))))
            if name == files.MANIFEST:
                pending = older
        raise CheckpointError('chainermn_torus: cannot resume from {!r}: {}'.format(
            self.directory, '; then '.join(failures)))

    def _say_newer(self, iteration, newest):
        report.say('{} names iteration {}, but a newer checkpoint is complete in {} ({}: the '
                   'job ended before latest.json was rewritten); resuming from the newest '
                   'that passes'.format(files.MANIFEST, iteration, self.directory, newest),
                   self.rank)

    def _load(self, trainer, manifest, resized):
        """Every rank loads its file; a verified file that does not load stops every rank."""
        source = self.rank % manifest['ranks']  # new rank 0 reads old rank 0 (its reports)
        path = os.path.join(self.directory, manifest['files'][source])
        problem = None
        try:
            if resized:
                resharding.load_resharded(path, trainer, manifest['ranks'], self.size,
                                          self.rank)
            else:
                resharding.load_same(path, trainer)
        except Exception as e:  # verified, yet it does not load: say which file and why
            problem = 'rank {}: {}: {}: {}'.format(self.rank, path, type(e).__name__, e)
            if 'broadcast' in str(e) or 'shape' in str(e):
                problem += (' (an array in the checkpoint has another shape than in this job: '
                            'it was written with other data or options, such as --limit or '
                            'the training set, than this job uses)')
        agree.raise_everywhere(self.comm.mpi_comm, problem, lambda bad: CheckpointError(
            'chainermn_torus: cannot resume from {!r}: {}'.format(self.directory, bad[0][1])))

    def _agree_on(self, name, layout):
        """(problem, manifest, fatal), the same on every rank: rank 0 reads the manifest,
        every rank verifies its share of the files (its own at the same rank count; at
        another, stored ranks r with r % size == rank)."""
        found = files.read_manifest(self.directory, name, layout, self.trusted) \
            if self.rank == 0 else None
        problem, manifest, fatal = self.comm.mpi_comm.bcast(found)
        if problem is not None:
            return problem, manifest, fatal
        problem = next(filter(None, (
            files.verify_file(self.directory, manifest, manifest['files'][r], self.rank,
                              self.trusted, self._expected, max(self.size, manifest['ranks']))
            for r in range(self.rank, manifest['ranks'], self.size))), None)
        bad = agree.problems(self.comm.mpi_comm, problem)
        if bad:
            return ('checkpoint at iteration {}: {} rank file(s) damaged, the first: {}'.format(
                manifest['iteration'], len(bad), bad[0][1]), manifest, False)
        return None, manifest, False
