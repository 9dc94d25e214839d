"""What ``python -m chainermn_torus.run`` applies to an unchanged script, and the report of it.

A script written for ChainerMN makes its communicator, its multi-node optimizer and its
iterators itself. The launcher changes what those calls return, never the script:

* ``create_communicator(...)`` returns the communicator of ``--communicator`` (float16 on
  the wire with ``--fp16-allreduce``); the thread budget (``--threads``) is applied when it
  is made;
* ``create_multi_node_optimizer(...)`` (ChainerMN's name, either import path) returns ours
  with ``--fused`` (default auto: the fused kernel where one exists for the optimizer,
  Chainer's update otherwise), ``--flush-denormals``, ``--overlap``, ``--double-buffering``,
  ``--check-finite``, ``--check-replicas``, ``--watchdog``;
* the training iterator, the one a ``StandardUpdater`` is given, is rebuilt over the same
  dataset, batch size, repeat and shuffle as ``--loader serial|multiprocess|ours``; ``ours``
  is the loader-process iterator placed by ``--affinity`` (``runtime``: the compute process
  is pinned and its BLAS threads sized). The evaluation iterators are left alone unless
  ``--loader-eval`` asks: then every ``Evaluator``'s iterators are rebuilt the same way, their
  loader processes on the same loader CPUs (evaluation and training take turns);
* ``--timeline PREFIX`` records the phases.

Every substitution, and everything that could not be applied and why, is said once on rank
0, on lines starting ``chainermn_torus.run:``. A ``--loader`` that finds no updater to act on
(a custom training loop) stops the job at the first update, on every rank, with the reason.
Each option has an environment variable (``chainermn-torus config``) for job scripts.
"""
import argparse
import pickle

from chainermn_torus import config
from chainermn_torus.runtime import report

__all__ = ['add_arguments', 'Launch', 'ACTIVE', 'say']

PREFIX = 'chainermn_torus.run: '
ACTIVE = None  # the Launch of this process, when the script runs under the launcher

# (setting key, option, argparse keyword arguments)
_OPTIONS = [
    ('fused', '--fused', dict(type=config._arg('switch'), metavar='auto|on|off')),
    ('flush_denormals', '--flush-denormals', dict(action=argparse.BooleanOptionalAction)),
    ('double_buffering', '--double-buffering', dict(action=argparse.BooleanOptionalAction)),
    ('overlap', '--overlap', dict(action=argparse.BooleanOptionalAction)),
    ('fp16_allreduce', '--fp16-allreduce', dict(action=argparse.BooleanOptionalAction)),
    ('loader', '--loader', dict(type=config._arg('loader'), metavar='serial|multiprocess|ours')),
    ('loader_eval', '--loader-eval', dict(action=argparse.BooleanOptionalAction)),
    ('loader_processes', '--loader-processes', dict(type=config._arg('count'), metavar='K')),
    ('affinity', '--affinity', dict(type=config._arg('affinity'), metavar='POLICY')),
    ('dedicated_cores', '--dedicated-cores', dict(type=config._arg('count'), metavar='C')),
    ('watchdog', '--watchdog', dict(type=config._arg('seconds'), metavar='S')),
    ('check_replicas', '--check-replicas', dict(type=config._arg('count'), metavar='K')),
    ('check_finite', '--check-finite', dict(action=argparse.BooleanOptionalAction)),
    ('timeline', '--timeline', dict(metavar='PREFIX')),
    ('data_parallel', '--data-parallel', dict(action=argparse.BooleanOptionalAction)),
    ('global_batch', '--global-batch', dict(action=argparse.BooleanOptionalAction)),
]


def add_arguments(parser):
    """The options applied to the script's own objects (module doc)."""
    group = parser.add_argument_group(
        "applied to the script's communicator, optimizer and training iterator")
    for key, option, kwargs in _OPTIONS:
        s = config.SETTINGS[key]
        group.add_argument(option, dest=key, default=None, help='{} (or {})'.format(
            s.meaning.replace('launcher: ', '').replace('launcher, ', ''), s.env), **kwargs)
    group.add_argument('--no-fused', dest='fused', action='store_const', const=False,
                       help="Chainer's own update rules (same as --fused off)")
    return group


