"""``--virtual-ranks V``: an unchanged script's job computed as V ranks on P <= V processes.

The communicators of ours take V from the settings (``virtual_ranks``); here the script's
data, updater and evaluators are split the same way, whichever way the script shards:

* a ChainerMN script's ``scatter_dataset``: every process gets the whole dataset from the
  root and keeps the shards of the virtual ranks it holds, each the one ChainerMN gives that
  rank in a job of V ranks (``datasets.shards.virtual_shards``); the script sees the first;
* a plain script under ``--data-parallel``: the same shards, cut from the dataset it built.

The StandardUpdater then holds one iterator per held virtual rank (its kind, batch, repeat;
a shuffled one in orders keyed by the run's seed and the virtual rank)
and becomes ``optimizers.virtual_updater.VirtualRanksUpdater``; each ``Evaluator`` evaluates
each held virtual rank's shard (``extensions.virtual_evaluation``). An unseeded shuffle and
numpy's global state (an unseeded script's initial weights) take the run's seed,
``--shuffle-seed`` or 0: the same job on any P is the same job in every run.
"""

from chainermn_torus.algorithms import virtual_ranks
from chainermn_torus.datasets.shards import KeyedOrder, virtual_shards
from chainermn_torus.extensions.virtual_evaluation import evaluate_over_virtual_ranks
from chainermn_torus.launch.lines import say
from chainermn_torus.launch.sharding import order, rebuild
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['Held', 'seed', 'refusal', 'MODEL_PARALLEL', 'MODEL_PARALLEL_LINKS']

# ChainerMN's model-parallel functions and the multi-node BatchNormalization function: each
# communicates across processes inside a forward, where a process runs several virtual
# ranks one after the other (refused when called).
MODEL_PARALLEL = ('allgather', 'alltoall', 'batch_normalization', 'bcast', 'gather',
                  'pseudo_connect', 'recv', 'scatter', 'send')
# The links that hold such a function (refused when the updater is adopted).
MODEL_PARALLEL_LINKS = ('MultiNodeBatchNormalization', 'MultiNodeChainList')

# What a process of a virtual-ranks job cannot split, with the reason (install refuses;
# --double-buffering and --overlap are the multi-node optimizer's own refusal).
_REFUSED = {
    'loader': 'each virtual rank would need loader processes of its own',
}


def refusal(launch):
    """The one line for an option that cannot go with ``--virtual-ranks``, or None."""
    for key, why in _REFUSED.items():
        if launch.get(key):
            return (f'--virtual-ranks {launch.get("virtual_ranks")} with --'
                    f'{key.replace("_", "-")}: not available ({why}); leave one of them out')
    return None


def seed(launch):
    """The run's seed: ``--shuffle-seed``, else 0."""
    given = launch.get('shuffle_seed')
    return 0 if given is None else given


