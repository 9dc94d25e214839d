"""``--data-parallel``: a plain Chainer script's training made data-parallel. Each rank's
iterator runs over its shard (as ``chainermn.scatter_dataset``), the optimizer becomes the
multi-node one, and the initial parameters are broadcast at the first update."""
import numpy
from chainer import iterators
from chainer.datasets import SubDataset
from chainermn.datasets.scatter import scatter_index

from chainermn_torus import _registry
from chainermn_torus.launch.lines import PREFIX, say
from chainermn_torus.runtime import report
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['parallelise', 'shard', 'rebuild', 'order']


def parallelise(launch, updater):
    if launch.updaters > 1:
        launch.stop('--data-parallel: this script builds a second updater; the launcher '
                    'parallelises scripts with one StandardUpdater and one Trainer (a GAN or '
                    'several training loops need ChainerMN calls in the script)')
    kind = type(updater).__name__
    if kind in ('ParallelUpdater', 'MultiprocessParallelUpdater'):
        # Each splits every batch among the GPUs of one process; data-parallel across
        # ranks replaces that, it does not nest inside it.
        launch.stop(f'--data-parallel: this script trains with {kind}, which splits each batch '
                    'among GPU devices in one process; on CPU ranks use the script with a '
                    'StandardUpdater (each rank is one replica), or ChainerMN calls in the '
                    'script')
    comm = launch.comm()
    old = chainer_private.iterators(updater)['main']
    dataset = old.dataset
    batch = old.batch_size
    # the ranks the job computes as: its processes, or --virtual-ranks
    ranks = comm.size if launch.virtual is None else comm.virtual_ranks
    if launch.get('global_batch'):
        if batch % ranks:
            launch.stop(f'--global-batch: the batch size {batch} does not divide among {ranks} '
                        'ranks; '
                        f'choose a multiple of {ranks} or leave --global-batch out '
                        f'(then {batch} is '
                        'per rank)')
        batch //= ranks
    from chainermn_torus.optimizers import is_multi_node  # with MPI, as the optimizer
    for name, opt in list(chainer_private.optimizers(updater).items()):
        if not is_multi_node(opt):
            chainer_private.optimizers(updater)[name] = \
                _registry.create_multi_node_optimizer(opt, comm)
    if launch.virtual is None:
        part = shard(dataset, comm, shuffle=True)
        chainer_private.iterators(updater)['main'] = rebuild(old, part, batch)
    else:
        held = launch.virtual.cut(dataset, comm, shuffle=True)
        part = held[0]
    say('--data-parallel: {} examples -> {} per rank (shuffled shards, as '
        'chainermn.scatter_dataset); batch {} per rank, {} in all on {} ranks ({}); the '
        'initial parameters are broadcast from rank 0 at the first update'.format(
            len(dataset), len(part), batch, batch * ranks, ranks,
            'the script\'s batch divided: --global-batch' if launch.get('global_batch')
            else 'as ChainerMN: the script\'s batch is per rank; --global-batch divides it'),
        comm.rank)
    if launch.virtual is not None:
        launch.virtual.adopt(updater, old, held, batch, comm)


def shard(dataset, comm, shuffle):
    """This rank's part of a dataset every rank holds: exactly what
    ``chainermn.scatter_dataset(dataset, comm, shuffle=shuffle, seed=0)`` returns, without
    sending the dataset (a plain script built it on every rank, and it need not pickle)."""
    sizes = comm.mpi_comm.allgather(len(dataset))
    if len(set(sizes)) != 1:
        report.stop(f'{PREFIX}--data-parallel: the ranks built datasets of different sizes '
                    f'({sizes}); a '
                    'plain script must build the same data on every rank',
                    comm.rank)
    perm = numpy.random.RandomState(0).permutation(len(dataset)) if shuffle else None
    b, e = scatter_index(len(dataset), comm)
    return SubDataset(dataset, b, e, perm)


def order(it):
    """(repeat, shuffle) of a Chainer iterator (SerialIterator keeps them private)."""
    return (getattr(it, '_repeat', getattr(it, 'repeat', True)),
            getattr(it, '_shuffle', getattr(it, 'shuffle', None)))


def rebuild(old, dataset, batch, order_sampler=None):
    """An iterator of the same kind as ``old`` over ``dataset`` with ``batch`` (the old one,
    if it runs processes, is finalized); ``order_sampler``: its shuffle's order (Chainer
    takes it in place of ``shuffle``)."""
    repeat, shuffle = order(old)
    kinds = dict(repeat=repeat, shuffle=shuffle)
    if order_sampler is not None:
        kinds = dict(repeat=repeat, order_sampler=order_sampler)
    if isinstance(old, iterators.MultiprocessIterator):
        new = iterators.MultiprocessIterator(dataset, batch, n_processes=old.n_processes,
                                             n_prefetch=old.n_prefetch,
                                             shared_mem=old.shared_mem, **kinds)
    elif isinstance(old, iterators.MultithreadIterator):
        new = iterators.MultithreadIterator(dataset, batch, n_threads=old.n_threads, **kinds)
    elif isinstance(old, iterators.SerialIterator):
        new = iterators.SerialIterator(dataset, batch, **kinds)
    else:
        raise SystemExit(f'{PREFIX}--data-parallel: the iterator is a {type(old).__name__}, which '
                         'the launcher does not '
                         'know how to rebuild over a shard (it rebuilds SerialIterator, '
                         'MultiprocessIterator, MultithreadIterator)')
    if hasattr(old, 'finalize'):
        old.finalize()
    return new