def say(line, rank=None):
    """One report line on rank 0 (rank: the caller's, else COMM_WORLD's)."""
    report.say(line, rank, prefix=PREFIX)


class Launch(object):
    """The resolved options (flag, else environment variable, else default) and their use."""

    def __init__(self, opts):
        self.values, self.given = {}, set()
        for key, option, _ in _OPTIONS:
            value, source = config.value(key, getattr(opts, key, None), option)
            self.values[key] = value
            if source is not None:  # a flag or an environment variable, not the default
                self.given.add(key)
        self.threads = getattr(opts, 'threads', None)
        self._plan = None          # the loader placement, made once for every loader
        self.updaters = 0          # StandardUpdaters the script made
        self.communicator = None   # the last communicator the factory made

    def get(self, key):
        return self.values[key]

    # --- installing ---------------------------------------------------------------------
    def install(self):
        global ACTIVE
        ACTIVE = self
        from chainermn_torus import _registry
        from chainermn_torus.optimizers import factory
        factory.set_overrides(self)  # options(), made(), first_update() below
        if self.get('fp16_allreduce'):
            import numpy
            _registry.add_forced_option('allreduce_grad_dtype', numpy.float16)
        _registry.on_create(self._communicator_made)
        if self.get('timeline'):
            from chainermn_torus.runtime import timeline
            timeline.enable(self.get('timeline'))
        import chainermn.optimizers
        # Either import path of ChainerMN's factory makes ours, with the launcher's options.
        chainermn.optimizers.create_multi_node_optimizer = _registry.create_multi_node_optimizer
        if self.get('loader') is not None or self.get('data_parallel'):
            self._patch_updater()
        if self.get('data_parallel') or self.get('loader_eval'):
            self._patch_trainer()
        if self.get('data_parallel'):
            self._patch_plain_update()
        elif self.get('global_batch'):
            raise ValueError('--global-batch goes with --data-parallel (the batch size of a '
                             "plain script's iterator); ChainerMN scripts choose theirs")
        if self.get('loader_eval') and self.get('loader') is None:
            raise ValueError('--loader-eval rebuilds the evaluation iterators as --loader '
                             'does; give --loader serial|multiprocess|ours with it')

    # --- the multi-node optimizers (the seam of optimizers.factory) -----------------------
    def options(self, actual_optimizer, options):
        """What the user gave the launcher wins over the script's own arguments; the
        launcher's defaults (fused auto) only fill in what the script left out. The
        launcher's fused choice never fails: an optimizer without a kernel is reported."""
        merged = dict({'fused': self.get('fused')}, **options)
        for key in ('fused', 'flush_denormals', 'double_buffering', 'overlap', 'check_finite',
                    'watchdog', 'check_replicas'):
            if key in self.given:
                merged[key] = self.get(key)
        merged['fused'] = _fused_choice(actual_optimizer, merged['fused'])
        return merged

    def made(self, name, communicator, options, fused_applied):
        report_optimizer(name, communicator, options, fused_applied)

    def first_update(self):
        self.check_update()

    def _communicator_made(self, comm, asked, made):
        self.communicator = comm
        from chainermn_torus.runtime import threads
        if self.threads is not None:
            threads.ensure(comm, self.threads)
        ours = hasattr(comm, 'describe')
        if asked != made or (self.get('fp16_allreduce') and ours):
            describe = comm.describe() if ours else type(comm).__name__
            say("create_communicator({!r}) -> {}{}".format(
                asked, describe, ' (forced by --communicator)' if asked != made else ''),
                comm.rank)
        if self.get('fp16_allreduce') and not ours:
            say("--fp16-allreduce not applied: create_communicator({!r}) made ChainerMN's {}, "
                'which sends float32 on CPU; add --communicator rsap (or rsaa, '
                'pure_allreduce)'.format(asked, type(comm).__name__), comm.rank)

    # --- the training iterator ----------------------------------------------------------
    def _patch_updater(self):
        from chainer.training.updaters import standard_updater
        cls = standard_updater.StandardUpdater
        original = cls.__init__
        launch = self

        def __init__(updater, iterator, optimizer, *args, **kwargs):
            original(updater, iterator, optimizer, *args, **kwargs)
            launch.updaters += 1
            if launch.get('data_parallel'):
                launch._parallelise(updater)
            if launch.get('loader') is not None:
                launch._replace_iterator(updater)

        __init__.__wrapped__ = original
        cls.__init__ = __init__

    def _replace_iterator(self, updater):
        from chainer import iterators
        old = updater._iterators.get('main')
        known = (iterators.SerialIterator, iterators.MultiprocessIterator,
                 iterators.MultithreadIterator)
        if not isinstance(old, known):
            from chainermn_torus.loader import LoaderIterator
            if isinstance(old, LoaderIterator):
                return
            self._stop("--loader {}: the training iterator is a {}, which the launcher does "
                       "not know how to rebuild (it rebuilds {}); remove --loader or build one "
                       "of those".format(self.get('loader'), type(old).__name__,
                                         ', '.join(k.__name__ for k in known)))
        say(self._swap(updater._iterators, 'main'), self._rank())

    def _swap(self, iterators, name):
        """Rebuild ``iterators[name]`` as ``--loader`` asks (same dataset, batch, repeat and
        shuffle), finalize the old one; the report text."""
        old = iterators[name]
        new, how = self._build(old.dataset, old.batch_size, *_order(old))
        if hasattr(old, 'finalize'):
            old.finalize()
        iterators[name] = new
        return '{} -> {}'.format(_describe_iterator(old), how)

    # --- --data-parallel: a plain Chainer script made data-parallel -----------------------
    def comm(self):
        """The job's communicator: the script's, else one made now (collective: every rank
        builds its updater at the same point of the script)."""
        if self.communicator is None:
            import chainermn
            chainermn.create_communicator('rsap')  # --communicator, if given, is forced
        return self.communicator

    def _parallelise(self, updater):
        from chainermn_torus import _registry
        if self.updaters > 1:
            self._stop('--data-parallel: this script builds a second updater; the launcher '
                       'parallelises scripts with one StandardUpdater and one Trainer (a GAN or '
                       'several training loops need ChainerMN calls in the script)')
        kind = type(updater).__name__
        if kind in ('ParallelUpdater', 'MultiprocessParallelUpdater'):
            # Each splits every batch among the GPUs of one process; data-parallel across
            # ranks replaces that, it does not nest inside it.
            self._stop('--data-parallel: this script trains with {}, which splits each batch '
                       'among GPU devices in one process; on CPU ranks use the script with a '
                       'StandardUpdater (each rank is one replica), or ChainerMN calls in the '
                       'script'.format(kind))
        comm = self.comm()
        old = updater._iterators['main']
        dataset = old.dataset
        batch = old.batch_size
        if self.get('global_batch'):
            if batch % comm.size:
                self._stop('--global-batch: the batch size {} does not divide among {} ranks; '
                           'choose a multiple of {} or leave --global-batch out (then {} is '
                           'per rank)'.format(batch, comm.size, comm.size, batch))
            batch //= comm.size
        shard = _shard(dataset, comm, shuffle=True)
        updater._iterators['main'] = _rebuild(old, shard, batch)
        for name, opt in list(updater._optimizers.items()):
            if not hasattr(opt, 'communicator'):
                updater._optimizers[name] = _registry.create_multi_node_optimizer(
                    opt, comm)
        say('--data-parallel: {} examples -> {} per rank (shuffled shards, as '
            'chainermn.scatter_dataset); batch {} per rank, {} in all on {} ranks ({}); the '
            'initial parameters are broadcast from rank 0 at the first update'.format(
                len(dataset), len(shard), batch, batch * comm.size, comm.size,
                'the script\'s batch divided: --global-batch' if self.get('global_batch')
                else 'as ChainerMN: the script\'s batch is per rank; --global-batch divides it'),
            comm.rank)

    # Extensions that write files or print for the whole job: rank 0 only.
    RANK0_ONLY = ('LogReport', 'PrintReport', 'PlotReport', 'ProgressBar', 'DumpGraph',
                  '_Snapshot', 'VariableStatisticsPlot')

    def _patch_trainer(self):
        from chainer import training
        original = training.Trainer.extend
        launch = self
        skipped = []

        def extend(trainer, extension, *args, **kwargs):
            from chainer.training import extensions
            kind = type(extension).__name__
            evaluator = isinstance(extension, extensions.Evaluator)
            if launch.get('data_parallel'):
                comm = launch.comm()
                if kind == '_Snapshot' and getattr(extension, 'autoload', False):
                    # Rank 0 alone would resume and run fewer steps than the others: a
                    # deadlock. Every rank loads the same snapshot (rank 0 still writes).
                    original(trainer, _AutoloadEverywhere(extension, comm),
                             name='chainermn_torus_autoload')
                if kind in launch.RANK0_ONLY:
                    if kind not in skipped:
                        skipped.append(kind)
                        say('--data-parallel: {} runs on rank 0 only'.format(
                            'snapshot' if kind == '_Snapshot' else kind), comm.rank)
                    if comm.rank != 0:
                        return None
                elif evaluator and not hasattr(extension, '_mn_communicator'):
                    extension = launch._evaluate_in_parallel(extension, comm)
            if evaluator and launch.get('loader_eval'):
                launch._replace_eval_iterators(extension)
            return original(trainer, extension, *args, **kwargs)

        extend.__wrapped__ = original
        training.Trainer.extend = extend

    def _evaluate_in_parallel(self, evaluator, comm):
        import chainermn
        for name, it in list(evaluator._iterators.items()):
            shard = _shard(it.dataset, comm, shuffle=False)
            evaluator._iterators[name] = _rebuild(it, shard, it.batch_size)
        say('--data-parallel: {} -> each rank evaluates its shard, the results averaged '
            '(chainermn.create_multi_node_evaluator)'.format(type(evaluator).__name__),
            comm.rank)
        return chainermn.create_multi_node_evaluator(evaluator, comm)

    def _replace_eval_iterators(self, evaluator):
        for name, old in list(evaluator._iterators.items()):
            if not hasattr(old, 'batch_size') or not hasattr(old, 'dataset'):
                say('--loader-eval: {} iterator {!r} is a {}, which the launcher does not know '
                    'how to rebuild; left as it is'.format(type(evaluator).__name__, name,
                                                           type(old).__name__), self._rank())
                continue
            say('--loader-eval: {} {!r}: {}'.format(
                type(evaluator).__name__, name, self._swap(evaluator._iterators, name)),
                self._rank())

    def _patch_plain_update(self):
        """Until a StandardUpdater is built: a plain optimizer's update() means a custom loop
        the launcher cannot parallelise; stop instead of training P copies apart."""
        from chainer import optimizer as optimizer_module
        cls = optimizer_module.GradientMethod
        original = cls.update
        launch = self

        def update(opt, lossfun=None, *args, **kwds):
            if not launch.updaters:
                launch._stop('--data-parallel: the script updates {} itself (a custom training '
                             'loop, no Trainer and StandardUpdater), which the launcher cannot '
                             'parallelise safely; use a Trainer, or ChainerMN calls in the '
                             'script'.format(type(opt).__name__))
            cls.update = original  # checked once: no cost per step afterwards
            return original(opt, lossfun, *args, **kwds)

        cls.update = update

    def _rank(self):
        return None if self.communicator is None else self.communicator.rank

    def _stop(self, message):
        # Every rank builds the same updater, so every rank stops here, with the same words.
        raise SystemExit('rank {}: {}{}'.format(self._rank() if self._rank() is not None
                                                 else _world_rank(), PREFIX, message))

    def _build(self, dataset, batch, repeat, shuffle):
        from chainer import iterators
        kind, k = self.get('loader'), self.get('loader_processes')
        if kind == 'serial':
            return (iterators.SerialIterator(dataset, batch, repeat=repeat, shuffle=shuffle),
                    'SerialIterator')
        if kind == 'multiprocess':
            k = k or 2
            return (iterators.MultiprocessIterator(dataset, batch, repeat=repeat,
                                                   shuffle=shuffle, n_processes=k),
                    'MultiprocessIterator ({} processes)'.format(k))
        plan = self._place()
        if k is None:
            k = 2 if plan.loader_cpus is None else max(1, min(2, len(plan.loader_cpus)))
        from chainermn_torus.loader import LoaderIterator
        from chainermn_torus.loader.topology import format_cpulist
        try:
            it = LoaderIterator(dataset, batch, repeat=repeat, shuffle=shuffle, n_processes=k,
                                cpus=plan.loader_cpus, seed=self._rank() or 0)
        except (AttributeError, TypeError, pickle.PicklingError) as e:
            if 'pickle' not in str(e):
                raise
            self._stop('--loader ours: the training dataset cannot be sent to the loader '
                       'processes, which start fresh interpreters and so pickle it ({}). Make '
                       'its pieces module-level classes and functions (not closures or '
                       'lambdas), or use --loader multiprocess'.format(e))
        where = 'affinity {}'.format(plan.policy) + (
            '' if plan.loader_cpus is None else ', loader CPUs {}, compute CPUs {}'.format(
                format_cpulist(plan.loader_cpus), format_cpulist(plan.compute_cpus)))
        return it, 'LoaderIterator ({} process{}, {})'.format(k, '' if k == 1 else 'es', where)

    def _place(self):
        if self._plan is not None:  # the training and evaluation loaders share one placement
            return self._plan
        from chainermn_torus.loader import apply_placement, plan_placement
        comm = self.communicator
        intra_rank, intra_size = (0, 1) if comm is None else (comm.intra_rank, comm.intra_size)
        error = None
        try:
            plan = plan_placement(policy=self.get('affinity'), intra_rank=intra_rank,
                                  intra_size=intra_size,
                                  loader_processes=self.get('loader_processes') or 1,
                                  dedicated_cores=self.get('dedicated_cores'))
        except ValueError as e:
            plan, error = None, str(e)
        errors = [error] if comm is None else comm.mpi_comm.allgather(error)
        if any(errors):
            failed = [r for r, e in enumerate(errors) if e]
            self._stop('--affinity {}: {}'.format(self.get('affinity'), error or (
                'stopping: rank(s) {} cannot place their loader processes: {}'.format(
                    ', '.join(map(str, failed)), next(e for e in errors if e)))))
        apply_placement(plan, threads=self.threads, comm=comm)
        self._plan = plan
        return plan

    def check_update(self):
        """Called by the multi-node optimizer at its first update."""
        if self.get('loader') is not None and not self.updaters:
            self._stop('--loader {}: this script trains without a chainer.training updater (a '
                       'custom loop called update() itself), so there is no training iterator '
                       'to replace; remove --loader, or train with a Trainer and a '
                       'StandardUpdater'.format(self.get('loader')))


