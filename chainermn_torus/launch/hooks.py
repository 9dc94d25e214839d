"""The places the launcher hooks into Chainer, each wrapping the original:

* ``StandardUpdater.__init__``: counts updaters, and hands each to ``--data-parallel``
  (``sharding``), ``--virtual-ranks`` (``virtual``) and ``--loader`` (``loaders``);
* ``Trainer.extend``: ``extensions.Extend``;
* ``GradientMethod.update``, until a StandardUpdater is built: a plain optimizer's update()
  means a custom loop the launcher cannot parallelise; stop instead of training P copies
  apart;
* ``Trainer.run`` under --memory-snapshots and --checkpoint-dir: the snapshot in node memory
  and the disk checkpoint added to the script's trainer (``arguments.attach``, as the
  examples do), and restored from, before the script's training starts: node memory where
  every rank holds a snapshot (a supervisor's step after a lost node), else the newest
  checkpoint with --auto-resume;
* ChainerMN's ``scatter_dataset(..., shuffle=True)`` without a seed: the seed of the run
  (``shard_order``), so that a restart cuts the shards in the same order;
* under --virtual-ranks, ``scatter_dataset`` (every held virtual rank's shard) and
  ``create_multi_node_evaluator`` (the means over virtual ranks): ``launch.virtual``;
* ``chainer.serializers.save_npz`` under --data-parallel: rank 0 writes, the others skip (the
  script's own ``save_npz(path, model)`` at its end ran on every rank, all writing one file
  at once: a corrupt archive, seen in a 2-rank run).
"""
import types

import chainer.serializers
import chainermn.datasets
import chainermn.extensions
import chainermn.functions
from chainer import optimizer as optimizer_module
from chainer import training
from chainer.training.updaters import standard_updater

from chainermn_torus.errors import ConfigError
from chainermn_torus.extensions.checkpoint import arguments, in_memory, shard_order
from chainermn_torus.extensions.checkpoint.extension import MultiNodeCheckpointer
from chainermn_torus.launch import loaders, sharding
from chainermn_torus.launch.extensions import Extend
from chainermn_torus.launch.lines import PREFIX, say
from chainermn_torus.runtime.chainer_glue import chainer_private, patches

__all__ = ['patch_updater', 'patch_trainer', 'patch_plain_update', 'patch_save',
           'patch_trainer_run', 'patch_scatter', 'patch_evaluator_factory',
           'patch_model_parallel']


def patch_updater(launch):
    cls = standard_updater.StandardUpdater
    original = cls.__init__

    def __init__(updater, iterator, optimizer, *args, **kwargs):
        original(updater, iterator, optimizer, *args, **kwargs)
        launch.updaters += 1
        if launch.get('data_parallel'):
            sharding.parallelise(launch, updater)
        elif launch.virtual is not None and not launch.virtual.note_updater(updater):
            # a ChainerMN script: its scattered shards
            comm = launch.comm()
            old = chainer_private.iterators(updater)['main']
            launch.virtual.adopt(updater, old, launch.virtual.of(old, comm, 'training'),
                                 old.batch_size, comm)
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
            launch.stop(f'--data-parallel: the script updates {type(opt).__name__} itself (a '
                        'custom training '
                        'loop, no Trainer and StandardUpdater), which the launcher cannot '
                        'parallelise safely; use a Trainer, or ChainerMN calls in the '
                        'script')
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
            say(f'--data-parallel: chainer.serializers.save_npz({file!r}) writes on rank 0 only '
                '(the replicas hold the same parameters)', rank)
        if rank == 0:
            original(file, obj, compression)

    save_npz.__wrapped__ = original
    patches.apply(chainer.serializers, 'save_npz', save_npz, 'launcher',
                  "--data-parallel: one writer for the script's own save_npz")


def _has(trainer, name):
    """Whether the script (an example's own flags: the same settings) added the extension
    named ``name``, which Chainer gives the first of its kind."""
    try:
        trainer.get_extension(name)
    except ValueError:
        return False
    return True


