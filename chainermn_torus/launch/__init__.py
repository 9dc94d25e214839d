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
* ``--memory-snapshots K`` adds a snapshot in node memory every K iterations to the
  script's Trainer and restores from it where every rank holds one: a step that
  ``chainermn-torus elastic`` starts after a lost node goes on from there; a custom loop is
  refused at its first update;
* ``--checkpoint-dir DIR`` (``--checkpoint-interval N``, ``--auto-resume``) adds the
  examples' disk checkpoint to it, and resumes from the newest one: a lost batch host is
  survived only from disk. Under either, or as a step of ``chainermn-torus elastic``,
  ChainerMN's ``scatter_dataset(..., shuffle=True)`` without a seed draws the run's order
  (``extensions.checkpoint.shard_order``; ``--shuffle-seed N`` gives it), which a restart
  repeats;
* ``--tune on`` makes ``auto`` measure its best candidates on the first gradient calls
  (``--tune-dir``: where the choice is kept); ``--timeline PREFIX`` records the phases;
* ``--virtual-ranks V`` computes the job as V ranks on any P <= V processes (``virtual``):
  the communicators sum exactly, each process's updater runs its virtual ranks one after
  the other, each over its own shard, and the evaluators average over virtual ranks;
* ``--gpu-to-cpu`` runs a script written for GPUs on each rank's CPU (``gpu_to_cpu``); without
  it, such a script's first GPU call stops the job in one line naming the option.

The parts: ``options`` (the table as command-line options), ``hooks`` (the hooks into
Chainer), ``sharding`` (--data-parallel), ``loaders`` (--loader), ``extensions`` (what
Trainer.extend does), ``optimizer`` (the multi-node optimizers' options), ``lines`` (the
lines on rank 0), ``virtual`` (--virtual-ranks), ``gpu_to_cpu`` (a GPU-written script's
device calls). ``Launch`` below is the one entry: the resolved options and the state the
parts share.