class _AutoloadEverywhere(object):
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
        import os
        from chainer.serializers import npz
        from chainer.training.extensions._snapshot import _find_latest_snapshot
        found = _find_latest_snapshot(self.snapshot.filename, trainer.out)
        everyone = self.comm.mpi_comm.allgather(found)
        if len(set(everyone)) != 1:
            raise SystemExit(
                'rank {}: {}--data-parallel: snapshot(autoload=True) finds different snapshots '
                'in {} on different ranks ({}); every rank must resume from the same one: put '
                "the trainer's out directory on a file system all nodes share".format(
                    self.comm.rank, PREFIX, trainer.out, ', '.join(
                        'rank {}: {}'.format(r, f or 'none') for r, f in enumerate(everyone))))
        if found is not None and self.comm.rank != 0:  # rank 0's own extension loads it
            target = self.snapshot._target or trainer
            npz.load_npz(os.path.join(trainer.out, found), target)
        if found is not None:
            say('--data-parallel: every rank resumes from {} (snapshot autoload)'.format(found),
                self.comm.rank)

    def __call__(self, trainer):
        pass


def _shard(dataset, comm, shuffle):
    """This rank's part of a dataset every rank holds: exactly what
    ``chainermn.scatter_dataset(dataset, comm, shuffle=shuffle, seed=0)`` returns, without
    sending the dataset (a plain script built it on every rank, and it need not pickle)."""
    import numpy
    from chainer.datasets import SubDataset
    from chainermn.datasets.scatter import scatter_index
    sizes = comm.mpi_comm.allgather(len(dataset))
    if len(set(sizes)) != 1:
        raise SystemExit('rank {}: {}--data-parallel: the ranks built datasets of different '
                         'sizes ({}); a plain script must build the same data on every '
                         'rank'.format(comm.rank, PREFIX, sizes))
    order = numpy.random.RandomState(0).permutation(len(dataset)) if shuffle else None
    b, e = scatter_index(len(dataset), comm)
    return SubDataset(dataset, b, e, order)