def patch_trainer_run(launch):
    original = training.Trainer.run

    def run(trainer, *args, **kwargs):
        launch.trainer_runs += 1
        if not getattr(trainer, '_chainermn_torus_kept', False):
            trainer._chainermn_torus_kept = True
            memory = launch.get('memory_snapshots')
            disk = launch.get('checkpoint_dir')
            asked = types.SimpleNamespace(
                memory_snapshots=None if _has(trainer, in_memory.MemorySnapshot.name)
                else memory, memory_dir=None, restore_from_memory=True,
                checkpoint_dir=None if _has(trainer, MultiNodeCheckpointer.name) else disk,
                checkpoint_interval=launch.get('checkpoint_interval'), checkpoint_keep=2,
                trust_checkpoint_dir=launch.get('trust_checkpoints'), resume=False,
                auto_resume=launch.get('auto_resume'), resume_batch='keep')
            if asked.memory_snapshots or asked.checkpoint_dir:
                # ends every rank on a refusal
                arguments.attach(launch.comm(), trainer, asked, settings=launch.settings)
        return original(trainer, *args, **kwargs)

    run.__wrapped__ = original
    patches.apply(training.Trainer, 'run', run, 'launcher',
                  "--memory-snapshots / --checkpoint-dir: the script's Trainer keeps "
                  'snapshots in node memory and checkpoints on disk, and starts from them')


def patch_scatter(launch):
    """ChainerMN's scatter_dataset, either import path: an unseeded shuffle gets the run's
    seed (``shard_order``), said once on rank 0."""
    original = chainermn.datasets.scatter_dataset

    def scatter_dataset(dataset, comm, root=0, shuffle=False, seed=None, *args, **kwargs):
        if launch.virtual is not None:   # every held virtual rank's shard
            return launch.virtual.scatter(dataset, comm, root, shuffle, seed)
        if shuffle and seed is None and comm.rank == root:  # only the root draws
            if launch.run_seed is None:
                try:
                    launch.run_seed = shard_order.run_seed(launch.get('shuffle_seed'),
                                                           launch.get('checkpoint_dir'),
                                                           launch.get('trust_checkpoints'),
                                                           launch.get('elastic_step'))
                except (OSError, ValueError) as e:
                    # The root's alone (the other ranks wait in the scatter): an error,
                    # which ends the job (MPI_Abort) with this one line.
                    raise ConfigError(PREFIX + 'scatter_dataset(shuffle=True) without a seed: '
                                      "cannot keep the run's seed: {}".format(
                                          str(e).replace('chainermn_torus: ', '', 1))) from None
                say('scatter_dataset(shuffle=True) without a seed -> seed {}: the run\'s, {}'
                    .format(*launch.run_seed), comm.rank)
            seed = launch.run_seed[0]
        return original(dataset, comm, root, shuffle, seed, *args, **kwargs)

    scatter_dataset.__wrapped__ = original
    for owner in (chainermn, chainermn.datasets):
        patches.apply(owner, 'scatter_dataset', scatter_dataset, 'launcher',
                      "an unseeded shuffle draws the run's order, which a restart repeats")


def patch_evaluator_factory(launch):
    """--virtual-ranks: ChainerMN's create_multi_node_evaluator, either import path, makes
    the evaluator average over virtual ranks (``launch.virtual``)."""
    original = chainermn.create_multi_node_evaluator

    def create_multi_node_evaluator(actual_evaluator, communicator):
        return launch.virtual.evaluator(actual_evaluator, communicator)

    create_multi_node_evaluator.__wrapped__ = original
    for owner in (chainermn, chainermn.extensions):
        patches.apply(owner, 'create_multi_node_evaluator', create_multi_node_evaluator,
                      'launcher', '--virtual-ranks: the means over virtual ranks')


def patch_model_parallel(launch, names):
    """--virtual-ranks: ChainerMN's model-parallel functions (``names``) stop the job in one
    line where the script calls them: each communicates across processes inside a forward,
    and a process runs several virtual ranks' forwards in turn."""
    def refusing(name):
        def refused(*args, **kwargs):
            launch.stop(f'--virtual-ranks: the script calls chainermn.functions.{name}, '
                        'which communicates across processes inside the forward, and a '
                        'process runs several virtual ranks\' forwards one after the other; '
                        'model-parallel scripts run without --virtual-ranks')
        return refused

    for name in names:
        if hasattr(chainermn.functions, name):
            patches.apply(chainermn.functions, name, refusing(name), 'launcher',
                          '--virtual-ranks: model parallelism cannot be split into virtual '
                          'ranks')
