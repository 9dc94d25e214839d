"""Snapshots in node memory, so that the survivors of a lost node can go on.

Every node of a data-parallel job holds the whole model and optimizer; what a resharded
resume needs beyond that is each rank's small state (its iterator's place and order, the
numpy random state). So every ``trigger`` iterations:

* every rank's small state is gathered to every rank (``Allgatherv`` of bytes: no pickle),
  so that any set of survivors holds every stored rank's;
* each node's first rank writes, into the run's directory on that node (its own, found by
  its token: ``snapshot_place``; held as a checkpoint directory is), one generation
  ``gen_<I>/``: ``replica.npz`` (parameters and optimizer state, once per node),
  ``rank<R>.npz`` for every stored rank, then ``manifest.json`` last (sizes and
  CRC-32s of each file, the rank count, what ``identity.described`` records);
* ``keep`` generations stay (two: a loss while the newest is being written leaves the one
  before complete).

``restore`` (collective, on the survivors' communicator) takes the newest generation every
rank finds complete in its node's directory (each file checked against the manifest, as a
disk checkpoint's are), checks the replicas agree across nodes, and loads, through the same
resharding as ``--auto-resume`` (``resharding.load_same`` / ``load_resharded``) and under
the same global-batch rule: new rank r takes stored rank r mod P's state, so the result is
that of a disk checkpoint written at the same iteration and resumed on the same ranks, bit
for bit.

``directory`` (``--memory-dir``, the parent of the run's directory; default
``snapshot_place.default_parent``) may hold ``{host}``, filled with this node's host name,
or ``{node}``, this rank's node index (ChainerMN's ``inter_rank``; the tests). The run's
directory has the host in its name, so nodes that share a file system, as emulated ones do,
each keep their own.

A generation that cannot be written (the room checked before it was taken meanwhile, any
OSError) is skipped on every rank, its partial files removed, said once; training goes on.
Only where the node's file system could never hold one does the job end, in one line.
Training is complete, and the run's directory removed, only where the trainer's stop
trigger fired: an error or a signal (SIGTERM, SIGINT) leaves the snapshots.
"""
import io
import json
import os
import socket

import chainer
import numpy

from chainermn_torus import settings_table
from chainermn_torus.communicators import capabilities
from chainermn_torus.errors import ConfigError, UnsafePath
from chainermn_torus.extensions.checkpoint import arrays as stored
from chainermn_torus.extensions.checkpoint import elastic_lines, files, identity, resharding
from chainermn_torus.extensions.checkpoint import rules, snapshot_place
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.runtime import agree, report
from chainermn_torus.runtime.files import devshm

__all__ = ['MemorySnapshot', 'GENERATION', 'REPLICA', 'DEFAULT_K', 'split',
           'manifest_problem']

GENERATION = 'gen_{}'
REPLICA = 'replica.npz'
MANIFEST = 'manifest.json'
_RANK = 'rank{}.npz'
_FORMAT = 1
# Snapshots every this many iterations where a job asks for them without a count: one took
# 64.5 ms against a step of 47.9 ms (MNIST, 2 ranks): 1.3% at K = 100
# (docs/measurements/elastic/).
DEFAULT_K = 100


def split(state):
    """(replica, small): a rank's saved arrays as what every replica holds alike
    (parameters, optimizer state) and what is its own."""
    replica = {k: v for k, v in state.items() if k.startswith(files.REPLICA_PREFIXES)}
    return replica, {k: v for k, v in state.items() if k not in replica}


def _npz_bytes(arrays):
    out = io.BytesIO()
    numpy.savez(out, **arrays)
    return out.getvalue()


def _allgather_bytes(mpi_comm, data):
    """Every rank's ``data`` (bytes), in rank order, on every rank; no pickle."""
    from mpi4py import MPI
    sizes = numpy.array(mpi_comm.allgather(len(data)), dtype=numpy.int64)
    out = numpy.empty(int(sizes.sum()), dtype=numpy.uint8)
    offsets = numpy.concatenate([[0], numpy.cumsum(sizes)[:-1]]).astype(numpy.int64)
    mpi_comm.Allgatherv([numpy.frombuffer(data, dtype=numpy.uint8), MPI.BYTE],
                        [out, sizes, offsets, MPI.BYTE])
    return [out[o:o + s].tobytes() for o, s in zip(offsets, sizes)]