def _order(it):
    """(repeat, shuffle) of a Chainer iterator (SerialIterator keeps them private)."""
    return (getattr(it, '_repeat', getattr(it, 'repeat', True)),
            getattr(it, '_shuffle', getattr(it, 'shuffle', None)))


def _rebuild(old, dataset, batch):
    """An iterator of the same kind as ``old`` over ``dataset`` with ``batch`` (the old one,
    if it runs processes, is finalized)."""
    from chainer import iterators
    repeat, shuffle = _order(old)
    if isinstance(old, iterators.MultiprocessIterator):
        new = iterators.MultiprocessIterator(dataset, batch, repeat=repeat, shuffle=shuffle,
                                             n_processes=old.n_processes,
                                             n_prefetch=old.n_prefetch,
                                             shared_mem=old.shared_mem)
    elif isinstance(old, iterators.MultithreadIterator):
        new = iterators.MultithreadIterator(dataset, batch, repeat=repeat, shuffle=shuffle,
                                            n_threads=old.n_threads)
    elif isinstance(old, iterators.SerialIterator):
        new = iterators.SerialIterator(dataset, batch, repeat=repeat, shuffle=shuffle)
    else:
        raise SystemExit('{}--data-parallel: the iterator is a {}, which the launcher does not '
                         'know how to rebuild over a shard (it rebuilds SerialIterator, '
                         'MultiprocessIterator, MultithreadIterator)'.format(
                             PREFIX, type(old).__name__))
    if hasattr(old, 'finalize'):
        old.finalize()
    return new


