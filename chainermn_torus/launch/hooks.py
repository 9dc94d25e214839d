"""The places the launcher hooks into Chainer, each wrapping the original:

* ``StandardUpdater.__init__``: counts updaters, and hands each to ``--data-parallel``
  (``sharding``) and ``--loader`` (``loaders``);
* ``Trainer.extend``: ``extensions.Extend``;
* ``GradientMethod.update``, until a StandardUpdater is built: a plain optimizer's update()
  means a custom loop the launcher cannot parallelise; stop instead of training P copies
  apart;
* ``Trainer.run`` under --memory-snapshots: the snapshot in node memory added to the
  script's trainer, and restored from where every rank holds one (a supervisor's step after
  a lost node), before the script's training starts;
* ``chainer.serializers.save_npz`` under --data-parallel: rank 0 writes, the others skip (the
  script's own ``save_npz(path, model)`` at its end ran on every rank, all writing one file
  at once: a corrupt archive, seen in a 2-rank run).
"""
import chainer.serializers
from chainer import optimizer as optimizer_module
from chainer import training
from chainer.training.updaters import standard_updater

from chainermn_torus.extensions.checkpoint import in_memory
from chainermn_torus.extensions.checkpoint.files import CheckpointError
from chainermn_torus.launch import loaders, sharding
from chainermn_torus.launch.extensions import Extend
from chainermn_torus.launch.lines import say
from chainermn_torus.runtime import report
from chainermn_torus.runtime.chainer_glue import chainer_private, patches

__all__ = ['patch_updater', 'patch_trainer', 'patch_plain_update', 'patch_save',
           'patch_trainer_run']


def patch_updater(launch):
    cls = standard_updater.StandardUpdater
    original = cls.__init__

    def __init__(updater, iterator, optimizer, *args, **kwargs):
        original(updater, iterator, optimizer, *args, **kwargs)
        launch.updaters += 1
        if launch.get('data_parallel'):
            sharding.parallelise(launch, updater)
        if launch.loader_kind(chainer_private.iterators(updater).get('main')) is not None:
            loaders.replace_training_iterator(launch, updater)

    __init__.__wrapped__ = original
    patches.apply(cls, '__init__', __init__, 'launcher',
                  '--loader / --data-parallel reach every updater the script makes')


def patch_trainer(launch):
    original = training.Trainer.extend
    extend = Extend(launch, original)

    def trainer_extend(trainer, extension, *args, **kwargs):
        return extend(trainer, extension, *args, **kwargs)

    trainer_extend.__wrapped__ = original
    patches.apply(training.Trainer, 'extend', trainer_extend, 'launcher',
                  '--data-parallel / --loader-eval reach the evaluators the script adds')


def patch_plain_update(launch):
    cls = optimizer_module.GradientMethod
    original = cls.update

    def update(opt, lossfun=None, *args, **kwds):
        if not launch.updaters:
            launch.stop('--data-parallel: the script updates {} itself (a custom training '
                        'loop, no Trainer and StandardUpdater), which the launcher cannot '
                        'parallelise safely; use a Trainer, or ChainerMN calls in the '
                        'script'.format(type(opt).__name__))
        patches.undo(patch)  # checked once: no cost per step afterwards
        return original(opt, lossfun, *args, **kwds)

    patch = patches.apply(cls, 'update', update, 'launcher',
                          '--data-parallel stops a custom loop it cannot parallelise')


def patch_save(launch):
    original = chainer.serializers.save_npz
    said = []

    def save_npz(file, obj, compression=True):
        rank = launch.comm().rank  # every rank saves at the same point of the script
        if not said:
            said.append(file)
            say('--data-parallel: chainer.serializers.save_npz({!r}) writes on rank 0 only '
                '(the replicas hold the same parameters)'.format(file), rank)
        if rank == 0:
            original(file, obj, compression)

    save_npz.__wrapped__ = original
    patches.apply(chainer.serializers, 'save_npz', save_npz, 'launcher',
                  "--data-parallel: one writer for the script's own save_npz")


def _has_snapshot(trainer):
    """Whether the script's own --memory-snapshots (the examples', the same setting) added
    one: by its name, which Chainer gives the first of its kind."""
    try:
        trainer.get_extension(in_memory.MemorySnapshot.name)
    except ValueError:
        return False
    return True


def patch_trainer_run(launch):
    original = training.Trainer.run

    def run(trainer, *args, **kwargs):
        launch.trainer_runs += 1
        if not _has_snapshot(trainer) and \
                not getattr(trainer, '_chainermn_torus_memory', False):
            trainer._chainermn_torus_memory = True
            comm = launch.comm()
            try:
                snapshot = in_memory.MemorySnapshot.for_trainer(comm, trainer, restore=True)
            except CheckpointError as e:  # alike on every rank (it is collective)
                report.stop(str(e), comm.rank)
            trainer.extend(snapshot, trigger=(launch.get('memory_snapshots'), 'iteration'))
            try:
                snapshot.restore(trainer, missing_ok=True)
            except CheckpointError as e:  # alike on every rank (restore is collective)
                report.stop(str(e), comm.rank)
        return original(trainer, *args, **kwargs)

    run.__wrapped__ = original
    patches.apply(training.Trainer, 'run', run, 'launcher',
                  "--memory-snapshots: the script's Trainer keeps snapshots in node memory "
                  'and starts from them')