Why it is built so: docs/internals.md (launch/__init__.py).
"""
import numpy
import chainermn.optimizers
from chainer import iterators

from chainermn_torus import _registry, communicators, config, process_setup, settings_table
from chainermn_torus.communicators import capabilities
from chainermn_torus.errors import ConfigError
from chainermn_torus.launch import options as _options
from chainermn_torus.launch import gpu_to_cpu, hooks, optimizer, virtual
from chainermn_torus.launch.lines import PREFIX, say
from chainermn_torus.runtime import report, world
from chainermn_torus.runtime.chainer_glue import patches
from chainermn_torus.runtime.watch import watchdog

__all__ = ['add_arguments', 'Launch']

add_arguments = _options.add_arguments


class Launch:
    """The resolved options (flag, else environment variable, else default), the state the
    parts share, and ``install()``, which puts them in place."""

    def __init__(self, opts, forced=None, defaults=None):
        # forced: (name, options) of --communicator; defaults: --grid and --segment-size
        # for every communicator of ours where --communicator is not given
        self.forced, self.defaults = forced, dict(defaults or {})
        self.settings = _options.resolve(opts)
        self.sources = {k: v[1] for k, v in self.settings.chosen().items()}
        self.given = set(self.sources)
        self.threads = self.settings['threads']
        self.placement = None      # the loader placement, made once for every loader
        self.updaters = 0          # StandardUpdaters the script made
        self.trainer_runs = 0      # Trainer.run calls (--memory-snapshots)
        self.communicator = None   # the last communicator the factory made
        self.script = opts.script
        self.gpu = None            # gpu_to_cpu.Said: what the script's GPU calls became
        self.run_seed = None       # (the run's seed, where it came from): unseeded shuffles
        self.virtual = None        # --virtual-ranks: the held shards and updater (virtual.Held)

    def get(self, key):
        return self.settings[key]

    def install(self):
        # The process's settings from here on: these, resolved once from the flags.
        config.install(self.settings)
        # The watchdog starts with the script's first communicator (start-up is watched
        # too), not with its optimizer, where the launcher's flags would reach it first;
        # before that, from here (watchers.startup_watch): first, before anything below
        # starts MPI, whose MPI_Init waits for every rank.
        watchdog.watch_from_start()
        if self.get('global_batch') and not self.get('data_parallel'):
            raise ConfigError('--global-batch goes with --data-parallel (the batch size of a '
                              "plain script's iterator); ChainerMN scripts choose theirs")
        if self.get('virtual_ranks') is not None:
            refused = virtual.refusal(self)
            if refused is not None:
                raise ConfigError(refused)
            self.virtual = virtual.Held(self)
        if self.get('loader_eval') and self.get('loader') is None:
            raise ConfigError('--loader-eval rebuilds the evaluation iterators as --loader '
                              'does; give --loader serial|multiprocess|ours with it')
        wire = self.get('allreduce_dtype')
        if self.get('fp16_allreduce'):
            if wire not in (None, 'float16'):
                raise ConfigError('--fp16-allreduce sends float16, and {} asks for {}: give '
                                  'one of them'.format(self.sources['allreduce_dtype'], wire))
            wire = 'float16'
        forced_options = {} if wire is None else {'allreduce_grad_dtype': {
            'float16': numpy.float16, 'float32': numpy.float32}.get(wire, wire)}
        # --tune and --tune-dir reach auto in the settings the factory hands down (one
        # channel: their source, the flag, named in what auto says), not as its keywords.
        # The script's GPU calls: mapped with --gpu-to-cpu, else refused in one line.
        self.gpu = gpu_to_cpu.install(self.script, self.get('gpu_to_cpu'),
                                      world.launcher_rank() or 0,
                                      self.get('gpu_to_cpu_paths'),
                                      self.sources.get('gpu_to_cpu_paths'),
                                      self.get('trust_gpu_to_cpu_paths'))
        # What both factories return, decided here once: the policy they read.
        _registry.install(_registry.Policy(
            forced=self.forced, defaults=self.defaults, forced_options=forced_options,
            rename=self.gpu.rename, on_made=self._communicator_made,
            optimizer_options=lambda actual, given: optimizer.options_for(self, actual, given),
            optimizer_made=lambda *made: optimizer.made(self, *made),
            first_update=self.check_update))
        # The process, now (MPI starts here), for a plain script that makes no communicator
        # too. The script's first communicator starts the watch, and sizes the threads
        # unless --threads asks for them now: numba's threads, once started, fix
        # multiprocessing's start method, which a script may set before then (ChainerMN's
        # ImageNet example: forkserver).
        process_setup.init(None, ours=True, later=('watch',) if self.sources.get(
            'threads') == '--threads' else ('threads', 'watch'))
        # Either import path of ChainerMN's factory makes ours, with the launcher's options.
        patches.apply(chainermn.optimizers, 'create_multi_node_optimizer',
                              _registry.create_multi_node_optimizer, 'launcher',
                              'either import path of ChainerMN\'s factory makes ours')
        virtual_ranks = self.virtual is not None
        if self.get('loader') is not None or self.get('data_parallel') or \
                self.get('gpu_to_cpu') or virtual_ranks:
            hooks.patch_updater(self)
        if self.get('data_parallel') or self.get('loader_eval'):
            hooks.patch_trainer(self)
        if self.get('memory_snapshots') or self.get('checkpoint_dir'):
            hooks.patch_trainer_run(self)
        if self.get('memory_snapshots') or self.get('checkpoint_dir') or virtual_ranks or \
                self.get('shuffle_seed') is not None or self.get('elastic_step') is not None:
            hooks.patch_scatter(self)
        if virtual_ranks:
            hooks.patch_evaluator_factory(self)
            hooks.patch_model_parallel(self, virtual.MODEL_PARALLEL)
            # An unseeded script's initial weights (and anything else drawn from numpy's
            # global state before training) the same in every run, as its shards are.
            numpy.random.seed(virtual.seed(self))
            say(f'--virtual-ranks {self.get("virtual_ranks")}: numpy\'s global random state '
                f'seeded with {virtual.seed(self)} before the script (the run\'s seed: '
                '--shuffle-seed, else 0), so every run of this job is the same on any P',
                world.launcher_rank() or 0)
        if self.get('data_parallel'):
            hooks.patch_plain_update(self)
            hooks.patch_save(self)

    def _communicator_made(self, comm, asked, made):
        self.communicator = comm
        ours = capabilities.of(comm).ours
        if asked != made or (self.get('fp16_allreduce') and ours):
            describe = comm.describe() if ours else type(comm).__name__
            say("create_communicator({!r}) -> {}{}".format(asked, describe, (
                '' if asked == made else ' (forced by --communicator)'
                if _registry.policy().forced is not None else
                " (--gpu-to-cpu: ChainerMN's GPU communicator)")), comm.rank)
        if 'tune' in self.given and not _registry.takes_option(made, 'tune'):
            tuned = [n for n in _registry.names() if _registry.takes_option(n, 'tune')]
            say('--tune {} not applied: it is an option of {}, and create_communicator({!r}) '
                'made {}; add --communicator {}'.format(self.get('tune'), ', '.join(tuned),
                                                         asked, made, tuned[0]), comm.rank)
        if self.get('fp16_allreduce') and not ours:
            say("--fp16-allreduce not applied: create_communicator({!r}) made ChainerMN's {}, "
                'which sends float32 on CPU; add --communicator with one of {}'.format(
                    asked, type(comm).__name__, ', '.join(communicators.names('half'))),
                comm.rank)

    def loader_kind(self, iterator):
        """What ``iterator`` becomes: --loader's kind; under --gpu-to-cpu without --loader,
        a MultiprocessIterator (a GPU script's way to feed its GPU) becomes ``ours``; None:
        it stays."""
        if self.get('loader') is not None:
            return self.get('loader')
        if self.get('gpu_to_cpu') and isinstance(iterator, iterators.MultiprocessIterator):
            return 'ours'
        return None

    def comm(self):
        """The job's communicator: the script's, else one made now (collective: every rank
        builds its updater at the same point of the script)."""
        if self.communicator is None:
            chainermn.create_communicator('rsap')  # --communicator, if given, is forced
        return self.communicator

    def rank(self):
        return None if self.communicator is None else self.communicator.rank

    def stop(self, message):
        # Every rank builds the same updater, so every rank stops here, with the same words.
        rank = self.rank()
        if rank is None:
            from mpi4py import MPI  # the script made no communicator yet: MPI starts here
            rank = MPI.COMM_WORLD.rank
        report.stop(PREFIX + message, rank)

    def check_update(self):
        """Called by the multi-node optimizer at its first update."""
        for key in ('memory_snapshots', 'checkpoint_dir'):
            if self.get(key) and not self.trainer_runs:
                option = settings_table.option_of(key)
                self.stop(f'{option} {self.get(key)}: this script trains without a '
                          'chainer.training Trainer (a '
                          'custom loop called update() itself), so there is no trainer to '
                          f'keep; remove {option}, or train with a Trainer')
        if self.virtual is not None and self.virtual.updater is None and \
                not self.virtual.script_updater:
            self.stop('--virtual-ranks {}: this script updates its optimizer itself (a custom '
                      'training loop, no StandardUpdater), whose batches the launcher cannot '
                      'give each virtual rank; train with a Trainer and a StandardUpdater, or '
                      'without --virtual-ranks'.format(self.get('virtual_ranks')))
        if self.get('loader') is not None and not self.updaters:
            self.stop('--loader {}: this script trains without a chainer.training updater (a '
                      'custom loop called update() itself), so there is no training iterator '
                      'to replace; remove --loader, or train with a Trainer and a '
                      'StandardUpdater'.format(self.get('loader')))
