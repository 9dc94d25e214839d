"""What ``Trainer.extend`` does under the launcher. With ``--data-parallel``: extensions that
write files or print for the whole job run on rank 0 only, a snapshot's autoload runs on
every rank, an ``Evaluator`` becomes a multi-node evaluator over each rank's shard. With
``--loader-eval``: every evaluator's iterators are rebuilt as ``--loader`` says."""
import os

import chainermn
from chainer.training import extensions
from chainer.training.extensions._snapshot import _find_latest_snapshot

from chainermn_torus.extensions.checkpoint import arrays
from chainermn_torus.extensions.checkpoint.arrays import CheckpointError
from chainermn_torus.extensions import outputs
from chainermn_torus.launch import loaders
from chainermn_torus.launch.lines import PREFIX, say
from chainermn_torus.launch.sharding import rebuild, shard
from chainermn_torus.runtime import report
from chainermn_torus.runtime.chainer_glue import chainer_private, patches

__all__ = ['Extend', 'RANK0_ONLY']

# Extensions that write files or print for the whole job: rank 0 only.
RANK0_ONLY = ('LogReport', 'PrintReport', 'PlotReport', 'ProgressBar', 'DumpGraph',
              '_Snapshot', 'VariableStatisticsPlot')


class Extend:
    """``Trainer.extend`` for one launch (``original``: Chainer's)."""

    def __init__(self, launch, original):
        self.launch, self.original = launch, original
        self.skipped = []

    def __call__(self, trainer, extension, *args, **kwargs):
        launch = self.launch
        kind = type(extension).__name__
        evaluator = isinstance(extension, extensions.Evaluator)
        if launch.get('data_parallel'):
            comm = launch.comm()
            if kind == '_Snapshot' and getattr(extension, 'autoload', False):
                # Rank 0 alone would resume and run fewer steps than the others: a
                # deadlock. Every rank loads the same snapshot (rank 0 still writes), and
                # without pickle: the snapshot's own load is turned off.
                patches.apply(extension, 'autoload', False, 'launcher',
                              'every rank loads the snapshot, without pickle '
                              '(AutoloadEverywhere)')
                self.original(trainer, AutoloadEverywhere(extension, comm),
                              name='chainermn_torus_autoload')
            if kind in RANK0_ONLY:
                if kind not in self.skipped:
                    self.skipped.append(kind)
                    say('--data-parallel: {} runs on rank 0 only'.format(
                        'snapshot' if kind == '_Snapshot' else kind), comm.rank)
                if comm.rank != 0:
                    return None
            elif evaluator and not chainer_private.is_multi_node_evaluator(extension):
                extension = _evaluate_in_parallel(extension, comm, launch.virtual)
        if evaluator and launch.get('loader_eval'):
            loaders.replace_eval_iterators(launch, extension)
        if isinstance(extension, extensions.LogReport) or kind == '_Snapshot':
            # Into trainer.out walked, judged and held; a log's name holding another user's
            # file, a link or a FIFO is refused now, before training (extensions.outputs).
            place = outputs.hold(trainer.out, launch.get('trust_out_dir'))
            name = getattr(extension, '_log_name', None)
            if isinstance(name, str) and '{' not in name:
                outputs.refuse_foreign(place, [name])
            outputs.hold_reports(extension, place)
        return self.original(trainer, extension, *args, **kwargs)


def _evaluate_in_parallel(evaluator, comm, virtual):
    its = chainer_private.iterators(evaluator)
    if virtual is not None:   # --virtual-ranks: each held virtual rank's shard
        return virtual.evaluator(evaluator, comm,
                                 virtual.cut(its['main'].dataset, comm, shuffle=False))
    for name, it in list(its.items()):
        its[name] = rebuild(it, shard(it.dataset, comm, shuffle=False), it.batch_size)
    say(f'--data-parallel: {type(evaluator).__name__} -> each rank evaluates its shard, the '
        'results averaged '
        '(chainermn.create_multi_node_evaluator)', comm.rank)
    return chainermn.create_multi_node_evaluator(evaluator, comm)


class AutoloadEverywhere:
    """The loading half of ``snapshot(autoload=True)`` on every rank, under --data-parallel.

    The snapshot extension itself runs on rank 0 only (one writer). Its autoload would resume
    rank 0 alone; here every rank checks that it sees the snapshot rank 0 sees (a node-local
    ``out`` directory would not) and loads it, so all ranks resume at the same iteration.
    """
    trigger = (1, 'iteration')
    priority = 300  # Extension's PRIORITY_WRITER: initialised before the readers

    def __init__(self, snapshot, comm):
        self.snapshot, self.comm = snapshot, comm

    def initialize(self, trainer):
        found = _find_latest_snapshot(self.snapshot.filename, trainer.out)
        everyone = self.comm.mpi_comm.allgather(found)
        if len(set(everyone)) != 1:
            report.stop(
                '{}--data-parallel: snapshot(autoload=True) finds different snapshots in {} on '
                'different ranks ({}); every rank must resume from the same one: put the '
                "trainer's out directory on a file system all nodes share".format(
                    PREFIX, trainer.out, ', '.join(
                        'rank {}: {}'.format(r, f or 'none') for r, f in enumerate(everyone))),
                self.comm.rank)
        if found is not None:  # the snapshot's own autoload is off (Extend)
            target = self.snapshot._target or trainer
            try:
                arrays.load_npz(os.path.join(trainer.out, found), target)
            except CheckpointError as e:  # an object array: never unpickled
                report.stop(str(e), self.comm.rank)
        if found is not None:
            say(f'--data-parallel: every rank resumes from {found} (snapshot autoload)',
                self.comm.rank)

    def __call__(self, trainer):
        pass