class Held:
    """The shards of the virtual ranks this process holds, by the first one (what the
    script saw), for the updater and evaluators built over them."""

    def __init__(self, launch):
        self.launch = launch
        self.shards = {}      # id(first shard) -> every held shard
        self.updater = None   # the VirtualRanksUpdater, once adopted
        self.said = False     # the scatter's line, once
        self.script_updater = False   # the script made a VirtualRanksUpdater itself

    def scatter(self, dataset, comm, root, shuffle, given_seed):
        """``scatter_dataset`` under virtual ranks: this process's first held shard."""
        dataset = comm.mpi_comm.bcast(dataset if comm.rank == root else None, root=root)
        if given_seed is None:
            given_seed = seed(self.launch)
        shards = virtual_shards(dataset, comm.virtual_ranks, comm.held, shuffle=shuffle,
                                seed=given_seed)
        self.shards[id(shards[0])] = shards
        if not self.said:
            self.said = True
            say(f'--virtual-ranks {comm.virtual_ranks}: scatter_dataset -> the shards of '
                f'virtual ranks {_span(comm.held)} on rank {comm.rank} (as ChainerMN cuts them '
                f'for {comm.virtual_ranks} ranks{_shuffled(shuffle, given_seed)})', comm.rank)
        return shards[0]

    def cut(self, dataset, comm, shuffle):
        """The held shards of a dataset a plain script built on every process."""
        sizes = comm.mpi_comm.allgather(len(dataset))
        if len(set(sizes)) != 1:
            self.launch.stop(f'--virtual-ranks: the ranks built datasets of different sizes '
                             f'({sizes}); a plain script must build the same data on every '
                             'rank')
        return virtual_shards(dataset, comm.virtual_ranks, comm.held, shuffle=shuffle,
                              seed=0 if shuffle else None)

    def of(self, iterator, comm, what):
        """The held shards behind ``iterator`` (its dataset from ``scatter``)."""
        found = self.shards.get(id(iterator.dataset))
        if found is None:
            self.launch.stop(
                f'--virtual-ranks: the {what} iterator runs over a dataset that did not come '
                'from chainermn.scatter_dataset, so the launcher cannot give each virtual '
                'rank its shard; a plain script needs --data-parallel')
        return found

    def iterators(self, old, shards, batch, comm):
        """One iterator of ``old``'s kind per held shard; a shuffled one in orders keyed by
        its virtual rank (the same on any P, and after a restore on another)."""
        repeat, shuffle = order(old)
        out = []
        for shard, v in zip(shards, comm.held):
            sampler = None if shuffle is False else KeyedOrder(seed(self.launch), v)
            out.append(rebuild(old, shard, batch, order_sampler=sampler))
        return out

    @staticmethod
    def script_holds(updater):
        """Whether the script made a VirtualRanksUpdater itself (this package's examples
        under the launcher): its shards and evaluators are its own already."""
        from chainermn_torus.optimizers.virtual_updater import VirtualRanksUpdater  # MPI
        return isinstance(updater, VirtualRanksUpdater)

    def note_updater(self, updater):
        """An updater the script built: whether it holds virtual ranks itself."""
        if self.script_holds(updater):
            self.script_updater = True
            return True
        return False

    def adopt(self, updater, old, shards, batch, comm):
        """The script's StandardUpdater as a VirtualRanksUpdater over the held shards."""
        from chainermn_torus.optimizers import is_multi_node  # with MPI, as the optimizer
        from chainermn_torus.optimizers.virtual_updater import VirtualRanksUpdater
        for name, opt in chainer_private.optimizers(updater).items():
            for path, link in opt.target.namedlinks():
                kind = type(link).__name__
                if kind in MODEL_PARALLEL_LINKS and type(link).__module__.startswith(
                        'chainermn.'):
                    self.launch.stop(
                        f'--virtual-ranks: the model holds ChainerMN\'s {kind} '
                        f'({path or "/"}), which communicates across processes inside the '
                        'forward, and a process runs several virtual ranks\' forwards one '
                        'after the other; use BatchNormalization (each virtual rank keeps '
                        'its own statistics), or no virtual ranks')
            if not is_multi_node(opt):
                self.launch.stop(f'--virtual-ranks: the updater\'s optimizer {name!r} is a '
                                 f'{type(opt).__name__}, not a multi-node optimizer: use '
                                 'chainermn.create_multi_node_optimizer, or --data-parallel')
        try:
            VirtualRanksUpdater.adopt(updater, self.iterators(old, shards, batch, comm))
        except ValueError as e:   # ConfigError: the updater is not a StandardUpdater
            self.launch.stop(str(e).replace('chainermn_torus: ', '', 1))
        self.updater = updater
        spread = virtual_ranks.describe(comm.virtual_ranks, comm.size)
        say(f'--virtual-ranks: {spread}; each a {len(shards[0])}-example shard at batch '
            f'{batch}, its own order, random state and running statistics, one after the '
            'other in a step; the gradients summed exactly', comm.rank)

    def evaluator(self, evaluator, comm, shards=None):
        """``evaluator`` over every held virtual rank's shard of its evaluation data."""
        old = chainer_private.iterators(evaluator)['main']
        if shards is None:
            shards = self.of(old, comm, 'evaluation')
        its = [rebuild(old, shard, old.batch_size) for shard in shards]
        say(f'--virtual-ranks: {type(evaluator).__name__} -> each virtual rank evaluates its '
            'shard, the means taken in virtual-rank order (the same on any P)', comm.rank)
        return evaluate_over_virtual_ranks(
            evaluator, comm, its,
            lambda: None if self.updater is None else self.updater.held_states)


def _shuffled(shuffle, given_seed):
    return f'; shuffled with seed {given_seed}' if shuffle else ''


def _span(held):
    return str(held[0]) if len(held) == 1 else f'{held[0]}-{held[-1]}'