def _describe_iterator(it):
    name = type(it).__name__
    n = getattr(it, 'n_processes', None)
    return '{}({}batch_size={})'.format(name, '' if n is None else 'n_processes={}, '.format(n),
                                        it.batch_size)


def _world_rank():
    from mpi4py import MPI
    return MPI.COMM_WORLD.rank


def _fused_choice(actual_optimizer, requested):
    """The launcher's fused setting for this optimizer: never an error, a report instead."""
    if requested is False or requested is None:
        return False
    from chainermn_torus.optimizers import fusable_names
    return 'auto' if type(actual_optimizer).__name__ in fusable_names() else False


def report_optimizer(name, communicator, options, fused_applied):
    """The report line for a multi-node optimizer the script made under the launcher."""
    parts = []
    from chainermn_torus.optimizers import fused as fused_mod
    if fused_applied:
        parts.append('fused {} kernel'.format(name))  # the name the script used
    elif name not in fused_mod.fusable_names() and ACTIVE.get('fused') is not False:
        parts.append("{}: no fused kernel (fused: {}), Chainer's update".format(
            name, ', '.join(fused_mod.fusable_names())))
    else:
        parts.append("{}: Chainer's update ({})".format(
            name, '--no-fused' if ACTIVE.get('fused') is False else "the script's choice"))
    for key, text in (('flush_denormals', 'flush-to-zero'),
                      ('double_buffering', 'double buffering'),
                      ('overlap', 'overlap during backward'),
                      ('check_finite', 'finite check'), ('watchdog', 'watchdog {:g} s'),
                      ('check_replicas', 'replica check every {} steps')):
        v = options.get(key)
        if v:
            parts.append(text.format(v))
    say('create_multi_node_optimizer({}) -> {}'.format(name, ', '.join(parts)),
        getattr(communicator, 'rank', None))
