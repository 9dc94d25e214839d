"""The checkpointer as a Chainer trainer extension: it writes (``save``) and resumes
(``resume`` / ``maybe_resume``), every decision collective, with the pieces of this package
doing the work (see the package's doc for the whole)."""
import os
import time

import chainer
import numpy

from chainermn_torus import settings_table
from chainermn_torus.communicators import capabilities
from chainermn_torus.extensions.checkpoint import arrays as stored
from chainermn_torus.extensions.checkpoint import files, identity, resharding, room, rules
from chainermn_torus.extensions.checkpoint import writing
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.extensions.checkpoint.sweep import others, sweep_temporary
from chainermn_torus.errors import ConfigError, UnsafePath
from chainermn_torus.runtime import agree, report
from chainermn_torus.runtime.watch import abort, watchdog

__all__ = ['MultiNodeCheckpointer']


class MultiNodeCheckpointer(chainer.training.Extension):

    trigger = (1, 'epoch')
    priority = chainer.training.PRIORITY_READER - 1  # after the reporters, like snapshot
    name = 'chainermn_torus_checkpoint'

    def __init__(self, comm, directory, keep=2, batch='keep', lr_rule=None, trust=None):
        if int(keep) != keep or keep < 1:
            raise ConfigError(f'chainermn_torus: keep must be a count >= 1, got {keep!r}')
        # Whether a directory and files another user could have written may be loaded
        # (files.hold; its files: shared_paths.open_file): the entry point's
        # --trust-checkpoint-dir (or CHAINERMN_TORUS_TRUST_CHECKPOINTS), handed down.
        self.trusted = False if trust is None else settings_table.parse(
            'flag', trust, '--trust-checkpoint-dir')
        self.resumed_at = None  # the iteration resumed from: nothing newer is removed
        self._written = set()   # the iterations this job wrote
        self.rule = rules.get(batch, lr_rule)
        self.comm, self.directory, self.keep = comm, directory, int(keep)
        self.lr_rule = lr_rule  # the rule's (self.rule) large-batch learning-rate rule
        self.rank, self.size = comm.rank, comm.size
        # Fail now, not after an hour of training: every component of the path is judged
        # on every rank (a link planted one level up once pointed the job at the user's
        # other experiment, whose checkpoints the rotation then removed), and the
        # directory judged is held open: every later file operation is relative to it, so
        # renaming it and putting a link in its place sends nothing elsewhere.
        self.place = self._hold()
        problem = None
        try:
            self.place.probe(f'.write-test.rank{self.rank}.')
        except OSError as e:
            problem = f'{type(e).__name__}: {e}'
        agree.raise_everywhere(comm.mpi_comm, problem, lambda bad: CheckpointError(
            f'chainermn_torus: cannot write checkpoints to {directory!r} on '
            f'rank(s) {agree.ranks_text(bad)}: {bad[0][1]}. Choose a '
            'directory every rank can write (a shared file system, or a local disk per '
            'node).'))
        # Each rank its host's leftovers (a shared file system shows every host's files);
        # rank files are judged against the manifests rank 0 sees.
        complete = comm.mpi_comm.bcast(
            [it for it, _ in files.manifests(self.place)] if self.rank == 0 else None)
        for name, size, why in sweep_temporary(self.place, complete=complete):  # every rank
            report.say(f'rank {self.rank} removed {os.path.join(directory, name)} ({size} '
                       f'bytes; {why})', rank=0)
        if self.rank == 0:  # a trusted, shared directory: another user's are not ours
            theirs = others(self.place, files.names(self.place))
            if theirs:
                report.say('{} file(s) of other users in {} are passed over, never read or '
                           'removed: {}{}'.format(
                               len(theirs), directory, ', '.join(
                                   f'{n} of {o}' for n, o in theirs[:3]),
                               ', ...' if len(theirs) > 3 else ''), 0)
        # A signal's last line says what is on disk (runtime.watch.abort).
        abort.say_on_signal(lambda: files.newest_complete(self.place))

    def _hold(self):
        """Collective: the directory walked, judged and held on every rank
        (``files.hold``, made where missing), or every rank raises in one line."""
        place, problem = None, None
        try:
            place = files.hold(self.directory, self.trusted, create=True)
        except UnsafePath as e:
            problem = ('refusing checkpoints in', str(e).replace('chainermn_torus: ', '', 1))
        except OSError as e:  # a component that is a file, a directory it may not make
            problem = ('cannot write checkpoints to', f'{type(e).__name__}: {e}')

        def refused(bad):
            if place is not None:
                place.close()
            return CheckpointError('chainermn_torus: {} {!r} (rank(s) {}): {}{}'.format(
                bad[0][1][0], self.directory, agree.ranks_text(bad), bad[0][1][1],
                '' if bad[0][1][0].startswith('refusing') else '. Choose a directory every '
                'rank can write (a shared file system, or a local disk per node).'))
        agree.raise_everywhere(self.comm.mpi_comm, problem, refused)
        return place

    def _say_moved(self):
        """Collective, after each checkpoint: where the path no longer names the directory
        this job holds and writes into (renamed, replaced by a link), rank 0 says so, once
        per rank that sees it (a node-local directory is each node's), naming them."""
        seen = agree.problems(self.comm.mpi_comm, self.place.moved())
        if seen:
            report.say('{} (seen by rank(s) {})'.format(
                seen[0][1].replace('chainermn_torus: ', '', 1), agree.ranks_text(seen)),
                self.rank)

    # --- saving -----------------------------------------------------------------------------
    def __call__(self, trainer):
        self.save(trainer)

    def save(self, trainer):
        dog = watchdog.active()  # a checkpoint has its own clock (runtime.watch.watchdog)
        if dog is not None:
            dog.checkpoint(self.place)
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
        writing.refuse_nonfinite(self.comm, arrays, iteration, self.place)
        need = room.make_room(self.comm, self.place, arrays, iteration, self.keep,
                              self._drop)
        marker, record = writing.write_rank_file(self.place, iteration, self.rank,
                                                 arrays, need)
        records = self.comm.mpi_comm.gather(record, root=0)  # every rank's file is complete
        data = identity.described(trainer, self.comm)
        if self.rank == 0:
            writing.write_manifest(self.place, iteration,
                                   self._manifest(trainer, iteration, records, data))
        self.comm.mpi_comm.Barrier()  # latest.json names this checkpoint
        files.remove(self.place, marker)
        self._written.add(iteration)
        self._remove_old(iteration)
        self._say_moved()

    def _manifest(self, trainer, iteration, records, described):
        names = [files.rank_name(iteration, r) for r in range(self.size)]
        return dict(described, iteration=iteration, ranks=self.size, files=names,
                    checks=dict(zip(names, records)),
                    written=time.strftime('%Y-%m-%d %H:%M:%S'))

    def _own_iterations(self):
        return sorted(int(m.group('iteration')) for m in map(files.RANK_FILE.match,
                                                             files.names(self.place))
                      if m and int(m.group('rank')) == self.rank)

    def _drop(self, iteration):
        files.remove(self.place, files.rank_name(iteration, self.rank))
        if self.rank == 0:
            files.remove(self.place, files.manifest_name(iteration))

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
            files.manifests(self.place) or files.MANIFEST in files.names(self.place))
            if self.rank == 0 else None)
        return self.resume(trainer, fallback=True) if exists else None

    def resume(self, trainer, fallback=False):
        """Load the checkpoint ``latest.json`` names (every rank its own file), after every
        rank has verified its file; with ``fallback``, an older complete one if it is not."""
        manifest, failures = self._choose(trainer, fallback)
        identity.check_optimizer(trainer, manifest, self.directory)
        identity.check_data(trainer, self.comm, manifest, self.directory)
        virtual = capabilities.virtual_ranks(self.comm)
        resharding.check_virtual(manifest, virtual, self.directory)
        resized = manifest['ranks'] != self.size
        batch_note = ''
        if resized:
            resharding.check_replicas(self.comm, self.place, manifest, self.trusted,
                                      resharding.persistent_keys(trainer)
                                      if virtual is not None else frozenset())
            if virtual is None:   # virtual ranks: the same job, nothing rescaled
                batch_note = self.rule.apply(trainer, manifest, self.size, self.directory,
                                             self.lr_rule)
        self._load(trainer, manifest, resized, virtual)
        self.resumed_at = manifest['iteration']
        if failures:
            report.say('the latest checkpoint in {} is damaged ({}); falling back to the '
                       'newest complete one'.format(self.directory, '; then '.join(failures)),
                       self.rank)
        report.say('resumed from {} at iteration {}{}'.format(
            self.directory, manifest['iteration'], '' if not resized else
            ', written by {} ranks, on {}: parameters and optimizer state from rank 0\'s '
            'replica (all {} identical), {}'.format(
                manifest['ranks'], self.size, manifest['ranks'],
                'the data re-sharded, each rank\'s place in the epoch kept as a fraction'
                + batch_note if virtual is None else f'{virtual} virtual ranks, each taken '
                'over from the rank that held it (nothing rescaled)')), self.rank)
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
            (files.MANIFEST in files.names(self.place), files.manifests(self.place))
            if self.rank == 0 else None)
        pending = [files.MANIFEST] if hint or not complete else [n for _, n in complete]
        failures, tried = [], set()
        while pending:
            name = pending.pop(0)
            problem, manifest, fatal = self._agree_on(name, layout)
            if problem is None and name == files.MANIFEST:
                newer = [n for it, n in complete if it > manifest['iteration']]
                if newer:
                    self._say_newer(manifest['iteration'], newer[0])
                    pending = newer + [files.manifest_name(manifest['iteration'])]
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
                        f' ({len(older + pending)} older checkpoint(s) kept there: --auto-resume '
                        'falls back '
                        'to the newest that is complete)'))
            if name == files.MANIFEST:
                pending = older
        raise CheckpointError('chainermn_torus: cannot resume from {!r}: {}'.format(
            self.directory, '; then '.join(failures)))

    def _say_newer(self, iteration, newest):
        report.say(f'{files.MANIFEST} names iteration {iteration}, but a newer checkpoint is '
                   f'complete in {self.directory} ({newest}: the '
                   'job ended before latest.json was rewritten); resuming from the newest '
                   'that passes',
                   self.rank)

    def _load(self, trainer, manifest, resized, virtual=None):
        """Every rank loads its file (with virtual ranks, the files of the ranks that held
        its virtual ranks); a verified file that does not load stops every rank."""
        source = self.rank % manifest['ranks']  # new rank 0 reads old rank 0 (its reports)
        name = manifest['files'][source]
        path = os.path.join(self.directory, name)
        problem = None
        try:
            if virtual is not None:
                sources = resharding.virtual_sources(virtual, manifest['ranks'], self.size,
                                                     self.rank)
                stored_ranks = {}
                for q in sorted({q for q, _, _ in sources}):
                    name = manifest['files'][q]
                    path = os.path.join(self.directory, name)
                    with os.fdopen(files.open_rank_file(self.place, name, self.trusted),
                                   'rb') as f, stored.RankFile(f) as z:
                        stored_ranks[q] = {k: z[k] for k in z.files}
                resharding.load_virtual(stored_ranks, trainer, sources)
            else:
                with os.fdopen(files.open_rank_file(self.place, name, self.trusted),
                               'rb') as f:
                    if resized:
                        resharding.load_resharded(f, trainer, manifest['ranks'], self.size,
                                                  self.rank)
                    else:
                        resharding.load_same(f, trainer)
        except Exception as e:  # verified, yet it does not load: say which file and why
            problem = f'rank {self.rank}: {path}: {type(e).__name__}: {e}'
            if 'broadcast' in str(e) or 'shape' in str(e):
                problem += (' (an array in the checkpoint has another shape than in this job: '
                            'it was written with other data or options, such as --limit or '
                            'the training set, than this job uses)')
        agree.raise_everywhere(self.comm.mpi_comm, problem, lambda bad: CheckpointError(
            f'chainermn_torus: cannot resume from {self.directory!r}: {bad[0][1]}'))

    def _agree_on(self, name, layout):
        """(problem, manifest, fatal), the same on every rank: rank 0 reads the manifest,
        every rank verifies its share of the files (its own at the same rank count; at
        another, stored ranks r with r % size == rank)."""
        found = files.read_manifest(self.place, name, layout, self.trusted) \
            if self.rank == 0 else None
        problem, manifest, fatal = self.comm.mpi_comm.bcast(found)
        if problem is not None:
            return problem, manifest, fatal
        problem = next(filter(None, (
            files.verify_file(self.place, manifest, manifest['files'][r], self.rank,
                              self.trusted, self._expected, max(self.size, manifest['ranks']))
            for r in range(self.rank, manifest['ranks'], self.size))), None)
        bad = agree.problems(self.comm.mpi_comm, problem)
        if bad:
            return ('checkpoint at iteration {}: {} rank file(s) damaged, the first: {}'.format(
                manifest['iteration'], len(bad), bad[0][1]), manifest, False)
        return None, manifest, False
