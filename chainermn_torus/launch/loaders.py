"""``--loader serial|multiprocess|ours``: the training iterator (and with ``--loader-eval``
every evaluator's) rebuilt over the same dataset, batch size, repeat and shuffle. ``ours``
is the loader-process iterator placed by ``--affinity`` (the compute process is pinned and
its BLAS threads sized); the training and evaluation loaders share one placement."""
import pickle

from chainer import iterators

from chainermn_torus.launch.lines import describe_iterator, say
from chainermn_torus.launch.sharding import order
from chainermn_torus.loader import LoaderIterator, apply_placement, plan_placement
from chainermn_torus.loader.topology import format_cpulist
from chainermn_torus.runtime import agree
from chainermn_torus.runtime.chainer_glue import chainer_private

__all__ = ['replace_training_iterator', 'replace_eval_iterators', 'swap']

_KNOWN = (iterators.SerialIterator, iterators.MultiprocessIterator,
          iterators.MultithreadIterator)


def replace_training_iterator(launch, updater):
    old = chainer_private.iterators(updater).get('main')
    if not isinstance(old, _KNOWN):
        if isinstance(old, LoaderIterator):
            return
        launch.stop("--loader {}: the training iterator is a {}, which the launcher does "
                    "not know how to rebuild (it rebuilds {}); remove --loader or build one "
                    "of those".format(launch.get('loader'), type(old).__name__,
                                      ', '.join(k.__name__ for k in _KNOWN)))
    said = swap(launch, chainer_private.iterators(updater), 'main')
    if launch.get('loader') is None:  # chosen by --gpu-to-cpu (Launch.loader_kind)
        said = f'--gpu-to-cpu: {said} (--loader chooses another)'
    say(said, launch.rank())


def replace_eval_iterators(launch, evaluator):
    its = chainer_private.iterators(evaluator)
    for name, old in list(its.items()):
        if not hasattr(old, 'batch_size') or not hasattr(old, 'dataset'):
            say(f'--loader-eval: {type(evaluator).__name__} iterator {name!r} is '
                f'a {type(old).__name__}, which the launcher does not know '
                'how to rebuild; left as it is', launch.rank())
            continue
        say(f'--loader-eval: {type(evaluator).__name__} {name!r}: {swap(launch, its, name)}',
            launch.rank())


def swap(launch, its, name):
    """Rebuild ``its[name]`` as ``--loader`` asks (same dataset, batch, repeat and
    shuffle), finalize the old one; the report text."""
    old = its[name]
    new, how = _build(launch, launch.loader_kind(old), old.dataset, old.batch_size,
                      *order(old))
    if hasattr(old, 'finalize'):
        old.finalize()
    its[name] = new
    return f'{describe_iterator(old)} -> {how}'


def _build(launch, kind, dataset, batch, repeat, shuffle):
    k = launch.get('loader_processes')
    if kind == 'serial':
        return (iterators.SerialIterator(dataset, batch, repeat=repeat, shuffle=shuffle),
                'SerialIterator')
    if kind == 'multiprocess':
        k = k or 2
        return (iterators.MultiprocessIterator(dataset, batch, repeat=repeat,
                                               shuffle=shuffle, n_processes=k),
                f'MultiprocessIterator ({k} processes)')
    plan = _place(launch)
    if k is None:
        k = 2 if plan.loader_cpus is None else max(1, min(2, len(plan.loader_cpus)))
    try:
        it = LoaderIterator(dataset, batch, repeat=repeat, shuffle=shuffle, n_processes=k,
                            cpus=plan.loader_cpus, seed=launch.rank() or 0)
    except (AttributeError, TypeError, pickle.PicklingError) as e:
        if 'pickle' not in str(e):
            raise
        launch.stop('--loader ours: the training dataset cannot be sent to the loader '
                    f'processes, which start fresh interpreters and so pickle it ({e}). Make '
                    'its pieces module-level classes and functions (not closures or '
                    'lambdas), or use --loader multiprocess')
    where = f'affinity {plan.policy}' + (
        '' if plan.loader_cpus is None else f', loader CPUs {format_cpulist(plan.loader_cpus)}, '
                                            f'compute CPUs {format_cpulist(plan.compute_cpus)}')
    return it, 'LoaderIterator ({} process{}, {})'.format(k, '' if k == 1 else 'es', where)


def _place(launch):
    if launch.placement is not None:  # the training and evaluation loaders share it
        return launch.placement
    comm = launch.communicator
    intra_rank, intra_size = (0, 1) if comm is None else (comm.intra_rank, comm.intra_size)
    error = None
    try:
        plan = plan_placement(policy=launch.get('affinity'), intra_rank=intra_rank,
                              intra_size=intra_size,
                              loader_processes=launch.get('loader_processes') or 1,
                              dedicated_cores=launch.get('dedicated_cores'))
    except ValueError as e:
        plan, error = None, str(e)
    bad = agree.problems(None if comm is None else comm.mpi_comm, error)
    if bad:
        launch.stop('--affinity {}: {}'.format(launch.get('affinity'), error or (
            f'stopping: rank(s) {agree.ranks_text(bad)} cannot place their loader '
            f'processes: {bad[0][1]}')))
    apply_placement(plan, threads=launch.threads, comm=comm)
    launch.placement = plan
    return plan