def manifest_problem(data, generation):
    """What in ``data`` is not a snapshot manifest of generation ``generation``, or None."""
    if not isinstance(data, dict) or data.get('format') != _FORMAT:
        return f'not a chainermn-torus snapshot manifest of format {_FORMAT}'
    it, ranks = data.get('iteration'), data.get('ranks')
    if type(it) is not int or it != generation:
        return f"'iteration' is {it!r}, not {generation}"
    if type(ranks) is not int or ranks < 1:
        return f"'ranks' is {ranks!r}, not a rank count >= 1"
    checks = data.get('checks')
    want = {REPLICA} | {_RANK.format(r) for r in range(ranks)}
    if not isinstance(checks, dict) or set(checks) != want:
        return f"'checks' does not name the replica and the {ranks} rank files"
    for name, check in checks.items():
        if not (isinstance(check, dict) and type(check.get('bytes')) is int and
                type(check.get('crc32')) is int):
            return f'the check of {name} is {check!r}, not a byte count and a CRC-32'
    if not isinstance(data.get('model'), list):
        return "no 'model'"
    return None


class _Watched:
    """A trainer's stop trigger that remembers whether it fired (the rest is the
    trigger's own: Chainer's extensions ask it for the training length)."""

    def __init__(self, trigger):
        self.trigger, self.fired = trigger, False

    def __call__(self, trainer):
        self.fired = bool(self.trigger(trainer))
        return self.fired

    def __getattr__(self, name):
        if name == 'trigger':  # not yet set (a copy being made)
            raise AttributeError(name)
        return getattr(self.trigger, name)


class MemorySnapshot(chainer.training.Extension):
    """The trainer extension (module doc): ``trainer.extend(snapshot, trigger=(K,
    'iteration'))``; ``restore(trainer)`` on the survivors."""

    priority = chainer.training.PRIORITY_READER - 1
    name = 'chainermn_torus_memory_snapshot'

    def __init__(self, comm, directory=None, keep=2, batch='keep', lr_rule=None, nodes=None,
                 token=None, first=None, elastic_step=None):
        if int(keep) != keep or keep < 1:
            raise ConfigError(f'chainermn_torus: keep must be a count >= 1, got {keep!r}')
        self.comm, self.keep, self.lr_rule = comm, int(keep), lr_rule
        self.elastic_step = elastic_step  # a step of chainermn-torus elastic: its lines said
        self.rule = rules.get(batch, lr_rule)
        # ``nodes``: each rank's node index (tests emulating nodes); else ChainerMN's.
        if nodes is None:
            self.node, self.leader = comm.inter_rank, comm.intra_rank == 0
        else:
            self.node = nodes[comm.rank]
            self.leader = nodes.index(self.node) == comm.rank
        # The run's token (snapshot_place): a new run's is rank 0's, the same everywhere.
        self.first = token is None if first is None else bool(first)
        if token is None:
            token = comm.mpi_comm.bcast(snapshot_place.new_token() if comm.rank == 0
                                        else None)
        if not snapshot_place.is_token(token):
            raise ConfigError('chainermn_torus: a snapshot token is 32 hex digits, got '
                              f'{token!r}')
        self.token, self.pattern = token, directory
        self.directory = None  # the run's directory on this node, once made or opened
        self._stopped = None  # the stop trigger, watched: did it fire (finalize)?
        self._failed = False
        self.skipped = []  # the iterations whose snapshot could not be kept
        self.place = None
        # A node's first rank makes the run's directory (new at a run's first step), then
        # its other ranks open what it made.
        for turn in (True, False):
            problem = None
            if self.leader == turn:
                try:
                    self.place, self.directory, note = snapshot_place.open_run(
                        directory, token, socket.gethostname(), self.node, self.first,
                        create=turn)
                    if note:
                        report.say(note, 0)
                except OSError as e:
                    problem = str(e).replace('chainermn_torus: ', '', 1) \
                        if isinstance(e, UnsafePath) else f'{type(e).__name__}: {e}'
            agree.raise_everywhere(comm.mpi_comm, problem, lambda bad: CheckpointError(
                f'chainermn_torus: cannot keep snapshots in node memory in {self.shown()!r} '
                f'(rank(s) {agree.ranks_text(bad)}): '
                f'{bad[0][1]}'))
        self._trainer = None
        elastic_lines.say(elastic_lines.KEEPING, comm.rank, elastic_step,
                          directory=self.shown())

    def shown(self):
        """Where the run's snapshots are, as said to the user and the supervisor: the
        parent, not the run's name in it (module doc of snapshot_place)."""
        return self.pattern or snapshot_place.default_parent()

    @classmethod
    def for_trainer(cls, comm, trainer, directory=None, restore=False, elastic_step=None,
                    trusted=False, **kwargs):
        """Collective: the snapshot of ``trainer``'s run, its token found as
        ``snapshot_place`` says (the supervisor's run, else the output directory's token
        file: read where ``restore``, else a new one kept there). ``elastic_step``: the
        settings' (run, step) of ``chainermn-torus elastic``, or None; ``trusted``: the
        output directory's trust setting (both handed down by the entry point)."""
        step = elastic_step
        if step is not None:
            return cls(comm, directory, token=snapshot_place.from_run(step[0]),
                       first=int(step[1]) == 0, elastic_step=step, **kwargs)
        token, problem = None, None
        if comm.rank == 0:
            try:
                token = snapshot_place.read_token(trainer.out, trusted) if restore \
                    else None
                first = token is None
                if first:
                    token = snapshot_place.new_token()
                    snapshot_place.write_token(trainer.out, token, trusted)
            except (OSError, ValueError) as e:
                problem = str(e).replace('chainermn_torus: ', '', 1)
        agree.raise_everywhere(comm.mpi_comm, problem, lambda bad: CheckpointError(
            f'chainermn_torus: cannot find this run\'s snapshots in node memory: {bad[0][1]}; '
            'remove '
            'that file to start a new run'))
        token, first = comm.mpi_comm.bcast((token, token is not None and first)
                                           if comm.rank == 0 else None)
        return cls(comm, directory, token=token, first=first, **kwargs)

    def initialize(self, trainer):
        self._trainer = trainer  # finalize says where training ended
        # Training is complete only where the stop trigger said so: a SIGTERM or SIGINT
        # (a BaseException, which Trainer.run passes to no on_error) also ends in finalize.
        if not isinstance(trainer.stop_trigger, _Watched):
            trainer.stop_trigger = _Watched(trainer.stop_trigger)
        self._stopped = trainer.stop_trigger

    def __call__(self, trainer):
        self.save(trainer)

    def on_error(self, trainer, exc, tb):
        self._failed = True  # the snapshots are what a supervisor's next step needs

    def finalize(self):
        """Training ended because its stop trigger fired: this node's snapshots go. Any
        other end (an error, a signal) leaves them for the step that goes on after it."""
        if self._failed or self.place is None or self._stopped is None or \
                not self._stopped.fired:
            return
        elastic_lines.say(elastic_lines.COMPLETE, self.comm.rank, self.elastic_step,
                          iteration=self._trainer.updater.iteration)
        if not self.leader:
            return
        self.place.close()
        self.place = None
        try:
            snapshot_place.remove_run(self.directory)
        except OSError:  # something not of this user's in it: left, as it is
            pass

    # --- saving -----------------------------------------------------------------------------
    def save(self, trainer):
        """Collective: this iteration's generation on every node (module doc)."""
        iteration = trainer.updater.iteration
        ser = chainer.serializers.DictionarySerializer()
        ser.save(trainer)
        state = stored.for_saving(dict(ser.target,
                                       **resharding.rng_arrays(numpy.random.get_state())))
        replica, small = split(state)
        smalls = _allgather_bytes(self.comm.mpi_comm, _npz_bytes(small))
        described = identity.described(trainer, self.comm)
        replica_bytes, short, never = None, None, None
        if self.leader:  # the one rank of the node that writes the replica serializes it
            replica_bytes = _npz_bytes(replica)
            need = sum(devshm.pages(len(b)) for b in [replica_bytes] + smalls) + (64 << 10)
            st = os.fstatvfs(self.place.fd)
            where = f'{self.shown()} on {socket.gethostname()}'
            if st.f_blocks * st.f_frsize < need:
                never = (f'{report.format_bytes(need)} needed in {where}, which '
                         f'holds {report.format_bytes(st.f_blocks * st.f_frsize)} in all')
            elif st.f_bavail * st.f_frsize < need:
                short = (f'{report.format_bytes(need)} needed '
                         f'in {where}, {report.format_bytes(st.f_bavail * st.f_frsize)} free')
        agree.raise_everywhere(self.comm.mpi_comm, never, lambda bad: CheckpointError(
            f'chainermn_torus: no snapshot in node memory can ever be kept: {bad[0][1]} '
            f'(rank(s) {agree.ranks_text(bad)}); '
            'keep fewer ranks per node, give --memory-dir a larger place, or leave out '
            '--memory-snapshots'))
        problem = short
        if self.leader and short is None:
            try:
                self._write(iteration, replica_bytes, smalls, described)
            except OSError as e:  # the room changed after the check (another job's files)
                problem = f'{type(e).__name__}: {e.strerror or e}'
                try:
                    files.remove_tree(self.place, GENERATION.format(iteration))
                except OSError:
                    pass
        lacking = agree.problems(self.comm.mpi_comm, problem)
        if lacking:  # a safety net, not the job: training goes on, the one before stays
            self.skipped.append(iteration)
            report.say(f'snapshot {iteration} in node memory not kept: {lacking[0][1]} '
                       f'(rank(s) {agree.ranks_text(lacking)}); its partial '
                       'files removed, the one before stays, training goes on',
                       self.comm.rank)

    def _write(self, iteration, replica_bytes, smalls, described):
        name = GENERATION.format(iteration)
        files.remove_tree(self.place, name)  # a half-written one of a job that ended
        with self.place.subdirectory(name, create=True) as gen:
            checks = {}
            for fname, data in [(REPLICA, replica_bytes)] + [
                    (_RANK.format(r), b) for r, b in enumerate(smalls)]:
                gen.write_atomic(fname, lambda f, data=data: f.write(data))
                checks[fname] = {'bytes': len(data), 'crc32': files.crc32(io.BytesIO(data))}
            text = json.dumps(dict(described, format=_FORMAT, iteration=iteration,
                                   ranks=len(smalls), checks=checks), indent=1).encode()
            gen.write_atomic(MANIFEST, lambda f: f.write(text))
        for old in self.generations()[self.keep:]:
            files.remove_tree(self.place, GENERATION.format(old))

    def generations(self):
        """The iterations of the generations in this node's directory, newest first."""
        out = []
        for n in files.names(self.place):
            if n.startswith('gen_') and n[4:].isdigit():
                out.append(int(n[4:]))
        return sorted(out, reverse=True)

    # --- restoring --------------------------------------------------------------------------
    def _complete(self, iteration, sources):
        """(manifest, {file: bytes}) of generation ``iteration`` as this rank needs it: the
        replica and the stored ranks ``sources(manifest)`` names once it is read; or a
        problem string."""
        try:
            with self.place.subdirectory(GENERATION.format(iteration)) as gen:
                data = json.loads(gen.read_bytes(MANIFEST, 'the snapshot manifest',
                                                 settings_table.BOUNDS['manifest']).decode('utf-8'))
                wrong = manifest_problem(data, iteration)
                if wrong:
                    return wrong
                picked = {}
                for fname in [REPLICA] + [_RANK.format(r) for r in sources(data)]:
                    check = data['checks'][fname]
                    content = gen.read_bytes(fname, 'the snapshot file', check['bytes'])
                    if len(content) != check['bytes'] or \
                            files.crc32(io.BytesIO(content)) != check['crc32']:
                        return f'{fname} does not match its size and CRC-32'
                    picked[fname] = content
                return data, picked
        except (OSError, ValueError) as e:
            return f'{type(e).__name__}: {e}'

    def restore(self, trainer, missing_ok=False):
        """Collective over this (the survivors') communicator: load the newest generation
        complete on every rank (newer ones that are not are said); returns its iteration.
        CheckpointError in one line where no generation is complete everywhere; with
        ``missing_ok``, where no rank holds any (the loss came before the first), None,
        said."""
        mpi = self.comm.mpi_comm
        held = mpi.allgather(self.generations())
        if missing_ok and not any(held):
            report.say(f'no snapshot in node memory ({self.shown()}) yet: starting as without '
                       '--restore-from-memory', self.comm.rank)
            return None
        common = set.intersection(*map(set, held))
        size, rank = self.comm.size, self.comm.rank
        tried = []
        for iteration in sorted(common, reverse=True):
            found = self._complete(iteration, self._sources)
            bad = agree.problems(mpi, found if isinstance(found, str) else None)
            if bad:
                tried.append('generation {}: rank {}: {}'.format(iteration, *bad[0]))
                continue
            manifest, picked = found
            note = self._load(trainer, manifest, picked)
            report.say('resumed from node memory ({}) at iteration {}, written by {} ranks, '
                       'on {}{}{}'.format(self.shown(), iteration, manifest['ranks'], size,
                                          note, '' if not tried else '; newer ones passed '
                                          'over: ' + '; '.join(tried)), rank)
            elastic_lines.after_restore(trainer, rank, self.elastic_step)
            return iteration
        raise CheckpointError(
            'chainermn_torus: no snapshot in node memory is complete on every rank ({}{}); '
            'resume from a disk checkpoint instead (--checkpoint-dir with --auto-resume)'
            .format('generations held by all: none' if not common else '; '.join(tried),
                    '' if common else f'; each rank\'s: {held}'))

    def _sources(self, manifest):
        """The stored ranks this rank loads from: its virtual ranks' holders (the manifest's
        V, this job's V), else stored rank r mod the stored count."""
        virtual = capabilities.virtual_ranks(self.comm)
        if virtual is not None and manifest.get('virtual_ranks') == virtual:
            return sorted({q for q, _, _ in resharding.virtual_sources(
                virtual, manifest['ranks'], self.comm.size, self.comm.rank)})
        return [self.comm.rank % manifest['ranks']]

    def _load(self, trainer, manifest, picked):
        identity.check_optimizer(trainer, manifest, self.shown())
        identity.check_data(trainer, self.comm, manifest, self.shown())
        virtual = capabilities.virtual_ranks(self.comm)
        resharding.check_virtual(manifest, virtual, self.shown())
        with stored.RankFile(io.BytesIO(picked[REPLICA])) as z:
            replica = {k: z[k] for k in z.files}
        smalls = {}
        for source in self._sources(manifest):
            with stored.RankFile(io.BytesIO(picked[_RANK.format(source)])) as z:
                smalls[source] = {k: z[k] for k in z.files}
        skip = resharding.persistent_keys(trainer) if virtual is not None else frozenset()
        digest = files.replica_digest(io.BytesIO(picked[REPLICA]), skip)
        groups, array = resharding.replica_groups(
            dict(enumerate(self.comm.mpi_comm.allgather(digest))))
        if array is not None:
            raise CheckpointError(
                'chainermn_torus: the nodes\' snapshots of iteration {} do not hold the same '
                'parameters and optimizer state (the first array that differs: {})'.format(
                    manifest['iteration'], array))
        resized = manifest['ranks'] != self.comm.size
        if virtual is not None:   # the same V: each virtual rank taken over as it was
            sources = resharding.virtual_sources(virtual, manifest['ranks'], self.comm.size,
                                                 self.comm.rank)
            resharding.load_virtual({q: dict(replica, **small) for q, small in smalls.items()},
                                    trainer, sources)
            return '' if not resized else (f'; {virtual} virtual ranks, each taken over from '
                                           'the rank that held it (nothing rescaled)')
        note = self.rule.apply(trainer, manifest, self.comm.size, self.shown(),
                               self.lr_rule) if resized else ''
        small = smalls[self.comm.rank % manifest['ranks']]
        whole = io.BytesIO(_npz_bytes(stored.for_saving(dict(replica, **small))))
        if resized:
            resharding.load_resharded(whole, trainer, manifest['ranks'], self.comm.size,
                                      self.comm.rank)
        else:
            resharding.load_same(whole, trainer)
        return note

